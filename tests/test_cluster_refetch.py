"""Damaged records on a replica of an R3 stream are fetched again, never served as holes.

A follower is stopped, bytes of its block file are flipped (a record fails its checksum: the store reports it
lost) and its last block loses its tail (a torn write); it is restarted, made the stream leader, and every
message is read back through it: each must be there with its data. The first damaged record lies below the
group's snapshot (the stream's log was compacted), so the messages come from the leader through the catch-up,
the rest from the follower's own log."""
from __future__ import annotations

import asyncio
import base64
import glob
import json
import os
import signal

import nats
import pytest

from helpers import ClusterMember, free_port
from helpers import request_until as _request

N = 8500  # past one RAFT snapshot of the stream's group (streams.COMPACT_EVERY applied entries)


class Member(ClusterMember):
    def __init__(self, tmp: str, name: str, routes: list[int], cport: int) -> None:
        self.store = os.path.join(tmp, name, "store")
        os.makedirs(self.store)
        super().__init__(os.path.join(tmp, name), name, self.store, "rf", routes, cport)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path):
    cports = [free_port() for _ in range(3)]
    members = [Member(str(tmp_path), f"r{k + 1}", cports, cports[k]) for k in range(3)]
    try:
        for m in members:
            m.start()
        for m in members:
            m.proc.wait_log("Server is ready", timeout=30)
        yield members
    finally:
        for m in members:
            m.close()


def _damage(store: str) -> list[str]:
    blocks = sorted(glob.glob(os.path.join(store, "jetstream", "*", "streams", "P", "store", "msgs", "*.blk")))
    assert blocks, os.listdir(store)
    b = bytearray(open(blocks[0], "rb").read())
    i = b.find(b"v00100.")
    assert i > 0
    b[i + 3] ^= 0x10  # a bit flip in message 101's data
    with open(blocks[0], "wb") as f:
        f.write(b)
    last = blocks[-1]
    size = os.path.getsize(last)
    with open(last, "r+b") as f:
        f.truncate(size - 7)  # a torn write at the end
    return blocks


def test_damaged_records_of_a_follower_are_fetched_again(cluster) -> None:
    urls = [m.url for m in cluster]

    async def setup() -> None:
        await _request(urls, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"], "num_replicas": 3,
                                                          "storage": "file"})
        nc = await nats.connect(servers=urls)
        js = nc.jetstream()
        for k in range(0, N, 500):
            await asyncio.gather(*(js.publish("p.x", b"v%05d.%s" % (i, b"x" * 40), timeout=30)
                                   for i in range(k, min(N, k + 500))))
        await nc.close()
    asyncio.run(setup())
    info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P"))
    assert info["state"]["messages"] == N
    leader = info["cluster"]["leader"]
    victim = next(m for m in cluster if m.name != leader)
    others = [m.url for m in cluster if m is not victim]
    # every replica current before the stop (the victim holds every message and its group's snapshot)
    asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: all(
        r.get("current") and not r.get("lag") for r in d.get("cluster", {}).get("replicas", []))))
    victim.stop()
    _damage(victim.store)
    victim.start()
    victim.proc.wait_log("Server is ready", timeout=30)
    victim.proc.wait_log(r"damaged message\(s\) in the store \(first 101\)", timeout=30)
    # the victim leads once it is caught up (stepdown to it as the preferred server, retried while it catches up)
    async def lead() -> dict:
        for _ in range(60):
            d = await _request(urls, "$JS.API.STREAM.INFO.P")
            if d["cluster"].get("leader") == victim.name:
                return d
            await _request(others, "$JS.API.STREAM.LEADER.STEPDOWN.P", {"placement": {"preferred": victim.name}},
                           want=lambda d: True)
            await asyncio.sleep(1)
        raise AssertionError(f"{victim.name} never became the leader")
    info = asyncio.run(lead())
    assert info["state"]["messages"] == N, info["state"]
    assert not info["state"].get("lost"), info["state"]

    async def read_all() -> list[int]:
        nc = await nats.connect(victim.url)
        bad = []
        try:
            for seq in range(1, N + 1):
                r = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.P", json.dumps({"seq": seq}).encode(),
                                                 timeout=5)).data)
                if "error" in r or base64.b64decode(r["message"]["data"]) != b"v%05d.%s" % (seq - 1, b"x" * 40):
                    bad.append(seq)
        finally:
            await nc.close()
        return bad
    assert asyncio.run(read_all()) == []
