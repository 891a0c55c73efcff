"""Behaviour shared by MemStore and FileStore."""

from __future__ import annotations

import time

import pytest

from rillet.jetstream.store import (
    ConsumerState,
    ErrMaxBytes,
    ErrMaxMsgs,
    ErrMaxMsgSize,
    ErrMaxMsgsPerSubject,
    ErrSequenceMismatch,
    ErrStoreClosed,
    ErrTooManyResults,
    MemStore,
    SequencePair,
    StoreConfig,
    StoredMsg,
)
from rillet.jetstream.store.base import file_msg_size, mem_msg_size
from rillet.jetstream.store.filestore import FileStore, restore, restore_into

S = 1_000_000_000
HDR = b"NATS/1.0\r\nFoo: bar\r\n\r\n"


@pytest.fixture(params=["memory", "file"])
def kind(request):
    return request.param


@pytest.fixture
def mk(kind, tmp_path):
    """mk(**cfg) -> a fresh store of the parametrized kind."""
    made = []

    def make(**kw):
        cfg = StoreConfig(storage=kind, **kw)
        if kind == "memory":
            s = MemStore(cfg)
        else:
            s = FileStore(str(tmp_path / f"s{len(made)}"), cfg)
        made.append(s)
        return s

    make.kind = kind
    make.size = mem_msg_size if kind == "memory" else file_msg_size
    yield make
    for s in made:
        s.stop()


def fill(s, n, subjects=("foo",), data=b"x", ts0=None):
    out = []
    for i in range(n):
        ts = None if ts0 is None else ts0 + i
        out.append(s.store_msg(subjects[i % len(subjects)], b"", data, ts=ts)[0])
    return out


# -- sequences -------------------------------------------------------------------------


def test_sequences_and_load(mk):
    s = mk()
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 1, 0)
    seq, ts = s.store_msg("foo", HDR, b"hello")
    assert seq == 1 and ts > 0
    assert s.store_msg("bar", b"", b"world", ts=1234) == (2, 1234)
    m = s.load_msg(1)
    assert m == StoredMsg("foo", 1, ts, HDR, b"hello")
    assert s.load_msg(2).ts == 1234
    assert s.load_msg(0) is None and s.load_msg(3) is None
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.first_ts, st.last_ts) == (2, 1, 2, ts, 1234)
    assert st.bytes == mk.size("foo", HDR, b"hello") + mk.size("bar", b"", b"world")
    assert st.num_subjects == 2 and st.deleted == []


def test_first_seq_and_skip(mk):
    s = mk(first_seq=100)
    st = s.state()
    assert (st.first_seq, st.last_seq) == (100, 99)
    assert s.store_msg("a", b"", b"")[0] == 100
    assert s.skip_msg() == 101
    s.skip_msgs(102, 3)
    assert s.store_msg("a", b"", b"")[0] == 105
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.deleted) == (2, 100, 105, [101, 102, 103, 104])
    with pytest.raises(ErrSequenceMismatch):
        s.skip_msgs(7, 1)
    s.purge()
    s.skip_msgs(0, 10)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 116, 115)


def test_store_raw(mk):
    s = mk()
    fill(s, 2)
    s.store_raw(5, "bar", b"", b"r", 777)
    st = s.state()
    assert (st.first_seq, st.last_seq, st.deleted) == (1, 5, [3, 4])
    assert s.load_msg(5) == StoredMsg("bar", 5, 777, b"", b"r")
    with pytest.raises(ErrSequenceMismatch):
        s.store_raw(5, "bar", b"", b"r", 778)
    assert s.store_msg("x", b"", b"")[0] == 6


# -- limits ----------------------------------------------------------------------------


def test_max_msgs_discard_old(mk):
    s = mk(max_msgs=3)
    fill(s, 10)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (3, 8, 10)


def test_max_msgs_discard_new(mk):
    s = mk(max_msgs=3, discard="new")
    fill(s, 3)
    with pytest.raises(ErrMaxMsgs):
        s.store_msg("foo", b"", b"x")
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (3, 1, 3)
    s.remove_msg(2)
    assert s.store_msg("foo", b"", b"x")[0] == 4


def test_max_bytes(mk):
    one = mk.size("foo", b"", b"0123456789")
    s = mk(max_bytes=one * 3)
    fill(s, 5, data=b"0123456789")
    st = s.state()
    assert (st.msgs, st.bytes, st.first_seq) == (3, one * 3, 3)
    s = mk(max_bytes=one * 3, discard="new")
    fill(s, 3, data=b"0123456789")
    with pytest.raises(ErrMaxBytes):
        s.store_msg("foo", b"", b"0123456789")
    assert s.state().bytes == one * 3 and s.state().last_seq == 3
    s.remove_msg(1)
    assert s.store_msg("foo", b"", b"0123456789")[0] == 4


def test_max_msg_size(mk):
    s = mk(max_msg_size=10)
    with pytest.raises(ErrMaxMsgSize):
        s.store_msg("foo", b"NATS/1.0\r\n\r\n", b"x")
    s.store_msg("foo", b"", b"0123456789")
    assert s.state().msgs == 1


def test_per_subject_discard_old(mk):
    s = mk(max_msgs_per_subject=2)
    fill(s, 9, subjects=("a", "b", "c"))
    assert s.subjects_state(">") == {"a": (2, 4, 7), "b": (2, 5, 8), "c": (2, 6, 9)}
    assert s.state().msgs == 6


def test_per_subject_discard_new(mk):
    # discard new without per-subject: the subject's oldest goes.
    s = mk(max_msgs_per_subject=1, discard="new", max_msgs=2)
    s.store_msg("a", b"", b"1")
    s.store_msg("b", b"", b"1")
    assert s.store_msg("a", b"", b"2")[0] == 3  # at max_msgs but replaces a's oldest
    with pytest.raises(ErrMaxMsgs):
        s.store_msg("c", b"", b"1")
    assert s.subjects_totals() == {"a": 1, "b": 1}
    # discard_new_per_subject: refuse instead.
    s = mk(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True)
    s.store_msg("a", b"", b"1")
    with pytest.raises(ErrMaxMsgsPerSubject):
        s.store_msg("a", b"", b"2")
    assert s.state().last_seq == 1
    # ...but a rollup goes through.
    s.store_msg("a", b"NATS/1.0\r\nNats-Rollup: sub\r\n\r\n", b"2")
    assert s.subjects_state() == {"a": (1, 2, 2)}


def test_update_config_shrinks(mk):
    s = mk()
    fill(s, 20, subjects=("a", "b"))
    removed = []
    s.register_remove_callback(lambda seq, subj, size: removed.append(seq))
    s.update_config(StoreConfig(storage=mk.kind, max_msgs_per_subject=3))
    assert s.subjects_totals() == {"a": 3, "b": 3}
    assert sorted(removed) == list(range(1, 15))
    s.update_config(StoreConfig(storage=mk.kind, max_msgs_per_subject=3, max_msgs=2))
    st = s.state()
    assert (st.msgs, st.first_seq) == (2, 19)
    one = mk.size("a", b"", b"x")
    s.update_config(StoreConfig(storage=mk.kind, max_bytes=one))
    assert s.state().msgs == 1
    s2 = mk()
    s2.store_msg("old", b"", b"", ts=time.time_ns() - 5 * S)
    s2.store_msg("new", b"", b"")
    s2.update_config(StoreConfig(storage=mk.kind, max_age=1.0))
    assert s2.subjects_totals() == {"new": 1}


# -- age and TTL -----------------------------------------------------------------------


def test_max_age(mk):
    s = mk(max_age=10.0)
    base = 1_000 * S
    for i in range(5):
        s.store_msg("foo", b"", b"x", ts=base + i * S)
    assert s.next_expiry() == base + 10 * S
    assert s.expire_msgs(base + 10 * S) == 1
    assert s.expire_msgs(base + 12 * S + 1) == 2
    st = s.state()
    assert (st.msgs, st.first_seq) == (2, 4)
    assert s.next_expiry() == base + 13 * S
    assert s.expire_msgs(base + 100 * S) == 2
    assert s.next_expiry() is None
    assert s.state().first_seq == 6


def test_msg_ttl(mk):
    s = mk(allow_msg_ttl=True, max_age=100.0)
    base = 1_000 * S
    s.store_msg("a", b"", b"", ts=base, ttl=5)
    s.store_msg("b", b"", b"", ts=base, ttl=-1)  # never expires, not even by max_age
    s.store_msg("c", b"", b"", ts=base + S, ttl=2)
    s.store_msg("d", b"", b"", ts=base + S)
    assert s.next_expiry() == base + 3 * S
    assert s.expire_msgs(base + 3 * S) == 1
    assert s.next_expiry() == base + 5 * S
    assert s.expire_msgs(base + 5 * S) == 1
    assert s.subjects_totals() == {"b": 1, "d": 1}
    assert s.expire_msgs(base + 1000 * S) == 1
    assert s.subjects_totals() == {"b": 1}
    assert s.next_expiry() is None


def test_ttl_ignored_unless_allowed(mk):
    s = mk()
    s.store_msg("a", b"", b"", ts=1000, ttl=1)
    assert s.expire_msgs(1000 + 10 * S) == 0
    assert s.next_expiry() is None
    s.update_config(StoreConfig(storage=mk.kind, allow_msg_ttl=True))
    assert s.state().msgs == 0  # applied at once


def test_subject_delete_markers(mk):
    s = mk(max_age=10.0, subject_delete_marker_ttl=60)
    base = 1_000 * S
    s.store_msg("a", b"", b"1", ts=base)
    s.store_msg("a", b"", b"2", ts=base + S)
    s.store_msg("b", b"", b"1", ts=base + 20 * S)
    assert s.expire_msgs(base + 11 * S + 1) == 2
    m = s.load_last_msg("a")
    assert m.seq == 4 and m.data == b""
    assert b"Nats-Marker-Reason: MaxAge\r\n" in m.hdr
    assert b"Nats-TTL: 1m0s\r\n" in m.hdr
    # Only one marker: the last message of "a" was seq 2.
    assert s.subjects_totals() == {"a": 1, "b": 1}
    # A marker expiring does not produce another marker.
    s.update_config(StoreConfig(storage=mk.kind, max_age=10.0, subject_delete_marker_ttl=60, allow_msg_ttl=True))
    assert s.expire_msgs(m.ts + 61 * S) >= 1
    assert "a" not in s.subjects_totals()
    # With a marker callback the stream publishes it.
    got = []
    s2 = mk(max_age=1.0, subject_delete_marker_ttl=30)
    s2.register_marker_callback(lambda subj, hdr: got.append((subj, hdr)))
    s2.store_msg("x", b"", b"", ts=base)
    s2.expire_msgs(base + 2 * S)
    assert s2.state().msgs == 0 and got[0][0] == "x" and b"Nats-TTL: 30s" in got[0][1]


# -- removal, purge, compact, truncate -------------------------------------------------


def test_remove_and_erase(mk):
    s = mk()
    fill(s, 5)
    removed = []
    s.register_remove_callback(lambda seq, subj, size: removed.append((seq, subj, size)))
    assert s.remove_msg(3) is True
    assert s.remove_msg(3) is False
    assert s.remove_msg(99) is False
    assert s.remove_msg(1, erase=True) is True
    assert s.load_msg(1) is None and s.load_msg(3) is None
    st = s.state()
    assert (st.msgs, st.first_seq, st.deleted) == (3, 2, [3])
    assert removed == [(3, "foo", mk.size("foo", b"", b"x")), (1, "foo", mk.size("foo", b"", b"x"))]
    s.remove_msg(2)
    assert s.state().first_seq == 4
    s.remove_msg(5)
    s.remove_msg(4)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 6, 5)


def test_purge_all(mk):
    s = mk()
    fill(s, 10)
    n = []
    s.register_remove_callback(lambda *a: n.append(a))
    assert s.purge() == 10
    assert len(n) == 10
    st = s.state()
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq, st.num_subjects) == (0, 0, 11, 10, 0)
    assert s.store_msg("foo", b"", b"")[0] == 11


def test_purge_subject_seq_keep(mk):
    s = mk()
    fill(s, 12, subjects=("a", "b", "c.x", "c.y"))
    # a: 1 5 9, b: 2 6 10, c.x: 3 7 11, c.y: 4 8 12
    assert s.purge("a") == 3
    assert s.purge("c.*", keep=2) == 4  # keeps the last 2 of the filter: 11, 12
    assert s.subjects_state() == {"b": (3, 2, 10), "c.x": (1, 11, 11), "c.y": (1, 12, 12)}
    assert s.purge("b", seq=10) == 2  # below 10
    assert s.subjects_totals() == {"b": 1, "c.x": 1, "c.y": 1}
    assert s.purge(seq=11) == 1  # everything below 11 (compact)
    assert s.state().first_seq == 11
    assert s.purge(keep=1) == 1
    assert s.subjects_totals() == {"c.y": 1}
    assert s.purge("nothing") == 0
    assert s.purge("c.y", keep=5) == 0
    assert s.purge(seq=1) == 0


def test_compact(mk):
    s = mk()
    fill(s, 10)
    s.remove_msg(6)
    assert s.compact(6) == 5
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (4, 7, 10)
    assert s.compact(3) == 0
    assert s.compact(20) == 4
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 20, 19)
    assert s.store_msg("foo", b"", b"")[0] == 20


def test_truncate(mk):
    s = mk()
    fill(s, 10, subjects=("a", "b"))
    s.remove_msg(5)
    s.truncate(6)
    st = s.state()
    assert (st.msgs, st.last_seq, st.deleted) == (5, 6, [5])
    assert s.subjects_state() == {"a": (2, 1, 3), "b": (3, 2, 6)}
    assert s.store_msg("c", b"", b"")[0] == 7
    s.truncate(0)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 1, 0)


# -- queries ---------------------------------------------------------------------------


@pytest.fixture
def populated(mk):
    s = mk()
    subjects = ["orders.new", "orders.paid", "users.1.name", "users.2.name", "orders.new"]
    for i in range(20):
        s.store_msg(subjects[i % 5], b"", str(i + 1).encode())
    # orders.new: 1 5 6 10 11 15 16 20; orders.paid: 2 7 12 17; users.1.name: 3 8 13 18
    # users.2.name: 4 9 14 19
    s.remove_msg(10)
    return s


def test_load_next(populated):
    s = populated
    assert s.load_next_msg(">", 0).seq == 1
    assert s.load_next_msg("", 10).seq == 11
    assert s.load_next_msg("orders.new", 7).seq == 11
    assert s.load_next_msg("orders.*", 8, True).seq == 11
    assert s.load_next_msg("users.*.name", 15).seq == 18
    assert s.load_next_msg("users.>", 20) is None
    assert s.load_next_msg("nope", 1) is None
    assert s.load_next_msg("*.paid", 13).seq == 17
    assert s.load_next_msg(">", 21) is None
    assert s.load_next_msg_multi(["users.2.name", "orders.paid"], 10).seq == 12
    assert s.load_next_msg_multi(["users.*.name", "x.>"], 19).seq == 19
    assert s.load_next_msg_multi([">"], 10).seq == 11


def test_load_last_prev(populated):
    s = populated
    assert s.load_last_msg(">").seq == 20
    assert s.load_last_msg("orders.*").seq == 20
    assert s.load_last_msg("users.*.name").seq == 19
    assert s.load_last_msg("orders.paid").seq == 17
    assert s.load_last_msg("nope") is None
    s.remove_msg(20)
    assert s.load_last_msg("").seq == 19
    assert s.load_last_msg("orders.new").seq == 16
    assert s.load_prev_msg(10).seq == 9
    assert s.load_prev_msg(100).seq == 19
    assert s.load_prev_msg(12, "orders.new").seq == 11
    assert s.load_prev_msg(0) is None
    assert s.last_seq_for_subject("orders.new") == 16
    assert s.last_seq_for_subject("users.1.name") == 18
    assert s.last_seq_for_subject("nope") == 0


def test_subjects_state(populated):
    s = populated
    assert s.subjects_state("orders.*") == {"orders.new": (7, 1, 20), "orders.paid": (4, 2, 17)}
    assert s.subjects_state("users.1.name") == {"users.1.name": (4, 3, 18)}
    assert s.subjects_totals("users.>") == {"users.1.name": 4, "users.2.name": 4}
    assert len(s.subjects_state(">")) == 4
    assert s.subjects_state("nope") == {}


def test_num_pending_filtered_state(populated):
    s = populated
    assert s.num_pending(1, ">") == (19, 20)
    assert s.num_pending(11, "") == (10, 20)
    assert s.num_pending(11, "orders.new") == (4, 20)
    assert s.num_pending(11, "orders.*") == (6, 20)
    assert s.num_pending(11, "orders.*", True) == (2, 20)
    assert s.num_pending(19, ">", True) == (2, 20)
    assert s.num_pending(1, "users.*.name", True) == (2, 20)
    assert s.num_pending(21, ">") == (0, 20)
    assert s.num_pending_multi(11, ["orders.paid", "users.2.name"]) == (4, 20)
    assert s.filtered_state("orders.new", 7) == (4, 11, 20)
    assert s.filtered_state("users.>", 0) == (8, 3, 19)
    assert s.filtered_state(">", 10) == (10, 11, 20)
    assert s.filtered_state("nope", 0) == (0, 0, 0)


def test_multi_last_seqs(populated):
    s = populated
    assert s.multi_last_seqs([">"]) == [17, 18, 19, 20]
    assert s.multi_last_seqs(["orders.*"], max_seq=15) == [12, 15]
    assert s.multi_last_seqs(["users.1.name", "orders.paid"], max_seq=2) == [2]
    with pytest.raises(ErrTooManyResults):
        s.multi_last_seqs([">"], max_allowed=3)
    assert s.multi_last_seqs(["nope"]) == []


def test_get_seq_from_time(mk):
    s = mk()
    for i in range(1, 11):
        s.store_msg("a", b"", b"", ts=i * 100)
    s.remove_msg(5)
    assert s.get_seq_from_time(0) == 1
    assert s.get_seq_from_time(450) == 6
    assert s.get_seq_from_time(700) == 7
    assert s.get_seq_from_time(701) == 8
    assert s.get_seq_from_time(10_000) == 11


def test_wildcard_scan_with_many_subjects(mk):
    # Exercises the per-subject path of load_next / num_pending (more subjects than span).
    s = mk()
    for i in range(300):
        s.store_msg(f"k.{i}", b"", b"")
    s.store_msg("z.1", b"", b"")
    assert s.load_next_msg("z.*", 1).seq == 301
    assert s.num_pending(1, "k.*") == (300, 301)
    assert s.num_pending(250, "k.*") == (51, 301)
    assert s.num_pending(250, "k.*", True) == (51, 301)
    assert s.load_last_msg("k.*").seq == 300


# -- consumers, lifecycle, snapshot ----------------------------------------------------


def test_consumer_store(mk):
    s = mk()
    cs = s.consumer_store("dur")
    assert cs.state() is None
    state = ConsumerState(
        delivered=SequencePair(10, 20),
        ack_floor=SequencePair(5, 12),
        pending={15: (7, 123), 18: (9, 456)},
        redelivered={15: 2},
    )
    cs.update(state)
    state.pending.clear()  # the store kept a copy
    got = cs.state()
    assert got.delivered == SequencePair(10, 20) and got.pending == {15: (7, 123), 18: (9, 456)}
    cs.update({"delivered": {"consumer_seq": 1, "stream_seq": 2}})
    assert cs.state().delivered.stream_seq == 2
    assert s.consumer_store("dur") is cs
    cs.delete()
    assert s.consumer_store("dur").state() is None


def test_closed(mk):
    s = mk()
    fill(s, 2)
    s.stop()
    with pytest.raises(ErrStoreClosed):
        s.store_msg("foo", b"", b"")
    with pytest.raises(ErrStoreClosed):
        s.purge()


def test_snapshot_restore(mk, tmp_path):
    s = mk(allow_msg_ttl=True)
    fill(s, 10, subjects=("a", "b"))
    s.store_msg("t", b"", b"ttl", ttl=3600)
    s.remove_msg(4)
    s.skip_msgs(0, 2)
    s.consumer_store("c1").update({"delivered": {"consumer_seq": 3, "stream_seq": 3}})
    s.consumer_store("odd/name").update({"delivered": {"consumer_seq": 4, "stream_seq": 4}})
    s.consumer_store("gone").delete()
    snap = list(s.snapshot_stream())
    restore(str(tmp_path / "r"), snap)
    r = FileStore(str(tmp_path / "r"), StoreConfig(allow_msg_ttl=True))
    try:
        a, b = s.state(), r.state()
        assert (a.msgs, a.first_seq, a.last_seq, a.deleted) == (b.msgs, b.first_seq, b.last_seq, b.deleted)
        assert [r.load_msg(q) for q in range(1, 12)] == [s.load_msg(q) for q in range(1, 12)]
        assert r.consumer_store("c1").state().delivered.stream_seq == 3
        assert r.consumer_names() == ["c1", "odd/name"]
        assert r.next_expiry() == s.next_expiry()
    finally:
        r.stop()
    m = MemStore(StoreConfig(storage="memory"))
    restore_into(m, snap)
    assert m.state().deleted == s.state().deleted and m.state().last_seq == 13
    assert m.load_msg(11).data == b"ttl"


def test_huge_sequence_gaps_stay_cheap(mk):
    s = mk()
    fill(s, 3, ts0=1)
    s.store_raw(10**12, "far", b"", b"x", 5)
    s.store_msg("far", b"", b"y")
    s.remove_msg(2)
    st = s.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (4, 1, 10**12 + 1)
    assert st.num_deleted == 10**12 + 1 - 4
    assert s.filtered_state(">", 3) == (3, 3, 10**12 + 1)
    assert s.num_pending(10**12, ">") == (2, 10**12 + 1)
    assert s.load_next_msg(">", 4).seq == 10**12
    assert s.load_prev_msg(10**12 - 1).seq == 3
    assert s.get_seq_from_time(5) == 10**12
    assert s.purge("foo", keep=1) == 1
    assert s.compact(10**12 + 1) == 2
    assert s.state().first_seq == 10**12 + 1
