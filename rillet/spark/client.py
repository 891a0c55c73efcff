"""Talking to a NATS server (Rillet or the Go nats-server) from Spark tasks, with nats-py.

Everything here is asyncio and runs inside one task's own event loop (``run_in_thread``): nats-py
connections are never pickled or shared between Spark tasks.

The hot paths (range reads, acked publish windows) do not go through nats-py's per-message ``Msg`` objects
and e-mail header parser: ``FastClient`` hands the raw subject, reply, header and payload bytes of the
subscriptions it owns to a plain callback, and everything else (connect, auth, TLS, PING, requests) is
nats-py unchanged.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import json
import logging
import queue
import ssl
import threading
import time
from typing import Any, Callable, Iterator

import nats
from nats.aio.client import Client as _NatsClient

from rillet.spark.options import ConnectOptions

API = "$JS.API"
log = logging.getLogger("rillet.spark")
# how long a range read waits for the replica serving it to hold the rest of its range (RangeReader._short)
LAG_WAIT = 30.0


class JetStreamSparkError(RuntimeError):
    """A read or write cannot go on (missing stream, data loss, server errors, timeouts)."""


class FastClient(_NatsClient):
    """nats-py's client, with raw callbacks for the subscriptions registered in ``raw``."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: dict[int, Callable[[bytes, bytes, bytes, bytes | None], str | None]] = {}

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        handler = self.raw.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        answer = handler(subject, reply, data, headers)
        if answer:
            await self.publish(answer, b"")

    async def raw_subscribe(self, subject: str, handler: Callable[..., str | None]) -> Any:
        sub = await self.subscribe(subject)
        self.raw[sub._id] = handler
        return sub

    async def raw_unsubscribe(self, sub: Any) -> None:
        self.raw.pop(sub._id, None)
        try:
            await sub.unsubscribe()
        except Exception:
            pass


class HeaderPairs(list):
    """Header (name, value) pairs, several values per name allowed, that nats-py's publish accepts."""

    def items(self):  # nats-py iterates ``headers.items()``
        return iter(self)


async def _quiet(_e: Exception) -> None:
    return None


async def connect(conn: ConnectOptions, name: str = "rillet-spark") -> FastClient:
    nc = FastClient()
    kw: dict[str, Any] = dict(servers=list(conn.servers), name=name, connect_timeout=conn.connect_timeout,
                              allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.2,
                              error_cb=_quiet,
                              disconnected_cb=None)
    if conn.user:
        kw["user"], kw["password"] = conn.user, conn.password
    if conn.token:
        kw["token"] = conn.token
    if conn.nkey_seed:
        if conn.nkey_seed.startswith("S"):
            kw["nkeys_seed_str"] = conn.nkey_seed
        else:
            kw["nkeys_seed"] = conn.nkey_seed
    if conn.creds:
        kw["user_credentials"] = conn.creds
    if conn.tls_ca or conn.tls_cert or any(s.startswith("tls://") for s in conn.servers):
        ctx = ssl.create_default_context(cafile=conn.tls_ca or None)
        if conn.tls_cert:
            ctx.load_cert_chain(conn.tls_cert, conn.tls_key or None)
        kw["tls"] = ctx
    try:
        await asyncio.wait_for(nc.connect(**kw), timeout=conn.connect_timeout * 2 * len(conn.servers) + 1)
        if not nc.is_connected:
            # nats-py returns from connect() when the server closes the connection instead of answering the
            # first PING (with TLS 1.3 a server rejects a missing or untrusted client certificate only after
            # the client's side of the handshake is done): say so here, not at the first request
            raise ConnectionError("the server closed the connection during the handshake (a TLS client "
                                  "certificate or credentials it does not accept?)")
    except Exception as e:  # NoServersError, auth errors, TLS errors, timeouts...
        hint = ""
        if "tls" in kw and isinstance(e, (ConnectionError, ssl.SSLError)):
            # a server that rejects the client certificate resets or closes the connection (which one the client
            # sees first varies): name the options to look at
            hint = " (TLS handshake failed: check options 'tls_ca', 'tls_cert' and 'tls_key')"
        raise JetStreamSparkError(f"cannot connect to NATS at {', '.join(conn.servers)}: "
                                  f"{type(e).__name__}: {e}".rstrip(": ") + hint) from None
    return nc


async def api(nc: FastClient, subject: str, body: Any = None, timeout: float = 5.0) -> dict:
    """A ``$JS.API`` request; JetStream errors raise JetStreamSparkError with the server's description."""
    payload = b"" if body is None else json.dumps(body).encode()
    try:
        msg = await nc.request(f"{API}.{subject}", payload, timeout=timeout)
    except nats.errors.NoRespondersError:
        raise JetStreamSparkError(f"JetStream is not enabled on the server (no responder for {API}.{subject})") \
            from None
    except asyncio.TimeoutError:
        raise JetStreamSparkError(f"timed out waiting for {API}.{subject}") from None
    resp = json.loads(msg.data or b"{}")
    return resp


class StreamNotFound(JetStreamSparkError):
    pass


class ReaderStopped(JetStreamSparkError):
    """The consumer of a read went away (Spark stopped the task): the read must end, not be retried."""


async def stream_info(nc: FastClient, stream: str) -> dict:
    resp = await api(nc, f"STREAM.INFO.{stream}")
    err = resp.get("error")
    if err:
        if err.get("err_code") == 10059:
            raise StreamNotFound(f"stream {stream!r} not found")
        raise JetStreamSparkError(f"stream {stream!r}: {err.get('description')} (err_code {err.get('err_code')})")
    return resp


async def msg_time(nc: FastClient, stream: str, seq: int) -> tuple[int, int] | None:
    """(sequence, time in ns) of the first message at or after ``seq``, or None."""
    resp = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": ">"})
    if resp.get("error"):
        code = resp["error"].get("err_code")
        if code == 10037:  # no message found
            return None
        if code == 10059:
            raise StreamNotFound(f"stream {stream!r} not found")
        raise JetStreamSparkError(f"stream {stream!r}: {resp['error'].get('description')}")
    m = resp["message"]
    return int(m["seq"]), parse_rfc3339(m["time"])


async def next_stored_seq(nc: FastClient, stream: str, seq: int, filters: tuple[str, ...] = ()) -> int | None:
    """The sequence of the first message at or after ``seq`` (on one of ``filters``; any subject when none) in the
    stream, as its leader answers ``STREAM.MSG.GET`` (None: no such message)."""
    best = None
    for f in filters or (">",):
        resp = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": f})
        err = resp.get("error")
        if err:
            code = err.get("err_code")
            if code == 10037:  # no message found
                continue
            if code == 10059:
                raise StreamNotFound(f"stream {stream!r} not found")
            raise JetStreamSparkError(f"stream {stream!r}: {err.get('description')} (err_code {code})")
        s = int(resp["message"]["seq"])
        best = s if best is None else min(best, s)
    return best


async def seq_at_time(nc: FastClient, stream: str, t_ns: int, first: int, last: int) -> int:
    """The first sequence whose message was stored at or after ``t_ns`` (``last + 1`` if none):
    a binary search over message times, which only grow with the sequence."""
    lo, hi = first, last + 1
    while lo < hi:
        mid = (lo + hi) // 2
        got = await msg_time(nc, stream, mid)
        if got is None:
            hi = mid
            continue
        seq, ts = got
        if seq >= hi:
            hi = mid
        elif ts >= t_ns:
            hi = mid
        else:
            lo = seq + 1
    return lo


_EPOCH_CACHE: dict[str, int] = {}


def parse_rfc3339(s: str | bytes) -> int:
    """``2026-11-22T10:00:00.123456789Z`` (any offset) as nanoseconds since the epoch."""
    if isinstance(s, bytes):
        s = s.decode()
    head = s[:19]
    rest = s[19:]
    frac_ns = 0
    if rest.startswith("."):
        i = 1
        while i < len(rest) and rest[i].isdigit():
            i += 1
        digits = rest[1:i]
        frac_ns = int((digits + "000000000")[:9])
        rest = rest[i:]
    key = head + rest
    base = _EPOCH_CACHE.get(key)
    if base is None:
        zone = rest if rest not in ("Z", "z", "") else "+00:00"
        t = _dt.datetime.fromisoformat(head + zone)
        base = int(t.timestamp())
        if len(_EPOCH_CACHE) > 4096:
            _EPOCH_CACHE.clear()
        _EPOCH_CACHE[key] = base
    return base * 1_000_000_000 + frac_ns


def parse_headers(raw: bytes | None) -> list[tuple[str, str]]:
    """Header lines after ``NATS/1.0...`` as (name, value) pairs, in order, repeated names kept."""
    if not raw:
        return []
    out = []
    for line in raw.split(b"\r\n")[1:]:
        if not line:
            continue
        i = line.find(b":")
        if i <= 0:
            continue
        out.append((line[:i].decode("utf-8", "replace").strip(), line[i + 1:].decode("utf-8", "replace").strip()))
    return out


def status_of(raw: bytes | None) -> bytes:
    """The status code of a status message (``NATS/1.0 404 ...``), or b''."""
    if raw and len(raw) >= 12 and raw[8:9] == b" ":
        return raw[9:12]
    return b""


# ---------------------------------------------------------------------------------------------------
# Range reads


class Chunk:
    """Messages read so far, as parallel lists (cheap to append, cheap to turn into Arrow columns)."""
    __slots__ = ("subjects", "seqs", "times", "headers", "datas", "nbytes")

    def __init__(self) -> None:
        self.subjects: list[bytes] = []
        self.seqs: list[int] = []
        self.times: list[int] = []
        self.headers: list[bytes | None] = []
        self.datas: list[bytes] = []
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.seqs)


def _ack_tokens(reply: bytes) -> tuple[int, int, int, int]:
    """(stream seq, consumer seq, time ns, pending) from a ``$JS.ACK`` reply subject (both layouts)."""
    t = reply.split(b".")
    if len(t) == 9:
        return int(t[5]), int(t[6]), int(t[7]), int(t[8])
    return int(t[7]), int(t[8]), int(t[9]), int(t[10])


DIRECT_META = {"nats-stream", "nats-subject", "nats-sequence", "nats-time-stamp", "nats-num-pending",
               "nats-last-sequence"}


def _strip_direct_headers(raw: bytes) -> bytes | None:
    lines = raw.split(b"\r\n")
    keep = [ln for ln in lines[1:] if ln and ln.split(b":", 1)[0].strip().lower().decode() not in DIRECT_META]
    if not keep:
        return None
    return b"NATS/1.0\r\n" + b"\r\n".join(keep) + b"\r\n\r\n"


class RangeReader:
    """Reads the messages of ``stream`` with sequences in [lo, hi] (matching ``filters``), handing them out
    in chunks of about ``chunk_size`` through ``emit``."""

    def __init__(self, nc: FastClient, stream: str, lo: int, hi: int, filters: tuple[str, ...],
                 emit: Callable[[Chunk], None], chunk_size: int = 8192, idle_timeout: float = 10.0,
                 batch_size: int = 1000) -> None:
        self.nc, self.stream, self.lo, self.hi, self.filters = nc, stream, lo, hi, filters
        self.emit, self.chunk_size, self.idle_timeout, self.batch_size = emit, chunk_size, idle_timeout, batch_size
        self.chunk = Chunk()
        self.count = 0
        self._behind_since: float | None = None

    def _flush(self) -> None:
        if len(self.chunk):
            self.count += len(self.chunk)
            self.emit(self.chunk)
            self.chunk = Chunk()

    async def _short(self, seen: int) -> bool:
        """The read ended having handed out sequences up to ``seen`` (< hi): whether the stream still holds a
        message of the range after it, which the read must wait for and fetch. Sequences deleted or on other
        subjects give no message and end the read; but the consumer or the direct get may have been served by
        a replica that is behind the leader (an R1 consumer is placed on any replica of the stream, a direct get
        is answered by any current replica, each from its own store), which reports nothing pending where the
        leader has messages: that is a short read, not the end of the range (issue 24: a whole partition of a
        micro-batch read from a lagging follower was lost). So the leader is asked: its last sequence (a new
        leader may still be applying its log) and its first message after ``seen``. Raises once the range has
        stayed short for LAG_WAIT seconds (the task fails, Spark runs it again)."""
        info = await stream_info(self.nc, self.stream)
        short = int(info["state"]["last_seq"]) < self.hi
        if not short:
            nxt = await next_stored_seq(self.nc, self.stream, seen + 1, self.filters)
            short = nxt is not None and nxt <= self.hi
        if not short:
            self._behind_since = None
            return False
        now = time.monotonic()
        if self._behind_since is None:
            self._behind_since = now
            log.warning("stream %r: the read of %d..%d ended after %d, but the stream leader holds more of the "
                        "range (the replica serving the read is behind): reading again", self.stream, self.lo,
                        self.hi, seen)
        waited = now - self._behind_since
        if waited > LAG_WAIT:
            raise JetStreamSparkError(f"stream {self.stream!r}: sequences {seen + 1}..{self.hi} are in the stream "
                                      f"but the replica serving the read did not hand them out in {LAG_WAIT:.0f}s")
        await asyncio.sleep(min(0.2 + waited / 4, 1.0))
        return True

    # -- ordered push consumer -------------------------------------------------------------------------

    async def by_consumer(self, deliver_policy: str = "by_start_sequence") -> None:
        next_seq = self.lo
        restarts = 0
        while True:
            state = await self._consume_once(next_seq, deliver_policy)
            seen = state["last"] or next_seq - 1
            if state["done"] and deliver_policy == "by_start_sequence" and seen < self.hi:
                # the consumer had nothing more before hi: deleted or filtered-out sequences, or a replica that
                # does not hold the rest of the range yet (see _short): read the rest again, with a new
                # consumer (placed on any replica), once it may be there
                if await self._short(seen):
                    next_seq = seen + 1
                    continue
            if state["done"]:
                self._flush()
                return
            # a gap in the consumer sequence or a silent consumer: start again after the last stream seq seen
            next_seq = state["last"] + 1 if state["last"] else next_seq
            restarts += 1
            if restarts > 20:
                raise JetStreamSparkError(f"stream {self.stream!r}: ordered consumer kept failing")
            await stream_info(self.nc, self.stream)  # raises a clear error if the stream is gone

    async def _consume_once(self, start: int, deliver_policy: str) -> dict:
        nc = self.nc
        loop = asyncio.get_running_loop()
        inbox = nc.new_inbox()
        done = loop.create_future()
        st: dict[str, Any] = {"done": False, "last": 0, "dseq": 0, "seen": time.monotonic(), "bad": ""}
        hi = self.hi
        ch = self

        def handler(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> str | None:
            st["seen"] = time.monotonic()
            if hdr is not None and not data and hdr[8:9] == b" ":
                code = hdr[9:12]
                if code == b"100":
                    if reply:
                        return reply.decode()  # flow control
                    i = hdr.find(b"Nats-Consumer-Stalled:")
                    if i >= 0:
                        return hdr[i + 22:hdr.index(b"\r\n", i)].decode().strip()
                    return None
                if not done.done():
                    st["bad"] = hdr.split(b"\r\n", 1)[0][9:].decode("utf-8", "replace")
                    done.set_result(None)
                return None
            if done.done():
                return None
            sseq, dseq, ts, pending = _ack_tokens(reply)
            if dseq != st["dseq"] + 1:  # lost a message: restart after the last one we have
                done.set_result(None)
                return None
            st["dseq"] = dseq
            if sseq > hi:
                st["done"] = True
                done.set_result(None)
                return None
            c = ch.chunk
            c.subjects.append(subject)
            c.seqs.append(sseq)
            c.times.append(ts)
            c.headers.append(hdr)
            c.datas.append(data)
            c.nbytes += len(data)
            st["last"] = sseq
            if len(c.seqs) >= ch.chunk_size:
                ch._flush()
            if sseq >= hi or pending == 0:
                st["done"] = True
                done.set_result(None)
            return None

        sub = await nc.raw_subscribe(inbox, handler)
        cfg: dict[str, Any] = {"deliver_policy": deliver_policy, "ack_policy": "none", "deliver_subject": inbox,
                               "flow_control": True, "idle_heartbeat": 1_000_000_000, "mem_storage": True,
                               "num_replicas": 1, "inactive_threshold": 30_000_000_000, "replay_policy": "instant",
                               "max_deliver": 1}
        if deliver_policy == "by_start_sequence":
            cfg["opt_start_seq"] = start
        if len(self.filters) == 1:
            cfg["filter_subject"] = self.filters[0]
        elif self.filters:
            cfg["filter_subjects"] = list(self.filters)
        name = ""
        try:
            resp = await api(nc, f"CONSUMER.CREATE.{self.stream}", {"stream_name": self.stream, "config": cfg})
            err = resp.get("error")
            if err:
                if err.get("err_code") == 10059:
                    raise StreamNotFound(f"stream {self.stream!r} not found")
                raise JetStreamSparkError(f"stream {self.stream!r}: cannot create a consumer: "
                                          f"{err.get('description')} (err_code {err.get('err_code')})")
            name = resp.get("name", "")
            if int(resp.get("num_pending", 0)) == 0 and st["last"] == 0 and not done.done():
                st["done"] = True
                return st
            while not done.done():
                try:
                    await asyncio.wait_for(asyncio.shield(done), timeout=0.5)
                except asyncio.TimeoutError:
                    if time.monotonic() - st["seen"] > self.idle_timeout:
                        break
            if st["bad"]:
                # 409 Consumer Deleted and the like: is the stream still there?
                await stream_info(nc, self.stream)
            return st
        finally:
            await nc.raw_unsubscribe(sub)
            if name:
                try:
                    await nc.publish(f"{API}.CONSUMER.DELETE.{self.stream}.{name}", b"")
                except Exception:
                    pass

    # -- batched direct gets ---------------------------------------------------------------------------

    async def by_direct_get(self) -> None:
        nc = self.nc
        loop = asyncio.get_running_loop()
        inbox = nc.new_inbox()
        st: dict[str, Any] = {"fut": None, "last": 0, "pending": -1, "status": b"", "desc": ""}
        ch = self
        hi = self.hi

        def handler(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
            fut = st["fut"]
            if hdr is None:
                return None
            if hdr[8:9] == b" ":  # status: 204 EOB, 404 none, 408 bad request, 503 no responders
                st["status"] = hdr[9:12]
                st["desc"] = hdr.split(b"\r\n", 1)[0][12:].decode("utf-8", "replace").strip()
                i = hdr.find(b"Nats-Num-Pending:")
                if i >= 0:
                    st["pending"] = int(hdr[i + 17:hdr.index(b"\r\n", i)])
                if fut is not None and not fut.done():
                    fut.set_result(None)
                return None
            subj = seq = ts = None
            user = False
            for line in hdr.split(b"\r\n")[1:]:
                if not line:
                    continue
                k, _, v = line.partition(b":")
                k = k.strip()
                if k == b"Nats-Sequence":
                    seq = int(v)
                elif k == b"Nats-Subject":
                    subj = v.strip()
                elif k == b"Nats-Time-Stamp":
                    ts = parse_rfc3339(v.strip())
                elif k not in (b"Nats-Stream", b"Nats-Num-Pending", b"Nats-Last-Sequence"):
                    user = True
            if seq is None or seq > hi:
                st["last"] = max(st["last"], seq or 0)
                return None
            c = ch.chunk
            c.subjects.append(subj)
            c.seqs.append(seq)
            c.times.append(ts)
            c.headers.append(_strip_direct_headers(hdr) if user else None)
            c.datas.append(data)
            c.nbytes += len(data)
            st["last"] = seq
            if len(c.seqs) >= ch.chunk_size:
                ch._flush()
            return None

        sub = await nc.raw_subscribe(inbox, handler)
        subject = f"{API}.DIRECT.GET.{self.stream}"
        try:
            seq = self.lo
            while seq <= hi:
                n = min(self.batch_size, hi - seq + 1)
                req: dict[str, Any] = {"seq": seq, "batch": n}
                if self.filters:
                    req["next_by_subj"] = self.filters[0]
                st["fut"] = loop.create_future()
                st["status"] = b""
                st["pending"] = -1
                await nc.publish(subject, json.dumps(req).encode(), reply=inbox)
                try:
                    await asyncio.wait_for(st["fut"], timeout=self.idle_timeout)
                except asyncio.TimeoutError:
                    await stream_info(nc, self.stream)
                    raise JetStreamSparkError(f"stream {self.stream!r}: direct get timed out") from None
                code = st["status"]
                if code == b"404":
                    seq = await self._direct_more(max(st["last"], seq - 1))
                    continue
                if code == b"503":
                    await stream_info(nc, self.stream)  # missing stream: a clear error
                    raise JetStreamSparkError(f"stream {self.stream!r}: direct get has no responders "
                                              f"(is allow_direct set on the stream?)")
                if code != b"204":
                    raise JetStreamSparkError(f"stream {self.stream!r}: direct get failed: "
                                              f"{code.decode()} {st['desc']}")
                if st["last"] < seq or st["pending"] == 0:
                    seq = await self._direct_more(max(st["last"], seq - 1))
                    continue
                seq = st["last"] + 1
        finally:
            await nc.raw_unsubscribe(sub)
        self._flush()

    async def _direct_more(self, seen: int) -> int:
        """Where the direct gets go on after the answering replica had nothing more past ``seen``: hi + 1 (the
        end) unless the read is short (``_short``)."""
        if seen >= self.hi or not await self._short(seen):
            return self.hi + 1
        return seen + 1


# ---------------------------------------------------------------------------------------------------
# Acked publish windows


class Publisher:
    """JetStream publishes with up to ``window`` acks outstanding; every ack is checked."""

    def __init__(self, nc: FastClient, window: int = 256, ack_timeout: float = 10.0) -> None:
        self.nc, self.window, self.ack_timeout = nc, window, ack_timeout
        self.sem = asyncio.Semaphore(window)
        self.inflight: dict[bytes, str] = {}
        self.errors: list[str] = []
        self.published = 0
        self.duplicates = 0
        self.next = 0
        self.sub: Any = None
        self.prefix = ""
        self.last_ack = time.monotonic()
        self.idle = asyncio.Event()
        self.idle.set()

    async def start(self) -> "Publisher":
        self.prefix = self.nc.new_inbox()
        self.sub = await self.nc.raw_subscribe(self.prefix + ".*", self._on_ack)
        return self

    def _on_ack(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        token = subject[len(self.prefix) + 1:]
        subj = self.inflight.pop(token, None)
        if subj is None:
            return None
        self.last_ack = time.monotonic()
        self.sem.release()
        if not self.inflight:
            self.idle.set()
        if hdr is not None and not data and hdr[8:9] == b" ":
            code = hdr[9:12]
            if code == b"503":
                self.errors.append(f"no stream listens on subject {subj!r} (no responders)")
            else:
                self.errors.append(f"publish to {subj!r} failed: {hdr.splitlines()[0].decode()}")
            return None
        try:
            ack = json.loads(data)
        except ValueError:
            self.errors.append(f"publish to {subj!r}: bad ack {data[:100]!r}")
            return None
        if "error" in ack:
            e = ack["error"]
            self.errors.append(f"publish to {subj!r} failed: {e.get('description')} (err_code {e.get('err_code')})")
        elif ack.get("duplicate"):
            self.duplicates += 1
        else:
            self.published += 1
        return None

    async def publish(self, subject: str, data: bytes, headers: HeaderPairs | None) -> None:
        if self.errors:
            raise JetStreamSparkError(self.errors[0])
        while True:
            if not self.sem.locked():
                await self.sem.acquire()  # a free slot: no timer needed
                break
            try:
                await asyncio.wait_for(self.sem.acquire(), timeout=self.ack_timeout)
                break
            except asyncio.TimeoutError:
                if time.monotonic() - self.last_ack >= self.ack_timeout:
                    raise JetStreamSparkError(f"no publish ack within {self.ack_timeout}s") from None
        self.next += 1
        token = str(self.next).encode()
        self.inflight[token] = subject
        self.idle.clear()
        await self.nc.publish(subject, data, reply=f"{self.prefix}.{self.next}", headers=headers)

    async def drain(self) -> None:
        await self.nc.flush()
        while self.inflight:
            try:
                await asyncio.wait_for(self.idle.wait(), timeout=self.ack_timeout)
            except asyncio.TimeoutError:
                if time.monotonic() - self.last_ack >= self.ack_timeout:
                    raise JetStreamSparkError(f"{len(self.inflight)} publishes not acked within "
                                              f"{self.ack_timeout}s") from None
        if self.sub is not None:
            await self.nc.raw_unsubscribe(self.sub)
            self.sub = None
        if self.errors:
            raise JetStreamSparkError(self.errors[0] + (f" (and {len(self.errors) - 1} more errors)"
                                                        if len(self.errors) > 1 else ""))


# ---------------------------------------------------------------------------------------------------
# Running asyncio code from Spark's synchronous callbacks


def run(coro: Any) -> Any:
    """Run a coroutine to completion in a fresh event loop (driver-side planning calls)."""
    return asyncio.run(coro)


def iterate_in_thread(produce: Callable[[Callable[[Any], None]], Any], maxsize: int = 8) -> Iterator[Any]:
    """Run ``produce(emit)`` (a coroutine function) in its own thread and event loop and yield what it
    emits; its exception, if any, is raised here. Reading the network overlaps with the consumer of this
    iterator (Arrow conversion, Spark)."""
    q: queue.Queue = queue.Queue(maxsize=maxsize)
    end = object()
    stop = threading.Event()

    def emit(item: Any) -> None:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue
        raise ReaderStopped("reader stopped")

    def body() -> None:
        try:
            asyncio.run(produce(emit))
            q.put((end, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
            q.put((end, e))

    t = threading.Thread(target=body, name="rillet-spark-reader", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if isinstance(item, tuple) and len(item) == 2 and item[0] is end:
                if item[1] is not None:
                    raise item[1]
                return
            yield item
    finally:
        stop.set()
