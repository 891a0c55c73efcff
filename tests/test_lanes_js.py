"""JetStream's compiled twins other than the file store (tests/test_lanes_store.py) against their pure-Python
references: the same inputs to both lanes, the same outputs."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lanes import COMPILED_ERROR
import rillet.jetstream  # noqa: F401  (registers its lane twins)
from rillet import lane

pytestmark = pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")

pure_ack = lane.pure("ack_numbers")


def _compiled_ack():
    return lane.compiled("ack_numbers")


# tokens as they come (numbers of every length, what Python's int also takes: signs, spaces, underscores) and
# as they should not (letters, empty, a lone sign)
token = st.one_of(
    st.integers(0, 10**25).map(lambda v: str(v).encode()),
    st.integers(0, 999).map(lambda v: b"%03d" % v),
    st.sampled_from([b"", b"+1", b"-1", b" 7", b"7 ", b"1_000", b"1__0", b"_1", b"+", b"-", b"0x10", b"\t3\n",
                     b"\xd9\xa3", b"abc", b"ACK", b"$JS", b"*", b">", b"9" * 18, b"9" * 19, b"0" * 30]),
    st.binary(max_size=6),
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(token, min_size=0, max_size=14))
def test_ack_numbers_same_in_both_lanes(tokens):
    subject = b".".join(tokens)
    assert _compiled_ack()(subject) == pure_ack(subject)


@given(st.integers(1, 10**19), st.integers(0, 10**19), st.integers(0, 10**19), st.booleans(),
       st.lists(st.sampled_from([b"x", b"1", b"tok"]), max_size=3))
def test_ack_numbers_of_real_ack_subjects(dc, sseq, dseq, v2, extra):
    if v2:
        subject = b"$JS.ACK.dom.HASH.S.C.%d.%d.%d.1764377000000000000.42" % (dc, sseq, dseq) + b"".join(
            b"." + e for e in extra)
    else:
        subject = b"$JS.ACK.S.C.%d.%d.%d.1764377000000000000.42" % (dc, sseq, dseq)
    assert pure_ack(subject) == _compiled_ack()(subject) == (dc, sseq, dseq)


def test_ack_numbers_edges():
    for lane_fn in (pure_ack, _compiled_ack()):
        assert lane_fn(b"$JS.ACK.S.C.1.2.3.4") is None  # 8 tokens
        assert lane_fn(b"$JS.ACK.a.b.S.C.1.2.3.4") is None  # 10 tokens
        assert lane_fn(b"$JS.ACK.S.C.1.x.3.4.5") is None
        assert lane_fn(b"$JS.ACK.S.C.+1. 2.3_0.4.5") == (1, 2, 30)
        assert lane_fn(b"$JS.ACK.S.C.1.99999999999999999999.3.4.5") == (1, 99999999999999999999, 3)
    assert lane.ack_numbers is (pure_ack if lane.LANE == "pure" else _compiled_ack())


pure_reply = lane.pure("ack_reply")


def _compiled_reply():
    return lane.compiled("ack_reply")


prefix = st.one_of(
    st.sampled_from(["$JS.ACK.S.C.", "$JS.ACK.dom.HASH.ORDERS.durable-1.", "", "$JS.ACK.ünï.C."]),
    st.text(max_size=30),
)
number = st.one_of(st.integers(0, 10**6), st.integers(0, 2**63 - 1), st.integers(-10**20, 10**20),
                   st.integers(2**63 - 5, 2**64 + 5), st.booleans())


@settings(max_examples=3000, deadline=None)
@given(prefix, number, number, number, number, number)
def test_ack_reply_same_in_both_lanes(p, dc, sseq, dseq, ts, pending):
    a, b = pure_reply(p, dc, sseq, dseq, ts, pending), _compiled_reply()(p, dc, sseq, dseq, ts, pending)
    assert a == b and type(a) is type(b) is str


def test_ack_reply_shape():
    for fn in (pure_reply, _compiled_reply()):
        assert fn("$JS.ACK.S.C.", 1, 10, 9, 1764377000000000000, 0) == "$JS.ACK.S.C.1.10.9.1764377000000000000.0"
        assert fn("$JS.ACK.S.C.", 0, 2**63 - 1, 9, 0, 10**12) == f"$JS.ACK.S.C.0.{2**63 - 1}.9.0.{10**12}"
    assert lane.ack_reply is (pure_reply if lane.LANE == "pure" else _compiled_reply())


# ---- a stream's held replies: rillet.jetstream.streamreplies.send_replies ---------------------------------------

class _Sub:
    def __init__(self, subject):
        self.subject, self.icb = subject, None


class _Result:
    def __init__(self, subject):
        self.psubs, self.qsubs, self.name = [_Sub(subject)], [], subject


class _Sublist:
    def __init__(self, calls):
        self.calls, self._inserts, self._removes = calls, 0, 0

    def reverse_match(self, pattern):
        self.calls.append(("reverse_match", pattern))
        return [_Sub(pattern.rsplit(".", 1)[0] + ".7")] if pattern.startswith("one.") else []


class _Acc:
    def __init__(self, calls, mappings=False):
        self.calls, self.mappings, self.gw, self.sublist = calls, mappings, None, _Sublist(calls)

    def match(self, subject):
        self.calls.append(("match", subject))
        return _Result(subject)

    def deliver_result(self, ic, r, reply, rr, hdr, payload):
        self.calls.append(("deliver", r.name, reply, rr, hdr, payload))


class _Server:
    def __init__(self, calls):
        self.calls = calls

    def schedule_flush(self):
        self.calls.append(("flush",))


class _IC:
    def __init__(self, mappings=False):
        self.calls = []
        self.account, self.server = _Acc(self.calls, mappings), _Server(self.calls)
        self.in_msgs = self.in_bytes = 0

    def publish(self, *args):
        self.calls.append(("publish", *args))


reply_subject = st.sampled_from([b"_INBOX.a.1", b"_INBOX.a.2", b"_INBOX.b.1", b"one.x.7", b"one.x.8", b"x", b".y",
                                 b"a.", b"\xff.\xfe.1"])
held_item = st.tuples(reply_subject, st.sampled_from([b"", b"{}", b"pay"]), st.sampled_from([b"", b"", b"H\r\n"]),
                      st.integers(0, 9))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.lists(held_item, max_size=12), st.booleans()), min_size=1, max_size=3), st.booleans(),
       st.booleans())
def test_send_replies_same_in_both_lanes(passes, mappings, change):
    from rillet._speedups import _cjs
    from rillet.jetstream import streamreplies
    runs = []
    for fn in (streamreplies.reference_send_replies, _cjs.send_replies):
        ic, memo = _IC(mappings), {}
        for i, (held, fill) in enumerate(passes):
            if change and i == 1:
                ic.account.sublist._inserts += 1  # (a subscription came between two passes)
            fn(ic, list(held), memo, fill)
        runs.append((ic.calls, ic.in_msgs, ic.in_bytes, {k: (v if k is None else getattr(v, "name", v))
                                                         for k, v in memo.items() if k is not None}))
    assert runs[0] == runs[1]
