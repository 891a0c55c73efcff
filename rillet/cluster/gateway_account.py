"""The gateways' part in one account (``AccountGateway``, ``acc.gw``): interest-only mode, the replies it maps
(``_GR_.``), the delivery plan's gateway step; and the gateways' part in every account's interest
(``GatewayInterest``). The gateway manager and its connections are ``rillet.cluster.gateway`` and
``rillet.cluster.gateway_conn``.
"""
from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING, Any

import rillet.server.msgtrace as _mt
from rillet.cluster import info as ci
from rillet.cluster.routed import js_ack_deliver_idx, origin_only
from rillet.server.accounts import Account
from rillet.server.delivery import INTERNAL, ROUTER, Plan, deliver_result
from rillet.subjects.sublist import SublistResult

if TYPE_CHECKING:
    from rillet.cluster.gateway import Gateway

RECENT_SUB_EXPIRATION = 2.0  # defaultGatewayRecentSubExpiration
_GR = ci.GW_REPLY_PREFIX
_GR_LEN = len(_GR)
_HL = ci.GW_HASH_LEN
_SUBJECT_OFFSET = _GR_LEN + 2 * _HL + 2


class GatewayInterest:
    """The gateways' part in every account's interest (``rillet.server.accounts.InterestListener``, given to
    the server by the composition root): this cluster's interest, local or learnt from a route, is announced
    to the inbound gateways."""

    __slots__ = ("gateway",)
    shadows = False  # (stream imports deliver through the import's own subscription with gateways)

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway

    def local_interest(self, acc: Any, sub: Any, added: bool) -> None:
        if not origin_only(sub):
            self.gateway.update_interest(acc.name_b, subject_b(sub), queue_b(sub), 1 if added else -1,
                                         sub if added else None)

    def routed_interest(self, acc: Any, sub: Any, added: bool) -> None:
        self.gateway.update_interest(acc.name_b, subject_b(sub), queue_b(sub), 1 if added else -1,
                                     sub if added else None)


class GatewayReplies(dict):
    """The ``_GR_.`` reply tracking of one account, a part the gateway subsystem owns (``AccountGateway.replies``):
    the replies of messages from other clusters given to subscribers here without their prefix, original reply ->
    (``_GR_.`` reply, expiry). A message published on one within 2 s goes back on the ``_GR_.`` subject, straight
    to the requester's cluster, as nats-server tracks it (trackGWReply; it keeps this per client connection,
    Rillet per account). Empty (false) when nothing is tracked: the delivery path tests it before anything else."""

    __slots__ = ()

    def track(self, reply: bytes) -> bytes:
        """The reply subscribers here see for the ``_GR_.`` reply ``reply`` (the original one), remembered."""
        stripped = reply[_SUBJECT_OFFSET:]
        now = monotonic()
        if len(self) >= 4096:
            for k in [k for k, (_, exp) in self.items() if exp <= now]:
                del self[k]
        self[stripped] = (bytes(reply), now + RECENT_SUB_EXPIRATION)
        return stripped

    def lookup(self, subject: bytes) -> bytes | None:
        """The ``_GR_.`` subject a message published on ``subject`` goes back on, if it is a tracked reply."""
        e = self.get(subject)
        if e is None:
            return None
        if e[1] <= monotonic():
            del self[subject]
            return None
        return e[0]


class AccountGateway:
    """The gateway subsystem's part in one account (``acc.gw``, the ``rillet.server.delivery.GatewayStep``), made by
    ``Gateway.attach`` when the composition root wires a new account: its clients' messages go to the other
    clusters with interest (a step of the delivery executor, evaluated per message: the remote clusters' interest
    is not in the sublist), a publish on a ``_GR_.`` subject or a tracked reply goes straight back to its cluster,
    and messages from gateways are delivered here and over the routes (``from_gateway``)."""

    __slots__ = ("gw", "acc", "name_b", "outo", "replies", "_plain")

    def __init__(self, gw: "Gateway", acc: Any) -> None:
        self.gw = gw
        self.acc = acc
        self.name_b: bytes = acc.name_b
        self.outo = gw.outo  # (the gateway's list of outbound connections, changed in place: empty = no step)
        self.replies = GatewayReplies()
        self._plain: dict[Any, SublistResult] = {}  # sublist result -> the same without its queue groups

    # ---- messages out: the executor's step, and the publishes that match nothing here --------------------------

    def send(self, subject: bytes, reply: bytes | None, hdr: int, msg: bytes, served: list) -> bool:
        """A message of this server's clients to the gateways that may want it; ``served``: the queue groups
        (sublist result ``qsubs``) this cluster serves. True if it went to any."""
        if not subject:
            return False
        gw = self.gw
        name = self.name_b
        direct = subject[:_GR_LEN] == _GR and len(subject) > _SUBJECT_OFFSET
        dst = subject[_GR_LEN:_GR_LEN + _HL] if direct else b""
        subj: str | None = None
        qgroups: set[bytes] | None = None
        mreply: bytes | None = None
        sent = False
        mt = _mt.CURRENT if hdr > 0 else None
        if mt is not None and not _mt.owns(mt, hdr, msg):
            mt = None
        for gc in self.outo:
            if gc.closed:
                continue
            queues: list[bytes] = []
            if direct:
                if gc.cfg is None or gc.cfg.hash != dst:
                    continue
            else:
                if subj is None:
                    subj = subject.decode("utf-8", "surrogateescape")
                psi, qr = gc.interest(name, subj)
                if not psi and qr is None:
                    continue
                if qr is not None and qr.qsubs:
                    if qgroups is None:
                        qgroups = {g[0].queue_b for g in served if g}
                    for g in qr.qsubs:
                        if g:
                            q = g[0].queue_b
                            if q not in qgroups:
                                qgroups.add(q)
                                queues.append(q)
                if not psi and not queues:
                    continue
            if reply and mreply is None:
                mreply = gw.reply_prefix + reply if gw._map_reply(name, reply) else reply
            if mt is not None:  # the next hop in its header, and the GATEWAY egress event (rillet.server.msgtrace)
                h2, m2 = mt.to_remote(gc, hdr, msg)
                gc.send_msg(name, subject, mreply, queues, h2, m2)
            else:
                gc.send_msg(name, subject, mreply, queues, hdr, msg)
            sent = True
        return sent

    def send_shown(self, c: Any, r: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                   route: bytes) -> bool:
        """``send`` for a message shown with another subject (``subject``) than the one it matched (``route``)."""
        if c.kind == INTERNAL and reply and reply[:8] == b"$JS.ACK." and js_ack_deliver_idx(reply) < 0:
            # a JetStream delivery (matched on its deliver subject, shown with its stream subject): as
            # nats-server, the gateways get the deliver subject and the shown one after '@' in the ack reply
            target = route
            if self.replies:  # (a pull request that came over a gateway moments ago: straight back to its cluster)
                target = self.replies.lookup(route) or route
            return self.send(target, reply + b"@" + subject, hdr, msg, r.qsubs)
        return self.send(route, reply, hdr, msg, r.qsubs)

    def publish(self, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> bool | None:
        """A publish on a ``_GR_.`` subject, or by this server's clients on a tracked reply: to the cluster the
        subject names (this one: ``Gateway.gateway_reply``); True if it went anywhere. None: neither (the
        message is delivered as usual)."""
        if self.replies and c.kind < ROUTER:
            subject = self.replies.lookup(subject) or subject
        if subject[:_GR_LEN] != _GR:
            return None
        gw = self.gw
        if subject[_GR_LEN:_GR_LEN + _HL] == gw.hash:
            gw.gateway_reply(c, self.name_b, subject, reply, hdr, msg)
            return True
        return self.send(subject, reply, hdr, msg, [])

    def no_match(self, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A client's publish that matched nothing here (``Account.no_match``: the client's inlined fast path)."""
        if subject[:_GR_LEN] == _GR or (self.replies and self.replies.lookup(subject) is not None):
            self.acc.deliver(c, subject, reply, hdr, msg)
            return
        if not (self.outo and self.send(subject, reply, hdr, msg, [])) and reply and c.no_responders:
            self.acc._no_responders(c, subject, reply)

    # ---- messages in -----------------------------------------------------------------------------------------

    def routed(self, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
               msg: bytes) -> bytes | None | bool:
        """The gateway part of a message from a route: True when it was a ``_GR_.`` reply (delivered here);
        else the reply this server's subscribers see (a ``_GR_.`` reply without its prefix, tracked)."""
        if subject[:_GR_LEN] == _GR:
            self.gw.gateway_reply(rc, self.name_b, subject, reply, hdr, msg)
            return True
        if reply and reply[:_GR_LEN] == _GR and len(reply) > _SUBJECT_OFFSET:
            return self.replies.track(reply)
        return reply

    def from_gateway(self, c: Any, r: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                     msg: bytes, all_queues: bool) -> None:
        """A message from a gateway: to this server's subscribers and over routes to the others of the
        cluster; queue groups only those the RMSG names (all of them for a routed reply)."""
        acc = self.acc
        deliver = deliver_result if c.kind >= ROUTER else self._not_out
        if all_queues or not r.qsubs:
            rr = r
        elif not queues:
            rr = self._plain.get(r)
            if rr is None:
                if len(self._plain) > 1024:
                    self._plain.clear()
                rr = self._plain[r] = SublistResult(r.psubs, [])
        else:
            names = {bytes(q) for q in queues}
            rr = SublistResult(r.psubs, [g for g in r.qsubs if g and g[0].queue_b in names])
        if (rr.psubs or rr.qsubs) and reply and b"@" in reply:
            gr = reply[:_SUBJECT_OFFSET] if reply[:_GR_LEN] == _GR and len(reply) > _SUBJECT_OFFSET else b""
            ack = reply[len(gr):]
            i = js_ack_deliver_idx(ack)
            if i > 0:
                # a JetStream delivery from a consumer of another cluster: matched on the RMSG subject (the
                # deliver subject), shown with the stream subject after '@'; the ack goes back on the _GR_.
                # reply when it came with one
                shown, ack = ack[i + 1:], ack[:i]
                if gr:
                    ack = self.replies.track(gr + ack)
                deliver(acc, c, rr, shown, ack, hdr, msg, subject)
                return
        if rr.psubs or rr.qsubs:
            if reply and reply[:_GR_LEN] == _GR and len(reply) > _SUBJECT_OFFSET:
                # subscribers here see the original reply; the other servers of the cluster get it routed
                deliver(acc, c, rr, subject, self.replies.track(reply), hdr, msg, None, reply)
            else:
                deliver(acc, c, rr, subject, reply, hdr, msg)

    def _not_out(self, acc: Any, c: Any, r: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                 route: bytes | None = None, rreply: bytes | None = None) -> None:
        """``deliver_result`` without the gateway step, for a client's publish on this cluster's own ``_GR_.``
        subject (``publish``): here and over the routes like a gateway's message, not back out to the gateways
        (a plan of its own, without the step)."""
        r = SublistResult(r.psubs, r.qsubs)
        r.plan = Plan(r)
        deliver_result(acc, c, r, subject, reply, hdr, msg, route, rreply)


def deliver_routed(acc: Any, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                   msg: bytes) -> None:
    """A message from a route on a server with gateways (``Cluster.routed_entry``): a ``_GR_.`` reply for this
    cluster, or (its ``_GR_.`` reply tracked and shown without the prefix) to this server's subscribers."""
    if subject[:_GR_LEN] == _GR and hdr > 0 and _mt.CURRENT is None and msg.find(b"Nats-Trace-", 0, hdr) >= 0 \
            and _mt.routed_inbound(acc, rc, subject, reply, queues, hdr, msg, acc.gw.routed):
        return  # traced here too (rillet.server.msgtrace)
    reply = acc.gw.routed(rc, subject, reply, queues, hdr, msg)
    if reply is not True:
        Account.deliver_routed(acc, rc, subject, reply, queues, hdr, msg)


def subject_b(sub: Any) -> bytes:
    """A subscription's subject as bytes (its cached ``subject_b`` when it has one); the leaf manager uses it too."""
    return getattr(sub, "subject_b", None) or sub.subject.encode("utf-8", "surrogateescape")


def queue_b(sub: Any) -> bytes | None:
    q = getattr(sub, "queue_b", None)
    if q:
        return q
    return sub.queue.encode("utf-8", "surrogateescape") if sub.queue else None
