"""JetStream consumers through nats-py against an in-process server: pull, push, acks, redelivery,
retention, ordered consumers, restart, info numbers and the consumer API, pinned to nats-server's answers."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess

import nats
import pytest
from nats.js import api
from nats.js.errors import APIError, NotFoundError

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options




def _opts(tmp_path) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))


@pytest.fixture
async def js_env(tmp_path):
    if os.environ.get("RILLET_JS_REFERENCE"):
        # RILLET_JS_REFERENCE=1: run the same tests against the nats-server binary to pin expectations
        port = _free_port()
        proc = subprocess.Popen(["nats-server", "-js", "-sd", str(tmp_path), "-a", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
                    break
                except Exception:
                    await asyncio.sleep(0.05)
            try:
                yield None, nc, nc.jetstream()
            finally:
                await nc.close()
        finally:
            proc.terminate()
            proc.wait()
        return
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            yield srv, nc, nc.jetstream()
        finally:
            await nc.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _stream(js, name="S", subjects=("s.>",), **kw):
    kw.setdefault("storage", "memory")
    await js.add_stream(name=name, subjects=list(subjects), **kw)


async def _req(nc, subject, body=b"", timeout=1.0):
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    r = await nc.request(subject, body, timeout=timeout)
    return json.loads(r.data)


async def _pub(js, n, subject="s.x", start=0):
    for i in range(start, start + n):
        await js.publish(subject, f"m{i}".encode())


# ---- pull ------------------------------------------------------------------------------------------------


async def test_pull_fetch_batch_ack_and_info(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 5)
    psub = await js.pull_subscribe("s.>", "dur")
    msgs = await psub.fetch(3, timeout=1)
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
    md = msgs[0].metadata
    assert (md.sequence.stream, md.sequence.consumer, md.num_delivered, md.num_pending) == (1, 1, 1, 4)
    assert msgs[0].subject == "s.x"
    await msgs[0].ack()
    await msgs[1].ack_sync()
    ci = await js.consumer_info("S", "dur")
    assert ci.delivered.stream_seq == 3 and ci.delivered.consumer_seq == 3
    assert ci.ack_floor.stream_seq == 2 and ci.num_ack_pending == 1 and ci.num_pending == 2
    assert ci.config.max_waiting == 512 and ci.config.max_ack_pending == 1000 and ci.config.ack_wait == 30
    rest = await psub.fetch(10, timeout=1)
    assert [m.data for m in rest] == [b"m3", b"m4"]
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(1, timeout=0.3)


async def test_pull_no_wait_and_expires_statuses(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="P", ack_policy="explicit"))
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    nxt = "$JS.API.CONSUMER.MSG.NEXT.S.P"
    await nc.publish(nxt, b'{"batch":3,"no_wait":true}', reply=inbox)
    m = await sub.next_msg(1)
    assert m.headers["Status"] == "404" and m.headers["Description"] == "No Messages"
    await nc.publish(nxt, json.dumps({"batch": 3, "expires": 200_000_000}).encode(), reply=inbox)
    m = await sub.next_msg(1)
    assert m.headers["Status"] == "408" and m.headers["Description"] == "Request Timeout"
    assert m.headers["Nats-Pending-Messages"] == "3" and m.headers["Nats-Pending-Bytes"] == "0"
    # a waiting request is served by a later publish; a plain-number body asks for that many
    await nc.publish(nxt, b"2", reply=inbox)
    await asyncio.sleep(0.05)
    ci = await js.consumer_info("S", "P")
    assert ci.num_waiting == 1
    await _pub(js, 3)
    got = [await sub.next_msg(1) for _ in range(2)]
    assert [g.data for g in got] == [b"m0", b"m1"]
    # no_wait with messages: delivers what is there, then 404
    await nc.publish(nxt, b'{"batch":5,"no_wait":true}', reply=inbox)
    m = await sub.next_msg(1)
    assert m.data == b"m2"
    m = await sub.next_msg(1)
    assert m.headers["Status"] == "404"
    # max_bytes smaller than the message
    await _pub(js, 1, start=3)
    await nc.publish(nxt, b'{"batch":5,"max_bytes":10}', reply=inbox)
    m = await sub.next_msg(1)
    assert m.headers["Status"] == "409" and m.headers["Description"] == "Message Size Exceeds MaxBytes"


async def test_pull_request_heartbeat_and_max_waiting(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="P", ack_policy="explicit", max_waiting=1))
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    nxt = "$JS.API.CONSUMER.MSG.NEXT.S.P"
    await nc.publish(nxt, json.dumps({"batch": 1, "expires": 2_000_000_000,
                                      "idle_heartbeat": 100_000_000}).encode(), reply=inbox)
    m = await sub.next_msg(1)
    assert m.headers["Status"] == "100" and m.headers["Description"] == "Idle Heartbeat"
    await nc.publish(nxt, b'{"batch":1,"expires":1000000000}', reply=inbox)
    while True:
        m = await sub.next_msg(1)
        if m.headers.get("Status") != "100":
            break
    assert m.headers["Status"] == "409" and m.headers["Description"] == "Exceeded MaxWaiting"
    await nc.publish(nxt, b'{"batch":1,"idle_heartbeat":1000000000,"expires":1000000000}', reply=inbox)
    m = await sub.next_msg(1)
    while m.headers.get("Status") == "100":
        m = await sub.next_msg(1)
    assert m.headers["Status"] == "400"
    assert m.headers["Description"] == "Bad Request - heartbeat value too large"


async def test_consumer_deleted_releases_waiting_pull(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="P", ack_policy="explicit"))
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.P", b'{"batch":1,"expires":5000000000}', reply=inbox)
    await asyncio.sleep(0.05)
    await js.delete_consumer("S", "P")
    m = await sub.next_msg(1)
    assert m.headers["Status"] == "409" and m.headers["Description"] == "Consumer Deleted"


# ---- push ------------------------------------------------------------------------------------------------


async def test_push_subscribe_and_queue(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 10)
    got = []
    done = asyncio.Event()

    async def cb(m):
        got.append(m.data)
        await m.ack()
        if len(got) == 10:
            done.set()

    sub = await js.subscribe("s.>", cb=cb)
    await asyncio.wait_for(done.wait(), 2)
    ci = await sub.consumer_info()
    assert ci.push_bound and ci.num_ack_pending == 0 and ci.delivered.stream_seq == 10
    await sub.unsubscribe()
    # queue group: each message to one member
    a, b = [], []
    qa = await js.subscribe("s.>", queue="workers", cb=lambda m: _collect(a, m))
    qb = await js.subscribe("s.>", queue="workers", cb=lambda m: _collect(b, m))
    for _ in range(40):
        if len(a) + len(b) >= 10:
            break
        await asyncio.sleep(0.05)
    assert sorted(a + b) == sorted(got)
    await qa.unsubscribe()
    await qb.unsubscribe()


async def _collect(lst, m):
    lst.append(m.data)
    await m.ack()


async def test_push_waits_for_interest_and_heartbeats(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 2)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="PD", deliver_subject="dlv", ack_policy="explicit",
                                                  idle_heartbeat=0.2, headers_only=True))
    ci = await js.consumer_info("S", "PD")
    assert not ci.push_bound and ci.num_pending == 2
    sub = await nc.subscribe("dlv")
    m1 = await sub.next_msg(1)
    assert m1.subject == "s.x" and m1.data == b"" and m1.headers["Nats-Msg-Size"] == "2"
    await sub.next_msg(1)
    hb = await sub.next_msg(1)
    assert hb.headers["Status"] == "100" and hb.headers["Description"] == "Idle Heartbeat"
    assert hb.headers["Nats-Last-Consumer"] == "2" and hb.headers["Nats-Last-Stream"] == "2"
    assert (await js.consumer_info("S", "PD")).push_bound


async def test_flow_control_request(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.add_consumer("S", api.ConsumerConfig(name="FC", deliver_subject="fcd", ack_policy="none",
                                                  flow_control=True, idle_heartbeat=1))
    sub = await nc.subscribe("fcd")
    # the first window is 2 MB: a flow control request comes after more than 1 MB
    payload = b"x" * 200_000
    for _ in range(8):
        await js.publish("s.big", payload)
    fc = None
    for _ in range(20):
        m = await sub.next_msg(1)
        if m.headers and m.headers.get("Status") == "100":
            fc = m
            break
    assert fc is not None and fc.headers["Description"] == "FlowControl Request"
    assert fc.reply.startswith("$JS.FC.S.FC.")
    await nc.publish(fc.reply, b"")


async def test_ordered_consumer(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 20)
    sub = await js.subscribe("s.>", ordered_consumer=True)
    got = [(await sub.next_msg(1)).data for _ in range(20)]
    assert got == [f"m{i}".encode() for i in range(20)]
    ci = await sub.consumer_info()
    assert ci.config.ack_policy == "none" and ci.config.mem_storage and ci.config.flow_control


# ---- acks and redelivery -----------------------------------------------------------------------------------


async def test_nak_term_in_progress_and_ack_wait(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 3)
    psub = await js.pull_subscribe("s.>", "A", config=api.ConsumerConfig(ack_wait=0.3))
    naks = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.A")
    terms = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.A")
    m0, m1, m2 = await psub.fetch(3, timeout=1)
    await m0.nak()
    a = json.loads((await naks.next_msg(1)).data)
    assert (a["type"], a["stream_seq"], a["consumer_seq"], a["deliveries"]) == ("io.nats.jetstream.advisory.v1.nak", 1, 1, 1)
    r = await psub.fetch(1, timeout=1)
    assert r[0].data == b"m0" and r[0].metadata.num_delivered == 2
    await r[0].ack()
    await m1.term()
    a = json.loads((await terms.next_msg(1)).data)
    assert (a["type"], a["stream_seq"], a["deliveries"]) == ("io.nats.jetstream.advisory.v1.terminated", 2, 1)
    # m2: in progress keeps it from being redelivered for another ack wait
    await asyncio.sleep(0.2)
    await m2.in_progress()
    await asyncio.sleep(0.2)
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(1, timeout=0.05)
    r = await psub.fetch(1, timeout=1)
    assert r[0].data == b"m2" and r[0].metadata.num_delivered == 2
    ci = await js.consumer_info("S", "A")
    assert ci.num_redelivered == 1 and ci.num_ack_pending == 1
    await r[0].ack_sync()
    ci = await js.consumer_info("S", "A")
    assert ci.num_ack_pending == 0 and ci.ack_floor.stream_seq == 3


async def test_nak_with_delay(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 1)
    psub = await js.pull_subscribe("s.>", "A")
    (m,) = await psub.fetch(1, timeout=1)
    await m.nak(delay=0.3)
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(1, timeout=0.15)
    (r,) = await psub.fetch(1, timeout=1)
    assert r.data == b"m0" and r.metadata.num_delivered == 2


async def test_max_deliver_and_backoff(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 1)
    adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.B")
    psub = await js.pull_subscribe("s.>", "B", config=api.ConsumerConfig(max_deliver=3, backoff=[0.1, 0.2]))
    ci = await js.consumer_info("S", "B")
    assert ci.config.ack_wait == 0.1
    counts = []
    for _ in range(3):
        (m,) = await psub.fetch(1, timeout=2)
        counts.append(m.metadata.num_delivered)
    assert counts == [1, 2, 3]
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(1, timeout=0.4)
    a = await adv.next_msg(2)
    d = json.loads(a.data)
    assert d["type"] == "io.nats.jetstream.advisory.v1.max_deliver" and d["stream_seq"] == 1 and d["deliveries"] == 3


async def test_max_ack_pending_stalls(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 5)
    psub = await js.pull_subscribe("s.>", "M", config=api.ConsumerConfig(max_ack_pending=2))
    msgs = await psub.fetch(5, timeout=0.5)
    assert len(msgs) == 2
    await msgs[0].ack_sync()
    more = await psub.fetch(5, timeout=0.5)
    assert [m.data for m in more] == [b"m2"]


async def test_ack_all_and_ack_next(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 4)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="AA", ack_policy="all"))
    psub = await js.pull_subscribe_bind("AA", stream="S")
    msgs = await psub.fetch(3, timeout=1)
    await msgs[2].ack_sync()
    ci = await js.consumer_info("S", "AA")
    assert ci.num_ack_pending == 0 and ci.ack_floor.stream_seq == 3
    # +NXT acks and asks for the next one on the ack's reply
    (m,) = await psub.fetch(1, timeout=1)
    await _pub(js, 1, start=4)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(m.reply, b'+NXT {"batch":1}', reply=inbox)
    n = await sub.next_msg(1)
    assert n.data == b"m4"


async def test_double_ack_reply(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 1)
    psub = await js.pull_subscribe("s.>", "D")
    (m,) = await psub.fetch(1, timeout=1)
    r = await nc.request(m.reply, b"+ACK", timeout=1)
    assert r.data == b""


# ---- deliver policies and filters -------------------------------------------------------------------------


async def test_deliver_policies(js_env):
    srv, nc, js = js_env
    await _stream(js)
    for i, s in enumerate(["s.a", "s.b", "s.a", "s.b", "s.c"]):
        await js.publish(s, f"m{i}".encode())

    async def first(**kw):
        name = kw.pop("name")
        await js.add_consumer("S", api.ConsumerConfig(durable_name=name, **kw))
        ps = await js.pull_subscribe_bind(name, stream="S")
        return [m.data for m in await ps.fetch(10, timeout=0.3)]

    assert await first(name="all") == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert await first(name="last", deliver_policy="last") == [b"m4"]
    assert await first(name="seq", deliver_policy="by_start_sequence", opt_start_seq=3) == [b"m2", b"m3", b"m4"]
    assert await first(name="lps", deliver_policy="last_per_subject", filter_subject="s.>") == [b"m2", b"m3", b"m4"]
    assert await first(name="lastf", deliver_policy="last", filter_subject="s.a") == [b"m2"]
    with pytest.raises(nats.errors.TimeoutError):
        await first(name="new", deliver_policy="new")
    ci = await js.consumer_info("S", "lps")
    assert ci.num_pending == 0 and ci.delivered.stream_seq == 5


async def test_filter_subjects(js_env):
    srv, nc, js = js_env
    await _stream(js)
    for s in ["s.a", "s.b", "s.c", "s.a", "s.c"]:
        await js.publish(s, s.encode())
    await js.add_consumer("S", api.ConsumerConfig(durable_name="F", filter_subjects=["s.a", "s.c"]))
    ci = await js.consumer_info("S", "F")
    assert ci.num_pending == 4
    ps = await js.pull_subscribe_bind("F", stream="S")
    got = [m.subject for m in await ps.fetch(10, timeout=0.3)]
    assert got == ["s.a", "s.c", "s.a", "s.c"]


# ---- retention ----------------------------------------------------------------------------------------------


async def test_workqueue_retention(js_env):
    srv, nc, js = js_env
    await _stream(js, "WQ", ["wq.>"], retention="workqueue")
    for i in range(3):
        await js.publish("wq.a", b"x")
    ps = await js.pull_subscribe("wq.>", "W")
    msgs = await ps.fetch(3, timeout=1)
    for m in msgs[:2]:
        await m.ack_sync()
    si = await js.stream_info("WQ")
    assert si.state.messages == 1
    with pytest.raises(APIError) as e:
        await js.add_consumer("WQ", api.ConsumerConfig(durable_name="W2", ack_policy="explicit"))
    assert e.value.err_code == 10099  # multiple non-filtered consumers not allowed on workqueue stream


async def test_interest_retention(js_env):
    srv, nc, js = js_env
    await _stream(js, "I", ["i.>"], retention="interest")
    await js.publish("i.a", b"nobody")
    assert (await js.stream_info("I")).state.messages == 0
    await js.add_consumer("I", api.ConsumerConfig(durable_name="C1", ack_policy="explicit"))
    await js.add_consumer("I", api.ConsumerConfig(durable_name="C2", ack_policy="explicit", filter_subject="i.b"))
    await js.publish("i.a", b"one")
    await js.publish("i.b", b"two")
    p1 = await js.pull_subscribe_bind("C1", stream="I")
    p2 = await js.pull_subscribe_bind("C2", stream="I")
    for m in await p1.fetch(2, timeout=1):
        await m.ack_sync()
    si = await js.stream_info("I")
    assert si.state.messages == 1  # i.b still wanted by C2
    (m,) = await p2.fetch(1, timeout=1)
    await m.ack_sync()
    assert (await js.stream_info("I")).state.messages == 0


# ---- API ------------------------------------------------------------------------------------------------------


async def test_consumer_api_errors_and_listing(js_env):
    srv, nc, js = js_env
    await _stream(js)
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.S.D2.s.a",
                   {"stream_name": "S", "config": {"name": "D2", "filter_subject": "s.a"}, "action": "create"})
    assert r["name"] == "D2" and r["config"]["ack_policy"] == "none" and r["config"]["inactive_threshold"] == 5e9
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.S.D2.s.a",
                   {"stream_name": "S", "config": {"name": "D2", "filter_subject": "s.a", "max_deliver": 3},
                    "action": "create"})
    assert r["error"]["err_code"] == 10148
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.S.D3", {"stream_name": "S", "config": {"name": "D3"},
                                                        "action": "update"})
    assert r["error"]["err_code"] == 10149
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.S.D4.s.b", {"stream_name": "S", "config": {"filter_subject": "s.c"}})
    assert r["error"]["err_code"] == 10131
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.X", {"stream_name": "X", "config": {}})
    assert r["error"]["err_code"] == 10059
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.S", {"stream_name": "T", "config": {}})
    assert r["error"]["err_code"] == 10056
    r = await _req(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.DD", {"stream_name": "S", "config": {"durable_name": "X"}})
    assert r["error"]["err_code"] == 10017
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"durable_name": "X"}})
    assert r["error"]["err_code"] == 10020
    r = await _req(nc, "$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {
        "deliver_policy": "by_start_sequence"}})
    assert r["error"] == {"code": 400, "err_code": 10094, "description":
                          "consumer delivery policy is deliver by start sequence, but optional start sequence is not set"}
    r = await _req(nc, "$JS.API.CONSUMER.INFO.S.nope")
    assert r["error"] == {"code": 404, "err_code": 10014, "description": "consumer not found"}
    await js.add_consumer("S", api.ConsumerConfig(durable_name="D1", ack_policy="explicit"))
    r = await _req(nc, "$JS.API.CONSUMER.NAMES.S")
    assert r["consumers"] == ["D1", "D2"] and r["total"] == 2 and r["limit"] == 1024
    r = await _req(nc, "$JS.API.CONSUMER.LIST.S", {"offset": 1})
    assert [c["name"] for c in r["consumers"]] == ["D2"] and r["total"] == 2 and r["offset"] == 1
    r = await _req(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.S.D1")
    assert r["error"]["err_code"] == 10010
    # update: allowed and refused changes
    ci = await js.add_consumer("S", api.ConsumerConfig(durable_name="D1", ack_policy="explicit", max_deliver=5))
    assert ci.config.max_deliver == 5
    with pytest.raises(APIError) as e:
        await js.add_consumer("S", api.ConsumerConfig(durable_name="D1", ack_policy="all"))
    assert e.value.description == "ack policy can not be updated"
    assert await js.delete_consumer("S", "D1")
    with pytest.raises(NotFoundError):
        await js.consumer_info("S", "D1")


async def test_pause_resume(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="PZ", ack_policy="explicit"))
    r = await _req(nc, "$JS.API.CONSUMER.PAUSE.S.PZ", {"pause_until": "2099-01-01T00:00:00Z"})
    assert r["paused"] is True and r["pause_until"] == "2099-01-01T00:00:00Z" and r["pause_remaining"] > 0
    await _pub(js, 1)
    ps = await js.pull_subscribe_bind("PZ", stream="S")
    with pytest.raises(nats.errors.TimeoutError):
        await ps.fetch(1, timeout=0.3)
    info = await _req(nc, "$JS.API.CONSUMER.INFO.S.PZ")
    assert info["paused"] is True and info["config"]["pause_until"] == "2099-01-01T00:00:00Z"
    r = await _req(nc, "$JS.API.CONSUMER.PAUSE.S.PZ")
    assert r == {"type": "io.nats.jetstream.api.v1.consumer_pause_response", "paused": False,
                 "pause_until": "0001-01-01T00:00:00Z"}
    (m,) = await ps.fetch(1, timeout=1)
    assert m.data == b"m0"


async def test_ephemeral_inactive_threshold(js_env):
    srv, nc, js = js_env
    await _stream(js)
    ci = await js.add_consumer("S", api.ConsumerConfig(ack_policy="explicit", inactive_threshold=0.2))
    await asyncio.sleep(1.4)  # nats-server adds up to 1 s of jitter for pull consumers; we delete at the threshold
    with pytest.raises(NotFoundError):
        await js.consumer_info("S", ci.name)


async def test_durable_survives_restart(tmp_path):
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f.>"], storage="file")
        for i in range(5):
            await js.publish("f.x", f"m{i}".encode())
        ps = await js.pull_subscribe("f.>", "dur")
        msgs = await ps.fetch(3, timeout=1)
        await msgs[0].ack_sync()
        await msgs[2].ack_sync()
        await nc.close()
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        ci = await js.consumer_info("F", "dur")
        assert ci.delivered.stream_seq == 3 and ci.ack_floor.stream_seq == 1 and ci.num_ack_pending == 1
        assert ci.num_pending == 2
        ps = await js.pull_subscribe_bind("dur", stream="F")
        msgs = await ps.fetch(2, timeout=1)
        assert [m.data for m in msgs] == [b"m3", b"m4"]
        await nc.close()


# ---- more delivery options ---------------------------------------------------------------------------------


async def test_replay_original_keeps_gaps(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.publish("s.x", b"a")
    await asyncio.sleep(0.3)
    await js.publish("s.x", b"b")
    loop = asyncio.get_running_loop()
    sub = await nc.subscribe("rp")
    await js.add_consumer("S", api.ConsumerConfig(name="R", deliver_subject="rp", replay_policy="original"))
    m1 = await sub.next_msg(1)
    t1 = loop.time()
    m2 = await sub.next_msg(1)
    assert (m1.data, m2.data) == (b"a", b"b")
    assert loop.time() - t1 >= 0.25


async def test_by_start_time_and_last_per_subject_pending(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.publish("s.a", b"0")
    await js.publish("s.b", b"1")
    await asyncio.sleep(0.05)
    r = await _req(nc, "$JS.API.STREAM.INFO.S")
    mid = r["state"]["last_ts"]
    await asyncio.sleep(0.05)
    await js.publish("s.a", b"2")
    await js.publish("s.a", b"3")
    ci = await js.add_consumer("S", api.ConsumerConfig(durable_name="T", deliver_policy="by_start_time",
                                                       opt_start_time=mid))
    assert ci.num_pending == 3
    ci = await js.add_consumer("S", api.ConsumerConfig(durable_name="L", deliver_policy="last_per_subject",
                                                       filter_subject="s.*"))
    assert ci.num_pending == 2
    ps = await js.pull_subscribe_bind("L", stream="S")
    got = [m.data for m in await ps.fetch(5, timeout=0.3)]
    assert got == [b"1", b"3"]
    await js.publish("s.b", b"4")
    (m,) = await ps.fetch(1, timeout=1)
    assert m.data == b"4"


async def test_ephemeral_push_removed_when_interest_goes(js_env):
    srv, nc, js = js_env
    await _stream(js)
    sub = await js.subscribe("s.>", config=api.ConsumerConfig(inactive_threshold=0.2))
    name = sub._consumer
    await nc.flush()
    await asyncio.sleep(0.05)
    ci = await js.consumer_info("S", name)
    assert ci.push_bound
    await sub.unsubscribe()
    await asyncio.sleep(0.6)
    with pytest.raises(NotFoundError):
        await js.consumer_info("S", name)


async def test_durable_push_rebind_and_deliver_subject_update(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 2)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="DP", deliver_subject="one", ack_policy="explicit"))
    s1 = await nc.subscribe("one")
    m = await s1.next_msg(1)
    await m.ack()
    await s1.unsubscribe()
    await asyncio.sleep(0.05)
    assert not (await js.consumer_info("S", "DP")).push_bound
    # a new deliver subject for a consumer nobody is bound to is allowed
    await js.add_consumer("S", api.ConsumerConfig(durable_name="DP", deliver_subject="two", ack_policy="explicit"))
    s2 = await nc.subscribe("two")
    m = await s2.next_msg(1)  # pending m1 is redelivered at once on the new deliver subject
    assert m.data == b"m1" and m.metadata.num_delivered == 2


async def test_ack_sample_metric(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 1)
    metrics = await nc.subscribe("$JS.EVENT.METRIC.CONSUMER.ACK.S.SM")
    ps = await js.pull_subscribe("s.>", "SM", config=api.ConsumerConfig(sample_freq="100%"))
    (m,) = await ps.fetch(1, timeout=1)
    await m.ack()
    e = json.loads((await metrics.next_msg(1)).data)
    assert e["type"] == "io.nats.jetstream.metric.v1.consumer_ack" and e["stream_seq"] == 1 and e["deliveries"] == 1


async def test_interest_consumer_delete_drops_messages(js_env):
    srv, nc, js = js_env
    await _stream(js, "I", ["i.>"], retention="interest")
    await js.add_consumer("I", api.ConsumerConfig(durable_name="C1", ack_policy="explicit"))
    await js.add_consumer("I", api.ConsumerConfig(durable_name="C2", ack_policy="explicit"))
    for _ in range(3):
        await js.publish("i.a", b"x")
    p1 = await js.pull_subscribe_bind("C1", stream="I")
    for m in await p1.fetch(3, timeout=1):
        await m.ack_sync()
    assert (await js.stream_info("I")).state.messages == 3
    await js.delete_consumer("I", "C2")
    assert (await js.stream_info("I")).state.messages == 0


async def test_purge_moves_consumer_floor(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await _pub(js, 5)
    ps = await js.pull_subscribe("s.>", "PG")
    await ps.fetch(2, timeout=1)
    await js.purge_stream("S")
    ci = await js.consumer_info("S", "PG")
    assert ci.num_pending == 0 and ci.num_ack_pending == 0 and ci.ack_floor.stream_seq == 5
    await _pub(js, 1, start=5)
    (m,) = await ps.fetch(1, timeout=1)
    assert m.data == b"m5" and m.metadata.sequence.stream == 6


async def test_subject_purge_clears_pending(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.publish("s.a", b"a1")
    await js.publish("s.b", b"b1")
    await js.publish("s.a", b"a2")
    ps = await js.pull_subscribe("s.>", "SP")
    await ps.fetch(3, timeout=1)
    await js.purge_stream("S", subject="s.a")
    ci = await js.consumer_info("S", "SP")
    assert ci.num_ack_pending == 1 and ci.ack_floor.stream_seq == 1


async def test_domain_and_v2_ack_subjects(tmp_path):
    opts = Options(host="127.0.0.1", port=-1,
                   jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path), domain="hub"))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(domain="hub")
        await js.add_stream(name="D", subjects=["d.>"], storage="memory")
        await js.publish("d.x", b"1")
        await js.publish("d.x", b"2")
        ps = await js.pull_subscribe("d.>", "dd")
        a, b = await ps.fetch(2, timeout=1)
        await a.ack_sync()
        # the 11-token form (domain and account hash) is accepted too
        toks = b.reply.split(".")
        from rillet.jetstream.consumer.common import account_hash
        v2 = ".".join(["$JS", "ACK", "hub", account_hash("$G")] + toks[2:])
        r = await nc.request(v2, b"+ACK", timeout=1)
        assert r.data == b""
        ci = await js.consumer_info("D", "dd")
        assert ci.num_ack_pending == 0 and ci.ack_floor.stream_seq == 2
        await nc.close()


async def test_rate_limit(js_env):
    srv, nc, js = js_env
    await _stream(js, max_msg_size=1000)
    for _ in range(3):
        await js.publish("s.x", b"x" * 500)
    sub = await nc.subscribe("rl")
    await js.add_consumer("S", api.ConsumerConfig(name="RL", deliver_subject="rl", rate_limit_bps=8000))
    loop = asyncio.get_running_loop()
    await sub.next_msg(1)
    t0 = loop.time()
    await sub.next_msg(2)
    await sub.next_msg(2)
    assert loop.time() - t0 >= 0.5  # 1000 bytes burst, then 1000 bytes a second


async def test_bad_pull_requests(js_env):
    srv, nc, js = js_env
    await _stream(js)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="P", ack_policy="explicit"))
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    want = {
        b"{bad": "Bad Request - invalid character 'b' looking for beginning of object key string",
        b'{"batch":"x"}': "Bad Request - json: cannot unmarshal string into Go struct field .batch of type int",
        b'{"batch":1.5}': "Bad Request - json: cannot unmarshal number 1.5 into Go struct field .batch of type int",
        b'{"no_wait":1}': "Bad Request - json: cannot unmarshal number into Go struct field .no_wait of type bool",
    }
    for body, desc in want.items():
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.P", body, reply=inbox)
        m = await sub.next_msg(1)
        assert (m.headers["Status"], m.headers["Description"]) == ("400", desc)
    await js.add_consumer("S", api.ConsumerConfig(durable_name="PUSH", deliver_subject="x.y"))
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.PUSH", b"", reply=inbox)
    m = await sub.next_msg(1)
    assert (m.headers["Status"], m.headers["Description"]) == ("409", "Consumer is push based")


async def test_restart_redelivers_pending_and_keeps_push_durable(tmp_path):
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f.>"], storage="file")
        await _pub(js, 3, subject="f.x")
        await js.add_consumer("F", api.ConsumerConfig(durable_name="PD", deliver_subject="pd", ack_policy="explicit",
                                                      ack_wait=0.5))
        sub = await nc.subscribe("pd")
        m0 = await sub.next_msg(1)
        await sub.next_msg(1)
        await sub.next_msg(1)
        await m0.ack()
        await nc.flush()
        await asyncio.sleep(0.1)
        await nc.close()
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        ci = await js.consumer_info("F", "PD")
        assert ci.num_ack_pending == 2 and ci.ack_floor.stream_seq == 1 and not ci.push_bound
        sub = await nc.subscribe("pd")
        got = sorted([(await sub.next_msg(2)).data for _ in range(2)])
        assert got == [b"m1", b"m2"]
        await nc.close()


async def test_pause_advisories(js_env):
    srv, nc, js = js_env
    await _stream(js)
    adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.PA")
    await js.add_consumer("S", api.ConsumerConfig(durable_name="PA", ack_policy="explicit"))
    import datetime
    until = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=0.3)).isoformat()
    r = await _req(nc, "$JS.API.CONSUMER.PAUSE.S.PA", {"pause_until": until})
    assert r["paused"] is True
    a = json.loads((await adv.next_msg(1)).data)
    assert a["type"] == "io.nats.jetstream.advisory.v1.consumer_pause" and a["paused"] is True
    a = json.loads((await adv.next_msg(2)).data)  # the pause ran out
    assert a["paused"] is False and a["pause_until"] == r["pause_until"]
