"""nats-server's JetStream cluster entries: what the meta, stream and consumer groups put in their RAFT logs.

The data of an ``ENTRY_NORMAL`` entry (rillet.raft.gowire) starts with one operation byte; the rest depends on
it. Encodings as nats-server 2.15 writes them (``server/jetstream_cluster.go``, ``server/consumer.go``), our own
description and code; checked byte for byte against recorded Go traffic in tests/test_raft_gowire.py:

* meta group: ``OP_ASSIGN_STREAM``/``OP_UPDATE_STREAM``/``OP_REMOVE_STREAM`` and ``OP_ASSIGN_CONSUMER``/
  ``OP_REMOVE_CONSUMER``: the op byte, then the assignment as Go's ``json.Encoder`` writes it (compact JSON,
  HTML characters escaped, a trailing newline); ``OP_ASSIGN_CONSUMER_COMPRESSED``: the same JSON in an S2
  *stream* (framed). The meta snapshot: the JSON array of stream assignments (each with its consumers) in
  one S2 *block*, or empty when there is nothing.
* stream groups: ``OP_STREAM_MSG``: last sequence (u64), timestamp (ns, u64), u16-length subject, reply and
  headers, u32-length payload, then a uvarint of flags (1: sourced/mirrored); ``OP_COMPRESSED_STREAM_MSG``:
  the same body (without its op byte) as one S2 block (sent when the message is over 8 KiB and it
  compresses); ``OP_BATCH_MSG``/``OP_BATCH_COMMIT_MSG``: u16-length batch id, uvarint batch sequence, then an
  inner stream message entry (op byte included); ``OP_PURGE_STREAM``, ``OP_DELETE_MSG`` and
  ``OP_DELETE_RANGE``: JSON as above.
* consumer groups: ``OP_UPDATE_DELIVERED``: uvarints delivered seq, stream seq, delivery count, then a
  varint timestamp; ``OP_UPDATE_ACKS``: uvarints delivered seq, stream seq; ``OP_UPDATE_SKIP``: u64 stream
  seq; ``OP_RESET_SEQ``: u64 seq then the reply subject; ``OP_ADD_PENDING_REQUEST``/
  ``OP_REMOVE_PENDING_REQUEST``: the pull request's reply subject.

Servers also talk outside RAFT, on ``$JSC.`` subjects: ``$JSC.SYNC.<x>`` a replica's catch-up request (JSON,
reply ``$JSC.R.<y>``), answered on that reply by stream message / delete range entries as above (each with a
``$JSC.ACK.<z>.<n>`` reply for flow control) and an empty message at the end; ``$JSC.SI.<acc>.<stream>`` and
``$JSC.CI.<acc>.<stream>.<consumer>``: stream/consumer info asked of the replicas (JSON both ways);
``$JSC.ARU.<acc>.<peer id>``: an account's storage usage per tier (binary, see ``UsageUpdate``).

Every decoder raises ``GoWireError`` on malformed input and nothing else.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgspec

from rillet.cluster import s2
from rillet.gocompat import gojson
from rillet.raft.gowire import GoWireError, get_uvarint, get_varint, put_uvarint, put_varint

__all__ = [
    "OP_ASSIGN_STREAM", "OP_ASSIGN_CONSUMER", "OP_REMOVE_STREAM", "OP_REMOVE_CONSUMER", "OP_STREAM_MSG",
    "OP_PURGE_STREAM", "OP_DELETE_MSG", "OP_UPDATE_DELIVERED", "OP_UPDATE_ACKS", "OP_ASSIGN_CONSUMER_COMPRESSED",
    "OP_UPDATE_SKIP", "OP_UPDATE_STREAM", "OP_ADD_PENDING_REQUEST", "OP_REMOVE_PENDING_REQUEST",
    "OP_COMPRESSED_STREAM_MSG", "OP_DELETE_RANGE", "OP_BATCH_MSG", "OP_BATCH_COMMIT_MSG", "OP_RESET_SEQ",
    "OP_NAMES", "JsonEntry", "CompressedConsumerAssignment", "StreamMsg", "CompressedStreamMsg", "BatchMsg",
    "UpdateDelivered", "UpdateAcks", "UpdateSkip", "ResetSeq", "PendingRequest", "decode_entry",
    "encode_json_entry", "decode_meta_snapshot", "encode_meta_snapshot", "COMPRESS_THRESHOLD",
    "META_OPS", "STREAM_OPS", "CONSUMER_OPS", "parse_jsc_subject", "UsageUpdate", "JsonDoc", "Empty",
    "decode_jsc", "StreamSnapshot", "sync_request",
]

OP_ASSIGN_STREAM = 0
OP_ASSIGN_CONSUMER = 1
OP_REMOVE_STREAM = 2
OP_REMOVE_CONSUMER = 3
OP_STREAM_MSG = 4
OP_PURGE_STREAM = 5
OP_DELETE_MSG = 6
OP_UPDATE_DELIVERED = 7
OP_UPDATE_ACKS = 8
OP_ASSIGN_CONSUMER_COMPRESSED = 9
OP_UPDATE_SKIP = 10
OP_UPDATE_STREAM = 11
OP_ADD_PENDING_REQUEST = 12
OP_REMOVE_PENDING_REQUEST = 13
OP_COMPRESSED_STREAM_MSG = 14
OP_DELETE_RANGE = 15
OP_BATCH_MSG = 16
OP_BATCH_COMMIT_MSG = 17
OP_RESET_SEQ = 18

OP_NAMES = {
    OP_ASSIGN_STREAM: "assignStream", OP_ASSIGN_CONSUMER: "assignConsumer", OP_REMOVE_STREAM: "removeStream",
    OP_REMOVE_CONSUMER: "removeConsumer", OP_STREAM_MSG: "streamMsg", OP_PURGE_STREAM: "purgeStream",
    OP_DELETE_MSG: "deleteMsg", OP_UPDATE_DELIVERED: "updateDelivered", OP_UPDATE_ACKS: "updateAcks",
    OP_ASSIGN_CONSUMER_COMPRESSED: "assignCompressedConsumer", OP_UPDATE_SKIP: "updateSkip",
    OP_UPDATE_STREAM: "updateStream", OP_ADD_PENDING_REQUEST: "addPendingRequest",
    OP_REMOVE_PENDING_REQUEST: "removePendingRequest", OP_COMPRESSED_STREAM_MSG: "compressedStreamMsg",
    OP_DELETE_RANGE: "deleteRange", OP_BATCH_MSG: "batchMsg", OP_BATCH_COMMIT_MSG: "batchCommitMsg",
    OP_RESET_SEQ: "resetSeq",
}
META_OPS = frozenset({OP_ASSIGN_STREAM, OP_ASSIGN_CONSUMER, OP_REMOVE_STREAM, OP_REMOVE_CONSUMER,
                      OP_ASSIGN_CONSUMER_COMPRESSED, OP_UPDATE_STREAM})
STREAM_OPS = frozenset({OP_STREAM_MSG, OP_PURGE_STREAM, OP_DELETE_MSG, OP_COMPRESSED_STREAM_MSG,
                        OP_DELETE_RANGE, OP_BATCH_MSG, OP_BATCH_COMMIT_MSG})
CONSUMER_OPS = frozenset({OP_UPDATE_DELIVERED, OP_UPDATE_ACKS, OP_UPDATE_SKIP, OP_ADD_PENDING_REQUEST,
                          OP_REMOVE_PENDING_REQUEST, OP_RESET_SEQ})
_JSON_OPS = frozenset({OP_ASSIGN_STREAM, OP_ASSIGN_CONSUMER, OP_REMOVE_STREAM, OP_REMOVE_CONSUMER,
                       OP_UPDATE_STREAM, OP_PURGE_STREAM, OP_DELETE_MSG, OP_DELETE_RANGE})

COMPRESS_THRESHOLD = 8192  # a stream message whose subject+reply+headers+payload exceed this may be compressed
_MAX_DECOMPRESSED = 64 << 20
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_json_decoder = msgspec.json.Decoder()


def _loads(raw: bytes, what: str) -> Any:
    try:
        return _json_decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise GoWireError(f"{what}: bad JSON: {e}") from None


def go_json(doc: Any) -> bytes:
    """``doc`` as Go's ``json.Encoder.Encode`` writes it: compact, HTML-escaped, newline-terminated."""
    return gojson.dumps(doc) + b"\n"


@dataclass(frozen=True, slots=True)
class JsonEntry:
    """An op byte followed by one JSON document (assignments, updates, removals, purges, deletes, delete
    ranges). ``doc`` keeps the document's key order, so re-encoding gives Go's bytes back."""
    op: int
    doc: Any

    def encode(self) -> bytes:
        return bytes((self.op,)) + go_json(self.doc)


def encode_json_entry(op: int, doc: Any) -> bytes:
    if op not in _JSON_OPS:
        raise GoWireError(f"op {op} is not a JSON entry")
    return JsonEntry(op, doc).encode()


@dataclass(frozen=True, slots=True)
class CompressedConsumerAssignment:
    """``OP_ASSIGN_CONSUMER_COMPRESSED``: a consumer assignment's JSON in an S2 stream. ``raw`` is the stream
    as received (our S2 encoder is not Go's, so a re-encode of ``doc`` decodes alike but may differ)."""
    doc: Any
    raw: bytes | None = None

    def encode(self) -> bytes:
        if self.raw is not None:
            return bytes((OP_ASSIGN_CONSUMER_COMPRESSED,)) + self.raw
        return bytes((OP_ASSIGN_CONSUMER_COMPRESSED,)) + s2.S2Writer("fast").encode(go_json(self.doc))


@dataclass(frozen=True, slots=True)
class StreamMsg:
    """``OP_STREAM_MSG``. ``flags`` is ``None`` when the entry ends after the payload (older servers)."""
    lseq: int
    ts: int
    subject: str
    reply: str
    hdr: bytes
    msg: bytes
    flags: int | None = 0

    @property
    def sourced(self) -> bool:
        return bool(self.flags and self.flags & 1)

    def body(self) -> bytes:
        subj = self.subject.encode()
        rep = self.reply.encode()
        if len(subj) > 0xFFFF or len(rep) > 0xFFFF or len(self.hdr) > 0xFFFF or len(self.msg) > 0xFFFFFFFF:
            raise GoWireError("stream message field too long")
        parts = [_U64.pack(self.lseq), _U64.pack(self.ts & 0xFFFFFFFFFFFFFFFF), _U16.pack(len(subj)), subj,
                 _U16.pack(len(rep)), rep, _U16.pack(len(self.hdr)), bytes(self.hdr),
                 _U32.pack(len(self.msg)), bytes(self.msg)]
        if self.flags is not None:
            parts.append(put_uvarint(self.flags))
        return b"".join(parts)

    def encode(self) -> bytes:
        """The plain entry (nats-server compresses large messages, see ``encode_maybe_compressed``)."""
        return bytes((OP_STREAM_MSG,)) + self.body()

    def encode_maybe_compressed(self) -> bytes:
        """As nats-server proposes it: compressed when over the threshold and smaller for it."""
        body = self.body()
        size = len(self.subject.encode()) + len(self.reply.encode()) + len(self.hdr) + len(self.msg)
        if size > COMPRESS_THRESHOLD:
            packed = s2.compress_block(body)
            if len(packed) + 1 < len(body) + 1:
                return bytes((OP_COMPRESSED_STREAM_MSG,)) + packed
        return bytes((OP_STREAM_MSG,)) + body

    @classmethod
    def decode_body(cls, buf) -> "StreamMsg":
        buf = bytes(buf)
        if len(buf) < 26:
            raise GoWireError("stream message too short")
        lseq, ts = struct.unpack_from("<QQ", buf, 0)
        if ts >= 1 << 63:
            ts -= 1 << 64
        pos = 16
        fields = []
        for length in (_U16, _U16, _U16, _U32):  # subject, reply, headers, message: each after its length
            if len(buf) - pos < length.size:
                raise GoWireError("stream message truncated")
            (n,) = length.unpack_from(buf, pos)
            pos += length.size
            if len(buf) - pos < n:
                raise GoWireError("stream message truncated")
            fields.append(buf[pos:pos + n])
            pos += n
        msg = fields[3]
        flags = None
        if pos < len(buf):
            flags, end = get_uvarint(buf, pos)
            if end != len(buf) or end - pos != len(put_uvarint(flags)):
                raise GoWireError("stream message: bytes after flags")
        try:
            subject, reply = fields[0].decode(), fields[1].decode()
        except UnicodeDecodeError:
            raise GoWireError("stream message: subject or reply not UTF-8") from None
        return cls(lseq, ts, subject, reply, fields[2], msg, flags)


@dataclass(frozen=True, slots=True)
class CompressedStreamMsg:
    """``OP_COMPRESSED_STREAM_MSG``: a stream message body in one S2 block; ``raw`` the block as received."""
    msg: StreamMsg
    raw: bytes

    def encode(self) -> bytes:
        return bytes((OP_COMPRESSED_STREAM_MSG,)) + self.raw


@dataclass(frozen=True, slots=True)
class BatchMsg:
    """``OP_BATCH_MSG``/``OP_BATCH_COMMIT_MSG``: one message of an atomic batch; ``inner`` a StreamMsg or
    CompressedStreamMsg."""
    commit: bool
    batch_id: str
    batch_seq: int
    inner: "StreamMsg | CompressedStreamMsg"

    def encode(self) -> bytes:
        bid = self.batch_id.encode()
        if len(bid) > 0xFFFF:
            raise GoWireError("batch id too long")
        op = OP_BATCH_COMMIT_MSG if self.commit else OP_BATCH_MSG
        return bytes((op,)) + _U16.pack(len(bid)) + bid + put_uvarint(self.batch_seq) + self.inner.encode()


@dataclass(frozen=True, slots=True)
class UpdateDelivered:
    dseq: int
    sseq: int
    dc: int
    ts: int

    def encode(self) -> bytes:
        return (bytes((OP_UPDATE_DELIVERED,)) + put_uvarint(self.dseq) + put_uvarint(self.sseq)
                + put_uvarint(self.dc) + put_varint(self.ts))


@dataclass(frozen=True, slots=True)
class UpdateAcks:
    dseq: int
    sseq: int

    def encode(self) -> bytes:
        return bytes((OP_UPDATE_ACKS,)) + put_uvarint(self.dseq) + put_uvarint(self.sseq)


@dataclass(frozen=True, slots=True)
class UpdateSkip:
    sseq: int

    def encode(self) -> bytes:
        return bytes((OP_UPDATE_SKIP,)) + _U64.pack(self.sseq)


@dataclass(frozen=True, slots=True)
class ResetSeq:
    seq: int
    reply: str

    def encode(self) -> bytes:
        return bytes((OP_RESET_SEQ,)) + _U64.pack(self.seq) + self.reply.encode()


@dataclass(frozen=True, slots=True)
class PendingRequest:
    add: bool
    reply: str

    def encode(self) -> bytes:
        return bytes((OP_ADD_PENDING_REQUEST if self.add else OP_REMOVE_PENDING_REQUEST,)) + self.reply.encode()


def _canon(buf: bytes, values: list[int], signed_last: bool, what: str) -> None:
    """The varints read must be exactly the bytes a Go encoder writes (no padding, nothing after)."""
    enc = b"".join(put_uvarint(v) for v in (values[:-1] if signed_last else values))
    if signed_last:
        enc += put_varint(values[-1])
    if enc != buf:
        raise GoWireError(f"{what}: not canonical")


def _utf8(b: bytes, what: str) -> str:
    try:
        return b.decode()
    except UnicodeDecodeError:
        raise GoWireError(f"{what}: not UTF-8") from None


def _decompress_block(raw: bytes, what: str) -> bytes:
    try:
        return s2.decompress_block(raw, _MAX_DECOMPRESSED)
    except s2.S2Error as e:
        raise GoWireError(f"{what}: {e}") from None


def _decode_stream_or_compressed(op: int, body: bytes) -> "StreamMsg | CompressedStreamMsg":
    if op == OP_STREAM_MSG:
        return StreamMsg.decode_body(body)
    if op == OP_COMPRESSED_STREAM_MSG:
        return CompressedStreamMsg(StreamMsg.decode_body(_decompress_block(body, "compressed stream msg")), body)
    raise GoWireError(f"batch entry holds op {op}, not a stream message")


def decode_entry(buf) -> Any:
    """One entry's data -> JsonEntry, StreamMsg, ... (see the module docstring)."""
    buf = bytes(buf)
    if not buf:
        raise GoWireError("empty entry")
    op, body = buf[0], buf[1:]
    if op in _JSON_OPS:
        if not body.endswith(b"\n"):
            raise GoWireError(f"{OP_NAMES[op]}: JSON without its newline")
        return JsonEntry(op, _loads(body[:-1], OP_NAMES[op]))
    if op == OP_ASSIGN_CONSUMER_COMPRESSED:
        try:
            r = s2.S2Reader(max_output=_MAX_DECOMPRESSED)
            plain = r.feed(body)
        except s2.S2Error as e:
            raise GoWireError(f"compressed consumer assignment: {e}") from None
        if r._buf or r._skip or not plain.endswith(b"\n"):
            raise GoWireError("compressed consumer assignment: incomplete")
        return CompressedConsumerAssignment(_loads(plain[:-1], "compressed consumer assignment"), body)
    if op in (OP_STREAM_MSG, OP_COMPRESSED_STREAM_MSG):
        return _decode_stream_or_compressed(op, body)
    if op in (OP_BATCH_MSG, OP_BATCH_COMMIT_MSG):
        if len(body) < 2:
            raise GoWireError("batch entry too short")
        (bl,) = _U16.unpack_from(body, 0)
        if len(body) < 2 + bl:
            raise GoWireError("batch entry truncated")
        bid = _utf8(body[2:2 + bl], "batch id")
        seq, pos = get_uvarint(body, 2 + bl)
        if pos - (2 + bl) != len(put_uvarint(seq)):
            raise GoWireError("batch entry: non-minimal sequence")
        if pos >= len(body):
            raise GoWireError("batch entry without its message")
        return BatchMsg(op == OP_BATCH_COMMIT_MSG, bid, seq, _decode_stream_or_compressed(body[pos], body[pos + 1:]))
    if op == OP_UPDATE_DELIVERED:
        dseq, p = get_uvarint(body, 0)
        sseq, p = get_uvarint(body, p)
        dc, p = get_uvarint(body, p)
        ts, p = get_varint(body, p)
        _canon(body, [dseq, sseq, dc, ts], True, "delivered update")
        return UpdateDelivered(dseq, sseq, dc, ts)
    if op == OP_UPDATE_ACKS:
        dseq, p = get_uvarint(body, 0)
        sseq, p = get_uvarint(body, p)
        _canon(body, [dseq, sseq], False, "ack update")
        return UpdateAcks(dseq, sseq)
    if op == OP_UPDATE_SKIP:
        if len(body) != 8:
            raise GoWireError("skip update must be 8 bytes")
        return UpdateSkip(_U64.unpack(body)[0])
    if op == OP_RESET_SEQ:
        if len(body) < 8:
            raise GoWireError("reset entry too short")
        return ResetSeq(_U64.unpack_from(body, 0)[0], _utf8(body[8:], "reset reply"))
    if op in (OP_ADD_PENDING_REQUEST, OP_REMOVE_PENDING_REQUEST):
        return PendingRequest(op == OP_ADD_PENDING_REQUEST, _utf8(body, "pending request reply"))
    raise GoWireError(f"unknown entry op {op}")


def decode_meta_snapshot(buf) -> list[Any]:
    """A meta group snapshot (the data of its ``ENTRY_SNAPSHOT``): the stream assignments, each a dict with
    ``client``, ``created``, ``stream`` (config), ``group``, ``sync`` and ``Consumers`` (Go writes that key
    capitalised), in one S2 block. Empty means no streams."""
    buf = bytes(buf)
    if not buf:
        return []
    doc = _loads(_decompress_block(buf, "meta snapshot"), "meta snapshot")
    if not isinstance(doc, list) or not all(isinstance(d, dict) for d in doc):
        raise GoWireError("meta snapshot: not a list of stream assignments")
    return doc


def encode_meta_snapshot(assignments: list[Any]) -> bytes:
    """The inverse of ``decode_meta_snapshot`` (Go's ``json.Marshal``: no trailing newline here)."""
    if not assignments:
        return b""
    return s2.compress_block(gojson.dumps(assignments))


# -- $JSC (outside RAFT) ------------------------------------------------------------------------------------

_JSC_KINDS = {"SYNC": 3, "R": 3, "ACK": 4, "SI": 4, "CI": 5, "ARU": 4}


def parse_jsc_subject(subject: str) -> tuple[str, tuple[str, ...]]:
    """``$JSC.<kind>.<tokens>`` -> (kind, tokens): SYNC (inbox), R (inbox), ACK (inbox, count),
    SI (account, stream), CI (account, stream, consumer), ARU (account, peer id)."""
    parts = subject.split(".")
    if len(parts) < 3 or parts[0] != "$JSC" or _JSC_KINDS.get(parts[1]) != len(parts) or not all(parts[2:]):
        raise GoWireError(f"not a $JSC subject: {subject!r}")
    return parts[1], tuple(parts[2:])


_USAGE_FIRST = struct.Struct("<QQQQIQ")  # mem, store, api calls, api errors, extra tiers, tier name length
_USAGE_MORE = struct.Struct("<QQQ")  # mem, store, tier name length


@dataclass(frozen=True, slots=True)
class UsageUpdate:
    """``$JSC.ARU.<account>.<peer>``: what an account stores on one server, per tier: ``tiers`` is a tuple of
    (tier name, memory bytes, store bytes); the first record also carries the API call and error counts."""
    tiers: tuple[tuple[str, int, int], ...]
    api: int
    errors: int

    def encode(self) -> bytes:
        if not self.tiers:
            raise GoWireError("usage update without a tier")
        out = []
        for i, (tier, mem, store) in enumerate(self.tiers):
            t = tier.encode()
            if i == 0:
                out.append(_USAGE_FIRST.pack(mem & _M64, store & _M64, self.api, self.errors, len(self.tiers) - 1,
                                             len(t)))
            else:
                out.append(_USAGE_MORE.pack(mem & _M64, store & _M64, len(t)))
            out.append(t)
        return b"".join(out)

    @classmethod
    def decode(cls, buf) -> "UsageUpdate":
        buf = bytes(buf)
        if len(buf) < _USAGE_FIRST.size:
            raise GoWireError("usage update too short")
        mem, store, api, errs, extra, tl = _USAGE_FIRST.unpack_from(buf, 0)
        pos = _USAGE_FIRST.size
        tiers = []
        for i in range(extra + 1):
            if i:
                if len(buf) - pos < _USAGE_MORE.size:
                    raise GoWireError("usage update truncated")
                mem, store, tl = _USAGE_MORE.unpack_from(buf, pos)
                pos += _USAGE_MORE.size
            if len(buf) - pos < tl:
                raise GoWireError("usage update truncated")
            tiers.append((_utf8(buf[pos:pos + tl], "tier"), _s64(mem), _s64(store)))
            pos += tl
        if pos != len(buf):
            raise GoWireError("usage update: trailing bytes")
        return cls(tuple(tiers), api, errs)


_M64 = (1 << 64) - 1


def _s64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass(frozen=True, slots=True)
class JsonDoc:
    """A JSON message as Go's ``json.Marshal`` writes it (no newline): catch-up requests, info requests and
    their answers."""
    doc: Any

    def encode(self) -> bytes:
        return gojson.dumps(self.doc)

    @classmethod
    def decode(cls, buf) -> "JsonDoc":
        return cls(_loads(bytes(buf), "JSON message"))


@dataclass(frozen=True, slots=True)
class Empty:
    """An empty message: the end of a stream catch-up, a flow-control ack, an info request without options."""

    def encode(self) -> bytes:
        return b""


def decode_jsc(subject: str, payload) -> Any:
    """One ``$JSC.`` message: a JsonDoc, an entry (see ``decode_entry``), a UsageUpdate or Empty. On a
    ``$JSC.R.`` inbox both catch-up entries and info answers arrive: JSON starts with ``{``, an entry with its
    op byte."""
    kind, _toks = parse_jsc_subject(subject)
    payload = bytes(payload)
    if kind == "ARU":
        return UsageUpdate.decode(payload)
    if not payload:
        if kind == "SYNC":
            raise GoWireError("empty catch-up request")
        return Empty()
    if kind == "R" and payload[0] != 0x7B:
        return decode_entry(payload)
    return JsonDoc.decode(payload)


# -- a stream group's snapshot (the data of its ENTRY_SNAPSHOT) and the catch-up request it leads to ---------

STREAM_STATE_MAGIC = 42
_RUN_LENGTH_MAGIC = 33
_SEQSET_MAGIC = 22
_SEQSET_BUCKETS = 32  # 64-bit buckets per node of the set's version 2 encoding


@dataclass
class StreamSnapshot:
    """A stream's replicated state as its leader snapshots it: counts, first/last sequence, the count of
    failed proposals, the deleted sequences inside [first, last] (as (first, num) runs) and, from version 2,
    the sources' state (name -> (seq, identity)). Layout: magic 42, version 1 or 2, uvarints msgs, bytes,
    first, last, failed, [v2: count, then per source uvarint-length name, uvarint seq, uvarint-length
    identity], the number of deleted sequences, then blocks up to the end: 33 + uvarint first + uvarint num (a
    run), or 22 + version 2 + u32 nodes + u32 size + per node u64 base, 32 u64 bit buckets, u16 height (a set)."""
    msgs: int
    bytes: int
    first_seq: int
    last_seq: int
    failed: int = 0
    deleted: list = None  # [(first, num)]
    sources: dict = None

    @classmethod
    def decode(cls, buf) -> "StreamSnapshot":
        b = bytes(buf)
        if len(b) < 2 or b[0] != STREAM_STATE_MAGIC or b[1] not in (1, 2):
            raise GoWireError("stream snapshot: bad magic or version")
        i = 2

        def u() -> int:
            nonlocal i
            v, i = get_uvarint(b, i)
            return v

        def s() -> str:
            nonlocal i
            n = u()
            if n > len(b) - i:
                raise GoWireError("stream snapshot: short string")
            v = b[i:i + n].decode("utf-8", "surrogateescape")
            i += n
            return v

        msgs, nbytes, first, last, failed = u(), u(), u(), u(), u()
        sources = {}
        if b[1] == 2:
            for _ in range(u()):
                name, seq = s(), u()
                sources[name] = (seq, s())
        ndel = u()
        runs: list[tuple[int, int]] = []
        if ndel:
            while i < len(b):
                if b[i] == _RUN_LENGTH_MAGIC:
                    i += 1
                    runs.append((u(), u()))
                elif b[i] == _SEQSET_MAGIC:
                    if len(b) - i < 10 or b[i + 1] != 2:
                        raise GoWireError("stream snapshot: sequence set not in version 2")
                    nn = struct.unpack_from("<I", b, i + 2)[0]
                    node = 8 + _SEQSET_BUCKETS * 8 + 2
                    i += 10
                    if nn * node > len(b) - i:
                        raise GoWireError("stream snapshot: short sequence set")
                    for _ in range(nn):
                        base = struct.unpack_from("<Q", b, i)[0]
                        words = struct.unpack_from(f"<{_SEQSET_BUCKETS}Q", b, i + 8)
                        i += node
                        for k, w in enumerate(words):
                            while w:
                                low = w & -w
                                runs.append((base + k * 64 + low.bit_length() - 1, 1))
                                w ^= low
                else:
                    raise GoWireError(f"stream snapshot: unknown deleted block {b[i]}")
        elif i != len(b):
            raise GoWireError("stream snapshot: trailing bytes")
        return cls(msgs, nbytes, first, last, failed, sorted(runs), sources)

    def encode(self) -> bytes:
        """Version 1 (or 2 with sources), deleted sequences as runs."""
        out = bytearray([STREAM_STATE_MAGIC, 2 if self.sources else 1])
        for v in (self.msgs, self.bytes, self.first_seq, self.last_seq, self.failed):
            out += put_uvarint(v)
        if self.sources:
            out += put_uvarint(len(self.sources))
            for name, (seq, ident) in self.sources.items():
                out += put_uvarint(len(name.encode()))
                out += name.encode()
                out += put_uvarint(seq)
                out += put_uvarint(len(ident.encode()))
                out += ident.encode()
        runs = self.deleted or []
        out += put_uvarint(sum(n for _f, n in runs))
        for f, n in runs:
            out.append(_RUN_LENGTH_MAGIC)
            out += put_uvarint(f)
            out += put_uvarint(n)
        return bytes(out)


def sync_request(peer: str, first_seq: int, last_seq: int, min_applied: int) -> bytes:
    """A replica's ``$JSC.SYNC`` catch-up request, as Go's ``json.Marshal`` writes it (field order kept)."""
    return go_json({"peer": peer, "first_seq": first_seq, "last_seq": last_seq, "delete_ranges": True,
                    "min_applied": min_applied}).rstrip(b"\n")
