"""Quorum-lost advisories (rillet/jetstream/cluster/streams.py, consumers.py): a stream or consumer group
leader that stops hearing from a majority of its peers steps down (check-quorum) and publishes
``io.nats.jetstream.advisory.v1.{stream,consumer}_quorum_lost`` in the stream's account, as nats-server."""
from __future__ import annotations

import io
import json

import nats
import pytest
from nats.js.api import ConsumerConfig

from rillet.app.embed import run_cluster
from rillet.server.logging import Logger

from test_jscluster_features import consumer_leader, consumer_reps, stream_leader, until


@pytest.fixture
async def servers():
    out = io.StringIO()
    async with run_cluster(3, jetstream=True, log=Logger(out=out)) as servers:
        yield servers
    assert "has NO quorum, stalled" in out.getvalue()


def _replicas_ok(body: dict, servers, li: int) -> None:
    # the other peers (not the reporting server), none of them current any more
    names = sorted(r["name"] for r in body["replicas"])
    assert names == sorted(s.name for i, s in enumerate(servers) if i != li), body
    for r in body["replicas"]:
        assert r["current"] is False and isinstance(r["active"], int) and r["peer"], r


async def test_stream_and_consumer_quorum_lost_advisories(servers):
    nc0 = await nats.connect(servers[0].client_url)
    js = nc0.jetstream()
    await js.add_stream(name="QL", subjects=["ql"], num_replicas=3)
    await js.add_consumer("QL", ConsumerConfig(durable_name="QC", ack_policy="explicit"))
    await nc0.close()
    await until(lambda: stream_leader(servers, "QL") is not None, what="a stream leader")
    await until(lambda: consumer_leader(servers, "QL", "QC") is not None, what="a consumer leader")
    lead = stream_leader(servers, "QL")
    li = next(i for i, s in enumerate(servers) if s.jetstream.cluster.streams.replica("$G", "QL") is lead)
    # the consumer leads on the stream leader's server too (hand it over when it does not)
    cl = consumer_leader(servers, "QL", "QC")
    target = [c for c in consumer_reps(servers, "QL", "QC") if c.rep is lead][0]
    if cl is not target:
        cl.group.stepdown(target.group.id)
        await until(lambda: consumer_leader(servers, "QL", "QC") is target, what="consumer leader moved")

    nc = await nats.connect(servers[li].client_url)
    got: list[tuple[str, dict]] = []

    async def adv(m):
        got.append((m.subject, json.loads(m.data)))
    try:
        await nc.subscribe("$JS.EVENT.ADVISORY.>", cb=adv)
        await nc.flush()
        for i, s in enumerate(servers):
            if i != li:
                await s.shutdown()

        def subjects():
            return {s for s, _ in got}
        await until(lambda: {"$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.QL",
                             "$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST.QL.QC"} <= subjects(),
                    timeout=8, what=f"quorum lost advisories (got {subjects()})")
        assert not lead.leader and not target.leader
        sa = [b for s, b in got if s == "$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.QL"]
        ca = [b for s, b in got if s == "$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST.QL.QC"]
        assert len(sa) == 1 and len(ca) == 1, got  # (throttled: one per group)
        s, c = sa[0], ca[0]
        assert set(s) == {"type", "id", "timestamp", "stream", "replicas"}, s
        assert s["type"] == "io.nats.jetstream.advisory.v1.stream_quorum_lost" and s["stream"] == "QL"
        assert set(c) == {"type", "id", "timestamp", "stream", "consumer", "replicas"}, c
        assert c["type"] == "io.nats.jetstream.advisory.v1.consumer_quorum_lost"
        assert (c["stream"], c["consumer"]) == ("QL", "QC")
        assert s["timestamp"].endswith("Z") and len(s["id"]) > 10
        _replicas_ok(s, servers, li)
        _replicas_ok(c, servers, li)
    finally:
        await nc.close()


@pytest.fixture
async def cluster3():
    async with run_cluster(3, jetstream=True) as servers:
        yield servers


async def test_stream_and_consumer_leader_elected_advisories(cluster3):
    """A new stream or consumer group's leader publishes nats-server's leader-elected advisory in the
    stream's account (no ``account`` field there), naming itself and the other replicas."""
    servers = cluster3
    nc = await nats.connect(servers[0].client_url)
    got: list[tuple[str, dict]] = []

    async def adv(m):
        got.append((m.subject, json.loads(m.data)))
    try:
        await nc.subscribe("$JS.EVENT.ADVISORY.*.LEADER_ELECTED.>", cb=adv)
        await nc.flush()
        js = nc.jetstream()
        await js.add_stream(name="LE", subjects=["le"], num_replicas=3)
        await js.add_consumer("LE", ConsumerConfig(durable_name="LC", ack_policy="explicit"))
        await until(lambda: stream_leader(servers, "LE") is not None, what="a stream leader")
        await until(lambda: consumer_leader(servers, "LE", "LC") is not None, what="a consumer leader")
        await until(lambda: {"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.LE",
                             "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.LE.LC"} <= {s for s, _ in got},
                    timeout=8, what=f"leader elected advisories (got {got})")
        s = [b for subj, b in got if subj == "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.LE"][-1]
        assert s["type"] == "io.nats.jetstream.advisory.v1.stream_leader_elected" and s["stream"] == "LE", s
        assert "account" not in s and s["leader"] in {x.name for x in servers}, s
        assert sorted(r["name"] for r in s["replicas"]) == sorted(x.name for x in servers if x.name != s["leader"]), s
        c = [b for subj, b in got if subj == "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.LE.LC"][-1]
        assert c["type"] == "io.nats.jetstream.advisory.v1.consumer_leader_elected", c
        assert (c["stream"], c["consumer"]) == ("LE", "LC") and "account" not in c, c
    finally:
        await nc.close()
