"""ADR-60 durable sourcing on R3 streams in an in-process 3-server Rillet cluster: a work-queue origin with a
durable consumer (ack policy flow_control), a sourcing stream using it; everything published (through every
server) is sourced once and the origin drains, also after the sourcing stream's leader changes."""
from __future__ import annotations

import json

from jscluster_support import cl, reps, stream_leader, until  # noqa: F401


def _msgs(servers, name: str) -> list:
    return [r.stream.store.state().msgs if r is not None else None for r in reps(servers, name)]


async def test_durable_sourcing_from_r3_work_queue(cl):  # noqa: F811
    import nats
    servers, nc, js = cl

    async def api(subj: str, body: dict | None = None) -> dict:
        m = await nc.request(subj, json.dumps(body).encode() if body is not None else b"", timeout=3)
        return json.loads(m.data)

    ans = await api("$JS.API.STREAM.CREATE.WO", {"name": "WO", "subjects": ["wo.>"], "retention": "workqueue",
                                                 "num_replicas": 3})
    assert "error" not in ans, ans
    ans = await api("$JS.API.CONSUMER.CREATE.WO.D", {"stream_name": "WO", "config": {
        "durable_name": "D", "deliver_subject": "dlv.wo", "ack_policy": "flow_control", "max_ack_pending": 100}})
    assert "error" not in ans, ans
    ncs = [nc] + [await nats.connect(s.client_url) for s in servers[1:]]
    try:
        for i in range(9):
            await ncs[i % 3].request(f"wo.{i}", f"m{i}".encode(), timeout=3)
        ans = await api("$JS.API.STREAM.CREATE.WS", {"name": "WS", "num_replicas": 3, "sources": [
            {"name": "WO", "consumer": {"name": "D", "deliver_subject": "dlv.wo"}}]})
        assert "error" not in ans, ans
        await until(lambda: _msgs(servers, "WS") == [9] * 3, timeout=10, what="9 sourced on every replica")
        await until(lambda: _msgs(servers, "WO") == [0] * 3, timeout=10, what="the origin drained everywhere")
        old = stream_leader(servers, "WS")
        r = await api("$JS.API.STREAM.LEADER.STEPDOWN.WS")
        assert r.get("success") is True, r
        await until(lambda: stream_leader(servers, "WS") not in (None, old), what="a new sourcing leader")
        for i in range(9, 15):
            await ncs[i % 3].request(f"wo.{i}", f"m{i}".encode(), timeout=3)
        await until(lambda: _msgs(servers, "WS") == [15] * 3, timeout=10, what="15 sourced on every replica")
        await until(lambda: _msgs(servers, "WO") == [0] * 3, timeout=10, what="the origin drained again")
        leader = stream_leader(servers, "WS")
        got = sorted(leader.stream.store.load_msg(s).data for s in range(1, 16))
        assert got == sorted(f"m{i}".encode() for i in range(15)), got  # each once
    finally:
        for c in ncs[1:]:
            await c.close()
