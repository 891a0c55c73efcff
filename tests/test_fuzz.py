"""Fuzz and robustness tests of the client protocol: the parser alone, then a live in-process server.

* hypothesis drives random bytes and mutated valid streams into ``ClientParser``: it either accepts them or
  raises ``ProtocolError``, never another exception, never buffers without bound, and the way the bytes are
  cut into reads does not change the outcome.
* A live server (``run_server``) gets raw asyncio connections sending malformed bytes while a nats-py client
  keeps doing request/reply: the server survives, the good client keeps working, each bad connection gets
  the -ERR nats-server would send and is closed, and memory stays bounded.
* A table of malformed inputs with the exact answers of nats-server v2.15.1 (recorded with raw sockets, same
  harness as ``exchange`` below) is replayed against Rillet.
"""
from __future__ import annotations

import asyncio
import io
import json
import random
import resource
import socket
import threading
import time
import tracemalloc

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rillet.protocol.parser import (AUTH_VIOLATION, MAX_CONTROL_LINE, MAX_PAYLOAD_VIOLATION, UNKNOWN_OP,
                                    ClientParser, ProtocolError)
from rillet.app.embed import run_server
from rillet.server.logging import Logger
from rillet.config.options import Options
from rillet.server.server import Server
from rillet.app.compose import build_server

from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in both lanes (rillet.lane): the pure-Python parser and its compiled twin,
    for the parser alone and for the in-process servers' client connections."""
    with use_lane(request.param, globals()):
        yield request.param

# Every -ERR text a client connection may get for what it sent (compared case-insensitively).
KNOWN_ERRS = {e.lower() for e in (
    UNKNOWN_OP, MAX_PAYLOAD_VIOLATION, MAX_CONTROL_LINE, AUTH_VIOLATION, "Invalid Subject",
    "Invalid Publish Subject", "invalid client protocol", "no responders requires headers support",
    "Secure Connection - TLS Required", "maximum subscriptions exceeded",
)}
PARSER_ERRS = {None, UNKNOWN_OP, MAX_PAYLOAD_VIOLATION, MAX_CONTROL_LINE, AUTH_VIOLATION}


# ==== parser fuzzing (no sockets) ==========================================================================

class Sink:
    """A handler that accepts everything and counts calls (records them when ``record``)."""

    def __init__(self, before_connect: bool = True) -> None:
        self.calls: list[tuple] = []
        self.before_connect = before_connect

    def _rec(self, *a):
        self.calls.append(tuple(bytes(x) if isinstance(x, (bytes, bytearray, memoryview)) else x for x in a))

    def proto_connect(self, arg): self._rec("connect", arg)
    def proto_pub(self, s, r, p): self._rec("pub", s, r, p)
    def proto_hpub(self, s, r, h, m): self._rec("hpub", s, r, h, m)
    def proto_sub(self, s, q, sid): self._rec("sub", s, q, sid)
    def proto_unsub(self, sid, mx): self._rec("unsub", sid, mx)
    def proto_ping(self): self._rec("ping")
    def proto_pong(self): self._rec("pong")
    def proto_info(self, arg): self._rec("info", arg)
    def proto_ok(self): self._rec("ok")
    def proto_err(self, arg): self._rec("err", arg)

    def proto_before_connect(self):
        self._rec("before_connect")
        return self.before_connect


def feed_all(pieces, *, max_payload=1024 * 1024, max_control_line=4096, awaiting=False, before_connect=True):
    """Feed the pieces; check the invariants after every read; return (calls, client_error or 'ok')."""
    sink = Sink(before_connect)
    p = ClientParser(sink, max_payload, max_control_line)
    p.awaiting_connect = awaiting
    bound = max_payload + max_control_line + 64
    try:
        for piece in pieces:
            p.feed(piece)
            assert p.pending_bytes() <= bound, f"parser buffers {p.pending_bytes()} bytes"
    except ProtocolError as e:
        assert e.client_error in PARSER_ERRS, e.client_error
        assert isinstance(e.detail, str) and isinstance(e.reason, str) and e.reason
        return sink.calls, e.client_error
    return sink.calls, "ok"


def cut(data: bytes, cuts) -> list[bytes]:
    out, prev = [], 0
    for c in sorted(set(cuts)):
        if 0 < c < len(data):
            out.append(data[prev:c])
            prev = c
    out.append(data[prev:])
    return out


_subject = st.sampled_from([b"foo", b"foo.bar", b"a.*.>", b"_INBOX.x1", b"\xff\xfe", b"q"])
_payload = st.binary(max_size=30)
_valid_op = st.one_of(
    st.sampled_from([b"PING\r\n", b"PONG\r\n", b"ping\n", b"+OK\r\n", b"-ERR 'x'\r\n", b"INFO {}\r\n",
                     b'CONNECT {"verbose":false,"headers":true}\r\n', b"CONNECT {}\n"]),
    st.tuples(_subject, st.sampled_from([b"", b" r.1", b"\tx"]), _payload).map(
        lambda t: b"PUB %b%b %d\r\n%b\r\n" % (t[0], t[1], len(t[2]), t[2])),
    st.tuples(_subject, _payload, _payload).map(
        lambda t: b"HPUB %b %d %d\r\n%b%b\r\n" % (t[0], len(t[1]), len(t[1]) + len(t[2]), t[1], t[2])),
    st.tuples(_subject, st.sampled_from([b"", b" grp"]), st.integers(0, 999)).map(lambda t: b"SUB %b%b %d\r\n" % t),
    st.tuples(st.integers(0, 999), st.sampled_from([b"", b" 0", b" 5"])).map(lambda t: b"UNSUB %d%b\r\n" % t),
)
_valid_stream = st.lists(_valid_op, min_size=1, max_size=12).map(b"".join)
_interesting = [b"\r\n", b"\n", b"\r", b" ", b"\t", b"0", b"9", b"-1", b"99999999", b"PUB ", b"HPUB ", b"SUB ",
                b"CONNECT ", b"\x00", b"\xff", b"+OK", b"-ERR", b"PING", b"999999999999999999999", b"\x0b"]


@st.composite
def mutated_stream(draw):
    data = bytearray(draw(_valid_stream))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "insert", "delete", "dup", "token", "crlf", "truncate"]))
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i:i + draw(st.integers(1, 8))]
        elif kind == "dup":
            data[i:i] = data[i:i + draw(st.integers(1, 20))]
        elif kind == "token":
            data[i:i] = draw(st.sampled_from(_interesting))
        elif kind == "crlf":
            j = data.find(b"\r\n", i)
            if j >= 0:
                data[j:j + 2] = draw(st.sampled_from([b"\n", b"\r", b"", b"\r\r\n", b"\n\r"]))
        else:
            del data[i:]
    return bytes(data)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_only_protocol_errors(data):
    feed_all([data])
    feed_all([data], max_payload=16, max_control_line=16)


@FUZZ
@given(data=mutated_stream())
def test_mutated_streams_only_protocol_errors(data):
    feed_all([data])
    feed_all([data], max_payload=20, max_control_line=24)
    feed_all([data], awaiting=True, before_connect=False)
    feed_all([data], awaiting=True, before_connect=True)


@FUZZ
@given(data=mutated_stream(), d=st.data())
def test_chunking_does_not_change_the_outcome(data, d):
    """Calls made and error raised are the same whether the stream arrives whole or cut into reads."""
    cuts = d.draw(st.lists(st.integers(0, len(data)), max_size=20))
    assert feed_all(cut(data, cuts)) == feed_all([data])


@FUZZ
@given(data=mutated_stream())
def test_one_byte_reads_same_as_whole(data):
    assert feed_all([data[i:i + 1] for i in range(len(data))]) == feed_all([data])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from([b"PUB foo ", b"SUB ", b"UNSUB ", b"HPUB ", b"CONNECT ", b"INFO ", b"PUB "]),
       chunk=st.binary(min_size=1, max_size=300).filter(lambda b: b"\n" not in b),
       mcl=st.integers(16, 2048))
def test_endless_line_bounded(prefix, chunk, mcl):
    """An endless line of any content, cut in any size: the parser never holds much more than max_control_line."""
    sink = Sink()
    p = ClientParser(sink, 1024 * 1024, mcl)
    fed = 0
    with pytest.raises(ProtocolError) as ei:
        p.feed(prefix)
        while fed < 50 * mcl + 1000:
            p.feed(chunk)
            fed += len(chunk)
            assert p.pending_bytes() <= mcl + 64
    assert ei.value.client_error in (MAX_CONTROL_LINE, UNKNOWN_OP, None)
    assert sink.calls == []


# ==== live server helpers ==================================================================================

CV = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
CH = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
# After the input: if the connection is still healthy the client gets its own message back.
SENTINEL = b"SUB _S 9\r\nPUB _S 4\r\nDONE\r\n"
SENTINEL_MSG = b"MSG _S 9 4\r\nDONE\r\n"


class Raw(asyncio.Protocol):
    """A raw client connection. A Protocol, not asyncio streams: StreamReader.read() raises a connection
    reset before returning data it already holds, which would lose the -ERR sent just before the close."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self._changed = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buf += data
        self._changed.set()

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)
        self._changed.set()
        self._can_write.set()

    def pause_writing(self):
        self._can_write.clear()

    def resume_writing(self):
        self._can_write.set()

    @property
    def closed(self) -> bool:
        return self.lost.done()

    @property
    def local_port(self) -> int:
        return self.transport.get_extra_info("sockname")[1]

    async def write(self, data: bytes) -> bool:
        """Write with flow control; False once the connection is gone."""
        if self.closed:
            return False
        self.transport.write(data)
        await self._can_write.wait()
        return not self.closed

    async def wait(self, pred, timeout: float) -> bool:
        """Wait until pred() holds, the connection closes or the time is up; return pred()."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not pred():
            left = end - loop.time()
            if self.closed or left <= 0:
                return pred()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        return True

    async def wait_closed(self, timeout: float) -> bool:
        return await self.wait(lambda: self.closed, timeout)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def raw_connect(port: int) -> Raw:
    """Connect and consume the server's INFO line."""
    _, p = await asyncio.get_running_loop().create_connection(Raw, "127.0.0.1", port)
    assert await p.wait(lambda: b"\r\n" in p.buf, 3), bytes(p.buf)
    assert p.buf.startswith(b"INFO {")
    del p.buf[:p.buf.index(b"\r\n") + 2]
    return p


async def exchange(port: int, data: bytes, timeout: float = 2.0) -> tuple[bytes, str]:
    """Send ``data`` then the sentinel on a fresh raw connection. Returns what the server sent after INFO
    (up to the sentinel message) and 'open' (sentinel answered), 'closed' (EOF/reset) or 'timeout'."""
    p = await raw_connect(port)
    try:
        await p.write(data + SENTINEL)
        await p.wait(lambda: SENTINEL_MSG in p.buf, timeout)
        out = bytes(p.buf)
        i = out.find(SENTINEL_MSG)
        if i >= 0:
            return out[:i], "open"
        return out, "closed" if p.closed else "timeout"
    finally:
        p.close()


def err_lines(out: bytes) -> list[str]:
    return [ln[6:-1].decode(errors="replace") for ln in out.split(b"\r\n") if ln.startswith(b"-ERR '")]


# ==== nats-server compatibility table ======================================================================

# input (after the server's INFO) -> (output up to the sentinel, state) as nats-server v2.15.1 answers it.
NATS_SERVER_ANSWERS = {
    # accepted
    "ping-lf": (CV + b"PING\n", b"PONG\r\n", "open"),
    "lf-control-lines": (CV + b"SUB foo 1\nPUB foo 2\nhi\r\n", b"MSG foo 1 2\r\nhi\r\n", "open"),
    "tabs-spaces-case": (CV + b"sub\tfoo \t q  1\r\nPub\t\tfoo  r  2 \r\nhi\r\n", b"MSG foo 1 r 2\r\nhi\r\n", "open"),
    "zero-payload": (CV + b"SUB foo 1\r\nPUB foo 0\r\n\r\n", b"MSG foo 1 0\r\n\r\n", "open"),
    "payload-with-protocol-text": (CV + b"SUB foo 1\r\nPUB foo 15\r\nPING\r\nPUB x 0\r\n\r\n",
                                   b"MSG foo 1 15\r\nPING\r\nPUB x 0\r\n\r\n", "open"),
    "hpub": (CH + b"SUB foo 1\r\nHPUB foo r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
             b"HMSG foo 1 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", "open"),
    "unsub-max": (CV + b"SUB foo 1\r\nUNSUB 1 2\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nPUB foo 1\r\nc\r\n",
                  b"MSG foo 1 1\r\na\r\nMSG foo 1 1\r\nb\r\n", "open"),
    "invalid-subject": (CV + b"SUB foo..bar 1\r\n", b"-ERR 'Invalid Subject'\r\n", "open"),
    "pedantic-publish-subject": (b'CONNECT {"verbose":false,"pedantic":true}\r\nPUB foo.* 1\r\na\r\n',
                                 b"-ERR 'Invalid Publish Subject'\r\n", "open"),
    # -ERR and closed
    "unknown-op": (CV + b"XYZ\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "msg-from-client": (CV + b"MSG foo 1 2\r\nhi\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "nul-byte": (CV + b"\x00", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "empty-line": (CV + b"\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "indented-op": (CV + b" PING\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "pubx": (CV + b"PUBX foo 1\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "payload-lf-only": (CV + b"PUB foo 2\nhi\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "payload-too-long": (CV + b"PUB foo 2\r\nhiX\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "payload-cr-without-lf": (CV + b"PUB foo 2\r\nhi\r", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "sub-no-args": (CV + b"SUB\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "unsub-no-args": (CV + b"UNSUB\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "hpub-no-args": (CH + b"HPUB\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "max-payload": (CV + b"PUB foo 1048577\r\n", b"-ERR 'Maximum Payload Violation'\r\n", "closed"),
    "max-payload-reply": (CV + b"PUB foo bar 999999999\r\n", b"-ERR 'Maximum Payload Violation'\r\n", "closed"),
    "max-payload-hpub": (CH + b"HPUB foo 0 1048577\r\n", b"-ERR 'Maximum Payload Violation'\r\n", "closed"),
    "connect-protocol-2": (b'CONNECT {"verbose":false,"protocol":2}\r\n', b"-ERR 'invalid client protocol'\r\n",
                           "closed"),
    "no-responders-without-headers": (b'CONNECT {"verbose":false,"no_responders":true}\r\n',
                                      b"-ERR 'no responders requires headers support'\r\n", "closed"),
    # closed without -ERR
    "bad-size": (CV + b"PUB foo x\r\n", b"", "closed"),
    "negative-size": (CV + b"PUB foo -1\r\n", b"", "closed"),
    "pub-missing-size": (CV + b"PUB foo\r\n", b"", "closed"),
    "pub-too-many-args": (CV + b"PUB foo bar baz 2\r\nhi\r\n", b"", "closed"),
    "sub-missing-sid": (CV + b"SUB foo\r\n", b"", "closed"),
    "sub-too-many-args": (CV + b"SUB foo q 1 x\r\n", b"", "closed"),
    "unsub-too-many-args": (CV + b"UNSUB 1 2 3\r\n", b"", "closed"),
    "hpub-header-gt-total": (CH + b"HPUB foo 14 12\r\nNATS/1.0\r\n\r\n\r\n", b"", "closed"),
    "hpub-missing-size": (CH + b"HPUB foo 2\r\n", b"", "closed"),
    "connect-bad-json": (b"CONNECT {bad\r\n", b"", "closed"),
    "connect-trailing-garbage": (b'CONNECT {"verbose":false} trailing\r\n', b"", "closed"),
    # Rillet answers these differently (see the report / test names)
    "long-control-line-err-text": (CV + b"SUB " + b"a" * 5000 + b" 1\r\n",
                                   b"-ERR 'maximum control line exceeded'\r\n", "closed"),
    "ping-trailing-bytes": (CV + b"PINGxyz\r\n", b"PONG\r\n", "open"),
    "ping-with-argument": (CV + b"PING foo\r\n", b"PONG\r\n", "open"),
    "pong-trailing-bytes": (CV + b"PONGabc\r\n", b"", "open"),
    "ok-trailing-space": (CV + b"+OK \r\n", b"", "open"),
    "unsub-bad-max": (CV + b"SUB foo 1\r\nUNSUB 1 x\r\nPUB foo 1\r\na\r\n", b"", "open"),
    "client-sends-err": (CV + b"-ERR 'foo'\r\n", b"", "closed"),
    "err-without-space": (CV + b"-ERR\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "connect-without-arg": (b"CONNECT\r\n", b"", "closed"),
    "connectx": (b"CONNECTX {}\r\n", b"", "closed"),
    "info-without-arg": (CV + b"INFO\r\n", b"", "closed"),
    "info-bad-json": (CV + b"INFO {bad json\r\n", b"", "closed"),
    "pub-without-args": (CV + b"PUB\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", "closed"),
    "hpub-without-headers": (CV + b"HPUB foo 0 0\r\n\r\n", b"", "closed"),
    "giant-hpub-without-headers": (CV + b"HPUB foo 1 999999999\r\n", b"", "closed"),
    "size-10-digits": (CV + b"PUB foo 9999999999\r\n", b"", "closed"),
    "vt-in-sub": (CV + b"SUB foo\x0b1\r\n", b"", "closed"),
    "ff-after-size": (CV + b"PUB foo 1\x0c\r\na\r\n", b"", "closed"),
    "vt-in-subject": (CV + b"SUB foo 1\r\nPUB foo\x0bbar 1\r\na\r\n", b"", "open"),
    "connect-defaults-verbose": (b"CONNECT {}\r\nPING\r\n", b"+OK\r\nPONG\r\n+OK\r\n+OK\r\n", "open"),
    "connect-defaults-pedantic": (b'CONNECT {"verbose":false}\r\nPUB foo.* 1\r\na\r\n',
                                  b"-ERR 'Invalid Publish Subject'\r\n", "open"),
    "verbose-ok-before-msg": (b'CONNECT {"verbose":true,"pedantic":false}\r\nPING\r\n',
                              b"+OK\r\nPONG\r\n+OK\r\n+OK\r\n", "open"),
}


@pytest.mark.parametrize("case", list(NATS_SERVER_ANSWERS))
async def test_answers_like_nats_server(case):
    data, want_out, want_state = NATS_SERVER_ANSWERS[case]
    async with run_server() as srv:
        out, state = await exchange(srv.addr[1], data)
        assert (out, state) == (want_out, want_state)


async def test_operation_before_connect_with_auth_is_authorization_violation():
    async with run_server(username="a", password="b") as srv:
        for data in (b"PING\r\n", b"SUB foo 1\r\n", b"XYZ\r\n", b"PUB foo 999999999\r\n"):
            out, state = await exchange(srv.addr[1], data)
            assert (out, state) == (b"-ERR 'Authorization Violation'\r\n", "closed"), data
        out, state = await exchange(srv.addr[1], b'CONNECT {"user":"a","pass":"b","verbose":false}\r\nPING\r\n')
        assert (out, state) == (b"PONG\r\n", "open")


@pytest.mark.parametrize("data, prefix", [
    (b"SUB \xff 1\r\n", b"-ERR 'Permissions Violation for Subscription to \""),
    (b"SUB bar \xd0W 1\r\n", b"-ERR 'Permissions Violation for Subscription to \"bar\" using queue \""),
    (b"PUB \xff 1\r\na\r\n", b"-ERR 'Permissions Violation for Publish to \""),
], ids=["sub-subject", "sub-queue", "pub-subject"])
async def test_permission_violation_with_non_utf8_names(data, prefix):
    """Found by fuzzing: a denied SUB whose subject or queue is not UTF-8 makes Client.send_err raise
    UnicodeEncodeError inside data_received (asyncio aborts the connection: no -ERR, no close reason).
    nats-server answers -ERR 'Permissions Violation for Subscription to "\\xff"' and keeps the connection."""
    from rillet.config.options import Permission, Permissions, User
    loop = asyncio.get_running_loop()
    loop_errors: list[dict] = []
    old_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _l, ctx: loop_errors.append(ctx))
    try:
        perms = Permissions(publish=Permission(allow=["foo", "_S"]), subscribe=Permission(allow=["foo", "_S"]))
        async with run_server(users=[User(username="a", password="b", permissions=perms)]) as srv:
            login = b'CONNECT {"user":"a","pass":"b","verbose":false,"pedantic":false}\r\n'
            out, state = await exchange(srv.addr[1], login + data)
    finally:
        loop.set_exception_handler(old_handler)
    assert not loop_errors, [str(c.get("exception")) for c in loop_errors]
    assert state == "open" and out.startswith(prefix) and out.count(b"\r\n") == 1, (out, state)


# ==== endless lines, giant payloads, memory =================================================================

async def _attack(port: int, first: bytes, chunk: bytes, limit: int) -> tuple[bytes, bool, int, int]:
    """Send ``first`` then ``chunk`` repeatedly until the server closes or ``limit`` bytes went out.
    Returns (what the server sent after INFO, closed by the server, bytes sent, local port)."""
    p = await raw_connect(port)
    lport = p.local_port
    sent = 0
    await p.write(CV + first)
    while sent < limit and await p.write(chunk):
        sent += len(chunk)
        await asyncio.sleep(0)
    closed = await p.wait_closed(3)
    p.close()
    return bytes(p.buf), closed, sent, lport


async def _sample_pending(srv, stop: asyncio.Event, peaks: dict[int, int]) -> None:
    while not stop.is_set():
        for c in list(srv.clients.values()):
            n = c.parser.pending_bytes()
            if n > peaks.get(c.port, -1):
                peaks[c.port] = n
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("first, chunk", [
    (b"PUB foo ", b"x" * 1024),
    (b"SUB ", b"y" * 100),
    (b"CONNECT ", b"z" * 4096),
    (b"PUB foo bar ", b"1"),
], ids=["pub-1KiB-reads", "sub-100B-reads", "connect-4KiB-reads", "pub-1B-reads"])
async def test_endless_control_line_is_cut_off(first, chunk):
    async with run_server() as srv:
        stop = asyncio.Event()
        peaks: dict[int, int] = {}
        sampler = asyncio.ensure_future(_sample_pending(srv, stop, peaks))
        limit = 20_000 if len(chunk) == 1 else 4 * 1024 * 1024
        out, closed, sent, lport = await _attack(srv.addr[1], first, chunk, limit)
        stop.set()
        await sampler
        assert [e.lower() for e in err_lines(out)] == [MAX_CONTROL_LINE.lower()]
        assert closed
        assert sent < limit, "server kept reading an endless line"
        assert peaks.get(lport, 0) <= srv.opts.max_control_line + 64


@pytest.mark.parametrize("first", [b"PUB foo 999999999\r\n", b"PUB foo 1048577\r\n", b"PUB foo r 5000000\r\n"],
                         ids=["9-digits", "max+1", "with-reply"])
async def test_giant_payload_announcement_is_refused(first):
    async with run_server() as srv:
        stop = asyncio.Event()
        peaks: dict[int, int] = {}
        sampler = asyncio.ensure_future(_sample_pending(srv, stop, peaks))
        out, closed, sent, lport = await _attack(srv.addr[1], first, b"p" * 65536, 8 * 1024 * 1024)
        stop.set()
        await sampler
        assert err_lines(out) == [MAX_PAYLOAD_VIOLATION] and closed
        assert sent < 8 * 1024 * 1024
        assert peaks.get(lport, 0) <= 64


async def test_giant_hpub_announcement_is_refused():
    async with run_server() as srv:
        p = await raw_connect(srv.addr[1])
        await p.write(CH + b"HPUB foo 10 999999999\r\n")
        assert await p.wait_closed(3)
        assert p.buf == b"-ERR 'Maximum Payload Violation'\r\n"


async def test_memory_bounded_under_many_attackers():
    """20 connections try to push 40 MB of endless lines and oversized payloads; the server holds little."""
    tracemalloc.start()
    try:
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        async with run_server() as srv:
            stop = asyncio.Event()
            peaks: dict[int, int] = {}
            sampler = asyncio.ensure_future(_sample_pending(srv, stop, peaks))
            base, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            attacks = []
            for i in range(20):
                if i % 2:
                    attacks.append(_attack(srv.addr[1], b"PUB foo ", b"x" * 8192, 2 * 1024 * 1024))
                else:
                    attacks.append(_attack(srv.addr[1], b"PUB foo 1048577\r\n", b"x" * 65536, 2 * 1024 * 1024))
            results = await asyncio.gather(*attacks)
            _, peak = tracemalloc.get_traced_memory()
            stop.set()
            await sampler
            for out, closed, sent, lport in results:
                assert closed and len(err_lines(out)) == 1
                assert err_lines(out)[0].lower() in (MAX_CONTROL_LINE.lower(), MAX_PAYLOAD_VIOLATION.lower())
                assert peaks.get(lport, 0) <= srv.opts.max_control_line + 64
            assert not srv.clients
        # attackers and server share this process: the bound covers both sides' buffers
        assert peak - base < 16 * 1024 * 1024, f"peak grew by {(peak - base) / 1e6:.1f} MB"
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert rss1 - rss0 < 200 * 1024, f"max RSS grew by {(rss1 - rss0) / 1024:.0f} MB"  # KiB on Linux
    finally:
        tracemalloc.stop()


async def test_declared_payload_within_limit_buffered_up_to_its_size():
    size = 1024 * 1024
    async with run_server() as srv:
        r, w = await asyncio.open_connection("127.0.0.1", srv.addr[1])
        await r.readline()
        w.write(CV + b"SUB big 1\r\nPUB big %d\r\n" % size)
        body = bytes(range(256)) * (size // 256)
        peak = 0
        for i in range(0, size, 65536):
            w.write(body[i:i + 65536])
            await w.drain()
            await asyncio.sleep(0.001)
            peak = max(peak, max(c.parser.pending_bytes() for c in srv.clients.values()))
        w.write(b"\r\nPING\r\n")
        head = await asyncio.wait_for(r.readline(), 3)
        assert head == b"MSG big 1 %d\r\n" % size
        got = await asyncio.wait_for(r.readexactly(size + 2), 3)
        assert got[:-2] == body
        assert await asyncio.wait_for(r.readline(), 3) == b"PONG\r\n"
        assert peak <= size + 64
        assert all(c.parser.pending_bytes() == 0 for c in srv.clients.values())
        w.close()


# ==== a storm of bad connections while a good client works =================================================

def _random_valid_ops(rng: random.Random, n: int) -> bytes:
    out = []
    for _ in range(n):
        k = rng.randrange(6)
        subj = rng.choice([b"foo", b"foo.bar", b"x.y.z"])
        if k == 0:
            out.append(b"PING\r\n")
        elif k == 1:
            p = rng.randbytes(rng.randrange(40))
            out.append(b"PUB %b %d\r\n%b\r\n" % (subj, len(p), p))
        elif k == 2:
            out.append(b"SUB %b %d\r\n" % (subj, rng.randrange(100)))
        elif k == 3:
            out.append(b"UNSUB %d\r\n" % rng.randrange(100))
        elif k == 4:
            out.append(b"PUB %b reply.%d 3\r\nabc\r\n" % (subj, rng.randrange(100)))
        else:
            out.append(b"PONG\r\n")
    return b"".join(out)


# Bad tails whose answer is the same from nats-server and Rillet: (bytes, expected -ERR lines)
_BAD_TAILS = [
    (b"XYZ\r\n", [UNKNOWN_OP]), (b"\x00", [UNKNOWN_OP]), (b"MSG a 1 1\r\nx\r\n", [UNKNOWN_OP]),
    (b"PUB foo 2\r\nabc\r\n", [UNKNOWN_OP]), (b"SUB\r\n", [UNKNOWN_OP]), (b"\r\n", [UNKNOWN_OP]),
    (b"PUB foo 2000000\r\n", [MAX_PAYLOAD_VIOLATION]), (b"PUB foo x\r\n", []), (b"SUB foo\r\n", []),
    (b"UNSUB 1 2 3\r\n", []), (b"PUB a b c 1\r\nx\r\n", []),
]


async def _bad_client(port: int, rng: random.Random, kind: str) -> tuple[str, bytes, bool, list | None]:
    """One misbehaving connection. Returns (kind, output, closed by server, expected -ERR lines or None)."""
    expect: list | None = None
    if kind == "tail":
        tail, expect = rng.choice(_BAD_TAILS)
        data = CV + _random_valid_ops(rng, rng.randrange(1, 8)) + tail
    elif kind == "random":
        data = rng.randbytes(rng.randrange(1, 2000))
    elif kind == "mutated":
        data = bytearray(CV + _random_valid_ops(rng, rng.randrange(1, 10)))
        for _ in range(rng.randrange(1, 5)):
            i = rng.randrange(len(data))
            data[i:i + rng.randrange(3)] = rng.randbytes(rng.randrange(4))
        data = bytes(data)
    elif kind == "endless":
        data, expect = CV + b"PUB foo " + b"x" * 20000, [MAX_CONTROL_LINE]
    else:  # giant
        data, expect = CV + b"PUB foo 50000000\r\n" + b"x" * 20000, [MAX_PAYLOAD_VIOLATION]
    p = await raw_connect(port)
    pos = 0
    while pos < len(data):  # random read boundaries
        step = rng.randrange(1, 600)
        if not await p.write(data[pos:pos + step]):
            break
        pos += step
        if rng.random() < 0.3:
            await asyncio.sleep(0.001)
    closed = await p.wait_closed(3.0 if expect is not None else 0.3)
    p.close()
    return kind, bytes(p.buf), closed, expect


async def test_storm_of_bad_connections_good_client_keeps_working():
    loop = asyncio.get_running_loop()
    loop_errors: list[dict] = []
    old_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _l, ctx: loop_errors.append(ctx))
    try:
        async with run_server() as srv:
            responder = await nats.connect(srv.client_url)
            requester = await nats.connect(srv.client_url)

            async def echo(msg):
                await msg.respond(b"re:" + msg.data)

            await responder.subscribe("svc.echo", cb=echo)
            await responder.flush()
            done = asyncio.Event()
            ok_count = 0

            async def keep_requesting():
                nonlocal ok_count
                i = 0
                while not done.is_set():
                    i += 1
                    rep = await requester.request("svc.echo", b"%d" % i, timeout=2)
                    assert rep.data == b"re:%d" % i
                    ok_count += 1
                    await asyncio.sleep(0.002)

            req_task = asyncio.ensure_future(keep_requesting())
            stop = asyncio.Event()
            peaks: dict[int, int] = {}
            sampler = asyncio.ensure_future(_sample_pending(srv, stop, peaks))

            rng = random.Random(20240611)
            kinds = ["tail"] * 14 + ["random"] * 10 + ["mutated"] * 10 + ["endless"] * 3 + ["giant"] * 3
            rng.shuffle(kinds)
            sem = asyncio.Semaphore(8)

            async def limited(kind, seed):
                async with sem:
                    return await _bad_client(srv.addr[1], random.Random(seed), kind)

            t0 = time.monotonic()
            results = await asyncio.wait_for(
                asyncio.gather(*(limited(k, rng.random()) for k in kinds)), 30)
            elapsed = time.monotonic() - t0
            done.set()
            await asyncio.wait_for(req_task, 5)  # re-raises a failed request
            stop.set()
            await sampler

            for kind, out, closed, expect in results:
                errs = err_lines(out)
                assert all(e.lower() in KNOWN_ERRS for e in errs), (kind, out[:200])
                if expect is not None:
                    assert [e.lower() for e in errs] == [e.lower() for e in expect], (kind, out[:200])
                    assert closed, (kind, out[:200])
                if errs and errs[-1].lower() in (UNKNOWN_OP.lower(), MAX_PAYLOAD_VIOLATION.lower(),
                                                  MAX_CONTROL_LINE.lower()):
                    assert closed, (kind, out[:200])
            assert max(peaks.values(), default=0) <= srv.opts.max_payload + srv.opts.max_control_line + 64
            assert ok_count >= 5, (ok_count, elapsed)

            # the server is still healthy: the two good clients and a new one work
            rep = await requester.request("svc.echo", b"after", timeout=2)
            assert rep.data == b"re:after"
            nc = await nats.connect(srv.client_url)
            assert (await nc.request("svc.echo", b"new", timeout=2)).data == b"re:new"
            await nc.close()
            for _ in range(200):  # every bad connection (and the extra client) is gone from the server
                if len(srv.clients) == 2:
                    break
                await asyncio.sleep(0.01)
            assert len(srv.clients) == 2
            await requester.close()
            await responder.close()
    finally:
        loop.set_exception_handler(old_handler)
    assert not loop_errors, loop_errors[:3]


# ==== hypothesis against a live server (server thread, blocking sockets) ===================================

class _ServerThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.errors: list[dict] = []
        self.loop.set_exception_handler(lambda _l, ctx: self.errors.append(ctx))
        self.srv: Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main():
            self.srv = build_server(Options(host="127.0.0.1", port=-1), Logger(out=io.StringIO()))
            await self.srv.start()
            self._ready.set()
            await self.srv.wait_stopped()

        self.loop.run_until_complete(main())

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.srv.shutdown(), self.loop).result(5)
        self._thread.join(5)
        self.loop.close()

    def clients(self) -> int:
        return asyncio.run_coroutine_threadsafe(self._count(), self.loop).result(5)

    async def _count(self) -> int:
        return len(self.srv.clients)


@pytest.fixture(scope="module")
def server_thread():
    with _ServerThread() as st_:
        yield st_


def _send_and_drain(port: int, data: bytes) -> bytes:
    """Send, half-close, and read until the server closes (it closes at EOF, or earlier on an error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        f = b""
        while not f.endswith(b"\r\n"):
            b = s.recv(4096)
            assert b
            f += b
        out = b""
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except ConnectionResetError:
            pass
        return out


_json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=8)),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=6)
_connect_keys = ["verbose", "pedantic", "echo", "headers", "no_responders", "protocol", "name", "lang",
                 "user", "pass", "auth_token", "tls_required", "version", "sig", "jwt", "nkey"]
_fuzz_connect = st.one_of(
    st.dictionaries(st.sampled_from(_connect_keys), _json_value, max_size=6).map(
        lambda d: b"CONNECT " + json.dumps(d).encode() + b"\r\n"),
    st.binary(max_size=40).map(lambda b: b"CONNECT {" + b + b"}\r\n"),
)
_token = st.one_of(st.sampled_from([b"foo", b"foo.bar", b"*", b">", b"a.>", b"..", b".a", b"a.", b"a.*.b",
                                    b"\xff", b"\xc3\xa9", b"_INBOX.1", b"$SYS.x", b"a\x00b", b"q"]),
                   st.binary(min_size=1, max_size=6).filter(lambda b: not any(c in b for c in b" \t\r\n\x0b\x0c")))
_fuzz_op = st.one_of(
    _fuzz_connect,
    st.tuples(_token, st.one_of(st.none(), _token), st.integers(0, 999)).map(
        lambda t: b"SUB %b%b %d\r\n" % (t[0], b" " + t[1] if t[1] else b"", t[2])),
    st.tuples(_token, st.one_of(st.none(), _token), st.binary(max_size=20)).map(
        lambda t: b"PUB %b%b %d\r\n%b\r\n" % (t[0], b" " + t[1] if t[1] else b"", len(t[2]), t[2])),
    st.tuples(_token, st.binary(max_size=10), st.binary(max_size=10)).map(
        lambda t: b"HPUB %b %d %d\r\n%b%b\r\n" % (t[0], len(t[1]), len(t[1]) + len(t[2]), t[1], t[2])),
    st.tuples(st.integers(0, 999), st.integers(0, 3)).map(lambda t: b"UNSUB %d %d\r\n" % t),
    st.sampled_from([b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b"INFO {}\r\n"]),
    st.binary(max_size=30),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_fuzz_op, min_size=1, max_size=8))
def test_live_server_survives_fuzzed_sessions(server_thread, ops):
    port = server_thread.srv.addr[1]
    out = _send_and_drain(port, b"".join(ops))
    for e in err_lines(out):
        assert e.lower() in KNOWN_ERRS or e.startswith("Permissions Violation"), out[:300]
    assert not server_thread.errors, server_thread.errors[:2]
    # still serving
    assert _send_and_drain(port, CV + b"PING\r\n") == b"PONG\r\n"
