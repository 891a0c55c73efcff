"""The virtual stream walk-through on one machine: three regions of three servers, joined by gateways.

    python examples/vstream/walkthrough.py                  # Rillet servers
    python examples/vstream/walkthrough.py --go             # the same with Go's nats-server, to compare
    python examples/vstream/walkthrough.py --ordering       # step 4: the ordering variant (12 servers)

It writes the servers' configurations (cluster = region, gateways between the regions, JetStream, the
virtual stream's mappings from ``rillet vstream mappings``), starts the 9 servers, creates the virtual stream
``foo`` with ``rillet vstream create``, and then:

1. publishes from each region and shows every message in every region's read stream, under the subject it was
   published on, read through the name ``foo`` by a consumer in each region;
2. stops a whole region, keeps publishing in the other two, restarts it and measures how long its read stream
   takes to catch up;
3. split brain: stops two regions, publishes in the third, brings the two back while stopping the third,
   publishes there, then heals; checks that every read stream holds every acknowledged message exactly once.

4. (``--ordering``, run on its own) the ordering variant: a 4th cluster ``stretch`` of one server per region
   (every server tagged ``region:<r>``); ``rillet vstream create ... --ordering stretch --ordering-replicas 3``
   puts an R3 stream ``foo-order`` there, one replica per region, sourcing the three write streams, and each
   region's read stream mirrors it. Publishes from every region at once; prints every region's read stream in
   sequence order (the same as foo-order's); stops the region holding foo-order's leader (its 3 servers and
   its stretch server) while the other two publish (foo-order goes on with 2 of 3 replicas), restarts it,
   times the catch-up, publishes in every region again and checks that foo-order and every read stream hold
   every acknowledged message exactly once, in one order, the earlier order kept. The Go server runs the same
   topology and passes the same checks (``--go --ordering``), more slowly: its read streams' mirrors of
   foo-order resume 15-18 s after foo-order's leader stops, and a restarted region's first new messages
   reach foo-order after its sources' retry back-off (15-42 s); with Rillet every read stream is complete 3-4 s
   after the stop and after the restart, and at once after the new messages (the README has the numbers).

Any failed check exits with status 1. Servers are stopped with SIGTERM (``--kill`` for SIGKILL, with
``sync_interval: always`` so that acknowledged messages are on disk). Everything lives in a temporary
directory (``--dir`` to keep it); the servers are stopped at the end, also on Ctrl-C.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import nats  # noqa: E402

from rillet.cli.vstream import order_name, read_name, render_mappings, write_name  # noqa: E402

REGIONS = ["west", "central", "east"]
NAME = "foo"
STRETCH = "stretch"  # (--ordering: the cluster of one server per region that holds the ordering stream)
_ports: set[int] = set()


def free_port() -> int:
    """A free port on 127.0.0.1, never one handed out before by this process."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports:
            _ports.add(port)
            return port


async def _quiet(e: Exception) -> None:
    """Connection errors while servers are down are expected here: nats.py would print each with a traceback."""


def say(text: str = "") -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}" if text else "", flush=True)


class Server:
    """One server process: in region ``region``, in cluster ``cluster`` (the region's, or e.g. ``stretch``),
    with server tags ``tags``."""

    def __init__(self, region: str, i: int, d: str, cmd: list[str], cluster: str = "",
                 tags: tuple[str, ...] = (), name: str = "") -> None:
        self.region, self.name, self.cmd = region, name or f"{region}-{i}", cmd
        self.cluster, self.tags = cluster or region, tags
        self.port, self.rport, self.gport = free_port(), free_port(), free_port()
        self.dir = os.path.join(d, self.name)
        os.makedirs(self.dir, exist_ok=True)
        self.conf = os.path.join(d, f"{self.name}.conf")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def write_conf(self, servers: list["Server"], sync_always: bool) -> None:
        routes = ", ".join(f"nats-route://127.0.0.1:{s.rport}" for s in servers if s.cluster == self.cluster)
        clusters = list(dict.fromkeys(s.cluster for s in servers))
        gws = ", ".join("{name: %s, urls: [%s]}" % (c, ", ".join(f"nats://127.0.0.1:{s.gport}" for s in servers
                                                                   if s.cluster == c)) for c in clusters)
        sync = "  sync_interval: always\n" if sync_always else ""
        tags = ("server_tags: [%s]\n" % ", ".join(json.dumps(t) for t in self.tags)) if self.tags else ""
        with open(self.conf, "w") as f:
            f.write(f"server_name: {self.name}\nlisten: 127.0.0.1:{self.port}\n{tags}"
                    f'jetstream {{\n  store_dir: "{self.dir}"\n{sync}}}\n'
                    f"cluster {{\n  name: {self.cluster}\n  listen: 127.0.0.1:{self.rport}\n  routes: [{routes}]\n}}\n"
                    f"gateway {{\n  name: {self.cluster}\n  listen: 127.0.0.1:{self.gport}\n  gateways: [{gws}]\n}}\n"
                    f'mappings {{ include "{NAME}.mappings.conf" }}\n')

    def start(self) -> None:
        log = open(os.path.join(self.dir, "server.log"), "ab")
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(self.cmd + ["-c", self.conf], stdout=log, stderr=subprocess.STDOUT,
                                     cwd=os.path.dirname(self.conf), env=env)

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Lab:
    """The servers: 3 per region; with ``ordering`` also a cluster ``stretch`` of one server per region
    (every server tagged ``region:<its region>``). A region is its cluster's servers plus its stretch server:
    ``stop``/``start`` take regions."""

    def __init__(self, d: str, go: bool, kill: bool, ordering: bool = False) -> None:
        self.d, self.go, self.kill = d, go, kill
        cmd = ["nats-server"] if go else [sys.executable, "-m", "rillet.server"]
        tags = (lambda r: (f"region:{r}",)) if ordering else (lambda r: ())
        self.servers = [Server(r, i, d, cmd, tags=tags(r)) for r in REGIONS for i in range(1, 4)]
        if ordering:
            self.servers += [Server(r, 0, d, cmd, cluster=STRETCH, tags=tags(r), name=f"{STRETCH}-{r}")
                             for r in REGIONS]
        with open(os.path.join(d, f"{NAME}.mappings.conf"), "w") as f:
            f.write(render_mappings(NAME, REGIONS))
        for s in self.servers:
            s.write_conf(self.servers, sync_always=kill)

    def region(self, r: str) -> list[Server]:
        """The servers of cluster ``r`` (a region's own cluster, or ``stretch``)."""
        return [s for s in self.servers if s.cluster == r]

    def urls(self, r: str) -> str:
        return ",".join(s.url for s in self.region(r))

    def start(self, regions: list[str]) -> None:
        for s in self.servers:
            if s.region in regions:
                s.start()

    def stop(self, regions: list[str]) -> None:
        for s in self.servers:
            if s.region in regions:
                s.stop(self.kill)

    async def connect(self, r: str) -> nats.NATS:
        return await nats.connect(self.urls(r).split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.2,
                                  connect_timeout=2, error_cb=_quiet)

    def cli(self, r: str, *args: str) -> str:
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   NATS_URL=self.urls(r), RILLET_CONFIG_DIR=os.path.join(self.d, "cli"), COLUMNS="160")
        p = subprocess.run([sys.executable, "-m", "rillet.cli", *args], capture_output=True, text=True, env=env,
                           timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"rillet {' '.join(args)} failed: {p.stderr.strip() or p.stdout.strip()}")
        return p.stdout


async def wait_for(what: str, check, timeout: float = 60.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = await check()
            if last:
                return last
        except Exception as e:  # (servers starting, leaders being elected: ask again)
            last = e
        await asyncio.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout}s (last: {last!r})")


async def js_ready(lab: Lab, regions: list[str]) -> None:
    async def ok() -> bool:
        for r in regions:
            nc = await nats.connect(lab.urls(r).split(","), connect_timeout=1, max_reconnect_attempts=0,
                                    error_cb=_quiet)
            try:
                resp = json.loads((await nc.request("$JS.API.INFO", b"", timeout=2)).data)
                if "error" in resp:
                    return False
            finally:
                await nc.close()
        return True
    await wait_for("JetStream ready in " + ",".join(regions), ok)


async def publish(lab: Lab, r: str, prefix: str, n: int, pace: float = 0.0) -> list[str]:
    """``n`` messages published in region ``r`` on ``foo.<prefix>.<i>`` (``pace`` seconds apart); the
    subjects acknowledged."""
    nc = await lab.connect(r)
    js = nc.jetstream(timeout=5)
    acked = []
    for i in range(n):
        if i and pace:
            await asyncio.sleep(pace)
        subj = f"{NAME}.{prefix}.{i}"
        for _ in range(50):  # (a leader being elected: retry; the write stream dedups by msg id)
            try:
                ack = await js.publish(subj, f"{r} {i}".encode(), headers={"Nats-Msg-Id": subj})
                assert ack.stream == write_name(NAME, r), ack
                acked.append(subj)
                break
            except (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.NoRespondersError,
                    nats.js.errors.NoStreamResponseError):
                await asyncio.sleep(0.2)
        else:
            raise RuntimeError(f"could not publish {subj} in {r}")
    await nc.close()
    return acked


async def read_subjects(lab: Lab, r: str, stream: str) -> list[str]:
    """Every message's subject in ``stream``, read by an ordered consumer from region ``r``."""
    nc = await lab.connect(r)
    js = nc.jetstream(timeout=5)
    info = await js.stream_info(stream)
    out: list[str] = []
    if info.state.messages:
        # (right after a region came back its servers may not count as placement peers for a moment)
        sub = await wait_for(f"an ordered consumer on {stream}",
                             lambda: js.subscribe(f"{NAME}.>", stream=stream, ordered_consumer=True), 30)
        while len(out) < info.state.messages:
            out.append((await sub.next_msg(timeout=5)).subject)
        await sub.unsubscribe()
    await nc.close()
    return out


async def counts(lab: Lab, regions: list[str]) -> dict[str, int]:
    out = {}
    for r in regions:
        nc = await lab.connect(r)
        out[r] = (await nc.jetstream(timeout=3).stream_info(read_name(NAME, r))).state.messages
        await nc.close()
    return out


async def converge(lab: Lab, regions: list[str], total: int, timeout: float = 120.0) -> float:
    t0 = time.monotonic()

    async def done() -> bool:
        return all(n >= total for n in (await counts(lab, regions)).values())
    await wait_for(f"every read stream at {total} messages", done, timeout)
    return time.monotonic() - t0


async def check_exactly_once(lab: Lab, acked: list[str]) -> bool:
    good = True
    for r in REGIONS:
        seen = await read_subjects(lab, r, read_name(NAME, r))
        dups = len(seen) - len(set(seen))
        missing = sorted(set(acked) - set(seen))
        ok = not dups and not missing and len(seen) == len(acked)
        good &= ok
        say(f"  {read_name(NAME, r)}: {len(seen)} messages, {len(set(seen))} distinct, {dups} duplicates, "
            f"{len(missing)} acknowledged but missing -> {'OK' if ok else 'FAILED'}")
    return good


async def consumer_through_the_name(lab: Lab, r: str) -> None:
    nc = await lab.connect(r)
    js = nc.jetstream(timeout=5)
    try:
        psub = await js.pull_subscribe(f"{NAME}.>", durable=f"reader-{r}", stream=NAME)
        how = f"stream={NAME!r}"
    except nats.js.errors.BadRequestError as e:  # nats-server: 10056 after the mapping (see README)
        say(f"  {r}: a consumer on {NAME!r} is refused ({e.description}, err_code {e.err_code}); "
            f"using {read_name(NAME, r)!r} by name")
        psub = await js.pull_subscribe(f"{NAME}.>", durable=f"reader-{r}", stream=read_name(NAME, r))
        how = f"stream={read_name(NAME, r)!r}"
    msgs = await psub.fetch(100, timeout=3)
    for m in msgs:
        await m.ack()
    say(f"  {r}: consumer ({how}) read {len(msgs)}: {', '.join(m.subject for m in msgs)}")
    await nc.close()


# ---- step 4: the ordering variant (--ordering) ------------------------------------------------------------------

def short(subjects: list[str]) -> str:
    return " ".join(s[len(NAME) + 1:] for s in subjects)


def digest(subjects: list[str]) -> str:
    return hashlib.sha1("\n".join(subjects).encode()).hexdigest()[:12]


async def stream_count(lab: Lab, r: str, stream: str, timeout: float = 3.0) -> int:
    nc = await lab.connect(r)
    try:
        return (await nc.jetstream(timeout=timeout).stream_info(stream)).state.messages
    finally:
        await nc.close()


async def order_peers(lab: Lab, r: str) -> tuple[str, list[str]]:
    """The ordering stream's leader and every peer (leader first), asked in region ``r``."""
    nc = await lab.connect(r)
    try:
        cl = (await nc.jetstream(timeout=3).stream_info(order_name(NAME))).cluster
    finally:
        await nc.close()
    return cl.leader or "", [cl.leader or "?"] + [p.name for p in cl.replicas or []]


async def converge_ordering(lab: Lab, regions: list[str], total: int, timeout: float,
                            t0: float | None = None, via: str = "") -> tuple[float, str]:
    """Seconds (since ``t0``, default now) until the ordering stream (asked in region ``via``, default the
    first of ``regions``) and the read streams of ``regions`` hold ``total`` messages (and never more: a
    duplicate fails at once), and when each got there (text; each stream is watched on its own)."""
    t0 = time.monotonic() if t0 is None else t0
    reached: dict[str, float] = {}

    async def watch(r: str, stream: str) -> None:
        async def done() -> bool:
            n = await stream_count(lab, r, stream, timeout=1.0)  # (a short wait: a finer measure)
            if n > total:
                raise SystemExit(f"{stream} holds {n} messages, more than were published ({total})")
            return n == total
        await wait_for(f"{stream} at {total} messages", done, timeout)
        reached[stream] = time.monotonic() - t0
    await asyncio.gather(watch(via or regions[0], order_name(NAME)),
                         *(watch(r, read_name(NAME, r)) for r in regions))
    return time.monotonic() - t0, ", ".join(f"{k} {v:.1f}s" for k, v in sorted(reached.items(),
                                                                                 key=lambda kv: kv[1]))


async def same_order(lab: Lab, acked: list[str], full: bool) -> tuple[bool, list[str]]:
    """Reads the ordering stream and every region's read stream in sequence order; checks that the ordering
    stream holds every acknowledged message exactly once and that every read stream is the same sequence."""
    origin = await read_subjects(lab, REGIONS[0], order_name(NAME))
    ok = len(origin) == len(acked) and set(origin) == set(acked)
    say(f"  {order_name(NAME)} ({len(origin)}, sha1 {digest(origin)}): {short(origin)}"
        + ("" if ok else f" -> FAILED: {len(set(acked) - set(origin))} acknowledged but missing, "
                         f"{len(origin) - len(set(origin))} duplicates"))
    for r in REGIONS:
        seen = await read_subjects(lab, r, read_name(NAME, r))
        same = seen == origin
        ok &= same
        verdict = "the same messages in the same order" if same else "DIFFERENT"
        if full or not same:
            say(f"  {read_name(NAME, r)} ({len(seen)}, sha1 {digest(seen)}): {short(seen)} -> {verdict}")
        else:
            say(f"  {read_name(NAME, r)} ({len(seen)}, sha1 {digest(seen)}): {verdict} as {order_name(NAME)}")
    return ok, origin


async def ordering_walkthrough(lab: Lab, d: str, timeout: float) -> int:
    n = len(REGIONS)
    say(f"  rillet vstream create {NAME} --regions {','.join(REGIONS)} --replicas 3 --max-age 1h "
        f"--ordering {STRETCH} --ordering-replicas {n}")
    print(lab.cli("west", "vstream", "create", NAME, "--regions", ",".join(REGIONS), "--replicas", "3",
                  "--max-age", "1h", "--ordering", STRETCH, "--ordering-replicas", str(n),
                  "--mappings-out", os.path.join(d, f"{NAME}.mappings.conf")), end="")
    ok = True
    leader, peers = await wait_for(f"{order_name(NAME)} with a leader and {n} peers",
                                   lambda: _placed(lab, n), 60)
    tags = {s.name: s.region for s in lab.region(STRETCH)}
    spread = sorted(tags.get(p, "?") for p in peers) == sorted(REGIONS)
    ok &= spread
    say(f"  {order_name(NAME)}: leader {leader}, peers {', '.join(peers)} -> one replica per region: "
        f"{'OK' if spread else 'FAILED'}")

    say("Step 4: the ordering variant: publish 3 in each region at the same time")
    acked: list[str] = []
    for part in await asyncio.gather(*(publish(lab, r, f"o1-{r}", 3) for r in REGIONS)):
        acked += part
    took, _ = await converge_ordering(lab, REGIONS, len(acked), timeout)
    say(f"  {order_name(NAME)} and every read stream hold the {len(acked)} messages {took:.1f}s after the "
        "publishes:")
    good, before = await same_order(lab, acked, full=True)
    ok &= good

    leader, _ = await order_peers(lab, "west")
    down = next((s.region for s in lab.region(STRETCH) if s.name == leader), REGIONS[-1])
    up = [r for r in REGIONS if r != down]
    say(f"  publish 10 in each of {' and '.join(up)} (0.1s apart) and meanwhile stop region {down} "
        f"({', '.join(s.name for s in lab.servers if s.region == down)}: {order_name(NAME)}'s leader {leader} "
        "among them)")
    t0 = time.monotonic()
    pubs = [asyncio.ensure_future(publish(lab, r, f"o2-{r}", 10, pace=0.1)) for r in up]
    await asyncio.sleep(0.3)
    await asyncio.to_thread(lab.stop, [down])  # (SIGTERM or SIGKILL, and wait: the publishes go on)
    for part in await asyncio.gather(*pubs):
        acked += part
    say(f"  {len(acked)} acknowledged so far, the publishes done {time.monotonic() - t0:.1f}s after they began")
    took, each = await converge_ordering(lab, up, len(acked), timeout, t0)
    leader, peers = await order_peers(lab, up[0])
    say(f"  with {down} down: {order_name(NAME)} (2 of {n} replicas, leader {leader}) and the read streams of "
        f"{' and '.join(up)} hold all {len(acked)} messages {took:.1f}s after the publishes began ({each})")
    print(lab.cli(up[0], "vstream", "status", NAME, "--regions", ",".join(REGIONS)), end="")
    say(f"  restart region {down}")
    t0 = time.monotonic()
    lab.start([down])
    took, each = await converge_ordering(lab, REGIONS, len(acked), timeout, t0, via=up[0])
    say(f"  {down} restarted: {order_name(NAME)} and every read stream hold all {len(acked)} messages "
        f"{took:.1f}s after the restart ({each})")
    say(f"  publish 3 more in each region at the same time ({down} writes again)")
    for part in await asyncio.gather(*(publish(lab, r, f"o3-{r}", 3) for r in REGIONS)):
        acked += part
    took, _ = await converge_ordering(lab, REGIONS, len(acked), timeout)
    say(f"  converged {took:.1f}s after the last publish; every region's read stream, in sequence order:")
    good, after = await same_order(lab, acked, full=False)
    ok &= good
    kept = after[:len(before)] == before
    ok &= kept
    say(f"  the order of the first {len(before)} messages is kept: {'OK' if kept else 'FAILED'}")
    print(lab.cli("west", "vstream", "status", NAME), end="")
    say(f"{len(acked)} acknowledged messages; {order_name(NAME)} and every read stream hold each exactly once, "
        f"in one order: {ok}")
    return 0 if ok else 1


async def _placed(lab: Lab, n: int):
    leader, peers = await order_peers(lab, "west")
    return (leader, peers) if leader and len(peers) == n else None


async def main(args: argparse.Namespace) -> int:
    d = args.dir or tempfile.mkdtemp(prefix="rillet-vstream-")
    os.makedirs(d, exist_ok=True)
    lab = Lab(d, args.go, args.kill, ordering=args.ordering)
    say(f"{'nats-server' if args.go else 'Rillet'}: 3 regions x 3 servers"
        + (f" + a cluster {STRETCH} of one server per region (tags region:<r>)" if args.ordering else "")
        + f" in {d}")
    try:
        lab.start(REGIONS)
        await js_ready(lab, REGIONS + ([STRETCH] if args.ordering else []))
        say("JetStream is up in every region; creating the virtual stream:")
        if args.ordering:
            return await ordering_walkthrough(lab, d, args.timeout)
        say(f"  rillet vstream create {NAME} --regions {','.join(REGIONS)} --replicas 3 --max-age 1h")
        # (--mappings-out: the file the servers' configurations include, written again with the same text)
        print(lab.cli("west", "vstream", "create", NAME, "--regions", ",".join(REGIONS), "--replicas", "3",
                      "--max-age", "1h", "--mappings-out", os.path.join(d, f"{NAME}.mappings.conf")), end="")

        say("Step 1: publish 3 messages in each region")
        acked: list[str] = []
        for r in REGIONS:
            acked += await publish(lab, r, f"s1-{r}", 3)
        await converge(lab, REGIONS, len(acked))
        for r in REGIONS:
            seen = await read_subjects(lab, r, read_name(NAME, r))
            say(f"  {read_name(NAME, r)} ({len(seen)}): {', '.join(seen)}")
        say("  consumers created through the virtual name, one per region:")
        for r in REGIONS:
            await consumer_through_the_name(lab, r)
        print(lab.cli("west", "vstream", "status", NAME), end="")

        say("Step 2: stop region east, publish 5 in west and central, restart east")
        lab.stop(["east"])
        for r in ("west", "central"):
            acked += await publish(lab, r, f"s2-{r}", 5)
        print(lab.cli("west", "vstream", "status", NAME, "--regions", ",".join(REGIONS)), end="")
        t0 = time.monotonic()
        lab.start(["east"])
        await converge(lab, REGIONS, len(acked))
        say(f"  east restarted; every read stream has all {len(acked)} messages {time.monotonic() - t0:.1f}s "
            "after the restart")

        say("Step 3: split brain: stop central and east, publish 4 in west")
        lab.stop(["central", "east"])
        acked += await publish(lab, "west", "s3-west", 4)
        say("  bring central and east back while stopping west, publish 4 in each")
        lab.start(["central", "east"])
        lab.stop(["west"])
        await js_ready(lab, ["central", "east"])
        for r in ("central", "east"):
            acked += await publish(lab, r, f"s3-{r}", 4)
        say("  heal: restart west")
        t0 = time.monotonic()
        lab.start(["west"])
        await converge(lab, REGIONS, len(acked))
        say(f"  converged {time.monotonic() - t0:.1f}s after the heal")
        ok = await check_exactly_once(lab, acked)
        print(lab.cli("west", "vstream", "status", NAME), end="")
        say(f"{len(acked)} acknowledged messages; every read stream has each exactly once: {ok}")
        return 0 if ok else 1
    finally:
        for s in lab.servers:
            s.stop()
        if not args.dir:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--go", action="store_true", help="run Go's nats-server instead of Rillet")
    ap.add_argument("--kill", action="store_true", help="stop servers with SIGKILL (and sync_interval: always)")
    ap.add_argument("--ordering", action="store_true",
                    help=f"step 4 only: the ordering variant, with a cluster {STRETCH!r} of one server per region "
                         "(12 servers)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a convergence (--ordering)")
    ap.add_argument("--dir", help="work directory to use and keep (default: a temporary one, removed)")
    try:
        sys.exit(asyncio.run(main(ap.parse_args())))
    except KeyboardInterrupt:
        sys.exit(130)
