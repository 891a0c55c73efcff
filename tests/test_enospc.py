"""A full disk, for real: a JetStream server whose store is on a 1 MiB tmpfs, Rillet and the Go nats-server side by
side with the same inputs. Publishes are refused with nats-server's error (503/10023 "insufficient resources"),
nothing is stored half-way (the stream holds exactly what was acknowledged, also after a restart), and once space
is back (a purge) publishes succeed again."""
from __future__ import annotations

import asyncio
import os
import subprocess

import nats
import pytest

from helpers import ServerProcess, free_port


def _small_fs(path: str) -> str | None:
    """Mount a 1 MiB tmpfs at ``path``; None, or why it cannot be done here."""
    if os.geteuid() != 0:
        return "needs root (mount -t tmpfs)"
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", path], capture_output=True, text=True)
    return None if r.returncode == 0 else f"mount failed: {r.stderr.strip()}"


@pytest.fixture
def small_store(tmp_path):
    path = str(tmp_path / "small")
    why = _small_fs(path)
    if why is not None:
        pytest.skip(why)
    yield path
    subprocess.run(["umount", "-l", path], check=False)


async def _fill_until_full(url: str) -> tuple[int, tuple]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s"])
    acked, err = 0, None
    for _ in range(5000):
        try:
            await js.publish("s", b"x" * 1024)
            acked += 1
        except nats.js.errors.APIError as e:
            err = (e.code, e.err_code, e.description)
            break
    await nc.close()
    return acked, err


async def _messages(url: str) -> int:
    nc = await nats.connect(url)
    n = (await nc.jetstream().stream_info("S")).state.messages
    await nc.close()
    return n


async def _purge_and_publish(url: str) -> int:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.purge_stream("S")
    ack = await js.publish("s", b"y" * 1024)
    await nc.close()
    return ack.seq


@pytest.mark.parametrize("kind", ["rillet", "go"])
def test_full_disk_refuses_with_nats_servers_error_and_recovers(kind, small_store, tmp_path) -> None:
    port = free_port()
    conf = tmp_path / "s.conf"
    conf.write_text(f"port: {port}\nhost: 127.0.0.1\njetstream {{ store_dir: '{small_store}' }}\n")
    cmd = ["nats-server"] if kind == "go" else None

    def start() -> ServerProcess:
        return ServerProcess("-c", str(conf), command=cmd).wait_ready()
    url = f"nats://127.0.0.1:{port}"
    srv = start()
    try:
        acked, err = asyncio.run(_fill_until_full(url))
        assert acked > 100 and err == (503, 10023, "insufficient resources"), (acked, err)
        assert asyncio.run(_messages(url)) == acked  # nothing half-stored
        srv.proc.terminate()
        srv.proc.wait(15)
        srv = start()
        assert asyncio.run(_messages(url)) == acked  # and so after a restart
        assert asyncio.run(_purge_and_publish(url)) == acked + 1  # space back: publishes succeed again
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
