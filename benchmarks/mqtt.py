"""MQTT: Rillet against the Go nats-server's MQTT on the same machine, same load, same client.

    flock /tmp/heavy.lock python -m benchmarks.mqtt [--repeat 1] [--only qos0_pub,qos1_pubsub] [--count N]

Each server runs from a config file with JetStream (a fresh store directory per run), a server_name and an
``mqtt {}`` port. The client speaks MQTT 3.1.1 itself on blocking sockets (pre-encoded packets through
``rillet.mqtt.codec``), publisher and subscriber in separate processes, so the client costs the same
against both servers. Cases alternate between the servers. The table shows the median of ``--repeat``
runs and the ratio Rillet/Go (higher is better).

| case | what |
|---|---|
| qos0_pub | one publisher, QoS 0, 128 B, no subscriber: msgs/s until the PINGRESP after the last |
| qos0_pubsub | one publisher -> one QoS 0 subscriber, 128 B: msgs/s until the subscriber has them all |
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
import time

from rillet.mqtt import codec as C

HOST = "127.0.0.1"
CASES = ["qos0_pub", "qos0_pubsub", "qos1_pubsub", "retained", "connect"]
PAYLOAD = b"x" * 128


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, label: str, tmp: str) -> None:
        self.label = label
        self.port, self.mport = free_port(), free_port()
        store = tempfile.mkdtemp(dir=tmp)
        conf = os.path.join(tmp, f"{label}-{self.mport}.conf")
        with open(conf, "w") as f:
            f.write(f"listen: {HOST}:{self.port}\nserver_name: bench\njetstream {{ store_dir: \"{store}\" }}\n"
                    f"mqtt {{ listen: {HOST}:{self.mport} }}\n")
        cmd = [shutil.which("nats-server") or "nats-server"] if label == "go" else \
            [sys.executable, "-m", "rillet.server"]
        self.proc = subprocess.Popen(cmd + ["-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection((HOST, self.mport), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{label}: MQTT port not up")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


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


def _pubsub(port: int, qos: int, n: int, with_sub: bool) -> float:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ready = ctx.Event() if with_sub else None
    procs = []
    if with_sub:
        procs.append(ctx.Process(target=_sub_proc, args=(port, qos, n, ready, q)))
    procs.append(ctx.Process(target=_pub_proc, args=(port, qos, n, ready, q)))
    for p in procs:
        p.start()
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


def run_case(port: int, case: str, count: int) -> float:
    if case == "qos0_pub":
        return _pubsub(port, 0, count, False)
    if case == "qos0_pubsub":
        return _pubsub(port, 0, count, True)
    if case == "qos1_pubsub":
        return _pubsub(port, 1, max(count // 10, 1000), True)
    if case == "retained":
        return _retained(port)
    if case == "connect":
        return _connects(port)
    raise ValueError(case)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--count", type=int, default=200_000, help="QoS 0 messages per run (QoS 1: a tenth)")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or c in args.only.split(",")]
    results: dict[str, dict[str, list[float]]] = {c: {"go": [], "rillet": []} for c in cases}
    tmp = tempfile.mkdtemp(prefix="mqttbench-")
    try:
        for case in cases:
            for _ in range(args.repeat):
                for label in ("go", "rillet"):
                    srv = Server(label, tmp)
                    try:
                        v = run_case(srv.mport, case, args.count)
                    finally:
                        srv.stop()
                    results[case][label].append(v)
                    print(f"{case} {label}: {v:,.0f}/s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    print(f"\nMQTT, median of {args.repeat} run(s); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print("| case | Go nats-server | Rillet | Rillet/Go |")
    print("|---|---:|---:|---:|")
    for case in cases:
        g = statistics.median(results[case]["go"])
        r = statistics.median(results[case]["rillet"])
        print(f"| {case} | {g:,.0f}/s | {r:,.0f}/s | {r / g:.2f} |")


if __name__ == "__main__":
    main()
