"""A client connection: the thin asyncio layer around the sans-IO parser, plus message delivery.

Outbound data is appended to a per-connection bytearray and written once per read cycle: a read that
carries a thousand PUBs produces one write per receiving connection, not a thousand.
"""
from __future__ import annotations

import asyncio
import socket
import time
from random import random
from typing import TYPE_CHECKING, Any, Callable

import rillet.server.msgtrace as _mt
from rillet.gocompat.goquote import go_quote
from rillet.gocompat.gotime import format_seconds
from rillet import lane
from rillet.protocol.parser import ProtocolError
from rillet.server.auth import PermChecker
from rillet.server.clientprelude import Prelude
from rillet.server.connstate import ConnBase, init_conn_state, kernel_unsent
from rillet.server.delivery import ConnKind
from rillet.server.listen import plain_ip
# read pacing (slices under a time budget, the fast-producer stall); the constants stay importable from here
from rillet.server.pacing import (BACKLOG_BUDGET, READ_BUDGET, READ_SLICE, SLICE_MIN, SLICE_TIME,  # noqa: F401
                                  STALL_MAX, STALL_MIN, STALL_READ, STALL_TOTAL, ReadPacer)
from rillet.subjects.validate import is_valid_literal_subject, is_valid_subject

if TYPE_CHECKING:
    from rillet.server.connect_json import ConnectOpts
    from rillet.server.server import Account, Server

CLIENT = ConnKind.CLIENT
INTERNAL = ConnKind.INTERNAL

# A client whose reads draw many no responders statuses (a burst of requests nobody serves: noresp25k in
# benchmarks/bystander.py; each request costs its 503, ~3 us) is read in short passes: once a loop pass of its
# reads (a fresh read, or a backlog's pass) has drawn NORESP_BURST statuses, its passes stop after NORESP_BUDGET
# seconds and its slices aim at NORESP_SLICE_TIME, until a pass draws fewer. A bystander's request/reply (two
# loop passes) then waits ~0.2 ms per pass for the burst instead of 0.5-1.5 ms (a backlog pass's budget plus
# a slice sized for 1 ms), and the burst's first read stops after its first slice instead of 2 ms.
NORESP_BURST = 32
NORESP_BUDGET = 0.0002
NORESP_SLICE_TIME = 0.00015

_PING = b"PING\r\n"
_PONG = b"PONG\r\n"
_OK = b"+OK\r\n"


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


class _Gone:
    """What a closed connection's parser calls: nothing happens (see Client._teardown)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return _ignore


_GONE = _Gone()


class Subscription:
    """One SUB. ``icb`` set = an internal subscription whose callback receives the message."""

    __slots__ = ("client", "subject", "queue", "sid", "sid_b", "max", "nm", "icb", "subject_b", "queue_b")

    def __init__(self, client: Any, subject: str, queue: str | None, sid: bytes,
                 icb: Callable | None = None) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.sid_b = sid  # the SID bytes as written in MSG
        self.max = 0
        self.nm = 0
        self.icb = icb
        self.subject_b = subject.encode("utf-8", "surrogateescape")
        self.queue_b = queue.encode("utf-8", "surrogateescape") if queue else b""


def _connect_json() -> Any:
    """rillet.server.connect_json (ConnectOpts, the CONNECT/INFO JSON decoding), loaded with the first client
    connection, not by an idle server (issue 20; it decodes with the standard library's json, not msgspec)."""
    global _cj
    if _cj is None:
        from rillet.server import connect_json
        _cj = connect_json
    return _cj


_cj: Any = None


class Client(Prelude, ConnBase, ReadPacer, asyncio.Protocol):
    """A client connection (kind CLIENT). Internal clients (JetStream, $SYS) use ``InternalClient``."""

    kind = CLIENT
    noresp_sent = 0  # no responders statuses sent to this client (rillet.server.delivery.no_responders)
    _noresp_mark = 0  # (noresp_sent when the last pass of its reads began)
    # the output state the delivery executor writes per message, in slots (the rest in the instance dict): one
    # fixed layout, read at its offsets by the compiled executor (rillet/_speedups/_cdeliver.pyx)
    # (and the fields a PUB reads and counts, for the compiled ``proto_pub``)
    __slots__ = ("out", "flush_pending", "out_msgs", "out_bytes", "perms", "headers", "in_msgs", "in_bytes",
                 "slow_path", "account", "echo")

    def __init__(self, server: "Server", conn_type: str = "STANDARD") -> None:
        init_conn_state(self, server)  # (rillet.server.connstate: output, counters, timers)
        self.proxy_key = ""  # the trusted proxy this client came through (proxies { trusted }), for /connz
        self.transport: asyncio.Transport | None
        self.conn_type = conn_type  # STANDARD or WEBSOCKET (allowed_connection_types)
        opts = server.opts
        self.parser = lane.ClientParser(self, opts.max_payload, opts.max_control_line)  # (rillet.lane)
        self.parser.headers = False  # until CONNECT says otherwise
        self.account: Account = server.global_account
        self.sublist_match = self.account.sublist.match
        self.subs: dict[bytes, Subscription] = {}
        self.msubs = opts.max_subscriptions or -1  # per-connection subscription limit; -1 = none
        # CONNECT state
        self.connect_received = False
        self.opts = _connect_json().ConnectOpts()
        self.echo = True
        # nats-server's defaults until a CONNECT says otherwise (ops before CONNECT are acknowledged)
        self.verbose = True
        self.pedantic = True
        self.no_responders = False
        self.first_pong_sent = False
        self.perms: PermChecker | None = None
        self.auth = server.authenticator  # websocket connections may use their own (websocket {} overrides)
        self.slow_path = True  # per-PUB checks needed (trace, permissions, pedantic, verbose)
        self.user = ""
        self.nonce: bytes | None = None
        self._write_paused_at = 0.0
        self._writes_pending = 0
        self._wd_mark = 0  # (write_timeout retry) bytes not yet taken by the peer when the deadline was armed
        self._wd_added = 0  # bytes handed to the transport since then
        self._wd_slow = False  # reported as a slow consumer while this stall lasts
        self.tls_version = ""
        self.tls_cipher = ""
        self.stop_time = 0.0
        self._held: list[bytes] | None = None  # data received while an auth callout runs
        self._proxy: Any = None  # proxy_protocol: the PROXY header being read (rillet.server.proxyproto)
        self._proxy_timer: Any = None  # (its 5 s limit)
        # the PROXY header already read off the socket by the TLS-first listener (rillet.server.tls): its
        # address (None: LOCAL, UNKNOWN or no header), and no second header is looked for
        self.proxy_taken = False
        self.proxy_addr: tuple[str, int] | None = None
        self.callout_user: Any = None  # what the auth callout admitted this client as
        self._sniff_sock: socket.socket | None = None  # allow_non_tls: watching for the first byte
        # fairness and fast-producer stall (see READ_BUDGET, STALL_*)
        self._init_pacing()
        self._intake_held = False  # reading held by the JetStream API queue (hold_intake / release_intake)
        self.stalls = 0  # times a producer was stalled because of this connection's pending output

    # ---- connection lifecycle -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            # plain_ip: an IPv4 client of a dual-stack listener is 1.2.3.4, not ::ffff:1.2.3.4 (as nats-server)
            self.host, self.port = plain_ip(peer[0]), peer[1]
        if self.proxy_addr is not None:
            self.host, self.port = self.proxy_addr
        ssl_obj = transport.get_extra_info("ssl_object")
        srv = self.server
        if ssl_obj is not None:
            self.tls_version = ssl_obj.version() or ""
            c = ssl_obj.cipher()
            self.tls_cipher = c[0] if c else ""
            if self.conn_type == "STANDARD" and srv.refuse_unpinned(self, ssl_obj):  # TLS first: pinned_certs
                return
            if self.conn_type == "STANDARD" and srv.hold_for_ocsp(self, ssl_obj):  # TLS first: ocsp_peer
                return
        if srv.tls_context is not None and srv.opts.tls_required and self.conn_type == "STANDARD" \
                and ssl_obj is None:
            # the client answers the INFO with its TLS handshake, which must not reach the plain-text parser:
            # reading is paused before the INFO goes out. (uvloop ignores pause_reading() made inside
            # connection_made, so the pause and the INFO wait for the next loop pass.)
            srv.loop.call_soon(self._register_for_tls)
            return
        if srv.tls_context is not None and srv.opts.allow_non_tls and self.conn_type == "STANDARD" \
                and ssl_obj is None:
            # TLS offered, not required: the INFO goes out in the clear and the client's first byte says
            # whether it starts a TLS handshake (0x16) or speaks the protocol in the clear, as nats-server
            srv.loop.call_soon(self._register_for_sniff)
            return
        if srv.opts.proxy_protocol and self.conn_type == "STANDARD" and not self.proxy_taken:
            self._expect_proxy_header()
        srv.register_client(self)
        srv.flush_clients()

    def start(self) -> None:
        """Called by the server after registration: INFO, auth timer, ping timer."""
        srv = self.server
        opts = srv.opts
        if self.auth.needs_nonce:
            self.nonce = srv.make_nonce()
        self.send_info()
        loop = srv.loop
        if self.auth.required:
            self.parser.awaiting_connect = True
            self._auth_timer = loop.call_later(opts.effective_auth_timeout(), self._auth_timeout)
        self._ping_timer = loop.call_later(opts.ping_interval, self._ping_tick)
        self.debug("Client connection created")

    def send_info(self) -> None:
        self.out += self.server.info_for(self)
        self.flush()

    def pause_writing(self) -> None:
        self._write_paused_at = time.monotonic()
        self._writes_pending = 1
        wd = self.server.opts.write_deadline
        if wd > 0 and self._deadline_timer is None:
            self._arm_write_deadline(wd)

    def _arm_write_deadline(self, wd: float) -> None:
        t = self.transport
        self._wd_mark = t.get_write_buffer_size() + kernel_unsent(t) if t is not None else 0
        self._wd_added = 0
        self._deadline_timer = self.server.loop.call_later(wd, self._write_deadline_check)

    def resume_writing(self) -> None:
        self.server.pending_total.forget(self)
        self._write_paused_at = 0.0
        self._writes_pending = 0
        self._wd_slow = False
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    def _write_deadline_check(self) -> None:
        self._deadline_timer = None
        if self._write_paused_at and not self.closed:
            t = self.transport
            pending = t.get_write_buffer_size() if t is not None else 0
            wd = self.server.opts.write_deadline
            why = (f"WriteDeadline of {format_seconds(wd)} exceeded with {max(self._writes_pending, 1)} chunks of "
                   f"{pending} total bytes.")
            if self.server.opts.write_timeout == "retry" and t is not None:
                # (write_timeout retry: kept while the client still reads, reported as a slow consumer; closed
                # when it took nothing in the whole deadline, as nats-server)
                left = pending + kernel_unsent(t)
                if self._wd_mark + self._wd_added - left > 0:
                    self.server.count_slow(self)
                    self.server.log.notice(f"{self.log_prefix()} - Slow Consumer "
                                           f"{'State' if self._wd_slow else 'Detected'}: {why}")
                    self._wd_slow = True
                    self._arm_write_deadline(wd)
                    return
            self.server.slow_consumer(self, why)

    def close(self, reason: str, err: str | None = None) -> None:
        """Send ``-ERR '<err>'`` (when given), flush, and close the connection."""
        if self.closed:
            return
        if err is not None:
            self.out += f"-ERR '{err}'\r\n".encode()
        self.close_reason = reason
        if err == "Authorization Violation":  # (nats-server's authViolation: a system event, when listened to)
            self.server.sysacc.auth_error(self, reason)
        self._close_transport()
        self._teardown()

    def _torn_down(self) -> None:
        self.stop_time = time.time()
        if self._sniff_sock is not None:
            self.server.loop.remove_reader(self._sniff_sock.fileno())
            self._sniff_sock.close()
            self._sniff_sock = None
        self.server.unregister_client(self)
        # (the subscriptions point back here: without this reference cycle a closed connection's subscriptions
        # are freed as soon as the account lets go of them, even when the collector has frozen this client)
        self.subs = {}
        self.parser.handler = _GONE  # (nor through its parser: a closed connection is freed by its refcount)
        self.debug(f"Client connection closed: {self.close_reason}")

    # ---- reading --------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._held is not None:
            if self._proxy is not None:
                self._proxy_read(data)  # (proxy_protocol: the PROXY header first)
                return
            self._hold_input(data)  # CONNECT waits for the auth callout (paused past HELD_MAX)
            return
        self.last_activity = time.time()
        if self._backlog is not None:
            self._backlog += data
            self._pause_behind_backlog()
            return
        self._new_read()
        self._noresp_pass()
        self._consume(data, READ_BUDGET)

    def _noresp_pass(self) -> None:
        """A pass of this client's reads begins: the short passes of a no responders burst (NORESP_BURST) go on
        if the last pass drew that many statuses, else they end here."""
        n = self.noresp_sent
        if n - self._noresp_mark < NORESP_BURST and self._budget_cap < 1.0:
            self._budget_cap = ReadPacer._budget_cap
            self._slice_time = ReadPacer._slice_time
        self._noresp_mark = n

    def _consume(self, data: bytes, budget: float = READ_BUDGET) -> None:
        """Parse ``data`` slice by slice until done, or until this callback's budget is spent or a receiver's
        pending output asks for a stall: then the rest waits (reading paused) and is resumed from the loop."""
        self._paced(data, budget)

    def _feed_slice(self, chunk: bytes, data: bytes, pos: int) -> int:
        srv = self.server
        try:
            self.parser.feed(chunk)
        except ProtocolError as e:
            self._protocol_error(e)
            srv.flush_clients()
            return -1
        self._count_read(len(chunk))
        if self.noresp_sent - self._noresp_mark >= NORESP_BURST and self._budget_cap > NORESP_BUDGET:
            self._budget_cap = NORESP_BUDGET  # (a burst of requests nobody serves: short passes from here)
            self._slice_time = NORESP_SLICE_TIME
        if self.closed:
            srv.flush_clients()
            return -1
        if self._held is not None:  # a CONNECT went to the auth callout: the rest waits with it
            if pos < len(data):
                self._hold_input(data[pos:])
            srv.flush_clients()
            return -1
        return pos

    _stall_drops = True  # (no_fast_producer_stall: a congested receiver's messages are dropped, ReadPacer)

    def _stall_for(self, gated: list, worst: int, max_pending: int) -> float:
        """A client (not an internal one) is held back 2 ms, 5 ms when a receiver is at max_pending; each
        gated receiver's ``stalls`` and the server's count it."""
        if self.kind != CLIENT:
            return 0.0
        ttl = STALL_MAX if worst >= max_pending else STALL_MIN
        ttl = min(ttl, STALL_TOTAL - self._stall_total)
        srv = self.server
        for c in gated:
            c.stalls = getattr(c, "stalls", 0) + 1
            srv.stalls += 1
        return ttl

    def hold_intake(self) -> None:
        """Stop reading after the slice being parsed until ``release_intake``: the JetStream API queue holds
        many of this connection's requests (rillet.jetstream.api.queue HOLD_AT)."""
        self._intake_held = True

    def release_intake(self) -> None:
        if not self._intake_held:
            return
        self._intake_held = False
        if self.closed or self._backlog is None or self._resume_handle is not None:
            return
        self._resume_handle = self.server.loop.call_soon(self._resume)

    def _resume(self) -> None:
        self._resume_handle = None
        if self.closed or self._intake_held:
            return  # (held: release_intake resumes)
        self._stall_ended()
        rest = self._backlog
        self._backlog = None
        t = self.transport
        if rest:
            self._noresp_pass()
            self._consume(rest, BACKLOG_BUDGET)
            if self._backlog is not None or self.closed:
                return  # paused again (the budget, a stall) or gone
        if self._held is None and t is not None and not t.is_closing():
            cl = self.server.cluster
            if cl is not None and getattr(cl, "_stalled_by", None):
                cl._paused.append(t)  # a congested route holds every client: its unstall resumes this one
                return
            t.resume_reading()  # type: ignore[attr-defined]

    def _protocol_error(self, e: ProtocolError) -> None:
        if e.client_error == "Authorization Violation":
            self.server.log.error(f"{self.log_prefix()} - authentication error")
        else:
            self.server.log.error(f"{self.log_prefix()} - {e.detail}")
        self.close(e.reason, e.client_error)

    def send_control(self, frame: bytes, shown: str) -> None:
        """Send the control line ``frame`` (traced as ``shown``)."""
        if self.trace_on():
            self.trace(f"->> [{shown}]")
        self.out += frame
        self.flush()

    def send_err(self, err: str) -> None:
        self.send_control(f"-ERR '{err}'\r\n".encode(), f"-ERR '{err}'")

    # ---- protocol handlers (called by the parser) -----------------------------------------------------

    def proto_connect(self, arg: bytes) -> None:
        srv = self.server
        cj = _connect_json()
        if not arg.isascii():  # (Go's JSON decoder reads each byte that is not UTF-8 as U+FFFD)
            from rillet.gocompat.jsoncodec import go_utf8  # (loads msgspec too: loaded only here, issue 20)
            arg = go_utf8(arg)
        try:
            co = cj.decode(arg, type=cj.ConnectOpts)
        except cj.PARSE_ERRORS:
            # nats-server closes with a parse error; the client gets no -ERR text of its own
            raise ProtocolError(None, f"processConnect Parse Error: {arg[:128]!r}")
        if self.trace_on():
            self.trace(f"<<- [CONNECT {cj.redact(arg)}]")
        self.opts = co
        if srv.opts.tls_required and self.conn_type == "STANDARD" and not self.tls_version:
            raise ProtocolError("Secure Connection - TLS Required", "TLS required", "Secure Connection Required")
        connect_dict: dict = {}
        if self.auth.required or srv.opts.proxies_trusted:
            try:
                connect_dict = cj.decode(arg)
            except cj.DecodeError:
                connect_dict = {}
        if srv.opts.proxies_trusted:  # (proxies { trusted }: a proxy's signature of the nonce, checked first)
            proxied, self.proxy_key = self.auth.proxy_check(connect_dict, self.nonce)
            if proxied and not self.proxy_key:
                self.debug("proxy is not trusted")
                raise ProtocolError("Authorization Violation", "authentication error", "Proxy Not Trusted")
        if self.auth.required:
            self.auth.failure = ""
            if srv.operator is not None and self.auth.operator_mode:
                pub = srv.operator.resolver.connect_needs(connect_dict)
                if pub is not None:  # (a URL resolver: the account's JWT is fetched first)
                    self._held = []
                    srv.operator.resolver.prefetch(pub, lambda: self._connect_fetched(arg))
                    return
                res = srv.operator.authenticate(self, connect_dict) or False
                oc = srv.operator.callout_for(res.account) if res is not False else None
                if oc is not None and oc.raw_user(co, res.nkey) not in oc.cfg.auth_users:
                    # the account's JWT delegates its users' admission to its auth callout service
                    oc.start(self, co, jwt_sub=res.nkey)
                    return
            else:
                res = self.auth.authenticate(connect_dict, self.nonce, self.conn_type, self.peer_cert(),
                                             proxied=bool(self.proxy_key))
            ac = srv.auth_callout
            if ac is not None and getattr(srv, "operator", None) is None and ac.delegates(self, co, res):
                ac.start(self, co)  # the client is admitted or refused when the answer comes (callout_done)
                return
            if res is False:
                if self.auth.failure:  # (proxy_required: nats-server logs it at debug, closes with the reason)
                    self.debug("proxy connection required")
                    raise ProtocolError("Authorization Violation", "authentication error", self.auth.failure)
                srv.log.error(f"{self.log_prefix()} - authentication error"
                              + (f" - User \"{co.user}\"" if co.user else ""))
                raise ProtocolError("Authorization Violation", "authentication error", "Authentication Failure")
            if res is not True and res is not None:
                self._apply_user(res)
                if srv.operator is not None and getattr(res, "jwt", None):
                    srv.operator.connected(self, res)
        self.finish_connect(co)

    def finish_connect(self, co: ConnectOpts) -> None:
        """The rest of CONNECT once the client is authenticated."""
        srv = self.server
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.parser.awaiting_connect = False
        if co.protocol < 0 or co.protocol > 1:
            raise ProtocolError("invalid client protocol", "invalid client protocol", "Bad Client Protocol Version")
        self.headers = co.headers and not srv.opts.no_header_support
        self.parser.headers = self.headers
        self.no_responders = co.no_responders
        if co.no_responders and not co.headers:
            raise ProtocolError("no responders requires headers support", "no responders requires headers",
                                "No Responders Requires Headers")
        self.echo = co.echo
        self.verbose = co.verbose
        self.pedantic = co.pedantic
        self.connect_received = True
        srv.sysacc.client_connected(self)
        self.update_slow_path()
        if not self.rtt:
            self.rtt = time.time() - self.start_time  # a first estimate, until a PING round trip measures it
        self.update_slow_path()
        if self.verbose:
            self.send_ok()

    def _connect_fetched(self, arg: bytes) -> None:
        """The CONNECT held for its account's JWT (URL resolver) goes on, then what the client sent meanwhile."""
        held = self._end_hold()
        if self.closed:
            return
        try:
            self.proto_connect(arg)
            if self._held is not None:  # held again (an auth callout decides): what came first stays first
                self._held[:0] = held or []
            elif not self.closed:
                self.parser.resume(b"".join(held) if held else b"")
        except ProtocolError as e:
            self._protocol_error(e)
        self.server.flush_clients()

    # ---- auth callout (rillet.server.auth_callout) ------------------------------------------------------

    def callout_started(self) -> None:
        """The callout decides this client's CONNECT: hold what the client sends until it does."""
        self._held = []
        self.parser.awaiting_connect = True  # (a second CONNECT too: the parser stops after it)
        if self._auth_timer is not None:  # (the callout has its own timeout)
            self._auth_timer.cancel()
            self._auth_timer = None

    def callout_done(self, user: Any, reason: str) -> None:
        """The callout admitted the client as ``user`` (a CalloutUser), or refused it (``user`` None)."""
        held = self._end_hold()
        if self.closed:
            return
        srv = self.server
        co = self.opts
        try:
            if user is None:
                who = f" - Nkey \"{co.nkey}\"" if co.nkey else f" - User \"{co.user}\"" if co.user else ""
                srv.log.error(f"{self.log_prefix()} - authentication error{who}")
                self.close("Authentication Failure", "Authorization Violation")
            else:
                self._apply_user(user)
                self.user = user.username or co.user or co.nkey or user.nkey
                self.callout_user = user  # (a config reload asks the callout about this client again)
                ac = getattr(user, "callout", None) or srv.auth_callout
                if ac is not None:
                    ac.apply_limits(self, user)
                self.finish_connect(co)
                self.parser.resume(b"".join(held) if held else b"")
        except ProtocolError as e:
            self._protocol_error(e)
        srv.flush_clients()

    def peer_cert(self) -> dict | None:
        """The verified client certificate of a TLS connection (``ssl.getpeercert()``), or None."""
        t = self.transport
        so = t.get_extra_info("ssl_object") if t is not None else None
        return so.getpeercert() if so is not None else None

    def send_ok(self) -> None:
        self.send_control(_OK, "OK")

    def proto_before_connect(self) -> bool:
        """An operation arrived before CONNECT while authentication is required."""
        srv = self.server
        u = self.auth.no_auth_user()
        if u is not None:
            self._apply_user(u)
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None
            self.parser.awaiting_connect = False
            return True
        srv.log.error(f"{self.log_prefix()} - authentication error")
        return False

    def _apply_user(self, u: Any) -> None:
        self.user = u.username or u.nkey
        if u.permissions is not None:
            self.perms = PermChecker(u.permissions)
        self.update_slow_path()
        acc = self.server.lookup_account(u.account) if u.account else None
        if acc is not None:
            if 0 <= acc.mconns <= len(acc.clients - {self}):
                self.server.log.error(f"{self.log_prefix()} - maximum account active connections exceeded")
                raise ProtocolError("maximum account active connections exceeded",
                                    "maximum account active connections exceeded",
                                    "Maximum Account Connections Exceeded")
            self.bind_account(acc)
            if acc.msubs >= 0 or acc.mpay >= 0:
                self._apply_account_limits(acc)

    def _apply_account_limits(self, acc: "Account") -> None:
        """The account's max_subscriptions / max_payload, when lower than the server's."""
        if acc.mpay >= 0 and acc.mpay < self.parser.max_payload:
            self.parser.max_payload = acc.mpay
        if acc.msubs >= 0:
            mx = self.server.opts.max_subscriptions
            self.msubs = acc.msubs if not mx else min(mx, acc.msubs)

    def bind_account(self, acc: "Account") -> None:
        self.account.clients.discard(self)
        acc.clients.add(self)
        self.account = acc
        self.sublist_match = acc.sublist.match

    def proto_ping(self) -> None:
        if self.trace_on():
            self.trace("<<- [PING]")
        self.out += _PONG
        if self.trace_on():
            self.trace("->> [PONG]")
        if not self.first_pong_sent and self.connect_received:
            # the first PONG after CONNECT is followed by an INFO naming the bound account
            self.first_pong_sent = True
            if self.opts.protocol >= 1:
                self.out += self.server.info_for(self, connect_info=True)
        self.flush()

    def proto_pong(self) -> None:
        if self.trace_on():
            self.trace("<<- [PONG]")
        self.pings_out = 0
        if self._rtt_start:
            self.rtt = time.monotonic() - self._rtt_start
            self._rtt_start = 0.0

    def proto_info(self, arg: bytes) -> None:
        # a client may send INFO: nats-server parses it (and closes the connection when it is not JSON)
        cj = _connect_json()
        try:
            cj.decode(arg)
        except cj.DecodeError:
            raise ProtocolError(None, f"processInfo Parse Error: {arg[:64]!r}")

    def proto_ok(self) -> None:
        pass

    def proto_err(self, arg: bytes) -> None:
        # a client reporting an error: nats-server logs it and closes the connection
        raise ProtocolError(None, f"Client Error {arg.decode(errors='replace')}", "Parse Error")

    def proto_sub(self, subject_b: bytes, queue_b: bytes | None, sid: bytes) -> None:
        if self.trace_on():
            q = f"{queue_b.decode(errors='replace')} " if queue_b else ""
            self.trace(f"<<- [SUB {subject_b.decode(errors='replace')} {q}{sid.decode(errors='replace')}]")
        subject = subject_b.decode("utf-8", "surrogateescape")
        queue = queue_b.decode("utf-8", "surrogateescape") if queue_b else None
        if not is_valid_subject(subject) or (queue is not None and not _valid_queue(queue)):
            self.send_err("Invalid Subject")
            return
        perms = self.perms
        if perms is not None:
            if not perms.can_subscribe(subject, queue):
                sid_s = sid.decode(errors="replace")
                if queue:
                    err = f"Permissions Violation for Subscription to {go_quote(subject_b)} using queue " \
                          f"{go_quote(queue_b or b'')}"
                    logtxt = f"Subscription Violation - Subject {go_quote(subject_b)}, Queue: " \
                             f"{go_quote(queue_b or b'')}, SID {sid_s}"
                else:
                    err = f"Permissions Violation for Subscription to {go_quote(subject_b)}"
                    logtxt = f"Subscription Violation - Subject {go_quote(subject_b)}, SID {sid_s}"
                self.server.log.error(f"{self.log_prefix()} - {logtxt}")
                self.send_err(err)
                return
        mt = self.server.opts.max_sub_tokens
        if mt and subject.count(".") >= mt:  # (nats-server: after the permissions, before the subscription limit)
            self.send_err(f"Permissions Violation for Subscription to {go_quote(subject_b)}, too many tokens")
            self.server.log.error(f"{self.log_prefix()} - Subscription Violation Too Many Tokens - Subject "
                                  f"{go_quote(subject_b)}, SID {sid.decode(errors='replace')}")
            return
        mx = self.msubs
        if mx >= 0 and len(self.subs) >= mx and sid not in self.subs:
            self.server.log.error(f"{self.log_prefix()} - maximum subscriptions exceeded")
            self.send_err("maximum subscriptions exceeded")
            return
        if sid not in self.subs:
            sub = Subscription(self, subject, queue, sid)
            self.subs[sid] = sub
            self.account.add_sub(sub)
        if self.verbose:
            self.send_ok()

    def proto_unsub(self, sid: bytes, max_msgs: int) -> None:
        if self.trace_on():
            self.trace(f"<<- [UNSUB {sid.decode(errors='replace')}{' %d' % max_msgs if max_msgs else ''}]")
        sub = self.subs.get(sid)
        if sub is not None:
            if max_msgs > 0 and sub.nm < max_msgs:
                sub.max = max_msgs
            else:
                self.remove_sub(sub)
        if self.verbose:
            self.send_ok()

    def remove_sub(self, sub: Subscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
            self.account.remove_sub(sub)

    def proto_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload)
        if self.slow_path:
            if not self._pub_checks(b"PUB", subject, reply, -1, payload):
                return
            if self.verbose:
                self.send_ok()
            self.account.deliver(self, subject, reply, -1, payload)
            return
        # the common case inlined: one cache lookup, and nothing more when nobody listens
        acc = self.account
        if acc.mappings:
            acc.deliver(self, subject, reply, -1, payload)
            return
        r = acc._match(subject.decode("utf-8", "surrogateescape"))
        if r.psubs or r.qsubs:
            acc.deliver_result(self, r, subject, reply, -1, payload)
        elif acc.no_match is not None:  # (gateways: no subscriber here may still be one elsewhere)
            acc.no_match(self, subject, reply, -1, payload)
        elif reply and self.no_responders:
            acc._no_responders(self, subject, reply)

    def _pub_checks(self, op: bytes, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> bool:
        """Tracing, permissions and pedantic subject checks: only for connections that need them."""
        if self.server.trace_on:
            sizes = f"{hdr} {len(msg)}" if hdr >= 0 else f"{len(msg)}"
            self.trace(f"<<- [{op.decode()} {subject.decode(errors='replace')} "
                       f"{(reply + b' ').decode(errors='replace') if reply else ''}{sizes}]")
            self.trace_payload(msg, hdr, False)
        if self.perms is not None and not self._pub_allowed(subject):
            return False
        if subject[:1] == b"$" and self._raft_subject(subject):
            return False
        if self.pedantic and not is_valid_literal_subject(subject.decode("utf-8", "surrogateescape")):
            self.send_err("Invalid Publish Subject")  # reported, and the message still goes out
        return True

    def update_slow_path(self) -> None:
        acc = self.account
        self.slow_path = bool(self.perms is not None or self.pedantic or self.verbose or self.server.trace_on
                              or (acc is not None and acc.name in getattr(self.server, "raft_accounts", ())))

    def _raft_subject(self, subject: bytes) -> bool:
        """A publish to the RAFT subjects of an account that carries its groups' traffic (``cluster_traffic:
        owner``): refused as nats-server refuses ``$NRG.`` to the clients of any account but the system's."""
        if not (subject.startswith(b"$NRG.") or subject.startswith(b"$RNRG.")):
            return False
        if self.account.name not in getattr(self.server, "raft_accounts", ()):
            return False
        q = go_quote(subject)
        self.server.log.error(f"{self.log_prefix()} - Publish Violation - Subject {q}")
        self.send_err(f"Permissions Violation for Publish to {q}")
        return True

    def proto_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, msg: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(msg)
        if hdr_len > 0 and (msg.find(b"Nats-Trace-", 0, hdr_len) >= 0 or self.account.trace_dest is not None):
            _mt.client_publish(self, subject, reply, hdr_len, msg)  # message tracing (rillet.server.msgtrace)
            return
        if self.slow_path:
            if not self._pub_checks(b"HPUB", subject, reply, hdr_len, msg):
                return
            if self.verbose:
                self.send_ok()
        self.account.deliver(self, subject, reply, hdr_len, msg)

    def hpub_too_big(self, subject: bytes, hdr: bytes, size: int) -> None:
        """An HPUB refused for max payload (the parser calls this before the error): a traced one still gets
        its trace event, with the ingress error (rillet.server.msgtrace)."""
        _mt.max_payload_event(self, subject, hdr, size)

    def _pub_allowed(self, subject: bytes) -> bool:
        perms = self.perms
        if perms is None or not perms.has_pub or perms.can_publish(subject):
            return True
        q = go_quote(subject)
        self.server.log.error(f"{self.log_prefix()} - Publish Violation - Subject {q}")
        self.send_err(f"Permissions Violation for Publish to {q}")
        return False

    # ---- writing --------------------------------------------------------------------------------------

    def write_out(self) -> None:
        self.flush_pending = False
        out = self.out
        if not out or self.closed:
            out.clear()
            return
        t = self.transport
        if t is None:
            return
        t.write(bytes(out))
        if self._write_paused_at:
            self._writes_pending += 1
            self._wd_added += len(out)
        out.clear()
        b = t.get_write_buffer_size()
        if b > self.server.opts.max_pending:
            self.server.slow_consumer(self, f"MaxPending of {self.server.opts.max_pending} Exceeded")
        elif self._write_paused_at:
            self.server.pending_total.note(self, b)  # (and the sum of all: max_pending_total)

    # ---- timers ---------------------------------------------------------------------------------------

    def _send_ping(self) -> None:
        self.send_control(_PING, "PING")

    # ---- logging --------------------------------------------------------------------------------------

    def log_prefix(self) -> str:
        if ":" in self.host:  # an IPv6 client: [::1]:port, as nats-server
            return f"[{self.host}]:{self.port} - cid:{self.cid}"
        return f"{self.host}:{self.port} - cid:{self.cid}"

    def trace_on(self) -> bool:
        return self.server.trace_on


class InternalClient:
    """The owner of internal subscriptions (JetStream, $SYS services): messages go to callbacks."""

    kind = INTERNAL
    echo = True
    headers = True
    perms = None
    closed = False
    no_responders = False

    def __init__(self, server: "Server", account: "Account", name: str = "internal") -> None:
        self.server = server
        self.account = account
        self.name = name
        self.cid = 0
        self.subs: dict[bytes, Subscription] = {}
        self._next_sid = 0
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0

    def subscribe(self, subject: str, cb: Callable, queue: str | None = None) -> Subscription:
        """Subscribe ``cb(sub, client, subject: bytes, reply: bytes|None, hdr_len: int, msg: bytes)``."""
        self._next_sid += 1
        sid = str(self._next_sid).encode()
        sub = Subscription(self, subject, queue, sid, icb=cb)
        self.subs[sid] = sub
        self.account.add_sub(sub)
        return sub

    def remove_sub(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.account.remove_sub(sub)

    def publish(self, subject: bytes, reply: bytes | None, payload: bytes, hdr_len: int = -1) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload)
        self.account.deliver(self, subject, reply, hdr_len, payload)
        # inside a read cycle the reader's flush writes this out; from timers and tasks a flush is queued
        # once per loop pass, so a burst of internal messages (acks, deliveries) shares one write per client
        self.server.schedule_flush()


# the PUB handler clients run: ``reference_proto_pub`` (the method above, the reference and the pure lane's) or,
# in the compiled lane, its twin rillet._speedups._cdeliver.proto_pub (the plain case; the rest to the reference)
reference_proto_pub = Client.proto_pub
lane.use_compiled_methods(Client, "rillet._speedups._cdeliver", proto_pub="proto_pub")


def _valid_queue(q: str) -> bool:
    for ch in q:
        if ch in " \t\r\n":
            return False
    return bool(q)
