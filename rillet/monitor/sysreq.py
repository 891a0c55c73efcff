"""The system account's monitoring requests (``$SYS.REQ.SERVER.*.<KIND>``, ``$SYS.REQ.ACCOUNT.<acc>.<KIND>``):
the request options (nats-server's JSON field names) taken to the HTTP monitor's functions.

The server's system account (rillet.server.sysacc) answers these through ``Subsystems.server_data`` and
``account_data``, which the composition root (rillet.app) points here; the monitor's modules load with the
first request, not with the server.
"""
from __future__ import annotations

import json
from typing import Any

from rillet.gocompat.monitorfmt import QueryError


def _s(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _connz_query(o: dict) -> dict:
    q: dict[str, str] = {}
    for k in ("sort", "offset", "limit", "cid", "user", "acc", "mqtt_client"):
        if o.get(k) not in (None, "", 0):
            q[k] = _s(o[k])
    if o.get("auth"):
        q["auth"] = "true"
    if o.get("subscriptions_detail"):
        q["subs"] = "detail"
    elif o.get("subscriptions"):
        q["subs"] = "true"
    st = o.get("state")
    if st is not None and st != "":
        q["state"] = {0: "open", 1: "closed", 2: "all"}.get(st, str(st)) if isinstance(st, int) else str(st)
    return q


def _subsz_query(o: dict) -> dict:
    q: dict[str, str] = {}
    for k in ("offset", "limit", "test"):
        if o.get(k) not in (None, "", 0):
            q[k] = _s(o[k])
    if o.get("subscriptions"):
        q["subs"] = "true"
    if o.get("account"):
        q["acc"] = o["account"]
    return q


def _jsz_query(o: dict) -> dict:
    q: dict[str, str] = {}
    for k in ("accounts", "streams", "consumers", "config", "offset", "limit", "raft"):
        if o.get(k) not in (None, "", 0, False):
            q[k] = _s(o[k])
    for k in ("leader_only", "stream_leader_only", "direct_consumers"):
        if o.get(k):
            q[k.replace("_", "-")] = "true"
    if o.get("account"):
        q["acc"] = o["account"]
    return q


def _healthz_query(o: dict) -> dict:
    q: dict[str, str] = {}
    for k in ("js-enabled", "js-enabled-only", "js-server-only", "js-meta-only", "details"):
        if o.get(k):
            q[k] = "true"
    for k in ("account", "stream", "consumer"):
        if o.get(k):
            q[k] = str(o[k])
    return q


def _accountz_query(o: dict) -> dict:
    return {"acc": o["account"]} if o.get("account") else {}



def server_data(sysacc: Any, kind: str, o: dict) -> dict | None:
    """The data of a ``$SYS.REQ.SERVER.*.<kind>`` request (None: not a kind answered here); ValueError for
    bad options."""
    try:
        return _server_data(sysacc, kind, o)
    except QueryError as e:
        raise ValueError(str(e)) from None


def _server_data(sysacc: Any, kind: str, o: dict) -> dict | None:
    from rillet.monitor import endpoints
    from rillet.monitor.conns import ConnzOptions, connz
    from rillet.monitor.varz import varz
    srv = sysacc.server
    if kind == "VARZ":
        stats, cpu = sysacc._monitor()
        return varz(srv, stats, cpu)
    if kind == "CONNZ":
        return connz(srv, ConnzOptions.from_query(_connz_query(o)))
    if kind == "SUBSZ":
        return endpoints.subsz(srv, _subsz_query(o))
    if kind == "JSZ":
        return endpoints.jsz(srv, _jsz_query(o))
    if kind == "HEALTHZ":
        code, body = endpoints.healthz(srv, endpoints.healthz_options(_healthz_query(o)))
        body = dict(body)
        body.setdefault("status_code", code)  # nats-server's $SYS answer always carries the code
        return body
    if kind == "ACCOUNTZ":
        return endpoints.accountz(srv, _accountz_query(o))
    if kind == "ROUTEZ":
        return endpoints.routez(srv, {})
    if kind == "GATEWAYZ":
        return endpoints.gatewayz(srv, {})
    if kind == "LEAFZ":
        return endpoints.leafz(srv, {})
    if kind == "IPQUEUESZ":
        return endpoints.ipqueuesz(srv, {})
    if kind == "RAFTZ":
        return {}  # one server: no raft groups
    if kind == "EXPVARZ":
        from rillet.server import procstats
        return json.loads(endpoints.expvar_body(procstats.rss_bytes()))
    if kind == "PROFILEZ":
        # nats-server's pprof profiles are the Go runtime's; a Python server has none of them
        name = o.get("name", "")
        return {"profile": None,
                "error": f"Profile {json.dumps(name)} not found" if name else "Profile name not specified"}
    return None


def account_data(sysacc: Any, acc: str, kind: str, o: dict) -> dict | None:
    """The data of a ``$SYS.REQ.ACCOUNT.<acc>.<kind>`` request for CONNZ, SUBSZ, JSZ, LEAFZ and INFO (None:
    another kind); ValueError for bad options or an unknown account."""
    try:
        return _account_data(sysacc, acc, kind, o)
    except QueryError as e:
        raise ValueError(str(e)) from None


def _account_data(sysacc: Any, acc: str, kind: str, o: dict) -> dict | None:
    from rillet.monitor import endpoints
    from rillet.monitor.conns import ConnzOptions, connz
    srv = sysacc.server
    if kind == "CONNZ":
        o = dict(o, acc=acc)
        return connz(srv, ConnzOptions.from_query(_connz_query(o)))
    if kind == "SUBSZ":
        return endpoints.subsz(srv, _subsz_query(dict(o, account=acc)))
    if kind == "JSZ":
        return endpoints.jsz(srv, _jsz_query(dict(o, account=acc)))
    if kind == "LEAFZ":
        return endpoints.leafz(srv, {})
    if kind == "INFO":
        if acc not in srv.accounts:
            raise ValueError(f"account {acc!r} not found")
        d = endpoints.accountz(srv, {"acc": acc})
        return d.get("account_detail", d)
    return None
