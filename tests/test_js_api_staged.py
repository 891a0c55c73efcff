"""The JetStream API's modules are loaded a few per loop pass when the first API request comes (issue 20:
imported at once they held the loop 70-170 ms), the requests that arrive meanwhile wait in the API queue
and are answered in the order they came."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from rillet.jetstream.api import staged
from tests.helpers import GO, ServerProcess

# what a server with JetStream has imported when it is ready (no stream): the staged load starts from here
_SERVER_START = "import rillet.app.main, rillet.jetstream.manager, rillet.jetstream.api.queue, rillet.server.server"


def _child(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_imports_of_reads_top_level_imports_only(tmp_path, monkeypatch):
    pkg = tmp_path / "rillet" / "fakepkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub.py").write_text("")
    (pkg / "mod.py").write_text(
        "from __future__ import annotations\n"
        "import os, json as j  # comment\n"
        "from . import sub\n"
        "from rillet.fakepkg import (\n    sub as s,  # a comment, with a comma\n    NAME,\n)\n"
        "if TYPE_CHECKING:\n    import hashlib\n"
        "def f():\n    import secrets\n")
    monkeypatch.setattr(staged, "_ROOT", str(tmp_path))
    assert staged.imports_of("rillet.fakepkg.mod") == [
        "rillet", "rillet.fakepkg", "os", "json", "rillet.fakepkg", "rillet.fakepkg.sub", "rillet.fakepkg",
        "rillet.fakepkg.sub"]


def test_order_leaves_a_cycle_to_the_module_that_starts_it(tmp_path, monkeypatch):
    # a.py imports b at its end, b imports a at its top (as filestore and _snapshot): b is no step of its own,
    # importing it first would find a half made; c (imported by a) comes before a
    pkg = tmp_path / "rillet" / "fakecyc"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "c.py").write_text("X = 1\n")
    (pkg / "a.py").write_text("from rillet.fakecyc.c import X\nA = 1\nfrom rillet.fakecyc.b import B  # noqa\n")
    (pkg / "b.py").write_text("from rillet.fakecyc.a import A\nB = 2\n")
    monkeypatch.setattr(staged, "_ROOT", str(tmp_path))
    assert list(staged.order(["rillet.fakecyc.a"])) == ["rillet.fakecyc", "rillet.fakecyc.c", "rillet.fakecyc.a"]


def test_hints_come_before_the_library_and_missing_ones_are_left_out(monkeypatch):
    monkeypatch.setitem(staged.HINTS, "msgspec", ("json", "no_such_module_here"))
    assert staged.imports_of("msgspec") == ["json"]


def test_each_step_imports_about_one_module():
    # in a fresh process at a started server's imports: every step of the order brings in its own module
    # and at most a couple of others (a package __init__ that imported its whole package made one step of
    # ~25 ms: rillet.jetstream.store)
    out = _child(_SERVER_START + """
import importlib, sys
from rillet.jetstream.api import staged
from rillet.jetstream.api.endpoints import ROUTER_MODULES
steps = worst = 0
for name in staged.order(list(ROUTER_MODULES)):
    before = set(sys.modules)
    importlib.import_module(name)
    steps += 1
    worst = max(worst, len([m for m in set(sys.modules) - before if m.startswith("rillet") and m != name]))
assert all(m in sys.modules for m in ROUTER_MODULES)
print(steps, worst)
""")
    steps, worst = map(int, out.split())
    assert steps >= 30, steps
    assert worst <= 3, worst


def test_staged_import_spreads_over_loop_passes_and_reports_done():
    out = _child(_SERVER_START + """
import asyncio, sys
from rillet.jetstream.api import staged
from rillet.jetstream.api.endpoints import ROUTER_MODULES

async def main():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    passes = 0
    s = staged.StagedImport(loop, list(ROUTER_MODULES), lambda: done.set_result(None))
    while not done.done():
        passes += 1
        await asyncio.sleep(0)
    assert s.finished and all(m in sys.modules for m in ROUTER_MODULES)
    # a module that fails to import ends it early, done all the same (the caller's import reports it)
    sys.modules["rillet.nope_broken"] = None
    done2 = loop.create_future()
    s2 = staged.StagedImport(loop, ["rillet.nope_broken"], lambda: done2.set_result(None))
    await asyncio.wait_for(done2, 5)
    assert s2.finished and s2.imported == []
    print(passes)

asyncio.run(main())
""")
    assert int(out) >= 10, out


def _recv_until(s: socket.socket, n: int, deadline: float) -> list[tuple[bytes, bytes]]:
    """``n`` (subject, payload) of MSGs, in the order they came, from a raw connection."""
    buf = b""
    out: list[bytes] = []
    while len(out) < n:
        assert time.monotonic() < deadline, f"{len(out)} of {n} answers"
        while True:
            i = buf.find(b"\r\n")
            if i < 0 or not buf.startswith(b"MSG "):
                if i >= 0:
                    buf = buf[i + 2:]  # (PONG and the like)
                    continue
                break
            size = int(buf[:i].split(b" ")[-1])
            if len(buf) < i + 2 + size + 2:
                break
            out.append((buf[:i].split(b" ")[1], buf[i + 2:i + 2 + size]))
            buf = buf[i + 2 + size + 2:]
        if len(out) >= n:
            break
        s.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = s.recv(1 << 16)
        assert chunk, "closed"
        buf += chunk
    return out


@pytest.mark.skipif(GO, reason="Rillet's staged load of its API modules")
def test_first_requests_wait_for_the_modules_and_keep_their_order():
    # a server subprocess (its API modules not loaded): a create, then requests that depend on it, in one
    # write as the very first API requests: all answered in the order they came, each seeing the ones before
    # (message gets and deletes: the main queue; info requests would wait behind it, as in nats-server)
    d = tempfile.mkdtemp(prefix="staged-")
    proc = ServerProcess("-a", "127.0.0.1", "-p", "-1", "-js", "-sd", d)
    try:
        proc.wait_ready()
        s = socket.create_connection((proc.host or "127.0.0.1", proc.port), timeout=10)
        s.recv(4096)
        body = b'{"name":"ORD","subjects":["ord.x"],"storage":"memory"}'
        get = b'{"seq":1}'
        reqs = [b"PUB $JS.API.STREAM.CREATE.ORD r.0 %d\r\n%b\r\n" % (len(body), body)]
        reqs += [b"PUB $JS.API.STREAM.MSG.GET.ORD r.%d %d\r\n%b\r\n" % (i, len(get), get) for i in range(1, 300)]
        reqs += [b"PUB $JS.API.STREAM.DELETE.ORD r.300 0\r\n\r\n",
                 b"PUB $JS.API.STREAM.MSG.GET.ORD r.301 %d\r\n%b\r\n" % (len(get), get)]
        s.sendall(b'CONNECT {"verbose":false}\r\nSUB r.* 1\r\n' + b"".join(reqs))
        got = _recv_until(s, len(reqs), time.monotonic() + 60)
        assert [subj for subj, _ in got] == [b"r.%d" % i for i in range(len(reqs))]
        assert b"stream_create_response" in got[0][1] and b'"error"' not in got[0][1], got[0]
        for _, g in got[1:300]:
            assert b'"err_code":10037' in g, g[:200]  # no message found: the stream is there
        assert b'"success":true' in got[300][1]
        assert b'"err_code":10059' in got[301][1]  # stream not found: deleted before
        s.close()
    finally:
        proc.stop()
        import shutil
        shutil.rmtree(d, ignore_errors=True)
    assert "JetStream API unavailable" not in proc.output
