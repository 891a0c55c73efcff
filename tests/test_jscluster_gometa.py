"""A Rillet server in a Go nats-server cluster's JetStream meta group (rillet.jetstream.cluster.gometa).

Unit tests drive the sans-IO follower with nats-server's own messages (gowire encodings, meta entries and a
meta snapshot recorded from Go, tests/data/nrg_go_corpus.json). The live tests run three Go servers and one
Rillet server routed to them with a ``GoMetaMember`` attached, and check both sides: the Go meta leader counts
the Rillet server as a current member, the Rillet server applies the stream and consumer assignments the Go
leader commits, catches up by entries or by snapshot when it joins late, and its votes and acknowledgements
are needed (one Go server down: no election and no commit without it).
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from helpers import free_port, serve_config
from rillet.jetstream.cluster.gometa import GoMetaMember, GoRaftFollower, member_of
from rillet.raft import gowire as gw

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "data" / "nrg_go_corpus.json"


def _capture_module():
    spec = importlib.util.spec_from_file_location("nrg_capture", ROOT / "scripts" / "nrg_capture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CAP = _capture_module()


@pytest.fixture(scope="module")
def go_meta():
    """Meta entries and a meta snapshot exactly as the Go servers wrote them."""
    corpus = CAP.from_json(json.loads(CORPUS.read_text()))
    entries = []
    for subject, reply, data in corpus["messages"]:
        if subject == "$NRG.AE._meta_":
            for e in gw.AppendEntry.decode(data).entries:
                if e.type == gw.ENTRY_NORMAL:
                    entries.append(e)
    snap = next(gw.Snapshot.decode(d) for g, f, d in corpus["snapshots"] if g == "_meta_")
    return entries, snap


LEADER = "LeAdEr01"
ME = "fOlLoWr1"


def _follower() -> GoRaftFollower:
    n = iter(range(1000))
    return GoRaftFollower("_meta_", ME, new_inbox=lambda: f"$NRG.CR.inbox{next(n):03d}")


def _resp(out) -> gw.AppendEntryResponse:
    return gw.AppendEntryResponse.decode(out.payload)


def test_votes_once_per_term_and_only_for_an_up_to_date_log():
    f = _follower()
    out = f.vote(gw.VoteRequest(2, 0, 0, "candA001"), "$NRG.R.a")
    vr = gw.VoteResponse.decode(out[0].payload)
    assert out[0].subject == "$NRG.R.a" and vr.granted and vr.term == 2 and vr.peer == ME and vr.empty
    assert not gw.VoteResponse.decode(f.vote(gw.VoteRequest(2, 0, 0, "candB001"), "$NRG.R.b")[0].payload).granted
    assert gw.VoteResponse.decode(f.vote(gw.VoteRequest(2, 0, 0, "candA001"), "$NRG.R.a")[0].payload).granted
    stale = gw.VoteResponse.decode(f.vote(gw.VoteRequest(1, 9, 9, "candB001"), "$NRG.R.b")[0].payload)
    assert not stale.granted and stale.term == 2
    # a log of ours ahead of the candidate's: no vote, even in a new term
    f.append("append", "", "$NRG.R.l", gw.AppendEntry(LEADER, 3, 0, 0, 0, (gw.Entry(0, b"x"),)), 0.0)
    assert f.pindex == 1 and f.pterm == 3
    assert not gw.VoteResponse.decode(f.vote(gw.VoteRequest(4, 2, 5, "candB001"), "$NRG.R.b")[0].payload).granted
    assert gw.VoteResponse.decode(f.vote(gw.VoteRequest(5, 3, 1, "candB001"), "$NRG.R.b")[0].payload).granted


def test_rillet_meta_codec_reads_go_meta_entries(go_meta):
    """Rillet's own meta layer (assignments.py) against Go's meta entries: it applies every one, to the same
    assignments GoMetaState holds; its encoder writes Go's bytes once Go's HTML escaping and json.Encoder's
    newline are added (what would remain for a Rillet meta leader writing Go's log)."""
    from rillet.gocompat import gojson
    from rillet.jetstream.cluster import assignments as A
    from rillet.jetstream.cluster.gometa import Committed, GoMetaState
    entries, _ = go_meta
    ms, gs = A.MetaState(), GoMetaState()
    same = 0
    for i, e in enumerate(entries):
        ms.apply(e.data)
        gs.apply(Committed(i + 1, e))
        dec = A.decode_entry(e.data)
        enc = (A.encode_stream_op(dec.op, dec.stream) if dec.stream is not None else
               A.encode_assign_consumer(dec.consumer) if dec.op == A.EntryOp.ASSIGN_CONSUMER else
               A.encode_remove_consumer(dec.consumer))
        assert enc[:1] + gojson._go_escape(enc[1:]) + b"\n" == e.data
        same += enc + b"\n" == e.data  # (those without <, >, & in them)
    assert len(entries) > 30 and same < len(entries)
    assert {(sa.account, sa.name) for sa in ms.iter_streams()} == set(gs.streams)
    for sa in ms.iter_streams():
        assert set(sa.consumers) == set(gs.consumers[(sa.account, sa.name)])


def test_term_and_vote_survive_a_restart(tmp_path):
    from rillet.jetstream.cluster.gometa import TermVote
    tv = TermVote(str(tmp_path / "go_meta" / "_meta_"))
    assert tv.load() == (0, "")
    f = _follower()
    assert gw.VoteResponse.decode(f.vote(gw.VoteRequest(7, 0, 0, "candA001"), "$NRG.R.a")[0].payload).granted
    tv.save(f.term, f.vote_for)
    raw = (tmp_path / "go_meta" / "_meta_" / "tav.idx").read_bytes()
    assert raw == b"candA001" + (7).to_bytes(8, "little")
    # restarted: empty log, but the vote of term 7 is remembered
    g = _follower()
    g.term, g.vote_for = TermVote(str(tmp_path / "go_meta" / "_meta_")).load()
    assert not gw.VoteResponse.decode(g.vote(gw.VoteRequest(7, 0, 0, "candB001"), "$NRG.R.b")[0].payload).granted
    resp = gw.VoteResponse.decode(g.vote(gw.VoteRequest(8, 0, 0, "candB001"), "$NRG.R.b")[0].payload)
    assert resp.granted and resp.empty  # an empty log says so: nats-server does not count it toward quorum
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tav.idx").write_bytes(b"short")
    with pytest.raises(ValueError, match="not a term and vote file"):
        TermVote(str(tmp_path / "bad")).load()


def test_catch_up_by_snapshot_then_entries_then_live(go_meta):
    entries, snap = go_meta
    L = snap.last_index
    top = L + 8  # the leader's last index
    f = _follower()
    # a heartbeat from a leader far ahead: a failing answer naming our catch-up inbox
    out, done = f.append("append", "", "$NRG.R.lead", gw.AppendEntry(LEADER, 3, top, 3, top, ()), 0.0)
    r = _resp(out[0])
    assert out[0].subject == "$NRG.R.lead" and out[0].reply == "$NRG.CR.inbox000"
    assert (r.success, r.index, r.term, r.peer) == (False, 0, 0, ME) and not done
    # an append entry on a stale inbox is ignored; the snapshot on ours is installed and applied
    snap_ae = gw.AppendEntry(LEADER, 3, L, snap.last_term, L,
                             (gw.Entry(gw.ENTRY_SNAPSHOT, snap.data), gw.Entry(gw.ENTRY_PEER_STATE, snap.peer_state)), 3)
    assert f.append("catchup", "$NRG.CR.other", "", snap_ae, 0.1) == ([], [])
    out, done = f.append("catchup", "$NRG.CR.inbox000", "$NRG.CP.prog", snap_ae, 0.1)
    assert f.pindex == L == f.commit and done[0].snapshot
    from rillet.jetstream.cluster.gometa import GoMetaState
    st = GoMetaState()
    for d in done:
        st.apply(d)
    assert {"ORDERS", "MEM", "KV_CFG"} <= set(st.stream_names("A"))
    assert st.consumers[("A", "ORDERS")]
    # then the entries after it, acknowledged on the progress inbox only
    e1 = gw.AppendEntry(LEADER, 3, L + 1, snap.last_term, L, (entries[0],), 3)
    out, done = f.append("catchup", "$NRG.CR.inbox000", "$NRG.CP.prog", e1, 0.2)
    assert [o.subject for o in out] == ["$NRG.CP.prog"] and _resp(out[0]).success and len(done) == 1
    # new entries while the catch-up is not done are ignored
    live = gw.AppendEntry(LEADER, 3, L + 1, 3, top, (entries[1],))
    assert f.append("append", "", "$NRG.R.lead", live, 0.3) == ([], [])
    for i in range(L + 2, top + 1):
        f.append("catchup", "$NRG.CR.inbox000", "", gw.AppendEntry(LEADER, 3, i, 3, i - 1, (gw.Entry(0, b"\x04"),), 3), 0.4)
    assert f.pindex == top and f.catchup is not None
    # the next live entry ends the catch-up and is acknowledged for quorum
    out, done = f.append("append", "", "$NRG.R.lead", live, 0.5)
    assert f.catchup is None and f.pindex == top + 1 and _resp(out[0]).success and _resp(out[0]).index == top + 1
    assert f.commit == top  # (a commit index never goes back)


def test_leader_transfer_to_us_is_handed_on():
    f = _follower()
    f.append("append", "", "$NRG.R.l", gw.AppendEntry(LEADER, 4, 0, 0, 0, (gw.Entry(0, b"x"),)), 0.0)
    out, _ = f.append("append", "", "$NRG.R.l", gw.AppendEntry(
        LEADER, 4, 1, 4, 1, (gw.Entry(gw.ENTRY_LEADER_TRANSFER, ME.encode()),)), 0.0)
    assert _resp(out[0]).success
    vr = gw.VoteRequest.decode(out[1].payload)
    assert out[1].subject == "$NRG.V._meta_" and out[1].reply.startswith("$NRG.R.")
    assert (vr.term, vr.last_term, vr.last_index, vr.candidate) == (5, 0, 0, ME)  # a log no one votes for
    assert (f.term, f.vote_for, f.leader) == (5, ME, "")
    # a transfer to another peer, or one seen in a catch-up, is not ours to act on
    g = _follower()
    out, _ = g.append("append", "", "$NRG.R.l", gw.AppendEntry(
        LEADER, 4, 0, 0, 0, (gw.Entry(gw.ENTRY_LEADER_TRANSFER, b"candA001"),)), 0.0)
    assert len(out) == 1 and g.term == 4


def test_an_append_entry_is_one_index_whatever_its_entries(go_meta):
    """As nats-server's WAL stores an append entry as one record: 11 entries at index 4, then index 5."""
    entries, _ = go_meta
    f = _follower()
    for i in range(3):
        f.append("append", "", "$NRG.R.l", gw.AppendEntry(LEADER, 1, i, 1 if i else 0, i, (entries[i],)), 0.0)
    out, _ = f.append("append", "", "$NRG.R.l", gw.AppendEntry(LEADER, 1, 3, 1, 3, tuple(entries[3:14])), 0.0)
    assert f.pindex == 4 and _resp(out[0]).index == 4
    out, done = f.append("append", "", "$NRG.R.l", gw.AppendEntry(LEADER, 1, 4, 1, 4, ()), 0.0)
    assert f.pindex == 4 and _resp(out[0]).success  # (a heartbeat at 4: nothing to truncate)
    assert [d.index for d in done] == [4] * 11 and [d.entry for d in done] == list(entries[3:14])


def test_conflicting_suffix_is_truncated_and_stale_leader_refused(go_meta):
    entries, _ = go_meta
    f = _follower()
    for i in range(3):
        f.append("append", "", "$NRG.R.l", gw.AppendEntry(LEADER, 2, 0, 2 if i else 0, i, (entries[i],)), 0.0)
    assert (f.pindex, f.pterm, f.commit) == (3, 2, 0)
    # a new leader in term 4 whose log has a different entry 3: no answer, our entry 3 is dropped
    out, _ = f.append("append", "", "$NRG.R.n", gw.AppendEntry("NewLeadr", 4, 2, 3, 3, (entries[3],)), 0.0)
    assert out == [] and f.pindex == 2
    out, done = f.append("append", "", "$NRG.R.n", gw.AppendEntry("NewLeadr", 4, 3, 2, 2, (entries[3],)), 0.0)
    assert _resp(out[0]).success and f.pindex == 3 and f.pterm == 4 and [d.index for d in done] == [1, 2, 3]
    # a committed entry is never truncated, whatever a (faulty) leader says about it
    out, _ = f.append("append", "", "$NRG.R.n", gw.AppendEntry("NewLeadr", 5, 3, 9, 3, (entries[0],)), 0.0)
    assert out == [] and (f.pindex, f.commit, f.pterm) == (3, 3, 4)
    # the old leader's term is refused with our term
    out, _ = f.append("append", "", "$NRG.R.l", gw.AppendEntry(LEADER, 2, 3, 2, 3, ()), 0.0)
    assert not _resp(out[0]).success and _resp(out[0]).term == 5


# -- live, with nats-server --------------------------------------------------------------------------------

pytestmark_live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


def _rillet_conf(gc, name: str = "r1", port: int = 0) -> str:
    store = gc.root / f"store-{name}"
    routes = ", ".join(f"nats://127.0.0.1:{p}" for p in gc.route_ports.values())
    port = port or free_port()
    return f"""
server_name: {name}
listen: 127.0.0.1:-1
accounts {{
  SYS {{ users [{{user: sys, password: sys}}] }}
  A {{ jetstream: enabled, users [{{user: a, password: a}}] }}
}}
system_account: SYS
cluster {{ name: C1, listen: 127.0.0.1:{port}, routes: [{routes}] }}
feature_flags {{ rillet_go_meta: true }}
jetstream {{ enabled: false, store_dir: "{store}" }}
"""


async def _member(srv) -> GoMetaMember:
    """The member the feature flag starts with the server's first route."""
    deadline = time.monotonic() + 30
    while member_of(srv) is None:
        assert time.monotonic() < deadline, "no Go meta member started"
        await asyncio.sleep(0.05)
    return member_of(srv)


async def _until(fn, timeout: float = 40.0, what: str = "condition"):
    """Poll ``fn`` (plain, not async) until true; deadlines are generous: the suite runs on busy machines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _meta_views(gc, server: str) -> dict:
    """Each Go server's view of the meta group ($SYS.REQ.SERVER.PING.JSZ)."""
    import nats
    nc = await nats.connect(gc.url(server, "sys"))
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"{}", reply=inbox)
        views = {}
        try:
            while True:
                m = await sub.next_msg(timeout=2)
                d = json.loads(m.data)
                views[d["server"]["name"]] = d["data"].get("meta_cluster")
        except Exception:  # noqa: BLE001 - nats' timeout ends the collection
            pass
        return views
    finally:
        await nc.close()


async def test_switch_is_off_by_default_and_refused_with_jetstream(tmp_path):
    base = f"""
server_name: solo
listen: 127.0.0.1:-1
cluster {{ name: C1, listen: 127.0.0.1:{free_port()}, routes: [nats://127.0.0.1:{free_port()}] }}
"""
    async with serve_config(base) as srv:
        assert member_of(srv) is None
    with pytest.raises(ValueError, match="rillet_go_meta.*needs a directory.*store_dir"):
        async with serve_config(base + "feature_flags { rillet_go_meta: true }\n"):
            pass
    with pytest.raises(ValueError, match="rillet_go_meta.*can not run JetStream"):
        async with serve_config(base + f"""feature_flags {{ rillet_go_meta: true }}
jetstream {{ store_dir: "{tmp_path}" }}
"""):
            pass


_COMPLAINT = re.compile(r"\[(ERR|WRN)\].*(malformed|[Cc]orrupt|catchup|[Cc]atch ?up|vote|append ?entry|peer state|"
                        r"unknown peer|invalid peer|[Ii]gnoring)")


@pytest.fixture
def go_cluster(tmp_path):
    """Three Go servers; after the test, none of them logged a complaint about RAFT traffic (ours included)."""
    gc = CAP.GoCluster(tmp_path)
    gc.start_all()
    try:
        yield gc
    finally:
        gc.stop_all()
    # (a Go meta leader that tries to snapshot while it is catching a follower up logs that it could not,
    # whoever the follower is: its own timing, not a complaint about the follower's traffic)
    complaints = [line for n in gc.names for line in (tmp_path / f"{n}.log").read_text().splitlines()
                  if _COMPLAINT.search(line) and "can not be installed while catchups running" not in line]
    assert not complaints, "\n".join(complaints[:20])


@pytestmark_live
async def test_rillet_joins_go_meta_group_late_and_applies_assignments(go_cluster):
    import nats
    gc = go_cluster
    nc = await nats.connect(gc.url("g0"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        js = nc.jetstream()
        await js.add_stream(name="EARLY", subjects=["early.>"], num_replicas=3)
        await js.add_consumer("EARLY", durable_name="c1")
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)
            # it catches up on what was decided before it came, then follows what comes after
            await _until(lambda: ("A", "EARLY") in m.state.streams, what="EARLY on the Rillet server")
            assert "c1" in m.state.consumers[("A", "EARLY")]
            await js.add_stream(name="LATER", subjects=["later.>"], num_replicas=1, storage="memory")
            await js.add_consumer("LATER", durable_name="c2")
            await _until(lambda: "c2" in m.state.consumers.get(("A", "LATER"), {}), what="LATER/c2")
            sa = m.state.streams[("A", "LATER")]
            assert sa["stream"]["storage"] == "memory" and len(sa["group"]["peers"]) == 1
            assert sa["group"]["name"].startswith("S-R1M-")
            await js.delete_consumer("EARLY", "c1")
            await js.delete_stream("LATER")
            await _until(lambda: ("A", "LATER") not in m.state.streams
                         and "c1" not in m.state.consumers[("A", "EARLY")], what="removals applied")
            assert m.refused == 0

            # the Go side counts the Rillet server as a current member of its meta group (polled: a busy Go
            # leader may answer the ping late, or see the member's last answer as a moment old)
            async def counted():
                views = await _meta_views(gc, "g0")
                lv = views.get(next((v["leader"] for v in views.values() if v and v.get("leader")), ""))
                r1 = [r for r in (lv or {}).get("replicas", []) if r["peer"] == m.peer]
                return lv if lv and lv["cluster_size"] == 4 and r1 and r1[0]["name"] == "r1" and r1[0]["current"] \
                    else None
            leader_view = await CAP._until(counted, 45, what="the Go leader counting r1 as a current member")
            await _until(lambda: m.status()["leader"] == gw.peer_id(leader_view["leader"]), what="r1 following it")
    finally:
        await nc.close()


@pytestmark_live
async def test_go_meta_group_needs_the_rillet_vote_and_ack(go_cluster):
    import nats
    gc = go_cluster
    sysnc = await nats.connect(gc.url("g0", "sys"))
    nc = await nats.connect(gc.url("g0"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)

            async def four():
                views = await _meta_views(gc, "g0")
                lv = views.get(next((v["leader"] for v in views.values() if v and v.get("leader")), ""))
                return bool(lv) and lv.get("cluster_size") == 4 and any(
                    r["peer"] == m.peer and r["current"] for r in lv.get("replicas", []))

            await CAP._until(four, 45, what="the Go leader to add the Rillet server")
            # one Go server down: 3 of the 4 members remain and every election and commit needs the Rillet one
            leader = m.status()["leader"]
            victim = next(n for n in ("g1", "g2") if gw.peer_id(n) != leader)
            gc.stop(victim)
            votes = m.raft.votes_granted
            await sysnc.request("$JS.API.META.LEADER.STEPDOWN", b"{}", timeout=15)
            # (the old leader may still answer a moment after its step-down: the Rillet vote is waited for first)
            await _until(lambda: m.raft.votes_granted > votes and m.raft.leader, 60,
                         what="a new meta leader elected with the Rillet vote")
            await CAP._until(lambda: CAP._js_ready(nc), 60, what="a new meta leader with one Go server down")
            tav = (gc.root / "store-r1" / "go_meta" / "_meta_" / "tav.idx").read_bytes()
            assert int.from_bytes(tav[8:], "little") == m.raft.term  # the vote was made durable
            js = nc.jetstream(timeout=30)
            await js.add_stream(name="NEEDS_R1", subjects=["n.>"], num_replicas=1)
            await _until(lambda: ("A", "NEEDS_R1") in m.state.streams, what="NEEDS_R1 applied on Rillet")
            # and without the Rillet server (2 of 4 members up) the Go servers can not commit a stream
            m.stop()
            await asyncio.sleep(0.5)
            try:
                r = await nc.request("$JS.API.STREAM.CREATE.BLOCKED", json.dumps(
                    {"name": "BLOCKED", "subjects": ["b.>"], "num_replicas": 1}).encode(), timeout=5)
            except nats.errors.TimeoutError:
                pass
            else:
                assert json.loads(r.data).get("error"), r.data
    finally:
        await nc.close()
        await sysnc.close()


@pytestmark_live
async def test_two_go_servers_and_one_rillet_form_the_meta_group(tmp_path):
    """The issue's drill: 2 Go + 1 Rillet in one cluster (every server routes to the other two). The meta group
    has the three of them; with one Go server down the remaining Go server and the Rillet one still elect a
    leader and commit."""
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    try:
        async with serve_config(_rillet_conf(gc, port=rport)) as srv:
            m = await _member(srv)
            rnc = await nats.connect(gc.url("g0"))
            sysnc = await nats.connect(gc.url("g0", "sys"))
            try:
                await CAP._until(lambda: CAP._js_ready(rnc), 60, what="the Go meta leader")
                await _until(lambda: m.status()["leader"] != "" and m.raft.commit > 0, what="the member following")

                async def three() -> bool:
                    views = await _meta_views(gc, "g0")
                    lv = views.get(next((v["leader"] for v in views.values() if v and v.get("leader")), ""))
                    return bool(lv) and lv["cluster_size"] == 3 and (
                        {r["name"] for r in lv["replicas"]} | {lv["leader"]} == {"g0", "g1", "r1"})

                await CAP._until(three, 45, what="a meta group of g0, g1 and r1")
                # (a group whose preferred leader is Rillet: the Go peers elect one of them after a timeout)
                js = rnc.jetstream(timeout=30)
                await js.add_stream(name="VIA_RILLET", subjects=["via.>"], num_replicas=2)
                ack = await js.publish("via.x", b"hello")
                assert ack.seq == 1
                await _until(lambda: ("A", "VIA_RILLET") in m.state.streams, what="VIA_RILLET on Rillet")
                peers = m.state.streams[("A", "VIA_RILLET")]["group"]["peers"]
                # (two of the three: the Go meta leader places on the Rillet server too, test_jscluster_goplace)
                assert len(set(peers)) == 2 and set(peers) <= {gw.peer_id(n) for n in (*gc.names, "r1")}
                # a client of the Rillet server uses the cluster's JetStream, as its account (A)
                cnc = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
                try:
                    info = json.loads((await cnc.request("$JS.API.INFO", b"", timeout=15)).data)
                    assert info["type"] == "io.nats.jetstream.api.v1.account_info_response" and info["streams"] == 1
                    cjs = cnc.jetstream(timeout=30)
                    assert (await cjs.publish("via.y", b"from rillet")).seq == 2
                    msg = await cjs.get_msg("VIA_RILLET", 2)
                    assert msg.data == b"from rillet"
                finally:
                    await cnc.close()
                # a Go server down: 2 of 3 remain, one of them Rillet
                leader = m.status()["leader"]
                victim = "g1" if gw.peer_id("g1") == leader else "g0"
                keep = "g0" if victim == "g1" else "g1"
                await sysnc.close()
                gc.stop(victim)
                knc = await nats.connect(gc.url(keep))
                try:
                    await CAP._until(lambda: CAP._js_ready(knc), 60, what="a leader from one Go server + Rillet")
                    await _until(lambda: m.status()["leader"] == gw.peer_id(keep), what=f"r1 following {keep}")
                    await knc.jetstream(timeout=30).add_stream(name="AFTER", subjects=["after.>"], num_replicas=1)
                    await _until(lambda: ("A", "AFTER") in m.state.streams, what="AFTER committed and applied")
                finally:
                    await knc.close()
            finally:
                await rnc.close()
                if sysnc.is_connected:
                    await sysnc.close()
    finally:
        gc.stop_all()


@pytestmark_live
async def test_rillet_member_removed_restarted_and_rejoining(go_cluster):
    """SERVER.REMOVE of the Rillet server: it applies its own removal and leaves the group (as nats-server), the
    Go leader counts 3 members again; restarted on the same store (its term and vote read back), it is caught
    up again. (Whether the Go leader adds it back after its hold on removed peers is not tested here.)"""
    import nats
    gc = go_cluster
    sysnc = await nats.connect(gc.url("g0", "sys"))
    nc = await nats.connect(gc.url("g0"))
    conf = _rillet_conf(gc)
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        await nc.jetstream(timeout=30).add_stream(name="KEEP", subjects=["keep.>"], num_replicas=3)
        async with serve_config(conf) as srv:
            m = await _member(srv)
            await _until(lambda: ("A", "KEEP") in m.state.streams, what="KEEP applied")

            async def size() -> int:
                views = await _meta_views(gc, "g0")
                lv = views.get(next((v["leader"] for v in views.values() if v and v.get("leader")), ""))
                return lv.get("cluster_size", 0) if lv else 0

            await CAP._until(lambda: _is(size(), 4), 45, what="4 members")
            r = await sysnc.request("$JS.API.SERVER.REMOVE", json.dumps({"peer": "r1"}).encode(), timeout=15)
            assert json.loads(r.data).get("success"), r.data
            await _until(lambda: m.removed, what="the member to apply its removal")
            assert member_of(srv) is m and m.ic is not None and not m._subs
            await CAP._until(lambda: _is(size(), 3), 45, what="3 members again")
            term = m.raft.term
        # restarted: the same durable term and vote, caught up from scratch (its log was not kept)
        async with serve_config(conf) as srv2:
            m2 = await _member(srv2)
            assert m2.raft.term >= term
            await _until(lambda: ("A", "KEEP") in m2.state.streams, 60, what="KEEP applied after the restart")
    finally:
        await nc.close()
        await sysnc.close()


async def _is(coro, value) -> bool:
    return (await coro) == value


@pytestmark_live
async def test_leadership_handed_to_rillet_goes_on_to_a_go_server(go_cluster):
    """A meta step-down that prefers the Rillet server (which does not lead) ends with a Go leader sooner than
    Go's election timeout (4-9 s): the member asks for votes with an empty log, the Go servers refuse and
    campaign at once."""
    import nats
    gc = go_cluster
    sysnc = await nats.connect(gc.url("g0", "sys"))
    nc = await nats.connect(gc.url("g0"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)
            await _until(lambda: m.status()["leader"] and m.raft.commit > 0, what="the member following")
            took, refused = [], []
            # (the Go leader only transfers to a peer it heard from recently, and a busy machine can delay the
            # election: up to five step-downs, until one ended sooner than Go's election timeout)
            for _ in range(5):
                await asyncio.sleep(1.5)
                term0 = m.raft.term
                t0 = time.monotonic()
                r = json.loads((await sysnc.request("$JS.API.META.LEADER.STEPDOWN", json.dumps(
                    {"placement": {"preferred": "r1"}}).encode(), timeout=15)).data)
                if not r.get("success"):
                    refused.append(r)  # (while the Go leader counts r1 as not current yet: asked again)
                    continue
                # (the leader of the new term may be the same Go server again)
                await _until(lambda: m.raft.leader and m.raft.term > term0, 40, what="a Go meta leader elected")
                took.append(time.monotonic() - t0)
                if min(took) < 3.5:
                    break
            assert m.raft.handoffs >= 1
            assert took and min(took) < 3.5, (took, refused)
            assert m.status()["leader"] in {gw.peer_id(n) for n in gc.names}
    finally:
        await nc.close()
        await sysnc.close()


@pytestmark_live
async def test_rillet_catches_up_from_a_go_meta_snapshot(go_cluster):
    """After a restart of the whole Go cluster its meta log is compacted into a snapshot: a Rillet server that
    joins then is caught up with the snapshot (an append entry of ENTRY_SNAPSHOT + ENTRY_PEER_STATE)."""
    import nats
    gc = go_cluster
    nc = await nats.connect(gc.url("g0"))
    await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
    js = nc.jetstream(timeout=30)
    for i in range(3):
        await js.add_stream(name=f"SNAP{i}", subjects=[f"snap{i}.>"], num_replicas=3)
    await js.add_consumer("SNAP0", durable_name="d0")
    await nc.close()
    gc.stop_all()
    gc.start_all()
    nc = await nats.connect(gc.url("g0"))
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader after the restart")
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)
            await _until(lambda: {"SNAP0", "SNAP1", "SNAP2"} <= set(m.state.stream_names("A")), 60,
                         what="the snapshot applied on Rillet")
            assert m.state.snapshots >= 1
            assert "d0" in m.state.consumers[("A", "SNAP0")]
            assert m.refused == 0
    finally:
        await nc.close()


# -- bad and hostile input ---------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_CORPUS = CAP.from_json(json.loads(CORPUS.read_text()))
_META_MSGS = [(s, r, d) for s, r, d in _CORPUS["messages"] if s in ("$NRG.AE._meta_", "$NRG.V._meta_")]
_META_ENTRIES = [e for s, r, d in _META_MSGS if s == "$NRG.AE._meta_" for e in gw.AppendEntry.decode(d).entries]
_PEERS = ["LeAdEr01", "LeAdEr02", "candA001"]


@st.composite
def _traffic(draw):
    ops = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["ae", "ae", "ae", "vote", "captured", "mutated", "catchup"]))
        if kind in ("ae", "catchup"):
            n = draw(st.integers(0, 3))
            entries = tuple(draw(st.sampled_from(_META_ENTRIES)) for _ in range(n))
            if draw(st.booleans()) and kind == "catchup":
                entries = (gw.Entry(gw.ENTRY_SNAPSHOT, draw(st.binary(max_size=20))),
                           gw.Entry(gw.ENTRY_PEER_STATE, draw(st.binary(max_size=20))))
            ae = gw.AppendEntry(draw(st.sampled_from(_PEERS)), draw(st.integers(0, 5)), draw(st.integers(0, 12)),
                                draw(st.integers(0, 5)), draw(st.integers(0, 10)), entries,
                                draw(st.sampled_from([0, None, 3, 6])))
            ops.append((kind, ae.encode()))
        elif kind == "vote":
            vr = gw.VoteRequest(draw(st.integers(0, 6)), draw(st.integers(0, 5)), draw(st.integers(0, 10)),
                                draw(st.sampled_from(_PEERS)))
            ops.append(("vote", vr.encode()))
        else:
            s, r, d = draw(st.sampled_from(_META_MSGS))
            d = bytearray(d)
            if kind == "mutated" and d:
                for _ in range(draw(st.integers(1, 3))):
                    i = draw(st.integers(0, len(d) - 1))
                    d[i] = draw(st.integers(0, 255))
                if draw(st.booleans()):
                    del d[draw(st.integers(0, len(d))):]
            ops.append(("vote" if s.startswith("$NRG.V") else "ae", bytes(d)))
    return ops


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_traffic())
def test_follower_never_breaks_under_random_and_corrupt_traffic(ops):
    """Whatever arrives (stale terms, indexes past the log, conflicting leaders, corrupt bytes, snapshots that
    do not decode): only GoWireError for what does not decode, terms and commits never go back, at most one
    vote per term, entries applied once each in index order, the state machine refuses cleanly."""
    from rillet.jetstream.cluster.gometa import GoMetaState
    f = _follower()
    state = GoMetaState()
    granted: dict[int, str] = {}
    last_applied = 0
    last_term = last_commit = 0
    t = 0.0
    for kind, data in ops:
        t += 0.5
        try:
            if kind == "vote":
                vr = gw.VoteRequest.decode(data)
                out = f.vote(vr, "$NRG.R.v")
                resp = gw.VoteResponse.decode(out[0].payload)
                if resp.granted:
                    assert granted.setdefault(resp.term, vr.candidate) == vr.candidate
                done = []
            else:
                ae = gw.AppendEntry.decode(data)
                if kind == "catchup" and f.catchup is not None:
                    _out, done = f.append("catchup", f.catchup.inbox, "", ae, t)
                else:
                    _out, done = f.append("append", "", "$NRG.R.l", ae, t)
        except gw.GoWireError:
            continue
        assert f.term >= last_term and f.commit >= last_commit and f.commit <= f.pindex
        last_term, last_commit = f.term, f.commit
        prev = last_applied
        for i, item in enumerate(done):
            # indexes go up from one call to the next; the entries of one append entry share its index
            assert item.index > prev or (item.snapshot and item.index >= prev) or (i and item.index == last_applied)
            last_applied = item.index
            try:
                state.apply(item)
            except gw.GoWireError:
                pass
