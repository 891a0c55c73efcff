"""The ``$JS.API`` endpoint families register at start, or the server does not start.

A handler module that fails to import (or to register) must stop startup with its error: before, such a
failure was swallowed and clients saw "no responders" for every consumer request.
"""
from __future__ import annotations

import socket
import subprocess
import sys

import nats
import pytest

from rillet.jetstream.api import router as api, consumers as api_consumer
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options


def _opts(tmp_path) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))


def test_handler_modules_cover_consumer_and_snapshot_endpoints():
    assert "rillet.jetstream.api.consumers" in api.HANDLER_MODULES
    assert "rillet.jetstream.api.snapshot" in api.HANDLER_MODULES


async def test_broken_handler_import_fails_startup(tmp_path, monkeypatch):
    # None in sys.modules makes the import raise ModuleNotFoundError, as a broken module would
    monkeypatch.setitem(sys.modules, "rillet.jetstream.api.consumers", None)
    with pytest.raises(ImportError, match=r"api\.consumers"):
        async with run_server(_opts(tmp_path)):
            pass


async def test_failing_registration_fails_startup(tmp_path, monkeypatch):
    def broken(router):
        raise RuntimeError("consumer endpoints broke")
    monkeypatch.setattr(api_consumer, "register", broken)
    with pytest.raises(RuntimeError, match="consumer endpoints broke"):
        async with run_server(_opts(tmp_path)):
            pass


async def test_consumer_endpoints_answer(tmp_path):
    # the working case: a consumer request gets an answer (an error JSON), not "no responders"
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            r = await nc.request("$JS.API.CONSUMER.INFO.NOPE.C", b"", timeout=2)
            assert b'"err_code":10059' in r.data
        finally:
            await nc.close()


def test_server_process_refuses_to_start(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("import sys; sys.modules['rillet.jetstream.api.consumers'] = None\n"
            "from rillet.app.main import main\n"
            f"sys.exit(main(['-js', '-sd', {str(tmp_path)!r}, '-a', '127.0.0.1', '-p', '{port}']))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "api.consumers" in p.stderr
    assert "Server is ready" not in p.stdout + p.stderr
