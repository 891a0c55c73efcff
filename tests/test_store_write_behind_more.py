"""The file store's write-behind for the MQTT QoS 1 path (issue 23), in both lanes: retention removals whose
tombstones wait for the owner's ``flush_writes`` (``remove_msg_soon``: one state-log record for the pass's),
records with headers the stream does not act on gathered like plain ones, and a failed gathered write taken back
from a block whose per-subject slot lists were built (a filtered consumer's read)."""
from __future__ import annotations

import errno
import os
import shutil

import pytest

from lanes import COMPILED_ERROR
import rillet.jetstream  # noqa: F401  (registers its lane twins)
from rillet import lane
from rillet.jetstream.store import filestore as fsmod
from rillet.jetstream.store.base import ErrStoreFull, StoreConfig

HDR = b"NATS/1.0\r\nNmqtt-Pub:1\r\n\r\n"
LANES = ["pure", pytest.param("compiled", marks=pytest.mark.skipif(bool(COMPILED_ERROR),
                                                                  reason=f"compiled lane not built: {COMPILED_ERROR}"))]


def _cls(which: str):
    return lane.pure("FileStore") if which == "pure" else lane.compiled("FileStore")


def _crash_copy(src: str, dst: str):
    """What a process killed now leaves: the files as written to the OS (the store is not stopped)."""
    shutil.copytree(src, dst)
    return dst


def _log_size(fs) -> int:
    return os.path.getsize(os.path.join(fs.dir, "state.log"))


@pytest.mark.parametrize("which", LANES)
def test_retention_tombstones_wait_for_the_pass_and_go_in_one_record(tmp_path, which):
    cls = _cls(which)
    fs = cls(str(tmp_path / "s"), StoreConfig())
    for i in range(10):
        fs.store_msg("a", b"", b"m%d" % i, i + 1)
    armed = []
    fs.write_behind(armed=lambda: armed.append(1))
    size = _log_size(fs)
    assert fs.remove_msg_soon(2) and fs.remove_msg_soon(3) and fs.remove_msg_soon(7)
    assert not fs.remove_msg_soon(3)  # (gone already)
    assert armed == [1]  # the owner is asked once to flush before its pass ends
    assert fs.state().msgs == 7 and fs.load_msg(3) is None
    assert _log_size(fs) == size  # nothing written yet
    before = _crash_copy(fs.dir, str(tmp_path / "before"))
    fs.flush_writes()
    grew = _log_size(fs) - size
    assert 0 < grew < 3 * 20  # one record for the three (a single tombstone's record is 20 bytes)
    after = _crash_copy(fs.dir, str(tmp_path / "after"))
    # killed before the pass ended: the removals are not on disk (as if the acks came later)
    b = cls(before, StoreConfig())
    assert b.state().msgs == 10
    b.stop()
    # killed after it: they are
    a = cls(after, StoreConfig())
    assert a.state().msgs == 7 and [a.load_msg(s) for s in (2, 3, 7)] == [None, None, None]
    assert a.load_msg(4).data == b"m3"
    a.stop()
    # a second pass asks again
    assert fs.remove_msg_soon(5)
    assert armed == [1, 1]
    fs.stop()  # (writes it)
    fs = cls(str(tmp_path / "s"), StoreConfig())
    assert fs.state().msgs == 6 and fs.load_msg(5) is None
    fs.stop()


@pytest.mark.parametrize("which", LANES)
def test_without_write_behind_a_retention_removal_is_written_at_once(tmp_path, which):
    cls = _cls(which)
    fs = cls(str(tmp_path / "s"), StoreConfig())
    for i in range(3):
        fs.store_msg("a", b"", b"x", i + 1)
    size = _log_size(fs)
    assert fs.remove_msg_soon(2)
    assert _log_size(fs) > size
    a = cls(_crash_copy(fs.dir, str(tmp_path / "c")), StoreConfig())
    assert a.state().msgs == 2 and a.load_msg(2) is None
    a.stop()
    fs.stop()


@pytest.mark.parametrize("which", LANES)
def test_write_behind_off_writes_waiting_tombstones(tmp_path, which):
    cls = _cls(which)
    fs = cls(str(tmp_path / "s"), StoreConfig())
    for i in range(3):
        fs.store_msg("a", b"", b"x", i + 1)
    fs.write_behind(armed=lambda: None)
    size = _log_size(fs)
    fs.remove_msg_soon(1)
    assert _log_size(fs) == size
    fs.write_behind(on=False)
    assert _log_size(fs) > size
    fs.stop()


@pytest.mark.parametrize("which", LANES)
def test_header_records_gathered_unless_a_stream_header(tmp_path, which):
    cls = _cls(which)
    fs = cls(str(tmp_path / "s"), StoreConfig())
    fs.store_msg("a", HDR, b"first", 1)
    fs.write_behind(armed=lambda: None)
    fs.gather(True)
    size = os.path.getsize(fs._active.path)
    for i in range(4):
        fs.store_msg("a", HDR, b"m%d" % i, 2 + i)
    assert fs._wb_off >= 0 and os.path.getsize(fs._active.path) == size
    fs.store_msg("a", b"NATS/1.0\r\nNats-Rollup: sub\r\n\r\n", b"r", 9)  # written at once, the gathered first
    assert fs._wb_off == -1 and os.path.getsize(fs._active.path) == fs._active.size
    fs.stop()
    fs = cls(str(tmp_path / "s"), StoreConfig())
    assert [(m.hdr, m.data) for m in (fs.load_msg(s) for s in range(2, 6))] == [(HDR, b"m%d" % i) for i in range(4)]
    fs.stop()


@pytest.mark.parametrize("which", LANES)
def test_failed_gathered_write_after_a_filtered_read_takes_the_slots_back(tmp_path, which, monkeypatch):
    """The active block's per-subject slot lists (built by a filtered read, as an MQTT session's consumer does)
    no longer stop gathering; a failed write takes the gathered slots out of them too."""
    cls = _cls(which)
    fs = cls(str(tmp_path / "s"), StoreConfig())
    fs.store_msg("a", HDR, b"one", 1)
    fs.store_msg("b", HDR, b"two", 2)
    assert fs.load_next_msg("a", 1, False).seq == 1  # builds the slot lists
    assert fs._aidx.spos_all
    failed = []
    fs.write_behind(armed=lambda: None, failed=lambda f, l, e: failed.append((f, l)))
    fs.gather(True)
    for i in range(3):
        fs.store_msg("a", HDR, b"lost%d" % i, 3 + i)
    assert fs._wb_off >= 0

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsmod, "_write_all", no_space)
    with pytest.raises(ErrStoreFull):
        fs.flush_writes()
    monkeypatch.undo()
    assert failed == [(3, 5)] and fs.state().last_seq == 2 and fs.state().msgs == 2
    assert fs.load_next_msg("a", 2, False) is None
    for i in range(3):  # the taken-back slots reused by another subject
        fs.store_msg("b", HDR, b"b%d" % i, 3 + i)
    fs.store_msg("a", HDR, b"again", 6)
    fs.flush_writes()
    m = fs.load_next_msg("a", 2, False)
    assert (m.seq, m.subject, m.data) == (6, "a", b"again")
    assert fs.load_next_msg("a", 7, False) is None
    fs.stop()


def _snap(fs) -> tuple:
    st = fs.state()
    msgs = [(m.seq, m.subject, m.data) for m in (fs.load_msg(s) for s in range(1, st.last_seq + 1)) if m is not None]
    return (st.msgs, st.bytes, st.first_seq, st.last_seq, msgs, fs.subjects_totals(">"),
            {s: fs.last_seq_for_subject(s) for s in "abc"})


@pytest.mark.parametrize("which", LANES)
@pytest.mark.parametrize("fail", [False, True])
def test_older_messages_removed_while_records_are_gathered(tmp_path, which, fail, monkeypatch):
    """A removal of a message stored before the gathered records (an ack of an earlier pass's message) no longer
    writes them first; a failed write then takes back the gathered messages and nothing else: the store is the
    one that had the removals alone (counts, bytes, first, per-subject counts and last sequences), then and after
    a reopen."""
    cls = _cls(which)
    fs, ref = cls(str(tmp_path / "s"), StoreConfig()), cls(str(tmp_path / "r"), StoreConfig())
    for st in (fs, ref):
        for i, subj in enumerate("ababa"):
            st.store_msg(subj, HDR if i % 2 else b"", b"m%d" % i, i + 1)
    failed = []
    fs.write_behind(armed=lambda: None, failed=lambda f, l, e: failed.append((f, l)))
    fs.gather(True)
    for i, subj in enumerate("aba"):
        fs.store_msg(subj, b"", b"g%d" % i, 6 + i)
    assert fs._wb_off >= 0
    size = os.path.getsize(fs._active.path)
    # the first (a), a's last before the gathered ones, b's last before them; then b's first, leaving b none of
    # its older messages
    for seq, soon in ((1, True), (5, True), (4, False), (2, True)):
        assert (fs.remove_msg_soon(seq) if soon else fs.remove_msg(seq)) and ref.remove_msg(seq)
        assert fs._wb_off >= 0 and os.path.getsize(fs._active.path) == size  # still gathered
    if fail:
        def no_space(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(fsmod, "_write_all", no_space)
        with pytest.raises(ErrStoreFull):
            fs.flush_writes()
        monkeypatch.undo()
        assert failed == [(6, 8)]
        assert _snap(fs) == _snap(ref)
    else:
        fs.flush_writes()
        for i, subj in enumerate("aba"):
            ref.store_msg(subj, b"", b"g%d" % i, 6 + i)
        assert _snap(fs) == _snap(ref)
    for st in (fs, ref):  # (after a failed write the next message takes the first taken-back sequence)
        st.store_msg("c", b"", b"next", 20)
        st.store_msg("a", b"", b"next", 21)
    fs.flush_writes()
    assert _snap(fs) == _snap(ref)
    fs.stop()
    ref.stop()
    fs, ref = cls(str(tmp_path / "s"), StoreConfig()), cls(str(tmp_path / "r"), StoreConfig())
    assert _snap(fs) == _snap(ref)
    fs.stop()
    ref.stop()
