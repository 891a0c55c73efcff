"""The core client protocol, as nats-server speaks it.

Each expectation here was checked against the Go nats-server (run this file with
RILLET_TEST_TARGET=nats-server to repeat that check). Raw sockets are used where exact bytes matter,
nats-py where the behaviour a client library sees matters.
"""
from __future__ import annotations

import asyncio
import json
import re

import nats
import pytest
from nats.errors import NoRespondersError

from helpers import GO, TARGET, Closed, Msg, RawClient, parse_stream, serve, wait_log
from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES if TARGET == "rillet" else LANES[:1])
def _lane_under_test(request):
    """Every test of this module in both lanes (rillet.lane): the in-process server's client connections
    parse with the pure-Python parser, then with its compiled twin."""
    with use_lane(request.param, globals()):
        yield request.param

MB = 1024 * 1024


@pytest.fixture
async def srv():
    async with serve() as s:
        yield s


# ---------------------------------------------------------------------------------------------------
# INFO and CONNECT


async def test_info_fields(srv):
    c = await RawClient.open(srv, connect=False)
    info = c.info
    assert re.fullmatch(r"N[A-Z2-7]{55}", info["server_id"]), info["server_id"]
    assert info["server_name"] == info["server_id"]  # no name configured: the id
    assert re.fullmatch(r"2\.\d+\.\d+(-\S+)?", info["version"])
    major, minor = map(int, info["version"].split(".")[:2])
    assert (major, minor) >= (2, 10)
    assert info["proto"] == 1
    assert info["host"] == "127.0.0.1"
    assert info["port"] == srv.port
    assert info["headers"] is True
    assert info["max_payload"] == MB
    assert isinstance(info["client_id"], int) and info["client_id"] > 0
    assert info["client_ip"] == "127.0.0.1"
    for absent in ("auth_required", "nonce", "tls_required", "tls_verify", "ldm"):
        assert absent not in info
    await c.close()


async def test_info_client_ids_differ(srv):
    a = await RawClient.open(srv, connect=False)
    b = await RawClient.open(srv, connect=False)
    assert a.info["client_id"] != b.info["client_id"]
    assert a.info["server_id"] == b.info["server_id"]
    await a.close()
    await b.close()


async def test_info_server_name_and_max_payload():
    async with serve(server_name="alpha", max_payload=2048) as s:
        c = await RawClient.open(s, connect=False)
        assert c.info["server_name"] == "alpha"
        assert c.info["server_id"] != "alpha"
        assert c.info["max_payload"] == 2048
        await c.close()


async def test_info_seen_by_nats_py(srv):
    nc = await nats.connect(srv.client_url)
    assert nc.connected_server_version.major == 2
    assert nc.max_payload == MB
    assert nc._server_info["headers"] is True
    await nc.close()


async def test_info_after_first_pong_has_connect_info(srv):
    # protocol 1 clients get an INFO right after the PONG that answers their first PING after CONNECT
    c = await RawClient.open(srv, protocol=1)
    c.send(b"PING\r\n")
    assert await c.readline() == b"PONG"
    line = await c.readline(timeout=1)
    assert line.startswith(b"INFO ")
    info = json.loads(line[5:])
    assert info["connect_info"] is True
    assert info["remote_account"] == "$G"
    assert info["server_id"] == c.info["server_id"]
    assert info["client_id"] == c.info["client_id"]
    # only once
    c.send(b"PING\r\n")
    assert await c.readline() == b"PONG"
    assert await c.read_for(0.1) == b""
    await c.close()


async def test_no_connect_info_for_protocol_0(srv):
    c = await RawClient.open(srv, protocol=0)
    c.send(b"PING\r\n")
    assert await c.readline() == b"PONG"
    assert await c.read_for(0.1) == b""
    await c.close()


async def test_connect_defaults_are_verbose_and_pedantic(srv):
    # nats-server starts from {verbose: true, pedantic: true, echo: true}; CONNECT {} keeps those.
    c = await RawClient.open(srv, connect=False)
    c.send(b"CONNECT {}\r\n")
    assert await c.ping() == b"+OK\r\n"
    c.send(b"SUB foo.. 1\r\n")
    assert await c.ping() == b"-ERR 'Invalid Subject'\r\n"
    await c.close()


async def test_verbose_ok_after_each_op(srv):
    c = await RawClient.open(srv, connect=False)
    c.send(b'CONNECT {"verbose":true,"pedantic":false}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\n'
           b'PUB foo 2\r\nhi\r\nPING\r\n')
    # the +OK for a PUB comes before the message it delivers
    assert await c.read_until(b"PONG\r\n") == (b"+OK\r\n+OK\r\n+OK\r\nMSG foo 1 2\r\nhi\r\n+OK\r\n+OK\r\nPONG\r\n")
    await c.close()


async def test_verbose_false_sends_no_ok(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\n")
    assert await c.ping() == b"MSG foo 1 2\r\nhi\r\n"
    await c.close()


async def test_connect_with_unknown_fields_is_accepted(srv):
    c = await RawClient.open(srv, connect=False)
    c.send(b'CONNECT {"verbose":false,"pedantic":false,"lang":"x","version":"9","whatever":[1,2],"name":"n"}\r\n')
    assert await c.ping() == b""
    await c.close()


async def test_connect_invalid_json_closes(srv):
    c = await RawClient.open(srv, connect=False)
    c.send(b"CONNECT {not json\r\nPING\r\n")
    data = await c.read_until_closed()
    assert b"PONG" not in data
    await c.close()


# ---------------------------------------------------------------------------------------------------
# Protocol errors


async def test_pedantic_invalid_publish_subject(srv):
    c = await RawClient.open(srv, pedantic=True)
    for subject in ("foo.*", "foo.>", "foo..bar", ">"):
        c.pub(subject, b"hi")
        assert await c.ping() == b"-ERR 'Invalid Publish Subject'\r\n", subject
    # not fatal
    c.pub("foo.ok", b"hi")
    assert await c.ping() == b""
    await c.close()


async def test_pedantic_verbose_invalid_publish_still_acknowledged(srv):
    c = await RawClient.open(srv, pedantic=True, verbose=True)
    assert await c.ping() == b"+OK\r\n"
    c.pub("foo.*", b"hi")
    assert await c.ping() == b"-ERR 'Invalid Publish Subject'\r\n+OK\r\n"
    await c.close()


async def test_pedantic_invalid_publish_is_still_routed(srv):
    # nats-server reports the bad subject but goes on processing the message.
    sub = await RawClient.open(srv)
    sub.sub(">", 1)
    assert await sub.ping() == b""
    c = await RawClient.open(srv, pedantic=True)
    c.pub("foo.*", b"hi")
    assert await c.ping() == b"-ERR 'Invalid Publish Subject'\r\n"
    assert await sub.ping() == b"MSG foo.* 1 2\r\nhi\r\n"
    await c.close()
    await sub.close()


async def test_wildcard_publish_without_pedantic_matches_tokens_literally(srv):
    sub = await RawClient.open(srv)
    sub.send(b"SUB foo.* 1\r\nSUB foo.bar 2\r\nSUB > 3\r\n")
    assert await sub.ping() == b""
    c = await RawClient.open(srv)
    c.pub("foo.*", b"hi")
    assert await c.ping() == b""
    items = parse_stream(await sub.ping())
    assert sorted(m.sid for m in items) == ["1", "3"]
    assert all(m.subject == "foo.*" for m in items)
    await c.close()
    await sub.close()


@pytest.mark.parametrize("line", [b"SUB foo.. 1", b"SUB foo.>.a 2", b"SUB .foo 3", b"SUB foo. 4",
                                  b"SUB foo..bar q 5"])
async def test_sub_invalid_subject(srv, line):
    c = await RawClient.open(srv)
    c.send(line + b"\r\n")
    assert await c.ping() == b"-ERR 'Invalid Subject'\r\n"
    # the connection stays usable and the bad subscription does not exist
    c.send(b"SUB ok 9\r\nPUB ok 1\r\nx\r\n")
    assert await c.ping() == b"MSG ok 9 1\r\nx\r\n"
    await c.close()


@pytest.mark.parametrize("line", [b"FOO bar", b"PUBX foo 1", b"SUBSCRIBE foo 1", b"XYZ"])
async def test_unknown_operation_closes(srv, line):
    c = await RawClient.open(srv)
    assert await c.ping() == b""
    c.send(line + b"\r\nPING\r\n")
    assert await c.read_until_closed() == b"-ERR 'Unknown Protocol Operation'\r\n"


async def test_unknown_operation_before_connect_closes(srv):
    c = await RawClient.open(srv, connect=False)
    c.send(b"HELLO\r\n")
    assert await c.read_until_closed() == b"-ERR 'Unknown Protocol Operation'\r\n"


async def test_max_payload_violation_closes(srv):
    c = await RawClient.open(srv)
    c.send(f"PUB foo {MB + 1}\r\n".encode())
    assert await c.read_until_closed() == b"-ERR 'Maximum Payload Violation'\r\n"


async def test_max_payload_violation_hpub_closes(srv):
    c = await RawClient.open(srv, headers=True)
    c.send(f"HPUB foo 12 {MB + 1}\r\n".encode())
    assert await c.read_until_closed() == b"-ERR 'Maximum Payload Violation'\r\n"


async def test_hpub_without_headers_in_connect_closes_without_err(srv):
    # nats-server: "message headers not supported" is logged, the client gets no -ERR
    c = await RawClient.open(srv, headers=False)
    c.hpub("foo", b"NATS/1.0\r\n\r\n", b"hi")
    c.send(b"PING\r\n")
    assert await c.read_until_closed() == b""


async def test_no_responders_requires_headers(srv):
    c = await RawClient.open(srv, headers=False, no_responders=True)
    c.send(b"PING\r\n")
    assert await c.read_until_closed() == b"-ERR 'no responders requires headers support'\r\n"


async def test_bad_pub_size_closes(srv):
    c = await RawClient.open(srv)
    c.send(b"PUB foo abc\r\nPING\r\n")
    data = await c.read_until_closed()
    assert b"PONG" not in data


# ---------------------------------------------------------------------------------------------------
# Delivery: wildcards, queue groups, echo, auto-unsubscribe


async def test_wildcards(srv):
    nc = await nats.connect(srv.client_url)
    got: dict[str, list[str]] = {}

    async def subscribe(pattern: str) -> None:
        got[pattern] = []

        async def cb(msg):
            got[pattern].append(msg.subject)
        await nc.subscribe(pattern, cb=cb)

    for p in ("a.*", "a.>", "*.b", ">", "a.*.c", "*", "a.b.c"):
        await subscribe(p)
    pub = await nats.connect(srv.client_url)
    for s in ("a", "a.b", "a.b.c", "x.b", "a.x.c", "a.b.c.d"):
        await pub.publish(s, b"")
    await pub.flush()
    await asyncio.sleep(0.05)
    await nc.flush()
    for _ in range(50):
        if len(got[">"]) == 6:
            break
        await asyncio.sleep(0.02)
    assert got["a.*"] == ["a.b"]
    assert got["a.>"] == ["a.b", "a.b.c", "a.x.c", "a.b.c.d"]
    assert got["*.b"] == ["a.b", "x.b"]
    assert got[">"] == ["a", "a.b", "a.b.c", "x.b", "a.x.c", "a.b.c.d"]
    assert got["a.*.c"] == ["a.b.c", "a.x.c"]
    assert got["*"] == ["a"]
    assert got["a.b.c"] == ["a.b.c"]
    await nc.close()
    await pub.close()


async def test_one_connection_overlapping_subs_get_one_copy_each(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB foo.bar 1\r\nSUB foo.* 2\r\nSUB foo.> 3\r\nSUB foo.bar 4\r\nPUB foo.bar 1\r\nx\r\n")
    items = parse_stream(await c.ping())
    assert sorted(m.sid for m in items) == ["1", "2", "3", "4"]
    await c.close()


async def test_queue_groups(srv):
    n = 300
    members: dict[str, list[list[bytes]]] = {"A": [[], [], []], "B": [[], []]}
    plain: list[bytes] = []
    conns = []
    for group, boxes in members.items():
        for box in boxes:
            nc = await nats.connect(srv.client_url)
            conns.append(nc)

            async def cb(msg, box=box):
                box.append(msg.data)
            await nc.subscribe("work", queue=group, cb=cb)
    nc = await nats.connect(srv.client_url)
    conns.append(nc)

    async def plain_cb(msg):
        plain.append(msg.data)
    await nc.subscribe("work", cb=plain_cb)
    for c in conns:
        await c.flush()

    pub = await nats.connect(srv.client_url)
    for i in range(n):
        await pub.publish("work", str(i).encode())
    await pub.flush()

    def total(group: str) -> int:
        return sum(len(b) for b in members[group])
    for _ in range(200):
        if total("A") == n and total("B") == n and len(plain) == n:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    expected = sorted(str(i).encode() for i in range(n))
    assert sorted(plain) == expected
    for group, boxes in members.items():
        everything = [m for b in boxes for m in b]
        assert sorted(everything) == expected, group  # each message exactly once per group
        for box in boxes:
            # spread over the members (expected n/len(boxes) each)
            assert len(box) >= n // len(boxes) // 3, (group, [len(b) for b in boxes])
    for c in conns + [pub]:
        await c.close()


async def test_queue_group_raw_one_member_per_message(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB q g 1\r\nSUB q g 2\r\nSUB q h 3\r\nSUB q 4\r\n")
    for _ in range(20):
        c.pub("q", b"x")
    items = parse_stream(await c.ping())
    sids = [m.sid for m in items]
    assert sids.count("1") + sids.count("2") == 20
    assert sids.count("3") == 20
    assert sids.count("4") == 20
    await c.close()


async def test_echo_false(srv):
    me = await nats.connect(srv.client_url, no_echo=True)
    other = await nats.connect(srv.client_url)
    mine: list[bytes] = []
    theirs: list[bytes] = []

    async def my_cb(msg):
        mine.append(msg.data)

    async def their_cb(msg):
        theirs.append(msg.data)
    await me.subscribe("e", cb=my_cb)
    await other.subscribe("e", cb=their_cb)
    await me.flush()
    await other.flush()
    for i in range(5):
        await me.publish("e", b"me%d" % i)
    await other.publish("e", b"other")
    await me.flush()
    await other.flush()
    for _ in range(100):
        if len(theirs) == 6 and mine:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    assert mine == [b"other"]
    assert sorted(theirs) == sorted([b"me0", b"me1", b"me2", b"me3", b"me4", b"other"])
    await me.close()
    await other.close()


async def test_echo_false_raw(srv):
    c = await RawClient.open(srv, echo=False)
    c.send(b"SUB e 1\r\nSUB e q 2\r\nPUB e 1\r\nx\r\n")
    assert await c.ping() == b""
    await c.close()


async def test_unsub_with_max(srv):
    sub = await RawClient.open(srv)
    sub.send(b"SUB m 1\r\nUNSUB 1 3\r\n")
    assert await sub.ping() == b""
    pub = await RawClient.open(srv)
    for i in range(10):
        pub.pub("m", str(i))
    assert await pub.ping() == b""
    items = parse_stream(await sub.ping())
    assert [m.payload for m in items] == [b"0", b"1", b"2"]
    for i in range(5):
        pub.pub("m", "again")
    assert await pub.ping() == b""
    assert await sub.ping() == b""
    await sub.close()
    await pub.close()


async def test_unsub_with_max_already_reached_removes_now(srv):
    sub = await RawClient.open(srv)
    sub.send(b"SUB m 1\r\nPUB m 1\r\na\r\nPUB m 1\r\nb\r\nUNSUB 1 2\r\nPUB m 1\r\nc\r\n")
    items = parse_stream(await sub.ping())
    assert [m.payload for m in items] == [b"a", b"b"]
    await sub.close()


async def test_unsub_immediately_and_unknown_sid(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB m 1\r\nUNSUB 1\r\nUNSUB 99\r\nPUB m 1\r\na\r\n")
    assert await c.ping() == b""
    await c.close()


async def test_queue_unsub_with_max(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB q g 1\r\nUNSUB 1 2\r\n")
    for _ in range(5):
        c.pub("q", "x")
    items = parse_stream(await c.ping())
    assert len(items) == 2
    await c.close()


async def test_nats_py_auto_unsubscribe(srv):
    nc = await nats.connect(srv.client_url)
    sub = await nc.subscribe("au")
    await sub.unsubscribe(limit=2)
    for i in range(4):
        await nc.publish("au", b"%d" % i)
    await nc.flush()
    m1 = await sub.next_msg(timeout=1)
    m2 = await sub.next_msg(timeout=1)
    assert (m1.data, m2.data) == (b"0", b"1")
    await nc.close()


# ---------------------------------------------------------------------------------------------------
# Request / reply, no responders


async def test_request_reply(srv):
    nc = await nats.connect(srv.client_url)

    async def handler(msg):
        await msg.respond(b"pong:" + msg.data)
    await nc.subscribe("svc", cb=handler)
    requester = await nats.connect(srv.client_url)
    for i in range(5):
        resp = await requester.request("svc", b"%d" % i, timeout=2)
        assert resp.data == b"pong:%d" % i
    await nc.close()
    await requester.close()


async def test_request_reply_raw(srv):
    svc = await RawClient.open(srv)
    svc.sub("svc", 1)
    assert await svc.ping() == b""
    req = await RawClient.open(srv)
    req.sub("_INBOX.r1", 7)
    req.pub("svc", b"q", reply="_INBOX.r1")
    assert await req.ping() == b""
    m = await svc.read_msg()
    assert (m.subject, m.sid, m.reply, m.payload) == ("svc", "1", "_INBOX.r1", b"q")
    svc.pub(m.reply, b"answer")
    assert await svc.ping() == b""
    assert await req.ping() == b"MSG _INBOX.r1 7 6\r\nanswer\r\n"
    await svc.close()
    await req.close()


async def test_no_responders_nats_py(srv):
    nc = await nats.connect(srv.client_url)
    with pytest.raises(NoRespondersError):
        await nc.request("nobody.home", b"hi", timeout=2)
    await nc.close()


async def test_no_responders_raw(srv):
    c = await RawClient.open(srv, headers=True, no_responders=True)
    c.send(b"SUB _INBOX.x 9\r\nPUB nobody _INBOX.x 2\r\nhi\r\n")
    c.hpub("nobody", b"NATS/1.0\r\n\r\n", reply="_INBOX.x")
    hdr = b"NATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n"
    one = b"HMSG _INBOX.x 9 %d %d\r\n%s\r\n" % (len(hdr), len(hdr), hdr)
    assert await c.ping() == one + one
    # without a reply subject, or with a subscriber, nothing comes back
    c.send(b"PUB nobody 2\r\nhi\r\nSUB somebody 3\r\nPUB somebody _INBOX.x 0\r\n\r\n")
    assert await c.ping() == b"MSG somebody 3 _INBOX.x 0\r\n\r\n"
    await c.close()


async def test_no_responders_not_requested(srv):
    c = await RawClient.open(srv, headers=True)
    c.send(b"SUB _INBOX.x 9\r\nPUB nobody _INBOX.x 2\r\nhi\r\n")
    assert await c.ping() == b""
    await c.close()


# ---------------------------------------------------------------------------------------------------
# Headers


UNUSUAL_HEADERS = (b"NATS/1.0 503 No Responders\r\nX-A: 1\r\nx-lower:  spaced value \r\nX-A: 2\r\n"
                   b"Empty:\r\nColon: a:b:c\r\n\r\n")


async def test_headers_passed_byte_for_byte(srv):
    h = await RawClient.open(srv, headers=True)
    h.sub("foo", 1)
    assert await h.ping() == b""
    p = await RawClient.open(srv, headers=True)
    p.hpub("foo", UNUSUAL_HEADERS, b"body", reply="r")
    p.hpub("foo", UNUSUAL_HEADERS)
    p.hpub("foo", b"NATS/1.0 408 Request Timeout\r\n\r\n", b"\r\n\x00\xff")
    p.hpub("foo", b"NATS/1.0\r\n\r\n", b"")
    assert await p.ping() == b""
    n = len(UNUSUAL_HEADERS)
    h408 = b"NATS/1.0 408 Request Timeout\r\n\r\n"
    expected = (b"HMSG foo 1 r %d %d\r\n%sbody\r\n" % (n, n + 4, UNUSUAL_HEADERS)
                + b"HMSG foo 1 %d %d\r\n%s\r\n" % (n, n, UNUSUAL_HEADERS)
                + b"HMSG foo 1 %d %d\r\n%s\r\n\x00\xff\r\n" % (len(h408), len(h408) + 4, h408)
                + b"HMSG foo 1 12 12\r\nNATS/1.0\r\n\r\n\r\n")
    assert await h.ping() == expected
    await h.close()
    await p.close()


async def test_subscriber_without_headers_gets_payload_only(srv):
    n = await RawClient.open(srv)  # no "headers": true
    n.sub("foo", 1)
    assert await n.ping() == b""
    p = await RawClient.open(srv, headers=True)
    p.hpub("foo", UNUSUAL_HEADERS, b"body", reply="r")
    p.hpub("foo", UNUSUAL_HEADERS)
    assert await p.ping() == b""
    assert await n.ping() == b"MSG foo 1 r 4\r\nbody\r\nMSG foo 1 0\r\n\r\n"
    await n.close()
    await p.close()


async def test_headers_nats_py(srv):
    nc = await nats.connect(srv.client_url)
    sub = await nc.subscribe("h")
    await nc.publish("h", b"data", headers={"A": "1", "Trace-Id": "abc def"})
    m = await sub.next_msg(timeout=2)
    assert m.data == b"data"
    assert m.headers == {"A": "1", "Trace-Id": "abc def"}
    await nc.close()


async def test_plain_pub_to_headers_subscriber_is_msg(srv):
    h = await RawClient.open(srv, headers=True)
    h.send(b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n")
    assert await h.ping() == b"MSG foo 1 2\r\nhi\r\n"
    await h.close()


# ---------------------------------------------------------------------------------------------------
# PING/PONG, payload sizes, many subscriptions


async def test_ping_pong(srv):
    c = await RawClient.open(srv, connect=False)
    c.send(b"PING\r\n")  # allowed before CONNECT when no auth is required
    assert await c.readline() == b"PONG"
    c.connect()
    c.send(b"PING\r\nPING\r\nping\r\n")
    data = b""
    while data.count(b"PONG") < 3:
        data += await c.read_until(b"PONG\r\n")
    assert c.strip_connect_info(data) == b"PONG\r\nPONG\r\nPONG\r\n"
    await c.close()


async def test_pong_from_client_is_accepted(srv):
    c = await RawClient.open(srv)
    c.send(b"PONG\r\n")
    assert await c.ping() == b""
    await c.close()


async def test_split_writes_reassembled(srv):
    c = await RawClient.open(srv)
    c.sub("foo", 1)
    for piece in (b"PU", b"B fo", b"o 5\r", b"\nhel", b"lo", b"\r", b"\n"):
        c.send(piece)
        await c.writer.drain()
        await asyncio.sleep(0.01)
    assert await c.ping() == b"MSG foo 1 5\r\nhello\r\n"
    await c.close()


async def test_payload_exactly_max_payload(srv):
    sub = await RawClient.open(srv)
    sub.sub("big", 1)
    assert await sub.ping() == b""
    pub = await RawClient.open(srv)
    payload = bytes(range(256)) * (MB // 256)
    assert len(payload) == MB
    pub.pub("big", payload)
    assert await pub.ping() == b""
    m = await sub.read_msg(timeout=5)
    assert m.payload == payload
    await sub.close()
    await pub.close()


async def test_payload_limit_nats_py(srv):
    nc = await nats.connect(srv.client_url)
    sub = await nc.subscribe("big")
    await nc.publish("big", b"x" * MB)
    m = await sub.next_msg(timeout=5)
    assert len(m.data) == MB
    with pytest.raises(nats.errors.MaxPayloadError):
        await nc.publish("big", b"x" * (MB + 1))
    await nc.close()


async def test_one_byte_over_max_payload_raw(srv):
    c = await RawClient.open(srv)
    c.send(f"PUB big {MB + 1}\r\n".encode() + b"x" * (MB + 1) + b"\r\n")
    data = await c.read_until_closed()
    assert data == b"-ERR 'Maximum Payload Violation'\r\n"


async def test_many_subscriptions(srv):
    c = await RawClient.open(srv)
    n = 2000
    c.send(b"".join(b"SUB s.%d %d\r\n" % (i, i) for i in range(n)))
    assert await c.ping() == b""
    pub = await RawClient.open(srv)
    pub.send(b"".join(b"PUB s.%d %d\r\n%d\r\n" % (i, len(str(i)), i) for i in range(n)))
    assert await pub.ping() == b""
    items = parse_stream(await c.ping(timeout=10))
    assert len(items) == n
    assert all(isinstance(m, Msg) and m.sid == m.payload.decode() and m.subject == f"s.{m.sid}" for m in items)
    await c.close()
    await pub.close()


async def test_many_subscriptions_same_subject(srv):
    c = await RawClient.open(srv)
    n = 500
    c.send(b"".join(b"SUB same %d\r\n" % i for i in range(n)))
    c.pub("same", b"x")
    items = parse_stream(await c.ping())
    assert sorted(int(m.sid) for m in items) == list(range(n))
    await c.close()


async def test_many_subscriptions_nats_py(srv):
    nc = await nats.connect(srv.client_url)
    subs = [await nc.subscribe(f"n.{i}") for i in range(300)]
    await nc.flush()
    for i in range(300):
        await nc.publish(f"n.{i}", b"%d" % i)
    for i, s in enumerate(subs):
        m = await s.next_msg(timeout=2)
        assert m.data == b"%d" % i
    await nc.close()


# ---------------------------------------------------------------------------------------------------
# Stale connections, slow consumers


async def test_stale_connection():
    async with serve(ping_interval=0.2, ping_max=2) as s:
        c = await RawClient.open(s)
        data = await c.read_until_closed(timeout=5)
        assert data == b"PING\r\nPING\r\n-ERR 'Stale Connection'\r\n"


async def test_client_answering_pings_stays_connected():
    async with serve(ping_interval=0.2, ping_max=2) as s:
        c = await RawClient.open(s)
        pings = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        while loop.time() < deadline:
            try:
                line = await c.readline(timeout=max(deadline - loop.time(), 0.01))
            except AssertionError:
                break
            assert line == b"PING"
            pings += 1
            c.send(b"PONG\r\n")
        assert pings >= 2
        assert await c.is_open()
        await c.close()

        nc = await nats.connect(s.client_url)  # nats-py answers the server's PINGs itself
        await asyncio.sleep(1.0)
        assert nc.is_connected
        await nc.close()


async def test_slow_consumer_is_cut_off_others_unaffected():
    async with serve(max_pending=64 * 1024, max_payload=8 * 1024, write_deadline=0.5) as s:
        slow = await RawClient.open(s, rcvbuf=4096)
        slow.sub("flood", 1)
        assert await slow.ping() == b""

        good = await nats.connect(s.client_url)
        received = 0
        done = asyncio.Event()
        n = 3000

        async def cb(msg):
            nonlocal received
            received += 1
            if received == n:
                done.set()
        await good.subscribe("flood", cb=cb, pending_bytes_limit=64 * 1024 * 1024)
        await good.flush()

        pub = await RawClient.open(s)
        payload = b"x" * 4000
        batch = 10  # the normal subscriber shares this event loop: let it keep up (40 KB < max_pending)
        chunk = (b"PUB flood 4000\r\n" + payload + b"\r\n") * batch
        for sent in range(batch, n + 1, batch):
            pub.send(chunk)
            assert await pub.ping(timeout=10) == b""
            for _ in range(500):
                if received >= sent:
                    break
                await asyncio.sleep(0.002)
        await asyncio.wait_for(done.wait(), 10)
        assert received == n

        # the stalled subscriber was disconnected without getting everything
        rest = await slow.read_until_closed(timeout=10)
        got = sum(1 for x in parse_stream(_whole_msgs(rest)) if isinstance(x, Msg))
        assert got < n
        assert b"PONG" not in rest
        await wait_log(s, r"\[INF\] 127\.0\.0\.1:\d+ - cid:\d+ - Slow Consumer Detected: MaxPending of 65536 Exceeded$")
        assert good.is_connected
        await good.close()
        await pub.close()


def _whole_msgs(data: bytes) -> bytes:
    """Cut a stream at the end of its last complete MSG (the connection may stop mid-message)."""
    end = data.rfind(b"\r\nMSG ")
    return data[:end + 2] if end >= 0 else b""


# ---------------------------------------------------------------------------------------------------
# Parser details


async def test_operations_are_case_insensitive_and_accept_tabs(srv):
    c = await RawClient.open(srv)
    c.send(b"sub foo 1\r\npub foo 2\r\nhi\r\nSuB\tbar\t2\r\nPUB\tbar\t  1\r\nx\r\nunsub 1\r\npub foo 1\r\nz\r\n")
    assert await c.ping() == b"MSG foo 1 2\r\nhi\r\nMSG bar 2 1\r\nx\r\n"
    await c.close()


async def test_bare_newline_line_endings(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB foo 1\nPUB foo 2\nhi\r\nPING\n")
    assert await c.read_until(b"PONG\r\n") == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
    await c.close()


async def test_duplicate_sid_keeps_first_subscription(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB foo 1\r\nSUB bar 1\r\nPUB foo 1\r\na\r\nPUB bar 1\r\nb\r\n")
    assert await c.ping() == b"MSG foo 1 1\r\na\r\n"
    await c.close()


async def test_payload_not_followed_by_crlf_closes(srv):
    c = await RawClient.open(srv)
    c.send(b"PUB foo 2\r\nhiXX\r\nPING\r\n")
    data = await c.read_until_closed()
    assert b"PONG" not in data


async def test_hpub_header_size_larger_than_total_closes(srv):
    c = await RawClient.open(srv, headers=True)
    c.send(b"HPUB foo 20 10\r\n0123456789\r\nPING\r\n")
    data = await c.read_until_closed()
    assert b"PONG" not in data


@pytest.mark.parametrize("line", [b"PUB foo", b"PUB", b"SUB foo", b"SUB", b"UNSUB",
                                  b"PUB foo bar baz 2", b"HPUB foo 2"],
                         ids=["pub-1-arg", "pub-no-arg", "sub-1-arg", "sub-no-arg", "unsub-no-arg",
                              "pub-4-args", "hpub-1-size"])
async def test_malformed_arguments_close(srv, line):
    c = await RawClient.open(srv, headers=True)
    assert await c.ping() == b""
    c.send(line + b"\r\nPING\r\n")
    data = await c.read_until_closed()
    assert b"PONG" not in data


async def test_subscriber_sees_reply_subject(srv):
    c = await RawClient.open(srv, headers=True)
    c.send(b"SUB foo 1\r\nPUB foo bar.baz 2\r\nhi\r\nHPUB foo r.1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    assert await c.ping() == (b"MSG foo 1 bar.baz 2\r\nhi\r\nHMSG foo 1 r.1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    await c.close()


async def test_sid_is_echoed_as_given(srv):
    c = await RawClient.open(srv)
    c.send(b"SUB foo abc.DEF-1\r\nPUB foo 0\r\n\r\n")
    assert await c.ping() == b"MSG foo abc.DEF-1 0\r\n\r\n"
    await c.close()


async def test_unsub_with_unparsable_max_unsubscribes_now(srv):
    # nats-server reads a bad max as -1: an immediate unsubscribe, not an error
    c = await RawClient.open(srv)
    c.send(b"SUB foo 1\r\nUNSUB 1 x\r\nPUB foo 1\r\na\r\n")
    assert await c.ping() == b""
    assert await c.is_open()
    await c.close()
