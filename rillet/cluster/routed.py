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

import rillet.server.msgtrace as _mt
from rillet.server.accounts import Account
from rillet.server.delivery import RemoteSub, deliver_inbound, js_ack_deliver_idx, origin_only, shadow_subject
from rillet.subjects.sublist import SublistResult
from rillet.subjects.validate import subject_matches_filter

__all__ = ["RemoteSub", "RoutedAccount", "ShadowSub", "js_ack_deliver_idx", "origin_only", "shadow_subject"]


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


class RoutedAccount(Account):
    __slots__ = ("_shadows",)

    def __init__(self, server: Any, name: str) -> None:
        super().__init__(server, name)
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
        """Remote interest changed without new sublist results (a queue weight): the plans are made again."""
        self.sublist.forget_plans()

    # ---- delivery (rillet.server.delivery runs the plans) -------------------------------------------------

    def deliver_routed(self, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                       msg: bytes) -> None:
        """A message from route ``rc``: to local subscribers only (and to one member of each named group)."""
        if hdr > 0 and _mt.CURRENT is None and msg.find(b"Nats-Trace-", 0, hdr) >= 0 and \
                _mt.routed_inbound(self, rc, subject, reply, queues, hdr, msg, self._deliver_routed):
            return  # traced here too: this server sends its own event
        self._deliver_routed(rc, subject, reply, queues, hdr, msg)

    def _deliver_routed(self, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                        msg: bytes) -> None:
        deliver_inbound(self, rc, subject, reply, queues, hdr, msg)
