"""Message tracing across gateways, compared with a nats-server super-cluster: clusters A and B (one server
each) joined by a gateway, run as Rillet<->Rillet, Rillet<->Go and Go<->Go. Each server that handles a traced
message sends its own event: the publishing server's GATEWAY egress with its hop, the receiving server's
GATEWAY ingress, over ``_GR_.`` replies too (a traced response to a request that crossed the gateway).
Events are compared with ids, timestamps, ports, inbox tokens and server hashes left out."""
from __future__ import annotations

import asyncio
import contextlib
import json
import re

import nats

from rillet.cluster import gateway as gwmod
from tests.difftarget import go_server, rillet_server
from tests.helpers import free_port
from tests.test_msgtrace import _norm_event

CONF = """
server_name: {cl}1
listen: 127.0.0.1:-1
gateway {{ name: {cl}, listen: 127.0.0.1:{mine},
          gateways: [{{name: A, url: "nats://127.0.0.1:{ga}"}}, {{name: B, url: "nats://127.0.0.1:{gb}"}}] }}
"""

DEST = {"Nats-Trace-Dest": "trace.c"}


def _norm(ev: dict) -> dict:
    text = json.dumps(_norm_event(ev), sort_keys=True)
    text = re.sub(r"_INBOX\.[A-Za-z0-9]+(\.[A-Za-z0-9]+)?", "_INBOX.X", text)
    text = re.sub(r"(_GR_\.[^.]+\.)[^.]+\.", r"\1S.", text)  # (the server hash comes from its random id)
    return json.loads(text)


@contextlib.asynccontextmanager
async def _super(kinds: tuple[str, str]):
    ga, gb = free_port(), free_port()
    starts = [rillet_server if k == "rillet" else go_server for k in kinds]
    async with starts[0](CONF.format(cl="A", mine=ga, ga=ga, gb=gb)) as a:
        async with starts[1](CONF.format(cl="B", mine=gb, ga=ga, gb=gb)) as b:
            yield a, b


async def _until_delivered(nc, subject: str, box: list, timeout: float = 8.0) -> None:
    """Publish probes on ``subject`` until one arrives (the interest crossed the gateway)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not box:
        if loop.time() > deadline:
            raise AssertionError(f"no interest across the gateway for {subject}")
        await nc.publish(subject, b"probe")
        await nc.flush()
        await asyncio.sleep(0.03)


async def _run(kinds: tuple[str, str]) -> tuple[list, list]:
    async with _super(kinds) as (a, b):
        na = await nats.connect(a.client_url, name="ca", allow_reconnect=False)
        nb = await nats.connect(b.client_url, name="cb", allow_reconnect=False)
        traces: list = []
        got: list = []
        probes: list = []

        async def tcb(m):
            if m.data == b"probe":
                probes.append(m)
            else:
                traces.append(_norm(json.loads(m.data)))

        async def cb(m):
            if m.data == b"probe":
                probes.append(m)
            else:
                got.append((m.subject, dict(m.headers or {}), m.data))

        async def svc(m):
            if m.data == b"probe":
                probes.append(m)
                return
            got.append((m.subject, dict(m.headers or {}), m.data))
            # the response is traced too: it crosses back on the _GR_. reply subject
            await nb.publish(m.reply, b"resp", headers=DEST)
        try:
            await na.subscribe("trace.c", cb=tcb)
            await na.subscribe("foo", cb=cb)
            await nb.subscribe("foo", cb=cb)
            await nb.subscribe("svc", cb=svc)
            await na.flush()
            await nb.flush()
            for nc, subj in ((nb, "trace.c"), (na, "foo"), (nb, "foo"), (na, "svc")):
                probes.clear()
                await _until_delivered(nc, subj, probes)
            await asyncio.sleep(0.05)
            await na.publish("foo", b"from-a", headers=DEST)
            await nb.publish("foo", b"only-b", headers={**DEST, "Nats-Trace-Only": "true"})
            await na.flush()
            await nb.flush()
            # the first request: the requester's inbox subscription is new, so the reply crosses as _GR_.
            r = await na.request("svc", b"req", headers=DEST, timeout=3)
            got.append(("reply", dict(r.headers or {}), r.data))
            for _ in range(150):
                if len(traces) >= 8:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
        finally:
            await na.close()
            await nb.close()
    return sorted(traces, key=lambda t: json.dumps(t, sort_keys=True)), sorted(got, key=repr)


async def test_trace_across_gateways_as_nats_server(monkeypatch):
    monkeypatch.setattr(gwmod, "SOLICIT_DELAY", 0.05)
    res = {kinds: await _run(kinds) for kinds in (("rillet", "rillet"), ("rillet", "go"), ("go", "go"))}
    go_traces, go_got = res[("go", "go")]
    assert len(go_traces) == 8
    # what nats-server does: the publishing server's GATEWAY egress with hop 1, the other's GATEWAY ingress
    hops = [(e["type"], e["kind"], e.get("hop")) for t in go_traces for e in t["events"] if e["kind"] == 2]
    assert sorted(hops) == [("eg", 2, "1")] * 4 + [("in", 2, None)] * 4
    assert any(e.get("subj", "").startswith("_GR_.") for t in go_traces for e in t["events"])
    for k in (("rillet", "rillet"), ("rillet", "go")):
        assert res[k][0] == go_traces, k
        assert res[k][1] == go_got, k


async def test_traced_gr_reply_forwarded_over_a_route():
    """Cluster A of two servers: the reply to each server's request crosses back on ``_GR_.`` to whichever A
    server B's gateway reaches; for the other requester that server forwards it over the route untouched (no
    hop, no egress: nats-server's handleGatewayReply) and both servers send their event, the second one's a
    ROUTER ingress with the same hop."""
    from rillet.app.embed import run_super_cluster
    async with run_super_cluster(2, 2) as (a, b):
        ncs = [await nats.connect(u, name=n, allow_reconnect=False) for u, n in
               ((a[0].client_url, "r0"), (a[1].client_url, "r1"), (b[0].client_url, "svc"))]
        traces: list = []

        async def tcb(m):
            traces.append(json.loads(m.data))

        async def svc(m):
            await ncs[2].publish(m.reply, b"resp", headers=DEST)
        try:
            await ncs[0].subscribe("trace.c", cb=tcb)
            await ncs[2].subscribe("svc", cb=svc)
            for nc in ncs:
                await nc.flush()
            for _ in range(200):
                gw = b[0].gateway.out.get("A")
                ok = all(s.gateway.out.get("B") is not None and s.gateway.out["B"].interest(b"$G", "svc")[0]
                         for s in a)
                if ok and gw is not None and gw.interest(b"$G", "trace.c")[0]:
                    break
                await asyncio.sleep(0.02)
            for nc in ncs[:2]:
                r = await nc.request("svc", b"q", timeout=3)
                assert r.data == b"resp"
            for _ in range(150):
                if len([t for t in traces if t["events"][0]["kind"] == 0 and t["events"][0]["name"] == "svc"]) >= 2 \
                        and len([t for t in traces if t["events"][0]["subj"].startswith("_GR_.")]) >= 3:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
        finally:
            for nc in ncs:
                await nc.close()
    gr = [t for t in traces if t["events"][0]["subj"].startswith("_GR_.")]
    shapes = sorted([(e["type"], e["kind"]) for e in t["events"]] for t in gr)
    # one requester's reply delivered where it arrived; the other's forwarded, then delivered over the route
    assert shapes == [[("in", 1), ("eg", 0)], [("in", 2)], [("in", 2), ("eg", 0)]], shapes
    assert all(t["request"]["header"]["Nats-Trace-Hop"] == ["1"] for t in gr)
