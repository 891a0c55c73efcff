"""Shared pieces of the ``rillet`` command line tests (test_rcli_*.py): a server and a CLI runner.

The server is a subprocess (``python -m rillet.server``, or ``nats-server`` with
RILLET_TEST_TARGET=nats-server) started once per test module from a configuration with JetStream, an
application account (users ``a`` and ``limited``) and a system account (user ``sys``). ``a`` is the
no-auth user, so plain connections land in the application account. The CLI runs as a real subprocess
(``python -m rillet.cli``) with its own config directory and ``NATS_URL`` pointing at that server.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.helpers import ServerProcess, free_port

CONF = """
listen: "127.0.0.1:{port}"
server_name: rcli
jetstream {{ store_dir: "{store}" }}
accounts {{
  APP {{
    jetstream: enabled
    users: [
      {{user: a, password: a}}
      {{user: limited, password: l, permissions: {{
          publish: {{deny: ["secret.>", "$JS.API.STREAM.DELETE.>"]}}
          subscribe: {{deny: ["secret.>"]}}
      }}}}
    ]
  }}
  SYS {{ users: [ {{user: sys, password: sys}} ] }}
}}
system_account: SYS
no_auth_user: a
"""


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def __repr__(self) -> str:
        return f"Result(rc={self.rc}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


class Cli:
    """Runs ``rillet`` against one server with an isolated config directory.

    Commands run as subprocesses (``python -m rillet.cli``). With ``inprocess=True`` the ones that need no
    stdin, working directory or time limit run through ``rillet.cli.main.main`` in this process instead
    (same code, same output and exit status, without the interpreter start): the long JetStream, KV and
    object store walk-throughs use that to stay quick, the rest and all long-running commands stay real
    subprocesses.
    """

    def __init__(self, url: str, config_dir: str, inprocess: bool = False) -> None:
        self.url = url
        self.config_dir = config_dir
        self.inprocess = inprocess
        env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
        env.update(RILLET_CONFIG_DIR=config_dir, NATS_URL=url, COLUMNS="200", PYTHONUNBUFFERED="1")
        self.env = env

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rillet.cli", *args]

    def _run_inprocess(self, args: tuple[str, ...], env: dict[str, str] | None) -> Result:
        import io

        import nats  # noqa: F401  (imported normally here first: the CLI's start-up shortcut must not apply)

        from rillet.cli.main import main
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        saved_env = dict(os.environ)
        saved = sys.stdout, sys.stderr
        os.environ.clear()
        os.environ.update({**self.env, **(env or {})})
        sys.stdout, sys.stderr = out, err
        try:
            rc = main(list(args))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        finally:
            sys.stdout, sys.stderr = saved
            os.environ.clear()
            os.environ.update(saved_env)
        return Result(rc, out.buffer.getvalue().decode(errors="replace"),
                      err.buffer.getvalue().decode(errors="replace"))

    def __call__(self, *args: str, input: str | bytes | None = None, timeout: float = 30,
                 env: dict[str, str] | None = None, cwd: str | None = None) -> Result:
        if self.inprocess and input is None and cwd is None:
            return self._run_inprocess(args, env)
        data = input.encode() if isinstance(input, str) else input
        p = subprocess.run(self.cmd(*args), input=data if data is not None else b"", capture_output=True,
                           timeout=timeout, env={**self.env, **(env or {})}, cwd=cwd)
        return Result(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))

    def ok(self, *args: str, **kw: Any) -> str:
        r = self(*args, **kw)
        assert r.rc == 0, r
        assert "Traceback" not in r.err, r
        return r.out

    def fails(self, *args: str, **kw: Any) -> str:
        """Run a command that must fail with a one-line error and no traceback; the error line."""
        r = self(*args, **kw)
        assert r.rc != 0, r
        assert "Traceback" not in r.err and "Traceback" not in r.out, r
        lines = [line for line in r.err.splitlines() if line.strip()]
        assert len(lines) == 1, r
        assert lines[0].startswith("rillet: error: "), r
        return lines[0][len("rillet: error: "):]

    def start(self, *args: str, env: dict[str, str] | None = None) -> "Background":
        return Background(subprocess.Popen(self.cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           stdin=subprocess.DEVNULL, env={**self.env, **(env or {})}))


class Background:
    """A long-running CLI command (sub, reply, watch...)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []

    def wait_for(self, text: str, timeout: float = 10) -> None:
        """Read stdout lines until one contains ``text``."""
        os.set_blocking(self.proc.stdout.fileno(), False)
        deadline = time.monotonic() + timeout
        buf = b""
        while time.monotonic() < deadline:
            chunk = self.proc.stdout.read()
            if chunk:
                buf += chunk
                *done, rest = buf.split(b"\n")
                self.lines.extend(x.decode() for x in done)
                buf = rest
                if any(text in line for line in self.lines):
                    self._rest = buf
                    return
            elif self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"no {text!r} in output within {timeout}s: {self.lines!r} "
                             f"stderr={self.proc.stderr.read() if self.proc.poll() is not None else ''!r}")

    def finish(self, timeout: float = 15) -> Result:
        os.set_blocking(self.proc.stdout.fileno(), True)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"command did not finish: {self.lines!r} {out!r} {err!r}")
        text = "\n".join(self.lines) + ("\n" if self.lines else "") + getattr(self, "_rest", b"").decode() \
            + out.decode(errors="replace")
        return Result(self.proc.returncode, text, err.decode(errors="replace"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture(scope="module")
def server(tmp_path_factory: Any) -> Any:
    d = tmp_path_factory.mktemp("rcli-server")
    conf = d / "server.conf"
    conf.write_text(CONF.format(port=free_port(), store=str(d / "js")))
    proc = ServerProcess("-c", str(conf))
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def cli(server: Any, tmp_path: Any) -> Cli:
    return Cli(server.client_url, str(tmp_path / "config"))


@pytest.fixture
def fastcli(server: Any, tmp_path: Any) -> Cli:
    return Cli(server.client_url, str(tmp_path / "config"), inprocess=True)


def url_with(server: Any, user: str, password: str) -> str:
    return server.client_url.replace("nats://", f"nats://{user}:{password}@")
