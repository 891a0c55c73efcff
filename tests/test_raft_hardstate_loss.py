"""A damaged RAFT hard state (issue 24): the WAL's copy of it (rillet.raft.wal), and a node whose term and vote
were lost (rillet.raft.node ``votes_lost``): it grants no vote in a term it may have voted in before the loss."""
from __future__ import annotations

import os
import random

import pytest

from rillet.raft import msgs as M
from rillet.raft.msgs import HardState
from rillet.raft.node import LEADER, Node
from rillet.raft.wal import WAL, WALCorruption

from test_raft_node import Net


def ents(lo, hi, term=1):
    return [(i, term, 0, b"x%d" % i) for i in range(lo, hi + 1)]


def _flip(path: str, at: int = -1) -> None:
    b = bytearray(open(path, "rb").read())
    b[at] ^= 0x21
    open(path, "wb").write(b)


def _wal(tmp_path, hs=HardState(3, "n2", 5, 70)):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d)
    w.append(ents(1, 4, term=1) + ents(5, 6, term=2))
    w.save_hard_state(hs)
    w.close()
    return d


# ---- the WAL ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["flip", "torn", "missing"])
def test_a_damaged_primary_is_taken_from_its_copy_and_rewritten(tmp_path, how):
    d = _wal(tmp_path)
    p = os.path.join(d, "hardstate")
    if how == "flip":
        _flip(p, 14)
    elif how == "torn":
        os.truncate(p, 7)
    else:
        os.unlink(p)
    w, rec = WAL.open(d)  # (no repair needed: nothing is lost)
    assert rec.hard_state == HardState(3, "n2", 5, 70) and not rec.votes_lost
    assert "hardstate.copy" in rec.hs_note and os.path.join(d, "hardstate") in rec.hs_note
    w.close()
    rec = WAL.open(d)[1]  # (the primary was rewritten from the copy)
    assert rec.hard_state == HardState(3, "n2", 5, 70) and rec.hs_note == ""


def test_a_damaged_or_missing_copy_is_rewritten_from_the_primary(tmp_path):
    d = _wal(tmp_path)
    c = os.path.join(d, "hardstate.copy")
    _flip(c)
    rec = WAL.open(d)[1]
    assert rec.hard_state == HardState(3, "n2", 5, 70) and "hardstate.copy" in rec.hs_note
    os.unlink(c)  # (a log written before the copy existed: made silently)
    rec = WAL.open(d)[1]
    assert rec.hs_note == "" and os.path.exists(c)
    _flip(os.path.join(d, "hardstate"))
    assert WAL.open(d)[1].hard_state == HardState(3, "n2", 5, 70)
    os.truncate(c, 0)  # (an unsynced copy after a power cut: expected, rewritten without a note)
    rec = WAL.open(d)[1]
    assert rec.hard_state == HardState(3, "n2", 5, 70) and rec.hs_note == "" and os.path.getsize(c) > 0


def test_the_copy_holds_every_term_and_vote_the_primary_held_when_they_were_saved(tmp_path, monkeypatch):
    """A crash between the two writes: the primary (written first) wins and the copy is put right at once, so a
    later damage of the primary cannot bring back the older term and vote."""
    d = _wal(tmp_path)
    w, _ = WAL.open(d)
    real = os.replace

    def crash_on_copy(src, dst):
        if dst.endswith("hardstate.copy"):
            raise OSError("crash")
        real(src, dst)
    monkeypatch.setattr(os, "replace", crash_on_copy)
    with pytest.raises(OSError):
        w.save_hard_state(HardState(4, "n3", 6, 80))
    monkeypatch.undo()
    WAL.open(d)  # (the node may now send its vote for n3 in term 4: the copy must hold it)
    _flip(os.path.join(d, "hardstate"), 14)
    assert WAL.open(d)[1].hard_state == HardState(4, "n3", 6, 80)


def test_the_copy_is_fsynced_only_when_its_term_or_vote_changes(tmp_path, monkeypatch):
    d = _wal(tmp_path)
    w, _ = WAL.open(d)
    synced: list = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)

    def copies():
        return [p for p in synced if p.endswith("hardstate.copy.tmp") or p.endswith("hardstate.copy")]
    w.save_hard_state(HardState(3, "n2", 5, 90))  # (commit and mark only: the copy is not fsynced)
    assert copies() == [] and any(p.endswith("hardstate.tmp") for p in synced)
    w.save_hard_state(HardState(4, None, 5, 90))  # (a new term: fsynced)
    assert len(copies()) == 1
    w.save_hard_state(HardState(4, None, 6, 95))
    assert len(copies()) == 1
    w.close()  # (a clean stop makes the copy durable)
    assert len(copies()) == 2
    monkeypatch.undo()
    _flip(os.path.join(d, "hardstate"), 14)
    assert WAL.open(d)[1].hard_state == HardState(4, None, 6, 95)


def test_both_damaged_the_votes_are_lost_until_a_vote_is_saved(tmp_path):
    d = _wal(tmp_path, HardState(7, "n2", 5, 70))
    for name in ("hardstate", "hardstate.copy"):
        _flip(os.path.join(d, name), 14)
    with pytest.raises(WALCorruption, match="hardstate"):
        WAL.open(d)  # (without repair: as before)
    w, rec = WAL.open(d, repair=True)
    # (the term from the log's last entry: 7 was in the lost files only; no vote, no commit known)
    assert rec.votes_lost and rec.hard_state == HardState(2, None, 0, 0) and rec.stored_commit == 0
    assert "lost" in rec.hs_note and os.path.exists(os.path.join(d, "hardstate.lost"))
    assert [e[0] for e in rec.entries] == list(range(1, 7))  # (the log is kept)
    w.save_hard_state(HardState(3, None, 6, 70))  # (a term followed, no vote: still lost after a restart)
    w.close()
    w, rec = WAL.open(d, repair=True)
    assert rec.votes_lost and rec.hard_state == HardState(3, None, 6, 70) and "hardstate.lost" in rec.hs_note
    w.save_hard_state(HardState(9, "n1", 6, 70))  # (the node knows its terms again: a vote recorded)
    w.close()
    rec = WAL.open(d, repair=True)[1]
    assert not rec.votes_lost and rec.hard_state == HardState(9, "n1", 6, 70) and rec.hs_note == ""
    assert not os.path.exists(os.path.join(d, "hardstate.lost"))


# ---- the node -----------------------------------------------------------------------------------------------

def _lost(net: Net, nid: str, like: str) -> Node:
    """``nid`` restarted with ``like``'s log and its hard state lost (the term from the log, no vote)."""
    src = net.nodes[like]
    n = Node(nid, tuple(net.nodes), rng=random.Random(7), hard_state=HardState(src.last_term(), None, 0),
             entries=list(src.log), recovering=True, votes_lost=True)
    net.nodes[nid] = n
    net.applied[nid] = []
    return n


def _grants(net: Net, to: str) -> list:
    return [m for m in net.sent if type(m) is M.VoteResponse and m.frm == to and m.granted]


def test_no_vote_until_every_voter_told_its_term_then_none_at_or_below_the_highest():
    """n3 had voted for n2 in term 9 (n2, cut off from n1, a candidate there for ever after); its hard state is
    lost. It follows the leader n1 at an older term and catches up, but grants no vote while n2 is not heard:
    a majority (n1 and itself) does not know term 9. Once n2 answers, it votes for itself in 9: n1 asking for 9
    is refused, for 10 granted."""
    net = Net(("n1", "n2", "n3"))
    ld = net.elect("n1")
    for k in range(5):
        ld.propose(b"d%d" % k)
    net.pump()
    net.nodes["n2"].term = 9  # (the candidate n3 voted for before the loss)
    net.nodes["n2"].vote = "n2"
    n3 = _lost(net, "n3", "n1")
    net.cut |= {("n2", "n3"), ("n3", "n2"), ("n1", "n2"), ("n2", "n1")}
    net.tick(60, only=["n1", "n3"])
    assert n3.votes_lost and not n3.recovering and n3.commit == ld.commit and n3.role != LEADER
    assert "n1" in n3.term_heard and "n2" not in n3.term_heard
    for term, pre in ((ld.term + 1, True), (ld.term + 1, False), (9, False), (12, False)):
        net.sent.clear()
        n3.step(M.VoteRequest(term, "n1", "n3", ld.last_index(), ld.last_term(), pre, True))
        net.pump()
        assert _grants(net, "n3") == [], (term, pre)
    net.cut = set()
    for _ in range(25):
        net.tick(only=["n3"])
        if not n3.votes_lost:
            break
    assert not n3.votes_lost and n3.votes_found == 12 and n3.term == 12 and n3.vote == "n3"
    net.sent.clear()
    n3.step(M.VoteRequest(12, "n1", "n3", ld.last_index(), ld.last_term(), False, True))
    net.pump()
    assert _grants(net, "n3") == []
    net.sent.clear()
    n3.step(M.VoteRequest(13, "n1", "n3", ld.last_index(), ld.last_term(), False, True))
    net.pump()
    assert len(_grants(net, "n3")) == 1 and n3.vote == "n1" and n3.term == 13


def test_a_node_whose_votes_are_lost_does_not_campaign_and_then_leads_again():
    net = Net(("n1", "n2", "n3"))
    net.elect("n1")
    net.nodes["n1"].propose(b"a")
    net.pump()
    n3 = _lost(net, "n3", "n1")
    net.isolate("n1")  # (the leader gone: n3 could win with n2's vote, but must not campaign first)
    assert n3.votes_lost
    net.cut |= {("n2", "n3"), ("n3", "n2")}
    net.tick(80, only=["n3"])
    assert n3.role != LEADER and n3.votes_lost
    assert not [m for m in net.sent if type(m) is M.VoteRequest and m.frm == "n3"]
    net.cut = {(a, b) for a, b in net.cut if "n1" in (a, b)}
    net.tick(25, only=["n3"])  # (n2 answers n3's query: n1 still unheard)
    assert n3.votes_lost
    del net.nodes["n1"]  # (n1 removed from the group for good: only n2 and n3 vote)
    for n in net.nodes.values():
        n.voters = ("n2", "n3")
        n.quorum = 2
    net.tick(25, only=["n3"])
    assert not n3.votes_lost
    for _ in range(60):
        net.tick(only=["n2", "n3"])
        if n3.role == LEADER:
            break
    assert n3.role == LEADER and n3.term > n3.votes_found


def test_a_resolved_vote_is_saved_and_the_loss_ends_after_a_restart(tmp_path):
    """The WAL and the node together: both hard state files damaged; the node learns the terms, the driver saves
    its Ready's hard state (its vote for itself), and the next open finds the votes known and the term kept."""
    d = _wal(tmp_path, HardState(7, "n3", 5, 70))
    for name in ("hardstate", "hardstate.copy"):
        _flip(os.path.join(d, name), 14)
    w, rec = WAL.open(d, repair=True)
    n = Node("n3", ("n1", "n2", "n3"), rng=random.Random(1), hard_state=rec.hard_state, entries=rec.entries,
             recovering=True, votes_lost=rec.votes_lost)
    rd = n.ready()
    assert rd.hard_state is None and {m.to for m in rd.messages} == {"n1", "n2"}
    n.advance(rd)
    n.step(M.RecoveryState(8, "n1", "n3", 6, 2, 6, 6))
    n.step(M.RecoveryState(5, "n2", "n3", 6, 2, 6, 6))
    assert not n.votes_lost and (n.term, n.vote) == (8, "n3")
    rd = n.ready()
    w.save_hard_state(HardState(rd.hard_state.term, rd.hard_state.vote, rd.hard_state.commit, 70))
    w.close()
    rec = WAL.open(d, repair=True)[1]
    assert not rec.votes_lost and (rec.hard_state.term, rec.hard_state.vote) == (8, "n3")
