"""The server: listeners, client registry, accounts, INFO, lame-duck mode, reload and shutdown.

Embedding (``rillet.app`` builds a server with its links, JetStream and monitoring; ``Server(opts)`` alone is
the core, see rillet/server/subsystems.py; ``rillet.app.embed`` has context managers for these steps)::

    from rillet.app import build_server
    from rillet.server import Options
    srv = build_server(Options(host="127.0.0.1", port=-1))
    await srv.start()
    print(srv.client_url)
    await srv.shutdown()
"""
from __future__ import annotations

import asyncio
import os
import random
import socket
import ssl
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import rillet
from rillet import lane
from rillet.server.accounts import GLOBAL_ACCOUNT, Account
from rillet.server.auth import Authenticator, new_implicit_user_name, sys_only_no_auth_user
from rillet.server.client import Client, InternalClient
from rillet.server.listen import hostport, listening_socket
from rillet.server.logging import Logger
from rillet.server import pendingtotal
from rillet.server.servertls import TLSSide
from rillet.server.subsystems import Core, Subsystems
from rillet.config.options import RANDOM_PORT, Options
from rillet.gocompat.goquote import go_quote
from rillet.nkey import CURVE_PREFIX, from_raw_seed, new_server_identity
from rillet.gocompat.gotime import format_seconds

if TYPE_CHECKING:
    from rillet.server.tls import RateCounter

# rillet.server.tls and rillet.config.ocsp_section are imported where TLS is configured or used, not here: a
# server without TLS does not load them (issue 20, idle memory; tests/test_idle_rss.py)


def ocsp_peer_configs(o: Options) -> list[Any]:
    """The ocsp_peer settings in force in ``o`` (rillet.config.ocsp_section.peer_configs), without loading that
    module when no tls block is configured (``Options.any_tls``)."""
    if not o.any_tls():
        return []
    from rillet.config.ocsp_section import peer_configs
    return peer_configs(o)


def _ocsp_stapling_wanted(o: Options) -> bool:
    from rillet.config.ocsp_section import stapling_wanted
    return stapling_wanted(o)


class ClosedClient:
    """What /connz?state=closed shows of a connection that has gone."""

    __slots__ = ("info",)

    def __init__(self, info: dict) -> None:
        self.info = info


class Server(TLSSide):
    def __init__(self, opts: Options | None = None, log: Logger | None = None,
                 subsystems: Subsystems | None = None) -> None:
        """``subsystems``: the links, JetStream and monitoring the composition root wires (rillet.app:
        ``build_server(opts)`` makes a full server); without them, the core only (``rillet.server.subsystems``)."""
        self.opts = opts if opts is not None else Options()
        self.subsystems: Subsystems = subsystems if subsystems is not None else Core()
        o = self.opts
        validate_options(o)
        validate_start_options(o)
        self.log = log if log is not None else Logger(debug=o.debug, trace=o.trace, logtime=o.logtime,
                                                     utc=o.logtime_utc, log_file=o.log_file,
                                                     size_limit=o.log_size_limit)
        self.trace_on = o.trace
        self.server_kp = new_server_identity()  # the server's identity: signs auth callout requests
        self.server_id = self.server_kp.public_key()
        self.xkey_seed = os.urandom(32)  # the server's x25519 key (auth callout encryption)
        self.xkey = from_raw_seed(CURVE_PREFIX, self.xkey_seed).public_key()
        self.name = o.server_name or self.server_id
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.pending_flush: list[Any] = []
        # writers flushed after the connections, and only once a read is done (a client read parsed in several
        # slices: ReadPacer): the RAFT groups' runner, so that one read's proposals (a pull's acks and its next
        # request) are one pass of the groups, not one per slice
        self.pending_late: list[Any] = []
        self._flush_scheduled = False
        self.accounts: dict[str, Account] = {}
        # the system account, once rillet.server.sysacc has set it up (None with no_system_account)
        self.system_account: Account | None = None
        # the links, set by the subsystems: the route manager (when a cluster port is set), the leaf node
        # manager (a leafnode port or remotes) and the gateway manager (a gateway block with a name and port)
        self.cluster: Any = None
        self.leafnodes: Any = None
        self.gateway: Any = None
        # the links' part in every account's interest (rillet.server.accounts.InterestListener), set with them
        self.interest_listeners: tuple[Any, ...] = ()
        # a member of a Go JetStream cluster (rillet_go_meta): its rillet.jetstream.cluster.gometa.JetStreamReport,
        # set with the links
        self.go_js_report: Any = None
        self.subsystems.make_links(self)  # ValueError: refuse to start
        self.global_account = self._make_account(GLOBAL_ACCOUNT)
        if o.mappings:
            from rillet.subjects.mapping import parse_mappings
            self.global_account.mappings = parse_mappings(o.mappings, o.cluster.name)  # ValueError: refuse to start
        if o.trusted_operators or o.trusted_keys or o.default_sentinel:
            from rillet.server.operator_claims import validate_operator_options
            validate_operator_options(o)  # (at start, not with -t: as nats-server)
        self.sys_only_user = new_implicit_user_name()  # no credentials: into $G when sys_only_no_auth_user
        self.authenticator = Authenticator(o, self.sys_only_user if sys_only_no_auth_user(o) else "")
        self.operator: Any = None  # rillet.server.operator.OperatorMode, in operator (JWT) mode
        if o.trusted_operators or o.trusted_keys:
            from rillet.server.operator import OperatorMode
            self.operator = OperatorMode(self)
        self.clients: dict[int, Client] = {}
        # route, gateway and leafnode connections by connection id: none until clustering lands
        # (/routez, /gatewayz and /leafz report these)
        self.routes: dict[int, Any] = {}
        self.gateways_out: dict[str, Any] = {}
        self.gateways_in: dict[str, list[Any]] = {}
        if self.gateway is not None:
            self.gateways_out, self.gateways_in = self.gateway.out, self.gateway.ins
        self.leafs: dict[int, Any] = {}
        self.internal_clients: list[InternalClient] = []
        if o.accounts:  # (configure_accounts does nothing without them: not loaded then)
            from rillet.server.account_config import configure_accounts
            configure_accounts(self)  # per-account mappings, limits, exports/imports; ValueError: refuse to start
        self.auth_callout: Any = None
        if isinstance(o.extra, dict) and o.extra.get("auth_callout") is not None:  # (loaded only then)
            from rillet.server import auth_callout
            self.auth_callout = auth_callout.setup(self)  # ValueError: refuse to start
        self.closed_totals = (0, 0, 0, 0)
        self.closed_clients: deque = deque(maxlen=max(o.max_closed_clients, 0) or None)
        self._cid = 0
        self.start_time = 0.0
        self.config_load_time = time.time()
        self.ldm = False
        self.shutting_down = False
        self._listener: asyncio.AbstractServer | None = None
        self.extra_listeners: list[Any] = []  # objects with async close() (websocket, monitor)
        self.addr: tuple[str, int] = ("", 0)
        self.http_addr: tuple[str, int] | None = None
        self.https_addr: tuple[str, int] | None = None
        self.websocket_addr: tuple[str, int] | None = None
        self.mqtt: Any = None  # rillet.mqtt.listener.MqttServer, with mqtt {} (started by the composition root)
        self.mqtt_addr: tuple[str, int] | None = None
        self.monitor: Any = None  # rillet.monitor.httpd.Monitor, with http(s)_port (set by it when it starts)
        self.tls_context: ssl.SSLContext | None = None
        self._tls_rate: RateCounter | None = None  # tls connection_rate_limit
        self._tls_rate_log_pending = False
        self.staples: dict[str, Any] = {}  # listener -> rillet.server.ocsp_staple.StapleMonitor (ocsp stapling)
        self._ocsp_checker: Any = None  # rillet.server.ocsp.PeerChecker, once a tls block has ocsp_peer
        self.total_connections = 0
        self.slow_consumers = 0  # every slow consumer report, as nats-server's total (a route's repeats too)
        self.sc_stats = {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}  # /varz slow_consumer_stats
        self.pending_total = pendingtotal.PendingTotal(self)  # (the sum of the clients' pending output: max_pending_total)
        self.stalls = 0  # fast producers held back (/varz stalled_clients)
        self.stale_connections = 0  # (and by kind, stale_stats: rillet.server.connstate.count_stale)
        self.stale_stats = {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}
        self._stopped = asyncio.Event()
        self._shutdown_task: asyncio.Task | None = None
        self.reload_count = 0
        self.on_shutdown: list[Callable[[], Any]] = []
        self.jetstream: Any = None  # the JetStream subsystem, when enabled and available
        from rillet.server.sysacc import SystemAccount
        self.sysacc = SystemAccount(self)  # the system account ($SYS API and events)

    # ---- accounts -------------------------------------------------------------------------------------

    def _make_account(self, name: str) -> Account:
        acc = Account(self, name)
        self.subsystems.account_added(self, acc)  # the links' parts in it (gateways)
        self.accounts[name] = acc
        sa = getattr(self, "sysacc", None)
        if sa is not None:
            sa.account_added(acc)  # the system imports every account has
        js = getattr(self, "jetstream", None)
        if js is not None:
            js.account_added(acc)  # the JetStream API (answering 10039 where not enabled)
        if self.opts.default_js_domain:
            from rillet.server import jsdomain
            jsdomain.apply(self, acc)  # its JetStream API sent to a domain elsewhere
        return acc

    def lookup_account(self, name: str) -> Account:
        acc = self.accounts.get(name)
        if acc is None:
            acc = self._make_account(name)
        return acc

    def known_account(self, name: bytes) -> Account | None:
        """The account another server names (a route's, gateway's message or interest): one loaded here, or in
        operator mode one the resolver has (nats-server's LookupAccount); None: unknown (ignored)."""
        n = name.decode("utf-8", "surrogateescape")
        acc = self.accounts.get(n)
        if acc is None and self.operator is not None:
            acc = self.operator.lookup_account(n)
        return acc

    def internal_client(self, account: Account | None = None, name: str = "internal") -> InternalClient:
        ic = InternalClient(self, account or self.global_account, name)
        self.internal_clients.append(ic)
        return ic

    # ---- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the listeners and start serving. Returns once the server is ready."""
        self.loop = asyncio.get_running_loop()
        o = self.opts
        log = self.log
        self.start_time = time.time()
        log.notice(f"Starting nats-server")
        log.notice(f"  Version:  {rillet.SERVER_VERSION} (rillet {rillet.__version__})")
        log.notice(f"  Git:      [not set]")
        log.notice(f"  Lane:     {lane.NAME}" + (f" ({lane.REASON})" if lane.REASON else ""))
        log.notice(f"  Name:     {self.name}")
        log.notice(f"  ID:       {self.server_id}")
        if o.config_file:
            log.notice(f"Using configuration file: {o.config_file}")
        if self.operator is not None:
            self.operator.log_start()
        if (o.tls is not None or o.websocket.tls is not None or isinstance(o.mqtt, dict) and o.mqtt.get("tls")) \
                and _ocsp_stapling_wanted(o):
            await self._prepare_stapling()  # ValueError: the server does not start (as nats-server)
        if o.tls is not None:
            from rillet.server.tls import make_server_context
            self.tls_context = make_server_context(o.tls, self.staples.get("client"))
        if ocsp_peer_configs(o):
            self.ocsp_checker()  # the cache comes online (and is loaded) at start, as nats-server
        if o.jetstream.enabled:
            if o.jetstream.tpm and o.jetstream.tpm.get("keys_file"):
                # (nats-server: the key check first, then the platform's: it has TPM support on Windows only)
                raise ValueError("Can't start JetStream: JetStream encryption key may not be used with TPM options"
                                 if o.jetstream.key else
                                 "Can't start JetStream: TPM functionality is not supported on this platform")
            js = self.subsystems.new_jetstream(self)
            try:
                await js.start()
            except OSError as e:
                raise OSError(e.errno, f"Can't start JetStream: {_store_dir_problem(o.jetstream.store_dir, e)}") from e
            self.jetstream = js
        try:
            await self._start_listeners()
        except BaseException:
            for lst in self.extra_listeners:
                try:
                    await lst.close()
                except Exception:
                    pass
            self.extra_listeners.clear()
            raise
        if self.gateway is not None:
            await self.gateway.start()  # the gateway port; configured gateways dialled after a delay
        if self.leafnodes is not None:
            # (before the routes, as nats-server: their INFO carries this server's leafnode URL)
            await self.leafnodes.start()  # the leafnode port, and the remotes dialled
        if self.cluster is not None:
            await self.cluster.start()  # the route port, and the configured routes dialled
        if self.operator is not None:
            self.sysacc.on_claims_update = self.operator.resolver.on_account_update
        self.sysacc.start()
        if self.operator is not None and self.sysacc.client is not None:
            self.operator.register_sys(self.sysacc.client)  # account JWT updates (rillet.server.resolver)
        self.on_shutdown.append(self.sysacc.stop)
        self._write_pid_and_ports()
        log.notice("Server is ready")

    async def _start_listeners(self) -> None:
        o = self.opts
        log = self.log
        host = o.host or "0.0.0.0"
        port = 0 if o.port == RANDOM_PORT else o.port
        # the client port listens first, its connections waiting in the backlog until the rest is up: a
        # monitor that answers /varz means clients can connect, and a restarted server is reachable as
        # soon as can be (the monitor's HTTP stack takes a while to load); the log still names the monitor
        # first, as nats-server's does
        try:
            # where nats-server listens: 0.0.0.0 and :: are one dual-stack socket (rillet.server.listen)
            lsock = await listening_socket(self.loop, host, port)
            if o.tls is not None:
                # TLS: accepted by rillet.server.tls, which decides per connection between TLS first
                # (handshake_first, with its fallback delay) and INFO first with the TLS upgrade
                from rillet.server.tls import TLSClientListener
                self._listener = TLSClientListener(self, lsock)  # type: ignore[assignment]
            else:
                self._listener = await self.loop.create_server(
                    self._new_client, sock=lsock, backlog=1024, start_serving=False)
        except OSError as e:
            # nats-server quotes Go's net error: listen tcp <addr>: bind: <reason>
            raise OSError(e.errno, f"Error listening on port: {hostport(host, port)}, \"listen tcp "
                                   f"{hostport(host, port)}: bind: {(e.strerror or str(e)).lower()}\"") from e
        try:
            if o.http_port or o.https_port:
                await self.subsystems.start_monitor(self)
            elif o.http_metrics:
                self.log.warn("http_metrics is set but there is no monitoring port (http_port or https_port): "
                              "/metrics is not served")
            if o.websocket.port:
                from rillet.server.websocket import start_websocket
                await start_websocket(self)
            if o.mqtt.get("port"):
                await self.subsystems.start_mqtt(self)  # (the composition root's; JetStream is up)
            await self._listener.start_serving()
        except BaseException:
            self._listener.close()  # (the server does not start: the client port is let go too)
            raise
        sock = self._listener.sockets[0]
        self.addr = (host, sock.getsockname()[1])
        log.notice(f"Listening for client connections on {hostport(host, self.addr[1])}")
        if o.proxy_protocol:
            log.notice("PROXY protocol enabled for client connections")
        if o.tls is not None:
            tls_first_only = o.tls.handshake_first and o.tls.handshake_first_fallback <= 0
            log.notice("TLS required for client connections" if o.tls_required or tls_first_only
                       else "TLS available for client connections")
            if tls_first_only:
                log.warn('Clients that are not using "TLS Handshake First" option will fail to connect')

    def _new_client(self) -> Client:
        return Client(self)

    @property
    def client_url(self) -> str:
        host = self.addr[0]
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        scheme = "tls" if self.opts.tls is not None and self.opts.tls_required else "nats"
        return f"{scheme}://{hostport(host, self.addr[1])}"

    @property
    def port(self) -> int:
        return self.addr[1]

    def _write_pid_and_ports(self) -> None:
        o = self.opts
        if o.pid_file:
            with open(o.pid_file, "w") as f:
                f.write(str(os.getpid()))
        if o.ports_file_dir:
            from rillet.server.portsfile import ports_file_path, write_ports_file
            try:
                self._ports_file = write_ports_file(self, o.ports_file_dir)
            except OSError as e:  # (nats-server logs it and runs on)
                self.log.error(f"Error writing ports file ({ports_file_path(o.ports_file_dir)}): {e}")

    async def shutdown(self) -> None:
        """Stop in nats-server's order: the system account's events (this server's SHUTDOWN event goes
        out), JetStream (its leaders step down, its stores are synced and closed), the listeners, then the
        routes, gateways, leaf nodes and clients; the ports file goes last (the pid file stays)."""
        if self.shutting_down:
            await self._stopped.wait()
            return
        self.shutting_down = True
        if self.jetstream is not None:
            self.jetstream.signal_pull_requests()  # 409 Server Shutdown to waiting pull requests
        self.sysacc.shutdown_event()
        self.log.notice("Initiating Shutdown...")
        if self.jetstream is not None:
            await self.jetstream.shutdown()
        if self._listener is not None:
            self._listener.close()
        for lst in self.extra_listeners:
            try:
                await lst.close()
            except Exception as e:  # pragma: no cover - best effort
                self.log.error(f"Error closing listener: {e}")
        for cb in self.on_shutdown:  # routes, leaf nodes, gateways (their listeners and connections)
            r = cb()
            if asyncio.iscoroutine(r):
                await r
        for c in list(self.clients.values()):
            c.close("Server Shutdown")
        if self.operator is not None:
            await self.operator.resolver.aclose()
        if getattr(self, "_ports_file", None):
            _unlink(self._ports_file)
        self.log.notice("Server Exiting..")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ---- clients --------------------------------------------------------------------------------------

    def register_client(self, c: Client) -> None:
        if self.shutting_down or self.ldm:
            c.close("Server Shutdown")
            return
        self._cid += 1
        c.cid = self._cid
        self.total_connections += 1
        if len(self.clients) >= self.opts.max_connections:
            # like nats-server: the INFO goes out, then the refusal
            c.out += self.info_for(c)
            self.log.error(f"{c.log_prefix()} - maximum connections exceeded")
            c.close("Maximum Connections Exceeded", "maximum connections exceeded")
            return
        self.clients[c.cid] = c
        c.account.clients.add(c)
        if self.tls_context is not None and self.opts.tls is not None and not c.tls_version \
                and c.conn_type == "STANDARD" and self.opts.tls_required:
            c.start()  # (reading was paused by Client._register_for_tls; start_tls resumes it under TLS)
            if not self.tls_rate_allow():
                from rillet.server.tls import THROTTLED
                c.close("Maximum Connections Exceeded", THROTTLED)
                return
            self.loop.create_task(self._upgrade_tls(c))
            return
        c.start()

    def unregister_client(self, c: Client) -> None:
        if self.clients.pop(c.cid, None) is None:
            return
        c.account.clients.discard(c)
        self.pending_total.forget(c)
        self.sysacc.client_disconnected(c)
        t = self.closed_totals
        self.closed_totals = (t[0] + c.in_msgs, t[1] + c.in_bytes, t[2] + c.out_msgs, t[3] + c.out_bytes)
        c.account.remove_subs(list(c.subs.values()))  # (many: over several loop passes)
        if self.closed_clients.maxlen != 0:
            try:
                info = self.subsystems.closed_conn_info(self, c)
                if info is not None:
                    self.closed_clients.append(ClosedClient(info))
            except Exception:  # monitoring data is best effort; never fail a close on it
                pass

    def schedule_flush(self) -> None:
        if not self._flush_scheduled and (self.pending_flush or self.pending_late):
            self._flush_scheduled = True
            self.loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush_clients()

    def hold_flush(self) -> bool:
        """A read that writes out its own output at its end (ReadPacer._paced) begins: until ``release_flush``,
        ``schedule_flush`` queues no loop pass (an internal publish or a RAFT group's input in the read would
        otherwise cost every such read one more pass of the loop: a zero-timeout poll and an empty flush).
        False (nothing held) when a flush is queued already."""
        if self._flush_scheduled:
            return False
        self._flush_scheduled = True
        return True

    def release_flush(self) -> None:
        """The read's end (``hold_flush`` returned True): a pass is queued if anything is still waiting."""
        self._flush_scheduled = False
        self.schedule_flush()

    def flush_clients(self, hold_late: bool = False) -> None:
        """Write out every connection that received data during this read cycle, then the late writers
        (``pending_late``) unless ``hold_late`` (a slice of a read that goes on), and what they wrote."""
        pending = self.pending_flush
        late = self.pending_late
        while True:
            while pending:
                batch = pending[:]
                pending.clear()
                for c in batch:
                    c.write_out()
            if not late or hold_late:
                return
            batch = late[:]
            late.clear()
            for c in batch:
                c.write_out()

    def count_slow(self, c: Any, kind: str = "clients", first: bool = True) -> None:
        """A slow consumer report counted as nats-server does: in /varz slow_consumers, its account (acc.stats) if
        any, and slow_consumer_stats[kind] but for a route's repeat (``first`` False) while it stays slow."""
        self.slow_consumers += 1
        if first or kind != "routes":
            self.sc_stats[kind] += 1
        if c.account is not None:
            c.account.slow_consumers += 1

    def slow_consumer(self, c: Client, why: str) -> None:
        self.count_slow(c)
        self.log.notice(f"{c.log_prefix()} - Slow Consumer Detected: {why}")
        c.out.clear()
        c.close("Slow Consumer (Write Deadline)" if "WriteDeadline" in why else "Slow Consumer (Pending Bytes)")
        t = c.transport
        if t is not None:
            t.abort()

    def make_nonce(self) -> bytes:
        import base64
        return base64.urlsafe_b64encode(os.urandom(11)).rstrip(b"=")

    # ---- INFO -----------------------------------------------------------------------------------------

    def info_dict(self) -> dict:
        o = self.opts
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.name,
            "version": rillet.SERVER_VERSION,
            "proto": rillet.PROTO_VERSION,
            "go": f"python{sys.version_info[0]}.{sys.version_info[1]}",
            "host": o.host or "0.0.0.0",
            "port": self.addr[1],
            "headers": not o.no_header_support,
            "max_payload": o.max_payload,
        }
        # with a no_auth_user, clients may connect without credentials: nats-server then does not ask
        if self.authenticator.required and not o.no_auth_user:
            info["auth_required"] = True
        if o.tls is not None:
            if o.tls_required:
                info["tls_required"] = True
            else:
                info["tls_available"] = True
            if o.tls.verify:
                info["tls_verify"] = True
        if o.jetstream.enabled and self.jetstream is not None:
            info["jetstream"] = True
        if self.cluster is not None:
            info["cluster"] = self.cluster.name  # (a generated name too, as nats-server)
        elif o.cluster.name:
            info["cluster"] = o.cluster.name
        if o.jetstream.domain:
            info["domain"] = o.jetstream.domain
        urls = self.connect_urls()
        if urls:
            info["connect_urls"] = urls
        if self.ldm:
            info["ldm"] = True
        info["api_lvl"] = rillet.JS_API_LEVEL  # the JetStream API level (nats-server sends it always)
        info["xkey"] = self.xkey
        return info

    def connect_urls(self) -> list[str]:
        if self.cluster is not None:
            return self.cluster.client_connect_urls()  # this server and the other servers of the cluster
        o = self.opts
        if o.no_advertise:
            return []
        if o.client_advertise:
            return [o.client_advertise]
        return []

    def info_for(self, c: Any, connect_info: bool = False) -> bytes:
        import json  # (here: an idle server loads no json module, issue 20)
        info = self.info_dict()
        info["client_id"] = c.cid
        if c.host and (connect_info or not self.opts.proxy_protocol or c.conn_type != "STANDARD"
                       or c.proxy_taken):  # (the header read before a TLS-first handshake: known by the INFO)
            info["client_ip"] = c.host  # (proxy_protocol: the first INFO would name the proxy, as nats-server)
        if c.nonce is not None:
            info["nonce"] = c.nonce.decode()
        if c.conn_type == "WEBSOCKET":
            c.adjust_info(info)
        if connect_info:
            info.pop("nonce", None)
            info["connect_info"] = True
            info["remote_account"] = c.account.name
            if c.account.name == self.opts.system_account and self.opts.system_account:
                info["acc_is_sys"] = True
        return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b" \r\n"

    def broadcast_info(self) -> None:
        """Send a fresh INFO to every client that asked for async INFO (protocol >= 1)."""
        for c in list(self.clients.values()):
            if c.connect_received and c.opts.protocol >= 1 and not c.closed:
                c.out += self.info_for(c)
                c.flush()
        self.flush_clients()

    # ---- lame duck, reload ----------------------------------------------------------------------------

    async def lame_duck(self) -> None:
        """Stop accepting clients, tell them (INFO ldm), then close them spread over the duration."""
        if self.ldm or self.shutting_down:
            return
        self.log.notice("Entering lame duck mode, stop accepting new clients")
        self.ldm = True
        if self.cluster is not None:
            self.cluster.enter_lame_duck()  # routes stop advertising our client URLs
        if self._listener is not None:
            self._listener.close()
        for lst in self.extra_listeners:
            stop = getattr(lst, "stop_accepting", None)
            if stop is not None:
                await stop()
        o = self.opts
        clients = list(self.clients.values())
        if not clients:
            await self.shutdown()
            return
        self.broadcast_info()
        gp = abs(o.lame_duck_grace_period)
        try:
            await asyncio.sleep(gp)
        except asyncio.CancelledError:
            return
        self.log.notice("Closing existing clients")
        dur = max(o.lame_duck_duration - gp, 1.0)
        clients = [c for c in self.clients.values() if not c.closed]
        si = min(dur / max(len(clients), 1), 1.0)
        for i, c in enumerate(clients):
            if self.shutting_down:
                return
            c.close("Server Shutdown")
            if i < len(clients) - 1:
                await asyncio.sleep(random.uniform(si / 2, si))
        await self.shutdown()

    def reload(self, new_opts: Options) -> None:
        """Apply what may change at runtime (like nats-server's reload)."""
        old = self.opts
        urls_before = self.connect_urls()
        for key in ("host", "port", "cluster", "jetstream"):
            if key == "jetstream":
                if new_opts.jetstream.enabled != old.jetstream.enabled or \
                        new_opts.jetstream.store_dir != old.jetstream.store_dir:
                    raise ValueError("config reload not supported for jetstream storage directory change")
                for k, name in (("max_buffered_msgs", "StreamMaxBufferedMsgs"),
                                ("max_buffered_size", "StreamMaxBufferedSize"),
                                ("max_outstanding_catchup", "JetStreamMaxCatchup"),
                                ("max_concurrent_io", "JetStreamConcurrentIOs")):
                    unset = 4096 if k == "max_concurrent_io" else 0  # (nats-server's baseline value)
                    was, now = old.jetstream.extra.get(k, unset), new_opts.jetstream.extra.get(k, unset)
                    if was != now:  # (read by each stream when it is made: rillet.jetstream.ingest, as nats-server)
                        raise ValueError(f"config reload not supported for {name}: old={was}, new={now}")
                continue
            if getattr(new_opts, key) != getattr(old, key) and key in ("host", "port"):
                if not (key == "port" and old.port == RANDOM_PORT and new_opts.port == RANDOM_PORT):
                    raise ValueError(f"config reload not supported for {key.capitalize()}: "
                                     f"old={getattr(old, key)}, new={getattr(new_opts, key)}")
        from rillet.server import auth_callout
        auth_callout.check_reload(self, new_opts)  # ValueError: the reload is refused before anything changes
        self.subsystems.check_reload(self, new_opts)  # the cluster, leafnodes and gateway blocks (ValueError)
        from rillet.server.tls import recheck_pinned, stapling_reload_needed
        from rillet.server.tls import reload_context as tls_reload_context
        restage = self.opts.tls is not None and new_opts.tls is not None and stapling_reload_needed(self, new_opts)
        new_tls_context = tls_reload_context(self, new_opts)  # ValueError: the reload is refused
        new_opts.port = old.port
        self.opts = new_opts
        self.tls_context = new_tls_context
        if restage:
            self.loop.create_task(self._restage_stapling())  # OCSP stapling made again (rillet.server.ocsp_staple)
        if self._ocsp_checker is not None and old.ocsp_cache != new_opts.ocsp_cache:
            # a changed ocsp_cache: the old cache is saved and a new one comes online (as nats-server)
            self._ocsp_checker.stop()
            self.on_shutdown.remove(self._ocsp_checker.stop)
            self._ocsp_checker = None
        if ocsp_peer_configs(new_opts):
            self.ocsp_checker()  # (ocsp_peer settings themselves are read per connection)
        self.trace_on = new_opts.trace
        self.log.debug_on = new_opts.debug
        self.log.trace_on = new_opts.trace
        self.log.logtime = new_opts.logtime
        self.authenticator = Authenticator(new_opts, self.sys_only_user if sys_only_no_auth_user(new_opts) else "")
        self._reload_proxies(old, new_opts)
        from rillet.server.account_reload import recheck_client, reload_accounts
        reload_accounts(self, old, new_opts)  # accounts, their limits, mappings, exports and imports
        for lst in self.extra_listeners:
            configure = getattr(lst, "configure", None)
            if configure is not None and getattr(lst, "is_websocket", False):
                configure(new_opts.websocket)
            reloaded = getattr(lst, "reloaded", None)
            if reloaded is not None:
                reloaded()  # (the MQTT listener re-checks its clients' users and permissions)
        for c in list(self.clients.values()):
            c.parser.max_payload = new_opts.max_payload
            c.parser.max_control_line = new_opts.max_control_line
            c.update_slow_path()
            if c.connect_received and (self.authenticator.required or c.user or c.conn_type == "WEBSOCKET"):
                recheck_client(self, c)  # moved/removed users go; the others get their new permissions
        recheck_pinned(self, old, new_opts)
        if self.gateway is not None:
            self.gateway.reloaded(old.gateway_opts)  # gateway TLS settings, pinned_certs rechecked
        if self.cluster is not None:
            self.cluster.reloaded(old.cluster)  # routes added or removed
        if self.leafnodes is not None:
            self.leafnodes.reloaded(old.leaf)  # remotes added, removed, disabled; tls and compression
        self.config_load_time = time.time()
        self.reload_count += 1
        self.log.notice("Reloaded server configuration")
        if self.connect_urls() != urls_before:
            self.broadcast_info()  # nats-server sends an INFO on reload only when the connect URLs change

    def _reload_proxies(self, old: Options, new: Options) -> None:
        """proxies { trusted } changed by a reload: the connections of a removed proxy go, as nats-server's."""
        gone = [k for k in old.proxies_trusted if k not in new.proxies_trusted]
        added = [k for k in new.proxies_trusted if k not in old.proxies_trusted]
        if gone:
            for c in list(self.clients.values()):
                if c.proxy_key in gone and not c.closed:
                    self.log.error(f"{c.log_prefix()} - authentication error")
                    c.close("Proxy Not Trusted", "Authorization Violation")
            self.log.notice(f"Reloaded: proxies trusted keys [{' '.join(go_quote(k.encode()) for k in gone)}] "
                            "were removed")
        if added:
            self.log.notice(f"Reloaded: proxies trusted keys [{' '.join(go_quote(k.encode()) for k in added)}] "
                            "were added")

    def _recheck_auth(self, c: Client) -> None:
        d = c.opts.to_builtins()  # (rillet.server.connect_json.ConnectOpts)
        if c.conn_type == "WEBSOCKET":
            override = getattr(c, "refresh_auth", None)
            if override is not None:
                override()
        else:
            c.auth = self.authenticator
        res = c.auth.authenticate(d, c.nonce, c.conn_type, proxied=bool(c.proxy_key))
        if res is False:
            c.close(c.auth.failure or "Authentication Failure", "Authorization Violation")
            return
        c.perms = None
        if res is not True and res is not None:
            c._apply_user(res)
        c.update_slow_path()

    # ---- stats ----------------------------------------------------------------------------------------

    def totals(self) -> tuple[int, int, int, int]:
        """(in_msgs, in_bytes, out_msgs, out_bytes) over the server's life: closed connections included."""
        in_m, in_b, out_m, out_b = self.closed_totals
        for c in self.clients.values():
            in_m += c.in_msgs
            in_b += c.in_bytes
            out_m += c.out_msgs
            out_b += c.out_bytes
        for ic in self.internal_clients:
            in_m += ic.in_msgs
            in_b += ic.in_bytes
            out_m += ic.out_msgs
            out_b += ic.out_bytes
        return in_m, in_b, out_m, out_b


def validate_options(o: Options) -> None:
    """Option combinations nats-server refuses at start (and with -t)."""
    if o.default_js_domain:
        from rillet.server import jsdomain
        jsdomain.validate(o)
    if o.jetstream.enabled and o.cluster.port:
        if not o.server_name:
            raise ValueError("jetstream cluster requires `server_name` to be set")
        if not o.cluster.name:
            raise ValueError("jetstream cluster requires `cluster.name` to be set")
    if o.max_payload > o.max_pending:
        raise ValueError(f"max_payload ({o.max_payload}) cannot be higher than max_pending ({o.max_pending})")
    pendingtotal.validate(o)
    if o.lame_duck_grace_period >= o.lame_duck_duration > 0 and o.lame_duck_grace_period > 0:
        raise ValueError(f"lame duck grace period ({format_seconds(o.lame_duck_grace_period)}) should be strictly "
                         f"lower than lame duck duration ({format_seconds(o.lame_duck_duration)})")


def validate_start_options(o: Options) -> None:
    """What nats-server refuses when it starts but not with -t (its JetStream cluster checks)."""
    if o.jetstream.enabled and o.cluster.port and o.jetstream.extra.get("max_outstanding_catchup", 0) < 0:
        raise ValueError("jetstream max catchup cannot be negative")


def _store_dir_problem(store_dir: str, e: OSError) -> str:
    """A JetStream storage directory that cannot be used, in nats-server's words."""
    import errno
    if e.errno == errno.ENOTDIR or (store_dir and os.path.exists(store_dir) and not os.path.isdir(store_dir)):
        return "storage directory is not a directory"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        if store_dir and os.path.isdir(store_dir):
            return "storage directory is not writable"
        return f"could not create storage directory - mkdir {e.filename or store_dir}: {(e.strerror or '').lower()}"
    return e.strerror or str(e)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_issued_ports: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, for a listener bound a little later (tests, embedded clusters).

    Chosen below the kernel's ephemeral range (32768+ on Linux): a port taken from that range with
    ``bind(0)`` can be handed to an outgoing connection (a route or gateway dialling out) before its
    listener binds it ("address already in use"). Ports handed out by this process are not handed out again.
    """
    import random
    for _ in range(200):
        port = random.randint(20000, 32000)
        if port in _issued_ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _issued_ports.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
