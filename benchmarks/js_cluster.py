"""Replicated JetStream: a 3-server Go nats-server cluster and a 3-server Rillet cluster of the same shape,
the same load on each, in one run (one cluster at a time, servers as subprocesses), and the ratio Rillet/Go.

    python -m benchmarks.js_cluster                      # every case, median of 3 runs (~4 min)
    python -m benchmarks.js_cluster --quick              # 1 run, 1 s per publish case, 5,000 msgs to consume
    python -m benchmarks.js_cluster --only r3_sync16,r3_async16 --seconds 3 --json out.json
    python -m benchmarks.js_cluster --only r3_sync16 --placements off     # stream leader on B only
    python -m benchmarks.js_cluster --only r3_async16 --kinds rillet --profile /tmp/prof   # py-spy per server

Each server: a config file with ``server_name``, ``listen``, ``http``, ``jetstream { store_dir }`` (a fresh
temporary directory) and ``cluster { name, listen, routes }`` listing all three route ports (the founding
meta group). The run starts once all three agree on a meta leader (``/jsz``). The client connects to server
A; every case creates file stream ``BENCH`` on ``bench.js`` with ``num_replicas`` 3 (``r3_*``) or 1
(``r1_*``) through A, publishes one warm-up message (retried until a stream leader answers), runs, checks
the stream's message count, and deletes the stream.

Where the leaders are decides a replicated run more than the code does (a publish to a stream led from
another server crosses a route twice more), so each case runs in each ``--placements`` (default ``on,off``):
``on`` puts the stream's leader (and a pull case's consumer's) on A, the client's server; ``off`` on B. An R3
leader is moved by ``LEADER.STEPDOWN`` naming the server (``placement.preferred``), repeated until
``STREAM.INFO`` / ``CONSUMER.INFO`` report it there; an R1 stream is created there (each server has the tag
``at-<i>``, the stream ``placement.tags``). ``any`` leaves the leaders where the cluster put them (the old
behaviour). The table gives each placement its own row and ratio; a case that could not be placed is an error,
not a mixed median.

Cases (``<r1|r3>_<kind><16|1k>``; the load generator of ``jsbench.py``: raw sockets, one process):

  sync      publish, wait for the PubAck (its seq checked), next; msgs/s over --seconds; latency p50/p99
  async     a window of 1,000 outstanding PubAcks, topped up after every read; acknowledged msgs/s
  pull      --msgs pre-filled, durable pull consumer, explicit acks, fetch batch 100, acks sent with the next
            fetch; msgs/s until the last ack was processed (the consumer is then checked: nothing pending)

``--profile DIR`` records each Rillet server during each case with ``py-spy`` (raw collapsed stacks, one file
per server and case) and prints the functions with the most samples (own and inclusive).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks import jsbench, loadgen
from benchmarks.compare import machine_info
from benchmarks.jsbench import BenchmarkError, JsConn

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
KINDS = ("go", "rillet")
SIZES = {"16": 16, "1k": 1024}
CASES = [f"{r}_{k}{s}" for r in ("r3", "r1") for k in ("sync", "async", "pull") for s in SIZES]
LABEL = {"sync": "sync publish", "async": f"async publish ×{jsbench.WINDOW}",
         "pull": f"pull consume, batch {jsbench.BATCH}, acks"}
PLACEMENTS = {"on": 0, "off": 1, "any": None}  # the server (index) the leaders are moved to
PLACE_LABEL = {"on": "leader on the client's server", "off": "leader on another server", "any": "leader anywhere"}


def parse_case(name: str) -> tuple[int, str, int]:
    r, rest = name.split("_", 1)
    kind = rest.rstrip("k0123456789")
    return int(r[1:]), kind, SIZES[rest[len(kind):]]


def free() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def rillet_cmd() -> list[str]:
    exe = shutil.which("rillet-server")
    return [exe] if exe else [sys.executable, "-m", "rillet.server"]


class Cluster:
    """Three JetStream servers of one kind ("go" or "rillet"), every route listed on every server."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.tmp = tempfile.mkdtemp(prefix=f"js-cluster-{kind}-")
        self.ports = [free() for _ in range(3)]
        self.rports = [free() for _ in range(3)]
        self.http = [free() for _ in range(3)]
        self.names = [f"{kind}-{i}" for i in range(3)]
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.ports[0]}"

    def _conf(self, i: int) -> str:
        routes = ", ".join(f"nats-route://{HOST}:{p}" for p in self.rports)
        store = os.path.join(self.tmp, self.names[i])
        text = (f"server_name: {self.names[i]}\nlisten: {HOST}:{self.ports[i]}\nhttp: {HOST}:{self.http[i]}\n"
                f"server_tags: [\"at-{i}\"]\n"
                f"jetstream {{ store_dir: {json.dumps(store)} }}\n"
                f"cluster {{ name: bench, listen: {HOST}:{self.rports[i]}, routes: [{routes}] }}\n")
        path = os.path.join(self.tmp, f"{self.names[i]}.conf")
        with open(path, "w") as f:
            f.write(text)
        return path

    def __enter__(self) -> "Cluster":
        cmd = ["nats-server"] if self.kind == "go" else rillet_cmd()
        for i in range(3):
            log = Path(self.tmp) / f"{self.names[i]}.log"
            self.logs.append(log)
            with open(log, "wb") as out:
                self.procs.append(subprocess.Popen(cmd + ["-c", self._conf(i)], stdout=out, stderr=out, cwd=REPO))
        try:
            self._wait_meta_leader(30)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_meta_leader(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"{self.kind} server exited:\n{self.output()}")
            try:
                leaders = set()
                for h in self.http:
                    with urllib.request.urlopen(f"http://{HOST}:{h}/jsz", timeout=1) as r:
                        leaders.add((json.loads(r.read()).get("meta_cluster") or {}).get("leader"))
                if len(leaders) == 1 and not leaders & {None, ""}:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.kind} cluster: no meta leader within {timeout:g}s\n{self.output()}")

    def output(self, limit: int = 1500) -> str:
        return "\n".join(f"--- {log.name}\n" + log.read_text(errors="replace")[-limit:] for log in self.logs
                         if log.exists())

    def cpu_seconds(self) -> float:
        return sum(self.cpu_each())

    def cpu_each(self) -> list[float]:
        """Each server's user + system CPU seconds so far (0 for one that is gone)."""
        out = []
        for p in self.procs:
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
            except OSError:
                out.append(0.0)
        return out

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


# --- one case ------------------------------------------------------------------------------------------

def create_stream(c: JsConn, replicas: int, timeout: float = 20.0, at: int | None = None) -> None:
    """The stream; an R1 one on server ``at`` (its ``server_tags``) when given."""
    cfg = {"name": jsbench.STREAM, "subjects": [jsbench.SUBJECT.decode()], "storage": "file",
           "retention": "limits", "discard": "old", "num_replicas": replicas}
    if at is not None:
        cfg["placement"] = {"tags": [f"at-{at}"]}
    deadline = time.monotonic() + timeout
    while True:  # (the cluster may still be settling: no peers known yet, no leader yet)
        try:
            c.request(f"$JS.API.STREAM.CREATE.{jsbench.STREAM}", cfg)
            return
        except BenchmarkError as e:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"stream create: {e}") from None
            time.sleep(0.25)


def _publish_once(c: JsConn, size: int, tag: bytes) -> dict | None:
    """One publish with a reply; its answer (a PubAck or an error, as JSON), None when none came within 2 s."""
    reply = b"%s.%s%d" % (c.inbox, tag, time.monotonic_ns())
    c.send(b"PUB %s %s %d\r\n%s\r\n" % (jsbench.SUBJECT, reply, size, b"x" * size))
    c.sock.settimeout(2.0)
    try:
        while True:
            op, args, start, end = c.next_msg()
            if args[0] == reply:
                break
    except TimeoutError:
        op = b""
    finally:
        c.sock.settimeout(loadgen.IO_TIMEOUT)
    return json.loads(bytes(c.buf[start:end])) if op == b"MSG" else None


def warm_up(c: JsConn, size: int, timeout: float = 20.0) -> None:
    """One acknowledged publish (seq 1): retried until the stream leader's subscription has crossed the
    routes and it answers."""
    deadline = time.monotonic() + timeout
    while True:
        ack = _publish_once(c, size, b"w")
        if ack is not None:
            if ack.get("seq") == 1:
                return
            raise BenchmarkError(f"warm-up publish answered {ack}")
        if time.monotonic() > deadline:
            raise BenchmarkError(f"no stream leader answered a publish within {timeout:g}s")
        time.sleep(0.1)


def ping_stream(c: JsConn, size: int, timeout: float = 20.0) -> None:
    """One more acknowledged publish (any seq), retried until the (new) stream leader answers."""
    deadline = time.monotonic() + timeout
    while True:
        ack = _publish_once(c, size, b"p")
        if ack is not None and "seq" in ack:
            return
        if time.monotonic() > deadline:
            raise BenchmarkError(f"no stream leader answered a publish within {timeout:g}s after the move")
        time.sleep(0.1)


def publish_sync(c: JsConn, size: int, seconds: float, first: int) -> dict:
    """Publish, wait for the PubAck (seq checked), next; each round trip timed."""
    payload = b"x" * size
    head = b"PUB %s %s." % (jsbench.SUBJECT, c.inbox)
    tail = b" %d\r\n%s\r\n" % (size, payload)
    lat = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline, n = t0 + seconds, 0
    clock = time.perf_counter_ns
    c.sock.settimeout(jsbench.STALL)
    try:
        while True:
            n += 1
            reply = b"%s.%d" % (c.inbox, n)
            s = clock()
            c.send(b"%s%d%s" % (head, n, tail))
            op, args, start, end = c.next_msg()
            lat.append(clock() - s)
            if op != b"MSG" or args[0] != reply:
                raise BenchmarkError(f"unexpected reply {op.decode()} {b' '.join(args).decode()} "
                                     f"{bytes(c.buf[start:end])[:200]!r}")
            ack = json.loads(bytes(c.buf[start:end]))
            if ack.get("seq") != first + n - 1:
                raise BenchmarkError(f"PubAck {ack} for message {n} (expected seq {first + n - 1})")
            if time.perf_counter() >= deadline:
                break
    except TimeoutError:
        raise BenchmarkError(f"stalled after {n - 1} acknowledged publishes") from None
    finally:
        c.sock.settimeout(loadgen.IO_TIMEOUT)
    elapsed = time.perf_counter() - t0
    lat.sort()

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000

    return {"count": n, "elapsed": elapsed, "msgs_per_sec": n / elapsed, "p50_us": pct(0.5),
            "p99_us": pct(0.99), "max_us": lat[-1] / 1000, "client_cpu": (time.process_time() - cpu0) / elapsed}


def _leader_of(c: JsConn, info_subject: str) -> str | None:
    try:
        return (c.request(info_subject).get("cluster") or {}).get("leader") or None
    except BenchmarkError:
        return None  # (no leader answering yet)


def move_leader(c: JsConn, what: str, target: str, timeout: float = 60.0) -> None:
    """Step ``what``'s leader ("STREAM" or "CONSUMER") down, naming ``target`` (``placement.preferred``), until
    its INFO reports ``target`` as the leader."""
    name = jsbench.STREAM if what == "STREAM" else f"{jsbench.STREAM}.{jsbench.DURABLE}"
    info, stepdown = f"$JS.API.{what}.INFO.{name}", f"$JS.API.{what}.LEADER.STEPDOWN.{name}"
    deadline = time.monotonic() + timeout
    while True:
        leader = _leader_of(c, info)
        if leader == target:
            return
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what.lower()} leader {leader} after {timeout:g} s of stepdowns to {target}")
        if leader is not None:
            try:
                c.request(stepdown, {"placement": {"preferred": target}}, timeout=10)
            except BenchmarkError:
                pass  # (a transfer under way, the target not current yet: asked again below)
            wait = time.monotonic() + 5
            while time.monotonic() < wait and _leader_of(c, info) in (leader, None):
                time.sleep(0.05)
        else:
            time.sleep(0.1)


def place(c: JsConn, cl: Cluster, replicas: int, placement: str, consumer: bool, size: int) -> None:
    """Put the stream's (and the consumer's, ``consumer``) leader on the placement's server (an R1 stream was
    created there: checked)."""
    at = PLACEMENTS[placement]
    if at is None:
        return
    target = cl.names[at]
    if replicas == 1:  # (created there: create_stream's placement)
        if _leader_of(c, f"$JS.API.STREAM.INFO.{jsbench.STREAM}") != target:
            raise BenchmarkError(f"R1 stream not placed on {target}")
        return
    for _ in range(5):  # (moving one group's leader must not have moved the other's: checked together)
        move_leader(c, "STREAM", target)
        if consumer:
            move_leader(c, "CONSUMER", target)
        if _leader_of(c, f"$JS.API.STREAM.INFO.{jsbench.STREAM}") == target and (not consumer or _leader_of(
                c, f"$JS.API.CONSUMER.INFO.{jsbench.STREAM}.{jsbench.DURABLE}") == target):
            return
    raise BenchmarkError(f"leaders not both on {target}")


def run_case(cl: Cluster, name: str, args, placement: str = "any") -> dict:
    replicas, kind, size = parse_case(name)
    c = JsConn(cl.url)
    try:
        try:
            c.request(f"$JS.API.STREAM.DELETE.{jsbench.STREAM}")
        except BenchmarkError:
            pass  # (not found)
        create_stream(c, replicas, at=PLACEMENTS[placement] if replicas == 1 else None)
        warm_up(c, size)
        place(c, cl, replicas, placement, False, size)
        profiling = bool(args.profile) and cl.kind == "rillet"
        if kind == "pull":
            jsbench.publish_async(c, size, count=args.msgs)
            if replicas > 1 and PLACEMENTS[placement] is not None:
                # (the durable created here so that its leader can be placed; jsbench.pull_consume's create of the
                # same config then finds it)
                c.request(f"$JS.API.CONSUMER.CREATE.{jsbench.STREAM}.{jsbench.DURABLE}", {
                    "stream_name": jsbench.STREAM,
                    "config": {"durable_name": jsbench.DURABLE, "ack_policy": "explicit", "deliver_policy": "all",
                               "replay_policy": "instant"}})
                place(c, cl, replicas, placement, True, size)
        elif replicas > 1 and PLACEMENTS[placement] is not None:
            ping_stream(c, size)  # (the moved leader answers before the timing starts)
        before = c.stream_msgs()  # (a retried publish while placing may have stored one more)
        if kind == "pull" and before != args.msgs + 1:
            raise BenchmarkError(f"stream holds {before} messages after {args.msgs + 1} acknowledged publishes")
        prof = Profiler(cl, name, args.profile) if profiling else None
        each0 = cl.cpu_each()
        cpu0, t0 = sum(each0), time.perf_counter()
        if kind == "sync":
            r = publish_sync(c, size, args.seconds, before + 1)
            stored = r["count"] + before
        elif kind == "async":
            r = jsbench.publish_async(c, size, seconds=args.seconds)
            stored = r["count"] + before
        else:
            stored = before
            r = jsbench.pull_consume(c, stored)  # (also checks that every message was acknowledged)
        wall = time.perf_counter() - t0
        each = [b - a for a, b in zip(each0, cl.cpu_each())]
        cpu = sum(each)
        if prof is not None:
            prof.stop()
        roles = leaders(c, kind == "pull")
        want = PLACEMENTS[placement]
        if want is not None and (roles.get("stream_leader") != cl.names[want] or (
                kind == "pull" and replicas > 1 and roles.get("consumer_leader") != cl.names[want])):
            raise BenchmarkError(f"leaders moved during the run (placed on {cl.names[want]}): {roles}")
        if kind != "pull" and (have := c.stream_msgs()) != stored:
            raise BenchmarkError(f"stream holds {have} messages after {stored} acknowledged publishes")
        c.request(f"$JS.API.STREAM.DELETE.{jsbench.STREAM}")
    finally:
        c.close()
    r.update(name=name, placement=placement, replicas=replicas, size=size, mb_per_sec=r["msgs_per_sec"] * size / 1e6,
             server_cpu=cpu / wall, server_cpu_us_per_msg=cpu * 1e6 / max(r["count"], 1),
             server_cpu_us_per_msg_each={n: round(x * 1e6 / max(r["count"], 1), 1) for n, x in zip(cl.names, each)},
             **roles)
    return r


def leaders(c: JsConn, consumer: bool) -> dict:
    """The stream's (and the pull consumer's) leader, by server name: which server's CPU figure is whose."""
    out = {}
    try:
        info = c.request(f"$JS.API.STREAM.INFO.{jsbench.STREAM}")
        out["stream_leader"] = (info.get("cluster") or {}).get("leader")
        if consumer:
            info = c.request(f"$JS.API.CONSUMER.INFO.{jsbench.STREAM}.{jsbench.DURABLE}")
            out["consumer_leader"] = (info.get("cluster") or {}).get("leader")
    except BenchmarkError:
        pass
    return out


# --- profiling (py-spy) --------------------------------------------------------------------------------

class Profiler:
    """``py-spy record`` attached to every server of the cluster while it runs."""

    def __init__(self, cl: Cluster, case: str, outdir: str) -> None:
        os.makedirs(outdir, exist_ok=True)
        self.files = [os.path.join(outdir, f"{case}-{n}.txt") for n in cl.names]
        self.procs = [subprocess.Popen(["py-spy", "record", "--pid", str(p.pid), "--rate", "250", "--format", "raw",
                                        "--nonblocking", "-o", f], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
                      for p, f in zip(cl.procs, self.files)]
        time.sleep(0.5)  # (attached)

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def profile_summary(path: str, top: int = 25) -> str:
    """The functions with the most samples in a py-spy raw file: own (leaf) and inclusive."""
    own: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    total = 0
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        return f"{path}: {e}"
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        total += k
        frames = stack.split(";")
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    if not total:
        return f"{path}: no samples"
    out = [f"{path}: {total} samples", "  own:"]
    out += [f"    {v / total:6.1%}  {f}" for f, v in own.most_common(top)]
    out.append("  inclusive:")
    out += [f"    {v / total:6.1%}  {f}" for f, v in incl.most_common(top)]
    return "\n".join(out)


# --- CLI -----------------------------------------------------------------------------------------------

def row_label(name: str, placement: str = "any") -> str:
    replicas, kind, size = parse_case(name)
    where = f", {PLACE_LABEL[placement]}" if replicas > 1 or placement != "any" else ""
    return f"R{replicas} {LABEL[kind]}, {'16 B' if size == 16 else '1 KB'}{where}"


def median_of(runs: list[dict], metric: str) -> float | None:
    vals = [r[metric] for r in runs if metric in r]
    return statistics.median(vals) if vals else None


def table(runs: dict, cases: list[str], kinds: list[str], placements: list[str]) -> str:
    """One row per case and placement (the runs are keyed ``<case>@<placement>``)."""
    def rate(v):
        return "error" if v is None else f"{v:,.0f}"

    def mb(v):
        return "error" if v is None else f"{v:,.2f}"

    def us(v):
        return "-" if v is None else f"{v:,.0f}"

    out = ["| workload | Go msgs/s | Go MB/s | Rillet msgs/s | Rillet MB/s | Rillet/Go | CPU µs/msg Go | Rillet |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lat = []
    metrics = ("msgs_per_sec", "mb_per_sec", "p50_us", "p99_us", "server_cpu_us_per_msg")
    for case in cases:
        for pl in placements:
            key = f"{case}@{pl}"
            g = {m: median_of(runs.get("go", {}).get(key, []), m) for m in metrics}
            r = {m: median_of(runs.get("rillet", {}).get(key, []), m) for m in metrics}
            ratio = f"{r['msgs_per_sec'] / g['msgs_per_sec']:.2f}" if g["msgs_per_sec"] and r["msgs_per_sec"] else "-"
            out.append(f"| {row_label(case, pl)} | {rate(g['msgs_per_sec']) if 'go' in kinds else '-'} | "
                       f"{mb(g['mb_per_sec']) if 'go' in kinds else '-'} | "
                       f"{rate(r['msgs_per_sec']) if 'rillet' in kinds else '-'} | "
                       f"{mb(r['mb_per_sec']) if 'rillet' in kinds else '-'} | {ratio} | "
                       f"{us(g['server_cpu_us_per_msg'])} | {us(r['server_cpu_us_per_msg'])} |")
            if parse_case(case)[1] == "sync":
                for q in ("p50_us", "p99_us"):
                    gv, rv = g[q], r[q]
                    lat.append(f"| {row_label(case, pl)}: publish latency {q[:3]} (µs, lower is better) | "
                               f"{'-' if gv is None else f'{gv:,.0f}'} | {'-' if rv is None else f'{rv:,.0f}'} | "
                               f"{f'{rv / gv:.2f}' if gv and rv else '-'} |")
    if lat:
        out += ["", "| latency | Go | Rillet | Rillet/Go |", "|---|---:|---:|---:|", *lat]
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.js_cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="publishing time per publish case (default 2)")
    ap.add_argument("--msgs", type=int, default=20_000, help="messages pre-filled for the pull cases (default 20000)")
    ap.add_argument("--only", default="", help=f"comma-separated cases of {','.join(CASES)}")
    ap.add_argument("--kinds", default="go,rillet", help="which clusters to run (default go,rillet)")
    ap.add_argument("--quick", action="store_true", help="1 run, 1 s per publish case, 5,000 msgs to consume")
    ap.add_argument("--profile", default="", help="record the Rillet servers with py-spy into this directory")
    ap.add_argument("--json", default="", help="write every run here")
    ap.add_argument("--placements", default="on,off",
                    help="where the leaders are put, each its own run: on (the client's server), off (another "
                         "server), any (where the cluster put them); default on,off")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.seconds, args.msgs = 1, 1.0, 5_000
    cases = [c for c in args.only.split(",") if c] or CASES
    unknown = set(cases) - set(CASES)
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; choose from {CASES}")
    kinds = [k for k in args.kinds.split(",") if k]
    if set(kinds) - set(KINDS):
        raise SystemExit(f"--kinds: choose from {KINDS}")
    placements = [p for p in args.placements.split(",") if p]
    if not placements or set(placements) - set(PLACEMENTS):
        raise SystemExit(f"--placements: choose from {sorted(PLACEMENTS)}")
    if args.profile and not shutil.which("py-spy"):
        raise SystemExit("--profile needs py-spy on PATH (pip install py-spy)")
    runs: dict[str, dict[str, list[dict]]] = {k: {f"{c}@{p}": [] for c in cases for p in placements} for k in kinds}
    errors: list[str] = []
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg()[:2])
    for rep in range(args.repeat):
        for kind in kinds:
            with Cluster(kind) as cl:
                for case, pl in [(c, p) for c in cases for p in placements]:
                    try:
                        r = run_case(cl, case, args, pl)
                    except (BenchmarkError, loadgen.ProtocolError, OSError) as e:
                        msg = f"{kind} {case}@{pl} run {rep + 1}: error {type(e).__name__}: {e}"
                        if any(p.poll() is not None for p in cl.procs):
                            msg += "\n" + cl.output()
                        errors.append(msg)
                        print(msg, file=sys.stderr, flush=True)
                        continue
                    runs[kind][f"{case}@{pl}"].append(r)
                    print(f"{kind} {case}@{pl} run {rep + 1}: " + json.dumps(
                        {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}),
                        file=sys.stderr, flush=True)
    m = machine_info()
    print(f"\n{m['cpu']}, {m['cores']} cores, Python {m['python']}, {m['nats_server']}, Rillet {m['rillet_commit']}, "
          f"{m['date']}; median of {args.repeat} run(s), {args.seconds:g} s per publish case, "
          f"{args.msgs:,} msgs per pull case, load average at the start {load0}\n")
    print(table(runs, cases, kinds, placements))
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    if errors:
        print("\nErrors:\n" + "\n".join(errors))
    if args.profile:
        for f in sorted(Path(args.profile).glob("*.txt")):
            print("\n" + profile_summary(str(f)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": m, "runs": runs, "errors": errors}, f, indent=1)


if __name__ == "__main__":
    main()
