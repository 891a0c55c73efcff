"""Hostile bytes on live MQTT connections (Rillet): after a valid CONNECT, any garbage closes at most that
connection; the server keeps serving the others and stays healthy."""
from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mqttdiff import Paho, Raw, Target
from lanes import LANES, use_lane
from rillet.mqtt import codec as C


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    t = Target("rillet", str(tmp_path_factory.mktemp("fuzz")))
    yield t
    t.stop()


_packets = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda t, b: bytes([t]) + C.encode_varint(len(b)) + b, st.integers(0, 255), st.binary(max_size=40)),
    st.builds(lambda q, b: bytes([0x30 | (q << 1)]) + C.encode_varint(len(b)) + b, st.integers(0, 3),
              st.binary(max_size=40)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_packets, min_size=1, max_size=4), st.integers(4, 5))
def test_garbage_after_connect(target, chunks, version):
    r = Raw(target.mqtt_port, version=version)
    assert r.connect("fz").rc == 0
    try:
        for c in chunks:
            r.send(c)
        r.send(C.PingReq())
        for _ in range(50):  # whatever comes back, until the PINGRESP or the close
            p = r.read(timeout=5)
            if p == "EOF" or p == C.PingResp():
                break
    except (OSError, C.MQTTError, socket.timeout):
        pass
    finally:
        r.close()


def test_server_still_serves_after_fuzzing(target):
    s = Paho(target.mqtt_port, "after-sub")
    s.sub("after/#", 1)
    Paho(target.mqtt_port, "after-pub").pub("after/x", b"alive", qos=1)
    assert s.get().payload == b"alive"
    assert "Traceback" not in target.output and "internal error" not in target.output
