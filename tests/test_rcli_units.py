"""Pure parts of the ``rillet`` command line: durations, sizes, templates, settings, the bench parser."""
from __future__ import annotations

import asyncio
import json

import pytest

from rillet.cli import common
from rillet.cli.common import CliError, format_duration, parse_duration, parse_size


def test_durations():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("250ms") == 0.25
    assert parse_duration("2d") == 172800
    assert parse_duration("1.5s") == 1.5
    assert parse_duration("10") == 10
    for bad in ("", "1x", "h", "1h 2m", "-"):
        with pytest.raises(CliError):
            parse_duration(bad)
    assert format_duration(3661) == "1h1m1s"
    assert format_duration(0.0025) == "2.50ms"
    assert format_duration(86400 * 2) == "2d"


def test_sizes():
    assert parse_size("1024") == 1024
    assert parse_size("10KB") == 10240
    assert parse_size("1.5MiB") == 1572864
    assert parse_size("2G") == 2 << 30
    assert parse_size("-1") == -1
    with pytest.raises(CliError):
        parse_size("lots")


def test_templates():
    from rillet.cli.core import render
    assert render("n={{Count}} {{ .Count }}", 7) == "n=7 7"
    assert len(render("{{ID}}", 1)) == 22
    assert 3 <= len(render("{{Random 3 5}}", 1)) <= 5
    assert render("no templates", 1) == "no templates"
    with pytest.raises(CliError, match="could not parse template"):
        render("{{Random 3}}", 1)


def test_settings_precedence(tmp_path, monkeypatch):
    for k in list(__import__("os").environ):
        if k.startswith("NATS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("RILLET_CONFIG_DIR", str(tmp_path))
    (tmp_path / "context").mkdir()
    (tmp_path / "context" / "c1.json").write_text(json.dumps({"url": "nats://ctx:1", "user": "cu",
                                                              "password": "cp", "js_domain": "hub"}))
    common.FLAGS.clear()
    s = common.settings()
    assert s.url == "nats://127.0.0.1:4222" and s.context == "" and s.js_prefix == "$JS.API"
    common.select_context("c1")
    s = common.settings()
    assert (s.url, s.user, s.password, s.js_prefix) == ("nats://ctx:1", "cu", "cp", "$JS.hub.API")
    monkeypatch.setenv("NATS_URL", "env:2")
    monkeypatch.setenv("NATS_TIMEOUT", "250ms")
    s = common.settings()
    assert s.url == "nats://env:2" and s.user == "cu" and s.timeout == 0.25
    common.FLAGS.update(url="nats://flag:3", user="fu")
    s = common.settings()
    assert s.url == "nats://flag:3" and s.user == "fu" and s.password == "cp"
    common.FLAGS.clear()
    common.FLAGS["context"] = "nope"
    with pytest.raises(CliError, match="unknown context 'nope'"):
        common.settings()
    common.FLAGS.clear()


class _FakeParser:
    def __init__(self) -> None:
        self.seen: list[bytes] = []

    async def parse(self, data: bytes = b"") -> None:
        self.seen.append(bytes(data))

    def reset(self) -> None:
        pass


class _FakeNC:
    def __init__(self) -> None:
        self._ps = _FakeParser()


def test_counting_parser_splits_and_passes_through():
    from rillet.cli.bench import CountingParser
    nc = _FakeNC()
    p = CountingParser(nc)
    p.sids.add(b"1")
    stream = (b"INFO {}\r\nMSG a 1 5\r\nhello\r\nPING\r\nMSG b 2 2\r\nhi\r\n"
              b"HMSG a 1 _INBOX.x 12 15\r\nNATS/1.0\r\n\r\nabc\r\nMSG a 1 r 0\r\n\r\n")

    async def feed() -> None:
        for i in range(0, len(stream), 7):  # frames cut anywhere
            await p.parse(stream[i:i + 7])

    asyncio.run(feed())
    assert p.sample.msgs == 3 and p.sample.bytes == 5 + 3 + 0
    assert nc._ps.seen == [b"INFO {}\r\n", b"PING\r\n", b"MSG b 2 2\r\nhi\r\n"]
    assert p.buf == b""


def test_counting_parser_statuses_errors_and_replies():
    from rillet.cli.bench import CountingParser
    p = CountingParser(_FakeNC())
    p.sids.add(b"9")
    p.statuses = p.keep_replies = p.check_errors = True
    data = (b'MSG i 9 $JS.ACK.x 22\r\n{"stream":"S","seq":1}\r\n'
            b'MSG i 9 13\r\n{"error":{}} \r\n'
            b"HMSG i 9 28 28\r\nNATS/1.0 404 No Messages\r\n\r\n\r\n")
    asyncio.run(p.parse(data))
    assert p.sample.msgs == 2 and p.status_count == 1 and p.replies == [b"$JS.ACK.x"]
    assert p.errors == [b'{"error":{}} ', b"NATS/1.0 404 No Messages"]
