#!/usr/bin/env python3
"""The virtual-stream walk-through under network partitions between regions, checked for exactly-once.

    python scripts/vstream_faults.py                    # 3 regions x 3 Rillet servers, R3 (~1 min)
    python scripts/vstream_faults.py --server go        # the same topology of Go nats-servers
    python scripts/vstream_faults.py --quick            # CI: the same, fewer messages, no phase 4
    python scripts/vstream_faults.py --rolling 60 --seed 2   # then 60 s of changing cuts under load
    python scripts/vstream_faults.py --quick --per-region 1   # 3 regions x 1 server, R1 (~35 s)
    python scripts/vstream_faults.py --quick --ordering       # the ordering variant (~40 s)

Topology: regions ``west``, ``central``, ``east``, each a cluster (named after the region) of 3 servers
(``--per-region``), the clusters joined by gateways; every server runs in its own network namespace on one
bridge (``scripts/cluster_faults.py``'s ``Netns``; cuts are ``tests/faults/cluster.py``'s ``Lab``: a
blackhole route for the peer's address on both sides, as this kernel has neither iptables nor tc actions).
A partition between two regions cuts every server pair across them, so the gateways, the meta group's
RAFT traffic and the read streams' source consumers across them all stop; clients, on the host side of
the bridge, still reach every server, so each region keeps taking writes in its own write stream (its
RAFT group is inside the region). The virtual stream ``foo`` is made by ``rillet vstream create`` (R3,
placed by cluster; the mappings file from ``rillet.cli.vstream``), the servers, configs and helpers are
``examples/vstream/walkthrough.py``'s, put in namespaces. Servers ping every 1 s (``ping_interval``,
``ping_max: 3``) so that a cut gateway is noticed in seconds, not minutes (nats-server's default is 2 min,
15 s on gateways).

Phases, each publishing ``--msgs`` messages in every region at once (synchronous JetStream publishes with a
``Nats-Msg-Id``, retried a few times on no answer; an acknowledged message is recorded):

1. baseline, everything connected;
2. isolate: the region holding the meta leader (``--ordering``: ``foo-order``'s leader) is cut from the
   other two; publish; heal;
3. split brain: west cut from central+east, publish on both sides; the cut moves to west+central | east
   (central changes sides), publish again; heal;
4. (not with ``--quick``) three ways: every region cut from both others; publish; heal;
5. (``--ordering``) region down: the region holding the ordering stream's leader is killed whole (its
   servers and its stretch server, SIGKILL; every server runs with ``sync_interval: always``), the other
   regions publish, it is started again;
6. (``--rolling SECONDS``) publishers in every region the whole time while the cuts
   change every 1.5-4 s (seeded by ``--seed``): a region isolated, two against one, three ways, one server
   cut from everyone (its region's streams may change leader), a moment healed; then heal.

``--ordering``: a fourth cluster ``stretch`` of one server per region (in that region's network
position, so a cut between regions cuts it too) holds the ordering stream ``foo-order`` (R3, ``rillet
vstream create --ordering stretch --ordering-replicas 3``); every server is tagged ``region:<r>`` and
runs with ``unique_tag: "region:"``, so ``foo-order`` has one replica per region and the regional streams
are R1 (``--per-region`` defaults to 1); each read stream mirrors ``foo-order``.

After each heal (or restart) the script waits until every write stream holds at least what it
acknowledged and every read stream (and ``foo-order``) holds as many messages as the write streams
together, asking every stream's STREAM.INFO again each round (the deadline: ``--deadline``, 60 s for
Rillet, 180 s for Go, whose sources retry with a long back-off), and prints the time from the heal and the
stale answers it saw on the way: an answer from a member of a group without a leader (as nats-server, such
a member answers with its own state, e.g. a server still cut off or not yet reached by the new leader)
never counts. At the end every write and read stream is read in full (an ordered consumer, until nothing
is pending) and checked: each acknowledged message exactly once in its region's write stream and in every
read stream (order may differ; with ``--ordering`` every read stream in ``foo-order``'s order), nothing that
was never published, unacknowledged ones at most once. The exit status is 0 only when every check passed
and every phase converged in time.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import nats  # noqa: E402

from rillet.cli.vstream import order_name, read_name, write_name  # noqa: E402
from tests.faults.cluster import Lab as NetLab  # noqa: E402


def _load(name: str, rel: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, rel))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


wt = _load("vstream_walkthrough", "examples/vstream/walkthrough.py")
REGIONS: list[str] = wt.REGIONS
NAME: str = wt.NAME
STRETCH = "stretch"  # (--ordering: the cluster of one server per region holding the ordering stream)
say = wt.say


# ---- the topology: the walk-through's servers, each in a network namespace -----------------------------------

class NsServer(wt.Server):
    """A walk-through server listening on its namespace's address, with a monitoring port, its cluster
    (the region, or e.g. ``stretch``) and server tags."""

    def __init__(self, region: str, i: int, d: str, cmd: list[str], host: str, netns: str,
                 cluster: str = "", tags: tuple[str, ...] = (), name: str = "") -> None:
        super().__init__(region, i, d, cmd)
        if name:
            self.name = name
            self.dir = os.path.join(d, name)
            os.makedirs(self.dir, exist_ok=True)
            self.conf = os.path.join(d, f"{name}.conf")
        self.host, self.netns = host, netns
        self.cluster = cluster or region
        self.tags = tags
        # every server has its own namespace, so its own ports: the usual ones (ports picked one by one as
        # "free" on 127.0.0.1 could come out twice, and a server then failed to listen)
        self.port, self.rport, self.gport, self.hport = 4222, 6222, 7222, 8222

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def write_conf(self, servers: list["NsServer"], sync_always: bool, unique_tag: str = "") -> None:
        routes = ", ".join(f"nats-route://{s.host}:{s.rport}" for s in servers if s.cluster == self.cluster)
        clusters = list(dict.fromkeys(s.cluster for s in servers))
        gws = ", ".join("{name: %s, urls: [%s]}" % (c, ", ".join(f"nats://{s.host}:{s.gport}" for s in servers
                                                                   if s.cluster == c)) for c in clusters)
        js = f'  store_dir: "{self.dir}"\n'
        if sync_always:
            js += "  sync_interval: always\n"
        if unique_tag:
            js += f"  unique_tag: {json.dumps(unique_tag)}\n"
        tags = ("server_tags: [%s]\n" % ", ".join(json.dumps(t) for t in self.tags)) if self.tags else ""
        with open(self.conf, "w") as f:
            f.write(f"server_name: {self.name}\nlisten: {self.host}:{self.port}\nhttp: {self.host}:{self.hport}\n"
                    f'ping_interval: "1s"\nping_max: 3\n{tags}'
                    f"jetstream {{\n{js}}}\n"
                    f"cluster {{\n  name: {self.cluster}\n  listen: {self.host}:{self.rport}\n"
                    f"  routes: [{routes}]\n}}\n"
                    f"gateway {{\n  name: {self.cluster}\n  listen: {self.host}:{self.gport}\n  gateways: [{gws}]\n}}\n"
                    f'mappings {{ include "{NAME}.mappings.conf" }}\n')

    def start(self) -> None:
        # (the walk-through's start, run inside the namespace)
        cmd = self.cmd
        self.cmd = ["ip", "netns", "exec", self.netns] + cmd
        try:
            super().start()
        finally:
            self.cmd = cmd

    def http_json(self, path: str, timeout: float = 2.0) -> Any:
        return json.loads(urllib.request.urlopen(f"http://{self.host}:{self.hport}{path}", timeout=timeout).read())


class VLab(wt.Lab):
    """The walk-through's lab (``wt.Lab``: start/stop by region, connect, the CLI) with its servers in
    network namespaces and region-to-region cuts. ``per_region`` servers per region; ``extra`` more
    servers (cluster, region, tags) after them, e.g. a stretch cluster."""

    def __init__(self, d: str, kind: str, per_region: int = 3, extra: tuple[tuple[str, str, tuple], ...] = (),
                 kill: bool = False, unique_tag: str = "") -> None:
        super().__init__(d, kind == "go", kill)  # (writes the mappings file; its 127.0.0.1 servers are replaced)
        self.kind = kind
        n = len(REGIONS) * per_region + len(extra)
        self.net = NetLab(n)
        self.net.up()
        cmd = ["nats-server"] if kind == "go" else [sys.executable, "-m", "rillet.server"]
        servers: list[NsServer] = []
        for r in REGIONS:
            for i in range(1, per_region + 1):
                k = len(servers)
                # (with unique_tag every server needs the tag: its region's)
                servers.append(NsServer(r, i, d, cmd, self.net.ips[k], self.net.ns[k],
                                        tags=(f"{unique_tag}{r}",) if unique_tag else ()))
        for cluster, region, tags in extra:
            k = len(servers)
            servers.append(NsServer(region, 0, d, cmd, self.net.ips[k], self.net.ns[k], cluster=cluster,
                                    tags=tags, name=f"{cluster}-{region}"))
        self.servers = servers
        for s in servers:
            s.write_conf(servers, sync_always=kill, unique_tag=unique_tag)

    def region(self, r: str) -> list[NsServer]:
        # (the region's own cluster only: the stretch servers are placed in regions but are not in them)
        return [s for s in self.servers if s.region == r and s.cluster == r]

    def start(self, regions: list[str]) -> None:
        for s in self.servers:
            if s.region in regions or s.cluster in regions:
                s.start()

    def stop(self, regions: list[str]) -> None:
        for s in self.servers:
            if s.region in regions or s.cluster in regions:
                s.stop(self.kill)

    def cluster_urls(self, cluster: str, region: str = "") -> list[str]:
        """The URLs of a cluster's servers, the one in ``region`` first."""
        ss = [s for s in self.servers if s.cluster == cluster]
        ss.sort(key=lambda s: s.region != region)
        return [s.url for s in ss]

    # -- partitions between regions (every server pair across them; a stretch server is in its region)
    def _index(self, pred) -> list[int]:
        return [k for k, s in enumerate(self.servers) if pred(s)]

    def partition(self, *sides: list[str]) -> None:
        """Cut between every two of ``sides`` (lists of regions); regions on no side stay connected to all."""
        for a in range(len(sides)):
            for b in range(a + 1, len(sides)):
                for i in self._index(lambda s: s.region in sides[a]):
                    for j in self._index(lambda s: s.region in sides[b]):
                        self.net.cut(i, j)

    def isolate_server(self, name: str) -> None:
        """Cut one server from every other server (its region's peers too); its clients still reach it."""
        k = next(i for i, s in enumerate(self.servers) if s.name == name)
        self.net.isolate(k)

    def heal(self) -> None:
        self.net.heal_all()

    def meta_leader(self) -> str:
        """The meta leader's server name, from the /jsz of the first server that answers."""
        for s in self.servers:
            try:
                leader = (s.http_json("/jsz").get("meta_cluster") or {}).get("leader") or ""
            except (OSError, ValueError):
                continue
            if leader:
                return leader
        return ""

    def close(self) -> None:
        for s in self.servers:
            s.stop()
        self.net.down()


# ---- publishing and checking ----------------------------------------------------------------------------------

class Book:
    """What was published: subject -> region, and which were acknowledged (and by which stream)."""

    def __init__(self) -> None:
        self.attempted: dict[str, str] = {}
        self.acked: set[str] = set()
        self.wrong_stream: list[tuple[str, str]] = []
        self.retries = 0

    def acked_in(self, region: str) -> set[str]:
        return {s for s in self.acked if self.attempted[s] == region}


async def publish(lab: VLab, region: str, tag: str, n: int, book: Book, attempts: int = 4,
                  timeout: float = 2.0) -> int:
    """``n`` synchronous publishes from a client of ``region`` on ``foo.<tag>-<region>.<i>`` (stored as
    ``foo.<region>.<tag>-<region>.<i>`` by the mapping); returns how many were acknowledged."""
    nc = await lab.connect(region)
    js = nc.jetstream(timeout=timeout)
    ok = 0
    try:
        for i in range(n):
            subj = f"{NAME}.{tag}-{region}.{i}"
            book.attempted[subj] = region
            for k in range(attempts):
                try:
                    ack = await js.publish(subj, f"{region} {tag} {i}".encode(), headers={"Nats-Msg-Id": subj})
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError,
                        nats.js.errors.NoStreamResponseError, nats.errors.ConnectionClosedError):
                    book.retries += 1
                    await asyncio.sleep(0.2)
                    continue
                if ack.stream != write_name(NAME, region):
                    book.wrong_stream.append((subj, ack.stream))
                book.acked.add(subj)
                ok += 1
                break
    finally:
        await nc.close()
    return ok


async def publish_until(lab: VLab, region: str, tag: str, stop: asyncio.Event, book: Book,
                        pace: float = 0.02) -> int:
    """Publishes from a client of ``region`` one after the other (as ``publish``) until ``stop`` is set."""
    i = 0
    while not stop.is_set():
        await publish_range(lab, region, tag, i, i + 10, book)
        i += 10
        await asyncio.sleep(pace)
    return i


async def publish_range(lab: VLab, region: str, tag: str, first: int, end: int, book: Book) -> None:
    nc = await lab.connect(region)
    js = nc.jetstream(timeout=2.0)
    try:
        for i in range(first, end):
            subj = f"{NAME}.{tag}-{region}.{i}"
            book.attempted[subj] = region
            for k in range(4):
                try:
                    ack = await js.publish(subj, f"{region} {tag} {i}".encode(), headers={"Nats-Msg-Id": subj})
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError,
                        nats.js.errors.NoStreamResponseError, nats.errors.ConnectionClosedError):
                    book.retries += 1
                    await asyncio.sleep(0.2)
                    continue
                if ack.stream != write_name(NAME, region):
                    book.wrong_stream.append((subj, ack.stream))
                book.acked.add(subj)
                break
    finally:
        await nc.close()


async def publish_all(lab: VLab, regions: list[str], tag: str, n: int, book: Book) -> str:
    t0 = time.monotonic()
    got = await asyncio.gather(*(publish(lab, r, tag, n, book) for r in regions))
    return ", ".join(f"{r} {g}/{n}" for r, g in zip(regions, got)) + f" acked in {time.monotonic() - t0:.1f}s"


async def connect_once(lab: VLab, region: str) -> nats.NATS:
    """A connection to a server of ``region``, or an error within 5 s when none is up (nats.py's
    ``max_reconnect_attempts=0`` retries the first connect for ever)."""
    return await asyncio.wait_for(nats.connect(lab.urls(region).split(","), connect_timeout=1,
                                               max_reconnect_attempts=1, reconnect_time_wait=0.1,
                                               error_cb=wt._quiet), 5)


async def stream_count(lab: VLab, region: str, stream: str) -> int:
    return (await stream_info(lab, region, stream)).state.messages


async def stream_info(lab: VLab, region: str, stream: str) -> Any:
    nc = await connect_once(lab, region)
    try:
        return await nc.jetstream(timeout=2).stream_info(stream)
    finally:
        await nc.close()


class Leaderless(Exception):
    """A STREAM.INFO answered by a member of a group without a leader (as nats-server, it answers with its
    own state: a member cut off from its group, or one that has not heard from the new leader yet)."""


async def counts(lab: VLab, ordering: bool) -> dict[str, int]:
    """Every write and read stream's message count (and the ordering stream's), each asked in its region;
    ``Leaderless`` when an answer came from a replicated stream's member that knows no leader."""
    asks = [(r, write_name(NAME, r)) for r in REGIONS] + ([(REGIONS[0], order_name(NAME))] if ordering else []) \
        + [(r, read_name(NAME, r)) for r in REGIONS]
    c: dict[str, int] = {}
    for r, stream in asks:
        info = await stream_info(lab, r, stream)
        if info.cluster is not None and not info.cluster.leader:
            raise Leaderless(stream, info.state.messages)
        c[stream] = info.state.messages
    return c


async def converge(lab: VLab, deadline: float, book: Book,
                   ordering: bool = False) -> tuple[float | None, dict[str, Any], int, str]:
    """Seconds until converged (None: not within ``deadline``), the last counts seen, the total and what
    was seen on the way. Converged: every write stream holds at least what was acknowledged in its
    region, and every read stream (and the ordering stream) holds as many messages as the write streams
    together, in one round of STREAM.INFO answers each given by a stream leader (asked again every 0.1 s:
    an answer from a member without a leader, or a count below what was acknowledged, is stale and never
    fixes the target)."""
    t0 = time.monotonic()
    total = -1
    last: dict[str, Any] = {}
    floor = {r: len(book.acked_in(r)) for r in REGIONS}
    seen: collections.Counter = collections.Counter()
    while time.monotonic() - t0 < deadline:
        try:
            c = await counts(lab, ordering)
            total = sum(c[write_name(NAME, r)] for r in REGIONS)
            last = c
            low = [r for r in REGIONS if c[write_name(NAME, r)] < floor[r]]
            if low:
                seen["a write stream below what it acknowledged"] += 1
            elif all(v == total for k, v in c.items() if not k.startswith(f"{NAME}-write-")):
                notes = ", ".join(f"{what}: {n} round(s)" for what, n in seen.items())
                return time.monotonic() - t0, last, total, notes
        except Leaderless as e:
            seen[f"{e.args[0]} answered without a leader"] += 1
            last = dict(last, error=f"{e.args[0]}: {e.args[1]} messages, no leader")
        except Exception as e:  # (a leader being elected, a server reconnecting: ask again)
            seen[type(e).__name__] += 1
            last = dict(last, error=repr(e)[:120])
        await asyncio.sleep(0.1)
    return None, last, total, ", ".join(f"{what}: {n} round(s)" for what, n in seen.items())


def check_stream(label: str, seen: list[str], expect: set[str], book: Book) -> bool:
    """``seen`` (a stream's subjects) against ``expect`` (every acknowledged one it must have once)."""
    c = collections.Counter(seen)
    lost = expect - set(c)
    dups = sum(v - 1 for v in c.values() if v > 1)
    unexpected = [s for s in c if s not in book.attempted]
    unacked = sum(1 for s in c if s in book.attempted and s not in book.acked)
    ok = not lost and not dups and not unexpected
    say(f"  {label:<16} {len(seen):>6} messages: {len(expect)} acked expected, lost {len(lost)}, "
        f"duplicated {dups}, unexpected {len(unexpected)}, unacked present {unacked} -> {'OK' if ok else 'FAILED'}")
    if lost:
        say(f"    lost e.g. {sorted(lost)[:5]}")
    if dups:
        say(f"    duplicated e.g. {[s for s, v in c.items() if v > 1][:5]}")
    if unexpected:
        say(f"    unexpected e.g. {unexpected[:5]}")
    return ok


async def read_all(lab: VLab, region: str, stream: str) -> list[str]:
    """Every subject of ``stream`` (through the read stream's transform for read streams), in order: an
    ordered consumer read until the stream info's count is reached and a message says nothing is pending
    (so an info answer behind the stream would not cut the reading short)."""
    nc = await lab.connect(region)
    js = nc.jetstream(timeout=5)
    out: list[str] = []
    try:
        n = (await js.stream_info(stream)).state.messages
        if n:
            sub = await wt.wait_for(f"an ordered consumer on {stream}",
                                    lambda: js.subscribe(f"{NAME}.>", stream=stream, ordered_consumer=True), 30)
            while True:
                m = await sub.next_msg(timeout=5)
                out.append(m.subject)
                if len(out) >= n and m.metadata.num_pending == 0:
                    break
            await sub.unsubscribe()
    finally:
        await nc.close()
    return out


async def check_all(lab: VLab, book: Book, ordering: bool = False) -> bool:
    good = True
    say(f"final check: {len(book.attempted)} attempted, {len(book.acked)} acknowledged, "
        f"{len(book.attempted) - len(book.acked)} never acknowledged ({book.retries} retried publishes)")
    if book.wrong_stream:
        say(f"  acknowledged by another stream than the region's write stream: {book.wrong_stream[:5]}")
        good = False
    for r in REGIONS:
        seen = await read_all(lab, r, write_name(NAME, r))
        # (the write stream holds foo.<region>.<published subject minus foo.>)
        seen = [f"{NAME}." + s.split(".", 2)[2] if s.count(".") >= 2 else s for s in seen]
        good &= check_stream(write_name(NAME, r), seen, book.acked_in(r), book)
    order: list[str] = []
    if ordering:
        order = await read_all(lab, REGIONS[0], order_name(NAME))
        good &= check_stream(order_name(NAME), order, book.acked, book)
    for r in REGIONS:
        seen = await read_all(lab, r, read_name(NAME, r))
        good &= check_stream(read_name(NAME, r), seen, book.acked, book)
        if ordering:
            good &= check_order(read_name(NAME, r), seen, order)
    return good


def check_order(label: str, seen: list[str], order: list[str]) -> bool:
    """A read stream of the ordering variant holds the ordering stream's messages in its order."""
    if seen == order:
        say(f"  {label:<16} same order as {order_name(NAME)} ({len(order)} messages) -> OK")
        return True
    at = next((i for i, (a, b) in enumerate(zip(seen, order)) if a != b), min(len(seen), len(order)))
    say(f"  {label:<16} NOT in {order_name(NAME)}'s order: first difference at position {at + 1} "
        f"({seen[at:at + 3]} against {order[at:at + 3]}), {len(seen)} against {len(order)} messages -> FAILED")
    return False


# ---- the run ----------------------------------------------------------------------------------------------

async def create_vstream(lab: VLab, args: argparse.Namespace) -> None:
    extra = ["--ordering", STRETCH, "--ordering-replicas", str(len(REGIONS))] if args.ordering else []
    out = await asyncio.to_thread(lab.cli, REGIONS[0], "vstream", "create", NAME, "--regions", ",".join(REGIONS),
                                  "--replicas", str(args.replicas), "--max-age", "1h", *extra)
    for line in out.splitlines():
        if line.startswith("Stream "):
            say("  " + line)


async def read_counts(lab: VLab, ordering: bool = False, regions: list[str] = REGIONS) -> str:
    out = []
    streams = [(regions[0], order_name(NAME), "order")] if ordering else []
    for r, stream, label in streams + [(r, read_name(NAME, r), r) for r in regions]:
        try:
            out.append(f"{label} {await stream_count(lab, r, stream)}")
        except Exception as e:  # (shown, not fatal: this is only the view during the partition)
            out.append(f"{label} ({type(e).__name__})")
    return ", ".join(out)


async def settle(lab: VLab, args: argparse.Namespace, book: Book, results: list, phase: str,
                 t0: float) -> bool:
    """Waits for convergence (``converge``) and reports the time since ``t0`` (the heal or the restart)."""
    took, counts, total, notes = await converge(lab, args.deadline, book, args.ordering)
    if took is None:
        say(f"  {phase}: NOT converged within {args.deadline:.0f}s: write streams {total}, counts {counts}"
            f"{'; seen: ' + notes if notes else ''}")
        results.append((phase, None))
        return False
    took = time.monotonic() - t0
    say(f"  {phase}: every read stream at {total} messages {took:.2f}s after the "
        f"{'restart' if phase == 'region down' else 'heal'}{' (on the way, ' + notes + ')' if notes else ''}")
    results.append((phase, took))
    return True


async def heal_and_converge(lab: VLab, args: argparse.Namespace, book: Book, results: list, phase: str) -> bool:
    say(f"  read streams before the heal: {await read_counts(lab, args.ordering)}")
    t0 = time.monotonic()
    lab.heal()
    return await settle(lab, args, book, results, phase, t0)


async def order_leader(lab: VLab, region: str = REGIONS[0]) -> str:
    """The ordering stream's leader (server name) as a client of ``region`` is told, or ""."""
    try:
        nc = await connect_once(lab, region)
        try:
            return (await nc.jetstream(timeout=2).stream_info(order_name(NAME))).cluster.leader or ""
        finally:
            await nc.close()
    except Exception as e:  # (shown: the caller then picks a region itself)
        say(f"  ordering stream leader unknown ({type(e).__name__})")
        return ""


async def scenario(lab: VLab, args: argparse.Namespace) -> int:
    n, hold = args.msgs, args.hold
    book = Book()
    results: list[tuple[str, float | None]] = []
    ok = True
    lab.start(REGIONS)
    await wt.js_ready(lab, REGIONS)
    say(f"JetStream up; rillet vstream create {NAME} --replicas {args.replicas}"
        + (f" --ordering {STRETCH} --ordering-replicas {len(REGIONS)}" if args.ordering else ""))
    await create_vstream(lab, args)

    say(f"phase 1 baseline: {n} per region")
    say("  " + await publish_all(lab, REGIONS, "p1", n, book))
    took, counts, total, notes = await converge(lab, args.deadline, book, args.ordering)
    say(f"  converged: {took is not None} ({total} messages){'; seen: ' + notes if notes else ''}")
    ok &= took is not None

    if args.ordering:
        leader = await order_leader(lab)
        what = f"{order_name(NAME)}'s leader"
    else:
        leader = lab.meta_leader()
        what = "meta leader"
    lone = next((s.region for s in lab.servers if s.name == leader), REGIONS[-1])
    others = [r for r in REGIONS if r != lone]
    say(f"phase 2 isolate {lone} ({what} {leader or '?'}) from {'+'.join(others)}; {n} per region")
    t0 = time.monotonic()
    lab.partition([lone], others)
    say("  " + await publish_all(lab, REGIONS, "p2", n, book))
    await asyncio.sleep(max(0.0, hold - (time.monotonic() - t0)))
    if args.ordering:
        say(f"  {order_name(NAME)}'s leader during the partition: {await order_leader(lab) or 'none'}")
    else:
        say(f"  meta leader during the partition: {lab.meta_leader() or 'none'}")
    ok &= await heal_and_converge(lab, args, book, results, "isolate")

    a, b, c = REGIONS
    say(f"phase 3 split brain: {a} | {b}+{c}, {n} per region; then {a}+{b} | {c}, {n} per region")
    t0 = time.monotonic()
    lab.partition([a], [b, c])
    say("  " + await publish_all(lab, REGIONS, "p3a", n, book))
    await asyncio.sleep(max(0.0, hold - (time.monotonic() - t0)))
    lab.heal()  # (the cut moves: restored and cut again at once, before anything reconnects)
    t0 = time.monotonic()
    lab.partition([a, b], [c])
    say("  " + await publish_all(lab, REGIONS, "p3b", n, book))
    await asyncio.sleep(max(0.0, hold - (time.monotonic() - t0)))
    ok &= await heal_and_converge(lab, args, book, results, "split brain")

    if not args.quick:
        say(f"phase 4 three ways: {a} | {b} | {c}, {n} per region")
        t0 = time.monotonic()
        lab.partition([a], [b], [c])
        say("  " + await publish_all(lab, REGIONS, "p4", n, book))
        await asyncio.sleep(max(0.0, hold - (time.monotonic() - t0)))
        ok &= await heal_and_converge(lab, args, book, results, "three ways")

    if args.ordering:
        ok &= await region_down(lab, args, book, results)

    if args.rolling:
        ok &= await rolling(lab, args, book, results)

    good = await check_all(lab, book, args.ordering)
    say("summary: " + "; ".join(f"{p} converged in {t:.2f}s" if t is not None else f"{p} NOT converged"
                                for p, t in results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"server": args.server, "quick": args.quick, "ordering": args.ordering,
                       "rolling": args.rolling, "seed": args.seed, "attempted": len(book.attempted),
                       "acked": len(book.acked), "converge_s": dict(results), "exactly_once": good}, f, indent=1)
    say(f"{'PASS' if ok and good else 'FAIL'}: {len(book.acked)} acknowledged; exactly once everywhere"
        f"{' and in one order' if args.ordering else ''}: {good}")
    return 0 if ok and good else 1


async def region_down(lab: VLab, args: argparse.Namespace, book: Book, results: list) -> bool:
    """(``--ordering``) The region holding the ordering stream's leader is killed whole (its servers and its
    stretch server, SIGKILL); the other regions publish; it is started again."""
    leader = await order_leader(lab)
    gone = next((s.region for s in lab.servers if s.name == leader), REGIONS[0])
    others = [r for r in REGIONS if r != gone]
    say(f"phase 5 region down: {gone} killed ({order_name(NAME)}'s leader {leader or '?'} with it), "
        f"{args.msgs} per region in {'+'.join(others)}")
    t0 = time.monotonic()
    lab.stop([gone])
    say("  " + await publish_all(lab, others, "p5", args.msgs, book))
    await asyncio.sleep(max(0.0, args.hold - (time.monotonic() - t0)))
    say(f"  while {gone} is down: {order_name(NAME)}'s leader {await order_leader(lab, others[0]) or 'none'}; "
        f"read streams {await read_counts(lab, True, others)}")
    t0 = time.monotonic()
    lab.start([gone])
    return await settle(lab, args, book, results, "region down", t0)


async def rolling(lab: VLab, args: argparse.Namespace, book: Book, results: list) -> bool:
    """Publishers in every region the whole time while the cuts change every 1.5-4 s (seeded): a region
    isolated, two regions against the third, three ways, one server cut from everyone (its region's write
    stream may change leader), a moment healed; then healed for good."""
    import random
    rng = random.Random(args.seed)
    say(f"phase 6 rolling: {args.rolling:.0f}s of changing cuts under continuous publishing (seed {args.seed})")
    stop = asyncio.Event()
    pubs = [asyncio.create_task(publish_until(lab, r, "p6", stop, book)) for r in REGIONS]
    t_end = time.monotonic() + args.rolling
    steps = []
    while time.monotonic() < t_end:
        lab.heal()
        kind = rng.choice(["isolate", "split", "three", "server", "healed"])
        if kind == "isolate":
            r = rng.choice(REGIONS)
            lab.partition([r], [x for x in REGIONS if x != r])
            steps.append(f"{r}|rest")
        elif kind == "split":
            r = rng.choice(REGIONS)
            lab.partition([x for x in REGIONS if x != r], [r])
            steps.append(f"rest|{r}")
        elif kind == "three":
            lab.partition(*[[r] for r in REGIONS])
            steps.append("3-way")
        elif kind == "server" and len(lab.servers) > len(REGIONS):
            srv = rng.choice(lab.servers)
            lab.isolate_server(srv.name)
            steps.append(f"{srv.name} alone")
        else:
            steps.append("healed")
        await asyncio.sleep(rng.uniform(1.5, 4.0))
    say(f"  steps: {', '.join(steps)}")
    stop.set()
    sent = await asyncio.gather(*pubs)
    say(f"  published {sum(sent)} while the cuts changed; {len(book.attempted) - len(book.acked)} "
        "unacknowledged so far")
    return await heal_and_converge(lab, args, book, results, "rolling")


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # (so that the servers are stopped and the namespaces removed: see amain)


async def amain(args: argparse.Namespace) -> int:
    if args.deadline is None:
        args.deadline = 180.0 if args.server == "go" else 60.0
    per_region = args.per_region
    if per_region is None:
        per_region = 1 if args.ordering else 3
    if args.replicas is None:
        # (--ordering: every server carries its region tag and unique_tag is the region, so a regional
        # stream can have one replica only; the ordering stream has one per region)
        args.replicas = 1 if args.ordering else per_region
    if args.rolling is None:
        args.rolling = 0.0
    if args.msgs is None:
        args.msgs = 20 if args.quick else 50
    if args.server == "go" and shutil.which("nats-server") is None:
        say("nats-server is not on PATH")
        return 2
    d = tempfile.mkdtemp(prefix="rillet-vsfaults-")
    t_start = time.monotonic()
    extra: tuple = ()
    if args.ordering:
        extra = tuple((STRETCH, r, (f"region:{r}",)) for r in REGIONS)
    try:
        lab = VLab(d, args.server, per_region=per_region, extra=extra, kill=args.ordering,
                   unique_tag="region:" if args.ordering else "")
    except OSError as e:
        say(f"network namespaces are not available here ({e}); this script needs them (run as root)")
        shutil.rmtree(d, ignore_errors=True)
        return 2
    say(f"{args.server}: {len(REGIONS)} regions x {per_region} server(s), R{args.replicas}"
        + (f", a cluster {STRETCH} of one server per region (unique_tag region:), ordering stream R{len(REGIONS)}"
           if args.ordering else "")
        + f", in namespaces ({', '.join(s.name + '=' + s.host for s in lab.servers)}); logs in {d}")
    rc = 1
    try:
        rc = await scenario(lab, args)
    finally:
        lab.close()
        say(f"total {time.monotonic() - t_start:.0f}s")
        if rc == 0 and not args.keep:
            shutil.rmtree(d, ignore_errors=True)
        else:
            say(f"servers' logs kept in {d}")
    return rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=("rillet", "go"), default="rillet")
    ap.add_argument("--quick", action="store_true", help="fewer messages, no three-way phase (CI)")
    ap.add_argument("--ordering", action="store_true",
                    help=f"the ordering variant: a cluster {STRETCH!r} of one server per region holds the "
                         "ordering stream (R3, unique_tag region:), the regional streams are R1; adds a "
                         "phase where a whole region is killed; checks one order in every region")
    ap.add_argument("--per-region", type=int, default=None, help="servers per region (3; --ordering 1)")
    ap.add_argument("--msgs", type=int, default=None, help="messages per region per phase (50; --quick 20)")
    ap.add_argument("--replicas", type=int, default=None,
                    help="regional stream replicas (default: --per-region; --ordering 1)")
    ap.add_argument("--hold", type=float, default=6.0, help="seconds each partition lasts at least")
    ap.add_argument("--deadline", type=float, default=None, help="seconds to converge after a heal "
                                                                   "(60 Rillet, 180 Go)")
    ap.add_argument("--rolling", type=float, default=None,
                    help="then this many seconds of changing cuts under continuous publishing")
    ap.add_argument("--seed", type=int, default=1, help="seed of the rolling phase's cuts")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the servers' logs after a good run")
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        sys.exit(asyncio.run(amain(ap.parse_args())))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
