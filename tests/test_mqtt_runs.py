"""MQTT QoS 1 delivery in runs (issue 23's fifth speed step): the session consumer of a QoS 1 subscription (one
literal filter, an internal callback marked ``run_safe``) delivers a burst in runs (``DeliveryMixin._run_new``:
one read of the store and one C_DELIVERED entry per run) rather than one by one. A delivery the MQTT side
does not pass on is acked after the run (``_ack_soon``), never inside it: the consumer records the run first, so
every such ack counts and the interest stream empties. And the interest retention's shortcut for the PUBACK of
the stream's only consumer (no subject lookup)."""
from __future__ import annotations

import asyncio

import nats
import pytest
from mqttdiff import Raw
from lanes import LANES, use_lane

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream.consumer import delivery
from rillet.mqtt import codec as C
from rillet.server import Options


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


N = 300


def _opts(store: str) -> Options:
    o = Options(host="127.0.0.1", port=-1, server_name="runs",
                jetstream=JetStreamOptions(enabled=True, store_dir=store))
    o.mqtt = {"host": "127.0.0.1", "port": -1}
    return o


async def _until(pred, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _subscriber(port: int, cid: str, topic: str) -> Raw:
    r = Raw(port)
    assert r.connect(cid, clean=False).rc == 0
    r.send(C.Subscribe(1, [(topic, C.SubOpts(1))]))
    assert isinstance(r.read(), C.SubAck)
    return r


def _receive(r: Raw, n: int) -> list[bytes]:
    got = []
    while len(got) < n:
        p = r.read(10)
        assert isinstance(p, C.Publish), p
        assert p.qos == 1 and not p.dup
        got.append(p.payload)
        r.send(C.Ack(C.PUBACK, p.pi))
    return got


def _publish(port: int, topic: str, n: int) -> list[int]:
    r = Raw(port)
    assert r.connect("rpub").rc == 0
    r.send(b"".join(C.encode(C.Publish(topic, b"m%d" % i, 1, pi=i + 1)) for i in range(n)))
    acks = []
    while len(acks) < n:
        p = r.read(10)
        assert isinstance(p, C.Ack) and p.kind == C.PUBACK, p
        acks.append(p.pi)
    r.close()
    return acks


def _session_consumer(srv, durable_prefix: str = ""):
    st = srv.jetstream.accounts["$G"].streams["$MQTT_msgs"]
    cs = [c for c in st.consumers.values() if c.name.startswith(durable_prefix)]
    assert len(cs) == 1, [c.name for c in st.consumers.values()]
    return st, cs[0]


def _count_runs(monkeypatch) -> list[int]:
    runs: list[int] = []
    real = delivery.DeliveryMixin._run_new

    def run_new(self, budget):
        n = real(self, budget)
        if n > 0 and self.stream.name == "$MQTT_msgs":
            runs.append(n)
        return n

    monkeypatch.setattr(delivery.DeliveryMixin, "_run_new", run_new)
    return runs


async def test_qos1_burst_is_delivered_in_runs(tmp_path, monkeypatch):
    runs = _count_runs(monkeypatch)
    async with run_server(_opts(str(tmp_path / "js"))) as srv:
        port = srv.mqtt_addr[1]
        sub = await asyncio.to_thread(_subscriber, port, "rsub", "r/x")
        recv = asyncio.create_task(asyncio.to_thread(_receive, sub, N))
        assert await asyncio.to_thread(_publish, port, "r/x", N) == list(range(1, N + 1))
        got = await recv
        assert got == [b"m%d" % i for i in range(N)]  # all of them, in order, none twice
        # the burst went out in runs, most of them longer than one message
        assert sum(runs) == N and len(runs) < N // 2, runs
        st, c = _session_consumer(srv)
        await _until(lambda: st.store.state().msgs == 0)  # every PUBACK acked its message
        assert not c.pending and c.sseq == N + 1 and c.dseq == N + 1 and c.asflr == N  # (dseq: the next one)
        sub.close()


async def test_deliveries_not_passed_on_are_acked_after_the_run(tmp_path, monkeypatch):
    """Messages published by NATS straight into ``$MQTT.msgs.<subject>`` without the ``Nmqtt-Pub`` header are
    QoS 0 to MQTT: the session consumer delivers them (in runs) and the MQTT side acks each without sending it.
    Acked inside the run, before the consumer recorded it, those acks would be lost (the messages kept until
    ack_wait); acked after it, all count."""
    runs = _count_runs(monkeypatch)
    async with run_server(_opts(str(tmp_path / "js"))) as srv:
        port = srv.mqtt_addr[1]
        sub = await asyncio.to_thread(_subscriber, port, "qsub", "q/x")
        nc = await nats.connect(f"nats://127.0.0.1:{srv.addr[1]}")
        try:
            for i in range(N):
                await nc.publish("$MQTT.msgs.q.x", b"n%d" % i)
            await nc.flush()
        finally:
            await nc.close()
        st, c = _session_consumer(srv)
        await _until(lambda: st.store.state().last_seq == N and st.store.state().msgs == 0)
        assert sum(runs) == N, runs  # (all of them delivered by runs)
        await _until(lambda: not c.pending and c.asflr == N)
        # nothing reached the MQTT client; a QoS 1 message after them does, and is acked
        recv = asyncio.create_task(asyncio.to_thread(_receive, sub, 1))
        assert await asyncio.to_thread(_publish, port, "q/x", 1) == [1]
        assert await recv == [b"m0"]
        await _until(lambda: st.store.state().msgs == 0)
        sub.close()


def test_interest_ack_of_the_only_consumer_removes_without_the_subject_lookup() -> None:
    """retention.on_ack on one server when the acking consumer is the stream's only one: the removal is proposed
    without asking the store for the message's subject (nothing else to ask); a message the store lost to
    corruption is left alone as before; with another consumer, or a replicated log, the subject is asked."""
    from rillet.jetstream import retention
    from rillet.jetstream.log import SingleNodeLog

    class Store:
        def __init__(self) -> None:
            self._lost = {7}
            self.asked: list[int] = []

        def subject_for_seq(self, seq):
            self.asked.append(seq)
            return "s"

    class Cfg:
        retention = "interest"

    class Stream:
        closed = False
        cfg = Cfg()

        def __init__(self, consumers, log) -> None:
            self.consumers = consumers
            self.log = log
            self.store = Store()
            self.deleted: list[int] = []

        def delete_msg(self, seq, erase, done):
            self.deleted.append(seq)

    class C:
        closed = False
        ack_policy = "explicit"
        pending: dict = {}
        lss = None
        sseq = 100

        def _matches(self, subject):
            return True

    me = C()
    st = Stream({"me": me}, SingleNodeLog(lambda e: None))
    retention.on_ack(st, me, 5)
    retention.on_ack(st, me, 7)  # (lost: left alone)
    assert st.deleted == [5] and st.store.asked == []
    other = C()
    other.sseq = 6  # (still to deliver 6 and later)
    st2 = Stream({"me": me, "other": other}, SingleNodeLog(lambda e: None))
    retention.on_ack(st2, me, 5)
    retention.on_ack(st2, me, 6)
    assert st2.deleted == [5] and st2.store.asked == [5, 6]

    class OtherLog:
        pass

    st3 = Stream({"me": me}, OtherLog())
    retention.on_ack(st3, me, 5)
    assert st3.deleted == [5] and st3.store.asked == [5]
