"""Route URLs and names: parsing ``cluster { routes }`` URLs as nats-server does, the accounts pinned to
dedicated routes, and the addresses a server advertises when it listens on every interface.
"""
from __future__ import annotations

import asyncio
import random
import socket
import struct
import sys
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from rillet.cluster import info as ci
from rillet.server.listen import hostport

# pool_size left unset (or 0): a pool of 3 connections per server, as nats-server (DEFAULT_ROUTE_POOL_SIZE);
# -1: no pooling (one connection per server, nothing pinned)
DEFAULT_ROUTE_POOL_SIZE = 3


class RouteURL(NamedTuple):
    host: str
    port: int
    user: str = ""
    password: str = ""

    @property
    def key(self) -> tuple[str, int]:
        return (self.host.lower(), self.port)

    def redacted(self) -> str:
        auth = f"{self.user}:xxxxx@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"nats-route://{auth}{host}:{self.port}"


def parse_route_url(text: str) -> RouteURL:
    t = text.strip()
    if "://" not in t:
        t = "nats-route://" + t
    parts = urlsplit(t)
    port = parts.port
    if not parts.hostname or port is None:
        raise ValueError(f'error parsing route url ["{text}"]')
    return RouteURL(parts.hostname, port, unquote(parts.username or ""), unquote(parts.password or ""))


def pinned_names(o: Any) -> list[str]:
    """The accounts with dedicated routes under options ``o``: the configured ``accounts`` and the system
    account, when pooling is on (nats-server adds the system account unless pool_size is negative)."""
    ps = o.cluster.pool_size or DEFAULT_ROUTE_POOL_SIZE
    if ps < 1:
        return []
    names = list(o.cluster.accounts)
    sys_name = o.system_account or ("" if o.no_system_account else "$SYS")
    if sys_name and sys_name not in names:
        names.append(sys_name)
    return names


def _subject_permission(p: Any) -> ci.SubjectPermission | None:
    if p is None:
        return None
    return ci.SubjectPermission(allow=list(p.allow) if p.allow is not None else None,
                                deny=list(p.deny) if p.deny is not None else None)


def _dynamic_name() -> str:
    """A generated cluster name (nats-server uses a NUID): 22 characters of [0-9A-Za-z]."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(random.SystemRandom().choice(alphabet) for _ in range(22))


def global_unicast_ips() -> list[str]:
    """The host's global unicast addresses, as nats-server lists them for a server listening on any
    address (0.0.0.0 or ::). Linux: IPv4 from each interface (SIOCGIFADDR), IPv6 from /proc/net/if_inet6."""
    import ipaddress
    out: list[str] = []
    if sys.platform.startswith("linux"):
        import fcntl
        for _, name in socket.if_nameindex():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    r = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                except OSError:
                    continue
            out.append(socket.inet_ntoa(r[20:24]))
        try:
            with open("/proc/net/if_inet6") as f:
                for line in f:
                    h = line.split()[0]
                    out.append(str(ipaddress.IPv6Address(bytes.fromhex(h))))
        except OSError:
            pass
    good = []
    for a in out:
        ip = ipaddress.ip_address(a)
        if not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified) and a not in good:
            good.append(a)
    return good


def _dial_error(url: RouteURL, e: BaseException) -> str:
    where = hostport(url.host, url.port)
    if isinstance(e, ConnectionRefusedError):
        return f"dial tcp {where}: connect: connection refused"
    if isinstance(e, asyncio.TimeoutError):
        return f"dial tcp {where}: i/o timeout"
    return f"dial tcp {where}: {getattr(e, 'strerror', None) or e}"
