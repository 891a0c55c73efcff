"""One route connection: the asyncio layer around the sans-IO route parser (rillet.cluster.protocol).

Outbound data is buffered in ``out`` and written once per read cycle through the server's pending-flush
list, exactly like a client connection (``rillet.server.client``), so a read carrying many messages makes
one write per route. The handshake, registration, gossip and reconnects are the cluster manager's
(``rillet.cluster.cluster``); this class speaks the protocol and keeps the route's remote interest.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import TYPE_CHECKING, Any

from rillet import compression as cc
from rillet.cluster import info as ci
from rillet import lane
from rillet.cluster import protocol as cp
from rillet.cluster.conn import ServerConn
from rillet.cluster.interest import Change, RemoteInterest
from rillet.cluster.routed import RemoteSub
from rillet.server.connstate import count_stale
from rillet.server.delivery import ConnKind
from rillet.gocompat.gotime import format_time, unix_ns

_wire = lane.wire  # the message frame builders of the running lane (rillet.lane)

if TYPE_CHECKING:
    from rillet.cluster.cluster import Cluster

ROUTER = ConnKind.ROUTER
ROUTE_HIGH_WATER = 4 << 20  # bytes buffered for a peer above which the clients' publishers are paused
EXPLICIT = "explicit"
IMPLICIT = "implicit"
# Route liveness (beyond the configured ping_interval/ping_max, which default to minutes): a registered route
# that has read nothing for ROUTE_LIVENESS_PING seconds sends a PING; one that has read nothing at all for
# ROUTE_SILENCE_CLOSE seconds is reset (RST, unsent data dropped) and, if dialled, reconnected. Without it a
# route across a network cut (a blackhole: TCP only retransmits) stays open for minutes: the peer's interest
# stays here, publishes keep queueing for it, and TCP delivers that backlog long after the heal, when it may
# be taken for new traffic (a stream leader that lost its leadership in the cut and leads again stored such
# publishes a second time: tests/faults/README.md). Go peers answer our PINGs as any.
ROUTE_LIVENESS_PING = 1.0
ROUTE_SILENCE_CLOSE = 4.0

_CRLF = b"\r\n"
class RouteConn(ServerConn):
    kind = ROUTER
    id_tag = "rid"
    role_word = "Router"
    _flush_each_slice = False  # (ReadPacer: a read's output written at its end, as nats-server's read loop)
    # what a message in or out reads and counts, in slots (the rest in the instance dict): one fixed layout,
    # read at its offsets by the compiled send_msg/proto_rmsg (rillet/_speedups/_cdeliver.pyx)
    __slots__ = ("out", "flush_pending", "out_msgs", "out_bytes", "pinned_acc", "headers", "in_msgs", "in_bytes",
                 "_accounts", "cluster", "closed")

    def __init__(self, cluster: "Cluster", url: Any = None, rtype: str = IMPLICIT, gossip_mode: int = 0,
                 account: str = "") -> None:
        super().__init__(cluster.server)
        self.cluster = cluster
        self.solicited = url is not None
        self.url = url  # rillet.cluster.cluster.RouteURL of the peer (set from its INFO when accepted)
        self.rtype = rtype
        self.gossip_mode = gossip_mode
        self.retry = False  # kept when a duplicate was closed: reconnect if this one goes too
        self.pool_idx = 0  # index of this connection in its server's route pool
        self.remote_pool_size = 0  # the peer's route_pool_size (pools of different sizes work together)
        self.connect_user = ""  # credentials of the peer's CONNECT (an accepted route: rechecked on reload)
        self.connect_pass = ""
        self.remote_import: Any = None  # the peer's cluster permissions, from its INFO (ci.SubjectPermission)
        self.remote_export: Any = None
        self.no_pool = False  # the peer does not pool: this connection carries every account
        self.delayed_info = False  # dialled with pooling: our INFO goes out once the pool index is known
        self.pinned_acc = account  # a dedicated route of this pinned account (dialled, or named by the peer)
        self.remote_ip_url = ""  # nats-route://ip:port/ of the peer (gossiped to others)
        self.connect_urls: list[str] = []
        self.lnoc = False
        self.lnocu = False
        self.lmsg_origin: bytes | None = None  # origin of the LMSG being delivered (rillet.cluster.leaf)
        self.remote = RemoteInterest()
        self.rsubs: dict[tuple, tuple[Any, RemoteSub]] = {}
        self.parser = lane.ServerParser(self, cp.ROUTE, max_control_line=self.server.opts.max_control_line,
                                        account=account.encode("utf-8", "surrogateescape") if account else None)
        self._accounts: dict[bytes, Any] = {}
        self._live_timer: asyncio.TimerHandle | None = None
        self._live_at = 0.0  # loop time of the last liveness tick
        self._live_acked = 0  # bytes the peer had acknowledged (TCP) at that tick
        self._live_heard = 0.0  # when that count last grew (time.time())
        self._live_pinged = 0  # bytes of the liveness PING sent at that tick

    # ---- lifecycle ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        cl = self.cluster
        if not self._admit(transport, cl, cl.accepting, ROUTE_HIGH_WATER):
            return
        srv = self.server
        self.server.log.notice(f"{self.log_prefix()} - Route connection created")
        if cl.tls_server is not None and not self._tls_checked(transport):
            return
        if self.solicited:
            self.server.log.debug(f"{self.log_prefix()} - Route connect msg sent")
            self.out += cp.connect_frame(cl.connect_json(self.url))
        else:
            self.parser.awaiting_connect = True
            if cl.opts.username:
                self._auth_timer = srv.loop.call_later(cl.opts.auth_timeout or 2.0, self._auth_timeout)
        if self.solicited and (cl.pooling and not self.pinned_acc or cc.needs_compression(cl.comp_config().mode)):
            # (sent when registered, as nats-server: with route_pool_idx, and after the compression
            # negotiation, which needs the peer's INFO first)
            self.delayed_info = True
        else:
            self.out += cp.info_frame(cl.initial_info(self.gossip_mode, account=self.pinned_acc))
        self._ping_timer = srv.loop.call_later(cl.ping_interval(), self._ping_tick)
        self._live_at = srv.loop.time()
        self._live_timer = srv.loop.call_later(ROUTE_LIVENESS_PING, self._liveness_tick)
        self.flush()
        srv.flush_clients()

    def _liveness_tick(self) -> None:
        """Every ROUTE_LIVENESS_PING seconds: PING an idle registered route, reset a silent one. A tick that
        comes late (this server's loop was held up, e.g. stopped) gives the peer one more period first. Silent:
        nothing read from the peer and none of our bytes acknowledged by its TCP."""
        self._live_timer = None
        if self.closed:
            return
        srv = self.server
        now = srv.loop.time()
        late = now - self._live_at > 2 * ROUTE_LIVENESS_PING
        self._live_at = now
        t = self.transport
        if t is not None:  # the peer acknowledging our data (TCP) is alive too (a bulk one-way stream)
            acked = self._peer_took(t)
            if acked > self._live_acked + self._live_pinged:  # (a stopped peer's kernel still takes PINGs)
                self._live_heard = time.time()
            self._live_acked = acked
        self._live_pinged = 0
        idle = time.time() - max(self.last_activity, self._live_heard)
        if self.registered and idle >= ROUTE_LIVENESS_PING:
            if idle >= ROUTE_SILENCE_CLOSE and not late:
                self._reset_silent(idle)
                return
            handed = self._handed
            self.send(cp.PING)
            srv.flush_clients()
            # (what the PING took on the wire: more than its 6 bytes on an s2 route)
            self._live_pinged = max(self._handed - handed, len(cp.PING))
        self._live_timer = srv.loop.call_later(ROUTE_LIVENESS_PING, self._liveness_tick)

    def _reset_silent(self, idle: float) -> None:
        """Nothing read from the peer for ``idle`` seconds: close with a reset, dropping what is still
        queued for it (in asyncio and in the kernel), so no stale backlog reaches it after a heal; the
        peer's interest goes at once, as on any route close."""
        self.server.log.warn(f"{self.log_prefix()} - Route silent for {idle:.1f}s - Closing")
        self.out.clear()
        t = self.transport
        if t is not None:
            sock = t.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError as e:
                    self.server.log.debug(f"{self.log_prefix()} - SO_LINGER: {e}")
            t.abort()
        count_stale(self.server, self)
        self.close("Stale Connection")

    def _tls_checked(self, transport: asyncio.BaseTransport) -> bool:
        """A TLS route (the handshake is done before connection_made): the peer's key must be pinned when
        ``pinned_certs`` is set. False: closed."""
        from rillet.server.tls import pinned_error
        ssl_obj = transport.get_extra_info("ssl_object")
        tls = self.cluster.opts.tls
        refused = pinned_error(ssl_obj, tls.pinned_certs if tls is not None else [])
        if refused is None:
            self.server.log.debug(f"{self.log_prefix()} - TLS handshake complete")
            return True
        self.server.log.debug(f"{self.log_prefix()} - {refused[1]}")
        self.server.log.error(f"{self.log_prefix()} - TLS route handshake error: {refused[0]}")
        self.close("TLS Handshake Failure", no_reconnect=not self.solicited)
        return False

    def _timers(self) -> tuple[Any, ...]:
        return (*super()._timers(), self._live_timer)

    def _closed(self) -> None:
        self._drop_remote_interest()
        self.cluster.unstall(self)
        self.cluster.route_closed(self)

    def pause_writing(self) -> None:
        """More is buffered for the peer than it reads: clients are not read until it catches up (the
        publishers wait, as nats-server stalls fast producers), and the route is closed if the peer still
        has not read after the write deadline (cluster write_deadline, else the server's)."""
        self.cluster.stall(self)
        super().pause_writing()

    def resume_writing(self) -> None:
        self.cluster.unstall(self)
        super().resume_writing()

    def _write_deadline(self) -> float:
        return self.cluster.opts.write_deadline or self.server.opts.write_deadline

    def _write_timeout(self) -> str:
        return self.cluster.opts.write_timeout or "retry"

    # ---- protocol handlers ----------------------------------------------------------------------------

    def proto_connect(self, arg: bytes) -> None:
        if self.solicited:
            return  # (nats-server reads a CONNECT from the accepting side too, and ignores it)
        co = ci.decode_route_connect(arg)
        cl = self.cluster
        log = self.server.log
        if co.lang:
            log.error(f"{self.log_prefix()} - {ci.ERR_CLIENT_ON_ROUTE_PORT}")
            self.close("Wrong Port", ci.ERR_CLIENT_ON_ROUTE_PORT, no_reconnect=True)
            return
        if co.gateway:
            text = ci.err_gateway_on_route_port(co.gateway)
            log.error(f"{self.log_prefix()} - {text}")
            self.close("Wrong Gateway", text, no_reconnect=True)
            return
        o = cl.opts
        if not self._authorized(o, co, o.routes):  # (the route URLs: verify_cert_and_check_known_urls)
            return
        if co.cluster != cl.name:
            if cl.dynamic and (not co.cluster_dynamic or cl.name < co.cluster):
                cl.set_name(co.cluster, dynamic=co.cluster_dynamic, keep=co.name)
            else:
                text = ci.err_cluster_name_mismatch(co.cluster, cl.name)
                log.error(f"{self.log_prefix()} - {text}")
                self.close("Cluster Name Conflict", text, no_reconnect=True)
                return
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.parser.awaiting_connect = False
        self.connect_user, self.connect_pass = co.user, co.password
        self.remote_id = co.name
        self.lnoc, self.lnocu = co.lnoc, co.lnocu
        self.parser.lnocu = co.lnocu
        self.remote.lnocu = co.lnocu
        self.headers = co.headers and not self.server.opts.no_header_support

    def proto_info(self, arg: bytes) -> None:
        info = ci.decode_info(arg)
        if self.info_received:
            self.cluster.async_route_info(self, info)
        else:
            self.cluster.first_route_info(self, info)

    def proto_err(self, arg: bytes) -> None:
        text = arg.decode("utf-8", "replace")
        self.server.log.error(f"{self.log_prefix()} - Route Error {text}")
        self.close("Parse Error")

    # interest

    def proto_rs_sub(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        cl = self.cluster
        if (cl.route_perms is not None or cl.transitioning) and not self._accepts(account, subject):
            return
        self._apply(self.remote.rs_sub(account, subject, queue, weight))

    def proto_rs_unsub(self, account: bytes, subject: bytes, queue: bytes | None) -> None:
        self._apply(self.remote.rs_unsub(account, subject, queue))

    def proto_ls_sub(self, origin: bytes, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        cl = self.cluster
        if (cl.route_perms is not None or cl.transitioning) and not self._accepts(account, subject):
            return
        self._apply(self.remote.ls_sub(origin, account, subject, queue, weight))

    def _accepts(self, account: bytes, subject: bytes) -> bool:
        """Whether an RS+/LS+ is taken: the cluster's export permission allows its subject, and its account is
        not moving to a dedicated route (nats-server ignores both, keeping the route)."""
        cl = self.cluster
        if cl.transitioning and not self.pinned_acc and not self.no_pool and bytes(account) in cl.transitioning:
            return False
        perms = cl.route_perms
        if perms is not None and not perms.can_subscribe(subject.decode("utf-8", "surrogateescape")):
            self.debug(f'Can not export "{subject.decode("utf-8", "replace")}", ignoring remote subscription '
                       f"request")
            return False
        return True

    def drop_interest(self, keep: Any) -> None:
        """Forget the remote subscriptions for which ``keep(account, subject)`` is False (a dedicated route
        for their account, or the export permission changed by a reload)."""
        drop = [key for key, (_, sub) in self.rsubs.items() if not keep(key[0], sub.subject)]
        for key in drop:
            acc, subject, queue, origin = key
            self.remote.rs_unsub(acc, subject, queue) if origin is None else \
                self.remote.ls_unsub(origin, acc, subject, queue)
            self._apply(Change("remove", acc, subject, queue, origin, 0))

    def proto_ls_unsub(self, origin: bytes | None, account: bytes, subject: bytes, queue: bytes | None) -> None:
        self._apply(self.remote.ls_unsub(origin, account, subject, queue))

    def proto_account_sub(self, account: bytes) -> None:  # (never called on a route: the parser ignores A+)
        pass

    def proto_account_unsub(self, account: bytes) -> None:
        pass

    def _account(self, name: bytes) -> Any:
        acc = self._accounts.get(name)
        if acc is None:
            acc = self.cluster.route_account(name)
            if acc is not None:
                self._accounts[bytes(name)] = acc
        return acc

    def _apply(self, ch: Any) -> None:
        if ch is None:
            return
        key = (ch.account, ch.subject, ch.queue, ch.origin)
        if ch.kind == "add":
            acc = self._account(ch.account)
            if acc is None:
                self.server.log.debug(f"{self.log_prefix()} - interest in unknown account "
                                      f"{ch.account.decode(errors='replace')} ignored")
                return
            sub = RemoteSub(self, ch.subject.decode("utf-8", "surrogateescape"),
                            ch.queue.decode("utf-8", "surrogateescape") if ch.queue else None, ch.weight, ch.origin)
            try:
                acc.sublist.insert(sub)
            except ValueError as e:
                # nats-server: logs "Could not insert subscription", answers -ERR 'Invalid Subscription'
                # and keeps the route
                self.server.log.error(f"{self.log_prefix()} - Could not insert subscription: {e}")
                self.send(cp.err_frame("Invalid Subscription"))
                self.remote.rs_unsub(ch.account, ch.subject, ch.queue) if ch.origin is None else \
                    self.remote.ls_unsub(ch.origin, ch.account, ch.subject, ch.queue)
                return
            self.rsubs[key] = (acc, sub)
            hook = getattr(acc, "route_interest", None)
            if hook is not None:
                hook(sub, True)  # leaf connections hear about routed interest (rillet.cluster.leaf)
        elif ch.kind == "weight":
            entry = self.rsubs.get(key)
            if entry is not None:
                entry[1].weight = ch.weight
                entry[0].remote_changed()
        else:
            entry = self.rsubs.pop(key, None)
            if entry is not None:
                entry[0].sublist.remove(entry[1])
                hook = getattr(entry[0], "route_interest", None)
                if hook is not None:
                    hook(entry[1], False)

    def _drop_remote_interest(self) -> None:
        self.remote.clear()
        by_acc: dict[Any, list[RemoteSub]] = {}
        for acc, sub in self.rsubs.values():
            by_acc.setdefault(acc, []).append(sub)
        self.rsubs.clear()
        for acc, subs in by_acc.items():
            acc.sublist.remove_batch(subs)
            acc.remote_changed()
            hook = getattr(acc, "route_interest", None)
            if hook is not None:
                for sub in subs:
                    hook(sub, False)

    # messages

    def proto_rmsg(self, account: bytes, subject: bytes, reply: bytes | None, queues: tuple, payload: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload)
        acc = self._account(account)
        if acc is not None:
            self.cluster.routed_entry(acc, self, subject, reply, queues, -1, payload)

    def proto_hmsg(self, account: bytes, subject: bytes, reply: bytes | None, queues: tuple, hdr_len: int,
                   msg: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(msg)
        acc = self._account(account)
        if acc is not None:
            self.cluster.routed_entry(acc, self, subject, reply, queues, hdr_len, msg)

    def proto_lmsg(self, origin: bytes, account: bytes, subject: bytes, reply: bytes | None, queues: tuple,
                   hdr_len: int, msg: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(msg)
        acc = self._account(account)
        if acc is not None:
            self.lmsg_origin = origin  # (leaf connections of that cluster do not get it: rillet.cluster.leaf)
            try:
                self.cluster.routed_entry(acc, self, subject, reply, queues, hdr_len if hdr_len > 0 else -1, msg)
            finally:
                self.lmsg_origin = None

    # ---- writing --------------------------------------------------------------------------------------

    # send_msg: ServerConn's (RMSG/HMSG), or its compiled twin installed below

    def send_lmsg(self, origin: bytes, account: bytes, subject: bytes, reply: bytes | None, queues: list,
                  hdr: int, msg: bytes) -> None:
        """One LMSG to this route: a message from a leaf node of cluster ``origin`` (rillet.cluster.leaf)."""
        if not self.lnoc:
            self.send_msg(account, subject, reply, queues, hdr, msg)
            return
        if hdr >= 0 and not self.headers:
            msg, hdr = msg[hdr:], -1
        out = self.out
        out += _wire.lmsg_head(origin, None if self.pinned_acc else account, subject, reply, queues, max(hdr, 0),
                               len(msg))
        out += msg
        out += _CRLF
        self.out_msgs += 1
        self.out_bytes += len(msg)
        self.flush()

    # ---- timers ---------------------------------------------------------------------------------------

    def _ping_interval(self) -> float:
        return self.cluster.ping_interval()

    def _ping_max(self) -> int:
        return self.cluster.ping_max()

    # ---- monitoring and logging -----------------------------------------------------------------------

    def monitor_info(self, q: dict) -> dict:
        """This route as nats-server's /routez shows it (RouteInfo)."""
        from rillet.gocompat.monitorfmt import rtt_string, uptime
        now = time.time()
        d: dict[str, Any] = {
            "rid": self.cid, "remote_id": self.remote_id, "remote_name": self.remote_name,
            "did_solicit": self.solicited, "is_configured": self.rtype == EXPLICIT,
            "ip": self.host, "port": self.port,
            "start": format_time(unix_ns(self.start_time)), "last_activity": format_time(unix_ns(self.last_activity)),
        }
        if self.rtt:
            d["rtt"] = rtt_string(self.rtt)[0]
        d.update({"uptime": uptime(now - self.start_time), "idle": uptime(now - self.last_activity),
                  "pending_size": self.pending_bytes(),
                  "in_msgs": self.in_msgs, "out_msgs": self.out_msgs, "in_bytes": self.in_bytes,
                  "out_bytes": self.out_bytes, "subscriptions": len(self.rsubs)})
        detail, plain = q.get("subs", (False, False))
        if self.rsubs and (detail or plain):
            if detail:
                d["subscriptions_list_detail"] = [
                    {"account": acc.name, "account_tag": acc.name, "subject": sub.subject,
                     **({"qgroup": sub.queue} if sub.queue else {}), "sid": "", "msgs": 0, "cid": self.cid}
                    for acc, sub in self.rsubs.values()]
            else:
                d["subscriptions_list"] = [sub.subject for _, sub in self.rsubs.values()]
        for k, p in (("import", self.remote_import), ("export", self.remote_export)):
            if p is not None:
                d[k] = {n: v for n, v in (("allow", p.allow), ("deny", p.deny)) if v is not None}
        if self.pinned_acc:
            d["account"] = self.pinned_acc
        if self.compression:
            d["compression"] = self.compression
        return d

    def __repr__(self) -> str:
        return f"<RouteConn rid:{self.cid} {self.remote_name or self.remote_id} {'solicited' if self.solicited else 'accepted'}>"



# the message handlers routes run: ``reference_send_msg`` and ``reference_proto_rmsg`` (the methods above, the
# reference and the pure lane's) or, in the compiled lane, their twins in rillet._speedups._cdeliver
reference_send_msg = RouteConn.send_msg
reference_proto_rmsg = RouteConn.proto_rmsg
lane.use_compiled_methods(RouteConn, "rillet._speedups._cdeliver", send_msg="route_send_msg",
                          proto_rmsg="route_proto_rmsg")
