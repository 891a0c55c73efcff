"""STREAM.RESTORE of a ~47 MB archive onto an R3 stream of an in-process 3-server Rillet cluster while a
bystander (a subprocess) does request/reply against the first server: its p99 stays under 100 ms (the
leader spools the chunks to a temporary file, unpacks and reads the archive in a worker thread and applies
it to its store in bounded batches on the event loop), and every replica ends with the whole stream."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import nats
import pytest

from jscluster_support import until, cl, reps, server_gc  # noqa: F401 (the fixtures)
from tests.test_js_snapshot import BYSTANDER, p99, restore, take_snapshot


def store_states(servers, name: str):
    return [(st.msgs, st.first_seq, st.last_seq, st.bytes)
            for st in (r.stream.store.state() for r in reps(servers, name) if r is not None)]


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_big_restore_to_r3_leaves_a_bystander_answered(cl, server_gc, storage):
    servers, nc0, _ = cl
    nc = await nats.connect(servers[0].client_url, pending_size=64 * 1024 * 1024)
    try:
        js = nc.jetstream()
        # the archive: an R1 stream's (runs solo on one server: quick to fill), restored as an R3 stream
        await js.add_stream(name="BIG", subjects=["big.>"], storage=storage, num_replicas=1)
        payload = os.urandom(64 * 1024)
        for i in range(720):  # ~47 MB
            await nc.publish(f"big.{i % 16}", payload)
            if i % 40 == 39:
                await js.publish("big.sync", b"")
        await js.delete_msg("BIG", 7)
        snap, chunks, status = await take_snapshot(nc, "BIG", chunk_size=256 * 1024)
        assert status == "204"
        total, msgs, last = snap["state"]["bytes"], snap["state"]["messages"], snap["state"]["last_seq"]
        assert total > 45_000_000 and msgs == 737 and last == 738
        await js.delete_stream("BIG")
        await until(lambda: not any(reps(servers, "BIG")), what="the stream gone")
        snap["config"]["num_replicas"] = 3

        p = await asyncio.create_subprocess_exec(sys.executable, "-c", BYSTANDER, servers[0].client_url, "12",
                                                 stdout=asyncio.subprocess.PIPE, limit=1 << 24)
        assert (await p.stdout.readline()).strip() == b"ready"
        out = asyncio.ensure_future(p.stdout.readline())
        await asyncio.sleep(0.3)
        w0 = time.time()
        fin = await restore(nc, "BIG", snap, chunks)
        w1 = time.time()
        assert "error" not in fin, fin
        assert fin["state"]["messages"] == msgs and fin["state"]["last_seq"] == last, fin
        # every replica catches up to the restored state
        await until(lambda: store_states(servers, "BIG") == [(msgs, 1, last, total)] * 3, timeout=60,
                    what="every replica restored")
        w2 = time.time()
        pairs = json.loads(await asyncio.wait_for(out, 60))
        await p.wait()
        for r in reps(servers, "BIG"):
            assert r.stream.store.load_msg(last - 1).data == payload
        assert (await js.get_msg("BIG", last)).subject == "big.sync"
        ack = await js.publish("big.after", b"x")
        assert ack.seq == last + 1
        assert w2 < pairs[-1][0], "the bystander stopped before the replicas caught up"
        lat = [x for w, x in pairs if w0 <= w <= w2]
        print(f"{storage}: restore {w1 - w0:.2f}s, replicas {w2 - w0:.2f}s ({sum(map(len, chunks)) / 1e6:.1f} MB) "
              f"bystander n={len(lat)} p50={sorted(lat)[len(lat) // 2] * 1000:.1f}ms p99={p99(lat) * 1000:.1f}ms "
              f"max={max(lat) * 1000:.1f}ms load={os.getloadavg()[0]:.1f} "
              f"old-gen collections {server_gc.old_collections} longest {server_gc.longest_old * 1000:.1f}ms")
        assert len(lat) > 20
        assert p99(lat) < 0.1, f"bystander p99 {p99(lat) * 1000:.0f} ms"
    finally:
        await nc.close()


async def test_restore_of_a_bad_archive_to_r3_fails_and_removes_the_stream(cl):
    servers, nc, _ = cl
    r = json.loads((await nc.request("$JS.API.STREAM.RESTORE.BAD", json.dumps(
        {"config": {"name": "BAD", "subjects": ["bad.>"], "num_replicas": 3}}).encode(), timeout=5)).data)
    subj = r["deliver_subject"]
    for _ in range(4):
        await nc.request(subj, b"not a tar archive " * 4000, timeout=2)
    fin = json.loads((await nc.request(subj, b"", timeout=10)).data)
    assert fin["error"]["err_code"] == 10062 and "invalid snapshot archive" in fin["error"]["description"], fin
    await until(lambda: not any(reps(servers, "BAD")), timeout=10, what="the failed restore's stream removed")


async def test_leader_lost_while_the_archive_loads(cl, monkeypatch):
    servers, nc, js = cl
    await js.add_stream(name="LL", subjects=["ll.>"], num_replicas=1)
    for i in range(200):
        await nc.publish("ll.x", b"%d" % i)
    await js.publish("ll.x", b"last")
    snap, chunks, status = await take_snapshot(nc, "LL")
    assert status == "204"
    await js.delete_stream("LL")
    await until(lambda: not any(reps(servers, "LL")), what="the stream gone")
    snap["config"]["num_replicas"] = 3
    # the load made slow (a message per batch, each read 20 ms): the leader steps down half way
    from rillet.jetstream import snapshot as SN
    monkeypatch.setattr(SN, "BATCH_MSGS", 1)
    started = asyncio.Event()
    from rillet.jetstream.backup import V2Source  # (the archive is nats-server 2.15's backup form)
    orig = V2Source.batch
    loop = asyncio.get_running_loop()

    calls = []

    def slow_batch(self, *a):
        calls.append(1)
        loop.call_soon_threadsafe(started.set)
        time.sleep(0.02)
        return orig(self, *a)
    monkeypatch.setattr(V2Source, "batch", slow_batch)
    task = asyncio.ensure_future(restore(nc, "LL", snap, chunks))
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.2)
    leader = [r for r in reps(servers, "LL") if r is not None and r.leader]
    assert len(leader) == 1 and leader[0]._restoring is not None
    leader[0].group.stepdown()
    fin = await asyncio.wait_for(task, 20)
    assert fin["error"]["err_code"] == 10062 and "leader lost" in fin["error"]["description"], fin
    await until(lambda: not any(reps(servers, "LL")), timeout=10, what="the given-up restore's stream removed")
    n = len(calls)
    await asyncio.sleep(0.3)
    assert len(calls) == n and n < 100, (n, len(calls))  # (the load stopped: 202 batches otherwise)
