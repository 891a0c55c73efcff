"""A pull request past the consumer's max_batch, max_expires or max_bytes: nats-server's 409 status, the same
from Rillet (the check shared by Rillet's consumers and the Go consumer groups it leads:
rillet.jetstream.consumer.pull.request_limits_error)."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest

from jsdiff import ServerPair, run_both, same


@pytest.fixture(scope="module")
def pair():
    p = ServerPair('listen: "127.0.0.1:-1"\njetstream { store_dir: "{store}" }\n')
    yield p
    p.stop()


async def test_pull_request_limits_as_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        nc = await nats.connect(url)
        try:
            await nc.request("$JS.API.STREAM.CREATE.PL", json.dumps({"name": "PL", "subjects": ["pl"]}).encode(),
                             timeout=5)
            cfg = {"durable_name": "C", "ack_policy": "explicit", "max_batch": 2, "max_expires": 1_000_000_000,
                   "max_bytes": 100}
            await nc.request("$JS.API.CONSUMER.CREATE.PL.C",
                             json.dumps({"stream_name": "PL", "config": cfg}).encode(), timeout=5)
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            out = []
            for req in ({"batch": 3, "expires": 500_000_000}, {"batch": 1, "expires": 2_000_000_000},
                        {"batch": 1, "max_bytes": 200, "expires": 500_000_000}, "5"):
                body = req.encode() if isinstance(req, str) else json.dumps(req).encode()
                await nc.publish("$JS.API.CONSUMER.MSG.NEXT.PL.C", body, reply=inbox)
                m = await sub.next_msg(timeout=5)
                out.append(((m.headers or {}).get("Status"), (m.headers or {}).get("Description")))
            return out
        finally:
            await nc.close()

    got = same(await run_both(pair, scenario))
    assert got[:3] == [("409", "Exceeded MaxRequestBatch of 2"), ("409", "Exceeded MaxRequestExpires of 1s"),
                       ("409", "Exceeded MaxRequestMaxBytes of 100")], got
