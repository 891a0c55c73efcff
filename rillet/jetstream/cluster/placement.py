"""Choosing the peers of a new stream or consumer group, as nats-server's meta leader does.

``select_peer_group`` takes the candidates in a random order (the meta group's peers) and keeps those

* in the target cluster (``placement.cluster``, else the requesting client's cluster, then its
  alternates),
* that have sent a statsz with JetStream config and usage (else: ``peer offline``),
* not tagged ``!jetstream`` (``exclude tag set``),
* carrying every ``placement.tags`` tag and none of the ``!tag`` ones (``tags not matched [...]``,
  ``tags excluded [...]``; tags compare lower-cased),
* with room for ``max_bytes`` in the stream's storage: the server's ``max_file_store``/``max_memory_store``
  less the larger of what is used and what existing streams reserve (``insufficient storage``),
* for a replicated group, holding fewer replicated stream and consumer groups than ``max_ha_assets``
  (``miscellaneous issue``),
* with a ``unique_tag`` value (e.g. ``az:``) no peer chosen before has (``server tag not unique``);
  when a placement tag itself starts with the unique prefix the check is off,

then prefers online servers, the most available storage and the fewest streams (for replicated streams:
the fewest HA assets first). Too few candidates, or too few online ones for a quorum, gives
``PlacementError``, whose text is nats-server's (``no suitable peers for placement, ...``) and which
becomes the API error ``CLUSTER_NO_PEERS`` (400, 10005).

Pure functions: the node registry, the meta peers, the assignments' usage and the random source are
arguments. Tags in an error list are sorted (nats-server prints them in map order).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rillet.jetstream.cluster.assignments import RaftGroup, consumer_group_name, stream_group_name
from rillet.jetstream.cluster.peers import NodeInfo

EXCLUDE_PLACEMENT_TAG = "!jetstream"
MAX_REPLICAS = 5


@dataclass(frozen=True)
class PlacementConfig:
    """What placement reads from a stream config."""
    replicas: int = 1
    storage: str = "file"  # "file" | "memory"
    max_bytes: int = -1
    cluster: str = ""
    tags: tuple[str, ...] = ()

    @classmethod
    def from_stream_config(cls, cfg: Mapping) -> "PlacementConfig":
        """From a stream config JSON (``num_replicas``, ``storage``, ``max_bytes``, ``placement``)."""
        pl = cfg.get("placement") or {}
        return cls(int(cfg.get("num_replicas") or 1), str(cfg.get("storage") or "file"),
                   int(cfg.get("max_bytes") if cfg.get("max_bytes") is not None else -1),
                   str(pl.get("cluster") or ""), tuple(pl.get("tags") or ()))


@dataclass
class PlacementError(Exception):
    """Why no peer group could be chosen; ``str()`` is nats-server's text."""
    offline: bool = False
    exclude_tag: bool = False
    no_storage: bool = False
    unique_tag: bool = False
    misc: bool = False
    no_js_cluster: bool = False
    no_match_tags: set[str] = field(default_factory=set)
    exclude_tags: set[str] = field(default_factory=set)

    def __str__(self) -> str:
        parts = ["no suitable peers for placement"]
        for flag, text in ((self.offline, "peer offline"), (self.exclude_tag, "exclude tag set"),
                           (self.no_storage, "insufficient storage"), (self.unique_tag, "server tag not unique"),
                           (self.misc, "miscellaneous issue"),
                           (self.no_js_cluster, "jetstream not enabled in cluster")):
            if flag:
                parts.append(text)
        if self.no_match_tags:
            parts.append("tags not matched [" + ", ".join(f"'{t}'" for t in sorted(self.no_match_tags)) + "]")
        if self.exclude_tags:
            parts.append("tags excluded [" + ", ".join(f"'{t}'" for t in sorted(self.exclude_tags)) + "]")
        return ", ".join(parts)

    def __hash__(self) -> int:  # (an exception must stay hashable)
        return id(self)

    def accumulate(self, other: "PlacementError | None") -> None:
        if other is None:
            return
        for f in ("offline", "exclude_tag", "no_storage", "unique_tag", "misc", "no_js_cluster"):
            if getattr(other, f):
                setattr(self, f, True)
        self.no_match_tags |= other.no_match_tags
        self.exclude_tags |= other.exclude_tags

    def api_error(self):  # -> rillet.jetstream.errors.ApiError
        from rillet.jetstream import errors as jserr
        return jserr.api_error("CLUSTER_NO_PEERS", err=str(self))


@dataclass(frozen=True)
class PeerUsage:
    streams: int = 0  # stream groups the peer is in
    ha: int = 0  # replicated (R>1) stream groups the peer is in
    assets: int = 0  # replicated stream and consumer groups the peer is in (what max_ha_assets limits)


def peer_usage(stream_groups: Iterable[Sequence[str]],
               consumer_groups: Iterable[Sequence[str]] = ()) -> dict[str, PeerUsage]:
    """Per peer, how many stream groups (and replicated ones) it is in, and how many replicated stream and
    consumer groups: from the assignments' group peers (nats-server 2.15 counts these live rather than
    trusting the statsz HA count, which lags by up to 10 seconds)."""
    ns: dict[str, int] = {}
    ha: dict[str, int] = {}
    assets: dict[str, int] = {}
    for peers in stream_groups:
        rep = len(peers) > 1
        for p in peers:
            ns[p] = ns.get(p, 0) + 1
            if rep:
                ha[p] = ha.get(p, 0) + 1
                assets[p] = assets.get(p, 0) + 1
    for peers in consumer_groups:
        if len(peers) > 1:
            for p in peers:
                assets[p] = assets.get(p, 0) + 1
    return {p: PeerUsage(ns.get(p, 0), ha.get(p, 0), assets.get(p, 0)) for p in {*ns, *assets}}


def _has(tags: Sequence[str], tag: str) -> bool:
    return tag.strip().lower() in tags


def available(ni: NodeInfo, storage: str) -> int:
    """Bytes of ``storage`` the server can still take: its limit less max(used, reserved)."""
    if ni.stats is None or ni.cfg is None:
        return 0
    if storage == "memory":
        used, limit = max(ni.stats.reserved_memory, ni.stats.memory), ni.cfg.max_memory
    else:
        used, limit = max(ni.stats.reserved_storage, ni.stats.storage), ni.cfg.max_storage
    return limit - used if limit > used else 0


def select_peer_group(replicas: int, cluster: str, cfg: PlacementConfig | None, nodes: Mapping[str, NodeInfo],
                      meta_peers: Iterable[str], *, usage: Mapping[str, PeerUsage] | None = None,
                      unique_tag: str = "", max_ha_assets: int = 0, existing: Sequence[str] = (),
                      replace_first_existing: int = 0, ignore: Iterable[str] = (),
                      rng: random.Random | None = None) -> list[str]:
    """``replicas`` peers of ``cluster`` for a group (``existing`` peers kept first); raises
    ``PlacementError``. ``nodes``: the registry by peer id; ``meta_peers``: the meta group's peers."""
    if not cluster or cfg is None:
        raise PlacementError(misc=True)
    r = replicas
    max_bytes = cfg.max_bytes if cfg.max_bytes > 0 else 0
    tag_rules = [(t[1:] if t.startswith("!") else t, t.startswith("!")) for t in cfg.tags]
    uprefix = unique_tag
    if uprefix and any(t.startswith(uprefix) for t, _ in tag_rules):
        uprefix = ""  # a placement tag names the unique value itself: no uniqueness check
    owners: dict[str, str] = {}  # unique tag value -> the peer holding it

    def unique_ok(peer: str, ni: NodeInfo) -> bool:
        for t in ni.tags:
            if t.startswith(uprefix):
                if t in owners:
                    return False
                owners[t] = peer
                return True
        return False  # the server has no tag with the unique prefix at all

    if existing:
        if len(existing) >= r:
            return list(existing[:r])
        if uprefix:
            for i, p in enumerate(existing):
                ni = nodes.get(p)
                if ni is not None and i >= replace_first_existing:
                    unique_ok(p, ni)  # taken by a kept peer; not required of it
    ex = set(existing)
    ign = set(ignore)
    usage = usage or {}
    err = PlacementError()
    peers = list(meta_peers)
    (rng or random).shuffle(peers)
    chosen: list[tuple[str, int, bool, int, int]] = []  # (peer, available, offline, ha, streams)
    online = 0
    for p in peers:
        ni = nodes.get(p)
        if ni is None:
            err.misc = True
            continue
        if ni.cluster != cluster:
            continue
        if not ni.selectable:
            err.offline = True
            continue
        if p in ign or p in ex:
            continue
        if _has(ni.tags, EXCLUDE_PLACEMENT_TAG):
            err.exclude_tag = True
            continue
        bad = False
        for t, exclude in tag_rules:
            has = _has(ni.tags, t)
            if exclude and has:
                err.exclude_tags.add(t)
                bad = True
                break
            if not exclude and not has:
                err.no_match_tags.add(t)
                bad = True
                break
        if bad:
            continue
        avail = available(ni, cfg.storage)
        if max_bytes and max_bytes > avail:
            err.no_storage = True
            continue
        u = usage.get(p, PeerUsage())
        if max_ha_assets > 0 and r > 1 and u.assets >= max_ha_assets:
            err.misc = True  # (nats-server 2.15: a replicated group only, and the live count, not the statsz)
            continue
        if uprefix and not unique_ok(p, ni):
            err.unique_tag = True
            continue
        chosen.append((p, avail, ni.offline, u.ha, u.streams))
        if not ni.offline:
            online += 1
    quorum = r // 2 + 1
    missing_quorum = online + len(existing) < quorum
    missing_nodes = len(chosen) < r - len(existing)
    if missing_nodes or missing_quorum:
        if not peers:
            err.no_js_cluster = True
        elif not missing_nodes and missing_quorum:
            err.offline = True
        raise err
    chosen.sort(key=lambda c: (c[2], -c[1], c[4]))
    if cfg.replicas > 1:
        chosen.sort(key=lambda c: (c[2], c[3]))  # (stable: keeps the order above among equals)
    return list(existing) + [c[0] for c in chosen[:r - len(existing)]]


def select_peer_replacement(replicas: int, cluster: str, cfg: PlacementConfig | None, nodes: Mapping[str, NodeInfo],
                            meta_peers: Iterable[str], existing: Sequence[str], **kw: Any) -> tuple[list[str], str]:
    """A peer move's new peer set, as nats-server picks it: ``existing[0]`` replaced by another peer of
    ``cluster`` (the others kept), else the whole group in the first other cluster (by name) that can hold it;
    returns (peers, their cluster); raises ``PlacementError`` with every cluster's reasons."""
    meta = list(meta_peers)
    try:
        return select_peer_group(replicas + 1, cluster, cfg, nodes, meta, existing=existing,
                                 replace_first_existing=1, **kw)[-replicas:], cluster
    except PlacementError as first:
        errs = PlacementError()
        errs.accumulate(first)
    for other in sorted({ni.cluster for ni in nodes.values() if ni.cluster and ni.cluster != cluster}):
        try:
            return select_peer_group(replicas, other, cfg, nodes, meta, **kw)[:replicas], other
        except PlacementError as e:
            errs.accumulate(e)
    raise errs


def create_stream_group(cfg: PlacementConfig, client_cluster: str, nodes: Mapping[str, NodeInfo],
                        meta_peers: Iterable[str], *, alternates: Sequence[str] = (), **kw) -> RaftGroup:
    """The group of a new stream: the placement cluster, else the client's cluster then its alternates;
    the errors of every cluster tried, accumulated. ``kw``: ``select_peer_group``'s keywords."""
    replicas = cfg.replicas or 1
    clusters = [cfg.cluster] if cfg.cluster else [client_cluster, *alternates]
    meta_peers = list(meta_peers)
    errs = PlacementError()
    for cn in clusters:
        try:
            peers = select_peer_group(replicas, cn, cfg, nodes, meta_peers, **kw)
        except PlacementError as e:
            errs.accumulate(e)
            continue
        return RaftGroup(stream_group_name(peers, cfg.storage), peers, cfg.storage, cn)
    raise errs


def consumer_replicas(consumer_cfg: Mapping, stream_cfg: Mapping) -> int:
    """A consumer's replica count given its stream's (nats-server's ``ConsumerConfig.replicas``): 0 or more
    than the stream's means the stream's, except an old-style ephemeral (no durable name, limits
    retention, replicas 0), which is R1."""
    want = int(consumer_cfg.get("num_replicas") or 0)
    srep = int(stream_cfg.get("num_replicas") or 1)
    if want == 0 or want > srep:
        durable = bool(consumer_cfg.get("durable_name"))
        if not durable and stream_cfg.get("retention", "limits") == "limits" and want == 0:
            return 1
        return srep
    return want


def create_consumer_group(consumer_cfg: Mapping, stream_cfg: Mapping, stream_group: RaftGroup,
                          nodes: Mapping[str, NodeInfo], rng: random.Random | None = None) -> RaftGroup:
    """A consumer's group: its stream's peers, or (fewer replicas) a random choice of the online ones."""
    want = int(consumer_cfg.get("num_replicas") or 0)
    if not stream_group.peers or want > len(stream_group.peers):
        raise PlacementError(misc=True)
    replicas = consumer_replicas(consumer_cfg, stream_cfg)
    peers = list(stream_group.peers)
    active = [p for p in peers if p in nodes and not nodes[p].offline]
    if replicas // 2 + 1 > len(active):
        raise PlacementError(offline=True)
    if 0 < replicas < len(peers):
        if len(active) < replicas:
            raise PlacementError(offline=True)
        (rng or random).shuffle(active)
        peers = active[:replicas]
    storage = "memory" if consumer_cfg.get("mem_storage") else stream_group.storage
    return RaftGroup(consumer_group_name(peers, storage), peers, storage)


def ha_assets_over(peers: Sequence[str], usage: Mapping[str, PeerUsage], max_ha_assets: int) -> str:
    """The first of a new replicated consumer's ``peers`` already in ``max_ha_assets`` replicated stream and
    consumer groups ("" when none, or the consumer is R1, or no limit): nats-server 2.15 then refuses the
    consumer (insufficient resources)."""
    if len(peers) <= 1 or max_ha_assets <= 0:
        return ""
    for p in peers:
        u = usage.get(p)
        if u is not None and u.assets >= max_ha_assets:
            return p
    return ""


def preferred_leader(peers: Sequence[str], nodes: Mapping[str, NodeInfo], rng: random.Random | None = None) -> str:
    """The peer the group should first elect (nats-server's ``setPreferred``): a random online one."""
    if not peers:
        return ""
    if len(peers) == 1:
        return peers[0]
    online = [p for p in peers if p in nodes and not nodes[p].offline]
    return (rng or random).choice(online or list(peers))
