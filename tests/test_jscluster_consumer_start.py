"""A new consumer led on a stream follower starts from what the stream had acknowledged (issue 24).

nats-server 2.15 places an R1 consumer (an ordered consumer, a KV watcher, an ephemeral) of a replicated stream
on a random online replica, as Rillet does; a follower may not have applied the newest acknowledged messages yet.
Rillet's consumer leader on a stream follower asks the stream leader for its state and starts once its replica
holds as much (rillet/jetstream/cluster/consumers.py, ConsumerReplica._lead_when_stream_current), so a KV watch
started right after a put sees that put before its end-of-initial-data marker, and an ephemeral consumer's
create answer counts every acknowledged message.

The tests make one stream follower slow: the stream group's messages reach it 0.4 s late (a follower under
load), and create consumers until several landed on it."""
from __future__ import annotations

import asyncio
import json

import pytest

from jscluster_support import until, cl, reps, stream_leader  # noqa: F401 (the fixture)
from rillet.jetstream.cluster import consumers as CR

DELAY = 0.4  # seconds the slowed follower's stream-group messages arrive late
WANT_ON_SLOW = 3  # consumers that must have landed on the slowed follower
MAX_TRIES = 60  # (placement is random among the 3 replicas: 60 tries give 3 landings but for ~1e-8)


def _slow_follower(servers, stream: str):
    """Delay every message of ``stream``'s group to one follower by DELAY (order kept); returns (index of that
    server, undo)."""
    rs = reps(servers, stream)
    fi = next(i for i, r in enumerate(rs) if r is not None and not r.leader)
    g = rs[fi].group
    tr = g.transport
    joined = tr._groups[g.name]
    orig = joined.cb
    handler = orig or tr.on_message
    loop = asyncio.get_running_loop()
    pending = []

    def late(group, frm, data):
        pending.append(loop.call_later(DELAY, handler, group, frm, data))

    joined.cb = late

    async def undo():
        joined.cb = orig
        await asyncio.sleep(DELAY + 0.1)  # (what was held is delivered before the cluster stops)
    return fi, undo


async def _leader_ready(servers, stream: str):
    await until(lambda: stream_leader(servers, stream) is not None
                and all(r is not None for r in reps(servers, stream)), what="stream leader and replicas")


async def test_kv_watch_after_put_sees_the_put_on_a_slow_follower(cl):
    servers, nc, js = cl
    kv = await js.create_key_value(bucket="w", replicas=3, history=1)
    await _leader_ready(servers, "KV_w")
    fi, undo = _slow_follower(servers, "KV_w")
    slow = servers[fi].name
    on_slow = 0
    try:
        for i in range(MAX_TRIES):
            await kv.put(f"k{i}", b"%d" % i)  # acknowledged: committed and applied by the leader
            w = await kv.watchall()
            seen = []
            async for e in w:
                if e is None:
                    break
                seen.append(e.key)
            where = (await w._sub.consumer_info()).cluster.leader
            await w.stop()
            assert seen == [f"k{j}" for j in range(i + 1)], (i, where, slow, seen[-3:])
            on_slow += where == slow
            if on_slow >= WANT_ON_SLOW:
                break
    finally:
        await undo()
    assert on_slow >= WANT_ON_SLOW, f"only {on_slow} watchers placed on the slowed follower {slow}"


async def test_ephemeral_create_counts_every_acknowledged_message_on_a_slow_follower(cl):
    servers, nc, js = cl
    await js.add_stream(name="E", subjects=["e.>"], num_replicas=3)
    await _leader_ready(servers, "E")
    fi, undo = _slow_follower(servers, "E")
    slow = servers[fi].name
    on_slow = 0
    try:
        for i in range(MAX_TRIES):
            await js.publish("e.x", b"%d" % i)
            # an ephemeral (no durable name): R1, placed on a random replica; its create answer and its first
            # message (deliver policy "new" would skip them all, "last" is the newest) count what was acked
            for policy, want_pending in (("all", i + 1), ("last", 1)):
                r = await nc.request("$JS.API.CONSUMER.CREATE.E", json.dumps(
                    {"stream_name": "E", "config": {"ack_policy": "none", "deliver_policy": policy,
                                                    "inactive_threshold": 30_000_000_000}}).encode(), timeout=5)
                info = json.loads(r.data)
                assert "error" not in info, info
                where = info["cluster"]["leader"]
                assert info["num_pending"] == want_pending, (i, policy, where, slow, info["num_pending"])
                on_slow += where == slow
                await js.delete_consumer("E", info["name"])
            if on_slow >= WANT_ON_SLOW:
                break
    finally:
        await undo()
    assert on_slow >= WANT_ON_SLOW, f"only {on_slow} consumers placed on the slowed follower {slow}"


@pytest.mark.parametrize("lead", [False, True])
def test_stream_may_lag_only_for_a_new_consumer_on_a_stream_follower(lead):
    """Unit: the wait applies to a consumer without state of its own on a server that does not lead the
    replicated stream."""
    class G:
        peers = ["a", "b", "c"]

    class Rep:
        leader = lead
        closed = False
        group = G()

    class C:
        started_by_log = False

    class JS:
        cluster = object()  # (the meta layer, which answers the stream leader's state)

    class CS:
        js = JS()

    cr = CR.ConsumerReplica.__new__(CR.ConsumerReplica)
    cr.rep, cr.c, cr.cs = Rep(), C(), CS()
    assert cr._stream_may_lag() is (not lead)
    cr.c.started_by_log = True  # (resumes from its replicated state: no deliver-policy start to protect)
    assert cr._stream_may_lag() is False
    cr.c.started_by_log = False
    Rep.group.peers = ["a"]
    assert cr._stream_may_lag() is False
    Rep.group.peers = ["a", "b", "c"]
    JS.cluster = None  # (no meta layer to ask: the consumer leads at once)
    assert cr._stream_may_lag() is False
