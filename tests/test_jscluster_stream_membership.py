"""Membership changes of replicated streams (rillet/jetstream/cluster/streams.py, reconcile) in an
in-process 3-server JetStream cluster: a stream scaled R1 -> R3 -> R1 through STREAM.UPDATE (the meta
leader changes the assignment's peers; the group's leader adds and removes members, the new members catch
up, the removed ones delete their replica), and a wiped replica (store and RAFT directory gone) that
catches up from the leader's snapshot."""
from __future__ import annotations

import asyncio
import json
import os
import time

from jscluster_support import cl  # noqa: F401 (the fixture)


async def until(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def reps(servers, name):
    return [s.jetstream.cluster.streams.replica("$G", name) for s in servers]


def held(servers, name):
    return [r for r in reps(servers, name) if r is not None]


async def test_scale_up_and_down(cl):
    servers, nc, js = cl
    await js.add_stream(name="G", subjects=["g.>"], num_replicas=1)
    for i in range(30):
        await js.publish(f"g.{i % 3}", b"%d" % i)
    assert len(held(servers, "G")) == 1
    await js.update_stream(name="G", subjects=["g.>"], num_replicas=3)
    await until(lambda: len(held(servers, "G")) == 3 and all(
        sorted(r.group.peers) == sorted(r.sa.group.peers) and len(r.group.peers) == 3 for r in held(servers, "G")),
        timeout=15, what="three members")
    await until(lambda: all(r.stream.store.state().msgs == 30 for r in held(servers, "G")), what="caught up")
    for i in range(30, 35):
        await js.publish("g.x", b"%d" % i)
    await until(lambda: all(r.stream.store.state().last_seq == 35 for r in held(servers, "G")), what="replicated")
    info = await js.stream_info("G")
    assert len(info.cluster.replicas) == 2
    # scale down: two replicas go (their store directories too), the rest keeps everything
    dirs = {r.cs.server.name: r.jsa.stream_dir("G") for r in held(servers, "G")}
    await js.update_stream(name="G", subjects=["g.>"], num_replicas=1)
    await until(lambda: len(held(servers, "G")) == 1 and len(held(servers, "G")[0].group.peers) == 1,
                timeout=15, what="one member")
    last = held(servers, "G")[0]
    await until(lambda: last.leader, what="the kept replica leads")
    assert last.stream.store.state().msgs == 35
    gone = [d for n, d in dirs.items() if n != last.cs.server.name]
    await until(lambda: not any(os.path.exists(d) for d in gone), what="removed replicas deleted")
    ack = await js.publish("g.y", b"after")
    assert ack.seq == 36


async def test_wiped_replica_catches_up_from_snapshot(cl):
    servers, nc, js = cl
    await js.add_stream(name="W", subjects=["w.>"], num_replicas=3)
    for i in range(50):
        await js.publish("w.a", b"%d" % i)
    r = await nc.request("$JS.API.STREAM.MSG.DELETE.W", json.dumps({"seq": 10}).encode(), timeout=3)
    assert json.loads(r.data)["success"]
    rs = reps(servers, "W")
    lead = next(x for x in rs if x.leader)
    fi = next(i for i, x in enumerate(rs) if x is not lead)
    cs = servers[fi].jetstream.cluster.streams
    sa = rs[fi].sa
    await until(lambda: rs[fi].group.applied == lead.group.applied, what="follower current")
    # the follower's replica goes with its store and RAFT directory; the leader compacts its log
    await cs._remove(("$G", "W"), delete=True)
    assert not os.path.exists(rs[fi].group.dir)
    for i in range(50, 60):
        await js.publish("w.b", b"%d" % i)
    lead.group.compact()
    cs.stream_assigned(sa)  # back (a restarted server with its store wiped)
    nrep = cs.replica("$G", "W")
    await until(lambda: nrep.stream.store.state().last_seq == 60, timeout=10, what="caught up")
    st = nrep.stream.store.state()
    assert st.msgs == 59 and 10 in st.deleted
    assert nrep.catchups >= 1
    assert nrep.stream.store.load_msg(60).data == b"59"
