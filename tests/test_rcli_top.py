"""``rillet top`` (nats-top): snapshots, and the live view driven in a real terminal (tmux), against Rillet
and against the Go nats-server."""
from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from typing import Any, AsyncIterator

import nats
import pytest

from helpers import ServerProcess, free_port
from rillet.app.embed import run_server
from rillet.cli import top
from rillet.config.options import Options

CLI = [sys.executable, "-m", "rillet.cli", "top"]


@contextlib.asynccontextmanager
async def monitored(kind: str) -> AsyncIterator[tuple[str, int]]:
    """(client URL, monitoring port) of a Rillet (in process) or Go nats-server."""
    if kind == "rillet":
        async with run_server(Options(host="127.0.0.1", port=-1, http_port=-1, http_host="127.0.0.1")) as srv:
            yield srv.client_url, srv.http_addr[1]
        return
    mp = free_port()
    p = ServerProcess("-p", "-1", "-a", "127.0.0.1", "-m", str(mp), command=["nats-server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, p.wait_ready)
        yield f"nats://127.0.0.1:{p.port}", mp
    finally:
        p.proc.terminate()
        p.proc.wait(10)


@contextlib.asynccontextmanager
async def traffic(url: str) -> AsyncIterator[None]:
    """'alpha' publishes 3000 messages (then idles); 'beta' subscribes to beta.one and beta.two.>."""
    alpha = await nats.connect(url, name="alpha")
    beta = await nats.connect(url, name="beta")
    try:
        await beta.subscribe("beta.one")
        await beta.subscribe("beta.two.>")
        await beta.flush()
        for _ in range(3000):
            await alpha.publish("nobody.listens", b"0123456789")
        await alpha.flush()
        yield
    finally:
        await alpha.close()
        await beta.close()


async def run_cli(*args: str) -> subprocess.CompletedProcess:
    def go() -> subprocess.CompletedProcess:
        return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return await asyncio.get_running_loop().run_in_executor(None, go)


def conn_rows(screen: str) -> list[str]:
    """The connection lines (under the HOST header) of a screen or snapshot."""
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("HOST"):
            return [ln for ln in lines[i + 1:] if re.match(r"^\s+\S+:\d+\s", ln)]
    return []


def test_sizes_and_times():
    assert top.psize(False, 1023) == "1023" and top.psize(False, 1536) == "1.5K"
    assert top.psize(False, 3 * 1024 ** 2) == "3.0M" and top.psize(True, 3 * 1024 ** 2) == "3145728"
    assert top.nsize(False, 999) == "999" and top.nsize(False, 6000) == "6.0K"
    assert top.nsize(False, 2_500_000) == "2.5M" and top.nsize(False, 7e9) == "7.0B"
    assert top.go_time_text("2024-01-02T03:04:05.120Z") == "2024-01-02 03:04:05.12 +0000 UTC"
    assert top.go_time_text("2024-01-02T03:04:05Z") == "2024-01-02 03:04:05 +0000 UTC"


@pytest.mark.parametrize("kind", ["rillet", "nats-server"])
async def test_snapshot_plain_and_delimited(kind):
    async with monitored(kind) as (url, mport):
        async with traffic(url):
            r = await run_cli("-m", str(mport), "-o", "-", "-sort", "msgs_from")
            assert r.returncode == 0, r.stderr
            out = r.stdout
            assert out.startswith("NATS server version ") and "  ID:   N" in out
            assert "Connections Polled: 2" in out
            rows = conn_rows(out)
            assert len(rows) == 2 and "alpha" in rows[0] and "beta" in rows[1]  # most messages from first
            assert re.search(r"alpha\s+0\s+0\s+0\s+3\.0K\s+0\s+29\.3K", rows[0]), rows[0]
            r = await run_cli("-m", str(mport), "-o", "-", "-l", ";", "-u", "-n", "1", "-sort", "subs")
            assert r.returncode == 0, r.stderr
            lines = r.stdout.splitlines()
            assert "HOST;CID;NAME;SUBS;PENDING;MSGS_TO;MSGS_FROM;BYTES_TO;BYTES_FROM;LANG;VERSION;UPTIME;" \
                   "LAST_ACTIVITY;SUBSCRIPTIONS" in lines
            row = lines[-1].split(";")
            assert row[2] == "beta" and row[3] == "2" and sorted(row[-1].split("  ")) == ["beta.one", "beta.two.>"]
            assert "Connections Polled:;1" in lines


async def test_bad_input_one_line_and_status_1(tmp_path):
    async with monitored("rillet") as (url, mport):
        for args, text in ((["-m", str(mport), "-sort", "bogus", "-o", "-"], "invalid option to sort by: bogus"),
                           (["-m", str(free_port()), "-o", "-"], "/varz smoke test failed"),
                           (["-m", str(mport), "-d", "0", "-o", "-"], "invalid refresh interval"),
                           (["-m", str(mport)], "needs a terminal")):
            r = await run_cli(*args)
            assert r.returncode == 1 and r.stdout == "", (args, r)
            assert len(r.stderr.strip().splitlines()) == 1 and text in r.stderr, (args, r.stderr)
        r = await run_cli("-nosuch")
        assert r.returncode == 2 and "flag provided but not defined: -nosuch" in r.stderr


# ---- the live view in a real terminal -----------------------------------------------------------------

class Tmux:
    def __init__(self, argv: list[str]) -> None:
        self.name = "rtop-" + uuid.uuid4().hex[:8]
        # (the tests' environment fixes COLUMNS/LINES for the CLI's help text: curses would believe them)
        cmd = "env -u COLUMNS -u LINES " + " ".join(_sh(a) for a in argv)
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "200", "-y", "40", cmd + "; sleep 30"],
                       check=True, timeout=10)

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name] + (["-l"] if literal else []) + list(keys),
                       check=True, timeout=10)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True,
                              timeout=10).stdout

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, timeout=10)


def _sh(a: str) -> str:
    return "'" + a.replace("'", "'\\''") + "'"


async def until(term: Tmux, cond: Any, what: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        s = await asyncio.get_running_loop().run_in_executor(None, term.screen)
        if cond(s):
            return s
        if time.monotonic() > deadline:
            size = subprocess.run(["tmux", "display", "-p", "-t", term.name, "#{window_width}x#{window_height}"],
                                  capture_output=True, text=True, timeout=10).stdout.strip()
            raise AssertionError(f"screen ({size}) never showed {what}:\n{s}")
        await asyncio.sleep(0.2)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("kind", ["rillet", "nats-server"])
async def test_live_view_keys_in_tmux(kind):
    async with monitored(kind) as (url, mport):
        async with traffic(url):
            term = Tmux(CLI + ["-m", str(mport), "-d", "1"])
            try:
                s = await until(term, lambda s: len(conn_rows(s)) == 2, "two connections")
                assert "Connections Polled: 2" in s and "SUBSCRIPTIONS" not in s
                rows = conn_rows(s)
                assert "alpha" in rows[0] and "beta" in rows[1]  # by cid
                # o: sort by messages received from the connection... "beta" has none, so it comes last;
                # then by subscriptions: "beta" first
                term.keys("o")
                await until(term, lambda s: "sort by [cid]:" in s, "the sort prompt")
                term.keys("subs", literal=True)
                term.keys("Enter")
                await until(term, lambda s: len(conn_rows(s)) == 2 and "beta" in conn_rows(s)[0], "beta first by subs")
                # s: the subscriptions column, with the subjects
                term.keys("s")
                s = await until(term, lambda s: "SUBSCRIPTIONS" in s and "beta.two.>" in s, "subscriptions shown")
                assert "beta.one" in conn_rows(s)[0]
                # n: one connection only
                term.keys("n")
                await until(term, lambda s: "limit   [1024]:" in s, "the limit prompt")
                term.keys("1", literal=True)
                term.keys("Enter")
                s = await until(term, lambda s: len(conn_rows(s)) == 1, "one connection polled")
                assert "Connections Polled: 1" in s and "beta" in conn_rows(s)[0]
                # an invalid sort key is refused and the old one kept
                term.keys("o")
                term.keys("bogus", literal=True)
                term.keys("Enter")
                await until(term, lambda s: "invalid order: bogus" in s, "the refusal")
                term.keys("n")
                term.keys("5", literal=True)
                term.keys("Enter")
                term.keys("o")
                term.keys("msgs_from", literal=True)
                term.keys("Enter")
                s = await until(term, lambda s: len(conn_rows(s)) == 2 and "alpha" in conn_rows(s)[0], "alpha first")
                assert re.search(r"alpha\s+0\s+0\s+0\s+3\.0K", conn_rows(s)[0]), conn_rows(s)[0]
                # space: rates per second; alpha is idle now, so its 3.0K becomes 0
                term.keys("Space")
                s = await until(term, lambda s: conn_rows(s) and re.search(r"alpha\s+0\s+0\s+0\s+0\s", conn_rows(s)[0]),
                                "alpha's rate")
                # ? help, any key back, q quits (the shell's sleep keeps the pane: the view is gone)
                term.keys("?")
                await until(term, lambda s: "Toggle displaying connection subscriptions" in s, "the help")
                term.keys("x")
                await until(term, lambda s: "Connections Polled" in s, "the view again")
                term.keys("q")
                await until(term, lambda s: "Connections Polled" not in s, "the view closed")
            finally:
                term.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
async def test_refresh_limit_ends_the_view(tmp_path):
    marker = tmp_path / "rc"
    async with monitored("rillet") as (url, mport):
        term = Tmux(["sh", "-c", " ".join(_sh(a) for a in CLI + ["-m", str(mport), "-d", "1", "-r", "2"])
                     + f"; echo $? > {_sh(str(marker))}"])
        try:
            deadline = time.monotonic() + 20
            while not marker.exists() or not marker.read_text().strip():
                assert time.monotonic() < deadline, term.screen()
                await asyncio.sleep(0.2)
            assert marker.read_text().strip() == "0"
        finally:
            term.close()


async def test_snapshot_over_https(tmp_path, rillet_server_factory):
    from rillet.config.options import TLSConfig
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                        "-out", str(cert)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("openssl not available")
    srv = rillet_server_factory(http_host="127.0.0.1", https_port=-1, allow_non_tls=True,
                                tls=TLSConfig(cert_file=str(cert), key_file=str(key))).server
    port = str(srv.https_addr[1])
    res = await run_cli("-ms", port, "-k", "-o", "-")
    assert res.returncode == 0 and "Connections Polled: 0" in res.stdout, res.stderr
    res = await run_cli("-ms", port, "-cacert", str(cert), "-o", "-")  # verified against its CA
    assert res.returncode == 0 and "Connections Polled: 0" in res.stdout, res.stderr
    res = await run_cli("-ms", port, "-o", "-")  # not trusted: refused, one line
    assert res.returncode == 1 and "certificate verify failed" in res.stderr.lower(), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


async def test_live_view_in_a_pty():
    """Without tmux too: the curses view in a pseudo-terminal draws the server and its connections, takes a
    key (s: subscriptions) and ends after -r refreshes."""
    import fcntl
    import pty
    import struct
    import termios

    async with monitored("rillet") as (url, mport):
        async with traffic(url):
            def run_in_pty() -> tuple[int, str]:
                pid, fd = pty.fork()
                if pid == 0:  # the child: the CLI on the terminal
                    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
                    env["TERM"] = "xterm"
                    os.execvpe(sys.executable, CLI + ["-m", str(mport), "-d", "1", "-r", "3"], env)
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
                out = b""
                sent = False
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    out += chunk
                    if not sent and b"Connections Polled" in out:
                        os.write(fd, b"s")
                        sent = True
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")

            rc, raw = await asyncio.get_running_loop().run_in_executor(None, run_in_pty)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>]|\r", " ", raw)
    assert rc == 0, raw[-2000:]
    assert "Connections Polled: 2" in text and "alpha" in text and "beta" in text, text[-3000:]
    assert "SUBSCRIPTIONS" in text, text[-3000:]  # the s key was taken
