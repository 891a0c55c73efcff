"""The file store's index over its blocks (see ``_fsindex``), as ``_query.StoreIndex`` wants it: next/previous
live sequence, per-subject first/last/counts, matching counts, time lookups.  A mixin of ``FileStore``,
which owns the blocks and loads their indexes (``_idx``); nothing here changes the store's messages.

Stream-wide per subject the store keeps ``_subjects[subject] = [count, first block index, last seq]``:
the count and last sequence are exact, the first block a lower bound moved forward when found stale.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from ._fsindex import Block, BlockIndex
from ._query import _is_all, _Matcher
from .base import ErrStoreCorrupt, StoreError, StoredMsg

_NOKEY = 1 << 64  # _bfirst key of an empty block (only ever the last one)


class BlockQueries:
    _bl: list[Block]
    _bfirst: list[int]
    _subjects: dict[str, list[int]]
    _first: int
    _last: int
    _nmsgs: int
    _lost: set[int]
    _lost_sizes: dict[int, int]
    _matcher: Any  # StoreQueries'
    _matching: Any  # StoreQueries'

    def _idx(self, blk: Block) -> BlockIndex:  # pragma: no cover - FileStore's
        raise NotImplementedError

    def _read_msg(self, blk: Block, x: BlockIndex, slot: int) -> StoredMsg:  # pragma: no cover
        raise NotImplementedError

    @property
    def msgs(self) -> int:
        return self._nmsgs

    def _has_ttls(self) -> bool:
        return any(b.min_exp for b in self._bl)

    # -- blocks ---------------------------------------------------------------------

    def _reindex_blocks(self) -> None:
        self._bfirst = [b.first if b.first else _NOKEY for b in self._bl]

    def _bpos(self, seq: int) -> int:
        """Position in ``_bl`` of the block that holds ``seq`` or the first one after it."""
        i = bisect_right(self._bfirst, seq) - 1
        if i < 0:
            return 0
        if seq > self._bl[i].last:
            return i + 1
        return i

    def _bpos_index(self, index: int) -> int:
        """Position in ``_bl`` of the first block whose file index is >= ``index``."""
        return bisect_left(self._bl, index, key=lambda b: b.index)

    def _block_of(self, seq: int) -> Block | None:
        i = bisect_right(self._bfirst, seq) - 1
        if i < 0:
            return None
        b = self._bl[i]
        return b if seq <= b.last else None

    def _locate(self, seq: int) -> tuple[Block, BlockIndex, int] | None:
        """(block, index, slot) of a live message, or None."""
        blk = self._block_of(seq)
        if blk is None or not blk.live:
            return None
        x = self._idx(blk)
        slot = seq - x.base
        if slot < 0 or slot >= len(x.offs) or not x.offs[slot]:
            return None
        d = blk.dead
        if d is not None and slot < len(d) and d[slot]:
            return None
        return blk, x, slot

    def _mtable(self, blk: Block, m: _Matcher) -> tuple[bytearray, list[int]]:
        """Which local subject ids of the block match ``m``: (table by id, the ids)."""
        mc = blk.mcache
        n = len(blk.smap)
        if mc is not None and mc[0] is m and mc[1] == n:
            return mc[2], mc[3]
        tbl = bytearray(n)
        ids = []
        for s, l in blk.smap.items():
            if m(s):
                tbl[l] = 1
                ids.append(l)
        blk.mcache = (m, n, tbl, ids)
        return tbl, ids

    # -- sequences ------------------------------------------------------------------

    def _next_alive(self, s: int) -> int:
        """First live seq >= s, or 0."""
        if s < self._first:
            s = self._first
        if s > self._last or not self._nmsgs:
            return 0
        bl = self._bl
        i = self._bpos(s)
        n = len(bl)
        while i < n:
            blk = bl[i]
            i += 1
            if not blk.live:
                continue
            x = self._idx(blk)
            offs = x.offs
            m = len(offs)
            slot = s - x.base
            if slot < 0:
                slot = 0
            d = blk.dead
            nd = min(len(d), m) if d is not None else 0
            while slot < m:
                if slot < nd:
                    j = d.find(0, slot, nd)  # type: ignore[union-attr]
                    if j < 0:
                        slot = nd
                        continue
                    slot = j
                if offs[slot]:
                    return x.base + slot
                slot += 1
        return 0

    def _prev_alive(self, s: int) -> int:
        """Last live seq <= s, or 0."""
        if s > self._last:
            s = self._last
        if s < self._first or not self._nmsgs:
            return 0
        bl = self._bl
        i = bisect_right(self._bfirst, s) - 1
        while i >= 0:
            blk = bl[i]
            i -= 1
            if not blk.live:
                continue
            x = self._idx(blk)
            offs = x.offs
            slot = min(s - x.base, len(offs) - 1)
            d = blk.dead
            while slot >= 0:
                if d is not None and slot < len(d) and d[slot]:
                    j = d.rfind(0, 0, slot)
                    if j < 0:
                        break
                    slot = j
                    continue
                if offs[slot]:
                    return x.base + slot
                slot -= 1
        return 0

    def _count_from(self, start: int) -> int:
        """Live messages with seq >= start."""
        n = 0
        for blk in self._bl:
            if not blk.live or blk.last < start:
                continue
            if blk.first >= start:
                n += blk.live
                continue
            x = self._idx(blk)
            offs = x.offs
            d = blk.dead
            nd = len(d) if d is not None else 0
            for slot in range(start - x.base, len(offs)):
                if offs[slot] and (slot >= nd or not d[slot]):  # type: ignore[index]
                    n += 1
        return n

    def _ts_of(self, seq: int) -> int:
        blk = self._block_of(seq)
        if blk is None:
            return 0
        x = self._idx(blk)
        return x.ts[seq - x.base]

    # -- per subject ----------------------------------------------------------------

    def _subj_first_from(self, subj: str, ps: list[int], start: int) -> int:
        """First live seq >= start on this literal subject, or 0."""
        if ps[2] < start:
            return 0
        bl = self._bl
        j = self._bpos_index(ps[1])
        i = self._bpos(start) if start else 0
        from_first = j >= i
        if j > i:
            i = j
        n = len(bl)
        while i < n:
            blk = bl[i]
            i += 1
            l = blk.smap.get(subj)
            if l is None or not blk.scnt[l]:
                continue
            if from_first:
                ps[1] = blk.index
                from_first = False
            s = self._subj_first_in(blk, l, start)
            if s:
                return s
        return 0

    def _subj_first(self, subj: str, ps: list[int]) -> int:
        return self._subj_first_from(subj, ps, 0)

    def _subj_last(self, subj: str, ps: list[int]) -> int:
        return ps[2]

    def _subj_last_walk(self, subj: str, limit: int) -> int:
        """Last live seq <= limit on this literal subject, found in the blocks, or 0."""
        bl = self._bl
        i = bisect_right(self._bfirst, limit) - 1
        while i >= 0:
            blk = bl[i]
            i -= 1
            l = blk.smap.get(subj)
            if l is None or not blk.scnt[l]:
                continue
            x = self._idx(blk)
            pos = x.slots_of(l)
            k = bisect_right(pos, limit - x.base) - 1
            d = blk.dead
            nd = len(d) if d is not None else 0
            while k >= 0:
                slot = pos[k]
                if slot >= nd or not d[slot]:  # type: ignore[index]
                    return x.base + slot
                k -= 1
        return 0

    def _subj_last_upto(self, subj: str, ps: list[int], limit: int) -> int:
        if ps[2] <= limit:
            return ps[2]
        return self._subj_last_walk(subj, limit)

    def _subj_count_from(self, subj: str, ps: list[int], start: int) -> int:
        n = 0
        for blk in self._bl:
            if blk.last < start:
                continue
            l = blk.smap.get(subj)
            if l is None or not blk.scnt[l]:
                continue
            if blk.first >= start:
                n += blk.scnt[l]
                continue
            x = self._idx(blk)
            pos = x.slots_of(l)
            d = blk.dead
            nd = len(d) if d is not None else 0
            for k in range(bisect_left(pos, start - x.base), len(pos)):
                slot = pos[k]
                if slot >= nd or not d[slot]:  # type: ignore[index]
                    n += 1
        return n

    def _matching_count_from(self, m: _Matcher, start: int) -> tuple[int, int]:
        """(live messages >= start matching m, the first of them)."""
        n = first = 0
        for blk in self._bl:
            if not blk.live or blk.last < start:
                continue
            tbl, ids = self._mtable(blk, m)
            if not ids:
                continue
            scnt = blk.scnt
            c = 0
            for l in ids:
                c += scnt[l]
            if not c:
                continue
            if blk.first >= start:
                n += c
                if not first:
                    first = self._first_match_in(blk, tbl, ids, start)
                continue
            x = self._idx(blk)
            offs = x.offs
            sid = x.sid
            d = blk.dead
            nd = len(d) if d is not None else 0
            for slot in range(max(start - x.base, 0), len(offs)):
                if offs[slot] and tbl[sid[slot]] and (slot >= nd or not d[slot]):  # type: ignore[index]
                    n += 1
                    if not first:
                        first = x.base + slot
        return n, first

    def _first_match_in(self, blk: Block, tbl: bytearray, ids: list[int], start: int) -> int:
        if len(ids) == 1:
            return self._subj_first_in(blk, ids[0], start)
        x = self._idx(blk)
        offs = x.offs
        sid = x.sid
        d = blk.dead
        nd = len(d) if d is not None else 0
        slot = max(start - x.base, 0)
        m_ = len(offs)
        while slot < m_:
            if offs[slot] and tbl[sid[slot]] and (slot >= nd or not d[slot]):  # type: ignore[index]
                return x.base + slot
            slot += 1
        return 0

    def _next_multi(self, m: _Matcher, start: int) -> int:
        for blk in self._bl[self._bpos(start) :]:
            if not blk.live:
                continue
            tbl, ids = self._mtable(blk, m)
            if not ids:
                continue
            scnt = blk.scnt
            if not any(scnt[l] for l in ids):
                continue
            s = self._first_match_in(blk, tbl, ids, start)
            if s:
                return s
        return 0

    def _subj_first_in(self, blk: Block, l: int, start: int) -> int:
        """First live seq >= start of local subject ``l`` in the block, or 0."""
        x = self._idx(blk)
        pos = x.slots_of(l)
        head = start <= x.base
        k = x.shead.get(l, 0) if head else bisect_left(pos, start - x.base)
        d = blk.dead
        nd = len(d) if d is not None else 0
        np = len(pos)
        while k < np:
            slot = pos[k]
            if slot >= nd or not d[slot]:  # type: ignore[index]
                if head:
                    x.shead[l] = k  # removed messages stay removed: later searches start here
                return x.base + slot
            k += 1
        if head:
            x.shead[l] = k
        return 0

    # -- loading --------------------------------------------------------------------

    def load_msg(self, seq: int) -> StoredMsg | None:
        """The message at ``seq``, or None if never stored, deleted or out of range."""
        loc = self._locate(seq)
        if loc is None:
            if seq in self._lost:
                raise ErrStoreCorrupt(f"message {seq} is lost (corrupt data)", seq=seq)
            return None
        return self._read_msg(*loc)

    def load_run(self, seq: int, n: int, max_bytes: int, subject: str | None = None) -> list[StoredMsg]:
        """The messages at ``seq``, ``seq + 1``, ... while each is there and readable, all in ``seq``'s block: at
        most ``n``, and no more once their records pass ``max_bytes`` (the first one always). A sequential
        reader's batch (a consumer's run of deliveries): one lookup of the block for all of them. Stops without
        an error at a gap, a deleted or unreadable message or the block's end (``load_msg`` then says why);
        with ``subject``, also at a message on another subject (told by the index, not read)."""
        out: list[StoredMsg] = []
        loc = self._locate(seq)
        if loc is None:
            return out
        blk, x, slot = loc
        offs, rlen, dead = x.offs, x.rlen, blk.dead
        end = min(len(offs), slot + n)
        ndead = len(dead) if dead is not None else 0
        read, add = self._read_msg, out.append
        size = 0
        while slot < end and size <= max_bytes:
            if not offs[slot] or (slot < ndead and dead[slot]):  # type: ignore[index]
                break
            if subject is not None and x.subjs[x.sid[slot]] != subject:
                break
            try:
                add(read(blk, x, slot))
            except (StoreError, OSError):
                break
            size += rlen[slot]
            slot += 1
        return out

    def _load(self, s: int) -> StoredMsg | None:
        if not s:
            return None
        loc = self._locate(s)
        return self._read_msg(*loc) if loc is not None else None

    def subject_for_seq(self, seq: int) -> str | None:
        loc = self._locate(seq)
        if loc is None:
            return None
        _, x, slot = loc
        return x.subjs[x.sid[slot]]

    def ttl_of(self, seq: int) -> float:
        """The TTL (seconds) the message was stored with (0 = none, < 0 = never expires)."""
        loc = self._locate(seq)
        if loc is None:
            return 0
        _, x, slot = loc
        if x.ttl is None:
            return 0
        t = x.ttl[slot]
        return -1 if t < 0 else t / 1e9

    def _size_of(self, seq: int) -> int | None:
        loc = self._locate(seq)
        return None if loc is None else loc[1].sz[loc[2]]

    def _seq_from_time(self, ts_ns: int, first: int, last: int) -> int:
        for blk in self._bl[self._bpos(first) :]:
            if not blk.live or blk.last_ts < ts_ns:
                continue
            x = self._idx(blk)
            k = bisect_left(x.ts, ts_ns)
            s = self._next_alive(x.base + k)
            return s or self._last + 1
        return self._last + 1

    # -- state ----------------------------------------------------------------------

    def _lost_list(self) -> list[int]:
        return sorted(self._lost)

    def lost_bytes(self, seqs: Any = None) -> int:
        """The bytes on disk of the damaged records ``seqs`` (default: every one in ``state().lost``): a record a
        read found damaged counts its length as written; a corrupt region found when the store opened counts its
        bytes, shared by the sequences lost in it (nothing in it is trusted, its records' own lengths included)."""
        sizes = self._lost_sizes
        return sum(sizes.get(s, 0) for s in (self._lost if seqs is None else seqs) if s in self._lost)

    def lost_subject(self, seq: int) -> str | None:
        """The subject a damaged record (``state().lost``) was stored under, where the block's index still
        holds it (damage a read found while running: the index was made from the record as written); None when
        it is not known (the open-time scan found the record damaged: nothing read from it is trusted)."""
        if seq not in self._lost:
            return None
        blk = self._block_of(seq)
        if blk is None:
            return None
        x = self._idx(blk)
        slot = seq - x.base
        if slot < 0 or slot >= len(x.offs) or not x.offs[slot]:
            return None
        return x.subjs[x.sid[slot]]

    def _deleted_list(self, first: int, last: int) -> list[int]:
        out: list[int] = []
        prev = first - 1
        for blk in self._bl:
            if not blk.live or blk.last < first:
                continue
            if blk.first > last:
                break
            x = self._idx(blk)
            offs = x.offs
            d = blk.dead
            nd = len(d) if d is not None else 0
            lo = max(first, x.base)
            hi = min(last, x.base + len(offs) - 1)
            for s in range(lo, hi + 1):
                slot = s - x.base
                if offs[slot] and (slot >= nd or not d[slot]):  # type: ignore[index]
                    if s > prev + 1:
                        out.extend(range(prev + 1, s))
                    prev = s
        out.extend(range(prev + 1, last + 1))
        return out

    def _filtered_match(self, m: _Matcher, start: int) -> tuple[int, int, int]:
        lst = 0
        for _, ps in self._matching(m):
            if ps[2] > lst:
                lst = ps[2]
        if lst < start:
            return 0, 0, 0
        n, f = self._matching_count_from(m, start)
        if not n:
            return 0, 0, 0
        return n, f, lst

    def _matching_seqs(self, filter: str, first: int, last: int) -> list[int]:
        """Live seqs in [first, last] matching filter, ascending."""
        out: list[int] = []
        if _is_all(filter):
            m = None
        else:
            m = self._matcher((filter,))
        for blk in list(self._bl):
            if not blk.live or blk.last < first:
                continue
            if blk.first > last:
                break
            tbl = None
            if m is not None:
                tbl, ids = self._mtable(blk, m)
                if not any(blk.scnt[l] for l in ids):
                    continue
            x = self._idx(blk)
            offs = x.offs
            sid = x.sid
            d = blk.dead
            nd = len(d) if d is not None else 0
            for slot in range(max(first - x.base, 0), min(last - x.base + 1, len(offs))):
                if offs[slot] and (tbl is None or tbl[sid[slot]]) and (slot >= nd or not d[slot]):  # type: ignore[index]
                    out.append(x.base + slot)
        return out
