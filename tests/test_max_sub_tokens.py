"""``max_sub_tokens`` (``max_subscription_tokens``): a client's subscription with more tokens than the limit is
refused with nats-server's -ERR (the connection stays open), checked side by side with nats-server; the
setting's range errors."""
from __future__ import annotations

import pytest

from rillet.config import ConfigError
from rillet.config.options_builder import load_string
from tests.difftarget import both
from tests.helpers import RawClient


async def _answers(target) -> list[bytes]:
    c = await RawClient.open(target, verbose=True)
    try:
        lines = []
        c.send(b"SUB a.b.c 1\r\n")
        c.send(b"SUB a.b.c.d 2\r\n")
        c.send(b"SUB a.> 3\r\n")
        c.send(b"SUB a.b.*.d q 4\r\n")
        c.send(b"PING\r\n")
        while not lines or lines[-1] != b"PONG":
            lines.append((await c.readline(5.0)).rstrip(b"\r\n"))
        c.pub("a.b.c", b"hi")
        c.send(b"PING\r\n")
        rest = (await c.read_until(b"PONG\r\n", 5.0)).split(b"\r\n")
        # (the INFO after the CONNECT names each server; the two MSGs come in either order)
        lines = [ln for ln in lines if not ln.startswith(b"INFO ")]
        lines.append(b"|".join(sorted(ln for ln in rest if ln and not ln.startswith(b"INFO "))))
        return lines
    finally:
        c.writer.close()


async def test_too_many_tokens_answered_as_nats_server():
    async with both('listen: "127.0.0.1:{port}"\nmax_sub_tokens: 3') as servers:
        got = {name: await _answers(srv) for name, srv in servers.items()}
    assert got["rillet"] == got["go"], got
    assert b"-ERR 'Permissions Violation for Subscription to \"a.b.c.d\", too many tokens'" in got["rillet"]
    assert got["rillet"][-1] == b"+OK|MSG a.b.c 1 2|MSG a.b.c 3 2|PONG|hi|hi", got["rillet"]  # (still subscribed)


@pytest.mark.parametrize("value,error", [("256", "max_sub_tokens value is too big"),
                                         ("0", "max_sub_tokens value can not be negative"),
                                         ("-1", "max_sub_tokens value can not be negative")])
def test_range_errors(value, error):
    with pytest.raises(ConfigError, match=error):
        load_string(f"max_sub_tokens: {value}", "x.conf")
    assert load_string("max_subscription_tokens: 255", "x.conf").max_sub_tokens == 255
