"""Fast-ingest batch publish (nats-server 2.14+, streams with ``allow_batched``; ADR-50 "fast ingest").

A fast batch is not staged: each message is checked and stored on its own, as it arrives. Its control state
travels in the reply subject, ``<prefix>.<id>.<flow>.<gap>.<batch seq>.<op>.$FI``:

    flow   the most messages the client lets the server go between two flow acks (<= 0: 10; capped 65535)
    gap    "fail" (a missing batch sequence ends the batch) or "ok" (it is reported and skipped)
    op     0 start (seq 1), 1 append (seq > 1), 2 commit (store this one, end), 3 commit without storing this
           one (EOB, seq > 1), 4 ping (resend the last flow ack, report a gap up to seq)

Answers, all on the reply subject of the message that caused them:

    {"type":"ack","seq":N,"msgs":M}        flow ack: batch messages up to N were stored; next ack after M more
                                           (sent for seq 1 with seq 0, then every M stored; M starts at
                                           min(500, flow), or 1 when the stream has other fast batches, and
                                           moves towards 500 / number of fast batches by halving/doubling)
    {"type":"gap","last_seq":E,"seq":S}    messages E..S-1 never arrived
    {"type":"err","seq":S,"error":{...}}   message S failed a check (expected sequence, TTL, ...)
    {"stream","seq","batch","count"}       the final PubAck once everything up to the commit is stored: seq is
                                           the last stream sequence the batch stored, count its last batch seq
    {"error":{...},"stream","seq":0}       the batch is refused (disabled 10205, bad reply pattern 10206, id over
                                           64 characters 10207, unknown id 10208, too many in flight 10211), or
                                           the first message of a "fail" batch failed a check

In "fail" mode a gap, a message repeated, or a failed check ends the batch: the PubAck counts what came
before. In "ok" mode a gap is reported and the batch goes on; a failed check is reported with a "err".
Once a batch commits, its later messages are ignored. A batch idle for 10 s is forgotten silently.

Every stored message is an ordinary ``Entry.MSG`` proposed through the stream's log (the seam), checked by
``Stream.process`` like any publish; its completion (``FastMsg.stored`` / ``refused``, on the leader once the
entry applied) drives the flow acks and the final PubAck, so a replicated stream answers after commit.
A replicated stream (rillet.jetstream.cluster) carries a batch across a stream leader change, as
nats-server: a fast message's entry carries its reply subject, every replica records each batch's last
applied batch sequence (``Follower``; a commit removes the record), and a new leader takes the batches on
(``adopt``): back to the last stored batch sequence, nothing pending, not committing, and a flow ack
``{"type":"ack","seq":<last stored>,"msgs":N}`` on the batch's last reply tells the publisher where the
batch stands (what was in flight on the old leader and did not commit is reported as a gap by the next
message). The deposed leader keeps its batches as records (``records``). On a single server, a stopped
stream forgets its batches.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from rillet.gocompat.jsoncodec import unmarshal_plain
from rillet.jetstream import headers as H
from rillet.jetstream.errors import ApiError

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream

SUFFIX = b".$FI"

# nats-server defaults (stream.go); module level so tests and embedders can lower them
MAX_INFLIGHT_PER_STREAM = 1000
MAX_INFLIGHT_TOTAL = 50_000
MAX_ACK_MESSAGES = 500   # the most messages between two flow acks the server lets any batch reach
BATCH_TIMEOUT = 10.0     # seconds of inactivity before a batch is forgotten


def _timeout(stream: "Stream") -> float:
    """The server's ``jetstream { limits { batch { timeout } } }`` where set, else BATCH_TIMEOUT."""
    t = stream.js.server_limits.max_batch_timeout
    return t / 1e9 if t > 0 else BATCH_TIMEOUT

OP_START, OP_APPEND, OP_COMMIT, OP_EOB, OP_PING = range(5)

_inflight_total = 0
_json = msgspec.json.encode


class Req:
    """The control state one message's reply subject carries."""

    __slots__ = ("id", "seq", "flow", "gap_ok", "op")

    def __init__(self, bid: str, seq: int, flow: int, gap_ok: bool, op: int) -> None:
        self.id = bid
        self.seq = seq
        self.flow = flow
        self.gap_ok = gap_ok
        self.op = op

    @property
    def commit(self) -> bool:
        return self.op == OP_COMMIT or self.op == OP_EOB


def parse_reply(reply: str) -> Req | None:
    """The fast batch state in a ``....$FI`` reply subject, None when the pattern is invalid."""
    toks = reply[:-4].split(".")
    if len(toks) < 6:  # a prefix token, then id, flow, gap, seq, op
        return None
    bid, flow_s, gap, seq_s, op_s = toks[-5:]
    try:
        op = int(op_s)
    except ValueError:
        return None
    if op < OP_START or op > OP_PING:
        return None
    if not seq_s.isdigit():
        return None
    seq = int(seq_s)
    if seq == 0 or seq >= 2 ** 64 - 1:
        return None
    if seq == 1 and op == OP_EOB:
        return None
    if (op == OP_START and seq != 1) or (op == OP_APPEND and seq <= 1):
        return None
    if gap not in ("ok", "fail"):
        return None
    try:
        flow = int(flow_s)
    except ValueError:
        flow = 0
    if flow <= 0:
        flow = 10
    elif flow > 65535:
        flow = 65535
    return Req(bid, seq, flow, gap == "ok", op)


class Batch:
    """One fast batch on the stream leader."""

    __slots__ = ("id", "lseq", "sseq", "pseq", "fseq", "pending", "ack_msgs", "max_ack", "reply", "gap_ok",
                 "commit", "timer", "live")

    def __init__(self, bid: str, gap_ok: bool, max_ack: int) -> None:
        self.id = bid
        self.lseq = 0      # the highest batch sequence received
        self.sseq = 0      # the last stream sequence stored for the batch
        self.pseq = 0      # the last batch sequence stored (<= lseq)
        self.fseq = 0      # the batch sequence of the last flow ack (<= pseq)
        self.pending = 0   # messages proposed, not yet stored
        self.ack_msgs = 0
        self.max_ack = max_ack
        self.reply = b""
        self.gap_ok = gap_ok
        self.commit = False
        self.timer: Any = None
        self.live = True


def _batches(stream: "Stream") -> dict[str, Batch]:
    return stream.fast_batches


def _init_flow(batches: dict[str, Batch], b: Batch) -> None:
    # the only fast publisher gets what it asks (up to 500); with others it starts at every message
    b.ack_msgs = 1 if len(batches) > 1 else min(MAX_ACK_MESSAGES, b.max_ack)


def _forget(stream: "Stream", b: Batch) -> None:
    global _inflight_total
    if not b.live:
        return
    b.live = False
    _inflight_total -= 1
    if b.timer is not None:
        b.timer.cancel()
        b.timer = None
    batches = _batches(stream)
    if batches.get(b.id) is b:
        del batches[b.id]


def drop_all(stream: "Stream") -> None:
    """Forget every fast batch of a stream (stream stopped or deleted, or no longer the leader)."""
    for b in list(_batches(stream).values()):
        _forget(stream, b)


def _arm(stream: "Stream", b: Batch) -> None:
    if b.commit:
        return  # a committing batch waits for its last messages, then goes
    if b.timer is not None:
        b.timer.cancel()
    b.timer = stream.js.loop.call_later(_timeout(stream), _forget, stream, b)


def _send(stream: "Stream", reply: bytes, payload: bytes) -> None:
    if reply:
        stream._reply(reply, payload)


def _flow_ack(stream: "Stream", b: Batch, reply: bytes) -> None:
    _send(stream, reply, b'{"type":"ack","seq":%d,"msgs":%d}' % (b.fseq, b.ack_msgs))


def _pub_ack(stream: "Stream", b: Batch, reply: bytes) -> None:
    if not reply:
        return
    ack: dict[str, Any] = {"stream": stream.name}
    if stream.js.domain:
        ack["domain"] = stream.js.domain
    ack["seq"] = b.sseq
    ack["batch"] = b.id
    ack["count"] = b.lseq
    stream._reply(reply, _json(ack))


def _check_flow(stream: "Stream", b: Batch, reply: bytes) -> bool:
    """A flow ack when ``ack_msgs`` more messages were stored since the last one, with the flow moved
    towards this stream's share (500 / fast batches, at most what the client allows). True when sent."""
    am = b.ack_msgs
    if b.pseq < b.fseq + am:
        return False
    b.fseq += (b.pseq - b.fseq) // am * am
    share = min(max(MAX_ACK_MESSAGES // max(len(_batches(stream)), 1), 1), b.max_ack)
    if am < share:
        b.ack_msgs = min(am * 2, share)
    elif am > share:
        b.ack_msgs = max(am // 2, share)
    _flow_ack(stream, b, reply)
    return True


def _commit(stream: "Stream", b: Batch, reply: bytes) -> None:
    """End the batch: the PubAck now when everything received is stored, else when the last is."""
    if not b.live:
        return
    b.commit = True
    if b.timer is not None:
        b.timer.cancel()
        b.timer = None
    if b.lseq == b.pseq:
        _forget(stream, b)
        _pub_ack(stream, b, reply)


def _refuse(stream: "Stream", reply: bytes, err: ApiError) -> None:
    _send(stream, reply, _json({"error": err.to_dict(), "stream": stream.name, "seq": 0}))


def imported_reply(hdr: bytes) -> bytes | None:
    """The publisher's own ``.$FI`` reply of a message that came through a service import (its ``_R_.``
    reply subject hides it): nats-server keeps it as ``reply`` in the ``Nats-Request-Info`` client info."""
    v = H.get_header(hdr, "Nats-Request-Info")
    if not v:
        return None
    try:
        ci = unmarshal_plain(v)  # (a header a client may write: Go's rules, never a RecursionError)
    except ValueError:
        return None
    r = ci.get("reply") if isinstance(ci, dict) else None
    if not isinstance(r, str) or not r.endswith(".$FI"):
        return None
    return r.encode("utf-8", "surrogateescape")


def process(stream: "Stream", subject: str, reply: bytes, hdr: bytes, data: bytes, ctl: bytes | None = None) -> None:
    """A message published with a ``.$FI`` reply subject (on the stream leader). ``ctl``: the reply subject
    the batch controls are read from when it is not ``reply`` (a service import's ``_R_.`` reply, which
    the answers go to; see ``imported_reply``)."""
    global _inflight_total
    cfg = stream.cfg
    can_respond = not cfg.no_ack  # (no_ack silences the refusals and the first flow ack only, as nats-server)
    # the checks nats-server makes before it looks at the batch
    try:
        if cfg.sealed:
            raise ApiError.make("STREAM_SEALED")
        if stream.jsa.limited and stream.jsa.over_limit(cfg.storage, len(hdr) + len(data) + len(subject)):
            raise ApiError.make("ACCOUNT_RESOURCES_EXCEEDED")
        if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
            raise ApiError.make("STREAM_MESSAGE_EXCEEDS_MAXIMUM")
        if not cfg.allow_batched:
            raise ApiError.make("BATCH_PUBLISH_DISABLED")
        req = parse_reply((ctl or reply).decode("utf-8", "surrogateescape"))
        if req is None:
            raise ApiError.make("BATCH_PUBLISH_INVALID_PATTERN")
        if len(req.id) > 64:
            raise ApiError.make("BATCH_PUBLISH_INVALID_BATCH_ID")
        batches = _batches(stream)
        b = batches.get(req.id)
        if b is None:
            if req.seq != 1:
                raise ApiError.make("BATCH_PUBLISH_UNKNOWN_BATCH_ID")
            lim = stream.js.server_limits  # (max_batch_size is for atomic batches only, as nats-server)
            if len(batches) + 1 > (lim.max_batch_inflight_per_stream or MAX_INFLIGHT_PER_STREAM) or \
                    _inflight_total + 1 > (lim.max_batch_inflight_total or MAX_INFLIGHT_TOTAL):
                raise ApiError.make("BATCH_PUBLISH_TOO_MANY_INFLIGHT")
            b = Batch(req.id, req.gap_ok, req.flow)
            batches[req.id] = b
            _inflight_total += 1
            _init_flow(batches, b)
        if hdr and b"Nats-Required-Api-Level" in hdr:  # refuses the batch when too high; always removed
            from rillet.jetstream.api.common import _api_level_too_high
            if _api_level_too_high(hdr):
                _forget(stream, b)
                raise ApiError.make("REQUIRED_API_LEVEL")
            hdr = H.remove_headers(hdr, {H.REQUIRED_API_LEVEL})
    except ApiError as e:
        if can_respond:
            _refuse(stream, reply, e)
        return
    _arm(stream, b)

    if req.op == OP_PING:  # resend the last flow ack; a gap up to the ping's sequence is reported
        send_fc = True
        if req.seq > b.lseq:
            _send(stream, reply, b'{"type":"gap","last_seq":%d,"seq":%d}' % (b.lseq + 1, req.seq + 1))
            if b.gap_ok:
                b.lseq = req.seq
                if b.pending == 0:
                    b.pseq = b.lseq
                send_fc = not _check_flow(stream, b, reply)
            else:
                _commit(stream, b, reply)
                send_fc = b.live
        if send_fc:
            _flow_ack(stream, b, reply)
        return
    if b.commit:
        return  # ended (a gap or an error in "fail" mode): the client waits for the PubAck

    b.lseq += 1
    if b.lseq != req.seq:  # reported, also a sequence seen before (as nats-server 2.15.1 does)
        _send(stream, reply, b'{"type":"gap","last_seq":%d,"seq":%d}' % (b.lseq, req.seq))
        if b.gap_ok and req.seq > b.lseq:
            b.lseq = req.seq
        else:  # a gap in "fail" mode, or a sequence already seen: the batch ends here
            b.lseq -= 1
            _commit(stream, b, reply)
            return
    if req.commit:
        if req.op == OP_EOB:
            b.lseq -= 1
            if b.pending == 0:
                b.pseq = b.lseq
            _commit(stream, b, reply)
            return
        _commit(stream, b, reply)
    elif req.seq == 1 and can_respond:
        _flow_ack(stream, b, reply)  # the settings this publisher starts with (seq 0)
    stream.process(subject, reply, hdr, data, fast=FastMsg(stream, b, req.seq, reply, req.commit))


class FastMsg:
    """The fast batch side of one message's checks and log entry (the entry's ``ctx``)."""

    __slots__ = ("stream", "b", "seq", "reply", "commit")
    wait_write = False  # (answered at once, after writing what is gathered: Stream._msg_done)

    def __init__(self, stream: "Stream", b: Batch, seq: int, reply: bytes, commit: bool) -> None:
        self.stream = stream
        self.b = b
        self.seq = seq
        self.reply = reply
        self.commit = commit

    def proposed(self) -> None:
        self.b.pending += 1

    def stored(self, sseq: int) -> bool:
        """The message is stored (leader, after apply). True when the caller sends the plain batch PubAck
        (never: the PubAck is sent here); flow acks as due."""
        b, stream = self.b, self.stream
        reply = self.reply
        b.reply = reply
        if b.pending > 0:
            b.pending -= 1
        b.sseq = sseq
        b.pseq = b.lseq if b.pending == 0 else self.seq
        if b.lseq == b.pseq and b.commit:
            if b.live:
                _forget(stream, b)
                _pub_ack(stream, b, reply)
            return False
        if b.live:
            _check_flow(stream, b, reply)
        return False

    def duplicate(self, dseq: int) -> None:
        """The message's msg id was seen before: not stored, not an error."""
        b, stream = self.b, self.stream
        reply = self.reply
        if b.pending == 0:
            b.pseq = self.seq
            _check_flow(stream, b, reply)
        if not self.commit:
            return
        if not b.gap_ok and b.lseq == 1:  # a one message batch: a publish's duplicate answer
            _forget(stream, b)
            if reply:
                stream._reply(reply, b'{"stream":%s,"seq":%d,"duplicate": true,"batch":%s,"count":%d}'
                              % (_json(stream.name), dseq, _json(b.id), self.seq))
            return
        _commit(stream, b, reply)

    def error(self, err: ApiError, proposed: bool = False) -> None:
        """The message failed a check (or the store refused it): reported; the batch ends unless gaps are
        ok and this is not its commit."""
        b, stream = self.b, self.stream
        reply = self.reply
        if proposed and b.pending > 0:
            b.pending -= 1
        if not b.live:
            return
        if not b.gap_ok and b.lseq == 1:  # the first message of a "fail" batch: a publish's error answer
            _forget(stream, b)
            _refuse(stream, reply, err)
            return
        _send(stream, reply, b'{"type":"err","seq":%d,"error":%s}' % (self.seq, _json(err.to_dict())))
        if b.gap_ok and not self.commit:
            if proposed and b.pending == 0:
                b.pseq = b.lseq
            return
        b.lseq -= 1
        if b.pending == 0:
            b.pseq = b.lseq
        _commit(stream, b, reply)


# ---- a replicated stream: batches across leader changes (rillet.jetstream.cluster.streams) ----------------

class Follower:
    """What a replica knows of one fast batch from the entries it applied (nats-server records the same on
    followers): the last reply subject, batch sequence and stream sequence stored, the batch's mode."""

    __slots__ = ("id", "reply", "bseq", "sseq", "gap_ok", "flow", "at")

    def __init__(self, bid: str, reply: bytes, bseq: int, sseq: int, gap_ok: bool, flow: int, at: float) -> None:
        self.id = bid
        self.reply = reply
        self.bseq = bseq
        self.sseq = sseq
        self.gap_ok = gap_ok
        self.flow = flow
        self.at = at


def note_applied(records: dict[str, Follower], reply: bytes, sseq: int, now: float) -> None:
    """A fast batch message with ``reply`` was stored at ``sseq`` on a replica that is not the leader: record
    it (a commit ends the record)."""
    req = parse_reply(reply.decode("utf-8", "surrogateescape"))
    if req is None:
        return
    if req.commit:
        records.pop(req.id, None)
        return
    f = records.get(req.id)
    if f is None:
        if len(records) >= 64:  # (batches that ended without a commit entry: forgotten once idle, as the leader)
            for k in [k for k, r in records.items() if now - r.at > BATCH_TIMEOUT]:
                del records[k]
        records[req.id] = Follower(req.id, reply, req.seq, sseq, req.gap_ok, req.flow, now)
        return
    f.reply, f.bseq, f.sseq, f.at = reply, req.seq, sseq, now


def records(stream: "Stream", now: float) -> dict[str, Follower]:
    """The leader's live batches as records (it is losing leadership: the next leader may be it again)."""
    out: dict[str, Follower] = {}
    for b in _batches(stream).values():
        if b.live and not (b.commit and b.lseq == b.pseq):
            out[b.id] = Follower(b.id, b.reply, b.pseq, b.sseq, b.gap_ok, b.max_ack, now)
    return out


def adopt(stream: "Stream", recs: dict[str, Follower], now: float) -> int:
    """This replica became the stream leader: carry on the batches it has records of (not idle for
    ``BATCH_TIMEOUT``), each reset to its last stored batch sequence, and tell each publisher with a flow ack
    (nats-server's fastBatchReset). Returns how many were taken on."""
    global _inflight_total
    batches = _batches(stream)
    n = 0
    for f in list(recs.values()):
        if now - f.at > _timeout(stream) or f.id in batches:
            continue
        b = Batch(f.id, f.gap_ok, f.flow)
        b.lseq = b.pseq = b.fseq = f.bseq
        b.sseq = f.sseq
        b.reply = f.reply
        batches[f.id] = b
        _inflight_total += 1
        _init_flow(batches, b)
        _arm(stream, b)
        _flow_ack(stream, b, f.reply)
        n += 1
    recs.clear()
    return n
