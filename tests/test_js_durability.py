"""Acknowledged JetStream data survives SIGKILL of the server process.

With ``sync_interval: always`` the server acks a publish only after its fsync, so a kill at any moment
must not lose an acked message. With the default interval a process crash (the OS survives) loses nothing
either, because every append is in the OS page cache before the ack goes out.
"""
from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time

import nats
import pytest

from helpers import free_port


def start_server(conf: str, port: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "rillet.server", "-c", conf, "-a", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    import socket
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return p
        except OSError:
            if p.poll() is not None:
                raise RuntimeError(p.stderr.read().decode())
            time.sleep(0.05)
    p.kill()
    raise RuntimeError("server did not start")


async def publish_until_killed(url: str, proc: subprocess.Popen, start_at: int, run_for: float) -> dict[int, bytes]:
    """Publish with a window of outstanding acks; SIGKILL the server after ``run_for`` seconds.
    Returns {seq: payload} for every publish the server acknowledged."""
    nc = await nats.connect(url, max_reconnect_attempts=0, allow_reconnect=False)
    js = nc.jetstream(timeout=2)
    acked: dict[int, bytes] = {}
    stop = asyncio.get_running_loop().time() + run_for
    killed = False
    counter = start_at

    async def one(payload: bytes) -> None:
        try:
            ack = await js.publish("dur.x", payload)
        except Exception:
            return
        acked[ack.seq] = payload

    pending: set[asyncio.Task] = set()
    while not killed:
        while len(pending) < 50:
            counter += 1
            t = asyncio.ensure_future(one(b"m-%08d" % counter))
            pending.add(t)
            t.add_done_callback(pending.discard)
        await asyncio.sleep(0)
        if asyncio.get_running_loop().time() >= stop:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
        else:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(*pending, return_exceptions=True)
    try:
        await nc.close()
    except Exception:
        pass
    proc.wait()
    return acked


async def check_all_present(url: str, acked: dict[int, bytes]) -> int:
    """Read the whole stream back (a pull consumer, batches of 1000) and compare with what was acked."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    si = await js.stream_info("DUR")
    stored: dict[int, bytes] = {}
    sub = await js.pull_subscribe("dur.>", durable=None, config=nats.js.api.ConsumerConfig(
        ack_policy="none", deliver_policy="all", inactive_threshold=5.0))
    while len(stored) < si.state.messages:
        try:
            msgs = await sub.fetch(1000, timeout=2)
        except nats.errors.TimeoutError:
            break
        for m in msgs:
            stored[m.metadata.sequence.stream] = m.data
    await sub.unsubscribe()
    missing = [seq for seq in acked if stored.get(seq) != acked[seq]]
    assert not missing, f"{len(missing)} acked messages lost or changed, e.g. seq {missing[:5]}"
    # in order: payload counters grow with sequence numbers
    seqs = sorted(stored)
    counters = [int(stored[s][2:]) for s in seqs]
    assert counters == sorted(counters)
    await nc.close()
    return si.state.last_seq


@pytest.mark.parametrize("sync", ["always", "default"])
async def test_acked_messages_survive_sigkill(tmp_path, sync):
    store = tmp_path / "store"
    conf = tmp_path / "js.conf"
    js_block = f'jetstream {{ store_dir: "{store}"' + (", sync_interval: always" if sync == "always" else "") + " }"
    conf.write_text(js_block + "\n")
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    proc = start_server(str(conf), port)
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name="DUR", subjects=["dur.>"])
    await nc.close()
    rng = random.Random(7 if sync == "always" else 11)
    all_acked: dict[int, bytes] = {}
    counter = 0
    for _ in range(4):
        acked = await publish_until_killed(url, proc, counter, rng.uniform(0.2, 0.6))
        counter += 1_000_000
        all_acked.update(acked)
        proc = start_server(str(conf), port)
        await check_all_present(url, all_acked)
    assert len(all_acked) > 50
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)
