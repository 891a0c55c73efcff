"""What every connection of the server holds from its start, a client's and another server's (a route, gateway or
leaf connection): its output buffer, its counters and the timers it may arm, and the lifecycle they share
(``ConnBase``)."""
from __future__ import annotations

import struct
import sys
import time
from typing import Any

from rillet.gocompat.goquote import go_quote

if sys.platform.startswith("linux"):
    import fcntl
    import termios
    _TIOCOUTQ: int | None = termios.TIOCOUTQ
else:
    _TIOCOUTQ = None


_STALE_KIND = ("clients", "clients", "routes", "gateways", "leafs")  # by rillet.server.delivery.ConnKind


def count_stale(srv: Any, c: Any) -> None:
    """Connection ``c`` is closed as stale: counted in /varz stale_connections and stale_connection_stats by its
    kind (and in statsz), as nats-server does."""
    srv.stale_connections += 1
    srv.stale_stats[_STALE_KIND[int(c.kind)]] += 1


def kernel_unsent(t: Any) -> int:
    """Bytes the kernel holds for the peer in the socket's send queue (Linux TIOCOUTQ; 0 elsewhere): with what
    asyncio buffers, what the peer has not read yet (the write_timeout retry policy asks whether it read
    anything)."""
    sock = t.get_extra_info("socket")
    if sock is None or _TIOCOUTQ is None:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), _TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, ValueError):
        return 0


def init_conn_state(c: Any, server: Any) -> None:
    """Set the state a connection ``c`` of ``server`` starts with (its class's ``__init__`` calls this first):
    no transport yet, empty output, zero counters, started now, no timer armed."""
    c.server = server
    c.cid = 0
    c.transport = None
    c.out = bytearray()
    c.flush_pending = False
    c.closed = False
    c.close_reason = ""
    c.headers = False
    c.in_msgs = c.in_bytes = c.out_msgs = c.out_bytes = 0
    c.start_time = time.time()
    c.last_activity = c.start_time
    c.host = ""
    c.port = 0
    c.pings_out = 0
    c.rtt = 0.0
    c._rtt_start = 0.0
    c._ping_timer = None
    c._auth_timer = None
    c._deadline_timer = None


class ConnBase:
    """Mixin: the lifecycle every connection of the server shares, a client's (rillet.server.client) and another
    server's (rillet.cluster.conn): marking output for the end of the read cycle, the authentication and PING
    timers, writing out what is buffered when it closes, and the teardown's common part.

    The class defines ``log_prefix``, ``_torn_down`` (its own part of the teardown, once, timers already
    cancelled) and ``_send_ping``; it may define ``_wire_bytes`` (what goes on the wire for buffered output),
    ``_wrote``, and ``_ping_interval`` / ``_ping_max`` / ``_ping_now`` (a role's own PING settings)."""

    # errors writing the last of the output when closing: logged (debug), the close goes on
    _close_write_errors: tuple[type[BaseException], ...] = (OSError, RuntimeError)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:  # type: ignore[attr-defined]
            self.close_reason = self.close_reason or ("Client Closed" if exc is None else "Read Error")  # type: ignore[attr-defined]
            self._teardown()

    def _close_transport(self) -> None:
        """``close``'s last part: write what is buffered, then close the transport (the teardown follows)."""
        t = self.transport  # type: ignore[attr-defined]
        if t is None:
            return
        out = self.out  # type: ignore[attr-defined]
        if out:
            try:
                data = self._wire_bytes(bytes(out))
                t.write(data)
                self._wrote(len(data))
            except self._close_write_errors as e:
                self.server.log.debug(f"{self.log_prefix()} - error writing on close: {e}")  # type: ignore[attr-defined]
            out.clear()
        t.close()

    def _wire_bytes(self, data: bytes) -> bytes:
        """Buffered output as it goes on the wire (a compressed connection encodes it)."""
        return data

    def _wrote(self, n: int) -> None:
        """``n`` bytes were handed to the transport (routes count them for their liveness checks)."""

    def _teardown(self) -> None:
        if self.closed:  # type: ignore[attr-defined]
            return
        self.closed = True
        for t in self._timers():
            if t is not None:
                t.cancel()
        self._backlog = None
        self._torn_down()

    def _timers(self) -> tuple[Any, ...]:
        """The timers this connection may have armed (a class with more adds its own): the teardown cancels
        them."""
        return (self._ping_timer, self._auth_timer, self._deadline_timer, self._resume_handle)  # type: ignore[attr-defined]

    def _torn_down(self) -> None:
        """The class's part of the teardown (once, timers already cancelled): its state, its registration."""
        raise NotImplementedError

    def flush(self) -> None:
        """Mark this connection as having output: it is written at the end of the current read cycle."""
        if not self.flush_pending:  # type: ignore[has-type]
            self.flush_pending = True
            self.server.pending_flush.append(self)  # type: ignore[attr-defined]

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self.closed and self.parser.awaiting_connect:  # type: ignore[attr-defined]
            self.server.log.debug(f"{self.log_prefix()} - Authentication Timeout")  # type: ignore[attr-defined]
            self.close("Authentication Timeout", "Authentication Timeout")  # type: ignore[attr-defined]

    def _ping_interval(self) -> float:
        return self.server.opts.ping_interval  # type: ignore[attr-defined]

    def _ping_max(self) -> int:
        return self.server.opts.ping_max  # type: ignore[attr-defined]

    def _ping_now(self) -> bool:
        """False: the stale check runs but no PING goes out yet (a gateway before its CONNECT)."""
        return True

    def _send_ping(self) -> None:
        raise NotImplementedError

    def _ping_tick(self) -> None:
        """Every ping interval: close the connection when ping_max PINGs went unanswered, else PING it."""
        if self.closed:  # type: ignore[attr-defined]
            return
        srv = self.server  # type: ignore[attr-defined]
        if self.pings_out + 1 > self._ping_max():  # type: ignore[has-type]
            srv.log.debug(f"{self.log_prefix()} - Stale Client Connection - Closing")
            count_stale(srv, self)
            self.close("Stale Connection", "Stale Connection")  # type: ignore[attr-defined]
            return
        if self._ping_now():
            self.pings_out += 1
            self._rtt_start = time.monotonic()
            self._send_ping()
            srv.flush_clients()
        self._ping_timer = srv.loop.call_later(self._ping_interval(), self._ping_tick)

    def pending_bytes(self) -> int:
        """Output not yet written: what asyncio holds for the socket and the buffer being built (/routez,
        /gatewayz, statsz)."""
        t = self.transport  # type: ignore[attr-defined]
        return (t.get_write_buffer_size() if t is not None else 0) + len(self.out)  # type: ignore[attr-defined]

    def log_prefix(self) -> str:
        raise NotImplementedError

    def trace(self, msg: str) -> None:
        self.server.log.trace(f"{self.log_prefix()} - {msg}")  # type: ignore[attr-defined]

    def trace_payload(self, msg: bytes, hdr: int, delivered: bool) -> None:
        """The ``MSG_PAYLOAD`` trace line that follows a traced PUB/HPUB (``<<-``) or MSG/HMSG (``->>``), as
        nats-server writes it: the payload Go-quoted, cut to ``max_traced_msg_len`` bytes with ``...``; with
        ``trace_headers`` the header block alone (nothing for a message without headers); nothing when empty."""
        o = self.server.opts  # type: ignore[attr-defined]
        if o.extra.get("trace_headers"):
            if hdr <= 0 or len(msg) < hdr:
                return
            msg = msg[:hdr - 4]  # (the header block, without its closing blank line)
        if not msg:
            return
        prefix = "->>" if delivered else "<<-"
        limit = o.max_traced_msg_len
        if 0 < limit < len(msg):
            self.trace(f'{prefix} MSG_PAYLOAD: ["{go_quote(msg[:limit])[1:-1]}..."]')
        else:
            self.trace(f"{prefix} MSG_PAYLOAD: [{go_quote(msg)}]")

    def debug(self, msg: str) -> None:
        self.server.log.debug(f"{self.log_prefix()} - {msg}")  # type: ignore[attr-defined]
