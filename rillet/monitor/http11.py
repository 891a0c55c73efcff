"""A small HTTP/1.1 server for the monitoring endpoints, on asyncio streams.

The monitor answers GET requests with short bodies built in one piece; it needs no client, no
middleware, no streaming and no multipart: what it needs is here, in place of aiohttp's server, which
cost an idle server ~13 MB (aiohttp with yarl, multidict, attrs, the email and http.cookies packages...)
against nats-server's 14 MB in all (issue 20).

What it does, as Go's net/http does for nats-server's monitor: persistent connections (HTTP/1.1 by
default, HTTP/1.0 with ``Connection: keep-alive``), pipelined requests answered in order, ``HEAD``
answered with the headers alone, a request body (``Content-Length``) read and ignored, a chunked body
refused (``411``-free: ``400`` and close, nats-server's endpoints take no body), request heads over
1 MB refused with ``431``, a malformed request line or header with ``400``, both closing the connection;
``Date`` and ``Content-Length`` on every answer. Paths are percent-decoded; the query string is decoded
as Go's ``url.ParseQuery`` (``+`` is a space) and ``query.get(name)`` is the first value.
"""
from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any, Awaitable, Callable

from rillet.gocompat.gotime import http_date

MAX_HEAD = 1 << 20  # Go's http.DefaultMaxHeaderBytes
IDLE_TIMEOUT = 75.0  # a kept-alive connection with no request is closed after this long

_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 413: "Request Entity Too Large",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            501: "Not Implemented", 503: "Service Unavailable"}


class Request:
    """One request: ``method``, ``path`` (percent-decoded), ``query`` (first value of each name),
    ``headers`` (lower-case names), ``version`` ("HTTP/1.1")."""

    __slots__ = ("method", "path", "query", "headers", "version", "raw_path")

    def __init__(self, method: str, target: str, version: str, headers: dict[str, str]) -> None:
        self.method = method
        self.version = version
        self.headers = headers
        from urllib.parse import parse_qsl, unquote  # (with ipaddress, ~0.4 MB: loaded by the first request)
        path, _, qs = target.partition("?")
        path = path.split("#", 1)[0]
        self.raw_path = path
        self.path = unquote(path)
        query: dict[str, str] = {}
        # (bytes that are not UTF-8 kept as surrogate escapes: echoed back as the bytes sent, as nats-server)
        for k, v in parse_qsl(qs, keep_blank_values=True, errors="surrogateescape"):
            query.setdefault(k, v)
        self.query = query


class Response:
    """An answer in one piece. ``content_type`` with ``charset`` gives ``text/plain; charset=utf-8``;
    ``headers`` may be changed until it is sent."""

    __slots__ = ("body", "status", "headers")

    def __init__(self, body: bytes = b"", status: int = 200, content_type: str = "application/octet-stream",
                 charset: str | None = None, headers: dict[str, str] | None = None) -> None:
        self.body = body
        self.status = status
        self.headers: dict[str, str] = {
            "Content-Type": f"{content_type}; charset={charset}" if charset else content_type}
        if headers:
            self.headers.update(headers)

    def encode(self, head_only: bool, close: bool) -> bytes:
        reason = _REASONS.get(self.status, "Status")
        lines = [f"HTTP/1.1 {self.status} {reason}"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        lines.append(f"Date: {http_date()}")
        lines.append(f"Content-Length: {len(self.body)}")
        if close:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


Handler = Callable[[Request], Awaitable[Response]]


class _BadRequest(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def _parse_head(head: bytes) -> Request:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise _BadRequest(400, "bad request") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, "malformed HTTP request")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise _BadRequest(400, "malformed MIME header line")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Request(method.upper(), target, version, headers)


def _keep_alive(req: Request) -> bool:
    conn = req.headers.get("connection", "").lower()
    if req.version == "HTTP/1.0":
        return "keep-alive" in conn
    return "close" not in conn


class HttpServer:
    """Serves ``handler`` on a listening socket (plain, or TLS with ``ssl_context``)."""

    def __init__(self, handler: Handler, log_error: Callable[[str], None] | None = None) -> None:
        self.handler = handler
        self.log_error = log_error
        self.server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None,
                    backlog: int = 1024) -> None:
        self.server = await asyncio.start_server(self._serve, sock=sock, ssl=ssl_context, backlog=backlog,
                                                 limit=MAX_HEAD + 4)

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(self.server.sockets) if self.server is not None else ()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for w in list(self._conns):
            w.close()
        if self.server is not None:
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
                except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, ssl.SSLError):
                    return
                except asyncio.LimitOverrunError:
                    await self._refuse(writer, 431, "request header fields too large")
                    return
                try:
                    req = _parse_head(head[:-4])
                    if "chunked" in req.headers.get("transfer-encoding", "").lower():
                        raise _BadRequest(400, "chunked request bodies are not accepted")
                    length = req.headers.get("content-length", "0") or "0"
                    if not length.isdigit():
                        raise _BadRequest(400, "bad Content-Length")
                except _BadRequest as e:
                    await self._refuse(writer, e.status, str(e))
                    return
                if int(length):
                    try:
                        await reader.readexactly(int(length))  # (the endpoints take no body)
                    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                        return
                keep = _keep_alive(req)
                resp = await self.handler(req)
                writer.write(resp.encode(req.method == "HEAD", not keep))
                try:
                    await writer.drain()
                except (ConnectionError, ssl.SSLError):
                    return
                if not keep:
                    return
        finally:
            self._conns.discard(writer)
            writer.close()

    async def _refuse(self, writer: asyncio.StreamWriter, status: int, text: str) -> None:
        writer.write(Response(f"{status} {text}".encode(), status, "text/plain", "utf-8").encode(False, True))
        try:
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
