"""The ``jetstream`` source's range read (rillet.spark.client.RangeReader) when the replica that serves it
is behind the stream leader (issue 24).

An R1 consumer of an R3 stream is placed on any replica of the stream (nats-server does the same), and a
direct get may be answered by any replica: both read the replica's own store. A follower that has not yet
got the end of the planned range reports "nothing pending" there; the leader's stream info still says the
range is in the stream. The reader took that for deleted or filtered-out sequences and ended the range
short: the Spark fault run's sink query lost a whole partition of a micro-batch this way (147 values, no
raft entry of them on any server: they were never published to the sink). These tests hold one follower
behind (its stream group's appends dropped for a while), make the read go to it, and want every message.

No JVM needed: the reader is plain asyncio.
"""
from __future__ import annotations

import asyncio
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jscluster_support import cl, reps, stream_leader, until  # noqa: E402,F401 (cl: the cluster fixture)

from rillet.jetstream.cluster import placement  # noqa: E402
from rillet.raft import msgs as M  # noqa: E402
from rillet.spark import client as C  # noqa: E402
from rillet.spark.options import ConnectOptions  # noqa: E402

BEFORE, BEHIND = 20, 30  # messages every replica holds, then messages the lagging follower misses for a while
# seconds the follower is held behind: longer than a new consumer on a follower waits for its replica to catch up
# (rillet.jetstream.cluster.consumers.STREAM_CATCH_UP_WAIT, 2 s), so that the reader's own check is what is tested
LAG = 3.0


def _hold_appends(replica):
    """Drop the appends with entries that reach ``replica``'s stream group (heartbeats pass, so nobody calls
    an election) until the returned function is called; RAFT then catches the follower up."""
    g = replica.group
    joined = g.transport._groups[g.name]
    real = joined.cb

    def cb(group: str, frm: str, data: bytes) -> None:
        try:
            m = M.decode(data)
        except Exception:  # not a RAFT message of ours: as usual
            m = None
        if isinstance(m, M.AppendEntries) and m.entries:
            return
        real(group, frm, data)

    joined.cb = cb

    def release() -> None:
        joined.cb = real
    return release


class _FirstPeer:
    """A stand-in for placement's random module: an R1 consumer goes to ``peer``."""

    def __init__(self, peer: str, real) -> None:
        self.peer, self.real = peer, real

    def shuffle(self, xs: list) -> None:
        xs.sort(key=lambda p: p != self.peer)

    def __getattr__(self, name):
        return getattr(self.real, name)


async def _lagging_follower(servers, js, name: str, allow_direct: bool = False):
    """Stream ``name`` (R3) with BEFORE messages on every replica and BEHIND more that one follower has not got
    (held back): (the follower's server index, its replica, the release function)."""
    await js.add_stream(name=name, subjects=[f"{name.lower()}.*"], num_replicas=3, allow_direct=allow_direct)
    await until(lambda: stream_leader(servers, name) is not None, 10, "a stream leader")
    for i in range(BEFORE):
        await js.publish(f"{name.lower()}.{i % 3}", str(i + 1).encode())
    await until(lambda: all(r is not None and r.stream.store.state().last_seq == BEFORE for r in reps(servers, name)),
                10, "every replica at the first messages")
    rs = reps(servers, name)
    fi = next(i for i, r in enumerate(rs) if not r.leader)
    release = _hold_appends(rs[fi])
    for i in range(BEFORE, BEFORE + BEHIND):
        await js.publish(f"{name.lower()}.{i % 3}", str(i + 1).encode())
    assert rs[fi].stream.store.state().last_seq == BEFORE  # held back
    return fi, rs[fi], release


async def _read(servers, fi: int, name: str, lo: int, hi: int, mode: str, filters: tuple = ()) -> list[int]:
    """Sequences a RangeReader on a connection to server ``fi`` hands out for [lo, hi]."""
    nc = await C.connect(ConnectOptions(servers=(servers[fi].client_url,), connect_timeout=5.0))
    got: list[int] = []
    try:
        r = C.RangeReader(nc, name, lo, hi, filters, lambda ch: got.extend(ch.seqs), idle_timeout=5.0)
        await asyncio.wait_for(r.by_direct_get() if mode == "direct" else r.by_consumer(), 40)
    finally:
        await nc.close()
    return got


async def _release_later(release, delay: float) -> None:
    await asyncio.sleep(delay)
    release()


async def test_consumer_read_on_a_lagging_follower_gets_the_whole_range(cl, monkeypatch):
    servers, nc, js = cl
    fi, rep, release = await _lagging_follower(servers, js, "LAGC")
    # the read's R1 consumer goes to the follower that is behind
    monkeypatch.setattr(placement, "random", _FirstPeer(rep.group.id, placement.random))
    t = asyncio.ensure_future(_release_later(release, LAG))
    try:
        got = await _read(servers, fi, "LAGC", BEFORE + 1, BEFORE + BEHIND, "consumer")
    finally:
        await t
    assert got == list(range(BEFORE + 1, BEFORE + BEHIND + 1))


async def test_consumer_read_from_inside_the_lagging_part(cl, monkeypatch):
    """A range that starts inside what the follower holds and ends past it: the end is not cut off."""
    servers, nc, js = cl
    fi, rep, release = await _lagging_follower(servers, js, "LAGP")
    monkeypatch.setattr(placement, "random", _FirstPeer(rep.group.id, placement.random))
    t = asyncio.ensure_future(_release_later(release, LAG))
    try:
        got = await _read(servers, fi, "LAGP", BEFORE - 4, BEFORE + BEHIND, "consumer")
    finally:
        await t
    assert got == list(range(BEFORE - 4, BEFORE + BEHIND + 1))


async def test_direct_get_read_on_a_lagging_follower_gets_the_whole_range(cl):
    servers, nc, js = cl
    fi, rep, release = await _lagging_follower(servers, js, "LAGD", allow_direct=True)
    t = asyncio.ensure_future(_release_later(release, LAG))
    try:
        got = await _read(servers, fi, "LAGD", BEFORE - 4, BEFORE + BEHIND, "direct")
    finally:
        await t
    assert got == list(range(BEFORE - 4, BEFORE + BEHIND + 1))


async def test_a_range_whose_end_was_deleted_or_filtered_out_still_ends(cl):
    """Deleted sequences at the end of the range, or messages on other subjects than the filter's (nothing to
    read there on the leader either), end the read: the leader check does not wait for messages that are not
    there."""
    servers, nc, js = cl
    await js.add_stream(name="GONE", subjects=["gone.*"], num_replicas=3, allow_direct=True)
    for i in range(10):
        await js.publish(f"gone.{i % 2}", b"x")  # gone.0: odd sequences, gone.1: even ones
    for seq in (8, 9, 10):
        await js.delete_msg("GONE", seq)
    await until(lambda: all(r is not None and r.stream.store.state().msgs == 7 for r in reps(servers, "GONE")),
                10, "the deletes on every replica")
    for mode in ("consumer", "direct"):
        assert await _read(servers, 0, "GONE", 3, 10, mode) == [3, 4, 5, 6, 7], mode
        # gone.1 (even sequences): the last one in 1..7 is 6, then only gone.0 and deleted sequences
        assert await _read(servers, 1, "GONE", 1, 7, mode, ("gone.1",)) == [2, 4, 6], mode


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
