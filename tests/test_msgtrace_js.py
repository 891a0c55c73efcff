"""Message tracing into JetStream compared with nats-server: the ``js`` event (stream, subject), the
stored message's trace destination disabled, trace-only stores nothing and sends no ack."""
from __future__ import annotations

import asyncio
import json

import nats

from tests.difftarget import both
from tests.test_msgtrace import _norm_event


async def _run(url: str) -> tuple[list, list, int]:
    nc = await nats.connect(url, name="js", allow_reconnect=False)
    traces: list = []

    async def tcb(m):
        traces.append(_norm_event(json.loads(m.data)))
    try:
        await nc.subscribe("trace.js", cb=tcb)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["js.>"])
        ack = await nc.request("js.a", b"one", headers={"Nats-Trace-Dest": "trace.js"}, timeout=2)
        assert json.loads(ack.data)["seq"] == 1
        inbox = nc.new_inbox()
        acks: list = []

        async def acb(m):
            acks.append(m.data)
        await nc.subscribe(inbox, cb=acb)
        await nc.publish("js.b", b"two", reply=inbox, headers={"Nats-Trace-Dest": "trace.js",
                                                               "Nats-Trace-Only": "true"})
        await nc.flush()
        await asyncio.sleep(0.15)
        assert acks == []  # trace only: no PubAck
        info = await js.stream_info("S")
        stored = await js.get_msg("S", 1)
        return sorted(traces, key=lambda t: json.dumps(t, sort_keys=True)), [dict(stored.headers or {})], \
            info.state.messages
    finally:
        await nc.close()


async def test_jetstream_trace_as_nats_server(tmp_path):
    # ({port} differs per server: each has its own store directory)
    conf = f'listen: 127.0.0.1:{{port}}\njetstream {{ store_dir: "{tmp_path}/{{port}}" }}\n'
    async with both(conf) as servers:
        res = {k: await _run(s.client_url) for k, s in servers.items()}
    assert res["rillet"] == res["go"]
    traces, headers, n = res["rillet"]
    assert n == 1 and headers == [{"Nats-Trace-Dest": "trace disabled"}]
    assert [e["type"] for e in traces[0]["events"]] == ["in", "js"]
