"""Read-only queries of the file store over its blocks (see ``_fsindex``): next/previous live sequence,
per-subject first/last/counts, filtered state, time lookups.  A mixin of ``FileStore``, which owns the
blocks and loads their indexes (``_idx``); nothing here changes the store.

Stream-wide per subject the store keeps ``_psim[subject] = [count, first block index, last seq]``:
the count and last sequence are exact, the first block a lower bound moved forward when found stale.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterable

from ._core import _has_wildcard, _is_all, _Matcher
from ._fsindex import Block, BlockIndex
from .base import ErrTooManyResults, StoredMsg, StreamState

_NOKEY = 1 << 64  # _bfirst key of an empty block (only ever the last one)


class BlockQueries:
    _bl: list[Block]
    _bfirst: list[int]
    _psim: dict[str, list[int]]
    _first: int
    _last: int
    _last_ts: int
    _nmsgs: int
    _bytes: int
    _lost: set[int]
    _matcher: Any  # IndexedStore's

    def _idx(self, blk: Block) -> BlockIndex:  # pragma: no cover - FileStore's
        raise NotImplementedError

    def _read_msg(self, blk: Block, x: BlockIndex, slot: int) -> StoredMsg:  # pragma: no cover
        raise NotImplementedError

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

    def _subj_first_from(self, subj: str, start: int) -> int:
        """First live seq >= start on this literal subject, or 0."""
        ps = self._psim.get(subj)
        if ps is None or ps[2] < start:
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

    def _subj_first(self, subj: str) -> int:
        return self._subj_first_from(subj, 0)

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

    def _subj_last_upto(self, subj: str, limit: int) -> int:
        ps = self._psim.get(subj)
        if ps is None:
            return 0
        if ps[2] <= limit:
            return ps[2]
        return self._subj_last_walk(subj, limit)

    def _subj_count_from(self, subj: str, start: int) -> int:
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
        bl = self._bl
        i = self._bpos(start)
        nb = len(bl)
        while i < nb:
            blk = bl[i]
            i += 1
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

    def _psim_matching(self, m: _Matcher | None) -> Iterable[tuple[str, list[int]]]:
        if m is None:
            return self._psim.items()
        return [(s, ps) for s, ps in self._psim.items() if m(s)]

    # -- loading --------------------------------------------------------------------

    def load_msg(self, seq: int) -> StoredMsg | None:
        """The message at ``seq``, or None if never stored, deleted or out of range."""
        loc = self._locate(seq)
        if loc is None:
            if seq in self._lost:
                from .base import ErrStoreCorrupt

                raise ErrStoreCorrupt(f"message {seq} is lost (corrupt data)", seq=seq)
            return None
        return self._read_msg(*loc)

    def _load_seq(self, s: int) -> StoredMsg | None:
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

    def _next_seq(self, filter: str, start: int, wildcard: bool | None = None) -> int:
        if not self._nmsgs:
            return 0
        if start < self._first:
            start = self._first
        if start > self._last:
            return 0
        if _is_all(filter):
            return self._next_alive(start)
        if wildcard is None:
            wildcard = _has_wildcard(filter)
        if not wildcard:
            return self._subj_first_from(filter, start)
        return self._next_multi(self._matcher((filter,)), start)

    def load_next_msg(self, filter: str, start_seq: int, wildcard: bool | None = None) -> StoredMsg | None:
        """First message with seq >= start_seq whose subject matches ``filter``."""
        return self._load_seq(self._next_seq(filter, start_seq, wildcard))

    def load_next_msg_multi(self, filters: list[str], start_seq: int) -> StoredMsg | None:
        if not self._nmsgs:
            return None
        if not filters or any(_is_all(f) for f in filters):
            return self.load_next_msg(">", start_seq)
        start = max(start_seq, self._first)
        if start > self._last:
            return None
        return self._load_seq(self._next_multi(self._matcher(tuple(filters)), start))

    def _last_seq_matching(self, filter: str) -> int:
        if not self._nmsgs:
            return 0
        if _is_all(filter):
            return self._prev_alive(self._last)
        if not _has_wildcard(filter):
            ps = self._psim.get(filter)
            return ps[2] if ps is not None else 0
        best = 0
        for _, ps in self._psim_matching(self._matcher((filter,))):
            if ps[2] > best:
                best = ps[2]
        return best

    def load_last_msg(self, filter: str) -> StoredMsg | None:
        return self._load_seq(self._last_seq_matching(filter))

    def last_seq_for_subject(self, subject: str) -> int:
        ps = self._psim.get(subject)
        return ps[2] if ps is not None else 0

    def load_prev_msg(self, start_seq: int, filter: str = "") -> StoredMsg | None:
        if not self._nmsgs or start_seq < self._first:
            return None
        if _is_all(filter):
            s = self._prev_alive(start_seq)
        elif not _has_wildcard(filter):
            s = self._subj_last_upto(filter, start_seq)
        else:
            s = 0
            for subj, _ in self._psim_matching(self._matcher((filter,))):
                q = self._subj_last_upto(subj, start_seq)
                if q > s:
                    s = q
        return self._load_seq(s)

    def get_seq_from_time(self, ts_ns: int) -> int:
        """First sequence whose timestamp is >= ts_ns (last_seq + 1 if none)."""
        if not self._nmsgs:
            return self._last + 1
        first = self._first
        if self._ts_of(first) >= ts_ns:
            return first
        last = self._prev_alive(self._last)
        if self._ts_of(last) < ts_ns:
            return self._last + 1
        for blk in self._bl[self._bpos(first) :]:
            if not blk.live or blk.last_ts < ts_ns:
                continue
            x = self._idx(blk)
            k = bisect_left(x.ts, ts_ns)
            s = self._next_alive(x.base + k)
            return s or self._last + 1
        return self._last + 1

    # -- state ----------------------------------------------------------------------

    @property
    def msgs(self) -> int:
        return self._nmsgs

    def state(self) -> StreamState:
        n = self._nmsgs
        first, last = self._first, self._last
        return StreamState(
            msgs=n,
            bytes=self._bytes,
            first_seq=first,
            first_ts=self._ts_of(first) if n else 0,
            last_seq=last,
            last_ts=self._last_ts,
            num_subjects=len(self._psim),
            num_deleted=(last - first + 1 - n) if n else 0,
            calc_deleted=lambda: self._deleted_list(first, last),
            calc_lost=self._lost_list,
        )

    fast_state = state

    def _lost_list(self) -> list[int]:
        return sorted(self._lost)

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

    def filtered_state(self, filter: str, start_seq: int = 0) -> tuple[int, int, int]:
        return self._filtered(filter, start_seq, False)

    def _filtered(self, filter: str, start: int, last_per_subject: bool) -> tuple[int, int, int]:
        if not self._nmsgs:
            return 0, 0, 0
        if start < self._first:
            start = self._first
        if start > self._last:
            return 0, 0, 0
        if _is_all(filter):
            if last_per_subject:
                return self._filtered_subjects(None, start)
            if start <= self._first:
                return self._nmsgs, self._first, self._prev_alive(self._last)
            n = self._count_from(start)
            if not n:
                return 0, 0, 0
            return n, self._next_alive(start), self._prev_alive(self._last)
        if not _has_wildcard(filter):
            ps = self._psim.get(filter)
            if ps is None:
                return 0, 0, 0
            last = ps[2]
            if last < start:
                return 0, 0, 0
            if last_per_subject:
                return 1, last, last
            first = self._subj_first(filter)
            if start <= first:
                return ps[0], first, last
            return self._subj_count_from(filter, start), self._subj_first_from(filter, start), last
        m = self._matcher((filter,))
        if last_per_subject:
            return self._filtered_subjects(m, start)
        return self._filtered_multi(m, start)

    def _filtered_multi(self, m: _Matcher, start: int) -> tuple[int, int, int]:
        lst = 0
        for _, ps in self._psim_matching(m):
            if ps[2] > lst:
                lst = ps[2]
        if lst < start:
            return 0, 0, 0
        n, f = self._matching_count_from(m, start)
        if not n:
            return 0, 0, 0
        return n, f, lst

    def _filtered_subjects(self, m: _Matcher | None, start: int) -> tuple[int, int, int]:
        """Last per subject: (subjects whose last message is >= start, the lowest and highest of those)."""
        n = f = lst = 0
        for _, ps in self._psim_matching(m):
            last = ps[2]
            if last < start:
                continue
            n += 1
            if not f or last < f:
                f = last
            if last > lst:
                lst = last
        return n, f, lst

    def num_pending(self, start_seq: int, filter: str = "", last_per_subject: bool = False) -> tuple[int, int]:
        n, _, _ = self._filtered(filter, start_seq, last_per_subject)
        return n, self._last

    def num_pending_multi(
        self, start_seq: int, filters: list[str], last_per_subject: bool = False
    ) -> tuple[int, int]:
        if not filters or any(_is_all(f) for f in filters):
            return self.num_pending(start_seq, ">", last_per_subject)
        if len(filters) == 1:
            return self.num_pending(start_seq, filters[0], last_per_subject)
        start = max(start_seq, self._first)
        if not self._nmsgs or start > self._last:
            return 0, self._last
        m = self._matcher(tuple(filters))
        if last_per_subject:
            n, _, _ = self._filtered_subjects(m, start)
        else:
            n, _, _ = self._filtered_multi(m, start)
        return n, self._last

    def _subjects_matching(self, filter: str | None) -> Iterable[tuple[str, list[int]]]:
        if _is_all(filter):
            return self._psim.items()
        assert filter is not None
        if not _has_wildcard(filter):
            ps = self._psim.get(filter)
            return [(filter, ps)] if ps is not None else []
        return self._psim_matching(self._matcher((filter,)))

    def subjects_state(self, filter: str | None = ">") -> dict[str, tuple[int, int, int]]:
        return {s: (ps[0], self._subj_first(s), ps[2]) for s, ps in list(self._subjects_matching(filter))}

    def subjects_totals(self, filter: str | None = ">") -> dict[str, int]:
        return {s: ps[0] for s, ps in self._subjects_matching(filter)}

    def multi_last_seqs(self, filters: list[str], max_seq: int = 0, max_allowed: int = 0) -> list[int]:
        if not self._nmsgs:
            return []
        if not max_seq:
            max_seq = self._last
        if not filters or any(_is_all(f) for f in filters):
            items: Any = list(self._psim.items())
        else:
            items = self._psim_matching(self._matcher(tuple(filters)))
        out = []
        for s, ps in items:
            ls = ps[2]
            if ls > max_seq:
                ls = self._subj_last_walk(s, max_seq)
                if not ls:
                    continue
            out.append(ls)
            if max_allowed > 0 and len(out) > max_allowed:
                raise ErrTooManyResults()
        out.sort()
        return out
