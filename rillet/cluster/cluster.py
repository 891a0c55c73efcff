"""The route manager of one server: the route listener, soliciting routes, the handshake, gossip, interest.

What nats-server does (route.go), and so does this:

* the route port accepts connections; configured routes (``routes``, explicit) are dialled until they
  connect, 1s apart (doubling up to 30s with ``connect_backoff``); routes learnt by gossip (implicit) are
  dialled ``connect_retries`` more times after a failure, or once;
* the dialling side sends CONNECT and its INFO, the accepting side its INFO and expects CONNECT first
  (cluster authorization, cluster name, "attempted to connect to route port" for a client);
* a route is registered under the peer's server id when its first INFO arrives; a second connection to
  the same peer (both sides dialled at once) is closed as a duplicate, and the kept one is marked to
  reconnect should it go too (the peer may have kept the other one);
* a newly registered route's INFO is forwarded to the other routes (gossip, with nats-server's gossip
  modes), which dial the new server: knowing one seed is enough to join the full mesh;
* the client connect URLs of the cluster's servers are sent to clients (async INFO ``connect_urls``) as
  routes come and go, unless ``no_advertise``; lame-duck mode tells routes and clients;
* a closed route loses its remote interest at once; a solicited one (or one marked to retry) is dialled
  again after a short random delay.

Routes are pooled as in nats-server 2.10+: ``pool_size`` connections to each server (3 when left unset,
DEFAULT_ROUTE_POOL_SIZE; ``-1`` turns pooling off), each account's interest and messages
on the connection of its pool index (FNV-1a of its name modulo the pool size, the same on every server).
The dialling side sends CONNECT, waits for the peer's INFO, takes the first free index of the pool and
only then sends its INFO with ``route_pool_idx``; once registered it dials the next connection of the
pool (after 0-100 ms) until the pool is full. The accepting side places a connection at the index its
INFO names (a taken index: a duplicate, closed). A peer without ``route_pool_size`` (pooling off, older
server) gets one connection that carries every account. Two servers with different pool sizes (during a
rolling reload) keep the larger number of connections, each side sending an account's traffic on the
connection of its own pool index, as nats-server 2.11+. ``routes`` keeps one connection per server (the
first of its pool): gossip, connect URLs and lame duck go through it.

A reload may add and remove route URLs, change the authorization (accepted routes whose credentials no
longer match are closed), the permissions, the cluster name, the pool size (every pooled connection is
closed and the pools form again) and the pinned accounts: an account added is announced to each server on
its old pool connection (INFO ``route_acc_add_reqid`` with ``route_account``; the peer stops taking the
account's interest there and answers with the same INFO without the account), and once every peer has
answered (or after 2 s) its dedicated routes are dialled; an account removed has its dedicated routes
closed and its interest sent on its pool connection again.

``cluster { permissions { import, export } }``: a local subscription's interest goes to routes only when
``import`` allows its subject (as a publish permission), a route's RS+/LS+ is taken only when ``export``
allows it (as a subscribe permission); both are sent to peers in the INFO and shown in /routez.

Pinned accounts (``accounts [...]``, and the system account, which nats-server pins by default when
pooling) get a dedicated route to each server, outside the pool: the dialling side names the account in
its INFO (``route_account``, sent at once), both sides then leave the account out of RS+/RS-/RMSG on that
route, the account's interest goes only there (and to servers without pooling), and a new pinned route
is gossiped with its account so the other servers dial theirs.

With ``cluster { tls {} }`` every route is TLS from its first byte, as nats-server does it (the TLS
handshake comes before the INFO and CONNECT; both are then sent with ``tls_required``): the accepting side
always asks for and verifies the peer's certificate (nats-server forces this for clusters), the CA file
serves to verify both sides, the dialling side checks the peer's certificate against the route URL's host
unless ``insecure``, and ``pinned_certs`` applies to both sides.
"""
from __future__ import annotations

import asyncio
import random
import ssl
import sys
from typing import TYPE_CHECKING, Any, Callable

import rillet
from rillet import compression as cc
from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.compression import CompressionConfig
from rillet.cluster.interest import LocalInterest, frame_for
from rillet.cluster.route import EXPLICIT, IMPLICIT, RouteConn
from rillet.server.accounts import Account
from rillet.server.auth import PermChecker
from rillet.server.listen import hostport, server_port_socket

from rillet.cluster.listening import Backoff, Listening
from rillet.cluster.route_reload import ClusterReload
from rillet.cluster.route_tls import _TLSRouteListener, route_tls_contexts
from rillet.cluster.route_urls import (DEFAULT_ROUTE_POOL_SIZE, RouteURL, _dial_error, _dynamic_name, _subject_permission,
                                      global_unicast_ips, parse_route_url, pinned_names)
from rillet.config.options import Permission, Permissions

if TYPE_CHECKING:
    from rillet.server.server import Server

ROUTE_CONNECT_DELAY = 1.0  # nats-server's DEFAULT_ROUTE_CONNECT
ROUTE_CONNECT_MAX_DELAY = 30.0  # DEFAULT_ROUTE_CONNECT_MAX (with connect_backoff)
ROUTE_RECONNECT = 1.0  # DEFAULT_ROUTE_RECONNECT
ROUTE_DIAL_TIMEOUT = 1.0  # DEFAULT_ROUTE_DIAL
ROUTE_MAX_PING_INTERVAL = 30.0
CONNECT_ERROR_REPORTS = 3600  # connect_error_reports: every Nth failed attempt of a first connect is an error
# (the first too); reconnect_error_reports (default 1): every Nth failed attempt to reconnect
ROUTE_PROTO = 3  # route protocol with accounts and message tracing (nats-server's MsgTraceProto)


class Cluster(ClusterReload, Listening):
    _TASK_FAILED = "route connect task failed"
    _LISTENER = "route listener"

    def __init__(self, server: "Server") -> None:
        o = server.opts
        for r in o.cluster.routes:
            parse_route_url(r)  # ValueError: refuse to start
        self.server = server
        self.tls_server: ssl.SSLContext | None = None
        self.tls_client: ssl.SSLContext | None = None
        if o.cluster.tls is not None:
            self.tls_server, self.tls_client = route_tls_contexts(o.cluster.tls)  # ValueError: refuse to start
        self.name = o.cluster.name or _dynamic_name()
        self.dynamic = not o.cluster.name
        # where a message from a route enters (``entry(account, route, subject, reply, queues, hdr, msg)``):
        # Account.deliver_routed, or the leaf/gateway one when those links are on this server too (set by the
        # composition root)
        self.routed_entry: Callable[..., None] = Account.deliver_routed
        # fn(what, route, info): "added" when the first route to a server registers (with its INFO), "gone"
        # when the last one closes (clustered JetStream's peer tracking)
        self.route_listeners: list[Any] = []
        self._set_pool_size(o.cluster.pool_size)
        self.routes: dict[str, RouteConn] = {}  # remote server id -> one registered route (first of its pool)
        # pinned account -> remote server id -> its dedicated route
        self.pinned: dict[str, dict[str, RouteConn]] = {n: {} for n in pinned_names(o)}
        self.pinned_config = pinned_names(o)  # (what the configuration pins; reloads compare it)
        # accounts a peer moved to dedicated routes (reload): their interest is not taken on pool routes
        self.transitioning: set[bytes] = set()
        self._acc_add_reqid = ""  # a reload's pinned-account change waiting for the peers' answers
        self._acc_add_left = 0
        self._acc_add_done: asyncio.Event | None = None
        self.route_perms: PermChecker | None = None  # cluster permissions (import: publish, export: subscribe)
        self._set_permissions(o.cluster.permissions)
        self.pools: dict[str, list[RouteConn | None]] = {}  # remote server id -> its routes by pool index
        self._acc_idx: dict[bytes, int] = {}  # account name -> pool index
        self.conns: set[RouteConn] = set()  # every route connection, registered or not
        self.local = LocalInterest()
        self.accepting = True
        self.running = False
        self._listener: asyncio.AbstractServer | None = None
        self.addr: tuple[str, int] = ("", 0)
        self._tasks: set[asyncio.Task] = set()
        self.self_urls: set[tuple[str, int]] = set()  # configured route URLs that turned out to be us
        self.own_urls: list[str] = []  # this server's client URLs
        self.remote_urls: dict[str, int] = {}  # client URLs of the other servers (reference counted)
        self._urls_shared = False  # connect_urls are sent once a route has been registered
        self._stalled_by: set[RouteConn] = set()  # congested routes (see stall)
        self._paused: list[Any] = []  # client transports not read while a route is congested

    @property
    def opts(self) -> Any:
        return self.server.opts.cluster

    def _set_pool_size(self, ps: int) -> None:
        self.pool_size = DEFAULT_ROUTE_POOL_SIZE if ps == 0 else ps  # < 0: no pooling
        self.pooling = self.pool_size >= 1
        self.routes_pool_size = self.pool_size if self.pooling else 1

    def _set_permissions(self, perms: Any) -> None:
        self.route_perms = None if perms is None else PermChecker(perms)

    def can_import(self, subject: bytes) -> bool:
        """Whether our interest in ``subject`` is sent to routes (the import permission)."""
        return self.route_perms is None or self.route_perms.can_publish(subject)

    # ---- settings ---------------------------------------------------------------------------------------

    def ping_interval(self) -> float:
        d = self.opts.ping_interval or self.server.opts.ping_interval
        return min(d, ROUTE_MAX_PING_INTERVAL)

    def ping_max(self) -> int:
        return self.opts.ping_max or self.server.opts.ping_max

    def tls_timeout(self) -> float:
        tls = self.opts.tls
        return (tls.timeout if tls is not None else 0.0) or 2.0

    def comp_config(self) -> CompressionConfig:
        """The cluster's compression setting (nats-server's default: accept)."""
        o = self.opts
        return CompressionConfig(o.compression or cc.ROUTE_DEFAULT, o.compression_rtts)

    def set_name(self, name: str, dynamic: bool, keep: str) -> None:
        """Take the peer's cluster name (ours was generated); routes to others are dropped."""
        self.server.log.notice(f"Cluster name updated to {name}")
        self.name = name
        self.dynamic = dynamic
        for rc in list(self.conns):
            if rc.remote_id and rc.remote_id != keep:
                rc.close("Cluster Name Conflict")

    # ---- start, stop ------------------------------------------------------------------------------------

    async def start(self) -> None:
        srv = self.server
        o = self.opts
        log = srv.log
        loop = srv.loop
        host = o.host or "0.0.0.0"
        port = 0 if o.port == -1 else o.port
        log.notice(f"Cluster name is {self.name}")
        if self.dynamic:
            log.warn("Cluster name was dynamically generated, consider setting one")
        sock = await server_port_socket(loop, "router", o.port, host, port)
        if self.tls_server is not None:
            sock.listen(1024)
            self._listener = _TLSRouteListener(self, sock)
        else:
            self._listener = await loop.create_server(lambda: RouteConn(self), sock=sock, backlog=1024)
        self.addr = (host, self._listener.sockets[0].getsockname()[1])
        log.notice(f"Listening for route connections on {hostport(host, self.addr[1])}")
        self.own_urls = self._client_urls()
        self.running = True
        srv.on_shutdown.append(self.shutdown)
        for r in o.routes:
            self.solicit(parse_route_url(r), EXPLICIT, 0, first=True)
            for acc in self.pinned:
                self.solicit(parse_route_url(r), EXPLICIT, 0, first=True, account=acc)

    def _client_urls(self) -> list[str]:
        srv = self.server
        o = srv.opts
        port = srv.addr[1]
        if o.client_advertise:
            from rillet.config.builder_base import split_host_port
            h, p = split_host_port(o.client_advertise)
            return [hostport(h, int(p) if p else port)]
        host = o.host or "0.0.0.0"
        if host in ("0.0.0.0", "::", "[::]"):
            ips = global_unicast_ips()
            if not ips:
                srv.log.error(f'Address "{host}" can not be resolved properly')
            return [hostport(ip, port) for ip in ips]
        return [hostport(host, port)]

    async def shutdown(self) -> None:
        self.accepting = False
        await Listening.shutdown(self)

    # ---- INFO and CONNECT -------------------------------------------------------------------------------

    def route_info(self) -> ci.Info:
        srv = self.server
        o = self.opts
        so = srv.opts
        info = ci.Info(server_id=srv.server_id, server_name=srv.name, version=rillet.SERVER_VERSION,
                       proto=ROUTE_PROTO, go=f"python{sys.version_info[0]}.{sys.version_info[1]}",
                       host=o.host or "0.0.0.0", port=self.addr[1], headers=not so.no_header_support,
                       auth_required=bool(o.username), max_payload=so.max_payload, cluster=self.name,
                       cluster_dynamic=self.dynamic, lnoc=True, lnocu=True,
                       rillet_raft_ops=list(ci.RILLET_RAFT_OPS))
        if self.tls_server is not None:
            info.tls_required = info.tls_verify = True
        if self.pooling:
            info.route_pool_size = self.pool_size
        perms = o.permissions
        if perms is not None:
            info.import_ = _subject_permission(perms.publish)
            info.export = _subject_permission(perms.subscribe)
        if o.advertise:
            from rillet.config.builder_base import split_host_port
            h, p = split_host_port(o.advertise)
            info.host, info.port = h, int(p) if p else self.addr[1]
            info.ip = f"nats-route://{hostport(info.host, info.port)}/"
        if not o.no_advertise and self.own_urls:
            info.connect_urls = list(self.own_urls)
        if srv.gateway is not None and srv.gateway.url:
            info.gateway_url = srv.gateway.url  # (the servers of a cluster list each other's in gateway INFO)
        if srv.leafnodes is not None and srv.leafnodes.route_url():
            info.leafnode_urls = [srv.leafnodes.route_url()]  # (gossiped to the leafs of the cluster)
        if srv.ldm:
            info.ldm = True
        rep = srv.go_js_report  # (a member of a Go JetStream cluster)
        if rep is not None:
            info.jetstream = True
            info.domain = rep.domain
        return info

    def initial_info(self, gossip_mode: int, pool_idx: int = 0, account: str = "",
                     compression: str | None = None) -> bytes:
        """The first INFO of a route connection: with a nonce, the pool index or pinned account, and the
        compression mode (the configured one, or what was negotiated: s2_auto when configured so); async
        INFOs carry none, as nats-server's."""
        info = self.route_info()
        cfg = self.comp_config()
        if compression is None:
            compression = cfg.mode  # ("not supported" too: nats-server writes it on routes, not on leafs)
        info.compression = cc.S2_AUTO if cfg.mode == cc.S2_AUTO else compression
        info.nonce = self.server.make_nonce().decode()
        info.gossip_mode = gossip_mode
        info.route_pool_idx = pool_idx
        info.route_account = account
        return ci.encode_info(info)

    def servers_connected(self) -> int:
        """How many servers we have every route to (the whole pool, and each pinned account's route)."""
        n = 0
        for rid, conns in self.pools.items():
            if conns[0] is not None and conns[0].no_pool:
                n += 1
            elif all(r is not None for r in conns) and all(rid in m for m in self.pinned.values()):
                n += 1
        return n

    def route_for(self, server_id: str, account: bytes) -> RouteConn | None:
        """The connection that carries ``account``'s interest and messages to server ``server_id``."""
        conns = self.pools.get(server_id)
        if conns is None:
            return None
        first = conns[0]
        pinned = self.pinned.get(account.decode("utf-8", "surrogateescape")) if self.pinned else None
        if pinned is not None and not (first is not None and first.no_pool):
            return pinned.get(server_id)
        if first is not None and first.no_pool:
            return first
        return conns[self.pool_index(account) if self.pooling else 0]

    def pool_index(self, account: bytes) -> int:
        """The pool index of an account's route (0 without pooling, -1 for a pinned account)."""
        i = self._acc_idx.get(account)
        if i is None:
            name = account.decode("utf-8", "surrogateescape")
            i = -1 if name in self.pinned else ci.route_pool_index(self.routes_pool_size, name)
            if len(self._acc_idx) < 65536:
                self._acc_idx[bytes(account)] = i
        return i

    def connect_json(self, url: RouteURL) -> bytes:
        srv = self.server
        return ci.encode_route_connect(ci.RouteConnect(
            echo=True, verbose=False, pedantic=False, user=url.user, password=url.password,
            tls_required=self.tls_client is not None,
            headers=not srv.opts.no_header_support, name=srv.server_id, cluster=self.name,
            cluster_dynamic=self.dynamic, lnoc=True))

    # ---- soliciting -------------------------------------------------------------------------------------

    def solicit(self, url: RouteURL, rtype: str, gossip_mode: int, first: bool, delay: float = 0.0,
                account: str = "") -> None:
        """Dial a route (``account``: a dedicated route for that pinned account)."""
        self._spawn(self._connect(url, rtype, gossip_mode, first, account), delay)

    def _configured(self, url: RouteURL) -> bool:
        for r in self.opts.routes:
            try:
                if parse_route_url(r).key == url.key:
                    return True
            except ValueError:
                continue
        return False

    async def _connect(self, url: RouteURL, rtype: str, gossip_mode: int, first: bool, account: str = "") -> None:
        srv = self.server
        log = srv.log
        attempts = 0
        backoff = Backoff(ROUTE_CONNECT_DELAY, ROUTE_CONNECT_MAX_DELAY)
        retries = self.opts.connect_retries
        while self.running:
            if rtype == EXPLICIT and not self._configured(url):
                log.debug(f'Not attempting to connect to explicit route "{url.redacted()}", no longer part of '
                          f"configured routes")
                return
            if url.key in self.self_urls:
                return
            if account and account not in self.pinned:
                log.debug(f'Not attempting to connect to route "{url.redacted()}" for account "{account}", no '
                          f"longer a per-account route")
                return
            log.debug(f"Trying to connect to route on {hostport(url.host, url.port)}")
            tls = self.tls_client
            try:
                rc = await self._dial(lambda: RouteConn(self, url, rtype, gossip_mode, account), url.host, url.port,
                                      ROUTE_DIAL_TIMEOUT, tls, url.host, None if tls is None else self.tls_timeout())
                if rtype == EXPLICIT and not self._configured(url) and not rc.closed:
                    # (a dial in flight when a reload removed the route, e.g. a pool connection: not kept)
                    rc.close("Route Removed", no_reconnect=True)
                return
            except ssl.SSLError as e:
                attempts += 1
                log.error(f"{hostport(url.host, url.port)} - TLS route handshake error: {e}")
            except (OSError, asyncio.TimeoutError) as e:
                attempts += 1
                text = f"Error trying to connect to route (attempt {attempts}): {_dial_error(url, e)}"
                extra = srv.opts.extra
                every = extra.get("connect_error_reports", CONNECT_ERROR_REPORTS) if first else \
                    extra.get("reconnect_error_reports", 1)
                if (first and attempts == 1) or attempts % max(int(every), 1) == 0:
                    log.error(text)
                else:
                    log.debug(text)
            if rtype != EXPLICIT and (retries <= 0 or attempts > retries):
                return
            await backoff.sleep(self.opts.connect_backoff)

    # ---- handshake --------------------------------------------------------------------------------------

    def first_route_info(self, rc: RouteConn, info: ci.Info) -> None:
        srv = self.server
        log = srv.log
        if info.server_id == srv.server_id:
            rc.remote_id = info.server_id
            if rc.solicited and rc.url is not None:
                self.self_urls.add(rc.url.key)
                log.debug(f'Detected route to self, ignoring "{rc.url.redacted()}"')
            rc.close("Duplicate Route", no_reconnect=True)
            return
        if info.cluster and info.cluster != self.name:
            if self.dynamic and (not info.cluster_dynamic or self.name < info.cluster):
                self.set_name(info.cluster, info.cluster_dynamic, info.server_id)
            else:
                rc.close("Cluster Name Conflict")
                return
        if not rc.solicited and info.server_name == srv.name:
            log.error(f'{rc.log_prefix()} - Remote server has a duplicate name: "{info.server_name}"')
            rc.close("Duplicate Server Name", no_reconnect=True)
            return
        if not self._negotiate_compression(rc, info):
            return
        acc_name = rc.pinned_acc if rc.solicited else info.route_account
        if acc_name:
            reason, again = "Protocol Violation", True
            if info.route_pool_size <= 0 or not self.pooling:
                text, again = f'Not possible to have a dedicated route for account "{acc_name}" between those servers', False
            elif acc_name not in self.pinned:
                text = f'No route for account "{acc_name}"'
            elif self.route_account(acc_name.encode("utf-8", "surrogateescape")) is None:
                text, reason = f'Unable to lookup account "{acc_name}": account not found', "Missing Account"
            else:
                text = ""
            if text:
                log.error(f"{rc.log_prefix()} - {text}")
                rc.close(reason, text, no_reconnect=not again)
                return
            rc.pinned_acc = acc_name
            rc.parser.pin(acc_name.encode("utf-8", "surrogateescape"))
        rc.info_received = True
        rc.remote_id = info.server_id
        rc.remote_name = info.server_name
        rc.lnoc, rc.lnocu = info.lnoc, info.lnocu
        rc.parser.lnocu = info.lnocu
        rc.remote.lnocu = info.lnocu
        rc.headers = info.headers and not srv.opts.no_header_support
        if rc.url is None:
            rc.url = RouteURL(info.host, info.port)
        if not info.ip:
            info.ip = f"nats-route://{hostport(rc.host, info.port)}/"
        rc.remote_ip_url = info.ip
        rc.connect_urls = list(info.connect_urls or ())
        rc.gateway_url = info.gateway_url
        rc.remote_pool_size = info.route_pool_size
        rc.remote_import, rc.remote_export = info.import_, info.export
        if rc.pinned_acc:
            self._add_pinned_route(rc, info)
        else:
            self._add_route(rc, info)

    def _negotiate_compression(self, rc: RouteConn, info: ci.Info) -> bool:
        """The compression part of a route's first INFO, as nats-server's: False when the route waits for
        the peer's next INFO (compression switched on) or was closed. A dialling side with compression
        configured delayed its first INFO until now; it goes out at registration (``rc.delayed_info``)."""
        cfg = self.comp_config()
        if not cc.needs_compression(cfg.mode):
            rc.compression = cc.NOT_SUPPORTED if not info.compression or cfg.mode == cc.NOT_SUPPORTED else cc.OFF
            return True
        if rc.comp_negotiated:
            return True  # (the INFO after the switch: registration goes on)
        rc.comp_negotiated = True
        sel = rc.select_compression(cfg, info.compression)
        if sel is None:
            return False
        mode, auto = sel
        rc.compression = mode
        if not cc.needs_compression(mode):
            return True
        # (an accepted route learns its pinned account after the negotiation, so that INFO names none)
        rc.start_s2(mode, auto, cp.info_frame(self.initial_info(0, account=rc.pinned_acc, compression=mode)),
                    info_first=rc.solicited)
        return False

    def _add_route(self, rc: RouteConn, info: ci.Info) -> None:
        rid = info.server_id
        pool = info.route_pool_size > 0
        err = ""
        # pools of different sizes (a rolling reload): as many connections as the larger pool
        eff = max(self.routes_pool_size, info.route_pool_size)
        if info.route_pool_size <= 0 or not self.pooling:
            pool = False  # one connection carries every account
            rc.no_pool = True
            eff = 1
        elif rc.solicited:
            if info.route_pool_idx != 0:
                err = f"Route pool index should not be set but is set to {info.route_pool_idx}"
        elif not 0 <= info.route_pool_idx < eff:
            err = f"Invalid route pool index: {info.route_pool_idx} - pool size is {info.route_pool_size}"
        if err:
            self.server.log.error(f"{rc.log_prefix()} - {err}")
            rc.close("Protocol Violation", err)
            return
        conns = self.pools.get(rid)
        idx = -1
        if conns is None:
            conns = self.pools[rid] = [None] * eff
            idx = info.route_pool_idx if pool else 0
        elif not pool:
            existing = next((r for r in conns if r is not None), None)
            if existing is not None:
                self._duplicate(existing, rc, no_reconnect=True)
                return
            idx = 0
        else:
            if len(conns) < eff:  # (the peer's pool grew: it reloaded with a larger pool_size)
                conns.extend([None] * (eff - len(conns)))
            if not rc.solicited:
                idx = info.route_pool_idx
                existing = conns[idx]
                if existing is not None:
                    self._duplicate(existing, rc, no_reconnect=False)
                    return
                sol = next((r for r in conns if r is not None and r.solicited), None)
                if sol is not None:
                    _upgrade(rc, sol.url, sol.rtype)
            else:
                for r in conns:
                    if r is not None:
                        _upgrade(r, rc.url, rc.rtype)
                idx = next((i for i, r in enumerate(conns) if r is None), -1)
        if idx < 0:
            rc.debug(f'Route pool size reached, closing extra connection to "{rid}"')
            rc.close("Duplicate Route", no_reconnect=True)
            return
        rc.pool_idx = idx
        if rc.delayed_info:
            rc.delayed_info = False
            rc.send(cp.info_frame(self.initial_info(rc.gossip_mode, idx, compression=rc.compression)))
        conns[idx] = rc
        sz = sum(r is not None for r in conns)
        self.server.routes[rc.cid] = rc  # (by connection id: /routez)
        rc.registered = True
        rc.debug(f'Registering remote route "{rid}"' + (f" (pool index {idx})" if pool else ""))
        if pool and sz > 1:  # the server is known already: this connection only takes its share of accounts
            self._send_interest(rc)
            if rc.solicited and sz != len(conns):
                self._fill_pool(rc)
            return
        self.routes[rid] = rc
        rc.remote_info = info
        for fn in list(self.route_listeners):
            fn("added", rc, info)
        gw = self.server.gateway
        if gw is not None:
            gw.add_cluster_url(rc.gateway_url)
            gw.route_added(rc)  # the gateways we have an outbound connection to
        if self.server.leafnodes is not None:
            self.server.leafnodes.route_added(rid, info.leafnode_urls)
        if len(self.routes) > 1:
            self._forward_gossip(rc, info)
        if not self.opts.no_advertise:
            self._urls_shared = True
            if self._add_urls(rc.connect_urls):
                self.server.broadcast_info()
        self._send_interest(rc)
        if pool and rc.solicited and len(conns) > 1:
            self._fill_pool(rc)

    def _add_pinned_route(self, rc: RouteConn, info: ci.Info) -> None:
        """A dedicated route for a pinned account: one per server, outside the pool."""
        acc = rc.pinned_acc
        rid = info.server_id
        conns = self.pinned[acc]
        existing = conns.get(rid)
        if existing is not None:
            self._duplicate(existing, rc, no_reconnect=True)
            return
        conns[rid] = rc
        if rc.delayed_info:  # (a dialled route with compression configured: our first INFO, delayed)
            rc.delayed_info = False
            rc.send(cp.info_frame(self.initial_info(rc.gossip_mode, account=acc, compression=rc.compression)))
        self.server.routes[rc.cid] = rc
        rc.registered = True
        rc.debug(f'Registering remote route "{rid}" for account "{acc}"')
        if len(conns) > 1:  # the other servers dial their own dedicated route to the new one
            info.route_account = acc
            self._forward_gossip(rc, info)
        self._send_interest(rc)

    def _send_interest(self, rc: RouteConn) -> None:
        """Our interest to a newly registered route: of every account, or of the accounts of its pool index,
        or of its pinned account."""
        imp = self.can_import
        if rc.pinned_acc:
            acc_b = rc.pinned_acc.encode("utf-8", "surrogateescape")
            frames = [frame_for(u, pinned=True) for u in self.local.snapshot(acc_b) if imp(u.subject)]
            if frames:
                rc.send(b"".join(frames))
            return
        every = rc.no_pool or not self.pooling
        frames = [frame_for(u) for u in self.local.snapshot()
                  if (every or self.pool_index(u.account) == rc.pool_idx) and imp(u.subject)]
        if frames:
            rc.send(b"".join(frames))

    def _fill_pool(self, rc: RouteConn) -> None:
        """The next connection of the pool to ``rc``'s server, 0-100 ms from now (as nats-server)."""
        if rc.url is not None:
            self.solicit(rc.url, rc.rtype, rc.gossip_mode, first=False, delay=random.randrange(100) / 1000)

    def _duplicate(self, kept: RouteConn, rc: RouteConn, no_reconnect: bool) -> None:
        if rc.solicited and not kept.solicited:
            kept.solicited = True
            kept.url = rc.url
        if rc.rtype == EXPLICIT:
            kept.rtype = EXPLICIT
        kept.retry = True  # (both sides may keep the other connection of the two: reconnect then)
        rc.debug(f'Detected duplicate remote route "{kept.remote_id}"')
        rc.close("Duplicate Route", no_reconnect=no_reconnect)

    def _forward_gossip(self, rc: RouteConn, info: ci.Info) -> None:
        from_gossip = rc.solicited and rc.rtype == IMPLICIT
        if (from_gossip and rc.gossip_mode != ci.GOSSIP_OVERRIDE) or info.gossip_mode == ci.GOSSIP_DISABLED:
            return
        info.nonce = ""
        frames: dict[int, bytes] = {}
        targets = list(self.routes.values())
        acc = info.route_account
        if acc:  # a pinned route: through our routes of that account first (as nats-server), so a server whose
            # pool route is not registered yet still hears of it; the pool's route for the others
            pinned = self.pinned.get(acc, {})
            targets = list(pinned.values()) + [r for r in targets if r.remote_id not in pinned]
        for r in targets:
            if r is rc or r.remote_id == info.server_id or r.closed or (acc and r.no_pool):
                continue
            if (not rc.solicited and r.rtype == EXPLICIT) or (rc.solicited and rc.rtype == EXPLICIT):
                gm = ci.GOSSIP_OVERRIDE
            elif not rc.solicited:
                gm = ci.GOSSIP_DISABLED
            else:
                gm = ci.GOSSIP_DEFAULT
            f = frames.get(gm)
            if f is None:
                info.gossip_mode = gm
                f = frames[gm] = cp.info_frame(ci.encode_info(info))
            r.send(f)
        self.server.schedule_flush()

    def async_route_info(self, rc: RouteConn, info: ci.Info) -> None:
        srv = self.server
        if info.route_acc_add_reqid:
            self._acc_add_info(rc, info)
            return
        if info.gateway and srv.gateway is not None:
            srv.gateway.info_from_route(info, rc.remote_id)
            return
        if info.gateway:
            srv.log.error(f'Received information about gateway "{info.gateway}" from {rc.remote_id}, but gateway '
                          f"is not configured")
            return
        if rc.remote_id and info.server_id != rc.remote_id:
            self._implicit_route(info, rc.no_pool)
            return
        if info.ldm and rc.connect_urls and not self.opts.no_advertise:
            if self._remove_urls(rc.connect_urls):
                srv.broadcast_info()
        elif not info.ldm and (info.import_ != rc.remote_import or info.export != rc.remote_export):
            self._remote_perms_changed(rc, info)

    def _remote_perms_changed(self, rc: RouteConn, info: ci.Info) -> None:
        """The peer's permissions changed (its reload): the interest its new export permission now takes, and
        that it ignored before, is sent again (as nats-server's updateRemoteRoutePerms)."""
        def exports(p: Any) -> PermChecker | None:
            if p is None:
                return None
            return PermChecker(Permissions(subscribe=Permission(allow=p.allow, deny=p.deny)))
        old, new = exports(rc.remote_export), exports(info.export)
        rc.remote_import, rc.remote_export = info.import_, info.export

        def ok(pc: PermChecker | None, subject: bytes) -> bool:
            return pc is None or pc.can_subscribe(subject.decode("utf-8", "surrogateescape"))
        frames = [frame_for(u, pinned=bool(rc.pinned_acc)) for u in self._interest_of(rc)
                  if ok(new, u.subject) and not ok(old, u.subject) and self.can_import(u.subject)]
        if frames:
            rc.send(b"".join(frames))

    def _interest_of(self, rc: RouteConn) -> list[Any]:
        """Our interest (as RS+ updates) in the accounts that route ``rc`` carries."""
        if rc.pinned_acc:
            return list(self.local.snapshot(rc.pinned_acc.encode("utf-8", "surrogateescape")))
        every = rc.no_pool or not self.pooling
        return [u for u in self.local.snapshot() if every or self.pool_index(u.account) == rc.pool_idx]

    def _implicit_route(self, info: ci.Info, from_no_pool: bool = False) -> None:
        srv = self.server
        if info.server_id == srv.server_id:
            return
        acc = info.route_account
        if acc:
            if acc not in self.pinned or info.server_id in self.pinned[acc]:
                return
        elif info.server_id in self.routes:
            return
        if self._configuredhostport(info):
            return
        try:
            url = parse_route_url(info.ip)
        except ValueError:
            srv.log.error(f"Error parsing URL from INFO: {info.ip!r}")
            return
        if info.auth_required:
            url = url._replace(user=self.opts.username, password=self.opts.password)
        self.solicit(url, IMPLICIT, info.gossip_mode, first=True, account=acc)
        if from_no_pool and not acc:  # (a server without pooling does not gossip the pinned routes)
            for a in self.pinned:
                self.solicit(url, IMPLICIT, info.gossip_mode, first=True, account=a)

    def _configuredhostport(self, info: ci.Info) -> bool:
        keys = {(info.host.lower(), info.port)}
        if info.ip:
            try:
                u = parse_route_url(info.ip)
                keys.add((u.host.lower(), info.port))
            except ValueError:
                pass
        for r in self.opts.routes:
            try:
                if parse_route_url(r).key in keys:
                    return True
            except ValueError:
                continue
        return False

    # ---- a route goes ------------------------------------------------------------------------------------

    def route_closed(self, rc: RouteConn) -> None:
        self.conns.discard(rc)
        srv = self.server
        if rc.pinned_acc:
            self._pinned_closed(rc)
            return
        conns = self.pools.get(rc.remote_id) if rc.registered else None
        gone = False  # the last connection to that server
        if conns is not None and conns[rc.pool_idx] is rc:
            conns[rc.pool_idx] = None
            srv.routes.pop(rc.cid, None)
            left = next((r for r in conns if r is not None), None)
            if left is None:
                del self.pools[rc.remote_id]
                gone = self.routes.pop(rc.remote_id, None) is not None
            elif self.routes.get(rc.remote_id) is rc:
                self.routes[rc.remote_id] = left  # another connection of the pool stands for the server
        if gone:
            for fn in list(self.route_listeners):
                fn("gone", rc, None)
            if srv.gateway is not None:
                srv.gateway.remove_cluster_url(rc.gateway_url)
            if srv.leafnodes is not None:
                srv.leafnodes.route_gone(rc.remote_id)
            if rc.connect_urls and not self.opts.no_advertise and self._remove_urls(rc.connect_urls):
                srv.broadcast_info()
        if rc.no_reconnect or not self.running or srv.shutting_down:
            return
        retry_implicit = rc.retry or (rc.solicited and rc.rtype == IMPLICIT)
        if not (rc.solicited or retry_implicit) or rc.url is None:
            return
        rid = rc.remote_id
        if rid and rid in self.routes:
            kept = self.routes[rid]
            conns = self.pools.get(rid)
            if rc.solicited and not rc.no_pool and conns is not None and None in conns:
                srv.log.debug(f'Attempting reconnect for solicited route "{rc.url.redacted()}"')
                delay = random.randrange(100) / 1000 + (ROUTE_RECONNECT if rc.rtype == EXPLICIT else 0.0)
                self.solicit(rc.url, rc.rtype, 0, first=False, delay=delay)  # the pool refills
                return
            if rc.solicited and not kept.solicited:
                kept.solicited = True
                kept.url = rc.url
                if rc.rtype == EXPLICIT:
                    kept.rtype = EXPLICIT
            srv.log.debug(f'Not attempting reconnect for solicited route, already connected to "{rid}"')
            return
        if rid == srv.server_id:
            return
        if rc.rtype != IMPLICIT or retry_implicit:
            srv.log.debug(f'Attempting reconnect for solicited route "{rc.url.redacted()}"')
            delay = random.randrange(100) / 1000 + (ROUTE_RECONNECT if rc.rtype == EXPLICIT else 0.0)
            self.solicit(rc.url, rc.rtype, 0, first=False, delay=delay)

    def _pinned_closed(self, rc: RouteConn) -> None:
        srv = self.server
        conns = self.pinned.get(rc.pinned_acc)
        if rc.registered and conns is not None and conns.get(rc.remote_id) is rc:
            del conns[rc.remote_id]
            srv.routes.pop(rc.cid, None)
        if rc.no_reconnect or not self.running or srv.shutting_down or rc.url is None:
            return
        if not (rc.solicited or rc.retry) or rc.remote_id == srv.server_id:
            return
        if conns is not None and rc.remote_id in conns:
            return
        srv.log.debug(f'Attempting reconnect for solicited route "{rc.url.redacted()}" for account "{rc.pinned_acc}"')
        delay = random.randrange(100) / 1000 + (ROUTE_RECONNECT if rc.rtype == EXPLICIT else 0.0)
        self.solicit(rc.url, rc.rtype, 0, first=False, delay=delay, account=rc.pinned_acc)

    # ---- flow control --------------------------------------------------------------------------------------

    def stall(self, rc: RouteConn) -> None:
        """Route ``rc`` has more buffered than its peer reads: stop reading the clients (their publishers
        wait on TCP) until every congested route has drained."""
        first = not self._stalled_by
        self._stalled_by.add(rc)
        if not first:
            return
        for c in list(self.server.clients.values()):
            t = c.transport
            if t is not None and not t.is_closing() and t.is_reading():
                t.pause_reading()
                self._paused.append(t)

    def unstall(self, rc: RouteConn) -> None:
        if rc not in self._stalled_by:
            return
        self._stalled_by.discard(rc)
        if self._stalled_by:
            return
        paused, self._paused = self._paused, []
        for t in paused:
            if not t.is_closing():
                t.resume_reading()

    # ---- accounts and interest ----------------------------------------------------------------------------

    def route_account(self, name: bytes) -> Any:
        """The account a route names (interest or message); in operator mode an account not loaded here yet
        is looked up through the resolver, as nats-server's LookupAccount. None: unknown, ignored."""
        return self.server.known_account(name)

    def local_interest(self, acc: Any, sub: Any, added: bool, origin: bytes | None = None) -> None:
        """A local subscription came (``added``) or went: RS+/RS- to every route when the count says so
        (LS+/LS- with ``origin``: the subscription of a leaf node of that cluster, rillet.cluster.leaf)."""
        sb = getattr(sub, "subject_b", None) or sub.subject.encode("utf-8", "surrogateescape")
        qb = getattr(sub, "queue_b", None) or (sub.queue.encode("utf-8", "surrogateescape") if sub.queue else None)
        u = self.local.add(acc.name_b, sb, qb or None, origin) if added else \
            self.local.remove(acc.name_b, sb, qb or None, origin)
        if u is None:
            return
        pinned = self.pinned.get(acc.name) if self.pinned else None
        # (a pinned account's dedicated routes are not in the pools: one may be up before any pool connection,
        # and a change left unsent then is never sent, since the route's snapshot went out at its registration)
        if not self.pools and not pinned:
            return
        if self.route_perms is not None and not self.route_perms.can_publish(sb):
            return  # (the import permission: this interest is not sent to routes; counted all the same)
        f = frame_for(u)
        if pinned is not None:  # to its dedicated routes, and to servers without pooling
            fp = frame_for(u, pinned=True)
            for rc in pinned.values():
                if not rc.closed:
                    rc.send(fp)
            for conns in self.pools.values():
                rc = conns[0]
                if rc is not None and rc.no_pool and not rc.closed:
                    rc.send(f)
            self.server.schedule_flush()
            return
        idx = self.pool_index(acc.name_b) if self.pooling else 0
        for conns in self.pools.values():
            rc = conns[0]
            if rc is None or not rc.no_pool:  # (a server without pooling: its one connection, at index 0)
                rc = conns[idx]
            if rc is not None and not rc.closed:
                rc.send(f)
        self.server.schedule_flush()

    # ---- client connect URLs -------------------------------------------------------------------------------

    def _add_urls(self, urls: list[str]) -> bool:
        changed = False
        for u in urls:
            n = self.remote_urls.get(u, 0)
            self.remote_urls[u] = n + 1
            changed = changed or n == 0
        return changed

    def _remove_urls(self, urls: list[str]) -> bool:
        changed = False
        for u in urls:
            n = self.remote_urls.get(u, 0)
            if n <= 1:
                if self.remote_urls.pop(u, None) is not None:
                    changed = True
            else:
                self.remote_urls[u] = n - 1
        return changed

    def client_connect_urls(self) -> list[str]:
        """``connect_urls`` of the INFO sent to clients: this server's, then the other servers'."""
        if self.opts.no_advertise or not self._urls_shared:
            return []
        others = [u for u in self.remote_urls if u not in self.own_urls]
        if self.server.ldm:
            return others
        return self.own_urls + others

    def enter_lame_duck(self) -> None:
        """Lame-duck mode: routes are told (INFO with ldm), so they stop advertising our client URLs."""
        info = self.route_info()
        info.ldm = True
        f = cp.info_frame(ci.encode_info(info))
        for rc in self.routes.values():
            if not rc.closed:
                rc.send(f)
        self.server.schedule_flush()

    # ---- monitoring ----------------------------------------------------------------------------------------

    def varz(self) -> dict:
        """The live part of /varz "cluster": the URLs of the configured routes."""
        return {"urls": [hostport(*parse_route_url(r)[:2]) for r in self.opts.routes]}


def _upgrade(r: RouteConn, url: Any, rtype: str) -> None:
    """A pool connection the peer dialled counts as ours when we dial that server too (reconnects)."""
    if not r.solicited:
        r.solicited = True
        r.url = url
    if rtype == EXPLICIT:
        r.rtype = EXPLICIT

