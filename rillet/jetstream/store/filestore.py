"""FileStore: a stream's messages in append-only block files.

Directory layout (``<dir>`` is what the caller passes, one per stream)::

    <dir>/meta.json                 format version and the stream name (informational; no name when encrypted)
    <dir>/state.log                 sequence state: first/last markers and tombstones
    <dir>/msgs/0000000001.blk ...   message blocks, in sequence order
    <dir>/msgs/0000000001.idx ...   their indexes (see _fsindex; a cache, checked against the block)
    <dir>/consumers/<name>/state    consumer states: two slots, state and state.1, written in turn in place
                                    (with a key: sealed, and a ``key`` record beside them; see _fsconsumer)

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
seq]``.  No object per message.

Where the code is: this module has the store's state, opening, the write path (with write-behind), reads,
sync and lifecycle; ``_fsblocks`` the block files, their keys and the loaded indexes; ``_fsremove`` removal,
purge, compact, truncate and expiry; ``_fslog`` the state log's writer, ``_fsrecover`` its reader and the
recovery scan; ``_fsquery`` the index primitives the shared queries (``_query``) use; ``_fsconsumer`` the
consumer state files.  Storing checks, limits and purge are ``_common``'s, shared with the memory store.

On open each block's index file is used if its checksums hold and it matches the block (size,
crc32 of the whole block file, last record); otherwise that block alone is scanned, every record's
checksum verified, then the state log is applied.  A bad record at the tail of the last block (a
torn write) is cut off with a warning; a bad record anywhere else is reported: its sequences go to
``state().lost`` and ``load_msg`` raises ErrStoreCorrupt.  Every read verifies the record's crc; a record
that fails it while running is treated the same way from then on (``_damaged``; the owner is told through
``register_damage_callback``: a replicated stream fetches it again, an R1 stream reports it).

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

import json
import os
import shutil
import threading
import time
import zlib
from array import array
from collections import OrderedDict
from typing import Any, Iterator

from rillet.cipher import BlockStream, KeyRing
from ._common import _NS, StoreCommon
from ._query import StoreQueries
from ._fsindex import Block, BlockIndex, index_totals
from ._fsquery import BlockQueries
from ._fsblocks import _IDX_CACHE, BlockFiles  # noqa: F401  (_IDX_CACHE: tests read it here)
from ._fsconsumer import FileConsumerStore
from ._fsio import _atomic_write, _write_all, _write_rest  # noqa: F401  (the compiled twin takes _write_rest here)
from ._fslog import _LOG_COMPACT_MIN, StateLog
from ._fsrecover import BlockRecovery
from ._fsremove import BlockRemoval
from ._fsformat import (
    BLOCK_MAGIC,
    FORMAT_VERSION,
    F_BATCH,
    F_COMPRESSED,
    L_LAST,
    T_MSG,
    _CRC,
    _LAST,
    _MAX_REC,
    _OVERHEAD,
    _REC,
    _REC_LEN,
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
)

__all__ = ["FileConsumerStore", "FileStore", "restore", "restore_into", "snapshot_from_store"]

_COMPRESS_MIN = 64
_MAX_GAP = 4096  # a sequence gap larger than this inside a block starts a new block
_WB_MAX = 1 << 20  # write-behind: gathered bytes past this are written first


def _default_log(level: str, text: str) -> None:
    pass


_READ_AHEAD = 32 * 1024  # bytes read at once by sequential reads
_CRC_RESIDUE = 0x2144DF1C  # zlib.crc32(data + crc32(data) as 4 little-endian bytes), whatever the data


def _subject_bytes(subject: str) -> bytes:
    sb = subject.encode("utf-8", "surrogateescape")
    if len(sb) > 0xFFFF:
        raise StoreError("subject too long")
    return sb


def _frame(flags: int, sb: bytes, payload: list[bytes], total: int, seq: int, ts: int, ttl_ns: int, hlen: int,
           dlen: int) -> list[bytes]:
    """A message record's pieces: header, subject, payload, CRC-32 of all before it (see the module's docstring)."""
    head = _REC.pack(T_MSG, flags, len(sb), total, seq, ts, ttl_ns, hlen, dlen)
    crc = zlib.crc32(sb, zlib.crc32(head))
    for p in payload:
        crc = zlib.crc32(p, crc)
    return [head, sb, *payload, _CRC.pack(crc)]


class FileStore(BlockRecovery, BlockFiles, BlockRemoval, StateLog, BlockQueries, StoreCommon, StoreQueries):
    """A stream's messages on disk.  ``FileStore(directory, cfg, log=None)``."""

    # the pass over a block's columns that its index file needs (the compiled twin's is a C loop)
    _index_totals = staticmethod(index_totals)

    # Accounted size like nats-server's file store: 30 + subject + data (+ 4 + hdr).
    _size_overhead = 30
    _hdr_overhead = 4

    @staticmethod
    def _pwrite_all(fd: int, bufs: list[bytes], off: int, total: int) -> None:
        """Every write of the store's files goes through this module's ``_write_all`` (tests replace it to fake
        a full disk; the block, state log and consumer modules call this)."""
        _write_all(fd, bufs, off, total)

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
        self._subjects: dict[str, list[int]] = {}  # subject -> [count, first block index (lower bound), last seq]
        self._nmsgs = 0
        self._lost: set[int] = set()
        # damaged records' sizes on disk, where known (lost_bytes): a record a read found damaged, its length; a
        # corrupt region found at open, its bytes shared by the sequences lost in it
        self._lost_sizes: dict[int, int] = {}
        self._damage_cb: Any = None  # (register_damage_callback)
        self._log_fd = -1
        self._log_size = 0
        self._log_pending: list[bytes] = []  # records not yet written (a write failed)
        # Tombstones of removals by limits (max_msgs/bytes/per subject, age, TTL) are batched:
        # if lost in a crash, reopening re-applies the same limits.
        self._deferred: list[int] = []
        # ... and those of removals by retention while write-behind is on (remove_msg_soon), written by the
        # owner's flush_writes at the end of the loop pass: ``_dels_due`` says some wait for it
        self._soon = False
        self._dels_due = False
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
        # (encrypted at rest: no name in it, as no file of an encrypted nats-server store names its stream)
        info = {"format": FORMAT_VERSION} if self._keys is not None else {"format": FORMAT_VERSION,
                                                                           "name": self.cfg.name}
        named = False  # (a plaintext store given a key, or restored from a snapshot: its name goes)
        if self._keys is not None and os.path.exists(meta):
            with open(meta, "rb") as f:
                named = b'"name"' in f.read()
        if named or not os.path.exists(meta):
            try:
                _atomic_write(meta, json.dumps(info).encode(), True)
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
            if os.path.isdir(p):  # (the consumer's name is in its name file: _fsconsumer)
                cs = FileConsumerStore(None, p, self.log, self._pwrite_all, self._keys, self.cfg.name)
                self._consumers[cs.name] = cs
        # Start from a compact log reflecting the recovered state. (The blocks found may have been written, or
        # even created, since the last sync before an unclean stop: their contents and directory entries are made
        # durable before the log that counts them, see _sync_blocks_for_log.)
        self._dir_dirty = True
        self._rewrite_log()
        self._enforce_after_open()

    def _enforce_after_open(self) -> None:
        self._enforce_all_subjects()
        self._enforce_limits()

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
        ps = self._subjects.get(subject)
        if ps is None:
            self._subjects[subject] = [1, self._active.index, seq]  # type: ignore[union-attr]
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

    def _log_pending_first(self) -> None:
        """State log records a failed write left pending go first: a new record is refused until they are out."""
        self._log_append(None)
        if self._log_pending:
            raise ErrStoreFull("cannot write sequence state (disk full?)")

    def _payload(self, slen: int, hdr: bytes, data: bytes) -> tuple[int, list[bytes], int]:
        """(flags, payload pieces, record length) of a record: compressed when that makes it smaller."""
        plen = len(hdr) + len(data)
        if self._compress and plen >= _COMPRESS_MIN:
            c = bytes(self._snappy.compress_raw(hdr + data))  # type: ignore[union-attr]
            if len(c) < plen:
                total = _OVERHEAD + slen + len(c)
                if total >= _MAX_REC:
                    raise StoreError("message too large")
                return F_COMPRESSED, [c], total
        total = _OVERHEAD + slen + plen
        if total >= _MAX_REC:
            raise StoreError("message too large")
        return 0, [hdr, data], total

    def _write(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl_ns: int) -> int:
        """Write and index one record; returns its accounted size."""
        if self._log_pending:
            self._log_pending_first()
        sb = subject.encode("utf-8", "surrogateescape")
        slen = len(sb)
        if slen > 0xFFFF:
            raise StoreError("subject too long")
        hlen = len(hdr)
        dlen = len(data)
        if self._compress:
            flags, payload, total = self._payload(slen, hdr, data)
        else:  # (the usual case, inline: this is the pure lane's and an encrypted store's append)
            flags = 0
            payload = [hdr, data]
            total = _OVERHEAD + slen + hlen + dlen
            if total >= _MAX_REC:
                raise StoreError("message too large")
        wb = self._wb
        if wb is not None:
            blk = self._active
            x = self._aidx
            if ((not hlen or b"Nats-" not in hdr) and not ttl_ns and not flags and not self._maxp
                    and not self._post_limits and blk is not None and x is not None and len(x.offs)
                    and blk.size + total <= self._block_size and seq - x.base == len(x.offs)
                    and x.ttl is None and subject in blk.smap and len(wb) + total <= _WB_MAX):
                return self._wb_put(blk, x, seq, subject, sb, hdr, data, ts, total)
            if self._wb_off >= 0:
                self.flush_writes()
        blk = self._target_block(seq, total)
        off = blk.size
        head = _REC.pack(T_MSG, flags, slen, total, seq, ts, ttl_ns, hlen, dlen)
        crc = zlib.crc32(sb, zlib.crc32(head))
        for p in payload:
            crc = zlib.crc32(p, crc)
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
        """Write-behind on (or off, after writing what is gathered). On, the plain appends (no ``Nats-*``
        header: the stream acts on those, and a failed write could not take that back; no TTL, uncompressed,
        a subject the active block has, room left in that block, no per-subject or count/bytes limit to apply
        on append) are indexed at once and their records gathered in memory, to be written together by
        ``flush_writes``; anything else that touches the files (a read of the active
        block, another kind of write, a new block, a removal, purge, compact, truncate, expiry, sync from the
        owner's thread, stop) writes them first. ``armed()`` is called when the first record is gathered (or
        the first tombstone of ``remove_msg_soon`` waits): the owner then calls ``flush_writes`` before its
        loop pass ends and before answering for them.
        ``failed(first_seq, last_seq, err)`` is called when writing them failed and they were taken back
        (the store is then as it was before the first of them; the next message reuses its sequence).
        Only the owner's thread may store while it is on."""
        if not on:
            if self._wb_off >= 0 or self._dels_due:
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

    def _wb_put(self, blk: Block, x: BlockIndex, seq: int, subject: str, sb: bytes, hdr: bytes, data: bytes,
                ts: int, total: int) -> int:
        """Gather one plain record (``_write``'s conditions hold: no TTL, headers only if none is a stream's
        ``Nats-*`` one) and index it; returns its accounted size. (The compiled twin gathers the same bytes.)"""
        off = blk.size
        if self._wb_off < 0:
            self._wb_open(blk, x, off)
        wps = self._wb_ps
        if subject not in wps:
            e = self._subjects.get(subject)
            wps[subject] = None if e is None else e[:]
        hlen = len(hdr)
        head = _REC.pack(T_MSG, 0, len(sb), total, seq, ts, 0, hlen, len(data))
        wb = self._wb
        n0 = len(wb)
        wb += head
        wb += sb
        if hlen:
            wb += hdr
        wb += data
        wb += _CRC.pack(zlib.crc32(memoryview(wb)[n0:]))
        blk.size = off + total
        size = (34 + len(sb) + hlen + len(data)) if hlen else (30 + len(sb) + len(data))
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
        out of the index and the counts), ``failed`` is told and ErrStoreFull raised. Tombstones of removals
        gathered meanwhile (``remove_msg_soon``) are written first, in one state-log record."""
        if self._dels_due:
            self._dels_due = False
            if self._deferred and not self._closed:
                self._log_append(None)
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
        if x.spos_all:  # (the per-subject slot lists held the taken-back slots: rebuilt when next needed)
            x.spos = {}
            x.spos_all = False
            x.shead = {}
        blk.live, blk.last, blk.last_ts, blk.size = live, blast, blast_ts, off
        self._first, self._nmsgs, self._last, self._last_ts, self._bytes = first, nmsgs, last, last_ts, nbytes
        psim = self._subjects
        for subj, e in wps.items():
            if e is None:
                psim.pop(subj, None)
            else:
                if e[2] < 0:  # (its last was removed while records were gathered: BlockRemoval._wb_keep_removal)
                    e[2] = self._subj_last_walk(subj, -e[2] - 1)
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
            self._log_pending_first()
        bufs: list[bytes] = []
        meta: list[tuple[int, str, bytes, int, int, int, int]] = []  # seq, subject, sb, ts, ttl, size, rlen
        size_all = 0
        last_i = len(recs) - 1
        for i, (seq, subject, hdr, data, ts, ttl_ns) in enumerate(recs):
            sb = _subject_bytes(subject)
            slen = len(sb)
            hlen = len(hdr)
            dlen = len(data)
            flags, payload, total = self._payload(slen, hdr, data)
            if i != last_i:
                flags |= F_BATCH
            bufs += _frame(flags, sb, payload, total, seq, ts, ttl_ns, hlen, dlen)
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
            self._damaged(blk, seq)
            raise ErrStoreCorrupt(f"message {seq} is corrupt", seq=seq)
        _, flags, slen, total, _, ts, _, hlen, dlen = h
        subject = x.subjs[x.sid[slot]]
        p = b0 + _REC_LEN + slen
        if flags & F_COMPRESSED:
            raw = bytes(_snappy().decompress_raw(buf[p : b0 + total - 4]))
            if len(raw) != hlen + dlen:
                self._damaged(blk, seq)
                raise ErrStoreCorrupt(f"message {seq} is corrupt", seq=seq)
            return StoredMsg(subject, seq, ts, raw[:hlen], raw[hlen:])
        return StoredMsg(subject, seq, ts, buf[p : p + hlen], buf[p + hlen : p + hlen + dlen])

    def _damaged(self, blk: Block, seq: int) -> None:
        """A record found damaged while running (it failed its checksum on a read): from now on the message is
        what the open-time scan makes of such a record: not live (counters, per subject), its sequence in
        ``state().lost`` (``load_msg`` raises ErrStoreCorrupt), never served. The block stays (``bad``); no
        tombstone is written (it was not deleted: a restart scans the block and finds the record lost again, a
        replicated stream's replica fetches it again). The owner hears of it (``register_damage_callback``)."""
        self._rc = None
        loc = self._locate(seq)
        if seq in self._lost or loc is None:
            return
        self._lost_sizes[seq] = loc[1].rlen[loc[2]]
        if blk is not self._active:
            self._pinned[blk.index] = self._idx(blk)  # (as the open-time scan keeps a bad block's index)
        self._take_live(blk, seq, seq, None)
        blk.bad = True
        self._lost.add(seq)
        cb = self._damage_cb
        if cb is not None:
            cb(seq)

    def lost_from(self, start: int) -> int:
        """The first sequence at or after ``start`` whose record is damaged (``state().lost``), or 0 (at once
        when there is none: a reader that must not pass over one asks on every read)."""
        lost = self._lost
        if not lost:
            return 0
        return min((s for s in lost if s >= start), default=0)

    def register_damage_callback(self, cb: Any) -> None:
        """``cb(seq)`` is called when a read finds message ``seq``'s record damaged (see ``_damaged``); it runs
        inside the read: the owner acts on it later, not there."""
        self._damage_cb = cb

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

    def delete(self) -> None:
        """Remove the whole store directory."""
        self._wb_off = -1  # (gathered records go with it)
        if not self._closed:
            self._close_fds()
            self._closed = True
        self._bl = []
        self._bfirst = []
        self._blocks = {}
        self._subjects = {}
        self._nmsgs = 0
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- consumers ------------------------------------------------------------------

    def _new_consumer_store(self, name: str) -> FileConsumerStore:
        return FileConsumerStore(name, os.path.join(self._cdir, _safe_name(name)), self.log, self._pwrite_all,
                                 self._keys, self.cfg.name)

    # -- snapshot -------------------------------------------------------------------

    def snapshot_stream(self, include_consumers: bool = True) -> Iterator[bytes]:
        """A tar of the store (blocks, state, consumer states), as bytes chunks."""
        if self._wb_off >= 0:
            self.flush_writes()
        return snapshot_from_store(self, include_consumers)


from ._snapshot import restore, restore_into, snapshot_from_store  # noqa: E402  (they use FileStore)
