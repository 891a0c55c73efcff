"""s2 compression of routes and leaf node connections (rillet.compression; the switch is in
rillet.cluster.conn.ServerConn): the mode rules, the wire switch, Rillet with Rillet, and Rillet with Go
nats-server peers in every pairing of modes, compared with what two Go servers negotiate."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import nats
import pytest

from helpers import free_port
from test_cluster_routes_more import route_pki  # noqa: F401 (a fixture)
from rillet import compression as cc
from rillet.cluster import protocol as cp
from rillet.config.options_builder import load_string
from rillet.monitor.endpoints import leafz, routez
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server

GO = shutil.which("nats-server")
needs_go = pytest.mark.skipif(GO is None, reason="needs nats-server on PATH")

# s2_auto with one threshold of 1s: every RTT here picks its first slot, s2_uncompressed (deterministic, where
# the default thresholds would pick uncompressed or fast depending on how long the handshake took)
AUTO = '{ mode: s2_auto, rtt_thresholds: ["1s"] }'
OURS = {"off": "off", "accept": "accept", "fast": "s2_fast", "better": "s2_better", "best": "s2_best",
        "auto": AUTO}
ROUTE_OURS = OURS | {"ns": "not_supported"}  # (as an old server: "not supported")
GOS = {"accept": "accept", "fast": "s2_fast", "better": "s2_better", "best": "s2_best", "auto": AUTO}
SIZES = (16, 1000, 64 * 1024, 1_000_000)


def _norm(name: str) -> str:
    return {"fast": cc.S2_FAST, "better": cc.S2_BETTER, "best": cc.S2_BEST, "auto": cc.S2_AUTO,
            "ns": cc.NOT_SUPPORTED}.get(name, name)


def _modes(p: str, q: str) -> tuple[str, str]:
    """The modes two peers configured with ``p`` and ``q`` end with (p's, q's), whichever dials, by
    nats-server's rules (s2_auto here: uncompressed, see AUTO)."""
    p, q = _norm(p), _norm(q)
    if cc.NOT_SUPPORTED in (p, q):  # (a side with compression off still says off)
        return tuple(cc.NOT_SUPPORTED if a == cc.NOT_SUPPORTED or cc.needs_compression(a) else cc.OFF
                     for a in (p, q))  # type: ignore[return-value]
    if cc.OFF in (p, q) or p == q == cc.ACCEPT:
        return cc.OFF, cc.OFF
    ps, qs = cc.select_mode(p, q), cc.select_mode(q, p)
    lvl = {cc.S2_AUTO: cc.S2_UNCOMPRESSED}
    return lvl.get(ps, ps), lvl.get(qs, qs)


# ==== the rules, without sockets ===================================================================================

def test_select_mode_as_nats_server():
    sel = cc.select_mode
    assert sel(cc.S2_FAST, "") == sel(cc.ACCEPT, cc.NOT_SUPPORTED) == cc.NOT_SUPPORTED  # (an old peer)
    assert sel(cc.S2_BEST, cc.OFF) == cc.OFF
    assert sel(cc.ACCEPT, cc.ACCEPT) == cc.OFF
    assert sel(cc.S2_BETTER, cc.ACCEPT) == cc.S2_BETTER  # the peer accepts: our level
    assert sel(cc.ACCEPT, cc.S2_BEST) == cc.S2_BEST  # we accept: the peer's level
    assert sel(cc.ACCEPT, cc.S2_AUTO) == cc.S2_FAST  # (auto against accept: fast)
    assert sel(cc.S2_FAST, cc.S2_BEST) == cc.S2_FAST and sel(cc.S2_AUTO, cc.S2_FAST) == cc.S2_AUTO
    with pytest.raises(ValueError, match='unsupported route compression mode "zip"'):
        sel(cc.S2_FAST, "zip")


def test_s2_auto_levels_by_rtt():
    lv = cc.level_for_rtt
    d = cc.DEFAULT_RTT_THRESHOLDS  # 10ms, 50ms, 100ms
    assert [lv(r, d) for r in (0.001, 0.010, 0.011, 0.050, 0.07, 0.100, 0.5)] == [
        "s2_uncompressed", "s2_uncompressed", "s2_fast", "s2_fast", "s2_better", "s2_better", "s2_best"]
    assert lv(0.017, (0.005, 0.010, 0.015, 0.020)) == "s2_best"
    assert [lv(r, (0.0, 0.0, 0.020)) for r in (0.0001, 0.02, 0.03)] == ["s2_better"] * 2 + ["s2_best"]
    assert lv(0.5, (0.010,)) == "s2_uncompressed" and lv(0.5, (0.0, 0.010)) == "s2_fast"


def test_normalize_as_nats_server():
    n = cc.normalize
    assert n("ON", on=cc.ROUTE_ON).mode == cc.S2_FAST and n("true", on=cc.LEAF_ON).mode == cc.S2_AUTO
    assert n("auto").thresholds() == cc.DEFAULT_RTT_THRESHOLDS
    assert n("s2_auto", (-1.0, 0.02, 0.0)).rtt_thresholds == (0.0, 0.02)  # negative as 0, trailing 0 trimmed
    assert n("s2_auto", (0.0, 0.02, 0.0, 0.05)).rtt_thresholds == (0.0, 0.02, 0.0, 0.05)  # 0 anywhere: unused
    for bad in ("s2_uncompressed", "uncompressed", "zip"):
        with pytest.raises(ValueError, match=f'unsupported compression mode "{bad}"'):
            n(bad)


class _Info:
    def __init__(self, parser: cp.ServerParser) -> None:
        self.parser = parser
        self.seen: list[bytes] = []

    def proto_info(self, arg: bytes) -> None:
        self.seen.append(arg)
        self.parser.halt = True

    def proto_ping(self) -> None:
        self.seen.append(b"PING")

    def proto_rmsg(self, *args) -> None:
        raise AssertionError("no message here")


@pytest.mark.parametrize("before", [b"", b"PING\r\n", b"PI"])
def test_parser_halts_right_after_the_switching_info(before):
    """The bytes after the INFO that switches reading to s2 are not parsed: they come back untouched."""
    h = _Info(None)  # type: ignore[arg-type]
    p = h.parser = cp.ServerParser(h, cp.ROUTE)
    rest = b"\xff\x06\x00\x00S2sTwO\x01\x09\x00\x00PING\r\n"
    if before == b"PI":  # the INFO arrives in two reads
        p.feed(b'INFO {"a":1}')
        p.feed(b"\r\n" + rest)
    else:
        p.feed(before + b'INFO {"a":1}\r\n' + rest)
    assert h.seen == ([b"PING"] if before == b"PING\r\n" else []) + [b'{"a":1}']
    assert p.take_rest() == rest and not p.halt
    p.feed(b"PING\r\n")
    assert h.seen[-1] == b"PING"


# ==== Rillet with Rillet ===========================================================================================

async def _until(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _rillet(text: str, name: str) -> Server:
    o = load_string(f"server_name: {name}\nlisten: 127.0.0.1:-1\n{text}\n", f"{name}.conf")
    buf = io.StringIO()
    srv = build_server(o, Logger(out=buf, debug=True))
    srv._test_log = buf
    return srv


def _payload(tag: str, size: int) -> bytes:
    if size == 64 * 1024:  # incompressible: s2 writes it as an uncompressed chunk inside the stream
        return os.urandom(size)
    base = f"{tag}:{size}:the quick brown fox;".encode()
    return (base * (size // len(base) + 1))[:size]


class _Box:
    """Messages received by one client on ``<prefix>.>``, by subject; answers requests on ``<prefix>.svc``."""

    def __init__(self, nc, prefix: str) -> None:
        self.nc, self.prefix = nc, prefix
        self.msgs: dict[str, bytes] = {}

    async def start(self) -> None:
        async def cb(m):
            if m.subject == f"{self.prefix}.svc":
                await m.respond(b"re:" + m.data)
            else:
                self.msgs[m.subject] = m.data
        await self.nc.subscribe(f"{self.prefix}.>", cb=cb)
        await self.nc.flush()


@contextlib.asynccontextmanager
async def _boxes(urls: dict[str, str]):
    boxes: dict[str, _Box] = {}
    try:
        for name, url in urls.items():
            boxes[name] = _Box(await nats.connect(url, max_reconnect_attempts=0), name)
            await boxes[name].start()
        yield boxes
    finally:
        for b in boxes.values():
            await b.nc.close()


async def _one_way(src: _Box, dst: _Box, sizes=SIZES) -> None:
    """Messages of every size from ``src``'s server to ``dst``'s (interest first: probes until one arrives),
    then a request and its reply."""
    tag = f"{dst.prefix}.from.{src.prefix}"
    deadline = time.monotonic() + 10
    while f"{tag}.probe" not in dst.msgs:
        assert time.monotonic() < deadline, f"no interest {src.prefix} -> {dst.prefix}"
        await src.nc.publish(f"{tag}.probe", b"p")
        await src.nc.flush()
        await asyncio.sleep(0.05)
    sent = {f"{tag}.{sz}": _payload(tag, sz) for sz in sizes}
    for subj, data in sent.items():
        await src.nc.publish(subj, data)
    await src.nc.flush()
    await _until(lambda: all(s in dst.msgs for s in sent), 10, f"messages {src.prefix} -> {dst.prefix}")
    for subj, data in sent.items():
        assert dst.msgs[subj] == data, subj
    r = await src.nc.request(f"{dst.prefix}.svc", tag.encode(), timeout=5)
    assert r.data == b"re:" + tag.encode()


async def _both_ways(boxes: dict[str, _Box], pairs: list[tuple[str, str]], sizes=SIZES) -> None:
    await asyncio.gather(*(_one_way(boxes[a], boxes[b], sizes) for a, b in pairs),
                         *(_one_way(boxes[b], boxes[a], sizes) for a, b in pairs))


def _route_modes(routes: list[dict], remote: str) -> str:
    """The one compression of every route (pool of 3 and the $SYS route) to ``remote``."""
    got = [r.get("compression", "") for r in routes if r["remote_name"] == remote]
    assert len(got) == 4, (remote, got)  # (the pool of 3 and the pinned system account route)
    assert len(set(got)) == 1, (remote, got)
    return got[0]


@pytest.mark.parametrize("a, b", [("fast", "best"), ("accept", "better"), ("accept", "accept"), ("off", "fast"),
                                  ("auto", "accept"), ("best", "auto")])
async def test_rillet_routes(a, b):
    ports = [free_port(), free_port()]
    srvs = [_rillet(f"cluster {{ name: c, listen: 127.0.0.1:{ports[i]}, routes: [nats://127.0.0.1:{ports[0]}], "
                    f"compression: {OURS[m]} }}", f"r_{m}{i}") for i, m in enumerate((a, b))]
    try:
        for s in srvs:
            await s.start()
        await _until(lambda: all(len(s.routes) == 4 for s in srvs), what="the pool of 3 and $SYS, both ways")
        want = _modes(a, b)
        for s, other, w in zip(srvs, reversed(srvs), want):
            assert _route_modes(routez(s, {})["routes"], other.name) == w
        async with _boxes({"a": srvs[0].client_url, "b": srvs[1].client_url}) as boxes:
            await _both_ways(boxes, [("a", "b")])
    finally:
        for s in reversed(srvs):
            await s.shutdown()


async def test_rillet_route_default_s2_auto_picks_the_level_of_its_rtt_and_follows_it():
    """s2_auto with the default thresholds: the level for the RTT the handshake took, then again at every
    PONG (a level change gives a new writer, whose stream starts with the identifier again)."""
    ports = [free_port(), free_port()]
    srvs = [_rillet(f"cluster {{ name: c, listen: 127.0.0.1:{ports[i]}, routes: [nats://127.0.0.1:{ports[0]}], "
                    f"compression: s2_auto }}", f"r{i}") for i in range(2)]
    try:
        for s in srvs:
            await s.start()
        await _until(lambda: all(len(s.routes) == 4 for s in srvs), what="routes")
        rcs = list(srvs[0].routes.values())
        at_switch = {rc: rc.rtt for rc in rcs}
        for rc in rcs:
            assert rc.compression == cc.level_for_rtt(rc.rtt, cc.DEFAULT_RTT_THRESHOLDS)
        # about a second later a PING measures the RTT (as nats-server's first PING), and the level follows it
        await _until(lambda: all(rc.rtt != at_switch[rc] for rc in rcs), 5, "the first RTT measure")
        for rc in rcs:
            assert rc.compression == cc.level_for_rtt(rc.rtt, cc.DEFAULT_RTT_THRESHOLDS)
        async with _boxes({"a": srvs[0].client_url, "b": srvs[1].client_url}) as boxes:
            for rtt, level in ((0.2, "s2_best"), (0.07, "s2_better"), (0.03, "s2_fast"), (0.001, "s2_uncompressed")):
                for rc in rcs:  # (a PONG answering a PING sent rtt seconds ago)
                    rc._rtt_start = time.monotonic() - rtt
                    rc.proto_pong()
                assert {r["compression"] for r in routez(srvs[0], {})["routes"]} == {level}
                await _both_ways(boxes, [("a", "b")], sizes=(16, 70_000))
                for b in boxes.values():
                    b.msgs.clear()
    finally:
        for s in reversed(srvs):
            await s.shutdown()


async def test_route_compression_reload():
    """A reload applies a new mode to the routes as nats-server: another level replaces the writer, off
    closes the route (dialled again, negotiated anew)."""
    ports = [free_port(), free_port()]

    def conf(mode: str) -> str:
        return f"cluster {{ name: c, listen: 127.0.0.1:{ports[0]}, compression: {mode} }}"
    s0 = _rillet(conf("s2_fast"), "r0")
    s1 = _rillet(f"cluster {{ name: c, listen: 127.0.0.1:{ports[1]}, routes: [nats://127.0.0.1:{ports[0]}], "
                 f"compression: accept }}", "r1")
    srvs = [s0, s1]
    try:
        for s in srvs:
            await s.start()
        await _until(lambda: all(len(s.routes) == 4 for s in srvs), what="routes")
        assert {r.compression for r in s1.routes.values()} == {"s2_fast"}
        for mode, here, there in (("s2_best", "s2_best", "s2_fast"), ("off", "off", "off"),
                                  ("s2_better", "s2_better", "s2_better")):
            s0.reload(load_string(f"server_name: r0\nlisten: 127.0.0.1:-1\n{conf(mode)}\n", "r0.conf"))
            await _until(lambda: len(s0.routes) == 4 and len(s1.routes) == 4 and
                         {r.compression for r in s0.routes.values()} == {here} and
                         {r.compression for r in s1.routes.values()} == {there}, what=f"reloaded {mode}")
            async with _boxes({"a": s0.client_url, "b": s1.client_url}) as boxes:
                await _both_ways(boxes, [("a", "b")], sizes=(16, 70_000))
    finally:
        for s in reversed(srvs):
            await s.shutdown()


@pytest.mark.parametrize("hub, leaf", [("fast", "best"), ("accept", "auto"), ("accept", "accept"), ("off", "fast"),
                                       ("better", "off"), ("auto", "accept"), ("auto", "auto")])
async def test_rillet_leafs(hub, leaf):
    lp = free_port()
    h = _rillet(f"leafnodes {{ listen: 127.0.0.1:{lp}, compression: {OURS[hub]} }}", "hub")
    lf = _rillet(f'leafnodes {{ remotes: [{{ url: "nats://127.0.0.1:{lp}", compression: {OURS[leaf]} }}] }}', "leaf")
    try:
        await h.start()
        await lf.start()
        await _until(lambda: all(any(c.registered for c in s.leafs.values()) for s in (h, lf)), what="leaf up")
        want_leaf, want_hub = _modes(leaf, hub)
        assert [x.get("compression") for x in leafz(h, {})["leafs"]] == [want_hub]
        assert [x.get("compression") for x in leafz(lf, {})["leafs"]] == [want_leaf]
        async with _boxes({"h": h.client_url, "l": lf.client_url}) as boxes:
            await _both_ways(boxes, [("h", "l")])
    finally:
        await lf.shutdown()
        await h.shutdown()


async def test_corrupt_s2_stream_closes_the_route_with_a_read_error():
    """A peer whose compressed bytes do not decode is closed as nats-server closes it (Read Error)."""
    port = free_port()
    s = _rillet(f"cluster {{ name: c, listen: 127.0.0.1:{port}, compression: s2_fast }}", "r0")
    await s.start()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        info = json.loads((await r.readline())[5:])
        assert info["compression"] == "s2_fast"
        w.write(b'CONNECT {"name":"x","cluster":"c","headers":true}\r\n'
                b'INFO {"server_id":"NX","name":"x","cluster":"c","compression":"s2_fast"}\r\n')
        await w.drain()
        head = await asyncio.wait_for(r.readexactly(10), 5)  # its INFO, compressed: the stream identifier first
        assert head == b"\xff\x06\x00\x00S2sTwO"
        w.write(b"\x00\x08\x00\x00garbage!")  # a compressed chunk with a wrong checksum
        await w.drain()
        await _until(lambda: "Router connection closed: Read Error" in s._test_log.getvalue(), what="closed")
        w.close()
    finally:
        await s.shutdown()


# ==== with Go nats-server ========================================================================================

@contextlib.contextmanager
def _go_servers(confs: dict[str, str]):
    """Go servers started together (name -> config text without listen/http), each with its client port and
    monitoring port: name -> (client port, http port)."""
    tmp = tempfile.mkdtemp()
    procs, ports = [], {}
    try:
        for name, text in confs.items():
            port, http = free_port(), free_port()
            path = f"{tmp}/{name}.conf"
            with open(path, "w") as f:
                f.write(f"server_name: {name}\nlisten: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\n{text}\n")
            procs.append(subprocess.Popen([GO, "-c", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            ports[name] = (port, http)
        deadline = time.monotonic() + 15
        for (name, (_, http)), p in zip(ports.items(), procs):
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=1).read()
                    break
                except OSError:
                    if p.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{name} did not start: {p.stderr.read().decode()[-2000:]}")
                    time.sleep(0.02)
        yield ports
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


async def _get(http: int, path: str) -> dict:
    def get() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/{path}", timeout=5) as r:
            return json.loads(r.read())
    return await asyncio.get_running_loop().run_in_executor(None, get)


def _cluster(seed: int, port: int, mode: str, name: str) -> str:
    return (f"cluster {{ name: {name}, listen: 127.0.0.1:{port}, routes: [nats://127.0.0.1:{seed}], "
            f"compression: {mode} }}")


@needs_go
async def test_routes_every_mode_against_go_servers_as_two_go_servers():
    """One cluster of a Rillet server per mode of ours and a Go server per s2 mode (and accept, Go's
    default): every pair forms the pool of 3 and the $SYS route, compressed (or not) as two Go servers
    with the same modes (a reference cluster of Go servers only); messages of 16 B to 1 MB and a request
    cross every Rillet-Go pair both ways."""
    mix = {f"g_{y}": free_port() for y in GOS}
    ref = {f"ref_{x}": free_port() for x in ROUTE_OURS} | {f"ref_g_{y}": free_port() for y in GOS}
    seed, rseed = mix["g_accept"], ref["ref_g_accept"]
    confs = {n: _cluster(seed, p, GOS[n[2:]], "mix") for n, p in mix.items()}
    confs |= {n: _cluster(rseed, p, (GOS[n[6:]] if n.startswith("ref_g_") else ROUTE_OURS[n[4:]]), "ref")
              for n, p in ref.items()}
    with _go_servers(confs) as ports:
        rs = {f"r_{x}": _rillet(_cluster(seed, free_port(), ROUTE_OURS[x], "mix"), f"r_{x}") for x in ROUTE_OURS}
        try:
            for s in rs.values():
                await s.start()
            n = len(rs) + len(mix)
            await _until(lambda: all(len(s.routes) == 4 * (n - 1) for s in rs.values()), 30, "Rillet servers meshed")

            async def meshed(names: list[str], total: int) -> None:
                for name in names:
                    for _ in range(300):
                        if (await _get(ports[name][1], "routez"))["num_routes"] == 4 * (total - 1):
                            break
                        await asyncio.sleep(0.05)
                    else:
                        raise AssertionError(f"{name} not meshed")
            await meshed(list(mix), n)
            await meshed(list(ref), len(ref))
            z = {name: (await _get(ports[name][1], "routez"))["routes"] for name in confs}
            for x in ROUTE_OURS:
                ours = routez(rs[f"r_{x}"], {})["routes"]
                for y in GOS:
                    got = (_route_modes(ours, f"g_{y}"), _route_modes(z[f"g_{y}"], f"r_{x}"))
                    go_go = (_route_modes(z[f"ref_{x}"], f"ref_g_{y}"), _route_modes(z[f"ref_g_{y}"], f"ref_{x}"))
                    assert got == go_go == _modes(x, y), (x, y)
                for x2 in ROUTE_OURS:
                    if x2 != x:
                        got = _route_modes(ours, f"r_{x2}")
                        assert got == _route_modes(z[f"ref_{x}"], f"ref_{x2}") == _modes(x, x2)[0], (x, x2)
            urls = {n: s.client_url for n, s in rs.items()} | {n: f"nats://127.0.0.1:{ports[n][0]}" for n in mix}
            async with _boxes(urls) as boxes:
                await _both_ways(boxes, [(f"r_{x}", f"g_{y}") for x in ROUTE_OURS for y in GOS])
        finally:
            for s in rs.values():
                await s.shutdown()


def _accounts(prefix: str, names) -> str:
    """One account per name, with one user each (``<prefix>_<name>``, password p)."""
    return "accounts {\n" + "\n".join(f"{prefix.upper()}_{n}: {{ users: [{{ user: {prefix}_{n}, password: p }}] }}"
                                       for n in names) + "\n}"


@needs_go
async def test_leafs_every_mode_against_go_hubs_and_go_leafs():
    """Rillet hubs (one per mode of ours) with Go leafs (one per s2 mode, a remote to each hub), and Go hubs
    (one per mode) with Rillet leafs (one per mode, a remote to each hub): /leafz on both sides shows
    what nats-server's rules give, and messages of 16 B to 1 MB and a request cross every pair both ways.
    (Each remote of a leaf binds an account of its own, so that the hubs are not joined in a loop.)"""
    hub_ports = {x: free_port() for x in OURS}
    go_hub_ports = {y: free_port() for y in GOS}
    rhubs = {f"rh_{x}": _rillet(f"leafnodes {{ listen: 127.0.0.1:{hub_ports[x]}, compression: {OURS[x]} }}",
                                f"rh_{x}") for x in OURS}
    confs = {f"gh_{y}": f"leafnodes {{ listen: 127.0.0.1:{go_hub_ports[y]}, compression: {GOS[y]} }}" for y in GOS}
    for y in GOS:
        remotes = ", ".join(f'{{ url: "nats://127.0.0.1:{hub_ports[x]}", account: A_{x}, compression: {GOS[y]} }}'
                            for x in OURS)
        confs[f"gl_{y}"] = f"{_accounts('a', OURS)}\nleafnodes {{ remotes: [{remotes}] }}"
    rleafs = {}
    for x in OURS:
        remotes = ", ".join(f'{{ url: "nats://127.0.0.1:{go_hub_ports[y]}", account: B_{y}, '
                            f'compression: {OURS[x]} }}' for y in GOS)
        rleafs[f"rl_{x}"] = _rillet(f"{_accounts('b', GOS)}\nleafnodes {{ remotes: [{remotes}] }}", f"rl_{x}")
    srvs = list(rhubs.values()) + list(rleafs.values())
    try:
        for s in rhubs.values():
            await s.start()
        with _go_servers(confs) as ports:
            for s in rleafs.values():
                await s.start()
            await _until(lambda: all(sum(c.registered for c in s.leafs.values()) == len(GOS) for s in srvs), 20,
                         "every leaf connection up")

            def modes(entries: list[dict]) -> dict[str, str]:
                return {e["name"]: e.get("compression", "") for e in entries}
            for x in OURS:
                hub_side = modes(leafz(rhubs[f"rh_{x}"], {})["leafs"])
                leaf_side = modes(leafz(rleafs[f"rl_{x}"], {})["leafs"])
                for y in GOS:
                    gl = modes((await _get(ports[f"gl_{y}"][1], "leafz"))["leafs"])
                    gh = modes((await _get(ports[f"gh_{y}"][1], "leafz"))["leafs"])
                    # a Go leaf (remote mode y) on our hub x; our leaf (remote mode x) on a Go hub y
                    assert (gl[f"rh_{x}"], hub_side[f"gl_{y}"]) == _modes(y, x), (x, y)
                    assert (leaf_side[f"gh_{y}"], gh[f"rl_{x}"]) == _modes(x, y), (x, y)
            urls = {n: s.client_url for n, s in rhubs.items()}
            urls |= {f"gh_{y}": f"nats://127.0.0.1:{ports[f'gh_{y}'][0]}" for y in GOS}
            urls |= {f"gl_{y}_{x}": f"nats://a_{x}:p@127.0.0.1:{ports[f'gl_{y}'][0]}" for x in OURS for y in GOS}
            urls |= {f"rl_{x}_{y}": rleafs[f"rl_{x}"].client_url.replace("nats://", f"nats://b_{y}:p@")
                     for x in OURS for y in GOS}
            async with _boxes(urls) as boxes:
                await _both_ways(boxes, [(f"rh_{x}", f"gl_{y}_{x}") for x in OURS for y in GOS] +
                                 [(f"rl_{x}_{y}", f"gh_{y}") for x in OURS for y in GOS])
    finally:
        for s in srvs:
            await s.shutdown()


@needs_go
async def test_websocket_leafs_with_go_are_uncompressed():
    """No s2 under websocket frames (README): a Rillet leaf over ws:// to a Go hub (s2_fast; the remote's
    default, s2_auto: an s2 mode written on a ws:// remote is refused at load), and a Go leaf over ws:// (s2_fast)
    to a Rillet hub (s2_fast) connect uncompressed ("off" on both sides) and carry messages."""
    from rillet.config import ConfigError
    with pytest.raises(ConfigError, match="1:41: leafnodes compression: s2 compression of leaf connections over "
                                          "websocket is not supported yet"):
        load_string('leafnodes { remotes [ { url: "ws://h:1", compression: s2_fast } ] }', "x.conf")
    gws, rws = free_port(), free_port()
    hub = _rillet(f'websocket {{ listen: "127.0.0.1:{rws}", no_tls: true }}\n'
                  f'leafnodes {{ listen: 127.0.0.1:-1, compression: s2_fast }}', "rh")
    confs = {"gh": f'websocket {{ listen: "127.0.0.1:{gws}", no_tls: true }}\n'
                   f'leafnodes {{ listen: 127.0.0.1:-1, compression: s2_fast }}',
             "gl": f'leafnodes {{ remotes: [{{ url: "ws://127.0.0.1:{rws}", compression: s2_fast }}] }}'}
    leaf = _rillet(f'leafnodes {{ remotes: [{{ url: "ws://127.0.0.1:{gws}" }}] }}', "rl")
    try:
        await hub.start()
        with _go_servers(confs) as ports:
            await leaf.start()
            await _until(lambda: all(any(c.registered for c in s.leafs.values()) for s in (hub, leaf)), 10,
                         "websocket leafs up")
            for name in ("gh", "gl"):
                assert [e.get("compression") for e in (await _get(ports[name][1], "leafz"))["leafs"]] == ["off"]
            assert [e.get("compression") for e in leafz(hub, {})["leafs"]] == ["off"]
            assert [e.get("compression") for e in leafz(leaf, {})["leafs"]] == ["off"]
            urls = {"rh": hub.client_url, "rl": leaf.client_url,
                    "gh": f"nats://127.0.0.1:{ports['gh'][0]}", "gl": f"nats://127.0.0.1:{ports['gl'][0]}"}
            async with _boxes(urls) as boxes:
                await _both_ways(boxes, [("rh", "gl"), ("rl", "gh")], sizes=(16, 70_000))
    finally:
        await leaf.shutdown()
        await hub.shutdown()


@needs_go
async def test_tls_routes_with_a_go_server_compressed(route_pki):
    """s2 above TLS: a Go server (s2_best) with a Rillet server that dials it (s2_fast) and one it dials
    (accept): every route compressed as nats-server's rules say, messages both ways."""
    from test_cluster_routes_more import _route_tls
    tls = _route_tls(route_pki)
    gcl, p = free_port(), free_port()
    with _go_servers({"g": f"cluster {{ name: c, listen: 127.0.0.1:{gcl}, compression: s2_best\n {tls} }}"}) as ports:
        r_acc = _rillet(f"cluster {{ name: c, listen: 127.0.0.1:{p}, compression: accept\n {tls} }}", "racc")
        r_dial = _rillet(f"cluster {{ name: c, listen: 127.0.0.1:-1, routes: [nats://127.0.0.1:{gcl}, "
                         f"nats://127.0.0.1:{p}], compression: s2_fast\n {tls} }}", "rdial")
        try:
            await r_acc.start()
            await r_dial.start()
            await _until(lambda: len(r_acc.routes) == 8 and len(r_dial.routes) == 8, 15, "TLS mesh with Go")
            z = (await _get(ports["g"][1], "routez"))["routes"]
            acc, dial = routez(r_acc, {})["routes"], routez(r_dial, {})["routes"]
            assert (_route_modes(acc, "g"), _route_modes(z, "racc")) == ("s2_best", "s2_best")
            assert (_route_modes(dial, "g"), _route_modes(z, "rdial")) == ("s2_fast", "s2_best")
            assert (_route_modes(acc, "rdial"), _route_modes(dial, "racc")) == ("s2_fast", "s2_fast")
            urls = {"racc": r_acc.client_url, "rdial": r_dial.client_url, "g": f"nats://127.0.0.1:{ports['g'][0]}"}
            async with _boxes(urls) as boxes:
                await _both_ways(boxes, [("racc", "g"), ("rdial", "g"), ("racc", "rdial")])
        finally:
            await r_dial.shutdown()
            await r_acc.shutdown()


async def _bad_mode_answer(port: int, leaf: bool) -> tuple[str, bytes]:
    """A peer announcing compression "zip": what the server's first INFO said and what it answers."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        info = json.loads((await asyncio.wait_for(r.readline(), 5))[5:])
        if not leaf:
            w.write(b'CONNECT {"name":"x","cluster":"c","headers":true}\r\n')
        w.write(b'INFO {"server_id":"NX","name":"x","cluster":"c","compression":"zip"}\r\n')
        await w.drain()
        return info.get("compression", ""), await asyncio.wait_for(r.read(1000), 5)
    finally:
        w.close()


@needs_go
async def test_unknown_compression_mode_from_a_peer_as_go():
    """An unknown mode in the peer's INFO gets nats-server's -ERR and the close, on a route and on a leaf
    connection (the same bytes from a Go server, compared)."""
    cl, lp = free_port(), free_port()
    conf = (f"cluster {{ name: c, listen: 127.0.0.1:{cl}, compression: s2_fast }}\n"
            f"leafnodes {{ listen: 127.0.0.1:{lp} }}")
    with _go_servers({"g": conf}):
        go = [await _bad_mode_answer(cl, False), await _bad_mode_answer(lp, True)]
    s = _rillet(conf, "r")
    await s.start()
    try:
        ours = [await _bad_mode_answer(cl, False), await _bad_mode_answer(lp, True)]
    finally:
        await s.shutdown()
    assert ours == go == [("s2_fast", b"-ERR 'unsupported route compression mode \"zip\"'\r\n"),
                          ("s2_auto", b"-ERR 'unsupported route compression mode \"zip\"'\r\n")]


async def test_liveness_resets_a_silent_compressed_route(monkeypatch):
    """Route liveness on an s2 route: a peer that answers the PINGs (compressed) stays; one that stops
    reading and answering while its kernel still acknowledges (the compressed PING is more bytes than a plain
    one) is reset within the silence limit."""
    from rillet.cluster import route, s2
    monkeypatch.setattr(route, "ROUTE_LIVENESS_PING", 0.15)
    monkeypatch.setattr(route, "ROUTE_SILENCE_CLOSE", 0.6)
    port = free_port()
    s = _rillet(f"cluster {{ name: c, listen: 127.0.0.1:{port}, compression: s2_fast }}", "r0")
    await s.start()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        await r.readline()  # its INFO, plain
        w.write(b'CONNECT {"name":"NFAKE","cluster":"c","headers":true}\r\n'
                b'INFO {"server_id":"NFAKE","name":"fake","cluster":"c","port":1,"compression":"s2_fast"}\r\n')
        await w.drain()
        rd, wr = s2.S2Reader(), s2.S2Writer("fast")  # both ways compressed from here
        w.write(wr.encode(b'INFO {"server_id":"NFAKE","name":"fake","cluster":"c","port":1}\r\nRS+ $G live.>\r\n'))
        await w.drain()
        pings, text = 0, b""
        end = time.monotonic() + 1.2
        while time.monotonic() < end:
            try:
                text += rd.feed(await asyncio.wait_for(r.read(65536), 0.2))
            except asyncio.TimeoutError:
                continue
            while b"PING\r\n" in text:
                text = text.replace(b"PING\r\n", b"", 1)
                pings += 1
                w.write(wr.encode(b"PONG\r\n"))
        assert pings >= 4, pings
        assert "NFAKE" in s.cluster.routes and s.routes[next(iter(s.routes))].compression == "s2_fast"
        t0 = time.monotonic()  # silent from now on (not read: the kernel still takes what comes)
        await _until(lambda: "NFAKE" not in s.cluster.routes, 3, "the silent route reset")
        assert time.monotonic() - t0 < 0.6 + 0.5
        assert "Route silent for" in s._test_log.getvalue()
        w.close()
    finally:
        await s.shutdown()
