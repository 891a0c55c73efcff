"""Payload trace lines (``-V``/``trace``): ``<<- MSG_PAYLOAD: [...]`` after a traced PUB/HPUB and ``->> MSG_PAYLOAD``
after each traced MSG/HMSG, Go-quoted, cut by ``max_traced_msg_len``, only the header block with ``trace_headers``;
the same lines as nats-server writes for the same protocol."""
from __future__ import annotations

import asyncio
import re

import pytest

from tests.difftarget import both
from tests.helpers import RawClient

PAYLOAD_LINE = re.compile(r'(<<-|->>) MSG_PAYLOAD: \[.*\]')


async def _exchange(target) -> None:
    c = await RawClient.open(target, headers=True)
    try:
        c.send(b"SUB t.> 1\r\n")
        c.pub("t.a", b"hello\tworld \xe2\x82\xac \x01")
        c.pub("t.empty", b"")
        c.hpub("t.h", b"NATS/1.0\r\nK: v\r\n\r\n", b"body-with-headers")
        c.pub("t.long", b"0123456789abcdefghij")
        c.send(b"PING\r\n")
        await c.read_until(b"PONG\r\n", 5.0)
    finally:
        c.writer.close()


def _lines(text: str) -> list[str]:
    return [m.group(0) for m in PAYLOAD_LINE.finditer(text)]


@pytest.mark.parametrize("extra", ["", "max_traced_msg_len: 8", "trace_headers: true"])
async def test_payload_trace_lines_as_nats_server(extra):
    async with both(f'listen: "127.0.0.1:{{port}}"\ntrace: true\n{extra}') as servers:
        for srv in servers.values():
            await _exchange(srv)
        go = servers["go"]
        deadline = asyncio.get_running_loop().time() + 5
        while len(_lines(go.output)) < len(_lines(servers["rillet"]._test_log.getvalue())):
            assert asyncio.get_running_loop().time() < deadline, go.output
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        got = {"rillet": _lines(servers["rillet"]._test_log.getvalue()), "go": _lines(go.output)}
    assert got["rillet"] == got["go"], got
    assert got["rillet"], got


def test_max_traced_msg_len_flag():
    from rillet.config.flags import parse_command_line
    assert parse_command_line(["--max_traced_msg_len", "8"]).options.max_traced_msg_len == 8
    assert parse_command_line([]).options.max_traced_msg_len == 0
