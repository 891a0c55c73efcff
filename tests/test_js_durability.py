"""Acknowledged JetStream data survives SIGKILL of the server process.

With ``sync_interval: always`` the server acks a publish only after its fsync, so a kill at any moment
must not lose an acked message. With the default interval a process crash (the OS survives) loses nothing
either, because every append is in the OS page cache before the ack goes out.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time

import nats
import pytest

from helpers import free_port


def start_server(conf: str, port: int, go: bool = False) -> subprocess.Popen:
    cmd = ["nats-server"] if go else [sys.executable, "-m", "rillet.server"]
    p = subprocess.Popen(cmd + ["-c", conf, "-a", "127.0.0.1", "-p", str(port)],
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


def stop_server(proc: subprocess.Popen, how: str) -> None:
    proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.mark.parametrize("server", ["rillet", "nats-server"])
@pytest.mark.parametrize("how", ["kill", "term"])
async def test_dedup_and_last_msg_id_survive_restart(tmp_path, how, server):
    """A Nats-Msg-Id seen within the duplicate window before a restart (SIGKILL or graceful) is still a
    duplicate after it, answered with the ORIGINAL sequence; Nats-Expected-Last-Msg-Id still knows the
    last message's id. Same answers from nats-server."""
    go = server == "nats-server"
    conf = tmp_path / "js.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "store"}", sync_interval: always }}\n')
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    proc = start_server(str(conf), port, go)
    try:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=2)
        await js.add_stream(name="DD", subjects=["dd.>"], duplicate_window=60)
        for i in range(1, 6):
            ack = await js.publish("dd.x", b"%d" % i, headers={"Nats-Msg-Id": f"id-{i}"})
            assert ack.seq == i and not ack.duplicate
        # within the window, before the restart: a duplicate
        ack = await js.publish("dd.x", b"again", headers={"Nats-Msg-Id": "id-2"})
        assert (ack.seq, ack.duplicate) == (2, True)
        await nc.close()
        stop_server(proc, how)

        proc = start_server(str(conf), port, go)
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=2)
        for i in (1, 3, 5):
            ack = await js.publish("dd.x", b"again", headers={"Nats-Msg-Id": f"id-{i}"})
            assert (ack.stream, ack.seq, ack.duplicate) == ("DD", i, True)
        assert (await js.stream_info("DD")).state.messages == 5
        # the last stored message's id is known again
        with pytest.raises(nats.js.errors.BadRequestError) as ei:
            await js.publish("dd.x", b"x", headers={"Nats-Expected-Last-Msg-Id": "id-4"})
        assert ei.value.err_code == 10070 and ei.value.description == "wrong last msg ID: id-5"
        ack = await js.publish("dd.x", b"x", headers={"Nats-Expected-Last-Msg-Id": "id-5", "Nats-Msg-Id": "id-6"})
        assert ack.seq == 6
        # a message without an id clears the last id (as nats-server)
        await js.publish("dd.x", b"y")
        with pytest.raises(nats.js.errors.BadRequestError) as ei:
            await js.publish("dd.x", b"z", headers={"Nats-Expected-Last-Msg-Id": "id-6"})
        assert ei.value.description == "wrong last msg ID: "
        await nc.close()
        stop_server(proc, how)

        # after a second restart the last message has no id: the expectation is the empty id
        proc = start_server(str(conf), port, go)
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=2)
        ack = await js.publish("dd.x", b"again", headers={"Nats-Msg-Id": "id-6"})
        assert (ack.seq, ack.duplicate) == (6, True)
        with pytest.raises(nats.js.errors.BadRequestError) as ei:
            await js.publish("dd.x", b"z", headers={"Nats-Expected-Last-Msg-Id": "id-6"})
        assert ei.value.description == "wrong last msg ID: "
        await nc.close()
    finally:
        if proc.poll() is None:
            stop_server(proc, "term")


async def test_dedup_window_after_restart_ends(tmp_path):
    """Ids older than the duplicate window are not brought back by a restart: the message is stored anew."""
    conf = tmp_path / "js.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "store"}" }}\n')
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    proc = start_server(str(conf), port)
    try:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=2)
        await js.add_stream(name="DW", subjects=["dw.>"], duplicate_window=2.0)
        await js.publish("dw.x", b"old", headers={"Nats-Msg-Id": "old"})
        await asyncio.sleep(2.05)
        await js.publish("dw.x", b"new", headers={"Nats-Msg-Id": "new"})
        await nc.close()
        stop_server(proc, "kill")
        proc = start_server(str(conf), port)
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=2)
        ack = await js.publish("dw.x", b"old again", headers={"Nats-Msg-Id": "old"})
        assert (ack.seq, ack.duplicate) == (3, None)
        ack = await js.publish("dw.x", b"new again", headers={"Nats-Msg-Id": "new"})
        assert (ack.seq, ack.duplicate) == (2, True)
        await nc.close()
    finally:
        stop_server(proc, "term")


async def test_atomic_batches_all_or_nothing_across_sigkill(tmp_path):
    """Atomic batches published concurrently while the server is SIGKILLed: after the restart every batch is
    either stored whole (in consecutive sequences) or not at all, and every acknowledged batch is there."""
    import json
    conf = tmp_path / "js.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "store"}", sync_interval: always }}\n')
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    proc = start_server(str(conf), port)
    size = 40
    try:
        nc = await nats.connect(url)
        r = await nc.request("$JS.API.STREAM.CREATE.AB", json.dumps(
            {"name": "AB", "subjects": ["ab.>"], "allow_atomic": True}).encode(), timeout=2)
        assert "error" not in json.loads(r.data)
        await nc.close()
        nc = await nats.connect(url, max_reconnect_attempts=0, allow_reconnect=False)
        acked: dict[str, int] = {}
        counter = 0

        async def one_batch(bid: str) -> None:
            try:
                for i in range(1, size):
                    await nc.publish(f"ab.{i % 4}", b"%s-%d" % (bid.encode(), i) * 8,
                                     headers={"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(i)})
                r = await nc.request("ab.0", b"%s-%d" % (bid.encode(), size) * 8, timeout=2, headers={
                    "Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(size), "Nats-Batch-Commit": "1"})
            except Exception:
                return
            d = json.loads(r.data)
            if "error" not in d:
                assert d["count"] == size
                acked[bid] = d["seq"]

        loop = asyncio.get_running_loop()
        stop = loop.time() + 0.7
        pending: set[asyncio.Task] = set()
        while loop.time() < stop:
            while len(pending) < 8:
                counter += 1
                t = asyncio.ensure_future(one_batch(f"b{counter}"))
                pending.add(t)
                t.add_done_callback(pending.discard)
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(Exception):
            await nc.close()
        proc.wait()
        assert len(acked) >= 1, "no batch was acknowledged before the kill"

        proc = start_server(str(conf), port)
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=2)
        si = await js.stream_info("AB")
        sub = await js.pull_subscribe("ab.>", durable=None, config=nats.js.api.ConsumerConfig(
            ack_policy="none", deliver_policy="all", inactive_threshold=5.0))
        seqs: dict[str, list[tuple[int, int]]] = {}
        got = 0
        while got < si.state.messages:
            msgs = await sub.fetch(1000, timeout=2)
            for m in msgs:
                got += 1
                seqs.setdefault(m.headers["Nats-Batch-Id"], []).append(
                    (m.metadata.sequence.stream, int(m.headers["Nats-Batch-Sequence"])))
        for bid, entries in seqs.items():
            assert [b for _, b in entries] == list(range(1, size + 1)), f"batch {bid} stored partly"
            first = entries[0][0]
            assert [s for s, _ in entries] == list(range(first, first + size)), f"batch {bid} not contiguous"
        for bid, last in acked.items():
            assert bid in seqs and seqs[bid][-1][0] == last, f"acked batch {bid} lost"
        assert si.state.messages == size * len(seqs)
        await nc.close()
    finally:
        if proc.poll() is None:
            stop_server(proc, "term")
