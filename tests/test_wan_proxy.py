"""benchmarks/wan.py: the delaying TCP proxy (one-way delay per chunk, order and bytes kept, half-closes
passed on, near sources undelayed, the process form and its stats)."""
from __future__ import annotations

import asyncio
import os
import time

from benchmarks import wan
from tests.faults.cluster import free_port

HOST = "127.0.0.1"


async def echo_server(close_first: bytes = b"") -> tuple[asyncio.AbstractServer, int, list]:
    """Echoes until EOF, then half-closes. A connection whose first bytes are ``close_first`` gets them
    back and is closed by the server at once."""
    seen: list = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(65536):
            if close_first and data.startswith(close_first):
                w.write(data)
                await w.drain()
                w.close()
                seen.append("closed first")
                return
            w.write(data)
            await w.drain()
        seen.append("eof")
        w.write_eof()
        await w.drain()
        w.close()

    srv = await asyncio.start_server(handle, HOST, 0)
    return srv, srv.sockets[0].getsockname()[1], seen


async def proxy(target: int, delay_ms: float, near: frozenset[str] = frozenset()):
    fwd = wan.Forward("t", (HOST, free_port()), (HOST, target), delay_ms, near)
    ready, stop = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(wan.serve([fwd], ready=ready, stop=stop))
    await ready.wait()
    return fwd, stop, task


async def rtt(port: int, n: int = 5) -> float:
    r, w = await asyncio.open_connection(HOST, port)
    best = 1e9
    for i in range(n):
        t0 = time.perf_counter()
        w.write(b"ping %d\n" % i)
        assert await r.readline() == b"ping %d\n" % i
        best = min(best, time.perf_counter() - t0)
    w.close()
    return best


async def test_round_trip_is_twice_the_delay_bytes_intact_and_half_close_passes():
    srv, port, seen = await echo_server()
    fwd, stop, task = await proxy(port, 40)
    try:
        t = await rtt(fwd.listen[1])
        assert 0.080 <= t < 0.140, t  # (2 x 40 ms)
        # 4 MiB of random bytes, written while the echo comes back: the same bytes, in order
        blob = os.urandom(4 << 20)
        r, w = await asyncio.open_connection(HOST, fwd.listen[1])

        async def send() -> None:
            for i in range(0, len(blob), 100_000):
                w.write(blob[i:i + 100_000])
                await w.drain()
            w.write_eof()  # (client -> server half-close)

        sender = asyncio.create_task(send())
        got = await asyncio.wait_for(r.read(), 10)  # (until the server's EOF comes back through the proxy)
        await sender
        assert got == blob
        w.close()
        assert seen[-1] == "eof"
        await asyncio.sleep(0.15)
        s = fwd.stats()
        assert s["accepted"] == 2 and s["accepted_delayed"] == 2 and s["open"] == 0, s
        assert s["bytes_to_target"] == s["bytes_to_client"] == len(blob) + 5 * 7, s
    finally:
        stop.set()
        await task
        srv.close()


async def test_server_closing_first_reaches_the_client_after_its_data():
    srv, port, seen = await echo_server(close_first=b"bye")
    fwd, stop, task = await proxy(port, 20)
    try:
        r, w = await asyncio.open_connection(HOST, fwd.listen[1])
        w.write(b"bye now")
        assert await asyncio.wait_for(r.read(), 2) == b"bye now"  # (then EOF: the server closed)
        w.close()
        assert seen == ["closed first"]
        await asyncio.sleep(0.1)
        assert fwd.stats()["open"] == 0
    finally:
        stop.set()
        await task
        srv.close()


async def test_near_sources_are_not_delayed_and_a_dead_target_closes_the_client():
    srv, port, _ = await echo_server()
    fwd, stop, task = await proxy(port, 200, near=frozenset({HOST}))
    try:
        assert await rtt(fwd.listen[1]) < 0.05
        assert fwd.stats()["accepted_near"] == 1
    finally:
        stop.set()
        await task
        srv.close()
    dead = free_port()
    fwd, stop, task = await proxy(dead, 10)
    try:
        r, _w = await asyncio.open_connection(HOST, fwd.listen[1])
        assert await asyncio.wait_for(r.read(), 2) == b""
        assert fwd.stats()["connect_failed"] == 1
    finally:
        stop.set()
        await task


async def test_process_and_stats():
    srv, port, _ = await echo_server()
    listen, st = free_port(), free_port()
    proc = await asyncio.to_thread(wan.start, [("echo", f"{HOST}:{listen}", f"{HOST}:{port}")], 15,
                                   stats_at=f"{HOST}:{st}")
    try:
        t = await rtt(listen)
        assert 0.030 <= t < 0.080, t
        s = await asyncio.to_thread(wan.stats, HOST, st)
        assert s["echo"]["accepted_delayed"] == 1 and s["echo"]["bytes_to_target"] == 35, s
    finally:
        proc.terminate()
        proc.wait()
        srv.close()
