"""The steady-state read of a 3.1.1 connection (QoS 0/1 PUBLISH, PUBACK, PINGREQ read in bulk): packets
split anywhere across reads, mixed with other packets, and a bad one after good ones, give the same answers
as nats-server (run against both)."""
from __future__ import annotations

import time

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


def _drain(r: Raw, want: int, timeout: float = 10) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        p = r.read(timeout=max(deadline - time.monotonic(), 0.1))
        if p == "EOF":
            break
        out.append(p)
    return out


@pytest.mark.parametrize("kind", TARGETS)
def test_bulk_publishes_split_anywhere(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        sub = Raw(t.mqtt_port)
        assert sub.connect("fsub").rc == 0
        sub.send(C.Subscribe(1, [("f/#", C.SubOpts(1))]))
        assert sub.read() == C.SubAck(1, [1])
        pub = Raw(t.mqtt_port)
        assert pub.connect("fpub").rc == 0
        pkts = []
        for i in range(300):
            qos = i % 2
            pkts.append(C.encode(C.Publish(f"f/{i % 7}", b"p%d" % i * (1 + i % 90), qos, pi=i + 1 if qos else 0)))
            if i == 150:
                pkts.append(b"\xc0\x00")  # PINGREQ in the middle
            if i == 200:
                pkts.append(C.encode(C.Subscribe(9, [("g/x", C.SubOpts(0))])))  # a packet the bulk read leaves
        data = b"".join(pkts)
        step = 1
        pos = 0
        while pos < len(data):  # odd-sized writes: packets and remaining lengths split across reads
            pub.send(data[pos:pos + step])
            pos += step
            step = step * 3 % 509 + 1
            time.sleep(0.0005)
        got = _drain(pub, 150 + 2)
        acks = [p.pi for p in got if isinstance(p, C.Ack)]
        assert acks == [i + 1 for i in range(1, 300, 2)]  # every QoS 1 PUBACK, in order
        assert C.PingResp() in got and C.SubAck(9, [0]) in got
        msgs = _drain(sub, 300)
        for q in (0, 1):  # in order per QoS (QoS 1 comes through the subscription's consumer)
            assert [(m.topic, m.payload) for m in msgs if m.qos == q] == \
                [(f"f/{i % 7}", b"p%d" % i * (1 + i % 90)) for i in range(q, 300, 2)]
        # a wildcard topic after good packets in the same write: the good ones count, then the close
        pub.send(C.encode(C.Publish("f/ok", b"last")) + C.encode(C.Publish("f/+", b"bad")))
        assert pub.closed(timeout=5)
        m = sub.read()
        assert isinstance(m, C.Publish) and m.payload == b"last"
        if m.qos:
            sub.send(C.Ack(C.PUBACK, m.pi))
        for p in msgs:
            if p.qos:
                sub.send(C.Ack(C.PUBACK, p.pi))
        sub.send(C.PingReq())
        assert sub.read() == C.PingResp()


def test_mqtt5_bulk_publishes_as_the_packet_path(tmp_path):
    """MQTT 5 takes the bulk read too (PUBLISH without properties, PUBACK without a reason code): what NATS
    and MQTT subscribers get, and the PUBACK reason codes, are the packet path's, with packets that need it
    (properties, a topic alias) mixed in."""
    import asyncio

    import nats

    with mqtt_target("rillet", tmp_path) as t:
        async def run() -> None:
            nc = await nats.connect(t.nats_url)
            ns = await nc.subscribe("v5.>")
            await nc.flush()
            sub = Raw(t.mqtt_port, version=5)
            assert sub.connect("f5sub").rc == 0
            sub.send(C.encode(C.Subscribe(1, [("v5/#", C.SubOpts(1))]), 5))
            assert sub.read() == C.SubAck(1, [1])
            pub = Raw(t.mqtt_port, version=5)
            assert pub.connect("f5pub").rc == 0
            pkts = []
            want = []
            for i in range(120):
                qos = i % 2
                props: dict = {}
                if i % 10 == 3:
                    props = {"user_property": [("k", str(i))]}
                elif i % 10 == 7:
                    props = {"topic_alias": 5}
                pkts.append(C.encode(C.Publish(f"v5/{i % 3}", b"q%d" % i, qos, pi=i + 1 if qos else 0, props=props), 5))
                want.append((f"v5/{i % 3}", b"q%d" % i, qos, props.get("user_property")))
            # and QoS 1 to a topic nobody subscribes to: PUBACK 0x10 (no matching subscribers)
            pkts.append(C.encode(C.Publish("nobody/here", b"x", 1, pi=500), 5))
            data = b"".join(pkts)
            step, pos = 1, 0
            while pos < len(data):
                pub.send(data[pos:pos + step])
                pos += step
                step = step * 5 % 307 + 1
                await asyncio.sleep(0.0005)
            got = _drain(pub, 61)
            acks = [(p.pi, p.rc) for p in got if isinstance(p, C.Ack)]
            assert acks == [(i + 1, 0) for i in range(1, 120, 2)] + [(500, 0x10)]
            msgs = _drain(sub, 120)
            for q in (0, 1):
                assert [(m.topic, m.payload) for m in msgs if m.qos == q] == \
                    [(w[0], w[1]) for w in want if w[2] == q]
            for m in msgs:
                up = m.props.get("user_property")
                assert up == next(w[3] for w in want if w[1] == m.payload)
                if m.qos:
                    sub.send(C.encode(C.Ack(C.PUBACK, m.pi), 5))
            nmsgs = [await ns.next_msg(timeout=5) for _ in range(120)]
            assert [m.data for m in nmsgs] == [w[1] for w in want]
            for m, w in zip(nmsgs, want):
                assert m.headers["Nmqtt-Pub"] == str(w[2])
                assert "Nmqtt-Props" in m.headers  # (the client id, for no local)
                assert m.headers.get("k") == (w[3][0][1] if w[3] else None)
            await nc.close()
        asyncio.run(run())


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("watched", [False, True])
def test_qos1_store_answers(kind, watched, tmp_path):
    """A QoS 1 PUBLISH is stored in $MQTT_msgs and PUBACKed once stored; a store the stream refuses closes the
    connection without a PUBACK. Rillet hands the message straight to the stream when the stream's
    subscription is the subject's only one, and through the account's delivery (reply subject, PubAck
    message) when a NATS subscriber also listens on ``$MQTT.msgs.>`` (``watched``): the answers are the same,
    and the watcher gets every message either way."""
    import asyncio

    import nats

    with mqtt_target(kind, tmp_path) as t:
        async def run() -> None:
            pub = Raw(t.mqtt_port)
            assert pub.connect("stpub").rc == 0  # (the account's MQTT streams exist from here)
            nc = await nats.connect(t.nats_url)
            js = nc.jetstream()
            watch = await nc.subscribe("$MQTT.msgs.>") if watched else None
            await nc.flush()
            first = (await js.stream_info("$MQTT_msgs")).state.last_seq
            for i in range(5):
                pub.send(C.Publish("st/a", b"m%d" % i, 1, pi=i + 1))
            assert [pub.read() for _ in range(5)] == [C.Ack(C.PUBACK, i + 1) for i in range(5)]
            assert (await js.stream_info("$MQTT_msgs")).state.last_seq == first + 5
            cfg = (await js.stream_info("$MQTT_msgs")).config
            cfg.max_msg_size = 64
            await js.update_stream(cfg)
            pub.send(C.Publish("st/a", b"small", 1, pi=6))
            assert pub.read() == C.Ack(C.PUBACK, 6)
            pub.send(C.Publish("st/a", b"x" * 100, 1, pi=7))  # refused by the stream: no PUBACK, closed
            assert pub.closed(timeout=10)
            assert (await js.stream_info("$MQTT_msgs")).state.last_seq == first + 6
            if watch is not None:
                got = [await watch.next_msg(timeout=5) for _ in range(7)]
                assert [(m.subject, m.data) for m in got] == \
                    [("$MQTT.msgs.st.a", b"m%d" % i) for i in range(5)] + \
                    [("$MQTT.msgs.st.a", b"small"), ("$MQTT.msgs.st.a", b"x" * 100)]
                assert all(m.headers == {"Nmqtt-Pub": "1"} for m in got)
            await nc.close()
        asyncio.run(run())


def test_qos1_direct_store_counts_as_routed(tmp_path):
    """/varz message totals do not depend on the store's path: QoS 1 PUBLISHes stored straight into $MQTT_msgs
    count the same in_msgs/in_bytes as ones stored through the account's delivery (a NATS watcher on
    ``$MQTT.msgs.>`` forces that path): the PubAck the direct path does not send is counted as sent."""
    import asyncio
    import json
    import urllib.request

    import nats

    def varz() -> tuple[int, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{t.http_port}/varz", timeout=10) as r:
            v = json.load(r)
        return v["in_msgs"], v["in_bytes"]

    def batch(pub: Raw, first_pi: int) -> tuple[int, int]:
        before = varz()
        for i in range(5):
            pub.send(C.Publish("cnt/a", b"v%d" % i, 1, pi=first_pi + i))
        assert [pub.read() for _ in range(5)] == [C.Ack(C.PUBACK, first_pi + i) for i in range(5)]
        after = varz()
        return after[0] - before[0], after[1] - before[1]

    with mqtt_target("rillet", tmp_path) as t:
        async def run() -> None:
            pub = Raw(t.mqtt_port)
            assert pub.connect("cntpub").rc == 0
            for i in range(12):  # (stream sequences of two digits from here: PubAcks of one size)
                pub.send(C.Publish("cnt/a", b"w", 1, pi=100 + i))
            assert [pub.read() for _ in range(12)] == [C.Ack(C.PUBACK, 100 + i) for i in range(12)]
            direct = batch(pub, 1)
            nc = await nats.connect(t.nats_url)
            watch = await nc.subscribe("$MQTT.msgs.>")
            await nc.flush()
            routed = batch(pub, 6)
            assert direct == routed and direct[0] >= 10  # (the PUBLISH and the stream's PubAck, at least)
            assert len([await watch.next_msg(timeout=5) for _ in range(5)]) == 5
            await nc.close()
        asyncio.run(run())
