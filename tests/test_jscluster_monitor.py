"""The clustered JetStream monitoring builders (rillet/jetstream/cluster/monitor.py) against what a live
3-server nats-server JetStream cluster answers: /jsz meta_cluster, stream and consumer info ``cluster``,
/raftz, statsz ``jetstream.meta``, leader-elected advisories, placement errors. The builders are fed the
values Go reported and must give back the same JSON (same keys, same order, same values), ids and
timestamps aside. Plus the clustered /healthz rules, table-driven."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from helpers import free_port
from rillet.gocompat.gotime import time_ns
from rillet.jetstream.cluster.assignments import (
    ConsumerAssignment, MetaState, RaftGroup, StreamAssignment, encode_assign_consumer, encode_assign_stream)
from rillet.jetstream.cluster.monitor import (
    MetaSnapshotStats, MetaView, PeerState, RaftGroupView, RaftPeerView, cluster_info, clustered_healthz,
    consumer_leader_elected_advisory, consumer_quorum_lost_advisory, meta_cluster_info,
    meta_leader_elected_advisory, peer_info, raftz, raftz_group, stream_leader_elected_advisory,
    stream_quorum_lost_advisory)
from rillet.jetstream.cluster.peers import JSConfig, JSStats, NodeInfo, PeerRegistry, peer_id
from rillet.jetstream.cluster.placement import PlacementConfig, PlacementError, create_stream_group

needs_go = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


def _get(h: int, path: str) -> dict:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{h}{path}", timeout=2).read())


async def _collect(ports) -> dict:
    import nats
    out: dict = {"advisories": [], "statsz": []}
    nc = await nats.connect(f"nats://a:p@127.0.0.1:{ports[0][0]}")
    sysc = await nats.connect(f"nats://sys:p@127.0.0.1:{ports[1][0]}")
    try:
        async def adv(m):
            out["advisories"].append((m.subject, json.loads(m.data)))

        async def stz(m):
            out["statsz"].append(json.loads(m.data))
        await nc.subscribe("$JS.EVENT.ADVISORY.*.LEADER_ELECTED.>", cb=adv)
        await sysc.subscribe("$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED", cb=adv)
        await sysc.subscribe("$SYS.SERVER.*.STATSZ", cb=stz)
        await sysc.flush()
        await nc.flush()

        async def api(subject, body=b""):
            # (15 s: a loaded machine's Go cluster left an R3 create unanswered for 5 s in a clean-clone run)
            return json.loads((await nc.request(subject, body, timeout=15)).data)
        out["create"] = await api("$JS.API.STREAM.CREATE.S3", json.dumps(
            {"name": "S3", "subjects": ["s3"], "num_replicas": 3}).encode())
        await nc.publish("s3", b"x")
        out["consumer"] = await api("$JS.API.CONSUMER.CREATE.S3.D", json.dumps(
            {"stream_name": "S3", "config": {"durable_name": "D", "ack_policy": "explicit"}}).encode())
        for name, cfg in [("R5", {"num_replicas": 5}), ("TAG", {"placement": {"tags": ["nope", "x"]}}),
                          ("XT", {"num_replicas": 3, "placement": {"tags": ["!t1"]}}),
                          ("BIG", {"max_bytes": 10 * 1024 ** 3}), ("CL", {"placement": {"cluster": "other"}}),
                          ("UQ", {"num_replicas": 3, "placement": {"tags": ["t1"]}})]:
            out["err_" + name] = (cfg, (await api(f"$JS.API.STREAM.CREATE.{name}", json.dumps(
                {"name": name, "subjects": [name.lower()], **cfg}).encode())).get("error"))
        await asyncio.sleep(0.3)
        out["info"] = await api("$JS.API.STREAM.INFO.S3")
        out["cinfo"] = await api("$JS.API.CONSUMER.INFO.S3.D")
        out["jsz"] = [_get(h, "/jsz") for _, _, h in ports]
        out["raftz"] = [_get(h, "/raftz") for _, _, h in ports]
        await api("$JS.API.STREAM.LEADER.STEPDOWN.S3")
        await sysc.request("$JS.API.META.LEADER.STEPDOWN", b"", timeout=15)
        inbox = sysc.new_inbox()
        await sysc.subscribe(inbox, cb=stz)
        await sysc.publish("$SYS.REQ.SERVER.PING.STATSZ", b"", reply=inbox)  # (every server answers)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            kinds = {a["type"] for _, a in out["advisories"]}
            if len(kinds) == 3 and len({m["server"]["name"] for m in out["statsz"]}) == 3:
                break
            await asyncio.sleep(0.05)
    finally:
        await nc.close()
        await sysc.close()
    return out


@pytest.fixture(scope="module")
def go_cluster():
    d = tempfile.mkdtemp(prefix="rillet-jsc-go-")
    ports = [(free_port(), free_port(), free_port()) for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{c}" for _, c, _ in ports)
    procs, logs = [], []
    try:
        for i, (p, c, h) in enumerate(ports):
            conf = (f'port: {p}\nhttp_port: {h}\nserver_name: g{i}\nserver_tags: ["az:{"abc"[i]}", "t{i}"]\n'
                    f'jetstream {{ store_dir: "{d}/s{i}", max_file_store: 1GB, max_memory_store: 64MB, '
                    f'unique_tag: "az:" }}\n'
                    f"cluster {{ name: gc, listen: 127.0.0.1:{c}, routes: [{routes}] }}\n"
                    "accounts { SYS { users [{user: sys, password: p}] }, "
                    "A { jetstream: enabled, users [{user: a, password: p}] } }\nsystem_account: SYS\n")
            path = f"{d}/s{i}.conf"
            with open(path, "w") as f:
                f.write(conf)
            logs.append(open(f"{d}/s{i}.log", "w"))
            procs.append(subprocess.Popen(["nats-server", "-c", path], stdout=subprocess.DEVNULL, stderr=logs[-1]))
        deadline = time.monotonic() + 20
        while True:
            try:
                if all(_get(h, "/jsz").get("meta_cluster", {}).get("leader") for _, _, h in ports):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the Go JetStream cluster did not elect a meta leader")
            time.sleep(0.1)
        yield asyncio.run(_collect(ports))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
        shutil.rmtree(d, ignore_errors=True)


def _peers(reps) -> list[PeerState]:
    return [PeerState(r["name"], r["peer"], r["current"], r["active"], r.get("lag", 0), r.get("offline", False),
                      r.get("pending", False)) for r in reps]


def _cluster(go: dict) -> dict:
    return cluster_info(go.get("name", ""), go.get("raft_group", ""), go.get("leader", ""),
                        time_ns(go["leader_since"]) if "leader_since" in go else 0, _peers(go.get("replicas", [])),
                        system_account=go.get("system_account", False), traffic_account=go.get("traffic_account", ""))


@needs_go
def test_peer_ids_and_stream_info_cluster(go_cluster):
    c = go_cluster["info"]["cluster"]
    assert c["raft_group"].startswith("S-R3F-") and len(c["raft_group"]) == 14
    assert json.dumps(_cluster(c)) == json.dumps(c)
    assert json.dumps(_cluster(go_cluster["create"]["cluster"])) == json.dumps(go_cluster["create"]["cluster"])
    cc = go_cluster["cinfo"]["cluster"]
    assert cc["raft_group"].startswith("C-R3F-")
    assert json.dumps(_cluster(cc)) == json.dumps(cc)
    for r in c["replicas"]:
        assert peer_id(r["name"]) == r["peer"]  # the peer id is the hash of the server name


@needs_go
def test_jsz_meta_cluster_and_statsz_meta(go_cluster):
    for z in go_cluster["jsz"]:
        m = z["meta_cluster"]
        sn = m["snapshot"]
        view = MetaView(m.get("name", ""), m.get("leader", ""), m.get("peer", ""), _peers(m.get("replicas", [])),
                        m["cluster_size"], m["quorum_needed"], m["pending"], m["pending_requests"], m["pending_infos"],
                        MetaSnapshotStats(sn["pending_entries"], sn["pending_size"],
                                          time_ns(sn["last_time"]) if sn["last_time"][:4] != "0001" else 0,
                                          sn.get("last_duration", 0)))
        assert json.dumps(meta_cluster_info(view)) == json.dumps(m)
    sz = go_cluster["statsz"][0]["statsz"]["jetstream"]["meta"]
    sn = sz["snapshot"]
    view = MetaView("gc", sz.get("leader", ""), sz.get("peer", ""), [], sz["cluster_size"], sz["quorum_needed"],
                    sz["pending"], sz["pending_requests"], sz["pending_infos"],
                    MetaSnapshotStats(sn["pending_entries"], sn["pending_size"], 0, sn.get("last_duration", 0)))
    assert json.dumps(meta_cluster_info(view, name="_meta_", with_replicas=False)) == json.dumps(sz)


@needs_go
def test_raftz_groups(go_cluster):
    seen = 0
    for rz in go_cluster["raftz"]:
        for acc, groups in rz.items():
            for name, g in groups.items():
                v = RaftGroupView(g["id"], g["state"], g["size"], g["quorum_needed"], g["committed"], g["applied"],
                                  g.get("leader", ""), time_ns(g["leader_since"]) if "leader_since" in g else 0,
                                  g["ever_had_leader"], g["term"], g.get("voted_for", ""), g["pterm"], g["pindex"],
                                  g.get("observer", False), g.get("paused", False), g.get("catching_up", False),
                                  g["system_account"], g["traffic_account"], g["ipq_proposal_len"],
                                  g["ipq_entry_len"], g["ipq_resp_len"], g["ipq_apply_len"], g["wal"],
                                  g.get("wal_error", ""),
                                  {pid: RaftPeerView(p["name"], p["known"], p.get("last_replicated_index", 0),
                                                     1 if "last_seen" in p else -1) for pid, p in g["peers"].items()})
                ours = raftz_group(v)
                assert list(ours) == list(g), name
                for k in g:
                    if k != "peers":
                        assert ours[k] == g[k], (name, k)
                for pid, p in g["peers"].items():
                    assert list(ours["peers"][pid]) == list(p)
                seen += 1
        assert list(raftz({acc: {}})) == list(rz)
    assert seen >= 3  # (at least the meta group on each server)


@needs_go
def test_leader_elected_advisories(go_cluster):
    kinds = {}
    for subject, a in go_cluster["advisories"]:
        kinds.setdefault(a["type"], (subject, a))
    assert len(kinds) == 3, sorted(kinds)
    subject, a = kinds["io.nats.jetstream.advisory.v1.stream_leader_elected"]
    s2, ours = stream_leader_elected_advisory(a.get("account", ""), a["stream"], a["leader"], _peers(a["replicas"]),
                                              time_ns(a["timestamp"]), a.get("domain", ""))
    assert s2 == subject and list(ours) == list(a)
    assert {k: v for k, v in ours.items() if k != "id"} == {k: v for k, v in a.items() if k != "id"}
    subject, a = kinds["io.nats.jetstream.advisory.v1.consumer_leader_elected"]
    s2, ours = consumer_leader_elected_advisory(a.get("account", ""), a["stream"], a["consumer"], a["leader"],
                                                _peers(a["replicas"]), time_ns(a["timestamp"]))
    assert s2 == subject and {k: v for k, v in ours.items() if k != "id"} == {k: v for k, v in a.items() if k != "id"}
    assert list(ours) == list(a)
    subject, a = kinds["io.nats.jetstream.advisory.v1.domain_leader_elected"]
    s2, ours = meta_leader_elected_advisory(a["leader"], _peers(a["replicas"]), a["cluster"], time_ns(a["timestamp"]))
    assert s2 == subject and list(ours) == list(a)
    assert {k: v for k, v in ours.items() if k != "id"} == {k: v for k, v in a.items() if k != "id"}
    assert len(ours["id"]) == 22


@needs_go
def test_placement_errors_match_go(go_cluster):
    """The same requests through our placement, with the Go servers' registry as their statsz says."""
    reg = PeerRegistry("observer")
    for m in go_cluster["statsz"]:
        reg.statsz(m)
    assert sorted(n.name for n in reg.nodes.values()) == ["g0", "g1", "g2"]
    assert all(n.selectable and n.js and n.cfg.unique_tag == "az:" for n in reg.nodes.values())
    assert reg.get(peer_id("g1")).tags == ("az:b", "t1")
    for name in ("R5", "TAG", "XT", "BIG", "CL", "UQ"):
        cfg, err = go_cluster["err_" + name]
        pc = PlacementConfig.from_stream_config({"name": name, **cfg})
        with pytest.raises(PlacementError) as ei:
            create_stream_group(pc, "gc", reg.nodes, list(reg.nodes), unique_tag="az:")
        assert ei.value.api_error().to_dict() == err, name


# ---- builders without Go -------------------------------------------------------------------------------------

def test_peer_info_optional_fields():
    assert list(peer_info(PeerState("a", "p1", True, 5))) == ["name", "current", "active", "peer"]
    assert list(peer_info(PeerState("", "p1", False, 5, 3, True, True))) == [
        "name", "current", "offline", "active", "lag", "peer", "pending"]
    assert peer_info(PeerState("", "p1"))["name"] == "p1"
    assert cluster_info("c") == {"name": "c", "system_account": True, "traffic_account": "SYS"}
    s, a = stream_quorum_lost_advisory("A", "S", [PeerState("a", "p")], 1, "hub")
    assert s == "$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.S"
    assert list(a) == ["type", "id", "timestamp", "account", "stream", "replicas", "domain"]
    s, a = consumer_quorum_lost_advisory("A", "S", "C", [], 1)
    assert s == "$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST.S.C" and a["type"].endswith("consumer_quorum_lost")


ME, OTHER = peer_id("me"), peer_id("other")


def _state() -> MetaState:
    m = MetaState()
    for name, peers in (("S", [ME, OTHER]), ("T", [OTHER])):
        m.apply(encode_assign_stream(StreamAssignment({"name": name}, RaftGroup("S-" + name, peers), "",
                                                      {"acc": "A"}, 1)))
    m.apply(encode_assign_consumer(ConsumerAssignment("D", "S", {}, RaftGroup("C-D", [ME]), {"acc": "A"}, 2)))
    m.apply(encode_assign_consumer(ConsumerAssignment("E", "S", {}, RaftGroup("C-E", [OTHER]), {"acc": "A"}, 2)))
    return m


GOOD = MetaView("c", "other", OTHER)


@pytest.mark.parametrize("o, meta, bad, want", [
    ({}, GOOD, {}, {"status": "ok"}),
    ({}, None, {}, {"status": "unavailable", "status_code": 503,
                    "error": "JetStream has not established contact with a meta leader"}),
    ({}, MetaView("c"), {}, {"status": "unavailable", "status_code": 503,
                             "error": "JetStream has not established contact with a meta leader"}),
    ({}, MetaView("c", "x", "p", current=False), {}, {
        "status": "unavailable", "status_code": 503, "error": "JetStream is not current with the meta leader"}),
    ({}, MetaView("c", "x", "p", recovering=True), {}, {
        "status": "unavailable", "status_code": 503, "error": "JetStream is still recovering meta layer"}),
    ({"details": True}, MetaView("c", "x", "p", write_error="disk full"), {}, {
        "status": "error", "status_code": 503,
        "errors": [{"type": "JETSTREAM", "error": "JetStream meta layer write error: disk full"}]}),
    # js-meta-only stops after the meta checks
    ({"js-meta-only": True}, GOOD, {"S": "lagging"}, {"status": "ok"}),
    # only groups this server is a member of count
    ({}, GOOD, {"T": "lagging", "E": "x"}, {"status": "ok"}),
    ({}, GOOD, {"S": "lagging"}, {"status": "unavailable", "status_code": 503,
                                   "error": "JetStream stream 'A > S' is not current: lagging"}),
    ({}, GOOD, {"D": "no leader"}, {"status": "unavailable", "status_code": 503,
                                     "error": "JetStream consumer 'A > S > D' is not current: no leader"}),
    ({"details": True}, GOOD, {"D": "no leader"}, {"status": "error", "status_code": 503, "errors": [
        {"type": "CONSUMER", "account": "A", "stream": "S", "consumer": "D",
         "error": "JetStream consumer 'A > S > D' is not current: no leader"}]}),
    ({"account": "B"}, GOOD, {}, {"status": "unavailable", "status_code": 404,
                                  "error": 'JetStream account "B" not found'}),
    ({"account": "A", "stream": "T"}, GOOD, {}, {"status": "unavailable", "status_code": 404,
                                                 "error": 'JetStream stream "T" not found on account "A"'}),
    ({"account": "A", "stream": "S", "consumer": "E"}, GOOD, {}, {
        "status": "unavailable", "status_code": 404,
        "error": 'JetStream consumer "E" not found for stream "S" on account "A"'}),
    ({"account": "A", "stream": "S", "consumer": "D"}, GOOD, {"S": "x"}, {
        "status": "unavailable", "status_code": 503, "error": "JetStream stream 'A > S' is not current: x"}),
])
def test_clustered_healthz(o, meta, bad, want):
    got = clustered_healthz(o, meta, _state(), ME, lambda acc, sa: bad.get(sa.name, ""),
                            lambda acc, sa, ca: bad.get(ca.name, ""))
    assert got == want
