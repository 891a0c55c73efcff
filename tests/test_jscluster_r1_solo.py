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


# ---- R1 consumers (rillet/jetstream/cluster/consumers.py ``ConsumerReplica.solo_check``) ------------------

def creps(servers, stream, name):
    return [r.creps[name] for r in reps(servers, stream) if r is not None and name in r.creps]


def cstate(cr):
    c = cr.c
    return (c.dseq, c.adflr, c.asflr, tuple(sorted((s, p[0]) for s, p in c.pending.items())),
            tuple(sorted(c.rdc.items())))


def stored(cr):
    """The consumer state in the stream store (a solo consumer's), as (delivered, ack floor, pending, redelivered)."""
    store = cr.rep.stream.store
    if cr.name not in store.consumer_names():
        return None
    st = store.consumer_store(cr.name).state()
    if st is None:
        return None
    return (st.delivered.consumer_seq + 1, st.ack_floor.consumer_seq, st.ack_floor.stream_seq,
            tuple(sorted((int(s), int(p[0])) for s, p in (st.pending or {}).items())),
            tuple(sorted((int(s), int(n) + 1) for s, n in (st.redelivered or {}).items())))


async def _pull_some(js, stream, durable, n, ack=(), sync_ack=()):
    """Fetch ``n`` messages; ack those whose stream seq is in ``ack`` (AckSync for ``sync_ack``): their seqs."""
    sub = await js.pull_subscribe_bind(durable, stream)
    try:
        msgs = await sub.fetch(n, timeout=5)
    finally:
        await sub.unsubscribe()
    seqs = []
    for m in msgs:
        seqs.append(m.metadata.sequence.stream)
        if m.metadata.sequence.stream in sync_ack:
            await m.ack_sync()
        elif m.metadata.sequence.stream in ack:
            await m.ack()
    return seqs, msgs


async def test_r1_consumer_solo_acks_redelivery_scaled_up_and_down(cl):
    from nats.js.api import AckPolicy, ConsumerConfig
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="C1", subjects=["c1.>"], num_replicas=1))
    for i in range(30):
        await js.publish("c1.x", b"%d" % i)
    await js.add_consumer("C1", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=1.0))
    await until(lambda: len(creps(servers, "C1", "D")) == 1 and creps(servers, "C1", "D")[0].log.solo,
                what="the consumer solo")
    (cr,) = creps(servers, "C1", "D")
    assert cr.persist is not None
    idx = cr.group.node.last_index()
    seqs, _ = await _pull_some(js, "C1", "D", 10, ack=range(1, 6))
    assert seqs == list(range(1, 11))
    await until(lambda: cstate(cr) == (11, 5, 5, tuple((s, s) for s in range(6, 11)), ()), what="acks applied")
    # nothing of it went through the group's log; the state is the store's consumer state, as on one server
    # (the 10 deliveries: one C_DELIVERED for the run, as on one server; the 5 acks: one entry each)
    assert cr.group.node.last_index() == idx and cr.log.solo_applied >= 6
    await until(lambda: stored(cr) == cstate(cr), what="state persisted")
    info = await js.consumer_info("C1", "D")
    assert info.cluster.leader == cr.cs.server.name and not info.cluster.replicas
    assert (info.num_ack_pending, info.ack_floor.stream_seq, info.delivered.stream_seq) == (5, 5, 10)

    await asyncio.sleep(1.1)  # (ack wait: 6-10 are due again)
    seqs, msgs = await _pull_some(js, "C1", "D", 5, sync_ack=(6, 7))  # AckSync answered solo too
    assert seqs == [6, 7, 8, 9, 10] and all(m.metadata.num_delivered == 2 for m in msgs)
    await until(lambda: cstate(cr) == (16, 7, 7, ((8, 8), (9, 9), (10, 10)), ((8, 2), (9, 2), (10, 2))),
                what="redelivered")
    await until(lambda: stored(cr) == cstate(cr), what="state persisted")
    want = cstate(cr)
    # (8-10 stay pending through what follows)
    await js.add_consumer("C1", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=60.0))

    await js.update_stream(StreamConfig(name="C1", subjects=["c1.>"], num_replicas=3))  # (the consumer follows)
    await until(lambda: len(creps(servers, "C1", "D")) == 3 and all(
        sorted(x.group.peers) == sorted(x.ca.group.peers) and len(x.group.peers) == 3
        for x in creps(servers, "C1", "D")), timeout=15, what="three consumer members")
    await until(lambda: all(cstate(x) == want for x in creps(servers, "C1", "D")), timeout=10,
                what="members caught up")
    assert not any(x.log.solo or x.persist is not None or stored(x) for x in creps(servers, "C1", "D"))
    (ld,) = [x for x in creps(servers, "C1", "D") if x.leader]
    seqs, _ = await _pull_some(js, "C1", "D", 3, ack=(11, 12))
    assert seqs == [11, 12, 13]
    await until(lambda: len({cstate(x) for x in creps(servers, "C1", "D")}) == 1
                and cstate(ld)[:4] == (19, 7, 7, ((8, 8), (9, 9), (10, 10), (13, 18))), what="replicated")

    await js.update_stream(StreamConfig(name="C1", subjects=["c1.>"], num_replicas=1))
    await until(lambda: len(creps(servers, "C1", "D")) == 1 and creps(servers, "C1", "D")[0].log.solo,
                timeout=15, what="solo again")
    (cr,) = creps(servers, "C1", "D")
    assert cr.persist is not None and stored(cr) == cstate(cr)
    before = cstate(cr)
    seqs, _ = await _pull_some(js, "C1", "D", 2, sync_ack=(14, 15))
    assert seqs == [14, 15]
    await until(lambda: cstate(cr)[0] == before[0] + 2 and stored(cr) == cstate(cr), what="persisted solo")
    info = await js.consumer_info("C1", "D")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == \
        (15, 7, 4, 15)


async def test_r1_consumer_solo_under_load_from_its_start(cl):
    """A consumer pulled from the moment it exists (its first entries go through the group while it settles)
    goes solo as soon as they have applied, not only when a retry finds nothing in flight (a steady load always
    has some: the benchmark's R1-in-a-cluster pull ran through the group's log and WAL throughout)."""
    from nats.js.api import AckPolicy, ConsumerConfig
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="C5", subjects=["c5.>"], num_replicas=1))
    for i in range(600):
        await js.publish("c5.x", b"%d" % i)
    psub = await js.pull_subscribe("c5.>", durable="L", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
    got = 0
    while got < 600:
        msgs = await psub.fetch(20, timeout=5)
        for m in msgs:
            await m.ack()
        got += len(msgs)
    (cr,) = creps(servers, "C5", "L")
    assert cr.log.solo and cr.persist is not None
    # only the first few fetches' entries went through the group's log (each fetch: 20 deliveries, 20 acks; solo,
    # a fetch's deliveries are one C_DELIVERED for the run when the client is on the consumer's server)
    assert cr.group.node.last_index() < 300 and cr.log.solo_applied > 600
    await until(lambda: cstate(cr)[1] == 600 and stored(cr) == cstate(cr), what="acks applied and persisted")


async def test_r1_consumer_of_r3_stream_solo(cl):
    """num_replicas 1 on an R3 stream: solo on its one server (a stream follower or the leader)."""
    from nats.js.api import AckPolicy, ConsumerConfig
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="C3", subjects=["c3.>"], num_replicas=3))
    for i in range(10):
        await js.publish("c3.x", b"%d" % i)
    await js.add_consumer("C3", ConsumerConfig(durable_name="E", ack_policy=AckPolicy.EXPLICIT, num_replicas=1))
    await until(lambda: len(creps(servers, "C3", "E")) == 1 and creps(servers, "C3", "E")[0].log.solo,
                what="the consumer solo")
    (cr,) = creps(servers, "C3", "E")
    seqs, _ = await _pull_some(js, "C3", "E", 10, sync_ack=range(1, 11))
    assert seqs == list(range(1, 11))
    await until(lambda: stored(cr) == (11, 10, 10, (), ()), what="persisted")
    for i in range(3):
        await js.publish("c3.x", b"more")
    seqs, _ = await _pull_some(js, "C3", "E", 3)
    assert seqs == [11, 12, 13]
    info = await js.consumer_info("C3", "E")
    assert info.cluster.leader == cr.cs.server.name and not info.cluster.replicas
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (3, 10)
    store = cr.rep.stream.store
    assert "E" in store.consumer_names()
    await js.delete_consumer("C3", "E")  # (its stored state goes with it)
    await until(lambda: not creps(servers, "C3", "E") and "E" not in store.consumer_names(), what="deleted")


async def test_r1_memory_consumer_solo(cl):
    """An ordered consumer (ephemeral push, memory state, R1): solo with nothing persisted, as on one server."""
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="C4", subjects=["c4.>"], num_replicas=1))
    for i in range(50):
        await js.publish("c4.x", b"%d" % i)
    sub = await js.subscribe("c4.>", ordered_consumer=True)
    got = [int((await sub.next_msg(timeout=5)).data) for _ in range(50)]
    assert got == list(range(50))
    (rep,) = held(servers, "C4")
    (cr,) = rep.creps.values()
    # (a group that could not go solo at once, its leader still being settled, checks again on a timer: on a
    # loaded machine the first messages may have gone through its log)
    deadline = asyncio.get_running_loop().time() + 10
    while not cr.log.solo and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert cr.group.memory and cr.log.solo and cr.persist is None
    before = cr.log.solo_applied
    for i in range(50, 60):
        await js.publish("c4.x", b"%d" % i)
    assert [int((await sub.next_msg(timeout=5)).data) for _ in range(10)] == list(range(50, 60))
    assert cr.log.solo and cr.log.solo_applied >= before + 10
    assert not rep.stream.store.consumer_names()
    await sub.unsubscribe()


async def test_r1_consumer_restarted_then_scaled_up(cl):
    """After a restart the consumer's state is the stored one (the WAL lacks what ran solo): floors, pending and
    redelivery counts kept; scaled up, the new members get it."""
    from nats.js.api import AckPolicy, ConsumerConfig
    from rillet.app.compose import build_server
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="C2", subjects=["c2.>"], num_replicas=1))
    for i in range(20):
        await js.publish("c2.x", b"%d" % i)
    await js.add_consumer("C2", ConsumerConfig(durable_name="R", ack_policy=AckPolicy.EXPLICIT, ack_wait=0.5))
    await until(lambda: len(creps(servers, "C2", "R")) == 1 and creps(servers, "C2", "R")[0].log.solo,
                what="the consumer solo")
    (cr,) = creps(servers, "C2", "R")
    await _pull_some(js, "C2", "R", 8, ack=(1, 2, 3, 5))
    await asyncio.sleep(0.6)
    seqs, _ = await _pull_some(js, "C2", "R", 2)  # (4 and 6 again)
    assert seqs == [4, 6]
    await until(lambda: stored(cr) == cstate(cr) and cstate(cr)[0] == 11, what="persisted")
    want = cstate(cr)
    assert want[1:3] == (3, 3) and dict(want[4]) == {4: 2, 6: 2}
    k = next(i for i, s in enumerate(servers) if s is cr.cs.server)
    other = servers[(k + 1) % 3]
    nc2 = await nats.connect(other.client_url)
    try:
        js2 = nc2.jetstream()
        old = servers[k]
        await old.shutdown()
        new = build_server(old.opts, old.log)
        await new.start()
        servers[k] = new
        await until(lambda: new.jetstream is not None and new.jetstream.cluster is not None
                    and new.jetstream.cluster.streams is not None and len(creps([new], "C2", "R")) == 1
                    and creps([new], "C2", "R")[0].log.solo, timeout=15, what="the consumer back, solo")
        cr = creps([new], "C2", "R")[0]
        got = cstate(cr)
        assert got[:3] == want[:3] and dict(got[3]).keys() == dict(want[3]).keys() and got[4] == want[4]
        info = None
        for _ in range(100):  # (until the restarted server's routes carry the consumer's interest again)
            try:
                info = await js2.consumer_info("C2", "R", timeout=0.5)
                break
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                await asyncio.sleep(0.1)
        assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending) == (8, 3, 4)
        await asyncio.sleep(0.6)
        for _ in range(50):
            try:
                seqs, msgs = await _pull_some(js2, "C2", "R", 5, ack=(4, 6, 7, 8, 9))
                break
            except nats.errors.TimeoutError:
                await asyncio.sleep(0.1)
        # the pending ones again (in the order their ack wait ran out: 4, 6 a third time), then on from 9
        assert seqs[-1] == 9 and {m.metadata.sequence.stream: m.metadata.num_delivered for m in msgs} == \
            {4: 3, 6: 3, 7: 2, 8: 2, 9: 1}
        await until(lambda: stored(cr) == cstate(cr) and cstate(cr)[2] == 9, what="acked")
        want = cstate(cr)
        await js2.update_stream(StreamConfig(name="C2", subjects=["c2.>"], num_replicas=3))
        await until(lambda: len(creps(servers, "C2", "R")) == 3 and all(
            len(x.group.peers) == 3 for x in creps(servers, "C2", "R")), timeout=15, what="three members")
        await until(lambda: all(cstate(x) == want for x in creps(servers, "C2", "R")), timeout=10,
                    what="caught up")
        assert not any(stored(x) for x in creps(servers, "C2", "R"))
        seqs, _ = await _pull_some(js2, "C2", "R", 2, sync_ack=(10, 11))
        assert seqs == [10, 11]
        await until(lambda: all(cstate(x)[2] == 11 for x in creps(servers, "C2", "R")), what="replicated")
    finally:
        await nc2.close()
        await asyncio.sleep(0)


async def test_r1_solo_write_behind_on_only_while_solo(cl, monkeypatch):
    """Solo, the store is all there is, as on one server: a burst's plain appends are gathered and written
    together (Stream.set_write_behind); with members, the stream's own write-behind is off (the entries of one
    Ready are gathered by the replica and written before the Ready ends: test_jscluster_apply_batch)."""
    import rillet.jetstream.store.filestore as fsmod
    servers, nc, js = cl
    gathered = []
    real = fsmod.FileStore.flush_writes

    def counting(self):
        if self._wb_off >= 0:
            gathered.append(len(self._wb))
        return real(self)

    monkeypatch.setattr(fsmod.FileStore, "flush_writes", counting)
    await js.add_stream(StreamConfig(name="WB1", subjects=["wb1"], num_replicas=1))
    await js.publish("wb1", b"first")
    (r,) = held(servers, "WB1")
    assert r.log.solo and r.stream._wb_store
    acks = await asyncio.gather(*[js.publish("wb1", b"m%d" % i) for i in range(300)])
    assert sorted(a.seq for a in acks) == list(range(2, 302))
    assert gathered and len(gathered) < 300
    assert (await js.get_msg("WB1", 200)).data == b"m198"

    await js.update_stream(StreamConfig(name="WB1", subjects=["wb1"], num_replicas=3))
    await until(lambda: len(held(servers, "WB1")) == 3 and all(
        len(x.group.peers) == 3 for x in held(servers, "WB1")), timeout=15, what="three members")
    assert not any(x.stream._wb_store for x in held(servers, "WB1"))
    gathered.clear()
    acks = await asyncio.gather(*[js.publish("wb1", b"r%d" % i) for i in range(100)])
    assert sorted(a.seq for a in acks) == list(range(302, 402))
    assert not any(x._gathering is not None for x in held(servers, "WB1"))  # (nothing left gathered after a Ready)
    await until(lambda: {state(x) for x in held(servers, "WB1")} == {(401, 1, 401, ())}, what="replicated")

    await js.update_stream(StreamConfig(name="WB1", subjects=["wb1"], num_replicas=1))
    await until(lambda: len(held(servers, "WB1")) == 1 and held(servers, "WB1")[0].log.solo, timeout=15,
                what="solo again")
    assert held(servers, "WB1")[0].stream._wb_store
    acks = await asyncio.gather(*[js.publish("wb1", b"s%d" % i) for i in range(100)])
    assert sorted(a.seq for a in acks) == list(range(402, 502))
    assert (await js.stream_info("WB1")).state.messages == 501


async def test_r1_solo_failed_gathered_write_fails_its_acks(cl, monkeypatch):
    """A solo R1 stream's failed write (gathered or not) takes its messages back and answers their PubAcks with
    the store's error, as on one server; the next messages reuse the sequences, and the group stays solo."""
    import errno

    import rillet.jetstream.store.filestore as fsmod
    from nats.js.errors import APIError
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="DISK1", subjects=["disk1"], num_replicas=1))
    await js.publish("disk1", b"before")
    (r,) = held(servers, "DISK1")
    assert r.log.solo and r.stream._wb_store

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    taken_back = []
    real_rollback = fsmod.FileStore._wb_rollback

    def rollback(self, e):
        taken_back.append(self._wb_off)
        return real_rollback(self, e)
    monkeypatch.setattr(fsmod, "_write_all", no_space)
    monkeypatch.setattr(fsmod.FileStore, "_wb_rollback", rollback)
    res = await asyncio.gather(*[js.publish("disk1", b"lost%d" % i) for i in range(20)], return_exceptions=True)
    assert taken_back  # (gathered records were taken back, not only single writes refused)
    assert all(isinstance(x, APIError) and (x.err_code, x.description) == (10023, "insufficient resources")
               for x in res), res
    monkeypatch.undo()
    assert (await js.stream_info("DISK1")).state.last_seq == 1
    acks = await asyncio.gather(*[js.publish("disk1", b"after%d" % i) for i in range(5)])
    assert sorted(a.seq for a in acks) == [2, 3, 4, 5, 6]
    assert (await js.get_msg("DISK1", 6)).data.startswith(b"after") and r.log.solo
