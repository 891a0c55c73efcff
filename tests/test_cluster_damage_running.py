"""A record damaged on disk after the server started (a bit flipped in a block file) is found by a read.

R3: the stream leader's copy of message 101 is damaged; a MSG.GET through the leader finds it: the answer is
nats-server's for a missing message (never the damaged bytes), the leader hands its leadership over and fetches
the damaged range again from the other replicas (the path of damage found at open); made leader again, it
serves every message with its data. R1 (one server): the message is reported lost (stream info ``state.lost``,
the ``STREAM.DATA_LOST`` advisory, an error in the log) and never served."""
from __future__ import annotations

import asyncio
import base64
import glob
import json
import os

import nats

from helpers import ServerProcess, cluster_members, free_port, start_members
from test_cluster_refetch import _request

N = 300


def _data(i: int) -> bytes:
    return b"v%05d.%s" % (i, b"x" * 40)


def _flip(store: str, stream: str, i: int) -> None:
    """Flip a bit in message ``i + 1``'s data in its block file (the server keeps running)."""
    for path in sorted(glob.glob(os.path.join(store, "jetstream", "*", "streams", stream, "store", "msgs", "*.blk"))):
        with open(path, "r+b") as f:
            b = f.read()
            k = b.find(b"v%05d." % i)
            if k > 0:
                f.seek(k + 3)
                f.write(bytes([b[k + 3] ^ 0x10]))
                return
    raise AssertionError(f"message {i + 1} not found under {store}")


async def _publish(url: str, subjects: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for k in range(0, N, 100):
        await asyncio.gather(*(js.publish(subjects, _data(i), timeout=30) for i in range(k, min(N, k + 100))))
    await nc.close()


async def _get(url: str, stream: str, seq: int) -> dict:
    nc = await nats.connect(url)
    try:
        return json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps({"seq": seq}).encode(),
                                            timeout=5)).data)
    finally:
        await nc.close()


def test_damage_found_while_running_is_fetched_again_on_r3(tmp_path) -> None:
    members = cluster_members(str(tmp_path), "d", "dr")
    try:
        start_members(members)
        urls = [m.url for m in members]
        asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"],
                                                                "num_replicas": 3, "storage": "file"}))
        asyncio.run(_publish(urls[0], "p.x"))
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and all(
            r.get("current") for r in d.get("cluster", {}).get("replicas", [])) and d["state"]["messages"] == N))
        victim = next(m for m in members if m.name == info["cluster"]["leader"])
        mark = len(victim.proc.lines)
        _flip(os.path.join(str(tmp_path), victim.name, "store"), "P", 100)
        r = asyncio.run(_get(victim.url, "P", 101))
        if "error" in r:  # (the damaged copy was read: answered as a missing message)
            assert r["error"]["err_code"] == 10037 and r["error"]["code"] == 404, r
        else:  # (another replica led already: its copy is whole)
            assert base64.b64decode(r["message"]["data"]) == _data(100), r
        victim.proc.wait_log(r"damaged message\(s\) in the store \(first 101\): dropping", timeout=20, after=mark)
        assert "record failed its checksum" in "\n".join(victim.proc.lines[mark:])

        # the victim leads again once caught up, and serves every message from its own store
        async def lead() -> dict:
            others = [m.url for m in members if m is not victim]
            for _ in range(40):
                d = await _request(urls, "$JS.API.STREAM.INFO.P")
                if d["cluster"].get("leader") == victim.name and not d["state"].get("lost"):
                    return d
                await _request(others, "$JS.API.STREAM.LEADER.STEPDOWN.P", {"placement": {"preferred": victim.name}},
                               want=lambda d: True)
                await asyncio.sleep(0.5)
            raise AssertionError(f"{victim.name} never led again")
        info = asyncio.run(lead())
        assert info["state"]["messages"] == N, info["state"]

        async def read_all() -> list[int]:
            nc = await nats.connect(victim.url)
            bad = []
            try:
                for seq in range(1, N + 1):
                    r = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.P", json.dumps({"seq": seq}).encode(),
                                                     timeout=5)).data)
                    if "error" in r or base64.b64decode(r["message"]["data"]) != _data(seq - 1):
                        bad.append(seq)
            finally:
                await nc.close()
            return bad
        assert asyncio.run(read_all()) == []
    finally:
        for m in members:
            m.close()


def test_a_consumer_waits_for_a_damaged_message_fetched_again(tmp_path) -> None:
    # the damaged copy is on the server where the R3 consumer delivers from: every message is delivered, in
    # order, with its data (the damaged one once fetched again, never skipped)
    members = cluster_members(str(tmp_path), "c", "dc")
    try:
        start_members(members)
        urls = [m.url for m in members]
        asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"],
                                                                "num_replicas": 3, "storage": "file"}))
        asyncio.run(_publish(urls[0], "p.x"))
        asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and all(
            r.get("current") for r in d.get("cluster", {}).get("replicas", [])) and d["state"]["messages"] == N))
        ci = asyncio.run(_request(urls, "$JS.API.CONSUMER.CREATE.P.C", {
            "stream_name": "P", "config": {"durable_name": "C", "ack_policy": "explicit", "num_replicas": 3}},
            want=lambda d: "error" not in d and d.get("cluster", {}).get("leader")))
        victim = next(m for m in members if m.name == ci["cluster"]["leader"])
        # the victim a follower of the stream (the leader's case is the test above): it cuts and fetches at once
        others = [m.name for m in members if m is not victim]
        asyncio.run(_request(urls, "$JS.API.STREAM.LEADER.STEPDOWN.P", {"placement": {"preferred": others[0]}},
                             want=lambda d: True))
        asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and d.get(
            "cluster", {}).get("leader") in others and all(r.get("current") for r in d["cluster"]["replicas"])))
        mark = len(victim.proc.lines)
        _flip(os.path.join(str(tmp_path), victim.name, "store"), "P", 100)

        async def consume() -> list[tuple[int, bytes]]:
            nc = await nats.connect(victim.url)
            js = nc.jetstream()
            sub = await js.pull_subscribe_bind("C", stream="P")
            got: list[tuple[int, bytes]] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            try:
                while len(got) < N and loop.time() < deadline:
                    try:
                        msgs = await sub.fetch(50, timeout=2)
                    except (nats.errors.TimeoutError, asyncio.TimeoutError):  # (a fetch may end either way)
                        continue
                    for m in msgs:
                        got.append((m.metadata.sequence.stream, m.data))
                        await m.ack()
            finally:
                await nc.close()
            return got
        got = asyncio.run(consume())
        assert [s for s, _ in got] == list(range(1, N + 1)), ([s for s, _ in got][95:110],
                                                              "\n".join(victim.proc.lines[mark:])[-6000:])
        assert all(d == _data(s - 1) for s, d in got)
        victim.proc.wait_log(r"damaged message\(s\) in the store \(first 101\): dropping", timeout=20, after=mark)
        seen = "\n".join(victim.proc.lines[mark:])
        assert "record failed its checksum" in seen and "stepping down to fetch" not in seen, seen
    finally:
        for m in members:
            m.close()


def test_damage_found_while_running_is_reported_on_r1(tmp_path) -> None:
    store = os.path.join(str(tmp_path), "store")
    port = free_port()
    conf = os.path.join(str(tmp_path), "s.conf")
    with open(conf, "w") as f:
        f.write(f"port: {port}\nhost: 127.0.0.1\njetstream {{ store_dir: '{store}' }}\n")
    proc = ServerProcess("-c", conf)
    url = f"nats://127.0.0.1:{port}"
    try:
        proc.wait_log("Server is ready", timeout=30)

        async def go() -> tuple[dict, dict, dict, dict]:
            nc = await nats.connect(url)
            try:
                js = nc.jetstream()
                await js.add_stream(name="Q", subjects=["q.>"], storage="file")
                await _publish(url, "q.x")
                adv: asyncio.Queue = asyncio.Queue()
                await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.DATA_LOST.Q", cb=adv.put)
                await nc.flush()
                _flip(store, "Q", 100)
                first = await _get(url, "Q", 101)
                m = await asyncio.wait_for(adv.get(), 10)
                again = await _get(url, "Q", 101)
                info = json.loads((await nc.request("$JS.API.STREAM.INFO.Q", b"", timeout=5)).data)
                return first, again, json.loads(m.data), info
            finally:
                await nc.close()
        first, again, adv, info = asyncio.run(go())
        for r in (first, again):
            assert r.get("error", {}).get("err_code") == 10037 and r["error"]["code"] == 404, r
        assert adv["type"] == "io.nats.jetstream.advisory.v1.stream_data_lost", adv
        assert adv["stream"] == "Q" and adv["lost"]["msgs"] == [101], adv
        assert info["state"]["lost"]["msgs"] == [101] and info["state"]["messages"] == N - 1, info["state"]
        proc.wait_log(r"Stream '\$G > Q': 1 message\(s\) lost to damaged records", timeout=10)
        assert asyncio.run(_get(url, "Q", 102))["message"]["seq"] == 102
    finally:
        proc.proc.kill()
        proc.proc.wait()
