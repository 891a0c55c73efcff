"""JetStream features on replicated streams, driven with nats-py against an in-process 3-server Rillet
JetStream cluster (rillet.app.embed.run_cluster(3, jetstream=True)): dedup and expected-* headers
across a stream leader change, limits and discard policies equal on every replica, work-queue and
interest retention with stream and consumer leader changes, KV and object store on R3 buckets, an R3
mirror and a source, R1 consumers on R3 streams and memory storage, consumer stepdown moving only the
consumer's group, direct gets answered once by any replica, leaderless groups answering 503."""
from __future__ import annotations

import asyncio
import io
import json
import time

import nats
import pytest
from nats.js.api import ConsumerConfig, ObjectStoreConfig, StreamSource

from rillet.jetstream.cluster import clustered as CS
from rillet.app.embed import run_cluster
from rillet.server.logging import Logger
from jscluster_support import until, cl, reps, stream_leader  # noqa: F401 (the fixture)


def consumer_reps(servers, stream: str, name: str):
    return [r.creps[name] for r in reps(servers, stream) if r is not None and name in r.creps]


def consumer_leader(servers, stream: str, name: str):
    ls = [c for c in consumer_reps(servers, stream, name) if c.leader]
    return ls[0] if len(ls) == 1 else None


def store_states(servers, name: str):
    out = []
    for r in reps(servers, name):
        if r is None:
            continue
        st = r.stream.store.state()
        out.append((st.msgs, st.bytes, st.first_seq, st.last_seq))
    return out


async def api(nc, subject: str, body: dict | None = None, timeout: float = 3) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=timeout)
    return json.loads(r.data)


async def stepdown_stream(servers, nc, name: str) -> None:
    old = stream_leader(servers, name)
    r = await api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}")
    assert r.get("success") is True, r
    await until(lambda: stream_leader(servers, name) not in (None, old), what="a new stream leader")


async def test_dedup_and_expected_headers_across_leader_change(cl):
    servers, nc, js = cl
    await js.add_stream(name="D", subjects=["d.>"], num_replicas=3, duplicate_window=60)
    await until(lambda: stream_leader(servers, "D") is not None, what="leader")
    a = await js.publish("d.1", b"x", headers={"Nats-Msg-Id": "m1"})
    b = await js.publish("d.1", b"x", headers={"Nats-Msg-Id": "m1"})
    assert (a.seq, a.duplicate, b.seq, b.duplicate) == (1, None, 1, True)
    await js.publish("d.2", b"y", headers={"Nats-Msg-Id": "m2"})
    await until(lambda: len(set(store_states(servers, "D"))) == 1, what="replicated")
    await stepdown_stream(servers, nc, "D")
    # the dedup window is replicated state: the new leader knows m1 and m2
    c = await js.publish("d.1", b"x", headers={"Nats-Msg-Id": "m1"})
    assert (c.seq, c.duplicate) == (1, True)
    # expected last sequence / last subject sequence / last msg id, checked by the new leader
    with pytest.raises(nats.js.errors.BadRequestError) as e:
        await js.publish("d.3", b"z", headers={"Nats-Expected-Last-Sequence": "1"})
    assert e.value.err_code == 10071
    ok = await js.publish("d.3", b"z", headers={"Nats-Expected-Last-Sequence": "2"})
    assert ok.seq == 3
    with pytest.raises(nats.js.errors.BadRequestError) as e:
        await js.publish("d.1", b"z", headers={"Nats-Expected-Last-Subject-Sequence": "2"})
    assert e.value.err_code == 10071
    ok = await js.publish("d.1", b"z", headers={"Nats-Expected-Last-Subject-Sequence": "1"})
    assert ok.seq == 4
    await js.publish("d.4", b"w", headers={"Nats-Msg-Id": "m4"})
    with pytest.raises(nats.js.errors.BadRequestError) as e:
        await js.publish("d.4", b"w", headers={"Nats-Expected-Last-Msg-Id": "nope"})
    assert e.value.err_code == 10070
    ok = await js.publish("d.4", b"w", headers={"Nats-Expected-Last-Msg-Id": "m4"})
    assert ok.seq == 6
    await until(lambda: len(set(store_states(servers, "D"))) == 1, what="replicated")


async def test_limits_and_discard_policies_equal_on_every_replica(cl):
    servers, nc, js = cl
    await js.add_stream(name="L", subjects=["l.>"], num_replicas=3, max_msgs=5, max_msgs_per_subject=2)
    for i in range(10):
        await js.publish(f"l.{i % 3}", b"%d" % i)
    await until(lambda: len(set(store_states(servers, "L"))) == 1, what="replicated")
    st = reps(servers, "L")[0].stream.store.state()
    assert st.msgs == 5 and st.last_seq == 10
    # discard new with max_bytes: refused once full, the same on every replica
    await js.add_stream(name="N", subjects=["n.>"], num_replicas=3, max_bytes=200, discard="new")
    n = 0
    with pytest.raises(nats.js.errors.APIError) as e:
        for _ in range(50):
            await js.publish("n.a", b"v" * 40)
            n += 1
    assert e.value.err_code == 10077 and 0 < n < 50  # (maximum bytes exceeded, as nats-server)
    await until(lambda: len(set(store_states(servers, "N"))) == 1, what="replicated")
    # max_age: expiry proposed by the leader, applied everywhere
    await js.add_stream(name="A", subjects=["a.>"], num_replicas=3, max_age=0.4)
    for i in range(3):
        await js.publish("a.x", b"%d" % i)
    await until(lambda: all(s[0] == 0 for s in store_states(servers, "A")) and len(store_states(servers, "A")) == 3,
                timeout=5, what="expired everywhere")
    assert {s[3] for s in store_states(servers, "A")} == {3}


async def test_workqueue_retention_under_stream_and_consumer_leader_changes(cl):
    servers, nc, js = cl
    await js.add_stream(name="WQ", subjects=["wq.>"], num_replicas=3, retention="workqueue")
    for i in range(20):
        await js.publish("wq.a", b"%d" % i)
    psub = await js.pull_subscribe("wq.a", durable="W", stream="WQ")
    await until(lambda: consumer_leader(servers, "WQ", "W") is not None, what="consumer leader")
    got: list[int] = []

    async def take(n: int) -> None:
        deadline = time.monotonic() + 8
        want = len(got) + n
        while len(got) < want and time.monotonic() < deadline:
            try:
                ms = await psub.fetch(want - len(got), timeout=1)
            except nats.errors.TimeoutError:
                continue
            for m in ms:
                got.append(int(m.data))
                await m.ack_sync()
    await take(5)
    await until(lambda: all(s[0] == 15 for s in store_states(servers, "WQ")), what="5 removed everywhere")
    await stepdown_stream(servers, nc, "WQ")
    await take(5)
    await until(lambda: all(s[0] == 10 for s in store_states(servers, "WQ")), what="10 removed everywhere")
    old = consumer_leader(servers, "WQ", "W")
    sleader = stream_leader(servers, "WQ")
    r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.WQ.W")
    assert r.get("success") is True, r
    await until(lambda: consumer_leader(servers, "WQ", "W") not in (None, old), what="new consumer leader")
    assert stream_leader(servers, "WQ") is sleader  # only the consumer's group moved
    await take(10)
    assert sorted(got) == list(range(20))  # every message once, none lost
    await until(lambda: all(s[0] == 0 for s in store_states(servers, "WQ")), what="all removed everywhere")
    info = await js.consumer_info("WQ", "W")
    assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 20


async def test_interest_retention_two_consumers(cl):
    servers, nc, js = cl
    await js.add_stream(name="I", subjects=["i.>"], num_replicas=3, retention="interest")
    p1 = await js.pull_subscribe("i.a", durable="C1", stream="I")
    p2 = await js.pull_subscribe("i.a", durable="C2", stream="I")
    for i in range(6):
        await js.publish("i.a", b"%d" % i)
    for m in await p1.fetch(6, timeout=3):
        await m.ack_sync()
    await asyncio.sleep(0.2)
    assert all(s[0] == 6 for s in store_states(servers, "I"))  # C2 has not acked: kept
    ms = await p2.fetch(3, timeout=3)
    for m in ms:
        await m.ack_sync()
    await until(lambda: all(s[0] == 3 for s in store_states(servers, "I")), what="3 removed")
    await stepdown_stream(servers, nc, "I")
    for m in await p2.fetch(3, timeout=3):
        await m.ack_sync()
    await until(lambda: all(s[0] == 0 for s in store_states(servers, "I")), what="all removed")


async def test_kv_and_object_store_on_r3_buckets(cl):
    servers, nc, js = cl
    kv = await js.create_key_value(bucket="cfg", replicas=3, history=5)
    assert await kv.put("k", b"1") == 1
    assert (await kv.get("k")).value == b"1"
    assert await kv.update("k", b"2", last=1) == 2
    with pytest.raises(nats.js.errors.KeyWrongLastSequenceError):
        await kv.update("k", b"3", last=1)
    await kv.put("j", b"x")
    w = await kv.watchall()
    seen = []
    async for e in w:
        if e is None:
            break
        seen.append((e.key, e.value))
    assert seen == [("k", b"2"), ("j", b"x")]
    await kv.put("k", b"4")
    e = await asyncio.wait_for(w.updates(timeout=3), 4)
    assert (e.key, e.value) == ("k", b"4")
    await w.stop()
    hist = await kv.history("k")
    assert [h.value for h in hist] == [b"1", b"2", b"4"]
    await kv.delete("j")
    assert await kv.keys() == ["k"]
    # a leader change in between: the bucket goes on
    await stepdown_stream(servers, nc, "KV_cfg")
    assert (await kv.get("k")).revision == 4
    assert await kv.update("k", b"5", last=4) == 6
    obs = await js.create_object_store("files", config=ObjectStoreConfig(replicas=3))
    data = bytes(range(256)) * 1200  # ~300 KB: several chunks
    info = await obs.put("blob", data)
    assert info.chunks > 1
    res = await obs.get("blob")
    assert res.data == data


async def test_r3_mirror_and_source(cl):
    servers, nc, js = cl
    await js.add_stream(name="O", subjects=["o.>"], num_replicas=3)
    for i in range(10):
        await js.publish(f"o.{i}", b"%d" % i)
    await js.add_stream(name="MI", num_replicas=3, mirror=StreamSource(name="O"))
    await js.add_stream(name="SO", num_replicas=3, sources=[StreamSource(name="O", filter_subject="o.1")])
    await until(lambda: len(store_states(servers, "MI")) == 3 and all(s[0] == 10 for s in store_states(servers, "MI")),
                timeout=10, what="mirrored on every replica")
    await until(lambda: len(store_states(servers, "SO")) == 3 and all(s[0] == 1 for s in store_states(servers, "SO")),
                timeout=10, what="sourced on every replica")
    await js.publish("o.1", b"more")
    await until(lambda: all(s[0] == 11 for s in store_states(servers, "MI")), what="mirror follows")
    await until(lambda: all(s[0] == 2 for s in store_states(servers, "SO")), what="source follows")
    m = await js.get_msg("MI", 11)
    assert m.data == b"more" and m.subject == "o.1"


async def test_r1_consumer_memory_consumer_and_push_stepdown(cl):
    servers, nc, js = cl
    await js.add_stream(name="P", subjects=["p.>"], num_replicas=3)
    for i in range(10):
        await js.publish("p.x", b"%d" % i)
    await js.add_consumer("P", ConsumerConfig(durable_name="R1", ack_policy="explicit", num_replicas=1))
    await js.add_consumer("P", ConsumerConfig(durable_name="MEM", ack_policy="explicit", mem_storage=True))
    await until(lambda: len(consumer_reps(servers, "P", "R1")) == 1 and consumer_leader(servers, "P", "R1"),
                what="R1 consumer")
    assert len(consumer_reps(servers, "P", "MEM")) == 3
    info = await js.consumer_info("P", "R1")
    assert info.cluster.replicas in (None, []) and info.cluster.leader
    ps = await js.pull_subscribe("p.x", durable="R1", stream="P")
    assert len(await ps.fetch(10, timeout=3)) == 10
    # a push consumer: acked messages are not delivered again after a consumer leader change
    sub = await js.subscribe("p.x", durable="PU", stream="P", manual_ack=True,
                             config=ConsumerConfig(ack_wait=1.0))
    got = []
    for _ in range(5):
        m = await sub.next_msg(timeout=3)
        got.append(int(m.data))
        await m.ack_sync()
    await until(lambda: consumer_leader(servers, "P", "PU") is not None
                and all(c.c.asflr == 5 for c in consumer_reps(servers, "P", "PU")), what="acks replicated")
    old = consumer_leader(servers, "P", "PU")
    r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.P.PU")
    assert r.get("success") is True, r
    await until(lambda: consumer_leader(servers, "P", "PU") not in (None, old), what="new push leader")
    deadline = time.monotonic() + 6
    while len(got) < 10 and time.monotonic() < deadline:
        try:
            m = await sub.next_msg(timeout=1)
        except nats.errors.TimeoutError:
            continue
        got.append(int(m.data))
        await m.ack_sync()
    assert got[:5] == [0, 1, 2, 3, 4] and sorted(set(got[5:])) == [5, 6, 7, 8, 9]
    assert not set(got[5:]) & {0, 1, 2, 3, 4}  # nothing acked came again


async def test_r1_and_memory_r3_streams_direct_get_once(cl):
    servers, nc, js = cl
    await js.add_stream(name="ONE", subjects=["one"], num_replicas=1)
    await js.publish("one", b"1")
    assert sum(1 for r in reps(servers, "ONE") if r is not None) == 1
    await js.add_stream(name="MEMR3", subjects=["mem.>"], num_replicas=3, storage="memory", allow_direct=True)
    for i in range(5):
        await js.publish(f"mem.{i}", b"%d" % i)
    await until(lambda: len(set(store_states(servers, "MEMR3"))) == 1, what="replicated")
    # direct gets: any replica answers, one answer each
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    for i in range(10):
        await nc.publish("$JS.API.DIRECT.GET.MEMR3", json.dumps({"seq": 1 + i % 5}).encode(), reply=inbox)
    await asyncio.sleep(0.4)
    assert sub.pending_msgs == 10
    m = await js.get_msg("MEMR3", 3, direct=True)
    assert m.data == b"2"


async def test_leaderless_groups_answer_503(cl, monkeypatch):
    servers, nc, js = cl
    monkeypatch.setattr(CS, "LOST_QUORUM", 0.0)
    monkeypatch.setattr(CS, "ELECTION_GRACE", 0.0)
    await js.add_stream(name="Q", subjects=["q"], num_replicas=3)
    await js.publish("q", b"1")
    await js.add_consumer("Q", ConsumerConfig(durable_name="QC", ack_policy="explicit"))
    await until(lambda: consumer_leader(servers, "Q", "QC") is not None, what="consumer leader")
    # two of the three members of each group stop: the third has no leader
    rs = reps(servers, "Q")
    keep = rs[2]
    for r in rs[:2]:
        await r.group.stop()
        await r.creps["QC"].group.stop()
    await until(lambda: keep.group.leader is None and keep.creps["QC"].group.leader is None, timeout=8,
                what="leaderless")
    nc3 = await nats.connect(servers[2].client_url)
    try:
        r = await api(nc3, "$JS.API.STREAM.MSG.GET.Q", {"seq": 1})
        assert r["error"]["code"] == 503 and r["error"]["err_code"] == 10008
        r = await api(nc3, "$JS.API.CONSUMER.INFO.Q.QC")
        assert r["error"]["err_code"] == 10008
        r = await api(nc3, "$JS.API.STREAM.INFO.Q")  # a member answers with what it holds
        assert r["state"]["messages"] == 1 and r["cluster"].get("leader", "") == ""
    finally:
        await nc3.close()


async def test_r5_stream_and_consumer_on_five_servers():
    out = io.StringIO()
    async with run_cluster(5, jetstream=True, log=Logger(out=out)) as servers:
        nc = await nats.connect(servers[3].client_url)
        js = nc.jetstream()
        try:
            await js.add_stream(name="F", subjects=["f"], num_replicas=5)
            for i in range(20):
                await js.publish("f", b"%d" % i)
            await until(lambda: len(store_states(servers, "F")) == 5 and len(set(store_states(servers, "F"))) == 1,
                        what="on five replicas")
            info = await js.stream_info("F")
            assert len(info.cluster.replicas) == 4
            ps = await js.pull_subscribe("f", durable="C", stream="F")
            assert len(consumer_reps(servers, "F", "C")) == 5
            ms = await ps.fetch(20, timeout=3)
            for m in ms:
                await m.ack_sync()
            await until(lambda: all(c.c.asflr == 20 for c in consumer_reps(servers, "F", "C")), what="acks on five")
        finally:
            await nc.close()
    errs = [ln for ln in out.getvalue().splitlines() if "[ERR]" in ln and "connect to route" not in ln]
    assert not errs, errs[:5]


async def test_stepdowns_in_a_row_answered_by_the_leader_only(cl, monkeypatch):
    """A STREAM.LEADER.STEPDOWN sent while the previous one's leadership transfer completes is answered by the
    new leader (success), not with 503 10008 by a member caught between terms: a member is leaderless only
    after ELECTION_GRACE without a leader (before, every other step-down in a row could get the 503)."""
    servers, nc, js = cl
    monkeypatch.setattr(CS, "LOST_QUORUM", 0.0)  # (leaderless as soon as the grace allows, JetStream just up)
    await js.add_stream(name="SD", subjects=["sd"], num_replicas=3)
    stop = asyncio.Event()

    async def publish() -> None:
        while not stop.is_set():
            try:
                await js.publish("sd", b"x", timeout=2)
            except Exception:  # (a publish during a transfer may time out; not what is checked)
                pass
            await asyncio.sleep(0.005)

    task = asyncio.create_task(publish())
    answers = []
    try:
        for _ in range(8):
            await until(lambda: stream_leader(servers, "SD") is not None, what="a stream leader")
            r = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.SD", b"", timeout=5)
            answers.append(json.loads(r.data).get("success") or json.loads(r.data).get("error"))
            await asyncio.sleep(0.5)
    finally:
        stop.set()
        await task
    assert answers == [True] * 8, answers
