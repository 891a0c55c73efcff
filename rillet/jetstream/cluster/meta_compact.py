"""When the meta group's log is snapshotted and compacted: ``jetstream { meta_compact, meta_compact_size }``.

nats-server snapshots its meta layer once its log holds more than ``meta_compact`` entries or more than
``meta_compact_size`` bytes (either that is set; both 0, the default: at every chance it takes). Rillet's meta
layer (meta.JetStreamCluster._apply) asks after each applied entry: with a threshold set, once the entries (or the
bytes of their data) applied since the last snapshot pass it; with neither set, every ``DEFAULT_ENTRIES``
entries. The snapshot is taken in line with the applies (what ``meta_compact_sync: true`` asks of nats-server).
Both are read from the options at each entry: a config reload changes them at once, as in nats-server.
"""
from __future__ import annotations

from typing import Any

DEFAULT_ENTRIES = 1024  # meta entries between snapshots when neither threshold is set


def thresholds(opts: Any) -> tuple[int, int]:
    """(entries, bytes) from ``jetstream { meta_compact, meta_compact_size }``; 0 = not set."""
    x = opts.jetstream.extra
    return int(x.get("meta_compact", 0) or 0), int(x.get("meta_compact_size", 0) or 0)


class MetaCompaction:
    """The meta log's growth since its last snapshot (which a snapshot from the leader also resets)."""

    def __init__(self) -> None:
        self.base = -1  # the log's offset (its snapshot's index) the counts below start from
        self.bytes = 0  # bytes of entry data applied since that snapshot

    def due(self, opts: Any, offset: int, index: int, size: int) -> bool:
        """Entry ``index`` (``size`` bytes of data) was applied with the log's snapshot at ``offset``: whether
        to snapshot and compact now."""
        if offset != self.base:
            self.base, self.bytes = offset, 0
        self.bytes += size
        entries, nbytes = thresholds(opts)
        n = index - offset
        if not entries and not nbytes:
            return n >= DEFAULT_ENTRIES
        return bool((entries and n > entries) or (nbytes and self.bytes > nbytes))
