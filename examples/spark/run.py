"""One command for the regional orders pipeline (see pipeline.py and docs/spark.md):

    python examples/spark/run.py                      # starts a local Rillet server with JetStream
    python examples/spark/run.py --servers nats://127.0.0.1:4222   # or use a running server (empty JetStream)

Creates the streams and the KV bucket, publishes orders from three regions, runs the streaming job
(availableNow), publishes more orders and runs it again from its checkpoint, then recomputes everything
with the batch job and checks that the batch numbers, the Parquet output and the KV bucket agree.
Exit status 0 when they do.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import pipeline  # noqa: E402


def start_rillet(workdir: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "rillet.server", "-js", "-sd", os.path.join(workdir, "js"),
                          "-a", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return p, f"nats://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the Rillet server did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="", help="a running server (default: start Rillet on a free port)")
    ap.add_argument("--orders", type=int, default=200, help="orders per region in each round")
    ap.add_argument("--workdir", default="", help="checkpoint and Parquet output (default: a temporary dir)")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = args.workdir or tempfile.mkdtemp(prefix="rillet-orders-")
    server = None
    servers = args.servers
    if not servers:
        server, servers = start_rillet(work)
        print(f"started Rillet at {servers}")
    try:
        from pyspark.sql import SparkSession

        import rillet.spark
        spark = (SparkSession.builder.master("local[2]").appName("regional-orders")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        rillet.spark.register(spark)

        asyncio.run(pipeline.setup_streams(servers))
        start_ms = int(time.time() * 1000) - 600_000
        ck, out = os.path.join(work, "checkpoint"), os.path.join(work, "revenue.parquet")
        for round_ in range(2):
            # each round continues in event time (older orders would be late: behind the watermark)
            n = asyncio.run(pipeline.publish_orders(servers, args.orders, seed=round_,
                                                    start_ms=start_ms + round_ * 300_000))
            print(f"round {round_ + 1}: published {n} orders")
            q = pipeline.streaming_job(spark, servers, ck, out)
            q.awaitTermination()
            print(f"round {round_ + 1}: streaming job caught up ({len(q.recentProgress)} micro-batches)")
        ok, rows = pipeline.compare(spark, servers, out)
        print(f"{'key':<20} {'batch':>10} {'streamed':>10} {'kv':>10}")
        for key, b, s, k in rows:
            print(f"{key:<20} {b:>10} {s!s:>10} {k!s:>10}")
        print("batch, streamed and KV revenue agree" if ok else "MISMATCH between batch, streamed and KV revenue")
        spark.stop()
        return 0 if ok else 1
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
