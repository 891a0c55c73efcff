"""Cluster benchmarks: a 3-server cluster of Go nats-server and one of Rillet, same shape, same load, in one
run (one cluster at a time, servers as subprocesses), and the ratio Rillet/Go.

    python -m benchmarks.cluster_route                  # every case, median of 3 runs each
    python -m benchmarks.cluster_route --repeat 1 --only cross16,reqrep --seconds 2 --json out.json
    python -m benchmarks.cluster_route --compression s2_fast   # routes compressed (both kinds alike)

The servers A, B, C: B and C route to A and learn each other by gossip (full mesh, checked in /routez).
Cases (the load generator of ``benchmarks/loadgen.py``: raw sockets, one process per role):

  cross16, cross1k   publisher on A, one subscriber on B, 16 B / 1 KB: msgs/s received
  fanout3            publisher on A, one subscriber on each of A, B, C, 16 B: delivered msgs/s (3 x sent)
  queue3             publisher on A, a queue group with one member on each of A, B, C, 16 B: msgs/s
  reqrep             requester on A, responder on B, 16 B, sequential: round trip p50 / p99 (µs)

Subscribers subscribe, then the publisher waits one second more so their interest has crossed the routes.
With ``--compression MODE`` every server is started from a config file whose cluster block has
``compression: MODE`` (s2 on the routes: off, accept, s2_fast, s2_better, s2_best, s2_auto); without it, from
flags (nats-server's default, accept on both ends: routes uncompressed).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benchmarks import loadgen as L

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
ROUTE_SETTLE = 1.0  # seconds between the subscriptions and the first message (interest crosses routes)

# name: (size, subscriber servers, queue)
PUBSUB = {
    "cross16": (16, [1], None),
    "cross1k": (1024, [1], None),
    "fanout3": (16, [0, 1, 2], None),
    "queue3": (16, [0, 1, 2], "q"),
}
CASES = [*PUBSUB, "reqrep"]
ROWS = [
    ("cross16", "msgs_per_sec", "A → B across a route, 16 B (msgs/s)", "rate"),
    ("cross1k", "msgs_per_sec", "A → B across a route, 1 KB (msgs/s)", "rate"),
    ("fanout3", "msgs_per_sec", "A → subscribers on A, B and C, 16 B (delivered msgs/s)", "rate"),
    ("queue3", "msgs_per_sec", "A → queue group with a member on A, B and C, 16 B (msgs/s)", "rate"),
    ("reqrep", "p50_us", "request on A, responder on B: p50 (µs, lower is better)", "us"),
    ("reqrep", "p99_us", "request on A, responder on B: p99 (µs, lower is better)", "us"),
]


def free() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_port(p: int, t: float = 15) -> None:
    d = time.time() + t
    while time.time() < d:
        try:
            socket.create_connection((HOST, p), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {p}")


def rillet_cmd() -> list[str]:
    import shutil
    exe = shutil.which("rillet-server")
    return [exe] if exe else [sys.executable, "-m", "rillet.server"]


class Cluster:
    """Three servers of one kind ("go" or "rillet") on free ports, B and C routed to A."""

    def __init__(self, kind: str, compression: str = "") -> None:
        self.kind = kind
        self.compression = compression
        self.procs: list[subprocess.Popen] = []
        self.ports = [free() for _ in range(3)]
        self.cports = [free() for _ in range(3)]
        self.http = [free() for _ in range(3)]

    @property
    def urls(self) -> list[str]:
        return [f"nats://{HOST}:{p}" for p in self.ports]

    def __enter__(self) -> "Cluster":
        cmd = ["nats-server"] if self.kind == "go" else rillet_cmd()
        import tempfile
        self._tmp = tempfile.TemporaryDirectory()
        for i in range(3):
            args = ["-a", HOST, "-p", str(self.ports[i]), "-m", str(self.http[i]), "-n", f"{self.kind}-{i}",
                    "--cluster_name", "bench", "--cluster", f"nats://{HOST}:{self.cports[i]}"]
            if i:
                args += ["--routes", f"nats://{HOST}:{self.cports[0]}"]
            if self.compression:  # (the same settings as a config file: the cluster block has the mode)
                path = Path(self._tmp.name) / f"{i}.conf"
                routes = f", routes: [nats://{HOST}:{self.cports[0]}]" if i else ""
                path.write_text(f"listen: {HOST}:{self.ports[i]}\nhttp: {HOST}:{self.http[i]}\n"
                                f"server_name: {self.kind}-{i}\ncluster {{ name: bench, listen: "
                                f"{HOST}:{self.cports[i]}{routes}, compression: {self.compression} }}\n")
                args = ["-c", str(path)]
            self.procs.append(subprocess.Popen(cmd + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               cwd=REPO))
        for p in self.ports:
            wait_port(p)
        deadline = time.time() + 20
        while not self.full_mesh():
            if time.time() > deadline:
                self.__exit__()
                raise RuntimeError(f"{self.kind} cluster: no full mesh within 20s")
            time.sleep(0.1)
        return self

    def full_mesh(self) -> bool:
        for h in self.http:
            try:
                z = json.loads(urllib.request.urlopen(f"http://{HOST}:{h}/routez", timeout=1).read())
            except OSError:
                return False
            if len({r["remote_id"] for r in z.get("routes") or []}) != 2:
                return False
        return True

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self.procs:
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except OSError:
                pass
        return total

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._tmp.cleanup()


def run_pubsub(urls: list[str], name: str, seconds: float) -> dict:
    size, where, queue = PUBSUB[name]
    ctx = L._ctx()
    subject = b"bench.%s" % name.encode()
    qname = queue.encode() if queue else None
    nsubs = len(where)
    ready, go, stop, errors = ctx.Barrier(nsubs + 1), ctx.Event(), ctx.Event(), ctx.SimpleQueue()
    pstats = ctx.Array("d", 4, lock=False)
    sstats = [ctx.Array("d", 4, lock=False) for _ in range(nsubs)]
    subs = [ctx.Process(target=L._guard, daemon=True,
                        args=(errors, L._subscriber, urls[w], subject, qname, ready, stop, s))
            for w, s in zip(where, sstats)]
    # the publisher waits on ``go`` (an Event: wait(timeout) like the barrier's) set once the interest
    # has had time to cross the routes
    pub = ctx.Process(target=L._guard, daemon=True,
                      args=(errors, L._publisher, urls[0], subject, size, None, seconds, go, pstats))
    procs = [*subs, pub]
    for p in procs:
        p.start()
    try:
        ready.wait(L.IO_TIMEOUT)
        time.sleep(ROUTE_SETTLE)
        go.set()
        expected_per = 0 if queue else 1
        received, progress_at = -1, time.monotonic()
        while True:
            time.sleep(0.01)
            if any(p.exitcode for p in procs) or not errors.empty():
                break
            if pub.is_alive():
                progress_at = time.monotonic()
                continue
            total = sum(s[L.NRECV] for s in sstats)
            expected = pstats[L.SENT] * (nsubs if expected_per else 1)
            if total >= expected:
                break
            if total != received:
                received, progress_at = total, time.monotonic()
            elif time.monotonic() - progress_at > 2.0:
                break  # (lost messages are reported, not waited for)
    finally:
        L._finish(procs, stop, errors)
    sent = int(pstats[L.SENT])
    delivered = int(sum(s[L.NRECV] for s in sstats))
    elapsed = max(s[L.LAST] for s in sstats) - pstats[L.T0]
    expected = sent * (1 if queue else nsubs)
    return {"name": name, "size": size, "sent": sent, "delivered": delivered, "lost": expected - delivered,
            "elapsed": elapsed, "msgs_per_sec": delivered / elapsed,
            "per_sub": [int(s[L.NRECV]) for s in sstats]}


def run_reqrep(urls: list[str], requests: int = 5000, size: int = 16, warmup: int = 200) -> dict:
    ctx = L._ctx()
    subject = b"bench.svc"
    barrier, stop, errors = ctx.Barrier(2), ctx.Event(), ctx.SimpleQueue()
    responder = ctx.Process(target=L._guard, daemon=True,
                            args=(errors, L._responder, urls[1], subject, barrier, stop))
    responder.start()
    lat = []
    try:
        c = L.Conn(urls[0])
        inbox = b"_INBOX.%s" % os.urandom(8).hex().encode()
        c.send(b"SUB %s.* 1\r\n" % inbox)
        c.ping()
        barrier.wait(L.IO_TIMEOUT)
        time.sleep(ROUTE_SETTLE)
        payload = b"x" * size
        for i in range(warmup + requests):
            reply = b"%s.%d" % (inbox, i)
            req = b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, size, payload)
            t0 = time.perf_counter_ns()
            c.send(req)
            while c.next_msg()[1][0] != reply:
                pass
            if i >= warmup:
                lat.append(time.perf_counter_ns() - t0)
        c.close()
    except (OSError, L.ProtocolError, TimeoutError) as e:
        L._finish([responder], stop, errors)
        raise L.BenchmarkError(f"requester: {type(e).__name__}: {e}") from e
    L._finish([responder], stop, errors)
    lat.sort()

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000

    return {"name": "reqrep", "size": size, "requests": requests, "p50_us": pct(0.5), "p99_us": pct(0.99)}


def run_case(cl: Cluster, name: str, args) -> dict:
    cpu0, t0 = cl.cpu_seconds(), time.perf_counter()
    r = run_reqrep(cl.urls, args.requests) if name == "reqrep" else run_pubsub(cl.urls, name, args.seconds)
    cpu = cl.cpu_seconds() - cpu0
    r["server_cpu"] = cpu / (time.perf_counter() - t0)  # (cores busy, the three servers together)
    if "sent" in r and r["sent"]:
        r["server_cpu_us_per_msg"] = cpu * 1e6 / r["sent"]  # (per published message)
    return r


def median_of(runs: list[dict], metric: str) -> float | None:
    vals = [r[metric] for r in runs if metric in r]
    return statistics.median(vals) if vals else None


def fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "error"
    return f"{v:,.0f}" if kind == "rate" else f"{v:,.1f}"


def machine() -> str:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    go = subprocess.run(["nats-server", "--version"], capture_output=True, text=True).stdout.strip()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {go}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="publishing time per throughput run")
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--only", default="", help=f"comma-separated cases of {','.join(CASES)}")
    ap.add_argument("--json", default="", help="write every run here")
    ap.add_argument("--compression", default="", help="the routes' compression mode (e.g. s2_fast)")
    args = ap.parse_args(argv)
    cases = [c for c in args.only.split(",") if c] or CASES
    runs: dict[str, dict[str, list[dict]]] = {"go": {c: [] for c in cases}, "rillet": {c: [] for c in cases}}
    for rep in range(args.repeat):
        for kind in ("go", "rillet"):
            with Cluster(kind, args.compression) as cl:
                for c in cases:
                    try:
                        r = run_case(cl, c, args)
                    except L.BenchmarkError as e:
                        print(f"{kind} {c} run {rep + 1}: error {e}", file=sys.stderr, flush=True)
                        continue
                    runs[kind][c].append(r)
                    print(f"{kind} {c} run {rep + 1}: " + json.dumps({k: (round(v, 2) if isinstance(v, float)
                                                                              else v) for k, v in r.items()}),
                          file=sys.stderr, flush=True)
    comp = f"; routes compression {args.compression}" if args.compression else ""
    print(f"\n{machine()}; median of {args.repeat} run(s){comp}, {time.strftime('%Y-%m-%d')}\n")
    print("| case | Go nats-server | Rillet | Rillet/Go |\n|---|---:|---:|---:|")
    for case, metric, label, kind in ROWS:
        if case not in cases:
            continue
        g, r = median_of(runs["go"][case], metric), median_of(runs["rillet"][case], metric)
        ratio = f"{r / g:.2f}" if g and r else "-"
        print(f"| {label} | {fmt(g, kind)} | {fmt(r, kind)} | {ratio} |")
    lost = {k: sum(r.get("lost", 0) for c in cases for r in runs[k][c]) for k in runs}
    print(f"\nmessages lost over all runs: Go {lost['go']}, Rillet {lost['rillet']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
