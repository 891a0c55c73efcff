"""MQTT QoS 1 publish -> subscribe on one server (issue 23's speed step): a burst of QoS 1 PUBLISHes is stored
into ``$MQTT_msgs`` with write-behind (fewer block writes than messages, every PUBACK after its message is
written, in order), the session's consumer reads the pass's messages back after that write, and the interest
retention removals of the subscriber's PUBACKs go to the state log in batches (fewer records than acks); all of it
is on disk after a restart."""
from __future__ import annotations

import asyncio
import os

from mqttdiff import Raw
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream.store import filestore as fsmod
from rillet.mqtt import codec as C
from rillet.server import Options

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
