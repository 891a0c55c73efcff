"""Server-wide counts that nats-server keeps and shows in /varz and in the statsz event: stale connections (by
kind) and slow consumers (by kind), compared with nats-server given the same input."""
from __future__ import annotations

import asyncio
import shutil
import socket
import time

import pytest

from tests.test_fairness import monitor, raw_connect, running

HAVE_GO = shutil.which("nats-server") is not None
KINDS = ["rillet"] + (["go"] if HAVE_GO else [])

CONF = """ping_interval: "200ms"
ping_max: 2
max_pending: 100KB
max_payload: 64KB
accounts {
  SYS { users [{user: sys, password: sys}] }
  A { users [{user: a, password: a}] }
}
system_account: SYS
"""


def _until_closed(s: socket.socket, timeout: float = 10) -> None:
    """Read (not answering PINGs) until the server closes the connection."""
    s.settimeout(timeout)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not s.recv(65536):
            return
    raise AssertionError("not closed")


async def _statsz(port: int) -> dict:
    import nats
    nc = await nats.connect(f"nats://sys:sys@127.0.0.1:{port}")
    try:
        m = await nc.request("$SYS.REQ.SERVER.PING.STATSZ", b"", timeout=5)
        import json
        return json.loads(m.data)["statsz"]
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", KINDS)
def test_stale_and_slow_connections_are_counted_by_kind(kind):
    """A client that never answers PINGs is closed as stale, one that never reads is cut as a slow consumer:
    both counted in /varz (stale_connections, stale_connection_stats, slow_consumers, slow_consumer_stats) and
    in the statsz event, which leaves the by-kind counts out while they are zero."""
    with running(kind, CONF) as (proc, mport):
        asyncio.run(_check(proc.port, mport))


async def _check(port: int, mport: int) -> None:
    import nats
    st = await _statsz(port)
    assert "stale_connection_stats" not in st and "slow_consumer_stats" not in st, st
    assert st["connections"] == 1 and "stale_connections" not in st, st  # (the asking system client)
    # (the publisher is nats-py: it answers the PINGs, so it stays)
    pub = await nats.connect(f"nats://a:a@127.0.0.1:{port}")
    slow = await asyncio.to_thread(raw_connect, port, 4096, b'{"verbose":false,"user":"a","pass":"a"}')
    slow.sendall(b"SUB f 1\r\nPING\r\n")
    buf = b""
    while b"PONG\r\n" not in buf:
        buf += slow.recv(4096)
    # (12 MB: more than the kernel takes for a socket that is not read, so Rillet's own buffer passes
    # max_pending too; nats-server cuts it sooner, its writer being behind the publisher's reads)
    for _ in range(200):
        await pub.publish("f", b"x" * 60000)
    await pub.flush()
    await asyncio.to_thread(_until_closed, slow)
    stale = await asyncio.to_thread(raw_connect, port, 0, b'{"verbose":false,"user":"a","pass":"a"}')
    await asyncio.to_thread(_until_closed, stale)
    end = time.monotonic() + 10
    while True:
        v = await asyncio.to_thread(monitor, mport, "/varz")
        if v["slow_consumers"] >= 1 and v["stale_connections"] >= 1 or time.monotonic() > end:
            break
        await asyncio.sleep(0.1)
    closed = await asyncio.to_thread(monitor, mport, "/connz?state=closed")
    assert v["stale_connections"] == 1, [c.get("reason") for c in closed["connections"]]
    assert v["stale_connection_stats"] == {"clients": 1, "routes": 0, "gateways": 0, "leafs": 0}, v
    assert v["slow_consumers"] == 1 and v["slow_consumer_stats"]["clients"] == 1, v
    st = await _statsz(port)
    assert st["stale_connections"] == 1, st
    assert st["stale_connection_stats"] == {"clients": 1, "routes": 0, "gateways": 0, "leafs": 0}, st
    assert st["slow_consumers"] == 1
    assert st["slow_consumer_stats"] == {"clients": 1, "routes": 0, "gateways": 0, "leafs": 0}, st
    assert st["connections"] == 2, st  # the publisher and the asking system client
    await pub.close()
