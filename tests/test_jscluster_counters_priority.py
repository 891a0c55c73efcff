"""Message counters (allow_msg_counter) and consumer priority groups (overflow, pinned_client, prioritized)
on replicated R3 streams, driven with nats-py against an in-process 3-server Rillet JetStream cluster:
increments from clients on every server (several in flight at once), totals equal on every replica and
continued after a stream leader change; priority-group pulls through servers other than the consumer
leader, and delivery going on after a consumer leader change (issue 13)."""
from __future__ import annotations

import asyncio
import io
import json
import time

import nats
import pytest

from rillet.app.embed import run_cluster
from rillet.server.logging import Logger
from jscluster_support import until, reps

MS = 1_000_000


@pytest.fixture
async def cl():
    out = io.StringIO()
    async with run_cluster(3, jetstream=True, log=Logger(out=out)) as servers:
        ncs = [await nats.connect(s.client_url) for s in servers]
        try:
            yield servers, ncs
        finally:
            for nc in ncs:
                await nc.close()
    errs = [ln for ln in out.getvalue().splitlines() if "[ERR]" in ln and "connect to route" not in ln]
    assert not errs, errs[:5]


def stream_leader_idx(servers, name: str) -> int | None:
    ls = [i for i, r in enumerate(reps(servers, name)) if r is not None and r.leader]
    return ls[0] if len(ls) == 1 else None


def consumer_leader_idx(servers, stream: str, name: str) -> int | None:
    ls = [i for i, r in enumerate(reps(servers, stream))
          if r is not None and name in r.creps and r.creps[name].leader]
    return ls[0] if len(ls) == 1 else None


async def api(nc, subject: str, body: dict | None = None, timeout: float = 3) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=timeout)
    return json.loads(r.data)


async def incr(nc, subject: str, by: str) -> dict:
    r = await nc.request(subject, b"", headers={"Nats-Incr": by}, timeout=3)
    return json.loads(r.data)


def replica_totals(servers, name: str, subject: str) -> list:
    out = []
    for r in reps(servers, name):
        m = r.stream.store.load_last_msg(subject) if r is not None else None
        out.append(None if m is None else (m.seq, json.loads(m.data)["val"]))
    return out


async def test_counter_on_r3_stream_from_every_server(cl):
    servers, ncs = cl
    ans = await api(ncs[0], "$JS.API.STREAM.CREATE.CNT", {
        "name": "CNT", "subjects": ["cnt.>"], "num_replicas": 3, "allow_msg_counter": True, "allow_direct": True})
    assert "error" not in ans, ans
    await until(lambda: stream_leader_idx(servers, "CNT") is not None, what="stream leader")
    # one at a time, from each server in turn: each PubAck carries the running total
    vals = []
    for i, by in enumerate(("1", "+41", "-50", "10")):
        a = await incr(ncs[i % 3], "cnt.a", by)
        assert "error" not in a, a
        vals.append(a["val"])
    assert vals == ["1", "42", "-8", "2"]
    # many in flight at once, from all three servers: every total seen once, the last one the sum
    acks = await asyncio.gather(*(incr(ncs[i % 3], "cnt.a", "1") for i in range(30)))
    assert all("error" not in a for a in acks), acks
    assert sorted(int(a["val"]) for a in acks) == list(range(3, 33))
    assert sorted(a["seq"] for a in acks) == list(range(5, 35))
    await until(lambda: replica_totals(servers, "CNT", "cnt.a") == [(34, "32")] * 3, what="replicated total")
    # a direct get through each server (any replica answers): the same body
    for nc in ncs:
        m = await nc.request("$JS.API.DIRECT.GET.CNT", json.dumps({"last_by_subj": "cnt.a"}).encode(), timeout=3)
        assert json.loads(m.data) == {"val": "32"} and m.headers.get("Nats-Incr") == "1"
    # a leader change: the new leader continues from the replicated total
    for _ in range(2):
        old = stream_leader_idx(servers, "CNT")
        r = await api(ncs[(old + 1) % 3], "$JS.API.STREAM.LEADER.STEPDOWN.CNT")
        assert r.get("success") is True, r
        await until(lambda: stream_leader_idx(servers, "CNT") not in (None, old), what="new stream leader")
        a = await incr(ncs[old], "cnt.a", "100")
        assert "error" not in a, a
    assert a["val"] == "232"
    acks = await asyncio.gather(*(incr(ncs[i % 3], "cnt.b", "-2") for i in range(9)))
    assert sorted(int(a["val"]) for a in acks) == list(range(-18, 0, 2))
    await until(lambda: replica_totals(servers, "CNT", "cnt.a") == [(36, "232")] * 3
                and replica_totals(servers, "CNT", "cnt.b") == [(45, "-18")] * 3, what="replicated after stepdowns")
    info = await api(ncs[2], "$JS.API.STREAM.INFO.CNT")
    assert info["state"]["messages"] == 45 and info["config"]["allow_msg_counter"] is True


async def pull(nc, subject: str, body: dict, want: int = 1, timeout: float = 1.0) -> list:
    """One pull request on its own inbox: ("msg", data, pin id) per message and ("status", code) for a
    status answer, ending after a status, ``want`` messages, or ``timeout`` ("timeout")."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, json.dumps(body).encode(), reply=inbox)
    out: list = []
    got = 0
    try:
        while got < want:
            try:
                m = await sub.next_msg(timeout=timeout)
            except nats.errors.TimeoutError:
                out.append(("timeout",))
                break
            st = (m.headers or {}).get("Status")
            if st and not m.data:
                out.append(("status", st))
                break
            out.append(("msg", m.data.decode(), (m.headers or {}).get("Nats-Pin-Id")))
            got += 1
            await m.ack()
    finally:
        await sub.unsubscribe()
    return out


async def make_consumer(servers, ncs, name: str, cons: dict, n: int) -> int:
    ans = await api(ncs[0], f"$JS.API.STREAM.CREATE.{name}", {
        "name": name, "subjects": [f"{name.lower()}.>"], "num_replicas": 3})
    assert "error" not in ans, ans
    for i in range(n):
        await ncs[i % 3].request(f"{name.lower()}.{i}", f"m{i}".encode(), timeout=3)
    ans = await api(ncs[1], f"$JS.API.CONSUMER.CREATE.{name}.C", {"stream_name": name, "config": {
        "durable_name": "C", "ack_policy": "explicit", **cons}})  # (replicas: the stream's three)
    assert "error" not in ans, ans
    await until(lambda: consumer_leader_idx(servers, name, "C") is not None, what="consumer leader")
    assert sum(1 for r in reps(servers, name) if r is not None and "C" in r.creps) == 3
    return consumer_leader_idx(servers, name, "C")


async def stepdown_consumer(servers, ncs, stream: str, probe: dict) -> int:
    """A consumer leader change, then a pull request that takes nothing (``probe``) from every server until
    each is answered: a request sent while the servers still route the pull subject to the old leader is
    dropped there (as with nats-server, where clients retry their pulls)."""
    old = consumer_leader_idx(servers, stream, "C")
    r = await api(ncs[0], f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.C")
    assert r.get("success") is True, r
    await until(lambda: consumer_leader_idx(servers, stream, "C") not in (None, old), what="new consumer leader")
    for nc in ncs:
        deadline = time.monotonic() + 5
        while (await pull(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream}.C", probe, timeout=0.3))[0][0] != "status":
            assert time.monotonic() < deadline, "pull requests not answered after the leader change"
    return consumer_leader_idx(servers, stream, "C")


async def test_overflow_on_r3_consumer(cl):
    servers, ncs = cl
    lead = await make_consumer(servers, ncs, "POV", {"priority_policy": "overflow", "priority_groups": ["A"]}, 5)
    other = ncs[(lead + 1) % 3]
    N = "$JS.API.CONSUMER.MSG.NEXT.POV.C"
    base = {"batch": 1, "expires": 300 * MS, "group": "A"}
    assert await pull(other, N, {**base, "min_pending": 10}) in ([("timeout",)], [("status", "408")])
    assert await pull(other, N, {**base, "min_pending": 5}) == [("msg", "m0", None)]
    assert await pull(ncs[(lead + 2) % 3], N, {**base, "min_pending": 5}) in ([("timeout",)], [("status", "408")])
    r = await pull(other, N, {"batch": 1, "expires": 300 * MS})  # no group: refused
    assert r[0][0] == "status" and r[0][1] == "400", r
    lead = await stepdown_consumer(servers, ncs, "POV", {"batch": 1, "expires": 300 * MS})  # (400: no group)
    other = ncs[(lead + 1) % 3]
    assert await pull(other, N, {**base, "min_pending": 4}) == [("msg", "m1", None)]
    assert await pull(other, N, {**base, "batch": 3}, want=3) == [("msg", f"m{i}", None) for i in (2, 3, 4)]


async def test_pinned_client_on_r3_consumer(cl):
    servers, ncs = cl
    lead = await make_consumer(servers, ncs, "PPIN", {"priority_policy": "pinned_client", "priority_groups": ["A"],
                                                      "priority_timeout": 5000 * MS}, 8)
    a, b = ncs[(lead + 1) % 3], ncs[(lead + 2) % 3]
    N = "$JS.API.CONSUMER.MSG.NEXT.PPIN.C"
    base = {"batch": 1, "expires": 300 * MS, "group": "A"}
    first = await pull(a, N, base)
    assert first[0][:2] == ("msg", "m0") and first[0][2], first
    pin = first[0][2]
    info = await api(b, "$JS.API.CONSUMER.INFO.PPIN.C")
    assert info["priority_groups"][0]["pinned_client_id"] == pin, info
    assert await pull(b, N, base) in ([("timeout",)], [("status", "408")])  # another client: nothing
    r = await pull(b, N, {**base, "id": "nope"})
    assert r == [("status", "423")], r
    assert await pull(a, N, {**base, "id": pin}) == [("msg", "m1", pin)]
    # unpin through a non-leader: the next request is pinned with a new id
    r = await api(b, "$JS.API.CONSUMER.UNPIN.PPIN.C", {"group": "A"})
    assert "error" not in r, r
    r = await pull(b, N, {**base, "id": pin})
    assert r == [("status", "423")], r
    second = await pull(b, N, base)
    assert second[0][:2] == ("msg", "m2") and second[0][2] not in (None, pin), second
    pin2 = second[0][2]
    assert await pull(a, N, base) in ([("timeout",)], [("status", "408")])
    # a consumer leader change: the pin is leader state, the group is pinned again and delivery goes on
    lead = await stepdown_consumer(servers, ncs, "PPIN", {**base, "id": "probe"})
    c = ncs[(lead + 1) % 3]
    third = await pull(c, N, base)
    assert third[0][:2] == ("msg", "m3") and third[0][2], third
    pin3 = third[0][2]
    assert await pull(c, N, {**base, "id": pin3, "batch": 4}, want=4) == [("msg", f"m{i}", pin3) for i in range(4, 8)]
    assert pin2  # (the earlier pin may or may not be kept by the new leader, as nats-server)


async def test_prioritized_on_r3_consumer(cl):
    servers, ncs = cl
    lead = await make_consumer(servers, ncs, "PPRI", {"priority_policy": "prioritized", "priority_groups": ["A"]}, 0)
    N = "$JS.API.CONSUMER.MSG.NEXT.PPRI.C"

    async def round(lead: int, tag: str) -> list:
        subs = []
        for i, p in enumerate((5, 1, 3, 1)):
            nc = ncs[(lead + 1 + i % 2) % 3]  # the two servers that do not lead the consumer
            s = await nc.subscribe(nc.new_inbox())
            await nc.publish(N, json.dumps({"batch": 1, "expires": 3000 * MS, "group": "A", "priority": p}).encode(),
                             reply=s.subject)
            await nc.flush()
            subs.append(s)
        # the waiting requests reached the leader before the messages are stored
        await until(lambda: (lambda r: r is not None and r.creps["C"].leader)(reps(servers, "PPRI")[lead]),
                    what="leader")
        await asyncio.sleep(0.2)
        for i in range(4):
            await ncs[lead].request(f"ppri.{tag}{i}", f"{tag}{i}".encode(), timeout=3)
        got = []
        for s in subs:
            m = await s.next_msg(timeout=3)
            got.append(m.data.decode())
            await m.ack()
            await s.unsubscribe()
        return got

    assert await round(lead, "x") == ["x3", "x0", "x2", "x1"]
    lead = await stepdown_consumer(servers, ncs, "PPRI", {"batch": 1, "no_wait": True, "group": "A"})
    assert await round(lead, "y") == ["y3", "y0", "y2", "y1"]


async def test_explicit_r3_consumer_num_replicas(cl):
    servers, ncs = cl
    ans = await api(ncs[0], "$JS.API.STREAM.CREATE.EXP", {"name": "EXP", "subjects": ["exp"], "num_replicas": 3})
    assert "error" not in ans, ans
    ans = await api(ncs[1], "$JS.API.CONSUMER.CREATE.EXP.C", {"stream_name": "EXP", "config": {
        "durable_name": "C", "ack_policy": "explicit", "num_replicas": 3}})
    assert "error" not in ans, ans
