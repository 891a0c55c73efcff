"""Message tracing across a route, compared with a nats-server cluster of two: the publishing server's event
(ROUTER egress with hop "1", ``hops``), the other server's (ROUTER ingress, its client egress), the hop
header on the delivered message, and trace-only (forwarded, not delivered there)."""
from __future__ import annotations

import asyncio
import contextlib
import json

import nats

from tests.difftarget import go_server, rillet_server
from tests.helpers import free_port
from tests.test_msgtrace import _norm_event

CONF = """
server_name: S{i}
listen: 127.0.0.1:-1
cluster {{ name: C, listen: 127.0.0.1:{mine}, routes: [nats://127.0.0.1:{other}] }}
"""


@contextlib.asynccontextmanager
async def _pair(kind: str):
    p1, p2 = free_port(), free_port()
    start = rillet_server if kind == "rillet" else go_server
    async with start(CONF.format(i=1, mine=p1, other=p2)) as s1:
        async with start(CONF.format(i=2, mine=p2, other=p1)) as s2:
            yield s1, s2


async def _run(s1, s2) -> tuple[list, list]:
    n1 = await nats.connect(s1.client_url, name="c1", allow_reconnect=False)
    n2 = await nats.connect(s2.client_url, name="c2", allow_reconnect=False)
    traces: list = []
    got: list = []

    async def tcb(m):
        ev = _norm_event(json.loads(m.data))
        for e in ev["events"]:
            if e.get("kind") == 1:
                e["name"] = e["name"] if e.get("name") in ("S1", "S2") else "?"
        traces.append(ev)

    async def cb(m):
        got.append((m.subject, dict(m.headers or {}), m.data))
    try:
        await n1.subscribe("trace.c", cb=tcb)
        await n2.subscribe("foo", cb=cb)
        await n1.flush()
        await n2.flush()
        for _ in range(200):  # until S1 knows the interest of S2
            await n1.publish("foo", b"probe")
            await n1.flush()
            await asyncio.sleep(0.02)
            if got:
                break
        await asyncio.sleep(0.05)
        got.clear()
        await n1.publish("foo", b"hi", headers={"Nats-Trace-Dest": "trace.c"})
        await n1.publish("foo", b"only", headers={"Nats-Trace-Dest": "trace.c", "Nats-Trace-Only": "true"})
        await n1.flush()
        for _ in range(100):
            if len(traces) >= 4:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    finally:
        await n1.close()
        await n2.close()
    return sorted(traces, key=lambda t: json.dumps(t, sort_keys=True)), got


async def test_trace_across_a_route_as_nats_server():
    res = {}
    for kind in ("rillet", "go"):
        async with _pair(kind) as (s1, s2):
            res[kind] = await _run(s1, s2)
    assert res["rillet"] == res["go"]
    traces, got = res["rillet"]
    assert got == [("foo", {"Nats-Trace-Dest": "trace.c", "Nats-Trace-Hop": "1"}, b"hi")]
    assert len(traces) == 4 and sorted(t.get("hops", 0) for t in traces) == [0, 0, 1, 1]


HUB = "server_name: HUB\nlisten: 127.0.0.1:-1\nleafnodes {{ listen: 127.0.0.1:{lp} }}\n"
LEAF = 'server_name: LEAF\nlisten: 127.0.0.1:-1\nleafnodes {{ remotes: [{{url: "nats://127.0.0.1:{lp}"}}] }}\n'


async def _leaf_run(kind: str) -> tuple[list, list]:
    lp = free_port()
    start = rillet_server if kind == "rillet" else go_server
    async with start(HUB.format(lp=lp)) as hub, start(LEAF.format(lp=lp)) as leaf:
        n1 = await nats.connect(hub.client_url, name="c1", allow_reconnect=False)
        n2 = await nats.connect(leaf.client_url, name="c2", allow_reconnect=False)
        traces: list = []
        got: list = []

        async def tcb(m):
            traces.append(_norm_event(json.loads(m.data)))

        async def cb(m):
            got.append((m.subject, dict(m.headers or {}), m.data))
        try:
            await n1.subscribe("trace.c", cb=tcb)
            await n2.subscribe("foo", cb=cb)
            for _ in range(200):  # until the hub knows the leaf's interest
                await n1.publish("foo", b"probe")
                await n1.flush()
                await asyncio.sleep(0.02)
                if got:
                    break
            await asyncio.sleep(0.05)
            got.clear()
            await n1.publish("foo", b"hi", headers={"Nats-Trace-Dest": "trace.c"})
            await n2.publish("foo", b"fromleaf", headers={"Nats-Trace-Dest": "trace.c"})
            await n1.flush()
            await n2.flush()
            for _ in range(100):
                if len(traces) >= 3:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
        finally:
            await n1.close()
            await n2.close()
    return sorted(traces, key=lambda t: json.dumps(t, sort_keys=True)), sorted(got, key=repr)


async def test_trace_across_a_leaf_connection_as_nats_server():
    res = {kind: await _leaf_run(kind) for kind in ("rillet", "go")}
    assert res["rillet"] == res["go"]
    traces, got = res["rillet"]
    assert len(traces) == 3 and {e["kind"] for t in traces for e in t["events"]} == {0, 4}
