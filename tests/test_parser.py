"""Unit tests of the sans-IO client protocol parser (rillet.protocol.parser.ClientParser).

A recording handler turns every handler call into a tuple, so a test states the exact calls a byte stream
must produce. Expected behaviour mirrors nats-server (v2.15.1, checked with raw sockets): operation names are
case-insensitive, arguments are separated by spaces and tabs, a control line may end in "\\n" alone, but a
payload must be followed by exactly "\\r\\n".
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rillet.protocol.parser import (AUTH_VIOLATION, MAX_CONTROL_LINE, MAX_PAYLOAD_VIOLATION, UNKNOWN_OP,
                                    ClientParser, ProtocolError)

from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in both lanes (rillet.lane): the pure-Python parser and its compiled twin."""
    with use_lane(request.param, globals()):
        yield request.param


class Recorder:
    """A parser handler that records every call as a tuple (byte arguments copied to ``bytes``)."""

    def __init__(self, allow_before_connect: bool = True) -> None:
        self.calls: list[tuple] = []
        self.allow_before_connect = allow_before_connect
        self.parser: ClientParser | None = None
        self.on_connect = None  # optional callable(parser, arg)

    def proto_connect(self, arg):
        self.calls.append(("connect", bytes(arg)))
        if self.on_connect is not None:
            self.on_connect(self.parser, arg)

    def proto_pub(self, subject, reply, payload):
        self.calls.append(("pub", bytes(subject), None if reply is None else bytes(reply), bytes(payload)))

    def proto_hpub(self, subject, reply, hdr_len, msg):
        self.calls.append(("hpub", bytes(subject), None if reply is None else bytes(reply), hdr_len, bytes(msg)))

    def proto_sub(self, subject, queue, sid):
        self.calls.append(("sub", bytes(subject), None if queue is None else bytes(queue), bytes(sid)))

    def proto_unsub(self, sid, max_msgs):
        self.calls.append(("unsub", bytes(sid), max_msgs))

    def proto_ping(self):
        self.calls.append(("ping",))

    def proto_pong(self):
        self.calls.append(("pong",))

    def proto_info(self, arg):
        self.calls.append(("info", bytes(arg)))

    def proto_ok(self):
        self.calls.append(("ok",))

    def proto_err(self, arg):
        self.calls.append(("err", bytes(arg)))

    def proto_before_connect(self):
        self.calls.append(("before_connect",))
        return self.allow_before_connect


def make(**kw) -> tuple[ClientParser, Recorder]:
    allow = kw.pop("allow_before_connect", True)
    rec = Recorder(allow)
    p = ClientParser(rec, **kw)
    rec.parser = p
    return p, rec


def run(data: bytes, chunks: list[int] | None = None, **kw) -> tuple[list[tuple], ProtocolError | None]:
    """Feed ``data`` (whole, or cut at the given offsets); return the calls and the error raised, if any."""
    p, rec = make(**kw)
    pieces = [data] if chunks is None else split_at(data, chunks)
    try:
        for piece in pieces:
            p.feed(piece)
    except ProtocolError as e:
        return rec.calls, e
    return rec.calls, None


def split_at(data: bytes, cuts) -> list[bytes]:
    out, prev = [], 0
    for c in sorted(set(cuts)):
        if 0 < c < len(data):
            out.append(data[prev:c])
            prev = c
    out.append(data[prev:])
    return out


def ok(data: bytes, **kw) -> list[tuple]:
    calls, err = run(data, **kw)
    assert err is None, f"unexpected {err.client_error!r}: {err.detail}"
    return calls


def fails(data: bytes, **kw) -> tuple[list[tuple], ProtocolError]:
    calls, err = run(data, **kw)
    assert err is not None, f"no error; calls {calls}"
    return calls, err


# ---- every operation --------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, expected", [
    (b'CONNECT {"verbose":false,"pedantic":false}\r\n', [("connect", b'{"verbose":false,"pedantic":false}')]),
    (b'CONNECT {"name":"a b  c"}\r\n', [("connect", b'{"name":"a b  c"}')]),  # JSON spaces kept
    (b"CONNECT  {}  \r\n", [("connect", b"{}")]),
    (b"PING\r\n", [("ping",)]),
    (b"PONG\r\n", [("pong",)]),
    (b"PUB foo 5\r\nhello\r\n", [("pub", b"foo", None, b"hello")]),
    (b"PUB foo bar 5\r\nhello\r\n", [("pub", b"foo", b"bar", b"hello")]),
    (b"PUB foo.bar.> _INBOX.x.y 3\r\nabc\r\n", [("pub", b"foo.bar.>", b"_INBOX.x.y", b"abc")]),
    (b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", [("hpub", b"foo", None, 12, b"NATS/1.0\r\n\r\nhi")]),
    (b"HPUB foo rep 12 12\r\nNATS/1.0\r\n\r\n\r\n", [("hpub", b"foo", b"rep", 12, b"NATS/1.0\r\n\r\n")]),
    (b"HPUB foo 0 2\r\nhi\r\n", [("hpub", b"foo", None, 0, b"hi")]),
    (b"SUB foo 1\r\n", [("sub", b"foo", None, b"1")]),
    (b"SUB foo.* workers 22\r\n", [("sub", b"foo.*", b"workers", b"22")]),
    (b"UNSUB 1\r\n", [("unsub", b"1", 0)]),
    (b"UNSUB 1 10\r\n", [("unsub", b"1", 10)]),
    (b"UNSUB 1 0\r\n", [("unsub", b"1", 0)]),
    (b"INFO {\"x\":1}\r\n", [("info", b'{"x":1}')]),
    (b"+OK\r\n", [("ok",)]),
    (b"-ERR 'Unknown Protocol Operation'\r\n", [("err", b"'Unknown Protocol Operation'")]),
])
def test_each_operation(data, expected):
    assert ok(data) == expected


def test_binary_subjects_and_sids_pass_through():
    # nats-server delivers MSG \xff\xfe for SUB \xff\xfe: the parser does not decode or validate
    assert ok(b"SUB \xff\xfe \xc3\xa9 1\r\nPUB \xff\xfe 1\r\n\x00\r\n") == [
        ("sub", b"\xff\xfe", b"\xc3\xa9", b"1"), ("pub", b"\xff\xfe", None, b"\x00")]


# ---- case-insensitivity and separators ----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["pub", "Pub", "pUB", "PUB"])
def test_pub_case_insensitive(op):
    assert ok(op.encode() + b" foo 2\r\nhi\r\n") == [("pub", b"foo", None, b"hi")]


@pytest.mark.parametrize("data, expected", [
    (b"ping\r\n", ("ping",)), (b"PiNg\r\n", ("ping",)), (b"pong\r\n", ("pong",)), (b"pOnG\r\n", ("pong",)),
    (b"sub foo 1\r\n", ("sub", b"foo", None, b"1")), (b"Sub foo 1\r\n", ("sub", b"foo", None, b"1")),
    (b"unsub 1\r\n", ("unsub", b"1", 0)), (b"UnSub 1 2\r\n", ("unsub", b"1", 2)),
    (b"hpub foo 0 0\r\n\r\n", ("hpub", b"foo", None, 0, b"")), (b"HPub foo 0 0\r\n\r\n", ("hpub", b"foo", None, 0, b"")),
    (b"connect {}\r\n", ("connect", b"{}")), (b"Connect {}\r\n", ("connect", b"{}")),
    (b"info {}\r\n", ("info", b"{}")), (b"+ok\r\n", ("ok",)), (b"-err 'x'\r\n", ("err", b"'x'")),
])
def test_ops_case_insensitive(data, expected):
    assert ok(data) == [expected]


@pytest.mark.parametrize("data, expected", [
    (b"PUB\tfoo\t2\r\nhi\r\n", ("pub", b"foo", None, b"hi")),
    (b"PUB\t\tfoo\t\t2\r\nhi\r\n", ("pub", b"foo", None, b"hi")),
    (b"PUB  foo   2  \r\nhi\r\n", ("pub", b"foo", None, b"hi")),
    (b"PUB \t foo \t bar \t 2\t\r\nhi\r\n", ("pub", b"foo", b"bar", b"hi")),
    (b"PUB foo 02\r\nhi\r\n", ("pub", b"foo", None, b"hi")),  # leading zeros are fine (nats-server too)
    (b"HPUB\tfoo\t\t0  2 \r\nhi\r\n", ("hpub", b"foo", None, 0, b"hi")),
    (b"SUB\tfoo\tq\t1\r\n", ("sub", b"foo", b"q", b"1")),
    (b"SUB   foo   q   1   \r\n", ("sub", b"foo", b"q", b"1")),
    (b"UNSUB\t1\t5\r\n", ("unsub", b"1", 5)),
    (b"UNSUB   1   \r\n", ("unsub", b"1", 0)),
    (b"CONNECT\t{}\r\n", ("connect", b"{}")),
    (b"PING \r\n", ("ping",)),
    (b"PING\t\r\n", ("ping",)),
])
def test_tabs_and_multiple_spaces(data, expected):
    assert ok(data) == [expected]


# ---- line endings (mirrors nats-server: "\n" ends a control line, a payload needs "\r\n") -----------------

@pytest.mark.parametrize("data, expected", [
    (b"PING\n", [("ping",)]),
    (b"PONG\n", [("pong",)]),
    (b"SUB foo 1\n", [("sub", b"foo", None, b"1")]),
    (b"UNSUB 1 3\n", [("unsub", b"1", 3)]),
    (b"CONNECT {}\n", [("connect", b"{}")]),
    (b"PUB foo 2\nhi\r\n", [("pub", b"foo", None, b"hi")]),
    (b"HPUB foo 0 2\nhi\r\n", [("hpub", b"foo", None, 0, b"hi")]),
    (b"PING\nPONG\r\nPING\n", [("ping",), ("pong",), ("ping",)]),
])
def test_lf_only_control_lines_accepted(data, expected):
    assert ok(data) == expected


@pytest.mark.parametrize("data", [
    b"PUB foo 2\nhi\n\n",        # payload followed by LF only: nats-server says Unknown Protocol Operation
    b"PUB foo 2\r\nhi\nPING\r\n",
    b"PUB foo 2\r\nhi\rPING\r\n",  # CR not followed by LF
    b"HPUB foo 0 2\r\nhi\n\r\n",
])
def test_payload_needs_crlf(data):
    calls, err = fails(data)
    assert calls == []
    assert err.client_error == UNKNOWN_OP


@pytest.mark.parametrize("data", [b"\r\n", b"\n", b"\r\nPING\r\n", b" PING\r\n", b"\tPING\r\n"])
def test_empty_or_indented_line_is_unknown_op(data):
    calls, err = fails(data)
    assert calls == [] and err.client_error == UNKNOWN_OP


# ---- payloads ------------------------------------------------------------------------------------------------

def test_zero_length_payloads():
    assert ok(b"PUB foo 0\r\n\r\nPUB foo r 0\r\n\r\nHPUB foo 0 0\r\n\r\n") == [
        ("pub", b"foo", None, b""), ("pub", b"foo", b"r", b""), ("hpub", b"foo", None, 0, b"")]


def test_payload_containing_crlf_and_protocol_text():
    payload = b"PUB bar 1\r\nx\r\nPING\r\n-ERR 'no'\r\n\r\n"
    data = b"PUB foo %d\r\n" % len(payload) + payload + b"\r\nPING\r\n"
    assert ok(data) == [("pub", b"foo", None, payload), ("ping",)]


def test_payload_of_crlf_only():
    assert ok(b"PUB foo 2\r\n\r\n\r\n") == [("pub", b"foo", None, b"\r\n")]


def test_binary_payload_all_byte_values():
    payload = bytes(range(256)) * 4
    assert ok(b"PUB foo 1024\r\n" + payload + b"\r\n") == [("pub", b"foo", None, payload)]


def test_payload_exactly_max_payload_is_accepted():
    calls = ok(b"PUB foo 100\r\n" + b"x" * 100 + b"\r\nHPUB foo 10 100\r\n" + b"y" * 100 + b"\r\n",
               max_payload=100)
    assert calls == [("pub", b"foo", None, b"x" * 100), ("hpub", b"foo", None, 10, b"y" * 100)]


def test_many_ops_in_one_buffer():
    data = b"".join(b"PUB s.%d 1\r\n%d\r\n" % (i, i % 10) for i in range(1000))
    calls = ok(data)
    assert len(calls) == 1000
    assert calls[999] == ("pub", b"s.999", None, b"9")


# ---- split reads -------------------------------------------------------------------------------------------

MIXED = (
    b'CONNECT {"verbose":false,"name":"a b"}\r\n'
    b"PING\r\n"
    b"pong\n"
    b"SUB foo 1\r\n"
    b"sub\tbar  workers\t2\r\n"
    b"PUB foo 5\r\nhello\r\n"
    b"pub foo reply.to 0\r\n\r\n"
    b"PUB bar 20\r\nPUB x 1\r\ny\r\nPING\r\n\r\n\r\n"
    b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    b"hpub foo rep 17 17\nNATS/1.0\r\nA:B\r\n\r\n\r\n"
    b"UNSUB 1 5\r\n"
    b"unsub 2\n"
    b"INFO {}\r\n"
    b"+OK\r\n"
    b"-ERR 'x'\r\n"
    b"PUB \xff 3\r\n\x00\r\n\r\n"
    b"PING\r\n"
)


def test_mixed_stream_reference():
    calls = ok(MIXED)
    assert calls == [
        ("connect", b'{"verbose":false,"name":"a b"}'),
        ("ping",), ("pong",),
        ("sub", b"foo", None, b"1"), ("sub", b"bar", b"workers", b"2"),
        ("pub", b"foo", None, b"hello"), ("pub", b"foo", b"reply.to", b""),
        ("pub", b"bar", None, b"PUB x 1\r\ny\r\nPING\r\n\r\n"),
        ("hpub", b"foo", None, 12, b"NATS/1.0\r\n\r\nhi"),
        ("hpub", b"foo", b"rep", 17, b"NATS/1.0\r\nA:B\r\n\r\n"),
        ("unsub", b"1", 5), ("unsub", b"2", 0),
        ("info", b"{}"), ("ok",), ("err", b"'x'"),
        ("pub", b"\xff", None, b"\x00\r\n"),
        ("ping",),
    ]


def test_split_at_every_byte_boundary():
    whole = ok(MIXED)
    for i in range(len(MIXED) + 1):
        assert ok(MIXED, chunks=[i]) == whole, f"split at {i}"


def test_split_at_every_pair_of_boundaries():
    data = b"PUB foo r 5\r\nhello\r\nHPUB a 2 3\r\n\r\nx\r\nSUB a q 1\r\nPING\r\n"
    whole = ok(data)
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            assert ok(data, chunks=[i, j]) == whole, f"split at {i},{j}"


def test_one_byte_chunks():
    assert ok(MIXED, chunks=list(range(len(MIXED)))) == ok(MIXED)


def test_pending_bytes_while_split():
    p, rec = make()
    p.feed(b"PUB foo 5\r\nhel")
    assert p.pending_bytes() == len(b"PUB foo 5\r\nhel")
    p.feed(b"lo\r")
    assert rec.calls == []
    p.feed(b"\nPI")
    assert rec.calls == [("pub", b"foo", None, b"hello")]
    assert p.pending_bytes() == 2
    p.feed(b"NG\r\n")
    assert rec.calls[-1] == ("ping",) and p.pending_bytes() == 0


def test_split_error_same_as_whole():
    # The error (and the calls before it) do not depend on how the stream is cut.
    data = b"PING\r\nSUB foo 1\r\nPUB foo 2\r\nhiX\r\nPING\r\n"
    whole_calls, whole_err = run(data)
    assert whole_err is not None and whole_err.client_error == UNKNOWN_OP
    for i in range(len(data) + 1):
        calls, err = run(data, chunks=[i])
        assert calls == whole_calls and err is not None and err.client_error == UNKNOWN_OP, i


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(MIXED)), max_size=40))
def test_random_chunkings(cuts):
    assert ok(MIXED, chunks=cuts) == ok(MIXED)


_op = st.one_of(
    st.just(b"PING\r\n"), st.just(b"pong\n"), st.just(b"+OK\r\n"), st.just(b"-ERR 'e'\r\n"),
    st.just(b"INFO {}\r\n"), st.just(b'CONNECT {"a":" b "}\r\n'),
    st.tuples(st.sampled_from([b"foo", b"a.b.c", b"\xff"]), st.sampled_from([b"", b" r", b"\tr.x"]),
              st.binary(max_size=40)).map(lambda t: b"PUB %s%s %d\r\n%s\r\n" % (t[0], t[1], len(t[2]), t[2])),
    st.tuples(st.binary(max_size=20), st.binary(max_size=20)).map(
        lambda t: b"HPUB h %d %d\r\n%s%s\r\n" % (len(t[0]), len(t[0]) + len(t[1]), t[0], t[1])),
    st.tuples(st.sampled_from([b"foo", b"x.*"]), st.sampled_from([b"", b" q"]), st.integers(0, 99)).map(
        lambda t: b"SUB %s%s %d\r\n" % t),
    st.tuples(st.integers(0, 99), st.sampled_from([b"", b" 0", b" 7"])).map(lambda t: b"UNSUB %d%s\n" % t),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=1, max_size=15), data=st.data())
def test_random_streams_random_chunkings(ops, data):
    stream = b"".join(ops)
    whole = ok(stream)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=30))
    assert ok(stream, chunks=cuts) == whole


# ---- errors ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    b"XYZ\r\n", b"MSG foo 1 2\r\nhi\r\n", b"PUBX foo 1\r\nx\r\n", b"PIN\r\n", b"PO\r\n", b"P\r\n",
    b"+O\r\n", b"SUBX foo 1\r\n", b"UNSUBX 1\r\n", b"HPUBX foo 0 0\r\n", b"CONN {}\r\n",
    b"SUB\r\n", b"UNSUB\r\n", b"HPUB\r\n", b"\x00\r\n", b"RS+ foo\r\n", b"LS+ foo\r\n", b"A+ foo\r\n",
])
def test_unknown_op(data):
    calls, err = fails(data)
    assert calls == []
    assert err.client_error == UNKNOWN_OP


@pytest.mark.parametrize("data", [b"X", b"M", b"\x00", b" ", b"\r", b"{"])
def test_bad_first_byte_fails_without_waiting_for_a_line(data):
    calls, err = fails(data)
    assert err.client_error == UNKNOWN_OP


def test_unknown_op_after_good_ops():
    calls, err = fails(b"PING\r\nSUB foo 1\r\nBOGUS\r\nPING\r\n")
    assert calls == [("ping",), ("sub", b"foo", None, b"1")]
    assert err.client_error == UNKNOWN_OP


@pytest.mark.parametrize("line", [b"PUB foo 1000001\r\n", b"PUB foo bar 1000001\r\n", b"pub foo 999999999\r\n",
                                  b"HPUB foo 0 1000001\r\n", b"HPUB foo r 10 1000001\r\n"])
def test_max_payload_raised_when_control_line_completes(line):
    p, rec = make(max_payload=1000000)
    p.feed(line[:-1])  # the control line is not complete yet: no error
    with pytest.raises(ProtocolError) as ei:
        p.feed(line[-1:])  # completes it: the error comes before any payload byte
    assert ei.value.client_error == MAX_PAYLOAD_VIOLATION
    assert ei.value.reason == "Maximum Message Payload Exceeded"
    assert rec.calls == []


def test_max_payload_whole_line_in_one_read():
    calls, err = fails(b"PING\r\nPUB foo 101\r\n", max_payload=100)
    assert calls == [("ping",)] and err.client_error == MAX_PAYLOAD_VIOLATION


def test_max_payload_changed_by_connect_applies_to_rest_of_buffer():
    # A per-user max_payload set while handling CONNECT applies to the PUB in the same read.
    p, rec = make(max_payload=1000)
    rec.on_connect = lambda parser, arg: setattr(parser, "max_payload", 10)
    with pytest.raises(ProtocolError) as ei:
        p.feed(b"CONNECT {}\r\nPUB foo 5\r\nhello\r\nPUB foo 11\r\n")
    assert ei.value.client_error == MAX_PAYLOAD_VIOLATION
    assert rec.calls == [("connect", b"{}"), ("pub", b"foo", None, b"hello")]


@pytest.mark.parametrize("data", [
    b"PUB foo x\r\n", b"PUB foo -1\r\n", b"PUB foo 1x\r\n", b"PUB foo +2\r\n", b"PUB foo 1.0\r\n",
    b"PUB foo 99999999999999999999\r\n", b"PUB foo \xd9\xa2\r\n",  # an Arabic-Indic digit is not a size
    b"PUB foo r x\r\n",
    b"HPUB foo x 2\r\nab\r\n", b"HPUB foo 1 x\r\nab\r\n", b"HPUB foo -1 2\r\n", b"HPUB foo \xd9\xa2 2\r\n",
    b"HPUB foo 0 99999999999999999999\r\n",
])
def test_bad_size_closes_without_err(data):
    # nats-server closes these connections without an -ERR line
    calls, err = fails(data)
    assert calls == [] and err.client_error is None


@pytest.mark.parametrize("data", [b"PUB foo\r\n", b"PUB foo bar baz 2\r\nhi\r\n", b"HPUB foo 2\r\n",
                                  b"HPUB foo a b c d\r\n", b"SUB foo\r\n", b"SUB foo q 1 x\r\n", b"UNSUB 1 2 3\r\n"])
def test_wrong_argument_count_closes_without_err(data):
    calls, err = fails(data)
    assert calls == [] and err.client_error is None


@pytest.mark.parametrize("data", [b"HPUB foo 3 2\r\nab\r\n", b"HPUB foo r 15 14\r\n"])
def test_hpub_header_size_larger_than_total(data):
    calls, err = fails(data)
    assert calls == [] and err.client_error is None
    assert "Header Size larger" in err.detail


@pytest.mark.parametrize("data", [
    b"PUB foo 2\r\nhiX\r\n",    # payload longer than announced
    b"PUB foo 2\r\nh\r\nPING\r\n",  # shorter
    b"PUB foo 0\r\nx\r\n",
    b"HPUB foo 0 2\r\nhij\r\n",
])
def test_missing_crlf_after_payload(data):
    calls, err = fails(data)
    assert calls == [] and err.client_error == UNKNOWN_OP


# ---- max control line ---------------------------------------------------------------------------------------

MCL = 64


def _arg_lines(n: int) -> dict[str, bytes]:
    """A control line per operation whose argument part (after "OP ") is exactly n bytes."""
    return {
        "PUB": b"PUB foo " + b"r" * (n - 6) + b" 1\r\nx\r\n",
        "HPUB": b"HPUB foo " + b"r" * (n - 8) + b" 0 1\r\nx\r\n",
        "SUB": b"SUB foo " + b"q" * (n - 6) + b" 1\r\n",
        "UNSUB": b"UNSUB " + b"1" * n + b"\r\n",
        "CONNECT": b'CONNECT {"name":"' + b"n" * (n - 11) + b'"}\r\n',
        "INFO": b"INFO {" + b" " * (n - 2) + b"}\r\n",
    }


@pytest.mark.parametrize("op", ["PUB", "HPUB", "SUB", "UNSUB", "CONNECT", "INFO"])
def test_control_line_at_limit_is_accepted(op):
    # nats-server with max_control_line 64: an argument of 64 bytes is fine, 65 is not
    calls = ok(_arg_lines(MCL)[op], max_control_line=MCL)
    assert len(calls) == 1


@pytest.mark.parametrize("op", ["PUB", "HPUB", "SUB", "UNSUB", "CONNECT", "INFO"])
@pytest.mark.parametrize("split", [False, True])
def test_control_line_over_limit(op, split):
    data = _arg_lines(MCL + 1)[op]
    chunks = list(range(0, len(data), 7)) if split else None
    calls, err = fails(data, chunks=chunks, max_control_line=MCL)
    assert calls == []
    assert err.client_error == MAX_CONTROL_LINE
    assert err.reason == "Maximum Control Line Exceeded"


def test_long_control_line_whole_default_limit():
    calls, err = fails(b"SUB " + b"a" * 5000 + b" 1\r\n")
    assert err.client_error == MAX_CONTROL_LINE


@pytest.mark.parametrize("prefix", [b"PUB foo ", b"SUB ", b"UNSUB ", b"HPUB ", b"CONNECT ", b"INFO ", b"PUB "])
@pytest.mark.parametrize("chunk", [1, 100, 1000])
def test_endless_control_line_in_chunks(prefix, chunk):
    """A line that never ends: the parser gives up before buffering much more than max_control_line."""
    mcl = 1024
    p, rec = make(max_control_line=mcl)
    p.feed(prefix)
    piece = b"x" * chunk
    fed = len(prefix)
    with pytest.raises(ProtocolError) as ei:
        while fed < 100 * mcl:
            p.feed(piece)
            fed += chunk
            assert p.pending_bytes() <= mcl + 64, f"buffered {p.pending_bytes()} bytes"
    assert ei.value.client_error == MAX_CONTROL_LINE
    assert fed <= mcl + 64 + chunk
    assert rec.calls == []


def test_endless_line_after_good_ops_in_one_read():
    p, rec = make(max_control_line=100)
    with pytest.raises(ProtocolError) as ei:
        p.feed(b"PING\r\nPUB foo " + b"x" * 1000)
    assert ei.value.client_error == MAX_CONTROL_LINE
    assert rec.calls == [("ping",)]


# ---- memory bound -------------------------------------------------------------------------------------------

def test_declared_payload_buffered_only_up_to_its_size():
    size = 200_000
    p, rec = make(max_payload=size)
    head = b"PUB foo %d\r\n" % size
    p.feed(head)
    body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    step = 8192
    for i in range(0, size, step):
        p.feed(body[i:i + step])
        assert p.pending_bytes() <= len(head) + size + 2
        assert rec.calls == []
    # the end of the payload arrives together with the next operation: the buffer is released
    p.feed(b"\r\nPING\r\n")
    assert rec.calls == [("pub", b"foo", None, body), ("ping",)]
    assert p.pending_bytes() == 0


def test_payload_then_more_in_same_read_is_not_over_buffered():
    p, rec = make(max_payload=1000)
    p.feed(b"PUB foo 1000\r\n")
    p.feed(b"y" * 1000 + b"\r\n" + b"SUB a 1\r\nPUB bar 3\r\nab")
    assert rec.calls == [("pub", b"foo", None, b"y" * 1000), ("sub", b"a", None, b"1")]
    assert p.pending_bytes() == len(b"PUB bar 3\r\nab")


# ---- awaiting CONNECT -------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"PING\r\n", b"SUB foo 1\r\n", b"PUB foo 1\r\nx\r\n", b"XYZ\r\n", b"+OK\r\n"])
def test_op_before_connect_refused_is_authorization_violation(data):
    p, rec = make(allow_before_connect=False)
    p.awaiting_connect = True
    with pytest.raises(ProtocolError) as ei:
        p.feed(data)
    assert ei.value.client_error == AUTH_VIOLATION == "Authorization Violation"
    assert ei.value.reason == "Authentication Failure"
    assert rec.calls == [("before_connect",)]


@pytest.mark.parametrize("connect", [b"CONNECT {}\r\n", b"connect {}\r\n", b"Connect\t{}\n"])
def test_connect_while_awaiting_connect_does_not_ask(connect):
    p, rec = make(allow_before_connect=False)
    p.awaiting_connect = True
    rec.on_connect = lambda parser, arg: setattr(parser, "awaiting_connect", False)
    p.feed(connect + b"PING\r\nSUB x 1\r\n")
    assert rec.calls == [("connect", b"{}"), ("ping",), ("sub", b"x", None, b"1")]


def test_before_connect_allowed_once():
    # e.g. no_auth_user: the handler lets the op through and stops awaiting CONNECT
    p, rec = make()
    p.awaiting_connect = True
    orig = rec.proto_before_connect

    def allow():
        p.awaiting_connect = False
        return orig()

    rec.proto_before_connect = allow
    p.feed(b"PI")
    p.feed(b"NG\r\nPING\r\n")
    assert rec.calls == [("before_connect",), ("ping",), ("ping",)]


def test_before_connect_asked_per_op_while_still_awaiting():
    p, rec = make()
    p.awaiting_connect = True
    p.feed(b"PING\r\nPONG\r\n")
    assert rec.calls == [("before_connect",), ("ping",), ("before_connect",), ("pong",)]


# ---- nats-server compatibility: behaviour observed on nats-server v2.15.1 -------------------------------

@pytest.mark.parametrize("data, expected", [
    (b"PINGxyz\r\n", ("ping",)),
    (b"PING foo\r\n", ("ping",)),
    (b"PONGabc\r\n", ("pong",)),
    (b"+OKx\r\n", ("ok",)),
    (b"+OK \r\n", ("ok",)),
])
def test_ping_pong_ok_ignore_rest_of_line(data, expected):
    """nats-server answers "PINGxyz" and "PING foo" with PONG, and accepts "PONGabc" and "+OK ": once the
    operation name is complete it ignores the rest of the line. Rillet closes with Unknown Protocol Operation."""
    assert ok(data) == [expected]


@pytest.mark.parametrize("data", [b"UNSUB 1 x\r\n", b"UNSUB 1 -2\r\n", b"UNSUB 1 \xd9\xa2\r\n"])
def test_unsub_bad_max_is_not_fatal(data):
    """nats-server accepts "UNSUB 1 x" (and removes the subscription now, as for no max); Rillet closes the
    connection with a parse error."""
    calls, err = run(data)
    assert err is None, f"{err.detail}"
    assert len(calls) == 1 and calls[0][:2] == ("unsub", b"1") and calls[0][2] <= 0


@pytest.mark.parametrize("data, expected", [
    (b"PUB foo\x0bbar 1\r\na\r\n", [("pub", b"foo\x0bbar", None, b"a")]),
    (b"PUB foo\x0cbar 1\r\na\r\n", [("pub", b"foo\x0cbar", None, b"a")]),
    (b"SUB foo\x0cbar 1\r\n", [("sub", b"foo\x0cbar", None, b"1")]),
])
def test_only_space_and_tab_separate_arguments(data, expected):
    """nats-server splits arguments on space and tab only: "PUB foo\\x0bbar 1" publishes to the subject
    "foo\\x0bbar". Rillet uses bytes.split(), which also splits on \\x0b and \\x0c, so the message goes to "foo"
    with reply subject "bar"."""
    assert ok(data) == expected


@pytest.mark.parametrize("data", [b"SUB foo\x0b1\r\n", b"PUB foo 1\x0c\r\na\r\n"])
def test_vt_ff_are_not_separators_errors(data):
    """nats-server closes these (one SUB argument; size "1\\x0c"); Rillet accepts them."""
    calls, err = run(data)
    assert err is not None and err.client_error is None, calls


def test_control_line_limit_does_not_count_separator_whitespace():
    """nats-server measures the argument after skipping the blanks that follow the op name, so
    "PUB   <64 bytes>" passes max_control_line 64; Rillet counts the extra blanks and closes."""
    line = b"PUB   foo " + b"r" * (MCL - 6) + b" 1\r\nx\r\n"
    assert ok(line, max_control_line=MCL) == [("pub", b"foo", b"r" * (MCL - 6), b"x")]


@pytest.mark.parametrize("prefix", [b"PX", b"PUBX", b"SUx", b"UNSUx", b"HPx", b"+OX", b"-EX"])
def test_bad_op_name_in_endless_line_is_unknown_op(prefix):
    """nats-server rejects an impossible op name as soon as the offending byte arrives (Unknown Protocol
    Operation). Rillet waits for the end of the line, and a line that never ends is reported as
    Maximum Control Line Exceeded instead: the error text then depends on how the bytes were cut."""
    p, rec = make(max_control_line=256)
    with pytest.raises(ProtocolError) as ei:
        p.feed(prefix)
        for _ in range(100):
            p.feed(b"x" * 64)
    assert ei.value.client_error == UNKNOWN_OP


@pytest.mark.parametrize("data", [b"PUB foo 9999999999\r\n", b"PUB foo 123456789012345678\r\n",
                                  b"HPUB foo 0 99999999999\r\n"])
def test_size_of_ten_or_more_digits_is_a_bad_size(data):
    """nats-server parses at most 9 digits: "PUB foo 999999999" is a Maximum Payload Violation, but a
    10-digit size is a bad size and the connection is closed without an -ERR. Rillet takes up to 18 digits and
    answers -ERR 'Maximum Payload Violation'."""
    calls, err = fails(data)
    assert err.client_error is None, err.client_error
