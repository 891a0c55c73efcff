"""A change of a Go cluster group's peers from Rillet (rillet.jetstream.cluster.gomigrate): nats-server 2.15's
desired-state steps, the meta leader's and the group leader's halves, driven against each other (sans-IO)."""
from __future__ import annotations

import random
import time

from rillet.jetstream.cluster.gomigrate import (migrating, migration_step, reassign_stream_peers, reconcile_doc,
                                               reconcile_group, remap_consumers)

ME, R2, R3, G0 = "RiLLeT01", "RiLLeT02", "RiLLeT03", "GoServ00"


def _sa(peers, replicas=3):
    return {"client": {"acc": "A"}, "created": "2026-01-01T00:00:00Z",
            "stream": {"name": "S", "num_replicas": replicas, "retention": "limits"},
            "group": {"name": "S-R3F-x", "peers": list(peers), "store": "file", "cluster": "C1", "preferred": G0},
            "sync": "$JSC.SYNC.x"}


def _step(sa, actual, term=5, meta=(ME, R2, R3), online=(R2, R3), pending=False, **kw):
    lag = {p: 0 for p in actual if p != ME}
    return migration_step(ME, term, sa, sorted(actual), set(meta), set(online), lag,
                          {p for p in actual if p != ME}, pending, 3, **kw)


def test_a_removed_server_is_replaced_step_by_step_as_nats_server_does():
    rng = random.Random(3)
    sa, _ = reassign_stream_peers(_sa([G0, ME, R2]), [G0], True, 0, [ME, R2, R3], rng)
    g = sa["group"]
    assert g["peers"] == [ME, R2] and sorted(g["desired"]["peers"]) == [ME, R2, R3]
    assert g["desired"]["removed"] == [G0] and "preferred" not in g
    actual = [G0, ME, R2]
    assert migrating(sa, actual, 3)
    reached = []
    for _ in range(12):
        kind, arg = _step(sa, actual)
        reached.append(kind)
        if kind == "reconcile":
            ng = reconcile_group(sa["group"], arg, 3, True)
            if ng is None:
                break
            sa = dict(sa, group=ng)
        elif kind == "remove":
            actual.remove(arg)
        elif kind == "add":
            actual.append(arg)
        if not migrating(sa, actual, 3):
            break
    # the term recorded, the removed peer evicted, the new one put in the assignment, added, and the end reported
    assert reached == ["reconcile", "remove", "reconcile", "add", "reconcile"]
    assert sorted(actual) == [ME, R2, R3] and "desired" not in sa["group"]
    assert sorted(sa["group"]["peers"]) == [ME, R2, R3] and not migrating(sa, actual, 3)


def test_leader_waits_for_a_pending_change_and_steps_down_when_it_leaves():
    sa = _sa([ME, R2, R3])
    sa["group"]["desired"] = {"id": "x", "term": 5, "peers": [R2, R3, G0]}
    assert _step(sa, [ME, R2, R3], pending=True) == ("wait", "waiting for membership change to commit")
    # G0 is in the desired set but not in the assignment yet: the meta leader is asked to put it there
    kind, upd = _step(sa, [ME, R2, R3], meta=(ME, R2, R3, G0))
    assert kind == "reconcile" and upd["meta_peers"] == [ME, R2, R3, G0]
    sa["group"]["peers"] = [ME, R2, R3, G0]
    assert _step(sa, [ME, R2, R3], meta=(ME, R2, R3, G0), online=(R2, R3, G0)) == ("add", G0)
    # all four are members and current: the leader, not desired, hands the group to a desired peer first
    kind, peer = _step(sa, [ME, R2, R3, G0], meta=(ME, R2, R3, G0), online=(R2, R3, G0))
    assert kind == "stepdown" and peer in (R2, R3, G0)
    # a consumer still on the old peers holds the stream's removal back (the meta leader is nudged)
    sa["group"]["desired"]["peers"] = [ME, R2, R3]
    kind, upd = _step(sa, [ME, R2, R3, G0], meta=(ME, R2, R3, G0), blocked_by="D")
    assert kind == "reconcile" and "meta_peers" not in upd
    assert _step(sa, [ME, R2, R3, G0], meta=(ME, R2, R3, G0)) == ("remove", G0)


def test_reconcile_requests_are_fenced_by_term_and_id_and_encoded_as_nats_server():
    g = _sa([ME, R2])["group"]
    g["desired"] = {"id": "a", "term": 4, "peers": [ME, R2, R3]}
    assert reconcile_group(g, {"id": "a", "term": 3}, 3, True) is None  # (an older term)
    assert reconcile_group(g, {"id": "b", "term": 4, "meta_peers": [ME, R2, R3]}, 3, True) is None  # (stale id)
    ng = reconcile_group(g, {"id": "a", "term": 6}, 3, True)
    assert ng["desired"]["term"] == 6 and ng["desired"]["id"] != "a"
    assert reconcile_doc({"id": "a", "term": 6, "meta_peers": [ME], "match": True}, account="A", stream="S") == \
        {"account": "A", "stream": "S", "id": "a", "term": 6, "meta_peers": [ME], "match": True}
    assert reconcile_doc({"id": "", "term": 2}, account="A", stream="S", consumer="D") == \
        {"account": "A", "stream": "S", "consumer": "D", "term": 2}


def test_short_group_grows_when_a_server_joins_and_its_consumers_follow():
    rng = random.Random(1)
    sa = _sa([ME, R2])
    assert reassign_stream_peers(sa, [], True, 3, [ME, R2], rng) == (None, False)  # (no server free)
    nsa, replaced = reassign_stream_peers(sa, [], True, 3, [ME, R2, R3], rng)
    assert replaced and nsa["group"]["peers"] == [ME, R2] and nsa["group"]["desired"]["peers"] == [ME, R2, R3]
    ca = {"name": "D", "stream": "S", "consumer": {"durable_name": "D"},
          "group": {"name": "C-R3F-y", "peers": [ME, R2], "store": "file", "cluster": "C1"}}
    eph = {"name": "E", "stream": "S", "consumer": {}, "group": {"name": "C-R1F-z", "peers": [R2], "store": "file"}}
    updated, deleted, done = remap_consumers(nsa, {"D": ca, "E": eph}, rng)
    assert not done and not deleted and [c["name"] for c in updated] == ["D"]
    assert updated[0]["group"]["peers"] == [ME, R2] and updated[0]["group"]["desired"]["peers"] == [ME, R2, R3]


def test_leaderless_replica_evicts_the_peers_the_meta_group_removed_only_when_they_block_a_quorum():
    from types import SimpleNamespace
    from rillet.jetstream.cluster.golead import LEADER, GoRaftPeer
    from rillet.jetstream.cluster.gomigrate import GroupMigration

    class Rep(GroupMigration):
        KIND, group, peer = "consumer group", "C-R3F-y", R2

    def rep(peers, removed, assigned):
        r = Rep()
        r.raft = GoRaftPeer("C-R3F-y", R2)
        r.raft.peers, r.raft.cluster_size = set(peers), len(peers)
        r.member = SimpleNamespace(raft=SimpleNamespace(leader=ME, catchup=None))
        r.assignment = {"group": {"peers": assigned, "desired": {"id": "x", "peers": assigned, "removed": removed}}}
        r.log = SimpleNamespace(warn=lambda *a: None)
        return r
    # G0 and R3 removed, both down: R2 alone can not make a quorum of three; it drops them and leads alone
    r = rep([G0, R3, R2], [G0, R3], [R2])
    assert r._evict_removed() == [G0, R3] and r.raft.peers == {R2} and r.raft.cluster_size == 1
    r.raft._log.append((1, ()))
    r.raft.announce_peers = True
    r.raft.campaign()
    assert r.raft.role == LEADER and r.raft.pindex == 2
    assert [c.index for c in r.raft._advance_commit()] == [2] and r.raft.commit == 2  # (its own vote: a quorum)
    # the others could still make a quorum without us: nothing evicted (they may commit what we would miss)
    r = rep([G0, R3, R2, ME, "RiLLeT05"], [G0], [R2, ME, R3, "RiLLeT05"])
    assert r._evict_removed() == [] and len(r.raft.peers) == 5
    # no meta leader: nothing either
    r = rep([G0, R3, R2], [G0, R3], [R2])
    r.member.raft.leader = ""
    assert r._evict_removed() == []


def test_member_of_a_group_being_created_votes_as_not_empty_until_it_has_a_history():
    from rillet.jetstream.cluster.golead import GoRaftPeer
    from rillet.raft import gowire as gw
    p = GoRaftPeer("S-R3F-x", R2)
    out = p.vote(gw.VoteRequest(1, 0, 0, ME), "_R_.v")
    assert gw.VoteResponse.decode(out[0].payload).empty  # (a restarted member's empty log: says so)
    p = GoRaftPeer("S-R3F-x", R2, initializing=True)
    out = p.vote(gw.VoteRequest(1, 0, 0, ME), "_R_.v")
    vr = gw.VoteResponse.decode(out[0].payload)
    assert vr.granted and not vr.empty  # (nats-server's initializing member: counts toward a quorum)
    # as nats-server's processVoteRequest: once its vote went to another candidate of the term, or for a stale
    # term, its empty log answers as empty again
    vr = gw.VoteResponse.decode(p.vote(gw.VoteRequest(1, 0, 0, R3), "_R_.v")[0].payload)
    assert not vr.granted and vr.empty
    vr = gw.VoteResponse.decode(p.vote(gw.VoteRequest(0, 0, 0, R3), "_R_.v")[0].payload)
    assert not vr.granted and vr.empty
    p.append("append", "", "", gw.AppendEntry(ME, 1, 0, 0, 0, (gw.Entry(gw.ENTRY_NORMAL, b"x"),)), 0.0)
    assert p.pindex == 1 and not p.initializing


def test_a_desired_state_carries_its_creation_time_and_members_as_nats_server_2_15_1_writes_them():
    """nats-server 2.15.1's desired state (seen on the wire, a scale-up R1 to R3 on Go servers): ``created``
    first, the time it was first made and kept by every later step; ``members`` before ``origin``, the group's
    peers at first, then what the group leader's reconcile requests name."""
    from rillet.gocompat.gotime import time_ns
    rng = random.Random(2)
    before = time.time_ns()
    sa, _ = reassign_stream_peers(_sa([ME, R2]), [], True, 3, [ME, R2, R3], rng)
    d = sa["group"]["desired"]
    assert list(d)[0] == "created" and before <= time_ns(d["created"]) <= time.time_ns()
    assert d["members"] == [ME, R2] and list(d)[-1] == "members"  # (no origin here)
    d = dict(d, term=5)
    g = dict(sa["group"], desired=d)
    ng = reconcile_group(g, {"id": d["id"], "term": 5, "meta_peers": [ME, R2], "members": [ME]}, 3, False)
    assert ng["desired"]["members"] == [ME] and ng["desired"]["created"] == d["created"]  # (members alone moved)
    ng = reconcile_group(g, {"id": d["id"], "term": 5, "meta_peers": [ME, R2], "members": [ME, R2]}, 3, False)
    assert ng is None  # (nothing new)
    ng = reconcile_group(g, {"id": d["id"], "term": 5, "meta_peers": [ME, R2, R3], "members": [ME, R2]}, 3, False)
    assert ng["scale_up"] and ng["desired"]["created"] == d["created"] and ng["desired"]["id"] != d["id"]
    again, _ = reassign_stream_peers(dict(sa, group=ng), [R3], True, 3, [ME, R2, R3, G0], rng)
    assert again["group"]["desired"]["created"] == d["created"]  # (a later desired state keeps it)
