"""/varz: server identity, configuration and runtime counters, and the JetStream summary blocks
that /varz and /jsz share."""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import rillet
from rillet import lane
from rillet.gocompat.gotime import format_time, unix_ns
from rillet.server import procstats
from rillet.gocompat.monitorfmt import num, put_set, secs_to_ns, uptime

if TYPE_CHECKING:
    from rillet.server.subsystems import JetStreamService

DEFAULT_TLS_TIMEOUT = 2.0


# ---- JetStream ----------------------------------------------------------------------------------------

def js_hook(server: Any) -> JetStreamService | None:
    """The JetStream subsystem, when one is attached to the server (``server.jetstream``)."""
    js: JetStreamService | None = server.jetstream
    return js


def js_running(server: Any) -> bool:
    """JetStream configured and actually serving (a subsystem is attached and says it is enabled)."""
    if not server.opts.jetstream.enabled:
        return False
    js = js_hook(server)
    return js is not None and js.is_enabled()


def varz_jetstream(server: Any) -> dict:
    """/varz ``jetstream``: the running subsystem's config, stats and limits (empty when not running)."""
    js = js_hook(server)
    if js is None or not js_running(server):
        return {}
    return {"config": js.config_dict(), "stats": js.stats_dict(), "limits": js.limits_dict()}


# ---- subsystems (reported from their options, like nats-server) ---------------------------------------

def _route_hosts(urls: list[str]) -> list[str]:
    from urllib.parse import urlsplit  # (the monitor's first request loads it: http11)
    out = []
    for u in urls:
        try:
            out.append(urlsplit(u if "://" in u else "nats://" + u).netloc.rpartition("@")[2])
        except ValueError:
            out.append(u)
    return out


def _split_listen(v: Any) -> tuple[str, int]:
    if not isinstance(v, str):
        return "", int(v) if isinstance(v, int) else 0
    host, _, port = v.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return v, 0


def _seconds(v: Any) -> float:
    if isinstance(v, bool):
        return 0.0
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        from rillet.gocompat.gotime import parse_go_duration
        try:
            return float(parse_go_duration(v))
        except Exception:
            return 0.0
    return 0.0


def _host_port(m: dict) -> tuple[str, int]:
    host = str(m.get("host", "") or "")
    port = m.get("port", 0)
    if "listen" in m:
        h, p = _split_listen(m["listen"])
        host = host or h
        port = port or p
    try:
        port = int(port)
    except (TypeError, ValueError):
        port = 0
    return host, port


def _timeouts(m: dict, d: dict) -> None:
    auth = m.get("authorization")
    if isinstance(auth, dict) and auth.get("timeout") is not None:
        t = _seconds(auth.get("timeout"))
        if t:
            d["auth_timeout"] = num(t)
    tls = m.get("tls")
    if isinstance(tls, dict):
        d["tls_timeout"] = num(_seconds(tls.get("timeout", DEFAULT_TLS_TIMEOUT)) or DEFAULT_TLS_TIMEOUT)
        d["tls_required"] = True
        if tls.get("verify") or tls.get("verify_and_map"):
            d["tls_verify"] = True


def varz_cluster(server: Any) -> dict:
    c = server.opts.cluster
    live = getattr(server, "cluster", None)  # rillet.cluster.cluster.Cluster: routes are active
    d: dict[str, Any] = {}
    if live is not None:
        d["name"] = live.name  # (a generated or adopted name too, as nats-server's info.Cluster)
    elif c.name:
        d["name"] = c.name
    if not c.port:
        return d
    if c.host or live is not None:
        d["addr"] = c.host or "0.0.0.0"
    d["cluster_port"] = live.addr[1] if live is not None and live.addr[1] else c.port
    if c.auth_timeout:
        d["auth_timeout"] = num(float(c.auth_timeout))
    if c.routes:
        d["urls"] = _route_hosts(c.routes)
    if c.tls is not None:
        d["tls_timeout"] = num(float(c.tls.timeout))
        d["tls_required"] = True
        d["tls_verify"] = True
    if c.pool_size:
        d["pool_size"] = c.pool_size
    if c.write_deadline:
        d["write_deadline"] = int(round(c.write_deadline * 1e9))
    return d


def varz_gateway(server: Any) -> dict:
    g = server.opts.gateway or {}
    if not isinstance(g, dict) or not g.get("name"):
        return {}
    host, port = _host_port(g)
    d: dict[str, Any] = {"name": str(g["name"])}
    if host:
        d["host"] = host
    if port:
        d["port"] = port
    _timeouts(g, d)
    d.pop("tls_verify", None)
    if d.get("tls_required"):
        d["tls_verify"] = True
    if g.get("advertise"):
        d["advertise"] = str(g["advertise"])
    if g.get("connect_retries"):
        d["connect_retries"] = int(g["connect_retries"])
    remotes = []
    for r in g.get("gateways") or []:
        if isinstance(r, dict) and r.get("name"):
            rd: dict[str, Any] = {"name": str(r["name"])}
            tls = r.get("tls")
            if isinstance(tls, dict) and tls.get("timeout") is not None:
                rd["tls_timeout"] = num(_seconds(tls["timeout"]))
            remotes.append(rd)
    if remotes:
        d["gateways"] = remotes
    if g.get("reject_unknown") or g.get("reject_unknown_cluster"):
        d["reject_unknown"] = True
    live = getattr(server, "gateway", None)
    if live is not None:  # (rillet.cluster.gateway) the port in use, the URLs known of each remote
        live.varz_update(d)
    return d


def varz_leaf(server: Any) -> dict:
    live = getattr(server, "leafnodes", None)
    if live is not None:  # (rillet.cluster.leaf) the listener and remotes in use
        return live.varz()
    ln = server.opts.leafnodes or {}
    if not isinstance(ln, dict) or not ln:
        return {}
    host, port = _host_port(ln)
    d: dict[str, Any] = {}
    if port:
        if host:
            d["host"] = host
        d["port"] = port
        _timeouts(ln, d)
    remotes = []
    for r in ln.get("remotes") or []:
        if not isinstance(r, dict):
            continue
        rd: dict[str, Any] = {}
        if r.get("account"):
            rd["local_account"] = str(r["account"])
        urls = r.get("urls") or r.get("url") or []
        if isinstance(urls, str):
            urls = [urls]
        if urls:
            rd["urls"] = _route_hosts([str(u) for u in urls])
        remotes.append(rd)
    if remotes:
        d["remotes"] = remotes
    return d


def varz_mqtt(server: Any) -> dict:
    """nats-server's MQTTOptsVarz of the parsed ``mqtt {}`` block (``rillet.config.mqtt_section``)."""
    m = server.opts.mqtt or {}
    if not isinstance(m, dict) or not m:
        return {}
    d: dict[str, Any] = {}
    if m.get("host"):
        d["host"] = str(m["host"])
    live = getattr(server, "mqtt_addr", None)
    port = live[1] if live else m.get("port", 0)
    if port:
        d["port"] = int(port)
    if m.get("no_auth_user"):
        d["no_auth_user"] = str(m["no_auth_user"])
    if m.get("auth_timeout"):
        d["auth_timeout"] = num(float(m["auth_timeout"]))
    if m.get("tls") is not None:
        d["tls_timeout"] = num(float(m.get("tls_timeout") or DEFAULT_TLS_TIMEOUT))
    if m.get("js_domain"):
        d["js_domain"] = str(m["js_domain"])
    if m.get("ack_wait"):
        d["ack_wait"] = secs_to_ns(float(m["ack_wait"]))
    if m.get("max_ack_pending"):
        d["max_ack_pending"] = int(m["max_ack_pending"])
    return d


def varz_websocket(server: Any) -> dict:
    w = server.opts.websocket
    d: dict[str, Any] = {}
    if not w.port:
        return d
    if w.host:
        d["host"] = w.host
    d["port"] = w.port
    put_set(d, w, "advertise", "no_auth_user", "jwt_cookie")
    if w.handshake_timeout:
        d["handshake_timeout"] = secs_to_ns(w.handshake_timeout)
    if w.auth_timeout:
        d["auth_timeout"] = num(float(w.auth_timeout))
    if w.no_tls:
        d["no_tls"] = True
    if w.same_origin:
        d["same_origin"] = True
    if w.allowed_origins:
        d["allowed_origins"] = list(w.allowed_origins)
    if w.compression:
        d["compression"] = True
    return d


# ---- /varz --------------------------------------------------------------------------------------------

def system_account_name(server: Any) -> str:
    sa = getattr(server, "system_account", None)
    if sa is not None:
        return sa if isinstance(sa, str) else getattr(sa, "name", "")
    o = server.opts
    if o.no_system_account:
        return ""
    if o.system_account and o.system_account in server.accounts:
        return o.system_account
    return "$SYS" if "$SYS" in server.accounts else ""


def varz(server: Any, http_req_stats: dict[str, int], cpu: procstats.CPUMeter) -> dict:
    o = server.opts
    info = server.info_dict()
    now = time.time_ns()
    v: dict[str, Any] = {
        "server_id": server.server_id,
        "server_name": server.name,
        "version": rillet.SERVER_VERSION,
        "proto": rillet.PROTO_VERSION,
        "go": info.get("go", ""),
        "host": info.get("host", o.host),
        "port": server.addr[1] if server.addr[1] else o.port,
    }
    if info.get("auth_required"):
        v["auth_required"] = True
    if info.get("tls_required"):
        v["tls_required"] = True
    if info.get("tls_verify"):
        v["tls_verify"] = True
    if info.get("connect_urls"):
        v["connect_urls"] = list(info["connect_urls"])
    if o.websocket.port and o.websocket.advertise:
        v["ws_connect_urls"] = [o.websocket.advertise]
    v["max_connections"] = o.max_connections
    if o.max_subscriptions:
        v["max_subscriptions"] = o.max_subscriptions
    v["ping_interval"] = secs_to_ns(o.ping_interval)
    v["ping_max"] = o.ping_max
    v["http_host"] = o.http_host or o.host
    v["http_port"] = o.http_port
    v["http_base_path"] = o.http_base_path
    v["https_port"] = o.https_port
    v["auth_timeout"] = num(float(o.effective_auth_timeout()))
    v["max_control_line"] = o.max_control_line
    v["max_payload"] = o.max_payload
    v["max_pending"] = o.max_pending
    v["cluster"] = varz_cluster(server)
    v["gateway"] = varz_gateway(server)
    v["leaf"] = varz_leaf(server)
    v["mqtt"] = varz_mqtt(server)
    v["websocket"] = varz_websocket(server)
    v["jetstream"] = varz_jetstream(server)
    v["tls_timeout"] = num(float(o.tls.timeout if o.tls is not None else DEFAULT_TLS_TIMEOUT))
    v["write_deadline"] = secs_to_ns(o.write_deadline)
    v["start"] = format_time(unix_ns(server.start_time))
    v["now"] = format_time(now)
    v["uptime"] = uptime(now / 1e9 - server.start_time) if server.start_time else "0s"
    v["mem"] = procstats.rss_bytes()
    v["cores"] = procstats.cores()
    v["gomaxprocs"] = procstats.usable_cores()
    v["cpu"] = num(cpu.percent())
    ms = getattr(server, "mqtt", None)  # (MQTT connections count, as in nats-server)
    v["connections"] = len(server.clients) + (len(ms.open_conns()) if ms is not None else 0)
    v["total_connections"] = server.total_connections
    routes = getattr(server, "routes", {})
    v["routes"] = len(routes)  # route connections (a pool of them per remote server)
    cl = getattr(server, "cluster", None)
    v["remotes"] = len(cl.routes) if cl is not None else 0  # remote servers
    v["leafnodes"] = len(getattr(server, "leafs", {}))
    in_m, in_b, out_m, out_b = server.totals()
    v["in_msgs"] = in_m
    v["in_bytes"] = in_b
    v["in_client_msgs"] = in_m
    v["in_client_bytes"] = in_b
    v["out_msgs"] = out_m
    v["out_bytes"] = out_b
    v["out_client_msgs"] = out_m
    v["out_client_bytes"] = out_b
    v["slow_consumers"] = server.slow_consumers
    v["stale_connections"] = server.stale_connections
    v["stalled_clients"] = server.stalls
    v["subscriptions"] = sum(a.sublist.count() for a in list(server.accounts.values()))
    v["http_req_stats"] = dict(sorted(http_req_stats.items()))
    v["config_load_time"] = format_time(unix_ns(server.config_load_time))
    v["config_digest"] = getattr(o, "config_digest", "") or ""
    if o.tags:
        v["tags"] = list(o.tags)
    if o.extra.get("server_metadata"):  # server_metadata (nats-server 2.12)
        v["metadata"] = dict(o.extra["server_metadata"])
    from rillet.config.features import merged
    v["feature_flags"] = merged(o)
    if o.operator_jwts:  # operator mode
        v["trusted_operators_jwt"] = list(o.operator_jwts)
        v["trusted_operators_claim"] = list(o.trusted_operators)
    sa = system_account_name(server)
    if sa:
        v["system_account"] = sa
    if o.proxies_trusted:  # nats-server's ProxiesOptsVarz
        v["proxies"] = {"trusted": [{"key": k} for k in o.proxies_trusted]}
    op = getattr(server, "operator", None)
    if op is not None and op.pinned_fails:
        v["pinned_account_fails"] = op.pinned_fails
    checker = getattr(server, "_ocsp_checker", None)  # (there only when a tls block has ocsp_peer)
    if checker is not None and checker.cache.local:
        stats = checker.cache.stats()
        if stats is not None:  # nats-server's OCSPResponseCacheVarz: zero counts left out
            v["ocsp_peer_cache"] = {k: n for k, n in stats.items() if n}
    v["slow_consumer_stats"] = dict(server.sc_stats)  # (clients, routes, gateways, leafs)
    v["stale_connection_stats"] = dict(server.stale_stats)  # (clients, routes, gateways, leafs)
    v["disk_io_wait_stats"] = {"waiters": 0, "waits": 0, "wait_time": 0, "max_wait_time": 0}
    v["rillet_lane"] = lane.LANE  # Rillet only: "compiled" or "pure" (rillet.lane)
    # Rillet only, for soak runs (scripts/soak.py): the event loop's tasks and the process's open descriptors
    v["rillet_tasks"] = len(asyncio.all_tasks(server.loop)) if server.loop is not None else 0
    v["rillet_fds"] = procstats.open_fds()
    return v
