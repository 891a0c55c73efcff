"""Accounts of a server in a cluster: remote interest beside local subscriptions, one match per publish.

A server with a ``cluster {}`` port keeps the plain ``Account``; the composition root gives the server a
``RouteInterest``, through which every account's local subscriptions are announced to the routes (a server
without one pays nothing for clustering). Remote interest (a peer's RS+) is a ``RemoteSub`` in the
account's sublist, so the match that finds local subscribers also finds the routes to send to; a message
from a route enters at ``Account.deliver_routed``:

* plain remote interest: one RMSG/HMSG per route, whatever number of that route's subscriptions match;
* a queue group with members on other servers: one member of the whole cluster is chosen, each remote
  server weighing as many members as it announced (its queue weight), each local member one, as
  nats-server chooses for a message published by a client; a remote choice goes to that route, whose RMSG
  names the group (``| q`` / ``+ reply q``) so the peer gives the message to one of its members;
* a message that came from a route is delivered here only (never to another route: routes form a full
  mesh), to the plain subscribers and to one local member of each queue group named in its RMSG.

The routing decision depends only on the sublist result, which the sublist caches and never changes, so
it is computed once per result (``rillet.server.delivery.Plan``) and kept on the result; the one executor
there delivers every message.

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

from typing import Any

from rillet.server.accounts import Account
from rillet.server.delivery import RemoteSub, js_ack_deliver_idx, origin_only, shadow_subject
from rillet.subjects.sublist import SublistResult
from rillet.subjects.validate import subject_matches_filter

__all__ = ["RemoteSub", "RouteInterest", "ShadowSub", "js_ack_deliver_idx", "origin_only", "shadow_subject"]


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


class RouteInterest:
    """The routes' part in every account's interest (``rillet.server.accounts.InterestListener``, given to the
    server by the composition root): a local subscription is announced to the routes (RS+/RS-), and with
    ``shadows`` the subscriptions of an account that imports streams get their shadows in the exporters (a
    server with gateways does not: there the stream import's own subscription delivers, the single-server
    way)."""

    __slots__ = ("cluster", "shadows", "_shadows")

    def __init__(self, cluster: Any, shadows: bool) -> None:
        self.cluster = cluster
        self.shadows = shadows
        self._shadows: dict[Any, list[ShadowSub]] = {}  # a subscription -> its shadows in exporters

    def local_interest(self, acc: Any, sub: Any, added: bool) -> None:
        if origin_only(sub):
            return
        self.cluster.local_interest(acc, sub, added)
        if added:
            if self.shadows and acc.stream_imports and type(sub) is not ShadowSub:
                self._add_shadows(acc, sub)
        elif self._shadows:
            for sh in self._shadows.pop(sub, ()):
                sh.isub.client.account.remove_sub(sh)

    def routed_interest(self, acc: Any, sub: Any, added: bool) -> None:
        pass  # (routes form a full mesh: what one route announced is not told to the others)

    def _add_shadows(self, acc: Any, sub: Any) -> None:
        """Shadow subscriptions of ``sub`` in the accounts ``acc`` imports streams from."""
        shadows: list[ShadowSub] = []
        log = acc.server.log
        for exporter, src, remap, isub in acc.stream_imports or ():
            if isub.client.subs.get(isub.sid) is not isub:
                continue
            ss = shadow_subject(sub.subject, src, remap)
            if ss is None:
                continue
            sh = ShadowSub(sub, acc, ss[0], remap, ss[1], isub)
            try:
                exporter.add_sub(sh)
            except ValueError as e:
                log.error(f"import subscription on {ss[0]!r} in account {exporter.name} for "
                          f"{sub.subject!r} in {acc.name} refused: {e}")
                continue
            log.debug(f"Creating import subscription on {ss[0]!r} from account {exporter.name!r}")
            shadows.append(sh)
        if shadows:
            self._shadows[sub] = shadows
