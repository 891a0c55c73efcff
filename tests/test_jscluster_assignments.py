"""The meta group's state machine (rillet/jetstream/cluster/assignments.py): entries in nats-server's
encoding, deterministic apply, snapshot/restore."""
from __future__ import annotations

import json
import random
import re

import pytest

from rillet.jetstream.cluster.assignments import (
    META_GROUP, ConsumerAssignment, EntryOp, MetaEntryError, MetaState, RaftGroup, StreamAssignment,
    consumer_group_name, decode_entry, encode_assign_consumer, encode_assign_stream, encode_peer_add,
    encode_peer_remove, encode_remove_consumer, encode_remove_stream, encode_update_stream, stream_group_name,
    sync_subject)
from rillet.jetstream.cluster.peers import peer_id

PEERS = [peer_id(n) for n in ("g0", "g1", "g2")]
T0 = 1_764_000_000_123_456_789


def sa(name="S", acc="A", group="S-R3F-aaaaaaaa", peers=PEERS, created=T0, **cfg):
    return StreamAssignment({"name": name, "subjects": [name.lower()], "num_replicas": len(peers), **cfg},
                            RaftGroup(group, list(peers), "file", "gc", peers[0]), "$JSC.SYNC.abcdefgh",
                            {"acc": acc, "user": "u", "jwt": "eyJ...", "issuer_key": "AK", "cluster": "gc"},
                            created, "$JS.API.STREAM.CREATE." + name, "_INBOX.r")


def ca(name="D", stream="S", acc="A", group="C-R3F-bbbbbbbb", peers=PEERS, created=T0 + 1):
    return ConsumerAssignment(name, stream, {"durable_name": name, "ack_policy": "explicit"},
                              RaftGroup(group, list(peers), "file"), {"acc": acc}, created,
                              f"$JS.API.CONSUMER.CREATE.{stream}.{name}", "_INBOX.c")


def test_group_names_and_sync_subjects():
    assert META_GROUP == "_meta_"
    assert re.fullmatch(r"S-R3F-[0-9A-Za-z]{8}", stream_group_name(PEERS, "file"))
    assert re.fullmatch(r"C-R1M-[0-9A-Za-z]{8}", consumer_group_name(PEERS[:1], "memory"))
    assert len({stream_group_name(PEERS, "file") for _ in range(50)}) == 50
    assert re.fullmatch(r"\$JSC\.SYNC\.[0-9A-Za-z]{8}", sync_subject())


def test_entries_in_nats_server_encoding():
    e = encode_assign_stream(sa())
    assert e[0] == 0
    d = json.loads(e[1:])
    assert list(d) == ["client", "created", "stream", "group", "sync", "subject", "reply"]
    assert d["client"] == {"acc": "A", "user": "u", "cluster": "gc"}  # no jwt/issuer_key in proposals
    assert d["created"] == "2025-11-24T16:00:00.123456789Z"
    assert d["group"] == {"name": "S-R3F-aaaaaaaa", "peers": PEERS, "store": "file", "cluster": "gc",
                          "preferred": PEERS[0]}
    assert encode_update_stream(sa())[0] == 11 and encode_remove_stream(sa())[0] == 2
    c = encode_assign_consumer(ca())
    assert c[0] == 1 and encode_remove_consumer(ca())[0] == 3
    assert list(json.loads(c[1:])) == ["client", "created", "name", "stream", "consumer", "group", "subject", "reply"]
    assert encode_peer_remove(PEERS[1]) == b"\x80" + PEERS[1].encode()


@pytest.mark.parametrize("entry", [
    encode_assign_stream(sa()), encode_update_stream(sa(max_msgs=5)), encode_remove_stream(sa()),
    encode_assign_consumer(ca()), encode_remove_consumer(ca()), encode_peer_remove(PEERS[0]),
    encode_peer_add(PEERS[2]),
])
def test_round_trip(entry):
    d = decode_entry(entry)
    again = {EntryOp.ASSIGN_STREAM: encode_assign_stream, EntryOp.UPDATE_STREAM: encode_update_stream,
             EntryOp.REMOVE_STREAM: encode_remove_stream}
    if d.stream is not None:
        assert again[d.op](d.stream) == entry
    elif d.consumer is not None:
        assert (encode_assign_consumer if d.op == EntryOp.ASSIGN_CONSUMER else encode_remove_consumer)(d.consumer) == entry
    else:
        assert (encode_peer_remove if d.op == EntryOp.PEER_REMOVE else encode_peer_add)(d.peer) == entry


def test_decodes_a_go_stream_assignment():
    # an assignment as nats-server writes it (json.Encoder: trailing newline; Go's restore/unknown fields)
    go = (b'\x00{"client":{"start":"2026-11-25T16:31:30.160911363Z","host":"127.0.0.1","id":21,"acc":"A",'
          b'"user":"a","server":"g0","cluster":"gc","kind":"Client"},"created":"2026-11-25T16:31:30.165588799Z",'
          b'"stream":{"name":"S3","subjects":["s3"],"num_replicas":3},"group":{"name":"S-R3F-7NKRE64g",'
          b'"peers":["uRE0XIhW","pKmyMGN4","FlDeG4Ai"],"store":"file","cluster":"gc","preferred":"uRE0XIhW"},'
          b'"sync":"$JSC.SYNC.x7dC9k1R","subject":"$JS.API.STREAM.CREATE.S3","reply":"_INBOX.x"}\n')
    m = MetaState()
    a = m.apply(go)
    assert a.changed and a.account == "A" and a.stream.name == "S3"
    assert m.stream("A", "S3").group.peers == [peer_id("g0"), peer_id("g1"), peer_id("g2")]


@pytest.mark.parametrize("entry, err", [
    (b"", "empty meta entry"),
    (b"\x07{}", "unknown meta entry op type: 7"),
    (b"\x09abc", "compressed"),
    (b"\x00{not json", "bad JSON"),
    (b"\x00{}", "without a stream config name"),
    (b'\x00{"stream":{"name":"S"},"group":{"peers":[]}}', "raft group without a name"),
    (b'\x00{"stream":{"name":"S"},"group":{"name":"g","store":"disk"}}', "unknown store"),
    (b'\x00{"stream":{"name":"S"},"group":{"name":"g"},"created":"yesterday"}', "bad created time"),
    (b'\x01{"name":"D"}', "without name, stream or consumer config"),
    (b"\x80short", "bad peer id"),
])
def test_bad_entries_change_nothing(entry, err):
    m = MetaState()
    m.apply(encode_assign_stream(sa()))
    before = m.snapshot()
    with pytest.raises(MetaEntryError, match=err):
        m.apply(entry)
    assert m.snapshot() == before


def test_apply_semantics():
    m = MetaState()
    assert m.apply(encode_assign_consumer(ca())).changed is False  # stream not there yet
    assert m.apply(encode_update_stream(sa())).changed is False  # update of an unknown stream
    a = m.apply(encode_assign_stream(sa()))
    assert a.changed and a.previous is None
    assert m.apply(encode_assign_consumer(ca())).changed
    assert m.consumer("A", "S", "D").group.name == "C-R3F-bbbbbbbb"
    # an update keeps the consumers and hands back the previous assignment
    u = m.apply(encode_update_stream(sa(max_msgs=10)))
    assert u.changed and u.previous.config.get("max_msgs") is None
    assert m.stream("A", "S").config["max_msgs"] == 10 and "D" in m.stream("A", "S").consumers
    # removing a consumer of another incarnation (other group) does nothing
    assert m.apply(encode_remove_consumer(ca(group="C-R3F-zzzzzzzz"))).changed is False
    assert m.apply(encode_remove_consumer(ca())).changed
    assert m.consumer("A", "S", "D") is None
    # accounts are apart; svc wins over acc
    m.apply(encode_assign_stream(sa(acc="B")))
    other = sa(name="S")
    other.client = {"acc": "A", "svc": "C"}
    m.apply(encode_assign_stream(other))
    assert sorted(m.streams) == ["A", "B", "C"]
    assert m.apply(encode_remove_stream(sa(acc="B"))).changed and "B" not in m.streams
    assert m.apply(encode_remove_stream(sa(acc="B"))).changed is False
    assert m.counts() == (2, 0)
    # peers
    assert m.apply(encode_peer_add(PEERS[0])).changed
    assert m.apply(encode_peer_remove(PEERS[0])).changed
    assert m.apply(encode_peer_remove(PEERS[0])).changed is False
    assert m.removed == {PEERS[0]} and m.peers == set()
    assert [g.name for g in m.groups_of(PEERS[1])] == ["S-R3F-aaaaaaaa", "S-R3F-aaaaaaaa"]


def _random_log(rng: random.Random, n: int) -> list[bytes]:
    log = []
    for i in range(n):
        k = rng.randrange(7)
        s, acc = rng.choice("STU"), rng.choice("AB")
        peers = rng.sample(PEERS, rng.choice((1, 3)))
        if k == 0:
            log.append(encode_assign_stream(sa(s, acc, f"S-R{len(peers)}F-{i:08d}", peers, T0 + i)))
        elif k == 1:
            log.append(encode_update_stream(sa(s, acc, f"S-R{len(peers)}F-{i:08d}", peers, T0 + i, max_msgs=i)))
        elif k == 2:
            log.append(encode_remove_stream(sa(s, acc)))
        elif k in (3, 4):
            log.append(encode_assign_consumer(ca(rng.choice("DE"), s, acc, f"C-R1F-{i:08d}", peers[:1], T0 + i)))
        elif k == 5:
            log.append(encode_remove_consumer(ca(rng.choice("DE"), s, acc, f"C-R1F-{rng.randrange(i + 1):08d}")))
        else:
            log.append((encode_peer_add if rng.random() < 0.5 else encode_peer_remove)(rng.choice(PEERS)))
    return log


@pytest.mark.parametrize("seed", range(5))
def test_replicas_applying_the_same_log_agree_and_snapshots_restore(seed):
    rng = random.Random(seed)
    log = _random_log(rng, 300)
    replicas = [MetaState() for _ in range(3)]
    most = 0
    for e in log:
        for r in replicas:
            r.apply(bytes(e))  # (each replica decodes its own copy)
        most = max(most, sum(replicas[0].counts()))
    assert most >= 4  # (the log is not trivially empty)
    snaps = {r.snapshot() for r in replicas}
    assert len(snaps) == 1
    snap = snaps.pop()
    restored = MetaState.from_snapshot(snap)
    assert restored == replicas[0] and restored.snapshot() == snap
    # a replica that restores a snapshot taken half way and applies the rest ends equal too
    half = MetaState()
    for e in log[:150]:
        half.apply(e)
    late = MetaState.from_snapshot(half.snapshot())
    for e in log[150:]:
        late.apply(e)
    assert late == replicas[0]


def test_snapshot_shape_and_bad_snapshots():
    m = MetaState()
    m.apply(encode_assign_stream(sa()))
    m.apply(encode_assign_consumer(ca()))
    d = json.loads(m.snapshot())
    s = d["streams"][0]
    assert list(s) == ["client", "created", "stream", "group", "sync", "consumers"]
    assert s["client"] == {"acc": "A", "cluster": "gc"}  # (as nats-server's forAssignmentSnap)
    assert s["consumers"][0]["name"] == "D" and "subject" not in s["consumers"][0]
    for bad in (b"", b"[]", b'{"v": 99}', b'{"v": 1, "streams": [{}]}'):
        with pytest.raises(MetaEntryError):
            m.restore(bad)
    assert m.stream("A", "S") is not None
