"""One gateway connection: the asyncio layer around the sans-IO gateway parser (rillet.cluster.protocol).

nats-server keeps one outbound connection per remote cluster (this server dials it; messages go out on it
and the remote's interest comes back on it: RS+/RS-/A+/A-) and accepts any number of inbound ones (the
remote servers' outbound connections: messages come in on them and this cluster's interest goes out on
them). Both directions are this class; ``outbound`` tells which. The handshake and the interest and
message logic are the manager's (``rillet.cluster.gateway.Gateway``); this class speaks the protocol and
keeps the per-account interest state of its direction:

* outbound, ``outsim``: per account, None after A- (no interest at all), else an ``OutAccount``: the
  subjects the remote said it has no interest in (``ni``, optimistic mode), or, in interest-only mode,
  every subscription it announced (``sl``; queue subscriptions are always kept there);
* inbound, ``insim``: per account, None after we sent A-, else an ``InAccount``: the subjects we sent RS-
  for (``ni``) and the mode (optimistic, transitioning, interest-only).
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from rillet.cluster import info as ci
from rillet import lane
from rillet.cluster import protocol as cp
from rillet.cluster.conn import ServerConn
from rillet.cluster.routed import RemoteSub
from rillet.server.connstate import count_stale
from rillet.server.delivery import ConnKind
from rillet.subjects.sublist import Sublist
from rillet.gocompat.gotime import format_time, unix_ns
from rillet.subjects.validate import subject_matches_filter

_wire = lane.wire  # the message frame builders of the running lane (rillet.lane)

if TYPE_CHECKING:
    from rillet.cluster.gateway import Gateway, RemoteCfg

GATEWAY_KIND = ConnKind.GATEWAY
GATEWAY_HIGH_WATER = 4 << 20
FIRST_PING_INTERVAL = 1.0  # nats-server's firstPingInterval

OPTIMISTIC = 0
TRANSITIONING = 1
INTEREST_ONLY = 2
MODE_NAMES = {OPTIMISTIC: "Optimistic", TRANSITIONING: "Transitioning", INTEREST_ONLY: "Interest-Only"}

_CRLF = b"\r\n"


class OutAccount:
    """What the remote told this outbound connection about one account."""
    __slots__ = ("mode", "ni", "sl", "qsubs", "subs")

    def __init__(self, ni: bool = True) -> None:
        self.mode = OPTIMISTIC
        self.ni: set[str] | None = set() if ni else None
        self.sl = Sublist()  # (matched per message sent: the cache, as the accounts')
        self.qsubs = 0
        self.subs: dict[tuple, RemoteSub] = {}


class InAccount:
    """What this inbound connection told the remote about one account."""
    __slots__ = ("mode", "ni")

    def __init__(self, ni: set[str] | None = None) -> None:
        self.mode = OPTIMISTIC
        self.ni = ni


class GatewayConn(ServerConn):
    kind = GATEWAY_KIND
    id_tag = "gid"
    role_word = "Gateway"
    close_names_remote = True  # (nats-server: " - Remote: <server name>" once the first INFO gave it)

    def __init__(self, gw: "Gateway", cfg: "RemoteCfg | None" = None, url: Any = None) -> None:
        super().__init__(gw.server)
        self.gw = gw
        self.outbound = cfg is not None
        self.cfg = cfg
        self.url = url  # (host, port, user, password) dialled
        self.name = cfg.name if cfg is not None else ""  # the remote gateway (cluster) name
        self.connected = False  # inbound: CONNECT received
        self.iom = False  # outbound: the remote switches every account to interest-only at once
        self.use_old_prefix = False
        self.outsim: dict[bytes, OutAccount | None] = {}
        self.insim: dict[bytes, InAccount | None] = {}
        self.parser = lane.ServerParser(self, cp.GATEWAY, max_control_line=self.server.opts.max_control_line)

    # ---- lifecycle ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        gw = self.gw
        if not self._admit(transport, gw, gw.running, GATEWAY_HIGH_WATER, no_reconnect=True):
            return
        srv = self.server
        log = srv.log
        if self.outbound:
            assert self.cfg is not None
            self.cfg.attempts += 1
            log.notice(f'{self.log_prefix()} - Creating outbound gateway connection to "{self.name}"')
            if not self.tls_checked("gateway", gw.pins(self), no_reconnect=False):
                return
            # CONNECT and INFO go once the remote's INFO has arrived; until then only a stale check: closed
            # when no INFO came within ping_max + 1 ping intervals (nats-server's watchForStaleConnection)
            self._ping_timer = srv.loop.call_later(gw.ping_interval() * (self._ping_max() + 1), self._no_info)
        else:
            log.notice(f"{self.log_prefix()} - Processing inbound gateway connection")
            if not self.tls_checked("gateway", gw.pins(self), no_reconnect=True):
                return
            self.parser.awaiting_connect = True
            self._auth_timer = srv.loop.call_later(auth_timeout(gw.opts), self._auth_timeout)
            self.out += gw.info_frame()
            self.flush()
            srv.flush_clients()

    def _write_deadline(self) -> float:
        return self.gw.opts.write_deadline or self.server.opts.write_deadline

    def _write_timeout(self) -> str:
        return self.gw.opts.write_timeout or "retry"

    def _closed(self) -> None:
        for acc, e in self.outsim.items():
            if e is not None:
                for sub in e.subs.values():
                    self._leaf_interest(acc, sub, False)
                e.subs.clear()
        self.gw.conn_closed(self)

    # ---- reading --------------------------------------------------------------------------------------

    # ---- handshake ------------------------------------------------------------------------------------

    def proto_connect(self, arg: bytes) -> None:
        if self.outbound:
            return
        co = ci.decode_route_connect(arg)
        gw = self.gw
        log = self.server.log
        if not co.gateway:
            log.error(f"{self.log_prefix()} - {ci.ERR_NOT_GATEWAY}")
            self.close("Wrong Port", ci.ERR_NOT_GATEWAY, no_reconnect=True)
            return
        o = gw.opts
        if not self._authorized(o, co, [u for r in o.gateways for u in r.urls]):  # (the known gateway URLs)
            return
        if o.reject_unknown and co.gateway not in gw.remotes:
            log.error(f'{self.log_prefix()} - Rejecting connection from gateway "{co.gateway}"')
            self.close("Wrong Gateway", ci.err_gateway_rejected(gw.name), no_reconnect=True)
            return
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.parser.awaiting_connect = False
        self.connected = True
        self.headers = co.headers and not self.server.opts.no_header_support
        self.first_ping()

    def proto_info(self, arg: bytes) -> None:
        info = ci.decode_info(arg)
        self.gw.process_info(self, info)

    def proto_pong(self) -> None:
        measured = self._rtt_start
        super().proto_pong()
        if measured and self.outbound and self.registered:  # outbound gateways are used lowest RTT first (queues)
            self.gw.outo.sort(key=_rtt)

    def proto_err(self, arg: bytes) -> None:
        text = arg.decode("utf-8", "replace")
        self.server.log.error(f"{self.log_prefix()} - Gateway Error {text}")
        self.close("Parse Error")

    # ---- interest (outbound: the remote's) -------------------------------------------------------------

    def _inbound_violation(self, op: str) -> bool:
        if self.outbound:
            return False
        self.server.log.error(f"{self.log_prefix()} - Received {op} from gateway on inbound connection")
        self.close("Protocol Violation")
        return True

    def proto_account_unsub(self, account: bytes) -> None:
        if self._inbound_violation("A-"):
            return
        acc = bytes(account)
        e = self.outsim.get(acc)
        if e is not None and e.qsubs > 0:
            e.ni = set()  # queue interest stays; plain interest is gone
            return
        self.outsim[acc] = None
        if e is not None:
            for sub in e.subs.values():
                self._leaf_interest(acc, sub, False)

    def proto_account_sub(self, account: bytes) -> None:
        if self._inbound_violation("A+"):
            return
        acc = bytes(account)
        if acc in self.outsim:
            e = self.outsim[acc]
            if e is None or e.qsubs == 0:
                del self.outsim[acc]

    def proto_rs_sub(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        if self._inbound_violation("RS+"):
            return
        acc = bytes(account)
        subj = subject.decode("utf-8", "surrogateescape")
        e = self.outsim.get(acc)
        if e is None:
            if queue is None:
                return  # plain interest in an account we were told nothing (or A-) about: sends go anyway
            e = OutAccount()
            new = True
            use_sl = True
        else:
            new = False
            use_sl = queue is not None or e.mode != OPTIMISTIC
        if use_sl:
            key = (subject, queue)
            if key in e.subs:
                return
            q = queue.decode("utf-8", "surrogateescape") if queue else None
            sub = RemoteSub(self, subj, q, max(weight, 1) if queue else 0, None)
            try:
                e.sl.insert(sub)
            except ValueError as err:
                self.server.log.error(f"{self.log_prefix()} - gateway subscription on invalid subject {subj!r} "
                                      f"refused: {err}")
                return
            e.subs[(bytes(subject), bytes(queue) if queue else None)] = sub
            if queue:
                e.qsubs += 1
            if new:
                self.outsim[acc] = e
            self.gw.remote_queue_interest_changed()
            self._leaf_interest(acc, sub, True)
            self._watched_interest(acc, subj)
        elif e.ni is not None:
            if "*" in subj or ">" in subj:
                for k in [k for k in e.ni if subject_matches_filter(k, subj)]:
                    e.ni.discard(k)
            else:
                e.ni.discard(subj)

    def proto_rs_unsub(self, account: bytes, subject: bytes, queue: bytes | None) -> None:
        if self._inbound_violation("RS-"):
            return
        acc = bytes(account)
        e = self.outsim.get(acc)
        if e is None:
            if queue is not None:
                self.debug(f"Received RS- without prior RS+ for subject {subject!r}, queue {queue!r}")
                return
            if acc in self.outsim:
                return  # A- received before: no interest at all already
            e = OutAccount()
            e.ni.add(subject.decode("utf-8", "surrogateescape"))  # type: ignore[union-attr]
            self.outsim[acc] = e
            return
        if queue is not None or e.mode != OPTIMISTIC:
            sub = e.subs.pop((bytes(subject), bytes(queue) if queue else None), None)
            if sub is None:
                return
            e.sl.remove(sub)
            if queue:
                e.qsubs -= 1
            if e.sl.count() == 0 and e.mode == OPTIMISTIC and not e.ni:
                del self.outsim[acc]
            self.gw.remote_queue_interest_changed()
            self._leaf_interest(acc, sub, False)
            self._watched_interest(acc, sub.subject)
        elif e.ni is not None:
            e.ni.add(subject.decode("utf-8", "surrogateescape"))

    def _watched_interest(self, acc: bytes, subject: str) -> None:
        """The remote cluster's interest in ``subject`` came or went: watchers of a subject it covers (a
        JetStream push consumer's deliver subject, rillet.jetstream.consumer) check their interest again,
        as nats-server's consumers watch gateway interest."""
        if not self.outbound:
            return
        a = self.server.accounts.get(acc.decode("utf-8", "surrogateescape"))
        if a is not None:
            a.remote_interest(subject)

    def _leaf_interest(self, acc: bytes, sub: RemoteSub, added: bool) -> None:
        """The remote cluster's interest (outbound, interest-only) goes on to the leafs this server is hub for,
        as nats-server's updateInterestForAccountOnGateway does."""
        ln = self.server.leafnodes
        if ln is None or not self.outbound:
            return
        a = self.gw.lookup_account(acc)
        if a is not None:
            ln.sub_changed(a, sub, added)

    def interest(self, acc: bytes, subject: str) -> tuple[bool, Any]:
        """(plain interest possible, sublist result of the remote's announced subscriptions or None)."""
        outsim = self.outsim
        if acc not in outsim:
            return not self.iom, None
        e = outsim[acc]
        if e is None:
            return False, None
        psi = not self.iom and e.ni is not None and subject not in e.ni
        r = None
        if e.ni is None or e.qsubs > 0:
            r = e.sl.match(subject)
            if r.psubs:
                psi = True
            elif not r.qsubs:
                r = None
        return psi, r

    # the remote switched an account to interest-only mode (INFO gateway_cmd)

    def all_subs_start(self, account: bytes) -> None:
        self.debug(f'Gateway "{self.name}": switching account "{account.decode(errors="replace")}" to '
                   f"Interest-Only mode")
        e = self.outsim.get(account)
        if e is None:
            e = OutAccount(ni=False)
            self.outsim[account] = e
        e.mode = TRANSITIONING

    def all_subs_complete(self, account: bytes) -> None:
        e = self.outsim.get(account)
        if e is not None:
            e.ni = None
            e.mode = INTEREST_ONLY
            self.debug(f'Gateway "{self.name}": switching account "{account.decode(errors="replace")}" to '
                       f"Interest-Only mode complete")

    # ---- messages (inbound) ---------------------------------------------------------------------------

    def proto_rmsg(self, account: bytes, subject: bytes, reply: bytes | None, queues: tuple, payload: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload)
        self.gw.inbound_msg(self, account, subject, reply, queues, -1, payload)

    def proto_hmsg(self, account: bytes, subject: bytes, reply: bytes | None, queues: tuple, hdr_len: int,
                   msg: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(msg)
        self.gw.inbound_msg(self, account, subject, reply, queues, hdr_len, msg)

    # ---- writing --------------------------------------------------------------------------------------

    # send_msg: ServerConn's (RMSG/HMSG, as a route's)

    # ---- timers ---------------------------------------------------------------------------------------

    def first_ping(self) -> None:
        """The first PING goes out soon after the handshake (as nats-server's first ping timer), the next
        ones every ping interval: the RTT is known early."""
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        self._ping_timer = self.server.loop.call_later(min(FIRST_PING_INTERVAL, self.gw.ping_interval()),
                                                       self._ping_tick)

    def _no_info(self) -> None:
        self._ping_timer = None
        if not self.closed and not self.info_received:
            self.server.log.debug(f"{self.log_prefix()} - Stale Client Connection - Closing")
            count_stale(self.server, self)
            self.close("Stale Connection", "Stale Connection")

    def _ping_interval(self) -> float:
        return self.gw.ping_interval()

    def _ping_max(self) -> int:
        return self.server.opts.ping_max or 2

    def _ping_now(self) -> bool:
        return self.registered or self.connected  # (an outbound sends nothing before its CONNECT)

    # ---- monitoring and logging -----------------------------------------------------------------------

    def monitor_info(self, q: dict) -> dict:
        """This connection as nats-server's /gatewayz shows it (RemoteGatewayz)."""
        from rillet.gocompat.monitorfmt import rtt_string, uptime
        now = time.time()
        d: dict[str, Any] = {"configured": bool(self.outbound and self.cfg is not None and not self.cfg.implicit)}
        conn: dict[str, Any] = {
            "cid": self.cid, "kind": "Gateway", "ip": self.host, "port": self.port,
            "start": format_time(unix_ns(self.start_time)), "last_activity": format_time(unix_ns(self.last_activity)),
            "rtt": rtt_string(self.rtt)[0] if self.rtt else "0s",
            "uptime": uptime(now - self.start_time), "idle": uptime(now - self.last_activity),
            "pending_bytes": self.pending_bytes(),
            "in_msgs": self.in_msgs, "out_msgs": self.out_msgs, "in_bytes": self.in_bytes,
            "out_bytes": self.out_bytes,
            "subscriptions": sum(len(e.subs) for e in self.outsim.values() if e is not None),
        }
        if self.remote_id:
            conn["name"] = self.remote_id
        self.tls_monitor_fields(conn)
        d["connection"] = conn
        if q.get("accs"):
            accs = self.accounts_info(q)
            if accs:
                d["accounts"] = accs
        return d

    def accounts_info(self, q: dict) -> list[dict]:
        from rillet.cluster.gateway import MAX_RUNSUB_BEFORE_SWITCH
        only = q.get("acc_name") or ""
        out = []
        detail, plain = q.get("subs", (False, False))
        table: dict[bytes, Any] = self.outsim if self.outbound else self.insim  # type: ignore[assignment]
        for name, e in table.items():
            n = name.decode("utf-8", "replace")
            if only and n != only:
                continue
            a: dict[str, Any] = {"name": n, "interest_mode": MODE_NAMES[e.mode if e is not None else OPTIMISTIC]}
            if e is not None and e.ni:
                a["no_interest_count"] = len(e.ni)
            a["interest_only_threshold"] = MAX_RUNSUB_BEFORE_SWITCH
            if self.outbound and e is not None:
                if e.subs:
                    a["num_subs"] = len(e.subs)
                if e.qsubs:
                    a["num_queue_subs"] = e.qsubs
                if e.subs and plain:
                    a["subscriptions_list"] = [s.subject for s in e.subs.values()]
                elif e.subs and detail:
                    a["subscriptions_list_detail"] = [
                        {"account": n, "account_tag": n, "subject": s.subject,
                         **({"qgroup": s.queue} if s.queue else {}), "sid": "", "msgs": 0, "cid": self.cid}
                        for s in e.subs.values()]
            out.append(a)
        return out

    def __repr__(self) -> str:
        return f"<GatewayConn gid:{self.cid} {self.name} {'outbound' if self.outbound else 'inbound'}>"


def auth_timeout(g: Any) -> float:
    """Seconds an inbound connection has to send its CONNECT: the authorization timeout, else nats-server's
    default for gateways (the tls timeout + 1 s with TLS, else 2 s)."""
    if g.auth_timeout:
        return g.auth_timeout
    return (g.tls.timeout + 1.0) if g.tls is not None else 2.0


def _rtt(c: GatewayConn) -> float:
    return c.rtt
