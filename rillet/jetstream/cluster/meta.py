"""The meta group (``_meta_``): every JetStream server of the cluster, the assignments, the meta-level API.

``JetStreamCluster`` is ``server.jetstream.cluster`` on a server with JetStream and a cluster port.

**Forming the group.** As nats-server, a server with no meta state expects as many JetStream servers as
it has configured routes (at least 2; a cluster's usual config lists every server's route, its own
included). It learns the others from route registrations (the route INFO ``go`` field tells a Rillet
server, ``python3.x``, from a Go one) and their statsz (sent at once to a new route; its ``jetstream``
flag), and once it knows that many (itself included) and no new one appeared for ``FOUND_SETTLE``
seconds, it founds the group with the peer ids of all the Rillet JetStream servers it knows. Rillet's
route INFO never sets ``jetstream``: a Go server counts such route peers in its own meta group and could
then not elect a leader without the votes a Rillet server never sends. The founding set is stored with the group (``peers.json``),
so a restart uses it again (``JetStream cluster recovering state``). A server started later, or one
whose state was wiped, founds with what it knows, which includes the running members (it does not wait
for the configured size when another server's statsz names a running meta leader; when the others run a
meta group without a leader for ``JOIN_LEADERLESS_AFTER`` seconds, it joins with no voter set of its own: a
wiped member while another is down). Joining a running group with no state, the member starts recovering and
without a vote (``wipedmember``: it may have acknowledged entries in a previous life that only it and a server now
down held), so a meta group left with one member that kept its log waits for the one that is down; the same rule
holds for the stream and consumer groups whose assignments this server had before. A wiped member is still a voter in the
leader's configuration: the leader's heartbeats find its log missing (rillet/raft) and send it the log or
a snapshot, and with them the voters, which replace its guess. A server that is not a member campaigns in
vain (its log is behind), and the meta leader, hearing a Rillet server in ``_meta_`` that is not a member (and
was not removed with ``SERVER.REMOVE`` less than ``REJOIN_AFTER`` ago: nats-server's 5 minutes), adds it (a
RAFT configuration entry, then a ``PEER_ADD`` meta entry): the new member gets the log, or a snapshot, and
the configuration from the leader. ``SERVER.REMOVE`` proposes the ``PEER_REMOVE`` entry first (so the
removed server applies it and stops its cluster layer, as nats-server disables JetStream there), then the
leader drops the voter and replaces the server in its stream groups. (nats-server
learns peers as their RAFT messages arrive; a fixed founding set is this module's simpler form of it.
Servers started together must agree on the set: start them with the full route list.)

**Go servers.** Rillet's RAFT groups speak ``$RNRG.``, which Go servers never subscribe to, so the two
never share a group. A Rillet server that sees a Go server running JetStream in its cluster (route INFO
``jetstream`` with a Go ``go`` field) does not form or join a meta group at all: it logs an error once,
stops its meta group if it had one, and stays silent on ``$JS.API`` (the Go servers answer). The Go
servers' meta group is never touched (tests/test_jscluster_meta_restart.py runs one with two Go servers).

**Applying.** Every member applies the log to a ``MetaState`` and tells the streams layer
(``ClusteredStreams`` in ``streams.py``, when present): ``stream_assigned(sa)``, ``stream_removed(sa)``,
``consumer_assigned(ca)``, ``consumer_removed(ca)`` (a removed stream's consumers first). Entries
re-applied at start (up to the commit recovered from the WAL) carry no ``reply``, so nobody answers an
old request again. The state is snapshotted as ``meta_compact.py`` says (``jetstream { meta_compact,
meta_compact_size }``; by default every ``COMPACT_EVERY`` entries); streams are never forgotten: the assignments live in the meta WAL and snapshots.

**Scale, move, replacement.** An update changing ``num_replicas`` or ``placement`` sets the group's
``desired`` state (nats-server 2.15); the meta leader's timer then moves each such group one member at a
time (``_reconcile_one``: add one, wait until current, ..., drop the old ones, followers first); a scale
down first records the peers kept; the consumers get desired states of their own and are moved one member
at a time before the stream's old peers go. nats-server 2.15 has its group leaders drive these steps (the
meta leader records); here the meta leader drives and the group leaders follow their assignments, reporting
the step in ``cluster.desired.status``. The README describes the rules.

**The API.** Every JetStream server receives ``$JS.API.>``. The meta leader answers INFO, STREAM.CREATE/
UPDATE/DELETE/NAMES/LIST, CONSUMER.CREATE/DURABLE.CREATE/DELETE/NAMES/LIST, STREAM.PEER.REMOVE, and in
the system account META.LEADER.STEPDOWN and SERVER.REMOVE; other servers stay silent, and when no meta
leader has been known for ``LEADERLESS_AFTER`` seconds they answer 503 10008 as nats-server does. Creates
and updates are answered after their entry is applied, with the stream (consumer) info of the new
group's leader, asked with ``streams.stream_info(account, name)`` (``consumer_info(account, stream,
name)``) locally or, over ``$JSC.SI`` / ``$JSC.CI`` in the system account, on the server whose
``ClusteredStreams`` answers (only the group leader should). Deletes are answered by the meta leader
after apply.
"""
from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from rillet.jetstream.api import codec as apijson
from rillet.gocompat.gotime import format_time
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster import monitor as MON
from rillet.jetstream.cluster.group import RaftGroup
from rillet.jetstream.api.cluster import MetaApi
from rillet.jetstream.cluster.meta_compact import DEFAULT_ENTRIES as COMPACT_EVERY, MetaCompaction  # noqa: F401
from rillet.jetstream.cluster.meta_info import InfoRequests
from rillet.jetstream.cluster.meta_monitor import MetaMonitor
from rillet.jetstream.cluster.meta_reconcile import RECONCILE_EVERY, MetaReconcile
from rillet.jetstream.cluster.peers import META_STATE_KEY, ORPHAN_AFTER, JSConfig, JSStats, PeerRegistry, peer_id
from rillet.jetstream.cluster.wipedmember import MemberHistory
from rillet.jetstream.log import NotLeader
from rillet.handles import cancelled

if TYPE_CHECKING:
    from rillet.jetstream.cluster.clustered import ClusteredStreams

LEADERLESS_AFTER = 10.0  # seconds without a meta leader before requests are answered 503 (nats-server: 10 s)
FOUND_SETTLE = 0.3  # seconds without a new JetStream server before a new cluster's founding set is taken
CAMPAIGN_AFTER = 0.1  # seconds between founding the meta group and the first member's campaign
# seconds a server that cannot found (too few servers known) waits, seeing another server run a meta group
# without a leader, before it joins that group (a member whose state was lost while another is down: recovering,
# it votes once caught up from a leader)
JOIN_LEADERLESS_AFTER = 2.0
FOUND_SETTLE_GATEWAYS = 0.5  # the same in a super-cluster (statsz crossing gateways come later)
# wins); doubled up to INFO_TIMEOUT while unanswered
DROP_AFTER = 0.5  # seconds between a server's PEER_REMOVE entry and its removal from the voters
SWEEP_EVERY = 5.0  # seconds between looks for servers not heard from (meta timer)
REJOIN_AFTER = 300.0  # a server removed from the meta group may rejoin after (nats-server: 5 min)

# the requests only the meta leader answers (after the $JS.API. prefix)


def _is_rillet(go_field: str) -> bool:
    return go_field.startswith("python")


def _default_limits() -> tuple[int, int]:
    """nats-server's defaults for unset JetStream limits: 75% of the memory, 1 TB of storage."""
    mem = 0
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    except (ValueError, OSError, AttributeError):
        mem = 1 << 30
    return mem, 1 << 40


class JetStreamCluster(MetaReconcile):
    """Clustered JetStream on one server: the meta group, the peer registry, the meta-level API."""

    def __init__(self, js: Any) -> None:
        self.js = js
        self.server = server = js.server
        self.log = server.log
        self.name = server.cluster.name
        self.peer = peer_id(server.name)
        self.state = A.MetaState()
        self.registry = PeerRegistry.attach(server)
        self.registry.listeners.append(self._registry_changed)
        self.group: Optional[RaftGroup] = None
        self.streams: ClusteredStreams | None = None  # this server's stream and consumer replicas (once started)
        self.rillet_routes: dict[str, str] = {}  # server id -> name: Rillet servers we have routes to
        self.rillet_js: dict[str, str] = {}  # server id -> name: those of them running JetStream (statsz)
        self.go_js: dict[str, str] = {}  # server id -> name: Go servers running JetStream (routes)
        self.isolated = False
        self.store_dir = js.store_dir
        self.started_at = 0.0
        self.leader_seen_at = 0.0
        self._last_leader: Optional[str] = None
        self._waiters: dict[int, tuple[bytes, Callable[[Any, Optional[BaseException]], None]]] = {}
        # creates on their way through the log: (account, stream) -> (config JSON, answers to give after)
        self._inflight: dict[tuple[str, str], tuple[dict, list[Callable[[], None]]]] = {}
        self._replay_through = 0
        # the stream and consumer groups this server had a member of before (wipedmember: a member of one that
        # starts with no state on disk was wiped, and starts recovering without votes)
        self.members = MemberHistory(self.peer)
        self._compaction = MetaCompaction()  # (when to snapshot: meta_compact, meta_compact_size)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._found_task: Optional[asyncio.Task] = None
        self._meta_decided = False  # start() has seen whether a meta state is on disk (statsz META_STATE_KEY)
        self._ic: Any = None
        self._req_ids = itertools.count(1)
        self._replies: dict[str, asyncio.Future] = {}
        self._sys_subs: list[Any] = []
        self._warned: dict[str, float] = {}
        self.running = False
        self.apply_error = ""
        self._reconciling: set[tuple[str, str]] = set()
        self._filled_at = 0.0
        self._replacing: dict[tuple[str, str, str], float] = {}  # (acc, stream, peer) -> when
        self._removed_at: dict[str, float] = {}  # peer -> when its removal was applied here
        self._foreign: dict[str, float] = {}  # non-member Rillet servers heard in _meta_ -> when (leader)
        self._swept_at = 0.0
        self.api = MetaApi(self)  # the $JS.API this server answers as a member of the cluster
        self.info = InfoRequests(self)  # $JSC.SI / $JSC.CI: stream and consumer info between servers
        self.mon = MetaMonitor(self)  # /jsz, /raftz, /healthz
        self.orphan_after = ORPHAN_AFTER  # seconds without a statsz before a server is offline (tests lower it)
        self.removed = False  # this server was removed from the meta group (SERVER.REMOVE)
        self.traffic: Any = None  # traffic.TrafficMover (once started)

    # ---- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        srv = self.server
        o = srv.opts
        log = self.log
        log.notice("Starting JetStream cluster")
        if not o.cluster.routes and not (o.leaf is not None and o.leaf.remotes):
            raise ValueError("Can't start JetStream: JetStream cluster requires configured routes or "
                             "solicited leafnode for the system account")
        if srv.system_account is None:
            raise ValueError("Can't start JetStream: JetStream cluster requires the system account")
        log.notice("Creating JetStream metadata controller")
        from rillet.jetstream.cluster.grouprun import shared_transport
        from rillet.jetstream.cluster.traffic import TrafficMover
        # where each stream's and consumer's group talks (the accounts' cluster_traffic), before any group joins
        self.traffic = TrafficMover(srv, self.registry, shared_transport(srv), log)
        if importlib.util.find_spec("rillet.jetstream.cluster.streams") is not None:
            from rillet.jetstream.cluster.clustered import ClusteredStreams
            self.streams = ClusteredStreams(srv, self.js)
        self.loop = asyncio.get_running_loop()
        self.started_at = self.loop.time()
        self.running = True
        self._ic = ic = srv.internal_client(srv.system_account, "jetstream cluster")
        ic.subscribe("$JSC.SI", self.info._on_stream_info_req)
        ic.subscribe("$JSC.CI", self.info._on_consumer_info_req)
        ic.subscribe(f"$JSC.R.{self.peer}.*", self.info._on_reply)
        ic.subscribe(f"$JSC.Z.{self.peer}", self._on_statsz_reply)
        for p in self.js_api_prefixes():
            ic.subscribe(f"{p}.META.LEADER.STEPDOWN", self.api._on_sys_api)
            ic.subscribe(f"{p}.SERVER.REMOVE", self.api._on_sys_api)
            ic.subscribe(f"{p}.ACCOUNT.PURGE.*", self.api._on_account_purge)
            self.api.subscribe_moves(ic, p)  # (moves, evacuations, META.RESCUE: rillet/jetstream/api/moves.py)
        cl = srv.cluster
        cl.route_listeners.append(self._route_event)
        gw = srv.gateway
        if gw is not None:
            gw.listeners.append(self._gateway_event)
        for rid, rc in list(cl.routes.items()):
            info = getattr(rc, "remote_info", None)
            if info is not None:
                self._route_event("added", rc, info)
        self._refresh_local()
        self._meta_decided = True
        if os.path.exists(os.path.join(self.store_dir, "_raft", A.META_GROUP, "peers.json")):
            log.notice("JetStream cluster recovering state")
            await self._start_group([])
        else:
            log.notice("JetStream cluster bootstrapping")
            self._found_task = self.loop.create_task(self._found())
        self._timer = self.loop.call_later(0.25, self._on_timer)

    def js_api_prefixes(self) -> list[str]:
        return ["$JS.API"] + ([f"$JS.{self.js.domain}.API"] if self.js.domain else [])

    def expected_size(self) -> int:
        """nats-server's expected founding size: the configured routes plus, in a super-cluster, one per
        configured gateway URL of another cluster (a host name counts its addresses), at least 2."""
        return max(2, len(self.server.opts.cluster.routes) + self._gateway_peers())

    def _gateway_peers(self) -> int:
        g = self.server.opts.gateway_opts
        if g is None or not self.server.gateway:
            return 0
        import ipaddress
        import socket
        from urllib.parse import urlsplit
        n = 0
        for r in g.gateways:
            if r.name == self.name:
                continue
            for u in r.urls:
                host = urlsplit(u if "://" in u else "nats://" + u).hostname or ""
                try:
                    ipaddress.ip_address(host)
                    n += 1
                except ValueError:
                    try:
                        n += len({a[4][0] for a in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
                    except OSError as e:
                        self.log.warn(f"JetStream cluster: gateway host {host!r} not resolved: {e}")
        return n

    def _founding_size(self, expected: int) -> int:
        """The expected size, or fewer in mixed mode (nats-server's checkClusterSize): once as many servers
        as expected are known and each has told in its statsz whether it runs JetStream, the servers
        without JetStream are not waited for (they never vote)."""
        others = [ni for ni in self.registry.nodes.values()
                  if ni.id != self.server.server_id and ni.name != self.server.name and not ni.offline]
        if len(others) + 1 < expected or not all(ni.statsz_seen for ni in others):
            return expected
        return min(expected, 1 + sum(1 for ni in others if ni.js))

    def _gateways_up(self) -> bool:
        """Every remote cluster this server knows of has its outbound gateway registered."""
        gw = self.server.gateway
        return gw is None or all(name in gw.out for name in gw.remotes)

    async def _found(self) -> None:
        loop = self.loop
        last_count, since = -1, loop.time()
        expected = self.expected_size()
        gw = self.server.gateway
        settle = FOUND_SETTLE if gw is None else FOUND_SETTLE_GATEWAYS
        sent_at = -1e9
        leaderless_since = None
        while self.running and not self.isolated:
            n = len(self.rillet_js) + 1
            undecided, held = self._peers_meta_state()
            if loop.time() - sent_at >= 0.25 and (gw is not None or n < expected or undecided):
                # (our statsz to the other clusters, as their gateways come up: they learn us from it; and
                # theirs asked for, as nats-server pings for statsz: servers without JetStream too, which
                # the founding size does not wait for once known, see _founding_size)
                sent_at = loop.time()
                if gw is not None:
                    self._send_statsz()
                if self._ic is not None:
                    self._ic.publish(b"$SYS.REQ.SERVER.PING.STATSZ", f"$JSC.Z.{self.peer}".encode(), b"")
            if n != last_count:
                last_count, since = n, loop.time()
            elif (n >= self._founding_size(expected) and loop.time() - since >= settle and self._gateways_up()
                  and not undecided and not held):
                # (founding waits to hear from every Rillet server it knows whether its meta group holds state,
                # and founds nothing beside one that does: two servers whose stores were lost, started with the
                # survivor before its group had a leader, founded a new, empty group between themselves and every
                # stream was forgotten. They join the survivor's group below, without votes until caught up)
                break
            ml = self._running_meta_leader() if loop.time() - since >= settle else ""
            if ml:
                # (the group runs already: this server, started later or with its state lost, joins it now with
                # the servers it knows, whatever the others that are down; the leader sends it the log or a
                # snapshot, and with them the real voter set)
                self.log.notice(f"JetStream cluster: a meta group with leader {ml!r} is running, joining it")
                await self._start_group(self._known_peers(), running=True)
                return
            if self._meta_group_seen():
                if leaderless_since is None:
                    leaderless_since = loop.time()
                elif loop.time() - leaderless_since >= JOIN_LEADERLESS_AFTER:
                    # (the group exists on the others but has no leader, and this server cannot found: a member
                    # that lost its state while another is down. It joins without a voter set of its own, and, as
                    # a member of a running group starting with no state, recovering without a vote (wipedmember):
                    # the members that kept the log elect a leader once the one that is down is back (entries
                    # committed with it and with this member's lost log may be missing from the others), which
                    # then sends it the log and the voters)
                    self.log.notice("JetStream cluster: a meta group without a leader is running, joining it")
                    if held and n >= self._founding_size(expected):
                        # (every server known, and one holds state where this one holds none: the servers whose
                        # stores were lost are a quorum, or the others are down. Joining with the known set, its
                        # recovery queries reach the members that kept their logs, which report the loss)
                        self.log.error("JetStream cluster: this server's meta state is gone while "
                                       f"{', '.join(sorted(held))} kept theirs: joining their meta group, without a "
                                       "vote until caught up from its leader (if the servers that kept a meta state "
                                       "are fewer than a quorum, it elects none: $JS.API.META.RESCUE on one of them "
                                       "accepts the loss)")
                        await self._start_group(self._known_peers(), running=True)
                    else:
                        await self._start_group([], join=True)
                    return
            else:
                leaderless_since = None
            await asyncio.sleep(0.05)
        if not self.running or self.isolated:
            return
        peers = self._known_peers()
        # (a meta leader already running: this server joins an existing group, with no state: wipedmember)
        await self._start_group(peers, running=bool(self._running_meta_leader()))

    def _running_meta_leader(self) -> str:
        """The meta leader another online Rillet JetStream server of ours named in its last statsz ("" when none
        did, or when this server does not know the leader's server yet: founding without it, a server that is
        not a member would ask everyone but the leader, and never be added)."""
        mine = set(self.rillet_js.values())
        for ni in self.registry.nodes.values():
            if (ni.meta_leader and not ni.offline and ni.name in mine and ni.name != self.server.name
                    and ni.meta_leader in mine):
                return ni.meta_leader
        return ""

    def _known_peers(self) -> list[str]:
        """The peer ids of this server and of every Rillet JetStream server it knows, sorted."""
        return sorted({self.peer, *(peer_id(name) for name in self.rillet_js.values())})

    def _peers_meta_state(self) -> tuple[list[str], list[str]]:
        """(the online Rillet JetStream servers of ours whose statsz has not said whether their meta group holds
        state, those whose group does)"""
        mine = set(self.rillet_js.values())
        undecided, held = [], []
        for ni in self.registry.nodes.values():
            if ni.offline or ni.name not in mine or ni.name == self.server.name:
                continue
            if ni.meta_state is None:
                undecided.append(ni.name)
            elif ni.meta_state:
                held.append(ni.name)
        return undecided, held

    def _meta_group_seen(self) -> bool:
        """Another online Rillet JetStream server of ours runs a meta group (its statsz has a meta section)."""
        mine = set(self.rillet_js.values())
        return any(ni.meta_group and not ni.offline and ni.name in mine and ni.name != self.server.name
                   for ni in self.registry.nodes.values())

    async def _start_group(self, peers: list[str], join: bool = False, running: bool = False) -> None:
        """``join``: a running group without a leader, no voter set of our own; ``running``: a running group (with
        either, a member starting with no state on disk starts recovering without votes: wipedmember)."""
        if join or running:
            self.members.old.add(A.META_GROUP)
        g = RaftGroup(self.server, A.META_GROUP, peers, self.store_dir, apply=self._apply,
                      on_leader_change=self._leader_changed, snapshot=self.state.snapshot,
                      restore=self._restore, sync="always")
        g.on_foreign_peer = self._foreign_peer
        g.apply_batch = lambda begin: self.members.committing(g.node) if begin and g.node is not None else None
        self.group = g
        self.members.load(g.dir)
        self.members.starting = True
        try:
            await g.start()
        finally:
            self.members.starting = False
        self.members.started(g.node)
        self._replay_through = g.node.commit
        if not join and g.peers and min(g.peers) == self.peer:
            # (every member knows the same set: one of them stands soon, no split votes; after a moment, so
            # that the others, which found within a few ms of us, have joined the group and can vote)
            self.loop.call_later(CAMPAIGN_AFTER if peers else 0.0, g.campaign_soon)
        self.leader_seen_at = self.loop.time()

    async def stop(self) -> None:
        # Hand over first, as nats-server transfers its RAFT leaderships on shutdown: every replicated stream
        # and consumer this server leads, then the meta group (the others elect at once instead of waiting for
        # an election timeout to notice that the leader went).
        handed = 0
        groups = [] if self.streams is None else self.streams.raft_groups()
        g = self.group
        if g is not None:
            groups.append(g)
        for rg in groups:
            if rg.is_leader and len(rg.peers) > 1:
                try:
                    rg.stepdown()
                    handed += 1
                except (NotLeader, ValueError) as e:
                    self.log.debug(f"JetStream cluster: no leader transfer of {rg.name} on shutdown: {e}")
        if handed:
            # (nats-server sends the transfers and goes on: two turns of the loop let the groups send them and
            # the routes write them out before the groups stop; the routes close later)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        self.running = False
        self._timer = cancelled(self._timer)
        if self._found_task is not None:
            self._found_task.cancel()
        cl = self.server.cluster
        if cl is not None and self._route_event in cl.route_listeners:
            cl.route_listeners.remove(self._route_event)
        gw = self.server.gateway
        if gw is not None and self._gateway_event in gw.listeners:
            gw.listeners.remove(self._gateway_event)
        await self._stop_groups()
        if self._ic is not None:
            for sub in list(self._ic.subs.values()):
                self._ic.remove_sub(sub)
        for f in self._replies.values():
            if not f.done():
                f.cancel()

    # ---- peers ------------------------------------------------------------------------------------

    def _route_event(self, what: str, rc: Any, info: Any) -> None:
        """A route to another server registered (``added``, with its INFO) or its last route closed."""
        rid = rc.remote_id
        if what == "added":
            if _is_rillet(info.go or ""):
                self.rillet_routes[rid] = info.server_name
                self.registry.route_added(info.server_name, rid, info.cluster or self.name, domain=info.domain)
                # our statsz to the newcomer (its subscription to statsz crosses the route first): it says
                # whether we run JetStream (Rillet's route INFO never does, see _registry_changed)
                for delay in (0.1, 0.5):
                    self.loop.call_later(delay, self._send_statsz)
            elif info.jetstream:
                self.go_js[rid] = info.server_name
                self._isolate(info.server_name, info.version)
        elif what == "gone":
            self.rillet_routes.pop(rid, None)
            self.rillet_js.pop(rid, None)
            self.registry.server_gone(rid)

    def _on_statsz_reply(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                         msg: bytes) -> None:
        """A server's answer to our statsz ping (while founding): into the registry like its STATSZ event."""
        self.registry.statsz(bytes(msg[hdr:] if hdr > 0 else msg))

    def _gateway_event(self, direction: str, name: str) -> None:
        """A gateway connection to or from another cluster registered: our statsz to that cluster (once its
        interest in statsz has come back), so that its servers learn this one (meta membership, placement)."""
        for delay in (0.2, 0.6):
            self.loop.call_later(delay, self._send_statsz)

    def _registry_changed(self, peer: str) -> None:
        """A registry entry changed: a Rillet server's statsz saying it runs JetStream makes it a
        candidate meta member. (Rillet's route INFO does not carry the ``jetstream`` flag: a Go server
        counts every route peer that has it in its own meta group's expectations and then cannot elect a
        leader without votes Rillet never sends.)"""
        ni = self.registry.get(peer)
        if ni is None or ni.id == self.server.server_id:
            return
        if ni.id in self.rillet_routes:
            if ni.js and not ni.offline:
                self.rillet_js[ni.id] = ni.name
        elif ni.cluster and ni.cluster != self.name:
            # a server of another cluster of the super-cluster (its statsz crossed a gateway)
            if ni.offline:
                self.rillet_js.pop(ni.id, None)
            elif ni.rillet_js:
                self.rillet_js[ni.id] = ni.name
            elif ni.cap_js:
                self.go_js[ni.id] = ni.name
                self._isolate(ni.name, ni.version, ni.cluster)

    def _send_statsz(self) -> None:
        sa = self.server.sysacc
        if self.running and sa.client is not None:
            sa.publish_statsz(force=True)

    def _isolate(self, name: str, version: str, cluster: str = "") -> None:
        if self.isolated:
            return
        self.isolated = True
        self.log.error(f"JetStream cluster: server {name!r} is a nats-server {version} running JetStream in "
                       f"cluster {cluster or self.name!r}; Rillet servers can not share a JetStream meta group with "
                       f"nats-server, JetStream on this server is unavailable (remove JetStream from one kind "
                       f"of server or put them in separate clusters)")
        if self._found_task is not None:
            self._found_task.cancel()
        if self.group is not None:
            self.loop.create_task(self.group.stop())

    def _foreign_peer(self, peer: str, heard: bool = True) -> None:
        """A Rillet server spoke in _meta_ without being a member: the leader adds it (one at a time; the
        others heard meanwhile are retried from the timer, not only when they speak again)."""
        g = self.group
        if g is None or not g.is_leader or peer in g.peers:
            self._foreign.pop(peer, None)
            return
        if heard:
            self._foreign[peer] = self.loop.time()
        if peer in self.state.removed:
            # (nats-server: a removed peer may rejoin once peerRemoveTimeout, 5 minutes, has passed)
            at = self._removed_at.get(peer)
            if at is None:
                self._removed_at[peer] = at = self.loop.time()
            if self.loop.time() - at < REJOIN_AFTER:
                return
        try:
            g.add_peer(peer)  # (the node allows one configuration change at a time)
        except Exception as e:  # (a change in flight, or none allowed yet: its next message retries)
            self.log.debug(f"JetStream cluster: adding peer {peer} to the meta group deferred: {e}")
            return
        self.log.notice(f"JetStream cluster: adding server {self.registry.name_of(peer) or peer} to the meta group")
        try:
            self._propose(A.encode_peer_add(peer), lambda res, err: None)
        except NotLeader:
            pass  # (leadership lost meanwhile: the new leader adds it when it speaks again)

    def _refresh_local(self) -> None:
        o = self.server.opts
        mem, sto = self.js.max_memory, self.js.max_store
        dmem, dsto = _default_limits()
        cfg = JSConfig(mem if mem is not None and mem >= 0 else dmem, sto if sto is not None and sto >= 0 else dsto,
                       o.jetstream.unique_tag)
        t = self.js.totals()
        ha = self.ha_assets()
        self.registry.set_local(self.server.name, self.server.server_id, self.name, tags=o.tags,
                                version=self.server_version(), cfg=cfg,
                                stats=JSStats(t["memory"], t["storage"], 0, 0, ha))

    def ha_assets(self) -> int:
        """This server's HA assets as nats-server counts them (statsz and /jsz ``ha_assets``, what placement
        compares with ``jetstream { limits { max_ha_assets } }``): its RAFT nodes, the meta group included."""
        return (1 if self.group is not None else 0) + (self.streams.ha_groups() if self.streams is not None else 0)

    @staticmethod
    def server_version() -> str:
        import rillet
        return rillet.SERVER_VERSION

    def statsz_section(self) -> dict:
        """The ``jetstream`` section of this server's statsz (what other servers' placement reads)."""
        ni = self.registry.get(self.peer)
        cfg = ni.cfg if ni is not None and ni.cfg is not None else JSConfig()
        st = ni.stats if ni is not None and ni.stats is not None else JSStats()
        d: dict[str, Any] = {"config": {"max_memory": cfg.max_memory, "max_storage": cfg.max_storage,
                                        "store_dir": self.store_dir},
                             "stats": {"memory": st.memory, "storage": st.storage, "reserved_memory": 0,
                                       "reserved_storage": 0, "accounts": len(self.js.accounts),
                                       "ha_assets": st.ha_assets}}
        if cfg.unique_tag:
            d["config"]["unique_tag"] = cfg.unique_tag
        if self.group is not None:
            d["meta"] = MON.meta_cluster_info(self.mon.meta_view(), name=A.META_GROUP, with_replicas=False)
        if self._meta_decided:
            d[META_STATE_KEY] = self.holds_meta_state()
        return d

    def holds_meta_state(self) -> bool:
        """This server's meta group holds state: a log (or a snapshot) kept on disk or written since, or a commit
        heard. A group just founded holds none until its first leader commits; a wiped member that joined holds
        none until it has caught up. (False while founding.)"""
        g = self.group
        n = g.node if g is not None else None
        return n is not None and (n.last_index() > 0 or n.commit > 0)

    # ---- the meta group -----------------------------------------------------------------------------

    def _on_timer(self) -> None:
        if not self.running:
            return
        self._timer = self.loop.call_later(0.25, self._on_timer)
        g = self.group
        if g is None or not g.running:
            return
        now = self.loop.time()
        leader = g.leader
        if leader is not None:
            self.leader_seen_at = now
        if leader != self._last_leader:
            self._last_leader = leader
            if leader is None:
                self.log.notice("JetStream cluster no metadata leader")
            elif leader != self.peer:
                ni = self.registry.get(leader)
                self.log.notice(f"JetStream cluster new metadata leader: "
                                f"{ni.name if ni else leader}/{ni.cluster if ni and ni.cluster else self.name}")
        self._refresh_local()
        if now - self._swept_at >= SWEEP_EVERY:
            # (nats-server's orphan sweep: a server not heard from for ORPHAN_AFTER seconds is offline; a
            # server of another cluster killed without its SHUTDOWN event has no route whose loss says so)
            self._swept_at = now
            self.registry.sweep(self.orphan_after)
        if self._foreign:
            for p, at in list(self._foreign.items()):
                if now - at > 10.0:  # (not heard from for 10 s: it went away)
                    self._foreign.pop(p, None)
                else:
                    self._foreign_peer(p, heard=False)
        if self.is_leader():
            self._add_known_servers()
            self._drop_removed_voters()
            self._replace_removed()
            self._reconcile_tick(now)

    def leaderless(self) -> bool:
        """No meta leader known for LEADERLESS_AFTER seconds (or none ever, that long after start)."""
        if self.isolated:
            return True
        g = self.group
        now = self.loop.time()
        if g is not None and g.leader is not None:
            return False
        return now - max(self.leader_seen_at, self.started_at) >= LEADERLESS_AFTER

    def is_leader(self) -> bool:
        return self.group is not None and self.group.is_leader and not self.isolated

    def _leader_changed(self, leader: bool) -> None:
        if leader:
            self.log.notice("Self is new JetStream cluster metadata leader")
            self._last_leader = self.peer
            # (nats-server lists every member, the new leader first among them as its node sees it)
            reps = [MON.PeerState(self.server.name, self.peer, current=True), *self.mon.meta_view().replicas]
            subj, body = MON.meta_leader_elected_advisory(self.peer, reps, self.name, time.time_ns(),
                                                          self.js.domain)
            if self._ic is not None:
                self._ic.publish(subj.encode(), None, json.dumps(body).encode())
        else:
            waiters, self._waiters = self._waiters, {}
            for _, cb in waiters.values():
                cb(None, NotLeader())
            self._inflight.clear()

    def _propose(self, data: bytes, cb: Callable[[Any, Optional[BaseException]], None]) -> None:
        idx, _ = self.group.propose(data)
        self._waiters[idx] = (data, cb)

    def _apply(self, index: int, data: bytes) -> None:
        replay = index <= self._replay_through
        try:
            res = self.state.apply(data)
        except A.MetaEntryError as e:
            self.apply_error = str(e)
            w = self._waiters.pop(index, None)
            if w is not None:
                w[1](None, e)
            raise
        if replay:
            if res.stream is not None:
                res.stream.reply = ""
            if res.consumer is not None:
                res.consumer.reply = ""
        self._act(res, replay, self.members.is_old(index))
        w = self._waiters.pop(index, None)
        if w is not None:
            w[1](res, None) if w[0] == data else w[1](None, NotLeader())
        g = self.group
        if g is not None and self._compaction.due(self.server.opts, g.node.offset, index, len(data)):
            g.compact()

    def _act(self, res: A.Applied, replay: bool = False, old: bool = False) -> None:
        """Tell the streams layer; ``old``: an assignment this server had before (wipedmember)."""
        st = self.streams
        op = res.op
        if op == A.EntryOp.PEER_REMOVE and res.changed:
            self._peer_removed(res.peer, replay)
            return
        if st is None or not res.changed:
            return
        if op in (A.EntryOp.ASSIGN_STREAM, A.EntryOp.UPDATE_STREAM):
            self.members.stream(res.stream, old)
            st.stream_assigned(res.stream)
        elif op == A.EntryOp.REMOVE_STREAM:
            old = res.previous
            for cn in sorted(old.consumers):
                st.consumer_removed(old.consumers[cn])
            st.stream_removed(old)
        elif op == A.EntryOp.ASSIGN_CONSUMER:
            self.members.consumer(res.consumer, old)
            st.consumer_assigned(res.consumer)
        elif op == A.EntryOp.REMOVE_CONSUMER:
            st.consumer_removed(res.previous)

    def _peer_removed(self, peer: str, replay: bool) -> None:
        """A server left the meta group (SERVER.REMOVE): it may come back after REJOIN_AFTER; the meta
        leader moves its stream groups to other peers; the server itself stops its JetStream cluster
        layer, as nats-server disables JetStream there ("our server was removed from the cluster")."""
        self._removed_at[peer] = self.loop.time()
        if replay:
            return
        if peer == self.peer:
            self.log.error("JetStream being DISABLED, our server was removed from the cluster")
            self.removed = True
            if self._ic is not None:
                body = {"type": "io.nats.jetstream.advisory.v1.server_removed", "id": MON._event_id(),
                        "timestamp": format_time(time.time_ns()), "server": self.server.name,
                        "server_id": self.server.server_id, "cluster": self.name}
                if self.js.domain:
                    body["domain"] = self.js.domain
                self._ic.publish(b"$JS.EVENT.ADVISORY.SERVER.REMOVED", None, apijson.go_json(body))
            self.loop.create_task(self._leave())
            return
        if self.is_leader():
            self._replace_removed()

    def _replace_removed(self) -> None:
        """Streams with a peer the log removed from the meta group get a replacement (the meta leader, at
        the removal and on its timer: a leader elected after the removal does it too)."""
        now = self.loop.time()
        for sa in list(self.state.iter_streams()):
            gone = [p for p in sa.group.peers + list((sa.group.desired or {}).get("peers") or ())
                    if p in self.state.removed and not self._may_rejoin(p)]
            key = (sa.account, sa.name, gone[0]) if gone else None
            if key is None or now - self._replacing.get(key, -1e9) < RECONCILE_EVERY:
                continue
            self._replacing[key] = now
            self._replace_peer(sa, gone[0])

    def _add_known_servers(self) -> None:
        """The meta leader adds every online Rillet JetStream server it knows of that is not a member, as
        nats-server's leader adds a JetStream server it learns of from its statsz. (Servers founding at the
        same moment can found apart: of three, one may found with the one other server it knew, the other two
        together; its campaign then reaches only a follower of the real group, never this leader.)"""
        g = self.group
        for name in list(self.rillet_js.values()):
            p = peer_id(name)
            if p != self.peer and p not in g.peers and (p not in self.state.removed or self._may_rejoin(p)):
                self._foreign_peer(p, heard=False)
                return  # (one configuration change at a time)

    def _may_rejoin(self, peer: str) -> bool:
        at = self._removed_at.get(peer)
        return at is not None and self.loop.time() - at >= REJOIN_AFTER

    def _drop_removed_voters(self) -> None:
        """The meta leader takes the servers the log removed out of the RAFT configuration (one change at
        a time: retried from the timer while another is in flight)."""
        g = self.group
        now = self.loop.time()
        for p in sorted(self.state.removed):
            # (after DROP_AFTER: the removed server learns from a heartbeat or two that the PEER_REMOVE
            # entry is committed; once out of the configuration it hears nothing more from the leader)
            if (p in g.peers and p != self.peer and not self._may_rejoin(p)
                    and now - self._removed_at.get(p, now) >= DROP_AFTER):
                try:
                    g.remove_peer(p)
                except NotLeader:
                    return
                except Exception as e:  # (a configuration change in flight: the timer retries)
                    self.log.debug(f"JetStream cluster: removing {p} from the meta group deferred: {e}")
                    return
                self.log.notice(f"JetStream cluster: server {self.registry.name_of(p) or p} removed from "
                                f"the meta group")
                return

    async def _leave(self) -> None:
        await asyncio.sleep(0.2)  # (the entry's commit reaches the others first)
        await self._stop_groups()

    async def _stop_groups(self) -> None:
        """This server's stream and consumer replicas, then its meta group member."""
        if self.streams is not None:
            await self.streams.stop()
        if self.group is not None:
            await self.group.stop()

    def _restore(self, data: bytes) -> None:
        """A snapshot (at start, or installed from the leader): the state is replaced and the streams
        layer is told what appeared, changed or went."""
        old = {(sa.account, sa.name): sa for sa in self.state.iter_streams()}
        self.state.restore(data)
        had = self.members.restored()
        for sa in self.state.iter_streams():
            self.members.stream(sa, had)
        st = self.streams
        if st is None:
            return
        new = {(sa.account, sa.name): sa for sa in self.state.iter_streams()}
        for key, sa in old.items():
            if key not in new:
                for cn in sorted(sa.consumers):
                    st.consumer_removed(sa.consumers[cn])
                st.stream_removed(sa)
        for key, sa in new.items():
            sa.reply = ""
            st.stream_assigned(sa)
            osa = old.get(key)
            for cn in sorted(sa.consumers):
                st.consumer_assigned(sa.consumers[cn])
            if osa is not None:
                for cn in sorted(osa.consumers):
                    if cn not in sa.consumers:
                        st.consumer_removed(osa.consumers[cn])
