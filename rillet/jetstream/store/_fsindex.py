"""The file store's per-block indexes: what stays resident per block, what is loaded on demand, and the
``.idx`` files that let a restart skip scanning the blocks.

Resident per block (``Block``): its sequence range, live count, a map subject -> local subject id with
the live count per local id (``scnt``), a dead-slot bytearray once something in it was removed, and
TTL bounds.  No per-message objects: a block of 50,000 messages costs a few KB resident (the subject
map is per distinct subject in the block).

Loaded on demand (``BlockIndex``): parallel ``array`` columns indexed by ``seq - block.first`` (a slot
per sequence; ``offs[slot] == 0`` means no record for that sequence): record offset, record length,
accounted size, timestamp, local subject id, and the TTL column when any record has one.  The file
store keeps a bounded LRU of these and the active block's.

Index file ``msgs/<n>.idx`` (little-endian), written when a block is sealed, after a recovery scan
and at a clean stop, removed when the block changes (truncate, appends after a restart)::

    header   8s magic "RILIDX01", u32 summary length, u32 crc32(summary), u32 columns length,
             u32 crc32(columns)
    summary  u64 first, u64 last, u64 block file size, u32 slots, u32 subjects, u32 flags (1: ttl column),
             u32 records, i64 first ts, i64 last ts, i64 min TTL expiry (0 none), u32 records with a
             negative TTL, u32 pad, u64 accounted bytes, u64 last record offset, u32 last record length,
             u32 pad; then per subject u16 length + UTF-8 bytes; then u32 records per subject and
             u32 last slot per subject
    columns  u64 offs[slots], u32 rlen[slots], u32 size[slots], i64 ts[slots], u32 sid[slots],
             i64 ttl[slots] if flag 1

The summary alone is read (and checked) on open; the columns when the block is first used.  An index is
used only when both checksums hold and it agrees with the block file: same size, same crc32 of the whole
file (checked on open at C speed, so a flipped bit in a block is still found and reported then), and the
record at the last offset parses, is the last sequence and ends the file.  Anything else and that block is
scanned record by record.
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from typing import Any

IDX_MAGIC = b"RILIDX01"
_IDXH = struct.Struct("<8sIIII")
_IDXS = struct.Struct("<QQQIIIIqqqIIQQII")
F_TTL = 1
_LITTLE = sys.byteorder == "little"

__all__ = ["Block", "BlockIndex", "IdxSummary", "encode_index", "read_summary", "read_columns"]


class Block:
    __slots__ = (
        "index",
        "path",
        "first",
        "last",
        "live",
        "size",
        "synced",
        "bad",
        "smap",
        "scnt",
        "dead",
        "min_exp",
        "n_noexp",
        "first_ts",
        "last_ts",
        "idx_on_disk",
        "mcache",
    )

    # ``synced``: the file size covered by the last fsync (the file is durable up to it).

    def __init__(self, index: int, path: str) -> None:
        self.index = index
        self.path = path
        self.first = 0  # first seq physically in the file (0: none); slot 0 of the index
        self.last = 0  # last seq physically in the file
        self.live = 0  # live messages
        self.size = 0  # bytes in the file
        self.synced = 0
        self.bad = False  # has corrupt regions (its index stays loaded: never rebuilt from a rescan)
        self.smap: dict[str, int] = {}  # subject -> local id, in order of first appearance
        self.scnt = array("I")  # live messages per local id
        self.dead: bytearray | None = None  # 1 per slot whose message was removed
        self.min_exp = 0  # smallest TTL expiry (ns) of a record here, a lower bound (0: none)
        self.n_noexp = 0  # records with a negative TTL (never expire), an upper bound
        self.first_ts = 0
        self.last_ts = 0
        self.idx_on_disk = False  # msgs/<n>.idx matches this block
        self.mcache: tuple | None = None  # (matcher, subjects seen, bytearray match table)

    def is_dead(self, slot: int) -> bool:
        d = self.dead
        return d is not None and slot < len(d) and d[slot] == 1

    def mark_dead(self, slot: int) -> None:
        d = self.dead
        if d is None:
            d = self.dead = bytearray(max(slot + 1, self.last - self.first + 1 if self.first else 0))
        elif slot >= len(d):
            d.extend(bytes(slot + 1 - len(d) + 1024))
        d[slot] = 1


class BlockIndex:
    """Columns of one block, a slot per sequence from ``base``."""

    __slots__ = (
        "base", "offs", "rlen", "sz", "ts", "sid", "ttl", "subjs", "sbytes", "spos", "spos_all", "shead", "used",
    )

    def __init__(self, base: int = 0) -> None:
        self.base = base
        self.offs = array("Q")
        self.rlen = array("I")
        self.sz = array("I")
        self.ts = array("q")
        self.sid = array("I")
        self.ttl: array | None = None
        self.subjs: list[str] = []  # local id -> subject
        self.sbytes: list[bytes] = []  # local id -> encoded subject
        self.spos: dict[int, array] = {}  # local id -> its slots (built when first asked, for all at once)
        self.spos_all = False
        self.shead: dict[int, int] = {}  # local id -> index in its spos before which every slot is dead
        self.used = True  # touched since the last idle sweep

    def pad(self, n: int, ts: int) -> None:
        """Add ``n`` slots without a record (their timestamp ``ts`` keeps the column sorted)."""
        z = bytes(8 * n)
        self.offs.frombytes(z)
        self.rlen.frombytes(z[: 4 * n])
        self.sz.frombytes(z[: 4 * n])
        if ts:
            self.ts.extend(array("q", [ts]) * n)
        else:
            self.ts.frombytes(z)
        self.sid.frombytes(z[: 4 * n])
        if self.ttl is not None:
            self.ttl.frombytes(z)

    def add_ttl_column(self, n: int) -> None:
        """Start the TTL column with ``n`` slots of no TTL."""
        self.ttl = array("q", bytes(8 * n))

    def slots_of(self, sid: int) -> array:
        """The slots of local subject ``sid`` (with a record), ascending.  The first call builds the lists of
        every subject in one pass over the block; appends to the active block keep them."""
        if not self.spos_all:
            spos: dict[int, list[int]] = {}
            offs = self.offs
            for i, s in enumerate(self.sid):
                if offs[i]:
                    p = spos.get(s)
                    if p is None:
                        spos[s] = [i]
                    else:
                        p.append(i)
            self.spos = {s: array("I", p) for s, p in spos.items()}
            self.spos_all = True
        p = self.spos.get(sid)
        if p is None:
            p = self.spos[sid] = array("I")
        return p

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` slots."""
        for col in (self.offs, self.rlen, self.sz, self.ts, self.sid):
            del col[n:]
        if self.ttl is not None:
            del self.ttl[n:]
        self.spos = {}
        self.spos_all = False
        self.shead = {}


class IdxSummary:
    __slots__ = (
        "first",
        "last",
        "fsize",
        "slots",
        "flags",
        "nrec",
        "first_ts",
        "last_ts",
        "min_exp",
        "n_noexp",
        "nbytes",
        "last_off",
        "last_rlen",
        "bcrc",
        "subjs",
        "counts",
        "lastslot",
        "col_off",
        "col_len",
        "col_crc",
    )


def _le(a: array) -> bytes:
    if _LITTLE:
        return a.tobytes()
    b = array(a.typecode, a)
    b.byteswap()
    return b.tobytes()


def index_totals(x: BlockIndex) -> tuple[list[int], list[int], int, int, int, int, int, int]:
    """One pass over a block's columns: per subject id its live records and last live slot, the live records,
    their accounted bytes, the last live record's offset and length, the earliest TTL expiry and the records
    that never expire.  (The file store's compiled twin has its own, rillet/_speedups/_cstore.pyx.)"""
    n = len(x.offs)
    offs = x.offs
    nsubj = len(x.subjs)
    counts = [0] * nsubj
    lastslot = [0] * nsubj
    nrec = 0
    nbytes = 0
    sid = x.sid
    sz = x.sz
    last_off = last_rlen = 0
    for i in range(n):
        if offs[i]:
            s = sid[i]
            counts[s] += 1
            lastslot[s] = i
            nrec += 1
            nbytes += sz[i]
            last_off = offs[i]
            last_rlen = x.rlen[i]
    min_exp = 0
    n_noexp = 0
    if x.ttl is not None:
        ts = x.ts
        for i, t in enumerate(x.ttl):
            if t and offs[i]:
                if t < 0:
                    n_noexp += 1
                else:
                    e = ts[i] + t
                    if not min_exp or e < min_exp:
                        min_exp = e
    return counts, lastslot, nrec, nbytes, last_off, last_rlen, min_exp, n_noexp


def encode_index(blk: Block, x: BlockIndex, bcrc: int, totals: Any = index_totals) -> bytes:
    """The index file of a block whose columns are ``x`` (every record, dead or alive); ``totals``: the
    column pass (``index_totals`` or its compiled twin)."""
    n = len(x.offs)
    nsubj = len(x.subjs)
    counts, lastslot, nrec, nbytes, last_off, last_rlen, min_exp, n_noexp = totals(x)
    flags = F_TTL if x.ttl is not None else 0
    first_ts = x.ts[0] if n else 0
    last_ts = x.ts[n - 1] if n else 0
    parts = [
        _IDXS.pack(
            x.base,
            x.base + n - 1 if n else 0,
            blk.size,
            n,
            nsubj,
            flags,
            nrec,
            first_ts,
            last_ts,
            min_exp,
            n_noexp,
            0,
            nbytes,
            last_off,
            last_rlen,
            bcrc,
        )
    ]
    for sb in x.sbytes:
        parts.append(struct.pack("<H", len(sb)))
        parts.append(sb)
    parts.append(_le(array("I", counts)))
    parts.append(_le(array("I", lastslot)))
    summary = b"".join(parts)
    cols = [_le(x.offs), _le(x.rlen), _le(x.sz), _le(x.ts), _le(x.sid)]
    if x.ttl is not None:
        cols.append(_le(x.ttl))
    columns = b"".join(cols)
    head = _IDXH.pack(IDX_MAGIC, len(summary), zlib.crc32(summary), len(columns), zlib.crc32(columns))
    return head + summary + columns


def read_summary(path: str) -> IdxSummary | None:
    """The checked summary of an index file, or None (missing, torn, bad checksum)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_IDXH.size)
            if len(head) != _IDXH.size:
                return None
            magic, slen, scrc, clen, ccrc = _IDXH.unpack(head)
            if magic != IDX_MAGIC or slen < _IDXS.size:
                return None
            buf = f.read(slen)
            if len(buf) != slen or zlib.crc32(buf) != scrc:
                return None
            total = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if total != _IDXH.size + slen + clen:
        return None
    s = IdxSummary()
    (
        s.first,
        s.last,
        s.fsize,
        s.slots,
        nsubj,
        s.flags,
        s.nrec,
        s.first_ts,
        s.last_ts,
        s.min_exp,
        s.n_noexp,
        _,
        s.nbytes,
        s.last_off,
        s.last_rlen,
        s.bcrc,
    ) = _IDXS.unpack_from(buf, 0)
    pos = _IDXS.size
    subjs = []
    try:
        for _ in range(nsubj):
            (ln,) = struct.unpack_from("<H", buf, pos)
            pos += 2
            subjs.append(bytes(buf[pos : pos + ln]))
            pos += ln
        counts = array("I")
        counts.frombytes(buf[pos : pos + 4 * nsubj])
        pos += 4 * nsubj
        lastslot = array("I")
        lastslot.frombytes(buf[pos : pos + 4 * nsubj])
        pos += 4 * nsubj
    except (struct.error, ValueError):
        return None
    if pos != slen or len(counts) != nsubj or len(lastslot) != nsubj:
        return None
    if not _LITTLE:
        counts.byteswap()
        lastslot.byteswap()
    ncols = 5 + (1 if s.flags & F_TTL else 0)
    per = 8 + 4 + 4 + 8 + 4 + (8 if s.flags & F_TTL else 0)
    if clen != per * s.slots or ncols < 5:
        return None
    if s.slots and s.last != s.first + s.slots - 1:
        return None
    s.subjs = [b.decode("utf-8", "surrogateescape") for b in subjs]
    s.counts = counts
    s.lastslot = lastslot
    s.col_off = _IDXH.size + slen
    s.col_len = clen
    s.col_crc = ccrc
    return s


def read_columns(path: str, s: IdxSummary) -> BlockIndex | None:
    """The columns of an index file whose summary is ``s``, checked; None if they fail their checksum."""
    try:
        with open(path, "rb") as f:
            f.seek(s.col_off)
            buf = f.read(s.col_len)
    except OSError:
        return None
    if len(buf) != s.col_len or zlib.crc32(buf) != s.col_crc:
        return None
    n = s.slots
    x = BlockIndex(s.first)
    pos = 0
    cols = [(x.offs, 8), (x.rlen, 4), (x.sz, 4), (x.ts, 8), (x.sid, 4)]
    if s.flags & F_TTL:
        x.ttl = array("q")
        cols.append((x.ttl, 8))
    for col, w in cols:
        col.frombytes(buf[pos : pos + w * n])
        pos += w * n
        if not _LITTLE:
            col.byteswap()
    x.subjs = list(s.subjs)
    x.sbytes = [sj.encode("utf-8", "surrogateescape") for sj in x.subjs]
    nsubj = len(x.subjs)
    if n and max(x.sid) >= max(nsubj, 1):
        return None
    return x
