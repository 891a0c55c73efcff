"""Atomic batch publishing (allow_atomic, ``Nats-Batch-*`` headers) on an R3 stream in an in-process 3-server
Rillet cluster, published through every server: staged messages answered empty, the commit's PubAck with the
batch id and count, every replica holding the batch; an incomplete batch stores nothing anywhere; a new batch
after a stream leader change commits as before."""
from __future__ import annotations

import json

from jscluster_support import cl, reps, stream_leader, until  # noqa: F401


async def _batch(nc, subject: str, bid: str, n: int, commit: bool = True, skip: int = 0) -> list:
    out = []
    for seq in range(1, n + 1):
        if seq == skip:
            continue
        h = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(seq)}
        if commit and seq == n:
            h["Nats-Batch-Commit"] = "1"
        m = await nc.request(subject, f"{bid}-{seq}".encode(), headers=h, timeout=3)
        out.append(json.loads(m.data) if m.data else b"")
    return out


async def test_atomic_batch_on_r3_stream(cl):  # noqa: F811
    import nats
    servers, nc, js = cl
    ans = json.loads((await nc.request("$JS.API.STREAM.CREATE.AB", json.dumps({
        "name": "AB", "subjects": ["ab.>"], "num_replicas": 3, "allow_atomic": True}).encode(), timeout=3)).data)
    assert "error" not in ans, ans
    await until(lambda: stream_leader(servers, "AB") is not None, what="stream leader")
    ncs = [nc] + [await nats.connect(s.client_url) for s in servers[1:]]
    try:
        for i, c in enumerate(ncs):  # a batch through each server
            got = await _batch(c, f"ab.{i}", f"b{i}", 3)
            assert got[:2] == [b"", b""], got
            assert got[2] == {"stream": "AB", "seq": 3 * (i + 1), "batch": f"b{i}", "count": 3}, got
        await until(lambda: all(r is not None and r.stream.store.state().msgs == 9 for r in reps(servers, "AB")),
                    what="the batches on every replica")
        got = await _batch(ncs[1], "ab.x", "gap", 4, skip=2)  # sequence 2 missing: incomplete, nothing stored
        assert got[-1]["error"]["err_code"] == 10176, got
        leader = stream_leader(servers, "AB")
        m = leader.stream.store.load_msg(9)
        assert m.subject == "ab.2" and m.data == b"b2-3"
        assert all(r.stream.store.state().msgs == 9 for r in reps(servers, "AB"))
        # a leader change: a new batch after it commits as before
        old = stream_leader(servers, "AB")
        r = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.AB", b"", timeout=3)).data)
        assert r.get("success") is True, r
        await until(lambda: stream_leader(servers, "AB") not in (None, old), what="a new stream leader")
        got = await _batch(ncs[2], "ab.y", "after", 2)
        assert got[-1] == {"stream": "AB", "seq": 11, "batch": "after", "count": 2}, got
        await until(lambda: all(r.stream.store.state().msgs == 11 for r in reps(servers, "AB")),
                    what="the last batch on every replica")
    finally:
        for c in ncs[1:]:
            await c.close()
