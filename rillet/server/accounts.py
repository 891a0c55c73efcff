"""Accounts: each has its own subject space (a sublist) and the message delivery hot path.

Links (routes, gateways, leaf nodes) hear about the account's interest through the ``InterestListener``s the
composition root gives the server (``server.interest_listeners``): a subscription made or removed here
(``local_interest``) and interest a route announced (``routed_interest``).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

import rillet.server.msgtrace as _mt
from rillet import lane as _lane
from rillet.server.delivery import ROUTER, deliver_inbound
from rillet.server.delivery import deliver_result as _deliver_result
from rillet.server.delivery import no_responders as _no_resp
from rillet.subjects.sublist import Sublist
from rillet.subjects.validate import subject_matches_filter

if TYPE_CHECKING:
    from rillet.server.client import Subscription
    from rillet.server.server import Server

GLOBAL_ACCOUNT = "$G"
# a closed connection's subscriptions: up to REMOVE_NOW go at once, more are removed REMOVE_BUDGET seconds
# of work per loop pass (issue 20: one client's close must not hold everyone)
REMOVE_NOW = 256
REMOVE_BUDGET = 0.002


class InterestListener(Protocol):
    """A link subsystem's part in an account's interest (rillet.cluster: routes, gateways, leaf nodes)."""

    # stream imports into the accounts reach their subscriptions through shadow subscriptions in the exporting
    # accounts, which this listener makes (rillet.cluster.routed), instead of the import's own subscription
    shadows: bool

    def local_interest(self, acc: "Account", sub: Any, added: bool) -> None:
        """A subscription of ``acc`` was added (``added``) or removed here, after the sublist changed."""

    def routed_interest(self, acc: "Account", sub: Any, added: bool) -> None:
        """A route announced (or withdrew) interest in ``acc`` (a ``RemoteSub``, already in the sublist)."""


class Account:
    __slots__ = ("name", "server", "sublist", "clients", "_pending", "_match", "interest_watchers", "mappings",
                 "mconns", "msubs", "mpay", "imports", "sub_removed", "stream_imports", "no_match", "trace_dest",
                 "trace_sampling", "name_b", "shadows", "listeners", "gw", "slow_consumers", "__weakref__")

    def __init__(self, server: "Server", name: str) -> None:
        self.name = name
        self.name_b = name.encode()
        self.server = server
        # the links' interest listeners (none on a server without links)
        self.listeners: tuple[InterestListener, ...] = server.interest_listeners
        # stream imports into this account reach its subscriptions through shadow subscriptions in the
        # exporting accounts (rillet.cluster.routed), not through the import's own subscription
        self.shadows = any(li.shadows for li in self.listeners)
        self.sublist = Sublist(cache=not server.opts.disable_sublist_cache)
        self._match = self.sublist.match
        self.mappings: list[Any] = []  # rillet.subjects.mapping.Mapping, first matching source wins
        # account limits (config ``limits {}``); -1 = no limit
        self.mconns = -1
        self.msubs = -1
        self.mpay = -1
        self.slow_consumers = 0  # its clients cut as slow consumers (/accstatz, account connection events)
        self.imports: Any = None  # rillet.server.account_config.AccountImports, when configured
        self.clients: set[Any] = set()
        self._pending = server.pending_flush
        # literal subject -> callbacks run when a subscription on exactly that subject comes or goes
        # (JetStream push consumers watch their deliver subject)
        self.interest_watchers: dict[str, list[Any]] = {}
        # callbacks cb(account, sub) run after any subscription goes (latency tracking watches requestors)
        self.sub_removed: list[Any] | None = None
        # the stream imports into this account: (exporter, exported subject, remap or None, import sub)
        self.stream_imports: list[tuple[Any, str, Any, Any]] | None = None
        # called by a client's publish that matched no subscription here, when set (gateways send it on)
        self.no_match: Any = None
        # the gateways' part in this account (rillet.server.delivery.GatewayStep: the delivery executor's
        # gateway step, the _GR_. reply tracking), set by the composition root on a server with gateways
        self.gw: Any = None
        # msg_trace { dest, sampling }: where traces started by a sampled traceparent header go (msgtrace)
        self.trace_dest: str | None = None
        self.trace_sampling = 100

    def add_sub(self, sub: "Subscription") -> None:
        self.sublist.insert(sub)
        self._interest_changed(sub.subject)
        for li in self.listeners:
            li.local_interest(self, sub, True)

    def remove_sub(self, sub: "Subscription") -> None:
        self.sublist.remove(sub)
        self._interest_changed(sub.subject)
        if self.sub_removed:
            for cb in list(self.sub_removed):
                cb(self, sub)
        for li in self.listeners:
            li.local_interest(self, sub, False)

    def _interest_changed(self, subject: str) -> None:
        """A local subscription on ``subject`` came or went: the interest watchers and, for stream imports,
        the exporting accounts are told."""
        if self.interest_watchers:
            self._notify_interest(subject)
        if self.stream_imports:
            self._notify_exporters(subject)

    def route_interest(self, sub: Any, added: bool) -> None:
        """A route announced (or withdrew) interest (called by the route connection once it is in the
        sublist, or out of it)."""
        for li in self.listeners:
            li.routed_interest(self, sub, added)
        if self.interest_watchers:
            self.remote_interest(sub.subject)

    def remote_interest(self, subject: str) -> None:
        """Interest in ``subject`` came or went on another server (a route, a gateway): watchers of a subject it
        covers (a JetStream push consumer's deliver subject) check their interest again at once, as nats-server's
        consumers hear of routed and gateway interest."""
        watchers = self.interest_watchers
        if not watchers:
            return
        if "*" in subject or ">" in subject:
            keys = [k for k in watchers if subject_matches_filter(k, subject)]
        else:
            keys = [subject] if subject in watchers else []
        for k in keys:
            self._notify_interest(k)

    def remote_changed(self) -> None:
        """Remote interest changed without new sublist results (a queue weight): the plans are made again."""
        self.sublist.forget_plans()

    def remove_subs(self, subs: list["Subscription"]) -> None:
        """Remove many subscriptions (a closed connection's) without holding the loop: past REMOVE_NOW of
        them, queue subscriptions first (a group stops picking a member that is gone), then the rest,
        REMOVE_BUDGET seconds of it per loop pass (100,000 take ~0.4 s of work)."""
        if len(subs) <= REMOVE_NOW:
            for sub in subs:
                self.remove_sub(sub)
            return
        subs = sorted(subs, key=lambda s: not s.queue)  # (stable)
        self._remove_some(subs, 0)

    def _remove_some(self, subs: list["Subscription"], i: int) -> None:
        end = time.monotonic() + REMOVE_BUDGET
        n = len(subs)
        remove = self.remove_sub
        while i < n:
            remove(subs[i])
            i += 1
            if not i & 63 and time.monotonic() >= end:
                break
        if i < n:
            self.server.loop.call_soon(self._remove_some, subs, i)

    def _notify_interest(self, subject: str) -> None:
        cbs = self.interest_watchers.get(subject)
        if cbs:
            for cb in list(cbs):
                cb()

    def _notify_exporters(self, subject: str) -> None:
        """A subscription came or went here: watchers in accounts we import streams from, whose subject
        reaches this one through the import, see the change (as nats-server's shadow subscriptions make
        interest in an importing account interest in the exporting one)."""
        live = []
        for entry in self.stream_imports or ():
            exporter, src, remap, isub = entry
            if isub.client.subs.get(isub.sid) is not isub:
                continue  # the import is gone (reload, JWT update)
            live.append(entry)
            if not exporter.interest_watchers:
                continue
            for key in list(exporter.interest_watchers):
                if subject_matches_filter(key, src) and \
                        subject_matches_filter(remap(key) if remap is not None else key, subject):
                    exporter._notify_interest(key)
        self.stream_imports = live

    def has_interest(self, subject: str, depth: int = 0) -> bool:
        """Would a publish on ``subject`` reach anyone? A stream import's subscription counts only when the
        importing account has interest in the subject it gets there (nats-server's shadow subscriptions)."""
        r = self._match(subject)
        if r.qsubs:
            return True
        for sub in r.psubs:
            icb = sub.icb
            if icb is None:
                return True
            imp = getattr(icb, "import_to", None)
            if imp is None:
                return True
            importer, remap = imp
            if depth < 8 and importer.has_interest(remap(subject) if remap is not None else subject, depth + 1):
                return True
        return False

    def num_subs(self) -> int:
        return self.sublist.count()

    def deliver(self, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                deliver: bytes | None = None) -> bool:
        """Deliver one published message to every matching subscription. Returns True if anyone got it.

        ``hdr`` is the header length (-1 for a plain PUB); ``msg`` holds headers followed by the payload.
        ``deliver``: the subject subscribers see when it is not the one matched (a JetStream delivery that
        came through an import keeps its stream subject, see ``deliver_result``).
        """
        if self.mappings:
            subject = self.map_subject(subject)  # type: ignore[assignment]
            if subject is None:
                return False
        if self.gw is not None:
            sent = self.gw.publish(c, subject, reply, hdr, msg)  # a gateway reply subject, or a tracked reply
            if sent is not None:
                return sent
        r = self._match(subject.decode("utf-8", "surrogateescape"))
        if r.psubs or r.qsubs:
            if deliver is not None:
                return self.deliver_result(c, r, deliver, reply, hdr, msg, subject)
            return self.deliver_result(c, r, subject, reply, hdr, msg)
        if self.gw is not None and c.kind < ROUTER and self.gw.send(subject, reply, hdr, msg, []):
            return True  # (nobody here: the other clusters with interest)
        if reply and c.no_responders:
            self._no_responders(c, subject, reply)
        return False

    def map_subject(self, subject: bytes) -> bytes | None:
        """The subject after the account's mappings (the first whose source matches); None = drop.
        Cluster-scoped destinations are chosen by this cluster's name (which a server without a configured
        name may have learnt from its peers)."""
        s = subject.decode("utf-8", "surrogateescape")
        cl = self.server.cluster
        cn = cl.name if cl is not None else None
        for m in self.mappings:
            if m.match(s):
                d = m.select(s, cn)
                return None if d is None else d.encode("utf-8", "surrogateescape")
        return subject

    def match(self, subject: str) -> Any:
        return self._match(subject)

    # Deliver to the subscriptions of a sublist result ``r`` (see ``deliver``):
    # ``deliver_result(c, r, subject, reply, hdr, msg, route=None, rreply=None)``, the function that runs the
    # result's delivery plan (rillet.server.delivery.deliver_result), bound as a method with no call between.
    deliver_result = _deliver_result

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

    def _no_responders(self, c: Any, subject: bytes, reply: bytes) -> None:
        """Tell a requester that nobody is listening: a 503 status on its own reply subscription."""
        _no_resp(self, c, subject, reply)


# ``Account.deliver``: ``reference_deliver`` (the method above, the reference and the pure lane's) or, in the
# compiled lane, its twin rillet._speedups._cdeliver.account_deliver (an account without mappings or a gateway
# step; the rest to the reference)
reference_deliver = Account.deliver
_lane.use_compiled_methods(Account, "rillet._speedups._cdeliver", deliver="account_deliver")
