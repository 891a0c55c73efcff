"""The store-independent queries of both message stores, over a small per-store index interface.

``StoreQueries`` answers filtered state, pending counts, next/last/previous message lookups, per-subject
totals and states, multi-last and time lookups the same way for the memory store and the file store. What it
needs of a store is the ``StoreIndex`` interface below: sequence bounds, walking live sequences, a per-subject
map whose entries start with the subject's message count, per-subject primitives taking that entry, and a few
index-specific searches (the memory store answers them from its dicts, the file store from its blocks).
Nothing here changes the store's messages (per-subject entries may be tidied: dead sequences dropped, a stale
first-block hint moved on).
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol

from ...subjects.validate import tokens_match_literal
from .base import ErrTooManyResults, StoredMsg, StreamState

_MATCH_CACHE_MAX = 65536


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


class StoreIndex(Protocol):
    """What ``StoreQueries`` needs of a store (``e`` is the subject's entry in ``_subjects``)."""

    _subjects: dict[str, list[int]]  # subject -> entry; ``entry[0]`` is the subject's live message count
    _first: int  # first live sequence (last + 1 when empty)
    _last: int  # last sequence, stored or skipped
    _last_ts: int
    _bytes: int
    _matchers: dict[Any, _Matcher]

    @property
    def msgs(self) -> int:
        """Live messages."""

    def _next_alive(self, s: int) -> int:
        """First live seq >= s, or 0."""

    def _prev_alive(self, s: int) -> int:
        """Last live seq <= s, or 0."""

    def _count_from(self, start: int) -> int:
        """Live messages with seq >= start (first <= start <= last)."""

    def _ts_of(self, seq: int) -> int:
        """The timestamp of a live message."""

    def _load(self, seq: int) -> StoredMsg | None:
        """The live message at seq (None for 0)."""

    def _subj_first(self, subj: str, e: list[int]) -> int: ...

    def _subj_last(self, subj: str, e: list[int]) -> int: ...

    def _subj_first_from(self, subj: str, e: list[int], start: int) -> int:
        """First live seq >= start on the subject, or 0."""

    def _subj_last_upto(self, subj: str, e: list[int], limit: int) -> int:
        """Last live seq <= limit on the subject, or 0."""

    def _subj_count_from(self, subj: str, e: list[int], start: int) -> int:
        """Live messages >= start on the subject."""

    def _next_multi(self, m: _Matcher, start: int) -> int:
        """First live seq >= start (within bounds) whose subject matches m, or 0."""

    def _filtered_match(self, m: _Matcher, start: int) -> tuple[int, int, int]:
        """(count, first, last) of the live messages >= start (within bounds) matching m."""

    def _seq_from_time(self, ts_ns: int, first: int, last: int) -> int:
        """First seq with a timestamp >= ts_ns, given ts(first) < ts_ns <= ts(last) (live seqs)."""

    def _deleted_list(self, first: int, last: int) -> list[int]: ...

    def _lost_list(self) -> list[int]: ...


class StoreQueries:
    """The query methods of both stores, written against ``StoreIndex`` (see the module's docstring): a
    store class lists this after its index primitives; tests/typing/check_seams.py checks both stores
    against ``StoreIndex``."""

    def _matcher(self, filters: tuple[str, ...]) -> _Matcher:
        m = self._matchers.get(filters)
        if m is None:
            if len(self._matchers) > 256:
                self._matchers.clear()
            m = self._matchers[filters] = _Matcher(filters)
        return m

    def _matching(self, m: _Matcher | None) -> Iterable[tuple[str, list[int]]]:
        """(subject, entry) of every subject matching m (every subject for None)."""
        sm = self._subjects
        if m is None:
            return sm.items()
        return [(s, e) for s, e in sm.items() if m(s)]

    def _subjects_matching(self, filter: str | None) -> Iterable[tuple[str, list[int]]]:
        if _is_all(filter):
            return self._subjects.items()
        assert filter is not None
        if not _has_wildcard(filter):
            e = self._subjects.get(filter)
            return [(filter, e)] if e is not None else []
        return self._matching(self._matcher((filter,)))

    # -- next / last / previous -----------------------------------------------------

    def _next_seq(self, filter: str, start: int, wildcard: bool | None = None) -> int:
        # (no test for an empty store: every path below finds nothing in one, and this is a consumer's next)
        if start < self._first:
            start = self._first
        if start > self._last:
            return 0
        if _is_all(filter):
            return self._next_alive(start)
        if wildcard is None:
            wildcard = _has_wildcard(filter)
        if not wildcard:
            e = self._subjects.get(filter)
            if e is None:
                return 0
            return self._subj_first_from(filter, e, start)
        return self._next_multi(self._matcher((filter,)), start)

    def load_next_msg(self, filter: str, start_seq: int, wildcard: bool | None = None) -> StoredMsg | None:
        """First message with seq >= start_seq whose subject matches ``filter``."""
        return self._load(self._next_seq(filter, start_seq, wildcard))

    def load_next_msg_multi(self, filters: list[str], start_seq: int) -> StoredMsg | None:
        """First message with seq >= start_seq matching any of ``filters``."""
        if not self.msgs:
            return None
        if not filters or any(_is_all(f) for f in filters):
            return self.load_next_msg(">", start_seq)
        start = max(start_seq, self._first)
        if start > self._last:
            return None
        return self._load(self._next_multi(self._matcher(tuple(filters)), start))

    def _last_seq_matching(self, filter: str) -> int:
        if not self.msgs:
            return 0
        if _is_all(filter):
            return self._prev_alive(self._last)
        if not _has_wildcard(filter):
            e = self._subjects.get(filter)
            return self._subj_last(filter, e) if e is not None else 0
        best = 0
        for subj, e in self._matching(self._matcher((filter,))):
            ls = self._subj_last(subj, e)
            if ls > best:
                best = ls
        return best

    def load_last_msg(self, filter: str) -> StoredMsg | None:
        """Last message whose subject matches ``filter`` (wildcards allowed)."""
        return self._load(self._last_seq_matching(filter))

    def last_seq_for_subject(self, subject: str) -> int:
        """Last sequence stored on this literal subject, 0 if none."""
        e = self._subjects.get(subject)
        return self._subj_last(subject, e) if e is not None else 0

    def load_prev_msg(self, start_seq: int, filter: str = "") -> StoredMsg | None:
        """Last message with seq <= start_seq (matching ``filter`` if given)."""
        if not self.msgs or start_seq < self._first:
            return None
        if _is_all(filter):
            s = self._prev_alive(start_seq)
        elif not _has_wildcard(filter):
            e = self._subjects.get(filter)
            s = self._subj_last_upto(filter, e, start_seq) if e is not None else 0
        else:
            s = 0
            for subj, e in self._matching(self._matcher((filter,))):
                q = self._subj_last_upto(subj, e, start_seq)
                if q > s:
                    s = q
        return self._load(s)

    def load_prev_msg_for_subject(self, subject: str, start_seq: int) -> StoredMsg | None:
        """Last message on ``subject`` (a filter) with seq <= start_seq."""
        return self.load_prev_msg(start_seq, subject)

    def get_seq_from_time(self, ts_ns: int) -> int:
        """First sequence whose timestamp is >= ts_ns (last_seq + 1 if none)."""
        if not self.msgs:
            return self._last + 1
        first = self._first
        if self._ts_of(first) >= ts_ns:
            return first
        last = self._prev_alive(self._last)
        if self._ts_of(last) < ts_ns:
            return self._last + 1
        return self._seq_from_time(ts_ns, first, last)

    # -- state ----------------------------------------------------------------------

    def state(self) -> StreamState:
        """Counters now (O(1)); ``deleted`` and ``lost`` computed when first read."""
        n = self.msgs
        first, last = self._first, self._last
        return StreamState(
            msgs=n,
            bytes=self._bytes,
            first_seq=first,
            first_ts=self._ts_of(first) if n else 0,
            last_seq=last,
            last_ts=self._last_ts,
            num_subjects=len(self._subjects),
            num_deleted=(last - first + 1 - n) if n else 0,
            calc_deleted=lambda: self._deleted_list(first, last),
            calc_lost=self._lost_list,
        )

    fast_state = state

    def filtered_state(self, filter: str, start_seq: int = 0) -> tuple[int, int, int]:
        """(msgs, first_seq, last_seq) of the messages matching filter with seq >= start_seq;
        (0, 0, 0) if none."""
        return self._filtered(filter, start_seq, False)

    def _filtered(self, filter: str, start: int, last_per_subject: bool) -> tuple[int, int, int]:
        if not self.msgs:
            return 0, 0, 0
        if start < self._first:
            start = self._first
        if start > self._last:
            return 0, 0, 0
        if _is_all(filter):
            if last_per_subject:
                return self._filtered_lasts(None, start)
            if start <= self._first:
                return self.msgs, self._first, self._prev_alive(self._last)
            n = self._count_from(start)
            if not n:
                return 0, 0, 0
            return n, self._next_alive(start), self._prev_alive(self._last)
        if not _has_wildcard(filter):
            e = self._subjects.get(filter)
            if e is None:
                return 0, 0, 0
            last = self._subj_last(filter, e)
            if last < start:
                return 0, 0, 0
            if last_per_subject:
                return 1, last, last
            first = self._subj_first(filter, e)
            if start <= first:
                return e[0], first, last
            return self._subj_count_from(filter, e, start), self._subj_first_from(filter, e, start), last
        m = self._matcher((filter,))
        if last_per_subject:
            return self._filtered_lasts(m, start)
        return self._filtered_match(m, start)

    def _filtered_lasts(self, m: _Matcher | None, start: int) -> tuple[int, int, int]:
        """Last per subject: (subjects whose last message is >= start, the lowest and highest of those)."""
        n = f = lst = 0
        for subj, e in self._matching(m):
            last = self._subj_last(subj, e)
            if last < start:
                continue
            n += 1
            if not f or last < f:
                f = last
            if last > lst:
                lst = last
        return n, f, lst

    def num_pending(self, start_seq: int, filter: str = "", last_per_subject: bool = False) -> tuple[int, int]:
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
        if not self.msgs or start > self._last:
            return 0, self._last
        m = self._matcher(tuple(filters))
        if last_per_subject:
            n, _, _ = self._filtered_lasts(m, start)
        else:
            n, _, _ = self._filtered_match(m, start)
        return n, self._last

    # -- per subject ----------------------------------------------------------------

    def subjects_state(self, filter: str | None = ">") -> dict[str, tuple[int, int, int]]:
        """subject -> (msgs, first_seq, last_seq) for each subject matching filter."""
        return {
            s: (e[0], self._subj_first(s, e), self._subj_last(s, e))
            for s, e in list(self._subjects_matching(filter))
        }

    def subjects_totals(self, filter: str | None = ">") -> dict[str, int]:
        """subject -> number of messages, for each subject matching filter."""
        return {s: e[0] for s, e in self._subjects_matching(filter)}

    def multi_last_seqs(self, filters: list[str], max_seq: int = 0, max_allowed: int = 0) -> list[int]:
        """Sorted last sequence of each subject matching any filter, at or below max_seq
        (0 = no bound).  Raises ErrTooManyResults past ``max_allowed`` (if > 0)."""
        if not self.msgs:
            return []
        if not max_seq:
            max_seq = self._last
        if not filters or any(_is_all(f) for f in filters):
            items = self._matching(None)
        else:
            items = self._matching(self._matcher(tuple(filters)))
        out = []
        for s, e in items:
            ls = self._subj_last(s, e)
            if ls > max_seq:
                ls = self._subj_last_upto(s, e, max_seq)
                if not ls:
                    continue
            out.append(ls)
            if max_allowed > 0 and len(out) > max_allowed:
                raise ErrTooManyResults()
        out.sort()
        return out
