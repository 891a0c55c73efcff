"""The ``gateway {}`` block of a config file: the gateways of a super-cluster (rillet.cluster.gateway).

Keys, defaults and errors as nats-server's opts.go (parseGateway, parseGateways) and gateway.go
(validateGatewayOptions). ``tls {}`` in the block (the listener, and every outbound connection whose remote
has no ``tls`` of its own) and in a remote (its outbound connections) as nats-server's getTLSConfig: the
peer's certificate is always required and verified; ``verify_and_map`` and ``verify_cert_and_check_known_urls``
authorize an inbound gateway by its certificate (rillet.cluster.conn). What Rillet's gateways do not do is refused
with file:line:col and the reason, never parsed and ignored.

The raw map stays in ``Options.gateway`` (what /varz and /gatewayz show of the configuration); the checked
settings are ``Options.gateway_opts``, a ``GatewayOptions``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from rillet.gocompat.goquote import go_type

from .cluster_section import write_timeout_policy
from .errors import ConfigError
from .typed import Field

ERR_NAME_HAS_SPACES = "gateway name cannot contain spaces"


@dataclass
class RemoteGateway:
    name: str = ""
    urls: list[str] = field(default_factory=list)  # as written, with a scheme added when missing
    tls: Any = None  # TLSConfig of the remote's tls {} (its outbound connections), else the block's
    tls_timeout: float = 0.0  # the remote's tls timeout when written (else the block's, as nats-server)


@dataclass
class GatewayOptions:
    name: str = ""
    host: str = ""
    port: int = 0
    advertise: str = ""
    username: str = ""
    password: str = ""
    auth_timeout: float = 0.0
    connect_retries: int = 0
    connect_backoff: bool = False
    reject_unknown: bool = False
    write_deadline: float = 0.0  # seconds; 0: the server's write_deadline
    write_timeout: str = ""  # "" (default: retry), "close" or "retry"
    tls: Any = None  # TLSConfig of the block's tls {}: the listener and the remotes without their own
    tls_timeout: float = 0.0  # the block's tls timeout when written (nats-server's Gateway.TLSTimeout)
    gateways: list[RemoteGateway] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return bool(self.name) and self.port != 0


def _tls(b: Any, f: Field) -> Any:
    """A gateway (or remote gateway) tls {} block (verify_and_map, verify_cert_and_check_known_urls: a gateway
    authorized by its certificate, rillet.cluster.conn._authorized)."""
    t = b.parse_tls(f, client_side=False, where="gateway")
    t.source = f.pos
    return t


def check_gateway_url(text: str, f: Field) -> str:
    """A gateway URL as nats-server's parseURL reads it; the URL, with nats:// added when it has no scheme."""
    u = text.strip()
    if "://" not in u:
        u = "nats://" + u
    try:
        parts = urlsplit(u)
        port = parts.port
    except ValueError as e:
        raise f.error(f'error parsing gateway url "{text}": {e}') from None
    if not parts.hostname:
        raise f.error(f'error parsing gateway url "{text}": missing host')
    return u


def parse_gateway(b: Any, f: Field) -> None:
    """Fill ``b.o.gateway`` (raw) and ``b.o.gateway_opts`` from the gateway map ``f`` (``b``: the builder)."""
    g = b.o.gateway_opts = b.open_block(f, "Expected gateway to be a map", "gateway", GatewayOptions())
    target = lambda: g  # noqa: E731

    def name(sub: Field) -> None:
        v = sub.as_str()
        if " " in v:
            raise sub.error(ERR_NAME_HAS_SPACES)
        g.name = v

    def listen(sub: Field) -> None:
        g.host, g.port = b.host_port(sub)

    def authorization(sub: Field) -> None:
        auth = b.parse_link_authorization(sub, "Gateway")
        if auth.get("permissions") is not None:
            raise sub.error("gateway permissions are not supported: a gateway authorization's permissions would "
                            "have no effect (nats-server parses and ignores them); remove them")
        g.username = auth.get("user", "")
        g.password = auth.get("pass", "")
        g.auth_timeout = auth.get("timeout", 0.0)

    def tls(sub: Field) -> None:
        g.tls = _tls(b, sub)
        if isinstance(sub.value, dict) and any(k.lower() == "timeout" for k in sub.value):
            g.tls_timeout = g.tls.timeout

    def write_timeout(sub: Field) -> None:
        g.write_timeout = write_timeout_policy(sub)

    def gateways(sub: Field) -> None:
        if not isinstance(sub.value, list):  # (nats-server gives this one without a position)
            pos = sub.pos
            raise ConfigError(pos.file if pos else "<string>", pos.line if pos else 0, pos.column if pos else 0,
                              f"Expected gateways field to be an array, got {go_type(sub.value)}", located=False)
        out: list[RemoteGateway] = []
        for item in sub.items():
            if not isinstance(item.value, dict):
                b.errors.append(item.error(f"Expected gateway entry to be a map/struct, got {item.value}"))
                continue
            r = RemoteGateway()

            def rname(e: Field, r: RemoteGateway = r) -> None:
                r.name = e.as_str()

            def url(e: Field, r: RemoteGateway = r) -> None:
                r.urls.append(check_gateway_url(e.as_str(), e))

            def urls(e: Field, r: RemoteGateway = r) -> None:
                if not isinstance(e.value, list):
                    raise e.not_go_type("[]interface {}")
                lst = []
                for u in e.items():
                    lst.append(check_gateway_url(u.as_str(), u))
                r.urls = lst

            def rtls(e: Field, r: RemoteGateway = r) -> None:
                r.tls = _tls(b, e)
                if isinstance(e.value, dict) and any(k.lower() == "timeout" for k in e.value):
                    r.tls_timeout = r.tls.timeout

            b.each(item, {"name": rname, "url": url, "urls": urls, "tls": rtls}, "gateway.gateways")
            out.append(r)
        g.gateways = out

    def reject_unknown(sub: Field) -> None:
        g.reject_unknown = sub.as_bool()

    table: dict[str, Callable[[Field], None]] = {
        "name": name,
        **b.listener_keys(target, listen, authorization, tls),
        **b.typed_keys(target, connect_retries="int", connect_backoff="bool", write_deadline="duration"),
        "gateways": gateways,
        "reject_unknown": reject_unknown,
        "reject_unknown_cluster": reject_unknown,
        "write_timeout": write_timeout,
    }
    b.each(f, table, "gateway")


def validate_gateway(g: GatewayOptions) -> str:
    """nats-server's validateGatewayOptions, checked when the server starts (not with -t, as nats-server):
    the error text, or "" when the block is valid (or unset)."""
    if not g.name and g.port == 0:
        return ""
    if not g.name:
        return "gateway has no name"
    if " " in g.name:
        return ERR_NAME_HAS_SPACES
    if g.port == 0:
        return f'gateway "{g.name}" has no port specified (select -1 for random port)'
    for i, r in enumerate(g.gateways):
        if not r.name:
            return f"gateway in the list {i} has no name"
        if not r.urls:
            return f'gateway "{r.name}" has no URL'
    return ""
