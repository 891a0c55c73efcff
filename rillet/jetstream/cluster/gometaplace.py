"""What a Rillet meta leader of a Go cluster (gometalead.MetaLeaderApi) carries out itself that changes where a
stream runs: placement by nats-server's rules, scaling, moves, peer removals and evacuations.

Placement is nats-server's ``selectPeerGroup`` (rillet.jetstream.cluster.placement): the servers' tags, their
JetStream limits and usage, known from their statsz (``PeerRegistry``, this server's own entry from what it
reports to the Go servers, gometa_report), this server's ``unique_tag``; a server that has not answered the
meta leader lately counts as offline (a killed server's statsz entry stays until the orphan sweep).

The changes are meta entries in nats-server 2.15's desired-state layout (gomigrate): the meta leader writes the
target peers into the assignment's group as ``desired`` and the group's leader, a Go server or a Rillet one,
carries it out step by step, reporting on ``$SYS.JSC.*.ASSIGNMENT.RECONCILE`` (answered by
``MetaLeaderApi``). As nats-server's meta leader (our code, after its ``jsClusteredStreamUpdateRequest``,
``removePeerFromStreamLocked`` and the API handlers):

* ``STREAM.UPDATE`` with another replica count: a scale up places the new peers beside the current ones
  (an R1 stream's group renamed, its peer preferred: it has the data); a scale down marks the desired
  state ``scale_down`` over the current peers, the group leader choosing whom to drop. Another placement is
  a move: a new group as for a create, the group's name kept, ``move`` set. The first desired state records
  the ``origin`` (peers, cluster, replicas, placement). A move and a scale together: 10123; a move while
  one is under way: 10124, while another change is: 10226. The stream's leader answers.
* ``STREAM.PEER.REMOVE``: the peer (a server name or a peer id) out of the group at once and recorded as
  removed, a replacement placed by the stream's placement, its consumers remapped; answered at once.
  ``STREAM.PEER.EVACUATE``: the same, but the peer stays until its replacement is current and the
  consumers follow lazily. Both refuse (10075) when no replacement exists.
* ``SERVER.EVACUATE`` (system account): every stream on the server evacuated; where no replacement exists the
  server is recorded in the group's ``excluded`` peers (not placed back before the group is whole again).
"""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Callable, Optional

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.gomigrate import (_order, _with_desired, missing_peers, order_group,
                                               reassign_stream_peers)
from rillet.jetstream.cluster.peers import JSConfig, JSStats, NodeInfo, PeerRegistry
from rillet.jetstream.cluster.placement import (PlacementConfig, PlacementError, create_stream_group, peer_usage,
                                                select_peer_group, select_peer_replacement)
from rillet.raft import gowire as gw

__all__ = ["PeerChanges", "REMOVE_PEER_T", "EVACUATE_PEER_T", "SERVER_EVACUATE_T"]

T = "io.nats.jetstream.api.v1."
REMOVE_PEER_T = T + "stream_remove_peer_response"
EVACUATE_PEER_T = T + "stream_evacuate_peer_response"  # (nats-server 2.15.1's types)
SERVER_EVACUATE_T = T + "meta_server_evacuate_response"


def _error(typ: str, name: str, **values: Any) -> dict:
    from rillet.jetstream.errors import api_error
    return {"type": typ, "error": api_error(name, **values).to_dict()}


def _placement(cfg: dict) -> dict:
    return {k: v for k, v in (cfg.get("placement") or {}).items() if v}


def attach_registry(server: Any) -> Optional[PeerRegistry]:
    """The servers of the cluster as their statsz tell (None for a server without system services, e.g. a test
    double: placement is then on the online peers, without tags or limits)."""
    services = getattr(getattr(server, "sysacc", None), "services", None)
    if services is None or getattr(server, "cluster", None) is None:
        return None
    return PeerRegistry.attach(server)


class PeerChanges:
    """Part of ``MetaLeaderApi`` (see the module docstring)."""

    member: Any
    rng: Any
    registry: Optional[PeerRegistry]
    _inflight: dict
    _acc: str
    reassigned: int

    # (MetaLeaderApi's)
    _answer: Callable[[str, dict], None]
    _online: Callable[[], list[str]]
    _is_go: Callable[[str], bool]
    _json: Callable[[bytes], Optional[dict]]
    _remap_consumers: Callable[[tuple[str, str], dict], bool]
    _propose: Callable[[int, dict], None]

    # -- placement ------------------------------------------------------------------------------------------
    def _request_doc(self, reply: str, typ: str, body: bytes) -> Optional[dict]:
        """A request body that must be a JSON object: None (answered BAD_REQUEST or INVALID_JSON) when not."""
        if not body.strip():
            self._answer(reply, _error(typ, "BAD_REQUEST"))
            return None
        req = self._json(body)
        if req is None:
            self._answer(reply, _error(typ, "INVALID_JSON", err="the request is not a JSON object"))
        return req

    def _meta_peers(self) -> list[str]:
        r = self.member.raft
        return sorted(p for p in (r.peers | {r.me}) if p not in r.removed_peers)

    def _nodes(self) -> dict[str, NodeInfo]:
        """The registry's servers as placement sees them: this server's own entry refreshed, a server that has
        not answered the meta leader lately offline."""
        reg = self.registry
        if reg is None:
            return {}
        srv = self.member.server
        report = getattr(srv, "go_js_report", None)
        if report is not None:
            mem, sto = report.limits()
            u = report.usage()
            reg.set_local(srv.name, srv.server_id, srv.opts.cluster.name, tags=srv.opts.tags,
                          cfg=JSConfig(mem, sto, srv.opts.jetstream.unique_tag or ""),
                          stats=JSStats(u["memory"], u["storage"], u["reserved_memory"], u["reserved_storage"],
                                        u["ha_assets"]))
        online = set(self._online())
        return {p: ni if (p in online or ni.offline) else replace(ni, offline=True) for p, ni in reg.nodes.items()}

    def _place_kw(self) -> dict:
        st = self.member.state
        usage = peer_usage([(sa.get("group") or {}).get("peers") or [] for sa in st.streams.values()],
                           [(ca.get("group") or {}).get("peers") or [] for cs in st.consumers.values()
                            for ca in cs.values()])
        return {"usage": usage, "unique_tag": self.member.server.opts.jetstream.unique_tag or "", "rng": self.rng}

    def _new_group(self, cfg: dict, ci: dict) -> tuple[list[str], str]:
        """nats-server's ``createGroupForStream``: the peers and cluster of a new group for ``cfg`` (the placement's
        cluster, else the client's then its alternates); raises PlacementError."""
        pc = PlacementConfig.from_stream_config(cfg)
        home = str(ci.get("cluster") or self.member.server.opts.cluster.name)
        alts = [str(a) for a in (ci.get("alts") or [])]
        g = create_stream_group(pc, home, self._nodes(), self._meta_peers(), alternates=alts, **self._place_kw())
        return list(g.peers), g.cluster

    def _lead_first(self, peers: list[str]) -> list[str]:
        """The peers with the one to prefer as leader first: an online Go server when there is one (a Rillet member
        of a new group with Go peers does not campaign at once), else an online Rillet one."""
        online = set(self._online())
        go = [p for p in peers if self._is_go(p) and p in online]
        live = [p for p in peers if p in online]
        first = self.rng.choice(go or live or peers)
        return [first, *[p for p in peers if p != first]]

    def _replacements(self, sa: dict, retain: list[str], target: int, cluster: str, skip: list[str]) -> list[str]:
        """New peers for a group keeping ``retain``, toward ``target`` peers (as many as placement finds: the largest
        group first, as nats-server's ``reassignStreamPeers``)."""
        if self.registry is None:
            free = [p for p in self._online() if p not in retain and p not in skip
                    and p not in self.member.raft.removed_peers]
            return free[:max(target - len(retain), 0)]
        pc = PlacementConfig.from_stream_config(sa.get("stream") or {})
        nodes, meta, kw = self._nodes(), self._meta_peers(), self._place_kw()
        cluster = cluster or self.member.server.opts.cluster.name
        for r in range(target, 0, -1):
            try:
                return select_peer_group(r, cluster, pc, nodes, meta, existing=retain, ignore=skip, **kw)[len(retain):]
            except PlacementError:
                if r <= len(retain) + 1:
                    break
        return []

    def _place(self, n: int) -> Optional[list[str]]:
        """``n`` online peers, the first (the group's preferred leader) a Go server when one is online; with none,
        Rillet servers only, a Rillet one preferred (it campaigns at once: gostream.host_streams). None when
        there are not enough."""
        online = self._online()
        if n == 1:
            return [self.rng.choice(online)]
        if n > len(online):
            return None
        go = [p for p in online if self._is_go(p)]
        if not go:
            return self.rng.sample(online, n)
        first = self.rng.choice(go)
        rest = self.rng.sample([p for p in online if p != first], n - 1)
        return [first, *rest]

    def _placement_refused(self, cfg: Any) -> Optional[str]:
        pl = cfg.placement
        if pl is not None and (pl.tags or (pl.cluster and pl.cluster != self.member.server.opts.cluster.name)):
            return ("no suitable peers for placement: placement by tags or another cluster is not supported by a "
                    "Rillet meta leader")
        return None

    def _reassign(self, key: tuple[str, str], sa: dict, drop: list[str], remove: bool, min_replicas: int) -> bool:
        g = sa.get("group") or {}
        d = g.get("desired") or None
        base = list(d.get("peers") or []) if d else list(g.get("peers") or [])
        retain = [p for p in base if p not in drop]
        meta = set(self._meta_peers())
        excluded = [p for p in g.get("excluded") or [] if p in meta]
        # (replacements placed as nats-server places them: tags, unique_tag, storage; gometaplace)
        cands = self._replacements(sa, retain, max(len(base), min_replicas),
                                   str((d.get("cluster") if d else "") or g.get("cluster") or ""), [*drop, *excluded])
        csa, replaced = reassign_stream_peers(sa, drop, remove, min_replicas, cands, self.rng)
        if csa is None:
            return False
        csa["group"].pop("excluded", None)
        if excluded and missing_peers(csa):  # (evacuated peers stay out until the group is whole again)
            csa["group"]["excluded"] = excluded
        acc, name = key
        if not replaced:
            self.member.log.warn(f"JetStream: could not replace peer(s) {drop} of stream '{acc} > {name}': no "
                                 "other server online; placed once one joins")
        csa["group"] = order_group(csa["group"])
        self.reassigned += 1
        self._propose(ge.OP_ASSIGN_STREAM, csa)
        self._inflight[key] = self.member.raft.pindex
        self._remap_consumers(key, csa)
        return True

    # -- scaling and moving ---------------------------------------------------------------------------------
    def _changed_group(self, sa: dict, new: dict, ci: dict,
                       peer_set: Optional[tuple[list[str], str]] = None) -> Optional[dict]:
        """The group of an updated stream when the update scales or moves it (nats-server's rules, see the module
        docstring), None when it does neither; raises ApiError or PlacementError. ``peer_set``: a move to these
        peers of that cluster, chosen already (ACCOUNT.STREAM.MOVE)."""
        from rillet.jetstream.errors import ApiError
        old = sa.get("stream") or {}
        g = sa.get("group") or {}
        d = g.get("desired") or None
        replicas = int(old.get("num_replicas") or 1)
        want = int(new.get("num_replicas") or 1)
        is_move = peer_set is not None or (bool(_placement(new)) and _placement(new) != _placement(old))
        is_scale = want != replicas
        if not is_move and not is_scale:
            return None
        legacy = d is None and len(g.get("peers") or []) > replicas
        moving = bool(d and d.get("move")) or legacy
        if is_move and is_scale:
            raise ApiError.make("STREAM_MOVE_AND_SCALE")
        if moving:
            raise ApiError.make("STREAM_MOVE_IN_PROGRESS")
        if is_move and d is not None:
            raise ApiError.make("STREAM_RECONFIGURE_IN_PROGRESS")
        if all(p not in set(self._online()) for p in g.get("peers") or []):
            raise ApiError.make("STREAM_OFFLINE")
        if is_move:
            peers, cluster = (list(peer_set[0]), peer_set[1]) if peer_set is not None else self._new_group(new, ci)
            ng = _with_desired(g, {"name": g.get("name"), "peers": peers, "cluster": cluster, "preferred": ""})
            ng["desired"]["move"] = True
        else:
            current = list(d.get("peers") or []) if d else list(g.get("peers") or [])
            cluster = str(g.get("cluster") or (new.get("placement") or {}).get("cluster") or ci.get("cluster")
                          or self.member.server.opts.cluster.name)
            tgt: dict[str, Any] = {"name": g.get("name"), "cluster": cluster, "preferred": g.get("preferred") or "",
                                   "desired": d}
            if want > len(current):  # (a scale-up: the account's limits checked first, as nats-server)
                self._scale_up_limits(ci, new)
                if self.registry is None:
                    raise PlacementError(misc=True)
                pc = PlacementConfig.from_stream_config(new)
                peers = select_peer_group(want, cluster, pc, self._nodes(), self._meta_peers(), existing=current,
                                          **self._place_kw())
                if len(g.get("peers") or []) == 1 and d is None:
                    tgt["name"] = gw.group_name("S", len(peers), str(g.get("store") or "file"))
                if len(current) == 1:
                    tgt["preferred"] = current[0]
                tgt["peers"] = peers
                ng = _with_desired(g, tgt)
            else:
                tgt["peers"] = current
                ng = _with_desired(g, tgt)
                ng["desired"]["scale_down"] = True
        if not ng["desired"].get("origin"):  # (nats-server's populateOrigin: the state before any change)
            if d:
                opeers, ocluster = list(d.get("peers") or []), d.get("cluster") or ""
            else:
                opeers, ocluster = list(g.get("peers") or [])[:replicas], g.get("cluster") or ""
            origin: dict[str, Any] = {"peers": opeers}
            if ocluster:
                origin["cluster"] = ocluster
            origin["replicas"] = replicas
            if old.get("placement"):
                origin["placement"] = copy.deepcopy(old["placement"])
            ng["desired"]["origin"] = origin
        ng["desired"] = _order(ng["desired"])
        return order_group(ng)

    def _scale_up_limits(self, ci: dict, new: dict) -> None:
        """nats-server's jsClusteredStreamLimitsCheck before a scale-up adds peers (rillet...golimits)."""
        from rillet.jetstream import configtypes as C
        from rillet.jetstream.api.codec import from_dict
        from rillet.jetstream.cluster.golimits import check_stream_limits
        from rillet.jetstream.manager import account_js_config
        acc = str(ci.get("acc") or "")
        limits = account_js_config(self.member.server.opts.accounts or {}).get(acc)
        check_stream_limits(self.member.state.streams, acc, from_dict(new, C.StreamConfig), limits)

    # -- removing and evacuating peers ----------------------------------------------------------------------
    def remove_peer_from_stream(self, key: tuple[str, str], sa: dict, peer: str, remove: bool, require: bool = False,
                                exclude: bool = False) -> bool:
        """nats-server's ``removePeerFromStreamLocked``: ``peer`` replaced in the stream's group (the assignment
        proposed; with ``remove`` the consumers remapped too). False when nothing is proposed."""
        g = sa.get("group") or {}
        d = g.get("desired") or None
        base = list(d.get("peers") or []) if d else list(g.get("peers") or [])
        if peer not in base and peer not in (g.get("peers") or []):
            return False
        cluster = str((d.get("cluster") if d else "") or g.get("cluster") or "")
        retain = [p for p in base if p != peer]
        meta = set(self._meta_peers())
        excluded = [p for p in g.get("excluded") or [] if p in meta]
        cands = self._replacements(sa, retain, len(base), cluster, [peer, *excluded])
        csa, replaced = reassign_stream_peers(sa, [peer], remove, 0, cands, self.rng)
        if csa is None:
            return False
        acc, name = key
        log = self.member.log
        if require and missing_peers(csa):
            log.warn(f"JetStream cluster rejected peer removal, no replacement available for stream "
                     f"'{acc} > {name}'")
            return False
        if not replaced:
            log.warn(f"JetStream cluster could not replace peer for stream '{acc} > {name}'")
        ng = csa["group"]
        ng.pop("excluded", None)
        short = missing_peers(csa)
        if short and excluded:
            ng["excluded"] = excluded
        if exclude and short and peer not in excluded:
            ng["excluded"] = [*excluded, peer]
        csa["group"] = order_group(ng)
        self._propose(ge.OP_ASSIGN_STREAM, csa)
        self._inflight[key] = self.member.raft.pindex
        if remove:
            self._remap_consumers(key, csa)
        return True

    def _stream_peer_remap(self, subject: str, reply: str, ci: Optional[dict], body: bytes, remove: bool) -> None:
        """``STREAM.PEER.REMOVE.<stream>`` (``remove``) and ``STREAM.PEER.EVACUATE.<stream>``."""
        typ = REMOVE_PEER_T if remove else EVACUATE_PEER_T
        if ci is None or not ci.get("acc"):
            return
        req = self._request_doc(reply, typ, body)
        if req is None:
            return
        want = req.get("peer")
        if not isinstance(want, str) or not want:
            self._answer(reply, _error(typ, "BAD_REQUEST"))
            return
        key = (str(ci["acc"]), subject.rsplit(".", 1)[-1])
        sa = self.member.state.streams.get(key)
        if sa is None:
            self._answer(reply, _error(typ, "STREAM_NOT_FOUND"))
            return
        g = sa.get("group") or {}
        members = set(g.get("peers") or []) | set((g.get("desired") or {}).get("peers") or [])
        peer = next((p for p in (gw.peer_id(want), want) if p in members), "")
        if not peer:
            self._answer(reply, _error(typ, "CLUSTER_PEER_NOT_MEMBER"))
            return
        if not self.remove_peer_from_stream(key, sa, peer, remove=remove, require=True):
            self._answer(reply, _error(typ, "PEER_REMAP"))
            return
        self.member.log.notice(f"JetStream: {'removing' if remove else 'evacuating'} peer {peer} of stream "
                               f"'{key[0]} > {key[1]}'")
        self._answer(reply, {"type": typ, "success": True})

    def _stream_peer_remove(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        self._stream_peer_remap(subject, reply, ci, body, remove=True)

    def _stream_peer_evacuate(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        self._stream_peer_remap(subject, reply, ci, body, remove=False)

    def _server_evacuate(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``SERVER.EVACUATE`` (system account): ``peer`` (a server name) or ``peer_id``; every stream on it
        evacuated, answered at once."""
        m = self.member
        if ci is not None and ci.get("acc") not in (None, getattr(m.server.system_account, "name", "")):
            return
        req = self._request_doc(reply, SERVER_EVACUATE_T, body)
        if req is None:
            return
        meta = self._meta_peers()
        pid, name = str(req.get("peer_id") or ""), str(req.get("peer") or "")
        found = (pid if pid in meta else "") if pid else (gw.peer_id(name) if name and gw.peer_id(name) in meta
                                                          else "")
        if not found:
            self._answer(reply, _error(SERVER_EVACUATE_T, "CLUSTER_SERVER_NOT_MEMBER"))
            return
        n = 0
        for key, sa in sorted(m.state.streams.items()):
            g = sa.get("group") or {}
            if found in (g.get("peers") or []) or found in ((g.get("desired") or {}).get("peers") or []):
                n += self.remove_peer_from_stream(key, sa, found, remove=False, exclude=True)
        m.log.notice(f"JetStream: evacuating peer {found}: {n} stream(s) moving off it")
        self._answer(reply, {"type": SERVER_EVACUATE_T, "success": True})

    # -- moves by the operator, and their cancel -------------------------------------------------------------
    def _account_stream(self, subject: str, ci: Optional[dict], typ: str, reply: str) -> Optional[tuple[str, str]]:
        """(account, stream) of an ``ACCOUNT.STREAM.*.<account>.<stream>`` request its account or the system
        account sent, None when ignored or answered (an unknown account)."""
        m = self.member
        acc, name = subject.split(".")[-2:]
        if ci is not None and ci.get("acc") not in (acc, getattr(m.server.system_account, "name", "")):
            return None
        if acc not in (m.server.opts.accounts or {}):
            self._answer(reply, _error(typ, "NO_ACCOUNT"))
            return None
        return acc, name

    def _account_stream_move(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``ACCOUNT.STREAM.MOVE.<account>.<stream>``: the stream's peers replaced by as many new ones (``server``:
        that peer replaced first; ``tags`` added to the placement for the choice only), in its cluster, else in
        another whole one; proposed as an update with that peer set (a move). The stream's leader answers."""
        from rillet.jetstream.api import codec as apijson
        from rillet.jetstream.api.moves import UPDATE_T, JSApiMetaServerStreamMoveRequest
        from rillet.jetstream.errors import ApiError
        target = self._account_stream(subject, ci, UPDATE_T, reply)
        if target is None:
            return
        key = target
        m = self.member
        try:
            req = apijson.go_decode(body or b"{}", JSApiMetaServerStreamMoveRequest, strict=False)
            sa = m.state.streams.get(key)
            if sa is None:
                raise ApiError.make("STREAM_NOT_FOUND")
            g = sa.get("group") or {}
            d = g.get("desired") or None
            cur = list(d.get("peers") or []) if d else list(g.get("peers") or [])
            cur_cluster = str((d.get("cluster") if d else g.get("cluster")) or m.server.opts.cluster.name)
            if req.server:
                src = gw.peer_id(req.server)
                ni = self._nodes().get(src)
                if src not in self._meta_peers() or (req.cluster and (ni is None or ni.cluster != req.cluster)) \
                        or (req.domain and (ni is None or ni.domain != req.domain)):
                    raise ApiError.make("CLUSTER_SERVER_NOT_MEMBER")
                if src not in cur:
                    raise ApiError.make("CLUSTER_PEER_NOT_MEMBER")
                cur = [src, *[p for p in cur if p != src]]
            cfg = copy.deepcopy(sa.get("stream") or {})
            replicas = int(cfg.get("num_replicas") or 1)
            choose = copy.deepcopy(cfg)
            if req.tags:
                pl = dict(choose.get("placement") or {})
                pl["tags"] = list(pl.get("tags") or []) + list(req.tags)
                choose["placement"] = pl
            pc = PlacementConfig.from_stream_config(choose)
            nodes, meta, kw = self._nodes(), self._meta_peers(), self._place_kw()
            peers, cluster = select_peer_replacement(replicas, cur_cluster, pc, nodes, meta, cur, **kw)
            group = self._changed_group(sa, cfg, ci or {}, peer_set=(peers, cluster))
        except ApiError as e:
            self._answer(reply, {"type": UPDATE_T, "error": e.to_dict()})
            return
        except PlacementError as e:
            self._answer(reply, {"type": UPDATE_T, "error": e.api_error().to_dict()})
            return
        m.log.notice(f"Requested move for stream '{key[0]} > {key[1]}' R={replicas} from {cur} to {peers}")
        client = {k: v for k, v in (ci or {}).items() if k not in ("jwt", "issuer_key")}
        client["acc"] = key[0]
        doc = {"client": client, "created": sa.get("created", ""), "stream": cfg, "group": group,
               "sync": sa.get("sync", ""), "subject": subject, "reply": reply}
        self._propose(ge.OP_UPDATE_STREAM, doc)
        self._inflight[key] = m.raft.pindex

    def _stream_cancel_move(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``STREAM.CANCEL_MOVE.<stream>`` (its account)."""
        from rillet.jetstream.api.moves import CANCEL_T
        if ci is None or not ci.get("acc"):
            return
        self._cancel_move((str(ci["acc"]), subject.rsplit(".", 1)[-1]), reply, CANCEL_T)

    def _account_stream_cancel_move(self, subject: str, reply: str, ci: Optional[dict], body: bytes) -> None:
        """``ACCOUNT.STREAM.CANCEL_MOVE.<account>.<stream>`` (that account or the system account)."""
        from rillet.jetstream.api.moves import CANCEL_T
        key = self._account_stream(subject, ci, CANCEL_T, reply)
        if key is not None:
            self._cancel_move(key, reply, CANCEL_T)

    def _cancel_move(self, key: tuple[str, str], reply: str, typ: str) -> None:
        """nats-server's ``jsClusteredStreamCancelMoveLocked``: the replicas, placement (and retention) of the
        desired state's origin in the configuration at once, the origin's peers as the new desired state (still a
        move when a move was under way). The stream's leader answers."""
        sa = self.member.state.streams.get(key)
        if sa is None:
            self._answer(reply, _error(typ, "STREAM_NOT_FOUND"))
            return
        g = sa.get("group") or {}
        cfg = copy.deepcopy(sa.get("stream") or {})
        d = g.get("desired") or None
        replicas = int(cfg.get("num_replicas") or 1)
        legacy = d is None and len(g.get("peers") or []) > replicas
        origin = copy.deepcopy(d.get("origin")) if d else (
            {"peers": list(g.get("peers") or [])[:replicas], "cluster": g.get("cluster") or "",
             "replicas": replicas, **({"placement": cfg["placement"]} if cfg.get("placement") else {})}
            if legacy else None)
        if not origin:
            self._answer(reply, _error(typ, "STREAM_RECONFIGURE_NOT_IN_PROGRESS"))
            return
        moving = bool(d and d.get("move")) or legacy
        cfg["num_replicas"] = int(origin.get("replicas") or 1)
        if origin.get("placement"):
            cfg["placement"] = copy.deepcopy(origin["placement"])
        else:
            cfg.pop("placement", None)
        if origin.get("retention"):
            cfg["retention"] = origin["retention"]
        ng = _with_desired(g, {"name": g.get("name"), "peers": list(origin.get("peers") or []),
                               "cluster": origin.get("cluster") or "", "preferred": g.get("preferred") or "",
                               "desired": d})
        if moving:
            ng["desired"]["move"] = True
        else:
            ng["desired"].pop("move", None)
        ng["desired"].setdefault("origin", origin)
        ng["desired"] = _order(ng["desired"])
        self.member.log.notice(f"Requested cancel of the reconfiguration of stream '{key[0]} > {key[1]}'")
        doc = dict(sa, stream=cfg, group=order_group(ng), reply=reply)
        self._propose(ge.OP_UPDATE_STREAM, doc)
        self._inflight[key] = self.member.raft.pindex
