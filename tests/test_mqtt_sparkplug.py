"""Sparkplug B as nats-server 2.11+ does it (rillet.mqtt.sparkplug), on Rillet and nats-server."""
from __future__ import annotations

import time

import pytest

from mqttdiff import TARGETS, Paho, mqtt_target
from lanes import LANES, use_lane
from rillet.mqtt import sparkplug as spb


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


def _ts(payload: bytes) -> int | None:
    i = 0
    while i < len(payload):
        key, i = spb._varint(payload, i)
        v, i = spb._varint(payload, i) if key & 7 == 0 else (None, i)
        if key == 8:
            return v
        if key & 7 == 2:
            ln, i = spb._varint(payload, i)
            i += ln
    return None


def test_death_timestamp_unit():
    assert spb.death_with_timestamp(b"\x08\x01\x18\x05", 1000) == b"\x08\xe8\x07\x18\x05"
    assert spb.death_with_timestamp(b"\x18\x05", 1000) == b"\x18\x05\x08\xe8\x07"  # added when missing
    assert spb.death_with_timestamp(b"\x18", 1000) == b"\x18"  # unreadable: as it is
    assert spb.kind("spBv1.0/G/NBIRTH/E") == (True, False, False)
    assert spb.kind("$sparkplug/certificates/spBv1.0/G/DBIRTH/E/D") == (True, False, True)
    assert spb.kind("spBv1.0/G/DDEATH/E/D") == (False, True, False)
    assert spb.kind("spBv1.0/G/NDATA/E") == (False, False, False)


@pytest.mark.parametrize("kind", TARGETS)
def test_birth_certificates_and_death_timestamps(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        live = Paho(t.mqtt_port, "live")
        live.sub([("$sparkplug/certificates/#", 0), ("spBv1.0/#", 0)])
        edge = Paho(t.mqtt_port, "edge")
        edge.pub("spBv1.0/G1/NBIRTH/E1", b"\x08\x01birth", qos=0)
        edge.pub("spBv1.0/G1/NBIRTH/E2", b"retained birth", qos=0, retain=True)  # not kept
        got = {(m.topic, m.retain): m.payload for m in live.get_all(3)}
        assert got == {("spBv1.0/G1/NBIRTH/E1", False): b"\x08\x01birth",
                       ("$sparkplug/certificates/spBv1.0/G1/NBIRTH/E1", True): b"\x08\x01birth",
                       ("spBv1.0/G1/NBIRTH/E2", False): b"retained birth"}
        time.sleep(0.3)
        late = Paho(t.mqtt_port, "late")
        late.sub("$sparkplug/certificates/#", 0)
        m = late.get()
        assert (m.topic, m.payload, m.retain) == ("$sparkplug/certificates/spBv1.0/G1/NBIRTH/E1", b"\x08\x01birth",
                                                  True)
        late.none()
        before = int(time.time() * 1000)
        edge.pub("spBv1.0/G1/NDEATH/E1", b"\x08\x01\x18\x05", qos=0)
        d = live.get()
        assert d.topic == "spBv1.0/G1/NDEATH/E1" and d.payload.endswith(b"\x18\x05")
        assert before - 5 <= _ts(d.payload) <= int(time.time() * 1000) + 5
