"""A streaming query run as its own process by test_spark_exactly_once.py (which kills it with SIGKILL):
jetstream -> Parquet file sink, with a checkpoint.

    python eo_query.py <servers> <stream> <checkpoint dir> <output dir>
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_support import make_spark  # noqa: E402


def main() -> None:
    url, stream, ck, out = sys.argv[1:5]
    spark = make_spark("rillet-eo-query", quick_jvm=True)
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
         .option("num_partitions", "2").option("max_messages_per_trigger", "400").load()
         .selectExpr("seq", "CAST(data AS STRING) AS body")
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
         .trigger(processingTime="200 milliseconds").start())
    q.awaitTermination()


if __name__ == "__main__":
    main()
