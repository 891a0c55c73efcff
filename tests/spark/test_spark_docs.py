"""The blocks of docs/spark.md that need Java and a SparkSession: tests/test_docs.py marks them ``spark`` and
leaves them to this module, which runs them in the Spark tests' session: a python block with ``spark`` bound to
the session, an ``in-session`` shell block (``python SCRIPT`` / ``python -m MODULE``) as a script in this
process, in its ``quick(...)`` form (the example with fewer orders, the benchmark with fewer messages)."""
from __future__ import annotations

import asyncio
import sys

import nats
import pytest

from spark_support import ROOT, JSServer

sys.path.insert(0, str(ROOT / "tests"))

import test_docs as D  # noqa: E402

PAGE = "docs/spark.md"
BLOCKS = [b for b in D.RUN if "spark" in b.words]


def test_the_spark_blocks_are_here():
    assert BLOCKS and all(b.page == PAGE for b in BLOCKS), [b.id for b in BLOCKS]
    assert all(b.lang == "python" or "in-session" in b.words for b in BLOCKS), "a Spark block this module cannot run"


async def _orders(url: str, n: int) -> int:
    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(n):
            await js.publish(f"orders.{i % 3}", f"order {i}".encode())
        return (await js.stream_info("ORDERS")).state.messages
    finally:
        await nc.close()


async def _count(url: str) -> int:
    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info("ORDERS")).state.messages
    finally:
        await nc.close()


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "python"], ids=lambda b: b.id)
def test_python_block(block, spark):
    server = JSServer("rillet")  # its own: the block names the stream ORDERS
    try:
        assert asyncio.run(_orders(server.url, 30)) == 30
        code = D.shorten(block).replace("nats://127.0.0.1:4222", server.url)
        exec(compile(code, block.id, "exec"), {"spark": spark, "__name__": "__docs__"})
        # the block reads ORDERS and appends what it read: the stream holds every order twice now
        assert asyncio.run(_count(server.url)) == 60
    finally:
        server.stop()


@pytest.mark.parametrize("block", [b for b in BLOCKS if "in-session" in b.words], ids=lambda b: b.id)
def test_script_in_session(block, spark, monkeypatch, capsys):
    """``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` run in this process (runpy, ``__main__``), where its
    ``SparkSession.builder...getOrCreate()`` gets the tests' session instead of starting a JVM (a minute on
    two busy cores); the session's ``stop()`` is kept from ending it for the other tests."""
    import runpy

    from pyspark.sql import SparkSession
    (line,) = [ln.split("#", 1)[0].strip() for ln in D.shorten(block).splitlines() if ln.strip()]
    words = line.split()
    assert words[0] == "python", line
    monkeypatch.setattr(SparkSession, "stop", lambda self: None)
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    code = 0
    try:
        if words[1] == "-m":  # python -m MODULE ARGS
            monkeypatch.setattr(sys, "argv", [words[2]] + words[3:])
            runpy.run_module(words[2], run_name="__main__", alter_sys=True)
        else:  # python SCRIPT.py ARGS
            assert words[1].endswith(".py"), line
            monkeypatch.setattr(sys, "argv", words[1:])
            runpy.run_path(str(ROOT / words[1]), run_name="__main__")
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr().out
    print(out[-3000:])
    assert code == 0, out[-3000:]
