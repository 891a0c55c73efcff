"""Faults in a cluster of Rillet servers (issue 11, "Faults"), driven as users meet them.

* A server killed with SIGKILL (a subprocess of a 3-server cluster) and started again rejoins by itself;
  nats-py clients given the cluster's URLs fail over; sequence-numbered messages show no subscriber gets a
  message twice (a reconnect or a duplicate route would do that).
* A route that loses its peer is dialled again as nats-server does (route.go): an explicit (configured)
  route after 1 s plus up to 100 ms, then every second for ever; an implicit (gossiped) route at once, then
  ``connect_retries`` more times a second apart, then never.
* A partition made with network namespaces (one namespace per server, veth pairs on a bridge) heals by
  itself: the cut server's routes go stale after the cluster's ping interval, its interest is withdrawn,
  and once the link is back the mesh and the message flow return.
* Hostile input on the route port (wrong cluster name, bad credentials, malformed lines, a client, an
  oversized control line, garbage) gets nats-server's answer (checked against a live nats-server when it is
  on PATH) and harms no other route or client.
"""
from __future__ import annotations

import asyncio
import itertools
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import nats
import pytest

from helpers import RawClient, ServerProcess, free_port
from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.cluster.route_urls import DEFAULT_ROUTE_POOL_SIZE
from rillet.config.options import ClusterOptions, Options
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server

RILLET = [sys.executable, "-m", "rillet.server"]
# route connections between two servers with no pool_size set: nats-server's default pool and the route
# pinned to the system account
ROUTES_PER_PEER = DEFAULT_ROUTE_POOL_SIZE + 1


async def _until(cond, timeout: float = 5.0, what: str = "condition", step: float = 0.02) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(step)


def _http_json(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=1).read())


# ==== a cluster of server subprocesses =========================================================================

class Node:
    """One server of a test cluster, as a subprocess started from a config file (so it can be killed with
    SIGKILL, stopped with SIGSTOP, or run in a network namespace with ``netns``)."""

    def __init__(self, name: str, host: str, cluster_routes: list[str], *, port: int, cport: int, http: int,
                 cluster_extra: str = "", netns: str = "", command: list[str] | None = None,
                 tmp: str = "") -> None:
        self.name, self.host, self.port, self.cport, self.http = name, host, port, cport, http
        self.netns = netns
        self.command = command or RILLET
        routes = ", ".join(f'"nats-route://{r}"' for r in cluster_routes)
        self.conf = os.path.join(tmp or tempfile.mkdtemp(prefix="rillet-faults-"), f"{name}.conf")
        with open(self.conf, "w") as f:
            f.write(f'server_name: "{name}"\nlisten: "{host}:{port}"\nhttp: "{host}:{http}"\n'
                    f'cluster {{\n  name: "faults"\n  listen: "{host}:{cport}"\n  routes: [{routes}]\n'
                    f"  {cluster_extra}\n}}\n")
        self.proc: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self) -> "Node":
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        self.proc = ServerProcess("-c", self.conf, command=prefix + self.command)
        return self

    async def ready(self, timeout: float = 15.0) -> None:
        assert self.proc is not None
        await self.proc.await_log(r"Server is ready", timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.proc.poll() is None:
            self.proc.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.proc.poll() is None:
                self.proc.proc.send_signal(signal.SIGCONT)
            self.proc.stop()

    def routez(self) -> dict:
        return _http_json(f"http://{self.host}:{self.http}/routez?subs=1")

    def routes(self) -> set[str]:
        """The server names this server has a route to (empty when it does not answer)."""
        return set(self.route_counts())

    def route_counts(self) -> dict[str, int]:
        """Server name -> how many route connections this server has to it (empty when it does not answer)."""
        try:
            routes = self.routez()["routes"]
        except OSError:
            return {}
        out: dict[str, int] = {}
        for r in routes:
            out[r.get("remote_name", "")] = out.get(r.get("remote_name", ""), 0) + 1
        return out

    def route_subjects(self) -> set[str]:
        """Every subject of the remote interest this server holds, over all its routes."""
        return {s for r in self.routez()["routes"] for s in r.get("subscriptions_list", [])}


async def _full_mesh(nodes: list[Node], timeout: float = 15.0) -> None:
    """Every server has its whole pool and its $SYS route to every other one, and no more (a duplicate
    route kept by mistake would show as an extra connection)."""
    names = {n.name for n in nodes}
    await _until(lambda: all(n.route_counts() == {m: ROUTES_PER_PEER for m in names - {n.name}} for n in nodes),
                 timeout, f"a full mesh of {sorted(names)}, {ROUTES_PER_PEER} routes per pair", step=0.1)


@contextlib.asynccontextmanager
async def subprocess_cluster(n: int = 3, host: str = "127.0.0.1", netns: list[str] | None = None,
                             cluster_extra: str = ""):
    tmp = tempfile.mkdtemp(prefix="rillet-faults-")
    ports = [(free_port(), free_port(), free_port()) for _ in range(n)]
    hosts = [host] * n if isinstance(host, str) else list(host)
    seeds = [f"{hosts[i]}:{ports[i][1]}" for i in range(n)]
    nodes = [Node(f"n{i}", hosts[i], seeds, port=ports[i][0], cport=ports[i][1], http=ports[i][2],
                  netns=(netns[i] if netns else ""), cluster_extra=cluster_extra, tmp=tmp) for i in range(n)]
    try:
        for nd in nodes:
            nd.start()
        for nd in nodes:
            await nd.ready()
        await _full_mesh(nodes)
        yield nodes
    finally:
        for nd in nodes:
            nd.stop()
        shutil.rmtree(tmp, ignore_errors=True)


class SeqSub:
    """A nats-py subscriber that counts sequence-numbered payloads (``b"<seq>"``): received, duplicates."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.dups = 0
        self.nc = None

    async def start(self, servers: list[str], subject: str) -> "SeqSub":
        self.nc = await nats.connect(servers=servers, dont_randomize=True, reconnect_time_wait=0.1,
                                     max_reconnect_attempts=-1, connect_timeout=1, ping_interval=1,
                                     max_outstanding_pings=2)

        async def cb(m):
            s = int(m.data)
            if s in self.seen:
                self.dups += 1
            else:
                self.seen.add(s)
        await self.nc.subscribe(subject, cb=cb)
        await self.nc.flush()
        return self

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.close()


# ==== SIGKILL and restart ======================================================================================

async def test_sigkill_and_restart_rejoins_clients_fail_over_no_duplicates():
    async with subprocess_cluster(3) as nodes:
        urls = [nd.url for nd in nodes]
        subs = [await SeqSub().start(urls[i:] + urls[:i], "seq") for i in range(3)]
        pub = await nats.connect(servers=[urls[0], urls[2]], dont_randomize=True, max_reconnect_attempts=-1)
        try:
            await _until(lambda: all("seq" in nd.route_subjects() for nd in nodes), 5, "interest", 0.05)
            seq = 0

            async def publish(n: int, pace: float = 0.002) -> None:
                nonlocal seq
                for _ in range(n):
                    seq += 1
                    await pub.publish("seq", b"%d" % seq)
                    if seq % 20 == 0:
                        await asyncio.sleep(pace)
                await pub.flush()

            await publish(400)
            await _until(lambda: all(len(s.seen) == 400 for s in subs), 5, "the first 400 everywhere")
            nodes[1].kill()  # n1 dies mid-stream: its subscriber fails over to n2 (next in its list)
            await publish(600)
            await _until(lambda: subs[1].nc.connected_url is not None and subs[1].nc.is_connected
                         and subs[1].nc.connected_url.port != nodes[1].port, 10, "fail-over")
            nodes[1].start()
            await nodes[1].ready()
            await _full_mesh(nodes)  # the restarted server is back in the mesh by itself
            late = await SeqSub().start([urls[1]], "seq")  # a subscriber on the restarted server
            subs.append(late)
            await _until(lambda: all("seq" in nd.route_subjects() for nd in nodes), 5, "interest again", 0.05)
            first_after = seq + 1
            await publish(500)
            after = set(range(first_after, seq + 1))
            await _until(lambda: all(after <= s.seen for s in subs), 10, "every message after the restart")
            await asyncio.sleep(0.2)  # (any duplicate still in flight arrives)
            assert [s.dups for s in subs] == [0, 0, 0, 0]
            # n0 and n2 never went away: their subscribers got every message (n1's may miss what was
            # published while it moved: core NATS is at most once)
            assert len(subs[0].seen) == len(subs[2].seen) == seq
            assert set(range(1, 401)) <= subs[1].seen  # (before the kill)
        finally:
            await pub.close()
            for s in subs:
                await s.close()


# ==== route reconnect back-off =================================================================================

class TimedLog(io.StringIO):
    """A log sink that remembers when each line was written (monotonic clock)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def write(self, s: str) -> int:
        now = time.monotonic()
        self.lines.extend((now, ln) for ln in s.splitlines() if ln)
        return super().write(s)

    def times(self, text: str) -> list[float]:
        return [t for t, ln in self.lines if text in ln]


def _mk(name: str, cport: int, routes: list[int], log: io.StringIO, **cl) -> Server:
    o = Options(host="127.0.0.1", port=-1, server_name=name)
    o.cluster = ClusterOptions(name="faults", host="127.0.0.1", port=cport,
                               routes=[f"nats-route://127.0.0.1:{p}" for p in routes], **cl)
    return build_server(o, Logger(debug=True, out=log))


async def test_route_reconnect_back_off_explicit_and_implicit():
    """C has an explicit route to A and learnt B by gossip (connect_retries 2). When A and B go, C dials A
    after 1 s (+ up to 100 ms) and then every second until A is back; it dials B at once and then twice
    more, a second apart, and gives up (nats-server's reConnectToRoute / connectToRoute)."""
    pa, pb, pc = free_port(), free_port(), free_port()
    log = TimedLog()
    a = _mk("a", pa, [], io.StringIO())
    c = _mk("c", pc, [pa], log, connect_retries=2)
    b = _mk("b", pb, [pa], io.StringIO())
    started = [a, c, b]
    for s in started:
        await s.start()
    try:
        await _until(lambda: all(s.cluster.servers_connected() == 2 for s in (a, b, c)), what="full mesh")
        to_b = c.cluster.routes[b.server_id]
        assert to_b.solicited and to_b.rtype == "implicit"  # C dialled B after A's gossip
        assert c.cluster.routes[a.server_id].rtype == "explicit"
        t0 = time.monotonic()
        await asyncio.gather(a.shutdown(), b.shutdown())

        def dials(port: int) -> list[float]:
            return [t - t0 for t in log.times(f"Trying to connect to route on 127.0.0.1:{port}") if t > t0]

        def rounds(times: list[float]) -> list[list[float]]:
            """Dials less than 0.3 s apart are one round: each route connection C dialled (those of the pool
            and the $SYS route) dials the lost server again on its own, as in nats-server."""
            out: list[list[float]] = []
            for t in times:
                if not out or t - out[-1][-1] > 0.3:
                    out.append([])
                out[-1].append(t)
            return out
        await _until(lambda: len(rounds(dials(pa))) >= 2 and len(rounds(dials(pb))) >= 3, 5, "the dials")
        await asyncio.sleep(0.3)  # (the last round complete)
        dial_a, dial_b = [r[0] for r in rounds(dials(pa))], [r[0] for r in rounds(dials(pb))]
        per_round = [len(r) for r in rounds(dials(pb))]
        assert len(dial_b) == 3, dial_b  # once at once, then connect_retries (2) more
        assert len(set(per_round)) == 1 and 2 <= per_round[0] <= ROUTES_PER_PEER, per_round
        assert dial_b[0] < 0.5 and all(0.9 < y - x < 1.6 for x, y in zip(dial_b, dial_b[1:])), dial_b
        assert 0.95 < dial_a[0] < 1.6 and 0.9 < dial_a[1] - dial_a[0] < 1.6, dial_a
        # A comes back on its port: C's next attempt connects; B (implicit, given up) is not dialled again
        a2 = _mk("a", pa, [], io.StringIO())
        await a2.start()
        started.append(a2)
        await _until(lambda: c.cluster.servers_connected() == 1 and a2.cluster.servers_connected() == 1, 3,
                     "C back to A")
        # the pool and $SYS, no duplicates kept (a connection both sides dialled at once may be open for a
        # moment before the duplicate is closed, so the count is waited for, not sampled)
        await _until(lambda: len(c.cluster.conns) == len(a2.cluster.conns) == 4, 3, "pools settled at 4")
        await asyncio.sleep(max(0.0, t0 + 3.5 - time.monotonic()))  # (past when a 4th dial of B would be)
        assert len([t for t in log.times(f"Trying to connect to route on 127.0.0.1:{pb}") if t > t0]) == \
            3 * per_round[0]
    finally:
        for s in started:
            await s.shutdown()


# ==== hostile input on the route port ==========================================================================

def _route_connect(**kw) -> bytes:
    d = {"name": "NFAKEPEER", "cluster": "faults", "user": "ru", "password": "rp", **kw}
    return cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(**d)))


_HANDSHAKE = _route_connect() + cp.info_frame(ci.encode_info(ci.Info(
    server_id="NFAKEPEER", server_name="fake", cluster="faults", port=1)))
_PING = b"PING\r\n"

# what is sent to the route port -> (the -ERR lines answered, whether the connection is closed);
# each row was read from nats-server 2.15 (test_hostile_route_input_nats_server_answers checks it again)
HOSTILE = {
    "wrong cluster name": (_route_connect(cluster="other"),
                           ["-ERR 'Rejecting connection, cluster name \"other\" does not match \"faults\"'"], True),
    "bad credentials": (_route_connect(password="nope"), ["-ERR 'Authorization Violation'"], True),
    "a client on the route port": (b'CONNECT {"lang":"python","verbose":false,"user":"ru","pass":"rp"}\r\n',
                                   ["-ERR 'attempted to connect to route port'"], True),
    "a gateway on the route port": (b'CONNECT {"gateway":"g","user":"ru","pass":"rp"}\r\n',
                                    ["-ERR 'Rejecting connection from gateway \"g\" on the Route port'"], True),
    "interest before CONNECT": (b"RS+ $G foo\r\n", ["-ERR 'Authorization Violation'"], True),
    "INFO before CONNECT": (cp.info_frame(ci.encode_info(ci.Info(server_id="NFAKEPEER", cluster="faults"))),
                            ["-ERR 'Authorization Violation'"], True),
    "garbage": (b"\x00\xff\xfe garbage\r\n", ["-ERR 'Authorization Violation'"], True),
    "CONNECT without JSON": (b"CONNECT\r\n", [], True),
    "CONNECT with bad JSON": (b"CONNECT {nope\r\n", [], True),
    "RS+ without arguments": (_HANDSHAKE + b"RS+\r\n", ["-ERR 'Unknown Protocol Operation'"], True),
    "RMSG with a bad size": (_HANDSHAKE + b"RMSG $G foo abc\r\n", [], True),
    "unknown operation": (_HANDSHAKE + b"FOO bar\r\n", ["-ERR 'Unknown Protocol Operation'"], True),
    "payload not followed by CRLF": (_HANDSHAKE + b"RMSG $G foo 3\r\nabcXY\r\n",
                                     ["-ERR 'Unknown Protocol Operation'"], True),
    "oversized control line": (_HANDSHAKE + b"RS+ $G " + b"a" * 70000 + b"\r\n",
                               ["-ERR 'maximum control line exceeded'"], True),
    "oversized control line, no end": (_HANDSHAKE + b"RS+ $G " + b"a" * 70000,
                                       ["-ERR 'maximum control line exceeded'"], True),
    "-ERR from the peer": (_HANDSHAKE + b"-ERR 'boom'\r\n", [], True),
    # answered, the route stays
    "RS+ on an invalid subject": (_HANDSHAKE + b"RS+ $G foo..bar\r\n" + _PING,
                                  ["-ERR 'Invalid Subscription'"], False),
    "RS+ with a bad queue weight": (_HANDSHAKE + b"RS+ $G foo q abc\r\n" + _PING, [], False),
    "RMSG for an unknown account": (_HANDSHAKE + b"RMSG NOPE foo 1\r\nx\r\n" + _PING, [], False),
    "a second CONNECT": (_HANDSHAKE + _route_connect() + _PING, [], False),
}


_fake_ids = itertools.count(1)


async def _exchange(port: int, data: bytes, timeout: float = 3.0) -> tuple[list[str], bool]:
    """Send ``data`` to a route port; the -ERR lines answered and whether the server closed the connection
    (read until it closes, or until the PONG answering a final PING)."""
    # a fresh server id per connection: a peer that has not yet seen the previous fake route go would
    # otherwise take this one for a duplicate route and close it (nats-server keeps the first)
    data = data.replace(b'"NFAKEPEER"', b'"NFAKEPEER%d"' % next(_fake_ids))
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        await asyncio.wait_for(r.readline(), timeout)  # INFO
        w.write(data)
        out = b""
        closed = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"neither closed nor PONG within {timeout}s; got {out[-300:]!r}")
            try:
                chunk = await asyncio.wait_for(r.read(65536), left)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                closed = True
                break
            out += chunk
            if data.endswith(_PING) and b"\r\nPONG\r\n" in b"\r\n" + out:
                break
        return [ln.decode() for ln in out.split(b"\r\n") if ln.startswith(b"-ERR")], closed
    finally:
        w.close()


async def test_hostile_route_input_is_refused_and_harms_nothing_else():
    p0 = free_port()
    s0 = _mk("a", p0, [], io.StringIO(), username="ru", password="rp")
    s1 = _mk("b", free_port(), [], io.StringIO())
    s1.opts.cluster.routes = [f"nats-route://ru:rp@127.0.0.1:{p0}"]
    await s0.start()
    await s1.start()
    c0 = c1 = None
    try:
        await _until(lambda: s0.cluster.servers_connected() == 1 and s1.cluster.servers_connected() == 1,
                     what="the routes (pool and $SYS)")
        good = s0.cluster.routes[s1.server_id]
        c0 = await nats.connect(s0.client_url)
        c1 = await nats.connect(s1.client_url)
        sub = await c1.subscribe("alive")
        await c1.flush()
        for what, (data, errs, closed) in HOSTILE.items():
            got = await _exchange(p0, data)
            assert got == (errs, closed), what
            # the good route, the clients and the cross-route flow are untouched
            assert s0.cluster.routes.get(s1.server_id) is good and not good.closed, what
            await _until(lambda: s0.accounts["$G"].sublist.match("alive").psubs, what="interest")
            await c0.publish("alive", what.encode())
            assert (await sub.next_msg(1)).data == what.encode()
        assert c0.is_connected and c1.is_connected
        # nothing the fake peers announced is left behind once they are gone
        await _until(lambda: len(s0.cluster.conns) == 4 and all(rc.remote_id == s1.server_id and rc.registered
                                                                 for rc in s0.cluster.conns), what="fake routes gone")
        assert not s0.accounts["$G"].sublist.match("foo").psubs
    finally:
        for nc in (c0, c1):
            if nc is not None:
                await nc.close()
        await s1.shutdown()
        await s0.shutdown()


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_hostile_route_input_nats_server_answers():
    """The HOSTILE table, read from a live nats-server with the same cluster block."""
    port, cport = free_port(), free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(f'listen: "127.0.0.1:{port}"\ncluster {{ name: faults, listen: "127.0.0.1:{cport}", '
                f"authorization {{ user: ru, password: rp }} }}\n")
    go = ServerProcess("-c", f.name, command=["nats-server"])
    try:
        await go.await_log(r"Server is ready")
        for what, (data, errs, closed) in HOSTILE.items():
            assert await _exchange(cport, data) == (errs, closed), what
    finally:
        go.stop()
        os.unlink(f.name)


# ==== a partition made with network namespaces =================================================================

class NetnsLab:
    """One network namespace per server, each joined to a bridge in this namespace by a veth pair:
    ``cut(i)`` takes server i's link down (its TCP connections stall: no reset, no FIN), ``heal(i)`` brings
    it back."""

    def __init__(self, n: int) -> None:
        tag = f"{os.getpid() % 10000}"
        self.subnet = f"10.{200 + os.getpid() % 25}.{(os.getpid() // 25) % 250}"  # (the script: 10.225+)
        self.bridge = f"rfb{tag}"
        self.ns = [f"rillet-faults-{tag}-{i}" for i in range(n)]
        self.host_if = [f"rfh{tag}x{i}" for i in range(n)]
        self.ips = [f"{self.subnet}.{i + 1}" for i in range(n)]
        self.made: list[list[str]] = []  # undo commands

    @staticmethod
    def _ip(*args: str) -> None:
        r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise OSError(f"ip {' '.join(args)}: {r.stderr.strip()}")

    def up(self) -> None:
        ip = self._ip
        ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(["link", "del", self.bridge])
        ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.ns):
            ip("netns", "add", ns)
            self.made.append(["netns", "del", ns])
            ip("-n", ns, "link", "set", "lo", "up")
            ip("link", "add", self.host_if[i], "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.made.append(["link", "del", self.host_if[i]])
            ip("link", "set", self.host_if[i], "master", self.bridge)
            ip("link", "set", self.host_if[i], "up")
            ip("-n", ns, "addr", "add", f"{self.ips[i]}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")

    def cut(self, i: int) -> None:
        self._ip("link", "set", self.host_if[i], "down")

    def heal(self, i: int) -> None:
        self._ip("link", "set", self.host_if[i], "up")

    def down(self) -> None:
        for cmd in reversed(self.made):
            with contextlib.suppress(OSError):
                self._ip(*cmd)
        self.made.clear()


@pytest.fixture
def netns_lab():
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed")
    lab = NetnsLab(3)
    try:
        lab.up()
    except OSError as e:
        lab.down()
        pytest.skip(f"network namespaces are not permitted here: {e}")
    try:
        yield lab
    finally:
        lab.down()


async def test_partition_withdraws_interest_and_heals(netns_lab):
    lab = netns_lab
    extra = 'ping_interval: "250ms"\n  ping_max: 2'
    async with subprocess_cluster(3, host=lab.ips, netns=lab.ns, cluster_extra=extra) as nodes:
        sub = await SeqSub().start([nodes[2].url], "part")
        pub = await nats.connect(nodes[0].url)
        try:
            await _until(lambda: "part" in nodes[0].route_subjects(), 5, "n2's interest on n0", 0.05)
            await pub.publish("part", b"1")
            await _until(lambda: sub.seen == {1}, 2, "a message across the route")
            lab.cut(2)
            t0 = time.monotonic()
            # n0 and n1 find n2's routes stale (no PONG within ping_max pings) and drop its interest
            await _until(lambda: nodes[0].routes() == {"n1"} and nodes[1].routes() == {"n0"}, 5,
                         "routes to the cut server dropped", 0.05)
            stale_after = time.monotonic() - t0
            assert "part" not in nodes[0].route_subjects()
            assert 0.4 < stale_after < 3.0, stale_after
            await pub.publish("part", b"2")  # no interest: not sent (at-most-once)
            await pub.flush()
            lab.heal(2)
            await _full_mesh(nodes, 10)  # the explicit routes are dialled again, every second
            # the cut side found its routes stale too (each connection of its pools and its $SYS routes)
            assert nodes[2].proc.output.count("Router connection closed: Stale Connection") == 2 * ROUTES_PER_PEER
            await _until(lambda: "part" in nodes[0].route_subjects(), 5, "interest back", 0.05)
            for i in range(3, 53):
                await pub.publish("part", b"%d" % i)
            await _until(lambda: set(range(3, 53)) <= sub.seen, 5, "messages after the heal")
            await asyncio.sleep(0.1)
            assert sub.dups == 0 and 2 not in sub.seen
        finally:
            await pub.close()
            await sub.close()
