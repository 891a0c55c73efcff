"""The stream log: every change to a stream is proposed as an entry, committed, then applied.

On a single server an entry commits as soon as it is proposed, so ``propose`` applies it at once and returns
what applying returned. A replicated stream will put a RAFT node behind the same two calls: ``propose``
hands the entry to the leader's log, and ``apply`` runs on every replica when the entry commits. Streams
and consumers never change their stores any other way, which is what makes that swap a transport change.
"""
from __future__ import annotations

from typing import Any, Callable


class Entry:
    """One log entry. ``op`` names the change; the fields it needs travel in ``args``."""

    __slots__ = ("op", "args")

    # stream ops (the leader decides every timestamp and sequence an entry needs)
    MSG = 1          # (subject, hdr, data, ts, ttl, msg_id, seq): store a message at sequence seq
    DELETE = 2       # (seq, erase)
    PURGE = 3        # (subject, seq, keep)
    UPDATE = 4       # (stream config, store config, ts): new limits (may remove messages)
    BATCH = 5        # (msgs, seq): an atomic batch, (subject, hdr, data, ts, ttl, msg_id) each, stored all or
                     # nothing from sequence seq on
    MIRROR = 6       # (seq, subject, hdr, data, ts): a mirrored message at the origin's sequence and time
    EXPIRE = 7       # (ts,): remove what max_age and message TTLs let go at time ts

    def __init__(self, op: int, args: tuple) -> None:
        self.op = op
        self.args = args


class SingleNodeLog:
    """A log with one member: an entry is committed when proposed. Index and term are kept for RAFT parity."""

    __slots__ = ("apply", "index", "term")

    def __init__(self, apply: Callable[[Entry], Any]) -> None:
        self.apply = apply
        self.index = 0
        self.term = 1

    def propose(self, entry: Entry) -> Any:
        self.index += 1
        return self.apply(entry)

    @property
    def is_leader(self) -> bool:
        return True
