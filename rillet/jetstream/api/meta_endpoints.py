"""The meta leader's endpoints of the ``$JS.API`` in a cluster (``MetaEndpoints``, part of ``cluster.MetaApi``):
account info, stream create/update/restore/delete/names/list/peer remove, consumer create/delete/names/list.
Each proposes a change of the assignments to the meta group and answers once it is applied (or gathers the
infos from the stream leaders). Which server answers a request is ``cluster.MetaApi``'s routing decision;
the answers' helpers (``_error``, ``_answer_later``, ``_requester``...) are there too."""
from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from rillet.jetstream import configtypes as C
from rillet.jetstream import consumerconfig as CC
from rillet.jetstream.api import codec as apijson
from rillet.jetstream.api import types as AT
from rillet.jetstream import streamconfig as SC
from rillet.gocompat.gotime import format_time
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster.placement import (PlacementConfig, create_consumer_group,
                                                create_stream_group, ha_assets_over, preferred_leader,
                                                select_peer_group)
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import NotLeader
from rillet.subjects.validate import subjects_collide

if TYPE_CHECKING:
    from rillet.jetstream.cluster.meta import JetStreamCluster

T = "io.nats.jetstream.api.v1."
JSON_LIMIT = 1024
LIST_LIMIT = 256
DIRECT_ASK_TIMEOUT = 0.25  # a delete of a consumer not in the assignments: the wait for its stream leader's word


def _cfg_dict(cfg: Any) -> dict:
    return json.loads(apijson.go_json(cfg))


def _stream_cfg(d: dict) -> Any:
    return apijson.from_dict(d, C.StreamConfig)


def _consumer_cfg(d: dict) -> Any:
    return apijson.from_dict(d, C.ConsumerConfig)


def _stream_request(router: Any, args: list[str]) -> tuple[Any, str, str]:
    """The account a stream request is for (its JetStream part and its name) and the stream's name."""
    jsa = router.jsa
    return jsa, jsa.account.name, args[0] if args else ""


class MetaEndpoints:
    """The meta leader's endpoints, ``_api_<key>`` (``self.cl`` is the JetStreamCluster)."""

    cl: "JetStreamCluster"

    def _api_info(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        jsa = router.jsa
        acc = jsa.account.name
        streams = list(self.cl.state.streams.get(acc, {}).values())
        mem, sto, _, _ = jsa.usage()
        rmem = sum(max(int(sa.config.get("max_bytes") or 0), 0) for sa in streams
                   if sa.config.get("storage") == "memory")
        rsto = sum(max(int(sa.config.get("max_bytes") or 0), 0) for sa in streams
                   if sa.config.get("storage", "file") == "file")
        d: dict[str, Any] = {"type": T + "account_info_response", "memory": mem, "storage": sto,
                             "reserved_memory": rmem, "reserved_storage": rsto, "streams": len(streams),
                             "consumers": sum(len(sa.consumers) for sa in streams),
                             "limits": apijson.to_go(jsa.limits)}
        if self.cl.js.domain:
            d["domain"] = self.cl.js.domain
        from rillet.jetstream.api.common import API_LEVEL
        d["api"] = {"level": API_LEVEL, "total": jsa.api_total, "errors": jsa.api_errors}
        if not streams or self.cl.streams is None:
            router.respond(reply, d)
            return

        async def run() -> None:
            # as nats-server counts a clustered account: every replica's bytes (a stream's bytes once per
            # peer), from each stream leader's state; a stream without a leader counts this server's replica
            infos = await asyncio.gather(*(self.cl.info.stream_info(acc, sa.name) for sa in streams))
            used = {"memory": 0, "file": 0}
            for sa, info in zip(streams, infos):
                if info is not None:
                    n = int((info.get("state") or {}).get("bytes") or 0) * len(sa.group.peers)
                else:
                    rep = self.cl.streams.replica(acc, sa.name)
                    n = int(rep.stream.store.state().bytes) if rep is not None else 0
                used["memory" if sa.config.get("storage") == "memory" else "file"] += n
            d["memory"], d["storage"] = used["memory"], used["file"]
            router.respond(reply, d)
        self.cl.loop.create_task(run())

    # streams

    def _stream_info_later(self, router: Any, reply: bytes | None, typ: str, acc: str, name: str, *extra: Any,
                           **kw: Any) -> None:
        """Answer with the stream's info once its group can tell it (``_answer_later``)."""
        self._answer_later(router, reply, typ, lambda t: self.cl.info.stream_info(acc, name, t), *extra, **kw)

    def _config_checks(self, jsa: Any, name: str, strict: bool | None = None) -> dict[str, Any]:
        """The checks of a stream config in a cluster against the account's other streams and its limits, as
        keyword arguments of streamconfig's normalize_stream_config / normalize_stream_update (``strict``:
        None for the server's ``jetstream { strict }``)."""
        acc = jsa.account.name
        return dict(subject_name=name, lookup_stream=self._lookup(acc), subjects_overlap=self._overlap(acc, skip=name),
                    account_limits=jsa.limits, clustered=True, server_limits=jsa.js.server_limits,
                    strict=jsa.js.strict if strict is None else strict)

    def _new_stream_group(self, jsa: Any, reply: bytes | None, d: dict) -> tuple[A.RaftGroup, str]:
        """The group of a new stream (a create, a restore) of config ``d``, placed with a preferred peer, and
        the requester's cluster; MAXIMUM_STREAMS_LIMIT when the account has all the streams it may have."""
        lim = jsa.limits
        if lim.max_streams > 0 and len(self.cl.state.streams.get(jsa.account.name, {})) >= lim.max_streams:
            raise ApiError.make("MAXIMUM_STREAMS_LIMIT")
        pc = PlacementConfig.from_stream_config(d)
        self.cl._refresh_local()
        nodes = self.cl.registry.nodes
        ccl, alts = self._requester(jsa.account, reply)  # (the client's cluster first)
        rg = create_stream_group(pc, ccl, nodes, self.cl.group.peers, alternates=alts, **self._place_kw())
        rg.preferred = preferred_leader(rg.peers, nodes)
        return rg, ccl

    def _api_stream_create(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes, checked: Any = None) -> None:
        """``checked``: the config already checked in a worker thread (_api_big_config)."""
        typ = T + "stream_create_response"
        jsa, acc, name = _stream_request(router, args)
        existing = self.cl.state.stream(acc, name)
        cfg = checked if checked is not None else SC.normalize_stream_config(
            body, is_create=True, existing=_stream_cfg(existing.config) if existing is not None else None,
            **self._config_checks(jsa, name))
        if existing is not None:
            self._stream_info_later(router, reply, typ, acc, name)
            return
        key = (acc, cfg.name)
        d = _cfg_dict(cfg)
        inflight = self.cl._inflight.get(key)
        if inflight is not None:  # a create of this name still on its way through the log
            if inflight[0] != d:
                raise ApiError.make("STREAM_NAME_EXIST")
            inflight[1].append(lambda: self._stream_info_later(router, reply, typ, acc, name))
            return
        router._check_supported(cfg)
        rg, ccl = self._new_stream_group(jsa, reply, d)
        sa = A.StreamAssignment(config=d, group=rg, sync=A.sync_subject(), client=self._client(acc, ccl),
                                created=time.time_ns(), subject=f"$JS.API.STREAM.CREATE.{name}",
                                reply=(reply or b"").decode())

        def done(later: list[Callable[[], None]]) -> None:
            self._stream_info_later(router, reply, typ, acc, name, {"did_create": True})
            for fn in later:
                fn()
        self._propose_new_stream(key, d, sa, done)

    def _propose_new_stream(self, key: tuple[str, str], d: dict, sa: A.StreamAssignment,
                            committed: Callable[[list[Callable[[], None]]], None] | None = None) -> None:
        """Propose the assignment ``sa`` of a new stream (config ``d``), in flight under ``key`` (account,
        name) until it commits; ``committed`` then gets what waited for it (the same create again). Not
        committed here (leadership lost): nothing, the client retries."""
        self.cl._inflight[key] = (d, [])

        def done(res: Any, err: Optional[BaseException]) -> None:
            later = (self.cl._inflight.pop(key, None) or (None, []))[1]
            if err is None and committed is not None:
                committed(later)
        try:
            self.cl._propose(A.encode_assign_stream(sa), done)
        except NotLeader:
            self.cl._inflight.pop(key, None)
            raise

    def _api_stream_update(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes, checked: Any = None) -> None:
        """``checked``: the config already checked in a worker thread (_api_big_config)."""
        typ = T + "stream_update_response"
        jsa, acc, name = _stream_request(router, args)
        sa = self.cl.state.stream(acc, name)
        cons = [(n, _consumer_cfg(ca.config)) for n, ca in sa.consumers.items()] if sa is not None else None
        cfg = checked if checked is not None else SC.normalize_stream_update(
            _stream_cfg(sa.config) if sa is not None else None, body, consumers=cons, **self._config_checks(jsa, name))
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
                self._stream_info_later(router, reply, typ, acc, name, config=d)
        self.cl._propose(A.encode_update_stream(nsa), done)

    def _all_offline(self, peers: list[str]) -> bool:
        nodes = self.cl.registry.nodes
        return bool(peers) and all(p in nodes and nodes[p].offline for p in peers)

    def _updated_group(self, sa: A.StreamAssignment, d: dict, requester: tuple[str, list[str]] = ("", []),
                       peer_set: Optional[tuple[list[str], str]] = None) -> A.RaftGroup:
        """The group of an updated stream, as nats-server 2.15: another ``placement`` is a move, another
        ``num_replicas`` a scale (not both: 10123); either sets ``desired`` (the target peers) and leaves
        ``peers`` as they are: ``_reconcile_one`` then adds the new peers, waits until they are current
        and drops the old ones. Any other update keeps the group (no preferred peer). ``peer_set``: a move
        to these peers of that cluster, already chosen (ACCOUNT.STREAM.MOVE, ``moves.py``). A move waits
        for any reconfiguration under way (10124 a move, 10226 another); a scale or a retention change only
        for a move. A retention change of a replicated stream whose consumers' replica counts must follow
        (to interest or work queue) sets a desired state on the same peers, with the old retention in its
        ``origin``: the reconciling moves the consumers."""
        old = sa.config
        g = sa.group.copy()
        ds = g.desired
        is_move = peer_set is not None or (d.get("placement") is not None
                                           and d.get("placement") != old.get("placement"))
        want = int(d.get("num_replicas") or 1)
        is_scale = want != int(old.get("num_replicas") or 1)
        if is_move and is_scale:
            raise ApiError.make("STREAM_MOVE_AND_SCALE")
        if ds is not None and ds.get("move") and (is_move or is_scale):
            raise ApiError.make("STREAM_MOVE_IN_PROGRESS")
        if ds is not None and is_move:
            raise ApiError.make("STREAM_RECONFIGURE_IN_PROGRESS")
        if not ds:
            g.scale_up = False
        old_ret, new_ret = old.get("retention", "limits"), d.get("retention", "limits")
        is_retention = old_ret != new_ret and want > 1 and self._consumers_to_match(sa, d)
        if ds is not None and ds.get("move") and old_ret != new_ret:
            raise ApiError.make("STREAM_MOVE_IN_PROGRESS")
        if not is_move and not is_scale and not is_retention:
            g.preferred = ""
            return g
        origin = (ds or {}).get("origin") or {"peers": list(sa.group.peers), "cluster": sa.group.cluster,
                                               "replicas": int(old.get("num_replicas") or 1),
                                               **({"placement": old["placement"]} if old.get("placement") else {})}
        if old_ret != new_ret and "retention" not in origin and not ds:
            origin["retention"] = old_ret
        if not is_move and not is_scale:
            # a retention change whose consumers' replica counts must follow (limits -> interest or work queue
            # with consumers on fewer peers than the stream): the peers stay, the consumers move
            g.preferred = ""
            nd0: dict[str, Any] = {"id": A._random_token(A.PEER_ID_LEN), "created": format_time(time.time_ns()),
                                   "peers": list(ds["peers"]) if ds else list(g.peers),
                                   "cluster": (ds or {}).get("cluster") or g.cluster or self.cl.name}
            for k in ("scale_down", "removed"):
                if ds and ds.get(k):
                    nd0[k] = ds[k]
            nd0["origin"] = origin
            g.desired = nd0
            return g
        self.cl._refresh_local()
        pc = PlacementConfig.from_stream_config(d)
        nd: dict[str, Any] = {"id": A._random_token(A.PEER_ID_LEN), "created": format_time(time.time_ns())}
        if is_move and peer_set is not None:
            nd.update(peers=list(peer_set[0]), cluster=peer_set[1], move=True)
        elif is_move:
            # (a placement naming no cluster: the requesting client's, then the others, as for a create)
            ng = create_stream_group(pc, requester[0] or self.cl.name, self.cl.registry.nodes, self.cl.group.peers,
                                     alternates=requester[1], **self._place_kw())
            nd.update(peers=ng.peers, cluster=ng.cluster, move=True)
        else:
            current = list(ds["peers"]) if ds else list(g.peers)
            cluster = g.cluster or (pc.cluster or self.cl.name)
            if want > len(current):
                peers = select_peer_group(want, cluster, pc, self.cl.registry.nodes, self.cl.group.peers,
                                          existing=current, **self._place_kw())
                if len(g.peers) == 1:
                    g.preferred = g.peers[0]
                nd.update(peers=peers, cluster=cluster)
            else:
                nd.update(peers=current, cluster=cluster, scale_down=True)
        nd["origin"] = origin
        g.desired = nd
        return g

    def _consumers_to_match(self, sa: A.StreamAssignment, d: dict) -> bool:
        """Any consumer of the stream whose replica count differs from what the stream's new config ``d``
        gives it (nats-server: an interest or work-queue stream's consumers as replicated as the stream)."""
        nsa = A.StreamAssignment(config=d, group=sa.group, sync=sa.sync, client=sa.client, created=sa.created)
        nsa.consumers = sa.consumers
        return bool(self.cl._consumers_off_target(nsa, list(sa.group.peers)))

    def _api_stream_restore(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                            body: bytes) -> None:
        """STREAM.RESTORE in a cluster, as nats-server: the meta leader checks the config, the limits and the
        name (10130), places the group (replicas and placement as configured) with a preferred peer and
        proposes the assignment with ``restore_state``; it does not answer. The preferred peer, once the
        group's leader, answers with the subject to send the archive to and, at the end, with the stream's
        info (streams.py ``StreamReplica._begin_restore``)."""
        name = args[0] if args else ""
        from rillet.jetstream.api.common import is_empty_request
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
        cfg = SC.normalize_stream_config(raw, is_create=True, **self._config_checks(jsa, name, strict=True))
        key = (acc, cfg.name)
        if self.cl.state.stream(acc, name) is not None or key in self.cl._inflight:
            raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
        router._check_supported(cfg)
        d = _cfg_dict(cfg)
        rg, ccl = self._new_stream_group(jsa, reply, d)  # (as a create)
        state = req.get("state")
        sa = A.StreamAssignment(config=d, group=rg, sync=A.sync_subject(), client=self._client(acc, ccl),
                                created=time.time_ns(), subject=f"$JS.API.STREAM.RESTORE.{name}",
                                reply=(reply or b"").decode(), restore=state if isinstance(state, dict) else {})
        self._propose_new_stream(key, d, sa)

    def _api_stream_delete(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes) -> None:
        typ = T + "stream_delete_response"
        acc = router.jsa.account.name
        sa = self.cl.state.stream(acc, args[0] if args else "")
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
        self.cl._propose(A.encode_remove_stream(rm), done)

    def _matching_streams(self, acc: str, req: dict) -> list[A.StreamAssignment]:
        subj = req.get("subject") or ""
        out = sorted(self.cl.state.streams.get(acc, {}).values(), key=lambda sa: sa.name)
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
            infos = await asyncio.gather(*(self.cl.info.stream_info(acc, sa.name) for sa in page))
            got = [i for i in infos if i is not None]
            missing = [sa.name for sa, i in zip(page, infos) if i is None]
            router.respond(reply, {"type": T + "stream_list_response", "total": len(streams), "offset": offset,
                                   "limit": LIST_LIMIT, "streams": got, "missing": missing or None})
        self.cl.loop.create_task(run())

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
        sa = self.cl.state.stream(acc, args[0] if args else "")
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        who = str(req["peer"])
        members = list(sa.group.peers) + list((sa.group.desired or {}).get("peers") or ())
        peer = next((p for p in members if p == who or self.cl.registry.name_of(p) == who), None)
        if peer is None:
            raise ApiError.make("CLUSTER_PEER_NOT_MEMBER")

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                router.respond(reply, {"type": typ, "success": True})
        if not self.cl._replace_peer(sa, peer, done, require=True):
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
        sa = self.cl.state.stream(acc, stream_name)
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
            self._answer_later(router, reply, typ, lambda t: self.cl.info.consumer_info(acc, stream_name, name, t))
            return
        if not name:
            from rillet.jetstream.api.common import unused_consumer_name
            name = cfg.name = unused_consumer_name(sa.consumers)
        d = _cfg_dict(cfg)
        if existing is not None:
            group = self._consumer_update_group(sa, existing, d)
        else:
            self.cl._refresh_local()
            group = create_consumer_group(d, sa.config, sa.group, self.cl.registry.nodes)
            lim = self.cl.js.server_limits.max_ha_assets
            usage = self._place_kw()["usage"] if lim > 0 and len(group.peers) > 1 else {}
            over = ha_assets_over(group.peers, usage, lim)
            if over:
                self._warn_limited(f"JetStream cluster: {self.cl.registry.name_of(over)} (HA Asset Count: "
                                   f"{usage[over].assets}) is at the max ha asset limit of {lim}: consumer "
                                   f"{name or '(ephemeral)'} on stream {stream_name} refused")
                raise ApiError.make("INSUFFICIENT_RESOURCES")
            group.preferred = preferred_leader(group.peers, self.cl.registry.nodes)
        ca = A.ConsumerAssignment(name=name, stream=stream_name, config=d, group=group, client=self._client(acc),
                                  created=existing.created if existing is not None else time.time_ns(),
                                  subject=f"$JS.API.CONSUMER.CREATE.{stream_name}", reply=(reply or b"").decode())

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:  # (an update: once the consumer's leader applied it)
                # (a new consumer: as its leader started it, before any delivery, as nats-server answers)
                new = existing is None
                self._answer_later(router, reply, typ,
                                   lambda t: self.cl.info.consumer_info(acc, stream_name, name, t, initial=new),
                                   config=d if existing is not None else None)
        self.cl._propose(A.encode_assign_consumer(ca), done)

    def _consumer_update_group(self, sa: A.StreamAssignment, ca: A.ConsumerAssignment, d: dict) -> A.RaftGroup:
        """An updated consumer's group: as it is, with a desired state when its replica count changes (as
        nats-server 2.15, the update's answer shows it; the meta leader's reconciling moves it)."""
        g = ca.group.copy()
        sd = sa.group.desired
        final = list(sd["peers"]) if sd is not None and not sd.get("scale_down") else list(sa.group.peers)
        nca = A.ConsumerAssignment(name=ca.name, stream=ca.stream, config=d, group=g, client=ca.client,
                                   created=ca.created)
        target = self.cl._consumer_target(sa, nca, final)
        if set(target) != set(g.peers) and not (g.desired is not None and list(g.desired.get("peers") or ()) == target):
            g.desired = self.cl.consumer_desired(sa, nca, target, final)
        return g

    def _api_consumer_delete(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                             body: bytes) -> None:
        if len(args) != 2:
            return
        typ = T + "consumer_delete_response"
        acc = router.jsa.account.name
        sa = self.cl.state.stream(acc, args[0])
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        ca = sa.consumers.get(args[1])
        if ca is None:
            if reply and self.cl.streams is not None:
                # a mirror's or source's consumer is not in the assignments: its stream leader (another
                # server) deletes it and answers; "not found" only when that leader does not hold it
                async def not_direct() -> None:
                    q = {"account": acc, "stream": args[0], "consumer": args[1], "direct": True}
                    if await self.cl.info._ask("$JSC.CI", q, DIRECT_ASK_TIMEOUT) is None:
                        self._error(router, reply, "CONSUMER.DELETE", ApiError.make("CONSUMER_NOT_FOUND"))
                self.cl.loop.create_task(not_direct())
                return
            raise ApiError.make("CONSUMER_NOT_FOUND")
        rm = A.ConsumerAssignment(name=ca.name, stream=ca.stream, config=ca.config, group=ca.group,
                                  client=ca.client, created=ca.created,
                                  subject=f"$JS.API.CONSUMER.DELETE.{ca.stream}.{ca.name}")

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                router.respond(reply, {"type": typ, "success": True})
        self.cl._propose(A.encode_remove_consumer(rm), done)

    def _consumers_of(self, router: Any, args: list[str]) -> A.StreamAssignment:
        sa = self.cl.state.stream(router.jsa.account.name, args[0] if args else "")
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
            infos = await asyncio.gather(*(self.cl.info.consumer_info(acc, sa.name, n) for n in page))
            got = [i for i in infos if i is not None]
            missing = [n for n, i in zip(page, infos) if i is None]
            router.respond(reply, {"type": T + "consumer_list_response", "total": len(names), "offset": offset,
                                   "limit": LIST_LIMIT, "consumers": got, "missing": missing or None})
        self.cl.loop.create_task(run())
