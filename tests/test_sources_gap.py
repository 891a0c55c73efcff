"""A source's first delivery from a new origin consumer must be consumer sequence 1 (issue 14, found by
scripts/vstream_faults.py --rolling: across a gateway the first deliveries of a re-created consumer can be
dropped while the new inbox's interest is still crossing, and taking the next one skipped them for good)."""
from __future__ import annotations

import asyncio
import time

import nats
from nats.js.api import StreamSource

from rillet.app.embed import run_server
from test_js_stream import js_opts


async def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout}s")


async def test_first_delivery_of_a_new_consumer_skipping_ahead_restarts_it(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="O", subjects=["o.>"])
        for i in range(5):
            await js.publish(f"o.{i}", b"x")
        await js.add_stream(name="S", sources=[StreamSource(name="O")])

        async def count(n: int) -> bool:
            return (await js.stream_info("S")).state.messages == n
        await _wait(lambda: count(5), 5, "S sourced the first 5")
        origin = srv.jetstream.accounts["$G"].streams["S"].sources.origins[0]
        # a fresh consumer (as start() leaves it) whose deliveries 1 and 2 were lost on the way: its
        # first one to arrive is consumer sequence 3, stream sequence 8
        origin.cseq = 0
        attempts = origin.attempts
        reply = f"$JS.ACK.O.gone.1.8.3.{time.time_ns()}.0".encode()
        origin._on_msg(origin.sub, None, b"o.late", reply, -1, b"not stored")
        assert origin.attempts == attempts + 1  # given up and re-created at once, from our position
        for i in range(5, 8):
            await js.publish(f"o.{i}", b"x")
        await _wait(lambda: count(8), 5, "S caught up with 8")
        await asyncio.sleep(0.2)
        sub = await js.subscribe("o.>", stream="S", ordered_consumer=True)
        subjects = [(await sub.next_msg(timeout=2)).subject for _ in range(8)]
        assert subjects == [f"o.{i}" for i in range(8)]  # nothing skipped, nothing twice, not the fake one
        assert (await js.stream_info("S")).state.messages == 8
        await nc.close()
