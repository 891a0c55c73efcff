"""Protocol limits: max_control_line, max_payload (also from a config file), max_pending, write_deadline.

The expected answers are nats-server's (check with RILLET_TEST_TARGET=nats-server).
"""
from __future__ import annotations

import asyncio
import time

import nats
import pytest

from helpers import Msg, RawClient, ServerProcess, parse_stream, serve, serve_config, wait_log

# nats-server sends the text of its ErrMaxControlLine error, in lower case
MCL_ERR = b"-ERR 'maximum control line exceeded'\r\n"


# ---------------------------------------------------------------------------------------------------
# max_control_line


@pytest.fixture
async def mcl_srv():
    async with serve(max_control_line=64) as s:
        yield s


async def test_control_line_at_limit_is_accepted(mcl_srv):
    c = await RawClient.open(mcl_srv)
    subject = "a" * 62  # "SUB " + 62 + " 1": the arguments are exactly 64 bytes
    c.send(f"SUB {subject} 1\r\nPUB {subject} 1\r\nx\r\n")
    assert await c.ping() == f"MSG {subject} 1 1\r\nx\r\n".encode()
    await c.close()


@pytest.mark.parametrize("line", [
    b"SUB " + b"a" * 63 + b" 1",                 # arguments one byte over
    b"SUB " + b"a" * 200 + b" 1",
    b"PUB " + b"a" * 70 + b" 1\r\nx",
    b"UNSUB " + b"1" * 70,
    b'CONNECT {"verbose":false,"name":"' + b"x" * 80 + b'"}',
], ids=["sub-one-over", "sub-long", "pub", "unsub", "connect"])
async def test_control_line_over_limit(mcl_srv, line):
    c = await RawClient.open(mcl_srv, connect=False)
    if not line.startswith(b"CONNECT"):
        c.send(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
    c.send(line + b"\r\nPING\r\n")
    assert await c.read_until_closed() == MCL_ERR


async def test_control_line_without_end_over_limit(mcl_srv):
    c = await RawClient.open(mcl_srv)
    assert await c.ping() == b""
    c.send(b"SUB " + b"a" * 200)
    await c.writer.drain()
    await asyncio.sleep(0.05)
    c.send(b"b" * 4000)
    assert await c.read_until_closed() == MCL_ERR


async def test_default_max_control_line_is_4096():
    async with serve() as s:
        c = await RawClient.open(s)
        ok = "a" * (4096 - 2)
        c.send(f"SUB {ok} 1\r\n")
        assert await c.ping() == b""
        c.send(f"SUB {ok}b 2\r\n")
        assert await c.read_until_closed() == MCL_ERR


async def test_max_control_line_from_config(tmp_path):
    async with serve_config("listen: 127.0.0.1:-1\nmax_control_line: 100\n", str(tmp_path)) as s:
        c = await RawClient.open(s)
        c.send(b"SUB " + b"a" * 98 + b" 1\r\n")
        assert await c.ping() == b""
        c.send(b"SUB " + b"a" * 99 + b" 1\r\n")
        assert await c.read_until_closed() == MCL_ERR


# ---------------------------------------------------------------------------------------------------
# max_payload


async def test_max_payload_option():
    async with serve(max_payload=100) as s:
        c = await RawClient.open(s)
        assert c.info["max_payload"] == 100
        c.sub("p", 1)
        c.pub("p", b"x" * 100)
        m = parse_stream(await c.ping())[0]
        assert isinstance(m, Msg) and len(m.payload) == 100
        c.pub("p", b"x" * 101)
        assert await c.read_until_closed() == b"-ERR 'Maximum Payload Violation'\r\n"


async def test_max_payload_counts_headers():
    async with serve(max_payload=100) as s:
        c = await RawClient.open(s, headers=True)
        hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
        c.hpub("p", hdr, b"x" * (100 - len(hdr)))
        assert await c.ping() == b""
        c.hpub("p", hdr, b"x" * (101 - len(hdr)))
        assert await c.read_until_closed() == b"-ERR 'Maximum Payload Violation'\r\n"


@pytest.mark.parametrize("value, expected", [("2048", 2048), ("2KB", 2048), ("2K", 2000), ("1MB", 1024 * 1024)])
async def test_max_payload_from_config(tmp_path, value, expected):
    async with serve_config(f"listen: 127.0.0.1:-1\nmax_payload: {value}\n", str(tmp_path)) as s:
        c = await RawClient.open(s)
        assert c.info["max_payload"] == expected
        c.pub("p", b"x" * expected)
        assert await c.ping() == b""
        c.send(f"PUB p {expected + 1}\r\n")
        assert await c.read_until_closed() == b"-ERR 'Maximum Payload Violation'\r\n"


async def test_max_payload_from_config_nats_py(tmp_path):
    async with serve_config("listen: 127.0.0.1:-1\nmax_payload: 512\n", str(tmp_path)) as s:
        nc = await nats.connect(s.client_url)
        assert nc.max_payload == 512
        with pytest.raises(nats.errors.MaxPayloadError):
            await nc.publish("p", b"x" * 513)
        await nc.close()


def test_max_payload_above_max_pending_refused(tmp_path):
    conf = tmp_path / "mp.conf"
    conf.write_text("listen: 127.0.0.1:-1\nmax_payload: 2KB\nmax_pending: 1KB\n")
    with ServerProcess("-c", str(conf)) as proc:
        deadline = time.monotonic() + 10
        while proc.proc.poll() is None and "Server is ready" not in proc.output and time.monotonic() < deadline:
            time.sleep(0.02)
        rc = proc.proc.poll()
        assert rc is not None and rc != 0, "the server started:\n" + proc.output
        assert "max_payload (2048) cannot be higher than max_pending (1024)" in proc.output


# ---------------------------------------------------------------------------------------------------
# write_deadline and max_pending


async def _flood(s, n: int = 3000, size: int = 4000, stall: float = 0.0) -> tuple[RawClient, int]:
    """A stalled raw subscriber and a normal nats-py one; publish n messages in small paced batches.

    Returns the stalled client and how many messages the normal subscriber received.
    """
    stalled = await RawClient.open(s, rcvbuf=4096)
    stalled.sub("flood", 1)
    assert await stalled.ping() == b""
    good = await nats.connect(s.client_url)
    received = 0

    async def cb(msg):
        nonlocal received
        received += 1
    await good.subscribe("flood", cb=cb, pending_bytes_limit=256 * 1024 * 1024)
    await good.flush()
    pub = await RawClient.open(s)
    batch = 10  # the normal subscriber may share the event loop with the server: let it keep up
    chunk = (f"PUB flood {size}\r\n".encode() + b"x" * size + b"\r\n") * batch
    for sent in range(batch, n + 1, batch):
        pub.send(chunk)
        assert await pub.ping(timeout=10) == b""
        for _ in range(500):
            if received >= sent:
                break
            await asyncio.sleep(0.002)
    for _ in range(500):
        if received >= n:
            break
        await asyncio.sleep(0.01)
    assert good.is_connected
    await good.close()
    await pub.close()
    # keep not reading for longer than the write deadline, whenever the stall began
    await asyncio.sleep(stall)
    return stalled, received


async def test_write_deadline_cuts_off_stalled_subscriber():
    # max_pending stays at its 64 MB default: only the write deadline can catch this subscriber
    async with serve(write_deadline=0.3) as s:
        stalled, received = await _flood(s, stall=0.8)
        assert received == 3000
        rest = await stalled.read_until_closed(timeout=10)
        assert b"PONG" not in rest
        await wait_log(s, r"\[INF\] 127\.0\.0\.1:\d+ - cid:\d+ - Slow Consumer Detected: "
                          r"WriteDeadline of 300ms exceeded with \d+ chunks of \d+ total bytes\.$")


async def test_max_pending_cuts_off_stalled_subscriber():
    async with serve(max_pending=256 * 1024, max_payload=8192, write_deadline=10.0) as s:
        stalled, received = await _flood(s)
        assert received == 3000
        rest = await stalled.read_until_closed(timeout=10)
        assert b"PONG" not in rest
        await wait_log(s, r"Slow Consumer Detected: MaxPending of 262144 Exceeded$")


async def test_write_deadline_from_config(tmp_path):
    text = 'listen: 127.0.0.1:-1\nwrite_deadline: "300ms"\n'
    async with serve_config(text, str(tmp_path)) as s:
        stalled, received = await _flood(s, stall=0.8)
        assert received == 3000
        await stalled.read_until_closed(timeout=10)
