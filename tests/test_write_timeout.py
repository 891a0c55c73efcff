"""``write_timeout`` (nats-server 2.11): what a connection past its write deadline gets. Clients: closed by default
(``close``); with ``retry`` a client that still reads is kept and reported as a slow consumer, one that read
nothing in the whole deadline is closed. Gateways and leaf connections: ``retry`` by default, ``close`` when
written (routes: tests/test_cluster_routes.py::test_route_write_timeout_policy_with_a_slow_reader)."""
from __future__ import annotations

import asyncio

import nats
import pytest

from rillet.config import ConfigError
from rillet.config.options_builder import load_string
from tests.helpers import RawClient, log_text, serve


async def _slow_subscriber(s, reads: bool) -> tuple[RawClient, asyncio.Event, asyncio.Future]:
    c = await RawClient.open(s, rcvbuf=4096)
    c.sub("big", 1)
    assert await c.ping() == b""
    stop = asyncio.Event()

    async def slow_reader() -> None:
        while not stop.is_set():
            if not reads:
                await asyncio.sleep(0.05)
                continue
            try:
                chunk = await asyncio.wait_for(c.reader.read(16384), 0.05)
            except asyncio.TimeoutError:
                continue
            if not chunk:
                return
            await asyncio.sleep(0.02)
    return c, stop, asyncio.ensure_future(slow_reader())


async def _until(cond, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("policy,reads,kept", [("", True, False), ("close", True, False), ("retry", True, True),
                                               ("retry", False, False)])
async def test_client_write_timeout_policy(policy, reads, kept):
    async with serve(write_deadline=0.3, write_timeout=policy) as s:
        c, stop, reader = await _slow_subscriber(s, reads)
        try:
            nc = await nats.connect(s.client_url)
            try:
                for _ in range(150):  # (no flush: the publisher may be stalled behind the subscriber)
                    await nc.publish("big", b"x" * 65536)
                await _until(lambda: "Slow Consumer Detected: WriteDeadline" in log_text(s), 10, "slow consumer")
                await asyncio.sleep(0.5)
                alive = any(cl.subs for cl in s.clients.values())  # (the slow subscriber, the only one)
                assert alive == kept, (policy, reads, log_text(s)[-1500:])
                if kept:
                    await _until(lambda: "Slow Consumer State: WriteDeadline" in log_text(s), 10,
                                 "a second deadline while it still lags")
            finally:
                await nc.close()
        finally:
            stop.set()
            await reader
            c.writer.close()


def test_policies_parse_where_nats_server_takes_them():
    o = load_string('write_timeout: retry\ngateway { name: A, port: -1, write_timeout: close }\n'
                    'leafnodes { port: -1, write_timeout: "default" }\ncluster { port: -1, write_timeout: retry }')
    assert (o.write_timeout, o.gateway_opts.write_timeout, o.leaf.write_timeout, o.cluster.write_timeout) == \
        ("retry", "close", "", "retry")
    with pytest.raises(ConfigError, match="write_timeout must be 'default', 'close' or 'retry'"):
        load_string('leafnodes { port: -1, write_timeout: sometimes }')
