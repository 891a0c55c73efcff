"""Replicated streams, details around direct consumers and direct gets (3 servers in process):

* a mirror's or source's consumer on its origin (``direct``: not replicated, created by the origin's stream
  leader) is deleted when the mirror gives it up (its leader changes, it is deleted), not left on the origin
  until its inactive threshold; a user's delete of such a consumer is answered once;
* creates are answered within milliseconds (a new group elects at once; the create's answer does not wait
  for a poll).
"""
from __future__ import annotations

import asyncio
import io
import json
import time

import nats
import pytest
from nats.js.api import ConsumerConfig, StreamConfig, StreamSource

from rillet.app.embed import run_cluster
from rillet.server.logging import Logger

from test_jscluster_features import api, reps, stepdown_stream, stream_leader, until


@pytest.fixture
async def cl():
    out = io.StringIO()
    async with run_cluster(3, jetstream=True, log=Logger(out=out)) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            yield servers, nc, nc.jetstream(), out
        finally:
            await nc.close()


def direct_consumers(servers, stream: str) -> set[str]:
    """The origin's non-replicated (direct) consumers, on whichever server holds them."""
    out: set[str] = set()
    for r in reps(servers, stream):
        if r is not None:
            out |= {n for n in r.stream.consumers if n not in r.creps}
    return out


async def test_mirror_gives_up_its_origin_consumer(cl):
    servers, nc, js, out = cl
    await js.add_stream(name="O", subjects=["o.>"], num_replicas=3)
    await js.add_stream(StreamConfig(name="M", mirror=StreamSource(name="O"), num_replicas=3))
    await js.add_stream(StreamConfig(name="S", sources=[StreamSource(name="O")], num_replicas=1))
    for i in range(3):
        await js.publish(f"o.{i}", b"x")
    await until(lambda: (stream_leader(servers, "M") is not None
                         and stream_leader(servers, "M").stream.store.last_seq == 3
                         and stream_leader(servers, "S") is not None
                         and stream_leader(servers, "S").stream.store.state().msgs == 3), what="mirror and source")
    await until(lambda: len(direct_consumers(servers, "O")) == 2, what="two direct consumers on the origin")
    first = direct_consumers(servers, "O")
    # the mirror's leader changes: the old leader gives its consumer up, the new one makes another
    await stepdown_stream(servers, nc, "M")
    await js.publish("o.4", b"y")
    await until(lambda: stream_leader(servers, "M") is not None
                and stream_leader(servers, "M").stream.store.last_seq == 4, what="the mirror fed again")
    await until(lambda: len(direct_consumers(servers, "O")) == 2, timeout=3, what="the old consumer deleted")
    assert len(direct_consumers(servers, "O") & first) == 1  # the source's is still the same
    # the source stream deleted: its consumer goes too
    await js.delete_stream("S")
    await until(lambda: len(direct_consumers(servers, "O")) == 1, timeout=3, what="the source's consumer deleted")
    # a user's delete of the remaining (the mirror's) direct consumer: deleted, answered once, as success
    [name] = direct_consumers(servers, "O")
    inbox = nc.new_inbox()
    answers: list = []

    async def cb(m):
        answers.append(json.loads(m.data))
    await nc.subscribe(inbox, cb=cb)
    await nc.publish(f"$JS.API.CONSUMER.DELETE.O.{name}", b"", reply=inbox)
    await until(lambda: answers, what="the delete's answer")
    await asyncio.sleep(0.4)
    assert answers == [{"type": "io.nats.jetstream.api.v1.consumer_delete_response", "success": True}]
    assert name not in direct_consumers(servers, "O")
    # a consumer nobody has: not found, once
    answers.clear()
    await nc.publish("$JS.API.CONSUMER.DELETE.O.nope", b"", reply=inbox)
    await until(lambda: answers, what="the not-found answer")
    await asyncio.sleep(0.4)
    assert len(answers) == 1 and answers[0]["error"]["err_code"] == 10014, answers


async def test_creates_answered_fast(cl):
    servers, nc, js, out = cl
    worst = {}
    for r in (3, 1, 3, 1):
        for storage in ("file", "memory"):
            name = f"F{r}{storage[0]}{len(worst)}"
            t0 = time.monotonic()
            await js.add_stream(name=name, subjects=[name], num_replicas=r, storage=storage)
            t1 = time.monotonic()
            await js.add_consumer(name, ConsumerConfig(durable_name="d", ack_policy="explicit"))
            t2 = time.monotonic()
            worst[name] = (t1 - t0, t2 - t1)
    # (each ~5-50 ms on an idle machine; a create used to wait for a 0.5 s poll, an election up to 2 s)
    slow = {n: t for n, t in worst.items() if max(t) > 0.4}
    assert len(slow) <= 1, worst
    assert sum(a + b for a, b in worst.values()) / len(worst) < 0.25, worst


# ---- direct gets on followers -------------------------------------------------------------------------------

def count_direct(servers, acc: str = "$G") -> list[list[str]]:
    """Wrap each server's direct get handler (where every direct get request arrives, ``on_direct_get``): per
    server, the stream names it served direct gets for."""
    served: list[list[str]] = []
    for s in servers:
        router = s.jetstream.accounts[acc].router
        got: list[str] = []
        served.append(got)

        def wrapped(stream, sub, subject, reply, hdr, msg, _orig=router.on_direct_get, _got=got):
            _got.append(stream.name)
            return _orig(stream, sub, subject, reply, hdr, msg)
        router.on_direct_get = wrapped
    return served


async def direct_get(nc, stream: str, seq: int) -> bytes:
    m = await nc.request(f"$JS.API.DIRECT.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=2)
    assert m.headers and m.headers.get("Nats-Sequence") == str(seq), m.headers
    return m.data


async def test_followers_answer_direct_gets_when_current(cl):
    servers, nc, js, out = cl
    await js.add_stream(name="D", subjects=["d.>"], num_replicas=3, allow_direct=True)
    for i in range(5):
        await js.publish(f"d.{i}", b"%d" % i)
    leader = stream_leader(servers, "D")
    followers = [r for r in reps(servers, "D") if r is not leader]
    # followers that were never leader subscribe once current
    await until(lambda: all(r._direct_subs for r in followers), timeout=3, what="followers answering")
    assert not leader._direct_subs  # (the leader answers through the stream's own subscriptions)
    served = count_direct(servers)
    ncs = [await nats.connect(s.client_url) for s in servers]
    try:
        for k in range(30):  # (one member of the queue group answers each, picked at random)
            assert await direct_get(ncs[k % 3], "D", 1 + k % 5) == b"%d" % (k % 5)
        assert sum(map(len, served)) == 30 and all(served), served
        # a follower catching up (applies held for a snapshot's messages) stops answering; the others answer
        f = followers[0]
        i = reps(servers, "D").index(f)
        f.log.hold()
        await until(lambda: not f._direct_subs, timeout=2, what="the lagging follower unsubscribed")
        await asyncio.sleep(0.05)  # (its unsubscribe reaches the other servers)
        before = len(served[i])
        await js.publish("d.5", b"5")
        for k in range(20):
            assert await direct_get(ncs[k % 3], "D", 6) == b"5"
        assert len(served[i]) == before
        f.log.release()
        await until(lambda: bool(f._direct_subs), timeout=2, what="the follower answering again")
        await asyncio.sleep(0.05)
        for k in range(30):
            assert await direct_get(ncs[k % 3], "D", 6) == b"5"
        assert len(served[i]) > before
        # allow_direct turned off: no replica answers (no responders)
        await js.update_stream(StreamConfig(name="D", subjects=["d.>"], num_replicas=3, allow_direct=False))
        await until(lambda: not any(r._direct_subs for r in reps(servers, "D")), timeout=3, what="followers off")
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("$JS.API.DIRECT.GET.D", b'{"seq": 1}', timeout=1)
    finally:
        for c in ncs:
            await c.close()


async def test_mirror_direct_followers_answer_for_origin(cl):
    servers, nc, js, out = cl
    await js.add_stream(name="ORIG", subjects=["orig.>"], num_replicas=1, allow_direct=True)
    for i in range(3):
        await js.publish(f"orig.{i}", b"%d" % i)
    await js.add_stream(StreamConfig(name="MIR", mirror=StreamSource(name="ORIG"), num_replicas=3,
                                     mirror_direct=True, allow_direct=True))
    await until(lambda: all(r is not None and r.stream.store.last_seq == 3 for r in reps(servers, "MIR")),
                what="mirrored on every replica")
    lead = stream_leader(servers, "MIR")
    await until(lambda: all(r._direct_subs for r in reps(servers, "MIR") if r is not lead), timeout=3,
                what="mirror followers answering")
    served = count_direct(servers)
    ncs = [await nats.connect(s.client_url) for s in servers]
    try:
        for k in range(30):  # the origin's gets: the origin or any mirror replica answers
            assert await direct_get(ncs[k % 3], "ORIG", 2) == b"1"
        follower_servers = [i for i, r in enumerate(reps(servers, "MIR")) if r is not lead]
        assert any("MIR" in served[i] for i in follower_servers), served
    finally:
        for c in ncs:
            await c.close()
