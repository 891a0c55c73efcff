"""Atomic batch publish (nats-server 2.12, streams with ``allow_atomic``).

Every message of a batch carries ``Nats-Batch-Id`` and ``Nats-Batch-Sequence`` (1, 2, ...); the last one also
``Nats-Batch-Commit: 1`` (it is stored), or ``Nats-Batch-Commit: eob`` (an end-of-batch marker that is not stored).

    message 1..n-1 ─► staged, answered with an empty reply (nothing stored yet)
    commit         ─► consistency checks over the whole batch (expected sequences, msg ids, rollups,
                      discard-new limits), then every message is stored in one go; one PubAck
                      ``{"stream","seq","batch","count"}`` for the commit
    gap / unknown batch / timeout / bad commit value ─► the batch is dropped, nothing stored, error answered
                      ("atomic publish batch is incomplete", ...), BATCH_ABANDONED advisory

Stored messages keep their ``Nats-Batch-*`` headers, as nats-server stores them. Batches are staged in memory
(nats-server also keeps a file copy of a file-storage R1 batch to survive a crash; a restart here drops it).
The commit is one ``Entry.BATCH`` log entry, checked against the stream's proposed state (entries still in
flight count); the store writes it all or nothing (the file store frames the batch's records so that
recovery drops a batch cut short by a crash), and the PubAck is sent once the entry is applied.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rillet.jetstream import headers as H
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import Entry
from rillet.jetstream.stream import now_ns

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQ = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"

# nats-server defaults (stream.go); module level so tests and embedders can lower them
MAX_BATCH_TIMEOUT = 10.0            # seconds of inactivity before a batch is abandoned
MAX_INFLIGHT_PER_STREAM = 50
MAX_INFLIGHT_TOTAL = 1000
MAX_BATCH_SIZE = 1000


def _limits(stream: "Stream") -> tuple[int, int, int, float]:
    """(per stream, total, size, timeout s): the server's ``jetstream { limits { batch {...} } }`` where set
    (above 0), else the defaults above (as nats-server)."""
    lim = stream.js.server_limits
    return (lim.max_batch_inflight_per_stream or MAX_INFLIGHT_PER_STREAM,
            lim.max_batch_inflight_total or MAX_INFLIGHT_TOTAL, lim.max_batch_size or MAX_BATCH_SIZE,
            lim.max_batch_timeout / 1e9 if lim.max_batch_timeout > 0 else MAX_BATCH_TIMEOUT)

_inflight_total = 0


class _Batch:
    __slots__ = ("id", "lseq", "msgs", "timer")

    def __init__(self, batch_id: str) -> None:
        self.id = batch_id
        self.lseq = 0
        self.msgs: list[tuple[str, bytes, bytes]] = []
        self.timer: Any = None


def batch_id(hdr: bytes) -> str:
    """The atomic batch id of a message ("" when it is not part of a batch; an empty id is no batch)."""
    if not hdr or b"Nats-Batch-Id" not in hdr:
        return ""
    return H.get_header(hdr, BATCH_ID) or ""


def _batches(stream: "Stream") -> dict[str, _Batch]:
    return stream.atomic_batches


def _drop(stream: "Stream", b: _Batch) -> None:
    global _inflight_total
    batches = _batches(stream)
    if batches.get(b.id) is b:
        del batches[b.id]
        _inflight_total -= 1
    if b.timer is not None:
        b.timer.cancel()
        b.timer = None
    b.msgs = []


def drop_all(stream: "Stream") -> None:
    """Forget every staged batch of a stream (stream stopped or deleted)."""
    for b in list(_batches(stream).values()):
        _drop(stream, b)


def _advisory(stream: "Stream", bid: str, reason: str) -> None:
    adv = stream.js.advisories
    d = adv._base("io.nats.jetstream.advisory.v1.stream_batch_abandoned")
    d["stream"] = stream.name
    if stream.js.domain:
        d["domain"] = stream.js.domain
    d["batch"] = bid
    d["reason"] = reason
    adv._send(stream.jsa, f"$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.{stream.name}", d)


def _arm(stream: "Stream", b: _Batch) -> None:
    if b.timer is not None:
        b.timer.cancel()

    def expire() -> None:
        b.timer = None
        if _batches(stream).get(b.id) is b:
            _drop(stream, b)
            _advisory(stream, b.id, "timeout")

    b.timer = stream.js.loop.call_later(_limits(stream)[3], expire)


def _abandon(stream: "Stream", b: _Batch, reason: str, err: ApiError) -> ApiError:
    _drop(stream, b)
    _advisory(stream, b.id, reason)
    return err


def process(stream: "Stream", bid: str, subject: str, reply: bytes | None, hdr: bytes, data: bytes) -> int:
    """One message of an atomic batch. Raises ApiError (answered by Stream.process); returns the last stored
    sequence on commit, else 0."""
    global _inflight_total
    cfg = stream.cfg
    if not cfg.allow_atomic:
        raise ApiError.make("ATOMIC_PUBLISH_DISABLED")
    if len(bid) > 64:
        raise ApiError.make("ATOMIC_PUBLISH_INVALID_BATCH_ID")
    v = H.get_header(hdr, BATCH_SEQ)
    v = v.strip() if v is not None else ""
    if not v.isdigit():
        raise ApiError.make("ATOMIC_PUBLISH_MISSING_SEQ")
    bseq = int(v)
    commit_v = H.get_header(hdr, BATCH_COMMIT)
    commit = commit_v is not None
    eob = commit_v == "eob"
    commit_invalid = commit and not eob and commit_v != "1"

    batches = _batches(stream)
    per_stream, total, max_size, _ = _limits(stream)
    b = batches.get(bid)
    if b is None:
        if bseq != 1:
            size = bseq - 1 if eob else bseq
            if size > max_size:
                raise ApiError.make("ATOMIC_PUBLISH_TOO_LARGE_BATCH", size=max_size)
            raise ApiError.make("ATOMIC_PUBLISH_INCOMPLETE_BATCH")
        if len(batches) + 1 > per_stream or _inflight_total + 1 > total:
            raise ApiError.make("ATOMIC_PUBLISH_TOO_MANY_INFLIGHT")
        b = _Batch(bid)
        batches[bid] = b
        _inflight_total += 1
        _arm(stream, b)
    if commit_invalid:
        _drop(stream, b)
        raise ApiError.make("ATOMIC_PUBLISH_INVALID_BATCH_COMMIT")
    b.lseq += 1
    if b.lseq != bseq or (bseq == 1 and eob):
        raise _abandon(stream, b, "incomplete", ApiError.make("ATOMIC_PUBLISH_INCOMPLETE_BATCH"))
    size = bseq - 1 if eob else bseq
    if size > max_size:
        raise _abandon(stream, b, "large", ApiError.make("ATOMIC_PUBLISH_TOO_LARGE_BATCH", size=max_size))
    if not eob:
        b.msgs.append((subject, hdr, data))
    if not commit:
        _arm(stream, b)
        if reply and not cfg.no_ack:
            stream._reply(reply, b"")  # staged: an empty answer, as nats-server sends
        return 0

    # ---- commit: check the whole batch, then store it all --------------------------------------------
    msgs = b.msgs
    _drop(stream, b)
    if eob:
        s, h, d = msgs[-1]
        msgs[-1] = (s, H.set_headers(h, [(BATCH_COMMIT, "1")]), d)
    checked = _check(stream, msgs)
    ts = now_ns()
    # one log entry for the whole batch: applied (and written) all or nothing; the PubAck once applied
    first = stream.proposed_last_seq() + 1
    entries = [(s, h, d, ts, ttl, msg_id) for (s, h, d), (ttl, msg_id) in zip(msgs, checked)]
    last = first + len(entries) - 1
    count = len(msgs)

    def done(res: Any, err: BaseException | None) -> None:
        if err is not None:
            stream._refused(reply, err)
            return
        if not cfg.no_ack:
            ack: dict[str, Any] = {"stream": stream.name}
            if stream.js.domain:
                ack["domain"] = stream.js.domain
            ack["seq"] = res[-1][0] if res else 0
            ack["batch"] = bid
            ack["count"] = count
            stream._ack(reply, ack)

    stream.propose(Entry.BATCH, (entries, first), done, held=True)
    return last


def _check(stream: "Stream", msgs: list[tuple[str, bytes, bytes]]) -> list[tuple[int, str]]:
    """nats-server's pre-proposal consistency checks over a batch. Returns (ttl, msg id) per message;
    ``msgs`` entries are replaced when a check rewrites the headers (schedules)."""
    from rillet.jetstream.stream import parse_ttl

    cfg = stream.cfg
    store = stream.store
    last = stream.proposed_last_seq()
    msg_ids: set[str] = set()
    inflight: dict[str, list[int]] = {}     # subject -> [ops, bytes]
    expected_per_subject: dict[str, int] = {}
    out: list[tuple[int, str]] = []
    for i, (subject, hdr, data) in enumerate(msgs):
        ttl = 0
        msg_id = ""
        if hdr:
            if H.get_header(hdr, H.EXPECTED_LAST_MSG_ID) is not None:
                raise ApiError.make("ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH", header=H.EXPECTED_LAST_MSG_ID)
            exp = H.get_header(hdr, H.EXPECTED_STREAM)
            if exp and exp != stream.name:
                raise ApiError.make("STREAM_NOT_MATCH")
            v = H.get_header(hdr, H.TTL)
            if v is not None:
                if not cfg.allow_msg_ttl:
                    raise ApiError.make("MESSAGE_TTL_DISABLED")
                try:
                    ttl = parse_ttl(v)
                except ValueError:
                    raise ApiError.make("MESSAGE_TTL_INVALID")
            msg_id = H.get_header(hdr, H.MSG_ID) or ""
            if msg_id:
                if (msg_id in msg_ids or stream._dedup_lookup(msg_id) is not None
                        or msg_id in stream._pids):
                    raise ApiError.make("ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE")
                msg_ids.add(msg_id)
            v = H.get_header(hdr, H.EXPECTED_LAST_SEQ)
            if v is not None:
                mlseq = last + i
                if not v.strip().isdigit() or int(v) != mlseq:
                    raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=mlseq)
                if inflight:  # only the first message of a batch may expect a last sequence
                    raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE_CONSTANT")
            v = H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ)
            if v is not None:
                subj = H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ) or subject
                if subj in inflight:
                    raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE_CONSTANT")
                want = int(v) if v.strip().isdigit() else -1
                if subj in expected_per_subject:
                    have = expected_per_subject[subj]
                else:
                    have = stream._last_seq_for(subj, True)
                if want != have:
                    raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=have)
                expected_per_subject[subj] = have
            elif H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ):
                raise ApiError.make("STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID")
            if b"Nats-Schedul" in hdr:  # message schedules: checked (and given their rollup) as usual
                from rillet.jetstream import schedules
                hdr = schedules.check(stream, subject, hdr)
                msgs[i] = (subject, hdr, data)
            v = H.get_header(hdr, H.ROLLUP)
            if v is not None:
                if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                    raise ApiError.make("STREAM_ROLLUP_FAILED", err="rollup not permitted")
                if v == "sub":
                    if subject in inflight:
                        raise ApiError.make("STREAM_ROLLUP_FAILED", err="batch rollup sub invalid")
                elif v == "all":
                    if inflight:
                        raise ApiError.make("STREAM_ROLLUP_FAILED", err="batch rollup all invalid")
                else:
                    raise ApiError.make("STREAM_ROLLUP_FAILED", err=f'rollup value invalid: "{v}"')
        ent = inflight.setdefault(subject, [0, 0])
        ent[0] += 1
        ent[1] += len(subject) + len(hdr) + len(data)
        if cfg.discard == "new":
            if cfg.max_msgs > 0 or cfg.max_bytes > 0:
                st = store.state()
                msgs_total = st.msgs + stream.inflight_count() + sum(e[0] for e in inflight.values())
                bytes_total = st.bytes + stream.inflight_bytes() + sum(e[1] for e in inflight.values())
                if cfg.max_msgs > 0 and msgs_total > cfg.max_msgs:
                    raise ApiError.make("STREAM_STORE_FAILED", err="maximum messages exceeded")
                if cfg.max_bytes > 0 and bytes_total > cfg.max_bytes:
                    raise ApiError.make("STREAM_STORE_FAILED", err="maximum bytes exceeded")
            if (cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0
                    and not (hdr and H.get_header(hdr, H.ROLLUP) is not None)):
                n = store.subjects_totals(subject).get(subject, 0) + ent[0] + stream.inflight_count(subject)
                if n > cfg.max_msgs_per_subject:
                    raise ApiError.make("STREAM_STORE_FAILED", err="maximum messages per subject exceeded")
        out.append((ttl, msg_id))
    return out
