"""MemStore: a stream's messages kept in memory.

``_msgs`` maps seq -> StoredMsg.  Sequences are always inserted in increasing order, so the dict's
iteration order is seq order.

Per subject, ``_subjects[subject]`` is one list ``[count, head, seq, seq, ...]``: the sequences stored on that
subject in increasing order, starting at index ``head``.  Removed sequences are left in the list and
skipped lazily (a sequence is alive iff it is in ``_msgs``; sequences are never reused except after
``truncate``, which cleans the lists); the list is compacted when dead entries outnumber live ones.

Storing, limits and purge are ``_common.StoreCommon``'s, the queries ``_query.StoreQueries``'s; this
module has the index they work on.
"""

from __future__ import annotations

import heapq
import os
import time
from bisect import bisect_left, bisect_right
from typing import Iterator

from rillet import lane

from ._common import _NS, MemConsumerStore, StoreCommon
from ._query import StoreQueries, _has_wildcard, _is_all, _Matcher
from .base import StoreConfig, StoredMsg

__all__ = ["MemConsumerStore", "MemStore"]

_HEAD = 2  # index of the first sequence slot in a per-subject list


class MemStore(StoreCommon, StoreQueries):
    # Accounted size: subject + hdr + data + 16, like nats-server's memory store.
    _size_overhead = 16
    _hdr_overhead = 0

    def __init__(self, cfg: StoreConfig | None = None) -> None:
        super().__init__(cfg or StoreConfig(storage="memory"))
        self._msgs: dict[int, StoredMsg] = {}
        self._subjects: dict[str, list[int]] = {}
        # TTL tracking: seq -> expiry (ns) for msgs with ttl > 0; heap of (expiry, seq);
        # msgs with ttl < 0 never expire (not even by max_age).
        self._ttl_of: dict[int, int] = {}
        self._ttl_heap: list[tuple[int, int]] = []
        self._no_expire: set[int] = set()

    @staticmethod
    def _entry_size(e: StoredMsg) -> int:
        return len(e.subject) + len(e.hdr) + len(e.data) + 16

    # -- storing --------------------------------------------------------------------

    def _write_batch(self, recs: list[tuple[int, str, bytes, bytes, int, int]]) -> list[StoredMsg]:
        return [StoredMsg(subject, seq, ts, hdr, data) for seq, subject, hdr, data, ts, _ in recs]

    def store_msg(
        self, subject: str, hdr: bytes, data: bytes, ts: int | None = None, ttl: float = 0
    ) -> tuple[int, int]:
        """``StoreCommon.store_msg`` with ``_append``'s common case inline (no TTL, no per-subject or size limits
        to enforce, a subject stored before: a memory stream's publish); anything else takes the shared path."""
        ss = self._subjects.get(subject)
        if ss is None or ttl or self._closed or self._pre_check or self._maxp or self._post_limits:
            return StoreCommon.store_msg(self, subject, hdr, data, ts, ttl)
        if ts is None:
            ts = time.time_ns()
        seq = self._last + 1
        msgs = self._msgs
        if not msgs:
            self._first = seq
        msgs[seq] = StoredMsg(subject, seq, ts, hdr, data)
        self._last = seq
        self._last_ts = ts
        if hdr:
            self._bytes += len(subject) + len(hdr) + len(data) + self._size_overhead + self._hdr_overhead
        else:
            self._bytes += len(subject) + len(data) + self._size_overhead
        ss[0] += 1
        ss.append(seq)
        if len(ss) - ss[1] > 2 * ss[0] + 8:
            self._compact_subj(ss)
        return seq, ts

    def _append(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: float, e: StoredMsg | None = None
    ) -> None:
        """Index a message (``e``: its StoredMsg when already made)."""
        ttl_ns = int(ttl * _NS) if ttl else 0
        if e is None:
            e = StoredMsg(subject, seq, ts, hdr, data)
        msgs = self._msgs
        if not msgs:
            self._first = seq
        msgs[seq] = e
        self._last = seq
        self._last_ts = ts
        if hdr:
            self._bytes += len(subject) + len(hdr) + len(data) + self._size_overhead + self._hdr_overhead
        else:
            self._bytes += len(subject) + len(data) + self._size_overhead
        ss = self._subjects.get(subject)
        if ss is None:
            self._subjects[subject] = [1, _HEAD, seq]
        else:
            ss[0] += 1
            ss.append(seq)
            if len(ss) - ss[1] > 2 * ss[0] + 8:
                self._compact_subj(ss)
            if self._maxp and ss[0] > self._maxp:
                self._enforce_per_subject(subject)
        if ttl_ns:
            if ttl_ns > 0:
                exp = ts + ttl_ns
                self._ttl_of[seq] = exp
                heapq.heappush(self._ttl_heap, (exp, seq))
            else:
                self._no_expire.add(seq)
        if self._post_limits:
            self._enforce_limits()

    # -- the index (_query.StoreIndex) ----------------------------------------------

    @property
    def msgs(self) -> int:
        return len(self._msgs)

    def _size_of(self, seq: int) -> int | None:
        e = self._msgs.get(seq)
        return None if e is None else self._entry_size(e)

    def _has_ttls(self) -> bool:
        return bool(self._ttl_heap)

    def _ts_of(self, seq: int) -> int:
        return self._msgs[seq].ts

    def _load(self, seq: int) -> StoredMsg | None:
        return self._msgs[seq] if seq else None

    def _compact_subj(self, ss: list[int]) -> None:
        msgs = self._msgs
        ss[_HEAD:] = [s for s in ss[ss[1] :] if s in msgs]
        ss[1] = _HEAD

    def _subj_first(self, subj: str, ss: list[int]) -> int:
        msgs = self._msgs
        h = ss[1]
        while ss[h] not in msgs:
            h += 1
        ss[1] = h
        return ss[h]

    def _subj_last(self, subj: str, ss: list[int]) -> int:
        msgs = self._msgs
        while ss[-1] not in msgs:
            ss.pop()
        return ss[-1]

    def _subj_first_from(self, subj: str, ss: list[int], start: int) -> int:
        """First live seq >= start on this subject, or 0."""
        msgs = self._msgs
        i = bisect_left(ss, start, ss[1])
        n = len(ss)
        while i < n:
            s = ss[i]
            if s in msgs:
                return s
            i += 1
        return 0

    def _subj_last_upto(self, subj: str, ss: list[int], limit: int) -> int:
        """Last live seq <= limit on this subject, or 0."""
        msgs = self._msgs
        head = ss[1]
        i = bisect_right(ss, limit, head) - 1
        while i >= head:
            s = ss[i]
            if s in msgs:
                return s
            i -= 1
        return 0

    def _subj_count_from(self, subj: str, ss: list[int], start: int) -> int:
        """Number of live seqs >= start on this subject."""
        msgs = self._msgs
        head = ss[1]
        i = bisect_left(ss, start, head)
        if len(ss) - i <= i - head:
            return sum(1 for s in ss[i:] if s in msgs)
        return ss[0] - sum(1 for s in ss[head:i] if s in msgs)

    def _next_alive(self, s: int) -> int:
        """First live seq >= s, or 0."""
        msgs = self._msgs
        last = self._last
        n = 0
        while s <= last:
            if s in msgs:
                return s
            s += 1
            n += 1
            if n == 64 and last - s > 4 * len(msgs):
                return min((k for k in msgs if k >= s), default=0)
        return 0

    def _prev_alive(self, s: int) -> int:
        """Last live seq <= s, or 0."""
        msgs = self._msgs
        first = self._first
        if s > self._last:
            s = self._last
        n = 0
        while s >= first:
            if s in msgs:
                return s
            s -= 1
            n += 1
            if n == 64 and s - first > 4 * len(msgs):
                return max((k for k in msgs if k <= s), default=0)
        return 0

    def _count_range(self, lo: int, hi: int) -> int:
        """Number of live seqs in [lo, hi]."""
        msgs = self._msgs
        if hi - lo + 1 <= 2 * len(msgs):
            return sum(1 for s in range(lo, hi + 1) if s in msgs)
        return sum(1 for s in msgs if lo <= s <= hi)

    def _count_from(self, start: int) -> int:
        msgs = self._msgs
        if self._last - start + 1 <= len(msgs) // 2 + 1:
            return sum(1 for s in range(start, self._last + 1) if s in msgs)
        return len(msgs) - self._count_range(self._first, start - 1)

    def _seq_range(self, first: int, last: int) -> list[int]:
        msgs = self._msgs
        if last - first + 1 <= 2 * len(msgs):
            return [s for s in range(first, last + 1) if s in msgs]
        return [s for s in msgs if first <= s <= last]

    def _next_multi(self, m: _Matcher, start: int) -> int:
        msgs = self._msgs
        last = self._last
        budget = 2 * len(self._subjects) + 32
        s = start
        while s <= last and budget > 0:
            e = msgs.get(s)
            if e is not None and m(e.subject):
                return s
            s += 1
            budget -= 1
        if s > last:
            return 0
        best = 0
        for subj, ss in self._subjects.items():
            if m(subj):
                if best and ss[ss[1]] >= best:
                    continue
                f = self._subj_first_from(subj, ss, s)
                if f and (not best or f < best):
                    best = f
        return best

    def _filtered_match(self, m: _Matcher, start: int) -> tuple[int, int, int]:
        msgs = self._msgs
        n = f = lst = 0
        if self._last - start + 1 < len(self._subjects):
            for s in range(start, self._last + 1):
                e = msgs.get(s)
                if e is not None and m(e.subject):
                    n += 1
                    if not f:
                        f = s
                    lst = s
            return n, f, lst
        for subj, ss in self._subjects.items():
            if not m(subj):
                continue
            last = self._subj_last(subj, ss)
            if last < start:
                continue
            first = self._subj_first(subj, ss)
            if start <= first:
                n += ss[0]
            else:
                n += self._subj_count_from(subj, ss, start)
                first = self._subj_first_from(subj, ss, start)
            if not f or first < f:
                f = first
            if last > lst:
                lst = last
        return n, f, lst

    def _matching_seqs(self, filter: str, first: int, last: int) -> list[int]:
        """Live seqs in [first, last] matching filter, ascending."""
        if _is_all(filter):
            return self._seq_range(first, last)
        msgs = self._msgs
        if not _has_wildcard(filter):
            ss = self._subjects.get(filter)
            if ss is None:
                return []
            i = bisect_left(ss, first, ss[1])
            j = bisect_right(ss, last, i)
            return [s for s in ss[i:j] if s in msgs]
        m = self._matcher((filter,))
        out: list[int] = []
        for subj, ss in self._subjects.items():
            if m(subj):
                i = bisect_left(ss, first, ss[1])
                j = bisect_right(ss, last, i)
                out.extend(s for s in ss[i:j] if s in msgs)
        out.sort()
        return out

    def _seq_from_time(self, ts_ns: int, first: int, last: int) -> int:
        msgs = self._msgs
        lo, hi = first, last  # msgs[lo].ts < ts_ns <= msgs[hi].ts
        while hi - lo > 1:
            mp = (lo + hi) // 2
            mid = self._next_alive(mp)
            if mid >= hi:
                mid = self._prev_alive(mp - 1)
                if mid <= lo:
                    break
            if msgs[mid].ts >= ts_ns:
                hi = mid
            else:
                lo = mid
        return hi

    def _lost_list(self) -> list[int]:
        return []

    def _deleted_list(self, first: int, last: int) -> list[int]:
        msgs = self._msgs
        if last - first + 1 <= 3 * len(msgs):
            return [s for s in range(first, last + 1) if s not in msgs]
        out: list[int] = []
        prev = first - 1
        for s in sorted(msgs):
            if s < first:
                continue
            if s > last:
                break
            if s > prev + 1:
                out.extend(range(prev + 1, s))
            prev = s
        out.extend(range(prev + 1, last + 1))
        return out

    # -- removal --------------------------------------------------------------------

    def _remove(self, seq: int, erase: bool = False) -> bool:
        e = self._msgs.pop(seq, None)
        if e is None:
            return False
        size = self._entry_size(e)
        self._bytes -= size
        subj = e.subject
        ss = self._subjects[subj]
        if ss[0] == 1:
            del self._subjects[subj]
        else:
            ss[0] -= 1
            if len(ss) - ss[1] > 2 * ss[0] + 8:
                self._compact_subj(ss)
        if seq == self._first:
            self._advance_first()
        if self._ttl_of:
            self._ttl_of.pop(seq, None)
        if self._no_expire:
            self._no_expire.discard(seq)
        if erase:
            # Anyone still holding the object sees random bytes, not the payload.
            if e.hdr:
                e.hdr = os.urandom(len(e.hdr))
            if e.data:
                e.data = os.urandom(len(e.data))
        cb = self._remove_cb
        if cb is not None:
            cb(seq, subj, size)
        return True

    def _advance_first(self) -> None:
        msgs = self._msgs
        if not msgs:
            self._first = self._last + 1
            return
        s = self._first + 1
        n = 0
        while s not in msgs:
            s += 1
            n += 1
            if n == 64 and self._last - s > 4 * len(msgs):
                s = min(msgs)
                break
        self._first = s

    def _unindex(self, removed: list[StoredMsg]) -> None:
        """The bulk removals' accounting: ``removed`` are out of ``_msgs`` already."""
        fss = self._subjects
        for e in removed:
            s = e.seq
            self._bytes -= self._entry_size(e)
            ss = fss[e.subject]
            if ss[0] == 1:
                del fss[e.subject]
            else:
                ss[0] -= 1
            if self._ttl_of:
                self._ttl_of.pop(s, None)
            if self._no_expire:
                self._no_expire.discard(s)

    def _report(self, removed: list[StoredMsg]) -> None:
        cb = self._remove_cb
        if cb is not None:
            for e in removed:
                cb(e.seq, e.subject, self._entry_size(e))

    def _purge_all(self, new_first: int) -> int:
        removed = list(self._msgs.values())
        self._msgs = {}
        self._subjects = {}
        self._bytes = 0
        self._ttl_of.clear()
        self._ttl_heap.clear()
        self._no_expire.clear()
        if new_first > self._last + 1:
            self._last = new_first - 1
        self._first = new_first
        self._report(removed)
        return len(removed)

    def _compact(self, seq: int) -> int:
        msgs = self._msgs
        removed = [msgs.pop(s) for s in self._seq_range(self._first, seq - 1)]
        self._unindex(removed)
        for ss in self._subjects.values():
            if len(ss) - ss[1] > 2 * ss[0] + 8:
                self._compact_subj(ss)
        self._first = seq if seq in msgs else (self._next_alive(seq) or self._last + 1)
        self._report(removed)
        return len(removed)

    def truncate(self, seq: int) -> None:
        """Remove every message above ``seq``; last_seq becomes ``seq``."""
        self._check_open()
        msgs = self._msgs
        cut = []
        if seq < self._last:
            for s in reversed(msgs):
                if s <= seq:
                    break
                cut.append(s)
        removed = [msgs.pop(s) for s in cut]
        self._unindex(removed)
        for ss in self._subjects.values():
            while ss[-1] > seq:
                ss.pop()
        e = msgs.get(seq)
        if e is not None:
            self._last_ts = e.ts
        if seq < self._last:
            self._last = seq
        if not msgs:
            self._first = self._last + 1
        removed.reverse()
        self._report(removed)

    # -- expiry ---------------------------------------------------------------------

    def _expire(self, now_ns: int) -> tuple[int, list[str]]:
        removed = 0
        markers: list[str] = []
        if self._max_age_ns and self._msgs:
            cutoff = now_ns - self._max_age_ns
            msgs = self._msgs
            s = self._first
            last = self._last
            no_exp = self._no_expire
            while s <= last:
                e = msgs.get(s)
                if e is None:
                    nxt = self._next_alive(s)
                    if not nxt:
                        break
                    s = nxt
                    continue
                if e.ts > cutoff:
                    break
                if s not in no_exp:
                    self._expire_removing(s, e.subject, markers)
                    removed += 1
                s += 1
        if self.cfg.allow_msg_ttl and self._ttl_heap:
            heap = self._ttl_heap
            ttl_of = self._ttl_of
            while heap and heap[0][0] <= now_ns:
                exp, s = heapq.heappop(heap)
                if ttl_of.get(s) == exp:
                    e = self._msgs.get(s)
                    if e is None:
                        ttl_of.pop(s, None)
                        continue
                    self._expire_removing(s, e.subject, markers)
                    removed += 1
        return removed, markers

    def next_expiry(self) -> int | None:
        """Timestamp (ns) at which the next message expires, or None."""
        best: int | None = None
        if self._max_age_ns and self._msgs:
            s = self._first
            msgs = self._msgs
            no_exp = self._no_expire
            while s:
                e = msgs.get(s)
                if e is not None and s not in no_exp:
                    best = e.ts + self._max_age_ns
                    break
                s = self._next_alive(s + 1)
        if self.cfg.allow_msg_ttl:
            heap = self._ttl_heap
            while heap and self._ttl_of.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)
            if heap and (best is None or heap[0][0] < best):
                best = heap[0][0]
        return best

    def ttl_of(self, seq: int) -> float:
        """The TTL (seconds) the message was stored with (0 = none, < 0 = never expires)."""
        if seq in self._no_expire:
            return -1
        exp = self._ttl_of.get(seq)
        e = self._msgs.get(seq)
        if exp is None or e is None:
            return 0
        return (exp - e.ts) / 1e9

    # -- loading --------------------------------------------------------------------

    def load_msg(self, seq: int) -> StoredMsg | None:
        """The message at ``seq``, or None if never stored, deleted or out of range."""
        return self._msgs.get(seq)

    def load_run(self, seq: int, n: int, max_bytes: int, subject: str | None = None) -> list[StoredMsg]:
        """The messages at ``seq``, ``seq + 1``, ... while each is there (and on ``subject`` when given): at most
        ``n``, and no more once their sizes pass ``max_bytes`` (the first one always); the file store's
        ``load_run``."""
        out: list[StoredMsg] = []
        msgs = self._msgs
        size = 0
        for s in range(seq, seq + n):
            m = msgs.get(s)
            if m is None or size > max_bytes or (subject is not None and m.subject != subject):
                break
            out.append(m)
            size += len(m.hdr) + len(m.data)
        return out

    def subject_for_seq(self, seq: int) -> str | None:
        e = self._msgs.get(seq)
        return None if e is None else e.subject

    def read_begin(self) -> None:
        """A run of reads in sequence order starts (a consumer's delivery pass): nothing to read ahead."""

    def read_done(self) -> None:
        """The run of reads ended."""

    # -- consumers, snapshot, lifecycle ---------------------------------------------

    def _new_consumer_store(self, name: str) -> MemConsumerStore:
        return MemConsumerStore(name)

    def snapshot_stream(self, include_consumers: bool = True) -> Iterator[bytes]:
        """A snapshot in the file store's format (restore() makes a file store directory;
        ``restore_into`` loads it into any store)."""
        from ._snapshot import snapshot_from_store

        return snapshot_from_store(self, include_consumers)

    def sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        self._closed = True

    def delete(self) -> None:
        self._msgs = {}
        self._subjects = {}
        self._bytes = 0
        self._closed = True


# MemStore.store_msg as written above (``reference_store_msg``, the pure-Python lane's) or, in the compiled lane, its
# twin rillet._speedups._cjs.memstore_store_msg (the inline case in C, the rest handed to the reference)
reference_store_msg = MemStore.store_msg
lane.use_compiled_methods(MemStore, "rillet._speedups._cjs", store_msg="memstore_store_msg")
