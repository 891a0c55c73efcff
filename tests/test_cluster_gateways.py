"""Gateways between clusters (super-clusters), driven as users do: nats-py clients on servers of each cluster.

Rillet super-clusters come from ``rillet.app.embed.run_super_cluster`` (in process, free ports; the first
cluster's servers know no gateway, the others are configured with it and learn the rest by gossip). The
optimistic mode is exercised with ``FORCE_INTEREST_ONLY`` off, as nats-server's own tests turn off its
forced interest-only mode. A raw socket plays a remote gateway for the wire-level answers (A-, RS-, errors),
and one test joins a Rillet cluster and a Go nats-server cluster (nats-server from PATH).
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import nats
import pytest

from helpers import free_port
from rillet.cluster import gateway as gwmod
from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.config import ConfigError
from rillet.config.gateway_section import GatewayOptions, RemoteGateway
from rillet.config.options import Options
from rillet.config.options_builder import load_string
from rillet.monitor.endpoints import gatewayz
from rillet.app.embed import run_server, run_super_cluster
from rillet.server.logging import Logger

GO_SERVER = shutil.which("nats-server")


async def _until(cond, timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _interest(srv, cluster: str, subject: str, acc: bytes = b"$G") -> bool:
    """Would ``srv`` send a message on ``subject`` to gateway ``cluster`` (plain interest)?"""
    c = srv.gateway.out.get(cluster)
    return c is not None and c.interest(acc, subject)[0]


def _routed(srv, subject: str, account: str = "$G") -> bool:
    """Does ``srv`` hold a route's interest matching ``subject`` (its cluster peers' subscriptions)?"""
    from rillet.cluster.routed import RemoteSub
    r = srv.accounts[account].sublist.match(subject)
    return any(type(x) is RemoteSub for x in r.psubs) or any(type(x) is RemoteSub for g in r.qsubs for x in g)


def _queue_interest(srv, cluster: str, subject: str, acc: bytes = b"$G") -> bool:
    c = srv.gateway.out.get(cluster)
    if c is None:
        return False
    r = c.interest(acc, subject)[1]
    return r is not None and bool(r.qsubs)


@contextlib.asynccontextmanager
async def clients(urls):
    ncs = [await nats.connect(u, max_reconnect_attempts=0) for u in urls]
    try:
        yield ncs
    finally:
        for nc in ncs:
            await nc.close()


class Inbox:
    def __init__(self) -> None:
        self.msgs: list = []

    async def cb(self, m) -> None:
        self.msgs.append(m)

    @property
    def data(self) -> list[bytes]:
        return [m.data for m in self.msgs]


# ==== configuration ==========================================================================================

def test_gateway_block_parsed_with_defaults():
    o = load_string('gateway { name: A, listen: "127.0.0.1:-1", advertise: "h:7222", connect_retries: 3, '
                    'connect_backoff: true, reject_unknown_cluster: true, '
                    'authorization { user: u, password: p, timeout: 2 }, '
                    'gateways: [{name: B, url: "nats://127.0.0.1:7223"}, {name: C, urls: ["h1:1", "nats://h2:2"]}] }')
    g = o.gateway_opts
    assert (g.name, g.host, g.port, g.advertise) == ("A", "127.0.0.1", -1, "h:7222")
    assert (g.connect_retries, g.connect_backoff, g.reject_unknown) == (3, True, True)
    assert load_string('gateway { name: A, port: 1, write_deadline: "2s" }').gateway_opts.write_deadline == 2.0
    assert (g.username, g.password, g.auth_timeout) == ("u", "p", 2.0)
    assert [(r.name, r.urls) for r in g.gateways] == [
        ("B", ["nats://127.0.0.1:7223"]), ("C", ["nats://h1:1", "nats://h2:2"])]
    assert o.gateway["name"] == "A"  # the block as written stays for monitoring
    d = load_string("gateway { name: A, port: 7222 }").gateway_opts
    assert (d.host, d.port, d.connect_retries, d.reject_unknown, d.gateways) == ("", 7222, 0, False, [])
    for key in ("host", "net"):
        assert load_string(f"gateway {{ name: A, {key}: 10.0.0.1, port: 1 }}").gateway_opts.host == "10.0.0.1"
    assert load_string("gateway { name: A, reject_unknown: true }").gateway_opts.reject_unknown
    assert load_string("gateway { reject_unknown: true }").gateway_opts.enabled is False  # no name, no port


@pytest.mark.parametrize("text, error", [
    ("gateway { name: A }", 'gateway "A" has no port specified (select -1 for random port)'),
    ("gateway { port: 7222 }", "gateway has no name"),
    ("gateway { name: A, port: 1, gateways: [{name: B}] }", 'gateway "B" has no URL'),
    ('gateway { name: A, port: 1, gateways: [{url: "h:1"}] }', "gateway in the list 0 has no name"),
])
def test_gateway_options_refused_at_start(text, error):
    """nats-server checks these when it starts (its -t says the file is valid), and so does Rillet."""
    from rillet.app.compose import build_server
    o = load_string(text, "c.conf")
    with pytest.raises(ValueError) as e:
        build_server(o, Logger(out=io.StringIO()))
    assert str(e.value) == error



@pytest.mark.parametrize("text, error", [
    ('gateway { name: "a b", port: 1 }', "c.conf:1:10: gateway name cannot contain spaces"),
    ("gateway { name: A, port: 1, gateways: 5 }", "Expected gateways field to be an array, got int64"),
    ('gateway { name: A, port: 1, gateways: ["x"] }', "c.conf:1:40: Expected gateway entry to be a map/struct, got x"),
    ("gateway { name: A, port: 1, bogus: 1 }", 'c.conf:1:28: unknown field "bogus"'),
    ("gateway { name: A, port: 1, gateways: [{name: B, url: h:1, foo: 1}] }", 'c.conf:1:59: unknown field "foo"'),
    ("gateway { name: A, port: 1, authorization { token: t } }",
     "c.conf:1:28: Gateway authorization does not support tokens"),
    ("gateway { name: A, port: 1, authorization { users: [{user: a, password: b}] } }",
     "c.conf:1:28: Gateway authorization does not allow multiple users"),
    # what Rillet's gateways do not do is refused, never ignored
    # (tls verify_and_map works: tests/test_route_gateway_cert_auth.py)
    ("gateway { name: A, port: 1, tls { verify_and_map: 1 } }",
     "c.conf:1:34: error parsing tls config, expected 'verify_and_map' to be a boolean"),
    ('gateway { name: A, port: 1, write_timeout: "sometimes" }',
     "c.conf:1:28: write_timeout must be 'default', 'close' or 'retry'"),
])
def test_gateway_config_errors(text, error):
    with pytest.raises(ConfigError) as e:
        load_string(text, "c.conf")
    assert str(e.value) == error


# ==== Rillet super-clusters ==================================================================================

async def test_pub_sub_across_clusters_both_ways():
    async with run_super_cluster(2, 2) as (a, b):
        async with clients([a[0].client_url, a[1].client_url, b[0].client_url, b[1].client_url]) as ncs:
            subs = [Inbox() for _ in ncs]
            for nc, ib in zip(ncs, subs):
                await nc.subscribe("x.>", cb=ib.cb)
                await nc.flush()
            # every server's outbound gateway knows the other cluster's interest
            await _until(lambda: all(_interest(s, "B", "x.1") for s in a) and all(_interest(s, "A", "x.1") for s in b)
                         and all(_routed(s, "x.1") for s in a + b), what="interest across the gateways and routes")
            assert not _interest(a[0], "B", "y")  # interest-only: nothing else crosses
            for i, nc in enumerate(ncs):
                await nc.publish(f"x.{i}", f"m{i}".encode(), headers={"K": str(i)} if i % 2 else None)
                await nc.flush()
            await _until(lambda: all(len(ib.msgs) == 4 for ib in subs), what="each message once to each subscriber")
            await asyncio.sleep(0.05)
            for ib in subs:
                assert sorted(ib.data) == [b"m0", b"m1", b"m2", b"m3"]  # exactly once each, across and within
                hdrs = {m.subject: m.headers for m in ib.msgs}
                assert hdrs["x.1"] == {"K": "1"} and not hdrs["x.0"]


async def test_queue_group_served_by_local_cluster_first_then_one_remote():
    async with run_super_cluster(2, 2) as (a, b):
        async with clients([a[0].client_url, a[1].client_url, b[0].client_url, b[1].client_url]) as ncs:
            qa, qb1, qb2, plain = Inbox(), Inbox(), Inbox(), Inbox()
            sa = await ncs[1].subscribe("work", queue="q", cb=qa.cb)
            await ncs[2].subscribe("work", queue="q", cb=qb1.cb)
            await ncs[3].subscribe("work", queue="q", cb=qb2.cb)
            await ncs[3].subscribe("work", cb=plain.cb)
            for nc in ncs:
                await nc.flush()
            await _until(lambda: _queue_interest(a[0], "B", "work") and _interest(a[0], "B", "work")
                         and _queue_interest(b[0], "A", "work") and _routed(b[0], "work") and _routed(b[1], "work"),
                         what="queue interest across")
            for i in range(20):
                await ncs[0].publish("work", b"%d" % i)  # published in A: A's member serves every one
            await ncs[0].flush()
            await _until(lambda: len(qa.msgs) == 20 and len(plain.msgs) == 20, what="deliveries")
            for i in range(20):
                await ncs[2].publish("work", b"b%d" % i)  # published in B: B's members only
            await ncs[2].flush()
            await _until(lambda: len(qb1.msgs) + len(qb2.msgs) == 20 and len(plain.msgs) == 40, what="B deliveries")
            await asyncio.sleep(0.1)
            assert len(qa.msgs) == 20 and len(qb1.msgs) + len(qb2.msgs) == 20
            # A's member leaves: A's messages go to one member in B, once each
            await sa.unsubscribe()
            await ncs[1].flush()
            await _until(lambda: not a[0].gateway.pasi.get(b"$G", {}).get((b"work", b"q")), what="A's queue gone")
            for i in range(20):
                await ncs[0].publish("work", b"r%d" % i)
            await ncs[0].flush()
            await _until(lambda: len(qb1.msgs) + len(qb2.msgs) == 40, what="remote queue deliveries")
            await asyncio.sleep(0.1)
            got = sorted(m.data for m in qb1.msgs + qb2.msgs if m.data.startswith(b"r"))
            assert got == sorted(b"r%d" % i for i in range(20)) and len(qa.msgs) == 20


@pytest.mark.parametrize("mapped", [True, False], ids=["_GR_-reply", "plain-reply"])
async def test_request_reply_across_clusters(mapped, monkeypatch):
    # no recent subscription: the reply crosses as it is, on the requester's announced interest; else every
    # request of the test is within the window (2 s in nats-server; longer here for slow machines)
    monkeypatch.setattr(gwmod, "RECENT_SUB_EXPIRATION", 30.0 if mapped else 0.0)
    async with run_super_cluster(2, 2) as (a, b):
        async with clients([a[0].client_url, b[1].client_url, a[1].client_url]) as (req, svc, req2):
            seen = []

            async def handler(m):
                seen.append(m.reply)
                await m.respond(b"pong:" + m.data)
            await svc.subscribe("svc", cb=handler)
            await svc.flush()
            await _until(lambda: _interest(a[0], "B", "svc") and _interest(a[1], "B", "svc"), what="svc interest")
            for nc in (req, req2):  # (creates each requester's inbox subscription)
                assert (await nc.request("svc", b"w", timeout=2)).data == b"pong:w"
            if not mapped:  # a plain reply needs the requester's interest known across, as in nats-server
                inboxes = [nc._resp_sub_prefix.decode() + "x" for nc in (req, req2)]
                await _until(lambda: all(_interest(s, "A", i) for s in b for i in inboxes), what="inbox interest")
            del seen[:]
            for i in range(3):
                r = await req.request("svc", b"%d" % i, timeout=2)
                assert r.data == b"pong:%d" % i
                r = await req2.request("svc", b"b%d" % i, timeout=2)
                assert r.data == b"pong:b%d" % i
            # the service sees the requester's own reply subject, as with nats-server
            assert len(seen) == 6 and all(s.startswith("_INBOX.") for s in seen)
            routed = b[1].accounts["$G"].gw.replies  # what crossed: _GR_.<cluster hash>.<server hash>.<reply>
            if mapped:
                crossed = {routed[s.encode()][0].decode() for s in seen}
                assert {x.split(".")[1] + "." + x.split(".")[2] for x in crossed} == {
                    f"{ci.gateway_hash('A').decode()}.{ci.gateway_hash(s.server_id).decode()}" for s in a}
                assert {x.split(".", 3)[3] for x in crossed} == set(seen)
            else:
                assert not any(s.encode() in routed for s in seen)
            # no responders anywhere: a 503, not a timeout
            with pytest.raises(nats.errors.NoRespondersError):
                await req.request("nobody", b"", timeout=2)


async def test_three_clusters_learn_each_other_by_gossip(monkeypatch):
    from rillet.cluster import gateway_conn
    monkeypatch.setattr(gateway_conn, "FIRST_PING_INTERVAL", 0.01)
    async with run_super_cluster(3, 1, names=["E", "F", "G"]) as (e, f, g):
        # F and G were configured with E only: they met through E's gossip (implicit gateways)
        assert set(f[0].gateway.out) == {"E", "G"} and set(g[0].gateway.out) == {"E", "F"}
        assert g[0].gateway.remotes["F"].implicit and not g[0].gateway.remotes["E"].implicit
        async with clients([e[0].client_url, f[0].client_url, g[0].client_url]) as ncs:
            ib = Inbox()
            await ncs[2].subscribe("to.g", cb=ib.cb)
            await ncs[2].flush()
            await _until(lambda: _interest(e[0], "G", "to.g") and _interest(f[0], "G", "to.g"), what="interest")
            await ncs[0].publish("to.g", b"from-e")
            await ncs[1].publish("to.g", b"from-f")
            for nc in ncs[:2]:
                await nc.flush()
            await _until(lambda: len(ib.msgs) == 2, what="messages")
            await asyncio.sleep(0.05)
            assert sorted(ib.data) == [b"from-e", b"from-f"]  # a gateway message never crosses a second gateway
        gz = gatewayz(g[0], {"accs": "1"})
        assert set(gz["outbound_gateways"]) == {"E", "F"} and gz["name"] == "G"
        assert gz["outbound_gateways"]["E"]["configured"] is True
        assert gz["outbound_gateways"]["F"]["configured"] is False
        # the first PING goes soon after the handshake: RTTs are known, outbound gateways ordered by them
        await _until(lambda: all(c.rtt > 0 for c in g[0].gateway.outo), what="gateway RTTs")
        assert [c.rtt for c in g[0].gateway.outo] == sorted(c.rtt for c in g[0].gateway.outo)
        assert gatewayz(g[0], {})["outbound_gateways"]["E"]["connection"]["rtt"] != "0s"
        only = gatewayz(g[0], {"gw_name": "F"})
        assert set(only["outbound_gateways"]) == {"F"} and set(only["inbound_gateways"]) <= {"F"}
        from rillet.monitor.varz import varz_gateway
        v = varz_gateway(g[0])
        assert v["name"] == "G" and v["port"] == g[0].gateway.addr[1]
        assert v["gateways"] == [{"name": "E", "urls": [f"127.0.0.1:{e[0].gateway.addr[1]}"]}]


async def test_optimistic_mode_switches_to_interest_only(monkeypatch):
    monkeypatch.setattr(gwmod, "FORCE_INTEREST_ONLY", False)
    monkeypatch.setattr(gwmod, "MAX_RUNSUB_BEFORE_SWITCH", 20)  # (nats-server: 1000; see the full run below)
    async with run_super_cluster(2, 1) as (a, b):
        async with clients([a[0].client_url, b[0].client_url]) as (na, nb):
            keep = Inbox()
            await na.subscribe("keep", cb=keep.cb)
            await na.flush()
            # optimistic: B sends everything until A says no (RS- per subject)
            assert _interest(b[0], "A", "anything")
            for i in range(5):
                await nb.publish(f"none.{i}", b"")
            await nb.flush()
            await _until(lambda: not _interest(b[0], "A", "none.4"), what="RS- from A")
            out_acc = gatewayz(b[0], {"accs": "1"})["outbound_gateways"]["A"]["accounts"]
            in_acc = gatewayz(a[0], {"accs": "1"})["inbound_gateways"]["B"][0]["accounts"]
            assert {x["name"]: x for x in out_acc}["$G"] == {
                "name": "$G", "interest_mode": "Optimistic", "no_interest_count": 5, "interest_only_threshold": 20}
            assert {x["name"]: x for x in in_acc}["$G"] == {
                "name": "$G", "interest_mode": "Optimistic", "no_interest_count": 5, "interest_only_threshold": 20}
            # a new subscription on one of them clears it (RS+)
            late = Inbox()
            await na.subscribe("none.3", cb=late.cb)
            await na.flush()
            await _until(lambda: _interest(b[0], "A", "none.3"), what="RS+ clears the no-interest")
            # past the threshold A switches the account: INFO start, RS+ for all, INFO complete
            for i in range(5, 40):
                await nb.publish(f"none.{i}", b"")
            await nb.flush()
            await _until(lambda: b[0].gateway.out["A"].outsim[b"$G"].mode == 2, what="interest-only on B")
            out_acc = {x["name"]: x for x in gatewayz(b[0], {"accs": "1"})["outbound_gateways"]["A"]["accounts"]}
            assert out_acc["$G"]["interest_mode"] == "Interest-Only" and out_acc["$G"]["num_subs"] >= 2
            assert "no_interest_count" not in out_acc["$G"]
            in_acc = {x["name"]: x for x in gatewayz(a[0], {"accs": "1"})["inbound_gateways"]["B"][0]["accounts"]}
            assert in_acc["$G"]["interest_mode"] == "Interest-Only"
            assert not _interest(b[0], "A", "none.0") and _interest(b[0], "A", "keep") and _interest(b[0], "A", "none.3")
            await nb.publish("keep", b"k")
            await nb.publish("none.3", b"n3")
            await nb.flush()
            await _until(lambda: keep.data == [b"k"] and late.data == [b"n3"], what="deliveries after the switch")


async def test_optimistic_switch_at_nats_servers_threshold(monkeypatch):
    """1000 subjects without interest (nats-server's gatewayMaxRUnsubBeforeSwitch), then the switch."""
    monkeypatch.setattr(gwmod, "FORCE_INTEREST_ONLY", False)
    assert gwmod.MAX_RUNSUB_BEFORE_SWITCH == 1000
    async with run_super_cluster(2, 1) as (a, b):
        async with clients([a[0].client_url, b[0].client_url]) as (na, nb):
            await na.subscribe("keep")
            await na.flush()
            for i in range(1000):
                await nb.publish(f"n.{i}", b"")
            await nb.flush()
            e = b[0].gateway.out["A"]
            await _until(lambda: len(e.outsim[b"$G"].ni or ()) == 1000, what="1000 RS-")
            assert a[0].gateway.ins["B"][0].insim[b"$G"].mode == 0
            await nb.publish("n.1000", b"")
            await nb.flush()
            await _until(lambda: e.outsim[b"$G"].mode == 2, what="switch")
            assert a[0].gateway.ins["B"][0].insim[b"$G"].mode == 2


# ==== the wire, with a raw socket as the remote gateway =========================================================

class FakeGateway:
    """A socket playing a remote gateway that dials Rillet's gateway port."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, needle: bytes, timeout: float = 3.0) -> bytes:
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while needle not in self.buf:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not received; got {self.buf[-500:]!r}")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"closed before {needle!r}; got {self.buf[-500:]!r}")
            self.buf += chunk
        return self.buf

    def close(self) -> None:
        self.sock.close()


def _gw_options(name: str, **kw) -> Options:
    o = Options(host="127.0.0.1", port=-1, server_name=f"{name}-0")
    o.gateway_opts = GatewayOptions(name=name, host="127.0.0.1", port=-1, **kw)
    o.gateway = {"name": name}
    return o


async def _raw(fn):
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def test_wire_no_interest_answers_and_errors(monkeypatch):
    monkeypatch.setattr(gwmod, "FORCE_INTEREST_ONLY", False)
    async with run_server(_gw_options("A")) as srv:
        port = srv.gateway.addr[1]
        peer = FakeGateway(port)
        info = ci.decode_info((await _raw(lambda: peer.read_until(b"\r\n"))).split(b" ", 1)[1].strip())
        assert info.gateway == "A" and info.gateway_nrp and not info.gateway_iom and info.gateway_url
        assert peer.buf.endswith(b"}\r\n")  # no blank before CRLF on gateways
        peer.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(name="NFAKE", gateway="Z"))) +
                  cp.info_frame(ci.encode_info(ci.Info(server_id="NFAKE", server_name="z-0", gateway="Z",
                                                       gateway_urls=["127.0.0.1:1"])), blank=False))
        await _until(lambda: "Z" in srv.gateway.ins, what="inbound registered")
        # a message for an account that is not here: A-; for a subject without interest: RS-
        peer.send(b"RMSG NOPE foo 2\r\nhi\r\nRMSG $G nobody.here 2\r\nhi\r\nRMSG NOPE foo 2\r\nhi\r\nPING\r\n")
        data = await _raw(lambda: peer.read_until(b"PONG\r\n"))
        assert data.count(b"A- NOPE\r\n") == 1 and data.count(b"RS- $G nobody.here\r\n") == 1
        async with clients([srv.client_url]) as (nc,):
            await nc.subscribe("nobody.here")
            await nc.flush()
            await _raw(lambda: peer.read_until(b"RS+ $G nobody.here\r\n"))  # the no-interest is cleared
        # RS+ on an inbound connection is a protocol violation
        peer.send(b"RS+ $G foo\r\n")
        await _until(lambda: "Z" not in srv.gateway.ins, what="inbound closed")
        peer.close()
        # a client on the gateway port
        c = FakeGateway(port)
        await _raw(lambda: c.read_until(b"\r\n"))
        c.send(b'CONNECT {"verbose":false,"lang":"go"}\r\n')
        assert b"-ERR 'attempted to connect to gateway port'" in await _raw(lambda: c.read_until(b"gateway port'"))
        c.close()


async def test_reject_unknown_and_authorization():
    o = _gw_options("A", reject_unknown=True, username="gw", password="secret", advertise="gw.example.com:7777",
                    gateways=[RemoteGateway("K", ["nats://127.0.0.1:1"])])
    async with run_server(o) as srv:
        port = srv.gateway.addr[1]
        assert srv.gateway.info.gateway_url == "gw.example.com:7777"
        assert gatewayz(srv, {})["host"] == "gw.example.com" and gatewayz(srv, {})["port"] == 7777
        for connect, err in (
                (ci.RouteConnect(name="N1", gateway="Q", user="gw", password="secret"),
                 b"-ERR 'Connection to gateway \"A\" rejected'"),
                (ci.RouteConnect(name="N1", gateway="K", user="gw", password="bad"), b"-ERR 'Authorization Violation'")):
            peer = FakeGateway(port)
            await _raw(lambda: peer.read_until(b"\r\n"))
            assert ci.decode_info(peer.buf.split(b" ", 1)[1].strip()).auth_required
            peer.send(cp.connect_frame(ci.encode_route_connect(connect)))
            await _raw(lambda: peer.read_until(err))
            peer.close()
        assert srv.gateway.ins == {}


@pytest.mark.parametrize("retries, backoff", [(0, False), (2, True)])
async def test_connect_retries_of_an_implicit_gateway(retries, backoff, monkeypatch):
    """A gateway learnt by gossip that cannot be reached is dialled connect_retries more times, then
    forgotten (an explicit one is dialled until it answers)."""
    monkeypatch.setattr(gwmod, "CONNECT_DELAY", 0.01)
    buf = io.StringIO()
    o = _gw_options("A", connect_retries=retries, connect_backoff=backoff)
    async with run_server(o, log=Logger(debug=True, out=buf)) as srv:
        # the gossip a route brings (INFO gateway_cmd 1 from a server of this cluster)
        srv.gateway.info_from_route(ci.Info(server_id="GWX", gateway="Z", gateway_urls=[f"127.0.0.1:{free_port()}"],
                                            gateway_cmd=ci.GATEWAY_CMD_GOSSIP), "X")
        assert srv.gateway.remotes["Z"].implicit
        await _until(lambda: "Z" not in srv.gateway.remotes, what="implicit gateway forgotten")
        attempts = buf.getvalue().count('Connecting to implicit gateway "Z"')
        assert attempts == retries + 1, buf.getvalue()[-3000:]


async def test_gateway_credentials_and_retries_between_rillet_clusters():
    """B dials A with credentials from its URL; A is started late: B retries until it is there."""
    aport = free_port()
    ob = _gw_options("B", gateways=[RemoteGateway("A", [f"nats://gw:pw@127.0.0.1:{aport}"])])
    async with run_server(ob) as b:
        b.gateway.solicit_delay = 0
        await asyncio.sleep(0.05)
        oa = _gw_options("A", username="gw", password="pw")
        oa.gateway_opts.port = aport
        async with run_server(oa) as a:
            await _until(lambda: "A" in b.gateway.out and "B" in a.gateway.out, timeout=8, what="gateways up")
            assert b.gateway.remotes["A"].implicit is False and a.gateway.remotes["B"].implicit is True


async def test_stalled_gateway_peer_is_closed_at_the_write_deadline(monkeypatch):
    """An outbound gateway whose peer stops reading is closed as a slow consumer at the gateway block's
    write_deadline (the peer here announces no interest-only mode: every message goes to it)."""
    monkeypatch.setattr(gwmod, "SOLICIT_DELAY", 0.0)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    buf = io.StringIO()
    o = _gw_options("A", write_deadline=0.3,
                    gateways=[RemoteGateway("Z", [f"nats://127.0.0.1:{listener.getsockname()[1]}"])])
    try:
        async with run_server(o, log=Logger(out=buf)) as srv:
            listener.settimeout(5)
            peer, _ = await _raw(listener.accept)
            peer.sendall(cp.info_frame(ci.encode_info(ci.Info(server_id="NZ", server_name="z-0", gateway="Z",
                                                              gateway_nrp=True)), blank=False))
            await _until(lambda: "Z" in srv.gateway.out, what="outbound to the stalled peer")
            async with clients([srv.client_url]) as (nc,):
                chunk = b"x" * 4096
                for _ in range(4000):  # 16 MB, above the 4 MB the transport buffers before pausing
                    await nc.publish("load", chunk)
                await nc.flush()
                await _until(lambda: "Z" not in srv.gateway.out, what="slow gateway closed")
            assert "Slow Consumer Detected: WriteDeadline of 300ms exceeded" in buf.getvalue()
            assert "Gateway connection closed: Slow Consumer (Write Deadline)" in buf.getvalue()
            peer.close()
    finally:
        listener.close()


async def test_reload_refuses_gateway_changes():
    text = 'listen: "127.0.0.1:-1"\ngateway { name: A, listen: "127.0.0.1:-1", connect_retries: %d }\n'
    async with run_server(load_string(text % 1)) as srv:
        srv.reload(load_string(text % 1))  # unchanged: fine
        with pytest.raises(ValueError, match=r"^config reload not supported for Gateway: old=\{name:A .*"
                                             r"connect_retries:1 .*new=\{name:A .*connect_retries:2 "):
            srv.reload(load_string(text % 2))
        with pytest.raises(ValueError, match="config reload not supported for Gateway"):
            srv.reload(load_string('listen: "127.0.0.1:-1"\n'))
        assert srv.opts.gateway_opts.connect_retries == 1


# ==== a Rillet cluster and a Go nats-server cluster ===============================================================

@contextlib.contextmanager
def go_server(conf: str, ports: list[int]):
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(conf)
    p = subprocess.Popen([GO_SERVER, "-c", f.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        for port in ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
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


def _shape(d, depth=0):
    """The field names of a JSON document, recursively (lists: the union of their elements' shapes)."""
    if isinstance(d, dict):
        return {k: _shape(v, depth + 1) for k, v in d.items()}
    if isinstance(d, list):
        merged: dict = {}
        for x in d:
            s = _shape(x, depth + 1)
            if isinstance(s, dict):
                merged.update(s)
        return [merged] if merged else []
    return type(d).__name__


@pytest.mark.skipif(GO_SERVER is None, reason="nats-server binary not on PATH")
async def test_gateway_with_a_go_cluster():
    """Two Rillet servers (cluster A) and two Go servers (cluster B); only the first Go server is configured
    with a gateway, to the first Rillet server: the others learn the other cluster by gossip (Rillet's
    second server over its route, Go's second over its route), and the clients sit on those two."""
    cport, gport, hport, rport, cport1, gport1, rport1, hport1 = (free_port() for _ in range(8))
    async with run_super_cluster(1, 2, names=["A"]) as (a,):
        ra = a[1]
        conf = (f"port: {cport}\nhttp: 127.0.0.1:{hport}\nserver_name: go-b0\n"
                f"cluster {{ name: B, listen: 127.0.0.1:{rport} }}\n"
                f"gateway {{ name: B, listen: 127.0.0.1:{gport}, "
                f'gateways: [{{name: A, url: "nats://127.0.0.1:{a[0].gateway.addr[1]}"}}] }}\n')
        conf1 = (f"port: {cport1}\nhttp: 127.0.0.1:{hport1}\nserver_name: go-b1\n"
                 f'cluster {{ name: B, listen: 127.0.0.1:{rport1}, routes: ["nats://127.0.0.1:{rport}"] }}\n'
                 f"gateway {{ name: B, listen: 127.0.0.1:{gport1} }}\n")
        with go_server(conf, [cport, gport, hport]), go_server(conf1, [cport1, gport1, hport1]):
            await _until(lambda: all("B" in s.gateway.out for s in a)
                         and sum(len(s.gateway.ins.get("B", ())) for s in a) >= 2, timeout=10,
                         what="gateways both ways with both Go servers")
            assert all(s.gateway.out["B"].iom for s in a)  # Go 2.15 announces its forced interest-only mode
            assert a[1].gateway.remotes["B"].implicit  # learnt over the route from A-0
            assert set(a[0].gateway.remotes["B"].urls) == {f"127.0.0.1:{gport}", f"127.0.0.1:{gport1}"}
            async with clients([ra.client_url, f"nats://127.0.0.1:{cport1}"]) as (nr, ng):
                from_go, from_rillet = Inbox(), Inbox()
                await nr.subscribe("to.rillet.*", cb=from_go.cb)
                await ng.subscribe("to.go.*", cb=from_rillet.cb)

                async def rillet_svc(m):
                    await m.respond(b"rillet:" + m.data)

                async def go_svc(m):
                    await m.respond(b"go:" + m.data)
                await nr.subscribe("svc.rillet", cb=rillet_svc)
                await ng.subscribe("svc.go", cb=go_svc)
                await nr.flush()
                await ng.flush()
                await _until(lambda: _interest(ra, "B", "to.go.x") and _interest(ra, "B", "svc.go")
                             and _routed(a[0], "to.rillet.x") and _routed(a[0], "svc.rillet"),
                             what="Go's interest reached Rillet, Rillet's crossed its route")

                async def retry_until(fn, what):
                    for _ in range(100):
                        try:
                            return await fn()
                        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                            await asyncio.sleep(0.05)
                    raise AssertionError(what)
                # Rillet's interest reaches Go (through Go's outbound, switched to interest-only by us)
                r = await retry_until(lambda: ng.request("svc.rillet", b"1", timeout=0.5), "Go -> Rillet request")
                assert r.data == b"rillet:1"
                r = await nr.request("svc.go", b"2", timeout=2)
                assert r.data == b"go:2"
                for i in range(3):
                    await nr.publish(f"to.go.{i}", b"r%d" % i, headers={"H": "1"} if i == 1 else None)
                    await ng.publish(f"to.rillet.{i}", b"g%d" % i)
                await nr.flush()
                await ng.flush()
                await _until(lambda: len(from_go.msgs) == 3 and len(from_rillet.msgs) == 3, what="both ways")
                assert from_rillet.data == [b"r0", b"r1", b"r2"] and from_go.data == [b"g0", b"g1", b"g2"]
                assert from_rillet.msgs[1].headers == {"H": "1"}
                # queue groups: a group only in Go serves Rillet's messages once each; with a member in
                # Rillet's cluster too, Rillet's messages stay in Rillet's cluster
                gq1, gq2, rq = Inbox(), Inbox(), Inbox()
                await ng.subscribe("jobs", queue="workers", cb=gq1.cb)
                await ng.subscribe("jobs", queue="workers", cb=gq2.cb)
                await ng.flush()
                await _until(lambda: _queue_interest(ra, "B", "jobs"), what="Go's queue interest")
                for i in range(10):
                    await nr.publish("jobs", b"j%d" % i)
                await nr.flush()
                await _until(lambda: len(gq1.msgs) + len(gq2.msgs) == 10, what="Go queue deliveries")
                await nr.subscribe("jobs", queue="workers", cb=rq.cb)
                await nr.flush()
                await _until(lambda: a[0].gateway.pasi.get(b"$G", {}).get((b"jobs", b"workers")), what="route")
                for i in range(10):
                    await nr.publish("jobs", b"k%d" % i)
                await nr.flush()
                await _until(lambda: len(rq.msgs) == 10, what="local queue deliveries")
                await asyncio.sleep(0.1)
                assert len(gq1.msgs) + len(gq2.msgs) == 10
                assert sorted(m.data for m in gq1.msgs + gq2.msgs) == sorted(b"j%d" % i for i in range(10))
                # /gatewayz: the same JSON fields as Go's (values differ: ids, ports, times, counts)
                go_z = []
                for hp in (hport, hport1):
                    with urllib.request.urlopen(f"http://127.0.0.1:{hp}/gatewayz?accs=1", timeout=5) as resp:
                        go_z.append(json.loads(resp.read()))
                ours_z = [json.loads(json.dumps(gatewayz(s, {"accs": "1"}))) for s in a]
                theirs = next(z for z in go_z if z["inbound_gateways"].get("A"))  # (one with an inbound too)
                ours = next(z for z in ours_z if z["inbound_gateways"].get("B"))
                assert set(ours) == set(theirs)
                o_out, t_out = ours["outbound_gateways"]["B"], theirs["outbound_gateways"]["A"]
                assert set(o_out) == set(t_out) == {"configured", "connection", "accounts"}
                assert set(_shape(o_out["connection"])) == set(_shape(t_out["connection"]))
                o_acc = {a["name"]: a for a in o_out["accounts"]}
                t_acc = {a["name"]: a for a in t_out["accounts"]}
                assert o_acc["$G"]["interest_mode"] == t_acc["$G"]["interest_mode"] == "Interest-Only"
                assert set(o_acc["$G"]) == set(t_acc["$G"])
                o_in, t_in = ours["inbound_gateways"]["B"][0], theirs["inbound_gateways"]["A"][0]
                assert set(o_in) == set(t_in)
                assert {a["name"]: a["interest_mode"] for a in o_in["accounts"]}["$G"] == "Interest-Only"
