"""The ``$JS.API`` endpoint families: each registers with the router, and a failure to import or register
one is never silent.

The router (with the stream, consumer and store modules) is made by an account's first API request, not at
start (an idle server loads none of it: issue 20). A handler module that fails to import (or to register)
fails that request loudly: the error is logged and the request answered with it (10000), never
"no responders" nor a timeout; the next request tries again.
"""
from __future__ import annotations

import io
import json
import sys

import nats
import pytest

from rillet.jetstream.api import router as api, consumers as api_consumer
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options
from rillet.server.logging import Logger


def _opts(tmp_path) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))


def test_handler_modules_cover_consumer_and_snapshot_endpoints():
    assert "rillet.jetstream.api.consumers" in api.HANDLER_MODULES
    assert "rillet.jetstream.api.snapshot" in api.HANDLER_MODULES


async def _first_request_fails(tmp_path, what: str) -> None:
    buf = io.StringIO()
    async with run_server(_opts(tmp_path), log=Logger(out=buf)) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            for _ in range(2):  # (each request tries again)
                r = await nc.request("$JS.API.INFO", b"", timeout=5)
                err = json.loads(r.data)["error"]
                assert err["err_code"] == 10000 and what in err["description"], err
        finally:
            await nc.close()
    assert "JetStream API unavailable" in buf.getvalue()


async def test_broken_handler_import_fails_first_request(tmp_path, monkeypatch):
    # None in sys.modules makes the import raise ModuleNotFoundError, as a broken module would
    monkeypatch.setitem(sys.modules, "rillet.jetstream.api.consumers", None)
    await _first_request_fails(tmp_path, "api.consumers")


async def test_failing_registration_fails_first_request(tmp_path, monkeypatch):
    def broken(router):
        raise RuntimeError("consumer endpoints broke")
    monkeypatch.setattr(api_consumer, "register", broken)
    await _first_request_fails(tmp_path, "consumer endpoints broke")


async def test_handlers_match_the_subscribed_endpoints(tmp_path, monkeypatch):
    # an endpoint the router serves but the account did not subscribe (or the reverse) is refused
    real = api_consumer.register

    def extra(router):
        real(router)
        router.handlers["CONSUMER.EXTRA"] = router.handlers["CONSUMER.INFO"]
    monkeypatch.setattr(api_consumer, "register", extra)
    await _first_request_fails(tmp_path, "differ from the endpoints subscribed")


async def test_consumer_endpoints_answer(tmp_path):
    # the working case: a consumer request gets an answer (an error JSON), not "no responders"
    async with run_server(_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            r = await nc.request("$JS.API.CONSUMER.INFO.NOPE.C", b"", timeout=2)
            assert b'"err_code":10059' in r.data
        finally:
            await nc.close()
