"""Configured accounts: per-account mappings, limits, stream and service exports/imports.

Behaviour checked against nats-server v2.15.1 (RILLET_TEST_TARGET=nats-server runs these against it).
"""
import asyncio

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
