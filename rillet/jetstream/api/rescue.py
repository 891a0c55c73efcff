"""``$JS.API.META.RESCUE`` (system account), as nats-server 2.15: a disaster recovery for a meta group that lost
too many servers for good to elect a leader. Every server of the meta group receives the request and answers it
for itself (``server``, ``server_id``): one that knows no meta leader, is a voter and has a log lowers the quorum
its meta group needs to ``quorum_needed`` (at least 1, at most its quorum now), for ``RESCUE_FOR`` seconds, so
that the survivors elect a leader among themselves; the operator then removes the lost servers
(``SERVER.REMOVE``). The rescue stays while the voters left would need more (the removals do not end it); once
their majority is no larger than the rescue's, or its time is up, the quorum is the majority again. Refusals
are 10224 with the RAFT layer's reason (``rillet.raft.node.Node.rescue``). Each rescue applied is published as
the ``$JS.EVENT.ADVISORY.SERVER.META_RESCUE`` advisory and logged."""
from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any, Optional

import msgspec

from rillet.gocompat.gotime import format_time
from rillet.gocompat.jsoncodec import Int
from rillet.jetstream.api import codec as apijson
from rillet.jetstream.api.common import T, _api_level_too_high, is_empty_request
from rillet.jetstream.errors import ApiError
from rillet.raft.node import RaftError

if TYPE_CHECKING:
    from rillet.jetstream.cluster.meta import JetStreamCluster

RESCUE_FOR = 300.0  # seconds a rescue lasts (nats-server: 5 minutes)
RESCUE_T = T + "meta_rescue_response"
ADVISORY = b"$JS.EVENT.ADVISORY.SERVER.META_RESCUE"


# the meta group's rescue now (each rescue's own token: only the last one's time ends it)
_RESCUES: "weakref.WeakKeyDictionary[Any, object]" = weakref.WeakKeyDictionary()


class JSApiMetaRescueRequest(msgspec.Struct, kw_only=True):
    quorum_needed: Int = 0


def _duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s}s" if m else f"{s}s"


def meta_rescue(cl: "JetStreamCluster", reply: Optional[bytes], hdr: int, msg: bytes) -> None:
    g = cl.group
    if g is None or g.node is None or not cl.running or cl.isolated or cl.removed:
        return  # (no meta group here: nats-server answers only from a server that has one)
    srv = cl.server
    body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
    hdr_b = bytes(msg[:hdr]) if hdr > 0 else b""

    def respond(d: dict[str, Any]) -> None:
        if reply:
            cl._ic.publish(reply, None, apijson.go_json({"type": RESCUE_T, **d}))

    def refuse(err: ApiError) -> None:
        respond({"error": err.to_dict(), "server": srv.name, "server_id": srv.server_id})
    try:
        if hdr_b and _api_level_too_high(hdr_b):
            raise ApiError.make("REQUIRED_API_LEVEL")
        if is_empty_request(body):
            raise ApiError.make("BAD_REQUEST")
        req = apijson.go_decode(body, JSApiMetaRescueRequest, strict=cl.js.strict)
        try:
            prev, cur = g.node.rescue(int(req.quorum_needed))
        except RaftError as e:
            raise ApiError.make("CLUSTER_RESCUE", err=str(e)) from None
    except ApiError as e:
        refuse(e)
        return
    g.log.warn(f"RAFT group {g.name!r}: unsafe quorum rescue applied, quorum lowered {prev} -> {cur} for "
               f"{_duration(RESCUE_FOR)}")
    token = object()
    _RESCUES[g] = token  # (a later rescue replaces this one's end)

    def expire() -> None:
        n = g.node
        if _RESCUES.get(g) is not token or n is None:
            return
        del _RESCUES[g]
        if n.rescued_quorum is None:
            return  # (ended already: the voters left need no more)
        n.end_rescue()
        g.log.warn(f"RAFT group {g.name!r}: unsafe quorum rescue expired, quorum restored to {n.quorum}")
    cl.loop.call_later(RESCUE_FOR, expire)
    g.campaign_soon()  # (an election soon, not after a full timeout)
    adv: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.meta_rescue", "id": _event_id(),
                           "timestamp": format_time(time.time_ns()), "server": srv.name,
                           "server_id": srv.server_id, "prev_quorum": prev, "new_quorum": cur, "cluster": cl.name}
    if cl.js.domain:
        adv["domain"] = cl.js.domain
    cl._ic.publish(ADVISORY, None, apijson.go_json(adv))
    respond({"server": srv.name, "server_id": srv.server_id, "prev_quorum": prev, "new_quorum": cur})


def _event_id() -> str:
    from rillet.jetstream.cluster.monitor import _event_id as event_id
    return event_id()
