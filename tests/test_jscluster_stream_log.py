"""RaftLog (rillet/jetstream/cluster/log.py): the entry codec round-trips every op (property test), and
the seam's completion rules hold over a group: completion after apply, another leader's entry at a
pending index fails it with NotLeader, leadership loss fails everything pending, sub-logs for consumers,
held applies during catch-up. The group here is a small in-memory fake (test only)."""
from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from rillet.jetstream.cluster.log import MULTI, EntryDecodeError, RaftLog, decode_entry, encode_entry
from rillet.jetstream.log import Entry, NotLeader
from rillet.jetstream.store.base import StoreConfig

import pytest

u64 = st.integers(min_value=0, max_value=(1 << 63) - 1)
subj = st.text(min_size=1, max_size=20)
hdr = st.binary(max_size=40)
seqs = st.lists(u64, max_size=8)
msg5 = st.tuples(subj, hdr, st.binary(max_size=40), u64, st.integers(-1, 1 << 30), st.text(max_size=10))

stream_entries = st.one_of(
    st.builds(lambda a: Entry(Entry.MSG, a),
              st.tuples(subj, hdr, st.binary(max_size=100), u64, st.integers(-1, 1 << 30), st.text(max_size=10),
                        u64)),
    st.builds(lambda a: Entry(Entry.DELETE, a), st.tuples(u64, st.booleans(), u64)),
    st.builds(lambda a: Entry(Entry.PURGE, a), st.tuples(st.one_of(st.none(), subj), u64, u64, u64)),
    st.builds(lambda m, s: Entry(Entry.BATCH, (m, s)), st.lists(msg5, min_size=1, max_size=4), u64),
    st.builds(lambda a: Entry(Entry.MIRROR, a), st.tuples(u64, subj, hdr, st.binary(max_size=40), u64)),
    st.builds(lambda a: Entry(Entry.EXPIRE, a), st.tuples(u64)),
)
consumer_entries = st.one_of(
    st.builds(lambda a: Entry(Entry.C_START, a), st.tuples(u64)),
    st.builds(lambda a: Entry(Entry.C_DELIVERED, a), st.tuples(u64, u64, u64, u64)),
    st.builds(lambda a: Entry(Entry.C_UNDELIVERED, a), st.tuples(u64, u64)),
    st.builds(lambda a: Entry(Entry.C_ACK, a), st.tuples(u64, u64, u64, u64)),
    st.builds(lambda a: Entry(Entry.C_NAK, a), st.tuples(u64, u64)),
    st.builds(lambda a: Entry(Entry.C_DUE, a), st.tuples(seqs, st.integers(-(1 << 40), 1 << 40))),
    st.builds(lambda a: Entry(Entry.C_GONE, a), st.tuples(u64, u64)),
    st.builds(lambda a: Entry(Entry.C_MAXDELIV, a), st.tuples(u64, u64, u64)),
    st.builds(lambda a: Entry(Entry.C_PURGED, a), st.tuples(u64, seqs, u64)),
    st.builds(lambda a: Entry(Entry.C_DROP, a), st.tuples(seqs, u64)),
)


@settings(max_examples=300, deadline=None)
@given(stream_entries)
def test_stream_entry_roundtrip(e):
    target, d = decode_entry(encode_entry(e))
    assert target == "" and d.op == e.op and d.args == e.args
    assert d.ctx is None


@settings(max_examples=300, deadline=None)
@given(consumer_entries, st.text(min_size=1, max_size=16))
def test_consumer_entry_roundtrip(e, name):
    target, d = decode_entry(encode_entry(e, name))
    assert target == name and d.op == e.op and d.args == e.args


def test_update_entry_roundtrip():
    from rillet.jetstream.api.common import stream_config_from_dict
    from rillet.jetstream.storeopen import store_config
    cfg = stream_config_from_dict({"name": "S", "subjects": ["a.>"], "max_msgs": 10, "storage": "memory",
                                   "retention": "limits", "num_replicas": 3})
    scfg = store_config(cfg)
    e = Entry(Entry.UPDATE, (cfg, scfg, 123))
    _, d = decode_entry(encode_entry(e, "ignored"))
    assert d.args[0] == cfg and d.args[1] == scfg and isinstance(d.args[1], StoreConfig) and d.args[2] == 123


def test_ctx_never_encoded():
    a = encode_entry(Entry(Entry.DELETE, (1, True, 2), ctx=b"reply.subject"))
    assert a == encode_entry(Entry(Entry.DELETE, (1, True, 2)))
    assert b"reply" not in a


@pytest.mark.parametrize("data", [b"", b"\x63\x90", b"\x01\xc1", b"\x15\x92\x01\x90", b"\x01\x05",
                                  b"\x04\x93\xa1x\x80\x01"])
def test_decode_refuses_garbage(data):
    with pytest.raises(EntryDecodeError):
        decode_entry(data)


class FakeGroup:
    """Test double of RaftGroup: proposals append to ``log``; ``commit(index, data)`` applies."""

    def __init__(self, rl: RaftLog) -> None:
        self.rl = rl
        self.is_leader = True
        self.term = 1
        self.next = 1
        self.props: list[tuple[int, bytes]] = []
        self.waiting: list = []
        self.multi_ok = True  # (RaftGroup.members_decode: every member's route said it decodes MULTI)

    def members_decode(self, op: int) -> bool:
        return self.multi_ok

    def proposal_waiting(self, fn) -> None:
        self.waiting.append(fn)

    def take(self) -> None:
        """What RaftGroup does right before its Ready: the logs hand over the proposals they hold."""
        w, self.waiting = self.waiting, []
        for fn in w:
            fn()

    def propose_now(self, data: bytes) -> tuple[int, int]:
        if not self.is_leader:
            raise NotLeader()
        i = self.next
        self.next += 1
        self.props.append((i, data))
        return i, self.term

    def commit_all(self) -> None:
        self.take()
        props, self.props = self.props, []
        for i, d in props:
            self.rl.group_apply(i, d)

    def lose(self) -> None:
        self.is_leader = False
        self.rl.group_leader_change(False)


def _mk():
    applied = []
    done = []
    changes = []

    def apply(e):
        if e.op == Entry.DELETE and e.args[0] == 666:
            raise ValueError("refused")
        applied.append((e.op, e.args))
        return len(applied)

    rl = RaftLog(apply, "t")
    rl.on_leader_change = changes.append
    g = FakeGroup(rl)
    rl.bind(g)

    def cb(e, res, err):
        done.append((e.args, res, type(err).__name__ if err else None))
    return rl, g, applied, done, changes, cb


def test_completion_after_apply_in_order():
    rl, g, applied, done, _, cb = _mk()
    rl.propose(Entry(Entry.DELETE, (1, True, 5), ctx="x"), cb)
    rl.propose(Entry(Entry.DELETE, (666, True, 5)), cb)
    rl.propose(Entry(Entry.DELETE, (2, True, 5)), cb)
    assert done == [] and rl.pending == 3 and rl.index == 0 and g.props == []
    g.take()  # (the three proposals of the pass: one RAFT entry)
    assert rl.index == 1 and len(g.props) == 1 and g.props[0][1][0] == MULTI
    g.commit_all()
    assert done == [((1, True, 5), 1, None), ((666, True, 5), None, "ValueError"), ((2, True, 5), 2, None)]
    assert rl.pending == 0


def test_other_entry_at_pending_index_fails_with_not_leader():
    rl, g, applied, done, _, cb = _mk()
    rl.propose(Entry(Entry.DELETE, (1, True, 5)), cb)
    g.take()
    rl.propose(Entry(Entry.DELETE, (2, True, 5)), cb)
    g.take()
    g.props = []
    # a new leader's entries took indexes 1 and 2 (without this node noticing the loss yet)
    rl.group_apply(1, encode_entry(Entry(Entry.DELETE, (9, False, 7))))
    assert done == [((1, True, 5), None, "NotLeader")]
    assert applied == [(Entry.DELETE, (9, False, 7))]  # applied as a follower's entry
    rl.group_apply(2, encode_entry(Entry(Entry.DELETE, (2, True, 5))))  # same bytes: it is ours
    assert done[-1] == ((2, True, 5), 2, None)


def test_multi_entry_applies_each_and_matches_each_completion():
    rl, g, applied, done, _, cb = _mk()
    for i in (1, 2, 3):
        rl.propose(Entry(Entry.DELETE, (i, True, 5)), cb)
    g.take()
    (index, data), = g.props
    g.props = []
    # another leader's MULTI at that index with our first two entries' bytes and another: the first two are ours,
    # the third fails (NotLeader) and theirs is applied as a follower's
    theirs = bytes((MULTI,)) + msgspec.msgpack.encode([encode_entry(Entry(Entry.DELETE, (i, True, 5))) for i in (1, 2)]
                                                      + [encode_entry(Entry(Entry.DELETE, (9, True, 5)))])
    rl.group_apply(index, theirs)
    assert applied == [(Entry.DELETE, (1, True, 5)), (Entry.DELETE, (2, True, 5)), (Entry.DELETE, (9, True, 5))]
    assert done == [((1, True, 5), 1, None), ((2, True, 5), 2, None), ((3, True, 5), None, "NotLeader")]
    assert rl.pending == 0
    # a follower applies a MULTI of consumer and stream entries, in order
    ca = []
    rl.sublog("C1", lambda e: ca.append(e.args))
    rl.group_apply(index + 1, bytes((MULTI,)) + msgspec.msgpack.encode(
        [encode_entry(Entry(Entry.C_ACK, (5, 3, 100, 6)), "C1"), encode_entry(Entry(Entry.EXPIRE, (4,)))]))
    assert ca == [(5, 3, 100, 6)] and applied[-1] == (Entry.EXPIRE, (4,))
    rl.group_apply(index + 2, bytes((MULTI,)) + b"\xc1")
    assert rl.decode_errors == 1


def test_a_refused_batch_fails_each_in_order():
    rl, g, applied, done, _, cb = _mk()
    rl.propose(Entry(Entry.DELETE, (1, True, 5)), cb)
    rl.propose(Entry(Entry.DELETE, (2, True, 5)), cb)
    g.is_leader = False  # (the node stepped down before the group took the proposals)
    g.take()
    assert done == [((1, True, 5), None, "NotLeader"), ((2, True, 5), None, "NotLeader")] and rl.pending == 0


def test_without_multi_members_each_proposal_is_its_own_entry():
    # (a member whose build predates MULTI: RaftGroup.members_decode is false) one RAFT entry each, applied and
    # completed in order as before
    rl, g, applied, done, _, cb = _mk()
    g.multi_ok = False
    for i in (1, 666, 2):
        rl.propose(Entry(Entry.DELETE, (i, True, 5)), cb)
    g.take()
    assert [i for i, _ in g.props] == [1, 2, 3] and all(d[0] != MULTI for _, d in g.props)
    assert [decode_entry(d)[1].args for _, d in g.props] == [(1, True, 5), (666, True, 5), (2, True, 5)]
    assert rl.index == 3
    g.commit_all()
    assert done == [((1, True, 5), 1, None), ((666, True, 5), None, "ValueError"), ((2, True, 5), 2, None)]
    assert rl.pending == 0
    # the group refusing from the second on (leadership gone meanwhile): the first stays pending, the rest fail
    real = g.propose_now

    def once(data):
        g.propose_now = lambda d: (_ for _ in ()).throw(NotLeader())
        return real(data)
    g.propose_now = once
    for i in (3, 4, 5):
        rl.propose(Entry(Entry.DELETE, (i, True, 5)), cb)
    g.take()
    assert done[3:] == [((4, True, 5), None, "NotLeader"), ((5, True, 5), None, "NotLeader")] and rl.pending == 1
    g.propose_now = real
    g.commit_all()
    assert done[5:] == [((3, True, 5), 3, None)] and rl.pending == 0


def test_leadership_loss_fails_pending_then_tells_owner():
    rl, g, applied, done, changes, cb = _mk()
    order = []
    rl.on_leader_change = lambda lead: order.append(("owner", lead, len(done)))
    rl.propose(Entry(Entry.DELETE, (1, True, 5)), cb)
    rl.propose(Entry(Entry.DELETE, (2, True, 5)), cb)
    g.lose()
    g.props = []
    assert [d[2] for d in done] == ["LeadershipLost", "LeadershipLost"]  # outcome unknown: no answer
    assert order == [("owner", False, 2)]
    assert not rl.is_leader
    rl.propose(Entry(Entry.DELETE, (3, True, 5)), cb)  # not the leader: fails at once
    assert done[-1][2] == "NotLeader" and g.props == []
    # the lost entries may still commit through the new leader: applied, no completion left to run
    rl.group_apply(1, encode_entry(Entry(Entry.DELETE, (1, True, 5))))
    assert len(done) == 3 and applied == [(Entry.DELETE, (1, True, 5))]


def test_sublogs_route_consumer_entries():
    rl, g, applied, done, changes, cb = _mk()
    ca, cb_ = [], []
    s1 = rl.sublog("C1", lambda e: ca.append(e.args) or "ok")
    rl.sublog("C2", lambda e: cb_.append(e.args))
    lc = []
    s1.on_leader_change = lc.append
    s1.propose(Entry(Entry.C_ACK, (5, 3, 100, 6)), cb)
    rl.propose(Entry(Entry.DELETE, (1, True, 5)), cb)
    g.commit_all()
    assert ca == [(5, 3, 100, 6)] and cb_ == [] and done[0] == ((5, 3, 100, 6), "ok", None)
    # a follower applying another replica's consumer entry
    rl.group_apply(10, encode_entry(Entry(Entry.C_START, (7,)), "C2"))
    assert cb_ == [(7,)]
    rl.group_apply(11, encode_entry(Entry(Entry.C_START, (7,)), "GONE"))
    assert rl.unknown_targets == 1
    g.lose()
    assert lc == [False] and changes == [False]


def test_hold_queues_applies_until_release():
    rl, g, applied, done, changes, cb = _mk()
    rl.hold()
    assert not rl.is_leader  # a node catching up does not propose
    rl.group_apply(1, encode_entry(Entry(Entry.EXPIRE, (1,))))
    rl.group_apply(2, encode_entry(Entry(Entry.EXPIRE, (2,))))
    assert applied == []
    rl.release()
    assert applied == [(Entry.EXPIRE, (1,)), (Entry.EXPIRE, (2,))]
    assert rl.is_leader


def test_filter_skips_entries():
    rl, g, applied, done, changes, cb = _mk()
    rl.filter = lambda i, t, e: e.args[0] != 2
    for i in (1, 2, 3):
        rl.group_apply(i, encode_entry(Entry(Entry.EXPIRE, (i,))))
    assert applied == [(Entry.EXPIRE, (1,)), (Entry.EXPIRE, (3,))]


def test_undecodable_entry_counted_not_applied():
    rl, g, applied, done, changes, cb = _mk()
    rl.group_apply(1, b"\x63garbage")
    assert rl.decode_errors == 1 and applied == []


def test_when_drained_runs_after_the_last_proposal_applied():
    rl, g, applied, done, changes, cb = _mk()
    calls = []
    rl.when_drained(lambda: calls.append("now"))  # nothing in flight: at once
    assert calls == ["now"]
    rl.propose(Entry(Entry.DELETE, (1, True, 5)), cb)
    g.take()
    rl.propose(Entry(Entry.DELETE, (2, True, 5)), cb)
    g.take()
    rl.when_drained(lambda: calls.append(("drained", len(done), rl.pending)))
    props, g.props = g.props, []
    rl.group_apply(*props[0])
    assert calls == ["now"]  # (one still in flight)
    rl.group_apply(*props[1])
    assert calls == ["now", ("drained", 2, 0)]  # after the last completion, once
    rl.propose(Entry(Entry.DELETE, (3, True, 5)), cb)
    g.commit_all()
    assert len(calls) == 2
    # a leadership loss fails the proposals and forgets the waiter
    rl.propose(Entry(Entry.DELETE, (4, True, 5)), cb)
    g.take()
    rl.when_drained(lambda: calls.append("lost"))
    g.lose()
    rl.group_apply(*g.props[0])
    assert len(calls) == 2 and rl.on_drained is None
