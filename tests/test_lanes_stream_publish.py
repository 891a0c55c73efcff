"""A stream's publish handler in both lanes (issue 20): Stream._on_msg as written (rillet.jetstream.stream's
reference_on_msg, the pure-Python lane's) and its compiled twin (rillet._speedups._cjs.stream_on_msg, which stores
and acknowledges a plain publish itself and hands the rest to the reference). Pairs of streams with the same
config, one subscribed with each handler, get the same random mix of publishes (plain, with and without a reply,
headers, message ids and their duplicates, TTLs, oversized ones, per-subject limits, discard new, a consumer, an
interest stream, no_ack, a subject transform, a sealed stream); their PubAcks, errors and stored
messages must be the same."""
from __future__ import annotations

import asyncio
import json
import random

import nats
import pytest

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream import stream as S
from rillet.server import Options

try:
    from rillet._speedups._cjs import stream_on_msg as _twin
except ImportError as e:  # (an extension built before the twin, or none: tests/test_lanes.py says which)
    _twin, _why = None, str(e)
else:
    _why = ""

pytestmark = pytest.mark.skipif(_twin is None, reason=f"compiled twin not built: {_why}")

CONFIGS = [
    {"storage": "memory"},
    {"storage": "file"},
    {"storage": "memory", "max_msgs_per_subject": 2},
    {"storage": "file", "max_msgs": 20, "discard": "new"},
    {"storage": "memory", "max_msg_size": 40, "no_ack": False},
    {"storage": "memory", "no_ack": True},
    {"storage": "file", "allow_msg_ttl": True, "max_age": 3600.0},
    {"storage": "memory", "retention": "interest"},
    {"storage": "file", "max_bytes": 2000, "discard": "old"},
]


def _handler(lane_name: str):
    return S.reference_on_msg if lane_name == "ref" else _twin


def _stored(stream) -> list:
    st = stream.store.state()
    out = []
    for seq in range(st.first_seq, st.last_seq + 1):
        m = stream.store.load_msg(seq)
        if m is not None:
            out.append((m.seq, m.subject.split(".", 1)[1], m.hdr, m.data))
    return out


def _state(stream) -> tuple:
    st = stream.store.state()
    return (st.msgs, st.bytes, st.first_seq, st.last_seq, stream._bl_n, stream._bl_b, len(stream._inflight),
            stream.log.index, stream._last_msg_id)


async def _publish_all(nc, prefix: str, ops: list, inbox_sub) -> list:
    """Each op as a request (or a plain publish), the answers (or their absence) in order."""
    out = []
    for kind, suffix, data, hdrs in ops:
        subj = f"{prefix}.{suffix}"
        if kind == "pub":
            await nc.publish(subj, data, headers=hdrs)
            await nc.flush()
            out.append(None)
            continue
        try:
            msg = await nc.request(subj, data, headers=hdrs, timeout=5)
        except nats.errors.TimeoutError:
            out.append("timeout")
            continue
        except nats.errors.NoRespondersError:
            out.append("no responders")
            continue
        body = json.loads(msg.data) if msg.data else {}
        body.pop("stream", None)
        out.append((body, dict(msg.headers or {})))
    return out


def _ops(rng: random.Random, no_ack: bool) -> list:
    ops = []
    for i in range(90):
        r = rng.random()
        suffix = rng.choice(["a", "b", "c.d"])
        data = b"x" * rng.choice([0, 1, 16, 50])
        hdrs = None
        if r < 0.15:
            hdrs = {"Nats-Msg-Id": f"id{rng.randrange(6)}"}
        elif r < 0.2:
            hdrs = {"Nats-TTL": rng.choice(["1h", "bad", "5s"])}
        elif r < 0.25:
            hdrs = {"X-Other": "v"}
        kind = "pub" if no_ack or rng.random() < 0.15 else "req"  # (no_ack: nothing would answer a request)
        ops.append((kind, suffix, data, hdrs))
    return ops


async def test_publish_handler_same_in_both_lanes(tmp_path, monkeypatch):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        for i, cfg in enumerate(CONFIGS):
            streams = {}
            for lane_name in ("ref", "twin"):
                monkeypatch.setattr(S.Stream, "_on_msg", _handler(lane_name))
                name = f"L{i}{lane_name[0].upper()}"
                await js.add_stream(name=name, subjects=[f"{name}.>"], **cfg)
                if cfg.get("retention") == "interest":  # a consumer on part of the subjects
                    await js.add_consumer(name, durable_name="d", filter_subject=f"{name}.a", ack_policy="explicit")
                streams[lane_name] = next(s for s in _streams(srv) if s.name == name)
            monkeypatch.setattr(S.Stream, "_on_msg", S.reference_on_msg)
            rng = random.Random(1000 + i)
            ops = _ops(rng, cfg.get("no_ack", False))
            got = {}
            for lane_name, stream in streams.items():
                got[lane_name] = await _publish_all(nc, stream.name, ops, None)
            assert got["ref"] == got["twin"], f"config {cfg}"
            ref, twin = streams["ref"], streams["twin"]
            assert _stored(ref) == _stored(twin), f"config {cfg}"
            assert _state(ref) == _state(twin), f"config {cfg}"
            assert _state(ref)[0] > 0
        await nc.close()


async def test_twin_hands_limits_and_sealed_streams_to_the_reference(tmp_path, monkeypatch):
    """A sealed stream and a subject transform (both handed to the reference): the same answers from both."""
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        streams = {}
        for lane_name in ("ref", "twin"):
            monkeypatch.setattr(S.Stream, "_on_msg", _handler(lane_name))
            name = f"T{lane_name[0].upper()}"
            await js.add_stream(name=name, subjects=[f"{name}.>"],
                                subject_transform={"src": f"{name}.>", "dest": f"{name}.moved.>"})
            await js.add_stream(name=f"Z{lane_name[0].upper()}", subjects=[f"Z{lane_name[0].upper()}.>"])
            streams[lane_name] = (name, f"Z{lane_name[0].upper()}")
        for lane_name, (tname, zname) in streams.items():
            monkeypatch.setattr(S.Stream, "_on_msg", _handler(lane_name))
            for k in range(5):
                await js.publish(f"{tname}.k{k}", b"v%d" % k)
                await js.publish(f"{zname}.k{k}", b"v%d" % k)
            info = await js.stream_info(zname)
            cfg = info.config
            cfg.sealed = True
            await js.update_stream(cfg)  # (re-subscribes with the handler of this lane)
        answers = {}
        for lane_name, (tname, zname) in streams.items():
            a = await nc.request(f"{zname}.x", b"late", timeout=5)
            body = json.loads(a.data)
            body.pop("stream", None)
            subjects = sorted(m.subject.split(".", 1)[1] for m in _msgs(srv, tname))
            answers[lane_name] = (body, subjects)
        assert answers["ref"] == answers["twin"]
        assert "error" in answers["ref"][0], answers
        assert answers["ref"][1] == [f"moved.k{k}" for k in range(5)]
        await nc.close()


def _streams(srv) -> list:
    import gc
    return [o for o in gc.get_objects() if type(o) is S.Stream and not o.closed]


def _msgs(srv, name: str) -> list:
    s = next(s for s in _streams(srv) if s.name == name)
    st = s.store.state()
    return [m for m in (s.store.load_msg(q) for q in range(st.first_seq, st.last_seq + 1)) if m is not None]


def test_reference_is_the_written_method():
    assert S.reference_on_msg.__qualname__ == "Stream._on_msg"
    from rillet import lane
    assert (S.Stream._on_msg is _twin) == lane.COMPILED
    assert asyncio  # (used by the async tests' plugin)


def _fill_store(store, fn, rng: random.Random) -> list:
    out = []
    for i in range(400):
        subj = f"s.{rng.randrange(9)}"
        hdr = b"NATS/1.0\r\nX: %d\r\n\r\n" % i if rng.random() < 0.2 else b""
        ttl = rng.choice([0, 0, 0, 0, 5, -1])
        ts = None if rng.random() < 0.1 else 1_000_000 + i
        out.append(fn(store, subj, hdr, b"d" * rng.randrange(40), ts, ttl)[0])
        if rng.random() < 0.05:
            store.remove_msg(rng.randrange(1, i + 2), False)
        if rng.random() < 0.01:
            store.purge(f"s.{rng.randrange(9)}", 0, 0)
    return out


@pytest.mark.parametrize("limits", [{}, {"max_msgs_per_subject": 3}, {"max_msgs": 50}, {"max_bytes": 900}])
def test_memstore_store_msg_same_in_both_lanes(limits):
    """MemStore.store_msg's twin (rillet._speedups._cjs.memstore_store_msg) against the method as written."""
    from rillet._speedups._cjs import memstore_store_msg

    from rillet.jetstream.store import memstore
    from rillet.jetstream.store.base import StoreConfig
    stores = [memstore.MemStore(StoreConfig(storage="memory", **limits)) for _ in range(2)]
    got = [_fill_store(s, fn, random.Random(7)) for s, fn in zip(stores, (memstore.reference_store_msg,
                                                                          memstore_store_msg))]
    assert got[0] == got[1]
    states = []
    for s in stores:
        st = s.state()
        msgs = [(m.seq, m.subject, m.hdr, m.data) for m in (s.load_msg(q) for q in range(st.first_seq, st.last_seq + 1))
                if m is not None]
        states.append((st.msgs, st.bytes, st.first_seq, st.last_seq, msgs, s.subjects_totals(">"),
                       {k: s.last_seq_for_subject(f"s.{k}") for k in range(9)}))
    assert states[0] == states[1]
    from rillet import lane
    assert (memstore.MemStore.store_msg is memstore_store_msg) == lane.COMPILED
