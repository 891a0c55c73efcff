"""Message counters (allow_msg_counter, ADR-49): the same publishes to Rillet and to nats-server, answers
compared (PubAcks with the new totals, stored bodies and headers, errors), plus counters through sources."""
from __future__ import annotations

import asyncio
import json

import pytest

from jsdiff import Raw, ServerPair, norm_json, run_both, same

CONF = """
listen: 127.0.0.1:-1
jetstream { store_dir: "{store}" }
"""


@pytest.fixture(scope="module")
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


def _h(*pairs: tuple[str, str]) -> bytes:
    return ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in pairs) + "\r\n").encode()


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_counter_increments_and_errors_like_nats_server(pair, storage):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []

        async def api(label: str, subject: str, body=b"") -> dict:
            ans = await r.api(subject, body)
            keep = {k: v for k, v in ans.items() if k in ("error", "did_create")}
            if "config" in ans:
                keep["config"] = {k: ans["config"].get(k) for k in ("allow_msg_counter", "metadata")}
                keep["config"]["metadata"] = {k: v for k, v in (keep["config"]["metadata"] or {}).items()
                                              if k == "_nats.req.level"}
            out.append((label, norm_json(keep)))
            return ans

        async def pub(label: str, subject: str, payload: str = "", hdr: bytes | None = None) -> None:
            out.append((label, await r.publish(subject, payload, hdr=hdr)))

        try:
            for n in ("CNT", "PLAIN"):
                await r.api(f"$JS.API.STREAM.DELETE.{n}")
            await api("counter with discard new", "$JS.API.STREAM.CREATE.CNT",
                      {"name": "CNT", "subjects": ["c.>"], "storage": storage, "allow_msg_counter": True,
                       "discard": "new"})
            await api("counter with ttl", "$JS.API.STREAM.CREATE.CNT",
                      {"name": "CNT", "subjects": ["c.>"], "storage": storage, "allow_msg_counter": True,
                       "allow_msg_ttl": True})
            await api("counter with interest", "$JS.API.STREAM.CREATE.CNT",
                      {"name": "CNT", "subjects": ["c.>"], "storage": storage, "allow_msg_counter": True,
                       "retention": "interest"})
            await api("create counter", "$JS.API.STREAM.CREATE.CNT",
                      {"name": "CNT", "subjects": ["c.>"], "storage": storage, "allow_msg_counter": True,
                       "allow_direct": True})
            await api("create plain", "$JS.API.STREAM.CREATE.PLAIN",
                      {"name": "PLAIN", "subjects": ["p.>"], "storage": storage})
            await api("update counter off", "$JS.API.STREAM.UPDATE.CNT",
                      {"name": "CNT", "subjects": ["c.>"], "storage": storage, "allow_direct": True})
            await pub("first", "c.a", hdr=_h(("Nats-Incr", "1")))
            await pub("plus 41", "c.a", hdr=_h(("Nats-Incr", "+41")))
            await pub("minus 50", "c.a", hdr=_h(("Nats-Incr", "-50")))
            await pub("other subject", "c.b", hdr=_h(("Nats-Incr", "5")))
            await pub("big", "c.b", hdr=_h(("Nats-Incr", "123456789012345678901234567890")))
            await pub("zero", "c.b", hdr=_h(("Nats-Incr", "0")))
            await pub("with msg id", "c.a", hdr=_h(("Nats-Incr", "2"), ("Nats-Msg-Id", "m1")))
            await pub("duplicate msg id", "c.a", hdr=_h(("Nats-Incr", "2"), ("Nats-Msg-Id", "m1")))
            await pub("missing", "c.a", "")
            await pub("missing with headers", "c.a", "", hdr=_h(("X", "y")))
            await pub("payload", "c.a", "x", hdr=_h(("Nats-Incr", "1")))
            for bad in ("abc", "1.5", "1_000", " 3", "--1", "0x10"):
                await pub(f"invalid {bad!r}", "c.a", hdr=_h(("Nats-Incr", bad)))
            for name, value in (("Nats-Rollup", "sub"), ("Nats-Expected-Stream", "CNT"),
                                ("Nats-Expected-Last-Sequence", "1"), ("Nats-Expected-Last-Msg-Id", "m1"),
                                ("Nats-Expected-Last-Subject-Sequence", "1")):
                await pub(f"with {name}", "c.a", hdr=_h(("Nats-Incr", "1"), (name, value)))
            await pub("ttl", "c.a", hdr=_h(("Nats-Incr", "1"), ("Nats-TTL", "10s")))
            await pub("plain stream incr", "p.a", hdr=_h(("Nats-Incr", "1")))
            await pub("plain stream invalid incr", "p.a", hdr=_h(("Nats-Incr", "x")))
            await pub("plain stream message", "p.a", "hello")
            await pub("source header on a direct publish", "p.a", "x", hdr=_h(("Nats-Stream-Source", "X 1 > > p.a")))
            # the stored messages: bodies {"val":"..."} and the headers kept
            for seq in range(1, 9):
                ans = await r.request("$JS.API.DIRECT.GET.CNT", {"seq": seq})
                out.append((f"stored {seq}", ans[0]))
            await api("info", "$JS.API.STREAM.INFO.CNT")
        finally:
            await r.close()
        return out

    res = await run_both(pair, scenario)
    out = same(res)
    d = dict(out)
    assert d["first"]["val"] == "1" and d["plus 41"]["val"] == "42" and d["minus 50"]["val"] == "-8"
    assert d["big"]["val"] == "123456789012345678901234567895"
    assert d["missing"]["error"]["err_code"] == 10169
    assert d["payload"]["error"]["err_code"] == 10170
    assert d["invalid 'abc'"]["error"]["err_code"] == 10171
    assert d["plain stream incr"]["error"]["err_code"] == 10168


SRC_CONF = CONF


async def test_counters_through_sources_like_nats_server(pair):
    """Two origin counter streams sourced into an aggregate counter stream: the aggregate's totals and its
    Nats-Counter-Sources header, compared with nats-server."""
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []
        try:
            for n in ("O1", "O2", "AGG"):
                await r.api(f"$JS.API.STREAM.DELETE.{n}")
            for n in ("O1", "O2"):
                ans = await r.api(f"$JS.API.STREAM.CREATE.{n}", {"name": n, "subjects": [f"{n.lower()}.>"],
                                                                 "allow_msg_counter": True, "storage": "memory"})
                assert "error" not in ans, ans
            ans = await r.api("$JS.API.STREAM.CREATE.AGG", {
                "name": "AGG", "allow_msg_counter": True, "storage": "memory", "allow_direct": True,
                "subjects": ["agg.>"],
                "sources": [{"name": "O1", "subject_transforms": [{"src": "o1.>", "dest": "agg.>"}]},
                            {"name": "O2", "subject_transforms": [{"src": "o2.>", "dest": "agg.>"}]}]})
            assert "error" not in ans, ans
            out.append(await r.publish("o1.x", hdr=_h(("Nats-Incr", "10"))))
            out.append(await r.publish("o2.x", hdr=_h(("Nats-Incr", "5"))))
            out.append(await r.publish("o1.x", hdr=_h(("Nats-Incr", "-3"))))

            async def wait_for(n: int) -> None:
                for _ in range(200):
                    info = await r.api("$JS.API.STREAM.INFO.AGG")
                    if info["state"]["messages"] >= n:
                        return
                    await asyncio.sleep(0.025)
                raise AssertionError(f"AGG holds {info['state']['messages']} messages, not {n}")

            await wait_for(3)  # the sourced ones first, then a direct increment on the aggregate
            out.append(await r.publish("agg.x", hdr=_h(("Nats-Incr", "100"))))
            ans = await r.request("$JS.API.DIRECT.GET.AGG", {"last_by_subj": "agg.x"})
            hdr, body = ans[0]
            lines = {ln.split(": ", 1)[0]: ln.split(": ", 1)[1] for ln in (hdr or "").split("\r\n")[1:] if ": " in ln}
            out.append(("last", json.loads(body), json.loads(lines["Nats-Counter-Sources"]),
                        lines.get("Nats-Incr")))
        finally:
            await r.close()
        return out

    out = same(await run_both(pair, scenario))
    assert out[-1][1] == {"val": "112"}
    assert out[-1][2] == {"O1": {"o1.x": "7"}, "O2": {"o2.x": "5"}} and out[-1][3] == "100"
