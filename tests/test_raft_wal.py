"""The RAFT write-ahead log (rillet.raft.wal): recovery of torn tails at every byte, corruption detection,
atomic hard state and snapshot files, truncation, compaction and the fsync policy."""
from __future__ import annotations

import os
import shutil

import pytest

from rillet.raft import wal as walmod
from rillet.raft.msgs import HardState, Snapshot
from rillet.raft.wal import WAL, WALCorruption


def ents(lo, hi, term=1, size=5):
    return [(i, term, 0, bytes([i % 251]) * size) for i in range(lo, hi + 1)]


def seg_files(d):
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.startswith("seg-"))


def test_roundtrip_and_reopen_appends(tmp_path):
    d = str(tmp_path / "w")
    w, rec = WAL.open(d)
    assert (rec.hard_state, rec.snapshot, rec.entries) == (None, None, [])
    w.append(ents(1, 10))
    w.append([(11, 2, 1, b"conf"), (12, 2, 2, b"")])
    w.save_hard_state(HardState(2, "n1", 9))
    w.close()
    w, rec = WAL.open(d)
    assert rec.entries == ents(1, 10) + [(11, 2, 1, b"conf"), (12, 2, 2, b"")]
    assert rec.hard_state == HardState(2, "n1", 9)
    w.append(ents(13, 15, term=2))
    w.close()
    assert [e[0] for e in WAL.open(d)[1].entries] == list(range(1, 16))


def test_torn_tail_at_every_byte_of_the_last_record(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d)
    w.append(ents(1, 4, size=11))
    w.close()
    (seg,) = seg_files(d)
    whole = open(seg, "rb").read()
    last_len = len(walmod.encode_record(4, 1, 0, bytes([4]) * 11))
    start = len(whole) - last_len
    for cut in range(start, len(whole)):
        c = str(tmp_path / f"c{cut}")
        os.makedirs(c)
        with open(os.path.join(c, os.path.basename(seg)), "wb") as f:
            f.write(whole[:cut])
        w, rec = WAL.open(c)
        assert rec.entries == ents(1, 3, size=11), cut
        assert rec.truncated_bytes == cut - start
        assert os.path.getsize(os.path.join(c, os.path.basename(seg))) == start
        w.append([(4, 2, 0, b"new")])  # the log continues where the intact part ends
        w.close()
        assert WAL.open(c)[1].entries[-1] == (4, 2, 0, b"new")
        shutil.rmtree(c)


def test_garbage_tail_is_truncated(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d)
    w.append(ents(1, 3))
    w.close()
    (seg,) = seg_files(d)
    with open(seg, "ab") as f:
        f.write(b"\x00" * 4096)  # a preallocated or zero-filled tail after a crash
    assert WAL.open(d)[1].entries == ents(1, 3)
    with open(seg, "r+b") as f:  # the last record's bytes scrambled, nothing after it
        f.seek(-3, 2)
        f.write(b"\xff\xff\xff")
    w, rec = WAL.open(d)
    assert rec.entries == ents(1, 2) and rec.truncated_bytes > 0


def test_corruption_in_the_middle_is_an_error_at_every_byte(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d)
    w.append(ents(1, 5, size=7))
    w.close()
    (seg,) = seg_files(d)
    whole = open(seg, "rb").read()
    rlen = len(walmod.encode_record(1, 1, 0, b"x" * 7))
    for off in range(rlen, 2 * rlen):  # every byte of the second record
        bad = bytearray(whole)
        bad[off] ^= 0x5A
        with open(seg, "wb") as f:
            f.write(bad)
        with pytest.raises(WALCorruption, match="offset"):
            WAL.open(d)


def test_corruption_in_an_earlier_segment_and_gaps(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d, segment_size=64)
    for i in range(1, 10):
        w.append(ents(i, i, size=40))
    w.close()
    segs = seg_files(d)
    assert len(segs) >= 3
    data = bytearray(open(segs[0], "rb").read())
    data[-1] ^= 1  # the last record of a segment that is not the last: never a torn tail
    open(segs[0], "wb").write(data)
    with pytest.raises(WALCorruption):
        WAL.open(d)
    data[-1] ^= 1
    open(segs[0], "wb").write(data)
    os.unlink(segs[1])  # a missing segment is a gap
    with pytest.raises(WALCorruption, match="expected"):
        WAL.open(d)


def test_hard_state_and_snapshot_files_are_checked_and_atomic(tmp_path, monkeypatch):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d)
    w.append(ents(1, 3))
    w.save_hard_state(HardState(1, "n2", 2))

    def boom(src, dst):
        raise OSError("crash during rename")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        w.save_hard_state(HardState(5, "n3", 3))
    monkeypatch.undo()
    assert os.path.exists(os.path.join(d, "hardstate.tmp"))
    w, rec = WAL.open(d)  # the leftover temporary file is removed; the old hard state stands
    assert rec.hard_state == HardState(1, "n2", 2)
    assert not os.path.exists(os.path.join(d, "hardstate.tmp"))
    p = os.path.join(d, "hardstate")
    b = bytearray(open(p, "rb").read())
    b[-1] ^= 1
    open(p, "wb").write(b)
    c = os.path.join(d, "hardstate.copy")
    open(c, "wb").write(b)  # (both damaged: see the tests of the copy below)
    with pytest.raises(WALCorruption, match="hardstate"):
        WAL.open(d)
    open(p, "wb").write(b[:5])
    with pytest.raises(WALCorruption, match="header"):
        WAL.open(d)


def test_truncate_suffix_and_follower_conflict(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d, segment_size=100)
    for i in range(1, 21):
        w.append(ents(i, i, size=30))
    w.append([(8, 3, 0, b"leader's")])  # conflicting suffix from 8 on is replaced
    assert w.last_index() == 8
    w.append(ents(9, 10, term=3))
    w.close()
    rec = WAL.open(d)[1]
    assert rec.entries == ents(1, 7, size=30) + [(8, 3, 0, b"leader's")] + ents(9, 10, term=3)


def test_compaction_and_snapshot_install(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d, segment_size=100)
    for i in range(1, 31):
        w.append(ents(i, i, size=30))
    n_before = len(seg_files(d))
    w.save_snapshot(Snapshot(20, 1, ("n1", "n2"), b"state@20"))
    assert len(seg_files(d)) < n_before
    w.close()
    w, rec = WAL.open(d)
    assert rec.snapshot == Snapshot(20, 1, ("n1", "n2"), b"state@20")
    assert rec.entries == ents(21, 30, size=30)
    # a snapshot from the leader whose last entry we do not hold replaces the whole log
    w.save_snapshot(Snapshot(50, 4, ("n1", "n2", "n3"), b"state@50"))
    assert seg_files(d) == []
    w.append(ents(51, 52, term=4))
    w.close()
    rec = WAL.open(d)[1]
    assert rec.snapshot.index == 50 and rec.entries == ents(51, 52, term=4)


def test_commit_beyond_the_recovered_log_is_clamped(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d, sync="interval")
    w.append(ents(1, 5))
    w.save_hard_state(HardState(1, None, 5))
    w.close()
    (seg,) = seg_files(d)
    with open(seg, "r+b") as f:  # the last entry never fully reached the disk
        f.truncate(5 * len(walmod.encode_record(1, 1, 0, b"x" * 5)) - 4)
    rec = WAL.open(d)[1]
    assert [e[0] for e in rec.entries] == [1, 2, 3, 4]
    assert rec.hard_state.commit == 4


def test_sync_policy(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    w, _ = WAL.open(str(tmp_path / "a"), sync="always")
    w.append(ents(1, 1))  # new segment (dir fsync) and the append itself
    n = len(calls)
    w.append(ents(2, 3))
    assert len(calls) == n + 1
    w, _ = WAL.open(str(tmp_path / "b"), sync="interval")
    w.append(ents(1, 1))
    n = len(calls)
    w.append(ents(2, 3))
    assert len(calls) == n
    w.sync()
    assert len(calls) == n + 1
    with pytest.raises(ValueError, match="sync policy"):
        WAL.open(str(tmp_path / "c"), sync="sometimes")


def _drop(w):
    """The process dies: its open segment is closed without an fsync (lazyfs cuts only unused mounts)."""
    if w._f is not None:
        w._f.close()
        w._f = None


def test_interval_policy_keeps_term_and_vote_through_a_power_cut(tmp_path):
    """On lazyfs (what was not fsynced is gone at a cut): with sync="interval" the entries since the last sync go,
    the hard state (term, vote, and the commit index saved) stays; the recovered commit is capped at the log and
    the saved one is handed back as ``stored_commit``; a truncation is durable at once."""
    from tests.faults.lazyfs import Mounted, fuse_available
    why = fuse_available()
    if why is not None:
        pytest.skip(f"lazyfs: {why}")
    fs = Mounted(str(tmp_path / "work"), str(tmp_path / "mnt"))
    try:
        d = os.path.join(fs.mount, "w")
        w, _ = WAL.open(d, sync="interval")
        w.append(ents(1, 10))
        w.sync()
        w.append(ents(11, 20))
        w.save_hard_state(HardState(3, "n2", 18))
        _drop(w)
        fs.cut()
        w2, rec = WAL.open(d, sync="interval")
        assert [e[0] for e in rec.entries] == list(range(1, 11))
        assert rec.hard_state == HardState(3, "n2", 10) and rec.stored_commit == 18
        w2.append(ents(11, 15))
        w2.sync()
        w2.append(ents(13, 14, term=4))  # (a conflicting suffix replaced: 15 goes, durably)
        _drop(w2)
        fs.cut()
        _w3, rec = WAL.open(d, sync="interval")
        # (the truncation was durable, the new 13-14 were not synced: the log ends at 12, the old 13-15 never back)
        assert [(e[0], e[1]) for e in rec.entries][-2:] == [(11, 1), (12, 1)]
    finally:
        fs.close()


def test_repair_cuts_the_log_before_damage_in_the_middle_at_every_byte(tmp_path):
    """A member of a replicated group opens its log with ``repair``: a damaged record that is no torn tail
    cuts the log before it (the entries from there on are taken again from the other members) instead of
    stopping the group; the hard state's commit is clamped, the saved one kept (the node knows what it lacks)."""
    d = str(tmp_path / "w")
    w, _ = WAL.open(d)
    w.append(ents(1, 5, size=7))
    w.save_hard_state(HardState(3, "n2", 5))
    w.close()
    (seg,) = seg_files(d)
    whole = open(seg, "rb").read()
    rlen = len(walmod.encode_record(1, 1, 0, b"x" * 7))
    for off in range(rlen, 2 * rlen):  # every byte of the second record
        bad = bytearray(whole)
        bad[off] ^= 0x5A
        with open(seg, "wb") as f:
            f.write(bad)
        w, rec = WAL.open(d, repair=True)
        assert rec.entries == ents(1, 1, size=7), off
        assert rec.cut_at == 2 and "offset" in rec.damaged
        assert rec.hard_state == HardState(3, "n2", 1) and rec.stored_commit == 5
        w.append(ents(2, 3, term=3, size=7))  # the log continues from the cut (the leader's entries)
        w.close()
        rec = WAL.open(d)[1]  # (whole again: no repair needed)
        assert [e[0] for e in rec.entries] == [1, 2, 3] and not rec.damaged


def test_repair_drops_later_segments_and_gaps(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d, segment_size=64)
    for i in range(1, 10):
        w.append(ents(i, i, size=40))
    w.close()
    segs = seg_files(d)
    data = bytearray(open(segs[1], "rb").read())
    data[-1] ^= 1  # the last record of the second segment
    open(segs[1], "wb").write(data)
    w, rec = WAL.open(d, repair=True)
    last = rec.entries[-1][0]
    assert rec.cut_at == last + 1 and last < 9 and rec.entries == ents(1, last, size=40)
    assert len(seg_files(d)) <= 2  # (every segment after the cut is gone)
    w.append(ents(last + 1, last + 1, term=2, size=40))
    w.close()
    assert WAL.open(d)[1].entries[-1][0] == last + 1
    # a missing segment (a gap): cut where it starts
    d2 = str(tmp_path / "g")
    w, _ = WAL.open(d2, segment_size=64)
    for i in range(1, 10):
        w.append(ents(i, i, size=40))
    w.close()
    segs = seg_files(d2)
    os.unlink(segs[1])
    w, rec = WAL.open(d2, repair=True)
    assert "expected" in rec.damaged and rec.entries[-1][0] == rec.cut_at - 1
    assert seg_files(d2) == segs[:1]
    w.close()


def test_repair_below_the_snapshot_keeps_the_snapshot_alone(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d, segment_size=100)
    for i in range(1, 31):
        w.append(ents(i, i, size=30))
    w.save_snapshot(Snapshot(21, 1, ("n1", "n2"), b"state@21"))
    w.close()
    segs = seg_files(d)
    assert int(os.path.basename(segs[0])[4:-4]) == 21  # (two records a segment: 21 is covered by the snapshot)
    data = bytearray(open(segs[0], "rb").read())
    data[10] ^= 1  # entry 21's record: at the snapshot's end
    open(segs[0], "wb").write(data)
    with pytest.raises(WALCorruption):
        WAL.open(d)
    w, rec = WAL.open(d, repair=True)
    assert rec.snapshot.index == 21 and rec.entries == [] and rec.cut_at == 22 and seg_files(d) == []
    w.append(ents(22, 23, term=2))
    w.close()
    assert [e[0] for e in WAL.open(d)[1].entries] == [22, 23]


def test_repair_drops_a_damaged_snapshot_with_its_entries_but_never_the_hard_state(tmp_path):
    d = str(tmp_path / "w")
    w, _ = WAL.open(d, segment_size=100)
    for i in range(1, 31):
        w.append(ents(i, i, size=30))
    w.save_snapshot(Snapshot(20, 1, ("n1", "n2"), b"state@20"))
    w.save_hard_state(HardState(4, "n2", 28))
    w.close()
    snap = os.path.join(d, "snapshot")
    data = bytearray(open(snap, "rb").read())
    data[-2] ^= 0x40
    open(snap, "wb").write(data)
    with pytest.raises(WALCorruption, match="snapshot"):
        WAL.open(d)
    w, rec = WAL.open(d, repair=True)
    assert rec.snapshot is None and rec.entries == [] and rec.cut_at == 1 and "snapshot" in rec.damaged
    assert rec.hard_state == HardState(4, "n2", 0) and rec.stored_commit == 28  # (term and vote kept)
    assert seg_files(d) == [] and not os.path.exists(snap)
    w.save_snapshot(Snapshot(29, 4, ("n1", "n2"), b"state@29"))  # (the leader's, installed)
    w.append(ents(30, 31, term=4))
    w.close()
    rec = WAL.open(d)[1]
    assert rec.snapshot.index == 29 and [e[0] for e in rec.entries] == [30, 31]
    # a damaged hard state is taken from its copy; both damaged: the term and vote are lost (not raised with
    # repair: the node is told, and votes again only once it knows the terms it may have voted in)
    for name in ("hardstate", "hardstate.copy"):
        hs = os.path.join(d, name)
        data = bytearray(open(hs, "rb").read())
        data[-1] ^= 1
        open(hs, "wb").write(data)
    with pytest.raises(WALCorruption, match="hardstate"):
        WAL.open(d)
    rec = WAL.open(d, repair=True)[1]
    assert rec.votes_lost and rec.hard_state == HardState(4, None, 0) and "hardstate" in rec.hs_note
