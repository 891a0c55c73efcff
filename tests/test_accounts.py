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
