"""A record damaged on disk while the server was down is found when the store opens at the next start.

On one server (R1: no replica to fetch it from) the message is reported as damage found while running is
(tests/test_cluster_damage_running.py): an error in the log, ``state.lost`` in stream info and the
``$JS.EVENT.ADVISORY.STREAM.DATA_LOST.<stream>`` advisory, sent once the server has started (read here from a
stream capturing it, recovered in the same start); gets answer it as a missing message, never with the damaged
bytes.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import glob
import io
import json
import os

import nats

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options
from rillet.server.logging import Logger

N = 10


def _payload(i: int) -> bytes:
    return b"dmg-%03d." % i + b"y" * 40


@contextlib.asynccontextmanager
async def _server(store_dir):
    buf = io.StringIO()
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(store_dir)))
    async with run_server(opts, log=Logger(out=buf)) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            yield nc, buf
        finally:
            await nc.close()


def _flip(store_dir, stream: str, i: int) -> None:
    """Flip one bit inside message ``i``'s stored payload in its block file (the record then fails its checksum)."""
    needle = _payload(i)
    hits = 0
    for path in glob.glob(os.path.join(str(store_dir), "jetstream", "*", "streams", stream, "store", "msgs", "*.blk")):
        with open(path, "rb") as f:
            b = f.read()
        k = b.find(needle)
        if k < 0:
            continue
        with open(path, "r+b") as f:
            f.seek(k + 5)
            f.write(bytes([b[k + 5] ^ 0x04]))
        hits += 1
    assert hits == 1, f"payload {i} found in {hits} block files"


async def _req(nc, subject: str, body: dict | None = None) -> dict:
    return json.loads((await nc.request(subject, json.dumps(body or {}).encode(), timeout=5)).data)


async def _advisories(nc, want: int, timeout: float = 10.0) -> list[dict]:
    """The advisories the capturing stream ADV holds, once it holds ``want`` (polled against a deadline)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        info = await _req(nc, "$JS.API.STREAM.INFO.ADV")
        n = info["state"]["messages"]
        if n >= want or loop.time() > deadline:
            break
        await asyncio.sleep(0.05)
    out = []
    for seq in range(1, n + 1):
        r = await _req(nc, "$JS.API.STREAM.MSG.GET.ADV", {"seq": seq})
        out.append(json.loads(base64.b64decode(r["message"]["data"])))
    return out


async def test_damage_found_at_open_is_reported_with_the_advisory(tmp_path):
    async with _server(tmp_path) as (nc, _):
        js = nc.jetstream()
        await js.add_stream(name="ADV", subjects=["$JS.EVENT.ADVISORY.STREAM.DATA_LOST.>"], storage="file")
        await js.add_stream(name="S", subjects=["s.>"], storage="file", allow_direct=True)
        for i in range(1, N + 1):
            await js.publish("s.x", _payload(i))
    _flip(tmp_path, "S", 5)

    async with _server(tmp_path) as (nc, buf):
        advs = await _advisories(nc, 1)
        assert len(advs) == 1, advs
        adv = advs[0]
        assert adv["type"] == "io.nats.jetstream.advisory.v1.stream_data_lost", adv
        assert adv["stream"] == "S" and adv["lost"]["msgs"] == [5], adv
        info = await _req(nc, "$JS.API.STREAM.INFO.S")
        assert info["state"]["lost"]["msgs"] == [5] and info["state"]["messages"] == N - 1, info["state"]
        # the damaged record's bytes on disk (more than its payload: the record's header and checksum too)
        assert info["state"]["lost"]["bytes"] > len(_payload(5)), info["state"]
        assert adv["lost"]["bytes"] == info["state"]["lost"]["bytes"], (adv, info["state"])
        # a direct get answers as for a message that is not there (nats-server's 404), never the damaged bytes
        m = await nc.request("$JS.API.DIRECT.GET.S", json.dumps({"seq": 5}).encode(), timeout=5)
        assert m.headers and m.headers.get("Status") == "404", (m.headers, m.data)
        assert m.data == b""
        r = await _req(nc, "$JS.API.STREAM.MSG.GET.S", {"seq": 5})
        assert r.get("error", {}).get("err_code") == 10037 and r["error"]["code"] == 404, r
        m = await nc.request("$JS.API.DIRECT.GET.S", json.dumps({"seq": 6}).encode(), timeout=5)
        assert m.data == _payload(6)
        log = buf.getvalue()
        assert "1 message(s) lost to damaged records found when the store opened (first 5)" in log, log



async def test_damage_found_at_open_is_reported_once_across_restarts(tmp_path):
    # the damaged record stays in its block: every open finds it and stream info shows it lost, but the error
    # line and the advisory come once (damage.json beside the store keeps what was reported); damage found
    # later is reported, alone
    async with _server(tmp_path) as (nc, _):
        js = nc.jetstream()
        await js.add_stream(name="ADV", subjects=["$JS.EVENT.ADVISORY.STREAM.DATA_LOST.>"], storage="file")
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        for i in range(1, N + 1):
            await js.publish("s.x", _payload(i))
    _flip(tmp_path, "S", 5)
    async with _server(tmp_path) as (nc, buf):
        assert [a["lost"]["msgs"] for a in await _advisories(nc, 1)] == [[5]]
        assert "1 message(s) lost to damaged records found when the store opened (first 5)" in buf.getvalue()
    report = json.loads(open(os.path.join(str(tmp_path), "jetstream", "$G", "streams", "S", "damage.json")).read())
    assert report["reported"] == [[5, 5]] and report["detected"], report

    async with _server(tmp_path) as (nc, buf):  # nothing new: stream info shows it, nobody is told again
        info = await _req(nc, "$JS.API.STREAM.INFO.S")
        assert info["state"]["lost"]["msgs"] == [5] and info["state"]["messages"] == N - 1, info["state"]
        await _req(nc, "$JS.API.STREAM.INFO.ADV")  # (after the start's pass: a report would be out by now)
        assert "lost to damaged records" not in buf.getvalue(), buf.getvalue()
    _flip(tmp_path, "S", 8)
    async with _server(tmp_path) as (nc, buf):  # newly found: reported, alone
        advs = await _advisories(nc, 2)
        assert [a["lost"]["msgs"] for a in advs] == [[5], [8]], advs
        log = buf.getvalue()
        assert "1 message(s) lost to damaged records found when the store opened (first 8, 2 in all)" in log, log
        info = await _req(nc, "$JS.API.STREAM.INFO.S")
        assert info["state"]["lost"]["msgs"] == [5, 8] and info["state"]["messages"] == N - 2, info["state"]
        # purged: nothing damaged is left, nor kept as reported
        await _req(nc, "$JS.API.STREAM.PURGE.S")
        info = await _req(nc, "$JS.API.STREAM.INFO.S")
        assert "lost" not in info["state"], info["state"]
    async with _server(tmp_path) as (nc, buf):
        info = await _req(nc, "$JS.API.STREAM.INFO.S")
        assert "lost" not in info["state"] and info["state"]["messages"] == 0, info["state"]
        assert len(await _advisories(nc, 2)) == 2
        assert "lost to damaged records" not in buf.getvalue(), buf.getvalue()

def test_damage_found_at_open_on_r1_in_a_cluster(tmp_path):
    # an R1 stream of a 3-server cluster: its one server is stopped, a record damaged, the server started again;
    # the stream (no replica to fetch from) reports it as on one server once it leads again
    from helpers import cluster_members, start_members
    from test_cluster_refetch import _request
    members = cluster_members(str(tmp_path), "o", "do")
    try:
        start_members(members)
        urls = [m.url for m in members]
        asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.ADV", {
            "name": "ADV", "subjects": ["$JS.EVENT.ADVISORY.STREAM.DATA_LOST.>"], "num_replicas": 3,
            "storage": "file"}))
        info = asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.S", {
            "name": "S", "subjects": ["s.>"], "num_replicas": 1, "storage": "file", "allow_direct": True}))

        async def publish() -> None:
            nc = await nats.connect(servers=urls)
            try:
                js = nc.jetstream()
                for i in range(1, N + 1):
                    await js.publish("s.x", _payload(i), timeout=10)
            finally:
                await nc.close()
        asyncio.run(publish())
        asyncio.run(_request(urls, "$JS.API.STREAM.INFO.ADV", want=lambda d: "error" not in d and all(
            r.get("current") for r in d.get("cluster", {}).get("replicas", [])) and len(d["cluster"]["replicas"]) == 2))
        victim = next(m for m in members if m.name == info["cluster"]["leader"])
        victim.proc.stop()
        # the capturing stream leads on another server before the victim is back (it hears the advisory then)
        others = [m for m in members if m is not victim]
        asyncio.run(_request([m.url for m in others], "$JS.API.STREAM.INFO.ADV", want=lambda d: "error" not in d
                             and d.get("cluster", {}).get("leader") in {m.name for m in others}))
        _flip(os.path.join(str(tmp_path), victim.name, "store"), "S", 5)
        victim.start()
        victim.proc.wait_log("Server is ready", timeout=30)
        victim.proc.wait_log(r"Stream '\$G > S': 1 message\(s\) lost to damaged records found when the store "
                             r"opened \(first 5\)", timeout=60)  # (the server waits up to 30 s for its meta group)
        adv = asyncio.run(_request(urls, "$JS.API.STREAM.MSG.GET.ADV", {"seq": 1}, timeout=15))
        adv = json.loads(base64.b64decode(adv["message"]["data"]))
        assert adv["type"] == "io.nats.jetstream.advisory.v1.stream_data_lost", adv
        assert adv["stream"] == "S" and adv["lost"]["msgs"] == [5], adv
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.S", want=lambda d: "error" not in d and d.get(
            "state", {}).get("lost")))
        assert info["state"]["lost"]["msgs"] == [5] and info["state"]["messages"] == N - 1, info["state"]

        async def direct(seq: int):
            nc = await nats.connect(victim.url)
            try:
                return await nc.request("$JS.API.DIRECT.GET.S", json.dumps({"seq": seq}).encode(), timeout=5)
            finally:
                await nc.close()
        m = asyncio.run(direct(5))
        assert m.headers and m.headers.get("Status") == "404" and m.data == b"", (m.headers, m.data)
        assert asyncio.run(direct(6)).data == _payload(6)
    finally:
        for m in members:
            m.close()
