"""Configured accounts: per-account mappings, limits, stream and service exports/imports.

Behaviour checked against nats-server v2.15.1 (RILLET_TEST_TARGET=nats-server runs these against it).
"""
import asyncio
import re

import nats
import pytest

from tests.helpers import serve_config


def url(srv, user):
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


async def test_account_mappings():
    conf = """
listen: 127.0.0.1:-1
accounts {
  A { users [{user: a, password: a}], mappings { "x.*": "y.{{wildcard(1)}}" } }
  B { users [{user: b, password: b}] }
}
"""
    async with serve_config(conf) as srv:
        na = await nats.connect(url(srv, "a"))
        nb = await nats.connect(url(srv, "b"))
        sa = await na.subscribe("y.>")
        sbx = await nb.subscribe("x.>")
        await na.flush()
        await nb.flush()
        await na.publish("x.1", b"one")
        m = await sa.next_msg(timeout=1)
        assert (m.subject, m.data) == ("y.1", b"one")
        await nb.publish("x.2", b"two")  # no mapping in B
        m = await sbx.next_msg(timeout=1)
        assert m.subject == "x.2"
        await na.close()
        await nb.close()


LIMITS_CONF = """
listen: 127.0.0.1:-1
accounts {
  A { users [{user: a, password: a}], limits { max_connections: 2, max_subscriptions: 2, max_payload: 100 } }
}
"""


async def test_account_max_connections():
    async with serve_config(LIMITS_CONF) as srv:
        c1 = await nats.connect(url(srv, "a"))
        c2 = await nats.connect(url(srv, "a"))
        with pytest.raises(Exception) as ei:
            await nats.connect(url(srv, "a"), allow_reconnect=False, connect_timeout=2)
        assert "maximum account active connections exceeded" in str(ei.value)
        await c2.close()
        await asyncio.sleep(0.1)
        c3 = await nats.connect(url(srv, "a"))
        await c3.close()
        await c1.close()


async def test_account_max_connections_close_reason():
    import json
    import urllib.request
    from tests.helpers import free_port
    port = free_port()
    async with serve_config(LIMITS_CONF + f"http: 127.0.0.1:{port}\n") as srv:
        c1 = await nats.connect(url(srv, "a"))
        c2 = await nats.connect(url(srv, "a"))
        with pytest.raises(Exception):
            await nats.connect(url(srv, "a"), allow_reconnect=False, connect_timeout=2)
        await asyncio.sleep(0.1)
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/connz?state=closed", timeout=2).read())
        reasons = [c["reason"] for c in json.loads(body)["connections"]]
        assert reasons == ["Maximum Account Connections Exceeded"]
        await c1.close()
        await c2.close()


async def test_account_max_subscriptions_and_payload():
    from tests.helpers import RawClient
    async with serve_config(LIMITS_CONF) as srv:
        rc = await RawClient.open(srv, connect={"user": "a", "pass": "a", "verbose": False, "protocol": 1})
        rc.sub("x", 1)
        rc.sub("y", 2)
        rc.sub("z", 3)
        rc.send(b"PING\r\n")
        line = await rc.readline()
        while not line.startswith(b"-ERR"):
            line = await rc.readline()
        assert line == b"-ERR 'maximum subscriptions exceeded'"
        rc.send(b"PUB x 101\r\n" + b"a" * 101 + b"\r\n")
        line = await rc.readline()
        while not line.startswith(b"-ERR"):
            line = await rc.readline()
        assert line == b"-ERR 'Maximum Payload Violation'"


STREAM_CONF = """
listen: 127.0.0.1:-1
accounts {
  A { users [{user: a, password: a}], exports [{stream: "foo.>"}, {stream: "priv.>", accounts: [C]}] }
  B { users [{user: b, password: b}], imports [{stream: {account: A, subject: "foo.>"}, prefix: x}] }
  C { users [{user: c, password: c}], imports [{stream: {account: A, subject: "priv.>"}},
                                               {stream: {account: A, subject: "foo.bar"}, to: "renamed"}] }
}
"""


async def test_stream_import_export():
    async with serve_config(STREAM_CONF) as srv:
        na, nb, nc = [await nats.connect(url(srv, u)) for u in "abc"]
        sb = await nb.subscribe(">")
        sc = await nc.subscribe(">")
        for n in (nb, nc):
            await n.flush()
        await na.publish("foo.bar", b"1")
        await na.publish("priv.z", b"2")
        await na.publish("other", b"3")
        m = await sb.next_msg(timeout=1)
        assert (m.subject, m.data) == ("x.foo.bar", b"1")
        got = sorted([(m.subject, m.data) for m in [await sc.next_msg(timeout=1) for _ in range(2)]])
        assert got == [("priv.z", b"2"), ("renamed", b"1")]
        with pytest.raises(nats.errors.TimeoutError):
            await sb.next_msg(timeout=0.2)
        with pytest.raises(nats.errors.TimeoutError):
            await sc.next_msg(timeout=0.1)
        # nothing flows back the other way
        sa = await na.subscribe(">")
        await na.flush()
        await nb.publish("x.foo.bar", b"back")
        with pytest.raises(nats.errors.TimeoutError):
            await sa.next_msg(timeout=0.2)
        for n in (na, nb, nc):
            await n.close()


def test_import_not_exported_is_config_error():
    from rillet.app.compose import build_server
    from rillet.config.flags import parse_command_line
    import tempfile
    conf = STREAM_CONF.replace('subject: "priv.>"}}', 'subject: "nope.>"}}')
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(conf)
        f.flush()
        with pytest.raises(ValueError) as ei:
            build_server(parse_command_line(["-c", f.name]).options)
    # refused when the configuration loads, at the import's position (file:line:col)
    assert re.fullmatch(rf'{re.escape(f.name)}:\d+:\d+: Error adding stream import "nope[.]>": stream import not authorized',
                        str(ei.value)), str(ei.value)
    conf = STREAM_CONF.replace('subject: "foo.>"}, prefix', 'subject: "priv.>"}, prefix')  # B not allowed
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(conf)
        f.flush()
        with pytest.raises(ValueError) as ei:
            build_server(parse_command_line(["-c", f.name]).options)
    # refused when the configuration loads, at the import's position (file:line:col)
    assert re.fullmatch(rf'{re.escape(f.name)}:\d+:\d+: Error adding stream import "priv[.]>": stream import not authorized',
                        str(ei.value)), str(ei.value)


SERVICE_CONF = """
listen: 127.0.0.1:-1
accounts {
  A { users [{user: a, password: a}], exports [{service: "req.>"}] }
  B { users [{user: b, password: b}], imports [{service: {account: A, subject: "req.x"}, to: "svc"}] }
}
"""


async def test_service_import_request_reply():
    async with serve_config(SERVICE_CONF) as srv:
        na = await nats.connect(url(srv, "a"))
        nb = await nats.connect(url(srv, "b"))
        seen = []

        async def handler(msg):
            seen.append((msg.subject, msg.reply))
            await msg.respond(b"re:" + msg.data)

        await na.subscribe("req.>", cb=handler)
        await na.flush()
        r = await nb.request("svc", b"hi", timeout=2)
        assert r.data == b"re:hi"
        assert seen[0][0] == "req.x" and seen[0][1].startswith("_R_.")
        r = await nb.request("svc", b"again", timeout=2)
        assert r.data == b"re:again"
        # B cannot reach A's subjects directly
        with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
            await nb.request("req.x", b"direct", timeout=0.5)
        spy = await nb.subscribe(">")
        await nb.flush()
        await na.publish("req.y", b"a-only")
        with pytest.raises(nats.errors.TimeoutError):
            await spy.next_msg(timeout=0.2)
        await na.close()
        await nb.close()
