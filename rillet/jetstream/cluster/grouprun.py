"""What the RAFT groups of one server share (group.py's ``RaftGroup`` is one group): the ``_Runner`` that runs
the queued groups' Ready loops when the server writes out a read's output, the one ``RaftTransport`` all groups
send and receive through, and what each routed peer's build decodes (``_PeerOps``)."""
from __future__ import annotations

import traceback
import weakref
from typing import TYPE_CHECKING, Any

from rillet.jetstream.cluster.peers import peer_id
from rillet.jetstream.cluster.transport import RaftTransport
from rillet.raft.node import FOLLOWER

if TYPE_CHECKING:
    from rillet.jetstream.cluster.group import RaftGroup

# inputs (proposals, messages, ticks) a group may take in one pass and still run its Ready in that read's flush;
# past this the server is busy and the Ready waits for the end of the loop turn, so that the reads of the turn
# share one Ready (one append per follower for all of them): a lone entry goes at once, a stream batches
DEFER_INPUTS = 4

_transports: "weakref.WeakKeyDictionary[Any, RaftTransport]" = weakref.WeakKeyDictionary()
_runners: "weakref.WeakKeyDictionary[Any, _Runner]" = weakref.WeakKeyDictionary()


class _Runner:
    """Runs the queued groups' Ready loops of one server when its pending output is written out.

    It sits in ``server.pending_flush`` as a connection would (``write_out``; no transport, never closed,
    no connection kind, so the producer stall checks pass it by): ``flush_clients`` at the end of a read (or
    a slice of one) runs it, and writes the output it produced in the same call. A ``flush_clients`` made
    from inside a group's work (an apply answering an API request) does not run the groups again: the
    outer pass runs what was queued meanwhile, in order."""

    transport = None
    closed = False
    kind = None

    def __init__(self, server: Any) -> None:
        self.server = server
        self.groups: list["RaftGroup"] = []
        self.queued = False
        self.running = False

    def add(self, group: "RaftGroup") -> None:
        self.groups.append(group)
        if not self.queued:
            self.queued = True
            srv = self.server
            srv.pending_late.append(self)  # (after the connections, once the read is done: Server.pending_late)
            srv.schedule_flush()  # (outside a read nothing else would flush: the next turn of the loop does)

    def write_out(self) -> None:
        self.queued = False
        if self.running:
            return  # (a flush from inside a group's work: the outer pass below runs the rest)
        self.running = True
        try:
            while self.groups:
                groups, self.groups = self.groups, []
                for g in groups:
                    try:
                        n = g.node
                        if g._inputs > DEFER_INPUTS or (n is not None and n.role == FOLLOWER and n.apply_only()):
                            # busy: the rest of the loop turn's reads join in; or a follower's apply of a commit
                            # (nothing to persist or answer): after the turn's other reads (a PubAck to relay)
                            g.loop.call_soon(g._deferred)
                        else:
                            g._process()
                    except Exception as e:  # (not the reading connection's error: logged, the others run)
                        g.log.error(f"RAFT group {g.name!r}: processing failed: {e!r}\n{traceback.format_exc()}")
        finally:
            self.running = False


def _runner(server: Any) -> _Runner:
    r = _runners.get(server)
    if r is None:
        r = _runners[server] = _Runner(server)
    return r


class _PeerOps:
    """The RAFT entry ops each server this one has a route to decodes beyond the base set, by peer id: what its
    route INFO's ``rillet_raft_ops`` listed when the route registered (rillet.cluster.info.RILLET_RAFT_OPS). A
    server without a route now, or whose INFO lists none (an older Rillet build, nats-server), decodes none."""

    def __init__(self, cluster: Any) -> None:
        self.ops: dict[str, frozenset[int]] = {}
        if cluster is None:
            return
        cluster.route_listeners.append(self._route_event)
        for rc in list(cluster.routes.values()):
            info = getattr(rc, "remote_info", None)
            if info is not None:
                self._route_event("added", rc, info)

    def _route_event(self, what: str, rc: Any, info: Any) -> None:
        name = rc.remote_name or (info.server_name if info is not None else "")
        if not name:
            return
        if what == "added":
            self.ops[peer_id(name)] = frozenset(info.rillet_raft_ops or ())
        elif what == "gone":
            self.ops.pop(peer_id(name), None)


_peer_ops: "weakref.WeakKeyDictionary[Any, _PeerOps]" = weakref.WeakKeyDictionary()


def _ops_of(server: Any) -> _PeerOps:
    po = _peer_ops.get(server)
    if po is None:
        po = _peer_ops[server] = _PeerOps(getattr(server, "cluster", None))
    return po


def shared_transport(server: Any) -> RaftTransport:
    """The server's one RaftTransport (created on first use)."""
    t = _transports.get(server)
    if t is None:
        t = _transports[server] = RaftTransport(server)
    return t
