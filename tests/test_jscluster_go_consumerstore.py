"""A Rillet replica of a Go consumer group keeps its state on disk (rillet.jetstream.cluster.goconsumerstore), as
nats-server's consumer store keeps ``o.dat``: after a restart the replica has its state at once, its RAFT log
starts at the kept index (its votes and answers give that position, and the leader resumes from the next index),
and a step-down that makes it leader delivers from where the consumer was, redelivering no acked message.

Unit tests drive a replica's entries by hand (the file written, loaded again, refused when it is another
consumer's, removed with the consumer; fsyncs as the configuration asks). The live test runs 2 Go servers and a
Rillet one (nats-server binary on PATH).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
from types import SimpleNamespace

import pytest

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.goconsumerstate import decode_consumer_state
from rillet.jetstream.cluster.gostream import GoConsumerReplica
from rillet.raft import gowire as gw

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


class _Log:
    def __init__(self):
        self.lines = []

    def __getattr__(self, name):
        return lambda text, *a, **k: self.lines.append((name, text))


PEERS = [gw.peer_id(n) for n in ("r1", "g0", "g1")]
GO = gw.peer_id("g0")


def _server(sync_interval=120.0):
    return SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None,
                           opts=SimpleNamespace(jetstream=SimpleNamespace(sync_interval=sync_interval)))


def _replica(store_dir, server=None, group="C-R3F-x", created="2026-01-01T00:00:00Z", name="C"):
    return GoConsumerReplica(server or _server(), "A", "S",
                             {"name": name, "created": created, "consumer": {"ack_policy": "explicit"},
                              "group": {"name": group, "peers": PEERS}}, str(store_dir))


def _feed(rep, entries, term=2):
    """Each entry in its own append entry of ``term`` from the Go leader; committed by the next one."""
    r = rep.raft
    for x in entries:
        _o, done = r.append("append", "", "", gw.AppendEntry(GO, term, r.commit, r.pterm, r.pindex,
                                                             (gw.Entry(gw.ENTRY_NORMAL, x.encode()),)), 0.0)
        rep._commit(done)
    _o, done = r.append("append", "", "", gw.AppendEntry(GO, term, r.pindex, r.pterm, r.pindex, ()), 0.0)
    rep._commit(done)


def _state(c):
    return (c.delivered_consumer, c.delivered_stream, c.ack_floor_consumer, c.ack_floor_stream,
            sorted(c.pending), dict(c.redelivered))


ENTRIES = [ge.UpdateDelivered(1, 1, 1, 10_000_000_000), ge.UpdateDelivered(2, 2, 1, 11_000_000_000),
           ge.UpdateDelivered(3, 3, 1, 12_000_000_000), ge.UpdateAcks(1, 1), ge.UpdateAcks(3, 3),
           ge.UpdateDelivered(4, 2, 2, 13_000_000_000)]


def test_state_and_position_survive_a_restart_and_vote_as_a_kept_log(tmp_path):
    rep = _replica(tmp_path)
    _feed(rep, ENTRIES)
    want = _state(rep.consumer)
    assert want == (4, 3, 1, 1, [2], {2: 1})
    assert rep.raft.commit == 6 and rep.kept.dirty
    rep.kept.flush()  # (the flusher's timer, run by hand: no event loop here)
    path = tmp_path / "go_consumers" / "A" / "S" / "C" / "state.json"
    doc = json.loads(path.read_text())
    assert (doc["group"], doc["applied"], doc["term"]) == ("C-R3F-x", 6, 2)
    rep.stop()

    again = _replica(tmp_path)
    assert again.kept.loaded == "position" and _state(again.consumer) == want
    assert again.consumer.pending[2][0] == 2  # (the first delivery's consumer sequence kept)
    r = again.raft
    assert (r.pindex, r.pterm, r.commit, r.term) == (6, 2, 6, 2)
    assert decode_consumer_state(r.snapshot_data)[:4] == (1, 1, 4, 3)
    # its vote: not empty, refused to a candidate with a shorter log, granted to one as long
    out = r.vote(gw.VoteRequest(3, 2, 5, gw.peer_id("g1")), "_INBOX.v")
    vr = gw.VoteResponse.decode(out[0].payload)
    assert not vr.granted and not vr.empty
    out = r.vote(gw.VoteRequest(4, 2, 6, gw.peer_id("g1")), "_INBOX.v")
    assert gw.VoteResponse.decode(out[0].payload).granted
    # the leader's next append entry past our log: the catch-up asked for starts after the kept index
    out, done = r.append("append", "", "$NRG.R.x", gw.AppendEntry(GO, 4, 9, 4, 9, ()), 0.0)
    ar = gw.AppendEntryResponse.decode(out[0].payload)
    assert (ar.term, ar.index, ar.success) == (2, 6, False) and not done
    # entries from index 7 (whose previous entry is ours) apply on the kept state
    _o, done = r.append("catchup", r.catchup.inbox, "", gw.AppendEntry(
        GO, 4, 6, 2, 6, (gw.Entry(gw.ENTRY_NORMAL, ge.UpdateAcks(4, 2).encode()),)), 0.0)
    _o, done = r.append("catchup", r.catchup.inbox, "", gw.AppendEntry(GO, 4, 7, 4, 7, ()), 0.0)
    again._commit(done)
    assert _state(again.consumer) == (4, 3, 4, 3, [], {})
    assert again.kept.applied == 7 and again.kept.term == 4


def test_term_and_vote_of_the_consumer_group_are_kept(tmp_path):
    rep = _replica(tmp_path)
    rep.raft.vote(gw.VoteRequest(5, 0, 0, gw.peer_id("g1")), "")
    rep.tav.save(rep.raft.term, rep.raft.vote_for)
    again = _replica(tmp_path)
    assert (again.raft.term, again.raft.vote_for) == (5, gw.peer_id("g1"))


def test_another_consumers_file_is_ignored_a_renamed_groups_gives_the_state_only(tmp_path):
    rep = _replica(tmp_path)
    _feed(rep, ENTRIES)
    rep.stop()  # (written at stop)
    want = _state(rep.consumer)
    # a consumer of that name deleted and created again while the server was down: not its state
    other = _replica(tmp_path, group="C-R3F-y", created="2026-02-02T00:00:00Z")
    assert other.kept.loaded is None and not other.consumer.has_state and other.raft.pindex == 0
    # the same consumer, its group renamed: the state, but not the position (another group's indexes)
    renamed = _replica(tmp_path, group="C-R1F-z")
    assert renamed.kept.loaded == "state" and _state(renamed.consumer) == want and renamed.raft.pindex == 0


def test_removed_with_the_consumer_not_with_another_groups_replica(tmp_path):
    rep = _replica(tmp_path)
    _feed(rep, ENTRIES)
    rep.kept.flush()
    d = tmp_path / "go_consumers" / "A" / "S" / "C"
    # a replica of an earlier group of that name (a meta catch-up's replay) removed: the file is not its own
    old = _replica(tmp_path, group="C-R3F-old", created="2025-01-01T00:00:00Z")
    old.stop(remove=True)
    assert (d / "state.json").exists()
    rep.stop(remove=True)
    assert not d.exists()


def test_unreadable_file_reported_and_the_replica_starts_empty(tmp_path):
    d = tmp_path / "go_consumers" / "A" / "S" / "C"
    d.mkdir(parents=True)
    (d / "state.json").write_text("")
    server = _server()
    rep = _replica(tmp_path, server)
    assert not rep.consumer.has_state and rep.raft.pindex == 0
    assert any(k == "warn" and "not used" in t for k, t in server.log.lines)
    (d / "state.json").write_text(json.dumps({"group": "C-R3F-x", "applied": 3, "term": 1, "state": "AAAA"}))
    rep = _replica(tmp_path, server)
    assert not rep.consumer.has_state and rep.raft.pindex == 0


def test_fsync_as_the_configuration_asks(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    rep = _replica(tmp_path / "a")  # (sync_interval 120 s: written without fsync, as nats-server's o.dat)
    _feed(rep, ENTRIES[:1])
    rep.kept.flush()  # (its directory made durable on the first write)
    _feed(rep, ENTRIES[1:2])
    synced.clear()
    rep.kept.flush()
    assert rep.kept.writes == 2 and rep.kept.syncs == 0 and not synced
    rep.kept._last_sync -= 121  # (sync_interval passed: the next write is fsynced)
    _feed(rep, ENTRIES[2:3])
    rep.kept.flush()
    assert rep.kept.syncs == 1 and synced
    synced.clear()
    _feed(rep, ENTRIES[3:4])
    rep.stop()  # (stopping: written and fsynced)
    assert rep.kept.syncs == 2 and synced and rep.kept.writes == 4
    always = _replica(tmp_path / "b", _server("always"))
    for x in ENTRIES[:3]:
        _feed(always, [x])
        always.kept.flush()
    assert always.kept.writes == always.kept.syncs == 3
    assert not (tmp_path / "b" / "go_consumers" / "A" / "S" / "C" / "state.json.tmp").exists()


# -- live: 2 Go + 1 Rillet ---------------------------------------------------------------------------------------

@live
async def test_restarted_rillet_replica_has_its_state_at_once_and_leads_from_it(tmp_path):
    """2 Go + 1 Rillet, an R3 stream and a durable pull consumer (R3, explicit acks) led by a Go server: 10
    fetched, 1-6 acked, 7-10 pending. The Rillet server stopped without writing at stop (its replica's
    ``kept.stop`` disabled: what is on disk is what the flusher wrote, as after a crash of the process); while it
    is down the Go leader delivers 11-12 and takes acks of 7, 11 and 12. Restarted, its replica has the state it
    had at once, and its RAFT log starts at the kept index; the Go leader resumes it from there (only the
    entries made while it was down are applied, no snapshot). A step-down makes it leader: it delivers 13 on,
    takes the acks of 8-10 and redelivers no acked message. The stream's replica likewise: its log starts at the
    index its store was applied up to, it is caught up from there (31-35, published while it was down, no
    snapshot), and, made leader, holds every message. A consumer deleted while r1 was down: its kept state is
    removed once r1's meta state is current."""
    import nats
    from helpers import free_port, serve_config
    from rillet.jetstream.cluster.golead import LEADER
    from test_jscluster_golead_consumer import _cinfo, _consumer_to, _fetch, _led_by, _state
    from test_jscluster_golead_stream import _create, _lead_conf, _lead_to
    from test_jscluster_gometa import CAP, _member, _until
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = _lead_conf(gc, "r1", rport)
    conns: dict = {}
    logs = []
    try:
        for n in gc.names:
            conns[n] = await nats.connect(gc.url(n))
        g0 = conns["g0"]
        js = conns["g1"].jetstream(timeout=30)
        async with serve_config(conf) as srv:
            m = await _member(srv)
            await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
            await _create(g0, name="CS", subjects=["cs.>"], num_replicas=3)
            for i in range(1, 31):
                assert (await js.publish(f"cs.{i % 3}", f"m{i}".encode())).seq == i
            await js.add_consumer("CS", durable_name="P", ack_policy="explicit", ack_wait=120.0, num_replicas=3,
                                  timeout=30)
            await _until(lambda: ("A", "CS", "P") in m.replicas, 60, what="the consumer replica on r1")
            await CAP._until(lambda: _led_by(g0, "CS", "P", gc.names), 60, what="a Go leader of P")
            sub = await js.pull_subscribe_bind("P", "CS")
            first = await _fetch(sub, 10)
            assert [x.metadata.sequence.stream for x in first] == list(range(1, 11))
            for msg in first[:6]:
                await msg.ack_sync()
            rep = m.replicas[("A", "CS", "P")]
            await _until(lambda: _state_of(rep) == (10, 10, 6, 6, [7, 8, 9, 10]), 30,
                         what="r1's replica at delivered 10, ack floor 6")
            await _until(lambda: rep.kept is not None and not rep.kept.dirty and rep.kept.applied == rep.raft.applied,
                         10, what="the state written by the flusher")
            kept_index, kept_term = rep.kept.applied, rep.kept.term
            # another consumer with a kept state, deleted while r1 is down: its file goes once r1 is current
            await js.add_consumer("CS", durable_name="Q", ack_policy="explicit", num_replicas=3, timeout=30)
            qsub = await js.pull_subscribe_bind("Q", "CS")
            for msg in await _fetch(qsub, 1):
                await msg.ack_sync()
            await _until(lambda: ("A", "CS", "Q") in m.replicas and m.replicas[("A", "CS", "Q")].kept.writes > 0,
                         30, what="Q's state written on r1")
            qpath = m.replicas[("A", "CS", "Q")].kept.path
            srep = m.replicas[("A", "CS")]
            await _until(lambda: srep.store.state().last_seq == 30, 30, what="r1's stream replica at 30")
            stream_index = srep.applied_index
            before_ops = sum(rep.ops.values())
            rep.kept.stop = lambda remove=False: None  # (no write at stop: only what the flusher wrote)
            logs.append(srv._test_log.getvalue())
        # down: the Go leader goes on
        more = await _fetch(sub, 2)
        assert [x.metadata.sequence.stream for x in more] == [11, 12]
        for msg in [first[6]] + more:
            await msg.ack_sync()
        ci_go = await _cinfo(g0, "CS", "P")
        assert _state(ci_go)[:5] == (12, 12, 7, 7, 3)
        for i in range(31, 36):
            assert (await js.publish(f"cs.{i % 3}", f"m{i}".encode())).seq == i
        await js.delete_consumer("CS", "Q")
        assert os.path.exists(qpath)

        async with serve_config(conf) as srv:
            m = await _member(srv)
            await _until(lambda: ("A", "CS", "P") in m.replicas, 60, what="the consumer replica on r1 again")
            rep = m.replicas[("A", "CS", "P")]
            # at once: the state it had, its log starting at the kept index (a vote gives that position)
            assert rep.kept.loaded == "position"
            assert (rep.raft.base_index, rep.raft.base_term) == (kept_index, kept_term)
            assert _state_of(rep)[:4] == (10, 10, 6, 6) and rep.raft.pindex >= kept_index > 0
            # the stream replica too: its log starts at the index its store was applied up to
            srep = m.replicas[("A", "CS")]
            assert srep.raft.base_index == stream_index > 0 and srep.raft.base_term > 0
            # caught up from there: only what was made while it was down
            await _until(lambda: _state_of(rep) == (12, 12, 7, 7, [8, 9, 10]), 60,
                         what="r1's replica caught up to delivered 12, ack floor 7")
            assert rep.snapshots_installed == 0 and rep.apply_errors == 0
            assert 0 < sum(rep.ops.values()) < before_ops, (rep.ops, before_ops)
            await _until(lambda: srep.store.state().last_seq == 35, 60, what="r1's stream replica caught up")
            assert srep.snapshots_installed == 0 and srep.apply_errors == 0 and srep.raft.base_index == stream_index
            await _until(lambda: not os.path.exists(qpath), 30, what="Q's kept state removed")
            assert os.path.exists(rep.kept.path) and ("A", "CS", "Q") not in m.replicas
            # led by the restarted replica: from 13 on, no acked message again
            ci = await _consumer_to(g0, "CS", "P", "r1")
            assert ci.cluster.leader == "r1" and _state(ci)[:5] == (12, 12, 7, 7, 3)
            assert rep.raft.role == LEADER and rep._lead is not None
            rsub = await conns["g1"].jetstream(timeout=30).pull_subscribe_bind("P", "CS")
            got = await _fetch(rsub, 5)
            assert [x.metadata.sequence.stream for x in got] == list(range(13, 18))
            assert [x.metadata.sequence.consumer for x in got] == list(range(13, 18))
            assert all(x.metadata.num_delivered == 1 for x in got)
            for msg in first[7:10] + got:
                await msg.ack_sync()

            async def settled():
                ci = await _led_by(g0, "CS", "P", ("r1",))
                return ci if ci is not None and ci.num_ack_pending == 0 else None
            ci_r = await CAP._until(settled, 30, what="P acked through the Rillet leader")
            assert _state(ci_r) == (17, 17, 17, 17, 0, 0, 18), _state(ci_r)
            rest = await _fetch(rsub, 18)
            assert [x.metadata.sequence.stream for x in rest] == list(range(18, 36))
            # the stream led by the restarted replica: every message, and the next publish after them
            si = await _lead_to(g0, "CS", "r1")
            assert (si.state.messages, si.state.first_seq, si.state.last_seq) == (35, 1, 35)
            assert (await js.publish("cs.1", b"m36")).seq == 36
            assert rep.kept.applied == rep.raft.applied or rep.kept.dirty
            logs.append(srv._test_log.getvalue())
    finally:
        for c in conns.values():
            if c.is_connected:
                await c.close()
        (tmp_path / "r1.log").write_text("\n".join(logs))
        gc.stop_all()


def _state_of(rep) -> tuple:
    c = rep.consumer
    return (c.delivered_consumer, c.delivered_stream, c.ack_floor_consumer, c.ack_floor_stream, sorted(c.pending))


def test_kept_states_of_consumers_not_placed_here_are_pruned(tmp_path):
    from rillet.jetstream.cluster.goconsumerstore import prune_orphans
    for name in ("C", "D"):
        rep = _replica(tmp_path, name=name)
        _feed(rep, ENTRIES[:1])
        rep.stop()
    root = tmp_path / "go_consumers" / "A" / "S"
    assert sorted(os.listdir(root)) == ["C", "D"]
    log = _Log()
    assert prune_orphans(str(tmp_path), {("A", "S", "C")}, log) == 1
    assert os.listdir(root) == ["C"] and any("removed" in t for _k, t in log.lines)
    assert prune_orphans(str(tmp_path), set(), log) == 1 and not root.exists()
    assert prune_orphans(str(tmp_path / "none"), set(), log) == 0
