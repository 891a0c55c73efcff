"""Leaf node connections, as nats-server 2.15 makes them: the hub side (leafnode listener) and the leaf side
(``remotes``, solicited with a reconnect delay), on the LEAF protocol of ``rillet.cluster.protocol``.

One ``LeafConn`` per connection, bound to one local account. Interest crosses it as ``LS+``/``LS-`` (queue
subscriptions with their weight), messages as ``LMSG``/``HMSG``. Each side keeps what it announced in a
``LocalInterest`` (reference counted per subject and queue group) and what the peer announced as
``RemoteSub``\\ s in the account's sublist beside local subscriptions, so a publish pays one match and a
leaf connection is one more link of the delivery plan's fan-out (one LMSG per connection and message).

Who hears what (nats-server's rules):

* a connection where this server is the hub (accepted, the peer is a spoke) is told about every
  subscription of its account: local clients, internal subscriptions, routed interest and other leafs';
* a connection this server solicited (we are the spoke) is told only about local subscriptions and those
  of leafs for which we are the hub (never routed interest);
* the ``$LDS.<id>`` loop-detection subscription of the account is announced on every leaf connection, and
  passed on to every other; a server that gets its own back closes with "Loop detected" (and a soliciting
  side waits 30 s before it tries again);
* a message from a leaf is delivered locally, to routes (unless it came from our hub), to the other
  leafs, never back; queue groups get it only where the LMSG names them (the sender chose the group);
* a message from a route goes to local subscribers and to the leafs we are hub for.

Authentication on the hub side (nats-server's isLeafNodeAuthorized): the leafnodes authorization (user,
nkey, users), else the server's client authorization; in operator mode a user JWT (a remote's
``credentials``) checked against the trusted operator and the resolver, binding the JWT's account with its
permissions, limits (payload, subscriptions, the account's ``leaf`` connections), expiry and revocations.
A user's permissions are applied reversed, as nats-server does on a hub: its publish permission is what the
leaf may send (an LMSG outside it: -ERR 'Permissions Violation for Publish to "x"', closed) and the interest
we announce to it; its subscribe permission what we send to the leaf and the literal LS+ it may announce
(else 'Permissions Violation for Subscription to "x"'). The INFO that accepts the CONNECT carries them
(``import``: subscribe, ``export``: publish) and the leaf enforces them too (silently, as a spoke).

Permissions on a connection: ``deny_imports`` (what the leaf side will not receive: its LS+ are not sent,
such messages are dropped, and the hub learns them as ``deny_pub`` in CONNECT), ``deny_exports`` (what
the leaf side will not send), and JetStream's: ``$JS.API.>``, ``$KV.>``, ``$OBJ.>`` never cross a leaf
connection of a non-system account; ``$JS.<domain>.API.>`` does, and reaches the JetStream whose domain it
names (each JetStream answers its own domain's prefix); a server's own domain prefix does not leave it when
the other side has another domain.
"""
from __future__ import annotations

import asyncio
import json
import secrets
import ssl
import sys
import time
from bisect import bisect_right
from functools import partial
from random import random
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlsplit

import rillet
import rillet.server.msgtrace as _mt
from rillet import compression as cc
from rillet.cluster import info as ci
from rillet import lane
from rillet.cluster import gateway as g
from rillet.cluster import protocol as cp
from rillet.compression import CompressionConfig
from rillet.cluster.conn import ServerConn
from rillet.cluster.interest import LocalInterest, RemoteInterest
from rillet.cluster.routed import RemoteSub, js_ack_deliver_idx, origin_only
from rillet.protocol.parser import ProtocolError
from rillet.server.accounts import Account
from rillet.server.auth import compare_secret
from rillet.server.delivery import ConnKind, deliver_here, plan_of
from rillet.server.listen import hostport, server_port_socket
from rillet.subjects.sublist import SublistResult
from rillet.subjects.validate import subject_matches_filter

_wire = lane.wire  # the message frame builders of the running lane (rillet.lane)

if TYPE_CHECKING:
    from rillet.config.leaf_section import LeafNodeOptions, RemoteLeafOptions

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
        self._comp_info = False  # (leaf side) switched to s2: the hub's next INFO is taken as its first
        self.deny_out = _Deny([])  # messages we do not send to the peer (and its literal interest we ignore)
        self.deny_in = _Deny([])  # messages from the peer we drop (and our interest we do not announce)
        # hub side, a leaf user with permissions (nats-server reverses them on the hub): what the leaf may
        # publish (its LMSG; else a violation closes it) and subscribe to (its LS+ on literal subjects)
        self.user_pub: _Deny | None = None
        self.user_sub: _Deny | None = None
        self.perms_info: tuple | None = None  # (import, export) sent to the leaf in INFO
        self.jwt_user: Any = None  # operator mode: the user JWT the leaf authenticated with
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
        self._attach(transport)
        srv = self.server
        mgr = self.mgr
        if srv.shutting_down or not mgr.running:
            self.close("Server Shutdown")
            return
        mgr.conns.add(self)
        log = srv.log
        if self.solicited:
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
        t = self.transport
        cfg = self.mgr.opts.tls if server_side else self.remote.opts.tls
        timeout = (cfg.timeout if cfg is not None else 0.0) or 2.0
        hold = _Hold()  # what arrives before start_tls returns (a CONNECT right after the handshake)
        try:
            new_t = await asyncio.wait_for(srv.loop.start_tls(t, hold, ctx, server_side=server_side,
                                                              server_hostname=hostname), timeout + 0.5)
        except (asyncio.TimeoutError, ssl.SSLError, ConnectionError, OSError) as e:
            srv.log.error(f"{self.log_prefix()} - TLS handshake error: {e}")
            self.close("TLS Handshake Failure")
            return
        if new_t is None or self.closed:
            self.close("TLS Handshake Failure")
            return
        self.transport = new_t  # type: ignore[assignment]
        self.tls = True
        new_t.set_protocol(self)
        srv.log.debug(f"{self.log_prefix()} - TLS handshake complete")
        if info is not None:
            self._negotiate(info, halt=False)
            srv.flush_clients()
        if hold.data:
            self.data_received(b"".join(hold.data))
        if hold.lost is not None:
            self.connection_lost(hold.lost[0])

    def dial_failed(self, exc: Exception | None) -> None:
        """The websocket upgrade did not complete (rillet.cluster.leaf_ws): try again later."""
        if not self.closed:
            self.closed = True
            self.mgr.conn_closed(self)

    def _closed(self) -> None:
        if self.jwt_timer is not None:
            self.jwt_timer.cancel()
            self.jwt_timer = None
        self._drop_remote_interest()
        self.mgr.conn_closed(self)

    def _write_deadline(self) -> float:
        return self.mgr.opts.write_deadline or self.server.opts.write_deadline

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
            if not ws and (info.tls_required or ctx is not None):
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
            self.close("Authentication Failure", AUTH_VIOLATION)
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
        exp = int(u.claims.get("exp") or 0)
        delay = max(exp - time.time(), 0.0) if exp else None
        vf = getattr(u, "valid_for", 0.0)
        if vf:
            delay = vf if delay is None else min(delay, vf)
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
        self.in_msgs += 1
        self.in_bytes += len(payload)
        acc = self.account
        if acc is None or not self.registered:
            self.close("Protocol Violation", AUTH_VIOLATION)
            return
        if self.deny_in and self.deny_in.hit(subject) and not self._let_in(subject):
            return
        self.mgr.leaf_entry(acc, self, subject, reply, queues, -1, payload)

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
        out += _CRLF
        self.out_msgs += 1
        self.out_bytes += len(msg)
        if not self.flush_pending:
            self.flush_pending = True
            self.server.pending_flush.append(self)

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


class LeafNodes:
    """The leaf node manager of a server: the leafnode listener, the remotes, interest, /leafz."""

    def __init__(self, server: Any) -> None:
        from rillet.config.leaf_section import validate_leafnodes
        self.server = server
        self.opts: "LeafNodeOptions" = server.opts.leaf
        validate_leafnodes(server.opts)  # ValueError: refuse to start
        # where a message from a leaf connection enters: deliver_leaf, or with gateways on this server
        # deliver_leaf_gateways (set by the composition root)
        self.leaf_entry: Callable[..., None] = deliver_leaf
        self.conns: set[LeafConn] = set()
        self.remotes = [RemoteState(r, self.opts.reconnect) for r in self.opts.remotes if not r.disabled]
        self.tls_server: ssl.SSLContext | None = None
        if self.opts.tls is not None:
            from rillet.server.tls import make_server_context
            try:
                self.tls_server = make_server_context(self.opts.tls)
            except ValueError as e:
                raise ValueError(f"leafnodes tls: {e}") from e
        for r in self.remotes:
            if r.opts.tls is not None:
                r.tls_ctx = client_tls_context(r.opts.tls)
        self.running = False
        self.addr: tuple[str, int] | None = None
        self._listener: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._lds: dict[str, bytes] = {}
        self.cluster_urls: dict[str, int] = {}  # leafnode URLs of the other servers of our cluster (counted)
        self._route_urls: dict[str, str] = {}  # server id -> its leafnode URL
        self.test_delay = 0.0  # tests: replaces the 30 s delays after a loop or refusal

    # ---- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        srv = self.server
        o = self.opts
        self.running = True
        srv.on_shutdown.append(self.shutdown)
        if o.port:
            host = o.host or "0.0.0.0"
            port = 0 if o.port == -1 else o.port
            sock = await server_port_socket(srv.loop, "leafnode", o.port, host, port)
            self._listener = await srv.loop.create_server(lambda: LeafConn(self), sock=sock, backlog=1024)
            self.addr = (host, self._listener.sockets[0].getsockname()[1])
            srv.log.notice(f"Listening for leafnode connections on {hostport(host, self.addr[1])}")
        for r in self.remotes:
            if not r.urls:
                srv.log.debug("Empty remote leafnode definition, nothing to connect")
                continue
            self._solicit(r, 0.0)

    async def shutdown(self) -> None:
        self.running = False
        if self._listener is not None:
            self._listener.close()
        for t in list(self._tasks):
            t.cancel()
        for lc in list(self.conns):
            lc.close("Server Shutdown")
        if self._listener is not None:
            try:
                await asyncio.wait_for(self._listener.wait_closed(), 2)
            except (asyncio.TimeoutError, OSError) as e:
                self.server.log.debug(f"leafnode listener close: {e!r}")

    # ---- soliciting -----------------------------------------------------------------------------------

    def accept_conn(self) -> LeafConn:
        """A hub-side leaf connection for a transport accepted elsewhere (the websocket listener's
        ``/leafnode`` path), so that the server package needs no import of this one."""
        return LeafConn(self)

    def _solicit(self, r: RemoteState, delay: float) -> None:
        t = self.server.loop.create_task(self._connect(r, delay))
        self._tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            self.server.log.error(f"leafnode connect task failed: {t.exception()!r}")

    async def _connect(self, r: RemoteState, delay: float) -> None:
        srv = self.server
        log = srv.log
        if delay:
            await asyncio.sleep(delay)
        while self.running:
            u = r.next_url()
            ws = u.scheme.lower() in ("ws", "wss")
            secure = ws and (u.scheme.lower() == "wss" or r.tls_ctx is not None)
            host, port = u.hostname or "", u.port or ((443 if secure else 80) if ws else 7422)
            tls_kw: dict[str, Any] = {}
            if secure:
                if r.tls_ctx is None:
                    r.tls_ctx = client_tls_context(None)
                tls_kw = {"ssl": r.tls_ctx, "server_hostname": host}
            log.debug(f"Trying to connect as leafnode to remote server on {hostport(host, port)}")
            if ws:
                from rillet.cluster.leaf_ws import WSDialer
                factory: Any = lambda: WSDialer(LeafConn(self, r), hostport(host, port),  # noqa: E731
                                                no_masking=r.opts.ws_no_masking)
            else:
                factory = lambda: LeafConn(self, r)  # noqa: E731
            try:
                _, proto = await asyncio.wait_for(srv.loop.create_connection(factory, host, port, **tls_kw),
                                                  r.opts.dial_timeout or self.opts.dial_timeout or LEAF_DIAL_TIMEOUT)
                r.conn = proto.inner if ws else proto
                r.attempts = 0
                return
            except (OSError, asyncio.TimeoutError) as e:
                r.attempts += 1
                why = e.strerror if isinstance(e, OSError) and e.strerror else (str(e) or type(e).__name__)
                text = (f"Error trying to connect as leafnode to remote server {hostport(host, port)!r} "
                        f"(attempt {r.attempts}): dial tcp {hostport(host, port)}: {why.lower()}")
                if r.attempts == 1 or r.attempts % 3600 == 0:
                    log.error(text)
                else:
                    log.debug(text)
                await asyncio.sleep(r.reconnect)

    def leaf_connect(self, lc: LeafConn) -> bytes:
        """The CONNECT a soliciting side sends (after the hub's INFO, which carried the nonce)."""
        srv = self.server
        r = lc.remote
        assert r is not None
        ro = r.opts
        acc = ro.account or "$G"
        js = srv.jetstream is not None
        co = ci.LeafConnect(version=rillet.SERVER_VERSION, server_id=srv.server_id, domain=self._domain(),
                            name=srv.name, is_hub=ro.hub, headers=not srv.opts.no_header_support, jetstream=js,
                            deny_pub=list(ro.deny_imports) or None, compress_mode=lc.compression,
                            remote_account=acc, protocol=ci.SERVER_PROTO)
        if srv.cluster is not None:
            co.cluster = srv.cluster.name
        if ro.credentials:
            from rillet import jwt
            with open(ro.credentials, "rb") as f:
                token, seed = jwt.parse_creds(f.read())
            co.jwt, co.sig = token, _sign(seed, lc.nonce)
        elif ro.nkey:
            import nkeys
            kp = nkeys.from_seed(ro.nkey.encode())
            co.nkey = kp.public_key.decode()
            co.sig = _sign(ro.nkey, lc.nonce)
        u = urlsplit(r.urls[r.index])
        if u.username:
            co.user = unquote(u.username)
            if u.password is not None:
                co.password = unquote(u.password)
            else:
                co.auth_token = co.user
        lc.account = self.bind_account(acc)
        lc.acc_name = acc
        js_deny = list(JS_DENY)
        lc.deny_out.add(list(ro.deny_exports) + js_deny)
        lc.deny_in.add(list(ro.deny_imports) + js_deny)
        return ci.encode_leaf_connect(co)

    # ---- accepting ------------------------------------------------------------------------------------

    def _domain(self) -> str:
        srv = self.server
        return srv.opts.jetstream.domain if srv.opts.jetstream.enabled else ""

    def comp_config(self, remote: "RemoteState | None") -> CompressionConfig:
        """The compression setting of a remote, or of the leafnode listener (nats-server's default:
        s2_auto)."""
        o = remote.opts if remote is not None else self.opts
        return CompressionConfig(o.compression or cc.LEAF_DEFAULT, o.compression_rtts)

    def hub_info(self, lc: LeafConn, connect_info: bool = False, compression: str | None = None) -> bytes:
        """The INFO of a leaf connection: the hub's first (with its compression mode) or the one after a
        CONNECT (``connect_info``); ``compression``: the mode of a compression negotiation INFO."""
        srv = self.server
        o = self.opts
        so = srv.opts
        host, port = self.advertised()
        info = ci.Info(server_id=srv.server_id, server_name=srv.name, version=rillet.SERVER_VERSION,
                       proto=ci.SERVER_PROTO, go=f"python{sys.version_info[0]}.{sys.version_info[1]}",
                       host=host, port=port, headers=not so.no_header_support,
                       auth_required=self._auth_required(), max_payload=so.max_payload,
                       jetstream=srv.jetstream is not None, client_id=lc.cid, nonce=lc.nonce.decode(),
                       domain=self._domain(), leafnode_urls=self.leafnode_urls())
        if srv.cluster is not None:
            info.cluster = srv.cluster.name
        if self.tls_server is not None and lc.transport is not None and \
                lc.transport.get_extra_info("websocket") is None:
            info.tls_required = True
            info.tls_verify = bool(o.tls.verify)
        if compression is None and not connect_info:
            mode = self.comp_config(None).mode
            compression = "" if mode == cc.NOT_SUPPORTED else mode
            if cc.needs_compression(mode) and lc._websocket():
                compression = cc.OFF  # (no s2 under websocket frames: the leaf is told "off")
        info.compression = compression or ""
        if connect_info:
            info.connect_info = True
            info.remote_account = lc.acc_name
            if lc.perms_info is not None:
                info.import_, info.export = lc.perms_info
            if lc.acc_name and lc.acc_name == srv.opts.system_account:
                info.acc_is_sys = True
        else:
            info.info_on_connect = True
        return ci.encode_info(info)

    def advertised(self) -> tuple[str, int]:
        """The host and port this hub gives leafs (nats-server's setLeafNodeInfoHostPortAndIP)."""
        o = self.opts
        port = self.addr[1] if self.addr else o.port
        if o.advertise:
            from rillet.config.builder_base import split_host_port
            h, p = split_host_port(o.advertise)
            return h, int(p) if p else port
        host = o.host or "0.0.0.0"
        if host in ("0.0.0.0", "::", "[::]"):
            from rillet.cluster.cluster import global_unicast_ips
            ips = global_unicast_ips()
            host = ips[0] if ips else host
        return host, port

    def leafnode_urls(self) -> list[str]:
        """The leafnode URLs of this hub's cluster: its own (always), then those its routes announced."""
        own = hostport(*self.advertised())
        return [own] + [u for u in self.cluster_urls if u != own]

    def route_url(self) -> str:
        """This server's leafnode URL for the INFO of its routes ("" without a leafnode port, or with
        ``no_advertise``), as nats-server gossips it within a cluster."""
        if not self.opts.port or self.opts.no_advertise or self.addr is None:
            return ""
        return hostport(*self.advertised())

    def route_added(self, remote_id: str, urls: list[str] | None) -> None:
        """A route to a new server of the cluster: its leafnode URL (route INFO ``leafnode_urls``, one at
        most) is added, and the leafs we are hub for get an async INFO with the new list."""
        if not urls or len(urls) != 1 or remote_id in self._route_urls:
            return
        u = urls[0]
        self._route_urls[remote_id] = u
        self.cluster_urls[u] = self.cluster_urls.get(u, 0) + 1
        if self.cluster_urls[u] == 1:
            self._send_async_info()

    def route_gone(self, remote_id: str) -> None:
        """The last route to a server closed: its leafnode URL is removed (not at shutdown)."""
        u = self._route_urls.pop(remote_id, None)
        if u is None or self.server.shutting_down:
            return
        n = self.cluster_urls.get(u, 0) - 1
        if n > 0:
            self.cluster_urls[u] = n
            return
        self.cluster_urls.pop(u, None)
        self._send_async_info()

    def _send_async_info(self) -> None:
        """The leafnode INFO (no client id, no nonce) with the current ``leafnode_urls``, to the leafs we
        accepted (nats-server sends it on every leaf connection; a soliciting side ignores it)."""
        if not self.running:
            return
        srv = self.server
        host, port = self.advertised()
        info = ci.Info(server_id=srv.server_id, server_name=srv.name, version=rillet.SERVER_VERSION,
                       proto=ci.SERVER_PROTO, go=f"python{sys.version_info[0]}.{sys.version_info[1]}",
                       host=host, port=port, headers=not srv.opts.no_header_support,
                       auth_required=self._auth_required(), max_payload=srv.opts.max_payload,
                       jetstream=srv.jetstream is not None, domain=self._domain(),
                       leafnode_urls=self.leafnode_urls(), info_on_connect=True)
        if srv.cluster is not None:
            info.cluster = srv.cluster.name
        frame = cp.info_frame(ci.encode_info(info))
        for lc in list(self.conns):
            if lc.registered and not lc.solicited and not lc.closed:
                lc.send(frame)
        srv.schedule_flush()

    def _auth_required(self) -> bool:
        o = self.opts
        return bool(o.username or o.nkey or o.users or self.server.authenticator.required)

    def bind_account(self, name: str) -> Any:
        """The local account a leaf connection binds to ("" or "$G": the global account); in operator mode
        an account public key is loaded from the resolver (None when it has no valid JWT)."""
        srv = self.server
        if not name or name == "$G":
            return srv.global_account
        op = srv.operator
        if op is not None:
            from rillet import jwt
            if jwt.is_public_key(name, "A"):
                return op.lookup_account(name)
        return srv.lookup_account(name)

    def claims_updated(self, acc: Any, info: Any) -> None:
        """Operator mode, a new JWT for account ``acc``: the leaf connections bound to it by a user JWT are
        checked again as nats-server does for its clients and leafs (revoked: closed with 'User
        Authentication Revoked'; a bearer token the account no longer allows: an authorization violation),
        and their payload and subscription limits follow the account's."""
        for lc in list(self.server.leafs.values()):
            u = lc.jwt_user
            if lc.closed or lc.account is not acc or u is None:
                continue
            if u.bearer and info.disallow_bearer:
                lc.debug("Bearer User JWT not allowed")
                self.server.log.error(f"{lc.log_prefix()} - authentication error")
                lc.close("Authentication Failure", AUTH_VIOLATION)
                continue
            if info.is_revoked(u.nkey, u.issued):
                lc.debug("User Authentication Revoked")
                lc.close("Credentials Revoked", "User Authentication Revoked")
                continue
            if u.issuer != acc.name and u.issuer not in info.signing_keys:
                lc.close("Authentication Failure")  # (its signing key was removed: no -ERR, as for clients)
                continue
            if lc.jwt_timer is not None:
                lc.jwt_timer.cancel()
                lc.jwt_timer = None
            lc._jwt_limits()

    def leafs_at_limit(self, acc_name: str) -> bool:
        """Operator mode: the account's JWT limit of leaf node connections (``limits.leaf``; left out: zero,
        as nats-server) is reached by the connections bound to it already."""
        op = self.server.operator
        info = op.infos.get(acc_name) if op is not None else None
        if info is None:
            return False
        v = info.limits.get("leaf")
        mx = 0 if v is None else int(v)
        if mx < 0:
            return False
        return sum(1 for c in self.server.leafs.values() if c.acc_name == acc_name and not c.closed) >= mx

    def authorize(self, lc: LeafConn, co: ci.LeafConnect, raw: dict) -> str | None:
        """The account a leaf CONNECT binds to, or None when refused (nats-server's isLeafNodeAuthorized:
        the leafnodes authorization when it has users, else the server's client authorization: in
        operator mode a user JWT signed by a trusted account, with the nonce signed by its key). A user's
        permissions are applied to ``lc``; in operator mode ``lc.jwt_user`` is set (limits, expiry)."""
        o = self.opts
        nonce = lc.nonce
        if o.username:
            if co.user != o.username or not compare_secret(o.password, co.password):
                return None
            return o.account or "$G"
        if o.nkey:
            from rillet.server.auth import Authenticator
            if co.nkey != o.nkey or not co.sig or not Authenticator._verify_nkey(co.nkey, co.sig, nonce):
                return None
            return o.account or "$G"
        if o.users:
            for u in o.users:
                if u.username == co.user:
                    if not compare_secret(u.password, co.password):
                        return None
                    return u.account or "$G"
            return None
        srv = self.server
        if srv.operator is not None:
            u = srv.operator.authenticate(lc, raw)
            if u is None:
                return None
            info = srv.operator.infos.get(u.account)
            if info is not None and info.ext_auth is not None:
                # (an account whose users an auth callout admits: not done for leaf connections)
                srv.log.error(f"{lc.log_prefix()} - account {u.account} delegates authentication to an auth "
                              "callout, which Rillet does not do for leaf connections: refused")
                return None
            lc.jwt_user = u
            lc.apply_user_perms(u.permissions)
            return u.account
        res = srv.authenticator.authenticate(raw, nonce, "LEAFNODE")
        if res is False or res is None:
            return None
        if res is True:
            return o.account or "$G"
        lc.apply_user_perms(getattr(res, "permissions", None))
        return getattr(res, "account", "") or "$G"

    # ---- registration and interest --------------------------------------------------------------------

    def register(self, lc: LeafConn) -> None:
        """A connection is bound to its account: denies, then every subscription it should hear about."""
        srv = self.server
        acc = lc.account
        if lc.closed or acc is None:
            return
        if not lc.solicited:
            lc.deny_out.add(JS_DENY)
            lc.deny_in.add(JS_DENY)
        dom = self._domain()
        if dom and lc.remote_domain != dom:
            # requests for our own domain do not leave this server
            lc.deny_out.add([f"$JS.{dom}.API.>"])
        if dom or lc.remote_domain:
            srv.log.notice(f"{lc.log_prefix()} - JetStream using domains: local {dom!r}, remote "
                           f"{lc.remote_domain!r}".replace("'", '"'))
        if not lc.solicited and lc.remote_name and lc.remote_account:
            # the same leaf server again for the same accounts: the new connection replaces a stale one
            for old in list(srv.leafs.values()):
                if old is not lc and not old.solicited and old.remote_name == lc.remote_name and \
                        old.remote_cluster == lc.remote_cluster and old.acc_name == lc.acc_name and \
                        old.remote_account == lc.remote_account:
                    old.close("Duplicate Remote LeafNode Connection", "Duplicate Remote LeafNode Connection")
                    srv.log.warn(f"{lc.log_prefix()} - Replacing connection from same server")
        lc.registered = True
        srv.leafs[lc.cid] = lc
        srv.log.debug(f"{lc.log_prefix()} - Leafnode registered for account {lc.acc_name}")
        # what the peer should hear about, now
        frames = []
        for sub in _all_subs(acc):
            if self._wants(lc, sub):
                lc.smap.add(b"", _sb(sub), _qb(sub), n=_count(sub))
        for m in acc.mappings:  # a leaf's publish on a mapped subject must reach us (as nats-server)
            lc.smap.add(b"", m.src.encode("utf-8", "surrogateescape"))
        for u in lc.smap.snapshot():
            if lc.deny_in and not u.subject.startswith(ci.LDS_PREFIX) and lc.deny_in.hit(u.subject):
                continue
            frames.append(cp.leaf_sub(u.subject, u.queue, u.weight) if u.queue else cp.leaf_sub(u.subject))
        lds = self.lds_of(acc)
        lc.smap.add(b"", lds)
        frames.append(cp.leaf_sub(lds))
        lc.out += b"".join(frames)
        lc.out += cp.PING
        lc.flush()
        lc.start_pings()
        srv.schedule_flush()

    def conn_closed(self, lc: LeafConn) -> None:
        self.conns.discard(lc)
        self.server.leafs.pop(lc.cid, None)
        r = lc.remote
        if r is not None and r.conn is lc:
            r.conn = None
        if r is not None and self.running and not self.server.shutting_down:
            delay = r.delay or r.reconnect
            r.delay = 0.0
            self._solicit(r, delay)

    def lds_of(self, acc: Any) -> bytes:
        s = self._lds.get(acc.name)
        if s is None:
            s = self._lds[acc.name] = ci.LDS_PREFIX + secrets.token_urlsafe(16).replace("-", "x").replace(
                "_", "y").encode()
        return s

    def _wants(self, lc: LeafConn, sub: Any) -> bool:
        """Should ``lc`` hear about subscription ``sub`` of its account (nats-server's rules)?"""
        c = sub.client
        if c is lc:
            return False
        kind = getattr(c, "kind", ConnKind.CLIENT)
        is_lds = sub.subject.startswith("$LDS.")
        if kind == ROUTER_KIND:
            if lc.spoke and not is_lds:
                return False
            origin = getattr(sub, "origin", None)
            if origin and lc.remote_cluster and origin.decode() == lc.remote_cluster:
                return False
            return True
        if kind == LEAF_KIND:
            if lc.spoke and c.spoke and not is_lds:
                return False
            if c.remote_cluster and c.remote_cluster == lc.remote_cluster:
                return False
            return True
        if kind == GATEWAY_KIND:  # a remote cluster's interest: to the leafs we are hub for, as route interest
            return not lc.spoke
        return True

    def sub_changed(self, acc: Any, sub: Any, added: bool, n: int = 0, routes: bool = True) -> None:
        """A subscription of ``acc`` came or went (local, routed or from a leaf): LS+/LS- where due, and
        interest of a leaf we are hub for goes to the routes. ``n``: how many members it counts for (a
        leaf's queue subscription counts its weight; 0: the subscription's own count)."""
        c = sub.client
        if routes and getattr(c, "kind", ConnKind.CLIENT) == LEAF_KIND and not c.spoke:
            cl = self.server.cluster
            if cl is not None:  # LS+ with the leaf's cluster as origin (RS+ when it has none)
                cl.local_interest(acc, sub, added, c.remote_cluster.encode() if c.remote_cluster else None)
            gw = self.server.gateway
            if gw is not None:  # part of this cluster's interest for the other clusters
                gw.update_interest(acc.name_b, _sb(sub), _qb(sub), 1 if added else -1, sub if added else None)
        if not self.conns:
            return
        sb, qb = _sb(sub), _qb(sub)
        n = n or _count(sub)
        sent = False
        for lc in self.conns:
            if not lc.registered or lc.closed or lc.account is not acc or not self._wants(lc, sub):
                continue
            u = lc.smap.add(b"", sb, qb, n=n) if added else lc.smap.remove(b"", sb, qb, n=n)
            if u is None:
                continue
            if lc.deny_in and not sb.startswith(ci.LDS_PREFIX) and lc.deny_in.hit(sb):
                continue
            if u.weight > 0:
                lc.send(cp.leaf_sub(sb, qb, u.weight) if qb else cp.leaf_sub(sb))
            else:
                lc.send(cp.leaf_unsub(sb, qb))
            sent = True
        if sent:
            self.server.schedule_flush()

    # ---- monitoring -----------------------------------------------------------------------------------

    def auth_timeout(self) -> float:
        """The leafnode authorization timeout: configured, else nats-server's default (2s, or the TLS
        timeout plus one second with TLS)."""
        o = self.opts
        if o.auth_timeout:
            return o.auth_timeout
        return ((o.tls.timeout or 2.0) + 1.0) if o.tls is not None else 2.0

    def varz(self) -> dict:
        from rillet.gocompat.monitorfmt import num
        o = self.opts
        d: dict[str, Any] = {}
        if o.port:
            d["host"] = o.host or "0.0.0.0"
            d["port"] = self.addr[1] if self.addr else o.port
            d["auth_timeout"] = num(self.auth_timeout())
            d["tls_timeout"] = num((o.tls.timeout or 2.0) if o.tls is not None else 2.0)
            if o.tls is not None:
                d["tls_required"] = True
                if o.tls.verify:
                    d["tls_verify"] = True
        rem = []
        for r in self.opts.remotes:
            rd: dict[str, Any] = {"local_account": r.account or "$G"}
            if r.tls is not None and r.tls.source is not None:  # (a tls {} block, not just a tls:// URL)
                rd["tls_timeout"] = num(r.tls.timeout or 2.0)
            rd["urls"] = [_redact_host(u) for u in r.urls]
            if r.deny_imports or r.deny_exports:
                deny: dict[str, Any] = {}
                if r.deny_exports:
                    deny["exports"] = list(r.deny_exports)
                if r.deny_imports:
                    deny["imports"] = list(r.deny_imports)
                rd["deny"] = deny
            rem.append(rd)
        if rem:
            d["remotes"] = rem
        if o.write_deadline:
            d["write_deadline"] = int(o.write_deadline * 1e9)
        return d


def check_reload(server: Any, new_opts: Any) -> None:
    """A reload may not change the leafnodes block (ValueError, the reload is refused): nats-server applies
    some changes (remotes, compression...) at runtime; Rillet applies them at the next start only."""
    old = server.opts.leaf
    new = new_opts.leaf
    active = lambda ln: ln is not None and bool(ln.port or ln.remotes)  # noqa: E731
    if not active(old) and not active(new):
        return
    if old != new:
        raise ValueError("config reload not supported for LeafNode: Rillet applies changes of the leafnodes "
                         "block at the next start only")


def client_tls_context(cfg: Any) -> ssl.SSLContext:
    """The soliciting side's context for a remote's tls {} (None: a tls:// URL or a hub requiring TLS
    without one: the system's roots). ValueError when a file is unusable."""
    from rillet.config.tls_names import TLS_VERSIONS, parse_min_version
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if cfg is not None and cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        if cfg is not None and cfg.ca_file:
            ctx.load_verify_locations(cafile=cfg.ca_file)
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"leafnodes remote tls: {e}") from e
    if cfg is not None and cfg.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg is not None and cfg.min_version:
        ctx.minimum_version = TLS_VERSIONS[parse_min_version(cfg.min_version)][0]
    return ctx


def _redact_host(u: str) -> str:
    p = urlsplit(u)
    return f"{p.hostname}:{p.port or 7422}"


def _sign(seed: str, nonce: bytes) -> str:
    import base64

    import nkeys
    kp = nkeys.from_seed(seed.encode() if isinstance(seed, str) else seed)
    return base64.urlsafe_b64encode(kp.sign(nonce)).rstrip(b"=").decode()


def _sb(sub: Any) -> bytes:
    return getattr(sub, "subject_b", None) or sub.subject.encode("utf-8", "surrogateescape")


def _qb(sub: Any) -> bytes | None:
    q = getattr(sub, "queue_b", None)
    if q:
        return q
    return sub.queue.encode("utf-8", "surrogateescape") if sub.queue else None


def _count(sub: Any) -> int:
    """How many queue members a subscription stands for in LS+ weights: a leaf's queue subscription its
    announced weight, anything else one (a route's queue weight is not followed)."""
    if sub.queue and type(sub) is RemoteSub and sub.client.kind == LEAF_KIND:
        return max(sub.weight, 1)
    return 1


def _all_subs(acc: Any) -> list[Any]:
    subs = list(acc.sublist.all())
    gw = acc.server.gateway
    if gw is not None:  # the remote clusters' interest (interest-only mode), kept per outbound connection
        for gc in gw.outo:
            e = gc.outsim.get(acc.name_b)
            if e is not None and not gc.closed:
                subs.extend(e.subs.values())
    return subs


# ==== the account of a server with leaf nodes ======================================================================

class LeafInterest:
    """The leaf nodes' part in every account's interest (``rillet.server.accounts.InterestListener``, given to
    the server by the composition root): local and routed interest goes to the leaf connections (LS+/LS-
    where due, ``LeafNodes.sub_changed``)."""

    __slots__ = ("leafnodes",)
    shadows = False

    def __init__(self, leafnodes: "LeafNodes") -> None:
        self.leafnodes = leafnodes

    def local_interest(self, acc: Any, sub: Any, added: bool) -> None:
        self.leafnodes.sub_changed(acc, sub, added)

    def routed_interest(self, acc: Any, sub: Any, added: bool) -> None:
        self.leafnodes.sub_changed(acc, sub, added)


def deliver_leaf(acc: Account, lc: LeafConn, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                 msg: bytes) -> None:
    """A message from leaf connection ``lc`` on a server without gateways (``LeafNodes.leaf_entry``): local
    subscribers, routes (unless it came from our hub), other leafs; queue groups only where the message
    names them."""
    if acc.mappings:
        mapped = acc.map_subject(subject)
        if mapped is None:
            return
        subject = mapped
    _from_leaf(acc, lc, acc._match(subject.decode("utf-8", "surrogateescape")), subject, reply, queues, hdr, msg)


def deliver_routed(acc: Account, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                   msg: bytes) -> None:
    """A message from a route on a server with leaf nodes and no gateways (``Cluster.routed_entry``): local
    subscribers (``Account.deliver_routed``), and the leafs we are hub for."""
    Account.deliver_routed(acc, rc, subject, reply, queues, hdr, msg)
    if acc.server.leafs:
        _routed_to_leafs(acc, rc, subject, reply, queues, hdr, msg)


def _from_leaf(self: Any, lc: LeafConn, r: SublistResult, subject: bytes, reply: bytes | None, queues: tuple,
               hdr: int, msg: bytes) -> None:
    """``deliver_leaf`` after the mapping and the match (``self``: the account)."""
    if not (r.psubs or r.qsubs):
        return
    plan = plan_of(r, self)
    spoke = lc.spoke
    origin = lc.remote_cluster
    targets: dict[Any, list[bytes]] = {}
    for rc in plan.links:
        if rc is lc or rc.closed:
            continue
        if rc.kind == ROUTER_KIND:
            if spoke:
                continue
        elif origin and rc.remote_cluster == origin:
            continue
        targets[rc] = []
    qsubs: list[list[Any]] = []
    if queues and r.qsubs:
        names = set(bytes(q) for q in queues)
        for g in r.qsubs:
            qn = g[0].queue_b
            if qn not in names:
                continue
            loc = [s for s in g if type(s) is not RemoteSub and not origin_only(s)]
            if loc:
                qsubs.append(loc)
                continue
            cands = [s for s in g if s.client is not lc and not s.client.closed
                     and not (spoke and s.client.kind == ROUTER_KIND)
                     and not (s.client.kind == LEAF_KIND and origin and s.client.remote_cluster == origin)]
            if cands:
                cum = []
                total = 0
                for s in cands:
                    total += max(s.weight, 1)
                    cum.append(total)
                m = cands[min(bisect_right(cum, random() * total), len(cands) - 1)]
                targets.setdefault(m.client, []).append(qn)
    psubs = plan.psubs
    if psubs or qsubs:
        i = js_ack_deliver_idx(reply) if reply is not None and reply[:8] == b"$JS.ACK." else -1
        if i > 0:  # a JetStream delivery (nats-server's form): shown with the stream subject after '@'
            deliver_here(self, lc, psubs, qsubs, reply[i + 1:], reply[:i], hdr, msg, subject)
        else:
            deliver_here(self, lc, psubs, qsubs, subject, reply, hdr, msg)
    name = self.name_b
    org = origin.encode() if origin else None
    for rc, qs in targets.items():
        if org is not None and rc.kind == ROUTER_KIND:
            rc.send_lmsg(org, name, subject, reply, qs, hdr, msg)  # (peers skip leafs of that cluster)
        else:
            rc.send_msg(name, subject, reply, qs, hdr, msg)


def _routed_to_leafs(self: Any, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                     msg: bytes) -> None:
    """The leaf part of ``deliver_routed``: a routed message to the leafs we are hub for."""
    r = self._match(subject.decode("utf-8", "surrogateescape"))
    if not (r.psubs or r.qsubs):
        return
    plan = plan_of(r, self)
    targets: dict[Any, list[bytes]] = {}
    o = getattr(rc, "lmsg_origin", None)
    origin = o.decode("utf-8", "replace") if o else ""
    for lc in plan.links:
        if lc.kind == LEAF_KIND and not lc.spoke and not lc.closed and \
                not (origin and lc.remote_cluster == origin):
            targets[lc] = []
    if queues and r.qsubs:
        names = set(bytes(q) for q in queues)
        for g in r.qsubs:
            qn = g[0].queue_b
            if qn not in names or qn in plan.in_q:
                continue  # (a local member took it)
            cands = [s for s in g if type(s) is RemoteSub and s.client.kind == LEAF_KIND
                     and not s.client.spoke and not s.client.closed
                     and not (origin and s.client.remote_cluster == origin)]
            if cands:
                m = cands[int(random() * len(cands))]
                targets.setdefault(m.client, []).append(qn)
    for lc, qs in targets.items():
        lc.send_msg(self.name_b, subject, reply, qs, hdr, msg)


# ==== a server with gateways and leaf nodes =======================================================================

_GR, _GRL, _OFF = g._GR, g._GR_LEN, g._SUBJECT_OFFSET  # (the gateway reply prefix)


def deliver_leaf_gateways(acc: Account, lc: LeafConn, subject: bytes, reply: bytes | None, queues: tuple,
                          hdr: int, msg: bytes) -> None:
    """A message from leaf connection ``lc`` on a server with gateways (``LeafNodes.leaf_entry``): as
    nats-server's processMsgResults for a LEAF origin, to local subscribers, routes, other leafs and then to
    the gateways (the account's gateway part, ``acc.gw``: a ``_GR_.`` reply goes straight to its cluster)."""
    if acc.mappings:
        mapped = acc.map_subject(subject)
        if mapped is None:
            return
        subject = mapped
    gws = acc.gw
    if gws.replies:  # a response to a request from another cluster, given here without _GR_.
        subject = gws.replies.lookup(subject) or subject
    if subject[:_GRL] == _GR:
        gw = gws.gw
        if subject[_GRL:_GRL + g._HL] == gw.hash:
            gw.gateway_reply(lc, acc.name_b, subject, reply, hdr, msg)
        else:
            gws.send(subject, reply, hdr, msg, [])
        return
    r = acc._match(subject.decode("utf-8", "surrogateescape"))
    _from_leaf(acc, lc, r, subject, reply, queues, hdr, msg)
    if gws.outo:
        gws.send(subject, reply, hdr, msg, r.qsubs)


def deliver_routed_gateways(acc: Account, rc: Any, subject: bytes, reply: bytes | None, queues: tuple, hdr: int,
                            msg: bytes) -> None:
    """A message from a route on a server with gateways and leaf nodes (``Cluster.routed_entry``): a ``_GR_.``
    reply for this cluster, or (its ``_GR_.`` reply tracked and shown without the prefix) to this server's
    subscribers and the leafs we are hub for."""
    if subject[:_GRL] == _GR:
        acc.gw.gw.gateway_reply(rc, acc.name_b, subject, reply, hdr, msg)
        return
    if reply and reply[:_GRL] == _GR and len(reply) > _OFF:
        reply = acc.gw.replies.track(reply)
    Account.deliver_routed(acc, rc, subject, reply, queues, hdr, msg)
    if acc.server.leafs:
        _routed_to_leafs(acc, rc, subject, reply, queues, hdr, msg)
