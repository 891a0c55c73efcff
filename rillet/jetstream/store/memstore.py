"""MemStore: a stream's messages kept in memory.

The index logic (limits, per-subject index, queries) lives in ``_core.IndexedStore``;
here each index entry is the StoredMsg itself.
"""

from __future__ import annotations

import os
from typing import Iterator

from ._core import IndexedStore
from .base import StoreConfig, StoredMsg


class MemStore(IndexedStore):
    # Accounted size: subject + hdr + data + 16, like nats-server's memory store.
    _size_overhead = 16
    _hdr_overhead = 0

    def __init__(self, cfg: StoreConfig | None = None) -> None:
        super().__init__(cfg or StoreConfig(storage="memory"))

    def _write(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl_ns: int) -> StoredMsg:
        return StoredMsg(subject, seq, ts, hdr, data)

    def _entry_size(self, e: StoredMsg) -> int:
        return len(e.subject) + len(e.hdr) + len(e.data) + 16

    def _materialize(self, e: StoredMsg) -> StoredMsg:
        return e

    def _on_removed(self, e: StoredMsg, erase: bool) -> None:
        if erase:
            # Anyone still holding the object sees random bytes, not the payload.
            if e.hdr:
                e.hdr = os.urandom(len(e.hdr))
            if e.data:
                e.data = os.urandom(len(e.data))

    def ttl_of(self, seq: int) -> float:
        """The TTL (seconds) the message was stored with (0 = none, < 0 = never expires)."""
        if seq in self._no_expire:
            return -1
        exp = self._ttl_of.get(seq)
        e = self._msgs.get(seq)
        if exp is None or e is None:
            return 0
        return (exp - e.ts) / 1e9

    def snapshot_stream(self, include_consumers: bool = True) -> Iterator[bytes]:
        """A snapshot in the file store's format (restore() makes a file store directory;
        ``restore_into`` loads it into any store)."""
        from .filestore import snapshot_from_store

        return snapshot_from_store(self, include_consumers)

    def delete(self) -> None:
        self._msgs = {}
        self._fss = {}
        self._bytes = 0
        super().delete()
