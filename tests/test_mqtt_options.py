"""The mqtt {} block: parsing (nats-server's keys, aliases, defaults and errors) and what each key does,
checked against nats-server where it has the same behaviour."""
from __future__ import annotations

import asyncio
import ssl
import time

import nats
import pytest

from mqttdiff import TARGETS, Paho, Raw, mqtt_target
from lanes import LANES, use_lane
from rillet.config import ConfigError
from rillet.config.mqtt_section import validate_mqtt
from rillet.config.options_builder import load_string
from rillet.mqtt import codec as C


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


def _load(text: str):
    return load_string(text, "m.conf")


# ---- parsing -----------------------------------------------------------------------------------------------

def test_block_parsed_with_aliases():
    o = _load('mqtt { listen: "127.0.0.1:1883", ackwait: "10s", api_timeout: "2s", max_inflight: 100,\n'
              ' js_domain: hub, stream_replicas: 3, consumer_memory_storage: true,\n'
              ' consumer_auto_cleanup: "1m", reject_qos2_publish: true, downgrade_qos2_subscribe: true,\n'
              ' authentication { user: u, password: p, timeout: 3 }, no_auth_user: x, net: "0.0.0.0" }')
    assert o.mqtt == {"host": "0.0.0.0", "port": 1883, "ack_wait": 10.0, "js_api_timeout": 2.0,
                      "max_ack_pending": 100, "js_domain": "hub", "stream_replicas": 3,
                      "consumer_memory_storage": True, "consumer_inactive_threshold": 60.0,
                      "reject_qos2_publish": True, "downgrade_qos2_subscribe": True, "username": "u",
                      "password": "p", "token": "", "auth_timeout": 3.0, "no_auth_user": "x"}


def test_errors_and_warnings():
    with pytest.raises(ConfigError) as e:
        _load("mqtt { port: 1883, max_ack_pending: 70000, bogus: 1 }")
    assert [str(x) for x in e.value.errors] == [
        "m.conf:1:19: invalid value 70000, should in [0..65535] range",
        'm.conf:1:43: unknown field "bogus"',
    ]
    with pytest.raises(ConfigError, match="Expected mqtt to be a map"):
        _load("mqtt: 1883")
    o = _load("mqtt { port: 1883, consumer_replicas: 3, ack_wait: 5 }")
    assert any("consumer replicas setting ignored" in w for w in o.config_warnings)
    assert any("ack_wait should be converted to a duration" in w for w in o.config_warnings)


@pytest.mark.parametrize("text,err", [
    ("mqtt { port: 1883 }", "mqtt requires JetStream to be enabled if running in standalone mode"),
    ("jetstream: true\ncluster { port: 6222, name: c }\nmqtt { port: 1883 }",
     "mqtt requires server name to be explicitly set"),
    ("jetstream: true\nauthorization { users: [{user: a, password: b}] }\nmqtt { port: 1883, authorization { user: x } }",
     "mqtt authentication username not compatible with presence of users/nkeys"),
    ("jetstream: true\nauthorization { users: [{user: a, password: b}] }\nmqtt { port: 1883, authorization { token: x } }",
     "mqtt authentication token not compatible with presence of users/nkeys"),
    ("jetstream: true\nmqtt { port: 1883, ack_wait: \"-1s\" }", "ack wait must be a positive value"),
    ("jetstream: true\nmqtt { port: 1883, no_auth_user: ghost }", 'no_auth_user: "ghost" present, but users/nkeys'),
])
def test_start_checks(text, err):
    with pytest.raises(ValueError, match=err):
        validate_mqtt(_load(text))


def test_no_port_means_no_checks():
    validate_mqtt(_load("mqtt { ack_wait: \"-1s\" }"))


# ---- behaviour, on both servers --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", TARGETS)
def test_reject_qos2_publish(kind, tmp_path):
    with mqtt_target(kind, tmp_path, mqtt_conf="reject_qos2_publish: true") as t:
        r = Raw(t.mqtt_port)
        assert r.connect("q2") == C.ConnAck(False, 0)
        r.send(C.Publish("a", b"x", 1, pi=1))
        assert r.read() == C.Ack(C.PUBACK, 1)
        r.send(C.Publish("a", b"x", 2, pi=2))
        assert r.closed()
        r = Raw(t.mqtt_port)
        r.send(C.Connect("w", will=C.Will("w", b"bye", 2)))
        assert r.read() == C.ConnAck(False, 0x10)  # (nats-server's own return code for it)


@pytest.mark.parametrize("kind", TARGETS)
def test_downgrade_qos2_subscribe(kind, tmp_path):
    with mqtt_target(kind, tmp_path, mqtt_conf="downgrade_qos2_subscribe: true") as t:
        s = Paho(t.mqtt_port, "s")
        assert s.sub("d/#", 2) == [1]
        Paho(t.mqtt_port, "p").pub("d/x", b"m", qos=2)
        assert s.get().qos == 1


@pytest.mark.parametrize("kind", TARGETS)
def test_consumer_settings(kind, tmp_path):
    conf = 'consumer_memory_storage: true\nconsumer_inactive_threshold: "1h"\nmax_ack_pending: 7\nack_wait: "9s"'
    with mqtt_target(kind, tmp_path, mqtt_conf=conf) as t:
        s = Paho(t.mqtt_port, "s", clean=False)
        s.sub("c/x", 1)

        async def info():
            nc = await nats.connect(t.nats_url)
            try:
                js = nc.jetstream()
                out = []
                for ci in await js.consumers_info("$MQTT_msgs"):
                    c = ci.config
                    out.append((c.mem_storage, c.inactive_threshold, c.max_ack_pending, c.ack_wait,
                                c.filter_subject, c.ack_policy.value if hasattr(c.ack_policy, "value") else c.ack_policy))
                return out
            finally:
                await nc.close()
        assert asyncio.run(info()) == [(True, 3600.0, 7, 9.0, "$MQTT.msgs.c.x", "explicit")]


@pytest.mark.parametrize("kind", TARGETS)
def test_stream_replicas_and_js_api_timeout(kind, tmp_path):
    with mqtt_target(kind, tmp_path, mqtt_conf='stream_replicas: 1\njs_api_timeout: "3s"') as t:
        s = Paho(t.mqtt_port, "s", clean=False)
        assert s.sub("x", 1) == [1]

        async def replicas():
            nc = await nats.connect(t.nats_url)
            try:
                return (await nc.jetstream().stream_info("$MQTT_sess")).config.num_replicas
            finally:
                await nc.close()
        assert asyncio.run(replicas()) == 1


@pytest.mark.parametrize("kind", TARGETS)
def test_js_domain(kind, tmp_path):
    with mqtt_target(kind, tmp_path, conf="jetstream { domain: hub }", mqtt_conf="js_domain: hub") as t:
        s = Paho(t.mqtt_port, "s", clean=False)
        assert s.sub("x", 1) == [1]
        s.disconnect()
        Paho(t.mqtt_port, "p").pub("x", b"kept", qos=1)
        s = Paho(t.mqtt_port, "s", clean=False)
        assert s.session_present and s.get().payload == b"kept"


@pytest.mark.parametrize("kind", TARGETS)
def test_mqtt_no_auth_user(kind, tmp_path):
    conf = "authorization { users: [{user: a, password: b}, {user: dev, password: d}] }"
    with mqtt_target(kind, tmp_path, conf=conf, mqtt_conf="no_auth_user: dev") as t:
        assert Raw(t.mqtt_port).connect("anon") == C.ConnAck(False, 0)
        assert Raw(t.mqtt_port).connect("bad", username="a", password=b"x") == C.ConnAck(False, 5)


def _self_signed(tmp_path):
    from test_websocket import _self_signed as mk
    return mk(tmp_path)


@pytest.mark.parametrize("kind", TARGETS)
def test_tls(kind, tmp_path):
    cert, key = _self_signed(tmp_path)
    with mqtt_target(kind, tmp_path, mqtt_conf=f'tls {{ cert_file: "{cert}", key_file: "{key}" }}') as t:
        p = Paho(t.mqtt_port, "tls", connect=False)
        p.c.tls_set(ca_certs=cert, cert_reqs=ssl.CERT_REQUIRED)
        assert int(getattr(p.connect()[1], "value", 1)) == 0
        assert p.sub("t", 1) == [1]
        p.pub("t", b"secure", qos=1)
        assert p.get().payload == b"secure"
        plain = Raw(t.mqtt_port)
        plain.send(C.Connect("plain"))
        assert plain.closed()


from test_tls_map import pki  # noqa: E402,F401  (the fixture: a CA, a server and client certificates)


@pytest.mark.parametrize("kind", TARGETS)
def test_tls_verify_and_map(kind, tmp_path, pki):  # noqa: F811
    cert, key = pki["server"]
    conf = ('authorization { users [ { user: "alice@example.com", permissions: { subscribe: "alice.>" } }, '
            '{ user: "CN=bob,O=Rillet" } ] }')
    mq = f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki["ca"]}", verify_and_map: true }}'
    with mqtt_target(kind, tmp_path, conf=conf, mqtt_conf=mq) as t:
        def client(who: str) -> Paho:
            p = Paho(t.mqtt_port, f"c-{who}", connect=False)
            p.c.tls_set(ca_certs=pki["ca"], certfile=pki[who][0], keyfile=pki[who][1])
            return p
        a = client("alice")
        assert int(getattr(a.connect()[1], "value", 1)) == 0
        assert a.sub([("alice/x", 0), ("bob/x", 0)]) == [0, 128]  # alice's permissions apply
        b = client("bob")
        assert int(getattr(b.connect()[1], "value", 1)) == 0
        e = client("eve")  # a valid certificate that maps to no user
        try:
            assert int(getattr(e.connect(timeout=5)[1], "value", 0)) != 0
        finally:
            e.c.loop_stop()


@pytest.mark.parametrize("kind", TARGETS)
def test_operator_mode_jwt_in_password(kind, tmp_path):
    from tests.test_operator import Operator
    op = Operator()
    js = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    akp, apub, _ = op.account("A", limits={"subs": -1, "conn": -1, "payload": -1, "data": -1, "imports": -1,
                                           "exports": -1, "wildcards": True, **js})
    conf = "\n".join([f"operator: {op.jwt()}", "resolver: MEMORY", f"system_account: {op.sys[1]}",
                      "resolver_preload {", *(f'  {pub}: "{tok}"' for _k, pub, tok in op.accounts.values()), "}"])
    _u, bearer = op.user(akp, bearer_token=True)
    _u2, signed = op.user(akp)
    with mqtt_target(kind, tmp_path, conf=conf) as t:
        r = Raw(t.mqtt_port)
        assert r.connect("jwt-user", username="x", password=bearer.encode()) == C.ConnAck(False, 0)
        r.send(C.Subscribe(1, [("j/x", C.SubOpts(1))]))
        assert r.read() == C.SubAck(1, [1])
        r.send(C.Publish("j/x", b"in A", 1, pi=2))
        got = sorted([type(r.read()).__name__, type(r.read()).__name__])
        assert got == ["Ack", "Publish"]
        r2 = Raw(t.mqtt_port)  # not a bearer token: no nonce to sign, refused
        assert r2.connect("jwt-signed", username="x", password=signed.encode()) == C.ConnAck(False, 5)
        r3 = Raw(t.mqtt_port)
        assert r3.connect("nobody") == C.ConnAck(False, 5)
        _u3, short = op.user(akp, bearer_token=True, exp=int(time.time()) + 2)
        r4 = Raw(t.mqtt_port)
        assert r4.connect("expiring", username="x", password=short.encode()) == C.ConnAck(False, 0)
        assert r4.closed(timeout=6)  # closed when the user JWT expires
        r.send(C.PingReq())  # (the others stay)
        assert r.read() == C.PingResp()


def test_reload_changes_only_what_nats_server_reloads():
    from rillet.mqtt.listener import check_reload
    old = _load('jetstream: true\nmqtt { port: 1883, ack_wait: "5s" }')
    check_reload(old, _load('jetstream: true\nmqtt { port: 1883, ack_wait: "9s", max_ack_pending: 10, '
                            'consumer_memory_storage: true, stream_replicas: 3 }'))
    for changed in ('mqtt { port: 1884, ack_wait: "5s" }', 'mqtt { port: 1883, ack_wait: "5s", no_auth_user: x }',
                    'mqtt { port: 1883, ack_wait: "5s", reject_qos2_publish: true }'):
        with pytest.raises(ValueError, match="config reload not supported for MQTT"):
            check_reload(old, _load("jetstream: true\n" + changed))
