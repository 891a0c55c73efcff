"""Leaf connections over WebSocket, soliciting side: the ``ws://`` and ``wss://`` URLs of a leafnodes remote
(with ``wss://``, or a remote ``tls {}`` block, the TCP connection is TLS underneath the websocket).

``WSDialer`` is the asyncio protocol of the TCP connection: it sends the HTTP upgrade request for the
hub's ``/leafnode`` path (as nats-server's leafNodeSolicitWSConnection does), checks the 101 answer, and
then carries the leaf protocol in binary frames, masked as a client must (unless the remote asks for
``ws_no_masking`` and the hub agrees with ``Nats-No-Masking: true``). To the ``LeafConn`` it wraps it is
the transport (``write``, ``close``, ``abort``, ``get_extra_info``...); frames from the hub are decoded
here (continuations, ping, close) and their payload handed to the ``LeafConn``. Compression
(permessage-deflate) is not offered. The accepting side is the server's websocket listener
(``rillet.server.websocket``), which hands a ``/leafnode`` upgrade to a ``LeafConn``.
"""
from __future__ import annotations

import asyncio
import base64
import os
import struct
from typing import Any

from rillet.server.wsframe import WSTransport, accept_key, unmask

_OP_CONT, _OP_TEXT, _OP_BIN, _OP_CLOSE, _OP_PING, _OP_PONG = 0, 1, 2, 8, 9, 10
_MAX_HEADER = 8192


def _frame(op: int, payload: bytes, mask: bool) -> bytes:
    n = len(payload)
    b0 = 0x80 | op
    mbit = 0x80 if mask else 0
    if n < 126:
        head = bytes((b0, mbit | n))
    elif n < 65536:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return b"".join((head, key, bytes(unmask(key, payload))))


class WSDialer(WSTransport, asyncio.Protocol):
    """The WebSocket client side of one solicited leaf connection (see the module docstring)."""

    def __init__(self, inner: Any, host: str, no_masking: bool = False, path: str = "/leafnode") -> None:
        self.inner = inner  # the LeafConn
        self.host = host
        self.path = path
        self.want_no_masking = no_masking
        self.mask = True
        self.t: asyncio.Transport | None = None
        self.key = base64.b64encode(os.urandom(16)).decode()
        self.upgraded = False
        self.closing = False
        self._hbuf = bytearray()
        self._buf = bytearray()
        self._msg = bytearray()

    # ---- socket side ----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        self.t = transport  # type: ignore[assignment]
        req = [f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {self.key}\r\nSec-WebSocket-Version: 13\r\n"]
        if self.want_no_masking:
            req.append("Nats-No-Masking: true\r\n")
        req.append("\r\n")
        transport.write("".join(req).encode("latin-1"))  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        if not self.upgraded:
            self._hbuf += data
            end = self._hbuf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._hbuf) > _MAX_HEADER:
                    self._fail("websocket handshake: response headers too large")
                return
            head = bytes(self._hbuf[:end]).decode("latin-1")
            rest = bytes(self._hbuf[end + 4:])
            self._hbuf.clear()
            err = self._check_response(head)
            if err:
                self._fail(f"Error soliciting websocket connection: {err}")
                return
            self.upgraded = True
            self.inner.connection_made(self)
            if rest:
                self._frames(rest)
            return
        self._frames(data)

    def _check_response(self, head: str) -> str:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or parts[1] != "101":
            return f"invalid websocket connection: {lines[0]}"
        hdrs: dict[str, str] = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if hdrs.get("upgrade", "").lower() != "websocket" or "upgrade" not in hdrs.get("connection", "").lower():
            return "invalid websocket connection"
        if hdrs.get("sec-websocket-accept") != accept_key(self.key):
            return "invalid websocket connection (bad accept key)"
        if hdrs.get("sec-websocket-extensions"):
            return "websocket compression was not requested"
        if self.want_no_masking and hdrs.get("nats-no-masking", "").lower() == "true":
            self.mask = False
        return ""

    def _fail(self, text: str) -> None:
        self.inner.server.log.error(text)
        self.closing = True
        if self.t is not None:
            self.t.close()

    def _frames(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        n = len(buf)
        while n - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            op = b0 & 0x0F
            if b0 & 0x70:
                self._flush(out)
                self._protocol_error("websocket frame with reserved bits set (compression was not negotiated)")
                return
            ln = b1 & 0x7F
            hl = 2
            if ln == 126:
                if n - pos < 4:
                    break
                ln = struct.unpack_from("!H", buf, pos + 2)[0]
                hl = 4
            elif ln == 127:
                if n - pos < 10:
                    break
                ln = struct.unpack_from("!Q", buf, pos + 2)[0]
                hl = 10
            key = b""
            if b1 & 0x80:
                if n - pos < hl + 4:
                    break
                key = bytes(buf[pos + hl:pos + hl + 4])
                hl += 4
            if n - pos < hl + ln:
                break
            payload = bytes(buf[pos + hl:pos + hl + ln])
            if key:
                payload = bytes(unmask(key, payload))
            pos += hl + ln
            if op in (_OP_CONT, _OP_TEXT, _OP_BIN):
                if b0 & 0x80 and not self._msg:
                    out.append(payload)
                else:
                    self._msg += payload
                    if b0 & 0x80:
                        out.append(bytes(self._msg))
                        self._msg.clear()
            elif op == _OP_PING:
                self._send(_OP_PONG, payload)
            elif op == _OP_CLOSE:
                self._flush(out)
                if not self.closing:
                    self._send(_OP_CLOSE, payload[:2])
                    self.closing = True
                    if self.t is not None:
                        self.t.close()
                return
            elif op != _OP_PONG:
                self._flush(out)
                self._protocol_error(f"websocket frame with unknown opcode {op}")
                return
        del buf[:pos]
        self._flush(out)

    def _flush(self, out: list[bytes]) -> None:
        if out and not self.inner.closed:
            self.inner.data_received(out[0] if len(out) == 1 else b"".join(out))

    def _protocol_error(self, text: str) -> None:
        self.inner.server.log.error(f"{self.inner.log_prefix()} - {text}")
        self.inner.close("Protocol Violation")

    def _send(self, op: int, payload: bytes) -> None:
        if self.t is not None and not self.t.is_closing():
            self.t.write(_frame(op, payload, self.mask))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.upgraded:
            self.inner.connection_lost(exc)
        else:
            self.inner.dial_failed(exc)

    # ---- the transport the LeafConn sees --------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.t is not None and not self.closing:
            self.t.write(_frame(_OP_BIN, data, self.mask))

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.t is not None:
            if not self.t.is_closing():
                self.t.write(_frame(_OP_CLOSE, struct.pack("!H", 1000), self.mask))
            self.t.close()

