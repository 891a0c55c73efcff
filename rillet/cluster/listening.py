"""What the route, gateway and leaf node managers (``Cluster``, ``Gateway``, ``LeafNodes``) share: the listener
they accept on, the tasks they start (connects, handshakes, reloads) and their connections, how they dial a peer
and wait between attempts, and how they stop."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine


class Backoff:
    """The wait between a dialling loop's attempts: ``first`` seconds, doubled after each wait that ``grows``
    (connect_backoff, read at each wait: a reload may change it), up to ``most``."""

    __slots__ = ("wait", "most")

    def __init__(self, first: float, most: float) -> None:
        self.wait = first
        self.most = most

    async def sleep(self, grows: bool) -> None:
        await asyncio.sleep(self.wait)
        if grows:
            self.wait = min(self.wait * 2, self.most)


async def _after(delay: float, coro: Coroutine[Any, Any, Any]) -> Any:
    await asyncio.sleep(delay)
    return await coro


class Listening:
    """A mixin: the class sets ``server``, ``running``, ``conns``, ``_listener`` and ``_tasks``."""

    server: Any
    running: bool
    conns: Any
    _listener: asyncio.AbstractServer | None
    _tasks: set[asyncio.Task[Any]]
    _TASK_FAILED = "task failed"  # how a failed task is logged ("<this>: <exception>")
    _LISTENER = "listener"  # how the listener is named in the log

    def _spawn(self, coro: Coroutine[Any, Any, Any], delay: float = 0.0) -> None:
        """Run ``coro`` as a task of this manager, ``delay`` seconds from now (a redial's wait); cancelled at
        shutdown, a failure logged."""
        t = self.server.loop.create_task(_after(delay, coro) if delay else coro)
        if delay:  # (cancelled before it started, ``coro`` is closed unrun; done, closing it does nothing)
            t.add_done_callback(lambda _: coro.close())
        self._tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Task[Any]) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            self.server.log.error(f"{self._TASK_FAILED}: {t.exception()!r}")

    async def _dial(self, factory: Callable[[], Any], host: str, port: int, timeout: float, tls: Any = None,
                    server_hostname: str | None = None, handshake_timeout: float | None = None) -> Any:
        """Connect to ``host:port`` for the protocol ``factory`` makes (returned) within ``timeout`` seconds;
        with the client TLS context ``tls``, the handshake too (its own ``handshake_timeout`` on top, when
        given)."""
        loop = self.server.loop
        if tls is None:
            coro = loop.create_connection(factory, host, port)
        elif handshake_timeout is None:
            coro = loop.create_connection(factory, host, port, ssl=tls, server_hostname=server_hostname)
        else:
            coro = loop.create_connection(factory, host, port, ssl=tls, server_hostname=server_hostname,
                                          ssl_handshake_timeout=handshake_timeout)
            timeout += handshake_timeout
        _, proto = await asyncio.wait_for(coro, timeout)
        return proto

    def _close_for_shutdown(self, conn: Any) -> None:
        conn.close("Server Shutdown", no_reconnect=True)

    async def shutdown(self) -> None:
        self.running = False
        if self._listener is not None:
            self._listener.close()
        for t in list(self._tasks):
            t.cancel()
        for c in list(self.conns):
            self._close_for_shutdown(c)
        if self._listener is not None:
            try:
                await asyncio.wait_for(self._listener.wait_closed(), 2)
            except (asyncio.TimeoutError, OSError) as e:
                self.server.log.debug(f"{self._LISTENER} close: {e!r}")
