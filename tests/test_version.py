"""The version Rillet reports is nats-server 2.15.1's: INFO (version, proto, api_lvl), $JS.API.INFO's api level,
and the _nats.* metadata stamped on stream and consumer configs, compared with the Go server."""
from __future__ import annotations

import json

import pytest

from jsdiff import Raw, ServerPair, run_both, same

CONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
"""


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


async def test_version_and_api_level_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> dict:
        r = await Raw.open(url)
        try:
            info = r.rc.info
            out = {k: info.get(k) for k in ("version", "proto", "api_lvl", "headers", "jetstream")}
            out["api"] = (await r.api("$JS.API.INFO")).get("api", {}).get("level")
            await r.api("$JS.API.STREAM.DELETE.VER")
            s = await r.api("$JS.API.STREAM.CREATE.VER", {"name": "VER", "subjects": ["ver"], "storage": "memory",
                                                          "allow_msg_counter": True})
            out["stream"] = s["config"]["metadata"]
            c = await r.api("$JS.API.CONSUMER.CREATE.VER.D", {"stream_name": "VER", "config": {
                "durable_name": "D", "priority_policy": "overflow", "priority_groups": ["g"]}})
            out["consumer"] = c["config"]["metadata"]
            out["too high"] = await r.request("$JS.API.STREAM.INFO.VER",
                                              hdr=b"NATS/1.0\r\nNats-Required-Api-Level: 6\r\n\r\n")
            out["account too high"] = await r.request("$JS.API.INFO",
                                                      hdr=b"NATS/1.0\r\nNats-Required-Api-Level: 6\r\n\r\n")
            out["consumer create too high"] = await r.request(
                "$JS.API.CONSUMER.CREATE.VER.E", b'{"stream_name":"VER","config":{"durable_name":"E"}}',
                hdr=b"NATS/1.0\r\nNats-Required-Api-Level: x\r\n\r\n")
            out["highest"] = "error" in (await r.request(
                "$JS.API.STREAM.INFO.VER", hdr=b"NATS/1.0\r\nNats-Required-Api-Level: 5\r\n\r\n"))[0][1].decode()
        finally:
            await r.close()
        for k in ("too high", "account too high", "consumer create too high"):
            out[k] = json.loads(out[k][0][1])  # compared as JSON (key order is not nats-server's)
        return out

    out = same(await run_both(pair, scenario))
    assert out["version"] == "2.15.1" and out["api_lvl"] == 5 and out["api"] == 5
    assert out["stream"]["_nats.ver"] == "2.15.1" and out["stream"]["_nats.req.level"] == "2"
