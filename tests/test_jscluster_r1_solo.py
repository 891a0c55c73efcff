"""An R1 stream on a clustered server runs solo (rillet/jetstream/cluster/streams.py ``solo_check``,
``RaftLog.solo``): its entries are applied at once, without the group's log and WAL, as nats-server runs
R1 streams without a RAFT group. What must still hold: dedup, deletes, purges and limits as on a single
server; scaling up brings the new members to the store's state (the leader proposes it, SYNCED, before the
first new member), also after a restart of the server (whose store is then ahead of the group's WAL);
scaling back down makes it solo again."""
from __future__ import annotations

import asyncio

import nats
import nats.js.errors
from nats.js.api import StreamConfig

from jscluster_support import cl, reps, until  # noqa: F401 (the fixture)


def held(servers, name):
    return [r for r in reps(servers, name) if r is not None]


def state(r):
    st = r.stream.store.state()
    return st.msgs, st.first_seq, st.last_seq, tuple(sorted(st.deleted))


async def test_r1_solo_then_scaled_up_and_down(cl):
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="S1", subjects=["s1.>"], num_replicas=1, duplicate_window=60.0,
                                     max_msgs_per_subject=20))
    for i in range(60):
        await js.publish(f"s1.{i % 3}", b"%d" % i, headers={"Nats-Msg-Id": f"id{i}"})
    (r,) = held(servers, "S1")
    assert r.leader and r.log.solo and r.log.solo_applied >= 60
    assert r.group.node.last_index() < 10  # (none of the messages went through the group's log)
    dup = await js.publish("s1.0", b"again", headers={"Nats-Msg-Id": "id59"})
    assert dup.duplicate and dup.seq == 60
    assert (await js.stream_info("S1")).state.messages == 60  # (max_msgs_per_subject kept 20 per subject)
    await js.delete_msg("S1", 58)
    await js.purge_stream("S1", subject="s1.1")
    info = await js.stream_info("S1")
    assert info.cluster.leader == r.cs.server.name and not info.cluster.replicas
    want = state(r)
    assert want[0] == 60 - 1 - 20

    await js.update_stream(StreamConfig(name="S1", subjects=["s1.>"], num_replicas=3, duplicate_window=60.0,
                                        max_msgs_per_subject=20))
    await until(lambda: len(held(servers, "S1")) == 3 and all(
        len(x.group.peers) == 3 and sorted(x.group.peers) == sorted(x.sa.group.peers) for x in held(servers, "S1")),
        timeout=15, what="three members")
    await until(lambda: all(state(x) == want for x in held(servers, "S1")), timeout=10, what="caught up")
    assert not any(x.log.solo for x in held(servers, "S1"))
    for i in range(60, 65):
        await js.publish("s1.2", b"%d" % i)
    await until(lambda: len({state(x) for x in held(servers, "S1")}) == 1
                and state(held(servers, "S1")[0])[2] == 65, what="replicated")

    await js.update_stream(StreamConfig(name="S1", subjects=["s1.>"], num_replicas=1, duplicate_window=60.0,
                                        max_msgs_per_subject=20))
    await until(lambda: len(held(servers, "S1")) == 1 and held(servers, "S1")[0].log.solo, timeout=15,
                what="solo again")
    ack = await js.publish("s1.0", b"last", headers={"Nats-Msg-Id": "id-last"})
    assert ack.seq == 66
    dup = await js.publish("s1.0", b"last", headers={"Nats-Msg-Id": "id-last"})
    assert dup.duplicate and dup.seq == 66


async def test_r1_restarted_then_scaled_up(cl):
    """After a restart the store holds what ran solo and the WAL does not: a new member still gets it all."""
    from rillet.app.compose import build_server
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="S2", subjects=["s2.>"], num_replicas=1))
    for i in range(20):
        await js.publish("s2.a", b"%d" % i)
    (r,) = held(servers, "S2")
    k = next(i for i, s in enumerate(servers) if s is r.cs.server)
    other = servers[(k + 1) % 3]
    nc2 = await nats.connect(other.client_url)
    try:
        js2 = nc2.jetstream()
        old = servers[k]
        await old.shutdown()
        new = build_server(old.opts, old.log)
        await new.start()
        servers[k] = new  # (run_cluster stops the servers of this list)
        await until(lambda: new.jetstream is not None and new.jetstream.cluster is not None
                    and new.jetstream.cluster.streams is not None and reps([new], "S2")[0] is not None
                    and reps([new], "S2")[0].log.solo, timeout=15, what="the replica back, solo")
        r = reps([new], "S2")[0]
        assert state(r)[2] == 20
        for _ in range(100):  # (until the restarted server's routes carry the stream's interest again)
            try:
                ack = await js2.publish("s2.a", b"20", timeout=0.5)
                break
            except (nats.js.errors.NoStreamResponseError, nats.errors.TimeoutError):
                await asyncio.sleep(0.1)
        assert ack.seq == 21
        for i in range(21, 30):
            ack = await js2.publish("s2.a", b"%d" % i)
        assert ack.seq == 30
        await js2.update_stream(StreamConfig(name="S2", subjects=["s2.>"], num_replicas=3))
        await until(lambda: len(held(servers, "S2")) == 3 and all(
            len(x.group.peers) == 3 for x in held(servers, "S2")), timeout=15, what="three members")
        await until(lambda: all(state(x) == (30, 1, 30, ()) for x in held(servers, "S2")), timeout=10,
                    what="caught up")
        ack = await js2.publish("s2.a", b"30")
        assert ack.seq == 31
        await until(lambda: all(state(x)[2] == 31 for x in held(servers, "S2")), what="replicated")
    finally:
        await nc2.close()
        await asyncio.sleep(0)
