"""Write-behind on one server (rillet.jetstream.stream, FileStore.write_behind): the plain appends of a loop
pass are written with one write before their PubAcks leave; a failed write takes them back and answers each
held PubAck with the store's error."""
from __future__ import annotations

import asyncio
import errno

import nats
from nats.js.errors import APIError

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.server import Options


def js_opts(tmp_path) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))


async def test_burst_is_gathered_acked_and_read_back(tmp_path, monkeypatch):
    import rillet.jetstream.store.filestore as fsmod
    flushes = []
    real = fsmod.FileStore.flush_writes

    def counting(self):
        if self._wb_off >= 0:
            flushes.append(len(self._wb))
        return real(self)

    monkeypatch.setattr(fsmod.FileStore, "flush_writes", counting)
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="WB", subjects=["wb"])
        await js.publish("wb", b"first")
        acks = await asyncio.gather(*[js.publish("wb", b"m%d" % i) for i in range(300)])
        assert sorted(a.seq for a in acks) == list(range(2, 302))
        assert flushes and len(flushes) < 300  # gathered: fewer writes than messages
        assert (await js.get_msg("WB", 150)).data == b"m%d" % (150 - 2)
        await nc.close()
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        info = await js.stream_info("WB")
        assert info.state.messages == 301 and info.state.last_seq == 301
        assert (await js.get_msg("WB", 301)).data == b"m299"
        await nc.close()


async def test_failed_gathered_write_fails_every_held_ack(tmp_path, monkeypatch):
    import rillet.jetstream.store.filestore as fsmod
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="DISK", subjects=["disk"])
        await js.publish("disk", b"before")

        def no_space(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(fsmod.os, "pwritev", no_space)
        monkeypatch.setattr(fsmod, "_write_all", no_space)
        res = await asyncio.gather(*[js.publish("disk", b"lost%d" % i) for i in range(20)], return_exceptions=True)
        assert all(isinstance(r, APIError) and (r.err_code, r.description) == (10023, "insufficient resources")
                   for r in res), res
        info = await js.stream_info("DISK")
        assert info.state.messages == 1 and info.state.last_seq == 1
        monkeypatch.undo()
        acks = await asyncio.gather(*[js.publish("disk", b"after%d" % i) for i in range(5)])
        assert sorted(a.seq for a in acks) == [2, 3, 4, 5, 6]
        assert (await js.get_msg("DISK", 2)).data.startswith(b"after")
        await nc.close()


async def test_held_acks_reach_exactly_the_subscribers_of_each_reply(tmp_path):
    """Held PubAcks sent together reuse one sublist result per reply prefix only when every subject under it
    has the same subscribers: a subscription naming one reply (literally, or with a wildcard before it) still
    gets that reply alone, and a wildcard one gets them all."""
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="R", subjects=["r"])
        await js.publish("r", b"first")
        got: dict[str, list[str]] = {"all": [], "seven": [], "nine": [], "other": []}

        def into(key):
            async def cb(msg):
                got[key].append(msg.subject)
            return cb
        await nc.subscribe("rp.t.*", cb=into("all"))
        await nc.subscribe("rp.t.7", cb=into("seven"))
        await nc.subscribe("*.t.9", cb=into("nine"))
        await nc.subscribe("rq.u.*", cb=into("other"))
        await nc.flush()
        for i in range(20):
            await nc.publish("r", b"x", reply=f"rp.t.{i}")
            await nc.publish("r", b"y", reply=f"rq.u.{i}")
        await nc.flush()
        for _ in range(100):
            if len(got["all"]) == 20 and len(got["other"]) == 20:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert sorted(got["all"]) == sorted(f"rp.t.{i}" for i in range(20))
        assert got["seven"] == ["rp.t.7"] and got["nine"] == ["rp.t.9"]
        assert sorted(got["other"]) == sorted(f"rq.u.{i}" for i in range(20))
        assert (await js.stream_info("R")).state.messages == 41
        await nc.close()


async def test_held_acks_follow_subscription_changes_between_passes(tmp_path):
    """The sublist result a stream keeps per reply prefix from one pass to the next (send_replies' memo) is
    dropped when the account's subscriptions change: a subscription added between two bursts gets the second
    burst's PubAcks, one naming a single reply makes the prefix's replies take the full path again."""
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        other = await nats.connect(srv.client_url)
        js = nc.jetstream()
        got: dict[str, list[str]] = {"a": [], "b": [], "c": []}

        def into(key):
            async def cb(msg):
                got[key].append(msg.subject)
            return cb

        async def burst(stream: str, n: int, want: dict[str, int]) -> None:
            for i in range(n):
                await nc.publish(f"{stream}.in", b"x", reply=f"mp{stream}.t.{i}")
            await nc.flush()
            for _ in range(250):
                if all(len(got[k]) >= v for k, v in want.items()):
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)

        for stream, storage in (("M", "memory"), ("F", "file")):
            for v in got.values():
                v.clear()
            await js.add_stream(name=stream, subjects=[f"{stream}.in"], storage=storage)
            sa = await nc.subscribe(f"mp{stream}.t.*", cb=into("a"))
            await nc.flush()
            await burst(stream, 20, {"a": 20})
            assert len(got["a"]) == 20 and not got["b"]
            sb = await other.subscribe(f"mp{stream}.t.>", cb=into("b"))  # (another connection: a new result)
            await other.flush()
            await burst(stream, 20, {"a": 40, "b": 20})
            assert len(got["a"]) == 40 and sorted(got["b"]) == sorted(f"mp{stream}.t.{i}" for i in range(20))
            sc = await other.subscribe(f"mp{stream}.t.3", cb=into("c"))  # (one reply alone)
            await other.flush()
            await burst(stream, 20, {"a": 60, "b": 40, "c": 1})
            assert got["c"] == [f"mp{stream}.t.3"] and len(got["a"]) == 60 and len(got["b"]) == 40
            for s in (sa, sb, sc):
                await s.unsubscribe()
            assert (await js.stream_info(stream)).state.messages == 60
        await nc.close()
        await other.close()
