"""Moving streams off servers in a Rillet JetStream cluster, as nats-server 2.15 does it: the meta leader's
``ACCOUNT.STREAM.MOVE`` / ``ACCOUNT.STREAM.CANCEL_MOVE`` (system account, or the stream's own account),
``STREAM.CANCEL_MOVE``, ``STREAM.PEER.EVACUATE`` and ``SERVER.EVACUATE`` (system account); and subscribes
``META.RESCUE`` (``rescue.py``).

None of them moves anything by itself: each proposes the stream's assignment with a ``desired`` group (the
peers to end on, nats-server 2.15's desired state), and the meta leader's reconciling
(``JetStreamCluster._reconcile_one``) then adds the new peers one at a time, waits until they are current,
moves the consumers and drops the old peers, as for a STREAM.UPDATE that changes ``placement``.

- A move keeps the replica count: with ``server``, that peer is the one replaced (it must be one of the
  group's: 10044 when no meta member has that name, 10040 when the stream is not on it), else the group's
  first; ``tags`` are added to the stream's placement for the choice only. The same cluster first, then any
  other whole cluster; none: 10005. The answer is the stream update response (the stream's info), as the
  update of a placement.
- A cancel rolls the stream back to the ``origin`` its desired state recorded (peers, cluster, replicas,
  placement): a move, a scale or an evacuation's replacement under way. No origin: 10129.
- An evacuation replaces a peer the way a peer removal does (the same replica count, placement's rules),
  but the stream stays on that peer until the replacement is current. STREAM.PEER.EVACUATE refuses (10075)
  when no replacement exists; SERVER.EVACUATE evacuates every stream on the server and, where there is
  no replacement, leaves the group short and records the server in its ``excluded`` peers, so that the meta
  leader does not put it back before the group is whole again.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import msgspec

from rillet.gocompat.gotime import format_time
from rillet.jetstream.api import codec as apijson
from rillet.jetstream.api.common import T, _api_level_too_high, is_empty_request
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster.placement import (PlacementConfig, PlacementError, select_peer_group,
                                               select_peer_replacement)
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import NotLeader

if TYPE_CHECKING:
    from rillet.jetstream.cluster.meta import JetStreamCluster

# (the response types of nats-server 2.15.1's binary: a move answers as a stream update, the others have
# their own types)
UPDATE_T = T + "stream_update_response"
CANCEL_T = T + "stream_cancel_move_response"
EVACUATE_PEER_T = T + "stream_evacuate_peer_response"
SERVER_EVACUATE_T = T + "meta_server_evacuate_response"


# the request bodies, as nats-server types them (their names appear in its decode errors)
class JSApiMetaServerStreamMoveRequest(msgspec.Struct, kw_only=True):
    server: str = ""
    cluster: str = ""
    domain: str = ""
    tags: Optional[list[str]] = None


class JSApiMetaServerRemoveRequest(msgspec.Struct, kw_only=True):
    peer: str = ""
    peer_id: str = ""


class JSApiStreamRemovePeerRequest(msgspec.Struct, kw_only=True):
    peer: str = ""


def register(router: Any) -> None:
    """The account endpoints STREAM.PEER.EVACUATE and STREAM.CANCEL_MOVE. In a cluster the meta leader answers
    them (``MetaApi.route_api``); a server without a cluster answers 10010, as nats-server."""
    def stream_peer_evacuate(a: list[str], r: bytes | None, h: bytes, b: bytes) -> None:
        raise ApiError.make("CLUSTER_REQUIRED")

    def stream_cancel_move(a: list[str], r: bytes | None, h: bytes, b: bytes) -> None:
        raise ApiError.make("CLUSTER_REQUIRED")

    router.handlers["STREAM.PEER.EVACUATE"] = stream_peer_evacuate
    router.handlers["STREAM.CANCEL_MOVE"] = stream_cancel_move


class SysResponder:
    """``respond`` as an account router's, publishing through the cluster's internal client of the system
    account (for ``MetaApi._answer_later``)."""

    def __init__(self, cl: "JetStreamCluster") -> None:
        self.cl = cl

    def respond(self, reply: bytes | None, obj: dict) -> None:
        if reply:
            self.cl._ic.publish(reply, None, apijson.go_json(obj))


class MoveEndpoints:
    """Part of ``cluster.MetaApi`` (``self.cl`` is the JetStreamCluster)."""

    cl: "JetStreamCluster"
    _answer_later: Callable[..., None]
    _requester: Callable[..., tuple[str, list[str]]]
    _place_kw: Callable[[], dict]
    _updated_group: Callable[..., A.RaftGroup]
    _all_offline: Callable[[list[str]], bool]

    def subscribe_moves(self, ic: Any, prefix: str) -> None:
        """The system account's endpoints of this module, under one API prefix (``$JS.API``, or a domain's)."""
        ic.subscribe(f"{prefix}.ACCOUNT.STREAM.MOVE.*.*", self._on_stream_move)
        ic.subscribe(f"{prefix}.ACCOUNT.STREAM.CANCEL_MOVE.*.*", self._on_stream_cancel_move)
        ic.subscribe(f"{prefix}.SERVER.EVACUATE", self._on_server_evacuate)
        ic.subscribe(f"{prefix}.META.RESCUE", self._on_meta_rescue)  # (every server: rescue.py)

    # ---- the system account's requests ----------------------------------------------------------------

    def _sys_request(self, reply: bytes | None, typ: str, hdr: int, msg: bytes,
                     extra: Optional[dict] = None) -> Optional[tuple[bytes, Callable[[dict], None]]]:
        """(body, respond) of a system account request, or None when this server does not answer it (only the
        meta leader does) or it was answered already (an API level above ours: 10153)."""
        if not self.cl.is_leader():
            return None
        body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        hdr_b = bytes(msg[:hdr]) if hdr > 0 else b""

        def respond(d: dict) -> None:
            if reply:
                self.cl._ic.publish(reply, None, apijson.go_json({"type": typ, **(extra or {}), **d}))
        if hdr_b and _api_level_too_high(hdr_b):
            respond({"error": ApiError.make("REQUIRED_API_LEVEL").to_dict()})
            return None
        return body, respond

    def _account_stream_request(self, subject: bytes, reply: bytes | None, typ: str, hdr: int,
                                msg: bytes) -> Optional[tuple[str, str, bytes, Callable[[dict], None]]]:
        """``_sys_request`` of a request whose subject ends with an account and a stream: (account, stream,
        body, respond), or None."""
        req = self._sys_request(reply, typ, hdr, msg)
        if req is None:
            return None
        acc, name = subject.decode("utf-8", "surrogateescape").split(".")[-2:]
        return acc, name, req[0], req[1]

    def _on_stream_move(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                        msg: bytes) -> None:
        req = self._account_stream_request(subject, reply, UPDATE_T, hdr, msg)
        if req is not None:
            acc, name, body, respond = req
            self._stream_move(acc, name, body, reply, respond, SysResponder(self.cl))

    def _on_stream_cancel_move(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                               msg: bytes) -> None:
        req = self._account_stream_request(subject, reply, CANCEL_T, hdr, msg)
        if req is None:
            return
        acc, name, _, respond = req
        if self.cl.server.known_account(acc.encode("utf-8", "surrogateescape")) is None:
            respond({"error": ApiError.make("NO_ACCOUNT").to_dict()})
            return
        self._cancel_guarded(acc, name, reply, respond, SysResponder(self.cl))

    def account_stream_move(self, router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                            body: bytes) -> None:
        """ACCOUNT.STREAM.MOVE / CANCEL_MOVE sent in an account (not the system account's): nats-server
        serves them when the subject names the requester's own account, from the meta leader."""
        if len(args) != 2 or args[0] != router.jsa.account.name or not self.cl.is_leader():
            return

        typ = UPDATE_T if key == "ACCOUNT.STREAM.MOVE" else CANCEL_T

        def respond(d: dict) -> None:
            if "error" in d:
                router.jsa.api_errors += 1
            router.respond(reply, {"type": typ, **d})
        router.jsa.api_total += 1
        if hdr and _api_level_too_high(hdr):
            respond({"error": ApiError.make("REQUIRED_API_LEVEL").to_dict()})
            return
        if key == "ACCOUNT.STREAM.MOVE":
            self._stream_move(args[0], args[1], body, reply, respond, router)
        else:
            self._cancel_guarded(args[0], args[1], reply, respond, router)

    def _stream_move(self, acc: str, name: str, body: bytes, reply: bytes | None,
                     respond: Callable[[dict], None], responder: Any) -> None:
        try:
            req = apijson.go_decode(body, JSApiMetaServerStreamMoveRequest, strict=self.cl.js.strict)
            src = self._name_to_peer(req.server, req.cluster, req.domain) if req.server else ""
            if self.cl.server.known_account(acc.encode("utf-8", "surrogateescape")) is None:
                raise ApiError.make("NO_ACCOUNT")
            sa = self.cl.state.stream(acc, name)
            if sa is None:
                raise ApiError.make("STREAM_NOT_FOUND")
            self._move(sa, req, src, reply, responder)
        except ApiError as e:
            respond({"error": e.to_dict()})
        except PlacementError as e:
            respond({"error": e.api_error().to_dict()})
        except NotLeader:
            pass  # (the next meta leader is asked again)

    def _name_to_peer(self, server: str, cluster: str, domain: str) -> str:
        """The meta member named ``server`` (in ``cluster`` and ``domain`` when given), or ""."""
        nodes = self.cl.registry.nodes
        for p in self.cl.group.peers:
            ni = nodes.get(p)
            if ni is not None and ni.name == server and (not cluster or ni.cluster == cluster) \
                    and (not domain or ni.domain == domain):
                return p
        return ""

    def _move(self, sa: A.StreamAssignment, req: JSApiMetaServerStreamMoveRequest, src: str,
              reply: bytes | None, responder: Any) -> None:
        ds = sa.group.desired
        cur = list(ds["peers"]) if ds else list(sa.group.peers)
        cur_cluster = (ds.get("cluster") if ds else "") or sa.group.cluster or self.cl.name
        if req.server:
            if not src:
                raise ApiError.make("CLUSTER_SERVER_NOT_MEMBER")
            if src not in cur:
                raise ApiError.make("CLUSTER_PEER_NOT_MEMBER")
            cur.remove(src)
            cur.insert(0, src)  # (the peer replaced is the first)
        replicas = int(sa.config.get("num_replicas") or 1)
        cfg = dict(sa.config)
        if req.tags:
            pl = dict(cfg.get("placement") or {})
            pl["tags"] = list(pl.get("tags") or ()) + list(req.tags)
            cfg["placement"] = pl
        pc = PlacementConfig.from_stream_config(cfg)
        self.cl._refresh_local()
        nodes = self.cl.registry.nodes
        kw = self._place_kw()
        peers, cluster = select_peer_replacement(replicas, cur_cluster, pc, nodes, self.cl.group.peers, cur, **kw)
        if self._all_offline(sa.group.peers):
            raise ApiError.make("STREAM_OFFLINE")
        d = dict(sa.config)
        group = self._updated_group(sa, d, peer_set=(peers, cluster))
        names = self._names
        self.cl.log.notice(f"Requested move for stream '{sa.account} > {sa.name}' R={replicas} from "
                           f"{names(cur)} to {names(peers)}")
        nsa = A.StreamAssignment(config=d, group=group, sync=sa.sync, client=sa.client, created=sa.created,
                                 subject=f"$JS.API.ACCOUNT.STREAM.MOVE.{sa.account}.{sa.name}",
                                 reply=(reply or b"").decode())
        acc, name = sa.account, sa.name

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                self._answer_later(responder, reply, UPDATE_T, lambda t: self.cl.info.stream_info(acc, name, t))
        self.cl._propose(A.encode_update_stream(nsa), done)

    def _names(self, peers: list[str]) -> str:
        return "[" + " ".join(self.cl.registry.name_of(p) or p for p in peers) + "]"

    # ---- cancel --------------------------------------------------------------------------------------

    def _cancel_guarded(self, acc: str, name: str, reply: bytes | None, respond: Callable[[dict], None],
                        responder: Any) -> None:
        try:
            self._cancel_move(acc, name, reply, responder)
        except ApiError as e:
            respond({"error": e.to_dict()})
        except NotLeader:
            pass

    def _api_stream_cancel_move(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                                body: bytes) -> None:
        """``$JS.API.STREAM.CANCEL_MOVE.<stream>`` (the meta leader, in the stream's account)."""
        self._cancel_move(router.jsa.account.name, args[0] if args else "", reply, router)

    def _cancel_move(self, acc: str, name: str, reply: bytes | None, responder: Any) -> None:
        """The stream back to its desired state's origin: its config's replicas and placement (and retention)
        at once, its peers through a new desired state (as a move: the reconciling moves it back)."""
        sa = self.cl.state.stream(acc, name)
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        ds = sa.group.desired
        origin = (ds or {}).get("origin")
        if not isinstance(origin, dict) or not isinstance(origin.get("peers"), list):
            raise ApiError.make("STREAM_RECONFIGURE_NOT_IN_PROGRESS")
        assert ds is not None
        d = dict(sa.config)
        d["num_replicas"] = int(origin.get("replicas") or 1)
        if origin.get("placement"):
            d["placement"] = origin["placement"]
        else:
            d.pop("placement", None)
        if origin.get("retention"):
            d["retention"] = origin["retention"]
        g = sa.group.copy()
        peers = [str(p) for p in origin["peers"]]
        nd: dict[str, Any] = {"id": A._random_token(A.PEER_ID_LEN), "created": format_time(time.time_ns()),
                              "peers": peers, "cluster": str(origin.get("cluster") or "")}
        if ds.get("move"):
            nd["move"] = True  # (a move rolled back is still a move under way)
        removed = [p for p in ds.get("removed") or () if p not in peers]
        if removed:
            nd["removed"] = removed
        nd["origin"] = origin
        g.desired = nd
        if len(sa.group.peers) == 1 and sa.group.peers[0] in peers:
            g.preferred = sa.group.peers[0]
        elif g.preferred and g.preferred not in peers and g.preferred not in sa.group.peers:
            g.preferred = ""
        self.cl.log.notice(f"Requested cancel of the reconfiguration of stream '{acc} > {name}': back to "
                           f"R={d['num_replicas']} on {self._names(peers)}")
        nsa = A.StreamAssignment(config=d, group=g, sync=sa.sync, client=sa.client, created=sa.created,
                                 subject=f"$JS.API.STREAM.CANCEL_MOVE.{name}", reply=(reply or b"").decode())

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                self._answer_later(responder, reply, CANCEL_T, lambda t: self.cl.info.stream_info(acc, name, t),
                                   config=d)
        self.cl._propose(A.encode_update_stream(nsa), done)

    # ---- evacuations ---------------------------------------------------------------------------------

    def _api_stream_peer_evacuate(self, router: Any, args: list[str], reply: bytes | None, hdr: bytes,
                                  body: bytes) -> None:
        """``$JS.API.STREAM.PEER.EVACUATE.<stream>``: as STREAM.PEER.REMOVE, but the peer stays a member until
        its replacement is current."""
        if is_empty_request(body):
            raise ApiError.make("BAD_REQUEST")
        req = apijson.go_decode(body, JSApiStreamRemovePeerRequest, strict=self.cl.js.strict)
        if not req.peer:
            raise ApiError.make("BAD_REQUEST")
        sa = self.cl.state.stream(router.jsa.account.name, args[0] if args else "")
        if sa is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        from rillet.jetstream.cluster.peers import peer_id
        members = list(sa.group.peers) + list((sa.group.desired or {}).get("peers") or ())
        peer = next((p for p in (peer_id(req.peer), req.peer) if p in members), None)
        if peer is None:
            raise ApiError.make("CLUSTER_PEER_NOT_MEMBER")

        def done(res: Any, err: Optional[BaseException]) -> None:
            if err is None:
                router.respond(reply, {"type": EVACUATE_PEER_T, "success": True})
        if not self._evacuate(sa, peer, require=True, done=done):
            raise ApiError.make("PEER_REMAP")

    def _on_server_evacuate(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                            msg: bytes) -> None:
        """``$JS.API.SERVER.EVACUATE`` (system account, meta leader): every stream on the server evacuated;
        answered at once, the moves go on afterwards."""
        r = self._sys_request(reply, SERVER_EVACUATE_T, hdr, msg)
        if r is None:
            return
        body, respond = r
        try:
            if is_empty_request(body):
                raise ApiError.make("BAD_REQUEST")
            req = apijson.go_decode(body, JSApiMetaServerRemoveRequest, strict=self.cl.js.strict)
            if req.peer_id:
                found = req.peer_id if req.peer_id in self.cl.group.peers else ""
            else:
                found = next((p for p in self.cl.group.peers if self.cl.registry.name_of(p) == req.peer
                              and req.peer), "")
            if not found:
                raise ApiError.make("CLUSTER_SERVER_NOT_MEMBER")
            n = 0
            for sa in list(self.cl.state.iter_streams()):
                if found in sa.group.peers or found in ((sa.group.desired or {}).get("peers") or ()):
                    n += bool(self._evacuate(sa, found, exclude=True))
        except ApiError as e:
            respond({"error": e.to_dict()})
            return
        except NotLeader:
            return
        self.cl.log.notice(f"JetStream cluster: evacuating server {self.cl.registry.name_of(found) or found}: "
                           f"{n} stream(s) moving off it")
        respond({"success": True})

    def _evacuate(self, sa: A.StreamAssignment, peer: str, require: bool = False, exclude: bool = False,
                  done: Optional[Callable[[Any, Optional[BaseException]], None]] = None) -> bool:
        """Propose the stream's group with ``peer`` replaced in its desired peers (its current peers stay:
        the reconciling adds the replacement, waits until it is current, then drops ``peer``). With
        ``require``, nothing is proposed (False) when the group would end short of replicas; with
        ``exclude``, a peer that could not be replaced is recorded in the group's ``excluded``."""
        g0 = sa.group
        ds = g0.desired
        base = list(ds["peers"]) if ds else list(g0.peers)
        base_cluster = (ds.get("cluster") if ds else "") or g0.cluster or self.cl.name
        retain = [p for p in base if p != peer]
        meta = set(self.cl.group.peers)
        excluded = [p for p in g0.excluded if p in meta]
        pc = PlacementConfig.from_stream_config(sa.config)
        self.cl._refresh_local()
        nodes = self.cl.registry.nodes
        kw = self._place_kw()
        meta_peers = [p for p in self.cl.group.peers if p != peer]
        replaced = False
        new = retain
        for r in range(len(base), len(retain), -1):
            try:
                new = select_peer_group(r, base_cluster, pc, nodes, meta_peers, existing=retain,
                                        ignore=[peer, *excluded], **kw)
                replaced = True
                break
            except PlacementError:
                if r <= len(retain) + 1:
                    break
        if not new or new == base:
            return False  # (never a move to no peers at all; nor one that changes nothing)
        replicas = int(sa.config.get("num_replicas") or 1)
        target = list(g0.peers) if ds is not None and ds.get("scale_down") else new
        missing = len(target) < replicas
        if require and missing:
            self.cl.log.warn(f"JetStream cluster rejected peer removal, no replacement available for stream "
                             f"'{sa.account} > {sa.name}'")
            return False
        if not replaced:
            self.cl.log.warn(f"JetStream cluster could not replace peer for stream '{sa.account} > {sa.name}'")
        if exclude and missing and peer not in excluded:
            excluded.append(peer)
        g = g0.copy()
        nd: dict[str, Any] = {"id": A._random_token(A.PEER_ID_LEN), "created": format_time(time.time_ns()),
                              "peers": new, "cluster": base_cluster}
        for k in ("scale_down", "move", "removed", "origin"):
            if ds and ds.get(k):
                nd[k] = ds[k]
        g.desired = nd
        g.excluded = excluded if missing else []
        if g.preferred and g.preferred not in g.peers and g.preferred not in new:
            g.preferred = ""
        self.cl._propose_stream_group(sa, g, done)
        return True

    # ---- META.RESCUE (every server of the meta group answers) -----------------------------------------

    def _on_meta_rescue(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                        msg: bytes) -> None:
        from rillet.jetstream.api.rescue import meta_rescue
        meta_rescue(self.cl, reply, hdr, msg)
