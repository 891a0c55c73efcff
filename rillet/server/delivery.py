"""One delivery path: connection kinds, the ``Link`` interface of routes, gateways and leaf connections, and
the delivery plan of a sublist result with the one function that executes it.

For a compiled twin of the executor, the plan's shape changed (additively) with the gateway step (no account
subclass): ``Plan(r, gw=None)`` has two more fields, ``gw`` (the account's ``GatewayStep``, None without
gateways) and ``targets`` (the links with plain interest as ``forward`` takes them, made once); ``local`` is
False when ``gw`` is set (its other fields as before). In the non-local branch ``deliver_result`` runs the step
for a message of this server's clients (``c.kind < ROUTER``) with outbound gateways (``gw.outo``): a tracked
reply goes back through ``acc.deliver``; else ``gw.send``/``gw.send_shown`` before the local subscribers (after
the links when a trace is current), the sending counting as a delivery (no 503). The shared empty result keeps
no plan (its plan depends on the account). See the gateway parts of ``deliver_result``.
"""
from __future__ import annotations

from bisect import bisect_right
from enum import IntEnum
from random import random
from typing import Any, Protocol

from rillet.subjects.validate import subject_is_subset_match, subjects_collide, tokens_match_literal


class ConnKind(IntEnum):
    """What a connection is (``conn.kind``). Ordered: below ROUTER are this server's own clients."""

    CLIENT = 0
    INTERNAL = 1  # JetStream, $SYS services, imports: subscriptions with callbacks
    ROUTER = 2
    GATEWAY = 3
    LEAF = 4


CLIENT = ConnKind.CLIENT
INTERNAL = ConnKind.INTERNAL
ROUTER = ConnKind.ROUTER
GATEWAY = ConnKind.GATEWAY
LEAF = ConnKind.LEAF

# (below the kinds, which it imports)
import rillet.server.msgtrace as _mt  # noqa: E402


# ==== links: routes, gateways and leaf connections, as delivery sees them =========================================

class Link(Protocol):
    """A connection to another server (a route, a gateway or a leaf connection): what delivery calls.

    ``send_msg`` frames one message for the peer (RMSG/HMSG/LMSG in ``account``, naming the queue groups the
    peer should give it to) and appends it to the connection's output."""

    kind: ConnKind
    closed: bool

    def send_msg(self, account: bytes, subject: bytes, reply: bytes | None, queues: list[bytes], hdr: int,
                 msg: bytes) -> None: ...


class GatewayStep(Protocol):
    """The gateways' part in one account (``acc.gw``; rillet.cluster.gateway_account.AccountGateway), as delivery sees
    it: the executor's gateway step for this server's clients' messages, evaluated per message (the remote
    clusters' interest is not in the sublist: optimistic and interest-only modes), and the ``_GR_.`` replies."""

    outo: list  # the outbound gateway connections (empty: the step does nothing)
    replies: Any  # ``_GR_.`` replies shown here without their prefix (false when none): ``lookup(subject)``

    def send(self, subject: bytes, reply: bytes | None, hdr: int, msg: bytes, served: list) -> bool:
        """To the gateways with interest (``served``: the queue groups this cluster serves); True if sent."""

    def send_shown(self, c: Any, r: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                   route: bytes) -> bool:
        """``send`` for a message shown as ``subject`` that matched ``route`` (a JetStream delivery...)."""

    def publish(self, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> bool | None:
        """A publish on a ``_GR_.`` subject or a tracked reply, sent back to its cluster (None: neither)."""


class RemoteSub:
    """Interest a link announced (RS+/LS+): kept in the account's sublist like a local subscription, so the
    match that finds local subscribers also finds the links to send to. ``client`` is the ``Link``."""

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
    """A subscription that applies an import for the publishing server only: never announced to links, never
    given a message that came from one (see rillet/cluster/routed.py)."""
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


# ==== the plan of a sublist result =================================================================================

_NONE: list = []  # (shared, never changed: a plan without links or remote queue groups)
_NO_Q: dict = {}  # (shared, never changed: no queue groups)


class Plan:
    """What one sublist result means for delivery, computed once and kept on the result (``r.plan``; a new
    subscription or a removed one makes new results, so the plan goes with the result it was made for; a
    queue weight that changes clears the plans of the account's cached results: ``forget_plans``).

    Plain data, for the executor:

    * ``local``: the result holds this server's subscribers only (then ``psubs``/``qsubs`` are its own) and
      the account has no gateway step: the executor delivers here and does nothing else;
    * ``psubs``, ``qsubs``: the subscribers here of a message published here (remote interest left out, and
      a stream import's own subscription when shadows deliver instead);
    * ``links``: the links with plain interest (one message each);
    * ``rqueues``: the queue groups with members elsewhere: ``(name, members, cumulative weights, local
      members)``, one member of the whole cluster chosen per message;
    * ``in_psubs``, ``in_q``: the subscribers here of a message that came from a route (no import that acts
      for the publishing server only), and the local members of each queue group by name; ``inbound``: the
      former as a ``Local``;
    * ``gw``: the account's gateway step (``GatewayStep``, ``acc.gw``: None without gateways), for the
      messages of this server's clients, evaluated per message (the remote clusters' interest is not in the
      sublist); a plan with one is never ``local``;
    * ``targets``: the links with plain interest as the executor hands them to ``forward`` (link -> queue
      group names, none), made once: used as it is when no queue group has members elsewhere (never changed);
      None in ``LINKS`` only.

    ``LINKS`` (one shared plan, ``targets`` None) stands for a result holding nothing but a few links' plain
    interest (``RemoteSub``s, at most ``LINKS_MAX``) in an account without a gateway step: the executor reads
    the links from the result itself at each message, so a reply crossing a route (a new subject each time)
    makes no plan; its inbound part is empty. ``plan_of`` (for code that reads ``links``) makes a full one.
    """

    __slots__ = ("local", "psubs", "qsubs", "links", "rqueues", "in_psubs", "in_q", "inbound", "plan", "gw",
                 "targets")
    targets: dict[Any, list] | None  # (None in ``LINKS`` only)
    plan: "Plan | None"  # (``Local``'s own plan: itself)

    def __init__(self, r: Any, gw: Any = None) -> None:
        self.gw = gw
        if not r.qsubs:
            for sub in r.psubs:
                if type(sub) is RemoteSub or (sub.icb is not None and origin_only(sub)):
                    break
            else:
                # only this server's subscribers, none applying an import (the usual result of a reply subject,
                # one per request or PubAck, or of a JetStream ack subject, one per message, so one plan per
                # message): the result as it is, here and for a message from a route (none of them acts for
                # the publishing server only: ``inbound`` None, the result itself). No reference back to
                # itself: a plan per message must go with its result, not wait for the GC
                self.local = gw is None
                self.psubs = self.in_psubs = r.psubs
                self.qsubs = r.qsubs
                self.links = self.rqueues = _NONE
                self.in_q = self.targets = _NO_Q
                self.inbound = self.plan = None
                return
        local_ps: list[Any] = []
        inbound_ps: list[Any] = []
        links: dict[Any, None] = {}
        skipped = False
        for sub in r.psubs:
            if type(sub) is RemoteSub:
                links[sub.client] = None
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
        self.links = list(links)
        self.targets = {rc: [] for rc in links} if links else _NO_Q
        self.rqueues = rqueues
        here = not (links or rqueues or skipped)
        self.local = here and gw is None
        if here:
            self.psubs, self.qsubs = r.psubs, r.qsubs
        else:
            self.psubs, self.qsubs = local_ps, local_qs
        self.in_psubs = inbound_ps
        self.in_q = inbound_q
        self.inbound = Local(inbound_ps, [])
        self.plan = None  # (a plan made by ``Local`` stands for its own result: itself)


# the most links a result may have for ``LINKS`` (more: a full plan, whose ``targets`` are made once)
LINKS_MAX = 4


def _links_plan() -> Plan:
    p = Plan.__new__(Plan)
    p.local = False
    p.psubs = p.links = p.rqueues = p.in_psubs = _NONE
    p.qsubs = _NONE
    p.in_q = _NO_Q
    p.inbound = _EMPTY
    p.gw = p.targets = p.plan = None
    return p


def plan_of(r: Any, acc: Any) -> Plan:
    """The full plan of ``acc``'s sublist result ``r`` (made now if it has none, or only ``LINKS``)."""
    p = r.plan
    if p is None or p is LINKS:
        p = r.plan = Plan(r, acc.gw)
    return p


def forget_plans(acc: Any) -> None:
    """Remote interest changed without new sublist results (a queue weight): the plans are made again."""
    acc.sublist.forget_plans()


# ==== the executor =================================================================================================

def _trace_deliveries(psubs: list, c: Any, no_echo: bool, subject: bytes, reply: bytes | None, hdr: int,
                      msg: bytes) -> None:
    """``->> [MSG ...]`` and ``->> MSG_PAYLOAD`` trace lines for the plain subscribers a message goes to (tracing
    is on)."""
    rp = f" {reply.decode(errors='replace')}" if reply else ""
    sz = f"{hdr} {len(msg)}" if hdr >= 0 else f"{len(msg)}"
    op = "HMSG" if hdr >= 0 else "MSG"
    for sub in psubs:
        sc = sub.client
        if sub.icb is None and not (no_echo and sc is c):
            sc.trace(f"->> [{op} {subject.decode(errors='replace')} {sub.sid.decode(errors='replace')}{rp} {sz}]")
            sc.trace_payload(msg, hdr, True)


def _pick(group: list, c: Any, echo: bool, subject: bytes, reply: bytes | None) -> Any:
    """One random member of a queue group that may receive this message."""
    n = len(group)
    i = int(random() * n)
    for k in range(n):
        sub = group[(i + k) % n]
        sc = sub.client
        if sc is c and not echo:
            continue
        if sub.max and sub.nm >= sub.max:
            continue
        if sc.perms is not None and sub.icb is None and not _perm_ok(sc, subject, reply):
            continue
        return sub
    return None


def _perm_ok(sc: Any, subject: bytes, reply: bytes | None) -> bool:
    perms = sc.perms
    if perms.sub_deny is not None and perms.deliver_denied(subject.decode("utf-8", "surrogateescape")):
        return False
    if reply and perms.resp is not None:
        perms.track_reply(reply)
    return True


# A connection's output is written after each slice of a read, where its pending bytes are checked against
# max_pending (Client.write_out); but one message to many subscriptions of one connection (or a slice's
# messages to them) could build far more than that before the write: 1,000 subscriptions and a 1 MB
# payload, 1 GB. Past OUT_CHECK unwritten bytes each frame added is checked against max_pending at once, as
# nats-server checks each frame it queues (queueOutbound).
OUT_CHECK = 1 << 20


class _Dropped:
    """The output of a connection cut during a delivery that goes on to its other subscriptions: whatever
    is added is dropped (not copied only to be cleared)."""

    __slots__ = ()

    def __iadd__(self, data: Any) -> "_Dropped":
        return self

    def __len__(self) -> int:
        return 0

    def clear(self) -> None:
        pass


DROPPED = _Dropped()


def out_overflow(sc: Any) -> None:
    """``sc``'s unwritten output passed OUT_CHECK: a client connection past max_pending is cut as a slow
    consumer (nats-server's MaxPending notice), and what is still added to its output is dropped."""
    if sc.closed:
        sc.out.clear()
        return
    srv = sc.server
    mp = srv.opts.max_pending
    if len(sc.out) > mp and getattr(sc, "kind", None) == CLIENT:
        srv.slow_consumer(sc, f"MaxPending of {mp} Exceeded")
        sc.out = DROPPED


def _strip_headers(reply: bytes | None, hdr: int, msg: bytes) -> bytes:
    """The MSG tail for a subscriber that does not support headers: the payload only."""
    payload = msg[hdr:]
    sz = str(len(payload)).encode()
    if reply:
        return b" " + reply + b" " + sz + b"\r\n" + payload + b"\r\n"
    return b" " + sz + b"\r\n" + payload + b"\r\n"


# a client with at most this many subscriptions has its reply subscription looked for among its own
REPLY_SUBS_SCAN = 16


def no_responders(acc: Any, c: Any, subject: bytes, reply: bytes) -> None:
    """Tell a requester that nobody is listening: a 503 status on its own reply subscription."""
    sub = _reply_sub(acc, c, reply)
    if sub is None:
        return
    hdr = b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"
    if sub.icb is not None:
        sub.icb(sub, c, reply, None, len(hdr), hdr)
        return
    n = len(hdr)
    c.out += b"HMSG %b %b %d %d\r\n%b\r\n" % (reply, sub.sid_b, n, n, hdr)
    c.noresp_sent += 1  # (a burst of these paces the client's next read: rillet.server.client NORESP_BURST)
    c.flush()


# a subscription's subject as _reply_sub tests a reply subject against it: (how, text). 1: ``<text>*`` (the
# text, then one token), 2: ``<text>>`` (the text, then one token or more), 3: a wildcard before the last token
# (token by token), 0: no wildcard (equal only). Kept per subject text (every client's ``_INBOX.<id>.*``)
_REPLY_FORMS: dict[str, tuple[int, str]] = {}


def _reply_form(subject: str) -> tuple[int, str]:
    toks = subject.split(".")
    if "*" in toks[:-1] or ">" in toks[:-1]:
        form = (3, subject)
    elif toks[-1] == "*":
        form = (1, subject[:-1])
    elif toks[-1] == ">":
        form = (2, subject[:-1])
    else:
        form = (0, subject)
    if len(_REPLY_FORMS) >= 4096:
        _REPLY_FORMS.clear()
    _REPLY_FORMS[subject] = form
    return form


def _reply_sub(acc: Any, c: Any, reply: bytes) -> Any:
    """The requester's own (non-queue) subscription that a message on ``reply`` reaches, or None.

    Among a client's few subscriptions it is looked for directly, as nats-server does (its subForReply):
    each request's reply subject is a new one, and matching it in the account's sublist was a cache miss
    that also put the subject in the cache (a burst of 25,000 requests nobody serves: 25,000 entries,
    ~40% of the burst's time). The first subscription (in the order they were made) that matches is the
    one, each tested by the form of its subject (``_reply_form``: a prefix test for ``<prefix>.*`` and
    ``<prefix>.>``, the usual reply subscriptions; token by token only for a wildcard before the end)."""
    subs = getattr(c, "subs", None)
    rs = reply.decode("utf-8", "surrogateescape")
    if c.kind == CLIENT and type(subs) is dict and len(subs) <= REPLY_SUBS_SCAN:
        if not rs or rs[0] == "." or rs[-1] == "." or ".." in rs:
            return None  # (an empty token: matches nothing, as in the sublist)
        toks = None
        for sub in subs.values():
            if sub.queue:
                continue
            subj = sub.subject
            if subj == rs:
                return sub
            how, text = _REPLY_FORMS.get(subj) or _reply_form(subj)
            if how == 1:
                if rs.startswith(text) and rs.find(".", len(text)) < 0:
                    return sub
            elif how == 2:
                if rs.startswith(text):
                    return sub
            elif how == 3:
                if toks is None:
                    toks = rs.split(".")
                if tokens_match_literal(toks, subj.split(".")):
                    return sub
        return None
    for sub in acc._match(rs).psubs:
        if sub.client is c:
            return sub
    return None


def tracer(hdr: int, msg: bytes) -> Any:
    """The trace observing this message's delivery, if it is the traced one (rillet.server.msgtrace)."""
    mt = _mt.CURRENT
    if mt is not None and _mt.owns(mt, hdr, msg):
        return mt
    return None


# ==== delivering a message published here, and one from a route ===================================================

def deliver_result(acc: Any, c: Any, r: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
                   route: bytes | None = None, rreply: bytes | None = None) -> bool:
    """THE executor: deliver a message to the sublist result ``r`` by its plan (``r.plan``, made on first
    use): this server's subscribers (each output buffer gets the frame's head, the SID and the tail, built
    once), one member of each queue group over the cluster, and the links with interest (``forward``).
    Returns True if anyone got it; a requester with no_responders gets a 503 when nobody did.

    ``r`` may also be a ``Local`` (the subscribers here of a message from a route, leaf or gateway, picked
    by the caller). ``route``: the subject ``r`` was matched on when subscribers are shown another one
    (``subject``; a JetStream delivery shows its stream subject); internal callbacks marked ``routed`` get
    it, and the shown one as an extra argument. ``rreply``: the reply links get when it differs from the
    subscribers' here (a gateway reply, whose ``_GR_.`` prefix only servers see).

    A traced message (rillet.server.msgtrace) is observed: its trace (``obs``) is told of each subscriber
    reached or skipped and each link sent to; its calls run only for traced messages. Plain data and plain
    loops, so that a compiled twin can take this function's place.
    """
    plan = r.plan
    if plan is None:
        psubs = r.psubs
        if 0 < len(psubs) <= LINKS_MAX and type(psubs[0]) is RemoteSub and acc.gw is None and not r.qsubs:
            # links only (no queue group, no subscriber here, no gateway step): the usual result of a reply
            # crossing a route (a PubAck or a response, a new subject each time): the shared ``LINKS``, which
            # reads the links from the result below, instead of a plan per message
            for sub in psubs:
                if type(sub) is not RemoteSub:
                    plan = Plan(r)
                    break
            else:
                plan = LINKS
        else:
            plan = Plan(r, acc.gw)
        if psubs or r.qsubs:  # (the empty result is one object, shared by every sublist: it keeps no plan)
            r.plan = plan
    obs = None
    if hdr > 0 and _mt.CURRENT is not None:
        obs = tracer(hdr, msg)
    targets = None
    psubs = plan.psubs
    qsubs = plan.qsubs
    if not plan.local:
        gws = plan.gw
        if gws is not None:
            # the gateway step (``GatewayStep``): a message of this server's clients also goes to the other
            # clusters with interest, evaluated per message (their interest is not in the sublist); never a
            # message from a link
            if c.kind < ROUTER and gws.outo:
                if gws.replies and route is None and gws.replies.lookup(subject) is not None:
                    return acc.deliver(c, subject, reply, hdr, msg)  # a response to a request from another cluster
                gtraced = hdr > 0 and _mt.CURRENT is not None
                if gtraced:  # traced: the gateways last, as nats-server (its hop numbers follow the routes')
                    gsent = False
                elif route is None:
                    gsent = gws.send(subject, reply, hdr, msg, r.qsubs)
                else:
                    gsent = gws.send_shown(c, r, subject, reply, hdr, msg, route)
            else:
                gws = None
        # one frame per link: plain interest, plus the queue groups that link serves
        rqueues = plan.rqueues
        if not rqueues:
            targets = plan.targets  # (made once, not changed)
            if targets is None:  # ``LINKS``: the result's links (every one a RemoteSub), as a full plan's
                targets = {}
                for sub in r.psubs:
                    targets[sub.client] = _NONE
        else:
            targets = {rc: [] for rc in plan.links} if plan.links else {}
            for qname, members, cum, loc in rqueues:
                m = members[min(bisect_right(cum, random() * cum[-1]), len(members) - 1)]
                if type(m) is RemoteSub:
                    q = targets.get(m.client)
                    if q is None:
                        targets[m.client] = [qname]
                    else:
                        q.append(qname)
                else:  # a local member: one of the group's local members takes it
                    if qsubs is plan.qsubs:
                        qsubs = list(qsubs)
                    qsubs.append(loc)
    size = len(msg)
    if hdr < 0:
        head = b"MSG %b " % subject
        if reply:
            tail = b" %b %d\r\n%b\r\n" % (reply, size, msg)
        else:
            tail = b" %d\r\n%b\r\n" % (size, msg)
    else:
        head = b"HMSG %b " % subject
        if reply:
            tail = b" %b %d %d\r\n%b\r\n" % (reply, hdr, size, msg)
        else:
            tail = b" %d %d\r\n%b\r\n" % (hdr, size, msg)
    pending = acc._pending
    no_echo = not c.echo
    n = 0
    done: list | None = None
    if acc.server.trace_on:
        _trace_deliveries(psubs, c, no_echo, subject, reply, hdr, msg)
    for sub in psubs:
        sc = sub.client
        if no_echo and sc is c and (obs is None or sub.icb is None):
            if obs is not None:
                obs.skipped(sc, sub, 0)
            continue
        if sub.icb is not None:
            if obs is not None:
                if obs.internal(sub, c, subject, reply, hdr, msg, route):
                    n += 1
                continue
            sub.nm += 1
            if route is not None and getattr(sub.icb, "routed", False):
                ok = sub.icb(sub, c, route, reply, hdr, msg, subject)
            else:
                ok = sub.icb(sub, c, subject, reply, hdr, msg)
            if ok is not False:  # (a service import that reached nobody in its exporter returns False)
                n += 1
            continue
        if sc.perms is not None and not _perm_ok(sc, subject, reply):
            if obs is not None:
                obs.skipped(sc, sub, 1)
            continue
        if obs is not None:
            # 0: deliver (its egress event recorded); 1: not delivered; 2: trace-only (counts as delivered)
            k = obs.check(sc, sub)
            if k:
                n += k - 1
                continue
        sub.nm += 1
        if sub.max:
            if sub.nm > sub.max:
                continue
            if sub.nm == sub.max:
                if done is None:
                    done = []
                done.append(sub)
        out = sc.out
        if hdr >= 0 and not sc.headers:
            out += b"MSG %b %b%b" % (subject, sub.sid_b, _strip_headers(reply, hdr, msg))
        else:
            out += head
            out += sub.sid_b
            out += tail
        if len(out) > OUT_CHECK:
            out_overflow(sc)
        sc.out_msgs += 1
        sc.out_bytes += size
        n += 1
        if not sc.flush_pending:
            sc.flush_pending = True
            pending.append(sc)
    if qsubs:
        for group in qsubs:
            sub = _pick(group, c, not no_echo, subject, reply)
            if sub is None:
                continue
            sc = sub.client
            if sub.icb is not None:
                if obs is not None:
                    if obs.internal(sub, c, subject, reply, hdr, msg, route):
                        n += 1
                    continue
                sub.nm += 1
                if route is not None and getattr(sub.icb, "routed", False):
                    ok = sub.icb(sub, c, route, reply, hdr, msg, subject)
                else:
                    ok = sub.icb(sub, c, subject, reply, hdr, msg)
                if ok is not False:
                    n += 1
                continue
            if obs is not None:
                k = obs.check(sc, sub)
                if k:
                    n += k - 1
                    continue
            sub.nm += 1
            if sub.max and sub.nm >= sub.max:
                if done is None:
                    done = []
                done.append(sub)
            out = sc.out
            if hdr >= 0 and not sc.headers:
                out += b"MSG %b %b%b" % (subject, sub.sid_b, _strip_headers(reply, hdr, msg))
            else:
                out += head
                out += sub.sid_b
                out += tail
            if len(out) > OUT_CHECK:
                out_overflow(sc)
            sc.out_msgs += 1
            sc.out_bytes += size
            n += 1
            if not sc.flush_pending:
                sc.flush_pending = True
                pending.append(sc)
    if done is not None:
        for sub in done:
            sub.client.remove_sub(sub)
    if targets is not None:  # (not a local plan)
        if gws is not None:  # (the gateway step ran, or runs now: its sending counts as a delivery)
            sent = forward(acc, c, targets, subject, reply, hdr, msg, route, rreply, obs) if targets else False
            if gtraced:
                if gws.send(route if route is not None else subject, reply, hdr, msg, r.qsubs):
                    sent = True
                if n or sent:
                    return True
                cur = _mt.CURRENT
                if reply and c.no_responders and not (cur is not None and cur.tonly):
                    no_responders(acc, c, subject, reply)
                return False
            if n or sent or gsent:
                return True
            if targets:
                return False
            # (as below, for a plan that would be local without the gateway step)
            if reply and c.no_responders and (obs is None or not obs.tonly) and \
                    (not plan.rqueues or psubs or qsubs):
                no_responders(acc, c, subject, reply)
            return False
        if targets:
            sent = forward(acc, c, targets, subject, reply, hdr, msg, route, rreply, obs)
            return n > 0 or sent
    if n:
        return True
    # (a result with links only, or with nothing here, never answers 503 from here)
    if reply and c.no_responders and (obs is None or not obs.tonly) and (plan.local or psubs or qsubs):
        no_responders(acc, c, subject, reply)
    return False


def Local(psubs: list, qsubs: list) -> "Plan":
    """Subscribers here picked by the caller (a message from a route, a leaf or a gateway): a local plan that
    stands for its own result (``p.plan is p``), for ``deliver_result`` (one type at its attribute reads)."""
    p = Plan.__new__(Plan)
    p.local = True
    p.psubs = psubs
    p.qsubs = qsubs
    p.links = p.rqueues = p.in_psubs = []
    p.in_q = {}
    p.inbound = p.gw = None
    p.targets = _NO_Q
    p.plan = p
    return p


_EMPTY = Local(_NONE, _NONE)  # (shared: nobody here, the inbound part of ``LINKS``)
LINKS = _links_plan()


def forward(acc: Any, c: Any, targets: dict, subject: bytes, reply: bytes | None, hdr: int, msg: bytes,
            route: bytes | None, rreply: bytes | None, obs: Any) -> bool:
    """The message to each link of ``targets`` (link -> the queue group names it serves)."""
    rsubject = route if route is not None else subject
    # a JetStream delivery shown with its stream subject: as nats-server, links get the subject it matched
    # (the deliver subject, or a pull request's reply) and the shown one after '@' in the ack reply
    jsd = route is not None and rreply is None and reply is not None and reply[:8] == b"$JS.ACK." \
        and js_ack_deliver_idx(reply) < 0
    gwo = c.kind == GATEWAY  # from a gateway: leafs get it when we are their hub only
    name = acc.name_b
    delivered = False
    for rc, queues in targets.items():
        if obs is not None:  # the next hop in its header, and the egress event (rillet.server.msgtrace)
            hdr, msg = obs.to_remote(rc, hdr, msg)
        if not rc.closed:
            if gwo and rc.kind == LEAF and rc.spoke:
                continue
            if jsd:  # (leafs too, as nats-server)
                rc.send_msg(name, route, reply + b"@" + subject, queues, hdr, msg)  # type: ignore
            elif gwo and rc.kind == LEAF:  # a leaf: the original reply (_GR_ replies stay between servers)
                rc.send_msg(name, rsubject, reply, queues, hdr, msg)
            else:
                rc.send_msg(name, rsubject, reply if rreply is None else rreply, queues, hdr, msg)
            delivered = True
    return delivered


def deliver_here(acc: Any, c: Any, psubs: list, qsubs: list, subject: bytes, reply: bytes | None, hdr: int,
                 msg: bytes, route: bytes | None = None) -> bool:
    """To this server's subscribers ``psubs`` and one member of each group of ``qsubs`` only (a message from a
    leaf or a gateway, whose links the caller chose)."""
    return deliver_result(acc, c, Local(psubs, qsubs), subject, reply, hdr, msg, route)


def deliver_inbound(acc: Any, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                    msg: bytes) -> None:
    """A message from route ``rc``: to this server's subscribers only (routes form a full mesh), and to one
    local member of each queue group its RMSG names."""
    shown = None
    if reply is not None and reply[:8] == b"$JS.ACK." and b"@" in reply:
        i = js_ack_deliver_idx(reply)
        if i > 0:
            # a JetStream delivery (nats-server's form): matched on the RMSG subject (the deliver subject),
            # shown with the stream subject after '@', acked on the reply before it
            shown, reply = reply[i + 1:], reply[:i]
    r = acc._match(subject.decode("utf-8", "surrogateescape"))
    if not (r.psubs or r.qsubs):
        return
    plan = r.plan
    if plan is None:
        plan = r.plan = Plan(r, acc.gw)
    if queues:
        in_q = plan.in_q
        groups = [g for g in (in_q.get(bytes(q)) for q in queues) if g is not None]
        lr = Local(plan.in_psubs, groups) if groups else plan.inbound
    else:
        lr = plan.inbound
    if lr is None:
        lr = r  # (local plain subscribers only: the result is its own inbound part)
    if lr.psubs or lr.qsubs:
        if shown is None:
            deliver_result(acc, rc, lr, subject, reply, hdr, msg)
        else:
            deliver_result(acc, rc, lr, shown, reply, hdr, msg, subject)


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


# ==== the executor the server runs =================================================================================

# ``reference_deliver_result`` is the pure-Python executor above, the reference; ``deliver_result`` (what every
# caller imports or binds, Account.deliver_result included) is the running lane's (rillet.lane): in the compiled
# lane its twin rillet._speedups._cdeliver.deliver_result, which takes the plain case and hands everything else
# to the reference (an extension built before the twin existed: the reference)
reference_deliver_result = deliver_result
reference_deliver_inbound = deliver_inbound  # (likewise: a message from a route)
reference_no_responders = no_responders  # (and the 503 to a requester nobody answered)
from rillet import lane as _lane  # noqa: E402

if _lane.COMPILED:
    try:
        from rillet._speedups._cdeliver import deliver_inbound, deliver_result, no_responders  # noqa: F811
    except ImportError:
        pass
