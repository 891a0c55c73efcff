"""The in-memory index shared by MemStore and FileStore.

``_msgs`` maps seq -> entry (an object with ``subject``, ``seq`` and ``ts``; the
MemStore keeps the StoredMsg itself, the FileStore a record locator).  Sequences are
always inserted in increasing order, so the dict's iteration order is seq order.

Per subject, ``_fss[subject]`` is one list ``[count, head, seq, seq, ...]``: the
sequences stored on that subject in increasing order, starting at index ``head``.
Removed sequences are left in the list and skipped lazily (a sequence is alive iff it
is in ``_msgs``; sequences are never reused except after ``truncate``, which cleans
the lists); the list is compacted when dead entries outnumber live ones.

Subclasses implement ``_write(seq, subject, hdr, data, ts, ttl_ns) -> entry``,
``_entry_size(entry)``, ``_materialize(entry) -> StoredMsg`` and the ``_on_*`` hooks.
"""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left, bisect_right
from typing import Any, Callable, Iterable

from rillet.gocompat.gotime import format_seconds
from ...subjects.validate import tokens_match_literal
from .base import (
    ConsumerState,
    ErrMaxBytes,
    ErrMaxMsgs,
    ErrMaxMsgSize,
    ErrMaxMsgsPerSubject,
    ErrSequenceMismatch,
    ErrStoreClosed,
    ErrTooManyResults,
    RemoveCallback,
    StoreConfig,
    StoredMsg,
    StreamState,
    decode_consumer_state,
    encode_consumer_state,
)

_NS = 1_000_000_000
_HEAD = 2  # index of the first sequence slot in a per-subject list
_MATCH_CACHE_MAX = 65536


def is_delete_marker(hdr: bytes | None) -> bool:
    """A subject delete marker: a ``Nats-Marker-Reason`` header, or a KV purge (``KV-Operation: PURGE``), as
    nats-server counts them. Expiring one leaves no new marker behind."""
    if not hdr:
        return False
    for line in hdr.split(b"\r\n")[1:]:
        k, sep, v = line.partition(b":")
        if not sep:
            continue
        if k == b"Nats-Marker-Reason" and v.strip():
            return True
        if k == b"KV-Operation" and v.strip() == b"PURGE":
            return True
    return False


def _is_all(filter: str | None) -> bool:
    return not filter or filter == ">"


def _has_wildcard(filter: str) -> bool:
    if "*" not in filter and ">" not in filter:
        return False
    for t in filter.split("."):
        if t == "*" or t == ">":
            return True
    return False


class _Matcher:
    """Memoized "does this literal subject match the filter(s)"."""

    __slots__ = ("pats", "memo", "lit")

    def __init__(self, filters: Iterable[str]) -> None:
        self.pats: list[list[str]] = []
        self.lit: set[str] = set()
        for f in filters:
            if _has_wildcard(f):
                self.pats.append(f.split("."))
            else:
                self.lit.add(f)
        self.memo: dict[str, bool] = {}

    def __call__(self, subject: str) -> bool:
        r = self.memo.get(subject)
        if r is None:
            if subject in self.lit:
                r = True
            else:
                r = False
                if self.pats:
                    toks = subject.split(".")
                    for p in self.pats:
                        if tokens_match_literal(toks, p):
                            r = True
                            break
            if len(self.memo) >= _MATCH_CACHE_MAX:
                self.memo.clear()
            self.memo[subject] = r
        return r


class MemConsumerStore:
    """Consumer state kept in memory (also the base of the file consumer store)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._enc: bytes | None = None
        self._closed = False
        self.deleted = False

    def update(self, state: Any) -> None:
        """Record the consumer's state (a ConsumerState or an equivalent dict)."""
        if self._closed:
            raise ErrStoreClosed()
        self._enc = encode_consumer_state(state)

    def state(self) -> ConsumerState | None:
        if self._enc is None:
            return None
        return decode_consumer_state(self._enc)

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        self._closed = True

    def delete(self) -> None:
        self._enc = None
        self._closed = True
        self.deleted = True


class IndexedStore:
    """Everything both stores share: sequences, limits, per-subject index, queries.

    Not thread-safe: call it from one thread (the event loop).  The one exception is
    ``FileStore.sync()``, which may run in a worker thread (group commit)."""

    _size_overhead = 16  # accounted bytes: subject + hdr + data + overhead (+ hdr overhead)
    _hdr_overhead = 0

    def __init__(self, cfg: StoreConfig) -> None:
        self.cfg = cfg
        self._msgs: dict[int, Any] = {}
        self._fss: dict[str, list[int]] = {}
        self._first = max(cfg.first_seq, 1)
        self._last = self._first - 1
        self._last_ts = 0
        self._bytes = 0
        self._closed = False
        self._remove_cb: RemoveCallback | None = None
        self._marker_cb: Callable[[str, bytes], None] | None = None
        # TTL tracking: seq -> expiry (ns) for msgs with ttl > 0; heap of (expiry, seq);
        # msgs with ttl < 0 never expire (not even by max_age).
        self._ttl_of: dict[int, int] = {}
        self._ttl_heap: list[tuple[int, int]] = []
        self._no_expire: set[int] = set()
        self._matchers: dict[Any, _Matcher] = {}
        self._consumers: dict[str, MemConsumerStore] = {}
        self._limit_removal = False  # True while removing because of limits or expiry
        self.now: Callable[[], int] = time.time_ns
        self._apply_cfg(cfg)

    # -- config ---------------------------------------------------------------------

    def _apply_cfg(self, cfg: StoreConfig) -> None:
        self.cfg = cfg
        self._max_msgs = cfg.max_msgs if cfg.max_msgs and cfg.max_msgs > 0 else 0
        self._max_bytes = cfg.max_bytes if cfg.max_bytes and cfg.max_bytes > 0 else 0
        mp = cfg.max_msgs_per_subject
        self._maxp = mp if mp and mp > 0 else 0
        self._max_msg_size = cfg.max_msg_size if cfg.max_msg_size and cfg.max_msg_size > 0 else 0
        self._discard_new = cfg.discard == "new"
        self._max_age_ns = int(cfg.max_age * _NS) if cfg.max_age and cfg.max_age > 0 else 0
        self._sdm_ttl = cfg.subject_delete_marker_ttl if cfg.subject_delete_marker_ttl else 0
        # Anything to check before storing?
        self._pre_check = bool(self._discard_new or self._max_msg_size)
        # Anything to enforce after storing (discard old)?
        self._post_limits = bool(not self._discard_new and (self._max_msgs or self._max_bytes))

    def update_config(self, cfg: StoreConfig, now_ns: int | None = None) -> None:
        """Apply new limits at once (may remove messages; ``now_ns``: the time for max_age and TTLs)."""
        self._check_open()
        old_maxp = self._maxp
        self._apply_cfg(cfg)
        if self._maxp and (not old_maxp or self._maxp < old_maxp):
            for subj in [s for s, ss in self._fss.items() if ss[0] > self._maxp]:
                self._enforce_per_subject(subj)
        self._enforce_limits()
        if self._max_age_ns or (cfg.allow_msg_ttl and self._ttl_heap):
            self.expire_msgs(now_ns or self.now())
        self._on_config()

    # -- callbacks ------------------------------------------------------------------

    def register_remove_callback(self, cb: RemoveCallback | None) -> None:
        """``cb(seq, subject, size)`` is called after every removal (limits, expiry, purge,
        compact, truncate, remove_msg)."""
        self._remove_cb = cb

    def register_marker_callback(self, cb: Callable[[str, bytes], None] | None) -> None:
        """With ``subject_delete_marker_ttl``: ``cb(subject, hdr)`` is asked to publish the
        delete marker (through the stream) instead of the store storing it itself."""
        self._marker_cb = cb

    # -- hooks for subclasses -------------------------------------------------------

    def _write(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl_ns: int) -> Any:
        raise NotImplementedError

    def _entry_size(self, e: Any) -> int:
        raise NotImplementedError

    def _materialize(self, e: Any) -> StoredMsg:
        raise NotImplementedError

    def _on_removed(self, e: Any, erase: bool) -> None:
        """Called for each single removal (not for the bulk paths, see below)."""

    def _on_bulk_removed(self, kind: str, seq: int, entries: list[Any]) -> None:
        """After purge-all ("purge", seq = new first), compact ("compact", seq = new first)
        or truncate ("truncate", seq = new last); ``entries`` are the removed ones."""

    def _on_skip(self) -> None:
        """After the last sequence moved without a message (skip)."""

    def _on_config(self) -> None:
        pass

    def _check_open(self) -> None:
        if self._closed:
            raise ErrStoreClosed()

    # -- storing --------------------------------------------------------------------

    def _msg_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        if hdr:
            return len(subject) + len(hdr) + len(data) + self._size_overhead + self._hdr_overhead
        return len(subject) + len(data) + self._size_overhead

    def _discard_new_check(self, subject: str, hdr: bytes, data: bytes, size: int) -> None:
        if self._max_msg_size and len(hdr) + len(data) > self._max_msg_size:
            raise ErrMaxMsgSize()
        if not self._discard_new:
            return
        ss = self._fss.get(subject)
        asl = bool(self._maxp and ss is not None and ss[0] >= self._maxp)
        if asl and self.cfg.discard_new_per_subject and not (hdr and b"Nats-Rollup:" in hdr):
            raise ErrMaxMsgsPerSubject()
        if self._max_msgs and len(self._msgs) >= self._max_msgs and not asl:
            raise ErrMaxMsgs()
        if self._max_bytes and self._bytes + size > self._max_bytes:
            if not asl:
                raise ErrMaxBytes()
            # At the subject limit the subject's oldest goes: enough room then?
            first = self._msgs.get(self._subj_first(ss))  # type: ignore[arg-type]
            if first is None or self._entry_size(first) < size:
                raise ErrMaxBytes()

    def store_msg(
        self, subject: str, hdr: bytes, data: bytes, ts: int | None = None, ttl: float = 0
    ) -> tuple[int, int]:
        """Store at the next sequence; returns (seq, ts).  Enforces the limits.  (The file store's compiled
        twin, rillet/_speedups/_cstore.pyx, has a copy: a change here goes there too.)"""
        if self._closed:
            raise ErrStoreClosed()
        if self._pre_check:
            self._discard_new_check(subject, hdr, data, self._msg_size(subject, hdr, data))
        if ts is None:
            ts = time.time_ns()
        seq = self._last + 1
        self._append(seq, subject, hdr, data, ts, ttl)
        return seq, ts

    def store_raw(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: float = 0
    ) -> None:
        """Store at a given sequence >= the next one (mirrors, restore); sequences skipped
        in between count as deleted.  Limits apply (discard old), discard new does not."""
        self._check_open()
        if seq <= self._last:
            raise ErrSequenceMismatch()
        if self._max_msg_size and len(hdr) + len(data) > self._max_msg_size:
            raise ErrMaxMsgSize()
        self._append(seq, subject, hdr, data, ts, ttl)

    def store_batch(self, batch: list[tuple[str, bytes, bytes, int, float]]) -> list[tuple[int, int]]:
        """Store ``(subject, hdr, data, ts, ttl)`` messages at the next sequences, all or nothing: checks
        for the whole batch come first, then one write (``_write_batch``), then the index.  Returns
        [(seq, ts)].  A failure leaves nothing stored."""
        self._check_open()
        if not batch:
            return []
        if self._pre_check:
            n = self.msgs
            b = self._bytes
            for subject, hdr, data, _, _ in batch:
                size = self._msg_size(subject, hdr, data)
                if self._max_msg_size and len(hdr) + len(data) > self._max_msg_size:
                    raise ErrMaxMsgSize()
                n += 1
                b += size
                if self._discard_new:
                    if self._max_msgs and n > self._max_msgs:
                        raise ErrMaxMsgs()
                    if self._max_bytes and b > self._max_bytes:
                        raise ErrMaxBytes()
        first = self._last + 1
        recs = []
        out = []
        seq = first
        for subject, hdr, data, ts, ttl in batch:
            if not ts:
                ts = time.time_ns()
            recs.append((seq, subject, hdr, data, ts, int(ttl * _NS) if ttl else 0))
            out.append((seq, ts))
            seq += 1
        entries = self._write_batch(recs)
        for (seq, subject, hdr, data, ts, _), (_, _, _, _, ttl), e in zip(recs, batch, entries):
            self._append(seq, subject, hdr, data, ts, ttl, e)
        return out

    def _write_batch(self, recs: list[tuple[int, str, bytes, bytes, int, int]]) -> list[Any]:
        """Write several messages all or nothing; the file store overrides this with one framed write."""
        return [self._write(*r) for r in recs]

    def _append(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: float, e: Any = None
    ) -> None:
        """Write (unless ``e``, the entry of an already written record, is given) and index a message."""
        ttl_ns = int(ttl * _NS) if ttl else 0
        if e is None:
            e = self._write(seq, subject, hdr, data, ts, ttl_ns)
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
        ss = self._fss.get(subject)
        if ss is None:
            self._fss[subject] = [1, _HEAD, seq]
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

    def skip_msg(self, seq: int = 0) -> int:
        """Use the next sequence without storing anything; returns it."""
        self._check_open()
        if seq and seq != self._last + 1:
            raise ErrSequenceMismatch()
        seq = self._last + 1
        self._skip_to(seq)
        return seq

    def skip_msgs(self, seq: int, n: int) -> None:
        """Skip ``n`` sequences starting at ``seq`` (which must be the next one, or 0)."""
        self._check_open()
        if seq and seq != self._last + 1:
            raise ErrSequenceMismatch()
        if n <= 0:
            return
        self._skip_to(self._last + n)

    def _skip_to(self, last: int) -> None:
        self._last = last
        if not self._last_ts:
            self._last_ts = time.time_ns()
        if not self._msgs:
            self._first = last + 1
        self._on_skip()

    # -- per-subject helpers --------------------------------------------------------

    def _compact_subj(self, ss: list[int]) -> None:
        msgs = self._msgs
        ss[_HEAD:] = [s for s in ss[ss[1] :] if s in msgs]
        ss[1] = _HEAD

    def _subj_first(self, ss: list[int]) -> int:
        msgs = self._msgs
        h = ss[1]
        while ss[h] not in msgs:
            h += 1
        ss[1] = h
        return ss[h]

    def _subj_last(self, ss: list[int]) -> int:
        msgs = self._msgs
        while ss[-1] not in msgs:
            ss.pop()
        return ss[-1]

    def _subj_first_from(self, ss: list[int], start: int) -> int:
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

    def _subj_last_upto(self, ss: list[int], limit: int) -> int:
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

    def _subj_count_from(self, ss: list[int], start: int) -> int:
        """Number of live seqs >= start on this subject."""
        msgs = self._msgs
        head = ss[1]
        i = bisect_left(ss, start, head)
        if len(ss) - i <= i - head:
            return sum(1 for s in ss[i:] if s in msgs)
        return ss[0] - sum(1 for s in ss[head:i] if s in msgs)

    # -- removal --------------------------------------------------------------------

    def _remove(self, seq: int, erase: bool = False) -> bool:
        e = self._msgs.pop(seq, None)
        if e is None:
            return False
        size = self._entry_size(e)
        self._bytes -= size
        subj = e.subject
        ss = self._fss[subj]
        if ss[0] == 1:
            del self._fss[subj]
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
        self._on_removed(e, erase)
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

    def _enforce_per_subject(self, subject: str) -> None:
        ss = self._fss.get(subject)
        maxp = self._maxp
        self._limit_removal = True
        try:
            while ss is not None and ss[0] > maxp:
                self._remove(self._subj_first(ss))
        finally:
            self._limit_removal = False

    def _enforce_limits(self) -> None:
        if self._discard_new:
            return
        self._limit_removal = True
        try:
            mm = self._max_msgs
            if mm:
                while len(self._msgs) > mm:
                    self._remove(self._first)
            mb = self._max_bytes
            if mb:
                while self._bytes > mb and self._msgs:
                    self._remove(self._first)
        finally:
            self._limit_removal = False

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        """Remove one message; ``erase`` also overwrites its payload (on disk for FileStore)."""
        self._check_open()
        return self._remove(seq, erase)

    def purge(self, subject: str | None = None, seq: int = 0, keep: int = 0) -> int:
        """nats-server purge: everything; or by subject filter; or below ``seq`` (not
        including it); keeping the last ``keep`` (of the filter as a whole, like nats-server).
        Returns the number purged.  After a full purge first_seq = last_seq + 1."""
        self._check_open()
        if seq == 1:
            return 0
        if _is_all(subject):
            if not keep and not seq:
                return self._purge_all(self._last + 1)
            if seq > 1:
                return self.compact(seq)
            subject = ">"
        assert subject is not None
        msgs_n, first, last = self.filtered_state(subject, 1)
        if not msgs_n:
            return 0
        maxp = 0
        if keep > 0:
            if keep >= msgs_n:
                return 0
            maxp = msgs_n - keep
        if seq >= 1:
            last = min(last, seq - 1)
        todo = self._matching_seqs(subject, first, last)
        purged = 0
        for s in todo:
            if self._remove(s):
                purged += 1
                if maxp and purged >= maxp:
                    break
        return purged

    def _matching_seqs(self, filter: str, first: int, last: int) -> list[int]:
        """Live seqs in [first, last] matching filter, ascending."""
        if _is_all(filter):
            return [s for s in self._seq_range(first, last)]
        if not _has_wildcard(filter):
            ss = self._fss.get(filter)
            if ss is None:
                return []
            msgs = self._msgs
            i = bisect_left(ss, first, ss[1])
            j = bisect_right(ss, last, i)
            return [s for s in ss[i:j] if s in msgs]
        m = self._matcher((filter,))
        out: list[int] = []
        for subj, ss in self._fss.items():
            if m(subj):
                i = bisect_left(ss, first, ss[1])
                j = bisect_right(ss, last, i)
                out.extend(s for s in ss[i:j] if s in self._msgs)
        out.sort()
        return out

    def _count_range(self, lo: int, hi: int) -> int:
        """Number of live seqs in [lo, hi]."""
        msgs = self._msgs
        if hi - lo + 1 <= 2 * len(msgs):
            return sum(1 for s in range(lo, hi + 1) if s in msgs)
        return sum(1 for s in msgs if lo <= s <= hi)

    def _seq_range(self, first: int, last: int) -> list[int]:
        msgs = self._msgs
        if last - first + 1 <= 2 * len(msgs):
            return [s for s in range(first, last + 1) if s in msgs]
        return [s for s in msgs if first <= s <= last]

    def _purge_all(self, new_first: int) -> int:
        removed = list(self._msgs.values())
        cb = self._remove_cb
        self._msgs = {}
        self._fss = {}
        self._bytes = 0
        self._ttl_of.clear()
        self._ttl_heap.clear()
        self._no_expire.clear()
        if new_first > self._last + 1:
            self._last = new_first - 1
        self._first = new_first
        self._on_bulk_removed("purge", new_first, removed)
        if cb is not None:
            for e in removed:
                cb(e.seq, e.subject, self._entry_size(e))
        return len(removed)

    def compact(self, seq: int) -> int:
        """Remove every message below ``seq``; returns how many."""
        self._check_open()
        if seq == 0:
            return self._purge_all(self._last + 1)
        if self._first >= seq:
            return 0
        if seq > self._last:
            return self._purge_all(seq)
        todo = self._seq_range(self._first, seq - 1)
        removed = []
        msgs = self._msgs
        for s in todo:
            e = msgs.pop(s)
            removed.append(e)
            self._bytes -= self._entry_size(e)
            ss = self._fss[e.subject]
            if ss[0] == 1:
                del self._fss[e.subject]
            else:
                ss[0] -= 1
            if self._ttl_of:
                self._ttl_of.pop(s, None)
            if self._no_expire:
                self._no_expire.discard(s)
        for ss in self._fss.values():
            if len(ss) - ss[1] > 2 * ss[0] + 8:
                self._compact_subj(ss)
        self._first = seq if seq in msgs else (self._next_alive(seq) or self._last + 1)
        self._on_bulk_removed("compact", seq, removed)
        cb = self._remove_cb
        if cb is not None:
            for e in removed:
                cb(e.seq, e.subject, self._entry_size(e))
        return len(removed)

    def truncate(self, seq: int) -> None:
        """Remove every message above ``seq``; last_seq becomes ``seq``."""
        self._check_open()
        msgs = self._msgs
        removed = []
        if seq < self._last:
            for s in reversed(msgs):
                if s <= seq:
                    break
                removed.append(s)
        entries = []
        for s in removed:
            e = msgs.pop(s)
            entries.append(e)
            self._bytes -= self._entry_size(e)
            ss = self._fss[e.subject]
            if ss[0] == 1:
                del self._fss[e.subject]
            else:
                ss[0] -= 1
            if self._ttl_of:
                self._ttl_of.pop(s, None)
            if self._no_expire:
                self._no_expire.discard(s)
        for ss in self._fss.values():
            while ss[-1] > seq:
                ss.pop()
        e = msgs.get(seq)
        if e is not None:
            self._last_ts = e.ts
        if seq < self._last:
            self._last = seq
        if not msgs:
            self._first = self._last + 1
        self._on_bulk_removed("truncate", seq, entries)
        cb = self._remove_cb
        if cb is not None:
            for e in reversed(entries):
                cb(e.seq, e.subject, self._entry_size(e))

    # -- expiry ---------------------------------------------------------------------

    def expire_msgs(self, now_ns: int | None = None) -> int:
        """Remove messages older than max_age and those whose TTL ran out.  Returns the
        number removed.  With subject_delete_marker_ttl, removing the last message of a
        subject leaves a delete marker (stored, or handed to the marker callback)."""
        self._check_open()
        if now_ns is None:
            now_ns = self.now()
        self._limit_removal = True
        try:
            removed, markers = self._expire(now_ns)
        finally:
            self._limit_removal = False
        for subj in markers:
            hdr = (
                "NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\n"
                f"Nats-TTL: {format_seconds(self._sdm_ttl)}\r\nNats-Rollup: sub\r\n\r\n"
            ).encode()
            if self._marker_cb is not None:
                self._marker_cb(subj, hdr)
            else:
                self.store_msg(subj, hdr, b"", ttl=self._sdm_ttl)
        return removed

    def _expire(self, now_ns: int) -> tuple[int, list[str]]:
        removed = 0
        markers: list[str] = []
        sdm = self._sdm_ttl > 0
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
                    if sdm:
                        self._expire_one(e, markers)
                    else:
                        self._remove(s)
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
                    if sdm:
                        self._expire_one(e, markers)
                    else:
                        self._remove(s)
                    removed += 1
        return removed, markers

    def _expire_one(self, e: Any, markers: list[str]) -> None:
        subj = e.subject
        ss = self._fss.get(subj)
        last_of_subject = ss is not None and ss[0] == 1
        if last_of_subject:
            sm = self._materialize(e)
            if is_delete_marker(sm.hdr):
                last_of_subject = False
        self._remove(e.seq)
        if last_of_subject:
            markers.append(subj)

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

    # -- loading --------------------------------------------------------------------

    def load_msg(self, seq: int) -> StoredMsg | None:
        """The message at ``seq``, or None if never stored, deleted or out of range."""
        e = self._msgs.get(seq)
        if e is None:
            return None
        return self._materialize(e)

    def subject_for_seq(self, seq: int) -> str | None:
        e = self._msgs.get(seq)
        return None if e is None else e.subject

    def _matcher(self, filters: tuple[str, ...]) -> _Matcher:
        m = self._matchers.get(filters)
        if m is None:
            if len(self._matchers) > 256:
                self._matchers.clear()
            m = self._matchers[filters] = _Matcher(filters)
        return m

    def load_next_msg(
        self, filter: str, start_seq: int, wildcard: bool | None = None
    ) -> StoredMsg | None:
        """First message with seq >= start_seq whose subject matches ``filter``."""
        s = self._next_seq(filter, start_seq, wildcard)
        return self._materialize(self._msgs[s]) if s else None

    def _next_seq(self, filter: str, start: int, wildcard: bool | None = None) -> int:
        msgs = self._msgs
        if not msgs:
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
            ss = self._fss.get(filter)
            if ss is None:
                return 0
            return self._subj_first_from(ss, start)
        return self._next_multi(self._matcher((filter,)), start)

    def _next_multi(self, m: _Matcher, start: int) -> int:
        msgs = self._msgs
        last = self._last
        budget = 2 * len(self._fss) + 32
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
        for subj, ss in self._fss.items():
            if m(subj):
                if best and ss[ss[1]] >= best:
                    continue
                f = self._subj_first_from(ss, s)
                if f and (not best or f < best):
                    best = f
        return best

    def load_next_msg_multi(self, filters: list[str], start_seq: int) -> StoredMsg | None:
        """First message with seq >= start_seq matching any of ``filters``."""
        if not self._msgs:
            return None
        if not filters or any(_is_all(f) for f in filters):
            return self.load_next_msg(">", start_seq)
        start = max(start_seq, self._first)
        if start > self._last:
            return None
        s = self._next_multi(self._matcher(tuple(filters)), start)
        return self._materialize(self._msgs[s]) if s else None

    def load_last_msg(self, filter: str) -> StoredMsg | None:
        """Last message whose subject matches ``filter`` (wildcards allowed)."""
        s = self._last_seq_matching(filter)
        return self._materialize(self._msgs[s]) if s else None

    def _last_seq_matching(self, filter: str) -> int:
        if not self._msgs:
            return 0
        if _is_all(filter):
            return self._prev_alive(self._last)
        if not _has_wildcard(filter):
            ss = self._fss.get(filter)
            return self._subj_last(ss) if ss is not None else 0
        m = self._matcher((filter,))
        best = 0
        for subj, ss in self._fss.items():
            if m(subj):
                ls = self._subj_last(ss)
                if ls > best:
                    best = ls
        return best

    def last_seq_for_subject(self, subject: str) -> int:
        """Last sequence stored on this literal subject, 0 if none."""
        ss = self._fss.get(subject)
        return self._subj_last(ss) if ss is not None else 0

    def load_prev_msg_for_subject(self, subject: str, start_seq: int) -> StoredMsg | None:
        """Last message on ``subject`` (a filter) with seq <= start_seq."""
        return self.load_prev_msg(start_seq, subject)

    def load_prev_msg(self, start_seq: int, filter: str = "") -> StoredMsg | None:
        """Last message with seq <= start_seq (matching ``filter`` if given)."""
        if not self._msgs or start_seq < self._first:
            return None
        if _is_all(filter):
            s = self._prev_alive(start_seq)
        elif not _has_wildcard(filter):
            ss = self._fss.get(filter)
            s = self._subj_last_upto(ss, start_seq) if ss is not None else 0
        else:
            m = self._matcher((filter,))
            s = 0
            for subj, ss in self._fss.items():
                if m(subj):
                    x = self._subj_last_upto(ss, start_seq)
                    if x > s:
                        s = x
        return self._materialize(self._msgs[s]) if s else None

    def get_seq_from_time(self, ts_ns: int) -> int:
        """First sequence whose timestamp is >= ts_ns (last_seq + 1 if none)."""
        msgs = self._msgs
        if not msgs:
            return self._last + 1
        first = self._first
        if msgs[first].ts >= ts_ns:
            return first
        last = self._prev_alive(self._last)
        if msgs[last].ts < ts_ns:
            return self._last + 1
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

    # -- state and queries ----------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The last sequence (stored or skipped); the next message gets ``last_seq + 1``."""
        return self._last

    def state(self) -> StreamState:
        """Counters now (O(1)); ``deleted`` and ``lost`` computed when first read."""
        n = len(self._msgs)
        first, last = self._first, self._last
        return StreamState(
            msgs=n,
            bytes=self._bytes,
            first_seq=first,
            first_ts=self._msgs[first].ts if n else 0,
            last_seq=last,
            last_ts=self._last_ts,
            num_subjects=len(self._fss),
            num_deleted=(last - first + 1 - n) if n else 0,
            calc_deleted=lambda: self._deleted_list(first, last),
            calc_lost=self._lost_list,
        )

    fast_state = state

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

    @property
    def msgs(self) -> int:
        return len(self._msgs)

    @property
    def bytes(self) -> int:
        return self._bytes

    def read_begin(self) -> None:
        """A run of reads in sequence order starts (a consumer's delivery pass): a store may read ahead."""

    def read_done(self) -> None:
        """The run of reads ended: what a store read ahead for it is let go."""

    @property
    def first_seq(self) -> int:
        return self._first

    @property
    def last_seq(self) -> int:
        return self._last

    def filtered_state(self, filter: str, start_seq: int = 0) -> tuple[int, int, int]:
        """(msgs, first_seq, last_seq) of the messages matching filter with seq >= start_seq;
        (0, 0, 0) if none."""
        return self._filtered(filter, start_seq, False)

    def _filtered(self, filter: str, start: int, last_per_subject: bool) -> tuple[int, int, int]:
        msgs = self._msgs
        if not msgs:
            return 0, 0, 0
        if start < self._first:
            start = self._first
        if start > self._last:
            return 0, 0, 0
        if _is_all(filter):
            if last_per_subject:
                return self._filtered_subjects(None, start, True)
            if start <= self._first:
                return len(msgs), self._first, self._prev_alive(self._last)
            span = self._last - start + 1
            if span <= len(msgs) // 2 + 1:
                seqs = [s for s in range(start, self._last + 1) if s in msgs]
                if not seqs:
                    return 0, 0, 0
                return len(seqs), seqs[0], seqs[-1]
            n = len(msgs) - self._count_range(self._first, start - 1)
            if not n:
                return 0, 0, 0
            return n, self._next_alive(start), self._prev_alive(self._last)
        if not _has_wildcard(filter):
            ss = self._fss.get(filter)
            if ss is None:
                return 0, 0, 0
            last = self._subj_last(ss)
            if last < start:
                return 0, 0, 0
            if last_per_subject:
                return 1, last, last
            first = self._subj_first(ss)
            if start <= first:
                return ss[0], first, last
            return self._subj_count_from(ss, start), self._subj_first_from(ss, start), last
        m = self._matcher((filter,))
        if self._last - start + 1 < len(self._fss) and not last_per_subject:
            n = f = lst = 0
            for s in range(start, self._last + 1):
                e = msgs.get(s)
                if e is not None and m(e.subject):
                    n += 1
                    if not f:
                        f = s
                    lst = s
            return n, f, lst
        return self._filtered_subjects(m, start, last_per_subject)

    def _filtered_subjects(
        self, m: _Matcher | None, start: int, last_per_subject: bool
    ) -> tuple[int, int, int]:
        n = f = lst = 0
        for subj, ss in self._fss.items():
            if m is not None and not m(subj):
                continue
            last = self._subj_last(ss)
            if last < start:
                continue
            if last_per_subject:
                n += 1
                first = last
            else:
                first = self._subj_first(ss)
                if start <= first:
                    n += ss[0]
                else:
                    n += self._subj_count_from(ss, start)
                    first = self._subj_first_from(ss, start)
            if not f or first < f:
                f = first
            if last > lst:
                lst = last
        return n, f, lst

    def num_pending(
        self, start_seq: int, filter: str = "", last_per_subject: bool = False
    ) -> tuple[int, int]:
        """(number of matching messages with seq >= start_seq, last_seq it is valid through).
        With last_per_subject: the number of matching subjects with a message >= start_seq."""
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
        if not self._msgs or start > self._last:
            return 0, self._last
        n, _, _ = self._filtered_subjects(self._matcher(tuple(filters)), start, last_per_subject)
        return n, self._last

    def _subjects_matching(self, filter: str | None) -> Iterable[tuple[str, list[int]]]:
        if _is_all(filter):
            return self._fss.items()
        assert filter is not None
        if not _has_wildcard(filter):
            ss = self._fss.get(filter)
            return [(filter, ss)] if ss is not None else []
        m = self._matcher((filter,))
        return [(s, ss) for s, ss in self._fss.items() if m(s)]

    def subjects_state(self, filter: str | None = ">") -> dict[str, tuple[int, int, int]]:
        """subject -> (msgs, first_seq, last_seq) for each subject matching filter."""
        return {
            s: (ss[0], self._subj_first(ss), self._subj_last(ss))
            for s, ss in self._subjects_matching(filter)
        }

    def subjects_totals(self, filter: str | None = ">") -> dict[str, int]:
        """subject -> number of messages, for each subject matching filter."""
        return {s: ss[0] for s, ss in self._subjects_matching(filter)}

    def multi_last_seqs(
        self, filters: list[str], max_seq: int = 0, max_allowed: int = 0
    ) -> list[int]:
        """Sorted last sequence of each subject matching any filter, at or below max_seq
        (0 = no bound).  Raises ErrTooManyResults past ``max_allowed`` (if > 0)."""
        if not self._msgs:
            return []
        if not max_seq:
            max_seq = self._last
        if not filters or any(_is_all(f) for f in filters):
            items: Iterable[tuple[str, list[int]]] = self._fss.items()
        else:
            m = self._matcher(tuple(filters))
            items = [(s, ss) for s, ss in self._fss.items() if m(s)]
        out = []
        for _, ss in items:
            ls = self._subj_last(ss)
            if ls > max_seq:
                ls = self._subj_last_upto(ss, max_seq)
                if not ls:
                    continue
            out.append(ls)
            if max_allowed > 0 and len(out) > max_allowed:
                raise ErrTooManyResults()
        out.sort()
        return out

    # -- consumers ------------------------------------------------------------------

    def consumer_store(self, name: str) -> MemConsumerStore:
        self._check_open()
        cs = self._consumers.get(name)
        if cs is None or cs._closed:
            cs = self._consumers[name] = self._new_consumer_store(name)
        return cs

    def _new_consumer_store(self, name: str) -> MemConsumerStore:
        return MemConsumerStore(name)

    def consumer_names(self) -> list[str]:
        return sorted(n for n, cs in self._consumers.items() if not cs.deleted)

    # -- lifecycle ------------------------------------------------------------------

    def sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        self._closed = True

    def delete(self) -> None:
        self._closed = True
