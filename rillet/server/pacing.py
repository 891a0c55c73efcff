"""Read pacing shared by client connections (rillet.server.client) and server-to-server connections
(rillet.cluster.conn): a read is parsed in slices under a time budget, its unparsed rest kept while the
transport's reading is paused, and a producer is held back a few milliseconds while a receiver it writes to
has too much output waiting (nats-server's fast-producer stall).

``ReadPacer`` holds the common part; a connection class keeps its own read loop and ``_resume`` (what it
does with bytes that arrived meanwhile differs) and chooses, through ``_stall_only`` / ``_stall_drops`` and
``_stall_for``, which receivers count and what a stall costs.
"""
from __future__ import annotations

import time
from typing import Any

# Fairness (one event loop: every callback is everyone's latency). A read is parsed in slices of READ_SLICE
# bytes; once a callback has spent READ_BUDGET seconds parsing, the rest of the read waits for a later loop
# pass (the transport's reading paused, the unparsed bytes kept here), so one connection's burst of SUBs,
# PINGs or requests cannot hold the loop. The parser keeps its own partial-frame state across slices.
READ_SLICE = 16 * 1024
READ_BUDGET = 0.002
# A slice's size adapts to what its commands cost: one that took longer than SLICE_TIME makes the next ones
# smaller in proportion (down to SLICE_MIN; 16 KB of SUBs costs ~5 ms, of tiny PUBs well under 1 ms), cheap
# full slices double it back, so no single slice holds the loop much past the budget either.
SLICE_TIME = 0.001
SLICE_MIN = 1024
# A read that is still being worked off from the loop (its rest resumed pass after pass: a burst) gets a
# smaller share per pass than a fresh one, so what others sent meanwhile waits ~0.5 ms per pass, not 2 ms
# (a request/reply takes two passes).
BACKLOG_BUDGET = 0.0005
# nats-server's fast-producer stall (client.go stalledWait): a client whose messages go to a receiver with
# more than 3/4 of max_pending waiting is held back 2 ms (5 ms when the receiver is at its limit), at most
# 10 ms per read, before anyone is cut as a slow consumer.
STALL_MIN = 0.002
STALL_MAX = 0.005
STALL_TOTAL = 0.010
STALL_READ = 64 * 1024  # nats-server reads at most 64 KB at a time: each such read has its own allowance
OWN_FLUSH = 64 * 1024  # (a client's own output, its PubAcks and the replies to it, is written when a read ends, or
# once this much waits: one write instead of one per slice, the socket writes being a tenth of a JetStream
# publisher's cost)
# A client's input that arrives while its CONNECT waits for a decision (an auth callout, an account JWT fetched
# from a URL resolver) is kept for then; past HELD_MAX bytes of it the transport's reading is paused, as
# nats-server's read loop waits in the callout (the kernel's socket buffers hold the rest), until the decision.
HELD_MAX = 64 * 1024
ROUTE_FLUSH = 16 * 1024  # (a route read is written out every this many bytes: a receiver nearing its limit stalls the route in time)


class ReadPacer:
    """Mixin: slice sizing, the stall allowance, pausing a read and the receiver scan behind a stall.

    Uses ``self.server``, ``self.transport`` and ``self.closed``; the class calls ``_init_pacing`` from
    ``__init__``, feeds each read to ``_paced`` and defines ``_feed_slice`` (its parser's part of a slice)
    and ``_resume`` (called from the loop after ``_pause``)."""

    _stall_only: Any = None  # only receivers of this ConnKind count (None: every receiver)
    # whether the output of each slice is written out (and the stall checked) before the next slice; when not
    # (a route), only at the end of the read, when the budget is spent, and every ROUTE_FLUSH bytes (a receiver nearing its limit still stalls the route in time), so that
    # what one read asks of the server's RAFT groups (a pull's acks and its next request, forwarded together)
    # is one pass of theirs, not one per slice (a slice that shrank under load split them)
    _flush_each_slice = True
    _stall_drops = False  # with no_fast_producer_stall, a congested receiver's output is dropped instead
    # a slice's aim (SLICE_TIME) and the most a callback parses whatever its budget: a connection lowers them
    # while its reads are found costly for others (a client's burst of requests nobody serves: rillet.server.client)
    _slice_time = SLICE_TIME
    _budget_cap = 1.0  # (no cap)
    _intake_held = False  # reading held from outside until further notice (a client: the JetStream API queue)

    def _init_pacing(self) -> None:
        self._backlog: bytes | None = None  # the unparsed rest of a read, while reading is paused
        self._slice = READ_SLICE  # bytes parsed per slice (see SLICE_TIME)
        self._resume_handle: Any = None
        self._stall_total = 0.0  # seconds this read has been stalled so far
        self._stall_read = 0  # bytes parsed since the allowance was renewed
        self._stall_start = 0.0

    def _paced(self, data: bytes, budget: float) -> None:
        """Feed ``data`` to the connection (``_feed_slice``) slice by slice until done, or until ``budget``
        seconds are spent or a receiver's pending output asks for a stall: then the rest waits (reading
        paused) and ``_resume`` takes it up from the loop. The read writes out what it produced itself
        (``_flush_and_stall``, ``_flush_late``): meanwhile ``Server.schedule_flush`` queues no loop pass
        (``hold_flush``), and one is queued at the end only for what is still waiting."""
        srv = self.server  # type: ignore[attr-defined]
        if not srv.hold_flush():
            self._paced_slices(data, budget)
            return
        try:
            self._paced_slices(data, budget)
        finally:
            srv.release_flush()

    def _paced_slices(self, data: bytes, budget: float) -> None:
        n = len(data)
        pos = 0
        start = t0 = time.monotonic()
        size = self._slice
        each = self._flush_each_slice
        unflushed = 0
        while True:
            if n - pos <= size:
                chunk = data if pos == 0 else data[pos:]
                pos = n
            else:
                chunk = data[pos:pos + size]
                pos += size
            pos = self._feed_slice(chunk, data, pos)
            if pos < 0:
                return
            if self._budget_cap < budget:  # (lowered by this slice)
                budget = self._budget_cap
            if each:
                # the late writers (the RAFT groups' runner: Server.pending_late) wait for the read's last slice
                # (or the one that spends the budget): one pass for what the whole read proposed; so does this
                # connection's own output (its PubAcks, replies to it) until OWN_FLUSH bytes of it wait: the
                # receivers' output still goes out, and their stall is checked, slice by slice
                more = pos < n and time.monotonic() - start < budget and not self._intake_held
                ttl = self._flush_and_stall(more, more and len(getattr(self, "out", b"")) < OWN_FLUSH)
                now = time.monotonic()
            else:
                now = time.monotonic()
                unflushed += len(chunk)
                if pos >= n or now - start >= budget or unflushed >= ROUTE_FLUSH or self._intake_held:
                    unflushed = 0
                    ttl = self._flush_and_stall()
                    now = time.monotonic()
                else:
                    ttl = 0.0
            if self.closed:  # type: ignore[attr-defined]
                self._flush_late()
                return
            if self._intake_held:
                self._flush_late()
                self._hold_reading(data[pos:])
                return
            took = now - t0
            t0 = now
            size = self._adapt_slice(size, len(chunk), took)
            if pos >= n:
                if ttl:
                    self._pause(b"", ttl)
                return
            if ttl or now - start >= budget:
                self._flush_late()
                self._pause(data[pos:], ttl)
                return

    def _feed_slice(self, chunk: bytes, data: bytes, pos: int) -> int:
        """Parse ``chunk`` (``data`` is parsed up to ``pos`` with it) and count it (``_count_read``); return
        where parsing goes on in ``data``, or -1 when this read stops here (its rest, if any, taken care of)."""
        raise NotImplementedError

    def _new_read(self) -> None:
        """A new read: its own stall allowance (nats-server resetReadLoopStallTime)."""
        self._stall_total = 0.0
        self._stall_read = 0

    def _count_read(self, nbytes: int) -> None:
        """``nbytes`` parsed: every STALL_READ bytes renew the allowance, as nats-server's 64 KB reads."""
        self._stall_read += nbytes
        if self._stall_read >= STALL_READ:
            self._stall_read = 0
            self._stall_total = 0.0

    def _adapt_slice(self, size: int, got: int, took: float) -> int:
        """The next slice's size after one of ``size`` bytes (``got`` of them there) took ``took`` seconds."""
        aim = self._slice_time
        if took > aim:
            if size > SLICE_MIN:
                size = self._slice = max(SLICE_MIN, int(size * aim / took))
        elif size < READ_SLICE and got >= size and took < aim / 4:
            size = self._slice = min(READ_SLICE, size * 2)
        return size

    def _flush_late(self) -> None:
        """Run the late writers a slice left for the end of the read (``Server.pending_late``), when the read
        stops early (paused, held, closed)."""
        srv = self.server  # type: ignore[attr-defined]
        if srv.pending_late:
            srv.flush_clients()

    def _flush_and_stall(self, hold_late: bool = False, keep_own: bool = False) -> float:
        """Write out what this slice produced (the late writers too unless ``hold_late``: more slices of this
        read follow); return how long to stall this producer (0: no stall).

        A receiver (other than this connection) that already has more than 3/4 of max_pending waiting
        holds this producer back, as nats-server's stall gate (``_stall_for`` says how long); with
        ``_stall_drops`` and ``no_fast_producer_stall`` the output for such a receiver is dropped instead
        (nats-server skips them), nobody waits."""
        srv = self.server  # type: ignore[attr-defined]
        pending = srv.pending_flush
        if keep_own and getattr(self, "flush_pending", False):
            try:
                pending.remove(self)  # (written with a later slice: flush_pending stays set)
            except ValueError:
                keep_own = False
        else:
            keep_own = False
        if not pending:
            if srv.pending_late and not hold_late:
                srv.flush_clients()
            if keep_own:
                pending.append(self)
            return 0.0
        mp = srv.opts.max_pending
        gate = mp // 4 * 3
        only = self._stall_only
        drop = self._stall_drops and srv.opts.no_fast_producer_stall
        worst = -1
        gated = None
        for c in pending:
            if c is self:
                continue
            t = getattr(c, "transport", None)
            if t is None or c.closed:
                continue
            if only is not None and getattr(c, "kind", None) != only:
                continue
            b = t.get_write_buffer_size()
            if b > gate:
                if drop:
                    c.out.clear()  # (dropped, as nats-server drops them for a stalled receiver)
                    continue
                if gated is None:
                    gated = []
                gated.append(c)
                if b > worst:
                    worst = b
        srv.flush_clients(hold_late)
        if keep_own:
            pending.append(self)
        if gated is None or self._stall_total >= STALL_TOTAL:
            return 0.0
        return self._stall_for(gated, worst, mp)

    def _stall_for(self, gated: list, worst: int, max_pending: int) -> float:
        """How long to stall for the congested receivers ``gated`` (the fullest has ``worst`` bytes waiting)."""
        return min(STALL_MIN, STALL_TOTAL - self._stall_total)

    def _pause(self, rest: bytes, delay: float) -> None:
        """Stop reading until a later loop pass (``delay`` seconds: a stall), keeping ``rest`` unparsed."""
        t = self.transport  # type: ignore[attr-defined]
        if t is None or self.closed:  # type: ignore[attr-defined]
            return
        self._backlog = rest
        t.pause_reading()
        loop = self.server.loop  # type: ignore[attr-defined]
        if delay > 0:
            self._stall_start = time.monotonic()
            self._resume_handle = loop.call_later(delay, self._resume)  # type: ignore[attr-defined]
        else:
            self._stall_start = 0.0
            self._resume_handle = loop.call_soon(self._resume)  # type: ignore[attr-defined]

    def _pause_behind_backlog(self) -> None:
        """Bytes arrived while a backlog is worked off (reading was resumed by someone else, or the transport
        had more): they queue behind it (the class keeps them) and the transport's reading stays paused."""
        t = self.transport  # type: ignore[attr-defined]
        if t is not None and not t.is_closing():
            t.pause_reading()

    def _hold_reading(self, rest: bytes) -> None:
        """Stop reading, ``rest`` kept unparsed, until whoever set ``_intake_held`` resumes it."""
        t = self.transport  # type: ignore[attr-defined]
        if t is None or self.closed:  # type: ignore[attr-defined]
            return
        self._backlog = rest
        t.pause_reading()

    _held_bytes = 0
    _held_paused = False

    def _hold_input(self, data: bytes) -> None:
        """``data`` arrived while the CONNECT waits (``_held``): kept, reading paused past HELD_MAX."""
        self._held.append(data)  # type: ignore[attr-defined]
        self._held_bytes += len(data)
        if self._held_bytes > HELD_MAX and not self._held_paused:
            t = self.transport  # type: ignore[attr-defined]
            if t is not None and not t.is_closing():
                t.pause_reading()
                self._held_paused = True

    def _end_hold(self) -> list[bytes] | None:
        """The CONNECT's decision came: what was held (for the parser), reading resumed after this callback."""
        held, self._held = self._held, None  # type: ignore[has-type]
        self._held_bytes = 0
        if self._held_paused:
            self._held_paused = False
            self.server.loop.call_soon(self._held_resume)  # type: ignore[attr-defined]
        return held

    def _held_resume(self) -> None:
        if self.closed:  # type: ignore[attr-defined]
            return
        held = self._held  # type: ignore[has-type]
        if held is not None:  # held again (an auth callout after the JWT fetch): paused until that decision
            self._held_bytes = sum(len(d) for d in held)
            self._held_paused = True
            return
        t = self.transport  # type: ignore[attr-defined]
        if self._backlog is None and t is not None and not t.is_closing():  # (else _resume resumes it)
            t.resume_reading()

    def _stall_ended(self) -> None:
        """At ``_resume``: a stall's time counts against the read's allowance."""
        if self._stall_start:
            self._stall_total += time.monotonic() - self._stall_start
            self._stall_start = 0.0
