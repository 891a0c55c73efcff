"""A push consumer led on another server than its subscriber's delivers as soon as the subscription arrives.

nats.py creates a push consumer first and subscribes to its deliver subject after; when the consumer's leader is
on another server, the subscription reaches it over a route. nats-server's consumer hears of that interest at
once; Rillet's did only on its 1 s interest poll until routed interest told the account's interest watchers too
(Account.route_interest -> Account.remote_interest, as gateway interest already did)."""
from __future__ import annotations

import asyncio
import time

from nats.js.api import ConsumerConfig

from jscluster_support import cl, server_gc, until  # noqa: F401 (the fixtures)

TRIES = 12  # consumers are placed at random among 3 servers: 12 tries land off the client's server but for ~1e-6


async def test_push_consumer_on_another_server_delivers_at_once(cl, server_gc):
    servers, nc, js = cl
    await js.add_stream(name="P", subjects=["p.>"], num_replicas=3)
    await js.publish("p.x", b"hello")
    client_server = servers[0].name
    off = []
    for i in range(TRIES):
        inbox = f"deliver.{i}"
        info = await js.add_consumer("P", ConsumerConfig(durable_name=f"c{i}", deliver_subject=inbox,
                                                         num_replicas=1))
        leader = info.cluster.leader if info.cluster else ""
        if leader == client_server:
            await js.delete_consumer("P", f"c{i}")
            continue
        await asyncio.sleep(0.05)  # (the consumer has found no interest yet and waits for it)
        got = asyncio.get_running_loop().create_future()

        async def cb(m, got=got):
            if not got.done():
                got.set_result(time.monotonic())
        t0 = time.monotonic()
        sub = await nc.subscribe(inbox, cb=cb)
        took = await asyncio.wait_for(got, 5) - t0
        await sub.unsubscribe()
        await js.delete_consumer("P", f"c{i}")
        off.append(took)
        if len(off) >= 3:
            break
    assert len(off) >= 3, "too few consumers placed off the client's server"
    # the bug delivered every time on the 1 s poll (~0.95 s after the subscription); one sample can also meet a
    # stall of the test process (a CI run saw 0.653, 0.001, 0.001), so the median is judged
    assert sorted(off)[len(off) // 2] < 0.5, [round(t, 3) for t in off]
