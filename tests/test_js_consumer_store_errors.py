"""A message the file store cannot read (a corrupt record, an I/O error) while a consumer delivers.

The consumer logs it once, naming the account, stream, consumer and sequence, counts it and skips it: the
messages after it are delivered, nothing stalls. Deleted and missing messages are not errors.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re

import nats

from rillet.app.embed import run_server
from rillet.server.logging import Logger
from rillet.config.options import JetStreamOptions, Options


def _payload(i: int) -> bytes:
    return f"payload-{i:03d}-".encode() + b"x" * 40


@contextlib.asynccontextmanager
async def _server(store_dir):
    buf = io.StringIO()
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(store_dir)))
    async with run_server(opts, log=Logger(out=buf)) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            yield srv, nc, nc.jetstream(), buf
        finally:
            await nc.close()


def _corrupt(store_dir, i: int) -> None:
    """Flip bytes inside the stored payload of message ``i`` (the record then fails its checksum)."""
    needle = _payload(i)
    hits = 0
    for root, _, files in os.walk(store_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                data = f.read()
            at = data.find(needle)
            if at < 0:
                continue
            with open(path, "r+b") as f:
                f.seek(at + len(needle) - 10)
                f.write(b"CORRUPTED!")
            hits += 1
    assert hits == 1, f"payload {i} found in {hits} files"


async def _fetch_seqs(sub, n: int, timeout: float = 1.0) -> list[int]:
    msgs = await sub.fetch(n, timeout=timeout)
    for m in msgs:
        await m.ack()
    return [m.metadata.sequence.stream for m in msgs]


def _lines(buf: io.StringIO, pattern: str) -> list[str]:
    return [ln for ln in buf.getvalue().splitlines() if re.search(pattern, ln)]


async def test_corrupt_record_found_at_restart(tmp_path):
    async with _server(tmp_path) as (_, nc, js, _buf):
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        for i in range(1, 11):
            await js.publish("s.x", _payload(i))
        await js.add_consumer("S", durable_name="D", ack_policy="explicit")
        await js.add_consumer("S", durable_name="F", ack_policy="explicit", filter_subject="s.x")
    _corrupt(tmp_path, 5)
    async with _server(tmp_path) as (srv, nc, js, buf):
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=2)).data)
        assert info["state"]["lost"]["msgs"] == [5]  # nats-server's place for data the store lost
        d = await js.pull_subscribe_bind("D", "S")
        assert await _fetch_seqs(d, 10) == [1, 2, 3, 4, 6, 7, 8, 9, 10]
        # the filtered consumer cannot know the lost message's subject: it is simply not there
        f = await js.pull_subscribe_bind("F", "S")
        assert await _fetch_seqs(f, 10) == [1, 2, 3, 4, 6, 7, 8, 9, 10]
        await js.publish("s.x", _payload(11))
        assert await _fetch_seqs(d, 5) == [11]
        lines = _lines(buf, r"sequence 5\b")
        assert len(lines) == 1, buf.getvalue()
        assert "[ERR]" in lines[0] and "'$G > S > D'" in lines[0]
        consumers = srv.jetstream.accounts["$G"].streams["S"].consumers
        assert consumers["D"].load_errors == 1
        assert consumers["F"].load_errors == 0
        ci = await js.consumer_info("S", "D")
        assert ci.num_ack_pending == 0 and ci.num_pending == 0
        assert ci.ack_floor.stream_seq == 11


async def test_record_corrupted_while_running(tmp_path):
    async with _server(tmp_path) as (srv, nc, js, buf):
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        for i in range(1, 11):
            await js.publish("s.x", _payload(i))
        await js.add_consumer("S", durable_name="D", ack_policy="explicit", ack_wait=0.4)
        d = await js.pull_subscribe_bind("D", "S")
        first = await d.fetch(3, timeout=1)  # 1..3 delivered, not acked
        assert [m.metadata.sequence.stream for m in first] == [1, 2, 3]
        _corrupt(tmp_path, 2)  # pending: its redelivery fails
        _corrupt(tmp_path, 6)  # not delivered yet
        got = []
        for _ in range(20):
            try:
                msgs = await d.fetch(10, timeout=0.5)
            except nats.errors.TimeoutError:
                msgs = []
            for m in msgs:
                got.append(m.metadata.sequence.stream)
                await m.ack()
            if sorted(got) == [1, 3, 4, 5, 7, 8, 9, 10]:
                break
        assert sorted(got) == [1, 3, 4, 5, 7, 8, 9, 10]
        assert len(_lines(buf, r"'\$G > S > D'.*sequence 2\b")) == 1, buf.getvalue()
        assert len(_lines(buf, r"'\$G > S > D'.*sequence 6\b")) == 1, buf.getvalue()
        assert srv.jetstream.accounts["$G"].streams["S"].consumers["D"].load_errors == 2
        ci = await js.consumer_info("S", "D")
        assert ci.num_ack_pending == 0 and ci.num_redelivered == 0
        assert ci.ack_floor.stream_seq == 10


async def test_deleted_messages_are_not_errors(tmp_path):
    async with _server(tmp_path) as (srv, nc, js, buf):
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        for i in range(1, 6):
            await js.publish("s.x", _payload(i))
        await js.delete_msg("S", 2)
        await js.add_consumer("S", durable_name="D", ack_policy="explicit")
        d = await js.pull_subscribe_bind("D", "S")
        assert await _fetch_seqs(d, 10) == [1, 3, 4, 5]
        assert srv.jetstream.accounts["$G"].streams["S"].consumers["D"].load_errors == 0
        assert not _lines(buf, r"cannot load message")


async def test_push_consumer_skips_corrupt_record(tmp_path):
    async with _server(tmp_path) as (_, nc, js, _buf):
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        for i in range(1, 6):
            await js.publish("s.x", _payload(i))
        await js.add_consumer("S", durable_name="P", deliver_subject="dlv", ack_policy="none")
    _corrupt(tmp_path, 3)
    async with _server(tmp_path) as (srv, nc, js, buf):
        sub = await nc.subscribe("dlv")
        got = []
        for _ in range(4):
            m = await sub.next_msg(timeout=2)
            got.append(int(m.reply.split(".")[5]))
        assert got == [1, 2, 4, 5]
        assert len(_lines(buf, r"'\$G > S > P'.*sequence 3\b")) == 1, buf.getvalue()
