"""The super-cluster health view (Rillet-specific): ``rillet.monitor.superz`` (the pure aggregation over
hand-made ``$SYS`` replies), the ``/superz`` endpoint and ``rillet health`` against live in-process
topologies (a super-cluster of two 2-server clusters; a 3-server JetStream cluster)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import nats
import pytest

from rillet.config.options import User
from rillet.monitor import superz
from rillet.monitor.superz import Collector, Thresholds, aggregate, text_view
from rillet.app.embed import run_cluster, run_super_cluster

USERS = [User(username="sys", password="sys", account="SYS"), User(username="a", password="a")]
MS = 1_000_000

# ---------------------------------------------------------------------------------------------------
# Hand-made replies, in the shapes nats-server (and Rillet) answer on $SYS.REQ.SERVER.PING.<KIND>


def server(name: str, cluster: str, *, js: bool = False, gw_out=(), gw_in=None, gw_conf=(), meta=None,
           streams=(), health="ok", skip=()) -> dict:
    """One server's replies, per kind. ``meta``: the /jsz meta_cluster; ``streams``: stream_detail entries
    of account APP; ``skip``: kinds it does not answer."""
    info = {"name": name, "host": "127.0.0.1", "id": "N" + name.replace("-", "").upper().ljust(55, "X"),
            "cluster": cluster, "ver": "2.15.1", "jetstream": js, "seq": 1}
    out: dict = {
        "STATSZ": {"server": info, "statsz": {"connections": 2, "subscriptions": 10}},
        "VARZ": {"server": info, "data": {"server_name": name, "gateway": {
            "name": cluster, "gateways": [{"name": g, "urls": ["127.0.0.1:1"]} for g in gw_conf]}}},
        "GATEWAYZ": {"server": info, "data": {
            "name": cluster, "outbound_gateways": {g: {"configured": g in gw_conf, "connection": {"name": "N"}}
                                                   for g in gw_out},
            "inbound_gateways": {g: [{"connection": {"name": "N"}}] * n for g, n in (gw_in or {}).items()}}},
        "HEALTHZ": {"server": info, "data": {"status": health, "status_code": 200 if health == "ok" else 503,
                                             **({} if health == "ok" else {"error": "JetStream not current"})}},
    }
    jsz: dict = {"server_id": info["id"], "streams": len(streams)}
    if meta is not None:
        jsz["meta_cluster"] = meta
    if streams:
        jsz["account_details"] = [{"name": "APP", "id": "APP", "stream_detail": list(streams)}]
    out["JSZ"] = {"server": info, "data": jsz}
    for k in skip:
        out.pop(k)
    return out


def replies(*servers: dict) -> dict:
    r: dict = {k: [] for k in superz.KINDS}
    for s in servers:
        for k, v in s.items():
            r[k].append(v)
    return r


def meta(me: str, leader: str, peers: list[str], *, offline=(), size=3) -> dict:
    return {"name": "A", "leader": leader, "peer": "p" + leader if leader else "",
            "replicas": [{"name": p, "current": True, "active": 0, "peer": "p" + p,
                          **({"offline": True} if p in offline else {})} for p in peers if p != me],
            "cluster_size": size, "quorum_needed": size // 2 + 1}


def stream(name: str, leader: str, others: list[str], *, r=3, offline=(), inactive=(), mirror=None,
           sources=None) -> dict:
    reps = [{"name": p, "current": p not in offline, "active": 10 * 1000 * MS if p in inactive else 50 * MS,
             "peer": "p" + p, **({"offline": True} if p in offline else {})} for p in others]
    sd: dict = {"name": name, "created": "2026-01-01T00:00:00Z",
                "cluster": {"name": "A", "raft_group": "S-" + name, **({"leader": leader} if leader else {}),
                            "replicas": reps},
                "config": {"name": name, "num_replicas": r}, "state": {"messages": 5}}
    if mirror is not None:
        sd["mirror"] = mirror
    if sources is not None:
        sd["sources"] = sources
    return sd


A3 = ["A-0", "A-1", "A-2"]


def healthy_topology(**over) -> list[dict]:
    """Cluster A (3 JetStream servers, meta leader A-0, stream ORDERS R3 led by A-1, mirror M R1 on A-2),
    cluster B (2 servers), gateways up both ways."""
    orders = {n: stream("ORDERS", "A-1", [p for p in A3 if p != n]) for n in A3}
    mirror = stream("M", "A-2", [], r=1, mirror={"name": "ORDERS", "lag": 0, "active": 400 * MS})
    a = [server(n, "A", js=True, gw_out=["B"], gw_in={"B": 1}, meta=meta(n, "A-0", A3),
                streams=[orders[n]] + ([mirror] if n == "A-2" else [])) for n in A3]
    b = [server(n, "B", gw_out=["A"], gw_in={"A": 2 if n == "B-0" else 1}, gw_conf=["A"]) for n in ("B-0", "B-1")]
    return a + b


def test_healthy_super_cluster():
    h = aggregate(replies(*healthy_topology()))
    assert h["healthy"] and h["problems"] == [], h["problems"]
    assert (h["servers_up"], h["servers_down"]) == (5, 0)
    assert list(h["clusters"]) == ["A", "B"]
    a, b = h["clusters"]["A"], h["clusters"]["B"]
    assert [s["name"] for s in a["servers"]] == A3 and all(s["up"] and s["healthz"] == "ok" for s in a["servers"])
    assert a["gateways"] == {"B": {"state": "up", "outbound": 3, "servers": 3, "inbound": 3}}
    assert b["gateways"] == {"A": {"state": "up", "outbound": 2, "servers": 2, "inbound": 3}}
    assert a["meta"] == {"leader": "A-0", "agreed": True, "cluster_size": 3, "quorum_needed": 2, "peers_up": 3,
                         "peers_down": [], "has_quorum": True, "clusters": ["A"]}
    assert "meta" not in b  # no JetStream there
    assert a["streams"] == {"total": 2, "unhealthy": []}
    assert a["sources"] == [{"account": "APP", "stream": "M", "cluster": "A", "kind": "mirror", "origin": "ORDERS",
                             "lag": 0, "active": 400 * MS, "problems": []}]
    text = text_view(h)
    assert text.startswith("Super-cluster: healthy, 5 servers up, 0 down")
    assert "Cluster A: ok, 3 servers up, 0 down; meta leader A-0 (3/3 up, quorum 2); streams 2 (0 unhealthy)" in text
    assert "Problems:" not in text


def test_gateway_down_partial_and_unreachable_cluster():
    servers = healthy_topology()
    # A-1 lost its outbound gateway to B; B's servers both lost theirs to A; B-1 is configured with a
    # cluster C of which no server answers
    servers[1]["GATEWAYZ"]["data"]["outbound_gateways"] = {}
    for s in servers[3:]:
        s["GATEWAYZ"]["data"]["outbound_gateways"] = {}
    servers[4]["VARZ"]["data"]["gateway"]["gateways"].append({"name": "C", "urls": ["127.0.0.1:2"]})
    h = aggregate(replies(*servers))
    assert not h["healthy"]
    a, b, c = h["clusters"]["A"], h["clusters"]["B"], h["clusters"]["C"]
    assert a["gateways"]["B"] == {"state": "partial", "outbound": 2, "servers": 3, "inbound": 3,
                                  "missing_on": ["A-1"]}
    assert a["gateways"]["C"]["state"] == "down"
    assert b["gateways"]["A"]["state"] == "down" and b["gateways"]["C"]["state"] == "down"
    assert c["servers"] == [] and c["gateways"] == {} and not c["healthy"]
    assert h["problems"] == ["A: gateway to B is down on A-1", "A: gateway to C is down",
                             "B: gateway to A is down", "B: gateway to C is down",
                             "C: no server of this cluster answered"]
    text = text_view(h)
    assert "  B        partial  2/3       3        A-1" in text and "  - C: no server of this cluster answered" in text


def test_meta_leader_missing_disagreeing_and_without_quorum():
    servers = healthy_topology()
    for n, s in zip(A3, servers):
        s["JSZ"]["data"]["meta_cluster"] = meta(n, "", A3)
    h = aggregate(replies(*servers))
    m = h["clusters"]["A"]["meta"]
    assert m["leader"] == "" and not m["has_quorum"]
    assert "A: no meta leader" in h["problems"]
    # two servers follow A-0, one names A-2
    servers = healthy_topology()
    servers[1]["JSZ"]["data"]["meta_cluster"]["leader"] = "A-2"
    h = aggregate(replies(*servers))
    assert h["clusters"]["A"]["meta"]["leader"] == "A-0" and not h["clusters"]["A"]["meta"]["agreed"]
    assert h["problems"] == ["A: servers disagree on the meta leader: A-0 says A-0, A-1 says A-2, A-2 says A-0"]
    # only the leader answers, and it marks both peers offline: quorum lost, both shown down
    leader_only = server("A-0", "A", js=True, meta=meta("A-0", "A-0", A3, offline=["A-1", "A-2"]))
    h = aggregate(replies(leader_only))
    a = h["clusters"]["A"]
    assert a["meta"]["peers_up"] == 1 and a["meta"]["peers_down"] == ["A-1", "A-2"] and not a["meta"]["has_quorum"]
    assert [(s["name"], s["up"], s.get("known_from")) for s in a["servers"]] == [
        ("A-0", True, None), ("A-1", False, "meta"), ("A-2", False, "meta")]
    assert h["problems"] == ["A: server A-1 is not answering (a meta group peer)",
                             "A: server A-2 is not answering (a meta group peer)",
                             "A: meta group has lost quorum: 1 of 3 peers up, 2 needed"]
    # a peer the leader heard from recently but that does not answer the gather is down (and the other
    # way round: answering, but not heard from by the leader)
    h = aggregate(replies(server("A-0", "A", js=True, meta=meta("A-0", "A-0", A3))))
    assert not h["clusters"]["A"]["meta"]["has_quorum"] and h["clusters"]["A"]["meta"]["peers_up"] == 1
    m0 = meta("A-0", "A-0", A3)
    m0["replicas"][0]["active"] = 30 * 1000 * MS
    h = aggregate(replies(*(server(n, "A", js=True, meta=m0 if n == "A-0" else meta(n, "A-0", A3)) for n in A3)))
    assert h["clusters"]["A"]["meta"]["peers_up"] == 2 and h["clusters"]["A"]["meta"]["peers_down"] == ["A-1"]
    assert h["clusters"]["A"]["meta"]["has_quorum"] and h["healthy"]
    # the named leader does not answer
    h = aggregate(replies(server("A-1", "A", js=True, meta=meta("A-1", "A-0", A3, offline=["A-0"]))))
    assert "A: meta leader A-0 does not answer" in h["problems"]


def test_meta_group_spanning_two_clusters():
    ab = ["A-0", "A-1", "B-0", "B-1"]

    def node(n, *, offline=(), gw=True):
        c = n[0]
        return server(n, c, js=True, gw_out=["B" if c == "A" else "A"] if gw else [],
                      meta=meta(n, "B-0", ab, offline=offline, size=4))
    h = aggregate(replies(*(node(n) for n in ab)))
    assert h["healthy"], h["problems"]
    for c in ("A", "B"):  # one group, shown with each cluster
        m = h["clusters"][c]["meta"]
        assert (m["leader"], m["peers_up"], m["cluster_size"], m["quorum_needed"], m["clusters"]) == (
            "B-0", 4, 4, 3, ["A", "B"]) and m["has_quorum"]
    # B-1 stops: its cluster is not known (no memory), the group spans two clusters
    h = aggregate(replies(*(node(n, offline=["B-1"]) for n in ab[:3])))
    assert h["servers_not_placed"] == [{"name": "B-1", "up": False, "known_from": "meta"}]
    assert h["problems"] == ["A, B: server B-1 is not answering (a meta group peer)"]
    assert h["clusters"]["A"]["meta"]["has_quorum"] and not h["clusters"]["A"]["healthy"]
    assert h["servers_down"] == 1
    # ...known from an earlier gather: shown in cluster B; then B-0 (the leader) stops too: no quorum
    known = {"B-1": {"cluster": "B", "last_seen": "2026-01-01T00:00:00Z"},
             "B-0": {"cluster": "B", "last_seen": "2026-01-01T00:00:00Z"}}
    h = aggregate(replies(*(node(n, offline=["B-1"]) for n in ab[:3])), known=known)
    assert "servers_not_placed" not in h and [s["name"] for s in h["clusters"]["B"]["servers"]] == ["B-0", "B-1"]
    h = aggregate(replies(*(node(n, offline=["B-0", "B-1"], gw=False) for n in ab[:2])), known=known)
    assert h["problems"] == ["A: meta leader B-0 does not answer",  # (the group as its answering servers see it)
                             "A: gateway to B is down",  # (B known from the earlier gather only)
                             "B: server B-0 is not answering (seen 2026-01-01T00:00:00Z)",
                             "B: server B-1 is not answering (seen 2026-01-01T00:00:00Z)",
                             "B: no server of this cluster answered"]
    assert not h["clusters"]["A"]["meta"]["has_quorum"]


def test_stream_lost_quorum_and_no_leader():
    # the leader's view: both other replicas offline
    sd = stream("ORDERS", "A-1", ["A-0", "A-2"], offline=["A-0", "A-2"])
    h = aggregate(replies(server("A-1", "A", js=True, meta=meta("A-1", "A-1", A3), streams=[sd])))
    (bad,) = h["clusters"]["A"]["streams"]["unhealthy"]
    assert bad == {"account": "APP", "stream": "ORDERS", "cluster": "A", "replicas": 3, "leader": "A-1",
                   "replicas_up": 1, "quorum_needed": 2, "problems": ["lost quorum: 1 of 3 replicas up, 2 needed"]}
    assert "A: stream APP > ORDERS: lost quorum: 1 of 3 replicas up, 2 needed" in h["problems"]
    # a replica counts when it answers the gather holding the stream and the leader heard from it lately
    sd = stream("ORDERS", "A-1", ["A-0", "A-2"], inactive=["A-2"])
    a0 = server("A-0", "A", js=True, streams=[stream("ORDERS", "A-1", ["A-1", "A-2"])])
    a2 = server("A-2", "A", js=True, streams=[stream("ORDERS", "A-1", ["A-0", "A-1"])])
    h = aggregate(replies(server("A-1", "A", js=True, streams=[sd]), a0))
    assert h["clusters"]["A"]["streams"] == {"total": 1, "unhealthy": []}
    h = aggregate(replies(server("A-1", "A", js=True, streams=[sd]), a2))  # answers, but the leader lost it
    assert h["clusters"]["A"]["streams"]["unhealthy"][0]["replicas_up"] == 1
    h = aggregate(replies(server("A-1", "A", js=True, streams=[stream("ORDERS", "A-1", ["A-0", "A-2"])])))
    assert h["clusters"]["A"]["streams"]["unhealthy"][0]["replicas_up"] == 1  # heard lately, not answering
    # no replica knows a leader; two of three answer
    h = aggregate(replies(*(server(n, "A", js=True, streams=[stream("ORDERS", "", [p for p in A3 if p != n])])
                            for n in ("A-0", "A-2"))))
    (bad,) = h["clusters"]["A"]["streams"]["unhealthy"]
    assert bad["leader"] == "" and bad["replicas_up"] == 2 and bad["problems"] == ["no leader"]
    # only one answers: no leader and no quorum; a named leader that does not answer is said so
    h = aggregate(replies(server("A-0", "A", js=True, streams=[stream("ORDERS", "A-2", ["A-1", "A-2"])])))
    assert h["clusters"]["A"]["streams"]["unhealthy"][0]["problems"] == [
        "leader A-2 does not answer", "lost quorum: 1 of 3 replicas up, 2 needed"]


def test_source_and_mirror_lag_errors_and_activity():
    srcs = [{"name": "W", "lag": 5000, "active": 200 * MS},
            {"name": "E", "lag": 0, "active": 200 * MS, "external": {"api": "$JS.east.API", "deliver": ""}},
            {"name": "C", "lag": 3, "active": -1},
            {"name": "N", "lag": 0, "active": 90 * 1000 * MS,
             "error": {"code": 503, "err_code": 10058, "description": "stream not found"}}]
    sd = stream("READ", "A-0", [], r=1, sources=srcs)
    rep = replies(server("A-0", "A", js=True, streams=[sd]))
    h = aggregate(rep)
    got = {s["origin"]: s for s in h["clusters"]["A"]["sources"]}
    assert got["W"]["problems"] == ["lagging 5000 messages (more than 1000)"]
    assert got["E"]["problems"] == [] and got["E"]["external_api"] == "$JS.east.API"
    assert got["C"]["problems"] == ["never active"]
    assert got["N"]["problems"] == ["error: stream not found", "inactive for 1m30s"]
    assert got["N"]["error"]["err_code"] == 10058
    assert "A: source W of APP > READ: lagging 5000 messages (more than 1000)" in h["problems"]
    # thresholds are options
    h = aggregate(rep, thresholds=Thresholds(max_lag=10_000, max_inactive_ns=120 * 1000 * MS))
    got = {s["origin"]: s for s in h["clusters"]["A"]["sources"]}
    assert got["W"]["problems"] == [] and got["N"]["problems"] == ["error: stream not found"]
    assert h["thresholds"] == {"max_lag": 10_000, "max_inactive": 120 * 1000 * MS}
    # a lagging mirror
    sd = stream("M", "A-0", [], r=1, mirror={"name": "ORDERS", "lag": 2001, "active": 0})
    h = aggregate(replies(server("A-0", "A", js=True, streams=[sd])), thresholds=Thresholds(max_lag=2000))
    assert h["problems"] == ["A: mirror ORDERS of APP > M: lagging 2001 messages (more than 2000)"]
    assert "  APP > M  mirror  ORDERS  2001  0s      lagging 2001 messages (more than 2000)" in text_view(h)


def test_servers_known_before_partial_answers_and_failed_health_checks():
    s0 = server("A-0", "A", health="unavailable")
    s1 = server("A-1", "A", skip=["VARZ", "GATEWAYZ"])
    rep = replies(s0, s1)
    rep["VARZ"].append({"server": s1["STATSZ"]["server"], "error": {"code": 500, "description": "boom"}})
    h = aggregate(rep, known={"A-2": {"cluster": "A", "id": "NX", "last_seen": "2026-01-01T00:00:00Z"},
                              "A-0": {"cluster": "A", "id": "N0", "last_seen": "2026-01-01T00:00:00Z"}})
    a = h["clusters"]["A"]
    assert [(s["name"], s["up"]) for s in a["servers"]] == [("A-0", True), ("A-1", True), ("A-2", False)]
    assert a["servers"][1]["missing_answers"] == ["VARZ", "GATEWAYZ"]
    assert h["problems"] == ["A: server A-0 health check: unavailable (JetStream not current)",
                             "A: server A-1 did not answer VARZ, GATEWAYZ (VARZ: boom)",
                             "A: server A-2 is not answering (seen 2026-01-01T00:00:00Z)"]
    assert (h["servers_up"], h["servers_down"]) == (2, 1)
    # a server without JetStream need not answer JSZ; garbage is skipped
    s = server("B-0", "B", skip=["JSZ"])
    rep = replies(s)
    rep["VARZ"] += ["not a dict", {"no": "server"}]
    assert aggregate(rep)["healthy"]


def test_query_options_and_durations():
    assert superz.query_options({}) == (1.0, Thresholds(), False)
    t, th, text = superz.query_options({"timeout": "250ms", "max_lag": "5", "max_inactive": "1m", "format": "text"})
    assert (t, th.max_lag, th.max_inactive_ns, text) == (0.25, 5, 60 * 1000 * MS, True)
    from rillet.gocompat.monitorfmt import QueryError
    for q, err in (({"timeout": "x"}, "invalid timeout duration 'x'"), ({"timeout": "11s"}, "at most 10s"),
                   ({"max_lag": "many"}, "invalid max_lag 'many'"), ({"format": "xml"}, "invalid format 'xml'"),
                   ({"max_inactive": "5q"}, "invalid max_inactive duration '5q'")):
        with pytest.raises(QueryError, match=err):
            superz.query_options(q)
    assert superz.parse_duration("1h2m3.5s", "x") == 3723.5 and superz.parse_duration("2", "x") == 2.0


async def test_collector_waits_for_every_kind_then_a_pause():
    col = Collector()
    info = {"name": "A-0", "jetstream": False}
    for k in ("STATSZ", "VARZ", "GATEWAYZ"):
        col.add(k, json.dumps({"server": info, "data": {}}).encode())
    assert not col.complete()
    col.add("HEALTHZ", json.dumps({"server": info, "data": {"status": "ok"}}).encode())
    assert col.complete()  # (no JSZ needed from a server without JetStream)
    col.add("VARZ", b"garbage")
    assert col.bad == 1
    t = time.monotonic()
    await col.wait(5.0, quiet=0.1)
    assert 0.05 <= time.monotonic() - t < 1.0
    # an expected server that does not answer: the wait lasts until the timeout
    col = Collector(expected=["A-0", "A-9"])
    for k in superz.KINDS:
        col.add(k, json.dumps({"server": info, "data": {}}).encode())
    t = time.monotonic()
    await col.wait(0.4, quiet=0.05)
    assert time.monotonic() - t < 0.3  # (complete, then the quiet pause: A-9 is not waited for past it)


# ---------------------------------------------------------------------------------------------------
# Live


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def _superz(srv, query: str = "") -> tuple[int, dict]:
    code, body = await asyncio.to_thread(_get, srv.http_addr[1], "/superz" + query)
    return code, json.loads(body)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    env.update(RILLET_CONFIG_DIR="/nonexistent-rillet-config", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "rillet.cli", *args], capture_output=True, text=True,
                          timeout=30, env=env)


def _url(srv, user: str) -> str:
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


async def test_live_super_cluster_endpoint_and_cli():
    async with run_super_cluster(2, 2, system_account="SYS", users=USERS, http_port=-1) as (a, b):
        code, h = await _superz(b[0])
        assert code == 200 and h["healthy"], h["problems"]
        assert h["server_name"] == "B-0" and h["servers_up"] == 4
        for c, other in (("A", "B"), ("B", "A")):
            cd = h["clusters"][c]
            assert [s["name"] for s in cd["servers"]] == [f"{c}-0", f"{c}-1"]
            assert cd["gateways"] == {other: {"state": "up", "outbound": 2, "servers": 2, "inbound": 2}}
        r = await asyncio.to_thread(_cli, "health", "--server", _url(b[0], "sys"), "--wait", "3s")
        assert r.returncode == 0, r
        assert r.stdout.startswith("Super-cluster: healthy, 4 servers up, 0 down") and "Cluster B: ok" in r.stdout
        r = await asyncio.to_thread(_cli, "health", "--server", _url(b[0], "a"), "--timeout", "1s")
        assert r.returncode == 2 and "need" in r.stderr and "system account" in r.stderr, r
        r = await asyncio.to_thread(_cli, "health", "--server", _url(b[0], "sys"), "--max-lag", "-1")
        assert (r.returncode, r.stderr) == (2, "rillet: error: --max-lag must not be negative\n"), r

        for s in a:  # cluster A goes away
            await s.shutdown()
        code, body = await asyncio.to_thread(_get, b[0].http_addr[1], "/superz?format=text")
        assert code == 503
        assert "Cluster A: UNHEALTHY, 0 servers up, 2 down" in body and "  - B: gateway to A is down" in body
        code, h = await _superz(b[0])
        assert code == 503 and not h["healthy"]
        assert [(s["name"], s["up"], s["known_from"]) for s in h["clusters"]["A"]["servers"]] == [
            ("A-0", False, "seen"), ("A-1", False, "seen")]
        assert h["clusters"]["B"]["gateways"]["A"]["state"] == "down"
        # the CLI (no memory of earlier gathers) knows cluster A from B's gateway configuration
        r = await asyncio.to_thread(_cli, "health", "--server", _url(b[1], "sys"), "--json")
        assert r.returncode == 1, r
        h = json.loads(r.stdout)
        assert "B: gateway to A is down" in h["problems"] and "A: no server of this cluster answered" in h["problems"]


async def test_live_jetstream_meta_streams_and_sources():
    async with run_cluster(3, jetstream=True, system_account="SYS", users=USERS, http_port=-1) as servers:
        nc = await nats.connect(_url(servers[0], "a"))
        try:
            js = nc.jetstream()
            await js.add_stream(name="O", subjects=["o.>"], num_replicas=3)
            await js.add_stream(name="M", mirror={"name": "O"}, num_replicas=1)
            for i in range(5):
                await js.publish("o.x", str(i).encode())
        finally:
            await nc.close()
        deadline = time.monotonic() + 10
        while True:  # until the mirror caught up
            code, h = await _superz(servers[0])
            cl = h["clusters"]["rillet"]
            got = {s["stream"]: s for s in cl["sources"]}
            if "M" in got and got["M"]["lag"] == 0 and cl["streams"]["total"] == 2 and h["healthy"]:
                break
            assert time.monotonic() < deadline, h
            await asyncio.sleep(0.2)
        m = cl["meta"]
        assert m["leader"] in ("rillet-0", "rillet-1", "rillet-2") and m["agreed"] and m["has_quorum"]
        assert (m["cluster_size"], m["quorum_needed"], m["peers_up"]) == (3, 2, 3)
        assert got["M"]["kind"] == "mirror" and got["M"]["origin"] == "O" and got["M"]["account"] == "$G"
        assert got["M"]["active"] >= 0 and got["M"]["problems"] == [] and code == 200
        # a lag threshold of -1 message makes any mirror "lagging": the threshold is applied
        code, h = await _superz(servers[1], "?max_lag=-1")
        assert code == 503 and any("mirror O of $G > M: lagging 0 messages (more than -1)" in p for p in h["problems"])

        # two of three servers go: the last one sees the meta group and stream O without quorum
        last = servers[2]
        for s in servers[:2]:
            await s.shutdown()
        code, h = await _superz(last)
        assert code == 503
        cl = h["clusters"]["rillet"]
        assert not cl["meta"]["has_quorum"] and cl["servers_down"] == 2
        o = next(s for s in cl["streams"]["unhealthy"] if s["stream"] == "O")
        assert o["replicas"] == 3 and o["replicas_up"] == 1
        assert "lost quorum: 1 of 3 replicas up, 2 needed" in o["problems"], o
        assert "rillet: meta group has lost quorum: 1 of 3 peers up, 2 needed" in h["problems"] or \
            "rillet: no meta leader" in h["problems"], h["problems"]
        assert {s["name"] for s in cl["servers"] if not s["up"]} == {"rillet-0", "rillet-1"}


async def test_live_jetstream_super_cluster():
    """A 2x2 JetStream super-cluster: one meta group over both clusters, a stream in B mirrored into A;
    then cluster B goes away."""
    async with run_super_cluster(2, 2, jetstream=True, system_account="SYS", users=USERS, http_port=-1) as (a, b):
        nc = await nats.connect(_url(a[0], "a"))
        try:
            js = nc.jetstream()
            await js.add_stream(name="O", subjects=["o.>"], num_replicas=2, placement={"cluster": "B"})
            await js.add_stream(name="M", mirror={"name": "O"}, num_replicas=2, placement={"cluster": "A"})
            for i in range(3):
                await js.publish("o.x", str(i).encode())
        finally:
            await nc.close()
        deadline = time.monotonic() + 10
        while True:
            code, h = await _superz(a[0])
            srcs = h["clusters"]["A"]["sources"]
            if code == 200 and srcs and srcs[0]["lag"] == 0 and h["clusters"]["B"]["streams"]["total"] == 1:
                break
            assert time.monotonic() < deadline, h
            await asyncio.sleep(0.1)
        assert h["healthy"] and h["servers_up"] == 4
        ma, mb = h["clusters"]["A"]["meta"], h["clusters"]["B"]["meta"]
        assert ma == mb and ma["clusters"] == ["A", "B"] and ma["cluster_size"] == 4 and ma["has_quorum"]
        assert ma["leader"] in ("A-0", "A-1", "B-0", "B-1") and ma["peers_up"] == 4
        assert [(s["stream"], s["kind"], s["origin"]) for s in srcs] == [("M", "mirror", "O")]

        for s in b:
            await s.shutdown()
        code, h = await _superz(a[0])
        assert code == 503
        assert "A: gateway to B is down" in h["problems"] and "B: no server of this cluster answered" in h["problems"]
        assert [(s["name"], s["up"]) for s in h["clusters"]["B"]["servers"]] == [("B-0", False), ("B-1", False)]
        m = h["clusters"]["A"]["meta"]
        assert not m["has_quorum"] and m["peers_up"] <= 2 and sorted(m["peers_down"]) == ["B-0", "B-1"]


GO_SERVER = shutil.which("nats-server")


@pytest.mark.skipif(GO_SERVER is None, reason="nats-server not on PATH")
async def test_cli_against_a_go_jetstream_cluster():
    """``rillet health`` reads the $SYS answers of Go servers too: a 3-server nats-server JetStream cluster,
    then one server stopped."""
    from tests.helpers import free_port
    store = tempfile.mkdtemp(prefix="go-superz-")
    cports, rports = [free_port() for _ in range(3)], [free_port() for _ in range(3)]
    routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in rports)
    procs = []
    try:
        for i in range(3):
            path = os.path.join(store, f"g{i}.conf")
            with open(path, "w") as f:
                f.write(f"server_name: g{i}\nlisten: 127.0.0.1:{cports[i]}\n"
                        f"jetstream {{ store_dir: \"{store}/d{i}\" }}\n"
                        f"cluster {{ name: G, listen: 127.0.0.1:{rports[i]}, routes: [{routes}] }}\n"
                        "accounts { SYS { users: [{user: sys, password: sys}] }, "
                        "APP { jetstream: enabled, users: [{user: a, password: a}] } }\nsystem_account: SYS\n")
            procs.append(subprocess.Popen([GO_SERVER, "-c", path], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        nc = await nats.connect(f"nats://a:a@127.0.0.1:{cports[0]}", max_reconnect_attempts=-1,
                                reconnect_time_wait=0.1)
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + 20
            while True:  # until the meta group has a leader
                try:
                    await js.add_stream(name="O", subjects=["o.>"], num_replicas=3)
                    break
                except (nats.errors.Error, nats.js.errors.Error):
                    assert time.monotonic() < deadline, "the Go cluster's JetStream did not come up"
                    await asyncio.sleep(0.2)
            await js.add_stream(name="M", mirror={"name": "O"})
            await js.publish("o.x", b"1")
            o = await js.stream_info("O")
        finally:
            await nc.close()
        sys_url = f"nats://sys:sys@127.0.0.1:{cports[0]}"
        deadline = time.monotonic() + 10
        while True:
            r = await asyncio.to_thread(_cli, "health", "--server", sys_url, "--json")
            h = json.loads(r.stdout)
            if r.returncode == 0:
                break
            assert time.monotonic() < deadline, h
            await asyncio.sleep(0.3)
        g = h["clusters"]["G"]
        assert [s["name"] for s in g["servers"]] == ["g0", "g1", "g2"] and g["meta"]["has_quorum"]
        assert g["streams"]["total"] == 2 and [(s["stream"], s["lag"]) for s in g["sources"]] == [("M", 0)]
        # a server that is not the meta leader (nor g0, where the CLI connects) stops; a follower of stream O
        # when there is one (the meta leader and O's leader can be g1 and g2)
        cands = [n for n in ("g1", "g2") if n != g["meta"]["leader"]]
        stop = next((n for n in cands if n != o.cluster.leader), cands[0])
        procs[int(stop[1])].terminate()
        procs[int(stop[1])].wait(5)
        r = await asyncio.to_thread(_cli, "health", "--server", sys_url)
        assert r.returncode == 1, r
        assert f"  - G: server {stop} is not answering (a meta group peer)" in r.stdout, r.stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(store, ignore_errors=True)


async def test_endpoint_on_one_server_query_errors_and_no_system_account(rillet_server_factory):
    srv = rillet_server_factory(http_port=-1, server_name="solo").server
    code, h = await _superz(srv)
    assert code == 200 and h["healthy"] and list(h["clusters"]) == [""], h
    assert [s["name"] for s in h["clusters"][""]["servers"]] == ["solo"] and h["clusters"][""]["gateways"] == {}
    code, body = await asyncio.to_thread(_get, srv.http_addr[1], "/superz?format=text")
    assert code == 200 and "Cluster (none): ok, 1 servers up, 0 down" in body
    code, body = await asyncio.to_thread(_get, srv.http_addr[1], "/superz?timeout=1h")
    assert (code, body) == (400, "timeout must be more than 0 and at most 10s")
    code, body = await asyncio.to_thread(_get, srv.http_addr[1], "/")
    assert code == 200 and 'href="/superz"' in body
    srv = rillet_server_factory(http_port=-1, no_system_account=True).server
    code, body = await asyncio.to_thread(_get, srv.http_addr[1], "/superz")
    assert (code, body) == (503, "no system account: the health view is gathered over $SYS")
