"""Opening a file store: the state log, the blocks (from their index files when those check out, else
scanned record by record: torn tails cut, corrupt regions reported as lost, incomplete atomic batches
dropped) and the resident per-block counters.  A mixin of ``FileStore``."""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_left, bisect_right
from typing import Any, Iterable, Iterator

from ._fsformat import (
    _LAST,
    _REC_LEN,
    _U64,
    BLOCK_MAGIC,
    F_BATCH,
    L_DEL,
    L_FIRST,
    L_LAST,
    L_TRUNC,
    LOG_MAGIC,
    T_MSG,
    _parse_log_record,
    _parse_record,
)
from ._fsindex import Block, BlockIndex, IdxSummary, read_columns, read_summary
from .base import ErrStoreCorrupt, StoreError


class BlockRecovery:
    """Needs from FileStore: ``log``, ``_msgdir``, ``_subjects``, ``_bl``, ``_blocks``, ``_lost``, ``_nmsgs``,
    ``_bytes``, ``_first``/``_last``/``_last_ts``, ``_cache_put``, ``_write_index``, ``_read_block``,
    ``_unlink_block``, ``_init_block_file``, ``_activate``, ``_block_size`` and the queries."""

    log: Any
    _msgdir: str
    _subjects: dict
    _bl: list
    _blocks: dict
    _lost: set
    _lost_sizes: dict
    _pinned: dict
    _nmsgs: int
    _bytes: int
    _first: int
    _last: int
    _last_ts: int
    _bfirst: list
    _block_size: int
    _cache_put: Any
    _write_index: Any
    _read_block: Any
    _unlink_block: Any
    _init_block_file: Any
    _keys: Any  # a cipher.KeyRing when the store is encrypted
    _bstream: Any
    _activate: Any
    _reindex_blocks: Any
    _next_alive: Any
    _locate: Any

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
        idx = []
        for fn in os.listdir(self._msgdir):
            if fn.endswith(".blk"):
                try:
                    out.append((int(fn[:-4]), os.path.join(self._msgdir, fn)))
                except ValueError:
                    continue
            elif fn.endswith(".idx"):
                idx.append(fn)
            elif fn.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(self._msgdir, fn))
                except OSError:
                    pass
        have = {f"{i:010d}.idx" for i, _ in out}
        for fn in idx:
            if fn not in have:
                try:
                    os.unlink(os.path.join(self._msgdir, fn))  # left by a block removed in a crash
                except OSError:
                    pass
        out.sort()
        return out

    def _idx_path(self, blk: Block) -> str:
        return blk.path[:-4] + ".idx"

    def _summary_for(self, blk: Block, fsize: int, min_seq: int) -> IdxSummary | None:
        """The block's index file summary if it can be trusted for this block file, else None (and the
        file is removed)."""
        ipath = self._idx_path(blk)
        if not os.path.exists(ipath):
            return None
        s = read_summary(ipath)
        why = ""
        if s is None:
            why = "torn or corrupt"
        elif s.fsize != fsize or not s.slots or s.first <= min_seq:
            why = "does not match its block"
        else:
            try:
                with open(blk.path, "rb") as f:
                    data = f.read()
            except OSError:
                data = b""
            if len(data) != fsize or zlib.crc32(data) != s.bcrc:
                why = "does not match its block's content"
            else:
                mv = memoryview(data)
                h = _parse_record(mv, s.last_off, min(s.last_off + s.last_rlen, fsize))
                mv.release()
                if h is None or h[4] != s.last or s.last_off + s.last_rlen != fsize or h[0] != T_MSG:
                    why = "does not match its block's last record"
        if why:
            self.log("warn", f"{ipath}: index {why}; the block is scanned")
            self._unlink_quiet(ipath)
            return None
        return s

    def _unlink_quiet(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            self.log("error", f"cannot remove {path}: {e.strerror or e}")

    def _recover_blocks(self, first_mark: int, last_mark: int, last_mark_ts: int, dels: set[int]) -> None:
        blocks = self._list_blocks()
        psim = self._subjects
        max_seq = 0
        max_seq_ts = 0
        dsorted = sorted(dels)
        # Corrupt regions as [seq of the good record before, seq of the good record after, corrupt bytes].
        bad: list[list[int]] = []
        open_bad: list[list[int]] = []
        for bi, (index, path) in enumerate(blocks):
            is_last = bi == len(blocks) - 1
            blk = Block(index, path)
            try:
                fsize = os.path.getsize(path)
            except OSError as e:
                raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
            summ = self._summary_for(blk, fsize, max_seq) if fsize > 8 else None
            x: BlockIndex | None = None
            slast: Any = None
            if summ is not None:
                blk.first, blk.last, blk.size = summ.first, summ.last, fsize
                blk.first_ts, blk.last_ts = summ.first_ts, summ.last_ts
                blk.min_exp, blk.n_noexp = summ.min_exp, summ.n_noexp
                blk.smap = {sys.intern(sj): i for i, sj in enumerate(summ.subjs)}
                blk.scnt = array("I", summ.counts)
                blk.live = summ.nrec
                blk.idx_on_disk = True
                nbytes = summ.nbytes
                slast = summ.lastslot
                lo_d = bisect_left(dsorted, blk.first)
                hi_d = bisect_right(dsorted, blk.last)
                if hi_d > lo_d or blk.first < first_mark:
                    x = read_columns(self._idx_path(blk), summ)
                    if x is None:
                        self.log("warn", f"{self._idx_path(blk)}: index columns corrupt; the block is scanned")
                        self._unlink_quiet(self._idx_path(blk))
                        blk = Block(index, path)
                        summ = None
                        slast = None
            if summ is None:
                x, max_seq, max_seq_ts, open_bad = self._scan_recover(
                    blk, is_last, max_seq, max_seq_ts, open_bad, bad
                )
                nbytes = self._account_scan(blk, x)
            else:
                if open_bad:
                    for r in open_bad:
                        r[1] = blk.first
                    bad.extend(open_bad)
                    open_bad = []
                max_seq = blk.last
                max_seq_ts = blk.last_ts
            # Tombstones and the first-seq mark.
            if x is not None and blk.first:
                base = x.base
                offs = x.offs
                sid = x.sid
                sz = x.sz
                removed = 0
                todo: Iterable[int] = dsorted[bisect_left(dsorted, blk.first) : bisect_right(dsorted, blk.last)]
                if blk.first < first_mark:
                    todo = list(todo) + list(range(blk.first, min(first_mark, blk.last + 1)))
                for q in todo:
                    slot = q - base
                    if 0 <= slot < len(offs) and offs[slot] and not blk.is_dead(slot):
                        blk.mark_dead(slot)
                        blk.live -= 1
                        blk.scnt[sid[slot]] -= 1
                        nbytes -= sz[slot]
                        removed += 1
                if removed or slast is None:
                    slast = self._last_slots(blk, x)
            self._nmsgs += blk.live
            self._bytes += nbytes
            if blk.live and slast is not None:
                base = blk.first
                scnt = blk.scnt
                for sj, l in blk.smap.items():
                    c = scnt[l]
                    if c:
                        ps = psim.get(sj)
                        if ps is None:
                            psim[sj] = [c, index, base + slast[l]]
                        else:
                            ps[0] += c
                            ps[2] = base + slast[l]
            self._blocks[index] = blk
            self._bl.append(blk)
            if x is not None:
                if blk.bad:
                    self._pinned[index] = x
                else:
                    self._cache_put(index, x)  # (the last block's becomes the active index)
                    if not blk.idx_on_disk and not is_last:
                        self._write_index(blk, x)
        bad.extend(open_bad)
        self._reindex_blocks()
        # Sequences.
        last = max(last_mark, max_seq, first_mark - 1)
        self._last = last
        self._last_ts = last_mark_ts if last_mark >= max_seq else max_seq_ts
        self._first = first_mark if first_mark > 0 else 1
        if self._nmsgs:
            self._first = self._next_alive(min(self._bfirst))
        else:
            self._first = max(first_mark, last + 1)
        # Lost sequences: those between the good records around each bad region.
        if bad:
            floor = max(first_mark, 1)
            sizes = self._lost_sizes
            for p, q, nb in bad:
                if not q:
                    q = last + 1
                lo = max(p + 1, floor)
                if q - lo > 1_000_000:
                    self.log("error", f"corrupt region spans sequences {lo}..{q - 1}; reporting the first 1000000")
                    q = lo + 1_000_000
                region = [s for s in range(lo, q) if s not in dels and self._locate(s) is None]
                self._lost.update(region)
                if region and nb:
                    # (the region's corrupt bytes, shared by its lost sequences: what nothing readable is left of)
                    each, extra = divmod(nb, len(region))
                    for k, s in enumerate(region):
                        sizes[s] = each + (1 if k < extra else 0)
            if self._lost:
                self.log("error", f"{len(self._lost)} message(s) lost to corruption")
        # Drop blocks with nothing live (except the last, which stays the active block).
        for blk in list(self._bl[:-1]):
            if blk.live == 0 and not blk.bad:
                self._unlink_block(blk)
        if self._bl:
            last_blk = self._bl[-1]
            if last_blk.size == 0:
                # Rewrite the header of a reset block.
                self._init_block_file(last_blk)
            if last_blk.size < self._block_size:
                self._activate(last_blk)

    def _last_slots(self, blk: Block, x: BlockIndex) -> array:
        """Per local subject id: the slot of its last live message in the block."""
        out = array("I", bytes(4 * len(blk.smap)))
        offs = x.offs
        sid = x.sid
        for slot in range(len(offs)):
            if offs[slot] and not blk.is_dead(slot):
                out[sid[slot]] = slot
        return out

    def _account_scan(self, blk: Block, x: BlockIndex) -> int:
        """Set a scanned block's resident counters from its index; returns its accounted bytes."""
        blk.smap = {}
        for l, sj in enumerate(x.subjs):
            blk.smap[sj] = l
        scnt = array("I", bytes(4 * len(x.subjs)))
        offs = x.offs
        sid = x.sid
        sz = x.sz
        nbytes = 0
        live = 0
        for slot in range(len(offs)):
            if offs[slot]:
                scnt[sid[slot]] += 1
                nbytes += sz[slot]
                live += 1
        blk.scnt = scnt
        blk.live = live
        self._ttl_bounds(blk, x)
        if len(offs):
            blk.first_ts = x.ts[0]
            blk.last_ts = x.ts[len(offs) - 1]
        return nbytes

    def _ttl_bounds(self, blk: Block, x: BlockIndex) -> None:
        """Recompute the block's TTL bounds from its live messages."""
        blk.min_exp = 0
        blk.n_noexp = 0
        ttl = x.ttl
        if ttl is None:
            return
        offs = x.offs
        ts = x.ts
        d = blk.dead
        nd = len(d) if d is not None else 0
        for slot in range(len(offs)):
            t = ttl[slot]
            if t and offs[slot] and (slot >= nd or not d[slot]):  # type: ignore[index]
                if t < 0:
                    blk.n_noexp += 1
                else:
                    e = ts[slot] + t
                    if not blk.min_exp or e < blk.min_exp:
                        blk.min_exp = e

    def _scan_recover(
        self, blk: Block, is_last: bool, max_seq: int, max_seq_ts: int, open_bad: list, bad: list
    ) -> tuple[BlockIndex, int, int, list]:
        """Scan a block file at open: verify every record, cut a torn tail (last block only), note corrupt
        regions; returns its index and the running max seq / ts / open bad regions."""
        path = blk.path
        try:
            with open(path, "rb") as f:
                buf = f.read()
        except OSError as e:
            raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
        if self._keys is not None and buf:
            buf = self._bstream(blk.index).xor(buf, 0)
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
                open_bad.append([max_seq, 0, 0])
        mv = memoryview(buf)
        pos = 8 if end >= 8 else end
        cut = -1
        x = BlockIndex()
        smap: dict[str, int] = {}
        intern: dict[bytes, int] = {}
        pend: list[tuple[int, tuple]] = []  # (offset, header) of a batch whose last record is not seen yet

        def index_record(pos: int, h: tuple) -> None:
            nonlocal max_seq, max_seq_ts, open_bad
            t, flags, slen, total, seq, ts, ttl, hlen, dlen = h
            if not blk.first:
                blk.first = seq
                x.base = seq
            else:
                gap = seq - x.base - len(x.offs)
                if gap:
                    x.pad(gap, x.ts[-1] if len(x.ts) else ts)
            blk.last = seq
            max_seq = seq
            max_seq_ts = ts
            if open_bad:
                for r in open_bad:
                    r[1] = seq
                bad.extend(open_bad)
                open_bad = []
            if t != T_MSG:
                x.pad(1, x.ts[-1] if len(x.ts) else 0)
                return
            sb = bytes(mv[pos + _REC_LEN : pos + _REC_LEN + slen])
            l = intern.get(sb)
            if l is None:
                subj = sys.intern(sb.decode("utf-8", "surrogateescape"))
                l = smap.get(subj)
                if l is None:
                    l = smap[subj] = len(x.subjs)
                    x.subjs.append(subj)
                    x.sbytes.append(sb)
                intern[sb] = l
            x.offs.append(pos)
            x.rlen.append(total)
            x.sz.append((34 + slen + hlen + dlen) if hlen else (30 + slen + dlen))
            x.ts.append(ts)
            x.sid.append(l)
            if ttl and x.ttl is None:
                x.add_ttl_column(len(x.offs) - 1)
            if x.ttl is not None:
                x.ttl.append(ttl)

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
                    f"{path}: corrupt data at offset {pos}" + (f"..{nxt}" if nxt >= 0 else " to the end of the block"),
                )
                blk.bad = True
                if not open_bad or open_bad[-1][0] != max_seq:
                    open_bad.append([max_seq, 0, 0])
                open_bad[-1][2] += (nxt if nxt >= 0 else end) - pos
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
            self.log("warn", f"{path}: torn write at the end ({end - cut} bytes from offset {cut}), truncated")
            self._truncate_file(path, cut)
            end = cut
        blk.size = max(end, 8) if end else 0
        return x, max_seq, max_seq_ts, open_bad

    def _records(self, mv: memoryview) -> Iterator[tuple[int, tuple]]:
        """The records of a block's bytes as (offset, parsed header), passing over bytes that do not parse."""
        end = len(mv)
        pos = 8
        while pos < end:
            h = _parse_record(mv, pos, end)
            if h is None:
                pos = self._resync(mv, pos + 1, end, 0)
                if pos < 0:
                    return
                continue
            yield pos, h
            pos += h[3]

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

    def _rescan(self, blk: Block) -> BlockIndex:
        """Rebuild the index of a sealed block (no corrupt regions) from its records."""
        try:
            buf = self._read_block(blk)
        except OSError as e:
            raise ErrStoreCorrupt(f"cannot read {blk.path}: {e.strerror or e}") from e
        n = blk.last - blk.first + 1 if blk.first else 0
        x = BlockIndex(blk.first)
        x.pad(n, 0)
        x.subjs = list(blk.smap)
        x.sbytes = [sj.encode("utf-8", "surrogateescape") for sj in x.subjs]
        smap = blk.smap
        mv = memoryview(buf)
        prev_ts = 0
        for pos, h in self._records(mv):
            t, flags, slen, total, seq, ts, ttl, hlen, dlen = h
            slot = seq - blk.first
            if 0 <= slot < n:
                x.ts[slot] = ts
                if t == T_MSG:
                    subj = bytes(mv[pos + _REC_LEN : pos + _REC_LEN + slen]).decode("utf-8", "surrogateescape")
                    l = smap.get(subj)
                    if l is None:
                        l = smap[subj] = len(x.subjs)
                        x.subjs.append(subj)
                        x.sbytes.append(subj.encode("utf-8", "surrogateescape"))
                        blk.scnt.append(0)
                    x.offs[slot] = pos
                    x.rlen[slot] = total
                    x.sz[slot] = (34 + slen + hlen + dlen) if hlen else (30 + slen + dlen)
                    x.sid[slot] = l
                    if ttl:
                        if x.ttl is None:
                            x.add_ttl_column(n)
                        x.ttl[slot] = ttl  # type: ignore[index]
        # padded slots carry the previous timestamp (keeps ts sorted for time lookups)
        for slot in range(n):
            if x.ts[slot]:
                prev_ts = x.ts[slot]
            else:
                x.ts[slot] = prev_ts
        mv.release()
        return x
