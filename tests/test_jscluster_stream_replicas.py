"""Replicated streams (rillet/jetstream/cluster/streams.py) on three in-process servers, with the stream
assignments handed to ``ClusteredStreams`` directly (as the meta layer does): R3 stream, PubAck after
quorum, STREAM.INFO from the leader with the cluster block, leader loss without losing acked messages,
a follower that missed a compaction catching up from the leader in chunks, a replicated pull consumer
whose leader changes."""
from __future__ import annotations

import asyncio
import io
import json
import os
import time

import nats
import pytest

from rillet.config.options import JetStreamOptions
from rillet.jetstream.cluster import streams as CS
from rillet.jetstream.cluster.assignments import RaftGroup, StreamAssignment, ConsumerAssignment
from rillet.jetstream.cluster.peers import peer_id
from rillet.jetstream.cluster.clustered import ClusteredStreams
from rillet.jetstream.manager import JetStream
from rillet.app.embed import run_cluster
from rillet.server.logging import Logger
from jscluster_support import until


class ReplicasOnly:
    """Stands for the meta layer's routing (a seams.ApiRoute): a request for a stream this server holds is
    its replicas' call (ClusteredStreams.api_gate); any other gets no answer here."""

    def __init__(self, cs: ClusteredStreams) -> None:
        self.cs = cs

    def answer_here(self, router, key, args, reply, hdr, body) -> bool:
        return self.cs.api_gate(router, key, args, reply, hdr, body) is True


class Env:
    def __init__(self, servers, tmp) -> None:
        self.servers = servers
        self.tmp = tmp
        self.cs: list[ClusteredStreams] = []
        self.peers = [peer_id(s.name) for s in servers]

    async def start(self) -> None:
        for i, s in enumerate(self.servers):
            s.opts.jetstream = JetStreamOptions(enabled=True, store_dir=os.path.join(self.tmp, f"s{i}"))
            js = JetStream(s)
            s.jetstream = js
            await js.start()
            cs = ClusteredStreams(s, js)
            self.cs.append(cs)
            js.api_route = ReplicasOnly(cs)

    def assign(self, cfg: dict, storage: str = "file", group: str = "S-R3F-test0001") -> StreamAssignment:
        sa = StreamAssignment(config=cfg, group=RaftGroup(group, list(self.peers), storage),
                              sync="$JSC.SYNC.test0001", created=time.time_ns())
        for c in self.cs:
            c.stream_assigned(sa)
        return sa

    def reps(self, name: str):
        return [c.replica("$G", name) for c in self.cs]

    def leader(self, name: str):
        ls = [r for r in self.reps(name) if r is not None and r.leader]
        return ls[0] if len(ls) == 1 else None

    async def stop(self) -> None:
        for c in self.cs:
            await c.stop()
        for s in self.servers:
            await s.jetstream.shutdown()


@pytest.fixture
async def env(tmp_path):
    out = io.StringIO()
    async with run_cluster(3, log=Logger(out=out)) as servers:
        e = Env(servers, str(tmp_path))
        await e.start()
        try:
            yield e
        finally:
            await e.stop()
    errs = [ln for ln in out.getvalue().splitlines() if "[ERR]" in ln]
    assert not errs, errs[:5]


async def api(nc, subject: str, body: dict | None = None) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)
    return json.loads(r.data)


def states(reps):
    out = []
    for r in reps:
        st = r.stream.store.state()
        out.append((st.msgs, st.first_seq, st.last_seq, tuple(st.deleted)))
    return out


async def test_r3_stream_publish_info_failover(env):
    env.assign({"name": "S", "subjects": ["s.>"], "num_replicas": 3})
    await until(lambda: env.leader("S") is not None, what="a stream leader")
    lead = env.leader("S")
    li = env.reps("S").index(lead)
    # publish through a server that is not the leader: the leader takes it, acks after quorum
    other = env.servers[(li + 1) % 3]
    nc = await nats.connect(other.client_url)
    js = nc.jetstream()
    try:
        for i in range(20):
            ack = await js.publish(f"s.{i}", b"m%d" % i)
            assert ack.seq == i + 1 and ack.stream == "S"
        # acked means committed on a quorum: at least two replicas' logs hold all 20 now (a follower applies them
        # once it learns the commit index: from the next append, or a commit-only one within a few ms)
        last = lead.group.node.commit
        assert lead.stream.store.state().msgs == 20
        assert sum(1 for r in env.reps("S") if r.group.node.last_index() >= last) >= 2
        await until(lambda: all(r.stream.store.state().msgs == 20 for r in env.reps("S")), what="replicated")
        assert len(set(states(env.reps("S")))) == 1
        # one answer from the leader, with the cluster block
        info = await api(nc, "$JS.API.STREAM.INFO.S")
        assert info["state"]["messages"] == 20
        cl = info["cluster"]
        assert cl["leader"] == env.servers[li].name and cl["raft_group"] == "S-R3F-test0001"
        assert sorted(p["name"] for p in cl["replicas"]) == sorted(s.name for j, s in enumerate(env.servers)
                                                                   if j != li)
        inbox = nc.new_inbox()
        s2 = await nc.subscribe(inbox)
        await nc.publish("$JS.API.STREAM.INFO.S", b"", reply=inbox)
        await asyncio.sleep(0.3)
        assert s2.pending_msgs == 1
        # message get and delete through the leader, applied on every replica
        r = await api(nc, "$JS.API.STREAM.MSG.GET.S", {"seq": 3})
        assert r["message"]["seq"] == 3
        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.S", {"seq": 3})
        assert r["success"] is True
        await until(lambda: all(3 in r.stream.store.state().deleted for r in env.reps("S")), what="delete")

        # the leader goes away: another replica leads, nothing acked is lost, publishes go on
        await lead.stop()
        rest = [r for r in env.reps("S") if r is not lead]
        await until(lambda: sum(r.leader for r in rest) == 1, timeout=10, what="a new leader")
        for i in range(20, 30):
            ack = await js.publish(f"s.{i}", b"m%d" % i, timeout=5)
            assert ack.seq == i + 1
        await until(lambda: all(r.stream.store.state().last_seq == 30 for r in rest), what="30 on the rest")
        for r in rest:
            st = r.stream.store
            assert st.state().msgs == 29
            assert [st.load_msg(s).data for s in (1, 20, 21, 30)] == [b"m0", b"m19", b"m20", b"m29"]
        # stepdown through the API moves leadership again
        new = [r for r in rest if r.leader][0]
        r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.S")
        assert r.get("success") is True, r
        await until(lambda: any(x.leader for x in rest) and not new.leader, what="stepdown")
    finally:
        await nc.close()


async def test_follower_catches_up_after_compaction(env, monkeypatch):
    monkeypatch.setattr(CS, "SYNC_MSGS", 7)  # several chunks
    sa = env.assign({"name": "M", "subjects": ["m.>"], "num_replicas": 3, "storage": "memory"},
                    storage="memory", group="S-R3M-test0002")
    await until(lambda: env.leader("M") is not None, what="a stream leader")
    reps = env.reps("M")
    lead = env.leader("M")
    fi = next(i for i, r in enumerate(reps) if r is not lead)
    nc = await nats.connect(env.servers[reps.index(lead)].client_url)
    js = nc.jetstream()
    try:
        for i in range(5):
            await js.publish("m.a", b"x%d" % i)
        await until(lambda: reps[fi].stream.store.state().msgs == 5, what="follower has 5")
        await reps[fi].stop()  # the follower goes away (its memory store with it)
        env.cs[fi].replicas.pop(("$G", "M"))
        for i in range(5, 40):
            await js.publish("m.b" if i % 2 else "m.a", b"x%d" % i)
        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.M", {"seq": 12})
        assert r["success"]
        await until(lambda: all(r.group.applied == lead.group.applied for r in reps if r is not reps[fi]),
                    what="caught up")
        for r in reps:
            if r is not reps[fi]:
                r.group.compact()  # the log before this point is gone: a snapshot is all that is left
        env.cs[fi].stream_assigned(sa)  # back, with an empty memory store
        nrep = env.cs[fi].replica("$G", "M")
        await until(lambda: nrep.stream.store.state().last_seq == 40, timeout=10, what="catch-up")
        await js.publish("m.a", b"after")
        await until(lambda: len(set(states(env.reps("M")))) == 1
                    and nrep.stream.store.state().last_seq == 41, what="equal states")
        assert nrep.catchups == 1
        assert nrep.stream.store.load_msg(13).data == b"x12"
        assert 12 in nrep.stream.store.state().deleted
    finally:
        await nc.close()


async def test_r3_pull_consumer_survives_leader_change(env):
    """The consumer has its own group (C-R3F-...): its leader delivers from its local stream replica; acks
    reach every consumer replica; when the consumer leader goes, the next one redelivers only the unacked."""
    sa = env.assign({"name": "W", "subjects": ["w.>"], "num_replicas": 3}, group="S-R3F-test0003")
    await until(lambda: env.leader("W") is not None, what="a stream leader")
    ca = ConsumerAssignment(name="D", stream="W", config={"durable_name": "D", "ack_policy": "explicit",
                                                         "ack_wait": 500_000_000},
                            group=RaftGroup("C-R3F-test0003", list(env.peers)), created=time.time_ns())
    for c in env.cs:
        c.consumer_assigned(ca)

    def cleader():
        ls = [r for r in env.reps("W") if r is not None and r.creps["D"].leader]
        return ls[0] if len(ls) == 1 else None
    await until(lambda: cleader() is not None, what="a consumer leader")
    nc = await nats.connect(env.servers[0].client_url)
    js = nc.jetstream()
    try:
        for i in range(10):
            await js.publish("w.x", b"%d" % i)
        psub = await js.pull_subscribe("w.x", durable="D", stream="W")
        msgs = await psub.fetch(6, timeout=2)
        assert [m.data for m in msgs] == [b"%d" % i for i in range(6)]
        for m in msgs[:4]:
            await m.ack_sync()
        # the replicated state reached the followers
        await until(lambda: all(r.consumers["D"].asflr == 4 for r in env.reps("W")), what="ack floor replicated")
        clead = cleader()
        info = await api(nc, "$JS.API.CONSUMER.INFO.W.D")
        assert info["ack_floor"]["stream_seq"] == 4 and info["num_ack_pending"] == 2
        assert info["cluster"]["leader"] == env.servers[env.reps("W").index(clead)].name
        assert len(info["cluster"]["replicas"]) == 2
        await clead.stop()  # the consumer leader's server loses its replicas (stream and consumer)
        rest = [r for r in env.reps("W") if r is not clead]
        await until(lambda: sum(r.creps["D"].leader for r in rest) == 1, timeout=10, what="a new consumer leader")
        got = []
        deadline = time.monotonic() + 6
        while len(got) < 6 and time.monotonic() < deadline:
            try:
                ms = await psub.fetch(6 - len(got), timeout=1)
            except nats.errors.TimeoutError:
                continue
            for m in ms:
                got.append(int(m.data))
                await m.ack_sync()
        # 4 and 5 were delivered, not acked: redelivered (at least once); 6..9 delivered once; none of 0..3
        assert sorted(got) == [4, 5, 6, 7, 8, 9]
        new = [r for r in rest if r.creps["D"].leader][0]
        await until(lambda: new.consumers["D"].asflr == 10, what="all acked")
    finally:
        await nc.close()


async def test_file_follower_restart_replays_wal_and_catches_up(env):
    sa = env.assign({"name": "F", "subjects": ["f.>"], "num_replicas": 3, "max_msgs_per_subject": 3},
                    group="S-R3F-test0004")
    await until(lambda: env.leader("F") is not None, what="a stream leader")
    reps = env.reps("F")
    lead = env.leader("F")
    fi = next(i for i, r in enumerate(reps) if r is not lead)
    nc = await nats.connect(env.servers[reps.index(lead)].client_url)
    js = nc.jetstream()
    try:
        for i in range(10):
            await js.publish(f"f.{i % 4}", b"a%d" % i)
        r = await api(nc, "$JS.API.STREAM.PURGE.F", {"filter": "f.0"})
        assert r["success"] and r["purged"] == 3
        for i in range(10, 15):
            await js.publish(f"f.{i % 4}", b"a%d" % i)
        await until(lambda: reps[fi].stream.store.state().last_seq == 15, what="follower at 15")
        await reps[fi].stop()  # a follower stops (its file store and WAL stay)
        env.cs[fi].replicas.pop(("$G", "F"))
        for i in range(15, 25):
            await js.publish(f"f.{i % 4}", b"a%d" % i)
        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.F", {"seq": 24})
        assert r["success"]
        env.cs[fi].stream_assigned(sa)  # restarted: the WAL is replayed over the store it kept, then the rest
        nrep = env.cs[fi].replica("$G", "F")
        await until(lambda: nrep.stream.store.state().last_seq == 25, timeout=10, what="caught up")
        await until(lambda: len(set(states(env.reps("F")))) == 1, what="equal states")
        # the purge of f.0 was not applied again over messages stored after it
        st = nrep.stream.store
        assert st.load_last_msg("f.0").data == b"a24"
        assert st.subjects_totals("f.0") == {"f.0": 3}
        assert nrep.replay_skipped >= 15  # the replayed MSG entries (and the purge) were not applied twice
        assert nrep.log.decode_errors == 0 and nrep.group.apply_errors == 0
    finally:
        await nc.close()
