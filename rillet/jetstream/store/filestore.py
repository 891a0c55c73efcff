"""FileStore: a stream's messages in append-only block files.

Directory layout (``<dir>`` is what the caller passes, one per stream)::

    <dir>/meta.json                 format version and the stream name (informational)
    <dir>/state.log                 sequence state: first/last markers and tombstones
    <dir>/msgs/0000000001.blk ...   message blocks, in sequence order
    <dir>/msgs/0000000001.idx ...   their indexes (see _fsindex; a cache, checked against the block)
    <dir>/consumers/<name>/state    consumer states: two slots, state and state.1, written in turn in place

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

The index is per block (``_fsindex``): resident per block only its sequence range, live count,
per-subject live counts, a dead-slot bytearray once something in it was removed, and TTL bounds;
the per-message columns (offset, length, size, timestamp, subject id, TTL) are loaded on demand
into a bounded LRU (the active block's always), from ``msgs/<n>.idx`` files written when a block is
sealed, after a recovery scan and at stop.  Stream-wide per subject: ``[count, first block, last
seq]``.  No object per message; queries are in ``_fsquery``.

On open each block's index file is used if its checksums hold and it matches the block (size,
crc32 of the whole block file, last record); otherwise that block alone is scanned, every record's
checksum verified, then the state log is applied.  A bad record at the tail of the last block (a
torn write) is cut off with a warning; a bad record anywhere else is reported: its sequences go to
``state().lost`` and ``load_msg`` raises ErrStoreCorrupt.  Every read verifies the record's crc.

An atomic batch (``store_batch``) is written with one write into one block, every record but
the last flagged "more follow".  Recovery indexes a batch only when its last record is there:
a batch cut short by a crash is dropped whole (the block is truncated at the batch's start).

Writes go straight to the OS (one pwritev per message), or, with write-behind on (``write_behind``, what a
stream on one server turns on), the plain appends of one pass of the event loop are gathered and written with
one write by ``flush_writes`` before anything reads them or their PubAcks leave (``write_behind`` says which);
``sync()`` fsyncs, and also fsyncs the
``msgs/`` directory when a block file was created or removed since the last sync (a new file is
durable only once its directory entry is).  Directories and renamed files (meta, state log), and
consumer state slot files, are made durable when created.  A failed write
(disk full, read-only) is rolled back by truncating the block and raises ErrStoreFull;
the store keeps working when space returns.  Tombstones that could not be written are kept
and retried on the next write or sync.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import threading
import time
import zlib
from array import array
from collections import OrderedDict
from typing import Any, Iterator

import msgspec

from rillet.cipher import BlockStream, CipherError, KeyRing, block_stream, open_block_stream
from ._common import _NS, MemConsumerStore, StoreCommon
from ._query import StoreQueries
from ._fsindex import Block, BlockIndex, encode_index, index_totals, read_columns, read_summary
from ._fsquery import _NOKEY, BlockQueries
from ._fsrecover import BlockRecovery
from ._fsformat import (
    BLOCK_MAGIC,
    CONSUMER_MAGIC,
    FORMAT_VERSION,
    F_BATCH,
    F_COMPRESSED,
    LOG_MAGIC,
    L_DEL,
    L_FIRST,
    L_LAST,
    L_TRUNC,
    T_ERASED,
    T_MSG,
    _CRC,
    _LAST,
    _MAX_REC,
    _OVERHEAD,
    _REC,
    _REC_LEN,
    _U64,
    _encode_log,
    _parse_record,
    _safe_name,
    _snappy,
)
from rillet.durable import fsync_dir, make_dirs_durable

from .base import (
    ErrStoreClosed,
    ErrStoreCorrupt,
    ErrStoreFull,
    ErrSyncFailed,
    LogFn,
    StoreConfig,
    StoredMsg,
    StoreError,
    decode_consumer_state,
)

__all__ = ["FileStore", "restore", "restore_into", "snapshot_from_store"]

_COMPRESS_MIN = 64
_FD_CACHE = 64
_LOG_COMPACT_MIN = 1 << 20
_IDX_CACHE = 8  # loaded indexes of sealed blocks kept (LRU), besides the active block's
_IDX_IDLE = 30.0  # seconds: a loaded index unused for this long is dropped at the next load
_MAX_GAP = 4096  # a sequence gap larger than this inside a block starts a new block
_WB_MAX = 1 << 20  # write-behind: gathered bytes past this are written first


def _default_log(level: str, text: str) -> None:
    pass


_READ_AHEAD = 32 * 1024  # bytes read at once by sequential reads
_CRC_RESIDUE = 0x2144DF1C  # zlib.crc32(data + crc32(data) as 4 little-endian bytes), whatever the data
CONSUMER_MAGIC2 = b"RILCNS02"  # a consumer state slot (FileConsumerStore)
_CSLOT = struct.Struct("<QI")  # generation, length of the encoded state


def _parse_consumer_slot(buf: bytes) -> tuple[int, bytes] | None:
    """(generation, encoded state) of a consumer state file, either form; None when it does not check."""
    if len(buf) < 12:
        return None
    (crc,) = _CRC.unpack_from(buf, 8)
    if buf[:8] == CONSUMER_MAGIC:
        gen, enc = 0, buf[12:]
        ok = zlib.crc32(enc) == crc
    elif buf[:8] == CONSUMER_MAGIC2 and len(buf) >= 12 + _CSLOT.size:
        gen, n = _CSLOT.unpack_from(buf, 12)
        end = 12 + _CSLOT.size + n
        enc = buf[12 + _CSLOT.size:end]
        ok = end <= len(buf) and zlib.crc32(memoryview(buf)[12:end]) == crc
    else:
        return None
    if not ok:
        return None
    try:
        decode_consumer_state(enc)
    except msgspec.DecodeError:
        return None
    return gen, enc


def _write_all(fd: int, bufs: list[bytes], off: int, total: int) -> None:
    n = os.pwritev(fd, bufs, off)
    if n != total:
        _write_rest(fd, b"".join(bufs), off, n, total)


def _write_rest(fd: int, data: bytes, off: int, n: int, total: int) -> None:
    """A short write (``n`` of ``data``'s ``total`` bytes at ``off``): finish it piecewise (ENOSPC raises
    from here; also the compiled twin's)."""
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


class FileConsumerStore(MemConsumerStore):
    """Consumer state in ``<dir>/consumers/<name>/``, in two slots written in turn: ``state`` and
    ``state.1``, each ``RILCNS02`` + crc32 + generation (u64) + length (u32) + the encoded state (the crc
    covers what follows it). A write overwrites the older slot in place (no new file, no rename: a rename
    over a file makes ext4 write its data back at once, ~1 ms a time); the newer valid slot is the state
    when the store opens, so a write torn by a power loss leaves the one before. A ``state`` written by an
    earlier Rillet (``RILCNS01`` + crc32 + state, a snapshot's form too) is generation 0.

    ``update`` records the state in memory; ``flush`` writes it and ``sync`` also fsyncs it (and the
    directory once a slot file was created).  The stream's ``flush``/``sync``/``stop`` do this for every
    consumer.
    """

    def __init__(self, name: str, path: str, log: LogFn) -> None:
        super().__init__(name)
        self.path = path
        self._dirty = False
        self._log = log
        self._wlock = threading.Lock()
        self._unsynced = False  # written without fsync: sync() makes it durable
        self._dir_unsynced = False  # a slot file was created since the directory was last fsynced
        self._gen = 0  # the generation of the newest slot
        self._slot = 1  # the slot that holds it (the next write goes to the other one)
        make_dirs_durable(path)
        nfn = os.path.join(path, "name")
        if not os.path.exists(nfn):
            _atomic_write(nfn, name.encode("utf-8", "surrogateescape"), True)
        best = None
        for slot in (0, 1):
            fn = self._slot_path(slot)
            try:
                with open(fn, "rb") as f:
                    buf = f.read()
            except FileNotFoundError:
                continue
            got = _parse_consumer_slot(buf)
            if got is None:
                log("error", f"consumer {name!r}: state file {fn} is corrupt, ignored")
                continue
            if best is None or got[0] > best[0]:
                best = (got[0], slot, got[1])
        if best is not None:
            self._gen, self._slot, self._enc = best

    def _slot_path(self, slot: int) -> str:
        return os.path.join(self.path, "state" if slot == 0 else "state.1")

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
            gen = self._gen + 1
            slot = 1 - self._slot
            body = _CSLOT.pack(gen, len(enc)) + enc
            data = CONSUMER_MAGIC2 + _CRC.pack(zlib.crc32(body)) + body
            fn = self._slot_path(slot)
            try:
                created = not os.path.exists(fn)
                fd = os.open(fn, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    _write_all(fd, [data], 0, len(data))
                    os.ftruncate(fd, len(data))
                    if durable:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                if created:
                    self._dir_unsynced = True
                if durable and self._dir_unsynced:
                    fsync_dir(self.path)
                    self._dir_unsynced = False
            except OSError as e:
                self._dirty = True
                raise ErrStoreFull(f"consumer {self.name!r}: {e.strerror or e}") from e
            self._gen, self._slot = gen, slot
            self._unsynced = not durable

    def sync(self) -> None:
        if self._dirty:
            self.flush(durable=True)
        elif self._unsynced and not self._closed:
            # written by an earlier flush without fsync: the slot, and the directory when the slot is new
            with self._wlock:
                self._unsynced = False
                try:
                    fd = os.open(self._slot_path(self._slot), os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    if self._dir_unsynced:
                        fsync_dir(self.path)
                        self._dir_unsynced = False
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


class FileStore(BlockRecovery, BlockQueries, StoreCommon, StoreQueries):
    """A stream's messages on disk.  ``FileStore(directory, cfg, log=None)``."""

    # the pass over a block's columns that its index file needs (the compiled twin's is a C loop)
    _index_totals = staticmethod(index_totals)

    # Accounted size like nats-server's file store: 30 + subject + data (+ 4 + hdr).
    _size_overhead = 30
    _hdr_overhead = 4

    def __init__(self, directory: str, cfg: StoreConfig | None = None, log: LogFn | None = None,
                 keys: KeyRing | None = None) -> None:
        cfg = cfg or StoreConfig(storage="file")
        super().__init__(cfg)
        self.dir = os.path.abspath(directory)
        self.log: LogFn = log or _default_log
        self._lock = threading.RLock()
        self._blocks: dict[int, Block] = {}  # in order of index
        self._bl: list[Block] = []  # the same blocks, in order
        self._bfirst: list[int] = []  # their first seqs (bisect)
        self._active: Block | None = None
        self._aidx: BlockIndex | None = None  # the active block's index (always loaded)
        self._afd = -1  # active block fd
        self._fds: OrderedDict[int, int] = OrderedDict()  # block index -> fd (non-active)
        self._cache: OrderedDict[int, BlockIndex] = OrderedDict()  # loaded indexes of sealed blocks (LRU)
        self._pinned: dict[int, BlockIndex] = {}  # indexes of blocks with corrupt regions (never rebuilt)
        self._cache_sweep = time.monotonic()
        # sequential reads (a consumer's next message): (block index, file offset, bytes) read ahead once,
        # and where the last read ended; dropped whenever a block's bytes change in place (see _read_msg)
        self._rc: tuple[int, int, bytes] | None = None
        self._rc_next = -1
        self._ra_on = False  # reading ahead (inside a read pass: read_begin .. read_done)
        self._psim: dict[str, list[int]] = {}  # subject -> [count, first block index (lower bound), last seq]
        self._nmsgs = 0
        self._lost: set[int] = set()
        self._log_fd = -1
        self._log_size = 0
        self._log_pending: list[bytes] = []  # records not yet written (a write failed)
        # Tombstones of removals by limits (max_msgs/bytes/per subject, age, TTL) are batched:
        # if lost in a crash, reopening re-applies the same limits.
        self._deferred: list[int] = []
        self._log_compact_at = _LOG_COMPACT_MIN
        self._log_warned = False
        self._idx_warned = False
        self._block_size = max(int(cfg.block_size or 0), 64)
        self._compress = cfg.compression == "s2"
        self._snappy = _snappy() if self._compress else None
        self._msgdir = os.path.join(self.dir, "msgs")
        self._cdir = os.path.join(self.dir, "consumers")
        self._dir_dirty = False  # a block file was created or removed since the last sync of msgs/
        # write-behind (off: None; see write_behind): the records not yet written, where they start in the
        # active block (-1: none), the state before the first of them, the psim entries they changed
        self._wb: bytearray | None = None  # (the buffer while gathering, else None)
        self._wb_buf: bytearray | None = None
        self._wb_off = -1
        self._wb_save: tuple | None = None
        self._wb_ps: dict[str, list[int] | None] = {}
        self._wb_armed: Any = None
        self._wb_failed: Any = None
        self._wb_thread = 0
        try:
            make_dirs_durable(self._msgdir)
            make_dirs_durable(self._cdir)
        except OSError as e:
            raise ErrStoreFull(f"cannot create store directory {self.dir}: {e.strerror or e}") from e
        # encryption at rest (cipher.py): the store's key record is checked before anything is read or written
        self._keys = keys
        self._bks: dict[int, BlockStream] = {}
        self._setup_keys()
        self._open()

    # -- encryption at rest -----------------------------------------------------------
    # ``<dir>/key``: the store's key record (context: the stream name), opened first: a wrong key stops the
    # open with KeyRecoveryError ('unable to recover keys') before any file is read or changed.
    # ``msgs/<n>.key``: block n's key record (context ``<stream>:<n>``); the block's bytes are XORed with
    # its keystream at their file offsets.  Index files are not written (blocks are scanned instead).

    def _setup_keys(self) -> None:
        kpath = os.path.join(self.dir, "key")
        if self._keys is None:
            if os.path.exists(kpath):
                raise CipherError("encryption not enabled")
            return
        try:
            with open(kpath, "rb") as f:
                rec: bytes | None = f.read()
        except FileNotFoundError:
            rec = None
        ctx = self.cfg.name
        if rec is not None:
            r = self._keys.recover(ctx, rec)  # KeyRecoveryError: nothing touched
            if r.rotated:
                _atomic_write(kpath, self._keys.rewrap(ctx, r.key), True)
            return
        # a new store, or a plaintext one (restored from a snapshot, or made before a key was set): encrypt it
        for fn in sorted(os.listdir(self._msgdir)):
            path = os.path.join(self._msgdir, fn)
            if fn.endswith(".idx"):
                os.unlink(path)
            elif fn.endswith(".blk") and fn[:-4].isdigit():
                with open(path, "rb") as f:
                    data = f.read()
                bs, brec = block_stream(self._keys, f"{ctx}:{int(fn[:-4])}")
                _atomic_write(path + ".enc", bs.xor(data, 0), True)
                _atomic_write(path[:-4] + ".key", brec, True)
                os.replace(path + ".enc", path)
        _, rec = self._keys.new_asset(ctx)
        _atomic_write(kpath, rec, True)

    def _bkey_path(self, index: int) -> str:
        return os.path.join(self._msgdir, f"{index:010d}.key")

    def _new_bstream(self, index: int) -> None:
        bs, rec = block_stream(self._keys, f"{self.cfg.name}:{index}")  # type: ignore[arg-type]
        _atomic_write(self._bkey_path(index), rec, True)  # (durable first: its block is unreadable without it)
        self._bks[index] = bs

    def _bstream(self, index: int) -> BlockStream:
        bs = self._bks.get(index)
        if bs is None:
            kp = self._bkey_path(index)
            try:
                with open(kp, "rb") as f:
                    rec = f.read()
            except OSError as e:
                raise ErrStoreCorrupt(f"cannot read the key of block {index}: {e.strerror or e}") from e
            bs, new = open_block_stream(self._keys, f"{self.cfg.name}:{index}", rec)  # type: ignore[arg-type]
            if new is not None:
                _atomic_write(kp, new, True)  # key rotation: sealed with the current key
            self._bks[index] = bs
        return bs

    def _crypt(self, index: int, bufs: list, off: int) -> list:
        """Block bytes as written to (or read from) the file at ``off``."""
        if self._keys is None:
            return bufs
        return [self._bstream(index).xor(b"".join(bufs), off)]

    def _pread(self, index: int, fd: int, n: int, off: int) -> bytes:
        buf = os.pread(fd, n, off)
        return buf if self._keys is None else self._bstream(index).xor(buf, off)

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
                        name = f.read().decode("utf-8", "surrogateescape")
                except (OSError, UnicodeDecodeError):
                    name = n
                self._consumers[name] = FileConsumerStore(name, p, self.log)
        # Start from a compact log reflecting the recovered state.
        self._rewrite_log()
        self._enforce_after_open()

    def _enforce_after_open(self) -> None:
        self._enforce_all_subjects()
        self._enforce_limits()

    # -- block indexes --------------------------------------------------------------

    def _idx(self, blk: Block) -> BlockIndex:
        if blk is self._active:
            return self._aidx  # type: ignore[return-value]
        x = self._cache.get(blk.index)
        if x is not None:
            if not x.used:
                x.used = True
            return x
        x = self._pinned.get(blk.index)
        if x is not None:
            return x
        return self._load_idx(blk)

    def _cache_put(self, index: int, x: BlockIndex) -> None:
        cache = self._cache
        cache[index] = x
        cache.move_to_end(index)
        while len(cache) > _IDX_CACHE:
            cache.popitem(last=False)

    def _load_idx(self, blk: Block) -> BlockIndex:
        """Load a sealed block's index: from its index file if it checks out, else by scanning the block."""
        now = time.monotonic()
        if now - self._cache_sweep > _IDX_IDLE:
            self._drop_idle()
        x = None
        if blk.idx_on_disk:
            ipath = self._idx_path(blk)
            s = read_summary(ipath)
            if s is not None and s.first == blk.first and s.last == blk.last and s.fsize == blk.size:
                x = read_columns(ipath, s)
                if x is not None and x.subjs != list(blk.smap):
                    x = None
            if x is None:
                self.log("warn", f"{ipath}: index unreadable or stale; the block is scanned")
                blk.idx_on_disk = False
                self._unlink_quiet(ipath)
        if x is None:
            x = self._rescan(blk)
            self._write_index(blk, x)
        self._cache_put(blk.index, x)
        return x

    def _drop_idle(self) -> None:
        """Drop the loaded indexes not used since the last sweep."""
        self._cache_sweep = time.monotonic()
        for index, x in list(self._cache.items()):
            if x.used:
                x.used = False
            else:
                del self._cache[index]

    def _write_index(self, blk: Block, x: BlockIndex) -> None:
        """Write the block's index file (no fsync: it is checked against the block when read)."""
        if blk.bad or not blk.first or not len(x.offs) or self._keys is not None:
            return  # (an encrypted store keeps no index files: its blocks are scanned on open)
        try:
            bcrc = zlib.crc32(self._read_block(blk))
            _atomic_write(self._idx_path(blk), encode_index(blk, x, bcrc, self._index_totals), False)
        except OSError as e:
            if not self._idx_warned:
                self._idx_warned = True
                self.log("warn", f"cannot write index of {blk.path}: {e.strerror or e}")
            return
        blk.idx_on_disk = True

    # -- blocks ---------------------------------------------------------------------

    def _block_path(self, index: int) -> str:
        return os.path.join(self._msgdir, f"{index:010d}.blk")

    def _init_block_file(self, blk: Block) -> None:
        self._rc = None
        fd = os.open(blk.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 0)
            if self._keys is not None:
                self._new_bstream(blk.index)
            os.pwrite(fd, self._crypt(blk.index, [BLOCK_MAGIC], 0)[0], 0)
        finally:
            os.close(fd)
        blk.size = len(BLOCK_MAGIC)

    def _activate(self, blk: Block) -> None:
        x = self._cache.pop(blk.index, None) or self._pinned.get(blk.index)
        if x is None and self._active is blk:
            x = self._aidx
        if x is None:
            if blk.first:
                x = self._load_idx(blk)
                self._cache.pop(blk.index, None)
            else:
                x = BlockIndex()
        if blk.idx_on_disk:
            # appends will make it stale: rewritten when the block is sealed or the store stops
            blk.idx_on_disk = False
            self._unlink_quiet(self._idx_path(blk))
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
        self._aidx = x

    def _seal_active(self) -> None:
        """The active block is full: its index goes to the cache and to its index file."""
        blk = self._active
        x = self._aidx
        if blk is None or x is None:
            return
        if blk.bad:
            self._pinned[blk.index] = x
        else:
            self._write_index(blk, x)
            self._cache_put(blk.index, x)

    def _new_block(self) -> Block:
        if self._wb_off >= 0:
            self.flush_writes()
        index = (self._bl[-1].index + 1) if self._bl else 1
        path = self._block_path(index)
        blk = Block(index, path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise ErrStoreFull(f"cannot create block {path}: {e.strerror or e}") from e
        try:
            if self._keys is not None:
                self._new_bstream(index)
            _write_all(fd, self._crypt(index, [BLOCK_MAGIC], 0), 0, len(BLOCK_MAGIC))
        except OSError as e:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise ErrStoreFull(f"cannot write block {path}: {e.strerror or e}") from e
        self._seal_active()
        self._unlink_quiet(self._idx_path(blk))
        blk.size = len(BLOCK_MAGIC)
        self._blocks[index] = blk
        self._bl.append(blk)
        self._bfirst.append(_NOKEY)
        with self._lock:
            self._dir_dirty = True  # the next sync makes the new file's directory entry durable
            if self._active is not None:
                self._fds[self._active.index] = self._afd
            self._active = blk
            self._afd = fd
            self._trim_fds()
        self._aidx = BlockIndex()
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
            if self._wb_off >= 0:
                self.flush_writes()  # (what is read or changed in place is on the OS first)
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

    def _unlink_block(self, blk: Block) -> None:
        self._rc = None
        with self._lock:
            if blk is self._active:
                os.close(self._afd)
                self._active = None
                self._aidx = None
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
        self._cache.pop(blk.index, None)
        self._pinned.pop(blk.index, None)
        if blk.idx_on_disk or os.path.exists(self._idx_path(blk)):
            self._unlink_quiet(self._idx_path(blk))
        if self._bks.pop(blk.index, None) is not None or self._keys is not None:
            self._unlink_quiet(self._bkey_path(blk.index))
        try:
            i = self._bl.index(blk)
        except ValueError:
            return
        del self._bl[i]
        del self._bfirst[i]

    # -- writing --------------------------------------------------------------------

    def _append(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: float, e: Any = None
    ) -> None:
        """Write (unless ``e``, the accounted size of an already written and indexed record, is given)
        and account a message.  (``_append``, ``_write`` and ``_index_record`` have a compiled twin,
        rillet/_speedups/_cstore.pyx: a change here goes there too; tests/test_lanes_store.py compares them.)"""
        if e is None:
            e = self._write(seq, subject, hdr, data, ts, int(ttl * _NS) if ttl else 0)
        if not self._nmsgs:
            self._first = seq
        self._nmsgs += 1
        self._last = seq
        self._last_ts = ts
        self._bytes += e
        ps = self._psim.get(subject)
        if ps is None:
            self._psim[subject] = [1, self._active.index, seq]  # type: ignore[union-attr]
        else:
            ps[0] += 1
            ps[2] = seq
            if self._maxp and ps[0] > self._maxp:
                self._enforce_per_subject(subject)
        if self._post_limits:
            self._enforce_limits()

    def _index_record(
        self, blk: Block, x: BlockIndex, seq: int, subject: str, sb: bytes, ts: int, ttl_ns: int, off: int,
        total: int, size: int,
    ) -> None:
        offs = x.offs
        if not offs:
            x.base = seq
            blk.first = seq
            blk.first_ts = ts
            self._bfirst[-1] = seq
        else:
            gap = seq - x.base - len(offs)
            if gap:
                x.pad(gap, blk.last_ts)
        l = blk.smap.get(subject)
        if l is None:
            l = blk.smap[subject] = len(x.subjs)
            x.subjs.append(subject)
            x.sbytes.append(sb)
            blk.scnt.append(0)
        if x.spos_all:
            p = x.spos.get(l)
            if p is None:
                x.spos[l] = array("I", [len(offs)])
            else:
                p.append(len(offs))
        offs.append(off)
        x.rlen.append(total)
        x.sz.append(size)
        x.ts.append(ts)
        x.sid.append(l)
        if ttl_ns:
            if x.ttl is None:
                x.add_ttl_column(len(offs) - 1)
            x.ttl.append(ttl_ns)  # type: ignore[union-attr]
            if ttl_ns > 0:
                exp = ts + ttl_ns
                if not blk.min_exp or exp < blk.min_exp:
                    blk.min_exp = exp
            else:
                blk.n_noexp += 1
        elif x.ttl is not None:
            x.ttl.append(0)
        blk.scnt[l] += 1
        blk.live += 1
        blk.last = seq
        blk.last_ts = ts

    def _target_block(self, seq: int, total: int) -> Block:
        blk = self._active
        if (
            blk is None
            or (blk.size + total > self._block_size and blk.size > len(BLOCK_MAGIC))
            or (blk.last and seq - blk.last > _MAX_GAP)
        ):
            blk = self._new_block()
        return blk

    def _write(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl_ns: int) -> int:
        """Write and index one record; returns its accounted size."""
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
        wb = self._wb
        if wb is not None:
            blk = self._active
            x = self._aidx
            if (not hlen and not ttl_ns and not flags and not self._maxp and not self._post_limits
                    and blk is not None and x is not None and len(x.offs) and blk.size + total <= self._block_size
                    and seq - x.base == len(x.offs) and not x.spos_all and x.ttl is None
                    and subject in blk.smap and len(wb) + total <= _WB_MAX):
                return self._wb_put(blk, x, seq, subject, sb, data, ts, total)
            if self._wb_off >= 0:
                self.flush_writes()
        blk = self._target_block(seq, total)
        head = _REC.pack(T_MSG, flags, slen, total, seq, ts, ttl_ns, hlen, dlen)
        crc = zlib.crc32(sb, zlib.crc32(head))
        for p in payload:
            crc = zlib.crc32(p, crc)
        off = blk.size
        try:
            _write_all(self._afd, self._crypt(blk.index, [head, sb, *payload, _CRC.pack(crc)], off), off, total)
        except OSError as e:
            self._write_failed(blk, off, e)
        blk.size = off + total
        size = (34 + slen + hlen + dlen) if hlen else (30 + slen + dlen)
        self._index_record(blk, self._aidx, seq, subject, sb, ts, ttl_ns, off, total, size)  # type: ignore[arg-type]
        return size

    # -- write-behind ---------------------------------------------------------------

    def write_behind(self, armed: Any = None, failed: Any = None, on: bool = True) -> None:
        """Write-behind on (or off, after writing what is gathered). On, the plain appends (no headers, no
        TTL, uncompressed, a subject the active block has, room left in that block, no per-subject or
        count/bytes limit to apply on append) are indexed at once and their records gathered in memory, to
        be written together by ``flush_writes``; anything else that touches the files (a read of the active
        block, another kind of write, a new block, a removal, purge, compact, truncate, expiry, sync from the
        owner's thread, stop) writes them first. ``armed()`` is called when the first record is gathered:
        the owner then calls ``flush_writes`` before its loop pass ends and before answering for them.
        ``failed(first_seq, last_seq, err)`` is called when writing them failed and they were taken back
        (the store is then as it was before the first of them; the next message reuses its sequence).
        Only the owner's thread may store while it is on."""
        if not on:
            if self._wb_off >= 0:
                self.flush_writes()
            self._wb = self._wb_buf = None
            self._wb_armed = self._wb_failed = None
            return
        self._wb = self._wb_buf = bytearray()
        self._wb_armed = armed
        self._wb_failed = failed
        self._wb_thread = threading.get_ident()

    def gather(self, on: bool) -> None:
        """With write-behind on: whether appends are gathered from now on (off: written at once, after what
        was gathered)."""
        if on:
            self._wb = self._wb_buf
        elif self._wb is not None:
            if self._wb_off >= 0:
                self.flush_writes()
            self._wb = None

    def _wb_put(self, blk: Block, x: BlockIndex, seq: int, subject: str, sb: bytes, data: bytes, ts: int,
                total: int) -> int:
        """Gather one plain record (``_write``'s conditions hold) and index it; returns its accounted size.
        (The compiled twin gathers the same bytes.)"""
        off = blk.size
        if self._wb_off < 0:
            self._wb_open(blk, x, off)
        wps = self._wb_ps
        if subject not in wps:
            e = self._psim.get(subject)
            wps[subject] = None if e is None else e[:]
        head = _REC.pack(T_MSG, 0, len(sb), total, seq, ts, 0, 0, len(data))
        wb = self._wb
        wb += head
        wb += sb
        wb += data
        wb += _CRC.pack(zlib.crc32(data, zlib.crc32(sb, zlib.crc32(head))))
        blk.size = off + total
        size = 30 + len(sb) + len(data)
        self._index_record(blk, x, seq, subject, sb, ts, 0, off, total, size)
        return size

    def _wb_open(self, blk: Block, x: BlockIndex, off: int) -> None:
        """The first gathered record (at ``off``): keep the state to go back to should the write fail."""
        self._wb_save = (self._first, self._nmsgs, self._last, self._last_ts, self._bytes, blk, blk.live,
                         blk.last, blk.last_ts, len(x.offs))
        self._wb_off = off
        armed = self._wb_armed
        if armed is not None:
            armed()

    def flush_writes(self) -> None:
        """Write the gathered records with one write. If it fails they are taken back (cut off the file,
        out of the index and the counts), ``failed`` is told and ErrStoreFull raised."""
        off = self._wb_off
        if off < 0 or self._closed:
            return
        wb = self._wb_buf
        try:
            _write_all(self._afd, self._crypt(self._active.index, [wb], off), off, len(wb))  # type: ignore
        except OSError as e:
            self._wb_rollback(e)
        self._wb_off = -1
        wb.clear()  # type: ignore[union-attr]
        self._wb_save = None
        self._wb_ps = {}

    def _wb_rollback(self, err: OSError) -> None:
        off = self._wb_off
        first, nmsgs, last, last_ts, nbytes, blk, live, blast, blast_ts, n0 = self._wb_save  # type: ignore[misc]
        lost_first, lost_last = last + 1, self._last
        wps = self._wb_ps
        self._wb_off = -1
        self._wb_buf.clear()  # type: ignore[union-attr]
        self._wb_save = None
        self._wb_ps = {}
        try:
            os.ftruncate(self._afd, off)
        except OSError as e2:
            self.log("error", f"cannot cut off a failed write in {blk.path}: {e2.strerror or e2}")
        x = self._aidx
        sids = x.sid[n0:]  # type: ignore[union-attr]
        for name in ("offs", "rlen", "sz", "ts", "sid"):
            col = getattr(x, name)
            try:
                del col[n0:]
            except BufferError:  # (an exported buffer: a shorter copy instead)
                setattr(x, name, col[:n0])
        scnt = blk.scnt
        for l in sids:
            scnt[l] -= 1
        blk.live, blk.last, blk.last_ts, blk.size = live, blast, blast_ts, off
        self._first, self._nmsgs, self._last, self._last_ts, self._bytes = first, nmsgs, last, last_ts, nbytes
        psim = self._psim
        for subj, e in wps.items():
            if e is None:
                psim.pop(subj, None)
            else:
                cur = psim.get(subj)
                if cur is None:
                    psim[subj] = e
                else:
                    cur[:] = e
        self._rc = None
        e = ErrStoreFull(f"write to {blk.path} failed: {err.strerror or err}")
        cb = self._wb_failed
        if cb is not None:
            cb(lost_first, lost_last, e)
        raise e from err

    def _write_failed(self, blk: Block, off: int, e: OSError) -> None:
        """A record's write to the active block at ``off`` failed: cut the block back and raise ErrStoreFull
        (also the compiled twin's, rillet/_speedups/_cstore.pyx)."""
        try:
            os.ftruncate(self._afd, off)
        except OSError as e2:
            # the partial record stays; the next write goes over it (and recovery cuts a torn tail)
            self.log("error", f"cannot cut off a failed write in {blk.path}: {e2.strerror or e2}")
        raise ErrStoreFull(f"write to {blk.path} failed: {e.strerror or e}") from e

    def _write_batch(self, recs: list[tuple[int, str, bytes, bytes, int, int]]) -> list[int]:
        """An atomic batch: every record in one block with one write, all but the last flagged F_BATCH,
        so recovery sees the whole batch or none of it.  A failed write is cut off again.  Returns the
        accounted sizes."""
        if len(recs) == 1:
            return [self._write(*recs[0])]
        if self._wb_off >= 0:
            self.flush_writes()
        if self._log_pending:
            self._log_append(None)
            if self._log_pending:
                raise ErrStoreFull("cannot write sequence state (disk full?)")
        bufs: list[bytes] = []
        meta: list[tuple[int, str, bytes, int, int, int, int]] = []  # seq, subject, sb, ts, ttl, size, rlen
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
            size = (34 + slen + hlen + dlen) if hlen else (30 + slen + dlen)
            meta.append((seq, subject, sb, ts, ttl_ns, size, total))
            size_all += total
        # a batch never spans blocks (it may make one larger than block_size)
        blk = self._target_block(recs[0][0], size_all)
        off = blk.size
        try:
            _write_all(self._afd, self._crypt(blk.index, bufs, off), off, size_all)
        except OSError as e:
            try:
                os.ftruncate(self._afd, off)
            except OSError as e2:
                # the partial batch stays on disk but is never indexed: recovery drops it (no last record)
                self.log("error", f"cannot cut off a failed batch write in {blk.path}: {e2.strerror or e2}")
            raise ErrStoreFull(f"write to {blk.path} failed: {e.strerror or e}") from e
        out = []
        pos = off
        x = self._aidx
        for seq, subject, sb, ts, ttl_ns, size, total in meta:
            self._index_record(blk, x, seq, subject, sb, ts, ttl_ns, pos, total, size)  # type: ignore[arg-type]
            out.append(size)
            pos += total
        blk.size = pos
        return out

    def _on_skip(self) -> None:
        self._log_append(_encode_log(L_LAST, _LAST.pack(self._last, self._last_ts)))

    # -- removal --------------------------------------------------------------------

    def _remove(self, seq: int, erase: bool = False) -> bool:
        if self._wb_off >= 0:
            self.flush_writes()
        loc = self._locate(seq)
        if loc is None:
            return False
        blk, x, slot = loc
        blk.mark_dead(slot)
        sid = x.sid[slot]
        subj = x.subjs[sid]
        size = x.sz[slot]
        blk.scnt[sid] -= 1
        blk.live -= 1
        self._nmsgs -= 1
        self._bytes -= size
        ps = self._psim[subj]
        if ps[0] == 1:
            del self._psim[subj]
        else:
            ps[0] -= 1
            if ps[2] == seq:
                ps[2] = self._subj_last_walk(subj, seq - 1)
        if seq == self._first:
            self._first = self._next_alive(seq + 1) or self._last + 1
        # the state log
        if self._limit_removal and not erase:
            self._deferred.append(seq)
            if len(self._deferred) >= 256:
                self._log_append(None)
        else:
            self._log_append(_encode_log(L_DEL, _U64.pack(seq)))
        if erase:
            self._erase_record(blk, x.offs[slot], x.rlen[slot], seq)
        if blk.live == 0 and blk is not self._active:
            self._unlink_block(blk)
        cb = self._remove_cb
        if cb is not None:
            cb(seq, subj, size)
        return True

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        """Remove one message; ``erase`` also overwrites its record on disk."""
        self._check_open()
        if seq in self._lost:
            self._lost.discard(seq)
            self._log_append(_encode_log(L_DEL, _U64.pack(seq)))
            return False
        return self._remove(seq, erase)

    def _erase_record(self, blk: Block, off: int, rlen: int, seq: int) -> None:
        self._rc = None
        head = _REC.pack(T_ERASED, 0, 0, rlen, seq, 0, 0, 0, 0)
        body = head + bytes(rlen - _OVERHEAD)
        rec = body + _CRC.pack(zlib.crc32(body))
        if blk.idx_on_disk:
            blk.idx_on_disk = False  # its content checksum no longer holds: rewritten at stop
            self._unlink_quiet(self._idx_path(blk))
        try:
            fd = self._fd_for(blk.index)
            _write_all(fd, self._crypt(blk.index, [rec], off), off, len(rec))
            os.fsync(fd)
        except OSError as ex:
            # The tombstone is written: the message is gone; only the bytes remain.
            self.log("error", f"cannot erase seq {seq} in {blk.path}: {ex.strerror or ex}")

    def _take_live(self, blk: Block, lo: int, hi: int, out: list | None) -> int:
        """Mark every live message of the block in [lo, hi] removed (counters, per subject); with ``out``,
        append (seq, subject, size) of each.  No tombstones: the caller records the bulk change."""
        x = self._idx(blk)
        offs = x.offs
        sid = x.sid
        sz = x.sz
        subjs = x.subjs
        psim = self._psim
        d = blk.dead
        n = 0
        for slot in range(max(lo - x.base, 0), min(hi - x.base + 1, len(offs))):
            if not offs[slot] or (d is not None and slot < len(d) and d[slot]):
                continue
            blk.mark_dead(slot)
            d = blk.dead
            l = sid[slot]
            size = sz[slot]
            blk.scnt[l] -= 1
            blk.live -= 1
            self._nmsgs -= 1
            self._bytes -= size
            subj = subjs[l]
            ps = psim[subj]
            if ps[0] == 1:
                del psim[subj]
            else:
                ps[0] -= 1
            n += 1
            if out is not None:
                out.append((x.base + slot, subj, size))
        return n

    def _purge_all(self, new_first: int) -> int:
        if self._wb_off >= 0:
            self.flush_writes()
        cb = self._remove_cb
        removed: list[tuple[int, str, int]] = []
        if cb is not None:
            for blk in self._bl:
                if blk.live:
                    self._take_live(blk, blk.first, blk.last, removed)
        n = self._nmsgs if cb is None else len(removed)
        self._nmsgs = 0
        self._bytes = 0
        self._psim = {}
        if new_first > self._last + 1:
            self._last = new_first - 1
        self._first = new_first
        for blk in self._bl:
            blk.live = 0
        self._lost.clear()
        # Persist the new sequences first, then drop the files.
        if not self._rewrite_log():
            self._log_append(_encode_log(L_FIRST, _U64.pack(new_first)))
            self._log_append(_encode_log(L_LAST, _LAST.pack(self._last, self._last_ts)))
        for blk in list(self._bl):
            self._unlink_block(blk)
        if cb is not None:
            for s, subj, size in removed:
                cb(s, subj, size)
        return n

    def compact(self, seq: int) -> int:
        """Remove every message below ``seq``; returns how many."""
        self._check_open()
        if self._wb_off >= 0:
            self.flush_writes()
        if seq == 0:
            return self._purge_all(self._last + 1)
        if self._first >= seq:
            return 0
        if seq > self._last:
            return self._purge_all(seq)
        cb = self._remove_cb
        removed: list[tuple[int, str, int]] | None = [] if cb is not None else None
        n = 0
        for blk in list(self._bl):
            if not blk.first or blk.first >= seq:
                break
            if blk.live:
                n += self._take_live(blk, blk.first, seq - 1, removed)
        self._first = self._next_alive(seq) or self._last + 1
        self._lost = {s for s in self._lost if s >= seq}
        self._log_append(_encode_log(L_FIRST, _U64.pack(seq)))
        for blk in list(self._bl):
            if blk.live == 0 and blk is not self._active and not (blk.bad and self._lost):
                self._unlink_block(blk)
        if cb is not None and removed:
            for s, subj, size in removed:
                cb(s, subj, size)
        return n

    def truncate(self, seq: int) -> None:
        """Remove every message above ``seq``; last_seq becomes ``seq``."""
        self._check_open()
        if self._wb_off >= 0:
            self.flush_writes()
        removed: list[tuple[int, str, int]] = []
        if seq < self._last:
            for blk in reversed(list(self._bl)):
                if blk.first and blk.last <= seq:
                    break
                if blk.live:
                    part: list[tuple[int, str, int]] = []
                    self._take_live(blk, seq + 1, blk.last, part)
                    part.reverse()
                    removed.extend(part)
        for subj in {r[1] for r in removed}:
            ps = self._psim.get(subj)
            if ps is not None and ps[2] > seq:
                ps[2] = self._subj_last_walk(subj, seq)
        loc = self._locate(seq)
        if loc is not None:
            self._last_ts = loc[1].ts[loc[2]]
        if seq < self._last:
            self._last = seq
        if not self._nmsgs:
            self._first = self._last + 1
        self._lost = {s for s in self._lost if s <= seq}
        self._truncate_blocks(seq)
        self._log_append(_encode_log(L_TRUNC, _LAST.pack(self._last, self._last_ts)))
        cb = self._remove_cb
        if cb is not None:
            for s, subj, size in reversed(removed):
                cb(s, subj, size)

    def _truncate_blocks(self, seq: int) -> None:
        self._rc = None  # (new records may come where the cut ones were)
        for blk in reversed(list(self._bl)):
            if not blk.first:
                if blk is not self._active:
                    self._unlink_block(blk)
                continue
            if blk.first > seq:
                self._unlink_block(blk)
                continue
            if blk.last > seq:
                x = self._idx(blk)
                cut = self._find_cut(blk, seq)
                fd = self._fd_for(blk.index)
                try:
                    os.ftruncate(fd, cut)
                except OSError as e:
                    raise StoreError(f"cannot truncate {blk.path}: {e.strerror or e}") from e
                blk.size = cut
                blk.synced = min(blk.synced, cut)
                blk.last = self._last_seq_in(blk, cut)
                if blk.idx_on_disk:
                    blk.idx_on_disk = False
                    self._unlink_quiet(self._idx_path(blk))
                if not blk.last:
                    blk.first = 0
                    x.truncate(0)
                    x.base = 0
                    blk.dead = None
                else:
                    n = blk.last - x.base + 1
                    x.truncate(n)
                    if blk.dead is not None:
                        del blk.dead[n:]
                    blk.last_ts = x.ts[n - 1]
                blk.mcache = None
            break
        self._reindex_blocks()
        if self._bl:
            last_blk = self._bl[-1]
            if self._active is not last_blk:
                self._activate(last_blk)
        else:
            self._active = None
            self._aidx = None

    def _read_block(self, blk: Block, size: int | None = None) -> bytes:
        fd = self._fd_for(blk.index)
        return self._pread(blk.index, fd, blk.size if size is None else size, 0)

    def _find_cut(self, blk: Block, seq: int) -> int:
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

    def _last_seq_in(self, blk: Block, size: int) -> int:
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

    # -- expiry ---------------------------------------------------------------------

    def _expire(self, now_ns: int) -> tuple[int, list[str]]:
        if self._wb_off >= 0:
            self.flush_writes()
        removed = 0
        markers: list[str] = []
        if self._max_age_ns and self._nmsgs:
            cutoff = now_ns - self._max_age_ns
            s = self._first
            while True:
                s = self._next_alive(s)
                if not s:
                    break
                loc = self._locate(s)
                if loc is None:  # pragma: no cover - _next_alive returned a live seq
                    break
                blk, x, slot = loc
                if x.ts[slot] > cutoff:
                    break
                if x.ttl is None or x.ttl[slot] >= 0:
                    self._expire_removing(s, x.subjs[x.sid[slot]], markers)
                    removed += 1
                s += 1
        if self.cfg.allow_msg_ttl:
            for blk in list(self._bl):
                if not blk.min_exp or blk.min_exp > now_ns or not blk.live:
                    continue
                x = self._idx(blk)
                ttl = x.ttl
                if ttl is not None:
                    ts = x.ts
                    offs = x.offs
                    for slot in range(len(offs)):
                        t = ttl[slot]
                        if t > 0 and ts[slot] + t <= now_ns and offs[slot] and not blk.is_dead(slot):
                            self._expire_removing(x.base + slot, x.subjs[x.sid[slot]], markers)
                            removed += 1
                self._ttl_bounds(blk, x)
        if removed:
            # Expiry is not re-applied on open before the limits are (it needs the clock): its tombstones
            # are written now, in one record, instead of waiting with the other limit removals.
            self._log_append(None)
        return removed, markers

    def next_expiry(self) -> int | None:
        """Timestamp (ns) at which the next message expires, or None."""
        best: int | None = None
        if self._max_age_ns and self._nmsgs:
            s = self._next_alive(self._first)
            while s:
                loc = self._locate(s)
                if loc is None:  # pragma: no cover
                    break
                _, x, slot = loc
                if x.ttl is None or x.ttl[slot] >= 0:
                    best = x.ts[slot] + self._max_age_ns
                    break
                s = self._next_alive(s + 1)
        if self.cfg.allow_msg_ttl:
            for blk in self._bl:
                if blk.live and blk.min_exp and (best is None or blk.min_exp < best):
                    best = blk.min_exp
        return best

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
        # Tombstones needed: removed records inside the blocks (>= first).
        dels: list[int] = []
        last = self._last
        for blk in self._bl:
            d = blk.dead
            if d is None or not blk.first:
                continue
            base = blk.first
            i = d.find(1)
            while i >= 0:
                q = base + i
                if floor <= q <= last:
                    dels.append(q)
                i = d.find(1, i + 1)
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
                if e.errno != errno.ENOSPC or not os.path.exists(path):
                    raise ErrStoreFull(f"cannot write {path}: {e.strerror or e}") from e
                # opened on a full disk: the state log it was recovered from stays as it is (appended to), so
                # the stream is served, and refuses new messages until there is space again
                self.log("warn", f"cannot rewrite {path} ({e.strerror or e}): the disk is full; keeping it")
                with self._lock:
                    self._log_fd = os.open(path, os.O_RDWR)
                self._log_size = os.path.getsize(path)
                self._log_compact_at = self._log_size + _LOG_COMPACT_MIN
                return False
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

    # -- reading --------------------------------------------------------------------

    def read_begin(self) -> None:
        self._ra_on = True

    def read_done(self) -> None:
        self._ra_on = False
        self._rc = None  # (no memory held between passes; a record changed on disk behind our back is seen
        self._rc_next = -1  # by the next pass)

    def _read_msg(self, blk: Block, x: BlockIndex, slot: int) -> StoredMsg:
        if self._closed:
            raise ErrStoreClosed()
        seq = x.base + slot
        off = x.offs[slot]
        n = x.rlen[slot]
        # Inside a read pass (a consumer's delivery run), a read that starts where the previous one ended
        # reads _READ_AHEAD bytes of the block at once and the next records come from them; the bytes of a
        # record never change once indexed, except by an erase, a truncation or a new block file (which drop
        # them), and read_done lets them go.
        rc = self._rc
        if rc is not None and rc[0] == blk.index and rc[1] <= off and off + n <= rc[1] + len(rc[2]):
            buf = rc[2]
            b0 = off - rc[1]
        else:
            want = n
            if off == self._rc_next and n < _READ_AHEAD and self._ra_on:
                want = max(min(_READ_AHEAD, blk.size - off), n)
            try:
                buf = self._pread(blk.index, self._fd_for(blk.index), want, off)
            except OSError as ex:
                raise ErrStoreCorrupt(f"cannot read seq {seq}: {ex.strerror or ex}", seq=seq) from ex
            b0 = 0
            if len(buf) > n:
                self._rc = (blk.index, off, buf)
        self._rc_next = off + n
        # the usual case checked inline: a whole message record at this seq whose crc holds (a CRC-32 over
        # data followed by its own little-endian CRC always gives _CRC_RESIDUE); else the full parse
        h = _REC.unpack_from(buf, b0) if len(buf) >= b0 + n and n >= _OVERHEAD else None
        if (h is None or h[0] != T_MSG or h[4] != seq or h[3] != n or h[1] & F_COMPRESSED
                or n - _OVERHEAD - h[2] != h[7] + h[8] or zlib.crc32(buf[b0 : b0 + n]) != _CRC_RESIDUE):
            h = _parse_record(memoryview(buf), b0, b0 + n) if len(buf) >= b0 + n else None
        if (h is None or h[0] != T_MSG or h[4] != seq) and buf is not None and rc is not None and buf is rc[2]:
            self._rc = None  # (read ahead before a change it was not dropped for: read the record itself)
            try:
                buf = self._pread(blk.index, self._fd_for(blk.index), n, off)
            except OSError as ex:
                raise ErrStoreCorrupt(f"cannot read seq {seq}: {ex.strerror or ex}", seq=seq) from ex
            b0 = 0
            h = _parse_record(memoryview(buf), 0, len(buf))
        if h is None or h[0] != T_MSG or h[4] != seq:
            self.log("error", f"seq {seq}: record failed its checksum")
            raise ErrStoreCorrupt(f"message {seq} is corrupt", seq=seq)
        _, flags, slen, total, _, ts, _, hlen, dlen = h
        subject = x.subjs[x.sid[slot]]
        p = b0 + _REC_LEN + slen
        if flags & F_COMPRESSED:
            raw = bytes(_snappy().decompress_raw(buf[p : b0 + total - 4]))
            if len(raw) != hlen + dlen:
                raise ErrStoreCorrupt(f"message {seq} is corrupt", seq=seq)
            return StoredMsg(subject, seq, ts, raw[:hlen], raw[hlen:])
        return StoredMsg(subject, seq, ts, buf[p : p + hlen], buf[p + hlen : p + hlen + dlen])

    def _record_location(self, seq: int) -> tuple[int, str, int, int] | None:
        """(block index, block path, offset, record length) of a live message (tests and tools)."""
        loc = self._locate(seq)
        if loc is None:
            return None
        blk, x, slot = loc
        return blk.index, blk.path, x.offs[slot], x.rlen[slot]

    # -- durability / lifecycle -----------------------------------------------------

    def flush(self) -> None:
        """Push everything to the OS (gathered records too); write consumer states."""
        if self._closed:
            return
        if self._wb_off >= 0:
            self.flush_writes()
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
        if self._wb_off >= 0 and threading.get_ident() == self._wb_thread:
            self.flush_writes()
        todo: list[tuple[Block | None, int, int]] = []
        with self._lock:
            if self._log_pending and not self._flush_log_pending(False):
                raise ErrStoreFull("cannot write sequence state")
            try:
                act = self._active
                if act is not None:
                    size = act.size
                    wo = self._wb_off  # (read after the size: records gathered meanwhile are not written yet)
                    if 0 <= wo < size:
                        size = wo
                    if act.synced < size:
                        todo.append((act, os.dup(self._afd), size))
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
            raise ErrSyncFailed(f"fsync failed: {err.strerror or err}") from err
        for cs in list(self._consumers.values()):
            if isinstance(cs, FileConsumerStore):
                cs.sync()

    def stop(self) -> None:
        """Sync, write the index files that are missing (so the next open reads them instead of
        scanning) and close the files; the store stays on disk."""
        if self._closed:
            return
        try:
            if self._wb_off >= 0:
                self.flush_writes()
            self._log_append(None)
            self.sync()
        except StoreError as e:
            self.log("error", f"sync at stop failed: {e}")
        for blk in list(self._bl):
            if blk.idx_on_disk or blk.bad or not blk.first:
                continue
            try:
                x = self._idx(blk)
            except StoreError as e:
                self.log("error", f"cannot index {blk.path} at stop: {e}")
                continue
            self._write_index(blk, x)
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
        self._cache.clear()

    def delete(self) -> None:
        """Remove the whole store directory."""
        self._wb_off = -1  # (gathered records go with it)
        if not self._closed:
            self._close_fds()
            self._closed = True
        self._bl = []
        self._bfirst = []
        self._blocks = {}
        self._psim = {}
        self._nmsgs = 0
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- consumers ------------------------------------------------------------------

    def _new_consumer_store(self, name: str) -> FileConsumerStore:
        return FileConsumerStore(name, os.path.join(self._cdir, _safe_name(name)), self.log)

    # -- snapshot -------------------------------------------------------------------

    def snapshot_stream(self, include_consumers: bool = True) -> Iterator[bytes]:
        """A tar of the store (blocks, state, consumer states), as bytes chunks."""
        if self._wb_off >= 0:
            self.flush_writes()
        return snapshot_from_store(self, include_consumers)


from ._snapshot import restore, restore_into, snapshot_from_store  # noqa: E402  (they use FileStore)
