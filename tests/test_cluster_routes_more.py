"""Routes, continued: accounts, imports/exports, permissions and cluster-scoped mappings across a cluster
(clients on different servers, nats-py over real sockets), and the same with a Go nats-server in the
cluster where the wire matters (shadow interest in the exporting account)."""
from __future__ import annotations

import asyncio
import contextlib
import io
import shutil

import nats
import pytest

from helpers import free_port
from rillet.config.options_builder import load_string
from rillet.server.logging import Logger
from rillet.server.server import Server
from test_cluster_routes import _go_sees, _until, go_server

IMPORTS_CONF = """
accounts {
  A {
    users: [{user: a, password: a}, {user: alim, password: alim, permissions: {subscribe: {deny: ["x.secret"]}}}]
    exports: [{stream: "events.>"}, {stream: "plain.>"}, {service: "svc.>"}]
  }
  B {
    users: [{user: b, password: b},
            {user: blim, password: blim, permissions: {subscribe: {deny: ["imp.events.secret"]}}}]
    imports: [{stream: {account: A, subject: "events.>"}, prefix: "imp"},
              {stream: {account: A, subject: "plain.>"}},
              {service: {account: A, subject: "svc.>"}}]
  }
}
"""


@contextlib.asynccontextmanager
async def cluster_of(n: int, conf: str, name: str = "c", names: list[str | None] | None = None):
    """``n`` Rillet servers with the config text ``conf``, every one routed to the first (full mesh by
    gossip); ``names`` gives a cluster name per server (None: none configured)."""
    ports = [free_port() for _ in range(n)]
    servers: list[Server] = []
    try:
        for i in range(n):
            cn = name if names is None else names[i]
            cl = f"name: {cn}, " if cn else ""
            o = load_string(conf + f"server_name: s{i}\nlisten: 127.0.0.1:-1\n"
                            f"cluster {{ {cl}listen: 127.0.0.1:{ports[i]}, routes: [nats://127.0.0.1:{ports[0]}] }}\n")
            s = Server(o, Logger(out=io.StringIO()))
            await s.start()
            servers.append(s)
        await _until(lambda: all(len(s.cluster.routes) == n - 1 for s in servers), 10, "full mesh")
        yield servers
    finally:
        for s in reversed(servers):
            await s.shutdown()


def _remote(s: Server, account: str, subject: str, queue: str | None = None) -> int:
    from rillet.cluster.routed import RemoteSub
    r = s.accounts[account].sublist.match(subject)
    if queue is None:
        return sum(type(x) is RemoteSub for x in r.psubs)
    return sum(type(x) is RemoteSub and x.queue == queue for g in r.qsubs for x in g)


async def _collect(sub, wait: float = 0.15) -> list:
    out = []
    with contextlib.suppress(nats.errors.TimeoutError):
        while True:
            out.append(await sub.next_msg(wait))
    return out


async def test_stream_import_across_servers_once_per_subscriber():
    async with cluster_of(3, IMPORTS_CONF) as s, contextlib.AsyncExitStack() as st:
        async def conn(i, user):
            nc = await nats.connect(s[i].client_url, user=user, password=user)
            st.push_async_callback(nc.close)
            return nc
        b0, b1, a0, a2 = await conn(0, "b"), await conn(1, "b"), await conn(0, "a"), await conn(2, "a")
        s_b0 = await b0.subscribe("imp.events.>")
        s_b1 = await b1.subscribe("imp.events.*")
        s_plain = await b1.subscribe("plain.x")
        for nc in (b0, b1):
            await nc.flush()
        # the interest crosses the routes in the exporting account (the importer's subject taken back
        # through the prefix), as nats-server's shadow subscriptions do
        await _until(lambda: _remote(s[2], "A", "events.e1") == 2 and _remote(s[2], "A", "plain.x") == 1,
                     what="shadow interest in A")
        for nc, what in ((a2, b"from s2"), (a0, b"from s0")):
            await nc.publish("events.e1", what)
            await nc.publish("plain.x", what)
            await nc.flush()
        for sub in (s_b0, s_b1):
            got = await _collect(sub)
            assert sorted((m.subject, m.data) for m in got) == [("imp.events.e1", b"from s0"),
                                                                ("imp.events.e1", b"from s2")]
        assert sorted(m.data for m in await _collect(s_plain)) == [b"from s0", b"from s2"]
        # unsubscribing withdraws the shadow interest
        await s_b1.unsubscribe()
        await b1.flush()
        await _until(lambda: _remote(s[2], "A", "events.e1") == 1, what="shadow interest withdrawn")


async def test_stream_import_queue_group_spans_the_cluster():
    async with cluster_of(3, IMPORTS_CONF) as s, contextlib.AsyncExitStack() as st:
        ncs = []
        for i, u in ((0, "b"), (1, "b"), (2, "a")):
            nc = await nats.connect(s[i].client_url, user=u, password=u)
            st.push_async_callback(nc.close)
            ncs.append(nc)
        counts = [0, 0]
        for i in (0, 1):
            async def cb(m, i=i):
                counts[i] += 1
            await ncs[i].subscribe("imp.events.q", queue="workers", cb=cb)
            await ncs[i].flush()
        await _until(lambda: _remote(s[2], "A", "events.q", "workers") == 2, what="queue shadows")
        for _ in range(60):
            await ncs[2].publish("events.q", b"w")
        await ncs[2].flush()
        await _until(lambda: sum(counts) == 60, what="60 deliveries")
        await asyncio.sleep(0.15)
        assert sum(counts) == 60 and min(counts) > 0, counts


async def test_service_import_requestor_and_responder_on_different_servers():
    async with cluster_of(3, IMPORTS_CONF) as s, contextlib.AsyncExitStack() as st:
        a1 = await nats.connect(s[1].client_url, user="a", password="a")
        st.push_async_callback(a1.close)

        async def echo(m):
            await m.respond(b"echo " + m.data)
        await a1.subscribe("svc.echo", cb=echo)
        await a1.flush()
        await _until(lambda: _remote(s[0], "A", "svc.echo") == 1 and _remote(s[2], "A", "svc.echo") == 1,
                     what="responder interest")
        for i in (0, 1, 2):
            b = await nats.connect(s[i].client_url, user="b", password="b")
            st.push_async_callback(b.close)
            for k in range(3):
                assert (await b.request("svc.echo", b"%d-%d" % (i, k), timeout=2)).data == b"echo %d-%d" % (i, k)
        # no responder anywhere: a 503 from the requestor's server
        b0 = await nats.connect(s[0].client_url, user="b", password="b")
        st.push_async_callback(b0.close)
        with pytest.raises(nats.errors.NoRespondersError):
            await b0.request("svc.nobody", b"", timeout=2)


async def test_subscribe_permissions_hold_for_messages_from_other_servers():
    async with cluster_of(2, IMPORTS_CONF) as s, contextlib.AsyncExitStack() as st:
        conns = {}
        for key, i, u in (("alim", 0, "alim"), ("blim", 0, "blim"), ("a1", 1, "a")):
            nc = await nats.connect(s[i].client_url, user=u, password=u)
            st.push_async_callback(nc.close)
            conns[key] = nc
        sx = await conns["alim"].subscribe("x.>")
        sev = await conns["blim"].subscribe("imp.events.>")
        await conns["alim"].flush()
        await conns["blim"].flush()
        await _until(lambda: _remote(s[1], "A", "x.ok") == 1 and _remote(s[1], "A", "events.ok") == 1,
                     what="interest on s1")
        for subj in ("x.ok", "x.secret", "events.ok", "events.secret"):
            await conns["a1"].publish(subj, subj.encode())
        await conns["a1"].flush()
        assert [m.subject for m in await _collect(sx)] == ["x.ok"]
        assert [m.subject for m in await _collect(sev)] == ["imp.events.ok"]


MAPPING_CONF = """
mappings {
  "m.in": [{destination: "m.west", weight: 100%, cluster: "west"}, {destination: "m.any", weight: 100%}]
}
"""


@pytest.mark.parametrize("names,want", [(["west", "west"], "m.west"), (["east", "east"], "m.any"),
                                        (["west", None], "m.west")])
async def test_cluster_scoped_mapping_follows_the_cluster_name(names, want):
    async with cluster_of(2, MAPPING_CONF, names=names) as s, contextlib.AsyncExitStack() as st:
        pub = await nats.connect(s[1].client_url)
        sub_nc = await nats.connect(s[0].client_url)
        st.push_async_callback(pub.close)
        st.push_async_callback(sub_nc.close)
        sub = await sub_nc.subscribe("m.*")
        await sub_nc.flush()
        await _until(lambda: _remote(s[1], "$G", "m.x") == 1, what="interest")
        await pub.publish("m.in", b"1")
        await pub.flush()
        assert [m.subject for m in await _collect(sub)] == [want]
        # the same mapping on a server without a cluster port keeps the default destinations
        if names[1] is None:
            assert s[1].cluster.name == "west"  # learnt from its peer


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_imports_with_a_go_server_in_the_cluster():
    """One Go and one Rillet server with the same accounts: stream imports delivered once to subscribers on
    both (the Go server announces shadow interest in A and expects it from us), service imports both ways."""
    gport, gcl, ghttp = free_port(), free_port(), free_port()
    conf = IMPORTS_CONF + (f"port: {gport}\nhttp_port: {ghttp}\nserver_name: go1\n"
                           f"cluster {{ name: c, listen: 127.0.0.1:{gcl} }}\n")
    with go_server(conf, ghttp):
        o = load_string(IMPORTS_CONF + "server_name: r0\nlisten: 127.0.0.1:-1\n"
                        f"cluster {{ name: c, listen: 127.0.0.1:-1, routes: [nats://127.0.0.1:{gcl}] }}\n")
        r = Server(o, Logger(out=io.StringIO()))
        await r.start()
        try:
            await _until(lambda: len(r.cluster.routes) == 1, 10, "route to the Go server")
            go_url, r_url = f"nats://127.0.0.1:{gport}", r.client_url
            async with contextlib.AsyncExitStack() as st:
                async def conn(url, user):
                    nc = await nats.connect(url, user=user, password=user)
                    st.push_async_callback(nc.close)
                    return nc
                bg, br, ag, ar = await conn(go_url, "b"), await conn(r_url, "b"), await conn(go_url, "a"), \
                    await conn(r_url, "a")
                sg, sr = await bg.subscribe("imp.events.>"), await br.subscribe("imp.events.>")
                await bg.flush()
                await br.flush()
                await _until(lambda: _remote(r, "A", "events.x") == 1, what="Go's shadow interest in A")
                await _go_sees(ghttp, "events.>", 1)
                for nc, what in ((ag, b"go"), (ar, b"rillet")):
                    await nc.publish("events.x", what)
                    await nc.flush()
                for sub in (sg, sr):
                    assert sorted(m.data for m in await _collect(sub, 0.3)) == [b"go", b"rillet"]

                async def echo(m):
                    await m.respond(b"from " + m.subject.encode())
                await ag.subscribe("svc.go", cb=echo)
                await ar.subscribe("svc.r", cb=echo)
                await ag.flush()
                await ar.flush()
                await _until(lambda: _remote(r, "A", "svc.go") == 1, what="Go responder interest")
                await _go_sees(ghttp, "svc.r", 1)
                assert (await br.request("svc.go", b"", timeout=2)).data == b"from svc.go"
                assert (await bg.request("svc.r", b"", timeout=2)).data == b"from svc.r"
        finally:
            await r.shutdown()
