"""The ``$JS.API`` in a JetStream cluster: which server answers each request (``MetaApi.answer_here``, the one
routing decision: the meta leader, a stream or consumer leader, or nobody), how the meta leader's answers wait
for a new group's leader, and the system account's META.LEADER.STEPDOWN, SERVER.REMOVE and account purge. The
meta leader's endpoints (account info, stream and consumer create, update, delete, names, list, restore, peer
remove) are ``meta_endpoints.py``; the meta group itself (membership, the replicated assignments, placement,
reconciling) is ``rillet/jetstream/cluster/meta.py``."""
from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Callable, Optional

from rillet.jetstream.api import codec as apijson
from rillet.jetstream import streamconfig as SC
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster.placement import PlacementError, peer_usage
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import NotLeader
from rillet.subjects.overlap import any_collision

from rillet.jetstream.api.meta_endpoints import T, MetaEndpoints, _consumer_cfg, _stream_cfg
from rillet.jetstream.api.moves import MoveEndpoints

if TYPE_CHECKING:
    from rillet.jetstream.cluster.meta import JetStreamCluster


OFFLINE_ANSWER_DELAY = 0.5  # seconds before the meta leader says a stream/consumer is offline (nats-server's errRespDelay)
CONFIG_WAIT = 3.0  # seconds an update's answer waits for the stream leader to apply the new config
INFO_TIMEOUT = 0.5  # one $JSC.SI / $JSC.CI request
ANSWER_WITHIN = 10.0  # seconds the meta leader waits for a new group's leader to give its info
INFO_FIRST_TIMEOUT = 0.1  # the first ask of a create's answer (a member of a group electing answers once it
BIG_CONFIG = 4096  # a stream config body past this is checked in a worker thread (rillet.jetstream.api.common BIG_CONFIG)
META_KEYS = frozenset(("INFO", "STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE", "STREAM.NAMES", "STREAM.LIST",
                       "CONSUMER.CREATE", "CONSUMER.DURABLE.CREATE", "CONSUMER.DELETE", "CONSUMER.NAMES",
                       "CONSUMER.LIST", "STREAM.PEER.REMOVE", "STREAM.RESTORE", "STREAM.PEER.EVACUATE",
                       "STREAM.CANCEL_MOVE"))
_LIST_FIELDS = {"STREAM.NAMES": "streams", "STREAM.LIST": "streams", "CONSUMER.NAMES": "consumers",
                "CONSUMER.LIST": "consumers"}
_TYPES = {"INFO": "account_info_response", "STREAM.CREATE": "stream_create_response",
          "STREAM.UPDATE": "stream_update_response", "STREAM.DELETE": "stream_delete_response",
          "STREAM.NAMES": "stream_names_response", "STREAM.LIST": "stream_list_response",
          "CONSUMER.CREATE": "consumer_create_response", "CONSUMER.DURABLE.CREATE": "consumer_create_response",
          "CONSUMER.DELETE": "consumer_delete_response", "CONSUMER.NAMES": "consumer_names_response",
          "CONSUMER.LIST": "consumer_list_response", "STREAM.PEER.REMOVE": "stream_remove_peer_response",
          "META.LEADER.STEPDOWN": "meta_leader_stepdown_response", "SERVER.REMOVE": "meta_server_remove_response",
          "STREAM.RESTORE": "stream_restore_response", "STREAM.PEER.EVACUATE": "stream_evacuate_peer_response",
          "STREAM.CANCEL_MOVE": "stream_cancel_move_response"}


class MetaApi(MetaEndpoints, MoveEndpoints):
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
        if key in ("SERVER.EVACUATE", "META.RESCUE"):
            return True  # (the system account's only, subscribed by subscribe_moves; nats-server stays silent)
        if key in ("ACCOUNT.STREAM.MOVE", "ACCOUNT.STREAM.CANCEL_MOVE"):
            if router.jsa.account is not self.cl.server.system_account:  # (the system account's: its own sub)
                self.account_stream_move(router, key, args, reply, hdr, body)
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
        gw = self.cl.server.gateway
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
        gws = account.gw  # (the gateways' part in the account: its tracked _GR_. replies)
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
        acc = account.name_b
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
        usage = peer_usage([sa.group.peers for sa in self.cl.state.iter_streams()],
                           [ca.group.peers for sa in self.cl.state.iter_streams() for ca in sa.consumers.values()])
        return {"usage": usage, "unique_tag": self.cl.server.opts.jetstream.unique_tag,
                "max_ha_assets": self.cl.js.server_limits.max_ha_assets}

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
