"""A Rillet replica of a stream a Go cluster placed on it (rillet.jetstream.cluster.gostream), behind the
``rillet_go_meta`` flag: its file store, applied index and term/vote survive a restart, and a replica that
missed messages is caught up by the Go leader -- from its RAFT log, or with a stream snapshot (installed:
first sequence, deletes) followed by a ``$JSC.SYNC`` catch-up by messages with flow-control answers.

Unit tests check the stream snapshot decoder against the snapshots Go wrote in the recorded corpus.
"""
from __future__ import annotations

import asyncio
import base64
import json
import shutil

import pytest

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import LEADER, StreamCreateAsLeader
from rillet.raft import gowire as gw

from test_jscluster_gometa import CAP, CORPUS, _member, _rillet_conf, _until, go_cluster  # noqa: F401
from helpers import serve_config


def test_stream_snapshots_go_wrote_decode_and_add_up():
    """Every stream group snapshot in the corpus decodes; its deleted sequences (run-length or sequence set)
    lie inside [first, last] and account for the gap between the range and the message count."""
    cap = json.loads(CORPUS.read_text())
    seen = 0
    for group, _name, b64 in cap["snapshots"]:
        if not group.startswith("S-"):
            continue
        snap = gw.Snapshot.decode(base64.b64decode(b64))
        ss = ge.StreamSnapshot.decode(snap.data)
        gone = sum(n for _f, n in ss.deleted)
        assert ss.last_seq - ss.first_seq + 1 - gone == ss.msgs
        assert all(ss.first_seq <= f and f + n - 1 <= ss.last_seq for f, n in ss.deleted)
        again = ge.StreamSnapshot.decode(ss.encode())
        assert again == ss
        seen += 1
    assert seen >= 4


def test_stream_snapshot_refuses_malformed():
    good = ge.StreamSnapshot(3, 90, 1, 4, 0, [(2, 1)], {}).encode()
    for bad in (b"", b"\x2a", b"\x2b\x01" + good[2:], b"\x2a\x03" + good[2:], good[:-1], good + b"\x99",
                good[:7] + b"\x16\x02\xff\xff\xff\x7f"):
        with pytest.raises(gw.GoWireError):
            ge.StreamSnapshot.decode(bad)


def test_sync_request_is_go_json():
    assert ge.sync_request("abc", 5, 9, 12) == (b'{"peer":"abc","first_seq":5,"last_seq":9,"delete_ranges":true,'
                                                 b'"min_applied":12}')


async def _rillet_leads_and_places(srv, nc, gc, name):
    m = await _member(srv)
    await _until(lambda: m.raft.commit > 0 and m.raft.leader, what="the member following")
    await asyncio.sleep(1.5)
    api = StreamCreateAsLeader(m, include_self=True)
    m.campaign()
    await _until(lambda: m.raft.role == LEADER, 60, what="the Rillet member elected")
    await asyncio.sleep(1.0)
    js = nc.jetstream(timeout=30)
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], num_replicas=3)
    await _until(lambda: all(m.raft.match.get(gw.peer_id(n), 0) >= m.raft.pindex for n in gc.names), 60,
                 what="the Go servers holding the leader's whole log")
    back = gc.names[-1]
    m.transfer(gw.peer_id(back))
    await _until(lambda: m.raft.leader == gw.peer_id(back), 60, what=f"{back} taking over the meta group")
    api.close()
    return m


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_killed_rillet_replica_rejoins_and_is_caught_up_by_snapshot_and_messages(go_cluster):  # noqa: F811
    import nats
    gc = go_cluster
    nc = await nats.connect(gc.url("g1"))
    conf = _rillet_conf(gc)
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        js = nc.jetstream(timeout=30)
        async with serve_config(conf) as srv:
            m = await _rillet_leads_and_places(srv, nc, gc, "REJ")
            await _until(lambda: ("A", "REJ") in m.replicas, 60, what="the replica on Rillet")
            rep = m.replicas[("A", "REJ")]
            assert type(rep.store).__name__ == "FileStore"
            for i in range(10):
                await js.publish(f"rej.{i % 3}", f"m{i}".encode(), headers={"X-I": str(i)})
            await _until(lambda: rep.store.state().last_seq == 10, 60, what="the replica storing 10")
            si = await js.stream_info("REJ")
            go_peers = sorted([si.cluster.leader] + [r.name for r in si.cluster.replicas if r.name != "r1"])
        # the Rillet server is down: the two Go replicas go on
        for i in range(10, 30):
            await js.publish(f"rej.{i % 3}", f"m{i}".encode(), headers={"X-I": str(i)}, timeout=30)
        for seq in (4, 15, 16):
            await nc.request("$JS.API.STREAM.MSG.DELETE.REJ", json.dumps({"seq": seq}).encode(), timeout=20)
        await nc.request("$JS.API.STREAM.PURGE.REJ", json.dumps({"seq": 3}).encode(), timeout=20)  # 1, 2 go
        # both Go replicas restarted one after the other: each snapshots its stream at shutdown, so the leader
        # no longer holds the entries the Rillet replica missed
        await nc.close()
        for n in go_peers:
            gc.stop(n)
            gc.start(n)
        nc = await nats.connect(gc.url("g1"))
        js = nc.jetstream(timeout=30)
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")

        async def stream_led():
            try:
                return (await js.stream_info("REJ")).cluster.leader
            except (nats.js.errors.APIError, nats.errors.TimeoutError):
                return None
        await CAP._until(stream_led, 60, what="the stream led again")
        async with serve_config(conf) as srv:
            m = await _member(srv)
            await _until(lambda: ("A", "REJ") in m.replicas, 60, what="the replica back on Rillet")
            rep = m.replicas[("A", "REJ")]
            await _until(lambda: rep.store.state().last_seq == 30, 60,
                         what=f"the replica caught up {rep.store.state().last_seq}")
            st = rep.store.state()
            assert st.first_seq == 3 and st.msgs == 28 - 3
            for seq in (4, 15, 16):
                assert rep.store.load_msg(seq) is None
            for seq in (3, 14, 17, 30):
                sm = rep.store.load_msg(seq)
                assert sm.subject == f"rej.{(seq - 1) % 3}" and sm.data == f"m{seq - 1}".encode()
                assert b"X-I: " + str(seq - 1).encode() in sm.hdr
            print("snapshots", rep.snapshots_installed, "catchups", rep.catchups, "msgs", rep.catchup_msgs)
            assert rep.snapshots_installed >= 1 and rep.catchups >= 1 and rep.catchup_msgs >= 1
            assert rep.refused == 0 and rep.apply_errors == 0
            # and it is current again: with one Go replica down, commits need its acknowledgements
            leader = await stream_led()
            other = next(n for n in go_peers if n != leader)
            lnc = await nats.connect(gc.url(leader))
            try:
                gc.stop(other)
                ack = await lnc.jetstream().publish("rej.9", b"after", timeout=30)
                assert ack.seq == 31
            finally:
                await lnc.close()
            await _until(lambda: rep.store.state().last_seq == 31, 60, what="the replica storing 31")
    finally:
        await nc.close()


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_rillet_leads_a_stream_group_of_go_followers_and_steps_down_and_back(go_cluster):  # noqa: F811
    """A Go stream leader asked to step down in favour of the Rillet replica (placement preferred r1) hands
    over; publishes through any server are then proposed by Rillet, committed with the Go followers and
    acknowledged as nats-server acknowledges them (duplicates and wrong expected sequences included); the
    leader step-down request taken by Rillet moves the leadership back to Go, whose store holds every message."""
    import nats
    gc = go_cluster
    nc = await nats.connect(gc.url("g1"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        js = nc.jetstream(timeout=30)
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _rillet_leads_and_places(srv, nc, gc, "LEAD")
            await _until(lambda: ("A", "LEAD") in m.replicas, 60, what="the replica on Rillet")
            rep = m.replicas[("A", "LEAD")]
            assert (await js.publish("lead.0", b"go")).seq == 1
            await _until(lambda: rep.store.state().last_seq == 1, 60, what="the replica storing 1")
            await _until(lambda: rep.raft.leader, 60, what="a leader known")
            for attempt in range(5):  # (a busy Go leader may not count r1 current yet, or the transfer be lost)
                r = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.LEAD",
                                                 json.dumps({"placement": {"preferred": "r1"}}).encode(),
                                                 timeout=20)).data)
                if r.get("success") is True:
                    try:
                        await _until(lambda: rep.raft.role == LEADER, 15, what="the Rillet replica leading")
                        break
                    except AssertionError:
                        pass
                assert attempt < 4, r
                await asyncio.sleep(1)
            # publishes through a Go server and through the Rillet server
            rnc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
            try:
                rjs = rnc.jetstream()
                for i in range(1, 11):
                    ack = await (js if i % 2 else rjs).publish(f"lead.{i % 3}", f"m{i}".encode(),
                                                               headers={"X-I": str(i)})
                    assert ack.stream == "LEAD" and ack.seq == i + 1 and not ack.duplicate
                ack = await js.publish("lead.1", b"once", headers={"Nats-Msg-Id": "id-1"})
                dup = await js.publish("lead.1", b"once", headers={"Nats-Msg-Id": "id-1"})
                assert ack.seq == 12 and dup.seq == 12 and dup.duplicate
                with pytest.raises(nats.js.errors.BadRequestError) as ei:
                    await js.publish("lead.1", b"x", headers={"Nats-Expected-Last-Sequence": "5"})
                assert ei.value.err_code == 10071 and "wrong last sequence: 12" in ei.value.description
                ack = await rjs.publish("lead.2", b"y", headers={"Nats-Expected-Last-Sequence": "12"})
                assert ack.seq == 13
            finally:
                await rnc.close()
            # stream info, answered by the Rillet leader as a Go leader answers it
            si = await js.stream_info("LEAD")
            assert si.cluster.leader == "r1" and si.state.messages == 13 and si.state.last_seq == 13
            assert si.config.subjects == ["lead.>"] and si.config.num_replicas == 3
            assert sorted(r.name for r in si.cluster.replicas) == sorted(go for go in gc.names
                                                                       if gw.peer_id(go) in rep.raft.peers)
            # a message deleted through the Rillet leader: applied everywhere, answered as nats-server answers
            r = json.loads((await nc.request("$JS.API.STREAM.MSG.DELETE.LEAD", json.dumps({"seq": 4}).encode(),
                                             timeout=20)).data)
            assert r == {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response", "success": True}
            r = json.loads((await nc.request("$JS.API.STREAM.MSG.DELETE.LEAD", json.dumps({"seq": 4}).encode(),
                                             timeout=20)).data)
            assert r["error"] == {"code": 400, "err_code": 10043, "description": "sequence 4 not found"}
            assert rep.store.load_msg(4) is None
            assert rep.published == 12 and rep.acked == 12  # (seq 1 was a Go leader's; the duplicate is not proposed)
            # a preferred server that is not a peer of the group: refused as nats-server refuses it
            r = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.LEAD",
                                             json.dumps({"placement": {"preferred": "nope"}}).encode(),
                                             timeout=20)).data)
            assert r["error"] == {"code": 400, "err_code": 10005, "description": 'preferred server "nope" not known'}
            assert rep.raft.role == LEADER
            # step down through the API: a Go server takes over with every message
            r = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.LEAD", b"", timeout=20)).data)
            assert r == {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "success": True}
            await _until(lambda: rep.raft.role != LEADER and rep.raft.leader, 60, what="a Go leader")

            async def go_led():
                try:
                    i = await js.stream_info("LEAD")
                except (nats.js.errors.APIError, nats.errors.TimeoutError):
                    return None
                return i if i.cluster.leader in gc.names else None
            si = await CAP._until(go_led, 60, what="a Go server leading LEAD")
            assert si.state.messages == 12 and si.state.last_seq == 13
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.get_msg("LEAD", 4)
            for seq in (2, 7, 11):
                got = await js.get_msg("LEAD", seq)
                assert got.subject == f"lead.{(seq - 1) % 3}" and got.data == f"m{seq - 1}".encode()
                assert got.headers["X-I"] == str(seq - 1)
            assert (await js.publish("lead.0", b"after")).seq == 14
            await _until(lambda: rep.store.state().last_seq == 14, 60, what="the Rillet follower storing 14")
            # and back to Rillet once more
            r = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.LEAD",
                                             json.dumps({"placement": {"preferred": "r1"}}).encode(),
                                             timeout=20)).data)
            assert r.get("success") is True, r
            await _until(lambda: rep.raft.role == LEADER, 60, what="the Rillet replica leading again")
            assert (await js.publish("lead.0", b"again")).seq == 15
    finally:
        await nc.close()


_GETS = [{"seq": 2}, {"seq": 5, "no_hdr": True}, {"last_by_subj": "get.a"}, {"next_by_subj": "get.b", "seq": 3},
         {"next_by_subj": "get.>", "seq": 6}, {"seq": 99}, {"last_by_subj": "get.none"}, {"seq": 2, "batch": 2},
         {}, {"seq": 1, "last_by_subj": "get.a"}]


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_rillet_leader_answers_msg_get_and_purge_as_the_go_leader(go_cluster):  # noqa: F811
    """Message get and purge while the Rillet replica leads an R3 group of Go followers, against the Go leader:
    the same MSG.GET requests (by sequence, without headers, last and next for a subject, missing, refused) get
    the same answers from either; a purge (by subject, then up to a sequence) through the Rillet leader is
    committed with the Go followers, answered with its count, and the Go leader afterwards holds what is left."""
    import nats
    gc = go_cluster
    nc = await nats.connect(gc.url("g1"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        js = nc.jetstream(timeout=30)
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _rillet_leads_and_places(srv, nc, gc, "GET")
            await _until(lambda: ("A", "GET") in m.replicas, 60, what="the replica on Rillet")
            rep = m.replicas[("A", "GET")]
            for i in range(1, 9):
                await js.publish(f"get.{'ab'[i % 2]}", f"m{i}".encode(), headers={"X-I": str(i)})
            await _until(lambda: rep.store.state().last_seq == 8 and rep.raft.leader, 60, what="the replica at 8")

            async def answers() -> list[dict]:
                out = []
                for req in _GETS:
                    r = await nc.request("$JS.API.STREAM.MSG.GET.GET", json.dumps(req).encode(), timeout=20)
                    out.append(json.loads(r.data))
                return out
            go = await answers()
            assert go[0]["message"]["seq"] == 2 and "error" in go[5] and "error" in go[7]
            for attempt in range(5):
                r = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.GET", json.dumps(
                    {"placement": {"preferred": "r1"}}).encode(), timeout=20)).data)
                if r.get("success"):
                    try:
                        await _until(lambda: rep.raft.role == LEADER, 15, what="the Rillet replica leading")
                        break
                    except AssertionError:
                        pass
                assert attempt < 4, r
                await asyncio.sleep(1)
            await CAP._until(lambda: _led_by(js, "GET", "r1"), 60, what="r1 answering as GET's leader")
            assert await answers() == go
            # purges through the Rillet leader
            r = json.loads((await nc.request("$JS.API.STREAM.PURGE.GET", json.dumps({"filter": "get.a"}).encode(),
                                             timeout=20)).data)
            assert r == {"type": "io.nats.jetstream.api.v1.stream_purge_response", "success": True, "purged": 4}
            r = json.loads((await nc.request("$JS.API.STREAM.PURGE.GET", json.dumps({"seq": 4, "keep": 1}).encode(),
                                             timeout=20)).data)
            assert r["error"]["err_code"] == 10003  # (sequence and keep exclude each other, as nats-server says)
            r = json.loads((await nc.request("$JS.API.STREAM.PURGE.GET", json.dumps({"seq": 4}).encode(),
                                             timeout=20)).data)
            assert r == {"type": "io.nats.jetstream.api.v1.stream_purge_response", "success": True, "purged": 2}
            assert rep.raft.role == LEADER and rep.store.state().msgs == 2
            # back to a Go leader: it holds the two messages left (get.a's 2, 4, 6, 8 and then 1, 3 purged)
            r = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.GET", b"", timeout=20)).data)
            assert r.get("success") is True, r
            si = await CAP._until(lambda: _led_by(js, "GET", *gc.names), 60, what="a Go server leading GET")
            assert (si.state.messages, si.state.first_seq, si.state.last_seq) == (2, 5, 8)
            for seq in (5, 7):
                assert (await js.get_msg("GET", seq)).data == f"m{seq}".encode()
    finally:
        await nc.close()


async def _led_by(js, stream: str, *names: str):
    import nats
    try:
        si = await js.stream_info(stream)
    except (nats.js.errors.APIError, nats.errors.TimeoutError):
        return None
    return si if si.cluster.leader in names else None
