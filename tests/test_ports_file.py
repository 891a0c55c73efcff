"""``--ports_file_dir`` (issue 19, point 3): the ports file compared byte for byte with nats-server's.

Both servers run as processes with the same configuration; the files are read once written and compared
with every port number replaced (the ports are random): the name (``nats-server_<pid>.ports``), the keys and
their order, every URL (one per interface address on a wildcard host, IPv6 included), the formatting. The
file goes when the server stops.
"""
from __future__ import annotations

import asyncio
import os
import re
import signal

import pytest

from tests.helpers import ServerProcess
from tests.test_tls_options import pki  # noqa: F401  (a module fixture: CA, server and client certificates)

WILDCARD = """
listen: 0.0.0.0:-1
http: -1
cluster { name: c1, listen: "0.0.0.0:-1" }
websocket { listen: "[::]:-1", no_tls: true }
leafnodes { listen: "127.0.0.1:-1" }
"""
# nats.js's test harness: client, monitoring and leaf node ports on 127.0.0.1, websocket with no host
HARNESS = """
host: 127.0.0.1
port: -1
http: "127.0.0.1:-1"
leafnodes { listen: "127.0.0.1:-1" }
websocket { port: -1, no_tls: true }
cluster { name: h, listen: "127.0.0.1:-1" }
"""
NAMED = """
listen: "[::1]:-1"
http: "localhost:-1"
cluster { name: c2, listen: "127.0.0.1:-1" }
websocket { host: "::1", port: -1, no_tls: true }
"""


def _tls_conf(pki) -> str:  # noqa: F811
    cert, key = pki["server"]
    tls = f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki["ca"]}" }}'
    return (f"listen: 127.0.0.1:-1\n{tls}\nhttps: 127.0.0.1:-1\n"
            f"cluster {{ name: c3, listen: \"127.0.0.1:-1\"\n {tls} }}\n"
            f"websocket {{ listen: \"127.0.0.1:-1\"\n {tls} }}\n")


async def _ports_file(directory: str, pid: int, proc: ServerProcess) -> tuple[str, bytes]:
    for _ in range(250):
        names = os.listdir(directory)
        if names:
            path = os.path.join(directory, names[0])
            with open(path, "rb") as f:
                data = f.read()
            if data:
                assert len(names) == 1, names
                return names[0], data
        await asyncio.sleep(0.02)
    raise AssertionError(f"no ports file in {directory}; output:\n{proc.output}")


def _normalized(name: str, data: bytes, pid: int) -> tuple[str, bytes]:
    return name.replace(str(pid), "PID"), re.sub(rb":\d+\"", b':P"', data)


async def _run(conf_path: str, ports_dir: str, command: list[str] | None) -> tuple[str, bytes]:
    proc = ServerProcess("-c", conf_path, "--ports_file_dir", ports_dir, command=command)
    try:
        await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
        name, data = await _ports_file(ports_dir, proc.pid, proc)
        proc.send_signal(signal.SIGTERM)
        assert await proc.await_exit() == 0
        assert os.listdir(ports_dir) == [], "the ports file stays after the server stopped"
        return _normalized(name, data, proc.pid)
    finally:
        proc.stop()


@pytest.mark.parametrize("variant", ["wildcard", "harness", "named", "tls", "flags"])
async def test_ports_file_as_nats_server(variant, tmp_path, pki):  # noqa: F811
    conf = {"wildcard": WILDCARD, "harness": HARNESS, "named": NAMED, "flags": "",
            "tls": _tls_conf(pki) if variant == "tls" else ""}[variant]
    if variant == "flags":
        conf = "port: -1\n"  # nothing but a random client port on the default (wildcard) host
    path = tmp_path / "server.conf"
    path.write_text(conf)
    got = {}
    for side, command in (("go", ["nats-server"]), ("rillet", None)):
        d = tmp_path / side
        d.mkdir()
        got[side] = await _run(str(path), str(d), command)
    assert got["rillet"] == got["go"]
    name, data = got["rillet"]
    assert name == "nats-server_PID.ports"
    assert not data.endswith(b"\n") and b" " not in data
    if variant == "harness":
        # what nats.js's harness needs: the cluster port (its addClusterMember refuses a server without one)
        assert data.startswith(b'{"nats":["nats://127.0.0.1:P"],"monitoring":["http://127.0.0.1:P"],'
                               b'"cluster":["nats://127.0.0.1:P"],"websocket":')
    if variant == "tls":
        assert data == (b'{"nats":["tls://127.0.0.1:P"],"monitoring":["https://127.0.0.1:P"],'
                        b'"cluster":["tls://127.0.0.1:P"],"websocket":["wss://127.0.0.1:P"]}')
    if variant == "wildcard":
        assert b"nats://127.0.0.1:P" in data and b"nats://[::1]:P" in data


def test_interface_addresses_cover_the_kernels():
    """The netlink listing has every address /proc shows (IPv6 from /proc/net/if_inet6)."""
    from rillet.server.portsfile import interface_addresses
    addrs = interface_addresses()
    assert "127.0.0.1" in addrs
    if os.path.exists("/proc/net/if_inet6"):
        import ipaddress
        with open("/proc/net/if_inet6") as f:
            v6 = {str(ipaddress.IPv6Address(bytes.fromhex(line.split()[0]))) for line in f if line.strip()}
        assert v6 <= set(addrs)


def test_program_name(monkeypatch):
    from rillet.server import portsfile
    for argv0, name in (("/usr/local/bin/nats-server", "nats-server"), ("/venv/bin/rillet-server", "rillet-server"),
                        ("/src/rillet/server/__main__.py", "nats-server"), ("", "nats-server")):
        monkeypatch.setattr("sys.argv", [argv0])
        assert portsfile.program_name() == name
