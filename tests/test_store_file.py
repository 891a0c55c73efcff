"""FileStore: recovery, corruption, block files, disk errors, compression."""

from __future__ import annotations

import errno
import os
import shutil
import threading

import pytest

from rillet.jetstream.store import ErrStoreCorrupt, ErrStoreFull, StoreConfig, StoreError
from rillet.jetstream.store import _fslog
from rillet.jetstream.store import filestore as fsmod
from rillet.jetstream.store.base import file_msg_size
from rillet.jetstream.store.filestore import FileStore

S = 1_000_000_000


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, level: str, text: str) -> None:
        self.lines.append((level, text))

    def has(self, level: str, word: str) -> bool:
        return any(lv == level and word in t for lv, t in self.lines)


def open_fs(path, log=None, **kw):
    return FileStore(str(path), StoreConfig(name="t", **kw), log=log)


def snapshot(fs):
    st = fs.state()
    msgs = {}
    for seq in range(st.first_seq, st.last_seq + 1):
        try:
            msgs[seq] = fs.load_msg(seq)
        except ErrStoreCorrupt:
            msgs[seq] = "lost"
    return st, fs.subjects_state(">"), msgs


def blocks(path):
    return sorted(f for f in os.listdir(os.path.join(path, "msgs")) if f.endswith(".blk"))


def live_seqs(fs):
    out = []
    m = fs.load_next_msg(">", 0)
    while m is not None:
        out.append(m.seq)
        m = fs.load_next_msg(">", m.seq + 1)
    return out


def test_restart_recovers_exact_state(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p, max_msgs_per_subject=3, allow_msg_ttl=True, block_size=2048)
    for i in range(60):
        fs.store_msg(f"sub.{i % 7}", b"NATS/1.0\r\nI: %d\r\n\r\n" % i if i % 3 else b"", b"d" * i, ttl=3600 if i == 55 else 0)
    fs.remove_msg(50)
    fs.remove_msg(52, erase=True)
    fs.skip_msgs(0, 3)
    fs.store_raw(70, "raw", b"", b"r", 7)
    fs.purge("sub.1", keep=1)
    cs = fs.consumer_store("C1")
    cs.update({"delivered": {"consumer_seq": 9, "stream_seq": 44}, "ack_floor": {"consumer_seq": 3, "stream_seq": 40},
               "pending": {41: (4, 1), 43: (6, 2)}, "redelivered": {41: 1}})
    before = snapshot(fs)
    exp = fs.next_expiry()
    fs.stop()
    fs = open_fs(p, max_msgs_per_subject=3, allow_msg_ttl=True, block_size=2048)
    assert snapshot(fs) == before
    assert fs.next_expiry() == exp
    assert fs.consumer_store("C1").state().pending == {41: (4, 1), 43: (6, 2)}
    assert fs.store_msg("new", b"", b"")[0] == 71
    # Reopen again without stop() (a crash): everything written is in the OS buffers.
    fs.flush()
    before = snapshot(fs)
    fs2 = open_fs(p, max_msgs_per_subject=3, allow_msg_ttl=True, block_size=2048)
    assert snapshot(fs2) == before
    fs2.stop()
    fs.stop()


def test_consumer_state_files(tmp_path):
    p = tmp_path / "s"
    log = Log()
    fs = open_fs(p, log)
    odd = "weird/name x"
    fs.consumer_store(odd).update({"delivered": {"consumer_seq": 1, "stream_seq": 1}})
    fs.consumer_store("ok").update({"delivered": {"consumer_seq": 2, "stream_seq": 2}})
    fs.sync()
    fs.stop()
    fs = open_fs(p, log)
    assert fs.consumer_names() == ["ok", odd]
    assert fs.consumer_store(odd).state().delivered.stream_seq == 1
    d = fs.consumer_store("ok").path
    fs.consumer_store("ok").delete()
    assert not os.path.exists(d)
    fs.stop()
    # The state is in two slots written in turn: a corrupt newest slot leaves the one before it (reported);
    # with both corrupt there is none.
    path = os.path.join(str(p), "consumers")
    name_dir = [n for n in os.listdir(path)][0]
    fs = open_fs(p, log)
    fs.consumer_store(odd).update({"delivered": {"consumer_seq": 7, "stream_seq": 7}})
    fs.consumer_store(odd).flush()
    newest = fs.consumer_store(odd)._slot_path(fs.consumer_store(odd)._slot)
    fs._consumers.clear()  # (gone without the write a stop does)
    fs.stop()
    with open(newest, "r+b") as f:
        f.seek(14)
        f.write(b"\xff")
    fs = open_fs(p, log)
    assert fs.consumer_store(odd).state().delivered.stream_seq == 1
    assert log.has("error", "corrupt")
    fs._consumers.clear()
    fs.stop()
    for slot in ("state", "state.1"):
        with open(os.path.join(path, name_dir, slot), "r+b") as f:
            f.seek(14)
            f.write(b"\xff")
    fs = open_fs(p, log)
    assert fs.consumer_store(odd).state() is None
    fs.stop()


def _last_record(fs):
    _, path, off, rlen = fs._record_location(fs.state().last_seq)
    return path, off, rlen


def test_torn_tail_every_offset(tmp_path):
    src = tmp_path / "src"
    fs = open_fs(src)
    for i in range(10):
        fs.store_msg("foo", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload-%d" % i)
    fs.remove_msg(3)
    path, off, rlen = _last_record(fs)
    rel = os.path.relpath(path, src)
    before = snapshot(fs)
    fs.stop()
    for cut in range(off, off + rlen):
        dst = tmp_path / f"c{cut}"
        shutil.copytree(src, dst)
        with open(dst / rel, "r+b") as f:
            f.truncate(cut)
        log = Log()
        fs = open_fs(dst, log)
        st = fs.state()
        assert (st.msgs, st.last_seq, st.deleted, st.lost) == (8, 9, [3], [])
        assert all(fs.load_msg(s) == before[2][s] for s in range(1, 10))
        if cut > off:
            assert log.has("warn", "torn")
        # Still appendable, and the new record survives a reopen.
        assert fs.store_msg("foo", b"", b"again")[0] == 10
        fs.stop()
        fs = open_fs(dst)
        assert fs.load_msg(10).data == b"again" and fs.state().lost == []
        fs.stop()
        shutil.rmtree(dst)


def test_flipped_byte_in_middle(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(10):
        fs.store_msg("foo", b"", b"payload-%d" % i)
    _, path, off, rlen = fs._record_location(5)
    fs.stop()
    with open(path, "r+b") as f:
        f.seek(off + rlen - 8)  # inside the payload
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))
    log = Log()
    fs = open_fs(p, log)
    st = fs.state()
    assert st.lost == [5] and st.msgs == 9 and 5 in st.deleted
    with pytest.raises(ErrStoreCorrupt):
        fs.load_msg(5)
    assert fs.load_next_msg(">", 5).seq == 6
    assert [fs.load_msg(s).data for s in (4, 6, 10)] == [b"payload-3", b"payload-5", b"payload-9"]
    assert log.has("error", "corrupt")
    fs.stop()
    # Still reported after another restart; gone after a compact past it.
    fs = open_fs(p)
    assert fs.state().lost == [5]
    fs.compact(6)
    fs.stop()
    fs = open_fs(p)
    assert fs.state().lost == [] and fs.state().first_seq == 6
    fs.stop()


def test_flipped_byte_in_header_and_at_block_end(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p, block_size=600)
    for i in range(20):
        fs.store_msg("foo", b"", b"x" * 60)
    e3 = fs._record_location(3)
    # last record of the first block
    first_blk = e3[0]
    last_in_first = max(s for s in range(1, 21) if fs._record_location(s)[0] == first_blk)
    el = fs._record_location(last_in_first)
    fs.stop()
    for path, off in ((e3[1], e3[2] + 9), (el[1], el[2] + 20)):  # seq field / ts field
        with open(path, "r+b") as f:
            f.seek(off)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x80]))
    fs = open_fs(p, block_size=600)
    st = fs.state()
    assert st.lost == sorted({3, last_in_first})
    assert st.msgs == 18
    with pytest.raises(ErrStoreCorrupt):
        fs.load_msg(last_in_first)
    fs.stop()


def test_corruption_after_open_is_detected(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(3):
        fs.store_msg("foo", b"", b"abcdefgh")
    _, path, off, rlen = fs._record_location(2)
    with open(path, "r+b") as f:
        f.seek(off + rlen - 6)
        f.write(b"Z")
    with pytest.raises(ErrStoreCorrupt):
        fs.load_msg(2)
    assert fs.load_msg(3).data == b"abcdefgh"
    fs.stop()


def test_blocks_roll_and_are_removed(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p, block_size=1024)
    for i in range(100):
        fs.store_msg("foo.%d" % (i % 2), b"", b"y" * 100)
    n = len(blocks(p))
    assert n >= 10
    for seq in range(1, 31):
        fs.remove_msg(seq)
    assert len(blocks(p)) < n - 2
    fs.purge("foo.0")
    fs.compact(90)
    st = fs.state()
    assert st.msgs == 6
    assert len(blocks(p)) <= 3
    before = snapshot(fs)
    fs.stop()
    fs = open_fs(p, block_size=1024)
    assert snapshot(fs) == before
    fs.purge()
    assert blocks(p) == []
    assert fs.store_msg("foo", b"", b"")[0] == 101
    fs.stop()


def test_erase_overwrites_on_disk(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    fs.store_msg("foo", b"", b"SECRET-PAYLOAD-1")
    fs.store_msg("foo", b"", b"other")
    fs.remove_msg(1, erase=True)
    data = b"".join(open(os.path.join(p, "msgs", b), "rb").read() for b in blocks(p))
    assert b"SECRET-PAYLOAD-1" not in data and b"other" in data
    fs.stop()
    fs = open_fs(p)
    st = fs.state()
    assert (st.msgs, st.first_seq, st.lost) == (1, 2, [])
    fs.stop()


def test_enospc_rolls_back(tmp_path, monkeypatch):
    p = tmp_path / "s"
    log = Log()
    fs = open_fs(p, log)
    fs.store_msg("foo", b"", b"one")
    blk = blocks(p)[0]
    size = os.path.getsize(os.path.join(p, "msgs", blk))
    before = snapshot(fs)
    real = os.pwritev

    def partial_then_full(fd, bufs, off):
        real(fd, [b"".join(bufs)[:10]], off)  # a torn half-write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsmod.os, "pwritev", partial_then_full)
    with pytest.raises(ErrStoreFull, match="No space left"):
        fs.store_msg("foo", b"", b"two")
    assert os.path.getsize(os.path.join(p, "msgs", blk)) == size
    assert snapshot(fs) == before
    # A removal while the disk is full: kept in memory, persisted later.
    monkeypatch.setattr(fsmod, "_write_all", _failing_write_all)
    assert fs.remove_msg(1) is True
    assert fs.state().msgs == 0
    with pytest.raises(ErrStoreFull):
        fs.store_msg("foo", b"", b"three")
    assert log.has("error", "will retry")
    monkeypatch.undo()
    assert fs.store_msg("foo", b"", b"four")[0] == 2
    before = snapshot(fs)
    fs.stop()
    log = Log()
    fs = open_fs(p, log)
    assert snapshot(fs) == before
    assert not log.has("warn", "torn")
    fs.stop()


def _failing_write_all(fd, bufs, off, total):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_unwritable_directory(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_bytes(b"")
    with pytest.raises(StoreError):
        open_fs(f / "s")
    p = tmp_path / "s"
    fs = open_fs(p, block_size=4096)
    real_open = os.open

    def deny(path, flags, *a):
        if str(path).endswith(".blk") and flags & os.O_CREAT:
            raise OSError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *a)

    monkeypatch.setattr(fsmod.os, "open", deny)
    with pytest.raises(ErrStoreFull, match="Permission denied"):
        fs.store_msg("foo", b"", b"x")
    monkeypatch.undo()
    assert fs.store_msg("foo", b"", b"x")[0] == 1
    fs.stop()


def test_truncate_then_reuse_sequences(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p, block_size=512)
    for i in range(20):
        fs.store_msg("foo", b"", b"z" * 40)
    fs.remove_msg(15)
    fs.remove_msg(5)
    fs.truncate(12)
    assert fs.store_msg("bar", b"", b"new13")[0] == 13
    fs.store_msg("bar", b"", b"new14")
    fs.store_msg("bar", b"", b"new15")
    before = snapshot(fs)
    assert before[0].deleted == [5]
    fs.stop()
    fs = open_fs(p, block_size=512)
    assert snapshot(fs) == before
    assert fs.load_msg(15).data == b"new15"
    fs.stop()


def test_state_log_compaction(tmp_path, monkeypatch):
    monkeypatch.setattr(_fslog, "_LOG_COMPACT_MIN", 2048)
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(600):
        fs.store_msg("foo", b"", b"")
    for seq in range(1, 600, 2):
        fs.remove_msg(seq)
    assert os.path.getsize(os.path.join(p, "state.log")) < 300 * 20
    before = snapshot(fs)
    fs.stop()
    fs = open_fs(p)
    assert snapshot(fs) == before
    fs.stop()


def test_compression(tmp_path):
    pytest.importorskip("cramjam")
    p = tmp_path / "s"
    fs = open_fs(p, compression="s2")
    payload = b"abcdefgh" * 512
    for i in range(20):
        fs.store_msg("foo", b"NATS/1.0\r\nK: v\r\n\r\n", payload)
    fs.store_msg("foo", b"", b"tiny")
    size = sum(os.path.getsize(os.path.join(p, "msgs", b)) for b in blocks(p))
    assert size < 20 * len(payload) // 4
    assert fs.state().bytes == 20 * file_msg_size("foo", b"NATS/1.0\r\nK: v\r\n\r\n", payload) + 30 + 3 + 4
    before = snapshot(fs)
    fs.stop()
    fs = open_fs(p)  # reads compressed records whatever the config says
    assert snapshot(fs) == before
    assert fs.load_msg(5).data == payload
    fs.stop()


def test_sync_in_a_thread(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p, block_size=2048, sync_interval="always")
    assert fs.sync_always
    stop = threading.Event()
    errors = []

    def syncer():
        while not stop.is_set():
            try:
                fs.sync()
            except Exception as e:  # pragma: no cover
                errors.append(e)

    t = threading.Thread(target=syncer)
    t.start()
    try:
        for i in range(2000):
            fs.store_msg("foo", b"", b"q" * 50)
            if i % 3 == 0:
                fs.remove_msg(i)
    finally:
        stop.set()
        t.join()
    assert not errors
    before = snapshot(fs)
    fs.stop()
    fs = open_fs(p, block_size=2048)
    assert snapshot(fs) == before
    fs.delete()
    assert not os.path.exists(p)


def test_state_log_damage(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(10):
        fs.store_msg("foo", b"", b"m")
    for seq in (2, 5, 7):
        fs.remove_msg(seq)
    fs.stop()
    log_path = os.path.join(p, "state.log")
    good = open(log_path, "rb").read()
    # A flipped byte in the middle tombstone: that one deletion is lost, the others hold.
    bad = bytearray(good)
    bad[len(good) - 40 + 10] ^= 0x01
    open(log_path, "wb").write(bytes(bad))
    log = Log()
    fs = open_fs(p, log)
    assert fs.state().deleted == [2, 7] and log.has("error", "corrupt")
    fs.stop()
    # A torn last record: dropped with a warning.
    open(log_path, "wb").write(good[:-5])
    log = Log()
    fs = open_fs(p, log)
    assert fs.state().deleted == [2, 5] and log.has("warn", "torn")
    fs.stop()
    # Missing altogether: the blocks are still read (deletions lost, reported).
    os.unlink(log_path)
    log = Log()
    fs = open_fs(p, log)
    assert fs.state().msgs == 10 and log.has("warn", "missing")
    fs.stop()


def test_limit_removals_after_a_crash(tmp_path):
    # Tombstones of removals by limits are batched; after a crash the limits re-apply.
    p = tmp_path / "s"
    fs = open_fs(p, max_msgs=3, max_msgs_per_subject=2)
    for i in range(10):
        fs.store_msg("a" if i % 3 else "b", b"", b"%d" % i)
    assert fs._deferred  # not written yet
    before = snapshot(fs)
    crashed = open_fs(p, max_msgs=3, max_msgs_per_subject=2)
    assert snapshot(crashed) == before
    fs._close_fds()
    crashed.stop()
    # An explicit removal writes the batch first.
    fs = open_fs(p, max_msgs=3, max_msgs_per_subject=2)
    for i in range(5):
        fs.store_msg("c", b"", b"")
    fs.remove_msg(fs.state().last_seq)
    assert not fs._deferred
    before = snapshot(fs)
    crashed = open_fs(p)  # no limits now: nothing removed by limits comes back
    assert snapshot(crashed) == before
    fs._close_fds()
    crashed.stop()


def test_sparse_block_reopen(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(3):
        fs.store_msg("a", b"", b"")
    fs.store_raw(10**12, "b", b"", b"", 1)
    fs.store_raw(10**12 + 5, "b", b"", b"", 2)
    fs.remove_msg(2)
    fs.remove_msg(10**12)
    fs._rewrite_log()  # tombstones from the records actually in the block, not the range
    assert os.path.getsize(os.path.join(p, "state.log")) < 200
    def view(fs):
        st = fs.state()
        return (st.msgs, st.first_seq, st.last_seq, st.num_deleted, fs.subjects_state(), live_seqs(fs))

    before = view(fs)
    fs.stop()
    fs = open_fs(p)
    assert view(fs) == before
    fs.stop()


def test_sequential_reads_read_ahead_and_see_every_change(tmp_path):
    """Sequential reads inside a read pass (read_begin .. read_done, a consumer's delivery run) come from one
    read-ahead of the block (store._rc); an erase, a truncation and a new block drop it, so what is read is
    always what is on disk; read_done() lets it go."""
    fs = open_fs(tmp_path, block_size=4096)
    for i in range(1, 201):
        fs.store_msg(f"s.{i % 3}", b"", b"v%d" % i, 0)
    reads = []
    real = os.pread
    fsmod.os.pread = lambda *a: reads.append(a) or real(*a)
    try:
        for seq in range(1, 21):  # (outside a read pass: one read per record, nothing kept)
            assert fs.load_msg(seq).data == b"v%d" % seq
        assert len(reads) == 20 and fs._rc is None
        reads.clear()
        fs.read_begin()
        for seq in range(1, 201):
            m = fs.load_msg(seq)
            assert (m.seq, m.subject, m.data) == (seq, f"s.{seq % 3}", b"v%d" % seq)
        assert len(reads) < 40  # (200 records in ~6 blocks: a few reads each, not one per record)
        fs.load_msg(150)
        fs.load_msg(151)
        assert fs._rc is not None
        assert fs.remove_msg(152, erase=True)
        assert fs._rc is None  # erased in place: the read-ahead is gone
        assert fs.load_msg(152) is None and fs.load_msg(153).data == b"v153"
        for seq in range(100, 120):
            fs.load_msg(seq)
        fs.truncate(110)
        for i in range(111, 131):
            fs.store_msg("t.new", b"", b"new%d" % i, 0)
        for seq in range(105, 131):  # the records after the cut were written where the old ones were
            m = fs.load_msg(seq)
            assert m.data == (b"v%d" % seq if seq <= 110 else b"new%d" % seq), seq
        fs.read_done()
        assert fs._rc is None
    finally:
        fsmod.os.pread = real
        fs.stop()


def test_damage_found_while_running_is_reported_as_lost(tmp_path):
    # a record failing its checksum on a read after the open: the message is no longer live, its sequence is in
    # state().lost as after an open-time scan, the owner hears of it once, and a restart finds it lost again
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(3):
        fs.store_msg("foo", b"", b"abcdefgh")
    heard = []
    fs.register_damage_callback(heard.append)
    _, path, off, rlen = fs._record_location(2)
    with open(path, "r+b") as f:
        f.seek(off + rlen - 6)
        f.write(b"Z")
    for _ in range(2):
        with pytest.raises(ErrStoreCorrupt):
            fs.load_msg(2)
    st = fs.state()
    assert (st.msgs, st.lost, heard) == (2, [2], [2])
    assert fs.load_next_msg(">", 2, True).seq == 3
    assert (fs.lost_from(1), fs.lost_from(2), fs.lost_from(3)) == (2, 2, 0)
    # its subject is still known from the index (a filtered reader need not wait for it); a live one is not lost
    assert (fs.lost_subject(2), fs.lost_subject(1), fs.lost_subject(3)) == ("foo", None, None)
    fs.stop()
    fs = open_fs(p)
    assert fs.state().lost == [2] and fs.state().msgs == 2
    assert fs.lost_subject(2) is None  # (found by the open-time scan: nothing read from the record is trusted)
    fs.stop()
