"""Routes, continued: accounts, imports/exports, permissions and cluster-scoped mappings across a cluster
(clients on different servers, nats-py over real sockets), and the same with a Go nats-server in the
cluster where the wire matters (shadow interest in the exporting account)."""
from __future__ import annotations

import asyncio
import time
import contextlib
import io
import shutil

import nats
import pytest

from helpers import free_port
from rillet.config.options_builder import load_string
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server
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
async def cluster_of(n: int, conf: str, name: str = "c", names: list[str | None] | None = None, cl_extra: str = ""):
    """``n`` Rillet servers with the config text ``conf``, every one routed to the first (full mesh by
    gossip); ``names`` gives a cluster name per server (None: none configured); ``cl_extra``: more
    cluster settings."""
    ports = [free_port() for _ in range(n)]
    servers: list[Server] = []
    try:
        for i in range(n):
            cn = name if names is None else names[i]
            cl = f"name: {cn}, " if cn else ""
            o = load_string(conf + f"server_name: s{i}\nlisten: 127.0.0.1:-1\n"
                            f"cluster {{ {cl}listen: 127.0.0.1:{ports[i]}, routes: [nats://127.0.0.1:{ports[0]}] {cl_extra} }}\n")
            s = build_server(o, Logger(out=io.StringIO()))
            await s.start()
            servers.append(s)
        await _until(lambda: all(s.cluster.servers_connected() == n - 1 for s in servers), 10, "full mesh")
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
        r = build_server(o, Logger(out=io.StringIO()))
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


# ==== TLS on routes ===============================================================================================

x509 = pytest.importorskip("cryptography.x509")


@pytest.fixture(scope="module")
def route_pki(tmp_path_factory):
    import ipaddress

    from cryptography.hazmat.primitives.asymmetric import ec
    from test_tls_options import _cert, _spki_pin, _write
    tmp = tmp_path_factory.mktemp("route_pki")
    out = {}
    for ca_name in ("ca", "other_ca"):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert(ca_name, ca_key, None, ca_key, ca=True)
        out[ca_name] = _write(tmp, ca_name, ca, ca_key)[0]
        k = ec.generate_private_key(ec.SECP256R1())
        c = _cert("localhost", k, ca.subject, ca_key, [x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        out[f"{ca_name}_node"] = _write(tmp, f"{ca_name}_node", c, k)
        out[f"{ca_name}_pin"] = _spki_pin(c)
    return out


def _route_tls(pki, who="ca", ca="ca", extra=""):
    cert, key = pki[f"{who}_node"]
    return f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki[ca]}"\n {extra} }}'


def _tls_server(name: str, cl_port: int, routes: list[int], tls: str, buf: io.StringIO | None = None) -> Server:
    r = ", ".join(f"nats://127.0.0.1:{p}" for p in routes)
    o = load_string(f"server_name: {name}\nlisten: 127.0.0.1:-1\n"
                    f"cluster {{ name: c, listen: 127.0.0.1:{cl_port}, routes: [{r}]\n {tls} }}\n")
    return build_server(o, Logger(debug=True, out=buf if buf is not None else io.StringIO()))


@pytest.mark.parametrize("pool", [-1, 0])  # (no pooling; nats-server's default pool of 3)
async def test_tls_routes_between_rillet_servers(route_pki, pool):
    from rillet.monitor.endpoints import routez
    p = [free_port() for _ in range(3)]
    extra = f"\n pool_size: {pool}" if pool else ""
    servers = [_tls_server(f"t{i}", p[i], [p[0]] if i else [], _route_tls(route_pki) + extra) for i in range(3)]
    try:
        for s in servers:
            await s.start()
        await _until(lambda: all(s.cluster.servers_connected() == 2 for s in servers), 10, "TLS full mesh")
        for s in servers:
            for rc in s.cluster.conns:
                assert rc.transport.get_extra_info("ssl_object") is not None
        assert routez(servers[0], {})["num_routes"] == (2 if pool < 0 else 2 * 4)  # (pool of 3 and pinned $SYS)
        async with contextlib.AsyncExitStack() as st:
            ncs = []
            for s in servers:
                nc = await nats.connect(s.client_url)
                st.push_async_callback(nc.close)
                ncs.append(nc)
            sub = await ncs[2].subscribe("over.tls")
            await ncs[2].flush()
            await _until(lambda: _remote(servers[0], "$G", "over.tls") == 1, what="interest over TLS")
            await ncs[0].publish("over.tls", b"secret")
            await ncs[0].flush()
            assert (await sub.next_msg(2)).data == b"secret"
    finally:
        for s in servers:
            await s.shutdown()


async def test_tls_route_refused_for_an_unknown_ca_or_an_unpinned_key(route_pki):
    p = [free_port() for _ in range(2)]
    buf0, buf1 = io.StringIO(), io.StringIO()
    # the second server's certificate comes from another CA: neither side accepts the other
    a = _tls_server("a", p[0], [], _route_tls(route_pki), buf0)
    b = _tls_server("b", p[1], [p[0]], _route_tls(route_pki, who="other_ca", ca="other_ca"), buf1)
    try:
        await a.start()
        await b.start()
        await _until(lambda: "TLS route handshake error" in buf1.getvalue(), 5, "dial side handshake error")
        await _until(lambda: "TLS route handshake error" in buf0.getvalue(), 5, "accept side handshake error")
        assert not a.cluster.routes and not b.cluster.routes
    finally:
        await b.shutdown()
        await a.shutdown()
    # same CA, but the accepting side pins a key that is not the peer's
    p = [free_port() for _ in range(2)]
    buf0 = io.StringIO()
    a = _tls_server("a", p[0], [], _route_tls(route_pki, extra=f'pinned_certs: ["{route_pki["other_ca_pin"]}"]'),
                    buf0)
    b = _tls_server("b", p[1], [p[0]], _route_tls(route_pki))
    try:
        await a.start()
        await b.start()
        await _until(lambda: "TLS route handshake error: certificate not pinned" in buf0.getvalue(), 5,
                     "pinned refusal")
        assert not a.cluster.routes
    finally:
        await b.shutdown()
        await a.shutdown()


def test_tls_route_settings_refused_at_load(route_pki):
    from rillet.config import ConfigError
    # (verify_and_map and verify_cert_and_check_known_urls work: tests/test_route_gateway_cert_auth.py)
    for extra, word in (("handshake_first: true", "handshake_first"),):
        with pytest.raises(ConfigError) as e:
            load_string(f"cluster {{ listen: 127.0.0.1:-1\n {_route_tls(route_pki, extra=extra)} }}\n", "x.conf")
        assert str(e.value).startswith("x.conf:3:") and word in str(e.value)


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_tls_route_with_a_go_server(route_pki):
    gport, gcl, ghttp = free_port(), free_port(), free_port()
    conf = (f"port: {gport}\nhttp_port: {ghttp}\nserver_name: go1\n"
            f"cluster {{ name: c, listen: 127.0.0.1:{gcl}\n {_route_tls(route_pki)} }}\n")
    with go_server(conf, ghttp):
        # one Rillet server dials the Go server, the Go server dials the other (accepting side)
        p = free_port()
        r_acc = _tls_server("racc", p, [], _route_tls(route_pki))
        r_dial = _tls_server("rdial", free_port(), [gcl, p], _route_tls(route_pki))
        try:
            await r_acc.start()
            await r_dial.start()
            await _until(lambda: r_acc.cluster.servers_connected() == 2 and r_dial.cluster.servers_connected() == 2,
                         10, "TLS mesh with the Go server")
            async with contextlib.AsyncExitStack() as st:
                g = await nats.connect(f"nats://127.0.0.1:{gport}")
                a = await nats.connect(r_acc.client_url)
                d = await nats.connect(r_dial.client_url)
                for nc in (g, a, d):
                    st.push_async_callback(nc.close)
                sg, sa = await g.subscribe("tls.x"), await a.subscribe("tls.x")
                await g.flush()
                await a.flush()
                await _until(lambda: _remote(r_dial, "$G", "tls.x") == 2, what="interest from Go and Rillet")
                await _go_sees(ghttp, "tls.x", 1)
                await d.publish("tls.x", b"1")
                await g.publish("tls.x", b"2")
                await d.flush()
                await g.flush()
                assert sorted(m.data for m in await _collect(sg, 0.3)) == [b"1", b"2"]
                assert sorted(m.data for m in await _collect(sa, 0.3)) == [b"1", b"2"]
        finally:
            await r_dial.shutdown()
            await r_acc.shutdown()


# (compression: s2 on routes and leaf connections is tested in tests/test_cluster_s2.py)


# ==== route pooling and pinned accounts ==========================================================================

POOL_CONF = """
accounts {
  A { users: [{user: a, password: a}] }
  C { users: [{user: c, password: c}] }
  P { users: [{user: p, password: p}] }
  SYS { users: [{user: sys, password: sys}] }
}
system_account: SYS
"""


async def _cross(pub_url, sub_url, user, subject) -> bytes:
    async with contextlib.AsyncExitStack() as st:
        pub = await nats.connect(pub_url, user=user, password=user)
        st.push_async_callback(pub.close)
        sub_nc = await nats.connect(sub_url, user=user, password=user)
        st.push_async_callback(sub_nc.close)
        sub = await sub_nc.subscribe(subject)
        await sub_nc.flush()
        for _ in range(100):  # (until the interest has crossed)
            await pub.publish(subject, b"x")
            await pub.flush()
            try:
                return (await sub.next_msg(0.05)).data
            except nats.errors.TimeoutError:
                continue
        raise AssertionError(f"nothing crossed for {user} on {subject}")


async def test_pool_carries_each_account_on_its_index_and_pins_accounts():
    async with cluster_of(3, POOL_CONF, name="pl", cl_extra=", pool_size: 3") as s:
        a, b, c = s  # (b and c found each other, and their pinned routes, by gossip)
        rid = b.server_id
        assert a.cluster.pool_size == 3 and len(a.cluster.pools[rid]) == 3
        # A and C hash to different pool indexes (FNV-1a of the name modulo 3, as nats-server)
        ra, rc_ = a.cluster.route_for(rid, b"A"), a.cluster.route_for(rid, b"C")
        assert (ra.pool_idx, rc_.pool_idx) == (0, 1) and ra is not rc_
        for user, subj in (("a", "pa"), ("c", "pc")):
            assert await _cross(b.client_url, a.client_url, user, subj) == b"x"
        assert ra.out_msgs == 0 and ra.in_msgs >= 1 and rc_.in_msgs >= 1  # (b published, a received)
        assert all(r.in_msgs == 0 for r in a.cluster.pools[rid] if r not in (ra, rc_))
        # the system account has its own dedicated route (pinned by default, as nats-server)
        sys_route = a.cluster.pinned["SYS"][rid]
        assert sys_route.parser.account == b"SYS" and sys_route not in a.cluster.pools[rid]
        async with contextlib.AsyncExitStack() as st:
            sysc = await nats.connect(a.client_url, user="sys", password="sys")
            st.push_async_callback(sysc.close)
            inbox = sysc.new_inbox()
            sub = await sysc.subscribe(inbox)
            await sysc.flush()
            await _until(lambda: _remote(b, "SYS", inbox) == 1 and _remote(c, "SYS", inbox) == 1,
                         what="SYS interest on the pinned routes")
            await sysc.publish("$SYS.REQ.SERVER.PING", b"", reply=inbox)
            names = sorted(__import__("json").loads(m.data)["server"]["name"] for m in await _collect(sub, 0.5))
            assert names == ["s0", "s1", "s2"]
        assert c.server_id in b.cluster.pinned["SYS"] and b.server_id in c.cluster.pinned["SYS"]
        for user, subj in (("a", "bc.a"), ("c", "bc.c")):
            assert await _cross(b.client_url, c.client_url, user, subj) == b"x"


async def test_configured_pinned_account_gets_a_dedicated_route():
    conf = POOL_CONF
    ports = [free_port() for _ in range(2)]
    servers = []
    try:
        for i in range(2):
            o = load_string(conf + f"server_name: s{i}\nlisten: 127.0.0.1:-1\ncluster {{ name: c, listen: "
                            f"127.0.0.1:{ports[i]}, routes: [nats://127.0.0.1:{ports[0]}], accounts: [P], pool_size: 3 }}\n")
            srv = build_server(o, Logger(out=io.StringIO()))
            await srv.start()
            servers.append(srv)
        await _until(lambda: all(s.cluster.servers_connected() == 1 and len(s.cluster.pinned["P"]) == 1
                                 and len(s.cluster.pinned["SYS"]) == 1 for s in servers), 10, "pools and pins")
        a, b = servers
        assert await _cross(a.client_url, b.client_url, "p", "pinned.subj") == b"x"
        pr = b.cluster.pinned["P"][a.server_id]
        assert pr.in_msgs >= 1 and _remote(a, "P", "pinned.subj") == 1
        assert all(r.in_msgs == 0 for r in b.cluster.pools[a.server_id])
        from rillet.monitor.endpoints import routez
        accs = sorted(r.get("account", "") for r in routez(a, {})["routes"])
        assert accs == ["", "", "", "P", "SYS"]
    finally:
        for srv in servers:
            await srv.shutdown()


async def test_interest_changed_while_only_the_pinned_route_is_up_reaches_the_peer():
    """A subscription of a pinned account (the system account: RAFT groups' $RNRG subjects) made or removed
    while the dedicated route to a server is registered but no pool connection is yet (a restart: the groups
    join during the routes' handshakes) is announced on the pinned route. It used to be dropped (no pool
    yet: no route at all, it seemed), and the peer never learnt it: in a fault run, the members of a RAFT
    group never heard each other again."""
    p0, p1 = free_port(), free_port()
    held: list = []
    release = asyncio.Event()
    a = build_server(load_string(POOL_CONF + f"server_name: a\nlisten: 127.0.0.1:-1\n"
                                 f"cluster {{ name: c, listen: 127.0.0.1:{p0}, pool_size: 3 }}\n"),
                     Logger(out=io.StringIO()))
    b = build_server(load_string(POOL_CONF + f"server_name: b\nlisten: 127.0.0.1:-1\n"
                                 f"cluster {{ name: c, listen: 127.0.0.1:{p1}, routes: [nats://127.0.0.1:{p0}], "
                                 f"pool_size: 3 }}\n"), Logger(out=io.StringIO()))
    dial = b.cluster.solicit

    def solicit(url, rtype, gossip_mode, first, delay=0.0, account=""):
        if account or release.is_set():
            dial(url, rtype, gossip_mode, first, delay, account)
        else:
            held.append((url, rtype, gossip_mode, first, delay, account))  # (b's pool waits: the pinned route first)

    b.cluster.solicit = solicit
    try:
        await a.start()
        async with contextlib.AsyncExitStack() as st:
            sysc = await nats.connect(a.client_url, user="sys", password="sys")
            st.push_async_callback(sysc.close)
            gone = await sysc.subscribe("pin.gone")
            await sysc.flush()
            await b.start()
            await _until(lambda: b.server_id in a.cluster.pinned["SYS"] and a.server_id in b.cluster.pinned["SYS"],
                         10, "the pinned SYS route")
            await _until(lambda: _remote(b, "SYS", "pin.gone") == 1, 5, "the interest sent when the pinned route came")
            assert not a.cluster.pools and not b.cluster.pools and held
            late = await sysc.subscribe("pin.late")  # (while only the pinned route is up)
            await gone.unsubscribe()
            await sysc.flush()
            release.set()
            for args in held:
                dial(*args)
            await _until(lambda: a.cluster.servers_connected() == 1 and b.cluster.servers_connected() == 1, 10,
                         "the pool")
            await _until(lambda: _remote(b, "SYS", "pin.late") == 1 and _remote(b, "SYS", "pin.gone") == 0, 5,
                         "b to see the subscription made and the one removed while only the pinned route was up")
            pub = await nats.connect(b.client_url, user="sys", password="sys")
            st.push_async_callback(pub.close)
            await pub.publish("pin.late", b"x")
            await pub.flush()
            assert (await late.next_msg(5)).data == b"x"
    finally:
        await b.shutdown()
        await a.shutdown()


async def test_pools_of_different_sizes_and_no_pooling_interoperate():
    def mk(name, port, routes, pool):
        r = f", routes: [nats://127.0.0.1:{routes}]" if routes else ""
        o = load_string(POOL_CONF + f"server_name: {name}\nlisten: 127.0.0.1:-1\n"
                        f"cluster {{ name: c, listen: 127.0.0.1:{port}{r}, pool_size: {pool} }}\n")
        return build_server(o, Logger(debug=True, out=io.StringIO()))
    # pools of 3 and 4 (a rolling reload of pool_size): 4 connections, each side sending an account on the
    # connection of its own index (nats-server 2.11+)
    p0, p1 = free_port(), free_port()
    a, b = mk("a", p0, None, 3), mk("b", p1, p0, 4)
    try:
        await a.start()
        await b.start()
        await _until(lambda: a.cluster.servers_connected() == 1 and b.cluster.servers_connected() == 1, 5, "pools")
        assert len(a.cluster.pools[b.server_id]) == len(b.cluster.pools[a.server_id]) == 4
        assert len(a.cluster.conns) == len(b.cluster.conns) == 4 + 1  # (and the SYS route)
        for user, subj in (("a", "pa"), ("c", "pc")):
            assert await _cross(a.client_url, b.client_url, user, subj) == b"x"
            assert await _cross(b.client_url, a.client_url, user, subj) == b"x"
    finally:
        await b.shutdown()
        await a.shutdown()
    # pooling on one side, off (-1) on the other: one route carries every account, nothing pinned
    p0, p1 = free_port(), free_port()
    a, b = mk("a", p0, None, 3), mk("b", p1, p0, -1)
    try:
        await a.start()
        await b.start()
        await _until(lambda: a.cluster.servers_connected() == 1 and b.cluster.servers_connected() == 1, 5, "route")
        assert a.cluster.route_for(b.server_id, b"$G").no_pool and not a.cluster.pinned["SYS"]
        assert len([rc for rc in a.cluster.conns if rc.registered]) == 1
        assert await _cross(a.client_url, b.client_url, "a", "np") == b"x"
    finally:
        await b.shutdown()
        await a.shutdown()


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_pool_and_pinned_routes_with_a_go_server():
    gport, gcl, ghttp = free_port(), free_port(), free_port()
    conf = POOL_CONF + (f"port: {gport}\nhttp_port: {ghttp}\nserver_name: go1\n"
                        f"cluster {{ name: c, listen: 127.0.0.1:{gcl}, accounts: [P] }}\n")
    with go_server(conf, ghttp):
        o = load_string(POOL_CONF + "server_name: r0\nlisten: 127.0.0.1:-1\n"
                        f"cluster {{ name: c, listen: 127.0.0.1:-1, routes: [nats://127.0.0.1:{gcl}], accounts: [P], "
                        "pool_size: 3 }\n")
        r = build_server(o, Logger(out=io.StringIO()))
        await r.start()
        try:
            await _until(lambda: r.cluster.servers_connected() == 1 and r.cluster.pinned["P"] and r.cluster.pinned["SYS"],
                         10, "pool and pinned routes to the Go server")
            import json
            import urllib.request

            def go_routes():
                z = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ghttp}/routez", timeout=2).read())
                return sorted(rt.get("account", "") for rt in z["routes"])
            # (Rillet counts the server connected on its first route; the Go side lists each pool route once it
            # has registered it: a CI run read 4 of the 5 at once)
            deadline = time.monotonic() + 10
            while go_routes() != ["", "", "", "P", "SYS"] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert go_routes() == ["", "", "", "P", "SYS"]
            go_url = f"nats://127.0.0.1:{gport}"
            for user, subj in (("a", "ga"), ("c", "gc"), ("p", "gp")):
                assert await _cross(go_url, r.client_url, user, subj) == b"x"
                assert await _cross(r.client_url, go_url, user, subj + "2") == b"x"
            # the system account over its pinned route: a PING from the Rillet side sees both servers
            async with contextlib.AsyncExitStack() as st:
                sysc = await nats.connect(r.client_url, user="sys", password="sys")
                st.push_async_callback(sysc.close)
                inbox = sysc.new_inbox()
                sub = await sysc.subscribe(inbox)
                await sysc.flush()
                await _go_sees(ghttp, inbox, 1)
                await sysc.publish("$SYS.REQ.SERVER.PING", b"", reply=inbox)
                names = sorted(json.loads(m.data)["server"]["name"] for m in await _collect(sub, 0.5))
                assert names == ["go1", "r0"]
        finally:
            await r.shutdown()


async def test_stream_import_on_a_server_whose_accounts_do_not_make_shadows():
    """A server with a gateway makes no shadow subscriptions (its interest listeners do not: rillet.app.compose):
    there the stream import's own subscription still delivers (the single-server way), nothing is lost."""
    o = load_string(IMPORTS_CONF + "listen: 127.0.0.1:-1\ngateway { name: g1, listen: 127.0.0.1:-1 }\n")
    s = build_server(o, Logger(out=io.StringIO()))
    await s.start()
    try:
        assert not s.accounts["B"].shadows
        async with contextlib.AsyncExitStack() as st:
            b = await nats.connect(s.client_url, user="b", password="b")
            a = await nats.connect(s.client_url, user="a", password="a")
            st.push_async_callback(b.close)
            st.push_async_callback(a.close)
            sub = await b.subscribe("imp.events.>")
            await b.flush()
            await a.publish("events.x", b"1")
            await a.flush()
            assert [m.subject for m in await _collect(sub)] == ["imp.events.x"]
    finally:
        await s.shutdown()
