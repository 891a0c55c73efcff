"""FileStore block indexes: the per-block .idx files a restart reads instead of scanning, their fallbacks
(torn, corrupt, stale, missing: that block alone is scanned), the bounded cache of loaded indexes and the
memory a stored message costs."""

from __future__ import annotations

import glob
import os
import shutil
import tracemalloc

import pytest

from rillet.jetstream.store import StoreConfig
from rillet.jetstream.store import _fsblocks
from rillet.jetstream.store import filestore as fsmod
from rillet.jetstream.store.filestore import FileStore

S = 1_000_000_000
KW = dict(block_size=2048, allow_msg_ttl=True, max_age=1000.0)


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, level: str, text: str) -> None:
        self.lines.append((level, text))

    def has(self, level: str, word: str) -> bool:
        return any(lv == level and word in t for lv, t in self.lines)


def open_fs(path, log=None, **kw):
    return FileStore(str(path), StoreConfig(name="t", **{**KW, **kw}), log=log)


def view(fs):
    """Everything observable: state, per-subject state, every message and its TTL, lookups."""
    st = fs.state().to_dict()  # deleted/lost are lazy: take them now
    msgs = {}
    for seq in range(st["first_seq"], st["last_seq"] + 1):
        m = fs.load_msg(seq)
        msgs[seq] = None if m is None else (m.subject, m.ts, m.hdr, m.data, fs.ttl_of(seq))
    lasts = {s: fs.load_last_msg(s).seq for s in fs.subjects_totals()}
    return (st, fs.subjects_state(">"), msgs, lasts, fs.next_expiry(), fs.num_pending(5, "s.*"),
            getattr(fs.load_next_msg("s.3", 17), "seq", None), fs.get_seq_from_time(100 * S))


def fill(fs, n=300):
    for i in range(n):
        hdr = b"NATS/1.0\r\nK: v\r\n\r\n" if i % 3 == 0 else b""
        fs.store_msg(f"s.{i % 7}", hdr, b"p%d" % i * 5, ts=(i + 1) * S, ttl=(50 if i % 11 == 0 else 0))
    for seq in (3, 4, 40, 41, 42, 150, 299):
        fs.remove_msg(seq)
    fs.compact(2)


def scans(monkeypatch):
    """Count the blocks scanned record by record (at open and later)."""
    seen: list[str] = []
    real_recover, real_rescan = FileStore._scan_recover, FileStore._rescan

    def recover(self, blk, *a):
        seen.append(os.path.basename(blk.path))
        return real_recover(self, blk, *a)

    def rescan(self, blk):
        seen.append(os.path.basename(blk.path))
        return real_rescan(self, blk)

    monkeypatch.setattr(FileStore, "_scan_recover", recover)
    monkeypatch.setattr(FileStore, "_rescan", rescan)
    return seen


def test_restart_reads_the_indexes_and_scans_nothing(tmp_path, monkeypatch):
    fs = open_fs(tmp_path)
    fill(fs)
    before = view(fs)
    fs.stop()
    blks = sorted(glob.glob(str(tmp_path / "msgs" / "*.blk")))
    assert len(blks) > 10
    assert sorted(glob.glob(str(tmp_path / "msgs" / "*.idx"))) == [b[:-4] + ".idx" for b in blks]
    seen = scans(monkeypatch)
    fs = open_fs(tmp_path)
    assert view(fs) == before
    assert seen == []
    # still appendable; the active block's index is written again at stop
    fs.store_msg("s.9", b"", b"after", ts=400 * S)
    after = view(fs)
    fs.stop()
    fs = open_fs(tmp_path)
    assert view(fs) == after and seen == []
    fs.stop()


@pytest.mark.parametrize("damage", ["torn", "summary_flip", "columns_flip", "missing", "garbage", "stale"])
def test_a_bad_index_falls_back_to_scanning_that_block_only(tmp_path, monkeypatch, damage):
    src = tmp_path / "src"
    fs = open_fs(src)
    fill(fs)
    before = view(fs)
    idx = sorted(glob.glob(str(src / "msgs" / "*.idx")))[3]
    stale = open(idx, "rb").read()
    fs.stop()
    victim = os.path.basename(idx)[:-4] + ".blk"
    if damage == "torn":
        os.truncate(idx, os.path.getsize(idx) - 7)
    elif damage in ("summary_flip", "columns_flip"):
        data = bytearray(open(idx, "rb").read())
        pos = 30 if damage == "summary_flip" else len(data) - 20
        data[pos] ^= 0x40
        open(idx, "wb").write(bytes(data))
    elif damage == "missing":
        os.unlink(idx)
    elif damage == "garbage":
        open(idx, "wb").write(os.urandom(300))
    elif damage == "stale":
        # the index of another block put in its place: checksums hold, the block does not match
        other = sorted(glob.glob(str(src / "msgs" / "*.idx")))[5]
        shutil.copy(other, idx)
    seen = scans(monkeypatch)
    log = Log()
    fs = open_fs(src, log)
    assert view(fs) == before
    assert seen == [victim]  # only that block, once (its index is rewritten: the next open scans nothing)
    if damage != "missing":
        assert log.has("warn", "index")
    fs.stop()
    seen.clear()
    fs = open_fs(src)
    assert view(fs) == before and seen == []
    fs.stop()
    assert stale  # (read before stop)


def test_an_index_is_not_trusted_after_the_block_changed(tmp_path, monkeypatch):
    """A block that grew, shrank or was rewritten after its index was written is scanned."""
    fs = open_fs(tmp_path, block_size=1 << 20)
    for i in range(50):
        fs.store_msg("a", b"", b"x%d" % i, ts=(i + 1) * S)
    fs.stop()
    (blk,) = glob.glob(str(tmp_path / "msgs" / "*.blk"))
    old_idx = open(blk[:-4] + ".idx", "rb").read()
    fs = open_fs(tmp_path, block_size=1 << 20)
    for i in range(5):
        fs.store_msg("a", b"", b"more", ts=(100 + i) * S)
    before = view(fs)
    fs._close_fds()  # a crash: no index written at stop
    fs._closed = True
    open(blk[:-4] + ".idx", "wb").write(old_idx)  # the index from before the appends
    seen = scans(monkeypatch)
    log = Log()
    fs = open_fs(tmp_path, log, block_size=1 << 20)
    assert view(fs) == before and seen == [os.path.basename(blk)]
    assert log.has("warn", "does not match")
    fs.stop()


def test_a_flipped_bit_in_an_indexed_block_is_still_found_on_open(tmp_path):
    fs = open_fs(tmp_path)
    fill(fs)
    _, path, off, rlen = fs._record_location(100)
    fs.stop()
    assert os.path.exists(path[:-4] + ".idx")
    with open(path, "r+b") as f:
        f.seek(off + rlen - 6)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 1]))
    log = Log()
    fs = open_fs(tmp_path, log)
    assert fs.state().lost == [100]
    assert log.has("warn", "does not match its block's content")
    fs.stop()


def test_loaded_indexes_stay_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(_fsblocks, "_IDX_CACHE", 3)
    fs = open_fs(tmp_path)
    fill(fs)
    fs.stop()
    fs = open_fs(tmp_path)
    assert len(fs._cache) <= 3  # (opening loads only blocks with tombstones)
    n = 0
    m = fs.load_next_msg(">", 0)
    while m is not None:
        n += 1
        assert len(fs._cache) <= 3
        m = fs.load_next_msg(">", m.seq + 1)
    assert n == fs.state().msgs
    # idle indexes are dropped at a later load
    monkeypatch.setattr(_fsblocks, "_IDX_IDLE", 0.0)
    fs._drop_idle()
    fs._drop_idle()
    assert len(fs._cache) == 0
    fs.stop()


def test_memory_per_stored_message_is_small(tmp_path):
    """No per-message objects: sealed blocks keep a few hundred bytes each until their index is loaded."""
    fs = open_fs(tmp_path, block_size=64 * 1024, allow_msg_ttl=False, max_age=0.0)
    subjects = [f"kv.{i}" for i in range(100)]
    payload = b"x" * 64
    for i in range(2000):  # warm up: the subjects exist, the first blocks sealed
        fs.store_msg(subjects[i % 100], b"", payload)
    tracemalloc.start()
    try:
        a = tracemalloc.get_traced_memory()[0]
        n = 30_000
        for i in range(n):
            fs.store_msg(subjects[i % 100], b"", payload)
        grown = tracemalloc.get_traced_memory()[0] - a
    finally:
        tracemalloc.stop()
    assert fs.state().msgs == n + 2000
    # the loaded indexes (the active block's and at most _IDX_CACHE sealed ones, ~28 B per message) plus
    # per sealed block its subject map (~60 B per subject in it): nothing per message beyond that
    nblocks = len(fs._bl)
    per_block = (n + 2000) // nblocks
    assert nblocks > 30
    assert grown < (_fsblocks._IDX_CACHE + 1) * per_block * 40 + nblocks * (1000 + 60 * len(subjects)), grown / n
    fs.stop()
