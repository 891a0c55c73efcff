"""The delivery executor in both lanes (rillet.server.delivery.reference_deliver_result and its compiled twin,
rillet._speedups._cdeliver): the same messages to the same subscribers, with the same random draws, give
the same bytes in every output buffer, the same counters, flush list, callbacks, auto-unsubscribes, 503s
and return values; and the client's PUB handler and its twin (rillet._speedups._cdeliver.proto_pub) --
subscribers without headers, no echo, permissions with reply tracking, max messages,
internal callbacks, queue groups here and over a route, links only, a wildcard, headers and replies."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lanes import COMPILED_ERROR
from rillet.app.compose import build_server
from rillet.config.options import Options, Permission, Permissions, ResponsePermission
from rillet.server import delivery
from rillet.server.auth import PermChecker
from rillet.server.client import Client, InternalClient, Subscription, reference_proto_pub
from rillet.server.delivery import ROUTER, RemoteSub

pytestmark = pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")


class FakeLink:
    def __init__(self) -> None:
        self.kind = ROUTER
        self.closed = False
        self.spoke = False
        self.remote_cluster = ""
        self.remote_name = "peer"
        self.cid = 99
        self.sent: list[tuple] = []

    def send_msg(self, account, subject, reply, queues, hdr, msg) -> None:
        self.sent.append((account, subject, reply, list(queues), hdr, msg))


SUBJECTS = [b"a.b", b"a.c", b"q.x", b"r.x", b"links.x", b"none.x", b"deny.x"]


def world(executor):
    """A server with a mix of subscribers; returns (account, publishers, everything to compare)."""
    srv = build_server(Options())  # (links: a fake one's interest, inserted as a route's would be)
    acc = srv.global_account
    clients = []

    def client(headers=True, perms=None):
        c = Client(srv)
        c.headers = headers
        if perms is not None:
            c.perms = PermChecker(perms)
        clients.append(c)
        return c

    def sub(c, subject, sid, queue=None, mx=0):
        s = Subscription(c, subject, queue, sid)
        s.max = mx
        c.subs[sid] = s
        acc.sublist.insert(s)
        return s

    pub = client()
    pub.no_responders = True
    nohdr = client(headers=False)
    denied = client(perms=Permissions(subscribe=Permission(deny=["deny.>"])))
    tracked = client(perms=Permissions(publish=Permission(allow=["x"]), response=ResponsePermission(5, 0)))
    plain = client()
    sub(pub, "a.*", b"1")
    sub(pub, "_INBOX.r1", b"inbox")  # (where no_responders' 503s arrive)
    sub(nohdr, "a.b", b"2")
    sub(denied, "deny.x", b"3")
    sub(denied, "a.>", b"4")
    sub(tracked, "a.b", b"5")
    sub(plain, "a.b", b"6", mx=7)
    for i, c in enumerate((pub, nohdr, denied, plain)):
        sub(c, "q.x", b"q%d" % i, queue="g", mx=20 if i == 3 else 0)
    sub(denied, "q.x", b"qd", queue="h")
    sub(plain, "q.x", b"qp", queue="h")
    got: list[tuple] = []

    def cb(s, c, subject, reply, hdr, msg):
        got.append((subject, reply, hdr, msg))
        return False if msg.endswith(b"!") else None
    ic = InternalClient(srv, acc)
    ic.subscribe("a.c", cb)
    ic.subscribe("q.x", cb, queue="i")
    link = FakeLink()
    acc.sublist.insert(RemoteSub(link, "links.x", None, 1, None))
    acc.sublist.insert(RemoteSub(link, "r.x", "g", 3, None))
    sub(plain, "r.x", b"r1", queue="g")
    sub(nohdr, "r.x", b"r2")
    return srv, acc, pub, clients, got, link


def run(executor, seed, msgs):
    srv, acc, pub, clients, got, link = world(executor)
    answers = []
    random.seed(seed)
    for subject, reply, hdr, body, echo in msgs:
        pub.echo = echo
        msg = (b"NATS/1.0\r\nK: v\r\n\r\n"[:hdr] if hdr > 0 else b"") + body
        r = acc._match(subject.decode())
        if r.plan is None and (r.psubs or r.qsubs):
            delivery.reference_deliver_result(acc, pub, r, subject, reply, hdr, msg)  # (makes the plan)
            answers.append("plan")
        if r.psubs or r.qsubs:
            answers.append(executor(acc, pub, r, subject, reply, hdr, msg))
    state = [(bytes(c.out), c.out_msgs, c.out_bytes, c.flush_pending, sorted(c.subs),
              [(s.sid, s.nm) for s in c.subs.values()],
              c.perms.replies and sorted(c.perms.replies) if c.perms is not None else None) for c in clients]
    return answers, state, got, link.sent, [clients.index(c) for c in srv.pending_flush]


MSG = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from([None, b"", b"_INBOX.r1"]),
                st.sampled_from([-1, 0, 18]), st.sampled_from([b"", b"hello", b"x" * 300, b"bye!"]), st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(MSG, max_size=40), seed=st.integers(0, 1000))
def test_both_executors_deliver_the_same(msgs, seed):
    from rillet._speedups._cdeliver import deliver_result as compiled
    assert run(delivery.reference_deliver_result, seed, msgs) == run(compiled, seed, msgs)


def run_pub(handler, seed, msgs):
    """The same through a client's PUB handler (rillet.server.client.reference_proto_pub or its twin): the
    match, the plans made for new results (``LINKS`` or a full one), the counting, and nobody listening (503s
    on the publisher's own output); ``slow`` PUBs take the
    checks (the pedantic subject check of an invalid subject answers an -ERR on the publisher's output)."""
    srv, acc, pub, clients, got, link = world(None)
    answers = []
    random.seed(seed)
    for subject, reply, hdr, body, echo, slow in msgs:
        pub.echo = echo
        pub.slow_path = pub.pedantic = slow
        pub.verbose = False
        answers.append(handler(pub, subject, reply, body + b"." * (hdr > 0)))
    sl = acc.sublist
    state = [(bytes(c.out), c.out_msgs, c.out_bytes, c.in_msgs, c.in_bytes, c.flush_pending,
              [(s.sid, s.nm) for s in c.subs.values()]) for c in clients]
    plans = sorted((k, r.plan is delivery.LINKS, r.plan is not None and r.plan.local) for k, r in sl._cache.items())
    return answers, state, got, link.sent, [clients.index(c) for c in srv.pending_flush], sl._hits, sl._misses, plans


PUB = st.tuples(st.sampled_from(SUBJECTS + [b"a..b", b"_INBOX.x"]), st.sampled_from([None, b"", b"_INBOX.r1"]),
                st.sampled_from([-1, 18]), st.sampled_from([b"", b"hello", b"bye!"]), st.booleans(), st.booleans())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(PUB, max_size=40), seed=st.integers(0, 1000))
def test_both_pub_handlers_do_the_same(msgs, seed):
    from rillet._speedups._cdeliver import proto_pub as compiled
    from rillet.server.client import reference_proto_pub
    assert run_pub(reference_proto_pub, seed, msgs) == run_pub(compiled, seed, msgs)


def test_the_compiled_executor_runs_in_the_compiled_lane():
    from rillet import lane
    if lane.COMPILED:
        from rillet._speedups._cdeliver import deliver_result as compiled
        from rillet.server.accounts import Account
        from rillet._speedups._cdeliver import proto_pub
        assert delivery.deliver_result is compiled and Account.deliver_result is compiled
        assert Client.proto_pub is proto_pub
    else:
        assert delivery.deliver_result is delivery.reference_deliver_result
        assert Client.proto_pub is reference_proto_pub


# ---- routes: RMSG out (RouteConn.send_msg) and in (RouteConn.proto_rmsg, deliver_inbound) ---------------------------

def route_world():
    from rillet.cluster.route import RouteConn
    o = Options()
    o.cluster.port = 1  # (never listened on)
    o.cluster.name = "c"
    srv = build_server(o)
    acc = srv.global_account
    plain, nohdr = Client(srv), Client(srv)
    plain.headers = True
    for c, subject, sid, queue in ((plain, "r.*", b"1", None), (nohdr, "r.x", b"2", None),
                                   (plain, "r.x", b"3", "g"), (nohdr, "r.x", b"4", "g"), (plain, "r.x", b"5", "h")):
        s = Subscription(c, subject, queue, sid)
        c.subs[sid] = s
        acc.sublist.insert(s)
    rcs = [RouteConn(srv.cluster), RouteConn(srv.cluster, account="$G")]
    rcs[0].headers = True
    return srv, acc, [plain, nohdr], rcs


OUT = st.tuples(st.sampled_from([b"$G", b"ACC"]), st.sampled_from([b"r.x", b"r.y.z"]),
                st.sampled_from([None, b"", b"_INBOX.r"]), st.sampled_from([[], [b"g"], [b"g", b"h"], (b"q",)]),
                st.sampled_from([-1, 0, 5]), st.sampled_from([b"", b"hello", b"x" * 200]), st.integers(0, 1))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=st.lists(OUT, max_size=30))
def test_both_route_senders_write_the_same(frames):
    from rillet._speedups._cdeliver import route_send_msg
    from rillet.cluster.route import reference_send_msg

    def run(send):
        srv, acc, clients, rcs = route_world()
        for account, subject, reply, queues, hdr, body, i in frames:
            send(rcs[i], account, subject, reply, queues, hdr, b"NATS/1.0\r\n"[:max(hdr, 0)] + body)
        return [(bytes(rc.out), rc.out_msgs, rc.out_bytes, rc.flush_pending) for rc in rcs], \
            [srv.pending_flush.index(rc) if rc in srv.pending_flush else -1 for rc in rcs]
    assert run(reference_send_msg) == run(route_send_msg)


IN = st.tuples(st.sampled_from([b"$G", b"NOPE"]), st.sampled_from([b"r.x", b"r.y", b"s.x"]),
               st.sampled_from([None, b"_INBOX.r", b"$JS.ACK.s.c.1.2.3.4.5@r.x"]),
               st.sampled_from([(), (b"g",), (b"g", b"h"), (b"zz",)]), st.sampled_from([b"", b"hi"]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(IN, max_size=30), seed=st.integers(0, 1000))
def test_both_route_receivers_deliver_the_same(msgs, seed):
    from rillet._speedups._cdeliver import deliver_inbound, route_proto_rmsg
    from rillet.cluster.route import reference_proto_rmsg

    def run(rmsg, inbound):
        saved = delivery.deliver_inbound
        import rillet.server.accounts as accounts
        delivery.deliver_inbound = accounts.deliver_inbound = inbound
        try:
            srv, acc, clients, rcs = route_world()
            random.seed(seed)
            for account, subject, reply, queues, body in msgs:
                rmsg(rcs[0], account, subject, reply, queues, body)
        finally:
            delivery.deliver_inbound = accounts.deliver_inbound = saved
        return [(bytes(c.out), c.out_msgs, c.out_bytes, [(s.sid, s.nm) for s in c.subs.values()]) for c in clients], \
            rcs[0].in_msgs, rcs[0].in_bytes, acc.sublist._hits, acc.sublist._misses
    assert run(reference_proto_rmsg, delivery.reference_deliver_inbound) == run(route_proto_rmsg, deliver_inbound)


def test_the_twins_see_a_replaced_method(monkeypatch):
    """The compiled PUB and forward remember what Account.deliver_result and RouteConn.send_msg are while the
    class is unchanged (its attribute-cache version tag): a replacement is seen at the next message."""
    from rillet._speedups._cdeliver import deliver_result as compiled
    from rillet._speedups._cdeliver import proto_pub
    from rillet.cluster.route import RouteConn
    from rillet.server.accounts import Account
    monkeypatch.setattr(Account, "deliver_result", compiled)
    o = Options()
    o.cluster.port = 1
    o.cluster.name = "c"
    srv = build_server(o)
    acc = srv.global_account
    pub, c = Client(srv), Client(srv)
    pub.slow_path = False
    s = Subscription(c, "x", None, b"1")
    c.subs[b"1"] = s
    acc.sublist.insert(s)
    rc = RouteConn(srv.cluster)
    acc.sublist.insert(RemoteSub(rc, "x", None, 1, None))
    for _ in range(3):
        proto_pub(pub, b"x", None, b"hi")
    assert c.out_msgs == 3 and rc.out_msgs == 3
    seen = []
    monkeypatch.setattr(RouteConn, "send_msg", lambda self, *a: seen.append(("send", a[1])))
    proto_pub(pub, b"x", None, b"hi")
    assert seen == [("send", b"x")] and rc.out_msgs == 3 and c.out_msgs == 4
    monkeypatch.setattr(Account, "deliver_result", lambda *a: seen.append("executor"))
    proto_pub(pub, b"x", None, b"hi")
    assert seen[-1] == "executor" and c.out_msgs == 4


# subscription subjects for the no responders twins: the usual reply forms, a wildcard before the end, a literal,
# text that is not ASCII, and a subject made from bytes that are not UTF-8 (surrogateescape, as the parser makes)
REPLY_SUBJECTS = ["_INBOX.*", "_INBOX.>", "a.*.c", "a.b", "é.*", "*", ">", "a.>",
                  b"\xff\xfe.*".decode("utf-8", "surrogateescape"), "_I.*"]
REPLIES = [b"_INBOX.x", b"_INBOX.x.y", b"a.b", b"a.q.c", b"a.b.c", b"\xc3\xa9.1", b"\xc3.1", b"\xff\xfe.z",
           b"\xff\xfe.z.w", b"x", b"", b".x", b"x.", b"a..b", b"_I.\xe9", b"_INBOX.\xc3\xa9"]


def run_noresp(fn, subs, calls, many):
    """The 503 of ``fn`` for each (subject, reply) of ``calls`` to a requester with the subscriptions ``subs``
    ((subject, queue, internal)); more than REPLY_SUBS_SCAN of them with ``many`` (the sublist's way)."""
    srv = build_server(Options())
    acc = srv.global_account
    pub, other = Client(srv), Client(srv)
    pub.no_responders = True
    got: list[tuple] = []
    so = Subscription(other, "_INBOX.*", None, b"o")  # (someone else's: never answered)
    other.subs[b"o"] = so
    acc.sublist.insert(so)
    rows = list(subs) + [("filler.%d" % i, False, False) for i in range(delivery.REPLY_SUBS_SCAN * many)]
    for i, (subject, queue, internal) in enumerate(rows):
        s = Subscription(pub, subject, "q" if queue else None, b"%d" % i)
        if internal:
            s.icb = lambda s, c, subject, reply, hdr, msg: got.append((s.sid, subject, reply, hdr, msg))
        pub.subs[s.sid] = s
        acc.sublist.insert(s)
    for subject, reply in calls:
        fn(acc, pub, subject, reply)
    return bytes(pub.out), pub.noresp_sent, pub.flush_pending, srv.pending_flush.count(pub), got, bytes(other.out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(subs=st.lists(st.tuples(st.sampled_from(REPLY_SUBJECTS), st.booleans(), st.booleans()), max_size=8),
       calls=st.lists(st.tuples(st.sampled_from([b"req", b"svc.x", b"\xe9"]), st.sampled_from(REPLIES)),
                      max_size=12), many=st.booleans())
def test_both_no_responders_answer_the_same(subs, calls, many):
    from rillet._speedups._cdeliver import no_responders as compiled
    from rillet._speedups._cdeliver import reply_sub
    assert run_noresp(delivery.reference_no_responders, subs, calls, many) == run_noresp(compiled, subs, calls, many)
    srv = build_server(Options())
    acc = srv.global_account
    pub = Client(srv)
    for i, (subject, queue, _) in enumerate(subs):
        s = Subscription(pub, subject, "q" if queue else None, b"%d" % i)
        pub.subs[s.sid] = s
        acc.sublist.insert(s)
    for _, reply in calls:
        assert reply_sub(acc, pub, reply) is delivery._reply_sub(acc, pub, reply), (subs, reply)


def test_the_compiled_no_responders_runs_in_the_compiled_lane():
    from rillet import lane
    from rillet.server import accounts
    if lane.COMPILED:
        from rillet._speedups._cdeliver import no_responders as compiled
        assert delivery.no_responders is compiled and accounts._no_resp is compiled
    else:
        assert delivery.no_responders is delivery.reference_no_responders


# ---- Account.deliver (rillet.server.accounts.reference_deliver) and its twin (_cdeliver.account_deliver) ------------
# with reply subjects that share their prefix (the sublist's kept results per prefix, Sublist._tails, read by the
# twin's match in C), literal last tokens, subscriptions coming and going between messages, JetStream's ``deliver``
# subject, nobody listening (503s), an account with a mapping (the reference's), subjects that are not UTF-8

ACC_SUBS = ["_INBOX.p.*", "_INBOX.p.7", "_INBOX.*.*", "_INBOX.p.7.x", "a.>", "\xe9.*",
            b"\xff.*".decode("utf-8", "surrogateescape"), "m.*"] + ["_INBOX.p.*", "_INBOX.p.7"] * 3
_ACC_PUB = st.tuples(st.just("pub"), st.tuples(st.sampled_from([b"_INBOX.p", b"_INBOX.q", b"a", b"\xc3\xa9", b"\xff", b"m"]
                                                         + [b"_INBOX.p"] * 6),
                                         st.sampled_from([b"1", b"2", b"7", b"", b"x", b"7", b"3"])).map(b".".join),
                     st.sampled_from([None, b"", b"_INBOX.r"]), st.sampled_from([-1, 0, 18]),
                     st.sampled_from([None, b"shown.s"]), st.integers(0, 2))
ACC_OPS = st.lists(st.one_of(  # (mostly messages: a few subscriptions, then several messages under one prefix)
    st.tuples(st.just("sub"), st.sampled_from(ACC_SUBS), st.booleans(), st.integers(0, 2)),
    st.tuples(st.just("unsub"), st.integers(0, 20)),
    _ACC_PUB, _ACC_PUB, _ACC_PUB, _ACC_PUB,
    st.tuples(st.just("map"), st.booleans()),
), max_size=40)


def run_acc_deliver(fn, ops, seed):
    from rillet.subjects.mapping import parse_mappings
    srv = build_server(Options())
    acc = srv.global_account
    clients = [Client(srv), Client(srv)]
    clients[0].headers = True
    clients[0].no_responders = True
    resp = Subscription(clients[0], "_INBOX.r", None, b"r")  # (where 503s arrive)
    clients[0].subs[b"r"] = resp
    acc.sublist.insert(resp)
    got: list[tuple] = []
    ic = InternalClient(srv, acc)
    pubs = clients + [ic]
    live: list = []
    answers = []
    random.seed(seed)
    for op in ops:
        if op[0] == "sub":
            _, subject, queue, who = op
            if who == 2:
                s = ic.subscribe(subject, lambda s, c, subj, reply, hdr, msg: got.append((subj, reply, hdr, msg)),
                                 queue="g" if queue else None)
            else:
                c = clients[who]
                sid = b"%d" % len(c.subs)
                s = Subscription(c, subject, "g" if queue else None, sid)
                c.subs[sid] = s
                acc.sublist.insert(s)
            live.append(s)
        elif op[0] == "unsub" and live:
            acc.sublist.remove(live.pop(op[1] % len(live)))
        elif op[0] == "map":
            acc.mappings = parse_mappings({"m.*": "a.$1"}) if op[1] else []
        elif op[0] == "pub":
            _, subject, reply, hdr, deliver, who = op
            msg = b"NATS/1.0\r\nK: v\r\n\r\n"[:hdr] + b"body" if hdr > 0 else b"body"
            answers.append(fn(acc, pubs[who], subject, reply, hdr, msg, deliver))
    sl = acc.sublist
    state = [(bytes(c.out), c.out_msgs, c.out_bytes, c.flush_pending, c.noresp_sent) for c in clients]
    return (answers, state, got, [pubs.index(c) for c in srv.pending_flush if c in pubs], sl._hits, sl._misses,
            sorted(sl._cache), sorted(sl._tails))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ACC_OPS, seed=st.integers(0, 1000))
@example(ops=[("sub", "_INBOX.p.*", False, 0), ("sub", "_INBOX.p.7", False, 1), ("pub", b"_INBOX.p.1", None, -1, None, 0),
              ("pub", b"_INBOX.p.7", None, -1, None, 2), ("pub", b"_INBOX.p.2", b"", 18, b"shown.s", 1)], seed=0)
def test_both_account_delivers_do_the_same(ops, seed):
    from rillet._speedups._cdeliver import account_deliver
    from rillet.server.accounts import reference_deliver
    assert run_acc_deliver(reference_deliver, ops, seed) == run_acc_deliver(account_deliver, ops, seed)


def test_the_compiled_account_deliver_runs_in_the_compiled_lane_and_shares_reply_results():
    from rillet import lane
    from rillet.server.accounts import Account, reference_deliver
    if lane.COMPILED:
        from rillet._speedups._cdeliver import account_deliver
        assert Account.deliver is account_deliver
    else:
        assert Account.deliver is reference_deliver
    srv = build_server(Options())
    acc = srv.global_account
    c = Client(srv)
    s = Subscription(c, "_INBOX.p.*", None, b"1")
    c.subs[b"1"] = s
    acc.sublist.insert(s)
    ic = InternalClient(srv, acc)
    for i in range(5):
        acc.deliver(ic, b"_INBOX.p.%d" % i, None, -1, b"x")  # (InternalClient.publish without its flush)
    assert c.out_msgs == 5 and bytes(c.out).endswith(b"MSG _INBOX.p.4 1 1\r\nx\r\n")
    r = acc.match("_INBOX.p.9")
    assert r.plan is not None and acc.sublist.cache_count() == 2  # (one result and one plan for the last four)
