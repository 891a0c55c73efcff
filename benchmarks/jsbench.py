"""A JetStream load generator that speaks the NATS text protocol directly on blocking sockets.

Like loadgen.py it avoids nats-py on the measured paths: the JetStream API is plain
request/reply on `$JS.API.>` subjects, a publish to a stream is a PUB with a reply subject (the
server answers with a PubAck JSON), consumers deliver MSG frames with `$JS.ACK...` reply subjects.
Every case creates its stream itself (deleting one left over under the same name first).

    python -m benchmarks.jsbench --url nats://127.0.0.1:4222 [--only sync_mem16,pull16] [--seconds 2]
    python -m benchmarks.jsbench --natspy          # raw-socket vs nats-py publish_async, same server
    python -m benchmarks.jsbench --selftest        # the consumer-side framing's ceiling, no server

The `*_always16` cases only mean what they say when the server runs with
`jetstream { sync_interval: always }`; compare_js starts the servers that way for them.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from . import loadgen
from .loadgen import BenchmarkError, ProtocolError

STREAM = "BENCH"
SUBJECT = b"bench.js"
DURABLE = "PULL"
WINDOW = 1000           # outstanding PubAcks of the asynchronous publisher
BATCH = 100             # pull consumer fetch size
API_TIMEOUT = 10.0      # one JetStream API request
STALL = 10.0            # give up when nothing arrived for this long

# name -> case. kind: pub_sync | pub_async | pull | ordered | direct_get.
# sync_always: the server must run with `jetstream { sync_interval: always }`.
CASES = {
    "sync_mem16": dict(kind="pub_sync", storage="memory", size=16),
    "sync_mem1k": dict(kind="pub_sync", storage="memory", size=1024),
    "sync_file16": dict(kind="pub_sync", storage="file", size=16),
    "sync_file1k": dict(kind="pub_sync", storage="file", size=1024),
    "async_mem16": dict(kind="pub_async", storage="memory", size=16),
    "async_mem1k": dict(kind="pub_async", storage="memory", size=1024),
    "async_file16": dict(kind="pub_async", storage="file", size=16),
    "async_file1k": dict(kind="pub_async", storage="file", size=1024),
    "sync_always16": dict(kind="pub_sync", storage="file", size=16, sync_always=True),
    "async_always16": dict(kind="pub_async", storage="file", size=16, sync_always=True),
    "pull16": dict(kind="pull", storage="file", size=16),
    "ordered16": dict(kind="ordered", storage="file", size=16),
    "directget16": dict(kind="direct_get", storage="file", size=16),
}
BENCHMARKS = list(CASES)
DESCRIPTIONS = {
    "sync_mem16": "sync publish, memory, 16 B",
    "sync_mem1k": "sync publish, memory, 1 KB",
    "sync_file16": "sync publish, file, 16 B",
    "sync_file1k": "sync publish, file, 1 KB",
    "async_mem16": f"async publish (window {WINDOW}), memory, 16 B",
    "async_mem1k": f"async publish (window {WINDOW}), memory, 1 KB",
    "async_file16": f"async publish (window {WINDOW}), file, 16 B",
    "async_file1k": f"async publish (window {WINDOW}), file, 1 KB",
    "sync_always16": "sync publish, file, sync_interval always, 16 B",
    "async_always16": f"async publish (window {WINDOW}), file, sync_interval always, 16 B",
    "pull16": f"pull consume, batch {BATCH}, explicit acks, file, 16 B",
    "ordered16": "ordered push consume (flow control, ack none), file, 16 B",
    "directget16": "direct get by sequence, file, 16 B",
}


class JsApiError(BenchmarkError):
    pass


class NoResponders(BenchmarkError):
    pass


def _status(hdrs: bytes) -> tuple[int, str]:
    """(code, description) from a header block's first line; (0, '') when it has no status."""
    parts = hdrs.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2:
        return 0, ""
    return int(parts[1]), parts[2].decode(errors="replace") if len(parts) > 2 else ""


class JsConn(loadgen.Conn):
    """A connection with a wildcard inbox subscription (sid 1) for API replies, PubAcks and
    pulled messages, and a scanner that frames MSG cheaply."""

    def __init__(self, url: str):
        super().__init__(url)
        self.inbox = b"_INBOX.%s" % os.urandom(8).hex().encode()
        self.send(b"SUB %s.* 1\r\n" % self.inbox)
        self.ping()
        self.nreq = 0
        self.region = (0, 0)
        self.last_reply = None

    # --- JetStream API ---

    def request(self, subject: str, body=None, timeout: float = API_TIMEOUT) -> dict:
        """One API request; returns the JSON reply, raises JsApiError on an error reply."""
        self.nreq += 1
        reply = b"%s.r%d" % (self.inbox, self.nreq)
        data = b"" if body is None else json.dumps(body).encode()
        self.send(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply, len(data), data))
        self.sock.settimeout(timeout)
        try:
            while True:
                op, args, start, end = self.next_msg()
                if args[0] != reply:
                    continue  # a late reply to something earlier
                if op == b"HMSG":
                    hlen = int(args[-2])
                    code, desc = _status(bytes(self.buf[start:start + hlen]))
                    if code == 503:
                        raise NoResponders(f"{subject}: no responders")
                    if code:
                        raise JsApiError(f"{subject}: status {code} {desc}")
                    start += hlen
                resp = json.loads(bytes(self.buf[start:end]))
                if "error" in resp:
                    raise JsApiError(f"{subject}: {json.dumps(resp['error'])}")
                return resp
        except TimeoutError:
            raise BenchmarkError(f"{subject}: no reply within {timeout:g} s") from None
        finally:
            self.sock.settimeout(loadgen.IO_TIMEOUT)

    def create_stream(self, storage: str, allow_direct: bool = False) -> dict:
        try:
            self.request(f"$JS.API.STREAM.DELETE.{STREAM}")
        except JsApiError:
            pass  # not found
        cfg = {"name": STREAM, "subjects": [SUBJECT.decode()], "storage": storage,
               "retention": "limits", "discard": "old", "num_replicas": 1, "allow_direct": allow_direct}
        deadline = time.monotonic() + API_TIMEOUT
        while True:  # JetStream may still be starting up
            try:
                return self.request(f"$JS.API.STREAM.CREATE.{STREAM}", cfg)
            except NoResponders:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def delete_stream(self) -> None:
        try:
            self.request(f"$JS.API.STREAM.DELETE.{STREAM}")
        except (BenchmarkError, OSError):
            pass

    def stream_msgs(self) -> int:
        return self.request(f"$JS.API.STREAM.INFO.{STREAM}")["state"]["messages"]

    # --- framing ---

    def count_push(self) -> tuple[int, list]:
        """scan() for a push consumer of this generator's messages, whose payloads are all 'x':
        `x\r\n` ends a MSG frame and nothing else (header lines end in a digit, API replies in
        `}`, status headers in an empty line). When the received span up to the last such end
        holds only MSG frames, they are counted with one C-level count of `MSG ` (the subjects
        and the payloads cannot contain it); anything else goes through scan()."""
        self._fill()
        buf, pos = self.buf, self.pos
        stop = buf.rfind(b"x\r\n", pos, self.end)
        if stop >= 0:
            stop += 3
            if (buf.find(b"HMSG ", pos, stop) < 0 and buf.find(b"MSG %s." % self.inbox, pos, stop) < 0
                    and buf.find(b"-ERR", pos, stop) < 0 and buf.find(b"PING\r\n", pos, stop) < 0):
                n = buf.count(b"MSG ", pos, stop)
                i = buf.rfind(b"MSG ", pos, stop)
                fields = bytes(buf[i + 4:buf.find(b"\r\n", i, stop)]).split(b" ")
                self.last_reply = fields[2] if len(fields) == 4 else None
                self.pos, self.region = stop, (pos, stop)
                return n, []
        return self.scan(fill=False)

    def scan(self, replies: list | None = None, fill: bool = True) -> tuple[int, list]:
        """Receive once and frame everything complete in the buffer.

        MSG frames are only counted (their reply subjects appended to `replies` if given; the
        last one is kept in self.last_reply). Other frames (HMSG, PONG, ...) go through the full
        parser (which answers PING and raises on -ERR) and are returned as (op, args, payload).
        self.region is the span of the buffer that was consumed, for checks on the payloads.
        """
        if fill:
            self._fill()
        buf, pos, end = self.buf, self.pos, self.end
        first, n, other, last = pos, 0, [], None
        while True:
            nl = buf.find(b"\r\n", pos, end)
            if nl < 0:
                break
            if buf.startswith(b"MSG ", pos):
                sp = buf.rfind(b" ", pos, nl)
                stop = nl + 2 + int(buf[sp + 1:nl])
                if stop + 2 > end:
                    break
                if not buf.startswith(b"\r\n", stop):
                    raise ProtocolError("MSG payload not followed by CRLF")
                last = (pos, sp)
                if replies is not None:
                    fields = bytes(buf[pos + 4:sp]).split(b" ")
                    replies.append(fields[2] if len(fields) == 3 else None)
                n += 1
                pos = stop + 2
            else:
                self.pos = pos
                frame = self._parse()
                if frame is None:
                    break
                pos = self.pos
                op, args, start, stop = frame
                other.append((op, args, bytes(buf[start:stop])))
        if last is not None:
            fields = bytes(buf[last[0] + 4:last[1]]).split(b" ")
            self.last_reply = fields[2] if len(fields) == 3 else None
        self.pos, self.region = pos, (first, pos)
        return n, other


def _ack_seq(reply: bytes | None) -> int:
    """Stream sequence from a `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`
    subject (also the longer form with domain and account hash)."""
    toks = (reply or b"").split(b".")
    if reply is None:
        return -1
    if len(toks) == 9:
        return int(toks[5])
    if len(toks) >= 12:
        return int(toks[7])
    raise ProtocolError(f"unexpected ack subject {reply!r}")


# --- publishing ---------------------------------------------------------------------------------

def _pub_frames(c: JsConn, payload: bytes, first: int, k: int) -> bytes:
    """k PUB frames with unique reply subjects <inbox>.<n> (as clients do for PubAcks)."""
    head = b"PUB %s %s." % (SUBJECT, c.inbox)
    tail = b" %d\r\n%s\r\n" % (len(payload), payload)
    return b"".join([b"%s%d%s" % (head, i, tail) for i in range(first, first + k)])


def _check_acks(c: JsConn, n: int, other: list) -> None:
    """Every acknowledgement in the scanned region is a PubAck (has a seq), none is an error."""
    for op, args, data in other:
        if op == b"HMSG":
            code, desc = _status(data[:int(args[-2])])
            raise BenchmarkError(f"publish answered with status {code} {desc}"
                                 + (" (no stream listens)" if code == 503 else ""))
    start, stop = c.region
    if n and (c.buf.count(b'"seq":', start, stop) != n or c.buf.find(b'"error"', start, stop) >= 0):
        i = c.buf.find(b'{"error"', start, stop)
        j = c.buf.find(b"\r\n", i, stop) if i >= 0 else -1
        text = bytes(c.buf[i:j] if j >= 0 else c.buf[start:min(stop, start + 300)]).decode(errors="replace")
        raise BenchmarkError(f"a publish was not acknowledged with a PubAck: {text}")


def publish_sync(c: JsConn, size: int, seconds: float) -> dict:
    """Publish, wait for the PubAck, next: for `seconds`."""
    payload = b"x" * size
    head = b"PUB %s %s." % (SUBJECT, c.inbox)
    tail = b" %d\r\n%s\r\n" % (size, payload)
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline, n = t0 + seconds, 0
    while True:
        n += 1
        reply = b"%s.%d" % (c.inbox, n)
        c.send(b"%s%d%s" % (head, n, tail))
        op, args, start, end = c.next_msg()
        if op != b"MSG" or args[0] != reply:
            raise BenchmarkError(f"unexpected reply {op.decode()} {b' '.join(args).decode()} "
                                 f"{bytes(c.buf[start:end])[:200]!r}")
        ack = json.loads(bytes(c.buf[start:end]))
        if ack.get("seq") != n:
            raise BenchmarkError(f"PubAck {ack} for message {n}")
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    return {"count": n, "elapsed": elapsed, "msgs_per_sec": n / elapsed,
            "client_cpu": (time.process_time() - cpu0) / elapsed}


def publish_async(c: JsConn, size: int, seconds: float | None = None, count: int | None = None,
                  window: int = WINDOW) -> dict:
    """Keep up to `window` PubAcks outstanding: top the window up after every receive. Runs for
    `seconds` (then drains the outstanding acks) or until `count` messages are acknowledged."""
    payload = b"x" * size
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + seconds if seconds is not None else None
    sent = acked = 0
    c.sock.settimeout(STALL)
    try:
        while True:
            sending = (count is None or sent < count) and (deadline is None or time.perf_counter() < deadline)
            if sending and sent - acked < window:
                k = window - (sent - acked)
                if count is not None:
                    k = min(k, count - sent)
                c.send(_pub_frames(c, payload, sent + 1, k))
                sent += k
            if acked == sent and not sending:
                break
            n, other = c.scan()
            _check_acks(c, n, other)
            acked += n
    except TimeoutError:
        raise BenchmarkError(f"stalled: {acked} of {sent} publishes acknowledged") from None
    finally:
        c.sock.settimeout(loadgen.IO_TIMEOUT)
    elapsed = time.perf_counter() - t0
    return {"count": acked, "elapsed": elapsed, "msgs_per_sec": acked / elapsed,
            "client_cpu": (time.process_time() - cpu0) / elapsed}


# --- consuming ----------------------------------------------------------------------------------

def _prefill(c: JsConn, size: int, msgs: int) -> None:
    publish_async(c, size, count=msgs)
    if (have := c.stream_msgs()) != msgs:
        raise BenchmarkError(f"stream holds {have} messages after {msgs} acknowledged publishes")


def pull_consume(c: JsConn, msgs: int) -> dict:
    """A durable pull consumer with explicit acks: fetch BATCH, `+ACK` each message (the acks go
    out in one write together with the next fetch request), until all `msgs` are consumed."""
    c.request(f"$JS.API.CONSUMER.CREATE.{STREAM}.{DURABLE}", {
        "stream_name": STREAM,
        "config": {"durable_name": DURABLE, "ack_policy": "explicit", "deliver_policy": "all",
                   "replay_policy": "instant"}})
    next_subj = b"$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (STREAM.encode(), DURABLE.encode())
    req = json.dumps({"batch": BATCH, "expires": 5_000_000_000}).encode()
    nfetch, got, acks = 0, 0, b""
    c.sock.settimeout(STALL)
    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        while got < msgs:
            nfetch += 1
            c.send(acks + b"PUB %s %s.f%d %d\r\n%s\r\n" % (next_subj, c.inbox, nfetch, len(req), req))
            replies, want = [], min(BATCH, msgs - got)
            while len(replies) < want:
                n, other = c.scan(replies)
                for op, args, data in other:
                    if op == b"HMSG":
                        code, desc = _status(data[:int(args[-2])])
                        if code in (404, 408):  # no messages (yet) / request expired: fetch again
                            want = len(replies)
                        elif code != 100:
                            raise BenchmarkError(f"pull request answered with status {code} {desc}")
            if None in replies:
                raise BenchmarkError("pulled message without an ack reply subject")
            got += len(replies)
            acks = b"".join([b"PUB %s 4\r\n+ACK\r\n" % r for r in replies])
        c.send(acks)
        c.ping()
    except TimeoutError:
        raise BenchmarkError(f"stalled: consumed {got} of {msgs} messages") from None
    finally:
        c.sock.settimeout(loadgen.IO_TIMEOUT)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    # Correctness, outside the timing: every message acknowledged, none left (acks are applied
    # asynchronously, so give the server a moment).
    deadline = time.monotonic() + 5
    while True:
        info = c.request(f"$JS.API.CONSUMER.INFO.{STREAM}.{DURABLE}")
        state = (info.get("num_pending"), info.get("num_ack_pending"), info["ack_floor"]["stream_seq"])
        if state == (0, 0, msgs):
            break
        if time.monotonic() > deadline:
            raise BenchmarkError(f"after consuming: num_pending, num_ack_pending, ack_floor.stream_seq "
                                 f"= {state}, expected (0, 0, {msgs})")
        time.sleep(0.05)
    return {"count": got, "elapsed": elapsed, "msgs_per_sec": got / elapsed, "client_cpu": cpu / elapsed,
            "fetches": nfetch}


def ordered_consume(c: JsConn, msgs: int) -> dict:
    """What an ordered consumer asks for: an ephemeral push consumer, ack none, flow control,
    idle heartbeats, memory state. Answers flow-control requests; counts until `msgs` arrived
    and checks the last one is the stream's last message."""
    deliver = b"%s.ordered" % c.inbox.replace(b"_INBOX.", b"_INBOX.d")
    c.send(b"SUB %s 2\r\n" % deliver)
    c.ping()
    cfg = {"deliver_subject": deliver.decode(), "deliver_policy": "all", "ack_policy": "none",
           "max_deliver": 1, "replay_policy": "instant", "flow_control": True,
           "idle_heartbeat": 5_000_000_000, "mem_storage": True, "num_replicas": 1,
           "inactive_threshold": 300_000_000_000}
    c.nreq += 1
    create = json.dumps({"stream_name": STREAM, "config": cfg}).encode()
    got, fc, created = 0, 0, False
    c.sock.settimeout(STALL)
    cpu0, t0 = time.process_time(), time.perf_counter()
    c.send(b"PUB $JS.API.CONSUMER.CREATE.%s %s.r%d %d\r\n%s\r\n"
           % (STREAM.encode(), c.inbox, c.nreq, len(create), create))
    try:
        while got < msgs or not created:
            n, other = c.count_push()
            if n:
                # MSG frames on sid 1 would be API replies; only the create reply is expected.
                start, stop = c.region
                api = c.buf.count(b"MSG %s.r" % c.inbox, start, stop)
                if api:
                    i = c.buf.find(b"MSG %s.r" % c.inbox, start, stop)
                    text = bytes(c.buf[i:min(stop, i + 400)])
                    if b'"error"' in text:
                        raise BenchmarkError("consumer create: " + text.decode(errors="replace"))
                    created = True
                got += n - api
            for op, args, data in other:
                if op != b"HMSG":
                    continue
                code, desc = _status(data[:int(args[-2])])
                if code != 100:
                    raise BenchmarkError(f"ordered consumer got status {code} {desc}")
                if len(args) == 5:  # flow control request (or stalled heartbeat): answer it
                    c.send(b"PUB %s 0\r\n\r\n" % args[2])
                    fc += 1
    except TimeoutError:
        raise BenchmarkError(f"stalled: received {got} of {msgs} messages") from None
    finally:
        c.sock.settimeout(loadgen.IO_TIMEOUT)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if got != msgs or _ack_seq(c.last_reply) != msgs:
        raise BenchmarkError(f"received {got} messages, the last with ack subject {c.last_reply!r}; "
                             f"expected {msgs}, the last with stream sequence {msgs}")
    return {"count": got, "elapsed": elapsed, "msgs_per_sec": got / elapsed, "client_cpu": cpu / elapsed,
            "flow_control_replies": fc}


def direct_get(c: JsConn, size: int, stored: int, requests: int, warmup: int = 200) -> dict:
    """Sequential `$JS.API.DIRECT.GET.<stream>` requests by sequence, each timed."""
    subject = b"$JS.API.DIRECT.GET.%s" % STREAM.encode()
    lat = []
    cpu0 = time.process_time()
    t_start = time.perf_counter()
    for i in range(warmup + requests):
        seq = 1 + i % stored
        body = b'{"seq":%d}' % seq
        reply = b"%s.d%d" % (c.inbox, i)
        t0 = time.perf_counter_ns()
        c.send(b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, len(body), body))
        op, args, start, end = c.next_msg()
        t1 = time.perf_counter_ns()
        if op != b"HMSG" or args[0] != reply:
            raise BenchmarkError(f"direct get answered with {op.decode()} {b' '.join(args).decode()} "
                                 f"{bytes(c.buf[start:end])[:200]!r}")
        hlen = int(args[-2])
        hdrs = bytes(c.buf[start:start + hlen])
        code, desc = _status(hdrs)
        if code or end - start - hlen != size or b"Nats-Sequence: %d\r\n" % seq not in hdrs:
            raise BenchmarkError(f"direct get of seq {seq}: status {code} {desc}, "
                                 f"{end - start - hlen} B body, headers {hdrs[:300]!r}")
        if i == warmup:
            t_start, cpu0 = time.perf_counter(), time.process_time()
        if i >= warmup:
            lat.append(t1 - t0)
    elapsed = time.perf_counter() - t_start
    lat.sort()

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000

    return {"count": requests, "elapsed": elapsed, "ops_per_sec": requests / elapsed,
            "p50_us": pct(0.50), "p90_us": pct(0.90), "p99_us": pct(0.99), "max_us": lat[-1] / 1000,
            "client_cpu": (time.process_time() - cpu0) / elapsed}


# --- one case -----------------------------------------------------------------------------------

def run(url: str, name: str, seconds: float = 2.0, msgs: int = 50_000, requests: int = 5000) -> dict:
    case = CASES[name]
    kind, size = case["kind"], case["size"]
    c = JsConn(url)
    try:
        c.create_stream(case["storage"], allow_direct=kind == "direct_get")
        if kind == "pub_sync":
            r = publish_sync(c, size, seconds)
        elif kind == "pub_async":
            r = publish_async(c, size, seconds=seconds)
        elif kind == "pull":
            _prefill(c, size, msgs)
            r = pull_consume(c, msgs)
        elif kind == "ordered":
            _prefill(c, size, msgs)
            r = ordered_consume(c, msgs)
        elif kind == "direct_get":
            stored = min(msgs, 10_000)
            _prefill(c, size, stored)
            r = direct_get(c, size, stored, requests)
        else:
            raise ValueError(kind)
        if kind.startswith("pub_") and (have := c.stream_msgs()) != r["count"]:
            raise BenchmarkError(f"stream holds {have} messages after {r['count']} acknowledged publishes")
        c.delete_stream()
    finally:
        c.close()
    return {"name": name, "size": size, **r}


# --- nats-py for comparison ---------------------------------------------------------------------

def natspy_publish_async(url: str, size: int = 16, seconds: float = 2.0, window: int = WINDOW) -> dict:
    """The same asynchronous publish with nats-py's publish_async (its pending-ack semaphore as
    the window), to see whether the raw-socket generator is needed."""
    import asyncio

    import nats

    async def main():
        nc = await nats.connect(url)
        js = nc.jetstream(publish_async_max_pending=window)
        payload = b"x" * size
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline, n = t0 + seconds, 0
        while time.perf_counter() < deadline:
            for _ in range(100):
                await js.publish_async(SUBJECT.decode(), payload)
            n += 100
        await asyncio.wait_for(js.publish_async_completed(), STALL)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        await nc.close()
        return {"count": n, "elapsed": elapsed, "msgs_per_sec": n / elapsed, "client_cpu": cpu / elapsed}

    c = JsConn(url)
    try:
        c.create_stream("memory")
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
        r = asyncio.run(main())
        c.delete_stream()
    finally:
        c.close()
    return r


# --- self-test: the consumer-side framing against a local stream of JetStream frames ----------

def _selftest_writer(sock, frames: bytes, repeats: int) -> None:
    for _ in range(repeats):
        sock.sendall(frames)


def selftest(size: int = 16, nframes: int = 2_000_000) -> list[dict]:
    """Frames/s that the ordered-consumer counter (count_push) and the pull consumer's framing
    (scan collecting ack subjects) reach on a socketpair fed by another process with frames
    shaped like a server's deliveries (unique `$JS.ACK...` reply subjects)."""
    import socket

    results = []
    per = 2000
    for mode in ("ordered: count_push", "pull: scan + ack subjects"):
        a, b = socket.socketpair()
        c = JsConn.__new__(JsConn)  # no INFO/CONNECT handshake: only the buffer and the socket
        c.sock, c.buf = b, bytearray(loadgen.BUF_SIZE)
        c.view, c.pos, c.end = memoryview(c.buf), 0, 0
        c.inbox, c.last_reply, c.region = b"_INBOX.selftest", None, (0, 0)
        frames = b"".join(b"MSG _INBOX.dselftest.ordered 2 $JS.ACK.BENCH.C0nsumer.1.%d.%d.1700000000000000000.%d "
                          b"%d\r\n%s\r\n" % (i, i, per - i, size, b"x" * size) for i in range(1, per + 1))
        writer = loadgen._ctx().Process(target=_selftest_writer, args=(a, frames, nframes // per), daemon=True)
        writer.start()
        got, replies = 0, []
        cpu0, t0 = time.process_time(), time.perf_counter()
        while got < nframes:
            if mode.startswith("ordered"):
                n, _ = c.count_push()
            else:
                n, _ = c.scan(replies)
                replies.clear()
            got += n
        elapsed = time.perf_counter() - t0
        writer.join()
        a.close()
        b.close()
        results.append({"mode": mode, "size": size, "msgs_per_sec": got / elapsed,
                        "client_cpu": (time.process_time() - cpu0) / elapsed})
    return results


# --- CLI ----------------------------------------------------------------------------------------

TABLE_HEADER = ("| case | msgs/s (ops/s) | p50 µs | p99 µs | generator CPU |\n"
                "|---|---:|---:|---:|---:|")


def format_row(r: dict) -> str:
    desc = DESCRIPTIONS.get(r["name"], r["name"])
    if "error" in r:
        return f"| {desc} | error: {r['error']} | | | |"
    if "ops_per_sec" in r:
        return (f"| {desc} | {r['ops_per_sec']:,.0f} | {r['p50_us']:.1f} | {r['p99_us']:.1f} "
                f"| {r['client_cpu']:.0%} |")
    return f"| {desc} | {r['msgs_per_sec']:,.0f} | | | {r['client_cpu']:.0%} |"


def parse_only(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; choose from {BENCHMARKS}")
    return names


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jsbench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="nats://127.0.0.1:4222")
    ap.add_argument("--only", help="comma-separated subset of: " + ",".join(BENCHMARKS))
    ap.add_argument("--seconds", type=float, default=2.0, help="publishing time per publish case (default 2)")
    ap.add_argument("--msgs", type=int, default=50_000,
                    help="messages pre-filled for the consume cases (default 50000)")
    ap.add_argument("--requests", type=int, default=5000, help="direct gets (default 5000)")
    ap.add_argument("--natspy", action="store_true",
                    help="compare raw-socket and nats-py asynchronous publishing (memory, 16 B)")
    ap.add_argument("--selftest", action="store_true",
                    help="measure the consumer-side framing's own ceiling, without a server")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)

    if args.selftest:
        results = selftest()
        if args.json:
            print(json.dumps(results, indent=2))
            return
        print("| generator path | payload | msgs/s | generator CPU |\n|---|---:|---:|---:|")
        for r in results:
            print(f"| {r['mode']} | {r['size']} B | {r['msgs_per_sec']:,.0f} | {r['client_cpu']:.0%} |")
        return

    if args.natspy:
        raw = run(args.url, "async_mem16", args.seconds)
        py = natspy_publish_async(args.url, 16, args.seconds)
        if args.json:
            print(json.dumps({"raw": raw, "nats-py": py}, indent=2))
            return
        print("| async publish, memory, 16 B | msgs/s | generator CPU |\n|---|---:|---:|")
        print(f"| raw sockets | {raw['msgs_per_sec']:,.0f} | {raw['client_cpu']:.0%} |")
        print(f"| nats-py publish_async | {py['msgs_per_sec']:,.0f} | {py['client_cpu']:.0%} |")
        return

    if not args.json:
        print(TABLE_HEADER, flush=True)
    results = []
    for name in parse_only(args.only):
        try:
            results.append(run(args.url, name, args.seconds, args.msgs, args.requests))
        except (BenchmarkError, OSError, ProtocolError) as e:
            results.append({"name": name, "error": f"{type(e).__name__}: {e}"})
        if not args.json:
            print(format_row(results[-1]), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
