"""The ordering variant of the virtual stream walk-through (issue 14, step 4) with the ordering stream in a real
stretch cluster: regions west, central and east (clusters of 2 servers) plus a cluster ``stretch`` of 3 servers,
one per region, the 4 clusters joined by gateways, in this process. Every server is tagged ``region:<r>`` and
runs with ``jetstream { unique_tag: "region:" }``, so the R3 ordering stream ``foo-order`` (``rillet vstream
create --replicas 1 --ordering stretch --ordering-replicas 3``) gets one replica per region; the regional
write streams are R1 and each regional read stream mirrors ``foo-order``.

Every region then sees every message in the same order, also after the stretch server holding the ordering
stream's leader is stopped (its region's replica lost: quorum 2 of 3 keeps the stream sourcing), and through a
whole region's outage (its regional servers and its stretch server stopped, the other regions publishing, the
region restarted: every read stream converges to the ordering stream's sequence, each message exactly once).
"""
from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace

import nats
import pytest

from rillet.cli.common import CliError
from rillet.cli.vstream import mappings, order_name, read_name, stream_configs, write_name
from rillet.config.options import JetStreamOptions
from rillet.app.embed import run_super_cluster
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server

REGIONS = ["west", "central", "east"]
CLUSTERS = REGIONS + ["stretch"]


def _server_fields(cluster: str, i: int) -> dict:
    region = REGIONS[i] if cluster == "stretch" else cluster  # (stretch-0 is in west, stretch-1 central, ...)
    return {"tags": [f"region:{region}"], "jetstream": JetStreamOptions(unique_tag="region:")}


def test_ordering_stream_config_in_a_stretch_cluster():
    cfgs = stream_configs("foo", REGIONS, replicas=1, ordering="stretch", ordering_replicas=3,
                          ordering_tags=["ssd"])
    assert [c["name"] for c in cfgs] == [write_name("foo", r) for r in REGIONS] + ["foo-order"] + [
        read_name("foo", r) for r in REGIONS]
    order = cfgs[3]
    assert order["num_replicas"] == 3 and order["placement"] == {"cluster": "stretch", "tags": ["ssd"]}
    assert [s["name"] for s in order["sources"]] == [write_name("foo", r) for r in REGIONS]
    for c in cfgs[:3] + cfgs[4:]:
        assert c["num_replicas"] == 1 and c["placement"]["cluster"] in REGIONS
    assert all(c["mirror"] == {"name": "foo-order"} for c in cfgs[4:])
    # without --ordering-replicas the ordering stream has the regional streams' replicas, as before
    assert stream_configs("foo", REGIONS, replicas=1, ordering="stretch")[3]["num_replicas"] == 1
    with pytest.raises(CliError, match="need --ordering"):
        stream_configs("foo", REGIONS, ordering_replicas=3)
    with pytest.raises(CliError, match="empty tag"):
        stream_configs("foo", REGIONS, ordering="stretch", ordering_tags=[" "])


async def _until(what, check, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        try:
            last = await check()
            if last is True:
                return
        except (nats.errors.TimeoutError, nats.js.errors.APIError, nats.errors.NoRespondersError) as e:
            last = e
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} within {timeout}s (last: {last!r})")


async def _publish(nc, region, prefix, n, pace=0.0):
    js = nc.jetstream(timeout=3)
    out = []
    for i in range(n):
        if i and pace:
            await asyncio.sleep(pace)
        subj = f"foo.{prefix}{i}"
        ack = await js.publish(subj, region.encode())
        assert ack.stream == write_name("foo", region)
        out.append(subj)
    return out


async def test_ordering_stream_in_a_stretch_cluster():
    async with run_super_cluster(4, [2, 2, 2, 3], names=CLUSTERS, jetstream=True, timeout=20,
                                 server_fields=_server_fields, mappings=mappings("foo", REGIONS)) as clusters:
        by = dict(zip(CLUSTERS, clusters))
        conns = {r: await nats.connect([s.client_url for s in by[r]], max_reconnect_attempts=-1,
                                       reconnect_time_wait=0.1) for r in REGIONS}
        try:
            async def create(cfg):
                resp = await conns["west"].request(f"$JS.API.STREAM.CREATE.{cfg['name']}",
                                                   json.dumps(cfg).encode(), timeout=10)
                resp = json.loads(resp.data)
                assert "error" not in resp, resp
                return resp
            cfgs = stream_configs("foo", REGIONS, replicas=1, ordering="stretch", ordering_replicas=3)
            for resp in await asyncio.gather(*map(create, cfgs[:3])):  # the write streams, then the ordering
                assert resp["cluster"]["name"] == resp["config"]["name"].rsplit("-", 1)[1]
            made = await create(cfgs[3])  # stream, then the read streams mirroring it
            await asyncio.gather(*map(create, cfgs[4:]))
            assert made["config"]["name"] == order_name("foo") and made["cluster"]["name"] == "stretch"

            async def order_info():
                return await conns["central"].jetstream(timeout=2).stream_info(order_name("foo"))

            async def placed():
                cl = (await order_info()).cluster
                return len(cl.replicas or []) == 2 and bool(cl.leader) or cl
            await _until("foo-order has a leader and 2 replicas", placed)
            cl = (await order_info()).cluster
            peers = [cl.leader] + [r.name for r in cl.replicas]
            assert sorted(peers) == ["stretch-0", "stretch-1", "stretch-2"]
            regions_of = {s.name: s.opts.tags for s in by["stretch"]}
            assert sorted(t for p in peers for t in regions_of[p]) == sorted(f"region:{r}" for r in REGIONS)

            sent: list[str] = []
            for r in REGIONS:
                sent += await _publish(conns[r], r, f"{r}.", 3)
            orders = await _converged(conns, len(sent))
            assert sorted(orders["west"]) == sorted(sent)

            # one region's stretch server (the ordering stream's leader) stops; writes go on in every region
            leader = next(s for s in by["stretch"] if s.name == cl.leader)
            await leader.shutdown()

            async def new_leader():
                c = (await order_info()).cluster
                return bool(c.leader) and c.leader != leader.name or c
            await _until("foo-order elects another leader (2 of 3 replicas)", new_leader, timeout=15)
            for r in REGIONS:
                sent += await _publish(conns[r], r, f"{r}.after.", 3)
            after = await _converged(conns, len(sent), timeout=15)
            assert sorted(after["west"]) == sorted(sent)
            assert after["west"][:len(orders["west"])] == orders["west"]  # the earlier order is kept
            info = await order_info()
            assert info.state.messages == len(sent) and info.cluster.leader != leader.name
        finally:
            for nc in conns.values():
                await nc.close()


async def _converged(conns, n, timeout=10.0):
    """Once foo-order and every region's read stream (``foo`` through the mapping) hold ``n`` messages, the
    subjects in sequence order per region, all equal to foo-order's."""
    async def counts():
        c = {r: (await conns[r].jetstream(timeout=2).stream_info("foo")).state.messages for r in REGIONS}
        c["order"] = (await conns["west"].jetstream(timeout=2).stream_info(order_name("foo"))).state.messages
        assert all(v <= n for v in c.values()), c  # never a duplicate
        return all(v == n for v in c.values()) or c
    await _until(f"foo-order and every read stream hold {n} messages", counts, timeout)
    out = {}
    for r in REGIONS:
        js = conns[r].jetstream(timeout=3)
        out[r] = [(await js.get_msg("foo", seq)).subject for seq in range(1, n + 1)]
    js = conns["east"].jetstream(timeout=3)
    origin = [(await js.get_msg(order_name("foo"), seq)).subject for seq in range(1, n + 1)]
    assert out["west"] == out["central"] == out["east"] == origin
    return out


async def _create_ordering_vstream(nc):
    """The streams of ``rillet vstream create foo --replicas 1 --ordering stretch --ordering-replicas 3``, in
    its order: the write streams, foo-order, then the read streams mirroring it."""
    async def create(cfg):
        resp = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{cfg['name']}", json.dumps(cfg).encode(),
                                            timeout=10)).data)
        assert "error" not in resp, resp
        return resp
    cfgs = stream_configs("foo", REGIONS, replicas=1, ordering="stretch", ordering_replicas=3)
    await asyncio.gather(*map(create, cfgs[:3]))
    assert (await create(cfgs[3]))["cluster"]["name"] == "stretch"
    await asyncio.gather(*map(create, cfgs[4:]))


async def test_ordering_stream_through_a_whole_region_outage():
    """Every server of one region stops (its 2 regional servers and its stretch server, which leads
    foo-order); the other two regions keep publishing and foo-order keeps sourcing with 2 of 3 replicas;
    the region restarts: every read stream converges to foo-order's sequence, every acknowledged message
    exactly once, the order from before the outage kept; the region then writes again."""
    async with run_super_cluster(4, [2, 2, 2, 3], names=CLUSTERS, jetstream=True, timeout=20,
                                 server_fields=_server_fields, mappings=mappings("foo", REGIONS)) as clusters:
        by = dict(zip(CLUSTERS, clusters))
        conns = {r: await nats.connect([s.client_url for s in by[r]], max_reconnect_attempts=-1,
                                       reconnect_time_wait=0.1) for r in REGIONS}
        restarted: list[Server] = []
        try:
            await _create_ordering_vstream(conns["west"])

            async def order_cluster(r):
                return (await conns[r].jetstream(timeout=2).stream_info(order_name("foo"))).cluster

            async def placed():
                cl = await order_cluster("west")
                return bool(cl.leader) and len(cl.replicas or []) == 2 or cl
            await _until("foo-order has a leader and 2 replicas", placed)
            sent: list[str] = []
            for part in await asyncio.gather(*(_publish(conns[r], r, f"{r}.", 2) for r in REGIONS)):
                sent += part
            before = (await _converged(conns, len(sent)))["west"]

            # the region of foo-order's leader goes down whole: its cluster and its stretch server
            leader = (await order_cluster("west")).leader
            down = REGIONS[int(leader.rsplit("-", 1)[1])]  # (stretch-<i> is in REGIONS[i])
            up = [r for r in REGIONS if r != down]
            stopped = by[down] + [s for s in by["stretch"] if s.name == leader]
            pubs = [asyncio.ensure_future(_publish(conns[r], r, f"{r}.out.", 4, pace=0.05)) for r in up]
            await asyncio.sleep(0.05)  # (the region stops while the others publish)
            for s in stopped:
                await s.shutdown()
            for part in await asyncio.gather(*pubs):
                sent += part

            async def up_counts():
                c = {r: (await conns[r].jetstream(timeout=2).stream_info("foo")).state.messages for r in up}
                c["order"] = (await conns[up[0]].jetstream(timeout=2).stream_info(order_name("foo"))).state.messages
                assert all(v <= len(sent) for v in c.values()), c
                return all(v == len(sent) for v in c.values()) or c
            await _until(f"foo-order (2 of 3) and the read streams of {up} hold every message", up_counts,
                         timeout=15)
            cl = await order_cluster(up[0])
            assert cl.leader and cl.leader != leader

            for s in stopped:  # (on the same ports, the same store: the clients reconnect there)
                port = int(s.client_url.rsplit(":", 1)[1])
                srv = build_server(replace(s.opts, port=port), Logger(out=io.StringIO()))
                restarted.append(srv)
                await srv.start()
            after = await _converged(conns, len(sent), timeout=20)
            assert sorted(after["west"]) == sorted(sent)  # every acknowledged message, exactly once
            assert after["west"][:len(before)] == before  # the order from before the outage is kept
            sent += await _publish(conns[down], down, f"{down}.back.", 2)  # and the region writes again
            final = await _converged(conns, len(sent), timeout=10)
            assert sorted(final["west"]) == sorted(sent) and final["west"][:len(after["west"])] == after["west"]
        finally:
            for nc in conns.values():
                await nc.close()
            for srv in restarted:
                await srv.shutdown()
