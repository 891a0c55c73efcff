"""A stream whose log commits only when told (``DeferredLog``, the shape of a RAFT leader waiting for a
quorum): replies come after commit, the leader's checks see what is still in flight, retention removals are
proposed rather than applied, and losing leadership fails what was in flight.
"""
from __future__ import annotations

import asyncio
import json

import nats
import pytest

from rillet.config.options import JetStreamOptions
from rillet.jetstream.log import DeferredLog, Entry
from rillet.server import Options
from rillet.app.embed import run_server


@pytest.fixture
async def env(tmp_path):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        yield srv, nc
        await nc.close()


async def api(nc, subject: str, body: dict | None = None) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)
    return json.loads(r.data)


async def deferred_stream(srv, nc, cfg: dict):
    r = await api(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
    assert "error" not in r, r
    jsa = next(j for j in srv.jetstream.accounts.values() if cfg["name"] in j.streams)
    st = jsa.streams[cfg["name"]]
    log = DeferredLog(st.apply)
    log.on_leader_change = st.leader_changed
    st.log = log
    return st, log


async def until(cond, timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def publish(nc, subject: str, data: bytes = b"x", headers: dict | None = None) -> asyncio.Future:
    return asyncio.ensure_future(nc.request(subject, data, headers=headers, timeout=2))


async def test_puback_only_after_commit(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "D", "subjects": ["d.>"]})
    f = publish(nc, "d.x")
    await until(lambda: len(log.queue) == 1)
    await asyncio.sleep(0.05)
    assert not f.done() and st.store.state().msgs == 0
    assert log.flush() == 1
    assert json.loads((await f).data) == {"stream": "D", "seq": 1}
    assert st.store.state().msgs == 1


async def test_same_msg_id_in_flight_is_stored_once(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "D", "subjects": ["d.>"]})
    f1 = publish(nc, "d.x", b"1", {"Nats-Msg-Id": "m"})
    await until(lambda: len(log.queue) == 1)
    f2 = publish(nc, "d.x", b"2", {"Nats-Msg-Id": "m"})
    r2 = json.loads((await f2).data)  # answered at once: a duplicate of the one in flight
    assert r2 == {"stream": "D", "seq": 1, "duplicate": True}
    assert len(log.queue) == 1 and not f1.done()
    log.flush()
    assert json.loads((await f1).data) == {"stream": "D", "seq": 1}
    assert st.store.state().msgs == 1
    # and after commit the dedup table has it
    r3 = json.loads((await nc.request("d.x", b"3", headers={"Nats-Msg-Id": "m"}, timeout=2)).data)
    assert r3.get("duplicate") is True and r3["seq"] == 1


async def test_expectations_checked_against_proposed_state(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "D", "subjects": ["d.>"]})
    f1 = publish(nc, "d.x", b"1", {"Nats-Msg-Id": "a"})
    await until(lambda: len(log.queue) == 1)
    f2 = publish(nc, "d.x", b"2", {"Nats-Expected-Last-Sequence": "1", "Nats-Expected-Last-Msg-Id": "a"})
    await until(lambda: len(log.queue) == 2)
    bad = json.loads((await nc.request("d.x", b"3", headers={"Nats-Expected-Last-Sequence": "0"},
                                       timeout=2)).data)
    assert bad["error"]["err_code"] == 10071 and "wrong last sequence: 2" in bad["error"]["description"], bad
    bad = json.loads((await nc.request("d.x", b"3", headers={"Nats-Expected-Last-Subject-Sequence": "1"},
                                       timeout=2)).data)
    assert "wrong last sequence: 2" in bad["error"]["description"], bad
    f3 = publish(nc, "d.y", b"y", {"Nats-Expected-Last-Subject-Sequence": "0"})
    await until(lambda: len(log.queue) == 3)
    f4 = publish(nc, "d.z", b"z", {"Nats-Expected-Last-Subject-Sequence": "3",
                                   "Nats-Expected-Last-Subject-Sequence-Subject": "d.*"})
    await until(lambda: len(log.queue) == 4)
    assert st.store.state().msgs == 0
    log.flush()
    assert [json.loads((await f).data)["seq"] for f in (f1, f2, f3, f4)] == [1, 2, 3, 4]
    assert st.store.state().msgs == 4


async def test_discard_new_limits_count_in_flight(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "D", "subjects": ["d.>"], "discard": "new", "max_msgs": 2,
                                              "max_msgs_per_subject": 1, "discard_new_per_subject": True})
    f1 = publish(nc, "d.a")
    await until(lambda: len(log.queue) == 1)
    r = json.loads((await nc.request("d.a", b"again", timeout=2)).data)
    assert r["error"]["description"] == "maximum messages per subject exceeded", r
    f2 = publish(nc, "d.b")
    await until(lambda: len(log.queue) == 2)
    r = json.loads((await nc.request("d.c", b"third", timeout=2)).data)
    assert r["error"]["description"] == "maximum messages exceeded", r
    log.flush()
    assert [json.loads((await f).data)["seq"] for f in (f1, f2)] == [1, 2]
    assert st.store.state().msgs == 2


async def test_purge_and_delete_answered_after_commit(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "D", "subjects": ["d.>"]})
    fs = [publish(nc, "d.x", b"%d" % i) for i in range(3)]
    await until(lambda: len(log.queue) == 3)
    log.flush()
    await asyncio.gather(*fs)
    fd = asyncio.ensure_future(api(nc, "$JS.API.STREAM.MSG.DELETE.D", {"seq": 2}))
    await until(lambda: len(log.queue) == 1)
    await asyncio.sleep(0.05)
    assert not fd.done() and st.store.state().msgs == 3
    assert log.queue[0][0].op == Entry.DELETE
    log.flush()
    assert (await fd)["success"] is True
    fp = asyncio.ensure_future(api(nc, "$JS.API.STREAM.PURGE.D", {}))
    await until(lambda: len(log.queue) == 1)
    await asyncio.sleep(0.05)
    assert not fp.done() and st.store.state().msgs == 2
    log.flush()
    assert (await fp)["purged"] == 2


async def test_workqueue_removal_is_proposed(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"})
    f = publish(nc, "wq.x")
    await until(lambda: len(log.queue) == 1)
    log.flush()
    await f
    js = nc.jetstream(timeout=2)
    sub = await js.pull_subscribe("wq.x", durable="w")
    (m,) = await sub.fetch(1, timeout=2)
    await m.ack_sync()
    # the ack asked the stream's log to remove the message: nothing removed until that commits
    await until(lambda: len(log.queue) == 1)
    assert log.queue[0][0].op == Entry.DELETE and st.store.state().msgs == 1
    log.flush()
    assert st.store.state().msgs == 0


async def test_interest_removal_is_proposed_after_the_message_commits(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "IN", "subjects": ["in.>"], "retention": "interest"})
    f = publish(nc, "in.x")
    await until(lambda: len(log.queue) == 1)
    assert log.flush(1) == 1  # the message; its completion proposes the removal (nobody is interested)
    assert json.loads((await f).data)["seq"] == 1
    assert st.store.state().msgs == 1 and [e.op for e, _ in log.queue] == [Entry.DELETE]
    log.flush()
    assert st.store.state().msgs == 0


async def test_lost_leadership_leaves_in_flight_unanswered(env):
    srv, nc = env
    st, log = await deferred_stream(srv, nc, {"name": "D", "subjects": ["d.>"]})
    f1 = asyncio.ensure_future(nc.request("d.x", b"1", headers={"Nats-Msg-Id": "a"}, timeout=0.5))
    await until(lambda: len(log.queue) == 1)
    log.step_down()
    # the entry may still commit under the next leader: its outcome is unknown, so the publisher gets no
    # answer (an error here would be false if it committed: the fault harness saw exactly that) and retries
    with pytest.raises(nats.errors.TimeoutError):
        await f1
    assert not st._inflight and not st._pids and st.store.state().msgs == 0
    # a new term on this node: the same publish goes through, at sequence 1
    log.is_leader = True
    f2 = publish(nc, "d.x", b"1", {"Nats-Msg-Id": "a"})
    await until(lambda: len(log.queue) == 1)
    log.flush()
    assert json.loads((await f2).data) == {"stream": "D", "seq": 1}


def test_log_completions_order_nesting_and_leadership():
    """The log contract itself: apply in order, each completion right after its apply (before the next),
    proposals from completions queued behind, errors to the completion, NotLeader on a lost term."""
    from rillet.jetstream.log import SingleNodeLog

    seen: list = []

    def apply(e: Entry):
        seen.append(("apply", e.args[0]))
        if e.args[0] == "bad":
            raise ValueError("refused")
        return e.args[0].upper()

    def done(e: Entry, res, err):
        seen.append(("done", e.args[0], res, type(err).__name__ if err else None))
        if e.args[0] == "a":
            log.propose(Entry(Entry.MSG, ("nested",)), done)

    log = DeferredLog(apply)
    for x in ("a", "bad", "b"):
        log.propose(Entry(Entry.MSG, (x,)), done)
    assert seen == [] and log.index == 3
    assert log.flush() == 4
    assert seen == [("apply", "a"), ("done", "a", "A", None), ("apply", "bad"), ("done", "bad", None, "ValueError"),
                    ("apply", "b"), ("done", "b", "B", None), ("apply", "nested"), ("done", "nested", "NESTED", None)]
    changes: list = []
    log.on_leader_change = changes.append
    seen.clear()
    log.propose(Entry(Entry.MSG, ("c",)), done)
    log.step_down()
    assert seen == [("done", "c", None, "LeadershipLost")] and changes == [False]
    seen.clear()
    log.propose(Entry(Entry.MSG, ("d",)), done)  # not the leader: refused at once
    assert seen == [("done", "d", None, "NotLeader")] and not log.queue

    seen.clear()
    one = SingleNodeLog(apply)
    one.propose(Entry(Entry.MSG, ("e",)), done)
    assert seen == [("apply", "e"), ("done", "e", "E", None)] and one.is_leader
    with pytest.raises(ValueError):
        one.propose(Entry(Entry.MSG, ("bad",)))  # no completion: the error goes to the proposer


async def test_consumer_deliveries_numbered_while_in_flight(env):
    """A consumer whose log commits later: deliveries go out at once with consecutive consumer sequences,
    the replicated state follows when the entries are applied, and acks apply after them in log order."""
    srv, nc = env
    js = nc.jetstream(timeout=2)
    r = await api(nc, "$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"]})
    assert "error" not in r, r
    for i in range(3):
        await js.publish("c.x", b"%d" % i)
    r = await api(nc, "$JS.API.CONSUMER.CREATE.C.P", {"stream_name": "C", "config": {"durable_name": "P",
                                                                                    "ack_policy": "explicit"}})
    assert "error" not in r, r
    jsa = next(j for j in srv.jetstream.accounts.values() if "C" in j.streams)
    c = jsa.streams["C"].consumers["P"]
    log = DeferredLog(c.apply_entry)
    c.clog = log
    sub = await js.pull_subscribe_bind("P", "C")
    ms = await sub.fetch(3, timeout=2)
    assert [m.metadata.sequence.consumer for m in ms] == [1, 2, 3]
    assert [m.metadata.sequence.stream for m in ms] == [1, 2, 3]
    assert c.dseq == 1 and not c.pending  # nothing applied yet
    await ms[1].ack_sync()
    # the three went out in one run: one C_DELIVERED entry for stream seqs 1-3 as deliveries 1, 2, 3
    assert [e.op for e, _ in log.queue] == [Entry.C_DELIVERED, Entry.C_ACK]
    assert log.queue[0][0].args[:3] == ([1, 2, 3], 1, 1)
    log.flush()
    assert c.dseq == 4 and sorted(c.pending) == [1, 3] and (c.adflr, c.asflr) == (0, 0)
    await ms[0].ack_sync()
    log.flush()
    assert sorted(c.pending) == [3] and (c.adflr, c.asflr) == (2, 2)
