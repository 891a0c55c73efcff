"""What the route, gateway and leaf node managers (``Cluster``, ``Gateway``, ``LeafNodes``) share: the listener
they accept on, the tasks they start (connects, handshakes, reloads) and their connections, and how they stop."""
from __future__ import annotations

import asyncio
from typing import Any, Coroutine


class Listening:
    """A mixin: the class sets ``server``, ``running``, ``conns``, ``_listener`` and ``_tasks``."""

    server: Any
    running: bool
    conns: Any
    _listener: asyncio.AbstractServer | None
    _tasks: set[asyncio.Task[Any]]
    _TASK_FAILED = "task failed"  # how a failed task is logged ("<this>: <exception>")
    _LISTENER = "listener"  # how the listener is named in the log

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task of this manager (cancelled at shutdown; a failure is logged)."""
        t = self.server.loop.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Task[Any]) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            self.server.log.error(f"{self._TASK_FAILED}: {t.exception()!r}")

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
