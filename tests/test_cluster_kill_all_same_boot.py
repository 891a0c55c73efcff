"""SIGKILL of every server of a 3-server cluster (default, lazy ``sync_interval``) while the machine keeps running:
every write had gone to the OS before it was acknowledged, so nothing is lost, and the servers know it (the boot
id has not changed since their groups last started with a whole log): no recovery, no sequence skipped, no loss
reported, /healthz healthy. (A power cut, a new boot, is tests/test_raft_power_cluster.py.)"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request

import nats
import nats.js.errors

from helpers import ClusterMember, ServerProcess, free_port
from test_cluster_refetch import _request


def _env() -> dict:
    e = dict(os.environ)
    e.pop("RILLET_BOOT_ID", None)  # (the machine's own boot id)
    return e


def _healthz(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def test_sigkill_of_every_server_loses_nothing_and_reports_nothing(tmp_path) -> None:
    cports = [free_port() for _ in range(3)]
    members = []
    for k in range(3):
        d = os.path.join(str(tmp_path), f"k{k + 1}")
        os.makedirs(os.path.join(d, "store"))
        http = free_port()
        m = ClusterMember(d, f"k{k + 1}", os.path.join(d, "store"), "ka", cports, cports[k],
                          extra=f"http: 127.0.0.1:{http}\n")
        m.http = http
        members.append(m)
    try:
        for m in members:
            m.proc = ServerProcess("-c", m.conf, env=_env())
        for m in members:
            m.proc.wait_log("Server is ready", timeout=30)
        urls = [m.url for m in members]
        asyncio.run(_request(urls, "$JS.API.STREAM.CREATE.K", {"name": "K", "subjects": ["k.>"], "num_replicas": 3}))

        async def publish(start: int, n: int) -> dict[int, bytes]:
            nc = await nats.connect(servers=urls)
            js = nc.jetstream()
            out = {}
            for i in range(start, start + n):
                deadline = time.monotonic() + 20
                while True:  # (right after a restart the stream's interest may not have reached this server yet)
                    try:
                        ack = await js.publish("k.x", b"m%d" % i, timeout=10)
                        break
                    except nats.js.errors.NoStreamResponseError:
                        assert time.monotonic() < deadline, "no stream interest 20 s after the restart"
                        await asyncio.sleep(0.2)
                out[ack.seq] = b"m%d" % i
            await nc.close()
            return out
        acked = asyncio.run(publish(0, 100))
        assert sorted(acked) == list(range(1, 101))
        for m in members:  # at once, while the stream is busy (its leader holds reserved sequences)
            m.proc.proc.send_signal(signal.SIGKILL)
        for m in members:
            m.proc.proc.wait()
        for m in members:
            m.proc = ServerProcess("-c", m.conf, env=_env())
        for m in members:
            m.proc.wait_log("Server is ready", timeout=30)
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.K", want=lambda d: "error" not in d and
                                    d.get("cluster", {}).get("leader") and d["state"]["messages"] == 100))
        assert info["state"]["last_seq"] == 100, info["state"]
        new = asyncio.run(publish(100, 3))
        assert sorted(new) == [101, 102, 103], sorted(new)  # no sequence skipped
        info = asyncio.run(_request(urls, "$JS.API.STREAM.INFO.K"))
        assert "lost" not in info["cluster"] and "skipped" not in info["cluster"], info["cluster"]

        async def read_all() -> dict[int, bytes]:
            import base64
            nc = await nats.connect(servers=urls)
            got = {}
            for seq in range(1, 104):
                r = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.K", json.dumps({"seq": seq}).encode(),
                                                 timeout=5)).data)
                if "message" in r:
                    got[seq] = base64.b64decode(r["message"]["data"])
            await nc.close()
            return got
        got = asyncio.run(read_all())
        assert all(got.get(s) == d for s, d in {**acked, **new}.items())
        logs = "\n".join(m.proc.output for m in members)
        assert "same boot id" in logs and "recovering, no vote" not in logs
        leader = next(m for m in members if m.name == info["cluster"]["leader"])
        loop_deadline = 30
        for _ in range(loop_deadline * 5):
            h = _healthz(leader.http)
            if h.get("status") == "ok":
                break
            asyncio.run(asyncio.sleep(0.2))
        assert h.get("status") == "ok", h
    finally:
        for m in members:
            m.close()
