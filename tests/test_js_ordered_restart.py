"""An ordered push consumer (nats-py ``js.subscribe(ordered_consumer=True)``) keeps receiving, in order,
with no gap and no duplicate, when the server restarts under it on the same store (gracefully, and killed).

The ordered consumer is an in-memory ephemeral: it does not survive the restart. nats-py notices the missing
heartbeats (two idle_heartbeat periods), makes a new consumer starting after the last stream sequence it
got, and goes on. The server has to answer all of that as nats-server does.
RILLET_TEST_TARGET=nats-server runs the same test against the Go server.
"""
from __future__ import annotations

import asyncio
import signal

import nats
import nats.js.api
import nats.js.errors
import pytest

from tests.helpers import ServerProcess, free_port

BEFORE = 20
AFTER = 20


async def _start(args: list[str]) -> ServerProcess:
    srv = ServerProcess(*args)
    await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
    return srv


async def _publish(js, subject: str, data: bytes, deadline: float) -> None:
    """Publish with the retries a user would make while the server comes back."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            await js.publish(subject, data, timeout=1)
            return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
                nats.errors.OutboundBufferLimitError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _wait_for(cond, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("how", ["graceful", "kill"])
async def test_ordered_consumer_survives_restart(tmp_path, how):
    port = free_port()
    args = ["-js", "-sd", str(tmp_path), "-a", "127.0.0.1", "-p", str(port)]
    srv = await _start(args)
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=-1, reconnect_time_wait=0.1,
                            error_cb=on_error)
    try:
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["o.>"], storage="file")
        got: list[int] = []

        async def cb(msg) -> None:
            got.append(int(msg.data))
        sub = await js.subscribe("o.>", cb=cb, ordered_consumer=True, idle_heartbeat=0.3)
        old_name = sub._consumer
        loop = asyncio.get_running_loop()
        for i in range(BEFORE):
            await _publish(js, "o.x", str(i).encode(), loop.time() + 5)
        await _wait_for(lambda: len(got) >= BEFORE, 5, "the messages before the restart")

        if how == "graceful":
            srv.send_signal(signal.SIGTERM)
        else:
            srv.proc.kill()
        await loop.run_in_executor(None, srv.wait, 10)
        srv = await _start(args)
        # the in-memory ephemeral is gone, as from nats-server: a lookup is "consumer not found"
        await _wait_for(lambda: nc.is_connected, 10, "the reconnect")
        with pytest.raises(nats.js.errors.NotFoundError) as e:
            await js.consumer_info("S", old_name)
        assert e.value.err_code == 10014

        for i in range(BEFORE, BEFORE + AFTER):
            await _publish(js, "o.x", str(i).encode(), loop.time() + 10)
        await _wait_for(lambda: len(got) >= BEFORE + AFTER, 10, f"the messages after the restart (got {got})")
        await asyncio.sleep(0.3)  # a duplicate would show up now
        assert got == list(range(BEFORE + AFTER))
        # nats-py made a new consumer starting after the last stream sequence it had
        ci = await js.consumer_info("S", sub._consumer)
        assert sub._consumer != old_name
        assert ci.config.deliver_policy == nats.js.api.DeliverPolicy.BY_START_SEQUENCE
        assert ci.config.opt_start_seq == BEFORE + 1
        assert ci.config.mem_storage and ci.config.flow_control
    finally:
        await nc.close()
        srv.stop()


@pytest.mark.parametrize("how", ["graceful", "kill"])
async def test_ordered_consumer_restart_under_steady_publishing(tmp_path, how):
    """A publisher keeps going through the restart: what the ordered consumer delivers is exactly the
    stream, sequence 1 to the last, each once and in order (a publish whose ack was lost and is retried is
    in the stream twice, and then delivered twice: that is the stream's content)."""
    port = free_port()
    args = ["-js", "-sd", str(tmp_path), "-a", "127.0.0.1", "-p", str(port)]
    srv = await _start(args)
    nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    loop = asyncio.get_running_loop()
    try:
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["o.>"], storage="file")
        seqs: list[int] = []

        async def cb(msg) -> None:
            seqs.append(msg.metadata.sequence.stream)
        await js.subscribe("o.>", cb=cb, ordered_consumer=True, idle_heartbeat=0.3)
        published = 0

        async def publisher() -> None:
            nonlocal published
            for i in range(120):
                await _publish(js, "o.x", str(i).encode(), loop.time() + 10)
                published += 1
                await asyncio.sleep(0.005)
        task = asyncio.create_task(publisher())
        await _wait_for(lambda: published >= 40, 10, "40 publishes")
        if how == "graceful":
            srv.send_signal(signal.SIGTERM)
        else:
            srv.proc.kill()
        await loop.run_in_executor(None, srv.wait, 10)
        srv = await _start(args)
        await asyncio.wait_for(task, 30)
        last = (await js.stream_info("S")).state.last_seq
        await _wait_for(lambda: len(seqs) >= last, 10, f"delivery up to {last} (got {seqs})")
        await asyncio.sleep(0.3)
        assert seqs == list(range(1, last + 1))
    finally:
        await nc.close()
        srv.stop()
