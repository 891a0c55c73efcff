"""A record damaged on every replica of an R3 stream is reported lost, as an R1 stream's is, instead of being
fetched again forever.

The same message's record is flipped in the block files of all three servers while they run; a read through
the stream leader finds its copy damaged. The leader asks the other replicas about their copies before it hands
its leadership over: none holds a healthy one (their reads find theirs damaged too), so it keeps leading and
reports the loss: an error in the log, the ``STREAM.DATA_LOST`` advisory (once, from the leader), ``state.lost``
in stream info. The other messages are served, a consumer delivers every message but the lost one, and a
follower restarted later keeps the damaged record in place (it does not cut its store to fetch it again)."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import time

import nats

from helpers import cluster_members, start_members
from test_cluster_damage_running import N, _data, _flip, _publish
from test_cluster_refetch import _request


def _everywhere_file(tmp: str, member: str) -> str:
    return os.path.join(tmp, member, "store", "jetstream", "$G", "streams", "P", "damage_everywhere.json")


def test_a_record_damaged_on_every_replica_is_reported_lost(tmp_path) -> None:
    tmp = str(tmp_path)
    members = cluster_members(tmp, "e", "de")
    try:
        start_members(members)
        urls = [m.url for m in members]
        asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.ADV", {
            "name": "ADV", "subjects": ["$JS.EVENT.ADVISORY.STREAM.DATA_LOST.>"], "num_replicas": 3,
            "storage": "file"}))
        asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"],
                                                                "num_replicas": 3, "storage": "file"}))
        asyncio.run(_publish(urls[0], "p.x"))
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and all(
            r.get("current") for r in d.get("cluster", {}).get("replicas", [])) and d["state"]["messages"] == N))
        leader = next(m for m in members if m.name == info["cluster"]["leader"])
        marks = {m.name: len(m.proc.lines) for m in members}
        for m in members:
            _flip(os.path.join(tmp, m.name, "store"), "P", 100)

        r = asyncio.run(_request([leader.url], "$JS.API.STREAM.MSG.GET.P", {"seq": 101}, want=lambda d: True))
        assert r.get("error", {}).get("err_code") == 10037 and r["error"]["code"] == 404, r
        leader.proc.wait_log(r"1 damaged message\(s\) \(first 101\) have no healthy copy on any replica",
                             timeout=20, after=marks[leader.name])
        leader.proc.wait_log(r"Stream '\$G > P': 1 message\(s\) lost to damaged records found while running "
                             r"\(first 101\)", timeout=20, after=marks[leader.name])
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and d.get(
            "state", {}).get("lost")))
        assert info["state"]["lost"]["msgs"] == [101] and info["state"]["messages"] == N - 1, info["state"]
        assert info["cluster"]["leader"] == leader.name, info["cluster"]

        # every replica asked the others in turn (the probes found their copies damaged): each keeps the finding
        deadline = time.monotonic() + 20
        while not all(os.path.exists(_everywhere_file(tmp, m.name)) for m in members):
            assert time.monotonic() < deadline, [m.name for m in members if not os.path.exists(
                _everywhere_file(tmp, m.name))]
            time.sleep(0.2)
        for m in members:
            with open(_everywhere_file(tmp, m.name)) as f:
                assert json.load(f)["reported"] == [[101, 101]], m.name

        # one advisory, from the leader
        adv = asyncio.run(_request(urls, "$JS.API.STREAM.MSG.GET.ADV", {"seq": 1}))
        adv = json.loads(base64.b64decode(adv["message"]["data"]))
        assert adv["type"] == "io.nats.jetstream.advisory.v1.stream_data_lost", adv
        assert adv["stream"] == "P" and adv["lost"]["msgs"] == [101], adv

        # no handover loop: the leader stays (the refetch would have stepped down within a second, again every
        # 2 s), and nobody cut its store to fetch the record again
        time.sleep(4)
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P"))
        assert info["cluster"]["leader"] == leader.name, info["cluster"]
        for m in members:
            seen = "\n".join(m.proc.lines[marks[m.name]:])
            assert "stepping down to fetch" not in seen and "dropping" not in seen, (m.name, seen)
        ai = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.ADV"))
        assert ai["state"]["messages"] == 1, ai["state"]

        # a consumer delivers everything but the lost message, with its data
        asyncio.run(_request(urls, "$JS.API.CONSUMER.CREATE.P.C", {
            "stream_name": "P", "config": {"durable_name": "C", "ack_policy": "explicit", "num_replicas": 3}},
            want=lambda d: "error" not in d and d.get("cluster", {}).get("leader")))

        async def consume() -> list[tuple[int, bytes]]:
            nc = await nats.connect(servers=urls)
            js = nc.jetstream()
            sub = await js.pull_subscribe_bind("C", stream="P")
            got: list[tuple[int, bytes]] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 40
            try:
                while len(got) < N - 1 and loop.time() < deadline:
                    try:
                        msgs = await sub.fetch(100, timeout=2)
                    except nats.errors.TimeoutError:
                        continue
                    for m in msgs:
                        got.append((m.metadata.sequence.stream, m.data))
                        await m.ack()
            finally:
                await nc.close()
            return got
        got = asyncio.run(consume())
        assert [s for s, _ in got] == [s for s in range(1, N + 1) if s != 101], [s for s, _ in got][95:110]
        assert all(d == _data(s - 1) for s, d in got)

        # a follower restarted keeps the damaged record where it is (no cut, no fetch), and reports nothing again
        follower = next(m for m in members if m is not leader)
        follower.proc.stop()
        follower.start()
        follower.proc.wait_log("Server is ready", timeout=30)
        asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and all(
            r.get("current") for r in d.get("cluster", {}).get("replicas", [])) and len(d["cluster"]["replicas"]) == 2))
        follower.proc.wait_log(r"1 message\(s\) lost to corruption", timeout=20)  # (its store's open-time scan)
        info = asyncio.run(_request([follower.url], "$JS.API.STREAM.LEADER.STEPDOWN.P",
                                    {"placement": {"preferred": follower.name}}, want=lambda d: True))
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and d.get(
            "cluster", {}).get("leader") == follower.name))
        assert info["state"]["lost"]["msgs"] == [101] and info["state"]["messages"] == N - 1, info["state"]
        seen = "\n".join(follower.proc.lines)
        assert "dropping" not in seen and "lost to damaged records" not in seen, seen
    finally:
        for m in members:
            m.close()


def test_a_record_damaged_on_every_replica_below_the_snapshot_at_open(tmp_path) -> None:
    # the same record damaged in every server's store while all three were stopped, below their groups'
    # snapshot (the log cannot give it again): no replica cuts its store at the start (cutting it, every one
    # waited for a catch-up nobody could serve: elected, stepping down, forever), they ask each other, find
    # no healthy copy and report it; the stream serves every other message
    from test_cluster_refetch import N as BIG  # (past one RAFT snapshot of the stream's group)
    tmp = str(tmp_path)
    members = cluster_members(tmp, "s", "ds")
    try:
        start_members(members)
        urls = [m.url for m in members]
        asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"],
                                                                "num_replicas": 3, "storage": "file"}))

        async def publish() -> None:
            nc = await nats.connect(servers=urls)
            js = nc.jetstream()
            for k in range(0, BIG, 500):
                await asyncio.gather(*(js.publish("p.x", _data(i), timeout=30) for i in range(k, min(BIG, k + 500))))
            await nc.close()
        asyncio.run(publish())
        asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", want=lambda d: "error" not in d and all(
            r.get("current") and not r.get("lag") for r in d.get("cluster", {}).get("replicas", []))
            and d["state"]["messages"] == BIG))
        for m in members:
            m.proc.stop()
        for m in members:
            _flip(os.path.join(tmp, m.name, "store"), "P", 100)
        start_members(members)
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P", timeout=60, want=lambda d: "error" not in d
                                    and d.get("state", {}).get("lost") and d.get("cluster", {}).get("leader")))
        assert info["state"]["lost"]["msgs"] == [101] and info["state"]["messages"] == BIG - 1, info["state"]
        for m in members:
            m.proc.wait_log(r"below the group's snapshot: asking the other replicas", timeout=20)
        leader = next(m for m in members if m.name == info["cluster"]["leader"])
        leader.proc.wait_log(r"1 message\(s\) lost to damaged records found", timeout=20)
        for seq in (100, 102, BIG):
            r = asyncio.run(_request(urls, "$JS.API.STREAM.MSG.GET.P", {"seq": seq}))
            assert base64.b64decode(r["message"]["data"]) == _data(seq - 1), (seq, r)
        r = asyncio.run(_request(urls, "$JS.API.STREAM.MSG.GET.P", {"seq": 101}, want=lambda d: True))
        assert r.get("error", {}).get("code") == 404, r
        for m in members:
            assert "dropping" not in "\n".join(m.proc.lines), m.name
        new = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.P"))
        assert new["state"]["last_seq"] == BIG, new["state"]
    finally:
        for m in members:
            m.close()
