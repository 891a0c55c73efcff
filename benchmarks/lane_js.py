"""JetStream end to end, both lanes (rillet.lane): the server's CPU time per message, compiled against pure-Python.

    python -m benchmarks.lane_js                              # async_file16, async_mem16, pull16; 3 runs each
    python -m benchmarks.lane_js --only async_file16 --seconds 4 --repeat 5 --json out.json
    python -m benchmarks.lane_js --only pull16,ordered16 --msgs 100000      # the consume cases

For each lane a Rillet server is started with ``-js`` on an empty temporary store (``RILLET_PURE=1`` for the
pure one) and benchmarks/jsbench.py's cases run against it, lanes alternating run by run. The figure is the
server process's CPU time (user + system, /proc) divided by the messages of the measured part: for the publish
cases the acknowledged publishes, for ``pull16`` the messages consumed and acknowledged, for ``ordered16`` the
messages received (the pre-fill is not counted: the CPU is read after it). CPU time rather than throughput: the machine may be shared.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks import jsbench
from benchmarks.compare import Server, free_port, rillet_cmd


def _server(lane_name: str, port: int, store: str) -> Server:
    cmd = [*rillet_cmd(port, None), "-js", "-sd", store]
    env = ["env", "RILLET_PURE=1"] if lane_name == "pure" else ["env", "-u", "RILLET_PURE"]
    return Server([*env, *cmd], port)


def run_one(s: Server, name: str, seconds: float, msgs: int) -> tuple[float, int]:
    """(server CPU seconds, messages) of one run of a jsbench case."""
    case = jsbench.CASES[name]
    c = jsbench.JsConn(s.url)
    try:
        c.create_stream(case["storage"])
        if case["kind"] in ("pull", "ordered"):
            jsbench._prefill(c, case["size"], msgs)
            time.sleep(0.3)
            cpu0 = s.cpu_seconds()
            r = jsbench.pull_consume(c, msgs) if case["kind"] == "pull" else jsbench.ordered_consume(c, msgs)
        elif case["kind"] == "pub_async":
            cpu0 = s.cpu_seconds()
            r = jsbench.publish_async(c, case["size"], seconds=seconds)
        else:
            raise SystemExit(f"lane_js measures the async publish and consume cases, not {name}")
        time.sleep(0.2)
        cpu = s.cpu_seconds() - cpu0
        c.delete_stream()
    finally:
        c.close()
    return cpu, r["count"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="async_file16,async_mem16,pull16")
    ap.add_argument("--seconds", type=float, default=3.0, help="publishing time of a publish run")
    ap.add_argument("--msgs", type=int, default=50_000, help="messages pre-filled and consumed by pull16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write every run here too")
    a = ap.parse_args(argv)
    names = a.only.split(",")
    runs: dict[str, dict[str, list[dict]]] = {n: {"compiled": [], "pure": []} for n in names}
    tmp = tempfile.mkdtemp(prefix="rillet-lanejs-")
    servers = {ln: _server(ln, free_port(), os.path.join(tmp, ln)) for ln in ("compiled", "pure")}
    for s in servers.values():
        s.__enter__()
    try:
        for ln, s in servers.items():
            want = "compiled lane" if ln == "compiled" else "pure-Python lane"
            if f"Lane:     {want}" not in s.output():
                print(f"the {ln} server does not run the {want}:\n{s.output()}", file=sys.stderr)
                return 1
        for name in names:
            for _ in range(a.repeat):
                for ln, s in servers.items():
                    cpu, n = run_one(s, name, a.seconds, a.msgs)
                    runs[name][ln].append({"cpu_s": cpu, "msgs": n, "us_per_msg": cpu * 1e6 / n})
            med = {ln: statistics.median(x["us_per_msg"] for x in runs[name][ln]) for ln in ("pure", "compiled")}
            print(f"{name:13} server CPU per message: pure {med['pure']:.2f} µs, compiled {med['compiled']:.2f} µs "
                  f"({1 - med['compiled'] / med['pure']:.0%} less)", flush=True)
    finally:
        for s in servers.values():
            s.__exit__()
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpus": os.cpu_count(), "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
