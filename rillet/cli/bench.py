"""``rillet bench``: throughput and latency benchmarks over nats-py connections.

Speed matters here (the tool must not be what limits the numbers), so the hot paths avoid per-message
Python work where the protocol allows it:

* publishers write pre-built ``PUB`` frames through the connection's pending buffer in batches (the
  bytes are exactly what ``nc.publish`` would send) and flush once at the end;
* subscribers put a counting parser in front of nats-py's: ``MSG``/``HMSG`` frames of the benchmark's
  subscriptions are counted without building message objects; every other frame (PING, PONG, INFO,
  errors, other subscriptions) goes to nats-py's parser unchanged;
* all clients are separate connections in one event loop (uvloop when available).
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import typer

from rillet.cli.common import CliError, connect, human_count, parse_size, print_json, run

HELP = """Measure throughput and latency.

\b
Examples:
  rillet bench pub bench.x --msgs 1000000 --size 128 --clients 2
  rillet bench pub bench.x --msgs 1000000 --sub 1          (publishers and a subscriber together)
  rillet bench sub bench.x --msgs 1000000 --clients 2      (start before 'bench pub')
  rillet bench reply bench.svc --clients 2                 (start before 'bench request')
  rillet bench request bench.svc --msgs 20000 --clients 4
  rillet bench js pub bench.js --msgs 100000 --async 500 --create
  rillet bench js consume --stream BENCH --msgs 100000 --batch 500
  rillet bench kv put --msgs 10000 --clients 4
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)
js_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="JetStream benchmarks: publish and consume.")
kv_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Key-value benchmarks: put and get.")
app.add_typer(js_app, name="js")
app.add_typer(kv_app, name="kv")

MSGS_OPT = typer.Option(100_000, "--msgs", help="Number of messages (split over the clients)")
SIZE_OPT = typer.Option("128", "--size", help="Message size, e.g. 128, 1KB")
CLIENTS_OPT = typer.Option(1, "--clients", "--pub", help="Number of concurrent clients (connections)")
JSON_OPT = typer.Option(False, "--json", help="Produce a JSON summary")
PENDING = 8 * 1024 * 1024


# ---------------------------------------------------------------------------------------------------
# Results


@dataclass
class Sample:
    msgs: int = 0
    bytes: int = 0
    start: float = 0.0
    end: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 1e-9)

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds

    @property
    def throughput(self) -> float:
        return self.bytes / self.seconds


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _percentile(sorted_vals: list[float], p: float) -> float:
    if not sorted_vals:
        return 0.0
    k = max(0, min(len(sorted_vals) - 1, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def _fmt_rate(r: float) -> str:
    return f"{human_count(int(r))} msgs/sec"


def _fmt_mb(b: float) -> str:
    return f"{b / (1024 * 1024):,.2f} MB/sec"


def _fmt_lat(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f}µs"
    return f"{s * 1e3:.2f}ms"


def summary(kind: str, samples: list[Sample], as_json: bool, extra: dict | None = None,
            show: bool = True) -> dict[str, Any]:
    """The aggregate (first start to last end) and the per-client rates, latencies when measured."""
    samples = [s for s in samples if s.msgs]
    if not samples:
        raise CliError(f"{kind}: no messages were measured")
    agg = Sample(sum(s.msgs for s in samples), sum(s.bytes for s in samples),
                 min(s.start for s in samples), max(s.end for s in samples))
    rates = [s.rate for s in samples]
    out: dict[str, Any] = {"kind": kind, "clients": len(samples), "msgs": agg.msgs, "bytes": agg.bytes,
                           "seconds": round(agg.seconds, 6), "msgs_per_sec": round(agg.rate, 1),
                           "mb_per_sec": round(agg.throughput / (1024 * 1024), 3),
                           "per_client_msgs_per_sec": [round(r, 1) for r in rates]}
    lats = sorted(x for s in samples for x in s.latencies)
    if lats:
        out["latency_us"] = {"min": round(lats[0] * 1e6, 1), "p50": round(_percentile(lats, 50) * 1e6, 1),
                             "p90": round(_percentile(lats, 90) * 1e6, 1),
                             "p99": round(_percentile(lats, 99) * 1e6, 1), "max": round(lats[-1] * 1e6, 1)}
    out.update(extra or {})
    if not show:
        return out
    if as_json:
        print_json(out)
        return out
    print(f"{kind} stats: {_fmt_rate(agg.rate)} ~ {_fmt_mb(agg.throughput)} "
          f"({human_count(agg.msgs)} msgs in {agg.seconds:.3f}s)")
    if len(samples) > 1:
        for i, s in enumerate(samples, 1):
            print(f" [{i}] {_fmt_rate(s.rate)} ~ {_fmt_mb(s.throughput)} ({human_count(s.msgs)} msgs)")
        sd = statistics.pstdev(rates) if len(rates) > 1 else 0.0
        print(f" min {human_count(int(min(rates)))} | avg {human_count(int(sum(rates) / len(rates)))} | "
              f"max {human_count(int(max(rates)))} | stddev {human_count(int(sd))} msgs")
    if lats:
        print(f" latency: min {_fmt_lat(lats[0])} | p50 {_fmt_lat(_percentile(lats, 50))} | "
              f"p90 {_fmt_lat(_percentile(lats, 90))} | p99 {_fmt_lat(_percentile(lats, 99))} | "
              f"max {_fmt_lat(lats[-1])}")
    sys.stdout.flush()
    return out


# ---------------------------------------------------------------------------------------------------
# Fast receive: count the benchmark's MSG frames before nats-py builds objects for them


class CountingParser:
    """Counts the MSG/HMSG frames of ``sids``; hands every other frame to nats-py's own parser.

    ``check_errors``: frames whose body holds ``"error"`` or whose header is a status line are kept in
    ``errors`` (JetStream publish acks). ``statuses``: status frames (``NATS/1.0 404`` ...) are not
    counted but bump ``status_count`` (pull requests ending). ``keep_replies``: reply subjects of the
    counted frames are collected (to acknowledge them).
    """

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.orig = nc._ps
        self.buf = b""
        self.sids: set[bytes] = set()
        self.sample = Sample()
        self.target = 0
        self.done = asyncio.Event()
        self.changed = asyncio.Event()
        self.check_errors = False
        self.statuses = False
        self.keep_replies = False
        self.errors: list[bytes] = []
        self.status_count = 0
        self.replies: list[bytes] = []

    def reset(self) -> None:
        self.buf = b""
        self.orig.reset()

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf + data if self.buf else data
        pos, n = 0, len(buf)
        count = nbytes = 0
        sids = self.sids
        find = buf.find
        special = self.check_errors or self.statuses or self.keep_replies
        while pos < n:
            eol = find(b"\r\n", pos)
            if eol < 0:
                break
            c = buf[pos]
            if c == 77 and buf[pos:pos + 4] == b"MSG ":  # 'M'
                parts = buf[pos + 4:eol].split(b" ")
                size = int(parts[-1])
                end = eol + 4 + size
                if end > n:
                    break
                if parts[1] in sids:
                    count += 1
                    nbytes += size
                    if special:
                        if self.check_errors and b'"error"' in buf[eol + 2:end - 2]:
                            self.errors.append(buf[eol + 2:end - 2])
                        if self.keep_replies and len(parts) == 4:
                            self.replies.append(parts[2])
                else:
                    await self.orig.parse(buf[pos:end])
                pos = end
            elif c == 72 and buf[pos:pos + 5] == b"HMSG ":  # 'H'
                parts = buf[pos + 5:eol].split(b" ")
                size = int(parts[-1])
                end = eol + 4 + size
                if end > n:
                    break
                if parts[1] in sids:
                    hlen = int(parts[-2])
                    if special and buf[eol + 2:eol + 11] == b"NATS/1.0 ":  # a status, not a message
                        if self.check_errors:
                            self.errors.append(buf[eol + 2:eol + 2 + hlen].split(b"\r\n", 1)[0])
                        self.status_count += 1
                    else:
                        count += 1
                        nbytes += size - hlen
                        if self.keep_replies and len(parts) == 5:
                            self.replies.append(parts[2])
                else:
                    await self.orig.parse(buf[pos:end])
                pos = end
            else:
                await self.orig.parse(buf[pos:eol + 2])
                pos = eol + 2
        self.buf = buf[pos:]
        if count:
            s = self.sample
            now = time.perf_counter()
            if not s.msgs:
                s.start = now
            s.msgs += count
            s.bytes += nbytes
            s.end = now
            if self.target and s.msgs >= self.target:
                self.done.set()
        if count or (special and (self.errors or self.status_count)):
            self.changed.set()


async def fast_subscription(conn: Any, subject: str, queue: str = "") -> CountingParser:
    """Subscribe on ``conn`` with a counting parser in front of nats-py's (one per connection)."""
    nc = conn.nc
    p = nc._ps if isinstance(nc._ps, CountingParser) else CountingParser(nc)
    nc._ps = p
    sub = await nc.subscribe(subject, queue=queue)
    p.sids.add(str(sub._id).encode())
    return p


async def counting_subscriber(subject: str, target: int, queue: str = "") -> tuple[Any, CountingParser]:
    conn = await connect(pending_size=PENDING)
    p = await fast_subscription(conn, subject, queue)
    p.target = target
    await conn.nc.flush()
    return conn, p


# ---------------------------------------------------------------------------------------------------
# Fast publish: PUB frames through the pending buffer


def pub_frames(subject: str, payload: bytes, count: int, reply: str = "") -> bytes:
    r = f" {reply}" if reply else ""
    frame = f"PUB {subject}{r} {len(payload)}\r\n".encode() + payload + b"\r\n"
    return frame * count


async def publisher(conn: Any, subject: str, payload: bytes, msgs: int, batch: int) -> Sample:
    nc = conn.nc
    per_write = max(1, min(batch, max(1, (256 * 1024) // (len(payload) + len(subject) + 20))))
    chunk = pub_frames(subject, payload, per_write)
    s = Sample(start=time.perf_counter())
    left = msgs
    send = nc._send_command
    while left >= per_write:
        await send(chunk)
        left -= per_write
        if nc._pending_data_size > PENDING // 2:
            await nc._flush_pending()
            await asyncio.sleep(0)
    if left:
        await send(pub_frames(subject, payload, left))
    await nc.flush(timeout=120)
    s.end = time.perf_counter()
    s.msgs = msgs
    s.bytes = msgs * len(payload)
    perm = conn.last_permission_error()
    if perm:
        raise CliError(perm)
    return s


def _payload(size: str) -> bytes:
    n = parse_size(size)
    if n < 0:
        raise CliError("--size must not be negative")
    return os.urandom(n // 2 + 1).hex()[:n].encode()


# ---------------------------------------------------------------------------------------------------
# Core


@app.command("pub")
def pub(subject: str = typer.Argument(..., help="Subject to publish to"),
        msgs: int = MSGS_OPT, size: str = SIZE_OPT, clients: int = CLIENTS_OPT,
        sub: int = typer.Option(0, "--sub", help="Also run this many subscribers in this process"),
        batch: int = typer.Option(1000, "--batch", help="Messages written to the socket per write"),
        as_json: bool = JSON_OPT) -> None:
    """Publish as fast as possible; with --sub, also receive and report both sides.

    \b
    Examples:
      rillet bench pub bench.x --msgs 1000000 --size 16
      rillet bench pub bench.x --msgs 500000 --clients 2 --sub 2
    """
    if msgs < 1 or clients < 1:
        raise CliError("--msgs and --clients must be at least 1")
    run(_pub, subject, msgs, _payload(size), clients, sub, batch, as_json)


async def _pub(subject: str, msgs: int, payload: bytes, clients: int, subs: int, batch: int,
               as_json: bool) -> None:
    sub_conns = [await counting_subscriber(subject, msgs) for _ in range(subs)]
    conns = [await connect(pending_size=PENDING) for _ in range(clients)]
    if not as_json:
        print(f"Starting benchmark [msgs={human_count(msgs)}, msgsize={len(payload)} B, pubs={clients}, "
              f"subs={subs}]", flush=True)
    samples = await asyncio.gather(*(publisher(c, subject, payload, n, batch)
                                     for c, n in zip(conns, _split(msgs, clients))))
    result = {"pub": summary("Pub", list(samples), as_json, show=not as_json)}
    if subs:
        try:
            await asyncio.wait_for(asyncio.gather(*(p.done.wait() for _c, p in sub_conns)),
                                   max(10.0, msgs / 50_000))
        except asyncio.TimeoutError:
            got = [p.sample.msgs for _c, p in sub_conns]
            raise CliError(f"subscribers received {got} of {msgs} messages (slow consumer or lost messages)") \
                from None
        result["sub"] = summary("Sub", [p.sample for _c, p in sub_conns], as_json, show=not as_json)
    if as_json:
        print_json(result)
    for c in conns + [c for c, _p in sub_conns]:
        await c.nc.close()


@app.command("sub")
def sub(subject: str = typer.Argument(..., help="Subject to subscribe to"),
        msgs: int = typer.Option(100_000, "--msgs", help="Messages each subscriber waits for"),
        clients: int = typer.Option(1, "--clients", "--sub", help="Number of subscribers (connections)"),
        queue: Optional[str] = typer.Option(None, "--queue", help="Join this queue group (msgs then is the total)"),
        as_json: bool = JSON_OPT) -> None:
    """Receive messages and report the rate, from the first message to the last.

    \b
    Start it before 'bench pub'. It prints "Waiting" once subscribed.

    \b
    Examples:
      rillet bench sub bench.x --msgs 1000000
      rillet bench sub bench.x --msgs 1000000 --clients 3 --queue q
    """
    run(_sub, subject, msgs, clients, queue, as_json)


async def _sub(subject: str, msgs: int, clients: int, queue: str | None, as_json: bool) -> None:
    targets = _split(msgs, clients) if queue else [msgs] * clients
    subs = [await counting_subscriber(subject, 0, queue or "") for _ in targets]
    total = sum(targets)
    done = asyncio.Event()

    def check() -> None:
        if sum(p.sample.msgs for _c, p in subs) >= total:
            done.set()

    for (_c, p), t in zip(subs, targets):
        if queue:
            p.target = 0
        else:
            p.target = t
    if queue:
        print(f"Waiting for {human_count(total)} messages on {subject} with {clients} subscribers in queue group "
              f"{queue}", flush=True)
    else:
        print(f"Waiting for {human_count(msgs)} messages on {subject} with {clients} subscribers", flush=True)
    if queue:
        while not done.is_set():
            check()
            await asyncio.sleep(0.005)
    else:
        await asyncio.gather(*(p.done.wait() for _c, p in subs))
    summary("Sub", [p.sample for _c, p in subs], as_json)
    for c, _p in subs:
        await c.nc.close()


@app.command("reply")
def reply(subject: str = typer.Argument(..., help="Subject to answer on"),
          clients: int = typer.Option(1, "--clients", help="Number of responders (connections, one queue group)"),
          msgs: int = typer.Option(0, "--msgs", help="Quit after answering this many requests (0: never)")) -> None:
    """Answer benchmark requests with their own payload (start before 'bench request').

    \b
    Example:
      rillet bench reply bench.svc --clients 2
    """
    run(_reply, subject, clients, msgs)


async def _reply(subject: str, clients: int, msgs: int) -> None:
    done = asyncio.Event()
    served = 0
    conns = []
    start = 0.0
    for _ in range(clients):
        conn = await connect(pending_size=PENDING, reconnect=True)
        nc = conn.nc

        async def answer(m: Any, nc: Any = nc) -> None:
            nonlocal served, start
            if not served:
                start = time.perf_counter()
            served += 1
            if m.reply:
                await nc.publish(m.reply, m.data)
            if msgs and served >= msgs:
                done.set()

        await nc.subscribe(subject, queue="rillet-bench", cb=answer)
        await nc.flush()
        conns.append(conn)
    print(f"Replying on {subject} with {clients} responders", flush=True)
    await done.wait()
    for c in conns:
        await c.nc.flush()
        await c.nc.close()
    print(f"Replied to {human_count(served)} requests in {time.perf_counter() - start:.3f}s")


@app.command("request")
def request(subject: str = typer.Argument(..., help="Subject to send requests to"),
            msgs: int = typer.Option(10_000, "--msgs", help="Number of requests (split over the clients)"),
            size: str = SIZE_OPT, clients: int = CLIENTS_OPT,
            reply_local: bool = typer.Option(False, "--local-reply", help="Also run one responder in this process"),
            as_json: bool = JSON_OPT) -> None:
    """Send requests one after another per client and report the rate and latency percentiles.

    \b
    Examples:
      rillet bench request bench.svc --msgs 20000 --clients 4
      rillet bench request bench.svc --msgs 5000 --local-reply
    """
    run(_request, subject, msgs, _payload(size), clients, reply_local, as_json)


async def _request(subject: str, msgs: int, payload: bytes, clients: int, local: bool, as_json: bool) -> None:
    import nats.errors
    responder = None
    if local:
        responder = await connect(pending_size=PENDING)

        async def answer(m: Any) -> None:
            await responder.nc.publish(m.reply, m.data)

        await responder.nc.subscribe(subject, cb=answer)
        await responder.nc.flush()
    conns = [await connect(pending_size=PENDING) for _ in range(clients)]

    async def client(conn: Any, n: int) -> Sample:
        nc = conn.nc
        s = Sample(start=time.perf_counter())
        lat = s.latencies
        timeout = conn.settings.timeout
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                await nc.request(subject, payload, timeout=timeout)
            except nats.errors.NoRespondersError:
                raise CliError(f"no responders on {subject}: start 'rillet bench reply {subject}' first") from None
            except nats.errors.TimeoutError:
                raise CliError(conn.last_permission_error() or "timeout waiting for a reply") from None
            lat.append(time.perf_counter() - t0)
        s.end = time.perf_counter()
        s.msgs = n
        s.bytes = n * len(payload)
        return s

    samples = await asyncio.gather(*(client(c, n) for c, n in zip(conns, _split(msgs, clients))))
    summary("Request", list(samples), as_json)
    for c in conns + ([responder] if responder else []):
        await c.nc.close()


# ---------------------------------------------------------------------------------------------------
# JetStream


@js_app.command("pub")
def js_pub(subject: str = typer.Argument(..., help="Subject to publish to (a stream must hold it)"),
           msgs: int = MSGS_OPT, size: str = SIZE_OPT, clients: int = CLIENTS_OPT,
           window: int = typer.Option(0, "--async", help="Publish asynchronously with up to this many acks outstanding"),
           batch: int = typer.Option(100, "--batch", help="Without --async: publish this many, then wait for their acks"),
           stream: str = typer.Option("BENCH", "--stream", help="Stream to create with --create"),
           create: bool = typer.Option(False, "--create", help="Create (or replace) the stream first"),
           storage: str = typer.Option("file", "--storage", help="Storage of the created stream: file or memory"),
           as_json: bool = JSON_OPT) -> None:
    """Publish to JetStream and wait for the acks (a window of outstanding publishes per client).

    \b
    Examples:
      rillet bench js pub bench.js --create --msgs 100000 --async 1000
      rillet bench js pub orders.bench --msgs 10000 --batch 1      (one at a time)
    """
    run(_js_pub, subject, msgs, _payload(size), clients, window or batch, stream, create, storage, as_json)


async def _js_pub(subject: str, msgs: int, payload: bytes, clients: int, window: int, stream: str,
                  create: bool, storage: str, as_json: bool) -> None:
    from rillet.cli.jsapi import JSAPIError, api
    conns = [await connect(pending_size=PENDING) for _ in range(clients)]
    if create:
        try:
            await api(conns[0], f"STREAM.DELETE.{stream}")
        except JSAPIError as e:
            if e.err_code != 10059:
                raise
        await api(conns[0], f"STREAM.CREATE.{stream}", {"name": stream, "subjects": [subject], "storage": storage})

    async def client(conn: Any, n: int) -> Sample:
        nc = conn.nc
        prefix = nc.new_inbox()
        p = await fast_subscription(conn, prefix + ".*")
        p.check_errors = True
        await nc.flush()
        s = Sample(start=time.perf_counter())
        tail = f" {len(payload)}\r\n".encode() + payload + b"\r\n"
        head = f"PUB {subject} {prefix}.".encode()
        sent = 0
        timeout = conn.settings.timeout
        while sent < n and not p.errors:
            k = min(window - (sent - p.sample.msgs), n - sent)
            if k <= 0:
                p.changed.clear()
                try:
                    await asyncio.wait_for(p.changed.wait(), timeout)
                except asyncio.TimeoutError:
                    raise CliError(conn.last_permission_error() or "timeout waiting for publish acks") from None
                continue
            await nc._send_command(b"".join(head + str(sent + i).encode() + tail for i in range(k)))
            await nc._flush_pending()
            sent += k
        deadline = time.monotonic() + timeout
        while p.sample.msgs + len(p.errors) < sent and not p.errors and time.monotonic() < deadline:
            p.changed.clear()
            try:
                await asyncio.wait_for(p.changed.wait(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
        s.end = time.perf_counter()
        if p.errors:
            e = p.errors[0].decode(errors="replace")
            if e.startswith("NATS/1.0 503"):
                e = "no responders (is a stream on the subject?)"
            else:
                try:
                    e = json.loads(e)["error"]["description"]
                except (ValueError, KeyError, TypeError):
                    pass
            raise CliError(f"publish failed: {e}")
        acked = p.sample.msgs
        if acked < sent:
            raise CliError(conn.last_permission_error() or f"timeout: {sent - acked} publishes were not acknowledged")
        s.msgs = acked
        s.bytes = acked * len(payload)
        return s

    samples = await asyncio.gather(*(client(c, n) for c, n in zip(conns, _split(msgs, clients))))
    summary("JetStream Pub", list(samples), as_json)
    for c in conns:
        await c.nc.close()


@js_app.command("consume")
def js_consume(stream: str = typer.Option("BENCH", "--stream", help="Stream to consume from"),
               msgs: int = MSGS_OPT, clients: int = CLIENTS_OPT,
               batch: int = typer.Option(500, "--batch", help="Messages per pull request"),
               acks: bool = typer.Option(False, "--acks/--no-acks", help="Explicitly acknowledge every message"),
               as_json: bool = JSON_OPT) -> None:
    """Pull messages from a stream through a new ephemeral pull consumer shared by the clients.

    \b
    Examples:
      rillet bench js consume --stream BENCH --msgs 100000 --batch 1000
      rillet bench js consume --stream BENCH --msgs 50000 --clients 2 --acks
    """
    run(_js_consume, stream, msgs, clients, batch, acks, as_json)


async def _js_consume(stream: str, msgs: int, clients: int, batch: int, acks: bool, as_json: bool) -> None:
    from rillet.cli.jsapi import api
    conns = [await connect(pending_size=PENDING) for _ in range(clients)]
    info = await api(conns[0], f"STREAM.INFO.{stream}")
    have = info["state"].get("messages", 0)
    if have < msgs:
        raise CliError(f"stream {stream} holds {have} messages, fewer than --msgs {msgs}")
    name = f"rillet-bench-{os.urandom(4).hex()}"
    await api(conns[0], f"CONSUMER.CREATE.{stream}.{name}",
              {"stream_name": stream, "config": {"name": name, "ack_policy": "explicit" if acks else "none",
                                                 "deliver_policy": "all", "inactive_threshold": 60_000_000_000,
                                                 "max_ack_pending": -1 if not acks else max(batch * 4, 1000)}})
    prefix = conns[0].settings.js_prefix
    shared = {"left": msgs}

    async def client(conn: Any) -> Sample:
        nc = conn.nc
        inbox = nc.new_inbox()
        p = await fast_subscription(conn, inbox)
        p.statuses = True
        p.keep_replies = acks
        await nc.flush()
        subject = f"{prefix}.CONSUMER.MSG.NEXT.{stream}.{name}"
        while shared["left"] > 0:
            want = min(batch, shared["left"])
            shared["left"] -= want  # reserved: the clients together fetch exactly --msgs
            got0, st0 = p.sample.msgs, p.status_count
            await nc.publish(subject, json.dumps({"batch": want, "expires": 2_000_000_000}).encode(), reply=inbox)
            while p.sample.msgs - got0 < want and p.status_count == st0:
                p.changed.clear()
                if acks and p.replies:
                    await _ack_all(nc, p)
                try:
                    await asyncio.wait_for(p.changed.wait(), 5)
                except asyncio.TimeoutError:
                    raise CliError("timeout waiting for messages from the consumer") from None
            shared["left"] += want - (p.sample.msgs - got0)
            if acks:
                await _ack_all(nc, p)
        await nc.flush()
        return p.sample

    samples = await asyncio.gather(*(client(c) for c in conns))
    try:
        await api(conns[0], f"CONSUMER.DELETE.{stream}.{name}")
    except CliError:
        pass
    summary("JetStream Consume", list(samples), as_json)
    for c in conns:
        await c.nc.close()


async def _ack_all(nc: Any, p: CountingParser) -> None:
    replies, p.replies = p.replies, []
    await nc._send_command(b"".join(b"PUB " + r + b" 4\r\n+ACK\r\n" for r in replies))
    await nc._flush_pending()


# ---------------------------------------------------------------------------------------------------
# KV


async def _kv_setup(bucket: str, clients: int) -> tuple[list[Any], list[Any]]:
    from nats.js.api import KeyValueConfig
    conns = [await connect(pending_size=PENDING) for _ in range(clients)]
    js = conns[0].nc.jetstream(domain=conns[0].settings.js_domain or None)
    try:
        await js.key_value(bucket)
    except Exception:
        await js.create_key_value(KeyValueConfig(bucket=bucket, history=1))
    kvs = [await c.nc.jetstream(domain=c.settings.js_domain or None).key_value(bucket) for c in conns]
    return conns, kvs


@kv_app.command("put")
def kv_put(bucket: str = typer.Option("rillet-bench", "--bucket", help="Bucket (created when missing)"),
           msgs: int = typer.Option(10_000, "--msgs", help="Number of puts (split over the clients)"),
           size: str = SIZE_OPT, clients: int = CLIENTS_OPT,
           keys: int = typer.Option(1000, "--keys", help="Number of distinct keys"),
           as_json: bool = JSON_OPT) -> None:
    """Put values, each waiting for its ack, and report the rate and latency percentiles.

    \b
    Example:
      rillet bench kv put --msgs 10000 --clients 4 --size 1KB
    """
    run(_kv, "put", bucket, msgs, _payload(size), clients, keys, as_json)


@kv_app.command("get")
def kv_get(bucket: str = typer.Option("rillet-bench", "--bucket", help="Bucket (filled first when keys are missing)"),
           msgs: int = typer.Option(10_000, "--msgs", help="Number of gets (split over the clients)"),
           size: str = SIZE_OPT, clients: int = CLIENTS_OPT,
           keys: int = typer.Option(1000, "--keys", help="Number of distinct keys"),
           as_json: bool = JSON_OPT) -> None:
    """Get values and report the rate and latency percentiles.

    \b
    Example:
      rillet bench kv get --msgs 10000 --clients 4
    """
    run(_kv, "get", bucket, msgs, _payload(size), clients, keys, as_json)


async def _kv(op: str, bucket: str, msgs: int, payload: bytes, clients: int, keys: int, as_json: bool) -> None:
    conns, kvs = await _kv_setup(bucket, clients)
    keys = max(1, keys)
    if op == "get":
        try:
            await kvs[0].get(f"k{keys - 1}")
        except Exception:
            for i in range(keys):
                await kvs[0].put(f"k{i}", payload)

    async def client(kv: Any, n: int, offset: int) -> Sample:
        s = Sample(start=time.perf_counter())
        lat = s.latencies
        total = 0
        for i in range(n):
            k = f"k{(offset + i) % keys}"
            t0 = time.perf_counter()
            if op == "put":
                await kv.put(k, payload)
                total += len(payload)
            else:
                e = await kv.get(k)
                total += len(e.value or b"")
            lat.append(time.perf_counter() - t0)
        s.end = time.perf_counter()
        s.msgs = n
        s.bytes = total
        return s

    parts = _split(msgs, clients)
    offsets = [sum(parts[:i]) for i in range(clients)]
    samples = await asyncio.gather(*(client(kv, n, o) for kv, n, o in zip(kvs, parts, offsets)))
    summary(f"KV {op}", list(samples), as_json)
    for c in conns:
        await c.nc.close()
