"""Power cuts (tests/faults/lazyfs.py: what was not fsynced is gone) of a lone JetStream server, Rillet and the
Go nats-server side by side with the same inputs. With ``sync_interval: always`` Rillet keeps every acknowledged
message, the stream and the consumer's acknowledged state; with the default interval it keeps the stream and
consumer definitions (their messages since the last sync may go: one server, lazy fsync). A restored stream
survives a cut right after the restore was answered. What nats-server 2.15 keeps is asserted as measured
(it forgets the whole stream in both modes), so a change in it shows here."""
from __future__ import annotations

import asyncio
import os
import signal

import nats
import pytest

from helpers import ServerProcess, free_port
from tests.faults.lazyfs import Mounted, fuse_available

pytestmark = pytest.mark.skipif(fuse_available() is not None, reason=f"lazyfs: {fuse_available()}")

N = 200


class Lone:
    def __init__(self, kind: str, tmp: str, sync: str) -> None:
        self.kind, self.port = kind, free_port()
        self.fs = Mounted(os.path.join(tmp, "work"), os.path.join(tmp, "store"))
        self.conf = os.path.join(tmp, "s.conf")
        with open(self.conf, "w") as f:
            f.write(f"port: {self.port}\nhost: 127.0.0.1\nserver_name: p1\n"
                    f"jetstream {{ store_dir: '{self.fs.mount}'\n{'sync_interval: ' + sync if sync else ''}\n}}\n")
        self.proc: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = ["nats-server"] if self.kind == "go" else None
        self.proc = ServerProcess("-c", self.conf, command=cmd)
        self.proc.wait_log("Server is ready", timeout=30)

    def power_cut(self) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.proc.wait()
        self.fs.cut()

    def close(self) -> None:
        if self.proc is not None and self.proc.proc.poll() is None:
            self.proc.proc.kill()
            self.proc.proc.wait()
        self.fs.close()


@pytest.fixture(params=["rillet", "go"])
def lone(request, tmp_path):
    made: list[Lone] = []

    def make(sync: str) -> Lone:
        s = Lone(request.param, str(tmp_path / f"s{len(made)}"), sync)
        made.append(s)
        return s
    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    for s in made:
        s.close()


async def _fill(url: str) -> tuple[int, int]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    acked = 0
    for i in range(N):
        await js.publish(f"s.{i % 7}", b"m%d" % i)
        acked += 1
    psub = await js.pull_subscribe("s.>", durable="D")
    msgs = await psub.fetch(50, timeout=5)
    for m in msgs:
        await m.ack_sync()
    await nc.close()
    return acked, len(msgs)


async def _state(url: str) -> tuple[int | None, int | None]:
    """(messages in S or None when S is gone, D's ack floor or None when D is gone)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        si = await js.stream_info("S")
    except nats.js.errors.NotFoundError:
        await nc.close()
        return None, None
    try:
        ci = await js.consumer_info("S", "D")
        floor: int | None = ci.ack_floor.stream_seq
    except nats.js.errors.NotFoundError:
        floor = None
    await nc.close()
    return si.state.messages, floor


def test_power_cut_with_sync_always(lone) -> None:
    s = lone("always")
    s.start()
    acked, consumed = asyncio.run(_fill(s.url))
    s.power_cut()
    s.start()
    msgs, floor = asyncio.run(_state(s.url))
    if lone.kind == "rillet":
        assert msgs == acked, "acknowledged messages lost with sync_interval: always"
        assert floor is not None, "the consumer was forgotten"
    else:
        assert msgs is None  # nats-server 2.15: the stream is forgotten (measured; Jepsen 2025 reported it)


def test_confirmed_acks_survive_a_power_cut_with_sync_always(tmp_path) -> None:
    # an AckSync's confirmation is sent once the consumer state holding the ack is fsynced
    s = Lone("rillet", str(tmp_path / "s"), "always")
    try:
        s.start()
        acked, consumed = asyncio.run(_fill(s.url))
        s.power_cut()
        s.start()
        assert asyncio.run(_state(s.url)) == (acked, consumed)
    finally:
        s.close()


def test_power_cut_with_the_default_sync(lone) -> None:
    s = lone("")
    s.start()
    asyncio.run(_fill(s.url))
    s.power_cut()
    s.start()
    msgs, floor = asyncio.run(_state(s.url))
    if lone.kind == "rillet":
        # one server, lazy fsync: messages since the last sync may go, the definitions do not
        assert msgs is not None and floor is not None
    else:
        assert msgs is None


def test_restore_answered_then_power_cut(lone, tmp_path) -> None:
    if lone.kind == "go":
        pytest.skip("nats-server forgets the stream at a cut in every mode (above); its restore is not compared")
    s = lone("always")
    s.start()

    async def backup_restore() -> None:
        nc = await nats.connect(s.url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(20):
            await js.publish("s.x", b"%d" % i)
        # the nats CLI's backup/restore: a snapshot of S, deleted, restored under its name
        from rillet.cli.main import main as cli
        d = str(tmp_path / "backup")
        assert await asyncio.to_thread(cli, ["-s", s.url, "stream", "backup", "S", d]) == 0
        await js.delete_stream("S")
        assert await asyncio.to_thread(cli, ["-s", s.url, "stream", "restore", d]) == 0
        await nc.close()
    asyncio.run(backup_restore())
    s.power_cut()
    s.start()
    msgs, _ = asyncio.run(_state(s.url))
    assert msgs == 20
