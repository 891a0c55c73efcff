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


async def _refusals(url: str) -> tuple[list, list]:
    nc = await nats.connect(url, name="js", allow_reconnect=False)
    traces: list = []

    async def tcb(m):
        traces.append(_norm_event(json.loads(m.data)))
    out: list = []
    try:
        await nc.subscribe("trace.js", cb=tcb)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["js.>"], max_msg_size=100)
        await js.add_stream(name="I", subjects=["int.>"], retention="interest")
        cases = [("int.a", {}, b"x"), ("js.a", {"Nats-Msg-Id": "1"}, b"x"), ("js.a", {"Nats-Msg-Id": "1"}, b"x"),
                 ("js.b", {"Nats-Expected-Last-Sequence": "7"}, b"x"), ("js.c", {}, b"y" * 200),
                 ("js.d", {"Nats-Expected-Stream": "Z"}, b"x"),
                 ("js.e", {"Nats-Expected-Last-Subject-Sequence": "3"}, b"x"),
                 ("js.f", {"Nats-Expected-Last-Msg-Id": "zz"}, b"x"),
                 # trace-only: the checks still run and their error is answered; nothing is stored
                 ("js.g", {"Nats-Expected-Last-Sequence": "7", "Nats-Trace-Only": "true"}, b"x")]
        for subj, hdrs, data in cases:
            r = await nc.request(subj, data, headers={"Nats-Trace-Dest": "trace.js", **hdrs}, timeout=2)
            out.append(json.loads(r.data))
        for _ in range(100):
            if len(traces) >= len(cases):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    finally:
        await nc.close()
    return sorted(traces, key=lambda t: json.dumps(t, sort_keys=True)), out


async def test_jetstream_trace_errors_and_no_interest_as_nats_server(tmp_path):
    conf = f'listen: 127.0.0.1:{{port}}\njetstream {{ store_dir: "{tmp_path}/{{port}}" }}\n'
    async with both(conf) as servers:
        res = {k: await _refusals(s.client_url) for k, s in servers.items()}
    assert res["rillet"] == res["go"]
    traces, out = res["rillet"]
    js = [e for t in traces for e in t["events"] if e["type"] == "js"]
    assert {"type": "js", "stream": "I", "subject": "int.a", "nointerest": True} in js
    assert {"type": "js", "stream": "S", "error": "msgid is duplicate"} in js
    assert sum("error" in e for e in js) == 7 and out[-1]["error"]["err_code"] == 10071
