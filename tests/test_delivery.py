"""The one delivery path (rillet.server.delivery): plans kept with sublist results, the executor, links, and
the trace observer — in process, on a server object with no sockets."""
from __future__ import annotations

import pytest

from rillet.config.options import Options
from rillet.server.client import Client, InternalClient, Subscription
from rillet.server.delivery import (GATEWAY, LEAF, ROUTER, ConnKind, Plan, RemoteSub, deliver_inbound,
                                    deliver_result)
from rillet.server.server import Server
from rillet.app.compose import build_server
from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module with each lane's executor (the reference, then its compiled twin)."""
    with use_lane(request.param, globals()):
        yield request.param


class FakeLink:
    """A route or leaf connection as delivery sees it (the ``Link`` protocol): records what it is sent."""

    def __init__(self, kind: ConnKind = ROUTER) -> None:
        self.kind = kind
        self.closed = False
        self.spoke = False
        self.remote_cluster = ""
        self.remote_name = "peer"
        self.cid = 99
        self.echo = True
        self.headers = True
        self.no_responders = False
        self.perms = None
        self.sent: list[tuple] = []

    def send_msg(self, account, subject, reply, queues, hdr, msg) -> None:
        self.sent.append((account, subject, reply, list(queues), hdr, msg))


def server(cluster: bool = False) -> Server:
    o = Options()
    if cluster:
        o.cluster.port = 1  # (never listened on: the server object only)
        o.cluster.name = "c"
    return build_server(o)


def client(srv: Server, headers: bool = True) -> Client:
    c = Client(srv)
    c.headers = headers
    return c


def sub(acc, c, subject: str, sid: bytes, queue: str | None = None) -> Subscription:
    s = Subscription(c, subject, queue, sid)
    c.subs[sid] = s
    acc.sublist.insert(s)
    return s


def test_conn_kinds_keep_their_numbers() -> None:
    # (the numbers other code and the trace event mapping were written against)
    assert [int(k) for k in (ConnKind.CLIENT, ConnKind.INTERNAL, ROUTER, GATEWAY, LEAF)] == [0, 1, 2, 3, 4]
    assert Client.kind is ConnKind.CLIENT and InternalClient.kind is ConnKind.INTERNAL
    assert ConnKind.INTERNAL < ROUTER  # "this server's own" is a comparison


def test_plan_is_made_once_and_goes_with_its_result() -> None:
    srv = server()
    acc = srv.global_account
    a = client(srv)
    sub(acc, a, "x.*", b"1")
    r = acc.match("x.y")
    assert r.plan is None
    assert deliver_result(acc, client(srv), r, b"x.y", None, -1, b"hi")
    p = r.plan
    assert isinstance(p, Plan) and p.local and p.psubs is r.psubs
    deliver_result(acc, client(srv), acc.match("x.y"), b"x.y", None, -1, b"hi")
    assert acc.match("x.y").plan is p  # the cached result keeps its plan
    sub(acc, client(srv), "x.y", b"2")  # a new subscription: a new result, no plan yet
    r2 = acc.match("x.y")
    assert r2 is not r and r2.plan is None
    deliver_result(acc, client(srv), r2, b"x.y", None, -1, b"hi")
    assert r2.plan is not None and len(r2.plan.psubs) == 2
    acc.sublist.forget_plans()
    assert acc.match("x.y").plan is None


def test_local_fan_out_queue_and_no_echo() -> None:
    srv = server()
    acc = srv.global_account
    pub = client(srv)
    pub.echo = False
    a, b, q1, q2 = client(srv), client(srv, headers=False), client(srv), client(srv)
    sub(acc, a, "s", b"1")
    sub(acc, b, "s", b"2")
    sub(acc, pub, "s", b"3")  # its own: not with echo off
    sub(acc, q1, "s", b"4", "g")
    sub(acc, q2, "s", b"5", "g")
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    assert deliver_result(acc, pub, acc.match("s"), b"s", b"r", len(hdr), hdr + b"pay")
    assert bytes(a.out) == b"HMSG s 1 r %d %d\r\n%bpay\r\n" % (len(hdr), len(hdr) + 3, hdr)
    assert bytes(b.out) == b"MSG s 2 r 3\r\npay\r\n"  # (no header support: the payload only)
    assert bytes(pub.out) == b""
    assert len(q1.out) + len(q2.out) > 0 and not (q1.out and q2.out)  # one member of the group
    assert a in srv.pending_flush and b in srv.pending_flush


def test_no_responders_when_nobody_takes_it() -> None:
    srv = server()
    acc = srv.global_account
    pub = client(srv)
    pub.no_responders = True
    denied = client(srv)
    sub(acc, pub, "_INBOX.1", b"9")
    s = sub(acc, denied, "req", b"1")
    s.max, s.nm = 1, 1  # already reached its maximum: nobody takes the request
    assert not deliver_result(acc, pub, acc.match("req"), b"req", b"_INBOX.1", -1, b"?")
    assert bytes(pub.out).startswith(b"HMSG _INBOX.1 9 ") and b"NATS/1.0 503" in pub.out


def test_links_plain_interest_and_queue_over_the_cluster() -> None:
    srv = server(cluster=True)
    acc = srv.global_account
    route, leaf = FakeLink(ROUTER), FakeLink(LEAF)
    local = client(srv)
    sub(acc, local, "s", b"1")
    acc.sublist.insert(RemoteSub(route, "s", None, 1, None))
    acc.sublist.insert(RemoteSub(route, "s.>", None, 1, None))  # (same route: still one message)
    acc.sublist.insert(RemoteSub(leaf, "s", "g", 5, None))
    r = acc.match("s")
    pub = client(srv)
    for _ in range(200):
        assert deliver_result(acc, pub, r, b"s", None, -1, b"m")
    p = r.plan
    assert not p.local and p.links == [route] and len(p.rqueues) == 1 and p.psubs == [local.subs[b"1"]]
    assert len(route.sent) == 200 and all(m[:4] == (b"$G", b"s", None, []) for m in route.sent)
    assert len(leaf.sent) == 200 and all(m[3] == [b"g"] for m in leaf.sent)  # the only member of g
    assert local.out_msgs == 200


def test_queue_weight_change_makes_plans_again() -> None:
    srv = server(cluster=True)
    acc = srv.global_account
    route = FakeLink(ROUTER)
    q = client(srv)
    sub(acc, q, "s", b"1", "g")
    rs = RemoteSub(route, "s", "g", 1, None)
    acc.sublist.insert(rs)
    r = acc.match("s")
    deliver_result(acc, client(srv), r, b"s", None, -1, b"m")
    assert r.plan.rqueues[0][2] == [1, 2]
    rs.weight = 9
    acc.remote_changed()  # (what a route's queue weight update calls)
    assert r.plan is None
    deliver_result(acc, client(srv), r, b"s", None, -1, b"m")
    assert r.plan.rqueues[0][2] == [1, 10]


def test_a_message_from_a_route_stays_here() -> None:
    srv = server(cluster=True)
    acc = srv.global_account
    route, other = FakeLink(ROUTER), FakeLink(ROUTER)
    a, q1 = client(srv), client(srv)
    sub(acc, a, "s", b"1")
    sub(acc, q1, "s", b"2", "g")
    acc.sublist.insert(RemoteSub(other, "s", None, 1, None))
    deliver_inbound(acc, route, b"s", None, (), -1, b"x")
    assert a.out_msgs == 1 and q1.out_msgs == 0 and not other.sent  # no group named: plain only
    deliver_inbound(acc, route, b"s", None, (b"g",), -1, b"x")
    assert a.out_msgs == 2 and q1.out_msgs == 1 and not other.sent


class Recorder:
    """A trace as the executor sees it (rillet.server.msgtrace.MsgTrace's observer methods)."""

    def __init__(self, tonly: bool = False) -> None:
        self.tonly = tonly
        self.events: list[tuple] = []

    def skipped(self, sc, sub, why) -> None:
        self.events.append(("skipped", sub.sid, why))

    def check(self, sc, sub) -> int:
        self.events.append(("egress", sub.sid))
        return 2 if self.tonly else 0

    def internal(self, sub, c, subject, reply, hdr, msg, route) -> bool:
        self.events.append(("internal", sub.sid))
        return True

    def to_remote(self, rc, hdr, msg):
        self.events.append(("remote", rc.remote_name))
        return hdr, msg


@pytest.mark.parametrize("tonly", [False, True])
def test_the_trace_observes_the_same_loop(monkeypatch, tonly) -> None:
    import rillet.server.msgtrace as mt
    srv = server(cluster=True)
    acc = srv.global_account
    route = FakeLink(ROUTER)
    pub = client(srv)
    pub.echo = False
    a = client(srv)
    sub(acc, a, "t", b"1")
    sub(acc, pub, "t", b"2")
    ic = InternalClient(srv, acc)
    got = []
    ic.subscribe("t", lambda *args: got.append(args))
    acc.sublist.insert(RemoteSub(route, "t", None, 1, None))
    rec = Recorder(tonly)
    monkeypatch.setattr(mt, "CURRENT", rec)
    hdr = b"NATS/1.0\r\nNats-Trace-Dest: d\r\n\r\n"
    assert deliver_result(acc, pub, acc.match("t"), b"t", None, len(hdr), hdr + b"x")
    assert ("egress", b"1") in rec.events and ("skipped", b"2", 0) in rec.events
    assert ("internal", b"1") in rec.events and ("remote", "peer") in rec.events
    assert not got  # the observer made the internal call (here: a recorder that does not)
    assert a.out_msgs == (0 if tonly else 1) and len(route.sent) == 1
    rec.events.clear()
    assert deliver_result(acc, pub, acc.match("t"), b"t", None, 3, b"abcx")  # not the traced message
    assert not rec.events and got


def test_plain_local_result_gets_a_plain_plan_without_cycles() -> None:
    """A result holding only this server's subscribers that apply no import (a reply subject, a JetStream ack
    subject: one result per message) gets the plain plan: the result's own lists, no Local, nothing that refers
    back to itself (no garbage for the cyclic GC per message); a message from a route still reaches them."""
    import gc
    srv = server(cluster=True)
    acc = srv.global_account
    a, b = client(srv), client(srv)
    sub(acc, a, "_INBOX.x.*", b"1")
    ic = InternalClient(srv, acc)
    got = []
    ic.subscribe("_INBOX.x.*", lambda *args: got.append(args[2]))
    r = acc.match("_INBOX.x.1")
    assert deliver_result(acc, client(srv), r, b"_INBOX.x.1", None, -1, b"m")
    p = r.plan
    assert p.local and p.psubs is r.psubs and p.inbound is None and p.plan is None and not p.links
    assert gc.get_referents(p).count(p) == 0
    route = FakeLink(ROUTER)
    deliver_inbound(acc, route, b"_INBOX.x.2", None, (), -1, b"r")
    assert a.out_msgs == 2 and got == [b"_INBOX.x.1", b"_INBOX.x.2"]
    # with an import-applying or remote subscription in the result, the full plan as before
    acc.sublist.insert(RemoteSub(route, "_INBOX.>", None, 1, None))
    r2 = acc.match("_INBOX.x.3")
    deliver_result(acc, b, r2, b"_INBOX.x.3", None, -1, b"m")
    assert not r2.plan.local and r2.plan.links == [route] and r2.plan.inbound is not None


# ==== the gateway step (rillet.cluster.gateway.AccountGateway, acc.gw) ============================================

def gateway_server(cluster: bool = True) -> Server:
    from rillet.config.gateway_section import GatewayOptions, RemoteGateway
    o = Options()
    if cluster:
        o.cluster.port = 1
        o.cluster.name = "A"
    o.gateway_opts = GatewayOptions(name="A", host="127.0.0.1", port=1,
                                    gateways=[RemoteGateway(name="B", urls=["nats://127.0.0.1:2"])])
    return build_server(o)


def fake_gateway(srv, interest: list[tuple[str, str | None]]):
    """An outbound gateway connection to cluster B (registered, never connected) that records what it is sent;
    B announced ``interest`` ((subject, queue) pairs) in $G (interest-only mode, as nats-server 2.15)."""
    from rillet.cluster.gateway_conn import INTEREST_ONLY, GatewayConn, OutAccount

    class FakeGateway(GatewayConn):
        def send_msg(self, account, subject, reply, queues, hdr, msg) -> None:
            self.sent.append((account, subject, reply, list(queues), hdr, msg))

    gw = srv.gateway
    cfg = gw.remotes["B"]
    gc = FakeGateway(gw, cfg)
    gc.sent = []
    gc.remote_name = "gw-b"
    gc.iom = True
    e = OutAccount(ni=False)
    e.mode = INTEREST_ONLY
    for subj, q in interest:
        rs = RemoteSub(gc, subj, q, 1, None)
        e.sl.insert(rs)
        e.subs[(subj, q)] = rs
        e.qsubs += 1 if q else 0
    gc.outsim[b"$G"] = e
    gw.out["B"] = gc
    gw.outo.append(gc)
    return gc


def test_gateway_step_for_client_messages_only() -> None:
    from rillet.cluster import gateway
    srv = gateway_server()
    acc = srv.global_account
    assert type(acc.gw) is gateway.AccountGateway
    gc = fake_gateway(srv, [("g.*", None)])
    route = FakeLink(ROUTER)
    local = client(srv)
    sub(acc, local, "g.x", b"1")
    acc.sublist.insert(RemoteSub(route, "g.x", None, 1, None))
    pub = client(srv)
    assert deliver_result(acc, pub, acc.match("g.x"), b"g.x", b"rep", -1, b"m")
    assert local.out_msgs == 1 and len(route.sent) == 1
    assert gc.sent == [(b"$G", b"g.x", b"rep", [], -1, b"m")]
    # nobody here, nobody over the routes: the client's inlined path (Account.no_match) sends it to B
    pub.proto_pub(b"g.y", None, b"n")
    assert gc.sent[-1][:2] == (b"$G", b"g.y") and len(gc.sent) == 2
    # B has no interest: not sent
    pub.proto_pub(b"h.y", None, b"n")
    assert len(gc.sent) == 2
    # messages from links never go to gateways: a route's, a leaf's, a gateway's
    deliver_inbound(acc, route, b"g.x", None, (), -1, b"r")
    for kind in (LEAF, GATEWAY):
        deliver_result(acc, FakeLink(kind), acc.match("g.x"), b"g.x", None, -1, b"l")
    assert len(gc.sent) == 2 and local.out_msgs == 4
    # the step is plan data (Plan.gw): never a local plan; a result of local subscribers only still gets the
    # plain plan (its own lists, no Local, no reference back to itself: one such plan per request's reply)
    import gc as pygc
    p = acc.match("g.x").plan
    assert p.gw is acc.gw and not p.local and p.links == [route]
    sub(acc, local, "_INBOX.1", b"2")
    r = acc.match("_INBOX.1")
    assert deliver_result(acc, pub, r, b"_INBOX.1", None, -1, b"m")
    p = r.plan
    assert p.gw is acc.gw and not p.local and p.psubs is r.psubs and p.inbound is None and p.plan is None
    assert pygc.get_referents(p).count(p) == 0
    # an empty result (one object shared by every sublist: it keeps no plan) still takes this account's step
    # (a JetStream delivery to a subject only another cluster wants), whatever another server did with it
    plain = server()
    deliver_result(plain.global_account, client(plain), plain.global_account.match("g.none"), b"g.none", None,
                   -1, b"e")
    ic = InternalClient(srv, acc)
    assert deliver_result(acc, ic, acc.match("g.none"), b"g.none", None, -1, b"e")
    assert gc.sent[-1][1] == b"g.none" and len(gc.sent) == 3
    del gc.sent[-1]
    # no outbound gateway connected: no step
    srv.gateway.outo.clear()
    deliver_result(acc, pub, acc.match("g.x"), b"g.x", None, -1, b"m")
    assert len(gc.sent) == 2 and local.out_msgs == 6


def test_gateway_sending_counts_as_delivered() -> None:
    srv = gateway_server()
    acc = srv.global_account
    gc = fake_gateway(srv, [("svc", None), ("q", "grp")])
    pub = client(srv)
    pub.no_responders = True
    sub(acc, pub, "_INBOX.1", b"9")
    assert acc.deliver(pub, b"svc", b"_INBOX.1", -1, b"?")  # only B listens: no 503 here
    assert b"503" not in pub.out and gc.sent[-1][1:3] == (b"svc", b"_INBOX.1")
    pub.echo = False
    sub(acc, pub, "svc", b"5")  # matched here, taken by nobody here (no echo): B's sending still counts
    assert deliver_result(acc, pub, acc.match("svc"), b"svc", b"_INBOX.1", -1, b"?")
    assert b"503" not in pub.out and len(gc.sent) == 2 and pub.out_msgs == 0
    pub.echo = True
    acc.sublist.remove(pub.subs.pop(b"5"))
    # a queue group served here keeps the message here; one only B serves is named in the RMSG
    member = client(srv)
    sub(acc, member, "q", b"1", "grp")
    deliver_result(acc, pub, acc.match("q"), b"q", None, -1, b"x")
    assert member.out_msgs == 1 and gc.sent[-1][1] == b"svc"  # (not sent: no plain interest, group served)
    acc.sublist.remove(member.subs[b"1"])
    acc.deliver(pub, b"q", None, -1, b"y")
    assert gc.sent[-1][1:4] == (b"q", None, [b"grp"])
    # nobody anywhere: a 503
    pub.out.clear()
    assert not acc.deliver(pub, b"nobody", b"_INBOX.1", -1, b"?")
    assert b"NATS/1.0 503" in pub.out


def test_gateway_replies_go_back_to_their_cluster() -> None:
    """A message from B with a ``_GR_.`` reply: subscribers here see the original reply (tracked); a response
    published on it within 2 s goes back on the ``_GR_.`` subject to B only, not to local subscribers."""
    from rillet.cluster import info as ci
    srv = gateway_server()
    acc = srv.global_account
    gc = fake_gateway(srv, [(">", None)])
    route = FakeLink(ROUTER)
    acc.sublist.insert(RemoteSub(route, "svc", None, 1, None))
    svc, spy = client(srv), client(srv)
    sub(acc, svc, "svc", b"1")
    sub(acc, spy, "_INBOX.>", b"2")
    gr = ci.gateway_reply(ci.gateway_hash("B"), ci.gateway_hash("srvb"), b"_INBOX.r1")
    srv.gateway.inbound_msg(gc, b"$G", b"svc", gr, (), -1, b"req")
    assert bytes(svc.out).startswith(b"MSG svc 1 _INBOX.r1 3\r\n")  # the original reply here
    assert route.sent == [(b"$G", b"svc", gr, [], -1, b"req")]  # the _GR_. one over the routes
    assert acc.gw.replies.lookup(b"_INBOX.r1") == gr and srv.gateway.has_interest(acc, "_INBOX.r1")
    assert not gc.sent  # (from a gateway: never back out)
    svc.proto_pub(b"_INBOX.r1", None, b"resp")  # (the inlined path: the inbox matches spy here)
    assert gc.sent == [(b"$G", gr, None, [], -1, b"resp")] and spy.out_msgs == 0
    acc.deliver(svc, b"_INBOX.r1", None, 0, b"")  # (HPUB: Account.deliver)
    assert len(gc.sent) == 2 and gc.sent[-1][1] == gr and spy.out_msgs == 0
    # a client's publish on this cluster's own _GR_. subject: here and over the routes, not to the gateways
    own = ci.gateway_reply(srv.gateway.hash, srv.gateway.server_hash, b"svc")
    svc.proto_pub(own, None, b"mine")
    assert svc.out_msgs == 2 and route.sent[-1][1] == b"svc" and len(gc.sent) == 2 and acc.gw is not None


def test_routed_gateway_reply_is_tracked() -> None:
    from rillet.cluster import info as ci
    srv = gateway_server()
    acc = srv.global_account
    gc = fake_gateway(srv, [])
    svc = client(srv)
    sub(acc, svc, "svc", b"1")
    gr = ci.gateway_reply(ci.gateway_hash("B"), ci.gateway_hash("srvb"), b"_INBOX.r2")
    srv.cluster.routed_entry(acc, FakeLink(ROUTER), b"svc", gr, (), -1, b"req")
    assert bytes(svc.out).startswith(b"MSG svc 1 _INBOX.r2 3\r\n")
    svc.proto_pub(b"_INBOX.r2", None, b"resp")  # (no interest announced by B: sent on the _GR_. subject)
    assert gc.sent == [(b"$G", gr, None, [], -1, b"resp")]


# ==== a result holding only links' plain interest (a reply crossing a route): the shared LINKS plan ==============

def test_reply_across_a_route_makes_no_plan_and_sends_as_a_full_plan(monkeypatch) -> None:
    """A result whose only interest is a few links' plain subscriptions (a PubAck or a response to a client on
    another server: a new subject each time) gets the shared ``LINKS`` plan, no plan of its own; the links get
    exactly what a full plan of the same result sends (one message per link, the same frames and counts, the
    same rules for messages from a gateway and for JetStream deliveries); a traced message is observed as
    before; a message from a route is never forwarded again."""
    import rillet.server.delivery as d
    import rillet.server.msgtrace as mt
    from rillet.subjects.sublist import SublistResult
    srv = server(cluster=True)
    acc = srv.global_account
    route, leaf = FakeLink(ROUTER), FakeLink(LEAF)
    acc.sublist.insert(RemoteSub(route, "_INBOX.x.*", None, 1, None))
    acc.sublist.insert(RemoteSub(route, "_INBOX.>", None, 1, None))  # (same route: still one message)
    acc.sublist.insert(RemoteSub(leaf, "_INBOX.>", None, 1, None))
    pub = client(srv)
    pub.echo = False  # (no-echo is about this server's subscribers: links get it all the same)
    pub.no_responders = True
    gwc = FakeLink(GATEWAY)
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    n = 0

    def both(c, reply, h, msg, route_subj=None, rreply=None):
        nonlocal n
        n += 1
        subject = b"_INBOX.x.%d" % n
        r = acc.match(subject.decode())
        assert r.plan is (None if n <= 2 else d.LINKS)  # (from the third on they share the second's result: Sublist._tails)
        got = deliver_result(acc, c, r, subject, reply, h, msg, route_subj, rreply)
        assert r.plan is d.LINKS and acc.match(subject.decode()).plan is d.LINKS  # kept: shared, no plan made
        fast = (route.sent[:], leaf.sent[:], route.closed, leaf.closed)
        route.sent.clear()
        leaf.sent.clear()
        rf = SublistResult(r.psubs, r.qsubs)
        rf.plan = full = Plan(rf)
        assert full.links == [route, leaf] and full.targets is not None
        assert deliver_result(acc, c, rf, subject, reply, h, msg, route_subj, rreply) == got
        assert (route.sent, leaf.sent) == fast[:2], (reply, h, route_subj, rreply)
        route.sent.clear()
        leaf.sent.clear()
        return got, fast[0], fast[1]

    got, rs, ls = both(pub, None, -1, b"ack")
    assert got and rs == [(b"$G", b"_INBOX.x.1", None, [], -1, b"ack")] and len(ls) == 1
    got, rs, ls = both(pub, b"_INBOX.y.1", len(hdr), hdr + b"p")
    assert got and rs[0][2:] == (b"_INBOX.y.1", [], len(hdr), hdr + b"p") and len(ls) == 1
    assert not pub.out  # links only: never a 503 from here
    # a JetStream delivery shown with its stream subject: the links get the matched subject, '@' in the reply
    got, rs, _ = both(pub, b"$JS.ACK.s.c.1.2.3.4.5", -1, b"m", b"_INBOX.x.j")
    assert rs[0][1:3] == (b"_INBOX.x.j", b"$JS.ACK.s.c.1.2.3.4.5@_INBOX.x.%d" % n)
    # a routed gateway reply: links get theirs
    _, rs, _ = both(pub, b"_INBOX.y.2", -1, b"m", None, b"_GR_.abc.def._INBOX.y.2")
    assert rs[0][2] == b"_GR_.abc.def._INBOX.y.2"
    # from a gateway: a spoke leaf is skipped, a hub's leaf gets it
    leaf.spoke = True
    _, rs, ls = both(gwc, None, -1, b"g")
    assert len(rs) == 1 and not ls
    leaf.spoke = False
    # a closed link is skipped; with all closed nobody got it (and still no 503)
    route.closed = True
    got, rs, ls = both(pub, None, -1, b"c")
    assert got and not rs and len(ls) == 1
    leaf.closed = True
    got, rs, ls = both(pub, b"_INBOX.y.3", -1, b"c")
    assert not got and not rs and not ls and not pub.out
    route.closed = leaf.closed = False
    # traced: the observer sees each link, as with a full plan
    rec = Recorder()
    monkeypatch.setattr(mt, "CURRENT", rec)
    th = b"NATS/1.0\r\nNats-Trace-Dest: d\r\n\r\n"
    r = acc.match("_INBOX.x.t")
    assert deliver_result(acc, pub, r, b"_INBOX.x.t", None, len(th), th + b"x")
    assert r.plan is d.LINKS and rec.events == [("remote", "peer"), ("remote", "peer")]
    assert len(route.sent) == 1 and len(leaf.sent) == 1
    monkeypatch.setattr(mt, "CURRENT", None)
    route.sent.clear()
    leaf.sent.clear()
    # from a route: nobody here, never forwarded again (to the same result, kept with LINKS, or a new one)
    other = FakeLink(ROUTER)
    deliver_inbound(acc, other, b"_INBOX.x.t", None, (), -1, b"r")
    deliver_inbound(acc, other, b"_INBOX.x.new", None, (b"g",), -1, b"r")
    assert not route.sent and not leaf.sent
    # code that reads a plan's links (the leaf paths) gets a full plan in its place
    p = d.plan_of(r, acc)
    assert p is not d.LINKS and p.links == [route, leaf] and r.plan is p


def test_links_plan_only_for_links_plain_interest() -> None:
    """Anything else in the result (a subscriber here, a queue group, too many links, a gateway step) makes
    the full plan as before."""
    import rillet.server.delivery as d
    srv = server(cluster=True)
    acc = srv.global_account
    links = [FakeLink(ROUTER) for _ in range(d.LINKS_MAX + 1)]
    for i, lk in enumerate(links):
        acc.sublist.insert(RemoteSub(lk, "many.%d" % i if i < d.LINKS_MAX else "many.>", None, 1, None))
        acc.sublist.insert(RemoteSub(lk, "many.>", None, 1, None))
    pub = client(srv)
    r = acc.match("many.0")
    assert deliver_result(acc, pub, r, b"many.0", None, -1, b"m")
    assert r.plan is not d.LINKS and len(r.plan.links) == len(links)
    assert all(len(lk.sent) == 1 for lk in links)
    a = client(srv)
    sub(acc, a, "mixed.*", b"1")
    acc.sublist.insert(RemoteSub(links[0], "mixed.*", None, 1, None))
    r = acc.match("mixed.1")
    assert deliver_result(acc, pub, r, b"mixed.1", None, -1, b"m")
    assert r.plan is not d.LINKS and a.out_msgs == 1 and len(links[0].sent) == 2
    acc.sublist.insert(RemoteSub(links[1], "q.*", "g", 1, None))
    r = acc.match("q.1")
    assert deliver_result(acc, pub, r, b"q.1", None, -1, b"m")
    assert r.plan is not d.LINKS and links[1].sent[-1][3] == [b"g"]
    # a local subscriber after the remote one in the result: still the full plan
    acc.sublist.insert(RemoteSub(links[2], "late.*", None, 1, None))
    b = client(srv)
    sub(acc, b, "late.x", b"1")
    r = acc.match("late.x")
    assert type(r.psubs[0]) is RemoteSub and type(r.psubs[1]) is not RemoteSub
    assert deliver_result(acc, pub, r, b"late.x", None, -1, b"m")
    assert r.plan is not d.LINKS and b.out_msgs == 1 and links[2].sent[-1][1] == b"late.x"
    # an account with a gateway step: the full plan (the step is evaluated per message)
    gsrv = gateway_server()
    gacc = gsrv.global_account
    assert gacc.gw is not None
    glink = FakeLink(ROUTER)
    gacc.sublist.insert(RemoteSub(glink, "_INBOX.>", None, 1, None))
    r = gacc.match("_INBOX.g.1")
    assert deliver_result(gacc, client(gsrv), r, b"_INBOX.g.1", None, -1, b"m")
    assert r.plan is not d.LINKS and r.plan.gw is gacc.gw and len(glink.sent) == 1


@pytest.mark.parametrize("many", [False, True])
def test_no_responders_finds_the_requesters_reply_subscription(many: bool) -> None:
    # among a client's few subscriptions the reply's is looked for directly (no sublist match, nothing put in
    # its cache); with many, through the sublist: the same subscription either way, never a queue one
    from rillet.server.delivery import REPLY_SUBS_SCAN, no_responders
    srv = server()
    acc = srv.global_account
    pub = client(srv)
    pub.no_responders = True
    other = client(srv)
    sub(acc, other, "_INBOX.*", b"1")  # (someone else's: never the one answered)
    sub(acc, pub, "_INBOX.*", b"7", queue="q")  # (a queue subscription is not a reply subscription)
    if many:
        for i in range(REPLY_SUBS_SCAN):
            sub(acc, pub, f"filler.{i}", b"f%d" % i)
    sub(acc, pub, "_INBOX.*", b"9")
    cached = acc.sublist.cache_count()
    no_responders(acc, pub, b"req", b"_INBOX.abc")
    assert bytes(pub.out) == b"HMSG _INBOX.abc 9 35 35\r\nNATS/1.0 503\r\nNats-Subject: req\r\n\r\n\r\n"
    assert not other.out
    if not many:
        assert acc.sublist.cache_count() == cached
    pub.out.clear()
    for reply in (b"_INBOX.abc.def", b"_INBOX..x", b"other"):  # matched by no subscription of the requester
        no_responders(acc, pub, b"req", reply)
    assert not pub.out


def test_no_responders_reply_forms_match_as_token_by_token() -> None:
    # _reply_sub tests a reply subject by the form of each subscription's subject (a prefix for "p.*" and
    # "p.>"): the subscription it finds is the first, in the client's order, that the token by token match
    # (the sublist's rule) finds, for every reply, empty tokens and wildcard characters included
    import random

    from rillet.server.delivery import REPLY_SUBS_SCAN, _reply_sub
    from rillet.subjects.validate import tokens_match_literal
    rnd = random.Random(2020)
    words = ["a", "b", "ab", "_I", "*", ">", "a*", "b>"]
    srv = server()
    acc = srv.global_account
    for trial in range(300):
        pub = client(srv)
        subjects = []
        for i in range(rnd.randrange(1, REPLY_SUBS_SCAN + 1)):
            toks = [rnd.choice(words[:4]) for _ in range(rnd.randrange(1, 4))]
            for k in range(len(toks)):
                if rnd.random() < 0.3:
                    toks[k] = "*"
            if rnd.random() < 0.4:
                toks[-1] = ">"
            subjects.append(".".join(toks))
            sub(acc, pub, subjects[-1], b"%d" % i, queue="q" if rnd.random() < 0.1 else None)
        for _ in range(40):
            reply = ".".join(rnd.choice(words + [""]) for _ in range(rnd.randrange(1, 5)))
            toks = reply.split(".")
            want = None
            if "" not in toks:
                want = next((s for s in pub.subs.values()
                             if not s.queue and tokens_match_literal(toks, s.subject.split("."))), None)
            assert _reply_sub(acc, pub, reply.encode()) is want, (subjects, reply)
