"""Run the JetStream benchmarks (jsbench.py) against the Go nats-server and Rillet and print a
markdown table of the medians with the ratio Rillet/Go.

Every run gets a freshly started server on an empty store directory (`-js -sd <tmpdir>`, or a
config file with `jetstream { store_dir: <tmpdir>, sync_interval: always }` for the *_always16
cases). Runs alternate between the servers, case by case, so both see the same machine load.

    python -m benchmarks.compare_js [--repeat 3] [--only sync_mem16,pull16] [--json out.json]
    python -m benchmarks.compare_js --go-only
    python -m benchmarks.compare_js --rillet-cmd "python -m rillet.server"
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import jsbench, loadgen
from .compare import HOST, Server, free_port, machine_info, rillet_cmd

SYNC, ASYNC_AND_CONSUME = ("≥ 0.40", lambda r: r >= 0.40), ("≥ 0.15", lambda r: r >= 0.15)

# (case, metric, row label, format, target or None) -- targets on the ratio Rillet/Go
ROWS = [
    ("sync_mem16", "msgs_per_sec", "sync publish, memory, 16 B (msgs/s)", "rate", SYNC),
    ("sync_mem1k", "msgs_per_sec", "sync publish, memory, 1 KB (msgs/s)", "rate", SYNC),
    ("sync_file16", "msgs_per_sec", "sync publish, file, 16 B (msgs/s)", "rate", SYNC),
    ("sync_file1k", "msgs_per_sec", "sync publish, file, 1 KB (msgs/s)", "rate", SYNC),
    ("async_mem16", "msgs_per_sec", "async publish ×1000, memory, 16 B (msgs/s)", "rate", ASYNC_AND_CONSUME),
    ("async_mem1k", "msgs_per_sec", "async publish ×1000, memory, 1 KB (msgs/s)", "rate", ASYNC_AND_CONSUME),
    ("async_file16", "msgs_per_sec", "async publish ×1000, file, 16 B (msgs/s)", "rate", ASYNC_AND_CONSUME),
    ("async_file1k", "msgs_per_sec", "async publish ×1000, file, 1 KB (msgs/s)", "rate", ASYNC_AND_CONSUME),
    ("sync_always16", "msgs_per_sec", "sync publish, file, sync always, 16 B (msgs/s)", "rate", SYNC),
    ("async_always16", "msgs_per_sec", "async publish ×1000, file, sync always, 16 B (msgs/s)", "rate",
     ASYNC_AND_CONSUME),
    ("pull16", "msgs_per_sec", "pull consume, batch 100, explicit acks, 16 B (msgs/s)", "rate", ASYNC_AND_CONSUME),
    ("ordered16", "msgs_per_sec", "ordered consume, 16 B (msgs/s)", "rate", ASYNC_AND_CONSUME),
    ("directget16", "ops_per_sec", "direct get by sequence (ops/s)", "rate", None),
    ("directget16", "p50_us", "direct get p50 (µs, lower is better)", "us", None),
]


def js_args(store: Path, sync_always: bool) -> list[str]:
    """Server flags: JetStream on `store`; with sync_always through a config file next to it."""
    if not sync_always:
        return ["-js", "-sd", str(store)]
    conf = store.parent / "js.conf"
    conf.write_text(f"jetstream {{\n  store_dir: {json.dumps(str(store))}\n  sync_interval: always\n}}\n")
    return ["-c", str(conf)]


def server_cmd(label: str, port: int, store: Path, sync_always: bool, args) -> list[str]:
    extra = js_args(store, sync_always)
    if label == "go":
        return ["nats-server", *extra, "-a", HOST, "-p", str(port)]
    return [*rillet_cmd(port, args.rillet_cmd), *extra]


def run_once(label: str, name: str, args) -> dict:
    """Start the server on a fresh store, run one case, stop the server."""
    sync_always = jsbench.CASES[name].get("sync_always", False)
    with tempfile.TemporaryDirectory(prefix=f"jsbench-{label}-") as tmp:
        store = Path(tmp) / "store"
        port = free_port()
        server = Server(server_cmd(label, port, store, sync_always, args), port)
        with server:
            cpu0, t0 = server.cpu_seconds(), time.perf_counter()
            try:
                run = jsbench.run(server.url, name, args.seconds, args.msgs, args.requests)
            except (loadgen.BenchmarkError, loadgen.ProtocolError, OSError) as e:
                if server.proc.poll() is not None:
                    e.add_note(f"{label} exited with {server.proc.returncode}:\n{server.output()}")
                raise
            run["server_cpu"] = (server.cpu_seconds() - cpu0) / (time.perf_counter() - t0)
    return run


def bench_all(labels: list[str], names: list[str], args) -> dict:
    """{server: {case: {"runs": [...], "median": {...}} or {"error": msg, "runs": [...]}}}"""
    results = {label: {} for label in labels}
    for name in names:
        runs = {label: [] for label in labels}
        for _ in range(args.repeat):
            for label in labels:
                if "error" in results[label].get(name, {}):
                    continue
                try:
                    runs[label].append(run_once(label, name, args))
                except RuntimeError as e:  # the server did not start
                    results[label][name] = {"error": "server did not start", "runs": runs[label]}
                    print(f"  {label:6} {name:14} {e}", file=sys.stderr)
                except (loadgen.BenchmarkError, loadgen.ProtocolError, OSError) as e:
                    msg = f"{type(e).__name__}: {e}"
                    results[label][name] = {"error": msg, "runs": runs[label]}
                    notes = "\n".join(getattr(e, "__notes__", []))
                    print(f"  {label:6} {name:14} error: {msg}" + (f"\n{notes}" if notes else ""),
                          file=sys.stderr, flush=True)
        for label in labels:
            if name not in results[label]:
                results[label][name] = _summarize(label, name, runs[label])
    return results


def _summarize(label: str, name: str, runs: list[dict]) -> dict:
    median = {k: statistics.median(r[k] for r in runs) for k, v in runs[0].items() if isinstance(v, float)}
    summary = ", ".join(f"{k}={median[k]:,.1f}" for k in ("msgs_per_sec", "ops_per_sec", "p50_us") if k in median)
    print(f"  {label:6} {name:14} {summary}, server CPU {median['server_cpu']:.0%}, "
          f"generator CPU {median['client_cpu']:.0%}", file=sys.stderr, flush=True)
    return {"runs": runs, "median": median}


def _cell(res: dict | None, case: str, metric: str, fmt: str) -> tuple[str, float | None]:
    r = (res or {}).get(case, {})
    if "error" in r:
        return "error", None
    if "median" not in r:
        return "", None
    v = r["median"][metric]
    return (f"{v:,.0f}" if fmt == "rate" else f"{v:,.1f}"), v


def format_table(info: dict, go: dict, rillet: dict | None, names: list[str], repeat: int) -> str:
    out = [f"{info['cpu']}, {info['cores']} cores, Python {info['python']}, {info['nats_server']}, "
           f"Rillet {info['rillet_commit']}, {info['date']}; JetStream, median of {repeat} runs", ""]
    if rillet is None:
        out += ["| case | Go nats-server |", "|---|---:|"]
    else:
        out += ["| case | Go nats-server | Rillet | Rillet/Go | target |", "|---|---:|---:|---:|---|"]
    for case, metric, label, fmt, target in ROWS:
        if case not in names:
            continue
        g, gv = _cell(go, case, metric, fmt)
        if rillet is None:
            out.append(f"| {label} | {g} |")
            continue
        r, rv = _cell(rillet, case, metric, fmt)
        ratio = f"{rv / gv:.2f}" if gv and rv is not None else "n/a"
        text = ""
        if target:
            text = target[0] + ("" if ratio == "n/a" else " ✅" if target[1](rv / gv) else " ❌")
        out.append(f"| {label} | {g} | {r} | {ratio} | {text} |")
    return "\n".join(out)


def errors(results: dict) -> list[str]:
    return [f"{label} {case}: {r['error']}" for label, res in results.items() if res
            for case, r in res.items() if "error" in r]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compare_js", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--only", help="comma-separated subset of: " + ",".join(jsbench.BENCHMARKS))
    ap.add_argument("--seconds", type=float, default=2.0, help="publishing time per publish run (default 2)")
    ap.add_argument("--msgs", type=int, default=50_000,
                    help="messages pre-filled for the consume cases (default 50000)")
    ap.add_argument("--requests", type=int, default=5000, help="direct gets per run (default 5000)")
    ap.add_argument("--go-only", action="store_true", help="benchmark only the Go nats-server")
    ap.add_argument("--rillet-cmd", help="command starting Rillet; {host}/{port} placeholders, "
                                         "else '-a HOST -p PORT' is appended; the JetStream flags "
                                         "(-js -sd DIR, or -c FILE) are appended in any case")
    ap.add_argument("--json", metavar="OUT", help="also save all results to this file")
    args = ap.parse_args(argv)
    names = jsbench.parse_only(args.only)

    info = machine_info()
    labels = ["go"] if args.go_only else ["go", "rillet"]
    results = bench_all(labels, names, args)
    go, rillet = results["go"], results.get("rillet")

    print(format_table(info, go, rillet, names, args.repeat))
    if errs := errors(results):
        print("\nErrors:\n" + "\n".join(f"- {e}" for e in errs))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "repeat": args.repeat,
                                               "go": go, "rillet": rillet}, indent=2))


if __name__ == "__main__":
    main()
