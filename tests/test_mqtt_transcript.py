"""One scripted MQTT 3.1.1 conversation, byte-level, run against nats-server and Rillet at once: every packet
each server answers must be the same (the order of deliveries within a step aside)."""
from __future__ import annotations

import time

import pytest

from mqttdiff import GO_BIN, Raw, mqtt_target
from lanes import LANES, use_lane
from rillet.mqtt import codec as C


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


pytestmark = pytest.mark.skipif(not GO_BIN, reason="needs nats-server")


def _drain(r: Raw, n: int, timeout: float = 5) -> list:
    out = []
    for _ in range(n):
        p = r.read(timeout)
        out.append(p)
        if p == "EOF":
            break
    return out


def _key(p):
    return repr(p)


def script(t) -> list:
    log: list = []
    s = Raw(t.mqtt_port)
    log.append(s.connect("tx-sub", clean=False, keepalive=30))
    s.send(C.Subscribe(10, [("tx/+/q0", C.SubOpts(0)), ("tx/+/q1", C.SubOpts(1)), ("tx/#", C.SubOpts(2)),
                            ("bad/#/x", C.SubOpts(0)), ("$MQTT/sess/#", C.SubOpts(0))]))
    log.append(s.read())
    p = Raw(t.mqtt_port)
    log.append(p.connect("tx-pub"))
    p.send(C.Publish("tx/a/q0", b"zero", 0))
    p.send(C.Publish("tx/a/q1", b"one", 1, pi=1))
    p.send(C.Publish("tx/a/q2", b"two", 2, pi=2))
    log.append(sorted(map(_key, _drain(p, 2))))
    p.send(C.Ack(C.PUBREL, 2))
    log.append(p.read())
    got = _drain(s, 5)
    # (packet ids are the server's choice: compared without them, and each acknowledged)
    for m in got:
        if isinstance(m, C.Publish) and m.qos == 1:
            s.send(C.Ack(C.PUBACK, m.pi))
        elif isinstance(m, C.Publish) and m.qos == 2:
            s.send(C.Ack(C.PUBREC, m.pi))
            log.append(("pubrel", s.read() == C.Ack(C.PUBREL, m.pi)))
            s.send(C.Ack(C.PUBCOMP, m.pi))
    log.append(sorted((m.topic, m.payload, m.qos, m.retain, m.dup) for m in got))
    p.send(C.Publish("tx/r/q1", b"kept", 1, retain=True, pi=3))
    log.append(p.read())
    log.append(sorted((m.topic, m.payload, m.qos, m.retain) for m in _drain(s, 2)
                      if not (isinstance(m, C.Publish) and m.qos and s.send(C.Ack(C.PUBACK if m.qos == 1 else C.PUBREC, m.pi)))))
    s.send(C.Unsubscribe(11, ["tx/+/q0", "never"]))
    log.append(s.read())
    s.send(C.PingReq())
    log.append(s.read())
    s.send(C.Disconnect())
    log.append(s.read())
    time.sleep(0.3)
    s = Raw(t.mqtt_port)
    log.append(s.connect("tx-sub", clean=False))
    s.send(C.Subscribe(12, [("tx/r/+", C.SubOpts(1))]))
    pk = _drain(s, 2)
    log.append(sorted(repr((type(x).__name__, getattr(x, "topic", None), getattr(x, "retain", None),
                            getattr(x, "payload", None), getattr(x, "codes", None))) for x in pk))
    s.send(C.Connect("again"))
    log.append(s.read())
    return log


def test_same_transcript(tmp_path):
    (tmp_path / "go").mkdir()
    (tmp_path / "r").mkdir()
    with mqtt_target("go", tmp_path / "go") as g, mqtt_target("rillet", tmp_path / "r") as r:
        go_log = script(g)
        rillet_log = script(r)
    assert rillet_log == go_log
