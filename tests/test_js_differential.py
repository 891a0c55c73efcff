"""Differential JetStream tests: the same requests to Rillet and to nats-server (from PATH), answers compared.

Both servers run as subprocesses from the same configuration (see tests/jsdiff.py). Only what must differ is
normalized (timestamps, server ids, nonces). Where exact bytes matter (direct get headers and status lines)
the requests go over a raw socket; where the user flow matters, through nats-py. Without the nats-server
binary the Go side is skipped and Rillet's answers are checked against the values asserted here (recorded
from nats-server 2.15).
"""
from __future__ import annotations

import asyncio
import json

import pytest

from jsdiff import Raw, ServerPair, run_both, same

CONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
"""


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


# ---------------------------------------------------------------------------------------------------
# Direct get


async def _direct_setup(r: Raw, storage: str) -> None:
    for name in ("DG", "DGE", "NODIRECT"):
        await r.api(f"$JS.API.STREAM.DELETE.{name}")
    for name, extra in (("DG", {"subjects": ["d.>"]}), ("DGE", {"subjects": ["e.>"]}),
                        ("NODIRECT", {"subjects": ["n.>"], "allow_direct": False})):
        cfg = {"name": name, "storage": storage, "allow_direct": True, **extra}
        ans = await r.api(f"$JS.API.STREAM.CREATE.{name}", cfg)
        assert "error" not in ans, ans
    for subj, data, hdr in (("d.a", "1", None), ("d.b", "2", b"NATS/1.0\r\nX: y\r\n\r\n"), ("d.a", "3", None),
                            ("d.c", "4", None), ("d.b", "5", None), ("d.a", "6", None), ("n.a", "n", None)):
        ack = await r.publish(subj, data, hdr=hdr)
        assert "error" not in ack, ack
    ans = await r.api("$JS.API.STREAM.MSG.DELETE.DG", {"seq": 3})
    assert ans.get("success"), ans
    # a stream whose first messages were purged away (first sequence 4)
    await r.api("$JS.API.STREAM.DELETE.DGP")
    ans = await r.api("$JS.API.STREAM.CREATE.DGP", {"name": "DGP", "subjects": ["p.>"], "storage": storage,
                                                    "allow_direct": True})
    assert "error" not in ans, ans
    for i in range(5):
        await r.publish(f"p.{i % 2}", str(i))
    ans = await r.api("$JS.API.STREAM.PURGE.DGP", {"keep": 2})
    assert ans.get("purged") == 3, ans


DG = "$JS.API.DIRECT.GET.DG"
DIRECT_CASES: list[tuple[str, str, object, bool]] = [
    # (label, subject, body, batch answer)
    ("seq", DG, {"seq": 1}, False),
    ("seq with stored headers", DG, {"seq": 2}, False),
    ("seq deleted", DG, {"seq": 3}, False),
    ("seq past end", DG, {"seq": 99}, False),
    ("empty body", DG, b"", False),
    ("empty object", DG, {}, False),
    ("malformed", DG, b"{nope", False),
    ("seq and last", DG, {"seq": 1, "last_by_subj": "d.a"}, False),
    ("last and next", DG, {"last_by_subj": "d.a", "next_by_subj": "d.a"}, False),
    ("last and batch", DG, {"last_by_subj": "d.a", "batch": 2}, False),
    ("up_to_seq and up_to_time", DG, {"multi_last": ["d.a"], "up_to_seq": 2,
                                      "up_to_time": "2000-01-01T00:00:00Z"}, False),
    ("last by subject in body", DG, {"last_by_subj": "d.a"}, False),
    ("last by subject wildcard", DG, {"last_by_subj": "d.*"}, False),
    ("last by subject none", DG, {"last_by_subj": "d.zz"}, False),
    ("next by subject", DG, {"next_by_subj": "d.b", "seq": 3}, False),
    ("next by subject from 0", DG, {"next_by_subj": "d.*"}, False),
    ("next by subject none", DG, {"next_by_subj": "d.b", "seq": 6}, False),
    ("no headers", DG, {"seq": 2, "no_hdr": True}, False),
    ("start time past", DG, {"start_time": "2000-01-01T00:00:00Z"}, False),
    ("start time future", DG, {"start_time": "2200-01-01T00:00:00Z"}, False),
    ("start time and seq", DG, {"start_time": "2000-01-01T00:00:00Z", "seq": 2}, False),
    ("last via subject", DG + ".d.a", b"", False),
    ("last via subject none", DG + ".d.zz", b"", False),
    ("last via subject wildcard", DG + ".d.*", b"", False),
    ("last via subject with body", DG + ".d.a", {"seq": 1}, False),
    ("last via subject empty object", DG + ".d.a", {}, False),
    ("last via subject malformed", DG + ".d.a", b"{nope", False),
    ("batch", DG, {"seq": 1, "batch": 3}, True),
    ("batch over end", DG, {"seq": 4, "batch": 10}, True),
    ("batch from deleted", DG, {"seq": 3, "batch": 2}, True),
    ("batch past end", DG, {"seq": 7, "batch": 2}, True),
    ("batch filtered", DG, {"seq": 2, "batch": 5, "next_by_subj": "d.a"}, True),
    ("batch filtered wildcard", DG, {"seq": 1, "batch": 2, "next_by_subj": "d.*"}, True),
    ("batch max_bytes", DG, {"seq": 1, "batch": 5, "max_bytes": 5}, True),
    ("batch no headers", DG, {"seq": 1, "batch": 2, "no_hdr": True}, True),
    ("batch start time", DG, {"start_time": "2000-01-01T00:00:00Z", "batch": 2}, True),
    ("batch without seq", DG, {"batch": 2}, True),
    ("multi_last", DG, {"multi_last": ["d.a", "d.b"]}, True),
    ("multi_last wildcard", DG, {"multi_last": ["d.>"]}, True),
    ("multi_last up_to_seq", DG, {"multi_last": ["d.>"], "up_to_seq": 4}, True),
    ("multi_last batch", DG, {"multi_last": ["d.>"], "batch": 2}, True),
    ("multi_last max_bytes", DG, {"multi_last": ["d.>"], "max_bytes": 1}, True),
    ("multi_last none", DG, {"multi_last": ["d.zz"]}, True),
    ("multi_last up_to_time past", DG, {"multi_last": ["d.>"], "up_to_time": "2000-01-01T00:00:00Z"}, True),
    ("multi_last up_to_time future", DG, {"multi_last": ["d.>"], "up_to_time": "2200-01-01T00:00:00Z"}, True),
    ("multi_last with seq", DG, {"multi_last": ["d.>"], "seq": 5}, True),
    ("multi_last and next", DG, {"multi_last": ["d.>"], "next_by_subj": "d.a"}, True),
    ("empty stream seq", "$JS.API.DIRECT.GET.DGE", {"seq": 1}, False),
    ("empty stream last", "$JS.API.DIRECT.GET.DGE.e.a", b"", False),
    ("empty stream next", "$JS.API.DIRECT.GET.DGE", {"next_by_subj": "e.>"}, False),
    ("empty stream batch", "$JS.API.DIRECT.GET.DGE", {"seq": 1, "batch": 3}, True),
    ("empty stream multi_last", "$JS.API.DIRECT.GET.DGE", {"multi_last": ["e.>"]}, True),
    ("purged seq", "$JS.API.DIRECT.GET.DGP", {"seq": 1}, False),
    ("purged batch from 1", "$JS.API.DIRECT.GET.DGP", {"seq": 1, "batch": 5}, True),
    ("purged next from 1", "$JS.API.DIRECT.GET.DGP", {"seq": 1, "next_by_subj": "p.0"}, False),
    ("purged multi_last below first", "$JS.API.DIRECT.GET.DGP", {"multi_last": ["p.>"], "up_to_seq": 2}, True),
    ("purged multi_last", "$JS.API.DIRECT.GET.DGP", {"multi_last": ["p.>"]}, True),
    ("purged start time", "$JS.API.DIRECT.GET.DGP", {"start_time": "2000-01-01T00:00:00Z", "batch": 3}, True),
    ("purged up_to_time past", "$JS.API.DIRECT.GET.DGP", {"multi_last": ["p.>"],
                                                         "up_to_time": "2000-01-01T00:00:00Z"}, True),
    ("missing stream", "$JS.API.DIRECT.GET.NOPE", {"seq": 1}, False),
    ("missing stream last", "$JS.API.DIRECT.GET.NOPE.x", b"", False),
    ("direct not allowed", "$JS.API.DIRECT.GET.NODIRECT", {"seq": 1}, False),
]


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_direct_get_forms_like_nats_server(pair, storage):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        try:
            await _direct_setup(r, storage)
            out = []
            for label, subject, body, batch in DIRECT_CASES:
                ans = await r.request(subject, body, until_eob=batch)
                out.append((label, ans))
            # the API level a request needs: above ours is refused
            for label, level in (("required api level", 99), ("required api level ok", 1)):
                hdr = b"NATS/1.0\r\nNats-Required-Api-Level: %d\r\n\r\n" % level
                out.append((label, await r.request(DG, {"seq": 1}, hdr=hdr)))
            return out
        finally:
            await r.close()

    results = await run_both(pair, scenario)
    if "go" in results:
        mismatches = [(a[0], a[1], b[1]) for a, b in zip(results["rillet"], results["go"]) if a != b]
        assert not mismatches, "\n".join(f"{label}:\n  rillet {ra!r}\n  go     {ga!r}" for label, ra, ga in mismatches)
    got = dict(results["rillet"])
    hdr = "NATS/1.0\r\nNats-Stream: DG\r\nNats-Subject: d.a\r\nNats-Sequence: 1\r\nNats-Time-Stamp: <ts>\r\n\r\n"
    assert got["seq"] == [(hdr, b"1")]
    assert got["empty body"] == [("NATS/1.0 408 Empty Request\r\n\r\n", b"")]
    assert got["missing stream"] == [("NATS/1.0 503\r\nNats-Subject: $JS.API.DIRECT.GET.NOPE\r\n\r\n", b"")]
    assert got["batch filtered"][-1] == ("NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 6\r\n\r\n",
                                         b"")
    assert got["multi_last none"] == [("NATS/1.0 404 No Results\r\n\r\n", b"")]


# ---------------------------------------------------------------------------------------------------
# JetStream across accounts: account A owns the streams; B uses them through imports


XCONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
accounts {
  A: {
    jetstream: enabled
    users: [{user: a, password: a}]
    exports: [
      {service: "$JS.API.>"}
      {service: "$JS.API.CONSUMER.MSG.NEXT.ORDERS.PULL", response_type: stream}
      {service: "$JS.ACK.ORDERS.>"}
      {service: "$JS.ACK.PORDERS.>"}
      {service: "$JS.ACK.KV_CFG.>"}
      {service: "$JS.FC.>"}
      {stream: "deliver.b.>"}
      {stream: "_IB.>"}
    ]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {service: {account: A, subject: "$JS.API.>"}, to: "JS.A.API.>"}
      {service: {account: A, subject: "$JS.API.CONSUMER.MSG.NEXT.ORDERS.PULL"}}
      {service: {account: A, subject: "$JS.ACK.ORDERS.>"}}
      {service: {account: A, subject: "$JS.ACK.PORDERS.>"}}
      {service: {account: A, subject: "$JS.ACK.KV_CFG.>"}}
      {service: {account: A, subject: "$JS.FC.>"}}
      {stream: {account: A, subject: "deliver.b.>"}}
      {stream: {account: A, subject: "_IB.>"}}
    ]
  }
  C: {
    users: [{user: c, password: c}]
    imports: [
      {service: {account: A, subject: "$JS.API.>"}}
    ]
  }
}
"""


@pytest.fixture(scope="module")
def xpair():
    p = ServerPair(XCONF)
    yield p
    p.stop()


def _url(url: str, user: str) -> str:
    return url.replace("nats://", f"nats://{user}:{user}@")


async def _fetch(sub, n: int, timeout: float) -> list:
    """Messages of one fetch (as tuples), or what it raised."""
    import nats
    try:
        return await sub.fetch(n, timeout=timeout)
    except nats.errors.TimeoutError:
        return []


def _msgs(msgs: list) -> list:
    return [(m.subject, m.data.decode(), m.metadata.sequence.stream, m.metadata.num_pending) for m in msgs]


def _cinfo(ci) -> dict:
    return {"delivered": ci.delivered.stream_seq, "ack_floor": ci.ack_floor.stream_seq,
            "num_ack_pending": ci.num_ack_pending, "num_pending": ci.num_pending,
            "num_waiting": ci.num_waiting, "num_redelivered": ci.num_redelivered}


async def test_pull_consumer_across_accounts(xpair):
    import nats

    async def scenario(kind: str, url: str) -> dict:
        out: dict = {}
        na = await nats.connect(_url(url, "a"))
        nb = await nats.connect(_url(url, "b"))
        try:
            ja = na.jetstream()
            await ja.add_stream(name="ORDERS", subjects=["orders.>"], storage="memory")
            await ja.add_consumer("ORDERS", durable_name="PULL", ack_policy="explicit", ack_wait=30)
            for i in range(6):
                await ja.publish(f"orders.{i % 2}", f"m{i}".encode())
            # B through the prefixed $JS.API import: the stream's info, then a pull subscription
            jb = nb.jetstream(prefix="JS.A.API")
            si = await jb.stream_info("ORDERS")
            out["info"] = (si.config.name, si.state.messages, si.state.last_seq)
            sub = await jb.pull_subscribe_bind("PULL", stream="ORDERS")
            msgs = await _fetch(sub, 3, 1)
            out["fetch prefixed"] = _msgs(msgs)
            for m in msgs:
                await m.ack()
            await nb.flush()
            await asyncio.sleep(0.05)
            out["after prefixed acks"] = _cinfo(await ja.consumer_info("ORDERS", "PULL"))
            # B through the service import of the consumer's own MSG.NEXT subject (default prefix)
            jb2 = nb.jetstream()
            sub2 = await jb2.pull_subscribe_bind("PULL", stream="ORDERS")
            msgs = await _fetch(sub2, 2, 1)
            out["fetch direct import"] = _msgs(msgs)
            if msgs:
                await msgs[0].ack_sync(timeout=2)  # an ack that waits for the server's answer
                for m in msgs[1:]:
                    await m.nak()
            await nb.flush()
            await asyncio.sleep(0.05)
            out["after ack/nak"] = _cinfo(await ja.consumer_info("ORDERS", "PULL"))
            msgs = await _fetch(sub2, 5, 1)
            out["fetch rest"] = _msgs(msgs)
            for m in msgs:
                await m.ack()
            await nb.flush()
            await asyncio.sleep(0.05)
            out["after all acks"] = _cinfo(await ja.consumer_info("ORDERS", "PULL"))
            # nothing left: the pull ends with a timeout, not an error
            try:
                await sub2.fetch(1, timeout=0.3)
                out["empty fetch"] = "messages"
            except nats.errors.TimeoutError:
                out["empty fetch"] = "timeout"
            # a consumer that does not exist, through the prefixed import: no responders, at once
            sub3 = await jb.pull_subscribe_bind("NOPE", stream="ORDERS")
            try:
                await sub3.fetch(1, timeout=1)
                out["fetch missing consumer"] = "messages"
            except Exception as e:
                out["fetch missing consumer"] = type(e).__name__
            return out
        finally:
            await nb.close()
            await na.close()

    got = same(await run_both(xpair, scenario))
    # through the singleton $JS.API.> export only the first message of a batch reaches B (m1, m2 are
    # delivered into A and dropped: they stay pending); the stream-response MSG.NEXT export carries them all
    assert got["fetch prefixed"] == [("orders.0", "m0", 1, 5)]
    assert got["fetch direct import"] == [("orders.1", "m3", 4, 2), ("orders.0", "m4", 5, 1)]
    assert got["fetch rest"] == [("orders.0", "m4", 5, 1), ("orders.1", "m5", 6, 0)]
    assert got["fetch missing consumer"] == "ServiceUnavailableError"
    assert got["after all acks"] == {"delivered": 6, "ack_floor": 1, "num_ack_pending": 2, "num_pending": 0,
                                     "num_waiting": 0, "num_redelivered": 0}


async def test_push_consumer_and_kv_across_accounts(xpair):
    import nats

    async def scenario(kind: str, url: str) -> dict:
        out: dict = {}
        na = await nats.connect(_url(url, "a"))
        nb = await nats.connect(_url(url, "b"), inbox_prefix="_IB")
        try:
            ja = na.jetstream()
            await ja.add_stream(name="PORDERS", subjects=["porders.>"], storage="memory")
            for i in range(3):
                await ja.publish(f"porders.{i}", f"p{i}".encode())
            # a push consumer of A delivering to a subject A exports as a stream, acked from B
            sub = await nb.subscribe("deliver.b.orders")
            await nb.flush()
            await ja.add_consumer("PORDERS", durable_name="PUSH", deliver_subject="deliver.b.orders",
                                  ack_policy="explicit", ack_wait=30)
            got = []
            for _ in range(3):
                m = await sub.next_msg(timeout=2)
                got.append((m.subject, m.data.decode(), m.reply.rsplit(".", 2)[0], m.metadata.num_pending))
                await m.ack()
            out["push"] = got
            await nb.flush()
            await asyncio.sleep(0.05)
            out["push after acks"] = _cinfo(await ja.consumer_info("PORDERS", "PUSH"))
            # a key-value bucket of A, read and watched from B through the prefixed API
            kva = await ja.create_key_value(bucket="CFG", history=5, storage="memory")
            for k, v in (("a", "1"), ("b", "2"), ("a", "3")):
                await kva.put(k, v.encode())
            await kva.delete("b")
            jb = nb.jetstream(prefix="JS.A.API")
            kvb = await jb.key_value("CFG")
            e = await kvb.get("a")
            out["kv get"] = (e.key, e.value, e.revision)
            out["kv history"] = [(e.key, e.value, e.revision, e.operation) for e in await kvb.history("a")]
            out["kv keys"] = sorted(await kvb.keys())
            w = await kvb.watchall()
            seen = []
            async for e in w:
                if e is None:
                    break
                seen.append((e.key, e.value, e.revision, e.operation))
            await kva.put("c", b"4")
            e = await w.updates(timeout=2)
            seen.append((e.key, e.value, e.revision, e.operation))
            await w.stop()
            out["kv watch"] = seen
            return out
        finally:
            await nb.close()
            await na.close()

    got = same(await run_both(xpair, scenario))
    assert got["push"] == [("porders.0", "p0", "$JS.ACK.PORDERS.PUSH.1.1.1", 2),
                           ("porders.1", "p1", "$JS.ACK.PORDERS.PUSH.1.2.2", 1),
                           ("porders.2", "p2", "$JS.ACK.PORDERS.PUSH.1.3.3", 0)]
    assert got["push after acks"]["ack_floor"] == 3
    assert got["kv get"] == ("a", b"3", 3)
    assert got["kv watch"][-1] == ("c", b"4", 5, None)


# ---------------------------------------------------------------------------------------------------
# What a client sees when the stream or consumer is missing, goes away, or stays idle


async def test_missing_and_deleted_stream_or_consumer_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out = []
        try:
            ans = await r.api("$JS.API.STREAM.CREATE.GONE", {"name": "GONE", "subjects": ["gone.>"],
                                                              "storage": "memory"})
            assert "error" not in ans, ans
            for c in ("P1", "P2", "P3"):
                ans = await r.api(f"$JS.API.CONSUMER.CREATE.GONE.{c}", {"stream_name": "GONE", "config": {
                    "durable_name": c, "ack_policy": "explicit"}})
                assert "error" not in ans, ans
            nxt = "$JS.API.CONSUMER.MSG.NEXT"
            pull = {"batch": 1, "expires": 300_000_000}
            out.append(("pull, missing consumer", await r.request(f"{nxt}.GONE.NOPE", pull, timeout=0.5)))
            out.append(("pull, missing stream", await r.request(f"{nxt}.NOPE.P1", pull, timeout=0.5)))
            out.append(("pull no_wait, empty", await r.request(f"{nxt}.GONE.P1", {"batch": 2, "no_wait": True})))
            out.append(("pull expires", await r.request(f"{nxt}.GONE.P1", {"batch": 2, "expires": 100_000_000})))
            out.append(("pull expires + heartbeat", await r.request(
                f"{nxt}.GONE.P1", {"batch": 2, "expires": 250_000_000, "idle_heartbeat": 100_000_000},
                until_eob=True)))
            out.append(("pull bad heartbeat", await r.request(
                f"{nxt}.GONE.P1", {"batch": 2, "expires": 100_000_000, "idle_heartbeat": 100_000_000})))
            out.append(("consumer info, missing", await r.api("$JS.API.CONSUMER.INFO.GONE.NOPE")))
            out.append(("consumer info, missing stream", await r.api("$JS.API.CONSUMER.INFO.NOPE.P1")))
            out.append(("stream info, missing", await r.api("$JS.API.STREAM.INFO.NOPE")))
            # a pull waiting when its consumer is deleted, then one waiting when the stream is
            reply = "_R.wait1"
            r.rc.pub(f"{nxt}.GONE.P2", json.dumps({"batch": 3, "expires": 2_000_000_000}), reply=reply)
            await r.rc.ping()
            out.append(("delete consumer", await r.api("$JS.API.CONSUMER.DELETE.GONE.P2")))
            r.answers.setdefault(reply, [])
            await r.settle(0.2)
            out.append(("pull waiting, consumer deleted", r.answers.get(reply)))
            reply = "_R.wait2"
            r.rc.pub(f"{nxt}.GONE.P3", json.dumps({"batch": 3, "expires": 2_000_000_000}), reply=reply)
            await r.rc.ping()
            out.append(("delete stream", await r.api("$JS.API.STREAM.DELETE.GONE")))
            r.answers.setdefault(reply, [])
            await r.settle(0.2)
            out.append(("pull waiting, stream deleted", r.answers.get(reply)))
            return out
        finally:
            await r.close()

    results = await run_both(pair, scenario)
    if "go" in results:
        from jsdiff import norm_json
        def n(v):
            return [(lab, norm_json(x) if isinstance(x, dict) else x) for lab, x in v]
        mism = [(a[0], a[1], b[1]) for a, b in zip(n(results["rillet"]), n(results["go"])) if a != b]
        assert not mism, "\n".join(f"{lab}:\n  rillet {ra!r}\n  go     {ga!r}" for lab, ra, ga in mism)


async def test_push_heartbeats_and_ordered_consumer_recovery_like_nats_server(pair):
    import nats
    from nats.js.api import ConsumerConfig

    async def scenario(kind: str, url: str) -> dict:
        out: dict = {}
        r = await Raw.open(url)
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="HB", subjects=["hb.>"], storage="memory")
            await js.publish("hb.1", b"one")
            # a push consumer with heartbeats: what arrives on its deliver subject (heartbeats carry the last
            # consumer and stream sequences delivered)
            r.rc.sub("hbd.deliver", 7)
            await r.rc.ping()
            await js.add_consumer("HB", ConsumerConfig(durable_name="HBC", deliver_subject="hbd.deliver",
                                                       ack_policy="none", idle_heartbeat=0.1, flow_control=True))
            await asyncio.sleep(0.35)
            from helpers import parse_stream
            items = []
            for m in parse_stream(await r.rc.read_for(0.05)):
                if isinstance(m, bytes):
                    continue
                reply = m.reply.rsplit(".", 2)[0] if m.reply and m.reply.startswith("$JS.ACK.") else m.reply
                item = (m.subject, reply, (m.headers or b"").decode(), m.payload.decode())
                if item not in items:
                    items.append(item)
            out["push deliveries"] = items
            # clients fail fast on a missing stream or consumer
            sub = await js.pull_subscribe_bind("NOPE", stream="HB")
            try:
                await sub.fetch(1, timeout=1)
                out["fetch, missing consumer"] = "messages"
            except Exception as e:
                out["fetch, missing consumer"] = type(e).__name__
            try:
                await js.subscribe("nothing.here")
                out["subscribe, no stream"] = "ok"
            except Exception as e:
                out["subscribe, no stream"] = f"{type(e).__name__}: {e}"
            try:
                await js.consumer_info("HB", "NOPE")
            except Exception as e:
                out["consumer info, missing"] = f"{type(e).__name__}: {e}"
            # an ordered consumer whose server-side consumer is deleted recreates it and goes on
            osub = await js.subscribe("hb.>", ordered_consumer=True, idle_heartbeat=0.1, stream="HB")
            got = [(await osub.next_msg(timeout=2)).data]
            cons = [c.name for c in await js.consumers_info("HB") if c.name != "HBC"]
            for c in cons:
                await js.delete_consumer("HB", c)
            await js.publish("hb.2", b"two")
            got.append((await osub.next_msg(timeout=3)).data)
            out["ordered after delete"] = got
            await osub.unsubscribe()
            await js.delete_stream("HB")
            return out
        finally:
            await nc.close()
            await r.close()

    got = same(await run_both(pair, scenario))
    assert got["ordered after delete"] == [b"one", b"two"]
    assert got["fetch, missing consumer"] == "ServiceUnavailableError"  # 503 no responders: fails at once
    assert got["consumer info, missing"].endswith("err_code=10014 description='consumer not found'")
    assert ("hbd.deliver", None, "NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\nNats-Last-Stream: 1\r\n\r\n",
            "") in got["push deliveries"]


# ---------------------------------------------------------------------------------------------------
# Per-message TTL, delete markers, and the expected-last-subject-sequence headers


def _h(*pairs: tuple[str, str]) -> bytes:
    return b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in pairs) + b"\r\n"


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_message_ttl_markers_and_expectations_like_nats_server(pair, storage):
    async def scenario(kind: str, url: str) -> list:
        from jsdiff import norm_json
        r = await Raw.open(url)
        out: list = []

        async def api(label: str, subject: str, body) -> dict:
            ans = await r.api(subject, body)
            out.append((label, norm_json(ans, drop={"config", "state", "created", "ts"})))
            return ans

        async def pub(label: str, subject: str, payload: str = "", hdr: bytes | None = None) -> None:
            out.append((label, await r.publish(subject, payload, hdr=hdr)))

        try:
            for name in ("TTL", "NOTTL", "BADM", "BADM2", "TTL2"):
                await r.api(f"$JS.API.STREAM.DELETE.{name}")
            await api("ttl stream", "$JS.API.STREAM.CREATE.TTL", {
                "name": "TTL", "subjects": ["t.>"], "storage": storage, "allow_msg_ttl": True,
                "subject_delete_marker_ttl": 1_000_000_000, "allow_direct": True, "max_msgs_per_subject": 5})
            await api("no ttl stream", "$JS.API.STREAM.CREATE.NOTTL", {
                "name": "NOTTL", "subjects": ["nt.>"], "storage": storage})
            await api("marker ttl without msg ttl", "$JS.API.STREAM.CREATE.BADM", {
                "name": "BADM", "subjects": ["bm.>"], "storage": storage, "subject_delete_marker_ttl": 1_000_000_000})
            await api("marker ttl too small", "$JS.API.STREAM.CREATE.BADM2", {
                "name": "BADM2", "subjects": ["bm2.>"], "storage": storage, "allow_msg_ttl": True,
                "subject_delete_marker_ttl": 500_000_000})
            await api("marker ttl 2s", "$JS.API.STREAM.CREATE.TTL2", {
                "name": "TTL2", "subjects": ["t2.>"], "storage": storage, "allow_msg_ttl": True,
                "subject_delete_marker_ttl": 2_000_000_000, "allow_direct": True})
            await pub("ttl below the marker ttl", "t2.a", "a", _h(("X", "y"), ("Nats-TTL", "1s"), ("Z", "w")))
            out.append(("ttl raised to the marker ttl", await r.request("$JS.API.DIRECT.GET.TTL2.t2.a")))
            await pub("ttl NEVER", "t2.b", "b", _h(("Nats-TTL", "NEVER")))
            await pub("ttl empty", "t2.b", "b", _h(("Nats-TTL", "")))
            await pub("ttl invalid on a stream without it", "nt.a", "x", _h(("Nats-TTL", "soon")))
            await pub("ttl never on a stream without it", "nt.a", "x", _h(("Nats-TTL", "never")))
            await pub("ttl 1s", "t.a", "a", _h(("Nats-TTL", "1s")))
            await pub("ttl 1 (seconds)", "t.b", "b", _h(("Nats-TTL", "1")))
            await pub("ttl never", "t.c", "c", _h(("Nats-TTL", "never")))
            await pub("ttl invalid", "t.d", "d", _h(("Nats-TTL", "soon")))
            await pub("ttl too small", "t.d", "d", _h(("Nats-TTL", "500ms")))
            await pub("ttl zero", "t.d", "d", _h(("Nats-TTL", "0")))
            await pub("ttl negative", "t.d", "d", _h(("Nats-TTL", "-1")))
            await pub("ttl on a stream without it", "nt.a", "x", _h(("Nats-TTL", "1s")))
            # expected last sequence per subject, and for another subject (or filter) named in the header
            await pub("plain e1", "t.e1", "1")
            await pub("plain e2", "t.e2", "2")
            await pub("expect last subj seq ok", "t.e1", "3", _h(("Nats-Expected-Last-Subject-Sequence", "4")))
            await pub("expect last subj seq wrong", "t.e1", "4", _h(("Nats-Expected-Last-Subject-Sequence", "4")))
            await pub("expect for other subject ok", "t.e1", "5", _h(
                ("Nats-Expected-Last-Subject-Sequence", "5"), ("Nats-Expected-Last-Subject-Sequence-Subject", "t.e2")))
            await pub("expect for wildcard ok", "t.e3", "6", _h(
                ("Nats-Expected-Last-Subject-Sequence", "7"), ("Nats-Expected-Last-Subject-Sequence-Subject", "t.e*")))
            await pub("expect for wildcard wrong", "t.e3", "7", _h(
                ("Nats-Expected-Last-Subject-Sequence", "6"), ("Nats-Expected-Last-Subject-Sequence-Subject", "t.>")))
            await pub("expect subject without seq", "t.e3", "8", _h(
                ("Nats-Expected-Last-Subject-Sequence-Subject", "t.e1")))
            await pub("expect zero for new subject", "t.new", "9", _h(("Nats-Expected-Last-Subject-Sequence", "0")))
            await pub("expect zero for old subject", "t.e1", "10", _h(("Nats-Expected-Last-Subject-Sequence", "0")))
            await pub("expect bad number", "t.e1", "11", _h(("Nats-Expected-Last-Subject-Sequence", "x")))
            out.append(("before expiry", await r.request("$JS.API.DIRECT.GET.TTL.t.a")))
            await asyncio.sleep(1.6)
            # expired: a delete marker takes the last place of each subject, with its reason and TTL
            for s in ("t.a", "t.b", "t.c"):
                out.append((f"after expiry {s}", await r.request(f"$JS.API.DIRECT.GET.TTL.{s}")))
            info = await r.api("$JS.API.STREAM.INFO.TTL")
            st = info["state"]
            out.append(("state after expiry", {k: st.get(k) for k in ("messages", "first_seq", "last_seq",
                                                                         "num_deleted", "num_subjects")}))
            return out
        finally:
            await r.close()

    results = await run_both(pair, scenario)
    if "go" in results:
        mism = [(a[0], a[1], b[1]) for a, b in zip(results["rillet"], results["go"]) if a != b]
        assert not mism, "\n".join(f"{lab}:\n  rillet {ra!r}\n  go     {ga!r}" for lab, ra, ga in mism)
    got = dict(results["rillet"])
    assert got["ttl raised to the marker ttl"][0][0].startswith("NATS/1.0\r\nX: y\r\nZ: w\r\nNats-TTL: 2\r\n")
    assert got["ttl zero"]["error"]["err_code"] == 10165
    assert got["expect subject without seq"]["error"]["err_code"] == 10193
    assert got["expect for other subject ok"] == {"stream": "TTL", "seq": 10 - 3}
    assert got["after expiry t.a"][0][0].startswith("NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\n")


# ---------------------------------------------------------------------------------------------------
# Account limits: as reported ($JS.API.INFO) and as enforced


LCONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
accounts {
  L: {
    jetstream: { max_mem: 4096, max_file: 1048576, max_streams: 2, max_consumers: 2, max_ack_pending: 100 }
    users: [{user: l, password: l}]
  }
  U: {
    jetstream: enabled
    users: [{user: u, password: u}]
  }
}
"""


@pytest.fixture(scope="module")
def lpair():
    p = ServerPair(LCONF)
    yield p
    p.stop()


async def test_account_limits_reported_and_enforced_like_nats_server(lpair):
    from jsdiff import norm_json

    async def scenario(kind: str, url: str) -> list:
        out: list = []
        r = await Raw.open(url, user="l", **{"pass": "l"})
        u = await Raw.open(url, user="u", **{"pass": "u"})

        async def api(label: str, subject: str, body=b"", who: Raw = r) -> dict:
            ans = await who.api(subject, body)
            keep = ans
            if "api" in ans:
                # the API level goes with the server version reported (Rillet says 2.12: level 2)
                keep = {**ans, "api": {k: v for k, v in ans["api"].items() if k != "level"}}
            if "config" in ans:  # a stream or consumer info: its config is compared elsewhere
                keep = {k: v for k, v in ans.items() if k in ("type", "error", "did_create")}
            out.append((label, norm_json(keep)))
            return ans

        try:
            await api("info, limited", "$JS.API.INFO")
            await api("info, unlimited", "$JS.API.INFO", who=u)
            await api("memory stream without max_bytes", "$JS.API.STREAM.CREATE.M1",
                      {"name": "M1", "subjects": ["m1"], "storage": "memory"})
            await api("memory stream over the account", "$JS.API.STREAM.CREATE.M2",
                      {"name": "M2", "subjects": ["m2"], "storage": "memory", "max_bytes": 8192})
            await api("memory stream within", "$JS.API.STREAM.CREATE.M3",
                      {"name": "M3", "subjects": ["m3"], "storage": "memory", "max_bytes": 2048})
            await api("file stream within", "$JS.API.STREAM.CREATE.F1",
                      {"name": "F1", "subjects": ["f1"], "storage": "file", "max_bytes": 1024})
            await api("third stream", "$JS.API.STREAM.CREATE.F2",
                      {"name": "F2", "subjects": ["f2"], "storage": "file", "max_bytes": 1024})
            for i in range(3):
                await api(f"consumer {i}", f"$JS.API.CONSUMER.CREATE.M3.C{i}",
                          {"stream_name": "M3", "config": {"durable_name": f"C{i}", "ack_policy": "explicit"}})
            await api("consumer over max_ack_pending", "$JS.API.CONSUMER.CREATE.F1.X",
                      {"stream_name": "F1", "config": {"durable_name": "X", "ack_policy": "explicit",
                                                       "max_ack_pending": 1000}})
            # publishing until the stream's bytes are used up
            for i in range(4):
                ack = await r.publish("m3", "x" * 700)
                out.append((f"publish {i}", ack))
            await api("info after use", "$JS.API.INFO")
            # a stream without max_bytes fills the account's memory: the publish that would pass it fails
            for i in range(3):
                out.append((f"publish m1 {i}", await r.publish("m1", "y" * 1200)))
            await api("info when full", "$JS.API.INFO")
            await api("update over the account", "$JS.API.STREAM.UPDATE.M3",
                      {"name": "M3", "subjects": ["m3"], "storage": "memory", "max_bytes": 100000})
            await api("delete a stream", "$JS.API.STREAM.DELETE.M1")
            await api("file stream now", "$JS.API.STREAM.CREATE.F1",
                      {"name": "F1", "subjects": ["f1"], "storage": "file", "max_bytes": 4096})
            await api("info with a file stream", "$JS.API.INFO")
            await api("delete the file stream", "$JS.API.STREAM.DELETE.F1")
            # reservations count, not bytes stored: M3 reserves 2048 of the 4096
            await api("reserving what another stream reserves", "$JS.API.STREAM.CREATE.M4",
                      {"name": "M4", "subjects": ["m4"], "storage": "memory", "max_bytes": 3000})
            await api("reserving the rest", "$JS.API.STREAM.CREATE.M4",
                      {"name": "M4", "subjects": ["m4"], "storage": "memory", "max_bytes": 2048})
            await api("update over the rest", "$JS.API.STREAM.UPDATE.M3",
                      {"name": "M3", "subjects": ["m3"], "storage": "memory", "max_bytes": 2049})
            await api("update smaller", "$JS.API.STREAM.UPDATE.M3",
                      {"name": "M3", "subjects": ["m3"], "storage": "memory", "max_bytes": 1000})
            await api("update to no max_bytes", "$JS.API.STREAM.UPDATE.M4",
                      {"name": "M4", "subjects": ["m4"], "storage": "memory"})
            await api("info at the end", "$JS.API.INFO")
            return out
        finally:
            await r.close()
            await u.close()

    results = await run_both(lpair, scenario)
    if "go" in results:
        mism = [(a[0], a[1], b[1]) for a, b in zip(results["rillet"], results["go"]) if a != b]
        assert not mism, "\n".join(f"{lab}:\n  rillet {ra!r}\n  go     {ga!r}" for lab, ra, ga in mism)
    got = dict(results["rillet"])
    assert got["reserving what another stream reserves"]["error"]["err_code"] == 10028
    assert got["update over the rest"]["error"]["err_code"] == 10028
    assert (got["info at the end"]["reserved_memory"], got["info at the end"]["reserved_storage"]) == (1000, 0)


async def test_api_imported_without_prefix_like_nats_server(xpair):
    """An account without JetStream that imports $JS.API.> as is: its requests reach the exporter's
    JetStream only (its own API, which would answer 'not enabled', is shadowed)."""
    async def scenario(kind: str, url: str) -> list:
        from jsdiff import norm_json
        a = await Raw.open(url, user="a", **{"pass": "a"})
        c = await Raw.open(url, user="c", **{"pass": "c"})
        out = []
        try:
            ans = await a.api("$JS.API.STREAM.CREATE.SHARED", {"name": "SHARED", "subjects": ["shared.>"],
                                                               "storage": "memory"})
            assert "error" not in ans, ans
            for subject in ("$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.SHARED"):
                ans = await c.request(subject, b"", timeout=0.5)
                ans += await c.request("$JS.API.STREAM.INFO.NOPE", b"", timeout=0.5)
                await c.settle(0.1)
                out.append((subject, [norm_json(json.loads(p)) if p else h for h, p in
                                      (x if isinstance(x, tuple) else (x, b"") for x in ans)]))
            return out
        finally:
            await a.close()
            await c.close()

    got = same(await run_both(xpair, scenario))
    assert got[0][1][0]["streams"] >= 1  # the exporter's account info, not a 'not enabled' error


async def test_direct_get_too_many_results_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        try:
            ans = await r.api("$JS.API.STREAM.CREATE.MANY", {"name": "MANY", "subjects": ["many.>"],
                                                             "storage": "memory", "allow_direct": True})
            assert "error" not in ans, ans
            r.rc.send(b"".join(b"PUB many.%d 1\r\nx\r\n" % i for i in range(1026)))
            await r.rc.ping()
            await asyncio.sleep(0.1)  # (stored by the stream's own path: let it drain on both servers)
            out = [("1026 subjects", await r.request("$JS.API.DIRECT.GET.MANY", {"multi_last": ["many.>"]},
                                                     until_eob=True)),
                   ("1024 subjects", (await r.request("$JS.API.DIRECT.GET.MANY",
                                                      {"multi_last": ["many.>"], "up_to_seq": 1024},
                                                      until_eob=True))[-1])]
            await r.api("$JS.API.STREAM.DELETE.MANY")
            return out
        finally:
            await r.close()

    got = dict(same(await run_both(pair, scenario)))
    assert got["1026 subjects"] == [("NATS/1.0 413 Too Many Results\r\n\r\n", b"")]
    assert got["1024 subjects"] == ("NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 1024\r\n"
                                    "Nats-UpTo-Sequence: 1024\r\n\r\n", b"")


async def test_msg_get_and_api_counts_like_nats_server(pair):
    """STREAM.MSG.GET (the API form of a get): no_hdr, and a found message is not counted as an API call."""
    async def scenario(kind: str, url: str) -> list:
        from jsdiff import norm_json
        r = await Raw.open(url)
        out = []
        try:
            await r.api("$JS.API.STREAM.CREATE.MG", {"name": "MG", "subjects": ["mg.>"], "storage": "memory"})
            await r.publish("mg.a", "x", hdr=b"NATS/1.0\r\nH: 1\r\n\r\n")
            before = (await r.api("$JS.API.INFO"))["api"]
            for body in ({"seq": 1}, {"seq": 1, "no_hdr": True}, {"last_by_subj": "mg.a"}, {"seq": 9}, {}):
                out.append((json.dumps(body), norm_json(await r.api("$JS.API.STREAM.MSG.GET.MG", body))))
            after = (await r.api("$JS.API.INFO"))["api"]
            out.append(("counted", (after["total"] - before["total"], after["errors"] - before["errors"])))
            await r.api("$JS.API.STREAM.DELETE.MG")
            return out
        finally:
            await r.close()

    got = dict(same(await run_both(pair, scenario)))
    assert "hdrs" not in got['{"seq": 1, "no_hdr": true}']["message"]
    assert got["counted"] == (3, 2)  # the two errors and the INFO request itself


DCONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}", domain: hub }
"""


@pytest.fixture(scope="module")
def dpair():
    p = ServerPair(DCONF)
    yield p
    p.stop()


async def test_domain_and_kv_ttl_through_nats_py_like_nats_server(dpair):
    """nats-py with a JetStream domain ($JS.hub.API): streams, acks, pull consumers, direct gets, and a KV
    bucket with per-message TTL and subject delete markers (what a watcher sees when a key expires)."""
    import nats

    async def scenario(kind: str, url: str) -> dict:
        out: dict = {}
        nc = await nats.connect(url)
        try:
            js = nc.jetstream(domain="hub")
            si = await js.add_stream(name="DOM", subjects=["dom.>"], storage="memory", allow_direct=True)
            out["stream"] = (si.config.name, si.config.allow_direct)
            ack = await js.publish("dom.a", b"1")
            out["ack"] = (ack.stream, ack.seq, ack.domain)
            m = await js.get_last_msg("DOM", "dom.a", direct=True)
            out["direct get"] = (m.subject, m.seq, m.data)
            sub = await js.pull_subscribe("dom.>", durable="DP", stream="DOM")
            msgs = await sub.fetch(1, timeout=2)
            out["fetch"] = [(x.subject, x.data, x.metadata.domain) for x in msgs]
            await msgs[0].ack_sync()
            kv = await js.create_key_value(bucket="TK", history=3, storage="memory", limit_marker_ttl=1)
            out["kv marker ttl"] = (await kv.status()).marker_ttl
            rev = await kv.create("k", b"v", msg_ttl=1)
            out["kv create"] = rev
            try:
                await kv.create("k", b"again")
                out["kv create again"] = "ok"
            except Exception as e:
                out["kv create again"] = type(e).__name__
            w = await kv.watch("k")
            seen = []
            e = await w.updates(timeout=2)
            seen.append((e.key, e.value, e.revision, e.operation))
            e = await w.updates(timeout=2)  # the initial None marker
            seen.append(e)
            e = await w.updates(timeout=3)  # the delete marker placed when the key expires
            seen.append((e.key, e.value, e.revision, e.operation))
            await w.stop()
            out["kv watch"] = seen
            try:
                await kv.get("k")
                out["kv get after expiry"] = "found"
            except Exception as e:
                out["kv get after expiry"] = type(e).__name__
            try:  # (nats-py 2.16 does not see a server-placed marker as a deleted key here: both refuse)
                out["kv create after expiry"] = await kv.create("k", b"new")
            except Exception as e:
                out["kv create after expiry"] = type(e).__name__
            return out
        finally:
            await nc.close()

    got = same(await run_both(dpair, scenario))
    assert got["ack"] == ("DOM", 1, "hub")
    assert got["kv watch"][0] == ("k", b"v", 1, None) and got["kv watch"][2][3] == "PURGE"


async def test_no_jetstream_like_nats_server():
    """A server without JetStream: API requests and pulls get no responders; nats-py fails at once."""
    import nats
    p = ServerPair("listen: 127.0.0.1:-1\n")
    try:
        async def scenario(kind: str, url: str) -> list:
            r = await Raw.open(url)
            nc = await nats.connect(url)
            out = []
            try:
                for subject in ("$JS.API.INFO", "$JS.API.STREAM.INFO.S", "$JS.API.CONSUMER.MSG.NEXT.S.C",
                                "$JS.API.DIRECT.GET.S"):
                    out.append((subject, await r.request(subject, b'{"seq":1}', timeout=0.5)))
                try:
                    await nc.jetstream().account_info()
                    out.append(("nats-py account info", "ok"))
                except Exception as e:
                    out.append(("nats-py account info", type(e).__name__))
                return out
            finally:
                await nc.close()
                await r.close()

        got = dict(same(await run_both(p, scenario)))
        assert got["$JS.API.INFO"] == [("NATS/1.0 503\r\nNats-Subject: $JS.API.INFO\r\n\r\n", b"")]
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------------
# Operator mode: JetStream limits from account JWTs (tiered or not), and JetStream exported by JWT


async def test_operator_mode_limits_and_jetstream_imports_like_nats_server(tmp_path):
    import nats

    from tests.test_operator import Operator, creds

    op = Operator()
    base = {"conn": -1, "subs": -1, "payload": -1, "data": -1, "imports": -1, "exports": -1, "wildcards": True}
    akp, apub, _ = op.account("A", limits={**base, "mem_storage": 1 << 20, "disk_storage": -1, "streams": 3,
                                          "consumer": -1},
                              exports=[{"name": "next", "subject": "$JS.API.CONSUMER.MSG.NEXT.S.PULL",
                                        "type": "service", "response_type": "Stream"},
                                       {"name": "ack", "subject": "$JS.ACK.S.>", "type": "service"}])
    tkp, _, _ = op.account("T", limits={**base, "tiered_limits": {"R1": {
        "mem_storage": 1 << 20, "disk_storage": 1 << 20, "streams": 2, "consumer": 4}}})
    ckp, _, _ = op.account("C", limits=base, imports=[
        {"name": "next", "account": apub, "subject": "$JS.API.CONSUMER.MSG.NEXT.S.PULL", "type": "service"},
        {"name": "ack", "account": apub, "subject": "$JS.ACK.S.>", "type": "service"}])
    users = {name: creds(tmp_path, *op.user(kp), name=name) for name, kp in (("a", akp), ("t", tkp), ("c", ckp))}
    p = ServerPair(op.config('jetstream { store_dir: "{store}" }'))
    try:
        async def scenario(kind: str, url: str) -> dict:
            from jsdiff import norm_json
            out: dict = {}
            na = await nats.connect(url, user_credentials=users["a"], allow_reconnect=False)
            nt = await nats.connect(url, user_credentials=users["t"], allow_reconnect=False)
            nc = await nats.connect(url, user_credentials=users["c"], allow_reconnect=False)
            try:
                for name, n in (("A", na), ("T", nt)):
                    msg = await n.request("$JS.API.INFO", b"", timeout=2)
                    out[f"info {name}"] = norm_json(json.loads(msg.data))
                jt = nt.jetstream()
                await jt.add_stream(name="T1", subjects=["t1"], storage="memory", max_bytes=1000)
                msg = await nt.request("$JS.API.INFO", b"", timeout=2)
                out["info T with a stream"] = norm_json(json.loads(msg.data))
                ja = na.jetstream()
                await ja.add_stream(name="S", subjects=["s.>"], storage="memory")
                await ja.add_consumer("S", durable_name="PULL", ack_policy="explicit")
                for i in range(3):
                    await ja.publish(f"s.{i}", str(i).encode())
                # (account JWTs cannot export overlapping subjects: the documented per-consumer exports)
                sub = await nc.jetstream().pull_subscribe_bind("PULL", stream="S")
                try:
                    msgs = await sub.fetch(3, timeout=1)
                except nats.errors.TimeoutError:
                    msgs = []
                out["fetch through JWT import"] = [(m.subject, m.data) for m in msgs]
                for m in msgs:
                    await m.ack()
                await nc.flush()
                await asyncio.sleep(0.05)
                ci = await ja.consumer_info("S", "PULL")
                out["acked"] = (ci.ack_floor.stream_seq, ci.num_ack_pending)
                return out
            finally:
                for n in (na, nt, nc):
                    await n.close()

        got = same(await run_both(p, scenario))
        assert got["info T with a stream"]["tiers"]["R1"]["reserved_memory"] == 1000
        assert got["info T"]["limits"]["max_streams"] == 0
        assert got["info T"]["tiers"]["R1"]["limits"]["max_streams"] == 2
        assert got["fetch through JWT import"] == [("s.0", b"0"), ("s.1", b"1"), ("s.2", b"2")]
        assert got["acked"] == (3, 0)
    finally:
        p.stop()
