"""Regional orders pipeline: JetStream -> Spark Structured Streaming -> KV bucket + Parquet, and a batch job
that recomputes the same numbers from the stream's history.

Streams: ORDERS_EU, ORDERS_US, ORDERS_APAC (subjects ``orders.<region>.<id>``), each order a JSON document
``{"order_id": ..., "amount": ..., "ts": <event time, epoch ms>}`` with a ``Region`` header; ORDERS sources
all three (its messages carry the origin stream in ``Nats-Stream-Source``, read back as column ``origin``).

The streaming job reads ORDERS, computes revenue per region per minute of event time (1-minute tumbling
windows, 2-minute watermark), and in each micro-batch writes the windows it updated to the KV bucket
``revenue`` (key ``<region>.<yyyymmddHHMM>``, value the revenue in cents) and to Parquet
(``<out>/batch=<id>``, replaced if the batch runs again). The batch job reads ORDERS from the beginning and
computes the same table; ``compare`` checks that the three agree.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

REGIONS = ("eu", "us", "apac")
ORDER_SCHEMA = "order_id STRING, amount DOUBLE, ts BIGINT"
BUCKET = "revenue"


async def setup_streams(servers: str) -> None:
    import nats
    from nats.js.api import StreamConfig, StreamSource

    nc = await nats.connect(servers)
    js = nc.jetstream()
    for r in REGIONS:
        await js.add_stream(StreamConfig(name=f"ORDERS_{r.upper()}", subjects=[f"orders.{r}.>"]))
    await js.add_stream(StreamConfig(name="ORDERS", sources=[StreamSource(name=f"ORDERS_{r.upper()}")
                                                              for r in REGIONS]))
    await js.create_key_value(bucket=BUCKET, history=10)
    await nc.close()


async def publish_orders(servers: str, per_region: int, seed: int, start_ms: int) -> int:
    """Publish ``per_region`` orders in each region (event times spread over 5 minutes from ``start_ms``,
    a little out of order); wait until ORDERS has sourced them all. Returns how many were published."""
    import nats

    rng = random.Random(seed)
    nc = await nats.connect(servers)
    js = nc.jetstream()
    before = (await js.stream_info("ORDERS")).state.messages
    n = 0
    for i in range(per_region):
        for r in REGIONS:
            ts = start_ms + int(i * 300_000 / per_region) + rng.randint(-5_000, 5_000)
            doc = {"order_id": f"{r}-{seed}-{i}", "amount": round(rng.uniform(5, 500), 2), "ts": ts}
            await js.publish(f"orders.{r}.{seed}-{i}", json.dumps(doc).encode(), headers={"Region": r})
            n += 1
    deadline = time.monotonic() + 60
    while (await js.stream_info("ORDERS")).state.messages < before + n:
        if time.monotonic() > deadline:
            raise RuntimeError("ORDERS did not source every order in time")
        await asyncio.sleep(0.05)
    await nc.close()
    return n


def orders(reader: Any, servers: str) -> Any:
    """ORDERS as a DataFrame (batch or streaming reader) with the order fields decoded."""
    from pyspark.sql import functions as F
    df = (reader.format("jetstream").option("servers", servers).option("stream", "ORDERS")
          .option("decode", "json").option("json_schema", ORDER_SCHEMA).option("num_partitions", "2").load())
    return df.withColumn("event_time", F.timestamp_millis("ts"))


def revenue(df: Any) -> Any:
    from pyspark.sql import functions as F
    return (df.groupBy("region", F.window("event_time", "1 minute").alias("w"))
            .agg(F.round(F.sum("amount") * 100).cast("long").alias("cents"), F.count("*").alias("orders"))
            .select("region", F.col("w.start").alias("minute"), "cents", "orders"))


def _kv_rows(df: Any) -> Any:
    from pyspark.sql import functions as F
    return df.select(F.concat_ws(".", "region", F.date_format("minute", "yyyyMMddHHmm")).alias("key"),
                     F.col("cents").cast("string").alias("value"))


def streaming_job(spark: Any, servers: str, checkpoint: str, out: str, available_now: bool = True) -> Any:
    """Start the streaming job; with ``available_now`` it stops when it has caught up."""
    def sink(batch: Any, batch_id: int) -> None:
        batch = batch.persist()
        batch.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
        (_kv_rows(batch).write.format("kv").option("servers", servers).option("bucket", BUCKET)
         .option("write_id", f"revenue-{batch_id}").mode("append").save())
        batch.unpersist()

    stream = orders(spark.readStream, servers).withWatermark("event_time", "2 minutes")
    w = (revenue(stream).writeStream.outputMode("update").foreachBatch(sink)
         .option("checkpointLocation", checkpoint))
    w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime="1 second")
    return w.start()


def batch_job(spark: Any, servers: str) -> Any:
    return revenue(orders(spark.read, servers))


def streamed_results(spark: Any, out: str) -> dict[tuple[str, str], int]:
    """The newest value of each (region, minute) in the Parquet output (later batches update windows)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window
    df = spark.read.parquet(out)
    w = Window.partitionBy("region", "minute").orderBy(F.col("batch").desc())
    rows = df.withColumn("r", F.row_number().over(w)).where("r = 1").collect()
    return {(r.region, r.minute.strftime("%Y%m%d%H%M")): r.cents for r in rows}


def compare(spark: Any, servers: str, out: str) -> tuple[bool, list[tuple[str, int, int | None, int | None]]]:
    """(agree, rows of key / batch cents / streamed cents / KV cents)."""
    batch = {(r.region, r.minute.strftime("%Y%m%d%H%M")): r.cents for r in batch_job(spark, servers).collect()}
    streamed = streamed_results(spark, out)
    kv = {r.key: int(r.value) for r in spark.read.format("kv").option("servers", servers)
          .option("bucket", BUCKET).option("decode", "utf8").load().collect()}
    rows = []
    ok = set(batch) == set(streamed) and len(kv) == len(batch)
    for k in sorted(batch):
        key = f"{k[0]}.{k[1]}"
        rows.append((key, batch[k], streamed.get(k), kv.get(key)))
        ok = ok and batch[k] == streamed.get(k) == kv.get(key)
    return ok, rows
