"""``proxy_protocol: true``: client connections may start with a PROXY header (HAProxy v1 text, v2 binary), whose
source address the server then reports for the client (/connz, log lines, later INFOs), as nats-server: the parser
(rillet.server.proxyproto) alone, and the server side by side with nats-server."""
from __future__ import annotations

import asyncio
import json
import socket
import struct
import urllib.request

import pytest

from rillet.server.proxyproto import V2_SIG, Found, ProxyHeader, ProxyProtoError
from tests.difftarget import go_server, rillet_server
from tests.helpers import free_port
from test_cluster_leaf import pki  # noqa: F401 (a fixture)


def _v2(cmd: int, fam: int, addr: bytes, extra: bytes = b"") -> bytes:
    return V2_SIG + bytes([0x20 | cmd, fam]) + struct.pack(">H", len(addr)) + addr + extra


V4 = socket.inet_aton("203.0.113.7") + socket.inet_aton("10.0.0.1") + struct.pack(">HH", 51234, 4222)
V6 = socket.inet_pton(socket.AF_INET6, "2001:db8::7") + socket.inet_pton(socket.AF_INET6, "2001:db8::1") + \
    struct.pack(">HH", 40000, 4222)


@pytest.mark.parametrize("data,addr,rest", [
    (b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 4222\r\nPING\r\n", ("203.0.113.7", 51234), b"PING\r\n"),
    (b"PROXY TCP6 2001:db8::7 2001:db8::1 40000 4222\r\n", ("2001:db8::7", 40000), b""),
    (b"PROXY TCP6 ::ffff:192.0.2.1 ::ffff:192.0.2.2 1 2\r\nX", ("192.0.2.1", 1), b"X"),
    (b"PROXY UNKNOWN whatever\r\nCONNECT {}\r\n", None, b"CONNECT {}\r\n"),
    (_v2(1, 0x11, V4) + b"PING\r\n", ("203.0.113.7", 51234), b"PING\r\n"),
    (_v2(1, 0x11, V4 + b"\x03\x00\x04abcd"), ("203.0.113.7", 51234), b""),  # (TLVs after the addresses)
    (_v2(1, 0x21, V6), ("2001:db8::7", 40000), b""),
    (_v2(0, 0x00, b""), None, b""),  # LOCAL
    (_v2(1, 0x01, b"xx") + b"Z", None, b"Z"),  # UNSPEC family
])
def test_headers_split_at_every_point(data, addr, rest):
    for cut in range(len(data) + 1):
        p = ProxyHeader()
        got = p.feed(data[:cut]) if cut else None
        if got is None:
            got = p.feed(data[cut:])
        else:  # (done with the first part: what follows goes to the protocol parser as it comes)
            got = got._replace(rest=got.rest + data[cut:])
        assert got == Found(addr, rest), (cut, got)


@pytest.mark.parametrize("data", [b"CONNECT {}\r\n", b"PING\r\n", b"\x16\x03\x01", b"PROXX"])
def test_no_header_hands_everything_back(data):
    got = ProxyHeader().feed(data)
    assert got == Found(None, data, header=False)


@pytest.mark.parametrize("data,why", [
    (b"PROXY " + b"A" * 120, "v1 line too long"),
    (b"PROXY TCP4 1.2.3.4\r\n", "invalid v1 format"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", "invalid dest port"),
    (b"PROXY TCP4 2001:db8::7 5.6.7.8 1 2\r\n", "TCP4 with IPv6 address"),
    (b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", "TCP6 with IPv4 address"),
    (b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "invalid protocol UDP4"),
    (b"PROXY TCP4 a.b.c.d 5.6.7.8 1 2\r\n", "invalid address"),
    (V2_SIG[:6] + b"XXXXXX" + b"\x21\x11\x00\x0c" + V4, "invalid signature"),
    (V2_SIG + b"\x11\x11\x00\x0c" + V4, "invalid version 0x10"),
    (_v2(1, 0x12, V4), "only STREAM protocol supported"),
    (_v2(1, 0x11, V4[:8]), "IPv4 address data too short: 8 bytes"),
    (_v2(1, 0x31, V4), "unsupported address family 0x30"),
    (_v2(2, 0x11, V4), "unknown PROXY protocol command: 0x02"),
])
def test_malformed_headers(data, why):
    with pytest.raises(ProxyProtoError, match=why):
        ProxyHeader().feed(data)


# ---- the server, side by side with nats-server ------------------------------------------------------------

async def _connz(http: int) -> list[dict]:
    def get() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/connz", timeout=5) as r:
            return json.loads(r.read())
    return (await asyncio.get_running_loop().run_in_executor(None, get)).get("connections") or []


async def _session(port: int, http: int, first: bytes) -> tuple:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        info = json.loads((await asyncio.wait_for(r.readline(), 5))[5:])
        w.write(first + b'CONNECT {"verbose":false,"pedantic":false,"name":"pp"}\r\nPING\r\n')
        await w.drain()
        answer = b""
        try:
            while b"PONG\r\n" not in answer:
                chunk = await asyncio.wait_for(r.read(4096), 5)
                if not chunk:
                    break
                answer += chunk
        except asyncio.TimeoutError:
            pass
        conns = [(c["ip"], c["port"]) for c in await _connz(http) if c.get("name") == "pp"]
        return "client_ip" in info, answer.endswith(b"PONG\r\n"), conns
    finally:
        w.close()


@pytest.mark.parametrize("first", [
    b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 4222\r\n",
    b"",  # no header: the client works as without a proxy
    b"PROXY UNKNOWN\r\n",
    b"PROXY TCP4 203.0.113.7\r\n",  # malformed: closed
], ids=["v1", "none", "unknown", "bad"])
async def test_server_reads_the_header_as_nats_server(first):
    got = {}
    for name, serve in (("rillet", rillet_server), ("go", go_server)):
        port, http = free_port(), free_port()
        async with serve(f'listen: "127.0.0.1:{port}"\nhttp: "127.0.0.1:{http}"\nproxy_protocol: true\n'):
            got[name] = await _session(port, http, first)
    if first == b"" or first.startswith(b"PROXY UNKNOWN"):
        # (the connection's own address: the two servers saw different client ports)
        got = {k: (v[0], v[1], [ip for ip, _ in v[2]]) for k, v in got.items()}
    assert got["rillet"] == got["go"], got
    assert got["rillet"][0] is False  # (the first INFO does not name the proxy as the client)


async def test_v2_header_and_log_prefix():
    port = free_port()
    async with rillet_server(f'listen: "127.0.0.1:{port}"\nproxy_protocol: true\ndebug: true\n') as srv:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        await r.readline()
        w.write(_v2(1, 0x21, V6) + b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert await asyncio.wait_for(r.readline(), 5) == b"PONG\r\n"
        c = next(iter(srv.clients.values()))
        assert (c.host, c.port) == ("2001:db8::7", 40000)
        w.close()
        assert "PROXY protocol enabled for client connections" in srv._test_log.getvalue()


async def _tls_first_session(port: int, http: int, first: bytes, ca: str) -> tuple:
    """``first`` (a PROXY header, or nothing) in the clear, then at once the TLS handshake (TLS first: no INFO
    before it), then INFO, CONNECT and PING over TLS: (client_ip in the INFO, PONG, the address /connz shows)."""
    import ssl
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        if first:
            w.write(first)
            await w.drain()
        try:
            await asyncio.wait_for(w.start_tls(ssl.create_default_context(cafile=ca), server_hostname="localhost"), 5)
        except (ConnectionError, ssl.SSLError, asyncio.TimeoutError):
            return None, False, []  # (closed: a malformed header)
        info = json.loads((await asyncio.wait_for(r.readline(), 5))[5:])
        w.write(b'CONNECT {"verbose":false,"pedantic":false,"name":"pp"}\r\nPING\r\n')
        await w.drain()
        answer = await asyncio.wait_for(r.readline(), 5)
        conns = [(c["ip"], c["port"]) for c in await _connz(http) if c.get("name") == "pp"]
        return info.get("client_ip"), answer == b"PONG\r\n", conns
    finally:
        w.close()


@pytest.mark.parametrize("handshake_first", ["true", "300ms"], ids=["first", "fallback"])
@pytest.mark.parametrize("first", [
    b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 4222\r\n",
    _v2(1, 0x11, V4),
    b"",  # no header: a TLS-first client works as without a proxy
    b"PROXY TCP4 203.0.113.7\r\n",  # malformed: closed
], ids=["v1", "v2", "none", "bad"])
async def test_header_before_tls_handshake_first_as_nats_server(pki, first, handshake_first):
    """With ``handshake_first`` the PROXY header comes in the clear before the client's TLS handshake, and the
    INFO (after the handshake) names the address the header gave, as nats-server."""
    cert, key = pki["ca_server"]
    got = {}
    for name, serve in (("rillet", rillet_server), ("go", go_server)):
        port, http = free_port(), free_port()
        conf = (f'listen: "127.0.0.1:{port}"\nhttp: "127.0.0.1:{http}"\nproxy_protocol: true\n'
                f'tls {{ cert_file: "{cert}", key_file: "{key}", handshake_first: {handshake_first} }}\n')
        async with serve(conf):
            got[name] = await _tls_first_session(port, http, first, pki["ca"])
    if first == b"":
        got = {k: (v[0] is not None, v[1], [ip for ip, _ in v[2]]) for k, v in got.items()}
    assert got["rillet"] == got["go"], got
    assert got["rillet"][1] is (b"203.0.113.7\r\n" not in first)


async def _tls_session(port: int, http: int, first: bytes, ca: str, tls: bool) -> tuple:
    """INFO in the clear, then ``first`` (a PROXY header, or nothing) in the clear, then TLS (or, with a server
    that also allows plain clients, ``tls=False``: the protocol in the clear), CONNECT and PING."""
    import ssl
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        info = json.loads((await asyncio.wait_for(r.readline(), 5))[5:])
        if first:
            w.write(first)
            await w.drain()
        if tls:
            ctx = ssl.create_default_context(cafile=ca)
            try:
                await asyncio.wait_for(w.start_tls(ctx, server_hostname="localhost"), 5)
            except (ConnectionError, ssl.SSLError, asyncio.TimeoutError):
                return "client_ip" in info, False, []  # (closed: a malformed header)
        w.write(b'CONNECT {"verbose":false,"pedantic":false,"name":"pp"}\r\nPING\r\n')
        await w.drain()
        answer = b""
        try:
            while b"PONG\r\n" not in answer:
                chunk = await asyncio.wait_for(r.read(4096), 5)
                if not chunk:
                    break
                answer += chunk
        except (asyncio.TimeoutError, ConnectionError):
            pass
        conns = [(c["ip"], c["port"]) for c in await _connz(http) if c.get("name") == "pp"]
        return "client_ip" in info, answer.endswith(b"PONG\r\n"), conns
    finally:
        w.close()


@pytest.mark.parametrize("mode", ["required", "allow_non_tls"])
@pytest.mark.parametrize("first", [
    b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 4222\r\n",
    _v2(1, 0x11, V4),
    b"",  # no header: a TLS client works as without a proxy
    b"PROXY TCP4 203.0.113.7\r\n",  # malformed: closed
], ids=["v1", "v2", "none", "bad"])
async def test_header_before_tls_as_nats_server(pki, first, mode):
    """With a tls block on the client port, the PROXY header comes in the clear before the TLS handshake (after
    the INFO), as nats-server reads it; with allow_non_tls the byte after the header decides TLS or plain."""
    cert, key = pki["ca_server"]
    extra = "allow_non_tls: true\n" if mode == "allow_non_tls" else ""
    got = {}
    for name, serve in (("rillet", rillet_server), ("go", go_server)):
        port, http = free_port(), free_port()
        conf = (f'listen: "127.0.0.1:{port}"\nhttp: "127.0.0.1:{http}"\nproxy_protocol: true\n{extra}'
                f'tls {{ cert_file: "{cert}", key_file: "{key}" }}\n')
        async with serve(conf):
            got[name] = [await _tls_session(port, http, first, pki["ca"], True)]
            if mode == "allow_non_tls":
                got[name].append(await _tls_session(port, http, first, pki["ca"], False))
    if first == b"":
        got = {k: [(a, b, [ip for ip, _ in c]) for a, b, c in v] for k, v in got.items()}
    assert got["rillet"] == got["go"], got
    assert got["rillet"][0][1] is (b"203.0.113.7\r\n" not in first)  # (PONG unless the header was malformed)
