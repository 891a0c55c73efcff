"""rillet.jetstream.cluster.lossreport: a group's loss report kept on disk (pure parts)."""
from __future__ import annotations

import json
import os

import pytest

from rillet.jetstream.cluster import lossreport


def test_saved_report_is_read_back_and_merged(tmp_path) -> None:
    d = str(tmp_path / "g")
    assert lossreport.load(d) is None
    r = lossreport.merge(None, {"raft_first": 52, "raft_last": 151, "seq_mark": 150, "server": "a",
                                "detected": "t1"})
    assert r["entries"] == 100 and lossreport.pending(r)
    lossreport.save(d, r)
    assert lossreport.load(d) == r
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]
    # applied: the skipped range; a later, larger finding widens the RAFT range and the marks only
    r2 = lossreport.merge(r, {"raft_first": 52, "raft_last": 151, "seq_first": 51, "seq_last": 150})
    assert r2["msgs"] == 100 and not lossreport.pending(r2)
    r3 = lossreport.merge(r2, {"raft_first": 40, "raft_last": 160, "seq_mark": 200, "server": "b", "detected": "t2"})
    assert (r3["raft_first"], r3["raft_last"], r3["entries"]) == (40, 160, 121)
    assert r3["server"] == "a" and r3["detected"] == "t1"  # (the first finding)
    assert lossreport.pending(r3)  # (sequences up to 200 not skipped yet)


def test_a_damaged_report_is_an_error_not_ignored(tmp_path) -> None:
    (tmp_path / lossreport.FILE).write_text("{not json")
    with pytest.raises(ValueError):
        lossreport.load(str(tmp_path))
    (tmp_path / lossreport.FILE).write_text(json.dumps({"raft_first": "x"}))
    with pytest.raises(ValueError):
        lossreport.load(str(tmp_path))


def test_an_unreadable_report_stands_as_an_unknown_loss(tmp_path) -> None:
    (tmp_path / lossreport.FILE).write_text("{not json")
    logged = []

    class Log:
        def error(self, text: str) -> None:
            logged.append(text)
    r = lossreport.load_or_flag(str(tmp_path), Log())
    assert r is not None and "unreadable" in r and logged


def test_an_unsynced_tail_report_names_no_raft_entries_and_merges_with_a_range() -> None:
    tail = lossreport.merge(None, {"raft_first": 1, "raft_last": 0, "unsynced_tail": True, "seq_mark": 8242,
                                   "seq_first": 52, "seq_last": 8242})
    assert tail["entries"] == 0 and tail["msgs"] == 8191 and not lossreport.pending(tail)
    assert lossreport.describe(tail) == "lost its unsynced tail: acknowledged messages 52..8242 may be gone"
    both = lossreport.merge(tail, {"raft_first": 60, "raft_last": 70, "seq_mark": 8242})
    assert (both["raft_first"], both["raft_last"], both["entries"]) == (60, 70, 11)
    assert both["unsynced_tail"] and both["seq_first"] == 52
    assert lossreport.describe(both) == "lost committed entries 60..70"
    again = lossreport.merge(both, tail)
    assert (again["raft_first"], again["raft_last"]) == (60, 70)
