"""tests/faults/lazyfs.py: a power cut loses exactly what was not made durable (data by fsync of the file,
directory entries by fsync of the directory), and keeps everything that was."""
from __future__ import annotations

import os

import pytest

from tests.faults.lazyfs import Mounted, fuse_available

pytestmark = pytest.mark.skipif(fuse_available() is not None, reason=f"lazyfs: {fuse_available()}")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: str, data: bytes, sync: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


@pytest.fixture
def fs(tmp_path):
    with Mounted(str(tmp_path / "work"), str(tmp_path / "mnt")) as m:
        yield m


def test_unsynced_file_and_entry_are_lost(fs):
    p = os.path.join(fs.mount, "a")
    _write(p, b"hello", sync=False)
    assert open(p, "rb").read() == b"hello"
    fs.cut()
    assert not os.path.exists(p)


def test_synced_data_without_a_synced_entry_is_lost(fs):
    p = os.path.join(fs.mount, "a")
    _write(p, b"hello", sync=True)
    fs.cut()
    assert not os.path.exists(p)


def test_synced_entry_and_data_survive_and_later_writes_do_not(fs):
    p = os.path.join(fs.mount, "a")
    _write(p, b"hello", sync=True)
    _fsync_dir(fs.mount)
    with open(p, "r+b") as f:
        f.seek(0, 2)
        f.write(b" world")  # not synced
    assert open(p, "rb").read() == b"hello world"
    fs.cut()
    assert open(p, "rb").read() == b"hello"


def test_entry_synced_data_not_gives_an_empty_file(fs):
    p = os.path.join(fs.mount, "a")
    _write(p, b"hello", sync=False)
    _fsync_dir(fs.mount)
    fs.cut()
    assert open(p, "rb").read() == b""


def test_unsynced_rename_and_unlink_are_undone(fs):
    a, b, c = (os.path.join(fs.mount, n) for n in "abc")
    _write(a, b"A", sync=True)
    _write(c, b"C", sync=True)
    _fsync_dir(fs.mount)
    os.rename(a, b)
    os.unlink(c)
    assert sorted(os.listdir(fs.mount)) == ["b"]
    fs.cut()
    assert sorted(os.listdir(fs.mount)) == ["a", "c"] and open(a, "rb").read() == b"A"


def test_synced_rename_survives_with_its_data(fs):
    a, b = os.path.join(fs.mount, "a.tmp"), os.path.join(fs.mount, "a")
    _write(a, b"new", sync=True)
    os.rename(a, b)
    _fsync_dir(fs.mount)
    fs.cut()
    assert os.listdir(fs.mount) == ["a"] and open(b, "rb").read() == b"new"


def test_subdirectories_need_their_own_fsync(fs):
    d = os.path.join(fs.mount, "d")
    os.mkdir(d)
    _fsync_dir(fs.mount)
    _write(os.path.join(d, "x"), b"x", sync=True)  # d's entry for x not synced
    fs.cut()
    assert os.path.isdir(d) and os.listdir(d) == []
    _write(os.path.join(d, "x"), b"x", sync=True)
    _fsync_dir(d)
    fs.cut()
    assert open(os.path.join(d, "x"), "rb").read() == b"x"


def test_truncation_and_overwrite_in_place(fs):
    p = os.path.join(fs.mount, "f")
    _write(p, b"0123456789", sync=True)
    _fsync_dir(fs.mount)
    with open(p, "r+b") as f:
        f.write(b"AB")
        f.flush()
        os.fsync(f.fileno())
        f.truncate(4)  # not synced
    fs.cut()
    assert open(p, "rb").read() == b"AB23456789"


def test_sync_all_and_state_survives_a_remount(tmp_path):
    work, mnt = str(tmp_path / "work"), str(tmp_path / "mnt")
    with Mounted(work, mnt) as m:
        os.makedirs(os.path.join(mnt, "x", "y"))
        _write(os.path.join(mnt, "x", "y", "z"), b"zz", sync=False)
        m.sync()
    with Mounted(work, mnt) as m:
        m.cut()
        assert open(os.path.join(mnt, "x", "y", "z"), "rb").read() == b"zz"
