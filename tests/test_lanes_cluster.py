"""A replicated stream's log entry codec (rillet.jetstream.cluster.log encode_entry/decode_entry, the reference)
against its compiled twin (rillet._speedups._ccluster, chosen through rillet.lane): the same entries and the
same bytes (any bytes) give the same results and the same errors in both lanes."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lanes import COMPILED_ERROR
import rillet.jetstream  # noqa: F401  (registers its lane twins)
from rillet import lane
from rillet.jetstream.cluster import log as L
from rillet.jetstream.log import Entry

pytestmark = pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")

PURE = lane.pure("entry_codec")


def _twin():
    return lane.compiled("entry_codec")


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # the error itself is compared: both lanes must raise the same
        return ("error", type(e).__name__, str(e))


scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=False),
                   st.text(max_size=12), st.binary(max_size=24))
args = st.lists(scalar, max_size=8).map(tuple)
msg_args = st.tuples(st.text(max_size=20), st.binary(max_size=30), st.binary(max_size=40), st.integers(0, 2**63 - 1),
                     st.one_of(st.just(0), st.floats(0, 1e6), st.integers(-1, 10**9)),
                     st.one_of(st.none(), st.text(max_size=10)), st.integers(0, 2**63 - 1))
ops = st.sampled_from(sorted(L.CONSUMER_OPS) + sorted(L.STREAM_OPS - {Entry.UPDATE}) + [L.RESTORED, 99, 200])


@settings(max_examples=1500, deadline=None)
@given(st.one_of(st.tuples(st.just(Entry.MSG), msg_args), st.tuples(ops, args)), st.text(max_size=8))
def test_encode_then_decode_same_in_both_lanes(op_args, target):
    op, a = op_args
    e = Entry(op, a)
    p, c = _outcome(PURE.encode_entry, e, target), _outcome(_twin().encode_entry, e, target)
    assert p == c
    if p[0] == "ok":
        assert _outcome(PURE.decode_entry, p[1]) == _outcome(_twin().decode_entry, p[1])


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.binary(max_size=60),
                 st.tuples(st.sampled_from([Entry.MSG, Entry.C_ACK, Entry.C_DELIVERED, Entry.C_DUE, L.FAST_MSG]),
                           st.binary(max_size=60)).map(lambda t: bytes((t[0],)) + t[1])))
def test_decode_any_bytes_same_in_both_lanes(data):
    assert _outcome(PURE.decode_entry, data) == _outcome(_twin().decode_entry, data)


def test_real_entries_round_trip():
    from rillet.jetstream.fastbatch import FastMsg
    msg = Entry(Entry.MSG, ("orders.new", b"NATS/1.0\r\nA: b\r\n\r\n", b"x" * 16, 1764377000000000000, 0, None, 7))
    ack = Entry(Entry.C_ACK, (12, 10, 1764377000000000000, 13))
    delivered = Entry(Entry.C_DELIVERED, (12, 10, 1, 1764377000000000000))
    for codec in (PURE, _twin()):
        assert codec.decode_entry(codec.encode_entry(msg)) == ("", msg)
        assert codec.decode_entry(codec.encode_entry(ack, "C1")) == ("C1", ack)
        assert codec.decode_entry(codec.encode_entry(delivered, "C1")) == ("C1", delivered)
        with pytest.raises(L.EntryDecodeError):
            codec.decode_entry(b"")
    fm = FastMsg.__new__(FastMsg)
    fm.reply = b"_INBOX.x.1"
    fast = Entry(Entry.MSG, msg.args, fm)
    assert PURE.encode_entry(fast) == _twin().encode_entry(fast)  # a fast batch message: the reference's form
    assert L._encode is (PURE.encode_entry if lane.LANE == "pure" else _twin().encode_entry)
    assert L._decode is (PURE.decode_entry if lane.LANE == "pure" else _twin().decode_entry)
