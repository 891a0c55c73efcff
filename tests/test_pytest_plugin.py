"""The pytest plugin a NATS user's suite gets with ``pip install rillet`` (rillet.testing.pytest_plugin): a
user's test file, run by pytest in a subprocess, with the fixtures and no Go binary."""
from __future__ import annotations

import importlib.metadata
import socket

import pytest

from rillet.testing import Servers

pytest_plugins = ["pytester"]

USER_TESTS = '''
import asyncio, json, socket, urllib.request
import nats
import pytest


def test_sync_client_gets_info(rillet_server):
    host, port = rillet_server.url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        line = s.makefile("rb").readline()
    assert line.startswith(b"INFO {") and json.loads(line[5:])["port"] == int(port)


@pytest.mark.asyncio
async def test_jetstream_and_kv(rillet_js_server):
    nc = await nats.connect(rillet_js_server.url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    ack = await js.publish("orders.1", b"one")
    assert ack.stream == "ORDERS" and ack.seq == 1
    kv = await js.create_key_value(bucket="cfg")
    await kv.put("a", b"1")
    assert (await kv.get("a")).value == b"1"
    await nc.close()


@pytest.mark.asyncio
async def test_each_test_starts_empty(rillet_js_server):
    nc = await nats.connect(rillet_js_server.url)
    names = await nc.jetstream().streams_info()
    assert names == []
    await nc.close()


@pytest.mark.asyncio
async def test_cluster_replicates(rillet_cluster):
    assert len(rillet_cluster.urls) == 3
    nc = await nats.connect(rillet_cluster.urls[1])
    js = nc.jetstream()
    info = await js.add_stream(name="R3", subjects=["r3"], num_replicas=3)
    assert info.config.num_replicas == 3
    await js.publish("r3", b"x")
    await nc.close()


@pytest.mark.asyncio
async def test_super_cluster_crosses_a_gateway(rillet_super_cluster):
    a, b = rillet_super_cluster.clusters
    nc_a = await nats.connect(a[0].client_url)
    nc_b = await nats.connect(b[0].client_url)
    sub = await nc_b.subscribe("svc")
    async def answer():
        msg = await sub.next_msg(timeout=5)
        await msg.respond(b"pong")
    t = asyncio.ensure_future(answer())
    await nc_b.flush()
    for _ in range(100):  # (interest crosses the gateway)
        try:
            r = await nc_a.request("svc", b"ping", timeout=0.2)
            break
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            await asyncio.sleep(0.05)
    assert r.data == b"pong"
    await t
    await nc_a.close(); await nc_b.close()


def test_factory_with_a_config_and_monitoring(rillet_server_factory):
    s = rillet_server_factory(config="max_payload: 2048\\nhttp_port: -1\\n")
    with urllib.request.urlopen(s.monitor_url() + "/varz", timeout=5) as r:
        varz = json.load(r)
    assert varz["max_payload"] == 2048
'''


def _plugin_args() -> list[str]:
    # installed (the entry point) or not (an editable tree not reinstalled since): load it once either way
    eps = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.value == "rillet.testing.pytest_plugin" for ep in eps) else ["-p", "rillet.testing.pytest_plugin"]


def test_a_users_suite_runs_on_the_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    r = pytester.runpytest_subprocess(*_plugin_args(), "-q", "-p", "no:cacheprovider", timeout=300)
    r.assert_outcomes(passed=6)


def test_servers_stop_and_free_their_port() -> None:
    with Servers.single() as s:
        port = int(s.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_bad_config_fails_the_start_with_its_error() -> None:
    with pytest.raises(Exception) as e:
        Servers.single(config="max_payload: [\n").start()
    assert "line" in str(e.value).lower() or "parse" in str(e.value).lower()
