"""server_metadata (nats-server 2.12): string keys and values shown as ``metadata`` in /varz and in the server
info of system events ($SYS.REQ.SERVER.PING answers), compared with nats-server; a value that is not a string
refused at load."""
from __future__ import annotations

import asyncio
import json
import urllib.request

import nats
import pytest

from tests.difftarget import go_server, rillet_server
from tests.helpers import free_port

CONF = """
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http}
server_name: md
server_metadata { region: "eu-west", rack: "r7" }
system_account: SYS
accounts { SYS { users [{user: sys, password: sys}] } }
"""


async def test_server_metadata_as_nats_server():
    got = {}
    for kind, run in (("rillet", rillet_server), ("go", go_server)):
        port, http = free_port(), free_port()
        async with run(CONF.replace("{port}", str(port)).replace("{http}", str(http))):
            body = await asyncio.get_running_loop().run_in_executor(
                None, lambda: urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=3).read())
            varz = json.loads(body).get("metadata")
            nc = await nats.connect(f"nats://sys:sys@127.0.0.1:{port}")
            try:
                m = await nc.request("$SYS.REQ.SERVER.PING.STATSZ", b"", timeout=3)
                ping = json.loads(m.data)["server"].get("metadata")
            finally:
                await nc.close()
            got[kind] = (varz, ping)
    assert got["rillet"] == got["go"], got
    assert got["rillet"] == ({"region": "eu-west", "rack": "r7"},) * 2, got


def test_server_metadata_value_must_be_a_string(tmp_path):
    from rillet.config.errors import ConfigError
    from rillet.config.flags import parse_command_line
    p = tmp_path / "m.conf"
    p.write_text("server_metadata {\n  n: 5\n}\n")
    with pytest.raises(ConfigError, match=r"m\.conf:2:3: .*is int64, not string"):
        parse_command_line(["-c", str(p)])
