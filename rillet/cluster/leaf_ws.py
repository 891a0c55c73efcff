"""Leaf connections over WebSocket, soliciting side: the ``ws://`` and ``wss://`` URLs of a leafnodes remote
(with ``wss://``, or a remote ``tls {}`` block, the TCP connection is TLS underneath the websocket).

``WSDialer`` is the asyncio protocol of the TCP connection: it sends the HTTP upgrade request for the
hub's ``/leafnode`` path (as nats-server's leafNodeSolicitWSConnection does), checks the 101 answer, and
then carries the leaf protocol in binary frames, masked as a client must (unless the remote asks for
``ws_no_masking`` and the hub agrees with ``Nats-No-Masking: true``). To the ``LeafConn`` it wraps it is
the transport (``write``, ``close``, ``abort``, ``get_extra_info``...); frames from the hub are decoded
here (continuations, ping, close) and their payload handed to the ``LeafConn``. With ``ws_compress`` the
request offers permessage-deflate without context takeover either way (as nats-server's
leafNodeSolicitWSConnection); a hub that agrees gets writes over 64 bytes deflated (RSV1) and its compressed
messages are inflated; a hub that does not answers without the extension and nothing is compressed. The accepting side is the server's websocket listener
(``rillet.server.websocket``), which hands a ``/leafnode`` upgrade to a ``LeafConn``.
"""
from __future__ import annotations

import asyncio
import base64
import os
import struct
import zlib
from typing import Any

from rillet.server.wsframe import (COMPRESS_THRESHOLD, _DEFLATE_TAIL, WSTransport, accept_key, deflate_message,
                                   new_deflater, unmask)

_OP_CONT, _OP_TEXT, _OP_BIN, _OP_CLOSE, _OP_PING, _OP_PONG = 0, 1, 2, 8, 9, 10
_MAX_HEADER = 8192


_RSV1 = 0x40  # a compressed message's first frame (permessage-deflate)
_PMC = "permessage-deflate"
_PMC_REQUEST = f"Sec-WebSocket-Extensions: {_PMC}; server_no_context_takeover; client_no_context_takeover\r\n"


# the most a compressed websocket message from the hub may inflate to (as the client port's websocket caps
# what its clients send: rillet.server.wsframe.MAX_MSG_PAYLOAD_LIMIT)
INFLATED_LIMIT = 64 * 1024 * 1024


class _TooBig(Exception):
    pass


def _frame(op: int, payload: bytes, mask: bool, rsv: int = 0) -> bytes:
    n = len(payload)
    b0 = 0x80 | rsv | op
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

    def __init__(self, inner: Any, host: str, no_masking: bool = False, path: str = "/leafnode",
                 compress: bool = False) -> None:
        self.inner = inner  # the LeafConn
        self.host = host
        self.path = path
        self.want_no_masking = no_masking
        self.want_compress = compress
        self.compress = False  # (negotiated: the hub answered with the extension)
        self._deflater: Any = None
        self._mcomp = False  # the message being assembled is compressed
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
        if self.want_compress:
            req.append(_PMC_REQUEST)
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
        ext = hdrs.get("sec-websocket-extensions")
        if ext:
            if not self.want_compress:
                return "websocket compression was not requested"
            found, no_ctx = _pmc_support(ext)
            if found and not no_ctx:
                return "compression negotiation error"
            self.compress = found
        if self.want_no_masking and hdrs.get("nats-no-masking", "").lower() == "true":
            self.mask = False
        self.inner.server.log.debug(f"Leafnode compression={str(self.compress).lower()} "
                                    f"masking={str(self.mask).lower()}")
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
            comp = b0 & _RSV1
            if b0 & 0x30 or (comp and not (self.compress and op in (_OP_TEXT, _OP_BIN))):
                self._flush(out)
                self._protocol_error("websocket frame with reserved bits set (compression was not negotiated)"
                                     if not self.compress else "websocket frame with invalid reserved bits")
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
                if op != _OP_CONT:
                    self._mcomp = bool(comp)
                try:
                    if b0 & 0x80 and not self._msg:
                        out.append(self._inflate(payload) if self._mcomp else payload)
                    else:
                        self._msg += payload
                        if b0 & 0x80:
                            whole = bytes(self._msg)
                            out.append(self._inflate(whole) if self._mcomp else whole)
                            self._msg.clear()
                except _TooBig:
                    self._flush(out)
                    self._protocol_error(f"websocket compressed message inflates past {INFLATED_LIMIT} bytes")
                    return
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

    @staticmethod
    def _inflate(data: bytes) -> bytes:
        """One compressed message (no context takeover: each inflates on its own), at most
        INFLATED_LIMIT bytes: _TooBig past it (a frame that would inflate without bound)."""
        d = zlib.decompressobj(-15)
        res = d.decompress(data + _DEFLATE_TAIL, INFLATED_LIMIT + 1)
        if len(res) > INFLATED_LIMIT or d.unconsumed_tail:
            raise _TooBig()
        return res + d.flush()

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
            if self.compress and len(data) > COMPRESS_THRESHOLD:
                co = self._deflater
                if co is None:
                    co = self._deflater = new_deflater()
                p = deflate_message(co, data)  # (client_no_context_takeover)
                self.t.write(_frame(_OP_BIN, p, self.mask, _RSV1))
                return
            self.t.write(_frame(_OP_BIN, data, self.mask))

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.t is not None:
            if not self.t.is_closing():
                self.t.write(_frame(_OP_CLOSE, struct.pack("!H", 1000), self.mask))
            self.t.close()



def _pmc_support(value: str) -> tuple[bool, bool]:
    """(permessage-deflate offered, with both server and client no_context_takeover) in an extensions header
    (nats-server's wsPMCExtensionSupport)."""
    for ext in value.split(","):
        params = [p.strip(" \t") for p in ext.split(";")]
        for i, p in enumerate(params):
            if p.lower() == _PMC:
                rest = {q.lower() for q in params[i + 1:]}
                return True, "server_no_context_takeover" in rest and "client_no_context_takeover" in rest
    return False, False
