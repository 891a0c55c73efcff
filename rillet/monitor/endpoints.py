"""The JSON bodies of the smaller endpoints: /subsz, /routez, /gatewayz, /leafz, /accountz, /accstatz,
/jsz, /healthz, /ipqueuesz, /stacksz and /debug/vars.

Each function takes the server and the parsed query and returns a dict (or text); the HTTP layer in
``httpd`` encodes it. Query errors raise ``QueryError`` (HTTP 400, plain text, nats-server's wording).
"""
from __future__ import annotations

import asyncio
import io
import sys
import threading
import time
import traceback
from typing import Any

from rillet.monitor.conns import decode_subs, sub_detail
from rillet.gocompat.gotime import format_time, unix_ns
from rillet.gocompat.monitorfmt import QueryError, num, parse_bool, parse_int
from rillet.monitor.varz import js_hook, js_running, system_account_name
from rillet.subjects import aggregate_stats, is_valid_literal_subject, match_literal
from rillet.gocompat.gojson import dumps

DEFAULT_SUB_LIST_SIZE = 1024


def _now() -> str:
    return format_time(time.time_ns())


def sublist_stats(sublists: Any) -> dict:
    st = aggregate_stats(sublists)
    st["cache_hit_rate"] = num(float(st["cache_hit_rate"]))
    st["avg_fanout"] = num(float(st["avg_fanout"]))
    return st


# ---- /subsz -------------------------------------------------------------------------------------------

def subsz(server: Any, q: Any) -> dict:
    subs = parse_bool(q, "subs")
    offset = max(parse_int(q, "offset"), 0)
    limit = parse_int(q, "limit")
    if limit <= 0:
        limit = DEFAULT_SUB_LIST_SIZE
    test = q.get("test", "")
    acc_filter = q.get("acc", "")
    if test and not is_valid_literal_subject(test):
        raise QueryError(f"invalid test subject, must be valid publish subject: {test}")
    accounts = [a for a in list(server.accounts.values()) if not acc_filter or a.name == acc_filter]
    d: dict[str, Any] = {"server_id": server.server_id, "now": _now()}
    d.update(sublist_stats([a.sublist for a in accounts]))
    d["total"] = 0
    d["offset"] = offset
    d["limit"] = limit
    if subs:
        details = []
        for a in accounts:
            for sub in a.sublist.all():
                if test and not match_literal(test, sub.subject):
                    continue
                if sub.client is None:
                    continue
                details.append(sub_detail(sub, True))
        lo = min(offset, len(details))
        hi = lo + min(limit, len(details) - lo)
        d["total"] = len(details)
        if hi > lo:
            d["subscriptions_list"] = details[lo:hi]
    return d


# ---- cluster-side endpoints ---------------------------------------------------------------------------
# Computed from the server's live route, gateway and leafnode connections (``server.routes``,
# ``server.gateways_out``/``gateways_in``, ``server.leafs``): empty until clustering lands, whatever the
# configuration says (rillet.config.inactive warns about configured-but-inactive blocks at start). A
# connection object placed there answers ``monitor_info(query_options)`` with its entry, as nats-server's
# RouteInfo / RemoteGatewayz / LeafInfo.

def _permission(p: Any) -> dict | None:
    if p is None:
        return None
    d: dict[str, Any] = {}
    if p.allow:
        d["allow"] = list(p.allow)
    if p.deny:
        d["deny"] = list(p.deny)
    return d


def routez(server: Any, q: Any) -> dict:
    subs = decode_subs(q)
    d: dict[str, Any] = {"server_id": server.server_id, "server_name": server.name, "now": _now()}
    perms = server.opts.cluster.permissions
    if perms is not None:  # the cluster block's import (publish) and export (subscribe) permissions
        imp, exp = _permission(perms.publish), _permission(perms.subscribe)
        if imp is not None:
            d["import"] = imp
        if exp is not None:
            d["export"] = exp
    routes = list(getattr(server, "routes", {}).values())
    d["num_routes"] = len(routes)
    d["routes"] = [r.monitor_info({"subs": subs}) for r in routes]
    return d


def _gateway_listen(raw: Any) -> tuple[str, str, int]:
    """(name, host, port) of a ``gateway {}`` block as parsed (keys in any case)."""
    from rillet.config.builder_base import split_host_port
    g = {str(k).lower(): v for k, v in dict(raw).items()}
    host, port = str(g.get("host", g.get("net", ""))), g.get("port", 0)
    listen = g.get("listen")
    if isinstance(listen, int) and not isinstance(listen, bool):
        port = listen
    elif isinstance(listen, str):
        h, p = split_host_port(listen)
        host = h if p is not None else listen
        port = int(p) if p is not None and p.lstrip("-").isdigit() else port
    return str(g.get("name", "")), host, int(port) if isinstance(port, int) else 0


def _advertised_host(host: str) -> str:
    """nats-server shows a gateway listening on any address under a non-loopback address of the host."""
    if host not in ("", "0.0.0.0", "::", "[::]"):
        return host
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # a documentation address: picks the outgoing interface, sends nothing
            return s.getsockname()[0]
        except OSError:
            return "0.0.0.0"


def gatewayz(server: Any, q: Any) -> dict:
    subs = decode_subs(q)
    accs = parse_bool(q, "accs")
    d: dict[str, Any] = {"server_id": server.server_id, "now": _now()}
    live = getattr(server, "gateway", None)
    gw = server.opts.gateway
    if live is not None and live.info is not None:  # (rillet.cluster.gateway) what its INFO says
        d["name"] = live.name
        d["host"] = live.info.host
        d["port"] = live.info.port
    elif gw:  # configured: name, host and port as nats-server reports them, even with no connection
        name, host, port = _gateway_listen(gw)
        d["name"] = name
        d["host"] = _advertised_host(host)
        d["port"] = port
    gw_name = q.get("gw_name", "") if hasattr(q, "get") else ""
    acc_name = q.get("acc_name", "") if hasattr(q, "get") else ""
    opts = {"subs": subs, "accs": accs or bool(acc_name), "acc_name": acc_name}
    d["outbound_gateways"] = {n: g.monitor_info(opts) for n, g in getattr(server, "gateways_out", {}).items()
                              if not gw_name or n == gw_name}
    d["inbound_gateways"] = {n: [g.monitor_info(opts) for g in conns]
                             for n, conns in getattr(server, "gateways_in", {}).items()
                             if conns and (not gw_name or n == gw_name)}
    return d


def leafz(server: Any, q: Any) -> dict:
    subs = parse_bool(q, "subs")
    acc = q.get("acc", "") if hasattr(q, "get") else ""
    leafs = [lf for lf in getattr(server, "leafs", {}).values() if not acc or lf.acc_name == acc]
    return {"server_id": server.server_id, "now": _now(), "leafnodes": len(leafs),
            "leafs": [lf.monitor_info({"subs": subs}) for lf in leafs]}


# ---- accounts -----------------------------------------------------------------------------------------

def account_clients(server: Any, acc: Any) -> list[Any]:
    """The open client connections bound to ``acc`` (taken from the server's registry), MQTT ones included
    (nats-server counts them as clients of their account)."""
    conns = [c for c in list(server.clients.values()) if c.account is acc]
    ms = getattr(server, "mqtt", None)
    if ms is not None:
        conns += [c for c in ms.open_conns().values() if c.account is acc]
    return conns


def accountz(server: Any, q: Any) -> dict:
    name = q.get("acc", "")
    d: dict[str, Any] = {"server_id": server.server_id, "now": _now()}
    sa = system_account_name(server)
    if sa:
        d["system_account"] = sa
    if not name:
        d["accounts"] = list(server.accounts.keys())
        return d
    acc = server.accounts.get(name)
    if acc is None:
        raise QueryError(f"Account {name} does not exist")
    info: dict[str, Any] = {
        "account_name": name,
        # accounts carry no update time of their own; they exist from server start (or first use)
        "update_time": format_time(unix_ns(server.start_time or time.time())),
    }
    if name == sa:
        info["is_system"] = True
    info["expired"] = False
    info["complete"] = True
    js = js_hook(server)
    enabled = name in js.accounts if js is not None else name != sa
    info["jetstream_enabled"] = bool(js_running(server) and enabled)
    info["leafnode_connections"] = 0
    info["client_connections"] = len(account_clients(server, acc))
    info["subscriptions"] = acc.sublist.count()
    if getattr(server, "operator", None) is None:
        from rillet.monitor.account_ext import exports_imports
        exports, imports = exports_imports(server, acc, sa)
        if exports:
            info["exports"] = exports
        if imports:
            info["imports"] = imports
    op = getattr(server, "operator", None)
    ainfo = op.infos.get(name) if op is not None else None
    if ainfo is not None:  # operator mode: the account's JWT (rillet.server.operator)
        info["expired"] = bool(ainfo.expires and time.time() > ainfo.expires)
        info["jwt"] = ainfo.jwt
        info["issuer_key"] = ainfo.issuer
        info["name_tag"] = op.name_tag(name)
        if ainfo.nats.get("tags"):
            info["tags"] = ainfo.nats["tags"]
        info["decoded_jwt"] = ainfo.claims
        if ainfo.revocations:
            info["revoked_user"] = {k: format_time(int(v) * 1_000_000_000) for k, v in ainfo.revocations.items()}
    else:
        info["name_tag"] = name
    info["sublist_stats"] = sublist_stats([acc.sublist])
    return d | {"account_detail": info}


def _msg_bytes(msgs: int, nbytes: int) -> dict:
    zero = {"msgs": 0, "bytes": 0}
    return {"msgs": msgs, "bytes": nbytes, "gateways": dict(zero), "routes": dict(zero), "leafs": dict(zero)}


def account_stat(server: Any, acc: Any, totals: Any) -> dict:
    conns = len(account_clients(server, acc))
    in_m, in_b, out_m, out_b = totals(acc)
    return {
        "acc": acc.name,
        "name": acc.name,
        "conns": conns,
        "leafnodes": 0,
        "total_conns": conns,
        "num_subscriptions": acc.sublist.count(),
        "sent": _msg_bytes(out_m, out_b),
        "received": _msg_bytes(in_m, in_b),
        "slow_consumers": acc.slow_consumers,
    }


def accstatz(server: Any, q: Any, totals: Any) -> dict:
    """Per-account connection and message counts; ``totals(acc)`` gives (in_msgs, in_bytes, out_msgs,
    out_bytes) for an account."""
    unused = parse_bool(q, "unused")
    stats = []
    for acc in list(server.accounts.values()):
        if unused or account_clients(server, acc):
            stats.append(account_stat(server, acc, totals))
    return {"server_id": server.server_id, "now": _now(), "account_statz": stats}


# ---- /jsz ---------------------------------------------------------------------------------------------

def jsz_options(q: Any) -> dict:
    o = {
        "accounts": parse_bool(q, "accounts"),
        "streams": parse_bool(q, "streams"),
        "consumers": parse_bool(q, "consumers"),
        "direct_consumers": parse_bool(q, "direct-consumers"),
        "config": parse_bool(q, "config"),
        "offset": parse_int(q, "offset"),
        "limit": parse_int(q, "limit"),
        "leader_only": parse_bool(q, "leader-only"),
        "raft": parse_bool(q, "raft"),
        "stream_leader_only": parse_bool(q, "stream-leader-only"),
        "acc": q.get("acc", ""),
    }
    if o["offset"] < 0:
        o["offset"] = 0
    if o["limit"] == 0:
        o["limit"] = 1024
    if o["consumers"]:
        o["streams"] = True
    if o["streams"] and not o["acc"]:
        o["accounts"] = True
    return o


def jsz(server: Any, q: Any) -> dict:
    """JetStream summary: the running JetStream subsystem's (``server.jetstream.jsz``); without one, the
    disabled shape with zero usage."""
    o = jsz_options(q)
    js = js_hook(server)
    if js is not None and js_running(server):
        return js.jsz(o)
    if o["leader_only"]:
        raise QueryError("filtered response: not leader")
    d: dict[str, Any] = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0, "accounts": 0,
                         "ha_assets": 0, "api": {"level": 0, "total": 0, "errors": 0}}
    d.update({"server_id": server.server_id, "now": _now(), "disabled": True,
              "config": {"max_memory": 0, "max_storage": 0},
              "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 0})
    return d


# ---- /healthz -----------------------------------------------------------------------------------------

JS_NOT_ENABLED = "JetStream not enabled"


def healthz_options(q: Any) -> dict:
    return {
        "js-enabled": parse_bool(q, "js-enabled"),
        "js-enabled-only": parse_bool(q, "js-enabled-only"),
        "js-server-only": parse_bool(q, "js-server-only"),
        "js-meta-only": parse_bool(q, "js-meta-only"),
        "details": parse_bool(q, "details"),
        "account": q.get("account", ""),
        "stream": q.get("stream", ""),
        "consumer": q.get("consumer", ""),
    }


def _ready_error(server: Any) -> str:
    failed = []
    if getattr(server, "_listener", None) is None or server.shutting_down:
        failed.append("server")
    if server.opts.websocket.port and not getattr(server, "websocket_addr", None):
        failed.append("websocket")
    if not failed:
        return ""
    return f"failed to be ready for connections after 1ms: {', '.join(failed)}"


def healthz(server: Any, o: dict) -> tuple[int, dict]:
    """(HTTP status, body) like nats-server's health check."""
    details = o["details"]
    errors: list[dict] = []
    status = "ok"
    error = ""
    code = 0

    def fail(kind: str, msg: str, st: str, http_code: int) -> None:
        nonlocal status, error, code
        code = http_code
        if details:
            errors.append({"type": kind, "error": msg})
        else:
            status = st
            error = msg

    while True:  # one pass; ``break`` ends the checks
        if not o["account"] and o["stream"]:
            fail("BAD_REQUEST", '"account" must not be empty when checking stream health', "error", 400)
            break
        if not o["stream"] and o["consumer"]:
            fail("BAD_REQUEST", '"stream" must not be empty when checking consumer health', "error", 400)
            break
        err = _ready_error(server)
        if err:
            fail("CONNECTION", err, "error", 500)
            break
        if o["js-server-only"] or not server.opts.jetstream.enabled:
            break
        if not js_running(server):
            fail("JETSTREAM", JS_NOT_ENABLED, "unavailable", 503)
            break
        if o["js-enabled-only"] or o["js-enabled"]:
            break
        js = js_hook(server)
        if js is not None:
            # the JetStream module checks its accounts, streams and consumers and answers with
            # nats-server's HealthStatus (status, optional status_code, error or errors)
            r = dict(js.healthz(dict(o)) or {"status": "ok"})
            rc = int(r.pop("status_code", 0) or 0)
            if not rc:
                rc = 503 if (r.get("error") or r.get("errors")) else 200
            return rc, r
        break

    if details:
        status = "error" if errors else "ok"
    if not code:
        code = 503 if (error or errors) else 200
    body: dict[str, Any] = {"status": status}
    if error:
        body["error"] = error
    if errors:
        body["errors"] = errors
    return code, body


# ---- /ipqueuesz, /stacksz, /debug/vars ----------------------------------------------------------------

def ipqueuesz(server: Any, q: Any) -> dict:
    parse_bool(q, "all")
    return {}  # rillet has no internal inter-thread queues to report


def stacks_text() -> str:
    """Every thread's stack, then every asyncio task's, in the spirit of a goroutine dump."""
    out = io.StringIO()
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in frames.items():
        out.write(f"thread {ident} [{names.get(ident, '?')}]:\n")
        out.write("".join(traceback.format_stack(frame)))
        out.write("\n")
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        tasks = set()
    for t in sorted(tasks, key=lambda t: t.get_name()):
        state = "done" if t.done() else "pending"
        out.write(f"task {t.get_name()} [{state}]: {t.get_coro()!r}\n")
        for f in t.get_stack():
            out.write("".join(traceback.format_stack(f, limit=1)))
        out.write("\n")
    return out.getvalue()


def expvar_body(rss: int) -> bytes:
    """``/debug/vars``: the command line and the few memory figures a Python process can give."""
    import gc

    mem = {"Sys": rss, "NumGC": sum(s.get("collections", 0) for s in gc.get_stats())}
    parts = [b'"cmdline": ' + dumps(list(sys.argv), 0), b'"memstats": ' + dumps(mem, 0)]
    return b"{\n" + b",\n".join(parts) + b"\n}\n"
