"""Peer ids and the registry of the JetStream servers of a cluster.

A server's RAFT peer id is the 8-character hash nats-server derives from its *name* (not its id): the
SHA-256 of the name, each of the first 8 bytes taken modulo 62 into ``0-9A-Za-z``. It names the server
in every group's peer list, in ``/jsz`` (``peer``), in stream info replicas and in ``$SYS._INBOX.<hash>``.
Server names must therefore be unique and stable in a JetStream cluster.

The registry is nats-server's ``nodeToInfo``: one entry per server of this JetStream domain, keyed by peer
id, learnt from

* route registration (name, id, cluster, whether the INFO said JetStream; no tags, config or stats yet),
* ``$SYS.SERVER.<id>.STATSZ`` (the full entry: tags, version, capability flags, and the ``jetstream``
  config and usage that placement needs; the entry is replaced),
* ``$SYS.SERVER.<id>.SHUTDOWN`` (offline), and servers not heard from for ``ORPHAN_AFTER`` seconds
  (offline, as nats-server's orphan sweep).

A server is *selectable* for placement once a statsz with JetStream config and stats has arrived. The
registry is plain data; the server feeds it (``statsz``/``shutdown`` take the message bodies as bytes or
decoded JSON) and reads it for placement and monitoring.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Optional

DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
PEER_ID_LEN = 8
ORPHAN_AFTER = 150.0  # nats-server: 5 x its 30 s events heartbeat
# capability flags of a statsz/server info (nats-server's ServerCapability bits)
FLAG_JETSTREAM = 1
FLAG_BINARY_SNAPSHOT = 2
FLAG_ACCOUNT_NRG = 4
# (Rillet's own key in its statsz ``jetstream`` section; nats-server ignores it) whether the server's meta group
# holds state: a server founding a new meta group waits to hear it from every Rillet server it knows, and founds
# none when one of them holds state (its store survived where this one's was lost: rillet/jetstream/cluster/meta.py)
META_STATE_KEY = "rillet_meta_state"


def name_hash(name: str, size: int = PEER_ID_LEN) -> str:
    """nats-server's ``getHashSize``: ``size`` characters of ``0-9A-Za-z`` from the SHA-256 of ``name``."""
    d = hashlib.sha256(name.encode("utf-8", "surrogateescape")).digest()
    return "".join(DIGITS[b % 62] for b in d[:size])


def peer_id(server_name: str) -> str:
    """The RAFT peer id of the server named ``server_name`` (e.g. ``"g1"`` -> ``"pKmyMGN4"``)."""
    return name_hash(server_name, PEER_ID_LEN)


@dataclass(frozen=True)
class JSConfig:
    """The parts of a server's JetStream config that placement reads (statsz ``jetstream.config``)."""
    max_memory: int = 0
    max_storage: int = 0
    unique_tag: str = ""

    @classmethod
    def from_json(cls, d: dict) -> "JSConfig":
        return cls(int(d.get("max_memory") or 0), int(d.get("max_storage") or 0), str(d.get("unique_tag") or ""))


@dataclass(frozen=True)
class JSStats:
    """A server's JetStream usage (statsz ``jetstream.stats``)."""
    memory: int = 0
    storage: int = 0
    reserved_memory: int = 0
    reserved_storage: int = 0
    ha_assets: int = 0

    @classmethod
    def from_json(cls, d: dict) -> "JSStats":
        return cls(int(d.get("memory") or 0), int(d.get("storage") or 0), int(d.get("reserved_memory") or 0),
                   int(d.get("reserved_storage") or 0), int(d.get("ha_assets") or 0))


@dataclass(frozen=True)
class NodeInfo:
    """One server of the JetStream cluster as this server knows it."""
    name: str
    id: str = ""
    cluster: str = ""
    domain: str = ""
    version: str = ""
    tags: tuple[str, ...] = ()
    js: bool = False
    offline: bool = False
    cfg: JSConfig | None = None
    stats: JSStats | None = None
    binary_snapshots: bool = False
    account_nrg: bool = False
    cap_js: bool = False  # the statsz capability flag for JetStream (bit 1): Go servers set it, Rillet never does
    statsz_seen: bool = False  # the entry comes from a statsz (``js`` is known), not only from a route
    meta_leader: str = ""  # the meta leader its last statsz named (``jetstream.meta.leader``), if any
    meta_group: bool = False  # its last statsz had a ``jetstream.meta`` section: it runs a meta group
    # (a Rillet server, its last statsz) whether its meta group holds state (a log or a commit; from its disk or
    # committed since): None when its statsz did not say (its meta layer has not started, or not Rillet's)
    meta_state: Optional[bool] = None

    @property
    def peer(self) -> str:
        return peer_id(self.name)

    @property
    def rillet_js(self) -> bool:
        """A Rillet server running JetStream, as its statsz tells: ``jetstream`` true without the capability
        flag (which every nats-server >= 2.10 running JetStream sets; Rillet leaves it off so that a Go meta
        group never counts it). Used for servers of other clusters, which have no route to tell."""
        return self.js and not self.cap_js

    @property
    def selectable(self) -> bool:
        """A statsz with JetStream config and usage has arrived: placement may choose this server."""
        return self.cfg is not None and self.stats is not None


def _decode(msg: bytes | str | dict) -> dict:
    if isinstance(msg, dict):
        return msg
    d = json.loads(msg)
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    return d


def _tags(v: Any) -> tuple[str, ...]:
    # nats-server lower-cases tags when it loads them (server_tags), so they compare as sent
    return tuple(str(t) for t in v) if isinstance(v, list) else ()


@dataclass
class _Seen:
    seq: int = 0
    at: float = 0.0


class PeerRegistry:
    """nats-server's ``nodeToInfo`` for one server: the JetStream servers of its domain, by peer id.

    ``domain`` is this server's JetStream domain: servers of another domain are not recorded (a server
    without a domain, or a peer without one, counts as the same domain, as nats-server's ``sameDomain``).
    ``listeners`` are called with the peer id of every entry that changed.
    """

    def __init__(self, own_name: str, own_id: str = "", domain: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.own_name = own_name
        self.own_id = own_id
        self.own_peer = peer_id(own_name)
        self.domain = domain
        self.clock = clock
        self.nodes: dict[str, NodeInfo] = {}
        self._seen: dict[str, _Seen] = {}  # server id -> last statsz seq and arrival
        self.out_of_order = 0  # statsz with a seq not above the last one (nats-server logs an error)
        self.bad = 0  # undecodable statsz/shutdown bodies
        self.listeners: list[Callable[[str], None]] = []

    # ---- queries ------------------------------------------------------------------------------------

    def get(self, peer: str) -> NodeInfo | None:
        return self.nodes.get(peer)

    def by_server_id(self, server_id: str) -> NodeInfo | None:
        return next((n for n in self.nodes.values() if n.id == server_id), None)

    def name_of(self, peer: str) -> str:
        """The server name of a peer id (nats-server's ``serverNameForNode``); ``""`` when unknown."""
        n = self.nodes.get(peer)
        return n.name if n is not None else ""

    def peers(self, cluster: str | None = None, online_only: bool = False) -> list[str]:
        return sorted(p for p, n in self.nodes.items()
                      if (cluster is None or n.cluster == cluster) and not (online_only and n.offline))

    def js_servers(self) -> tuple[int, int]:
        """(servers with JetStream, servers known): nats-server's ``trackedJetStreamServers``."""
        return sum(1 for n in self.nodes.values() if n.js), len(self.nodes)

    def same_domain(self, domain: str) -> bool:
        return not domain or not self.domain or domain == self.domain

    @classmethod
    def attach(cls, server: Any) -> "PeerRegistry":
        """A registry fed by ``server``'s system account (other servers' STATSZ and SHUTDOWN events) and
        holding the servers it has routes to now."""
        reg = cls(server.name, server.server_id, server.opts.jetstream.domain or "")
        server.sysacc.services.remote_listeners.append(reg.event)
        cl = server.cluster
        if cl is not None:
            for rid, rc in list(cl.routes.items()):
                reg.route_added(rc.remote_name, rid, cl.name)
        return reg

    def event(self, kind: str, body: bytes) -> None:
        """A system-account event body: ``STATSZ`` or ``SHUTDOWN`` (others are ignored)."""
        if kind == "STATSZ":
            self.statsz(body)
        elif kind == "SHUTDOWN":
            self.shutdown(body)

    # ---- updates ------------------------------------------------------------------------------------

    def _store(self, peer: str, ni: NodeInfo) -> None:
        self.nodes[peer] = ni
        for fn in list(self.listeners):
            fn(peer)

    def set_local(self, name: str, server_id: str, cluster: str, *, tags: Iterable[str] = (), version: str = "",
                  cfg: JSConfig | None = None, stats: JSStats | None = None, js: bool = True) -> NodeInfo:
        """This server's own entry (its statsz does not come back to it), refreshed from its own state."""
        ni = NodeInfo(name=name, id=server_id, cluster=cluster, domain=self.domain, version=version,
                      tags=tuple(tags), js=js, cfg=cfg, stats=stats, binary_snapshots=True)
        self._store(peer_id(name), ni)
        return ni

    def route_added(self, name: str, server_id: str, cluster: str, *, domain: str = "", js: bool = False) -> None:
        """A route to a server registered (its first connection): an entry without tags, config or stats,
        as nats-server stores on route registration (it replaces what statsz said until the next one)."""
        if not name or not self.same_domain(domain) or server_id == self.own_id:
            return
        self._seen.setdefault(server_id, _Seen(at=self.clock()))
        self._store(peer_id(name), NodeInfo(name=name, id=server_id, cluster=cluster, domain=domain, js=js,
                                            binary_snapshots=True))

    def statsz(self, msg: bytes | str | dict) -> NodeInfo | None:
        """A ``$SYS.SERVER.<id>.STATSZ`` body (``{"server": {...}, "statsz": {...}}``): the entry of that
        server, replaced (None when ignored: our own, another domain, or an undecodable body)."""
        try:
            d = _decode(msg)
            si = d["server"]
            name, sid = str(si["name"]), str(si["id"])
        except (ValueError, KeyError, TypeError):
            self.bad += 1
            return None
        if sid == self.own_id or not name:
            return None
        seq = int(si.get("seq") or 0)
        seen = self._seen.get(sid)
        if seen is None:
            seen = self._seen[sid] = _Seen()
        elif seq and seq <= seen.seq:
            self.out_of_order += 1  # (nats-server logs it and still takes the update below)
        seen.seq, seen.at = max(seen.seq, seq), self.clock()
        domain = str(si.get("domain") or "")
        if not self.same_domain(domain):
            return None
        flags = int(si.get("flags") or 0)
        cfg = stats = None
        meta_leader = ""
        meta_group = False
        meta_state = None
        jsd = (d.get("statsz") or {}).get("jetstream")
        if isinstance(jsd, dict):
            if isinstance(jsd.get(META_STATE_KEY), bool):
                meta_state = jsd[META_STATE_KEY]
            if isinstance(jsd.get("meta"), dict):
                meta_group = True
                meta_leader = str(jsd["meta"].get("leader") or "")
            if isinstance(jsd.get("config"), dict):
                cfg = JSConfig.from_json(jsd["config"])
            if isinstance(jsd.get("stats"), dict):
                stats = JSStats.from_json(jsd["stats"])
        ni = NodeInfo(name=name, id=sid, cluster=str(si.get("cluster") or ""), domain=domain,
                      version=str(si.get("ver") or ""), tags=_tags(si.get("tags")),
                      js=bool(flags & FLAG_JETSTREAM) or bool(si.get("jetstream")), offline=False, cfg=cfg,
                      stats=stats, binary_snapshots=bool(flags & FLAG_BINARY_SNAPSHOT),
                      account_nrg=bool(flags & FLAG_ACCOUNT_NRG), cap_js=bool(flags & FLAG_JETSTREAM),
                      statsz_seen=True, meta_leader=meta_leader,
                      meta_group=meta_group, meta_state=meta_state)
        self._store(peer_id(name), ni)
        return ni

    def shutdown(self, msg: bytes | str | dict) -> NodeInfo | None:
        """A ``$SYS.SERVER.<id>.SHUTDOWN`` body (the server info): that server is offline."""
        try:
            d = _decode(msg)
            name = str(d["name"])
        except (ValueError, KeyError, TypeError):
            self.bad += 1
            return None
        self._seen.pop(str(d.get("id") or ""), None)
        return self.mark_offline(peer_id(name))

    def server_gone(self, server_id: str) -> NodeInfo | None:
        """A server went away without a word (nats-server's orphan sweep, or its route closed for good)."""
        self._seen.pop(server_id, None)
        ni = self.by_server_id(server_id)
        return self.mark_offline(ni.peer) if ni is not None else None

    def mark_offline(self, peer: str) -> NodeInfo | None:
        ni = self.nodes.get(peer)
        if ni is None or ni.offline:
            return ni
        ni = replace(ni, offline=True)
        self._store(peer, ni)
        return ni

    def sweep(self, max_age: float = ORPHAN_AFTER) -> list[str]:
        """Servers not heard from for ``max_age`` seconds go offline; returns their peer ids."""
        now = self.clock()
        gone = [sid for sid, s in self._seen.items() if now - s.at > max_age]
        out = []
        for sid in gone:
            ni = self.server_gone(sid)
            if ni is not None:
                out.append(ni.peer)
        return out
