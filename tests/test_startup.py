"""Start-up order: the client port listens before the monitor answers, and the HTTP stack loads late.

nats.py's test harness (and other tools) take a 200 from ``/varz`` to mean clients can connect, and a
restarted server should be reachable as soon as possible: clients that come while the monitor starts wait
in the listen backlog and get their INFO once the server is up.
"""
from __future__ import annotations

import socket
import subprocess
import sys

import nats

from rillet.server import Options
from rillet.app.embed import run_server
from rillet.config.options import RANDOM_PORT
from tests.helpers import free_port
from tests.test_tls_map import pki  # noqa: F401


def test_server_modules_do_not_load_the_http_stack():
    code = "import sys, rillet.app.main, rillet.app.compose, rillet.server.server; print('aiohttp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


async def test_client_port_listens_before_the_monitor_starts(monkeypatch):
    import rillet.monitor as monitor
    port = free_port()
    seen = {}
    real = monitor.start_monitor

    async def checking_start(server):
        with socket.socket() as s:  # the TCP connection is accepted (backlog) before the monitor is up
            s.settimeout(1)
            seen["connect"] = s.connect_ex(("127.0.0.1", port))
        return await real(server)
    monkeypatch.setattr(monitor, "start_monitor", checking_start)
    async with run_server(Options(host="127.0.0.1", port=port, http_port=RANDOM_PORT)) as srv:
        assert seen["connect"] == 0
        nc = await nats.connect(srv.client_url)
        await nc.flush()
        await nc.close()


async def test_tls_upgrade_in_the_real_server(pki):  # noqa: F811
    """The client's TLS handshake right after the INFO never reaches the plain-text parser. (The server
    program runs on uvloop, which ignores a pause_reading() made in connection_made: before the fix about 1
    handshake in 5 met an -ERR in the clear and failed with WRONG_VERSION_NUMBER.)"""
    import asyncio
    import ssl
    from tests.helpers import ServerProcess
    cert, key = pki["server"]
    port = free_port()
    srv = ServerProcess("-p", str(port), "-a", "127.0.0.1", "--user", "u", "--pass", "p", "--tls",
                        "--tlscert", cert, "--tlskey", key)
    try:
        ctx = ssl.create_default_context(cafile=pki["ca"])
        for _ in range(100):  # (wait for the port)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        bad = []
        for _ in range(100):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            await r.readline()  # INFO in the clear; the handshake follows at once
            try:
                await w.start_tls(ctx, server_hostname="127.0.0.1")
                w.write(b'CONNECT {"verbose":false,"user":"u","pass":"p"}\r\nPING\r\n')
                line = await asyncio.wait_for(r.readline(), 3)
                if not line.startswith(b"PONG"):
                    bad.append(line)
            except ssl.SSLError as e:
                bad.append(str(e))
            w.close()
        assert bad == []
    finally:
        srv.stop()
