"""A server that shuts down cleanly hands over the leadership of every replicated stream and consumer it leads
(nats-server transfers its RAFT leaderships on shutdown), so the others go on at once instead of waiting for an
election timeout to notice the leader is gone."""
from __future__ import annotations

import asyncio
import time

import nats

from rillet.app.embed import run_cluster


async def _leader(nc, subject: str) -> str:
    import json
    m = await nc.request(subject, b"", timeout=5)
    return json.loads(m.data)["cluster"]["leader"]


async def test_clean_shutdown_hands_stream_and_consumer_leadership_over(tmp_path) -> None:
    async with run_cluster(3, jetstream=True, store_dir=str(tmp_path)) as servers:
        nc = await nats.connect(servers[0].client_url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="H", subjects=["h.>"], num_replicas=3)
        await js.add_consumer("H", durable_name="D", ack_policy="explicit")
        await js.publish("h.1", b"x")
        # both leaders on one server that is not servers[0] (the client's)
        target = servers[1].name
        for subj in ("$JS.API.STREAM.LEADER.STEPDOWN.H", "$JS.API.CONSUMER.LEADER.STEPDOWN.H.D"):
            info = "$JS.API.STREAM.INFO.H" if "STREAM.LEADER" in subj else "$JS.API.CONSUMER.INFO.H.D"
            deadline = time.monotonic() + 30
            while await _leader(nc, info) != target:
                assert time.monotonic() < deadline, f"could not move {info} to {target}"
                import json
                await nc.request(subj, json.dumps({"placement": {"preferred": target}}).encode(), timeout=5)
                await asyncio.sleep(0.5)
        await servers[1].shutdown()
        t0 = time.monotonic()
        # a new stream leader takes a publish, and the new consumer leader answers, within a second or so:
        # without the handover the followers wait out an election timeout first
        while True:
            try:
                ack = await js.publish("h.2", b"y", timeout=0.5)
                break
            except Exception:
                assert time.monotonic() - t0 < 10, "no stream leader"
        t_stream = time.monotonic() - t0
        assert ack.seq == 2
        while True:
            try:
                ci = await js.consumer_info("H", "D", timeout=0.5)
                if ci.cluster and ci.cluster.leader and ci.cluster.leader != target:
                    break
            except Exception:
                pass
            assert time.monotonic() - t0 < 10, "no consumer leader"
            await asyncio.sleep(0.05)
        t_cons = time.monotonic() - t0
        await nc.close()
        print(f"stream leader back in {t_stream:.2f}s, consumer leader in {t_cons:.2f}s")
        assert t_stream < 0.9 and t_cons < 0.9, (t_stream, t_cons)  # (without the handover: 1.2-1.8 s)
