"""The PROXY protocol header (HAProxy's v1 text and v2 binary forms) in front of a client connection, read as
nats-server reads it with ``proxy_protocol: true``: sans-IO, fed the connection's first bytes.

``ProxyHeader.feed(data)`` returns None while more bytes are needed, else a ``Found``: ``addr`` the source
``(ip, port)`` the proxy reports (None for a v1 ``UNKNOWN``, a v2 ``LOCAL`` command or an ``UNSPEC`` family:
the connection's own address stays), ``rest`` the bytes after the header, for the protocol parser. Bytes that do
not start a PROXY header at all are handed back whole (``Found(None, data, header=False)``): a client that
connects without a proxy still works. A header that starts as one and is malformed raises ``ProxyProtoError``
with nats-server's reason; the connection is then closed.
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any, NamedTuple

V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"
V1_PREFIX = b"PROXY "
V1_MAX_LINE = 107  # the longest v1 line, its CRLF included
READ_TIMEOUT = 5.0  # seconds a header may take to arrive (nats-server's)

_INVALID = "invalid PROXY protocol header"
_UNSUPPORTED = "unsupported PROXY protocol feature"


class ProxyProtoError(Exception):
    pass


class Found(NamedTuple):
    addr: tuple[str, int] | None
    rest: bytes
    header: bool = True  # False: the bytes did not start a PROXY header (``rest`` is all of them)


class ProxyHeader:
    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> Found | None:
        buf = self.buf = self.buf + data
        head = buf[:6]
        if not (V1_PREFIX.startswith(head) or V2_SIG.startswith(head)):
            return Found(None, buf, header=False)
        if len(buf) < 6:
            return None
        if head == V1_PREFIX:
            return self._v1(buf)
        return self._v2(buf)

    @staticmethod
    def _v1(buf: bytes) -> Found | None:
        end = buf.find(b"\r\n", 0, V1_MAX_LINE)
        if end < 0:
            if len(buf) >= V1_MAX_LINE:
                raise ProxyProtoError(f"{_INVALID}: v1 line too long")
            return None
        parts = buf[6:end].decode("latin-1").split()
        rest = buf[end + 2:]
        if not parts:
            raise ProxyProtoError(f"{_INVALID}: invalid v1 format")
        if parts[0] == "UNKNOWN":
            return Found(None, rest)
        if len(parts) != 5:
            raise ProxyProtoError(f"{_INVALID}: invalid v1 format")
        proto, src, dst, sport, dport = parts
        try:
            src_ip, _ = ipaddress.ip_address(src), ipaddress.ip_address(dst)
        except ValueError:
            raise ProxyProtoError(f"{_INVALID}: invalid address") from None
        port = _port(sport, "source")
        _port(dport, "dest")
        if proto == "TCP4" and (":" in src or ":" in dst):
            raise ProxyProtoError(f"{_INVALID}: TCP4 with IPv6 address")
        if proto == "TCP6" and (":" not in src or ":" not in dst):
            raise ProxyProtoError(f"{_INVALID}: TCP6 with IPv4 address")
        if proto not in ("TCP4", "TCP6"):
            raise ProxyProtoError(f"{_INVALID}: invalid protocol {proto}")
        return Found((_plain(src_ip), port), rest)

    @staticmethod
    def _v2(buf: bytes) -> Found | None:
        if len(buf) < 16:
            return None
        if buf[:12] != V2_SIG:
            raise ProxyProtoError(f"{_INVALID}: invalid signature")
        ver_cmd, fam_proto = buf[12], buf[13]
        n = int.from_bytes(buf[14:16], "big")
        if ver_cmd & 0xF0 != 0x20:
            raise ProxyProtoError(f"{_INVALID}: invalid version 0x{ver_cmd & 0xF0:02x}")
        if len(buf) < 16 + n:
            return None
        data, rest = buf[16:16 + n], buf[16 + n:]
        cmd = ver_cmd & 0x0F
        if cmd == 0x00:  # LOCAL: a health check of the proxy's own
            return Found(None, rest)
        if cmd != 0x01:
            raise ProxyProtoError(f"unknown PROXY protocol command: 0x{cmd:02x}")
        if fam_proto & 0x0F != 0x01:
            raise ProxyProtoError(f"{_UNSUPPORTED}: only STREAM protocol supported")
        family = fam_proto & 0xF0
        if family == 0x10:
            if n < 12:
                raise ProxyProtoError(f"IPv4 address data too short: {n} bytes")
            ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address(data[0:4])
            return Found((str(ip), int.from_bytes(data[8:10], "big")), rest)
        if family == 0x20:
            if n < 36:
                raise ProxyProtoError(f"IPv6 address data too short: {n} bytes")
            ip = ipaddress.IPv6Address(data[0:16])
            return Found((_plain(ip), int.from_bytes(data[32:34], "big")), rest)
        if family == 0x00:
            return Found(None, rest)
        raise ProxyProtoError(f"{_UNSUPPORTED}: unsupported address family 0x{family:02x}")


def _port(text: str, which: str) -> int:
    if not text.isdigit() or int(text) > 0xFFFF:
        raise ProxyProtoError(f'invalid {which} port: strconv.ParseUint: parsing "{text}": '
                              + ("value out of range" if text.isdigit() else "invalid syntax"))
    return int(text)


def _plain(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Go's net.IP String(): an IPv4-mapped IPv6 address is written as IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


MAX_PEEK = 16 + 0xFFFF  # the longest v2 header
_REPEEK = 0.005  # seconds between looks while a header is incomplete (peeked bytes keep the socket readable)


async def take_header(loop: Any, sock: socket.socket, timeout: float = READ_TIMEOUT) -> Found:
    """Read a PROXY header straight off ``sock`` (a duplicate of a connection's socket whose transport is not
    reading): the bytes are peeked, and only the header's are consumed, so what follows it (a TLS handshake)
    stays in the kernel for the TLS layer, as nats-server reads the header before TLS. ``Found(header=False)``
    when the first bytes are not a PROXY header (nothing consumed). ProxyProtoError for a malformed one,
    TimeoutError when it is not complete within ``timeout``, ConnectionError on EOF."""
    fut = loop.create_future()
    fd = sock.fileno()
    timer = None

    def look() -> None:
        nonlocal timer
        timer = None
        if fut.done():
            return
        try:
            data = sock.recv(MAX_PEEK, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            fut.set_exception(e)
            return
        if not data:
            fut.set_exception(ConnectionError("EOF before the PROXY header"))
            return
        try:
            found = ProxyHeader().feed(data)
        except ProxyProtoError as e:
            fut.set_exception(e)
            return
        if found is None:  # incomplete: look again shortly (the peeked bytes keep the socket readable)
            loop.remove_reader(fd)
            timer = loop.call_later(_REPEEK, watch)
            return
        if found.header:
            sock.recv(len(data) - len(found.rest))  # (exactly the header's bytes)
        fut.set_result(found)

    def watch() -> None:
        loop.add_reader(fd, look)

    watch()
    try:
        return await asyncio.wait_for(fut, timeout)
    finally:
        loop.remove_reader(fd)
        if timer is not None:
            timer.cancel()
