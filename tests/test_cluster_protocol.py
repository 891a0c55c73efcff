"""Unit and property tests of the sans-IO route, gateway and leaf node protocol (rillet.cluster.protocol, .info).

A recording handler turns every handler call into a tuple. Expected frames and error texts follow
nats-server 2.15 (server/parser.go, route.go, gateway.go, leafnode.go); tests/test_cluster_wire_go.py
checks the same parser against bytes a live Go server sends.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.cluster.protocol import (GATEWAY, LEAF, MAX_CONTROL_LINE, MAX_PAYLOAD_VIOLATION, ROUTE, UNKNOWN_OP,
                                     ProtocolError, ServerParser)

from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in both lanes (rillet.lane): the pure-Python parser and its compiled twin."""
    with use_lane(request.param, globals()):
        yield request.param


class Recorder:
    """Every handler method of every kind; each call recorded as a tuple with bytes copied."""

    def __init__(self, allow_before_connect: bool = True) -> None:
        self.calls: list[tuple] = []
        self.allow_before_connect = allow_before_connect

    def _r(self, *a):
        self.calls.append(tuple(bytes(x) if isinstance(x, (bytes, bytearray, memoryview)) else
                                (tuple(bytes(q) for q in x) if isinstance(x, tuple) else x) for x in a))

    def proto_info(self, arg): self._r("info", arg)
    def proto_connect(self, arg): self._r("connect", arg)
    def proto_ping(self): self._r("ping")
    def proto_pong(self): self._r("pong")
    def proto_ok(self): self._r("ok")
    def proto_err(self, arg): self._r("err", arg)

    def proto_before_connect(self):
        self._r("before_connect")
        return self.allow_before_connect

    def proto_rs_sub(self, acc, subj, q, w): self._r("rs+", acc, subj, q, w)
    def proto_rs_unsub(self, acc, subj, q): self._r("rs-", acc, subj, q)
    def proto_rmsg(self, acc, subj, reply, qs, payload): self._r("rmsg", acc, subj, reply, qs, payload)
    def proto_hmsg(self, acc, subj, reply, qs, hdr, msg): self._r("hmsg", acc, subj, reply, qs, hdr, msg)
    def proto_ls_sub(self, origin, acc, subj, q, w): self._r("ls+", origin, acc, subj, q, w)
    def proto_ls_unsub(self, origin, acc, subj, q): self._r("ls-", origin, acc, subj, q)

    def proto_lmsg(self, origin, acc, subj, reply, qs, hdr, msg):
        self._r("lmsg", origin, acc, subj, reply, qs, hdr, msg)

    def proto_account_sub(self, acc): self._r("a+", acc)
    def proto_account_unsub(self, acc): self._r("a-", acc)
    def proto_leaf_sub(self, subj, q, w): self._r("leaf+", subj, q, w)
    def proto_leaf_unsub(self, subj, q): self._r("leaf-", subj, q)
    def proto_leaf_msg(self, subj, reply, qs, payload): self._r("leafmsg", subj, reply, qs, payload)
    def proto_leaf_hmsg(self, subj, reply, qs, hdr, msg): self._r("leafhmsg", subj, reply, qs, hdr, msg)


def run(data: bytes, kind: str = ROUTE, cuts=None, **kw):
    rec = Recorder(kw.pop("allow_before_connect", True))
    awaiting = kw.pop("awaiting_connect", False)
    p = ServerParser(rec, kind, **kw)
    p.awaiting_connect = awaiting
    pieces = [data] if cuts is None else split_at(data, cuts)
    try:
        for piece in pieces:
            p.feed(piece)
    except ProtocolError as e:
        return rec.calls, e, p
    return rec.calls, None, p


def split_at(data: bytes, cuts) -> list[bytes]:
    out, prev = [], 0
    for c in sorted(set(cuts)):
        if 0 < c < len(data):
            out.append(data[prev:c])
            prev = c
    out.append(data[prev:])
    return out


def ok(data: bytes, kind: str = ROUTE, **kw) -> list[tuple]:
    calls, err, p = run(data, kind, **kw)
    assert err is None, f"unexpected {err.client_error!r}: {err.detail}"
    assert p.pending_bytes() == 0
    return calls


def fails(data: bytes, kind: str = ROUTE, **kw) -> ProtocolError:
    calls, err, _ = run(data, kind, **kw)
    assert err is not None, f"no error; calls {calls}"
    return err


# ==== routes =================================================================================================

@pytest.mark.parametrize("data, expected", [
    (b"RS+ $G foo\r\n", ("rs+", b"$G", b"foo", None, 0)),
    (b"RS+ $G foo.* workers 3\r\n", ("rs+", b"$G", b"foo.*", b"workers", 3)),
    (b"RS+ $G foo q x\r\n", ("rs+", b"$G", b"foo", b"q", -1)),  # a bad weight is not an error in nats-server
    (b"RS- $G foo\r\n", ("rs-", b"$G", b"foo", None)),
    (b"RS- $G foo q\r\n", ("rs-", b"$G", b"foo", b"q")),
    (b"UNSUB $G foo\r\n", ("rs-", b"$G", b"foo", None)),  # UNSUB on a route is RS-
    (b"LS+ west $G foo\r\n", ("ls+", b"west", b"$G", b"foo", None, 0)),
    (b"LS+ west $G foo q 2\r\n", ("ls+", b"west", b"$G", b"foo", b"q", 2)),
    (b"LS- west $G foo\r\n", ("ls-", b"west", b"$G", b"foo", None)),
    (b"LS- west $G foo q\r\n", ("ls-", b"west", b"$G", b"foo", b"q")),
    (b"RMSG $G foo 5\r\nhello\r\n", ("rmsg", b"$G", b"foo", None, (), b"hello")),
    (b"RMSG $G foo _INBOX.a 5\r\nhello\r\n", ("rmsg", b"$G", b"foo", b"_INBOX.a", (), b"hello")),
    (b"RMSG $G foo + _INBOX.a q1 q2 5\r\nhello\r\n", ("rmsg", b"$G", b"foo", b"_INBOX.a", (b"q1", b"q2"), b"hello")),
    (b"RMSG $G foo | q1 5\r\nhello\r\n", ("rmsg", b"$G", b"foo", None, (b"q1",), b"hello")),
    (b"RMSG $G foo | 5\r\nhello\r\n", ("rmsg", b"$G", b"foo", b"|", (), b"hello")),  # 4 args: '|' is a reply
    (b"RMSG $G foo 0\r\n\r\n", ("rmsg", b"$G", b"foo", None, (), b"")),
    (b"RMSG $G foo 4\r\na\r\nb\r\n", ("rmsg", b"$G", b"foo", None, (), b"a\r\nb")),
    (b"HMSG $G foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", ("hmsg", b"$G", b"foo", None, (), 12, b"NATS/1.0\r\n\r\nhi")),
    (b"HMSG $G foo + r q 12 12\r\nNATS/1.0\r\n\r\n\r\n",
     ("hmsg", b"$G", b"foo", b"r", (b"q",), 12, b"NATS/1.0\r\n\r\n")),
    (b"LMSG west $G foo 0 2\r\nhi\r\n", ("lmsg", b"west", b"$G", b"foo", None, (), 0, b"hi")),
    (b"LMSG west $G foo r 0 2\r\nhi\r\n", ("lmsg", b"west", b"$G", b"foo", b"r", (), 0, b"hi")),
    (b"LMSG west $G foo | a b 0 2\r\nhi\r\n", ("lmsg", b"west", b"$G", b"foo", None, (b"a", b"b"), 0, b"hi")),
    (b"PING\r\n", ("ping",)), (b"PONG\r\n", ("pong",)), (b"+OK\r\n", ("ok",)),
    (b"-ERR 'x y'\r\n", ("err", b"'x y'")),
    (b'INFO {"server_id":"A"} \r\n', ("info", b'{"server_id":"A"}')),
    (b'CONNECT {"name":"A"}\r\n', ("connect", b'{"name":"A"}')),
])
def test_route_operations(data, expected):
    assert ok(data) == [expected]


@pytest.mark.parametrize("data", [b"SUB foo 1\r\n", b"A+ $G\r\n", b"A- $G\r\n"])
def test_route_reads_and_ignores_sub_and_account_ops(data):
    assert ok(data + b"PING\r\n") == [("ping",)]


@pytest.mark.parametrize("data, expected", [
    (b"rs+ $G foo\r\n", ("rs+", b"$G", b"foo", None, 0)),
    (b"Rmsg $G foo 1\r\nx\r\n", ("rmsg", b"$G", b"foo", None, (), b"x")),
    (b"RS+\t$G\t\tfoo \t q\t7  \r\n", ("rs+", b"$G", b"foo", b"q", 7)),
    (b"RMSG  $G   foo  r  1 \r\nx\r\n", ("rmsg", b"$G", b"foo", b"r", (), b"x")),
    (b"RMSG\t$G\tfoo\t1\r\nx\r\n", ("rmsg", b"$G", b"foo", None, (), b"x")),
    (b"RMSG $G foo 1\nx\r\n", ("rmsg", b"$G", b"foo", None, (), b"x")),  # LF alone ends a control line
    (b"RS- $G foo\n", ("rs-", b"$G", b"foo", None)),
    (b"PINGxyz\r\n", ("ping",)),
])
def test_case_blanks_and_line_ends(data, expected):
    assert ok(data) == [expected]


def test_pinned_route_account_is_not_on_the_wire():
    calls = ok(b"RS+ foo\r\nRS+ foo q 2\r\nRS- foo q\r\nLS+ west foo\r\nLS- west foo\r\nRMSG foo 2\r\nhi\r\n"
               b"RMSG foo r 2\r\nhi\r\nRMSG foo + r q 2\r\nhi\r\nHMSG foo 0 2\r\nhi\r\nLMSG west foo | q 0 2\r\nhi\r\n",
               account=b"ACC")
    assert calls == [
        ("rs+", b"ACC", b"foo", None, 0), ("rs+", b"ACC", b"foo", b"q", 2), ("rs-", b"ACC", b"foo", b"q"),
        ("ls+", b"west", b"ACC", b"foo", None, 0), ("ls-", b"west", b"ACC", b"foo", None),
        ("rmsg", b"ACC", b"foo", None, (), b"hi"), ("rmsg", b"ACC", b"foo", b"r", (), b"hi"),
        ("rmsg", b"ACC", b"foo", b"r", (b"q",), b"hi"), ("hmsg", b"ACC", b"foo", None, (), 0, b"hi"),
        ("lmsg", b"west", b"ACC", b"foo", None, (b"q",), 0, b"hi"),
    ]


def test_pin_after_info_changes_parsing_of_the_rest_of_the_buffer():
    class Pinning(Recorder):
        def proto_info(self, arg):
            super().proto_info(arg)
            parser.pin(b"ACC")
    rec = Pinning()
    parser = ServerParser(rec, ROUTE)
    parser.feed(b"RMSG $G a 1\r\nx\r\nINFO {}\r\nRMSG a 1\r\nx\r\nRS+ b\r\n")
    assert rec.calls == [("rmsg", b"$G", b"a", None, (), b"x"), ("info", b"{}"),
                         ("rmsg", b"ACC", b"a", None, (), b"x"), ("rs+", b"ACC", b"b", None, 0)]


def test_ls_minus_without_origin_for_peers_without_lnocu():
    assert ok(b"LS- $G foo\r\nLS- $G foo q\r\n", lnocu=False) == [
        ("ls-", None, b"$G", b"foo", None), ("ls-", None, b"$G", b"foo", b"q")]


# ---- route errors (nats-server's texts; arguments errors close without -ERR) ----------------------------------

@pytest.mark.parametrize("data, detail", [
    (b"RMSG $G\r\n", "processRoutedMsgArgs Parse Error: '[$G]'"),
    (b"RMSG $G foo x\r\n", "processRoutedMsgArgs Bad or Missing Size: '[$G foo x]'"),
    (b"RMSG $G foo 1234567890\r\n", "processRoutedMsgArgs Bad or Missing Size: '[$G foo 1234567890]'"),
    (b"RMSG $G foo ++ r q 1\r\n", "processRoutedMsgArgs Bad or Missing Reply Indicator: '++'"),
    (b"RMSG $G foo x r q 1\r\n", "processRoutedMsgArgs Bad or Missing Reply Indicator: 'x'"),
    (b"HMSG $G foo 1\r\n", "processRoutedHeaderMsgArgs Parse Error: '[$G foo 1]'"),
    (b"HMSG $G foo x 1\r\n", "processRoutedHeaderMsgArgs Bad or Missing Header Size: '$G foo x 1'"),
    (b"HMSG $G foo 1 x\r\n", "processRoutedHeaderMsgArgs Bad or Missing Size: '[$G foo 1 x]'"),
    (b"HMSG $G foo 3 2\r\n", "processRoutedHeaderMsgArgs Header Size larger then TotalSize: '$G foo 3 2'"),
    (b"LMSG west $G foo 2\r\n", "processRoutedOriginClusterMsgArgs Parse Error: '[west $G foo 2]'"),
    (b"LMSG w $G foo x 2\r\n", "processRoutedOriginClusterMsgArgs Bad or Missing Header Size: 'w $G foo x 2'"),
    (b"RS+ $G\r\n", "processRemoteSub Parse Error: 'R $G'"),
    (b"RS+ $G foo q\r\n", "processRemoteSub Parse Error: 'R $G foo q'"),
    (b"LS+ west $G\r\n", "processRemoteSub Parse Error: 'L west $G'"),
    (b"RS- $G\r\n", "processRemoteUnsub parse error: '$G'"),
    (b"RS- $G foo q x\r\n", "processRemoteUnsub parse error: '$G foo q x'"),
])
def test_route_argument_errors(data, detail):
    e = fails(data)
    assert e.client_error is None and e.reason == "Protocol Violation"
    assert e.detail == detail


@pytest.mark.parametrize("data", [
    b"RMSG $G foo 2\r\nhiX\r\n",   # payload longer than announced
    b"RMSG $G foo 2\r\nhi\nX",     # LF alone after a payload
    b"XYZ\r\n", b"RS* $G foo\r\n", b"RSUB foo\r\n", b"MSG foo 1 2\r\nhi\r\n",
    b"PUB foo 2\r\nhi\r\n", b"HPUB foo 0 2\r\nhi\r\n",  # client publishes are not read on server connections
    b"RMSGfoo 1\r\nx\r\n",         # no blank after the op name
])
def test_unknown_operation(data):
    e = fails(data)
    assert e.client_error == UNKNOWN_OP


def test_unknown_op_fails_before_the_line_ends():
    e = fails(b"QQQQ")
    assert e.client_error == UNKNOWN_OP


def test_control_line_limit_is_16_times_max_control_line():
    long_subject = b"a" * (1024 * 16 - 20)
    assert ok(b"RS+ $G " + long_subject + b"\r\n", max_control_line=1024)[0][2] == long_subject
    e = fails(b"RS+ $G " + b"a" * (1024 * 16 + 1) + b"\r\n", max_control_line=1024)
    assert e.client_error == MAX_CONTROL_LINE and e.reason == "Maximum Control Line Exceeded"
    # a line that never ends fails once it is too long, without waiting for the end
    rec = Recorder()
    p = ServerParser(rec, ROUTE, max_control_line=1024)
    p.feed(b"RS+ $G ")
    with pytest.raises(ProtocolError) as ei:
        for _ in range(40):
            p.feed(b"a" * 1000)
    assert ei.value.client_error == MAX_CONTROL_LINE


def test_routes_do_not_limit_payload_unless_asked():
    big = b"x" * 3_000_000
    assert ok(b"RMSG $G foo %d\r\n" % len(big) + big + b"\r\n")[0][-1] == big
    e = fails(b"RMSG $G foo 11\r\nhello world\r\n", max_payload=10)
    assert e.client_error == MAX_PAYLOAD_VIOLATION


def test_operations_before_connect():
    assert ok(b'CONNECT {}\r\nPING\r\n', awaiting_connect=True) == [("connect", b"{}"), ("before_connect",),
                                                                      ("ping",)]
    e = fails(b"PING\r\n", awaiting_connect=True, allow_before_connect=False)
    assert e.client_error == "Authorization Violation"


# ==== gateways ================================================================================================

@pytest.mark.parametrize("data, expected", [
    (b"A+ $G\r\n", ("a+", b"$G")),
    (b"A- $G\r\n", ("a-", b"$G")),
    (b"A- some account \r\n", ("a-", b"some account ")),  # the whole argument, as nats-server reads it
    (b"RS+ $G foo\r\n", ("rs+", b"$G", b"foo", None, 0)),
    (b"RS+ $G foo bar 1\r\n", ("rs+", b"$G", b"foo", b"bar", 1)),
    (b"SUB $G foo\r\n", ("rs+", b"$G", b"foo", None, 0)),
    (b"RS- $G foo\r\n", ("rs-", b"$G", b"foo", None)),
    (b"UNSUB $G foo bar\r\n", ("rs-", b"$G", b"foo", b"bar")),
    (b"RMSG $G foo _GR_.abcdef.ghijkl.r 2\r\nhi\r\n", ("rmsg", b"$G", b"foo", b"_GR_.abcdef.ghijkl.r", (), b"hi")),
    (b"HMSG $G foo + r q 0 2\r\nhi\r\n", ("hmsg", b"$G", b"foo", b"r", (b"q",), 0, b"hi")),
])
def test_gateway_operations(data, expected):
    assert ok(data, GATEWAY) == [expected]


@pytest.mark.parametrize("data, detail", [
    (b"RS+ $G\r\n", "processGatewaySubjectSub Parse Error: '$G'"),
    (b"RS+ $G foo q\r\n", "processGatewaySubjectSub Parse Error: '$G foo q'"),
    (b"RS- $G\r\n", "processGatewaySubjectUnsub parse error: '$G'"),
    (b"RMSG $G foo x\r\n", "processRoutedMsgArgs Bad or Missing Size: '[$G foo x]'"),
])
def test_gateway_argument_errors(data, detail):
    e = fails(data, GATEWAY)
    assert e.client_error is None and e.detail == detail


@pytest.mark.parametrize("data", [b"LS+ $G foo\r\n", b"LMSG w $G foo 0 1\r\nx\r\n", b"LS- $G foo\r\n"])
def test_gateway_refuses_leaf_ops(data):
    assert fails(data, GATEWAY).client_error == UNKNOWN_OP


# ==== leaf nodes ==============================================================================================

@pytest.mark.parametrize("data, expected", [
    (b"LS+ foo\r\n", ("leaf+", b"foo", None, 0)),
    (b"LS+ foo q 4\r\n", ("leaf+", b"foo", b"q", 4)),
    (b"RS+ foo q 4\r\n", ("leaf+", b"foo", b"q", 4)),
    (b"SUB $LDS.abc\r\n", ("leaf+", b"$LDS.abc", None, 0)),
    (b"LS- foo\r\n", ("leaf-", b"foo", None)),
    (b"LS- foo q\r\n", ("leaf-", b"foo", b"q")),
    (b"UNSUB foo q\r\n", ("leaf-", b"foo", b"q")),
    (b"LMSG foo 2\r\nhi\r\n", ("leafmsg", b"foo", None, (), b"hi")),
    (b"LMSG foo r 2\r\nhi\r\n", ("leafmsg", b"foo", b"r", (), b"hi")),
    (b"LMSG foo + r q1 q2 2\r\nhi\r\n", ("leafmsg", b"foo", b"r", (b"q1", b"q2"), b"hi")),
    (b"LMSG foo | q1 2\r\nhi\r\n", ("leafmsg", b"foo", None, (b"q1",), b"hi")),
    (b"RMSG foo 2\r\nhi\r\n", ("leafmsg", b"foo", None, (), b"hi")),
    (b"HMSG foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", ("leafhmsg", b"foo", None, (), 12, b"NATS/1.0\r\n\r\nhi")),
    (b"HMSG foo + r q 0 2\r\nhi\r\n", ("leafhmsg", b"foo", b"r", (b"q",), 0, b"hi")),
])
def test_leaf_operations(data, expected):
    assert ok(data, LEAF) == [expected]


def test_leaf_unsub_with_extra_fields_is_ignored_like_an_unknown_key():
    assert ok(b"LS- a b c\r\nPING\r\n", LEAF) == [("ping",)]


@pytest.mark.parametrize("data, detail", [
    (b"LS+ foo q\r\n", "processLeafSub Parse Error: 'foo q'"),
    (b"LMSG foo\r\n", "processLeafMsgArgs Parse Error: '[foo]'"),
    (b"LMSG foo x\r\n", "processLeafMsgArgs Bad or Missing Size: '[foo x]'"),
    (b"LMSG foo ? r q 1\r\n", "processLeafMsgArgs Bad or Missing Reply Indicator: '?'"),
    (b"HMSG foo 1\r\n", "processLeafHeaderMsgArgs Parse Error: '[foo 1]'"),
    (b"HMSG foo 3 1\r\n", "processLeafHeaderMsgArgs Header Size larger then TotalSize: 'foo 3 1'"),
])
def test_leaf_argument_errors(data, detail):
    e = fails(data, LEAF)
    assert e.client_error is None and e.detail == detail


def test_leaf_max_payload():
    assert ok(b"LMSG foo 10\r\n0123456789\r\n", LEAF, max_payload=10)
    e = fails(b"LMSG foo 11\r\n", LEAF, max_payload=10)  # refused before the payload arrives
    # (nats-server's maxPayloadViolation: -ERR 'Maximum Payload Violation', closed as MaxPayloadExceeded, whose
    # ClosedState string is "Maximum Message Payload Exceeded", as for a client)
    assert e.client_error == MAX_PAYLOAD_VIOLATION and e.reason == "Maximum Message Payload Exceeded"
    e = fails(b"HMSG foo 0 11\r\n", LEAF, max_payload=10)
    assert e.client_error == MAX_PAYLOAD_VIOLATION and e.reason == "Maximum Message Payload Exceeded"


def test_parser_refuses_pinning_other_kinds():
    with pytest.raises(ValueError):
        ServerParser(Recorder(), LEAF, account=b"A")
    with pytest.raises(ValueError):
        ServerParser(Recorder(), "CLIENT")


# ==== encoders ================================================================================================

def test_encoders_exact_bytes():
    # the first lines are byte for byte what nats-server 2.15.1 sent in tests/test_cluster_wire_go.py runs
    assert cp.rs_sub(b"$G", b"bar", b"q1", 2) == b"RS+ $G bar q1 2\r\n"
    assert cp.rs_sub(b"$G", b"foo") == b"RS+ $G foo\r\n"
    assert cp.rmsg_head(b"$G", b"baz", b"rep", [b"qq"], 2) == b"RMSG $G baz + rep qq 2\r\n"
    assert cp.hmsg_head(b"$G", b"baz", b"rep", [b"qq"], 12, 14) == b"HMSG $G baz + rep qq 12 14\r\n"
    assert cp.rs_sub(None, b"foo", b"q", 10) == b"RS+ foo q 10\r\n"
    assert cp.rs_unsub(b"A", b"foo", b"q") == b"RS- A foo q\r\n"
    assert cp.rs_unsub(None, b"foo") == b"RS- foo\r\n"
    assert cp.ls_sub(b"west", b"A", b"foo", b"q", 3) == b"LS+ west A foo q 3\r\n"
    assert cp.ls_unsub(b"west", b"A", b"foo") == b"LS- west A foo\r\n"
    assert cp.ls_unsub(None, b"A", b"foo", b"q") == b"LS- A foo q\r\n"
    assert cp.leaf_sub(b"foo", b"q", 2) == b"LS+ foo q 2\r\n"
    assert cp.leaf_unsub(b"foo", b"q") == b"LS- foo q\r\n"
    assert cp.account_sub(b"A") == b"A+ A\r\n" and cp.account_unsub(b"A") == b"A- A\r\n"
    assert cp.rmsg_head(b"A", b"s", None, (), 0) == b"RMSG A s 0\r\n"
    assert cp.rmsg_head(None, b"s", b"r", (), 7) == b"RMSG s r 7\r\n"
    assert cp.rmsg_head(b"A", b"s", None, [b"a", b"b"], 1) == b"RMSG A s | a b 1\r\n"
    assert cp.lmsg_head(b"west", b"A", b"s", None, (), -1, 5) == b"LMSG west A s 0 5\r\n"
    assert cp.leaf_msg_head(b"s", b"r", [b"q"], 5) == b"LMSG s + r q 5\r\n"
    assert cp.leaf_hmsg_head(b"s", None, (), 12, 14) == b"HMSG s 12 14\r\n"
    assert cp.frame(b"RMSG A s 2\r\n", b"hi") == b"RMSG A s 2\r\nhi\r\n"
    assert cp.info_frame(b"{}", blank=False) == b"INFO {}\r\n"
    assert cp.info_frame(b"{}") == b"INFO {} \r\n" and cp.connect_frame(b"{}") == b"CONNECT {}\r\n"
    assert cp.err_frame("Unknown Protocol Operation") == b"-ERR 'Unknown Protocol Operation'\r\n"
    with pytest.raises(ValueError):
        cp.rs_sub(b"A", b"foo", b"q", 0)


# ==== INFO / CONNECT JSON =====================================================================================

GO_ROUTE_INFO = (b'{"server_id":"NBXDRUPWTAHJQQMO3VQRSTBUFQHCGXOITBI6ZVXM22L4A7S4ADYP6AKY","server_name":'
                 b'"NBXDRUPWTAHJQQMO3VQRSTBUFQHCGXOITBI6ZVXM22L4A7S4ADYP6AKY","version":"2.15.1","proto":3,'
                 b'"go":"go1.27.2","host":"127.0.0.1","port":16222,"headers":true,"max_payload":1048576,'
                 b'"nonce":"nL9Jo0aTuRGe7z0","cluster":"c1","connect_urls":["192.0.2.2:14222","[fd00::2]:14222"],'
                 b'"compression":"accept","lnoc":true,"lnocu":true,"ln":true,"route_pool_size":3}')


def test_info_reencodes_byte_for_byte_like_nats_server():
    info = ci.decode_info(GO_ROUTE_INFO)
    assert info.cluster == "c1" and info.route_pool_size == 3 and info.lnocu and info.compression == "accept"
    assert ci.encode_info(info) == GO_ROUTE_INFO


def test_info_gateway_and_route_fields():
    info = ci.Info(server_id="S", gateway="A", gateway_urls=["127.0.0.1:7222"],
                   gateway_cmd=ci.GATEWAY_CMD_ALL_SUBS_START,
                   gateway_cmd_payload=b"ACC", gateway_nrp=True, route_account="ACC", route_pool_idx=-1,
                   import_=ci.SubjectPermission(allow=["foo.>"]), export=ci.SubjectPermission(deny=["bar"]),
                   gossip_mode=ci.GOSSIP_DISABLED, leafnode_urls=["h:7422"])
    raw = ci.encode_info(info)
    assert b'"import":{"allow":["foo.>"]},"export":{"deny":["bar"]}' in raw
    assert b'"gateway_cmd":2,"gateway_cmd_payload":"QUND"' in raw  # a Go []byte is base64 in JSON
    assert ci.decode_info(raw) == info
    assert raw.startswith(b'{"server_id":"S","server_name":"","version":"","proto":0,"go":"","host":"",'
                          b'"port":0,"headers":false,"max_payload":0,')


def test_route_connect_like_nats_server():
    # nats-server's route CONNECT: echo, verbose, pedantic, tls_required, headers, name, cluster always present
    c = ci.RouteConnect(echo=True, headers=True, name="NID", cluster="c1", lnoc=True)
    assert ci.encode_route_connect(c) == (b'{"echo":true,"verbose":false,"pedantic":false,"tls_required":false,'
                                          b'"headers":true,"name":"NID","cluster":"c1","lnoc":true}')
    g = ci.RouteConnect(name="NID", gateway="B", user="u", password="p")
    assert ci.encode_route_connect(g) == (b'{"echo":false,"verbose":false,"pedantic":false,"user":"u",'
                                          b'"pass":"p","tls_required":false,"headers":false,"name":"NID",'
                                          b'"cluster":"","gateway":"B"}')
    back = ci.decode_route_connect(b'{"lang":"python3","auth_token":"t","pass":"p","unknown":1}')
    assert back.lang == "python3" and back.auth_token == "t" and back.password == "p"


def test_leaf_connect_omits_every_empty_field():
    c = ci.LeafConnect(version="2.15.1", server_id="S", name="leaf", headers=True, remote_account="$G",
                       protocol=3, deny_pub=["foo"], compress_mode="off")
    raw = ci.encode_leaf_connect(c)
    assert raw == (b'{"version":"2.15.1","server_id":"S","name":"leaf","headers":true,"deny_pub":["foo"],'
                   b'"compress_mode":"off","remote_account":"$G","protocol":3}')
    assert ci.decode_leaf_connect(raw) == c


@pytest.mark.parametrize("arg", [b"{", b'{"port":"x"}', b"[]", b'{"headers":1}'])
def test_bad_info_is_a_protocol_violation_without_err(arg):
    with pytest.raises(ProtocolError) as ei:
        ci.decode_info(arg)
    assert ei.value.client_error is None


def test_naming_rules():
    # FNV-1a 32-bit test vectors, reduced modulo the pool size
    assert ci.route_pool_index(2**32 - 1, "a") == 0xE40C292C % (2**32 - 1)
    assert ci.route_pool_index(2**32 - 1, "foobar") == 0xBF9CF968 % (2**32 - 1)
    assert ci.route_pool_index(1, "anything") == 0 and ci.route_pool_index(0, "x") == 0
    assert all(0 <= ci.route_pool_index(3, f"acc{i}") < 3 for i in range(50))
    h = ci.gateway_hash("c1")
    assert len(h) == 6 and h.isalnum() and ci.gateway_hash("c1") == h != ci.gateway_hash("c2")
    assert len(ci.gateway_old_hash("c1")) == 4
    r = ci.gateway_reply(b"abcdef", b"ghijkl", b"_INBOX.x.y")
    assert r == b"_GR_.abcdef.ghijkl._INBOX.x.y"
    assert ci.gateway_reply_origin(r) == (b"abcdef", b"ghijkl", b"_INBOX.x.y")
    assert ci.gateway_reply_origin(b"_INBOX.x") is None and ci.gateway_reply_origin(b"_GR_.abc") is None
    assert ci.is_loop_detection_subject(b"$LDS.xyz") and not ci.is_loop_detection_subject(b"$LD.x")
    assert ci.leaf_loop_error("$G") == 'Loop detected for leafnode account="$G". Delaying attempt to reconnect for 30s'


# ==== properties ==============================================================================================

token = st.binary(min_size=1, max_size=12).filter(lambda b: not any(c in b for c in b" \t\r\n"))
name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.$_*>-", min_size=1, max_size=12).map(str.encode)
payload = st.binary(max_size=64) | st.sampled_from([b"", b"\r\n", b"a\r\nb", b"PING\r\n"])
queues = st.lists(name, max_size=3).map(tuple)
opt = st.none() | name


@st.composite
def route_frame(draw, pinned: bool):
    """(encoded frame, the call the parser must make) for a random route operation."""
    acc = None if pinned else draw(name)
    racc = b"PIN" if pinned else acc
    subj = draw(name)
    k = draw(st.integers(0, 7))
    if k == 0:
        q = draw(opt)
        w = draw(st.integers(1, 10**6)) if q else 0
        return cp.rs_sub(acc, subj, q, w or 1), ("rs+", racc, subj, q, w)
    if k == 1:
        q = draw(opt)
        return cp.rs_unsub(acc, subj, q), ("rs-", racc, subj, q)
    if k == 2:
        origin, q = draw(name), draw(opt)
        w = draw(st.integers(1, 999)) if q else 0
        return cp.ls_sub(origin, acc, subj, q, w or 1), ("ls+", origin, racc, subj, q, w)
    if k == 3:
        origin, q = draw(name), draw(opt)
        return cp.ls_unsub(origin, acc, subj, q), ("ls-", origin, racc, subj, q)
    reply, qs, body = draw(opt), draw(queues), draw(payload)
    if qs == () and reply == b"|":
        reply = b"r"
    if k == 4 or k == 5:
        return cp.frame(cp.rmsg_head(acc, subj, reply, qs, len(body)), body), ("rmsg", racc, subj, reply, qs, body)
    hdr = draw(st.integers(0, len(body)))
    if k == 6:
        return (cp.frame(cp.hmsg_head(acc, subj, reply, qs, hdr, len(body)), body),
                ("hmsg", racc, subj, reply, qs, hdr, body))
    origin = draw(name)
    return (cp.frame(cp.lmsg_head(origin, acc, subj, reply, qs, hdr, len(body)), body),
            ("lmsg", origin, racc, subj, reply, qs, hdr, body))


@st.composite
def gateway_frame(draw):
    acc, subj = draw(name), draw(name)
    k = draw(st.integers(0, 5))
    if k == 0:
        return cp.account_sub(acc), ("a+", acc)
    if k == 1:
        return cp.account_unsub(acc), ("a-", acc)
    if k == 2:
        q = draw(opt)
        w = draw(st.integers(1, 99)) if q else 0
        return cp.rs_sub(acc, subj, q, w or 1), ("rs+", acc, subj, q, w)
    if k == 3:
        q = draw(opt)
        return cp.rs_unsub(acc, subj, q), ("rs-", acc, subj, q)
    reply, qs, body = draw(opt), draw(queues), draw(payload)
    if qs == () and reply == b"|":
        reply = b"r"
    if k == 4:
        return cp.frame(cp.rmsg_head(acc, subj, reply, qs, len(body)), body), ("rmsg", acc, subj, reply, qs, body)
    hdr = draw(st.integers(0, len(body)))
    return (cp.frame(cp.hmsg_head(acc, subj, reply, qs, hdr, len(body)), body),
            ("hmsg", acc, subj, reply, qs, hdr, body))


@st.composite
def leaf_frame(draw):
    subj = draw(name)
    k = draw(st.integers(0, 3))
    if k == 0:
        q = draw(opt)
        w = draw(st.integers(1, 99)) if q else 0
        return cp.leaf_sub(subj, q, w or 1), ("leaf+", subj, q, w)
    if k == 1:
        q = draw(opt)
        return cp.leaf_unsub(subj, q), ("leaf-", subj, q)
    reply, qs, body = draw(opt), draw(queues), draw(payload)
    if qs == () and reply == b"|":
        reply = b"r"
    if k == 2:
        return cp.frame(cp.leaf_msg_head(subj, reply, qs, len(body)), body), ("leafmsg", subj, reply, qs, body)
    hdr = draw(st.integers(0, len(body)))
    return (cp.frame(cp.leaf_hmsg_head(subj, reply, qs, hdr, len(body)), body),
            ("leafhmsg", subj, reply, qs, hdr, body))


common = st.sampled_from([(cp.PING, ("ping",)), (cp.PONG, ("pong",)), (cp.OK, ("ok",)),
                          (cp.info_frame(b'{"server_id":"X"}'), ("info", b'{"server_id":"X"}'))])
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_stream(kind, frames, cuts, **kw):
    data = b"".join(f for f, _ in frames)
    expected = [c for _, c in frames]
    assert ok(data, kind, **kw) == expected
    calls, err, p = run(data, kind, cuts=[c % (len(data) + 1) for c in cuts], **kw)
    assert err is None and calls == expected and p.pending_bytes() == 0
    # one byte at a time
    calls, err, p = run(data, kind, cuts=range(1, len(data)), **kw)
    assert err is None and calls == expected


@PROPS
@given(st.lists(route_frame(False) | common, min_size=1, max_size=12), st.lists(st.integers(0, 10**6), max_size=8))
def test_route_roundtrip_any_split(frames, cuts):
    _check_stream(ROUTE, frames, cuts)


@PROPS
@given(st.lists(route_frame(True) | common, min_size=1, max_size=12), st.lists(st.integers(0, 10**6), max_size=8))
def test_pinned_route_roundtrip_any_split(frames, cuts):
    _check_stream(ROUTE, frames, cuts, account=b"PIN")


@PROPS
@given(st.lists(gateway_frame() | common, min_size=1, max_size=12), st.lists(st.integers(0, 10**6), max_size=8))
def test_gateway_roundtrip_any_split(frames, cuts):
    _check_stream(GATEWAY, frames, cuts)


@PROPS
@given(st.lists(leaf_frame() | common, min_size=1, max_size=12), st.lists(st.integers(0, 10**6), max_size=8))
def test_leaf_roundtrip_any_split(frames, cuts):
    _check_stream(LEAF, frames, cuts)


def _outcome(kind, data, cuts):
    calls, err, p = run(data, kind, cuts=cuts, max_control_line=64)
    return calls, (None if err is None else (err.client_error, err.reason)), p


garbage_alphabet = st.sampled_from([b"RS+ ", b"RS- ", b"LS+ ", b"LS- ", b"RMSG ", b"HMSG ", b"LMSG ", b"A+ ",
                                    b"A- ", b"PING", b"PONG", b"INFO ", b"+OK", b"-ERR ", b"$G ", b"foo ", b"q ",
                                    b"| ", b"+ ", b"0", b"1", b"2", b"12 ", b"\r\n", b"\n", b"\r", b" ", b"\t",
                                    b"x", b"\x00", b"\xff"])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([ROUTE, GATEWAY, LEAF]),
       st.lists(garbage_alphabet, max_size=40).map(b"".join) | st.binary(max_size=200),
       st.lists(st.integers(0, 300), max_size=6))
def test_garbage_only_raises_protocol_error_and_splits_do_not_matter(kind, data, cuts):
    whole = _outcome(kind, data, None)  # raises only ProtocolError (anything else fails the test)
    split = _outcome(kind, data, cuts)
    assert split[0] == whole[0] and split[1] == whole[1]
    # nothing is buffered without bound: at most one unfinished operation's control line
    if whole[1] is None:
        assert whole[2].pending_bytes() <= len(data)


def test_fast_path_and_general_path_agree_on_large_batches():
    frames = []
    for i in range(2000):
        body = b"m%d" % i if i % 7 else b"with\r\ncrlf"
        frames.append(cp.frame(cp.rmsg_head(b"$G", b"subj.%d" % (i % 13), b"r" if i % 3 else None, (), len(body)),
                               body))
        if i % 100 == 0:
            frames.append(cp.PING)
    data = b"".join(frames)
    calls = ok(data)
    assert len(calls) == 2000 + 20 and calls[0][0] == "rmsg" and calls[1] == ("ping",)
    calls = [c for c in calls if c[0] == "rmsg"]
    assert calls[1] == ("rmsg", b"$G", b"subj.1", b"r", (), b"m1")
    assert calls[7] == ("rmsg", b"$G", b"subj.7", b"r", (), b"with\r\ncrlf")
