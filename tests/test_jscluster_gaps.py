"""Replicated JetStream on an in-process 3-server Rillet cluster (rillet.app.embed.run_cluster(3,
jetstream=True)), driven with nats-py: STREAM.RESTORE (and SNAPSHOT) in a cluster, memory-storage groups
keeping their RAFT log in memory, stream info's consumer_count counting every consumer of the stream,
stream and consumer leader stepdowns always moving leadership to another peer (and ``placement``), fast
batch publishing across a stream leader change."""
from __future__ import annotations

import asyncio
import json
import os

import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from jscluster_support import until, cl, reps, stream_leader  # noqa: F401 (the fixture)

T = "io.nats.jetstream.api.v1."


def consumer_leader(servers, stream: str, name: str):
    ls = [r.creps[name] for r in reps(servers, stream) if r is not None and name in r.creps and r.creps[name].leader]
    return ls[0] if len(ls) == 1 else None


def store_states(servers, name: str):
    return [(st.msgs, st.first_seq, st.last_seq, st.num_deleted)
            for st in (r.stream.store.state() for r in reps(servers, name) if r is not None)]


async def api(nc, subject: str, body: dict | None = None, timeout: float = 3) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=timeout)
    return json.loads(r.data)


def files_under(root: str) -> list[str]:
    out = []
    for d, _dirs, files in os.walk(root):
        out.extend(os.path.relpath(os.path.join(d, f), root) for f in files)
        out.extend(os.path.relpath(os.path.join(d, x), root) + "/" for x in _dirs)
    return out


# ---- 2: memory-storage groups keep their RAFT log in memory ----------------------------------------------

async def test_memory_stream_and_consumer_groups_write_nothing(cl):
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="MEM", subjects=["mem.>"], storage="memory", num_replicas=3))
    await js.add_stream(StreamConfig(name="FIL", subjects=["fil.>"], num_replicas=3))
    await js.add_consumer("MEM", ConsumerConfig(durable_name="D", ack_policy="explicit"))
    for i in range(20):
        await js.publish(f"mem.{i}", b"x")
        await js.publish(f"fil.{i}", b"x")
    sub = await js.pull_subscribe_bind("D", "MEM")
    for m in await sub.fetch(5, timeout=3):
        await m.ack_sync()
    await until(lambda: all(s == (20, 1, 20, 0) for s in store_states(servers, "MEM")) and
                len(store_states(servers, "MEM")) == 3, what="memory replicas")
    mem_groups = set()
    for r in reps(servers, "MEM"):
        mem_groups.add(r.group.name)
        assert r.group.memory and r.group.wal.policy == "memory"
        for cr in r.creps.values():
            mem_groups.add(cr.group.name)
            assert cr.group.memory
    fil_group = reps(servers, "FIL")[0].group.name
    assert len(mem_groups) == 2 and all("-R3M-" in g for g in mem_groups)
    for s in servers:
        names = files_under(s.jetstream.store_dir)
        assert not [n for n in names if any(g in n for g in mem_groups)], names
        assert not [n for n in names if "/streams/MEM" in n], names
        # (the file stream's group and the meta group are on disk)
        assert any(n.startswith(f"_raft/{fil_group}/seg-") for n in names), names
        assert any(n.startswith("_raft/_meta_/") for n in names), names
    # the groups still elect and replicate: a stream stepdown keeps every message
    old = stream_leader(servers, "MEM")
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.MEM")
    assert r.get("success") is True, r
    await until(lambda: stream_leader(servers, "MEM") not in (None, old), what="a new memory stream leader")
    ack = await js.publish("mem.x", b"y")
    assert ack.seq == 21
    for _ in range(100):  # (the consumer leader may be on a stream follower that applies the message a bit later)
        ci = await js.consumer_info("MEM", "D")
        if ci.num_pending == 16:
            break
        await asyncio.sleep(0.02)
    assert ci.num_ack_pending == 0 and ci.num_pending == 16 and ci.ack_floor.stream_seq == 5


async def test_memory_replica_restarted_gets_everything_from_the_leader(cl):
    """A restarted member of a memory group has an empty log and store (nothing on disk): it gets the log
    (or a snapshot and the messages) from the leader, as nats-server's in-memory WAL."""
    from rillet.app.compose import build_server
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="MR", subjects=["mr.>"], storage="memory", num_replicas=3))
    await js.add_consumer("MR", ConsumerConfig(durable_name="D", ack_policy="explicit"))
    for i in range(30):
        await js.publish("mr.a", f"{i}".encode())
    await until(lambda: store_states(servers, "MR") == [(30, 1, 30, 0)] * 3, what="replicas")
    lead = stream_leader(servers, "MR")
    meta = next(s for s in servers if s.jetstream.cluster.is_leader())
    ks = [i for i, s in enumerate(servers) if i != 0 and s is not lead.cs.server]  # (nc is on server 0)
    k = min(ks, key=lambda i: servers[i] is meta)  # (rather not the meta leader: no meta election to wait for)
    old = servers[k]
    await old.shutdown()
    for i in range(30, 40):
        await js.publish("mr.a", f"{i}".encode())
    new = build_server(old.opts, old.log)
    await new.start()
    servers[k] = new  # (run_cluster stops the servers of this list)
    await until(lambda: new.jetstream is not None and new.jetstream.cluster is not None and
                new.jetstream.cluster.streams is not None and reps([new], "MR")[0] is not None,
                timeout=10, what="the replica back")
    await until(lambda: store_states([new], "MR") == [(40, 1, 40, 0)], timeout=10, what="the restarted replica")
    r = reps([new], "MR")[0]
    names = files_under(new.jetstream.store_dir)
    assert not [n for n in names if r.group.name in n or "/streams/MR" in n], names
    ack = await js.publish("mr.a", b"40")
    assert ack.seq == 41
    await until(lambda: store_states(servers, "MR") == [(41, 1, 41, 0)] * 3, what="every replica")


# ---- 3: consumer_count from whichever server answers ------------------------------------------------------

async def test_consumer_count_counts_consumers_led_elsewhere(cl):
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="CC", subjects=["cc.>"], num_replicas=3))
    names = [f"C{i}" for i in range(6)]
    for n in names:  # R1 consumers: each on one of the stream's servers
        await js.add_consumer("CC", ConsumerConfig(durable_name=n, num_replicas=1, ack_policy="explicit"))
    placed = {n: [r for r in reps(servers, "CC") if n in r.creps] for n in names}
    assert all(len(v) == 1 for v in placed.values())
    lead = stream_leader(servers, "CC")
    assert lead is not None and len(lead.creps) < len(names)  # (else the test shows nothing: 3^-5 odds)
    si = await js.stream_info("CC")
    assert si.state.consumer_count == 6
    lst = await js.streams_info()
    assert [s.state.consumer_count for s in lst if s.config.name == "CC"] == [6]
    # a stream leader change: the new leader counts them all too
    old = lead
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.CC")
    assert r.get("success") is True, r
    await until(lambda: stream_leader(servers, "CC") not in (None, old), what="a new stream leader")
    si = await js.stream_info("CC")
    assert si.state.consumer_count == 6
    await js.delete_consumer("CC", "C0")
    si = await js.stream_info("CC")
    assert si.state.consumer_count == 5


# ---- 4: stepdowns move leadership to another peer ---------------------------------------------------------

async def test_stream_and_consumer_stepdown_always_moves(cl):
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="SD", subjects=["sd.>"], num_replicas=3))
    await js.add_consumer("SD", ConsumerConfig(durable_name="SC", ack_policy="explicit"))
    await js.publish("sd.1", b"1")
    by_name = {s.name: s for s in servers}
    for _ in range(4):
        old = stream_leader(servers, "SD")
        assert old is not None
        r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SD")
        assert r == {"type": T + "stream_leader_stepdown_response", "success": True}, r
        await until(lambda: stream_leader(servers, "SD") not in (None, old), timeout=4,
                    what="the stream leader moved")
        oldc = consumer_leader(servers, "SD", "SC")
        assert oldc is not None
        r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.SD.SC")
        assert r == {"type": T + "consumer_leader_stepdown_response", "success": True}, r
        await until(lambda: consumer_leader(servers, "SD", "SC") not in (None, oldc), timeout=4,
                    what="the consumer leader moved")
    # placement (nats-server 2.11+): a preferred server
    cur = stream_leader(servers, "SD").cs.server.name
    other = next(n for n in by_name if n != cur)
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SD", {"placement": {"preferred": other}})
    assert r.get("success") is True, r
    await until(lambda: (stream_leader(servers, "SD") or object()).__class__ is not object and
                stream_leader(servers, "SD").cs.server.name == other, timeout=4, what="the preferred leader")
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SD", {"placement": {"preferred": other}})
    assert r["error"] == {"code": 400, "err_code": 10005,
                          "description": f'preferred server "{other}" is already leader'}, r
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SD", {"placement": {"preferred": "nope"}})
    assert r["error"]["description"] == 'preferred server "nope" not known', r
    r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.SD.SC", {"placement": {"cluster": "elsewhere"}})
    assert r["error"] == {"code": 400, "err_code": 10005, "description": "no replacement peer connected"}, r
    cur = consumer_leader(servers, "SD", "SC").cs.server.name
    other = next(n for n in by_name if n != cur)
    r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.SD.SC", {"placement": {"preferred": other}})
    assert r.get("success") is True, r
    await until(lambda: (consumer_leader(servers, "SD", "SC") is not None and
                         consumer_leader(servers, "SD", "SC").cs.server.name == other), timeout=4,
                what="the preferred consumer leader")


async def test_stepdown_of_a_single_peer_group_is_refused(cl):
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="R1", subjects=["r1.>"], num_replicas=1))
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.R1")
    assert r["error"] == {"code": 400, "err_code": 10005, "description": "no replacement peer connected"}, r


# ---- 1: STREAM.SNAPSHOT and STREAM.RESTORE in a cluster ---------------------------------------------------

async def snapshot(nc, name: str) -> tuple[dict, list[bytes]]:
    inbox = nc.new_inbox()
    chunks: list[bytes] = []
    done = asyncio.get_running_loop().create_future()

    async def on_chunk(msg):
        if msg.reply:
            chunks.append(msg.data)
            await nc.publish(msg.reply, b"")
        elif not done.done():
            done.set_result(msg.headers)
    sub = await nc.subscribe(inbox, cb=on_chunk)
    resp = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", {"deliver_subject": inbox, "chunk_size": 1024})
    assert resp["type"] == T + "stream_snapshot_response", resp
    await asyncio.wait_for(done, 5)
    await sub.unsubscribe()
    return resp, chunks


async def restore(nc, name: str, config: dict, state: dict, chunks: list[bytes]) -> dict:
    resp = await api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": config, "state": state}, timeout=5)
    assert resp.get("type") == T + "stream_restore_response" and resp.get("deliver_subject"), resp
    subj = resp["deliver_subject"]
    for c in chunks:
        await nc.request(subj, c, timeout=2)
    return json.loads((await nc.request(subj, b"", timeout=5)).data)


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_snapshot_and_restore_replicated_stream(cl, storage):
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="SNAP", subjects=["snap.>"], num_replicas=3, storage=storage))
    for i in range(300):
        await js.publish(f"snap.{i % 7}", f"m{i}".encode() * 20, headers={"Nats-Msg-Id": f"id{i}"})
    await js.delete_msg("SNAP", 10)
    # a consumer with acknowledged messages: made again by the restore, from just after its ack floor
    psub = await js.pull_subscribe("snap.>", durable="D")
    for m in await psub.fetch(5, timeout=5):
        await m.ack_sync()
    await until(lambda: all(r is not None and "D" in r.stream.consumers and r.stream.consumers["D"].asflr == 5
                            for r in reps(servers, "SNAP")), what="the acks on every replica")
    resp, chunks = await snapshot(nc, "SNAP")
    assert resp["state"]["messages"] == 299 and len(chunks) > 3
    config, state = resp["config"], resp["state"]
    await js.delete_stream("SNAP")
    await until(lambda: not any(reps(servers, "SNAP")), what="the stream gone")
    fin = await restore(nc, "SNAP", config, state, chunks)
    assert fin["type"] == T + "stream_create_response", fin
    assert fin["state"]["messages"] == 299 and fin["state"]["last_seq"] == 300, fin
    assert fin["config"]["num_replicas"] == 3 and fin["config"]["storage"] == storage
    # every replica holds the restored messages
    await until(lambda: store_states(servers, "SNAP") == [(299, 1, 300, 1)] * 3, what="replicas restored")
    si = await js.stream_info("SNAP")
    assert si.state.messages == 299 and si.state.num_deleted == 1 and len(si.cluster.replicas) == 2
    assert (await js.get_msg("SNAP", 300)).data == b"m299" * 20

    last: list = [None]

    async def consumer_back() -> bool:
        try:
            ci = await js.consumer_info("SNAP", "D", timeout=2)
        except Exception as e:  # (not made again yet: not found, or no leader yet)
            last[0] = e
            return False
        last[0] = (ci.ack_floor, ci.num_pending, ci.num_ack_pending)
        return ci.ack_floor.stream_seq == 5 and ci.num_pending == 294 and ci.num_ack_pending == 0
    end = asyncio.get_running_loop().time() + 60
    while not await consumer_back():
        assert asyncio.get_running_loop().time() < end, f"the restored stream's consumer D: {last[0]!r}"
        await asyncio.sleep(0.2)
    for r in reps(servers, "SNAP"):
        m = r.stream.store.load_msg(150)
        assert m.data == b"m149" * 20 and m.subject == "snap.2"
    # dedup ids came back with the messages; the stream takes publishes after a leader change
    ack = await js.publish("snap.x", b"dup", headers={"Nats-Msg-Id": "id299"})
    assert ack.duplicate and ack.seq == 300
    old = stream_leader(servers, "SNAP")
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SNAP")
    assert r.get("success") is True, r
    await until(lambda: stream_leader(servers, "SNAP") not in (None, old), what="a new leader")
    ack = await js.publish("snap.x", b"new")
    assert ack.seq == 301
    await until(lambda: store_states(servers, "SNAP") == [(300, 1, 301, 1)] * 3, what="replicas after restore")
    # restoring over an existing stream is refused by the meta leader
    r = await api(nc, "$JS.API.STREAM.RESTORE.SNAP", {"config": config})
    assert r["error"] == {"code": 400, "err_code": 10130,
                          "description": "stream name already in use, cannot restore"}, r


async def test_restore_r1_elsewhere_and_stalled_restore(cl):
    servers, nc, js = cl
    await js.add_stream(StreamConfig(name="ONE", subjects=["one.>"], num_replicas=1))
    for i in range(20):
        await js.publish("one.x", f"{i}".encode())
    resp, chunks = await snapshot(nc, "ONE")
    config = resp["config"]
    await js.delete_stream("ONE")
    await until(lambda: not any(reps(servers, "ONE")), what="the stream gone")
    # as an R3 memory stream this time: the configured replicas and storage count (a file stream's archive)
    config["num_replicas"] = 3
    config["storage"] = "memory"
    config["name"] = "TWO"
    config["subjects"] = ["two.>"]
    fin = await restore(nc, "TWO", config, resp["state"], chunks)
    assert fin.get("state", {}).get("messages") == 20, fin
    await until(lambda: store_states(servers, "TWO") == [(20, 1, 20, 0)] * 3, what="R3 replicas")
    # a restore whose chunks never come is given up: the stream is removed again
    from rillet.jetstream import snapshot as SN
    old, SN.RESTORE_IDLE = SN.RESTORE_IDLE, 0.3
    try:
        r = await api(nc, "$JS.API.STREAM.RESTORE.GONE", {"config": {"name": "GONE", "subjects": ["gone.>"],
                                                                     "num_replicas": 3}})
        assert r.get("deliver_subject"), r
        await until(lambda: any(reps(servers, "GONE")), what="the restoring stream")
        await until(lambda: not any(reps(servers, "GONE")), timeout=5, what="the stalled restore removed")
    finally:
        SN.RESTORE_IDLE = old
    names = await api(nc, "$JS.API.STREAM.NAMES")
    assert sorted(names["streams"]) == ["TWO"], names


# ---- 5: fast batch publishing across a stream leader change -----------------------------------------------

def fast_batches(servers, name: str) -> list[int]:
    """How many fast batches each replica knows: the leader's live batches, a follower's records."""
    out = []
    for r in reps(servers, name):
        if r is None:
            continue
        out.append(len(r.stream.fast_batches) if r.leader else len(r.fast_records))
    return out


async def test_fast_batch_carries_on_across_a_leader_change(cl):
    """nats-server's TestJetStreamFastBatchPublishFlowControlOnLeaderChange: every replica knows the batch;
    the new leader sends a flow ack with the last stored batch sequence and the batch goes on to its commit;
    then no replica keeps it."""
    servers, nc, js = cl
    await api(nc, "$JS.API.STREAM.CREATE.FB", {"name": "FB", "subjects": ["fb"], "num_replicas": 3,
                                               "allow_batched": True})
    inbox = nc.new_inbox()
    q: asyncio.Queue = asyncio.Queue()

    async def on_msg(m):
        q.put_nowait(json.loads(m.data))
    sub = await nc.subscribe(inbox + ".>", cb=on_msg)

    def reply(seq: int, op: int, bid: str = "uuid", gap: str = "fail") -> str:
        return f"{inbox}.{bid}.2.{gap}.{seq}.{op}.$FI"

    for seq in range(1, 4):
        await nc.publish("fb", f"m{seq}".encode(), reply=reply(seq, 0 if seq == 1 else 1))
    assert await asyncio.wait_for(q.get(), 2) == {"type": "ack", "seq": 0, "msgs": 2}
    assert await asyncio.wait_for(q.get(), 2) == {"type": "ack", "seq": 2, "msgs": 2}
    await until(lambda: store_states(servers, "FB") == [(3, 1, 3, 0)] * 3, what="3 messages everywhere")
    await until(lambda: fast_batches(servers, "FB") == [1, 1, 1], what="every replica knows the batch")
    old = stream_leader(servers, "FB")
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.FB")
    assert r.get("success") is True, r
    # the new leader tells the publisher where the batch stands
    assert await asyncio.wait_for(q.get(), 3) == {"type": "ack", "seq": 3, "msgs": 2}
    assert stream_leader(servers, "FB") not in (None, old)
    assert fast_batches(servers, "FB") == [1, 1, 1]
    for seq in (4, 5):
        await nc.publish("fb", f"m{seq}".encode(), reply=reply(seq, 1))
    assert await asyncio.wait_for(q.get(), 2) == {"type": "ack", "seq": 5, "msgs": 2}
    await nc.publish("fb", b"m6", reply=reply(6, 2))
    assert await asyncio.wait_for(q.get(), 2) == {"stream": "FB", "seq": 6, "batch": "uuid", "count": 6}
    await until(lambda: fast_batches(servers, "FB") == [0, 0, 0], what="no replica keeps the batch")
    await until(lambda: store_states(servers, "FB") == [(6, 1, 6, 0)] * 3, what="6 messages everywhere")

    # a message lost in the change (sent while no server takes the subject) is a gap: in "fail" mode the
    # batch ends there and its PubAck counts what was stored before, nothing after it is stored
    for seq in range(1, 3):
        await nc.publish("fb", b"x", reply=reply(seq, 0 if seq == 1 else 1, bid="b2"))
    assert await asyncio.wait_for(q.get(), 2) == {"type": "ack", "seq": 0, "msgs": 2}
    assert await asyncio.wait_for(q.get(), 2) == {"type": "ack", "seq": 2, "msgs": 2}
    old = stream_leader(servers, "FB")
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.FB")
    assert r.get("success") is True, r
    assert await asyncio.wait_for(q.get(), 3) == {"type": "ack", "seq": 2, "msgs": 2}
    await nc.publish("fb", b"x", reply=reply(4, 1, bid="b2"))  # (3 never came)
    assert await asyncio.wait_for(q.get(), 2) == {"type": "gap", "last_seq": 3, "seq": 4}
    assert await asyncio.wait_for(q.get(), 2) == {"stream": "FB", "seq": 8, "batch": "b2", "count": 2}
    await nc.publish("fb", b"x", reply=reply(5, 2, bid="b2"))  # after its end: an unknown batch
    r = await asyncio.wait_for(q.get(), 2)
    assert r["error"]["err_code"] == 10208 and r["seq"] == 0, r
    await until(lambda: store_states(servers, "FB") == [(8, 1, 8, 0)] * 3, what="8 messages everywhere")
    # (the followers' records of a batch that ended without a commit entry age out, as nats-server's timers)
    lead = stream_leader(servers, "FB")
    assert not lead.stream.fast_batches
    await asyncio.sleep(0.1)
    assert q.empty(), q.get_nowait()
    await sub.unsubscribe()
