"""The client workloads of the JetStream fault harness, and their checkers.

* :class:`QueueWorkload` - publishers send unique values with synchronous JetStream publishes to an R3
  file stream (each publish recorded attempted / ok / fail / info with times); a durable pull consumer
  fetches and acks them. :func:`check_queue` compares what was acknowledged with what the stream holds
  and what the consumer got.
* :class:`KVWorkload` - clients do get / put / update-with-revision on a few keys of an R3 KV bucket,
  recorded as a :class:`~faults.history.History` for the CAS-register linearizability checker.
* :class:`SchemaWorkload` - creates streams (with a few messages) and durable consumers while the faults
  happen; every one whose creation was acknowledged must still exist afterwards, on every server.
"""
from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from .history import History

STREAM = "JF"
SUBJECT = "jf.q"
CONSUMER = "JFC"
BUCKET = "jfkv"


async def connect(urls: list[str], name: str, errors: list[str] | None = None):
    """A client preferring ``urls[0]``, failing over to the others for ever."""
    async def on_err(e: Exception) -> None:
        if errors is not None and len(errors) < 1000:
            errors.append(f"{name}: {e!r}")

    async def quiet(*_a: Any) -> None:
        return None
    return await nats.connect(servers=urls, dont_randomize=True, reconnect_time_wait=0.25,
                              max_reconnect_attempts=-1, connect_timeout=1.0, ping_interval=1,
                              max_outstanding_pings=3, name=name, error_cb=on_err,
                              disconnected_cb=quiet, reconnected_cb=quiet, closed_cb=quiet)


# JetStream err_codes taken as indeterminate instead of refusals (--indeterminate-errors): to look past a
# known bug where a server answers an error for an operation that may still take effect
INDETERMINATE_ERR_CODES: set[int] = set()


def classify(e: BaseException) -> str:
    """``fail`` for an answer that says the operation was refused, ``info`` for anything that leaves it
    unknown (timeout, lost connection, a client-side error)."""
    if getattr(e, "err_code", None) in INDETERMINATE_ERR_CODES:
        return "info"
    if isinstance(e, (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError,
                      nats.js.errors.KeyWrongLastSequenceError)):
        return "fail"
    if isinstance(e, nats.js.errors.APIError) and getattr(e, "code", None) is not None:
        return "fail"
    return "info"


def err_text(e: BaseException) -> str:
    if isinstance(e, nats.js.errors.APIError):
        code, err_code = getattr(e, "code", None), getattr(e, "err_code", None)
        if code is None and err_code is None:
            return type(e).__name__
        return f"{type(e).__name__}({code}/{err_code}: {getattr(e, 'description', '')})"
    return type(e).__name__


# ==== the queue ===============================================================================================

@dataclass
class PubRecord:
    value: str
    publisher: int
    t_invoke: float
    type: str = "pending"     # "ok" | "fail" | "info" | "pending"
    t_done: float = 0.0
    seq: int = 0
    error: str = ""
    server: str = ""          # the server the publisher was connected to when the answer came


@dataclass
class QueueReport:
    attempted: int = 0
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    in_stream: int = 0
    stream_msgs: int = 0
    lost: list[str] = field(default_factory=list)              # acked, not in the stream
    not_consumed: list[str] = field(default_factory=list)      # acked, never delivered to the consumer
    duplicated: dict[str, list[int]] = field(default_factory=dict)  # value -> stream seqs (more than one)
    unexpected: list[str] = field(default_factory=list)        # in the stream, never sent
    failed_present: list[str] = field(default_factory=list)    # refused (fail), yet stored
    indeterminate_present: int = 0
    seq_mismatch: list[str] = field(default_factory=list)      # acked at seq s, the stream holds another value at s
    # one sequence acknowledged for two values (a stream that went on from a lost range and gave it again)
    seq_reused: dict[int, list[str]] = field(default_factory=dict)
    consumed: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.not_consumed or self.duplicated or self.unexpected or self.failed_present
                    or self.seq_mismatch or self.seq_reused)

    def lines(self) -> list[str]:
        out = [f"queue: attempted {self.attempted}, acked {self.acked}, failed {self.failed}, indeterminate "
               f"{self.indeterminate} ({self.indeterminate_present} of them stored); stream holds "
               f"{self.stream_msgs} messages ({self.in_stream} distinct values); consumer got {self.consumed}",
               f"queue: lost {len(self.lost)}, duplicated {len(self.duplicated)}, unexpected "
               f"{len(self.unexpected)}, refused-but-stored {len(self.failed_present)}, acked-seq mismatches "
               f"{len(self.seq_mismatch)}, acked-never-consumed {len(self.not_consumed)}, sequences acked twice "
               f"{len(self.seq_reused)}"]
        for label, vals in (("lost", self.lost), ("never consumed", self.not_consumed),
                            ("unexpected", self.unexpected), ("refused but stored", self.failed_present),
                            ("acked seq mismatch", self.seq_mismatch)):
            if vals:
                out.append(f"  {label} (first 20): {sorted(vals)[:20]}")
        if self.duplicated:
            out.append(f"  duplicated (first 20): {sorted(self.duplicated.items())[:20]}")
        if self.seq_reused:
            out.append(f"  sequence acked for two values (first 20): {sorted(self.seq_reused.items())[:20]}")
        return out


def check_queue(records: dict[str, PubRecord], stream: list[tuple[int, str]], consumed: set[str]) -> QueueReport:
    """``stream``: every (sequence, value) read back from the stream; ``consumed``: every value the
    durable consumer received."""
    r = QueueReport(attempted=len(records))
    seqs: dict[str, list[int]] = {}
    by_seq: dict[int, str] = {}
    for seq, v in stream:
        seqs.setdefault(v, []).append(seq)
        by_seq[seq] = v
    r.stream_msgs = len(stream)
    r.in_stream = len(seqs)
    r.consumed = len(consumed)
    for v, rec in records.items():
        present = v in seqs
        if rec.type == "ok":
            r.acked += 1
            if not present:
                r.lost.append(v)
            elif by_seq.get(rec.seq) != v:
                r.seq_mismatch.append(f"{v}@{rec.seq}={by_seq.get(rec.seq)}")
            if v not in consumed:
                r.not_consumed.append(v)
        elif rec.type == "fail":
            r.failed += 1
            if present:
                r.failed_present.append(v)
        else:
            r.indeterminate += 1
            r.indeterminate_present += present
    r.duplicated = {v: s for v, s in seqs.items() if len(s) > 1}
    r.unexpected = [v for v in seqs if v not in records]
    acked_at: dict[int, list[str]] = {}
    for v, rec in records.items():
        if rec.type == "ok" and rec.seq:
            acked_at.setdefault(rec.seq, []).append(v)
    r.seq_reused = {s: sorted(vs) for s, vs in acked_at.items() if len(vs) > 1}
    return r


class QueueWorkload:
    def __init__(self, urls_from, n_publishers: int = 3, timeout: float = 3.0, rate: float = 0.0) -> None:
        self.urls_from = urls_from
        self.n_publishers = n_publishers
        self.timeout = timeout
        self.rate = rate            # publishes a second, all publishers together (0: as fast as acks come)
        self.records: dict[str, PubRecord] = {}
        self.consumed: set[str] = set()
        self.acked: set[str] = set()          # consumer acks the server confirmed
        # Deliveries of a value whose ack confirmation had *arrived* before the delivery arrived (both stamped
        # in wire order by the consumer's connection, see ``consumer``): a broken promise. A redelivery the
        # server sent before it confirmed the ack arrives first (same route, same client connection) and
        # only counts in ``seen_after_ack`` (the fetch that returns it may come after the confirmation:
        # nats.py keeps a late delivery in the subscription's queue for the next fetch).
        self.redelivered_after_ack = 0
        self.seen_after_ack = 0
        self.ack_confirmed_at: dict[str, float] = {}
        self._ack_rx: dict[str, int] = {}     # value -> arrival number of its ack confirmation
        self._rx = 0                          # arrival counter of the consumer's connection
        # (value, ack confirmed at, delivered again at, stream seq, delivery count) for the first few of them
        self.redeliveries: list[tuple[str, float, float, int, int]] = []
        self._ack_waiters: dict[str, Any] = {}
        self._ack_inbox = ""
        self._ack_n = 0
        self.deliveries = 0
        self.ack_failures = 0
        self.errors: list[str] = []
        self.stop = asyncio.Event()
        self.stop_consumer = asyncio.Event()
        self._conns: list = []

    async def setup(self, js, replicas: int = 3) -> None:
        await js.add_stream(name=STREAM, subjects=[SUBJECT], num_replicas=replicas, storage=api.StorageType.FILE)
        await js.add_consumer(STREAM, api.ConsumerConfig(durable_name=CONSUMER, ack_policy=api.AckPolicy.EXPLICIT,
                                                         ack_wait=4.0, max_ack_pending=-1,
                                                         max_deliver=-1))

    async def publisher(self, i: int) -> None:
        nc = await connect(self.urls_from(i), f"pub{i}", self.errors)
        self._conns.append(nc)
        js = nc.jetstream(timeout=self.timeout)
        interval = self.n_publishers / self.rate if self.rate else 0.0
        nxt = time.monotonic()
        n = 0
        while not self.stop.is_set():
            n += 1
            v = f"p{i}-{n}"
            rec = PubRecord(v, i, time.monotonic())
            self.records[v] = rec
            try:
                ack = await js.publish(SUBJECT, v.encode())
                rec.type, rec.seq = "ok", ack.seq
            except Exception as e:  # every outcome is recorded; the kind decides fail or info
                rec.type, rec.error = classify(e), err_text(e)
                # (no stream answering, or no connection: do not spin)
                await asyncio.sleep(0.05 if rec.type == "fail" else 0.1 if not nc.is_connected else 0)
            rec.t_done = time.monotonic()
            if rec.type != "ok":
                u = nc.connected_url
                rec.server = f"{u.hostname}:{u.port}" if u is not None else "-"
            if interval:
                nxt = max(nxt + interval, time.monotonic() - 1.0)
                await asyncio.sleep(max(0.0, nxt - time.monotonic()))

    def _stamp(self, queue: Any, on_msg: Any = None) -> None:
        """Number each message as the connection's reader hands it to ``queue`` (wire order: the reader
        processes one message at a time); with ``on_msg`` the message is handed there instead."""
        put = queue.put_nowait

        def stamped(msg: Any) -> None:
            self._rx += 1
            msg.rx = self._rx
            if on_msg is not None:
                on_msg(msg)
            else:
                put(msg)
        queue.put_nowait = stamped

    def _ack_reply(self, msg: Any) -> None:
        fut = self._ack_waiters.pop(msg.subject, None)
        if fut is not None and not fut.done():
            fut.set_result(msg)

    async def _ack(self, nc, m, v: str) -> None:
        # AckSync as nats.py does it (an empty ack with a reply), with our own reply subscription so that the
        # confirmation is numbered in arrival order with the deliveries
        self._ack_n += 1
        inbox = f"{self._ack_inbox}.{self._ack_n}"
        fut = asyncio.get_running_loop().create_future()
        self._ack_waiters[inbox] = fut
        try:
            await nc.publish(m.reply, b"", reply=inbox)
            r = await asyncio.wait_for(fut, self.timeout)
            status = (r.headers or {}).get("Status", "")
            if status:
                raise nats.errors.NoRespondersError if status == "503" else RuntimeError(f"status {status}")
        except Exception as e:  # not acknowledged: it comes again after ack_wait
            self.ack_failures += 1
            if len(self.errors) < 1000:
                self.errors.append(f"ack: {err_text(e) or type(e).__name__}")
            return
        finally:
            self._ack_waiters.pop(inbox, None)
        self.acked.add(v)
        self.ack_confirmed_at[v] = time.monotonic()
        self._ack_rx[v] = r.rx

    def note_delivery(self, v: str, rx: int) -> str:
        """Count a delivery of ``v`` that arrived as message number ``rx``: ``new`` (no confirmed ack yet),
        ``early`` (its ack is confirmed but this delivery arrived before the confirmation: sent before it) or
        ``broken`` (arrived after the confirmation: delivered again after a confirmed ack)."""
        self.deliveries += 1
        self.consumed.add(v)
        if v not in self.acked:
            return "new"
        self.seen_after_ack += 1
        if rx < self._ack_rx.get(v, 0):
            return "early"
        self.redelivered_after_ack += 1
        return "broken"

    async def consumer(self, i: int) -> None:
        nc = await connect(self.urls_from(i), "consumer", self.errors)
        self._conns.append(nc)
        js = nc.jetstream(timeout=self.timeout)
        sub = await js.pull_subscribe_bind(durable=CONSUMER, stream=STREAM)
        self._stamp(sub._sub._pending_queue)
        self._ack_inbox = nc.new_inbox()
        asub = await nc.subscribe(self._ack_inbox + ".*")
        self._stamp(asub._pending_queue, self._ack_reply)
        while not self.stop_consumer.is_set():
            try:
                msgs = await sub.fetch(200, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            except Exception as e:  # a fault: note it, go on
                if len(self.errors) < 1000:
                    self.errors.append(f"fetch: {err_text(e)}")
                await asyncio.sleep(0.2)
                continue
            vals = []
            for m in msgs:
                v = m.data.decode()
                if self.note_delivery(v, getattr(m, "rx", 0)) == "broken" and len(self.redeliveries) < 20:
                    md = m.metadata
                    self.redeliveries.append((v, self.ack_confirmed_at.get(v, 0.0), time.monotonic(),
                                              md.sequence.stream, md.num_delivered))
                vals.append(v)
            # acknowledgements confirmed by the server (pipelined: one round trip for the batch)
            await asyncio.gather(*(self._ack(nc, m, v) for m, v in zip(msgs, vals)))

    async def drain(self, js, timeout: float = 30.0) -> bool:
        """Wait until the durable consumer has nothing pending and nothing unacknowledged; ``timeout`` is
        how long it may go without progress."""
        deadline = time.monotonic() + timeout
        quiet_since = None
        last = None
        while time.monotonic() < deadline:
            try:
                ci = await js.consumer_info(STREAM, CONSUMER, timeout=2.0)
                left = (ci.num_pending, ci.num_ack_pending)
            except Exception as e:
                self.errors.append(f"drain consumer_info: {err_text(e)}")
                left = None
            if left == (0, 0):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    return True
            else:
                quiet_since = None
                if left is not None and left != last:
                    deadline = max(deadline, time.monotonic() + timeout)
                    last = left
            await asyncio.sleep(0.5)
        return False

    async def close(self) -> None:
        for nc in self._conns:
            with contextlib.suppress(Exception):
                await nc.close()


async def read_stream(js, stream: str, subject: str, timeout: float = 60.0) -> list[tuple[int, str]]:
    """Every message of ``stream`` as (sequence, value), through an ephemeral pull consumer (no acks)."""
    info = await js.stream_info(stream)
    last = info.state.last_seq
    want = info.state.messages
    sub = await js.pull_subscribe(subject, stream=stream, config=api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE, deliver_policy=api.DeliverPolicy.ALL, inactive_threshold=30.0))
    out: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < want and time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(500, timeout=2.0)
            except nats.errors.TimeoutError:
                if out and max(out) >= last:
                    break
                continue
            for m in msgs:
                out[m.metadata.sequence.stream] = m.data.decode()
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return sorted(out.items())


# ==== the KV CAS register ======================================================================================

class KVWorkload:
    def __init__(self, urls_from, rng: random.Random, n_clients: int = 5, keys: int = 3, timeout: float = 2.0,
                 pace: float = 0.05, direct: bool = False) -> None:
        self.urls_from = urls_from
        self.rng = rng
        self.n_clients = n_clients
        self.keys = [f"k{i}" for i in range(keys)]
        self.timeout = timeout
        self.pace = pace
        self.direct = direct
        self.history = History()
        self.errors: list[str] = []
        self.stop = asyncio.Event()
        self._next_value = 0
        self._conns: list = []
        # revision -> value written at it, as learnt from reads and acknowledged writes (a cas names a
        # revision; the model compares values: every value is written once, so the two agree)
        self.rev_value: dict[int, int] = {}
        self.rev_conflicts: list[str] = []

    async def setup(self, js, replicas: int = 3) -> None:
        await js.create_key_value(bucket=BUCKET, history=1, replicas=replicas, storage=api.StorageType.FILE,
                                  direct=self.direct)

    def _learn(self, rev: int, value: int) -> None:
        old = self.rev_value.setdefault(rev, value)
        if old != value:
            self.rev_conflicts.append(f"revision {rev} holds {old} and {value}")

    async def client(self, i: int) -> None:
        nc = await connect(self.urls_from(i), f"kv{i}", self.errors)
        self._conns.append(nc)
        js = nc.jetstream(timeout=self.timeout)
        kv = await js.key_value(BUCKET)   # (reads through the stream leader unless the bucket allows direct)
        proc = self.history.new_process()
        seen: dict[str, tuple[int | None, int]] = {}   # key -> (value, revision) this client last saw
        while not self.stop.is_set():
            key = self.rng.choice(self.keys)
            r = self.rng.random()
            if r < 0.4:
                self.history.invoke(proc, "read", key, None)
                try:
                    e = await kv.get(key)
                    val = int(e.value)
                    self._learn(e.revision, val)
                    seen[key] = (val, e.revision)
                    self.history.complete(proc, "ok", val)
                except nats.js.errors.KeyNotFoundError:
                    seen[key] = (None, 0)
                    self.history.complete(proc, "ok", None)
                except Exception as e:
                    self.history.complete(proc, classify(e), error=err_text(e))
                    if classify(e) == "info":
                        proc = self.history.new_process()
            else:
                self._next_value += 1
                new = self._next_value
                if r < 0.6:
                    f, arg, last = "write", new, None
                else:
                    exp, last = seen.get(key, (None, 0))
                    f, arg = "cas", (exp, new)
                self.history.invoke(proc, f, key, arg)
                try:
                    if last is None:
                        rev = await kv.put(key, str(new).encode())
                    else:
                        rev = await kv.update(key, str(new).encode(), last=last)
                    self._learn(rev, new)
                    seen[key] = (new, rev)
                    self.history.complete(proc, "ok")
                except Exception as e:
                    kind = classify(e)
                    self.history.complete(proc, kind, error=err_text(e))
                    if kind == "info":
                        proc = self.history.new_process()
            if self.pace:
                await asyncio.sleep(self.pace * (0.5 + self.rng.random()))

    async def close(self) -> None:
        for nc in self._conns:
            with contextlib.suppress(Exception):
                await nc.close()


# ==== streams and consumers created under faults ==============================================================

@dataclass
class Created:
    name: str
    stream: str = "pending"      # "ok" | "fail" | "info"
    msgs_acked: int = 0
    consumer: str = "-"          # "ok" | "fail" | "info" | "-" (not tried)
    error: str = ""


class SchemaWorkload:
    """Every ``every`` seconds: create stream JFS<n> (R3, file), publish 3 messages, create durable D."""

    def __init__(self, urls_from, every: float = 2.0, timeout: float = 4.0) -> None:
        self.urls_from = urls_from
        self.every = every
        self.timeout = timeout
        self.created: list[Created] = []
        self.errors: list[str] = []
        self.stop = asyncio.Event()
        self._nc = None

    async def run(self) -> None:
        self._nc = await connect(self.urls_from(1), "schema", self.errors)
        js = self._nc.jetstream(timeout=self.timeout)
        n = 0
        while not self.stop.is_set():
            n += 1
            c = Created(f"JFS{n}")
            self.created.append(c)
            try:
                await js.add_stream(name=c.name, subjects=[f"jfs.{n}"], num_replicas=3,
                                    storage=api.StorageType.FILE)
                c.stream = "ok"
            except Exception as e:
                c.stream, c.error = classify(e), err_text(e)
            if c.stream == "ok":
                for k in range(3):
                    try:
                        await js.publish(f"jfs.{n}", b"%d" % k)
                        c.msgs_acked += 1
                    except Exception as e:
                        c.error = err_text(e)
                try:
                    await js.add_consumer(c.name, api.ConsumerConfig(durable_name="D",
                                                                     ack_policy=api.AckPolicy.EXPLICIT))
                    c.consumer = "ok"
                except Exception as e:
                    c.consumer, c.error = classify(e), err_text(e)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.every)

    async def close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
