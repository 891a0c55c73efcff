"""A file store opened again after a kill, then power-cut (tests/faults/lazyfs.py: what was not fsynced is gone).

Opening rewrites the state log durably from the recovered state. Its first/last markers must not become
durable ahead of the messages they count: the blocks (their contents and their directory entries) found at open
are made durable first. Before, a store opened after a kill and then power-cut came back with a log saying the
messages existed and no block holding them, so they read as deleted, and a replica replaying its RAFT log
skipped them as already stored (js_faults kill,power-minority, sync default, seed 1).
"""
from __future__ import annotations

import os

import pytest

from rillet.jetstream.store.base import StoreConfig
from rillet.jetstream.store.filestore import FileStore
from tests.faults.lazyfs import Mounted, fuse_available

pytestmark = pytest.mark.skipif(fuse_available() is not None, reason=f"lazyfs: {fuse_available()}")

N = 300


def test_messages_counted_by_the_reopened_log_survive_a_power_cut(tmp_path) -> None:
    with Mounted(str(tmp_path / "work"), str(tmp_path / "mnt")) as m:
        d = os.path.join(m.mount, "S")
        fs = FileStore(d, StoreConfig(name="S"))
        for i in range(N):
            fs.store_msg(f"s.{i % 7}", b"", b"x" * 50)
        assert fs.state().last_seq == N
        # a kill: nothing synced, nothing closed; the page cache (lazyfs' memory) still has it all
        fs2 = FileStore(d, StoreConfig(name="S"))
        assert fs2.state().msgs == N
        m.cut()  # power cut after the reopen
        fs3 = FileStore(d, StoreConfig(name="S"))
        st = fs3.state()
        # what the reopened log counts must be there: the messages, not a range of deletions
        assert (st.first_seq, st.last_seq, st.msgs) == (1, N, N), st
        assert fs3.load_msg(1).seq == 1 and fs3.load_msg(N).seq == N
        fs3.stop()
