"""MQTT QoS 1 publish -> subscribe on one server (issue 23's speed step): a burst of QoS 1 PUBLISHes is stored
into ``$MQTT_msgs`` with write-behind (fewer block writes than messages, every PUBACK after its message is
written, in order), the session's consumer reads the pass's messages back after that write, and the interest
retention removals of the subscriber's PUBACKs go to the state log in batches (fewer records than acks); all of it
is on disk after a restart."""
from __future__ import annotations

import asyncio
import os

import pytest
from mqttdiff import Raw
from lanes import LANES, use_lane
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream.store import filestore as fsmod
from rillet.mqtt import codec as C
from rillet.server import Options


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


N = 300


def _is_msgs(fs) -> bool:
    return os.path.basename(os.path.dirname(fs.dir)) == "$MQTT_msgs"


def _opts(store: str) -> Options:
    o = Options(host="127.0.0.1", port=-1, server_name="qos1",
                jetstream=JetStreamOptions(enabled=True, store_dir=store))
    o.mqtt = {"host": "127.0.0.1", "port": -1}
    return o


def _msgs_stream(srv):
    return srv.jetstream.accounts["$G"].streams["$MQTT_msgs"]


async def _until(pred, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _subscriber(port: int) -> Raw:
    r = Raw(port)
    assert r.connect("qsub", clean=False).rc == 0
    r.send(C.Subscribe(1, [("t/x", C.SubOpts(1))]))
    assert isinstance(r.read(), C.SubAck)
    return r


def _receive(r: Raw, n: int) -> list[bytes]:
    got = []
    while len(got) < n:
        p = r.read(10)
        assert isinstance(p, C.Publish), p
        assert p.qos == 1
        got.append(p.payload)
        r.send(C.Ack(C.PUBACK, p.pi))
    return got


def _publish(port: int, n: int) -> list[int]:
    r = Raw(port)
    assert r.connect("qpub").rc == 0
    r.send(b"".join(C.encode(C.Publish("t/x", b"m%d" % i, 1, pi=i + 1)) for i in range(n)))
    acks = []
    while len(acks) < n:
        p = r.read(10)
        assert isinstance(p, C.Ack) and p.kind == C.PUBACK, p
        acks.append(p.pi)
    r.close()
    return acks


async def test_qos1_burst_gathered_delivered_removed_in_batches(tmp_path, monkeypatch):
    writes = {"gathered_flushes": 0, "log_writes": 0}
    real_flush = fsmod.FileStore.flush_writes
    real_log = fsmod.FileStore._flush_log_pending_locked

    def flush(self):
        if self._wb_off >= 0 and _is_msgs(self):
            writes["gathered_flushes"] += 1
        return real_flush(self)

    def log_write(self, allow_rewrite):
        if _is_msgs(self):
            writes["log_writes"] += 1
        return real_log(self, allow_rewrite)

    monkeypatch.setattr(fsmod.FileStore, "flush_writes", flush)
    monkeypatch.setattr(fsmod.FileStore, "_flush_log_pending_locked", log_write)
    store = str(tmp_path / "js")
    async with run_server(_opts(store)) as srv:
        port = srv.mqtt_addr[1]
        sub = await asyncio.to_thread(_subscriber, port)
        recv = asyncio.create_task(asyncio.to_thread(_receive, sub, N))
        acks = await asyncio.to_thread(_publish, port, N)
        assert acks == list(range(1, N + 1))  # every PUBACK, in order
        got = await recv
        assert got == [b"m%d" % i for i in range(N)]
        st = _msgs_stream(srv)
        await _until(lambda: st.store.state().msgs == 0)
        assert st.store.state().last_seq == N
        # the stores of a burst share writes; so do the removals of the subscriber's acks
        assert 0 < writes["gathered_flushes"] < N // 4, writes
        assert writes["log_writes"] < N // 4, writes
        sub.close()
    async with run_server(_opts(store)) as srv:
        st = _msgs_stream(srv).store.state()
        assert (st.msgs, st.last_seq) == (0, N)



def _connect_one(port: int) -> Raw:
    r = Raw(port)
    assert r.connect("qone").rc == 0
    return r


def _publish_one_qos1(r: Raw) -> bool:
    """One QoS 1 PUBLISH: whether a PUBACK came before the connection closed (or 5 s passed)."""
    r.send(C.Publish("t/x", b"one", 1, pi=7))
    try:
        p = r.read(5)
    except Exception:  # (a read timeout: nothing came)
        p = None
    r.close()
    return isinstance(p, C.Ack) and p.kind == C.PUBACK


def _publish_burst(port: int, n: int) -> None:
    r = Raw(port)
    assert r.connect("qfull").rc == 0
    r.send(b"".join(C.encode(C.Publish("t/x", b"f%d" % i, 1, pi=i + 1)) for i in range(n)))
    r.closed(3)  # (whatever the answers: what the server decided is checked from its side)
    r.close()


async def test_failed_gathered_write_answers_the_taken_back_stores_with_the_error(tmp_path, monkeypatch):
    """The pass's first QoS 1 message is written at once and answered stored; the write of the gathered rest
    fails (a full disk): the store takes them back and each of their held answers is the store's error (what
    the MQTT side then sends is its own decision), none of them stored."""
    from rillet.mqtt.store import QoS1Store
    store = str(tmp_path / "js")
    real = fsmod._write_all
    answers: list = []
    real_stored, real_done = QoS1Store.stored, QoS1Store.done

    def full_for_batches(fd, bufs, off, total):
        if total > 1000:  # (the gathered records; one record is ~200 bytes)
            raise OSError(28, "No space left on device")
        return real(fd, bufs, off, total)

    def stored(self, seq):  # (a store answered stored)
        answers.append((self.pi, None))
        return real_stored(self, seq)

    def done(self, err):  # (any other answer: an error, a duplicate)
        answers.append((self.pi, err))
        return real_done(self, err)

    monkeypatch.setattr(QoS1Store, "stored", stored)
    monkeypatch.setattr(QoS1Store, "done", done)
    async with run_server(_opts(store)) as srv:
        port = srv.mqtt_addr[1]
        sub = await asyncio.to_thread(_subscriber, port)  # (the account's MQTT streams exist from here)
        st = _msgs_stream(srv)
        before = st.store.state().last_seq
        monkeypatch.setattr(fsmod, "_write_all", full_for_batches)
        await asyncio.to_thread(_publish_burst, port, 50)
        monkeypatch.setattr(fsmod, "_write_all", real)
        ok = [pi for pi, err in answers if err is None]
        failed = [(pi, err) for pi, err in answers if err is not None]
        assert ok == [1] and failed and [pi for pi, _ in failed] == list(range(2, len(failed) + 2)), answers
        assert all(getattr(e, "err_code", None) == 10023 for _, e in failed), failed  # (insufficient resources)
        assert st.store.state().last_seq == before + 1  # the answered one, no more
        got = await asyncio.to_thread(_receive, sub, 1)
        assert got == [b"f0"]
        sub.close()


async def test_a_refused_store_gets_no_puback(tmp_path, monkeypatch):
    """A QoS 1 message the stream refuses (a full disk: 10023, whose API code is 503) gets no PUBACK: the client
    keeps it and the connection is closed, as nats-server does when its store request fails. (Before, every code
    503 answer was taken for "nobody answered" and acknowledged.)"""
    store = str(tmp_path / "js")
    real = fsmod._write_all

    def full(fd, bufs, off, total):
        raise OSError(28, "No space left on device")

    async with run_server(_opts(store)) as srv:
        port = srv.mqtt_addr[1]
        sub = await asyncio.to_thread(_subscriber, port)
        pub = await asyncio.to_thread(_connect_one, port)
        monkeypatch.setattr(fsmod, "_write_all", full)
        try:
            acked = await asyncio.to_thread(_publish_one_qos1, pub)
        finally:
            monkeypatch.setattr(fsmod, "_write_all", real)
        assert acked is False
        sub.close()
