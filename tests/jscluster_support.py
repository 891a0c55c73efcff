"""What the clustered JetStream test files share: a 3-server JetStream cluster fixture with a client
(`cl`), a polling wait (`until`) and the stream replicas of every server (`reps`, `stream_leader`)."""
from __future__ import annotations

import asyncio
import io
import time

import nats
import pytest

from rillet.app.embed import run_cluster
from rillet.server.logging import Logger


async def until(cond, timeout: float = 8.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def cl():
    """(servers, nc, js): a 3-server JetStream cluster, a client on the first server; the test fails on
    any [ERR] the servers logged (route connection retries aside)."""
    out = io.StringIO()
    async with run_cluster(3, jetstream=True, log=Logger(out=out)) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            yield servers, nc, nc.jetstream()
        finally:
            await nc.close()
    errs = [ln for ln in out.getvalue().splitlines() if "[ERR]" in ln and "connect to route" not in ln]
    assert not errs, errs[:5]


@pytest.fixture
async def server_gc():
    """The servers here run in the test process, under its collector: after thousands of tests that heap is
    millions of objects, and one collection of its oldest generation stalled the loop 476 ms in a CI run of the
    whole suite. ``rillet-server`` paces its collector (rillet.server.gcpolicy); the servers here run the same."""
    from rillet.server.gcpolicy import policy
    if policy.installed:
        yield policy
        return
    policy.install(asyncio.get_running_loop())
    try:
        yield policy
    finally:
        policy.uninstall()


def reps(servers, name: str, acc: str = "$G"):
    """Each server's replica of stream ``name`` (None where it has none)."""
    return [s.jetstream.cluster.streams.replica(acc, name) for s in servers]


def stream_leader(servers, name: str):
    ls = [r for r in reps(servers, name) if r is not None and r.leader]
    return ls[0] if len(ls) == 1 else None
