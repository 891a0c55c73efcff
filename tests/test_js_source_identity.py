"""Recreated-origin detection in sourcing (nats-server 2.15, ``Nats-Stream-Identity``).

A stream's identity is 8 characters of 0-9A-Za-z from the SHA-256 of its creation time (as its info shows it).
A sourcing stream asks for its source consumer with ``Nats-Required-Api-Level: 5`` and the identity it last
saw; the origin refuses a mismatch (10225, ``consumer's stream identity does not match: <identity>``) and
answers a match with the identity in a header; sourced messages carry it as the sixth field of
``Nats-Stream-Source``. An origin deleted and made again is so sourced again from its start, where 2.14 (and
Rillet before) skipped its messages until its sequences passed the last one taken.

Side by side with nats-server 2.15.1 (tests/jsdiff.py's ServerPair): the same scenario on both, transcripts
compared.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time

import nats
import pytest

from jsdiff import ServerPair, run_both, same

CONF = 'listen: 127.0.0.1:-1\njetstream { store_dir: "{store}" }\n'
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def identity(created: str) -> str:
    return "".join(DIGITS[b % 62] for b in hashlib.sha256(created.encode()).digest()[:8])


async def api(nc, subject: str, body: dict | None = None, headers: dict | None = None) -> tuple[dict, dict]:
    m = await nc.request(subject, json.dumps(body or {}).encode(), timeout=10, headers=headers)
    return json.loads(m.data), dict(m.headers or {})


async def wait_count(nc, name: str, n: int, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while True:
        info, _ = await api(nc, f"$JS.API.STREAM.INFO.{name}")
        got = info.get("state", {}).get("messages")
        if got == n:
            return
        assert time.monotonic() < end, f"{name} has {got} messages, not {n}: {info}"
        await asyncio.sleep(0.2)


async def sourced(nc, seq: int) -> tuple[str, list[str]]:
    r, _ = await api(nc, "$JS.API.STREAM.MSG.GET.SRC", {"seq": seq})
    m = r["message"]
    hdr = base64.b64decode(m.get("hdrs") or "").decode()
    line = [ln for ln in hdr.split("\r\n") if ln.startswith("Nats-Stream-Source:")][0]
    return base64.b64decode(m["data"]).decode(), line.split(":", 1)[1].strip().split(" ")


@pytest.fixture
def pair():
    p = ServerPair(CONF)
    yield p
    p.stop()


async def test_recreated_origin_is_sourced_again_from_its_start(pair):
    async def scenario(kind: str, url: str) -> list:
        nc = await nats.connect(url)
        out: list = []
        await api(nc, "$JS.API.STREAM.CREATE.ORI", {"name": "ORI", "subjects": ["ori.>"]})
        for i in range(5):
            await api(nc, "ori.a", {"old": i})
        await api(nc, "$JS.API.STREAM.CREATE.SRC", {"name": "SRC", "sources": [{"name": "ORI"}]})
        await wait_count(nc, "SRC", 5)
        info, _ = await api(nc, "$JS.API.STREAM.INFO.ORI")
        id1 = identity(info["created"])
        data, fields = await sourced(nc, 5)
        out.append((data, fields[:5], fields[5:] == [id1]))

        # the origin's side: a direct consumer naming another identity is refused; the answer names the right one
        cfg = {"stream_name": "ORI", "config": {"name": "PROBE", "deliver_subject": "probe.in", "direct": True,
                                                 "ack_policy": "none", "max_deliver": 1,
                                                 "inactive_threshold": 2_000_000_000}}
        r, h = await api(nc, "$JS.API.CONSUMER.CREATE.ORI.PROBE", cfg, {"Nats-Stream-Identity": "bogus123"})
        err = dict(r.get("error") or {})
        if err.get("description") == f"consumer's stream identity does not match: {id1}":
            err["description"] = "consumer's stream identity does not match: <identity>"
        out.append((err, h.get("Nats-Stream-Identity")))
        r, h = await api(nc, "$JS.API.CONSUMER.CREATE.ORI.PROBE", cfg, {"Nats-Stream-Identity": id1})
        out.append(("error" in r, h.get("Nats-Stream-Identity") == id1))
        r, h = await api(nc, "$JS.API.CONSUMER.CREATE.ORI", {"stream_name": "ORI", "config": {
            "ack_policy": "none", "deliver_subject": "plain.in"}}, {"Nats-Stream-Identity": "bogus123"})
        out.append(("error" in r, "Nats-Stream-Identity" in h))  # (not a direct consumer: not checked)
        # a reset naming an identity (a durable source's) is never refused for it, and answered with it
        await api(nc, "$JS.API.CONSUMER.CREATE.ORI.DUR", {"stream_name": "ORI", "config": {
            "durable_name": "DUR", "ack_policy": "explicit"}})
        r, h = await api(nc, "$JS.API.CONSUMER.RESET.ORI.DUR", None, {"Nats-Stream-Identity": "bogus123"})
        out.append((r.get("error"), r.get("reset_seq"), h.get("Nats-Stream-Identity") == id1))
        r, h = await api(nc, "$JS.API.CONSUMER.RESET.ORI.DUR", None)
        out.append((r.get("error"), "Nats-Stream-Identity" in h))

        # the origin deleted and made again: its new messages (sequences 1-3, below the 5 taken) come
        await api(nc, "$JS.API.STREAM.DELETE.ORI")
        await api(nc, "$JS.API.STREAM.CREATE.ORI", {"name": "ORI", "subjects": ["ori.>"]})
        for i in range(3):
            await api(nc, "ori.b", {"new": i})
        await wait_count(nc, "SRC", 8)
        info, _ = await api(nc, "$JS.API.STREAM.INFO.ORI")
        id2 = identity(info["created"])
        assert id2 != id1
        for seq in (6, 7, 8):
            data, fields = await sourced(nc, seq)
            out.append((data, fields[:5], fields[5:] == [id2]))
        # nothing more comes (the old messages are not taken again)
        await asyncio.sleep(2)
        info, _ = await api(nc, "$JS.API.STREAM.INFO.SRC")
        out.append(info["state"]["messages"])
        await nc.close()
        return out

    got = same(await run_both(pair, scenario, timeout=150))
    assert got[0] == ('{"old": 4}', ["ORI", "5", ">", ">", "ori.a"], True)
    assert got[1] == ({"code": 400, "err_code": 10225,
                       "description": "consumer's stream identity does not match: <identity>"}, None)
    assert got[2] == (False, True)
    assert got[3] == (False, False)
    assert got[4] == (None, 1, True) and got[5] == (None, False)
    assert got[6:9] == [(f'{{"new": {i}}}', ["ORI", str(i + 1), ">", ">", "ori.b"], True) for i in range(3)]
    assert got[9] == 8


async def _restart_scenario(tmp, command) -> list:
    from helpers import ServerProcess
    conf = tmp / "s.conf"
    conf.write_text(f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{tmp / "js"}" }}\n')
    loop = asyncio.get_running_loop()
    proc = ServerProcess("-c", str(conf), command=command)
    out: list = []
    try:
        await loop.run_in_executor(None, proc.wait_ready)
        nc = await nats.connect(proc.client_url)
        await api(nc, "$JS.API.STREAM.CREATE.ORI", {"name": "ORI", "subjects": ["ori.>"]})
        for i in range(4):
            await api(nc, "ori.a", {"old": i})
        await api(nc, "$JS.API.STREAM.CREATE.SRC", {"name": "SRC", "sources": [{"name": "ORI"}]})
        await wait_count(nc, "SRC", 4)
        r, _ = await api(nc, "$JS.API.STREAM.PURGE.SRC")
        out.append(r.get("purged"))
        await asyncio.sleep(1.5)
        await nc.close()
        proc.stop()
        proc = ServerProcess("-c", str(conf), command=command)
        await loop.run_in_executor(None, proc.wait_ready)
        nc = await nats.connect(proc.client_url)
        # the purged stream remembers where it was (the source index): only the new message comes
        await api(nc, "ori.a", {"old": 4})
        await wait_count(nc, "SRC", 1)
        await asyncio.sleep(2)
        info, _ = await api(nc, "$JS.API.STREAM.INFO.SRC")
        out.append(info["state"]["messages"])
        data, fields = await sourced(nc, info["state"]["last_seq"])
        out.append((data, fields[1]))
        # an origin made again after the restart: detected from the identity the index kept
        await api(nc, "$JS.API.STREAM.DELETE.ORI")
        await api(nc, "$JS.API.STREAM.CREATE.ORI", {"name": "ORI", "subjects": ["ori.>"]})
        await api(nc, "ori.c", {"new": 0})
        await wait_count(nc, "SRC", 2)
        info, _ = await api(nc, "$JS.API.STREAM.INFO.SRC")
        data, fields = await sourced(nc, info["state"]["last_seq"])
        out.append((data, fields[1]))
        await nc.close()
    finally:
        proc.stop()
    return out


async def test_source_index_survives_a_purge_and_a_restart(tmp_path):
    """A sourcing stream purged, then its server restarted: nats-server 2.15's source index keeps each
    source's position (and its origin's identity), so the origin is not sourced again from its start."""
    from jsdiff import GO_BINARY
    (tmp_path / "r").mkdir()
    got = await asyncio.wait_for(_restart_scenario(tmp_path / "r", None), 150)
    assert got == [4, 1, ('{"old": 4}', "5"), ('{"new": 0}', "1")], got
    if GO_BINARY:
        (tmp_path / "g").mkdir()
        go = await asyncio.wait_for(_restart_scenario(tmp_path / "g", [GO_BINARY]), 150)
        assert go == got, (go, got)


def test_parse_source_header():
    from rillet.jetstream.sources import parse_source_header
    assert parse_source_header("ORI 12 > > ori.a AbCd1234") == ("ORI", 12, "AbCd1234")
    assert parse_source_header("ORI 12 > > ori.a") == ("ORI", 12, "")
    assert parse_source_header("ORI 3") == ("ORI", 3, "")
    assert parse_source_header("ORI x") is None


def test_index_names_as_nats_server():
    """The first field of Nats-Stream-Source is nats-server's index name: ``<origin>``, ``:<getHash(api)>``
    for an external origin, ``:C=<getHash(consumer name)>`` for a durable consumer (composeIName); the
    hex hash Rillet wrote before for an external origin is still read back (``legacy_tag``)."""
    from types import SimpleNamespace

    from rillet.jetstream.configtypes import ExternalStream, StreamConsumerSource, StreamSource
    from rillet.jetstream.sources import Origin
    owner = SimpleNamespace(stream=None)
    ext = Origin(owner, StreamSource(name="ORI", external=ExternalStream(api="$JS.hub.API", deliver="")), False)
    assert ext.header_tag == (f"ORI:{identity('$JS.hub.API')}", ">", ">")
    assert ext.legacy_tag == "ORI:" + hashlib.sha256(b"$JS.hub.API").hexdigest()[:8]
    dur = Origin(owner, StreamSource(name="WQ", filter_subject="wq.a",
                                     consumer=StreamConsumerSource(name="SRC", deliver_subject="d.x")), False)
    assert dur.header_tag == (f"WQ:C={identity('SRC')}", "wq.a", ">") and dur.legacy_tag == "WQ"
