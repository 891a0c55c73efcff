"""MQTT QoS 1 delivery: the PUBACKs a connection reads in one go are handed to the session's consumer together
(``JSA.ack_many`` -> ``AckMixin.on_acks``: on one server, one C_ACK entry for all of them), in any order the
client sends them; the consumer's state and the interest stream end as with one ack at a time, and stay so after
a restart. Also: a QoS 1 PUBLISH on a subject no NATS subscription wants is not published to NATS (the
connection remembers that by the sublist's stamp) until one subscribes. And the retention removals such a C_ACK
makes due go as one entry (``retention.on_acks`` -> ``Stream.delete_msgs``)."""
from __future__ import annotations

import asyncio
import random

import nats
import pytest
from mqttdiff import Raw
from lanes import LANES, use_lane
from test_mqtt_runs import _subscriber, _until

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream.consumer import acks as acksmod
from rillet.mqtt import codec as C
from rillet.server import Options


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


N = 200


def _opts(store: str, **mqtt) -> Options:
    o = Options(host="127.0.0.1", port=-1, server_name="acks",
                jetstream=JetStreamOptions(enabled=True, store_dir=store))
    o.mqtt = {"host": "127.0.0.1", "port": -1, **mqtt}
    return o




def _receive_unacked(r: Raw, n: int) -> list[tuple[int, bytes]]:
    got = []
    while len(got) < n:
        p = r.read(10)
        assert isinstance(p, C.Publish), p
        assert p.qos == 1 and not p.dup
        got.append((p.pi, p.payload))
    return got


def _publish(port: int, topic: str, n: int, cid: str = "apub") -> None:
    r = Raw(port)
    assert r.connect(cid).rc == 0
    r.send(b"".join(C.encode(C.Publish(topic, b"m%d" % i, 1, pi=i + 1)) for i in range(n)))
    acks = 0
    while acks < n:
        p = r.read(10)
        assert isinstance(p, C.Ack) and p.kind == C.PUBACK, p
        acks += 1
    r.close()


def _session_consumer(srv):
    st = srv.jetstream.accounts["$G"].streams["$MQTT_msgs"]
    cs = list(st.consumers.values())
    assert len(cs) == 1, [c.name for c in cs]
    return st, cs[0]


def _record_batches(monkeypatch) -> list[int]:
    sizes: list[int] = []
    real = acksmod.AckMixin.on_acks

    def on_acks(self, subjects, sseqs=None):
        # (the subjects' stream sequences come with them, as the deliveries read them: -1 marks a batch without)
        ok = sseqs is not None and len(sseqs) == len(subjects)
        sizes.append(len(subjects) if ok else -1)
        return real(self, subjects, sseqs)

    monkeypatch.setattr(acksmod.AckMixin, "on_acks", on_acks)
    return sizes


async def test_pubacks_read_together_ack_together_in_any_order(tmp_path, monkeypatch):
    sizes = _record_batches(monkeypatch)
    store = str(tmp_path / "js")
    async with run_server(_opts(store)) as srv:
        port = srv.mqtt_addr[1]
        sub = await asyncio.to_thread(_subscriber, port, "asub", "a/x")
        recv = asyncio.create_task(asyncio.to_thread(_receive_unacked, sub, N))
        await asyncio.to_thread(_publish, port, "a/x", N)
        got = await recv
        assert [m for _, m in got] == [b"m%d" % i for i in range(N)]
        st, c = _session_consumer(srv)
        await _until(lambda: len(c.pending) == N)
        # the first half acked in a shuffled order, in one write, and one of them twice (the second is ignored)
        pis = [pi for pi, _ in got]
        half = pis[:N // 2]
        random.Random(7).shuffle(half)
        sub.send(b"".join(C.encode(C.Ack(C.PUBACK, pi)) for pi in half + half[:1]))
        await _until(lambda: len(c.pending) == N - N // 2)
        assert c.asflr == N // 2 and st.store.state().msgs == N - N // 2 and st.store.state().first_seq == N // 2 + 1
        # the rest from the last one down: the floor stays until the lowest is acked, then moves to the end
        rest = pis[N // 2:]
        sub.send(b"".join(C.encode(C.Ack(C.PUBACK, pi)) for pi in reversed(rest[1:])))
        await _until(lambda: len(c.pending) == 1)
        assert c.asflr == N // 2 and st.store.state().msgs == 1
        sub.send(C.Ack(C.PUBACK, rest[0]))
        await _until(lambda: not c.pending and st.store.state().msgs == 0)
        assert c.asflr == N and c.adflr == N and c.sseq == N + 1
        assert sum(sizes) >= N - 1 and max(sizes) > 1 and min(sizes) > 0, sizes  # (taken together, not one
        # entry per PUBACK, each batch with its stream sequences)
        sub.close()
    async with run_server(_opts(store)) as srv:
        st = srv.jetstream.accounts["$G"].streams["$MQTT_msgs"].store.state()
        assert (st.msgs, st.last_seq) == (0, N)
        c = next(iter(srv.jetstream.accounts["$G"].streams["$MQTT_msgs"].consumers.values()))
        assert not c.pending and c.asflr == N


async def test_unacked_half_is_redelivered_after_a_restart(tmp_path, monkeypatch):
    """Acked together, the acked half is gone for good; the other half comes again to the resumed session (3.1.1:
    after ack_wait, here 1 s)."""
    _record_batches(monkeypatch)
    store = str(tmp_path / "js")
    async with run_server(_opts(store, ack_wait=1)) as srv:
        port = srv.mqtt_addr[1]
        sub = await asyncio.to_thread(_subscriber, port, "rsub", "r/x")
        recv = asyncio.create_task(asyncio.to_thread(_receive_unacked, sub, N))
        await asyncio.to_thread(_publish, port, "r/x", N)
        got = await recv
        st, c = _session_consumer(srv)
        sub.send(b"".join(C.encode(C.Ack(C.PUBACK, pi)) for pi, _ in got[::2]))
        await _until(lambda: len(c.pending) == N // 2 and st.store.state().msgs == N // 2)
        sub.close()
    async with run_server(_opts(store, ack_wait=1)) as srv:
        r = Raw(srv.mqtt_addr[1])
        assert (await asyncio.to_thread(r.connect, "rsub", False)).rc == 0
        again = await asyncio.to_thread(_receive_redelivered, r, N // 2)
        assert sorted(again) == sorted(m for _, m in got[1::2])
        r.close()


def _receive_redelivered(r: Raw, n: int) -> list[bytes]:
    got = []
    while len(got) < n:
        p = r.read(15)
        assert isinstance(p, C.Publish), p
        got.append(p.payload)
        r.send(C.Ack(C.PUBACK, p.pi))
    return got


async def test_qos1_publish_reaches_nats_once_someone_subscribes(tmp_path):
    """No NATS interest: the connection stops publishing the QoS 1 message to NATS (remembered by the sublist's
    stamp); a NATS subscription made later gets the next ones at once."""
    async with run_server(_opts(str(tmp_path / "js"))) as srv:
        r = Raw(srv.mqtt_addr[1])
        assert (await asyncio.to_thread(r.connect, "npub")).rc == 0
        for i in range(3):  # (the first goes the packet path, the next ones the fast one, remembered as quiet)
            r.send(C.Publish("n/x", b"q%d" % i, 1, pi=i + 1))
            p = await asyncio.to_thread(r.read, 10)
            assert isinstance(p, C.Ack) and p.pi == i + 1
        nc = await nats.connect(f"nats://127.0.0.1:{srv.addr[1]}")
        try:
            s = await nc.subscribe("n.x")
            await nc.flush()
            r.send(b"".join(C.encode(C.Publish("n/x", b"v%d" % i, 1, pi=10 + i)) for i in range(3)))
            got = [(await s.next_msg(10)).data for _ in range(3)]
            assert got == [b"v0", b"v1", b"v2"]
            for i in range(3):
                p = await asyncio.to_thread(r.read, 10)
                assert isinstance(p, C.Ack) and p.pi == 10 + i
            await s.unsubscribe()
            await nc.flush()
            r.send(C.Publish("n/x", b"after", 1, pi=20))
            p = await asyncio.to_thread(r.read, 10)
            assert isinstance(p, C.Ack) and p.pi == 20
        finally:
            await nc.close()
            r.close()


def _drain(r: Raw, n: int) -> list:
    got = []
    while len(got) < n:
        got.append(r.read(10))
    return got


async def test_qos1_to_mqtt_qos1_subscriptions_only_skips_their_nats_copy(tmp_path):
    """A QoS 1 PUBLISH whose subject only MQTT QoS 1/2 subscriptions match is not delivered to their NATS
    subscriptions (whose callback would drop it: their consumer delivers it): counted for them all the same
    (MQTT 5's PUBACK says there were subscribers, the subscription's message count moves), each message reaches
    the subscriber once; an MQTT QoS 0 subscription made later gets the next ones from NATS at once."""
    async with run_server(_opts(str(tmp_path / "js"))) as srv:
        port = srv.mqtt_addr[1]

        def subscribe(cid: str, qos: int) -> Raw:
            r = Raw(port, version=5)
            assert r.connect(cid).rc == 0
            r.send(C.encode(C.Subscribe(1, [("k/x", C.SubOpts(qos))]), 5))
            assert r.read() == C.SubAck(1, [qos])
            return r

        s1 = await asyncio.to_thread(subscribe, "k1", 1)
        pub = Raw(port, version=5)
        assert (await asyncio.to_thread(pub.connect, "kpub")).rc == 0

        def burst(first: int, n: int) -> list:
            pub.send(b"".join(C.encode(C.Publish("k/x", b"k%d" % i, 1, pi=i), 5) for i in range(first, first + n)))
            return _drain(pub, n)

        acks = await asyncio.to_thread(burst, 1, 40)
        assert [(a.pi, a.rc) for a in acks] == [(i, 0) for i in range(1, 41)]  # (not 0x10: it has subscribers)
        got = await asyncio.to_thread(_drain, s1, 40)
        assert [(p.payload, p.qos) for p in got] == [(b"k%d" % i, 1) for i in range(1, 41)]
        nss = srv.global_account.match("k.x").psubs
        assert len(nss) == 1 and nss[0].nm == 40
        s1.send(b"".join(C.encode(C.Ack(C.PUBACK, p.pi), 5) for p in got))
        s0 = await asyncio.to_thread(subscribe, "k0", 0)
        acks = await asyncio.to_thread(burst, 41, 10)
        assert [(a.pi, a.rc) for a in acks] == [(i, 0) for i in range(41, 51)]
        got0 = await asyncio.to_thread(_drain, s0, 10)
        assert [(p.payload, p.qos) for p in got0] == [(b"k%d" % i, 0) for i in range(41, 51)]
        got1 = await asyncio.to_thread(_drain, s1, 10)
        assert [(p.payload, p.qos) for p in got1] == [(b"k%d" % i, 1) for i in range(41, 51)]
        with pytest.raises(TimeoutError):  # (each once: no copy from NATS to the QoS 1 subscriber)
            s1.read(0.5)
        for r in (s0, s1, pub):
            r.close()


async def test_ack_all_removes_an_interest_run_in_one_entry_and_logs_a_failed_removal(tmp_path, monkeypatch):
    """The removals a C_ACK with several sequences makes due (here ack policy all, the interest stream's only
    consumer, one server) go as one DELETE entry (``Stream.delete_msgs``); a removal the store refuses fails
    alone: logged, the message kept, the others removed."""
    from rillet.jetstream import stream as streammod
    from rillet.jetstream.store.base import StoreError

    calls: list[int] = []
    real = streammod.Stream.delete_msgs

    def delete_msgs(self, seqs, done):
        calls.append(len(seqs))
        return real(self, seqs, done)

    monkeypatch.setattr(streammod.Stream, "delete_msgs", delete_msgs)
    async with run_server(_opts(str(tmp_path / "js"))) as srv:
        nc = await nats.connect(f"nats://127.0.0.1:{srv.addr[1]}")
        try:
            js = nc.jetstream()
            await js.add_stream(name="WQ", subjects=["wq.>"], retention="interest")
            sub = await js.pull_subscribe("wq.a", "w", config=nats.js.api.ConsumerConfig(
                ack_policy=nats.js.api.AckPolicy.ALL))
            for i in range(10):
                await js.publish("wq.a", b"w%d" % i)
            st = srv.jetstream.accounts["$G"].streams["WQ"]
            errors: list[str] = []

            class Log:  # (the server's logger, its errors kept)
                def __init__(self, log):
                    self.log = log

                def error(self, m, *a, **k):
                    errors.append(m)
                    return self.log.error(m, *a, **k)

                def __getattr__(self, name):
                    return getattr(self.log, name)

            monkeypatch.setattr(st.js, "log", Log(st.js.log))
            store = st.store
            if st._wb_store:  # (the file store's batched removal: the list without 4, 4 failing on its own)
                real_many = store.remove_msgs_soon

                def refuse_four_of(seqs):
                    return [(4, StoreError("refused for the test"))] + real_many([s for s in seqs if s != 4])

                monkeypatch.setattr(store, "remove_msgs_soon", refuse_four_of)
            else:
                real_rm = store.remove_msg

                def refuse_four(seq, *a):
                    if seq == 4:
                        raise StoreError("refused for the test")
                    return real_rm(seq, *a)

                monkeypatch.setattr(store, "remove_msg", refuse_four)
            msgs = await sub.fetch(10, timeout=5)
            assert len(msgs) == 10
            await msgs[-1].ack_sync()
            await _until(lambda: store.state().msgs == 1)
            assert calls == [10]
            assert store.state().first_seq == 4
            assert any("retention removal of message 4 failed" in e and "refused for the test" in e for e in errors)
        finally:
            await nc.close()
