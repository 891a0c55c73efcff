"""What the RAFT core (node.py) hands its driver and keeps per follower: ``Ready`` (one batch of work:
persist, send, apply, advance) and ``Progress`` (the leader's view of one follower: replicate or probe,
what is in flight, when it was last heard)."""
from __future__ import annotations

from collections import deque
from typing import Optional

from .msgs import HardState, Snapshot
from .roles import PROBE, REPLICATE


class Ready:
    """One batch of work for the driver. Order: persist ``snapshot``, then ``entries`` (they replace any
    stored entries from ``entries[0][0]`` on), then ``hard_state``, then ``base_peers`` (when not None:
    the voters at the start of the log, learnt from the leader, to be used instead of the founding set the
    driver stored); fsync if ``must_sync``; then send ``messages``; then apply ``snapshot.data`` (if any)
    and ``committed_entries``; then ``advance``."""
    __slots__ = ("hard_state", "entries", "snapshot", "messages", "committed_entries", "soft_state", "must_sync",
                 "base_peers")

    def __init__(self, hard_state, entries, snapshot, messages, committed_entries, soft_state, must_sync,
                 base_peers=None):
        self.hard_state: Optional[HardState] = hard_state
        self.entries: list = entries
        self.snapshot: Optional[Snapshot] = snapshot
        self.messages: list = messages
        self.committed_entries: list = committed_entries
        self.soft_state: Optional[tuple] = soft_state  # (leader, role) when it changed, else None
        self.must_sync: bool = must_sync
        self.base_peers: Optional[tuple] = base_peers

    def __repr__(self) -> str:
        return (f"Ready(hs={self.hard_state}, entries={len(self.entries)}, snap={self.snapshot is not None}, "
                f"msgs={len(self.messages)}, committed={len(self.committed_entries)}, soft={self.soft_state})")


class Progress:
    """The leader's view of one follower."""
    __slots__ = ("match", "next", "state", "paused", "inflight", "pending_snapshot", "recent_active", "last_seen",
                 "snap_sent", "heard")

    def __init__(self, next_index: int, now: int):
        self.match = 0
        self.next = next_index
        self.state = PROBE
        self.paused = False
        self.inflight: deque = deque()
        self.pending_snapshot = 0
        self.recent_active = True
        self.last_seen = now
        self.snap_sent = 0
        self.heard = False  # (an answer came from it since this node became leader; last_seen starts at now)

    def become_probe(self, next_index: int) -> None:
        self.state = PROBE
        self.next = next_index
        self.paused = False
        self.inflight.clear()
        self.pending_snapshot = 0

    def become_replicate(self) -> None:
        self.state = REPLICATE
        self.next = self.match + 1
        self.paused = False
        self.inflight.clear()
        self.pending_snapshot = 0
