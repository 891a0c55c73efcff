"""NATS request/reply with MQTT 3.1.1 clients, as far as nats-server 2.15 takes it, run against Rillet and against
nats-server (tests/mqttdiff.py): a 3.1.1 PUBLISH has no field for a reply subject, so a NATS request reaches an
MQTT subscriber without it and an MQTT publish reaches a NATS service without one; the answers go to a topic both
sides agreed on, which works both ways; a NATS request whose reply is an inbox gets no answer from an MQTT
responder."""
from __future__ import annotations

import asyncio
import queue

import nats
import pytest

from mqttdiff import TARGETS, Paho, mqtt_target
from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


pytestmark = pytest.mark.parametrize("kind", TARGETS)


def _nats(url: str, coro_fn):
    async def run():
        nc = await nats.connect(url)
        try:
            return await coro_fn(nc)
        finally:
            await nc.close()
    return asyncio.run(run())


def test_nats_requester_mqtt_responder_on_an_agreed_topic(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        seen: queue.Queue = queue.Queue()
        resp = Paho(t.mqtt_port, "responder")
        resp.sub("svc/req", 1)

        def answer(c, _u, m):
            seen.put((m.topic, m.payload, m.qos))
            c.publish("svc/reply", b"re:" + m.payload, 1)

        resp.c.on_message = answer

        async def nats_side(nc):
            replies = await nc.subscribe("svc.reply")
            await nc.flush()
            await nc.publish("svc.req", b"q1", reply="svc.reply")  # (the reply subject does not reach MQTT)
            m = await replies.next_msg(5)
            got = (m.subject, m.data, (m.headers or {}).get("Nmqtt-Pub"))
            try:  # an inbox reply: the MQTT responder cannot know it (its answer goes to svc/reply)
                await nc.request("svc.req", b"q2", timeout=1)
                inbox = "answered"
            except nats.errors.TimeoutError:
                inbox = "timeout"
            other = await replies.next_msg(5)  # (the responder answered q2 on the agreed topic)
            return got, inbox, other.data

        got, inbox, other = _nats(t.nats_url, nats_side)
        assert got == ("svc.reply", b"re:q1", "1")
        assert (inbox, other) == ("timeout", b"re:q2")
        assert [seen.get(timeout=5) for _ in range(2)] == [("svc/req", b"q1", 0), ("svc/req", b"q2", 0)]
        resp.disconnect()


def test_mqtt_requester_nats_service_on_an_agreed_topic(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        req = Paho(t.mqtt_port, "requester")
        req.sub("svc2/reply/#", 1)

        async def nats_side(nc):
            asked = []

            async def service(msg):
                asked.append((msg.subject, msg.reply, msg.data))
                await nc.publish("svc2.reply." + msg.subject.split(".")[-1], msg.data.upper())

            await nc.subscribe("svc2.req.*", cb=service)
            await nc.flush()
            req.pub("svc2/req/a1", b"ping", qos=1)
            for _ in range(100):
                if asked:
                    break
                await asyncio.sleep(0.05)
            await nc.flush()
            return asked

        asked = _nats(t.nats_url, nats_side)
        assert asked == [("svc2.req.a1", "", b"ping")]  # (no reply subject from a 3.1.1 PUBLISH)
        m = req.get(5)
        assert (m.topic, m.payload, m.qos) == ("svc2/reply/a1", b"PING", 0)
        req.disconnect()
