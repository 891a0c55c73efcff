"""R1 -> R3 scale-up of streams in a cluster of 2 Go servers and 1 Rillet server (``rillet_go_meta_lead``),
under a Go meta leader and under a Rillet one.

One-replica streams are placed where each meta leader puts them (on a Go server or on the Rillet server), each
with 10 acknowledged messages and a durable consumer that was delivered all of them and acknowledged 4; then
every stream is scaled to R3 (``STREAM.UPDATE``). Each must end with three current replicas and no change
pending, every acknowledged message on every replica (each replica made leader in turn and asked for every
message), and its consumer's delivered and ack floor as before, then deliver a message published after.
"""
from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time

import pytest

from helpers import free_port, serve_config
from rillet.jetstream.cluster.golead import LEADER
from rillet.raft import gowire as gw
from test_jscluster_gometa import CAP, _member, _until
from test_jscluster_gometa_lead import _all_see, _lead_conf

pytestmark = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")

SERVERS = ("g0", "g1", "r1")


async def _req(nc, subject: str, body, timeout: float = 10) -> dict:
    import nats
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        return json.loads((await nc.request(subject, data, timeout=timeout)).data)
    except nats.errors.TimeoutError:
        return {"error": {"err_code": -1, "description": "no answer"}}


async def _info(nc, name: str) -> dict:
    r = await _req(nc, f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)
    return {} if "error" in r else r


async def _one_replica_streams(nc, m, prefix: str) -> dict[str, str]:
    """An R1 stream placed on a Go server and one on the Rillet server (by their tags): name -> where."""
    where: dict[str, str] = {}
    names = {gw.peer_id(n): n for n in SERVERS}
    for kind in ("go", "rillet"):
        name = f"{prefix}{kind[0].upper()}"
        cfg = {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "file", "num_replicas": 1,
               "placement": {"tags": [kind]}}

        async def created():
            r = await _req(nc, f"$JS.API.STREAM.CREATE.{name}", cfg, timeout=30)
            return "error" not in r or r["error"].get("err_code") == 10058  # (an earlier try made it)
        await CAP._until(created, 90, what=f"{name} created")
        await _until(lambda: ("A", name) in m.state.streams, 30, what=f"{name} known to r1")
        where[name] = names[m.state.streams[("A", name)]["group"]["peers"][0]]
        assert where[name][0] == kind[0], where
    return where


class _TaggedGo(CAP.GoCluster):
    def conf(self, name: str):
        path = super().conf(name)
        path.write_text(path.read_text().replace("jetstream {", 'server_tags: ["go"]\njetstream {', 1))
        return path


async def _fill(nc, name: str) -> None:
    for i in range(1, 11):
        async def published():
            r = await _req(nc, f"{name.lower()}.x", f"m{i}".encode(), timeout=10)
            return r.get("seq") == i or None
        await CAP._until(published, 60, what=f"{name} message {i} acknowledged")
    ccfg = {"stream_name": name, "config": {"durable_name": "C", "ack_policy": "explicit",
                                            "ack_wait": 120_000_000_000}}

    async def consumer_made():
        r = await _req(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.{name}.C", ccfg, timeout=30)
        return "error" not in r or r["error"].get("err_code") == 10148
    await CAP._until(consumer_made, 60, what=f"{name}'s consumer created")
    got = await _fetch(nc, name, 10)
    assert [g.data for g in got] == [f"m{i}".encode() for i in range(1, 11)]
    for g in got[:4]:
        await g.ack_sync()


async def _fetch(nc, name: str, n: int) -> list:
    import nats
    psub = await nc.jetstream().pull_subscribe_bind("C", name)
    got: list = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        try:
            got += await psub.fetch(n - len(got), timeout=5)
        except nats.errors.TimeoutError:
            pass
    await psub.unsubscribe()
    return got


def _seqs(ci: dict) -> tuple:
    return tuple((ci[k]["consumer_seq"], ci[k]["stream_seq"]) for k in ("delivered", "ack_floor"))


async def _scaled_and_kept(nc, m, name: str, before: dict) -> None:
    async def scaled():
        cfg = (await _info(nc, name)).get("config")
        if not cfg:
            return False
        if cfg.get("num_replicas") == 3:
            return True
        cfg = {k: v for k, v in cfg.items() if k != "placement"}  # (not a move: nats-server's isMoveRequest)
        r = await _req(nc, f"$JS.API.STREAM.UPDATE.{name}", dict(cfg, num_replicas=3), timeout=30)
        return "error" not in r
    await CAP._until(scaled, 90, what=f"{name} scaled to R3")

    async def grown():
        si = await _info(nc, name)
        cl = si.get("cluster") or {}
        reps = cl.get("replicas") or []
        return si if (cl.get("leader") and len(reps) == 2 and all(r.get("current") for r in reps)
                      and si.get("state", {}).get("messages") == 10) else None
    await CAP._until(grown, 120, what=f"{name} with 3 current replicas")
    key = ("A", name)
    try:
        await _until(lambda: not m.state.streams[key]["group"].get("desired") and
                     len(m.state.streams[key]["group"]["peers"]) == 3, 90, what="the scale-up finished")
    except AssertionError:
        raise AssertionError(f"{name}'s scale-up did not finish: {m.state.streams[key]['group']}, "
                             f"{m.state.consumers.get(key)}")
    await _until(lambda: key in m.replicas and m.replicas[key].store.state().msgs == 10, 60,
                 what=f"r1's replica of {name} holding the 10 messages")
    for server in SERVERS:  # every replica, made leader in turn, serves every message
        async def led_by():
            if ((await _info(nc, name)).get("cluster") or {}).get("leader") == server:
                return True
            await _req(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", {"placement": {"preferred": server}})
            return ((await _info(nc, name)).get("cluster") or {}).get("leader") == server
        await CAP._until(led_by, 90, what=f"{name} led by {server}")
        for seq in range(1, 11):
            r = await _req(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
            assert "error" not in r and base64.b64decode(r["message"]["data"]) == f"m{seq}".encode(), \
                (name, server, seq, r)

    async def consumer_current():
        ci = await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.C", b"")
        cl = ci.get("cluster") or {}
        return ci if "error" not in ci and len(cl.get("replicas") or []) == 2 else None
    ci = await CAP._until(consumer_current, 90, what=f"{name}'s consumer on 3 replicas")
    assert _seqs(ci) == _seqs(before) and ci["num_ack_pending"] == 6, (name, before, ci)
    r = await _req(nc, f"{name.lower()}.x", b"after", timeout=30)
    assert r.get("seq") == 11, r
    got = await _fetch(nc, name, 1)
    assert [(g.data, g.metadata.sequence.stream) for g in got] == [(b"after", 11)], got


async def _drill(nc, m, prefix: str) -> None:
    where = await _one_replica_streams(nc, m, prefix)
    before = {}
    for name in where:
        await _fill(nc, name)
        before[name] = await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.C", b"")
        assert _seqs(before[name]) == ((10, 10), (4, 4)), before[name]
    for name, server in where.items():
        print(f"scaling {name} (R1 on {server}) to R3")
        await _scaled_and_kept(nc, m, name, before[name])


async def test_r1_streams_scaled_to_r3_keep_messages_and_consumers_under_either_meta_leader(tmp_path):
    import nats
    port = free_port()
    gc = _TaggedGo(tmp_path, names=("g0", "g1"), extra_routes=[port])
    gc.start_all()
    cm = serve_config(_lead_conf(gc, "r1", port).replace("jetstream {", 'server_tags: ["rillet"]\njetstream {', 1))
    srv = await cm.__aenter__()
    conns = []
    try:
        m = await _member(srv)
        nc = await nats.connect(gc.url("g0"))
        sysnc = await nats.connect(gc.url("g0", "sys"))
        conns += [nc, sysnc]
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="the meta group of 2 Go + 1 Rillet")
        await _until(lambda: m.raft.commit > 0 and m.peer in m.raft.peers and m.raft.catchup is None, 60,
                     what="r1 a caught-up member")

        async def leads(name: str):
            if await _all_see(gc, ["g0", "g1"], name):
                return await CAP._js_ready(nc)
            await _req(sysnc, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": name}})
            await asyncio.sleep(2)
            return False
        await CAP._until(lambda: leads("g0"), 90, what="g0 meta leader")
        await _drill(nc, m, "GM")
        await CAP._until(lambda: leads("r1"), 90, what="r1 meta leader")
        assert m.raft.role == LEADER
        await _drill(nc, m, "RM")
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        (tmp_path / "r1.log").write_text(srv._test_log.getvalue())
        await cm.__aexit__(None, None, None)
        gc.stop_all()
