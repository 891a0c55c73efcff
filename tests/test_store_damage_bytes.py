"""The bytes of damaged records (issue 24): stream info's ``state.lost.bytes`` and the ``STREAM.DATA_LOST``
advisory's ``bytes`` were always 0. The file store now keeps them where it knows them (``FileStore.lost_bytes``):
a record a read found damaged counts its length as written; a corrupt region found when the store opens counts
its bytes, shared by the sequences lost in it."""
from __future__ import annotations

import pytest

from rillet.jetstream.store import ErrStoreCorrupt

from test_store_file import open_fs


def _flip(path, off) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))


def test_a_record_found_damaged_at_open_counts_its_bytes(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(10):
        fs.store_msg("foo", b"", b"payload-%d" % i)
    _, path, off, rlen = fs._record_location(5)
    fs.stop()
    _flip(path, off + rlen - 8)  # (inside the payload)
    fs = open_fs(p)
    assert fs.state().lost == [5]
    assert fs.lost_bytes() == rlen and fs.lost_bytes([5]) == rlen and fs.lost_bytes([4, 6]) == 0
    fs.stop()
    fs = open_fs(p)  # (found again at the next open: the same bytes)
    assert fs.lost_bytes() == rlen
    fs.remove_msg(5)  # (a damaged record deleted: forgotten, no longer lost)
    assert fs.state().lost == [] and fs.lost_bytes() == 0
    fs.stop()


def test_a_corrupt_region_of_several_records_shares_its_bytes(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(10):
        fs.store_msg("foo", b"", b"payload-%d" % i)
    locs = [fs._record_location(s) for s in (4, 5, 6)]
    fs.stop()
    for _, path, off, rlen in locs:
        _flip(path, off + rlen - 8)
    fs = open_fs(p)
    assert fs.state().lost == [4, 5, 6]
    total = sum(loc[3] for loc in locs)
    assert fs.lost_bytes() == total
    assert sum(fs.lost_bytes([s]) for s in (4, 5, 6)) == total
    fs.stop()


def test_a_record_a_read_finds_damaged_counts_its_length(tmp_path):
    p = tmp_path / "s"
    fs = open_fs(p)
    for i in range(3):
        fs.store_msg("foo", b"", b"abcdefgh")
    _, path, off, rlen = fs._record_location(2)
    with open(path, "r+b") as f:
        f.seek(off + rlen - 6)
        f.write(b"Z")
    assert fs.lost_bytes() == 0
    with pytest.raises(ErrStoreCorrupt):
        fs.load_msg(2)
    assert fs.state().lost == [2] and fs.lost_bytes() == rlen
    fs.stop()
