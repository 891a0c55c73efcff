"""What a client connection reads before the NATS protocol starts (``Prelude``, a mixin of
rillet.server.client.Client): a PROXY protocol header (nats-server's ``proxy_protocol``), read either from the
first bytes the transport hands over or, before a TLS handshake, straight off the socket; and, with
``allow_non_tls``, the first byte peeked to tell a TLS handshake from plain text."""
from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from rillet.server.listen import hostport


class Prelude:
    """The PROXY header and the TLS sniff of a client connection (the attributes are the Client's)."""

    # (set by Client.__init__ and connection_made)
    server: Any
    transport: Any
    closed: bool
    host: str
    port: int
    proxy_taken: bool
    _proxy: Any
    _proxy_timer: Any
    _held: list[bytes] | None
    _sniff_sock: socket.socket | None

    def close(self, reason: str, err: str | None = None) -> None:
        raise NotImplementedError

    def data_received(self, data: bytes) -> None:
        raise NotImplementedError

    def log_prefix(self) -> str:
        raise NotImplementedError

    def _expect_proxy_header(self) -> None:
        """The client's first bytes may be a PROXY header (nats-server's ``proxy_protocol``): read before the
        protocol parser sees anything; the INFO goes out meanwhile, without ``client_ip`` (``Server.info_for``)."""
        from rillet.server import proxyproto
        self._proxy = proxyproto.ProxyHeader()
        self._held = []  # (data_received hands everything to _proxy_read until the header is done)
        self._proxy_timer = self.server.loop.call_later(proxyproto.READ_TIMEOUT, self._proxy_timeout)

    def _proxy_read(self, data: bytes) -> None:
        from rillet.server.proxyproto import ProxyProtoError
        try:
            found = self._proxy.feed(data)
        except ProxyProtoError as e:
            self._proxy_failed(str(e))
            return
        if found is None:
            return
        self._proxy = self._held = None
        self._proxy_timer.cancel()  # (the connection is no longer held by a pending 5 s timer)
        if found.addr is not None:  # (LOCAL, UNKNOWN, or no header at all: the socket's address stays)
            self.host, self.port = found.addr
        if found.rest:
            self.data_received(found.rest)

    def _proxy_timeout(self) -> None:
        if self._proxy is not None and not self.closed:
            self._proxy_failed("timeout reading PROXY protocol header")

    def _proxy_failed(self, why: str) -> None:
        self.server.log.warn(f"Error reading PROXY protocol header from {hostport(self.host, self.port)}: {why}")
        self._proxy = self._held = None
        if self._proxy_timer is not None:
            self._proxy_timer.cancel()
        self.close("Protocol Violation")

    async def take_proxy_header(self) -> bool:
        """(proxy_protocol with a tls block) Read the PROXY header off the socket before TLS, byte-exact (the
        transport is not reading: rillet.server.proxyproto.take_header). False when the connection was closed."""
        from rillet.server import proxyproto
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return False
        if self.proxy_taken:
            return True
        try:
            s = socket.socket(fileno=os.dup(t.get_extra_info("socket").fileno()))
        except OSError as e:
            self.server.log.error(f"{self.log_prefix()} - PROXY protocol read error: {e}")
            self.close("Read Error")
            return False
        try:
            found = await proxyproto.take_header(self.server.loop, s)
        except proxyproto.ProxyProtoError as e:
            self._proxy_failed(str(e))
            return False
        except asyncio.TimeoutError:
            self._proxy_failed("timeout reading PROXY protocol header")
            return False
        except OSError:
            self.close("Client Closed")
            return False
        finally:
            s.close()
        if self.closed:
            return False
        if found.addr is not None:  # (LOCAL, UNKNOWN, or no header at all: the socket's address stays)
            self.host, self.port = found.addr
        return True

    def _register_for_tls(self) -> None:
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return
        t.pause_reading()  # type: ignore[attr-defined]  # the TLS upgrade resumes it
        self.server.register_client(self)
        self.server.flush_clients()

    def _register_for_sniff(self) -> None:
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return
        t.pause_reading()  # type: ignore[attr-defined]  # the first byte stays in the kernel until decided
        srv = self.server
        srv.register_client(self)
        srv.flush_clients()
        if self.closed:
            return
        if srv.opts.proxy_protocol:  # (the PROXY header first, then the first byte after it decides)
            srv.loop.create_task(self._proxy_then_sniff())
            return
        self._start_sniff()

    async def _proxy_then_sniff(self) -> None:
        if await self.take_proxy_header():
            self._start_sniff()

    def _start_sniff(self) -> None:
        t = self.transport
        srv = self.server
        if self.closed or t is None or t.is_closing():
            return
        sock = t.get_extra_info("socket")
        try:
            # a duplicate descriptor: the loop refuses a reader on the transport's own one
            self._sniff_sock = socket.socket(fileno=os.dup(sock.fileno()))
        except OSError as e:
            srv.log.error(f"{self.log_prefix()} - TLS detection error: {e}")
            self.close("Read Error")
            return
        srv.loop.add_reader(self._sniff_sock.fileno(), self._sniffed)

    def _sniffed(self) -> None:
        s = self._sniff_sock
        if s is None:
            return
        self._sniff_sock = None
        srv = self.server
        srv.loop.remove_reader(s.fileno())
        try:
            first = s.recv(1, socket.MSG_PEEK)
        except OSError:
            first = b""  # (the transport sees the same error or EOF when reading resumes)
        finally:
            s.close()
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return
        if first[:1] == b"\x16":
            if not srv.tls_rate_allow():
                from rillet.server.tls import THROTTLED
                self.close("Maximum Connections Exceeded", THROTTLED)
                srv.flush_clients()
                return
            srv.loop.create_task(srv._upgrade_tls(self))  # (start_tls resumes reading under TLS)
            return
        t.resume_reading()  # type: ignore[attr-defined]
