"""R1 alone against R1 inside a cluster: the CPU time per message of the Rillet server that holds an R1 stream,
on a lone server (``-js``) and on the stream leader's server of a 3-server cluster, the client connected to that
server in both cases (no route on the message's way), the same load (jsbench's raw-socket generator).

    python -m benchmarks.js_r1                              # async publish, file and memory, 3 rounds
    python -m benchmarks.js_r1 --kinds async,sync,pull --storage file --rounds 5 --msgs 100000

CPU time is the server process's user+system time from /proc/<pid>/stat over the measured part (the machine may
be shared: wall-clock rates move with the load of others, CPU per message much less). Rounds alternate lone and
cluster; the table gives each side's median and their ratio. Kinds: ``async`` (window of 1,000 PubAcks,
``--msgs`` messages), ``sync`` (publish, wait for the PubAck, 3 s), ``pull`` (``--msgs`` pre-filled, durable
pull consumer, explicit acks, batch 100: an R1 consumer), ``ordered`` (``--msgs`` pre-filled, what an ordered
consumer asks for: ephemeral push, ack none, flow control, memory state, R1). The servers run ``python -m rillet.server`` from the current
directory's ``rillet`` (``RILLET_PURE=1`` in the environment: the pure-Python lane).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import js_cluster, jsbench
from benchmarks.jsbench import JsConn


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_cmd() -> list[str]:
    return [sys.executable, "-m", "rillet.server"]


def _measure(c: JsConn, pid: int, kind: str, n: int) -> float:
    """CPU µs per message of ``pid`` for one run of ``kind`` on connection ``c`` (stream BENCH exists)."""
    if kind in ("pull", "ordered"):
        jsbench.publish_async(c, 16, count=n - 1)  # (+ the warm-up message)
    c0 = _cpu(pid)
    if kind == "pull":
        jsbench.pull_consume(c, n)
    elif kind == "ordered":
        jsbench.ordered_consume(c, n)
    elif kind == "sync":
        n = js_cluster.publish_sync(c, 16, 3.0, 2)["count"]
    else:
        jsbench.publish_async(c, 16, count=n)
    return (_cpu(pid) - c0) * 1e6 / n


def lone(kind: str, storage: str, n: int) -> float:
    tmp = tempfile.mkdtemp(prefix="js-r1-")
    port = js_cluster.free()
    p = subprocess.Popen(_server_cmd() + ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", tmp],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = None
        for _ in range(200):
            time.sleep(0.05)
            try:
                c = JsConn(f"nats://127.0.0.1:{port}")
                break
            except OSError:
                if p.poll() is not None:
                    raise RuntimeError("the server exited") from None
        if c is None:
            raise RuntimeError("the server did not start")
        c.create_stream(storage)
        js_cluster.warm_up(c, 16)
        r = _measure(c, p.pid, kind, n)
        c.close()
        return r
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def clustered(kind: str, storage: str, n: int) -> float:
    cmd = js_cluster.rillet_cmd
    js_cluster.rillet_cmd = _server_cmd
    try:
        with js_cluster.Cluster("rillet") as cl:
            c = JsConn(cl.url)
            cfg = {"name": jsbench.STREAM, "subjects": [jsbench.SUBJECT.decode()], "storage": storage,
                   "retention": "limits", "discard": "old", "num_replicas": 1}
            deadline = time.monotonic() + 20
            while True:
                try:
                    c.request(f"$JS.API.STREAM.CREATE.{jsbench.STREAM}", cfg)
                    break
                except jsbench.BenchmarkError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.25)
            js_cluster.warm_up(c, 16)
            leader = c.request(f"$JS.API.STREAM.INFO.{jsbench.STREAM}")["cluster"]["leader"]
            c.close()
            i = cl.names.index(leader)
            c = JsConn(f"nats://127.0.0.1:{cl.ports[i]}")  # (on the leader's server: no route in the way)
            r = _measure(c, cl.procs[i].pid, kind, n)
            c.close()
            return r
    finally:
        js_cluster.rillet_cmd = cmd


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="async", help="comma-separated: async, sync, pull, ordered")
    ap.add_argument("--storage", default="file,memory", help="comma-separated: file, memory")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--msgs", type=int, default=100_000)
    a = ap.parse_args(argv)
    rows = []
    for kind in a.kinds.split(","):
        for storage in a.storage.split(","):
            alone, inside = [], []
            for rnd in range(a.rounds):
                alone.append(lone(kind, storage, a.msgs))
                inside.append(clustered(kind, storage, a.msgs))
                print(f"{kind} {storage} round {rnd + 1}: alone {alone[-1]:.2f} us/msg, in a cluster "
                      f"{inside[-1]:.2f}", file=sys.stderr, flush=True)
            ma, mi = statistics.median(alone), statistics.median(inside)
            rows.append((kind, storage, ma, mi, mi / ma))
    print("| kind | storage | R1 alone (CPU µs/msg) | R1 in a cluster | in a cluster / alone |")
    print("|---|---|---:|---:|---:|")
    for kind, storage, ma, mi, ratio in rows:
        print(f"| {kind} | {storage} | {ma:.2f} | {mi:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
