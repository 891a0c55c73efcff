"""STREAM.SNAPSHOT / STREAM.RESTORE of file streams.

* Encrypted at rest (jetstream { key }), the archive carries the content in plaintext, as nats-server's
  does (it decrypts the blocks into its snapshot): it restores onto a server with another key or none,
  messages, consumer configurations and ack state included, and the restoring server's files are sealed
  under its own key. ``no_consumers`` leaves the consumers out.
* A ~50 MB stream is snapshotted and restored while a bystander does request/reply against the same server
  (a subprocess): its p99 stays small (the archive is made in short slices on the event loop, unpacked in a
  worker thread).
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from tests.helpers import GO, ServerProcess, serve_config
from tests.test_js_encryption import SECRET, assert_no_plaintext, conf, url

N = 60


async def api(nc, subject: str, body: dict, timeout: float = 10) -> dict:
    return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=timeout)).data)


async def take_snapshot(nc, name: str, **opts) -> tuple[dict, list[bytes], str]:
    """(the snapshot answer, the chunks, the final status line), acking each chunk as a client does."""
    inbox = nc.new_inbox()
    chunks: list[bytes] = []
    done = asyncio.get_running_loop().create_future()

    async def on_chunk(msg):
        # (nats-server sends its last, short chunk without a reply; the end is the empty message)
        if msg.data:
            chunks.append(msg.data)
            if msg.reply:
                await nc.publish(msg.reply, b"")
        elif not done.done():
            done.set_result(msg.header.get("Status", "") if msg.header else "")
    sub = await nc.subscribe(inbox, cb=on_chunk, pending_bytes_limit=256 * 1024 * 1024)
    resp = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{name}", {"deliver_subject": inbox, **opts})
    assert "error" not in resp, resp
    status = await asyncio.wait_for(done, 120)
    await sub.unsubscribe()
    return resp, chunks, status


async def restore(nc, name: str, snap: dict, chunks: list[bytes]) -> dict:
    resp = await api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": snap["config"], "state": snap["state"]})
    subj = resp["deliver_subject"]
    for c in chunks:
        await nc.request(subj, c, timeout=10)
    return json.loads((await nc.request(subj, b"", timeout=60)).data)


async def populate(srv) -> None:
    nc = await nats.connect(url(srv))
    js = nc.jetstream()
    await js.add_stream(name="SEC", subjects=["sec.>"])
    for i in range(N):
        await js.publish(f"sec.hidden{i}", SECRET + str(i).encode())
    await js.add_consumer("SEC", ConsumerConfig(durable_name="D", description="consumer-desc-xyz",
                                                filter_subject="sec.>", ack_policy=AckPolicy.EXPLICIT,
                                                ack_wait=17, max_deliver=5))
    await js.add_consumer("SEC", ConsumerConfig(durable_name="E", filter_subject="sec.hidden1*",
                                                ack_policy=AckPolicy.EXPLICIT))
    sub = await js.pull_subscribe_bind("D", "SEC")
    for m in await sub.fetch(10, timeout=2):
        if m.metadata.sequence.stream <= 5 or m.metadata.sequence.stream == 8:
            await m.ack_sync()
    await nc.close()


async def check_restored(srv, consumers: bool = True) -> None:
    nc = await nats.connect(url(srv))
    js = nc.jetstream()
    si = await js.stream_info("SEC")
    assert si.state.messages == N and si.state.first_seq == 1 and si.state.last_seq == N
    for seq in (1, 30, N):
        m = await js.get_msg("SEC", seq)
        assert m.data == SECRET + str(seq - 1).encode() and m.subject == f"sec.hidden{seq - 1}"
    names = sorted([ci.name for ci in await js.consumers_info("SEC")])
    if not consumers:
        assert names == []
        await nc.close()
        return
    assert names == ["D", "E"]
    ci = await js.consumer_info("SEC", "D")
    assert ci.config.description == "consumer-desc-xyz" and ci.config.filter_subject == "sec.>"
    assert ci.config.ack_wait == 17 and ci.config.max_deliver == 5
    assert ci.delivered.stream_seq == 10 and ci.ack_floor.stream_seq == 5
    assert ci.num_ack_pending == 4 and ci.num_pending == N - 10
    e = await js.consumer_info("SEC", "E")
    assert e.config.filter_subject == "sec.hidden1*" and e.delivered.stream_seq == 0
    # the ack state is live: the next fetch of D begins after the delivered ones
    sub = await js.pull_subscribe_bind("D", "SEC")
    got = await sub.fetch(1, timeout=2)
    assert got[0].metadata.sequence.stream == 11
    await nc.close()


async def test_encrypted_snapshot_restores_with_another_key_and_without(tmp_path):
    src = tmp_path / "src"
    async with serve_config(conf(src, key="first-key")) as srv:
        await populate(srv)
        nc = await nats.connect(url(srv))
        snap, chunks, status = await take_snapshot(nc, "SEC", chunk_size=4096)
        bare, bare_chunks, _ = await take_snapshot(nc, "SEC", no_consumers=True)
        await nc.close()
    assert status == "204" or GO
    assert_no_plaintext(src)
    # (the archive is nats-server 2.15's backup form, an S2 stream, from either server)
    from rillet.cluster.s2 import S2Reader
    archive = S2Reader().feed(b"".join(chunks))
    # the content is in the archive in plaintext, as in nats-server's
    assert SECRET + b"0" in archive and SECRET + str(N - 1).encode() in archive
    assert b"consumer-desc-xyz" in archive
    assert b"consumer-desc-xyz" not in S2Reader().feed(b"".join(bare_chunks))

    other = tmp_path / "other"
    async with serve_config(conf(other, key="another-key")) as srv:
        nc = await nats.connect(url(srv))
        fin = await restore(nc, "SEC", snap, chunks)
        await nc.close()
        assert fin["type"] == "io.nats.jetstream.api.v1.stream_create_response" and "error" not in fin, fin
        await check_restored(srv)
    # sealed under the restoring server's key, and read back by it at the next start
    assert_no_plaintext(other)
    r = subprocess.run(["grep", "-rl", SECRET.decode(), str(other)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout
    async with serve_config(conf(other, key="another-key")) as srv:
        nc = await nats.connect(url(srv))
        si = await nc.jetstream().stream_info("SEC")
        assert si.state.messages == N
        ci = await nc.jetstream().consumer_info("SEC", "D")
        assert ci.ack_floor.stream_seq == 5 and ci.delivered.stream_seq == 11
        await nc.close()

    plain = tmp_path / "plain"
    async with serve_config(conf(plain)) as srv:
        nc = await nats.connect(url(srv))
        fin = await restore(nc, "SEC", snap, chunks)
        assert "error" not in fin, fin
        await nc.close()
        await check_restored(srv)
        nc = await nats.connect(url(srv))
        await nc.jetstream().delete_stream("SEC")
        fin = await restore(nc, "SEC", bare, bare_chunks)
        assert "error" not in fin, fin
        await nc.close()
        await check_restored(srv, consumers=False)


BYSTANDER = r"""
import asyncio, json, sys, time
import nats

async def main(url, seconds):
    resp = await nats.connect(url)
    async def echo(m):
        await resp.publish(m.reply, m.data)
    await resp.subscribe("bystander.echo", cb=echo)
    await resp.flush()
    req = await nats.connect(url)
    lat = []
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        w, t = time.time(), time.perf_counter()
        await req.request("bystander.echo", b"x", timeout=10)
        lat.append((w, time.perf_counter() - t))
        await asyncio.sleep(0.005)
    print(json.dumps(lat), flush=True)
    await req.close()
    await resp.close()

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_big_snapshot_and_restore_leave_a_bystander_answered(tmp_path, storage):
    if GO:
        pytest.skip("Rillet's event loop")
    cfg = tmp_path / "s.conf"
    cfg.write_text(f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{tmp_path / "store"}", key: "fair-key" }}\n')
    proc = ServerProcess("-c", str(cfg))
    try:
        await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
        u = f"nats://127.0.0.1:{proc.port}"
        nc = await nats.connect(u, pending_size=64 * 1024 * 1024)
        js = nc.jetstream()
        await js.add_stream(name="BIG", subjects=["big.>"], storage=storage)
        payload = os.urandom(64 * 1024)
        for i in range(800):  # ~50 MB
            await nc.publish(f"big.{i % 16}", payload)
            if i % 50 == 49:
                await js.publish("big.sync", b"")  # (paced: the stream has them all once this is acked)
        await js.add_consumer("BIG", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
        total = (await js.stream_info("BIG")).state.bytes
        assert total > 50_000_000

        async def bystander(seconds: float) -> tuple[asyncio.subprocess.Process, asyncio.Future]:
            p = await asyncio.create_subprocess_exec(sys.executable, "-c", BYSTANDER, u, str(seconds),
                                                     stdout=asyncio.subprocess.PIPE, limit=1 << 24)
            assert (await p.stdout.readline()).strip() == b"ready"
            return p, asyncio.ensure_future(p.stdout.readline())

        # the bystander runs while the stream is snapshotted, deleted and restored
        p, out = await bystander(10)
        w0 = time.time()
        snap, chunks, status = await take_snapshot(nc, "BIG")
        w1 = time.time()
        assert status == "204"
        await js.delete_stream("BIG")
        w2 = time.time()
        fin = await restore(nc, "BIG", snap, chunks)
        w3 = time.time()
        assert "error" not in fin, fin
        pairs = json.loads(await asyncio.wait_for(out, 60))
        await p.wait()
        si = await js.stream_info("BIG")
        assert si.state.bytes == total and si.state.messages == 816
        assert (await js.get_msg("BIG", 800)).data == payload
        if storage == "file":  # (a memory stream's consumers are not persisted: not in its archive)
            assert (await js.consumer_info("BIG", "C")).num_pending == 816
        await nc.close()
        assert w3 < pairs[-1][0], "the bystander stopped before the restore ended"
        # the requests sent while the snapshot or the restore ran
        lat = [x for w, x in pairs if w0 <= w <= w1 or w2 <= w <= w3]
        print(f"{storage}: snapshot {w1 - w0:.2f}s restore {w3 - w2:.2f}s ({sum(len(c) for c in chunks) / 1e6:.1f} MB) "
              f"bystander n={len(lat)} p50={sorted(lat)[len(lat) // 2] * 1000:.1f}ms p99={p99(lat) * 1000:.1f}ms "
              f"max={max(lat) * 1000:.1f}ms load={os.getloadavg()[0]:.1f}")
        assert len(lat) > 20
        assert p99(lat) < 0.1, f"bystander p99 {p99(lat) * 1000:.0f} ms"
    finally:
        proc.stop()
