"""A Rillet meta leader of a mixed Go + Rillet cluster carrying out what changes where a stream runs
(rillet.jetstream.cluster.gometaplace): placement by tags, unique_tag and storage, scaling, moves, peer removals
and evacuations, in nats-server 2.15's desired-state layout, the group leaders (Go or Rillet) carrying them out.

Unit tests drive ``MetaLeaderApi`` against a fake member whose peer registry is fed the servers' statsz. The live
test runs 2 Go + 2 Rillet servers with server tags and ``unique_tag``; one drill (create, scale R1 -> R3 -> R1,
peer removals of a Go and of a Rillet peer, moves by tags, placements refused) runs with the Rillet server as
meta leader, then again with a Go meta leader on streams of other names, and the answers and resulting stream
infos are compared.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from types import SimpleNamespace

import pytest

from helpers import free_port, serve_config
from rillet.gocompat.gotime import time_ns
from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import LEADER, GoRaftPeer
from rillet.jetstream.cluster.gometa import Committed, GoMetaState
from rillet.jetstream.cluster.peers import PeerRegistry
from rillet.raft import gowire as gw
from test_jscluster_gometa import CAP, _member, _until
from test_jscluster_gometa_lead import _IC, _all_see, _lead_conf, _sys_request, live

ME, G0, G1, R2 = gw.peer_id("r1"), gw.peer_id("g0"), gw.peer_id("g1"), gw.peer_id("r2")
NAMES = {ME: "r1", G0: "g0", G1: "g1", R2: "r2"}
TAGS = {"g0": ["az:1", "go", "n:g0"], "g1": ["az:2", "go", "n:g1"], "r1": ["az:3", "rillet", "n:r1"],
        "r2": ["az:3", "rillet", "n:r2"]}


# -- the meta leader's placement against a fake member ------------------------------------------------------------

def _statsz(name: str, tags, max_storage: int = 10**12, storage: int = 0) -> dict:
    return {"server": {"name": name, "id": "ID" + name, "cluster": "C1", "tags": tags, "seq": 1, "jetstream": True},
            "statsz": {"jetstream": {"config": {"max_memory": 10**9, "max_storage": max_storage},
                                     "stats": {"storage": storage}}}}


def _leader(peers):
    p = GoRaftPeer("_meta_", ME, announce_peers=True, add_unknown_peers=True)
    p.peers = set(peers)
    p.cluster_size = len(peers)
    p.term = 1
    p.campaign()
    for peer in sorted(set(peers) - {ME}):
        p.vote_response(gw.VoteResponse(2, peer, True, False))
    assert p.role == LEADER
    return p


def _api(storage=None):
    from rillet.jetstream.cluster.gometalead import MetaLeaderApi
    raft = _leader((ME, G0, G1, R2))
    now = time.monotonic()
    raft.last_seen = {G0: now, G1: now, R2: now}
    proposed = []
    opts = SimpleNamespace(cluster=SimpleNamespace(name="C1"), jetstream=SimpleNamespace(domain="", unique_tag="az:"),
                           tags=TAGS["r1"], accounts={"A": {"jetstream": {}}})
    m = SimpleNamespace(raft=raft, peer=ME, rillet_peers={R2}, state=GoMetaState(), ic=_IC(), propose=proposed.append,
                        replicas={}, solo=None, refused=0,
                        log=SimpleNamespace(warn=lambda *a: None, notice=lambda *a: None),
                        server=SimpleNamespace(opts=opts, name="r1", server_id="IDr1",
                                               system_account=SimpleNamespace(name="SYS")))
    api = MetaLeaderApi(m, rng=random.Random(3))
    reg = PeerRegistry("r1", "IDr1")
    for n in ("g0", "g1", "r2"):
        reg.statsz(_statsz(n, TAGS[n], **((storage or {}).get(n) or {})))
    reg.set_local("r1", "IDr1", "C1", tags=TAGS["r1"], cfg=reg.nodes[R2].cfg, stats=reg.nodes[R2].stats)
    api.registry = reg
    return api, m, proposed


def _request(m, pattern, subject, body, acc="A"):
    hdr = b"NATS/1.0\r\nNats-Request-Info: " + json.dumps({"acc": acc, "user": "u", "cluster": "C1"}).encode() \
        + b"\r\n\r\n"
    msg = hdr + (body if isinstance(body, bytes) else json.dumps(body).encode())
    m.ic.subs[pattern](None, None, subject.encode(), b"_R_.x", len(hdr), msg)


def _apply(m, proposed):
    for entries in proposed:
        for e in entries:
            m.state.apply(Committed(1, e))
    proposed.clear()


def _docs(proposed):
    return [ge.decode_entry(e.data) for es in proposed for e in es]


def _create(m, proposed, name, body):
    _request(m, "$JS.API.STREAM.CREATE.*", f"$JS.API.STREAM.CREATE.{name}", dict(body, name=name))
    assert proposed, m.ic.sent
    g = _docs(proposed)[0].doc["group"]
    _apply(m, proposed)
    return g


def test_placement_answers_and_entries():
    _, m, proposed = _api(storage={"g1": {"max_storage": 1000}})
    sent = m.ic.sent
    # tags nobody has, two servers sharing a unique tag value, too little storage: nats-server's texts
    for name, body in (("X1", {"placement": {"tags": ["nope"]}}),
                       ("X2", {"num_replicas": 2, "placement": {"tags": ["rillet"]}}),
                       ("X3", {"num_replicas": 4}),
                       ("X4", {"placement": {"tags": ["n:g1"]}, "max_bytes": 5000})):
        _request(m, "$JS.API.STREAM.CREATE.*", f"$JS.API.STREAM.CREATE.{name}", dict(body, name=name))
    assert not proposed
    assert [d["error"]["err_code"] for _, d in sent] == [10005] * 4
    assert [d["error"]["description"] for _, d in sent] == [
        "no suitable peers for placement, tags not matched ['nope']",
        "no suitable peers for placement, server tag not unique, tags not matched ['rillet']",
        "no suitable peers for placement, server tag not unique",
        "no suitable peers for placement, insufficient storage, tags not matched ['n:g1']"]
    sent.clear()
    # a tag naming the unique prefix turns the uniqueness off; the Go server preferred
    g = _create(m, proposed, "AZ", {"num_replicas": 2, "placement": {"tags": ["az:3"]}})
    assert sorted(g["peers"]) == sorted([ME, R2]) and g["preferred"] == g["peers"][0]
    g = _create(m, proposed, "GO", {"num_replicas": 2, "placement": {"tags": ["go"]}})
    assert sorted(g["peers"]) == sorted([G0, G1]) and g["preferred"] in (G0, G1)
    # three replicas: one of each az, a Go server first (preferred)
    g = _create(m, proposed, "R3", {"num_replicas": 3})
    assert len(g["peers"]) == 3 and G0 in g["peers"] and G1 in g["peers"] and g["preferred"] in (G0, G1)


def test_scale_up_and_down_and_moves_are_desired_states():
    api, m, proposed = _api()
    g = _create(m, proposed, "S", {"placement": {"tags": ["az:1"]}})
    assert g["peers"] == [G0] and g["name"].startswith("S-R1F-")
    # R1 -> R3: the new peers beside the current one (unique az), the group renamed, the old peer preferred
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S",
             {"name": "S", "num_replicas": 3, "placement": {"tags": ["az:1"]}})
    # (the tag keeps only g0: no room for three)
    assert m.ic.sent[-1][1]["error"]["description"] == "no suitable peers for placement, tags not matched ['az:1']"
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S", {"name": "S", "num_replicas": 3,
                                                                     "placement": {"tags": ["go"]}})
    assert m.ic.sent[-1][1]["error"]["err_code"] == 10123  # (a move and a scale at once)
    m.ic.sent.clear()
    m.state.streams[("A", "S")]["stream"].pop("placement")
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S", {"name": "S", "num_replicas": 3})
    up = _docs(proposed)[0]
    ng = up.doc["group"]
    assert up.op == ge.OP_UPDATE_STREAM and not m.ic.sent
    assert ng["peers"] == [G0] and ng["name"] != g["name"] and ng["name"].startswith("S-R3F-")
    d = ng["desired"]
    # (as nats-server 2.15.1 writes a scale-up's first desired state: created, members = the peers of the moment)
    assert list(d) == ["created", "id", "peers", "cluster", "preferred", "members", "origin"]
    assert d["members"] == [G0] and time_ns(d["created"]) > time_ns(up.doc["created"])
    assert d["peers"][0] == G0 and len(d["peers"]) == 3 and d["preferred"] == G0
    assert len({TAGS[NAMES[p]][0] for p in d["peers"]}) == 3  # (one server per az)
    assert d["origin"] == {"peers": [G0], "cluster": "C1", "replicas": 1}
    assert up.doc["stream"]["num_replicas"] == 3 and up.doc["subject"] == "$JS.API.STREAM.UPDATE.S"
    _apply(m, proposed)
    # while it scales, a move is refused (10226); a scale down stacks, its origin kept
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S",
             {"name": "S", "num_replicas": 3, "placement": {"tags": ["go"]}})
    assert m.ic.sent[-1][1]["error"]["err_code"] == 10226
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S", {"name": "S", "num_replicas": 1})
    down = _docs(proposed)[0].doc["group"]
    assert down["desired"]["scale_down"] is True and down["desired"]["peers"] == d["peers"]
    assert down["desired"]["origin"] == d["origin"] and down["name"] == ng["name"]
    proposed.clear()
    # a move of a stable group: a new group by the new placement, the name kept, move set
    g = _create(m, proposed, "M", {"num_replicas": 2, "placement": {"tags": ["go"]}})
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.M",
             {"name": "M", "num_replicas": 2, "placement": {"tags": ["n:r2", "az:3"]}})
    assert m.ic.sent[-1][1]["error"]["description"] == \
        "no suitable peers for placement, tags not matched ['n:r2']"  # (r1 lacks n:r2: one server, not two)
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.M",
             {"name": "M", "num_replicas": 2, "placement": {"tags": ["az:3"]}})
    mv = _docs(proposed)[0].doc["group"]
    assert mv["name"] == g["name"] and mv["peers"] == g["peers"]
    assert sorted(mv["desired"]["peers"]) == sorted([ME, R2]) and mv["desired"]["move"] is True
    assert mv["desired"]["origin"] == {"peers": g["peers"], "cluster": "C1", "replicas": 2,
                                       "placement": {"tags": ["go"]}}
    _apply(m, proposed)
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.M", {"name": "M", "num_replicas": 1,
                                                                     "placement": {"tags": ["az:3"]}})
    assert m.ic.sent[-1][1]["error"]["err_code"] == 10124 and not proposed  # (a scale during a move)
    assert api.registry is not None


def test_peer_remove_and_evacuations():
    api, m, proposed = _api()
    g = _create(m, proposed, "P", {"num_replicas": 2, "placement": {"tags": ["go"]}})
    _request(m, "$JS.API.CONSUMER.DURABLE.CREATE.*.*", "$JS.API.CONSUMER.DURABLE.CREATE.P.D",
             {"stream_name": "P", "config": {"durable_name": "D", "ack_policy": "explicit"}})
    _apply(m, proposed)
    sent = m.ic.sent
    sent.clear()
    pr = "$JS.API.STREAM.PEER.REMOVE.*"
    # nats-server's refusals: empty, no peer, no stream, not a member, no replacement with the tags
    _request(m, pr, "$JS.API.STREAM.PEER.REMOVE.P", b"")
    _request(m, pr, "$JS.API.STREAM.PEER.REMOVE.P", {})
    _request(m, pr, "$JS.API.STREAM.PEER.REMOVE.Q", {"peer": "g0"})
    _request(m, pr, "$JS.API.STREAM.PEER.REMOVE.P", {"peer": "r1"})
    _request(m, pr, "$JS.API.STREAM.PEER.REMOVE.P", {"peer": "g0"})
    assert [d["error"]["err_code"] for _, d in sent] == [10003, 10003, 10059, 10040, 10075] and not proposed
    assert all(d["type"] == "io.nats.jetstream.api.v1.stream_remove_peer_response" for _, d in sent)
    sent.clear()
    # without tags: g0 (by name) out at once, a replacement desired, the consumer remapped
    m.state.streams[("A", "P")]["stream"].pop("placement")
    _request(m, pr, "$JS.API.STREAM.PEER.REMOVE.P", {"peer": "g0"})
    assert sent == [(b"_R_.x", {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True})]
    sa, ca = _docs(proposed)
    assert sa.op == ge.OP_ASSIGN_STREAM and sa.doc["group"]["peers"] == [G1]
    d = sa.doc["group"]["desired"]
    assert d["removed"] == [G0] and d["peers"][0] == G1 and len(d["peers"]) == 2 and G0 not in d["peers"]
    assert ca.op == ge.OP_ASSIGN_CONSUMER and ca.doc["group"]["desired"]["removed"] == [G0]
    proposed.clear()
    sent.clear()
    # an evacuation: the peer stays until its replacement is current (consumers follow later)
    _request(m, "$JS.API.STREAM.PEER.EVACUATE.*", "$JS.API.STREAM.PEER.EVACUATE.P", {"peer": G1})
    assert sent[-1][1] == {"type": "io.nats.jetstream.api.v1.stream_evacuate_peer_response", "success": True}
    (ev,) = _docs(proposed)
    assert G1 in ev.doc["group"]["peers"] and G1 not in ev.doc["group"]["desired"]["peers"]
    assert "removed" not in ev.doc["group"]["desired"] or G1 not in ev.doc["group"]["desired"]["removed"]
    proposed.clear()
    # SERVER.EVACUATE (system account): every stream on the server; one that can not be placed elsewhere
    # records the server as excluded
    g = _create(m, proposed, "E", {"num_replicas": 2, "placement": {"tags": ["go"]}})
    sys = "$JS.API.SERVER.EVACUATE"
    _request(m, sys, sys, {"peer": "g0"}, acc="A")
    assert not proposed  # (another account: ignored)
    _request(m, sys, sys, {"peer": "nope"}, acc="SYS")
    assert sent[-1][1]["error"]["err_code"] == 10044
    _request(m, sys, sys, {"peer": "g0"}, acc="SYS")
    assert sent[-1][1] == {"type": "io.nats.jetstream.api.v1.meta_server_evacuate_response", "success": True}
    (e,) = [x for x in _docs(proposed) if x.doc["stream"]["name"] == "E"]
    assert e.doc["group"]["peers"] == g["peers"] and e.doc["group"]["excluded"] == [G0]
    assert e.doc["group"]["desired"]["peers"] == [G1]


# -- live: 2 Go + 2 Rillet servers, the drill under a Rillet and under a Go meta leader ---------------------------

class _TaggedGo(CAP.GoCluster):
    def conf(self, name: str):
        path = super().conf(name)
        tags = ", ".join(f'"{t}"' for t in TAGS[name])
        path.write_text(path.read_text().replace("jetstream {", f'server_tags: [{tags}]\njetstream {{ unique_tag: "az:",'))
        return path


def _tagged(conf: str, name: str) -> str:
    tags = ", ".join(f'"{t}"' for t in TAGS[name])
    return conf.replace("jetstream {", f'server_tags: [{tags}]\njetstream {{ unique_tag: "az:",')


async def _req(nc, subject: str, body) -> dict:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=30)).data)


def _answer(d: dict) -> dict:
    """What the drill compares of an answer: its type, error or success, and the stream config's placement fields."""
    out = {"type": d.get("type")}
    if "error" in d:
        out["error"] = (d["error"]["err_code"], d["error"]["description"])
    if "success" in d:
        out["success"] = d["success"]
    cfg = d.get("config")
    if cfg is not None:
        out["config"] = (cfg.get("num_replicas"), cfg.get("placement"))
    return out


async def _servers(nc, name: str) -> list:
    si = await _req(nc, f"$JS.API.STREAM.INFO.{name}", b"")
    cl = si.get("cluster") or {}
    return [cl.get("leader")] + [r["name"] for r in cl.get("replicas") or []], si


async def _settled(nc, name: str, n: int, without=(), within=None, timeout: float = 120):
    """The stream on ``n`` servers, all current, none of ``without`` (and all of them in ``within``): its servers."""
    async def check():
        servers, si = await _servers(nc, name)
        reps = (si.get("cluster") or {}).get("replicas") or []
        if None in servers or len(servers) != n or any(not r.get("current") for r in reps):
            return None
        if any(s in servers for s in without) or (within is not None and not set(servers) <= set(within)):
            return None
        return servers
    return await CAP._until(check, timeout, what=f"{name} settled on {n} servers")


async def _drill(nc, sysnc, p: str, kinds: dict) -> list:
    """The same requests under either meta leader; returns what is compared."""
    out: list = []
    base = {"storage": "file", "retention": "limits"}
    # creates refused by placement
    for name, cfg in (("X1", {"placement": {"tags": ["nope"]}}), ("X2", {"num_replicas": 4}),
                      ("X3", {"num_replicas": 2, "placement": {"tags": ["rillet"]}})):
        out.append(_answer(await _req(nc, f"$JS.API.STREAM.CREATE.{p}{name}", dict(base, name=p + name,
                                                                                     subjects=[f"{p}.{name}"], **cfg))))
    # R1 -> R3 -> R1, the R1 stream on a Go server (its leader carries the scaling out; an R1 stream on a Rillet
    # server runs without a group, gosolo, which does not scale yet); the update drops the placement (no move)
    sc = p + "SC"
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.CREATE.{sc}", dict(base, name=sc, subjects=[f"{p}.sc"],
                                                                          placement={"tags": ["n:g0"]}))))
    for i in range(3):
        await _req(nc, f"{p}.sc", f"m{i}".encode())
    out.append(await _settled(nc, sc, 1))
    up = await _req(nc, f"$JS.API.STREAM.UPDATE.{sc}", dict(base, name=sc, subjects=[f"{p}.sc"], num_replicas=3))
    out.append(_answer(up))
    three = await _settled(nc, sc, 3)
    out.append(sorted(TAGS[s][0] for s in three).count("az:3") <= 1)  # (unique az)
    down = await _req(nc, f"$JS.API.STREAM.UPDATE.{sc}", dict(base, name=sc, subjects=[f"{p}.sc"], num_replicas=1))
    out.append(_answer(down))
    await _settled(nc, sc, 1)
    _, si = await _servers(nc, sc)
    out.append((si["config"]["num_replicas"], si["state"]["messages"]))
    # peer removals: a Go peer, then a Rillet one (of an R2 stream on one of each, a consumer on it)
    pr = p + "PR"
    cfg = dict(base, name=pr, subjects=[f"{p}.pr"], num_replicas=2)
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.CREATE.{pr}", cfg)))
    await _settled(nc, pr, 2)
    for i in range(5):
        await _req(nc, f"{p}.pr", f"m{i}".encode())
    await _req(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.{pr}.D", {"stream_name": pr, "config": {
        "durable_name": "D", "ack_policy": "explicit"}})
    for kind in ("go", "rillet"):
        servers = await _settled(nc, pr, 2)
        victim = next((s for s in servers if kinds[s] == kind), None)
        if victim is None:  # (the stream is on two servers of the other kind: one of them first)
            victim = servers[0]
        out.append(_answer(await _req(nc, f"$JS.API.STREAM.PEER.REMOVE.{pr}", {"peer": victim})))
        now = await _settled(nc, pr, 2, without=[victim])
        _, si = await _servers(nc, pr)
        out.append((len(now), si["state"]["messages"]))
    stream_servers = await _settled(nc, pr, 2)

    async def consumer_settled():  # (its group follows the stream's: on the same servers, led, current)
        ci = await _req(nc, f"$JS.API.CONSUMER.INFO.{pr}.D", b"")
        cl = ci.get("cluster") or {}
        servers = [cl.get("leader")] + [r["name"] for r in cl.get("replicas") or []]
        if "error" in ci or sorted(servers, key=str) != sorted(stream_servers) or \
                not all(r.get("current") for r in cl.get("replicas") or []):
            return None
        return ci
    ci = await CAP._until(consumer_settled, 120, what=f"{pr} > D on the stream's servers")
    out.append((ci["config"]["durable_name"], ci["num_pending"]))
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.PEER.REMOVE.{pr}", {"peer": "nobody"})))
    # moves by tags, carried out by the streams' Go leaders: an R1 stream from g0 to g1; an R2 one from the Go
    # servers toward the Rillet ones (a tag naming the unique prefix: no uniqueness); placements refused
    mv = p + "MV"
    cfg = dict(base, name=mv, subjects=[f"{p}.mv"], placement={"tags": ["n:g0"]})
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.CREATE.{mv}", cfg)))
    out.append(await _settled(nc, mv, 1))
    await _req(nc, f"{p}.mv", b"x")
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.UPDATE.{mv}", dict(cfg, placement={"tags": ["n:g1"]}))))
    out.append(await _settled(nc, mv, 1, within=["g1"]))
    _, si = await _servers(nc, mv)
    out.append((si["config"]["placement"], si["state"]["messages"]))
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.UPDATE.{mv}", dict(cfg, placement={"tags": ["nope"]}))))
    mv2 = p + "MV2"
    cfg = dict(base, name=mv2, subjects=[f"{p}.mv2"], num_replicas=2, placement={"tags": ["go"]})
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.CREATE.{mv2}", cfg)))
    out.append(sorted(await _settled(nc, mv2, 2)))
    for i in range(3):
        await _req(nc, f"{p}.mv2", b"y")
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.UPDATE.{mv2}", dict(cfg, placement={"tags": ["rillet"]}))))
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.UPDATE.{mv2}", dict(cfg, num_replicas=1))))  # (10123)
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.UPDATE.{mv2}", dict(cfg, placement={"tags": ["az:3"]}))))
    # (a move while this one is under way: refused. Its completion is not awaited: under either kind of meta
    # leader the Go leader of this R2 group adds both Rillet servers, which become current, and then neither
    # steps down to one of them nor removes the Go peers (watched for 40 s): a group-level interaction of a Go
    # stream leader with Rillet replicas, not the meta layer's)
    out.append(_answer(await _req(nc, f"$JS.API.STREAM.UPDATE.{mv2}", dict(cfg, placement={"tags": ["n:g0"]}))))
    return out


@live
async def test_drill_under_a_rillet_meta_leader_answers_as_under_a_go_one(tmp_path):
    import nats
    p1, p2 = free_port(), free_port()
    gc = _TaggedGo(tmp_path, names=("g0", "g1"), extra_routes=[p1, p2])
    gc.start_all()
    confs = {"r1": _tagged(_lead_conf(gc, "r1", p1, extra_routes=[p2]), "r1"),
             "r2": _tagged(_lead_conf(gc, "r2", p2, extra_routes=[p1]), "r2")}  # (both stand: their replicas lead)
    cms = {n: serve_config(c) for n, c in confs.items()}
    srvs = {n: await cm.__aenter__() for n, cm in cms.items()}
    conns = []
    kinds = {"g0": "go", "g1": "go", "r1": "rillet", "r2": "rillet"}
    try:
        ms = {n: await _member(s) for n, s in srvs.items()}
        m = ms["r1"]
        g0 = await nats.connect(gc.url("g0"))
        sysnc = await nats.connect(gc.url("g0", "sys"))
        conns += [g0, sysnc]
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the meta group of 2 Go + 2 Rillet")
        await _until(lambda: all(x.raft.commit > 0 and x.peer in x.raft.peers and x.raft.catchup is None
                                 for x in ms.values()), 60, what="r1 and r2 caught-up members")

        async def r1_leads():
            if m.raft.role == LEADER:
                return True
            if m.raft.leader and m.raft.leader != m.peer:
                await sysnc.request("$JS.API.META.LEADER.STEPDOWN",
                                    json.dumps({"placement": {"preferred": "r1"}}).encode(), timeout=10)
            await asyncio.sleep(2)
            return m.raft.role == LEADER
        await CAP._until(r1_leads, 90, what="r1 meta leader")
        await CAP._until(lambda: _all_see(gc, ["g0", "g1"], "r1"), 60, what="the Go servers following r1")
        api = m.leader_api

        async def all_known():
            nodes = api._nodes()
            return len(nodes) == 4 and all(n.selectable and not n.offline for n in nodes.values())
        await CAP._until(all_known, 60, what="the Rillet meta leader knowing every server's tags and limits")
        assert sorted(api._nodes()[gw.peer_id("g1")].tags) == sorted(TAGS["g1"])
        before = api.delegated
        rillet = await _drill(g0, sysnc, "R", kinds)
        assert api.delegated == before and m.raft.role == LEADER and m.refused == 0
        # the same under a Go meta leader
        await _until(lambda: all(m.raft.current(gw.peer_id(n)) for n in ("g0", "g1")), 60, what="Go servers current")
        r = await _sys_request(sysnc, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": "g0"}})
        assert r.get("success") is True, r
        await CAP._until(lambda: _all_see(gc, ["g0", "g1"], "g0"), 60, what="g0 leading")
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader answering")
        go = await _drill(g0, sysnc, "G", kinds)
        assert rillet == go
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        for n in list(srvs):
            (tmp_path / f"{n}.log").write_text(srvs[n]._test_log.getvalue())
            await cms[n].__aexit__(None, None, None)
        gc.stop_all()


def test_account_stream_move_and_cancel():
    _, m, proposed = _api()
    g = _create(m, proposed, "M", {"num_replicas": 2, "placement": {"tags": ["go"]}})
    sent = m.ic.sent
    mv = "$JS.API.ACCOUNT.STREAM.MOVE.*.*"
    # another account's stream: ignored; an unknown account, a server not in the group, not a member: refused
    _request(m, mv, "$JS.API.ACCOUNT.STREAM.MOVE.B.M", {}, acc="A")
    assert not sent
    _request(m, mv, "$JS.API.ACCOUNT.STREAM.MOVE.B.M", {}, acc="SYS")
    _request(m, mv, "$JS.API.ACCOUNT.STREAM.MOVE.A.M", {"server": "nope"}, acc="SYS")
    _request(m, mv, "$JS.API.ACCOUNT.STREAM.MOVE.A.M", {"server": "r2"}, acc="SYS")
    _request(m, mv, "$JS.API.ACCOUNT.STREAM.MOVE.A.Q", {}, acc="SYS")
    assert [d["error"]["err_code"] for _, d in sent] == [10035, 10044, 10040, 10059] and not proposed
    assert {d["type"] for _, d in sent} == {"io.nats.jetstream.api.v1.stream_update_response"}
    sent.clear()
    # g0 replaced (the one other Go server is in the group already; the tags allow no other): no peers
    _request(m, mv, "$JS.API.ACCOUNT.STREAM.MOVE.A.M", {"server": "g0"}, acc="SYS")
    assert sent[-1][1]["error"]["description"] == "no suitable peers for placement, tags not matched ['go']"
    m.state.streams[("A", "M")]["stream"].pop("placement")
    sent.clear()
    _request(m, mv, "$JS.API.ACCOUNT.STREAM.MOVE.A.M", {"server": "g0", "tags": ["rillet"]}, acc="A")
    (up,) = _docs(proposed)
    grp = up.doc["group"]
    assert up.op == ge.OP_UPDATE_STREAM and not sent and grp["peers"] == g["peers"]
    # (g1 kept; one peer with the tag, r1 and r2 sharing az:3)
    assert grp["desired"]["move"] is True and grp["desired"]["peers"][0] == G1
    assert grp["desired"]["peers"][1] in (ME, R2) and len(grp["desired"]["peers"]) == 2
    assert "tags" not in (up.doc["stream"].get("placement") or {})  # (the tags only choose the peers)
    assert up.doc["subject"] == "$JS.API.ACCOUNT.STREAM.MOVE.A.M" and up.doc["client"]["acc"] == "A"
    _apply(m, proposed)
    # a cancel: back to the origin's peers, still a move; without a reconfiguration under way: refused
    _request(m, "$JS.API.STREAM.CANCEL_MOVE.*", "$JS.API.STREAM.CANCEL_MOVE.M", {})
    (cx,) = _docs(proposed)
    cg = cx.doc["group"]["desired"]
    assert sorted(cg["peers"]) == sorted(g["peers"]) and cg["move"] is True
    assert cg["origin"]["peers"] == g["peers"] and cx.doc["stream"]["num_replicas"] == 2
    assert cx.doc["reply"] == "_R_.x" and cx.doc["subject"] == "$JS.API.ACCOUNT.STREAM.MOVE.A.M"
    proposed.clear()
    g2 = _create(m, proposed, "N", {"num_replicas": 1})
    assert len(g2["peers"]) == 1
    _request(m, "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.*.*", "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.A.N", {}, acc="SYS")
    assert sent[-1][1]["error"]["err_code"] == 10129 and not proposed
    assert sent[-1][1]["type"] == "io.nats.jetstream.api.v1.stream_cancel_move_response"


def test_a_scale_up_goes_on_with_the_reconcile_requests_of_nats_server_2_15_1():
    """A Go 2.15.1 stream leader's reconcile request names the group's RAFT ``members`` too: taken."""
    _, m, proposed = _api()
    _create(m, proposed, "S", {"placement": {"tags": ["az:1"]}})
    m.state.streams[("A", "S")]["stream"].pop("placement")
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S", {"name": "S", "num_replicas": 3})
    _apply(m, proposed)
    m.raft.applied = m.raft.pindex
    rec = m.ic.subs["$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE"]
    d = m.state.streams[("A", "S")]["group"]["desired"]
    rec(None, None, b"x", None, 0, json.dumps({"account": "A", "stream": "S", "id": d["id"], "term": 1}).encode())
    _apply(m, proposed)
    m.raft.applied = m.raft.pindex
    d = m.state.streams[("A", "S")]["group"]["desired"]
    assert d["term"] == 1
    rec(None, None, b"x", None, 0, json.dumps({"account": "A", "stream": "S", "id": d["id"], "term": 1,
                                               "meta_peers": d["peers"], "members": [G0]}).encode())
    (up,) = _docs(proposed)
    assert up.doc["group"]["peers"] == d["peers"] and up.doc["group"]["scale_up"] is True
    proposed.clear()
    rec(None, None, b"x", None, 0, json.dumps({"account": "A", "stream": "S", "id": d["id"], "term": 1,
                                               "members": ["x", 1]}).encode())
    assert not proposed  # (of the wrong type: dropped)
