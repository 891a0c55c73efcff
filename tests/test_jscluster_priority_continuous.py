"""Consumer priority groups with continuous pulls (long-lived pull requests that wait for messages) on an R3
stream in an in-process 3-server Rillet cluster, the requests sent through the servers that do not lead the
consumer: ``pinned_client`` (every message published while two clients wait goes to the pinned one, with its
pin id; the other waits in vain) and ``overflow`` (a waiting request with ``min_pending`` gets messages only
while the consumer's pending count is at least that). Fetch-style pulls are in test_jscluster_counters_priority."""
from __future__ import annotations

import asyncio
import json

import nats

from jscluster_support import until
from test_jscluster_counters_priority import MS, api, cl, consumer_leader_idx, make_consumer  # noqa: F401


async def _wait(nc, subject: str, body: dict):
    """A waiting pull request; its messages (and statuses) collect on the returned subscription."""
    sub = await nc.subscribe(nc.new_inbox())
    await nc.publish(subject, json.dumps(body).encode(), reply=sub.subject)
    await nc.flush()
    return sub


async def _drain(sub, seconds: float) -> list:
    out = []
    while True:
        try:
            m = await sub.next_msg(timeout=seconds)
        except nats.errors.TimeoutError:
            return out
        st = (m.headers or {}).get("Status")
        if st and not m.data:
            out.append(("status", st))
            continue
        out.append((m.data.decode(), (m.headers or {}).get("Nats-Pin-Id")))
        await m.ack()


async def test_pinned_client_continuous_pulls_on_r3(cl):  # noqa: F811
    servers, ncs = cl
    lead = await make_consumer(servers, ncs, "CPIN", {"priority_policy": "pinned_client", "priority_groups": ["G"],
                                                      "priority_timeout": 5000 * MS}, 0)
    a_nc, b_nc = ncs[(lead + 1) % 3], ncs[(lead + 2) % 3]
    N = "$JS.API.CONSUMER.MSG.NEXT.CPIN.C"
    a = await _wait(a_nc, N, {"batch": 50, "expires": 4000 * MS, "group": "G"})
    await asyncio.sleep(0.1)  # (a's request reaches the leader first: it gets the pin)
    b = await _wait(b_nc, N, {"batch": 50, "expires": 4000 * MS, "group": "G"})
    await asyncio.sleep(0.1)
    for i in range(6):
        await ncs[i % 3].request(f"cpin.{i}", f"m{i}".encode(), timeout=3)
    got_a = await _drain(a, 0.5)
    assert [d for d, _ in got_a] == [f"m{i}" for i in range(6)], got_a
    pins = {p for _, p in got_a}
    assert len(pins) == 1 and None not in pins, got_a
    info = await api(b_nc, "$JS.API.CONSUMER.INFO.CPIN.C")
    assert info["priority_groups"][0]["pinned_client_id"] == pins.pop(), info
    for i in range(6, 9):  # a second burst: the same waiting request, still pinned
        await ncs[i % 3].request(f"cpin.{i}", f"m{i}".encode(), timeout=3)
    got_a2 = await _drain(a, 0.5)
    assert [d for d, _ in got_a2] == ["m6", "m7", "m8"], got_a2
    assert await _drain(b, 0.2) == []  # the other client waits in vain while the pin holds
    info = await api(a_nc, "$JS.API.CONSUMER.INFO.CPIN.C")
    assert info["num_ack_pending"] == 0 and info["delivered"]["stream_seq"] == 9, info
    await a.unsubscribe()
    await b.unsubscribe()


async def test_overflow_continuous_pull_on_r3(cl):  # noqa: F811
    servers, ncs = cl
    lead = await make_consumer(servers, ncs, "COV", {"priority_policy": "overflow", "priority_groups": ["G"]}, 0)
    nc = ncs[(lead + 1) % 3]
    N = "$JS.API.CONSUMER.MSG.NEXT.COV.C"
    w = await _wait(nc, N, {"batch": 10, "expires": 4000 * MS, "group": "G", "min_pending": 5})
    await asyncio.sleep(0.1)
    for i in range(3):
        await ncs[i % 3].request(f"cov.{i}", f"m{i}".encode(), timeout=3)
    assert await _drain(w, 0.4) == []  # 3 pending: below min_pending
    for i in range(3, 6):
        await ncs[i % 3].request(f"cov.{i}", f"m{i}".encode(), timeout=3)
    # 6 pending: delivered while at least 5 are pending (m0 with 6, m1 with 5), then the request waits again
    got = await _drain(w, 0.5)
    assert [d for d, _ in got] == ["m0", "m1"], got
    for i in range(6, 9):
        await ncs[i % 3].request(f"cov.{i}", f"m{i}".encode(), timeout=3)
    got = await _drain(w, 0.5)  # 7 pending again: m2, m3, m4 go (7, 6, 5)
    assert [d for d, _ in got] == ["m2", "m3", "m4"], got
    await until(lambda: consumer_leader_idx(servers, "COV", "C") is not None, what="consumer leader")
    await w.unsubscribe()
