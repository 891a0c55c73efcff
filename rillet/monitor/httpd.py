"""The monitoring HTTP server (rillet.monitor.http11) and its routing, response and error conventions.

Routing follows Go's ``http.ServeMux`` as nats-server sets it up: each endpoint matches its exact
path (under ``http_base_path`` when set), the index page only the base itself, anything else is
``404 page not found``. JSON answers carry ``Content-Type: application/json`` and
``Access-Control-Allow-Origin: *``; query errors are ``400`` in plain text. A ``callback`` query
parameter wraps the JSON for JSONP (``application/javascript``), as nats-server 2.11 does.
"""
from __future__ import annotations

import posixpath
import re
import time
from typing import Any, Awaitable, Callable


import rillet
from rillet.monitor.http11 import HttpServer, Request, Response
from rillet.server import procstats
from rillet.gocompat.gojson import dumps
from rillet.gocompat.goquote import go_quote
from rillet.gocompat.gotime import format_time
from rillet.gocompat.monitorfmt import QueryError

# The endpoints' modules (rillet.monitor.endpoints, conns, varz: ~0.3 MB) are loaded by the first request that
# needs them, not when the monitor starts (issue 20: idle RSS).


def _endpoints() -> Any:
    from rillet.monitor import endpoints
    return endpoints

ROOT, VARZ, CONNZ, ROUTEZ, GATEWAYZ, LEAFZ, SUBSZ, STACKSZ = (
    "/", "/varz", "/connz", "/routez", "/gatewayz", "/leafz", "/subsz", "/stacksz")
ACCOUNTZ, ACCSTATZ, JSZ, HEALTHZ, IPQUEUESZ, RAFTZ, EXPVARZ = (
    "/accountz", "/accstatz", "/jsz", "/healthz", "/ipqueuesz", "/raftz", "/debug/vars")
SUBSCRIPTIONSZ = "/subscriptionsz"
SUPERZ = "/superz"  # Rillet-specific: the super-cluster health view (rillet.monitor.superz)
METRICS = "/metrics"  # Rillet-specific, off unless http_metrics: Prometheus text (rillet.monitor.metrics)
METRICS_OFF = ("/metrics is not enabled on this server: set http_metrics: true in the configuration "
               "or start it with --http_metrics\n")

_CALLBACK_OK = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$.]*$")

Handler = Callable[[Request], Awaitable[Response]]


def normalize_base_path(p: str) -> str:
    if not p:
        return "/"
    if not p.startswith("/"):
        p = "/" + p
    return posixpath.normpath(p).replace("//", "/")


def join_path(base: str, p: str) -> str:
    return posixpath.normpath(posixpath.join(base, p.lstrip("/"))) if base != "/" else p


class Monitor:
    """Owns the HTTP request counters and the CPU meter, and answers every request."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.http_req_stats: dict[str, int] = {}
        self.acc_closed: dict[str, tuple[int, int, int, int]] = {}
        self.cpu = procstats.CPUMeter()
        self.base = normalize_base_path(server.opts.http_base_path)
        routes: dict[str, Handler] = {
            ROOT: self.handle_root,
            VARZ: self.handle_varz,
            CONNZ: self.handle_connz,
            ROUTEZ: self.handle_routez,
            GATEWAYZ: self._counted(GATEWAYZ, "gatewayz"),
            LEAFZ: self._counted(LEAFZ, "leafz"),
            SUBSZ: self._counted(SUBSZ, "subsz"),
            SUBSCRIPTIONSZ: self._counted(SUBSZ, "subsz"),
            STACKSZ: self.handle_stacksz,
            ACCOUNTZ: self._counted(ACCOUNTZ, "accountz"),
            ACCSTATZ: self.handle_accstatz,
            JSZ: self._counted(JSZ, "jsz"),
            HEALTHZ: self.handle_healthz,
            IPQUEUESZ: self.handle_ipqueuesz,
            RAFTZ: self.handle_raftz,
            EXPVARZ: self.handle_expvarz,
            SUPERZ: self.handle_superz,
            METRICS: self.handle_metrics,
        }
        self.routes = {join_path(self.base, p): h for p, h in routes.items()}

    # ---- plumbing -------------------------------------------------------------------------------------

    def add_closed_totals(self, acc: str, c: Any) -> None:
        """Keep the message counts of closed connections per account (for /accstatz)."""
        t = self.acc_closed.get(acc, (0, 0, 0, 0))
        self.acc_closed[acc] = (t[0] + c.in_msgs, t[1] + c.in_bytes, t[2] + c.out_msgs, t[3] + c.out_bytes)

    def account_totals(self, acc: Any) -> tuple[int, int, int, int]:
        """(in_msgs, in_bytes, out_msgs, out_bytes) of an account's client connections, closed ones too."""
        in_m, in_b, out_m, out_b = self.acc_closed.get(acc.name, (0, 0, 0, 0))
        for c in _endpoints().account_clients(self.server, acc):
            in_m += c.in_msgs
            in_b += c.in_bytes
            out_m += c.out_msgs
            out_b += c.out_bytes
        return in_m, in_b, out_m, out_b

    def count(self, path: str) -> None:
        self.http_req_stats[path] = self.http_req_stats.get(path, 0) + 1

    async def dispatch(self, request: Request) -> Response:
        h = self.routes.get(request.path)
        if h is None:
            return not_found()
        try:
            return await h(request)
        except QueryError as e:
            return text_response(str(e), 400)
        except Exception as e:  # a monitoring bug must not take the server down
            self.server.log.error(f"monitoring: error serving {request.path}: {e!r}")
            return text_response("Internal Server Error", 500)

    def json(self, request: Request, obj: Any, status: int = 200, indent: int = 2) -> Response:
        return json_response(request, dumps(obj, indent), status)

    # ---- handlers -------------------------------------------------------------------------------------

    def _counted(self, path: str, endpoint: str) -> Handler:
        """The handler of an endpoint that only reads the query: counted in /varz http_req_stats under
        ``path``, answered with ``rillet.monitor.endpoints.<endpoint>(server, query)`` as JSON."""
        async def handle(request: Request) -> Response:
            self.count(path)
            return self.json(request, getattr(_endpoints(), endpoint)(self.server, request.query))
        return handle


    async def handle_root(self, request: Request) -> Response:
        self.count(ROOT)
        return Response(body=index_page(self.base).encode(), content_type="text/html", charset="utf-8")

    async def handle_varz(self, request: Request) -> Response:
        self.count(VARZ)
        from rillet.monitor.varz import varz
        return self.json(request, varz(self.server, self.http_req_stats, self.cpu))

    async def handle_connz(self, request: Request) -> Response:
        from rillet.monitor.conns import ConnzOptions, connz
        opts = ConnzOptions.from_query(request.query)
        self.count(CONNZ)
        return self.json(request, connz(self.server, opts))

    async def handle_routez(self, request: Request) -> Response:
        from rillet.monitor.conns import decode_subs
        decode_subs(request.query)
        self.count(ROUTEZ)
        return self.json(request, _endpoints().routez(self.server, request.query))

    async def handle_stacksz(self, request: Request) -> Response:
        return json_response(request, _endpoints().stacks_text().encode())

    async def handle_accstatz(self, request: Request) -> Response:
        self.count(ACCSTATZ)
        return self.json(request, _endpoints().accstatz(self.server, request.query, self.account_totals))

    async def handle_healthz(self, request: Request) -> Response:
        self.count(HEALTHZ)
        o = _endpoints().healthz_options(request.query)
        log = self.server.log
        if o["js-enabled"]:
            log.warn("Healthcheck: js-enabled deprecated, use js-enabled-only instead")
        code, body = _endpoints().healthz(self.server, o)
        if body.get("error"):
            log.warn(f"Healthcheck failed: {go_quote(body['error'])}")
        elif body.get("errors"):
            log.warn(f"Healthcheck failed: {len(body['errors'])} errors")
        return self.json(request, body, code, indent=0)

    async def handle_ipqueuesz(self, request: Request) -> Response:
        return self.json(request, _endpoints().ipqueuesz(self.server, request.query), indent=3)

    async def handle_raftz(self, request: Request) -> Response:
        cl = getattr(getattr(self.server, "jetstream", None), "cluster", None)
        q = request.query
        data = cl.mon.raftz(q.get("group", ""), q.get("acc", "")) if cl is not None else None
        if data is None:
            return text_response("No Raft nodes registered", 404)
        return self.json(request, data, indent=3)

    async def handle_superz(self, request: Request) -> Response:
        from rillet.monitor import superz
        timeout, thresholds, text = superz.query_options(request.query)
        # (not counted in /varz http_req_stats, which lists nats-server's endpoints)
        try:
            view = await superz.gatherer(self.server).health(timeout, thresholds)
        except superz.NoSystemAccount as e:
            return text_response(str(e), 503)
        code = 200 if view["healthy"] else 503
        if text:
            return text_response(superz.text_view(view), code)
        return self.json(request, {"server_id": self.server.server_id, "server_name": self.server.name,
                                   "now": format_time(time.time_ns()), **view}, code)

    async def handle_metrics(self, request: Request) -> Response:
        # (not counted in /varz http_req_stats, which lists nats-server's endpoints)
        if not self.server.opts.http_metrics:
            return text_response(METRICS_OFF, 404)
        from rillet.monitor import metrics
        return Response(body=metrics.render(self.server, self).encode(), content_type=metrics.CONTENT_TYPE)

    async def handle_expvarz(self, request: Request) -> Response:
        body = _endpoints().expvar_body(procstats.rss_bytes())
        return Response(body=body, content_type="application/json", charset="utf-8")


def json_response(request: Request, data: bytes, status: int = 200) -> Response:
    cb = request.query.get("callback", "")
    if cb and _CALLBACK_OK.match(cb):
        return Response(body=cb.encode() + b"(" + data + b")", status=status,
                            content_type="application/javascript")
    return Response(body=data, status=status, content_type="application/json",
                        headers={"Access-Control-Allow-Origin": "*"})


def text_response(text: str, status: int) -> Response:
    return Response(body=text.encode("utf-8", "surrogateescape"), status=status, content_type="text/plain",
                    charset="utf-8")


def not_found() -> Response:
    r = text_response("404 page not found\n", 404)
    r.headers["X-Content-Type-Options"] = "nosniff"
    return r


_LINKS = (
    ("General", VARZ), ("JetStream", JSZ), ("Connections", CONNZ), ("Accounts", ACCOUNTZ),
    ("Account Stats", ACCSTATZ), ("Subscriptions", SUBSZ), ("Routes", ROUTEZ), ("LeafNodes", LEAFZ),
    ("Gateways", GATEWAYZ), ("Raft Groups", RAFTZ), ("Health Probe", HEALTHZ), ("Expvar", EXPVARZ),
    ("Super-cluster Health (Rillet)", SUPERZ), ("Prometheus Metrics (Rillet, with http_metrics)", METRICS),
)


def _escape(s: str) -> str:
    """HTML-escaped text (as html.escape, whose module loads the 2,000-entry entity table: ~0.3 MB)."""
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&#x27;"))


def index_page(base: str) -> str:
    items = "\n".join(
        f'    <li><a href="{_escape(join_path(base, p))}">{label}</a> <code>{p}</code></li>'
        for label, p in _LINKS)
    return f"""<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>Rillet monitoring</title>
    <style>
      body {{ font-family: system-ui, sans-serif; margin: 2rem; }}
      li {{ margin: 0.3rem 0; }}
      code {{ color: #888; }}
    </style>
  </head>
  <body>
    <h1>Rillet</h1>
    <p>NATS server v{_escape(rillet.SERVER_VERSION)} compatible (rillet {_escape(rillet.__version__)})</p>
    <ul>
{items}
    </ul>
    <p><a href="https://docs.nats.io/running-a-nats-service/nats_admin/monitoring">Monitoring documentation</a></p>
  </body>
</html>
"""


class MonitorListener:
    """What the server keeps in ``extra_listeners``: closes the HTTP server on shutdown."""

    def __init__(self, http: HttpServer, scheme: str) -> None:
        self.http = http
        self.scheme = scheme
        self.closed = False

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.http.close()


async def start_site(server: Any, monitor: Monitor, secure: bool) -> MonitorListener:
    o = server.opts
    host = o.http_host or o.host or "0.0.0.0"
    port = o.https_port if secure else o.http_port
    if port == -1:
        port = 0
    ssl_ctx = None
    if secure:
        if o.tls is None:
            raise ValueError("TLS cert and key required for HTTPS")
        from rillet.server.tls import make_server_context
        import ssl
        ssl_ctx = make_server_context(o.tls)
        ssl_ctx.verify_mode = ssl.CERT_NONE  # monitoring never asks for client certificates
    from rillet.server.listen import listening_socket  # (the monitor loads after the server)
    http = HttpServer(monitor.dispatch)
    sock = None
    try:
        # where nats-server listens: 0.0.0.0 and :: are one dual-stack socket (rillet.server.listen)
        sock = await listening_socket(server.loop, host, port)
        await http.start(sock, ssl_ctx, backlog=1024)
    except OSError as e:
        if sock is not None:
            sock.close()
        await http.close()
        raise OSError(e.errno, f"Can't start monitoring: can't listen to the monitor port: listen tcp {_hostport(host, port)}: "
                               f"bind: {(e.strerror or str(e)).lower()}") from e
    actual = port
    if http.sockets:  # the bound port when 0 was asked for
        actual = http.sockets[0].getsockname()[1]
    scheme = "https" if secure else "http"
    if secure:
        server.https_addr = (host, actual)
    else:
        server.http_addr = (host, actual)
    server.log.notice(f"Starting {scheme} monitor on {_hostport(host, actual)}")
    return MonitorListener(http, scheme)


def _hostport(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"

