"""AckSync on a replicated consumer (the fault harness's "acks that don't stick"): the server confirms an
ack only once the ack entry committed in the consumer's RAFT group, as nats-server (it answers from the
replicated ack). A consumer leader cut from its followers never confirms, and a confirmed ack survives a
consumer leader change (the value is not delivered again)."""
from __future__ import annotations

import asyncio
import io

import nats
import nats.errors
import pytest
from nats.js.api import ConsumerConfig

from rillet.app.embed import run_cluster
from rillet.server.logging import Logger

from test_jscluster_features import api, consumer_leader, consumer_reps, until


@pytest.fixture
async def cl():
    out = io.StringIO()
    async with run_cluster(3, jetstream=True, log=Logger(out=out)) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            yield servers, nc, nc.jetstream()
        finally:
            await nc.close()


async def test_ack_sync_confirmed_after_commit_and_kept_across_leader_change(cl):
    servers, nc, js = cl
    await js.add_stream(name="A", subjects=["a"], num_replicas=3)
    for i in range(4):
        await js.publish("a", b"%d" % i)
    await js.add_consumer("A", ConsumerConfig(durable_name="AC", ack_policy="explicit", ack_wait=1.0))
    await until(lambda: consumer_leader(servers, "A", "AC") is not None, what="consumer leader")
    sub = await js.pull_subscribe_bind(durable="AC", stream="A")
    msgs = await sub.fetch(2, timeout=3)
    lead = consumer_leader(servers, "A", "AC")
    for m in msgs:
        await m.ack_sync(timeout=3)
        # confirmed: the leader has applied the committed ack
        assert m.metadata.sequence.stream not in lead.c.pending
    old = lead
    r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.A.AC")
    assert r.get("success") is True, r
    await until(lambda: consumer_leader(servers, "A", "AC") not in (None, old), what="a new consumer leader")
    got = []
    for _ in range(3):
        try:
            got += [m.data for m in await sub.fetch(4, timeout=1.5)]
        except nats.errors.TimeoutError:
            pass
    assert sorted(set(got)) == [b"2", b"3"], got  # the two confirmed acks stuck


async def test_ack_sync_not_confirmed_without_quorum(cl):
    servers, nc, js = cl
    await js.add_stream(name="B", subjects=["b"], num_replicas=3)
    await js.publish("b", b"x")
    await js.add_consumer("B", ConsumerConfig(durable_name="BC", ack_policy="explicit"))
    await until(lambda: consumer_leader(servers, "B", "BC") is not None, what="consumer leader")
    sub = await js.pull_subscribe_bind(durable="BC", stream="B")
    [m] = await sub.fetch(1, timeout=3)
    lead = consumer_leader(servers, "B", "BC")
    for cr in consumer_reps(servers, "B", "BC"):
        if cr is not lead:
            await cr.group.stop()  # the followers are gone: the ack cannot commit
    with pytest.raises((nats.errors.TimeoutError, asyncio.TimeoutError)):
        await m.ack_sync(timeout=1.0)


async def test_delivery_waits_for_its_commit(cl):
    # a consumer leader without its followers delivers nothing: the delivery is recorded on a quorum first
    # (nats-server 2.12+), so a cut-off or paused leader cannot hand out messages the next leader redelivers
    servers, nc, js = cl
    await js.add_stream(name="D", subjects=["d"], num_replicas=3)
    await js.publish("d", b"x")
    await js.add_consumer("D", ConsumerConfig(durable_name="DC", ack_policy="explicit"))
    await until(lambda: consumer_leader(servers, "D", "DC") is not None, what="consumer leader")
    sub = await js.pull_subscribe_bind(durable="DC", stream="D")
    lead = consumer_leader(servers, "D", "DC")
    for cr in consumer_reps(servers, "D", "DC"):
        if cr is not lead:
            await cr.group.stop()
    with pytest.raises((nats.errors.TimeoutError, asyncio.TimeoutError)):
        await sub.fetch(1, timeout=1.0)


async def test_ack_sync_not_confirmed_when_the_proposal_is_refused(cl):
    # seed 203 of the fault harness: a consumer leader resuming from SIGSTOP reads a newer term's message
    # (its RAFT node is a follower at once) and then the client's buffered AckSync, before the group has
    # told the consumer it lost leadership. The ack proposal is refused; the ack was confirmed anyway
    # (taken for "nothing to replicate") and the new leader delivered the value again one ack wait later.
    # Same window here: a leadership transfer under way refuses proposals.
    servers, nc, js = cl
    await js.add_stream(name="T", subjects=["t"], num_replicas=3)
    await js.publish("t", b"x")
    await js.add_consumer("T", ConsumerConfig(durable_name="TC", ack_policy="explicit", ack_wait=1.0))
    await until(lambda: consumer_leader(servers, "T", "TC") is not None, what="consumer leader")
    sub = await js.pull_subscribe_bind(durable="TC", stream="T")
    [m] = await sub.fetch(1, timeout=3)
    confirmed = []

    async def got(msg):
        confirmed.append(msg)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=got)
    await nc.flush()
    lead = consumer_leader(servers, "T", "TC")
    c = lead.c
    lead.group.stepdown()  # the transfer starts: the node refuses proposals, the consumer still leads
    assert c.clog.is_leader
    c._on_ack(None, None, m.reply.encode(), inbox.encode(), 0, b"")
    await until(lambda: consumer_leader(servers, "T", "TC") not in (None, lead), what="a new consumer leader")
    await asyncio.sleep(0.3)
    assert confirmed == []  # the ack never reached the log: no confirmation
    again = []
    for _ in range(4):
        try:
            again += await sub.fetch(1, timeout=1.0)
        except nats.errors.TimeoutError:
            pass
        if again:
            break
    assert [x.data for x in again] == [b"x"]  # not acknowledged: delivered again, as promised
