"""Spark read/write throughput of the ``jetstream`` data source, next to a plain nats-py ordered consumer.

    python -m benchmarks.spark_bench                     # Rillet (python -m rillet.server), 1,000,000 x 100 B
    python -m benchmarks.spark_bench --server go         # the Go nats-server on PATH instead
    python -m benchmarks.spark_bench --count 200000 --write-count 100000 --json out.json

Steps, all against one server started on a free port with JetStream in a temporary directory:
1. fill stream BENCH (memory storage, allow_direct) with ``--count`` messages of ``--size`` bytes;
2. drain it with a plain nats-py ordered consumer (``js.subscribe(..., ordered_consumer=True)``): the ceiling
   for any reader written in Python on one core;
3. read it with Spark, ``num_partitions`` = ``--partitions``, once with ordered consumers and once with
   batched direct gets, into the ``noop`` sink (every row is produced and handed to the JVM, nothing is
   written); the SparkSession and its Python workers are warmed up first;
4. write ``--write-count`` rows of ``--size`` bytes with the ``jetstream`` sink into stream BENCH_OUT.
Prints a markdown table of rows/s (and the Spark/plain ratio); progress on stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(kind: str) -> tuple[subprocess.Popen, str, str]:
    d = tempfile.mkdtemp(prefix="spark-bench-")
    port = free_port()
    cmd = ["nats-server"] if kind == "go" else [sys.executable, "-m", "rillet.server"]
    p = subprocess.Popen(cmd + ["-js", "-sd", d, "-a", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    return p, f"nats://127.0.0.1:{port}", d


async def fill(url: str, count: int, size: int) -> None:
    import nats
    from nats.js.api import StorageType, StreamConfig
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="BENCH", subjects=["bench.>"], storage=StorageType.MEMORY,
                                     allow_direct=True))
    await js.add_stream(StreamConfig(name="BENCH_OUT", subjects=["out.>"], storage=StorageType.MEMORY))
    payload = b"x" * size
    sent = 0
    while sent < count:
        n = min(10_000, count - sent)
        for _ in range(n):
            await nc.publish("bench.data", payload)
        sent += n
        await nc.flush()
        # let the server store what it was sent before sending more (core publishes are not acked)
        while (await js.stream_info("BENCH")).state.messages < sent:
            await asyncio.sleep(0.01)
    await nc.close()


async def plain_ordered_consumer(url: str, count: int) -> float:
    import nats
    nc = await nats.connect(url)
    js = nc.jetstream()
    done = asyncio.get_running_loop().create_future()
    got = 0

    async def cb(msg) -> None:
        nonlocal got
        got += 1
        if got == count and not done.done():
            done.set_result(None)

    t = time.perf_counter()
    sub = await js.subscribe("bench.>", cb=cb, ordered_consumer=True, pending_msgs_limit=-1,
                             pending_bytes_limit=-1)
    await done
    dt = time.perf_counter() - t
    await sub.unsubscribe()
    await nc.close()
    return count / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["rillet", "go"], default="rillet")
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--write-count", type=int, default=200_000)
    ap.add_argument("--modes", default="",
                    help="Spark read modes to measure (default: consumer,direct on go; consumer on rillet, whose "
                         "batched direct gets are slow on large streams, see benchmarks/README.md)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    proc, url, d = start_server(args.server)
    results: dict[str, float] = {}
    try:
        log(f"filling BENCH with {args.count} x {args.size} B on {args.server} ({url})")
        t = time.perf_counter()
        asyncio.run(fill(url, args.count, args.size))
        log(f"  filled in {time.perf_counter() - t:.1f}s")
        log("plain nats-py ordered consumer ...")
        results["plain"] = asyncio.run(plain_ordered_consumer(url, args.count))
        log(f"  {results['plain']:,.0f} msgs/s")

        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master(f"local[{max(2, args.partitions)}]").appName("spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.python.worker.reuse", "true")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        import rillet.spark
        rillet.spark.register(spark)

        def read(mode: str, end: int | None = None):
            r = (spark.read.format("jetstream").option("servers", url).option("stream", "BENCH")
                 .option("num_partitions", str(args.partitions)).option("read_mode", mode))
            if end:
                r = r.option("end", str(end))
            return r.load()

        modes = [m for m in (args.modes or ("consumer,direct" if args.server == "go" else "consumer")).split(",")
                 if m]
        for mode in modes:
            read(mode, end=1000).write.format("noop").mode("overwrite").save()  # warm-up: workers, imports
        for mode in modes:
            log(f"spark read, {mode} ...")
            df = read(mode)
            t = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            dt = time.perf_counter() - t
            results[f"spark_{mode}"] = args.count / dt
            log(f"  {results[f'spark_{mode}']:,.0f} rows/s")
        n = spark.range(1000).count()
        assert n == 1000
        log(f"spark write of {args.write_count} rows ...")
        wdf = spark.range(args.write_count, numPartitions=args.partitions).selectExpr(
            f"CAST(repeat('y', {args.size}) AS BINARY) AS data", "'out.data' AS subject").cache()
        wdf.count()
        t = time.perf_counter()
        wdf.write.format("jetstream").option("servers", url).option("stream", "BENCH_OUT").mode("append").save()
        dt = time.perf_counter() - t
        results["spark_write"] = args.write_count / dt
        log(f"  {results['spark_write']:,.0f} rows/s")
        spark.stop()
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)

    p = results["plain"]
    print(f"server: {args.server}; {args.count:,} messages of {args.size} B; {args.partitions} Spark partitions")
    print()
    print("| reader / writer | rows/s | vs plain consumer |")
    print("|---|---:|---:|")
    print(f"| plain nats-py ordered consumer (1 process) | {p:,.0f} | 1.00 |")
    for mode in modes:
        v = results[f"spark_{mode}"]
        print(f"| Spark read, {mode} ({args.partitions} partitions) | {v:,.0f} | {v / p:.2f} |")
    print(f"| Spark write, jetstream sink ({args.write_count:,} rows, acked) | {results['spark_write']:,.0f} | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
