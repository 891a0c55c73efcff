"""Listening sockets for the client, monitoring and WebSocket ports, bound where nats-server binds.

nats-server listens through Go's ``net.Listen``: a wildcard host (``0.0.0.0``, ``::`` or empty) gets one
dual-stack socket (IPv6, ``IPV6_V6ONLY`` off, bound to ``::``) that accepts IPv4 and IPv6 clients alike; a
named address listens on that address only (IPv4 stays IPv4, ``::1`` stays IPv6), and a host name listens on
its first IPv4 address, or its first address when it has none. On a machine without IPv6 a wildcard host
falls back to an IPv4 socket on ``0.0.0.0``.

The reported host (INFO ``host``, /varz ``host``/``http_host``, the log lines) stays the configured string:
``0.0.0.0`` is still reported as ``0.0.0.0``, as nats-server does.
"""
from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

WILDCARD_HOSTS = ("", "0.0.0.0", "::")

# errors that mean "this machine has no usable IPv6", where a wildcard listener falls back to IPv4
_NO_IPV6 = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}


def _set_v6only(sock: socket.socket, on: bool) -> None:
    if hasattr(socket, "IPPROTO_IPV6") and hasattr(socket, "IPV6_V6ONLY"):
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if on else 0)


def _bound(family: int, addr: tuple, backlog: int, v6only: bool | None = None) -> socket.socket:
    # (proto IPPROTO_TCP, not 0: the accepted sockets inherit it, and asyncio sets TCP_NODELAY only on a
    # socket whose proto says TCP; with Nagle on, a small write after another waits for the peer's delayed
    # ACK, ~40 ms on Linux; Go, and so nats-server, turns Nagle off on every TCP connection)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and v6only is not None:
            _set_v6only(sock, v6only)
        sock.bind(addr)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def dual_stack_supported() -> bool:
    """True when this machine can open an IPv6 socket that also accepts IPv4 (IPv4-mapped addresses)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            _set_v6only(s, False)
            s.bind(("::", 0))
    except OSError:
        return False
    return True


async def listening_socket(loop: asyncio.AbstractEventLoop, host: str, port: int,
                           backlog: int = 1024) -> socket.socket:
    """A non-blocking socket listening on ``host``:``port`` the way nats-server would (see the module doc).

    Raises ``OSError`` (address in use, unknown host...) like ``bind`` does.
    """
    if host in WILDCARD_HOSTS:
        if socket.has_ipv6:
            try:
                return _bound(socket.AF_INET6, ("::", port), backlog, v6only=False)
            except OSError as e:
                if e.errno not in _NO_IPV6:
                    raise
        return _bound(socket.AF_INET, ("0.0.0.0", port), backlog)
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(errno.EADDRNOTAVAIL, f"no address for {host}")
    v4 = [i for i in infos if i[0] == socket.AF_INET]
    family, _, _, _, addr = (v4 or infos)[0]
    return _bound(family, addr, backlog, v6only=True if family == socket.AF_INET6 else None)


def hostport(host: str, port: int) -> str:
    """``host:port`` as Go's ``net.JoinHostPort`` writes it (an IPv6 address in brackets), as nats-server's
    log lines and errors show addresses."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


async def server_port_socket(loop: asyncio.AbstractEventLoop, what: str, configured: int, host: str,
                             port: int) -> socket.socket:
    """The listening socket of a route, gateway or leafnode port (``what``: router, gateway, leafnode);
    failing, nats-server's fatal error quoting Go's net error:
    ``Error listening on <what> port: <configured> - listen tcp <addr>: bind: <reason>``."""
    try:
        return await listening_socket(loop, host, port)
    except OSError as e:
        raise OSError(e.errno, f"Error listening on {what} port: {configured} - listen tcp {hostport(host, port)}: "
                               f"bind: {(e.strerror or str(e)).lower()}") from e


async def serve_listener(loop: asyncio.AbstractEventLoop, host: str, port: int, what: str, addr: str,
                         factory: Any, **kw: Any) -> asyncio.AbstractServer:
    """An asyncio server of ``factory`` on ``host``:``port`` (MQTT and WebSocket ports); failing, nats-server's
    error ``Unable to listen for <what> connections: listen tcp <addr>: <reason>``."""
    sock = None
    try:
        sock = await listening_socket(loop, host, port)
        return await loop.create_server(factory, sock=sock, backlog=1024, **kw)
    except OSError as e:
        if sock is not None:
            sock.close()
        raise OSError(e.errno, f"Unable to listen for {what} connections: listen tcp {addr}: {e.strerror}") from e


class ServedListener:
    """The stopping half of a listener served by ``serve_listener`` (MQTT, WebSocket): ``_srv`` is its
    asyncio server; ``_close_connections`` closes what it accepted."""

    _srv: asyncio.AbstractServer | None

    async def stop_accepting(self) -> None:
        """Lame duck: no new connections; existing ones stay."""
        if self._srv is not None:
            self._srv.close()

    async def _close_connections(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        s = self._srv
        if s is not None:
            s.close()
        await self._close_connections()
        if s is not None:
            try:  # (2 s at most: a slow or failing wait is not an error at shutdown)
                await asyncio.wait_for(s.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
            self._srv = None


def peer_hostport(conn: socket.socket) -> str:
    """The ``host:port`` of an accepted socket's peer for the log (an IPv4 client of a dual-stack socket
    plain), read before a handshake that may close it; ``?:0`` when it is already gone."""
    try:
        peer = conn.getpeername()
    except OSError:
        return "?:0"
    return hostport(plain_ip(str(peer[0])), peer[1])


def plain_ip(host: str) -> str:
    """A peer address as nats-server shows it: an IPv4 client of a dual-stack socket (``::ffff:1.2.3.4``)
    is ``1.2.3.4``."""
    if host.startswith("::ffff:") and "." in host:
        return host[7:]
    return host
