"""What route, gateway and leaf connections share (DESIGN.md: one kind of connection, several roles).

``ServerConn`` is the asyncio layer of a server-to-server connection: the output buffer written once per
read cycle through the server's pending-flush list (with the max_pending slow-consumer check), feeding the
role's sans-IO parser, PING/PONG with RTT, and the connection's counters and log prefix. Each role
(``rillet.cluster.route.RouteConn``, ``rillet.cluster.gateway_conn.GatewayConn``,
``rillet.cluster.leaf_conn.LeafConn``) keeps its own parser, handshake, handlers and message frames; the
per-message ``send_msg`` paths stay in the roles and append to ``out`` directly (no extra call layer).
"""
from __future__ import annotations

import asyncio
import random
import socket
import ssl
import time
from typing import Any, Callable

from rillet import compression as cc
from rillet import lane
from rillet.cluster import protocol as cp
from rillet.cluster import s2
from rillet.protocol.parser import ProtocolError
from rillet.server.auth import compare_secret
from rillet.server.connstate import ConnBase, init_conn_state, kernel_unsent
from rillet.server.delivery import ConnKind
from rillet.server.listen import hostport, plain_ip
from rillet.server.pacing import BACKLOG_BUDGET, READ_BUDGET, ReadPacer
from rillet.gocompat.gotime import format_seconds

_wire = lane.wire  # the message frame builders of the running lane (rillet.lane)
_CRLF = b"\r\n"
# a connection's key in /varz slow_consumer_stats (nats-server's scStats)
_SC_KIND = {ConnKind.ROUTER: "routes", ConnKind.GATEWAY: "gateways", ConnKind.LEAF: "leafs"}


S2_AUTO_FIRST_PING = 1.0  # seconds (+ up to 20%): when an s2_auto connection first measures its RTT


class ServerConn(ConnBase, ReadPacer, asyncio.Protocol):
    echo = True
    no_responders = False
    perms = None
    account: Any = None
    id_tag = "cid"  # the id's name in log lines (rid, gid, lid)
    role_word = "Server"  # in "<role_word> connection closed: <reason>" (Router, Gateway, Leafnode)
    close_names_remote = True  # that line ends with " - Remote: <remote_name>"
    pinned_acc = ""  # (routes: a route dedicated to this account, whose name its messages leave out)

    def __init__(self, server: Any) -> None:
        init_conn_state(self, server)  # (rillet.server.connstate: output, counters, timers)
        self.transport: asyncio.Transport | None
        self.no_reconnect = False  # (routes and gateways: a closed connection is not dialled again)
        self.registered = False
        self.info_received = False
        self.remote_id = ""
        self.remote_name = ""
        self.parser: Any = None
        # s2 compression (routes and leaf connections, rillet.compression): the negotiated mode (as
        # /routez and /leafz show it), the codec once switched, and s2_auto's thresholds (None: not auto)
        self.compression = ""
        self.comp_negotiated = False
        self._s2w: Any = None
        self._s2r: Any = None
        self._s2_auto: tuple | None = None
        # fairness (rillet.server.pacing): the unparsed rest of a read while reading is paused and the
        # hold-back allowance of the current read, plus the raw bytes that arrived meanwhile
        self._init_pacing()
        self._rraw: list[bytes] = []
        # the write deadline's retry policy (write_timeout): bytes handed to the transport, what the peer had
        # taken when the deadline was armed, and whether this was reported as a slow consumer already
        self._handed = 0
        self._wd_sent = 0
        self._slow = False

    # ---- lifecycle ------------------------------------------------------------------------------------

    def _attach(self, transport: asyncio.BaseTransport, high_water: int = 0) -> None:
        """connection_made's first part: the transport, the peer's address and a connection id."""
        self.transport = transport  # type: ignore[assignment]
        if high_water:
            transport.set_write_buffer_limits(high=high_water)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        if peer:
            self.host, self.port = plain_ip(peer[0]), peer[1]
        srv = self.server
        srv._cid += 1
        self.cid = srv._cid

    def _admit(self, transport: asyncio.BaseTransport, mgr: Any, accepting: bool, high_water: int = 0,
               no_reconnect: bool = False) -> bool:
        """connection_made's common part: attach ``transport``; closed at once (False) while the server shuts
        down or the manager ``mgr`` no longer ``accepting``, else one of ``mgr.conns``."""
        self._attach(transport, high_water)
        if self.server.shutting_down or not accepting:
            self.close("Server Shutdown", no_reconnect=no_reconnect)
            return False
        mgr.conns.add(self)
        return True

    def close(self, reason: str, err: str | None = None, no_reconnect: bool = False) -> None:
        """Closes with ``reason`` (logged, in monitoring), after what is buffered and ``-ERR err`` are written."""
        if self.closed:
            return
        if no_reconnect:
            self.no_reconnect = True
        if err is not None:
            self.out += cp.err_frame(err)
        self.close_reason = reason
        self._close_transport()
        self._teardown()

    _close_write_errors = (OSError, RuntimeError, s2.S2Error)

    def _wire_bytes(self, data: bytes) -> bytes:
        return data if self._s2w is None else self._s2w.encode(data)

    def _torn_down(self) -> None:
        self._rraw = []
        remote = f" - Remote: {self.remote_name}" if self.remote_name and self.close_names_remote else ""
        self.server.log.notice(f"{self.log_prefix()} - {self.role_word} connection closed: "
                               f"{self.close_reason}{remote}")
        self._closed()

    def _closed(self) -> None:
        """The role's part of the teardown (once, timers already cancelled): its state and its manager."""

    # ---- reading --------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity = time.time()
        if self._backlog is not None:
            self._rraw.append(data)  # (raw: not yet decompressed)
            self._pause_behind_backlog()
            return
        self._new_read()
        self._read(data)

    def _read(self, data: bytes) -> None:
        try:
            if self._s2r is not None:
                data = self._s2r.feed(data)
            self._parse(data)
        except ProtocolError as e:
            self._parse_failed(e)
            self.server.flush_clients()
        except s2.S2Error as e:
            self._s2_read_failed(e)
            self.server.flush_clients()

    def _parse(self, data: bytes, budget: float = READ_BUDGET) -> None:
        """Parse ``data`` (decompressed) slice by slice, as a client's reads (rillet.server.client): past the
        loop budget the rest waits for a later pass, reading paused. A client this connection delivers to
        with more than 3/4 of max_pending waiting holds the reading back a few milliseconds (at most 10 ms
        per 64 KB), so a fast link does not bury a slow subscriber: nats-server's read loop blocks on such
        a client's write instead."""
        self._paced(data, budget)

    def _feed_slice(self, chunk: bytes, data: bytes, pos: int) -> int:
        parser = self.parser
        parser.feed(chunk)
        while parser.halt:  # reading switched to s2 right after an INFO: the rest is compressed
            rest = parser.take_rest()
            if pos < len(data):
                rest += data[pos:]
                pos = len(data)
            if rest and not self.closed:
                parser.feed(self._s2r.feed(rest))
        self._count_read(len(chunk))
        return pos

    # (ReadPacer._flush_and_stall: only clients this connection delivers to hold it back, STALL_MIN at a time)
    _stall_only = ConnKind.CLIENT

    def _resume(self) -> None:
        self._resume_handle = None
        if self.closed:
            return
        self._stall_ended()
        rest = self._backlog
        self._backlog = None
        if rest:
            try:
                self._parse(rest, BACKLOG_BUDGET)  # (a burst worked off: a smaller share per pass)
            except ProtocolError as e:
                self._parse_failed(e)
                self.server.flush_clients()
                return
            except s2.S2Error as e:
                self._s2_read_failed(e)
                self.server.flush_clients()
                return
            if self._backlog is not None or self.closed:
                return
        while self._rraw and self._backlog is None and not self.closed:
            self._read(self._rraw.pop(0))
        if self._backlog is not None or self.closed:
            return
        t = self.transport
        if t is not None and not t.is_closing():
            t.resume_reading()  # type: ignore[attr-defined]

    def _parse_failed(self, e: ProtocolError) -> None:
        if e.client_error == cp.AUTH_VIOLATION:
            self.server.log.error(f"{self.log_prefix()} - authentication error")
        else:
            self.server.log.error(f"{self.log_prefix()} - {e.detail}")
        self.close(e.reason, e.client_error)

    def _s2_read_failed(self, e: Exception) -> None:
        """What the peer sent is not a valid s2 stream: closed as nats-server closes a connection whose
        s2 reader fails ("<role> connection closed: Read Error"), the codec's error at debug level."""
        if not self.closed:
            self.debug(f"s2 read error: {e}")
            self.out.clear()  # (nothing more is written to a peer whose stream is broken)
            self.close("Read Error")

    # ---- s2 compression -------------------------------------------------------------------------------

    def start_s2(self, mode: str, auto: tuple | None, info: bytes, info_first: bool, halt: bool = True) -> None:
        """Switch this connection to s2 (``mode``: the negotiated level, ``auto``: s2_auto's thresholds or
        None) around the negotiation INFO ``info``, as nats-server: the dialling side (``info_first``)
        writes the INFO uncompressed and then compresses, the accepting side switches first and sends the
        INFO compressed. Reading switches right after the INFO being processed (the parser halts there and
        the bytes that follow go through the s2 reader; ``halt`` False: called outside the parse, after a
        TLS handshake), writing from the next byte queued."""
        if info_first:
            self.out += info
        if self.out:  # what is queued before the switch leaves uncompressed
            t = self.transport
            if t is not None and not self.closed:
                data = bytes(self.out)
                t.write(data)
                self._wrote(len(data))
            self.out.clear()
        self.compression = mode
        self._s2_auto = auto
        self._s2w = s2.S2Writer(level=cc.WRITER_LEVEL[mode])
        self._s2r = s2.S2Reader()
        self.parser.halt = halt
        self.debug(f"Compression: {mode}")
        if not info_first:
            self.out += info
        self.flush()
        if auto is not None:  # (nats-server's first PING comes after about a second: the RTT then decides)
            self.server.loop.call_later(S2_AUTO_FIRST_PING * (1 + random.random() / 5), self._rtt_ping)

    def _rtt_ping(self) -> None:
        """s2_auto: a PING whose PONG measures the RTT (the level picked at the switch came from how long the
        handshake took); no stale count, the ping timer keeps its own."""
        if self.closed or self._rtt_start:
            return
        self._rtt_start = time.monotonic()
        self.send(cp.PING)
        self.server.flush_clients()

    def set_s2(self, mode: str, auto: tuple | None) -> None:
        """A compressing connection changes level (a reload): a new writer from the next flush."""
        if self._s2w is None:
            return
        self._s2_auto = auto
        if mode != self.compression:
            self.debug(f"Compression level changed from {self.compression} to {mode}")
            self.compression = mode
            self._s2w = s2.S2Writer(level=cc.WRITER_LEVEL[mode])

    def _s2_auto_update(self) -> None:
        """s2_auto: after an RTT measure, the level for the new RTT; a change gives a new writer (its stream
        starts with the identifier again, which readers accept), as nats-server does on a PONG."""
        mode = cc.level_for_rtt(self.rtt, self._s2_auto)  # type: ignore[arg-type]
        if mode != self.compression:
            self.debug(f"Compression level changed from {self.compression} to {mode} (rtt {self.rtt * 1000:.3f}ms)")
            self.compression = mode
            self._s2w = s2.S2Writer(level=cc.WRITER_LEVEL[mode])

    def proto_before_connect(self) -> bool:
        self.server.log.error(f"{self.log_prefix()} - authentication error")
        return False

    def proto_ping(self) -> None:
        self.out += cp.PONG
        self.flush()

    def proto_pong(self) -> None:
        self.pings_out = 0
        if self._rtt_start:
            self.rtt = time.monotonic() - self._rtt_start
            self._rtt_start = 0.0
            if self._s2_auto is not None and self._s2w is not None:
                self._s2_auto_update()

    def proto_ok(self) -> None:
        pass

    def _authorized(self, o: Any, co: Any, known_urls: Any = ()) -> bool:
        """A route's or gateway's CONNECT ``co`` against the user and password of its port's ``authorization``
        (options ``o``; none configured: anyone); with the port's ``tls { verify_and_map }`` or
        ``verify_cert_and_check_known_urls`` the peer's certificate instead (``_cert_authorized``): a mismatch is
        logged and closes the connection."""
        t = o.tls
        tls_map = t is not None and t.verify_and_map
        known = t is not None and bool(t.extra.get("verify_cert_and_check_known_urls"))
        if tls_map or known:
            ok = self._cert_authorized(o.username if tls_map else None, known_urls if known else None)
        else:
            ok = not o.username or (co.user == o.username and compare_secret(o.password, co.password))
        if not ok:
            self.server.log.error(f"{self.log_prefix()} - authentication error")
            self.close("Authentication Failure", cp.AUTH_VIOLATION, no_reconnect=True)
            return False
        return True

    def _cert_authorized(self, user: Any, known_urls: Any) -> bool:
        """nats-server's isRouterAuthorized/isGatewayAuthorized with a TLS map: one of the names the peer's
        certificate offers (emails, DNS SANs, URIs, subject DN) is the authorization's ``user`` (verify_and_map),
        or is a DNS SAN naming the host of one of ``known_urls`` (verify_cert_and_check_known_urls)."""
        from rillet.server.auth import cert_names, dns_name_matches
        t = self.transport
        cert = t.get_extra_info("peercert") if t is not None else None
        if not cert:
            self.debug("User required in cert, no peer certificates found")
            return False
        for name, is_dns in cert_names(cert):
            if not name:
                continue
            if known_urls is not None and is_dns and dns_name_matches(name, known_urls):
                self.debug(f"Using SAN found in cert for auth [{name!r}]")
                return True
            if user and name == user:
                self.debug(f"Using certificate name for auth [{name!r}]")
                return True
        return False

    # ---- writing --------------------------------------------------------------------------------------

    def send(self, frame: bytes) -> None:
        self.out += frame
        self.flush()

    def send_msg(self, account: bytes | None, subject: bytes, reply: bytes | None, queues: list, hdr: int,
                 msg: bytes) -> None:
        """One RMSG (or HMSG) to this route or gateway (``hdr``: the header length, -1 without headers; a
        leaf connection writes LMSG, its own ``send_msg``)."""
        out = self.out
        if self.pinned_acc:
            account = None  # (a pinned route's account is not on the wire)
        if hdr < 0:
            out += _wire.rmsg_head(account, subject, reply, queues, len(msg))
            out += msg
        elif self.headers:
            out += _wire.hmsg_head(account, subject, reply, queues, hdr, len(msg))
            out += msg
        else:  # a peer without headers gets the payload only
            payload = msg[hdr:]
            out += _wire.rmsg_head(account, subject, reply, queues, len(payload))
            out += payload
        self._frame_queued(len(msg))

    def _frame_queued(self, n: int) -> None:
        """A message frame written to ``out`` (``n``: the message's length): ended, counted, flushed soon."""
        self.out += _CRLF
        self.out_msgs += 1
        self.out_bytes += n
        if not self.flush_pending:
            self.flush_pending = True
            self.server.pending_flush.append(self)

    def write_out(self) -> None:
        self.flush_pending = False
        out = self.out
        t = self.transport
        if not out or self.closed or t is None:
            out.clear()
            return
        if self._s2w is None:
            data = bytes(out)
        else:  # one s2 encode per flush of the buffer, as nats-server compresses per flush
            try:
                data = self._s2w.encode(bytes(out))
            except s2.S2Error as e:
                self.server.log.error(f"{self.log_prefix()} - Error compressing data: {e}")
                out.clear()
                self.close("Write Error")
                return
        t.write(data)
        self._wrote(len(data))
        out.clear()
        mp = self.server.opts.max_pending
        if t.get_write_buffer_size() > mp:
            self._count_slow()
            self.server.log.notice(f"{self.log_prefix()} - Slow Consumer Detected: MaxPending of {mp} Exceeded")
            t.abort()
            self.close("Slow Consumer (Pending Bytes)")

    # ---- timers ---------------------------------------------------------------------------------------

    def _write_deadline(self) -> float:
        """Seconds a peer may leave our writes unread before it is closed (the role's block, else the server's)."""
        return self.server.opts.write_deadline

    def _write_timeout(self) -> str:
        """The role's write_timeout policy: "retry" (nats-server's default for routes, gateways and leaf
        connections) or "close"."""
        return "retry"

    def _wrote(self, n: int) -> None:
        self._handed += n

    def _peer_took(self, t: Any) -> int:
        """Bytes handed to ``t`` that have left this host (neither in asyncio's buffer nor unsent in the
        kernel): what the write deadline (and a route's liveness tick) watch grow."""
        return self._handed - t.get_write_buffer_size() - kernel_unsent(t)

    def pause_writing(self) -> None:
        """More is buffered for the peer than it reads: past the write deadline it is closed as a slow consumer,
        or (write_timeout retry) reported as one and given another deadline while it still reads, as
        nats-server."""
        wd = self._write_deadline()
        if wd > 0 and self._deadline_timer is None and not self.closed:
            t = self.transport
            if t is not None:
                self._wd_sent = self._peer_took(t)
            self._deadline_timer = self.server.loop.call_later(wd, self._write_deadline_check, wd)

    def resume_writing(self) -> None:
        self._slow = False
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    def _write_deadline_check(self, wd: float) -> None:
        """The write deadline passed with the peer still behind. ``write_timeout: close``: closed (as a client).
        ``retry``: closed only when the peer read nothing since the deadline was armed; else reported as a slow
        consumer (counted once) and given another deadline."""
        self._deadline_timer = None
        t = self.transport
        if self.closed or t is None:
            return
        if self._write_timeout() == "retry":
            size = t.get_write_buffer_size()
            sent = self._handed - size - kernel_unsent(t)  # (_peer_took, with size kept for the report below)
            if sent > self._wd_sent:
                state = "State" if self._slow else "Detected"
                self._count_slow()
                self._slow = True
                self.server.log.notice(f"{self.log_prefix()} - Slow Consumer {state}: WriteDeadline of "
                                       f"{format_seconds(wd)} exceeded with {size} total bytes.")
                self._wd_sent = sent
                self._deadline_timer = self.server.loop.call_later(wd, self._write_deadline_check, wd)
                return
        state = "State" if self._slow else "Detected"  # (as nats-server words it for one reported already)
        self._count_slow()
        self.server.log.notice(f"{self.log_prefix()} - Slow Consumer {state}: WriteDeadline of "
                               f"{format_seconds(wd)} exceeded with {t.get_write_buffer_size()} total bytes.")
        t.abort()
        self.close("Slow Consumer (Write Deadline)")

    def _count_slow(self) -> None:
        """A slow consumer report counted as nats-server does: each one in the server's total and the account's
        (a leaf connection's, a pinned route's), in slow_consumer_stats by kind (a route once while it stays
        slow: ``_slow``)."""
        srv = self.server
        if self.account is None and self.pinned_acc:  # (nats-server gives a pinned route its account)
            acc = srv.accounts.get(self.pinned_acc)
            if acc is not None:
                acc.slow_consumers += 1
        srv.count_slow(self, _SC_KIND.get(self.kind, "clients"), not self._slow)

    def _send_ping(self) -> None:
        self.send(cp.PING)

    # ---- TLS ------------------------------------------------------------------------------------------

    def tls_checked(self, typ: str, pins: list[str], no_reconnect: bool) -> bool:
        """After a TLS handshake (done before connection_made): the peer's key must be one of ``pins`` when
        any are given, as nats-server's pinned_certs. False: logged as nats-server does ("TLS <typ>
        handshake error: certificate not pinned") and closed."""
        from rillet.server.tls import pinned_error
        t = self.transport
        ssl_obj = t.get_extra_info("ssl_object") if t is not None else None
        if ssl_obj is None:
            return True
        refused = pinned_error(ssl_obj, pins)
        if refused is None:
            self.server.log.debug(f"{self.log_prefix()} - TLS handshake complete")
            c = ssl_obj.cipher()
            self.server.log.debug(f"{self.log_prefix()} - TLS version {(ssl_obj.version() or '')[4:]}, "
                                  f"cipher suite {c[0] if c else ''}")
            return True
        self.server.log.debug(f"{self.log_prefix()} - {refused[1]}")
        self.server.log.error(f"{self.log_prefix()} - TLS {typ} handshake error: {refused[0]}")
        self.close("TLS Handshake Failure", no_reconnect=no_reconnect)
        return False

    def tls_monitor_fields(self, d: dict) -> None:
        """``tls_version`` and ``tls_cipher_suite`` of a TLS connection in its monitoring entry (as nats-server's
        ConnInfo; the cipher under OpenSSL's name, which is IANA's for TLS 1.3)."""
        t = self.transport
        ssl_obj = t.get_extra_info("ssl_object") if t is not None else None
        if ssl_obj is None:
            return
        v = ssl_obj.version() or ""
        d["tls_version"] = v[4:] if v.startswith("TLSv") else v
        c = ssl_obj.cipher()
        if c:
            d["tls_cipher_suite"] = c[0]

    # ---- logging --------------------------------------------------------------------------------------

    def select_compression(self, cfg: Any, theirs: str) -> tuple[str, tuple | None] | None:
        """The mode this side uses against the peer's announced one (``theirs``; routes and leafs alike) (s2_auto: the level for the RTT of the
        handshake so far, and the thresholds for later changes); None: closed."""
        try:
            mode = cc.select_mode(cfg.mode, theirs)
        except ValueError as e:
            self.server.log.error(f"{self.log_prefix()} - {e}")
            self.close("Protocol Violation", str(e))
            return None
        auto = None
        if mode == cc.S2_AUTO:
            self.rtt = self.rtt or time.time() - self.start_time  # (no RTT measured yet: the handshake's)
            auto = cfg.thresholds()
            mode = cc.level_for_rtt(self.rtt, auto)
        return mode, auto

    def log_prefix(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port} - {self.id_tag}:{self.cid}"


def log_tls_failure(server: Any, peer: Any, typ: str, id_tag: str, role_word: str, err: BaseException,
                    local: Any = None) -> None:
    """A TLS handshake that failed before a connection object existed, in nats-server's words: the error
    ("TLS <typ> handshake error: ...") and the close ("<role> connection closed: TLS Handshake Failure"),
    under a connection id of its own, as nats-server gives one to every accepted or dialled socket; a
    handshake past the tls timeout as nats-server reports its read deadline ("read tcp <local>-><peer>:
    i/o timeout", then "TLS handshake timeout")."""
    server._cid += 1
    peer_hp = hostport(plain_ip(str(peer[0])), peer[1])
    where = f"{peer_hp} - {id_tag}:{server._cid}"
    timed_out = isinstance(err, asyncio.TimeoutError) or (
        isinstance(err, ConnectionAbortedError) and "taking longer" in str(err))
    if timed_out:
        text = (f"read tcp {hostport(plain_ip(str(local[0])), local[1])}->{peer_hp}: i/o timeout" if local
                else "i/o timeout")
    else:
        text = str(err) or type(err).__name__
    server.log.error(f"{where} - TLS {typ} handshake error: {text}")
    server.log.notice(f"{where} - {role_word} connection closed: TLS Handshake Failure")
    if timed_out:
        server.log.error(f"{where} - TLS handshake timeout")


class AcceptLoop:
    """A listening socket served by its own accept loop, each accepted connection handed to ``_serve`` in a
    task of its own (the ports whose connections start with a TLS handshake). Duck-types the parts of
    ``asyncio.Server`` the managers use (``sockets``, ``close``, ``wait_closed``)."""

    NODELAY = False  # TCP_NODELAY on each accepted socket

    def __init__(self, server: Any, sock: socket.socket) -> None:
        self.server = server
        self.sockets = [sock]
        self._conns: set[asyncio.Task] = set()
        self._done = asyncio.Event()
        self._task = server.loop.create_task(self._accept_loop(sock))

    async def _accept_loop(self, lsock: socket.socket) -> None:
        loop = self.server.loop
        try:
            while True:
                try:
                    conn, _ = await loop.sock_accept(lsock)
                except OSError as e:
                    self.server.log.error(f"Temporary accept error: {e}")
                    await asyncio.sleep(0.01)
                    continue
                conn.setblocking(False)
                if self.NODELAY:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                t = loop.create_task(self._serve(conn))
                self._conns.add(t)
                t.add_done_callback(self._conns.discard)
        finally:
            self._done.set()

    async def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._task.cancel()
        for t in list(self._conns):
            t.cancel()
        for s in self.sockets:
            s.close()
        self._done.set()

    async def wait_closed(self) -> None:
        await self._done.wait()


class TLSPortListener(AcceptLoop):
    """A server-to-server port (gateways) whose connections may start with a TLS handshake, before any
    protocol byte (nats-server's createGateway does the handshake first, then sends the INFO).
    ``setup()`` is asked at each accept, so a reload that changes the TLS settings applies to the next
    connections: (protocol factory, SSL context or None for plain TCP, handshake timeout). Duck-types the
    parts of ``asyncio.Server`` the managers use (``sockets``, ``close``, ``wait_closed``)."""

    NODELAY = True

    def __init__(self, server: Any, sock: socket.socket, setup: Callable[[], tuple[Any, Any, float]],
                 typ: str, id_tag: str, role_word: str) -> None:
        self._setup = setup
        self._words = (typ, id_tag, role_word)
        super().__init__(server, sock)

    async def _serve(self, conn: socket.socket) -> None:
        factory, ctx, timeout = self._setup()
        if ctx is None:
            try:
                await self.server.loop.connect_accepted_socket(factory, conn)
            except OSError as e:
                self.server.log.debug(f"accepted {self._words[0]} connection lost at once: {e}")
                conn.close()
            return
        try:
            peer, local = conn.getpeername(), conn.getsockname()
        except OSError:
            peer, local = ("?", 0), None
        try:
            await self.server.loop.connect_accepted_socket(factory, conn, ssl=ctx, ssl_handshake_timeout=timeout)
        except (ssl.SSLError, ConnectionError, OSError, asyncio.TimeoutError) as e:
            log_tls_failure(self.server, peer, *self._words, e, local=local)
            conn.close()
