"""Directory fsyncs: a file that was created or renamed is only durable once its directory is fsynced.

With ``sync_interval: always`` an ack waits for the store's sync; a new block file's directory entry must be
in that sync (else a crash right after the ack can lose the whole block). Stream and consumer meta files
written via rename, and consumer state files, get their directory fsynced too.
"""
from __future__ import annotations

import json
import os
import stat
import threading

import nats
import pytest

from rillet.config.options import JetStreamOptions
from rillet.jetstream.store import StoreConfig
from rillet.jetstream.store import _fsblocks
from rillet.jetstream.store import filestore as fsmod
from rillet.jetstream.store.filestore import FileStore
from rillet.server import Options
from rillet.app.embed import run_server


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync as (kind, path): kind "dir" or "file"; path resolved from the descriptor."""
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    real = os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        with lock:
            events.append(("dir" if stat.S_ISDIR(st.st_mode) else "file", path))
        return real(fd)

    monkeypatch.setattr(fsmod.os, "fsync", fsync)
    return events


def dir_syncs(events, path) -> int:
    return sum(1 for k, p in events if k == "dir" and p == os.path.realpath(path))


def test_new_block_directory_is_fsynced_by_the_next_sync(tmp_path, fsyncs):
    p = tmp_path / "s"
    fs = FileStore(str(p), StoreConfig(name="t", block_size=300, sync_interval="always"))
    msgs = p / "msgs"
    assert dir_syncs(fsyncs, p) >= 1  # the store's own directories were created durably
    fsyncs.clear()
    fs.store_msg("a", b"", b"x" * 50)
    fs.sync()
    assert dir_syncs(fsyncs, msgs) == 1  # the first block
    # appends into an existing block: no directory fsync (the hot path stays one fsync per sync)
    fsyncs.clear()
    fs.store_msg("a", b"", b"x" * 50)
    fs.sync()
    assert dir_syncs(fsyncs, msgs) == 0
    # a new block: the next sync fsyncs the directory, after the block's creation
    nblocks = len(os.listdir(msgs))
    while len(os.listdir(msgs)) == nblocks:
        fs.store_msg("a", b"", b"x" * 50)
    fsyncs.clear()
    fs.sync()
    assert dir_syncs(fsyncs, msgs) == 1
    fs.stop()


def test_failed_directory_fsync_fails_the_sync_and_is_retried(tmp_path, monkeypatch):
    p = tmp_path / "s"
    fs = FileStore(str(p), StoreConfig(name="t", sync_interval="always"))
    real = fsmod.fsync_dir

    def broken(path):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(fsmod, "fsync_dir", broken)
    fs.store_msg("a", b"", b"x")
    with pytest.raises(fsmod.ErrStoreFull, match="Input/output error"):
        fs.sync()
    calls = []
    monkeypatch.setattr(fsmod, "fsync_dir", lambda path: (calls.append(path), real(path)))
    fs.sync()
    assert calls == [str(p / "msgs")]
    fs.stop()


def test_consumer_state_written_without_fsync_is_made_durable_by_sync(tmp_path, fsyncs):
    p = tmp_path / "s"
    fs = FileStore(str(p), StoreConfig(name="t"))
    cs = fs.consumer_store("c")
    cs.update({"delivered": {"consumer_seq": 1, "stream_seq": 1}})
    fsyncs.clear()
    cs.flush()  # written and renamed into place, not fsynced
    assert not fsyncs
    fs.sync()
    assert ("file", os.path.realpath(os.path.join(cs.path, "state"))) in fsyncs
    assert dir_syncs(fsyncs, cs.path) == 1
    fsyncs.clear()
    fs.sync()  # nothing new for the consumer: nothing to do
    assert not [e for e in fsyncs if e[1].startswith(os.path.realpath(cs.path))]
    fs.stop()


async def test_ack_of_the_first_message_waits_for_the_block_directory(tmp_path, fsyncs):
    """Through the server, sync_interval always: when the first publish's ack arrives, the new block file's
    directory has been fsynced; creating the stream and a durable consumer fsynced their directories."""
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(
        enabled=True, store_dir=str(tmp_path), sync_interval="always"))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(timeout=2)
        await js.add_stream(name="D", subjects=["d.>"])
        sdir = next(p for p in (tmp_path / "jetstream").rglob("D") if p.is_dir())
        assert dir_syncs(fsyncs, sdir) >= 1  # meta.json renamed into place, durably
        msgs = sdir / "store" / "msgs"
        assert not any(msgs.iterdir())  # no block yet
        fsyncs.clear()
        ack = await js.publish("d.x", b"first")
        assert ack.seq == 1 and len(list(msgs.iterdir())) == 1
        assert dir_syncs(fsyncs, msgs) == 1
        fsyncs.clear()
        await js.publish("d.x", b"second")
        assert dir_syncs(fsyncs, msgs) == 0
        r = await nc.request("$JS.API.CONSUMER.DURABLE.CREATE.D.dur",
                             json.dumps({"stream_name": "D", "config": {"durable_name": "dur",
                                                                          "ack_policy": "explicit"}}).encode())
        assert "error" not in json.loads(r.data)
        cdir = next(p for p in sdir.rglob("dur") if p.is_dir() and (p / "meta.json").exists())
        assert dir_syncs(fsyncs, cdir) >= 1
        await nc.close()


def test_failed_fsync_of_an_evicted_block_is_reported_by_the_next_sync(tmp_path, monkeypatch):
    """A block whose descriptor leaves the cache is fsynced first; if that fails, the failure must reach the
    next sync() (which an ack waits for), not vanish with the closed descriptor."""
    monkeypatch.setattr(_fsblocks, "_FD_CACHE", 2)
    p = tmp_path / "s"
    log = []
    fs = FileStore(str(p), StoreConfig(name="t", block_size=100), log=lambda lv, t: log.append((lv, t)))
    real = os.fsync
    broken = {"on": True}

    def fsync(fd):
        if broken["on"] and stat.S_ISREG(os.fstat(fd).st_mode) and os.readlink(f"/proc/self/fd/{fd}").endswith(".blk"):
            raise OSError(5, "Input/output error")
        return real(fd)
    monkeypatch.setattr(fsmod.os, "fsync", fsync)
    for i in range(8):  # one block per message: descriptors leave the cache
        fs.store_msg("a", b"", b"x" * 80)
    assert any(lv == "error" and "Input/output error" in t for lv, t in log)
    with pytest.raises(fsmod.ErrStoreFull, match="Input/output error"):
        fs.sync()
    broken["on"] = False
    fs.sync()
    assert all(b.synced == b.size for b in fs._blocks.values())
    fs.stop()
