"""The ``websocket {}`` listener: the NATS client protocol carried in WebSocket frames (RFC 6455).

Everything here is a hand-written, sans-allocation-heavy codec on a plain ``asyncio.Protocol``:

* ``WebsocketConnection`` accepts the TCP (or TLS) connection, reads the HTTP upgrade request, checks it
  the way nats-server does (method, Host, Upgrade/Connection tokens, key, version, origin), answers
  ``101 Switching Protocols`` (or an HTTP error), and from then on decodes frames.
* The same object is the *transport* that the connection's ``Client`` writes to: every ``write`` of
  protocol bytes becomes one binary frame (optionally permessage-deflate compressed, or split into 4 KiB
  frames for browsers, as nats-server does). ``close`` sends a close frame whose status is derived from
  the client's close reason.
* Frame payloads go straight to ``Client.data_received`` as they arrive, without waiting for a frame or
  message to complete: one read from the socket is one call into the protocol parser.

``start_websocket(server)`` binds the listener and registers it in ``server.extra_listeners``.
"""
from __future__ import annotations

import asyncio
import base64
import copy
import json
import zlib
from typing import TYPE_CHECKING, Any

from rillet.gocompat.gotime import http_date
from rillet.server.client import Client
from rillet.server.listen import ServedListener, hostport, plain_ip, serve_listener
from rillet.config.options import RANDOM_PORT, WebsocketOptions
from rillet.server.ocsp import gate as ocsp_gate
from rillet.server.tls import make_server_context, pinned_error
from rillet.handles import cancelled
from rillet.server.wsframe import (
    accept_key, BROWSER_FRAME_SIZE, CLOSE_INVALID_PAYLOAD, CLOSE_NO_STATUS, close_payload, CLOSE_PROTOCOL_ERROR,
    close_status_for, COMPRESS_THRESHOLD, _DEFLATE_TAIL, deflate_message, encode_frame, FIN, _FORBIDDEN_HEADERS, frame_header, _H16,
    _H64, _header_has_token, _HTTP_REASONS, _is_ip, _LEAF_PATH, MASK_BIT, _mask_inplace, MAX_CONTROL_PAYLOAD,
    MAX_MSG_PAYLOAD_LIMIT, MAX_MSG_PAYLOAD_MULTIPLE, MAX_REQUEST_HEAD, _MQTT_PATH, _NO_MASKING_HEADER, OP_BINARY,
    OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, _parse_cookies, _parse_request_uri, _peer_str, _pmc_offered,
    _PMC_RESPONSE, RSV1, _split_host_port, _U16, _U64, new_deflater, unmask, _valid_close_status, WebsocketError, WSTransport,
)

if TYPE_CHECKING:
    from rillet.server.auth import Authenticator
    from rillet.server.server import Server

__all__ = ["start_websocket", "WebsocketListener", "WebsocketConnection", "WSClient", "accept_key",
           "encode_frame", "close_status_for"]


def _peer_cfg(tls: Any) -> Any:
    """The websocket tls block's ocsp_peer (read per connection, so a reload applies to the next ones)."""
    return tls.ocsp_peer if tls is not None else None


class WSClient(Client):
    """A client connection that arrived over WebSocket (conn_type WEBSOCKET)."""

    def __init__(self, server: "Server", conn: "WebsocketConnection") -> None:
        super().__init__(server, conn_type="WEBSOCKET")
        self.ws = conn
        lst = conn.listener
        self._ws_auth = lst.auth_override_for(server)
        if self._ws_auth is not None:
            self.auth = self._ws_auth
        wo = server.opts.websocket
        pi = wo.extra.get("ping_interval") if wo.extra else None
        self._ws_ping = float(pi) if isinstance(pi, (int, float)) and pi > 0 else 0.0

    def start(self) -> None:
        super().start()
        loop = self.server.loop
        wo = self.server.opts.websocket
        if self._auth_timer is not None and wo.auth_timeout > 0:
            self._auth_timer.cancel()
            self._auth_timer = loop.call_later(wo.auth_timeout, self._auth_timeout)
        if self._ws_ping and self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = loop.call_later(self._ws_ping, self._ping_tick)

    def _ping_tick(self) -> None:
        super()._ping_tick()
        if self._ws_ping and self._ping_timer is not None and not self.closed:
            self._ping_timer.cancel()
            self._ping_timer = self.server.loop.call_later(self._ws_ping, self._ping_tick)

    def proto_connect(self, arg: bytes) -> None:
        cookies = self.ws.cookie_creds
        if cookies:
            try:
                d = json.loads(arg)
            except ValueError:
                d = None
            if isinstance(d, dict):
                changed = False
                for key, val in cookies.items():
                    if val and not d.get(key):
                        d[key] = val
                        changed = True
                if changed:
                    arg = json.dumps(d, separators=(",", ":")).encode()
        super().proto_connect(arg)

    # -- INFO -------------------------------------------------------------------------------------------

    def refresh_auth(self) -> None:
        """After a reload: the websocket override built from the new options, else the server's."""
        self._ws_auth = self.ws.listener.auth_override_for(self.server)
        self.auth = self._ws_auth if self._ws_auth is not None else self.server.authenticator

    def adjust_info(self, info: dict) -> None:
        """INFO as a websocket client sees it (called by ``Server.info_for``)."""
        lst = self.ws.listener
        info["host"] = lst.host
        if lst.addr is not None:
            info["port"] = lst.addr[1]
        info.pop("tls_verify", None)
        if lst.tls:
            info["tls_required"] = True
            info["tls_available"] = True
        else:
            info.pop("tls_required", None)
            info.pop("tls_available", None)
        if self._ws_auth is not None and self._ws_auth.required:
            info["auth_required"] = True
        # websocket clients get the cluster's websocket URLs (advertise included) as connect_urls; a
        # server on its own sends none, even with an advertise address (as nats-server)
        info.pop("connect_urls", None)

    def log_prefix(self) -> str:
        ip = self.ws.client_ip
        if ip:
            if ":" in ip:
                ip = f"[{ip}]"
            return f"{ip}/{_peer_str((self.host, self.port))} - wid:{self.cid}"
        return f"{_peer_str((self.host, self.port))} - wid:{self.cid}"


# ---- the connection -----------------------------------------------------------------------------------


class WebsocketConnection(WSTransport, asyncio.Protocol):
    """One accepted connection: HTTP upgrade, then frames. Also the transport its ``WSClient`` writes to."""

    def __init__(self, listener: "WebsocketListener") -> None:
        self.listener = listener
        self.server = listener.server
        self.t: asyncio.Transport | None = None  # the socket (or TLS) transport
        self.client: WSClient | None = None
        self.peer: Any = None
        self._hbuf = bytearray()
        self._htimer: asyncio.TimerHandle | None = None
        self.upgraded = False
        self.closing = False
        self.close_sent = False
        self._close_payload: bytes | None = None  # what the close frame carries, when not from the reason
        # negotiated
        self.compress = False
        self.browser = False
        self.nocompfrag = False
        self.mask_read = True
        self.client_ip = ""
        self.cookie_creds: dict[str, str] = {}
        # frame decoder state
        self._hdr = b""  # partial frame header
        self._rem = 0  # payload bytes left in the current frame
        self._in_frame = False
        self._ctl = 0  # opcode of the control frame being read (0 = data frame)
        self._ctlbuf = b""
        self._mkey = b""
        self._mpos = 0
        self._ff = True  # the previous data frame was final: the next data frame starts a message
        self._fc = False  # the current message is compressed
        self._csz = 0  # compressed bytes of the current message
        self._dsz = 0  # decompressed bytes of the current message
        self._inflater: Any = None
        self._deflater: Any = None

    # ---- asyncio.Protocol (socket side) --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        self.t = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        # an IPv4 client of the dual-stack listener is shown as nats-server shows it (1.2.3.4, not ::ffff:1.2.3.4)
        self.peer = (plain_ip(peer[0]), peer[1]) if peer else peer
        wtls = self.server.opts.websocket.tls
        if wtls is not None and wtls.pinned_certs:
            refused = pinned_error(transport.get_extra_info("ssl_object"), wtls.pinned_certs)
            if refused is not None:  # pinned_certs of the websocket tls {} block
                where = f"{self.peer[0]}:{self.peer[1]}" if self.peer else "?"
                self.server.log.debug(f"{where} - {refused[1]}")
                self.server.log.error(f"{where} - TLS handshake error: {refused[0]}")
                transport.abort()
                return
        lst = self.listener
        lst.pending.add(self)
        to = self.server.opts.websocket.handshake_timeout
        if to and to > 0:
            self._htimer = self.server.loop.call_later(to, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        if self.upgraded:
            self._frames(data)
        elif not self.closing:
            self._handshake_data(data)

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.listener.pending.discard(self)
        self._stop_handshake_timer()
        c = self.client
        if c is not None:
            c.connection_lost(exc)

    def pause_writing(self) -> None:
        c = self.client
        if c is not None:
            c.pause_writing()

    def resume_writing(self) -> None:
        c = self.client
        if c is not None:
            c.resume_writing()

    # ---- transport API (what the Client sees) --------------------------------------------------------

    def write(self, data: bytes) -> None:
        t = self.t
        if self.closing or t is None:
            return
        n = len(data)
        if not n:
            return
        if self.compress and n > COMPRESS_THRESHOLD:
            self._write_compressed(data)
            return
        if self.browser and n > BROWSER_FRAME_SIZE:
            mv = memoryview(data)
            parts = []
            for i in range(0, n, BROWSER_FRAME_SIZE):
                chunk = mv[i:i + BROWSER_FRAME_SIZE]
                parts.append(frame_header(0x82, len(chunk)))
                parts.append(chunk)
            t.write(b"".join(parts))
            return
        if n <= 125:
            t.write(bytes((0x82, n)) + data)
        elif n < 65536:
            t.write(_H16.pack(0x82, 126, n) + data)
        else:
            t.writelines((_H64.pack(0x82, 127, n), data))

    def _write_compressed(self, data: bytes) -> None:
        co = self._deflater
        if co is None:
            co = self._deflater = new_deflater()
        p = deflate_message(co, data)  # (server_no_context_takeover)
        t = self.t
        assert t is not None
        mfs = BROWSER_FRAME_SIZE if self.browser and not self.nocompfrag else 0
        if mfs and len(p) > mfs:
            mv = memoryview(p)
            parts = []
            first = True
            n = len(p)
            for i in range(0, n, mfs):
                chunk = mv[i:i + mfs]
                b0 = (OP_BINARY | RSV1) if first else OP_CONT
                if i + mfs >= n:
                    b0 |= FIN
                parts.append(frame_header(b0, len(chunk)))
                parts.append(chunk)
                first = False
            t.write(b"".join(parts))
            return
        t.write(frame_header(0x80 | RSV1 | OP_BINARY, len(p)) + p)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def close(self) -> None:
        """Close from the server side: a close frame (status from the client's close reason), then FIN."""
        if self.closing:
            return
        self.closing = True
        t = self.t
        if t is None:
            return
        if self.upgraded and not self.close_sent:
            payload = self._close_payload
            if payload is None:
                reason = self.client.close_reason if self.client is not None else ""
                reason = reason or "Server Shutdown"
                payload = close_payload(close_status_for(reason), reason)
            self.close_sent = True
            try:
                t.write(encode_frame(OP_CLOSE, payload))
            except Exception:  # pragma: no cover - transport already broken
                pass
        t.close()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self.t is not None:
            self.t.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        if self.t is not None:
            self.t.pause_reading()

    def resume_reading(self) -> None:
        if self.t is not None:
            self.t.resume_reading()

    def can_write_eof(self) -> bool:
        return False

    # ---- the upgrade ---------------------------------------------------------------------------------

    def _stop_handshake_timer(self) -> None:
        self._htimer = cancelled(self._htimer)

    def _handshake_timeout(self) -> None:
        self._htimer = None
        if not self.upgraded and not self.closing:
            self.closing = True
            if self.t is not None:
                self.t.abort()

    def _raw_http_error(self, status_line: str) -> None:
        """An error from the HTTP layer itself (malformed request): like Go's net/http, then close."""
        body = f"{status_line}"
        resp = (f"HTTP/1.1 {status_line}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Connection: close\r\n\r\n{body}")
        self._send_and_close(resp.encode("latin-1", "replace"))

    def _handshake_error(self, version: str, status: int, reason: str) -> None:
        self.server.log.error(f"{_peer_str(self.peer)} - websocket handshake error: {reason}")
        text = _HTTP_REASONS.get(status, "Error")
        body = text + "\n"
        resp = (f"{version} {status} {text}\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n"
                "Sec-Websocket-Version: 13\r\n"
                "X-Content-Type-Options: nosniff\r\n"
                f"Date: {http_date()}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}")
        self._send_and_close(resp.encode())

    def _send_and_close(self, data: bytes) -> None:
        self.closing = True
        self._stop_handshake_timer()
        t = self.t
        if t is not None:
            t.write(data)
            t.close()

    def _handshake_data(self, data: bytes) -> None:
        buf = self._hbuf
        start = max(len(buf) - 3, 0)
        buf += data
        end = buf.find(b"\r\n\r\n", start)
        sep = 4
        if end < 0:
            end = buf.find(b"\n\n", max(start - 1, 0))
            sep = 2
        if end < 0:
            if len(buf) > MAX_REQUEST_HEAD:
                self._raw_http_error("431 Request Header Fields Too Large")
            return
        head = bytes(buf[:end])
        rest = bytes(buf[end + sep:])
        self._hbuf = bytearray()
        try:
            text = head.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes anything
            self._raw_http_error("400 Bad Request")
            return
        lines = text.replace("\r\n", "\n").split("\n")
        while lines and not lines[0]:
            lines.pop(0)  # Go tolerates leading blank lines
        if not lines:
            self._raw_http_error("400 Bad Request")
            return
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._raw_http_error("400 Bad Request")
            return
        method, target, version = parts
        if version not in ("HTTP/1.0", "HTTP/1.1") or not method or not target:
            self._raw_http_error("400 Bad Request")
            return
        headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            if not line:
                continue
            if line[0] in " \t":
                self._raw_http_error("400 Bad Request")
                return
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                self._raw_http_error("400 Bad Request")
                return
            headers.setdefault(name.lower(), []).append(value.strip(" \t"))
        host = headers.get("host", [""])[0]
        if target.startswith(("http://", "https://")):
            _, rest_target = target.split("://", 1)
            slash = rest_target.find("/")
            url_host = rest_target if slash < 0 else rest_target[:slash]
            target = "/" if slash < 0 else rest_target[slash:]
            if url_host:
                host = url_host
        elif version == "HTTP/1.1" and "host" not in headers:
            self._raw_http_error("400 Bad Request: missing required Host header")
            return
        path = target.split("?", 1)[0]
        self._upgrade(method, path, version, host, headers, rest)

    def _upgrade(self, method: str, path: str, version: str, host: str, headers: dict[str, list[str]],
                 rest: bytes) -> None:
        lst = self.listener
        srv = self.server
        opts = srv.opts
        wo = opts.websocket
        kind = "CLIENT"
        if path.endswith(_LEAF_PATH):
            kind = "LEAF"
        elif path.endswith(_MQTT_PATH):
            kind = "MQTT"
        if kind == "MQTT" and getattr(srv, "mqtt", None) is None:
            # (as nats-server: only with an mqtt {} port)
            self._handshake_error(version, 404, "mqtt websocket endpoint not enabled")
            return
        if method != "GET":
            self._handshake_error(version, 405, "request method must be GET")
            return
        if not host:
            self._handshake_error(version, 400, "'Host' missing in request")
            return
        if not _header_has_token(headers, "upgrade", "websocket"):
            self._handshake_error(version, 400, "invalid value for header 'Upgrade'")
            return
        if not _header_has_token(headers, "connection", "upgrade"):
            self._handshake_error(version, 400, "invalid value for header 'Connection'")
            return
        key = headers.get("sec-websocket-key", [""])[0]
        if not key:
            self._handshake_error(version, 400, "key missing")
            return
        try:
            decoded = base64.b64decode(key, validate=True)
        except ValueError:
            decoded = b""
        if len(decoded) != 16:
            self._handshake_error(version, 400, "invalid websocket key")
            return
        if not _header_has_token(headers, "sec-websocket-version", "13"):
            self._handshake_error(version, 400, "invalid version")
            return
        err = lst.check_origin(headers, host)
        if err:
            self._handshake_error(version, 403, f"origin not allowed: {err}")
            return
        compress = wo.compression and _pmc_offered(headers)
        no_masking = headers.get(_NO_MASKING_HEADER, [""])[0] == "true"
        if rest:
            self.server.log.error(f"{_peer_str(self.peer)} - websocket handshake error: "
                                  "client sent data before handshake is complete")
            self.closing = True
            if self.t is not None:
                self.t.close()
            return
        resp = ["HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Accept: ", accept_key(key), "\r\n"]
        if compress:
            resp.append(_PMC_RESPONSE)
        if no_masking:
            resp.append("Nats-No-Masking: true\r\n")
        if kind == "MQTT":
            resp.append("Sec-Websocket-Protocol: mqtt\r\n")
        resp.append(lst.raw_headers)
        resp.append("\r\n")
        t = self.t
        assert t is not None
        t.write("".join(resp).encode("latin-1", "replace"))
        self._stop_handshake_timer()
        lst.pending.discard(self)
        self.upgraded = True
        self.compress = compress
        self.mask_read = not no_masking
        if kind == "LEAF":
            ln = getattr(srv, "leafnodes", None)
            if ln is None or not ln.opts.port:
                srv.log.error("Not configured to accept leaf node connections")
                self.closing = True
                t.close()
                return
            lc = ln.accept_conn()  # a leaf connection over websocket (hub side)
            self.client = lc  # type: ignore[assignment]
            lc.connection_made(self)
            return
        if kind == "MQTT":  # an MQTT connection over this websocket (rillet.mqtt; conn type MQTT_WS)
            mc = srv.mqtt.ws_conn()
            self.client = mc  # type: ignore[assignment]
            mc.connection_made(self)
            return
        xff = headers.get("x-forwarded-for")
        if xff:
            cip = xff[0].strip()
            if _is_ip(cip):
                self.client_ip = cip
        ua = headers.get("user-agent", [""])[0]
        if ua.startswith("Mozilla/"):
            self.browser = True
            self.nocompfrag = compress and "Version/" in ua and "Safari/" in ua
        if "cookie" in headers:
            cookies = _parse_cookies(headers)
            names = ((wo.jwt_cookie, "jwt"), (wo.extra.get("user_cookie", ""), "user"),
                     (wo.extra.get("pass_cookie", ""), "pass"), (wo.extra.get("token_cookie", ""), "auth_token"))
            for cname, field in names:
                if cname and cname in cookies:
                    self.cookie_creds[field] = cookies[cname]
        c = WSClient(srv, self)
        self.client = c
        c.connection_made(self)

    # ---- frames --------------------------------------------------------------------------------------

    def _frames(self, data: bytes) -> None:
        c = self.client
        if c is None or self.closing:
            return
        if self._hdr:
            data = self._hdr + data
            self._hdr = b""
        out: list[Any] = []
        try:
            self._decode(data, out)
        except WebsocketError as e:
            self._flush_in(out)
            self._protocol_error(str(e))
            return
        except _PayloadTooBig:
            self._flush_in(out)
            self._read_error("maximum payload exceeded")
            return
        except zlib.error as e:
            self._flush_in(out)
            self._read_error(f"flate: {e}")
            return
        except _PeerClosed as pc:
            self._flush_in(out)
            self._peer_closed(pc.reply)
            return
        self._flush_in(out)

    def _flush_in(self, out: list) -> None:
        if not out:
            return
        c = self.client
        if c is None or c.closed:
            return
        c.data_received(out[0] if len(out) == 1 and type(out[0]) is bytes else b"".join(out))

    def _decode(self, data: bytes, out: list) -> None:
        n = len(data)
        pos = 0
        mask_read = self.mask_read
        mask_fn = _mask_inplace
        append = out.append
        while pos < n:
            if not self._in_frame:
                avail = n - pos
                # fast path: a whole masked, final, uncompressed binary frame that starts a message
                if avail > 6 and data[pos] == 0x82 and self._ff and mask_fn is not None:
                    b1 = data[pos + 1]
                    ln = b1 & 0x7F
                    if b1 & 0x80 and ln < 127:
                        if ln == 126:
                            if avail < 8:
                                self._hdr = data[pos:]
                                return
                            ln = (data[pos + 2] << 8) | data[pos + 3]
                            p = pos + 4
                        else:
                            p = pos + 2
                        end = p + 4 + ln
                        if end <= n:
                            buf = bytearray(data[p + 4:end])
                            mask_fn(data[p:p + 4], buf)
                            append(buf)
                            pos = end
                            continue
                if avail < 2:
                    self._hdr = data[pos:]
                    return
                b0 = data[pos]
                b1 = data[pos + 1]
                ln = b1 & 0x7F
                masked = b1 & MASK_BIT
                hlen = 2 + (2 if ln == 126 else 8 if ln == 127 else 0) + (4 if masked else 0)
                if avail < hlen:
                    self._hdr = data[pos:]
                    return
                op = b0 & 0x0F
                final = b0 & FIN
                compressed = b0 & RSV1
                if b0 & 0x30:
                    raise WebsocketError("RSV2 and RSV3 must be clear")
                if compressed and not self.compress:
                    raise WebsocketError("compressed frame received without negotiated permessage-deflate")
                if mask_read and not masked:
                    raise WebsocketError("mask bit missing")
                if op >= OP_CLOSE:
                    if op > OP_PONG:
                        raise WebsocketError(f"unknown opcode {op}")
                    if ln > MAX_CONTROL_PAYLOAD:
                        raise WebsocketError(f"control frame length bigger than maximum allowed of "
                                             f"{MAX_CONTROL_PAYLOAD} bytes")
                    if not final:
                        raise WebsocketError("control frame does not have final bit set")
                    if compressed:
                        raise WebsocketError("control frame must not be compressed")
                elif op == OP_TEXT or op == OP_BINARY:
                    if not self._ff:
                        raise WebsocketError("new message started before final frame for previous "
                                             "message was received")
                    self._ff = bool(final)
                    self._fc = bool(compressed)
                elif op == OP_CONT:
                    if self._ff or compressed:
                        raise WebsocketError("invalid continuation frame")
                    self._ff = bool(final)
                else:
                    raise WebsocketError(f"unknown opcode {op}")
                p = pos + 2
                if ln == 126:
                    ln = _U16.unpack_from(data, p)[0]
                    p += 2
                elif ln == 127:
                    ln = _U64.unpack_from(data, p)[0]
                    if ln & (1 << 63):
                        raise WebsocketError("invalid 64-bit payload length")
                    p += 8
                if masked:
                    self._mkey = data[p:p + 4]
                    p += 4
                self._mpos = 0
                pos = p
                self._rem = ln
                self._in_frame = True
                if op >= OP_CLOSE:
                    self._ctl = op
                    self._ctlbuf = b""
                else:
                    self._ctl = 0
                if ln == 0:
                    self._in_frame = False
                    self._end_frame(out)
                continue
            take = self._rem
            if take > n - pos:
                take = n - pos
            chunk = data[pos:pos + take] if (pos or take != n) else data
            pos += take
            self._rem -= take
            mk = self._mkey
            if mk:
                chunk = unmask(mk, chunk, self._mpos)
                self._mpos = (self._mpos + take) & 3
            if self._ctl:
                self._ctlbuf += bytes(chunk)
            elif self._fc:
                self._inflate(chunk, out)
            else:
                out.append(chunk)
            if self._rem == 0:
                self._in_frame = False
                self._end_frame(out)

    def _end_frame(self, out: list) -> None:
        ctl = self._ctl
        if ctl:
            self._ctl = 0
            payload = self._ctlbuf
            self._ctlbuf = b""
            self._mkey = b""
            self._control(ctl, payload, out)
            return
        self._mkey = b""
        if self._fc and self._ff:
            self._inflate(_DEFLATE_TAIL, out, final=True)
            self._fc = False
            self._csz = 0
            self._dsz = 0

    def _inflate(self, chunk: Any, out: list, final: bool = False) -> None:
        mpay = self.server.opts.max_payload
        if mpay <= 0:
            mpay = 1024 * 1024
        if not final:
            limit = min(mpay * MAX_MSG_PAYLOAD_MULTIPLE, MAX_MSG_PAYLOAD_LIMIT)
            self._csz += len(chunk)
            if self._csz > limit:
                raise _PayloadTooBig()
        d = self._inflater
        if d is None or d.eof:
            d = self._inflater = zlib.decompressobj(-15)
        room = mpay - self._dsz + 1
        res = d.decompress(chunk, room)
        self._dsz += len(res)
        if self._dsz > mpay or d.unconsumed_tail:
            raise _PayloadTooBig()
        if res:
            out.append(res)

    def _control(self, op: int, payload: bytes, out: list) -> None:
        t = self.t
        if op == OP_PING:
            if t is not None and not self.closing:
                t.write(encode_frame(OP_PONG, payload))
            return
        if op == OP_PONG:
            return
        # close
        status = CLOSE_NO_STATUS
        body = ""
        if len(payload) == 1:
            raise WebsocketError("close frame payload cannot be 1 byte")
        if len(payload) >= 2:
            status = _U16.unpack_from(payload, 0)[0]
            if not _valid_close_status(status):
                raise WebsocketError(f"invalid close status code {status}")
            if len(payload) > 2:
                try:
                    body = payload[2:].decode("utf-8")
                except UnicodeDecodeError:
                    status = CLOSE_INVALID_PAYLOAD
                    body = "invalid utf8 body in close frame"
        reply = b"" if status == CLOSE_NO_STATUS else close_payload(status, body)
        raise _PeerClosed(reply)

    def _peer_closed(self, reply: bytes) -> None:
        """The peer sent a close frame: echo its status (after any pending data), close as Client Closed."""
        self._close_payload = reply
        c = self.client
        if c is not None and not c.closed:
            c.close("Client Closed")
        else:
            self.close()

    def _protocol_error(self, msg: str) -> None:
        self._close_payload = close_payload(CLOSE_PROTOCOL_ERROR, msg)
        self._read_error(msg)

    def _read_error(self, msg: str) -> None:
        c = self.client
        if c is not None and not c.closed:
            self.server.log.error(f"{c.log_prefix()} - read error: {msg}")
            c.close("Read Error")
        else:
            self.close()


class _PayloadTooBig(Exception):
    pass


class _PeerClosed(Exception):
    def __init__(self, reply: bytes) -> None:
        super().__init__("peer closed")
        self.reply = reply


# ---- the listener -------------------------------------------------------------------------------------


class WebsocketListener(ServedListener):
    """The websocket listener registered in ``server.extra_listeners``."""

    is_websocket = True

    def __init__(self, server: "Server") -> None:
        self.server = server
        wo = server.opts.websocket
        self.host = wo.host or "0.0.0.0"
        self.tls = wo.tls is not None
        self.addr: tuple[str, int] | None = None
        self.pending: set[WebsocketConnection] = set()
        self._srv: asyncio.AbstractServer | None = None
        self._auth_cache: tuple[Any, Any, Any] | None = None
        self.raw_headers = ""
        self.same_origin = False
        self.allowed_origins: dict[str, list[tuple[str, str]]] = {}
        self.configure(wo)

    def configure(self, wo: WebsocketOptions) -> None:
        """Origins and response headers (kept apart so that a reload could call it again)."""
        self.same_origin = wo.same_origin
        origins: dict[str, list[tuple[str, str]]] = {}
        for ao in wo.allowed_origins or ():
            try:
                scheme, hostport = _parse_request_uri(ao)
                h, p = _split_host_port(hostport, scheme == "https")
            except ValueError as e:
                self.server.log.error(f"error parsing allowed origin: {e}")
                continue
            origins.setdefault(h, []).append((scheme, p))
        self.allowed_origins = origins
        self.raw_headers = "".join(f"{k}: {v}\r\n" for k, v in (wo.headers or {}).items())

    def check_origin(self, headers: dict[str, list[str]], req_host: str) -> str:
        """"" when the request's Origin is acceptable, else the reason it is not."""
        if not self.same_origin and not self.allowed_origins:
            return ""
        origin = headers.get("origin", [""])[0] or headers.get("sec-websocket-origin", [""])[0]
        if not origin:
            return ""
        try:
            scheme, hostport = _parse_request_uri(origin)
            oh, op = _split_host_port(hostport, scheme == "https")
        except ValueError as e:
            return str(e)
        if self.same_origin:
            try:
                rh, rp = _split_host_port(req_host, self.tls)
            except ValueError as e:
                return str(e)
            if oh != rh or op != rp or scheme != ("https" if self.tls else "http"):
                return "not same origin"
        if self.allowed_origins:
            for s, p in self.allowed_origins.get(oh, ()):
                if s == scheme and p == op:
                    return ""
            return "not in the allowed list"
        return ""

    def auth_override_for(self, server: "Server") -> "Authenticator | None":
        """The authenticator websocket clients use when ``websocket {}`` overrides auth, else None."""
        wo = server.opts.websocket
        if not (wo.username or wo.token or wo.no_auth_user):
            return None
        base = server.authenticator
        cache = self._auth_cache
        if cache is not None and cache[0] is base and cache[1] is wo:
            return cache[2]
        from rillet.server.auth import Authenticator
        o2 = copy.copy(server.opts)
        o2.username = wo.username
        o2.password = wo.password
        o2.authorization = wo.token
        o2.no_auth_user = wo.no_auth_user
        auth = Authenticator(o2)
        self._auth_cache = (base, wo, auth)
        return auth

    async def start(self) -> None:
        srv = self.server
        o = srv.opts
        wo = o.websocket
        ssl_ctx = make_server_context(wo.tls, srv.staples.get("websocket")) if wo.tls is not None else None
        port = 0 if wo.port == RANDOM_PORT else wo.port
        hs_to = wo.handshake_timeout if wo.handshake_timeout and wo.handshake_timeout > 0 else None
        # where nats-server listens: 0.0.0.0 and :: are one dual-stack socket (rillet.server.listen)
        self._srv = await serve_listener(
            srv.loop, self.host, port, "websocket", hostport(self.host, port),
            lambda: ocsp_gate(srv, _peer_cfg(srv.opts.websocket.tls), WebsocketConnection(self)),
            ssl=ssl_ctx, ssl_handshake_timeout=(hs_to if ssl_ctx is not None else None))
        self.addr = (self.host, self._srv.sockets[0].getsockname()[1])
        srv.websocket_addr = self.addr
        proto = "wss" if ssl_ctx is not None else "ws"
        srv.log.notice(f"Listening for websocket clients on {proto}://{self.host}:{self.addr[1]}")
        if ssl_ctx is None:
            srv.log.warn("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")
        srv.extra_listeners.append(self)

    @property
    def url(self) -> str:
        assert self.addr is not None
        host = self.addr[0]
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        return f"{'wss' if self.tls else 'ws'}://{hostport(host, self.addr[1])}"

    async def _close_connections(self) -> None:
        for conn in list(self.pending):
            conn.abort()
        self.pending.clear()


def validate_websocket_options(opts: Any) -> None:
    """nats-server's checks of the websocket {} block; ValueError with its message when one fails."""
    wo = opts.websocket
    if not wo.port:
        return
    if wo.tls is None and not wo.no_tls:
        raise ValueError("websocket requires TLS configuration")
    for ao in wo.allowed_origins or ():
        try:
            scheme, hostport = _parse_request_uri(ao)
        except ValueError as e:
            raise ValueError(f"unable to parse allowed origin: {e}") from None
        if scheme not in ("http", "https"):
            raise ValueError(f'unable to parse allowed origin "{ao}": allowed origins must be absolute URLs '
                             "with http or https scheme")
        if not hostport:
            raise ValueError(f'unable to parse allowed origin "{ao}": host is required')
        try:
            _split_host_port(hostport, scheme == "https")
        except ValueError as e:
            raise ValueError(f"unable to parse allowed origin: {e}") from None
    if wo.no_auth_user:
        names = {u.username for u in opts.users if u.username} | {u.nkey for u in opts.users if u.nkey} \
            | {u.nkey for u in opts.nkeys if u.nkey}
        if not opts.users and not opts.nkeys:
            raise ValueError(f'no_auth_user: "{wo.no_auth_user}" present, but users/nkeys are not defined')
        if wo.no_auth_user not in names:
            raise ValueError(f'no_auth_user: "{wo.no_auth_user}" not present as user or nkey in authorization '
                             "block or account configuration")
    if opts.users or opts.nkeys:
        if wo.username:
            raise ValueError("websocket authentication username not compatible with presence of users/nkeys")
        if wo.token:
            raise ValueError("websocket authentication token not compatible with presence of users/nkeys")
    if wo.jwt_cookie:
        extra = getattr(opts, "extra", {}) or {}
        if not extra.get("operator") and not extra.get("trusted_keys"):
            raise ValueError(f"trusted operators or trusted keys configuration is required for JWT authentication "
                             f'via cookie "{wo.jwt_cookie}"')
    for key in (wo.headers or {}):
        k = key.lower()
        if k in _FORBIDDEN_HEADERS:
            raise ValueError(f'websocket: invalid header "{key}" not allowed')
        if k.startswith("sec-websocket-"):
            raise ValueError(f'websocket: invalid header "{key}", "Sec-WebSocket-" prefix not allowed')


async def start_websocket(server: "Server") -> WebsocketListener:
    """Validate the websocket options, bind the listener, log it, register it with the server."""
    validate_websocket_options(server.opts)
    lst = WebsocketListener(server)
    await lst.start()
    return lst
