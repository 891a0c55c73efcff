"""Requests across service imports, Rillet and nats-server side by side (issue 19, points 4 and 5).

* nats.js's ``auth - request context``: a responder in the exporting account reads the requester's account
  from the ``Nats-Request-Info`` header nats-server adds when a request crosses a service import, and answers
  with a user allowed to publish only ``$SYS.REQ.USER.INFO`` and responses.
* The client info's fields: account and RTT, every detail through a ``share`` import, ``svc`` through a chain
  of imports, the server's name when the request enters the system account; the header is added last.
* No responders: a request matched by two imports gets a 503 only when neither delivered it (and nothing
  else in the importing account got it).
* nats.js's ``kv - cross account history``: a KV bucket used from another account through an imported,
  prefixed JetStream API and ``$KV`` import (puts on ``froma.$KV.a.C`` used to get a 503 from Rillet: the
  ``froma.>`` import matched them too and answered no responders while the other import stored the value).
"""
from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import nats  # noqa: E402
from nats.errors import NoRespondersError  # noqa: E402

from jsdiff import ServerPair, run_both, same  # noqa: E402

pytestmark = pytest.mark.asyncio


@pytest.fixture
def pair_of():
    pairs: list[ServerPair] = []

    def make(conf: str) -> ServerPair:
        p = ServerPair(conf)
        pairs.append(p)
        return p
    yield make
    for p in pairs:
        p.stop()


REQUEST_CONTEXT = """
listen: 127.0.0.1:-1
accounts: {
  S: {
    users: [{user: s, password: s,
             permission: {subscribe: ["q.>", "_INBOX.>"], publish: "$SYS.REQ.USER.INFO", allow_responses: true}}]
    exports: [{service: "q.>"}]
  }
  A: {
    users: [{user: a, password: a}]
    imports: [{service: {subject: "q.>", account: S}}]
  }
}
"""


async def test_request_context_nats_js(pair_of) -> None:
    """nats.js auth_test 'auth - request context', step by step."""
    pair = pair_of(REQUEST_CONTEXT)

    async def scenario(kind: str, url: str) -> dict:
        errors: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(repr(e))
        nc = await nats.connect(url, user="s", password="s", error_cb=on_error)
        ctx = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=10)).data)["data"]
        seen: list[dict] = []

        async def responder(msg) -> None:
            info = json.loads(msg.headers["Nats-Request-Info"]) if msg.headers else {}
            seen.append(info)
            await nc.publish(msg.reply, info.get("acc", "").encode())  # (nats.js: msg.respond())
        await nc.subscribe("q.>", cb=responder)
        await nc.flush()
        a = await nats.connect(url, user="a", password="a")
        answer = await a.request("q.hello", b"", timeout=10)
        await a.close()
        await nc.close()
        assert len(seen) == 1
        info = seen[0]
        assert isinstance(info.get("rtt"), int) and info["rtt"] > 0, info
        for kind_ in (ctx.get("permissions") or {}).values():  # (nats-server lists them in map order: sorted)
            for k, v in (kind_ if isinstance(kind_, dict) else {}).items():
                if isinstance(v, list):
                    kind_[k] = sorted(v)
        return {"ctx": ctx, "info_keys": list(info), "acc": info["acc"], "answer": answer.data,
                "errors": errors}

    r = same(await run_both(pair, scenario))
    assert r["ctx"]["account"] == "S" and r["ctx"]["permissions"]["responses"]["max"] == 1
    assert r["acc"] == "A" and r["answer"] == b"A"
    assert r["info_keys"] == ["acc", "rtt"]
    assert r["errors"] == []


INFO_FIELDS = """
listen: 127.0.0.1:-1
server_name: S1
accounts: {
  C: { users: [{user: c, password: c}], exports: [{service: "q.>"}, {service: "sh.>"}] }
  B: { users: [{user: b, password: b}], exports: [{service: "q.>"}],
       imports: [{service: {account: C, subject: "q.>"}}] }
  A: { users: [{user: a, password: a}],
       imports: [{service: {account: B, subject: "q.>"}}, {service: {account: C, subject: "sh.>"}, share: true},
                 {service: {account: SYS, subject: "sys.>"}}] }
  SYS: { users: [{user: sys, password: sys}], exports: [{service: "sys.>"}] }
}
system_account: SYS
"""


async def test_request_info_fields(pair_of) -> None:
    """The client info through a chain (svc), a sharing import (all details), into the system account
    (the server's name); a request's own headers come first, the client info last."""
    pair = pair_of(INFO_FIELDS)

    async def scenario(kind: str, url: str) -> dict:
        got: dict[str, tuple] = {}
        conns = []
        for user, subj in (("c", "q.>"), ("c", "sh.>"), ("sys", "sys.>")):
            nc = await nats.connect(url, user=user, password=user)

            async def cb(m, nc=nc) -> None:
                got[m.subject] = (list(m.headers or {}), json.loads(m.headers["Nats-Request-Info"]))
                await nc.publish(m.reply, b"ok")
            await nc.subscribe(subj, cb=cb)
            await nc.flush()
            conns.append(nc)
        a = await nats.connect(url, user="a", password="a", name="requester")
        for s in ("q.1", "sh.1", "sys.1"):
            assert (await a.request(s, b"", timeout=10, headers={"Foo": "bar"})).data == b"ok"
        for nc in conns + [a]:
            await nc.close()
        out = {}
        for s, (keys, info) in got.items():
            for k in ("start", "id", "rtt"):  # (times and ids differ; their presence is compared)
                if k in info:
                    info[k] = "<x>"
            out[s] = {"header_keys": keys, "info": info}
        return out

    r = same(await run_both(pair, scenario))
    assert r["q.1"]["info"] == {"acc": "A", "svc": "B", "rtt": "<x>"}
    assert r["q.1"]["header_keys"] == ["Foo", "Nats-Request-Info"]
    assert r["sh.1"]["info"]["user"] == "a" and r["sh.1"]["info"]["name"] == "requester"
    assert r["sys.1"]["info"] == {"acc": "A", "rtt": "<x>", "server": "S1"}


TWO_IMPORTS = """
listen: 127.0.0.1:-1
accounts: {
  A: { users: [{user: a, password: a}], exports: [{service: "x.>"}, {service: "y.>"}] }
  B: { users: [{user: b, password: b}],
       imports: [{service: {account: A, subject: "x.>"}, to: "p.x.>"}, {service: {account: A, subject: "y.>"}, to: "p.>"}] }
}
"""


async def test_no_responders_decided_by_whole_delivery(pair_of) -> None:
    """``p.x.1`` matches both imports; one of them reaches a responder: an answer, no 503. ``p.x.2``: both
    imports reach nobody: a 503. ``p.z``: only the second, nobody: a 503. A subscriber in B on ``p.x.2``
    (which does not answer): no 503, the request times out."""
    pair = pair_of(TWO_IMPORTS)

    async def scenario(kind: str, url: str) -> dict:
        na = await nats.connect(url, user="a", password="a")

        async def cb(m) -> None:
            await na.publish(m.reply, m.subject.encode())
        await na.subscribe("x.1", cb=cb)
        await na.flush()
        nb = await nats.connect(url, user="b", password="b")
        out = {}

        async def ask(subject: str) -> str:
            try:
                return (await nb.request(subject, b"", timeout=3)).data.decode()  # (generous: a loaded CI)
            except NoRespondersError:
                return "503"
            except asyncio.TimeoutError:
                return "timeout"
            except nats.errors.TimeoutError:
                return "timeout"
        for s in ("p.x.1", "p.x.2", "p.z"):
            out[s] = await ask(s)
        sub = await nb.subscribe("p.x.2")
        await nb.flush()
        out["p.x.2 with a silent subscriber"] = await ask("p.x.2")
        await sub.unsubscribe()
        await na.close()
        await nb.close()
        return out

    r = same(await run_both(pair, scenario))
    assert r == {"p.x.1": "x.1", "p.x.2": "503", "p.z": "503", "p.x.2 with a silent subscriber": "timeout"}


CROSS_ACCOUNT_KV = """
listen: 127.0.0.1:-1
jetstream: {store_dir: "{store}"}
accounts: {
  A: {
    jetstream: true
    users: [{user: a, password: a}]
    exports: [{service: "$JS.API.>"}, {service: "$KV.>"}, {stream: "forb.>"}]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {service: {subject: "$KV.>", account: A}, to: "froma.$KV.>"}
      {service: {subject: "$JS.API.>", account: A}, to: "froma.>"}
      {stream: {subject: "forb.>", account: A}}
    ]
  }
}
"""


async def test_kv_cross_account_history(pair_of) -> None:
    """nats.js kv_test 'kv - cross account history' (and 'watch'): B's client (inbox prefix forb, API prefix
    froma) puts C through ``froma.$KV.a.C`` and reads the bucket's history with a push consumer delivering
    to ``forb.*``; A's client sees B's value too."""
    pair = pair_of(CROSS_ACCOUNT_KV)

    async def scenario(kind: str, url: str) -> dict:
        na = await nats.connect(url, user="a", password="a")
        kv = await na.jetstream().create_key_value(bucket="a")
        await kv.put("A", b"A")
        await kv.put("B", b"B")
        await kv.delete("B")
        nb = await nats.connect(url, user="b", password="b", inbox_prefix="forb")
        info = json.loads((await nb.request("froma.STREAM.INFO.KV_a", b"", timeout=10)).data)
        put = await nb.request("froma.$KV.a.C", b"C", timeout=10)
        hist: list = []
        done = asyncio.get_running_loop().create_future()

        async def cb(m) -> None:
            if m.data or m.headers:
                if m.headers and m.headers.get("Status") == "100":
                    return  # (heartbeats, flow control)
                hist.append((m.subject, (m.headers or {}).get("KV-Operation", "PUT"), m.data))
                if len(hist) == 3 and not done.done():
                    done.set_result(None)
        await nb.subscribe("forb.hist", cb=cb)
        await nb.flush()
        cc = json.loads((await nb.request("froma.CONSUMER.CREATE.KV_a", json.dumps({
            "stream_name": "KV_a", "config": {"deliver_subject": "forb.hist", "deliver_policy": "all",
                                              "ack_policy": "none", "filter_subject": "$KV.a.>",
                                              "mem_storage": True, "inactive_threshold": 5_000_000_000}}).encode(),
            timeout=10)).data)
        await asyncio.wait_for(done, 5)
        c = await kv.get("C")
        await na.close()
        await nb.close()
        return {"subjects": info["config"]["subjects"], "put": json.loads(put.data),
                "consumer": sorted(cc), "history": hist, "a sees C": c.value}

    r = same(await run_both(pair, scenario))
    assert r["put"] == {"stream": "KV_a", "seq": 4}
    assert r["history"] == [("$KV.a.A", "PUT", b"A"), ("$KV.a.B", "DEL", b""), ("$KV.a.C", "PUT", b"C")]
    assert r["a sees C"] == b"C"
