"""The ``cluster {}`` block of a config file: routes between the servers of one cluster.

What nats-server accepts is accepted here with its defaults and errors; what Rillet's routes do not do yet
is refused with file:line:col and the reason, never parsed and ignored:

* in ``tls {}``: what only the client port's block takes; (``verify_and_map`` and
  ``verify_cert_and_check_known_urls`` work: a route authorized by its certificate, rillet.cluster.conn);
* (``pool_size`` and ``accounts``, route pooling and pinned-account routes, ``permissions { import,
  export }`` and ``write_timeout`` work as in nats-server: rillet.cluster.cluster, rillet.cluster.route);
* (``compression``: s2 as nats-server, negotiated per route: rillet.compression; the mode is
  checked here with nats-server's errors, at the key's file:line:col.)
"""
from __future__ import annotations

from typing import Any, Callable
from urllib.parse import urlsplit

from rillet.config.options import ClusterOptions

from .typed import Field


def write_timeout_policy(f: Field) -> str:
    """A ``write_timeout`` (what a connection past its write deadline gets, nats-server 2.11): "close",
    "retry", or "" for "default" (the connection kind's own: close for clients, retry for the others)."""
    v = f.as_str().lower()
    if v not in ("default", "close", "retry"):
        raise f.error("write_timeout must be 'default', 'close' or 'retry'")
    return "" if v == "default" else v

ROUTE_MAX_PING_INTERVAL = 30.0  # seconds: nats-server's cap for routes


def parse_cluster(b: Any, f: Field) -> None:
    """Fill ``b.o.cluster`` from the cluster map ``f`` (``b``: the config builder)."""
    if not isinstance(f.value, dict):
        raise f.error(f"Expected map to define cluster, got {type(f.value).__name__}")
    cl: ClusterOptions = b.o.cluster
    s = b.setter
    target = lambda: cl  # noqa: E731

    def name(sub: Field) -> None:
        value = sub.as_str()
        if " " in value:
            raise sub.error("cluster name cannot contain spaces")
        cl.name = value

    def listen(sub: Field) -> None:
        cl.host, cl.port = b.host_port(sub)

    def authorization(sub: Field) -> None:
        auth = b.parse_link_authorization(sub, "Cluster")
        perms = auth.get("permissions")
        if perms is not None:
            check_route_permissions(perms, sub)
            b.warnings.append(sub.error('setting "permissions" within cluster authorization block is deprecated'))
            if cl.permissions is None:  # (the cluster block's own permissions take precedence)
                cl.permissions = _route_permissions(perms)
        cl.username = auth.get("user", "")
        cl.password = auth.get("pass", "")
        cl.auth_timeout = auth.get("timeout", 0.0)

    def routes(sub: Field) -> None:
        if not isinstance(sub.value, list):
            raise sub.wrong_type("an array of route URLs")
        seen: set[str] = set()
        out: list[str] = []
        for item in sub.items():
            if not isinstance(item.value, str):
                raise item.error(f"routes: expected strings in the array, got {item.value!r}")
            u = item.value.strip()
            if u in seen:
                b.warnings.append(item.error("Duplicate route entry detected"))
                continue
            seen.add(u)
            check_route_url(u, item)
            out.append(u)
        cl.routes = out

    def tls(sub: Field) -> None:
        # (verify_and_map and verify_cert_and_check_known_urls: a route authorized by its certificate,
        # rillet.cluster.conn._authorized)
        t = b.parse_tls(sub, client_side=False, where="cluster")
        t.source = sub.pos
        cl.tls = t

    def permissions(sub: Field) -> None:
        perms = b.parse_permissions(sub)
        if perms.response is not None:
            raise sub.error("Cluster permissions do not support dynamic responses")
        check_route_permissions(perms, sub)
        cl.permissions = _route_permissions(perms)

    def pool_size(sub: Field) -> None:
        cl.pool_size = sub.as_int()
        if cl.pool_size < 0 and cl.accounts:
            raise sub.error("pool_size cannot be negative if pinned accounts are specified")

    def accounts(sub: Field) -> None:
        names = sub.as_str_list("accounts")
        for i, n in enumerate(names):
            if n in names[:i]:
                raise sub.error(f'found duplicate account name "{n}" in pinned accounts list '
                                f'[{" ".join(names)}]')
        if cl.pool_size < 0 and names:
            raise sub.error("pool_size cannot be negative if pinned accounts are specified")
        cl.accounts = names

    def compression(sub: Field) -> None:
        from rillet.compression import ROUTE_ON
        from rillet.config.compression import parse_compression
        c = parse_compression(sub, ROUTE_ON)
        cl.compression, cl.compression_rtts = c.mode, c.rtt_thresholds

    def ping_interval(sub: Field) -> None:
        d = sub.as_duration(b.warnings)
        if d > ROUTE_MAX_PING_INTERVAL:
            b.warnings.append(sub.error("Cluster 'ping_interval' will reset to 30s which is the max for routes"))
        cl.ping_interval = d

    def write_timeout(sub: Field) -> None:
        cl.write_timeout = write_timeout_policy(sub)

    table: dict[str, Callable[[Field], None]] = {
        "name": name,
        **b.listener_keys(target, listen, authorization, tls),
        "routes": routes,
        "cluster_advertise": s("advertise", "str", target=target),
        **b.typed_keys(target, no_advertise="bool", connect_retries="int", connect_backoff="bool", ping_max="int",
                       write_deadline="duration"),
        "pool_size": pool_size,
        "accounts": accounts,
        "compression": compression,
        "permissions": permissions,
        "ping_interval": ping_interval,
        "write_timeout": write_timeout,
    }
    b.each(f, table, "cluster")


def _route_permissions(perms: Any) -> Any:
    """import -> publish, export -> subscribe (nats-server's RoutePermissions); nothing else is kept."""
    from rillet.config.options import Permissions
    return Permissions(publish=perms.publish, subscribe=perms.subscribe)


def check_route_permissions(perms: Any, f: Field) -> None:
    """nats-server's checks of the cluster permission subjects (queue-qualified subjects are refused in
    import, accepted in export), with its error texts."""
    from rillet.subjects.validate import is_valid_subject as subject_is_valid
    for what, p, queue_ok in (("import", perms.publish, False), ("export", perms.subscribe, True)):
        if p is None:
            continue
        for kind, subjects in (("allow", p.allow), ("deny", p.deny)):
            for subj in subjects or ():
                if subject_is_valid(subj):
                    continue
                parts = subj.split()
                if not queue_ok or len(parts) != 2:
                    raise f.error(f'cluster {what} {kind}: subject "{subj}" is not a valid subject')
                if not subject_is_valid(parts[0]):
                    raise f.error(f'cluster {what} {kind}: subject "{parts[0]}" is not a valid subject')
                if not subject_is_valid(parts[1]):
                    raise f.error(f'cluster {what} {kind}: queue "{parts[1]}" is not a valid queue')


def check_route_url(u: str, f: Field | None = None) -> None:
    """A route URL as nats-server reads it: [scheme://][user:pass@]host:port."""
    try:
        parts = urlsplit(u)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        parts = None
    if parts is None or not parts.hostname:
        msg = f'error parsing route url ["{u}"]'
        if f is None:
            raise ValueError(msg)
        raise f.error(msg)
