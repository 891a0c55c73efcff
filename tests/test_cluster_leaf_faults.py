"""Leaf nodes under hostile input and faults (issue 11).

* Hostile leafs (raw sockets on the leafnode port): bad credentials, malformed LS+/LS-/LMSG/HMSG, garbage,
  oversized payloads, a loop, two connections of one server to one hub account, a server dialling its own
  leafnode port: each gets nats-server's answer (compared with a live Go hub when it is on PATH) and harms
  no other client or leaf connection.
* Faults: a hub killed with SIGKILL and started again (the leaf reconnects by itself after the reconnect
  delay, interest is restored both ways, no message is delivered twice), and a hub cluster of two servers
  whose server the leaf is on is killed (the leaf moves to the other one from the hub's leafnode_urls).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time

import nats
import pytest

from helpers import ServerProcess, free_port
from test_cluster_leaf import GO_SERVER, Inbox, _go, _until, clients, hub_port, leaf_interest, leaf_ready, rillet

RILLET = [sys.executable, "-m", "rillet.server"]
HOSTILE_HUB = 'max_payload: 1000\nleafnodes {{ listen: "127.0.0.1:{port}", authorization {{ user: l, password: l }} }}'
CONNECT = {"user": "l", "pass": "l", "headers": True, "version": "2.15.1", "remote_account": "$G"}


# ==== hostile input ===============================================================================================

async def _probe(port: int, name: str, frames: bytes, connect: dict | None = None, pre: bytes = b"") -> tuple:
    """A fake leaf: INFO read, CONNECT (unless ``connect`` is {}), then ``frames``. Returns the first -ERR
    line the hub sent after the CONNECT (or None) and whether it closed the connection."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        info = json.loads((await asyncio.wait_for(r.readline(), 5))[5:])
        if connect != {}:
            co = dict(CONNECT, name=name, server_id="N" + name.upper(), **(connect or {}))
            w.write(b"CONNECT " + json.dumps(co).encode() + b"\r\nPING\r\n")
            buf = b""
            while b"PONG\r\n" not in buf and b"-ERR" not in buf:
                data = await asyncio.wait_for(r.read(65536), 5)
                assert data, buf
                buf += data
            if b"-ERR" in buf:
                return buf[buf.index(b"-ERR"):].split(b"\r\n")[0], True
        if callable(frames):
            frames = frames(info, buf)
        w.write(pre + frames)
        buf = b""
        closed = False
        deadline = asyncio.get_running_loop().time() + 1.5
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                data = await asyncio.wait_for(r.read(65536), left)
            except asyncio.TimeoutError:
                break
            except ConnectionError:
                closed = True
                break
            if not data:
                closed = True
                break
            buf += data
            if closed or (b"-ERR" in buf and b"PONG" in buf.split(b"-ERR", 1)[1]):
                break
        err = buf[buf.index(b"-ERR"):].split(b"\r\n")[0] if b"-ERR" in buf else None
        return err, closed
    finally:
        w.close()


def _echo_lds(info: dict, buf: bytes) -> bytes:
    """The hub's own loop-detection subject (the last $LDS it announced: the others are those of its other
    leafs, which would close them), announced back to it."""
    lds = [line.split()[1] for line in buf.split(b"\r\n") if line.startswith(b"LS+ $LDS.")][-1]
    return b"LS+ " + lds + b"\r\nPING\r\n"


HOSTILE = {
    "bad password": (b"", {"pass": "x"}),
    "LS+ with four arguments": (b"LS+ a b c d\r\nPING\r\n", None),
    "LS+ without a subject": (b"LS+\r\nPING\r\n", None),
    "LS- without a subject": (b"LS-\r\nPING\r\n", None),
    "LS+ with a queue and no weight": (b"LS+ a q\r\nPING\r\n", None),
    "LS+ on an invalid subject": (b"LS+ foo..bar\r\nPING\r\n", None),
    "LMSG with a bad size": (b"LMSG foo abc\r\nPING\r\n", None),
    "LMSG without arguments": (b"LMSG\r\nPING\r\n", None),
    "LMSG shorter than its payload": (b"LMSG foo 5\r\nabcdefgh\r\nPING\r\n", None),
    "HMSG headers over the size": (b"HMSG foo 10 5\r\nabcde\r\nPING\r\n", None),
    "payload over max_payload": (b"LMSG foo 2000\r\n" + b"x" * 2000 + b"\r\nPING\r\n", None),
    "garbage": (b"HELLO WORLD\r\n", None),
    "binary garbage": (b"\x00\x01\x02\xff\r\n", None),
    "LS+ before CONNECT": (b"LS+ foo\r\nPING\r\n", {}),
    "malformed CONNECT": (b"CONNECT {bad\r\nPING\r\n", {}),
    "loop (our own $LDS back)": (_echo_lds, None),
    "a client on the leafnode port": (b'CONNECT {"lang":"go","verbose":false}\r\nPING\r\n', {}),
    "a client with the leaf credentials": (b'CONNECT {"lang":"go","user":"l","pass":"l"}\r\nPING\r\n', {}),
    "a gateway on the leafnode port": (b'CONNECT {"gateway":"X","user":"l","pass":"l"}\r\nPING\r\n', {}),
}


async def _hostile_answers(port: int) -> dict[str, tuple]:
    out = {}
    for i, (what, (frames, connect)) in enumerate(HOSTILE.items()):
        out[what] = await _probe(port, f"h{i}", frames, connect)
    return out


async def test_hostile_leafs_get_nats_server_answers():
    """Each hostile leaf is answered as a Go hub answers it (-ERR text, closed or not), and the hub's client
    and its real leaf connection keep working throughout."""
    async with rillet(HOSTILE_HUB.format(port=-1), "hub") as hub:
        port = hub_port(hub)
        conf = f'leafnodes {{ remotes [ {{ url: "nats://l:l@127.0.0.1:{port}" }} ] }}'
        async with rillet(conf, "leaf") as leaf, clients(hub.client_url, leaf.client_url) as (nh, nl):
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf))
            (real,) = leaf.leafs.values()

            async def svc(m):
                await m.respond(b"ok")
            await nh.subscribe("svc", cb=svc)
            await nh.flush()
            await _until(lambda: leaf_interest(leaf, "svc"), what="svc interest on the leaf")
            ours = await _hostile_answers(port)
            # nothing harmed the others: the client answers over the same leaf connection
            assert (await nl.request("svc", b"", timeout=2)).data == b"ok"
            assert not real.closed and real in leaf.leafs.values()
            assert len([c for c in hub.leafs.values() if c.registered]) == 1
    expected = {
        "bad password": (b"-ERR 'Authorization Violation'", True),
        "LS+ with four arguments": (None, True),
        "LS+ without a subject": (b"-ERR 'Unknown Protocol Operation'", True),
        "LS+ on an invalid subject": (b"-ERR 'Invalid Subscription'", False),
        "payload over max_payload": (b"-ERR 'Maximum Payload Violation'", True),
        "garbage": (b"-ERR 'Unknown Protocol Operation'", True),
        "LS+ before CONNECT": (b"-ERR 'Authorization Violation'", True),
        "loop (our own $LDS back)": (b"-ERR 'Loop detected for leafnode account=\"$G\". Delaying attempt to "
                                     b"reconnect for 30s'", True),
        "a client on the leafnode port": (b"-ERR 'Authorization Violation'", True),  # (checked first)
        "a client with the leaf credentials": (b"-ERR 'attempted to connect to leaf node port'", True),
    }
    for what, answer in expected.items():
        assert ours[what] == answer, what
    if GO_SERVER is not None:
        with tempfile.TemporaryDirectory() as tmp:
            lport = free_port()
            go, _, _ = _go(HOSTILE_HUB.format(port=lport), tmp)
            with go:
                go.wait_ready()
                theirs = await _hostile_answers(lport)
        assert ours == theirs


async def test_two_connections_of_one_server_to_one_hub_account():
    """A leaf server whose two remotes reach the same hub account (two URLs of one hub): as nats-server, the
    newer connection replaces the older one ('Duplicate Remote LeafNode Connection'), so one is up at a
    time; a server dialling its own leafnode port detects a loop. Clients are not affected."""
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub, clients(hub.client_url) as (nh,):
        p = hub_port(hub)
        conf = (f'leafnodes {{ reconnect: "200ms", remotes [ {{ url: "nats://127.0.0.1:{p}" }}, '
                f'{{ url: "nats://localhost:{p}" }} ] }}')
        async with rillet(conf, "twice") as leaf:
            await _until(lambda: "Duplicate Remote LeafNode Connection" in leaf._test_log.getvalue())
            assert "Replacing connection from same server" in hub._test_log.getvalue()
            for _ in range(10):
                assert len([c for c in hub.leafs.values() if c.registered and not c.closed]) <= 1
                await asyncio.sleep(0.05)
        sp = free_port()
        async with rillet(f'leafnodes {{ listen: "127.0.0.1:{sp}", remotes [ {{ url: "nats://127.0.0.1:{sp}" }} ] }}',
                          "self") as me, clients(me.client_url) as (nm,):
            await _until(lambda: 'Loop detected for leafnode account="$G"' in me._test_log.getvalue())
            await nm.flush()
        await nh.flush()


# ==== faults: hubs killed =========================================================================================

def _hub_process(tmp: str, name: str, port: int, lport: int, extra: str = "") -> ServerProcess:
    path = os.path.join(tmp, f"{name}.conf")
    with open(path, "w") as f:
        f.write(f'listen: "127.0.0.1:{port}"\nserver_name: {name}\nleafnodes {{ listen: "127.0.0.1:{lport}" }}\n'
                f"{extra}\n")
    return ServerProcess("-c", path, command=RILLET)


async def _ready(p: ServerProcess) -> ServerProcess:
    return await asyncio.get_running_loop().run_in_executor(None, p.wait_ready)


class Seq:
    """Sequence-numbered messages received on one subject: every number at most once."""

    def __init__(self) -> None:
        self.got: list[int] = []

    async def cb(self, m) -> None:
        self.got.append(int(m.data))

    def once(self) -> bool:
        return len(self.got) == len(set(self.got))


async def _flow(pub, sub_seq: Seq, subject: str, start: int, n: int, probe=None) -> None:
    """Publishes until interest has crossed (a first message arrives), then ``n`` more numbered messages,
    which must all arrive, each once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    i = start
    while not any(g >= start for g in sub_seq.got):
        assert loop.time() < deadline, f"no message on {subject} after the fault"
        await pub.publish(subject, b"%d" % i)
        await pub.flush()
        i += 1
        await asyncio.sleep(0.05)
    first = i
    for j in range(first, first + n):
        await pub.publish(subject, b"%d" % j)
    await pub.flush()
    await _until(lambda: set(range(first, first + n)) <= set(sub_seq.got), timeout=5, what=f"{n} on {subject}")
    assert sub_seq.once(), f"a message delivered twice on {subject}: {sub_seq.got}"


async def test_hub_killed_and_restarted_leaf_reconnects_by_itself():
    """SIGKILL of the hub (a subprocess), then the same hub started again: the leaf (its reconnect delay,
    250ms here) connects again by itself, the interest of both sides is announced again (a hub client that
    reconnected and the leaf's own subscriber), and no message is delivered twice."""
    with tempfile.TemporaryDirectory() as tmp:
        port, lport = free_port(), free_port()
        hub = _hub_process(tmp, "hub", port, lport)
        try:
            await _ready(hub)
            conf = f'leafnodes {{ reconnect: "250ms", remotes [ {{ url: "nats://127.0.0.1:{lport}" }} ] }}'
            async with rillet(conf, "leaf") as leaf:
                nh = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=-1,
                                        reconnect_time_wait=0.1)
                nl = await nats.connect(leaf.client_url)
                try:
                    up, down = Seq(), Seq()
                    await nh.subscribe("to.hub", cb=up.cb)
                    await nl.subscribe("to.leaf", cb=down.cb)
                    await _until(lambda: leaf_ready(leaf), what="the leaf connection")
                    await _flow(nl, up, "to.hub", 0, 50)
                    await _flow(nh, down, "to.leaf", 0, 50)
                    hub.send_signal(signal.SIGKILL)
                    await hub.await_exit()
                    await _until(lambda: not leaf.leafs, what="the leaf seeing its hub gone")
                    hub = _hub_process(tmp, "hub", port, lport)
                    await _ready(hub)
                    t0 = time.monotonic()
                    await _until(lambda: leaf_ready(leaf), timeout=5, what="the leaf reconnecting by itself")
                    assert time.monotonic() - t0 < 3
                    await _flow(nl, up, "to.hub", 1000, 50)  # (the hub client resubscribed when it reconnected)
                    await _flow(nh, down, "to.leaf", 1000, 50)  # (the leaf announced its interest again)
                    await asyncio.sleep(0.2)
                    assert up.once() and down.once()
                finally:
                    await nh.close()
                    await nl.close()
        finally:
            hub.stop()


@pytest.mark.parametrize("leaf_kind", ["rillet", "go"])
async def test_leaf_moves_to_the_other_server_of_the_hub_cluster(leaf_kind):
    """A two-server hub cluster (subprocesses): the leaf is configured with the first server only and learns
    the second from leafnode_urls; when the first is killed (SIGKILL) the leaf connects to the second and
    messages flow between it and a client of the second server, each once. A Go leaf does the same."""
    if leaf_kind == "go" and GO_SERVER is None:
        pytest.skip("needs nats-server on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        ports = [free_port() for _ in range(6)]
        p1, l1, c1, p2, l2, c2 = ports
        routes = f"routes: [nats-route://127.0.0.1:{c1}, nats-route://127.0.0.1:{c2}]"
        h1 = _hub_process(tmp, "h1", p1, l1, f'cluster {{ name: hub, listen: "127.0.0.1:{c1}", {routes} }}')
        h2 = _hub_process(tmp, "h2", p2, l2, f'cluster {{ name: hub, listen: "127.0.0.1:{c2}", {routes} }}')
        try:
            await _ready(h1)
            await _ready(h2)
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: h1.wait_log(r"Route connection created|Router connection created", 10))
            remote = f'leafnodes {{ reconnect: "250ms", remotes [ {{ url: "nats://127.0.0.1:{l1}" }} ] }}'
            async with leaf_server(leaf_kind, remote, tmp) as leaf_url:
                nh2 = await nats.connect(f"nats://127.0.0.1:{p2}")
                nl = await nats.connect(leaf_url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
                try:
                    up, down = Seq(), Seq()
                    await nh2.subscribe("to.hub", cb=up.cb)
                    await nl.subscribe("to.leaf", cb=down.cb)
                    await nl.flush()
                    await _flow(nl, up, "to.hub", 0, 20)  # (through h1, then the route)
                    await _flow(nh2, down, "to.leaf", 0, 20)
                    await asyncio.sleep(0.3)  # (the async INFO with h2's URL has reached the leaf)
                    h1.send_signal(signal.SIGKILL)
                    await h1.await_exit()
                    await _flow(nl, up, "to.hub", 1000, 20)  # (now through h2 directly)
                    await _flow(nh2, down, "to.leaf", 1000, 20)
                    await asyncio.sleep(0.2)
                    assert up.once() and down.once()
                finally:
                    await nh2.close()
                    await nl.close()
            assert "Leafnode connection created" in h2.output
        finally:
            h1.stop()
            h2.stop()


@contextlib.asynccontextmanager
async def leaf_server(kind: str, remote: str, tmp: str):
    """A leaf server with ``remote`` (its leafnodes block): Rillet in process, or a Go subprocess."""
    if kind == "rillet":
        async with rillet(remote, "leaf") as leaf:
            await _until(lambda: leaf_ready(leaf), what="the leaf connection")
            yield leaf.client_url
        return
    go, port, _ = _go(remote, tmp)
    with go:
        await asyncio.get_running_loop().run_in_executor(None, go.wait_ready)
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: go.wait_log(r"Leafnode connection created", 10))
        yield f"nats://127.0.0.1:{port}"
