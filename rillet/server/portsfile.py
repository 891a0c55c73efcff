"""``--ports_file_dir``: the ports file nats-server writes once it listens, and removes when it stops.

The file is ``<program>_<pid>.ports`` in that directory, one line of compact JSON (no newline at the end) with
the keys nats-server 2.15 writes, in its order, each present only when that listener runs: ``nats`` (``tls``
scheme when TLS is required), ``monitoring`` (``http`` / ``https``), ``cluster`` (``tls`` with cluster TLS),
``websocket`` (``ws`` / ``wss``). nats-server has no key for leaf node, gateway or MQTT ports, so neither has
Rillet. Each key lists URLs: a listener on a wildcard host (``0.0.0.0``, ``::``, none) is listed once per
address of every network interface, loopback, IPv6 and link-local ones included, in the kernel's order
(interface by interface, IPv4 before IPv6), as Go's ``net.Interfaces``/``Addrs`` give them; a listener on
an address or host name is listed at the address it is bound to.

``<program>`` is nats-server's ``filepath.Base(os.Args[0])``: ``nats-server`` for a ``nats-server`` link or
script that runs Rillet, ``rillet-server`` for that console script. Run as ``python -m rillet.server``
(``argv[0]`` is then a ``.py`` file), the name is ``nats-server``: the one client test harnesses (nats.js's
``nats-server_<pid>.ports``) look for.
"""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import struct
import sys
from typing import Any

from rillet.server.listen import WILDCARD_HOSTS, hostport

# netlink (linux/rtnetlink.h, linux/netlink.h, linux/if_addr.h)
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_RTM_NEWADDR = 20
_RTM_GETADDR = 22
_IFA_ADDRESS = 1
_IFA_LOCAL = 2


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _netlink_addresses() -> list[tuple[int, str]]:
    """(interface index, address) of every interface address, in the order of the kernel's RTM_GETADDR dump."""
    out: list[tuple[int, str]] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as s:  # type: ignore[attr-defined]
        s.bind((0, 0))
        seq = 1
        payload = struct.pack("=BBBBI", socket.AF_UNSPEC, 0, 0, 0, 0)  # struct ifaddrmsg
        s.send(struct.pack("=IHHII", 16 + len(payload), _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0)
               + payload)
        while True:
            data = s.recv(1 << 16)
            off = 0
            while off + 16 <= len(data):
                mlen, mtype, _flags, mseq, _pid = struct.unpack_from("=IHHII", data, off)
                if mlen < 16:
                    return out
                if mseq == seq:
                    if mtype == _NLMSG_DONE:
                        return out
                    if mtype == _NLMSG_ERROR:
                        err = struct.unpack_from("=i", data, off + 16)[0]
                        raise OSError(-err, os.strerror(-err))
                    if mtype == _RTM_NEWADDR:
                        family, _plen, _fl, _scope, index = struct.unpack_from("=BBBBI", data, off + 16)
                        attrs: dict[int, bytes] = {}
                        a = off + 16 + 8
                        end = off + mlen
                        while a + 4 <= end:
                            alen, atype = struct.unpack_from("=HH", data, a)
                            if alen < 4:
                                break
                            attrs.setdefault(atype, data[a + 4:a + alen])
                            a += _align4(alen)
                        # as Go: the local address of a point-to-point link, else the address
                        raw = attrs.get(_IFA_LOCAL) or attrs.get(_IFA_ADDRESS)
                        if raw is not None and family == socket.AF_INET and len(raw) >= 4:
                            out.append((index, str(ipaddress.IPv4Address(raw[:4]))))
                        elif raw is not None and family == socket.AF_INET6 and len(raw) >= 16:
                            out.append((index, str(ipaddress.IPv6Address(raw[:16]))))
                off += _align4(mlen)


def interface_addresses() -> list[str]:
    """Every address of every network interface, grouped by interface (in index order), each interface's in
    the kernel's order: what nats-server lists for a listener on a wildcard host."""
    try:
        pairs = _netlink_addresses()
    except (AttributeError, OSError):
        # no netlink (not Linux): the loopback addresses and the host name's addresses
        addrs = ["127.0.0.1"] + (["::1"] if socket.has_ipv6 else [])
        try:
            for info in socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM):
                if info[4][0] not in addrs:
                    addrs.append(str(info[4][0]))
        except OSError:
            pass
        return addrs
    order = sorted({i for i, _ in pairs})
    return [addr for idx in order for i, addr in pairs if i == idx]


def _bound_address(host: str) -> str:
    """The address a listener on ``host`` is bound to (rillet.server.listen: a host name's first IPv4
    address, or its first address), as Go's listener reports it."""
    try:
        return str(ipaddress.ip_address(host.strip("[]").split("%")[0]))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return host
    v4 = [i for i in infos if i[0] == socket.AF_INET]
    chosen = (v4 or infos)[0][4][0] if infos else host
    return str(ipaddress.ip_address(chosen.split("%")[0]))


def listener_urls(scheme: str, host: str, port: int) -> list[str]:
    """The URLs nats-server writes for a listener on ``host``:``port``."""
    if host in WILDCARD_HOSTS:
        return [f"{scheme}://{hostport(a, port)}" for a in interface_addresses()]
    return [f"{scheme}://{hostport(_bound_address(host), port)}"]


def ports_info(server: Any) -> dict[str, list[str]]:
    """nats-server's Ports of a running server (only the listeners that run)."""
    o = server.opts
    ports: dict[str, list[str]] = {}
    if server.addr[1]:
        scheme = "tls" if o.tls is not None and o.tls_required else "nats"
        ports["nats"] = listener_urls(scheme, server.addr[0], server.addr[1])
    mon: list[str] = []
    if server.http_addr:
        mon += listener_urls("http", *server.http_addr)
    if server.https_addr:
        mon += listener_urls("https", *server.https_addr)
    if mon:
        ports["monitoring"] = mon
    cluster = server.cluster
    if cluster is not None and getattr(cluster, "addr", ("", 0))[1]:
        scheme = "tls" if o.cluster.tls is not None else "nats"
        ports["cluster"] = listener_urls(scheme, *cluster.addr)
    if server.websocket_addr:
        ws = o.websocket
        scheme = "ws" if ws.no_tls or ws.tls is None else "wss"
        ports["websocket"] = listener_urls(scheme, *server.websocket_addr)
    return ports


def program_name() -> str:
    """nats-server's ``filepath.Base(os.Args[0])``; ``nats-server`` when Rillet runs as a Python module."""
    name = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "")
    if not name or name == "-c" or name.endswith(".py"):
        return "nats-server"
    return name


def ports_file_path(directory: str) -> str:
    return os.path.join(directory, f"{program_name()}_{os.getpid()}.ports")


def write_ports_file(server: Any, directory: str) -> str:
    """Write the ports file (as Go's json.Marshal: compact, no newline); returns its path."""
    path = ports_file_path(directory)
    data = json.dumps(ports_info(server), separators=(",", ":"))
    with open(path, "w") as f:
        f.write(data)
    return path
