"""The ``$JS.API`` in a JetStream cluster: what the meta leader answers (account info, stream and consumer create,
update, delete, names, list, restore, peer remove; the system account's META.LEADER.STEPDOWN, SERVER.REMOVE and
account purge), what it routes to a stream or consumer leader, and how its answers wait for a new group's leader.
The meta group itself (membership, the replicated assignments, placement, reconciling) is ``meta.py``."""
from __future__ import annotations

import asyncio
import json
import random
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from rillet.jetstream import configtypes as C
from rillet.jetstream import consumerconfig as CC
from rillet.jetstream.api import codec as apijson
from rillet.jetstream.api import types as AT
from rillet.jetstream import streamconfig as SC
from rillet.gocompat.gotime import format_time
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster.placement import (PlacementConfig, PlacementError, create_consumer_group,
                                                create_stream_group, peer_usage, preferred_leader,
                                                select_peer_group)
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import NotLeader
from rillet.subjects.overlap import any_collision
from rillet.subjects.validate import subjects_collide

if TYPE_CHECKING:
    from rillet.jetstream.cluster.meta import JetStreamCluster


T = "io.nats.jetstream.api.v1."
JSON_LIMIT = 1024
LIST_LIMIT = 256
OFFLINE_ANSWER_DELAY = 0.5  # seconds before the meta leader says a stream/consumer is offline (nats-server's errRespDelay)
CONFIG_WAIT = 3.0  # seconds an update's answer waits for the stream leader to apply the new config
INFO_TIMEOUT = 0.5  # one $JSC.SI / $JSC.CI request
ANSWER_WITHIN = 10.0  # seconds the meta leader waits for a new group's leader to give its info
DIRECT_ASK_TIMEOUT = 0.25  # a delete of a consumer not in the assignments: the wait for its stream leader's word
INFO_FIRST_TIMEOUT = 0.1  # the first ask of a create's answer (a member of a group electing answers once it
BIG_CONFIG = 4096  # a stream config body past this is checked in a worker thread (rillet.jetstream.api.common BIG_CONFIG)
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


class MetaApi:
    """The part of ``JetStreamCluster`` moved here; ``self.cl`` is the JetStreamCluster."""

    def __init__(self, cl: "JetStreamCluster") -> None:
        self.cl = cl

    def _answer_later(self, router: Any, reply: bytes | None, typ: str, get: Callable[[], Any],
                      extra: Optional[dict] = None, config: Optional[dict] = None) -> None:
        """Answer with the info ``get(timeout)`` (a coroutine) gives, retried until the group has a leader (and,
        with ``config``, until the leader has applied that config, for CONFIG_WAIT seconds at most)."""
        if not reply:
            return
        want = {k: v for k, v in config.items() if k != "metadata"} if config is not None else None

        async def run() -> None:
            deadline = self.cl.loop.time() + ANSWER_WITHIN
            cfg_deadline = self.cl.loop.time() + CONFIG_WAIT
            timeout = INFO_FIRST_TIMEOUT  # (a new group elects within tens of ms: ask often at first)
            while self.cl.running:
                info = await get(timeout)
                if info is not None and want is not None and self.cl.loop.time() < cfg_deadline:
                    got = {k: v for k, v in (info.get("config") or {}).items() if k != "metadata"}
                    if got != want:
                        await asyncio.sleep(0.02)
                        continue
                if info is not None:
                    router.respond(reply, {"type": typ, **info, **(extra or {})})
                    return
                if self.cl.loop.time() > deadline:
                    break
                timeout = min(2 * timeout, INFO_TIMEOUT)
                await asyncio.sleep(0.01)
            self.cl.log.warn(f"JetStream cluster: no leader gave its info within {ANSWER_WITHIN:g}s: "
                          f"{typ} not answered")
        self.cl.loop.create_task(run())

    # ---- the $JS.API ------------------------------------------------------------------------------------

    def answer_here(self, router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                    body: bytes) -> bool:
        """The cluster's routing decision (``seams.ApiRoute``, asked by ``routing.answer_here`` for every
        request in a JetStream account): True when this server's handler answers the request."""
        return not self.route_api(router, key, args, reply, hdr, body)

    def route_api(self, router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                  body: bytes) -> bool:
        """True when the request is handled by the routing (answered, or deliberately left to another
        server); False when this server's handler answers it."""
        if self.cl.isolated or self.cl.removed:
            return True  # (a Go JetStream in the cluster: its servers answer, this one keeps out of it;
            # or this server was removed from the meta group)
        if key in ("META.LEADER.STEPDOWN", "SERVER.REMOVE"):
            # (the system account's are subscribed by _on_sys_api; elsewhere nats-server only warns)
            if self.cl.is_leader():
                what = "stepdown" if key[0] == "M" else "server remove"
                self._warn_limited(f"JetStream API {what} request from non-system account: "
                                   f"\"{router.jsa.account.name}\"")
            return True
        if key in ("CONSUMER.CREATE", "CONSUMER.DURABLE.CREATE") and self.cl.streams is not None:
            r = self.cl.streams.direct_consumer(router, args, body)  # (a mirror's or source's: the stream leader's)
            if r is not None:
                return r
        if key == "CONSUMER.DELETE" and self.cl.streams is not None:
            r = self.cl.streams.direct_consumer_delete(router, args)  # (the same: deleted by the stream leader)
            if r is not None:
                return r
        if key not in META_KEYS:
            return self._stream_level(router, key, args, reply, hdr, body)
        if not self.cl.is_leader():
            if self.cl.leaderless() and reply:
                self._error(router, reply, key, ApiError.make("CLUSTER_NOT_AVAIL"))
            return True
        handler = getattr(self, "_api_" + key.replace(".", "_").lower())
        if key in ("STREAM.CREATE", "STREAM.UPDATE") and len(body) > BIG_CONFIG:
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
            existing = self.cl.state.stream(acc, name)
            kw["existing"] = _stream_cfg(existing.config) if existing is not None else None

            def check() -> Any:
                return SC.normalize_stream_config(body, is_create=True, **kw)
        else:
            sa = self.cl.state.stream(acc, name)
            kw["consumers"] = [(n, _consumer_cfg(ca.config)) for n, ca in sa.consumers.items()] \
                if sa is not None else None
            old = _stream_cfg(sa.config) if sa is not None else None

            def check() -> Any:
                return SC.normalize_stream_update(old, body, **kw)

        async def run() -> None:
            try:
                try:
                    cfg = await self.cl.loop.run_in_executor(None, check)
                except ApiError as e:
                    self._error(router, reply, key, e)
                    return
                except Exception as e:
                    self.cl.log.error(f"JetStream cluster: API error handling {key}: {e!r}")
                    self._error(router, reply, key, ApiError.make("STREAM_GENERAL_ERROR", err=str(e)))
                    return
                if not self.cl.is_leader():
                    return  # (as NotLeader below: the new leader is asked again)
                self._call_api(router, key, handler, args, reply, hdr, body, cfg)
            finally:
                q.release()
                self.cl.server.schedule_flush()
        self.cl.loop.create_task(run())

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
            self.cl.log.error(f"JetStream cluster: API error handling {key}: {e!r}")
            self._error(router, reply, key, ApiError.make("STREAM_GENERAL_ERROR", err=str(e)))
        else:
            router.jsa.api_total += 1

    def _stream_level(self, router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                      body: bytes) -> bool:
        """A request for a stream or consumer leader: where the stream has a replica, the streams layer's
        gate decides (its leader answers, the others keep quiet); a stream the meta layer does not know is
        "not found" from the meta leader only (the single-server handler answers it there); one held
        elsewhere: silence."""
        if not args:
            return False
        acc = router.jsa.account.name
        st = self.cl.streams
        if st is not None and st.replica(acc, args[0]) is not None:
            return st.api_gate(router, key, args, reply, hdr, body) is False
        if self.cl.is_leader():
            sa = self.cl.state.stream(acc, args[0])
            if sa is None:
                return False
            if reply and key in ("STREAM.INFO", "CONSUMER.INFO"):
                self._offline_answer(router, key, args, sa, reply)
            return True
        if self.cl.leaderless() and reply:
            from rillet.jetstream.api.common import _type_for
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
            if self.cl.is_leader() and self._all_offline(peers):
                from rillet.jetstream.api.common import _type_for
                h = router.handlers.get(key)
                router.jsa.api_total += 1
                router.jsa.api_errors += 1
                router.respond(reply, {"type": _type_for(h) if h is not None else T + "error_response",
                                       "error": ApiError.make(err).to_dict()})
        self.cl.loop.call_later(OFFLINE_ANSWER_DELAY, later)

    def _warn_limited(self, text: str) -> None:
        now = self.cl.loop.time()
        if now - self.cl._warned.get(text, -1e9) >= 10.0:
            self.cl._warned[text] = now
            self.cl.log.warn(text)

    def _error(self, router: Any, reply: bytes | None, key: str, err: Any) -> None:
        router.jsa.api_total += 1
        router.jsa.api_errors += 1
        d: dict[str, Any] = {"type": T + _TYPES[key], "error": err.to_dict()}
        if key in _LIST_FIELDS:
            d.update({"total": 0, "offset": 0, "limit": 0, _LIST_FIELDS[key]: None})
        router.respond(reply, d)

    def _client(self, acc: str, cluster: str = "") -> dict:
        return {"acc": acc, "server": self.cl.server.name, "cluster": cluster or self.cl.name}

    def _requester(self, account: Any, reply: bytes | None) -> tuple[str, list[str]]:
        """The cluster of the client that sent a request, and the other clusters (nats-server's client
        info ``cluster`` and ``alts``: the request's server's outbound gateways, by RTT).

        nats-server reads them from the client info the request carries; Rillet's requests cross routes
        and gateways as they were published, so they are found from the reply subject: a request that
        came over a gateway less than 2 s ago carries its cluster's hash in its ``_GR_.`` reply; else the
        subscription of the reply is here, in this cluster (local or routed interest), or announced by one
        remote cluster (interest-only mode). Without a reply (or a gateway), this server's cluster."""
        gw = getattr(self.cl.server, "gateway", None)
        own = self.cl.name
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
                return self.cl.name
            for name, cfg in gw.remotes.items():
                if cfg.hash == h:
                    return name
        subj = reply.decode("utf-8", "surrogateescape")
        r = account.match(subj)
        if r.psubs or r.qsubs:
            return self.cl.name
        acc = getattr(account, "name_b", None) or account.name.encode("utf-8", "surrogateescape")
        for gc in gw.outo:
            if not gc.closed:
                psi, qr = gc.interest(acc, subj)
                if psi or qr is not None:
                    return gc.name
        return ""

    def _lookup(self, acc: str) -> Callable[[str], Any]:
        def lookup(name: str) -> Any:
            sa = self.cl.state.stream(acc, name)
            return _stream_cfg(sa.config) if sa is not None else None
        return lookup

    def _overlap(self, acc: str, skip: str = "") -> Callable[[list[str]], bool]:
        # the other streams' subjects, taken now (a large config is checked in a worker thread, see
        # _api_big_config), in one token tree: linear in the subjects, not their product
        stored = [b for sa in self.cl.state.streams.get(acc, {}).values() if sa.name != skip
                  for b in sa.config.get("subjects") or ()]

        def check(subjects: list[str]) -> bool:
            return bool(stored) and any_collision(stored, subjects)
        return check

    def _place_kw(self) -> dict:
        usage = peer_usage(sa.group.peers for sa in self.cl.state.iter_streams())
        return {"usage": usage, "unique_tag": self.cl.server.opts.jetstream.unique_tag}

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

    def _api_stream_create(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes, checked: Any = None) -> None:
        """``checked``: the config already checked in a worker thread (_api_big_config)."""
        typ = T + "stream_create_response"
        jsa = router.jsa
        acc = jsa.account.name
        name = args[0] if args else ""
        existing = self.cl.state.stream(acc, name)
        cfg = checked if checked is not None else SC.normalize_stream_config(body, is_create=True, subject_name=name, lookup_stream=self._lookup(acc),
                                         subjects_overlap=self._overlap(acc, skip=name), account_limits=jsa.limits,
                                         clustered=True, server_limits=jsa.js.server_limits, strict=jsa.js.strict,
                                         existing=_stream_cfg(existing.config) if existing is not None else None)
        if existing is not None:
            self._answer_later(router, reply, typ, lambda t: self.cl.info.stream_info(acc, name, t))
            return
        key = (acc, cfg.name)
        d = _cfg_dict(cfg)
        inflight = self.cl._inflight.get(key)
        if inflight is not None:  # a create of this name still on its way through the log
            if inflight[0] != d:
                raise ApiError.make("STREAM_NAME_EXIST")
            inflight[1].append(lambda: self._answer_later(router, reply, typ, lambda t: self.cl.info.stream_info(acc, name, t)))
            return
        router._check_supported(cfg)
        lim = jsa.limits
        if lim.max_streams > 0 and len(self.cl.state.streams.get(acc, {})) >= lim.max_streams:
            raise ApiError.make("MAXIMUM_STREAMS_LIMIT")
        pc = PlacementConfig.from_stream_config(d)
        self.cl._refresh_local()
        nodes = self.cl.registry.nodes
        ccl, alts = self._requester(jsa.account, reply)
        rg = create_stream_group(pc, ccl, nodes, self.cl.group.peers, alternates=alts, **self._place_kw())
        rg.preferred = preferred_leader(rg.peers, nodes)
        sa = A.StreamAssignment(config=d, group=rg, sync=A.sync_subject(), client=self._client(acc, ccl),
                                created=time.time_ns(), subject=f"$JS.API.STREAM.CREATE.{name}",
                                reply=(reply or b"").decode())
        self.cl._inflight[key] = (d, [])

        def done(res: Any, err: Optional[BaseException]) -> None:
            later = (self.cl._inflight.pop(key, None) or (None, []))[1]
            if err is not None:
                return  # (leadership lost: not committed here; the client retries)
            self._answer_later(router, reply, typ, lambda t: self.cl.info.stream_info(acc, name, t), {"did_create": True})
            for fn in later:
                fn()
        try:
            self.cl._propose(A.encode_assign_stream(sa), done)
        except NotLeader:
            self.cl._inflight.pop(key, None)
            raise

    def _api_stream_update(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                           body: bytes, checked: Any = None) -> None:
        """``checked``: the config already checked in a worker thread (_api_big_config)."""
        typ = T + "stream_update_response"
        jsa = router.jsa
        acc = jsa.account.name
        name = args[0] if args else ""
        sa = self.cl.state.stream(acc, name)
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
                self._answer_later(router, reply, typ, lambda t: self.cl.info.stream_info(acc, name, t), config=d)
        self.cl._propose(A.encode_update_stream(nsa), done)

    def _all_offline(self, peers: list[str]) -> bool:
        nodes = self.cl.registry.nodes
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
        self.cl._refresh_local()
        pc = PlacementConfig.from_stream_config(d)
        nd: dict[str, Any] = {"id": A._random_token(A.PEER_ID_LEN), "created": format_time(time.time_ns())}
        if is_move:
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
        cfg = SC.normalize_stream_config(raw, is_create=True, subject_name=name, lookup_stream=self._lookup(acc),
                                         subjects_overlap=self._overlap(acc, skip=name), account_limits=jsa.limits,
                                         clustered=True, server_limits=jsa.js.server_limits)
        key = (acc, cfg.name)
        if self.cl.state.stream(acc, name) is not None or key in self.cl._inflight:
            raise ApiError.make("STREAM_NAME_EXIST_RESTORE_FAILED")
        router._check_supported(cfg)
        lim = jsa.limits
        if lim.max_streams > 0 and len(self.cl.state.streams.get(acc, {})) >= lim.max_streams:
            raise ApiError.make("MAXIMUM_STREAMS_LIMIT")
        d = _cfg_dict(cfg)
        pc = PlacementConfig.from_stream_config(d)
        self.cl._refresh_local()
        nodes = self.cl.registry.nodes
        ccl, alts = self._requester(jsa.account, reply)  # (as a create: the client's cluster first)
        rg = create_stream_group(pc, ccl, nodes, self.cl.group.peers, alternates=alts, **self._place_kw())
        rg.preferred = preferred_leader(rg.peers, nodes)
        state = req.get("state")
        sa = A.StreamAssignment(config=d, group=rg, sync=A.sync_subject(), client=self._client(acc, ccl),
                                created=time.time_ns(), subject=f"$JS.API.STREAM.RESTORE.{name}",
                                reply=(reply or b"").decode(), restore=state if isinstance(state, dict) else {})
        self.cl._inflight[key] = (d, [])

        def done(res: Any, err: Optional[BaseException]) -> None:
            self.cl._inflight.pop(key, None)
        try:
            self.cl._propose(A.encode_assign_stream(sa), done)
        except NotLeader:
            self.cl._inflight.pop(key, None)
            raise

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
            from rillet.jetstream.consumer.common import new_consumer_name
            while True:
                name = new_consumer_name()
                if name not in sa.consumers:
                    break
            cfg.name = name
        d = _cfg_dict(cfg)
        if existing is not None:
            group = existing.group
        else:
            self.cl._refresh_local()
            group = create_consumer_group(d, sa.config, sa.group, self.cl.registry.nodes)
            group.preferred = preferred_leader(group.peers, self.cl.registry.nodes)
        ca = A.ConsumerAssignment(name=name, stream=stream_name, config=d, group=group, client=self._client(acc),
                                  created=existing.created if existing is not None else time.time_ns(),
                                  subject=f"$JS.API.CONSUMER.CREATE.{stream_name}", reply=(reply or b"").decode())

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                self._answer_later(router, reply, typ, lambda t: self.cl.info.consumer_info(acc, stream_name, name, t))
        self.cl._propose(A.encode_assign_consumer(ca), done)

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

    # ---- system account: META.LEADER.STEPDOWN, SERVER.REMOVE --------------------------------------------

    def _on_account_purge(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                          msg: bytes) -> None:
        """``$JS.API.ACCOUNT.PURGE.<account>`` (system account, meta leader): every consumer and stream of
        the account deleted through the log, answered ``initiated`` at once, as nats-server."""
        if not self.cl.is_leader():
            return
        acc = subject.decode().rsplit(".", 1)[-1]
        typ = T + "account_purge_response"

        def respond(d: dict) -> None:
            if reply:
                self.cl._ic.publish(reply, None, apijson.go_json({"type": typ, **d}))
        if "/" in acc or "\\" in acc:
            respond({"error": ApiError.make("STREAM_GENERAL_ERROR",
                                            err="account name can not contain path separators").to_dict()})
            return
        ns = nc = 0
        try:
            for sa in list(self.cl.state.streams.get(acc, {}).values()):
                for cn in sorted(sa.consumers):
                    ca = sa.consumers[cn]
                    self.cl._propose(A.encode_remove_consumer(A.ConsumerAssignment(
                        name=ca.name, stream=ca.stream, config=ca.config, group=ca.group, client=ca.client,
                        created=ca.created, subject=subject.decode())), lambda res, err: None)
                    nc += 1
                self.cl._propose(A.encode_remove_stream(A.StreamAssignment(
                    config=sa.config, group=sa.group, sync=sa.sync, client=sa.client, created=sa.created,
                    subject=subject.decode())), lambda res, err: None)
                ns += 1
        except NotLeader as e:
            respond({"error": ApiError.make("STREAM_GENERAL_ERROR", err=str(e) or "not leader").to_dict()})
            return
        self.cl.log.notice(f"Purge request for account {acc} (streams: {ns}, consumer: {nc}, hasAccount: "
                        f"{'true' if ns else 'false'})")
        respond({"initiated": True})

    def _stepdown_target(self, pl: dict) -> Optional[str]:
        """The peer a META.LEADER.STEPDOWN with ``placement`` hands leadership to (nats-server 2.11+):
        ``preferred`` names a member server (not this one); else an online member other than this one in
        ``cluster`` carrying every tag in ``tags``, chosen at random; no placement: the most current."""
        g = self.cl.group
        pref = str(pl.get("preferred") or "")
        if pref:
            to = next((p for p in g.peers if self.cl.registry.name_of(p) == pref), None)
            if to == self.cl.peer:
                raise ApiError.make("CLUSTER_NO_PEERS", err=f'preferred server "{pref}" is already leader')
            if to is None:
                raise ApiError.make("CLUSTER_NO_PEERS", err=f'preferred server "{pref}" not known')
            return to
        cluster, tags = str(pl.get("cluster") or ""), [str(t) for t in pl.get("tags") or ()]
        if not cluster and not tags:
            return None
        nodes = self.cl.registry.nodes
        cands = [p for p in g.peers if p != self.cl.peer and p in nodes and not nodes[p].offline
                 and (not cluster or nodes[p].cluster == cluster)
                 and all(t.strip().lower() in nodes[p].tags for t in tags)]
        if not cands:
            raise ApiError.make("CLUSTER_NO_PEERS", err="no replacement peer connected")
        return random.choice(cands)

    def _on_sys_api(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if not self.cl.is_leader() or not reply:
            return  # (only the meta leader listens, in nats-server's words)
        key = "META.LEADER.STEPDOWN" if b".META.LEADER.STEPDOWN" in subject else "SERVER.REMOVE"
        if key == "META.LEADER.STEPDOWN" and self.cl.group.stepdown_seen(reply):
            return  # (carried out by the previous leader; this copy was routed here after the transfer)
        body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        typ = T + _TYPES[key]

        def respond(d: dict) -> None:
            self.cl._ic.publish(reply, None, apijson.go_json({"type": typ, **d}))
        try:  # (as nats-server: parsed only when it looks like a JSON object or array)
            req = apijson.parse_json(body) if body.lstrip()[:1] in (b"{", b"[") else {}  # (Go's errors)
            if not isinstance(req, dict):
                raise ApiError.make("INVALID_JSON", err="not a JSON object")
        except ApiError as e:
            respond({"error": e.to_dict()})
            return
        g = self.cl.group
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
        peer = next((p for p in g.peers if who and (p == who or self.cl.registry.name_of(p) == who)), None)
        if peer is None:
            respond({"error": ApiError.make("CLUSTER_SERVER_NOT_MEMBER").to_dict()})
            return
        if any(p in g.peers for p in self.cl.state.removed if not self.cl._may_rejoin(p)):
            respond({"error": ApiError.make("CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT").to_dict()})
            return

        # the PEER_REMOVE entry first (the removed server applies it too: it learns it was removed), then,
        # once applied, the RAFT configuration change (_drop_removed_voters)
        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                respond({"success": True})
        try:
            self.cl._propose(A.encode_peer_remove(peer), done)
        except NotLeader:
            return
