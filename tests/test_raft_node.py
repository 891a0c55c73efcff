"""Focused tests of the sans-IO RAFT node (rillet.raft.node) and its message codec (rillet.raft.msgs).

``Net`` is a synchronous harness: it drains every node's Ready (the in-memory log is the "disk"),
delivers the messages through the binary codec unless a link is cut, and records what was applied."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rillet.raft import msgs as M
from rillet.raft.node import (ADD, CANDIDATE, FOLLOWER, LEADER, PRE_CANDIDATE, REMOVE, Node, NotLeader,
                              ProposalDropped, RaftError)


class Net:
    def __init__(self, ids, **kw):
        self.kw = kw
        self.nodes = {i: Node(i, ids, rng=random.Random(k), **kw) for k, i in enumerate(ids)}
        self.cut: set = set()
        self.applied = {i: [] for i in ids}
        self.snapshots = {i: [] for i in ids}
        self.sent: list = []
        self.queue: list = []

    def add(self, nid, **kw):
        self.nodes[nid] = Node(nid, (), rng=random.Random(99), **{**self.kw, **kw})
        self.applied[nid] = []
        self.snapshots[nid] = []

    def isolate(self, nid):
        for o in self.nodes:
            if o != nid:
                self.cut |= {(nid, o), (o, nid)}

    def pump(self, rounds=200):
        for _ in range(rounds):
            moved = False
            for nid, n in self.nodes.items():
                if n.has_ready():
                    rd = n.ready()
                    moved = True
                    if rd.snapshot is not None:
                        self.snapshots[nid].append(rd.snapshot)
                        self.applied[nid] = [("snapshot", rd.snapshot.index)]
                    for m in rd.messages:
                        self.sent.append(m)
                        if (m.frm, m.to) not in self.cut and m.to in self.nodes:
                            self.queue.append(M.encode(m))
                    self.applied[nid].extend(rd.committed_entries)
                    n.advance(rd)
            q, self.queue = self.queue, []
            for b in q:
                m = M.decode(b)
                self.nodes[m.to].step(m)
                moved = True
            if not moved:
                return
        raise AssertionError("the network did not settle")

    def tick(self, n=1, only=None):
        for _ in range(n):
            for nid, node in self.nodes.items():
                if only is None or nid in only:
                    node.tick()
            self.pump()

    def elect(self, nid):
        for _ in range(40):
            self.tick(only=[nid])
            if self.nodes[nid].role == LEADER:
                return self.nodes[nid]
        raise AssertionError(f"{nid} did not win: {self.nodes[nid].role}")

    def data(self, nid):
        return [e[3] for e in self.applied[nid] if isinstance(e[0], int) and e[2] == M.ENTRY_NORMAL]


def test_election_and_noop_commit():
    net = Net(["n1", "n2", "n3"])
    ld = net.elect("n1")
    assert ld.term == 1
    for nid in ("n2", "n3"):
        n = net.nodes[nid]
        assert (n.role, n.leader, n.term, n.vote) == (FOLLOWER, "n1", 1, "n1")
    net.tick(2)
    assert all(net.applied[i] == [(1, 1, M.ENTRY_NOOP, b"")] for i in net.nodes)


def test_single_node_commits_after_its_own_persist():
    net = Net(["solo"])
    ld = net.elect("solo")
    i, t = ld.propose(b"x")
    assert ld.commit < i  # not committed before the driver persisted it
    net.pump()
    assert net.data("solo") == [b"x"] and ld.commit == i


def test_follower_refuses_proposals_with_the_leader_hint():
    net = Net(["n1", "n2", "n3"])
    net.elect("n2")
    with pytest.raises(NotLeader) as ei:
        net.nodes["n1"].propose(b"x")
    assert ei.value.leader == "n2"


@pytest.mark.parametrize("pre_vote", [True, False])
def test_pre_vote_keeps_a_partitioned_node_from_disrupting(pre_vote):
    net = Net(["n1", "n2", "n3"], pre_vote=pre_vote)
    net.elect("n1")
    net.isolate("n3")
    net.tick(60)
    n3 = net.nodes["n3"]
    if pre_vote:
        assert n3.term == 1 and n3.role == PRE_CANDIDATE
    else:
        assert n3.term > 1 and n3.role == CANDIDATE
    net.cut.clear()
    net.tick(5)
    ld = net.nodes["n1"]
    if pre_vote:  # the cluster did not notice
        assert ld.role == LEADER and ld.term == 1 and n3.leader == "n1" and n3.term == 1
    else:  # the inflated term forced the leader out
        assert ld.term > 1


def test_check_quorum_leader_steps_down_when_cut_off():
    net = Net(["n1", "n2", "n3"])
    ld = net.elect("n1")
    net.isolate("n1")
    net.tick(ld.election_tick - 1, only=["n1"])
    assert ld.role == LEADER  # heard from both followers within the last election timeout
    net.tick(ld.election_tick + 1, only=["n1"])
    assert ld.role == FOLLOWER and ld.leader is None
    with pytest.raises(NotLeader):
        ld.propose(b"x")
    net.tick(40, only=["n2", "n3"])
    assert any(net.nodes[i].role == LEADER for i in ("n2", "n3"))


def test_votes_ignored_while_a_leader_is_heard():
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    n2 = net.nodes["n2"]
    n2.step(M.VoteRequest(5, "n3", "n2", 99, 99))
    assert n2.term == 1 and n2.vote == "n1" and not n2.msgs


def test_replication_batches_and_pipelines():
    net = Net(["n1", "n2", "n3"], max_entries_per_msg=64, max_inflight=4)
    ld = net.elect("n1")
    net.tick(2)
    net.sent.clear()
    for k in range(300):
        ld.propose(b"%d" % k)
    net.pump()
    appends = [m for m in net.sent if isinstance(m, M.AppendEntries) and m.entries]
    assert max(len(m.entries) for m in appends) == 64
    assert len(appends) <= 2 * (300 // 64 + 2)
    for nid in net.nodes:
        assert net.data(nid) == [b"%d" % k for k in range(300)]
    st_ = ld.status()
    assert st_["leader"] == "n1" and st_["commit"] == ld.last_index()
    for p in ("n2", "n3"):
        assert st_["peers"][p]["current"] and st_["peers"][p]["lag"] == 0 and st_["peers"][p]["active"] <= 1


def test_lost_appends_are_recovered_by_probing():
    net = Net(["n1", "n2", "n3"], max_inflight=2)
    ld = net.elect("n1")
    net.tick(2)
    net.cut = {("n1", "n3")}
    for k in range(20):
        ld.propose(b"%d" % k)
    net.pump()
    assert net.data("n2") == [b"%d" % k for k in range(20)] and net.data("n3") == []
    net.cut.clear()
    net.tick(3)
    assert net.data("n3") == [b"%d" % k for k in range(20)]


def test_follower_that_lost_its_log_is_caught_up_from_the_start():
    """A member whose log was in memory (a memory-storage group) restarts empty: its refusals hint below what
    it had acknowledged, and the leader takes its progress back to there instead of probing forever."""
    net = Net(["n1", "n2", "n3"])
    ld = net.elect("n1")
    for k in range(10):
        ld.propose(b"%d" % k)
    net.tick(2)
    assert ld.prs["n3"].match == ld.last_index()
    net.isolate("n3")
    for k in range(10, 15):
        ld.propose(b"%d" % k)
    net.pump()
    net.nodes["n3"] = Node("n3", ["n1", "n2", "n3"], rng=random.Random(7))  # restarted, nothing kept
    net.applied["n3"] = []
    net.cut.clear()
    net.tick(4)
    assert net.data("n3") == [b"%d" % k for k in range(15)]
    assert ld.prs["n3"].match == ld.last_index() and ld.role == LEADER


def test_member_that_lost_its_log_in_an_idle_group_is_found_by_heartbeats():
    """A durable member loses its disk while the group is idle (nothing proposed after it comes back): the
    leader, which held it as current, learns from its answer to a heartbeat that it lacks the entries it
    had acknowledged, reports it behind, and catches it up without any new proposal. The member, started
    with a wrong guess of the voters, takes the founding set from the leader."""
    net = Net(["n1", "n2", "n3"])
    ld = net.elect("n1")
    for k in range(12):
        ld.propose(b"%d" % k)
    net.tick(3)
    assert ld.status()["peers"]["n3"]["current"]
    # n3 comes back empty, knowing only itself and the leader
    net.nodes["n3"] = n3 = Node("n3", ["n1", "n3"], rng=random.Random(7))
    net.applied["n3"] = []
    assert ld.status()["peers"]["n3"]["current"]  # (nothing told the leader yet)
    # its first heartbeat: refused; the leader's view of it drops, the member knows it is behind
    for _ in range(ld.heartbeat_tick):
        ld.tick()
    rd = ld.ready()
    hb = [m for m in rd.messages if type(m) is M.Heartbeat and m.to == "n3"]
    ld.advance(rd)
    assert hb and hb[0].match == ld.last_index() and hb[0].leader_commit == ld.commit
    n3.step(M.decode(M.encode(hb[0])))
    assert n3.leader_commit == ld.commit and n3.commit == 0
    rd = n3.ready()
    (resp,) = [m for m in rd.messages if type(m) is M.HeartbeatResponse]
    n3.advance(rd)
    assert resp.reject and resp.index == ld.last_index() and resp.hint_index == 0
    ld.step(M.decode(M.encode(resp)))
    st_ = ld.status()
    assert not st_["peers"]["n3"]["current"] and st_["peers"]["n3"]["lag"] == ld.last_index()
    assert ld.lost_logs == 1 and ld.last_lost[0] == "n3"
    net.pump()
    assert net.data("n3") == [b"%d" % k for k in range(12)]
    assert n3.voters == ("n1", "n2", "n3") and n3.commit == n3.leader_commit == ld.commit
    assert ld.status()["peers"]["n3"]["current"]
    # a stale refusal (its match moved on since) changes nothing
    ld.step(M.HeartbeatResponse(ld.term, "n3", "n1", True, 3, 0, 0))
    assert ld.prs["n3"].match == ld.last_index() and ld.lost_logs == 1


def test_conflicting_uncommitted_suffix_is_truncated():
    hs1 = M.HardState(1, "n1", 1)
    hs2 = M.HardState(2, "n2", 1)
    base = [(1, 1, M.ENTRY_NOOP, b"")]
    kw = dict(election_tick=10)
    ids = ("n1", "n2", "n3")
    net = Net(ids)
    net.nodes = {
        "n1": Node("n1", ids, rng=random.Random(1), hard_state=hs1,
                   entries=base + [(2, 1, 0, b"a"), (3, 1, 0, b"b")], applied=1, **kw),
        "n2": Node("n2", ids, rng=random.Random(2), hard_state=hs2, entries=base + [(2, 2, 0, b"x")], applied=1, **kw),
        "n3": Node("n3", ids, rng=random.Random(3), hard_state=hs2, entries=base + [(2, 2, 0, b"x")], applied=1, **kw),
    }
    seen = []
    orig = net.nodes["n1"].ready

    def spy():
        rd = orig()
        seen.extend(rd.entries)
        return rd
    net.nodes["n1"].ready = spy
    ld = net.elect("n2")
    assert ld.term == 3
    net.tick(2)
    n1 = net.nodes["n1"]
    assert n1.log == ld.log == base + [(2, 2, 0, b"x"), (3, 3, M.ENTRY_NOOP, b"")]
    assert seen[0][0] == 2  # the driver is told to replace its log from index 2 on
    assert net.data("n1") == [b"x"]


def test_candidate_with_a_stale_log_loses():
    ids = ("n1", "n2", "n3")
    net = Net(ids)
    net.nodes["n1"] = Node("n1", ids, rng=random.Random(1))
    for nid in ("n2", "n3"):
        net.nodes[nid] = Node(nid, ids, rng=random.Random(2), hard_state=M.HardState(1, None, 0),
                              entries=[(1, 1, 0, b"x")])
    for _ in range(40):
        net.tick(only=["n1"])
    assert net.nodes["n1"].role != LEADER


def test_snapshot_install_for_a_lagging_follower():
    net = Net(["n1", "n2", "n3"])
    ld = net.elect("n1")
    net.isolate("n3")
    for k in range(50):
        ld.propose(b"%d" % k)
    net.pump()
    for nid in ("n1", "n2"):
        n = net.nodes[nid]
        n.compact(n.applied, b"state@%d" % n.applied)
    assert ld.offset == 51 and ld.log == []
    net.cut.clear()
    net.tick(3)
    n3 = net.nodes["n3"]
    assert [s.index for s in net.snapshots["n3"]] == [51]
    assert net.snapshots["n3"][0].data == b"state@51" and net.snapshots["n3"][0].peers == ("n1", "n2", "n3")
    assert n3.offset == 51 and n3.applied == 51 and n3.commit == 51
    ld.propose(b"after")
    net.pump()
    assert net.data("n3") == [b"after"] and n3.applied == 52
    assert ld.status()["peers"]["n3"]["current"]


def test_membership_add_then_remove_the_leader():
    net = Net(["n1", "n2", "n3"])
    ld = net.elect("n1")
    net.tick(2)
    ld.propose(b"before")
    net.add("n4")
    ld.propose_conf_change(ADD, "n4")
    with pytest.raises(ProposalDropped, match="configuration change"):
        ld.propose_conf_change(REMOVE, "n2")  # one change at a time
    net.pump()
    net.tick(2)
    assert all(n.voters == ("n1", "n2", "n3", "n4") for n in net.nodes.values())
    assert net.data("n4") == [b"before"]
    with pytest.raises(RaftError, match="already"):
        ld.propose_conf_change(ADD, "n4")
    ld.propose_conf_change(REMOVE, "n1")
    net.pump()
    assert ld.role == FOLLOWER  # the removal committed: the old leader handed over
    net.tick(3)
    new = [n for n in net.nodes.values() if n.role == LEADER]
    assert len(new) == 1 and new[0].id != "n1" and new[0].voters == ("n2", "n3", "n4")
    new[0].propose(b"after")
    net.tick(30)
    assert net.nodes["n1"].role == FOLLOWER  # a removed node does not campaign
    assert all(net.data(i)[-1] == b"after" for i in ("n2", "n3", "n4"))


def test_conf_change_waits_for_a_commit_in_the_leaders_term():
    n = Node("n1", ("n1", "n2", "n3"), rng=random.Random(1))
    for _ in range(40):
        n.tick()
        if n.role == PRE_CANDIDATE:
            break
    n.step(M.VoteResponse(1, "n2", "n1", True, True))
    n.step(M.VoteResponse(1, "n2", "n1", True, False))
    assert n.role == LEADER and n.commit < n.term_start  # its no-op is not yet committed
    with pytest.raises(ProposalDropped, match="not yet committed"):
        n.propose_conf_change(ADD, "n9")
    n.step(M.AppendResponse(1, "n2", "n1", n.last_index()))
    n.advance(n.ready())
    assert n.commit == n.term_start
    n.propose_conf_change(ADD, "n9")
    assert n.voters == ("n1", "n2", "n3", "n9") and n.quorum == 3


def test_leader_transfer_catches_the_target_up_first():
    net = Net(["n1", "n2", "n3"])
    ld = net.elect("n1")
    net.isolate("n3")
    for k in range(10):
        ld.propose(b"%d" % k)
    net.pump()
    net.cut.clear()
    ld.transfer_leadership("n3")
    with pytest.raises(ProposalDropped, match="transfer"):
        ld.propose(b"x")
    net.pump()
    n3 = net.nodes["n3"]
    assert n3.role == LEADER and n3.term == 2 and ld.role == FOLLOWER and ld.leader == "n3"
    n3.propose(b"new")
    net.pump()
    assert net.data("n1")[-1] == b"new" and len(net.data("n1")) == 11


def test_ready_contract():
    net = Net(["n1", "n2", "n3"])
    n = net.nodes["n1"]
    for _ in range(40):
        n.tick()
        if n.has_ready():
            break
    rd = n.ready()
    assert [type(m) for m in rd.messages] == [M.VoteRequest, M.VoteRequest] and rd.messages[0].pre
    assert rd.hard_state is None and not rd.must_sync  # a pre-vote changes nothing durable
    with pytest.raises(RaftError, match="advance"):
        n.ready()
    n.advance(rd)
    n.step(M.VoteResponse(1, "n2", "n1", True, True))  # a pre-vote grant carries the next term
    rd = n.ready()
    assert n.role == CANDIDATE and rd.hard_state == M.HardState(1, "n1", 0) and rd.must_sync
    n.advance(rd)
    with pytest.raises(RaftError):
        n.advance(rd)


# ---- codec ------------------------------------------------------------------------------------------------

ids = st.text(min_size=1, max_size=8)
u = st.integers(min_value=0, max_value=2**40)


@st.composite
def messages(draw):
    term, frm, to = draw(u), draw(ids), draw(ids)
    kind = draw(st.integers(0, 7))
    if kind == 0:
        return M.VoteRequest(term, frm, to, draw(u), draw(u), draw(st.booleans()), draw(st.booleans()))
    if kind == 1:
        return M.VoteResponse(term, frm, to, draw(st.booleans()), draw(st.booleans()))
    if kind == 2:
        prev = draw(u)
        data = draw(st.lists(st.tuples(u, st.sampled_from(M.ENTRY_KINDS), st.binary(max_size=20)), max_size=5))
        return M.AppendEntries(term, frm, to, prev, draw(u), draw(u),
                               [(prev + 1 + k, t, kd, b) for k, (t, kd, b) in enumerate(data)])
    if kind == 3:
        return M.AppendResponse(term, frm, to, draw(u), draw(st.booleans()), draw(u), draw(u))
    if kind == 4:
        return M.Heartbeat(term, frm, to, draw(u))
    if kind == 5:
        return M.HeartbeatResponse(term, frm, to)
    if kind == 6:
        return M.InstallSnapshot(term, frm, to, M.Snapshot(draw(u), draw(u), tuple(draw(st.lists(ids, max_size=5))),
                                                           draw(st.binary(max_size=50))))
    return M.TimeoutNow(term, frm, to)


@settings(max_examples=300, deadline=None)
@given(messages())
def test_codec_roundtrip(m):
    assert M.decode(M.encode(m)) == m


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=80), messages().map(M.encode).flatmap(
    lambda b: st.tuples(st.just(b), st.integers(0, len(b) - 1), st.integers(0, 255)).map(
        lambda t: t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:]))))
def test_decoder_refuses_garbage_with_decode_error(buf):
    try:
        m = M.decode(buf)
    except M.DecodeError:
        return
    assert M.decode(M.encode(m)) == m  # whatever it accepts is a well-formed message


def test_decoder_checks_entry_indexes():
    b = M.encode(M.AppendEntries(1, "a", "b", 5, 1, 0, [(6, 1, 0, b"x"), (8, 1, 0, b"y")]))
    with pytest.raises(M.DecodeError, match="index 8"):
        M.decode(b)
    with pytest.raises(M.DecodeError):
        M.decode(M.encode(M.AppendEntries(1, "a", "b", 5, 1, 0, [(6, 1, 7, b"x")])))
    with pytest.raises(M.DecodeError):
        M.decode(b"")


def test_commit_only_appends_are_not_answered_by_streaming_followers():
    net = Net(["n1", "n2", "n3"], heartbeat_tick=5, election_tick=20)
    ld = net.elect("n1")
    net.tick(1)
    i, _ = ld.propose(b"x")
    net.sent.clear()
    net.pump()
    # every node applied the entry; per follower: the append, its answer, then the new commit unanswered
    assert all(net.data(n) == [b"x"] and net.nodes[n].commit == i for n in net.nodes)
    sent = [(type(m).__name__, m.to, getattr(m, "quiet", None)) for m in net.sent]
    assert sorted(sent) == [("AppendEntries", "n2", False), ("AppendEntries", "n2", True),
                            ("AppendEntries", "n3", False), ("AppendEntries", "n3", True),
                            ("AppendResponse", "n1", None), ("AppendResponse", "n1", None)]
    # a quiet append a follower cannot take (its log does not match) is still refused, so the leader probes
    f = net.nodes["n2"]
    f.step(M.AppendEntries(ld.term, "n1", "n2", i + 5, ld.term, i, [], True))
    assert [type(m).__name__ for m in f.msgs] == ["AppendResponse"] and f.msgs[0].reject
    assert M.decode(M.encode(M.AppendEntries(1, "a", "b", 5, 1, 0, [], True))).quiet is True


def _restart(net, nid, keep_through, recovering=True, mark=0):
    """A restart of ``nid`` from a disk holding its entries up to ``keep_through`` (what was fsynced), its term and
    vote, and the commit index it had saved (above the kept entries when it lost committed ones)."""
    old = net.nodes[nid]
    ents = [e for e in old.log if e[0] <= keep_through]
    hs = M.HardState(old.term, old.vote, min(old.commit, keep_through))
    net.nodes[nid] = Node(nid, old.voters, rng=random.Random(7), hard_state=hs, entries=ents,
                          recovering=recovering, known_commit=old.commit, known_mark=mark)
    net.applied[nid] = []
    return net.nodes[nid]


def _lose_tail_scenario(recovering):
    """n1 leads, x commits on n1 and n2 (n3 cut off); n1's power is cut and it comes back without x, n2 is down."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.cut |= {("n1", "n3"), ("n3", "n1")}
    i, _ = net.nodes["n1"].propose(b"x")
    net.pump()
    assert net.nodes["n1"].commit >= i and net.nodes["n3"].last_index() < i
    net.cut = set()
    n2 = net.nodes.pop("n2")
    _restart(net, "n1", i - 1, recovering)
    return net, n2, i


def test_member_back_from_a_power_cut_does_not_vote_until_it_has_heard_everyone():
    net, n2, i = _lose_tail_scenario(recovering=True)
    n1, n3 = net.nodes["n1"], net.nodes["n3"]
    assert n1.recovering and n1.tail_lost == 1
    net.tick(60)  # n3 campaigns; n1 refuses it (it may have acknowledged entries n3 lacks), and does not campaign
    assert n3.role != LEADER and n1.role != LEADER and n1.recovering
    # n2 comes back (killed, its log intact): every voter answers n1's survey, n2's log is the best
    net.nodes["n2"] = Node("n2", n2.voters, rng=random.Random(3), hard_state=M.HardState(n2.term, n2.vote, n2.commit),
                           entries=n2.log, recovering=True, known_commit=n2.commit)
    net.applied["n2"] = []
    net.tick(80)
    leader = [n for n in net.nodes.values() if n.role == LEADER]
    assert [n.id for n in leader] == ["n2"]
    net.tick(5)
    assert all(n.term_at(i) == 1 and n.log[i - 1][3] == b"x" for n in net.nodes.values())
    assert not n1.recovering and n1.recovered_by == "leader" and n1.lost is None
    assert all(n.lost is None for n in net.nodes.values())


def test_without_recovery_the_same_cut_loses_a_committed_entry():
    """The mutant: the member back from the cut votes at once, and n3 (which never had x) leads without it."""
    net, _n2, i = _lose_tail_scenario(recovering=False)
    net.tick(60)
    leader = [n for n in net.nodes.values() if n.role == LEADER]
    assert leader and leader[0].id == "n3"
    assert leader[0].term_at(i) != 1  # x is gone


def test_power_cut_of_every_member_reports_the_lost_committed_entries():
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    for k in range(5):
        net.nodes["n1"].propose(b"v%d" % k)
    net.pump()
    net.tick(2)
    assert all(n.commit == 6 for n in net.nodes.values())
    for nid, keep in (("n1", 3), ("n2", 4), ("n3", 2)):  # each kept a different synced prefix
        _restart(net, nid, keep)
    net.tick(80)
    leader = [n for n in net.nodes.values() if n.role == LEADER]
    assert [n.id for n in leader] == ["n2"]  # the survey's best log leads
    net.tick(5)
    for n in net.nodes.values():
        assert not n.recovering
        assert n.lost == (5, 6), (n.id, n.lost)  # committed 5 and 6 are nowhere: said, not forked silently
        assert n.status()["lost"] == (5, 6)


def test_a_loss_found_carries_the_highest_mark_any_member_saved():
    """(HardState.mark: a stream's highest sequence saved with the commit) every member that finds the loss learns
    the highest mark of all, whichever member it was saved on, so that a new leader never reuses what it covered."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    for k in range(5):
        net.nodes["n1"].propose(b"v%d" % k)
    net.pump()
    net.tick(2)
    for nid, keep, mark in (("n1", 3, 40), ("n2", 4, 12), ("n3", 2, 7)):
        _restart(net, nid, keep, mark=mark)
    net.tick(80)
    net.tick(5)
    for n in net.nodes.values():
        assert n.lost == (5, 6), (n.id, n.lost)
        assert n.lost_mark == 40, (n.id, n.lost_mark)
    import msgspec
    enc = msgspec.msgpack.encode
    assert msgspec.msgpack.decode(enc(M.HardState(3, "n1", 9, 40)), type=M.HardState) == M.HardState(3, "n1", 9, 40)
    assert msgspec.msgpack.decode(enc([3, "n1", 9]), type=M.HardState).mark == 0  # (saved before marks)


def test_a_member_that_was_not_cut_learns_the_mark_from_a_majority_of_queries():
    n = Node("c", ("a", "b", "c"), rng=random.Random(1), known_mark=5)
    n.step(M.RecoveryQuery(0, "a", "c", 900))
    assert n.lost_mark == 0 and n.floor_events == 0  # (one member back from an unclean stop: a minority)
    n.step(M.RecoveryQuery(0, "b", "c", 300))
    assert n.lost_mark == 900 and n.floor_events == 1 and n.known_mark == 900
    assert M.decode(M.encode(M.RecoveryQuery(0, "a", "c", 900))).known_mark == 900


def test_recovering_member_answers_and_is_answered():
    n = Node("a", ("a", "b"), rng=random.Random(1), recovering=True)
    rd = n.ready()
    assert [type(m) for m in rd.messages] == [M.RecoveryQuery]
    n.advance(rd)
    n.step(M.RecoveryState(0, "b", "a", 0, 0, 0, 0, True))
    assert not n.recovering and n.recovered_by == "survey"
    n.step(M.RecoveryQuery(0, "b", "a"))
    rd = n.ready()
    assert rd.messages == [M.RecoveryState(0, "a", "b", 0, 0, 0, 0, False, True)]
    assert M.decode(M.encode(rd.messages[0])) == rd.messages[0]
