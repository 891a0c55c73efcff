"""Followers reserve sequences too (issue 24). With the lazy default sync_interval, a stream leader saves a mark
(fsynced, in its group's hard state) past every sequence before it acknowledges it, so that after a majority's
power cut nothing acknowledged is numbered again. Its followers saved only what they had stored, once a second:
a cut of the leader and a follower, the leader's disk then lost, left marks short of what had been acknowledged.
Now a follower reserves ahead of what it applies, as the leader does ahead of what it acknowledges: its saved
mark covers every acknowledged sequence while publishes run, and is released (down to what it stored) after an
idle second."""
from __future__ import annotations

import asyncio
import glob
import json
import os

import msgspec
import nats
import pytest

from helpers import cluster_members, start_members
from rillet.raft.msgs import HardState
from rillet.raft.wal import _HS_MAGIC, _read_checked


@pytest.fixture
def cluster(tmp_path):
    members = cluster_members(str(tmp_path), "f", "fres")
    try:
        start_members(members)
        yield members
    finally:
        for m in members:
            m.close()


def _mark(m) -> int:
    (d,) = glob.glob(os.path.join(os.path.dirname(m.conf), "store", "jetstream", "_raft", "S-*"))
    raw = _read_checked(os.path.join(d, "hardstate"), _HS_MAGIC)
    if raw is None:  # (not there: no hard state saved yet, which the caller's check counts as a mark of 0)
        return 0
    return msgspec.msgpack.decode(raw, type=HardState).mark


def test_followers_save_a_mark_past_every_acknowledged_sequence(cluster) -> None:
    urls = [m.url for m in cluster]

    async def run() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:  # (the meta group may still be electing: retried)
            nc = await nats.connect(servers=urls)
            try:
                r = json.loads((await nc.request("$JS.API.STREAM.CREATE.P", json.dumps(
                    {"name": "P", "subjects": ["p.>"], "num_replicas": 3, "storage": "file"}).encode(),
                    timeout=5)).data)
            except Exception as e:
                r = {"error": repr(e)}
            await nc.close()
            if "error" not in r or loop.time() > deadline:
                break
            await asyncio.sleep(0.5)
        assert "error" not in r, r
        nc = await nats.connect(servers=urls)
        js = nc.jetstream()
        try:
            leader = None
            short: list = []
            for i in range(1, 301):
                ack = await js.publish("p.x", b"v%d" % i, timeout=10)
                assert ack.seq == i
                if i % 25:
                    continue
                if leader is None:
                    info = await js.stream_info("P")
                    leader = info.cluster.leader
                for m in cluster:
                    if m.name != leader:
                        mk = _mark(m)
                        if mk < i:
                            short.append((m.name, i, mk))
            # (a follower may apply the last entry a moment after its PubAck: one sequence of slack, no more)
            assert not [s for s in short if s[2] < s[1] - 1], short
            # idle: every replica releases its reservation, its mark down to what it stored (300)
            deadline = loop.time() + 20
            while loop.time() < deadline:
                marks = [_mark(m) for m in cluster]
                if marks == [300] * 3:
                    break
                await asyncio.sleep(0.2)
            assert marks == [300] * 3, marks
        finally:
            await nc.close()
    asyncio.run(run())
