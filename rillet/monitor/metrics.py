"""``/metrics``: the monitoring endpoints in the Prometheus text format, under prometheus-nats-exporter's
metric names and labels, so that dashboards made for that exporter work against Rillet without one.

Off unless enabled (``http_metrics: true`` in the configuration, ``--http_metrics`` on the command line).
Each scrape reads the same data the JSON endpoints show and turns it into what the exporter makes of it:

* ``/varz``, ``/routez`` and ``/subsz``: every JSON number, nested objects flattened with ``_``
  (``gnatsd_varz_in_msgs``, ``gnatsd_varz_jetstream_stats_memory``, ``gnatsd_routez_num_routes``); of the
  strings only
  ``server_id``, ``server_name``, ``version``, ``domain``, ``leader``, ``name`` (a gauge of 1 with the text
  in a ``value`` label) and the times ``start`` and ``config_load_time`` (epoch milliseconds); booleans and
  lists are left out, as the exporter's generic collector does;
* ``/connz``: ``gnatsd_connz_num_connections``, ``total``, ``offset``, ``limit`` and the sums over the listed
  connections of ``pending_bytes``, ``subscriptions``, ``in_bytes``, ``out_bytes``, ``in_msgs``, ``out_msgs``;
* ``/gatewayz``: ``gnatsd_gatewayz_{outbound,inbound}_gateway_*`` per gateway connection;
* ``/leafz``: ``gnatsd_leafz_conn_nodes_total``, ``gnatsd_leafz_info`` and ``gnatsd_leafz_conn_*`` per leaf;
* ``/healthz``: ``gnatsd_healthz_status`` (0 ok, 1 not) and ``gnatsd_healthz_status_value``;
* ``/jsz`` (with accounts, streams, consumers and config): ``jetstream_server_*``, ``jetstream_account_*``,
  ``jetstream_stream_*`` and ``jetstream_consumer_*`` with the exporter's labels.

Every metric has the ``server_id`` label; its value is this server's id (the exporter's
``-use_internal_server_id``). The conversion functions take the endpoints' JSON (as decoded dicts), so they
apply as well to a Go nats-server's answers (tests/test_monitor_metrics.py compares the two).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from rillet.gocompat.gotime import parse_go_duration, parse_time

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CORE = "gnatsd"
JETSTREAM = "jetstream"

# the generic collector's choices (prometheus-nats-exporter collector.objectToMetrics)
_SKIP_FQN = {"leaf", "trusted_operators_claim", "cluster_tls_timeout", "cluster_cluster_port",
             "cluster_auth_timeout", "gateway_port", "gateway_auth_timeout", "gateway_tls_timeout",
             "gateway_connect_retries"}
_LABEL_KEYS = {"server_id", "server_name", "version", "domain", "leader", "name", "start", "config_load_time"}
_TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_:]")


class Registry:
    """Metric families in the order of their names, each with its samples (labels, value)."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, str, list[tuple[tuple[tuple[str, str], ...], float]]]] = {}

    def add(self, name: str, value: float, labels: dict[str, str], kind: str = "gauge", help: str = "") -> None:
        fam = self.families.get(name)
        if fam is None:
            fam = self.families[name] = (kind, help or name, [])
        key = tuple(labels.items())
        if any(k == key for k, _ in fam[2]):  # the first value of a series wins, as the exporter's map
            return
        fam[2].append((key, float(value)))

    def render(self) -> str:
        out: list[str] = []
        for name in sorted(self.families):
            kind, help, samples = self.families[name]
            out.append(f"# HELP {name} {_escape_help(help)}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in sorted(samples, key=lambda s: s[0]):
                lab = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
                out.append(f"{name}{{{lab}}} {_format_value(value)}" if lab else f"{name} {_format_value(value)}")
        return "\n".join(out) + "\n" if out else ""


def _escape_help(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 2 ** 53:
        return str(int(v))
    return repr(v)


def metric_name(*parts: str) -> str:
    """Prometheus' BuildFQName: the non-empty parts joined with ``_``."""
    return "_".join(p for p in parts if p)


def _fq_name(path: list[str]) -> str:
    fqn = "_".join(path).replace("/", "_").strip("_")
    while "__" in fqn:
        fqn = fqn.replace("__", "_")
    return _NAME_BAD.sub("_", fqn)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def epoch_ms(text: str) -> float:
    """Epoch milliseconds of RFC3339 text (-1 when it is not a time, as the exporter's parseDateString)."""
    try:
        return float(parse_time(text)[0] // 1_000_000)
    except ValueError:
        return -1.0


def uptime_ms(text: str) -> float:
    """Milliseconds of nats-server's uptime/idle text ("1y2d3h4m5s", "250ms"); -1 when unreadable."""
    if not text:
        return -1.0
    m = re.fullmatch(r"(?:(\d+)y)?(?:(\d+)d)?(.*)", text)
    if m is None:
        return -1.0
    hours = int(m.group(1) or 0) * 365 * 24 + int(m.group(2) or 0) * 24
    rest = m.group(3)
    try:
        return hours * 3_600_000 + (parse_go_duration(rest) * 1000 if rest else 0.0)
    except ValueError:
        return -1.0


def duration_s(text: Any) -> float:
    """Seconds of a Go duration text (rtt); 0 when missing or unreadable, as the exporter."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return parse_go_duration(text)
    except ValueError:
        return 0.0


# ---- the generic collector: /varz, /routez --------------------------------------------------------------

def generic(reg: Registry, endpoint: str, data: dict, server_id: str) -> None:
    def walk(obj: dict, path: list[str]) -> None:
        for k in sorted(obj):
            p = path + [k]
            fqn = _fq_name(p)
            if fqn in _SKIP_FQN:
                continue
            v = obj[k]
            name = metric_name(CORE, endpoint, fqn)
            if _is_number(v):
                reg.add(name, v, {"server_id": server_id}, help=fqn)
            elif isinstance(v, str) and k in _LABEL_KEYS:
                if _TIME_RE.match(v):
                    reg.add(name, epoch_ms(v), {"server_id": server_id}, help=fqn)
                else:
                    reg.add(name, 1, {"server_id": server_id, "value": v}, help=fqn)
            elif isinstance(v, dict):
                walk(v, p)
    walk(data, [])


# ---- /connz ---------------------------------------------------------------------------------------------

def connz(reg: Registry, data: dict, server_id: str) -> None:
    sid = {"server_id": server_id}
    conns = data.get("connections") or []
    for key in ("num_connections", "total", "offset", "limit"):
        reg.add(metric_name(CORE, "connz", key), _num(data.get(key)), sid)
    for key in ("pending_bytes", "subscriptions"):
        reg.add(metric_name(CORE, "connz", key), sum(_num(c.get(key)) for c in conns), sid)
    for key in ("in_bytes", "out_bytes", "in_msgs", "out_msgs"):
        reg.add(metric_name(CORE, "connz", key), sum(_num(c.get(key)) for c in conns), sid, kind="counter")


def _num(v: Any) -> float:
    return float(v) if _is_number(v) else 0.0


# ---- /gatewayz ------------------------------------------------------------------------------------------

def gatewayz(reg: Registry, data: dict, server_id: str) -> None:
    local = data.get("name") or ""
    for rname, gw in sorted((data.get("outbound_gateways") or {}).items()):
        _gateway(reg, "outbound_gateway", server_id, local, rname, gw)
    for rname, gws in sorted((data.get("inbound_gateways") or {}).items()):
        for gw in gws or []:
            _gateway(reg, "inbound_gateway", server_id, local, rname, gw)


def _gateway(reg: Registry, kind: str, server_id: str, local: str, remote: str, gw: dict) -> None:
    c = gw.get("connection") or {}
    labels = {"gateway_name": local, "cid": str(int(_num(c.get("cid")))), "remote_gateway_name": remote,
              "server_id": server_id}

    def add(suffix: str, value: float, help: str) -> None:
        reg.add(metric_name(CORE, "gatewayz", f"{kind}_{suffix}"), value, labels, help=help)

    add("configured", 1.0 if gw.get("configured") else 0.0, "configured")
    add("conn_start_time_seconds", _epoch_s(c.get("start")), "conn_start_time_seconds")
    add("conn_last_activity_seconds", _epoch_s(c.get("last_activity")), "conn_last_activity_seconds")
    add("conn_uptime_seconds", uptime_ms(c.get("uptime") or "") / 1000, "conn_uptime_seconds")
    add("conn_idle_seconds", uptime_ms(c.get("idle") or "") / 1000, "conn_idle_seconds")
    add("conn_rtt", duration_s(c.get("rtt")), "rtt")
    add("conn_pending_bytes", _num(c.get("pending_bytes")), "pending_bytes")
    for key in ("in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions"):
        add(f"conn_{key}", _num(c.get(key)), key)


def _epoch_s(text: Any) -> float:
    if not isinstance(text, str) or not text:
        text = "0001-01-01T00:00:00Z"  # Go's zero time, what the exporter decodes a missing time to
    try:
        return float(parse_time(text)[0] // 1_000_000_000)
    except ValueError:
        return 0.0


# ---- /leafz ---------------------------------------------------------------------------------------------

def leafz(reg: Registry, data: dict, server_id: str) -> None:
    for lf in data.get("leafs") or []:
        acc = lf.get("account") or ""
        labels = {"server_id": server_id, "account": acc, "account_id": acc, "ip": lf.get("ip") or "",
                  "port": str(lf.get("port", 0)), "name": lf.get("name") or ""}
        reg.add(metric_name(CORE, "leafz", "info"), 1, labels, help="info")
        reg.add(metric_name(CORE, "leafz", "conn_rtt"), duration_s(lf.get("rtt")), labels, help="rtt")
        for key in ("in_msgs", "out_msgs", "in_bytes", "out_bytes"):
            reg.add(metric_name(CORE, "leafz", f"conn_{key}"), _num(lf.get(key)), labels, help=key)
        reg.add(metric_name(CORE, "leafz", "conn_subscriptions_total"), _num(lf.get("subscriptions")), labels,
                help="subscriptions_total")
        for sub in lf.get("subscriptions_list") or []:
            reg.add(metric_name(CORE, "leafz", "conn_subscriptions"), 0, {**labels, "subscription": sub},
                    help="subscriptions")
    reg.add(metric_name(CORE, "leafz", "conn_nodes_total"), _num(data.get("leafnodes")), {"server_id": server_id},
            help="nodes_total")


# ---- /healthz -------------------------------------------------------------------------------------------

def healthz(reg: Registry, data: dict | None, server_id: str) -> None:
    """``data`` None: the health could not be read (``status_value`` says "unreachable")."""
    status = (data or {}).get("status", "")
    if data is not None:
        reg.add(metric_name(CORE, "healthz", "status"), 0 if status == "ok" else 1, {"server_id": server_id},
                help="status")
    reg.add(metric_name(CORE, "healthz", "status_value"), 1 if status == "ok" else 0,
            {"server_id": server_id, "value": status if data is not None else "unreachable"}, help="status")


# ---- /jsz -----------------------------------------------------------------------------------------------

_JS_HELP = {
    "server_jetstream_disabled": "JetStream disabled or not",
    "server_total_streams": "Total number of streams in JetStream",
    "server_total_consumers": "Total number of consumers in JetStream",
    "server_total_messages": "Total number of stored messages in JetStream",
    "server_total_message_bytes": "Total number of bytes stored in JetStream",
    "server_max_memory": "JetStream Max Memory",
    "server_max_storage": "JetStream Max Storage",
}


def jsz(reg: Registry, data: dict, server_id: str, server_name: str) -> None:
    meta = data.get("meta_cluster")
    cluster = leader = ""
    is_meta_leader = "true"
    if isinstance(meta, dict):
        cluster = meta.get("name") or ""
        leader = meta.get("leader") or ""
        is_meta_leader = "true" if leader == server_name else "false"
    cfg = data.get("config") or {}
    server_labels = {"server_id": server_id, "server_name": server_name, "cluster": cluster,
                     "domain": cfg.get("domain") or "", "meta_leader": leader, "is_meta_leader": is_meta_leader}

    def add(name: str, value: float, labels: dict[str, str]) -> None:
        reg.add(metric_name(JETSTREAM, name), value, labels, help=_JS_HELP.get(name, name))

    add("server_jetstream_disabled", 1 if data.get("disabled") else 0, server_labels)
    _add_fields(add, server_labels, cfg, (("server_max_memory", "max_memory"), ("server_max_storage", "max_storage")))
    _add_fields(add, server_labels, data, (("server_total_streams", "streams"), ("server_total_consumers", "consumers"),
                                           ("server_total_messages", "messages"),
                                           ("server_total_message_bytes", "bytes")))
    for acc in data.get("account_details") or []:
        name = acc.get("name") or ""
        acc_labels = {**server_labels, "account": name, "account_name": name, "account_id": acc.get("id") or ""}
        _add_fields(add, acc_labels, acc, (("account_max_storage", "reserved_storage"),
                                           ("account_max_memory", "reserved_memory"),
                                           ("account_storage_used", "storage"), ("account_memory_used", "memory")))
        for st in acc.get("stream_detail") or []:
            _stream(add, acc_labels, st, server_name)


def _add_fields(add: Any, labels: dict[str, str], src: dict, fields: tuple[tuple[str, str], ...]) -> None:
    """One metric per (metric name, field of ``src``), with the same labels."""
    for name, key in fields:
        add(name, _num(src.get(key)), labels)


def _origin(add: Any, labels: dict[str, str], o: dict, kind: str) -> None:
    """A stream's source or mirror (``kind``): its lag and how long since it was active."""
    ext = o.get("external") or {}
    ol = {**labels, f"{kind}_name": o.get("name") or "", f"{kind}_api": ext.get("api") or "",
          f"{kind}_deliver": ext.get("deliver") or ""}
    _add_fields(add, ol, o, ((f"stream_{kind}_lag", "lag"), (f"stream_{kind}_active_duration_ns", "active")))


def _leader_of(obj: dict, server_name: str) -> tuple[str, str]:
    cl = obj.get("cluster")
    if isinstance(cl, dict):
        leader = cl.get("leader") or ""
        return leader, "true" if leader == server_name else "false"
    return "", "true"


def _stream(add: Any, acc_labels: dict[str, str], st: dict, server_name: str) -> None:
    leader, is_leader = _leader_of(st, server_name)
    labels = {**acc_labels, "stream_name": st.get("name") or "", "stream_leader": leader,
              "is_stream_leader": is_leader, "stream_raft_group": st.get("stream_raft_group") or ""}
    state = st.get("state") or {}
    _add_fields(add, labels, state, (("stream_total_messages", "messages"), ("stream_total_bytes", "bytes"),
                                     ("stream_first_seq", "first_seq"), ("stream_last_seq", "last_seq"),
                                     ("stream_consumer_count", "consumer_count"),
                                     ("stream_subject_count", "num_subjects")))
    cfg = st.get("config")
    if isinstance(cfg, dict):
        _add_fields(add, labels, cfg, (("stream_limit_bytes", "max_bytes"), ("stream_limit_messages", "max_msgs")))
    for src in st.get("sources") or []:
        _origin(add, labels, src, "source")
    mirror = st.get("mirror")
    if isinstance(mirror, dict):
        _origin(add, labels, mirror, "mirror")
    for con in st.get("consumer_detail") or []:
        c_leader, c_is_leader = _leader_of(con, server_name)
        ccfg = con.get("config") or {}
        cl = {**labels, "consumer_name": con.get("name") or "", "consumer_leader": c_leader,
              "is_consumer_leader": c_is_leader, "consumer_desc": ccfg.get("description") or ""}
        delivered = con.get("delivered") or {}
        ack_floor = con.get("ack_floor") or {}
        ts = con.get("ts")
        if delivered.get("last_active") and ts:
            add("consumer_last_delivery_seconds", _seconds_between(delivered["last_active"], ts), cl)
        if ack_floor.get("last_active") and ts:
            add("consumer_last_ack_seconds", _seconds_between(ack_floor["last_active"], ts), cl)
        _add_fields(add, cl, delivered, (("consumer_delivered_consumer_seq", "consumer_seq"),
                                         ("consumer_delivered_stream_seq", "stream_seq")))
        _add_fields(add, cl, con, (("consumer_num_ack_pending", "num_ack_pending"),
                                   ("consumer_num_redelivered", "num_redelivered"),
                                   ("consumer_num_waiting", "num_waiting"), ("consumer_num_pending", "num_pending")))
        _add_fields(add, cl, ack_floor, (("consumer_ack_floor_stream_seq", "stream_seq"),
                                         ("consumer_ack_floor_consumer_seq", "consumer_seq")))


def _seconds_between(earlier: str, later: str) -> float:
    try:
        return (parse_time(later)[0] - parse_time(earlier)[0]) / 1e9
    except ValueError:
        return 0.0


# ---- all of it ------------------------------------------------------------------------------------------

JSZ_QUERY = {"accounts": "true", "streams": "true", "consumers": "true", "config": "true"}


def from_endpoints(bodies: dict[str, Any], server_id: str, server_name: str) -> Registry:
    """The registry for the decoded JSON bodies of ``varz``, ``connz``, ``routez``, ``subsz``, ``gatewayz``, ``leafz``,
    ``jsz`` and ``healthz`` (any may be missing; ``healthz`` None is "unreachable")."""
    reg = Registry()
    if "varz" in bodies:
        generic(reg, "varz", bodies["varz"], server_id)
    if "routez" in bodies:
        generic(reg, "routez", bodies["routez"], server_id)
    if "subsz" in bodies:
        generic(reg, "subsz", bodies["subsz"], server_id)
    if "connz" in bodies:
        connz(reg, bodies["connz"], server_id)
    if "gatewayz" in bodies:
        gatewayz(reg, bodies["gatewayz"], server_id)
    if "leafz" in bodies:
        leafz(reg, bodies["leafz"], server_id)
    if "healthz" in bodies:
        healthz(reg, bodies["healthz"], server_id)
    if "jsz" in bodies:
        jsz(reg, bodies["jsz"], server_id, server_name)
    return reg


def as_json(obj: Any) -> Any:
    """The endpoint's dict as its JSON text decodes (what a scraper of the JSON endpoint would see)."""
    from rillet.gocompat.gojson import dumps
    return json.loads(dumps(obj))


def gather(server: Any, monitor: Any) -> dict[str, Any]:
    """The JSON bodies of this server's endpoints, built as the endpoints build them (default queries)."""
    from rillet.monitor import endpoints
    from rillet.monitor.conns import ConnzOptions
    from rillet.monitor.conns import connz as connz_body
    from rillet.monitor.varz import varz as varz_body
    bodies: dict[str, Any] = {
        "varz": as_json(varz_body(server, monitor.http_req_stats, monitor.cpu)),
        "connz": as_json(connz_body(server, ConnzOptions.from_query({}))),
        "routez": as_json(endpoints.routez(server, {})),
        "subsz": as_json(endpoints.subsz(server, {})),
        "gatewayz": as_json(endpoints.gatewayz(server, {})),
        "leafz": as_json(endpoints.leafz(server, {})),
        "jsz": as_json(endpoints.jsz(server, JSZ_QUERY)),
    }
    _code, health = endpoints.healthz(server, endpoints.healthz_options({}))
    bodies["healthz"] = as_json(health)
    return bodies


def render(server: Any, monitor: Any) -> str:
    return from_endpoints(gather(server, monitor), server.server_id, server.name).render()

