"""/varz slow_consumer_stats by kind of connection, as nats-server counts them (server/client.go
handleWriteTimeout): every slow consumer report in the total ``slow_consumers`` and in the connection's account
(a leaf connection's), in ``slow_consumer_stats`` under clients, routes, gateways or leafs, a route only once
while it stays slow (its repeated "Slow Consumer State" reports count in the total only)."""
from __future__ import annotations

import asyncio

from helpers import RawClient
from rillet.monitor import varz
from rillet.server.procstats import CPUMeter
from test_cluster_leaf import hub_port, leaf_interest, rillet
from test_cluster_routes import _mk_server, _remote_subs, _until, clients


def _varz(s) -> dict:
    return varz.varz(s, {}, CPUMeter())


def _reports(log: str) -> tuple[int, int]:
    """(first reports, repeated reports) of slow consumers in a server's log."""
    return log.count("Slow Consumer Detected"), log.count("Slow Consumer State")


async def _route_peer(s, name: str):
    """A raw route peer on ``s`` that reads little (a small receive buffer) and wants subject "big"."""
    from rillet.cluster import info as ci
    from rillet.cluster import protocol as cp
    c = await RawClient.open(s.cluster.addr[1], connect=False, rcvbuf=4096)
    c.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(name=name, cluster="c1"))) +
           cp.info_frame(ci.encode_info(ci.Info(server_id=name, server_name=name.lower(), cluster="c1", port=1)))
           + cp.rs_sub(b"$G", b"big"))
    await _until(lambda: _remote_subs(s, "big") == 1, what="the route peer's interest")
    return c


async def test_a_stalled_route_counts_under_routes_not_clients():
    import io
    buf = io.StringIO()
    s = _mk_server("a", -1, [], buf=buf, write_deadline=0.3)
    s.opts.max_pending = 1 << 30  # (the write deadline ends it)
    await s.start()
    try:
        c = await _route_peer(s, "NSTALL")  # (kept: the peer stays connected, reading nothing)
        async with clients([s.client_url]) as (nc,):
            for _ in range(200):  # far more than the socket buffers hold; the peer reads nothing
                await nc.publish("big", b"x" * 65536)
            await nc.flush()
            await _until(lambda: "Slow Consumer (Write Deadline)" in buf.getvalue(), 10, "the route closed")
            first, again = _reports(buf.getvalue())
            v = _varz(s)
            assert v["slow_consumer_stats"] == {"clients": 0, "routes": 1, "gateways": 0, "leafs": 0}
            assert v["slow_consumers"] == first + again
            assert first == 1  # (a report after the first one says "State", as nats-server's)
            assert s.accounts["$G"].slow_consumers == 0  # (a pooled route has no account)
    finally:
        await s.shutdown()


async def test_a_slow_route_reported_again_counts_once_under_routes():
    """write_timeout retry (the route default): a route that reads, slowly, is reported at each deadline; each
    report counts in slow_consumers, the route once in slow_consumer_stats.routes."""
    import io
    buf = io.StringIO()
    s = _mk_server("a", -1, [], buf=buf, write_deadline=0.3, pool_size=-1)
    s.opts.max_pending = 1 << 30
    await s.start()
    try:
        c = await _route_peer(s, "NSLOW")
        stop = asyncio.Event()

        async def slow_reader() -> None:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(c.reader.read(16384), 0.05)
                except asyncio.TimeoutError:
                    continue
                await asyncio.sleep(0.02)
        reader = asyncio.ensure_future(slow_reader())
        try:
            async with clients([s.client_url]) as (nc,):
                for _ in range(150):  # (no flush: the publisher is paused while the route is behind)
                    await nc.publish("big", b"x" * 65536)
                await _until(lambda: "Slow Consumer State" in buf.getvalue(), 20, "a repeated report")
                first, again = _reports(buf.getvalue())  # (read with the counters, in one loop turn)
                v = _varz(s)
                assert "Slow Consumer (Write Deadline)" not in buf.getvalue()
                assert first >= 1 and again >= 1
                assert v["slow_consumers"] == first + again
                assert v["slow_consumer_stats"] == {"clients": 0, "routes": first, "gateways": 0, "leafs": 0}
                stop.set()
                c.writer.close()
                await _until(lambda: s.cluster.routes == {}, 5, "the slow route gone")
        finally:
            stop.set()
            await reader
    finally:
        await s.shutdown()


async def test_a_stalled_leaf_counts_under_leafs_and_in_its_account():
    async with rillet('leafnodes { listen: "127.0.0.1:-1", write_deadline: "300ms" }', "hub") as hub, \
            clients([hub.client_url]) as (nh,):
        r, w = await asyncio.open_connection("127.0.0.1", hub_port(hub), limit=1 << 16)
        await r.readline()
        w.write(b'CONNECT {"server_id":"NSLOW","name":"slow","headers":true}\r\nLS+ big.>\r\n')
        await w.drain()
        await _until(lambda: leaf_interest(hub, "big.x"), what="LS+ big.>")
        for i in range(400):  # 26 MB the peer never reads
            await nh.publish("big.x", b"x" * 65536)
            if i % 50 == 0:
                await nh.flush()
            if not hub.leafs:
                break
        log = hub._test_log
        await _until(lambda: "Slow Consumer (Write Deadline)" in log.getvalue(), 10, "the leaf closed")
        first, again = _reports(log.getvalue())
        v = _varz(hub)
        assert v["slow_consumer_stats"] == {"clients": 0, "routes": 0, "gateways": 0, "leafs": first + again}
        assert v["slow_consumers"] == first + again
        assert first == 1
        assert hub.accounts["$G"].slow_consumers == first + again  # (nats-server's acc.stats: the leaf's account)
        w.close()


def test_each_kind_counted_as_nats_server_counts_it():
    """The rules of handleWriteTimeout, report by report: a gateway (no account) each time under gateways, a
    route once while it stays slow under routes, a pinned route also in its account; all in the total."""
    import io
    from rillet.cluster.gateway_conn import GatewayConn
    from rillet.cluster.route import RouteConn
    s = _mk_server("a", -1, [], buf=io.StringIO())
    acc = s.lookup_account("A")
    gw = GatewayConn.__new__(GatewayConn)
    rt = RouteConn.__new__(RouteConn)
    for c in (gw, rt):
        c.server, c._slow = s, False
    rt.pinned_acc = "A"
    for c in (gw, rt):
        c._count_slow()  # "Slow Consumer Detected"
        c._slow = True
        c._count_slow()  # "Slow Consumer State" (then, say, closed)
    assert s.slow_consumers == 4
    assert s.sc_stats == {"clients": 0, "routes": 1, "gateways": 2, "leafs": 0}
    assert acc.slow_consumers == 2 and s.accounts["$G"].slow_consumers == 0
