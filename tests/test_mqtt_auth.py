"""MQTT clients and the server's account machinery, as nats-server treats them: the auth callout (config's
``authorization { auth_callout }``), account JWT updates (revocations) in operator mode, the ``$SYS``
CONNECT/DISCONNECT events (``client_type: "mqtt"``, ``client_id``), and MQTT 5's Receive Maximum on QoS 1.
The tests parametrized over TARGETS run against Rillet and nats-server 2.15 with the same assertions."""
from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

from mqttdiff import TARGETS, Paho, Raw, mqtt_target
from lanes import LANES, use_lane
from rillet import jwt
from rillet.mqtt import codec as C


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in each lane (the pure-Python MQTT reads and deliveries, then their compiled
    twins in rillet._speedups._cmqtt; a Rillet subprocess started meanwhile runs that lane)."""
    with use_lane(request.param, globals()):
        yield request.param


ISSUER = jwt.new_keypair("A")

CALLOUT_CONF = f"""
accounts {{
  AUTH {{ users [{{user: auth, password: pwd}}] }}
  A {{ jetstream: enabled }}
}}
authorization {{
  timeout: 2
  auth_callout {{
    issuer: {jwt.public_key(ISSUER)}
    auth_users: [auth]
    account: AUTH
  }}
}}
"""


def _user_jwt(user_nkey: str, account: str, pub: list, sub: list) -> str:
    n = {"pub": {"allow": pub}, "sub": {"allow": sub}, "subs": -1, "data": -1, "payload": -1, "type": "user",
         "version": 2}
    return jwt.encode({"sub": user_nkey, "aud": account, "nats": n}, ISSUER)


def _response(req: dict, ujwt: str = "", error: str = "") -> bytes:
    n: dict = {"type": "authorization_response", "version": 2}
    if ujwt:
        n["jwt"] = ujwt
    if error:
        n["error"] = error
    c = {"sub": req["nats"]["user_nkey"], "aud": req["nats"]["server_id"]["id"], "nats": n}
    return jwt.encode(c, ISSUER).encode()


@pytest.mark.parametrize("kind", TARGETS)
def test_auth_callout_decides_mqtt_clients(kind, tmp_path):
    with mqtt_target(kind, tmp_path, conf=CALLOUT_CONF) as t:
        requests: list[dict] = []

        async def main() -> None:
            svc = await nats.connect(t.nats_url.replace("nats://", "nats://auth:pwd@"))

            async def handler(msg):
                req = jwt.decode(msg.data.decode())
                requests.append(req)
                co = req["nats"]["connect_opts"]
                if co.get("user") == "alice" and co.get("pass") == "a":
                    ujwt = _user_jwt(req["nats"]["user_nkey"], "A", ["a", "a.>"], ["a", "a.>"])
                    await msg.respond(_response(req, ujwt))
                else:
                    await msg.respond(_response(req, error="unknown user"))
            await svc.subscribe("$SYS.REQ.USER.AUTH", cb=handler)
            await svc.flush()
            loop = asyncio.get_running_loop()
            # admitted into account A, with the callout's permissions on the mapped subjects
            r = Raw(t.mqtt_port)
            ack = await loop.run_in_executor(None, lambda: r.connect("dev-1", username="alice", password=b"a"))
            assert ack == C.ConnAck(False, 0)
            r.send(C.Subscribe(1, [("a/#", C.SubOpts(0)), ("b/#", C.SubOpts(0))]))
            assert await loop.run_in_executor(None, r.read) == C.SubAck(1, [0, 0x80])  # b.> not allowed
            r.send(C.Publish("a/x", b"hello", 0))
            got = await loop.run_in_executor(None, r.read)
            assert isinstance(got, C.Publish) and got.topic == "a/x" and got.payload == b"hello"
            # refused by the callout: CONNACK 5, closed
            r2 = Raw(t.mqtt_port)
            ack = await loop.run_in_executor(None, lambda: r2.connect("dev-2", username="mallory", password=b"x"))
            assert ack == C.ConnAck(False, 5)
            assert await loop.run_in_executor(None, r2.closed)
            r.close()
            await svc.close()
        asyncio.run(main())
        assert len(requests) == 2
        n = requests[0]["nats"]
        ci = n["client_info"]
        assert ci["type"] == "mqtt" and ci["mqtt_id"] == "dev-1" and ci["kind"] == "Client"
        assert ci["user"] == "alice" and ci["host"] == "127.0.0.1" and ci["id"] > 0
        co = n["connect_opts"]
        assert co["user"] == "alice" and co["pass"] == "a" and co["auth_token"] == "a" and co["protocol"] == 0
        assert "name" not in co and "lang" not in co
        assert requests[1]["nats"]["client_info"]["mqtt_id"] == "dev-2"


EVENTS_CONF = """
accounts {
  SYS { users [{user: sys, password: sys}] }
  A { jetstream: enabled, users [{user: a, password: a}] }
}
system_account: SYS
"""


@pytest.mark.parametrize("kind", TARGETS)
def test_sys_connect_disconnect_events_for_mqtt(kind, tmp_path):
    with mqtt_target(kind, tmp_path, conf=EVENTS_CONF) as t:
        async def main() -> list:
            nc = await nats.connect(t.nats_url.replace("nats://", "nats://sys:sys@"))
            sub = await nc.subscribe("$SYS.ACCOUNT.A.*")
            await nc.flush()
            loop = asyncio.get_running_loop()
            p = await loop.run_in_executor(None, lambda: Paho(t.mqtt_port, "ev-1", user="a", password="a"))
            await loop.run_in_executor(None, lambda: p.pub("e/x", b"12345", qos=0))
            await asyncio.sleep(0.3)
            await loop.run_in_executor(None, p.disconnect)
            # a refused client has no CONNECT event
            r = Raw(t.mqtt_port)
            ack = await loop.run_in_executor(None, lambda: r.connect("ev-2", username="a", password=b"wrong"))
            assert ack == C.ConnAck(False, 5)
            out = []
            deadline = time.monotonic() + 5
            while len(out) < 2 and time.monotonic() < deadline:
                try:
                    m = await sub.next_msg(timeout=1)
                except nats.errors.TimeoutError:
                    continue
                out.append((m.subject, json.loads(m.data)))
            try:  # nothing more (no event for ev-2)
                m = await sub.next_msg(timeout=0.5)
                out.append((m.subject, json.loads(m.data)))
            except nats.errors.TimeoutError:
                pass
            await nc.close()
            return out
        events = asyncio.run(main())
        assert [s for s, _ in events] == ["$SYS.ACCOUNT.A.CONNECT", "$SYS.ACCOUNT.A.DISCONNECT"]
        con, dis = events[0][1], events[1][1]
        assert con["type"] == "io.nats.server.advisory.v1.client_connect"
        assert dis["type"] == "io.nats.server.advisory.v1.client_disconnect"
        for ev in (con, dis):
            c = ev["client"]
            assert c["client_type"] == "mqtt" and c["client_id"] == "ev-1" and c["kind"] == "Client"
            assert c["acc"] == "A" and c["user"] == "a" and c["host"] == "127.0.0.1"
            assert "name" not in c and "lang" not in c and "ver" not in c
        assert dis["reason"] == "Client Closed"
        assert dis["sent"] == {"msgs": 1, "bytes": 28}  # (nats-server: NATS header + payload, less 2)
        assert con["client"]["id"] == dis["client"]["id"]


@pytest.mark.parametrize("kind", TARGETS)
def test_account_jwt_revocation_closes_mqtt_client(kind, tmp_path):
    from tests.test_operator import Operator, creds
    op = Operator()
    lim = {"subs": -1, "conn": -1, "payload": -1, "data": -1, "imports": -1, "exports": -1, "wildcards": True,
           "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    akp, apub, _ = op.account("A", limits=lim)
    conf = "\n".join([f"operator: {op.jwt()}", "resolver: MEMORY", f"system_account: {op.sys[1]}",
                      "resolver_preload {", *(f'  {pub}: "{tok}"' for _k, pub, tok in op.accounts.values()), "}"])
    vkp, victim = op.user(akp, bearer_token=True)
    _k2, keep = op.user(akp, bearer_token=True)
    with mqtt_target(kind, tmp_path, conf=conf) as t:
        r1, r2 = Raw(t.mqtt_port), Raw(t.mqtt_port)
        assert r1.connect("victim", username="x", password=victim.encode()) == C.ConnAck(False, 0)
        assert r2.connect("keep", username="x", password=keep.encode()) == C.ConnAck(False, 0)

        async def update() -> dict:
            nc = await nats.connect(t.nats_url, user_credentials=creds(tmp_path, *op.user(op.sys[0], name="sys")))
            _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1, limits=lim,
                                   revocations={jwt.public_key(vkp): int(time.time()) + 1})
            r = await nc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=3)
            await nc.close()
            return json.loads(r.data)
        body = asyncio.run(update())
        assert body["data"]["message"] == "jwt updated"
        assert r1.closed(timeout=3)  # revoked: closed
        r2.send(C.PingReq())  # the other stays
        assert r2.read() == C.PingResp()
        r3 = Raw(t.mqtt_port)  # and the revoked JWT cannot sign in again
        assert r3.connect("victim", username="x", password=victim.encode()) == C.ConnAck(False, 5)


def _operator_conf(op) -> str:
    return "\n".join([f"operator: {op.jwt()}", "resolver: MEMORY", f"system_account: {op.sys[1]}",
                      "resolver_preload {", *(f'  {pub}: "{tok}"' for _k, pub, tok in op.accounts.values()), "}"])


@pytest.mark.parametrize("kind", TARGETS)
def test_jwt_limits_on_mqtt_clients_as_nats_server(kind, tmp_path):
    """JWT limits on MQTT clients signing in with a user JWT (the password field), as nats-server 2.15 applies
    them: at CONNECT the account's payload and subs limits (and the server's) hold, the user JWT's own do not
    (nats-server sets a limit before it keeps an MQTT client's JWT); once an account JWT update re-applies
    the limits, the user's count too. The payload limit counts the NATS message (``Nmqtt-Pub`` header and
    payload): over it the connection closes; a SUBSCRIBE past the subs limit gets 0x80 for that filter, and a
    connection already at the limit when it is re-applied is closed. Connection types without MQTT refuse the
    CONNECT (0x05)."""
    from tests.test_operator import Operator, creds
    op = Operator()
    lim = {"subs": 3, "conn": -1, "payload": 150, "data": -1, "imports": -1, "exports": -1, "wildcards": True,
           "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    akp, apub, _ = op.account("A", limits=lim)
    _u1, small = op.user(akp, bearer_token=True, payload=100)
    _u2, few = op.user(akp, bearer_token=True, subs=2)
    _u3, nats_only = op.user(akp, bearer_token=True, allowed_connection_types=["STANDARD"])
    _u4, mqtt_ok = op.user(akp, bearer_token=True, allowed_connection_types=["MQTT"])
    with mqtt_target(kind, tmp_path, conf=_operator_conf(op)) as t:
        s = Raw(t.mqtt_port)
        assert s.connect("watch", username="x", password=mqtt_ok.encode()) == C.ConnAck(False, 0)
        s.send(C.Subscribe(1, [("lim/#", C.SubOpts(0))]))
        assert s.read() == C.SubAck(1, [0])
        n = Raw(t.mqtt_port)
        assert n.connect("nats-only", username="x", password=nats_only.encode()) == C.ConnAck(False, 5)
        p = Raw(t.mqtt_port)
        assert p.connect("small", username="x", password=small.encode()) == C.ConnAck(False, 0)
        for size in (75, 125):  # over the user's 100, within the account's 150 (25 + 125): delivered
            p.send(C.Publish("lim/a", b"x" * size))
            got = s.read()
            assert isinstance(got, C.Publish) and got.payload == b"x" * size
        f = Raw(t.mqtt_port)
        assert f.connect("few", username="x", password=few.encode()) == C.ConnAck(False, 0)
        f.send(C.Subscribe(2, [("a", C.SubOpts(0)), ("b", C.SubOpts(0)), ("c", C.SubOpts(0)), ("d", C.SubOpts(0))]))
        assert f.read() == C.SubAck(2, [0, 0, 0, 0x80])  # the account's 3, not the user's 2
        big = Raw(t.mqtt_port)
        assert big.connect("big", username="x", password=mqtt_ok.encode()) == C.ConnAck(False, 0)
        big.send(C.Publish("lim/a", b"y" * 126))  # 151: over the account's limit
        assert big.closed(timeout=5)

        async def update() -> dict:
            nc = await nats.connect(t.nats_url, user_credentials=creds(tmp_path, *op.user(op.sys[0], name="sys")))
            _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1, limits=lim)
            r = await nc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=3)
            await nc.close()
            return json.loads(r.data)
        assert asyncio.run(update())["data"]["message"] == "jwt updated"
        assert f.closed(timeout=5)  # 3 subscriptions, the user's limit is 2 now
        p.send(C.PingReq())
        assert p.read() == C.PingResp()
        p.send(C.Publish("lim/a", b"z" * 76))  # 101: over the user's limit now
        assert p.closed(timeout=5)
        s.send(C.PingReq())
        assert s.read() == C.PingResp()  # nothing of it reached the subscriber


def test_mqtt5_receive_maximum_enforced_on_qos1(tmp_path):
    with mqtt_target("rillet", tmp_path, mqtt_conf="receive_maximum: 4") as t:
        r = Raw(t.mqtt_port, version=5)
        ack = r.connect("rm1")
        assert ack.rc == 0 and ack.props["receive_maximum"] == 4
        # four unacknowledged QoS 1 PUBLISH are fine (answered in order)
        r.send(b"".join(C.encode(C.Publish("rm/x", b"m", 1, pi=i), 5) for i in range(1, 5)))
        assert [r.read().pi for _ in range(4)] == [1, 2, 3, 4]
        # twenty in one write: over the Receive Maximum before the first is stored: DISCONNECT 0x93
        r.send(b"".join(C.encode(C.Publish("rm/x", b"m", 1, pi=i), 5) for i in range(10, 30)))
        got = []
        while True:
            p = r.read()
            if p == "EOF":
                break
            got.append(p)
        assert isinstance(got[-1], C.Disconnect) and got[-1].rc == 0x93
        assert all(isinstance(p, C.Ack) for p in got[:-1]) and len(got) - 1 <= 4
        # the server and other clients are unaffected
        r2 = Raw(t.mqtt_port, version=5)
        assert r2.connect("rm2").rc == 0


def test_receive_maximum_setting_checked(tmp_path):
    from rillet.config.options_builder import load_string
    with pytest.raises(Exception, match=r"should in \[1..65535\] range"):
        load_string("jetstream: true\nmqtt { port: 1883, receive_maximum: 0 }", "m.conf")
    assert load_string("jetstream: true\nmqtt { port: 1883, receive_maximum: 9 }", "m.conf").mqtt["receive_maximum"] == 9
