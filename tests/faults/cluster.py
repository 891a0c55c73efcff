"""A 3-server JetStream cluster of subprocesses (``rillet-server`` or Go's ``nats-server``), each server in
its own network namespace, and the network faults the nemesis makes.

The namespaces, veth pairs and bridge are ``scripts/cluster_faults.py``'s ``Netns`` (imported from there,
not copied). On top of it, :class:`Lab` cuts single links between two servers: a blackhole route for the
peer's address inside each of the two namespaces (this kernel has no iptables and no tc actions; a
blackhole route drops every packet the server sends to that peer, so with one on each side nothing
passes either way, while clients, on the host side of the bridge, still reach both servers - the Jepsen
set-up, where partitions are between the database nodes). ``link_down`` takes a server's veth down
instead, cutting it from its clients too.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cluster_faults_module():
    """scripts/cluster_faults.py (the core-NATS fault script), loaded by path for its Netns."""
    name = "cluster_faults"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "scripts", "cluster_faults.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(k: int) -> list[int]:
    """``k`` distinct free ports (free_port alone can give one twice: a run's server had its monitoring and
    cluster ports the same, and died with "address already in use")."""
    out: list[int] = []
    while len(out) < k:
        p = free_port()
        if p not in out:
            out.append(p)
    return out


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


class Lab:
    """Network namespaces for ``n`` servers with single-link cuts. ``up()`` raises OSError when namespaces
    are not permitted here."""

    def __init__(self, n: int) -> None:
        self.net = _cluster_faults_module().Netns(n)
        self.n = n
        self.ns = self.net.ns
        self.ips = self.net.ips
        self.cut_pairs: set[tuple[int, int]] = set()
        self.links_down: set[int] = set()

    def up(self) -> None:
        try:
            self.net.up()
        except OSError:
            self.net.down()
            raise

    def _route(self, verb: str, i: int, j: int) -> None:
        self.net.ip("-n", self.ns[i], "route", verb, "blackhole", f"{self.ips[j]}/32")

    def cut(self, i: int, j: int) -> None:
        a, b = min(i, j), max(i, j)
        if (a, b) in self.cut_pairs:
            return
        self._route("add", a, b)
        self._route("add", b, a)
        self.cut_pairs.add((a, b))

    def mend(self, i: int, j: int) -> None:
        a, b = min(i, j), max(i, j)
        if (a, b) not in self.cut_pairs:
            return
        self._route("del", a, b)
        self._route("del", b, a)
        self.cut_pairs.discard((a, b))

    def isolate(self, i: int) -> None:
        for j in range(self.n):
            if j != i:
                self.cut(i, j)

    def link_down(self, i: int) -> None:
        self.net.cut(i)
        self.links_down.add(i)

    def link_up(self, i: int) -> None:
        self.net.heal(i)
        self.links_down.discard(i)

    def heal_all(self) -> None:
        for a, b in sorted(self.cut_pairs):
            self.mend(a, b)
        for i in sorted(self.links_down):
            self.link_up(i)

    def describe(self) -> str:
        parts = [f"n{a}-x-n{b}" for a, b in sorted(self.cut_pairs)] + [f"n{i} link down" for i in sorted(self.links_down)]
        return ", ".join(parts) or "none"

    def down(self) -> None:
        self.net.down()


def server_command(kind: str) -> list[str]:
    if kind == "go":
        exe = shutil.which("nats-server")
        if exe is None:
            raise OSError("nats-server is not on PATH")
        return [exe]
    if kind == "rillet":
        return [sys.executable, "-m", "rillet.server"]
    raise ValueError(f"unknown server kind {kind!r} (rillet or go)")


# A mixed cluster (Go and Rillet servers in one JetStream cluster, docs/mixed-clusters.md) needs a system account
# and a JetStream account of its own: the clients of the run connect as this user of account A.
MIXED_USER = ("a", "a")
MIXED_ACCOUNTS = ('accounts {\n  SYS { users: [ { user: sys, password: sys } ] }\n'
                  f'  A {{ jetstream: enabled, users: [ {{ user: {MIXED_USER[0]}, password: {MIXED_USER[1]} }} ] }}\n}}\n'
                  'system_account: SYS\n')
# the mixes by name (--server mixed1 / mixed2): n0 first
MIXES = {"mixed1": ("go", "rillet", "rillet"), "mixed2": ("go", "go", "rillet")}


def parse_kinds(server: str, n: int = 3) -> tuple[str, ...]:
    """The kind of each server: ``rillet``/``go`` (all alike), ``mixed1`` (1 Go + 2 Rillet), ``mixed2`` (2 Go + 1
    Rillet), or a comma-separated list of ``n`` kinds (``go,rillet,go``)."""
    if server in MIXES:
        kinds = MIXES[server]
    elif "," in server:
        kinds = tuple(k.strip() for k in server.split(","))
    else:
        kinds = (server,) * n
    if len(kinds) != n or any(k not in ("rillet", "go") for k in kinds):
        raise ValueError(f"server kinds {server!r}: {n} of rillet or go wanted")
    return kinds


class Node:
    """One JetStream server of the cluster, as a subprocess started from a config file. ``mixed``: a cluster of
    both kinds; Rillet then runs as a member of nats-server's JetStream cluster (``rillet_go_meta`` and
    ``rillet_go_meta_lead``: it follows and leads the meta and stream groups), both kinds with the accounts above."""

    def __init__(self, i: int, kind: str, hosts: list[str], ports: list[tuple[int, int, int]], netns: str,
                 tmp: str, sync: str = "always", pythonpath: str = "", mixed: bool = False,
                 go_debug: bool = False) -> None:
        self.i, self.kind, self.name = i, kind, f"n{i}"
        self.mixed = mixed
        self.pythonpath = pythonpath
        self.host, self.netns = hosts[i], netns
        self.port, self.cport, self.http = ports[i]
        self.store = os.path.join(tmp, f"{self.name}-store")
        self.conf = os.path.join(tmp, f"{self.name}.conf")
        self.logfile = os.path.join(tmp, f"{self.name}.log")
        routes = ", ".join(f'"nats-route://{hosts[j]}:{ports[j][1]}"' for j in range(len(ports)) if j != i)
        sync_line = "  sync_interval: always\n" if sync == "always" else ""
        js_block = f'jetstream {{\n  store_dir: "{self.store}"\n{sync_line}}}\n'
        extra = "debug: true\n" if go_debug and kind == "go" else ""  # (--go-debug: nats-server's debug lines)
        if mixed:
            extra += MIXED_ACCOUNTS
            if kind == "rillet":
                # (JetStream of its own off: the server is a member of the Go servers' JetStream cluster)
                js_block = f'jetstream {{\n  enabled: false\n  store_dir: "{self.store}"\n{sync_line}}}\n'
                extra += "feature_flags { rillet_go_meta: true, rillet_go_meta_lead: true }\n"
        with open(self.conf, "w") as f:
            f.write(f'server_name: "{self.name}"\nlisten: "{self.host}:{self.port}"\nhttp: "{self.host}:{self.http}"\n'
                    f'{extra}{js_block}'
                    f'cluster {{\n  name: "jsfaults"\n  listen: "{self.host}:{self.cport}"\n  routes: [{routes}]\n}}\n')
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.starts = 0
        self.fs: Any = None  # a tests.faults.lazyfs.Mounted under the store (the "power" nemesis)
        self.cuts = 0

    @property
    def url(self) -> str:
        if self.mixed:
            return f"nats://{MIXED_USER[0]}:{MIXED_USER[1]}@{self.host}:{self.port}"
        return f"nats://{self.host}:{self.port}"

    @property
    def label(self) -> str:
        """``n0(go)``: the name and the kind, for reports."""
        return f"{self.name}({self.kind})"

    def start(self) -> None:
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        with open(self.logfile, "a") as out:
            out.write(f"==== start {self.starts} at {time.strftime('%H:%M:%S')}\n")
            out.flush()
            env = None
            if self.pythonpath:
                env = dict(os.environ, PYTHONPATH=self.pythonpath + os.pathsep + os.environ.get("PYTHONPATH", ""))
            if self.fs is not None:
                # (an emulated power cut is a new boot: Rillet's RAFT groups recover after an unclean stop only
                # when the machine restarted since, rillet.jetstream.cluster.group.boot_id)
                env = dict(env or os.environ, RILLET_BOOT_ID=f"{self.name}-boot{self.cuts}")
            # (cwd: the run's directory; `python -m` puts the cwd first on sys.path, so from a checkout the
            # servers would import its rillet and not the --rillet-src one)
            self.proc = subprocess.Popen(prefix + server_command(self.kind) + ["-c", self.conf],
                                         stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=os.path.dirname(self.conf))
        self.starts += 1
        self.paused = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.paused = False

    def wipe(self) -> None:
        """The server is stopped (SIGKILL) and its store directory deleted: it comes back empty."""
        self.kill()
        if self.fs is not None:
            raise RuntimeError(f"{self.name}: wipe under lazyfs is not supported")
        shutil.rmtree(self.store, ignore_errors=True)

    def power_cut(self) -> None:
        """The machine loses power: the process dies (SIGKILL) and what its store had not fsynced is gone."""
        if self.fs is None:
            raise RuntimeError(f"{self.name}: no lazyfs under the store (power cuts need --nemesis power)")
        self.kill()
        self.fs.cut()
        self.cuts += 1

    def pause(self) -> None:
        if self.alive() and not self.paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.alive() and self.paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.alive():
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def http_json(self, path: str, timeout: float = 2.0) -> Any:
        return json.loads(urllib.request.urlopen(f"http://{self.host}:{self.http}{path}", timeout=timeout).read())

    def jsz_streams(self) -> dict[str, dict] | None:
        """Stream name -> {"state": ..., "consumers": set of names} as this server holds them (/jsz), or None
        when it does not answer."""
        try:
            z = self.http_json("/jsz?accounts=true&streams=true&consumers=true&config=true")
        except (OSError, ValueError):
            return None
        out: dict[str, dict] = {}
        for acc in z.get("account_details") or []:
            for sd in acc.get("stream_detail") or []:
                # nats-server's StreamDetail has "name" and, with consumers=true, "consumer_detail"; a
                # server that leaves them out gets the name from the config and consumers None (unknown)
                name = sd.get("name") or (sd.get("config") or {}).get("name", "?")
                cons = sd.get("consumer_detail")
                out[name] = {"state": sd.get("state") or {},
                             "consumers": None if cons is None and "consumer_detail" not in sd and
                             (sd.get("state") or {}).get("consumer_count") else
                             {c["name"] for c in cons or []},
                             "cluster": sd.get("cluster") or {}}
        return out


class Cluster:
    """Three (``n``) servers in namespaces (``lab``) or on 127.0.0.1 (``lab`` None); ``kind`` as
    :func:`parse_kinds` takes it (one kind, or a mix of Go and Rillet servers)."""

    def __init__(self, kind: str, tmp: str, lab: Lab | None, n: int = 3, sync: str = "always",
                 pythonpath: str = "", lazyfs: bool = False, go_debug: bool = False) -> None:
        self.kind, self.tmp, self.lab = kind, tmp, lab
        self.kinds = parse_kinds(kind, n)
        self.mixed = len(set(self.kinds)) > 1
        hosts = lab.ips if lab else ["127.0.0.1"] * n
        flat = free_ports(3 * n)
        ports = [(flat[3 * i], flat[3 * i + 1], flat[3 * i + 2]) for i in range(n)]
        self.nodes = [Node(i, self.kinds[i], hosts, ports, lab.ns[i] if lab else "", tmp, sync, pythonpath,
                           mixed=self.mixed, go_debug=go_debug)
                      for i in range(n)]
        if lazyfs:  # every store on a filesystem that loses what was not fsynced at a power cut
            from .lazyfs import Mounted
            for node in self.nodes:
                node.fs = Mounted(os.path.join(tmp, f"{node.name}-lazyfs"), node.store)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def describe(self) -> str:
        """``n0(go) n1(rillet) n2(rillet)``"""
        return " ".join(n.label for n in self.nodes)

    def urls_from(self, i: int) -> list[str]:
        """Every server's URL, server ``i`` first (a client prefers it and fails over to the others)."""
        u = self.urls
        i %= len(u)
        return u[i:] + u[:i]

    def by_name(self, name: str) -> Node | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def start(self) -> None:
        for n in self.nodes:
            n.start()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
        for n in self.nodes:
            if n.fs is not None:
                n.fs.close()
                n.fs = None

    def heal_processes(self) -> list[str]:
        """Resume paused servers and start dead ones; returns what was done."""
        done = []
        for n in self.nodes:
            if n.paused:
                n.resume()
                done.append(f"SIGCONT {n.name}")
            if not n.alive():
                n.start()
                done.append(f"restart {n.name}")
        return done
