"""Exactly-once from JetStream into a checkpointed Parquet sink, across crashes.

A streaming query runs in its own process group and is killed with SIGKILL three times, at random moments,
while a publisher keeps writing; a final availableNow run from the same checkpoint then catches up. The
sink must hold every published message exactly once: no gap, no duplicate.
"""
from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from nats.js.api import StreamConfig

from spark_support import js_client, spark_env

HERE = Path(__file__).resolve().parent


class Publisher(threading.Thread):
    """Publishes "1", "2", ... (acked) until stopped."""

    def __init__(self, url: str, subject: str) -> None:
        super().__init__(daemon=True)
        self.url, self.subject = url, subject
        self.stop_flag = threading.Event()
        self.count = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._go())
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    async def _go(self) -> None:
        nc, js = await js_client(self.url)
        while not self.stop_flag.is_set():
            for _ in range(10):
                await js.publish(self.subject, str(self.count + 1).encode())
                self.count += 1
            await asyncio.sleep(0.04)  # about 200 messages/s
        await nc.close()


def _commits(ck: Path) -> int:
    d = ck / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0


def test_sigkill_during_streaming_then_available_now_exactly_once(spark, rillet_server, name, tmp_path):
    url = rillet_server.url

    async def setup():
        nc, js = await js_client(url)
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        await nc.close()
    asyncio.run(setup())
    ck, out = tmp_path / "ck", tmp_path / "out"
    pub = Publisher(url, f"{name}.n")
    pub.start()
    env = dict(os.environ, **spark_env())
    rng = random.Random(5)
    try:
        for round_ in range(3):
            before = _commits(ck)
            t_start = time.monotonic()
            log = open(tmp_path / f"query{round_}.log", "wb")
            p = subprocess.Popen([sys.executable, str(HERE / "eo_query.py"), url, name, str(ck), str(out)],
                                 start_new_session=True, env=env, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 90
            while _commits(ck) < before + 1:
                assert p.poll() is None, (tmp_path / f"query{round_}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the query made no progress"
                time.sleep(0.1)
            time.sleep(rng.uniform(0.0, 0.8))
            os.killpg(p.pid, signal.SIGKILL)
            print(f"round {round_}: killed after {time.monotonic() - t_start:.1f}s, {_commits(ck)} commits")
            p.wait()
            log.close()
    finally:
        pub.stop_flag.set()
        pub.join(30)
    assert pub.error is None
    total = pub.count
    assert total > 0
    t0 = time.monotonic()

    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name)
         .option("num_partitions", "2").option("max_messages_per_trigger", "3000").load()
         .selectExpr("seq", "CAST(data AS STRING) AS body")
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    seqs = sorted(r.seq for r in rows)
    assert len(seqs) == len(set(seqs)), "duplicates in the sink"
    assert seqs == list(range(1, total + 1)), "gaps in the sink"
    assert all(int(r.body) == r.seq for r in rows)
    print(f"{total} messages, final run {time.monotonic() - t0:.1f}s")
