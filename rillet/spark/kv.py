"""The ``kv`` Spark data source: a Key-Value bucket's current values (or its history) as a DataFrame, and
DataFrame rows put into a bucket (a null value deletes the key)."""
from __future__ import annotations

import re
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from rillet.spark import client as C
from rillet.spark.options import KVOptions, OptionError, parse_kv
from rillet.spark.source import PublishingBatchWriter, PublishingDataSource, PublishingStreamWriter, PublishStats, publish_messages

KEY_RE = re.compile(r"^[-/_=.a-zA-Z0-9]+$")


def kv_schema_ddl(opts: KVOptions) -> str:
    value = "STRING" if opts.decode == "utf8" else "BINARY"
    return (f"bucket STRING, key STRING, value {value}, revision BIGINT, created TIMESTAMP, "
            f"operation STRING")


async def _bucket_info(opts: KVOptions) -> dict:
    nc = await C.connect(opts.conn)
    try:
        try:
            return await C.stream_info(nc, f"KV_{opts.bucket}")
        except C.StreamNotFound:
            raise C.JetStreamSparkError(f"key-value bucket {opts.bucket!r} not found") from None
    finally:
        await nc.close()


class KVPartition(InputPartition):
    def __init__(self, hi: int) -> None:
        super().__init__(hi)
        self.hi = hi


def _op(hdr: bytes | None) -> str:
    if not hdr:
        return "PUT"
    i = hdr.find(b"KV-Operation:")
    if i < 0:
        return "PUT"
    j = hdr.find(b"\r\n", i)
    return hdr[i + 13:j].decode().strip()


class KVReader(DataSourceReader):
    def __init__(self, opts: KVOptions, schema: StructType) -> None:
        self.opts, self.schema = opts, schema

    def partitions(self) -> list[KVPartition]:
        info = C.run(_bucket_info(self.opts))
        return [KVPartition(int(info["state"]["last_seq"]))]

    def read(self, partition: KVPartition) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql.pandas.types import to_arrow_schema

        opts = self.opts
        schema = to_arrow_schema(self.schema, timezone="UTC")
        prefix = f"$KV.{opts.bucket}."
        stream = f"KV_{opts.bucket}"
        if partition.hi == 0:
            return

        async def produce(emit: Any) -> None:
            nc = await C.connect(opts.conn)
            try:
                # history: up to the last revision when the read was planned; current values: as of now
                hi = partition.hi if opts.history else (1 << 63) - 1
                r = C.RangeReader(nc, stream, 1, hi, (prefix + ">",), emit, idle_timeout=opts.idle_timeout)
                await r.by_consumer("all" if opts.history else "last_per_subject")
            finally:
                await nc.close()

        for c in C.iterate_in_thread(produce):
            ops = [_op(h) for h in c.headers]
            keep = [i for i, o in enumerate(ops) if opts.include_deletes or o == "PUT"]
            cols: dict[str, Any] = {}
            n = len(keep)
            for f in schema:
                if f.name == "bucket":
                    cols[f.name] = pa.array([opts.bucket] * n, pa.string())
                elif f.name == "key":
                    cols[f.name] = pa.array([c.subjects[i][len(prefix):].decode() for i in keep], pa.string())
                elif f.name == "value":
                    vals = pa.array([c.datas[i] for i in keep], pa.binary())
                    cols[f.name] = vals.cast(pa.string()) if pa.types.is_string(f.type) else vals
                elif f.name == "revision":
                    cols[f.name] = pa.array([c.seqs[i] for i in keep], pa.int64())
                elif f.name == "created":
                    cols[f.name] = pc.divide(pa.array([c.times[i] for i in keep], pa.int64()), 1000).cast(f.type)
                elif f.name == "operation":
                    cols[f.name] = pa.array([ops[i] for i in keep], pa.string())
                else:
                    raise OptionError(f"kv: unknown column {f.name!r}")
            if n:
                yield pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


def put_rows(opts: KVOptions, batches: Iterator[Any], id_base: str | None) -> PublishStats:

    def messages(part: int) -> Iterator[tuple[str, bytes, Any]]:
        row = 0
        for rb in batches:
            cols = {n.lower(): rb.column(i).to_pylist() for i, n in enumerate(rb.schema.names)}
            keys, values = cols["key"], cols["value"]
            for i in range(rb.num_rows):
                key = keys[i]
                if not key or not KEY_RE.match(key) or key.startswith(".") or key.endswith("."):
                    raise C.JetStreamSparkError(f"kv: invalid key {key!r}")
                v = values[i]
                pairs = C.HeaderPairs()
                if v is None:
                    pairs.append(("KV-Operation", "DEL"))
                    v = b""
                elif isinstance(v, str):
                    v = v.encode()
                if id_base is not None:
                    pairs.append(("Nats-Msg-Id", f"{id_base}:{part}:{row}"))
                yield f"$KV.{opts.bucket}.{key}", v, pairs or None
                row += 1

    return publish_messages(opts, messages)


class KVBatchWriter(PublishingBatchWriter):
    label = "kv write"

    def _id_base(self) -> str | None:
        return f"kv:{self.opts.write_id}" if self.opts.write_id else None

    def _publish(self, iterator: Iterator[Any], base: str | None) -> PublishStats:
        return put_rows(self.opts, iterator, base)


class KVStreamWriter(PublishingStreamWriter):
    label = "kv batch"

    def _id_base(self, query_id: str, batch_id: str) -> str:
        return f"{query_id}:{batch_id}"

    def _publish(self, iterator: Iterator[Any], base: str | None) -> PublishStats:
        return put_rows(self.opts, iterator, base)


def _check_kv_write(schema: StructType) -> None:
    names = {f.name.lower() for f in schema.fields}
    if not {"key", "value"} <= names:
        raise OptionError("the DataFrame written to kv needs 'key' and 'value' columns")


class KVDataSource(PublishingDataSource):
    """``format("kv")``: see docs/spark.md."""
    format_name = "kv"
    batch_writer = KVBatchWriter
    stream_writer = KVStreamWriter

    def schema(self) -> str:
        return kv_schema_ddl(parse_kv(self.options))

    def reader(self, schema: StructType) -> KVReader:
        return KVReader(parse_kv(self.options), schema)

    def _write_options(self, schema: StructType) -> KVOptions:
        """The options of a write (batch or streaming), checked against ``schema`` and the bucket."""
        opts = parse_kv(self.options)
        _check_kv_write(schema)
        C.run(_bucket_info(opts))
        return opts
