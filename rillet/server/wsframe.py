"""The WebSocket wire (RFC 6455) as nats-server speaks it: frame headers, masking, close statuses and
payloads, the opening handshake's key and request parsing. Sans-IO; the connections that use it are
``rillet.server.websocket`` (clients) and ``rillet.cluster.leaf_ws`` (leaf nodes over WebSocket)."""
from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from typing import Any

def _load_mask() -> Any:
    """aiohttp's compiled XOR-mask routine, loaded without importing the aiohttp package (slow)."""
    import importlib.machinery
    import importlib.util
    import os
    try:
        spec = importlib.util.find_spec("aiohttp")
        if spec is not None and spec.submodule_search_locations:
            base = os.path.join(list(spec.submodule_search_locations)[0], "_websocket")
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(base, "mask" + suffix)
                if os.path.exists(path):
                    loader = importlib.machinery.ExtensionFileLoader("aiohttp._websocket.mask", path)
                    mspec = importlib.util.spec_from_file_location("aiohttp._websocket.mask", path,
                                                                   loader=loader)
                    if mspec is None:
                        break
                    mod = importlib.util.module_from_spec(mspec)
                    loader.exec_module(mod)
                    return mod._websocket_mask_cython
    except Exception:  # pragma: no cover - unusual installs
        pass
    return None


_mask_inplace = _load_mask()


# opcodes
OP_CONT = 0
OP_TEXT = 1
OP_BINARY = 2
OP_CLOSE = 8
OP_PING = 9
OP_PONG = 10

FIN = 0x80
RSV1 = 0x40
MASK_BIT = 0x80
MAX_CONTROL_PAYLOAD = 125
BROWSER_FRAME_SIZE = 4096  # browsers cope better with small frames
COMPRESS_THRESHOLD = 64  # smaller writes are not worth compressing
MAX_MSG_PAYLOAD_MULTIPLE = 8
MAX_MSG_PAYLOAD_LIMIT = 64 * 1024 * 1024
MAX_REQUEST_HEAD = 64 * 1024

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_NO_STATUS = 1005
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TLS_HANDSHAKE = 1015

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_DEFLATE_TAIL = b"\x00\x00\xff\xff"


def deflate_message(co: Any, data: bytes) -> bytes:
    """``data`` as one permessage-deflate message from compressor ``co`` (``new_deflater``): a full flush ends
    the message and forgets the history, so each inflates on its own (no context takeover) without the cost
    of a new compressor per message; the flush's empty block tail is left off, as the extension says."""
    p = co.compress(data) + co.flush(zlib.Z_FULL_FLUSH)
    return p[:-4] if p.endswith(_DEFLATE_TAIL) else p


def new_deflater() -> Any:
    return zlib.compressobj(1, zlib.DEFLATED, -15)
_PMC_RESPONSE = ("Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; "
                 "client_no_context_takeover\r\n")
_NO_MASKING_HEADER = "nats-no-masking"
_LEAF_PATH = "/leafnode"
_MQTT_PATH = "/mqtt"
_HTTP_REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
                 431: "Request Header Fields Too Large"}
_FORBIDDEN_HEADERS = ("host", "content-length", "connection", "upgrade", "nats-no-masking")

_H16 = struct.Struct("!BBH")
_H64 = struct.Struct("!BBQ")
_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")

# Close status for each close reason (the nats-server ClosedState names rillet uses).
_POLICY = ("Authentication Timeout", "Authentication Failure", "Authorization Violation",
           "Slow Consumer (Pending Bytes)", "Slow Consumer (Write Deadline)", "Maximum Account Connections Exceeded",
           "Maximum Connections Exceeded", "Maximum Control Line Exceeded", "Maximum Subscriptions Exceeded",
           "Missing Account", "Authentication Expired", "Credentials Revoked")
_CLOSE_STATUS: dict[str, int] = {"Client Closed": CLOSE_NORMAL}
_CLOSE_STATUS.update((r, CLOSE_POLICY_VIOLATION) for r in _POLICY)
_CLOSE_STATUS.update((r, CLOSE_PROTOCOL_ERROR) for r in ("Parse Error", "Protocol Violation",
                                                         "Bad Client Protocol Version"))
_CLOSE_STATUS.update((r, CLOSE_GOING_AWAY) for r in ("Write Error", "Read Error", "Stale Connection",
                                                     "Server Shutdown"))
_CLOSE_STATUS["TLS Handshake Failure"] = CLOSE_TLS_HANDSHAKE
_CLOSE_STATUS["Maximum Message Payload Exceeded"] = CLOSE_MESSAGE_TOO_BIG
_CLOSE_STATUS["Maximum Payload Exceeded"] = CLOSE_MESSAGE_TOO_BIG


def close_status_for(reason: str) -> int:
    """The close-frame status code nats-server sends when it closes a connection for ``reason``."""
    return _CLOSE_STATUS.get(reason, CLOSE_INTERNAL_ERROR)


def accept_key(key: str | bytes) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key."""
    if isinstance(key, str):
        key = key.encode()
    return base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()


def frame_header(opcode_bits: int, length: int) -> bytes:
    """A server (unmasked) frame header; ``opcode_bits`` holds FIN/RSV1 and the opcode."""
    if length <= 125:
        return bytes((opcode_bits, length))
    if length < 65536:
        return _H16.pack(opcode_bits, 126, length)
    return _H64.pack(opcode_bits, 127, length)


def encode_frame(opcode: int, payload: bytes, fin: bool = True, rsv1: bool = False) -> bytes:
    b0 = opcode | (FIN if fin else 0) | (RSV1 if rsv1 else 0)
    return frame_header(b0, len(payload)) + payload


def close_payload(status: int, body: str = "") -> bytes:
    """Status code + reason text, truncated with "..." to fit in a control frame."""
    b = body.encode("utf-8", "replace")
    if len(b) > MAX_CONTROL_PAYLOAD - 2:
        b = b[:MAX_CONTROL_PAYLOAD - 5] + b"..."
    return _U16.pack(status) + b


def _valid_close_status(code: int) -> bool:
    if code in (CLOSE_NO_STATUS, 1004, 1006, CLOSE_TLS_HANDSHAKE):
        return False
    if code < 1000 or code >= 5000:
        return False
    return not (1016 <= code <= 2999)


def unmask(mask: bytes, data: bytes | memoryview, offset: int = 0) -> bytes | bytearray:
    """XOR ``data`` with the 4-byte ``mask`` starting at mask position ``offset``."""
    if offset:
        mask = mask[offset:] + mask[:offset]
    buf = bytearray(data)
    if _mask_inplace is not None:
        _mask_inplace(mask, buf)
        return buf
    n = len(buf)  # pragma: no cover - fallback
    if not n:
        return buf
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(buf, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


class WebsocketError(Exception):
    """A frame-level protocol error: a close frame 1002 with this text goes to the peer."""


# ---- HTTP helpers -------------------------------------------------------------------------------------


def _split_host_port(hostport: str, tls: bool) -> tuple[str, str]:
    """Host (lower case) and port of "host[:port]", with the scheme's default port (like Go)."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise ValueError(f"address {hostport}: missing ']' in address")
        host = hostport[1:end]
        rest = hostport[end + 1:]
        if not rest:
            return host.lower(), ("443" if tls else "80")
        if not rest.startswith(":"):
            raise ValueError(f"address {hostport}: unexpected characters after ']'")
        return host.lower(), rest[1:]
    if hostport.count(":") > 1:
        raise ValueError(f"address {hostport}: too many colons in address")
    if ":" in hostport:
        host, port = hostport.split(":", 1)
        return host.lower(), port
    return hostport.lower(), ("443" if tls else "80")


def _parse_request_uri(u: str) -> tuple[str, str]:
    """(scheme, host[:port]) of an absolute URL such as an Origin value; ValueError when unusable."""
    if not u or (u[0] != "/" and "://" not in u):
        raise ValueError(f'parse "{u}": invalid URI for request')
    if u[0] == "/":
        return "", ""
    scheme, rest = u.split("://", 1)
    if not scheme or not (scheme[0].isalpha() and all(c.isalnum() or c in "+-." for c in scheme)):
        raise ValueError(f'parse "{u}": missing protocol scheme')
    host = rest
    for sep in ("/", "?", "#"):
        i = host.find(sep)
        if i >= 0:
            host = host[:i]
    if "@" in host:
        host = host.rsplit("@", 1)[1]
    return scheme.lower(), host


def _header_has_token(headers: dict[str, list[str]], name: str, value: str) -> bool:
    value = value.lower()
    for v in headers.get(name, ()):
        for tok in v.split(","):
            if tok.strip(" \t").lower() == value:
                return True
    return False


def _pmc_offered(headers: dict[str, list[str]]) -> bool:
    for v in headers.get("sec-websocket-extensions", ()):
        for ext in v.split(","):
            for p in ext.split(";"):
                if p.strip(" \t").lower() == "permessage-deflate":
                    return True
    return False


def _parse_cookies(headers: dict[str, list[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in headers.get("cookie", ()):
        for part in v.split(";"):
            name, eq, val = part.strip().partition("=")
            if not eq or not name:
                continue
            val = val.strip()
            if len(val) > 1 and val[0] == '"' and val[-1] == '"':
                val = val[1:-1]
            out.setdefault(name, val)
    return out


def _is_ip(s: str) -> bool:
    import ipaddress
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def _peer_str(peer: Any) -> str:
    if not peer:
        return "?"
    host, port = peer[0], peer[1]
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


class WSTransport:
    """The transport side of a websocket connection over the TCP transport ``t`` (None once lost): what a
    client, route or leaf connection reads of it. ``get_extra_info("websocket")`` is the connection."""

    t: Any
    closing: bool

    def abort(self) -> None:
        self.closing = True
        if self.t is not None:
            self.t.abort()

    def is_closing(self) -> bool:
        return self.closing or self.t is None or self.t.is_closing()

    def get_write_buffer_size(self) -> int:
        t = self.t
        return t.get_write_buffer_size() if t is not None else 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "websocket":
            return self
        t = self.t
        return t.get_extra_info(name, default) if t is not None else default


# ---- the client ---------------------------------------------------------------------------------------
