"""Gateways: the connections between the clusters of a super-cluster, as nats-server 2.15 makes them.

What nats-server does (gateway.go), and so does this:

* each server with a ``gateway {}`` block listens on its gateway port and, after a short delay (so its
  cluster can form first), dials one server of every configured remote cluster: one *outbound*
  connection per remote cluster. It accepts any number of *inbound* connections (the outbound ones of
  the other clusters' servers). Messages travel on outbound connections; interest comes back on them.
* the accepting side speaks first (INFO, no blank before CRLF); the dialling side answers its first INFO
  with CONNECT and its own INFO. ``reject_unknown_cluster`` refuses a CONNECT from a cluster that is not
  configured. An inbound connection makes this server dial that cluster too (implicit gateway) and tells
  it the other gateways it knows (INFO ``gateway_cmd`` 1): gateways form a full mesh of clusters. Routes
  carry the same gossip (INFO with ``gateway``), so every server of a cluster dials every remote cluster,
  and each server's gateway URL (route INFO ``gateway_url``) so the gateway INFO lists them all.
* optimistic mode: an outbound connection sends every message of an account until the remote says it
  has no interest (``RS-`` for a subject it receives without subscribers, ``A-`` for an account without
  any); a new subscription there clears that (``RS+``/``A+``). After 1000 subjects without interest the
  receiving side switches the account to interest-only mode: INFO ``gateway_cmd`` 2, ``RS+`` for every
  subscription of the cluster, INFO ``gateway_cmd`` 3; from then on the sender sends only where the
  remote announced interest. nats-server 2.15 switches every account to interest-only mode as soon as an
  inbound connection registers (and tells the sender so with ``gateway_iom``); ``FORCE_INTEREST_ONLY``
  below is that switch (nats-server's tests turn it off to exercise the optimistic mode; so do ours).
* queue subscriptions are always announced (``RS+ acc subj queue 1``). A message is served by a queue
  member of the publishing cluster when there is one, else by one remote cluster (the first gateway
  announcing the group); the RMSG names the queue groups the remote should serve.
* a message received over a gateway goes to the receiving server's subscribers and over routes to the
  servers of its cluster that have interest (announced interest covers the whole cluster); never to
  another gateway. A message received over a route is never sent to a gateway: each server sends its own
  clients' messages.
* a reply subject of a request that crosses a gateway while the requester's subscription is new (2 s) is
  rewritten ``_GR_.<cluster hash>.<server hash>.<reply>``: the response goes straight back to that
  cluster, whose receiving server routes it to the requester's server.

  Subscribers see the original reply; a message published on it within 2 s goes back on the ``_GR_.``
  subject (nats-server keeps that per client connection, Rillet per account).

* TLS (``tls {}`` in the block, and in a remote for its outbound connections; the block's for implicit
  gateways and remotes without their own): from the first byte, before the INFO, on both sides; the peer's
  certificate is always required and verified (``ca_file``, else the system's roots), the host name checked
  by the dialling side unless ``insecure`` (an IP URL is checked under a host name learnt from the remote's
  other URLs, as nats-server's tlsName), the handshake limited by the tls ``timeout`` (a remote's, else the
  block's), ``pinned_certs`` of the block checked on both sides.

Differences from nats-server: the old ``$GR.`` reply prefix is dropped when received; a remote's own
``pinned_certs`` are checked on its outbound connections too (nats-server ignores them); the rest is in
rillet/cluster/README.md. Accounts stay the plain ``Account``: ``Gateway.attach`` gives each its
``AccountGateway`` (``acc.gw``: the gateway step of the one delivery executor, rillet/server/delivery.py, the
``_GR_.`` reply tracking, ``GatewayReplies``, and messages from gateways), wired by the composition root;
messages from routes enter at ``deliver_routed`` here, or with leaf nodes on the same server at
rillet.cluster.leaf's ``deliver_routed_gateways``/``deliver_leaf_gateways`` (gateway messages go on to the
leafs this server is hub for).
"""
from __future__ import annotations

import asyncio
import ipaddress
import random
import ssl
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import rillet
import rillet.server.msgtrace as _mt
from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.cluster.conn import TLSPortListener, log_tls_failure
from rillet.cluster.listening import Backoff, Listening
from rillet.cluster.gateway_conn import (INTEREST_ONLY, OPTIMISTIC, TRANSITIONING, GatewayConn, InAccount)
from rillet.server.listen import hostport, server_port_socket
from rillet.subjects.sublist import Sublist

from rillet.cluster.gateway_account import _GR, RECENT_SUB_EXPIRATION, AccountGateway
from rillet.subjects.validate import subject_matches_filter

if TYPE_CHECKING:
    from rillet.server.server import Server

SOLICIT_DELAY = 1.0  # defaultSolicitGatewaysDelay
CONNECT_DELAY = 1.0  # defaultGatewayConnectDelay
CONNECT_MAX_DELAY = 30.0  # defaultGatewayConnectMaxDelay (connect_backoff)
RECONNECT_DELAY = 1.0  # defaultGatewayReconnectDelay
MAX_RUNSUB_BEFORE_SWITCH = 1000  # defaultGatewayMaxRUnsubBeforeSwitch
MAX_PING_INTERVAL = 15.0  # gwMaxPingInterval
DIAL_TIMEOUT = 1.0
GATEWAY_PROTO = 3  # nats-server's MsgTraceProto: this server takes part in message tracing (msgtrace)
FORCE_INTEREST_ONLY = True  # nats-server >= 2.9 (see the module docstring)
_GR_LEN = len(_GR)
_HOSTNAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_gateway_url(text: str) -> tuple[str, int, str, str]:
    t = text.strip()
    if "://" not in t:
        t = "nats://" + t
    p = urlsplit(t)
    if not p.hostname:
        raise ValueError(f"error parsing gateway url {text!r}")
    return p.hostname, p.port or 0, unquote(p.username or ""), unquote(p.password or "")


class RemoteCfg:
    """A remote gateway (cluster) this server knows: configured (explicit) or learnt (implicit)."""

    def __init__(self, name: str, urls: list[str], implicit: bool) -> None:
        self.name = name
        self.implicit = implicit
        self.hash = ci.gateway_hash(name)
        self.urls: dict[str, tuple[str, int, str, str]] = {}
        self.attempts = 0
        self.tls_name = ""  # a host name among its URLs: the name checked when dialling one of its IPs over TLS
        self.add_urls(urls)

    def add_urls(self, urls: list[str] | None) -> None:
        for u in urls or ():
            try:
                h, p, user, pw = parse_gateway_url(u)
            except ValueError:
                continue
            self.urls.setdefault(hostport(h, p), (h, p, user, pw))
            if not self.tls_name and not _is_ip(h):
                self.tls_name = h

    def url_strings(self) -> list[str]:
        return list(self.urls)


class Gateway(Listening):
    _TASK_FAILED = "gateway task failed"
    _LISTENER = "gateway listener"

    def __init__(self, server: "Server") -> None:
        o = server.opts
        if o.jetstream.enabled and not o.cluster.port:
            # (clustered JetStream spans the super-cluster over the routes and gateways; a server without a
            # cluster would run a stand-alone JetStream answering every cluster's $JS.API requests too)
            raise ValueError("JetStream with gateways needs a cluster (a cluster block with a port): "
                             "remove the jetstream or the gateway configuration, or add the cluster")
        self.server = server
        g = o.gateway_opts
        self.name: str = g.name
        self.hash = ci.gateway_hash(self.name)
        self.server_hash = ci.gateway_hash(server.server_id)
        self.reply_prefix = b"".join((_GR, self.hash, b".", self.server_hash, b"."))
        self.force_iom = FORCE_INTEREST_ONLY
        self.solicit_delay = SOLICIT_DELAY
        self.remotes: dict[str, RemoteCfg] = {}
        self.own_cfg_urls: list[str] = []
        for r in g.gateways:
            if r.name == self.name:
                self.own_cfg_urls = list(r.urls)
                continue
            self.remotes[r.name] = RemoteCfg(r.name, r.urls, implicit=False)
        self.out: dict[str, GatewayConn] = {}  # registered outbound, by remote name (server.gateways_out)
        self.outo: list[GatewayConn] = []  # the same, in sending order
        self.ins: dict[str, list[GatewayConn]] = {}  # registered inbound, by remote name (server.gateways_in)
        self.conns: set[GatewayConn] = set()
        self.url = ""  # this server's gateway URL (host:port)
        self.urls: dict[str, int] = {}  # gateway URLs of this cluster's servers (reference counted)
        self.info: ci.Info | None = None
        self.pasi: dict[bytes, dict[tuple, int]] = {}  # this cluster's interest per account: (subj, queue) -> n
        self.recent: dict[bytes, Sublist] = {}  # subscriptions made in the last 2 s, per account
        self.total_qsubs = 0
        self.running = False
        self._listener: asyncio.AbstractServer | None = None
        self.addr: tuple[str, int] = ("", 0)
        self._tasks: set[asyncio.Task] = set()
        # fn(direction, remote cluster name) when a gateway connection registers ("out" or "in"): the
        # clustered JetStream layer sends its statsz then, so the other clusters learn this server
        self.listeners: list[Any] = []
        # TLS contexts (accepting side, dialling side) per tls {} block in use: id -> (block, server, client)
        self._tls: dict[int, tuple[Any, ssl.SSLContext, ssl.SSLContext]] = {}
        self.check_tls(g)  # ValueError: refuse to start (a certificate or key that cannot be loaded)

    @property
    def opts(self) -> Any:
        return self.server.opts.gateway_opts

    def varz_update(self, d: dict) -> None:
        """The live parts of /varz "gateway": the port listened on, the URLs known of each configured remote
        (its configured ones and those its INFO gave), this cluster's configured URLs for its own entry."""
        if self.addr[1]:
            d["port"] = self.addr[1]
        for rd in d.get("gateways", ()):
            cfg = self.remotes.get(rd.get("name", ""))
            if cfg is not None:
                urls = cfg.url_strings()
            elif rd.get("name") == self.name:
                urls = []
                for u in self.own_cfg_urls:
                    try:
                        h, p, _, _ = parse_gateway_url(u)
                    except ValueError:
                        continue
                    urls.append(hostport(h, p))
            else:
                urls = []
            if urls:
                rd["urls"] = urls
        # nats-server's defaults for a gateway port (shown even without TLS), its field order
        from rillet.cluster.gateway_conn import auth_timeout
        o = self.opts

        def num(x: float) -> float | int:
            return int(x) if x == int(x) else x
        d["auth_timeout"] = num(auth_timeout(o))
        d["tls_timeout"] = num(o.tls_timeout or 2.0)
        order = ("name", "host", "port", "auth_timeout", "tls_timeout", "tls_required", "tls_verify", "advertise",
                 "connect_retries", "gateways", "reject_unknown", "write_deadline", "write_timeout")
        items = sorted(d.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
        d.clear()
        d.update(items)

    def ping_interval(self) -> float:
        return min(self.server.opts.ping_interval, MAX_PING_INTERVAL)

    # ---- TLS ----------------------------------------------------------------------------------------------

    def _contexts(self, tls: Any) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        from rillet.cluster.route_tls import route_tls_contexts
        e = self._tls.get(id(tls))
        if e is None or e[0] is not tls:
            try:
                srv, cli = route_tls_contexts(tls, where="gateway")
            except ValueError as err:  # (a certificate, key or CA file that cannot be loaded)
                text = str(err)
                text = text if text.startswith("gateway tls: ") else f"gateway tls: {text}"
                if tls.source is not None:
                    from rillet.config.errors import ConfigError
                    raise ConfigError.at(tls.source, text) from err
                raise ValueError(text) from err
            e = self._tls[id(tls)] = (tls, srv, cli)
        return e[1], e[2]

    def check_tls(self, g: Any) -> None:
        """Builds the contexts of every tls {} block of ``g`` (ValueError when one cannot be loaded)."""
        for t in [g.tls] + [r.tls for r in g.gateways]:
            if t is not None:
                self._contexts(t)

    def reloaded(self, old: Any) -> None:
        """After a reload (``check_reload`` accepted it): the TLS settings apply to the next connections (the
        INFO says whether TLS is required); connected peers whose key is no longer pinned go, as
        nats-server's recheckPinnedCerts does."""
        from rillet.server.tls import pinned_error
        o = self.opts
        if self.info is not None:
            self.info.tls_required = self.info.tls_verify = o.tls is not None
        in_use = [t for t in [o.tls] + [r.tls for r in o.gateways] if t is not None]
        keep = {id(t) for t in in_use}
        self._tls = {k: v for k, v in self._tls.items() if k in keep}

        def pins(g: Any) -> list:
            return [list(t.pinned_certs) if t is not None else [] for t in [g.tls] + [r.tls for r in g.gateways]]
        if old is None or pins(old) == pins(o):
            return
        gone = []
        for c in list(self.conns):
            p = self.pins(c)
            if c.closed or not p or c.transport is None:
                continue
            if pinned_error(c.transport.get_extra_info("ssl_object"), p) is not None:
                gone.append(c)
        if gone:
            self.server.log.notice(f"Disconnect {len(gone)} clients due to pinned certs reload")
            for c in gone:
                c.close("TLS Handshake Failure")

    def accept_setup(self) -> tuple[Any, ssl.SSLContext | None, float]:
        """For the listener, at each accepted connection: the protocol, the TLS context (None: plain TCP) and
        the handshake timeout, from the current options (a reload applies to the next connections)."""
        tls = self.opts.tls
        if tls is None:
            return (lambda: GatewayConn(self)), None, 0.0
        return (lambda: GatewayConn(self)), self._contexts(tls)[0], tls.timeout

    def remote_tls(self, name: str) -> tuple[Any, float]:
        """The tls {} block used to dial remote cluster ``name`` (its own when configured with one, else the
        block's; None: plain TCP) and the handshake timeout (the remote's when written, else the block's)."""
        o = self.opts
        for r in o.gateways:
            if r.name == name and r.tls is not None:
                return r.tls, r.tls_timeout or (o.tls.timeout if o.tls is not None else r.tls.timeout)
        return o.tls, (o.tls.timeout if o.tls is not None else 0.0)

    def pins(self, c: GatewayConn) -> list[str]:
        """The keys a gateway peer's certificate must have (pinned_certs), none pinned: []."""
        o = self.opts
        pins = list(o.tls.pinned_certs) if o.tls is not None else []
        if c.outbound:
            for r in o.gateways:
                if r.name == c.name and r.tls is not None:
                    pins += r.tls.pinned_certs
        return pins

    # ---- start, stop ------------------------------------------------------------------------------------

    async def start(self) -> None:
        srv = self.server
        o = self.opts
        log = srv.log
        host = o.host or "0.0.0.0"
        port = 0 if o.port == -1 else o.port
        sock = await server_port_socket(srv.loop, "gateway", o.port, host, port)
        sock.listen(1024)
        self._listener = TLSPortListener(srv, sock, self.accept_setup, "gateway", "gid", "Gateway")
        self.addr = (host, self._listener.sockets[0].getsockname()[1])
        log.notice(f"Gateway name is {self.name}")
        log.notice(f"Listening for gateways connections on {hostport(host, self.addr[1])}")
        self._make_info()
        if o.advertise:
            log.notice(f'Advertise address for gateway "{self.name}" is set to {self.url}')
        else:
            log.notice(f'Address for gateway "{self.name}" is {self.url}')
        if (o.tls is not None and o.tls.insecure) or any(r.tls is not None and r.tls.insecure for r in o.gateways):
            log.warn("TLS certificate chain and hostname of solicited gateways will not be verified. "
                     "DO NOT USE IN PRODUCTION!")
        self.running = True
        srv.on_shutdown.append(self.shutdown)
        self._spawn(self._solicit_all())

    def _make_info(self) -> None:
        from rillet.config.builder_base import split_host_port
        srv = self.server
        o = self.opts
        info = ci.Info(server_id=srv.server_id, server_name=srv.name, version=rillet.SERVER_VERSION,
                       proto=GATEWAY_PROTO, go=f"python{sys.version_info[0]}.{sys.version_info[1]}",
                       headers=not srv.opts.no_header_support, auth_required=bool(o.username),
                       max_payload=srv.opts.max_payload, gateway=self.name, gateway_nrp=True,
                       gateway_iom=self.force_iom, tls_required=o.tls is not None, tls_verify=o.tls is not None)
        if o.advertise:
            h, p = split_host_port(o.advertise)
            info.host, info.port = h, int(p) if p else self.addr[1]
        else:
            info.host, info.port = o.host or "0.0.0.0", self.addr[1]
            if info.host in ("0.0.0.0", "::", "[::]"):
                from rillet.cluster.route_urls import global_unicast_ips
                ips = global_unicast_ips()
                if ips:
                    info.host = ips[0]
                else:
                    srv.log.error(f'Could not find any non-local IP for gateway "{self.name}" with listen '
                                  f'specification "{info.host}"')
        self.url = hostport(info.host, info.port)
        self.urls[self.url] = self.urls.get(self.url, 0) + 1
        info.gateway_url = self.url
        self.info = info

    def info_frame(self) -> bytes:
        assert self.info is not None
        self.info.gateway_urls = list(self.urls)
        return cp.info_frame(ci.encode_info(self.info), blank=False)


    # ---- soliciting -------------------------------------------------------------------------------------

    async def _solicit_all(self) -> None:
        await asyncio.sleep(self.solicit_delay)
        for cfg in list(self.remotes.values()):
            if not cfg.implicit:
                self._spawn(self._solicit(cfg, True))

    def _report(self, first: bool, attempts: int) -> bool:
        extra = self.server.opts.extra
        if first:
            every = int(extra.get("connect_error_reports", 3600))
            return attempts == 1 or attempts % max(every, 1) == 0
        return attempts % max(int(extra.get("reconnect_error_reports", 1)), 1) == 0

    async def _solicit(self, cfg: RemoteCfg, first: bool) -> None:
        srv = self.server
        log = srv.log
        attempts = 0
        backoff = Backoff(CONNECT_DELAY, CONNECT_MAX_DELAY)
        kind = "implicit" if cfg.implicit else "explicit"
        while self.running:
            if cfg.name in self.out:
                return
            urls = list(cfg.urls.values())
            if not urls:
                break
            attempts += 1
            report = self._report(first, attempts)
            random.shuffle(urls)
            for h, p, user, pw in urls:
                where = hostport(h, p)
                text = f'Connecting to {kind} gateway "{cfg.name}" ({where}) at {where} (attempt {attempts})'
                log.notice(text) if report else log.debug(text)
                tls, timeout = self.remote_tls(cfg.name)
                sni = ""
                try:
                    if not p:
                        raise OSError(f"address {h}: missing port in address")
                    if tls is not None:
                        sni = cfg.tls_name if cfg.tls_name and _is_ip(h) else h
                    await self._dial(lambda: GatewayConn(self, cfg, (h, p, user, pw)), h, p, DIAL_TIMEOUT,
                                     None if tls is None else self._contexts(tls)[1], sni, timeout)
                    return
                except (ssl.SSLError, ConnectionAbortedError) as e:
                    if tls is None:
                        raise
                    log_tls_failure(srv, (h, p), "gateway", "gid", "Gateway", e)
                    if sni and sni == cfg.tls_name and getattr(e, "verify_code", 0) in _HOSTNAME_MISMATCH:
                        cfg.tls_name = ""  # (nats-server forgets the name when the certificate does not have it)
                except (OSError, asyncio.TimeoutError) as e:
                    err = "i/o timeout" if isinstance(e, asyncio.TimeoutError) else \
                        ("connect: connection refused" if isinstance(e, ConnectionRefusedError)
                         else (getattr(e, "strerror", None) or str(e)))
                    text = (f'Error connecting to {kind} gateway "{cfg.name}" ({where}) at {where} '
                            f"(attempt {attempts}): dial tcp {where if p else ''}: {err}")
                    log.error(text) if report else log.debug(text)
                if not self.running:
                    return
            if cfg.implicit:
                retries = self.opts.connect_retries
                if retries == 0 or attempts > retries:
                    if self.ins.get(cfg.name):  # (an inbound from it is up: keep trying, as nats-server)
                        await backoff.sleep(False)
                        continue
                    if self.remotes.get(cfg.name) is cfg:
                        del self.remotes[cfg.name]
                    return
            await backoff.sleep(self.opts.connect_backoff)

    def connect_json(self, c: GatewayConn) -> bytes:
        user, pw = (c.url[2], c.url[3]) if c.url and c.url[2] else (self.opts.username, self.opts.password)
        return ci.encode_route_connect(ci.RouteConnect(
            echo=False, verbose=False, pedantic=False, user=user, password=pw,
            tls_required=c.transport is not None and c.transport.get_extra_info("ssl_object") is not None,
            name=self.server.server_id, gateway=self.name))

    # ---- INFO ---------------------------------------------------------------------------------------------

    def process_info(self, c: GatewayConn, info: ci.Info) -> None:
        srv = self.server
        log = srv.log
        first = not c.info_received
        c.info_received = True
        if first:
            c.remote_id = info.server_id
            c.remote_name = info.server_name
            if not c.outbound:
                c.name = info.gateway
        if c.outbound:
            cfg = c.cfg
            assert cfg is not None
            if not info.gateway:
                text = f'Attempt to connect to gateway "{c.name}" using wrong port'
                log.error(f"{c.log_prefix()} - {text}")
                c.close("Wrong Port", text)
                return
            if info.gateway != c.name:
                if not first and info.gateway_cmd == ci.GATEWAY_CMD_GOSSIP:
                    if self.opts.reject_unknown and info.gateway not in self.remotes:
                        return
                    self.implicit_gateway(info)
                    return
                log.error(f'{c.log_prefix()} - Failing connection to gateway "{c.name}", remote gateway name '
                          f'is "{info.gateway}"')
                c.close("Wrong Gateway", f'Connection from "{self.name}" rejected, wanted to connect to '
                                         f'"{c.name}", this is "{info.gateway}"')
                return
            if first and self._duplicate_name(info.server_name):
                log.error(f'{c.log_prefix()} - Remote server has a duplicate name: "{info.server_name}"')
                c.close("Duplicate Server Name")
                return
            if info.gateway_urls:
                cfg.add_urls(info.gateway_urls)
            if first:
                c.iom = info.gateway_iom
                c.use_old_prefix = not info.gateway_nrp
                c.headers = info.headers and not srv.opts.no_header_support
                c.out += cp.connect_frame(self.connect_json(c))
                c.debug(f'Gateway connect protocol sent to "{c.name}"')
                c.out += self.info_frame()
                c.flush()
                if c.name in self.out and not self.out[c.name].closed:
                    c.close("Wrong Gateway", no_reconnect=True)
                    return
                self.out[c.name] = c
                self.outo.append(c)
                c.registered = True
                c.first_ping()
                cfg.attempts = 0
                log.notice(f'{c.log_prefix()} - Outbound gateway connection to "{c.name}" ({info.server_id}) '
                           f"registered")
                self._notify("out", c.name)
            elif info.gateway_cmd:
                account = info.gateway_cmd_payload
                if info.gateway_cmd in (ci.GATEWAY_CMD_ALL_SUBS_START, ci.GATEWAY_CMD_ALL_SUBS_COMPLETE):
                    if not account:
                        what = "start" if info.gateway_cmd == ci.GATEWAY_CMD_ALL_SUBS_START else "complete"
                        text = f"Account absent from receive-all-subscriptions-{what} command"
                        log.error(f"{c.log_prefix()} - {text}")
                        c.close("Protocol Violation", text)
                        return
                    if info.gateway_cmd == ci.GATEWAY_CMD_ALL_SUBS_START:
                        c.all_subs_start(bytes(account))
                    else:
                        c.all_subs_complete(bytes(account))
                    return
                if info.gateway_cmd != ci.GATEWAY_CMD_GOSSIP:
                    log.warn(f'Received unknown command {info.gateway_cmd} from gateway "{c.name}"')
                    return
            self.forward_to_cluster(info)
        elif first:
            if self._duplicate_name(info.server_name):
                log.error(f'{c.log_prefix()} - Remote server has a duplicate name: "{info.server_name}"')
                c.close("Duplicate Server Name")
                return
            self.ins.setdefault(c.name, []).append(c)
            c.registered = True
            log.notice(f'{c.log_prefix()} - Inbound gateway connection from "{info.gateway}" ({info.server_id}) '
                       f"registered")
            self._send_queue_subs(c)
            self.implicit_gateway(info)
            self._gossip_to_inbound(c)
            if self.force_iom:
                for name in list(self.server.accounts):
                    self.switch_account_to_interest_mode(name.encode())
            self._notify("in", c.name)
        self.server.schedule_flush()

    def _notify(self, direction: str, name: str) -> None:
        for fn in list(self.listeners):
            try:
                fn(direction, name)
            except Exception as e:  # a listener's failure must not break the connection's registration
                self.server.log.error(f"Gateway {direction} {name!r}: listener failed: {e!r}")

    def _duplicate_name(self, name: str) -> bool:
        if not name:
            return False
        if name == self.server.name:
            return True
        cl = self.server.cluster
        return cl is not None and any(rc.remote_name == name for rc in cl.routes.values())

    def implicit_gateway(self, info: ci.Info) -> None:
        name = info.gateway
        if name == self.name:
            return
        cfg = self.remotes.get(name)
        if cfg is not None:
            cfg.add_urls(info.gateway_urls)
            return
        cfg = RemoteCfg(name, list(info.gateway_urls or ()), implicit=True)
        if not cfg.urls:
            return
        self.remotes[name] = cfg
        self._spawn(self._solicit(cfg, True))

    def _gossip_frames(self, skip: str, server_id: str) -> list[bytes]:
        out = []
        for name, cfg in self.remotes.items():
            if name == skip or not cfg.urls:
                continue
            info = ci.Info(server_id=server_id, gateway=name, gateway_urls=cfg.url_strings(),
                           gateway_cmd=ci.GATEWAY_CMD_GOSSIP)
            out.append(ci.encode_info(info))
        return out

    def _gossip_to_inbound(self, c: GatewayConn) -> None:
        for j in self._gossip_frames(c.name, self.server.server_id):
            c.out += cp.info_frame(j, blank=False)
        c.flush()

    def forward_to_cluster(self, oinfo: ci.Info) -> None:
        """Tell the servers of this cluster about a remote gateway (they make sure to connect to it)."""
        cl = self.server.cluster
        if cl is None or not cl.routes:
            return
        info = ci.Info(server_id="GW" + self.server.server_id, server_name=self.server.opts.server_name,
                       gateway=oinfo.gateway, gateway_urls=oinfo.gateway_urls, gateway_cmd=ci.GATEWAY_CMD_GOSSIP)
        f = cp.info_frame(ci.encode_info(info))
        for rc in cl.routes.values():
            if not rc.closed:
                rc.send(f)

    # ---- hooks from the route layer ---------------------------------------------------------------------

    def route_added(self, rc: Any) -> None:
        """A route registered: tell it the gateways we have an outbound connection to."""
        for c in list(self.out.values()):
            if c.cfg is None or not c.cfg.urls:
                continue
            info = ci.Info(server_id="GW" + self.server.server_id, gateway=c.cfg.name,
                           gateway_urls=c.cfg.url_strings(), gateway_cmd=ci.GATEWAY_CMD_GOSSIP)
            rc.send(cp.info_frame(ci.encode_info(info)))

    def info_from_route(self, info: ci.Info, route_id: str) -> None:
        if info.gateway_cmd == ci.GATEWAY_CMD_GOSSIP:
            if self.opts.reject_unknown and info.gateway not in self.remotes:
                return
            self.implicit_gateway(info)
        else:
            self.server.log.error(f"Unknown command {info.gateway_cmd} from server {route_id}")

    def add_cluster_url(self, url: str) -> None:
        if not url:
            return
        n = self.urls.get(url, 0)
        self.urls[url] = n + 1
        if n == 0:
            self._async_info()

    def remove_cluster_url(self, url: str) -> None:
        n = self.urls.get(url, 0)
        if n <= 0:
            return
        if n == 1:
            del self.urls[url]
            self._async_info()
        else:
            self.urls[url] = n - 1

    def _async_info(self) -> None:
        if self.info is None:
            return
        f = self.info_frame()
        for conns in self.ins.values():
            for c in conns:
                if not c.closed:
                    c.send(f)
        self.server.schedule_flush()

    def route_for_hash(self, h: bytes) -> Any:
        cl = self.server.cluster
        if cl is None:
            return None
        for rid, rc in cl.routes.items():
            if not rc.closed and ci.gateway_hash(rid) == h:
                return rc
        return None

    # ---- a connection goes ------------------------------------------------------------------------------

    def conn_closed(self, c: GatewayConn) -> None:
        self.conns.discard(c)
        if c.outbound:
            if self.out.get(c.name) is c:
                del self.out[c.name]
            if c in self.outo:
                self.outo.remove(c)
            self.remote_queue_interest_changed()
            cfg = c.cfg
            if c.no_reconnect or not self.running or self.server.shutting_down or cfg is None:
                return
            if self.remotes.get(cfg.name) is not cfg:
                return
            delay = random.randrange(100) / 1000 + (0.0 if cfg.implicit else RECONNECT_DELAY)
            self._spawn(self._solicit(cfg, False), delay)
        else:
            lst = self.ins.get(c.name)
            if lst is not None and c in lst:
                lst.remove(c)
                if not lst:
                    del self.ins[c.name]

    def remote_queue_interest_changed(self) -> None:
        """(kept for the hot path: nothing cached on the remote queue interest today)"""

    # ---- this cluster's interest -> inbound connections ------------------------------------------------

    def update_interest(self, acc: bytes, subject: bytes, queue: bytes | None, change: int,
                        recent: Any = None) -> None:
        """A subscription of this cluster (local or learnt from a route) came (+1) or went (-1)."""
        m = self.pasi.get(acc)
        if m is None:
            if change < 0:
                return
            m = self.pasi[acc] = {}
        key = (subject, queue or None)
        n = m.get(key)
        first = last = False
        if n is None:
            if change < 0:
                return
            m[key] = change
            first = True
        else:
            n += change
            if n <= 0:
                del m[key]
                last = True
                if not m:
                    del self.pasi[acc]
            else:
                m[key] = n
        if recent is not None and change > 0 and self.out:
            self._add_recent(acc, recent)
        if not (first or last) or not self.ins:
            return
        if queue:
            self._send_queue_sub_or_unsub(acc, subject, queue, first)
        else:
            self._maybe_send_sub_or_unsub(acc, subject, first)

    def _add_recent(self, acc: bytes, sub: Any) -> None:
        sl = self.recent.get(acc)
        if sl is None:
            sl = self.recent[acc] = Sublist(cache=False)
        try:
            sl.insert(sub)
        except ValueError:
            return
        self.server.loop.call_later(RECENT_SUB_EXPIRATION, self._expire_recent, acc, sl, sub)

    def _expire_recent(self, acc: bytes, sl: Sublist, sub: Any) -> None:
        sl.remove(sub)
        if sl.count() == 0 and self.recent.get(acc) is sl:
            del self.recent[acc]

    def _inbound(self) -> list[GatewayConn]:
        return [c for conns in self.ins.values() for c in conns if not c.closed]

    def _maybe_send_sub_or_unsub(self, acc: bytes, subject: bytes, added: bool) -> None:
        subj = subject.decode("utf-8", "surrogateescape")
        wild = "*" in subj or ">" in subj
        frame = None
        for c in self._inbound():
            send = None
            if acc in c.insim:
                e = c.insim[acc]
                if e is not None:
                    if e.ni is not None and added:
                        if wild:
                            gone = [k for k in e.ni if subject_matches_filter(k, subj)]
                            for k in gone:
                                e.ni.discard(k)
                            if gone:
                                send = "rs"
                        elif subj in e.ni:
                            e.ni.discard(subj)
                            send = "rs"
                    elif e.mode == INTEREST_ONLY:
                        send = "rs"
                elif added:
                    del c.insim[acc]
                    send = "a"
            if send == "rs":
                if frame is None:
                    frame = cp.rs_sub(acc, subject) if added else cp.rs_unsub(acc, subject)
                c.send(frame)
            elif send == "a":
                c.send(cp.account_sub(acc))
        self.server.schedule_flush()

    def _send_queue_sub_or_unsub(self, acc: bytes, subject: bytes, queue: bytes, added: bool) -> None:
        frame = cp.rs_sub(acc, subject, queue, 1) if added else cp.rs_unsub(acc, subject, queue)
        for c in self._inbound():
            if added and acc in c.insim and c.insim[acc] is None:
                del c.insim[acc]  # (an A- sent before: the next plain subscription must not send A+)
            c.send(frame)
        self.server.schedule_flush()

    def _send_queue_subs(self, c: GatewayConn) -> None:
        frames = [cp.rs_sub(acc, s, q, 1) for acc, m in self.pasi.items() for (s, q) in m if q]
        if frames:
            c.send(b"".join(frames))

    def switch_account_to_interest_mode(self, acc: bytes) -> None:
        for c in self._inbound():
            e = c.insim.get(acc)
            if e is None:
                e = c.insim[acc] = InAccount()
            if e.mode == OPTIMISTIC:
                self._send_all_subs(c, e, acc)

    def _send_all_subs(self, c: GatewayConn, e: InAccount, acc: bytes) -> None:
        """Switch ``acc`` to interest-only mode on inbound connection ``c``: INFO start, RS+ for every plain
        subscription of this cluster in the account, INFO complete."""
        e.ni = None
        e.mode = TRANSITIONING
        c.debug(f'Gateway "{c.name}": switching account "{acc.decode(errors="replace")}" to Interest-Only mode')

        def cmd(n: int) -> bytes:
            return cp.info_frame(ci.encode_info(ci.Info(gateway=self.name, gateway_cmd=n,
                                                        gateway_cmd_payload=acc)), blank=False)
        parts = [cmd(ci.GATEWAY_CMD_ALL_SUBS_START)]
        parts.extend(cp.rs_sub(acc, s) for (s, q) in self.pasi.get(acc, {}) if not q)
        e.mode = INTEREST_ONLY
        parts.append(cmd(ci.GATEWAY_CMD_ALL_SUBS_COMPLETE))
        c.send(b"".join(parts))
        c.debug(f'Gateway "{c.name}": switching account "{acc.decode(errors="replace")}" to Interest-Only mode '
                f"complete")

    # ---- accounts -----------------------------------------------------------------------------------------

    def attach(self, acc: Any) -> "AccountGateway":
        """Wire the gateways into a new account (the composition root calls this for every account of a server
        with gateways): its part of the gateways (``acc.gw``: the delivery executor's gateway step, the ``_GR_.``
        reply tracking, messages from gateways), the publishes that match nothing here (``acc.no_match``), and,
        once running with every account in interest-only mode, that mode for it on the inbound connections."""
        part = AccountGateway(self, acc)
        acc.gw = part
        acc.no_match = part.no_match
        if self.force_iom and self.running:
            self.switch_account_to_interest_mode(acc.name_b)
        return part

    # ---- messages in ---------------------------------------------------------------------------------------

    def lookup_account(self, name: bytes) -> Any:
        return self.server.known_account(name)

    def inbound_msg(self, c: GatewayConn, account: bytes, subject: bytes, reply: bytes | None, queues: tuple,
                    hdr: int, msg: bytes) -> None:
        if hdr > 0 and _mt.CURRENT is None and msg.find(b"Nats-Trace-", 0, hdr) >= 0 and \
                _mt.gateway_inbound(self, c, account, subject, reply, queues, hdr, msg, self._inbound_msg):
            return  # traced here too: this server sends its own event (rillet.server.msgtrace)
        self._inbound_msg(c, account, subject, reply, queues, hdr, msg)

    def _inbound_msg(self, c: GatewayConn, account: bytes, subject: bytes, reply: bytes | None, queues: tuple,
                     hdr: int, msg: bytes) -> None:
        if subject[:_GR_LEN] == _GR or subject[:4] == ci.OLD_GW_REPLY_PREFIX:
            self.gateway_reply(c, account, subject, reply, hdr, msg)
            return
        acc = self.lookup_account(account)
        if acc is None:
            c.debug(f"Unknown account {account!r} for gateway message on subject: {subject!r}")
            self._account_no_interest(c, bytes(account))
            return
        r = acc.match(subject.decode("utf-8", "surrogateescape"))
        if not r.psubs:
            self._subject_no_interest(c, acc, bytes(account), subject)
            if not queues:
                return
        acc.gw.from_gateway(c, r, subject, reply, queues, hdr, msg, False)

    def gateway_reply(self, c: Any, account: bytes, subject: bytes, reply: bytes | None, hdr: int,
                      msg: bytes) -> None:
        """A message on a ``_GR_.`` subject (a response to a request that crossed a gateway) from a gateway
        or a route: for this cluster only; to the server the hash names (over its route), else here."""
        o = ci.gateway_reply_origin(subject)
        if o is None or o[0] != self.hash:
            return  # (the old $GR. prefix, or another cluster's reply: dropped, as nats-server)
        if c.kind == GatewayConn.kind and o[1] != self.server_hash:
            rc = self.route_for_hash(o[1])
            if rc is not None:
                rc.send_msg(account, subject, reply, (), hdr, msg)
                return
        acc = self.lookup_account(account)
        if acc is None:
            if c.kind == GatewayConn.kind:
                self._account_no_interest(c, bytes(account))
            return
        real = bytes(o[2])
        r = acc.match(real.decode("utf-8", "surrogateescape"))
        if r.psubs or r.qsubs:
            acc.gw.from_gateway(c, r, real, reply, (), hdr, msg, True)

    def _account_no_interest(self, c: GatewayConn, acc: bytes) -> None:
        if self.pasi.get(acc):
            return
        self._send_account_unsub(c, acc)

    @staticmethod
    def _send_account_unsub(c: GatewayConn, acc: bytes) -> None:
        if acc not in c.insim or c.insim[acc] is not None:
            c.insim[acc] = None
            c.send(cp.account_unsub(acc))

    def _subject_no_interest(self, c: GatewayConn, acc: Any, name: bytes, subject: bytes) -> None:
        if acc.sublist.count() == 0:
            self._send_account_unsub(c, name)
            return
        subj = subject.decode("utf-8", "surrogateescape")
        e = c.insim.get(name)
        if e is None:
            c.insim[name] = InAccount({subj})
        elif e.ni is not None and subj not in e.ni:
            if len(e.ni) >= MAX_RUNSUB_BEFORE_SWITCH:
                self._send_all_subs(c, e, name)
                return
            e.ni.add(subj)
        else:
            return
        c.send(cp.rs_unsub(name, bytes(subject)))

    # ---- messages out ----------------------------------------------------------------------------------------

    def has_interest(self, account: Any, subject: str) -> bool:
        """Would a message of ``account`` on ``subject`` go to a remote cluster (nats-server's
        hasGatewayInterest: a JetStream consumer's deliver subject or pull request reply there)? Also
        true for the reply of a request that came over a gateway less than 2 s ago (sent on its ``_GR_.``
        subject, whatever the interest)."""
        gws = getattr(account, "gw", None)
        if gws is not None and gws.replies and gws.replies.lookup(subject.encode("utf-8", "surrogateescape")):
            return True
        acc = getattr(account, "name_b", None) or account.name.encode("utf-8", "surrogateescape")
        for gc in self.outo:
            if not gc.closed:
                psi, qr = gc.interest(acc, subject)
                if psi or qr is not None:
                    return True
        return False

    def _map_reply(self, acc: bytes, reply: bytes) -> bool:
        sl = self.recent.get(acc)
        return sl is not None and sl.has_interest(reply.decode("utf-8", "surrogateescape"))



def _without_tls(g: Any) -> Any:
    """The gateway block as nats-server compares it on reload: its tls {} blocks left out (the block's and
    the remotes'), the timeouts kept as nats-server's defaults make them (the block's tls timeout 2 s when
    not written, its authorization timeout the tls timeout + 1 s with TLS, else 2 s; a remote's tls timeout
    as written)."""
    import dataclasses

    from rillet.cluster.gateway_conn import auth_timeout
    if g is None:
        return None
    return dataclasses.replace(g, tls=None, tls_timeout=g.tls_timeout or 2.0, auth_timeout=auth_timeout(g),
                               gateways=[dataclasses.replace(r, tls=None) for r in g.gateways])


def check_reload(server: Any, new_opts: Any) -> None:
    """What nats-server's reload accepts in the gateway block: changes of its tls {} blocks (the block's and
    the remotes': certificates, CA, insecure, pinned_certs...; the tls timeouts excepted), applied to the
    next connections (pinned_certs to the connected ones too: ``Gateway.reloaded``); any other change is
    refused with nats-server's words. ValueError: reload refused (also for a certificate that cannot be
    loaded)."""
    old, new = server.opts.gateway_opts, new_opts.gateway_opts
    if _without_tls(old) != _without_tls(new):
        def show(g: Any) -> str:
            if g is None:
                return "{}"
            remotes = " ".join(f"{r.name}:{','.join(r.urls)}" for r in g.gateways)
            return (f"{{name:{g.name} host:{g.host} port:{g.port} advertise:{g.advertise} "
                    f"connect_retries:{g.connect_retries} reject_unknown:{str(g.reject_unknown).lower()} "
                    f"gateways:[{remotes}]}}")
        raise ValueError(f"config reload not supported for Gateway: old={show(old)}, new={show(new)}")
    gw = getattr(server, "gateway", None)
    if gw is not None and new is not None:
        gw.check_tls(new)  # (the contexts are built now: the reload is refused if one cannot be loaded)
