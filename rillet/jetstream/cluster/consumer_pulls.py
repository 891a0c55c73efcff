"""Waiting pull requests carried through a replicated consumer's group, so that a new leader can tell their clients.

nats-server 2.15's consumer leader proposes each pull request that has to wait (and its removal) to the consumer's
RAFT group; every member keeps those reply subjects, and a member that becomes leader answers each with
``409 Leadership Change``: the client asks again at once (nats.py's fetch takes a 409 for a temporary error) instead
of waiting out its request's expiry, even when the old leader died without a word.

Rillet does the same with one entry per change of the set rather than one per request: ``C_WAITING (added,
removed)`` (rillet.jetstream.consumer.state; the replicated set is ``prm``). The engine (``WaitingSyncMixin``,
part of ``ClusteredConsumer``) compares the reply subjects of its waiting queue with what it last proposed
(``_prm_sent``) after each delivery pass and each expiry pass, and proposes the difference; a request answered
in the pass that received it never waits and costs nothing. Proposed only while the group has members (never
solo: nobody else to tell) and every member's route INFO lists ``log.PENDING_PULLS`` (builds before it cannot
decode the op); otherwise nothing is proposed and the new leader has nothing to answer (as before).

A new leader (``announce``, from ConsumerReplica._promote) sends the 409 to every subject in ``prm`` and
proposes their removal (its ``_prm_sent`` starts as ``prm``, its queue is empty). An entry of the previous
leader's that applies after that (``late``) is answered the same way unless a request with that reply subject
already waits here. The set is part of the group's snapshot (consumers.get_state), so a member catching up from a
snapshot knows it too. A leader stepping down cleanly still answers its own waiting requests itself
(ConsumerReplica._demote); its successor may then send a second 409 to the same subject, which a client takes
for one more retry (nats-server's clients see the same when a request's removal had not committed).
"""
from __future__ import annotations

from typing import Any

from rillet.jetstream.cluster.log import PENDING_PULLS
from rillet.jetstream.consumer.engine import Consumer
from rillet.jetstream.consumer.state import C_WAITING
from rillet.jetstream.log import Entry
from rillet.raft.node import LEADER

LEADERSHIP_CHANGE = b"NATS/1.0 409 Leadership Change\r\n\r\n"


class WaitingSyncMixin:
    """(ClusteredConsumer) the waiting queue's reply subjects proposed to the group as they change."""

    _prm_sent: Any = frozenset()  # what this engine last proposed (what the members hold once it commits)

    def _run(self, flush: bool = True) -> None:
        super()._run(flush)  # type: ignore[misc]
        self._sync_waiting()

    def _process_waiting(self, eos: bool, flush: bool = True) -> float:
        r = super()._process_waiting(eos, flush)  # type: ignore[misc]
        if not self._running:  # type: ignore[attr-defined]  # (a pass syncs once at its end)
            self._sync_waiting()
        return r

    def _sync_waiting(self) -> None:
        sent = self._prm_sent
        wq = self.waiting  # type: ignore[attr-defined]
        if not wq and not sent:
            return
        if not self.engine or self.closed or self.clog.solo:  # type: ignore[attr-defined]
            return
        cur = {wr.reply for wr in wq}
        if cur == sent:
            return
        rep = self.creplica  # type: ignore[attr-defined]
        g = rep.group if rep is not None else None
        node = g.node if g is not None else None
        if node is None or node.role != LEADER or node.transferee is not None or not g.members_decode(PENDING_PULLS):
            return  # (tried again at the next pass)
        added = sorted(cur - sent)
        removed = sorted(sent - cur)
        self._prm_sent = cur
        self.clog.propose(Entry(C_WAITING, (added, removed)), self._c_done)  # type: ignore[attr-defined]

    def _answer(self, replies: Any) -> None:
        send = Consumer._send
        for r in replies:
            send(self, r.encode("utf-8", "surrogateescape"), None, LEADERSHIP_CHANGE, b"")  # type: ignore[arg-type]
        self.js.server.schedule_flush()  # type: ignore[attr-defined]

    def announce(self) -> None:
        """(a new leader's engine, started) Every pull request its predecessor had waiting is told 409 Leadership
        Change; their removal is proposed at the next sync."""
        prm = self.prm  # type: ignore[attr-defined]
        if not prm:
            return
        self._answer(sorted(prm))
        self._prm_sent = set(prm)
        self.loop.call_soon(self._sync_waiting)  # type: ignore[attr-defined]

    def late(self, added: Any) -> None:
        """(the engine applying another leader's C_WAITING) requests that waited there, answered here."""
        mine = {wr.reply for wr in self.waiting}  # type: ignore[attr-defined]
        new = [r for r in added if r not in mine]
        if not new:
            return
        self._answer(new)
        sent = set(self._prm_sent)
        sent.update(new)
        self._prm_sent = sent
        self.loop.call_soon(self._sync_waiting)  # type: ignore[attr-defined]
