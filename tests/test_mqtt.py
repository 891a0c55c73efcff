"""MQTT 3.1.1 with paho-mqtt and raw sockets, run against Rillet and against nats-server 2.15 (``mqtt {}``):
the same steps must give the same answers on both (see tests/mqttdiff.py)."""
from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import nats
import pytest

from mqttdiff import TARGETS, Paho, Raw, mqtt_target
from lanes import LANES, use_lane
from rillet.mqtt import codec as C


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


pytestmark = pytest.mark.parametrize("kind", TARGETS)


def _nats(url: str, coro_fn, **kw):
    async def run():
        nc = await nats.connect(url, **kw)
        try:
            return await coro_fn(nc)
        finally:
            await nc.close()
    return asyncio.run(run())


def test_connect_pub_sub_wildcards_all_qos(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        s = Paho(t.mqtt_port, "sub")
        assert s.rc == 0 and not s.session_present
        assert s.sub([("a/+/c", 2), ("x/#", 1), ("q0/#", 0)]) == [2, 1, 0]
        p = Paho(t.mqtt_port, "pub")
        p.pub("a/b/c", b"two", qos=2)
        p.pub("x", b"parent", qos=1)  # '#' matches the parent level too
        p.pub("x/y/z", b"one", qos=1)
        p.pub("q0/1", b"zero", qos=0)
        p.pub("a/b/d", b"nobody", qos=1)
        got = sorted((m.topic, m.payload, m.qos) for m in s.get_all(4))
        assert got == [("a/b/c", b"two", 2), ("q0/1", b"zero", 0), ("x", b"parent", 1), ("x/y/z", b"one", 1)]
        s.none()
        p.disconnect()
        s.disconnect()


def test_qos_downgraded_to_subscription(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        s = Paho(t.mqtt_port, "sub")
        s.sub("t/#", 1)
        p = Paho(t.mqtt_port, "pub")
        p.pub("t/2", b"x", qos=2)
        p.pub("t/0", b"y", qos=0)
        got = sorted((m.topic, m.qos) for m in s.get_all(2))
        assert got == [("t/0", 0), ("t/2", 1)]


def test_retained_set_replace_clear(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        p = Paho(t.mqtt_port, "pub")
        p.pub("r/a", b"one", qos=1, retain=True)
        p.pub("r/a", b"two", qos=1, retain=True)
        p.pub("r/b", b"bee", qos=0, retain=True)
        time.sleep(0.3)
        s = Paho(t.mqtt_port, "sub")
        s.sub("r/+", 1)
        got = sorted((m.topic, m.payload, m.retain, m.qos) for m in s.get_all(2))
        assert got == [("r/a", b"two", True, 1), ("r/b", b"bee", True, 0)]
        # a live message is not flagged retained, even when published with the flag
        p.pub("r/a", b"three", qos=1, retain=True)
        m = s.get()
        assert (m.payload, m.retain) == (b"three", False)
        p.pub("r/a", b"", qos=1, retain=True)  # clears
        assert s.get().payload == b""
        time.sleep(0.3)
        s2 = Paho(t.mqtt_port, "sub2")
        s2.sub("r/#", 0)
        got = [(m.topic, m.payload) for m in s2.get_all(2, timeout=1.5)]
        assert got == [("r/b", b"bee")]


def test_will_message(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        s = Paho(t.mqtt_port, "watcher")
        s.sub("wills/#", 1)
        gone = Paho(t.mqtt_port, "dev1", will=("wills/dev1", b"offline", 1, True))
        polite = Paho(t.mqtt_port, "dev2", will=("wills/dev2", b"offline", 1, False))
        polite.disconnect()  # DISCONNECT: the will is discarded
        gone.kill()
        m = s.get()
        assert (m.topic, m.payload, m.qos) == ("wills/dev1", b"offline", 1)
        s.none()
        s2 = Paho(t.mqtt_port, "late")
        s2.sub("wills/#", 0)
        m = s2.get()
        assert (m.topic, m.payload, m.retain) == ("wills/dev1", b"offline", True)


def test_persistent_session_reconnect_and_restart(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        s = Paho(t.mqtt_port, "keeper", clean=False)
        assert not s.session_present
        assert s.sub("d/#", 1) == [1]
        s.disconnect()
        p = Paho(t.mqtt_port, "pub")
        p.pub("d/1", b"while away", qos=1)
        p.pub("d/2", b"q0 while away", qos=0)  # QoS 0: not kept
        # (a PUBACK after it: the server has routed d/2 before the keeper is back; nats-server reads the two
        # connections on their own goroutines, and could otherwise restore the keeper's subscription first)
        p.pub("sync/after", b"", qos=1)
        p.disconnect()
        s = Paho(t.mqtt_port, "keeper", clean=False)
        assert s.session_present
        m = s.get()
        assert (m.topic, m.payload, m.qos) == ("d/1", b"while away", 1)
        s.none()
        s.disconnect()
        t.restart()
        p = Paho(t.mqtt_port, "pub")
        p.pub("d/3", b"after restart", qos=1)
        p.disconnect()
        s = Paho(t.mqtt_port, "keeper", clean=False)
        assert s.session_present
        m = s.get(timeout=10)
        assert (m.topic, m.payload) == ("d/3", b"after restart")
        s.disconnect()
        # a clean session discards it
        c = Paho(t.mqtt_port, "keeper", clean=True)
        assert not c.session_present
        c.disconnect()
        s = Paho(t.mqtt_port, "keeper", clean=False)
        assert not s.session_present


def test_qos1_redelivered_after_reconnect_with_dup(kind, tmp_path):
    with mqtt_target(kind, tmp_path, mqtt_conf='ack_wait: "1s"') as t:
        r = Raw(t.mqtt_port)
        assert r.connect("slow", clean=False) == C.ConnAck(False, 0)
        r.send(C.Subscribe(1, [("slow/t", C.SubOpts(1))]))
        assert r.read() == C.SubAck(1, [1])
        p = Paho(t.mqtt_port, "pub")
        p.pub("slow/t", b"m1", qos=1)
        first = r.read()
        assert isinstance(first, C.Publish) and first.payload == b"m1" and first.qos == 1 and not first.dup
        r.close()  # never acknowledged
        time.sleep(1.5)
        r = Raw(t.mqtt_port)
        assert r.connect("slow", clean=False) == C.ConnAck(True, 0)
        again = r.read(timeout=10)
        assert isinstance(again, C.Publish) and again.payload == b"m1" and again.dup
        r.send(C.Ack(C.PUBACK, again.pi))
        time.sleep(1.6)
        r.send(C.PingReq())
        assert r.read() == C.PingResp()  # acknowledged: not sent again
        r.close()


def test_qos2_exactly_once_both_ways(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        r = Raw(t.mqtt_port)
        r.connect("q2sub", clean=False)
        r.send(C.Subscribe(7, [("q2/#", C.SubOpts(2))]))
        assert r.read() == C.SubAck(7, [2])
        w = Raw(t.mqtt_port)
        w.connect("q2pub")
        w.send(C.Publish("q2/x", b"once", 2, pi=11))
        assert w.read() == C.Ack(C.PUBREC, 11)
        w.send(C.Publish("q2/x", b"once", 2, dup=True, pi=11))  # resent before PUBREL: stored once
        assert w.read() == C.Ack(C.PUBREC, 11)
        w.send(C.Ack(C.PUBREL, 11))
        assert w.read() == C.Ack(C.PUBCOMP, 11)
        m = r.read()
        assert isinstance(m, C.Publish) and (m.topic, m.payload, m.qos) == ("q2/x", b"once", 2)
        r.send(C.Ack(C.PUBREC, m.pi))
        assert r.read() == C.Ack(C.PUBREL, m.pi)
        r.send(C.Ack(C.PUBCOMP, m.pi))
        r.send(C.PingReq())
        assert r.read() == C.PingResp()  # one delivery only
        w.close()
        r.close()


def test_client_id_takeover(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        a = Raw(t.mqtt_port)
        assert a.connect("same", clean=False) == C.ConnAck(False, 0)
        b = Raw(t.mqtt_port)
        assert b.connect("same", clean=False) == C.ConnAck(True, 0)
        assert a.closed()
        b.send(C.PingReq())
        assert b.read() == C.PingResp()
        b.close()


def test_keepalive_closes_silent_client(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        r = Raw(t.mqtt_port)
        t0 = time.monotonic()  # (before the CONNECT: the server counts the keep-alive from reading it)
        assert r.connect("sleepy", keepalive=1).rc == 0
        assert r.closed(timeout=6)
        assert 0.9 <= time.monotonic() - t0 <= 4.5


@pytest.mark.parametrize("case,data", [
    ("before-connect", C.encode(C.PingReq())),
    ("qos3", None),
    ("reserved-flags", None),
    ("second-connect", None),
    ("bad-utf8-topic", None),
    ("wildcard-topic", None),
    ("long-remaining-length", None),
    ("empty-client-id-persistent", None),
    ("oversized-payload", None),
    ("bad-utf8-client-id", None),
    ("pubrel-bad-flags", None),
])
def test_bad_input_closes_only_that_connection(kind, tmp_path, case, data):
    with mqtt_target(kind, tmp_path) as t:
        ok = Paho(t.mqtt_port, "bystander")
        ok.sub("by/#", 0)
        r = Raw(t.mqtt_port)
        if case == "before-connect":
            r.send(data)
        elif case == "empty-client-id-persistent":
            assert r.connect("", clean=False) == C.ConnAck(False, 2)
        elif case == "bad-utf8-client-id":
            body = b"\x00\x04MQTT\x04\x02\x00\x3c\x00\x02\xc3\x28"
            r.send(bytes([0x10, len(body)]) + body)
        else:
            assert r.connect("bad") == C.ConnAck(False, 0)
            r.send({
                "qos3": b"\x36\x05\x00\x01a\x00\x01",
                "reserved-flags": b"\x83\x06\x00\x01\x00\x01a\x00",
                "second-connect": C.encode(C.Connect("bad2")),
                "bad-utf8-topic": b"\x30\x05\x00\x02\xc3\x28x",
                "wildcard-topic": C.encode(C.Publish("a/+", b"x")),
                "long-remaining-length": b"\x30\xff\xff\xff\xff\x01",
                "oversized-payload": C.encode(C.Publish("big", b"x" * (1024 * 1024 + 1))),
                "pubrel-bad-flags": b"\x60\x02\x00\x01",
            }[case])
        assert r.closed()
        p = Paho(t.mqtt_port, "after")
        p.pub("by/x", b"still fine", qos=1)
        assert ok.get().payload == b"still fine"


def test_nats_interop_both_ways_and_jetstream_capture(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        s = Paho(t.mqtt_port, "msub")
        s.sub("from/nats/#", 1)

        async def nats_side(nc):
            js = nc.jetstream()
            await js.add_stream(name="CAPTURE", subjects=["sensors.>"])
            sub = await nc.subscribe("sensors.*.temp")
            await nc.flush()
            p = Paho(t.mqtt_port, "mpub")
            p.pub("sensors/1/temp", b"21.5", qos=1)
            msg = await sub.next_msg(5)
            await nc.publish("from.nats.x", b"hello mqtt")
            await nc.publish("from.nats", b"parent")
            await nc.flush()
            info = await js.stream_info("CAPTURE")
            p.disconnect()
            return msg.subject, msg.data, (msg.headers or {}).get("Nmqtt-Pub"), info.state.messages

        subject, data, hq, stored = _nats(t.nats_url, nats_side)
        assert (subject, data, hq, stored) == ("sensors.1.temp", b"21.5", "1", 1)
        got = sorted((m.topic, m.payload, m.qos) for m in s.get_all(2))
        assert got == [("from/nats", b"parent", 0), ("from/nats/x", b"hello mqtt", 0)]


def test_topic_mapping_special_levels(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        async def nats_side(nc):
            sub = await nc.subscribe(">")
            await nc.flush()
            p = Paho(t.mqtt_port, "mp")
            for topic in ("/lead", "a//b", "trail/", "dot.ted"):
                p.pub(topic, b"x", qos=0)
            await nc.flush()
            out: list[str] = []
            while len(out) < 4:
                m = await sub.next_msg(5)
                if not m.subject.startswith("$"):  # (the MQTT state's own traffic)
                    out.append(m.subject)
            p.disconnect()
            return out
        assert _nats(t.nats_url, nats_side) == ["/.lead", "a./.b", "trail./", "dot//ted"]


def test_auth_users_permissions_and_no_auth_user(kind, tmp_path):
    conf = """
authorization {
  users = [
    {user: alice, password: secret}
    {user: bob, password: pw, permissions: {publish: {allow: ["bob.>"]}, subscribe: {allow: ["bob.>", "shared.*"]}}}
    {user: carol, password: pw, permissions: {subscribe: {allow: ["carol.>", "$MQTT.sub.>"]}}}
    {user: anon, password: x, permissions: {publish: {deny: ">"}}}
  ]
}
no_auth_user: anon
"""
    with mqtt_target(kind, tmp_path, conf=conf) as t:
        bad = Paho(t.mqtt_port, "bad", user="alice", password="wrong", connect=False)
        try:
            ack = bad.connect(timeout=5)
            assert int(getattr(ack[1], "value", ack[1])) in (5, 135)
        finally:
            bad.c.loop_stop()
        a = Paho(t.mqtt_port, "a", user="alice", password="secret")
        assert a.rc == 0
        b = Paho(t.mqtt_port, "b", user="bob", password="pw")
        # ("bob/#" also subscribes "bob", which "bob.>" does not allow, as in nats-server)
        assert b.sub([("bob/x", 1), ("alice/#", 1), ("shared/x", 0), ("bob/q0", 0), ("bob/#", 0)]) == \
            [1, 128, 0, 0, 128]
        c = Paho(t.mqtt_port, "c", user="carol", password="pw")
        assert c.sub([("carol/x", 1), ("alice/#", 0), ("carol/+", 2)]) == [1, 128, 2]
        a.sub("alice/#", 0)
        b.pub("alice/x", b"denied", qos=1)  # acknowledged, not delivered (as nats-server)
        b.pub("bob/q0", b"allowed", qos=0)
        assert b.get().payload == b"allowed"
        a.none(0.5)
        n = Paho(t.mqtt_port, "anon")  # no credentials: the no_auth_user
        assert n.rc == 0
        a.sub("anon/#", 0)
        n.pub("anon/x", b"denied", qos=1)
        a.none(0.5)


def test_token_auth(kind, tmp_path):
    with mqtt_target(kind, tmp_path, mqtt_conf="authorization { token: tok }") as t:
        ok = Paho(t.mqtt_port, "ok", user="anything", password="tok")
        assert ok.rc == 0
        r = Raw(t.mqtt_port)
        assert r.connect("bad", username="anything", password=b"nope") == C.ConnAck(False, 5)
        assert r.closed()
        r = Raw(t.mqtt_port)
        assert r.connect("none") == C.ConnAck(False, 5)


def test_monitoring_connz_varz(kind, tmp_path):
    with mqtt_target(kind, tmp_path, mqtt_conf='ack_wait: "10s"\nmax_ack_pending: 100') as t:
        p = Paho(t.mqtt_port, "mon-client")
        base = f"http://127.0.0.1:{t.http_port}"
        v = json.load(urllib.request.urlopen(base + "/varz"))
        assert v["mqtt"]["port"] == t.mqtt_port and v["mqtt"]["ack_wait"] == 10_000_000_000
        assert v["mqtt"]["max_ack_pending"] == 100
        assert v["connections"] == 1 and v["total_connections"] == 1
        cz = json.load(urllib.request.urlopen(base + "/connz?mqtt_client=mon-client"))
        assert [c.get("mqtt_client") for c in cz["connections"]] == ["mon-client"]
        assert cz["connections"][0]["type"] == "mqtt"
        cz = json.load(urllib.request.urlopen(base + "/connz?mqtt_client=other"))
        assert cz["connections"] == []
        assert json.load(urllib.request.urlopen(base + "/healthz")) == {"status": "ok"}
        p.disconnect()
        time.sleep(0.3)
        cz = json.load(urllib.request.urlopen(base + "/connz?state=closed&mqtt_client=mon-client"))
        assert [(c.get("mqtt_client"), c.get("reason")) for c in cz["connections"]] == [("mon-client", "Client Closed")]


def test_streams_are_nats_servers(kind, tmp_path):
    with mqtt_target(kind, tmp_path) as t:
        s = Paho(t.mqtt_port, "st", clean=False)
        s.sub("x", 1)

        async def names(nc):
            js = nc.jetstream()
            out = {}
            for n in ("$MQTT_sess", "$MQTT_msgs", "$MQTT_rmsgs", "$MQTT_qos2in", "$MQTT_out"):
                i = await js.stream_info(n)
                out[n] = (i.config.subjects, getattr(i.config.retention, "value", i.config.retention),
                          i.config.max_msgs_per_subject)
            return out
        got = _nats(t.nats_url, names)
        assert got == {
            "$MQTT_sess": (["$MQTT.sess.>"], "limits", 1),
            "$MQTT_msgs": (["$MQTT.msgs.>"], "interest", -1),
            "$MQTT_rmsgs": (["$MQTT.rmsgs.>"], "limits", 1),
            "$MQTT_qos2in": (["$MQTT.qos2.in.>"], "limits", 1),
            "$MQTT_out": (["$MQTT.out.>"], "interest", -1),
        }


def test_mqtt_over_websocket(kind, tmp_path):
    from helpers import free_port
    import paho.mqtt.client as mqtt
    wsport = free_port()
    with mqtt_target(kind, tmp_path, conf=f"websocket {{ listen: 127.0.0.1:{wsport}, no_tls: true }}") as t:
        s = Paho(t.mqtt_port, "tcp-sub")
        s.sub("ws/#", 1)
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="ws-client", transport="websockets")
        c.ws_set_options(path="/mqtt")
        got = []
        c.on_message = lambda cl, u, m: got.append((m.topic, m.payload))
        c.connect("127.0.0.1", wsport)
        c.loop_start()
        try:
            deadline = time.monotonic() + 5
            while not c.is_connected() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert c.is_connected()
            c.subscribe("back/#", 1)
            time.sleep(0.3)
            c.publish("ws/x", b"over ws", qos=1).wait_for_publish(5)
            m = s.get()
            assert (m.topic, m.payload) == ("ws/x", b"over ws")
            s.pub("back/y", b"to ws", qos=1)
            deadline = time.monotonic() + 5
            while not got and time.monotonic() < deadline:
                time.sleep(0.05)
            assert got == [("back/y", b"to ws")]
            base = f"http://127.0.0.1:{t.http_port}"
            cz = json.load(urllib.request.urlopen(base + "/connz?mqtt_client=ws-client"))
            assert [x.get("mqtt_client") for x in cz["connections"]] == ["ws-client"]
        finally:
            c.loop_stop()
            c.disconnect()


def test_subscription_limit_and_internal_subjects(kind, tmp_path):
    with mqtt_target(kind, tmp_path, conf="max_subscriptions: 3") as t:
        s = Paho(t.mqtt_port, "lim")
        assert s.sub([("a", 0), ("b", 0), ("c", 0), ("d", 0)]) == [0, 0, 0, 128]
        # the MQTT state's own subjects cannot be subscribed to
        assert Paho(t.mqtt_port, "snoop").sub([("$MQTT/msgs/#", 0), ("$MQTT/sess/+", 0)]) == [128, 128]


def test_max_connections_counts_mqtt(kind, tmp_path):
    with mqtt_target(kind, tmp_path, conf="max_connections: 2") as t:
        a = Raw(t.mqtt_port)
        assert a.connect("one") == C.ConnAck(False, 0)
        b = Raw(t.mqtt_port)
        assert b.connect("two") == C.ConnAck(False, 0)
        c = Raw(t.mqtt_port)
        try:
            c.send(C.Connect("three"))
        except OSError:
            pass
        assert c.closed()
        a.send(C.PingReq())
        assert a.read() == C.PingResp()


def test_slow_consumer_is_cut_off(kind, tmp_path):
    with mqtt_target(kind, tmp_path, conf="max_pending: 100000\nmax_payload: 65536") as t:
        slow = Raw(t.mqtt_port)
        slow.s.setsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_RCVBUF, 4096)
        slow.connect("slow")
        slow.send(C.Subscribe(1, [("flood", C.SubOpts(0))]))
        assert slow.read() == C.SubAck(1, [0])
        p = Raw(t.mqtt_port)
        p.connect("fast")
        for _ in range(100):
            p.send(b"".join(C.encode(C.Publish("flood", b"x" * 4000)) for _ in range(20)))
        p.send(C.PingReq())
        assert p.read(timeout=20) == C.PingResp()  # the publisher is not held back
        base = f"http://127.0.0.1:{t.http_port}"
        deadline = time.monotonic() + 20
        while True:
            v = json.load(urllib.request.urlopen(base + "/varz"))
            if v["slow_consumers"] >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        # an MQTT connection is a client: counted as one in slow_consumer_stats and in its account ($G), as
        # nats-server counts acc.stats.slowConsumers
        assert v["slow_consumers"] >= 1
        assert v["slow_consumer_stats"] == {"clients": v["slow_consumers"], "routes": 0, "gateways": 0, "leafs": 0}
        st = json.load(urllib.request.urlopen(base + "/accstatz?unused=1"))
        g = [a for a in st["account_statz"] if a["acc"] == "$G"]
        assert g and g[0]["slow_consumers"] == v["slow_consumers"], st


def test_accstatz_and_accountz_count_mqtt_connections(kind, tmp_path):
    """An MQTT connection is a client of its account: /accstatz lists the account (without ?unused) with the
    connection and its messages counted, and /accountz counts it in client_connections, as nats-server does."""
    with mqtt_target(kind, tmp_path, conf="") as t:
        a = Raw(t.mqtt_port)
        assert a.connect("acc-one") == C.ConnAck(False, 0)
        a.send(C.Publish("acc/x", b"hi"))
        a.send(C.PingReq())
        assert a.read() == C.PingResp()
        base = f"http://127.0.0.1:{t.http_port}"
        st = json.load(urllib.request.urlopen(base + "/accstatz"))
        g = [x for x in st["account_statz"] if x["acc"] == "$G"]
        assert g and g[0]["conns"] == 1 and g[0]["total_conns"] == 1, st
        assert g[0]["received"]["msgs"] >= 1, st
        d = json.load(urllib.request.urlopen(base + "/accountz?acc=$G"))
        assert d["account_detail"]["client_connections"] == 1, d
        a.close()


def test_qos2_state_survives_reconnect_and_restart(kind, tmp_path):
    with mqtt_target(kind, tmp_path, mqtt_conf='ack_wait: "1s"') as t:
        sub = Raw(t.mqtt_port)
        sub.connect("q2s", clean=False)
        sub.send(C.Subscribe(1, [("q2r/#", C.SubOpts(2))]))
        assert sub.read() == C.SubAck(1, [2])
        pub = Raw(t.mqtt_port)
        pub.connect("q2p", clean=False)
        pub.send(C.Publish("q2r/a", b"held", 2, pi=9))
        assert pub.read() == C.Ack(C.PUBREC, 9)
        pub.close()  # PUBREL not sent yet: the message waits in $MQTT_qos2in
        m = None
        sub.send(C.PingReq())
        assert sub.read() == C.PingResp()  # not released: not delivered
        t.restart()
        sub = Raw(t.mqtt_port)
        assert sub.connect("q2s", clean=False) == C.ConnAck(True, 0)
        pub = Raw(t.mqtt_port)
        assert pub.connect("q2p", clean=False) == C.ConnAck(True, 0)
        pub.send(C.Ack(C.PUBREL, 9))
        assert pub.read() == C.Ack(C.PUBCOMP, 9)
        m = sub.read(timeout=10)
        assert isinstance(m, C.Publish) and (m.topic, m.payload, m.qos) == ("q2r/a", b"held", 2)
        sub.send(C.Ack(C.PUBREC, m.pi))
        assert sub.read() == C.Ack(C.PUBREL, m.pi)
        sub.close()  # PUBCOMP not sent: the PUBREL is owed again after a reconnect
        time.sleep(1.5)
        sub = Raw(t.mqtt_port)
        assert sub.connect("q2s", clean=False) == C.ConnAck(True, 0)
        again = sub.read(timeout=10)
        assert again == C.Ack(C.PUBREL, m.pi)
        sub.send(C.Ack(C.PUBCOMP, m.pi))
        sub.send(C.PingReq())
        assert sub.read() == C.PingResp()


def test_accounts_have_their_own_mqtt_state(kind, tmp_path):
    conf = """
accounts {
  A: { jetstream: enabled, users: [{user: a, password: a}] }
  B: { jetstream: enabled, users: [{user: b, password: b}] }
}
"""
    with mqtt_target(kind, tmp_path, conf=conf) as t:
        sa = Paho(t.mqtt_port, "same-id-a", user="a", password="a")
        sb = Paho(t.mqtt_port, "sb", user="b", password="b")
        sa.sub("acc/#", 1)
        sb.sub("acc/#", 1)
        pa = Paho(t.mqtt_port, "pa", user="a", password="a")
        pa.pub("acc/x", b"only A", qos=1, retain=True)
        assert sa.get().payload == b"only A"
        sb.none()
        late_b = Paho(t.mqtt_port, "lb", user="b", password="b")
        late_b.sub("acc/#", 0)
        late_b.none()  # A's retained message is not B's

        async def retained(user):
            nc = await nats.connect(t.nats_url, user=user, password=user)
            try:
                return (await nc.jetstream().stream_info("$MQTT_rmsgs")).state.messages
            finally:
                await nc.close()
        assert (asyncio.run(retained("a")), asyncio.run(retained("b"))) == (1, 0)


def test_reload_rechecks_mqtt_clients(kind, tmp_path):
    import signal
    users = "authorization {{ users = [\n {{user: alice, password: a, permissions: {{subscribe: {alice}}}}}\n {bob}\n] }}"
    conf = users.format(alice='[">"]', bob="{user: bob, password: b}")
    with mqtt_target(kind, tmp_path, conf=conf) as t:
        a = Raw(t.mqtt_port)
        assert a.connect("alice", username="alice", password=b"a") == C.ConnAck(False, 0)
        a.send(C.Subscribe(1, [("keep/x", C.SubOpts(0)), ("drop/x", C.SubOpts(0))]))
        assert a.read() == C.SubAck(1, [0, 0])
        b = Raw(t.mqtt_port)
        assert b.connect("bob", username="bob", password=b"b") == C.ConnAck(False, 0)
        text = open(t.path).read().replace(conf, users.format(alice='["keep.>"]', bob=""))
        with open(t.path, "w") as f:
            f.write(text)
        n = len(t.proc.lines)
        t.proc.proc.send_signal(signal.SIGHUP)
        t.proc.wait_log("Reloaded", timeout=10, after=n)
        assert b.closed()  # bob is gone from the configuration
        p = Paho(t.mqtt_port, "p", user="alice", password="a")
        p.pub("drop/x", b"no longer allowed")
        p.pub("keep/x", b"still allowed")
        m = a.read()
        assert (m.topic, m.payload) == ("keep/x", b"still allowed")


def test_reload_max_payload_applies_to_mqtt_clients(kind, tmp_path):
    import signal
    with mqtt_target(kind, tmp_path, conf="max_payload: 4096") as t:
        s = Raw(t.mqtt_port)
        assert s.connect("watch") == C.ConnAck(False, 0)
        s.send(C.Subscribe(1, [("mp/#", C.SubOpts(0))]))
        assert s.read() == C.SubAck(1, [0])
        p = Raw(t.mqtt_port)
        assert p.connect("pub") == C.ConnAck(False, 0)
        p.send(C.Publish("mp/a", b"x" * 200))
        assert s.read().payload == b"x" * 200
        text = open(t.path).read().replace("max_payload: 4096", "max_payload: 200")
        with open(t.path, "w") as f:
            f.write(text)
        n = len(t.proc.lines)
        t.proc.proc.send_signal(signal.SIGHUP)
        t.proc.wait_log("Reloaded", timeout=10, after=n)
        p.send(C.Publish("mp/a", b"y" * 175))  # 25 + 175: at the new limit
        assert s.read().payload == b"y" * 175
        p.send(C.Publish("mp/a", b"z" * 176))  # the connected client has the new limit
        assert p.closed(timeout=5)


def test_account_without_jetstream_is_refused(kind, tmp_path):
    conf = "accounts { A: { users: [{user: a, password: a}] } }"
    with mqtt_target(kind, tmp_path, conf=conf) as t:
        r = Raw(t.mqtt_port)
        assert r.connect("x", username="a", password=b"a") == "EOF"  # closed, no CONNACK
        t.proc.wait_log(r'unable to connect: lookup sessions stream for account "A": JetStream not enabled for '
                        r"account \(10039\)")
