"""Atomic batch publish (nats-server 2.12, ``allow_atomic``): staged messages get an empty answer, the commit
stores the whole batch at once and is acked once with ``batch``/``count``; gaps, unknown batches, bad commits,
timeouts and failed checks store nothing. Answers and error texts as nats-server v2.15 sends them."""
from __future__ import annotations

import asyncio
import base64
import json

import nats

from rillet.jetstream import batch as batchmod
from rillet.server import Options
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions

INCOMPLETE = {"code": 400, "err_code": 10176, "description": "atomic publish batch is incomplete"}


def js_opts(tmp_path) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))


async def api(nc, subject: str, body: dict | None = None) -> dict:
    msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)
    return json.loads(msg.data)


def bh(bid: str, seq: int, commit: str | None = None, **extra: str) -> dict[str, str]:
    h = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(seq)}
    if commit is not None:
        h["Nats-Batch-Commit"] = commit
    h.update(extra)
    return h


async def send(nc, subject: str, data: bytes, headers: dict) -> list[bytes]:
    """Publish with a reply inbox and collect every answer (the first, then any that follow quickly)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, data, reply=inbox, headers=headers)
    out = []
    try:
        out.append((await sub.next_msg(timeout=1)).data)
        while True:
            m = await sub.next_msg(timeout=0.02)
            out.append(m.data)
    except Exception:
        pass
    await sub.unsubscribe()
    return out


def err(answers: list[bytes]) -> dict:
    assert len(answers) == 1
    d = json.loads(answers[0])
    assert d["seq"] == 0 and "stream" in d
    return d["error"]


async def setup(srv):
    nc = await nats.connect(srv.client_url)
    r = await api(nc, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a.>"], "allow_atomic": True})
    assert r["config"]["allow_atomic"] is True
    r = await api(nc, "$JS.API.STREAM.CREATE.N", {"name": "N", "subjects": ["n.>"]})
    assert "error" not in r
    return nc


async def state(nc, name="A") -> dict:
    return (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["state"]


async def test_atomic_batch(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await setup(srv)
        # staged messages: an empty answer each, nothing stored until the commit
        assert await send(nc, "a.x", b"m1", bh("b1", 1)) == [b""]
        assert await send(nc, "a.y", b"m2", bh("b1", 2)) == [b""]
        assert (await state(nc))["messages"] == 0
        ans = await send(nc, "a.x", b"m3", bh("b1", 3, "1"))
        assert ans == [b'{"stream":"A","seq":3,"batch":"b1","count":3}']
        assert (await state(nc))["messages"] == 3
        # stored with their batch headers, as nats-server stores them
        m = (await api(nc, "$JS.API.STREAM.MSG.GET.A", {"seq": 2}))["message"]
        assert base64.b64decode(m["hdrs"]) == b"NATS/1.0\r\nNats-Batch-Id: b1\r\nNats-Batch-Sequence: 2\r\n\r\n"
        # the id is free again: a later message of it is an unknown batch
        assert err(await send(nc, "a.x", b"u", bh("b1", 2))) == INCOMPLETE

        # commit on the first message is a batch of one
        ans = await send(nc, "a.x", b"one", bh("c1", 1, "1"))
        assert json.loads(ans[0]) == {"stream": "A", "seq": 4, "batch": "c1", "count": 1}
        # "eob" commits without storing the marker; the last stored message gets Nats-Batch-Commit: 1
        assert await send(nc, "a.x", b"e", bh("e2", 1)) == [b""]
        ans = await send(nc, "a.x", b"eob", bh("e2", 2, "eob"))
        assert json.loads(ans[0]) == {"stream": "A", "seq": 5, "batch": "e2", "count": 1}
        m = (await api(nc, "$JS.API.STREAM.MSG.GET.A", {"seq": 5}))["message"]
        assert b"Nats-Batch-Commit: 1" in base64.b64decode(m["hdrs"])
        assert err(await send(nc, "a.x", b"e", bh("e1", 1, "eob"))) == INCOMPLETE

        # staged without a reply, commit with one
        await nc.publish("a.x", b"nr", headers=bh("nr", 1))
        ans = await send(nc, "a.x", b"nr2", bh("nr", 2, "1"))
        assert json.loads(ans[0]) == {"stream": "A", "seq": 7, "batch": "nr", "count": 2}

        # a gap abandons the batch: nothing stored, later messages of it are unknown
        before = await state(nc)
        assert await send(nc, "a.x", b"g1", bh("g", 1)) == [b""]
        assert err(await send(nc, "a.x", b"g3", bh("g", 3))) == INCOMPLETE
        assert err(await send(nc, "a.x", b"g4", bh("g", 4, "1"))) == INCOMPLETE
        # no commit: nothing stored either
        assert await send(nc, "a.x", b"x", bh("nc", 1)) == [b""]
        assert (await state(nc))["messages"] == before["messages"]

        # header errors
        assert err(await send(nc, "a.x", b"u", bh("u", 2))) == INCOMPLETE
        assert err(await send(nc, "a.x", b"u", bh("big", 1001))) == {
            "code": 400, "err_code": 10199, "description": "atomic publish batch is too large: 1000"}
        missing = {"code": 400, "err_code": 10175, "description": "atomic publish sequence is missing"}
        assert err(await send(nc, "a.x", b"u", {"Nats-Batch-Id": "ms"})) == missing
        assert err(await send(nc, "a.x", b"u", {"Nats-Batch-Id": "ms", "Nats-Batch-Sequence": "x"})) == missing
        assert err(await send(nc, "a.x", b"u", bh("x" * 65, 1))) == {
            "code": 400, "err_code": 10179, "description": "atomic publish batch ID is invalid"}
        assert await send(nc, "a.x", b"u", bh("bc", 1)) == [b""]
        assert err(await send(nc, "a.x", b"u", bh("bc", 2, "yes"))) == {
            "code": 400, "err_code": 10200, "description": "atomic publish batch commit is invalid"}
        # an empty batch id is an ordinary message
        ans = await send(nc, "a.x", b"plain", {"Nats-Batch-Id": "", "Nats-Batch-Sequence": "1"})
        assert json.loads(ans[0]) == {"stream": "A", "seq": 8}

        # streams without allow_atomic refuse
        assert err(await send(nc, "n.x", b"m", bh("b2", 1))) == {
            "code": 400, "err_code": 10174, "description": "atomic publish is disabled"}
        assert (await state(nc, "N"))["messages"] == 0
        await nc.close()


async def test_atomic_batch_checks(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await setup(srv)
        for i in range(2):
            await nc.request("a.x", b"seed", timeout=1)

        async def batch(bid, *msgs):
            """msgs: (subject, extra headers); returns the commit's answers."""
            n = len(msgs)
            for i, (subj, extra) in enumerate(msgs[:-1], 1):
                assert await send(nc, subj, b"d", bh(bid, i, **extra)) == [b""]
            subj, extra = msgs[-1]
            return await send(nc, subj, b"d", bh(bid, n, "1", **extra))

        assert err(await batch("lm", ("a.x", {}), ("a.x", {"Nats-Expected-Last-Msg-Id": "z"}))) == {
            "code": 400, "err_code": 10177,
            "description": "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id"}
        # the expected last sequence is checked for where the message lands in the batch
        assert err(await batch("ls", ("a.x", {}), ("a.x", {"Nats-Expected-Last-Sequence": "2"}))) == {
            "code": 400, "err_code": 10071, "description": "wrong last sequence: 3"}
        assert err(await batch("ls2", ("a.x", {}), ("a.x", {"Nats-Expected-Last-Sequence": "3"}))) == {
            "code": 400, "err_code": 10164, "description": "wrong last sequence"}
        ans = await batch("ls3", ("a.x", {"Nats-Expected-Last-Sequence": "2"}), ("a.y", {}))
        assert json.loads(ans[0])["seq"] == 4
        assert err(await batch("lss", ("a.z", {}), ("a.z", {"Nats-Expected-Last-Subject-Sequence": "0"}))) == {
            "code": 400, "err_code": 10164, "description": "wrong last sequence"}
        assert err(await batch("d", ("a.x", {"Nats-Msg-Id": "q"}), ("a.x", {"Nats-Msg-Id": "q"}))) == {
            "code": 400, "err_code": 10201, "description": "atomic publish batch contains duplicate message id"}
        ans = await batch("d2", ("a.x", {"Nats-Msg-Id": "q"}),)
        assert json.loads(ans[0]) == {"stream": "A", "seq": 5, "batch": "d2", "count": 1}
        assert err(await batch("d3", ("a.x", {"Nats-Msg-Id": "q"}),))["err_code"] == 10201
        assert err(await batch("lss2", ("a.x", {"Nats-Expected-Last-Subject-Sequence": "9"}),)) == {
            "code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}
        assert err(await batch("lss3", ("a.x", {"Nats-Expected-Last-Subject-Sequence-Subject": "a.y"}),)) == {
            "code": 400, "err_code": 10193, "description": "missing sequence for expected last sequence per subject"}
        assert err(await batch("ttl", ("a.x", {"Nats-TTL": "5s"}),)) == {
            "code": 400, "err_code": 10166, "description": "per-message TTL is disabled"}
        assert err(await batch("es", ("a.x", {"Nats-Expected-Stream": "Q"}),)) == {
            "code": 400, "err_code": 10060, "description": "expected stream does not match"}

        def rollup(text):
            return {"code": 500, "err_code": 10111, "description": text}
        assert err(await batch("ru", ("a.x", {}), ("a.x", {"Nats-Rollup": "all"}))) == rollup("rollup not permitted")
        # nothing of the failed batches was stored
        assert (await state(nc))["messages"] == 5
        r = await api(nc, "$JS.API.STREAM.UPDATE.A", {"name": "A", "subjects": ["a.>"], "allow_atomic": True,
                                                     "allow_rollup_hdrs": True})
        assert "error" not in r
        assert err(await batch("ru2", ("a.x", {}), ("a.x", {"Nats-Rollup": "all"}))) == rollup("batch rollup all invalid")
        assert err(await batch("ru3", ("a.x", {}), ("a.x", {"Nats-Rollup": "sub"}))) == rollup("batch rollup sub invalid")
        assert err(await batch("ru4", ("a.x", {"Nats-Rollup": "bad"}),)) == rollup('rollup value invalid: "bad"')
        # nothing of the failed batches was stored
        assert (await state(nc))["messages"] == 5
        await nc.close()


async def test_atomic_batch_timeout_and_advisory(tmp_path, monkeypatch):
    monkeypatch.setattr(batchmod, "MAX_BATCH_TIMEOUT", 0.2)
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await setup(srv)
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.A")
        assert await send(nc, "a.x", b"t1", bh("t", 1)) == [b""]
        await asyncio.sleep(0.35)
        assert err(await send(nc, "a.x", b"t2", bh("t", 2, "1"))) == INCOMPLETE
        a = json.loads((await adv.next_msg(timeout=1)).data)
        assert a["type"] == "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
        assert (a["stream"], a["batch"], a["reason"]) == ("A", "t", "timeout")
        # a gap: reason incomplete
        assert await send(nc, "a.x", b"g1", bh("g", 1)) == [b""]
        assert err(await send(nc, "a.x", b"g3", bh("g", 3))) == INCOMPLETE
        a = json.loads((await adv.next_msg(timeout=1)).data)
        assert (a["batch"], a["reason"]) == ("g", "incomplete")
        assert (await state(nc))["messages"] == 0
        await nc.close()


async def test_atomic_batch_inflight_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(batchmod, "MAX_INFLIGHT_PER_STREAM", 2)
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await setup(srv)
        assert await send(nc, "a.x", b"1", bh("i1", 1)) == [b""]
        assert await send(nc, "a.x", b"1", bh("i2", 1)) == [b""]
        assert err(await send(nc, "a.x", b"1", bh("i3", 1))) == {
            "code": 429, "err_code": 10210, "description": "atomic publish too many inflight"}
        ans = await send(nc, "a.x", b"2", bh("i1", 2, "1"))
        assert json.loads(ans[0])["count"] == 2
        assert await send(nc, "a.x", b"1", bh("i3", 1)) == [b""]
        await nc.close()


async def test_atomic_batch_sourced_and_deleted_stream(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await setup(srv)
        r = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [{"name": "A"}]})
        assert "error" not in r
        assert await send(nc, "a.x", b"1", bh("s", 1)) == [b""]
        ans = await send(nc, "a.x", b"2", bh("s", 2, "1"))
        assert json.loads(ans[0])["count"] == 2
        # the sourcing stream stores the messages without the batch headers (as nats-server)
        for _ in range(100):
            if (await state(nc, "S"))["messages"] == 2:
                break
            await asyncio.sleep(0.02)
        m = (await api(nc, "$JS.API.STREAM.MSG.GET.S", {"seq": 2}))["message"]
        assert b"Nats-Batch" not in base64.b64decode(m.get("hdrs", ""))
        # deleting a stream forgets its staged batches
        assert await send(nc, "a.x", b"1", bh("d", 1)) == [b""]
        r = await api(nc, "$JS.API.STREAM.DELETE.A")
        assert r["success"] is True
        assert batchmod._inflight_total == 0
        await nc.close()


async def test_atomic_batch_store_error_mid_commit_stores_nothing(tmp_path, monkeypatch):
    """The disk fails while the batch's records are being written (the first records reached the file):
    the commit is answered with nats-server's store-failure error, none of the batch is stored (now or
    after a restart), and the stream goes on at the next sequence."""
    from rillet.jetstream.store import filestore as fsmod
    real = fsmod.os.pwritev
    failing = {"on": False, "calls": 0}

    def pwritev(fd, bufs, off):
        if failing["on"] and len(bufs) > 4:  # a multi-record (batch) write
            failing["calls"] += 1
            data = b"".join(bufs)
            real(fd, [data[: len(data) * 2 // 3]], off)  # the first records make it, then ENOSPC
            raise OSError(28, "No space left on device")
        return real(fd, bufs, off)

    monkeypatch.setattr(fsmod.os, "pwritev", pwritev)
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await setup(srv)
        ans = await send(nc, "a.x", b"first", bh("ok", 1, "1"))
        assert json.loads(ans[0])["seq"] == 1
        failing["on"] = True
        for i in range(1, 5):
            assert await send(nc, "a.x", b"m%d" % i, bh("bad", i)) == [b""]
        e = err(await send(nc, "a.x", b"m5", bh("bad", 5, "1")))
        assert failing["calls"] == 1
        assert (e["code"], e["err_code"], e["description"]) == (503, 10023, "insufficient resources")
        st = await state(nc)
        assert (st["messages"], st["last_seq"]) == (1, 1)
        failing["on"] = False
        for i in range(1, 3):
            assert await send(nc, "a.y", b"n%d" % i, bh("good", i)) == [b""]
        ans = await send(nc, "a.y", b"n3", bh("good", 3, "1"))
        assert json.loads(ans[0]) == {"stream": "A", "seq": 4, "batch": "good", "count": 3}
        await nc.close()
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        st = await state(nc)
        assert (st["messages"], st["first_seq"], st["last_seq"]) == (4, 1, 4)
        got = [base64.b64decode((await api(nc, "$JS.API.STREAM.MSG.GET.A", {"seq": s}))["message"]["data"])
               for s in range(1, 5)]
        assert got == [b"first", b"n1", b"n2", b"n3"]
        await nc.close()
