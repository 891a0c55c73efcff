"""The ``jetstream`` Spark data source: batch and streaming reads, batch and streaming writes.

Offsets are stream sequences: ``{"stream": name, "seq": n}`` means "everything up to and including
sequence n has been handed to Spark". A micro-batch is the sequence range (start.seq, end.seq], planned on
the driver from the stream's state and cut into ``num_partitions`` contiguous sub-ranges, one Spark task
each. A task reads exactly its range again after any failure (no consumer state lives on the server), so a
checkpointed query into an idempotent or transactional sink is exactly-once.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter,
                                    DataSourceStreamReader, InputPartition, WriterCommitMessage)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows,
                                              SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from rillet.spark import client as C
from rillet.spark.options import OptionError, ReadOptions, WriteOptions, ddl_field_names, parse_read, parse_write

log = logging.getLogger("rillet.spark")

# how long a task reads again after transient errors (lost server, leader election) before it fails
READ_RETRY_SECONDS = 30.0

def read_schema_ddl(opts: ReadOptions) -> str:
    """The columns: stream, subject, seq, timestamp, headers, data (or the decoded JSON columns), region, origin.
    A JSON column with the name of a metadata column takes its place."""
    meta = ["stream STRING", "subject STRING", "seq BIGINT", "timestamp TIMESTAMP",
            "headers MAP<STRING, ARRAY<STRING>>"]
    tail = ["region STRING", "origin STRING"]
    if opts.decode == "json":
        names = {n.lower() for n in ddl_field_names(opts.json_schema)}
        keep = [c for c in meta + tail if c.split()[0] not in names]
        return ", ".join(keep[:len([c for c in meta if c in keep])] + [opts.json_schema] +
                         [c for c in tail if c in keep])
    data = "data STRING" if opts.decode == "utf8" else "data BINARY"
    return ", ".join(meta + [data] + tail)


class SeqRange(InputPartition):
    """One task's share of a micro-batch: sequences lo..hi (inclusive) of ``stream``."""

    def __init__(self, stream: str, lo: int, hi: int, mode: str) -> None:
        super().__init__((stream, lo, hi))
        self.stream, self.lo, self.hi, self.mode = stream, lo, hi, mode

    def __repr__(self) -> str:
        return f"SeqRange({self.stream} {self.lo}..{self.hi} {self.mode})"


def split_range(stream: str, lo: int, hi: int, parts: int, mode: str) -> list[SeqRange]:
    """[lo, hi] cut into at most ``parts`` contiguous ranges of nearly equal length."""
    if hi < lo:
        return []
    total = hi - lo + 1
    parts = max(1, min(parts, total))
    out = []
    start = lo
    for i in range(parts):
        size = total // parts + (1 if i < total % parts else 0)
        out.append(SeqRange(stream, start, start + size - 1, mode))
        start += size
    return out


def choose_mode(opts: ReadOptions, info: dict) -> str:
    """Ordered consumer or batched direct gets. Direct gets need ``allow_direct`` on the stream and take one
    filter; ``auto`` uses the ordered consumer, which measured faster (see benchmarks/README.md)."""
    allow = bool(info.get("config", {}).get("allow_direct"))
    if opts.read_mode == "direct":
        if not allow:
            raise OptionError(f"option 'read_mode': direct needs allow_direct on stream {opts.stream!r}")
        if len(opts.filter_subjects) > 1:
            raise OptionError("option 'read_mode': direct takes at most one filter subject")
        return "direct"
    return "consumer"


async def _info(opts: ReadOptions) -> dict:
    nc = await C.connect(opts.conn)
    try:
        return await C.stream_info(nc, opts.stream)
    finally:
        await nc.close()


async def _info_retry(opts: ReadOptions, tries: int = 4) -> dict:
    """The stream's info for a running query's planning: a timeout or a lost server (a leader election, a
    server restarting) is asked again on a fresh connection (any server of the list) before the query fails;
    a missing stream fails at once."""
    for i in range(tries):
        try:
            return await _info(opts)
        except C.StreamNotFound:
            raise
        except C.JetStreamSparkError as e:
            if i == tries - 1:
                raise
            log.warning("stream %r: %s; asking again", opts.stream, e)
            await asyncio.sleep(0.5 * (i + 1))
    raise AssertionError("unreachable")


async def _resolve_start(opts: ReadOptions, info: dict) -> int:
    """The offset (last sequence already read) where a read starts."""
    st = info["state"]
    first, last = int(st["first_seq"]), int(st["last_seq"])
    s = opts.start
    if s.kind == "earliest":
        return max(first, 1) - 1
    if s.kind == "latest":
        return last
    if s.kind == "seq":
        return s.value - 1
    nc = await C.connect(opts.conn)
    try:
        return await C.seq_at_time(nc, opts.stream, s.value, max(first, 1), last) - 1
    finally:
        await nc.close()


async def _resolve_end(opts: ReadOptions, info: dict) -> int:
    last = int(info["state"]["last_seq"])
    if opts.end is not None:
        return min(opts.end, last)
    if opts.end_time is not None:
        nc = await C.connect(opts.conn)
        try:
            first = max(int(info["state"]["first_seq"]), 1)
            return await C.seq_at_time(nc, opts.stream, opts.end_time, first, last) - 1
        finally:
            await nc.close()
    return last


def read_partition(opts: ReadOptions, schema: StructType, part: SeqRange) -> Iterator[Any]:
    """Runs in an executor's Python worker: connect, read the range, yield Arrow record batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from rillet.spark.arrow import BatchBuilder

    json_names = ddl_field_names(opts.json_schema) if opts.decode == "json" else []
    builder = BatchBuilder(to_arrow_schema(schema, timezone="UTC"), part.stream, opts.decode, opts.region_header,
                           json_names)

    async def produce(emit: Any) -> None:
        # A lost server or a stream without a leader for a moment (an election, a restart) must not fail
        # the task: read again, on a fresh connection to any server, from the sequence after the last one
        # handed to Spark (a range is read the same from any replica), for up to READ_RETRY_SECONDS.
        last = part.lo - 1

        def emit_tracked(chunk: Any) -> None:
            nonlocal last
            emit(chunk)
            if chunk.seqs:
                last = chunk.seqs[-1]

        deadline = time.monotonic() + READ_RETRY_SECONDS
        tries = 0
        while last < part.hi:
            nc = None
            try:
                nc = await C.connect(opts.conn)
                r = C.RangeReader(nc, part.stream, last + 1, part.hi, opts.filter_subjects, emit_tracked,
                                  idle_timeout=opts.idle_timeout, batch_size=opts.batch_size)
                if part.mode == "direct":
                    await r.by_direct_get()
                else:
                    await r.by_consumer()
                return
            except (C.StreamNotFound, C.ReaderStopped, OptionError):
                raise
            except Exception as e:  # timeouts, lost connections, a server without a stream leader yet
                tries += 1
                if time.monotonic() > deadline:
                    raise
                log.warning("stream %r: reading %d..%d failed (%s: %s); reading again from %d", part.stream,
                            part.lo, part.hi, type(e).__name__, e, last + 1)
                await asyncio.sleep(min(0.25 * tries, 2.0))
            finally:
                if nc is not None:
                    try:
                        await nc.close()
                    except Exception:
                        pass

    for chunk in C.iterate_in_thread(produce):
        yield builder.build(chunk)


class JetStreamBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts, self.schema = opts, schema

    def partitions(self) -> list[SeqRange]:
        opts = self.opts

        async def plan() -> list[SeqRange]:
            info = await _info(opts)
            mode = choose_mode(opts, info)
            lo = await _resolve_start(opts, info) + 1
            hi = await _resolve_end(opts, info)
            lo = max(lo, int(info["state"]["first_seq"]))
            return split_range(opts.stream, lo, hi, opts.num_partitions, mode)

        parts = C.run(plan())
        # Spark wants at least one partition: an empty range reads nothing
        return parts or [SeqRange(opts.stream, 1, 0, "consumer")]

    def read(self, partition: SeqRange) -> Iterator[Any]:
        if partition.hi < partition.lo:
            return iter(())
        return read_partition(self.opts, self.schema, partition)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts, self.schema = opts, schema
        self.target: int | None = None
        self.mode: str | None = None

    def _offset(self, seq: int) -> dict:
        return {"stream": self.opts.stream, "seq": int(seq)}

    def initialOffset(self) -> dict:
        opts = self.opts

        async def go() -> int:
            info = await _info(opts)
            self.mode = choose_mode(opts, info)
            return await _resolve_start(opts, info)

        return self._offset(C.run(go()))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages_per_trigger:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        if self.opts.max_bytes_per_trigger:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        info = C.run(_info_retry(self.opts))
        self.target = int(info["state"]["last_seq"])

    def _check_offset(self, start: dict) -> None:
        if start.get("stream") != self.opts.stream:
            raise C.JetStreamSparkError(f"the checkpoint is for stream {start.get('stream')!r}, this query reads "
                                        f"{self.opts.stream!r}")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._check_offset(start)
        info = C.run(_info_retry(self.opts))
        if self.mode is None:
            self.mode = choose_mode(self.opts, info)
        st = info["state"]
        last = int(st["last_seq"])
        s = int(start["seq"])
        if last < s:
            raise C.JetStreamSparkError(
                f"stream {self.opts.stream!r}: last sequence {last} is below the checkpointed sequence {s} "
                f"(was the stream deleted and created again?)")
        end = last if self.target is None else min(last, self.target)
        if not isinstance(limit, ReadAllAvailable):
            # the engine's limit, and any other limit configured through options
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_messages_per_trigger
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.opts.max_bytes_per_trigger
            lo = max(s, int(st["first_seq"]) - 1)
            if max_rows:
                # sequences bound rows from above (deleted or filtered-out sequences give no row)
                end = min(end, lo + max_rows)
            if max_bytes:
                msgs = int(st.get("messages") or 0)
                avg = max(1, int(st.get("bytes") or 0) // msgs) if msgs else 1
                end = min(end, lo + max(1, max_bytes // avg))
        return self._offset(max(end, s))

    def reportLatestOffset(self) -> dict | None:
        try:
            info = C.run(_info(self.opts))
        except Exception:
            return None
        return self._offset(int(info["state"]["last_seq"]))

    def partitions(self, start: dict, end: dict) -> list[SeqRange]:
        self._check_offset(start)
        lo, hi = int(start["seq"]) + 1, int(end["seq"])
        if hi < lo:
            return []
        info = C.run(_info_retry(self.opts))
        first = int(info["state"]["first_seq"])
        if lo < first:
            lost = f"sequences {lo}..{min(hi, first - 1)}"
            if self.opts.on_data_loss != "skip":
                raise C.JetStreamSparkError(
                    f"stream {self.opts.stream!r}: the checkpoint wants {lost} but the stream's first sequence "
                    f"is now {first} (messages aged out or were purged); set option on_data_loss=skip to go on")
            log.warning("stream %r: skipping %s, no longer in the stream (first sequence %d)",
                        self.opts.stream, lost, first)
            lo = first
        mode = self.mode or choose_mode(self.opts, info)
        return split_range(self.opts.stream, lo, hi, self.opts.num_partitions, mode)

    def read(self, partition: SeqRange) -> Iterator[Any]:
        return read_partition(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        return None  # nothing to acknowledge: the checkpoint is the only state


# ---------------------------------------------------------------------------------------------------
# Writing


@dataclass
class PublishStats(WriterCommitMessage):
    partition: int = 0
    rows: int = 0
    published: int = 0
    duplicates: int = 0


def _task_ids() -> tuple[int, str, str]:
    """(partition id, streaming batch id, streaming query id) of the running Spark task."""
    from pyspark import TaskContext
    tc = TaskContext.get()
    if tc is None:
        return 0, "", ""
    return (tc.partitionId(), tc.getLocalProperty("streaming.sql.batchId") or "",
            tc.getLocalProperty("sql.streaming.queryId") or "")


def _check_write_schema(opts: WriteOptions, schema: StructType) -> None:
    names = {f.name.lower() for f in schema.fields}
    if "data" not in names:
        raise OptionError("the DataFrame written to jetstream needs a 'data' column (binary or string)")
    if "subject" not in names and not opts.subject:
        raise OptionError("the DataFrame written to jetstream needs a 'subject' column or option 'subject'")


async def _check_stream(opts: WriteOptions) -> None:
    nc = await C.connect(opts.conn)
    try:
        if opts.stream:
            await C.stream_info(nc, opts.stream)
    finally:
        await nc.close()


def _hpairs(value: Any) -> list[tuple[str, str]]:
    if value is None:
        return []
    items = value.items() if isinstance(value, dict) else value
    out = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            out.extend((k, str(x)) for x in v if x is not None)
        else:
            out.append((k, str(v)))
    return out


def publish_messages(opts: Any, messages: Callable[[int], Iterator[tuple[str, bytes, Any]]],
                     quiet_close: bool = False) -> PublishStats:
    """Publish the messages ``messages(partition)`` yields (subject, data, headers) with acks, ``opts.window``
    in flight, on a connection of ``opts.conn`` (``quiet_close``: an error closing it is ignored)."""
    part, _, _ = _task_ids()
    stats = PublishStats(partition=part)

    async def go() -> None:
        nc = await C.connect(opts.conn)
        try:
            pub = await C.Publisher(nc, opts.window, opts.ack_timeout).start()
            row = 0
            for subject, data, pairs in messages(part):
                await pub.publish(subject, data, pairs)
                row += 1
            await pub.drain()
            stats.rows, stats.published, stats.duplicates = row, pub.published, pub.duplicates
        finally:
            if quiet_close:
                try:
                    await nc.close()
                except Exception:
                    pass
            else:
                await nc.close()

    C.run(go())
    return stats


def publish_batches(opts: WriteOptions, batches: Iterator[Any], id_base: str | None) -> PublishStats:
    """Publish the rows of Arrow record batches with acks, ``opts.window`` in flight. ``id_base`` prefixes the
    generated Nats-Msg-Id (None: derive it from each row's content)."""

    def messages(part: int) -> Iterator[tuple[str, bytes, Any]]:
        row = 0
        for rb in batches:
            cols = {n.lower(): rb.column(i).to_pylist() for i, n in enumerate(rb.schema.names)}
            datas = cols["data"]
            subjects = cols.get("subject")
            hdrs = cols.get("headers")
            ids = cols.get("msg_id")
            for i in range(rb.num_rows):
                subject = subjects[i] if subjects is not None and subjects[i] else opts.subject
                if not subject or any(ch in subject for ch in " \t\r\n"):
                    raise C.JetStreamSparkError(f"row {row} of partition {part}: invalid subject {subject!r}")
                data = datas[i]
                if data is None:
                    data = b""
                elif isinstance(data, str):
                    data = data.encode()
                pairs = C.HeaderPairs(_hpairs(hdrs[i]) if hdrs is not None else [])
                msg_id = ids[i] if ids is not None and ids[i] else None
                if msg_id is None:
                    if id_base is None:
                        h = hashlib.blake2b(digest_size=10)
                        h.update(subject.encode() + b"\0" + data + b"\0" + repr(pairs).encode())
                        msg_id = f"{h.hexdigest()}:{part}:{row}"
                    else:
                        msg_id = f"{id_base}:{part}:{row}"
                pairs.append(("Nats-Msg-Id", str(msg_id)))
                yield subject, data, pairs
                row += 1

    return publish_messages(opts, messages, quiet_close=True)


class PublishingBatchWriter(DataSourceArrowWriter):
    """A batch write's tasks publish their rows (``_publish``) under the Nats-Msg-Id base ``_id_base()``;
    the commit logs the totals under ``label``. The jetstream and kv writers differ only in those."""
    label = "write"

    def __init__(self, opts: Any) -> None:
        self.opts = opts

    def _id_base(self) -> str | None:
        raise NotImplementedError

    def _publish(self, iterator: Iterator[Any], base: str | None) -> PublishStats:
        raise NotImplementedError

    def write(self, iterator: Iterator[Any]) -> PublishStats:
        return self._publish(iterator, self._id_base())

    def commit(self, messages: list[Any]) -> None:
        _log_stats(messages, self.label)

    def abort(self, messages: list[Any]) -> None:
        return None


class PublishingStreamWriter(DataSourceStreamArrowWriter):
    """A streaming query's micro-batch published as ``PublishingBatchWriter`` publishes a batch write, its
    Nats-Msg-Id base made of the query's id and the batch's (``_id_base``): a retried batch is deduplicated."""
    label = "batch"

    def __init__(self, opts: Any) -> None:
        self.opts = opts

    def _id_base(self, query_id: str, batch_id: str) -> str:
        raise NotImplementedError

    def _publish(self, iterator: Iterator[Any], base: str | None) -> PublishStats:
        raise NotImplementedError

    def write(self, iterator: Iterator[Any]) -> PublishStats:
        _, batch_id, query_id = _task_ids()
        return self._publish(iterator, self._id_base(query_id, batch_id))

    def commit(self, messages: list[Any], batchId: int) -> None:
        _log_stats(messages, f"{self.label} {batchId}")

    def abort(self, messages: list[Any], batchId: int) -> None:
        return None


class JetStreamBatchWriter(PublishingBatchWriter):
    def _id_base(self) -> str | None:
        return f"{self.opts.msg_id_prefix or 'w'}:{self.opts.write_id}" if self.opts.write_id else None

    def _publish(self, iterator: Iterator[Any], base: str | None) -> PublishStats:
        return publish_batches(self.opts, iterator, base)

    def abort(self, messages: list[Any]) -> None:
        log.warning("jetstream write aborted; published messages stay, a retry is deduplicated by Nats-Msg-Id")


class JetStreamStreamWriter(PublishingStreamWriter):
    def _id_base(self, query_id: str, batch_id: str) -> str:
        return f"{self.opts.msg_id_prefix or query_id}:{batch_id}"

    def _publish(self, iterator: Iterator[Any], base: str | None) -> PublishStats:
        return publish_batches(self.opts, iterator, base)

    def abort(self, messages: list[Any], batchId: int) -> None:
        log.warning("jetstream batch %s aborted; its retry is deduplicated by Nats-Msg-Id", batchId)


def _log_stats(messages: list[Any], what: str) -> None:
    ok = [m for m in messages if isinstance(m, PublishStats)]
    log.info("jetstream %s: %d rows, %d stored, %d duplicates", what, sum(m.rows for m in ok),
             sum(m.published for m in ok), sum(m.duplicates for m in ok))


class PublishingDataSource(DataSource):
    """A data source whose writes publish (jetstream, kv): ``format_name`` names its format,
    ``_write_options`` parses a write's options and checks them (against the schema and the server) before
    the write starts, ``batch_writer`` / ``stream_writer`` publish."""
    format_name = ""
    batch_writer: type[PublishingBatchWriter]
    stream_writer: type[PublishingStreamWriter]

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def _write_options(self, schema: StructType) -> Any:
        raise NotImplementedError

    def writer(self, schema: StructType, overwrite: bool) -> PublishingBatchWriter:
        return self.batch_writer(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> PublishingStreamWriter:
        return self.stream_writer(self._write_options(schema))


class JetStreamDataSource(PublishingDataSource):
    """``format("jetstream")``: see docs/spark.md."""
    format_name = "jetstream"
    batch_writer = JetStreamBatchWriter
    stream_writer = JetStreamStreamWriter

    def schema(self) -> str:
        return read_schema_ddl(parse_read(self.options))

    def reader(self, schema: StructType) -> JetStreamBatchReader:
        opts = parse_read(self.options)
        _check_read_schema(opts, schema)
        return JetStreamBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> JetStreamStreamReader:
        opts = parse_read(self.options)
        if opts.end is not None or opts.end_time is not None:
            raise OptionError("option 'end' is for batch reads only")
        _check_read_schema(opts, schema)
        r = JetStreamStreamReader(opts, schema)
        C.run(_info(opts))  # fail at query start: unreachable server, missing stream
        return r

    def _write_options(self, schema: StructType) -> WriteOptions:
        """The options of a write (batch or streaming), checked against ``schema`` and the stream."""
        opts = parse_write(self.options)
        _check_write_schema(opts, schema)
        C.run(_check_stream(opts))
        return opts


def _check_read_schema(opts: ReadOptions, schema: StructType) -> None:
    from rillet.spark.arrow import META_COLUMNS
    extra = [f.name for f in schema.fields if f.name not in META_COLUMNS and f.name != "data"]
    if opts.decode == "json" and "data" in [f.name for f in schema.fields] and \
            "data" not in ddl_field_names(opts.json_schema):
        raise OptionError("option 'decode': with json, the payload becomes the json_schema columns (no 'data')")
    if extra and opts.decode != "json":
        raise OptionError(f"option 'decode': columns {extra} need decode=json")
