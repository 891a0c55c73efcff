"""/connz: open and recently closed client connections.

``closed_conn_info`` is called by the server when a client goes away; what it returns is kept in
``server.closed_clients`` (a ring buffer of ``ClosedClient(info)``) and shown by ``/connz?state=closed``.
The dict holds the public /connz fields plus private ``_``-prefixed keys (subscriptions, user, account,
sort keys) that are filled into the answer only when the query asks for them.
"""
from __future__ import annotations

import time
from typing import Any

from rillet.gocompat.gotime import format_time, local_offset, unix_ns
from rillet.gocompat.monitorfmt import (
    QueryError,
    parse_bool,
    parse_int,
    parse_uint,
    put_set,
    rtt_string,
    uptime,
)

GLOBAL_ACCOUNT = "$G"
DEFAULT_CONN_LIST_SIZE = 1024

OPEN, CLOSED, ANY = 0, 1, 2

SORT_OPTIONS = ("cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to", "bytes_from",
                "last", "idle", "uptime", "stop", "reason", "rtt")

_PING = b"PING\r\n"


def conn_type(c: Any) -> str:
    t = getattr(c, "conn_type", "STANDARD")
    return "websocket" if t == "WEBSOCKET" else "mqtt" if t in ("MQTT", "MQTT_WS") else "nats"


def raw_auth_user(c: Any) -> str:
    """The user a connection authenticated as: nkey, user name, or ``[REDACTED]`` for a token."""
    o = c.opts
    if o.nkey:
        return o.nkey
    if o.user:
        return o.user
    if o.jwt:
        return c.user or ""
    if o.auth_token:
        return "[REDACTED]"
    return c.user or ""


def pending_bytes(c: Any) -> int:
    n = len(c.out)
    t = c.transport
    if t is not None:
        try:
            n += t.get_write_buffer_size()
        except Exception:
            pass
    return n


def sub_detail(sub: Any, with_account: bool) -> dict:
    """One subscription as /connz (``with_account=False``) or /subsz and closed connections show it."""
    d: dict[str, Any] = {}
    c = sub.client
    if with_account:
        acc = c.account.name if getattr(c, "account", None) is not None else ""
        if acc:
            d["account"] = acc
            d["account_tag"] = acc
    d["subject"] = sub.subject
    if sub.queue:
        d["qgroup"] = sub.queue
    sid = sub.sid
    d["sid"] = sid.decode("utf-8", "replace") if isinstance(sid, (bytes, bytearray)) else str(sid)
    d["msgs"] = sub.nm
    if sub.max:
        d["max"] = sub.max
    d["cid"] = c.cid
    return d


def _maybe_measure_rtt(c: Any) -> None:
    """Like nats-server: a connection with no RTT yet gets a PING now, so the next look has one."""
    if c.rtt or c.closed or not c.opts.lang or not c.connect_received:
        return
    if getattr(c, "_rtt_start", 1.0):  # a PING is already out (or the client cannot be probed)
        return
    if c.transport is None:
        return
    try:
        c._rtt_start = time.monotonic()
        c.out += _PING
        c.flush()
        c.server.flush_clients()
    except Exception:
        pass


def _base_info(c: Any) -> dict:
    """The fields that come before ``stop``/``reason`` in nats-server's ConnInfo."""
    start_ns = unix_ns(c.start_time)
    last_ns = unix_ns(c.last_activity or c.start_time)
    info: dict[str, Any] = {
        "cid": c.cid,
        "kind": "Client",
        "type": conn_type(c),
        "ip": c.host if c.port else "",
        "port": c.port or 0,
        "start": format_time(start_ns, local_offset(start_ns)),
        "last_activity": format_time(last_ns, local_offset(last_ns)),
    }
    return info


def _fill_rest(info: dict, c: Any, now_ns: int, rtt_s: str, nsubs: int) -> None:
    start_ns = unix_ns(c.start_time)
    last_ns = unix_ns(c.last_activity or c.start_time)
    info["rtt"] = rtt_s
    info["uptime"] = uptime((now_ns - start_ns) / 1e9)
    info["idle"] = uptime((now_ns - last_ns) / 1e9)
    info["pending_bytes"] = pending_bytes(c)
    info["in_msgs"] = c.in_msgs
    info["out_msgs"] = c.out_msgs
    info["in_bytes"] = c.in_bytes
    info["out_bytes"] = c.out_bytes
    stalls = getattr(c, "stalls", 0)
    if stalls:
        info["stalls"] = stalls
    info["subscriptions"] = nsubs
    put_set(info, c.opts, "name", "lang", "version")
    if c.tls_version:
        info["tls_version"] = _tls_version_name(c.tls_version)
    if c.tls_cipher:
        info["tls_cipher_suite"] = c.tls_cipher


def _tls_version_name(v: str) -> str:
    # Python says "TLSv1.3"; nats-server says "1.3"
    return v[4:] if v.startswith("TLSv") else v


EAGER_DETAILS = 1000  # closed connections with more subscriptions keep them and make the details on demand


def closed_conn_info(server: Any, c: Any) -> dict:
    """The /connz entry of a connection that has just closed (``stop`` and ``reason`` set)."""
    stop_t = c.stop_time or time.time()
    stop_ns = unix_ns(stop_t)
    rtt_s, rtt_ns = rtt_string(c.rtt)
    info = _base_info(c)
    info["stop"] = format_time(stop_ns, local_offset(stop_ns))
    info["reason"] = c.close_reason or "Client Closed"
    subs = list(c.subs.values())
    _fill_rest(info, c, stop_ns, rtt_s, len(subs))
    acc = c.account.name if getattr(c, "account", None) is not None else GLOBAL_ACCOUNT
    mon = getattr(server, "monitor", None)
    if mon is not None:
        mon.add_closed_totals(acc, c)
    # (a connection with many subscriptions keeps them as they are, made into details only when /connz asks:
    # 100,000 details built at the close would hold the loop ~0.1 s)
    info["_subs"] = [sub_detail(s, True) for s in subs] if len(subs) <= EAGER_DETAILS else subs
    info["_user"] = raw_auth_user(c)
    info["_acc"] = acc
    info["_mqtt"] = ""
    info["_proxy"] = getattr(c, "proxy_key", "")
    info["_sort"] = _sort_keys(c, rtt_ns, stop_ns)
    return info


def _sort_keys(c: Any, rtt_ns: int, stop_ns: int = 0) -> tuple:
    # cid, start, last, stop, rtt (nanoseconds)
    return (c.cid, unix_ns(c.start_time), unix_ns(c.last_activity or c.start_time), stop_ns, rtt_ns)


class ConnzOptions:
    __slots__ = ("sort", "auth", "subs", "subs_detail", "offset", "limit", "cid", "state", "user", "acc",
                 "mqtt_client")

    def __init__(self) -> None:
        self.sort = ""
        self.auth = False
        self.subs = False
        self.subs_detail = False
        self.offset = 0
        self.limit = 0
        self.cid = 0
        self.state = OPEN
        self.user = ""
        self.acc = ""
        self.mqtt_client = ""

    @classmethod
    def from_query(cls, q: Any) -> "ConnzOptions":
        """Parse the query string in nats-server's order, with its error messages."""
        o = cls()
        o.sort = q.get("sort", "")
        o.auth = parse_bool(q, "auth")
        o.subs_detail, o.subs = decode_subs(q)
        o.offset = parse_int(q, "offset")
        o.limit = parse_int(q, "limit")
        o.cid = parse_uint(q, "cid")
        o.state = decode_state(q)
        o.user = q.get("user", "")
        o.acc = q.get("acc", "")
        o.mqtt_client = q.get("mqtt_client", "")
        return o


def decode_subs(q: Any) -> tuple[bool, bool]:
    """``subs=detail`` or a boolean: returns (detail, plain)."""
    if q.get("subs", "").lower() == "detail":
        return True, False
    return False, parse_bool(q, "subs")


def decode_state(q: Any) -> int:
    s = q.get("state", "")
    if s == "":
        return OPEN
    ls = s.lower()
    if ls == "open":
        return OPEN
    if ls == "closed":
        return CLOSED
    if ls in ("any", "all"):
        return ANY
    raise QueryError(f"Error decoding state for {s}")


def connz(server: Any, opts: ConnzOptions | None = None) -> dict:
    o = opts or ConnzOptions()
    sort_opt = o.sort or "cid"
    if sort_opt not in SORT_OPTIONS:
        raise QueryError(f"invalid sorting option: {sort_opt}")
    offset = max(o.offset, 0)
    limit = o.limit if o.limit > 0 else DEFAULT_CONN_LIST_SIZE
    state = o.state
    if sort_opt == "stop" and state != CLOSED:
        raise QueryError("sort by stop only valid on closed connections")
    if sort_opt == "reason" and state != CLOSED:
        raise QueryError("sort by reason only valid on closed connections")
    cid = o.cid
    if cid > 0:
        limit = 1
    acc, user, mqtt = o.acc, o.user, o.mqtt_client
    now_ns = time.time_ns()
    result: dict[str, Any] = {
        "server_id": server.server_id,
        "now": format_time(now_ns),
        "num_connections": 0,
        "total": 0,
        "offset": offset,
        "limit": limit,
        "connections": [],
    }

    clist = dict(server.clients)
    ms = getattr(server, "mqtt", None)
    if ms is not None:  # MQTT connections (rillet.mqtt), listed with the clients as nats-server does
        clist.update(ms.open_conns())
    if acc:
        if acc not in server.accounts:
            return result
        # the connection's bound account decides (account client sets may lag a late account bind)
        clist = {cid: c for cid, c in clist.items() if c.account.name == acc}

    closed: list[dict] = []
    total = 0
    if state in (OPEN, ANY):
        total += len(clist)
    if state in (CLOSED, ANY):
        closed = [cc.info for cc in list(server.closed_clients)]
        if acc:
            closed = [ci for ci in closed if ci.get("_acc") == acc]
        total += len(closed)
    result["total"] = total

    open_clients: list[Any] = []
    if cid > 0:
        if state in (OPEN, ANY):
            c = server.clients.get(cid)
            if c is not None:
                open_clients.append(c)
                closed = []
        if not open_clients and state in (CLOSED, ANY):
            closed = [ci for ci in closed if ci.get("cid") == cid][:1]
    elif state in (OPEN, ANY):
        for c in clist.values():
            if acc and c.account.name != acc:
                continue
            if user and raw_auth_user(c) != user:
                continue
            if mqtt and getattr(c, "client_id", None) != mqtt:
                continue
            open_clients.append(c)

    entries: list[tuple[dict, tuple, dict | None]] = []  # (info, sort keys, closed record or None)
    for c in open_clients:
        rtt_s, rtt_ns = rtt_string(c.rtt)
        _maybe_measure_rtt(c)
        info = _base_info(c)
        subs = list(c.subs.values())
        _fill_rest(info, c, now_ns, rtt_s, len(subs))
        if subs:
            if o.subs_detail:
                info["subscriptions_list_detail"] = [sub_detail(s, False) for s in subs]
            elif o.subs:
                info["subscriptions_list"] = [s.subject for s in subs]
        if o.auth:
            u = raw_auth_user(c)
            if u:
                info["authorized_user"] = u
            name = c.account.name
            if name != GLOBAL_ACCOUNT:
                info["account"] = name
            ju = getattr(c, "jwt_user", None)  # operator mode (rillet.server.operator)
            if ju is not None:
                if not ju.bearer:
                    info["jwt"] = ju.jwt  # (a bearer token is a credential: not shown)
                info["issuer_key"] = ju.issuer
            op = getattr(c.server, "operator", None)
            info["name_tag"] = op.name_tag(name) if op is not None else name
            if ju is not None and (ju.claims.get("nats") or {}).get("tags"):
                info["tags"] = ju.claims["nats"]["tags"]
        mc = getattr(c, "client_id", "") if getattr(c, "conn_type", "") in ("MQTT", "MQTT_WS") else ""
        if mc:
            info["mqtt_client"] = mc
        pk = getattr(c, "proxy_key", "")
        if pk:  # (proxies { trusted }: the proxy this client came through)
            info["proxy"] = {"key": pk}
        entries.append((info, _sort_keys(c, rtt_ns), None))

    for ci in closed:
        if user and ci.get("_user") != user:
            continue
        if mqtt and ci.get("_mqtt") != mqtt:
            continue
        info = {k: v for k, v in ci.items() if not k.startswith("_")}
        subs = ci.get("_subs") or []
        if subs and not isinstance(subs[0], dict):
            subs = ci["_subs"] = [sub_detail(s, True) for s in subs]
        if subs:
            if o.subs_detail:
                info["subscriptions_list_detail"] = subs
            elif o.subs:
                info["subscriptions_list"] = [s["subject"] for s in subs]
        if o.auth:
            if ci.get("_user"):
                info["authorized_user"] = ci["_user"]
            a_name = ci.get("_acc", "")
            if a_name and a_name != GLOBAL_ACCOUNT:
                info["account"] = a_name
                info["name_tag"] = a_name
        if ci.get("_mqtt"):
            info["mqtt_client"] = ci["_mqtt"]
        if ci.get("_proxy"):
            info["proxy"] = {"key": ci["_proxy"]}
        entries.append((info, ci.get("_sort", (ci.get("cid", 0), 0, 0, 0, 0)), ci))

    _sort(entries, sort_opt, now_ns)
    lo = min(offset, len(entries))
    hi = lo + min(limit, len(entries) - lo)
    conns = [e[0] for e in entries[lo:hi]]
    result["connections"] = conns
    result["num_connections"] = len(conns)
    return result


# sort options that order by a field of the connection's info, largest first
_SORT_FIELDS = {"subs": "subscriptions", "pending": "pending_bytes", "msgs_to": "out_msgs", "msgs_from": "in_msgs",
                "bytes_to": "out_bytes", "bytes_from": "in_bytes"}


def _sort(entries: list, by: str, now_ns: int) -> None:
    field = _SORT_FIELDS.get(by)
    if by in ("cid", "start"):
        entries.sort(key=lambda e: e[1][0])
    elif field is not None:
        entries.sort(key=lambda e: e[0][field], reverse=True)
    elif by == "last":
        entries.sort(key=lambda e: e[1][2], reverse=True)
    elif by == "idle":
        entries.sort(key=lambda e: now_ns - e[1][2], reverse=True)
    elif by == "uptime":
        # ascending, like nats-server; a closed connection's uptime ends at its stop time
        entries.sort(key=lambda e: (e[1][3] or now_ns) - e[1][1])
    elif by == "stop":
        entries.sort(key=lambda e: e[1][3], reverse=True)
    elif by == "reason":
        entries.sort(key=lambda e: e[0].get("reason", ""))
    elif by == "rtt":
        entries.sort(key=lambda e: e[1][4], reverse=True)
