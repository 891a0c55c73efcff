"""Which account the RAFT traffic of a stream's or consumer's group travels in: nats-server 2.11's account setting
``jetstream { cluster_traffic: owner }`` (``system``, the default, keeps it in the system account).

nats-server (``raft.go`` ``recreateInternalSubs``): a group whose asset belongs to an account configured with
``owner`` sends and receives its RAFT messages (votes, appends and their answers, proposals, catch-up, snapshots)
in that account, provided that every peer of the group claims the capability (the ``AccountNRG`` bit, 4, of the
``flags`` in its server info / statsz; a peer not known yet does not count against it). Otherwise, and always for
the meta group, in the system account. Stream catch-up on ``$JSC.SYNC.*`` and the servers' info requests stay in
the system account, as there. The decision is taken again when a peer's claim changes (its statsz), and the
groups whose answer changed move: their subscriptions leave one account and are made in the other.

When the decision is taken: when the group starts (a new stream or consumer, a restart), and for every running
group when a peer's claim changes. A configuration reload moves no running group (nats-server 2.15.1, seen live:
the stream info keeps its ``traffic_account`` until a restart), but the groups started after it follow the new
setting. (nats-server also decides again when a server it has not heard from before appears, its
``processNewServer``, so that a reload there takes effect on a server's restart anywhere in the cluster, or at a
first statsz that came late; Rillet does not, so that the servers of a group never decide at different moments
for a statsz that one of them got later than the others: a reload takes effect on each server at its restart.)

Rillet's groups do the same with their own subjects (``$RNRG.``, transport.py), and a Rillet server claims the
capability in its statsz when it runs JetStream. A peer entry that has had no statsz yet (only a route
registration) counts as unknown here, so that a route coming back does not move every group to the system account
until that peer's next statsz. The stream and consumer info ``cluster`` (``system_account``, ``traffic_account``)
and ``/raftz`` say where each group's traffic is. The clients of an account that asks for owner traffic, or whose
account carries a group's traffic, may not publish to ``$RNRG.`` or ``$NRG.`` (``server.raft_accounts``; nats-server
refuses ``$NRG.`` to the clients of every account but the system's).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

OWNER = "owner"
SYSTEM = "system"
RELOAD_CHECK = 0.5  # seconds between looks at the server's reload count (a reload has no listeners to tell)


def cluster_traffic_setting(opts: Any, account: str) -> str:
    """The ``cluster_traffic`` of ``account``'s ``jetstream`` block in ``opts`` (``system`` when not set)."""
    accs = getattr(opts, "accounts", None) or {}
    acc = accs.get(account) if isinstance(accs, dict) else None
    js = acc.get("jetstream") if isinstance(acc, dict) else None
    if isinstance(js, dict):
        v = js.get("cluster_traffic")
        if isinstance(v, str) and v:
            return v
    return SYSTEM


def owner_traffic(server: Any, account: str) -> bool:
    """Whether ``account`` asked for its groups' traffic in itself: its configuration (``accounts { A { jetstream
    { cluster_traffic: owner } } }``), or in operator mode its JWT's ``cluster_traffic``."""
    if cluster_traffic_setting(server.opts, account) == OWNER:
        return True
    op = getattr(server, "operator", None)
    infos = getattr(op, "infos", None) if op is not None else None
    info = infos.get(account) if isinstance(infos, dict) else None
    nats = getattr(info, "nats", None)
    return isinstance(nats, dict) and nats.get("cluster_traffic") == OWNER


class TrafficMover:
    """One server's decision of where each group's traffic goes (``choose``, given to the RaftTransport), and the
    moves when the answer changes."""

    def __init__(self, server: Any, registry: Any, transport: Any, log: Any) -> None:
        self.server = server
        self.registry = registry
        self.transport = transport
        self.log = log
        self.own_peer = transport.peer
        self._claims: dict[str, bool] = {}  # peer -> its last statsz's AccountNRG claim
        for peer, ni in list(registry.nodes.items()):  # (known before this: no news when their next statsz comes)
            if ni.statsz_seen and peer != self.own_peer:
                self._claims[peer] = bool(ni.account_nrg)
        transport.choose = self.choose
        registry.listeners.append(self._registry_changed)
        self.guard()
        self._reloads = getattr(server, "reload_count", 0)
        loop = getattr(server, "loop", None)
        self._timer = loop.call_later(RELOAD_CHECK, self._watch) if loop is not None else None

    def _watch(self) -> None:
        """(Every RELOAD_CHECK seconds) a configuration reload since the last look: ``reloaded``."""
        srv = self.server
        self._timer = None
        if getattr(srv, "shutting_down", False):
            return
        n = getattr(srv, "reload_count", 0)
        if n != self._reloads:
            self._reloads = n
            self.reloaded()
        self._timer = srv.loop.call_later(RELOAD_CHECK, self._watch)

    def guard(self) -> None:
        """``server.raft_accounts``: the accounts asking for owner traffic, whose clients may not publish to the
        RAFT subjects (rillet.server.client ``_raft_subject``, as nats-server refuses ``$NRG.`` to clients outside
        the system account); the clients of an account that came in or left take the check or drop it."""
        srv = self.server
        sys_acc = srv.system_account
        now = {n for n in list(srv.accounts) if (sys_acc is None or n != sys_acc.name) and owner_traffic(srv, n)}
        now |= {a for a in self.transport.accounts() if sys_acc is None or a != sys_acc.name}
        before = getattr(srv, "raft_accounts", set())
        srv.raft_accounts = now
        for name in now ^ set(before):
            acc = srv.accounts.get(name)
            for c in list(getattr(acc, "clients", ())):
                update = getattr(c, "update_slow_path", None)
                if update is not None:
                    update()

    def choose(self, owner: str, peers: Callable[[], list]) -> Optional[Any]:
        """The account for the traffic of a group whose asset ``owner`` owns (None: the system account)."""
        srv = self.server
        sys_acc = srv.system_account
        if not owner or sys_acc is None or owner == sys_acc.name:
            return None
        acc = srv.accounts.get(owner)
        if acc is None or not owner_traffic(srv, owner):
            return None
        reg = self.registry
        for p in peers():
            if p == self.own_peer:
                continue  # (this server supports it)
            ni = reg.get(p)
            if ni is not None and ni.statsz_seen and not ni.account_nrg:
                return None  # a member that would not hear the group in the account
        return acc

    def _registry_changed(self, peer: str) -> None:
        """A registry entry changed: a peer's claim that changed (or a first claim of none) has every running group's
        traffic account decided again."""
        ni = self.registry.get(peer)
        if ni is None or not ni.statsz_seen or peer == self.own_peer:
            return
        claim = bool(ni.account_nrg)
        known = self._claims.get(peer)
        self._claims[peer] = claim
        if known == claim or (known is None and claim):
            return  # (not news; a peer heard of for the first time claiming it counted as capable already)
        self.retarget()

    def reloaded(self) -> None:
        """A configuration reload: the publish guard follows the accounts' new ``cluster_traffic``; the running groups
        stay where they are (as nats-server's), until the next ``retarget``."""
        self.guard()

    def retarget(self) -> None:
        moved = self.transport.retarget()
        for group, old, new in moved:
            self.log.notice(f"RAFT group {group!r}: replication traffic moved from account '{old}' to '{new}'")
        if moved:
            self.guard()
