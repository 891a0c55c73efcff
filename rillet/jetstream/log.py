"""The log seam: every change to a stream (or a consumer's replicated state) is an entry, proposed by the
leader, committed, then applied on every replica; replies and side effects follow on the leader.

The interface a log implements (``SingleNodeLog`` here, for R1 streams and consumers; ``DeferredLog`` for tests;
``rillet.jetstream.cluster.log.RaftLog``, the RAFT-backed log of a replicated group):

``log.apply``                          the owner's state machine, ``apply(entry) -> result``, set at creation.
                                       Called once per committed entry, in log order, on every replica. It
                                       may raise (a store refusing a message): the refusal is deterministic,
                                       every replica refuses the same entry, and the error is the result.
``log.propose(entry, on_applied)``     leader only. Queues ``entry`` for commit and returns nothing. After
                                       the entry is applied on this node, ``on_applied(entry, result, error)``
                                       runs (``error`` None on success, else the exception apply raised),
                                       before the next entry is applied. A proposal that cannot commit here
                                       (not the leader, leadership lost before it applied) completes with
                                       ``NotLeader``. ``on_applied`` may propose again (a retention delete).
                                       ``SingleNodeLog`` with ``on_applied=None`` re-raises apply's error.
``log.is_leader``                      True when this node may propose.
``log.on_leader_change``               set by the owner: ``cb(is_leader)`` when this node gains or loses
                                       leadership (after failing its pending completions on a loss).
``log.index``, ``log.term``            the last proposed index and the current term.

An ``Entry`` is ``op`` plus ``args`` (what a replica needs, all decided by the leader: sequences, timestamps,
msg ids, batch boundaries) plus ``ctx``: the proposer's local context for its completion (a reply subject, a
callback). ``ctx`` never leaves the proposing node: a replicated log encodes ``op`` and ``args`` only.

What the RAFT-backed log also keeps: completions fire in proposal order (a stream keeps its in-flight
entries in a FIFO); an entry applied on a node that did not propose it (a follower, or a new leader applying
its predecessor's tail) has no completion, so its leader-side effects (replies, republish, consumer wake-ups)
do not run: a new leader re-derives its timers and consumer engines from the applied state. A consumer's log
may commit later too: the engine numbers deliveries past those in flight; its max_ack_pending check reads
the applied pending map, so it can run ahead by the deliveries in flight.
"""
from __future__ import annotations

from typing import Any, Callable

import msgspec

Completion = Callable[["Entry", Any, "BaseException | None"], None]


class NotLeader(Exception):
    """The proposal did not (or may not have) committed through this node: it is not the leader."""

    def __init__(self) -> None:
        super().__init__("not the leader")


class LeadershipLost(NotLeader):
    """The entry was proposed, then this node lost leadership before it applied: it may still commit under
    the next leader, so its outcome is unknown. Whoever waits for it gives no answer (a client times out and
    retries, as with nats-server) instead of an error that could be false."""


class Entry(msgspec.Struct):
    """One log entry. ``op`` names the change; the fields it needs travel in ``args``; ``ctx`` is local.
    (A msgspec Struct: built in C, one is made per publish and per delivery.)"""

    op: int
    args: tuple[Any, ...]
    ctx: Any = None

    # stream ops (the leader decides every timestamp and sequence an entry needs)
    MSG = 1          # (subject, hdr, data, ts, ttl, msg_id, seq): store a message at sequence seq
    DELETE = 2       # (seq, erase, ts)
    PURGE = 3        # (subject, seq, keep, ts)
    UPDATE = 4       # (stream config, store config, ts): new limits (may remove messages, leave markers)
    BATCH = 5        # (msgs, seq): an atomic batch, (subject, hdr, data, ts, ttl, msg_id) each, stored all or
                     # nothing from sequence seq on
    MIRROR = 6       # (seq, subject, hdr, data, ts): a mirrored message at the origin's sequence and time
    EXPIRE = 7       # (ts,): remove what max_age and message TTLs let go at time ts (markers stamped ts)
    SKIP = 8         # (ts, seq): sequence seq used without a message (an interest stream's message nobody is
                     # interested in, as nats-server's SkipMsgNoInterest; proposed on one server only)

    # consumer ops (args and meaning: rillet.jetstream.consumer.state)
    C_START = 20
    C_DELIVERED = 21
    C_UNDELIVERED = 22
    C_ACK = 23
    C_NAK = 24
    C_DUE = 25
    C_GONE = 26
    C_MAXDELIV = 27
    C_PURGED = 28
    C_DROP = 29
    C_RESET = 30
    C_WAITING = 31   # (added, removed): the leader's waiting pull requests (replicated consumers only)

    def __repr__(self) -> str:
        return f"Entry({self.op}, {self.args!r})"


class SingleNodeLog:
    """A log with one member: an entry commits, is applied and completes inside ``propose``."""

    __slots__ = ("apply", "index", "term", "on_leader_change")

    is_leader = True

    def __init__(self, apply: Callable[[Entry], Any]) -> None:
        self.apply = apply
        self.index = 0
        self.term = 1
        self.on_leader_change: Callable[[bool], None] | None = None

    def propose(self, entry: Entry, on_applied: Completion | None = None) -> None:
        self.index += 1
        if on_applied is None:
            self.apply(entry)
            return
        try:
            res = self.apply(entry)
        except Exception as e:
            on_applied(entry, None, e)
            return
        on_applied(entry, res, None)


class DeferredLog:
    """A log whose entries commit only when ``flush()`` says so: the shape of a RAFT leader waiting for a
    quorum, for tests of the seam (replies after commit, checks against the proposed state) and as the
    reference for what a replicated log must do. ``step_down()`` models losing leadership."""

    def __init__(self, apply: Callable[[Entry], Any]) -> None:
        self.apply = apply
        self.index = 0
        self.term = 1
        self.is_leader = True
        self.on_leader_change: Callable[[bool], None] | None = None
        self.queue: list[tuple[Entry, Completion | None]] = []
        self.applied: list[Entry] = []  # every entry applied, in order (what a replica would receive)

    def propose(self, entry: Entry, on_applied: Completion | None = None) -> None:
        if not self.is_leader:
            if on_applied is not None:
                on_applied(entry, None, NotLeader())
            return
        self.index += 1
        self.queue.append((entry, on_applied))

    def flush(self, n: int = -1) -> int:
        """Commit and apply the first ``n`` queued entries (all with -1), including those proposed by the
        completions meanwhile. Returns how many were applied."""
        done = 0
        while self.queue and (n < 0 or done < n):
            entry, cb = self.queue.pop(0)
            self.applied.append(entry)
            done += 1
            try:
                res = self.apply(entry)
            except Exception as e:
                if cb is not None:
                    cb(entry, None, e)
                continue
            if cb is not None:
                cb(entry, res, None)
        return done

    def step_down(self) -> None:
        """Lose leadership: uncommitted proposals complete with NotLeader, then the owner is told."""
        self.is_leader = False
        pending, self.queue = self.queue, []
        for entry, cb in pending:
            if cb is not None:
                cb(entry, None, LeadershipLost())
        if self.on_leader_change is not None:
            self.on_leader_change(False)
