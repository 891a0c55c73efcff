"""Scaling and moving streams through the meta group (rillet/jetstream/cluster/meta.py), as nats-server
2.15: STREAM.UPDATE with another ``num_replicas`` or ``placement`` is answered with the new config, the
group carries a ``desired`` state meanwhile, the meta leader adds the new peers one at a time, waits until
they are current and drops the old ones, and the stream keeps its messages and takes publishes throughout.
Errors and JSON as a live nats-server 2.15.1 cluster gave them (10123, 10058, 10005)."""
from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

from rillet.config.options import User
from rillet.app.embed import run_cluster

USERS = [User(username="sys", password="sys", account="SYS"), User(username="a", password="a")]


async def _until(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _url(srv, user: str) -> str:
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


async def _api(nc, subject: str, body=None, timeout: float = 5.0) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    return json.loads((await nc.request(subject, data, timeout=timeout)).data)


def _sa(srv, name: str):
    return srv.jetstream.cluster.state.stream("$G", name)


def _settled(servers, name: str, n: int) -> bool:
    """Every server's assignment has ``n`` peers and no desired state, and exactly those servers hold a
    replica."""
    for s in servers:
        sa = _sa(s, name)
        if sa is None or sa.group.desired is not None or len(sa.group.peers) != n:
            return False
    peers = set(_sa(servers[0], name).group.peers)
    for s in servers:
        has = s.jetstream.cluster.streams.replica("$G", name) is not None
        if has != (s.jetstream.cluster.peer in peers):
            return False
    return True


def _messages(servers, name: str) -> list[int]:
    out = []
    for s in servers:
        rep = s.jetstream.cluster.streams.replica("$G", name)
        if rep is not None:
            out.append(rep.stream.store.state().msgs)
    return out


@pytest.fixture
async def cluster():
    async with run_cluster(3, jetstream=True, system_account="SYS", users=USERS) as servers:
        yield servers


async def test_scale_r1_r3_r1_keeps_messages(cluster):
    nc = await nats.connect(_url(cluster[1], "a"))
    try:
        cfg = {"name": "SC", "subjects": ["sc.>"], "num_replicas": 1}
        r = await _api(nc, "$JS.API.STREAM.CREATE.SC", cfg)
        assert r["config"]["num_replicas"] == 1, r
        for i in range(5):
            await _api(nc, "sc.a", {"i": i})
        r = await _api(nc, "$JS.API.STREAM.UPDATE.SC", dict(cfg, num_replicas=3))
        assert r["type"] == "io.nats.jetstream.api.v1.stream_update_response" and "error" not in r, r
        assert r["config"]["num_replicas"] == 3 and r["state"]["messages"] == 5
        # nats-server 2.15's cluster.desired while the group is being reconfigured
        d = r["cluster"]["desired"]
        # (``status``: the step it is at, ADR-62; nats-server adds it once its stream leader has looked)
        assert set(d) - {"status"} == {"created", "name", "replicas", "origin"} and d["origin"] == {"replicas": 1}, d
        assert d["name"] == "rillet" and len(d["replicas"]) == 3 and set(d["replicas"][0]) == {"name", "peer"}
        # every server applies the update (the followers right after the meta leader)
        await _until(lambda: all(_sa(s, "SC").config["num_replicas"] == 3 for s in cluster), what="update applied")
        await _until(lambda: _settled(cluster, "SC", 3), what="R3 settled")
        await _api(nc, "sc.b", {"after": "scale up"})
        await _until(lambda: _messages(cluster, "SC") == [6, 6, 6], what="6 messages on three replicas")
        info = await _api(nc, "$JS.API.STREAM.INFO.SC")
        assert len(info["cluster"]["replicas"]) == 2 and "desired" not in info["cluster"]
        r = await _api(nc, "$JS.API.STREAM.UPDATE.SC", dict(cfg, num_replicas=1))
        assert "error" not in r and r["config"]["num_replicas"] == 1, r
        await _until(lambda: _settled(cluster, "SC", 1), what="R1 settled")
        await _api(nc, "sc.c", {"after": "scale down"})
        await _until(lambda: _messages(cluster, "SC") == [7], what="7 messages on one replica")
    finally:
        await nc.close()


async def test_move_by_placement_tags_and_update_errors(cluster):
    for i, s in enumerate(cluster):  # tags as the servers' statsz announce them (server_tags)
        s.opts.tags = [f"n{i}"]
        s.jetstream.cluster._send_statsz()
    await _until(lambda: all(ni.tags for s in cluster for ni in s.jetstream.cluster.registry.nodes.values()),
                 what="tags known everywhere")
    nc = await nats.connect(_url(cluster[0], "a"))
    try:
        cfg = {"name": "MV", "subjects": ["mv"], "num_replicas": 1, "placement": {"tags": ["n0"]}}
        r = await _api(nc, "$JS.API.STREAM.CREATE.MV", cfg)
        assert r["cluster"]["leader"] == cluster[0].name, r
        for i in range(3):
            await _api(nc, "mv", {"i": i})
        # nats-server's errors: a move and a scale in one update; a placement nobody matches
        r = await _api(nc, "$JS.API.STREAM.UPDATE.MV", dict(cfg, num_replicas=2, placement={"tags": ["n1"]}))
        assert r["error"] == {"code": 400, "err_code": 10123,
                              "description": "can not move and scale a stream in a single update"}
        r = await _api(nc, "$JS.API.STREAM.UPDATE.MV", dict(cfg, placement={"tags": ["nowhere"]}))
        assert r["error"] == {"code": 400, "err_code": 10005, "description":
                              "no suitable peers for placement, tags not matched ['nowhere']"}
        r = await _api(nc, "$JS.API.STREAM.UPDATE.MV", dict(cfg, placement={"tags": ["n2"]}))
        assert "error" not in r and r["config"]["placement"] == {"tags": ["n2"]}, r
        await _until(lambda: _settled(cluster, "MV", 1) and _sa(cluster[0], "MV").group.peers ==
                     [cluster[2].jetstream.cluster.peer], what="moved to the third server")
        await _until(lambda: _messages(cluster, "MV") == [3], what="3 messages moved")
        info = await _api(nc, "$JS.API.STREAM.INFO.MV")
        assert info["cluster"]["leader"] == cluster[2].name and info["state"]["messages"] == 3
    finally:
        await nc.close()


async def test_second_create_with_another_config_while_in_flight(cluster):
    nc = await nats.connect(_url(cluster[2], "a"))
    try:
        a, b = nc.new_inbox(), nc.new_inbox()
        sa, sb = await nc.subscribe(a), await nc.subscribe(b)
        await nc.publish("$JS.API.STREAM.CREATE.IF", json.dumps({"name": "IF", "subjects": ["if.a"]}).encode(),
                         reply=a)
        await nc.publish("$JS.API.STREAM.CREATE.IF", json.dumps({"name": "IF", "subjects": ["if.b"]}).encode(),
                         reply=b)
        ra, rb = json.loads((await sa.next_msg(5)).data), json.loads((await sb.next_msg(5)).data)
        assert ra.get("did_create") is True and ra["config"]["subjects"] == ["if.a"], ra
        assert rb["error"] == {"code": 400, "err_code": 10058,
                               "description": "stream name already in use with a different configuration"}, rb
    finally:
        await nc.close()


async def test_scale_r1_r3_r5_r3_on_five_servers():
    async with run_cluster(5, jetstream=True, system_account="SYS", users=USERS) as servers:
        nc = await nats.connect(_url(servers[3], "a"))
        try:
            cfg = {"name": "F", "subjects": ["f"], "num_replicas": 1}
            await _api(nc, "$JS.API.STREAM.CREATE.F", cfg)
            await _api(nc, "f", {"n": 1})
            for n, msgs in ((3, 2), (5, 3), (3, 4)):
                r = await _api(nc, "$JS.API.STREAM.UPDATE.F", dict(cfg, num_replicas=n))
                assert "error" not in r and r["config"]["num_replicas"] == n, r
                await _until(lambda: _settled(servers, "F", n), timeout=15, what=f"R{n} settled")
                await _api(nc, "f", {"n": msgs})
                await _until(lambda: _messages(servers, "F") == [msgs] * n, what=f"{msgs} messages x{n}")
            # beyond R5: nats-server's config error
            r = await _api(nc, "$JS.API.STREAM.UPDATE.F", dict(cfg, num_replicas=6))
            assert r["error"] == {"code": 500, "err_code": 10052, "description": "maximum replicas is 5"}, r
        finally:
            await nc.close()


async def test_consumers_follow_their_stream_when_it_scales_and_moves(cluster):
    for i, s in enumerate(cluster):
        s.opts.tags = [f"n{i}"]
        s.jetstream.cluster._send_statsz()
    await _until(lambda: all(ni.tags for s in cluster for ni in s.jetstream.cluster.registry.nodes.values()),
                 what="tags known everywhere")
    nc = await nats.connect(_url(cluster[0], "a"))
    try:
        cfg = {"name": "CF", "subjects": ["cf"], "num_replicas": 1, "placement": {"tags": ["n1"]}}
        await _api(nc, "$JS.API.STREAM.CREATE.CF", cfg)
        r = await _api(nc, "$JS.API.CONSUMER.CREATE.CF.D", {"stream_name": "CF", "config": {
            "durable_name": "D", "ack_policy": "explicit"}})
        assert r.get("name") == "D", r
        for i in range(4):
            await _api(nc, "cf", {"i": i})
        # pull two and ack them: the consumer's state must survive the moves
        psub = await nc.jetstream().pull_subscribe_bind("D", stream="CF")
        for m in await psub.fetch(2, timeout=5):
            await m.ack_sync()

        def cpeers():
            return _sa(cluster[0], "CF").consumers["D"].group.peers
        assert cpeers() == [cluster[1].jetstream.cluster.peer]
        r = await _api(nc, "$JS.API.STREAM.UPDATE.CF", dict(cfg, num_replicas=3, placement=None))
        assert "error" not in r, r
        await _until(lambda: _settled(cluster, "CF", 3) and len(cpeers()) == 3, timeout=15,
                     what="stream and consumer at R3")
        # a move back onto one server: the consumer moves with it
        r = await _api(nc, "$JS.API.STREAM.UPDATE.CF", dict(cfg, num_replicas=3, placement={"tags": ["n2"]}))
        assert r["error"]["err_code"] == 10005, r  # (three replicas cannot all carry n2)
        r = await _api(nc, "$JS.API.STREAM.UPDATE.CF", dict(cfg, num_replicas=1, placement=None))
        assert "error" not in r, r
        await _until(lambda: _settled(cluster, "CF", 1) and len(cpeers()) == 1, timeout=15,
                     what="stream and consumer at R1")
        assert cpeers() == _sa(cluster[0], "CF").group.peers
        info = await _api(nc, "$JS.API.CONSUMER.INFO.CF.D")
        assert info["ack_floor"]["stream_seq"] == 2 and info["num_pending"] == 2, info
    finally:
        await nc.close()
