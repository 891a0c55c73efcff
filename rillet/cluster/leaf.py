"""Leaf node connections, as nats-server 2.15 makes them: the hub side (leafnode listener) and the leaf side
(``remotes``, solicited with a reconnect delay), on the LEAF protocol of ``rillet.cluster.protocol``. The
manager and the delivery steps are here; one connection (``LeafConn``) is ``rillet.cluster.leaf_conn``.

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
import dataclasses
import secrets
import ssl
import sys
from bisect import bisect_right
from random import random
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlsplit

import rillet
from rillet import compression as cc
from rillet import jwt
from rillet.cluster import info as ci
from rillet.cluster import gateway_account as ga
from rillet.cluster import protocol as cp
from rillet.compression import CompressionConfig
from rillet.config.options import User
from rillet.cluster.listening import Listening
from rillet.cluster.routed import RemoteSub, js_ack_deliver_idx, origin_only
from rillet.server import jsdomain
from rillet.server.accounts import Account
from rillet.server.auth import compare_secret
from rillet.server.delivery import ConnKind, deliver_here, plan_of
from rillet.server.listen import hostport, server_port_socket
from rillet.server.tls import TLSClientListener, make_server_context
from rillet.subjects.sublist import SublistResult
from rillet.cluster.leaf_conn import (AUTH_VIOLATION, GATEWAY_KIND, JS_DENY, LEAF_DIAL_TIMEOUT, LEAF_KIND, ROUTER_KIND,
                                      LeafConn, RemoteState, _redact_host, client_tls_context)

if TYPE_CHECKING:
    from rillet.config.leaf_section import LeafNodeOptions


class LeafNodes(Listening):
    """The leaf node manager of a server: the leafnode listener, the remotes, interest, /leafz."""

    _TASK_FAILED = "leafnode connect task failed"
    _LISTENER = "leafnode listener"

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
            # accepted as the client port's TLS listener accepts: per connection, TLS first when the options in
            # force say handshake_first (with its fallback delay), else the INFO first (and the upgrade after it
            # when there is a tls {} block: LeafConn), so that a reload may change either
            first = TLSClientListener(srv, sock, tls_opts=lambda: self.opts.tls, context=lambda: self.tls_server,
                                      factory=lambda: LeafConn(self), what="leafnode")
            await first.start_serving()
            self._listener = first  # type: ignore[assignment]
            self.addr = (host, self._listener.sockets[0].getsockname()[1])
            srv.log.notice(f"Listening for leafnode connections on {hostport(host, self.addr[1])}")
        for r in self.remotes:
            if not r.urls:
                srv.log.debug("Empty remote leafnode definition, nothing to connect")
                continue
            self._solicit(r, 0.0)

    def _close_for_shutdown(self, conn: Any) -> None:
        conn.close("Server Shutdown")

    # ---- soliciting -----------------------------------------------------------------------------------

    def accept_conn(self) -> LeafConn:
        """A hub-side leaf connection for a transport accepted elsewhere (the websocket listener's
        ``/leafnode`` path), so that the server package needs no import of this one."""
        return LeafConn(self)

    def _solicit(self, r: RemoteState, delay: float) -> None:
        self._spawn(self._connect(r), delay)

    async def _connect(self, r: RemoteState) -> None:
        srv = self.server
        log = srv.log
        while self.running and not r.removed:
            u = r.next_url()
            ws = u.scheme.lower() in ("ws", "wss")
            secure = ws and (u.scheme.lower() == "wss" or r.tls_ctx is not None)
            # a remote's tls { handshake_first }: the TLS handshake right after the dial, before the hub's INFO
            first = not ws and r.opts.tls is not None and r.opts.tls.handshake_first and r.tls_ctx is not None
            host, port = u.hostname or "", u.port or ((443 if secure else 80) if ws else 7422)
            if secure and r.tls_ctx is None:
                r.tls_ctx = client_tls_context(None)
            log.debug(f"Trying to connect as leafnode to remote server on {hostport(host, port)}")
            if ws:
                from rillet.cluster.leaf_ws import WSDialer
                factory: Any = lambda: WSDialer(LeafConn(self, r), hostport(host, port),  # noqa: E731
                                                no_masking=r.opts.ws_no_masking, compress=r.opts.ws_compress)
            else:
                factory = lambda: LeafConn(self, r)  # noqa: E731
            try:
                proto = await self._dial(factory, host, port,
                                         r.opts.dial_timeout or self.opts.dial_timeout or LEAF_DIAL_TIMEOUT,
                                         r.tls_ctx if secure or first else None, host)
                r.conn = proto.inner if ws else proto
                r.attempts = 0
                if r.removed:  # (removed or disabled by a reload while dialling)
                    r.conn.close("Client Closed")
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
                            deny_pub=list(ro.deny_imports) or None, isolate=ro.request_isolation,
                            compress_mode=lc.compression,
                            remote_account=acc, protocol=ci.SERVER_PROTO)
        if srv.cluster is not None:
            co.cluster = srv.cluster.name
        if ro.credentials:
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
        # (the JetStream API stays on this side, unless the account's default_js_domain is the empty one)
        js_deny = [] if srv.opts.default_js_domain and jsdomain.lets_js_through(srv, acc) else list(JS_DENY)
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
            from rillet.cluster.route_urls import global_unicast_ips
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
        srv = self.server
        lc.auth_failure = ""
        if srv.opts.proxies_trusted:  # (proxies { trusted }: a proxy's signature of the nonce, checked first)
            proxied, lc.proxy_key = srv.authenticator.proxy_check(raw, nonce)
            if proxied and not lc.proxy_key:
                lc.auth_failure = "Proxy Not Trusted"
                return None

        def proxy_refused(required: bool) -> bool:
            if required and not lc.proxy_key:
                lc.debug("proxy connection required")
                lc.auth_failure = "Proxy Required"
                return True
            return False
        if o.username or o.nkey:
            if proxy_refused(o.proxy_required):
                return None
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
            if o.tls is not None and o.tls.verify_and_map:
                # tls { verify_and_map }: the leaf is the user its certificate names (email, DNS, URI SANs, then
                # the subject DN, as nats-server's checkClientTLSCertSubject), with that user's password if any
                u = self._cert_user(lc)
                if u is None:
                    lc.debug("no leafnode user matches the certificate")
                    return None
                if co.user:
                    srv.log.warn(f'User "{co.user}" found in connect proto, but user required from cert')
                if proxy_refused(u.proxy_required) or not compare_secret(u.password, co.password):
                    return None
                return u.account or "$G"
            for u in o.users:
                if u.username == co.user:
                    if proxy_refused(u.proxy_required) or not compare_secret(u.password, co.password):
                        return None
                    return u.account or "$G"
            return None
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
        cert = None
        if o.tls is not None and o.tls.verify_and_map and lc.transport is not None:
            cert = lc.transport.get_extra_info("peercert")  # (the server's users named by it: auth.py)
        res = srv.authenticator.authenticate(raw, nonce, "LEAFNODE", peer_cert=cert, proxied=bool(lc.proxy_key))
        if res is False or res is None:
            lc.auth_failure = srv.authenticator.failure
            return None
        if res is True:
            return o.account or "$G"
        lc.apply_user_perms(getattr(res, "permissions", None))
        return getattr(res, "account", "") or "$G"

    def _cert_user(self, lc: LeafConn) -> Any:
        """The leafnodes authorization user the leaf's (verified) certificate names, or None."""
        from rillet.server.auth import tls_map_user
        t = lc.transport
        cert = t.get_extra_info("peercert") if t is not None else None
        if not cert:
            return None
        users = {u.username: u for u in self.opts.users}
        found = tls_map_user({n: User(username=n) for n in users}, cert, "LEAFNODE")
        return users[found.username] if found is not None else None

    # ---- registration and interest --------------------------------------------------------------------

    def register(self, lc: LeafConn) -> None:
        """A connection is bound to its account: denies, then every subscription it should hear about."""
        srv = self.server
        acc = lc.account
        if lc.closed or acc is None:
            return
        if not lc.solicited and not (srv.opts.default_js_domain and jsdomain.lets_js_through(srv, lc.acc_name)):
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
                lc.smap.add(b"", ga.subject_b(sub), ga.queue_b(sub), n=_count(sub))
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
        if r is not None and self.running and not self.server.shutting_down and not r.removed:
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
            if lc.isolated:  # (interest isolation: no leaf's interest, its $LDS. included, as nats-server)
                return False
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
                gw.update_interest(acc.name_b, ga.subject_b(sub), ga.queue_b(sub), 1 if added else -1,
                                   sub if added else None)
        if not self.conns:
            return
        sb, qb = ga.subject_b(sub), ga.queue_b(sub)
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
        from rillet.gocompat.monitorfmt import num, set_lists
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
                rd["deny"] = set_lists(exports=r.deny_exports, imports=r.deny_imports)
            rem.append(rd)
        if rem:
            d["remotes"] = rem
        if o.write_deadline:
            d["write_deadline"] = int(o.write_deadline * 1e9)
        return d


    # ---- reload ---------------------------------------------------------------------------------------

    def reloaded(self, old: "LeafNodeOptions") -> None:
        """A reload changed what may change at runtime (``check_reload``), as nats-server applies it: remotes
        added (dialled), removed or disabled (their connection closed, not dialled again), enabled again; a
        remote's tls {} and the listener's (the next connections); a compression change closes the connections it
        concerns, which come again with the new setting."""
        srv = self.server
        log = srv.log
        new = self.opts = srv.opts.leaf
        if new.tls != old.tls:
            self.tls_server = make_server_context(new.tls) if new.tls is not None else None
        comp = (new.compression, new.compression_rtts) != (old.compression, old.compression_rtts)
        if comp:
            log.notice(f"Reloaded: LeafNode Compression value is: {new.compression or cc.LEAF_DEFAULT}")
            for lc in list(self.conns):
                if not lc.solicited:
                    lc.close("Client Closed")
        by_name = {r.opts.name(): r for r in self.remotes}
        keep: list[RemoteState] = []
        for ro in new.remotes:
            r = by_name.pop(ro.name(), None)
            if ro.disabled:
                if r is not None:
                    self._stop_remote(r)
                    log.notice(f"Reloaded: LeafNode Remote {ro.name()} Disabled value is: true")
                continue
            if r is None:
                r = RemoteState(ro, new.reconnect)
                if ro.tls is not None:
                    r.tls_ctx = client_tls_context(ro.tls)
                was = next((o for o in old.remotes if o.name() == ro.name()), None)
                log.notice(f"Reloaded: LeafNode Remote {ro.name()} "
                           + ("Disabled value is: false" if was is not None else "added"))
                keep.append(r)
                if r.urls:
                    self._solicit(r, 0.0)
                continue
            before, r.opts = r.opts, ro
            if ro.tls != before.tls:
                r.tls_ctx = client_tls_context(ro.tls) if ro.tls is not None else None
            keep.append(r)
            if (ro.compression, ro.compression_rtts) != (before.compression, before.compression_rtts):
                log.notice(f"Reloaded: LeafNode Remote {ro.name()} Compression value is: "
                           f"{ro.compression or cc.LEAF_DEFAULT}")
                if r.conn is not None:
                    r.conn.close("Client Closed")  # (dialled again at once with the new setting)
        for r in by_name.values():
            self._stop_remote(r)
            log.notice(f"Reloaded: LeafNode Remote {r.opts.name()} removed")
        self.remotes = keep
        self._recheck_pins(old)

    def _recheck_pins(self, old: "LeafNodeOptions") -> None:
        """pinned_certs changed by a reload: connected leafs whose key is no longer pinned go (nats-server's
        recheckPinnedCerts, which logs them with the clients)."""
        from rillet.server.tls import pinned_error

        def pins(o: Any) -> list:
            return [list(t.pinned_certs) if t is not None else [] for t in [o.tls] + [r.tls for r in o.remotes]]
        if pins(old) == pins(self.opts):
            return
        gone = []
        for lc in list(self.conns):
            p = lc.pins()
            t = lc.transport
            if lc.closed or not p or t is None or t.get_extra_info("websocket") is not None:
                continue
            if pinned_error(t.get_extra_info("ssl_object"), p) is not None:
                gone.append(lc)
        if gone:
            self.server.log.notice(f"Disconnect {len(gone)} clients due to pinned certs reload")
            for lc in gone:
                lc.close("TLS Handshake Failure")

    def _stop_remote(self, r: RemoteState) -> None:
        r.removed = True
        if r.conn is not None:
            r.conn.close("Client Closed")


def check_reload(server: Any, new_opts: Any) -> None:
    """What a reload may change in the leafnodes block, as nats-server: the remotes (added, removed, ``disabled``,
    their tls {} and compression) and the listener's tls {} and compression; anything else, or a leafnodes block
    that comes or goes, refuses the reload (ValueError)."""
    old = server.opts.leaf
    new = new_opts.leaf
    active = lambda ln: ln is not None and bool(ln.port or ln.remotes)  # noqa: E731
    if not active(old) and not active(new):
        return
    refused = ValueError("config reload not supported for LeafNode: Rillet applies changes of the leafnodes "
                         "block other than its remotes, tls and compression at the next start only")
    if old is None or new is None or server.leafnodes is None or bool(old.port) != bool(new.port):
        if old != new:
            raise refused
        return
    bare = {"tls": None, "compression": "", "compression_rtts": ()}
    if dataclasses.replace(old, remotes=[], **bare) != dataclasses.replace(new, remotes=[], **bare):
        raise refused
    before = {r.name(): r for r in old.remotes}
    for r in new.remotes:
        o = before.get(r.name())
        if o is not None and dataclasses.replace(o, disabled=False, **bare) != dataclasses.replace(r, disabled=False,
                                                                                                      **bare):
            raise ValueError(f"config reload not supported for LeafNode remote {r.name()}: only its tls, "
                             f"compression and disabled settings change at runtime")
    try:
        if new.tls is not None and new.tls != old.tls:
            make_server_context(new.tls)
        for r in new.remotes:
            if r.tls is not None and r.tls != getattr(before.get(r.name()), "tls", None):
                client_tls_context(r.tls)
    except ValueError as e:
        raise ValueError(f"leafnodes tls: {e}") from e


def _sign(seed: str, nonce: bytes) -> str:
    import base64

    import nkeys
    kp = nkeys.from_seed(seed.encode() if isinstance(seed, str) else seed)
    return base64.urlsafe_b64encode(kp.sign(nonce)).rstrip(b"=").decode()


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

_GR, _GRL, _OFF = ga._GR, ga._GR_LEN, ga._SUBJECT_OFFSET  # (the gateway reply prefix)


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
        if subject[_GRL:_GRL + ga._HL] == gw.hash:
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
