"""Listening where nats-server listens: IPv4 and IPv6 clients on the client, monitoring and WebSocket ports.

nats-server binds a wildcard host (the default ``0.0.0.0``, or ``::``) as one dual-stack socket, so
``nats://[::1]:4222`` and ``nats://127.0.0.1:4222`` both connect; an explicit address listens there only.
The host it reports (INFO ``host``, /varz ``host`` and ``http_host``) stays the configured string.

Each case runs the server from a config file (in-process Rillet, or ``nats-server`` with
RILLET_TEST_TARGET=nats-server) and connects with nats-py (TCP and ``ws://``), a raw socket and aiohttp.
"""
from __future__ import annotations

import asyncio
import errno
import json
import socket
from typing import Any

import aiohttp
import nats
import pytest

from rillet.server import listen
from tests.helpers import GO, free_port, serve_config


def _ipv6_loopback() -> str | None:
    """Why IPv6 loopback cannot be used here, or None when it can."""
    if not socket.has_ipv6:
        return "Python was built without IPv6 (socket.has_ipv6 is False)"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as e:
        return f"this machine cannot bind the IPv6 loopback ::1: {e}"
    return None


NO_IPV6 = _ipv6_loopback()
needs_ipv6 = pytest.mark.skipif(NO_IPV6 is not None, reason=NO_IPV6 or "")


def _url(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


async def _info_host(host: str, port: int) -> str:
    """The ``host`` field of the INFO the server sends on a raw connection to host:port."""
    r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
    try:
        line = await asyncio.wait_for(r.readline(), 2)
    finally:
        w.close()
    assert line.startswith(b"INFO "), line
    return json.loads(line[5:])["host"]


async def _refused(host: str, port: int) -> None:
    with pytest.raises(OSError) as ei:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
        w.close()
    assert ei.value.errno in (errno.ECONNREFUSED, errno.EADDRNOTAVAIL, errno.ENETUNREACH), ei.value


async def _round_trip(url: str) -> Any:
    """Connect with nats-py, subscribe, publish, receive; returns the connected client (to close)."""
    nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
    sub = await nc.subscribe("v6.test")
    await nc.publish("v6.test", url.encode())
    msg = await sub.next_msg(timeout=2)
    assert msg.data == url.encode()
    return nc


def _config(host: str | None, port: int, http: int, ws: int) -> str:
    lines = [f"port: {port}", f"http_port: {http}", f"websocket {{ port: {ws}, no_tls: true }}"]
    if host is not None:
        lines.insert(0, f'host: "{host}"')
    return "\n".join(lines) + "\n"


# config host -> (reported host, addresses that connect, addresses that are refused)
CASES = {
    "default": (None, "0.0.0.0", ["127.0.0.1", "::1"], []),
    "0.0.0.0": ("0.0.0.0", "0.0.0.0", ["127.0.0.1", "::1"], []),
    "::": ("::", "::", ["127.0.0.1", "::1"], []),
    "127.0.0.1": ("127.0.0.1", "127.0.0.1", ["127.0.0.1"], ["::1"]),
    "::1": ("::1", "::1", ["::1"], ["127.0.0.1"]),
}


@needs_ipv6
@pytest.mark.parametrize("case", list(CASES))
async def test_listeners_accept_where_nats_server_does(case: str, tmp_path: Any) -> None:
    host, reported, good, bad = CASES[case]
    port, http, ws = free_port(), free_port(), free_port()
    async with serve_config(_config(host, port, http, ws), tmp_dir=str(tmp_path)):
        clients = []
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:
                for addr in good:
                    # client port: the INFO reports the configured host, nats-py round-trips a message
                    assert await _info_host(addr, port) == reported, addr
                    clients.append(await _round_trip(_url("nats", addr, port)))
                    # the WebSocket listener takes nats-py's ws:// client on the same address
                    clients.append(await _round_trip(_url("ws", addr, ws)))
                    # monitoring
                    async with session.get(_url("http", addr, http) + "/varz") as resp:
                        assert resp.status == 200
                        varz = await resp.json(content_type=None)
                    assert varz["host"] == reported and varz["http_host"] == reported, (addr, varz)
                for addr in bad:
                    await _refused(addr, port)
                    await _refused(addr, http)
                # /connz shows each client's own address: an IPv4 client of a dual-stack socket is
                # 127.0.0.1 (not ::ffff:127.0.0.1), an IPv6 client ::1
                async with session.get(_url("http", good[0], http) + "/connz") as resp:
                    connz = await resp.json(content_type=None)
                ips = sorted({c["ip"] for c in connz["connections"]})
                assert ips == sorted(good), connz["connections"]
        finally:
            for nc in clients:
                await nc.close()


# ---------------------------------------------------------------------------------------------------
# rillet.server.listen on its own


def _family(sock: socket.socket) -> tuple[int, int | None]:
    v6only = None
    if sock.family == socket.AF_INET6:
        v6only = sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
    return sock.family, v6only


@pytest.mark.skipif(GO, reason="Rillet's own listener code")
@needs_ipv6
async def test_wildcards_are_dual_stack_and_addresses_are_not() -> None:
    loop = asyncio.get_running_loop()
    for host, want in [("0.0.0.0", (socket.AF_INET6, 0)), ("::", (socket.AF_INET6, 0)), ("", (socket.AF_INET6, 0)),
                       ("127.0.0.1", (socket.AF_INET, None)), ("::1", (socket.AF_INET6, 1))]:
        sock = await listen.listening_socket(loop, host, 0)
        try:
            assert _family(sock) == want, host
            assert not sock.getblocking()
        finally:
            sock.close()


@pytest.mark.skipif(GO, reason="Rillet's own listener code")
async def test_wildcard_falls_back_to_ipv4_without_ipv6(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    # Python without IPv6
    monkeypatch.setattr(socket, "has_ipv6", False)
    sock = await listen.listening_socket(loop, "0.0.0.0", 0)
    try:
        assert sock.family == socket.AF_INET and sock.getsockname()[0] == "0.0.0.0"
    finally:
        sock.close()
    monkeypatch.setattr(socket, "has_ipv6", True)
    # a kernel with IPv6 turned off: the IPv6 socket cannot be made or bound
    real = listen._bound

    def no_v6(family: int, addr: tuple, backlog: int, v6only: bool | None = None) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, addr, backlog, v6only)

    monkeypatch.setattr(listen, "_bound", no_v6)
    sock = await listen.listening_socket(loop, "::", 0)
    try:
        assert sock.family == socket.AF_INET
    finally:
        sock.close()


@pytest.mark.skipif(GO, reason="Rillet's own listener code")
async def test_port_in_use_is_an_error_not_a_fallback() -> None:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        with pytest.raises(OSError) as ei:
            sock = await listen.listening_socket(loop, "0.0.0.0", taken.getsockname()[1])
            sock.close()
        assert ei.value.errno == errno.EADDRINUSE


def test_plain_ip() -> None:
    assert listen.plain_ip("::ffff:127.0.0.1") == "127.0.0.1"
    assert listen.plain_ip("::1") == "::1"
    assert listen.plain_ip("127.0.0.1") == "127.0.0.1"
    assert listen.plain_ip("::ffff:0:1") == "::ffff:0:1"
