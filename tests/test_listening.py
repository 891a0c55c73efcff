"""rillet.cluster.listening: what the route, gateway and leaf managers share -- a task spawned after a delay
(a redial's wait), the back-off between dial attempts and dialling a peer."""
from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from rillet.cluster.listening import Backoff, Listening


class _Server:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.errors: list[str] = []
        self.log = self

    def error(self, text: str) -> None:
        self.errors.append(text)


class _Manager(Listening):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.server = _Server(loop)
        self.running = True
        self.conns: set = set()
        self._listener = None
        self._tasks = set()


async def test_spawn_with_a_delay_runs_the_coroutine_after_it():
    m = _Manager(asyncio.get_running_loop())
    ran: list[float] = []
    loop = asyncio.get_running_loop()

    async def work() -> None:
        ran.append(loop.time())

    start = loop.time()
    m._spawn(work(), 0.05)
    assert len(m._tasks) == 1
    deadline = loop.time() + 5
    while not ran and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert ran and ran[0] - start >= 0.04
    await asyncio.sleep(0)
    assert not m._tasks  # (done: no longer the manager's)


async def test_a_delayed_task_cancelled_before_it_ran_leaves_no_coroutine_unawaited():
    m = _Manager(asyncio.get_running_loop())
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m._spawn(work(), 10.0)
        m._spawn(work(), 10.0)
        first, second = list(m._tasks)
        first.cancel()  # before the task's first step
        await asyncio.sleep(0.01)
        second.cancel()  # during its delay
        await asyncio.sleep(0.01)
        del first, second
        gc.collect()
    assert not ran
    assert not m._tasks
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
    assert not m.server.errors  # (a cancelled task is not a failure)


async def test_a_failed_task_is_logged():
    m = _Manager(asyncio.get_running_loop())

    async def fail() -> None:
        raise RuntimeError("boom")

    m._spawn(fail(), 0.01)
    deadline = asyncio.get_running_loop().time() + 5
    while not m.server.errors and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert m.server.errors and "boom" in m.server.errors[0]


async def test_backoff_doubles_up_to_its_most_only_when_it_grows(monkeypatch):
    waits: list[float] = []

    async def sleep(d: float) -> None:
        waits.append(d)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    b = Backoff(1.0, 5.0)
    await b.sleep(False)
    await b.sleep(True)
    await b.sleep(True)
    await b.sleep(True)
    await b.sleep(True)
    await b.sleep(False)
    assert waits == [1.0, 1.0, 2.0, 4.0, 5.0, 5.0]


async def test_dial_connects_and_times_out():
    loop = asyncio.get_running_loop()
    m = _Manager(loop)
    accepted: list[int] = []

    async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(1)
        w.close()

    srv = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        proto = await m._dial(asyncio.Protocol, "127.0.0.1", port, 5.0)
        assert isinstance(proto, asyncio.Protocol)
        deadline = loop.time() + 5
        while not accepted and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert accepted
    finally:
        srv.close()
        await srv.wait_closed()
    # a listener that never completes the TLS handshake: the dial gives up after its timeout plus the
    # handshake's own
    import ssl

    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(10)

    srv = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    ctx = ssl.create_default_context()
    try:
        start = loop.time()
        with pytest.raises((asyncio.TimeoutError, ssl.SSLError, ConnectionError, OSError)):
            await m._dial(asyncio.Protocol, "127.0.0.1", port, 0.2, ctx, "localhost", 0.3)
        assert loop.time() - start < 5
    finally:
        srv.close()
