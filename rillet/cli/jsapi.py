"""Raw ``$JS.API`` requests: the JSON goes to the server as given and comes back as the server wrote it."""
from __future__ import annotations

import json
from typing import Any

from rillet.cli.common import CliError, Conn


class JSAPIError(CliError):
    def __init__(self, code: int, err_code: int | None, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.err_code = err_code
        self.description = description


async def api(conn: Conn, subject: str, payload: Any = None, timeout: float | None = None) -> dict[str, Any]:
    """Send one JetStream API request; raise JSAPIError with the server's description on error."""
    import nats.errors

    s = conn.settings
    data = b"" if payload is None else (payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    subj = f"{s.js_prefix}.{subject}"
    try:
        msg = await conn.nc.request(subj, data, timeout=timeout or s.timeout)
    except nats.errors.NoRespondersError:
        raise CliError("JetStream not enabled (no responders for the JetStream API)") from None
    except nats.errors.TimeoutError:
        perm = conn.last_permission_error()
        if perm:
            raise CliError(perm) from None
        raise CliError("timeout waiting for the JetStream API") from None
    try:
        resp = json.loads(msg.data)
    except ValueError:
        raise CliError(f"invalid JetStream API response on {subj}") from None
    err = resp.get("error")
    if err:
        raise JSAPIError(err.get("code", 0), err.get("err_code"), err.get("description") or "unknown error")
    return resp


async def bucket_api(conn: Conn, subject: str, bucket: str) -> dict[str, Any]:
    """``api`` for a request on a KV or object store bucket's stream: a missing stream (10059) is
    ``bucket <bucket> not found``."""
    try:
        return await api(conn, subject)
    except JSAPIError as e:
        if e.err_code == 10059:
            raise CliError(f"bucket {bucket} not found") from None
        raise


async def _all_streams(conn: Conn, endpoint: str, subject: str | None) -> list[Any]:
    """Every page of STREAM.NAMES or STREAM.LIST (``subject``: only the streams that take it)."""
    out: list[Any] = []
    offset = 0
    while True:
        req: dict[str, Any] = {"offset": offset}
        if subject:
            req["subject"] = subject
        r = await api(conn, endpoint, req)
        batch = r.get("streams") or []
        out.extend(batch)
        offset += len(batch)
        if not batch or offset >= r.get("total", 0):
            return out


async def stream_names(conn: Conn, subject: str | None = None) -> list[str]:
    return await _all_streams(conn, "STREAM.NAMES", subject)


async def stream_list(conn: Conn, subject: str | None = None) -> list[dict[str, Any]]:
    return await _all_streams(conn, "STREAM.LIST", subject)


async def consumer_list(conn: Conn, stream: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        r = await api(conn, f"CONSUMER.LIST.{stream}", {"offset": offset})
        batch = r.get("consumers") or []
        out.extend(batch)
        offset += len(batch)
        if not batch or offset >= r.get("total", 0):
            return out


def strip_response(resp: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resp.items() if k != "type"}
