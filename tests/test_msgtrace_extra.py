"""Message tracing, the remaining cases compared with nats-server: the old ``Nats-Trace-Origin-Account``
header (the trace disabled in the delivered message), destinations a client may never publish to (``_GR_.``),
compressed events (``Accept-Encoding``: gzip, snappy, s2, anything else), and the ingress-error event of a
message refused for max payload."""
from __future__ import annotations

import asyncio
import gzip
import json

import cramjam
import nats

from tests.difftarget import both, rillet_server
from tests.helpers import RawClient
from tests.test_msgtrace import _compare, _norm_event

DEST = {"Nats-Trace-Dest": "trace.a"}


async def test_origin_account_header_disables_the_trace():
    async def act(a, b, url):
        await a.publish("foo", b"o", headers={**DEST, "Nats-Trace-Origin-Account": "B"})
        await a.publish("foo", b"o-only", headers={**DEST, "Nats-Trace-Origin-Account": "B",
                                                    "Nats-Trace-Only": "true"})
    traces, got = await _compare(act)
    assert traces == []
    # delivered (to the plain and the queue subscriber) with the destination disabled; trace-only: dropped
    assert got == [("foo", {"Nats-Trace-Dest": "trace disabled", "Nats-Trace-Origin-Account": "B"}, b"o")] * 2


async def _errors_and_deliveries(url: str) -> tuple[list, list]:
    errs: list = []
    got: list = []

    async def ecb(e):
        errs.append(str(e))

    async def cb(m):
        got.append((m.subject, dict(m.headers or {}), m.data))
    nc = await nats.connect(url, name="c", error_cb=ecb, allow_reconnect=False)
    try:
        await nc.subscribe("foo", cb=cb)
        await nc.subscribe("_GR_.>", cb=cb)
        await nc.flush()
        await nc.publish("foo", b"gr", headers={"Nats-Trace-Dest": "_GR_.a.b.c"})
        await nc.publish("foo", b"nrg", headers={"Nats-Trace-Dest": "$NRG.x"})
        await nc.flush()
        await asyncio.sleep(0.1)
    finally:
        await nc.close()
    return errs, got


async def test_destinations_a_client_may_not_publish_to():
    async with both("listen: 127.0.0.1:{port}\n") as servers:
        res = {k: await _errors_and_deliveries(s.client_url) for k, s in servers.items()}
    assert res["rillet"] == res["go"]
    errs, got = res["rillet"]
    assert got == [] and len(errs) == 2 and "permissions violation for publish to \"_gr_.a.b.c\"" in errs[0].lower()


def _decode(m) -> tuple[dict, dict]:
    enc = (m.headers or {}).get("Content-Encoding", "")
    data = m.data
    if enc == "gzip":
        data = gzip.decompress(data)
    elif enc == "snappy":
        data = bytes(cramjam.snappy.decompress(data))
    return dict(m.headers or {}), _norm_event(json.loads(data))


async def _compressed(url: str) -> list:
    nc = await nats.connect(url, name="c", allow_reconnect=False)
    traces: list = []

    async def tcb(m):
        traces.append(_decode(m))
    try:
        await nc.subscribe("trace.a", cb=tcb)
        await nc.subscribe("foo")
        await nc.flush()
        for enc in ("gzip", "snappy", "S2", "br", "deflate, GZIP"):
            await nc.publish("foo", enc.encode(), headers={**DEST, "Accept-Encoding": enc})
        await nc.flush()
        for _ in range(100):
            if len(traces) >= 5:
                break
            await asyncio.sleep(0.01)
    finally:
        await nc.close()
    return sorted(traces, key=lambda t: json.dumps(t, sort_keys=True))


async def test_events_compressed_as_accept_encoding_asks():
    async with both("listen: 127.0.0.1:{port}\n") as servers:
        res = {k: await _compressed(s.client_url) for k, s in servers.items()}
    assert res["rillet"] == res["go"]
    assert sorted(h.get("Content-Encoding") for h, _ in res["rillet"]) == [
        "gzip", "gzip", "identity", "snappy", "snappy"]


async def _max_payload(port: int, url: str) -> tuple[list, bytes]:
    nc = await nats.connect(url, name="watch", allow_reconnect=False)
    traces: list = []

    async def tcb(m):
        traces.append(_norm_event(json.loads(m.data)))
    try:
        await nc.subscribe("trace.a", cb=tcb)
        await nc.flush()
        rc = await RawClient.open(port, headers=True, name="big")
        h = b"NATS/1.0\r\nNats-Trace-Dest: trace.a\r\nX: 1\r\n\r\n"
        rc.send(b"HPUB foo %d %d\r\n" % (len(h), 300) + h + b"x" * 10)
        err = await rc.readline(2.0)
        for _ in range(100):
            if traces:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    finally:
        await nc.close()
    return traces, err


async def test_max_payload_refusal_sends_the_ingress_error_event():
    conf = "listen: 127.0.0.1:{port}\nmax_payload: 200\n"
    async with both(conf) as servers:
        res = {}
        for k, s in servers.items():
            res[k] = await _max_payload(int(s.client_url.rsplit(":", 1)[1]), s.client_url)
    assert res["rillet"] == res["go"]
    traces, err = res["rillet"]
    assert err.startswith(b"-ERR 'Maximum Payload Violation'")
    assert traces[0]["events"][0]["error"] == "maximum payload exceeded" and traces[0]["request"]["msgsize"] == 300


async def test_unsampled_traceparent_is_delivered_with_the_trace_disabled(monkeypatch):
    """Not sampled by the account's ``msg_trace`` sampling: the message goes on with its destination
    disabled, so no other server traces it (nats-server's sampling is random: Rillet only, sampling forced)."""
    from rillet.server import msgtrace_events
    monkeypatch.setattr(msgtrace_events, "_sample", lambda pct: False)
    conf = "listen: 127.0.0.1:{port}\naccounts { A { users [{user: a, password: a}], " \
           "msg_trace { dest: trace.ext, sampling: 10 } } }\n"
    async with rillet_server(conf.replace("{port}", "-1")) as srv:
        url = srv.client_url.replace("nats://", "nats://a:a@")
        nc = await nats.connect(url, allow_reconnect=False)
        got: list = []

        async def cb(m):
            got.append((m.subject, dict(m.headers or {})))
        try:
            await nc.subscribe("foo", cb=cb)
            await nc.subscribe("trace.ext", cb=cb)
            tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            await nc.publish("foo", b"x", headers={"traceparent": tp})
            await nc.flush()
            await asyncio.sleep(0.1)
        finally:
            await nc.close()
    assert got == [("foo", {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                            "Nats-Trace-Dest": "trace disabled"})]
