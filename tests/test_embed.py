"""The embedding API: a server inside a Python program, as a test fixture would use it."""
from __future__ import annotations

import asyncio
import socket

import nats
import pytest

from rillet.server import Options
from rillet.app.embed import run_server, start_server


async def test_run_server_free_port_and_clean_stop():
    async with run_server() as srv:
        assert srv.client_url.startswith("nats://127.0.0.1:")
        assert srv.port > 0
        nc = await nats.connect(srv.client_url, max_reconnect_attempts=0)
        sub = await nc.subscribe("greet.*")
        await nc.publish("greet.joe", b"hi")
        msg = await sub.next_msg(timeout=1)
        assert msg.data == b"hi"
        port = srv.port
    # the listener is gone and the client was disconnected
    await asyncio.sleep(0.1)
    assert not nc.is_connected
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    await nc.close()


async def test_two_servers_side_by_side_are_independent():
    async with run_server() as a, run_server() as b:
        assert a.port != b.port
        na = await nats.connect(a.client_url)
        nb = await nats.connect(b.client_url)
        sub = await nb.subscribe("x")
        await na.publish("x", b"only on a")
        await na.flush()
        with pytest.raises(nats.errors.TimeoutError):
            await sub.next_msg(timeout=0.2)
        await na.close()
        await nb.close()


async def test_start_server_with_options_object():
    srv = await start_server(Options(host="127.0.0.1", port=-1, max_payload=2048, server_name="embedded"))
    try:
        nc = await nats.connect(srv.client_url)
        assert nc.max_payload == 2048
        assert nc._server_info["server_name"] == "embedded"
        await nc.close()
    finally:
        await srv.shutdown()


async def test_options_and_fields_are_exclusive():
    with pytest.raises(TypeError):
        async with run_server(Options(), port=-1):
            pass
