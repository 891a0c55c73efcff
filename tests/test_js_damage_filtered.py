"""A consumer of a replicated stream waits for a damaged message while the replica fetches it again, but only
one it would deliver: a filtered consumer passes over a damaged record whose subject (still in the block's
index: the damage was found by a read while running) does not match its filter.

The stream here is a one-server stream given a stand-in replication that says it fetches damaged records again
and never finishes (what the engine sees of an R3 stream whose leader is still handing over): the waiting is
then visible, not a race with the refetch.
"""
from __future__ import annotations

import contextlib
import io
import json
import os

import nats

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options
from rillet.server.logging import Logger


def _payload(i: int) -> bytes:
    return f"filt-{i:03d}-".encode() + b"z" * 40


def _subject(i: int) -> str:
    return "s.a" if i % 2 else "s.b"


class _Refetching:
    """A stream replication that fetches damaged records again and has not got them yet."""

    def __init__(self) -> None:
        self.asked = 0

    def cluster_info(self) -> dict:
        return {"name": "stand-in"}

    def consumer_count(self) -> int:
        return 0

    def refetches_damage(self, seq: int = 0) -> bool:
        return True

    def refetch_damaged(self) -> bool:
        self.asked += 1
        return True


@contextlib.asynccontextmanager
async def _server(store_dir):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(store_dir)))
    async with run_server(opts, log=Logger(out=io.StringIO())) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            yield srv, nc, nc.jetstream()
        finally:
            await nc.close()


def _corrupt(store_dir, i: int) -> None:
    needle = _payload(i)
    hits = 0
    for root, _, files in os.walk(store_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                data = f.read()
            at = data.find(needle)
            if at >= 0:
                with open(path, "r+b") as f:
                    f.seek(at + len(needle) - 6)
                    f.write(b"BROKEN")
                hits += 1
    assert hits == 1, f"payload {i} found in {hits} files"


async def _fetch_seqs(sub, n: int, timeout: float) -> list[int]:
    try:
        msgs = await sub.fetch(n, timeout=timeout)
    except nats.errors.TimeoutError:
        return []
    for m in msgs:
        await m.ack()
    return [m.metadata.sequence.stream for m in msgs]


async def test_a_filtered_consumer_passes_over_damage_it_would_not_deliver(tmp_path):
    async with _server(tmp_path) as (srv, nc, js):
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        for i in range(1, 11):
            await js.publish(_subject(i), _payload(i))
        stream = srv.jetstream.accounts["$G"].streams["S"]
        rep = stream.replication = _Refetching()
        _corrupt(tmp_path, 4)  # (an s.b message)
        r = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.S", b'{"seq":4}', timeout=5)).data)
        assert r.get("error", {}).get("code") == 404, r  # (found damaged by this read)
        assert stream.store.state().lost == [4]
        assert stream.store.lost_subject(4) == "s.b"

        # filtered on s.a: every one of them, past the damaged s.b message
        await js.add_consumer("S", durable_name="A", ack_policy="explicit", filter_subject="s.a")
        a = await js.pull_subscribe_bind("A", "S")
        got: list[int] = []
        for _ in range(10):
            got += await _fetch_seqs(a, 10, timeout=1)
            if len(got) >= 5:
                break
        assert got == [1, 3, 5, 7, 9], got
        # filtered on s.b, and unfiltered: they would deliver it, so they wait for it (never skip it)
        await js.add_consumer("S", durable_name="B", ack_policy="explicit", filter_subject="s.b")
        await js.add_consumer("S", durable_name="U", ack_policy="explicit")
        b = await js.pull_subscribe_bind("B", "S")
        u = await js.pull_subscribe_bind("U", "S")
        assert await _fetch_seqs(b, 10, timeout=1.5) == [2]
        assert await _fetch_seqs(u, 10, timeout=1.5) == [1, 2, 3]
        assert rep.asked >= 1
