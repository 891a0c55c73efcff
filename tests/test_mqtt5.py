"""MQTT 5 on the mqtt {} listener (Rillet only: nats-server 2.15 speaks 3.1.1), with paho-mqtt's MQTT 5 client
and raw packets: properties, reason codes, session and message expiry, topic aliases, user properties <->
NATS headers, response topic / correlation data <-> NATS reply, shared subscriptions, subscription options,
receive maximum, maximum packet size, server DISCONNECT reasons, will delay, AUTH refusal."""
from __future__ import annotations

import asyncio
import time

import nats
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mqttdiff import Paho, Raw, mqtt_target
from lanes import LANES, use_lane
from rillet.mqtt import codec as C


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


KIND = "rillet"


def _props(kind: int = PacketTypes.PUBLISH, **kw) -> Properties:
    p = Properties(kind)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def _v5(t, cid: str, **kw) -> Paho:
    return Paho(t.mqtt_port, cid, v5=True, **kw)


def _raw5(t, cid: str, clean: bool = True, **kw):
    r = Raw(t.mqtt_port, version=5)
    ack = r.connect(cid, clean=clean, **kw)
    return r, ack


def test_connack_properties_and_assigned_client_id(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r, ack = _raw5(t, "", props={"request_response_information": 1})
        assert ack.rc == 0 and not ack.session_present
        p = ack.props
        assert p["receive_maximum"] == 1024 and p["topic_alias_maximum"] == 65535
        assert p["shared_subscription_available"] == 1 and p["subscription_identifier_available"] == 1
        assert p["assigned_client_identifier"] and p["response_information"].startswith("rsp/")
        assert p["maximum_packet_size"] > 1024 * 1024


def test_user_properties_to_headers_and_back(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        s = _v5(t, "s5")
        s.sub("up/#", 1)

        async def nats_side():
            nc = await nats.connect(t.nats_url)
            sub = await nc.subscribe("up.>")
            await nc.flush()
            p = _v5(t, "p5")
            p.pub("up/a", b"x", qos=1, props=_props(UserProperty=[("k1", "v1"), ("k2", "v2")],
                                                       ContentType="text/plain"))
            m = await sub.next_msg(5)
            await nc.publish("up.b", b"from nats", headers={"Trace-Id": "abc"})
            await nc.flush()
            await nc.close()
            return m.headers

        h = asyncio.run(nats_side())
        assert h["k1"] == "v1" and h["k2"] == "v2" and h["Nmqtt-Pub"] == "1"
        got = {m.topic: m for m in s.get_all(2)}
        a = got["up/a"].properties
        assert ("k1", "v1") in a.UserProperty and ("k2", "v2") in a.UserProperty
        assert a.ContentType == "text/plain"
        assert ("Trace-Id", "abc") in got["up/b"].properties.UserProperty


def test_request_reply_mqtt5_to_nats_service(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        async def run():
            nc = await nats.connect(t.nats_url)

            async def svc(msg):
                await msg.respond(b"pong:" + msg.data)
            await nc.subscribe("svc.ping", cb=svc)
            await nc.flush()
            c = _v5(t, "req")
            c.sub("replies/req", 1)
            c.pub("svc/ping", b"1", qos=1, props=_props(ResponseTopic="replies/req", CorrelationData=b"\x01\x02"))
            m = await asyncio.get_running_loop().run_in_executor(None, c.get)
            await nc.close()
            return m
        m = asyncio.run(run())
        assert m.topic == "replies/req" and m.payload == b"pong:1"
        assert m.properties.CorrelationData == b"\x01\x02"


def test_request_reply_nats_to_mqtt5_responder(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r = _v5(t, "responder")
        r.sub("calc/double", 0)

        def serve_one():
            m = r.get(10)
            r.pub(m.properties.ResponseTopic, str(int(m.payload) * 2).encode(), qos=0)

        async def run():
            nc = await nats.connect(t.nats_url)
            fut = asyncio.get_running_loop().run_in_executor(None, serve_one)
            resp = await nc.request("calc.double", b"21", timeout=5)
            await fut
            await nc.close()
            return resp.data
        assert asyncio.run(run()) == b"42"


def test_shared_subscription_is_a_queue_group(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        a, b = _v5(t, "wa"), _v5(t, "wb")
        assert a.sub("$share/workers/jobs/#", 1) == [1]
        assert b.sub("$share/workers/jobs/#", 1) == [1]
        p = _v5(t, "boss")
        for i in range(20):
            p.pub(f"jobs/{i}", str(i).encode(), qos=1)
        got_a = a.get_all(20, timeout=3)
        got_b = b.get_all(20, timeout=0.5)
        assert sorted(int(m.payload) for m in got_a + got_b) == list(range(20))
        assert got_a and got_b


def test_no_local_and_retain_as_published_and_retain_handling(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        c = _v5(t, "self")
        c.pub("ret/x", b"r", qos=1, retain=True)
        time.sleep(0.2)
        r, _ = _raw5(t, "opts")
        r.send(C.Subscribe(1, [("ret/x", C.SubOpts(1, no_local=False, retain_as_published=True, retain_handling=2))]))
        assert r.read() == C.SubAck(1, [1])
        r.send(C.PingReq())
        assert r.read() == C.PingResp()  # retain handling 2: no retained message
        r.send(C.Subscribe(2, [("ret/#", C.SubOpts(0, retain_handling=1))]))
        assert r.read() == C.SubAck(2, [0])
        m = r.read()
        assert isinstance(m, C.Publish) and m.retain and m.payload == b"r"
        r.send(C.Subscribe(3, [("ret/#", C.SubOpts(0, retain_handling=1))]))  # existing: not sent again
        assert r.read() == C.SubAck(3, [0])
        r.send(C.PingReq())
        assert r.read() == C.PingResp()
        r.send(C.Subscribe(4, [("me/#", C.SubOpts(0, no_local=True))]))
        assert r.read() == C.SubAck(4, [0])
        r.send(C.Publish("me/x", b"mine"))
        c.pub("ret/x", b"live", qos=0, retain=True)
        got = [r.read(), r.read()]
        kinds = sorted((type(g).__name__, getattr(g, "topic", ""), getattr(g, "retain", None)) for g in got)
        # retain-as-published keeps the flag on the live message for sub 1 (ret/x); sub 2 (ret/#) clears it
        assert ("Publish", "ret/x", True) in kinds and ("Publish", "ret/x", False) in kinds
        r.send(C.PingReq())
        assert r.read() == C.PingResp()  # no-local: its own me/x never came back


def test_subscription_identifiers(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r, _ = _raw5(t, "ids")
        r.send(C.Subscribe(1, [("id/+", C.SubOpts(0))], {"subscription_identifier": [42]}))
        assert r.read() == C.SubAck(1, [0])
        _v5(t, "p").pub("id/a", b"x")
        m = r.read()
        assert m.props["subscription_identifier"] == [42]


def test_topic_alias_inbound(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        s = _v5(t, "s")
        s.sub("alias/#", 0)
        r, _ = _raw5(t, "a")
        r.send(C.Publish("alias/long/topic", b"1", props={"topic_alias": 3}))
        r.send(C.Publish("", b"2", props={"topic_alias": 3}))
        got = [(m.topic, m.payload) for m in s.get_all(2)]
        assert got == [("alias/long/topic", b"1"), ("alias/long/topic", b"2")]
        r.send(C.Publish("", b"3", props={"topic_alias": 9}))  # never set
        d = r.read()
        assert d == C.Disconnect(0x82, d.props) and r.closed()


def test_message_expiry(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r, _ = _raw5(t, "exp", clean=False, props={"session_expiry_interval": 60})
        r.send(C.Subscribe(1, [("exp/#", C.SubOpts(1))]))
        assert r.read() == C.SubAck(1, [1])
        r.send(C.Disconnect())
        r.close()
        p = _v5(t, "p")
        p.pub("exp/short", b"gone", qos=1, props=_props(MessageExpiryInterval=1))
        p.pub("exp/long", b"kept", qos=1, props=_props(MessageExpiryInterval=100))
        time.sleep(2.2)
        r, ack = _raw5(t, "exp", clean=False, props={"session_expiry_interval": 60})
        assert ack.session_present
        m = r.read(timeout=10)
        assert m.payload == b"kept" and 90 <= m.props["message_expiry_interval"] <= 100
        r.send(C.Ack(C.PUBACK, m.pi))
        r.send(C.PingReq())
        assert r.read() == C.PingResp()


def test_session_expiry_and_clean_start(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r, ack = _raw5(t, "se", clean=True, props={"session_expiry_interval": 1})
        r.send(C.Subscribe(1, [("se/x", C.SubOpts(1))]))
        r.read()
        r.send(C.Disconnect())
        r.close()
        r, ack = _raw5(t, "se", clean=False, props={"session_expiry_interval": 1})
        assert ack.session_present  # within the interval
        r.send(C.Disconnect())
        r.close()
        time.sleep(1.8)
        r, ack = _raw5(t, "se", clean=False, props={"session_expiry_interval": 1})
        assert not ack.session_present  # expired
        r.send(C.Disconnect())
        r.close()
        r, ack = _raw5(t, "zero", clean=False)  # expiry 0: ends with the connection
        r.send(C.Disconnect())
        r.close()
        r, ack = _raw5(t, "zero", clean=False)
        assert not ack.session_present


def test_takeover_and_keepalive_disconnect_reasons(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        a, _ = _raw5(t, "dup")
        b, ack = _raw5(t, "dup")
        assert ack.rc == 0
        d = a.read()
        assert isinstance(d, C.Disconnect) and d.rc == 0x8E
        k, _ = _raw5(t, "ka", keepalive=1)
        d = k.read(timeout=5)
        assert isinstance(d, C.Disconnect) and d.rc == 0x8D


def test_will_delay_cancelled_by_reconnect(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        w = _v5(t, "watch")
        w.sub("will/#", 0)
        d = _v5(t, "dev", will=("will/dev", b"gone", 0, False, {"WillDelayInterval": 1}),
                props={"SessionExpiryInterval": 30})
        d.kill()
        d2 = _v5(t, "dev", props={"SessionExpiryInterval": 30}, clean_start=False)  # back within the delay
        w.none(1.6)
        d3 = _v5(t, "dev3", will=("will/dev3", b"gone3", 0, False, {"WillDelayInterval": 1}),
                 props={"SessionExpiryInterval": 30})
        d3.kill()
        t0 = time.monotonic()
        m = w.get(timeout=5)
        assert m.payload == b"gone3" and time.monotonic() - t0 >= 0.8
        d2.disconnect()


def test_receive_maximum_limits_inflight(tmp_path):
    with mqtt_target(KIND, tmp_path, mqtt_conf='ack_wait: "2s"') as t:
        r, _ = _raw5(t, "rm", props={"receive_maximum": 2})
        r.send(C.Subscribe(1, [("rm/#", C.SubOpts(1))]))
        r.read()
        p = _v5(t, "p")
        for i in range(5):
            p.pub(f"rm/{i}", b"x", qos=1)
        first = [r.read(), r.read()]
        assert all(isinstance(m, C.Publish) for m in first)
        r.send(C.PingReq())
        assert r.read() == C.PingResp()  # no third one while two are unacknowledged
        for m in first:
            r.send(C.Ack(C.PUBACK, m.pi))
        more = r.read(timeout=6)
        assert isinstance(more, C.Publish)


def test_maximum_packet_size_both_ways(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r, _ = _raw5(t, "small", props={"maximum_packet_size": 64})
        r.send(C.Subscribe(1, [("mp/#", C.SubOpts(0))]))
        r.read()
        p = _v5(t, "p")
        p.pub("mp/big", b"x" * 200)
        p.pub("mp/small", b"ok")
        m = r.read()
        assert m.topic == "mp/small"  # the big one was not sent
        big, ack = _raw5(t, "huge")
        limit = ack.props["maximum_packet_size"]
        big.send(b"\x30" + C.encode_varint(limit + 10))
        d = big.read()
        assert isinstance(d, C.Disconnect) and d.rc == 0x95


def test_auth_method_and_auth_packet_refused(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r = Raw(t.mqtt_port, version=5)
        ack = r.connect("sc", props={"authentication_method": "SCRAM-SHA-1"})
        assert ack.rc == 0x8C
        r, _ = _raw5(t, "a")
        r.send(C.Auth(0x18, {"authentication_method": "x"}))
        d = r.read()
        assert isinstance(d, C.Disconnect) and d.rc == 0x82


def test_reason_codes_on_acks(tmp_path):
    conf = "authorization { users: [{user: u, password: p, permissions: {publish: {deny: [\"no.>\"]}}}] }"
    with mqtt_target(KIND, tmp_path, conf=conf) as t:
        r, ack = _raw5(t, "rc", username="u", password=b"p")
        assert ack.rc == 0
        r.send(C.Publish("nobody/here", b"x", 1, pi=1))
        assert r.read() == C.Ack(C.PUBACK, 1, 0x10)  # no matching subscribers
        r.send(C.Publish("no/way", b"x", 1, pi=2))
        assert r.read() == C.Ack(C.PUBACK, 2, 0x87)  # not authorized
        r.send(C.Unsubscribe(3, ["never/subscribed"]))
        assert r.read() == C.UnsubAck(3, [0x11])
        bad = Raw(t.mqtt_port, version=5)
        assert bad.connect("x", username="u", password=b"wrong").rc == 0x87


def test_bad_input_gets_a_disconnect_reason(tmp_path):
    with mqtt_target(KIND, tmp_path) as t:
        r, _ = _raw5(t, "bad")
        r.send(b"\x36\x05\x00\x01a\x00\x01")  # QoS 3
        d = r.read()
        assert isinstance(d, C.Disconnect) and d.rc == 0x81 and r.closed()
        r, _ = _raw5(t, "bad2")
        r.send(C.Connect("again", 5))
        d = r.read()
        assert isinstance(d, C.Disconnect) and d.rc == 0x82


def test_will_delay_capped_by_session_end(tmp_path):
    # the will goes when its delay is over or when the session ends, whichever is first: a session expiry of 0
    # ends the session with the connection, so a delay of 5 s changes nothing (MQTT-3.1.3-9, 3.1.3.2.2)
    with mqtt_target(KIND, tmp_path) as t:
        w = _v5(t, "watch")
        w.sub("will/#", 0)
        d = _v5(t, "dev", will=("will/dev", b"gone", 0, False, {"WillDelayInterval": 5}),
                props={"SessionExpiryInterval": 0})
        d.kill()
        t0 = time.monotonic()
        m = w.get(timeout=10)
        assert m.payload == b"gone" and time.monotonic() - t0 < 3.5


def test_unacknowledged_deliveries_resent_on_reconnect(tmp_path):
    # MQTT-4.4.0-1: a client back with Clean Start 0 gets its unacknowledged QoS 1/2 PUBLISHes again at once,
    # with their packet ids and DUP (not after ack_wait: 30 s here)
    with mqtt_target(KIND, tmp_path) as t:
        r, _ = _raw5(t, "rd", clean=False, props={"session_expiry_interval": 60})
        r.send(C.Subscribe(1, [("rd/#", C.SubOpts(2))]))
        assert r.read() == C.SubAck(1, [2])
        p = _v5(t, "p")
        p.pub("rd/1", b"one", qos=1)
        p.pub("rd/2", b"two", qos=2)
        first = {m.payload: m for m in (r.read(), r.read())}
        assert set(first) == {b"one", b"two"} and not any(m.dup for m in first.values())
        r.send(C.Disconnect())
        r.close()
        r, ack = _raw5(t, "rd", clean=False, props={"session_expiry_interval": 60})
        assert ack.session_present
        again = {m.payload: m for m in (r.read(timeout=5), r.read(timeout=5))}
        assert set(again) == {b"one", b"two"}
        for k, m in again.items():
            assert m.dup and m.pi == first[k].pi and m.qos == first[k].qos
        r.send(C.Ack(C.PUBACK, again[b"one"].pi))
        r.send(C.Ack(C.PUBREC, again[b"two"].pi))
        assert r.read() == C.Ack(C.PUBREL, again[b"two"].pi)
        r.send(C.Disconnect())  # (the PUBREL not completed: sent again too)
        r.close()
        r, ack = _raw5(t, "rd", clean=False, props={"session_expiry_interval": 60})
        assert ack.session_present
        assert r.read(timeout=5) == C.Ack(C.PUBREL, again[b"two"].pi)
        r.send(C.Ack(C.PUBCOMP, again[b"two"].pi))
        r.send(C.PingReq())
        assert r.read() == C.PingResp()


def test_receive_maximum_held_deliveries_follow_the_acks(tmp_path):
    # deliveries past the client's Receive Maximum are sent as soon as a PUBACK / PUBCOMP frees the window (not
    # after ack_wait, 30 s here), in order; a QoS 2 one holds its place until PUBCOMP (MQTT-4.9.0-2, 4.9)
    with mqtt_target(KIND, tmp_path) as t:
        r, _ = _raw5(t, "rmh", props={"receive_maximum": 2})
        r.send(C.Subscribe(1, [("rmh/#", C.SubOpts(2))]))
        r.read()
        p = _v5(t, "p")
        p.pub("rmh/0", b"0", qos=2)
        for i in range(1, 5):
            p.pub(f"rmh/{i}", str(i).encode(), qos=1)
        a, b = r.read(), r.read()
        assert (a.payload, a.qos, b.payload) == (b"0", 2, b"1")
        r.send(C.PingReq())
        assert r.read() == C.PingResp()  # nothing more while two are in flight
        r.send(C.Ack(C.PUBREC, a.pi))
        assert r.read() == C.Ack(C.PUBREL, a.pi)
        r.send(C.PingReq())
        assert r.read() == C.PingResp()  # the QoS 2 one still counts until PUBCOMP
        r.send(C.Ack(C.PUBCOMP, a.pi))
        c = r.read(timeout=5)
        assert c.payload == b"2"
        for want in (b"3", b"4"):
            r.send(C.Ack(C.PUBACK, b.pi))
            b, c = c, r.read(timeout=5)
            assert c.payload == want
        r.send(C.Ack(C.PUBACK, b.pi))
        r.send(C.Ack(C.PUBACK, c.pi))
        r.send(C.PingReq())
        assert r.read() == C.PingResp()


def test_max_keep_alive_is_the_server_keep_alive(tmp_path):
    # Rillet's mqtt { max_keep_alive }: an MQTT 5 client asking for none or a longer one gets it as the CONNACK's
    # Server Keep Alive, and is held to it (MQTT-3.2.2-21); a shorter one is kept, and told nothing
    from rillet.config import load_string
    with pytest.raises(Exception, match="should in"):
        load_string("jetstream: true\nmqtt { port: 1883, max_keep_alive: 0 }", "m.conf")
    with mqtt_target(KIND, tmp_path, mqtt_conf="max_keep_alive: 2") as t:
        t0 = time.monotonic()  # (before its CONNECT: the server's 3 s run from its read of it, which a loaded
        r, ack = _raw5(t, "ka0", keepalive=0)  # machine may deliver long before the CONNACK is read here)
        assert ack.props["server_keep_alive"] == 2
        _, ack = _raw5(t, "ka1", keepalive=1)
        assert "server_keep_alive" not in ack.props
        d = r.read(timeout=10)  # silent past 1.5 times 2 s
        assert isinstance(d, C.Disconnect) and d.rc == 0x8D and 2.5 <= time.monotonic() - t0 < 8
        _, ack = _raw5(t, "ka120", keepalive=120)
        assert ack.props["server_keep_alive"] == 2


def test_topic_alias_outbound(tmp_path):
    # a client announcing a Topic Alias Maximum gets aliases on what it is sent: its first topics one each, the
    # topic sent once with it, then an empty topic; past its maximum, plain topics (MQTT-3.3.2-7 .. 3.3.2-11)
    with mqtt_target(KIND, tmp_path) as t:
        r, _ = _raw5(t, "tao", props={"topic_alias_maximum": 1})
        r.send(C.Subscribe(1, [("tao/#", C.SubOpts(1))]))
        assert r.read() == C.SubAck(1, [1])
        p = _v5(t, "p")
        p.pub("tao/a", b"a1")  # (first: QoS 0 goes at once; the order of the others may vary)
        assert (lambda m: (m.topic, m.payload, m.props.get("topic_alias")))(r.read()) == ("tao/a", b"a1", 1)
        for topic, payload, qos in (("tao/a", b"a2", 1), ("tao/b", b"b", 0), ("tao/a", b"a3", 0)):
            p.pub(topic, payload, qos=qos)
        got = [r.read() for _ in range(3)]
        for m in got:
            if m.qos:
                r.send(C.Ack(C.PUBACK, m.pi))
        assert sorted((m.payload, m.topic, m.props.get("topic_alias")) for m in got) == [
            (b"a2", "", 1), (b"a3", "", 1), (b"b", "tao/b", None)]
        plain, _ = _raw5(t, "plain")  # no maximum announced: no aliases
        plain.send(C.Subscribe(1, [("tao/#", C.SubOpts(0))]))
        plain.read()
        p.pub("tao/a", b"y")
        m = plain.read()
        assert m.topic == "tao/a" and "topic_alias" not in m.props


def test_server_disconnect_read_not_reset(tmp_path):
    # a server DISCONNECT (here 0x93, receive maximum exceeded) with the client still answering: the server shuts
    # its side and drops what comes for a moment, so the client's late PUBRELs are not answered with a reset
    # (Eclipse Paho's interoperability test_flow_control2 sends them after the DISCONNECT was written)
    with mqtt_target(KIND, tmp_path, mqtt_conf="receive_maximum: 4") as t:
        r, _ = _raw5(t, "burst")
        r.send(b"".join(C.encode(C.Publish("burst/x", b"x", 2, pi=i), 5) for i in range(1, 6)))
        got = []
        while not got or got[-1] != "EOF":
            got.append(r.read(timeout=10))
        recs = [m.pi for m in got if isinstance(m, C.Ack) and m.type == C.PUBREC]
        assert C.Disconnect(0x93, {}) in [C.Disconnect(m.rc, {}) for m in got if isinstance(m, C.Disconnect)]
        assert recs
        for pi in recs:
            r.send(C.Ack(C.PUBREL, pi))  # (ConnectionResetError / BrokenPipeError after a reset)
            time.sleep(0.1)


def test_clean_start_drops_unreleased_qos2(tmp_path):
    # a QoS 2 PUBLISH never released (no PUBREL) belongs to the session: a clean start drops it, so a new
    # PUBLISH reusing its packet id is a new message, not a resend of the old one (MQTT 5 4.1, 4.3.3)
    with mqtt_target(KIND, tmp_path) as t:
        w = _v5(t, "watch")
        w.sub("q2/#", 2)
        for expiry in (0, 60):  # (the session ended at the close, or kept and discarded by the clean start)
            r, _ = _raw5(t, "q2", props={"session_expiry_interval": expiry})
            r.send(C.Publish("q2/x", b"old", 2, pi=7))
            assert r.read() == C.Ack(C.PUBREC, 7)
            r.send(C.Disconnect())
            r.close()
            r, _ = _raw5(t, "q2", props={"session_expiry_interval": expiry})
            r.send(C.Publish("q2/x", b"new", 2, pi=7))
            assert r.read() == C.Ack(C.PUBREC, 7)
            r.send(C.Ack(C.PUBREL, 7))
            assert r.read() == C.Ack(C.PUBCOMP, 7)
            assert w.get(timeout=5).payload == b"new"
            w.none(0.3)
            r.send(C.Disconnect())
            r.close()
