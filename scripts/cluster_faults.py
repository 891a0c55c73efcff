#!/usr/bin/env python3
"""Fault workload for a 3-server Rillet cluster: publish load while servers are killed, paused and cut off.

    python scripts/cluster_faults.py --quick        # ~40 s, one fault of each kind (CI runs this)
    python scripts/cluster_faults.py                # 5 minutes of random faults (--duration, --seed)

Three Rillet servers run as subprocesses (each in its own network namespace with a veth on a shared
bridge when ``ip netns`` is permitted, so that partitions can be made; else on 127.0.0.1 without
partitions). One nats-py subscriber prefers each server (given all the cluster's URLs, so it fails over);
one publisher sends sequence-numbered messages at a steady pace the whole time. The faults: SIGKILL and
restart, SIGSTOP and SIGCONT, and a partition (the server's link taken down, then up).

Between faults the script waits until the cluster has healed (full mesh in every server's /routez, every
client connected, and a marker message published after the heal reached every subscriber); the messages
published from then until the next fault form a "steady window", and must all reach every subscriber.
Core NATS is at-most-once, so messages published while a fault is in force may be lost; none may ever
arrive twice at one subscriber. The exit status is 1 when a steady-window message was lost or any
message was duplicated (or the cluster did not heal in time), else 0.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import nats

SUBJECT = "faults.load"
HEAL_TIMEOUT = 30.0
# route connections between two servers (the configs set no pool_size): nats-server's default pool of 3
# (rillet.cluster.route_urls.DEFAULT_ROUTE_POOL_SIZE) and the route pinned to the system account
ROUTES_PER_PEER = 3 + 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


# ---- network namespaces -------------------------------------------------------------------------------------

class Netns:
    """One namespace per server, each joined to a bridge here by a veth pair (host side ``host_if[i]``)."""

    def __init__(self, n: int) -> None:
        tag = f"{os.getpid() % 10000}"
        sub = f"10.{225 + os.getpid() % 25}.{(os.getpid() // 25) % 250}"  # (the tests use 10.200-224)
        self.bridge = f"rfb{tag}"
        self.ns = [f"rillet-cfw-{tag}-{i}" for i in range(n)]
        self.host_if = [f"rfh{tag}x{i}" for i in range(n)]
        self.ips = [f"{sub}.{i + 1}" for i in range(n)]
        self._bridge_ip = f"{sub}.254/24"
        self._undo: list[list[str]] = []

    @staticmethod
    def ip(*args: str) -> None:
        r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise OSError(f"ip {' '.join(args)}: {r.stderr.strip()}")

    def up(self) -> None:
        self.ip("link", "add", self.bridge, "type", "bridge")
        self._undo.append(["link", "del", self.bridge])
        self.ip("addr", "add", self._bridge_ip, "dev", self.bridge)
        self.ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.ns):
            self.ip("netns", "add", ns)
            self._undo.append(["netns", "del", ns])
            self.ip("-n", ns, "link", "set", "lo", "up")
            self.ip("link", "add", self.host_if[i], "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._undo.append(["link", "del", self.host_if[i]])
            self.ip("link", "set", self.host_if[i], "master", self.bridge)
            self.ip("link", "set", self.host_if[i], "up")
            self.ip("-n", ns, "addr", "add", f"{self.ips[i]}/24", "dev", "eth0")
            self.ip("-n", ns, "link", "set", "eth0", "up")

    def cut(self, i: int) -> None:
        self.ip("link", "set", self.host_if[i], "down")

    def heal(self, i: int) -> None:
        self.ip("link", "set", self.host_if[i], "up")

    def down(self) -> None:
        for cmd in reversed(self._undo):
            try:
                self.ip(*cmd)
            except OSError as e:
                log(f"cleanup: {e}")
        self._undo.clear()


# ---- servers -----------------------------------------------------------------------------------------------

class Node:
    def __init__(self, i: int, host: str, ports: list[tuple[int, int, int]], hosts: list[str], netns: str,
                 tmp: str) -> None:
        self.i, self.name, self.host, self.netns = i, f"n{i}", host, netns
        self.port, self.cport, self.http = ports[i]
        routes = ", ".join(f'"nats-route://{hosts[j]}:{ports[j][1]}"' for j in range(len(ports)))
        self.conf = os.path.join(tmp, f"{self.name}.conf")
        self.logfile = os.path.join(tmp, f"{self.name}.log")
        with open(self.conf, "w") as f:
            f.write(f'server_name: "{self.name}"\nlisten: "{host}:{self.port}"\nhttp: "{host}:{self.http}"\n'
                    f'cluster {{\n  name: "faults"\n  listen: "{host}:{self.cport}"\n  routes: [{routes}]\n'
                    f'  ping_interval: "250ms"\n  ping_max: 2\n}}\n')
        self.proc: subprocess.Popen | None = None
        self.paused = False

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self) -> None:
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        out = open(self.logfile, "a")
        self.proc = subprocess.Popen(prefix + [sys.executable, "-m", "rillet.server", "-c", self.conf],
                                     stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.alive():
            if self.paused:
                self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def route_ids(self) -> dict[str, tuple[int, ...]] | None:
        """remote server name -> the ids of its route connections (pool and pinned), from /routez (None: no
        answer)."""
        try:
            z = json.loads(urllib.request.urlopen(f"http://{self.host}:{self.http}/routez", timeout=0.5).read())
        except (OSError, ValueError):
            return None
        out: dict[str, list[int]] = {}
        for r in z["routes"]:
            out.setdefault(r.get("remote_name", ""), []).append(r["rid"])
        return {k: tuple(sorted(v)) for k, v in out.items()}

    def routes(self) -> set[str] | None:
        ids = self.route_ids()
        return None if ids is None else set(ids)


# ---- clients -----------------------------------------------------------------------------------------------

class Subscriber:
    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: set[int] = set()
        self.dups = 0
        self.markers: set[int] = set()
        self.nc = None

    async def start(self, urls: list[str]) -> None:
        self.nc = await nats.connect(servers=urls, dont_randomize=True, reconnect_time_wait=0.2,
                                     max_reconnect_attempts=-1, connect_timeout=1, ping_interval=2,
                                     max_outstanding_pings=2, name=self.name,
                                     error_cb=self._quiet, disconnected_cb=self._quiet)

        async def cb(m) -> None:
            d = m.data
            if d[:1] == b"m":
                self.markers.add(int(d[1:]))
                return
            s = int(d)
            if s in self.seen:
                self.dups += 1
            else:
                self.seen.add(s)
        await self.nc.subscribe(SUBJECT, cb=cb)
        await self.nc.flush()

    async def _quiet(self, *a) -> None:
        return None

    @property
    def ok(self) -> bool:
        return self.nc is not None and self.nc.is_connected


class Workload:
    def __init__(self, nodes: list[Node], netns: Netns | None, rate: int, rng: random.Random) -> None:
        self.nodes = nodes
        self.netns = netns
        self.rate = rate
        self.rng = rng
        self.subs = [Subscriber(f"sub-{n.name}") for n in nodes]
        self.pub = None
        self.seq = 0
        self.steady: list[tuple[int, int]] = []  # [first, last] seqs of each steady window
        self.faults: list[str] = []
        self.failures: list[str] = []
        self._stop = asyncio.Event()
        self._marker = 0

    async def connect(self) -> None:
        urls = [n.url for n in self.nodes]
        for i, s in enumerate(self.subs):
            await s.start(urls[i:] + urls[:i])
        self.pub = await nats.connect(servers=urls, dont_randomize=True, reconnect_time_wait=0.2,
                                      max_reconnect_attempts=-1, connect_timeout=1, name="publisher",
                                      error_cb=self.subs[0]._quiet)

    async def publish_loop(self) -> None:
        """``rate`` messages a second, in batches of 10, for as long as the run lasts."""
        interval = 10 / self.rate
        nxt = time.monotonic()
        while not self._stop.is_set():
            for _ in range(10):
                self.seq += 1
                try:
                    await self.pub.publish(SUBJECT, b"%d" % self.seq)
                except Exception as e:  # (nats-py raises while reconnecting with a full buffer)
                    log(f"publish {self.seq} failed: {e!r}")
            nxt += interval
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))

    async def healed(self, timeout: float = HEAL_TIMEOUT) -> bool:
        """Full mesh (every server with its whole pool and $SYS route to every other one, and no duplicate
        route), every client connected, and a marker published now reached every subscriber."""
        t0 = time.monotonic()
        names = {n.name for n in self.nodes}

        def mesh() -> list | None:
            ids = [n.route_ids() for n in self.nodes]
            if all(x is not None and set(x) == names - {n.name} and
                   all(len(rids) == ROUTES_PER_PEER for rids in x.values()) for x, n in zip(ids, self.nodes)):
                return ids
            return None
        while time.monotonic() - t0 < timeout:
            before = mesh()
            if before is not None and self.pub.is_connected and all(s.ok for s in self.subs):
                # the same route connections a second later: a server that was paused may still list
                # routes its peers have already closed
                await asyncio.sleep(1.0)
                if mesh() == before:
                    break
                continue
            await asyncio.sleep(0.1)
        else:
            self.failures.append(f"no full mesh within {timeout:.0f}s: "
                                 f"{[sorted(n.routes() or ()) for n in self.nodes]}")
            return False
        while time.monotonic() - t0 < timeout:
            self._marker += 1
            k = self._marker
            await self.pub.publish(SUBJECT, b"m%d" % k)
            for _ in range(10):
                if all(k in s.markers for s in self.subs):
                    log(f"healed in {time.monotonic() - t0:.1f}s")
                    return True
                await asyncio.sleep(0.02)
        self.failures.append(f"markers did not reach every subscriber within {timeout:.0f}s")
        return False

    async def steady_window(self, seconds: float) -> None:
        first = self.seq + 1
        await asyncio.sleep(seconds)
        last = self.seq
        await self.pub.flush(5)
        want = set(range(first, last + 1))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5 and not all(want <= s.seen for s in self.subs):
            await asyncio.sleep(0.05)
        self.steady.append((first, last))
        missing = [len(want - s.seen) for s in self.subs]
        log(f"steady window {first}..{last}: missing per subscriber {missing}")

    # faults

    async def kill(self, i: int, down: float) -> None:
        self.faults.append(f"SIGKILL n{i} for {down:.1f}s")
        log(self.faults[-1])
        self.nodes[i].kill()
        await asyncio.sleep(down)
        self.nodes[i].start()

    async def pause(self, i: int, down: float) -> None:
        self.faults.append(f"SIGSTOP n{i} for {down:.1f}s")
        log(self.faults[-1])
        self.nodes[i].pause()
        await asyncio.sleep(down)
        self.nodes[i].resume()

    async def partition(self, i: int, down: float) -> None:
        assert self.netns is not None
        self.faults.append(f"partition n{i} for {down:.1f}s")
        log(self.faults[-1])
        self.netns.cut(i)
        await asyncio.sleep(down)
        self.netns.heal(i)

    def busy_server(self) -> int:
        """A server that some client (a subscriber or the publisher) is connected to now (clients that
        failed over stay where they went, so a random target would often hit a server nobody uses)."""
        ports = {n.port: n.i for n in self.nodes}
        used = [ports.get(nc.connected_url.port) for nc in [s.nc for s in self.subs] + [self.pub]
                if nc is not None and nc.connected_url is not None]
        return self.rng.choice([i for i in used if i is not None] or [0, 1, 2])

    def kinds(self) -> list[str]:
        return ["kill", "pause"] + (["partition"] if self.netns is not None else [])

    async def run(self, plan: list[tuple[str, int, float]], steady: float) -> None:
        task = asyncio.ensure_future(self.publish_loop())
        try:
            if not await self.healed():
                return
            await self.steady_window(steady)
            for kind, i, down in plan:
                if i < 0:
                    i = self.busy_server()
                await getattr(self, kind)(i, down)
                if not await self.healed():
                    return
                await self.steady_window(steady)
        finally:
            self._stop.set()
            await task
            with contextlib.suppress(Exception):
                await self.pub.flush(5)
            await asyncio.sleep(0.5)

    def report(self) -> int:
        published = self.seq
        in_steady = set()
        for a, b in self.steady:
            in_steady.update(range(a, b + 1))
        lost_steady = [len(in_steady - s.seen) for s in self.subs]
        dups = [s.dups for s in self.subs]
        print()
        print("faults injected:", "; ".join(self.faults) or "none")
        print(f"published: {published} ({len(in_steady)} in {len(self.steady)} steady windows, "
              f"{published - len(in_steady)} while a fault was in force or healing)")
        for s, ls in zip(self.subs, lost_steady):
            print(f"  {s.name}: delivered {len(s.seen)}, lost while all servers up {ls}, "
                  f"lost during faults {published - len(s.seen) - ls}, duplicated {s.dups}")
        print(f"lost while all servers up: {sum(lost_steady)}")
        print(f"duplicated: {sum(dups)}")
        bad = list(self.failures)
        if sum(lost_steady):
            bad.append(f"{sum(lost_steady)} messages lost while all servers were up")
        if sum(dups):
            bad.append(f"{sum(dups)} messages delivered twice")
        if not self.steady:
            bad.append("no steady window completed")
        print("RESULT:", "FAIL - " + "; ".join(bad) if bad else "OK")
        return 1 if bad else 0


def make_plan(args: argparse.Namespace, kinds: list[str], rng: random.Random) -> list[tuple[str, int, float]]:
    if args.quick:
        # one of each kind, on different servers; the publisher's preferred server (n0) killed last
        # (n1's subscriber fails over to n2, so the pause and the partition of n2 hit two subscribers)
        plan = [("kill", 1, 2.0), ("pause", 2, 2.0)]
        if "partition" in kinds:
            plan.append(("partition", 2, 2.0))
        plan.append(("kill", 0, 1.5))
        return plan
    plan = []
    t = 0.0
    while t < args.duration:
        kind = rng.choice(kinds)
        down = round(rng.uniform(0.5, 5.0), 1)
        plan.append((kind, -1, down))  # (-1: a server that clients use, chosen when the fault comes)
        t += down + args.steady + 3.0
    return plan


async def amain(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    netns = None
    if not args.no_netns and shutil.which("ip"):
        netns = Netns(3)
        try:
            netns.up()
        except OSError as e:
            log(f"network namespaces not permitted ({e}); running on 127.0.0.1 without partitions")
            netns.down()
            netns = None
    tmp = tempfile.mkdtemp(prefix="rillet-cluster-faults-")
    hosts = netns.ips if netns else ["127.0.0.1"] * 3
    flat: list[int] = []
    while len(flat) < 9:  # (distinct: free_port alone can give one twice)
        p = free_port()
        if p not in flat:
            flat.append(p)
    ports = [(flat[3 * i], flat[3 * i + 1], flat[3 * i + 2]) for i in range(3)]
    nodes = [Node(i, hosts[i], ports, hosts, netns.ns[i] if netns else "", tmp) for i in range(3)]
    w = Workload(nodes, netns, args.rate, rng)
    plan = make_plan(args, w.kinds(), rng)
    log(f"servers {[n.url for n in nodes]}, logs in {tmp}; plan: {plan}")
    code = 1
    try:
        for n in nodes:
            n.start()
        deadline = time.monotonic() + 20
        while not all(n.routes() is not None for n in nodes):
            if time.monotonic() > deadline or not all(n.alive() for n in nodes):
                log("servers did not start")
                return 1
            await asyncio.sleep(0.1)
        await w.connect()
        await w.run(plan, args.steady)
        code = w.report()
    finally:
        for s in w.subs:
            if s.nc is not None:
                with contextlib.suppress(Exception):
                    await s.nc.close()
        if w.pub is not None:
            with contextlib.suppress(Exception):
                await w.pub.close()
        for n in nodes:
            n.stop()
        if netns is not None:
            netns.down()
        if code == 0 and not args.keep_logs:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log(f"server logs kept in {tmp}")
    return code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one fault of each kind (~40 s)")
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of random faults (without --quick)")
    ap.add_argument("--steady", type=float, default=3.0, help="seconds of each steady window")
    ap.add_argument("--rate", type=int, default=2000, help="messages published per second")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random fault plan")
    ap.add_argument("--no-netns", action="store_true", help="run on 127.0.0.1, no partitions")
    ap.add_argument("--keep-logs", action="store_true", help="keep the servers' logs after a good run")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    log(f"seed {args.seed}")

    def on_term(*_a) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()
