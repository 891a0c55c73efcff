"""Apache Spark data sources for JetStream (``jetstream``) and Key-Value buckets (``kv``).

    import rillet.spark
    rillet.spark.register(spark)
    df = spark.read.format("jetstream").option("servers", "nats://127.0.0.1:4222").option("stream", "ORDERS").load()

Needs the ``spark`` extra (``pip install 'rillet[spark]'``); the server itself does not import this package.
See docs/spark.md for the options, the columns and how exactly-once works.
"""
from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``jetstream`` and ``kv`` formats with a SparkSession."""
    from rillet.spark.kv import KVDataSource
    from rillet.spark.source import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)
    spark.dataSource.register(KVDataSource)


__all__ = ["register"]
