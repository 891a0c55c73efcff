"""Security: users are refused exactly what their permissions forbid, and accounts never see each other.

Every test here runs against the Go nats-server as well (``RILLET_TEST_TARGET=nats-server``), which is how
the expectations were checked: nats-server v2.15.1 passes this file unchanged.

* Permissions: for each permission form (publish/subscribe allow, deny, allow+deny, ``*``/``>`` wildcards,
  queue-group entries ``"foo.> q"``, the plain list shorthand, ``allow_responses`` with ``max`` and
  ``expires``), each operation is either refused with nats-server's exact ``-ERR`` text or goes through
  (a refused publish reaches nobody, an accepted one reaches a watcher; a refused subscription receives
  nothing, an accepted one receives).
* Accounts: a tenant never receives another account's messages over core subjects, ``>``, ``_INBOX``
  replies, ``$SYS`` events and requests, service import ``_R_`` replies, nor sees or touches another
  account's JetStream streams.
"""
from __future__ import annotations

import asyncio
import json

import nats
import pytest

from tests.helpers import RawClient, parse_stream, serve_config

PUB_ERR = "-ERR 'Permissions Violation for Publish to \"{}\"'"
SUB_ERR = "-ERR 'Permissions Violation for Subscription to \"{}\"'"
QSUB_ERR = "-ERR 'Permissions Violation for Subscription to \"{}\" using queue \"{}\"'"

PERMS_CONF = """
listen: 127.0.0.1:-1
authorization {
  users [
    {user: admin, password: pw}
    {user: pub_allow, password: pw, permissions: {publish: {allow: ["foo.*", "bar.>"]}}}
    {user: pub_deny, password: pw, permissions: {publish: {deny: ["foo.*", "bar.>"]}}}
    {user: pub_both, password: pw, permissions: {publish: {allow: ["foo.>"], deny: ["foo.secret.*"]}}}
    {user: pub_list, password: pw, permissions: {publish: ["foo", "baz.*"]}}
    {user: sub_allow, password: pw, permissions: {subscribe: {allow: ["foo.*", "bar.>"]}}}
    {user: sub_deny, password: pw, permissions: {subscribe: {deny: ["foo.*", "bar.>"]}}}
    {user: sub_both, password: pw, permissions: {subscribe: {allow: ["foo.>"], deny: ["foo.secret.>"]}}}
    {user: sub_list, password: pw, permissions: {subscribe: ["foo", "baz.*"]}}
    {user: sub_queue, password: pw, permissions: {subscribe: {allow: ["foo.> qa", "bar"]}}}
    {user: sub_queue_deny, password: pw, permissions: {subscribe: {deny: ["foo.> qd", "baz"]}}}
    {user: responder, password: pw, permissions: {allow_responses: {max: 2, expires: "700ms"}}}
  ]
}
"""

# (user, [(op, subject, queue, allowed)]); op "pub" or "sub"
CASES = [
    ("pub_allow", [("pub", "foo.a", None, True), ("pub", "bar.a.b", None, True), ("pub", "foo.a.b", None, False),
                   ("pub", "foo", None, False), ("pub", "baz", None, False), ("pub", "bar", None, False),
                   ("sub", "anything.>", None, True)]),
    ("pub_deny", [("pub", "foo.a", None, False), ("pub", "bar.x.y", None, False), ("pub", "foo.a.b", None, True),
                  ("pub", "bar", None, True), ("pub", "baz", None, True)]),
    ("pub_both", [("pub", "foo.a", None, True), ("pub", "foo.secret", None, True),
                  ("pub", "foo.secret.x", None, False), ("pub", "foo.secret.x.y", None, True),
                  ("pub", "bar", None, False)]),
    ("pub_list", [("pub", "foo", None, True), ("pub", "baz.q", None, True), ("pub", "foo.x", None, False),
                  ("pub", "baz", None, False)]),
    ("sub_allow", [("sub", "foo.a", None, True), ("sub", "foo.*", None, True), ("sub", "bar.a.b", None, True),
                   ("sub", "bar.>", None, True), ("sub", "foo.>", None, True), ("sub", "foo", None, False),
                   ("sub", ">", None, False), ("sub", "*.a", None, False), ("sub", "foo.a", "q1", True),
                   ("pub", "any.thing", None, True)]),
    ("sub_deny", [("sub", "foo.a", None, False), ("sub", "foo.*", None, False), ("sub", "bar.a", None, False),
                  ("sub", "foo.>", None, False), ("sub", "bar.*", None, False), ("sub", ">", None, True),
                  ("sub", "bar.a.b", "q", False), ("sub", "baz", None, True), ("sub", "foo.a.b", None, True),
                  ("sub", "foo", None, True)]),
    ("sub_both", [("sub", "foo.a", None, True), ("sub", "foo.secret.x", None, False),
                  ("sub", "foo.secret.>", None, False), ("sub", "foo.secret", None, True),
                  ("sub", "bar", None, False)]),
    ("sub_list", [("sub", "foo", None, True), ("sub", "baz.x", None, True), ("sub", "baz", None, False),
                  ("sub", "foo.x", None, False)]),
    ("sub_queue", [("sub", "foo.x", "qa", True), ("sub", "foo.x", "qb", False), ("sub", "foo.x", None, False),
                   ("sub", "bar", None, True), ("sub", "bar", "anyq", True), ("sub", "baz", None, False)]),
    ("sub_queue_deny", [("sub", "foo.x", "qd", False), ("sub", "foo.x", "qe", True), ("sub", "foo.x", None, True),
                        ("sub", "baz", None, False), ("sub", "baz", "q", False), ("sub", "bar", None, True)]),
]


def _literal(subject: str) -> str:
    return ".".join("w" if t in ("*", ">") else t for t in subject.split("."))


async def _errors(rc: RawClient) -> list[str]:
    data = await rc.ping()
    return [ln for ln in data.decode().split("\r\n") if ln.startswith("-ERR")]


@pytest.mark.parametrize("user,ops", CASES, ids=[c[0] for c in CASES])
async def test_permission_forms(user: str, ops: list) -> None:
    async with serve_config(PERMS_CONF) as srv:
        admin = await RawClient.open(srv, user="admin", **{"pass": "pw"})
        admin.sub(">", "w")
        assert await _errors(admin) == []
        rc = await RawClient.open(srv, user=user, headers=True, **{"pass": "pw"})
        assert await _errors(rc) == []
        for i, (op, subject, queue, allowed) in enumerate(ops):
            if op == "pub":
                payload = f"m{i}"
                rc.pub(subject, payload)
                errs = await _errors(rc)
                assert errs == ([] if allowed else [PUB_ERR.format(subject)]), (op, subject)
                seen = [m for m in parse_stream(await admin.ping()) if getattr(m, "subject", None)]
                assert [(m.subject, m.payload) for m in seen] == ([(subject, payload.encode())] if allowed else [])
                continue
            sid = f"s{i}"
            rc.sub(subject, sid, queue)
            errs = await _errors(rc)
            want = [] if allowed else [QSUB_ERR.format(subject, queue) if queue else SUB_ERR.format(subject)]
            assert errs == want, (op, subject, queue)
            target = _literal(subject)
            admin.pub(target, f"to {sid}")
            await admin.ping()
            got = [m for m in parse_stream(await rc.ping()) if getattr(m, "sid", None) == sid]
            assert [m.payload for m in got] == ([f"to {sid}".encode()] if allowed else []), (subject, queue)
            rc.send(f"UNSUB {sid}\r\n")
        await rc.close()
        await admin.close()


async def test_wildcard_subscription_does_not_deliver_denied_subjects() -> None:
    """A subscription on ``>`` is accepted for a user with subscribe deny entries; the denied subjects are
    filtered at delivery."""
    async with serve_config(PERMS_CONF) as srv:
        admin = await RawClient.open(srv, user="admin", **{"pass": "pw"})
        rc = await RawClient.open(srv, user="sub_both", **{"pass": "pw"})
        rc.sub("foo.>", 1)
        assert await _errors(rc) == []
        for s in ("foo.secret.a", "foo.open", "foo.secret.b.c", "foo.secret"):
            admin.pub(s, s)
        await admin.ping()
        got = [m.subject for m in parse_stream(await rc.ping()) if getattr(m, "sid", None) == "1"]
        assert got == ["foo.open", "foo.secret"]
        await rc.close()
        await admin.close()


async def test_headers_publish_and_queue_delivery_follow_the_same_rules() -> None:
    async with serve_config(PERMS_CONF) as srv:
        admin = await RawClient.open(srv, user="admin", **{"pass": "pw"})
        admin.sub(">", "w")
        await admin.ping()
        rc = await RawClient.open(srv, user="pub_deny", headers=True, **{"pass": "pw"})
        rc.hpub("foo.a", b"NATS/1.0\r\nk: v\r\n\r\n", b"hdr")
        assert await _errors(rc) == [PUB_ERR.format("foo.a")]
        rc.hpub("foo.a.b", b"NATS/1.0\r\nk: v\r\n\r\n", b"hdr")
        assert await _errors(rc) == []
        assert [m.subject for m in parse_stream(await admin.ping()) if getattr(m, "sid", None)] == ["foo.a.b"]
        qc = await RawClient.open(srv, user="sub_both", **{"pass": "pw"})
        qc.sub("foo.>", "q", queue="g")  # a queue subscription overlapping the deny list: filtered at delivery
        assert await _errors(qc) == []
        admin.pub("foo.secret.x", "no")
        admin.pub("foo.fine", "yes")
        await admin.ping()
        assert [m.subject for m in parse_stream(await qc.ping()) if getattr(m, "sid", None)] == ["foo.fine"]
        for c in (rc, qc, admin):
            await c.close()


async def test_allow_responses_max_and_expires() -> None:
    async with serve_config(PERMS_CONF) as srv:
        admin = await RawClient.open(srv, user="admin", **{"pass": "pw"})
        admin.sub("_INBOX.>", "r")
        rc = await RawClient.open(srv, user="responder", **{"pass": "pw"})
        rc.sub("svc", 1)
        assert await _errors(rc) == []
        rc.pub("svc", "not a reply")  # allow_responses alone: no other publish
        assert await _errors(rc) == [PUB_ERR.format("svc")]
        admin.pub("svc", "req", reply="_INBOX.one")
        await admin.ping()
        assert [m.reply for m in parse_stream(await rc.ping()) if getattr(m, "sid", None) == "1"] == ["_INBOX.one"]
        rc.pub("_INBOX.one", "r1")
        rc.pub("_INBOX.one", "r2")
        assert await _errors(rc) == []
        rc.pub("_INBOX.one", "r3")  # max: 2
        assert await _errors(rc) == [PUB_ERR.format("_INBOX.one")]
        rc.pub("_INBOX.other", "x")  # a reply subject it was never given
        assert await _errors(rc) == [PUB_ERR.format("_INBOX.other")]
        got = [(m.subject, m.payload) for m in parse_stream(await admin.ping()) if getattr(m, "sid", None) == "r"]
        assert got == [("_INBOX.one", b"r1"), ("_INBOX.one", b"r2")]
        admin.pub("svc", "req", reply="_INBOX.two")
        await admin.ping()
        await rc.ping()
        await asyncio.sleep(0.9)  # expires: 700ms
        rc.pub("_INBOX.two", "late")
        assert await _errors(rc) == [PUB_ERR.format("_INBOX.two")]
        assert [m for m in parse_stream(await admin.ping()) if getattr(m, "sid", None) == "r"] == []
        await rc.close()
        await admin.close()


# ---- accounts ---------------------------------------------------------------------------------------------

ACCOUNTS_CONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "%s" }
accounts {
  A { jetstream: enabled, users [{user: a, password: a}], imports [{service: {account: S, subject: "svc.>"}}],
      exports [{stream: "public.>", accounts: [B]}] }
  B { jetstream: enabled, users [{user: b, password: b}],
      imports [{service: {account: S, subject: "svc.>"}}, {stream: {account: A, subject: "public.>"}}] }
  S { users [{user: s, password: s}], exports [{service: "svc.>"}] }
  SYS { users [{user: sys, password: sys}] }
}
system_account: SYS
"""


def _url(srv, user: str) -> str:
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


class Spy:
    """A connection that records every message its ``>`` (and other) subscriptions receive."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []

    async def cb(self, m) -> None:
        self.got.append((m.subject, m.data))


@pytest.fixture
async def tenants(tmp_path):
    async with serve_config(ACCOUNTS_CONF % tmp_path) as srv:
        conns = {u: await nats.connect(_url(srv, u)) for u in ("a", "b", "s", "sys")}
        try:
            yield srv, conns
        finally:
            for nc in conns.values():
                await nc.close()


async def _spy_b(conns, *subjects: str) -> Spy:
    spy = Spy()
    for s in subjects:
        await conns["b"].subscribe(s, cb=spy.cb)
    await conns["b"].flush()
    return spy


async def test_core_subjects_and_inbox_replies_stay_in_their_account(tenants) -> None:
    srv, c = tenants
    spy = await _spy_b(c, ">", "_INBOX.>", "foo")
    got_a = []
    async def answer(m):
        await m.respond(b"answer")

    async def keep(m):
        got_a.append(m.data)

    responder = await c["a"].subscribe("help", cb=answer)
    mine = await c["a"].subscribe("foo", cb=keep)
    await c["a"].flush()
    await c["a"].publish("foo", b"a-secret")
    await c["a"].publish("orders.new", b"a-order")
    await c["a"].publish("public.news", b"a-public")  # exported to B: the only thing B may see
    await c["a"].publish("publicity", b"a-not-exported")
    r = await c["a"].request("help", b"?", timeout=2)  # the reply goes to a's _INBOX in A only
    assert r.data == b"answer"
    await c["a"].flush()
    await c["b"].publish("_INBOX.guess", b"b-noise")  # b's publishes do not reach A's inbox either
    await c["b"].flush()
    await asyncio.sleep(0.2)
    assert got_a == [b"a-secret"]
    leaked = [(s, d) for s, d in spy.got if d.startswith(b"a-") or d in (b"?", b"answer")]
    assert leaked == [("public.news", b"a-public")]
    s_spy = Spy()  # an account A exports nothing to
    await c["s"].subscribe(">", cb=s_spy.cb)
    await c["s"].flush()
    await c["a"].publish("public.more", b"a-public-2")
    await c["a"].flush()
    await asyncio.sleep(0.1)
    assert s_spy.got == []
    await responder.unsubscribe()
    await mine.unsubscribe()


async def test_service_import_replies_route_only_to_the_requester(tenants) -> None:
    srv, c = tenants
    seen_replies: list[str] = []

    async def serve(m):
        seen_replies.append(m.reply)
        await m.respond(b"resp:" + m.data)

    await c["s"].subscribe("svc.echo", cb=serve)
    await c["s"].flush()
    spy = await _spy_b(c, ">", "_R_.>", "_INBOX.>")
    r = await c["a"].request("svc.echo", b"from-a", timeout=2)
    assert r.data == b"resp:from-a"
    assert len(seen_replies) == 1 and seen_replies[0].startswith("_R_.")  # the exporter never sees a's inbox
    rr = seen_replies[0]
    # another tenant publishing on the same _R_ subject, or the exporter answering twice, reaches nobody
    a_inbox = await c["a"].subscribe("_INBOX.>")
    await c["a"].flush()
    await c["b"].publish(rr, b"forged")
    await c["s"].publish(rr, b"second answer")
    await c["b"].flush()
    await c["s"].flush()
    with pytest.raises(nats.errors.TimeoutError):
        await a_inbox.next_msg(timeout=0.3)
    rb = await c["b"].request("svc.echo", b"from-b", timeout=2)
    assert rb.data == b"resp:from-b"
    assert not [d for _, d in spy.got if b"from-a" in d or d == b"second answer"]


async def test_sys_events_and_requests_are_invisible_to_tenants(tenants) -> None:
    srv, c = tenants
    with pytest.raises(nats.errors.NoRespondersError):  # not imported: tenants cannot ask $SYS
        await c["a"].request("$SYS.REQ.SERVER.PING", b"", timeout=1)
    with pytest.raises(nats.errors.NoRespondersError):
        await c["a"].request("$SYS.REQ.ACCOUNT.B.CONNZ", b"", timeout=1)
    spy = await _spy_b(c, "$SYS.>", ">")
    a_spy = Spy()
    await c["a"].subscribe("$SYS.>", cb=a_spy.cb)
    await c["a"].flush()
    events = await c["sys"].subscribe("$SYS.ACCOUNT.*.CONNECT")
    await c["sys"].flush()
    extra = await nats.connect(_url(srv, "a"))  # a connect event in the system account
    ev = await events.next_msg(timeout=2)
    assert json.loads(ev.data)["client"]["acc"] == "A"
    r = await c["sys"].request("$SYS.REQ.SERVER.PING", b"", timeout=2)
    assert json.loads(r.data)["statsz"]
    # the imported CONNZ only shows the requester's own account
    own = json.loads((await c["a"].request("$SYS.REQ.SERVER.PING.CONNZ", b"", timeout=2)).data)
    assert {ci.get("account", "A") for ci in own["data"]["connections"]} == {"A"}
    assert own["data"]["num_connections"] == 2
    for body in (b'{"acc": "B"}', b'{"account": "B", "state": 2}'):  # no way to widen the filter
        other = json.loads((await c["a"].request("$SYS.REQ.ACCOUNT.PING.CONNZ", body, timeout=2)).data)
        assert {ci.get("account", "A") for ci in other["data"]["connections"]} == {"A"}
    st = json.loads((await c["a"].request("$SYS.REQ.ACCOUNT.PING.STATZ", b'{"accounts": ["B", "SYS"]}',
                                          timeout=2)).data)
    assert [x["acc"] for x in st["data"]["account_statz"]] == ["A"]
    await extra.close()
    await asyncio.sleep(0.2)
    assert not [s for s, _ in spy.got if s.startswith("$SYS.")]  # B asked nothing: it sees nothing
    # A sees its own requests to its system imports, never the system account's traffic
    assert not [s for s, _ in a_spy.got if s.startswith(("$SYS.ACCOUNT", "$SYS.SERVER")) or s == "$SYS.REQ.SERVER.PING"]
    assert {s for s, _ in a_spy.got} <= {"$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ",
                                         "$SYS.REQ.ACCOUNT.PING.STATZ"}


async def _js(nc, api: str, body: dict | None = None) -> dict:
    r = await nc.request(f"$JS.API.{api}", json.dumps(body).encode() if body is not None else b"", timeout=2)
    return json.loads(r.data)


async def test_jetstream_streams_are_per_account(tenants) -> None:
    srv, c = tenants
    made = await _js(c["a"], "STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"],
                                                      "allow_direct": True})
    assert made.get("config", {}).get("name") == "ORDERS", made
    await c["a"].publish("orders.1", b"a-private")
    await c["a"].flush()
    spy = await _spy_b(c, ">", "$JS.>")
    listed = await _js(c["b"], "STREAM.LIST")
    assert listed["total"] == 0 and not listed.get("streams")
    names = await _js(c["b"], "STREAM.NAMES")
    assert names["total"] == 0 and not names.get("streams")
    info = await _js(c["b"], "STREAM.INFO.ORDERS")
    assert info["error"]["err_code"] == 10059  # stream not found
    con = await _js(c["b"], "CONSUMER.CREATE.ORDERS", {"stream_name": "ORDERS",
                                                       "config": {"ack_policy": "explicit"}})
    assert con["error"]["err_code"] == 10059
    try:
        r = await c["b"].request("$JS.API.DIRECT.GET.ORDERS", b'{"seq": 1}', timeout=1)
        assert b"a-private" not in r.data and r.headers and r.headers.get("Status") in ("404", "503")
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        pass
    for api in ("STREAM.MSG.GET.ORDERS", "CONSUMER.LIST.ORDERS", "CONSUMER.NAMES.ORDERS"):
        r = await _js(c["b"], api, {"seq": 1} if "MSG.GET" in api else {})
        assert r["error"]["err_code"] == 10059, (api, r)
    r = await _js(c["s"], "STREAM.LIST")  # an account without JetStream
    assert r["error"]["err_code"] == 10039 and r["type"] == "io.nats.jetstream.api.v1.stream_list_response"
    r = await _js(c["sys"], "STREAM.INFO.ORDERS")
    assert r["error"]["err_code"] == 10039 and r["type"] == "io.nats.jetstream.api.v1.system_response"
    purge = await _js(c["b"], "STREAM.PURGE.ORDERS")
    assert purge["error"]["err_code"] == 10059
    dele = await _js(c["b"], "STREAM.DELETE.ORDERS")
    assert dele["error"]["err_code"] == 10059
    await c["b"].publish("orders.2", b"b-data")  # B has no stream on orders.>: A's stream does not store it
    await c["b"].flush()
    info = await _js(c["a"], "STREAM.INFO.ORDERS")
    assert info["state"]["messages"] == 1
    await asyncio.sleep(0.1)
    assert not [d for _, d in spy.got if b"a-private" in d]
