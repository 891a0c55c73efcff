"""A bystander's latency while another client misbehaves: Go nats-server and Rillet side by side.

A bystander process does core request/reply (its own requester and responder connections) at a fixed
rate the whole time. One hostile client after another sends a burst from a raw socket; for each burst the
table gives the bystander's round-trip p50/p99 (and timeouts) for the requests sent while the burst ran,
and how long the burst took on each server:

    subs100k      100,000 SUBs written in one go, then a PING; done at its PONG
    pingflood     PINGs written as fast as the socket takes them for --flood-seconds, PONGs never read
    noresp25k     25,000 requests (PUB with a reply subject) to a subject nobody serves; done when the
                  25,000 "503 no responders" statuses are back (or nothing came for 5 s)
    jsapi30k      30,000 $JS.API.INFO requests in one write; done when all are answered or nothing came
                  for 5 s (nats-server drops a full API queue without answering: the count answered is shown)
    streams       STREAM.CREATE requests for --streams streams (one subject each), all in one write
    subjects2k/5k/10k   one STREAM.CREATE whose config lists 2,000 / 5,000 / 10,000 subjects

    python -m benchmarks.bystander                       # both servers, every burst
    python -m benchmarks.bystander --only subs100k,subjects10k --rillet-only
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from benchmarks.compare import HOST, Server, free_port, machine_info, rillet_cmd

BURSTS = ["subs100k", "pingflood", "noresp25k", "jsapi30k", "streams", "subjects2k", "subjects5k",
          "subjects10k"]
CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":true,"no_responders":true}\r\n'


# ---- raw protocol helpers ----------------------------------------------------------------------------

def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before INFO")
        buf += chunk
    s.sendall(CONNECT + b"PING\r\n")
    wait_for(s, b"PONG\r\n", buf.split(b"\r\n", 1)[1])
    return s


def wait_for(s: socket.socket, token: bytes, buf: bytes = b"") -> bytes:
    while token not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf.split(token, 1)[1]


class Counter(threading.Thread):
    """Reads a socket and counts occurrences of ``token`` (a frame start) until told to stop or closed."""

    def __init__(self, s: socket.socket, token: bytes) -> None:
        super().__init__(daemon=True)
        self.s, self.token = s, token
        self.count = 0
        self.last = time.monotonic()
        self.stop = False

    def run(self) -> None:
        tail = b""
        self.s.settimeout(0.2)
        while not self.stop:
            try:
                chunk = self.s.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            data = tail + chunk
            self.count += data.count(self.token)
            tail = data[-(len(self.token) - 1):]
            self.last = time.monotonic()

    def wait(self, n: int, idle: float, limit: float) -> None:
        end = time.monotonic() + limit
        while self.count < n and time.monotonic() < end and time.monotonic() - self.last < idle \
                and self.is_alive():
            time.sleep(0.01)


# ---- the bystander -----------------------------------------------------------------------------------

def bystander(port: int, rate: float, conn: Any, stop: Any) -> None:
    """Responder and requester on their own connections; sends (t_sent, latency or None) list at the end."""
    resp = connect(port)
    resp.sendall(b"SUB bystander.svc 1\r\nPING\r\n")
    wait_for(resp, b"PONG\r\n")

    def serve() -> None:
        buf = b""
        resp.settimeout(None)
        while True:
            try:
                chunk = resp.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            out = []
            while True:
                i = buf.find(b"\r\n")
                if i < 0:
                    break
                line = buf[:i]
                if line.startswith(b"MSG "):
                    parts = line.split(b" ")
                    size = int(parts[-1])
                    if len(buf) < i + 2 + size + 2:
                        break
                    if len(parts) == 5:
                        out.append(b"PUB %b 2\r\nok\r\n" % parts[3])
                    buf = buf[i + 2 + size + 2:]
                else:
                    if line == b"PING":
                        out.append(b"PONG\r\n")
                    buf = buf[i + 2:]
            if out:
                resp.sendall(b"".join(out))

    threading.Thread(target=serve, daemon=True).start()
    req = connect(port)
    req.sendall(b"SUB bystander.inbox.* 1\r\nPING\r\n")
    wait_for(req, b"PONG\r\n")
    req.settimeout(0.05)
    results: list[tuple[float, float | None]] = []
    period = 1.0 / rate
    seq = 0
    buf = b""
    next_send = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now < next_send:
            time.sleep(next_send - now)
        next_send += period
        seq += 1
        token = b"bystander.inbox.%d" % seq
        t_wall = time.time()
        t0 = time.monotonic()
        try:
            req.sendall(b"PUB bystander.svc %b 2\r\nhi\r\n" % token)
        except OSError:
            results.append((t_wall, None))
            break
        lat = None
        while time.monotonic() - t0 < 5.0:
            if (b"MSG " + token + b" ") in buf:
                lat = time.monotonic() - t0
                buf = buf[buf.index(b"MSG " + token + b" "):]
                break
            try:
                chunk = req.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            buf = (buf + chunk)[-65536:]
            if b"PING\r\n" in chunk:
                req.sendall(b"PONG\r\n")
        results.append((t_wall, lat))
        if lat is None:
            next_send = time.monotonic()  # (a timed-out request is not followed by a catch-up burst)
    conn.send(results)


# ---- the bursts --------------------------------------------------------------------------------------

def burst_subs(port: int, args: Any) -> dict:
    s = connect(port)
    data = b"".join(b"SUB burst.sub.%d %d\r\n" % (i, i) for i in range(100_000)) + b"PING\r\n"
    s.settimeout(300)
    s.sendall(data)
    wait_for(s, b"PONG\r\n")
    s.close()
    return {}


def burst_pingflood(port: int, args: Any) -> dict:
    s = connect(port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    chunk = b"PING\r\n" * 10_000
    s.settimeout(0.5)
    end = time.monotonic() + args.flood_seconds
    sent = 0
    cut = False
    while time.monotonic() < end:
        try:
            sent += s.send(chunk)
        except socket.timeout:
            continue
        except OSError:
            cut = True
            break
    s.close()
    return {"pings_sent": sent // 6, "cut": cut}


def burst_noresp(port: int, args: Any) -> dict:
    s = connect(port)
    s.sendall(b"SUB burst.inbox.* 1\r\nPING\r\n")
    wait_for(s, b"PONG\r\n")
    reader = Counter(s, b"HMSG ")
    reader.start()
    n = 25_000
    s.settimeout(300)
    s.sendall(b"".join(b"PUB burst.nobody burst.inbox.%d 0\r\n\r\n" % i for i in range(n)))
    reader.wait(n, idle=5.0, limit=300)
    reader.stop = True
    s.close()
    return {"answered": reader.count}


def burst_jsapi(port: int, args: Any) -> dict:
    s = connect(port)
    s.sendall(b"SUB burst.inbox.* 1\r\nPING\r\n")
    wait_for(s, b"PONG\r\n")
    reader = Counter(s, b"MSG ")
    reader.start()
    n = 30_000
    s.settimeout(300)
    s.sendall(b"".join(b"PUB $JS.API.INFO burst.inbox.%d 0\r\n\r\n" % i for i in range(n)))
    reader.wait(n, idle=5.0, limit=300)
    reader.stop = True
    s.close()
    return {"answered": reader.count}


def _create(name: str, subjects: list[str]) -> bytes:
    body = json.dumps({"name": name, "subjects": subjects, "storage": "memory"}).encode()
    return b"PUB $JS.API.STREAM.CREATE.%b burst.inbox.%b %d\r\n%b\r\n" % (name.encode(), name.encode(),
                                                                         len(body), body)


def burst_streams(port: int, args: Any) -> dict:
    s = connect(port)
    s.sendall(b"SUB burst.inbox.* 1\r\nPING\r\n")
    wait_for(s, b"PONG\r\n")
    reader = Counter(s, b"MSG ")
    reader.start()
    n = args.streams
    s.sendall(b"".join(_create(f"BURST{i}", [f"burst.stream.{i}"]) for i in range(n)))
    reader.wait(n, idle=10.0, limit=300)
    reader.stop = True
    s.close()
    return {"answered": reader.count}


def burst_subjects(count: int) -> Callable[[int, Any], dict]:
    def run(port: int, args: Any) -> dict:
        s = connect(port)
        s.sendall(b"SUB burst.inbox.* 1\r\nPING\r\n")
        wait_for(s, b"PONG\r\n")
        name = f"WIDE{count}"
        s.settimeout(300)
        t0 = time.monotonic()
        s.sendall(_create(name, [f"wide{count}.{i}.x" for i in range(count)]))
        buf = wait_for(s, b"MSG burst.inbox.")
        took = time.monotonic() - t0
        while b"\r\n" not in buf:
            buf += s.recv(65536)
        size = int(buf.split(b"\r\n", 1)[0].split(b" ")[-1])
        body = buf.split(b"\r\n", 1)[1]
        while len(body) < size:
            body += s.recv(65536)
        ok = b'"error"' not in body[:size]
        s.close()
        return {"create_s": round(took, 3), "ok": ok}
    return run


RUNNERS: dict[str, Callable[[int, Any], dict]] = {
    "subs100k": burst_subs, "pingflood": burst_pingflood, "noresp25k": burst_noresp, "jsapi30k": burst_jsapi,
    "streams": burst_streams, "subjects2k": burst_subjects(2000), "subjects5k": burst_subjects(5000),
    "subjects10k": burst_subjects(10000),
}


# ---- running -----------------------------------------------------------------------------------------

def run_server(label: str, names: list[str], args: Any) -> dict:
    port = free_port()
    store = tempfile.mkdtemp(prefix=f"bystander-{label}-")
    if label == "go":
        cmd = ["nats-server", "-a", HOST, "-p", str(port), "-js", "-sd", store]
    else:
        cmd = [*rillet_cmd(port, args.rillet_cmd), "-js", "-sd", store]
    out: dict[str, Any] = {}
    try:
        with Server(cmd, port) as srv:
            parent, child = mp.Pipe()
            stop = mp.Event()
            proc = mp.Process(target=bystander, args=(port, args.rate, child, stop), daemon=True)
            proc.start()
            time.sleep(1.5)  # warm-up samples
            windows = {}
            for name in names:
                print(f"  {label:6} {name} ...", file=sys.stderr, flush=True)
                t0 = time.time()
                m0 = time.monotonic()
                try:
                    extra = RUNNERS[name](port, args)
                except (OSError, ConnectionError) as e:
                    extra = {"error": repr(e)}
                took = time.monotonic() - m0
                windows[name] = (t0, time.time(), took, extra)
                if srv.proc.poll() is not None:
                    raise RuntimeError(f"{label} server exited during {name}:\n{srv.output()}")
                time.sleep(args.pause)
            stop.set()
            samples = parent.recv() if parent.poll(30) else []
            proc.join(10)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    for name, (t0, t1, took, extra) in windows.items():
        during = [lat for (ts, lat) in samples if t0 <= ts <= t1]
        # a burst shorter than the bystander's period still gets the first request sent after it began
        if not during:
            after = [lat for (ts, lat) in samples if ts > t0][:1]
            during = after
        done = sorted(x for x in during if x is not None)
        if os.environ.get("BYSTANDER_DEBUG"):
            print(name, [None if x is None else round(x * 1000, 2) for x in during], file=sys.stderr)
        res = {"burst_s": round(took, 3), "samples": len(during), "timeouts": len(during) - len(done), **extra}
        if done:
            res["p50_ms"] = round(statistics.median(done) * 1000, 1)
            res["p99_ms"] = round(done[min(len(done) - 1, int(len(done) * 0.99))] * 1000, 1)
            res["max_ms"] = round(done[-1] * 1000, 1)
        out[name] = res
        print(f"  {label:6} {name}: {res}", file=sys.stderr, flush=True)
    return out


def fmt(r: dict | None) -> str:
    if not r:
        return "–"
    if "p99_ms" not in r:
        return f"all {r['timeouts']} timed out"
    t = f", {r['timeouts']} t/o" if r["timeouts"] else ""
    return f"{r['p50_ms']} / {r['p99_ms']}{t}"


def extra_cell(r: dict | None) -> str:
    if not r:
        return ""
    bits = [f"{r['burst_s']} s"]
    for k in ("answered", "pings_sent", "cut", "create_s", "ok", "error"):
        if k in r and k != "create_s":
            bits.append(f"{k} {r[k]}")
    return ", ".join(bits)


def table(info: dict, res: dict, names: list[str]) -> str:
    out = [f"{info['cpu']}, {info['cores']} cores, Python {info['python']}, {info['nats_server']}, "
           f"Rillet {info['rillet_commit']}, {info['date']}; bystander {res['rate']}/s request/reply", "",
           "| burst | Go p50 / p99 ms | Rillet p50 / p99 ms | Go burst | Rillet burst |",
           "|---|---:|---:|---|---|"]
    for n in names:
        g, r = res.get("go", {}).get(n), res.get("rillet", {}).get(n)
        out.append(f"| {n} | {fmt(g)} | {fmt(r)} | {extra_cell(g)} | {extra_cell(r)} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated bursts: " + ",".join(BURSTS))
    ap.add_argument("--go-only", action="store_true")
    ap.add_argument("--rillet-only", action="store_true")
    ap.add_argument("--rillet-cmd", help="command starting Rillet ({host}/{port}, else -a/-p appended)")
    ap.add_argument("--rate", type=float, default=20.0, help="bystander requests per second (20)")
    ap.add_argument("--flood-seconds", type=float, default=5.0, help="length of the PING flood (5)")
    ap.add_argument("--streams", type=int, default=500, help="streams created in the streams burst (500)")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between bursts (1)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else BURSTS
    for n in names:
        if n not in RUNNERS:
            ap.error(f"unknown burst {n!r}")
    labels = ["go"] if args.go_only else ["rillet"] if args.rillet_only else ["go", "rillet"]
    res: dict[str, Any] = {"rate": args.rate}
    for label in labels:
        res[label] = run_server(label, names, args)
    info = machine_info()
    print(table(info, res, names))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": info, **res}, f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
