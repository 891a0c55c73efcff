"""A replicated consumer's leader changes, as a pull client sees them: a pull request waiting on the old
leader is told to ask again (``409 Leadership Change``, nats.py's fetch takes it for a temporary error) and
the next pull reaches the new leader; nothing waits past the request's expiry. Leader changes are logged
as nats-server logs them."""
from __future__ import annotations

import asyncio
import io
import json
import time

import nats
import nats.errors
import pytest
from nats.js.api import ConsumerConfig

from rillet.app.embed import run_cluster
from rillet.server.logging import Logger

from test_jscluster_features import api, consumer_leader, until


@pytest.fixture
async def cl():
    out = io.StringIO()
    async with run_cluster(3, jetstream=True, log=Logger(out=out)) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            yield servers, nc, nc.jetstream(), out
        finally:
            await nc.close()


async def test_waiting_pull_told_of_leader_change_and_next_pull_answered(cl):
    servers, nc, js, out = cl
    await js.add_stream(name="P", subjects=["p"], num_replicas=3)
    await js.add_consumer("P", ConsumerConfig(durable_name="PC", ack_policy="explicit"))
    await until(lambda: consumer_leader(servers, "P", "PC") is not None, what="consumer leader")
    got: asyncio.Queue = asyncio.Queue()

    async def cb(msg):
        got.put_nowait(msg)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=cb)
    # a pull request that waits (nothing stored yet) up to 10 s
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.PC", json.dumps({"batch": 1, "expires": 10_000_000_000}).encode(),
                     reply=inbox)
    old = consumer_leader(servers, "P", "PC")
    await until(lambda: len(old.c.waiting) == 1, what="the request waiting on the leader")
    t0 = time.monotonic()
    r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.P.PC")
    assert r.get("success") is True, r
    m = await asyncio.wait_for(got.get(), 3.0)
    assert time.monotonic() - t0 < 3.0
    assert m.headers and m.headers.get("Status") == "409" and m.headers.get("Description") == "Leadership Change"
    await until(lambda: consumer_leader(servers, "P", "PC") not in (None, old), what="a new consumer leader")
    await js.publish("p", b"one")
    sub = await js.pull_subscribe_bind(durable="PC", stream="P")
    [msg] = await sub.fetch(1, timeout=3)  # the next pull reaches the new leader
    assert msg.data == b"one"
    await msg.ack_sync()
    log = out.getvalue()
    assert "JetStream cluster new consumer leader for '$G > P > PC'" in log
    assert "JetStream cluster new stream leader for '$G > P'" in log


async def test_fetch_during_leader_change_does_not_hang(cl):
    # pulls sent while the consumer's leadership moves: each fetch returns (messages or a timeout) within
    # its own timeout, and every message comes out in the end
    servers, nc, js, out = cl
    await js.add_stream(name="Q", subjects=["q"], num_replicas=3)
    for i in range(20):
        await js.publish("q", b"%d" % i)
    await js.add_consumer("Q", ConsumerConfig(durable_name="QC", ack_policy="explicit", ack_wait=2.0))
    await until(lambda: consumer_leader(servers, "Q", "QC") is not None, what="consumer leader")
    sub = await js.pull_subscribe_bind(durable="QC", stream="Q")
    seen = set()
    stepped = 0
    deadline = time.monotonic() + 20
    while len(seen) < 20 and time.monotonic() < deadline:
        if stepped < 2 and len(seen) >= 5 * (stepped + 1):
            old = consumer_leader(servers, "Q", "QC")
            r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.Q.QC")
            assert r.get("success") is True, r
            stepped += 1
        t = time.monotonic()
        try:
            msgs = await sub.fetch(3, timeout=1.0)
        except nats.errors.TimeoutError:
            msgs = []
        assert time.monotonic() - t < 1.6  # never past the fetch's own timeout (and a little scheduling)
        for m in msgs:
            seen.add(m.data)
            await m.ack_sync(timeout=3)
    assert stepped == 2
    assert len(seen) == 20


async def test_waiting_pull_told_of_consumer_delete(cl):
    # a delete is not a leader change: the waiting request hears 409 Consumer Deleted, as from one server
    servers, nc, js, out = cl
    await js.add_stream(name="R", subjects=["r"], num_replicas=3)
    await js.add_consumer("R", ConsumerConfig(durable_name="RC", ack_policy="explicit"))
    await until(lambda: consumer_leader(servers, "R", "RC") is not None, what="consumer leader")
    got: asyncio.Queue = asyncio.Queue()

    async def cb(msg):
        got.put_nowait(msg)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=cb)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.R.RC", json.dumps({"batch": 1, "expires": 10_000_000_000}).encode(),
                     reply=inbox)
    lead = consumer_leader(servers, "R", "RC")
    await until(lambda: len(lead.c.waiting) == 1, what="the request waiting on the leader")
    assert await js.delete_consumer("R", "RC")
    m = await asyncio.wait_for(got.get(), 3.0)
    assert m.headers and m.headers.get("Status") == "409" and m.headers.get("Description") == "Consumer Deleted"
