"""Run the same benchmarks against the Go nats-server and Rillet, one server at a time, and print
a markdown table of the medians with the ratio Rillet/Go.

    python -m benchmarks.compare [--repeat 3] [--only pub16,reqrep] [--json out.json]
    python -m benchmarks.compare --go-only                 # before Rillet runs
    python -m benchmarks.compare --rillet-cmd "python -m rillet.server"
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import loadgen

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parent.parent

# (benchmark, metric, row label, format)
ROWS = [
    ("pub16", "msgs_per_sec", "publish-only, 16 B (msgs/s)", "rate"),
    ("pub128", "msgs_per_sec", "publish-only, 128 B (msgs/s)", "rate"),
    ("pubsub16", "msgs_per_sec", "1 pub → 1 sub, 16 B (msgs/s)", "rate"),
    ("fanout5", "msgs_per_sec", "1 pub → 5 subs, 16 B (delivered msgs/s)", "rate"),
    ("queue3", "msgs_per_sec", "1 pub → queue group of 3, 16 B (msgs/s)", "rate"),
    ("reqrep", "p50_us", "request/reply p50 (µs, lower is better)", "us"),
    ("reqrep", "p99_us", "request/reply p99 (µs, lower is better)", "us"),
]
# Targets on the ratio Rillet/Go.
TARGETS = {
    ("pub16", "msgs_per_sec"): ("≥ 0.15", lambda r: r >= 0.15),
    ("pubsub16", "msgs_per_sec"): ("≥ 0.15", lambda r: r >= 0.15),
    ("reqrep", "p50_us"): ("≤ 3.0", lambda r: r <= 3.0),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def go_cmd(port: int) -> list[str]:
    return ["nats-server", "-a", HOST, "-p", str(port)]


def rillet_cmd(port: int, override: str | None) -> list[str]:
    """--rillet-cmd may use {host} and {port}; otherwise `-a HOST -p PORT` is appended."""
    if override:
        cmd = shlex.split(override)
        if any("{port}" in a for a in cmd):
            return [a.format(host=HOST, port=port) for a in cmd]
    elif shutil.which("rillet-server"):
        cmd = ["rillet-server"]
    else:
        cmd = [sys.executable, "-m", "rillet.server"]
    return [*cmd, "-a", HOST, "-p", str(port)]


class Server:
    """A server subprocess, started and ready (it sent INFO) inside the with-block."""

    def __init__(self, cmd: list[str], port: int):
        self.cmd, self.port = cmd, port
        self.log = tempfile.TemporaryFile()
        self.proc = None

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{shlex.join(self.cmd)} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                loadgen.Conn(self.url).close()
                return self
            except (OSError, loadgen.ProtocolError, ValueError):
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"{shlex.join(self.cmd)} did not accept connections:\n{self.output()}")
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server process has used so far (Linux only)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    def output(self, limit=2000) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-limit:]


def bench_all(servers: dict[str, Server], names: list[str], args) -> dict:
    """Run every benchmark against every server, one run at a time, alternating servers run by
    run so that a slow patch on the (shared) machine hits both sides alike.

    Returns {server: {benchmark: {"runs": [...], "median": {metric: value}} or {"error": msg}}}.
    """
    results = {label: {} for label in servers}
    with contextlib.ExitStack() as stack:
        live = {}
        for label, server in servers.items():
            try:
                live[label] = stack.enter_context(server)
            except RuntimeError as e:
                print(f"{label}: {e}", file=sys.stderr)
                results[label] = {name: {"error": "server did not start"} for name in names}
        for name in names:
            runs = {label: [] for label in live}
            for _ in range(args.repeat):
                for label, server in live.items():
                    if "error" not in results[label].get(name, {}):
                        try:
                            runs[label].append(_run_once(server, name, args))
                        except (loadgen.BenchmarkError, loadgen.ProtocolError, OSError) as e:
                            results[label][name] = {"error": str(e), "runs": runs[label]}
                            print(f"  {label:6} {name:9} error: {e}", file=sys.stderr)
                            if server.proc.poll() is not None:
                                print(f"{label} exited with {server.proc.returncode}:\n{server.output()}",
                                      file=sys.stderr)
            for label in live:
                if name not in results[label]:
                    results[label][name] = _summarize(label, name, runs[label])
    return results


def _run_once(server: Server, name: str, args) -> dict:
    cpu0, t0 = server.cpu_seconds(), time.perf_counter()
    run = loadgen.run(server.url, name, args.count, args.seconds, args.requests)
    run["server_cpu"] = (server.cpu_seconds() - cpu0) / (time.perf_counter() - t0)
    return run


def _summarize(label: str, name: str, runs: list[dict]) -> dict:
    median = {k: statistics.median(r[k] for r in runs) for k, v in runs[0].items() if isinstance(v, float)}
    summary = ", ".join(f"{k}={median[k]:,.1f}" for k in ("msgs_per_sec", "p50_us", "p99_us") if k in median)
    print(f"  {label:6} {name:9} {summary}, server CPU {median['server_cpu']:.0%}", file=sys.stderr, flush=True)
    return {"runs": runs, "median": median}


def machine_info() -> dict:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        go = subprocess.run(["nats-server", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        go = "nats-server not found"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "nats_server": go, "rillet_commit": commit, "date": time.strftime("%Y-%m-%d")}


def _cell(res: dict | None, bench: str, metric: str, fmt: str) -> tuple[str, float | None]:
    if res is None:
        return "", None
    r = res.get(bench, {})
    if "error" in r:
        return "error", None
    v = r["median"][metric]
    return (f"{v:,.0f}" if fmt == "rate" else f"{v:,.1f}"), v


def format_table(info: dict, go: dict, rillet: dict | None, names: list[str], repeat: int) -> str:
    out = [f"{info['cpu']}, {info['cores']} cores, Python {info['python']}, {info['nats_server']}, "
           f"Rillet {info['rillet_commit']}, {info['date']}; median of {repeat} runs", ""]
    if rillet is None:
        out += ["| benchmark | Go nats-server |", "|---|---:|"]
    else:
        out += ["| benchmark | Go nats-server | Rillet | Rillet/Go | target |", "|---|---:|---:|---:|---|"]
    for bench, metric, label, fmt in ROWS:
        if bench not in names:
            continue
        g, gv = _cell(go, bench, metric, fmt)
        if rillet is None:
            out.append(f"| {label} | {g} |")
            continue
        r, rv = _cell(rillet, bench, metric, fmt)
        ratio = f"{rv / gv:.2f}" if gv and rv is not None else "n/a"
        target = ""
        if (bench, metric) in TARGETS:
            text, ok = TARGETS[(bench, metric)]
            target = text + ("" if ratio == "n/a" else " ✅" if ok(rv / gv) else " ❌")
        out.append(f"| {label} | {g} | {r} | {ratio} | {target} |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per benchmark; the median is reported")
    ap.add_argument("--only", help="comma-separated subset of: " + ",".join(loadgen.BENCHMARKS))
    ap.add_argument("--count", type=int, help="messages to publish per run (default: time-based)")
    ap.add_argument("--seconds", type=float, default=2.0, help="publishing time per run (default 2)")
    ap.add_argument("--requests", type=int, default=5000, help="request/reply round trips (default 5000)")
    ap.add_argument("--go-only", action="store_true", help="benchmark only the Go nats-server")
    ap.add_argument("--rillet-cmd", help="command starting Rillet; {host}/{port} placeholders, "
                                         "else '-a HOST -p PORT' is appended")
    ap.add_argument("--json", metavar="OUT", help="also save all results to this file")
    args = ap.parse_args(argv)
    names = loadgen.parse_only(args.only)

    info = machine_info()
    port = free_port()
    servers = {"go": Server(go_cmd(port), port)}
    if not args.go_only:
        port = free_port()
        servers["rillet"] = Server(rillet_cmd(port, args.rillet_cmd), port)
    results = bench_all(servers, names, args)
    go, rillet = results["go"], results.get("rillet")

    print(format_table(info, go, rillet, names, args.repeat))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "repeat": args.repeat,
                                               "go": go, "rillet": rillet}, indent=2))


if __name__ == "__main__":
    main()
