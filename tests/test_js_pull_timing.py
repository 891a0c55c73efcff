"""When a waiting pull request's 408 and its idle heartbeats go out, measured by a client, with the server
run as users run it (a subprocess on uvloop, whose loop clock is cut to milliseconds).

nats-server stamps a request when it takes it and never answers before: the 408 "Request Timeout" comes at
or after receipt + expires, the k-th heartbeat at or after receipt + k * idle_heartbeat. Clients count on
it: nats.py gives up on a fetch 100 us after its request's expiry and expects its own timeout to come first
(its test_fetch_heartbeats failed about one run in four against Rillet when expiry ran on the loop clock).
RILLET_TEST_TARGET=nats-server runs the same checks against the Go server.
"""
from __future__ import annotations

import asyncio
import json
import time

import nats

from tests.helpers import ServerProcess

EXPIRES = 0.5
HB = 0.1


async def _one_request(nc, inbox_q: asyncio.Queue) -> tuple[float, list[float], float, str]:
    """Send one pull request; (send time, heartbeat arrival times, final status arrival time, status)."""
    req = {"batch": 1, "expires": int(EXPIRES * 1e9), "idle_heartbeat": int(HB * 1e9)}
    sent = time.monotonic()  # before the bytes leave: the server cannot take the request earlier
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.D", json.dumps(req).encode(), reply=inbox_q.inbox)
    await nc.flush()
    hbs = []
    while True:
        t, status = await asyncio.wait_for(inbox_q.get(), EXPIRES + 2)
        if status == "100":
            hbs.append(t)
        else:
            return sent, hbs, t, status


async def test_pull_request_408_and_heartbeats_never_early(tmp_path):
    with ServerProcess("-js", "-sd", str(tmp_path), "-a", "127.0.0.1", "-p", "-1") as srv:
        await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
        nc = await nats.connect(srv.client_url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s.>"], storage="memory")
            await js.add_consumer("S", durable_name="D", ack_policy="explicit")
            q: asyncio.Queue = asyncio.Queue()
            q.inbox = nc.new_inbox()  # type: ignore[attr-defined]

            async def cb(m):
                q.put_nowait((time.monotonic(), (m.headers or {}).get("Status")))
            await nc.subscribe(q.inbox, cb=cb)  # type: ignore[attr-defined]
            for _ in range(2):
                sent, hbs, done, status = await _one_request(nc, q)
                assert status == "408"
                assert done >= sent + EXPIRES, f"408 came {(sent + EXPIRES - done) * 1e3:.3f} ms early"
                assert done < sent + EXPIRES + 0.1
                assert len(hbs) >= 3, hbs
                for k, t in enumerate(hbs, 1):
                    assert t >= sent + k * HB, f"heartbeat {k} came {(sent + k * HB - t) * 1e3:.3f} ms early"
                    assert t < sent + k * HB + 0.05 * k
            # a message published after the request expired goes to the next request, not the dead one
            await js.publish("s.x", b"x")
            ci = await js.consumer_info("S", "D")
            assert ci.delivered.stream_seq == 0 and ci.num_waiting == 0
        finally:
            await nc.close()
