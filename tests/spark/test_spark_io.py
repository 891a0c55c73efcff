"""The jetstream and kv Spark data sources against real servers (Rillet, and the Go nats-server for the basic
read and write): batch reads with gaps and filters, streaming with admission control and availableNow,
writes with dedup, KV, and the errors that must end a query quickly and clearly."""
from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.js.api import StreamConfig, StreamSource

from spark_support import JSServer, free_port, js_client, run


async def _make_stream(url: str, name: str, subjects: list[str], msgs: list[tuple[str, bytes, dict | None]],
                       delete: tuple[int, ...] = (), allow_direct: bool = True, **cfg) -> None:
    nc, js = await js_client(url)
    await js.add_stream(StreamConfig(name=name, subjects=subjects, allow_direct=allow_direct, **cfg))
    for subj, data, hdrs in msgs:
        await js.publish(subj, data, headers=hdrs)
    for seq in delete:
        await js.delete_msg(name, seq)
    await nc.close()


async def _state(url: str, name: str) -> dict:
    nc, js = await js_client(url)
    info = await js.stream_info(name)
    await nc.close()
    return {"messages": info.state.messages, "first": info.state.first_seq, "last": info.state.last_seq}


def _orders(name: str) -> list[tuple[str, bytes, dict | None]]:
    regions = ["eu", "us", "apac"]
    out = []
    for i in range(1, 31):
        r = regions[i % 3]
        kind = "paid" if i % 4 == 0 else "new"
        out.append((f"{name}.{r}.{kind}", f"order-{i}".encode(), {"Region": r} if i % 5 == 0 else None))
    return out


def _read(spark, url, stream, **opts):
    r = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


@pytest.mark.parametrize("mode", ["consumer", "direct"])
def test_batch_read_with_interior_deletes_and_filters(spark, any_server, name, mode):
    url = any_server.url
    msgs = _orders(name)
    deleted = (4, 10, 11, 29)
    run(_make_stream(url, name, [f"{name}.>"], msgs, delete=deleted))
    df = _read(spark, url, name, num_partitions=3, read_mode=mode)
    assert df.schema.simpleString() == ("struct<stream:string,subject:string,seq:bigint,timestamp:timestamp,"
                                        "headers:map<string,array<string>>,data:binary,region:string,"
                                        "origin:string>")
    rows = sorted(df.collect(), key=lambda r: r.seq)
    want = [(i, s, d) for i, (s, d, _) in enumerate(msgs, 1) if i not in deleted]
    assert [(r.seq, r.subject, bytes(r.data)) for r in rows] == want
    assert {r.stream for r in rows} == {name}
    r5 = next(r for r in rows if r.seq == 5)
    assert r5.headers == {"Region": ["apac"]} and r5.region == "apac" and r5.origin is None
    assert next(r for r in rows if r.seq == 6).headers is None
    assert all(r.timestamp is not None for r in rows)

    # one filter with a wildcard (direct gets take one filter)
    got = sorted(r.seq for r in _read(spark, url, name, filter_subjects=f"{name}.eu.*", num_partitions=2,
                                      read_mode=mode).collect())
    assert got == [i for i, (s, _, _) in enumerate(msgs, 1) if ".eu." in s and i not in deleted]
    # several filters (ordered consumer with filter_subjects), sequence bounds
    if mode == "consumer":
        df = _read(spark, url, name, filter_subjects=f"{name}.us.new,{name}.*.paid", start=3, end=25,
                   num_partitions=4)
        got = sorted(r.seq for r in df.collect())
        assert got == [i for i, (s, _, _) in enumerate(msgs, 1)
                       if 3 <= i <= 25 and i not in deleted and (s.endswith(".paid") or ".us.new" in s)]


def test_start_at_time_and_decodes(spark, rillet_server, name):
    url = rillet_server.url
    docs = [{"id": i, "amount": i * 1.5, "region": "eu"} for i in range(1, 11)]
    msgs = [(f"{name}.x", json.dumps(d).encode(), None) for d in docs]
    msgs.insert(5, (f"{name}.x", b"not json", None))  # seq 6
    run(_make_stream(url, name, [f"{name}.>"], msgs[:7]))
    time.sleep(0.05)
    t0 = time.time()
    time.sleep(0.05)

    async def more():
        nc, js = await js_client(url)
        for s, d, _ in msgs[7:]:
            await js.publish(s, d)
        await nc.close()
    run(more())
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0)) + f".{int((t0 % 1) * 1e6):06d}Z"
    got = [r.seq for r in _read(spark, url, name, start=iso).orderBy("seq").collect()]
    assert got == [8, 9, 10, 11]
    assert [r.seq for r in _read(spark, url, name, end=iso).orderBy("seq").collect()] == list(range(1, 8))

    df = _read(spark, url, name, decode="json", json_schema="id BIGINT, amount DOUBLE, region STRING")
    assert [f.name for f in df.schema.fields] == ["stream", "subject", "seq", "timestamp", "headers", "id",
                                                   "amount", "region", "origin"]
    rows = df.orderBy("seq").collect()
    assert rows[5].id is None and rows[5].amount is None  # the payload that is not JSON
    assert [(r.id, r.amount) for r in rows if r.seq != 6] == [(d["id"], d["amount"]) for d in docs]
    # region comes from the JSON document here (a decoded column), not from a header
    assert {r.region for r in rows if r.seq != 6} == {"eu"}
    texts = _read(spark, url, name, decode="utf8", end=2).collect()
    assert [r.data for r in texts] == [json.dumps(docs[0]), json.dumps(docs[1])]


def test_origin_of_sourced_messages(spark, rillet_server, name):
    url = rillet_server.url

    async def setup():
        nc, js = await js_client(url)
        for r in ("EU", "US"):
            await js.add_stream(StreamConfig(name=f"{name}_{r}", subjects=[f"{name}.{r.lower()}.>"]))
            await js.publish(f"{name}.{r.lower()}.o", r.encode(), headers={"Region": r.lower()})
        await js.add_stream(StreamConfig(name=f"{name}_ALL", sources=[StreamSource(name=f"{name}_EU"),
                                                                       StreamSource(name=f"{name}_US")]))
        for _ in range(100):
            if (await js.stream_info(f"{name}_ALL")).state.messages == 2:
                break
            await asyncio.sleep(0.05)
        await nc.close()
    run(setup())
    rows = _read(spark, url, f"{name}_ALL").collect()
    assert sorted((r.origin, r.region) for r in rows) == [(f"{name}_EU", "eu"), (f"{name}_US", "us")]


def test_write_read_round_trip_and_dedup(spark, any_server, name):
    url = any_server.url
    run(_make_stream(url, name, [f"{name}.>"], []))
    data = [(f"{name}.a" if i % 2 else f"{name}.b", f"v{i}".encode(), {"k": ["x", str(i)]} if i < 3 else None)
            for i in range(50)]
    df = spark.createDataFrame(data, "subject STRING, data BINARY, headers MAP<STRING, ARRAY<STRING>>") \
        .repartition(3)
    df.cache().count()

    def write(frame, **opts):
        w = frame.write.format("jetstream").option("servers", url).option("stream", name).mode("append")
        for k, v in opts.items():
            w = w.option(k, v)
        w.save()

    write(df)
    assert run(_state(url, name))["messages"] == 50
    write(df)  # the same rows again: every Nats-Msg-Id is a duplicate
    assert run(_state(url, name))["messages"] == 50
    rows = _read(spark, url, name).collect()
    assert sorted((r.subject, bytes(r.data)) for r in rows) == sorted((s, d) for s, d, _ in data)
    hdrs = {bytes(r.data): r.headers for r in rows}
    assert hdrs[b"v1"]["k"] == ["x", "1"] and hdrs[b"v1"]["Nats-Msg-Id"]
    assert hdrs[b"v10"] == {"Nats-Msg-Id": hdrs[b"v10"]["Nats-Msg-Id"]}

    # a fixed subject, string data, explicit write ids: same id twice is stored once
    df2 = spark.createDataFrame([("hello",), ("world",)], "data STRING")
    write(df2, subject=f"{name}.fixed", write_id="job-7")
    write(df2, subject=f"{name}.fixed", write_id="job-7")
    assert run(_state(url, name))["messages"] == 52
    write(df2, subject=f"{name}.fixed", write_id="job-8")
    assert run(_state(url, name))["messages"] == 54
    df3 = spark.createDataFrame([("m", "one"), ("m", "two")], "msg_id STRING, data STRING")
    write(df3, subject=f"{name}.fixed")
    assert run(_state(url, name))["messages"] == 55


def test_streaming_admission_control_and_available_now(spark, rillet_server, name, tmp_path):
    url = rillet_server.url
    msgs = [(f"{name}.s", f"{i}".encode() * 10, None) for i in range(1, 101)]
    run(_make_stream(url, name, [f"{name}.>"], msgs, delete=(50, 51)))
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name)
         .option("max_messages_per_trigger", "30").option("num_partitions", "2").load()
         .writeStream.format("memory").queryName(f"m_{name}").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(60)
    assert q.exception() is None
    seqs = sorted(r.seq for r in spark.table(f"m_{name}").collect())
    assert seqs == [i for i in range(1, 101) if i not in (50, 51)]
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert len(sizes) == 4 and max(sizes) <= 30, sizes
    assert q.recentProgress[-1]["sources"][0]["endOffset"] == json.dumps({"stream": name, "seq": 100}) or \
        json.loads(q.recentProgress[-1]["sources"][0]["endOffset"]) == {"stream": name, "seq": 100}

    # bytes per trigger (estimated from the stream's average message size), and a restart from the checkpoint
    run(_make_stream(url, name + "B", [f"{name}B.>"], [(f"{name}B.s", d, h) for _, d, h in msgs]))
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name + "B")
         .option("max_bytes_per_trigger", str(40 * 25)).load()
         .writeStream.format("memory").queryName(f"b_{name}").option("checkpointLocation", str(tmp_path / "ckb"))
         .trigger(availableNow=True).start())
    q.awaitTermination(60)
    assert q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100 and max(sizes) <= 40 and len(sizes) >= 3, sizes


def test_streaming_write_retry_is_deduplicated(spark, rillet_server, name, tmp_path):
    url = rillet_server.url
    run(_make_stream(url, name, [f"{name}.in"], [(f"{name}.in", f"{i}".encode(), None) for i in range(40)]))
    run(_make_stream(url, name + "_OUT", [f"{name}.out"], []))
    ck = tmp_path / "ck"

    def go():
        q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name)
             .option("max_messages_per_trigger", "15").load()
             .selectExpr("data", "subject")
             .selectExpr("data", f"'{name}.out' AS subject")
             .writeStream.format("jetstream").option("servers", url).option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start())
        q.awaitTermination(60)
        assert q.exception() is None

    go()
    assert run(_state(url, name + "_OUT"))["messages"] == 40
    # forget that the last two batches were committed: Spark runs them again on restart, with the same
    # query id and batch ids, so every message it publishes again is a duplicate
    commits = sorted((ck / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert len(commits) == 3
    for p in commits[-2:]:
        p.unlink()
        (ck / "commits" / f".{p.name}.crc").unlink(missing_ok=True)
    go()
    assert run(_state(url, name + "_OUT"))["messages"] == 40


def test_kv_write_read_history(spark, any_server, name):
    url = any_server.url
    bucket = name.lower()

    async def setup():
        nc, js = await js_client(url)
        await js.create_key_value(bucket=bucket, history=5)
        await nc.close()
    run(setup())

    def put(rows, **opts):
        w = (spark.createDataFrame(rows, "key STRING, value STRING").write.format("kv")
             .option("servers", url).option("bucket", bucket).mode("append"))
        for k, v in opts.items():
            w = w.option(k, v)
        w.save()

    put([("eu.total", "1"), ("us.total", "2"), ("apac.total", "3")])
    put([("eu.total", "10"), ("apac.total", None)])  # a new value, and a delete
    kv = (spark.read.format("kv").option("servers", url).option("bucket", bucket).option("decode", "utf8")
          .load())
    assert sorted((r.key, r.value) for r in kv.collect()) == [("eu.total", "10"), ("us.total", "2")]
    hist = (spark.read.format("kv").option("servers", url).option("bucket", bucket).option("history", "true")
            .option("include_deletes", "true").option("decode", "utf8").load())
    got = [(r.key, r.value, r.operation) for r in hist.orderBy("key", "revision").collect()]
    assert got == [("apac.total", "3", "PUT"), ("apac.total", "", "DEL"), ("eu.total", "1", "PUT"),
                   ("eu.total", "10", "PUT"), ("us.total", "2", "PUT")]

    async def check():
        nc, js = await js_client(url)
        b = await js.key_value(bucket)
        v = (await b.get("eu.total")).value
        await nc.close()
        return v
    assert run(check()) == b"10"
    put([("k", "v")], write_id="w1")
    put([("k", "v")], write_id="w1")  # deduplicated: one revision
    hist = (spark.read.format("kv").option("servers", url).option("bucket", bucket).option("history", "true")
            .load())
    assert len([r for r in hist.collect() if r.key == "k"]) == 1
    with pytest.raises(Exception, match="invalid key"):
        put([("bad key", "v")])


# ---------------------------------------------------------------------------------------------------
# Errors: clear, and quick


def _error_text(e: BaseException) -> str:
    return str(e)


@pytest.mark.parametrize("opts,needle", [
    ({"num_partitions": "lots"}, "option 'num_partitions'"),
    ({"start": "yesterday"}, "option 'start'"),
    ({"decode": "json"}, "option 'decode'"),
    ({"filter_subjects": "a..b"}, "option 'filter_subjects'"),
])
def test_bad_options_fail_at_query_start(spark, rillet_server, opts, needle):
    with pytest.raises(Exception) as e:
        df = _read(spark, rillet_server.url, "ANY", **opts)
        df.collect()
    assert needle in _error_text(e.value)
    with pytest.raises(Exception) as e:
        r = spark.readStream.format("jetstream").option("servers", rillet_server.url).option("stream", "ANY")
        for k, v in opts.items():
            r = r.option(k, v)
        r.load()
    assert needle in _error_text(e.value)


def test_unreachable_server_and_missing_stream(spark, rillet_server, tmp_path):
    t = time.monotonic()
    dead = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(Exception) as e:
        _read(spark, dead, "S", connect_timeout=2).collect()
    assert "cannot connect to NATS at " + dead in _error_text(e.value)
    with pytest.raises(Exception) as e:
        _read(spark, rillet_server.url, "NO_SUCH_STREAM").collect()
    assert "stream 'NO_SUCH_STREAM' not found" in _error_text(e.value)
    with pytest.raises(Exception) as e:
        (spark.readStream.format("jetstream").option("servers", rillet_server.url).option("stream", "NO_SUCH")
         .load().writeStream.format("memory").queryName("nosuch")
         .option("checkpointLocation", str(tmp_path / "ck")).start().awaitTermination(30))
    assert "stream 'NO_SUCH' not found" in _error_text(e.value)
    with pytest.raises(Exception) as e:
        (spark.createDataFrame([("x",)], "data STRING").write.format("jetstream")
         .option("servers", rillet_server.url).option("subject", "nobody.listens").mode("append").save())
    assert "no stream listens on subject 'nobody.listens'" in _error_text(e.value)
    assert time.monotonic() - t < 60


def test_stream_deleted_mid_query_ends_it(spark, rillet_server, name, tmp_path):
    url = rillet_server.url
    run(_make_stream(url, name, [f"{name}.>"], [(f"{name}.a", b"x", None)] * 5))
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name).load()
         .writeStream.format("memory").queryName(f"del_{name}")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 30
    while spark.table(f"del_{name}").count() < 5 and time.monotonic() < deadline:
        time.sleep(0.2)

    async def delete():
        nc, js = await js_client(url)
        await js.delete_stream(name)
        await nc.close()
    run(delete())
    t = time.monotonic()
    with pytest.raises(Exception) as e:
        q.awaitTermination(30)
    assert time.monotonic() - t < 30
    assert f"stream '{name}' not found" in _error_text(e.value)
    assert not q.isActive


def test_checkpoint_below_first_sequence(spark, rillet_server, name, tmp_path):
    url = rillet_server.url
    run(_make_stream(url, name, [f"{name}.>"], [(f"{name}.a", f"{i}".encode(), None) for i in range(10)]))
    ck = str(tmp_path / "ck")

    def go(**opts):
        r = spark.readStream.format("jetstream").option("servers", url).option("stream", name)
        for k, v in opts.items():
            r = r.option(k, v)
        q = (r.load().selectExpr("seq", "CAST(data AS STRING) AS body").writeStream.format("parquet")
             .option("path", str(tmp_path / "out")).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination(60)
        return q

    assert go().exception() is None

    async def age_out():
        nc, js = await js_client(url)
        for i in range(10, 20):
            await js.publish(f"{name}.a", f"{i}".encode())
        await js.purge_stream(name, keep=3)  # sequences 11..17 are gone before the query saw them
        await nc.close()
    run(age_out())
    with pytest.raises(Exception) as e:
        go().awaitTermination()
    assert "on_data_loss=skip" in _error_text(e.value) and "sequences 11..17" in _error_text(e.value)
    q = go(on_data_loss="skip")
    assert q.exception() is None
    assert sorted(int(r.body) for r in spark.read.parquet(str(tmp_path / "out")).collect()) == \
        list(range(10)) + [17, 18, 19]


@pytest.mark.parametrize("kind", ["rillet", "go"])
def test_credentials(spark, kind, name):
    """user/password and token options reach the server; wrong ones fail clearly at query start."""
    for flags, good, bad in [(("--user", "spark", "--pass", "s3cret"), {"user": "spark", "password": "s3cret"},
                              {"user": "spark", "password": "wrong"}),
                             (("--auth", "t0ken"), {"token": "t0ken"}, {"token": "nope"})]:
        srv = JSServer(kind, flags)
        try:
            async def setup():
                nc = await nats.connect(srv.url, **good)
                js = nc.jetstream()
                await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
                await js.publish(f"{name}.a", b"hi")
                await nc.close()
            run(setup())
            assert [bytes(r.data) for r in _read(spark, srv.url, name, **good).collect()] == [b"hi"]
            with pytest.raises(Exception) as e:
                _read(spark, srv.url, name, **bad).collect()
            assert "JetStreamSparkError: cannot connect to NATS at" in str(e.value)
        finally:
            srv.stop()
