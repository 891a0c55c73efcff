"""The compiled lane against its pure-Python twin (rillet.lane): the same bytes, cut at every point, give
the same handler calls, the same ProtocolError (client_error, detail, reason), the same bytes kept pending;
the frame builders give the same bytes.

Streams: valid ones built from operations (every op, reply and queue forms, payloads holding CRLF, odd
spellings the reference accepts), hostile ones (random bytes, control lines over the limit, payload sizes that
lie, header sizes past the total, 10-digit sizes, bytes mutated in a valid stream), under small limits so
that the limits are hit, with and without the CONNECT handshake.
"""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lanes import COMPILED_ERROR, parser_class
from rillet import lane
from rillet.config.options import Options
from rillet.protocol.parser import ProtocolError
from rillet.app.embed import run_server
from rillet.server.logging import Logger

pytestmark = pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _version(env_pure: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RILLET_PURE"}
    if env_pure is not None:
        env["RILLET_PURE"] = env_pure
    r = subprocess.run([sys.executable, "-m", "rillet.server", "--version"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_version_names_the_lane():
    assert re.fullmatch(r"nats-server: v\S+ \(rillet \S+, compiled lane\)", _version(None)), _version(None)
    assert _version("0").endswith(", compiled lane)")
    assert _version("1").endswith(", pure-Python lane)")


async def test_varz_names_the_lane():
    out = io.StringIO()
    async with run_server(Options(host="127.0.0.1", port=-1, http_port=-1, http_host="127.0.0.1"),
                          log=Logger(out=out)) as srv:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{srv.http_addr[1]}/varz") as r:
                v = await r.json()
    assert v["rillet_lane"] == lane.LANE and list(v)[:3] == ["server_id", "server_name", "version"]
    assert f"  Lane:     {lane.NAME}" in out.getvalue()  # the startup log says it too


def test_compiled_lane_is_built():
    """Where the tests run, the extension is built (`pip install -e .`) and the default lane is compiled."""
    assert lane.COMPILED or os.environ.get("RILLET_PURE", "") not in ("", "0"), lane.REASON
    assert lane.NAME == ("compiled lane" if lane.COMPILED else "pure-Python lane")


def test_compiled_lane_is_not_stale():
    """An extension built in place (`pip install -e .`) is newer than its .pyx: a twin edited but not rebuilt
    would test the old code (rebuild: `pip install -e .` or `python setup.py build_ext --inplace`)."""
    import importlib
    for mod in ("_cparser", "_cserver", "_cdeliver", "_cmqtt"):
        so = Path(importlib.import_module(f"rillet._speedups.{mod}").__file__)
        pyx = so.with_name(f"{mod}.pyx")
        if pyx.exists():
            assert so.stat().st_mtime >= pyx.stat().st_mtime, f"{so.name} is older than {pyx.name}: rebuild"


# ==== recording handlers =======================================================================================

class Rec:
    """Records every call of every handler method (client and server protocols) with its arguments."""

    def __init__(self, allow_before_connect=True, clear_on_connect=True, halt_on_info=False, retune=False):
        self.calls: list[tuple] = []
        self.allow = allow_before_connect
        self.clear_on_connect = clear_on_connect
        self.halt_on_info = halt_on_info
        # retune: what a route connection does on INFO and CONNECT, mid-buffer: pin/unpin the account, flip
        # lnocu, change max_payload (the compiled twin must see the change for the rest of the buffer)
        self.retune = retune
        self.parser = None

    def __getattr__(self, name):
        if not name.startswith("proto_"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append((name, *[(type(a).__name__, a) for a in args]))
        return call

    def proto_connect(self, arg):
        self.calls.append(("proto_connect", arg))
        if self.clear_on_connect:
            self.parser.awaiting_connect = False
        if self.retune:
            p = self.parser
            if hasattr(p, "pin"):  # a server connection
                p.max_payload = 12 if p.max_payload is None else None
                p.max_control_line = 2 if p.max_control_line > 2 else 4096
                p._configure()
            else:
                p.max_payload = 12 if p.max_payload > 12 else 1024
                p.max_control_line = 24 if p.max_control_line > 24 else 4096
                p.headers = not p.headers

    def proto_info(self, arg):
        self.calls.append(("proto_info", arg))
        if self.halt_on_info and hasattr(self.parser, "halt"):
            self.parser.halt = True
        if self.retune and hasattr(self.parser, "pin"):
            p = self.parser
            if p.kind == "ROUTER":
                p.pin(None if p.account else b"PIN")
            p.lnocu = not p.lnocu
            p.max_payload = 64 if p.max_payload is None else None

    def proto_before_connect(self):
        self.calls.append(("proto_before_connect",))
        return self.allow

    def hpub_too_big(self, subject, hdrs, size):
        self.calls.append(("hpub_too_big", subject, hdrs, size))


def _outcome(make, pieces):
    """Feed the pieces; (calls, error, pending bytes, rest taken after a halt)."""
    rec, p = make()
    err = None
    rests = []
    try:
        for piece in pieces:
            p.feed(piece)
            if getattr(p, "halt", False):
                rests.append(p.take_rest())
    except ProtocolError as e:
        err = (e.client_error, e.detail, e.reason)
    return rec.calls, err, p.pending_bytes(), rests


def _cuts(data: bytes):
    yield [data]
    for i in range(1, len(data)):
        yield [data[:i], data[i:]]


def same_both_lanes(data: bytes, make_pure, make_compiled, every_cut=True, extra_cuts=()):
    cuts = list(_cuts(data)) if every_cut else [[data]]
    for c in extra_cuts:
        cuts.append(c)
    for pieces in cuts:
        a = _outcome(make_pure, pieces)
        b = _outcome(make_compiled, pieces)
        assert a == b, f"lanes differ for {pieces!r}:\npure     {a}\ncompiled {b}"


# ==== the client parser =======================================================================================

def client_makers(max_payload=1024 * 1024, max_control_line=4096, headers=True, awaiting=False, allow=True,
                  retune=False):
    def mk(lane_name):
        def make():
            rec = Rec(allow_before_connect=allow, retune=retune)
            p = parser_class(lane_name, "ClientParser")(rec, max_payload, max_control_line)
            p.headers = headers
            p.awaiting_connect = awaiting
            rec.parser = p
            return rec, p
        return make
    return mk("pure"), mk("compiled")


token = st.binary(min_size=1, max_size=6).filter(lambda b: not any(c in b for c in b" \t\r\n"))
name = st.sampled_from([b"foo", b"foo.bar", b"_INBOX.x.y", b"a.*", b"q", b">", b"PUB", b"x\xff"]) | token
payload = st.sampled_from([b"", b"hello", b"a\r\nb", b"\r\n", b"PING\r\n", b"PUB x 1\r\n"]) | st.binary(max_size=12)
sep = st.sampled_from([b" ", b" ", b" ", b"  ", b"\t", b" \t"])
eol = st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n"])
case = st.sampled_from([bytes.upper, bytes.upper, bytes.upper, bytes.lower, lambda b: b[:1].lower() + b[1:]])


@st.composite
def client_op(draw, canonical=False):
    """One operation; ``canonical``: upper case, single spaces, CRLF (what the compiled fast path takes)."""
    kind = draw(st.sampled_from(["pub", "pub", "hpub", "sub", "unsub", "ping", "pong", "connect", "info",
                                 "ok", "err", "lying"]))
    s = b" " if canonical else draw(sep)
    e = b"\r\n" if canonical else draw(eol)
    c = bytes.upper if canonical else draw(case)
    if kind in ("pub", "lying"):
        body = draw(payload)
        reply = draw(st.none() | name)
        size = len(body) if kind == "pub" else max(0, len(body) + draw(st.integers(-3, 3)))
        args = [draw(name)] + ([reply] if reply is not None else []) + [b"%d" % size]
        return c(b"PUB") + s + s.join(args) + e + body + draw(st.sampled_from([b"\r\n", b"\r\n", b"\n", b"xx"]))
    if kind == "hpub":
        hdr = draw(st.sampled_from([b"NATS/1.0\r\n\r\n", b"", b"NATS/1.0\r\nA: b\r\n\r\n"]))
        body = draw(payload)
        hl = len(hdr) + draw(st.sampled_from([0, 0, 0, 1, -1, 50]))
        tl = len(hdr) + len(body)
        reply = draw(st.none() | name)
        args = [draw(name)] + ([reply] if reply is not None else []) + [b"%d" % hl, b"%d" % tl]
        return c(b"HPUB") + s + s.join(args) + e + hdr + body + b"\r\n"
    if kind == "sub":
        args = [draw(name)] + ([draw(name)] if draw(st.booleans()) else []) + [draw(token)]
        return c(b"SUB") + s + s.join(args) + e
    if kind == "unsub":
        args = [draw(token)] + ([draw(st.sampled_from([b"5", b"0", b"x", b"1234567890"]))]
                                if draw(st.booleans()) else [])
        return c(b"UNSUB") + s + s.join(args) + e
    if kind == "ping":
        return c(b"PING") + draw(st.sampled_from([b"", b"", b" x"])) + e
    if kind == "pong":
        return c(b"PONG") + e
    if kind == "connect":
        return c(b"CONNECT") + b" {\"verbose\":false}" + e
    if kind == "info":
        return c(b"INFO") + b" {}" + e
    if kind == "ok":
        return b"+OK" + e
    return b"-ERR 'x'" + e


client_stream = st.lists(client_op(), min_size=1, max_size=6).map(b"".join)


@st.composite
def mutated(draw, stream):
    data = bytearray(draw(stream))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        how = draw(st.sampled_from(["flip", "del", "ins"]))
        b = draw(st.sampled_from([0, 9, 10, 13, 32, 48, 57, 80, 255]) | st.integers(0, 255))
        if how == "flip":
            data[i] = b
        elif how == "del":
            del data[i]
        else:
            data.insert(i, b)
    return bytes(data)


limits = st.sampled_from([
    dict(), dict(max_payload=8), dict(max_control_line=16), dict(max_payload=4, max_control_line=12),
    dict(headers=False), dict(awaiting=True), dict(awaiting=True, allow=False), dict(retune=True),
    dict(retune=True, awaiting=True, max_payload=8),
])


@FAST
@given(data=client_stream, lim=limits)
def test_client_valid_streams_split_everywhere(data, lim):
    same_both_lanes(data, *client_makers(**lim))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(client_op(canonical=True), min_size=1, max_size=5), at=st.integers(0, 2),
       awaiting=st.booleans())
def test_client_settings_changed_mid_buffer(ops, at, awaiting):
    """CONNECT changing max_payload, max_control_line and headers: the rest of the buffer sees the change."""
    ops.insert(min(at, len(ops)), b'CONNECT {"headers":true}\r\n')
    same_both_lanes(b"".join(ops), *client_makers(retune=True, awaiting=awaiting))


@FAST
@given(data=mutated(client_stream), lim=limits)
def test_client_mutated_streams_split_everywhere(data, lim):
    same_both_lanes(data, *client_makers(**lim))


@FAST
@given(data=st.binary(max_size=64), lim=limits)
def test_client_random_bytes(data, lim):
    same_both_lanes(data, *client_makers(**lim))


@FAST
@given(parts=st.lists(client_stream, min_size=1, max_size=3), lim=limits, cuts=st.lists(st.integers(0, 200),
                                                                                          max_size=6))
def test_client_many_cuts(parts, lim, cuts):
    data = b"".join(parts)
    pieces, prev = [], 0
    for c in sorted(set(cuts)):
        if 0 < c < len(data):
            pieces.append(data[prev:c])
            prev = c
    pieces.append(data[prev:])
    same_both_lanes(data, *client_makers(**lim), every_cut=False, extra_cuts=[pieces, [bytes([b]) for b in data]])


HOSTILE_CLIENT = [
    b"PUB foo " + b"x" * 5000 + b" 1\r\na\r\n",             # a control line over the limit
    b"SUB " + b"a" * 4097 + b" 1\r\n",
    b"PUB foo 1" + b"0" * 6000,                            # an endless control line
    b"PUB foo 10\r\nabc\r\nPING\r\n",                       # a size that lies (too big: waits)
    b"PUB foo 2\r\nabc\r\nPING\r\n",                        # a size that lies (too small)
    b"PUB foo 1234567890\r\n",                             # 10 digits
    b"PUB foo 2000000\r\n",                                # over max_payload
    b"HPUB foo 20 10\r\n0123456789\r\n",                   # header size past the total
    b"HPUB foo 5 2000000\r\nNATS/",                        # over max_payload, with headers
    b"HPUB foo x 5\r\nhello\r\n", b"HPUB foo 2 y\r\nhello\r\n",
    b"PUB foo -1\r\n\r\n", b"PUB  foo 1\r\nx\r\n", b"PUB foo 1 \r\nx\r\n", b"PUB\tfoo\t1\r\nx\r\n",
    b"PUB foo bar baz 1\r\nx\r\n", b"PUB 1\r\nx\r\n", b"PUB foo 1\nx\r\n", b"PUB foo 1\r\nx\n\r\n",
    b"SUB foo\r\n", b"SUB a b c d\r\n", b"UNSUB\r\n", b"UNSUB a b c\r\n", b"UNSUB 1 -5\r\n",
    b"PINGX\r\n", b"PIN\r\n", b"PONGPONG\r\n", b"pub foo 1\r\nx\r\n", b"\r\n", b" PING\r\n", b"XYZ\r\n",
    b"PUB foo 3\r\na\r\n\r\nPING\r\n", b"PUB foo\x00 1\r\nx\r\n", b"PUB f\ro 1\r\nx\r\n",
    b"HPUB foo 0 0\r\n\r\nHPUB foo 1 1\r\nx\r\n", b"CONNECT {}\r\nPUB a 1\r\nx\r\n",
]


@pytest.mark.parametrize("data", HOSTILE_CLIENT, ids=[f"h{i}" for i in range(len(HOSTILE_CLIENT))])
@pytest.mark.parametrize("lim", [dict(), dict(max_payload=64), dict(max_control_line=32), dict(awaiting=True),
                                 dict(headers=False)], ids=str)
def test_client_hostile_cases(data, lim):
    same_both_lanes(data, *client_makers(**lim))


def test_client_bytearray_and_resume_go_to_the_reference():
    for data in (bytearray(b"PUB a 1\r\nx\r\nPING\r\n"), bytearray(b"SUB a 1\r\n")):
        a, b = (_outcome(m, [data]) for m in client_makers())
        assert a == b and a[0]


# ==== the inter-server parser =================================================================================

KINDS = ["ROUTER", "GATEWAY", "LEAF"]


def server_makers(kind, account=None, lnocu=True, max_payload=None, max_control_line=4096, awaiting=False,
                  allow=True, halt_on_info=False, info_before_connect=False, retune=False):
    def mk(lane_name):
        def make():
            rec = Rec(allow_before_connect=allow, halt_on_info=halt_on_info, retune=retune)
            p = parser_class(lane_name, "ServerParser")(rec, kind, max_control_line=max_control_line,
                                                          max_payload=max_payload, account=account, lnocu=lnocu)
            p.awaiting_connect = awaiting
            p.info_before_connect = info_before_connect
            rec.parser = p
            return rec, p
        return make
    return mk("pure"), mk("compiled")


@st.composite
def server_op(draw, canonical=False):
    """One operation; ``canonical``: upper case, single spaces, CRLF (what the compiled fast path takes)."""
    kind = draw(st.sampled_from(["rmsg", "rmsg", "hmsg", "lmsg", "lmsg2", "sub", "ping", "pong", "info",
                                 "connect", "a", "lying"]))
    s = b" " if canonical else draw(sep)
    e = b"\r\n" if canonical else draw(eol)
    c = bytes.upper if canonical else draw(case)
    nacc = draw(st.sampled_from([0, 1, 1, 1]))
    lead = [draw(name) for _ in range(nacc)] + [draw(name)]
    form = draw(st.sampled_from(["none", "reply", "plus", "pipe", "plus0", "badind"]))
    reply = draw(name)
    queues = draw(st.lists(name, min_size=1, max_size=3))
    if form == "none":
        mid = []
    elif form == "reply":
        mid = [reply]
    elif form == "plus":
        mid = [b"+", reply] + queues
    elif form == "plus0":
        mid = [b"+", reply]
    elif form == "pipe":
        mid = [b"|"] + queues
    else:
        mid = [draw(st.sampled_from([b"?", b"|x", b"+x", b"++", b"||"])), reply] + queues
    body = draw(payload)
    if kind in ("rmsg", "lying", "lmsg2"):
        size = len(body) if kind != "lying" else max(0, len(body) + draw(st.integers(-2, 2)))
        op = c(b"LMSG" if kind == "lmsg2" else b"RMSG")
        return op + s + s.join(lead + mid + [b"%d" % size]) + e + body + b"\r\n"
    if kind in ("hmsg", "lmsg"):
        hdr = draw(st.sampled_from([b"NATS/1.0\r\n\r\n", b""]))
        hl = len(hdr) + draw(st.sampled_from([0, 0, 0, 1, 40]))
        origin = [draw(name)] if kind == "lmsg" else []
        op = c(b"HMSG" if kind == "hmsg" else b"LMSG")
        return op + s + s.join(origin + lead + mid + [b"%d" % hl, b"%d" % (len(hdr) + len(body))]) + e + hdr + \
            body + b"\r\n"
    if kind == "sub":
        op = draw(st.sampled_from([b"RS+", b"RS-", b"LS+", b"LS-", b"SUB", b"UNSUB"]))
        return op + s + s.join(lead + ([draw(name), b"1"] if draw(st.booleans()) else [])) + e
    if kind == "ping":
        return c(b"PING") + e
    if kind == "pong":
        return c(b"PONG") + e
    if kind == "info":
        return b"INFO {} " + e
    if kind == "connect":
        return b'CONNECT {"x":1}' + e
    return draw(st.sampled_from([b"A+", b"A-"])) + b" " + lead[0] + e


server_stream = st.lists(server_op(), min_size=1, max_size=5).map(b"".join)

server_settings = st.fixed_dictionaries({"kind": st.sampled_from(KINDS)}, optional={
    "account": st.just(b"ACC"), "lnocu": st.booleans(), "max_payload": st.sampled_from([None, 4, 64]),
    "max_control_line": st.sampled_from([4096, 2, 3]), "awaiting": st.booleans(), "allow": st.booleans(),
    "halt_on_info": st.booleans(), "info_before_connect": st.booleans(), "retune": st.booleans(),
}).map(lambda d: {k: v for k, v in d.items() if not (k == "account" and d["kind"] != "ROUTER")})


@FAST
@given(data=server_stream, cfg=server_settings)
def test_server_valid_streams_split_everywhere(data, cfg):
    same_both_lanes(data, *server_makers(**cfg))


@FAST
@given(data=mutated(server_stream), cfg=server_settings)
def test_server_mutated_streams_split_everywhere(data, cfg):
    same_both_lanes(data, *server_makers(**cfg))


@FAST
@given(data=st.binary(max_size=64), cfg=server_settings)
def test_server_random_bytes(data, cfg):
    same_both_lanes(data, *server_makers(**cfg))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(server_op(canonical=True), min_size=1, max_size=5), at=st.integers(0, 2),
       kind=st.sampled_from(KINDS),
       ctl=st.sampled_from([b"INFO {} \r\n", b'CONNECT {"x":1}\r\n']), pinned=st.booleans())
def test_server_settings_changed_mid_buffer(ops, at, kind, ctl, pinned):
    """A handler re-pinning the route, flipping lnocu, changing max_payload / max_control_line on INFO or
    CONNECT: the rest of the same buffer is parsed with the new settings in both lanes."""
    ops.insert(min(at, len(ops)), ctl)
    cfg = dict(kind=kind, retune=True)
    if pinned and kind == "ROUTER":
        cfg["account"] = b"ACC"
    same_both_lanes(b"".join(ops), *server_makers(**cfg))


HOSTILE_SERVER = [
    b"RMSG $G foo " + b"x" * 70000 + b" 1\r\na\r\n",       # over 16 x max_control_line
    b"RMSG $G foo 1" + b"0" * 70000,                       # an endless control line
    b"RMSG $G foo 10\r\nabc\r\nPING\r\n", b"RMSG $G foo 2\r\nabc\r\nPING\r\n",
    b"RMSG $G foo 1234567890\r\n", b"HMSG $G foo 20 10\r\n0123456789\r\n", b"HMSG $G foo 5\r\nhello\r\n",
    b"LMSG o $G foo 9 3\r\nabc\r\n", b"RMSG $G foo x q 1\r\na\r\n", b"RMSG $G foo + 1\r\na\r\n",
    b"RMSG $G foo | 1\r\na\r\n", b"RMSG $G 1\r\na\r\n", b"RMSG 1\r\na\r\n", b"RMSG $G foo 1\r\nab",
    b"RMSG $G foo 1\r\naXX", b"RMSG\t$G foo 1\r\na\r\n", b"RMSG $G\rfoo 1\r\na\r\n", b"rmsg $G foo 1\r\na\r\n",
    b"LMSG foo 1\r\na\r\n", b"HMSG foo 1 1\r\na\r\n", b"RMSG $G foo 100\r\n" + b"a" * 100 + b"\r\n",
    b"RS+ $G\r\n", b"RS+ $G foo q\r\n", b"LS- a b c d e\r\n", b"A+\r\n", b"XMSG a 1\r\n", b"PING\n",
    b"RMSG " + b" ".join([b"q"] * 40) + b" 1\r\na\r\n",    # more tokens than the fast path takes
    b"INFO {}\r\nRMSG $G foo 1\r\na\r\n",
]


@pytest.mark.parametrize("data", HOSTILE_SERVER, ids=[f"h{i}" for i in range(len(HOSTILE_SERVER))])
@pytest.mark.parametrize("cfg", [dict(kind=k) for k in KINDS] + [
    dict(kind="ROUTER", account=b"ACC"), dict(kind="LEAF", max_payload=64), dict(kind="ROUTER", awaiting=True),
    dict(kind="ROUTER", halt_on_info=True), dict(kind="GATEWAY", max_control_line=2)], ids=str)
def test_server_hostile_cases(data, cfg):
    same_both_lanes(data, *server_makers(**cfg), every_cut=len(data) < 400)


def test_pin_and_settings_changed_between_reads():
    makers = server_makers("ROUTER")
    outs = []
    for make in makers:
        rec, p = make()
        p.feed(b"RMSG $G foo 1\r\na\r\n")
        p.pin(b"ACC")
        p.feed(b"RMSG foo 1\r\na\r\nLMSG o foo 0 1\r\nb\r\n")
        p.pin(None)
        p.max_payload = 1
        try:
            p.feed(b"RMSG $G foo 1\r\na\r\nRMSG $G foo 2\r\nab\r\n")
        except ProtocolError as e:
            rec.calls.append((e.client_error, e.detail, e.reason))
        outs.append(rec.calls)
    assert outs[0] == outs[1] and len(outs[0]) == 5


# ==== the frame builders =====================================================================================

bname = st.binary(min_size=0, max_size=6)
opt = st.none() | bname
qs = st.sampled_from([(), [], None]) | st.lists(bname, max_size=3) | st.lists(bname, max_size=3).map(tuple)
num = st.integers(0, 10 ** 12) | st.sampled_from([0, 9, 10, 99, 100])


@settings(max_examples=300, deadline=None)
@given(acc=opt, subj=bname, reply=opt, queues=qs, hdr=num | st.integers(-3, -1), size=num, origin=bname)
def test_frame_builders_same_bytes(acc, subj, reply, queues, hdr, size, origin):
    pw, cw = parser_class("pure", "wire"), parser_class("compiled", "wire")
    cases = [
        ("rmsg_head", (acc, subj, reply, queues, size)),
        ("lmsg_head", (origin, acc, subj, reply, queues, hdr, size)),
        ("leaf_msg_head", (subj, reply, queues, size)),
        ("frame", (subj, origin)),
    ]
    if hdr >= 0:
        cases += [("hmsg_head", (acc, subj, reply, queues, hdr, size)),
                  ("leaf_hmsg_head", (subj, reply, queues, hdr, size))]
    for fn, args in cases:
        assert getattr(pw, fn)(*args) == getattr(cw, fn)(*args), (fn, args)


def test_frame_builders_other_types_go_to_the_reference():
    pw, cw = parser_class("pure", "wire"), parser_class("compiled", "wire")
    args = (bytearray(b"A"), memoryview(b"s"), b"r", [b"q"], 5)
    assert pw.rmsg_head(*args) == cw.rmsg_head(*args) == b"RMSG A s + r q 5\r\n"
    assert cw.hmsg_head(b"A", b"s", None, (), 2, 10 ** 16) == pw.hmsg_head(b"A", b"s", None, (), 2, 10 ** 16)
    assert cw.frame(bytearray(b"H "), b"x") == pw.frame(bytearray(b"H "), b"x")
    for name_ in pw.__all__:  # the compiled module stands in for the whole pure one
        assert hasattr(cw, name_), name_


# ==== limits, exactly at and around them ======================================================================

@pytest.mark.parametrize("mcl", [8, 13])
def test_client_limits_at_the_boundary(mcl):
    """Control lines and payloads one byte under, at and over max_control_line / max_payload."""
    makers = client_makers(max_payload=mcl, max_control_line=mcl)
    for n in range(1, mcl + 4):
        s = b"s" * n
        for data in (b"PUB " + s + b" 1\r\nx\r\n", b"PUB a " + s + b" 1\r\nx\r\n", b"SUB " + s + b" 1\r\n",
                     b"SUB a " + s + b" 1\r\n", b"UNSUB " + s + b"\r\n", b"UNSUB " + s + b" 2\r\n",
                     b"HPUB " + s + b" 0 1\r\nx\r\n", b"HPUB a " + s + b" 0 1\r\nx\r\n",
                     b"PUB a %d\r\n%b\r\n" % (n, s), b"HPUB a %d %d\r\n%b\r\n" % (n, n, s),
                     b"HPUB a 1 %d\r\n%b\r\n" % (n, s)):
            same_both_lanes(data + b"PING\r\n", *makers)


@pytest.mark.parametrize("kind", KINDS)
def test_server_limits_at_the_boundary(kind):
    """16 x max_control_line for server connections, and a leaf's max_payload, at the boundary."""
    makers = server_makers(kind, max_control_line=2, max_payload=20 if kind == "LEAF" else None)
    for n in range(20, 40):
        s = b"s" * n
        for data in (b"RMSG $G " + s + b" 1\r\nx\r\n", b"RMSG " + s + b" 1\r\nx\r\n",
                     b"HMSG $G " + s + b" 0 1\r\nx\r\n", b"LMSG o $G " + s + b" 0 1\r\nx\r\n",
                     b"RMSG $G a %d\r\n%b\r\n" % (n - 20, s[:n - 20]),
                     b"HMSG a %d %d\r\n%b\r\n" % (n - 20, n - 20, s[:n - 20])):
            same_both_lanes(data + b"PING\r\n", *makers)
