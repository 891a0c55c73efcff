"""Hostile JetStream API request bodies: answered as nats-server answers them, never with Python's text.

Differential: the same requests go to Rillet (in process, so its log can be read) and to nats-server 2.15;
the answers are compared after removing what must differ (timestamps, server ids, the cluster block...).
Each case also names the error code nats-server gives, so Rillet is still checked when the Go binary is
missing. Plus unit tests of the pieces: the Go JSON codec's depth limit and number rules, the UTF-8 rules
of decoding and encoding.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import urllib.request

import pytest

import nats
from rillet.gocompat import gojson
from rillet.gocompat import jsoncodec as J
from rillet.jetstream.api import types as A
from tests.difftarget import go_server, rillet_server
from tests.helpers import free_port

GO = shutil.which("nats-server")

# Python's exception texts that must never reach a client
PYTHON_TEXTS = ("Traceback", "invalid literal for int", "maximum recursion depth", "codec can't",
                "object has no attribute", "is not iterable", "not subscriptable", "NoneType", "Expecting value",
                "Extra data", "line 1 column", "unsupported operand", "argument out of range", "object is not")

CONF = """listen: 127.0.0.1:{port}
jetstream { store_dir: "%s" }
http: 127.0.0.1:%d
"""

# (subject after $JS.API., body, nats-server's err_code or 0 for a success)
CASES: list[tuple[str, bytes, int]] = [
    ("STREAM.MSG.GET.S", b'{"seq":"abc"}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1.5}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":-1}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":-0}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":18446744073709551616}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1,"batch":1.5}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1,"bogus":1}', 10025),
    ("STREAM.MSG.GET.S", b'[1]', 10025),
    ("STREAM.MSG.GET.S", b'"x"', 10025),
    ("STREAM.MSG.GET.S", b'null', 10003),
    ("STREAM.MSG.GET.S", b'', 10003),
    ("STREAM.MSG.GET.S", b'{}', 10003),
    ("STREAM.MSG.GET.S", b'{"seq":1}{"seq":2}', 0),
    ("STREAM.MSG.GET.S", b'{"seq":2} null', 0),
    ("STREAM.MSG.GET.S", b'{"seq":1} x', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":"abc"} x', 10025),
    ("STREAM.MSG.GET.S", b'{"SEQ":2}', 0),
    ("STREAM.MSG.GET.S", b'{"last_by_subj":5}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1,"start_time":"bad"}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1,"up_to_time":5}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1,"multi_last":"a"}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1,"no_hdr":1}', 10025),
    ("STREAM.MSG.GET.S", b'{"seq":1,"last_by_subj":"\xff"}', 10003),
    ("STREAM.MSG.GET.S", b'{"last_by_subj":"s.1","batch":2}', 10003),
    ("STREAM.MSG.GET.S", b'{"seq":1,"start_time":"2020-01-01T00:00:00Z"}', 10003),
    ("STREAM.MSG.GET.S", b'{"start_time":"2020-01-01T00:00:00Z","next_by_subj":"s.2"}', 0),
    ("STREAM.MSG.GET.S", b'{"seq":' + b'[' * 2000 + b']' * 2000 + b'}', 10025),
    ("STREAM.MSG.GET.S", b'[' * 20000, 10025),
    ("STREAM.MSG.GET.NOPE", b'{"seq":"x"}', 10025),
    ("STREAM.INFO.S", b'[' * 10001 + b']' * 10001, 10025),
    ("STREAM.INFO.S", b'{"x":' * 5000 + b'1' + b'}' * 5000, 10025),
    ("STREAM.INFO.S", b'{"offset":"x"}', 10025),
    ("STREAM.INFO.S", b'{"deleted_details":"yes"}', 10025),
    ("STREAM.INFO.S", b'{"subjects_filter":5}', 10025),
    ("STREAM.INFO.S", b'[1]', 10025),
    ("STREAM.NAMES", b'{"offset":1.5}', 10025),
    ("STREAM.NAMES", b'{"subject":1}', 10025),
    ("STREAM.NAMES", b'{"offset":-5}', 0),
    ("STREAM.NAMES", b'{"offset":99}', 0),
    ("STREAM.NAMES", b'[1]', 10025),
    ("STREAM.LIST", b'{"offset":"1"}', 10025),
    ("STREAM.PURGE.S", b'{"seq":18446744073709551616}', 10025),
    ("STREAM.PURGE.S", b'{"keep":-1}', 10025),
    ("STREAM.PURGE.S", b'{"filter":1}', 10025),
    ("STREAM.PURGE.S", b'{"seq":1.0}', 10025),
    ("STREAM.PURGE.S", b'[1]', 10025),
    ("STREAM.PURGE.S", b'{"seq":5,"keep":1}', 10003),
    ("STREAM.PURGE.NOPE", b'{"seq":"x"}', 10025),
    ("STREAM.MSG.DELETE.S", b'{"seq":"1"}', 10025),
    ("STREAM.MSG.DELETE.S", b'{"seq":99,"no_erase":"x"}', 10025),
    ("STREAM.MSG.DELETE.S", b'{"seq":-3}', 10025),
    ("STREAM.MSG.DELETE.S", b'[1]', 10025),
    ("STREAM.MSG.DELETE.S", b'{}', 10003),
    ("STREAM.MSG.DELETE.S", b'{"seq":0}', 10057),
    ("STREAM.MSG.DELETE.S", b'null', 10057),
    ("STREAM.MSG.DELETE.NOPE", b'', 10003),
    ("STREAM.DELETE.NOPE", b'{"x":1}', 10038),
    ("STREAM.DELETE.S", b'null', 10038),
    ("CONSUMER.INFO.S.C", b'{"x":', 10038),
    ("CONSUMER.DELETE.S.NOPE", b'[', 10038),
    ("CONSUMER.NAMES.S", b'{"offset":"x"}', 10025),
    ("CONSUMER.NAMES.S", b'[1,2]', 10025),
    ("CONSUMER.NAMES.S", b'{"offset":1.5}', 10025),
    ("CONSUMER.LIST.S", b'{"offset":"1"}', 10025),
    ("CONSUMER.LIST.NOPE", b'{"offset":"1"}', 10025),
    ("CONSUMER.PAUSE.S.C", b'{"pause_until":5}', 10025),
    ("CONSUMER.PAUSE.S.C", b'{"pause_until":"x"}', 10025),
    ("CONSUMER.PAUSE.S.C", b'[1]', 10025),
    ("CONSUMER.PAUSE.S.NOPE", b'{"pause_until":"x"}', 10025),
    ("CONSUMER.UNPIN.S.C", b'{"group":5}', 10025),
    ("CONSUMER.UNPIN.S.C", b'[1]', 10025),
    ("CONSUMER.UNPIN.S.C", b'{"group":"g","x":1}', 10160),
    ("CONSUMER.CREATE.S", b'{"stream_name":"S","config":{"max_deliver":1.5}}', 10025),
    ("STREAM.CREATE.Y", b'{"name":"Y","subjects":["y"],"max_msgs":"\xff"}', 10025),
    ("STREAM.SNAPSHOT.S", b'{"deliver_subject":1}', 10025),
    ("STREAM.SNAPSHOT.S", b'{"deliver_subject":"x","chunk_size":"big"}', 10025),
    ("STREAM.SNAPSHOT.S", b'{"deliver_subject":"x","window_size":"a"}', 10025),
    ("STREAM.SNAPSHOT.S", b'{"deliver_subject":"x","jsck":"a"}', 10025),
    ("STREAM.SNAPSHOT.S", b'{"deliver_subject":"x","chunk_size":-5,"bogus":1}', 10025),
    ("STREAM.SNAPSHOT.S", b'[', 10025),
    ("STREAM.SNAPSHOT.S", b'{}', 10003),
    ("STREAM.RESTORE.T", b'{"config":5}', 10025),
    ("STREAM.RESTORE.T", b'{"config":{"name":"T"},"state":"x"}', 10025),
    ("STREAM.RESTORE.T", b'{"config":{"name":"T"},"state":{"messages":-1}}', 10025),
    ("STREAM.RESTORE.T", b'{"config":{"name":"T"},"state":{"first_ts":"x"}}', 10025),
    ("STREAM.RESTORE.T", b'{"config":{"name":"T"},"state":{"lost":{"msgs":[-1]}}}', 10025),
    ("STREAM.RESTORE.T", b'{"config":{"name":"T"},"state":{"zzz":1}}', 10025),
    ("STREAM.RESTORE.T", b'{}', 10003),
    ("STREAM.RESTORE.V", b'{"config":{"name":"W"}}', 10056),
    ("CONSUMER.RESET.S.C", b'[', 10025),
    ("CONSUMER.RESET.S.C", b'{"seq":1} 5', 10025),
    ("CONSUMER.RESET.S.C", b'{"seq":3} {"seq":4}', 10025),
    ("CONSUMER.RESET.S.C", b'{"seq":1.5}', 10025),
]


def _norm(d: dict) -> dict:
    """What may differ between two servers answering the same request: times, ids, the stream infos'
    server-specific parts (compared elsewhere)."""
    for k in ("ts", "created", "cluster", "config", "state", "streams", "consumers"):
        if k in d and not (k in ("streams", "consumers") and not d[k]):
            d[k] = "<...>"
    if isinstance(d.get("message"), dict):
        d["message"].pop("time", None)
    if str(d.get("deliver_subject", "")).startswith("$JS.SNAPSHOT.RESTORE."):
        d["deliver_subject"] = "<restore subject>"
    return d


async def _transcript(url: str) -> list:
    nc = await nats.connect(url)
    try:
        await nc.request("$JS.API.STREAM.CREATE.S", json.dumps({"name": "S", "subjects": ["s.>"]}).encode())
        await nc.request("$JS.API.CONSUMER.CREATE.S.C", json.dumps(
            {"stream_name": "S", "config": {"name": "C", "ack_policy": "explicit"}}).encode())
        for i in range(3):
            await nc.request(f"s.{i}", b"x")
        out = []
        for subj, body, _ in CASES:
            m = await nc.request("$JS.API." + subj, body, timeout=5)
            out.append(json.loads(m.data))
        return out
    finally:
        await nc.close()


def _assert_no_python(text: str) -> None:
    for t in PYTHON_TEXTS:
        assert t not in text, f"{t!r} in {text[:500]}"


async def test_hostile_bodies_answered_as_nats_server():
    port = free_port()
    async with rillet_server((CONF % (tempfile.mkdtemp(), free_port())).replace("{port}", str(port))) as srv:
        mine = await _transcript(srv.client_url)
        log = srv._test_log.getvalue()
    _assert_no_python(log)
    assert "JetStream API error" not in log
    for (subj, body, code), got in zip(CASES, mine):
        _assert_no_python(json.dumps(got))
        err = (got.get("error") or {}).get("err_code", 0)
        assert err == code, (subj, body[:80], got)
    if GO is None:
        pytest.skip("nats-server not on PATH: Rillet checked against the recorded codes only")
    async with go_server((CONF % (tempfile.mkdtemp(), free_port())).replace("{port}", str(free_port()))) as g:
        theirs = await _transcript(g.client_url)
    diffs = [(subj, body[:80], _norm(a), _norm(b)) for (subj, body, _), a, b in zip(CASES, mine, theirs)
             if _norm(dict(a)) != _norm(dict(b))]
    assert not diffs, "\n".join(map(repr, diffs))


# ---- subjects that are not UTF-8 ------------------------------------------------------------------


def _http(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def _utf8_transcript(url: str, http_port: int) -> dict:
    out: dict = {}
    host, port = url.replace("nats://", "").split(":")
    r, w = await asyncio.open_connection(host, int(port))
    await r.readline()
    w.write(b'CONNECT {"verbose":false,"name":"n\xffame","headers":true}\r\nSUB bad.\xff.x 1\r\nPING\r\n')
    await w.drain()
    out["connect"] = await asyncio.wait_for(r.readline(), 5)
    nc = await nats.connect(url)
    try:
        await nc.request("$JS.API.STREAM.CREATE.S", json.dumps({"name": "S", "subjects": ["s.>"]}).encode())
        await nc.request("$JS.API.STREAM.CREATE.KV_b", json.dumps(
            {"name": "KV_b", "subjects": ["$KV.b.>"], "max_msgs_per_subject": 1, "allow_rollup_hdrs": True,
             "deny_delete": True, "allow_direct": True}).encode())
        w.write(b'PUB s.\xfe\xff 2\r\nhi\r\nPUB $KV.b.k\xff 2\r\nv1\r\nPUB bad.\xff.x 1\r\nz\r\nPING\r\n')
        await w.drain()
        got = b""
        while b"PONG" not in got:
            got += await asyncio.wait_for(r.read(4096), 5)
        out["delivered"] = got  # byte for byte, as sent
        # (nats-server stores a JetStream publish after it answered the PING: wait until both streams hold theirs)
        for name in ("S", "KV_b"):
            for _ in range(100):
                info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
                if (info.get("state") or {}).get("messages"):
                    break
                await asyncio.sleep(0.05)
        for subj, body in [("STREAM.MSG.GET.S", {"seq": 1}), ("STREAM.INFO.KV_b", {"subjects_filter": ">"}),
                           ("STREAM.INFO.S", {"subjects_filter": "s.>"}),
                           ("STREAM.MSG.GET.KV_b", {"last_by_subj": "$KV.b.>"})]:
            m = await nc.request("$JS.API." + subj, json.dumps(body).encode(), timeout=5)
            d = json.loads(m.data)
            out[subj] = (d.get("error"), (d.get("state") or {}).get("subjects"), (d.get("message") or {}).get("subject"))
        m = await nc.request("$JS.API.DIRECT.GET.KV_b", b'{"seq":1}', timeout=5)
        out["direct"] = (m.data, m.headers.get("Nats-Subject"))
        loop = asyncio.get_running_loop()
        for path in ["/connz?subs=1", "/connz?subs=detail", "/subsz?subs=1"]:
            code, body = await loop.run_in_executor(None, _http, http_port, path)
            doc = json.loads(body)
            conns = [c for c in doc.get("connections", []) if c.get("name", "").startswith("n")]
            if path.startswith("/subsz"):
                out[path] = (code, sorted(s["subject"] for s in doc["subscriptions_list"] if s["subject"].startswith("bad.")))
            elif path.endswith("detail"):
                out[path] = (code, [c["name"] for c in conns], [s["subject"] for c in conns for s in c["subscriptions_list_detail"]])
            else:
                out[path] = (code, [c["name"] for c in conns], [s for c in conns for s in c["subscriptions_list"]])
    finally:
        w.close()
        await nc.close()
    return out


async def test_subjects_not_utf8_answered_as_nats_server():
    hp = free_port()
    async with rillet_server((CONF % (tempfile.mkdtemp(), hp)).replace("{port}", str(free_port()))) as srv:
        mine = await _utf8_transcript(srv.client_url, hp)
        log = srv._test_log.getvalue()
    _assert_no_python(log)
    assert mine["connect"] == b"PONG\r\n"
    assert mine["delivered"].startswith(b"MSG bad.\xff.x 1 1\r\nz\r\n")
    assert mine["STREAM.MSG.GET.S"] == (None, None, "s.\ufffd\ufffd")
    assert mine["STREAM.INFO.KV_b"] == (None, {"$KV.b.k\ufffd": 1}, None)
    assert mine["/connz?subs=1"] == (200, ["n\ufffdame"], ["bad.\ufffd.x"])
    assert mine["/subsz?subs=1"] == (200, ["bad.\ufffd.x"])
    if GO is None:
        pytest.skip("nats-server not on PATH: Rillet checked against the recorded answers only")
    hp = free_port()
    async with go_server((CONF % (tempfile.mkdtemp(), hp)).replace("{port}", str(free_port()))) as g:
        theirs = await _utf8_transcript(g.client_url, hp)
    assert mine == theirs


# ---- the pieces ------------------------------------------------------------------------------------


def test_codec_depth_limit_is_gos_and_not_pythons():
    ok = b'[' * J.MAX_DEPTH + b']' * J.MAX_DEPTH
    assert J.parse_json(ok) is not None  # far beyond Python's recursion limit
    with pytest.raises(J.GoJSONError, match=r"^exceeded max depth at offset 10001$"):
        J.parse_json(b'[' * (J.MAX_DEPTH + 1) + b']' * (J.MAX_DEPTH + 1))
    with pytest.raises(J.GoJSONError, match="exceeded max depth"):
        J.go_decode(b'{"a":' * 10001, A.JSApiStreamInfoRequest)
    with pytest.raises(J.GoJSONError, match='unknown field "x"'):
        J.go_decode(b'{"x":' * 5000 + b'1' + b'}' * 5000, A.JSApiStreamInfoRequest)


@pytest.mark.parametrize("body,err", [
    (b'{"seq":-0}', "cannot unmarshal number -0 into Go struct field JSApiMsgGetRequest.seq of type uint64"),
    (b'{"seq":1e2}', "cannot unmarshal number 1e2 into Go struct field JSApiMsgGetRequest.seq of type uint64"),
    (b'{"seq":18446744073709551615}', None),
    (b'{"batch":9223372036854775808}', "cannot unmarshal number 9223372036854775808 into Go struct field "
                                       "JSApiMsgGetRequest.batch of type int"),
    (b'{"batch":-9223372036854775808}', None),
])
def test_codec_integer_rules(body, err):
    if err is None:
        J.go_decode(body, A.JSApiMsgGetRequest)
    else:
        with pytest.raises(J.GoJSONError, match=err):
            J.go_decode(body, A.JSApiMsgGetRequest)


def test_utf8_rules():
    # one U+FFFD per byte that is not UTF-8 (Go), not per maximal subpart (Python's "replace")
    assert J.go_utf8(b"a\xe2\x80b") == "a\ufffd\ufffdb".encode()
    assert J.go_utf8(b"ok \xc3\xa9") == b"ok \xc3\xa9"
    assert J.go_decode(b'{"last_by_subj":"k\xe2\x80"}', A.JSApiMsgGetRequest).last_by_subj == "k\ufffd\ufffd"
    text = b"bad.\xff.x".decode("utf-8", "surrogateescape")
    assert gojson.dumps({"s": [text], text: 1}) == '{"s":["bad.\ufffd.x"],"bad.\ufffd.x":1}'.encode()


# ---- the same bodies through a cluster (meta leader, stream leaders) -------------------------------------

from tests.jscluster_support import cl  # noqa: E402,F401  (the 3-server cluster fixture)

CLUSTER_CASES = [
    ("STREAM.NAMES", b'{"offset":"x"}', 10025), ("STREAM.NAMES", b'{"offset":-3}', 0),
    ("STREAM.LIST", b'[' * 20000, 10025), ("STREAM.LIST", b'{"subject":5}', 10025),
    ("CONSUMER.NAMES.R", b'{"offset":1.5}', 10025), ("CONSUMER.LIST.R", b'{"offset":"1"}', 10025),
    ("STREAM.INFO.R", b'{"offset":"x"}', 10025), ("STREAM.INFO.R", b'{"x":' * 12000, 10025),
    ("STREAM.MSG.GET.R", b'{"seq":1.5}', 10025), ("STREAM.MSG.GET.R", b'{"seq":"abc"}', 10025),
    ("STREAM.PURGE.R", b'{"keep":-1}', 10025), ("STREAM.PURGE.R", b'{"seq":18446744073709551616}', 10025),
    ("STREAM.MSG.DELETE.R", b'{"seq":-3}', 10025),
    ("STREAM.LEADER.STEPDOWN.R", b'[' * 20000, 10025), ("STREAM.LEADER.STEPDOWN.R", b'{"placement":', 10025),
    ("STREAM.PEER.REMOVE.R", b'{"peer":5}', 10025),
    ("STREAM.RESTORE.Q", b'{"config":{"name":"Q"},"state":{"messages":-1}}', 10025),
    ("CONSUMER.CREATE.R", b'{"stream_name":"R","config":{"direct":' + b'[' * 20000 + b'}}', 10025),
]


async def test_hostile_bodies_in_a_cluster(cl):  # noqa: F811
    servers, nc, js = cl
    await js.add_stream(name="R", subjects=["r.>"], num_replicas=3)
    await js.publish("r.1", b"x")
    for subj, body, code in CLUSTER_CASES:
        try:
            m = await nc.request("$JS.API." + subj, body, timeout=10)
        except nats.errors.TimeoutError:
            raise AssertionError(f"no answer to {subj} {body[:80]!r}") from None
        _assert_no_python(m.data.decode("utf-8", "replace"))
        got = json.loads(m.data)
        assert (got.get("error") or {}).get("err_code", 0) == code, (subj, body[:80], got)


# ---- monitor queries holding bytes that are not UTF-8 ----------------------------------------------------

MONITOR_PATHS = ["/connz?acc=%FF", "/connz?user=%FF&auth=1", "/connz?subs=1&filter_subject=%FF",
                 "/subsz?subs=1&test=bad.%FF.x", "/subsz?test=%FF", "/accountz?acc=%FF", "/jsz?acc=%FF",
                 "/connz?sort=%FF", "/connz?state=%FF", "/leafz?acc=%FF", "/accstatz?accs=%FF",
                 "/healthz?js-enabled-only=%FF", "/varz?%FF=1", "/connz?cid=%FF", "/subsz?acc=%FF&subs=1",
                 "/connz?subs=%FF", "/%FF", "/connz?offset=99999999999999999999"]


async def _monitor_transcript(url: str, http_port: int) -> dict:
    host, port = url.replace("nats://", "").split(":")
    r, w = await asyncio.open_connection(host, int(port))
    await r.readline()
    w.write(b'CONNECT {"verbose":false,"name":"n\xffame","user":"u\xff"}\r\nSUB bad.\xff.x 1\r\nPING\r\n')
    await w.drain()
    await asyncio.wait_for(r.readline(), 5)
    loop = asyncio.get_running_loop()
    out = {}
    try:
        for path in MONITOR_PATHS:
            code, body = await loop.run_in_executor(None, _http, http_port, path)
            # (a JSON document's content is compared by the monitor tests: here its status and that it parses)
            out[path] = (code, body if not body.startswith(b"{") else bool(json.loads(body)))
    finally:
        w.close()
    return out


async def test_monitor_queries_not_utf8_answered_as_nats_server():
    hp = free_port()
    async with rillet_server((CONF % (tempfile.mkdtemp(), hp)).replace("{port}", str(free_port()))) as srv:
        mine = await _monitor_transcript(srv.client_url, hp)
        log = srv._test_log.getvalue()
    _assert_no_python(log)
    assert mine["/connz?sort=%FF"] == (400, b"invalid sorting option: \xff")
    assert mine["/connz?subs=%FF"] == (400, b"Error decoding boolean for 'subs': strconv.ParseBool: "
                                            b'parsing "\\xff": invalid syntax')
    assert all(code in (200, 400, 404) for code, _ in mine.values()), mine
    if GO is None:
        pytest.skip("nats-server not on PATH: Rillet checked against the recorded answers only")
    hp = free_port()
    async with go_server((CONF % (tempfile.mkdtemp(), hp)).replace("{port}", str(free_port()))) as g:
        theirs = await _monitor_transcript(g.client_url, hp)
    assert mine == theirs


# ---- JSON a client puts in a message: a counter's sources header -------------------------------------------


async def _counter_transcript(url: str) -> list:
    nc = await nats.connect(url)
    try:
        await nc.request("$JS.API.STREAM.CREATE.C", json.dumps(
            {"name": "C", "subjects": ["c.>"], "allow_msg_counter": True}).encode())
        out: list = []
        for hdrs in [{"Nats-Incr": "1", "Nats-Counter-Sources": "[" * 5000},
                     {"Nats-Incr": "1", "Nats-Counter-Sources": '{"a":' * 3000 + "1" + "}" * 3000},
                     {"Nats-Incr": "1"}]:
            m = await nc.request("c.x", b"", headers=hdrs, timeout=5)
            out.append(json.loads(m.data))
        out.append(nc.is_connected)
        return out
    finally:
        await nc.close()


async def test_counter_sources_header_nested_beyond_pythons_limit():
    async with rillet_server(CONF.replace("http: 127.0.0.1:%d\n", "").replace("{port}", str(free_port()))
                             % tempfile.mkdtemp()) as srv:
        mine = await _counter_transcript(srv.client_url)
        log = srv._test_log.getvalue()
    _assert_no_python(log)
    assert mine[1]["error"]["err_code"] == 10172 and mine[-1] is True  # (the publisher's connection stays)
    if GO is None:
        pytest.skip("nats-server not on PATH")
    async with go_server(CONF.replace("http: 127.0.0.1:%d\n", "").replace("{port}", str(free_port()))
                         % tempfile.mkdtemp()) as g:
        theirs = await _counter_transcript(g.client_url)
    assert mine == theirs
