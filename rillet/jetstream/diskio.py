"""``jetstream { max_concurrent_io }``: how many blocking disk calls may be in flight at once.

nats-server hands at most that many (4 to 8192, default 4096) to the Go runtime at once (its disk I/O semaphore).
Rillet's stores write and read on the event loop's thread (one call at a time) and hand their slower calls (syncs,
consumer state writes, snapshot restores) to the loop's default thread pool, which Python sizes to
min(32, CPUs + 4): at most that many and one more are ever in flight, below nats-server's default. With the setting,
JetStream's start gives the loop a default pool of ``max_concurrent_io - 1`` threads (capped at Python's size), so
the loop's thread and the pool together never exceed it. (The pool also serves the loop's name lookups.)
"""
from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

MIN_IOS, MAX_IOS, DEFAULT_IOS = 4, 8192, 4096  # nats-server's bounds and default


def python_pool_size() -> int:
    return min(32, (os.cpu_count() or 1) + 4)


def io_workers(n: int) -> int:
    """The default pool's threads for ``max_concurrent_io: n`` (the loop's own thread is one more)."""
    return max(1, min(n - 1, python_pool_size()))


def limit(loop: asyncio.AbstractEventLoop, n: int) -> int:
    """Give ``loop`` a default pool sized for ``max_concurrent_io: n``; its thread count."""
    workers = io_workers(n)
    loop.set_default_executor(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rillet-io"))
    return workers
