"""Shared helpers for the protocol, auth, CLI and limits tests.

* ``serve(**option_fields)``: an async context manager that runs a server for one test and yields an
  object with ``client_url``, ``host`` and ``port``. By default it is an in-process Rillet server
  (``rillet.app.embed.run_server``). With ``RILLET_TEST_TARGET=nats-server`` in the environment the
  same ``Options`` fields are written to a config file and the Go ``nats-server`` binary is started
  instead: that is how these tests are checked against the reference server.
* ``RawClient``: a NATS client over a plain asyncio socket, for tests where the exact bytes matter.
* ``ServerProcess``: ``python -m rillet.server ...`` (or ``nats-server ...``) as a subprocess, with its
  log lines collected, for command line, signal and log tests.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, AsyncIterator, Iterable

TARGET = os.environ.get("RILLET_TEST_TARGET", "rillet")
GO = TARGET in ("nats-server", "go")

DEFAULT_CONNECT: dict[str, Any] = {"verbose": False, "pedantic": False, "protocol": 1}


def free_port(host: str = "127.0.0.1") -> int:
    from rillet.server.server import free_port as _free
    return _free(host)


# ---------------------------------------------------------------------------------------------------
# Servers


def server_command() -> list[str]:
    """The command line that starts the server under test (before its own flags)."""
    if GO:
        return ["nats-server"]
    return [sys.executable, "-m", "rillet.server"]


def _duration(seconds: float) -> str:
    ms = seconds * 1000
    if ms == int(ms):
        return f"{int(ms)}ms"
    return f"{seconds}s"


def _perm_conf(p: Any) -> dict:
    out: dict[str, Any] = {}
    if p.allow is not None:
        out["allow"] = list(p.allow)
    if p.deny is not None:
        out["deny"] = list(p.deny)
    return out


def _user_conf(u: Any) -> dict:
    d: dict[str, Any] = {}
    if u.nkey:
        d["nkey"] = u.nkey
    else:
        d["user"] = u.username
        d["password"] = u.password
    if u.permissions is not None:
        perms: dict[str, Any] = {}
        if u.permissions.publish is not None:
            perms["publish"] = _perm_conf(u.permissions.publish)
        if u.permissions.subscribe is not None:
            perms["subscribe"] = _perm_conf(u.permissions.subscribe)
        r = u.permissions.response
        if r is not None:
            ar: dict[str, Any] = {"max": r.max_msgs}
            if r.expires:
                ar["expires"] = _duration(r.expires)
            perms["allow_responses"] = ar
        d["permissions"] = perms
    if u.account:
        d["account"] = u.account
    return d


def options_to_config(fields: dict[str, Any]) -> dict[str, Any]:
    """nats-server configuration (as JSON, which its config parser accepts) for ``Options(**fields)``."""
    conf: dict[str, Any] = {}
    auth: dict[str, Any] = {}
    host = fields.get("host", "127.0.0.1")
    port = fields.get("port", -1)
    if port in (-1, 0):
        port = free_port(host)
    conf["listen"] = f"{host}:{port}"
    for key, value in fields.items():
        if key in ("host", "port"):
            continue
        if key in ("server_name", "max_payload", "max_control_line", "max_connections", "max_subscriptions",
                   "max_pending", "ping_max", "no_auth_user", "debug", "trace", "no_header_support"):
            conf[key] = value
        elif key in ("ping_interval", "write_deadline", "lame_duck_duration", "lame_duck_grace_period"):
            conf[key] = _duration(value)
        elif key == "authorization":
            auth["token"] = value
        elif key == "username":
            auth["user"] = value
        elif key == "password":
            auth["password"] = value
        elif key == "auth_timeout":
            auth["timeout"] = value
        elif key in ("users", "nkeys"):
            auth.setdefault("users", []).extend(_user_conf(u) for u in value)
        else:
            raise ValueError(f"options_to_config: no nats-server mapping for {key!r}")
    if auth:
        conf["authorization"] = auth
    return conf


class GoServer:
    """A nats-server subprocess started from Options fields (see ``options_to_config``)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        conf = options_to_config(fields)
        self.host, port = conf["listen"].rsplit(":", 1)
        self.port = int(port)
        fd, self.conf_path = tempfile.mkstemp(suffix=".conf", prefix="rillet-test-")
        with os.fdopen(fd, "w") as f:
            json.dump(conf, f)
        self.proc = ServerProcess("-c", self.conf_path, command=["nats-server"])

    @property
    def client_url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def addr(self) -> tuple[str, int]:
        return (self.host, self.port)

    async def wait_ready(self, timeout: float = 10.0) -> None:
        await self.proc.await_log(r"Server is ready", timeout)

    def stop(self) -> None:
        self.proc.stop()
        with contextlib.suppress(OSError):
            os.unlink(self.conf_path)


@contextlib.asynccontextmanager
async def serve(**fields: Any) -> AsyncIterator[Any]:
    """Run a server with these ``Options`` fields for the duration of the block.

    Listens on 127.0.0.1 and a free port unless ``host``/``port`` are given.
    """
    fields.setdefault("host", "127.0.0.1")
    fields.setdefault("port", -1)
    if GO:
        srv = GoServer(fields)
        try:
            await srv.wait_ready()
            yield srv
        finally:
            srv.stop()
        return
    from rillet.app.embed import run_server
    from rillet.config.options import Options
    opts = Options(**fields)
    buf = io.StringIO()
    async with run_server(opts, log=_rillet_logger(opts, buf)) as srv:
        srv._test_log = buf
        yield srv


def _rillet_logger(opts: Any, buf: io.StringIO) -> Any:
    from rillet.server.logging import Logger
    return Logger(debug=opts.debug, trace=opts.trace, out=buf)


def log_text(srv: Any) -> str:
    """What the server has logged so far (in-process Rillet or a nats-server subprocess)."""
    if hasattr(srv, "_test_log"):
        return srv._test_log.getvalue()
    if isinstance(srv, GoServer):
        return srv.proc.output
    return srv.output


async def wait_log(srv: Any, pattern: str, timeout: float = 2.0) -> re.Match:
    """Wait until the server logs a line matching ``pattern``."""
    rx = re.compile(pattern, re.M)
    deadline = time.monotonic() + timeout
    while True:
        m = rx.search(log_text(srv))
        if m:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line matching {pattern!r} within {timeout}s; log:\n" + log_text(srv))
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def serve_config(text: str, tmp_dir: str | None = None) -> AsyncIterator[Any]:
    """Run a server from configuration file text (nats-server syntax) for the duration of the block.

    Rillet: the file goes through the command line loader (``-c file``) and the server runs in-process.
    Give the text a ``listen: 127.0.0.1:-1`` (or host/port) line to pick the address.
    """
    fd, path = tempfile.mkstemp(suffix=".conf", prefix="rillet-test-", dir=tmp_dir)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        if GO:
            proc = ServerProcess("-c", path, command=["nats-server"])
            try:
                await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
                yield proc
            finally:
                proc.stop()
            return
        from rillet.config.flags import parse_command_line
        from rillet.app.embed import run_server
        opts = parse_command_line(["-c", path]).options
        buf = io.StringIO()
        async with run_server(opts, log=_rillet_logger(opts, buf)) as srv:
            srv._test_log = buf
            yield srv
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


# ---------------------------------------------------------------------------------------------------
# A raw protocol client


def _short(data: bytes, limit: int = 300) -> str:
    if len(data) <= limit:
        return repr(data)
    return f"{data[:limit // 2]!r} ... {data[-limit // 2:]!r} ({len(data)} bytes)"


class Closed(Exception):
    """The server closed the connection while we waited for something else."""

    def __init__(self, data: bytes) -> None:
        super().__init__(f"connection closed; unread data: {_short(data)}")
        self.data = data


class RawClient:
    """A NATS connection over a plain socket: write protocol bytes, read exactly what the server sends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buf = b""
        self.eof = False
        self.info: dict[str, Any] = {}
        self.info_line = b""
        self.connect_info: dict[str, Any] | None = None
        self._first_pong_seen = False

    @classmethod
    async def open(cls, target: Any, connect: dict[str, Any] | None | bool = True, *,
                   rcvbuf: int | None = None, timeout: float = 5.0, **connect_fields: Any) -> "RawClient":
        """Connect to ``target`` (a server object, a port, or a nats:// URL), read INFO and send CONNECT.

        ``connect=True`` sends ``DEFAULT_CONNECT`` updated with ``connect_fields``; a dict is sent as given
        (updated with ``connect_fields``); ``False``/``None`` sends no CONNECT.
        ``rcvbuf`` sets a small socket receive buffer before connecting (for slow consumer tests).
        """
        host, port = _host_port(target)
        if rcvbuf is not None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
            reader, writer = await asyncio.open_connection(sock=sock, limit=rcvbuf)
        else:
            reader, writer = await asyncio.open_connection(host, port)
        c = cls(reader, writer)
        line = await c.readline(timeout)
        assert line.startswith(b"INFO "), line
        c.info_line = line
        c.info = json.loads(line[5:])
        if connect is True:
            c.connect(**connect_fields)
        elif isinstance(connect, dict):
            c.send(b"CONNECT " + json.dumps({**connect, **connect_fields}).encode() + b"\r\n")
        return c

    def connect(self, **fields: Any) -> None:
        self.send(b"CONNECT " + json.dumps({**DEFAULT_CONNECT, **fields}).encode() + b"\r\n")

    def send(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode()
        self.writer.write(data)

    def pub(self, subject: str, payload: bytes | str = b"", reply: str | None = None) -> None:
        if isinstance(payload, str):
            payload = payload.encode()
        r = f" {reply}" if reply else ""
        self.send(f"PUB {subject}{r} {len(payload)}\r\n".encode() + payload + b"\r\n")

    def hpub(self, subject: str, headers: bytes, payload: bytes = b"", reply: str | None = None) -> None:
        r = f" {reply}" if reply else ""
        self.send(f"HPUB {subject}{r} {len(headers)} {len(headers) + len(payload)}\r\n".encode()
                  + headers + payload + b"\r\n")

    def sub(self, subject: str, sid: int | str, queue: str | None = None) -> None:
        q = f" {queue}" if queue else ""
        self.send(f"SUB {subject}{q} {sid}\r\n")

    async def _fill(self, timeout: float) -> bool:
        """Read more data into the buffer. False on timeout; raises Closed at EOF."""
        if self.eof:
            raise Closed(self.buf)
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 16), timeout)
        except asyncio.TimeoutError:
            return False
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.eof = True
            raise Closed(self.buf)
        self.buf += data
        return True

    async def read_until(self, token: bytes, timeout: float = 3.0) -> bytes:
        """Everything up to and including ``token``; the rest stays buffered."""
        deadline = time.monotonic() + timeout
        while True:
            i = self.buf.find(token)
            if i >= 0:
                out, self.buf = self.buf[:i + len(token)], self.buf[i + len(token):]
                return out
            left = deadline - time.monotonic()
            if left <= 0 or not await self._fill(left):
                raise AssertionError(f"timed out waiting for {token!r}; got {_short(self.buf)}")

    async def readline(self, timeout: float = 3.0) -> bytes:
        """One line, without its CRLF."""
        return (await self.read_until(b"\r\n", timeout))[:-2]

    async def read_bytes(self, n: int, timeout: float = 3.0) -> bytes:
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not await self._fill(left):
                raise AssertionError(f"timed out waiting for {n} bytes; got {len(self.buf)}")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    async def read_msg(self, timeout: float = 3.0) -> "Msg":
        """The next MSG or HMSG (skipping PING/PONG/+OK lines is NOT done: anything else is an error)."""
        line = await self.readline(timeout)
        return await self._msg_from_line(line, timeout)

    async def _msg_from_line(self, line: bytes, timeout: float) -> "Msg":
        parts = line.split(b" ")
        if parts[0] == b"MSG":
            if len(parts) == 4:
                subject, sid, size = parts[1], parts[2], parts[3]
                reply = None
            else:
                assert len(parts) == 5, line
                subject, sid, reply, size = parts[1:]
            body = await self.read_bytes(int(size) + 2, timeout)
            assert body.endswith(b"\r\n"), body[-10:]
            return Msg(subject.decode(), sid.decode(), reply.decode() if reply else None, None, body[:-2])
        if parts[0] == b"HMSG":
            if len(parts) == 5:
                subject, sid, hsize, size = parts[1:]
                reply = None
            else:
                assert len(parts) == 6, line
                subject, sid, reply, hsize, size = parts[1:]
            body = await self.read_bytes(int(size) + 2, timeout)
            assert body.endswith(b"\r\n"), body[-10:]
            h = int(hsize)
            return Msg(subject.decode(), sid.decode(), reply.decode() if reply else None, body[:h], body[h:-2])
        raise AssertionError(f"expected MSG or HMSG, got {line!r}")

    async def ping(self, timeout: float = 3.0) -> bytes:
        """Send PING and return everything the server sent before its PONG.

        nats-server answers the first PING after CONNECT (protocol >= 1) with PONG and then an INFO that
        has ``"connect_info": true``; that INFO is taken out of the data and kept in ``connect_info``.
        """
        self.send(b"PING\r\n")
        data = (await self.read_until(b"PONG\r\n", timeout))[:-6]
        data = self.answer_pings(self.strip_connect_info(data))
        if not self._first_pong_seen and self.connect_info is None and not self.buf.startswith(b"INFO"):
            # give an INFO that follows the first PONG a moment to arrive
            with contextlib.suppress(Closed):
                await self._fill(0.02)
        self._first_pong_seen = True
        self.buf = self.strip_connect_info(self.buf)
        return data

    def answer_pings(self, data: bytes) -> bytes:
        """Answer (with PONG) and remove the server's keep-alive PINGs found in ``data``.

        Only whole protocol lines are looked at: message payloads are skipped.
        """
        if b"PING\r\n" not in data:
            return data
        out = bytearray()
        pos = 0
        while pos < len(data):
            nl = data.find(b"\r\n", pos)
            if nl < 0:
                out += data[pos:]
                break
            line = data[pos:nl]
            end = nl + 2
            if line.startswith((b"MSG ", b"HMSG ")):
                with contextlib.suppress(ValueError):
                    end += int(line.rsplit(b" ", 1)[1]) + 2
            if line == b"PING":
                self.send(b"PONG\r\n")
            else:
                out += data[pos:end]
            pos = end
        return bytes(out)

    def strip_connect_info(self, data: bytes) -> bytes:
        """Remove (and remember) the one INFO with ``"connect_info": true`` from ``data``."""
        i = data.find(b"INFO {")
        while i >= 0 and (i == 0 or data[i - 2:i] == b"\r\n"):
            end = data.find(b"\r\n", i)
            if end < 0:
                break
            info = json.loads(data[i + 5:end])
            if info.get("connect_info"):
                self.connect_info = info
                return data[:i] + data[end + 2:]
            i = data.find(b"INFO {", end)
        return data

    async def read_for(self, seconds: float) -> bytes:
        """Everything that arrives within ``seconds`` (stops early at EOF; sets ``eof``)."""
        deadline = time.monotonic() + seconds
        with contextlib.suppress(Closed):
            while (left := deadline - time.monotonic()) > 0:
                await self._fill(left)
        out, self.buf = self.buf, b""
        return out

    async def read_until_closed(self, timeout: float = 3.0) -> bytes:
        """Everything until the server closes the connection; fails if it stays open ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0 or not await self._fill(left):
                    raise AssertionError(f"connection still open after {timeout}s; got {_short(self.buf)}")
            except Closed:
                out, self.buf = self.buf, b""
                return out

    async def is_open(self) -> bool:
        """A PING gets its PONG (anything before it stays buffered)."""
        try:
            self.send(b"PING\r\n")
            data = self.strip_connect_info(await self.read_until(b"PONG\r\n", 3.0))
        except (Closed, ConnectionError):
            return False
        self.buf = data[:-6] + self.strip_connect_info(self.buf)
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()

    async def __aenter__(self) -> "RawClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class Msg:
    __slots__ = ("subject", "sid", "reply", "headers", "payload")

    def __init__(self, subject: str, sid: str, reply: str | None, headers: bytes | None, payload: bytes) -> None:
        self.subject = subject
        self.sid = sid
        self.reply = reply
        self.headers = headers
        self.payload = payload

    def __repr__(self) -> str:
        return (f"Msg({self.subject!r}, sid={self.sid!r}, reply={self.reply!r}, headers={self.headers!r}, "
                f"payload={self.payload[:40]!r})")


def parse_stream(data: bytes) -> list[Any]:
    """Split server output into items: ``Msg`` objects and other lines (bytes, without CRLF)."""
    out: list[Any] = []
    pos = 0
    while pos < len(data):
        nl = data.index(b"\r\n", pos)
        line = data[pos:nl]
        pos = nl + 2
        parts = line.split(b" ")
        if parts[0] in (b"MSG", b"HMSG"):
            size = int(parts[-1])
            body = data[pos:pos + size]
            pos += size + 2
            if parts[0] == b"MSG":
                reply = parts[3].decode() if len(parts) == 5 else None
                out.append(Msg(parts[1].decode(), parts[2].decode(), reply, None, body))
            else:
                reply = parts[3].decode() if len(parts) == 6 else None
                h = int(parts[-2])
                out.append(Msg(parts[1].decode(), parts[2].decode(), reply, body[:h], body[h:]))
        else:
            out.append(line)
    return out


def _host_port(target: Any) -> tuple[str, int]:
    if isinstance(target, int):
        return "127.0.0.1", target
    if isinstance(target, str):
        m = re.match(r"^(?:nats://)?\[?([^\]]+?)\]?:(\d+)$", target)
        assert m, target
        return m.group(1), int(m.group(2))
    url = target.client_url
    return _host_port(url)


# ---------------------------------------------------------------------------------------------------
# Server subprocesses (command line, signals, logs)


class ServerProcess:
    """The server as a subprocess; stdout and stderr lines are collected in ``lines``.

    ``ServerProcess("-p", "-1", "-a", "127.0.0.1")`` runs ``python -m rillet.server -p -1 -a 127.0.0.1``
    (``nats-server ...`` when RILLET_TEST_TARGET=nats-server).
    """

    def __init__(self, *args: str, command: list[str] | None = None, cwd: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.cmd = (command or server_command()) + self.args
        self.lines: list[str] = []
        self.stdout_lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                                     env=env, text=True, errors="replace")
        self._threads = [threading.Thread(target=self._pump, args=(self.proc.stderr, False), daemon=True),
                         threading.Thread(target=self._pump, args=(self.proc.stdout, True), daemon=True)]
        for t in self._threads:
            t.start()
        self.port = 0
        self.host = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pump(self, stream: Any, is_stdout: bool) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                if is_stdout:
                    self.stdout_lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def output(self) -> str:
        if self.proc.poll() is not None:  # (exited: what it wrote is read to the end first; under load the
            for t in self._threads:       # pumps may not have reached it yet)
                t.join(5)
        with self._cond:
            return "\n".join(self.lines)

    def _find(self, rx: re.Pattern, start: int) -> tuple[re.Match | None, int]:
        for i in range(start, len(self.lines)):
            m = rx.search(self.lines[i])
            if m:
                return m, i
        return None, len(self.lines)

    def wait_log(self, pattern: str, timeout: float = 10.0, after: int = 0) -> re.Match:
        """Block until a line matching ``pattern`` (a regex) appears (searching from line ``after``)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                m, _ = self._find(rx, after)
                if m:
                    return m
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no log line matching {pattern!r} within {timeout}s; "
                                         f"rc={self.proc.poll()} output:\n" + "\n".join(self.lines))
                if self.proc.poll() is not None and not any(t.is_alive() for t in self._threads):
                    raise AssertionError(f"server exited (rc={self.proc.returncode}) without logging "
                                         f"{pattern!r}; output:\n" + "\n".join(self.lines))
                self._cond.wait(min(left, 0.1))

    async def await_log(self, pattern: str, timeout: float = 10.0, after: int = 0) -> re.Match:
        """``wait_log`` without blocking the event loop."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                m, _ = self._find(rx, after)
                exited = self.proc.poll() is not None and not any(t.is_alive() for t in self._threads)
            if m:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line matching {pattern!r} within {timeout}s; output:\n"
                                     + self.output)
            if exited:
                raise AssertionError(f"server exited (rc={self.proc.returncode}) without logging "
                                     f"{pattern!r}; output:\n" + self.output)
            await asyncio.sleep(0.02)

    def mark(self) -> int:
        """The current number of collected lines (pass as ``after`` to look only at newer lines)."""
        with self._cond:
            return len(self.lines)

    def wait_ready(self, timeout: float = 15.0) -> "ServerProcess":
        m = self.wait_log(r"Listening for client connections on (\S+):(\d+)", timeout)
        self.host, self.port = m.group(1).strip("[]"), int(m.group(2))
        self.wait_log(r"\[INF\] Server is ready", timeout)
        return self

    @property
    def client_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"nats://{host}:{self.port}"

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 10.0) -> int:
        rc = self.proc.wait(timeout)
        for t in self._threads:
            t.join(2)
        return rc

    async def await_exit(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"server still running after {timeout}s; output:\n" + self.output)
            await asyncio.sleep(0.02)
        return self.wait(2)

    def stop(self) -> int | None:
        """Terminate (then kill) the process if it is still running; return its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for t in self._threads:
            t.join(2)
        return self.proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run_command(*args: str, timeout: float = 20.0, command: Iterable[str] | None = None
                ) -> subprocess.CompletedProcess:
    """Run the server command line to completion (``-v``, ``-h``, ``-t``, ``--signal``...)."""
    cmd = list(command or server_command()) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


class ClusterMember:
    """One server of a 3-server JetStream cluster run as its own process (tests that kill, stop or power-cut
    servers): a configuration file naming its client port, store directory and routes to the others'
    cluster ports; ``extra`` adds lines (an http port, say)."""

    def __init__(self, conf_dir: str, name: str, store: str, cluster: str, routes: list[int], cport: int,
                 extra: str = "") -> None:
        self.name, self.port = name, free_port()
        self.conf = os.path.join(conf_dir, "s.conf")
        rs = ", ".join(f"nats://127.0.0.1:{p}" for p in routes if p != cport)
        with open(self.conf, "w") as f:
            f.write(f"port: {self.port}\nhost: 127.0.0.1\nserver_name: {name}\n{extra}"
                    f"jetstream {{ store_dir: '{store}' }}\n"
                    f"cluster {{ name: {cluster}, listen: 127.0.0.1:{cport}, routes: [{rs}] }}\n")
        self.proc: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = ServerProcess("-c", self.conf)

    def close(self) -> None:
        if self.proc is not None and self.proc.proc.poll() is None:
            self.proc.proc.kill()
            self.proc.proc.wait()


def cluster_members(tmp: str, prefix: str, cluster: str, n: int = 3) -> list[ClusterMember]:
    """``n`` ClusterMembers named ``<prefix>1``.. (each in ``<tmp>/<name>`` with a ``store`` directory), routed to
    each other; not started (``start_members``)."""
    cports = [free_port() for _ in range(n)]
    members = []
    for k in range(n):
        d = os.path.join(tmp, f"{prefix}{k + 1}")
        os.makedirs(os.path.join(d, "store"))
        members.append(ClusterMember(d, f"{prefix}{k + 1}", os.path.join(d, "store"), cluster, cports, cports[k]))
    return members


def start_members(members: list[ClusterMember]) -> None:
    """Start every member, then wait until each is ready."""
    for m in members:
        m.start()
    for m in members:
        assert m.proc is not None
        m.proc.wait_log("Server is ready", timeout=30)


async def request_until(urls: list[str], subject: str, body: dict | None = None, timeout: float = 30.0,
                        want: Any = lambda d: "error" not in d) -> dict:
    """A JetStream API request sent (on a fresh connection to ``urls``) until its answer passes ``want``, within
    ``timeout`` seconds: no leader yet, a server still starting or an answer not yet good are asked again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        try:
            import nats  # (here: helpers is imported by tests that never connect)
            nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=1)
            try:
                r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)
                d = json.loads(r.data)
                if want(d):
                    return d
                last = d
            finally:
                await nc.close()
        except Exception as e:  # (no leader yet, a server still starting: ask again)
            last = repr(e)
        await asyncio.sleep(0.3)
    raise AssertionError(f"{subject}: no good answer within {timeout}s: {last}")
