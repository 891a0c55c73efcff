"""A consumer remembers which subjects its filters match (Consumer._matches, asked for every stored message);
a config update with new filters answers by the new ones."""
from __future__ import annotations

import nats
from nats.js.api import ConsumerConfig

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.server import Options


async def test_matches_follow_a_filter_update(tmp_path):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["a", "b", "c.*"])
        await js.add_consumer("S", ConsumerConfig(durable_name="d", filter_subject="a", ack_policy="explicit"))
        c = srv.jetstream.accounts["$G"].streams["S"].consumers["d"]
        for s in ("a", "b", "c.x"):
            await js.publish(s, s.encode())
        assert [c._matches(s) for s in ("a", "b", "c.x", "a")] == [True, False, False, True]
        sub = await js.pull_subscribe_bind("d", stream="S")
        msgs = await sub.fetch(5, timeout=1)
        assert [m.subject for m in msgs] == ["a"]
        for m in msgs:
            await m.ack_sync()
        await js.add_consumer("S", ConsumerConfig(durable_name="d", filter_subjects=["b", "c.*"],  # (an update)
                                                   ack_policy="explicit"))
        c = srv.jetstream.accounts["$G"].streams["S"].consumers["d"]
        assert [c._matches(s) for s in ("a", "b", "c.x", "c.y.z")] == [False, True, True, False]
        for s in ("a", "b", "c.y"):
            await js.publish(s, s.encode())
        got = []
        for _ in range(10):
            try:
                got += [m.subject for m in await sub.fetch(5, timeout=1)]
            except nats.errors.TimeoutError:
                break
        assert got[-2:] == ["b", "c.y"] and "a" not in got  # (where an update restarts the scan is not tested here)
        await nc.close()
