"""Routes between servers of one cluster, driven as users do: nats-py clients on every server.

Rillet clusters come from ``rillet.app.embed.run_cluster`` (in process, free ports, every server routed
to the first and the rest learnt by gossip); the mixed cluster runs one Go nats-server (from PATH) with two
Rillet servers. A route killed with SIGKILL uses a Rillet subprocess.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import nats
import pytest
from nats.errors import NoRespondersError

from helpers import RawClient, ServerProcess, free_port
from rillet.config.options import ClusterOptions, Options
from rillet.app.embed import run_cluster
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server


async def _until(cond, timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def clients(urls):
    ncs = [await nats.connect(u, max_reconnect_attempts=0) for u in urls]
    try:
        yield ncs
    finally:
        for nc in ncs:
            await nc.close()


def _remote_subs(s: Server, subject: str, account: str = "$G") -> int:
    """How many remote subscriptions (one per route and announced subject/queue) match ``subject`` on ``s``."""
    from rillet.cluster.routed import RemoteSub
    r = s.accounts[account].sublist.match(subject)
    return sum(type(x) is RemoteSub for x in r.psubs) + sum(type(x) is RemoteSub for g in r.qsubs for x in g)


async def _settle(ncs, want=()) -> None:
    """Every client's subscriptions have reached its server, and the RS+ have crossed the routes: ``want``
    lists (server, subject, n[, account]): wait until ``server`` holds at least n remote subscriptions
    matching ``subject``."""
    for nc in ncs:
        await nc.flush()
    await _until(lambda: all(_remote_subs(w[0], w[1], *w[3:]) >= w[2] for w in want), what=f"interest {want}")


def _mk_server(name: str, cluster_port: int, routes: list[str], cluster: str = "c1", buf=None, **cl) -> Server:
    o = Options(host="127.0.0.1", port=-1, server_name=name)
    o.cluster = ClusterOptions(name=cluster, host="127.0.0.1", port=cluster_port, routes=routes, **cl)
    return build_server(o, Logger(debug=True, out=buf if buf is not None else io.StringIO()))


# ==== one cluster of Rillet servers =============================================================================

async def test_pub_sub_every_pair_both_ways_with_headers():
    async with run_cluster(3) as servers, clients([s.client_url for s in servers]) as ncs:
        got: list[list] = [[] for _ in ncs]
        for i, nc in enumerate(ncs):
            async def cb(m, i=i):
                got[i].append((m.subject, m.data, m.headers))
            await nc.subscribe("pair.*", cb=cb)
        await _settle(ncs, [(s, "pair.x", 2) for s in servers])
        for i, nc in enumerate(ncs):
            await nc.publish(f"pair.{i}", b"plain %d" % i)
            await nc.publish(f"pair.{i}", b"hdr %d" % i, headers={"From": str(i)})
            await nc.flush()
        await _until(lambda: all(len(g) == 6 for g in got), what="6 messages on every server")
        await asyncio.sleep(0.1)  # nothing more arrives (no duplicates)
        for g in got:
            assert len(g) == 6
            for i in range(3):
                assert (f"pair.{i}", b"plain %d" % i, None) in g
                assert (f"pair.{i}", b"hdr %d" % i, {"From": str(i)}) in g


async def test_wildcards_one_message_per_subscription():
    """Overlapping subscriptions on another server: one RMSG crosses, each subscription gets it once."""
    async with run_cluster(2) as servers, clients([s.client_url for s in servers]) as (a, b):
        subs = [await b.subscribe(s) for s in ("w.>", "w.*", "w.x", "*.x")]
        await _settle([a, b], [(servers[0], "w.x", 4)])
        await a.publish("w.x", b"1")
        await a.publish("w.y.z", b"2")
        await a.flush()
        for s, want in zip(subs, ([b"1", b"2"], [b"1"], [b"1"], [b"1"])):
            got = [(await s.next_msg(1)).data for _ in want]
            assert got == want
            with pytest.raises(nats.errors.TimeoutError):
                await s.next_msg(0.1)
        route = servers[0].cluster.route_for(servers[1].server_id, b"$G")  # (the pool's route of $G)
        assert route.out_msgs == 2  # one message per publish on the route
        assert sum(r.out_msgs for r in servers[0].cluster.conns) == 2  # and on no other route of the pool


async def test_interest_announced_once_per_subject_and_withdrawn():
    async with run_cluster(2) as (s0, s1), clients([s0.client_url, s0.client_url]) as (c1, c2):
        peer = s1.cluster.route_for(s0.server_id, b"$G")  # s1's view of s0's interest (on $G's pool route)

        def remote(subject):
            return [sub for _, sub in peer.rsubs.values() if sub.subject == subject]

        x1 = await c1.subscribe("ri.a")
        x2 = await c2.subscribe("ri.a")
        q1 = await c1.subscribe("ri.q", queue="g")
        q2 = await c2.subscribe("ri.q", queue="g")
        await _settle([c1, c2])
        await _until(lambda: len(remote("ri.a")) == 1 and [s.weight for s in remote("ri.q")] == [2], what="RS+")
        assert len(remote("ri.a")) == 1  # one entry for two subscriptions
        assert [s.weight for s in remote("ri.q")] == [2]  # one queue entry, weight = members
        await x1.unsubscribe()
        await q1.unsubscribe()
        await _settle([c1, c2])
        await _until(lambda: [s.weight for s in remote("ri.q")] == [1], what="weight 1")
        assert len(remote("ri.a")) == 1
        await x2.unsubscribe()
        await q2.unsubscribe()
        await _settle([c1, c2])
        await _until(lambda: remote("ri.a") == [] and remote("ri.q") == [], what="RS-")


async def test_queue_group_each_message_once_across_the_cluster():
    """Each message to one member of the group; as nats-server, the member is chosen over the whole cluster
    (a remote server weighing its announced queue weight), also from a server that has a member."""
    async with run_cluster(3) as servers, clients([s.client_url for s in servers]) as (c0, c1, c2):
        counts = {1: 0, 2: 0}

        def member(i):
            async def cb(m):
                counts[i] += 1
            return cb
        await c1.subscribe("work", queue="q", cb=member(1))
        await c2.subscribe("work", queue="q", cb=member(2))
        await _settle([c0, c1, c2], [(servers[0], "work", 2), (servers[1], "work", 1)])
        for pub in (c0, c1):  # from a server without a member, then from one with a member
            counts.update({1: 0, 2: 0})
            for _ in range(60):
                await pub.publish("work", b"x")
            await pub.flush()
            await _until(lambda: counts[1] + counts[2] == 60, what="60 queue deliveries")
            await asyncio.sleep(0.1)
            assert counts[1] + counts[2] == 60 and counts[1] > 0 and counts[2] > 0, counts


async def test_request_reply_and_no_responders_across_servers():
    async with run_cluster(3) as servers, clients([s.client_url for s in servers]) as (c0, c1, c2):
        async def echo(m):
            await m.respond(b"re:" + m.data)
        await c2.subscribe("svc.echo", queue="svc", cb=echo)
        await _settle([c0, c1, c2], [(servers[0], "svc.echo", 1), (servers[1], "svc.echo", 1)])
        for nc in (c0, c1, c2):
            r = await nc.request("svc.echo", b"hi", timeout=2)
            assert r.data == b"re:hi"
        t = time.monotonic()
        with pytest.raises(NoRespondersError):
            await c0.request("svc.nobody", b"?", timeout=2)
        assert time.monotonic() - t < 1  # answered at once by the publisher's server


async def test_gossip_from_one_seed_to_full_mesh_and_routez():
    async with run_cluster(3) as (s0, s1, s2):
        # s1 and s2 were only given s0: they found each other by gossip
        assert s0.opts.cluster.routes == [] and len(s2.opts.cluster.routes) == 1
        assert set(s1.cluster.routes) == {s0.server_id, s2.server_id}
        assert set(s2.cluster.routes) == {s0.server_id, s1.server_id}
        r21 = s2.cluster.routes[s1.server_id]
        r12 = s1.cluster.routes[s2.server_id]
        assert r21.rtype == r12.rtype == "implicit" and r21.solicited != r12.solicited
        async with clients([s1.client_url]) as (c,):
            await c.subscribe("rz.>")
            await _settle([c], [(s0, "rz.a", 1)])
            from rillet.monitor.endpoints import routez
            z = routez(s0, {"subs": "1"})
            # nats-server's default pool: 3 connections per server and one pinned to the system account
            assert z["num_routes"] == 2 * 4 and z["server_name"] == "rillet-0"
            assert sorted(r["remote_name"] for r in z["routes"]) == ["rillet-1"] * 4 + ["rillet-2"] * 4
            assert [r.get("account") for r in z["routes"]].count("$SYS") == 2
            g1 = s0.cluster.route_for(s1.server_id, b"$G")
            by_name = {r["remote_name"]: r for r in z["routes"] if r["rid"] == g1.cid}
            r1 = by_name["rillet-1"]
            assert r1["remote_id"] == s1.server_id and not r1["did_solicit"] and not r1["is_configured"]
            assert "rz.>" in r1["subscriptions_list"] and r1["subscriptions"] >= 1
            assert r1["compression"] == "off"
            assert "subscriptions_list" not in routez(s0, {})["routes"][0]


async def test_async_info_connect_urls_seen_by_nats_py():
    p = [free_port() for _ in range(3)]
    seed = f"nats://127.0.0.1:{p[0]}"
    s0 = _mk_server("a", p[0], [])
    await s0.start()
    discovered = []

    async def on_discovered():
        discovered.append(True)
    nc = await nats.connect(s0.client_url, discovered_server_cb=on_discovered, max_reconnect_attempts=0)
    others = []
    try:
        assert "connect_urls" not in nc._server_info  # alone: no connect_urls, as nats-server
        for i in (1, 2):
            s = _mk_server("bc"[i - 1], p[i], [seed])
            await s.start()
            others.append(s)
            await _until(lambda: len(nc.discovered_servers) == i, what=f"{i} discovered servers")
        assert len(discovered) == 2
        want = {f"127.0.0.1:{s.port}" for s in [s0] + others}
        assert {u.netloc for u in nc.servers} == want
        assert s0.connect_urls()[0] == f"127.0.0.1:{s0.port}"  # this server first, then the others
        assert set(s0.connect_urls()) == want
        # a server leaves: the next INFO goes without its URL
        gone = others.pop()
        raw = await RawClient.open(s0, protocol=1)
        await raw.ping()
        await gone.shutdown()
        data = await raw.read_until(b"\r\n")
        while not data.startswith(b"INFO "):
            data = await raw.read_until(b"\r\n")
        urls = json.loads(data[5:])["connect_urls"]
        assert sorted(urls) == sorted([f"127.0.0.1:{s0.port}", f"127.0.0.1:{others[0].port}"])
        await raw.close()
    finally:
        await nc.close()
        for s in others + [s0]:
            await s.shutdown()


async def test_lame_duck_tells_clients_the_other_servers():
    async with run_cluster(2, lame_duck_duration=5.0, lame_duck_grace_period=1.0) as (s0, s1):
        ldm = asyncio.Event()

        async def on_ldm():
            ldm.set()
        nc = await nats.connect(s0.client_url, lame_duck_mode_cb=on_ldm, max_reconnect_attempts=0)
        try:
            task = asyncio.ensure_future(s0.lame_duck())
            await asyncio.wait_for(ldm.wait(), 2)
            assert s0.info_dict()["connect_urls"] == [f"127.0.0.1:{s1.port}"]  # (what the ldm INFO carried)
            await _until(lambda: not s1.cluster.client_connect_urls() or
                         f"127.0.0.1:{s0.port}" not in s1.cluster.client_connect_urls(), what="s1 forgets s0")
            task.cancel()
        finally:
            await nc.close()


async def test_cluster_authorization_and_name_checks():
    buf = io.StringIO()
    p0 = free_port()
    s0 = _mk_server("a", p0, [], buf=buf, username="ru", password="rp")
    await s0.start()
    started = [s0]
    try:
        bad = _mk_server("b", free_port(), [f"nats://ru:wrong@127.0.0.1:{p0}"])
        other = _mk_server("c", free_port(), [f"nats://ru:rp@127.0.0.1:{p0}"], cluster="c2")
        good = _mk_server("d", free_port(), [f"nats://ru:rp@127.0.0.1:{p0}"])
        for s in (bad, other, good):
            await s.start()
            started.append(s)
        await _until(lambda: len(s0.cluster.routes) == 1, what="the good route")
        await asyncio.sleep(0.2)
        assert set(s0.cluster.routes) == {good.server_id}
        log = buf.getvalue()
        assert "authentication error" in log
        assert 'Rejecting connection, cluster name "c2" does not match "c1"' in log
    finally:
        for s in started:
            await s.shutdown()


async def test_client_on_route_port_is_refused():
    async with run_cluster(1) as (s0,):
        port = s0.cluster.addr[1]
        c = await RawClient.open(port, connect=False)
        assert c.info["cluster"] == "rillet" and c.info["server_name"] == "rillet-0"
        c.send(b'CONNECT {"lang":"python","verbose":false}\r\n')
        data = await c.read_until_closed()
        assert b"-ERR 'attempted to connect to route port'" in data


async def test_route_protocol_errors_close_only_that_route():
    async with run_cluster(2) as (s0, s1), clients([s0.client_url, s1.client_url]) as (c0, c1):
        port = s0.cluster.addr[1]
        c = await RawClient.open(port, connect=False)
        c.send(b"RS+ $G foo\r\n")  # before CONNECT
        data = await c.read_until_closed()
        assert b"-ERR 'Authorization Violation'" in data
        sub = await c1.subscribe("still")
        await _settle([c0, c1], [(s0, "still", 1)])
        await c0.publish("still", b"ok")
        assert (await sub.next_msg(1)).data == b"ok"


async def test_restarted_server_rejoins_after_sigkill():
    """A Rillet server killed with SIGKILL and started again rejoins by itself; messages flow again."""
    p = [free_port() for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{x}" for x in p)
    s0 = _mk_server("a", p[0], [f"nats://127.0.0.1:{x}" for x in p])
    s1 = _mk_server("b", p[1], [f"nats://127.0.0.1:{x}" for x in p])
    await s0.start()
    await s1.start()
    cport = free_port()

    def start_proc():
        return ServerProcess("-a", "127.0.0.1", "-p", str(cport), "-n", "killed", "--cluster_name", "c1",
                             "--cluster", f"nats://127.0.0.1:{p[2]}", "--routes", routes,
                             command=[__import__("sys").executable, "-m", "rillet.server"])
    proc = start_proc()
    try:
        await _until(lambda: len(s0.cluster.routes) == 2 and len(s1.cluster.routes) == 2, 10, "full mesh")
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(5)
        await _until(lambda: len(s0.cluster.routes) == 1 and len(s1.cluster.routes) == 1, 5, "routes dropped")
        proc = start_proc()
        await _until(lambda: len(s0.cluster.routes) == 2 and len(s1.cluster.routes) == 2, 10, "rejoined")
        async with clients([s0.client_url, f"nats://127.0.0.1:{cport}"]) as (a, k):
            sub = await k.subscribe("back")
            await _settle([a, k], [(s0, "back", 1)])
            await a.publish("back", b"again")
            assert (await sub.next_msg(2)).data == b"again"
            with pytest.raises(nats.errors.TimeoutError):
                await sub.next_msg(0.2)  # once, not once per route
    finally:
        proc.proc.kill()
        proc.proc.wait(5)
        await s0.shutdown()
        await s1.shutdown()


async def test_run_cluster_embedding_api():
    async with run_cluster(3, name="emb") as servers:
        assert [s.name for s in servers] == ["emb-0", "emb-1", "emb-2"]
        assert all(len(s.cluster.routes) == 2 and s.cluster.name == "emb" for s in servers)
        ports = [s.port for s in servers]
    await asyncio.sleep(0.05)
    for port in ports:
        with pytest.raises(OSError):
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()


async def test_connect_error_reports(monkeypatch):
    """Failed route dials: the first is an error, later ones debug unless connect_error_reports says;
    a gossiped (implicit) route stops after connect_retries; connect_backoff doubles the wait."""
    import rillet.cluster.cluster as cc
    monkeypatch.setattr(cc, "ROUTE_CONNECT_DELAY", 0.05)
    dead = free_port()
    buf = io.StringIO()
    # (pool_size -1: one dialler per URL; with pooling the $SYS route's dialler logs the same lines too)
    s = _mk_server("a", -1, [f"nats://127.0.0.1:{dead}"], buf=buf, connect_retries=2, pool_size=-1)
    s.opts.extra["connect_error_reports"] = 3
    await s.start()
    try:
        await _until(lambda: "(attempt 6)" in buf.getvalue(), what="6 attempts")
        lines = [ln for ln in buf.getvalue().splitlines() if "Error trying to connect to route" in ln]
        assert [("[ERR]" in ln) for ln in lines[:6]] == [True, False, True, False, False, True]
        assert f"dial tcp 127.0.0.1:{dead}: connect: connection refused" in lines[0]
        # an implicit route: 1 + connect_retries attempts
        gone = free_port()
        s.cluster.solicit(cc.RouteURL("127.0.0.1", gone), cc.IMPLICIT, 0, first=True)
        await asyncio.sleep(0.5)
        tries = [ln for ln in buf.getvalue().splitlines() if f"route on 127.0.0.1:{gone}" in ln]
        assert len(tries) == 3
    finally:
        await s.shutdown()
    # connect_backoff: the waits double (0.05, 0.1, 0.2, ...)
    buf = io.StringIO()
    s = _mk_server("b", -1, [f"nats://127.0.0.1:{dead}"], buf=buf, connect_backoff=True)
    await s.start()
    try:
        await asyncio.sleep(0.5)
        n = buf.getvalue().count("Trying to connect to route")
        # two diallers (the pool's first route and the pinned $SYS route), each 3 to 5 times in 0.5s
        # (without back-off, about 10 each)
        assert 6 <= n <= 10, n
    finally:
        await s.shutdown()


async def test_cluster_advertise_and_no_advertise():
    p0 = free_port()
    a = _mk_server("a", p0, [], advertise="10.1.2.3:7777")
    b = _mk_server("b", -1, [f"nats://127.0.0.1:{p0}"], no_advertise=True)
    await a.start()
    await b.start()
    try:
        await _until(lambda: len(a.cluster.routes) == 1 and len(b.cluster.routes) == 1, what="route")
        assert b.cluster.routes[a.server_id].remote_ip_url == "nats-route://10.1.2.3:7777/"
        # b does not advertise: its clients get no connect_urls, and a does not learn b's client URL
        assert b.connect_urls() == [] and "connect_urls" not in b.info_dict()
        assert a.connect_urls() == [f"127.0.0.1:{a.port}"]
    finally:
        await b.shutdown()
        await a.shutdown()


async def test_route_pings_and_stale_route():
    """A peer that never answers PING is closed as stale after ping_max pings (cluster ping_interval)."""
    from rillet.cluster import info as ci
    from rillet.cluster import protocol as cp
    buf = io.StringIO()
    s = _mk_server("a", -1, [], buf=buf, ping_interval=0.1, ping_max=2)
    await s.start()
    try:
        c = await RawClient.open(s.cluster.addr[1], connect=False)
        c.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(name="NFAKE", cluster="c1"))) +
               cp.info_frame(ci.encode_info(ci.Info(server_id="NFAKE", server_name="fake", cluster="c1", port=1))))
        data = await c.read_until_closed(3)
        assert data.split(b"\r\n").count(b"PING") == 2 and b"-ERR 'Stale Connection'" in data
        assert "Router connection closed: Stale Connection" in buf.getvalue()
    finally:
        await s.shutdown()


def test_jetstream_with_cluster_needs_the_names():
    """(clustered JetStream is allowed now: nats-server's start-up requirements)"""
    o = Options(host="127.0.0.1", port=-1)
    o.jetstream.enabled = True
    o.cluster = ClusterOptions(port=-1)
    with pytest.raises(ValueError, match="jetstream cluster requires `server_name` to be set"):
        build_server(o, Logger(out=io.StringIO()))


# ==== one Go nats-server with two Rillet servers ================================================================

@contextlib.contextmanager
def go_server(conf: str, port: int):
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(conf)
    p = subprocess.Popen(["nats-server", "-c", f.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=0.5).read()
                break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not start: {p.stderr.read().decode()[-2000:]}")
                time.sleep(0.02)
        yield p
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _go_route_subs(http: int) -> list[list[str]]:
    z = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/routez?subs=1", timeout=2).read())
    return [r.get("subscriptions_list", []) for r in z["routes"]]


async def _go_sees(http: int, subject: str, n: int) -> None:
    """The Go server has the interest in ``subject`` of ``n`` of its routes."""
    await _until(lambda: sum(subject in subs for subs in _go_route_subs(http)) >= n, what=f"Go sees {subject}")


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_mixed_cluster_one_go_two_rillet():
    gport, gcl, ghttp = free_port(), free_port(), free_port()
    conf = (f"port: {gport}\nhttp_port: {ghttp}\nserver_name: go1\n"
            f"cluster {{ name: c1, listen: 127.0.0.1:{gcl} }}\n")
    with go_server(conf, ghttp):
        seed = f"nats://127.0.0.1:{gcl}"
        rs = [_mk_server(f"r{i}", -1, [seed]) for i in range(2)]
        try:
            for s in rs:
                await s.start()
            # no pool_size anywhere: nats-server's default pool of 3 and the pinned $SYS route on every pair
            await _until(lambda: all(s.cluster.servers_connected() == 2 for s in rs), 10,
                         "full mesh with the Go server")
            z = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ghttp}/routez").read())
            assert sorted(r["remote_name"] for r in z["routes"]) == ["r0"] * 4 + ["r1"] * 4
            assert sorted(r.get("account", "") for r in z["routes"]) == [""] * 6 + ["$SYS"] * 2
            from rillet.monitor.endpoints import routez
            for s, other in zip(rs, ("r1", "r0")):
                rz = routez(s, {})
                assert rz["num_routes"] == 8  # as a Go-Go pair, per remote server
                assert sorted(r["remote_name"] for r in rz["routes"]) == sorted(["go1"] * 4 + [other] * 4)
            urls = [f"nats://127.0.0.1:{gport}"] + [s.client_url for s in rs]
            async with clients(urls) as ncs:
                got: list[list] = [[] for _ in ncs]
                for i, nc in enumerate(ncs):
                    async def cb(m, i=i):
                        got[i].append((m.subject, m.data, m.headers))
                    await nc.subscribe("mx.*", cb=cb)
                await _settle(ncs, [(s, "mx.x", 2) for s in rs])
                await _go_sees(ghttp, "mx.*", 2)
                for i, nc in enumerate(ncs):
                    await nc.publish(f"mx.{i}", b"m%d" % i)
                    await nc.publish(f"mx.{i}", b"h%d" % i, headers={"K": str(i)})
                    await nc.flush()
                await _until(lambda: all(len(g) == 6 for g in got), 5, "every pair both ways")
                await asyncio.sleep(0.1)
                for g in got:
                    assert sorted(g, key=repr) == sorted(
                        [(f"mx.{i}", b"m%d" % i, None) for i in range(3)] +
                        [(f"mx.{i}", b"h%d" % i, {"K": str(i)}) for i in range(3)], key=repr)
                # queue group with members on the Go server and one Rillet server, publisher on the other
                counts = [0, 0, 0]
                for i in (0, 1):
                    async def qcb(m, i=i):
                        counts[i] += 1
                    await ncs[i].subscribe("mq", queue="g", cb=qcb)
                await _settle(ncs, [(rs[1], "mq", 2)])
                for _ in range(40):
                    await ncs[2].publish("mq", b"x")
                await ncs[2].flush()
                await _until(lambda: sum(counts) == 40, 5, "40 queue deliveries")
                await asyncio.sleep(0.1)
                assert sum(counts) == 40 and counts[0] > 0 and counts[1] > 0
                # the Go server, which has a member itself, spreads over the cluster too (as Rillet does)
                counts[:] = [0, 0, 0]
                for _ in range(40):
                    await ncs[0].publish("mq", b"y")
                await ncs[0].flush()
                await _until(lambda: sum(counts) == 40, 5, "40 queue deliveries from Go")
                await asyncio.sleep(0.1)
                assert sum(counts) == 40 and counts[0] > 0 and counts[1] > 0, counts
                # request/reply: a responder on each server, a requester on each other server
                for i, nc in enumerate(ncs):
                    async def rsp(m, i=i):
                        await m.respond(b"from %d" % i)
                    await nc.subscribe(f"rr.{i}", cb=rsp)
                await _settle(ncs, [(rs[0], "rr.0", 1), (rs[0], "rr.2", 1), (rs[1], "rr.0", 1), (rs[1], "rr.1", 1)])
                await _go_sees(ghttp, "rr.1", 1)
                await _go_sees(ghttp, "rr.2", 1)
                for i, nc in enumerate(ncs):
                    for j in range(3):
                        if i != j:
                            assert (await nc.request(f"rr.{j}", b"?", timeout=2)).data == b"from %d" % j
        finally:
            for s in rs:
                await s.shutdown()


async def test_varz_cluster_section_is_live():
    from rillet.monitor.varz import varz_cluster
    async with run_cluster(2, name="vz") as (s0, s1):
        v = varz_cluster(s1)
        assert v["name"] == "vz" and v["addr"] == "127.0.0.1" and v["cluster_port"] == s1.cluster.addr[1]
        assert v["urls"] == [f"127.0.0.1:{s0.cluster.addr[1]}"]
        from rillet.server.procstats import CPUMeter
        from rillet.monitor.varz import varz
        full = varz(s1, {}, CPUMeter())
        assert full["routes"] == 4 and full["remotes"] == 1  # (a pool of 3 and the $SYS route, as nats-server)


ACCOUNTS_CONF = """
accounts {
  A { users: [{user: a, password: a}] }
  B { users: [{user: b, password: b}] }
  SYS { users: [{user: sys, password: sys}] }
}
system_account: SYS
"""


async def test_accounts_stay_apart_and_server_ping_sees_every_server():
    from rillet.config.options_builder import load_string
    p = [free_port() for _ in range(3)]
    servers = []
    try:
        for i in range(3):
            o = load_string(ACCOUNTS_CONF + f"server_name: s{i}\nlisten: 127.0.0.1:-1\n"
                            f"cluster {{ name: c, listen: 127.0.0.1:{p[i]}, routes: [nats://127.0.0.1:{p[0]}] }}\n")
            s = build_server(o, Logger(out=io.StringIO()))
            await s.start()
            servers.append(s)
        await _until(lambda: all(len(s.cluster.routes) == 2 for s in servers), what="full mesh")
        async with contextlib.AsyncExitStack() as st:
            a0 = await nats.connect(servers[0].client_url, user="a", password="a")
            a1 = await nats.connect(servers[1].client_url, user="a", password="a")
            b1 = await nats.connect(servers[1].client_url, user="b", password="b")
            sysc = await nats.connect(servers[2].client_url, user="sys", password="sys")
            for nc in (a0, a1, b1, sysc):
                st.push_async_callback(nc.close)
            sa, sb = await a1.subscribe("x"), await b1.subscribe("x")
            await _settle([a1, b1], [(servers[0], "x", 1, "A")])
            await a0.publish("x", b"for A")
            await a0.flush()
            assert (await sa.next_msg(1)).data == b"for A"
            with pytest.raises(nats.errors.TimeoutError):
                await sb.next_msg(0.2)
            # $SYS.REQ.SERVER.PING from one server is answered by all three
            inbox = sysc.new_inbox()
            sub = await sysc.subscribe(inbox)
            await _settle([sysc], [(servers[0], inbox, 1, "SYS"), (servers[1], inbox, 1, "SYS")])
            await sysc.publish("$SYS.REQ.SERVER.PING", b"", reply=inbox)
            names = []
            with contextlib.suppress(nats.errors.TimeoutError):
                while True:
                    names.append(json.loads((await sub.next_msg(0.5)).data)["server"]["name"])
            assert sorted(names) == ["s0", "s1", "s2"]
    finally:
        for s in servers:
            await s.shutdown()


async def test_reload_adds_and_removes_routes_and_refuses_port_changes():
    from dataclasses import replace
    p = [free_port() for _ in range(3)]
    buf = io.StringIO()
    s0 = _mk_server("a", p[0], [], buf=buf)
    s1 = _mk_server("b", p[1], [])
    s2 = _mk_server("c", p[2], [])
    started = []
    try:
        for s in (s0, s1, s2):
            await s.start()
            started.append(s)

        def reload(routes, **cl):
            o = replace(s0.opts, cluster=replace(s0.opts.cluster, routes=routes, **cl))
            s0.reload(o)
        reload([f"nats://127.0.0.1:{p[1]}"])
        await _until(lambda: set(s0.cluster.routes) == {s1.server_id}, what="route to b")
        reload([f"nats://127.0.0.1:{p[2]}"])
        await _until(lambda: set(s0.cluster.routes) == {s2.server_id}, what="b removed, c added")
        await asyncio.sleep(1.3)  # the removed route is not dialled again (an explicit retry is 1s)
        assert set(s0.cluster.routes) == {s2.server_id}
        assert f"Removed route nats-route://127.0.0.1:{p[1]}" in buf.getvalue()
        with pytest.raises(ValueError, match=f"config reload not supported for cluster port: old={p[0]}, new=1"):
            reload([], port=1)
        with pytest.raises(ValueError, match="config reload not supported for cluster host"):
            reload([], host="0.0.0.0")
    finally:
        for s in started:
            await s.shutdown()


async def test_operator_mode_account_loaded_on_remote_interest(tmp_path):
    """Interest in an account this server has not loaded yet: looked up through the resolver (as nats-server's
    LookupAccount), so a publish here reaches the subscriber on the other server."""
    from rillet.config.options_builder import load_string
    from test_operator import Operator, creds
    op = Operator()
    akp, apub, _ = op.account("A")
    p = [free_port(), free_port()]
    servers = []
    try:
        for i in range(2):
            conf = op.config(f"server_name: o{i}\ncluster {{ name: c, listen: 127.0.0.1:{p[i]}, "
                             f"routes: [nats://127.0.0.1:{p[0]}] }}")
            s = build_server(load_string(conf), Logger(out=io.StringIO()))
            await s.start()
            servers.append(s)
        await _until(lambda: all(len(s.cluster.routes) == 1 for s in servers), what="route")
        assert apub not in servers[0].accounts
        sub_nc = await nats.connect(servers[1].client_url, user_credentials=creds(tmp_path, *op.user(akp)))
        pub_nc = None
        try:
            sub = await sub_nc.subscribe("op.x")
            await sub_nc.flush()
            await _until(lambda: apub in servers[0].accounts and _remote_subs(servers[0], "op.x", apub) == 1,
                         what="account loaded on the other server")
            pub_nc = await nats.connect(servers[0].client_url, user_credentials=creds(tmp_path, *op.user(akp)))
            await pub_nc.publish("op.x", b"across")
            assert (await sub.next_msg(1)).data == b"across"
        finally:
            await sub_nc.close()
            if pub_nc is not None:
                await pub_nc.close()
    finally:
        for s in servers:
            await s.shutdown()


async def test_generated_cluster_name_adopts_the_configured_one():
    buf = io.StringIO()
    p0 = free_port()
    named = _mk_server("a", p0, [], cluster="blue")
    anon = _mk_server("b", -1, [f"nats://127.0.0.1:{p0}"], cluster="", buf=buf)
    await named.start()
    await anon.start()
    try:
        assert anon.cluster.dynamic and "Cluster name was dynamically generated" in buf.getvalue()
        await _until(lambda: len(anon.cluster.routes) == 1, what="route")
        assert anon.cluster.name == "blue" and not anon.cluster.dynamic
        assert anon.info_dict()["cluster"] == "blue"
        assert "Cluster name updated to blue" in buf.getvalue()
    finally:
        await anon.shutdown()
        await named.shutdown()


def test_route_port_in_use_stops_the_server():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with ServerProcess("-a", "127.0.0.1", "-p", "-1", "--cluster", f"nats://127.0.0.1:{port}") as srv:
            assert srv.wait(10) == 1
            assert f"Error listening on router port: {port} - listen tcp 127.0.0.1:{port}: bind: address already " \
                   "in use" in srv.output


async def test_stalled_route_is_closed_at_the_cluster_write_deadline():
    """A peer that stops reading: the route is closed once the cluster write_deadline has passed."""
    from rillet.cluster import info as ci
    from rillet.cluster import protocol as cp
    buf = io.StringIO()
    s = _mk_server("a", -1, [], buf=buf, write_deadline=0.3)
    s.opts.max_pending = 1 << 30  # (so that the deadline, not max_pending, ends it)
    await s.start()
    try:
        c = await RawClient.open(s.cluster.addr[1], connect=False, rcvbuf=4096)
        c.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(name="NSTALL", cluster="c1"))) +
               cp.info_frame(ci.encode_info(ci.Info(server_id="NSTALL", server_name="stall", cluster="c1", port=1)))
               + cp.rs_sub(b"$G", b"big"))
        await _until(lambda: _remote_subs(s, "big") == 1, what="the stalled peer's interest")
        async with clients([s.client_url]) as (nc,):
            payload = b"x" * 65536
            for _ in range(200):  # far more than the socket buffers hold; the peer reads nothing
                await nc.publish("big", payload)
            await nc.flush()
            await _until(lambda: "Slow Consumer (Write Deadline)" in buf.getvalue(), 5, "the route closed")
        assert "Slow Consumer Detected: WriteDeadline of 300ms exceeded" in buf.getvalue()
        assert s.cluster.routes == {}
    finally:
        await s.shutdown()


@pytest.mark.parametrize("policy", ["", "retry", "close"])
async def test_route_write_timeout_policy_with_a_slow_reader(policy):
    """A peer that reads, but slower than we write: with nats-server's route default (write_timeout retry)
    the route is kept (a slow consumer is reported) since the peer read something within the deadline;
    with write_timeout: close it is closed at the deadline, as a client would be."""
    from rillet.cluster import info as ci
    from rillet.cluster import protocol as cp
    buf = io.StringIO()
    s = _mk_server("a", -1, [], buf=buf, write_deadline=0.3, write_timeout=policy, pool_size=-1)
    s.opts.max_pending = 1 << 30
    await s.start()
    try:
        c = await RawClient.open(s.cluster.addr[1], connect=False, rcvbuf=4096)
        c.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(name="NSLOW", cluster="c1"))) +
               cp.info_frame(ci.encode_info(ci.Info(server_id="NSLOW", server_name="slow", cluster="c1", port=1)))
               + cp.rs_sub(b"$G", b"big"))
        await _until(lambda: _remote_subs(s, "big") == 1, what="the slow peer's interest")
        stop = asyncio.Event()

        nread = [0]

        async def slow_reader() -> None:
            while not stop.is_set():
                try:
                    nread[0] += len(await asyncio.wait_for(c.reader.read(16384), 0.05))
                except asyncio.TimeoutError:
                    continue
                await asyncio.sleep(0.02)
        reader = asyncio.ensure_future(slow_reader())
        try:
            async with clients([s.client_url]) as (nc,):
                for _ in range(150):  # (no flush: the publisher is paused while the route is behind)
                    await nc.publish("big", b"x" * 65536)
                await _until(lambda: "Slow Consumer Detected: WriteDeadline" in buf.getvalue(), 5, "slow consumer")
                await asyncio.sleep(0.4)
                closed = "Slow Consumer (Write Deadline)" in buf.getvalue()
                assert closed == (policy == "close"), (nread, buf.getvalue()[-2000:])
                assert (s.cluster.routes == {}) == (policy == "close")
                stop.set()
                c.writer.close()  # (the route goes: the publishers paused behind it are read again)
                await _until(lambda: s.cluster.routes == {}, 3, "the slow route gone")
        finally:
            stop.set()
            await reader
    finally:
        await s.shutdown()
