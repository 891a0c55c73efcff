"""Where a RAFT member finds a majority's loss of committed entries (issue 24): a snapshot from the leader, and the
recovery queries of the members that came back from an unclean stop.

A member that saved commit index C before an unclean stop finds a majority's loss of committed entries when an
entry of a later term arrives at or below C (the append path), or from its recovery survey. A snapshot from the
leader replaces its whole log: it carries the leader's terms up to its index (``Snapshot.terms``), and a member
whose log had other terms at or below C (or, past what its log kept, a term after the one it had then) reports
the loss the same way (``Node.lost``, found by "snapshot"). Nothing is concluded where a map says nothing. A leader
that was not cut itself knows the commit indexes the members that asked it to recover had saved (their
RecoveryQuery): one its log does not reach is a loss too (found by "queries")."""
from __future__ import annotations

import random

import msgspec

from rillet.raft import msgs as M
from rillet.raft.node import LEADER, Node
from rillet.raft.recovery import term_in, term_runs
from rillet.raft.sim import run_power_all

from test_raft_node import Net

PEERS = ("n1", "n2", "n3")


def _ents(terms):
    return [(i, t, M.ENTRY_NORMAL, b"e%d" % i) for i, t in enumerate(terms, 1)]


def test_term_runs_and_term_in():
    ents = _ents([1, 1, 1, 2, 2, 4, 4, 4])
    assert term_runs((), ents) == ((1, 1), (4, 2), (6, 4))
    assert term_runs(((1, 1),), ents[3:]) == ((1, 1), (4, 2), (6, 4))  # (continues a snapshot's map)
    assert term_runs(((1, 1), (4, 2)), ents[4:]) == ((1, 1), (4, 2), (6, 4))
    many = [(i, i, M.ENTRY_NORMAL, b"") for i in range(1, 101)]
    assert len(term_runs((), many)) == M.TERMS_KEPT and term_runs((), many)[0] == (101 - M.TERMS_KEPT,) * 2
    assert len(term_runs((), many, None)) == 100
    m = ((3, 1), (4, 2), (6, 4))
    assert [term_in(m, i) for i in range(1, 9)] == [None, None, 1, 2, 2, 4, 4, 4]
    assert term_in((), 5) is None


def test_compaction_keeps_the_terms_and_the_codecs_carry_them():
    net = Net(list(PEERS))
    ld = net.elect("n1")
    for k in range(3):
        ld.propose(b"a%d" % k)
    net.pump()
    ld.compact(ld.applied, b"s1")
    t1 = ld.term
    assert ld.snapshot.terms == ((1, t1),)
    ld.transfer_leadership("n2")  # (a later term)
    net.pump()
    ld2 = net.nodes["n2"]
    assert ld2.role == LEADER and ld2.term > t1
    for k in range(3):
        ld2.propose(b"b%d" % k)
    net.pump()
    first = ld2.term_start
    ld2.compact(ld2.applied, b"s2")
    assert ld2.snapshot.terms == ((1, t1), (first, ld2.term)), ld2.snapshot
    m = M.InstallSnapshot(ld2.term, "n2", "n3", ld2.snapshot)
    assert M.decode(M.encode(m)).snapshot.terms == ld2.snapshot.terms
    # a snapshot written before the map existed (four fields) reads as one without it
    old = msgspec.msgpack.encode([9, 2, ["n1"], b"x"])
    assert msgspec.msgpack.decode(old, type=M.Snapshot) == M.Snapshot(9, 2, ("n1",), b"x", ())


def _back(log_terms, known_commit, commit=None):
    """A member back from an unclean stop: its log kept ``log_terms``, it had saved ``known_commit``."""
    ents = _ents(log_terms)
    last_term = log_terms[-1] if log_terms else 0
    hs = M.HardState(last_term, None, min(commit if commit is not None else known_commit, len(ents)))
    return Node("n1", PEERS, rng=random.Random(1), hard_state=hs, entries=ents, recovering=True,
                known_commit=known_commit)


def _install(n, index, term, terms):
    n.step(M.InstallSnapshot(term, "n2", "n1", M.Snapshot(index, term, PEERS, b"state", terms)))
    return n


def test_a_snapshot_that_replaced_committed_entries_is_a_loss():
    # the member had 1..7 (terms 1,1,1,2,2,2,2) and saved commit 10 (8..10 lost with its unsynced tail); the
    # leader's log has term 4 from index 6: 6..10 as committed here are gone
    n = _install(_back([1, 1, 1, 2, 2, 2, 2], 10), 12, 4, ((1, 1), (4, 2), (6, 4)))
    assert n.lost == (6, 10) and n.lost_events == 1 and n.lost_by == "snapshot"
    assert n.offset == 12 and n.commit == 12  # (installed all the same: the cluster's history goes on)
    assert n.status()["lost"] == (6, 10)


def test_an_older_term_in_the_snapshot_where_the_log_had_a_newer_one_is_a_loss():
    n = _install(_back([1, 1, 1, 2, 2, 2, 2], 7), 9, 3, ((1, 1), (5, 2), (8, 3)))
    assert n.lost == (4, 7) and n.lost_by == "snapshot"  # (4 was of term 2 here, of term 1 in the leader's)


def test_only_the_lost_tail_past_the_log():
    # 1..7 as the leader has them; 8 is of term 2 there, as what was committed here was (boot term 2): the same
    # entry; 9 and 10 are of term 4, after anything this member knew: gone
    n = _install(_back([1, 1, 1, 2, 2, 2, 2], 10), 12, 4, ((1, 1), (4, 2), (9, 4)))
    assert n.lost == (9, 10)


def test_a_snapshot_agreeing_with_the_committed_entries_is_no_loss():
    n = _install(_back([1, 1, 1, 2, 2, 2, 2], 10), 12, 4, ((1, 1), (4, 2), (11, 4)))
    assert n.lost is None and n.offset == 12
    # a member whose map of its own snapshot holds the terms below its log agrees the same way
    n = _back([1, 1, 1, 2, 2, 2, 2], 10)
    n.applied = n.commit
    n.compact(5, b"s5")
    assert n.snapshot.terms == ((1, 1), (4, 2))
    _install(n, 12, 4, ((1, 1), (4, 2), (11, 4)))
    assert n.lost is None


def test_nothing_is_concluded_without_the_terms():
    n = _install(_back([1, 1, 1, 2, 2, 2, 2], 10), 12, 4, ())  # (a snapshot from before the map existed)
    assert n.lost is None and n.offset == 12
    # a map that starts past the saved commit (older pairs dropped) says nothing about the entries up to it
    n = _install(_back([1, 1, 1, 2, 2, 2, 2], 10), 90, 9, ((40, 8), (80, 9)))
    assert n.lost is None
    # a member that never saved a commit past nothing (a fresh one) checks nothing
    n = _install(_back([], 0), 12, 4, ((1, 1), (6, 4)))
    assert n.lost is None and n.offset == 12


def test_a_snapshot_at_or_below_the_commit_is_checked_too():
    n = _back([1, 1, 1, 2, 2, 2, 2], 7)
    _install(n, 6, 4, ((1, 1), (4, 2), (6, 4)))  # (below the commit: not installed, but it contradicts entry 6 here)
    assert n.lost == (6, 7) and n.offset == 0


def test_a_member_that_catches_up_through_a_snapshot_reports_the_majoritys_loss():
    """Every member is power-cut and keeps 1..3 of 1..6 committed; n1 and n2 had saved commit 3, n3 had saved 6.
    n1 and n2 finish their surveys with n3's answers (they find 4..6 lost) and elect a leader while n3 is cut
    off; n3's own survey never completes (the answers to it are lost), so it learns nothing there; the leader
    writes past 3 in its term and compacts, and n3 catches up through its snapshot: it reports 4..6 lost."""
    net = Net(list(PEERS))
    ld = net.elect("n1")
    for k in range(5):
        ld.propose(b"v%d" % k)
    net.pump()
    net.tick(2)
    assert all(n.commit == 6 for n in net.nodes.values())
    for nid, known in (("n1", 3), ("n2", 3), ("n3", 6)):
        old = net.nodes[nid]
        net.nodes[nid] = Node(nid, PEERS, rng=random.Random(int(nid[1])),
                              hard_state=M.HardState(old.term, old.vote, 3), entries=old.log[:3], recovering=True,
                              known_commit=known)
        net.applied[nid] = []
    n3 = net.nodes["n3"]
    step = n3.step
    n3.step = lambda m: None if type(m) is M.RecoveryState else step(m)  # (its survey never completes)
    net.pump()
    n1, n2 = net.nodes["n1"], net.nodes["n2"]
    assert n1.lost == (4, 6) and n2.lost == (4, 6) and not n1.recovering and not n2.recovering
    assert n3.recovering and n3.lost is None
    net.isolate("n3")
    for _ in range(100):
        net.tick(only=["n1", "n2"])
        if any(n.role == LEADER for n in (n1, n2)):
            break
    ld = n1 if n1.role == LEADER else n2
    assert ld.role == LEADER
    for k in range(4):
        ld.propose(b"w%d" % k)
    net.pump()
    for n in (n1, n2):
        n.compact(n.applied, b"after")
    assert ld.offset > 6 and ld.snapshot.terms[-1] == (4, ld.term)
    net.cut.clear()
    net.tick(5)
    assert net.snapshots["n3"], "n3 caught up without a snapshot"
    assert n3.lost == (4, 6) and n3.lost_by == "snapshot"
    assert not n3.recovering and n3.commit == ld.commit


def test_power_cuts_of_every_node_leave_no_member_silent(monkeypatch):
    """The simulator's power-all runs, late variant: one member never hears the answers to its recovery queries
    and comes back to a leader that compacted past its log: it catches up through a snapshot, and when that
    replaced entries it had committed, it must report the loss itself (run_power_all checks every node that had
    saved a commit index covering an entry now gone). Without the snapshot check, such runs fail."""
    from rillet.raft.recovery import Recovery
    found = 0
    for seed in range(40):
        v, sim, _lost = run_power_all(seed, late=True)
        assert not v, (seed, v[:3])
        found += sim.stats["lost_found_by_snapshot"]
    assert found >= 3, found
    monkeypatch.setattr(Recovery, "_check_snapshot", lambda self, s: None)
    silent = [seed for seed in range(40) if any("reports no loss" in x for x in run_power_all(seed, late=True)[0])]
    assert silent, "the late runs no longer exercise the snapshot check"


def test_a_leader_that_was_not_cut_finds_the_loss_from_the_queries():
    """n3 stopped cleanly before the last entries (its log 1..3, nothing to recover); n1 and n2 committed 4..6
    without it, saved commit 6, and lost 4..6 at a power cut. n1 and n2 find the loss in their surveys; n3, which
    they asked to recover (their queries carry the commit they had saved), leads: its log ends before 6, so the
    committed entries up to 6 are gone, and it reports them too (a leader that knows the loss tells the others:
    the owner's LOST entry)."""
    net = Net(list(PEERS))
    ld = net.elect("n1")
    ld.propose(b"v0")
    ld.propose(b"v1")
    net.pump()
    net.tick(2)
    assert all(n.commit == 3 for n in net.nodes.values())
    old3 = net.nodes["n3"]
    net.isolate("n3")
    for k in range(3):
        ld.propose(b"w%d" % k)
    net.pump()
    assert ld.commit == 6 and old3.last_index() == 3
    net.nodes["n3"] = Node("n3", PEERS, rng=random.Random(3), hard_state=M.HardState(old3.term, old3.vote, 3),
                           entries=old3.log)  # (a clean stop: no recovery)
    for nid in ("n1", "n2"):
        old = net.nodes[nid]
        net.nodes[nid] = Node(nid, PEERS, rng=random.Random(int(nid[1])),
                              hard_state=M.HardState(old.term, old.vote, 3), entries=old.log[:3], recovering=True,
                              known_commit=6)
    net.cut.clear()
    net.pump()
    n1, n2, n3 = (net.nodes[i] for i in PEERS)
    assert n1.lost == (4, 6) and n2.lost == (4, 6) and n3.lost is None
    assert n3.queried and not n3.recovering
    for _ in range(100):
        net.tick(only=["n3"])
        if n3.role == LEADER:
            break
    assert n3.role == LEADER
    assert n3.lost == (4, 6) and n3.lost_by == "queries"
    net.tick(3)
    assert n1.commit == n3.commit == 4 and n1.term_at(4) == n3.term


def test_no_loss_from_the_queries_when_the_leader_holds_the_saved_commits():
    """A minority's power cut: n1 comes back without its tail (saved commit 6), n2 and n3 hold 1..6; whoever leads
    holds 6, and nothing is found lost."""
    net = Net(list(PEERS))
    ld = net.elect("n1")
    for k in range(5):
        ld.propose(b"v%d" % k)
    net.pump()
    net.tick(2)
    old = net.nodes["n1"]
    net.nodes["n1"] = Node("n1", PEERS, rng=random.Random(1), hard_state=M.HardState(old.term, old.vote, 3),
                           entries=old.log[:3], recovering=True, known_commit=6)
    net.pump()
    n3 = net.nodes["n3"]
    assert n3.queried
    for _ in range(100):
        net.tick(only=["n3"])
        if n3.role == LEADER:
            break
    assert n3.role == LEADER
    net.tick(3)
    assert all(n.lost is None for n in net.nodes.values())
    assert M.decode(M.encode(M.RecoveryQuery(1, "a", "b", 5, 9))).known_commit == 9
    import msgspec as ms
    assert ms.msgpack.decode(ms.msgpack.encode([9, 1, "a", "b", 5]), type=M.RecoveryQuery).known_commit == 0


def test_the_wal_keeps_the_terms(tmp_path):
    from rillet.raft.wal import WAL
    w, _ = WAL.open(str(tmp_path), "always")
    w.save_snapshot(M.Snapshot(20, 2, PEERS, b"state@20", ((1, 1), (4, 2))))
    w.close()
    w, rec = WAL.open(str(tmp_path), "always")
    w.close()
    assert rec.snapshot.terms == ((1, 1), (4, 2)) and rec.snapshot.index == 20
