"""The delivery pass: the next message to hand out (new or redelivered), sent to a push subject or a waiting pull
request, counted and recorded as delivered (a mixin of Consumer)."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from rillet import lane
from rillet.jetstream import headers as H
from rillet.jetstream.consumer.state import (C_DELIVERED, C_MAXDELIV, C_UNDELIVERED)
from rillet.jetstream.log import Entry
from rillet.jetstream.stream import now_ns

from rillet.jetstream.consumer.common import (PENDING_MSGS, PENDING_BYTES, RUN_BUDGET, _clock, _headers_only, _ack_reply)

if TYPE_CHECKING:
    pass



def _plain_receivers(r: Any) -> bool:
    """The sublist result has receivers here and all of them are clients' subscriptions or internal callbacks
    marked ``run_safe`` (an MQTT session's delivery: it only queues bytes for its connection and acks nothing
    while called). Any other internal callback could change subscriptions or the consumer (whose fields the
    compiled run keeps in locals) while a run is being delivered."""
    psubs, qsubs = r.psubs, r.qsubs
    if not psubs and not qsubs:
        return False
    for sub in psubs:
        if sub.icb is not None and not getattr(sub.icb, "run_safe", False):
            return False
    for group in qsubs:
        for sub in group:
            if sub.icb is not None and not getattr(sub.icb, "run_safe", False):
                return False
    return True


def reference_run_frames(c: Any, m: Any, budget: int, acc: Any, r: Any, dsubj: bytes, wr: Any,
                         seqs: list[int]) -> None:
    """The messages of a run (DeliveryMixin._run_new), from ``m`` (loaded at the scan position) on, sent to the
    sublist result ``r`` of ``dsubj``: at most ``budget``, each as the one-by-one pass sends it. Moves the scan
    position and the pending count; appends the stream sequences sent to ``seqs`` (``c._failed`` set when the
    last one reached nobody); stops at the end of the stream, at the push flow control window, when the pull request
    ``wr`` expires. The reference of rillet._speedups._cjs.run_frames."""
    ic = c.ic
    deliver = acc.deliver_result
    prefix = c.ack_prefix
    maxpb = c.maxpb
    nd = c.dseq if c.dseq >= c._ndseq else c._ndseq
    expires = wr.expires if wr is not None else 0.0
    sent = 0
    lts = None
    try:
        while True:
            seq = m.seq
            c.sseq = seq + 1
            if not c.npc_dirty:
                c.npc -= 1
                pending = c.npc if c.npc > 0 else 0  # (num_pending with a clean count)
            else:
                pending = c.num_pending()
            reply = _ack_reply(prefix, 1, seq, nd, m.ts, pending)
            hdr, data = m.hdr, m.data
            sz = len(m.subject) + len(reply) + len(hdr) + len(data)
            if maxpb:
                c.pbytes += sz
            sent += 1
            if hdr:
                ok = deliver(ic, r, m.subject.encode("utf-8", "surrogateescape"), reply.encode(), len(hdr),
                             hdr + data, dsubj)
            else:
                ok = deliver(ic, r, m.subject.encode("utf-8", "surrogateescape"), reply.encode(), -1, data, dsubj)
            seqs.append(seq)
            lts = m.ts
            nd += 1
            if not ok:
                c._failed = True
                break
            if maxpb:
                # (_need_fc is called where it may answer True or count: a flow control request outstanding and
                # the window passed, or none outstanding and past half the window or acks by flow control)
                if (c.pbytes - c.fcsz >= c.maxpb) if c.fcid else (c.pbytes > c.maxpb // 2
                                                                     or c.ack_policy == "flow_control"):
                    if c._need_fc(sz):
                        c._send_fc()
                if c.pbytes > c.maxpb:
                    break
            if len(seqs) >= budget or (expires and _clock() >= expires):
                break
            ahead = c._ahead  # (what _next_in_run would give, without the call)
            if ahead and ahead[-1].seq == c.sseq:
                m = ahead.pop()
            else:
                m = c._next_in_run()
                if m is None:
                    break
    finally:
        ic.out_msgs += sent
        if lts is not None:
            c._replay_lts = lts


_run_frames = lane.run_frames  # (the reference above, or rillet._speedups._cjs.run_frames)
_NO_MSGS: list = []  # (never appended to: a run's read-ahead is a new list each time)
RUN_READ = 64  # messages a run reads from the store at once
RUN_READ_BYTES = 256 * 1024  # and about this many bytes


class DeliveryMixin:
    # ---- delivery -----------------------------------------------------------------------------------

    def kick(self) -> None:
        if not self._scheduled and not self.closed:
            self._scheduled = True
            self.loop.call_soon(self._run)

    def _next_msg(self) -> tuple[Any, int, int]:
        """(message, delivery count, source) — source 1 = redelivery queue, 2 = skip list, 0 = stream."""
        while self.rdq:
            seq = self.rdq.popleft()
            self.rdqi.discard(seq)
            if seq not in self.pending:
                continue
            dc = self.rdc.get(seq, 1) + 1
            if self.maxdc and dc > self.maxdc:
                self._max_deliveries_hit(seq, dc - 1)
                continue
            m = self._read(seq)
            if m is None:
                if self.refetch_wait == seq:  # (damaged, fetched again by the replica: delivered once back)
                    self.refetch_wait = 0
                    self.rdq.appendleft(seq)
                    self.rdqi.add(seq)
                    return None, 0, 0
                # gone from the stream meanwhile (or unreadable, logged): treat like an ack
                self.on_stream_remove(seq)
                continue
            return m, dc, 1  # the count is recorded by the delivery (C_DELIVERED)
        if self.maxp and len(self.pending) >= self.maxp:
            self._map_stalled = True
            return None, 0, 0
        if self.lss:
            seq = self.lss.pop(0)
            if not self.lss:
                self.lss = None
                self.sseq = self.lss_resume + 1
            else:
                self.sseq = seq + 1
            m = self._read(seq)
            if m is None:
                self.refetch_wait = 0  # (a skip list's message: skipped either way)
                return self._next_msg()
            if self.lss is None:
                self.npc_dirty = True
            elif not self.npc_dirty:
                self.npc -= 1
            return m, 1, 2
        m = self._load_next(self.sseq)
        if m is None:
            if self.refetch_wait:  # (damaged, fetched again by the replica: waited for, sseq stays there)
                self.sseq = self.refetch_wait
                self.refetch_wait = 0
                return None, 0, 0
            self._at_stream_end()
            return None, 0, 0
        self.sseq = m.seq + 1
        if not self.npc_dirty:
            self.npc -= 1
        return m, 1, 0

    def _at_stream_end(self) -> None:
        """Nothing more to read from ``sseq`` on: the next read starts past the stream's last message
        (sequences deleted on the way are passed over), and a clean pending count is 0."""
        last = self.stream.store.state().last_seq
        if self.sseq <= last:
            self.sseq = last + 1
        if self.npc and not self.npc_dirty:
            self.npc = 0

    def _undo(self, m: Any, dc: int, src: int) -> None:
        if src == 1:
            self.rdqi.add(m.seq)
            self.rdq.appendleft(m.seq)
        elif src == 2:
            if self.lss is None:
                self.lss = [m.seq]
            else:
                self.lss.insert(0, m.seq)
            self.sseq = m.seq
            if not self.npc_dirty:
                self.npc += 1
        else:
            self.sseq = m.seq
            if not self.npc_dirty:
                self.npc += 1

    def _max_deliveries_hit(self, seq: int, dc: int) -> None:
        self.js.advisories.max_deliveries(self.jsa, self.stream.name, self.name, seq, dc)
        self._propose(C_MAXDELIV, (seq, dc, self.sseq))

    def _flush_later(self) -> None:
        self._flush_soon = False
        self._flush_out()

    def _run(self, flush: bool = True) -> None:
        self._scheduled = False
        if self.closed or self._running:
            return
        self._running = True
        sent = 0
        loop = self.loop
        self._map_stalled = False
        self.stream.store.read_begin()
        try:
            while sent < RUN_BUDGET:
                if self.pause_until_ns and self.is_paused():
                    break
                if self.is_push:
                    if not self.active:
                        break
                    if self.maxpb and self.pbytes > self.maxpb:
                        break
                elif not self.waiting:
                    break
                if self._runs and not self.rdq and not self.lss:
                    n = self._run_new(RUN_BUDGET - sent)
                    if n > 0:
                        sent += n
                        continue
                    if n == 0:
                        break
                m, dc, src = self._next_msg()
                if m is None:
                    break
                # replay original timing: wait the gap between stored timestamps
                if self.replay_original and self._replay_lts and self._replay_ok_seq != m.seq:
                    delay = (m.ts - self._replay_lts) / 1e9
                    if delay > 0.001:
                        self._undo(m, dc, src)
                        self._replay_ok_seq = m.seq
                        self._delay(delay)
                        break
                pending = self.num_pending()
                nd = self.dseq if self.dseq >= self._ndseq else self._ndseq  # deliveries in flight count
                ack_reply = _ack_reply(self.ack_prefix, dc, m.seq, nd, m.ts, pending)
                hdr, data = m.hdr, m.data
                if self.headers_only:
                    hdr = _headers_only(hdr, len(data))
                    data = b""
                sz = len(m.subject) + len(ack_reply) + len(hdr) + len(data)
                if self.rate_bps and self._rl_paid != m.seq:
                    # token bucket in bytes: bps/8 a second, a burst of the largest message
                    now = loop.time()
                    rate = self.rate_bps / 8
                    self._rl_tokens = min(self._rl_burst, self._rl_tokens + (now - self._rl_last) * rate)
                    self._rl_last = now
                    self._rl_tokens -= sz
                    if self._rl_tokens < 0:
                        wait = -self._rl_tokens / rate
                        if wait > 0.001:
                            self._rl_paid = m.seq
                            self._undo(m, dc, src)
                            self._delay(wait)
                            break
                self._rl_paid = 0
                wrn = wrb = 0
                if self.is_push:
                    dsubj = self.deliver_subject_b
                    dsubj_s = self.deliver_subject
                else:
                    wr = self._next_waiting(sz)
                    if wr is None:
                        self._undo(m, dc, src)
                        break
                    dsubj = wr.reply_b
                    dsubj_s = wr.reply
                    wrn, wrb = wr.n, wr.b
                    if self.pin_id:  # pinned_client: every message tells the pin id
                        hdr = H.set_headers(hdr, [("Nats-Pin-Id", self.pin_id)])
                        sz = len(m.subject) + len(ack_reply) + len(hdr) + len(data)
                    if wr.n > 0 and wr.hb:
                        wr.hbt = _clock() + wr.hb
                self._replay_lts = m.ts
                ok = self._deliver(dsubj, ack_reply, m, hdr, data, dc, sz, dsubj_s, nd)
                sent += 1
                if not ok:
                    self._did_not_deliver(m.seq, dsubj, dc)
                    if self.is_push:
                        break
                    continue
                if not self.is_push and wrn <= 0 and wrb > 0:
                    h = H.make_headers([(PENDING_MSGS, str(wrn)), (PENDING_BYTES, str(wrb))], 409,
                                       "Batch Completed")
                    self._send(dsubj, None, h, b"")
            else:
                self.kick()  # budget used up: continue on the next loop iteration
        finally:
            self._running = False
            self.stream.store.read_done()
            if sent:
                self._last_send = loop.time()
                if not self.is_push and self.dthresh_s:
                    self.wq_last = self._last_send
            if not self.is_push and self.waiting and not self.closed:
                # one-shot (no_wait) requests end here, unless we only stopped at max_ack_pending
                self._process_waiting(eos=not self._map_stalled, flush=flush)
            if flush:
                self._flush_out()

    def _run_new(self, budget: int) -> int:
        """A run of new messages (first deliveries, from the scan position on) to one receiver, with one
        C_DELIVERED entry for the run (args ``(seqs, dseq, 1, ts)``: the stream sequences delivered as dseq,
        dseq + 1, ..., at ts) and one match of the deliver subject: the delivery pass's plain case. Returns the
        messages delivered (at most ``budget``), 0 when there is nothing to deliver now, -1 when the case is not
        plain (the pass then takes the next message one by one: redeliveries, rate limits, replay original,
        headers only, a pinned or prioritized request, several waiting requests, a byte limit, a receiver that
        is an internal callback or elsewhere, a consumer class that decides per delivery).

        Each message goes out as the one-by-one pass sends it (same frames, ack reply subjects, pending counts,
        flow control requests between them); the state after the entry is the one that a C_DELIVERED per
        message leaves, with one delivery time for the run (rillet._speedups._cjs.run_frames is this loop's
        compiled twin)."""
        if self.pin_id or (self.ack_none and self.retention != "limits"):
            return -1
        if self.maxp:
            room = self.maxp - len(self.pending)
            if room <= 0:
                return -1  # (the one-by-one pass notes the stall)
            if room < budget:
                budget = room
        wr = None
        if self.is_push:
            dsubj, dsubj_s = self.deliver_subject_b, self.deliver_subject
        else:
            wq = self.waiting
            if len(wq) != 1 or self.priority_policy != "none":
                return -1
            wr = wq[0]
            if wr.b > 0 or (wr.expires and _clock() >= wr.expires):
                return -1
            if wr.n < budget:
                budget = wr.n
            dsubj, dsubj_s = wr.reply_b, wr.reply
        acc = self.jsa.account
        r = acc.match(dsubj_s)
        if not _plain_receivers(r):
            return -1
        m = self._next_in_run()
        if m is None:
            if self.refetch_wait:  # (damaged, fetched again by the replica: waited for, as _next_msg does; passing
                self.sseq = self.refetch_wait  # the stream's end here would leave the refetched messages behind)
                self.refetch_wait = 0
                return 0
            self._at_stream_end()
            return 0
        d0 = self.dseq if self.dseq >= self._ndseq else self._ndseq
        seqs: list[int] = []
        try:
            _run_frames(self, m, budget, self._run_sink(acc, dsubj, dsubj_s), r, dsubj, wr, seqs)
        finally:
            self._ahead = _NO_MSGS
            n = len(seqs)
            if n:  # what went out is recorded, even when the store failed under the run
                self._record_run(seqs, d0, wr, dsubj)
        return n

    def _run_sink(self, acc: Any, dsubj: bytes, dsubj_s: str) -> Any:
        """What a run's frames (to ``dsubj``) are handed to (``deliver_result``): the account, which delivers
        them at once; a replicated consumer holds them until the run's entry commits
        (rillet.jetstream.cluster.consumers)."""
        return acc

    def _propose_run(self, seqs: list[int], d0: int) -> None:
        """The run's C_DELIVERED entry (``_record_run``)."""
        self.clog.propose(Entry(C_DELIVERED, (seqs, d0, 1, now_ns())))

    def _next_in_run(self) -> Any:
        """The message at or after the scan position for a run (``_load_next``'s): with no filter or one literal
        filter, from a batch the store reads in one go (``load_run``: consecutive sequences of one block, RUN_READ
        at a time, about RUN_READ_BYTES), kept only while the run lasts."""
        ahead = self._ahead
        seq = self.sseq
        if ahead:
            m = ahead.pop()
            if m.seq == seq:
                return m
            self._ahead = _NO_MSGS
        filters = self.filters
        if not filters or (len(filters) == 1 and not self.filters_wc[0]):
            # (one literal filter, an MQTT subscription's: the run stops at a message on another subject, which
            # _load_next's search then passes over)
            batch = self.stream.store.load_run(seq, RUN_READ, RUN_READ_BYTES, filters[0] if filters else None)
            if batch:
                batch.reverse()
                m = batch.pop()
                self._ahead = batch
                return m
        return self._load_next(seq)

    def _record_run(self, seqs: list[int], d0: int, wr: Any, dsubj: bytes) -> None:
        """One C_DELIVERED entry for a run sent as deliveries d0, d0 + 1, ... (``_run_new``), and what follows
        a delivery on the engine's side: the ack timer, the persisted state, the pull request's counts."""
        n = len(seqs)
        last = seqs[-1]
        self._ndseq = d0 + n
        self._propose_run(seqs, d0)
        if not self.ack_none and (self._ack_timer is None or self.backoff):
            self._arm_ack_timer(self._ack_delay(last))
        if self.persist is not None:
            self._mark_dirty()
        if wr is not None:
            wr.d += n
            wr.n -= n
            if wr.n <= 0:
                if self.waiting and self.waiting[0] is wr:
                    self.waiting.popleft()
            elif wr.hb:
                wr.hbt = _clock() + wr.hb
        if self._failed:
            self._failed = False
            self._did_not_deliver(last, dsubj, 1)

    def _deliver(self, dsubj: bytes, ack_reply: str, m: Any, hdr: bytes, data: bytes, dc: int, sz: int,
                 dsubj_s: str, dseq: int) -> bool:
        seq = m.seq
        # the delivery is recorded as it goes out (as nats-server, it is not held back for the commit);
        # the engine numbers the next one after it even before it is applied
        self._ndseq = dseq + 1
        self.clog.propose(Entry(C_DELIVERED, (seq, dseq, dc, now_ns())))
        if not self.ack_none and (self._ack_timer is None or self.backoff):
            self._arm_ack_timer(self._ack_delay(seq))
        if self.persist is not None:
            self._mark_dirty()
        if self.maxpb:
            self.pbytes += sz
        ok = self._send(dsubj, ack_reply.encode(), hdr, data, m.subject, dsubj_s)
        if self.maxpb and ok and self._need_fc(sz):
            self._send_fc()
        if self.ack_none and self.retention != "limits":
            from rillet.jetstream import retention
            retention.on_ack(self.stream, self, seq)
        return ok

    def _send(self, subject: bytes, reply: bytes | None, hdr: bytes, data: bytes, orig: str | None = None,
              subject_s: str | None = None) -> bool:
        """Publish into the account (no flush); True if someone received it.

        Deliveries keep the stored message's subject: the deliver/inbox subject only routes it."""
        ic = self.ic
        acc = self.jsa.account
        if hdr:
            msg = hdr + data
            hl = len(hdr)
        else:
            msg = data
            hl = -1
        ic.out_msgs = getattr(ic, "out_msgs", 0) + 1
        r = acc.match(subject_s if subject_s is not None else subject.decode("utf-8", "surrogateescape"))
        if not (r.psubs or r.qsubs):
            gw = self.js.server.gateway
            if gw is None or not gw.outo:
                return False  # (with gateways, the account's deliver_result sends it to the interested ones)
        if orig is None:
            return acc.deliver_result(ic, r, subject, reply, hl, msg)
        # shown with the stream subject; imports route it on by the subject it matched
        return acc.deliver_result(ic, r, orig.encode("utf-8", "surrogateescape"), reply, hl, msg, subject)

    def _flush_out(self) -> None:
        self.js.server.flush_clients()

    def _did_not_deliver(self, seq: int, dsubj: bytes, dc: int) -> None:
        # nobody got it: not a delivery
        if dc > 1:
            self._propose(C_UNDELIVERED, (seq, dc - 1))
        if self.is_push:
            self._interest_lost()
        else:
            reply = dsubj.decode("utf-8", "surrogateescape")
            self.waiting = deque(wr for wr in self.waiting if wr.reply != reply)
        if seq in self.pending:
            self._add_rdq(seq)
            if not self.is_push and self.waiting:
                self.kick()

