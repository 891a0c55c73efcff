"""Run a Rillet server inside a Python program, e.g. as a test fixture::

    async with run_server(port=-1) as srv:
        nc = await nats.connect(srv.client_url)

``run_server`` takes an ``Options`` or keyword arguments for one; the server listens on 127.0.0.1 and a
free port by default, logs nothing unless ``log`` is given, and stops cleanly when the block ends.
"""
from __future__ import annotations

import contextlib
import io
from typing import Any, AsyncIterator

from rillet.server.logging import Logger
from rillet.config.options import RANDOM_PORT, Options
from rillet.server.server import Server


@contextlib.asynccontextmanager
async def run_server(opts: Options | None = None, *, log: Logger | None = None,
                     **fields: Any) -> AsyncIterator[Server]:
    if opts is None:
        fields.setdefault("host", "127.0.0.1")
        fields.setdefault("port", RANDOM_PORT)
        opts = Options(**fields)
    elif fields:
        raise TypeError("pass either an Options object or keyword fields, not both")
    if log is None:
        log = Logger(debug=opts.debug, trace=opts.trace, out=io.StringIO())
    srv = Server(opts, log)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.shutdown()


async def start_server(opts: Options | None = None, **fields: Any) -> Server:
    """Start a server and return it; call ``await srv.shutdown()`` to stop it."""
    if opts is None:
        fields.setdefault("host", "127.0.0.1")
        fields.setdefault("port", RANDOM_PORT)
        opts = Options(**fields)
    srv = Server(opts, Logger(out=io.StringIO()))
    await srv.start()
    return srv
