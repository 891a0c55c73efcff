"""Stream backups in nats-server 2.15's second form (ADR-63, "stream backup v2"), written by STREAM.SNAPSHOT and
read by STREAM.RESTORE (the chunking and flow control around them: ``rillet.jetstream.api.snapshot``).

The archive is an S2 stream (``rillet.cluster.s2``) of a plain sequence of entries, independent of either
server's storage layout, so a backup taken from nats-server restores here and the reverse:

- ``NATSARC1`` once, then entries; each entry is five varints (the name's length, the timestamp as a signed
  zig-zag varint, the sequence, the header length, the payload length), the name, then header and payload;
- the first entry is ``state.json``: the stream state (nats-server's ``StreamState`` JSON: ``first_seq``,
  ``last_seq``, ``bytes``, ``consumer_count``...);
- then ``consumer_count`` entries ``consumers/<name>``: ``{"config": <consumer config>, "state": {"delivered",
  "ack_floor", "pending": {"<stream seq>": {"Sequence", "Timestamp"}}, "redelivered"}}``, their stream
  sequences bounded by the state's ``last_seq`` (a restore recreates these consumers with that state);
- then one entry per message: the subject as the name, its time, its sequence, its header and data;
- an entry of all zeros (empty name) ends the backup: without it the restore fails (a truncated backup).

Restore puts each message at its sequence (the sequences between are deleted ones; the stream starts at the
state's ``first_seq`` and ends at its ``last_seq``), leaves out a message whose ``Nats-TTL`` has passed (its
sequence kept), and refuses a message larger than the server's ``max_payload`` or the stream's
``max_msg_size``, an out-of-order sequence or an entry that is not where it should be. The older archive form
(Rillet's own tar, ``rillet.jetstream.snapshot``) is still read by RESTORE: ``is_v2`` tells them apart.
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterator

from rillet.cluster.s2 import STREAM_IDENTIFIER, S2Error, S2Reader, S2Writer
from rillet.jetstream.errors import ApiError

MAGIC = b"NATSARC1"
MAX_NAME = 1 << 20  # (nats-server's bound on an entry name read back)
FLUSH_BYTES = 256 * 1024  # archive bytes gathered before they are compressed and handed on
PAUSE_EVERY = 64  # messages between two hand-overs at most (each step of the snapshot stays short)
READ_PIECE = 1 << 20
MAX_CONSUMER_ENTRY = 256 << 20  # the largest entry read (a consumer with millions of pending messages)
_MASK64 = (1 << 64) - 1


class ArchiveError(Exception):
    pass


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint(n: int) -> bytes:
    """Go's binary.PutVarint: zig-zag, then as an unsigned varint."""
    ux = (n << 1) & _MASK64
    if n < 0:
        ux ^= _MASK64
    return _uvarint(ux)


def entry(name: bytes, ts: int, seq: int, hdr: bytes = b"", data: bytes = b"") -> bytes:
    return b"".join((_uvarint(len(name)), _varint(ts), _uvarint(seq), _uvarint(len(hdr)), _uvarint(len(data)),
                     name, hdr, data))


END = entry(b"", 0, 0)


def is_v2(head: bytes) -> bool:
    """The first bytes of an archive: an S2 stream (a v2 backup; nats-server's v1 form was an S2 stream too,
    which V2Source refuses by its content). Rillet's own v1 archive is a plain tar."""
    return head.startswith(STREAM_IDENTIFIER)


def _read_uvarint(buf: Any, pos: int) -> tuple[int, int] | None:
    x = shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            return None
        b = buf[pos + i]
        x |= (b & 0x7F) << shift
        if b < 0x80:
            if i == 9 and b > 1:
                raise ArchiveError("archive: invalid archive stream")
            return x, pos + i + 1
        shift += 7
    raise ArchiveError("archive: invalid archive stream")


class Entry:
    __slots__ = ("name", "ts", "seq", "hsize", "body")

    def __init__(self, name: bytes, ts: int, seq: int, hsize: int, body: bytes) -> None:
        self.name, self.ts, self.seq, self.hsize, self.body = name, ts, seq, hsize, body

    @property
    def end(self) -> bool:
        return not self.name and not self.ts and not self.seq and not self.body and not self.hsize


class ArchiveReader:
    """The archive's entries from its plain (decompressed) bytes fed in pieces of any size. ``max_entry``
    bounds an entry's header plus payload (an entry larger is refused before it is buffered whole)."""

    def __init__(self, max_entry: int) -> None:
        self.max_entry = max_entry
        self.buf = bytearray()
        self.magic = False
        self.partial: tuple[bytes, int] | None = None  # (name, sequence) of an entry whose payload is incomplete

    def feed(self, data: bytes) -> list[Entry]:
        self.buf += data
        buf = self.buf
        if not self.magic:
            if len(buf) < len(MAGIC):
                return []
            if bytes(buf[:len(MAGIC)]) != MAGIC:
                raise ArchiveError("archive: invalid archive stream (not a v2 backup: the v1 form of nats-server, "
                                   "an S2 stream of its store's files, is not read by Rillet)")
            del buf[:len(MAGIC)]
            self.magic = True
        out: list[Entry] = []
        pos = 0
        while True:
            fields = []
            p = pos
            for _ in range(5):
                r = _read_uvarint(buf, p)
                if r is None:
                    break
                fields.append(r[0])
                p = r[1]
            if len(fields) < 5:
                break
            nlen, zts, seq, hsize, psize = fields
            if nlen > MAX_NAME or hsize + psize > self.max_entry:
                raise ArchiveError(f"archive entry too large ({hsize + psize} bytes)" if nlen <= MAX_NAME
                                   else "archive: invalid archive stream")
            total = p + nlen + hsize + psize
            if total > len(buf):
                # (its header and name are here, its payload not yet: what a cut archive names)
                self.partial = (bytes(buf[p:p + nlen]), seq) if p + nlen <= len(buf) else None
                break
            self.partial = None
            ts = (zts >> 1) ^ -(zts & 1)
            name = bytes(buf[p:p + nlen])
            out.append(Entry(name, ts, seq, hsize, bytes(buf[p + nlen:total])))
            pos = total
        if pos:
            del buf[:pos]
        return out


# ---- snapshot ------------------------------------------------------------------------------------------------


def _consumer_entries(stream: Any, last_seq: int) -> list[tuple[str, bytes]]:
    """Each consumer's config and delivery state, bounded to ``last_seq`` (nats-server leaves the consumer
    sequences as they are). The direct consumers of other streams' mirrors and sources are left out, as
    nats-server keeps no store for them."""
    from rillet.jetstream.api.consumers import config_to_dict
    out = []
    for c in list(stream.consumers.values()):
        if c.closed or getattr(c.cfg, "direct", False):
            continue
        cfg = config_to_dict(c.cfg, dynamic_meta=False, for_store=True)
        if not cfg.get("name"):
            cfg["name"] = c.name
        st = c.get_state()
        d: dict[str, Any] = {
            "delivered": {"consumer_seq": st.delivered.consumer_seq,
                          "stream_seq": min(st.delivered.stream_seq, last_seq)},
            "ack_floor": {"consumer_seq": st.ack_floor.consumer_seq,
                          "stream_seq": min(st.ack_floor.stream_seq, last_seq)}}
        pending = {str(s): {"Sequence": p[0], "Timestamp": p[1]} for s, p in sorted(st.pending.items())
                   if s <= last_seq}
        if pending:
            d["pending"] = pending
        rdc = {str(s): n for s, n in sorted(st.redelivered.items()) if s <= last_seq}
        if rdc:
            d["redelivered"] = rdc
        out.append((c.name, json.dumps({"config": cfg, "state": d}, separators=(",", ":")).encode()))
    return out


def snapshot_parts(stream: Any, include_consumers: bool) -> tuple[dict, Iterator[bytes]]:
    """(the state the backup holds, the archive's compressed bytes in short steps). The view is this call's:
    the consumers' states now, the messages up to the last sequence now (one removed before its turn comes
    is left out, as nats-server reads each block only then)."""
    from rillet.jetstream.store._snapshot import _live_msgs
    store = stream.store
    store.flush()
    state = {k: v for k, v in stream.state_dict().items()
             if k in ("messages", "bytes", "first_seq", "first_ts", "last_seq", "last_ts", "num_deleted")}
    last = int(state.get("last_seq") or 0)
    cons = _consumer_entries(stream, last) if include_consumers else []
    state["consumer_count"] = len(cons)
    now = time.time_ns()

    def gen() -> Iterator[bytes]:
        w = S2Writer()
        raw = bytearray(MAGIC)
        raw += entry(b"state.json", now, 0, b"", json.dumps(state, separators=(",", ":")).encode())
        for name, data in cons:
            raw += entry(b"consumers/" + name.encode(), now, 0, b"", data)
        n = 0
        for sm in _live_msgs(store, last):
            raw += entry(sm.subject.encode("utf-8", "surrogateescape"), sm.ts, sm.seq, sm.hdr or b"",
                         sm.data or b"")
            n += 1
            if len(raw) >= FLUSH_BYTES or n >= PAUSE_EVERY:
                yield w.encode(raw)
                raw, n = bytearray(), 0
        raw += END
        yield w.encode(raw)
    return state, gen()


# ---- restore -------------------------------------------------------------------------------------------------


class V2Source:
    """A v2 archive spooled in a file, read in worker threads: ``open`` reads the state and the consumers,
    ``batch`` the next messages as ``(seq, subject, hdr, data, ts, ttl)`` (at most ``n``), [] at the end
    (after checking the end marker). ``first``/``last`` are the state's sequences."""

    def __init__(self, spool: Any, cfg: Any, max_payload: int) -> None:
        self.spool = spool
        self.cfg = cfg
        self.mp = max_payload
        self.mms = int(getattr(cfg, "max_msg_size", 0) or 0)
        self.s2 = S2Reader()
        # (a consumer's entry may be larger than a message: its pending list; messages are checked in batch)
        self.ar = ArchiveReader(max(max_payload + 1, MAX_CONSUMER_ENTRY))
        self.pending: list[Entry] = []
        self.eof = False
        self.ended = False
        self.state: dict = {}
        self.consumers: list[tuple[str, dict, dict]] = []
        self.first = self.last = 0
        self.lseq = 0
        self.bytes = 0

    def _next(self) -> Entry | None:
        while not self.pending:
            if self.eof:
                if self.ar.buf or not self.ar.magic:  # (cut inside an entry, or before the first)
                    part = self.ar.partial
                    if part is not None and part[1]:
                        raise ArchiveError(f"failed to read message sequence {part[1]}: archive: invalid archive "
                                           f"stream")
                    raise ArchiveError("archive: invalid archive stream")
                return None
            data = self.spool.read(READ_PIECE)
            if not data:
                self.eof = True
                continue
            try:
                self.pending = self.ar.feed(self.s2.feed(data))
            except S2Error as e:
                raise ArchiveError(f"invalid snapshot archive: {e}") from None
            self.pending.reverse()
        return self.pending.pop()

    def open(self) -> None:
        self.spool.seek(0)
        e = self._next()
        if e is None:
            raise ArchiveError("EOF")  # (nats-server's words for an archive that ends between entries)
        if e.name != b"state.json":
            raise ArchiveError("expected state.json first")
        try:
            st = json.loads(e.body)
            if not isinstance(st, dict):
                raise ValueError("not an object")
            self.first = int(st.get("first_seq") or 0)
            self.last = int(st.get("last_seq") or 0)
            ncons = int(st.get("consumer_count") or 0)
        except (ValueError, TypeError) as err:
            raise ArchiveError(f"error in state.json: {err}") from None
        if self.first < 0 or self.last < 0 or ncons < 0:
            raise ArchiveError("error in state.json: negative value")
        self.state = st
        self.lseq = max(self.first - 1, 0)
        for _ in range(ncons):
            e = self._next()
            if e is None:
                raise ArchiveError("EOF")
            name = e.name.decode("utf-8", "surrogateescape")
            if not name.startswith("consumers/"):
                raise ArchiveError(f"expected consumer, found {name!r}")
            name = name[len("consumers/"):]
            try:
                doc = json.loads(e.body)
            except ValueError as err:
                raise ArchiveError(f"failed to decode consumer {name!r} state: {err}") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
                raise ArchiveError(f"consumer {name!r} is missing config")
            if not isinstance(doc.get("state"), dict):
                raise ArchiveError(f"consumer {name!r} is missing state")
            self.consumers.append((name, doc["config"], doc["state"]))

    def batch(self, n: int = 256, size: int = 1 << 20) -> list[tuple]:
        from rillet.jetstream.headers import get_header
        from rillet.jetstream.stream import parse_ttl
        out: list[tuple] = []
        got = 0
        now = time.time_ns()
        while not self.ended and len(out) < n and got < size:
            e = self._next()
            if e is None:
                raise ArchiveError("EOF")  # (truncated between two entries: no end marker)
            seq = e.seq
            if seq == 0:
                if e.end:
                    self.ended = True
                    break
                raise ArchiveError("expected message sequence")
            plen = len(e.body) - e.hsize
            if e.hsize > self.mp or plen > self.mp - e.hsize:
                raise ArchiveError(f"message sequence {seq} exceeds maximum payload size")
            if self.mms > 0 and len(e.body) > self.mms:
                raise ArchiveError(f"message sequence {seq} exceeds maximum message size")
            if seq <= self.lseq:
                raise ArchiveError(f"message sequence {seq} out of order")
            self.lseq = seq
            hdr, data = e.body[:e.hsize], e.body[e.hsize:]
            ttl = 0
            if hdr:
                v = get_header(hdr, "Nats-TTL")
                if v:
                    try:
                        ttl = parse_ttl(v)
                    except ValueError:
                        raise ArchiveError(f"failed to parse message TTL: {v!r}") from None
                    if ttl > 0 and now > e.ts + ttl * 1_000_000_000:
                        continue  # expired: left out, its sequence kept (a deleted one)
            out.append((seq, e.name.decode("utf-8", "surrogateescape"), hdr, data, e.ts, ttl))
            got += len(e.body) + len(e.name)
        return out


def fill_store(store: Any, src: V2Source) -> None:
    """In a worker thread (the store is nobody else's yet): the archive's messages into the empty
    ``store``, at their sequences, from the state's first sequence to its last."""
    if src.first > 1:
        store.compact(src.first)
    while True:
        msgs = src.batch()
        if not msgs:
            break
        for seq, subj, hdr, data, ts, ttl in msgs:
            store.store_raw(seq, subj, hdr, data, ts, ttl=ttl)
    last = store.state().last_seq
    if src.last > last:
        store.skip_msgs(last + 1, src.last - last)


def _consumer_state(d: dict) -> Any:
    from rillet.jetstream.store.base import ConsumerState, SequencePair

    def pair(x: Any) -> SequencePair:
        x = x if isinstance(x, dict) else {}
        return SequencePair(consumer_seq=int(x.get("consumer_seq") or 0), stream_seq=int(x.get("stream_seq") or 0))
    pending = {}
    for s, p in (d.get("pending") or {}).items():
        p = p if isinstance(p, dict) else {}
        pending[int(s)] = (int(p.get("Sequence") or 0), int(p.get("Timestamp") or 0))
    rdc = {int(s): int(c) for s, c in (d.get("redelivered") or {}).items()}
    return ConsumerState(delivered=pair(d.get("delivered")), ack_floor=pair(d.get("ack_floor")),
                         pending=pending, redelivered=rdc)


def restore_consumers(stream: Any, consumers: list[tuple[str, dict, dict]]) -> None:
    """On the event loop, once the restored stream is open: each consumer of the archive made again with
    its delivery state (written to disk as a consumer create writes it). A consumer whose config or state
    cannot be taken fails the restore, as in nats-server."""
    from rillet.jetstream.api.consumers import config_from_dict
    from rillet.jetstream.configtypes import is_valid_asset_name
    from rillet.jetstream.consumer.engine import Consumer, install_consumer
    from rillet.jetstream.stream import now_ns
    for name, cfgd, stated in consumers:
        if not is_valid_asset_name(name) or name in stream.consumers:
            raise ApiError.make("STREAM_RESTORE", err=f"failed to add consumer {name!r}: invalid name")
        try:
            cfg = config_from_dict(cfgd)
            state = _consumer_state(stated)
        except (ApiError, ValueError, TypeError, AttributeError) as e:
            raise ApiError.make("STREAM_RESTORE", err=f"failed to decode consumer {name!r} state: {e}") from None
        if getattr(cfg, "name", "") != name and not getattr(cfg, "durable_name", ""):
            cfg.name = name
        c = Consumer(stream, cfg, name, now_ns())
        c.apply_state(state)
        install_consumer(stream, c)
