"""The virtual stream walk-through (issue 14) on a JetStream super-cluster in this process: regions west,
central and east, each a cluster of 2 servers (a JetStream super-cluster needs routes), joined by gateways,
with the cluster-scoped mappings of ``rillet vstream`` and R1 write and read streams placed in their region.

1. publishes from each region are in every region's read stream under their original subject, read there
   through the name ``foo`` (consumer create, next and acks mapped; the create works unlike nats-server's);
2. a whole region stopped, publishes in the other two, the region restarted: its read stream catches up,
   every acknowledged message exactly once.

The 3 x 3 version with R3 streams and the split brain is examples/vstream/walkthrough.py.
"""
from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace

import nats

from rillet.cli.vstream import mappings, read_name, stream_configs, write_name
from rillet.app.embed import run_super_cluster
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server

REGIONS = ["west", "central", "east"]


async def _until(what, check, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        try:
            last = await check()
            if last:
                return last
        except (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.NoRespondersError) as e:
            last = e
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} within {timeout}s (last: {last!r})")


async def _publish(nc, region, prefix, n):
    js = nc.jetstream(timeout=3)
    subjects = []
    for i in range(n):
        subj = f"foo.{prefix}{i}"
        ack = await js.publish(subj, region.encode())
        assert ack.stream == write_name("foo", region)
        subjects.append(subj)
    return subjects


async def _read_all(nc, durable, n):
    """``n`` messages through a durable pull consumer created on the virtual name, acked."""
    js = nc.jetstream(timeout=3)
    psub = await js.pull_subscribe("foo.>", durable=durable, stream="foo")
    out = []
    while len(out) < n:
        msgs = await psub.fetch(n - len(out), timeout=3)
        for m in msgs:
            await m.ack_sync()
        out += msgs
    ci = await js.consumer_info("foo", durable)
    assert ci.num_ack_pending == 0 and ci.num_pending == 0
    return out


async def test_virtual_stream_walkthrough_on_a_super_cluster():
    async with run_super_cluster(3, 2, names=REGIONS, jetstream=True, timeout=20,
                                 mappings=mappings("foo", REGIONS)) as clusters:
        region = dict(zip(REGIONS, clusters))
        restarted: list[Server] = []
        conns: dict[str, nats.NATS] = {}
        try:
            for r in REGIONS:
                conns[r] = await nats.connect([s.client_url for s in region[r]], max_reconnect_attempts=-1,
                                              reconnect_time_wait=0.1)

            async def create(cfg):
                resp = await conns["west"].request(f"$JS.API.STREAM.CREATE.{cfg['name']}",
                                                   json.dumps(cfg).encode(), timeout=10)
                return json.loads(resp.data)
            for resp in await asyncio.gather(*map(create, stream_configs("foo", REGIONS, replicas=1))):
                assert "error" not in resp, resp
                want = resp["config"]["name"].rsplit("-", 1)[1]
                assert resp["cluster"]["name"] == want  # placed in its region

            # 1. publish in every region; every read stream has them all, under the original subjects
            sent = []
            for r in REGIONS:
                sent += await _publish(conns[r], r, f"{r}.", 2)

            async def read_counts():
                out = {}
                for r in REGIONS:  # (the name foo, mapped to this region's read stream)
                    info = await conns[r].jetstream(timeout=2).stream_info("foo")
                    assert info.config.name == read_name("foo", r)
                    out[r] = info.state.messages
                return out
            await _until("every read stream has the 6 messages",
                         lambda: _all_at(read_counts, len(sent)))
            for r in REGIONS:
                msgs = await _read_all(conns[r], f"d-{r}", len(sent))
                assert sorted(m.subject for m in msgs) == sorted(sent)
                assert {m.metadata.stream for m in msgs} == {read_name("foo", r)}

            # 2. stop region east; publish in the other two; restart it: it catches up, exactly once
            for s in region["east"]:
                await s.shutdown()
            for r in ("west", "central"):
                sent += await _publish(conns[r], r, f"{r}.after.", 3)
            for r in ("west", "central"):
                await _until(f"{r}'s read stream has the new messages",
                             lambda r=r: _stream_at(conns[r], read_name("foo", r), len(sent)))
            for s in region["east"]:  # (on the same client port: the clients reconnect there)
                port = int(s.client_url.rsplit(":", 1)[1])
                srv = build_server(replace(s.opts, port=port), Logger(out=io.StringIO()))
                restarted.append(srv)
                await srv.start()
            await _until("east's read stream caught up",
                         lambda: _stream_at(conns["east"], "foo", len(sent)), timeout=15)
            js = conns["east"].jetstream(timeout=3)
            info = await js.stream_info("foo")
            assert info.state.messages == len(sent)  # exactly once: no duplicate after the catch-up
            msgs = await _read_all(conns["east"], "after-restart", len(sent))
            assert sorted(m.subject for m in msgs) == sorted(sent)
            # and the region writes again
            sent += await _publish(conns["east"], "east", "east.back.", 1)
            await _until("every read stream has every message", lambda: _all_at(read_counts, len(sent)))
        finally:
            for nc in conns.values():
                await nc.close()
            for srv in restarted:
                await srv.shutdown()


async def _all_at(counts, n):
    c = await counts()
    assert all(v <= n for v in c.values()), c  # never more than was sent
    return all(v == n for v in c.values())


async def _stream_at(nc, stream, n):
    info = await nc.jetstream(timeout=2).stream_info(stream)
    assert info.state.messages <= n, info.state
    return info.state.messages == n


async def test_ordering_variant_on_a_super_cluster():
    """``--ordering``: foo-order (here in cluster central) sources the three write streams and every region's
    read stream mirrors it, across the gateways: the same messages in the same order in every region."""
    async with run_super_cluster(3, 2, names=REGIONS, jetstream=True, timeout=20,
                                 mappings=mappings("foo", REGIONS)) as clusters:
        conns = {r: await nats.connect([s.client_url for s in c]) for r, c in zip(REGIONS, clusters)}
        try:
            async def create(cfg):
                resp = await conns["east"].request(f"$JS.API.STREAM.CREATE.{cfg['name']}",
                                                   json.dumps(cfg).encode(), timeout=10)
                return json.loads(resp.data)
            cfgs = stream_configs("foo", REGIONS, replicas=1, ordering="central")
            made = await asyncio.gather(*map(create, cfgs[:3]))  # write streams, then the ordering stream,
            made.append(await create(cfgs[3]))  # then the mirrors (each needs its origin)
            made += await asyncio.gather(*map(create, cfgs[4:]))
            for resp in made:
                assert "error" not in resp, resp
            assert made[3]["config"]["name"] == "foo-order" and made[3]["cluster"]["name"] == "central"
            sent = []
            for r in REGIONS:
                sent += await _publish(conns[r], r, f"{r}.", 2)

            async def counts():
                return {r: (await conns[r].jetstream(timeout=2).stream_info("foo")).state.messages for r in REGIONS}
            await _until("every read stream mirrors the 6 messages", lambda: _all_at(counts, len(sent)))
            orders = {}
            for r in REGIONS:
                js = conns[r].jetstream(timeout=3)
                orders[r] = [(await js.get_msg("foo", seq)).subject for seq in range(1, len(sent) + 1)]
            assert sorted(orders["west"]) == sorted(sent)
            assert orders["west"] == orders["central"] == orders["east"]
            msgs = await _read_all(conns["west"], "ordered", len(sent))  # a consumer through the name
            assert [m.subject for m in msgs] == orders["west"]
        finally:
            for nc in conns.values():
                await nc.close()
