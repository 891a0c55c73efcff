"""Consumer priority groups (ADR-42): overflow, pinned_client (pin ids, 423s, unpin, pinned ttl) and
prioritized pull requests, sent to Rillet and to nats-server and compared (pin ids and times normalized)."""
from __future__ import annotations

import asyncio
import json
import re

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


_PIN = re.compile(r"(Nats-Pin-Id: )(\w+)")
MS = 1_000_000


def _norm(ans: list, pins: dict) -> list:
    out = []
    for a in ans:
        if isinstance(a, str):
            out.append(a)
            continue
        hdr, data = a
        if hdr:
            def sub(m: re.Match) -> str:
                return m.group(1) + pins.setdefault(m.group(2), f"<pin{len(pins)}>")
            hdr = _PIN.sub(sub, hdr)
        out.append((hdr, data.decode()))
    return out


async def pull(r: Raw, subject: str, body, want: int = 1, timeout: float = 1.0) -> list:
    """A pull request on its own inbox subscription: the messages (subject, headers, payload) and status
    answers it receives, until a status, ``want`` messages, or ``timeout`` (recorded as "<timeout>")."""
    from jsdiff import norm_hdr
    r.n += 1
    inbox, sid = f"_P.{r.n}", f"p{r.n}"
    r.rc.sub(inbox, sid)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    r.rc.pub(subject, body, reply=inbox)
    out: list = []
    got = 0
    while True:
        try:
            m = await r.rc.read_msg(timeout)
        except AssertionError:
            out.append("<timeout>")
            break
        if m.sid != sid:
            continue
        status = (m.headers or b"").startswith(b"NATS/1.0 ")
        out.append((norm_hdr(m.headers), (m.subject + " " if not status else "") .encode() + m.payload))
        if status:
            break
        got += 1
        if got >= want:
            break
    r.rc.send(f"UNSUB {sid}\r\n".encode())
    return out


def _pin_of(ans: list) -> str:
    for a in ans:
        if not isinstance(a, str) and a[0]:
            m = _PIN.search(a[0])
            if m:
                return m.group(2)
    return ""


async def _setup(r: Raw, name: str, cons: dict, n: int = 5) -> None:
    await r.api(f"$JS.API.STREAM.DELETE.{name}")
    ans = await r.api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"],
                                                        "storage": "memory"})
    assert "error" not in ans, ans
    for i in range(n):
        await r.publish(f"{name.lower()}.{i}", f"m{i}")
    ans = await r.api(f"$JS.API.CONSUMER.CREATE.{name}.C", {"stream_name": name, "config": {
        "durable_name": "C", "ack_policy": "explicit", **cons}})
    assert "error" not in ans, ans


def _info(ans: dict, pins: dict) -> dict:
    keep = {k: ans.get(k) for k in ("error", "num_waiting", "num_ack_pending", "num_pending", "priority_groups")
            if k in ans}
    for g in keep.get("priority_groups") or []:
        if "pinned_client_id" in g:
            g["pinned_client_id"] = pins.setdefault(g["pinned_client_id"], f"<pin{len(pins)}>")
        g["pinned_ts"] = "<zero>" if g.get("pinned_ts", "").startswith("0001") else "<ts>"
    return norm_json(keep)


async def test_config_checks_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out = []
        try:
            await _setup(r, "PCFG", {}, 0)
            for label, cfg in (
                ("push with groups", {"deliver_subject": "d", "priority_policy": "overflow",
                                      "priority_groups": ["A"]}),
                ("policy without groups", {"priority_policy": "pinned_client"}),
                ("groups without policy", {"priority_groups": ["A"]}),
                ("ttl without policy", {"priority_timeout": 1000 * MS}),
                ("bad group name", {"priority_policy": "overflow", "priority_groups": ["a.b"]}),
                ("empty group name", {"priority_policy": "overflow", "priority_groups": [""]}),
                ("unknown policy", {"priority_policy": "nope", "priority_groups": ["A"]}),
                ("pinned default ttl", {"priority_policy": "pinned_client", "priority_groups": ["A"]}),
                ("prioritized", {"priority_policy": "prioritized", "priority_groups": ["A", "B"]}),
            ):
                ans = await r.api("$JS.API.CONSUMER.CREATE.PCFG", {"stream_name": "PCFG", "config": {
                    "ack_policy": "explicit", **cfg}})
                c = ans.get("config") or {}
                out.append((label, ans.get("error"), {k: c.get(k) for k in (
                    "priority_policy", "priority_groups", "priority_timeout")},
                    (c.get("metadata") or {}).get("_nats.req.level")))
        finally:
            await r.close()
        return out

    same(await run_both(pair, scenario))


async def test_overflow_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []
        pins: dict = {}
        try:
            await _setup(r, "POV", {"priority_policy": "overflow", "priority_groups": ["A"]})
            N = "$JS.API.CONSUMER.MSG.NEXT.POV.C"
            for label, body in (
                ("min_pending not reached", {"batch": 1, "expires": 300 * MS, "group": "A", "min_pending": 10}),
                ("min_pending reached", {"batch": 1, "expires": 300 * MS, "group": "A", "min_pending": 5}),
                ("min_ack_pending not reached", {"batch": 1, "expires": 300 * MS, "group": "A",
                                                 "min_ack_pending": 3}),
                ("no thresholds", {"batch": 2, "expires": 300 * MS, "group": "A"}),
                ("min_ack_pending reached", {"batch": 1, "expires": 300 * MS, "group": "A",
                                             "min_ack_pending": 3}),
                ("missing group", {"batch": 1, "expires": 300 * MS}),
                ("invalid group", {"batch": 1, "expires": 300 * MS, "group": "B"}),
                ("id on overflow", {"batch": 1, "expires": 300 * MS, "group": "A", "id": "x"}),
                ("priority out of range", {"batch": 1, "expires": 300 * MS, "group": "A", "priority": 10}),
                ("group not a string", {"batch": 1, "expires": 300 * MS, "group": 5}),
                ("plain number body", b"1"),
            ):
                out.append((label, _norm(await pull(r, N, body, want=body.get('batch', 1) if isinstance(body, dict) else 1), pins)))
            out.append(("info", _info(await r.api("$JS.API.CONSUMER.INFO.POV.C"), pins)))
        finally:
            await r.close()
        return out

    same(await run_both(pair, scenario))


async def test_pinned_client_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []
        pins: dict = {}
        try:
            await _setup(r, "PPIN", {"priority_policy": "pinned_client", "priority_groups": ["A"],
                                     "priority_timeout": 600 * MS})
            N = "$JS.API.CONSUMER.MSG.NEXT.PPIN.C"
            out.append(("info before", _info(await r.api("$JS.API.CONSUMER.INFO.PPIN.C"), pins)))
            first = await pull(r, N, {"batch": 1, "expires": 300 * MS, "group": "A"})
            pin = _pin_of(first)
            out.append(("first gets pinned", _norm(first, pins)))
            out.append(("info pinned", _info(await r.api("$JS.API.CONSUMER.INFO.PPIN.C"), pins)))
            out.append(("other client waits", _norm(await pull(
                r, N, {"batch": 1, "expires": 200 * MS, "group": "A"}), pins)))
            out.append(("wrong id", _norm(await pull(
                r, N, {"batch": 1, "expires": 200 * MS, "group": "A", "id": "nope"}), pins)))
            out.append(("pinned id", _norm(await pull(
                r, N, {"batch": 1, "expires": 200 * MS, "group": "A", "id": pin}), pins)))
            out.append(("min_pending on pinned", _norm(await pull(
                r, N, {"batch": 1, "expires": 200 * MS, "group": "A", "min_pending": 1}), pins)))
            for label, body in (("unpin empty", b""), ("unpin no group", {}), ("unpin bad name", {"group": "a.b"}),
                                ("unpin unknown group", {"group": "B"}), ("unpin", {"group": "A"})):
                ans = await r.api("$JS.API.CONSUMER.UNPIN.PPIN.C", body)
                out.append((label, ans))
            ans = await r.api("$JS.API.CONSUMER.UNPIN.PPIN.NOPE", {"group": "A"})
            out.append(("unpin unknown consumer", ans))
            out.append(("info unpinned", _info(await r.api("$JS.API.CONSUMER.INFO.PPIN.C"), pins)))
            out.append(("old id after unpin", _norm(await pull(
                r, N, {"batch": 1, "expires": 200 * MS, "group": "A", "id": pin}), pins)))
            second = await pull(r, N, {"batch": 1, "expires": 300 * MS, "group": "A"})
            out.append(("new pin", _norm(second, pins)))
            out.append(("new pin differs", _pin_of(second) != pin and bool(_pin_of(second))))
            await asyncio.sleep(0.9)  # the pin lapses after priority_timeout without a request
            out.append(("info after ttl", _info(await r.api("$JS.API.CONSUMER.INFO.PPIN.C"), pins)))
            third = await pull(r, N, {"batch": 1, "expires": 300 * MS, "group": "A"})
            out.append(("pinned again", _norm(third, pins)))
        finally:
            await r.close()
        return out

    same(await run_both(pair, scenario))


async def test_prioritized_like_nats_server(pair):
    async def scenario(kind: str, url: str) -> list:
        r = await Raw.open(url)
        out: list = []
        try:
            await _setup(r, "PPRI", {"priority_policy": "prioritized", "priority_groups": ["A"]}, 0)
            N = "$JS.API.CONSUMER.MSG.NEXT.PPRI.C"
            # requests waiting with priorities 5, 1, 3 and 1 (in that order), each for one message
            sids = []
            for i, p in enumerate((5, 1, 3, 1)):
                r.rc.sub(f"_Q.{i}", f"q{i}")
                r.rc.pub(N, json.dumps({"batch": 1, "expires": 2000 * MS, "group": "A", "priority": p}).encode(),
                         reply=f"_Q.{i}")
                sids.append(f"q{i}")
            await r.rc.ping()
            from helpers import parse_stream
            got: dict = {s: [] for s in sids}
            for i in range(4):
                r.rc.pub(f"ppri.{i}", f"m{i}")
            for m in parse_stream(await r.rc.read_for(0.4)):
                if not isinstance(m, bytes) and m.sid in got:
                    got[m.sid].append(m.payload.decode())
            out.append([got[s] for s in sids])
        finally:
            await r.close()
        return out

    out = same(await run_both(pair, scenario))
    assert out[0] == [["m3"], ["m0"], ["m2"], ["m1"]]
