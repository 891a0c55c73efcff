"""Accounts of a server in a cluster: remote interest beside local subscriptions, one match per publish.

A server with a ``cluster {}`` port makes its accounts ``RoutedAccount`` (a server without one keeps the
plain ``Account``, so a publish there pays nothing for clustering). Remote interest (a peer's RS+) is a
``RemoteSub`` in the account's sublist, so the match that finds local subscribers also finds the routes
to send to:

* plain remote interest: one RMSG/HMSG per route, whatever number of that route's subscriptions match;
* a queue group with members on other servers: one member of the whole cluster is chosen, each remote
  server weighing as many members as it announced (its queue weight), each local member one, as
  nats-server chooses for a message published by a client; a remote choice goes to that route, whose RMSG
  names the group (``| q`` / ``+ reply q``) so the peer gives the message to one of its members;
* a message that came from a route is delivered here only (never to another route: routes form a full
  mesh), to the plain subscribers and to one local member of each queue group named in its RMSG.

The routing decision depends only on the sublist result, which the sublist caches and never changes, so
it is computed once per result (``_Split``) and kept beside the sublist cache.

Imports, as nats-server does them in a cluster:

* stream imports: each subscription of the importing account that the import can reach gets a *shadow*
  subscription in the exporting account (``ShadowSub``: the subscriber's subject taken back through the
  import's prefix or mapping, same queue group). Shadows are local subscriptions of the exporting account,
  so they are announced to routes there (RS+ in the exporter's name) and a message crosses a route in the
  account it was published in; the server holding the subscriber applies the import and delivers to that
  subscriber only. The import's own internal subscription (the single-server mechanism,
  ``rillet.server.account_config``) is left out of deliveries here: the shadows do its work, and the
  result of an import is never routed again in the importing account (which would deliver twice);
* service imports: the request side (the importing account's internal subscription) acts for the
  publishing server only: not announced (nats-server subscribes it with no forwarding) and not given
  routed messages; the request then crosses the route in the exporting account with a ``_R_.`` reply,
  whose response subscription is announced like any other, so the answer comes back to the requestor's
  server. It is recognised by its internal client's name.
"""
from __future__ import annotations

from bisect import bisect_right
from random import random
from typing import Any

import rillet.server.msgtrace as _mt
from rillet.server.accounts import Account
from rillet.server.delivery import GATEWAY, LEAF
from rillet.subjects.sublist import SublistResult
from rillet.subjects.validate import subject_is_subset_match, subject_matches_filter, subjects_collide

_SPLITS_MAX = 4096


class RemoteSub:
    """Interest a route announced (RS+/LS+): kept in the sublist like a local subscription."""

    __slots__ = ("client", "subject", "queue", "weight", "sid", "sid_b", "icb", "nm", "max", "subject_b",
                 "queue_b", "origin")

    def __init__(self, route: Any, subject: str, queue: str | None, weight: int, origin: bytes | None) -> None:
        self.client = route
        self.subject = subject
        self.queue = queue
        self.weight = weight
        self.origin = origin
        self.sid = b""
        self.sid_b = b""
        self.icb = None
        self.nm = 0
        self.max = 0
        self.subject_b = subject.encode("utf-8", "surrogateescape")
        self.queue_b = queue.encode("utf-8", "surrogateescape") if queue else b""


def origin_only(sub: Any) -> bool:
    """A subscription that applies an import for the publishing server (see the module docstring)."""
    icb = sub.icb
    if icb is None:
        return False
    if getattr(icb, "import_to", None) is not None:  # stream import (rillet.server.account_config)
        return True
    # the request side of a service import: its internal client is named "service import <imp> -> <exp>"
    return str(getattr(sub.client, "name", "")).startswith("service import ")


def _stream_import_sub(sub: Any) -> bool:
    """A stream import's own subscription whose importing account delivers through shadows instead."""
    icb = sub.icb
    if icb is None:
        return False
    imp = getattr(icb, "import_to", None)
    return imp is not None and getattr(imp[0], "shadows", False)


class ShadowSub:
    """A subscription of an importing account seen from the exporting account, through one stream import.

    It sits in the exporter's sublist (so it is routed interest there, and takes part in the exporter's
    queue groups) and hands each message to the one subscription ``target`` it stands for, with the
    subject the import gives it (``remap``). ``exact`` is False when the shadow's subject is wider than
    what reaches ``target`` (a partial overlap): each mapped subject is then checked against the target's."""

    __slots__ = ("client", "subject", "queue", "sid", "sid_b", "icb", "nm", "max", "subject_b", "queue_b",
                 "target", "importer", "remap", "exact", "isub", "result")

    def __init__(self, target: Any, importer: Any, subject: str, remap: Any, exact: bool, isub: Any) -> None:
        self.client = target.client
        self.subject = subject
        self.queue = target.queue
        self.sid = target.sid
        self.sid_b = target.sid_b
        self.icb = _shadow_deliver
        self.nm = 0
        self.max = 0
        self.subject_b = subject.encode("utf-8", "surrogateescape")
        self.queue_b = target.queue_b
        self.target = target
        self.importer = importer
        self.remap = remap
        self.exact = exact
        self.isub = isub
        self.result = SublistResult([target], [])


def _shadow_deliver(sh: ShadowSub, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                    *_: Any) -> None:
    isub = sh.isub
    if isub.client.subs.get(isub.sid) is not isub:
        return  # the import is gone (reload, JWT update)
    if sh.remap is not None:
        subject = sh.remap(subject.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    if not sh.exact and not subject_matches_filter(subject.decode("utf-8", "surrogateescape"),
                                                   sh.target.subject):
        return
    # to that subscription only, on this server (Account's delivery: permissions, max, headers, echo)
    Account.deliver_result(sh.importer, c, sh.result, subject, reply, hdr, msg)


def shadow_subject(sub_subject: str, src: str, remap: Any) -> tuple[str, bool] | None:
    """The exporter-side subject of a shadow for a subscription on ``sub_subject`` in the importing account,
    for a stream import of ``src`` mapped by ``remap`` (None: same subject), and whether it is exact (every
    message it matches reaches the subscription); None when the import cannot reach the subscription."""
    target = src if remap is None else remap(src)
    if not subjects_collide(target, sub_subject):
        return None
    if remap is None:
        if subject_is_subset_match(sub_subject, src):
            return sub_subject, True
        return src, subject_is_subset_match(src, sub_subject)
    if target.endswith(src) and remap("x") == target[:len(target) - len(src)] + "x":  # a prefix
        pre = target[:len(target) - len(src)]
        if sub_subject.startswith(pre) and subject_is_subset_match(sub_subject[len(pre):], src):
            return sub_subject[len(pre):], True
    return src, subject_is_subset_match(target, sub_subject)


class _Split:
    """What one sublist result means for routing (computed once per result)."""

    __slots__ = ("local", "routes", "rqueues", "inbound", "inbound_q")

    def __init__(self, r: SublistResult) -> None:
        local_ps: list[Any] = []
        inbound_ps: list[Any] = []
        routes: dict[Any, None] = {}
        skipped = False
        for sub in r.psubs:
            if type(sub) is RemoteSub:
                routes[sub.client] = None
            elif _stream_import_sub(sub):
                skipped = True  # the shadows of the importing account's subscriptions deliver instead
            else:
                local_ps.append(sub)
                if not origin_only(sub):
                    inbound_ps.append(sub)
        local_qs: list[list[Any]] = []
        rqueues: list[tuple[bytes, list[Any], list[int], list[Any]]] = []
        inbound_q: dict[bytes, list[Any]] = {}
        for g in r.qsubs:
            loc = [s for s in g if type(s) is not RemoteSub]
            if len(loc) == len(g):
                local_qs.append(g)
            else:  # members elsewhere: weighted choice over the cluster at each message
                cum: list[int] = []
                total = 0
                for s in g:
                    total += max(s.weight, 1) if type(s) is RemoteSub else 1
                    cum.append(total)
                rqueues.append((g[0].queue_b, g, cum, loc))
            inb = [s for s in loc if not origin_only(s)]
            if inb:
                inbound_q[inb[0].queue_b] = inb
        self.routes = list(routes)
        self.rqueues = rqueues
        # the result as it is when no route is in it; else without the remote subscriptions
        self.local = r if not (routes or rqueues or skipped) else SublistResult(local_ps, local_qs)
        self.inbound = SublistResult(inbound_ps, [])
        self.inbound_q = inbound_q


class RoutedAccount(Account):
    __slots__ = ("_splits", "name_b", "_shadows", "shadows")

    def __init__(self, server: Any, name: str) -> None:
        super().__init__(server, name)
        self._splits: dict[SublistResult, _Split] = {}
        self.name_b = name.encode()
        self._shadows: dict[Any, list[ShadowSub]] = {}  # a subscription here -> its shadows in exporters
        # this account's subscriptions get shadows (add_sub below): a subclass with its own add_sub that does
        # not call ours keeps the single-server way (the publishing server applies the stream import)
        self.shadows = type(self).add_sub is RoutedAccount.add_sub

    # ---- local interest -> routes ---------------------------------------------------------------------

    def add_sub(self, sub: Any) -> None:
        super().add_sub(sub)
        if not origin_only(sub):
            self.server.cluster.local_interest(self, sub, True)
            if self.stream_imports and type(sub) is not ShadowSub:
                self._add_shadows(sub)

    def remove_sub(self, sub: Any) -> None:
        super().remove_sub(sub)
        if not origin_only(sub):
            self.server.cluster.local_interest(self, sub, False)
            if self._shadows:
                for sh in self._shadows.pop(sub, ()):
                    sh.isub.client.account.remove_sub(sh)

    def _add_shadows(self, sub: Any) -> None:
        """Shadow subscriptions of ``sub`` in the accounts this one imports streams from."""
        shadows: list[ShadowSub] = []
        for exporter, src, remap, isub in self.stream_imports or ():
            if isub.client.subs.get(isub.sid) is not isub:
                continue
            ss = shadow_subject(sub.subject, src, remap)
            if ss is None:
                continue
            sh = ShadowSub(sub, self, ss[0], remap, ss[1], isub)
            try:
                exporter.add_sub(sh)
            except ValueError as e:
                self.server.log.error(f"import subscription on {ss[0]!r} in account {exporter.name} for "
                                      f"{sub.subject!r} in {self.name} refused: {e}")
                continue
            self.server.log.debug(f"Creating import subscription on {ss[0]!r} from account {exporter.name!r}")
            shadows.append(sh)
        if shadows:
            self._shadows[sub] = shadows

    def map_subject(self, subject: bytes) -> bytes | None:
        """The account's mappings, cluster-scoped destinations chosen by this cluster's name (which a
        server without a configured name may have learnt from its peers)."""
        s = subject.decode("utf-8", "surrogateescape")
        cn = self.server.cluster.name
        for m in self.mappings:
            if m.match(s):
                d = m.select(s, cn)
                return None if d is None else d.encode("utf-8", "surrogateescape")
        return subject

    def remote_changed(self) -> None:
        """Remote interest changed without new sublist results (a queue weight): forget the splits."""
        self._splits.clear()

    def _split(self, r: SublistResult) -> _Split:
        sp = self._splits.get(r)
        if sp is None:
            if len(self._splits) >= _SPLITS_MAX:
                self._splits.clear()
            sp = self._splits[r] = _Split(r)
        return sp

    # ---- delivery --------------------------------------------------------------------------------------

    def deliver_result(self, c: Any, r: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                       route: bytes | None = None, rreply: bytes | None = None) -> bool:
        """``rreply``: the reply routes get when it differs from the subscribers' here (a gateway reply,
        rillet.cluster.gateway, whose ``_GR_.`` prefix only servers see)."""
        sp = self._splits.get(r)
        if sp is None:
            if not r.qsubs:
                # a result first seen (a reply subject is one per request or PubAck): when it holds only this
                # server's plain subscriptions it is delivered as it is, without a split to build and cache
                for sub in r.psubs:
                    if type(sub) is RemoteSub or sub.icb is not None:
                        break
                else:
                    return Account.deliver_result(self, c, r, subject, reply, hdr, msg, route)
            sp = self._split(r)
        if sp.local is r:
            return Account.deliver_result(self, c, r, subject, reply, hdr, msg, route)
        lr = sp.local
        # one frame per route: plain interest, plus the queue groups this route serves
        targets: dict[Any, list[bytes]] = {rc: [] for rc in sp.routes}
        chosen_local: list[list[Any]] | None = None
        for qname, members, cum, loc in sp.rqueues:
            m = members[min(bisect_right(cum, random() * cum[-1]), len(members) - 1)]
            if type(m) is RemoteSub:
                q = targets.get(m.client)
                if q is None:
                    targets[m.client] = [qname]
                else:
                    q.append(qname)
            else:  # a local member: one of the group's local members takes it
                if chosen_local is None:
                    chosen_local = []
                chosen_local.append(loc)
        if chosen_local is not None:
            lr = SublistResult(lr.psubs, lr.qsubs + chosen_local)
        delivered = False
        if lr.psubs or lr.qsubs:
            nr = c.no_responders and bool(targets)
            if nr:
                c.no_responders = False  # the message goes to a route too: no 503 from here
            try:
                delivered = Account.deliver_result(self, c, lr, subject, reply, hdr, msg, route)
            finally:
                if nr:
                    c.no_responders = True
        rsubject = route if route is not None else subject
        # a JetStream delivery shown with its stream subject: as nats-server, routes get the subject it matched
        # (the deliver subject, or a pull request's reply) and the shown one after '@' in the ack reply
        jsd = route is not None and rreply is None and reply is not None and reply[:8] == b"$JS.ACK." \
            and js_ack_deliver_idx(reply) < 0
        gwo = c.kind == GATEWAY  # from a gateway (rillet.cluster.gateway): leafs get it when we are their hub only
        traced = hdr > 0 and _mt.CURRENT is not None and _mt.owns(_mt.CURRENT, hdr, msg)
        for rc, queues in targets.items():
            if traced:  # the next hop in its header, and the egress event (rillet.server.msgtrace)
                hdr, msg = _mt.CURRENT.to_remote(rc, hdr, msg)  # type: ignore[union-attr]
            if not rc.closed:
                if gwo and rc.kind == LEAF and rc.spoke:
                    continue
                if jsd:  # (leafs too, as nats-server)
                    rc.send_msg(self.name_b, route, reply + b"@" + subject, queues, hdr, msg)  # type: ignore
                elif gwo and rc.kind == LEAF:  # a leaf: the original reply (_GR_ replies stay between servers)
                    rc.send_msg(self.name_b, rsubject, reply, queues, hdr, msg)
                else:
                    rc.send_msg(self.name_b, rsubject, reply if rreply is None else rreply, queues, hdr, msg)
                delivered = True
        return delivered

    def deliver_routed(self, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                       msg: bytes) -> None:
        """A message from route ``rc``: to local subscribers only (and to one member of each named group)."""
        if hdr > 0 and _mt.CURRENT is None and msg.find(b"Nats-Trace-", 0, hdr) >= 0 and \
                _mt.routed_inbound(self, rc, subject, reply, queues, hdr, msg, self._deliver_routed):
            return  # traced here too: this server sends its own event
        self._deliver_routed(rc, subject, reply, queues, hdr, msg)

    def _deliver_routed(self, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                        msg: bytes) -> None:
        shown = None
        if reply is not None and reply[:8] == b"$JS.ACK." and b"@" in reply:
            i = js_ack_deliver_idx(reply)
            if i > 0:
                # a JetStream delivery (nats-server's form): matched on the RMSG subject (the deliver subject),
                # shown with the stream subject after '@', acked on the reply before it
                shown, reply = reply[i + 1:], reply[:i]
        r = self._match(subject.decode("utf-8", "surrogateescape"))
        if not (r.psubs or r.qsubs):
            return
        sp = self._split(r)
        lr = sp.inbound
        if queues:
            groups = [g for g in (sp.inbound_q.get(bytes(q)) for q in queues) if g is not None]
            if groups:
                lr = SublistResult(lr.psubs, groups)
        if lr.psubs or lr.qsubs:
            if shown is None:
                Account.deliver_result(self, rc, lr, subject, reply, hdr, msg)
            else:
                Account.deliver_result(self, rc, lr, shown, reply, hdr, msg, subject)


def js_ack_deliver_idx(reply: bytes) -> int:
    """The offset of the ``@`` in a JetStream delivery's ``$JS.ACK.<8 tokens>@<subject>`` reply, else -1
    (stream, consumer and subject tokens may hold ``@``: only one after the eighth dot counts, as
    nats-server's jsAckDeliverIdx)."""
    if reply[:8] != b"$JS.ACK.":
        return -1
    i = reply.find(b"@")
    while i > 0:
        if reply.count(b".", 0, i) >= 8:
            return i
        i = reply.find(b"@", i + 1)
    return -1
