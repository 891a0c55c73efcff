"""Message tracing (Nats-Trace-Dest) compared with nats-server: the same publishes to both servers, the
trace events and the deliveries compared (ids, timestamps and server details left out)."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import nats

from tests.difftarget import both

CONF = """
listen: 127.0.0.1:{port}
accounts {
  A { users [{user: a, password: a}
             {user: lim, password: lim, permissions { publish { allow: ["ok.>", "trace.a"] } }}
             {user: nodest, password: nodest, permissions { publish { allow: ["ok.>"] } }}]
      exports [{service: "svc.>"}, {service: "tsvc.>", allow_trace: true}, {stream: "st.>"}, {stream: "tst.>"}]
      mappings { "m.old": "m.new" }
      msg_trace { dest: "trace.ext", sampling: 100 }
  }
  B { users [{user: b, password: b}]
      imports [{service: {account: A, subject: "svc.>"}, to: "bsvc.>"}
               {service: {account: A, subject: "tsvc.>"}}
               {stream: {account: A, subject: "st.>"}, prefix: "imp"}
               {stream: {account: A, subject: "tst.>"}, prefix: "timp", allow_trace: true}]
  }
}
"""


def _norm_event(ev: dict) -> dict:
    ev = json.loads(json.dumps(ev))
    assert {"name", "id", "ver", "seq", "time"} <= set(ev["server"]), ev["server"]
    ev["server"] = "-"
    for e in ev["events"]:
        assert e.pop("ts", "")[:2] == "20", e
        e.pop("cid", None)
    return ev


async def _scenario(url: str, actions) -> tuple[list, list]:
    """Connect a and b, subscribe as the test needs, run ``actions``; returns (traces, deliveries)."""
    a = await nats.connect(url.replace("nats://", "nats://a:a@"), name="ca", allow_reconnect=False)
    b = await nats.connect(url.replace("nats://", "nats://b:b@"), name="cb", allow_reconnect=False)
    traces: list = []
    got: list = []

    async def tcb(m):
        traces.append(_norm_event(json.loads(m.data)))

    async def cb(m):
        got.append((m.subject, dict(m.headers or {}), m.data))

    async def svc(m):
        # a _R_ reply subject is random: only its prefix is compared
        h = {k: ("_R_." if v.startswith("_R_.") else v) for k, v in (m.headers or {}).items()
             if k != "Nats-Request-Info"}
        got.append((m.subject, h, m.data))
        await m.respond(b"resp")
    for acc, subj in ((a, "trace.a"), (a, "trace.ext"), (b, "trace.b")):
        await acc.subscribe(subj, cb=tcb)
    await a.subscribe("m.new", cb=cb)
    await a.subscribe("foo", cb=cb, queue="q")
    await a.subscribe("foo", cb=cb)
    await b.subscribe("imp.st.x", cb=cb)
    await b.subscribe("timp.tst.x", cb=cb)
    await a.subscribe("svc.x", cb=svc)
    await a.subscribe("tsvc.x", cb=svc)
    await a.flush()
    await b.flush()
    try:
        await actions(a, b, url)
        await a.flush()
        await b.flush()
        await asyncio.sleep(0.15)
    finally:
        await a.close()
        await b.close()
    for t in traces:  # egress events (last in a trace) come in subscription order, which neither server fixes
        ev = t.get("events") or []
        t["events"] = [e for e in ev if e.get("type") != "eg"] + sorted(
            (e for e in ev if e.get("type") == "eg"), key=lambda e: json.dumps(e, sort_keys=True))
    traces.sort(key=lambda t: json.dumps(t, sort_keys=True))
    got.sort(key=repr)
    return traces, got


async def _compare(actions) -> tuple[list, list]:
    async with both(CONF) as servers:
        res = {k: await _scenario(s.client_url, actions) for k, s in servers.items()}
    assert res["rillet"][0] == res["go"][0]
    assert res["rillet"][1] == res["go"][1]
    return res["rillet"]


async def test_publish_mapping_queue_and_plain():
    async def act(a, b, url):
        await a.publish("m.old", b"hi", headers={"Nats-Trace-Dest": "trace.a"})
        await a.publish("foo", b"hi", headers={"Nats-Trace-Dest": "trace.a", "X-Other": "1"})
        await a.publish("nobody", b"hi", headers={"Nats-Trace-Dest": "trace.a"})
    traces, got = await _compare(act)
    assert len(traces) == 3 and any(e["type"] == "sm" for t in traces for e in t["events"])
    assert ("m.new", {"Nats-Trace-Dest": "trace.a"}, b"hi") in got  # the delivery keeps the trace headers


async def test_trace_only_delivers_nothing():
    async def act(a, b, url):
        await a.publish("foo", b"hi", headers={"Nats-Trace-Dest": "trace.a", "Nats-Trace-Only": "true"})
        await a.publish("m.old", b"hi", headers={"Nats-Trace-Dest": "trace.a", "Nats-Trace-Only": "on"})
    traces, got = await _compare(act)
    assert got == [] and len(traces) == 2


async def test_no_echo_egress_error():
    async def act(a, b, url):
        nc = await nats.connect(url.replace("nats://", "nats://a:a@"), name="noecho", no_echo=True)
        await nc.subscribe("foo")
        await nc.flush()
        await nc.publish("foo", b"x", headers={"Nats-Trace-Dest": "trace.a"})
        await nc.flush()
        await asyncio.sleep(0.05)
        await nc.close()
    traces, _ = await _compare(act)
    assert any(e.get("error") == "Not delivered because of no echo" for e in traces[0]["events"])


async def test_stream_exports_with_and_without_allow_trace():
    async def act(a, b, url):
        await a.publish("st.x", b"hi", headers={"Nats-Trace-Dest": "trace.a"})
        await a.publish("tst.x", b"hi", headers={"Nats-Trace-Dest": "trace.a"})
        await a.publish("tst.x", b"only", headers={"Nats-Trace-Dest": "trace.a", "Nats-Trace-Only": "1"})
    traces, got = await _compare(act)
    assert [g[0] for g in got] == ["imp.st.x", "timp.tst.x"]


async def test_service_imports_request_reply():
    async def act(a, b, url):
        r = await b.request("bsvc.x", b"req", headers={"Nats-Trace-Dest": "trace.b"}, timeout=2)
        assert r.data == b"resp"
        r = await b.request("tsvc.x", b"req", headers={"Nats-Trace-Dest": "trace.b"}, timeout=2)
        assert r.data == b"resp"
    traces, got = await _compare(act)
    # without allow_trace the request goes on with its trace disabled; with it, to a _R_ subject
    assert ("svc.x", {"Nats-Trace-Dest": "trace disabled"}, b"req") in got
    assert ("tsvc.x", {"Nats-Trace-Dest": "_R_."}, b"req") in got


async def test_permissions_and_bad_destinations():
    async def act(a, b, url):
        errs: list = []

        async def ecb(e):
            errs.append(str(e))
        lim = await nats.connect(url.replace("nats://", "nats://lim:lim@"), name="lim", error_cb=ecb,
                                 allow_reconnect=False)
        await lim.publish("denied", b"x", headers={"Nats-Trace-Dest": "trace.a"})  # ingress error
        await lim.publish("ok.1", b"x", headers={"Nats-Trace-Dest": "trace.other"})  # dest not allowed
        await lim.flush()
        await asyncio.sleep(0.05)
        await lim.close()
        await a.publish("foo", b"bad", headers={"Nats-Trace-Dest": "bad.*"})  # delivered, not traced
        await a.publish("foo", b"bad-only", headers={"Nats-Trace-Dest": "bad.*", "Nats-Trace-Only": "true"})
        await a.publish("foo", b"off", headers={"Nats-Trace-Dest": "trace disabled"})
    traces, got = await _compare(act)
    assert len(traces) == 1 and "error" in traces[0]["events"][0]
    assert [g[2] for g in got].count(b"bad") == 2 and b"bad-only" not in [g[2] for g in got]


async def test_traceparent_with_account_destination():
    async def act(a, b, url):
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-"
        await a.publish("foo", b"s", headers={"Traceparent": tp + "01"})  # sampled: traced to trace.ext
        await a.publish("foo", b"n", headers={"traceparent": tp + "00"})  # not sampled
        await b.publish("foo", b"b", headers={"traceparent": tp + "01"})  # account B has no destination
    traces, got = await _compare(act)
    assert len(traces) == 1 and traces[0]["request"]["header"] == {"Traceparent": [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]}


def test_header_parsing_and_setting():
    from rillet.server import msgtrace as M
    h = b"NATS/1.0\r\nNats-Trace-Dest:  t.d \r\nA: 1\r\nA: 2\r\nEmpty:\r\n\r\n"
    headers, dest, parent = M.parse_headers(h)
    assert headers == {"Nats-Trace-Dest": ["t.d"], "A": ["1", "2"]} and dest and not parent
    assert M.parse_headers(b"NATS/1.0\r\nNats-Trace-Dest: trace disabled\r\n\r\n") == ({}, False, False)
    assert M.parse_headers(b"NATS/1.0\r\ntraceparent: 00-a-b-zz\r\n\r\n")[2] is False
    hl, m = M.set_header(len(h), h + b"payload", "Nats-Trace-Hop", "1")
    assert m == h[:-2] + b"Nats-Trace-Hop: 1\r\n\r\npayload" and hl == len(h) + len(b"Nats-Trace-Hop: 1\r\n")
    hl2, m2 = M.set_header(hl, m, "Nats-Trace-Hop", "1.2")
    assert m2[:hl2].endswith(b"Nats-Trace-Hop: 1.2\r\n\r\n") and m2.count(b"Nats-Trace-Hop") == 1
