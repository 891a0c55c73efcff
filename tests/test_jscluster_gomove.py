"""A replicated stream moved from Go servers to Rillet servers of one mixed JetStream cluster.

nats-server 2.15.1's stream leader, while it changes its group's peers (a move by tags or a placement change,
``STREAM.PEER.EVACUATE``...), asks every replica for its store's state (``$JSC.SI.<account>.<stream>`` with
``{"state":true}``, answered ``{"peer":...,"state":{...}}`` by leader and followers alike) and steps down to a
desired peer, or removes the old ones, only once the desired peers' states answer as caught up (its migration
status says "waiting for desired peers to catch up" until then). A Rillet replica that did not answer stalled
every move onto Rillet servers with the Go leader of the group. ``GoStreamReplica`` answers now
(rillet.jetstream.cluster.gostream).

Unit test: the answer of a replica with a file store, in the layout the Go replicas use (checked against a
recorded answer of nats-server 2.15.1: its field order and byte count). Live test, 2 Go + 2 Rillet servers
(``rillet_go_meta_lead``) with server tags: an R2 stream on the two Go servers, moved by a placement change to
the two Rillet servers under a Go meta leader, then another under a Rillet meta leader; each ends led by a
Rillet server with both Rillet replicas current, the Go peers gone, and every message in both Rillet stores. Under
each meta leader too, ``STREAM.PEER.EVACUATE`` of the non-leader replica of an R2 stream on a Go and a Rillet
server: a Rillet replica of a Go-led group, and a Go replica of a Rillet-led one.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import time
from types import SimpleNamespace

import pytest

from helpers import free_port, serve_config
from rillet.jetstream.cluster.golead import LEADER
from rillet.jetstream.cluster.gostream import GoStreamReplica
from rillet.raft import gowire as gw
from test_jscluster_gometa import CAP, _member, _until
from test_jscluster_gometa_lead import _all_see, _lead_conf
from test_jscluster_gometa_lead_place import _TaggedGo, _tagged

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


class _Log:
    def __getattr__(self, name):
        return lambda *a, **k: None


class _IC:
    def __init__(self):
        self.sent = []

    def publish(self, subject, reply, payload):
        self.sent.append((subject, json.loads(payload)))


# nats-server 2.15.1's answer of a Go replica (recorded: 10 messages of one byte on "mv", no consumer)
_GO_ANSWER = ('{"peer":"FlDeG4Ai","state":{"messages":10,"bytes":330,"first_seq":1,"first_ts":"2026-11-30T07:11:'
              '09.371802886Z","last_seq":10,"last_ts":"2026-11-30T07:11:09.379971083Z","num_subjects":1,'
              '"consumer_count":0}}')


def test_a_replica_answers_a_state_request_as_a_go_replica(tmp_path):
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    a = {"stream": {"name": "MV", "subjects": ["mv"], "storage": "file", "num_replicas": 2},
         "group": {"name": "S-R2F-abcd1234", "peers": [gw.peer_id(n) for n in ("g0", "g1", "r1")]}}
    rep = GoStreamReplica(server, "A", a, str(tmp_path))
    rep.ic = _IC()
    try:
        rep._on_state_request(None, None, b"$JSC.SI.A.MV", b"_R_.1", 0, b'{"state":true}')
        empty = rep.ic.sent.pop()[1]
        assert empty == {"peer": gw.peer_id("r1"), "state": {
            "messages": 0, "bytes": 0, "first_seq": 0, "first_ts": "0001-01-01T00:00:00Z", "last_seq": 0,
            "last_ts": "0001-01-01T00:00:00Z", "consumer_count": 0}}
        ts = time.time_ns()
        for i in range(10):
            rep.store.store_raw(i + 1, "mv", b"", b"x", ts + i)
        rep._on_state_request(None, None, b"$JSC.SI.A.MV", b"_R_.2", 0, b'{"state":true}')
        subject, doc = rep.ic.sent.pop()
        go = json.loads(_GO_ANSWER)
        assert subject == b"_R_.2" and list(doc) == list(go) and list(doc["state"]) == list(go["state"])
        assert {k: v for k, v in doc["state"].items() if not k.endswith("_ts")} == \
            {k: v for k, v in go["state"].items() if not k.endswith("_ts")}
        # a stream info request of the meta leader (no body), no reply, bad JSON: not answered by a replica
        for reply, body in ((b"_R_.3", b""), (None, b'{"state":true}'), (b"_R_.4", b"{"), (b"_R_.5", b"[]"),
                            (b"_R_.6", b'{"state":1}')):
            rep._on_state_request(None, None, b"$JSC.SI.A.MV", reply, 0, body)
        assert rep.ic.sent == []
    finally:
        rep.store.stop()


# -- live: 2 Go + 2 Rillet servers ------------------------------------------------------------------------------

async def _req(nc, subject: str, body) -> dict:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=30)).data)


async def _move(nc, ms: dict, name: str, n: int) -> dict:
    """An R2 stream created on the Go servers, ``n`` messages, moved to the Rillet servers (placement by the tag
    they share); returns the final stream info once the move is over."""
    cfg = {"name": name, "subjects": [f"{name}.>"], "storage": "file", "num_replicas": 2,
           "placement": {"tags": ["go"]}}
    r = await _req(nc, f"$JS.API.STREAM.CREATE.{name}", cfg)
    assert "error" not in r, r
    acked = {}
    for i in range(n):
        ack = await _req(nc, f"{name}.{i % 3}", f"m{i}".encode())
        assert "error" not in ack, ack
        acked[ack["seq"]] = (f"{name}.{i % 3}", f"m{i}".encode())
    assert sorted(acked) == list(range(1, n + 1))
    r = await _req(nc, f"$JS.API.STREAM.UPDATE.{name}", dict(cfg, placement={"tags": ["az:3"]}))
    assert "error" not in r, r
    last = {}

    async def moved():
        si = await _req(nc, f"$JS.API.STREAM.INFO.{name}", b"")
        cl = si.get("cluster") or {}
        last["info"] = si
        reps = cl.get("replicas") or []
        servers = {cl.get("leader")} | {x["name"] for x in reps}
        if cl.get("desired") or servers != {"r1", "r2"} or not all(x.get("current") for x in reps):
            return None
        return si
    try:
        si = await CAP._until(moved, 90, what=f"{name} moved to r1 and r2")
    except TimeoutError as e:
        raise AssertionError(f"{e}; last info: {json.dumps(last.get('info'))}") from None
    assert si["state"]["messages"] == n and si["state"]["last_seq"] == n
    # every message in both Rillet stores, the same as acknowledged; the Go servers left the RAFT group
    for srv, m in ms.items():
        rep = m.replicas[("A", name)]
        await _until(lambda: rep.store.state().last_seq >= n, 60, what=f"{name} complete on {srv}")
        for seq, (subj, data) in acked.items():
            sm = rep.store.load_msg(seq)
            assert (sm.subject, bytes(sm.data)) == (subj, data), (srv, seq)
        assert rep.raft.peers | {rep.peer} == {m.peer for m in ms.values()}
    return si


async def _evacuate(nc, ms: dict, name: str, lead: str, n: int = 10) -> list:
    """An R2 stream on a Go and a Rillet server (an az each, by ``unique_tag``), led by a server of kind ``lead``
    ("go" or "rillet"): its other replica evacuated (``STREAM.PEER.EVACUATE``). Returns the servers it ends on
    once the evacuated one is gone, its replacement current and the change over, with every message kept."""
    cfg = {"name": name, "subjects": [name], "storage": "file", "num_replicas": 2}
    r = await _req(nc, f"$JS.API.STREAM.CREATE.{name}", cfg)
    assert "error" not in r, r
    for i in range(n):
        assert "error" not in await _req(nc, name, f"m{i}".encode())

    async def led():
        si = await _req(nc, f"$JS.API.STREAM.INFO.{name}", b"")
        cl = si.get("cluster") or {}
        reps = cl.get("replicas") or []
        if cl.get("desired") or not cl.get("leader") or len(reps) != 1 or not reps[0].get("current"):
            return None
        if cl["leader"][0] == reps[0]["name"][0]:
            # (two Go servers, as a Rillet meta leader places it: the non-leader removed, its replacement in
            # another az is a Rillet server)
            r = await _req(nc, f"$JS.API.STREAM.PEER.REMOVE.{name}", {"peer": reps[0]["name"]})
            assert r.get("success") is True, r
            return None
        if (cl["leader"][0] == "r") != (lead == "rillet"):
            await _req(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", {"placement": {"preferred": reps[0]["name"]}})
            return None
        return cl["leader"], reps[0]["name"]
    leader, victim = await CAP._until(led, 90, what=f"{name} led by a {lead} server")
    r = await _req(nc, f"$JS.API.STREAM.PEER.EVACUATE.{name}", {"peer": victim})
    assert r.get("success") is True, r
    last = {}

    async def done():
        si = await _req(nc, f"$JS.API.STREAM.INFO.{name}", b"")
        last["info"] = si
        cl = si.get("cluster") or {}
        reps = cl.get("replicas") or []
        servers = [cl.get("leader")] + [x["name"] for x in reps]
        if cl.get("desired") or None in servers or victim in servers or len(servers) != 2 or \
                not all(x.get("current") for x in reps):
            return None
        return servers, si
    try:
        servers, si = await CAP._until(done, 90, what=f"{victim} evacuated from {name}")
    except TimeoutError as e:
        raise AssertionError(f"{e}; last info: {json.dumps(last.get('info'))}") from None
    assert si["state"]["messages"] == n
    return servers


@live
async def test_r2_stream_moved_from_go_to_rillet_servers_under_either_meta_leader(tmp_path):
    import nats
    p1, p2 = free_port(), free_port()
    gc = _TaggedGo(tmp_path, names=("g0", "g1"), extra_routes=[p1, p2])
    gc.start_all()
    confs = {"r1": _tagged(_lead_conf(gc, "r1", p1, extra_routes=[p2]), "r1"),
             "r2": _tagged(_lead_conf(gc, "r2", p2, extra_routes=[p1]), "r2")}
    cms = {n: serve_config(c) for n, c in confs.items()}
    srvs = {n: await cm.__aenter__() for n, cm in cms.items()}
    conns = []
    try:
        ms = {n: await _member(s) for n, s in srvs.items()}
        nc = await nats.connect(gc.url("g0"))
        sysnc = await nats.connect(gc.url("g0", "sys"))
        conns += [nc, sysnc]
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="the meta group of 2 Go + 2 Rillet")
        await _until(lambda: all(x.raft.commit > 0 and x.peer in x.raft.peers and x.raft.catchup is None
                                 for x in ms.values()), 60, what="r1 and r2 caught-up members")

        async def leads(name: str):
            if await _all_see(gc, ["g0", "g1"], name):
                return await CAP._js_ready(nc)
            try:
                await sysnc.request("$JS.API.META.LEADER.STEPDOWN",
                                    json.dumps({"placement": {"preferred": name}}).encode(), timeout=10)
            except Exception:  # noqa: BLE001 - (no answer while the group elects: asked again)
                pass
            await asyncio.sleep(2)
            return False
        await CAP._until(lambda: leads("g0"), 90, what="g0 meta leader")
        si = await _move(nc, ms, "GOMETA", 40)
        assert si["cluster"]["leader"] in ("r1", "r2")
        # evacuations of a non-leader replica: a Rillet one (a Go leader), a Go one (a Rillet leader)
        for lead in ("go", "rillet"):
            await _evacuate(nc, ms, f"EVG{lead}", lead)
        # the same under a Rillet meta leader
        await CAP._until(lambda: leads("r1"), 90, what="r1 meta leader")
        assert ms["r1"].raft.role == LEADER
        si = await _move(nc, ms, "RMETA", 40)
        assert si["cluster"]["leader"] in ("r1", "r2") and ms["r1"].refused == 0
        for lead in ("go", "rillet"):
            await _evacuate(nc, ms, f"EVR{lead}", lead)
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        for n in list(srvs):
            (tmp_path / f"{n}.log").write_text(srvs[n]._test_log.getvalue())
            await cms[n].__aexit__(None, None, None)
        gc.stop_all()


# -- a Rillet server without rillet_go_meta_lead, left the sole member of a stream group -----------------------

@live
async def test_a_rillet_replica_left_alone_leads_its_group_without_the_lead_flag(tmp_path):
    """2 Go + 1 Rillet (``rillet_go_meta`` only: the Rillet server does not stand for elections): an R2 stream on
    g0 and r1, g0 stopped and removed (``SERVER.REMOVE``), g1 its replacement. r1 is the group's only live
    member: as nats-server's replica would, it drops the removed peer (the group can not make a quorum without
    it) and, the sole voting member, elects itself, adds g1 and the move ends; the stream keeps every message
    and takes publishes. (Before, without the lead flag, the group stayed without a leader.)"""
    import nats
    from test_jscluster_gometa import _rillet_conf
    from test_jscluster_gomigrate_back import _remove
    port = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[port])
    gc.start_all()
    conf = _rillet_conf(gc, "r1", port)
    assert "rillet_go_meta_lead" not in conf
    conns = []
    async with serve_config(conf) as srv:
        try:
            m = await _member(srv)
            nc = await nats.connect(gc.url("g1"))
            sysnc = await nats.connect(gc.url("g1", "sys"))
            conns += [nc, sysnc]
            await CAP._until(lambda: CAP._js_ready(nc), 60, what="the meta group of 2 Go + 1 Rillet")
            names = {gw.peer_id(n): n for n in ("g0", "g1", "r1")}

            async def on_g0_and_r1():  # (placed at random: streams on other servers deleted, another made)
                on.append(f"SOLE{len(on)}")
                cfg = {"name": on[-1], "subjects": [on[-1]], "storage": "file", "num_replicas": 2}
                r = await _req(nc, f"$JS.API.STREAM.CREATE.{on[-1]}", cfg)
                if "error" in r:
                    return None
                await _until(lambda: ("A", on[-1]) in m.state.streams, 30, what=f"{on[-1]} assigned, seen on r1")
                peers = {names.get(p) for p in m.state.streams.get(("A", on[-1]), {}).get("group", {}).get("peers", ())}
                if peers == {"g0", "r1"}:
                    return on[-1]
                await _req(nc, f"$JS.API.STREAM.DELETE.{on[-1]}", b"")
                return None
            on: list = []
            name = await CAP._until(on_g0_and_r1, 120, what="an R2 stream placed on g0 and r1")

            async def led_by_g0():
                si = await _req(nc, f"$JS.API.STREAM.INFO.{name}", b"")
                cl = si.get("cluster") or {}
                reps = cl.get("replicas") or []
                return cl.get("leader") == "g0" and [x["name"] for x in reps] == ["r1"] and reps[0]["current"]
            await CAP._until(led_by_g0, 60, what=f"{name} led by g0, r1 current")
            for i in range(10):
                assert "error" not in await _req(nc, name, f"m{i}".encode())
            rep = m.replicas[("A", name)]
            await _until(lambda: rep.store.state().last_seq == 10, 30, what="r1 holding the 10 messages")
            assert not rep.standing and rep.stand_alone
            gc.stop("g0")
            await CAP._until(lambda: CAP._js_ready(nc), 60, what="a meta leader without g0")
            await _remove(sysnc, "g0")

            async def moved():
                si = await _req(nc, f"$JS.API.STREAM.INFO.{name}", b"")
                cl = si.get("cluster") or {}
                reps = cl.get("replicas") or []
                servers = {cl.get("leader")} | {x["name"] for x in reps}
                return si if servers == {"r1", "g1"} and not cl.get("desired") and \
                    all(x.get("current") for x in reps) else None
            si = await CAP._until(moved, 90, what=f"{name} led again, on r1 and g1")
            assert si["state"]["messages"] == 10 and rep.campaigns >= 1
            ack = await _req(nc, name, b"after")
            assert ack.get("seq") == 11, ack
            await _until(lambda: rep.store.state().last_seq == 11, 30, what="the new message stored on r1")
        finally:
            for c in conns:
                if c.is_connected:
                    await c.close()
            (tmp_path / "r1.log").write_text(srv._test_log.getvalue())
            gc.stop_all()


def test_a_replica_stands_alone_only_as_the_sole_member_with_nothing_to_catch_up(tmp_path):
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    me, g0 = gw.peer_id("r1"), gw.peer_id("g0")
    a = {"stream": {"name": "S", "subjects": ["s"], "storage": "file", "num_replicas": 2},
         "group": {"name": "S-R2F-abcd1234", "peers": [g0, me]}}
    rep = GoStreamReplica(server, "A", a, str(tmp_path))
    try:
        assert not rep._alone()  # (g0 still a member)
        rep.raft.peers.discard(g0)
        assert rep._alone()
        rep._snap = object()  # (the store catching up by messages)
        assert not rep._alone()
        rep._snap = None
        rep.raft.catchup = object()  # (the log catching up)
        assert not rep._alone()
    finally:
        rep.store.stop()


# -- a group left as the Rillet server alone: kept, not handed to gosolo -------------------------------------

def test_a_replica_left_alone_drops_the_other_peers_and_keeps_its_log_position(tmp_path):
    """``lead_alone``: the group's other peers leave its membership (a group of one: its own vote is the quorum),
    and after a restart (the RAFT log is in memory, empty) the log starts at the applied index, so that what
    this server proposes next is not taken for an entry applied before the restart. The files name their group
    (``replica_group``: how a restarted server knows the replica it keeps)."""
    from rillet.jetstream.cluster.gostream import replica_group
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    me, g0 = gw.peer_id("r1"), gw.peer_id("g0")
    a = {"stream": {"name": "S", "subjects": ["s"], "storage": "file", "num_replicas": 2},
         "group": {"name": "S-R2F-abcd1234", "peers": [g0, me]}}
    rep = GoStreamReplica(server, "A", a, str(tmp_path))
    try:
        assert replica_group(str(tmp_path), "A", "S") == "S-R2F-abcd1234"
        assert replica_group(str(tmp_path), "A", "T") is None
        rep.applied_index = 7
        rep.raft.term = 3
        rep.lead_alone()
        r = rep.raft
        assert r.peers == {me} and r.cluster_size == 1 and r.quorum() == 1 and g0 in r.removed_peers
        assert (r.base_index, r.base_term, r.commit, r.applied, r.pindex) == (7, 3, 7, 7, 7)
        assert rep.stand_alone and rep._alone()
        out = r.campaign()  # (what lead_alone sends once started: elected by its own vote)
        assert r.role == LEADER and r.term == 4 and out
    finally:
        rep.store.stop()


def test_a_group_grown_from_this_server_alone_and_its_leaders_reconcile_members(tmp_path):
    """``grown_from``: the assignment of a scale-up from a group of one on this server, as nats-server 2.15.1's
    meta leader writes it (recorded: the stream's desired state has an origin, its consumer's has none), whose
    replica starts from the files and state of the group of one. ``members`` in a group leader's reconcile
    request, as 2.15.1's stream leader sends them (recorded). A replica's files keep the stream's creation
    time, which tells them after a restart even when the group was renamed meanwhile (``replica_created``)."""
    from rillet.jetstream.cluster.gomigrate import reconcile_doc
    from rillet.jetstream.cluster.gostream import files_of, grown_from, replica_created
    g0, g1 = gw.peer_id("g0"), gw.peer_id("g1")
    assert g0 == "uRE0XIhW" and g1 == "pKmyMGN4"
    sa = {"name": "S-R2F-0W5q5YPw", "peers": [g0], "store": "file", "cluster": "C1", "desired": {
        "created": "2026-11-30T10:40:45.627013374Z", "id": "fVQ1YALCkQwkMB6cjseI1b", "peers": [g0, g1],
        "cluster": "C1", "preferred": g0, "members": [g0], "origin": {"peers": [g0], "cluster": "C1", "replicas": 1,
                                                                      "placement": {"tags": ["keep"]}}}}
    ca = {"name": "C-R2F-aJPKYGDm", "peers": [g0], "store": "file", "cluster": "C1", "desired": {
        "created": "2026-11-30T10:40:46.561116771Z", "id": "fVQ1YALCkQwkMB6cjseIgh", "peers": [g0, g1],
        "cluster": "C1", "preferred": g0, "members": [g0]}}
    assert grown_from({"group": sa}, g0) and grown_from({"group": ca}, g0)
    assert not grown_from({"group": sa}, g1) and not grown_from({"group": ca}, g1)
    # not a scale-up from this server alone: a stable group of one, a move elsewhere, a grown R2
    assert not grown_from({"group": {"name": "S-R1F-x", "peers": [g0]}}, g0)
    assert not grown_from({"group": dict(sa, desired=dict(sa["desired"], peers=[g1, gw.peer_id("r1")]))}, g0)
    assert not grown_from({"group": dict(sa, peers=[g0, g1], desired=dict(
        sa["desired"], peers=[g0, g1, gw.peer_id("r1")], origin={"peers": [g0, g1], "replicas": 2}))}, g0)
    doc = reconcile_doc({"id": "VPzFUAK62pCaIR6KvJm7GN", "term": 1, "meta_peers": [g1, g0], "members": [g0, g1],
                         "match": True}, account="A", stream="KEPT")
    assert json.dumps(doc, separators=(",", ":")) == (
        '{"account":"A","stream":"KEPT","id":"VPzFUAK62pCaIR6KvJm7GN","term":1,"meta_peers":["pKmyMGN4",'
        '"uRE0XIhW"],"members":["uRE0XIhW","pKmyMGN4"],"match":true}')
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    a = {"stream": {"name": "S", "subjects": ["s"], "storage": "file", "num_replicas": 2},
         "group": {"name": "S-R2F-abcd1234", "peers": [g0, gw.peer_id("r1")]}, "created": "2026-11-30T10:40:40Z"}
    rep = GoStreamReplica(server, "A", a, str(tmp_path))
    rep.store.stop()
    assert replica_created(str(tmp_path), "A", "S") == "2026-11-30T10:40:40Z"
    assert replica_created(str(tmp_path), "A", "T") is None
    # the stream's group renamed while this server was down (S-R2F -> S-R1F at the end of a scale-down): its files
    # are still the stream's; not those of a stream of that name created anew, nor of another stream
    renamed = dict(a, group={"name": "S-R1F-efgh5678", "peers": [gw.peer_id("r1")]})
    assert files_of(str(tmp_path), "A", "S", a) and files_of(str(tmp_path), "A", "S", renamed)
    assert not files_of(str(tmp_path), "A", "S", dict(renamed, created="2026-11-30T10:50:00Z"))
    assert not files_of(str(tmp_path), "A", "S", dict(renamed, created=""))
    assert not files_of(str(tmp_path), "A", "T", renamed)


class _KeepTagGo(CAP.GoCluster):
    """g0 tagged ``keep`` (as r1 below), g1 not: a stream placed by that tag goes on g0 and r1."""
    def conf(self, name: str):
        path = super().conf(name)
        if name == "g0":
            path.write_text(path.read_text().replace("jetstream {", 'server_tags: ["keep"]\njetstream {', 1))
        return path


@live
async def test_a_scale_down_to_the_rillet_replica_keeps_every_message_and_consumer_state(tmp_path):
    """2 Go + 1 Rillet (``rillet_go_meta``, Go meta leader): an R2 stream placed by tag on g0 and r1 with a
    durable consumer, 10 messages, 4 acknowledged; r1 made its leader (a transfer), then the stream scaled down
    to R1 (``STREAM.UPDATE``), which keeps the leader: the group ends as r1 alone with no desired state, the
    shape of a one-replica assignment. r1 keeps its replica (it no longer hands the stream to gosolo, which
    created it empty after the replica's files were removed) and leads the group alone: every acknowledged
    message is there, the consumer's delivered and ack floor are kept, new publishes are acknowledged and the
    consumer delivers them and takes their AckSyncs (it did not: a group of one commits a delivery within its
    proposal, before the delivery was held for it). nats-server does the same in an all-Go cluster (tried: 2 Go
    + a Rillet meta member, the stream on the Go servers: the same delivered, ack floor and pending counts).
    Then r1 restarts: the replica's files are found again (their group), the stream is served with all its
    messages, the consumer's state is r1's kept one (delivered 12, ack floor 4, 6 pending). Then the stream is scaled up again to R2: nats-server's meta leader names the group anew with a
    desired state whose origin is r1 alone (the replica's files were removed and the stream lost). r1 leads the
    new group from its files, adds g0, catches it up (snapshot, then $JSC.SYNC) and reports the change done
    (with the ``members`` 2.15.1's meta leader waits for); g0, made leader, serves every message."""
    import nats
    from test_jscluster_gometa import _rillet_conf
    port = free_port()
    gc = _KeepTagGo(tmp_path, names=("g0", "g1"), extra_routes=[port])
    gc.start_all()
    conf = _rillet_conf(gc, "r1", port).replace("jetstream {", 'server_tags: ["keep"]\njetstream {', 1)
    name, key = "KEPT", ("A", "KEPT")
    conns: list = []

    async def info(nc) -> dict:  # (polled: a request in the moment of a change of leader may go unanswered)
        try:
            return json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
        except nats.errors.TimeoutError:
            return {}

    async def all_there(nc, n: int) -> None:
        import base64
        for seq in range(1, n + 1):
            r = await _req(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
            assert "error" not in r, (seq, r)
            assert base64.b64decode(r["message"]["data"]) == (f"m{seq}".encode() if seq <= 10 else b"after"), r
    logs = []
    try:
        async with serve_config(conf) as srv:
            logs.append(srv)
            m = await _member(srv)
            me = m.peer
            nc = await nats.connect(gc.url("g1"))
            conns.append(nc)
            await CAP._until(lambda: CAP._js_ready(nc), 60, what="the meta group of 2 Go + 1 Rillet")
            cfg = {"name": name, "subjects": [name], "storage": "file", "num_replicas": 2,
                   "placement": {"tags": ["keep"]}}

            async def created():
                r = await _req(nc, f"$JS.API.STREAM.CREATE.{name}", cfg)
                return "error" not in r or r["error"].get("err_code") == 10058  # (an earlier try made it)
            await CAP._until(created, 90, what=f"{name} created on g0 and r1")
            names = {gw.peer_id(n): n for n in ("g0", "g1", "r1")}
            await _until(lambda: {names.get(p) for p in m.state.streams.get(key, {}).get("group", {})
                                  .get("peers", ())} == {"g0", "r1"}, 30, what=f"{name} placed on g0 and r1")

            async def led():
                cl = (await info(nc)).get("cluster") or {}
                reps = cl.get("replicas") or []
                return cl.get("leader") in ("g0", "r1") and len(reps) == 1 and reps[0].get("current")
            await CAP._until(led, 60, what=f"{name} led, its other replica current")
            for i in range(1, 11):
                assert "error" not in await _req(nc, name, f"m{i}".encode())
            ccfg = {"stream_name": name, "config": {"durable_name": "C", "ack_policy": "explicit",
                                                    "ack_wait": 120_000_000_000}}

            async def consumer_made():
                r = await _req(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.{name}.C", ccfg)
                return "error" not in r or r["error"].get("err_code") == 10148
            await CAP._until(consumer_made, 60, what="the durable consumer created")
            await _until(lambda: me in ((m.state.consumers.get(key) or {}).get("C", {}).get("group", {})
                                        .get("peers") or ()), 30, what="the consumer on r1")
            js = nc.jetstream()
            psub = await js.pull_subscribe_bind("C", name)
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < 10 and time.monotonic() < deadline:
                try:
                    got += await psub.fetch(10 - len(got), timeout=5)
                except nats.errors.TimeoutError:
                    pass
            assert [g.data for g in got] == [f"m{i}".encode() for i in range(1, 11)]
            for g in got[:4]:
                await g.ack_sync()
            pending_replies = [g.reply for g in got[4:]]  # (5-10, acked after r1's restart below)
            rep = m.replicas[key]
            crep = m.replicas[key + ("C",)]
            await _until(lambda: rep.store.state().last_seq == 10 and crep.consumer.ack_floor_stream == 4
                         and crep.consumer.delivered_stream == 10, 30, what="r1's replicas current")

            async def served(n: int):
                si = await info(nc)
                cl = si.get("cluster") or {}
                return si if cl.get("leader") == "r1" and si.get("state", {}).get("messages") == n else None

            async def to_r1():  # (a transfer names r1: it leads without the lead flag)
                if await served(10):
                    return True
                await _req(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", {"placement": {"preferred": "r1"}})
                return await served(10)
            await CAP._until(to_r1, 60, what=f"{name} led by r1")
            ack = await _req(nc, name, b"after")
            assert ack.get("seq") == 11, ack

            async def scaled_down():  # (the leader, r1, is the replica a scale-down keeps)
                r = await _req(nc, f"$JS.API.STREAM.UPDATE.{name}", dict(cfg, num_replicas=1))
                return "error" not in r
            await CAP._until(scaled_down, 60, what=f"{name} scaled down to R1")
            # the shape that gosolo takes for a one-replica stream: r1 alone, no change pending
            try:
                await _until(lambda: (m.state.streams.get(key, {}).get("group", {}).get("peers") == [me]
                                      and not m.state.streams[key]["group"].get("desired")), 60,
                             what="the stream's group left as r1 alone")
            except AssertionError:
                raise AssertionError(f"the stream's group not left as r1 alone: {m.state.streams.get(key)}")
            si = await CAP._until(lambda: served(11), 60, what=f"{name} served by r1 with its 11 messages")
            assert si["state"]["first_seq"] == 1 and si["state"]["last_seq"] == 11, si["state"]
            # (nats-server's meta leader names the group of one anew: the replica of the new name has the files)
            assert key not in m.solo.hosted and m.replicas[key].store.state().msgs == 11
            await all_there(nc, 11)
            ack = await _req(nc, name, b"after")
            assert ack.get("seq") == 12, ack

            async def consumer_kept():
                ci = await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.C", b"")
                if "error" in ci:
                    return None
                return ci if (ci.get("cluster") or {}).get("leader") == "r1" else None
            ci = await CAP._until(consumer_kept, 60, what="the consumer led by r1")
            assert ci["ack_floor"]["stream_seq"] == 4 and ci["delivered"]["stream_seq"] == 10, ci
            assert ci["num_pending"] == 2, ci  # (the messages published after)
            got = []  # the consumer delivers them (it did not before: docs/mixed-clusters.md)
            deadline = time.monotonic() + 30
            while len(got) < 2 and time.monotonic() < deadline:
                try:
                    got += await psub.fetch(2 - len(got), timeout=5)
                except nats.errors.TimeoutError:
                    pass
            assert [(g.data, g.metadata.sequence.stream) for g in got] == [(b"after", 11), (b"after", 12)], got
            for g in got:
                await g.ack_sync()  # (answered once applied: a group of one applies within the proposal)
            ci = await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.C", b"")
            assert ci["delivered"]["stream_seq"] == 12 and ci["num_ack_pending"] == 6 and ci["num_pending"] == 0, ci
            for c in conns:
                await c.close()
            conns.clear()
        # r1 restarted: its replica's files found again by their group, not a stream created empty
        async with serve_config(conf) as srv:
            logs.append(srv)
            m = await _member(srv)
            nc = await nats.connect(gc.url("g1"))
            conns.append(nc)

            async def served_again():
                si = await info(nc)
                return si if (si.get("cluster") or {}).get("leader") == "r1" and \
                    si.get("state", {}).get("messages") == 12 else None
            await CAP._until(served_again, 90, what=f"{name} served by r1 after its restart, 12 messages")
            assert key in m.replicas and key not in m.solo.hosted
            await all_there(nc, 12)
            ack = await _req(nc, name, b"after")
            assert ack.get("seq") == 13, ack
            # the consumer's state kept by r1 (goconsumerstore): delivered 12, ack floor 4, 5-10 pending; their
            # acks taken, then the next message delivered (the scale-up below carries the state over)
            async def consumer_back():
                ci = await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.C", b"")
                return ci if (ci.get("cluster") or {}).get("leader") == "r1" else None
            ci = await CAP._until(consumer_back, 60, what="the consumer led by r1 after its restart")
            assert (ci["delivered"]["stream_seq"], ci["ack_floor"]["stream_seq"], ci["num_ack_pending"]) == \
                (12, 4, 6), ci
            for reply in pending_replies:
                await nc.request(reply, b"+ACK", timeout=10)
            psub = await nc.jetstream().pull_subscribe_bind("C", name)
            got = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                try:
                    got += await psub.fetch(1, timeout=5)
                except nats.errors.TimeoutError:
                    pass
            assert got, "no delivery after r1's restart"
            assert (got[0].metadata.sequence.stream, got[0].metadata.num_delivered) == (13, 1)
            await got[0].ack_sync()
            before = await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.C", b"")
            assert before["ack_floor"]["stream_seq"] == before["delivered"]["stream_seq"] == 13, before

            # scaled up again (R1 -> R2): nats-server's meta leader names the group anew, with a desired state
            # whose origin is r1 alone. r1's replica keeps its files (they were removed: the stream lost), leads
            # the new group at once and adds g0, which it catches up from a snapshot
            async def scaled_up():
                r = await _req(nc, f"$JS.API.STREAM.UPDATE.{name}", dict(cfg, num_replicas=2))
                return "error" not in r
            await CAP._until(scaled_up, 60, what=f"{name} scaled up to R2")

            async def grown(leader: str):
                si = await info(nc)
                cl = si.get("cluster") or {}
                reps = cl.get("replicas") or []
                return si if (cl.get("leader") == leader and [x.get("name") for x in reps] == [
                    {"r1": "g0", "g0": "r1"}[leader]] and reps[0].get("current")
                    and si.get("state", {}).get("messages") == 13) else None
            await CAP._until(lambda: grown("r1"), 60, what=f"{name} led by r1, g0 added and current")
            try:
                await _until(lambda: not m.state.streams[key]["group"].get("desired") and
                             len(m.state.streams[key]["group"]["peers"]) == 2, 60, what="the scale-up finished")
            except AssertionError:
                raise AssertionError(f"the scale-up did not finish: {m.state.streams[key]['group']}, "
                                     f"{m.state.consumers.get(key)}")
            assert m.replicas[key].store.state().msgs == 13
            await all_there(nc, 13)

            async def on_g0():  # (g0's replica: every message served by it once it leads)
                if await grown("g0"):
                    return True
                await _req(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", {"placement": {"preferred": "g0"}})
                return await grown("g0")
            await CAP._until(on_g0, 60, what=f"{name} led by g0 with 13 messages")
            await all_there(nc, 13)
            ack = await _req(nc, name, b"after")
            assert ack.get("seq") == 14, ack
            await _until(lambda: m.replicas[key].store.state().msgs == 14, 30, what="r1's replica following g0")

            async def consumer_on_g0():  # (the consumer's state, carried over to the new group, is g0's too)
                ci = await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.C", b"")
                if (ci.get("cluster") or {}).get("leader") == "g0":
                    return ci
                await _req(nc, f"$JS.API.CONSUMER.LEADER.STEPDOWN.{name}.C", {"placement": {"preferred": "g0"}})
                return None
            ci = await CAP._until(consumer_on_g0, 60, what="the consumer led by g0")
            def seqs(c: dict) -> tuple:
                return tuple((c[k]["consumer_seq"], c[k]["stream_seq"]) for k in ("delivered", "ack_floor"))
            assert seqs(ci) == seqs(before) and ci["num_ack_pending"] == 0, (before, ci)
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        (tmp_path / "r1.log").write_text("\n".join(s._test_log.getvalue() for s in logs))
        gc.stop_all()
