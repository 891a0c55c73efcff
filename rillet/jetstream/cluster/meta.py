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
meta group without a leader for ``JOIN_LEADERLESS_AFTER`` seconds, it joins with no voter set of its own,
to vote but never campaign: a wiped member while another is down). A wiped member is still a voter in the
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
old request again. The state is snapshotted every ``COMPACT_EVERY`` entries; streams are never
forgotten: the assignments live in the meta WAL and snapshots.

**Scale, move, replacement.** An update changing ``num_replicas`` or ``placement`` sets the group's
``desired`` state (nats-server 2.15); the meta leader's timer then moves each such group one member at a
time (``_reconcile_one``: add one, wait until current, ..., drop the old ones, followers first). The README
describes the rules.

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
import random
import time
from typing import Any, Callable, Optional

from rillet.jetstream import configtypes as C
from rillet.jetstream import consumerconfig as CC
from rillet.jetstream import apijson
from rillet.jetstream import apitypes as AT
from rillet.jetstream import streamconfig as SC
from rillet.gocompat.gotime import format_time
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster import monitor as MON
from rillet.jetstream.cluster.group import RaftGroup
from rillet.jetstream.cluster.peers import ORPHAN_AFTER, JSConfig, JSStats, PeerRegistry, peer_id
from rillet.jetstream.cluster.placement import (PlacementConfig, PlacementError, consumer_replicas,
                                                create_consumer_group,
                                                create_stream_group, peer_usage, preferred_leader,
                                                select_peer_group)
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import NotLeader
from rillet.subjects.overlap import any_collision
from rillet.subjects.validate import subjects_collide

T = "io.nats.jetstream.api.v1."
JSON_LIMIT = 1024
LIST_LIMIT = 256
LEADERLESS_AFTER = 10.0  # seconds without a meta leader before requests are answered 503 (nats-server: 10 s)
FOUND_SETTLE = 0.3  # seconds without a new JetStream server before a new cluster's founding set is taken
OFFLINE_ANSWER_DELAY = 0.5  # seconds before the meta leader says a stream/consumer is offline (nats-server's errRespDelay)
CAMPAIGN_AFTER = 0.1  # seconds between founding the meta group and the first member's campaign
# seconds a server that cannot found (too few servers known) waits, seeing another server run a meta group
# without a leader, before it joins that group to vote (a member whose state was lost while another is down)
JOIN_LEADERLESS_AFTER = 2.0
FOUND_SETTLE_GATEWAYS = 0.5  # the same in a super-cluster (statsz crossing gateways come later)
COMPACT_EVERY = 1024  # meta entries between snapshots
CONFIG_WAIT = 3.0  # seconds an update's answer waits for the stream leader to apply the new config
ANSWER_WITHIN = 10.0  # seconds the meta leader waits for a new group's leader to give its info
INFO_TIMEOUT = 0.5  # one $JSC.SI / $JSC.CI request
DIRECT_ASK_TIMEOUT = 0.25  # a delete of a consumer not in the assignments: the wait for its stream leader's word
INFO_FIRST_TIMEOUT = 0.1  # the first ask of a create's answer (a member of a group electing answers once it
# wins); doubled up to INFO_TIMEOUT while unanswered
RECONCILE_EVERY = 2.0  # seconds between looks for groups short of replicas (meta leader)
DROP_AFTER = 0.5  # seconds between a server's PEER_REMOVE entry and its removal from the voters
SWEEP_EVERY = 5.0  # seconds between looks for servers not heard from (meta timer)
REJOIN_AFTER = 300.0  # a server removed from the meta group may rejoin after (nats-server: 5 min)

# the requests only the meta leader answers (after the $JS.API. prefix)
BIG_CONFIG = 4096  # a stream config body past this is checked in a worker thread (rillet.jetstream.api BIG_CONFIG)
META_KEYS = frozenset(("INFO", "STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE", "STREAM.NAMES", "STREAM.LIST",
                       "CONSUMER.CREATE", "CONSUMER.DURABLE.CREATE", "CONSUMER.DELETE", "CONSUMER.NAMES",
                       "CONSUMER.LIST", "STREAM.PEER.REMOVE", "STREAM.RESTORE"))
_LIST_FIELDS = {"STREAM.NAMES": "streams", "STREAM.LIST": "streams", "CONSUMER.NAMES": "consumers",
                "CONSUMER.LIST": "consumers"}
_TYPES = {"INFO": "account_info_response", "STREAM.CREATE": "stream_create_response",
          "STREAM.UPDATE": "stream_update_response", "STREAM.DELETE": "stream_delete_response",
          "STREAM.NAMES": "stream_names_response", "STREAM.LIST": "stream_list_response",
          "CONSUMER.CREATE": "consumer_create_response", "CONSUMER.DURABLE.CREATE": "consumer_create_response",
          "CONSUMER.DELETE": "consumer_delete_response", "CONSUMER.NAMES": "consumer_names_response",
          "CONSUMER.LIST": "consumer_list_response", "STREAM.PEER.REMOVE": "stream_remove_peer_response",
          "META.LEADER.STEPDOWN": "meta_leader_stepdown_response", "SERVER.REMOVE": "meta_server_remove_response",
          "STREAM.RESTORE": "stream_restore_response"}


def _cfg_dict(cfg: Any) -> dict:
    return json.loads(apijson.go_json(cfg))


def _stream_cfg(d: dict) -> Any:
    return apijson.from_dict(d, C.StreamConfig)


def _consumer_cfg(d: dict) -> Any:
    return apijson.from_dict(d, C.ConsumerConfig)


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


class JetStreamCluster:
    """Clustered JetStream on one server: the meta group, the peer registry, the meta-level API."""

    def __init__(self, js: Any) -> None:
        self.js = js
        self.server = server = js.server
        self.log = server.log
        self.name = server.cluster.name
        self.peer = peer_id(server.name)
        self.state = A.MetaState()
        self.registry = PeerRegistry.attach(server)
        js.peer_registry = self.registry  # (the streams layer names peers with it)
        self.registry.listeners.append(self._registry_changed)
        self.group: Optional[RaftGroup] = None
        self.streams: Any = None  # rillet.jetstream.cluster.streams.ClusteredStreams, when present
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
        self._timer: Optional[asyncio.TimerHandle] = None
        self._found_task: Optional[asyncio.Task] = None
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
        self.orphan_after = ORPHAN_AFTER  # seconds without a statsz before a server is offline (tests lower it)
        self.removed = False  # this server was removed from the meta group (SERVER.REMOVE)

    # ---- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        srv = self.server
        o = srv.opts
        log = self.log
        log.notice("Starting JetStream cluster")
        if not o.cluster.routes and not (o.leaf is not None and o.leaf.remotes):
            raise ValueError("Can't start JetStream: JetStream cluster requires configured routes or "
                             "solicited leafnode for the system account")
        if getattr(srv, "system_account", None) is None:
            raise ValueError("Can't start JetStream: JetStream cluster requires the system account")
        log.notice("Creating JetStream metadata controller")
        if importlib.util.find_spec("rillet.jetstream.cluster.streams") is not None:
            from rillet.jetstream.cluster.streams import ClusteredStreams
            self.streams = ClusteredStreams(srv, self.js)
        self.loop = asyncio.get_running_loop()
        self.started_at = self.loop.time()
        self.running = True
        self._ic = ic = srv.internal_client(srv.system_account, "jetstream cluster")
        ic.subscribe("$JSC.SI", self._on_stream_info_req)
        ic.subscribe("$JSC.CI", self._on_consumer_info_req)
        ic.subscribe(f"$JSC.R.{self.peer}.*", self._on_reply)
        ic.subscribe(f"$JSC.Z.{self.peer}", self._on_statsz_reply)
        for p in self.js_api_prefixes():
            ic.subscribe(f"{p}.META.LEADER.STEPDOWN", self._on_sys_api)
            ic.subscribe(f"{p}.SERVER.REMOVE", self._on_sys_api)
            ic.subscribe(f"{p}.ACCOUNT.PURGE.*", self._on_account_purge)
        cl = srv.cluster
        cl.route_listeners.append(self._route_event)
        gw = getattr(srv, "gateway", None)
        if gw is not None:
            gw.listeners.append(self._gateway_event)
        for rid, rc in list(cl.routes.items()):
            info = getattr(rc, "remote_info", None)
            if info is not None:
                self._route_event("added", rc, info)
        self._refresh_local()
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
        g = getattr(self.server.opts, "gateway_opts", None)
        if g is None or not getattr(self.server, "gateway", None):
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
        gw = getattr(self.server, "gateway", None)
        return gw is None or all(name in gw.out for name in gw.remotes)

    async def _found(self) -> None:
        loop = self.loop
        last_count, since = -1, loop.time()
        expected = self.expected_size()
        gw = getattr(self.server, "gateway", None)
        settle = FOUND_SETTLE if gw is None else FOUND_SETTLE_GATEWAYS
        sent_at = -1e9
        leaderless_since = None
        while self.running and not self.isolated:
            n = len(self.rillet_js) + 1
            if loop.time() - sent_at >= 0.25 and (gw is not None or n < expected):
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
            elif n >= self._founding_size(expected) and loop.time() - since >= settle and self._gateways_up():
                break
            ml = self._running_meta_leader() if loop.time() - since >= settle else ""
            if ml:
                # (the group runs already: this server, started later or with its state lost, joins it now with
                # the servers it knows, whatever the others that are down; the leader sends it the log or a
                # snapshot, and with them the real voter set)
                self.log.notice(f"JetStream cluster: a meta group with leader {ml!r} is running, joining it")
                break
            if self._meta_group_seen():
                if leaderless_since is None:
                    leaderless_since = loop.time()
                elif loop.time() - leaderless_since >= JOIN_LEADERLESS_AFTER:
                    # (the group exists on the others but has no leader, and this server cannot found: a member
                    # that lost its state while another is down. It joins without a voter set of its own: it
                    # never campaigns, but votes, so the members that kept the log elect a leader, which then
                    # sends it the log and the voters)
                    self.log.notice("JetStream cluster: a meta group without a leader is running, joining it "
                                    "to vote")
                    await self._start_group([], join=True)
                    return
            else:
                leaderless_since = None
            await asyncio.sleep(0.05)
        if not self.running or self.isolated:
            return
        peers = sorted({self.peer, *(peer_id(name) for name in self.rillet_js.values())})
        await self._start_group(peers)

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

    def _meta_group_seen(self) -> bool:
        """Another online Rillet JetStream server of ours runs a meta group (its statsz has a meta section)."""
        mine = set(self.rillet_js.values())
        return any(ni.meta_group and not ni.offline and ni.name in mine and ni.name != self.server.name
                   for ni in self.registry.nodes.values())

    async def _start_group(self, peers: list[str], join: bool = False) -> None:
        g = RaftGroup(self.server, A.META_GROUP, peers, self.store_dir, apply=self._apply,
                      on_leader_change=self._leader_changed, snapshot=self.state.snapshot,
                      restore=self._restore, sync="always")
        g.on_foreign_peer = self._foreign_peer
        self.group = g
        await g.start()
        self._replay_through = g.node.commit
        if not join and g.peers and min(g.peers) == self.peer:
            # (every member knows the same set: one of them stands soon, no split votes; after a moment, so
            # that the others, which found within a few ms of us, have joined the group and can vote)
            self.loop.call_later(CAMPAIGN_AFTER if peers else 0.0, g.campaign_soon)
        self.leader_seen_at = self.loop.time()

    async def stop(self) -> None:
        g = self.group
        if g is not None and g.is_leader and len(g.peers) > 1:
            try:  # hand the meta leadership over first, as nats-server does on shutdown
                g.stepdown()
            except (NotLeader, ValueError) as e:
                self.log.debug(f"JetStream cluster: no meta leader stepdown on shutdown: {e}")
            else:
                # (nats-server sends the transfer and goes on: two turns of the loop let the group send it
                # and the routes write it out before the group stops; the routes close later)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
        self.running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._found_task is not None:
            self._found_task.cancel()
        cl = self.server.cluster
        if cl is not None and self._route_event in cl.route_listeners:
            cl.route_listeners.remove(self._route_event)
        gw = getattr(self.server, "gateway", None)
        if gw is not None and self._gateway_event in gw.listeners:
            gw.listeners.remove(self._gateway_event)
        if self.streams is not None and hasattr(self.streams, "stop"):
            r = self.streams.stop()
            if asyncio.iscoroutine(r):
                await r
        if self.group is not None:
            await self.group.stop()
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
        sa = getattr(self.server, "sysacc", None)
        if self.running and sa is not None and sa.client is not None:
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
        ha = sum(1 for sa in self.state.iter_streams() if len(sa.group.peers) > 1 and self.peer in sa.group.peers)
        self.registry.set_local(self.server.name, self.server.server_id, self.name, tags=o.tags,
                                version=self.server_version(), cfg=cfg,
                                stats=JSStats(t["memory"], t["storage"], 0, 0, ha))

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
            d["meta"] = MON.meta_cluster_info(self.meta_view(), name=A.META_GROUP, with_replicas=False)
        return d

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
            reps = [MON.PeerState(self.server.name, self.peer, current=True), *self.meta_view().replicas]
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
        self._act(res, replay)
        w = self._waiters.pop(index, None)
        if w is not None:
            w[1](res, None) if w[0] == data else w[1](None, NotLeader())
        g = self.group
        if g is not None and index - g.node.offset >= COMPACT_EVERY:
            g.compact()

    def _act(self, res: A.Applied, replay: bool = False) -> None:
        st = self.streams
        op = res.op
        if op == A.EntryOp.PEER_REMOVE and res.changed:
            self._peer_removed(res.peer, replay)
            return
        if st is None or not res.changed:
            return
        if op in (A.EntryOp.ASSIGN_STREAM, A.EntryOp.UPDATE_STREAM):
            st.stream_assigned(res.stream)
        elif op == A.EntryOp.REMOVE_STREAM:
            old = res.previous
            for cn in sorted(old.consumers):
                st.consumer_removed(old.consumers[cn])
            st.stream_removed(old)
        elif op == A.EntryOp.ASSIGN_CONSUMER:
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
        if self.streams is not None and hasattr(self.streams, "stop"):
            r = self.streams.stop()
            if asyncio.iscoroutine(r):
                await r
        if self.group is not None:
            await self.group.stop()

    def _restore(self, data: bytes) -> None:
        """A snapshot (at start, or installed from the leader): the state is replaced and the streams
        layer is told what appeared, changed or went."""
        old = {(sa.account, sa.name): sa for sa in self.state.iter_streams()}
        self.state.restore(data)
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

    # ---- reconciliation: scale, move, replaced peers (meta leader) -----------------------------------

    def _reconcile_tick(self, now: float) -> None:
        """On the meta leader's timer: drive every group with a ``desired`` state one step on (one task per
        stream at a time), and every RECONCILE_EVERY seconds give groups short of replicas a new peer."""
        fill = now - self._filled_at >= RECONCILE_EVERY
        if fill:
            self._filled_at = now
        for sa in list(self.state.iter_streams()):
            key = (sa.account, sa.name)
            if key in self._reconciling:
                continue
            if sa.group.desired is not None or self._consumers_off_target(sa, sa.group.peers):
                self._reconciling.add(key)
                self.loop.create_task(self._reconcile_one(key, (sa.group.desired or {}).get("id")))
            elif fill and len(sa.group.peers) < int(sa.config.get("num_replicas") or 1):
                self._fill_missing(sa)

    @staticmethod
    def _consumer_target(sa: A.StreamAssignment, ca: A.ConsumerAssignment, final: list[str]) -> list[str]:
        """The peers a consumer's group should have when its stream's are ``final``: its replica count
        (nats-server's rule: 0 or more than the stream's = the stream's), its current peers kept first."""
        n = consumer_replicas(ca.config, sa.config)
        keep = [p for p in ca.group.peers if p in final]
        return (keep + [p for p in final if p not in keep])[:n]

    def _consumers_off_target(self, sa: A.StreamAssignment, final: list[str]) -> list[A.ConsumerAssignment]:
        return [sa.consumers[cn] for cn in sorted(sa.consumers)
                if set(self._consumer_target(sa, sa.consumers[cn], final)) != set(sa.consumers[cn].group.peers)]

    @staticmethod
    def _members(info: Optional[dict], leader: str) -> tuple[set, set]:
        """(members, current members) from a stream or consumer info's ``cluster``."""
        members, current = {leader}, {leader}
        for r in ((info or {}).get("cluster") or {}).get("replicas") or ():
            p = r.get("peer") or peer_id(r.get("name") or "")
            members.add(p)
            if r.get("current"):
                current.add(p)
        return members, current

    async def _consumer_step(self, sa: A.StreamAssignment, ca: A.ConsumerAssignment, target: list[str]) -> None:
        """One member change of a consumer's group towards ``target`` (add one, else drop one: followers
        first), once its leader's voters are its assignment's peers and the target members are current."""
        info = await self.consumer_info(sa.account, sa.name, ca.name)
        if info is None:
            return
        leader = self._leader_peer(info)
        members, current = self._members(info, leader)
        peers = list(ca.group.peers)
        if members != set(peers) or not all(p in current for p in target if p in peers):
            return
        missing = [p for p in target if p not in peers]
        extra = [p for p in peers if p not in target]
        if missing:
            peers.append(missing[0])
        elif extra:
            peers.remove(next((p for p in extra if p != leader), extra[0]))
        else:
            return
        cur = self.state.consumer(sa.account, sa.name, ca.name)
        if cur is None or cur.group.peers != ca.group.peers:
            return  # (changed meanwhile: the next tick looks again)
        cg = ca.group.copy()
        cg.peers = peers
        if cg.preferred not in peers:
            cg.preferred = ""
        self.log.notice(f"JetStream cluster: consumer '{sa.account} > {sa.name} > {ca.name}' peers "
                        f"{[self.registry.name_of(p) or p for p in peers]}")
        nca = A.ConsumerAssignment(name=ca.name, stream=ca.stream, config=ca.config, group=cg, client=ca.client,
                                   created=ca.created)
        self._propose(A.encode_assign_consumer(nca), lambda res, err: None)

    def _leader_peer(self, info: Optional[dict]) -> str:
        name = ((info or {}).get("cluster") or {}).get("leader") or ""
        return peer_id(name) if name else ""

    async def _reconcile_one(self, key: tuple[str, str], did: Any) -> None:
        """One step towards a stream's desired peers and its consumers' targets. Each step waits until the
        group leader's voters are the assignment's peers (its previous step is applied) and its members
        among the target are current. Order: add the stream's missing peers, one at a time; then move the
        consumers' groups onto the stream's final peers, one member of one consumer at a time (a consumer
        runs over its server's stream replica); then drop the stream's extra peers (followers first, the
        leader last: it hands over); then clear the desired state. One member per step, so a new member
        with an empty log is never a majority on its own and the members left always make a quorum."""
        try:
            sa = self.state.stream(*key)
            if sa is None:
                return
            ds = sa.group.desired
            peers = list(sa.group.peers)
            final = peers
            leader = ""
            if ds is not None:
                want = [p for p in ds.get("peers") or ()]
                info = await self.stream_info(*key)
                if info is None:
                    return
                leader = self._leader_peer(info)
                members, current = self._members(info, leader)
                if members != set(peers) or not all(p in current for p in want if p in peers):
                    return  # (the previous step is not applied yet, or a new peer is catching up: next tick)
                if ds.get("scale_down"):
                    replicas = int(sa.config.get("num_replicas") or 1)
                    pool = [p for p in want if p in peers]
                    final = [leader] if leader in pool else []
                    final += [p for p in pool if p not in final][:replicas - len(final)]
                else:
                    final = want
                missing = [p for p in final if p not in peers]
                if missing:
                    self._propose_group(key, did, peers=peers + missing[:1], scale_up=True)
                    return
            off = self._consumers_off_target(sa, final)
            if off:
                await self._consumer_step(sa, off[0], self._consumer_target(sa, off[0], final))
                return
            if ds is None:
                return
            extra = [p for p in peers if p not in final]
            if extra:
                peers.remove(next((p for p in extra if p != leader), extra[0]))
            if set(peers) != set(final):
                self._propose_group(key, did, peers=peers)
                return
            order = ([leader] if leader in final else []) + [p for p in final if p != leader]
            self._propose_group(key, did, peers=order, desired=None, scale_up=False,
                                cluster=ds.get("cluster") or sa.group.cluster,
                                preferred=leader if leader in final else order[0])
        except NotLeader:
            pass  # (the next meta leader carries on)
        except Exception as e:
            self.log.error(f"JetStream cluster: reconciling stream '{key[0]} > {key[1]}': {e!r}")
        finally:
            self._reconciling.discard(key)

    def _propose_group(self, key: tuple[str, str], did: Any, **changes: Any) -> None:
        """Propose the stream's assignment with its group changed (only while its desired state is still
        the one ``did`` names: a newer update wins)."""
        sa = self.state.stream(*key)
        if sa is None or (sa.group.desired or {}).get("id") != did:
            return
        g = sa.group.copy()
        for k, v in changes.items():
            setattr(g, k, v)
        self._propose_stream_group(sa, g)

    def _propose_stream_group(self, sa: A.StreamAssignment, g: A.RaftGroup,
                              done: Optional[Callable[[Any, Optional[BaseException]], None]] = None) -> None:
        if g.peers != sa.group.peers or g.desired != sa.group.desired:
            self.log.notice(f"JetStream cluster: stream '{sa.account} > {sa.name}' peers "
                            f"{[self.registry.name_of(p) or p for p in g.peers]}"
                            + (" (reconfiguring)" if g.desired else ""))
        nsa = A.StreamAssignment(config=sa.config, group=g, sync=sa.sync, client=sa.client, created=sa.created)
        self._propose(A.encode_update_stream(nsa), done or (lambda res, err: None))

    def _fill_missing(self, sa: A.StreamAssignment) -> None:
        """A group short of replicas (a peer removed with no replacement then): a selectable peer now."""
        try:
            peers = select_peer_group(int(sa.config.get("num_replicas") or 1), sa.group.cluster or self.name,
                                      PlacementConfig.from_stream_config(sa.config), self.registry.nodes,
                                      self.group.peers, existing=sa.group.peers, **self._place_kw())
        except PlacementError:
            return
        g = sa.group.copy()
        g.peers = peers
        g.scale_up = True
        self._propose_stream_group(sa, g)

    def _replace_peer(self, sa: A.StreamAssignment, peer: str,
                      done: Optional[Callable[[Any, Optional[BaseException]], None]] = None,
                      require: bool = False) -> bool:
        """``peer`` leaves the stream's group: one UPDATE with a replacement chosen as nats-server does (the
        same replica count, the removed peer ignored), or without one when none can be placed (``require``,
        STREAM.PEER.REMOVE: then nothing is proposed and False is returned)."""
        rest = [p for p in sa.group.peers if p != peer]
        try:
            self._refresh_local()
            peers = select_peer_group(len(sa.group.peers), sa.group.cluster or self.name,
                                      PlacementConfig.from_stream_config(sa.config), self.registry.nodes,
                                      [p for p in self.group.peers if p != peer], existing=rest, ignore=[peer],
                                      **self._place_kw())
        except PlacementError:
            if require:
                self.log.warn(f"JetStream cluster rejected peer removal, no replacement available for stream "
                              f"'{sa.account} > {sa.name}'")
                return False
            self.log.warn(f"JetStream cluster could not replace peer for stream '{sa.account} > {sa.name}'")
            peers = rest  # no replacement available: the group shrinks (filled later)
        g = sa.group.copy()
        g.peers = peers
        if g.preferred == peer:
            g.preferred = ""
        if g.desired is not None:
            g.desired = dict(g.desired, peers=[p for p in g.desired.get("peers") or () if p != peer])
            if not g.desired["peers"]:
                g.desired = None
        self._propose_stream_group(sa, g, done)
        return True

    # ---- info gathering (stream / consumer leaders) -------------------------------------------------

    def _leader_stream_info(self, account: str, name: str) -> Optional[dict]:
        """The stream info, when this server holds the stream's leader replica."""
        st = self.streams
        rep = st.replica(account, name) if st is not None else None
        if rep is None or not rep.leader:
            return None
        return st.stream_info(account, name)

    def _leader_consumer_info(self, account: str, stream: str, name: str) -> Optional[dict]:
        """The consumer info, when this server holds the consumer's leader."""
        st = self.streams
        return st.consumer_info(account, stream, name) if st is not None else None

    def _on_stream_info_req(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                            msg: bytes) -> None:
        if not reply or self.streams is None:
            return
        try:
            q = json.loads(msg[hdr:] if hdr > 0 else msg)
            acc, name = q["account"], q["stream"]
            info = self._leader_stream_info(acc, name)
        except (ValueError, KeyError, TypeError) as e:
            self.log.warn(f"JetStream cluster: bad stream info request: {e}")
            return
        if info is not None:
            self._ic.publish(reply, None, apijson.go_json(info))
            return
        reply = bytes(reply)

        def elected() -> None:  # (this server won the group's first election: answer now)
            i = self._leader_stream_info(acc, name)
            if i is not None:
                self._ic.publish(reply, None, apijson.go_json(i))
                self.server.schedule_flush()  # (not in a read cycle: nothing else flushes it)
        self.streams.when_leader(acc, name, "", elected, INFO_TIMEOUT)

    def _on_consumer_info_req(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                              msg: bytes) -> None:
        if not reply or self.streams is None:
            return
        try:
            q = json.loads(msg[hdr:] if hdr > 0 else msg)
            acc, stream, name = q["account"], q["stream"], q["consumer"]
            if q.get("direct"):  # (CONSUMER.DELETE of a consumer not in the assignments: see _api_consumer_delete)
                if self.streams.direct_consumer_known(acc, stream, name):
                    self._ic.publish(reply, None, b'{"direct":true}')
                    self.server.schedule_flush()
                return
            info = self._leader_consumer_info(acc, stream, name)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self.log.warn(f"JetStream cluster: bad consumer info request: {e}")
            return
        if info is not None:
            self._ic.publish(reply, None, apijson.go_json(info))
            return
        reply = bytes(reply)

        def elected() -> None:
            i = self._leader_consumer_info(acc, stream, name)
            if i is not None:
                self._ic.publish(reply, None, apijson.go_json(i))
                self.server.schedule_flush()  # (not in a read cycle: nothing else flushes it)
        if name:
            self.streams.when_leader(acc, stream, name, elected, INFO_TIMEOUT)

    def _on_reply(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        f = self._replies.pop(subject.decode(), None)
        if f is not None and not f.done():
            try:
                f.set_result(json.loads(msg[hdr:] if hdr > 0 else msg))
            except ValueError as e:
                f.set_exception(e)

    async def _ask(self, subject: str, q: dict, timeout: float = INFO_TIMEOUT) -> Optional[dict]:
        inbox = f"$JSC.R.{self.peer}.{next(self._req_ids)}"
        f = self.loop.create_future()
        self._replies[inbox] = f
        self._ic.publish(subject.encode(), inbox.encode(), json.dumps(q).encode())
        self.server.schedule_flush()  # (asked from a task: out now, not with the next read cycle)
        try:
            return await asyncio.wait_for(f, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._replies.pop(inbox, None)

    async def stream_info(self, account: str, name: str, timeout: float = INFO_TIMEOUT) -> Optional[dict]:
        """The stream info its leader gives (None: no leader answered)."""
        if self.streams is None:
            return None
        info = self._leader_stream_info(account, name)
        if info is not None:
            return info
        return await self._ask("$JSC.SI", {"account": account, "stream": name}, timeout)

    async def consumer_info(self, account: str, stream: str, name: str,
                            timeout: float = INFO_TIMEOUT) -> Optional[dict]:
        if self.streams is None:
            return None
        info = self._leader_consumer_info(account, stream, name)
        if info is not None:
            return info
        return await self._ask("$JSC.CI", {"account": account, "stream": stream, "consumer": name}, timeout)

    def _answer_later(self, router: Any, reply: bytes | None, typ: str, get: Callable[[], Any],
                      extra: Optional[dict] = None, config: Optional[dict] = None) -> None:
        """Answer with the info ``get(timeout)`` (a coroutine) gives, retried until the group has a leader (and,
        with ``config``, until the leader has applied that config, for CONFIG_WAIT seconds at most)."""
        if not reply:
            return
        want = {k: v for k, v in config.items() if k != "metadata"} if config is not None else None

        async def run() -> None:
            deadline = self.loop.time() + ANSWER_WITHIN
            cfg_deadline = self.loop.time() + CONFIG_WAIT
            timeout = INFO_FIRST_TIMEOUT  # (a new group elects within tens of ms: ask often at first)
            while self.running:
                info = await get(timeout)
                if info is not None and want is not None and self.loop.time() < cfg_deadline:
                    got = {k: v for k, v in (info.get("config") or {}).items() if k != "metadata"}
                    if got != want:
                        await asyncio.sleep(0.02)
                        continue
                if info is not None:
                    router.respond(reply, {"type": typ, **info, **(extra or {})})
                    return
                if self.loop.time() > deadline:
                    break
                timeout = min(2 * timeout, INFO_TIMEOUT)
                await asyncio.sleep(0.01)
            self.log.warn(f"JetStream cluster: no leader gave its info within {ANSWER_WITHIN:g}s: "
                          f"{typ} not answered")
        self.loop.create_task(run())

    # ---- the $JS.API ------------------------------------------------------------------------------------

    def route_api(self, router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                  body: bytes) -> bool:
        """Called by ``ApiRouter.on_request`` for every request in a JetStream account. True when the
        request is handled here (answered, or deliberately left to another server)."""
        if self.isolated or self.removed:
            return True  # (a Go JetStream in the cluster: its servers answer, this one keeps out of it;
            # or this server was removed from the meta group)
        if key in ("META.LEADER.STEPDOWN", "SERVER.REMOVE"):
            # (the system account's are subscribed by _on_sys_api; elsewhere nats-server only warns)
            if self.is_leader():
                what = "stepdown" if key[0] == "M" else "server remove"
                self._warn_limited(f"JetStream API {what} request from non-system account: "
                                   f"\"{router.jsa.account.name}\"")
            return True
        if key in ("CONSUMER.CREATE", "CONSUMER.DURABLE.CREATE") and self.streams is not None:
            r = self.streams.direct_consumer(router, args, body)  # (a mirror's or source's: the stream leader's)
            if r is not None:
                return r
        if key == "CONSUMER.DELETE" and self.streams is not None:
            r = self.streams.direct_consumer_delete(router, args)  # (the same: deleted by the stream leader)
            if r is not None:
                return r
        if key not in META_KEYS:
            return self._stream_level(router, key, args, reply)
        if not self.is_leader():
            if self.leaderless() and reply:
                self._error(router, reply, key, ApiError.make("CLUSTER_NOT_AVAIL"))
            return True
        handler = getattr(self, "_api_" + key.replace(".", "_").lower())
        if key in ("STREAM.CREATE", "STREAM.UPDATE") and len(body) > BIG_CONFIG \
                and getattr(router.js, "api_queue", None) is not None:
            self._api_big_config(router, key, handler, args, reply, hdr, body)
            return True
        self._call_api(router, key, handler, args, reply, hdr, body)
        return True

    def _api_big_config(self, router: Any, key: str, handler: Callable, args: list[str], reply: bytes | None,
                        hdr: bytes, body: bytes) -> None:
        """A stream create or update with a large config (thousands of subjects): its checks (syntax,
        duplicates, overlaps with the account's other streams, taken now) run in a worker thread while the
        API queue is held (no other request changes the streams meanwhile), then the handler goes on here
        with the checked config (issue 20: no request holds the loop)."""
        q = router.js.api_queue
        q.hold()
        jsa = router.jsa
        acc = jsa.account.name
        name = args[0] if args else ""
        kw: dict[str, Any] = dict(subject_name=name, lookup_stream=self._lookup(acc), account_limits=jsa.limits,
                                  subjects_overlap=self._overlap(acc, skip=name), clustered=True,
                                  server_limits=jsa.js.server_limits, strict=jsa.js.strict)
        if key == "STREAM.CREATE":
            existing = self.state.stream(acc, name)
            kw["existing"] = _stream_cfg(existing.config) if existing is not None else None

            def check() -> Any:
                return SC.normalize_stream_config(body, is_create=True, **kw)
        else:
            sa = self.state.stream(acc, name)
            kw["consumers"] = [(n, _consumer_cfg(ca.config)) for n, ca in sa.consumers.items()] \
                if sa is not None else None
            old = _stream_cfg(sa.config) if sa is not None else None

            def check() -> Any:
                return SC.normalize_stream_update(old, body, **kw)

        async def run() -> None:
            try:
                try:
                    cfg = await self.loop.run_in_executor(None, check)
                except ApiError as e:
                    self._error(router, reply, key, e)
                    return
                except Exception as e:
                    self.log.error(f"JetStream cluster: API error handling {key}: {e!r}")
                    self._error(router, reply, key, ApiError.make("STREAM_GENERAL_ERROR", err=str(e)))
                    return
                if not self.is_leader():
                    return  # (as NotLeader below: the new leader is asked again)
                self._call_api(router, key, handler, args, reply, hdr, body, cfg)
            finally:
                q.release()
                self.server.schedule_flush()
        self.loop.create_task(run())

    def _call_api(self, router: Any, key: str, handler: Callable, args: list[str], reply: bytes | None,
                  hdr: bytes, body: bytes, *checked: Any) -> None:
        try:
            handler(router, args, reply, hdr, body, *checked)
        except ApiError as e:
            self._error(router, reply, key, e)
        except PlacementError as e:
            self._error(router, reply, key, e.api_error())
        except NotLeader:
            pass  # (lost leadership between the check and the proposal: the new leader is asked again)
        except Exception as e:
            self.log.error(f"JetStream cluster: API error handling {key}: {e!r}")
            self._error(router, reply, key, ApiError.make("STREAM_GENERAL_ERROR", err=str(e)))
        else:
            router.jsa.api_total += 1

    def _stream_level(self, router: Any, key: str, args: list[str], reply: bytes | None) -> bool:
        """A request for a stream or consumer leader: the streams layer's gate answers where the stream
        has a replica (False here); a stream the meta layer does not know is "not found" from the meta
        leader only (the single-server handler answers it there); one held elsewhere: silence."""
        if not args:
            return False
        acc = router.jsa.account.name
        st = self.streams
        if st is not None and st.replica(acc, args[0]) is not None:
            return False
        if self.is_leader():
            sa = self.state.stream(acc, args[0])
            if sa is None:
                return False
            if reply and key in ("STREAM.INFO", "CONSUMER.INFO"):
                self._offline_answer(router, key, args, sa, reply)
            return True
        if self.leaderless() and reply:
            from rillet.jetstream.api import _type_for
            h = router.handlers.get(key)
            d = {"type": _type_for(h) if h is not None else T + "error_response",
                 "error": ApiError.make("CLUSTER_NOT_AVAIL").to_dict()}
            if key in ("STREAM.INFO", "CONSUMER.INFO"):
                d.update({"total": 0, "offset": 0, "limit": 0})
            router.respond(reply, d)
        return True

    def _offline_answer(self, router: Any, key: str, args: list[str], sa: Any, reply: bytes) -> None:
        """Stream (consumer) info for a stream (consumer) whose every replica is offline: the meta leader
        answers "stream is offline" 10118 ("consumer is offline" 10119) after a short delay, as nats-server,
        instead of leaving the client to time out. A group with a live replica answers for itself."""
        peers = sa.group.peers
        err = "STREAM_OFFLINE"
        if key == "CONSUMER.INFO":
            ca = sa.consumers.get(args[1]) if len(args) > 1 else None
            if ca is None:
                return  # (an unknown consumer: the stream's replicas answer, or nobody, as before)
            peers, err = (ca.group.peers if ca.group is not None and ca.group.peers else peers), "CONSUMER_OFFLINE"
        if not self._all_offline(peers):
            return

        def later() -> None:
            if self.is_leader() and self._all_offline(peers):
                from rillet.jetstream.api import _type_for
                h = router.handlers.get(key)
                router.jsa.api_total += 1
                router.jsa.api_errors += 1
                router.respond(reply, {"type": _type_for(h) if h is not None else T + "error_response",
                                       "error": ApiError.make(err).to_dict()})
        self.loop.call_later(OFFLINE_ANSWER_DELAY, later)

    def _warn_limited(self, text: str) -> None:
        now = self.loop.time()
        if now - self._warned.get(text, -1e9) >= 10.0:
            self._warned[text] = now
            self.log.warn(text)

    def _error(self, router: Any, reply: bytes | None, key: str, err: Any) -> None:
        router.jsa.api_total += 1
        router.jsa.api_errors += 1
        d: dict[str, Any] = {"type": T + _TYPES[key], "error": err.to_dict()}
        if key in _LIST_FIELDS:
            d.update({"total": 0, "offset": 0, "limit": 0, _LIST_FIELDS[key]: None})
        router.respond(reply, d)

    def _client(self, acc: str, cluster: str = "") -> dict:
        return {"acc": acc, "server": self.server.name, "cluster": cluster or self.name}

    def _requester(self, account: Any, reply: bytes | None) -> tuple[str, list[str]]:
        """The cluster of the client that sent a request, and the other clusters (nats-server's client
        info ``cluster`` and ``alts``: the request's server's outbound gateways, by RTT).

        nats-server reads them from the client info the request carries; Rillet's requests cross routes
        and gateways as they were published, so they are found from the reply subject: a request that
        came over a gateway less than 2 s ago carries its cluster's hash in its ``_GR_.`` reply; else the
        subscription of the reply is here, in this cluster (local or routed interest), or announced by one
        remote cluster (interest-only mode). Without a reply (or a gateway), this server's cluster."""
        gw = getattr(self.server, "gateway", None)
        own = self.name
        cluster = own
        if gw is not None and reply:
            cluster = self._reply_cluster(gw, account, bytes(reply)) or own
        if gw is None:
            return cluster, []
        alts = [gc.name for gc in gw.outo if not gc.closed and gc.name and gc.name != cluster]
        if cluster != own:
            alts.insert(0, own)
        return cluster, alts

    def _reply_cluster(self, gw: Any, account: Any, reply: bytes) -> str:
        from rillet.cluster import info as ci
        gws = getattr(account, "gw", None)  # (the gateways' part in the account: its tracked _GR_. replies)
        full = gws.replies.lookup(reply) if gws is not None and gws.replies else None
        if full:
            h = full[len(ci.GW_REPLY_PREFIX):len(ci.GW_REPLY_PREFIX) + ci.GW_HASH_LEN]
            if h == gw.hash:
                return self.name
            for name, cfg in gw.remotes.items():
                if cfg.hash == h:
                    return name
        subj = reply.decode("utf-8", "surrogateescape")
        r = account.match(subj)
        if r.psubs or r.qsubs:
            return self.name
        acc = getattr(account, "name_b", None) or account.name.encode("utf-8", "surrogateescape")
        for gc in gw.outo:
            if not gc.closed:
                psi, qr = gc.interest(acc, subj)
                if psi or qr is not None:
                    return gc.name
        return ""

    def _lookup(self, acc: str) -> Callable[[str], Any]:
        def lookup(name: str) -> Any:
            sa = self.state.stream(acc, name)
            return _stream_cfg(sa.config) if sa is not None else None
        return lookup

    def _overlap(self, acc: str, skip: str = "") -> Callable[[list[str]], bool]:
        # the other streams' subjects, taken now (a large config is checked in a worker thread, see
        # _api_big_config), in one token tree: linear in the subjects, not their product
        stored = [b for sa in self.state.streams.get(acc, {}).values() if sa.name != skip
                  for b in sa.config.get("subjects") or ()]

        def check(subjects: list[str]) -> bool:
            return bool(stored) and any_collision(stored, subjects)
        return check

    def _place_kw(self) -> dict:
        usage = peer_usage(sa.group.peers for sa in self.state.iter_streams())
        return {"usage": usage, "unique_tag": self.server.opts.jetstream.unique_tag}

    def _api_info(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        jsa = router.jsa
        acc = jsa.account.name
        streams = list(self.state.streams.get(acc, {}).values())
        mem, sto, _, _ = jsa.usage()
        rmem = sum(max(int(sa.config.get("max_bytes") or 0), 0) for sa in streams
                   if sa.config.get("storage") == "memory")
        rsto = sum(max(int(sa.config.get("max_bytes") or 0), 0) for sa in streams
                   if sa.config.get("storage", "file") == "file")
        d: dict[str, Any] = {"type": T + "account_info_response", "memory": mem, "storage": sto,
                             "reserved_memory": rmem, "reserved_storage": rsto, "streams": len(streams),
                             "consumers": sum(len(sa.consumers) for sa in streams),
                             "limits": apijson.to_go(jsa.limits)}
        if self.js.domain:
            d["domain"] = self.js.domain
        from rillet.jetstream.api import API_LEVEL
        d["api"] = {"level": API_LEVEL, "total": jsa.api_total, "errors": jsa.api_errors}
        if not streams or self.streams is None:
            router.respond(reply, d)
            return

        async def run() -> None:
            # as nats-server counts a clustered account: every replica's bytes (a stream's bytes once per
            # peer), from each stream leader's state; a stream without a leader counts this server's replica
            infos = await asyncio.gather(*(self.stream_info(acc, sa.name) for sa in streams))
            used = {"memory": 0, "file": 0}
            for sa, info in zip(streams, infos):
                if info is not None:
                    n = int((info.get("state") or {}).get("bytes") or 0) * len(sa.group.peers)
                else:
                    rep = self.streams.replica(acc, sa.name)
                    n = int(rep.stream.store.state().bytes) if rep is not None else 0
                used["memory" if sa.config.get("storage") == "memory" else "file"] += n
            d["memory"], d["storage"] = used["memory"], used["file"]
            router.respond(reply, d)
        self.loop.create_task(run())

    # streams

    def _api_stream_create(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes, checked: Any = None) -> None:
        """``checked``: the config already checked in a worker thread (_api_big_config)."""
        typ = T + "stream_create_response"
        jsa = router.jsa
        acc = jsa.account.name
        name = args[0] if args else ""
        existing = self.state.stream(acc, name)
        cfg = checked if checked is not None else SC.normalize_stream_config(body, is_create=True, subject_name=name, lookup_stream=self._lookup(acc),
                                         subjects_overlap=self._overlap(acc, skip=name), account_limits=jsa.limits,
                                         clustered=True, server_limits=jsa.js.server_limits, strict=jsa.js.strict,
                                         existing=_stream_cfg(existing.config) if existing is not None else None)
        if existing is not None:
            self._answer_later(router, reply, typ, lambda t: self.stream_info(acc, name, t))
            return
        key = (acc, cfg.name)
        d = _cfg_dict(cfg)
        inflight = self._inflight.get(key)
        if inflight is not None:  # a create of this name still on its way through the log
            if inflight[0] != d:
                raise ApiError.make("STREAM_NAME_EXIST")
            inflight[1].append(lambda: self._answer_later(router, reply, typ, lambda t: self.stream_info(acc, name, t)))
            return
        router._check_supported(cfg)
        lim = jsa.limits
        if lim.max_streams > 0 and len(self.state.streams.get(acc, {})) >= lim.max_streams:
            raise ApiError.make("MAXIMUM_STREAMS_LIMIT")
        pc = PlacementConfig.from_stream_config(d)
        self._refresh_local()
        nodes = self.registry.nodes
        ccl, alts = self._requester(jsa.account, reply)
        rg = create_stream_group(pc, ccl, nodes, self.group.peers, alternates=alts, **self._place_kw())
        rg.preferred = preferred_leader(rg.peers, nodes)
        sa = A.StreamAssignment(config=d, group=rg, sync=A.sync_subject(), client=self._client(acc, ccl),
                                created=time.time_ns(), subject=f"$JS.API.STREAM.CREATE.{name}",
                                reply=(reply or b"").decode())
        self._inflight[key] = (d, [])

        def done(res: Any, err: Optional[BaseException]) -> None:
            later = (self._inflight.pop(key, None) or (None, []))[1]
            if err is not None:
                return  # (leadership lost: not committed here; the client retries)
            self._answer_later(router, reply, typ, lambda t: self.stream_info(acc, name, t), {"did_create": True})
            for fn in later:
                fn()
        try:
            self._propose(A.encode_assign_stream(sa), done)
        except NotLeader:
            self._inflight.pop(key, None)
            raise

    def _api_stream_update(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes, checked: Any = None) -> None:
        """``checked``: the config already checked in a worker thread (_api_big_config)."""
        typ = T + "stream_update_response"
        jsa = router.jsa
        acc = jsa.account.name
        name = args[0] if args else ""
        sa = self.state.stream(acc, name)
        cons = [(n, _consumer_cfg(ca.config)) for n, ca in sa.consumers.items()] if sa is not None else None
        cfg = checked if checked is not None else SC.normalize_stream_update(_stream_cfg(sa.config) if sa is not None else None, body,
                                         subject_name=name, lookup_stream=self._lookup(acc),
                                         subjects_overlap=self._overlap(acc, skip=name), account_limits=jsa.limits,
                                         clustered=True, consumers=cons, server_limits=jsa.js.server_limits,
                                         strict=jsa.js.strict)
        assert sa is not None
        router._check_supported(cfg)
        if self._all_offline(sa.group.peers):
            raise ApiError.make("STREAM_OFFLINE")
        d = _cfg_dict(cfg)
        group = self._updated_group(sa, d, self._requester(jsa.account, reply))
        nsa = A.StreamAssignment(config=d, group=group, sync=sa.sync, client=sa.client, created=sa.created,
                                 subject=f"$JS.API.STREAM.UPDATE.{name}", reply=(reply or b"").decode())

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                self._answer_later(router, reply, typ, lambda t: self.stream_info(acc, name, t), config=d)
        self._propose(A.encode_update_stream(nsa), done)

    def _all_offline(self, peers: list[str]) -> bool:
        nodes = self.registry.nodes
        return bool(peers) and all(p in nodes and nodes[p].offline for p in peers)

    def _updated_group(self, sa: A.StreamAssignment, d: dict,
                       requester: tuple[str, list[str]] = ("", [])) -> A.RaftGroup:
        """The group of an updated stream, as nats-server 2.15: another ``placement`` is a move, another
        ``num_replicas`` a scale (not both: 10123); either sets ``desired`` (the target peers) and leaves
        ``peers`` as they are: ``_reconcile_one`` then adds the new peers, waits until they are current
        and drops the old ones. Any other update keeps the group (no preferred peer)."""
        old = sa.config
        g = sa.group.copy()
        ds = g.desired
        is_move = d.get("placement") is not None and d.get("placement") != old.get("placement")
        want = int(d.get("num_replicas") or 1)
        is_scale = want != int(old.get("num_replicas") or 1)
        if is_move and is_scale:
            raise ApiError.make("STREAM_MOVE_AND_SCALE")
        if ds is not None and ds.get("move") and (is_move or is_scale):
            raise ApiError.make("STREAM_MOVE_IN_PROGRESS")
        if not ds:
            g.scale_up = False
        if not is_move and not is_scale:
            g.preferred = ""
            return g
        origin = (ds or {}).get("origin") or {"peers": list(sa.group.peers), "cluster": sa.group.cluster,
                                               "replicas": int(old.get("num_replicas") or 1),
                                               **({"placement": old["placement"]} if old.get("placement") else {})}
        self._refresh_local()
        pc = PlacementConfig.from_stream_config(d)
        nd: dict[str, Any] = {"id": A._random_token(A.PEER_ID_LEN), "created": format_time(time.time_ns())}
        if is_move:
            # (a placement naming no cluster: the requesting client's, then the others, as for a create)
            ng = create_stream_group(pc, requester[0] or self.name, self.registry.nodes, self.group.peers,
                                     alternates=requester[1], **self._place_kw())
            nd.update(peers=ng.peers, cluster=ng.cluster, move=True)
        else:
            current = list(ds["peers"]) if ds else list(g.peers)
            cluster = g.cluster or (pc.cluster or self.name)
            if want > len(current):
                peers = select_peer_group(want, cluster, pc, self.registry.nodes, self.group.peers,
                                          existing=current, **self._place_kw())
                if len(g.peers) == 1:
                    g.preferred = g.peers[0]
                nd.update(peers=peers, cluster=cluster)
            else:
                nd.update(peers=current, cluster=cluster, scale_down=True)
        nd["origin"] = origin
        g.desired = nd
        return g

    def _api_stream_restore(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                            body: bytes) -> None:
        """STREAM.RESTORE in a cluster, as nats-server: the meta leader checks the config, the limits and the
        name (10130), places the group (replicas and placement as configured) with a preferred peer and
        proposes the assignment with ``restore_state``; it does not answer. The preferred peer, once the
        group's leader, answers with the subject to send the archive to and, at the end, with the stream's
        info (streams.py ``StreamReplica._begin_restore``)."""
        name = args[0] if args else ""
        from rillet.jetstream.api import is_empty_request
        req = router.parse(body, AT.JSApiStreamRestoreRequest) if not is_empty_request(body) else None
        if not isinstance(req, dict):
            raise ApiError.make("BAD_REQUEST")
        raw = dict(req["config"])
        if not raw.get("name"):
            raw["name"] = name
        if raw.get("name") != name:
            raise ApiError.make("STREAM_MISMATCH")
        jsa = router.jsa
        acc = jsa.account.name
        cfg = SC.normalize_stream_config(raw, is_create=True, subject_name=name, lookup_stream=self._lookup(acc),
                                         subjects_overlap=self._overlap(acc, skip=name), account_limits=jsa.limits,
                                         clustered=True, server_limits=jsa.js.server_limits)
        key = (acc, cfg.name)
        if self.state.stream(acc, name) is not None or key in self._inflight:
            raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
        router._check_supported(cfg)
        lim = jsa.limits
        if lim.max_streams > 0 and len(self.state.streams.get(acc, {})) >= lim.max_streams:
            raise ApiError.make("MAXIMUM_STREAMS_LIMIT")
        d = _cfg_dict(cfg)
        pc = PlacementConfig.from_stream_config(d)
        self._refresh_local()
        nodes = self.registry.nodes
        ccl, alts = self._requester(jsa.account, reply)  # (as a create: the client's cluster first)
        rg = create_stream_group(pc, ccl, nodes, self.group.peers, alternates=alts, **self._place_kw())
        rg.preferred = preferred_leader(rg.peers, nodes)
        state = req.get("state")
        sa = A.StreamAssignment(config=d, group=rg, sync=A.sync_subject(), client=self._client(acc, ccl),
                                created=time.time_ns(), subject=f"$JS.API.STREAM.RESTORE.{name}",
                                reply=(reply or b"").decode(), restore=state if isinstance(state, dict) else {})
        self._inflight[key] = (d, [])

        def done(res: Any, err: Optional[BaseException]) -> None:
            self._inflight.pop(key, None)
        try:
            self._propose(A.encode_assign_stream(sa), done)
        except NotLeader:
            self._inflight.pop(key, None)
            raise

    def _api_stream_delete(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes) -> None:
        typ = T + "stream_delete_response"
        acc = router.jsa.account.name
        sa = self.state.stream(acc, args[0] if args else "")
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        rm = A.StreamAssignment(config=sa.config, group=sa.group, sync=sa.sync, client=sa.client,
                                created=sa.created, subject=f"$JS.API.STREAM.DELETE.{sa.name}",
                                reply=(reply or b"").decode())

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                if res.changed:
                    router.respond(reply, {"type": typ, "success": True})
                else:
                    self._error(router, reply, "STREAM.DELETE", ApiError.make("STREAM_NOT_FOUND"))
        self._propose(A.encode_remove_stream(rm), done)

    def _matching_streams(self, acc: str, req: dict) -> list[A.StreamAssignment]:
        subj = req.get("subject") or ""
        out = sorted(self.state.streams.get(acc, {}).values(), key=lambda sa: sa.name)
        if subj:
            out = [sa for sa in out if any(subjects_collide(subj, x) for x in sa.config.get("subjects") or ())]
        return out

    def _api_stream_names(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                          body: bytes) -> None:
        req = router.parse(body, AT.JSApiStreamNamesRequest) or {}
        streams = self._matching_streams(router.jsa.account.name, req)
        offset = max(int(req.get("offset") or 0), 0)
        page = streams[offset:offset + JSON_LIMIT]
        router.respond(reply, {"type": T + "stream_names_response", "total": len(streams), "offset": offset,
                               "limit": JSON_LIMIT, "streams": [sa.name for sa in page]})

    def _api_stream_list(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                         body: bytes) -> None:
        req = router.parse(body, AT.JSApiStreamListRequest) or {}
        acc = router.jsa.account.name
        streams = self._matching_streams(acc, req)
        offset = max(int(req.get("offset") or 0), 0)
        page = streams[offset:offset + LIST_LIMIT]

        async def run() -> None:
            infos = await asyncio.gather(*(self.stream_info(acc, sa.name) for sa in page))
            got = [i for i in infos if i is not None]
            missing = [sa.name for sa, i in zip(page, infos) if i is None]
            router.respond(reply, {"type": T + "stream_list_response", "total": len(streams), "offset": offset,
                                   "limit": LIST_LIMIT, "streams": got, "missing": missing or None})
        self.loop.create_task(run())

    def _api_stream_peer_remove(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                                body: bytes) -> None:
        """As nats-server: a peer of the group (server name or peer id) is replaced by another placeable
        one; with no replacement (the group would miss a replica) 10075 ``peer remap failed``. An R1
        stream moves to another server (its messages stay behind, as nats-server)."""
        typ = T + "stream_remove_peer_response"
        acc = router.jsa.account.name
        req = router.parse(body, AT.JSApiStreamRemovePeerRequest)
        if not isinstance(req, dict) or not req.get("peer"):
            raise ApiError.make("BAD_REQUEST")
        sa = self.state.stream(acc, args[0] if args else "")
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        who = str(req["peer"])
        members = list(sa.group.peers) + list((sa.group.desired or {}).get("peers") or ())
        peer = next((p for p in members if p == who or self.registry.name_of(p) == who), None)
        if peer is None:
            raise ApiError.make("CLUSTER_PEER_NOT_MEMBER")

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                router.respond(reply, {"type": typ, "success": True})
        if not self._replace_peer(sa, peer, done, require=True):
            raise ApiError.make("PEER_REMAP")  # (nats-server: no replacement, the group would miss a replica)

    # consumers

    def _api_consumer_create(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                             body: bytes) -> None:
        if args:
            self._consumer_create(router, ["CREATE", *args], reply, body)

    def _api_consumer_durable_create(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                                     body: bytes) -> None:
        self._consumer_create(router, ["DURABLE", "CREATE", *args], reply, body)

    def _consumer_create(self, router: Any, tokens: list[str], reply: bytes | None, body: bytes) -> None:
        typ = T + "consumer_create_response"
        jsa = router.jsa
        acc = jsa.account.name
        req = apijson.go_decode(body, C.CreateConsumerRequest, strict=jsa.js.strict)
        stream_name, cname, _ = CC.parse_consumer_create_subject(tokens, req)
        sa = self.state.stream(acc, stream_name)
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        name = req.config.durable_name or req.config.name or cname
        existing = sa.consumers.get(name) if name else None
        others = [_consumer_cfg(ca.config) for ca in sa.consumers.values() if ca is not existing]
        acc_lim = jsa.limits
        if isinstance(acc_lim, dict):
            acc_lim = C.AccountLimits(max_consumers=acc_lim.get("max_consumers", -1))
        scfg = _stream_cfg(sa.config)
        cfg = CC.normalize_consumer_config(
            scfg, req.config, req.action, pedantic=req.pedantic,
            existing=_consumer_cfg(existing.config) if existing is not None else None, others=others,
            account_limits=acc_lim, clustered=True, server_limits=jsa.js.server_limits,
            deliver_subject_in_use=lambda subj: jsa.account.sublist.has_interest(subj))
        if existing is not None and C.configs_equal(_consumer_cfg(existing.config), cfg):
            self._answer_later(router, reply, typ, lambda t: self.consumer_info(acc, stream_name, name, t))
            return
        if not name:
            from rillet.jetstream.consumer import new_consumer_name
            while True:
                name = new_consumer_name()
                if name not in sa.consumers:
                    break
            cfg.name = name
        d = _cfg_dict(cfg)
        if existing is not None:
            group = existing.group
        else:
            self._refresh_local()
            group = create_consumer_group(d, sa.config, sa.group, self.registry.nodes)
            group.preferred = preferred_leader(group.peers, self.registry.nodes)
        ca = A.ConsumerAssignment(name=name, stream=stream_name, config=d, group=group, client=self._client(acc),
                                  created=existing.created if existing is not None else time.time_ns(),
                                  subject=f"$JS.API.CONSUMER.CREATE.{stream_name}", reply=(reply or b"").decode())

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                self._answer_later(router, reply, typ, lambda t: self.consumer_info(acc, stream_name, name, t))
        self._propose(A.encode_assign_consumer(ca), done)

    def _api_consumer_delete(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                             body: bytes) -> None:
        if len(args) != 2:
            return
        typ = T + "consumer_delete_response"
        acc = router.jsa.account.name
        sa = self.state.stream(acc, args[0])
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        ca = sa.consumers.get(args[1])
        if ca is None:
            if reply and self.streams is not None:
                # a mirror's or source's consumer is not in the assignments: its stream leader (another
                # server) deletes it and answers; "not found" only when that leader does not hold it
                async def not_direct() -> None:
                    q = {"account": acc, "stream": args[0], "consumer": args[1], "direct": True}
                    if await self._ask("$JSC.CI", q, DIRECT_ASK_TIMEOUT) is None:
                        self._error(router, reply, "CONSUMER.DELETE", ApiError.make("CONSUMER_NOT_FOUND"))
                self.loop.create_task(not_direct())
                return
            raise ApiError.make("CONSUMER_NOT_FOUND")
        rm = A.ConsumerAssignment(name=ca.name, stream=ca.stream, config=ca.config, group=ca.group,
                                  client=ca.client, created=ca.created,
                                  subject=f"$JS.API.CONSUMER.DELETE.{ca.stream}.{ca.name}")

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                router.respond(reply, {"type": typ, "success": True})
        self._propose(A.encode_remove_consumer(rm), done)

    def _consumers_of(self, router: Any, args: list[str]) -> A.StreamAssignment:
        sa = self.state.stream(router.jsa.account.name, args[0] if args else "")
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        return sa

    def _api_consumer_names(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                            body: bytes) -> None:
        req = router.parse(body, AT.JSApiConsumersRequest) or {}
        sa = self._consumers_of(router, args)
        names = sorted(sa.consumers)
        offset = max(int(req.get("offset") or 0), 0)
        router.respond(reply, {"type": T + "consumer_names_response", "total": len(names), "offset": offset,
                               "limit": JSON_LIMIT, "consumers": names[offset:offset + JSON_LIMIT]})

    def _api_consumer_list(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes) -> None:
        req = router.parse(body, AT.JSApiConsumersRequest) or {}
        sa = self._consumers_of(router, args)
        acc = router.jsa.account.name
        names = sorted(sa.consumers)
        offset = max(int(req.get("offset") or 0), 0)
        page = names[offset:offset + LIST_LIMIT]

        async def run() -> None:
            infos = await asyncio.gather(*(self.consumer_info(acc, sa.name, n) for n in page))
            got = [i for i in infos if i is not None]
            missing = [n for n, i in zip(page, infos) if i is None]
            router.respond(reply, {"type": T + "consumer_list_response", "total": len(names), "offset": offset,
                                   "limit": LIST_LIMIT, "consumers": got, "missing": missing or None})
        self.loop.create_task(run())

    # ---- system account: META.LEADER.STEPDOWN, SERVER.REMOVE --------------------------------------------

    def _on_account_purge(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                          msg: bytes) -> None:
        """``$JS.API.ACCOUNT.PURGE.<account>`` (system account, meta leader): every consumer and stream of
        the account deleted through the log, answered ``initiated`` at once, as nats-server."""
        if not self.is_leader():
            return
        acc = subject.decode().rsplit(".", 1)[-1]
        typ = T + "account_purge_response"

        def respond(d: dict) -> None:
            if reply:
                self._ic.publish(reply, None, apijson.go_json({"type": typ, **d}))
        if "/" in acc or "\\" in acc:
            respond({"error": ApiError.make("STREAM_GENERAL_ERROR",
                                            err="account name can not contain path separators").to_dict()})
            return
        ns = nc = 0
        try:
            for sa in list(self.state.streams.get(acc, {}).values()):
                for cn in sorted(sa.consumers):
                    ca = sa.consumers[cn]
                    self._propose(A.encode_remove_consumer(A.ConsumerAssignment(
                        name=ca.name, stream=ca.stream, config=ca.config, group=ca.group, client=ca.client,
                        created=ca.created, subject=subject.decode())), lambda res, err: None)
                    nc += 1
                self._propose(A.encode_remove_stream(A.StreamAssignment(
                    config=sa.config, group=sa.group, sync=sa.sync, client=sa.client, created=sa.created,
                    subject=subject.decode())), lambda res, err: None)
                ns += 1
        except NotLeader as e:
            respond({"error": ApiError.make("STREAM_GENERAL_ERROR", err=str(e) or "not leader").to_dict()})
            return
        self.log.notice(f"Purge request for account {acc} (streams: {ns}, consumer: {nc}, hasAccount: "
                        f"{'true' if ns else 'false'})")
        respond({"initiated": True})

    def _stepdown_target(self, pl: dict) -> Optional[str]:
        """The peer a META.LEADER.STEPDOWN with ``placement`` hands leadership to (nats-server 2.11+):
        ``preferred`` names a member server (not this one); else an online member other than this one in
        ``cluster`` carrying every tag in ``tags``, chosen at random; no placement: the most current."""
        g = self.group
        pref = str(pl.get("preferred") or "")
        if pref:
            to = next((p for p in g.peers if self.registry.name_of(p) == pref), None)
            if to == self.peer:
                raise ApiError.make("CLUSTER_NO_PEERS", err=f'preferred server "{pref}" is already leader')
            if to is None:
                raise ApiError.make("CLUSTER_NO_PEERS", err=f'preferred server "{pref}" not known')
            return to
        cluster, tags = str(pl.get("cluster") or ""), [str(t) for t in pl.get("tags") or ()]
        if not cluster and not tags:
            return None
        nodes = self.registry.nodes
        cands = [p for p in g.peers if p != self.peer and p in nodes and not nodes[p].offline
                 and (not cluster or nodes[p].cluster == cluster)
                 and all(t.strip().lower() in nodes[p].tags for t in tags)]
        if not cands:
            raise ApiError.make("CLUSTER_NO_PEERS", err="no replacement peer connected")
        return random.choice(cands)

    def _on_sys_api(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if not self.is_leader() or not reply:
            return  # (only the meta leader listens, in nats-server's words)
        key = "META.LEADER.STEPDOWN" if b".META.LEADER.STEPDOWN" in subject else "SERVER.REMOVE"
        if key == "META.LEADER.STEPDOWN" and self.group.stepdown_seen(reply):
            return  # (carried out by the previous leader; this copy was routed here after the transfer)
        body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        typ = T + _TYPES[key]

        def respond(d: dict) -> None:
            self._ic.publish(reply, None, apijson.go_json({"type": typ, **d}))
        try:  # (as nats-server: parsed only when it looks like a JSON object or array)
            req = apijson.parse_json(body) if body.lstrip()[:1] in (b"{", b"[") else {}  # (Go's errors)
            if not isinstance(req, dict):
                raise ApiError.make("INVALID_JSON", err="not a JSON object")
        except ApiError as e:
            respond({"error": e.to_dict()})
            return
        g = self.group
        if key == "META.LEADER.STEPDOWN":
            pl = req.get("placement") or {}
            try:
                to = self._stepdown_target(pl if isinstance(pl, dict) else {})
            except ApiError as e:
                respond({"error": e.to_dict()})
                return
            try:
                g.stepdown(to, note=reply)
            except (NotLeader, ValueError) as e:
                respond({"error": ApiError.make("RAFT_GENERAL", err=str(e) or "not leader").to_dict()})
                return
            respond({"success": True})
            return
        who = str(req.get("peer_id") or req.get("peer") or "")
        peer = next((p for p in g.peers if who and (p == who or self.registry.name_of(p) == who)), None)
        if peer is None:
            respond({"error": ApiError.make("CLUSTER_SERVER_NOT_MEMBER").to_dict()})
            return
        if any(p in g.peers for p in self.state.removed if not self._may_rejoin(p)):
            respond({"error": ApiError.make("CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT").to_dict()})
            return

        # the PEER_REMOVE entry first (the removed server applies it too: it learns it was removed), then,
        # once applied, the RAFT configuration change (_drop_removed_voters)
        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                respond({"success": True})
        try:
            self._propose(A.encode_peer_remove(peer), done)
        except NotLeader:
            return

    # ---- monitoring -------------------------------------------------------------------------------------

    def meta_view(self) -> MON.MetaView:
        g = self.group
        if g is None or g.node is None:
            return MON.MetaView(self.name, running=False, current=False)
        st = g.status()
        leader = st["leader"] or ""
        reps = []
        for p in st["voters"]:
            if p == self.peer:
                continue
            ps = st["peers"].get(p)
            ni = self.registry.get(p)
            if ps is not None:
                reps.append(MON.PeerState(self.registry.name_of(p), p, ps["current"], ps["active_ns"], ps["lag"],
                                          offline=ni is not None and ni.offline))
            else:
                reps.append(MON.PeerState(self.registry.name_of(p), p, current=bool(leader),
                                          offline=ni is not None and ni.offline))
        n = g.node
        return MON.MetaView(self.name, leader=self.registry.name_of(leader) if leader else "", leader_peer=leader,
                            replicas=reps, cluster_size=len(st["voters"]), quorum_needed=st["quorum_needed"],
                            pending=n.last_index() - n.applied,
                            snapshot=MON.MetaSnapshotStats(pending_entries=n.last_index() - n.offset),
                            running=g.running, current=bool(leader) and g.current() and n.applied >= n.commit,
                            write_error=g.write_error, apply_error=self.apply_error or g.apply_error)

    def jsz_meta(self) -> dict:
        return MON.meta_cluster_info(self.meta_view())

    def jsz_details(self, d: dict, opts: dict) -> None:
        """``/jsz`` of a clustered server, as nats-server's: ``streams_leader`` (streams led here),
        ``ha_assets`` (the meta group and the replicated groups here), and each account's ``stream_detail``
        for the replicas held here: name, created, cluster, config (``config=true``), state,
        ``consumer_detail`` (``consumers=true``; config only with ``config=true``), ``stream_raft_group``
        and ``consumer_raft_groups`` (``raft=true``); ``stream-leader-only`` keeps the streams led here."""
        st = self.streams
        reps = list(getattr(st, "replicas", {}).items()) if st is not None else []
        led = sum(1 for _, r in reps if r.leader)
        ha = 1 if self.group is not None else 0
        for (acc, name), r in reps:
            sa = self.state.stream(acc, name)
            if sa is not None and len(sa.group.peers) > 1:
                ha += 1 + sum(1 for ca in sa.consumers.values() if len(ca.group.peers) > 1)
        out: dict[str, Any] = {}
        for k, v in d.items():
            out[k] = v
            if k == "streams" and led:
                out["streams_leader"] = led
        out["ha_assets"] = ha
        d.clear()
        d.update(out)
        if not (opts.get("streams") or opts.get("consumers")):
            return
        from rillet.jetstream.api import stream_info_dict
        for ad in d.get("account_details") or ():
            details = []
            for (acc, name), r in sorted(reps, key=lambda kv: kv[0]):
                if acc != ad.get("name"):
                    continue
                if opts.get("stream_leader_only") and not r.leader:
                    continue
                info = stream_info_dict(r.stream, include_config=bool(opts.get("config")))
                sd: dict[str, Any] = {"name": name, "created": info["created"], "cluster": r.cluster_info()}
                if "config" in info:
                    sd["config"] = info["config"]
                sd["state"] = info["state"]
                cons, groups = [], []
                if opts.get("consumers"):
                    sa = self.state.stream(acc, name)
                    for cn in sorted(getattr(r, "consumers", {}) or {}):
                        try:
                            ci = r.consumers[cn].info()
                        except Exception as e:
                            self.log.warn(f"JetStream cluster: /jsz consumer info of '{acc} > {name} > {cn}': {e!r}")
                            continue
                        if not opts.get("config"):
                            ci = {k: v for k, v in ci.items() if k != "config"}
                        cons.append(ci)
                        ca = sa.consumers.get(cn) if sa is not None else None
                        if ca is not None:
                            groups.append({"name": cn, "raft_group": ca.group.name})
                if cons:
                    sd["consumer_detail"] = cons
                for k in ("mirror", "sources"):
                    if k in info:
                        sd[k] = info[k]
                if opts.get("raft"):
                    sd["stream_raft_group"] = r.group.name
                    if groups:
                        sd["consumer_raft_groups"] = groups
                details.append(sd)
            ad["stream_detail"] = details

    def raftz(self, group: str = "") -> dict:
        """``/raftz``: the meta group and this server's stream groups, under the system account."""
        groups = []
        if self.group is not None and self.group.node is not None:
            groups.append(self.group)
        for rep in list(getattr(self.streams, "replicas", {}).values()):
            g = getattr(rep, "group", None)
            if g is not None and g.node is not None:
                groups.append(g)
        views = {g.name: self.raftz_view(g) for g in groups if not group or g.name == group}
        return MON.raftz({self.server.system_account.name: views}) if views else {}

    def healthz(self, o: dict) -> dict:
        """nats-server's health checks of a clustered JetStream server (past the enabled checks)."""
        meta = self.meta_view() if self.group is not None and not self.isolated else None
        st = self.streams

        def stream_error(acc: str, sa: Any) -> str:
            rep = st.replica(acc, sa.name) if st is not None else None
            if rep is None:
                return "stream not found"
            g = rep.group
            if g.leader is None:
                return "no leader"
            if len(g.peers) > 1:
                catchup = getattr(rep, "_catchup", None)
                if rep.log.holding or (catchup is not None and not catchup.done()):
                    return "stream catching up"  # (the messages of a snapshot, fetched from the leader)
                if not g.current():
                    return "group node unhealthy"
            return ""

        def consumer_error(acc: str, sa: Any, ca: Any) -> str:
            rep = st.replica(acc, sa.name) if st is not None else None
            if rep is None or ca.name not in getattr(rep, "consumers", {}):
                return "consumer not found"
            cr = getattr(rep, "creps", {}).get(ca.name)
            cg = getattr(cr, "group", None)
            if cg is not None and len(cg.peers) > 1 and not cg.current():
                return "group node unhealthy"
            return ""
        return MON.clustered_healthz(o, meta, self.state, self.peer, stream_error, consumer_error)

    def raftz_view(self, g: Optional[RaftGroup] = None) -> MON.RaftGroupView:
        g = g or self.group
        st = g.status()
        peers = {p: MON.RaftPeerView(self.registry.name_of(p) or p, True,
                                     st["peers"].get(p, {}).get("match", 0),
                                     st["peers"].get(p, {}).get("active_ns", -1))
                 for p in st["voters"] if p != self.peer}
        return MON.RaftGroupView(id=self.peer, state=st["state"], size=st["size"], quorum_needed=st["quorum_needed"],
                                 committed=st["committed"], applied=st["applied"], leader=st["leader"] or "",
                                 leader_since_ns=st["leader_since_ns"], ever_had_leader=st["ever_had_leader"],
                                 term=st["term"], voted_for=st["vote"] or "", pterm=st["last_term"],
                                 pindex=st["last_index"], wal={"messages": st["last_index"] - st["snapshot_index"]},
                                 wal_error=st["write_error"], peers=peers)
