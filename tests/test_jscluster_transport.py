"""RAFT group messages over routes (rillet/jetstream/cluster/transport.py) and the JetStream peer registry
fed by the system account (peers.py), in real clusters: three Rillet servers, and a Go nats-server with two
Rillet servers (the Go server must see no errors or warnings in its log)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from helpers import free_port
from rillet.config.options import ClusterOptions, Options
from rillet.jetstream.cluster.peers import PeerRegistry, name_hash, peer_id
from rillet.jetstream.cluster.transport import RaftTransport, broadcast_subject, direct_subject
from rillet.app.embed import run_cluster

BLOB = bytes(range(256)) * 4


async def _until(cond, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _remote_interest(srv, subject: str) -> bool:
    """Some route announced interest in ``subject`` in the system account of ``srv``."""
    return any(type(s.client).__name__ == "RouteConn" for s in srv.system_account.sublist.match(subject).psubs)


class Box:
    def __init__(self) -> None:
        self.got: list[tuple[str, str, bytes]] = []

    def __call__(self, group: str, frm: str, data: bytes) -> None:
        self.got.append((group, frm, data))


async def _exchange(servers, transports, boxes):
    peers = [t.peer for t in transports]
    for t in transports:
        t.join("_meta_")
        t.join("S-R3F-abcdefgh")
    transports[1].join("C-R1F-zzzzzzzz")
    # interest crosses the routes
    await _until(lambda: _remote_interest(servers[0], direct_subject("_meta_", peers[1], peers[0]))
                 and _remote_interest(servers[2], broadcast_subject("S-R3F-abcdefgh", peers[2]))
                 and _remote_interest(servers[0], direct_subject("C-R1F-zzzzzzzz", peers[1], peers[0])),
                 what="RAFT subscriptions on the routes")
    transports[0].send("_meta_", peers[1], b"vote?")
    transports[2].broadcast("S-R3F-abcdefgh", BLOB)
    transports[0].send("C-R1F-zzzzzzzz", peers[1], b"\x00\r\nMSG x 1 2\r\n")  # (bytes that look like protocol)
    transports[0].send("C-R1F-zzzzzzzz", peers[2], b"dropped: not a member")
    big = os.urandom(200_000)
    transports[1].send("S-R3F-abcdefgh", peers[2], big)
    await _until(lambda: len(boxes[0].got) >= 1 and len(boxes[1].got) >= 3 and len(boxes[2].got) >= 1,
                 what="messages delivered")
    await asyncio.sleep(0.05)
    assert boxes[0].got == [("S-R3F-abcdefgh", peers[2], BLOB)]
    assert sorted(boxes[1].got) == sorted([("_meta_", peers[0], b"vote?"), ("S-R3F-abcdefgh", peers[2], BLOB),
                                           ("C-R1F-zzzzzzzz", peers[0], b"\x00\r\nMSG x 1 2\r\n")])
    assert boxes[2].got == [("S-R3F-abcdefgh", peers[1], big)]  # (not its own broadcast)
    # after leaving, nothing more arrives
    transports[1].leave("_meta_")
    await _until(lambda: not _remote_interest(servers[0], direct_subject("_meta_", peers[1], peers[0])),
                 what="interest withdrawn")
    for b in boxes:
        b.got.clear()
    transports[0].send("_meta_", peers[1], b"late")
    transports[0].broadcast("_meta_", b"all")
    await _until(lambda: len(boxes[2].got) == 1, what="broadcast to the remaining member")
    await asyncio.sleep(0.05)
    assert boxes[1].got == [] and boxes[2].got == [("_meta_", peers[0], b"all")]


async def test_three_rillet_servers_exchange_group_messages():
    async with run_cluster(3, name="rc") as servers:
        boxes = [Box() for _ in servers]
        transports = [RaftTransport(s, b) for s, b in zip(servers, boxes)]
        assert [t.peer for t in transports] == [peer_id(f"rc-{i}") for i in range(3)]
        await _exchange(servers, transports, boxes)
        # a group with its own handler; a failing handler is logged, not raised into the route
        own = Box()
        transports[2].join("G2", own)

        def boom(group, frm, data):
            raise RuntimeError("handler bug")
        transports[1].join("G2", boom)
        await _until(lambda: _remote_interest(servers[0], broadcast_subject("G2", transports[0].peer)),
                     what="G2 interest")
        await _until(lambda: _remote_interest(servers[0], direct_subject(
            "G2", transports[1].peer, transports[0].peer)), what="G2 interest on server 1")
        transports[0].broadcast("G2", b"x")
        await _until(lambda: own.got == [("G2", transports[0].peer, b"x")], what="own handler")
        await _until(lambda: transports[1].received >= 1 + 3, what="server 1 received")
        with pytest.raises(ValueError):
            transports[0].send("a.b", transports[1].peer, b"")
        with pytest.raises(ValueError):
            transports[0].send("G", "short", b"")
        with pytest.raises(ValueError):
            transports[0].join("G>")
        for t in transports:
            t.close()
        assert all(t.groups == [] for t in transports)


async def test_peer_registry_learns_the_cluster_from_statsz():
    async with run_cluster(3, name="pc") as servers:
        regs = [PeerRegistry.attach(s) for s in servers]
        assert sorted(n.name for n in regs[0].nodes.values()) == ["pc-1", "pc-2"]  # from the routes
        assert not any(n.selectable for n in regs[0].nodes.values())
        for s in servers:
            s.sysacc.publish_statsz(force=True)
        await _until(lambda: all(len(r.nodes) == 2 and all(n.version for n in r.nodes.values()) for r in regs),
                     what="statsz from every other server")
        n = regs[0].get(peer_id("pc-2"))
        assert (n.name, n.id, n.cluster, n.offline) == ("pc-2", servers[2].server_id, "pc", False)
        assert regs[0].name_of(peer_id("pc-1")) == "pc-1"
        assert regs[0].by_server_id(servers[1].server_id).name == "pc-1"
        # the system account's own inbox subject uses the same hash (nats-server's getHash)
        assert servers[0].system_account.sublist.has_interest(f"$SYS._INBOX.{name_hash('pc-0')}.x")
        # a shutdown event takes a server offline; nothing heard for long enough too
        regs[0].event("SHUTDOWN", json.dumps({"name": "pc-1", "id": servers[1].server_id}).encode())
        assert regs[0].get(peer_id("pc-1")).offline
        assert regs[0].sweep(max_age=0.0) == [peer_id("pc-2")]
        assert regs[0].get(peer_id("pc-2")).offline


# ==== a Go server in the cluster ====================================================================

@contextlib.contextmanager
def go_server(conf: str, http: int):
    d = tempfile.mkdtemp(prefix="rillet-jsc-")
    path = os.path.join(d, "go.conf")
    with open(path, "w") as f:
        f.write(conf)
    log = open(os.path.join(d, "go.log"), "w+")
    p = subprocess.Popen(["nats-server", "-c", path], stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=0.5).read()
                break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"nats-server did not start: {log.read()[-2000:]}")
                time.sleep(0.02)
        yield p, log
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_go_server_in_the_cluster_is_not_disturbed():
    from rillet.server.logging import Logger
    from rillet.app.compose import build_server
    import io
    gport, gcl, ghttp = free_port(), free_port(), free_port()
    conf = (f"port: {gport}\nhttp_port: {ghttp}\nserver_name: go1\n"
            f"cluster {{ name: mx, listen: 127.0.0.1:{gcl} }}\n")
    with go_server(conf, ghttp) as (_, log):
        rs = []
        try:
            for i in range(2):
                o = Options(host="127.0.0.1", port=-1, server_name=f"r{i}")
                o.cluster = ClusterOptions(name="mx", host="127.0.0.1", port=-1, routes=[f"nats://127.0.0.1:{gcl}"])
                s = build_server(o, Logger(out=io.StringIO()))
                await s.start()
                rs.append(s)
            await _until(lambda: all(len(s.cluster.routes) == 2 for s in rs), 10, "full mesh with the Go server")
            boxes = [Box(), Box()]
            ts = [RaftTransport(s, b) for s, b in zip(rs, boxes)]
            regs = [PeerRegistry.attach(s) for s in rs]
            for t in ts:
                t.join("_meta_")
            await _until(lambda: _remote_interest(rs[0], broadcast_subject("_meta_", ts[0].peer)), what="interest")
            await _until(lambda: _remote_interest(rs[1], direct_subject("_meta_", ts[0].peer, ts[1].peer)),
                         what="interest")
            for i in range(20):
                ts[0].broadcast("_meta_", b"b%d" % i)
                ts[1].send("_meta_", ts[0].peer, BLOB)
            await _until(lambda: len(boxes[1].got) == 20 and len(boxes[0].got) == 20, what="20 each way")
            assert boxes[1].got[0] == ("_meta_", ts[0].peer, b"b0") and boxes[0].got[-1][2] == BLOB
            # the Go server got the interest (in the system account) but no message: it has no subscriber
            z = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ghttp}/routez?subs=1", timeout=2).read())
            assert any(any(x.startswith("$RNRG.") for x in r.get("subscriptions_list", [])) for r in z["routes"])
            # our statsz makes the Go server announce itself: the registry parses Go's statsz
            rs[0].sysacc.publish_statsz(force=True)
            await _until(lambda: regs[0].get(peer_id("go1")) is not None
                         and regs[0].get(peer_id("go1")).version != "", what="Go statsz")
            g = regs[0].get(peer_id("go1"))
            assert g.cluster == "mx" and g.version.startswith("2.") and not g.js and not g.selectable
            await asyncio.sleep(0.2)
            log.flush()
            log.seek(0)
            text = log.read()
            bad = [ln for ln in text.splitlines() if "[ERR]" in ln or "[WRN]" in ln]
            assert bad == [], bad
            assert "Route connection created" in text
        finally:
            for s in rs:
                await s.shutdown()
