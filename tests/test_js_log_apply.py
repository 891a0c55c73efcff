"""Nothing changes a stream's store except applying a log entry (DESIGN.md: propose -> log entry -> apply).

Every mutating store method is wrapped to record calls made outside ``Stream.apply``; the test then drives
every path that changes a store the way users do (publishes, rollups, TTLs, max_age expiry with subject
delete markers, atomic batches, message delete, purge, stream update shrinking limits, mirrors, sources,
schedules, work-queue and interest retention) and fails if any store change bypassed the log.
"""
from __future__ import annotations

import asyncio
import functools
import json
import sys
import traceback

import nats
import pytest
from nats.js.api import StreamSource

from rillet import lane
from rillet.jetstream.store.filestore import FileStore
from rillet.jetstream.store.memstore import MemStore
from rillet.jetstream.stream import Stream
from rillet.server import Options
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions

MUTATORS = ("store_msg", "store_raw", "store_batch", "remove_msg", "purge", "compact", "truncate", "skip_msg",
            "skip_msgs", "expire_msgs", "update_config")
SEC = 1_000_000_000


@pytest.fixture
def store_calls(monkeypatch):
    """{method: [inside apply?, ...]} for every mutating store call, plus the stacks of those outside."""
    apply_code = Stream.apply.__code__
    calls: dict[str, list[bool]] = {m: [] for m in MUTATORS}
    outside: list[str] = []

    def wrap(cls, name):
        fn = cls.__dict__.get(name)
        if fn is None:
            return

        @functools.wraps(fn)
        def checked(self, *a, **kw):
            f = sys._getframe(1)
            inside = False
            while f is not None:
                if f.f_code is apply_code:
                    inside = True
                    break
                f = f.f_back
            calls[name].append(inside)
            if not inside:
                outside.append(f"{type(self).__name__}.{name} outside Stream.apply:\n"
                               + "".join(traceback.format_stack(limit=8)))
            return fn(self, *a, **kw)
        monkeypatch.setattr(cls, name, checked)

    # every class the stores are made of (the shared StoreCommon has store_msg, purge, expire_msgs...; each
    # store, or a mixin of it, its compact, truncate, remove_msg), the lane's file store too (the compiled twin
    # overrides store_msg)
    classes = {c for store in (MemStore, FileStore, lane.FileStore) for c in store.__mro__ if c is not object}
    for m in MUTATORS:
        for cls in classes:
            wrap(cls, m)
    return calls, outside


async def api(nc, subject: str, body: dict | None = None) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)
    return json.loads(r.data)


async def wait_for(cond, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_every_store_change_goes_through_the_log(tmp_path, store_calls, storage):
    calls, outside = store_calls
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream(timeout=2)

        async def create(cfg: dict) -> None:
            cfg = {"storage": storage, **cfg}
            r = await api(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
            assert "error" not in r, r

        async def msgs(name: str) -> int:
            return (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["state"]["messages"]

        await create({"name": "A", "subjects": ["a.>"], "allow_atomic": True, "allow_msg_ttl": True,
                      "allow_rollup_hdrs": True})
        await create({"name": "M", "mirror": {"name": "A"}})
        await create({"name": "S", "sources": [{"name": "A"}]})
        await create({"name": "E", "subjects": ["e.>"], "max_age": 1 * SEC, "subject_delete_marker_ttl": 1 * SEC})
        await create({"name": "SC", "subjects": ["sc.>"], "allow_msg_schedules": True})
        await create({"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"})
        await create({"name": "IN", "subjects": ["in.>"], "retention": "interest"})

        for i in range(6):
            await js.publish(f"a.{i % 3}", b"%d" % i)
        await js.publish("a.ttl", b"t", headers={"Nats-TTL": "1s"})
        await js.publish("a.1", b"roll", headers={"Nats-Rollup": "sub"})
        for i in range(1, 4):
            h = {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": str(i)}
            if i == 3:
                h["Nats-Batch-Commit"] = "1"
            await nc.publish("a.b", b"batch", headers=h)
        await nc.flush()
        await js.publish("e.x", b"old")
        await js.publish("sc.s", b"", headers={"Nats-Schedule": "@at 2020-01-01T00:00:00Z",
                                               "Nats-Schedule-Target": "sc.out"})
        await js.publish("in.x", b"nobody is interested")
        for i in range(3):
            await js.publish("wq.x", b"%d" % i)
        sub = await js.pull_subscribe("wq.x", durable="w")
        for m in await sub.fetch(3, timeout=2):
            await m.ack_sync()

        # the mirror and the source catch up with A (11 sequences, the rollup removed 2 and 5; as with
        # nats-server the source refuses the TTL and rollup messages, its config allows neither)
        await wait_for(lambda: _eq(msgs("S"), 9), 8)
        await wait_for(lambda: _eq(msgs("M"), 9), 8)

        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.A", {"seq": 1})
        assert r.get("success") is True, r
        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.A", {"seq": 3, "no_erase": True})
        assert r.get("success") is True, r
        r = await api(nc, "$JS.API.STREAM.PURGE.A", {"filter": "a.0"})
        assert r.get("purged") == 1, r
        info = await api(nc, "$JS.API.STREAM.INFO.A")
        r = await api(nc, "$JS.API.STREAM.UPDATE.A", dict(info["config"], max_msgs=2))
        assert "error" not in r and r["state"]["messages"] == 2, r

        await wait_for(lambda: _eq(msgs("SC"), 1))      # the schedule fired and was purged
        await wait_for(lambda: _eq(msgs("WQ"), 0))      # acked work is removed
        await wait_for(lambda: _eq(msgs("IN"), 0))      # no interest: removed
        # max_age expiry leaves a subject delete marker, stored while applying the expiry
        # (seq 2; the marker itself expires a second later)
        await wait_for(lambda: _marker(nc), 5)
        await nc.close()

    assert not outside, "store changed outside the log:\n" + "\n".join(outside[:3])
    for name in ("store_msg", "store_raw", "store_batch", "remove_msg", "purge", "expire_msgs", "update_config"):
        assert calls[name] and all(calls[name]), (name, calls[name])


async def _eq(coro, value) -> bool:
    return (await coro) == value


async def _marker(nc) -> bool:
    return (await api(nc, "$JS.API.STREAM.INFO.E"))["state"]["last_seq"] == 2
