"""The regional orders pipeline of examples/spark: the streaming job (two availableNow runs from one
checkpoint) and the batch job agree, in Parquet and in the KV bucket."""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from spark_support import JSServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "spark"))

import pipeline  # noqa: E402


def test_regional_orders_pipeline(spark, tmp_path):
    server = JSServer("rillet")  # its own server: the example uses fixed stream and bucket names
    try:
        url = server.url
        asyncio.run(pipeline.setup_streams(url))
        start = int(time.time() * 1000) - 600_000
        ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
        for round_ in range(2):
            asyncio.run(pipeline.publish_orders(url, 40, seed=round_, start_ms=start + round_ * 300_000))
            q = pipeline.streaming_job(spark, url, ck, out)
            q.awaitTermination(120)
            assert q.exception() is None
        ok, rows = pipeline.compare(spark, url, out)
        assert ok, rows
        assert len(rows) >= 3 * 9  # three regions, about ten minutes of event time
        # the rows really came through the sourced stream, with regions and origins from the headers
        df = pipeline.orders(spark.read, url)
        got = {(r.region, r.origin) for r in df.select("region", "origin").distinct().collect()}
        assert got == {(r, f"ORDERS_{r.upper()}") for r in pipeline.REGIONS}
        assert df.count() == 2 * 40 * 3
    finally:
        server.stop()
