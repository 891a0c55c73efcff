"""Message schedules (allow_msg_schedules, nats-server 2.12) through nats-py: an @at schedule fires once into
its target and is purged, a repeating schedule moves on, the publish checks answer nats-server's errors,
and schedules survive a restart.  Error codes and produced headers were checked against nats-server 2.15.1."""
from __future__ import annotations

import asyncio
import base64
import datetime
import json
import time

import nats

from rillet.gocompat.gotime import format_time, zone_offset
from rillet.jetstream import schedules as S
from rillet.server import Options
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions


def js_opts(tmp_path) -> Options:
    return Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))


def at(secs: float) -> str:
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=secs)
    return "@at " + t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def api(nc, subject: str, body: dict | None = None) -> dict:
    msg = await nc.request(subject, json.dumps(body or {}).encode(), timeout=2)
    return json.loads(msg.data)


async def pub(nc, subject: str, headers: dict, data: bytes = b"payload") -> dict:
    msg = await nc.request(subject, data, headers=headers, timeout=2)
    return json.loads(msg.data)


async def create(nc, name: str, subjects: list[str], **kw) -> None:
    r = await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": subjects, **kw})
    assert "error" not in r, r


async def last(nc, stream: str, subject: str) -> tuple[int, dict, bytes] | None:
    r = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
    if "message" not in r:
        return None
    m = r["message"]
    raw = base64.b64decode(m.get("hdrs", "")).decode()
    hdrs = dict(line.split(": ", 1) for line in raw.split("\r\n")[1:] if line)
    return m["seq"], hdrs, base64.b64decode(m.get("data", ""))


async def wait_for(nc, stream: str, subject: str, timeout: float = 2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = await last(nc, stream, subject)
        if m is not None:
            return m
        await asyncio.sleep(0.05)
    return None


SCHED = {"allow_msg_schedules": True, "allow_rollup_hdrs": True}


async def test_at_schedule_fires_once_and_is_purged(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        await create(nc, "S", ["s.>"], **SCHED)
        r = await pub(nc, "s.sched", {"Nats-Schedule": at(0.3), "Nats-Schedule-Target": "s.out", "Foo": "bar",
                                      "Nats-Msg-Id": "m1"})
        assert r == {"stream": "S", "seq": 1}
        # stored as the schedule, with a subject rollup added
        seq, hdrs, _ = await last(nc, "S", "s.sched")
        assert seq == 1 and hdrs["Nats-Rollup"] == "sub"
        m = await wait_for(nc, "S", "s.out")
        assert m is not None
        seq, hdrs, data = m
        assert seq == 2 and data == b"payload"
        assert hdrs == {"Foo": "bar", "Nats-Scheduler": "s.sched", "Nats-Schedule-Next": "purge"}
        assert await last(nc, "S", "s.sched") is None  # the one-shot schedule is gone
        await asyncio.sleep(0.4)
        si = await api(nc, "$JS.API.STREAM.INFO.S")
        assert si["state"]["messages"] == 1 and si["state"]["last_seq"] == 2
        await nc.close()


async def test_past_at_fires_and_schedule_ttl_rollup_headers(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        await create(nc, "S", ["s.>"], allow_msg_ttl=True, **SCHED)
        r = await pub(nc, "s.a", {"Nats-Schedule": "@at 2020-01-01T00:00:00Z", "Nats-Schedule-Target": "s.t",
                                  "Nats-Schedule-TTL": "5s", "Nats-Schedule-Rollup": "sub"})
        assert r["seq"] == 1
        seq, hdrs, _ = await wait_for(nc, "S", "s.t")
        assert hdrs == {"Nats-Scheduler": "s.a", "Nats-Schedule-Next": "purge", "Nats-TTL": "5s",
                        "Nats-Rollup": "sub"}
        await nc.close()


async def test_repeating_schedule_moves_on(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        await create(nc, "S", ["s.>"], **SCHED)
        await pub(nc, "s.every", {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": "s.tick"})
        m = await wait_for(nc, "S", "s.tick", 2.0)
        assert m is not None
        _, hdrs, _ = m
        assert hdrs["Nats-Scheduler"] == "s.every"
        nxt = S.parse_rfc3339(hdrs["Nats-Schedule-Next"])
        assert hdrs["Nats-Schedule-Next"].endswith("Z") and nxt % 1_000_000_000 == 0
        # the schedule itself stays
        assert (await last(nc, "S", "s.every"))[0] == 1
        await nc.close()


async def test_schedule_errors_match_nats_server(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        await create(nc, "S", ["s.>"], **SCHED)
        await create(nc, "P", ["p.>"])
        tgt = {"Nats-Schedule-Target": "s.t"}
        cases = [
            ("p.a", {"Nats-Schedule": at(1), "Nats-Schedule-Target": "p.t"}, 10188),
            ("p.a", {"Nats-Schedule": "bogus"}, 10188),
            ("p.a", {"Nats-Schedule-Time-Zone": "Nope/Zone"}, 10188),
            ("p.a", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "p.b"}, 10188),
            ("p.a", {"Nats-Scheduler": "p.b"}, 10212),
            ("s.a", {"Nats-Schedule": "bogus", **tgt}, 10189),
            ("s.a", {"Nats-Schedule": "@at 2025-13-01T00:00:00Z", **tgt}, 10189),
            ("s.a", {"Nats-Schedule": "@every 500ms", **tgt}, 10189),
            ("s.a", {"Nats-Schedule": "@every 1s", "Nats-Schedule-Time-Zone": "UTC", **tgt}, 10189),
            ("s.a", {"Nats-Schedule": "0 0 * * *", **tgt}, 10189),
            ("s.a", {"Nats-Schedule": "0 0 0 * * *", "Nats-Schedule-Time-Zone": "", **tgt}, 10223),
            ("s.a", {"Nats-Schedule": "0 0 0 * * *", "Nats-Schedule-Time-Zone": "Bad/Zone", **tgt}, 10223),
            ("s.a", {"Nats-Schedule": at(100)}, 10190),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-Target": "s.a"}, 10190),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-Target": "x.t"}, 10190),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-Target": "s.*"}, 10190),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-TTL": "bad", **tgt}, 10191),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-TTL": "5s", **tgt}, 10166),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-Rollup": "all", **tgt}, 10192),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Rollup": "all", **tgt}, 10192),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-Source": "s.t", **tgt}, 10203),
            ("s.a", {"Nats-Schedule": at(100), "Nats-Schedule-Source": "x.y", **tgt}, 10203),
            ("s.b", {"Nats-Schedule-Next": "soon", "Nats-Scheduler": "s.a"}, 10212),
            ("s.b", {"Nats-Schedule-Next": "purge"}, 10212),
            ("s.b", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.b"}, 10212),
            ("s.b", {"Nats-Scheduler": "s.a"}, 10212),
        ]
        for subj, hdrs, code in cases:
            r = await pub(nc, subj, hdrs)
            assert r.get("error", {}).get("err_code") == code, (subj, hdrs, r)
            assert r["error"]["code"] == 400
        r = await pub(nc, "p.a", {"Nats-Schedule": "bogus"})
        assert r["error"]["description"] == "message schedules is disabled"
        # a client may purge a schedule itself, but not a subject that is no schedule
        await pub(nc, "s.plain", {"X": "1"})
        r = await pub(nc, "s.b", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.plain"})
        assert r["error"]["err_code"] == 10212
        await pub(nc, "s.sch", {"Nats-Schedule": at(100), **tgt})
        r = await pub(nc, "s.b", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.sch"})
        assert "error" not in r
        assert await last(nc, "S", "s.sch") is None
        await nc.close()


async def test_schedule_survives_restart(tmp_path):
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        await create(nc, "S", ["s.>"], storage="file", **SCHED)
        r = await pub(nc, "s.later", {"Nats-Schedule": at(0.6), "Nats-Schedule-Target": "s.out"}, b"kept")
        assert r["seq"] == 1
        await nc.close()
    async with run_server(js_opts(tmp_path)) as srv:
        nc = await nats.connect(srv.client_url)
        m = await wait_for(nc, "S", "s.out", 2.0)
        assert m is not None
        seq, hdrs, data = m
        assert data == b"kept" and hdrs["Nats-Scheduler"] == "s.later" and hdrs["Nats-Schedule-Next"] == "purge"
        assert await last(nc, "S", "s.later") is None
        await nc.close()


def test_cron_and_time_formats():
    ts = S.parse_rfc3339("2025-03-10T10:15:30.25Z")
    assert format_time(S.next_cron("0 0 0 * * *", None, ts)) == "2025-03-11T00:00:00Z"
    assert format_time(S.next_cron("*/15 * * * * *", None, ts)) == "2025-03-10T10:15:45Z"
    assert format_time(S.next_cron("0 0 0 1 jan *", None, ts)) == "2026-01-01T00:00:00Z"
    # day of month and day of week are OR'ed unless one is a star
    assert format_time(S.next_cron("0 0 0 15 * mon", None, ts)) == "2025-03-15T00:00:00Z"
    ams = S.load_location(b"NATS/1.0\r\nNats-Schedule-Time-Zone: Europe/Amsterdam\r\n\r\n")
    nxt = S.next_cron("0 30 9 * * mon-fri", ams, ts)
    assert format_time(nxt, zone_offset(nxt, ams)) == "2025-03-11T09:30:00+01:00"
    assert format_time(S.parse_rfc3339("2025-01-01T01:00:00.500+01:00")) == "2025-01-01T00:00:00.5Z"
