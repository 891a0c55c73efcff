"""HTTP monitoring: field names, types and values as nats-server shows them.

Each test runs an in-process server with ``http_port=-1``, drives it with nats-py and reads the
endpoints with aiohttp. Expected shapes and error texts were taken from nats-server 2.11+.
"""
from __future__ import annotations

import asyncio
import io
import re
import ssl
import subprocess
import time
from typing import Any

import aiohttp
import nats
import pytest

from rillet.gocompat import gojson
from rillet.gocompat import monitorfmt as gofmt
from rillet.app.embed import run_server
from rillet.server.logging import Logger
from rillet.config.options import Options, TLSConfig, User

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")
UPTIME = re.compile(r"^(\d+y)?(\d+d)?(\d+h)?(\d+m)?\d+s$")
GO_DURATION = re.compile(r"^(\d+h)?(\d+m)?[\d.]+(ns|µs|ms|s)$")

# what nats-server v2.15.1 reports for a server without clients: 56 internal subscriptions in $SYS and
# the 4 system service imports of $G (checked live)
SYSTEM_SUBS = 60


def mopts(**kw: Any) -> Options:
    kw.setdefault("host", "127.0.0.1")
    kw.setdefault("port", -1)
    kw.setdefault("http_port", -1)
    kw.setdefault("http_host", "127.0.0.1")
    return Options(**kw)


class Mon:
    """A small client for one server's monitoring port."""

    def __init__(self, srv: Any, session: aiohttp.ClientSession, scheme: str = "http") -> None:
        self.srv = srv
        addr = srv.https_addr if scheme == "https" else srv.http_addr
        self.base = f"{scheme}://127.0.0.1:{addr[1] if addr else 0}"
        self.session = session

    async def get(self, path: str, **kw: Any) -> tuple[int, Any, str]:
        async with self.session.get(self.base + path, **kw) as r:
            return r.status, r.headers, await r.text()

    async def json(self, path: str, status: int = 200) -> Any:
        code, headers, text = await self.get(path)
        assert code == status, (path, code, text)
        assert headers["Content-Type"] == "application/json"
        import json
        return json.loads(text)


class running:
    """``async with running(opts) as (srv, mon)``."""

    def __init__(self, opts: Options | None = None, log: Logger | None = None) -> None:
        self.opts = opts or mopts()
        self.log = log

    async def __aenter__(self) -> tuple[Any, Mon]:
        self._cm = run_server(self.opts, log=self.log)
        self.srv = await self._cm.__aenter__()
        self.session = aiohttp.ClientSession()
        return self.srv, Mon(self.srv, self.session)

    async def __aexit__(self, *exc: Any) -> None:
        await self.session.close()
        await self._cm.__aexit__(*exc)


async def wait_for(cond: Any, timeout: float = 2.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


# ---- formatting helpers -------------------------------------------------------------------------------

def test_rtt_strings() -> None:
    # Go's Duration.String() (tests/test_gotime.py), of the RTT cut to the microsecond below 1ms
    assert gofmt.rtt_string(0.0012345678)[0] == "1.234567ms"
    assert gofmt.rtt_string(0.0006191234)[0] == "619µs"  # truncated to µs below 1ms


def test_uptime_strings() -> None:
    u = gofmt.uptime
    assert u(0) == "0s"
    assert u(59.9) == "59s"
    assert u(61) == "1m1s"
    assert u(3600 + 62) == "1h1m2s"
    assert u(86400 * 2 + 5) == "2d0h0m5s"
    assert u(86400 * 366) == "1y1d0h0m0s"


def test_json_like_go() -> None:
    out = gojson.dumps({"a": [], "b": {}, "s": "<&>", "f": gofmt.num(2.0), "g": 0.5}, 2)
    assert out == (b'{\n  "a": [],\n  "b": {},\n  "s": "\\u003c\\u0026\\u003e",\n  "f": 2,\n  "g": 0.5\n}')
    assert gojson.dumps({"status": "ok"}) == b'{"status":"ok"}'


def test_query_bool_parsing() -> None:
    for v in ("1", "t", "T", "true", "TRUE", "True"):
        assert gofmt.parse_bool({"x": v}, "x") is True
    for v in ("0", "f", "false", ""):
        assert gofmt.parse_bool({"x": v}, "x") is False
    with pytest.raises(gofmt.QueryError, match=r"""Error decoding boolean for 'x': strconv.ParseBool: """
                                               r"""parsing "yes": invalid syntax"""):
        gofmt.parse_bool({"x": "yes"}, "x")


# ---- /varz --------------------------------------------------------------------------------------------

VARZ_TYPES = {
    "server_id": str, "server_name": str, "version": str, "proto": int, "go": str, "host": str,
    "port": int, "max_connections": int, "ping_interval": int, "ping_max": int, "http_host": str,
    "http_port": int, "http_base_path": str, "https_port": int, "auth_timeout": (int, float),
    "max_control_line": int, "max_payload": int, "max_pending": int, "cluster": dict, "gateway": dict,
    "leaf": dict, "mqtt": dict, "websocket": dict, "jetstream": dict, "tls_timeout": (int, float),
    "write_deadline": int, "start": str, "now": str, "uptime": str, "mem": int, "cores": int,
    "gomaxprocs": int, "cpu": (int, float), "connections": int, "total_connections": int, "routes": int,
    "remotes": int, "leafnodes": int, "in_msgs": int, "out_msgs": int, "in_bytes": int, "out_bytes": int,
    "slow_consumers": int, "subscriptions": int, "http_req_stats": dict, "config_load_time": str,
    "config_digest": str, "slow_consumer_stats": dict,
}


async def test_varz_fields_types_and_counts() -> None:
    async with running() as (srv, mon):
        v = await mon.json("/varz")
        for k, t in VARZ_TYPES.items():
            assert k in v, k
            assert isinstance(v[k], t) and not isinstance(v[k], bool), (k, v[k])
        assert list(v)[:5] == ["server_id", "server_name", "version", "proto", "go"]
        assert v["server_id"] == srv.server_id
        assert v["port"] == srv.addr[1]
        assert v["ping_interval"] == 120_000_000_000
        assert v["write_deadline"] == 10_000_000_000
        assert v["auth_timeout"] == 2 and v["tls_timeout"] == 2
        assert v["max_payload"] == 1024 * 1024
        assert v["http_port"] == -1 and v["http_host"] == "127.0.0.1"
        for k in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream"):
            assert v[k] == {}
        assert RFC3339.match(v["start"]) and RFC3339.match(v["now"]) and RFC3339.match(v["config_load_time"])
        assert UPTIME.match(v["uptime"])
        assert v["mem"] > 0 and v["cores"] >= 1
        assert v["slow_consumer_stats"] == {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}
        assert v["http_req_stats"] == {"/varz": 1}
        assert v["connections"] == 0 and v["total_connections"] == 0 and v["subscriptions"] == SYSTEM_SUBS
        assert v["system_account"] == "$SYS"  # always there, as in nats-server

        nc = await nats.connect(srv.client_url)
        nc2 = await nats.connect(srv.client_url)
        await nc.subscribe("foo")
        await nc.subscribe("bar")
        await nc.flush()
        for _ in range(4):
            await nc2.publish("foo", b"hello")
        await nc2.flush()
        await nc.flush()
        v = await mon.json("/varz")
        assert v["connections"] == 2 and v["total_connections"] == 2
        assert v["subscriptions"] == SYSTEM_SUBS + 2
        assert (v["in_msgs"], v["in_bytes"], v["out_msgs"], v["out_bytes"]) == (4, 20, 4, 20)
        assert v["http_req_stats"]["/varz"] == 2
        await nc.close()
        await wait_for(lambda: len(srv.clients) == 1)
        v = await mon.json("/varz")
        assert v["connections"] == 1 and v["total_connections"] == 2
        assert v["out_msgs"] == 4  # counts of closed connections stay in the totals
        await nc2.close()


async def test_varz_reports_options() -> None:
    o = mopts(max_subscriptions=7, tags=["a:b"], ping_interval=30.0, write_deadline=2.5, auth_timeout=1.5,
              server_name="mon-test")
    async with running(o) as (srv, mon):
        v = await mon.json("/varz")
        assert v["server_name"] == "mon-test"
        assert v["max_subscriptions"] == 7
        assert v["tags"] == ["a:b"]
        assert v["ping_interval"] == 30_000_000_000
        assert v["write_deadline"] == 2_500_000_000
        assert v["auth_timeout"] == 1.5


# ---- /connz -------------------------------------------------------------------------------------------

CONN_TYPES = {
    "cid": int, "kind": str, "type": str, "ip": str, "port": int, "start": str, "last_activity": str,
    "rtt": str, "uptime": str, "idle": str, "pending_bytes": int, "in_msgs": int, "out_msgs": int,
    "in_bytes": int, "out_bytes": int, "subscriptions": int,
}


async def test_connz_fields_and_values() -> None:
    async with running() as (srv, mon):
        c = await mon.json("/connz")
        assert c["connections"] == [] and c["num_connections"] == 0 and c["total"] == 0
        assert list(c) == ["server_id", "now", "num_connections", "total", "offset", "limit", "connections"]
        assert c["limit"] == 1024 and c["offset"] == 0

        nc = await nats.connect(srv.client_url, name="first")
        nc2 = await nats.connect(srv.client_url)
        await nc.subscribe("foo.*")
        await nc.subscribe("bar", queue="q1")
        await nc.flush()
        for _ in range(3):
            await nc2.publish("foo.x", b"hello")
        await nc2.flush()
        await nc.flush()
        c = await mon.json("/connz")
        assert c["num_connections"] == 2 and c["total"] == 2
        a, b = c["connections"]
        for ci in (a, b):
            for k, t in CONN_TYPES.items():
                assert isinstance(ci[k], t), (k, ci[k])
            assert ci["kind"] == "Client" and ci["type"] == "nats"
            assert ci["ip"] == "127.0.0.1" and ci["port"] > 0
            assert RFC3339.match(ci["start"]) and RFC3339.match(ci["last_activity"])
            assert GO_DURATION.match(ci["rtt"]), ci["rtt"]
            assert UPTIME.match(ci["uptime"]) and UPTIME.match(ci["idle"])
            assert ci["lang"] == "python3" and ci["version"]
            assert "stop" not in ci and "reason" not in ci
            assert "subscriptions_list" not in ci and "authorized_user" not in ci
        assert a["cid"] < b["cid"]
        assert a["name"] == "first" and "name" not in b
        assert (a["subscriptions"], a["out_msgs"], a["out_bytes"], a["in_msgs"]) == (2, 3, 15, 0)
        assert (b["subscriptions"], b["in_msgs"], b["in_bytes"], b["out_msgs"]) == (0, 3, 15, 0)
        assert list(a)[:7] == ["cid", "kind", "type", "ip", "port", "start", "last_activity"]

        # the first look sends an RTT PING; after the PONG the RTT is measured
        await nc.flush()
        await wait_for(lambda: all(cl.rtt > 0 for cl in srv.clients.values()))
        c = await mon.json("/connz")
        assert all(ci["rtt"] != "0s" for ci in c["connections"])

        c = await mon.json("/connz?subs=1")
        assert sorted(c["connections"][0]["subscriptions_list"]) == ["bar", "foo.*"]
        assert "subscriptions_list" not in c["connections"][1]  # no subscriptions: field omitted
        await nc.close()
        await nc2.close()


async def test_connz_subs_detail() -> None:
    async with running() as (srv, mon):
        nc = await nats.connect(srv.client_url)
        await nc.subscribe("foo")
        await nc.subscribe("bar", queue="workers")
        baz = await nc.subscribe("baz")
        await baz.unsubscribe(limit=5)  # UNSUB <sid> 5: auto-unsubscribe after 5 messages
        await nc.flush()
        await nc.publish("foo", b"x")
        await nc.flush()
        c = await mon.json("/connz?subs=detail")
        det = {d["subject"]: d for d in c["connections"][0]["subscriptions_list_detail"]}
        assert "subscriptions_list" not in c["connections"][0]
        cid = c["connections"][0]["cid"]
        assert det["foo"] == {"subject": "foo", "sid": det["foo"]["sid"], "msgs": 1, "cid": cid}
        assert isinstance(det["foo"]["sid"], str)
        assert det["bar"]["qgroup"] == "workers" and det["bar"]["msgs"] == 0
        assert det["baz"]["max"] == 5
        assert list(det["bar"]) == ["subject", "qgroup", "sid", "msgs", "cid"]
        await nc.close()


async def test_connz_sort_limit_offset() -> None:
    async with running() as (srv, mon):
        ncs = [await nats.connect(srv.client_url, name=f"c{i}") for i in range(4)]
        # c0: 1 sub, c1: 3 subs, c2: 2 subs, c3: none; c3 publishes the most
        for i, n in enumerate((1, 3, 2, 0)):
            for k in range(n):
                await ncs[i].subscribe(f"s{i}.{k}")
            await ncs[i].flush()
        for i, n in enumerate((1, 0, 2, 5)):
            for _ in range(n):
                await ncs[i].publish("nobody", b"abc" * (i + 1))
            await ncs[i].flush()

        async def names(q: str) -> list[str]:
            return [ci["name"] for ci in (await mon.json("/connz" + q))["connections"]]

        assert await names("") == ["c0", "c1", "c2", "c3"]
        assert await names("?sort=cid") == ["c0", "c1", "c2", "c3"]
        assert await names("?sort=start") == ["c0", "c1", "c2", "c3"]
        assert await names("?sort=subs") == ["c1", "c2", "c0", "c3"]
        assert await names("?sort=msgs_from") == ["c3", "c2", "c0", "c1"]
        assert (await names("?sort=bytes_from"))[:2] == ["c3", "c2"]
        assert (await names("?sort=uptime"))[0] == "c3"  # ascending: the youngest first
        for s in ("rtt", "pending", "msgs_to", "bytes_to", "last", "idle"):
            assert sorted(await names(f"?sort={s}")) == ["c0", "c1", "c2", "c3"]

        c = await mon.json("/connz?sort=subs&limit=2&offset=1")
        assert [ci["name"] for ci in c["connections"]] == ["c2", "c0"]
        assert (c["num_connections"], c["total"], c["offset"], c["limit"]) == (2, 4, 1, 2)
        c = await mon.json("/connz?offset=10")
        assert c["connections"] == [] and c["num_connections"] == 0 and c["total"] == 4
        c = await mon.json("/connz?limit=0&offset=-3")
        assert c["limit"] == 1024 and c["offset"] == 0 and c["num_connections"] == 4

        cid = srv.clients[max(srv.clients)].cid
        c = await mon.json(f"/connz?cid={cid}")
        assert c["limit"] == 1 and [ci["cid"] for ci in c["connections"]] == [cid]
        c = await mon.json("/connz?cid=999999")
        assert c["connections"] == [] and c["total"] == 4
        for nc in ncs:
            await nc.close()


async def test_connz_closed_connections() -> None:
    async with running() as (srv, mon):
        keep = await nats.connect(srv.client_url, name="keep")
        gone = await nats.connect(srv.client_url, name="gone")
        await gone.subscribe("a.b")
        await gone.subscribe("q", queue="g")
        await gone.publish("x", b"12345")
        await gone.flush()
        gone_cid = max(srv.clients)
        await gone.close()
        await wait_for(lambda: len(srv.closed_clients) == 1)

        c = await mon.json("/connz")
        assert [ci["name"] for ci in c["connections"]] == ["keep"]
        c = await mon.json("/connz?state=closed")
        assert c["total"] == 1 and c["num_connections"] == 1
        ci = c["connections"][0]
        assert ci["cid"] == gone_cid and ci["name"] == "gone"
        assert ci["reason"] == "Client Closed"
        assert RFC3339.match(ci["stop"])
        keys = list(ci)
        assert keys.index("last_activity") + 1 == keys.index("stop") and keys.index("stop") + 1 == keys.index("reason")
        assert ci["subscriptions"] == 2 and ci["in_msgs"] == 1 and ci["in_bytes"] == 5
        assert not any(k.startswith("_") for k in ci)
        assert "subscriptions_list" not in ci

        c = await mon.json("/connz?state=closed&subs=1")
        assert sorted(c["connections"][0]["subscriptions_list"]) == ["a.b", "q"]
        c = await mon.json("/connz?state=closed&subs=detail")
        det = sorted(c["connections"][0]["subscriptions_list_detail"], key=lambda d: d["subject"])
        assert det[0]["account"] == "$G" and det[0]["subject"] == "a.b" and det[1]["qgroup"] == "g"

        c = await mon.json("/connz?state=any")
        assert [ci["name"] for ci in c["connections"]] == ["keep", "gone"] and c["total"] == 2
        assert "stop" not in c["connections"][0] and "stop" in c["connections"][1]
        c = await mon.json("/connz?state=ALL")
        assert c["total"] == 2
        c = await mon.json("/connz?state=closed&sort=stop")
        assert c["connections"][0]["cid"] == gone_cid
        c = await mon.json("/connz?state=closed&sort=reason")
        assert c["num_connections"] == 1
        c = await mon.json(f"/connz?state=any&cid={gone_cid}")
        assert [ci["cid"] for ci in c["connections"]] == [gone_cid]
        c = await mon.json(f"/connz?cid={gone_cid}")
        assert c["connections"] == []
        await keep.close()


async def test_connz_query_errors() -> None:
    async with running() as (srv, mon):
        cases = {
            "/connz?sort=bogus": "invalid sorting option: bogus",
            "/connz?sort=stop": "sort by stop only valid on closed connections",
            "/connz?sort=reason&state=any": "sort by reason only valid on closed connections",
            "/connz?state=bogus": "Error decoding state for bogus",
            "/connz?limit=abc": "Error decoding int for 'limit': strconv.Atoi: parsing \"abc\": invalid syntax",
            "/connz?offset=1.5": "Error decoding int for 'offset': strconv.Atoi: parsing \"1.5\": invalid syntax",
            "/connz?cid=-1": "Error decoding uint64 for 'cid': strconv.ParseUint: parsing \"-1\": invalid syntax",
            "/connz?subs=maybe": "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"maybe\": "
                                 "invalid syntax",
            "/connz?auth=2": "Error decoding boolean for 'auth': strconv.ParseBool: parsing \"2\": invalid syntax",
        }
        for path, msg in cases.items():
            code, headers, text = await mon.get(path)
            assert code == 400, path
            assert headers["Content-Type"] == "text/plain; charset=utf-8"
            assert text == msg
        v = await mon.json("/varz")
        # like nats-server: counted once the query parameters decoded (the three sort errors come later)
        assert v["http_req_stats"]["/connz"] == 3


async def test_connz_auth_user_and_account_filters() -> None:
    users = [User(username="alice", password="pw1"), User(username="bob", password="pw2", account="B")]
    async with running(mopts(users=users)) as (srv, mon):
        url = srv.client_url.replace("nats://", "")
        a = await nats.connect(f"nats://alice:pw1@{url}", name="a")
        b = await nats.connect(f"nats://bob:pw2@{url}", name="b")
        await b.subscribe("x")
        await b.flush()
        c = await mon.json("/connz")
        assert all("authorized_user" not in ci and "account" not in ci for ci in c["connections"])
        c = await mon.json("/connz?auth=true")
        by = {ci["name"]: ci for ci in c["connections"]}
        assert by["a"]["authorized_user"] == "alice" and "account" not in by["a"]
        assert by["a"]["name_tag"] == "$G"
        assert by["b"]["authorized_user"] == "bob" and by["b"]["account"] == "B"
        c = await mon.json("/connz?user=bob")
        assert [ci["name"] for ci in c["connections"]] == ["b"]
        c = await mon.json("/connz?acc=B")
        assert [ci["name"] for ci in c["connections"]] == ["b"] and c["total"] == 1
        c = await mon.json("/connz?acc=NOPE")
        assert c["connections"] == [] and c["total"] == 0
        c = await mon.json("/connz?mqtt_client=x")
        assert c["connections"] == [] and c["total"] == 2

        acz = await mon.json("/accountz")
        assert sorted(acz["accounts"]) == ["$G", "$SYS", "B"]
        d = (await mon.json("/accountz?acc=B"))["account_detail"]
        # 1 + the 4 system imports (as nats-server)
        assert d["account_name"] == "B" and d["client_connections"] == 1 and d["subscriptions"] == 5
        assert d["sublist_stats"]["num_subscriptions"] == 5
        code, _, text = await mon.get("/accountz?acc=NOPE")
        assert code == 400 and text == "Account NOPE does not exist"

        st = await mon.json("/accstatz")
        assert sorted(s["acc"] for s in st["account_statz"]) == ["$G", "B"]
        await a.close()
        await b.close()


# ---- /subsz -------------------------------------------------------------------------------------------

SUBSZ_KEYS = ["server_id", "now", "num_subscriptions", "num_cache", "num_inserts", "num_removes", "num_matches",
              "cache_hit_rate", "max_fanout", "avg_fanout", "total", "offset", "limit"]


async def test_subsz() -> None:
    async with running() as (srv, mon):
        nc = await nats.connect(srv.client_url)
        await nc.subscribe("foo.*")
        await nc.subscribe("foo.bar", queue="q")
        await nc.subscribe("baz")
        await nc.flush()
        for _ in range(3):
            await nc.publish("foo.bar", b"x")
        await nc.flush()

        s = await mon.json("/subsz")
        assert list(s) == SUBSZ_KEYS  # no list unless asked for
        # nats-server v2.15.1 counts the same: $SYS's 56 internal subscriptions, $G's 4 system imports
        assert s["num_subscriptions"] == SYSTEM_SUBS + 3 and s["num_inserts"] == SYSTEM_SUBS + 3 and s["total"] == 0
        assert s["num_matches"] >= 3 and isinstance(s["cache_hit_rate"], (int, float))
        assert s["max_fanout"] == 2 and s["limit"] == 1024

        s = await mon.json("/subsz?subs=1&acc=$G")
        assert s["total"] == 7 and len(s["subscriptions_list"]) == 7  # with the 4 system imports
        d = next(x for x in s["subscriptions_list"] if x["subject"] == "foo.bar")
        assert list(d) == ["account", "account_tag", "subject", "qgroup", "sid", "msgs", "cid"]
        assert d["account"] == "$G" and d["qgroup"] == "q" and d["msgs"] == 3

        s = await mon.json("/subsz?subs=1&test=foo.bar")
        assert s["total"] == 2 and sorted(x["subject"] for x in s["subscriptions_list"]) == ["foo.*", "foo.bar"]
        s = await mon.json("/subsz?subs=1&test=nothing.here")
        assert s["total"] == 0 and "subscriptions_list" not in s
        s = await mon.json("/subsz?subs=1&limit=1&offset=1&acc=$G")
        assert s["total"] == 7 and len(s["subscriptions_list"]) == 1 and s["offset"] == 1
        s = await mon.json("/subscriptionsz?subs=true&acc=$G")
        assert s["total"] == 7
        s = await mon.json("/subsz?subs=1&acc=OTHER")
        assert s["total"] == 0 and s["num_subscriptions"] == 0

        for bad in ("foo.*", "foo.>", "foo..bar"):
            code, headers, text = await mon.get(f"/subsz?test={bad}")
            assert code == 400 and text == f"invalid test subject, must be valid publish subject: {bad}"
        code, _, text = await mon.get("/subsz?subs=x")
        assert code == 400 and text.startswith("Error decoding boolean for 'subs'")
        v = await mon.json("/varz")
        assert v["http_req_stats"]["/subsz"] == 11  # /subscriptionsz counts as /subsz, errors included
        await nc.close()


# ---- /healthz, /jsz -----------------------------------------------------------------------------------

async def test_healthz() -> None:
    log_out = io.StringIO()
    async with running(log=Logger(out=log_out)) as (srv, mon):
        for q in ("", "?js-enabled-only=true", "?js-server-only=1", "?js-meta-only=true", "?details=true",
                  "?account=$G"):
            code, headers, text = await mon.get("/healthz" + q)
            assert (code, text) == (200, '{"status":"ok"}'), q
            assert headers["Content-Type"] == "application/json"
        code, _, text = await mon.get("/healthz?stream=S")
        assert code == 400
        assert text == '{"status":"error","error":"\\"account\\" must not be empty when checking stream health"}'
        code, _, text = await mon.get("/healthz?stream=S&details=1")
        assert code == 400
        assert text == ('{"status":"error","errors":[{"type":"BAD_REQUEST","error":"\\"account\\" must not be '
                        'empty when checking stream health"}]}')
        code, _, text = await mon.get("/healthz?consumer=C&account=A")
        assert code == 400 and "\\\"stream\\\" must not be empty when checking consumer health" in text
        code, headers, text = await mon.get("/healthz?js-enabled-only=yes")
        assert code == 400 and headers["Content-Type"] == "text/plain; charset=utf-8"
        assert text == "Error decoding boolean for 'js-enabled-only': strconv.ParseBool: parsing \"yes\": invalid syntax"
    assert "[WRN] Healthcheck failed: " in log_out.getvalue()


async def test_healthz_jsz_varz_with_jetstream_running(tmp_path) -> None:
    import nats
    o = mopts()
    o.jetstream.enabled = True
    o.jetstream.store_dir = str(tmp_path)
    async with running(o) as (srv, mon):
        assert srv.jetstream is not None
        code, _, text = await mon.get("/healthz")
        assert (code, text) == (200, '{"status":"ok"}')
        code, _, text = await mon.get("/healthz?js-enabled-only=true")
        assert code == 200
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="M", subjects=["m.>"])
        for i in range(3):
            await js.publish("m.x", b"hello")
        j = await mon.json("/jsz")
        assert j["streams"] == 1 and j["messages"] == 3 and j["bytes"] > 0
        assert j["config"]["store_dir"].startswith(str(tmp_path))
        assert j["storage"] > 0 and j["memory"] == 0
        v = await mon.json("/varz")
        assert v["jetstream"]["config"]["store_dir"].startswith(str(tmp_path))
        await nc.close()


async def test_jsz_disabled_shape() -> None:
    async with running() as (srv, mon):
        j = await mon.json("/jsz")
        assert list(j) == ["memory", "storage", "reserved_memory", "reserved_storage", "accounts", "ha_assets",
                           "api", "server_id", "now", "disabled", "config", "streams", "consumers", "messages",
                           "bytes", "total"]
        assert j["api"] == {"level": 0, "total": 0, "errors": 0}
        assert j["config"] == {"max_memory": 0, "max_storage": 0}
        code, _, text = await mon.get("/jsz?accounts=nope")
        assert code == 400 and "Error decoding boolean for 'accounts'" in text
        code, _, text = await mon.get("/jsz?leader-only=true")
        assert code == 400 and text == "filtered response: not leader"


class FakeJetStream:
    """A JetStream subsystem as the server and its monitoring see it (rillet.server.subsystems.JetStreamService)."""

    def __init__(self) -> None:
        self.jsz_calls: list[dict] = []
        self.accounts: dict[str, Any] = {"$G": None}

    async def start(self) -> None:
        pass

    def is_enabled(self) -> bool:
        return True

    def config_dict(self) -> dict:
        return {"max_memory": 7, "max_storage": 8, "store_dir": "/fake"}

    def stats_dict(self) -> dict:
        return {"memory": 1, "storage": 2, "api": {"level": 5, "total": 9, "errors": 1}}

    def limits_dict(self) -> dict:
        return {"max_ack_pending": 3}

    def jsz(self, opts: dict) -> dict:
        self.jsz_calls.append(opts)
        return {"memory": 1, "storage": 2, "streams": 3}

    def signal_pull_requests(self) -> int:
        return 0

    async def shutdown(self) -> None:
        pass

    def healthz(self, opts: dict) -> dict:
        if opts["stream"] == "BAD":
            return {"status": "unavailable", "error": "JetStream stream 'A > BAD' could not be recovered"}
        return {"status": "ok"}


async def test_jetstream_hook(tmp_path: Any) -> None:
    o = mopts()
    o.jetstream.enabled = True
    o.jetstream.store_dir = str(tmp_path)
    o.jetstream.max_memory_store = 1 << 30
    async with running(o) as (srv, mon):
        real, srv.jetstream = srv.jetstream, FakeJetStream()
        await real.shutdown()
        v = await mon.json("/varz")
        js = v["jetstream"]
        fake = srv.jetstream
        assert js == {"config": fake.config_dict(), "stats": fake.stats_dict(), "limits": fake.limits_dict()}
        j = await mon.json("/jsz?consumers=1&acc=A&limit=5")
        assert j == {"memory": 1, "storage": 2, "streams": 3}
        opts = srv.jetstream.jsz_calls[-1]
        assert opts["consumers"] and opts["streams"] and opts["acc"] == "A" and opts["limit"] == 5
        assert not opts["accounts"]
        code, _, text = await mon.get("/healthz")
        assert (code, text) == (200, '{"status":"ok"}')
        code, _, text = await mon.get("/healthz?account=A&stream=BAD")
        assert code == 503 and "could not be recovered" in text
        d = (await mon.json("/accountz?acc=$G"))["account_detail"]
        assert d["jetstream_enabled"] is True


# ---- other endpoints ----------------------------------------------------------------------------------

async def test_cluster_side_endpoints_are_empty() -> None:
    async with running() as (srv, mon):
        r = await mon.json("/routez")
        assert list(r) == ["server_id", "server_name", "now", "num_routes", "routes"]
        assert r["num_routes"] == 0 and r["routes"] == []
        g = await mon.json("/gatewayz")
        assert g["outbound_gateways"] == {} and g["inbound_gateways"] == {} and "name" not in g
        lf = await mon.json("/leafz?subs=true")
        assert list(lf) == ["server_id", "now", "leafnodes", "leafs"] and lf["leafs"] == []
        code, _, _ = await mon.get("/routez?subs=x")
        assert code == 400
        assert await mon.json("/ipqueuesz?all=1") == {}
        code, headers, text = await mon.get("/raftz")
        assert (code, text) == (404, "No Raft nodes registered")


async def test_accstatz() -> None:
    async with running() as (srv, mon):
        st = await mon.json("/accstatz")
        assert st["account_statz"] == []  # accounts without connections are left out...
        st = await mon.json("/accstatz?unused=1")
        assert sorted(s["acc"] for s in st["account_statz"]) == ["$G", "$SYS"]  # ...unless asked for
        nc = await nats.connect(srv.client_url)
        await nc.subscribe("x")
        await nc.flush()
        await nc.publish("x", b"abcd")
        await nc.flush()
        s = (await mon.json("/accstatz"))["account_statz"][0]
        assert list(s) == ["acc", "name", "conns", "leafnodes", "total_conns", "num_subscriptions", "sent",
                           "received", "slow_consumers"]
        assert (s["conns"], s["total_conns"], s["num_subscriptions"]) == (1, 1, 5)  # + 4 system imports
        assert s["received"]["msgs"] == 1 and s["received"]["bytes"] == 4 and s["sent"]["msgs"] == 1
        assert s["sent"]["routes"] == {"msgs": 0, "bytes": 0}
        await nc.close()
        await wait_for(lambda: not srv.clients)
        s = next(s for s in (await mon.json("/accstatz?unused=true"))["account_statz"] if s["acc"] == "$G")
        assert s["conns"] == 0 and s["received"]["msgs"] == 1  # closed connections still count


async def test_root_404_jsonp_cors_and_text_endpoints() -> None:
    async with running() as (srv, mon):
        code, headers, text = await mon.get("/")
        assert code == 200 and headers["Content-Type"].startswith("text/html")
        for p in ("/varz", "/connz", "/subsz", "/healthz", "/jsz", "/accountz", "/debug/vars"):
            assert f'href="{p}"' in text
        for p in ("/nope", "/varz/", "/varz/x", "/expvarz", "/connzz"):
            code, headers, text = await mon.get(p)
            assert (code, text) == (404, "404 page not found\n"), p
            assert headers["Content-Type"] == "text/plain; charset=utf-8"
        code, headers, text = await mon.get("/varz")
        assert headers["Access-Control-Allow-Origin"] == "*"
        code, headers, text = await mon.get("/varz?callback=myFn")
        assert code == 200 and headers["Content-Type"] == "application/javascript"
        assert text.startswith("myFn({\n") and text.endswith("})")
        code, headers, text = await mon.get("/healthz?callback=cb")
        assert text == 'cb({"status":"ok"})'
        async with mon.session.post(mon.base + "/varz") as r:  # any method, like Go's mux
            assert r.status == 200
        code, headers, text = await mon.get("/stacksz")
        assert code == 200 and "thread" in text and "test_root_404_jsonp_cors_and_text_endpoints" in text
        code, headers, text = await mon.get("/debug/vars")
        assert headers["Content-Type"] == "application/json; charset=utf-8"
        assert '"cmdline": [' in text and '"memstats": {' in text
        v = await mon.json("/varz")
        assert v["http_req_stats"]["/"] == 1
        assert "/stacksz" not in v["http_req_stats"] and "/nope" not in v["http_req_stats"]


async def test_base_path() -> None:
    async with running(mopts(http_base_path="/mon/")) as (srv, mon):
        v = await mon.json("/mon/varz")
        assert v["http_base_path"] == "/mon/"
        await mon.json("/mon/connz")
        code, _, text = await mon.get("/mon")
        assert code == 200 and 'href="/mon/varz"' in text
        code, _, _ = await mon.get("/varz")
        assert code == 404
        code, _, _ = await mon.get("/")
        assert code == 404


async def test_start_log_listener_and_shutdown() -> None:
    out = io.StringIO()
    async with running(log=Logger(out=out)) as (srv, mon):
        host, port = srv.http_addr
        assert host == "127.0.0.1" and port > 0
        assert f"[INF] Starting http monitor on 127.0.0.1:{port}\n" in out.getvalue()
        assert any(type(x).__name__ == "MonitorListener" for x in srv.extra_listeners)
    # after shutdown the port is closed
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/varz"):
                pass


async def test_both_ports_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"can't specify both HTTP \(-1\) and HTTPs \(-1\) ports"):
        async with running(mopts(https_port=-1)):
            pass


async def test_https_monitor(tmp_path: Any) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-keyout", str(key), "-out", str(cert)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("openssl not available")
    out = io.StringIO()
    o = mopts(http_port=0, https_port=-1, tls=TLSConfig(cert_file=str(cert), key_file=str(key)),
              allow_non_tls=True)
    async with running(o, log=Logger(out=out)) as (srv, _):
        assert srv.http_addr is None and srv.https_addr[1] > 0
        assert f"Starting https monitor on 127.0.0.1:{srv.https_addr[1]}" in out.getvalue()
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        async with aiohttp.ClientSession() as s:
            mon = Mon(srv, s, "https")
            code, _, text = await mon.get("/healthz", ssl=ctx)
            assert (code, text) == (200, '{"status":"ok"}')
            v = await mon.get("/varz", ssl=ctx)
            assert '"https_port": -1' in v[2]
