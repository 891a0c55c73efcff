"""A consumer's RAFT group that lost committed entries (a majority's power cut with a lazy sync_interval) is reported
as a stream's is, and its leader proposes the report (a LOST entry) so that a replica that did not find the loss
itself logs it too (issue 24; rillet/jetstream/cluster/consumer_loss.py). Driven here without servers: the mixin
over stand-ins for the group, the log and the server."""
from __future__ import annotations

from types import SimpleNamespace as NS

import msgspec

from rillet.jetstream.cluster import log as clog
from rillet.jetstream.cluster.consumer_loss import ConsumerLossMixin, covers
from rillet.jetstream.log import NotLeader


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def error(self, s: str) -> None:
        self.lines.append(("ERR", s))

    def warn(self, s: str) -> None:
        self.lines.append(("WRN", s))

    def errors(self) -> list[str]:
        return [s for lvl, s in self.lines if lvl == "ERR"]


class _Loop:
    def __init__(self) -> None:
        self.timers: list = []

    def call_later(self, delay, fn, *args):
        t = NS(fn=fn, args=args, cancelled=False)
        t.cancel = lambda: setattr(t, "cancelled", True)
        self.timers.append(t)
        return t


class _RaftLog:
    def __init__(self) -> None:
        self.proposed: list = []

    def propose(self, entry, done) -> None:
        self.proposed.append((entry, done))


class Replica(ConsumerLossMixin):
    pass


def _replica(server="s3", peers=("a", "b", "c"), decode=True, data_lost=None, leader=False):
    r = Replica()
    log = _Log()
    r.name = "C"
    r.rep = NS(name="P", jsa=NS(account=NS(name="$G")))
    r.cs = NS(js=NS(log=log, loop=_Loop(), domain=""), server=NS(name=server))
    r.group = NS(memory=True, peers=list(peers), name="C-R3F-abc", members_decode=lambda op: decode)
    r.log = _RaftLog()
    r.leader = leader
    r.closed = False
    r.data_lost = data_lost
    r.advisories = []
    r._lost_advisory = lambda: r.advisories.append(dict(r.data_lost or {}))
    return r, log


def _entry_report(r) -> dict:
    entry, _ = r.log.proposed[-1]
    assert entry.op == clog.LOST
    data = clog.encode_entry(entry)  # (as the group carries it)
    target, back = clog.decode_entry(data)
    assert target == "" and back.op == clog.LOST
    return msgspec.msgpack.decode(back.args[0])


def test_the_leader_that_finds_the_loss_proposes_it_and_a_replica_that_did_not_logs_it():
    ld, ldlog = _replica("s1", leader=True)
    ld._data_lost(5, 40)
    assert ld.data_lost["raft_first"] == 5 and ld.data_lost["entries"] == 36
    assert len(ldlog.errors()) == 1 and "consumer '$G > P > C' lost 36 committed RAFT entries (5..40)" in \
        ldlog.errors()[0]
    assert ld.advisories and ld.lost_pending()
    report = _entry_report(ld)
    assert report["raft_first"] == 5 and report["raft_last"] == 40 and report["server"] == "s1"
    # the leader applies its own entry (then its completion runs): nothing new to log, no longer pending, nothing
    # proposed again
    ld._apply_lost(report)
    ld.log.proposed[-1][1](None, None, None)
    assert len(ldlog.errors()) == 1 and not ld.lost_pending() and len(ld.log.proposed) == 1
    ld._lost_on_lead()
    assert len(ld.log.proposed) == 1
    # a replica that found nothing itself (it came back after the others had recovered) logs it from the entry
    late, latelog = _replica("s3")
    late._apply_lost(dict(report))
    errs = latelog.errors()
    assert len(errs) == 1 and "consumer '$G > P > C' lost 36 committed RAFT entries (5..40), as s1 found" in errs[0]
    assert late.data_lost["raft_first"] == 5 and late.data_lost["server"] == "s1"
    late._apply_lost(dict(report))  # (the entry replayed after a restart: logged once)
    assert len(latelog.errors()) == 1
    # a replica that found the same loss itself is not told again
    other, otherlog = _replica("s2")
    other._data_lost(5, 40)
    other._apply_lost(dict(report))
    assert len(otherlog.errors()) == 1


def test_a_follower_finder_does_not_propose_and_a_new_leader_does():
    r, _ = _replica("s2")
    r._data_lost(7, 9)
    assert not r.log.proposed
    r.leader = True
    r._lost_on_lead()
    assert _entry_report(r)["raft_last"] == 9
    r._lost_on_lead()  # (one proposal in flight at a time)
    assert len(r.log.proposed) == 1
    _, done = r.log.proposed[0]
    done(None, None, NotLeader())  # (lost the leadership: quietly, the next leader proposes)
    r._lost_on_lead()
    assert len(r.log.proposed) == 2


def test_members_that_cannot_apply_it_are_waited_for():
    r, _ = _replica("s1", decode=False, leader=True)
    r._data_lost(1, 3)
    assert not r.log.proposed and len(r.cs.js.loop.timers) == 1
    r.group.members_decode = lambda op: op == clog.CONSUMER_LOST
    t = r.cs.js.loop.timers[0]
    t.fn(*t.args)
    assert _entry_report(r)["raft_first"] == 1
    r._stop_lost()


def test_what_is_not_proposed():
    # a group of one member: nobody to tell
    r, _ = _replica("s1", peers=("a",), leader=True)
    r._data_lost(1, 3)
    assert not r.log.proposed
    # a report that could not be read names no range
    r, _ = _replica("s1", leader=True, data_lost={"raft_first": 0, "raft_last": 0, "entries": 0, "unreadable": "x"})
    assert not r.lost_pending()
    r._lost_on_lead()
    assert not r.log.proposed
    # a wider range found after the entry was applied is proposed again
    r, _ = _replica("s1", leader=True)
    r._data_lost(5, 10)
    r._apply_lost(_entry_report(r))
    r.log.proposed[-1][1](None, None, None)
    r.log.proposed.clear()
    assert not r.lost_pending()
    r._data_lost(3, 12)
    assert r.lost_pending() and _entry_report(r)["raft_first"] == 3


def test_covers():
    rep = {"raft_first": 5, "raft_last": 10}
    assert covers(rep, 5, 10) and covers(rep, 6, 6) and not covers(rep, 4, 6) and not covers(None, 1, 1)
    assert covers(None, 2, 1)  # (an empty range)
    assert not covers({"raft_first": 1, "raft_last": 0}, 1, 1)
    assert clog.CONSUMER_LOST not in clog.CLUSTER_OPS  # (a capability, not an op of its own)
    from rillet.cluster.info import RILLET_RAFT_OPS
    assert clog.CONSUMER_LOST in RILLET_RAFT_OPS
