"""What both message stores do the same way above their indexes: config and limits, storing at the next
sequence (checks first), skips, discard-old enforcement, purge, expiry's delete markers, consumer stores.

``StoreCommon`` is written against a few primitives each store has (besides ``_query.StoreIndex``):
``_append(seq, subject, hdr, data, ts, ttl, e=None)`` (write unless ``e``, the written record's entry, is
given, then index), ``_write_batch(recs)`` (write several, all or nothing; returns their entries),
``_remove(seq, erase=False)``, ``_purge_all(new_first)``, ``_compact(seq)`` (first < seq <= last),
``_matching_seqs(filter, first, last)``, ``_expire(now_ns)`` (-> removed, subjects that need a delete
marker), ``_size_of(seq)`` (accounted size of a live message or None), ``_has_ttls()`` and
``_new_consumer_store(name)``; and the hooks ``_on_config`` and ``_on_skip``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from rillet.gocompat.gotime import format_seconds
from ._query import _is_all, _Matcher
from .base import (
    ConsumerState,
    ErrMaxBytes,
    ErrMaxMsgs,
    ErrMaxMsgSize,
    ErrMaxMsgsPerSubject,
    ErrSequenceMismatch,
    ErrStoreClosed,
    RemoveCallback,
    StoreConfig,
    decode_consumer_state,
    encode_consumer_state,
)

_NS = 1_000_000_000


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


class StoreCommon:
    """The store-independent part of storing and limits (see the module's docstring).

    Not thread-safe: call it from one thread (the event loop).  The one exception is
    ``FileStore.sync()``, which may run in a worker thread (group commit)."""

    _size_overhead = 16  # accounted bytes: subject + hdr + data + overhead (+ hdr overhead)
    _hdr_overhead = 0

    def __init__(self, cfg: StoreConfig) -> None:
        self.cfg = cfg
        self._first = max(cfg.first_seq, 1)
        self._last = self._first - 1
        self._last_ts = 0
        self._bytes = 0
        self._closed = False
        self._remove_cb: RemoveCallback | None = None
        self._marker_cb: Callable[[str, bytes], None] | None = None
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
            self._enforce_all_subjects()
        self._enforce_limits()
        if self._max_age_ns or (cfg.allow_msg_ttl and self._has_ttls()):
            self.expire_msgs(now_ns or self.now())
        self._on_config()

    def _on_config(self) -> None:
        """After a config change was applied."""

    # -- callbacks ------------------------------------------------------------------

    def register_remove_callback(self, cb: RemoveCallback | None) -> None:
        """``cb(seq, subject, size)`` is called after every removal (limits, expiry, purge,
        compact, truncate, remove_msg)."""
        self._remove_cb = cb

    def register_marker_callback(self, cb: Callable[[str, bytes], None] | None) -> None:
        """With ``subject_delete_marker_ttl``: ``cb(subject, hdr)`` is asked to publish the
        delete marker (through the stream) instead of the store storing it itself."""
        self._marker_cb = cb

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
        e = self._subjects.get(subject)
        asl = bool(self._maxp and e is not None and e[0] >= self._maxp)
        if asl and self.cfg.discard_new_per_subject and not (hdr and b"Nats-Rollup:" in hdr):
            raise ErrMaxMsgsPerSubject()
        if self._max_msgs and self.msgs >= self._max_msgs and not asl:
            raise ErrMaxMsgs()
        if self._max_bytes and self._bytes + size > self._max_bytes:
            if not asl:
                raise ErrMaxBytes()
            # At the subject limit the subject's oldest goes: enough room then?
            oldest = self._size_of(self._subj_first(subject, e))  # type: ignore[arg-type]
            if oldest is None or oldest < size:
                raise ErrMaxBytes()

    def store_msg(
        self, subject: str, hdr: bytes, data: bytes, ts: int | None = None, ttl: float = 0
    ) -> tuple[int, int]:
        """Store at the next sequence; returns (seq, ts).  Enforces the limits.  (The file store's compiled
        twin, rillet/_speedups/_cstore.pyx, has a copy, and MemStore.store_msg its common case inline: a change
        here goes there too.)"""
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

    def skip_msg(self, seq: int = 0, ts: int = 0) -> int:
        """Use the next sequence without storing anything; returns it. ``ts``: the last time becomes it (as
        nats-server's skip of a message no consumer of an interest stream wants)."""
        self._check_open()
        if seq and seq != self._last + 1:
            raise ErrSequenceMismatch()
        seq = self._last + 1
        if ts:
            self._last_ts = ts
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
        if not self.msgs:
            self._first = last + 1
        self._on_skip()

    def _on_skip(self) -> None:
        """After the last sequence moved without a message (skip)."""

    # -- limits ---------------------------------------------------------------------

    def _enforce_all_subjects(self) -> None:
        """The per-subject limit over every subject (after open, or when it was lowered)."""
        if self._maxp:
            for subj in [s for s, e in self._subjects.items() if e[0] > self._maxp]:
                self._enforce_per_subject(subj)

    def _enforce_per_subject(self, subject: str) -> None:
        maxp = self._maxp
        sm = self._subjects
        self._limit_removal = True
        try:
            e = sm.get(subject)
            while e is not None and e[0] > maxp:
                if not self._remove(self._subj_first(subject, e)):
                    break
                e = sm.get(subject)
        finally:
            self._limit_removal = False

    def _enforce_limits(self) -> None:
        if self._discard_new:
            return
        self._limit_removal = True
        try:
            mm = self._max_msgs
            if mm:
                while self.msgs > mm:
                    if not self._remove(self._first):
                        break
            mb = self._max_bytes
            if mb:
                while self._bytes > mb and self.msgs:
                    if not self._remove(self._first):
                        break
        finally:
            self._limit_removal = False

    # -- removal --------------------------------------------------------------------

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        """Remove one message; ``erase`` also overwrites its payload (in memory, or its record on disk)."""
        self._check_open()
        return self._remove(seq, erase)

    def compact(self, seq: int) -> int:
        """Remove every message below ``seq``; returns how many."""
        self._check_open()
        if seq == 0:
            return self._purge_all(self._last + 1)
        if self._first >= seq:
            return 0
        if seq > self._last:
            return self._purge_all(seq)
        return self._compact(seq)

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

    def _expire_removing(self, seq: int, subj: str, markers: list[str]) -> None:
        """Expiry removes ``seq`` (on ``subj``); with subject delete markers, the subject's last message
        leaves one (unless it is a delete marker itself)."""
        if self._sdm_ttl > 0:
            e = self._subjects.get(subj)
            if e is not None and e[0] == 1:
                m = self._load(seq)
                if m is not None and not is_delete_marker(m.hdr):
                    self._remove(seq)
                    markers.append(subj)
                    return
        self._remove(seq)

    # -- consumers ------------------------------------------------------------------

    def consumer_store(self, name: str) -> MemConsumerStore:
        self._check_open()
        cs = self._consumers.get(name)
        if cs is None or cs._closed:
            cs = self._consumers[name] = self._new_consumer_store(name)
        return cs

    def consumer_names(self) -> list[str]:
        return sorted(n for n, cs in self._consumers.items() if not cs.deleted)

    # -- counters -------------------------------------------------------------------

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def first_seq(self) -> int:
        return self._first

    @property
    def last_seq(self) -> int:
        """The last sequence (stored or skipped); the next message gets ``last_seq + 1``."""
        return self._last
