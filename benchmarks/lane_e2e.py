"""End to end, both lanes (rillet.lane): the server's CPU time per message, compiled against pure-Python.

    python -m benchmarks.lane_e2e                         # pub16, pubsub16, fanout5, queue3; 3 runs each
    python -m benchmarks.lane_e2e --only pub16 --count 2000000 --repeat 5 --json out.json

For each lane a Rillet server is started (``python -m rillet.server``, ``RILLET_PURE=1`` for the pure one),
and the load generator (benchmarks/loadgen.py) publishes a fixed number of messages (``--count``); the
figure is the server process's CPU time (user + system, from /proc) over the run divided by the messages
published, the median of ``--repeat`` runs. CPU time rather than throughput: on a shared machine the wall
clock moves with everyone else's load, the CPU a message costs much less. Lanes alternate run by run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from benchmarks import loadgen
from benchmarks.compare import Server, free_port, rillet_cmd


def _server(lane_name: str, port: int) -> Server:
    cmd = rillet_cmd(port, None)
    if lane_name == "pure":
        cmd = ["env", "RILLET_PURE=1", *cmd]
    else:
        cmd = ["env", "-u", "RILLET_PURE", *cmd]
    return Server(cmd, port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="pub16,pubsub16,fanout5,queue3", help="comma-separated loadgen cases")
    ap.add_argument("--count", type=int, default=1_000_000, help="messages published per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write every run here too")
    a = ap.parse_args(argv)
    names = a.only.split(",")
    runs: dict[str, dict[str, list[dict]]] = {n: {"compiled": [], "pure": []} for n in names}
    servers = {ln: _server(ln, free_port()) for ln in ("compiled", "pure")}
    for s in servers.values():
        s.__enter__()
    try:
        for ln, s in servers.items():  # each server says which lane it runs
            out = s.output()
            want = "compiled lane" if ln == "compiled" else "pure-Python lane"
            if f"Lane:     {want}" not in out:
                print(f"the {ln} server does not run the {want}:\n{out}", file=sys.stderr)
                return 1
        for name in names:
            for _ in range(a.repeat):
                for ln, s in servers.items():
                    cpu0 = s.cpu_seconds()
                    r = loadgen.run(s.url, name, a.count, 2.0, 5000)
                    time.sleep(0.2)  # (the last deliveries are counted by the subscribers already)
                    cpu = s.cpu_seconds() - cpu0
                    published = a.count
                    runs[name][ln].append({"cpu_s": cpu, "us_per_msg": cpu * 1e6 / published,
                                           "msgs_per_sec": r.get("msgs_per_sec", 0.0)})
            med = {ln: statistics.median(x["us_per_msg"] for x in runs[name][ln]) for ln in ("pure", "compiled")}
            tput = {ln: statistics.median(x["msgs_per_sec"] for x in runs[name][ln]) for ln in ("pure", "compiled")}
            print(f"{name:10} server CPU per published message: pure {med['pure']:.3f} µs, compiled "
                  f"{med['compiled']:.3f} µs ({1 - med['compiled'] / med['pure']:.0%} less); msgs/s pure "
                  f"{tput['pure']:,.0f}, compiled {tput['compiled']:,.0f}", flush=True)
    finally:
        for s in servers.values():
            s.__exit__()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"count": a.count, "cpus": os.cpu_count(), "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
