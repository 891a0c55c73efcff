"""A stream's configuration update survives a SIGKILL of the whole cluster (issue 24, the KV drill at max_bytes).

An R3 KV bucket (max_bytes, discard new, one message per key) updated to ``discard: old``, filled past its limit
(it evicts its oldest), all three servers SIGKILLed and restarted: it came back as ``discard: new`` holding the
evicted messages again (from seq 1), and refused every put; in the fault drill the replicas forked (one stored a
put its leader had refused with 10077). The cause: a restarted replica was built from the meta assignment as the
meta log replayed, i.e. with the creation's configuration, and its group's WAL replay skipped the UPDATE entry
(its store already held what came after it), so the store opened with the old limits (the limit removals a file
store writes lazily were not redone) and the replicas applied entries under different configurations. Now each
replica keeps the configuration its log last applied (rillet/jetstream/cluster/appliedcfg.py).

Checked after the restart: the configuration is the updated one, the state is the one acknowledged before the
kill (nothing evicted back, nothing acknowledged lost), puts go on evicting, and each server, made the stream's
leader in turn, reports the same state."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.js.errors import NoStreamResponseError

from helpers import cluster_members, request_until, start_members

CFG = {"name": "KV_b", "subjects": ["$KV.b.>"], "num_replicas": 3, "storage": "file", "max_bytes": 4096,
       "max_msgs_per_subject": 1, "discard": "new", "allow_rollup_hdrs": True, "deny_delete": True,
       "allow_direct": True, "retention": "limits"}


@pytest.fixture
def members(tmp_path):
    ms = cluster_members(str(tmp_path), "u", "updr")
    try:
        start_members(ms)
        yield ms
    finally:
        for m in ms:
            m.close()


async def _put_all(urls: list[str], tag: str, n: int) -> None:
    """``n`` puts, each acknowledged. The first is sent again while nobody takes it (no responders: not stored),
    as a restarted stream's leader subscribes its subjects a little after it answers STREAM.INFO."""
    nc = await nats.connect(servers=urls)
    try:
        js = nc.jetstream(timeout=10)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        for i in range(n):
            while True:
                try:
                    ack = await js.publish(f"$KV.b.{tag}{i}", b"x" * 200)
                    break
                except NoStreamResponseError:
                    if i or loop.time() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            assert ack.stream == "KV_b"
    finally:
        await nc.close()


async def _state_on_each_leader(urls: list[str], names: list[str]) -> dict[str, tuple]:
    """Each server made the stream's leader in turn (a step-down with it preferred): its (first, last, messages,
    discard) as STREAM.INFO reports it there."""
    out: dict[str, tuple] = {}
    for name in names:
        async def led_by(name: str = name) -> bool:
            d = await request_until(urls, "$JS.API.STREAM.INFO.KV_b")
            return (d.get("cluster") or {}).get("leader") == name
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not await led_by():
            assert loop.time() < deadline, f"{name} never became the stream's leader"
            await request_until(urls, "$JS.API.STREAM.LEADER.STEPDOWN.KV_b", {"placement": {"preferred": name}},
                                want=lambda d: True)
            inner = loop.time() + 10
            while loop.time() < inner and not await led_by():
                await asyncio.sleep(0.2)
        d = await request_until(urls, "$JS.API.STREAM.INFO.KV_b")
        s = d["state"]
        out[name] = (s["first_seq"], s["last_seq"], s["messages"], d["config"]["discard"])
    return out


def test_update_to_discard_old_survives_sigkill_of_all(members) -> None:
    urls = [m.url for m in members]
    names = [m.name for m in members]

    async def run() -> None:
        await request_until(urls, "$JS.API.STREAM.CREATE.KV_b", CFG)
        d = await request_until(urls, "$JS.API.STREAM.UPDATE.KV_b", {**CFG, "discard": "old"})
        assert d["config"]["discard"] == "old"
        await _put_all(urls, "a", 60)
        before = await request_until(urls, "$JS.API.STREAM.INFO.KV_b")
        s = before["state"]
        assert s["last_seq"] == 60 and s["first_seq"] > 1 and s["bytes"] <= 4096, s
        want = (s["first_seq"], s["last_seq"], s["messages"], "old")
        for m in members:
            m.close()  # (SIGKILL)
        start_members(members)
        # every server, as the leader, holds what was acknowledged under the updated configuration
        after = await _state_on_each_leader(urls, names)
        assert after == {n: want for n in names}, (want, after)
        # and puts go on: evicting the oldest, never refused
        await _put_all(urls, "b", 40)
        again = await _state_on_each_leader(urls, names)
        assert len(set(again.values())) == 1, again
        first, last, msgs, discard = next(iter(again.values()))
        assert (last, discard) == (100, "old") and first > want[0], again

    asyncio.run(run())


def test_replica_that_missed_the_update_takes_it_with_the_snapshot(members) -> None:
    """A replica down while the update committed and while its group's log was compacted past it (more than
    streams.COMPACT_EVERY entries): restarted, it is built from the meta assignment as the meta log replays
    (the creation's configuration) and gets the leader's snapshot, not the UPDATE entry. The snapshot carries the
    configuration: as its leader it reports the updated one and the same state, and puts go on evicting."""
    urls = [m.url for m in members]
    names = [m.name for m in members]
    cfg = {**CFG, "max_bytes": 1 << 20, "max_msgs_per_subject": 0}  # (one subject per put: 8,500 keys)
    n = 8500  # (past streams.COMPACT_EVERY applied entries: the leader's log compacted past the UPDATE)

    async def fill(tag: str, count: int, live: list[str]) -> None:
        nc = await nats.connect(servers=live)
        try:
            js = nc.jetstream(timeout=30)
            for k in range(0, count, 500):
                acks = await asyncio.gather(*(js.publish(f"$KV.b.{tag}{i}", b"x" * 200, timeout=30)
                                              for i in range(k, min(count, k + 500))))
                assert all(a.stream == "KV_b" for a in acks)
        finally:
            await nc.close()

    async def run() -> None:
        await request_until(urls, "$JS.API.STREAM.CREATE.KV_b", cfg)
        down = members[2]
        down.close()  # (SIGKILL)
        live = urls[:2]
        d = await request_until(live, "$JS.API.STREAM.UPDATE.KV_b", {**cfg, "discard": "old"})
        assert d["config"]["discard"] == "old"
        await fill("a", n, live)
        before = await request_until(live, "$JS.API.STREAM.INFO.KV_b")
        s = before["state"]
        assert s["last_seq"] == n and s["first_seq"] > 1, s
        want = (s["first_seq"], s["last_seq"], s["messages"], "old")
        start_members([down])
        after = await _state_on_each_leader(urls, names)
        assert after == {nm: want for nm in names}, (want, after)
        await fill("b", 200, urls)
        again = await _state_on_each_leader(urls, names)
        assert len(set(again.values())) == 1, again
        first, last, _, discard = next(iter(again.values()))
        assert (last, discard) == (n + 200, "old") and first > want[0], again

    asyncio.run(run())


def test_update_of_an_r1_stream_survives_sigkill_of_all(members) -> None:
    """The same for an R1 stream of the cluster, whose group runs solo (entries applied without a log, so no
    UPDATE entry to replay): it comes back with the updated configuration and what it held."""
    urls = [m.url for m in members]
    cfg = {**CFG, "num_replicas": 1}

    async def run() -> None:
        await request_until(urls, "$JS.API.STREAM.CREATE.KV_b", cfg)
        d = await request_until(urls, "$JS.API.STREAM.UPDATE.KV_b", {**cfg, "discard": "old"})
        assert d["config"]["discard"] == "old"
        await _put_all(urls, "a", 60)
        s = (await request_until(urls, "$JS.API.STREAM.INFO.KV_b"))["state"]
        assert s["last_seq"] == 60 and s["first_seq"] > 1, s
        for m in members:
            m.close()  # (SIGKILL)
        start_members(members)
        d = await request_until(urls, "$JS.API.STREAM.INFO.KV_b")
        assert (d["config"]["discard"], d["state"]["first_seq"], d["state"]["last_seq"], d["state"]["messages"]) \
            == ("old", s["first_seq"], 60, s["messages"]), d
        await _put_all(urls, "b", 10)
        d = await request_until(urls, "$JS.API.STREAM.INFO.KV_b")
        assert d["state"]["last_seq"] == 70 and d["state"]["first_seq"] > s["first_seq"], d

    asyncio.run(run())
