"""A NATS load generator that speaks the text protocol directly on blocking sockets.

nats-py would be the bottleneck, so the throughput paths use raw sockets: publishers write
pre-built 64 KiB buffers of PUB frames with sendall, subscribers recv_into a 1 MiB buffer and
count MSG frames. Every role runs in its own process (fork) so the generator is not limited by
one GIL; a barrier makes sure every subscription is registered (SUB + PING/PONG) before the
first publish.

    python -m benchmarks.loadgen --url nats://127.0.0.1:4222 [--only pub16,reqrep] [--seconds 2]
    python -m benchmarks.loadgen --selftest      # the generator's own ceiling, against a dummy server
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import time
from urllib.parse import urlsplit

CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
           b'"no_responders":true,"protocol":1}\r\n')
BUF_SIZE = 1 << 20      # receive buffer
CHUNK = 64 * 1024       # publisher write size
FAST_SPAN = 64 * 1024   # bytes compared at once by the subscriber's fast path
IO_TIMEOUT = 30.0       # no socket operation may block longer than this
POLL = 0.05             # idle receive timeout, to notice the stop event
STALL = 5.0             # give up when no message arrived for this long after publishing ended

# name -> (payload size, subscribers, queue group); "reqrep" is handled separately.
PUBSUB = {
    "pub16": (16, 0, None),
    "pub128": (128, 0, None),
    "pubsub16": (16, 1, None),
    "fanout5": (16, 5, None),
    "queue3": (16, 3, "q"),
}
BENCHMARKS = [*PUBSUB, "reqrep"]
DESCRIPTIONS = {
    "pub16": "publish-only, 16 B",
    "pub128": "publish-only, 128 B",
    "pubsub16": "1 pub -> 1 sub, 16 B",
    "fanout5": "1 pub -> 5 subs, 16 B (delivered)",
    "queue3": "1 pub -> queue group of 3, 16 B",
    "reqrep": "request/reply, 16 B",
}


class ProtocolError(Exception):
    pass


def parse_url(url: str) -> tuple[str, int]:
    u = urlsplit(url if "://" in url else "nats://" + url)
    return u.hostname or "127.0.0.1", u.port or 4222


class Conn:
    """One client connection: blocking socket, a receive buffer and a frame parser."""

    def __init__(self, url: str):
        self.sock = socket.create_connection(parse_url(url), timeout=IO_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(BUF_SIZE)
        self.view = memoryview(self.buf)
        self.pos = self.end = 0  # unparsed bytes are buf[pos:end]
        self._frame = b""        # the last MSG frame seen, and FAST_SPAN bytes of repeats of it
        self._run = memoryview(b"")
        op, info, _, _ = self.next_frame()
        if op != b"INFO":
            raise ProtocolError(f"expected INFO, got {op!r}")
        self.info = json.loads(info)
        self.sock.sendall(CONNECT)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        """Receive more bytes, first making at least FAST_SPAN bytes of room at the tail."""
        if self.pos == self.end:
            self.pos = self.end = 0
        elif len(self.buf) - self.end < FAST_SPAN:
            rest = self.end - self.pos
            if len(self.buf) - rest < FAST_SPAN:  # a frame bigger than the buffer: grow it
                self.view.release()
                self.buf.extend(bytes(len(self.buf)))
                self.view = memoryview(self.buf)
            self.buf[:rest] = self.buf[self.pos:self.end]
            self.pos, self.end = 0, rest
        n = self.sock.recv_into(self.view[self.end:])
        if n == 0:
            raise ConnectionError("server closed the connection")
        self.end += n

    def _parse(self):
        """Parse one complete frame at pos, or return None if more bytes are needed.

        Returns (op, args, start, end): for MSG/HMSG, args are the header fields and the payload
        is buf[start:end]; for other ops args is the rest of the line.
        """
        buf, pos = self.buf, self.pos
        nl = buf.find(b"\r\n", pos, self.end)
        if nl < 0:
            return None
        op, _, rest = bytes(buf[pos:nl]).partition(b" ")
        if op == b"MSG" or op == b"HMSG":
            args = rest.split()
            start = nl + 2
            stop = start + int(args[-1])
            if stop + 2 > self.end:
                return None
            if buf[stop:stop + 2] != b"\r\n":
                raise ProtocolError("MSG payload not followed by CRLF")
            self.pos = stop + 2
            return op, args, start, stop
        self.pos = nl + 2
        if op == b"PING":
            self.sock.sendall(b"PONG\r\n")
        elif op == b"-ERR":
            raise ProtocolError(rest.decode(errors="replace"))
        return op, rest, 0, 0

    def next_frame(self):
        while (frame := self._parse()) is None:
            self._fill()
        return frame

    def next_msg(self):
        """The next MSG/HMSG frame (other frames are handled and skipped)."""
        while True:
            frame = self.next_frame()
            if frame[0] in (b"MSG", b"HMSG"):
                return frame

    def ping(self) -> None:
        """Round trip to the server: everything sent before has been processed."""
        self.sock.sendall(b"PING\r\n")
        while self.next_frame()[0] != b"PONG":
            pass

    def count_msgs(self) -> int:
        """Receive once and count the complete MSG frames now buffered.

        Fast path: a subscription's frames are usually byte-identical (same subject, sid and
        payload), so runs of frames equal to the last parsed one are matched with one C-level
        comparison against a pre-built repetition of it (halving the run on mismatch). Anything
        else goes through the full parser.
        """
        self._fill()
        buf, n = self.buf, 0
        while True:
            flen = len(self._frame)
            if flen:
                k = min((self.end - self.pos) // flen, len(self._run) // flen)
                while k and not buf.startswith(self._run[:k * flen], self.pos):
                    k //= 2
                n += k
                self.pos += k * flen
            begin = self.pos
            frame = self._parse()
            if frame is None:
                return n
            if frame[0] in (b"MSG", b"HMSG"):
                n += 1
                raw = bytes(buf[begin:self.pos])
                if raw != self._frame:
                    self._frame = raw
                    self._run = memoryview(raw * max(1, FAST_SPAN // len(raw)))


# --- worker processes --------------------------------------------------------------------

def _guard(errors, fn, *args):
    """Process target: run fn, reporting any exception to the parent."""
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001 - reported, then the process exits non-zero
        errors.put(f"{fn.__name__}: {type(e).__name__}: {e}")
        sys.exit(1)


# Shared per-process stats (doubles): publisher [t0, t_end, sent, cpu], subscriber [n, first, last, cpu].
T0, TEND, SENT, CPU = range(4)
NRECV, FIRST, LAST = range(3)


def _publisher(url, subject, size, count, seconds, barrier, stats):
    c = Conn(url)
    c.ping()
    frame = b"PUB %s %d\r\n%s\r\n" % (subject, size, b"x" * size)
    per_chunk = max(1, CHUNK // len(frame))
    chunk, send = frame * per_chunk, c.sock.sendall
    barrier.wait(IO_TIMEOUT)
    cpu0, t0 = time.process_time(), time.perf_counter()
    stats[T0] = t0
    if count:
        for _ in range(count // per_chunk):
            send(chunk)
        if count % per_chunk:
            send(frame * (count % per_chunk))
        sent = count
    else:
        sent, deadline = 0, t0 + seconds
        while time.perf_counter() < deadline:
            send(chunk)
            sent += per_chunk
    c.ping()  # the server has processed every PUB
    stats[TEND] = time.perf_counter()
    stats[SENT] = sent
    stats[CPU] = time.process_time() - cpu0
    c.close()


def _subscriber(url, subject, queue, barrier, stop, stats):
    c = Conn(url)
    c.send(b"SUB %s %s1\r\n" % (subject, queue + b" " if queue else b""))
    c.ping()
    if barrier is not None:
        barrier.wait(IO_TIMEOUT)
    c.sock.settimeout(POLL)
    cpu0, n = time.process_time(), 0
    while True:
        try:
            k = c.count_msgs()
        except TimeoutError:
            if stop.is_set():
                break
            continue
        if k:
            now = time.perf_counter()
            if not n:
                stats[FIRST] = now
            n += k
            stats[NRECV], stats[LAST] = n, now
    stats[CPU] = time.process_time() - cpu0
    c.close()


def _responder(url, subject, barrier, stop):
    c = Conn(url)
    c.send(b"SUB %s 1\r\n" % subject)
    c.ping()
    barrier.wait(IO_TIMEOUT)
    c.sock.settimeout(POLL)
    while True:
        try:
            op, args, start, end = c.next_msg()
        except TimeoutError:
            if stop.is_set():
                break
            continue
        if op == b"MSG" and len(args) == 4:  # MSG subject sid reply size: echo the payload
            c.send(b"PUB %s %d\r\n%s\r\n" % (args[2], end - start, c.buf[start:end]))
    c.close()


# --- benchmarks ------------------------------------------------------------------------------

class BenchmarkError(Exception):
    pass


def _ctx():
    return mp.get_context("fork")


def _finish(procs, stop, errors) -> None:
    stop.set()
    for p in procs:
        p.join(2 * POLL + 1)
        if p.is_alive():
            p.terminate()
            p.join()
    if not errors.empty():
        raise BenchmarkError(errors.get())
    if any(p.exitcode for p in procs):
        raise BenchmarkError(f"worker exit codes {[p.exitcode for p in procs]}")


def run_pubsub(url, name, size, nsubs, queue=None, count=None, seconds=2.0) -> dict:
    ctx = _ctx()
    subject = b"bench.%s" % name.encode()
    qname = queue.encode() if queue else None
    barrier, stop, errors = ctx.Barrier(nsubs + 1), ctx.Event(), ctx.SimpleQueue()
    pstats = ctx.Array("d", 4, lock=False)
    sstats = [ctx.Array("d", 4, lock=False) for _ in range(nsubs)]
    subs = [ctx.Process(target=_guard, daemon=True,
                        args=(errors, _subscriber, url, subject, qname, barrier, stop, s))
            for s in sstats]
    pub = ctx.Process(target=_guard, daemon=True,
                      args=(errors, _publisher, url, subject, size, count, seconds, barrier, pstats))
    procs = [*subs, pub]
    for p in procs:
        p.start()
    try:
        # Wait for the publisher, then for every expected message (or a stall / dead worker).
        received, progress_at = -1, time.monotonic()
        while True:
            time.sleep(0.01)
            if any(p.exitcode for p in procs) or not errors.empty():
                break
            if pub.is_alive():
                progress_at = time.monotonic()
                continue
            total = sum(s[NRECV] for s in sstats)
            expected = pstats[SENT] * (0 if not nsubs else 1 if queue else nsubs)
            if total >= expected:
                break
            if total != received:
                received, progress_at = total, time.monotonic()
            elif time.monotonic() - progress_at > STALL:
                raise BenchmarkError(f"stalled: received {total:.0f} of {expected:.0f} messages")
    finally:
        _finish(procs, stop, errors)

    sent = int(pstats[SENT])
    if nsubs:
        elapsed = max(s[LAST] for s in sstats) - pstats[T0]
        delivered = int(sum(s[NRECV] for s in sstats))
    else:
        elapsed = pstats[TEND] - pstats[T0]
        delivered = 0
    msgs = delivered if nsubs else sent
    return {
        "name": name, "size": size, "subs": nsubs, "sent": sent, "delivered": delivered,
        "elapsed": elapsed,
        "msgs_per_sec": msgs / elapsed,
        "mb_per_sec": msgs * size / elapsed / 1e6,
        "pub_cpu": pstats[CPU] / elapsed,
        "sub_cpu": max((s[CPU] / elapsed for s in sstats), default=0.0),
    }


def run_reqrep(url, requests=5000, size=16, warmup=200) -> dict:
    ctx = _ctx()
    subject = b"bench.svc"
    barrier, stop, errors = ctx.Barrier(2), ctx.Event(), ctx.SimpleQueue()
    responder = ctx.Process(target=_guard, daemon=True,
                            args=(errors, _responder, url, subject, barrier, stop))
    responder.start()
    lat = []
    try:
        c = Conn(url)
        inbox = b"_INBOX.%s" % os.urandom(8).hex().encode()
        c.send(b"SUB %s.* 1\r\n" % inbox)
        c.ping()
        barrier.wait(IO_TIMEOUT)
        payload = b"x" * size
        t_start = time.perf_counter()
        for i in range(warmup + requests):
            reply = b"%s.%d" % (inbox, i)
            req = b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, size, payload)
            t0 = time.perf_counter_ns()
            c.send(req)
            while c.next_msg()[1][0] != reply:
                pass
            t1 = time.perf_counter_ns()
            if i == warmup:
                t_start = time.perf_counter()
            if i >= warmup:
                lat.append(t1 - t0)
        elapsed = time.perf_counter() - t_start
        c.close()
    except (OSError, ProtocolError, mp.BrokenBarrierError, TimeoutError) as e:
        _finish([responder], stop, errors)  # prefer the responder's error if it has one
        raise BenchmarkError(f"requester: {type(e).__name__}: {e}") from e
    _finish([responder], stop, errors)
    lat.sort()

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000

    return {"name": "reqrep", "size": size, "requests": requests, "elapsed": elapsed,
            "req_per_sec": requests / elapsed,
            "p50_us": pct(0.50), "p90_us": pct(0.90), "p99_us": pct(0.99), "max_us": lat[-1] / 1000}


def run(url, name, count=None, seconds=2.0, requests=5000) -> dict:
    if name == "reqrep":
        return run_reqrep(url, requests)
    size, nsubs, queue = PUBSUB[name]
    return run_pubsub(url, name, size, nsubs, queue, count, seconds)


# --- self-test: the generator against a dummy server ----------------------------------------

def _dummy_server(lsock, size, seconds, blasted):
    """Speaks just enough NATS: INFO, PONG to a trailing PING, discards PUBs. After a SUB and
    its PING, answers PONG and then streams MSG frames for `seconds` (count into `blasted`)."""
    while True:
        s, _ = lsock.accept()
        with s:
            s.sendall(b'INFO {"server_id":"dummy","version":"0.0.0","proto":1,'
                      b'"max_payload":1048576,"headers":true}\r\n')
            buf, tail, head, sub = bytearray(BUF_SIZE), b"", b"", None
            while n := s.recv_into(buf):
                if len(head) < 4096:  # the control lines at the start of a connection
                    head += buf[:n]
                    for line in head.split(b"\r\n"):
                        if line.startswith(b"SUB "):
                            sub = line.split()
                tail = (tail + buf[max(0, n - 6):n])[-6:]
                if tail == b"PING\r\n":
                    s.sendall(b"PONG\r\n")
                    if sub and not blasted.value:
                        frame = b"MSG %s %s %d\r\n%s\r\n" % (sub[1], sub[-1], size, b"x" * size)
                        per_chunk = CHUNK // len(frame)
                        chunk, sent, deadline = frame * per_chunk, 0, time.perf_counter() + seconds
                        while time.perf_counter() < deadline:
                            s.sendall(chunk)
                            sent += per_chunk
                        blasted.value = sent


def _selftest_one(role, size, seconds) -> dict:
    ctx = _ctx()
    lsock = socket.create_server(("127.0.0.1", 0))
    url = "nats://127.0.0.1:%d" % lsock.getsockname()[1]
    blasted = ctx.Value("q", 0, lock=False)
    server = ctx.Process(target=_dummy_server, args=(lsock, size, seconds, blasted), daemon=True)
    server.start()
    lsock.close()
    try:
        if role == "publisher":
            return run_pubsub(url, "selftest", size, 0, seconds=seconds)
        stop, errors, stats = ctx.Event(), ctx.SimpleQueue(), ctx.Array("d", 4, lock=False)
        sub = ctx.Process(target=_guard, daemon=True,
                          args=(errors, _subscriber, url, b"selftest", None, None, stop, stats))
        sub.start()
        deadline = time.monotonic() + seconds + IO_TIMEOUT
        while not (blasted.value and stats[NRECV] >= blasted.value):
            if time.monotonic() > deadline or sub.exitcode is not None:
                break
            time.sleep(0.01)
        _finish([sub], stop, errors)
        elapsed = stats[LAST] - stats[FIRST]
        return {"msgs_per_sec": stats[NRECV] / elapsed, "mb_per_sec": stats[NRECV] * size / elapsed / 1e6,
                "sub_cpu": stats[CPU] / elapsed}
    finally:
        server.terminate()
        server.join()


def selftest(seconds=2.0) -> list[dict]:
    results = []
    for role in ("publisher", "subscriber"):
        for size in (16, 128):
            r = _selftest_one(role, size, seconds)
            results.append({"role": role, "size": size, "msgs_per_sec": r["msgs_per_sec"],
                            "mb_per_sec": r["mb_per_sec"]})
    return results


# --- CLI -------------------------------------------------------------------------------------

def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


TABLE_HEADER = ("| benchmark | msgs/s | MB/s | p50 µs | p99 µs | generator CPU (pub / max sub) |\n"
                "|---|---:|---:|---:|---:|---|")


def format_row(r: dict) -> str:
    if "error" in r:
        return f"| {DESCRIPTIONS[r['name']]} | error: {r['error']} | | | | |"
    if r["name"] == "reqrep":
        return (f"| {DESCRIPTIONS['reqrep']} | {fmt_rate(r['req_per_sec'])} req/s | | "
                f"{r['p50_us']:.1f} | {r['p99_us']:.1f} | |")
    cpu = f"{r['pub_cpu']:.0%} / {r['sub_cpu']:.0%}" if r["subs"] else f"{r['pub_cpu']:.0%}"
    return f"| {DESCRIPTIONS[r['name']]} | {fmt_rate(r['msgs_per_sec'])} | {r['mb_per_sec']:.1f} | | | {cpu} |"


def parse_only(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {sorted(unknown)}; choose from {BENCHMARKS}")
    return names


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.loadgen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="nats://127.0.0.1:4222")
    ap.add_argument("--only", help="comma-separated subset of: " + ",".join(BENCHMARKS))
    ap.add_argument("--count", type=int, help="messages to publish per run (default: time-based)")
    ap.add_argument("--seconds", type=float, default=2.0, help="publishing time per run (default 2)")
    ap.add_argument("--requests", type=int, default=5000, help="request/reply round trips (default 5000)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--selftest", action="store_true",
                    help="measure the generator's own ceiling against a dummy in-process server")
    args = ap.parse_args(argv)

    if args.selftest:
        results = selftest(args.seconds)
        if args.json:
            print(json.dumps(results, indent=2))
            return
        print("| generator role | payload | msgs/s | MB/s |\n|---|---:|---:|---:|")
        for r in results:
            print(f"| {r['role']} | {r['size']} B | {fmt_rate(r['msgs_per_sec'])} | {r['mb_per_sec']:.1f} |")
        return

    if not args.json:
        print(TABLE_HEADER, flush=True)
    results = []
    for name in parse_only(args.only):
        try:
            results.append(run(args.url, name, args.count, args.seconds, args.requests))
        except (BenchmarkError, OSError, ProtocolError) as e:
            results.append({"name": name, "error": str(e)})
        if not args.json:
            print(format_row(results[-1]), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))

if __name__ == "__main__":
    main()
