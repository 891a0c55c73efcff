"""nats-server's RAFT ($NRG) and JetStream cluster ($JSC, log entries) encodings against real Go traffic.

The corpus tests/data/nrg_go_corpus.json was recorded from a 3-server nats-server 2.15 cluster by
scripts/nrg_capture.py (a system-account client subscribed to $NRG.> and $JSC.> while a workload ran, then the
RAFT snapshot files the servers left). Every message and every entry in it must decode with
rillet.raft.gowire / rillet.jetstream.cluster.gowire and encode back to the identical bytes; the live test
records a fresh corpus from the installed nats-server and checks the same. Property tests feed mutated
captured messages to the decoders: they decode or raise GoWireError, nothing else.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rillet.cluster import s2
from rillet.jetstream.cluster import gowire as ge
from rillet.raft import gowire as gw

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "data" / "nrg_go_corpus.json"


def _capture_module():
    spec = importlib.util.spec_from_file_location("nrg_capture", ROOT / "scripts" / "nrg_capture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def corpus():
    return _capture_module().from_json(json.loads(CORPUS.read_text()))


GROUP_RE = re.compile(r"^[SC]-R\d[FM]-[0-9A-Za-z]{8}$")


def check_capture(cap: dict) -> dict:
    """Decode and re-encode everything in a capture; returns what was seen (for coverage checks)."""
    seen = {"msg": set(), "entry": set(), "op": set(), "jsc": set(), "leaders": set(), "peers": set(),
            "groups": set()}
    leader_inbox: dict[str, str] = {}  # a leader's response inbox -> its group
    catchup_group: dict[str, str] = {}  # a follower's catch-up inbox (the reply of its response) -> group
    for subject, reply, data in cap["messages"]:
        if subject.startswith("$JSC."):
            m = ge.decode_jsc(subject, data)
            assert m.encode() == data, (subject, data[:100])
            seen["jsc"].add((ge.parse_jsc_subject(subject)[0], type(m).__name__))
            if isinstance(m, ge.JsonEntry):
                seen["op"].add(ge.OP_NAMES[m.op])
            continue
        kind, tok = gw.parse_subject(subject)
        m = gw.decode_message(subject, reply, data)
        assert m.encode() == data, (subject, type(m).__name__, data[:100])
        seen["msg"].add((kind, type(m).__name__))
        if kind in ("vote", "append", "proposal", "remove_peer"):
            seen["groups"].add(tok)
        if kind == "reply" and reply and subject in leader_inbox:
            catchup_group[gw.parse_subject(reply)[1]] = leader_inbox[subject]
        if isinstance(m, gw.VoteRequest):
            seen["leaders"].add(m.candidate)
        elif isinstance(m, (gw.VoteResponse, gw.AppendEntryResponse)):
            seen["peers"].add(m.peer)
        elif isinstance(m, gw.AppendEntry):
            if m.leader:
                seen["leaders"].add(m.leader)
            group = tok if kind == "append" else catchup_group.get(tok)
            if kind == "append" and reply:
                leader_inbox[reply] = tok
            for e in m.entries:
                seen["entry"].add(gw.ENTRY_TYPE_NAMES[e.type])
                if e.type == gw.ENTRY_NORMAL:
                    x = ge.decode_entry(e.data)
                    assert x.encode() == e.data, (subject, e.data[:200])
                    op = e.data[0]
                    seen["op"].add(ge.OP_NAMES[op])
                    if group == gw.META_GROUP:
                        assert op in ge.META_OPS
                    elif group and group.startswith("S-"):
                        assert op in ge.STREAM_OPS
                    elif group and group.startswith("C-"):
                        assert op in ge.CONSUMER_OPS
                    if isinstance(x, ge.JsonEntry) and op in (ge.OP_ASSIGN_STREAM, ge.OP_ASSIGN_CONSUMER):
                        g = x.doc["group"]
                        assert GROUP_RE.match(g["name"]), g
                        seen["peers"].update(g["peers"])
                    if isinstance(x, ge.CompressedStreamMsg):
                        # our own compression of the same message reads back alike
                        again = ge.decode_entry(bytes((ge.OP_COMPRESSED_STREAM_MSG,)) + s2.compress_block(x.msg.body()))
                        assert again.msg == x.msg
                elif e.type == gw.ENTRY_PEER_STATE:
                    ps = gw.PeerState.decode(e.data)
                    assert ps.encode() == e.data
                    seen["peers"].update(ps.known_peers)
                elif e.type in (gw.ENTRY_ADD_PEER, gw.ENTRY_REMOVE_PEER, gw.ENTRY_LEADER_TRANSFER):
                    assert len(e.data) == gw.ID_LEN
                    seen["peers"].add(e.data.decode())
                elif e.type == gw.ENTRY_SNAPSHOT and group == gw.META_GROUP:
                    seen["meta_snapshot_wire"] = ge.decode_meta_snapshot(e.data)
    for group, name, data in cap["snapshots"]:
        snap = gw.Snapshot.decode(data)
        assert snap.encode() == data
        ps = gw.PeerState.decode(snap.peer_state)
        assert ps.encode() == snap.peer_state
        seen["peers"].update(ps.known_peers)
        if group == gw.META_GROUP:
            plain = s2.decompress_block(snap.data)
            doc = ge.decode_meta_snapshot(snap.data)
            # the JSON re-encodes to Go's bytes; our compressed form decodes to the same document
            from rillet.gocompat import gojson
            assert gojson.dumps(doc) == plain
            assert ge.decode_meta_snapshot(ge.encode_meta_snapshot(doc)) == doc
            seen["meta_snapshot_file"] = doc
    return seen


def test_corpus_round_trips_and_covers_the_protocol(corpus):
    seen = check_capture(corpus)
    assert {("vote", "VoteRequest"), ("reply", "VoteResponse"), ("append", "AppendEntry"),
            ("reply", "AppendEntryResponse"), ("catchup", "AppendEntry"),
            ("catchup_progress", "AppendEntryResponse")} <= seen["msg"]
    assert {"Normal", "PeerState", "AddPeer", "RemovePeer", "LeaderTransfer", "Snapshot"} <= seen["entry"]
    assert {"assignStream", "assignConsumer", "removeStream", "removeConsumer", "updateStream", "streamMsg",
            "compressedStreamMsg", "purgeStream", "deleteMsg", "batchMsg", "batchCommitMsg", "updateDelivered",
            "updateAcks", "updateSkip", "addPendingRequest", "removePendingRequest", "resetSeq",
            "deleteRange"} <= seen["op"]
    assert {("SYNC", "JsonDoc"), ("R", "StreamMsg"), ("R", "JsonEntry"), ("R", "Empty"), ("SI", "JsonDoc"),
            ("R", "JsonDoc"), ("CI", "Empty"), ("ACK", "Empty"), ("ARU", "UsageUpdate")} <= seen["jsc"]
    assert {a["stream"]["name"] for a in seen["meta_snapshot_file"]} >= {"ORDERS", "MEM", "KV_CFG"}
    assert seen["meta_snapshot_wire"]
    assert "_meta_" in seen["groups"]
    assert all(g == "_meta_" or GROUP_RE.match(g) for g in seen["groups"])


def test_peer_ids_are_the_hash_of_the_server_names(corpus):
    seen = check_capture(corpus)
    ids = {gw.peer_id(n) for n in corpus["servers"]}
    # every id Go used (leaders, candidates, voters, peer states, group members) is one of ours, all are used
    assert seen["leaders"] <= ids
    assert seen["peers"] == ids
    assert len(ids) == 3


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
def test_live_go_cluster_traffic_round_trips(tmp_path):
    cap = _capture_module().capture(tmp_path)
    seen = check_capture(cap)
    assert {gw.peer_id(n) for n in cap["servers"]} == seen["peers"]
    assert {"assignStream", "streamMsg", "updateAcks", "updateDelivered"} <= seen["op"]
    assert len(cap["messages"]) > 200
    # an index is one append entry, however many entries it carries: a leader's next append entry in the same
    # term follows at pindex + 1 (checked on the full, in-order recording of each group's $NRG.AE. subject)
    last: dict[str, gw.AppendEntry] = {}
    multi = checked = 0
    for subject, _reply, data in cap["messages"]:
        if not subject.startswith("$NRG.AE."):
            continue
        ae = gw.AppendEntry.decode(data)
        prev = last.get(subject)
        if prev is not None and prev.entries and prev.leader == ae.leader and prev.term == ae.term:
            assert ae.pindex == prev.pindex + 1, (subject, prev, ae)
            checked += 1
            multi += len(prev.entries) > 1
        last[subject] = ae
    assert checked > 50 and multi > 0


# -- unit checks of the encodings --------------------------------------------------------------------------

def test_uvarint_varint_like_go():
    for v in (0, 1, 127, 128, 300, 1 << 35, (1 << 64) - 1):
        assert gw.get_uvarint(gw.put_uvarint(v)) == (v, len(gw.put_uvarint(v)))
    for v in (0, -1, 1, -64, 64, -(1 << 63), (1 << 63) - 1):
        assert gw.get_varint(gw.put_varint(v))[0] == v
    assert gw.put_varint(-1) == b"\x01" and gw.put_varint(1) == b"\x02"
    with pytest.raises(gw.GoWireError):
        gw.get_uvarint(b"\xff" * 10)
    with pytest.raises(gw.GoWireError):
        gw.get_uvarint(b"\x80")


def test_message_layouts():
    ae = gw.AppendEntry("abcdEFGH", 3, 10, 2, 9, (gw.Entry(gw.ENTRY_NORMAL, b"xy"),), 0)
    raw = ae.encode()
    assert raw[:8] == b"abcdEFGH" and len(raw) == 8 + 32 + 2 + 4 + 1 + 2 + 1
    assert raw[40:42] == b"\x01\x00" and raw[42:46] == b"\x03\x00\x00\x00" and raw[46] == 0
    assert gw.AppendEntry.decode(raw) == ae
    hb = gw.AppendEntry("", 1, 0, 0, 0, (), None)
    assert gw.AppendEntry.decode(hb.encode()) == hb
    vr = gw.VoteResponse(7, "abcdEFGH", True, True)
    assert vr.encode()[-1] == 3 and gw.VoteResponse.decode(vr.encode()) == vr
    ar = gw.AppendEntryResponse(1, 2, "abcdEFGH", False)
    assert len(ar.encode()) == 25 and gw.AppendEntryResponse.decode(ar.encode()) == ar
    ps = gw.PeerState(("abcdEFGH", "12345678"), 3, gw.EXT_NOT_EXTENDED)
    assert gw.PeerState.decode(ps.encode()) == ps
    with pytest.raises(gw.GoWireError):
        gw.AppendEntry("short", 1, 0, 0, 0).encode()
    assert gw.parse_subject("$NRG.AE._meta_") == ("append", "_meta_")
    with pytest.raises(gw.GoWireError):
        gw.parse_subject("$NRG.X._meta_")


def test_group_names_and_inboxes():
    assert GROUP_RE.match(gw.group_name("S", 3, "file"))
    assert gw.group_name("C", 1, "memory").startswith("C-R1M-")
    assert re.match(r"^\$NRG\.R\.[0-9A-Za-z]{8}$", gw.new_inbox())
    assert re.match(r"^\$NRG\.CR\.[0-9A-Za-z]{8}$", gw.new_catchup_inbox())


def test_entry_encoders():
    m = ge.StreamMsg(5, 1_700_000_000_000_000_000, "orders.1", "", b"NATS/1.0\r\nA: b\r\n\r\n", b"hi", 0)
    assert ge.decode_entry(m.encode()) == m
    big = ge.StreamMsg(6, 1, "s", "", b"", b"a" * 20000, 1)
    enc = big.encode_maybe_compressed()
    assert enc[0] == ge.OP_COMPRESSED_STREAM_MSG and ge.decode_entry(enc).msg == big and big.sourced
    b = ge.BatchMsg(True, "b1", 3, m)
    assert ge.decode_entry(b.encode()) == b
    for x in (ge.UpdateDelivered(1, 2, 3, -5), ge.UpdateAcks(4, 5), ge.UpdateSkip(9), ge.ResetSeq(7, "_INBOX.x"),
              ge.PendingRequest(True, "_INBOX.y"), ge.PendingRequest(False, "_INBOX.y")):
        assert ge.decode_entry(x.encode()) == x
    doc = {"client": {"acc": "A"}, "stream": {"name": "X<y>"}}
    raw = ge.encode_json_entry(ge.OP_ASSIGN_STREAM, doc)
    assert b"\\u003c" in raw and raw.endswith(b"}\n")
    assert ge.decode_entry(raw).doc == doc
    cca = ge.CompressedConsumerAssignment(doc)
    assert ge.decode_entry(cca.encode()).doc == doc
    u = ge.UsageUpdate((("", 10, 20), ("R3", 1, 2)), 5, 1)
    assert ge.UsageUpdate.decode(u.encode()) == u


# -- mutated Go traffic is refused cleanly -----------------------------------------------------------------

def _samples():
    cap = _capture_module().from_json(json.loads(CORPUS.read_text()))
    msgs = cap["messages"]
    # a spread of every kind of message: all non-heartbeat append entries and some of everything else
    picked = [m for m in msgs if not m[0].startswith("$NRG.R.")][:400] + [m for m in msgs if m[0].startswith("$NRG.R.")][:20]
    return picked


SAMPLES = _samples()


def _decode_any(subject: str, reply: str, data: bytes):
    if subject.startswith("$JSC."):
        return ge.decode_jsc(subject, data)
    m = gw.decode_message(subject, reply, data)
    if isinstance(m, gw.AppendEntry):
        for e in m.entries:
            if e.type == gw.ENTRY_NORMAL:
                ge.decode_entry(e.data)
            elif e.type == gw.ENTRY_PEER_STATE:
                gw.PeerState.decode(e.data)
    return m


@st.composite
def mutated(draw):
    subject, reply, data = draw(st.sampled_from(SAMPLES))
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "append", "set"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=8))
    return subject, reply, bytes(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_go_messages_decode_or_are_refused(sample):
    subject, reply, data = sample
    try:
        m = _decode_any(subject, reply, data)
    except gw.GoWireError:
        return
    # what decodes is a message nats-server could have sent: the RAFT layer re-encodes it exactly
    if not subject.startswith("$JSC."):
        assert m.encode() == data


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.sampled_from(["$NRG.AE.g", "$NRG.V.g", "$NRG.R.x", "$NRG.CP.x",
                                                 "$NRG.RP.g", "$JSC.R.x", "$JSC.ARU.A.p", "$JSC.SYNC.x"]))
def test_random_bytes_decode_or_are_refused(data, subject):
    try:
        _decode_any(subject, "", data)
    except gw.GoWireError:
        pass
    try:
        ge.decode_entry(data)
    except gw.GoWireError:
        pass
    try:
        ge.decode_meta_snapshot(data)
    except gw.GoWireError:
        pass
    try:
        gw.Snapshot.decode(data)
    except gw.GoWireError:
        pass
