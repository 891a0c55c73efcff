"""A member whose store was wiped comes back empty (tests/faults/wiped-vote.md, the drill's seed 11).

Three rillet.raft Nodes by hand: A leads and commits E with B while C is down; A's store is wiped; B is killed
(single wipe) or wiped too (double wipe); C and the empty A come back, then B.

* Started as a brand-new member (no state, not recovering: Rillet before the fix), the empty A votes for C,
  which lacks E: C leads, gives E's index again, and B comes back holding E at an index where C has its no-op
  (a fork), with nothing reported.
* Started ``recovering=True, votes_lost=True, wiped=True`` (the fix for a member of a group its server had before): no
  leader while B is down; once B is back, E is on all three.
* Both A and B wiped: fewer members than a quorum kept their logs. The wiped members report a loss from past C's
  log (``lost``, ``lost_by == "wiped"``, ``lost_open``) and set no vote floor, so C never leads and never gives
  E's index again.
"""
from __future__ import annotations

import os
import random

from rillet.raft.msgs import RecoveryState, decode, encode
from rillet.raft.node import LEADER, Node

IDS = ("A", "B", "C")


class Srv:
    def __init__(self, nid: str) -> None:
        self.id = nid
        self.hs = None
        self.entries: list = []
        self.node: Node | None = None
        self.up = False

    def start(self, wiped_member: bool = False, seed: int = 0) -> None:
        self.node = Node(self.id, IDS, rng=random.Random(seed), election_tick=10, heartbeat_tick=1,
                         hard_state=self.hs, entries=list(self.entries),
                         recovering=wiped_member, votes_lost=wiped_member, wiped=wiped_member)
        self.up = True

    def wipe(self) -> None:
        self.hs, self.entries, self.node, self.up = None, [], None, False

    def kill(self) -> None:
        self.node, self.up = None, False


class Cluster:
    def __init__(self) -> None:
        self.s = {i: Srv(i) for i in IDS}
        self.net: list = []

    def pump(self) -> None:
        for _ in range(500):
            moved = False
            for s in self.s.values():
                if not s.up:
                    continue
                while s.node.has_ready():
                    rd = s.node.ready()
                    moved = True
                    if rd.entries:
                        first = rd.entries[0][0]
                        s.entries = [e for e in s.entries if e[0] < first] + list(rd.entries)
                    if rd.hard_state is not None:
                        s.hs = rd.hard_state
                    # (through the wire format: the new RecoveryState field must travel)
                    self.net.extend(decode(encode(m)) for m in rd.messages)
                    s.node.advance(rd)
            while self.net:
                m = self.net.pop(0)
                moved = True
                d = self.s.get(m.to)
                if d is not None and d.up:
                    d.node.step(m)
            if not moved:
                return

    def ticks(self, n: int) -> None:
        for _ in range(n):
            for s in self.s.values():
                if s.up:
                    s.node.tick()
            self.pump()

    def leader(self) -> Srv | None:
        ls = [s for s in self.s.values() if s.up and s.node.role == LEADER]
        return ls[0] if ls else None

    def leaders_seen(self, n: int) -> set:
        seen = set()
        for _ in range(n):
            self.ticks(1)
            ld = self.leader()
            if ld is not None:
                seen.add(ld.id)
        return seen


def _setup() -> tuple[Cluster, int]:
    """A leads, E committed on A and B only (C down). Returns the cluster and E's index."""
    c = Cluster()
    for k, s in enumerate(c.s.values()):
        s.start(seed=k)
    for _ in range(100):
        c.ticks(1)
        if c.leader() is not None:
            break
    ld = c.leader()
    assert ld is not None
    if ld.id != "A":
        ld.node.transfer_leadership("A")
        c.ticks(30)
    assert c.leader() is not None and c.leader().id == "A"
    for k in range(5):
        c.s["A"].node.propose(b"m%d" % k)
    c.ticks(5)
    c.s["C"].kill()
    idx, _ = c.s["A"].node.propose(b"E")
    c.ticks(3)
    assert c.s["A"].node.commit >= idx
    assert any(e[0] == idx and e[3] == b"E" for e in c.s["B"].entries)
    assert not any(e[0] == idx for e in c.s["C"].entries)
    return c, idx


def _at(c: Cluster, idx: int) -> dict:
    return {s.id: next((e[3] for e in s.entries if e[0] == idx), None) for s in c.s.values()}


def run_single(fixed: bool) -> tuple[set, dict, Cluster]:
    c, idx = _setup()
    c.s["A"].wipe()
    c.s["B"].kill()
    c.s["C"].start(seed=11)
    c.s["A"].start(wiped_member=fixed, seed=12)
    while_down = c.leaders_seen(150)
    c.s["B"].start(seed=13)
    for _ in range(400):
        c.ticks(1)
        if c.leader() is not None:
            break
    ld = c.leader()
    assert ld is not None
    ld.node.propose(b"G")
    c.ticks(30)
    return while_down, _at(c, idx), c


def test_wiped_member_started_new_votes_and_forks():
    """The control (Rillet before the fix): the empty A elects C, and E is gone though B holds it."""
    while_down, at, c = run_single(fixed=False)
    assert while_down == {"C"}
    assert at["C"] != b"E" and at["B"] == b"E"  # (a fork: B's E at C's no-op's index)
    assert all(s.node.lost is None for s in c.s.values())  # (and silent)


def test_wiped_member_recovering_gives_no_vote():
    while_down, at, c = run_single(fixed=True)
    assert while_down == set()  # (no leader while B, the only other holder of E, is down)
    assert at == {"A": b"E", "B": b"E", "C": b"E"}
    a = c.s["A"].node
    assert not a.recovering and not a.votes_lost and not a.stateless
    assert all(s.node.lost is None for s in c.s.values())
    # the three logs are one
    logs = {s.id: [(e[0], e[1], e[3]) for e in s.entries if e[0] > 0] for s in c.s.values()}
    assert logs["A"] == logs["B"] == logs["C"]


def test_double_wipe_reported_and_no_leader():
    c, idx = _setup()
    c_last = c.s["C"].entries[-1][0]
    c.s["A"].wipe()
    c.s["B"].wipe()
    c.s["C"].start(seed=11)
    c.s["A"].start(wiped_member=True, seed=12)
    assert c.leaders_seen(100) == set()
    c.s["B"].start(wiped_member=True, seed=13)
    assert c.leaders_seen(400) == set()  # (C, the only log left, lacks E: it must not lead and give E's index)
    for nid in ("A", "B"):
        n = c.s[nid].node
        assert n.lost is not None and n.lost[0] == c_last + 1 <= idx
        assert n.lost_by == "wiped" and n.lost_open
        assert n.recovering and n.vote_floor is None
        assert n.lost_events == 1  # (reported once, not at every survey)
    assert _at(c, idx)["C"] is None
    assert c.s["C"].node.last_index() == c_last


def test_double_wipe_with_a_live_leader_reports_nothing():
    """Two members wiped one after the other while the third leads throughout: the leader holds every committed
    entry (the wiped members gave no vote since), so nothing is lost: no report, both caught up from it."""
    c, idx = _setup()
    c.s["C"].start(seed=11)
    for _ in range(300):
        c.ticks(1)
        if c.s["C"].node.commit >= idx and c.s["C"].node.last_index() >= idx:
            break
    ld = c.leader()
    if ld.id != "C":
        ld.node.transfer_leadership("C")
        c.ticks(40)
    assert c.leader() is not None and c.leader().id == "C"
    c.s["A"].wipe()
    c.s["A"].start(wiped_member=True, seed=12)
    c.s["B"].wipe()
    c.s["B"].start(wiped_member=True, seed=13)
    c.ticks(200)
    assert all(s.node.lost is None for s in c.s.values())
    assert not c.s["A"].node.recovering and not c.s["B"].node.recovering
    assert _at(c, idx) == {"A": b"E", "B": b"E", "C": b"E"}


def test_double_wipe_unfixed_forks_silently():
    """The control: with both wiped members started as new ones, C leads without E and nobody reports it."""
    c, idx = _setup()
    c.s["A"].wipe()
    c.s["B"].wipe()
    c.s["C"].start(seed=11)
    c.s["A"].start(seed=12)
    c.s["B"].start(seed=13)
    assert "C" in c.leaders_seen(200)
    assert all(s.node.lost is None for s in c.s.values())


def test_new_group_elects_at_once():
    """Three fresh members of a new group (not wiped: not recovering) elect a leader as before."""
    c = Cluster()
    for k, s in enumerate(c.s.values()):
        s.start(seed=k)
    assert c.leaders_seen(60)


def test_recovery_state_wiped_field_defaults():
    """An old sender's RecoveryState (no ``wiped``) decodes as not wiped."""
    m = RecoveryState(1, "A", "B", 3, 1, 3, 3)
    assert m.wiped is False
    assert decode(encode(RecoveryState(1, "A", "B", 0, 0, 0, 0, True, True, 0, True))).wiped is True
    assert m.leader is False


# ---- which members count as wiped: the meta layer's record (rillet/jetstream/cluster/wipedmember.py) ----------

class _G:
    def __init__(self, name: str, peers: list) -> None:
        self.name, self.peers = name, peers


class _A:
    def __init__(self, name: str, peers: list, consumers: dict | None = None) -> None:
        self.group = _G(name, peers)
        self.consumers = consumers or {}


class _N:
    def __init__(self, term: int = 0, last: int = 0, offset: int = 0, commit: int = 0, leader_commit: int = 0):
        self.term, self._last, self.offset, self.commit, self.leader_commit = term, last, offset, commit, leader_commit

    def last_index(self) -> int:
        return self._last


def test_member_history_cases(tmp_path):
    from rillet.jetstream.cluster.wipedmember import JOIN_FILE, MemberHistory
    d = str(tmp_path / "meta")
    # a brand-new server: stateless start, its first commit before any assignment; nothing old, nothing saved
    h = MemberHistory("me")
    h.load(d)
    h.started(_N())
    h.committing(_N(commit=1))
    h.stream(_A("S-0", ["me", "x", "y"]), h.is_old(2))
    assert not h.old and not os.path.exists(os.path.join(d, JOIN_FILE))
    # case 2: a wiped server (stateless start): what was committed before the first leader's commit heard is old
    h = MemberHistory("me")
    h.load(d)
    h.started(_N())
    assert h.stateless_start and h.is_old(5)  # (nothing heard yet)
    assert h.restored()  # (a snapshot installed before it)
    h.committing(_N(commit=0, leader_commit=120))
    assert h.is_old(120) and not h.is_old(121) and not h.restored()
    h.committing(_N(commit=130, leader_commit=130))  # (only the first time counts)
    assert not h.is_old(125)
    h.stream(_A("S-1", ["me", "x", "y"], {"c": _A("C-1", ["me", "x", "y"])}), h.is_old(12))
    assert h.old == {"S-1", "C-1"}
    assert open(os.path.join(d, JOIN_FILE)).read() == "120"  # (saved before the member is created)
    # case 4: a live entry (a new stream): not old; an assignment not naming this server, a move away: not old
    h.stream(_A("S-2", ["me", "x", "y"]), h.is_old(121))
    h.stream(_A("S-3", ["x", "y", "z"]), h.is_old(10))
    h.stream(_A("S-1", ["x", "y", "z"]), h.is_old(130))
    assert h.old == {"C-1"}  # (its consumer goes with its own assignment)
    # restarted with state: the assignments up to the saved index are still old (a member not started or not
    # caught up before the restart is still wiped); later ones, re-applied from the WAL, are not (case 1 alone)
    h = MemberHistory("me")
    h.load(d)
    h.started(_N(term=3, last=400, commit=390))
    assert h.is_old(120) and not h.is_old(121) and not h.is_old(300)
    h.starting = True
    assert h.restored()  # (its own snapshot at start: which of them came before is not known)
    # case 3: a server never wiped: catch-up past its WAL, replays of its WAL: not old
    h = MemberHistory("me")
    h.load(str(tmp_path / "other"))
    h.started(_N(term=3, last=40, commit=38))
    assert not h.is_old(12) and not h.is_old(41)
    h.starting = True
    assert not h.restored()


def _double_wipe_reported() -> tuple[Cluster, int, int]:
    c, idx = _setup()
    c_last = c.s["C"].entries[-1][0]
    c.s["A"].wipe()
    c.s["B"].wipe()
    c.s["C"].start(seed=11)
    c.s["A"].start(wiped_member=True, seed=12)
    c.s["B"].start(wiped_member=True, seed=13)
    assert c.leaders_seen(200) == set()
    return c, idx, c_last


def test_double_wipe_survivor_learns_the_loss():
    """C kept its log and is not recovering (it makes no survey of its own): the wiped members' queries tell it
    the loss (RecoveryQuery.lost_from), so it reports it too."""
    c, idx, c_last = _double_wipe_reported()
    n = c.s["C"].node
    assert not n.recovering
    assert n.lost_open and n.lost_by == "wiped" and n.lost is not None and n.lost[0] == c_last + 1
    assert n.lost_events == 1


def test_double_wipe_resumed_when_the_loss_is_accepted():
    """An operator accepts the loss on one wiped member (rillet/jetstream/cluster/resume.py): its survey sets
    the vote floor at C's log, C (the best log left) is elected with its vote, both wiped members catch up from
    C, and the loss stays reported everywhere. E's index is given again: what the loss accepted."""
    c, idx, c_last = _double_wipe_reported()
    assert c.s["C"].node.accept_loss()  # (not recovering: nothing to do but report it was known)
    assert c.leaders_seen(100) == set()  # (C's acceptance alone changes nothing: the wiped members refuse)
    assert c.s["A"].node.accept_loss()
    seen = c.leaders_seen(300)
    assert seen == {"C"}, seen
    c.s["C"].node.propose(b"after")
    c.ticks(60)
    for nid in IDS:
        n = c.s[nid].node
        assert not n.recovering and not n.stateless and not n.loss_accepted, nid
        assert n.lost is not None and n.lost[0] == c_last + 1 and n.lost_open, nid
    logs = {s.id: [(e[0], e[1], e[3]) for e in s.entries if e[0] > 0] for s in c.s.values()}
    assert logs["A"] == logs["B"] == logs["C"]
    assert logs["C"][-1][2] == b"after"
    assert _at(c, idx)["C"] != b"E"  # (E is gone: the loss accepted)
    assert not c.s["A"].node.accept_loss()  # (a leader is known: nothing to accept)


def test_accept_loss_without_a_loss_does_nothing():
    """accept_loss on a member of a group that lost nothing (one wiped member, the others up) is refused and
    changes nothing."""
    while_down, at, c = run_single(fixed=True)
    for s in c.s.values():
        assert not s.node.accept_loss()
        assert not s.node.loss_accepted
