"""One leaf node connection (LeafConn), either side: its handshake, authentication and permissions,
interest (LS+/LS-) and messages (LMSG) on the wire. The leafnode manager, who hears what, and the delivery
steps that forward to leaf connections are rillet.cluster.leaf (its docstring has the rules).
"""
from __future__ import annotations

import asyncio
import json
import ssl
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import rillet.server.msgtrace as _mt
from rillet import compression as cc
from rillet.cluster import info as ci
from rillet import lane
from rillet.cluster import protocol as cp
from rillet.compression import CompressionConfig
from rillet.cluster.conn import ServerConn
from rillet.cluster.interest import LocalInterest, RemoteInterest
from rillet.cluster.routed import RemoteSub
from rillet.protocol.parser import ProtocolError
from rillet.server.operator import expiry_delay
from rillet.server import ocsp
from rillet.server.tls import client_context, start_tls_after_info
from rillet.server.delivery import ConnKind
from rillet.subjects.validate import subject_matches_filter

_wire = lane.wire  # the message frame builders of the running lane (rillet.lane)

if TYPE_CHECKING:
    from rillet.cluster.leaf import LeafNodes
    from rillet.config.leaf_section import RemoteLeafOptions

LEAF_KIND = ConnKind.LEAF
ROUTER_KIND = ConnKind.ROUTER
GATEWAY_KIND = ConnKind.GATEWAY
LOOP_DELAY = 30.0  # nats-server's leafNodeReconnectDelayAfterLoopDetected
PERM_DELAY = 30.0  # leafNodeReconnectAfterPermViolation
SAME_CLUSTER_DELAY = 30.0
MIN_VERSION_DELAY = 5.0  # leafNodeMinVersionReconnectDelay
LEAF_DIAL_TIMEOUT = 1.0
FIRST_INFO_TIMEOUT = 1.0
JS_DENY = ("$JS.API.>", "$KV.>", "$OBJ.>")  # nats-server's denyAllClientJs
ERR_SAME_CLUSTER = "remote leafnode has same cluster name"
ERR_WRONG_PORT = "attempted to connect to leaf node port"
AUTH_VIOLATION = "Authorization Violation"
_CRLF = b"\r\n"
_DENY_CACHE_MAX = 4096


class _Deny:
    """What one direction of a leaf connection lets through: deny patterns, and an allow list (None: all
    allowed) from a user's permissions, with a small cache of subjects checked against them. ``hit``: the
    subject is not let through. A wildcard subject (interest to announce) passes an allow entry that covers
    it or that it covers, as nats-server lets leafs announce broader interest and filters messages later;
    permission entries with a queue group do not apply to leaf connections (nats-server checks subjects)."""

    __slots__ = ("patterns", "allow", "_cache")

    def __init__(self, patterns: list[str], allow: list[str] | None = None) -> None:
        self.patterns = list(dict.fromkeys(patterns))
        self.allow = allow
        self._cache: dict[bytes, bool] = {}

    def __bool__(self) -> bool:
        return bool(self.patterns) or self.allow is not None

    def hit(self, subject: bytes) -> bool:
        v = self._cache.get(subject)
        if v is None:
            s = subject.decode("utf-8", "surrogateescape")
            v = any(subject_matches_filter(s, p) for p in self.patterns)
            if not v and self.allow is not None:
                wild = "*" in s or ">" in s
                v = not any(subject_matches_filter(s, p) or (wild and subject_matches_filter(p, s))
                            for p in self.allow)
            if len(self._cache) >= _DENY_CACHE_MAX:
                self._cache.clear()
            self._cache[bytes(subject)] = v
        return v

    def add(self, patterns) -> None:
        for p in patterns:
            if " " in p:
                continue  # (a queue-group entry)
            if p not in self.patterns:
                self.patterns.append(p)
        self._cache.clear()

    def add_perm(self, perm: Any) -> None:
        """A permission's allow (narrowing what is allowed already) and deny lists."""
        if perm is None:
            return
        if perm.allow is not None:
            allow = [p for p in perm.allow if " " not in p]
            self.allow = allow if self.allow is None else [p for p in self.allow if p in allow]
        if perm.deny:
            self.add(perm.deny)
        self._cache.clear()


class LeafConn(ServerConn):
    """One leaf node connection (either side)."""

    kind = LEAF_KIND
    id_tag = "lid"
    role_word = "Leafnode"

    def __init__(self, mgr: "LeafNodes", remote: "RemoteState | None" = None) -> None:
        super().__init__(mgr.server)
        self.mgr = mgr
        self.remote = remote  # the remote we solicited (None: accepted on the leafnode port)
        self.solicited = remote is not None
        # the peer is our hub: we solicited it (unless the remote says "hub: true": then we are its hub), or it
        # solicited us declaring itself a hub (CONNECT is_hub)
        self.spoke = remote is not None and not remote.opts.hub
        self.connect_sent = False
        self.account: Any = None
        self.acc_name = ""
        self.remote_cluster = ""
        self.remote_domain = ""
        self.remote_account = ""
        self.nonce = b""
        self.tls = False
        # interest isolation (nats-server 2.12): the interest of other leaf connections is not sent to this one
        # (the leafnodes block's isolate, the remote's own isolate, or the peer's CONNECT asking for it)
        self.isolated = mgr.opts.isolate or (remote is not None and remote.opts.local_isolation)
        self._comp_info = False  # (leaf side) switched to s2: the hub's next INFO is taken as its first
        self.deny_out = _Deny([])  # messages we do not send to the peer (and its literal interest we ignore)
        self.deny_in = _Deny([])  # messages from the peer we drop (and our interest we do not announce)
        # hub side, a leaf user with permissions (nats-server reverses them on the hub): what the leaf may
        # publish (its LMSG; else a violation closes it) and subscribe to (its LS+ on literal subjects)
        self.user_pub: _Deny | None = None
        self.user_sub: _Deny | None = None
        self.perms_info: tuple | None = None  # (import, export) sent to the leaf in INFO
        self.jwt_user: Any = None  # operator mode: the user JWT the leaf authenticated with
        self.proxy_key = ""  # the trusted proxy this leaf came through (proxies { trusted })
        self.auth_failure = ""  # why authorize() refused it, when not a credentials mismatch (the close reason)
        self.jwt_timer: asyncio.TimerHandle | None = None
        self.msubs = -1  # most subscriptions the peer may announce (operator mode limits; -1: no limit)
        self.smap = LocalInterest()  # what we announced to the peer (account key unused: b"")
        self.remote_interest = RemoteInterest()
        self.rsubs: dict[tuple, RemoteSub] = {}
        self.parser = lane.ServerParser(self, cp.LEAF, max_control_line=self.server.opts.max_control_line,
                                        max_payload=self.server.opts.max_payload)

    # ---- lifecycle ------------------------------------------------------------------------------------

    @property
    def conn_type(self) -> str:
        """The connection type a user JWT's allowed_connection_types names."""
        t = self.transport
        return "LEAFNODE_WS" if t is not None and t.get_extra_info("websocket") is not None else "LEAFNODE"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        mgr = self.mgr
        if not self._admit(transport, mgr, mgr.running):
            return
        srv = self.server
        log = srv.log
        if self.solicited:
            if transport.get_extra_info("ssl_object") is not None and transport.get_extra_info("websocket") is None:
                if not self._tls_first(transport, self.remote.opts.tls, False):  # (the remote's handshake_first)
                    return
            acc = self.remote.opts.account or "$G"
            if mgr.bind_account(acc) is None:
                # (operator mode: the account's JWT is not in the resolver yet; tried again after the delay)
                log.error(f"Unable to lookup account {acc} for solicited leafnode connection: account missing")
                self.close("Missing Account")
                return
            if mgr.leafs_at_limit(acc):
                log.error(f"{self.log_prefix()} - maximum account active connections exceeded")
                self.close("Maximum Account Connections Exceeded")
                return
            log.notice(f"{self.log_prefix()} - Leafnode connection created for account: {acc}")
            # wait for the hub's INFO; then CONNECT
            self._auth_timer = srv.loop.call_later(self.remote.opts.first_info_timeout or FIRST_INFO_TIMEOUT * 2,
                                                   self._info_timeout)
        else:
            log.notice(f"{self.log_prefix()} - Leafnode connection created")
            self.nonce = srv.make_nonce()
            self.parser.awaiting_connect = True
            # compression configured: the leaf may send an INFO (its compression) before its CONNECT
            self.parser.info_before_connect = cc.needs_compression(mgr.comp_config(None).mode) and \
            not self._websocket()
            tls = mgr.tls_server is not None and transport.get_extra_info("websocket") is None
            if tls and transport.get_extra_info("ssl_object") is not None:
                tls = False  # (tls { handshake_first }: the handshake came before this INFO)
                if not self._tls_first(transport, mgr.opts.tls, True):
                    return
            if tls:
                transport.pause_reading()  # (the leaf's next bytes are its TLS handshake)
            self.out += cp.info_frame(mgr.hub_info(self))
            self._auth_timer = srv.loop.call_later(mgr.auth_timeout(), self._auth_timeout)
            self.flush()
            srv.flush_clients()
            if tls:
                srv.loop.create_task(self._start_tls(mgr.tls_server, True, None, None))

    async def _start_tls(self, ctx: Any, server_side: bool, hostname: str | None, info: Any) -> None:
        """TLS after the INFO, as nats-server does on leaf connections (the INFO goes out in the clear)."""
        srv = self.server
        cfg = self.mgr.opts.tls if server_side else self.remote.opts.tls
        timeout = (cfg.timeout if cfg is not None else 0.0) or 2.0
        hold = _Hold()  # what arrives before start_tls returns (a CONNECT right after the handshake)
        new_t = await start_tls_after_info(self, hold, ctx, timeout, server_side, hostname)
        if new_t is None:
            return
        self.tls = True
        peer_cfg = getattr(cfg, "ocsp_peer", None)
        if peer_cfg is not None and peer_cfg.verify and not await self._ocsp_peer_ok(new_t, peer_cfg, server_side):
            new_t.set_protocol(self)
            self.close("TLS Handshake Failure")
            return
        new_t.set_protocol(self)
        if not self.tls_checked("leafnode", self.pins(), no_reconnect=False):  # (pinned_certs)
            return
        if info is not None:
            self._negotiate(info, halt=False)
            srv.flush_clients()
        if hold.data:
            self.data_received(b"".join(hold.data))
        if hold.lost is not None:
            self.connection_lost(hold.lost[0])

    def pins(self) -> list[str]:
        """The keys the peer's certificate must have (``pinned_certs``; none pinned: []): the leafnodes tls {}
        block's, on both sides, as nats-server; a remote's own too on its connections (nats-server parses
        and ignores those; Rillet checks them, as a gateway's)."""
        t = self.mgr.opts.tls
        pins = list(t.pinned_certs) if t is not None else []
        if self.solicited and self.remote is not None and self.remote.opts.tls is not None:
            pins += self.remote.opts.tls.pinned_certs
        return pins

    def _tls_first(self, transport: Any, cfg: Any, server_side: bool) -> bool:
        """The connection did its TLS handshake first (``handshake_first``): no upgrade after the INFO; the peer's
        key checked against ``pinned_certs`` (False: closed), and its certificate with its CA's OCSP responder
        (``ocsp_peer``) before anything is read, as after one."""
        self.tls = True
        if not self.tls_checked("leafnode", self.pins(), no_reconnect=False):
            return False
        peer_cfg = getattr(cfg, "ocsp_peer", None)
        if peer_cfg is None or not peer_cfg.verify:
            return True
        transport.pause_reading()

        async def check() -> None:
            if not await self._ocsp_peer_ok(transport, peer_cfg, server_side):
                self.close("TLS Handshake Failure")
            elif not self.closed:
                transport.resume_reading()
        self.server.loop.create_task(check())
        return True

    async def _ocsp_peer_ok(self, t: Any, cfg: Any, server_side: bool) -> bool:
        """ocsp_peer on a leaf connection: the leaf's certificate (hub side) or the hub's (the remote's
        side) checked with its CA's responder before anything else goes over the connection."""
        srv = self.server
        reason = ocsp.CLIENT_REJECT if server_side else ocsp.SERVER_REJECT
        if await srv.ocsp_checker().check_ssl(t.get_extra_info("ssl_object"), cfg, "Leafnode", reason):
            return True
        srv.log.error(f"{self.log_prefix()} - TLS handshake error: {reason}")
        return False

    def dial_failed(self, exc: Exception | None) -> None:
        """The websocket upgrade did not complete (rillet.cluster.leaf_ws): try again later."""
        if not self.closed:
            self.closed = True
            self.mgr.conn_closed(self)

    def _timers(self) -> tuple[Any, ...]:
        return (*super()._timers(), self.jwt_timer)

    def _closed(self) -> None:
        self._drop_remote_interest()
        self.mgr.conn_closed(self)

    def _write_deadline(self) -> float:
        return self.mgr.opts.write_deadline or self.server.opts.write_deadline

    def _write_timeout(self) -> str:
        return self.mgr.opts.write_timeout or "retry"

    # ---- reading --------------------------------------------------------------------------------------

    def _parse_failed(self, e: ProtocolError) -> None:
        if not self.closed:  # (what follows a refused CONNECT in the same read is not reported again)
            super()._parse_failed(e)

    def proto_before_connect(self) -> bool:
        return False  # (data_received logs the authentication error once)

    # ---- handshake ------------------------------------------------------------------------------------

    def proto_info(self, arg: bytes) -> None:
        info = ci.decode_info(arg)
        if not self.solicited:
            # an accepting side reads the INFO of compression negotiation only (before the CONNECT)
            if not self.comp_negotiated and self.parser.awaiting_connect:
                self._hub_negotiate(info)
            return
        log = self.server.log
        if self._comp_info:  # the hub's INFO after the switch to s2 (with the nonce): CONNECT now
            self._comp_info = False
            self._send_connect(info)
            return
        if not self.info_received:
            self.info_received = True
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None
            if info.client_id == 0 or info.leafnode_urls is None:
                log.error(f"{self.log_prefix()} - {ERR_WRONG_PORT}")
                self.close("Wrong Port")
                return
            if info.cluster and " " in info.cluster:
                self.close("Protocol Violation", "Invalid cluster name")
                return
            ctx = self.remote.tls_ctx
            ws = self.transport.get_extra_info("websocket") is not None  # (TLS under the websocket)
            if not ws and not self.tls and (info.tls_required or ctx is not None):
                if ctx is None:
                    ctx = self.remote.tls_ctx = client_tls_context(None)
                self.transport.pause_reading()
                host = urlsplit(self.remote.urls[self.remote.index]).hostname
                self.server.loop.create_task(self._start_tls(ctx, False, host, info))
                return
            self._negotiate(info, halt=True)
            return
        if info.remote_account:
            self.remote_account = info.remote_account
        found = self._discovered(info)
        if found:
            self.remote.learn(found)
        if info.connect_info and not self.registered:
            self._finish_solicited(info)

    def _discovered(self, info: ci.Info) -> list[str]:
        """The URLs an INFO tells a remote about: its ``ws_connect_urls`` for a websocket remote, else its
        ``leafnode_urls`` (nats-server's updateLeafNodeURLs)."""
        ws = urlsplit(self.remote.urls[self.remote.index]).scheme.lower() in ("ws", "wss")
        return (info.ws_connect_urls if ws else info.leafnode_urls) or []

    def _negotiate(self, info: ci.Info, halt: bool) -> None:
        """The leaf side after the hub's first INFO (and TLS): compression as nats-server negotiates it,
        then the CONNECT (at once, or after the hub's compressed INFO)."""
        cfg = self.mgr.comp_config(self.remote)
        if self._websocket():
            cfg = CompressionConfig(cc.OFF)  # (s2 is not layered under websocket frames here: README)
        if not cc.needs_compression(cfg.mode):
            self.compression = cc.NOT_SUPPORTED if not info.compression or cfg.mode == cc.NOT_SUPPORTED else cc.OFF
        elif not self.comp_negotiated:
            self.comp_negotiated = True
            sel = self.select_compression(cfg, info.compression)
            if sel is None:
                return
            self.compression = sel[0]
            if cc.needs_compression(sel[0]):
                self._comp_info = True
                frame = cp.info_frame(self.mgr.hub_info(self, compression=cc.info_mode(cfg, sel[0])))
                self.start_s2(sel[0], sel[1], frame, info_first=True, halt=halt)
                return
        self._send_connect(info)

    def _websocket(self) -> bool:
        t = self.transport
        return t is not None and t.get_extra_info("websocket") is not None

    def _hub_negotiate(self, info: ci.Info) -> None:
        """The hub side: the leaf's INFO before its CONNECT asks for compression (nats-server's
        negotiateLeafCompression): when the selected mode compresses, this side switches and sends its INFO
        compressed; the CONNECT follows (compressed)."""
        self.comp_negotiated = True
        cfg = self.mgr.comp_config(None)
        if not cc.needs_compression(cfg.mode):
            self.compression = cc.NOT_SUPPORTED if not info.compression or cfg.mode == cc.NOT_SUPPORTED else cc.OFF
            return
        sel = self.select_compression(cfg, info.compression)
        if sel is None:
            return
        self.compression = sel[0]
        if cc.needs_compression(sel[0]):
            frame = cp.info_frame(self.mgr.hub_info(self, compression=cc.info_mode(cfg, sel[0])))
            self.start_s2(sel[0], sel[1], frame, info_first=False)

    def _send_connect(self, info: ci.Info) -> None:
        """The hub's first INFO has been read (and TLS is up when needed): CONNECT, then registration."""
        log = self.server.log
        for u in self.remote.learn(self._discovered(info)):
            log.debug(f"{self.log_prefix()} - Discovered leafnode URL {_redact_host(u)}")
        self.nonce = info.nonce.encode()
        self.headers = info.headers and not self.server.opts.no_header_support
        self.remote_name = info.server_name or info.server_id
        self.remote_id = info.server_id
        self.remote_domain = info.domain
        self.remote_cluster = info.cluster
        try:
            self.out += cp.connect_frame(self.mgr.leaf_connect(self))
        except (OSError, ValueError) as e:
            log.error(f"{self.log_prefix()} - {e}")
            self.close("Write Error")
            return
        self.connect_sent = True
        log.debug(f"{self.log_prefix()} - Remote leafnode connect msg sent")
        self.flush()
        if not info.info_on_connect or info.connect_info:
            self._finish_solicited(info)

    def _finish_solicited(self, info: ci.Info) -> None:
        if info.remote_account:
            self.remote_account = info.remote_account
        # the permissions the hub applies to us, enforced here too (nats-server: export is what we may
        # publish, import what we may subscribe to)
        self.deny_out.add_perm(info.export)
        self.deny_in.add_perm(info.import_)
        self.mgr.register(self)

    def proto_connect(self, arg: bytes) -> None:
        if self.solicited:
            return
        log = self.server.log
        try:
            raw = json.loads(arg)
        except ValueError:
            raw = None
        co = ci.decode_leaf_connect(arg)
        # authorization (and the account binding) first, then the leaf checks, as nats-server's processConnect
        acc_name = self.mgr.authorize(self, co, raw if isinstance(raw, dict) else {})
        if acc_name is None:
            log.error(f"{self.log_prefix()} - authentication error" + (f' - User "{co.user}"' if co.user else ""))
            self.close(self.auth_failure or "Authentication Failure", AUTH_VIOLATION)
            return
        self.account = self.mgr.bind_account(acc_name)
        if self.account is None:
            log.error(f"{self.log_prefix()} - Unable to lookup account {acc_name}: account missing")
            self.close("Missing Account", AUTH_VIOLATION)
            return
        self.acc_name = acc_name
        if self.mgr.leafs_at_limit(acc_name):
            log.error(f"{self.log_prefix()} - maximum account active connections exceeded")
            self.close("Maximum Account Connections Exceeded", "maximum account active connections exceeded")
            return
        if isinstance(raw, dict) and raw.get("lang"):
            log.error(f"{self.log_prefix()} - {ERR_WRONG_PORT}")
            self.close("Wrong Port", ERR_WRONG_PORT)
            return
        if co.cluster and " " in co.cluster:
            self.close("Protocol Violation", "Invalid cluster name")
            return
        cl = self.server.cluster
        if cl is not None and co.cluster and co.cluster == cl.name:
            log.error(f"{self.log_prefix()} - {ERR_SAME_CLUSTER}")
            self.close("Cluster Names Identical", ERR_SAME_CLUSTER)
            return
        if co.gateway:
            text = f'Rejecting connection from gateway "{co.gateway}" on the leafnode port'
            log.error(f"{self.log_prefix()} - {text}")
            self.close("Wrong Gateway", text)
            return
        mv = self.mgr.opts.min_version
        if mv:
            from rillet.config.leaf_section import semver
            have = semver(co.version)
            if have is None or have < semver(mv):
                # (an INFO first, so that recent leafs process the refusal, as nats-server)
                self.out += cp.info_frame(self.mgr.hub_info(self, connect_info=True))
                text = f'connection rejected since minimum version required is "{mv}"'
                log.error(f"{self.log_prefix()} - {text}")
                self.close("Minimum Version Required", text)
                return
        if co.is_hub:
            self.spoke = True  # the soliciting side is the hub: we take the spoke role
        self.isolated = self.isolated or co.isolate
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.parser.awaiting_connect = False
        self.headers = co.headers and not self.server.opts.no_header_support
        self.remote_name = co.name or co.server_id
        self.remote_id = co.server_id
        self.remote_cluster = co.cluster
        self.remote_domain = co.domain
        self.remote_account = co.remote_account
        if not self.compression:  # (not negotiated by INFO: what the leaf says it uses)
            self.compression = co.compress_mode or cc.NOT_SUPPORTED
        if co.deny_pub:
            self.deny_out.add(co.deny_pub)
        if self.jwt_user is not None:
            self._jwt_limits()
        # the INFO that tells the leaf the CONNECT was accepted (and the account it is bound to)
        self.out += cp.info_frame(self.mgr.hub_info(self, connect_info=True))
        self.mgr.register(self)

    def apply_user_perms(self, perms: Any) -> None:
        """A leaf user's permissions on the hub side, as nats-server applies them: the user's publish
        permission is what the leaf may send us (and the interest we announce to it), its subscribe
        permission what we send to the leaf (and the interest it may announce); the leaf learns both in the
        INFO that accepts its CONNECT (``import``: subscribe, ``export``: publish) and enforces them too."""
        if perms is None or (perms.publish is None and perms.subscribe is None):
            return
        if perms.publish is not None:
            self.user_pub = _Deny([])
            self.user_pub.add_perm(perms.publish)
            self.deny_in.add_perm(perms.publish)
        if perms.subscribe is not None:
            self.user_sub = _Deny([])
            self.user_sub.add_perm(perms.subscribe)
            self.deny_out.add_perm(perms.subscribe)

        def wire(p: Any) -> ci.SubjectPermission | None:
            return None if p is None else ci.SubjectPermission(allow=p.allow, deny=p.deny or None)
        self.perms_info = (wire(perms.subscribe), wire(perms.publish))

    def _jwt_limits(self) -> None:
        """Operator mode: the lowest of the user JWT's, the account's and the server's payload and
        subscription limits (nats-server's applyAccountLimits for leafs), and the JWT's expiry."""
        u = self.jwt_user
        acc = self.account
        o = self.server.opts

        def lowest(*vals: int) -> int:
            v = [x for x in vals if x is not None and x >= 0]
            return min(v) if v else -1
        mpay = lowest(u.payload, getattr(acc, "mpay", -1), o.max_payload or -1)
        self.parser.max_payload = mpay if mpay >= 0 else None
        self.msubs = lowest(u.subs, getattr(acc, "msubs", -1), o.max_subscriptions or -1)
        delay = expiry_delay(u)
        if delay is not None:
            self.jwt_timer = self.server.loop.call_later(delay, self._jwt_expired)

    def _jwt_expired(self) -> None:
        self.jwt_timer = None
        if not self.closed:
            self.debug("User Authentication Expired")
            self.close("Authentication Expired", "User Authentication Expired")
            self.server.flush_clients()

    def _perm_violation(self, pub: bool, subject: bytes) -> None:
        """A leaf sent what its user's permissions do not allow: -ERR, logged, closed (nats-server's
        leafPermViolation on a hub)."""
        subj = subject.decode("utf-8", "replace")
        action = "Publish" if pub else "Subscription"
        self._set_delay(PERM_DELAY)  # (a hub that dialled, hub: true, waits before it tries again)
        self.server.log.error(f'{self.log_prefix()} - {action} Violation on "{subj}" - Check other side '
                              "configuration")
        self.close("Protocol Violation", f'Permissions Violation for {action} to "{subj}"')

    def proto_err(self, arg: bytes) -> None:
        text = arg.decode("utf-8", "replace").strip().strip("'")
        log = self.server.log
        if "Loop detected" in text:
            delay = self._set_delay(LOOP_DELAY)
            log.error(f"{self.log_prefix()} - "
                      f"{ci.leaf_loop_error(self.acc_name or self._acc_for_log(), int(delay))}")
            self.close("Protocol Violation")
            return
        if "connection rejected since minimum version required is" in text:
            delay = self._set_delay(MIN_VERSION_DELAY)
            log.error(f"{self.log_prefix()} - Leafnode connection dropped due to minimum version requirement. "
                      f"Delaying attempt to reconnect for {int(delay)}s")
            self.close("Minimum Version Required")
            return
        if ERR_SAME_CLUSTER in text:
            delay = self._set_delay(SAME_CLUSTER_DELAY)
            log.error(f"{self.log_prefix()} - Leafnode connection dropped with same cluster name error. "
                      f"Delaying attempt to reconnect for {int(delay)}s")
            self.close("Cluster Names Identical")
            return
        log.error(f"{self.log_prefix()} - Leafnode Error '{text}'")
        self.close("Parse Error")

    def _acc_for_log(self) -> str:
        if self.remote is not None:
            return self.remote.opts.account or "$G"
        return ""

    def _set_delay(self, delay: float) -> float:
        if self.remote is not None:
            d = self.mgr.test_delay or delay
            self.remote.delay = d
            return d
        return delay

    # ---- interest from the peer -----------------------------------------------------------------------

    def proto_leaf_sub(self, subject: bytes, queue: bytes | None, weight: int) -> None:
        acc = self.account
        if acc is None or not self.registered:
            self.close("Protocol Violation", AUTH_VIOLATION)
            return
        if subject.startswith(ci.LDS_PREFIX) and subject == self.mgr.lds_of(acc):
            self._loop_detected()
            return
        us = self.user_sub
        if us is not None and not self.spoke and b"*" not in subject and b">" not in subject and \
                not subject.startswith(ci.LDS_PREFIX) and not subject.startswith(b"_GR_.") and \
                not subject.startswith(b"$GR.") and us.hit(subject):
            self._perm_violation(False, subject)
            return
        if self.msubs >= 0 and len(self.rsubs) >= self.msubs and (subject, queue) not in self.rsubs:
            # (as nats-server: the interest is not taken, the connection stays)
            self.server.log.error(f"{self.log_prefix()} - maximum subscriptions exceeded")
            self.send(cp.err_frame("maximum subscriptions exceeded"))
            return
        if b"*" not in subject and b">" not in subject and not subject.startswith(ci.LDS_PREFIX) \
                and self.deny_out and self.deny_out.hit(subject):
            # interest in what this side may not send: ignored (nats-server: a no-op on a spoke, an error
            # and a closed connection on a hub, whose leaf should not have asked)
            self.server.log.debug(f"{self.log_prefix()} - Permissions Violation for Subscription to "
                                  f"{subject.decode(errors='replace')!r} ignored")
            return
        ch = self.remote_interest.rs_sub(b"", subject, queue, weight)
        if ch is None:
            return
        key = (ch.subject, ch.queue)
        if ch.kind == "add":
            sub = RemoteSub(self, ch.subject.decode("utf-8", "surrogateescape"),
                            ch.queue.decode("utf-8", "surrogateescape") if ch.queue else None, ch.weight,
                            self.remote_cluster.encode() if self.remote_cluster else None)
            try:
                acc.sublist.insert(sub)
            except ValueError:
                # (as nats-server: an -ERR, and the connection stays)
                self.server.log.error(f"{self.log_prefix()} - Could not insert subscription: sublist: invalid "
                                      "subject")
                self.remote_interest.rs_unsub(b"", subject, queue)
                self.send(cp.err_frame("Invalid Subscription"))
                return
            self.rsubs[key] = sub
            self.mgr.sub_changed(acc, sub, True)
            if acc.interest_watchers:  # (a push consumer here waiting for its subscriber)
                acc.remote_interest(sub.subject)
        elif ch.kind == "weight":
            sub = self.rsubs.get(key)
            if sub is not None:
                old = max(sub.weight, 1)
                sub.weight = ch.weight
                acc.remote_changed()
                new = max(ch.weight, 1)
                if new != old:  # other leafs hear the group's new weight
                    self.mgr.sub_changed(acc, sub, new > old, n=abs(new - old), routes=False)

    def proto_leaf_unsub(self, subject: bytes, queue: bytes | None) -> None:
        acc = self.account
        if acc is None or not self.registered:
            return
        ch = self.remote_interest.rs_unsub(b"", subject, queue)
        if ch is None:
            return
        sub = self.rsubs.pop((ch.subject, ch.queue), None)
        if sub is not None:
            acc.sublist.remove(sub)
            self.mgr.sub_changed(acc, sub, False)
            if acc.interest_watchers:
                acc.remote_interest(sub.subject)

    def _drop_remote_interest(self) -> None:
        self.remote_interest.clear()
        subs = list(self.rsubs.values())
        self.rsubs.clear()
        acc = self.account
        if acc is None or not subs:
            return
        acc.sublist.remove_batch(subs)
        acc.remote_changed()
        for sub in subs:
            self.mgr.sub_changed(acc, sub, False)

    def _loop_detected(self) -> None:
        delay = self._set_delay(LOOP_DELAY)
        text = ci.leaf_loop_error(self.acc_name, int(delay))
        self.server.log.error(f"{self.log_prefix()} - {text}")
        self.close("Protocol Violation", text)

    # ---- messages from the peer -----------------------------------------------------------------------

    def proto_leaf_msg(self, subject: bytes, reply: bytes | None, queues: tuple, payload: bytes) -> None:
        self.proto_leaf_hmsg(subject, reply, queues, -1, payload)

    def proto_leaf_hmsg(self, subject: bytes, reply: bytes | None, queues: tuple, hdr_len: int,
                        msg: bytes) -> None:
        self.in_msgs += 1
        self.in_bytes += len(msg)
        acc = self.account
        if acc is None or not self.registered:
            self.close("Protocol Violation", AUTH_VIOLATION)
            return
        if self.deny_in and self.deny_in.hit(subject) and not self._let_in(subject):
            return
        if hdr_len > 0 and _mt.CURRENT is None and msg.find(b"Nats-Trace-", 0, hdr_len) >= 0 and \
                _mt.routed_inbound(acc, self, subject, reply, queues, hdr_len, msg,
                                   partial(self.mgr.leaf_entry, acc)):
            return  # traced here too: this server sends its own event (rillet.server.msgtrace)
        self.mgr.leaf_entry(acc, self, subject, reply, queues, hdr_len, msg)

    def _let_in(self, subject: bytes) -> bool:
        """A message ``deny_in`` refuses: with a leaf user's publish permission on the hub side, service
        replies (``_R_.``) and JetStream acks pass anyway, and what the permission refuses is a violation
        that closes the connection (nats-server's leafMsgAllowed); anything else is dropped."""
        up = self.user_pub
        if up is None or self.spoke:
            return False
        s = subject
        if s.startswith(b"_GR_.") and s.count(b".") >= 3:
            s = s.split(b".", 3)[3]  # (a gateway-routed reply: its subject)
        if s.startswith(b"_R_.") or s.startswith(b"$JS.ACK."):
            return True
        if up.hit(s):
            self._perm_violation(True, s)
        return False

    # ---- writing --------------------------------------------------------------------------------------

    def send_msg(self, account: bytes, subject: bytes, reply: bytes | None, queues: list, hdr: int,
                 msg: bytes) -> None:
        """One LMSG (or HMSG) to the peer (``account`` is the connection's own, not on the wire)."""
        if self.deny_out and self.deny_out.hit(subject):
            return
        out = self.out
        if hdr < 0:
            out += _wire.leaf_msg_head(subject, reply, queues, len(msg))
            out += msg
        elif self.headers:
            out += _wire.leaf_hmsg_head(subject, reply, queues, hdr, len(msg))
            out += msg
        else:
            payload = msg[hdr:]
            out += _wire.leaf_msg_head(subject, reply, queues, len(payload))
            out += payload
        self._frame_queued(len(msg))

    # ---- timers ---------------------------------------------------------------------------------------

    def _info_timeout(self) -> None:
        self._auth_timer = None
        if not self.closed and not self.info_received:
            self.server.log.error(f"{self.log_prefix()} - Leafnode did not receive an INFO in time")
            self.close("Read Error")

    def start_pings(self) -> None:
        self._ping_timer = self.server.loop.call_later(self._ping_interval(), self._ping_tick)

    # ---- monitoring and logging -----------------------------------------------------------------------

    def monitor_info(self, q: dict) -> dict:
        """This connection as nats-server's /leafz shows it (LeafInfo)."""
        from rillet.gocompat.monitorfmt import rtt_string
        d: dict[str, Any] = {
            "id": self.cid, "name": self.remote_name, "is_spoke": self.spoke, "account": self.acc_name,
            "ip": self.host, "port": self.port,
        }
        if self.isolated:  # (nats-server puts it after is_spoke, left out when false)
            d = {"id": d["id"], "name": d["name"], "is_spoke": self.spoke, "is_isolated": True,
                 "account": d["account"], "ip": d["ip"], "port": d["port"]}
        d["rtt"] = rtt_string(self.rtt)[0] if self.rtt else "0s"
        d.update({"in_msgs": self.in_msgs, "out_msgs": self.out_msgs, "in_bytes": self.in_bytes,
                  "out_bytes": self.out_bytes, "subscriptions": len(self.rsubs)})
        if q.get("subs") and self.rsubs:
            d["subscriptions_list"] = [sub.subject for sub in self.rsubs.values()]
        if self.compression:
            d["compression"] = self.compression
        return d

    def log_prefix(self) -> str:
        p = ServerConn.log_prefix(self)
        return f"{p} - \"{self.remote_name}\"" if self.remote_name else p

    def __repr__(self) -> str:
        return f"<LeafConn lid:{self.cid} {self.remote_name} {'spoke' if self.spoke else 'hub'}>"


class _Hold(asyncio.Protocol):
    """The TLS transport's protocol until ``start_tls`` returns: keeps what arrives meanwhile."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.lost: tuple | None = None

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = (exc,)


class RemoteState:
    """One configured remote: its options, which URL is next, the delay before the next attempt."""

    def __init__(self, opts: "RemoteLeafOptions", reconnect: float) -> None:
        self.opts = opts
        self.urls = list(opts.urls)
        if not opts.no_randomize and len(self.urls) > 1:
            import random as _random
            _random.shuffle(self.urls)  # (as nats-server, unless no_randomize)
        self.configured = list(self.urls)
        self.index = -1
        self.delay = 0.0  # a one-time delay set by a loop or a refusal (else the reconnect interval)
        self.reconnect = reconnect
        self.conn: LeafConn | None = None
        self.attempts = 0
        self.tls_ctx: ssl.SSLContext | None = None
        self.removed = False  # removed or disabled by a reload: not dialled again

    def learn(self, hostports: list[str]) -> list[str]:
        """The hub's ``leafnode_urls`` (its cluster's leafnode URLs, in its first and async INFOs): as
        nats-server, unless ``ignore_discovered_servers``, the list received is taken as the current one:
        the remote's URLs become those of them that are not configured (with the current URL's credentials),
        then the configured ones. The connection in use keeps its place. Returns the URLs not known before."""
        if self.opts.ignore_discovered_servers or not hostports:
            return []
        current = self.urls[self.index] if 0 <= self.index < len(self.urls) else None
        cur = urlsplit(current or self.configured[0])
        conf = {(urlsplit(u).hostname, urlsplit(u).port) for u in self.configured}
        known = set(self.urls)
        cred = cur.netloc.rpartition("@")[0]
        found: list[str] = []
        seen: set = set()
        for hp in hostports:
            try:
                p = urlsplit(f"nats://{hp}")
                key = (p.hostname, p.port)
            except ValueError:
                continue
            if key in conf or key in seen or not p.hostname:
                continue
            seen.add(key)
            found.append(f"{cur.scheme}://{cred + '@' if cred else ''}{hp}")
        self.urls = found + self.configured
        self.index = self.urls.index(current) if current in self.urls else -1
        return [u for u in found if u not in known]

    def next_url(self):
        self.index = (self.index + 1) % len(self.urls)
        return urlsplit(self.urls[self.index])


def client_tls_context(cfg: Any) -> ssl.SSLContext:
    """The soliciting side's context for a remote's tls {} (None: a tls:// URL or a hub requiring TLS
    without one: the system's roots). ValueError when a file is unusable."""
    return client_context(cfg, "leafnodes remote tls")


def _redact_host(u: str) -> str:
    p = urlsplit(u)
    return f"{p.hostname}:{p.port or 7422}"
