"""Rillet servers for other programs' tests: started in this process, in a thread of their own, on free ports.

A NATS user's test suite needs ``pip install rillet`` and nothing else (no Go binary): the pytest plugin
(``rillet.testing.pytest_plugin``, registered as a ``pytest11`` entry point, so installed with the package)
gives the fixtures ``rillet_server``, ``rillet_js_server``, ``rillet_cluster``, ``rillet_super_cluster``
and ``rillet_server_factory``. Without pytest, the same from ``Servers``::

    from rillet.testing import Servers

    with Servers.single(jetstream=True) as s:
        url = s.url                    # nats://127.0.0.1:<port>, for any client, sync or async

Each server runs on an event loop in a daemon thread (so a test's own event loop, sync code and other
threads can all use it), listens on 127.0.0.1 and a free port, logs into memory (``log_text()``), and is
shut down cleanly when the block ends; JetStream stores live in a fresh temporary directory removed
afterwards unless one is given.
"""
from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from typing import Any, AsyncContextManager, Callable

__all__ = ["Servers"]


class Servers:
    """One server, a cluster or a super-cluster run by ``rillet.app.embed`` in a background thread.

    ``servers``: every ``rillet.server.server.Server`` (cluster by cluster for a super-cluster); their
    objects belong to the background loop: read them, or run code on that loop with ``call``. ``url``: the
    first server's client URL; ``urls``: every server's; ``clusters``: the servers of each cluster.
    """

    def __init__(self, make: Callable[[str | None], AsyncContextManager[Any]], store_dir: str | None = None,
                 timeout: float = 30.0) -> None:
        self._make = make
        self._given_store = store_dir
        self._timeout = timeout
        self._tmp: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.clusters: list[list[Any]] = []

    # ---- the ways to build one ------------------------------------------------------------------------

    @classmethod
    def single(cls, *, jetstream: bool = False, store_dir: str | None = None, config: str | None = None,
               **fields: Any) -> "Servers":
        """One server: ``Options`` fields (``jetstream=True`` turns JetStream on), or the text of a
        nats-server configuration file (``config``; listen and http ports of -1 pick free ones)."""
        from rillet.app.embed import run_server

        def make(store: str | None) -> AsyncContextManager[Any]:
            return run_server(_options(config, jetstream, store, fields))
        return cls(make, store_dir)

    @classmethod
    def cluster(cls, n: int = 3, *, jetstream: bool = True, store_dir: str | None = None,
                **fields: Any) -> "Servers":
        """A full-mesh cluster of ``n`` servers; with JetStream (the default) it is ready once the meta group
        has a leader that every server knows."""
        from rillet.app.embed import run_cluster

        def make(store: str | None) -> AsyncContextManager[Any]:
            return run_cluster(n, jetstream=jetstream, store_dir=store, **fields)
        return cls(make, store_dir)

    @classmethod
    def super_cluster(cls, clusters: int = 2, servers: int = 1, *, jetstream: bool = False,
                      store_dir: str | None = None, **fields: Any) -> "Servers":
        """``clusters`` clusters of ``servers`` servers joined by gateways, ready once every gateway is up."""
        from rillet.app.embed import run_super_cluster

        def make(store: str | None) -> AsyncContextManager[Any]:
            return run_super_cluster(clusters, servers, jetstream=jetstream, store_dir=store, **fields)
        return cls(make, store_dir)

    # ---- what a test reads ----------------------------------------------------------------------------

    @property
    def servers(self) -> list[Any]:
        return [s for group in self.clusters for s in group]

    @property
    def server(self) -> Any:
        return self.servers[0]

    @property
    def url(self) -> str:
        return str(self.server.client_url)

    @property
    def urls(self) -> list[str]:
        return [str(s.client_url) for s in self.servers]

    @property
    def store_dir(self) -> str | None:
        return self._given_store or self._tmp

    def monitor_url(self, i: int = 0) -> str:
        """The monitoring address of server ``i`` (configured with ``http_port``)."""
        addr = self.servers[i].http_addr
        if addr is None:
            raise RuntimeError("this server has no monitoring port (give http_port=-1)")
        return f"http://127.0.0.1:{addr[1]}"

    def log_text(self, i: int = 0) -> str:
        """What server ``i`` has logged so far."""
        out = self.servers[i].log._out
        return out.getvalue() if hasattr(out, "getvalue") else ""

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the servers' loop (where their objects may be touched) and return its result; a
        coroutine it returns is awaited there."""
        if self._loop is None:
            raise RuntimeError("the servers are not running")

        async def run() -> Any:
            r = fn()
            if asyncio.iscoroutine(r):
                r = await r
            return r
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(self._timeout)

    # ---- start and stop -------------------------------------------------------------------------------

    def start(self) -> "Servers":
        if self._thread is not None:
            raise RuntimeError("already started")
        if self._given_store is None:
            self._tmp = tempfile.mkdtemp(prefix="rillet-test-")
        self._thread = threading.Thread(target=self._main, name="rillet-test-servers", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._timeout):
            raise TimeoutError(f"the Rillet servers did not start within {self._timeout}s")
        if self._error is not None:
            self._thread.join(self._timeout)
            self._cleanup()
            raise self._error
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None and not self._done.is_set():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self._timeout)
        self._thread = None
        self._cleanup()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def __enter__(self) -> "Servers":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _cleanup(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._run())
        except BaseException as e:  # (reported to the starting thread, or raised by stop())
            self._error = e
        finally:
            self._ready.set()
            self._done.set()
            loop.close()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        async with self._make(self.store_dir) as got:
            if isinstance(got, list) and got and isinstance(got[0], list):
                self.clusters = got
            elif isinstance(got, list):
                self.clusters = [got]
            else:
                self.clusters = [[got]]
            self._ready.set()
            await self._stop.wait()


def _options(config: str | None, jetstream: bool, store_dir: str | None, fields: dict[str, Any]) -> Any:
    from dataclasses import replace

    from rillet.config.options import RANDOM_PORT, JetStreamOptions, Options
    if config is not None:
        if fields:
            raise TypeError("give either a configuration text or Options fields, not both")
        from rillet.config import load_string
        opts = load_string(config, options=Options(host="127.0.0.1", port=RANDOM_PORT))
    else:
        fields.setdefault("host", "127.0.0.1")
        fields.setdefault("port", RANDOM_PORT)
        opts = Options(**fields)
    if jetstream or opts.jetstream.enabled:
        js = opts.jetstream if opts.jetstream.enabled else JetStreamOptions()
        opts.jetstream = replace(js, enabled=True, store_dir=js.store_dir or str(store_dir))
    return opts

