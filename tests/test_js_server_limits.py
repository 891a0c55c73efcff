"""The server's JetStream limits (``jetstream { limits { max_ack_pending, max_request_batch, duplicate_window,
batch { max_inflight_per_stream, max_inflight_total, max_msgs, timeout } } }``), compared with nats-server:
consumer defaults and refusals, the stream duplicate window, atomic batch size/in-flight/timeout, fast batches
in flight; ``max_ha_assets`` read and shown (what it does in a cluster: tests/test_jscluster_ha_assets.py)."""
from __future__ import annotations

import asyncio
import json

import pytest

from jsdiff import Raw, ServerPair, norm_json, run_both, same

CONF = """
listen: 127.0.0.1:-1
jetstream {
  store_dir: "{store}"
  limits {
    max_ack_pending: 10
    max_request_batch: 5
    default_max_consumers: 5
    max_ha_assets: 7
    duplicate_window: "1m"
    batch { max_inflight_per_stream: 1, max_inflight_total: 10, max_msgs: 3, timeout: "500ms" }
  }
}
"""


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


def _err(ans: dict) -> dict | None:
    return ans.get("error")


async def test_server_limits_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []
        try:
            # the stream duplicate window: above the limit refused, the default capped at it
            ans = await r.api("$JS.API.STREAM.CREATE.DW", {"name": "DW", "subjects": ["dw"],
                                                            "duplicate_window": 120_000_000_000})
            out.append(("dup window above", _err(ans)))
            ans = await r.api("$JS.API.STREAM.CREATE.DW", {"name": "DW", "subjects": ["dw"]})
            out.append(("dup window default", _err(ans), ans.get("config", {}).get("duplicate_window")))
            # consumers: defaults from the limits, values above them refused
            for name, cfg in (("P", {}), ("PB", {"max_batch": 6}), ("PA", {"max_ack_pending": 20}),
                              ("PD", {"deliver_subject": "dlv"}), ("PO", {"max_batch": 5, "max_ack_pending": 10})):
                ans = await r.api(f"$JS.API.CONSUMER.CREATE.DW.{name}", {"stream_name": "DW", "config": {
                    "durable_name": name, "ack_policy": "explicit", **cfg}})
                c = ans.get("config", {})
                out.append(("consumer " + name, _err(ans), c.get("max_batch"), c.get("max_ack_pending")))
            ans = await r.api("$JS.API.CONSUMER.CREATE.DW.P", {
                "stream_name": "DW", "config": {"durable_name": "P", "ack_policy": "explicit", "max_ack_pending": 11},
                "action": "update"})
            out.append(("consumer update above", _err(ans)))
            # default_max_consumers (2.15): a stream without max_consumers takes it (3 made above: 5 allowed)
            for name in ("M1", "M2", "M3"):
                ans = await r.api(f"$JS.API.CONSUMER.CREATE.DW.{name}", {"stream_name": "DW", "config": {
                    "durable_name": name, "ack_policy": "explicit"}})
                out.append(("consumer " + name, _err(ans)))
            ans = await r.api("$JS.API.STREAM.CREATE.MC", {"name": "MC", "subjects": ["mc"], "max_consumers": 8})
            for i in range(8):
                ans = await r.api(f"$JS.API.CONSUMER.CREATE.MC.C{i}", {"stream_name": "MC", "config": {
                    "durable_name": f"C{i}", "ack_policy": "explicit"}})
            out.append(("stream max_consumers over the default", _err(ans)))

            # atomic batches: at most 3 messages, one in flight per stream, 500 ms between messages
            ans = await r.api("$JS.API.STREAM.CREATE.AB", {"name": "AB", "subjects": ["ab"], "allow_atomic": True})
            assert "error" not in ans, ans

            async def batch(bid: str, seq: int, commit: bool = False) -> list:
                h = f"NATS/1.0\r\nNats-Batch-Id: {bid}\r\nNats-Batch-Sequence: {seq}\r\n"
                if commit:
                    h += "Nats-Batch-Commit: 1\r\n"
                ans = await r.request("ab", f"{bid}{seq}", hdr=(h + "\r\n").encode())
                return [a if a == "<timeout>" else (a[0], norm_json(json.loads(a[1])) if a[1] else b"")
                        for a in ans]

            for seq in range(1, 5):
                out.append(("atomic A", seq, await batch("A", seq)))
            out.append(("atomic B 1", await batch("B", 1)))
            out.append(("atomic C 1 (B in flight)", await batch("C", 1)))
            out.append(("atomic B 2", await batch("B", 2)))
            await asyncio.sleep(0.8)  # past the 500 ms timeout: B is gone
            out.append(("atomic B 3 after the timeout", await batch("B", 3, commit=True)))
            out.append(("atomic D", await batch("D", 1), await batch("D", 2), await batch("D", 3, commit=True)))
            out.append(("atomic E too large late", await batch("E", 5)))
            info = await r.api("$JS.API.STREAM.INFO.AB")
            out.append(("atomic stored", info["state"]["messages"]))

            # fast batches: one in flight per stream
            ans = await r.api("$JS.API.STREAM.CREATE.FB", {"name": "FB", "subjects": ["fb"], "allow_batched": True})
            assert "error" not in ans, ans
            for label, reply in (("fast X 1", "_R.fb.X.2.fail.1.0.$FI"), ("fast Y 1 (X in flight)",
                                                                          "_R.fb.Y.2.fail.1.0.$FI"),
                                 ("fast X 2 commit", "_R.fb.X.2.fail.2.2.$FI")):
                r.rc.pub("fb", b"x", reply=reply)
                m = await r.rc.read_msg(2.0)
                out.append((label, m.subject.split(".")[2], norm_json(json.loads(m.payload))))
            await asyncio.sleep(0.8)
            r.rc.pub("fb", b"x", reply="_R.fb.Z.2.fail.2.1.$FI")  # no such batch (any more)
            m = await r.rc.read_msg(2.0)
            out.append(("fast unknown", norm_json(json.loads(m.payload))))
        finally:
            await r.close()
        return out

    res = same(await run_both(pair, scenario))
    got = {o[0]: o[1:] for o in res}
    assert got["dup window above"][0]["err_code"] == 10052, got
    assert got["dup window default"] == (None, 60_000_000_000)
    assert got["consumer P"] == (None, 5, 10) and got["consumer PA"][0] is not None, got
    assert got["atomic A"] and [o for o in res if o[0] == "atomic A"][3][2][0][1]["error"]["err_code"] == 10199
    assert got["atomic C 1 (B in flight)"][0][0][1]["error"]["err_code"] == 10210, got
    assert got["atomic stored"] == (3,), got
    assert got["fast Y 1 (X in flight)"][1]["error"]["err_code"] == 10211, got
    assert got["consumer M2"] == (None,) and got["consumer M3"][0]["err_code"] == 10026, got
    assert got["stream max_consumers over the default"] == (None,), got


def test_max_ha_assets_read_at_load(tmp_path):
    from rillet.config.errors import ConfigError
    from rillet.config.flags import parse_command_line
    p = tmp_path / "s.conf"
    p.write_text("jetstream {\n  limits {\n    max_ha_assets: 3\n  }\n}\n")
    opts = parse_command_line(["-c", str(p)]).options
    assert opts.jetstream.extra["limits"] == {"max_ha_assets": 3}
    p.write_text("jetstream {\n  limits {\n    max_ha_assets: many\n  }\n}\n")
    with pytest.raises(ConfigError) as e:
        parse_command_line(["-c", str(p)])
    assert f"{p}:3:5" in str(e.value) and "max_ha_assets" in str(e.value), str(e.value)


async def test_limits_in_varz_as_nats_server(tmp_path):
    """/varz jetstream.limits: the limits as nats-server shows them (names, nanosecond durations)."""
    import urllib.request

    from tests.difftarget import go_server, rillet_server
    from tests.helpers import free_port

    async def varz(port: int) -> dict:
        body = await asyncio.get_running_loop().run_in_executor(
            None, lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=3).read())
        return json.loads(body)["jetstream"]["limits"]

    got = {}
    for kind, run in (("rillet", rillet_server), ("go", go_server)):
        port = free_port()
        conf = CONF.replace("{store}", str(tmp_path / kind)) + f"http: 127.0.0.1:{port}\n"
        async with run(conf):
            got[kind] = await varz(port)
    assert got["rillet"] == got["go"], got
    assert got["rillet"]["max_batch_timeout"] == 500_000_000 and got["rillet"]["max_ack_pending"] == 10, got
    assert got["rillet"]["max_ha_assets"] == 7, got
