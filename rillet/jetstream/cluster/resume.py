"""Resuming a stream (or consumer) group that lost a majority of its logs: the operator's acceptance of the loss.

When fewer members of a group than a quorum kept their logs (two of three stores wiped, the second before the
first caught up), committed entries past the best log left may be gone and nothing says how far they went: the
members report it (rillet.raft: ``lost_open``; stream info's ``cluster.lost`` with ``open_end``, the
``STREAM.DATA_LOST`` advisory, /healthz) and elect no leader, so that no sequence that may have been acknowledged
is given again without anyone deciding it (tests/faults/wiped-vote.md, 3b).

An operator resumes such a group with nats-server's step-down request, ``$JS.API.STREAM.LEADER.STEPDOWN.<stream>``
(``nats stream cluster step-down <stream>``; ``CONSUMER.LEADER.STEPDOWN`` for a consumer), which nats-server
refuses on a leaderless group (10008). On a member of a group whose loss is known here, Rillet takes it as the
acceptance of the loss (``resume``): each member that receives it accepts (``Node.accept_loss``: its survey sets
the vote floor at the best log left), so the member holding the best log left is elected, the others catch up
from it, and the loss stays reported (the report gains ``accepted``, the time; the new leader proposes it and
sends the advisory again). Entries past that log are given up: their stream sequences may be given again. A
stream's request resumes its consumers whose groups lost theirs too. A ``placement`` is not honoured: only the
best log left may lead. The new leader answers (success); every member answers 10008 when no leader was
elected within ``RESUME_WAIT`` seconds (a member still down: the survey needs every voter's answer)."""
from __future__ import annotations

import time
from typing import Any

from rillet.gocompat.gotime import format_time
from rillet.jetstream.errors import ApiError

RESUME_WAIT = 10.0  # seconds the members wait for a leader before answering that none was elected


def lost_here(g: Any) -> bool:
    """The group's member here knows that fewer members than a quorum kept their logs, and knows no leader."""
    n = g.node if g is not None else None
    return n is not None and g.running and bool(getattr(n, "lost_open", False)) and n.leader is None


def _accept(cs: Any, r: Any, what: str) -> bool:
    """One replica's group accepts the loss (logged once); its report records when."""
    g = r.group
    n = g.node
    first = n.lost[0] if n.lost else 0
    if not n.accept_loss():
        return False
    if r.data_lost is not None and "accepted" not in r.data_lost:
        r.data_lost = dict(r.data_lost, accepted=format_time(time.time_ns()))
        r._save_lost()
        cs.js.log.warn(f"JetStream cluster {what}: the loss of committed RAFT entries from {first} on is accepted "
                       f"(a leader step-down request on the leaderless group): the best log left leads, entries "
                       f"past it are given up and their sequences may be given again; the loss stays reported")
    if n.recovering:
        g._schedule()  # (its survey again: the queries go out now)
    else:
        g.campaign_soon()  # (a member holding a log: an election soon)
    return True


def resume(cs: Any, router: Any, reply: bytes | None, r: Any, what: str) -> None:
    """(ClusteredStreams._gate_replica) A LEADER.STEPDOWN for replica ``r`` (a stream's, ``what`` "stream", or a
    consumer's) whose group's loss is known here (``lost_here``): the loss is accepted (module docstring), the
    new leader answers."""
    typ = f"io.nats.jetstream.api.v1.{what}_leader_stepdown_response"
    name = (f"stream '{r.jsa.account.name} > {r.name}'" if what == "stream" else
            f"consumer '{r.rep.jsa.account.name} > {r.rep.name} > {r.name}'")
    _accept(cs, r, name)
    if what == "stream":
        for cr in list(getattr(r, "creps", {}).values()):
            if lost_here(cr.group):
                _accept(cs, cr, f"consumer '{r.jsa.account.name} > {r.name} > {cr.name}'")
    if not reply:
        return
    answered = [False]

    def answer() -> None:
        if answered[0]:
            return
        answered[0] = True
        router.respond(reply, {"type": typ, "success": True})
        cs.server.schedule_flush()
        if r.data_lost is not None:
            r._lost_advisory()  # (again, with the time it was accepted)

    def give_up() -> None:
        if answered[0] or r.group.leader is not None:
            return  # (answered, or another member leads: it answers)
        answered[0] = True
        router.respond_error(reply, typ, ApiError.make("CLUSTER_NOT_AVAIL"))
        cs.server.schedule_flush()
    r.group.when_leader(answer, RESUME_WAIT)
    cs.js.loop.call_later(RESUME_WAIT, give_up)
