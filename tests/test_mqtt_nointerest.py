"""A QoS 1 message nobody has a QoS 1 subscription for: ``$MQTT_msgs`` (interest retention) does not keep it.
nats-server stores nothing then, it only uses the sequence (stream.go: no consumer interested -> the store's
SkipMsgNoInterest; the PubAck names the sequence). Rillet does the same on one server; the stream's state seen
from the JetStream API is compared with nats-server's, before and after a restart, with and without a pending
message of a subscriber that has not acked (the skipped sequences are then interior gaps)."""
from __future__ import annotations

import asyncio
import time

import nats
import pytest

from mqttdiff import TARGETS, Raw, mqtt_target
from lanes import LANES, use_lane
from rillet.mqtt import codec as C


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


def _msgs_state(url: str) -> dict:
    async def run() -> dict:
        nc = await nats.connect(url)
        try:
            st = (await nc.jetstream().stream_info("$MQTT_msgs")).state
            return {"messages": st.messages, "first_seq": st.first_seq, "last_seq": st.last_seq,
                    "num_deleted": st.num_deleted or 0, "bytes": st.bytes}
        finally:
            await nc.close()
    return asyncio.run(run())


def _last_ts(url: str) -> float:
    """The stream's last time (seconds), from the raw API answer (nats-py's StreamState has no last_ts)."""
    async def run() -> float:
        import json
        from datetime import datetime
        nc = await nats.connect(url)
        try:
            m = await nc.request("$JS.API.STREAM.INFO.$MQTT_msgs", b"", timeout=5)
            ts = json.loads(m.data)["state"]["last_ts"]
            whole, _, frac = ts.rstrip("Z").partition(".")
            return datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (frac or "0"))
        finally:
            await nc.close()
    return asyncio.run(run())


def _publish_qos1(port: int, cid: str, topic: str, n: int, first_pi: int = 1) -> list[int]:
    r = Raw(port)
    assert r.connect(cid).rc == 0
    r.send(b"".join(C.encode(C.Publish(topic, b"p%d" % i, 1, pi=first_pi + i)) for i in range(n)))
    acks = []
    while len(acks) < n:
        p = r.read(10)
        assert isinstance(p, C.Ack) and p.kind == C.PUBACK, p
        acks.append(p.pi)
    r.close()
    return acks


def _wait_state(url: str, want: dict, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = _msgs_state(url)
        if all(st[k] == v for k, v in want.items()) or time.monotonic() > deadline:
            return st
        time.sleep(0.1)


@pytest.mark.parametrize("kind", TARGETS)
def test_qos1_without_subscriber_is_not_kept(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        r = Raw(t.mqtt_port)
        assert r.connect("warm").rc == 0  # (the account's MQTT streams exist from here)
        r.close()
        t0 = time.time()
        assert _publish_qos1(t.mqtt_port, "ni-pub", "ni/a", 20) == list(range(1, 21))
        want = {"messages": 0, "first_seq": 21, "last_seq": 20, "num_deleted": 0, "bytes": 0}
        assert _wait_state(t.nats_url, want) == want
        assert _last_ts(t.nats_url) >= t0 - 1  # the last time moves with the sequence
        t.restart()
        assert _wait_state(t.nats_url, want) == want


@pytest.mark.parametrize("kind", TARGETS)
def test_skipped_sequences_between_pending_messages(kind, tmp_path):
    """A QoS 1 subscriber on ni/s that does not ack keeps its messages; the QoS 1 messages on ni/a in between
    are interior gaps: counted as deleted, as nats-server counts its skipped sequences."""
    with mqtt_target(kind, tmp_path) as t:
        sub = Raw(t.mqtt_port)
        assert sub.connect("ni-sub").rc == 0
        sub.send(C.Subscribe(1, [("ni/s", C.SubOpts(1))]))
        assert isinstance(sub.read(), C.SubAck)
        assert _publish_qos1(t.mqtt_port, "p1", "ni/s", 1) == [1]
        assert _publish_qos1(t.mqtt_port, "p2", "ni/a", 3) == [1, 2, 3]
        assert _publish_qos1(t.mqtt_port, "p3", "ni/s", 1) == [1]
        got = [sub.read(10), sub.read(10)]
        assert [(p.topic, p.payload) for p in got] == [("ni/s", b"p0"), ("ni/s", b"p0")]  # (not acked)
        want = {"messages": 2, "first_seq": 1, "last_seq": 5, "num_deleted": 3}
        st = _wait_state(t.nats_url, want)
        assert {k: st[k] for k in want} == want
        sub.close()


async def test_no_interest_message_is_skipped_not_stored(tmp_path, monkeypatch):
    """Rillet's side: the no-interest QoS 1 messages take the skip entry (no message stored and then removed);
    with a QoS 1 subscriber they are stored as before."""
    from rillet.app.embed import run_server
    from rillet.config.options import JetStreamOptions
    from rillet.jetstream.log import Entry
    from rillet.jetstream.stream import Stream
    from rillet.server import Options

    ops: list[int] = []
    real_apply = Stream.apply

    def apply(self, entry):
        if self.name == "$MQTT_msgs":
            ops.append(entry.op)
        return real_apply(self, entry)

    monkeypatch.setattr(Stream, "apply", apply)
    o = Options(host="127.0.0.1", port=-1, server_name="ni",
                jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path / "js")))
    o.mqtt = {"host": "127.0.0.1", "port": -1}
    async with run_server(o) as srv:
        port = srv.mqtt_addr[1]
        assert await asyncio.to_thread(_publish_qos1, port, "a", "ni/a", 50) == list(range(1, 51))
        assert ops.count(Entry.SKIP) == 50 and Entry.MSG not in ops and Entry.DELETE not in ops, ops
        st = srv.jetstream.accounts["$G"].streams["$MQTT_msgs"].store.state()
        assert (st.msgs, st.last_seq) == (0, 50)
        ops.clear()
        sub = Raw(port)
        assert (await asyncio.to_thread(sub.connect, "s")).rc == 0
        sub.send(C.Subscribe(1, [("ni/a", C.SubOpts(1))]))
        assert isinstance(await asyncio.to_thread(sub.read), C.SubAck)
        assert await asyncio.to_thread(_publish_qos1, port, "b", "ni/a", 5) == list(range(1, 6))
        assert ops.count(Entry.MSG) == 5 and Entry.SKIP not in ops, ops
        sub.close()
