"""Atomic batches in the stores: ``store_batch`` stores every message of a batch or none of them, on disk too.

The file store writes a batch with one write into one block, every record but the last flagged; recovery
indexes a batch only when its last record is there, so a batch cut short by a crash (or a failed write
that could not be cut off) is dropped whole and the block is truncated at its start.
"""
from __future__ import annotations

import errno
import os
import shutil

import pytest

from rillet.jetstream.store import ErrStoreFull, StoreConfig
from rillet.jetstream.store import filestore as fsmod
from rillet.jetstream.store.base import ErrMaxBytes, ErrMaxMsgs
from rillet.jetstream.store.filestore import FileStore
from rillet.jetstream.store.memstore import MemStore
from test_store_file import Log, blocks, snapshot

HDR = b"NATS/1.0\r\nNats-Batch-Id: b\r\n\r\n"


def open_fs(path, log=None, **kw):
    return FileStore(str(path), StoreConfig(name="t", **kw), log=log)


def batch(n: int, tag: str = "b", ts: int = 0) -> list[tuple[str, bytes, bytes, int, float]]:
    return [(f"s.{i % 3}", HDR if i % 2 else b"", f"{tag}-{i}".encode() * 3, ts, 0) for i in range(n)]


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_store_batch_stores_all_in_order(tmp_path, kind):
    fs = open_fs(tmp_path / "s") if kind == "file" else MemStore(StoreConfig(name="t", storage="memory"))
    fs.store_msg("x", b"", b"before")
    out = fs.store_batch(batch(5, ts=123))
    assert out == [(s, 123) for s in range(2, 7)]
    st = fs.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (6, 1, 6)
    assert [fs.load_msg(s).data for s in range(2, 7)] == [f"b-{i}".encode() * 3 for i in range(5)]
    assert fs.load_msg(3).hdr == HDR and fs.load_msg(3).subject == "s.1"
    assert fs.store_msg("x", b"", b"after")[0] == 7
    if kind == "file":
        before = snapshot(fs)
        fs.stop()
        fs = open_fs(tmp_path / "s")
        assert snapshot(fs) == before
    fs.stop()


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_store_batch_discard_new_limits_refuse_the_whole_batch(tmp_path, kind):
    kw = dict(max_msgs=5, discard="new")
    fs = open_fs(tmp_path / "s", **kw) if kind == "file" else MemStore(StoreConfig(name="t", storage="memory", **kw))
    fs.store_batch(batch(3))
    with pytest.raises(ErrMaxMsgs):
        fs.store_batch(batch(3, "c"))
    assert fs.state().msgs == 3 and fs.state().last_seq == 3
    fs.update_config(StoreConfig(name="t", storage=kind, max_bytes=400, discard="new"))
    with pytest.raises(ErrMaxBytes):
        fs.store_batch(batch(10, "d"))
    assert fs.state().msgs == 3 and fs.state().last_seq == 3
    fs.stop()


@pytest.mark.parametrize("compression", ["none", "s2"])
def test_batch_cut_short_at_every_offset_is_dropped_whole(tmp_path, compression):
    """A crash while the batch's bytes were reaching the disk: whatever prefix of it is there, recovery
    shows none of its messages, and the store goes on from the sequence before it."""
    src = tmp_path / "src"
    fs = open_fs(src, compression=compression)
    for i in range(3):
        fs.store_msg("pre", b"", b"m" * 80)
    start = fs._active.size
    fs.store_batch(batch(4, "x" * 30))
    end = fs._active.size
    path = fs._active.path
    # every record boundary of the batch and the bytes around it, and a stride through the rest
    cuts = {start, end}
    for seq in range(4, 8):
        off = fs._record_location(seq)[2]
        cuts.update((off - 1, off, off + 1, off + fsmod._REC_LEN))
    cuts.update(range(start, end, 17))
    rel = os.path.relpath(path, src)
    full = snapshot(fs)
    fs.stop()
    for cut in sorted(c for c in cuts if start <= c <= end):
        dst = tmp_path / f"c{cut}"
        shutil.copytree(src, dst)
        with open(dst / rel, "r+b") as f:
            f.truncate(cut)
        log = Log()
        fs = open_fs(dst, log, compression=compression)
        st = fs.state()
        if cut == end:
            assert snapshot(fs) == full
            assert not log.lines
        else:
            assert (st.msgs, st.last_seq, st.lost) == (3, 3, []), cut
            if cut > start:
                assert log.has("warn", "incomplete atomic batch") or log.has("warn", "torn"), (cut, log.lines)
            assert os.path.getsize(dst / rel) == start
            # appendable at the next sequence, and that survives a reopen
            assert fs.store_msg("post", b"", b"again")[0] == 4
            fs.stop()
            fs = open_fs(dst, compression=compression)
            assert fs.load_msg(4).data == b"again" and fs.state().msgs == 4 and fs.state().lost == []
        fs.stop()
        shutil.rmtree(dst)


def test_batch_records_missing_their_last_record_are_dropped(tmp_path):
    """Records flagged 'more follow' with nothing after them (the last record never written)."""
    p = tmp_path / "s"
    fs = open_fs(p)
    fs.store_msg("pre", b"", b"one")
    start = fs._active.size
    fs.store_batch(batch(3))
    off = fs._record_location(4)[2]  # the batch's last record
    path = fs._active.path
    fs.stop()
    with open(path, "r+b") as f:
        f.truncate(off)
    log = Log()
    fs = open_fs(p, log)
    assert (fs.state().msgs, fs.state().last_seq) == (1, 1)
    assert log.has("warn", "incomplete atomic batch (sequences 2..3")
    assert os.path.getsize(path) == start
    fs.stop()


def _torn_then_enospc(nbytes: int):
    real = os.pwritev

    def pwritev(fd, bufs, off):
        real(fd, [b"".join(bufs)[:nbytes]], off)  # part of the batch reaches the file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")
    return pwritev


@pytest.mark.parametrize("nbytes", [0, 10, 200])
def test_failed_batch_write_stores_nothing(tmp_path, monkeypatch, nbytes):
    p = tmp_path / "s"
    fs = open_fs(p)
    fs.store_msg("pre", b"", b"one")
    blk = blocks(p)[-1]
    size = os.path.getsize(p / "msgs" / blk)
    before = snapshot(fs)
    monkeypatch.setattr(fsmod.os, "pwritev", _torn_then_enospc(nbytes))
    with pytest.raises(ErrStoreFull, match="No space left"):
        fs.store_batch(batch(5))
    monkeypatch.undo()
    assert snapshot(fs) == before
    assert os.path.getsize(p / "msgs" / blk) == size
    assert fs.store_batch(batch(2))[0][0] == 2
    after = snapshot(fs)
    fs.stop()
    fs = open_fs(p)
    assert snapshot(fs) == after
    fs.stop()


def test_failed_batch_write_that_cannot_be_cut_off_is_dropped_on_recovery(tmp_path, monkeypatch):
    """The write fails and the cut-off fails too: the partial batch stays in the file, is never indexed,
    and recovery drops it (its last record is missing)."""
    p = tmp_path / "s"
    log = Log()
    fs = open_fs(p, log)
    fs.store_msg("pre", b"", b"one")
    before = snapshot(fs)
    recs_len = sum(fsmod._OVERHEAD + len(s) + len(h) + len(d) for s, h, d, _, _ in batch(5))
    monkeypatch.setattr(fsmod.os, "pwritev", _torn_then_enospc(recs_len - 5))

    def no_truncate(fd, size):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(fsmod.os, "ftruncate", no_truncate)
    with pytest.raises(ErrStoreFull):
        fs.store_batch(batch(5))
    monkeypatch.undo()
    assert log.has("error", "cannot cut off a failed batch write")
    assert snapshot(fs) == before
    fs.stop()  # a crash now: the partial batch is on disk
    log = Log()
    fs = open_fs(p, log)
    assert snapshot(fs) == before
    assert log.has("warn", "incomplete atomic batch")
    fs.stop()


def test_batch_never_spans_blocks(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p, block_size=300)
    fs.store_msg("pre", b"", b"x" * 100)
    fs.store_batch(batch(8, "y" * 20))  # larger than a block: one block of its own
    idx = {fs._record_location(s)[0] for s in range(2, 10)}
    assert len(idx) == 1 and idx != {fs._record_location(1)[0]}
    fs.store_msg("post", b"", b"z")
    before = snapshot(fs)
    fs.stop()
    fs = open_fs(p, block_size=300)
    assert snapshot(fs) == before
    fs.stop()
