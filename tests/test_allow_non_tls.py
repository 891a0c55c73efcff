"""allow_non_tls: TLS offered, not required. The INFO says ``tls_available``; a client may stay in the
clear or start its TLS handshake after the INFO (the server looks at the first byte). Compared with
nats-server: the INFO's TLS fields, a plain client, a TLS client and both in one server exchanging messages."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest

from tests.difftarget import both
from tests.test_tls_options import _ctx, pki  # noqa: F401  (pki: a module fixture)


def _conf(pki, extra: str = "") -> str:  # noqa: F811
    cert, key = pki["server"]
    return (f'listen: 127.0.0.1:{{port}}\nallow_non_tls: true\n'
            f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n  ca_file: "{pki["ca"]}"\n}}\n{extra}')


def _url(srv) -> str:
    return f"nats://127.0.0.1:{srv.port}"


async def _info(url: str) -> dict:
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port))
    try:
        line = await asyncio.wait_for(r.readline(), 2)
    finally:
        w.close()
    assert line.startswith(b"INFO ")
    return json.loads(line[5:])


async def _tls_after_info(url: str, ctx, name: str):
    """A client that upgrades to TLS after the INFO although it is only offered (as nats.go's Secure
    option does; nats.py upgrades only when TLS is required). Returns (reader, writer) after CONNECT."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port))
    line = await asyncio.wait_for(r.readline(), 2)
    assert json.loads(line[5:]).get("tls_available") is True
    await w.start_tls(ctx, server_hostname="127.0.0.1")
    conn = {"verbose": False, "pedantic": False, "protocol": 1, "name": name, "headers": True}
    w.write(b"CONNECT " + json.dumps(conn).encode() + b"\r\nPING\r\n")
    await w.drain()
    line = await asyncio.wait_for(r.readline(), 2)
    if line.startswith(b"INFO "):  # (the INFO naming the account: before or after the PONG)
        line = await asyncio.wait_for(r.readline(), 2)
    assert line == b"PONG\r\n"
    return r, w


async def test_info_plain_and_tls_clients_as_nats_server(pki):  # noqa: F811
    async with both(_conf(pki)) as servers:
        for name, srv in servers.items():
            info = await _info(_url(srv))
            assert info.get("tls_available") is True and "tls_required" not in info, (name, info)
            plain = await nats.connect(_url(srv), allow_reconnect=False)
            r, w = await _tls_after_info(_url(srv), _ctx(pki), "secure")
            try:
                got = []

                async def collect(m):
                    got.append(m.data)
                await plain.subscribe("x", cb=collect)
                await plain.flush()
                w.write(b"PUB x 8\r\nfrom-tls\r\nSUB y 1\r\nPING\r\n")
                await w.drain()
                line = await asyncio.wait_for(r.readline(), 2)
                if line.startswith(b"INFO "):
                    line = await asyncio.wait_for(r.readline(), 2)
                assert line == b"PONG\r\n"
                await plain.publish("y", b"from-plain")
                await plain.flush()
                assert await asyncio.wait_for(r.readline(), 2) == b"MSG y 1 10\r\n"
                assert await asyncio.wait_for(r.readline(), 2) == b"from-plain\r\n"
                for _ in range(100):
                    if got:
                        break
                    await asyncio.sleep(0.01)
                assert got == [b"from-tls"], name
                assert w.get_extra_info("ssl_object").version().startswith("TLS")
            finally:
                await plain.close()
                w.close()


async def test_rillet_connz_shows_tls_only_for_the_tls_client(pki):  # noqa: F811
    async with both(_conf(pki)) as servers:
        srv = servers["rillet"]
        plain = await nats.connect(_url(srv), name="plain", allow_reconnect=False)
        r, w = await _tls_after_info(_url(srv), _ctx(pki), "secure")
        try:
            await plain.flush()
            by_name = {c.opts.name: c for c in srv.clients.values() if getattr(c, "opts", None)}
            assert by_name["plain"].tls_version == ""
            assert by_name["secure"].tls_version.startswith("TLS")
        finally:
            await plain.close()
            w.close()


async def test_tls_required_without_allow_non_tls_still_refuses_plain(pki):  # noqa: F811
    conf = _conf(pki).replace("allow_non_tls: true\n", "")
    async with both(conf) as servers:
        for name, srv in servers.items():
            info = await _info(_url(srv))
            assert info.get("tls_required") is True and "tls_available" not in info, name
            with pytest.raises(Exception):
                nc = await nats.connect(_url(srv), allow_reconnect=False, max_reconnect_attempts=0,
                                        connect_timeout=1)
                await nc.close()
