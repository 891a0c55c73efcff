"""MQTT state in a cluster: the $MQTT_* streams replicated as stream_replicas says, so a session, its QoS 1
messages and retained messages survive the loss of the server the client used; run on Rillet and nats-server."""
from __future__ import annotations

import asyncio
import time

import nats
import pytest

from mqttdiff import TARGETS, connect_retry, mqtt_cluster
from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


pytestmark = [pytest.mark.parametrize("kind", TARGETS), pytest.mark.timeout(180)]


def test_session_and_retained_survive_server_loss(kind, tmp_path):
    with mqtt_cluster(kind, tmp_path) as (a, b, c):
        s = connect_retry(a.mqtt_port, "dev", clean=False)
        assert s.sub("cl/#", 1) == [1]
        s.disconnect()
        p = connect_retry(b.mqtt_port, "pub")
        p.pub("cl/1", b"stored", qos=1)
        p.pub("cl/ret", b"kept", qos=1, retain=True)
        p.disconnect()

        async def replicas():
            nc = await nats.connect(b.nats_url)
            try:
                js = nc.jetstream()
                return sorted([(n, (await js.stream_info(n)).config.num_replicas)
                               for n in ("$MQTT_sess", "$MQTT_msgs", "$MQTT_rmsgs")])
            finally:
                await nc.close()
        assert asyncio.run(replicas()) == [("$MQTT_msgs", 3), ("$MQTT_rmsgs", 3), ("$MQTT_sess", 3)]
        a.stop()  # the server the session was made on goes
        s = connect_retry(c.mqtt_port, "dev", clean=False)
        assert s.session_present
        got = sorted((m.topic, m.payload) for m in s.get_all(2, timeout=15))
        assert got == [("cl/1", b"stored"), ("cl/ret", b"kept")]


def test_takeover_across_servers(kind, tmp_path):
    with mqtt_cluster(kind, tmp_path) as (a, b, c):
        first = connect_retry(a.mqtt_port, "roamer", clean=False)
        first.sub("r/x", 1)
        second = connect_retry(c.mqtt_port, "roamer", clean=False)
        assert second.session_present
        rc, _props = first.disconnects.get(timeout=10)  # the first one is closed by its server
        assert rc is not None
