"""The Spark side of scripts/spark_faults.py, run as its own process (the harness SIGKILLs it, restarts it,
and reads what it prints):

    python faults_query.py stream <config.json>   # three streaming queries until killed
    python faults_query.py final  <config.json>   # the same queries, availableNow, then the Parquet rows
    python faults_query.py batch  <config.json>   # a batch write (DataFrame -> jetstream) with task retries

Queries, all reading the R3 source stream (subjects ``<src>.<key>``, payload: a unique value):
  parquet: seq and value into a checkpointed Parquet file sink
  sink:    the rows into the jetstream sink (stream ``<sink>``, subjects ``<sink>.<key>``)
  kv:      the rows into the kv sink (bucket ``<bucket>``, key ``k<key>``; one partition per batch, so the
           puts of a batch go out in stream order and the bucket ends with the last value of each key)
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_support import make_spark  # noqa: E402


def source(spark, cfg: dict, partitions: int):
    return (spark.readStream.format("jetstream").option("servers", ",".join(cfg["servers"]))
            .option("stream", cfg["src"]).option("num_partitions", str(partitions))
            .option("max_messages_per_trigger", "3000").option("idle_timeout", "5")
            .option("connect_timeout", "2").load())


def start_queries(spark, cfg: dict, available_now: bool) -> list:
    servers = ",".join(cfg["servers"])
    trig = {"availableNow": True} if available_now else {"processingTime": cfg.get("trigger", "1 second")}
    ck = cfg["checkpoints"]
    qs = []
    qs.append(source(spark, cfg, 2).selectExpr("seq", "CAST(data AS STRING) AS value")
              .writeStream.format("parquet").option("path", cfg["parquet"])
              .option("checkpointLocation", os.path.join(ck, "parquet")).trigger(**trig).queryName("parquet").start())
    sink = cfg["sink"]
    qs.append(source(spark, cfg, 2)
              .selectExpr(f"concat('{sink.lower()}.', substring_index(subject, '.', -1)) AS subject", "data")
              .writeStream.format("jetstream").option("servers", servers).option("stream", sink)
              .option("ack_timeout", "4")
              .option("connect_timeout", "2")
              .option("checkpointLocation", os.path.join(ck, "sink")).trigger(**trig).queryName("sink").start())
    qs.append(source(spark, cfg, 1)
              .selectExpr("concat('k', substring_index(subject, '.', -1)) AS key", "CAST(data AS STRING) AS value")
              .writeStream.format("kv").option("servers", servers).option("bucket", cfg["bucket"])
              .option("ack_timeout", "4").option("connect_timeout", "2")
              .option("checkpointLocation", os.path.join(ck, "kv")).trigger(**trig).queryName("kv").start())
    return qs


def main() -> None:
    mode, cfg_path = sys.argv[1], sys.argv[2]
    cfg = json.load(open(cfg_path))
    # local[2,4]: a task that fails (a connection cut, a publish not acknowledged in time) is tried again
    spark = make_spark(f"rillet-spark-faults-{mode}", quick_jvm=True, master="local[2,4]")
    if mode == "stream":
        qs = start_queries(spark, cfg, available_now=False)
        # the first query to fail ends the process (the harness starts it again from the checkpoints)
        spark.streams.awaitAnyTermination()
        for q in qs:
            if q.exception() is not None:
                print(f"query {q.name} failed: {q.exception()}", flush=True)
        sys.exit(3)
    if mode == "final":
        qs = start_queries(spark, cfg, available_now=True)
        for q in qs:
            q.awaitTermination()
            if q.exception() is not None:
                print(f"query {q.name} failed: {q.exception()}", flush=True)
                sys.exit(3)
        rows = spark.read.parquet(cfg["parquet"]).select("seq", "value").collect()
        with open(cfg["result"], "w") as f:
            json.dump({"parquet": [[r.seq, r.value] for r in rows]}, f)
        return
    if mode == "batch":
        n = int(cfg["rows"])
        df = spark.range(0, n, 1, int(cfg.get("partitions", 4))).selectExpr(
            f"'{cfg['batch_stream'].lower()}.x' AS subject", "CAST(id AS STRING) AS data")
        attempts, errors = 0, []
        sc = spark.sparkContext
        sc.setJobGroup("batch-write", "DataFrame -> jetstream across a leader kill")
        while attempts < 3:
            attempts += 1
            try:
                (df.write.format("jetstream").option("servers", ",".join(cfg["servers"]))
                 .option("stream", cfg["batch_stream"]).option("write_id", cfg["write_id"])
                 .option("window", "32").option("ack_timeout", "3").option("connect_timeout", "2")
                 .mode("append").save())
                break
            except Exception as e:  # the job failed (a task ran out of tries): the same write again
                errors.append(str(e).splitlines()[0][:300])
        # failed task attempts of the write's jobs (each was tried again, up to 4 times per task)
        st = sc.statusTracker()
        failed = tasks = 0
        for jid in st.getJobIdsForGroup("batch-write"):
            job = st.getJobInfo(jid)
            for sid in job.stageIds if job else []:
                si = st.getStageInfo(sid)
                if si is not None:
                    failed += si.numFailedTasks
                    tasks += si.numTasks
        with open(cfg["result"], "w") as f:
            json.dump({"attempts": attempts, "errors": errors, "failed_tasks": failed, "tasks": tasks}, f)
        return
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
