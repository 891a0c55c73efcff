"""MQTT: Rillet against the Go nats-server's MQTT on the same machine, same load, same client.

    flock /tmp/heavy.lock python -m benchmarks.mqtt [--repeat 1] [--only qos0_pub,qos1_pubsub] [--count N]
        [--base DIR] [--tree DIR] [--servers go,base,rillet] [--profile DIR]

Each server runs from a config file with JetStream (a fresh store directory per run), a server_name and an
``mqtt {}`` port. The client speaks MQTT 3.1.1 itself on blocking sockets (pre-encoded packets through
``rillet.mqtt.codec``), publisher and subscriber in separate processes, so the client costs the same
against both servers. Cases alternate between the servers. The table shows the median of ``--repeat``
runs and the ratio Rillet/Go (higher is better), the server process's CPU time per message (user +
system, from /proc, over the case: what the server spent, robust when the machine is shared; lower is better)
and how busy it was while the messages flowed (cores: its CPU time over the wall time from the publisher's
first message to the last one received, sampled every 10 ms; ~1.0 for Rillet means it is CPU-bound on its one
core, below that it waited on something).
``--base DIR`` runs a second Rillet from another source tree (e.g. ``git archive <commit> | tar -x -C DIR``)
beside this one, alternating, for an A/B in the same run; ``--profile DIR`` records each Rillet run with
py-spy (raw collapsed stacks, for profiles only: py-spy takes CPU of its own).

| case | what |
|---|---|
| qos0_pub | one publisher, QoS 0, 128 B, no subscriber: msgs/s until the PINGRESP after the last |
| qos0_pubsub | one publisher -> one QoS 0 subscriber, 128 B: msgs/s until the subscriber has them all |
| qos1_pub | QoS 1 publisher (all PUBACKs awaited), no subscriber: `$MQTT_msgs` keeps nothing, 128 B: msgs/s |
| qos1_pubsub | QoS 1 publisher (all PUBACKs awaited) -> QoS 1 subscriber (PUBACKs sent), 128 B: msgs/s |
| retained | 2000 retained messages set (QoS 1), then a new subscriber gets them all: retained msgs/s read |
| connect | sequential CONNECT (persistent session) + CONNACK + DISCONNECT: connections/s (after one untimed connect that makes the account's MQTT streams) |
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from rillet.mqtt import codec as C

HOST = "127.0.0.1"
CASES = ["qos0_pub", "qos0_pubsub", "qos1_pub", "qos1_pubsub", "retained", "connect"]
PAYLOAD = b"x" * 128


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, label: str, tmp: str, tree: str | None = None) -> None:
        self.label = label
        self.port, self.mport = free_port(), free_port()
        store = tempfile.mkdtemp(dir=tmp)
        conf = os.path.join(tmp, f"{label}-{self.mport}.conf")
        with open(conf, "w") as f:
            f.write(f"listen: {HOST}:{self.port}\nserver_name: bench\njetstream {{ store_dir: \"{store}\" }}\n"
                    f"mqtt {{ listen: {HOST}:{self.mport} }}\n")
        cmd = [shutil.which("nats-server") or "nats-server"] if label == "go" else \
            [sys.executable, "-m", "rillet.server"]
        # (a Rillet from another tree: its directory first on sys.path, as ``python -m`` puts the cwd there)
        self.proc = subprocess.Popen(cmd + ["-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     cwd=tree)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection((HOST, self.mport), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{label}: MQTT port not up")

    def cpu(self) -> float:
        """The server process's CPU seconds so far (user + system, every thread)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def sampler(self) -> CpuSampler:
        return CpuSampler(self)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class CpuSampler(threading.Thread):
    """The server's CPU seconds every 10 ms (wall clock: ``time.perf_counter``, the clock the client processes
    time their messages with), for its utilisation over a run's timed window (``cores``)."""

    def __init__(self, srv: Server) -> None:
        super().__init__(daemon=True)
        self.srv = srv
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.samples.append((time.perf_counter(), self.srv.cpu()))
            except OSError:
                return
            self.halt.wait(0.01)

    def cores(self, t0: float, t1: float) -> float | None:
        """CPU seconds per wall second between the samples around [t0, t1] (None: no timed window, or too
        short to say)."""
        before = [s for s in self.samples if s[0] <= t0]
        after = [s for s in self.samples if s[0] >= t1]
        if not before or not after or after[0][0] - before[-1][0] < 0.1:
            return None
        a, b = before[-1], after[0]
        return (b[1] - a[1]) / (b[0] - a[0])


# the timed window of the last message case (perf_counter from the client processes): publisher's start, end
WINDOW: list[float] = []


# ---- a blocking MQTT client ------------------------------------------------------------------------------

def _connect(port: int, cid: str, clean: bool = True) -> socket.socket:
    s = socket.create_connection((HOST, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(C.encode(C.Connect(cid, 4, clean, 0)))
    ack = _recv_exact(s, 4)
    if ack[0] != 0x20 or ack[3] != 0:
        raise RuntimeError(f"CONNACK refused: {ack!r}")
    return s


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise RuntimeError("connection closed")
        buf += b
    return bytes(buf)


def _subscribe(s: socket.socket, topic: str, qos: int) -> None:
    s.sendall(C.encode(C.Subscribe(1, [(topic, C.SubOpts(qos))])))
    ack = _recv_exact(s, 5)
    if ack[0] != 0x90 or ack[4] != qos:
        raise RuntimeError(f"SUBACK refused: {ack!r}")


def _ping(s: socket.socket) -> None:
    s.sendall(b"\xc0\x00")
    buf = b""
    while not buf.endswith(b"\xd0\x00"):
        b = s.recv(65536)
        if not b:
            raise RuntimeError("connection closed")
        buf = (buf + b)[-2:]


def _sub_proc(port: int, qos: int, n: int, ready, q) -> None:
    try:
        s = _connect(port, f"bsub{os.getpid()}")
        _subscribe(s, "bench/t", qos)
        frame = len(C.encode(C.Publish("bench/t", PAYLOAD, qos, pi=1 if qos else 0)))
        pi_at = frame - len(PAYLOAD) - 2  # (every frame the same size: the packet id just before the payload)
        ready.set()
        got = 0
        pending = b""
        buf = bytearray(1 << 20)
        while got < n:
            k = s.recv_into(buf)
            if not k:
                raise RuntimeError("closed")
            if qos == 0:
                pending_len = len(pending) + k
                got += pending_len // frame
                pending = b"\0" * (pending_len % frame)
                continue
            data = pending + bytes(buf[:k])
            whole = len(data) // frame * frame
            acks = bytearray()
            for off in range(0, whole, frame):
                pi = data[off + pi_at:off + pi_at + 2]
                acks += b"\x40\x02" + pi
            got += whole // frame
            pending = data[whole:]
            if acks:
                s.sendall(acks)
        q.put(("sub", time.perf_counter()))
        s.close()
    except Exception as e:  # reported to the parent
        q.put(("error", f"subscriber: {e}"))


def _pub_proc(port: int, qos: int, n: int, ready, q) -> None:
    try:
        if ready is not None:
            ready.wait(30)
        s = _connect(port, f"bpub{os.getpid()}")
        if qos == 0:
            one = C.encode(C.Publish("bench/t", PAYLOAD))
            chunk = one * 500
            t0 = time.perf_counter()
            sent = 0
            while sent < n:
                k = min(500, n - sent)
                s.sendall(chunk if k == 500 else one * k)
                sent += k
            _ping(s)
        else:
            frames = [C.encode(C.Publish("bench/t", PAYLOAD, 1, pi=(i % 65535) + 1)) for i in range(n)]
            t0 = time.perf_counter()
            window = 1000
            acked = 0
            sent = 0
            buf = b""
            while acked < n:
                while sent < n and sent - acked < window:
                    k = min(window - (sent - acked), n - sent, 200)
                    s.sendall(b"".join(frames[sent:sent + k]))
                    sent += k
                b = s.recv(65536)
                if not b:
                    raise RuntimeError("closed")
                buf += b
                acked += len(buf) // 4
                buf = buf[len(buf) // 4 * 4:]
        q.put(("pub", t0, time.perf_counter()))
        s.close()
    except Exception as e:
        q.put(("error", f"publisher: {e}"))


def _pubsub(port: int, qos: int, n: int, with_sub: bool, mark=None) -> float:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ready = ctx.Event() if with_sub else None
    procs = []
    if with_sub:
        procs.append(ctx.Process(target=_sub_proc, args=(port, qos, n, ready, q)))
    procs.append(ctx.Process(target=_pub_proc, args=(port, qos, n, ready, q)))
    for p in procs:
        p.start()
    if mark is not None:  # (the server's CPU counted from here: the subscriber's session and consumer made)
        if ready is not None:
            ready.wait(30)
        mark()
    res = {}
    for _ in procs:
        r = q.get(timeout=300)
        if r[0] == "error":
            for p in procs:
                p.kill()
            raise RuntimeError(r[1])
        res[r[0]] = r[1:]
    for p in procs:
        p.join(30)
    t0 = res["pub"][0]
    t1 = res["sub"][0] if with_sub else res["pub"][1]
    WINDOW[:] = [t0, t1]
    return n / (t1 - t0)


def _retained(port: int, m: int = 2000) -> float:
    s = _connect(port, "rpub")
    s.sendall(b"".join(C.encode(C.Publish(f"ret/{i}", PAYLOAD, 1, True, pi=i + 1)) for i in range(m)))
    _recv_exact(s, 4 * m)
    s.close()
    t0 = time.perf_counter()
    r = _connect(port, "rsub")
    r.sendall(C.encode(C.Subscribe(1, [("ret/#", C.SubOpts(0))])))
    d = C.Decoder(server=False)
    d.version = 4
    got = 0
    r.settimeout(30)  # (nats-server has been seen to send fewer than all of them: an error, not a hang)
    while got < m:
        try:
            b = r.recv(1 << 20)
        except socket.timeout:
            raise RuntimeError(f"retained: {got} of {m} messages within 30 s") from None
        if not b:
            raise RuntimeError("closed")
        got += sum(1 for p in d.feed(b) if isinstance(p, C.Publish))
    dt = time.perf_counter() - t0
    r.close()
    return m / dt


def _connects(port: int, k: int = 300) -> float:
    s = _connect(port, "warmup", clean=False)  # (untimed: the first connect creates the account's MQTT streams)
    s.sendall(b"\xe0\x00")
    s.close()
    t0 = time.perf_counter()
    for i in range(k):
        s = _connect(port, f"persist{i}", clean=False)
        s.sendall(b"\xe0\x00")
        s.close()
    return k / (time.perf_counter() - t0)


def case_size(case: str, count: int) -> int:
    """Messages (or connections) one run of ``case`` handles: what its CPU time is divided by."""
    return {"qos0_pub": count, "qos0_pubsub": count, "qos1_pub": max(count // 10, 1000),
            "qos1_pubsub": max(count // 10, 1000),
            "retained": 2 * 2000, "connect": 300}[case]


def run_case(port: int, case: str, count: int, mark=None) -> float:
    """One run of ``case``; ``mark()`` is called when the timed part begins (the message cases: after the
    subscriber's SUBACK; else at once)."""
    if case == "qos0_pub":
        return _pubsub(port, 0, count, False, mark)
    if case == "qos0_pubsub":
        return _pubsub(port, 0, count, True, mark)
    if case == "qos1_pub":
        return _pubsub(port, 1, case_size(case, count), False, mark)
    if case == "qos1_pubsub":
        return _pubsub(port, 1, case_size(case, count), True, mark)
    if mark is not None:
        mark()
    if case == "retained":
        return _retained(port)
    if case == "connect":
        return _connects(port)
    raise ValueError(case)


def _profiler(pid: int, out: str) -> subprocess.Popen:
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "400",
                             "--output", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--count", type=int, default=200_000, help="QoS 0 messages per run (QoS 1: a tenth)")
    ap.add_argument("--base", default="", help="a second Rillet source tree to run beside this one (A/B)")
    ap.add_argument("--tree", default="", help="the source tree of the Rillet labelled rillet (default: the "
                    "installed one)")
    ap.add_argument("--servers", default="", help="which of go,base,rillet to run (default: all there are)")
    ap.add_argument("--profile", default="", help="directory for py-spy's raw stacks of each Rillet run")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or c in args.only.split(",")]
    labels = ["go"] + (["base"] if args.base else []) + ["rillet"]
    if args.servers:
        labels = [x for x in labels if x in args.servers.split(",")]
    trees = {"base": os.path.abspath(args.base) if args.base else None,
             "rillet": os.path.abspath(args.tree) if args.tree else None}
    results: dict[str, dict[str, list[float]]] = {c: {x: [] for x in labels} for c in cases}
    cpu: dict[str, dict[str, list[float]]] = {c: {x: [] for x in labels} for c in cases}
    busy: dict[str, dict[str, list[float]]] = {c: {x: [] for x in labels} for c in cases}
    tmp = tempfile.mkdtemp(prefix="mqttbench-")
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    try:
        for case in cases:
            for rep in range(args.repeat):
                for label in labels:
                    srv = Server(label, tmp, trees.get(label))
                    prof = None
                    try:
                        if args.profile and label != "go":
                            prof = _profiler(srv.proc.pid, os.path.join(args.profile, f"{case}-{label}-{rep}.txt"))
                            time.sleep(1)
                        c0 = [0.0]
                        smp = srv.sampler()
                        smp.start()
                        WINDOW.clear()
                        v = run_case(srv.mport, case, args.count, lambda: c0.__setitem__(0, srv.cpu()))
                        us = (srv.cpu() - c0[0]) * 1e6 / case_size(case, args.count)
                        time.sleep(0.03)  # (a sample after the window's end)
                        smp.halt.set()
                        smp.join()
                        cores = smp.cores(*WINDOW) if WINDOW else None
                    finally:
                        srv.stop()
                        if prof is not None:
                            prof.wait(30)
                    results[case][label].append(v)
                    cpu[case][label].append(us)
                    if cores is not None:
                        busy[case][label].append(cores)
                    print(f"{case} {label}: {v:,.0f}/s, {us:.1f} us CPU/msg" +
                          (f", {cores:.2f} cores busy" if cores is not None else ""), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    print(f"\nMQTT, median of {args.repeat} run(s); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    ratio_heads = [f"{x}/go" for x in labels if x != "go" and "go" in labels]
    print("| case | " + " | ".join(labels) + " | " + "".join(h + " | " for h in ratio_heads) +
          "server CPU us/msg (" + ", ".join(labels) + ") | server cores busy |")
    nratio = len(labels) - 1 if "go" in labels else 0
    print("|---|" + "---:|" * (len(labels) + nratio + 2))
    for case in cases:
        med = {x: statistics.median(results[case][x]) for x in labels}
        us = ", ".join(f"{statistics.median(cpu[case][x]):.1f}" for x in labels)
        ratios = [f"{med[x] / med['go']:.2f}" for x in labels if x != "go" and "go" in labels]
        cores = ", ".join(f"{statistics.median(busy[case][x]):.2f}" if busy[case][x] else "-" for x in labels)
        print(f"| {case} | " + " | ".join(f"{med[x]:,.0f}/s" for x in labels) + " | " +
              " | ".join(ratios) + (" | " if ratios else "") + us + " | " + cores + " |")


if __name__ == "__main__":
    main()
