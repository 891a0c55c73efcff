"""A stream's answers to its publishers (the leader's side of ``rillet.jetstream.stream``): PubAcks and errors,
the group commit (``sync_interval: always``: one fsync for the appends that arrive together, then their acks)
and write-behind (a ``SingleNodeLog`` stream, or a clustered R1 stream while its group runs solo, with a file
store): the store gathers the plain appends of a loop pass, the replies after the pass's first are held, and
``StoreWriter``, queued in the server's pending output like a connection, writes what was gathered with one
write and then sends the held replies together (``send_replies``: one sublist result per reply prefix when it
stands for every subject under it). A PubAck leaves only once its message is written to the OS; if that write
fails, the store takes the messages back and their held acks become the store's error.

``ReplyMixin`` is part of ``Stream``; it reads the fields ``Stream.__init__`` sets (``_held``, ``_hold``,
``_wb_*``, ``_writer``, ``_acks``, ``_sync_scheduled``, ``store_failed``)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgspec

from rillet import lane as _lane
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import LeadershipLost, NotLeader
from rillet.jetstream.store import base as store_base

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream

_json = msgspec.json.encode


class ReplyMixin:
    """The publish answers of ``Stream``."""

    def _reply(self, reply: bytes, payload: bytes, hdr: bytes = b"", seq: int = 0) -> None:
        """Answer a publish (``seq``: the message a PubAck is for). On one server the answers of a loop pass
        wait for the writer (after the store's gathered records are written), in order, and go out together."""
        held = self._held
        if held is not None:
            if self._hold:
                held.append((reply, payload, hdr, seq))
                return
            # the pass's first answer goes out now (its message was written at once: nothing was gathered
            # yet); from here to the end of the pass appends are gathered and answers held
            self._arm()
        self._publish_reply(reply, payload, hdr)

    def _fast_answer(self, fast: Any, seq: int, kind: int, arg: Any) -> None:
        """An answer object's answer (``Stream.process``'s ``fast``): ``kind`` 0 stored message ``seq``, 1 a
        duplicate of ``arg``, 2 the error ``arg`` of a check, 3 the error ``arg`` of applying it. One that waits
        for the write (``wait_write``: the MQTT store's, which answers a client in order) is held, in order,
        while the pass's gathered records are not written, and ``write_held`` answers it after the write (with
        the store's error if the write took the message back); the pass's first is answered at once and
        gathering starts for the rest of the pass, as for a PubAck (``_reply``)."""
        hf = self._held_fast
        if fast.wait_write and (hf or self._wb_pending):
            hf.append((fast, seq, kind, arg))
            return
        _answer(fast, seq, kind, arg)
        if kind == 0 and fast.wait_write and self._wb_store and not self._hold:
            self._arm()

    def _skip_done(self, entry: Any, res: Any, err: BaseException | None) -> None:
        """A skipped message's sequence was used (``_no_interest``): its PubAck, or the store's error."""
        reply = entry.ctx
        if err is not None:
            self._refused(reply, err)
            return
        if reply is not None and reply.__class__ is not bytes:  # an answer object (the MQTT store's)
            self._fast_answer(reply, res, 0, None)
        elif reply and not self.cfg.no_ack:
            dom = b',"domain":' + _json(self.js.domain) if self.js.domain else b""
            self._ack_payload(reply, b'{"stream":%s%s,"seq":%d}' % (_json(self.name), dom, res), res)

    def _refused(self, reply: bytes | None, err: BaseException) -> None:
        """An entry the log could not apply: answered with nats-server's error (a store refusal is part of
        the protocol; anything else is logged too). An entry whose outcome is unknown (leadership lost
        after it was proposed: it may still commit) gets no answer."""
        if isinstance(err, LeadershipLost):
            return
        fast = None
        if reply is not None and reply.__class__ is not bytes:  # a fast batch message (fastbatch.FastMsg)
            fast, reply = reply, None
        elif isinstance(err, NotLeader):
            # not (or no longer) the leader when it came to propose: no answer, as nats-server. A deposed
            # leader still subscribed (resuming from a pause, cut off) gets the publishes the new leader
            # stores and answers too: its "not the leader" would be the client's answer if it came first
            return
        if isinstance(err, ApiError):
            e = err
        else:
            if not isinstance(err, (store_base.StoreError, NotLeader)):
                self.js.log.error(f"Stream '{self.jsa.account.name} > {self.name}': applying an entry "
                                  f"failed: {err!r}")
            e = store_error(err)  # type: ignore[arg-type]
        if fast is not None:
            self._fast_answer(fast, 0, 3, e)
        elif reply:
            self._reply(reply, _json({"error": e.to_dict(), "stream": self.name, "seq": 0}))

    def _publish_reply(self, reply: bytes, payload: bytes, hdr: bytes = b"") -> None:
        if hdr:
            self.ic.publish(reply, None, hdr + payload, len(hdr))
        elif self._writer is not None and len(self._writer.memo) > 1:  # (a pass's first reply: the memo's result)
            send_replies(self.ic, [(reply, payload, hdr, 0)], self._writer.memo, False)
        else:
            self.ic.publish(reply, None, payload)

    def _ack(self, reply: bytes | None, ack: dict) -> None:
        if reply:
            self._ack_payload(reply, _json(ack))

    def _ack_payload(self, reply: bytes, payload: bytes, seq: int = 0) -> None:
        # persist_mode "async": acknowledged before the fsync even when the server syncs always
        if self.js.sync_always and self.cfg.persist_mode != "async":
            self._acks.append((reply, payload))
            if not self._sync_scheduled:
                self._sync_scheduled = True
                self.js.loop.create_task(self._group_commit())
        else:
            self._reply(reply, payload, b"", seq)

    def set_write_behind(self, on: bool) -> None:
        """Write-behind on or off for a stream whose log is not a ``SingleNodeLog``: a clustered R1 stream while
        its group runs solo (rillet.jetstream.cluster.streams StreamReplica.solo_check), when its entries are
        applied without the group's log, so the store is all there is, as on one server. Off (the group no
        longer solo): what is gathered is written now; a failed write takes those messages back and their held
        acks become the error, as at the end of a pass. (An entry applied through the group's log is never
        gathered: ``no_gather``.)"""
        if on == self._wb_store or self._writer is None or not hasattr(self.store, "write_behind"):
            return
        self._wb_store = on
        if on:
            self.store.write_behind(self._wb_armed, self._wb_failed)
            self.store.gather(False)  # (the next pass's first held reply turns gathering on: _arm)
            return
        self._wb_pending = False
        self._wb_n = self._wb_b = 0
        try:
            self.store.write_behind(on=False)
        except store_base.StoreError:
            pass  # (the store took the messages back and _wb_failed turned their acks into the error)

    def no_gather(self) -> None:
        """Before an entry of the group's log is applied: it is written at once (gathered records first), so
        a failed write can never take back what the log holds."""
        if self._wb_store:
            try:
                self.store.gather(False)
            except store_base.StoreError:
                pass  # (taken back, as in write_held; this entry's own append then fails on its own)
            self._wb_pending = False
            self._wb_n = self._wb_b = 0

    def _wb_armed(self) -> None:
        """The store gathered the first record of this pass (the replies are held already)."""
        self._wb_pending = True
        self._wb_msg_id = self._last_msg_id
        if not self._hold:
            self._arm()

    def _arm(self) -> None:
        self._hold = True
        if self._wb_store:
            self.store.gather(True)
        w = self._writer
        if w is not None and not w.queued:
            w.queued = True
            srv = self.js.server
            srv.pending_flush.append(w)
            srv.schedule_flush()  # (outside a read nothing else would flush: the next turn of the loop does)

    def _wb_failed(self, first: int, last: int, err: BaseException) -> None:
        """Writing the gathered records failed and the store took messages ``first``..``last`` back: their
        held PubAcks (and held answers of answer objects) become the error. (Gathered messages have no
        ``Nats-*`` header: no msg id or dedup entry to undo, only the last msg id they cleared.)"""
        self._last_msg_id = self._wb_msg_id
        held = self._held
        if held:
            body = _json({"error": store_error(err).to_dict(), "stream": self.name, "seq": 0})  # type: ignore[arg-type]
            for i, (reply, _, _, seq) in enumerate(held):
                if first <= seq <= last:
                    held[i] = (reply, body, b"", 0)
        hf = self._held_fast
        for i, (fast, seq, kind, _) in enumerate(hf):
            if kind == 0 and first <= seq <= last:
                hf[i] = (fast, 0, 3, store_error(err))  # type: ignore[arg-type]

    def write_held(self) -> None:
        """The writer's turn (end of the loop pass): write what the store gathered, then send the replies
        that waited for it."""
        if self._wb_pending:
            self._wb_pending = False
            self._wb_n = self._wb_b = 0  # (the ingest backlog's gathered part: rillet.jetstream.ingest)
            try:
                self.store.flush_writes()
            except store_base.StoreError:
                pass  # (the store took the messages back and _wb_failed turned their acks into the error)
        if self._wb_store:
            self.store.gather(False)
        self._hold = False
        hf = self._held_fast
        if hf:
            self._held_fast = []
            for fast, seq, kind, arg in hf:
                _answer(fast, seq, kind, arg)
        held = self._held
        if held:
            self._held = []
            if len(held) > 1:
                send_replies(self.ic, held, self._writer.memo)
            else:
                reply, payload, hdr, _ = held[0]
                self._publish_reply(reply, payload, hdr)

    async def _group_commit(self) -> None:
        """One fsync for every append since the last one, then their acks."""
        await asyncio.sleep(0)
        self._sync_scheduled = False
        acks, self._acks = self._acks, []
        try:
            if self._wb_pending:  # (write-behind on: gathered records are written here, on the loop's thread)
                self.store.flush_writes()
            await self.js.loop.run_in_executor(None, self.store.sync)
        except store_base.ErrSyncFailed as e:
            # the messages are written but not known durable: their publishers get no answer (the outcome is
            # unknown, as when a leader is lost) and the stream stops acknowledging anything new
            self.fail_store(str(e))
            return
        except Exception as e:  # (e.g. a full disk: the store refused, nothing was acknowledged)
            err = _json({"error": store_error(e).to_dict(), "stream": self.name, "seq": 0})
            for reply, _ in acks:
                self._reply(reply, err)
            return
        for reply, payload in acks:
            self._reply(reply, payload)

    def fail_store(self, why: str) -> None:
        """The store failed to make writes durable (``why``): from now on new messages are refused with
        ``why`` (503/10077) until the server restarts and recovers the store from what is on disk."""
        if not self.store_failed:
            self.store_failed = why
            self.js.log.error(f"JetStream stream '{self.jsa.account.name} > {self.name}': storage failure ({why}): "
                              "no further messages are accepted until the server restarts")


def _answer(fast: Any, seq: int, kind: int, arg: Any) -> None:
    """One answer of ``ReplyMixin._fast_answer``."""
    if kind == 0:
        fast.stored(seq)
    elif kind == 1:
        fast.duplicate(arg)
    else:
        fast.error(arg, proposed=kind == 3)


def same_for_last_token(acc: Any, prefix: str, r: Any) -> bool:
    """Whether every subject ``prefix.<one token>`` has the sublist result ``r``: nothing in it runs a
    callback here (which could change subscriptions), and no subscription that could match such a subject
    names its last token (each has ``*`` or ``>`` there, so it matches them all or none)."""
    if not (r.psubs or r.qsubs):
        return False
    for sub in r.psubs:
        if sub.icb is not None:
            return False
    for g in r.qsubs:
        for sub in g:
            if sub.icb is not None:
                return False
    n = prefix.count(".") + 2
    for sub in acc.sublist.reverse_match(prefix + ".*"):
        toks = sub.subject.split(".")
        last = toks[-1]
        if not (last == ">" or (last == "*" and len(toks) == n)):
            return False
    return True


# (send_replies) the most reply prefixes a stream's memo keeps; past it the memo starts again
MEMO_MAX = 256


def memo_for(acc: Any, memo: dict | None) -> dict:
    """``memo`` (a stream's, kept from pass to pass: reply prefix -> sublist result, or None) emptied unless the
    account's subscriptions are the ones it was made with (the sublist's insert and remove counts, which only
    grow, are where they were) and it is not full; a new one when None. Its stamp is kept under the key None."""
    if memo is None:
        return {}
    sl = acc.sublist
    stamp = (sl, sl._inserts, sl._removes)
    if len(memo) > MEMO_MAX or memo.get(None) != stamp:
        memo.clear()
        memo[None] = stamp
    return memo


def send_replies(ic: Any, held: list[tuple[bytes, bytes, bytes, int]], memo: dict | None = None,
                 fill: bool = True) -> None:
    """The replies a write held back, sent as ``InternalClient.publish`` would send them: most go to reply
    subjects that differ only in their last token (a client's PubAck inbox, ``_INBOX.<id>.<n>``), so the
    account's sublist result of the first is used for the others with the same prefix when it is the same
    for every such subject (``same_for_last_token``), instead of a sublist miss and a new delivery plan
    per reply. Accounts with subject mappings or a gateway step take the full path for each. ``memo``: the
    stream's results by prefix from earlier passes, used while the account's subscriptions are unchanged
    (``memo_for``); ``fill`` False: a prefix it does not have yet is not added (a lone reply's)."""
    acc = ic.account
    if acc.mappings or acc.gw is not None:
        for reply, payload, hdr, _ in held:
            ic.publish(reply, None, hdr + payload, len(hdr)) if hdr else ic.publish(reply, None, payload)
        return
    memo = memo_for(acc, memo)
    deliver = acc.deliver_result
    n = nb = 0
    last_pre = None  # (the prefix of the previous reply and its result: most follow one another)
    last_r: Any = None
    try:
        for reply, payload, hdr, _ in held:
            i = reply.rfind(b".")
            if hdr or i <= 0:
                ic.publish(reply, None, hdr + payload, len(hdr)) if hdr else ic.publish(reply, None, payload)
                continue
            pre = reply[:i]
            if pre == last_pre:
                r = last_r
            else:
                r = memo.get(pre, False)
                if r is False:
                    ic.publish(reply, None, payload)
                    if not fill:
                        continue
                    rs = reply.decode("utf-8", "surrogateescape")
                    r = acc.match(rs)
                    memo[pre] = r if same_for_last_token(acc, rs[:rs.rfind(".")], r) else None
                    continue
                last_pre, last_r = pre, r
            if r is None:
                ic.publish(reply, None, payload)
                continue
            n += 1  # (the counters the publish would move, added once at the end)
            nb += len(payload)
            deliver(ic, r, reply, None, -1, payload)
    finally:
        if n:
            ic.in_msgs += n
            ic.in_bytes += nb
    if n:
        ic.server.schedule_flush()


reference_send_replies = send_replies
if _lane.COMPILED:  # (its compiled twin, rillet._speedups._cjs; this one stays the reference)
    try:
        from rillet._speedups._cjs import send_replies  # noqa: F811
    except ImportError:  # (an extension built before the twin existed)
        pass


class StoreWriter:
    """A stream's write-behind writer in the server's ``pending_flush`` list, as a connection would be
    (``write_out``; no transport, never closed, no connection kind, so the producer stall checks pass it by):
    ``flush_clients`` at the end of a read (or of a loop turn) runs it before the publishers' output it
    releases is written in the same call."""

    __slots__ = ("stream", "queued", "memo")
    transport = None
    closed = False
    kind = None

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.queued = False
        self.memo: dict = {}  # (send_replies: reply prefix -> sublist result, kept from pass to pass)

    def write_out(self) -> None:
        self.queued = False
        self.stream.write_held()


def store_error(e: Exception) -> ApiError:
    """A store failure as the API error nats-server answers for it."""
    name = type(e).__name__
    text = {
        "ErrMaxMsgs": "maximum messages exceeded",
        "ErrMaxBytes": "maximum bytes exceeded",
        "ErrMaxMsgsPerSubject": "maximum messages per subject exceeded",
    }.get(name)
    if text is not None:
        return ApiError.make("STREAM_STORE_FAILED", err=text)
    if isinstance(e, store_base.ErrStoreFull):  # a full (or unwritable) disk: nats-server's 503/10023
        return ApiError.make("INSUFFICIENT_RESOURCES")
    return ApiError.make("STREAM_STORE_FAILED", err=str(e) or name)
