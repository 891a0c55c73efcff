"""The websocket {} listener: nats-py over ws://, raw frames, the upgrade checks, compression, TLS."""
from __future__ import annotations

import asyncio
import base64
import datetime
import io
import json
import os
import ssl
import struct
import zlib

import pytest

import nats
from rillet.app.embed import run_server
from rillet.server.logging import Logger
from rillet.config.options import Options, TLSConfig, User, WebsocketOptions
from rillet.server.wsframe import accept_key

pytestmark = pytest.mark.asyncio


def ws_opts(**kw) -> Options:
    wkw = {"host": "127.0.0.1", "port": -1, "no_tls": True}
    okw = {}
    for k, v in kw.items():
        if k in WebsocketOptions.__dataclass_fields__:
            wkw[k] = v
        else:
            okw[k] = v
    okw.setdefault("host", "127.0.0.1")
    okw.setdefault("port", -1)
    return Options(websocket=WebsocketOptions(**wkw), **okw)


def ws_url(srv, scheme: str = "ws") -> str:
    return f"{scheme}://127.0.0.1:{srv.websocket_addr[1]}"


# ---- a raw websocket client -----------------------------------------------------------------------------


def cframe(op: int, payload: bytes, fin: bool = True, rsv1: bool = False, mask: bool = True,
           key: bytes | None = None) -> bytes:
    """A client frame (masked unless told otherwise)."""
    b0 = op | (0x80 if fin else 0) | (0x40 if rsv1 else 0)
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n <= 125:
        h = bytes((b0, mbit | n))
    elif n < 65536:
        h = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        h = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return h + payload
    key = key or os.urandom(4)
    body = bytes(b ^ key[i & 3] for i, b in enumerate(payload))
    return h + key + body


class RawWS:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        self.r = reader
        self.w = writer
        self.head = head
        self.buf = b""

    @property
    def status(self) -> int:
        return int(self.head.split(b" ", 2)[1])

    def header(self, name: str) -> str | None:
        for line in self.head.decode("latin-1").split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == name.lower():
                return v.strip()
        return None

    async def read_frame(self, timeout: float = 2.0) -> tuple[bool, bool, int, bytes]:
        async def rd() -> tuple[bool, bool, int, bytes]:
            h = await self.r.readexactly(2)
            fin, rsv1, op = bool(h[0] & 0x80), bool(h[0] & 0x40), h[0] & 0x0F
            assert not h[1] & 0x80, "server frames must not be masked"
            n = h[1] & 0x7F
            if n == 126:
                n = struct.unpack("!H", await self.r.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", await self.r.readexactly(8))[0]
            return fin, rsv1, op, await self.r.readexactly(n)
        return await asyncio.wait_for(rd(), timeout)

    async def read_data(self, timeout: float = 2.0) -> bytes:
        """The next data message's payload, inflated when compressed (control frames are skipped)."""
        while True:
            fin, rsv1, op, payload = await self.read_frame(timeout)
            if op in (1, 2):
                if rsv1:
                    payload = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
                return payload

    async def read_until(self, needle: bytes, timeout: float = 2.0) -> bytes:
        while needle not in self.buf:
            self.buf += await self.read_data(timeout)
        i = self.buf.index(needle) + len(needle)
        got, self.buf = self.buf[:i], self.buf[i:]
        return got

    def send(self, data: bytes) -> None:
        self.w.write(data)

    async def close(self) -> None:
        self.w.close()
        try:
            await self.w.wait_closed()
        except Exception:
            pass


async def raw_connect(port: int, extra: str = "", path: str = "/", request: bytes | None = None,
                      ssl_ctx: ssl.SSLContext | None = None) -> RawWS:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ssl_ctx)
    if request is None:
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"{extra}\r\n").encode()
    writer.write(request)
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
    except asyncio.IncompleteReadError as e:
        head = e.partial
    return RawWS(reader, writer, head)


async def raw_nats(port: int, extra: str = "", connect: dict | None = None) -> RawWS:
    """Upgrade, read INFO, send CONNECT + PING, wait for PONG."""
    ws = await raw_connect(port, extra)
    assert ws.status == 101, ws.head
    info = await ws.read_until(b"\r\n")
    assert info.startswith(b"INFO ")
    c = json.dumps(connect or {"verbose": False, "protocol": 1, "headers": True}).encode()
    ws.send(cframe(2, b"CONNECT " + c + b"\r\nPING\r\n"))
    assert (await ws.read_until(b"PONG\r\n")).endswith(b"PONG\r\n")
    return ws


# ---- nats-py over ws:// -----------------------------------------------------------------------------------


async def test_start_logs_and_addr():
    out = io.StringIO()
    async with run_server(ws_opts(), log=Logger(out=out)) as srv:
        assert srv.websocket_addr is not None and srv.websocket_addr[1] > 0
        assert srv.websocket_addr[0] == "127.0.0.1"
        port = srv.websocket_addr[1]
        ws = await raw_connect(port, request=_req(port, method="PUT"))
        assert ws.status == 405
        await ws.close()
    log = out.getvalue()
    assert f"[INF] Listening for websocket clients on ws://127.0.0.1:{port}\n" in log
    assert "[WRN] Websocket not configured with TLS. DO NOT USE IN PRODUCTION!" in log
    assert "- websocket handshake error: request method must be GET" in log


async def test_requires_tls_unless_no_tls():
    opts = Options(host="127.0.0.1", port=-1, websocket=WebsocketOptions(host="127.0.0.1", port=-1))
    with pytest.raises(ValueError, match="websocket requires TLS configuration"):
        async with run_server(opts):
            pass


@pytest.mark.parametrize("hdr", ["Connection", "sec-websocket-protocol", "Nats-No-Masking"])
async def test_invalid_custom_headers_refused(hdr):
    with pytest.raises(ValueError, match="websocket: invalid header"):
        async with run_server(ws_opts(headers={hdr: "x"})):
            pass


async def test_pubsub_request_across_ws_and_tcp():
    async with run_server(ws_opts()) as srv:
        wnc = await nats.connect(ws_url(srv))
        tnc = await nats.connect(srv.client_url)
        try:
            wsub = await wnc.subscribe("from.tcp")
            tsub = await tnc.subscribe("from.ws")
            await wnc.flush()
            await tnc.flush()
            await tnc.publish("from.tcp", b"hello ws")
            await wnc.publish("from.ws", b"hello tcp")
            assert (await wsub.next_msg(timeout=2)).data == b"hello ws"
            assert (await tsub.next_msg(timeout=2)).data == b"hello tcp"

            async def svc(msg):
                await msg.respond(msg.data.upper())

            await tnc.subscribe("svc.tcp", cb=svc)
            await wnc.subscribe("svc.ws", cb=svc)
            await tnc.flush()
            await wnc.flush()
            assert (await wnc.request("svc.tcp", b"abc", timeout=2)).data == b"ABC"
            assert (await tnc.request("svc.ws", b"xyz", timeout=2)).data == b"XYZ"
            assert (await wnc.request("svc.ws", b"self", timeout=2)).data == b"SELF"
        finally:
            await wnc.close()
            await tnc.close()


async def test_headers_and_large_payloads():
    async with run_server(ws_opts()) as srv:
        nc = await nats.connect(ws_url(srv))
        tnc = await nats.connect(srv.client_url)
        try:
            sub = await nc.subscribe("h")
            await nc.flush()
            await nc.publish("h", b"with headers", headers={"foo": "bar", "hello": "world-1"})
            m = await sub.next_msg(timeout=2)
            assert m.headers == {"foo": "bar", "hello": "world-1"}
            big = os.urandom(512 * 1024)
            tsub = await tnc.subscribe("big")
            await tnc.flush()
            await nc.publish("big", big)
            await nc.publish("h", big)
            await tnc.publish("h", big[::-1])
            assert (await tsub.next_msg(timeout=5)).data == big
            got = {(await sub.next_msg(timeout=5)).data, (await sub.next_msg(timeout=5)).data}
            assert got == {big, big[::-1]}  # two publishers: no order between them
        finally:
            await nc.close()
            await tnc.close()


async def test_many_messages_in_order():
    async with run_server(ws_opts()) as srv:
        nc = await nats.connect(ws_url(srv))
        try:
            sub = await nc.subscribe("seq")
            await nc.flush()
            for i in range(2000):
                await nc.publish("seq", str(i).encode())
            await nc.flush()
            for i in range(2000):
                assert (await sub.next_msg(timeout=2)).data == str(i).encode()
        finally:
            await nc.close()


async def test_info_for_websocket_clients():
    async with run_server(ws_opts(compression=True)) as srv:
        ws = await raw_connect(srv.websocket_addr[1])
        info = json.loads((await ws.read_until(b"\r\n"))[5:])
        assert info["port"] == srv.websocket_addr[1]
        assert info["host"] == "127.0.0.1"
        assert "tls_required" not in info and "tls_available" not in info
        assert info["headers"] is True
        await ws.close()


# ---- compression ----------------------------------------------------------------------------------------


async def test_compression_negotiated_and_used():
    async with run_server(ws_opts(compression=True)) as srv:
        port = srv.websocket_addr[1]
        ws = await raw_connect(port, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n")
        assert ws.status == 101
        assert ws.header("Sec-WebSocket-Extensions") == \
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
        fin, rsv1, op, payload = await ws.read_frame()
        assert (fin, rsv1, op) == (True, True, 2)  # INFO is longer than 64 bytes: compressed
        info = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        assert info.startswith(b"INFO {")
        # a compressed CONNECT/SUB/PUB/PING, split over two frames (RSV1 only on the first)
        proto = b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPUB foo 300\r\n' + b"x" * 300 + b"\r\nPING\r\n"
        co = zlib.compressobj(6, zlib.DEFLATED, -15)
        comp = co.compress(proto) + co.flush(zlib.Z_SYNC_FLUSH)
        assert comp.endswith(b"\x00\x00\xff\xff")
        comp = comp[:-4]
        half = len(comp) // 2
        ws.send(cframe(2, comp[:half], fin=False, rsv1=True) + cframe(0, comp[half:]))
        got = await ws.read_until(b"PONG\r\n")
        assert got == b"MSG foo 1 300\r\n" + b"x" * 300 + b"\r\nPONG\r\n"
        # a second, uncompressed message also works on a compressing connection
        ws.send(cframe(2, b"PING\r\n"))
        assert await ws.read_until(b"PONG\r\n") == b"PONG\r\n"
        # every compressed message from the server inflates on its own (server_no_context_takeover)
        for i in range(3):
            body = (b"%d" % i) * 200
            ws.send(cframe(2, b"PUB foo 200\r\n" + body + b"\r\n"))
            fin, rsv1, op, payload = await ws.read_frame()
            assert rsv1 and fin
            assert zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff") == \
                b"MSG foo 1 200\r\n" + body + b"\r\n"
        await ws.close()


async def test_compression_with_context_takeover_client():
    """A client that keeps its deflate context between messages is still understood."""
    async with run_server(ws_opts(compression=True)) as srv:
        ws = await raw_connect(srv.websocket_addr[1], "Sec-WebSocket-Extensions: permessage-deflate\r\n")
        await ws.read_until(b"\r\n")
        co = zlib.compressobj(6, zlib.DEFLATED, -15)
        for i, p in enumerate([b'CONNECT {"verbose":false}\r\nSUB a 1\r\n', b"PUB a 5\r\nhello\r\nPING\r\n",
                               b"PUB a 5\r\nhello\r\nPING\r\n"]):
            c = co.compress(p) + co.flush(zlib.Z_SYNC_FLUSH)
            ws.send(cframe(2, c[:-4], rsv1=True))
        await ws.read_until(b"PONG\r\n")
        assert b"MSG a 1 5\r\nhello\r\n" in await ws.read_until(b"PONG\r\n")
        await ws.close()


async def test_compression_with_aiohttp_client():
    aiohttp = pytest.importorskip("aiohttp")
    async with run_server(ws_opts(compression=True)) as srv:
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(ws_url(srv), compress=15) as ws:
                assert ws.compress
                info = await ws.receive(timeout=2)
                assert info.data.startswith(b"INFO ")
                big = b"0123456789" * 5000
                await ws.send_bytes(b'CONNECT {"verbose":false}\r\nSUB big 1\r\nPUB big %d\r\n%s\r\nPING\r\n'
                                    % (len(big), big))
                buf = b""
                while b"PONG\r\n" not in buf:
                    buf += (await ws.receive(timeout=2)).data
                assert buf == b"MSG big 1 %d\r\n%s\r\nPONG\r\n" % (len(big), big)


async def test_compression_off_when_not_configured():
    async with run_server(ws_opts()) as srv:
        ws = await raw_connect(srv.websocket_addr[1], "Sec-WebSocket-Extensions: permessage-deflate\r\n")
        assert ws.header("Sec-WebSocket-Extensions") is None
        fin, rsv1, op, _ = await ws.read_frame()
        assert not rsv1
        # a compressed frame without negotiation is a protocol error
        ws.send(cframe(2, b"abc", rsv1=True))
        fin, rsv1, op, payload = await ws.read_frame()
        assert op == 8 and struct.unpack("!H", payload[:2])[0] == 1002
        assert b"permessage-deflate" in payload
        await ws.close()


# ---- raw frames ---------------------------------------------------------------------------------------------


async def test_split_and_odd_frames():
    async with run_server(ws_opts()) as srv:
        ws = await raw_nats(srv.websocket_addr[1])
        # one message in three fragments (binary + 2 continuations), with a ping in between,
        # and a text frame, all written one byte at a time
        data = (cframe(2, b"SUB x 1\r\nPUB x", fin=False) + cframe(9, b"hi")
                + cframe(0, b" 3\r\nab", fin=False) + cframe(0, b"c\r\n") + cframe(1, b"PING\r\n")
                + cframe(2, b""))
        for i in range(len(data)):
            ws.send(data[i:i + 1])
            if i % 7 == 0:
                await ws.w.drain()
        frames = []
        buf = b""
        while b"PONG\r\n" not in buf:
            fin, rsv1, op, payload = await ws.read_frame()
            frames.append(op)
            if op == 2:
                buf += payload
            elif op == 10:
                assert payload == b"hi"
        assert 10 in frames
        assert buf == b"MSG x 1 3\r\nabc\r\nPONG\r\n"
        # a 16-bit and a 64-bit length frame, and a whole batch of frames in one write
        p1 = b"PUB x 200\r\n" + b"y" * 200 + b"\r\n"
        p2 = b"PUB x 70000\r\n" + b"z" * 70000 + b"\r\n"
        ws.send(cframe(2, p1) + cframe(2, p2) + b"".join(cframe(2, b"PUB x 1\r\nq\r\n") for _ in range(50))
                + cframe(2, b"PING\r\n"))
        got = await ws.read_until(b"PONG\r\n")
        assert got.count(b"MSG x 1 ") == 52
        assert b"z" * 70000 in got
        await ws.close()


async def test_masking_key_offsets_across_reads():
    """A frame's payload split at every possible point still unmasks correctly."""
    async with run_server(ws_opts()) as srv:
        ws = await raw_nats(srv.websocket_addr[1])
        ws.send(cframe(2, b"SUB m 1\r\n"))
        payload = b"PUB m 23\r\nabcdefghijklmnopqrstuvw\r\n"
        for cut in range(1, 14):
            f = cframe(2, payload, key=b"\x01\x82\x43\xf4")
            ws.send(f[:cut + 6])
            await ws.w.drain()
            await asyncio.sleep(0.002)
            ws.send(f[cut + 6:])
        ws.send(cframe(2, b"PING\r\n"))
        got = await ws.read_until(b"PONG\r\n")
        assert got.count(b"MSG m 1 23\r\nabcdefghijklmnopqrstuvw\r\n") == 13
        await ws.close()


async def test_close_frame_is_answered():
    async with run_server(ws_opts()) as srv:
        ws = await raw_nats(srv.websocket_addr[1])
        assert len(srv.clients) == 1
        ws.send(cframe(8, struct.pack("!H", 1000) + b"bye"))
        fin, rsv1, op, payload = await ws.read_frame()
        assert op == 8 and payload == struct.pack("!H", 1000) + b"bye"
        assert await ws.r.read() == b""
        await asyncio.sleep(0.05)
        assert not srv.clients
        await ws.close()


async def test_close_frame_without_status():
    async with run_server(ws_opts()) as srv:
        ws = await raw_nats(srv.websocket_addr[1])
        ws.send(cframe(8, b""))
        fin, rsv1, op, payload = await ws.read_frame()
        assert op == 8 and payload == b""
        await ws.close()


@pytest.mark.parametrize("frame,text", [
    (cframe(2, b"PING\r\n", mask=False), b"mask bit missing"),
    (cframe(9, b"x" * 126), b"control frame length bigger than maximum allowed of 125 bytes"),
    (cframe(9, b"x", fin=False), b"control frame does not have final bit set"),
    (cframe(0, b"x"), b"invalid continuation frame"),
    (cframe(3, b"x"), b"unknown opcode 3"),
    (bytes((0xA2, 0x80)) + b"abcd", b"RSV2 and RSV3 must be clear"),
    (cframe(8, b"\x03"), b"close frame payload cannot be 1 byte"),
    (cframe(8, struct.pack("!H", 1005)), b"invalid close status code 1005"),
    (cframe(2, b"SUB", fin=False) + cframe(2, b"x"),
     b"new message started before final frame for previous message was received"),
], ids=lambda v: v.decode() if isinstance(v, bytes) and v[:1].isalpha() else "frame")  # (masks are random)
async def test_frame_protocol_errors(frame, text):
    async with run_server(ws_opts()) as srv:
        ws = await raw_nats(srv.websocket_addr[1])
        ws.send(frame)
        fin, rsv1, op, payload = await ws.read_frame()
        assert op == 8
        assert struct.unpack("!H", payload[:2])[0] == 1002
        assert payload[2:] == text
        assert await asyncio.wait_for(ws.r.read(), 2) == b""
        await asyncio.sleep(0.05)
        assert not srv.clients
        await ws.close()


async def test_server_close_sends_status():
    """Authentication failure: -ERR, then a close frame 1008 with the reason."""
    async with run_server(ws_opts(username="u", password="p")) as srv:
        ws = await raw_connect(srv.websocket_addr[1])
        info = json.loads((await ws.read_until(b"\r\n"))[5:])
        assert info.get("auth_required") is True
        ws.send(cframe(2, b'CONNECT {"user":"u","pass":"wrong"}\r\n'))
        got = await ws.read_until(b"\r\n")
        assert got == b"-ERR 'Authorization Violation'\r\n"
        while True:
            fin, rsv1, op, payload = await ws.read_frame()
            if op == 8:
                break
        assert struct.unpack("!H", payload[:2])[0] == 1008
        assert payload[2:] == b"Authentication Failure"
        await ws.close()


async def test_shutdown_sends_going_away():
    async with run_server(ws_opts()) as srv:
        ws = await raw_nats(srv.websocket_addr[1])
        await srv.shutdown()
        while True:
            fin, rsv1, op, payload = await ws.read_frame()
            if op == 8:
                break
        assert payload == struct.pack("!H", 1001) + b"Server Shutdown"
        await ws.close()


async def test_no_masking_header():
    async with run_server(ws_opts()) as srv:
        ws = await raw_connect(srv.websocket_addr[1], "Nats-No-Masking: true\r\n")
        assert ws.header("Nats-No-Masking") == "true"
        await ws.read_until(b"\r\n")
        ws.send(cframe(2, b'CONNECT {"verbose":false}\r\nPING\r\n', mask=False))
        assert await ws.read_until(b"PONG\r\n") == b"PONG\r\n"
        await ws.close()


# ---- the upgrade request ------------------------------------------------------------------------------------


def _req(port: int, method: str = "GET", drop: str = "", extra: str = "", version: str = "13") -> bytes:
    lines = [f"{method} / HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", f"Sec-WebSocket-Version: {version}"]
    lines = [ln for ln in lines if not (drop and ln.startswith(drop))]
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


async def test_upgrade_accept_key_and_custom_headers():
    async with run_server(ws_opts(headers={"X-Custom": "yes", "Strict-Transport-Security": "max-age=1"})) as srv:
        port = srv.websocket_addr[1]
        ws = await raw_connect(port, request=_req(port))
        assert ws.status == 101
        assert ws.header("Sec-WebSocket-Accept") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" == \
            accept_key("dGhlIHNhbXBsZSBub25jZQ==")
        assert ws.header("X-Custom") == "yes"
        assert ws.header("Strict-Transport-Security") == "max-age=1"
        await ws.close()


@pytest.mark.parametrize("kw,status", [
    ({"drop": "Upgrade"}, 400),
    ({"drop": "Connection"}, 400),
    ({"drop": "Sec-WebSocket-Key"}, 400),
    ({"version": "12"}, 400),
    ({"method": "POST"}, 405),
])
async def test_bad_upgrade_requests(kw, status):
    async with run_server(ws_opts()) as srv:
        port = srv.websocket_addr[1]
        ws = await raw_connect(port, request=_req(port, **kw))
        assert ws.status == status
        assert ws.header("Sec-Websocket-Version") == "13"
        assert not srv.clients
        await ws.close()


async def test_plain_http_get_is_400_with_aiohttp():
    aiohttp = pytest.importorskip("aiohttp")
    async with run_server(ws_opts()) as srv:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{srv.websocket_addr[1]}/") as r:
                assert r.status == 400
                assert await r.text() == "Bad Request\n"


async def test_invalid_key_and_garbage():
    async with run_server(ws_opts()) as srv:
        port = srv.websocket_addr[1]
        bad_key = _req(port).replace(b"dGhlIHNhbXBsZSBub25jZQ==", b"c2hvcnQ=")
        ws = await raw_connect(port, request=bad_key)
        assert ws.status == 400
        await ws.close()
        ws = await raw_connect(port, request=b"HELLO\r\n\r\n")
        assert ws.status == 400
        await ws.close()


async def test_data_before_handshake_complete_is_dropped():
    async with run_server(ws_opts()) as srv:
        port = srv.websocket_addr[1]
        ws = await raw_connect(port, request=_req(port) + cframe(2, b"PING\r\n"))
        assert ws.head == b""
        await ws.close()


async def test_handshake_timeout():
    async with run_server(ws_opts(handshake_timeout=0.2)) as srv:
        r, w = await asyncio.open_connection("127.0.0.1", srv.websocket_addr[1])
        w.write(b"GET / HTTP/1.1\r\n")
        assert await asyncio.wait_for(r.read(), 2) == b""
        w.close()


async def test_origin_checks():
    opts = ws_opts(allowed_origins=["http://good.example.com", "https://secure.example.com:8443"])
    async with run_server(opts) as srv:
        port = srv.websocket_addr[1]
        for origin, status in [("http://good.example.com", 101), ("http://good.example.com:80", 101),
                               ("https://good.example.com", 403), ("http://bad.example.com", 403),
                               ("https://secure.example.com:8443", 101), ("https://secure.example.com", 403),
                               ("", 101)]:
            extra = f"Origin: {origin}\r\n" if origin else ""
            ws = await raw_connect(port, request=_req(port, extra=extra))
            assert ws.status == status, origin
            if status == 403:
                assert b"Forbidden" in ws.head or await ws.r.read(100)
            await ws.close()


async def test_same_origin():
    async with run_server(ws_opts(same_origin=True)) as srv:
        port = srv.websocket_addr[1]
        for origin, status in [(f"http://127.0.0.1:{port}", 101), ("http://127.0.0.1:1", 403),
                               (f"https://127.0.0.1:{port}", 403)]:
            ws = await raw_connect(port, request=_req(port, extra=f"Origin: {origin}\r\n"))
            assert ws.status == status, origin
            await ws.close()


async def test_bad_allowed_origin_config():
    with pytest.raises(ValueError, match="allowed origins must be absolute URLs"):
        async with run_server(ws_opts(allowed_origins=["ftp://x.example.com"])):
            pass


async def test_mqtt_and_leafnode_paths():
    async with run_server(ws_opts()) as srv:
        port = srv.websocket_addr[1]
        ws = await raw_connect(port, path="/mqtt")
        assert ws.status == 404
        await ws.close()
        ws = await raw_connect(port, path="/leafnode")
        assert ws.status == 101
        assert await asyncio.wait_for(ws.r.read(), 2) == b""
        await ws.close()


# ---- authentication ---------------------------------------------------------------------------------------------


async def test_websocket_auth_override():
    """websocket { authorization } applies to websocket clients only."""
    async with run_server(ws_opts(username="wsuser", password="wspass")) as srv:
        tnc = await nats.connect(srv.client_url)  # no auth on the client port
        await tnc.close()
        with pytest.raises(Exception):
            await nats.connect(ws_url(srv), allow_reconnect=False, max_reconnect_attempts=0,
                               connect_timeout=1)
        nc = await nats.connect(f"ws://wsuser:wspass@127.0.0.1:{srv.websocket_addr[1]}")
        await nc.flush()
        await nc.close()


async def test_websocket_token_and_cookie():
    opts = ws_opts(token="s3cret", extra={"token_cookie": "tok"})
    async with run_server(opts) as srv:
        ws = await raw_nats(srv.websocket_addr[1], extra="Cookie: other=1; tok=s3cret\r\n",
                            connect={"verbose": False})
        await ws.close()
        ws = await raw_connect(srv.websocket_addr[1])
        await ws.read_until(b"\r\n")
        ws.send(cframe(2, b'CONNECT {"verbose":false}\r\nPING\r\n'))
        assert await ws.read_until(b"\r\n") == b"-ERR 'Authorization Violation'\r\n"
        await ws.close()


async def test_websocket_no_auth_user():
    users = [User(username="a", password="pa"), User(username="b", password="pb")]
    async with run_server(ws_opts(users=users, no_auth_user="b")) as srv:
        nc = await nats.connect(ws_url(srv))
        await nc.flush()
        await nc.close()
        with pytest.raises(Exception):
            await nats.connect(srv.client_url, allow_reconnect=False, max_reconnect_attempts=0,
                               connect_timeout=1)


async def test_allowed_connection_types():
    users = [User(username="tcp", password="p", allowed_connection_types=["STANDARD"]),
             User(username="web", password="p", allowed_connection_types=["WEBSOCKET"])]
    async with run_server(ws_opts(users=users)) as srv:
        port = srv.websocket_addr[1]
        nc = await nats.connect(f"ws://web:p@127.0.0.1:{port}")
        await nc.close()
        with pytest.raises(Exception):
            await nats.connect(f"ws://tcp:p@127.0.0.1:{port}", allow_reconnect=False,
                               max_reconnect_attempts=0, connect_timeout=1)


# ---- lame duck ---------------------------------------------------------------------------------------------------


async def test_stop_accepting_keeps_existing_clients():
    async with run_server(ws_opts()) as srv:
        nc = await nats.connect(ws_url(srv))
        lst = srv.extra_listeners[-1]
        await lst.stop_accepting()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", srv.websocket_addr[1])
        sub = await nc.subscribe("still")
        await nc.publish("still", b"ok")
        assert (await sub.next_msg(timeout=2)).data == b"ok"
        await nc.close()


# ---- TLS ---------------------------------------------------------------------------------------------------------


def _self_signed(tmp_path) -> tuple[str, str]:
    crypto = pytest.importorskip("cryptography")
    del crypto
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_file = tmp_path / "cert.pem"
    key_file = tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


async def test_wss_self_signed(tmp_path):
    cert, key = _self_signed(tmp_path)
    opts = ws_opts(no_tls=False, tls=TLSConfig(cert_file=cert, key_file=key))
    async with run_server(opts) as srv:
        ctx = ssl.create_default_context(cafile=cert)
        nc = await nats.connect(ws_url(srv, "wss"), tls=ctx)
        try:
            sub = await nc.subscribe("tls.test")
            await nc.flush()
            await nc.publish("tls.test", b"secure", headers={"a": "b"})
            m = await sub.next_msg(timeout=2)
            assert m.data == b"secure" and m.headers == {"a": "b"}
        finally:
            await nc.close()
        ws = await raw_connect(srv.websocket_addr[1], ssl_ctx=ctx)
        info = json.loads((await ws.read_until(b"\r\n"))[5:])
        assert info["tls_required"] is True and info["tls_available"] is True
        await ws.close()


# ---- misc ----------------------------------------------------------------------------------------------------------


async def test_browser_frames_are_at_most_4k():
    async with run_server(ws_opts()) as srv:
        ws = await raw_nats(srv.websocket_addr[1],
                            extra="User-Agent: Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0\r\n")
        ws.send(cframe(2, b"SUB b 1\r\nPUB b 10000\r\n" + b"w" * 10000 + b"\r\n"))
        buf = b""
        sizes = []
        while len(buf) < 10000 + len(b"MSG b 1 10000\r\n\r\n"):
            fin, rsv1, op, payload = await ws.read_frame()
            assert fin and op == 2
            sizes.append(len(payload))
            buf += payload
        assert max(sizes) <= 4096 and len(sizes) >= 3
        assert buf == b"MSG b 1 10000\r\n" + b"w" * 10000 + b"\r\n"
        await ws.close()


async def test_websocket_ping_interval():
    async with run_server(ws_opts(extra={"ping_interval": 0.1})) as srv:
        ws = await raw_nats(srv.websocket_addr[1])
        # (after CONNECT+PING the server also sends its PONG and the connect INFO)
        assert (await ws.read_until(b"PING\r\n", timeout=1)).endswith(b"\r\nPING\r\n")
        await ws.close()


async def test_x_forwarded_for_in_log_prefix():
    out = io.StringIO()
    async with run_server(ws_opts(debug=True), log=Logger(out=out, debug=True)) as srv:
        ws = await raw_nats(srv.websocket_addr[1], extra="X-Forwarded-For: 10.1.2.3\r\n")
        await ws.close()
        await asyncio.sleep(0.05)
    assert "10.1.2.3/127.0.0.1:" in out.getvalue()
    assert " - wid:1 - Client connection created" in out.getvalue()


async def test_from_config_file():
    from rillet.config import load_string
    opts = load_string("""
        listen: 127.0.0.1:-1
        websocket {
            listen: "127.0.0.1:-1"
            no_tls: true
            compression: true
            headers { X-From-Config: "1" }
        }
    """)
    async with run_server(opts) as srv:
        port = srv.websocket_addr[1]
        ws = await raw_connect(port, request=_req(port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n"))
        assert ws.status == 101 and ws.header("X-From-Config") == "1"
        assert ws.header("Sec-WebSocket-Extensions")
        await ws.close()
        nc = await nats.connect(ws_url(srv))
        await nc.flush(timeout=2)
        await nc.close()
