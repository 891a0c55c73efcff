"""The damage survey of a replicated stream (issue 24): a replica whose store found a record damaged asks the other
replicas over ``$JSC.DMG.<group>`` what their copies are. A replica that answers "gone" has applied a deletion (a
delete, a purge, a limit) that this one has not applied yet: the record is legitimately gone, not lost. Before,
such an answer counted as "no copy", so a replica behind on a deletion could report the record lost on every
replica. Driven without servers: the answers' tally and ``refetch_damaged`` over stand-ins."""
from __future__ import annotations

import os
from types import SimpleNamespace as NS

from rillet.jetstream import damagereport
from rillet.jetstream.cluster.stream_loss import StreamLossMixin, gone_applied, lost_everywhere_of, tally_probe


def test_the_tally_counts_a_deletion_as_gone_not_as_no_copy():
    others = {"b", "c"}
    answers = {"b": {"peer": "b", "healthy": [], "damaged": [7], "gone": [5], "behind": []},
               "c": {"peer": "c", "healthy": [6], "damaged": [5, 7], "gone": [], "behind": []}}
    healthy, deleted, unknown = tally_probe(others, answers)
    assert healthy == {6: "c"} and deleted == {5: "b"} and not unknown
    # 5: deleted on b (not lost); 6: healthy on c (fetched again); 7: damaged everywhere (lost)
    assert lost_everywhere_of((5, 6, 7), {5, 6, 7}, healthy, deleted, unknown) == [7]
    # a record no longer damaged here (this replica applied the deletion meanwhile) is not reported either
    assert lost_everywhere_of((5, 7), {5}, healthy, deleted, unknown) == []


def test_nothing_is_concluded_while_a_replica_is_silent_or_behind():
    others = {"b", "c"}
    h, d, u = tally_probe(others, {"b": {"damaged": [5]}})
    assert u and lost_everywhere_of((5,), {5}, h, d, u) == []
    h, d, u = tally_probe(others, {"b": {"damaged": [5]}, "c": {"behind": [5]}})
    assert u and lost_everywhere_of((5,), {5}, h, d, u) == []
    h, d, u = tally_probe(others, {"b": {"damaged": [5]}, "c": {"damaged": [5]}, "x": {"healthy": [5]}})
    assert not u and h == {} and lost_everywhere_of((5,), {5}, h, d, u) == [5]  # (x is no replica of the group)


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def error(self, s: str) -> None:
        self.lines.append(("ERR", s))

    def warn(self, s: str) -> None:
        self.lines.append(("WRN", s))


class _Loop:
    def __init__(self) -> None:
        self.later: list = []

    def time(self) -> float:
        return 100.0

    def call_later(self, delay, fn, *args):
        self.later.append((delay, fn))


class Replica(StreamLossMixin):
    pass


def _replica(tmp, answers: dict, damaged=(5,), applied=0):
    """A follower of an R3 file stream whose store holds ``damaged`` damaged, the probe's ``answers`` in, its
    group having applied its log up to ``applied``."""
    r = Replica()
    log = _Log()
    lost = set(damaged)
    removed: list[int] = []

    def remove_msg(s):
        lost.discard(s)
        removed.append(s)
        return False
    store = NS(state=lambda: NS(lost=sorted(lost)), remove_msg=remove_msg, removed=removed)
    r.name = "P"
    r.stream = NS(store=store, cfg=NS(storage="file"))
    r.group = NS(peers=["a", "b", "c"], id="a", is_leader=False, node=NS(applied=applied))
    r.jsa = NS(account=NS(name="$G"), stream_dir=lambda name: str(tmp))
    r.cs = NS(js=NS(log=log, loop=_Loop()), server=NS(name="sa"))
    r.closed = r.leader = r._refetch_due = False
    r.creps = {}
    r._everywhere = frozenset()
    r._refetch_handover = 0.0
    r.catching_up = lambda: False
    r._probe_seqs = tuple(damaged)
    r._probe_at = 100.0
    r._probe_healthy, r._probe_deleted, r._probe_unknown = tally_probe({"b", "c"}, answers)
    r._gone_at = gone_applied({"b", "c"}, answers)
    return r, log


def test_a_record_deleted_on_another_replica_is_not_reported_lost(tmp_path):
    r, log = _replica(tmp_path, {"b": {"gone": [5]}, "c": {"damaged": [5]}})
    assert r.refetch_damaged() is True  # (handled here: waiting, not reported by the stream)
    assert r.lost_everywhere == frozenset()
    assert not os.path.exists(os.path.join(tmp_path, damagereport.EVERYWHERE_FILE))
    assert not [s for lvl, s in log.lines if lvl == "ERR"]
    warns = [s for lvl, s in log.lines if lvl == "WRN"]
    assert len(warns) == 1 and "damaged message 5 was deleted on b: not lost" in warns[0]
    assert r._refetch_due and r.cs.js.loop.later  # (asked again: the deletion applied here ends it)
    r._refetch_due = False
    r.refetch_damaged()
    assert len([s for lvl, s in log.lines if lvl == "WRN"]) == 1  # (said once)


def test_a_record_damaged_on_every_replica_is_still_reported_lost(tmp_path):
    r, log = _replica(tmp_path, {"b": {"damaged": [5]}, "c": {"damaged": [5]}})
    assert r.refetch_damaged() is False  # (the stream reports it, as an R1 stream's)
    assert r.lost_everywhere == frozenset({5})
    assert os.path.exists(os.path.join(tmp_path, damagereport.EVERYWHERE_FILE))
    assert any("have no healthy copy on any replica" in s for lvl, s in log.lines if lvl == "ERR")


def test_the_applied_index_of_a_deletion_is_the_lowest_said():
    answers = {"b": {"gone": [5, 6], "applied": 40}, "c": {"gone": [5], "applied": 30}, "x": {"gone": [7], "applied": 1},
               "old": {"gone": [8]}}
    assert gone_applied({"b", "c", "old"}, answers) == {5: 30, 6: 40}  # (x is no replica; "old" gave no index)


def test_a_deletion_this_replica_applied_and_lost_the_record_of_is_not_waited_for(tmp_path):
    """The replica has applied its log past the index at which another said the record was deleted: its own
    deletion was applied and its record lost (a torn state log, an erased record's tombstone gone). Before, it
    waited for that deletion forever (asked again every 2 s); now the record is removed here."""
    answers = {"b": {"gone": [5], "applied": 120}, "c": {"damaged": [5], "applied": 118}}
    r, log = _replica(tmp_path, answers, applied=119)
    assert r.refetch_damaged() is True  # (behind b: waits, as before)
    assert r.stream.store.removed == [] and r._refetch_due
    r._refetch_due = False
    r.group.node.applied = 120  # (caught up with what b had applied when it answered)
    assert r.refetch_damaged() is True
    assert r.stream.store.removed == [5] and r.stream.store.state().lost == []
    assert r.lost_everywhere == frozenset()
    assert not [s for lvl, s in log.lines if lvl == "ERR"]
    assert any("removed here" in s for lvl, s in log.lines if lvl == "WRN")


def test_a_replica_catching_up_waits_for_the_deletion(tmp_path):
    r, log = _replica(tmp_path, {"b": {"gone": [5], "applied": 10}, "c": {"gone": [5], "applied": 10}}, applied=50)
    r.catching_up = lambda: True
    r.refetch_damaged()
    assert r.stream.store.removed == []
