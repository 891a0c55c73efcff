"""The MQTT QoS 1 store's short road into a stream (rillet.mqtt.direct.store_direct, and its compiled twin in
rillet._speedups._cmqtt) against the road it shortens (``Stream.process`` with an answer object): triples of
streams with the same config, one fed through each, get the same messages in the same loop passes (plain MQTT
ones, ones with a ``Nats-*`` header that the short road hands to ``process``, oversized ones, subjects no
consumer of an interest stream wants, a sealed stream, discard new at a limit, the ingest limit); their answers
(in order), stored messages, stream counters and consumers' counts must be the same."""
from __future__ import annotations

import asyncio
import random

import pytest

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream import stream as S
from rillet.mqtt import direct
from rillet.server import Options

try:
    from rillet._speedups import _cmqtt
except ImportError as e:  # (not built: tests/test_lanes.py::test_compiled_lane_is_built says so)
    _cmqtt, _why = None, str(e)
else:
    _why = ""

MQTT_HDR = b"NATS/1.0\r\nNmqtt-Pub:1\r\n\r\n"

CONFIGS = [
    {"storage": "file", "retention": "interest"},  # ($MQTT_msgs' retention: a consumer on part of the subjects)
    {"storage": "memory", "retention": "interest"},
    {"storage": "file"},
    {"storage": "memory", "max_msg_size": 60},
    {"storage": "file", "max_msgs": 25, "discard": "new"},
    {"storage": "file", "max_msgs_per_subject": 3},
    {"storage": "file", "max_age": 3600.0},
]


class Answer:
    """A recording answer object, shaped as ``rillet.mqtt.store.QoS1Store`` (answered once written)."""

    wait_write = True

    def __init__(self, log: list, i: int) -> None:
        self.log = log
        self.i = i

    def proposed(self) -> None:
        self.log.append((self.i, "proposed"))

    def stored(self, seq: int) -> bool:
        self.log.append((self.i, "stored", seq))
        return False

    def duplicate(self, dseq: int) -> None:
        self.log.append((self.i, "duplicate", dseq))

    def error(self, err, proposed: bool = False) -> None:
        d = err.to_dict() if hasattr(err, "to_dict") else repr(err)
        self.log.append((self.i, "error", str(d), proposed))


def _roads() -> dict:
    roads = {"process": lambda st, subj, hdr, data, ans: st.process(subj, None, hdr, data, fast=ans),
             "ref": direct.reference_store_direct}
    if _cmqtt is not None:
        roads["twin"] = _cmqtt.store_direct
    return roads


def _ops(rng: random.Random) -> list:
    ops = []
    for i in range(120):
        r = rng.random()
        suffix = rng.choice(["a", "a", "a", "b", "c.d"])
        data = b"x" * rng.choice([0, 1, 16, 50, 90])
        hdr = MQTT_HDR
        if r < 0.1:
            hdr = b"NATS/1.0\r\nNmqtt-Pub:1\r\nNats-Msg-Id:id%d\r\n\r\n" % rng.randrange(5)
        elif r < 0.15:
            hdr = b""
        ops.append((suffix, hdr, data, rng.random() < 0.2))  # (the last: a loop pass ends after this one)
    return ops


def _streams() -> list:
    import gc
    return [o for o in gc.get_objects() if type(o) is S.Stream and not o.closed]


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
    cons = tuple(sorted((c.name, c.npc, c.sseq, len(c.pending)) for c in stream.consumers.values()))
    return (st.msgs, st.bytes, st.first_seq, st.last_seq, stream._bl_n, stream._bl_b, stream._wb_n, stream._wb_b,
            len(stream._inflight), stream.log.index, stream._last_msg_id, cons)


async def _feed(stream, road, ops: list, log: list) -> None:
    for i, (suffix, hdr, data, pass_end) in enumerate(ops):
        road(stream, f"{stream.name}.{suffix}", hdr, data, Answer(log, i))
        if pass_end:
            await asyncio.sleep(0.01)  # (the pass's gathered records written, its held answers sent)
    await asyncio.sleep(0.05)


async def _make(js, srv, name: str, cfg: dict):
    await js.add_stream(name=name, subjects=[f"{name}.>"], **cfg)
    if cfg.get("retention") == "interest":
        await js.add_consumer(name, durable_name="d", filter_subject=f"{name}.a", ack_policy="explicit")
    return next(s for s in _streams() if s.name == name)


async def test_short_road_same_as_process(tmp_path):
    import nats
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        for i, cfg in enumerate(CONFIGS):
            rng = random.Random(2300 + i)
            ops = _ops(rng)
            got = {}
            for road_name, road in _roads().items():
                stream = await _make(js, srv, f"D{i}{road_name[0].upper()}", cfg)
                log: list = []
                await _feed(stream, road, ops, log)
                got[road_name] = (log, _stored(stream), _state(stream))
            ref = got.pop("process")
            for road_name, g in got.items():
                assert g[0] == ref[0], f"answers, {road_name}, config {cfg}"
                assert g[1] == ref[1], f"stored, {road_name}, config {cfg}"
                assert g[2] == ref[2], f"state, {road_name}, config {cfg}"
            assert ref[2][0] > 0 or cfg.get("retention") == "interest"
            assert any(a[1] == "stored" for a in ref[0])
            if cfg.get("max_msg_size") or cfg.get("discard") == "new":
                assert any(a[1] == "error" for a in ref[0]), "a refusal was tried"
        await nc.close()


async def test_short_road_hands_sealed_and_ingest_limits_to_process(tmp_path):
    """A sealed stream and a stream at the ingest limit (``max_buffered_msgs``): the same refusals."""
    import nats
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        js = nc.jetstream()
        got = {}
        for road_name, road in _roads().items():
            stream = await _make(js, srv, f"E{road_name[0].upper()}", {"storage": "file"})
            log: list = []
            stream.ingest_limits = (10, 0)  # (the server option's effect on the stream)
            await _feed(stream, road, [("a", MQTT_HDR, b"v%d" % k, False) for k in range(15)], log)
            stream.ingest_limits = (0, 0)
            info = await js.stream_info(stream.name)
            info.config.sealed = True
            await js.update_stream(info.config)
            await _feed(stream, road, [("a", MQTT_HDR, b"late", False)], log)
            got[road_name] = (log, _stored(stream), _state(stream))
        ref = got.pop("process")
        errors = [a[0] for a in ref[0] if a[1] == "error"]
        # (the first written at once, the next ten gathered in the pass: the rest over the ingest limit; then sealed)
        assert errors == [11, 12, 13, 14, 0], ref[0]
        for road_name, g in got.items():
            assert g == ref, road_name
        await nc.close()


def test_lane_runs_its_twin():
    """The running lane's store_direct and JSA.store_cb (whose compiled twin calls the compiled store_direct)."""
    import rillet.mqtt.publish  # noqa: F401  (installs JSA.store_cb's twin)
    from rillet import lane
    from rillet.mqtt.store import JSA, reference_store_cb
    assert direct.reference_store_direct.__module__ == "rillet.mqtt.direct"
    assert reference_store_cb.__qualname__ == "JSA.store_cb"
    if lane.COMPILED and _cmqtt is not None:
        assert direct.store_direct is _cmqtt.store_direct
        assert JSA.store_cb is _cmqtt.store_cb
    elif not lane.COMPILED:
        assert direct.store_direct is direct.reference_store_direct
        assert JSA.store_cb is reference_store_cb
