"""An fsync that fails is not retried as if it had worked (the "fsyncgate" lesson: the kernel may drop the pages it
could not write, so a later fsync that succeeds proves nothing). With sync_interval: always, the publishes that
fsync covered get no answer (their outcome is unknown), the stream logs why and refuses every new message with
503/10077 naming the failure, reads go on; a restart recovers the store from what is on disk and accepts again."""
from __future__ import annotations

import asyncio
import errno
import os

import nats
import pytest
from nats.js.errors import APIError

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options


def _opts(tmp_path) -> Options:
    return Options(host="127.0.0.1", port=-1,
                   jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path), sync_interval="always"))


async def test_failed_fsync_stops_acknowledging_until_restart(tmp_path, monkeypatch) -> None:
    real_fsync = os.fsync
    broken = {"on": False, "calls": 0}

    def fsync(fd: int) -> None:
        if broken["on"]:
            broken["calls"] += 1
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(timeout=1.0)
        # (the first API request loads the API's modules over loop passes: slow on a loaded machine)
        await nc.jetstream(timeout=15.0).add_stream(name="S", subjects=["s"])
        assert (await js.publish("s", b"one")).seq == 1
        monkeypatch.setattr(os, "fsync", fsync)
        broken["on"] = True
        with pytest.raises(nats.errors.TimeoutError):  # written, not known durable: no answer
            await js.publish("s", b"two")
        assert broken["calls"] >= 1
        broken["on"] = False  # fsync "works" again: it must not be trusted
        with pytest.raises(APIError) as ei:
            await js.publish("s", b"three")
        assert (ei.value.code, ei.value.err_code) == (503, 10077)
        assert "fsync failed" in ei.value.description and "Input/output error" in ei.value.description
        info = await js.stream_info("S")  # reads go on
        assert info.state.messages == 2
        assert "storage failure (fsync failed" in srv.log._out.getvalue()
        await nc.close()
    monkeypatch.setattr(os, "fsync", real_fsync)
    async with run_server(_opts(tmp_path)) as srv:  # the restart recovers what is on disk, and accepts again
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(timeout=2.0)
        ack = await js.publish("s", b"four")
        assert ack.seq == 3
        await nc.close()


async def test_a_full_disk_in_the_group_commit_is_not_a_failed_fsync(tmp_path, monkeypatch) -> None:
    # ENOSPC writing the state log is refused (answered) and clears once there is space: the stream is not failed
    import rillet.jetstream.store.filestore as fsmod
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(timeout=2.0)
        await js.add_stream(name="S", subjects=["s"])
        await js.publish("s", b"one")

        def no_space(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(fsmod.os, "pwritev", no_space)
        monkeypatch.setattr(fsmod, "_write_all", no_space)
        with pytest.raises(APIError) as ei:
            await js.publish("s", b"lost")
        assert ei.value.err_code == 10023
        monkeypatch.undo()
        assert (await js.publish("s", b"after")).seq == 2
        await nc.close()
