"""The system account: $SYS request API and connect/disconnect/statsz events (shapes as nats-server's).

Most tests take their server from the rillet pytest plugin (``rillet_server_factory``, rillet.testing: a
server in a thread of its own); the two that patch the server's own methods run it on the test's loop
(``run_server``), where those methods are called."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest

from rillet.server import Options
from rillet.app.embed import run_server
from rillet.config.options import RANDOM_PORT, User

SERVER_KEYS = {"name", "host", "id", "ver", "jetstream", "flags", "seq", "time"}


def fields() -> dict:
    return dict(server_name="S1", system_account="SYS", users=[User(username="sys", password="sys", account="SYS"),
                                                                User(username="a", password="a", account="A")])


def opts(**kw) -> Options:
    return Options(host="127.0.0.1", port=RANDOM_PORT, **fields(), **kw)


@pytest.fixture
def srv(rillet_server_factory):
    """A server with the accounts SYS (user sys, the system account) and A (user a)."""
    return rillet_server_factory(**fields()).server


def url(srv, user: str) -> str:
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


async def req(nc, subject: str, body: bytes = b"") -> dict:
    r = await nc.request(subject, body, timeout=2)
    return json.loads(r.data)


async def test_ping_statsz_and_idz(srv):
    nc = await nats.connect(url(srv, "sys"))
    r = await req(nc, "$SYS.REQ.SERVER.PING")
    assert SERVER_KEYS <= set(r["server"]) and r["server"]["id"] == srv.server_id
    assert r["server"]["name"] == "S1"
    st = r["statsz"]
    assert st["connections"] == 1 and st["total_connections"] == 1 and st["active_servers"] == 1
    for k in ("start", "mem", "cores", "cpu", "subscriptions", "sent", "received", "slow_consumers"):
        assert k in st
    assert await req(nc, "$SYS.REQ.SERVER.PING.IDZ") == {"name": "S1", "host": "127.0.0.1",
                                                         "id": srv.server_id}
    r2 = await req(nc, f"$SYS.REQ.SERVER.{srv.server_id}.STATSZ")
    assert r2["server"]["seq"] > r["server"]["seq"] and "statsz" in r2
    await nc.close()


async def test_server_requests_match_monitor_shapes(srv):
    nc = await nats.connect(url(srv, "sys"))
    na = await nats.connect(url(srv, "a"), name="app")
    await na.subscribe("foo")
    await na.flush()
    v = await req(nc, "$SYS.REQ.SERVER.PING.VARZ")
    assert v["data"]["server_id"] == srv.server_id and v["data"]["system_account"] == "SYS"
    c = await req(nc, f"$SYS.REQ.SERVER.{srv.server_id}.CONNZ", b'{"subscriptions": true, "acc": "A"}')
    conns = c["data"]["connections"]
    assert len(conns) == 1 and conns[0]["name"] == "app" and conns[0]["subscriptions_list"] == ["foo"]
    h = await req(nc, "$SYS.REQ.SERVER.PING.HEALTHZ")
    assert h["data"] == {"status": "ok", "status_code": 200}
    s = await req(nc, "$SYS.REQ.SERVER.PING.SUBSZ", b'{"subscriptions": true, "account": "A"}')
    # the account's own subscription, and the 4 system imports nats-server gives every account
    assert sorted(x["subject"] for x in s["data"]["subscriptions_list"]) == [
        "$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.STATZ", "$SYS.REQ.SERVER.PING.CONNZ",
        "$SYS.REQ.USER.INFO", "foo"]
    j = await req(nc, "$SYS.REQ.SERVER.PING.JSZ")
    assert "data" in j
    a = await req(nc, "$SYS.REQ.SERVER.PING.ACCOUNTZ")
    assert "A" in a["data"]["accounts"] and a["data"]["system_account"] == "SYS"
    e = await req(nc, "$SYS.REQ.SERVER.PING.CONNZ", b"{not json")
    assert e["error"]["code"] == 400
    await na.close()
    await nc.close()


async def test_account_requests(srv):
    nc = await nats.connect(url(srv, "sys"))
    na = await nats.connect(url(srv, "a"))
    await na.subscribe("x.y")
    await na.flush()
    i = await req(nc, "$SYS.REQ.ACCOUNT.A.INFO")
    assert i["data"]["account_name"] == "A" and i["data"]["client_connections"] == 1
    c = await req(nc, "$SYS.REQ.ACCOUNT.A.CONNZ")
    assert c["data"]["num_connections"] == 1
    n = await req(nc, "$SYS.REQ.ACCOUNT.A.CONNS")
    assert n["type"] == "io.nats.server.advisory.v1.account_connections" and n["conns"] == 1
    await na.close()
    await nc.close()


async def test_connect_disconnect_events(srv):
    nc = await nats.connect(url(srv, "sys"))
    sub = await nc.subscribe("$SYS.ACCOUNT.*.*")
    await nc.flush()
    na = await nats.connect(url(srv, "a"), name="app")
    await na.publish("q", b"hello")
    await na.flush()
    await na.close()
    m = await sub.next_msg(timeout=2)
    assert m.subject == "$SYS.ACCOUNT.A.CONNECT"
    ev = json.loads(m.data)
    assert ev["type"] == "io.nats.server.advisory.v1.client_connect"
    cl = ev["client"]
    assert cl["acc"] == "A" and cl["user"] == "a" and cl["name"] == "app" and cl["lang"] == "python3"
    assert cl["kind"] == "Client" and cl["client_type"] == "nats" and isinstance(cl["id"], int)
    m = await sub.next_msg(timeout=2)
    assert m.subject == "$SYS.ACCOUNT.A.DISCONNECT"
    ev = json.loads(m.data)
    assert ev["type"] == "io.nats.server.advisory.v1.client_disconnect"
    assert ev["reason"] == "Client Closed" and ev["sent"]["msgs"] == 1 and ev["sent"]["bytes"] == 5
    assert "stop" in ev["client"] and SERVER_KEYS <= set(ev["server"])
    await nc.close()


async def _refused(srv, url_: str, **kw) -> None:
    with pytest.raises(Exception):
        nc = await nats.connect(url_, allow_reconnect=False, max_reconnect_attempts=0, **kw)
        await nc.close()


async def test_auth_error_event(monkeypatch):
    async with run_server(opts()) as srv:
        built = []
        real = srv.sysacc.client_info
        monkeypatch.setattr(srv.sysacc, "client_info", lambda *a, **k: built.append(a) or real(*a, **k))
        # nobody listens: nothing is built
        await _refused(srv, srv.client_url.replace("nats://", "nats://a:wrong@"))
        assert built == []
        nc = await nats.connect(url(srv, "sys"))
        sub = await nc.subscribe("$SYS.SERVER.*.CLIENT.AUTH.ERR")
        await nc.flush()
        await _refused(srv, srv.client_url.replace("nats://", "nats://a:wrong@"), name="bad")
        m = await sub.next_msg(timeout=2)
        assert m.subject == f"$SYS.SERVER.{srv.server_id}.CLIENT.AUTH.ERR"
        ev = json.loads(m.data)
        assert ev["type"] == "io.nats.server.advisory.v1.client_disconnect"
        assert ev["reason"] == "Authentication Failure" and SERVER_KEYS <= set(ev["server"])
        cl = ev["client"]
        assert cl["acc"] == "$G" and cl["user"] == "a" and cl["name"] == "bad" and cl["name_tag"] == "$G"
        assert cl["kind"] == "Client" and cl["client_type"] == "nats" and "stop" in cl
        assert ev["sent"] == {"msgs": 0, "bytes": 0} and ev["received"] == {"msgs": 0, "bytes": 0}
        # a token is never shown
        await _refused(srv, srv.client_url.replace("nats://", "nats://sekrit@"))
        ev = json.loads((await sub.next_msg(timeout=2)).data)
        assert ev["client"]["user"] == "[REDACTED]" and "sekrit" not in json.dumps(ev)
        await nc.close()


async def test_statsz_event_published(monkeypatch, rillet_server_factory):
    from rillet.server import sysacc
    monkeypatch.setattr(sysacc, "STATSZ_INTERVAL", 0.2)
    srv = rillet_server_factory(**fields()).server
    nc = await nats.connect(url(srv, "sys"))
    sub = await nc.subscribe(f"$SYS.SERVER.{srv.server_id}.STATSZ")
    m = await sub.next_msg(timeout=2)
    assert "statsz" in json.loads(m.data)
    await nc.close()


async def test_other_accounts_do_not_see_sys_traffic(srv):
    na = await nats.connect(url(srv, "a"))
    sub = await na.subscribe(">")
    await na.flush()
    nc = await nats.connect(url(srv, "sys"))
    await req(nc, "$SYS.REQ.SERVER.PING")
    nb = await nats.connect(url(srv, "a"))
    await nb.close()
    nx = await nats.connect(url(srv, "a"))
    with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
        await nx.request("$SYS.REQ.SERVER.PING", b"", timeout=1)  # no $SYS service in account A
    await nx.close()
    await asyncio.sleep(0.2)
    got = []
    while True:
        try:
            got.append((await sub.next_msg(timeout=0.1)).subject)
        except nats.errors.TimeoutError:
            break
    # A sees only its own request (same account), none of the $SYS events or answers
    assert all(s == "$SYS.REQ.SERVER.PING" or not s.startswith("$SYS") for s in got), got
    assert not any(s.startswith("$SYS.ACCOUNT") or s.startswith("$SYS.SERVER") for s in got)
    await nc.close()
    await na.close()


async def test_default_sys_account_and_no_system_account(rillet_server_factory):
    srv = rillet_server_factory(users=[User(username="s", password="s", account="$SYS")]).server
    assert srv.sysacc.account is not None and srv.sysacc.account.name == "$SYS"
    nc = await nats.connect(srv.client_url.replace("nats://", "nats://s:s@"))
    r = await req(nc, "$SYS.REQ.SERVER.PING")
    assert r["server"]["id"] == srv.server_id
    await nc.close()
    assert rillet_server_factory(no_system_account=True).server.sysacc.account is None


async def test_system_imports_user_info_kick_and_ldm(rillet_server_factory):
    """Every account gets nats-server's system imports; the system account can kick or LDM a client."""
    from rillet.config.options import Permission, Permissions
    f = fields()
    f["users"][1].permissions = Permissions(publish=Permission(deny=["x"]))
    srv = rillet_server_factory(**f).server
    ns = await nats.connect(url(srv, "sys"))
    na = await nats.connect(url(srv, "a"), allow_reconnect=False)
    u = await req(na, "$SYS.REQ.USER.INFO")
    assert u["data"] == {"user": "a", "account": "A", "account_name": "A",
                         "permissions": {"publish": {"deny": ["x"]}, "subscribe": {}}}
    assert (await req(ns, "$SYS.REQ.USER.INFO"))["data"] == {"user": "sys", "account": "SYS",
                                                              "account_name": "SYS"}
    for subj in ("$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.SERVER.PING.CONNZ"):
        c = await req(na, subj)  # only the requester's own account
        assert c["data"]["num_connections"] == 1 and c["data"]["connections"][0]["cid"] == na._client_id
    st = await req(na, "$SYS.REQ.ACCOUNT.PING.STATZ")
    assert [s["acc"] for s in st["data"]["account_statz"]] == ["A"]
    with pytest.raises(nats.errors.NoRespondersError):
        await na.request("$SYS.REQ.SERVER.PING", b"", timeout=1)  # the rest of $SYS is not imported
    assert (await ns.request("$SYS.DEBUG.SUBSCRIBERS", b"$SYS.REQ.USER.INFO")).data == b"0"
    sid = srv.server_id
    e = await req(ns, f"$SYS.REQ.SERVER.{sid}.KICK", b'{"cid": 9999}')
    assert e["error"] == {"code": 500, "description": "no such client or leafnode id"}
    e = await req(ns, f"$SYS.REQ.SERVER.{sid}.LDM", b'{"cid": 9999}')
    assert e["error"] == {"code": 500, "description": "no such client id"}
    r = await req(ns, f"$SYS.REQ.SERVER.{sid}.LDM", json.dumps({"cid": na._client_id}).encode())
    assert "error" not in r
    r = await req(ns, f"$SYS.REQ.SERVER.{sid}.KICK", json.dumps({"cid": na._client_id}).encode())
    assert "error" not in r and set(r) == {"server"}
    for _ in range(50):
        if na.is_closed:
            break
        await asyncio.sleep(0.05)
    assert na.is_closed
    closed = await req(ns, f"$SYS.REQ.SERVER.{sid}.CONNZ", b'{"state": 1}')
    assert [c["reason"] for c in closed["data"]["connections"]] == ["Kicked"]
    await ns.close()


def test_no_system_account(rillet_server_factory):
    srv = rillet_server_factory(no_system_account=True).server
    assert list(srv.accounts) == ["$G"] and srv.global_account.num_subs() == 0
    srv = rillet_server_factory().server
    assert sorted(srv.accounts) == ["$G", "$SYS"]
    assert srv.accounts["$SYS"].num_subs() == 56 and srv.global_account.num_subs() == 4


async def test_accountz_lists_exports_and_imports_as_nats_server():
    """/accountz?acc=X shows configured exports/imports and the system ones (checked against v2.15.1)."""
    from rillet.monitor.endpoints import accountz
    from tests.helpers import serve_config
    conf = """
listen: 127.0.0.1:-1
accounts {
  A { users [{user: a, password: a}], exports [ {stream: "pub.>"}, {service: "svc.*", response: stream, accounts: [B]} ] }
  B { users [{user: b, password: b}],
      imports [ {stream: {account: A, subject: "pub.>"}, prefix: "fromA"}, {service: {account: A, subject: "svc.*"}, to: "local.*"} ] }
}
"""
    async with serve_config(conf) as srv:
        a = accountz(srv, {"acc": "A"})["account_detail"]
        assert a["exports"] == [{"subject": "pub.>", "type": "stream"},
                                {"subject": "svc.*", "type": "service", "response_type": "Streamed",
                                 "approved_accounts": ["B"]}]
        assert [(i["subject"], i["local_subject"], i["share"]) for i in a["imports"]] == [
            ("$SYS.REQ.ACCOUNT.A.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ", False),
            ("$SYS.REQ.ACCOUNT.A.CONNZ", "$SYS.REQ.SERVER.PING.CONNZ", False),
            ("$SYS.REQ.ACCOUNT.A.STATZ", "$SYS.REQ.ACCOUNT.PING.STATZ", False),
            ("$SYS.REQ.USER.A.INFO", "$SYS.REQ.USER.INFO", True)]
        b = accountz(srv, {"acc": "B"})["account_detail"]
        assert "exports" not in b
        assert b["imports"][:2] == [
            {"subject": "pub.>", "account": "A", "local_subject": "fromA.pub.>", "type": "stream",
             "invalid": False, "share": False, "tracking": False},
            {"subject": "svc.*", "account": "A", "to": "local.*", "local_subject": "local.*", "type": "service",
             "invalid": False, "share": False, "tracking": False}]
        s = accountz(srv, {"acc": "$SYS"})["account_detail"]
        assert s["is_system"] and s["subscriptions"] == 56 and len(s["exports"]) == 4
        assert [i["subject"] for i in s["imports"]] == ["$SYS.REQ.USER.$SYS.INFO"]


async def test_events_are_built_only_for_listeners(monkeypatch):
    """The system client's own listeners ($SYS.SERVER.*.STATSZ...) do not count as interest."""
    async with run_server(opts()) as srv:
        sa = srv.sysacc
        built = []
        real = sa.statsz_msg
        monkeypatch.setattr(sa, "statsz_msg", lambda: built.append(1) or real())
        sa.publish_statsz()
        nc = await nats.connect(url(srv, "a"))  # a connect event nobody listens to
        await nc.close()
        assert built == [] and not sa.interest(f"$SYS.SERVER.{srv.server_id}.STATSZ")
        ns = await nats.connect(url(srv, "sys"))
        sub = await ns.subscribe("$SYS.SERVER.*.STATSZ")
        await ns.flush()
        sa.publish_statsz()
        assert json.loads((await sub.next_msg(timeout=2)).data)["statsz"] and built == [1]
        await ns.close()


@pytest.mark.parametrize("conf,accounts,subs,sys_name", [
    ("", ["$G", "$SYS"], 60, "$SYS"),
    ("accounts { A { users [{user: a, password: a}] }, SYS { users [{user: s, password: s}] } }\n"
     "system_account: SYS\n", ["$G", "A", "SYS"], 64, "SYS"),
    ("accounts { A { users [{user: a, password: a}] } }\nno_system_account: true\n", ["$G", "A"], 0, None),
    ("accounts { A { users [{user: a, password: a}] } }\n", ["$G", "$SYS", "A"], 64, "$SYS"),
], ids=["no_accounts", "system_account", "no_system_account", "default_system_account"])
async def test_monitor_counts_match_nats_server(conf, accounts, subs, sys_name):
    """The same numbers from Rillet and from nats-server v2.15.1 (RILLET_TEST_TARGET=nats-server)."""
    import urllib.parse
    import urllib.request

    from tests.helpers import free_port, serve_config
    port = free_port()
    async with serve_config(f"listen: 127.0.0.1:-1\nhttp: 127.0.0.1:{port}\n" + conf):
        def get(path):
            return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read())
        loop = asyncio.get_running_loop()
        v = await loop.run_in_executor(None, get, "/varz")
        a = await loop.run_in_executor(None, get, "/accountz")
        s = await loop.run_in_executor(None, get, "/subsz")
        assert v["subscriptions"] == subs and s["num_subscriptions"] == subs
        assert v.get("system_account") == sys_name and a.get("system_account") == sys_name
        assert sorted(a["accounts"]) == accounts
        if sys_name:
            d = (await loop.run_in_executor(None, get, f"/accountz?acc={urllib.parse.quote(sys_name)}"))["account_detail"]
            assert d["subscriptions"] == 56 and d["is_system"] is True
            g = (await loop.run_in_executor(None, get, "/accountz?acc=%24G"))["account_detail"]
            assert g["subscriptions"] == 4


async def test_reload_request():
    from tests.helpers import serve_config
    conf = ("listen: 127.0.0.1:-1\naccounts { SYS { users [{user: sys, password: sys}] }, "
            "A { users [{user: a, password: a}] } }\nsystem_account: SYS\n")
    async with serve_config(conf) as srv:
        ns = await nats.connect(url(srv, "sys"))
        with open(srv.opts.config_file, "w") as f:
            f.write(conf.replace("{user: a, password: a}", "{user: a, password: a}, {user: z, password: z}"))
        r = await req(ns, f"$SYS.REQ.SERVER.{srv.server_id}.RELOAD")
        assert "error" not in r and srv.reload_count == 1
        nz = await nats.connect(url(srv, "z"))
        assert (await req(nz, "$SYS.REQ.USER.INFO"))["data"]["account"] == "A"
        with open(srv.opts.config_file, "w") as f:
            f.write("listen: 127.0.0.1:1\n")  # a port change cannot be reloaded
        r = await req(ns, f"$SYS.REQ.SERVER.{srv.server_id}.RELOAD")
        assert r["error"]["code"] == 500 and "config reload not supported for Port" in r["error"]["description"]
        await nz.close()
        await ns.close()


async def test_claims_update_without_operator(srv):
    ns = await nats.connect(url(srv, "sys"))
    r = await req(ns, "$SYS.REQ.ACCOUNT.A.CLAIMS.UPDATE")
    assert r["error"] == {"account": "A", "code": 500, "description": "jwt update error - request body is empty"}
    r = await req(ns, "$SYS.REQ.ACCOUNT.A.CLAIMS.UPDATE", b"garbage")
    assert r["error"]["description"] == "jwt update resulted in error - expected 3 chunks"
    await ns.close()
