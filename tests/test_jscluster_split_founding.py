"""Three servers that found the JetStream meta group apart must end in one group.

Each server's configuration names the other two as routes, so nats-server's founding size (the configured routes,
at least 2) is 2: a server that knows only one other server when it founds makes a group of two. Here n1 and n2
cannot reach each other at start (a cut between their namespaces): n2 founds with n0, n1 founds with n0 too and
campaigns to n0 alone, a follower of the other group. Once the cut is mended, the meta leader must add n1 (as
nats-server's leader adds a JetStream server it learns of from its statsz); before the fix n1 stayed outside, with
no leader, for ever, and R3 stream creates answered "no suitable peers for placement" (CI saw this in the Spark
fault run once in a few dozen cluster starts).
"""
from __future__ import annotations

import asyncio
import time

import nats
import pytest

from faults.cluster import Cluster, Lab


def _view(cl: Cluster) -> list:
    out = []
    for n in cl.nodes:
        try:
            mc = n.http_json("/jsz").get("meta_cluster") or {}
        except OSError as e:
            out.append(repr(e))
            continue
        out.append((mc.get("leader"), sorted(r["name"] for r in mc.get("replicas") or []), mc.get("cluster_size")))
    return out


def test_servers_that_founded_apart_join_one_meta_group(tmp_path):
    lab = Lab(3)
    try:
        lab.up()
    except OSError as e:
        pytest.skip(f"network namespaces not permitted here: {e}")
    cl = Cluster("rillet", str(tmp_path), lab)
    try:
        lab.cut(1, 2)
        cl.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # n0 and n2 found a group of two; n1 one of its own with n0
            v = _view(cl)
            if isinstance(v[0], tuple) and v[0][0] and all(isinstance(x, tuple) for x in v):
                break
            time.sleep(0.3)
        time.sleep(2.0)  # (n1 has founded by now: its founding settles within a second of knowing n0)
        split = _view(cl)
        lab.heal_all()
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            v = _view(cl)
            if all(isinstance(x, tuple) and x[0] and x[2] == 3 and len(x[1]) == 2 for x in v) \
                    and len({x[0] for x in v}) == 1:
                break
            time.sleep(0.3)
        assert all(isinstance(x, tuple) and x[0] and x[2] == 3 and len(x[1]) == 2 for x in v), (split, v)
        assert len({x[0] for x in v}) == 1, (split, v)

        async def r3_create() -> None:
            nc = await nats.connect(cl.nodes[1].url)
            try:
                js = nc.jetstream(timeout=10)
                end = time.monotonic() + 30
                while True:
                    try:
                        si = await js.add_stream(name="SPLIT", subjects=["split.>"], num_replicas=3)
                        break
                    except Exception:
                        if time.monotonic() > end:
                            raise
                        await asyncio.sleep(0.5)
                assert si.config.num_replicas == 3
                ack = await js.publish("split.a", b"x")
                assert ack.seq == 1
            finally:
                await nc.close()

        asyncio.run(r3_create())
    finally:
        cl.stop()
        lab.down()
