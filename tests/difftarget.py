"""Differential test helpers: the same configuration text run by Rillet (in-process) and by nats-server.

``both(conf)`` yields ``{"rillet": srv, "go": proc}``; each has ``client_url``. Used by the message
tracing, user info and allow_non_tls tests, which send the same requests to both and compare answers.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tempfile
from typing import Any, AsyncIterator

from tests.helpers import ServerProcess, free_port


def _write(text: str) -> str:
    fd, path = tempfile.mkstemp(suffix=".conf", prefix="rillet-diff-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


@contextlib.asynccontextmanager
async def go_server(conf: str) -> AsyncIterator[Any]:
    """nats-server with this configuration text (give it ``listen: 127.0.0.1:-1`` or a port)."""
    path = _write(conf)
    proc = ServerProcess("-c", path, command=["nats-server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
        yield proc
    finally:
        proc.stop()
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.asynccontextmanager
async def rillet_server(conf: str) -> AsyncIterator[Any]:
    from rillet.config.flags import parse_command_line
    from rillet.app.embed import run_server
    from rillet.server.logging import Logger
    path = _write(conf)
    try:
        opts = parse_command_line(["-c", path]).options
        buf = io.StringIO()
        async with run_server(opts, log=Logger(debug=opts.debug, trace=opts.trace, out=buf)) as srv:
            srv._test_log = buf
            yield srv
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.asynccontextmanager
async def both(conf: str) -> AsyncIterator[dict[str, Any]]:
    """Rillet and nats-server, each with ``conf`` (``{port}`` in it is replaced by a free port per server)."""
    async with rillet_server(conf.replace("{port}", str(free_port()))) as r:
        async with go_server(conf.replace("{port}", str(free_port()))) as g:
            yield {"rillet": r, "go": g}
