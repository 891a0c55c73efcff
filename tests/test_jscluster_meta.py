"""The JetStream meta group in a 3-server in-process Rillet cluster (rillet/jetstream/cluster/meta.py):
leader election, the meta-level $JS.API answered exactly once by the meta leader with nats-server's JSON
(the values were taken from a live 3-server nats-server 2.15 cluster), placement errors, 503 10008 without
a quorum, META.LEADER.STEPDOWN and SERVER.REMOVE from the system account, and the assignments on every
server."""
from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

from rillet.config.options import User
from rillet.jetstream.cluster import meta as META
from rillet.jetstream.api import cluster as META_API
from rillet.app.embed import run_cluster, wait_meta_leader

T = "io.nats.jetstream.api.v1."
USERS = [User(username="sys", password="sys", account="SYS"), User(username="a", password="a")]


async def _until(cond, timeout: float = 8.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _url(srv, user: str) -> str:
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


async def _answers(nc, subject: str, body: bytes = b"", wait: float = 0.15, first: float = 6.0) -> list[dict]:
    """Every answer to one request: waits for the first, then ``wait`` seconds more for duplicates."""
    inbox = nc.new_inbox()
    got: list[dict] = []
    sub = await nc.subscribe(inbox, cb=None)
    await nc.publish(subject, body, reply=inbox)
    try:
        msg = await sub.next_msg(timeout=first)
        got.append(json.loads(msg.data))
        while True:
            msg = await sub.next_msg(timeout=wait)
            got.append(json.loads(msg.data))
    except nats.errors.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


async def _one(nc, subject: str, body: bytes = b"") -> dict:
    got = await _answers(nc, subject, body)
    assert len(got) == 1, got
    return got[0]


def _cl(srv):
    return srv.jetstream.cluster


@pytest.fixture
async def cluster():
    async with run_cluster(3, jetstream=True, system_account="SYS", users=USERS) as servers:
        yield servers


async def test_meta_leader_elected_and_known_everywhere(cluster):
    leader = await wait_meta_leader(cluster)
    cls = [_cl(s) for s in cluster]
    assert sum(c.is_leader() for c in cls) == 1
    peers = sorted(c.peer for c in cls)
    assert all(sorted(c.group.peers) == peers for c in cls)
    # /jsz meta_cluster as nats-server: the cluster name, leader name and peer, the other two as replicas
    for s in cluster:
        m = s.jetstream.jsz({})["meta_cluster"]
        assert m["name"] == "rillet" and m["leader"] == leader.name and m["peer"] == _cl(leader).peer
        assert m["cluster_size"] == 3 and m["quorum_needed"] == 2
        assert sorted(r["name"] for r in m["replicas"]) == sorted(x.name for x in cluster if x is not s)
        assert list(m)[-5:] == ["cluster_size", "quorum_needed", "pending", "pending_requests", "pending_infos"] \
            or "snapshot" in m


async def test_stream_create_answered_once_on_any_server(cluster):
    await wait_meta_leader(cluster)
    for i, s in enumerate(cluster):
        nc = await nats.connect(_url(s, "a"))
        cfg = {"name": f"S{i}", "subjects": [f"s{i}.>"], "num_replicas": 3 if i != 1 else 1}
        r = await _one(nc, f"$JS.API.STREAM.CREATE.S{i}", json.dumps(cfg).encode())
        assert r["type"] == T + "stream_create_response" and r["did_create"] is True, r
        assert r["config"]["name"] == f"S{i}" and r["config"]["num_replicas"] == cfg["num_replicas"]
        assert r["state"]["messages"] == 0 and r["state"]["first_ts"] == "0001-01-01T00:00:00Z"
        cl = r["cluster"]
        assert cl["name"] == "rillet" and cl["leader"] in [x.name for x in cluster]
        if cfg["num_replicas"] == 3:
            assert cl["raft_group"].startswith("S-R3F-") and len(cl["replicas"]) == 2
        # the same create again: the stream's info, without did_create
        again = await _one(nc, f"$JS.API.STREAM.CREATE.S{i}", json.dumps(cfg).encode())
        assert "did_create" not in again and again["created"] == r["created"]
        # another config under that name: nats-server's 10058
        cfg2 = dict(cfg, subjects=[f"other{i}.>"])
        e = await _one(nc, f"$JS.API.STREAM.CREATE.S{i}", json.dumps(cfg2).encode())
        assert e == {"type": T + "stream_create_response", "error": {
            "code": 400, "err_code": 10058, "description": "stream name already in use with a different configuration"}}
        await nc.close()
    # every server holds the three assignments, with the same groups
    await _until(lambda: all(_cl(s).state.counts() == (3, 0) for s in cluster), what="assignments everywhere")
    snaps = {_cl(s).state.snapshot() for s in cluster}
    assert len(snaps) == 1
    nc = await nats.connect(_url(cluster[2], "a"))
    names = await _one(nc, "$JS.API.STREAM.NAMES")
    assert names == {"type": T + "stream_names_response", "total": 3, "offset": 0, "limit": 1024,
                     "streams": ["S0", "S1", "S2"]}
    filt = await _one(nc, "$JS.API.STREAM.NAMES", json.dumps({"subject": "s1.x"}).encode())
    assert filt["streams"] == ["S1"] and filt["total"] == 1
    lst = await _one(nc, "$JS.API.STREAM.LIST")
    assert lst["total"] == 3 and [x["config"]["name"] for x in lst["streams"]] == ["S0", "S1", "S2"]
    info = await _one(nc, "$JS.API.INFO")
    assert info["type"] == T + "account_info_response" and info["streams"] == 3 and info["consumers"] == 0
    # overlapping subjects, as nats-server
    e = await _one(nc, "$JS.API.STREAM.CREATE.S9", json.dumps({"name": "S9", "subjects": ["s0.x"]}).encode())
    assert e["error"] == {"code": 400, "err_code": 10065, "description": "subjects overlap with an existing stream"}
    # delete: answered once by the meta leader, gone everywhere; a second delete is not found
    d = await _one(nc, "$JS.API.STREAM.DELETE.S1")
    assert d == {"type": T + "stream_delete_response", "success": True}
    await _until(lambda: all(_cl(s).state.counts() == (2, 0) for s in cluster), what="removed everywhere")
    d = await _one(nc, "$JS.API.STREAM.DELETE.S1")
    assert d == {"type": T + "stream_delete_response",
                 "error": {"code": 404, "err_code": 10059, "description": "stream not found"}}
    # a stream nobody has: STREAM.INFO is "not found" from the meta leader only
    e = await _one(nc, "$JS.API.STREAM.INFO.NOPE")
    assert e["error"]["err_code"] == 10059
    await nc.close()


async def test_placement_errors_and_peer_remove_errors(cluster):
    await wait_meta_leader(cluster)
    nc = await nats.connect(_url(cluster[0], "a"))
    e = await _one(nc, "$JS.API.STREAM.CREATE.T5",
                   json.dumps({"name": "T5", "subjects": ["t5"], "num_replicas": 5}).encode())
    assert e == {"type": T + "stream_create_response",
                 "error": {"code": 400, "err_code": 10005, "description": "no suitable peers for placement"}}
    e = await _one(nc, "$JS.API.STREAM.CREATE.TT", json.dumps(
        {"name": "TT", "subjects": ["tt"], "num_replicas": 3, "placement": {"tags": ["ssd"]}}).encode())
    assert e["error"] == {"code": 400, "err_code": 10005,
                          "description": "no suitable peers for placement, tags not matched ['ssd']"}
    e = await _one(nc, "$JS.API.STREAM.PEER.REMOVE.ZZ", json.dumps({"peer": "nope"}).encode())
    assert e == {"type": T + "stream_remove_peer_response",
                 "error": {"code": 404, "err_code": 10059, "description": "stream not found"}}
    r = await _one(nc, "$JS.API.STREAM.CREATE.T3", json.dumps({"name": "T3", "num_replicas": 3}).encode())
    assert r["did_create"]
    e = await _one(nc, "$JS.API.STREAM.PEER.REMOVE.T3", json.dumps({"peer": "nope"}).encode())
    assert e == {"type": T + "stream_remove_peer_response",
                 "error": {"code": 400, "err_code": 10040, "description": "peer not a member"}}
    sys = await nats.connect(_url(cluster[1], "sys"))
    e = await _one(sys, "$JS.API.SERVER.REMOVE", json.dumps({"peer": "nope"}).encode())
    assert e == {"type": T + "meta_server_remove_response",
                 "error": {"code": 400, "err_code": 10044, "description": "server is not a member of the cluster"}}
    await sys.close()
    await nc.close()


async def test_meta_leader_stepdown_from_system_account_only(cluster):
    old = await wait_meta_leader(cluster)
    nc = await nats.connect(_url(cluster[0], "a"))
    # from an ordinary account: nobody answers (nats-server only warns)
    assert await _answers(nc, "$JS.API.META.LEADER.STEPDOWN", first=0.5) == []
    assert _cl(old).is_leader()
    sys = await nats.connect(_url(cluster[0], "sys"))
    r = await _one(sys, "$JS.API.META.LEADER.STEPDOWN")
    assert r == {"type": T + "meta_leader_stepdown_response", "success": True}
    new = await wait_meta_leader(cluster)
    assert new is not old
    # the new leader answers; the assignments go on
    c = await _one(nc, "$JS.API.STREAM.CREATE.AFTER", json.dumps({"name": "AFTER", "num_replicas": 3}).encode())
    assert c["did_create"]
    await sys.close()
    await nc.close()


async def test_no_quorum_gives_cluster_not_available(cluster, monkeypatch):
    await wait_meta_leader(cluster)
    monkeypatch.setattr(META, "LEADERLESS_AFTER", 0.5)
    nc = await nats.connect(_url(cluster[0], "a"))
    r = await _one(nc, "$JS.API.STREAM.CREATE.Q", json.dumps({"name": "Q", "num_replicas": 3}).encode())
    assert r["did_create"]
    await nc.close()
    await cluster[1].shutdown()
    await cluster[2].shutdown()
    c0 = _cl(cluster[0])
    await _until(lambda: c0.group.leader is None, timeout=10, what="no meta leader on the survivor")
    await _until(c0.leaderless, timeout=5, what="leaderless")
    nc = await nats.connect(_url(cluster[0], "a"))
    na = {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}
    assert await _one(nc, "$JS.API.STREAM.CREATE.Q2", json.dumps({"name": "Q2"}).encode()) == {
        "type": T + "stream_create_response", "error": na}
    assert await _one(nc, "$JS.API.STREAM.NAMES") == {
        "type": T + "stream_names_response", "error": na, "total": 0, "offset": 0, "limit": 0, "streams": None}
    assert await _one(nc, "$JS.API.INFO") == {"type": T + "account_info_response", "error": na}
    assert await _one(nc, "$JS.API.STREAM.DELETE.Q") == {"type": T + "stream_delete_response", "error": na}
    await nc.close()


def _http(srv, path: str) -> tuple[int, object]:
    import urllib.error
    import urllib.request
    url = f"http://127.0.0.1:{srv.http_addr[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            body = r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        body, code = e.read(), e.code
    try:
        return code, json.loads(body)
    except ValueError:
        return code, body.decode()


async def test_monitoring_healthz_raftz_jsz_over_http():
    async with run_cluster(3, jetstream=True, http_port=-1) as servers:
        leader = await wait_meta_leader(servers)
        nc = await nats.connect(servers[0].client_url)
        r = await _one(nc, "$JS.API.STREAM.CREATE.M", json.dumps({"name": "M", "num_replicas": 3}).encode())
        assert r["did_create"]
        await nc.close()
        for s in servers:
            code, body = await asyncio.to_thread(_http, s, "/healthz")
            assert (code, body) == (200, {"status": "ok"}), body
            code, body = await asyncio.to_thread(_http, s, "/healthz?js-meta-only=true")
            assert code == 200
            code, rz = await asyncio.to_thread(_http, s, "/raftz")
            assert code == 200 and list(rz) == ["$SYS"], rz
            groups = next(iter(rz.values()))
            meta = groups["_meta_"]
            assert meta["state"] == ("LEADER" if s is leader else "FOLLOWER") and meta["size"] == 3
            assert meta["leader"] == _cl(leader).peer and meta["quorum_needed"] == 2
            assert list(groups) == ["_meta_"]  # (as nats-server: a stream's group under the stream's account)
            code, rz = await asyncio.to_thread(_http, s, "/raftz?acc=%24G")
            assert code == 200 and list(rz) == ["$G"] and any(g.startswith("S-R3F-") for g in rz["$G"]), rz
            assert rz["$G"][next(iter(rz["$G"]))]["traffic_account"] == "$SYS"
            code, jz = await asyncio.to_thread(_http, s, "/jsz")
            assert jz["meta_cluster"]["leader"] == leader.name
        # an unknown stream in the health filter: nats-server's 404
        code, body = await asyncio.to_thread(_http, servers[1], "/healthz?account=%24G&stream=NOPE")
        assert code == 404 and body["error"] == 'JetStream stream "NOPE" not found on account "$G"', body


async def test_server_joining_later_is_added_and_can_be_removed(cluster):
    import io
    import os
    from dataclasses import replace

    from rillet.config.options import ClusterOptions, JetStreamOptions, Options
    from rillet.server.logging import Logger
    from rillet.app.compose import build_server
    leader = await wait_meta_leader(cluster)
    nc = await nats.connect(_url(cluster[0], "a"))
    assert (await _one(nc, "$JS.API.STREAM.CREATE.OLD", json.dumps({"name": "OLD"}).encode()))["did_create"]
    o0 = cluster[0].opts
    store = os.path.join(os.path.dirname(os.path.dirname(cluster[0].jetstream.store_dir)), "late")
    opts = Options(host="127.0.0.1", port=-1, server_name="late", system_account="SYS", users=USERS)
    opts.jetstream = JetStreamOptions(enabled=True, store_dir=store)
    opts.cluster = replace(ClusterOptions(), name="rillet", host="127.0.0.1", port=-1, routes=list(o0.cluster.routes))
    late = build_server(opts, Logger(out=io.StringIO()))
    await late.start()
    try:
        lc = _cl(late)
        await _until(lambda: lc.group is not None and lc.peer in _cl(leader).group.peers, timeout=10,
                     what="the late server added to the meta group")
        await _until(lambda: lc.state.stream("$G", "OLD") is not None, what="the late server has the log")
        assert sorted(lc.group.peers) == sorted(_cl(leader).group.peers) and len(lc.group.peers) == 4
        sys = await nats.connect(_url(cluster[0], "sys"))
        r = await _one(sys, "$JS.API.SERVER.REMOVE", json.dumps({"peer": "late"}).encode())
        assert r == {"type": T + "meta_server_remove_response", "success": True}
        await _until(lambda: len(_cl(leader).group.peers) == 3 and lc.peer in _cl(leader).state.removed,
                     what="removed")
        await sys.close()
    finally:
        await nc.close()
        await late.shutdown()


async def test_stream_update_and_consumer_crud_through_the_meta_leader(cluster):
    await wait_meta_leader(cluster)
    nc = await nats.connect(_url(cluster[1], "a"))
    cfg = {"name": "U", "subjects": ["u.a"], "num_replicas": 3}
    assert (await _one(nc, "$JS.API.STREAM.CREATE.U", json.dumps(cfg).encode()))["did_create"]
    up = await _one(nc, "$JS.API.STREAM.UPDATE.U", json.dumps(dict(cfg, subjects=["u.a", "u.b"])).encode())
    assert up["type"] == T + "stream_update_response" and "did_create" not in up, up
    await _until(lambda: all(_cl(s).state.stream("$G", "U").config["subjects"] == ["u.a", "u.b"] for s in cluster),
                 what="update applied everywhere")
    e = await _one(nc, "$JS.API.STREAM.UPDATE.NOPE", json.dumps({"name": "NOPE"}).encode())
    assert e["type"] == T + "stream_update_response" and e["error"]["err_code"] == 10059
    c = await _one(nc, "$JS.API.CONSUMER.DURABLE.CREATE.U.D1",
                   json.dumps({"stream_name": "U", "config": {"durable_name": "D1", "ack_policy": "explicit"}}).encode())
    assert c["type"] == T + "consumer_create_response" and c["name"] == "D1" and c["stream_name"] == "U", c
    await _until(lambda: all(_cl(s).state.consumer("$G", "U", "D1") is not None for s in cluster),
                 what="consumer assignment everywhere")
    names = await _one(nc, "$JS.API.CONSUMER.NAMES.U")
    assert names == {"type": T + "consumer_names_response", "total": 1, "offset": 0, "limit": 1024,
                     "consumers": ["D1"]}
    lst = await _one(nc, "$JS.API.CONSUMER.LIST.U")
    assert lst["total"] == 1 and [x["name"] for x in lst["consumers"]] == ["D1"], lst
    e = await _one(nc, "$JS.API.CONSUMER.NAMES.NOPE")
    assert e["error"]["err_code"] == 10059
    d = await _one(nc, "$JS.API.CONSUMER.DELETE.U.D1")
    assert d == {"type": T + "consumer_delete_response", "success": True}
    await _until(lambda: all(_cl(s).state.consumer("$G", "U", "D1") is None for s in cluster), what="gone")
    e = await _one(nc, "$JS.API.CONSUMER.DELETE.U.D1")
    assert e["error"] == {"code": 404, "err_code": 10014, "description": "consumer not found"}
    await nc.close()


async def test_info_of_a_stream_whose_replicas_are_all_offline(cluster):
    """STREAM.INFO / CONSUMER.INFO of an R1 stream whose server stopped: the meta leader answers "stream is
    offline" (10118) / "consumer is offline" (10119) after its short delay, as nats-server, not a timeout."""
    leader = await wait_meta_leader(cluster)
    nc = await nats.connect(_url(leader, "a"))
    try:
        js = nc.jetstream()
        name = None
        for i in range(12):  # an R1 stream placed on a server that is not the meta leader
            si = await js.add_stream(name=f"S{i}", subjects=[f"s{i}.>"])
            if si.cluster.leader != leader.name:
                name, where = f"S{i}", si.cluster.leader
                break
        assert name is not None, "every R1 stream was placed on the meta leader"
        await js.add_consumer(name, durable_name="D")
        gone = next(s for s in cluster if s.name == where)
        await gone.shutdown()
        lc = _cl(leader)
        await _until(lambda: lc.api._all_offline([n for n in lc.registry.nodes if lc.registry.nodes[n].name == where]),
                     what="the stopped server known offline")
        t0 = time.monotonic()
        r = await _one(nc, f"$JS.API.STREAM.INFO.{name}")
        assert r["error"] == {"code": 500, "err_code": 10118, "description": "stream is offline"}, r
        assert time.monotonic() - t0 >= META_API.OFFLINE_ANSWER_DELAY * 0.9
        r = await _one(nc, f"$JS.API.CONSUMER.INFO.{name}.D")
        assert r["error"]["err_code"] == 10119 and r["error"]["description"] == "consumer is offline", r
        # a stream with a live replica is still answered by it
        si = await js.add_stream(name="LIVE", subjects=["live.>"])
        assert (await js.stream_info("LIVE")).config.name == "LIVE" and si.cluster.leader != where
    finally:
        await nc.close()
