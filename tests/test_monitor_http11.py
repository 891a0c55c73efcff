"""rillet.monitor.http11, the monitor's own HTTP/1.1 server: persistent and pipelined requests, HEAD,
HTTP/1.0, bodies, malformed and oversized requests, query and path decoding; over raw sockets."""
from __future__ import annotations

import asyncio
import re
import socket

import pytest

from rillet.monitor.http11 import MAX_HEAD, HttpServer, Request, Response


async def _handler(req: Request) -> Response:
    body = f"{req.method} {req.path} {sorted(req.query.items())}".encode()
    return Response(body, 200, "text/plain", "utf-8", headers={"X-Test": "1"})


@pytest.fixture
async def server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    http = HttpServer(_handler)
    await http.start(sock)
    yield http.sockets[0].getsockname()[1]
    await http.close()


async def _exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes (or 2 s of silence)."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(data)
    await w.drain()
    out = b""
    try:
        while True:
            chunk = await asyncio.wait_for(r.read(65536), 2)
            if not chunk:
                break
            out += chunk
    except asyncio.TimeoutError:
        pass
    w.close()
    return out


def _responses(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v for k, _, v in (ln.partition(": ") for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        raw = rest[n:]
    return out


async def test_pipelined_keep_alive_requests_answered_in_order(server):
    raw = await _exchange(server, b"GET /a?x=1&x=2&y=a+b%21 HTTP/1.1\r\nHost: h\r\n\r\n"
                                  b"GET /b%20c HTTP/1.1\r\nHost: h\r\n\r\n"
                                  b"GET /last HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    rs = _responses(raw)
    assert [r[0] for r in rs] == [200, 200, 200]
    assert rs[0][2] == b"GET /a [('x', '1'), ('y', 'a b!')]"  # first value; '+' is a space (Go's ParseQuery)
    assert rs[1][2] == b"GET /b c []"
    status, headers, _ = rs[0]
    assert headers["content-type"] == "text/plain; charset=utf-8" and headers["x-test"] == "1"
    assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", headers["date"])
    assert rs[2][1]["connection"] == "close"


async def test_head_http10_and_request_body(server):
    raw = await _exchange(server, b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n"
                                  b"POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                                  b"GET /ten HTTP/1.0\r\n\r\n"
                                  b"GET /never HTTP/1.1\r\n\r\n")
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"200 OK" in head and b"Content-Length: 10" in head  # the length of the body not sent
    rs = _responses(rest)
    assert [r[2] for r in rs] == [b"POST /p []", b"GET /ten []"]  # HTTP/1.0 without keep-alive: closed


async def test_bad_requests_are_refused_and_closed(server):
    for data in (b"NONSENSE\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
                 b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                 b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"):
        rs = _responses(await _exchange(server, data))
        assert len(rs) == 1 and rs[0][0] == 400 and rs[0][1]["connection"] == "close", data
    rs = _responses(await _exchange(server, b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n"))
    assert rs[0][0] == 431


async def test_close_ends_idle_connections(server):
    # (the fixture's close() must not wait for a kept-alive client that never sends again)
    r, w = await asyncio.open_connection("127.0.0.1", server)
    w.write(b"GET / HTTP/1.1\r\n\r\n")
    await w.drain()
    assert (await r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
