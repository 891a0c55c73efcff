"""A large file stream: memory and restart time of Rillet and the Go nats-server side by side.

For each server: start it on an empty store (`-js -sd <tmp>`), create a file stream `LARGE` on
`large.>`, fill it with N messages (128 B, over 1,000 subjects `large.<i % 1000>`) with an
asynchronous raw-socket publisher (a window of PubAcks outstanding), then measure

- resident memory (VmRSS) with the empty stream, after the fill, and after a restart;
- restart: stop the server (SIGTERM, a clean shutdown), start it again on the same store and time
  from the start of the process until `$JS.API.STREAM.INFO.LARGE` answers with all N messages;
- access after the restart: a last-by-subject get (`STREAM.MSG.GET` with `last_by_subj`), a get by
  sequence from the middle, and two consumers starting from the middle (`by_start_sequence`, N/2),
  one unfiltered, one filtered on a single subject: time from the consumer-create request to the
  first message delivered.

    python -m benchmarks.js_large                  # N = 1,000,000, both servers
    python -m benchmarks.js_large --n 10000000 --json large.json
    python -m benchmarks.js_large --only rillet --rillet-cmd "python -m rillet.server"

Memory per stored message is (RSS after the fill - RSS with the empty stream) / N.
Run it under `flock /tmp/rillet-heavy.lock` on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import jsbench, loadgen
from .compare import HOST, Server, free_port, machine_info, rillet_cmd

STREAM = "LARGE"
WINDOW = 2000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def server_cmd(label: str, port: int, store: Path, args) -> list[str]:
    if label == "go":
        return ["nats-server", "-js", "-sd", str(store), "-a", HOST, "-p", str(port)]
    return [*rillet_cmd(port, args.rillet_cmd), "-js", "-sd", str(store)]


def fill(c: jsbench.JsConn, n: int, size: int, subjects: int, window: int) -> float:
    """Publish n messages, keeping `window` PubAcks outstanding; returns msgs/s."""
    payload = b"x" * size
    tail = b" %d\r\n%s\r\n" % (size, payload)
    inbox = c.inbox
    sent = acked = 0
    t0 = time.perf_counter()
    c.sock.settimeout(jsbench.STALL)
    try:
        while acked < n:
            if sent < n and sent - acked < window:
                k = min(window - (sent - acked), n - sent)
                c.send(b"".join([b"PUB large.%d %s.%d%s" % (i % subjects, inbox, i, tail)
                                 for i in range(sent + 1, sent + k + 1)]))
                sent += k
            got, other = c.scan()
            jsbench._check_acks(c, got, other)
            acked += got
    except TimeoutError:
        raise loadgen.BenchmarkError(f"stalled: {acked} of {sent} publishes acknowledged") from None
    finally:
        c.sock.settimeout(loadgen.IO_TIMEOUT)
    return n / (time.perf_counter() - t0)


def wait_stream(url: str, n: int, deadline: float) -> dict:
    """Poll stream info until it answers with n messages."""
    while True:
        try:
            c = jsbench.JsConn(url)
            try:
                info = c.request(f"$JS.API.STREAM.INFO.{STREAM}", timeout=2.0)
                if info["state"]["messages"] == n:
                    return info
            finally:
                c.close()
        except (OSError, loadgen.BenchmarkError, loadgen.ProtocolError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise loadgen.BenchmarkError(f"stream did not answer with {n} messages in time")
        time.sleep(0.02)


def timed(fn, repeat: int = 5) -> float:
    """Median wall time of fn() in milliseconds."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def first_from_middle(c: jsbench.JsConn, n: int, name: str, filter_subject: str | None) -> float:
    """Create a pull consumer starting at n/2 and fetch one message: ms until it arrived."""
    cfg = {"durable_name": name, "deliver_policy": "by_start_sequence", "opt_start_seq": n // 2,
           "ack_policy": "none"}
    if filter_subject:
        cfg["filter_subject"] = filter_subject
    t = time.perf_counter()
    c.request(f"$JS.API.CONSUMER.CREATE.{STREAM}.{name}", {"stream_name": STREAM, "config": cfg})
    reply = b"%s.f%s" % (c.inbox, name.encode())
    body = json.dumps({"batch": 1, "expires": 5_000_000_000}).encode()
    c.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.%s %s %d\r\n%s\r\n" % (
        STREAM.encode(), name.encode(), reply, len(body), body))
    c.sock.settimeout(10)
    try:
        while True:
            op, args, start, end = c.next_msg()
            if args[0].startswith(b"large.") and op == b"MSG":
                ms = (time.perf_counter() - t) * 1000
                break
            if op == b"HMSG" and args[0] == reply:
                raise loadgen.BenchmarkError(f"consumer {name}: status {bytes(c.buf[start:end])[:80]!r}")
    finally:
        c.sock.settimeout(loadgen.IO_TIMEOUT)
    c.request(f"$JS.API.CONSUMER.DELETE.{STREAM}.{name}")
    return ms


def run_server(label: str, args) -> dict:
    r: dict = {}
    with tempfile.TemporaryDirectory(prefix=f"jslarge-{label}-", dir=args.dir) as tmp:
        store = Path(tmp) / "store"
        port = free_port()
        cmd = server_cmd(label, port, store, args)
        with Server(cmd, port) as server:
            c = jsbench.JsConn(server.url)
            cfg = {"name": STREAM, "subjects": ["large.>"], "storage": "file", "retention": "limits",
                   "discard": "old", "num_replicas": 1, "allow_direct": True}
            deadline = time.monotonic() + 10
            while True:
                try:
                    c.request(f"$JS.API.STREAM.CREATE.{STREAM}", cfg)
                    break
                except jsbench.NoResponders:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            time.sleep(0.5)
            r["rss_empty_mb"] = rss_mb(server.proc.pid)
            print(f"  {label}: filling {args.n:,} messages ...", file=sys.stderr, flush=True)
            r["fill_msgs_per_sec"] = fill(c, args.n, args.size, args.subjects, args.window)
            info = c.request(f"$JS.API.STREAM.INFO.{STREAM}")
            if info["state"]["messages"] != args.n:
                raise loadgen.BenchmarkError(f"stream holds {info['state']['messages']} of {args.n}")
            r["store_bytes"] = info["state"]["bytes"]
            time.sleep(1.0)
            r["rss_filled_mb"] = rss_mb(server.proc.pid)
            c.close()
        print(f"  {label}: fill {r['fill_msgs_per_sec']:,.0f} msgs/s, RSS {r['rss_filled_mb']:.0f} MB; "
              "restarting ...", file=sys.stderr, flush=True)
        disk = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
        r["disk_mb"] = disk / 2**20
        server = Server(cmd, port)
        t0 = time.perf_counter()
        with server:
            wait_stream(server.url, args.n, time.monotonic() + 600)
            r["restart_s"] = time.perf_counter() - t0
            r["rss_restarted_mb"] = rss_mb(server.proc.pid)
            c = jsbench.JsConn(server.url)
            subj = iter(range(10**9))
            r["last_by_subject_ms"] = timed(lambda: c.request(
                f"$JS.API.STREAM.MSG.GET.{STREAM}", {"last_by_subj": f"large.{next(subj) * 37 % args.subjects}"}))
            mid = iter(range(args.n // 2, args.n))
            r["get_by_seq_ms"] = timed(lambda: c.request(f"$JS.API.STREAM.MSG.GET.{STREAM}", {"seq": next(mid)}))
            r["consumer_middle_ms"] = first_from_middle(c, args.n, "MID", None)
            r["consumer_middle_filtered_ms"] = first_from_middle(c, args.n, "MIDF", "large.7")
            r["rss_after_access_mb"] = rss_mb(server.proc.pid)
            c.close()
    r["ram_per_msg_b"] = (r["rss_filled_mb"] - r["rss_empty_mb"]) * 2**20 / args.n
    r["ram_per_msg_restarted_b"] = (r["rss_restarted_mb"] - r["rss_empty_mb"]) * 2**20 / args.n
    return r


ROWS = [
    ("fill_msgs_per_sec", "fill rate, async publish (msgs/s)", "{:,.0f}"),
    ("rss_empty_mb", "RSS with the empty stream (MB)", "{:,.0f}"),
    ("rss_filled_mb", "RSS after the fill (MB)", "{:,.0f}"),
    ("ram_per_msg_b", "RAM per stored message after the fill (B)", "{:,.1f}"),
    ("restart_s", "restart until stream info answers (s)", "{:.2f}"),
    ("rss_restarted_mb", "RSS after the restart (MB)", "{:,.0f}"),
    ("ram_per_msg_restarted_b", "RAM per stored message after the restart (B)", "{:,.1f}"),
    ("last_by_subject_ms", "last-by-subject get (ms, median of 5)", "{:.2f}"),
    ("get_by_seq_ms", "get by sequence, middle (ms, median of 5)", "{:.2f}"),
    ("consumer_middle_ms", "consumer from the middle: first message (ms)", "{:.1f}"),
    ("consumer_middle_filtered_ms", "… filtered on one subject (ms)", "{:.1f}"),
    ("rss_after_access_mb", "RSS after those accesses (MB)", "{:,.0f}"),
    ("disk_mb", "store on disk (MB)", "{:,.0f}"),
]


def table(results: dict, n: int, size: int, subjects: int) -> str:
    labels = list(results)
    names = {"go": "Go nats-server", "rillet": "Rillet"}
    m = machine_info()
    lines = [f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, {m['nats_server']}, Rillet {m['rillet_commit']}, "
             f"{m['date']}; {n:,} messages of {size} B on {subjects:,} subjects, file storage", "",
             "| | " + " | ".join(names[x] for x in labels) + (" | Rillet/Go |" if len(labels) == 2 else " |"),
             "|---|" + "---:|" * len(labels) + ("---:|" if len(labels) == 2 else "")]
    for key, label, fmt in ROWS:
        cells = []
        vals = []
        for x in labels:
            v = results[x].get(key) if "error" not in results[x] else None
            cells.append(fmt.format(v) if v is not None else "error")
            vals.append(v)
        row = f"| {label} | " + " | ".join(cells) + " |"
        if len(labels) == 2:
            go, ri = vals[labels.index("go")], vals[labels.index("rillet")]
            row += f" {ri / go:.2f} |" if go and ri is not None else " |"
        lines.append(row)
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="messages (default 1,000,000)")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--window", type=int, default=WINDOW, help="PubAcks outstanding while filling")
    ap.add_argument("--only", choices=["go", "rillet"], help="one server only")
    ap.add_argument("--rillet-cmd", help="command starting Rillet ({host}/{port} or -a/-p appended)")
    ap.add_argument("--dir", default=None, help="where the temporary stores go (default: the system's)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    labels = [args.only] if args.only else ["go", "rillet"]
    results = {}
    for label in labels:
        try:
            results[label] = run_server(label, args)
        except (loadgen.BenchmarkError, loadgen.ProtocolError, OSError, RuntimeError) as e:
            print(f"  {label}: error: {type(e).__name__}: {e}", file=sys.stderr)
            results[label] = {"error": f"{type(e).__name__}: {e}"}
        print(f"  {label}: {json.dumps(results[label])}", file=sys.stderr, flush=True)
    print(table(results, args.n, args.size, args.subjects))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results,
                                               "cmd": shlex.join(sys.argv)}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
