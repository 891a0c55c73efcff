"""The virtual stream walk-through on one machine: three regions of three servers, joined by gateways.

    python examples/vstream/walkthrough.py                  # Rillet servers
    python examples/vstream/walkthrough.py --go             # the same with Go's nats-server, to compare

It writes the servers' configurations (cluster = region, gateways between the regions, JetStream, the
virtual stream's mappings from ``rillet vstream mappings``), starts the 9 servers, creates the virtual stream
``foo`` with ``rillet vstream create``, and then:

1. publishes from each region and shows every message in every region's read stream, under the subject it was
   published on, read through the name ``foo`` by a consumer in each region;
2. stops a whole region, keeps publishing in the other two, restarts it and measures how long its read stream
   takes to catch up;
3. split brain: stops two regions, publishes in the third, brings the two back while stopping the third,
   publishes there, then heals; checks that every read stream holds every acknowledged message exactly once.

Servers are stopped with SIGTERM (``--kill`` for SIGKILL, with ``sync_interval: always`` so that
acknowledged messages are on disk). Everything lives in a temporary directory (``--dir`` to keep it); the
servers are stopped at the end, also on Ctrl-C.
"""
from __future__ import annotations

import argparse
import asyncio
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

from rillet.cli.vstream import read_name, render_mappings, write_name  # noqa: E402

REGIONS = ["west", "central", "east"]
NAME = "foo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _quiet(e: Exception) -> None:
    """Connection errors while servers are down are expected here: nats.py would print each with a traceback."""


def say(text: str = "") -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}" if text else "", flush=True)


class Server:
    def __init__(self, region: str, i: int, d: str, cmd: list[str]) -> None:
        self.region, self.name, self.cmd = region, f"{region}-{i}", cmd
        self.port, self.rport, self.gport = free_port(), free_port(), free_port()
        self.dir = os.path.join(d, self.name)
        os.makedirs(self.dir, exist_ok=True)
        self.conf = os.path.join(d, f"{self.name}.conf")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def write_conf(self, servers: list["Server"], sync_always: bool) -> None:
        routes = ", ".join(f"nats-route://127.0.0.1:{s.rport}" for s in servers if s.region == self.region)
        gws = ", ".join("{name: %s, urls: [%s]}" % (r, ", ".join(f"nats://127.0.0.1:{s.gport}" for s in servers
                                                                   if s.region == r)) for r in REGIONS)
        sync = "  sync_interval: always\n" if sync_always else ""
        with open(self.conf, "w") as f:
            f.write(f"server_name: {self.name}\nlisten: 127.0.0.1:{self.port}\n"
                    f'jetstream {{\n  store_dir: "{self.dir}"\n{sync}}}\n'
                    f"cluster {{\n  name: {self.region}\n  listen: 127.0.0.1:{self.rport}\n  routes: [{routes}]\n}}\n"
                    f"gateway {{\n  name: {self.region}\n  listen: 127.0.0.1:{self.gport}\n  gateways: [{gws}]\n}}\n"
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
    def __init__(self, d: str, go: bool, kill: bool) -> None:
        self.d, self.go, self.kill = d, go, kill
        cmd = ["nats-server"] if go else [sys.executable, "-m", "rillet.server"]
        self.servers = [Server(r, i, d, cmd) for r in REGIONS for i in range(1, 4)]
        with open(os.path.join(d, f"{NAME}.mappings.conf"), "w") as f:
            f.write(render_mappings(NAME, REGIONS))
        for s in self.servers:
            s.write_conf(self.servers, sync_always=kill)

    def region(self, r: str) -> list[Server]:
        return [s for s in self.servers if s.region == r]

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


async def publish(lab: Lab, r: str, prefix: str, n: int) -> list[str]:
    """``n`` messages published in region ``r`` on ``foo.<prefix>.<i>``; the subjects acknowledged."""
    nc = await lab.connect(r)
    js = nc.jetstream(timeout=5)
    acked = []
    for i in range(n):
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


async def main(args: argparse.Namespace) -> int:
    d = args.dir or tempfile.mkdtemp(prefix="rillet-vstream-")
    os.makedirs(d, exist_ok=True)
    lab = Lab(d, args.go, args.kill)
    say(f"{'nats-server' if args.go else 'Rillet'}: 3 regions x 3 servers in {d}")
    try:
        lab.start(REGIONS)
        await js_ready(lab, REGIONS)
        say("JetStream is up in every region; creating the virtual stream:")
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
    ap.add_argument("--dir", help="work directory to use and keep (default: a temporary one, removed)")
    try:
        sys.exit(asyncio.run(main(ap.parse_args())))
    except KeyboardInterrupt:
        sys.exit(130)
