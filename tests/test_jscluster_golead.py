"""Rillet leading a nats-server RAFT group (rillet.jetstream.cluster.golead): the candidate and leader side.

Unit tests drive ``GoRaftPeer`` against followers built from the same sans-IO code; the live test makes a
Rillet member the meta leader of three Go servers: they elect it, report it as their meta leader, acknowledge
its heartbeats and a stream assignment it proposes (in Go's encoding) -- a Go server then creates and serves
that stream -- and it hands leadership back to a Go server.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import shutil
import time

import pytest

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import CANDIDATE, FOLLOWER, LEADER, GoRaftPeer
from rillet.jetstream.cluster.gometa import GoRaftFollower
from rillet.raft import gowire as gw

from test_jscluster_gometa import CAP, CORPUS, _member, _meta_views, _rillet_conf, _until, go_cluster  # noqa: F401
from helpers import serve_config

ME, A, B = "RiLLeT01", "GoServA1", "GoServB1"


def _peer() -> GoRaftPeer:
    p = GoRaftPeer("_meta_", ME)
    p.peers = {ME, A, B}
    return p


def _vr(out) -> gw.VoteRequest:
    return gw.VoteRequest.decode(out.payload)


def test_campaign_counts_votes_of_its_term_and_empty_ones_only_from_everyone():
    p = _peer()
    out = p.campaign()
    assert p.role == CANDIDATE and out[0].subject == "$NRG.V._meta_" and out[0].reply == p.vote_inbox
    vr = _vr(out[0])
    assert (vr.term, vr.candidate, vr.last_index) == (1, ME, 0)
    assert p.vote_response(gw.VoteResponse(0, A, True)) == []  # another term
    assert p.vote_response(gw.VoteResponse(1, A, True, empty=True)) == [] and p.role == CANDIDATE
    hb = p.vote_response(gw.VoteResponse(1, B, True, empty=True))  # every member voted: elected
    assert p.role == LEADER and p.leader == ME and p.terms_led == [1]
    ae = gw.AppendEntry.decode(hb[0].payload)
    assert hb[0].subject == "$NRG.AE._meta_" and hb[0].reply == p.resp_inbox and ae.leader == ME and not ae.entries
    # a quorum of non-empty votes is enough
    q = _peer()
    q.campaign()
    q.vote_response(gw.VoteResponse(1, A, True))
    assert q.role == LEADER
    # a higher term seen in a vote answer: back to follower
    r = _peer()
    r.campaign()
    assert r.vote_response(gw.VoteResponse(7, A, False)) == [] and r.role == FOLLOWER and r.term == 7


def test_leader_replicates_commits_its_own_term_and_catches_followers_up():
    leader = _peer()
    leader.campaign()
    leader.vote_response(gw.VoteResponse(1, A, True))
    f_a = GoRaftFollower("_meta_", A)
    f_b = GoRaftFollower("_meta_", B)
    ae_out = leader.propose([gw.Entry(0, b"\x00one"), gw.Entry(0, b"\x00two")])[0]
    ae = gw.AppendEntry.decode(ae_out.payload)
    out_a, _ = f_a.append("append", "", ae_out.reply, ae, 0.0)
    assert leader.commit == 0
    _o, done = leader.append_response(gw.AppendEntryResponse.decode(out_a[0].payload), "")
    assert [d.index for d in done] == [1, 1] and leader.commit == 1  # 2 of 3; one append entry, one index
    # the next heartbeat tells the followers the commit
    hb = gw.AppendEntry.decode(leader.heartbeat()[0].payload)
    _o, done_a = f_a.append("append", "", "r", hb, 0.1)
    assert [d.entry.data for d in done_a] == [b"\x00one", b"\x00two"]
    # B missed everything: its failing answer names a catch-up inbox, the leader sends it what it lacks
    out_b, _ = f_b.append("append", "", "r", hb, 0.1)
    fail = gw.AppendEntryResponse.decode(out_b[0].payload)
    assert not fail.success and out_b[0].reply.startswith("$NRG.CR.")
    catchup, _ = leader.append_response(fail, out_b[0].reply)
    assert [o.subject for o in catchup] == [out_b[0].reply]
    for o in catchup:
        m = gw.AppendEntry.decode(o.payload)
        assert m.lterm == leader.term
        assert m.commit <= m.pindex  # (as the entry's append carried it when new: 8cec726)
        f_b.append("catchup", o.subject, "", m, 0.2)
    assert f_b.pindex == 1 and f_b.commit == 0
    # the commit reaches it with the leader's next heartbeat, as from a Go leader
    f_b.append("append", "", "r", gw.AppendEntry.decode(leader.heartbeat()[0].payload), 0.3)
    assert f_b.pindex == 1 and f_b.commit == 1
    # a higher term in a response: the leader steps down
    leader.append_response(gw.AppendEntryResponse(9, 0, B, False), "")
    assert leader.role == FOLLOWER and leader.term == 9


def test_leader_sends_its_snapshot_when_the_entries_are_gone():
    corpus = CAP.from_json(json.loads(CORPUS.read_text()))
    snap = next(gw.Snapshot.decode(d) for g, f, d in corpus["snapshots"] if g == "_meta_")
    leader = _peer()
    # it became a member from a snapshot (as a caught-up follower does), then leads
    leader.catchup = None
    leader.base_index, leader.base_term = snap.last_index, snap.last_term
    leader.commit = leader.applied = snap.last_index
    leader.snapshot_data, leader.snapshot_peer_state = snap.data, snap.peer_state
    leader.term = snap.last_term
    leader.campaign()
    leader.vote_response(gw.VoteResponse(leader.term, A, True))
    leader.propose([gw.Entry(0, b"\x00x")])
    newcomer = GoRaftFollower("_meta_", B)
    out, _ = newcomer.append("append", "", "r", gw.AppendEntry.decode(leader.heartbeat()[0].payload), 0.0)
    catchup, _ = leader.append_response(gw.AppendEntryResponse.decode(out[0].payload), out[0].reply)
    first = gw.AppendEntry.decode(catchup[0].payload)
    assert [e.type for e in first.entries] == [gw.ENTRY_SNAPSHOT, gw.ENTRY_PEER_STATE]
    applied = []
    for o in catchup:
        applied += newcomer.append("catchup", o.subject, "", gw.AppendEntry.decode(o.payload), 0.1)[1]
    assert applied[0].snapshot and newcomer.pindex == snap.last_index + 1
    assert {a["stream"]["name"] for a in ge.decode_meta_snapshot(applied[0].entry.data)} >= {"ORDERS"}


def test_transfer_steps_down_with_a_leader_transfer_entry():
    p = _peer()
    p.campaign()
    p.vote_response(gw.VoteResponse(1, A, True))
    with pytest.raises(ValueError, match="not current"):
        p.transfer(A)  # (not heard from in this term)
    p.append_response(gw.AppendEntryResponse(1, 0, A, True), "")
    p.propose([gw.Entry(0, b"\x00e")])
    with pytest.raises(ValueError, match="not current"):
        p.transfer(A)  # (behind)
    p.match[A] = p.pindex
    out = p.transfer(A)
    ae = gw.AppendEntry.decode(out[0].payload)
    assert ae.entries == (gw.Entry(gw.ENTRY_LEADER_TRANSFER, A.encode()),) and p.role == FOLLOWER
    with pytest.raises(ValueError):
        p.propose([gw.Entry(0, b"\x00")])


# -- live ------------------------------------------------------------------------------------------------

def _assignment_like_go(corpus_doc: dict, name: str, subjects: list[str], peer: str) -> dict:
    """A stream assignment as the Go meta leader writes one (from a recorded one: client, config layout)."""
    doc = json.loads(json.dumps(corpus_doc))
    doc.pop("subject", None)
    doc.pop("reply", None)
    doc["created"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    doc["stream"].update(name=name, subjects=subjects, num_replicas=1)
    doc["group"] = {"name": gw.group_name("S", 1, "file"), "peers": [peer], "store": "file",
                    "cluster": doc["group"].get("cluster", "C1")}
    doc["sync"] = "$JSC.SYNC." + gw.random_token(8)
    return doc


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_go_servers_elect_a_rillet_meta_leader_and_apply_what_it_commits(go_cluster):  # noqa: F811
    import nats
    gc = go_cluster
    corpus = CAP.from_json(json.loads(CORPUS.read_text()))
    tmpl = next(ge.decode_entry(e.data).doc for s, r, d in corpus["messages"] if s == "$NRG.AE._meta_"
                for e in gw.AppendEntry.decode(d).entries
                if e.type == gw.ENTRY_NORMAL and e.data[0] == ge.OP_ASSIGN_STREAM)
    nc = await nats.connect(gc.url("g0"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)
            await _until(lambda: m.raft.commit > 0 and m.raft.leader, what="the member following")
            await asyncio.sleep(1.5)
            m.campaign()
            await _until(lambda: m.raft.role == LEADER, 60, what="the Go servers electing the Rillet member")

            async def all_see_r1() -> bool:
                views = await _meta_views(gc, "g0")
                return all((views.get(n) or {}).get("leader") == "r1" for n in gc.names)

            await CAP._until(all_see_r1, 60, what="every Go server reporting r1 as meta leader")
            # a stream assignment in Go's encoding, placed on g0, committed by the Go followers' acks
            doc = _assignment_like_go(tmpl, "FROM_RILLET", ["fr.>"], gw.peer_id("g0"))
            m.propose([gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_ASSIGN_STREAM, doc))])
            await _until(lambda: ("A", "FROM_RILLET") in m.state.streams, 60, what="the assignment committed")
            assert len([p for p, i in m.raft.match.items() if i >= m.raft.commit]) >= 2

            async def created() -> bool:
                r = await nc.request("$JS.API.STREAM.INFO.FROM_RILLET", b"", timeout=2)
                return json.loads(r.data).get("config", {}).get("name") == "FROM_RILLET"

            await CAP._until(created, 60, what="g0 creating the stream the Rillet leader assigned")
            # leadership handed back to a Go server, which then runs the JetStream API as usual
            await _until(lambda: m.raft.current(gw.peer_id("g1")), 60, what="g1 current")
            m.transfer(gw.peer_id("g1"))
            await _until(lambda: m.raft.leader == gw.peer_id("g1"), 60, what="g1 taking over")
            await CAP._until(lambda: CAP._js_ready(nc), 60, what="the Go meta leader answering")
            names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"", timeout=20)).data)
            assert "FROM_RILLET" in names["streams"]
            assert (await nc.jetstream().publish("fr.x", b"y")).seq == 1
            assert m.refused == 0
    finally:
        await nc.close()


def test_stream_assignment_layout_and_request_info():
    hdr = b'NATS/1.0\r\nNats-Request-Info: {"acc":"A","user":"a","jwt":"x"}\r\n\r\n'
    ci = __import__("rillet.jetstream.cluster.golead", fromlist=["request_info"]).request_info(hdr)
    assert ci == {"acc": "A", "user": "a", "jwt": "x"}
    from rillet.jetstream.cluster.golead import request_info, stream_assignment
    assert request_info(b"NATS/1.0\r\nOther: 1\r\n\r\n") is None
    doc = stream_assignment(ci, {"name": "S", "subjects": ["s"], "num_replicas": 3}, [A, B, ME], "C1",
                            "$JS.API.STREAM.CREATE.S", "_R_.x")
    assert list(doc) == ["client", "created", "stream", "group", "sync", "subject", "reply"]  # Go's order
    assert "jwt" not in doc["client"] and doc["group"]["name"].startswith("S-R3F-")
    assert doc["stream"]["retention"] == "limits" and doc["stream"]["num_replicas"] == 3
    raw = ge.encode_json_entry(ge.OP_ASSIGN_STREAM, doc)
    assert ge.decode_entry(raw).doc == doc


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_rillet_meta_leader_places_a_stream_a_go_client_creates(go_cluster):  # noqa: F811
    """With the Rillet member as meta leader, a Go server's client creates an R3 stream: the request reaches
    the Rillet leader, which places it on the Go servers; they create it and answer the client."""
    import nats
    from rillet.jetstream.cluster.golead import StreamCreateAsLeader
    gc = go_cluster
    nc = await nats.connect(gc.url("g1"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)
            await _until(lambda: m.raft.commit > 0 and m.raft.leader, what="the member following")
            await asyncio.sleep(1.5)
            api = StreamCreateAsLeader(m)
            m.campaign()
            await _until(lambda: m.raft.role == LEADER, 60, what="the Rillet member elected")

            async def all_see_r1() -> bool:
                views = await _meta_views(gc, "g0")
                return all((views.get(n) or {}).get("leader") == "r1" for n in gc.names)

            await CAP._until(all_see_r1, 60, what="every Go server reporting r1 as meta leader")
            js = nc.jetstream(timeout=30)
            info = await js.add_stream(name="LED", subjects=["led.>"], num_replicas=3)
            assert info.config.name == "LED" and api.proposed == 1
            sa = m.state.streams[("A", "LED")]
            assert sorted(sa["group"]["peers"]) == sorted(gw.peer_id(n) for n in gc.names)
            assert (await js.publish("led.1", b"x")).seq == 1
            # a stream deleted through the Rillet meta leader: the removal applied, the Go stream leader answers
            await js.add_stream(name="GONE", subjects=["gone.>"], num_replicas=3)
            assert (await js.publish("gone.1", b"x")).seq == 1
            assert await js.delete_stream("GONE") is True
            await _until(lambda: ("A", "GONE") not in m.state.streams, 60, what="the removal applied")
            assert api.removals == 1
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.delete_stream("GONE")
            await _until(lambda: m.raft.current(gw.peer_id("g2")), 60, what="g2 current")
            m.transfer(gw.peer_id("g2"))
            await _until(lambda: m.raft.leader == gw.peer_id("g2"), 60, what="g2 taking over")
            await CAP._until(lambda: CAP._js_ready(nc), 60, what="the Go meta leader answering")
            si = await js.stream_info("LED")
            assert si.state.messages == 1 and len(si.cluster.replicas or []) == 2
            api.close()
    finally:
        await nc.close()


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_rillet_replica_of_an_r3_stream_with_two_go_servers(go_cluster):  # noqa: F811
    """The Rillet meta leader places an R3 stream on two Go servers and itself; a Go server leads it; the
    Rillet replica follows the stream group, its acknowledgements count, and its store holds every message
    (sequence, subject, headers, data) after the meta leadership went back to Go; a durable consumer of the
    stream is followed too (deliveries and acks); with the other Go replica down, publishes and acks are
    committed through the Rillet replicas."""
    import nats
    from rillet.jetstream.cluster.golead import StreamCreateAsLeader
    gc = go_cluster
    nc = await nats.connect(gc.url("g1"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)
            replicas = m.replicas  # (host_streams, started with the flag)
            await _until(lambda: m.raft.commit > 0 and m.raft.leader, what="the member following")
            await asyncio.sleep(1.5)
            api = StreamCreateAsLeader(m, include_self=True)
            m.campaign()
            await _until(lambda: m.raft.role == LEADER, 60, what="the Rillet member elected")
            await asyncio.sleep(1.0)
            js = nc.jetstream(timeout=30)
            info = await js.add_stream(name="MIXED", subjects=["mixed.>"], num_replicas=3)
            assert info.config.name == "MIXED"
            await _until(lambda: all(m.raft.match.get(gw.peer_id(n), 0) >= m.raft.pindex for n in gc.names), 60,
                         what="the Go servers holding the leader's whole log")
            m.transfer(gw.peer_id("g2"))
            await _until(lambda: m.raft.leader == gw.peer_id("g2"), 60,
                         what=f"g2 taking over the meta group {m.status()} {m.raft.match}")
            assert ("A", "MIXED") in replicas
            rep = replicas[("A", "MIXED")]
            for i in range(20):
                await js.publish(f"mixed.{i % 4}", f"m{i}".encode(), headers={"X-I": str(i)})
            await nc.request("$JS.API.STREAM.MSG.DELETE.MIXED", json.dumps({"seq": 3}).encode(), timeout=20)
            await _until(lambda: rep.store.state().last_seq == 20 and rep.store.state().msgs == 19, 60,
                         what="the Rillet replica storing the messages")
            for seq in (1, 2, 20):
                sm = rep.store.load_msg(seq)
                assert sm.subject == f"mixed.{(seq - 1) % 4}" and sm.data == f"m{seq - 1}".encode()
                assert b"X-I: " + str(seq - 1).encode() in sm.hdr
            assert rep.store.load_msg(3) is None
            # the Go leader counts the Rillet replica as current
            async def r1_current():
                i = await js.stream_info("MIXED")
                return i if any(r.name == "r1" and r.current for r in i.cluster.replicas or []) else None

            si = await CAP._until(r1_current, 60, what="the Go stream leader reporting r1 current")
            names = {r.name: r for r in si.cluster.replicas or []}
            assert si.cluster.leader in ("g0", "g1", "g2") and "r1" in names
            assert rep.refused == 0 and rep.apply_errors == 0
            # a durable R3 consumer of it (created by the Go meta leader on the stream's peers, Rillet included)
            # (when Go picks this server as the new consumer group's preferred leader, the Go peers elect one of
            # them after an election timeout, 4-9 s: hence the longer timeout)
            await js.add_consumer("MIXED", durable_name="D", ack_policy="explicit", timeout=30)
            await _until(lambda: ("A", "MIXED", "D") in replicas, 60, what="the consumer replica on Rillet")
            crep = replicas[("A", "MIXED", "D")]
            psub = await js.pull_subscribe_bind("D", "MIXED")
            from test_jscluster_goplace import _fetch
            fetched = await _fetch(psub, 10)
            for msg in fetched:
                await msg.ack_sync()
            assert len(fetched) == 10
            cs = crep.consumer
            await _until(lambda: cs.ack_floor_stream == 11 and not cs.pending, 60,
                         what=f"the consumer replica's ack floor {cs} {crep.ops}")
            assert cs.delivered_stream == 11 and cs.delivered_consumer == 10
            # the other Go replica down: the Go leader's commits now need the Rillet replica's acknowledgement
            other = next(n for n in names if n not in ("r1", si.cluster.leader))
            lnc = await nats.connect(gc.url(si.cluster.leader))
            try:
                gc.stop(other)
                ljs = lnc.jetstream()
                for i in range(20, 25):
                    ack = await ljs.publish(f"mixed.{i % 4}", f"m{i}".encode(), timeout=30)
                    assert ack.seq == i + 1
                # and the consumer's too (an acknowledged ack is a committed one)
                lsub = await ljs.pull_subscribe_bind("D", "MIXED")
                got = []
                deadline = time.monotonic() + 30
                while not got:  # (if the stopped server led the consumer, a new leader needs the Rillet vote)
                    try:
                        got = await lsub.fetch(5, timeout=5)
                    except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError):
                        assert time.monotonic() < deadline, "no consumer leader"
                        await asyncio.sleep(0.5)
                for msg in got:
                    await msg.ack_sync(timeout=30)
                await _until(lambda: cs.ack_floor_stream == 16 and not cs.pending, 60, what=f"acks on Rillet {cs}")
            finally:
                await lnc.close()
            await _until(lambda: rep.store.state().last_seq == 25, 60, what="the replica storing them")
            assert rep.store.load_msg(25).data == b"m24"
            api.close()
    finally:
        await nc.close()
