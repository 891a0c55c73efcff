"""FileStore: a stream's messages in append-only block files.

Directory layout (``<dir>`` is what the caller passes, one per stream)::

    <dir>/meta.json                 format version and the stream name (informational)
    <dir>/state.log                 sequence state: first/last markers and tombstones
    <dir>/msgs/0000000001.blk ...   message blocks, in sequence order
    <dir>/consumers/<name>/state    consumer states (rewritten atomically)

Block file: the 8-byte magic ``RILBLK01`` then records, each::

    u8  type        'M' message, 'E' erased message (same length, payload zeroed)
    u8  flags       bit 0: payload compressed (snappy block format, readable by s2)
                    bit 1: part of an atomic batch whose later records follow (the batch's last record
                           has the bit clear and commits it)
    u16 subject length
    u32 total record length (header + subject + payload + crc)
    u64 seq
    i64 ts (ns)
    i64 ttl (ns; 0 none, < 0 never expires)
    u32 hdr length, u32 data length (uncompressed)
    subject, payload (hdr + data), u32 crc32 of everything before it

state.log: the 8-byte magic ``RILSTL01`` then records ``u8 type, 3 pad, u32 total length,
payload, u32 crc32``: 'F' u64 (every seq below is gone), 'L' u64 seq + i64 ts (last_seq is
at least seq), 'D' n x u64 (tombstones).  It is rewritten (temp file + rename) from the
in-memory state when it grows, and after purge and truncate.

The in-memory index (``_core.IndexedStore``) is rebuilt on open by scanning every block
and applying the state log; every record's checksum is verified.  A bad record at the tail
of the last block (a torn write) is cut off with a warning; a bad record anywhere else is
reported: its sequences go to ``state().lost`` and ``load_msg`` raises ErrStoreCorrupt.

An atomic batch (``store_batch``) is written with one write into one block, every record but
the last flagged "more follow".  Recovery indexes a batch only when its last record is there:
a batch cut short by a crash is dropped whole (the block is truncated at the batch's start).

Writes go straight to the OS (one pwritev per message); ``sync()`` fsyncs, and also fsyncs the
``msgs/`` directory when a block file was created or removed since the last sync (a new file is
durable only once its directory entry is).  Directories and renamed files (meta, state log,
consumer states) are made durable when created.  A failed write
(disk full, read-only) is rolled back by truncating the block and raises ErrStoreFull;
the store keeps working when space returns.  Tombstones that could not be written are kept
and retried on the next write or sync.
"""

from __future__ import annotations

import errno
import heapq
import io
import json
import os
import shutil
import struct
import tarfile
import threading
import time
import zlib
from collections import OrderedDict
from typing import Any, Iterable, Iterator

import msgspec

from ._core import _HEAD, IndexedStore, MemConsumerStore
from .base import (
    ErrStoreClosed,
    ErrStoreCorrupt,
    ErrStoreFull,
    LogFn,
    StoreConfig,
    StoredMsg,
    StoreError,
    decode_consumer_state,
)

__all__ = ["FileStore", "restore", "restore_into", "snapshot_from_store"]

BLOCK_MAGIC = b"RILBLK01"
LOG_MAGIC = b"RILSTL01"
CONSUMER_MAGIC = b"RILCNS01"
FORMAT_VERSION = 1

_REC = struct.Struct("<BBHIQqqII")  # type, flags, subj_len, total, seq, ts, ttl, hdr_len, data_len
_REC_LEN = _REC.size  # 40
_CRC = struct.Struct("<I")
_OVERHEAD = _REC_LEN + 4
T_MSG = 0x4D  # 'M'
T_ERASED = 0x45  # 'E'
F_COMPRESSED = 1
F_BATCH = 2  # more records of the same atomic batch follow this one
_MAX_REC = 1 << 31

_LOGH = struct.Struct("<BxxxI")
_U64 = struct.Struct("<Q")
_LAST = struct.Struct("<Qq")
L_FIRST = 0x46  # 'F'
L_LAST = 0x4C  # 'L'
L_DEL = 0x44  # 'D'
L_TRUNC = 0x54  # 'T': u64 seq + i64 ts: sequences above are void (truncate)

_COMPRESS_MIN = 64
_FD_CACHE = 64
_LOG_COMPACT_MIN = 1 << 20


def _snappy() -> Any:
    try:
        import cramjam
    except ImportError as e:  # pragma: no cover - dependency missing
        raise StoreError("s2 compression needs the 'cramjam' package") from e
    return cramjam.snappy


def _default_log(level: str, text: str) -> None:
    pass


class _Entry(msgspec.Struct, gc=False):
    """Index entry: where a live message's record is."""

    subject: str
    seq: int
    ts: int
    size: int  # accounted bytes
    blk: int  # block index
    off: int
    rlen: int


class _Block:
    __slots__ = ("index", "path", "first", "last", "live", "size", "synced", "bad")

    # ``synced``: the file size covered by the last fsync (the file is durable up to it).

    def __init__(self, index: int, path: str) -> None:
        self.index = index
        self.path = path
        self.first = 0  # first seq physically in the file (0: none)
        self.last = 0  # last seq physically in the file
        self.live = 0  # live messages
        self.size = 0  # bytes in the file
        self.synced = 0
        self.bad = False  # has corrupt regions


def _safe_name(name: str) -> str:
    if (
        name
        and name not in (".", "..")
        and not name.startswith("x-")
        and all(c.isalnum() or c in "-_=+@~^%$#!," for c in name)
        and len(name) < 200
    ):
        return name
    return "x-" + zlib.crc32(name.encode()).to_bytes(4, "big").hex() + name.encode().hex()[:200]


def fsync_dir(path: str) -> None:
    """fsync a directory, so that files created, renamed or removed in it stay that way after a crash.
    Raises OSError."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durable(path: str) -> None:
    """``os.makedirs(path)``, then fsync every directory that got a new entry (the parent of each
    directory created, and the new directories themselves).  Raises OSError."""
    path = os.path.abspath(path)
    missing = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    if not missing:
        return
    os.makedirs(path, exist_ok=True)
    for d in missing:
        fsync_dir(d)
        fsync_dir(os.path.dirname(d))



def _write_all(fd: int, bufs: list[bytes], off: int, total: int) -> None:
    n = os.pwritev(fd, bufs, off)
    if n != total:
        # A short write: finish it piecewise (ENOSPC raises from here).
        data = b"".join(bufs)
        while n < total:
            k = os.pwrite(fd, data[n:], off + n)
            if k <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n += k


def _atomic_write(path: str, data: bytes, durable: bool) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n = 0
        while n < len(data):
            n += os.write(fd, data[n:])
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path))


def _encode_log(kind: int, payload: bytes) -> bytes:
    head = _LOGH.pack(kind, _LOGH.size + len(payload) + 4)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + payload + _CRC.pack(crc)


def _parse_log_record(mv: memoryview, pos: int, end: int) -> tuple[int, int, int, int] | None:
    """(kind, payload offset, payload length, total) of a valid state log record, or None."""
    if end - pos < _LOGH.size + 4:
        return None
    kind, total = _LOGH.unpack_from(mv, pos)
    plen = total - _LOGH.size - 4
    if plen < 0 or pos + total > end:
        return None
    if kind in (L_FIRST,):
        if plen != 8:
            return None
    elif kind in (L_LAST, L_TRUNC):
        if plen != 16:
            return None
    elif kind == L_DEL:
        if plen % 8 or not plen:
            return None
    else:
        return None
    if mv[pos + 1] or mv[pos + 2] or mv[pos + 3]:
        return None
    (crc,) = _CRC.unpack_from(mv, pos + total - 4)
    if zlib.crc32(mv[pos : pos + total - 4]) != crc:
        return None
    return kind, pos + _LOGH.size, plen, total


def _parse_record(mv: memoryview, pos: int, end: int) -> tuple | None:
    """Validate the record at pos; returns the header tuple or None."""
    if end - pos < _OVERHEAD:
        return None
    t = mv[pos]
    if t != T_MSG and t != T_ERASED:
        return None
    h = _REC.unpack_from(mv, pos)
    total = h[3]
    if total < _OVERHEAD or pos + total > end:
        return None
    if t == T_MSG:
        plen = total - _OVERHEAD - h[2]
        if plen < 0 or (not (h[1] & F_COMPRESSED) and plen != h[7] + h[8]):
            return None
    (crc,) = _CRC.unpack_from(mv, pos + total - 4)
    if zlib.crc32(mv[pos : pos + total - 4]) != crc:
        return None
    return h


class FileConsumerStore(MemConsumerStore):
    """Consumer state in ``<dir>/consumers/<name>/state``.

    ``update`` records the state in memory; ``flush`` writes it (temp + rename) and
    ``sync`` also fsyncs the file and the directory.  The stream's ``flush``/``sync``/
    ``stop`` do this for every consumer.
    """

    def __init__(self, name: str, path: str, log: LogFn) -> None:
        super().__init__(name)
        self.path = path
        self._dirty = False
        self._log = log
        self._wlock = threading.Lock()
        self._unsynced = False  # written (renamed into place) without fsync: sync() makes it durable
        make_dirs_durable(path)
        nfn = os.path.join(path, "name")
        if not os.path.exists(nfn):
            _atomic_write(nfn, name.encode(), True)
        fn = os.path.join(path, "state")
        try:
            with open(fn, "rb") as f:
                buf = f.read()
        except FileNotFoundError:
            buf = None
        if buf is not None:
            ok = len(buf) >= 12 and buf[:8] == CONSUMER_MAGIC
            if ok:
                (crc,) = _CRC.unpack_from(buf, 8)
                ok = zlib.crc32(buf[12:]) == crc
            if ok:
                try:
                    decode_consumer_state(buf[12:])
                    self._enc = buf[12:]
                except msgspec.DecodeError:
                    ok = False
            if not ok:
                log("error", f"consumer {name!r}: state file {fn} is corrupt, ignored")

    def update(self, state: Any) -> None:
        super().update(state)
        self._dirty = True

    def flush(self, durable: bool = False) -> None:
        if self._closed or not (self._dirty or durable):
            return
        with self._wlock:
            if not self._dirty and not durable:
                return
            self._dirty = False  # before taking the state: a later update marks it again
            enc = self._enc
            if enc is None:
                return
            data = CONSUMER_MAGIC + _CRC.pack(zlib.crc32(enc)) + enc
            try:
                _atomic_write(os.path.join(self.path, "state"), data, durable)
            except OSError as e:
                self._dirty = True
                raise ErrStoreFull(f"consumer {self.name!r}: {e.strerror or e}") from e
            self._unsynced = not durable

    def sync(self) -> None:
        if self._dirty:
            self.flush(durable=True)
        elif self._unsynced and not self._closed:
            # written by an earlier flush without fsync: the file, and its rename in the directory
            with self._wlock:
                self._unsynced = False
                try:
                    fd = os.open(os.path.join(self.path, "state"), os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    fsync_dir(self.path)
                except OSError as e:
                    self._unsynced = True
                    raise ErrStoreFull(f"consumer {self.name!r}: {e.strerror or e}") from e

    def stop(self) -> None:
        if not self._closed:
            try:
                self.flush(durable=True)
            finally:
                self._closed = True

    def delete(self) -> None:
        self._closed = True
        self.deleted = True
        self._enc = None
        shutil.rmtree(self.path, ignore_errors=True)


class FileStore(IndexedStore):
    """A stream's messages on disk.  ``FileStore(directory, cfg, log=None)``."""

    # Accounted size like nats-server's file store: 30 + subject + data (+ 4 + hdr).
    _size_overhead = 30
    _hdr_overhead = 4

    def __init__(self, directory: str, cfg: StoreConfig | None = None, log: LogFn | None = None) -> None:
        cfg = cfg or StoreConfig(storage="file")
        super().__init__(cfg)
        self.dir = os.path.abspath(directory)
        self.log: LogFn = log or _default_log
        self._lock = threading.RLock()
        self._blocks: dict[int, _Block] = {}  # in order of index
        self._active: _Block | None = None
        self._afd = -1  # active block fd
        self._fds: OrderedDict[int, int] = OrderedDict()  # block index -> fd (non-active)
        self._lost: set[int] = set()
        self._log_fd = -1
        self._log_size = 0
        self._log_pending: list[bytes] = []  # records not yet written (a write failed)
        # Tombstones of removals by limits (max_msgs/bytes/per subject, age, TTL) are batched:
        # if lost in a crash, reopening re-applies the same limits.
        self._deferred: list[int] = []
        self._log_compact_at = _LOG_COMPACT_MIN
        self._log_warned = False
        self._block_size = max(int(cfg.block_size or 0), 64)
        self._compress = cfg.compression == "s2"
        self._snappy = _snappy() if self._compress else None
        self._msgdir = os.path.join(self.dir, "msgs")
        self._cdir = os.path.join(self.dir, "consumers")
        self._dir_dirty = False  # a block file was created or removed since the last sync of msgs/
        try:
            make_dirs_durable(self._msgdir)
            make_dirs_durable(self._cdir)
        except OSError as e:
            raise ErrStoreFull(f"cannot create store directory {self.dir}: {e.strerror or e}") from e
        self._open()

    # -- config ---------------------------------------------------------------------

    def _on_config(self) -> None:
        self._log_append(None)  # limits may grow: make the removals so far durable
        self._block_size = max(int(self.cfg.block_size or 0), 64)
        self._compress = self.cfg.compression == "s2"
        if self._compress and self._snappy is None:
            self._snappy = _snappy()

    @property
    def sync_always(self) -> bool:
        return self.cfg.sync_interval == "always"

    # -- open / recovery ------------------------------------------------------------

    def _open(self) -> None:
        meta = os.path.join(self.dir, "meta.json")
        if not os.path.exists(meta):
            try:
                _atomic_write(
                    meta,
                    json.dumps({"format": FORMAT_VERSION, "name": self.cfg.name}).encode(),
                    True,
                )
            except OSError as e:
                raise ErrStoreFull(f"cannot write {meta}: {e.strerror or e}") from e
        log_path = os.path.join(self.dir, "state.log")
        fresh = not os.path.exists(log_path)
        if fresh and self._list_blocks():
            self.log("warn", f"{log_path} is missing: deletions since the last compaction are lost")
        first_mark, last_mark, last_mark_ts, dels = self._read_log(log_path)
        if fresh:
            first_mark = max(self.cfg.first_seq, 1)
            last_mark = first_mark - 1
        self._recover_blocks(first_mark, last_mark, last_mark_ts, dels)
        # Consumers.
        try:
            names = sorted(os.listdir(self._cdir))
        except OSError:
            names = []
        for n in names:
            p = os.path.join(self._cdir, n)
            if os.path.isdir(p):
                try:
                    with open(os.path.join(p, "name"), "rb") as f:
                        name = f.read().decode()
                except (OSError, UnicodeDecodeError):
                    name = n
                self._consumers[name] = FileConsumerStore(name, p, self.log)
        # Start from a compact log reflecting the recovered state.
        self._rewrite_log()
        self._enforce_after_open()

    def _enforce_after_open(self) -> None:
        if self._maxp:
            for subj in [s for s, ss in self._fss.items() if ss[0] > self._maxp]:
                self._enforce_per_subject(subj)
        self._enforce_limits()

    def _read_log(self, path: str) -> tuple[int, int, int, set[int]]:
        first = 0
        last = 0
        last_ts = 0
        dels: set[int] = set()
        try:
            with open(path, "rb") as f:
                buf = f.read()
        except FileNotFoundError:
            return first, last, last_ts, dels
        except OSError as e:
            raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
        if buf[:8] != LOG_MAGIC:
            if len(buf) >= 8:
                self.log("error", f"{path}: bad magic, sequence state lost (rebuilt from blocks)")
            return first, last, last_ts, dels
        mv = memoryview(buf)
        pos = 8
        end = len(buf)
        recs: list[tuple[int, int, int]] = []  # (kind, payload offset, payload length)
        while pos < end:
            r = _parse_log_record(mv, pos, end)
            if r is None:
                nxt = pos + 1
                while nxt < end and _parse_log_record(mv, nxt, end) is None:
                    nxt += 1
                if nxt >= end:
                    self.log("warn", f"{path}: torn record at offset {pos}, dropped")
                    break
                self.log("error", f"{path}: corrupt data at offset {pos}..{nxt}, skipped")
                pos = nxt
                continue
            recs.append(r)
            pos += r[3]
        for kind, p, plen, _ in recs:
            if kind == L_FIRST:
                first = max(first, _U64.unpack_from(mv, p)[0])
            elif kind == L_LAST:
                s, ts = _LAST.unpack_from(mv, p)
                if s >= last:
                    last, last_ts = s, ts
            elif kind == L_DEL:
                dels.update(struct.unpack_from(f"<{plen // 8}Q", mv, p))
            elif kind == L_TRUNC:
                s, ts = _LAST.unpack_from(mv, p)
                dels = {d for d in dels if d <= s}
                last, last_ts = s, ts
                first = min(first, s + 1)
        return first, last, last_ts, dels

    def _list_blocks(self) -> list[tuple[int, str]]:
        out = []
        for fn in os.listdir(self._msgdir):
            if fn.endswith(".blk"):
                try:
                    out.append((int(fn[:-4]), os.path.join(self._msgdir, fn)))
                except ValueError:
                    continue
            elif fn.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(self._msgdir, fn))
                except OSError:
                    pass
        out.sort()
        return out

    def _recover_blocks(self, first_mark: int, last_mark: int, last_mark_ts: int, dels: set[int]) -> None:
        blocks = self._list_blocks()
        msgs = self._msgs
        fss = self._fss
        intern: dict[bytes, str] = {}
        max_seq = 0
        max_seq_ts = 0
        # Corrupt regions as [seq of the good record before, seq of the good record after].
        bad: list[list[int]] = []
        open_bad: list[list[int]] = []
        for bi, (index, path) in enumerate(blocks):
            is_last = bi == len(blocks) - 1
            blk = _Block(index, path)
            try:
                with open(path, "rb") as f:
                    buf = f.read()
            except OSError as e:
                raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
            end = len(buf)
            if buf[:8] != BLOCK_MAGIC:
                if end < 8 and BLOCK_MAGIC.startswith(buf) and is_last:
                    # Torn while being created.
                    self.log("warn", f"{path}: torn block header, block reset")
                    self._truncate_file(path, 0)
                    buf = b""
                    end = 0
                else:
                    self.log("error", f"{path}: bad block header")
                    blk.bad = True
                    open_bad.append([max_seq, 0])
            mv = memoryview(buf)
            pos = 8 if end >= 8 else end
            cut = -1
            pend: list[tuple[int, tuple]] = []  # (offset, header) of a batch whose last record is not seen yet

            def index_record(pos: int, h: tuple) -> None:
                nonlocal max_seq, max_seq_ts, open_bad
                t, flags, slen, total, seq, ts, ttl, hlen, dlen = h
                if not blk.first:
                    blk.first = seq
                blk.last = seq
                max_seq = seq
                max_seq_ts = ts
                if open_bad:
                    for r in open_bad:
                        r[1] = seq
                    bad.extend(open_bad)
                    open_bad = []
                if t == T_MSG and seq >= first_mark and seq not in dels:
                    sb = bytes(mv[pos + _REC_LEN : pos + _REC_LEN + slen])
                    subj = intern.get(sb)
                    if subj is None:
                        subj = intern[sb] = sb.decode("utf-8", "surrogateescape")
                    if hlen:
                        size = 34 + slen + hlen + dlen
                    else:
                        size = 30 + slen + dlen
                    msgs[seq] = _Entry(subj, seq, ts, size, index, pos, total)
                    self._bytes += size
                    ss = fss.get(subj)
                    if ss is None:
                        fss[subj] = [1, _HEAD, seq]
                    else:
                        ss[0] += 1
                        ss.append(seq)
                    if ttl:
                        if ttl > 0:
                            self._ttl_of[seq] = ts + ttl
                            self._ttl_heap.append((ts + ttl, seq))
                        else:
                            self._no_expire.add(seq)
                    blk.live += 1

            while pos < end:
                h = _parse_record(mv, pos, end)
                if h is not None and pend and h[4] != pend[-1][1][4] + 1:
                    h = None  # not the continuation of the open batch
                if h is None or h[4] <= max_seq:
                    # Find the next valid record, if any.
                    nxt = self._resync(mv, pos + 1, end, max_seq)
                    if pend:
                        # An atomic batch cut short: none of it counts.
                        self.log(
                            "warn",
                            f"{path}: incomplete atomic batch (sequences {pend[0][1][4]}..{pend[-1][1][4]} "
                            f"of a larger batch) at offset {pend[0][0]}, dropped",
                        )
                        if nxt < 0 and is_last:
                            cut = pend[0][0]
                            pend = []
                            break
                        pend = []
                    if nxt < 0 and is_last:
                        cut = pos
                        break
                    self.log(
                        "error",
                        f"{path}: corrupt data at offset {pos}"
                        + (f"..{nxt}" if nxt >= 0 else " to the end of the block"),
                    )
                    blk.bad = True
                    if not open_bad or open_bad[-1][0] != max_seq:
                        open_bad.append([max_seq, 0])
                    if nxt < 0:
                        break
                    pos = nxt
                    continue
                if h[1] & F_BATCH:
                    pend.append((pos, h))
                else:
                    if pend:
                        for p, ph in pend:
                            index_record(p, ph)
                        pend = []
                    index_record(pos, h)
                pos += h[3]
            if pend:
                # The block ends inside an atomic batch: its last record was never written.
                self.log(
                    "warn",
                    f"{path}: incomplete atomic batch (sequences {pend[0][1][4]}..{pend[-1][1][4]}, its last "
                    f"record missing) at offset {pend[0][0]}, dropped",
                )
                if is_last:
                    cut = pend[0][0]
                else:
                    blk.bad = True
                pend = []
            mv.release()
            if cut >= 0:
                self.log(
                    "warn",
                    f"{path}: torn write at the end ({end - cut} bytes from offset {cut}), truncated",
                )
                self._truncate_file(path, cut)
                end = cut
            blk.size = max(end, 8) if end else 0
            self._blocks[index] = blk
        bad.extend(open_bad)
        heapq.heapify(self._ttl_heap)
        for ss in fss.values():
            if len(ss) - ss[1] > 2 * ss[0] + 8:
                self._compact_subj(ss)
        # Sequences.
        last = max(last_mark, max_seq, first_mark - 1)
        self._last = last
        self._last_ts = last_mark_ts if last_mark >= max_seq else max_seq_ts
        if msgs:
            self._first = next(iter(msgs))
        else:
            self._first = max(first_mark, last + 1)
        # Lost sequences: those between the good records around each bad region.
        if bad:
            floor = max(first_mark, 1)
            for p, q in bad:
                if not q:
                    q = last + 1
                lo = max(p + 1, floor)
                if q - lo > 1_000_000:
                    self.log("error", f"corrupt region spans sequences {lo}..{q - 1}; reporting the first 1000000")
                    q = lo + 1_000_000
                for s in range(lo, q):
                    if s not in dels and s not in msgs:
                        self._lost.add(s)
            if self._lost:
                self.log("error", f"{len(self._lost)} message(s) lost to corruption")
        # Drop blocks with nothing live (except the last, which stays the active block).
        idxs = list(self._blocks)
        for index in idxs[:-1]:
            blk = self._blocks[index]
            if blk.live == 0 and not blk.bad:
                self._unlink_block(blk)
        if idxs:
            last_blk = self._blocks[idxs[-1]]
            if last_blk.size == 0:
                # Rewrite the header of a reset block.
                self._init_block_file(last_blk)
            if last_blk.size < self._block_size:
                self._activate(last_blk)

    def _resync(self, mv: memoryview, pos: int, end: int, min_seq: int) -> int:
        """Offset of the next valid record at or after pos (seq > min_seq), or -1."""
        buf = mv.obj  # type: ignore[attr-defined]
        while pos < end:
            a = buf.find(b"M", pos, end)
            b = buf.find(b"E", pos, end)
            cands = [x for x in (a, b) if x >= 0]
            if not cands:
                return -1
            c = min(cands)
            h = _parse_record(mv, c, end)
            if h is not None and h[4] > min_seq:
                return c
            pos = c + 1
        return -1

    def _truncate_file(self, path: str, size: int) -> None:
        try:
            fd = os.open(path, os.O_RDWR)
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StoreError(f"cannot truncate {path}: {e.strerror or e}") from e

    # -- blocks ---------------------------------------------------------------------

    def _block_path(self, index: int) -> str:
        return os.path.join(self._msgdir, f"{index:010d}.blk")

    def _init_block_file(self, blk: _Block) -> None:
        fd = os.open(blk.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, BLOCK_MAGIC, 0)
        finally:
            os.close(fd)
        blk.size = len(BLOCK_MAGIC)

    def _activate(self, blk: _Block) -> None:
        with self._lock:
            if self._active is not None and self._active is not blk:
                # The previous active block keeps its fd in the cache until synced.
                self._fds[self._active.index] = self._afd
                self._trim_fds()
            fd = self._fds.pop(blk.index, None)
            if fd is None:
                fd = os.open(blk.path, os.O_RDWR)
            self._active = blk
            self._afd = fd

    def _new_block(self) -> _Block:
        index = (max(self._blocks) + 1) if self._blocks else 1
        path = self._block_path(index)
        blk = _Block(index, path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise ErrStoreFull(f"cannot create block {path}: {e.strerror or e}") from e
        try:
            _write_all(fd, [BLOCK_MAGIC], 0, len(BLOCK_MAGIC))
        except OSError as e:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise ErrStoreFull(f"cannot write block {path}: {e.strerror or e}") from e
        blk.size = len(BLOCK_MAGIC)
        self._blocks[index] = blk
        with self._lock:
            self._dir_dirty = True  # the next sync makes the new file's directory entry durable
            if self._active is not None:
                self._fds[self._active.index] = self._afd
            self._active = blk
            self._afd = fd
            self._trim_fds()
        return blk

    def _trim_fds(self) -> None:
        while len(self._fds) > _FD_CACHE:
            index, fd = next(iter(self._fds.items()))
            blk = self._blocks.get(index)
            if blk is not None and blk.synced < blk.size and blk is not self._active:
                size = blk.size
                try:
                    os.fsync(fd)
                    blk.synced = size
                except OSError as e:
                    # keep it open: the next sync() tries again and reports the failure to its caller
                    self.log("error", f"fsync of {blk.path} failed: {e.strerror or e}")
                    self._fds.move_to_end(index)
                    return
            del self._fds[index]
            os.close(fd)

    def _fd_for(self, index: int) -> int:
        blk = self._active
        if blk is not None and blk.index == index:
            return self._afd
        fd = self._fds.get(index)
        if fd is not None:
            return fd
        blk = self._blocks.get(index)
        if blk is None:
            raise ErrStoreCorrupt(f"block {index} is missing")
        with self._lock:
            fd = os.open(blk.path, os.O_RDWR)
            self._fds[index] = fd
            self._trim_fds()
        return fd

    def _unlink_block(self, blk: _Block) -> None:
        with self._lock:
            if blk is self._active:
                os.close(self._afd)
                self._active = None
                self._afd = -1
            fd = self._fds.pop(blk.index, None)
            if fd is not None:
                os.close(fd)
            self._blocks.pop(blk.index, None)
            self._dir_dirty = True
            try:
                os.unlink(blk.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                self.log("error", f"cannot remove block {blk.path}: {e.strerror or e}")

    # -- writing --------------------------------------------------------------------

    def _write(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl_ns: int) -> _Entry:
        if self._log_pending:
            self._log_append(None)
            if self._log_pending:
                raise ErrStoreFull("cannot write sequence state (disk full?)")
        sb = subject.encode("utf-8", "surrogateescape")
        slen = len(sb)
        if slen > 0xFFFF:
            raise StoreError("subject too long")
        hlen = len(hdr)
        dlen = len(data)
        flags = 0
        if self._compress and hlen + dlen >= _COMPRESS_MIN:
            c = bytes(self._snappy.compress_raw(hdr + data))  # type: ignore[union-attr]
            if len(c) < hlen + dlen:
                flags = F_COMPRESSED
                payload = [c]
                plen = len(c)
        if not flags:
            payload = [hdr, data]
            plen = hlen + dlen
        total = _OVERHEAD + slen + plen
        if total >= _MAX_REC:
            raise StoreError("message too large")
        blk = self._active
        if blk is None or (blk.size + total > self._block_size and blk.size > len(BLOCK_MAGIC)):
            blk = self._new_block()
        head = _REC.pack(T_MSG, flags, slen, total, seq, ts, ttl_ns, hlen, dlen)
        crc = zlib.crc32(sb, zlib.crc32(head))
        for p in payload:
            crc = zlib.crc32(p, crc)
        off = blk.size
        try:
            _write_all(self._afd, [head, sb, *payload, _CRC.pack(crc)], off, total)
        except OSError as e:
            try:
                os.ftruncate(self._afd, off)
            except OSError as e2:
                # the partial record stays; the next write goes over it (and recovery cuts a torn tail)
                self.log("error", f"cannot cut off a failed write in {blk.path}: {e2.strerror or e2}")
            raise ErrStoreFull(f"write to {blk.path} failed: {e.strerror or e}") from e
        blk.size = off + total
        if not blk.first:
            blk.first = seq
        blk.last = seq
        blk.live += 1
        if hlen:
            size = 34 + slen + hlen + dlen
        else:
            size = 30 + slen + dlen
        return _Entry(subject, seq, ts, size, blk.index, off, total)

    def _write_batch(self, recs: list[tuple[int, str, bytes, bytes, int, int]]) -> list[_Entry]:
        """An atomic batch: every record in one block with one write, all but the last flagged F_BATCH,
        so recovery sees the whole batch or none of it.  A failed write is cut off again."""
        if len(recs) == 1:
            return [self._write(*recs[0])]
        if self._log_pending:
            self._log_append(None)
            if self._log_pending:
                raise ErrStoreFull("cannot write sequence state (disk full?)")
        bufs: list[bytes] = []
        meta: list[tuple[int, str, int, int, int]] = []  # seq, subject, ts, accounted size, record length
        size_all = 0
        last_i = len(recs) - 1
        for i, (seq, subject, hdr, data, ts, ttl_ns) in enumerate(recs):
            sb = subject.encode("utf-8", "surrogateescape")
            slen = len(sb)
            if slen > 0xFFFF:
                raise StoreError("subject too long")
            hlen = len(hdr)
            dlen = len(data)
            flags = 0 if i == last_i else F_BATCH
            payload = [hdr, data]
            plen = hlen + dlen
            if self._compress and plen >= _COMPRESS_MIN:
                c = bytes(self._snappy.compress_raw(hdr + data))  # type: ignore[union-attr]
                if len(c) < plen:
                    flags |= F_COMPRESSED
                    payload = [c]
                    plen = len(c)
            total = _OVERHEAD + slen + plen
            if total >= _MAX_REC:
                raise StoreError("message too large")
            head = _REC.pack(T_MSG, flags, slen, total, seq, ts, ttl_ns, hlen, dlen)
            crc = zlib.crc32(sb, zlib.crc32(head))
            for p in payload:
                crc = zlib.crc32(p, crc)
            bufs.append(head)
            bufs.append(sb)
            bufs.extend(payload)
            bufs.append(_CRC.pack(crc))
            meta.append((seq, subject, ts, (34 + slen + hlen + dlen) if hlen else (30 + slen + dlen), total))
            size_all += total
        blk = self._active
        if blk is None or (blk.size + size_all > self._block_size and blk.size > len(BLOCK_MAGIC)):
            blk = self._new_block()  # a batch never spans blocks (it may make one larger than block_size)
        off = blk.size
        try:
            _write_all(self._afd, bufs, off, size_all)
        except OSError as e:
            try:
                os.ftruncate(self._afd, off)
            except OSError as e2:
                # the partial batch stays on disk but is never indexed: recovery drops it (no last record)
                self.log("error", f"cannot cut off a failed batch write in {blk.path}: {e2.strerror or e2}")
            raise ErrStoreFull(f"write to {blk.path} failed: {e.strerror or e}") from e
        out = []
        pos = off
        for seq, subject, ts, size, total in meta:
            out.append(_Entry(subject, seq, ts, size, blk.index, pos, total))
            pos += total
        blk.size = pos
        if not blk.first:
            blk.first = meta[0][0]
        blk.last = meta[-1][0]
        blk.live += len(meta)
        return out

    def _entry_size(self, e: _Entry) -> int:
        return e.size

    # -- state log ------------------------------------------------------------------

    def _log_append(self, rec: bytes | None) -> None:
        with self._lock:
            d = self._deferred
            if d:
                self._deferred = []
                self._log_pending.append(_encode_log(L_DEL, struct.pack(f"<{len(d)}Q", *d)))
            if rec is not None:
                self._log_pending.append(rec)
            if self._log_pending:
                self._flush_log_pending_locked(True)

    def _flush_log_pending(self, allow_rewrite: bool = True) -> bool:
        with self._lock:
            return self._flush_log_pending_locked(allow_rewrite)

    def _flush_log_pending_locked(self, allow_rewrite: bool) -> bool:
        data = b"".join(self._log_pending)
        off = self._log_size
        try:
            _write_all(self._log_fd, [data], off, len(data))
        except OSError as e:
            try:
                os.ftruncate(self._log_fd, off)
            except OSError as e2:
                self.log("error", f"cannot cut off a failed write to the sequence state: {e2.strerror or e2}")
            if not self._log_warned:
                self._log_warned = True
                self.log("error", f"cannot write sequence state ({e.strerror or e}); will retry")
            return False
        self._log_pending.clear()
        self._log_warned = False
        self._log_size = off + len(data)
        if allow_rewrite and self._log_size > self._log_compact_at:
            self._rewrite_log()
        return True

    def _log_state_bytes(self) -> bytes:
        """The whole state log for the current in-memory state (main thread only)."""
        floor = min(self._first, min(self._lost)) if self._lost else self._first
        parts = [
            LOG_MAGIC,
            _encode_log(L_FIRST, _U64.pack(floor)),
            _encode_log(L_LAST, _LAST.pack(self._last, self._last_ts)),
        ]
        # Tombstones needed: missing seqs inside the live blocks' ranges (>= first).
        dels: list[int] = []
        msgs = self._msgs
        for blk in self._blocks.values():
            if not blk.first:
                continue
            lo = max(blk.first, floor)
            hi = min(blk.last, self._last)
            if hi < lo:
                continue
            if blk.live == hi - lo + 1:
                continue
            if hi - lo + 1 > 2 * blk.live + 4096:
                # Sparse (sequence gaps): look at the records actually in the file.
                seqs: Iterable[int] = (q for q in self._record_seqs(blk) if lo <= q <= hi)
            else:
                seqs = range(lo, hi + 1)
            dels.extend(q for q in seqs if q not in msgs and q not in self._lost)
        for i in range(0, len(dels), 8192):
            chunk = dels[i : i + 8192]
            parts.append(_encode_log(L_DEL, struct.pack(f"<{len(chunk)}Q", *chunk)))
        return b"".join(parts)

    def _rewrite_log(self) -> bool:
        with self._lock:
            return self._rewrite_log_locked()

    def _rewrite_log_locked(self) -> bool:
        path = os.path.join(self.dir, "state.log")
        data = self._log_state_bytes()
        try:
            _atomic_write(path, data, True)
        except OSError as e:
            if self._log_fd < 0:
                raise ErrStoreFull(f"cannot write {path}: {e.strerror or e}") from e
            if not self._log_warned:
                self._log_warned = True
                self.log("error", f"cannot rewrite {path} ({e.strerror or e}); will retry")
            self._log_compact_at = self._log_size + _LOG_COMPACT_MIN
            return False
        with self._lock:
            if self._log_fd >= 0:
                os.close(self._log_fd)
            self._log_fd = os.open(path, os.O_RDWR)
        self._log_size = len(data)
        self._log_pending.clear()
        self._deferred = []
        self._log_compact_at = max(_LOG_COMPACT_MIN, 4 * len(data))
        return True

    # -- hooks from the index core --------------------------------------------------

    def _on_removed(self, e: _Entry, erase: bool) -> None:
        if self._limit_removal and not erase:
            self._deferred.append(e.seq)
            if len(self._deferred) >= 256:
                self._log_append(None)
        else:
            self._log_append(_encode_log(L_DEL, _U64.pack(e.seq)))
        blk = self._blocks.get(e.blk)
        if blk is None:
            return
        if erase:
            self._erase_record(blk, e)
        blk.live -= 1
        if blk.live == 0 and blk is not self._active:
            self._unlink_block(blk)

    def _erase_record(self, blk: _Block, e: _Entry) -> None:
        head = _REC.pack(T_ERASED, 0, 0, e.rlen, e.seq, 0, 0, 0, 0)
        body = head + bytes(e.rlen - _OVERHEAD)
        rec = body + _CRC.pack(zlib.crc32(body))
        try:
            fd = self._fd_for(blk.index)
            _write_all(fd, [rec], e.off, len(rec))
            os.fsync(fd)
        except OSError as ex:
            # The tombstone is written: the message is gone; only the bytes remain.
            self.log("error", f"cannot erase seq {e.seq} in {blk.path}: {ex.strerror or ex}")

    def _on_bulk_removed(self, kind: str, seq: int, entries: list[Any]) -> None:
        if kind == "purge":
            for blk in list(self._blocks.values()):
                blk.live = 0
            self._lost.clear()
            # Persist the new sequences first, then drop the files.
            if not self._rewrite_log():
                self._log_append(_encode_log(L_FIRST, _U64.pack(seq)))
                self._log_append(_encode_log(L_LAST, _LAST.pack(self._last, self._last_ts)))
            for blk in list(self._blocks.values()):
                self._unlink_block(blk)
            return
        if kind == "compact":
            self._lost = {s for s in self._lost if s >= seq}
            self._log_append(_encode_log(L_FIRST, _U64.pack(seq)))
            for e in entries:
                blk = self._blocks.get(e.blk)
                if blk is not None:
                    blk.live -= 1
            for blk in list(self._blocks.values()):
                if blk.live == 0 and blk is not self._active and not (blk.bad and self._lost):
                    self._unlink_block(blk)
            return
        if kind == "truncate":
            self._lost = {s for s in self._lost if s <= seq}
            for e in entries:
                blk = self._blocks.get(e.blk)
                if blk is not None:
                    blk.live -= 1
            self._truncate_blocks(seq)
            self._log_append(_encode_log(L_TRUNC, _LAST.pack(self._last, self._last_ts)))

    def _truncate_blocks(self, seq: int) -> None:
        for blk in sorted(self._blocks.values(), key=lambda b: -b.index):
            if not blk.first:
                if blk is not self._active:
                    self._unlink_block(blk)
                continue
            if blk.first > seq:
                self._unlink_block(blk)
                continue
            if blk.last > seq:
                cut = self._find_cut(blk, seq)
                fd = self._fd_for(blk.index)
                try:
                    os.ftruncate(fd, cut)
                except OSError as e:
                    raise StoreError(f"cannot truncate {blk.path}: {e.strerror or e}") from e
                blk.size = cut
                blk.synced = min(blk.synced, cut)
                blk.last = self._last_seq_in(blk, cut)
                if not blk.last:
                    blk.first = 0
            break
        if self._blocks:
            last_blk = self._blocks[max(self._blocks)]
            if self._active is not last_blk:
                self._activate(last_blk)
        else:
            self._active = None

    def _read_block(self, blk: _Block, size: int | None = None) -> bytes:
        fd = self._fd_for(blk.index)
        return os.pread(fd, blk.size if size is None else size, 0)

    def _record_seqs(self, blk: _Block) -> list[int]:
        buf = self._read_block(blk)
        mv = memoryview(buf)
        pos = 8
        out = []
        while pos < len(buf):
            h = _parse_record(mv, pos, len(buf))
            if h is None:
                pos = self._resync(mv, pos + 1, len(buf), 0)
                if pos < 0:
                    break
                continue
            out.append(h[4])
            pos += h[3]
        return out

    def _find_cut(self, blk: _Block, seq: int) -> int:
        buf = self._read_block(blk)
        mv = memoryview(buf)
        pos = 8
        while pos < len(buf):
            h = _parse_record(mv, pos, len(buf))
            if h is None:
                pos = self._resync(mv, pos + 1, len(buf), 0)
                if pos < 0:
                    return len(buf)
                continue
            if h[4] > seq:
                return pos
            pos += h[3]
        return len(buf)

    def _last_seq_in(self, blk: _Block, size: int) -> int:
        buf = self._read_block(blk, size)
        mv = memoryview(buf)
        pos = 8
        last = 0
        while pos < len(buf):
            h = _parse_record(mv, pos, len(buf))
            if h is None:
                pos = self._resync(mv, pos + 1, len(buf), 0)
                if pos < 0:
                    break
                continue
            last = h[4]
            pos += h[3]
        return last

    def _on_skip(self) -> None:
        self._log_append(_encode_log(L_LAST, _LAST.pack(self._last, self._last_ts)))

    # -- reading --------------------------------------------------------------------

    def _materialize(self, e: _Entry) -> StoredMsg:
        if self._closed:
            raise ErrStoreClosed()
        try:
            buf = os.pread(self._fd_for(e.blk), e.rlen, e.off)
        except OSError as ex:
            raise ErrStoreCorrupt(f"cannot read seq {e.seq}: {ex.strerror or ex}", seq=e.seq) from ex
        mv = memoryview(buf)
        h = _parse_record(mv, 0, len(buf))
        if h is None or h[0] != T_MSG or h[4] != e.seq:
            self.log("error", f"seq {e.seq}: record failed its checksum")
            raise ErrStoreCorrupt(f"message {e.seq} is corrupt", seq=e.seq)
        _, flags, slen, total, seq, ts, ttl, hlen, dlen = h
        p = _REC_LEN + slen
        if flags & F_COMPRESSED:
            raw = bytes(_snappy().decompress_raw(buf[p : total - 4]))
            if len(raw) != hlen + dlen:
                raise ErrStoreCorrupt(f"message {e.seq} is corrupt", seq=e.seq)
            return StoredMsg(e.subject, seq, ts, raw[:hlen], raw[hlen:])
        return StoredMsg(e.subject, seq, ts, buf[p : p + hlen], buf[p + hlen : p + hlen + dlen])

    def load_msg(self, seq: int) -> StoredMsg | None:
        e = self._msgs.get(seq)
        if e is None:
            if seq in self._lost:
                raise ErrStoreCorrupt(f"message {seq} is lost (corrupt data)", seq=seq)
            return None
        return self._materialize(e)

    def ttl_of(self, seq: int) -> float:
        if seq in self._no_expire:
            return -1
        exp = self._ttl_of.get(seq)
        e = self._msgs.get(seq)
        if exp is None or e is None:
            return 0
        return (exp - e.ts) / 1e9

    def _lost_list(self) -> list[int]:
        return sorted(self._lost)

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        self._check_open()
        if seq in self._lost:
            self._lost.discard(seq)
            self._log_append(_encode_log(L_DEL, _U64.pack(seq)))
            return False
        return self._remove(seq, erase)

    # -- durability / lifecycle -----------------------------------------------------

    def flush(self) -> None:
        """Push everything to the OS (messages already are); write consumer states."""
        if self._closed:
            return
        self._log_append(None)
        if self._log_pending:
            raise ErrStoreFull("cannot write sequence state")
        for cs in list(self._consumers.values()):
            if isinstance(cs, FileConsumerStore):
                cs.flush()

    def sync(self) -> None:
        """fsync the blocks written since the last sync, the state log and consumer states.
        Safe to run in a thread while the owner keeps storing: the files are fsynced
        through duplicated descriptors, outside the store's lock."""
        if self._closed:
            return
        todo: list[tuple[_Block | None, int, int]] = []
        with self._lock:
            if self._log_pending and not self._flush_log_pending(False):
                raise ErrStoreFull("cannot write sequence state")
            try:
                if self._active is not None and self._active.synced < self._active.size:
                    todo.append((self._active, os.dup(self._afd), self._active.size))
                for index, fd in list(self._fds.items()):
                    blk = self._blocks.get(index)
                    if blk is not None and blk.synced < blk.size:
                        todo.append((blk, os.dup(fd), blk.size))
                if self._log_fd >= 0:
                    todo.append((None, os.dup(self._log_fd), 0))
            except OSError as e:
                for _, fd, _ in todo:
                    os.close(fd)
                raise ErrStoreFull(f"sync failed: {e.strerror or e}") from e
            sync_dir = self._dir_dirty
            self._dir_dirty = False
        err: OSError | None = None
        if sync_dir:
            # new block files: their directory entries must be durable before an ack relies on them
            try:
                fsync_dir(self._msgdir)
            except OSError as e:
                self._dir_dirty = True
                err = e
        for blk, fd, size in todo:
            try:
                os.fsync(fd)
                if blk is not None and size > blk.synced:
                    blk.synced = size
            except OSError as e:
                err = err or e
            finally:
                os.close(fd)
        if err is not None:
            raise ErrStoreFull(f"fsync failed: {err.strerror or err}") from err
        for cs in list(self._consumers.values()):
            if isinstance(cs, FileConsumerStore):
                cs.sync()

    def stop(self) -> None:
        """Sync and close the files; the store stays on disk."""
        if self._closed:
            return
        try:
            self._log_append(None)
            self.sync()
        except StoreError as e:
            self.log("error", f"sync at stop failed: {e}")
        for cs in list(self._consumers.values()):
            try:
                cs.stop()
            except StoreError as e:
                self.log("error", str(e))
        self._close_fds()
        self._closed = True

    def _close_fds(self) -> None:
        with self._lock:
            if self._afd >= 0:
                os.close(self._afd)
                self._afd = -1
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            if self._log_fd >= 0:
                os.close(self._log_fd)
                self._log_fd = -1
            self._active = None

    def delete(self) -> None:
        """Remove the whole store directory."""
        if not self._closed:
            self._close_fds()
            self._closed = True
        self._msgs = {}
        self._fss = {}
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- consumers ------------------------------------------------------------------

    def _new_consumer_store(self, name: str) -> FileConsumerStore:
        return FileConsumerStore(name, os.path.join(self._cdir, _safe_name(name)), self.log)

    # -- snapshot -------------------------------------------------------------------

    def snapshot_stream(self, include_consumers: bool = True) -> Iterator[bytes]:
        """A tar of the store (blocks, state, consumer states), as bytes chunks."""
        return snapshot_from_store(self, include_consumers)


# ---------------------------------------------------------------------------
# Snapshot and restore


class _Sink(io.RawIOBase):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.chunks.append(bytes(b))
        return len(b)

    def take(self) -> list[bytes]:
        out, self.chunks = self.chunks, []
        return out


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = int(time.time())
    ti.mode = 0o644
    tar.addfile(ti, io.BytesIO(data))


def snapshot_from_store(store: IndexedStore, include_consumers: bool = True) -> Iterator[bytes]:
    """Snapshot any store in the file store's format: a tar stream of ``meta.json``,
    ``state.log``, ``msgs/*.blk`` and ``consumers/<name>/state``.  The set of messages
    is taken when the iteration starts; messages removed meanwhile are left out."""
    st = store.fast_state()
    seqs = list(store._msgs)
    bsize = max(int(getattr(store.cfg, "block_size", 0) or 0), 4096)
    cons: list[tuple[str, bytes]] = []
    if include_consumers:
        for name, cs in store._consumers.items():
            enc = cs._enc
            if enc is not None:
                cons.append((name, enc))
    ttl_of = getattr(store, "ttl_of")

    def gen() -> Iterator[bytes]:
        sink = _Sink()
        tar = tarfile.open(fileobj=sink, mode="w|")  # type: ignore[arg-type]
        _tar_add(tar, "meta.json", json.dumps({"format": FORMAT_VERSION, "name": store.cfg.name}).encode())
        yield from sink.take()
        index = 1
        parts: list[bytes] = [BLOCK_MAGIC]
        size = len(BLOCK_MAGIC)
        have: list[int] = []
        for seq in seqs:
            try:
                sm = store.load_msg(seq)
            except ErrStoreCorrupt:
                continue
            if sm is None:
                continue
            ttl = ttl_of(seq)
            rec = _encode_record(sm, int(ttl * 1e9) if ttl else 0)
            if size + len(rec) > bsize and size > len(BLOCK_MAGIC):
                _tar_add(tar, f"msgs/{index:010d}.blk", b"".join(parts))
                yield from sink.take()
                index += 1
                parts = [BLOCK_MAGIC]
                size = len(BLOCK_MAGIC)
            parts.append(rec)
            size += len(rec)
            have.append(seq)
        if size > len(BLOCK_MAGIC):
            _tar_add(tar, f"msgs/{index:010d}.blk", b"".join(parts))
            yield from sink.take()
        # Sequence state: first/last markers and the interior gaps as tombstones.
        first = have[0] if have else st.last_seq + 1
        logp = [
            LOG_MAGIC,
            _encode_log(L_FIRST, _U64.pack(first)),
            _encode_log(L_LAST, _LAST.pack(st.last_seq, st.last_ts)),
        ]
        dels: list[int] = []
        prev = first - 1
        for s in have:
            if s > prev + 1:
                dels.extend(range(prev + 1, s))
            prev = s
        for i in range(0, len(dels), 8192):
            chunk = dels[i : i + 8192]
            logp.append(_encode_log(L_DEL, struct.pack(f"<{len(chunk)}Q", *chunk)))
        _tar_add(tar, "state.log", b"".join(logp))
        for name, enc in cons:
            data = CONSUMER_MAGIC + _CRC.pack(zlib.crc32(enc)) + enc
            _tar_add(tar, f"consumers/{_safe_name(name)}/name", name.encode())
            _tar_add(tar, f"consumers/{_safe_name(name)}/state", data)
        tar.close()
        yield from sink.take()

    return gen()


def _encode_record(sm: StoredMsg, ttl_ns: int) -> bytes:
    sb = sm.subject.encode("utf-8", "surrogateescape")
    total = _OVERHEAD + len(sb) + len(sm.hdr) + len(sm.data)
    head = _REC.pack(T_MSG, 0, len(sb), total, sm.seq, sm.ts, ttl_ns, len(sm.hdr), len(sm.data))
    body = b"".join((head, sb, sm.hdr, sm.data))
    return body + _CRC.pack(zlib.crc32(body))


class _ChunkReader(io.RawIOBase):
    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = bytes(next(self._it))
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def restore(path: str, chunks: Iterable[bytes]) -> None:
    """Unpack a snapshot (from ``snapshot_stream``) into the store directory ``path``;
    open it with ``FileStore(path, cfg)``."""
    if os.path.exists(path) and os.listdir(path):
        raise StoreError(f"restore target {path} is not empty")
    os.makedirs(os.path.join(path, "msgs"), exist_ok=True)
    os.makedirs(os.path.join(path, "consumers"), exist_ok=True)
    reader = io.BufferedReader(_ChunkReader(chunks), 1 << 16)
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for ti in tar:
                name = ti.name
                parts = name.split("/")
                ok = ti.isfile() and (
                    name in ("meta.json", "state.log")
                    or (len(parts) == 2 and parts[0] == "msgs" and parts[1].endswith(".blk"))
                    or (
                        len(parts) == 3
                        and parts[0] == "consumers"
                        and parts[2] in ("state", "name")
                        and parts[1] not in ("", ".", "..")
                    )
                )
                if not ok:
                    raise StoreError(f"unexpected entry {name!r} in snapshot")
                f = tar.extractfile(ti)
                assert f is not None
                dest = os.path.join(path, *parts)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "wb") as out:
                    shutil.copyfileobj(f, out)
    except (tarfile.TarError, OSError) as e:
        raise StoreError(f"bad snapshot: {e}") from e


def restore_into(store: IndexedStore, chunks: Iterable[bytes], log: LogFn | None = None) -> None:
    """Load a snapshot into an empty store of any kind (e.g. a MemStore)."""
    import tempfile

    tmp = tempfile.mkdtemp(prefix="rillet-restore-")
    try:
        restore(os.path.join(tmp, "s"), chunks)
        cfg = StoreConfig(name=store.cfg.name, storage="file")
        fs = FileStore(os.path.join(tmp, "s"), cfg, log)
        try:
            st = fs.fast_state()
            for seq in list(fs._msgs):
                sm = fs.load_msg(seq)
                if sm is None:
                    continue
                ttl = fs.ttl_of(seq)
                store.store_raw(sm.seq, sm.subject, sm.hdr, sm.data, sm.ts, ttl=ttl)
            if st.last_seq > store._last:
                store.skip_msgs(store._last + 1, st.last_seq - store._last)
            if not store._msgs and st.first_seq > store._first:
                store.compact(st.first_seq)
            for name, cs in fs._consumers.items():
                state = cs.state()
                if state is not None:
                    store.consumer_store(name).update(state)
        finally:
            fs.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
