"""A JetStream consumer's run of deliveries (rillet.jetstream.consumer.delivery): the compiled twin of the run loop
against its reference on the same inputs, and runs against the one-by-one delivery pass end to end (same messages,
ack subjects, pending counts, flow control requests and consumer state), in both lanes."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lanes import COMPILED_ERROR, LANES, use_lane
import rillet.jetstream.consumer  # noqa: F401  (registers its lane twins)
from rillet import lane
from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions
from rillet.jetstream.store.base import StoredMsg
from rillet.server import Options

pure_frames = lane.pure("run_frames")


# ---- the twin against the reference, on recording stand-ins ------------------------------------------------------

class _Stop(Exception):
    pass


class FakeIC:
    def __init__(self) -> None:
        self.out_msgs = 3


class FakeAcc:
    """An account whose executor records each call and answers from a script (True: someone got it)."""

    def __init__(self, log: list, oks: list[bool]) -> None:
        self.log, self.oks = log, list(oks)

    def deliver_result(self, c, r, subject, reply, hdr, msg, route=None, rreply=None):
        self.log.append(("deliver", type(subject), subject, type(reply), reply, hdr, msg, route, rreply))
        return self.oks.pop(0) if self.oks else True


class FakeWr:
    def __init__(self, expires: float) -> None:
        self.expires = expires


class FakeConsumer:
    """The consumer fields and methods a run reads and calls; each call recorded with what it saw."""

    def __init__(self, log: list, msgs: list[StoredMsg], prefix: str, maxpb: int, pbytes: int, npc: int,
                 npc_dirty: bool, dseq: int, ndseq: int, fc: list[bool], dirty_after: int, fail_load: int,
                 fcid: str = "", fcsz: int = 0, ack_policy: str = "none", ahead: int = 0) -> None:
        self.log = log
        self.msgs = msgs
        self.ic = FakeIC()
        self.ack_prefix = prefix
        self.maxpb = maxpb
        self.pbytes = pbytes
        self.npc = npc
        self.npc_dirty = npc_dirty
        self.dseq = dseq
        self._ndseq = ndseq
        self.sseq = msgs[0].seq if msgs else 1
        self._replay_lts = 0
        self._failed = False
        self.fc = list(fc)
        self.dirty_after = dirty_after  # the n-th load marks the count dirty (as a load error does)
        self.fail_load = fail_load  # the n-th load raises
        self.loads = 0
        self.fcid, self.fcsz, self.ack_policy = fcid, fcsz, ack_policy
        # messages read ahead (last first), as _next_in_run leaves them: the next ones, or (-1) a stale one
        if ahead > 0:
            self._ahead = list(reversed(msgs[1:1 + ahead]))
        elif ahead < 0 and len(msgs) > 2:
            self._ahead = [msgs[2]]
        else:
            self._ahead = []

    def num_pending(self) -> int:
        self.log.append(("num_pending", self.npc, self.npc_dirty))
        if self.npc_dirty:
            self.npc = 40 + self.loads
            self.npc_dirty = False
        return self.npc if self.npc > 0 else 0

    def _need_fc(self, sz: int) -> bool:
        self.log.append(("need_fc", sz, self.pbytes, self.fcid, self.fcsz))
        self.fcsz += 1
        return self.fc.pop(0) if self.fc else False

    def _send_fc(self) -> None:
        self.log.append(("send_fc", self.pbytes))
        self.maxpb += 7  # (what the run reads afterwards is the field, not a copy)
        self.fcid = "" if self.fcid else "$JS.FC.S.C.abcd"

    def _load_next(self, start: int):
        self.loads += 1
        self.log.append(("load", start, self.loads))
        if self.loads == self.fail_load:
            raise _Stop("store closed")
        if self.loads == self.dirty_after:
            self.npc_dirty = True
        for m in self.msgs:
            if m.seq >= start:
                return m
        return None

    def _next_in_run(self):
        self.log.append(("next_in_run", self.sseq, len(self._ahead)))
        self._ahead = []
        return self._load_next(self.sseq)

    def state(self) -> tuple:
        return (self.sseq, self.npc, self.npc_dirty, self.pbytes, self.maxpb, self.ic.out_msgs, self._replay_lts,
                self._failed, self.loads, self.fcid, self.fcsz, [m.seq for m in self._ahead])


subjects = st.one_of(st.sampled_from(["bench.js", "orders.eu.1", "ü.x", "a\udcff.b", "x" * 300]),
                     st.text(min_size=1, max_size=12))
numbers = st.one_of(st.integers(0, 10**6), st.integers(2**62 - 3, 2**63 - 1))


@st.composite
def runs(draw):
    n = draw(st.integers(1, 12))
    seq = draw(st.integers(1, 10**6))
    shared = draw(subjects)  # stores hand out one subject object for many messages
    msgs = []
    for _ in range(n):
        subj = shared if draw(st.booleans()) else draw(subjects)
        hdr = draw(st.sampled_from([b"", b"NATS/1.0\r\nA: b\r\n\r\n"]))
        msgs.append(StoredMsg(subj, seq, draw(numbers), hdr, draw(st.binary(max_size=20))))
        seq += draw(st.integers(1, 3))
    prefix = draw(st.sampled_from(["$JS.ACK.S.C.", "$JS.ACK.dom.HASH.ORDERS.d-1.", "$JS.ACK.ü.C.", ""]))
    return dict(
        msgs=msgs, prefix=prefix, maxpb=draw(st.sampled_from([0, 0, 60, 500, 10**6])),
        pbytes=draw(st.integers(0, 400)), npc=draw(st.integers(-2, 30)), npc_dirty=draw(st.booleans()),
        dseq=draw(numbers), ndseq=draw(numbers), fc=draw(st.lists(st.booleans(), max_size=6)),
        dirty_after=draw(st.integers(0, 6)), fail_load=draw(st.sampled_from([0, 0, 1, 3])),
        budget=draw(st.integers(1, 14)), oks=draw(st.lists(st.booleans(), max_size=12)),
        wr=draw(st.sampled_from([None, 0.0, 1e12, 1.0])), fcid=draw(st.sampled_from(["", "$JS.FC.S.C.wxyz"])),
        fcsz=draw(st.integers(0, 300)), ack_policy=draw(st.sampled_from(["none", "explicit", "flow_control"])),
        ahead=draw(st.integers(-1, 12)))


def _run(frames, case: dict) -> tuple:
    log: list = []
    c = FakeConsumer(log, case["msgs"], case["prefix"], case["maxpb"], case["pbytes"], case["npc"],
                     case["npc_dirty"], case["dseq"], case["ndseq"], case["fc"], case["dirty_after"],
                     case["fail_load"], case["fcid"], case["fcsz"], case["ack_policy"], case["ahead"])
    acc = FakeAcc(log, case["oks"])
    wr = None if case["wr"] is None else FakeWr(case["wr"])
    seqs: list[int] = []
    err = None
    try:
        frames(c, case["msgs"][0], case["budget"], acc, object(), b"deliver.subj", wr, seqs)
    except _Stop as e:
        err = str(e)
    return log, seqs, c.state(), err


@pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")
@settings(max_examples=1500, deadline=None)
@given(runs())
def test_run_frames_same_in_both_lanes(case):
    want = _run(pure_frames, case)
    got = _run(lane.compiled("run_frames"), case)
    assert got == want


@pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")
def test_run_frames_frames_what_ack_reply_says():
    from rillet.jetstream.acksubject import ack_reply
    m = StoredMsg("o.x", 5, 1764377000123456789, b"", b"hi")
    for frames in (pure_frames, lane.compiled("run_frames")):
        log: list = []
        c = FakeConsumer(log, [m], "$JS.ACK.S.C.", 0, 0, 3, False, 9, 2, [], 0, 0)
        seqs: list[int] = []
        frames(c, m, 10, FakeAcc(log, []), None, b"d", None, seqs)
        sent = [e for e in log if e[0] == "deliver"]
        assert sent == [("deliver", bytes, b"o.x", bytes, ack_reply("$JS.ACK.S.C.", 1, 5, 9, m.ts, 2).encode(), -1,
                         b"hi", b"d", None)]
        assert seqs == [5] and c.sseq == 6 and c.npc == 2 and c.ic.out_msgs == 4 and c._replay_lts == m.ts


# ---- runs against the one-by-one pass, end to end ----------------------------------------------------------------

@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    with use_lane(request.param, globals()):
        yield request.param


@pytest.fixture
async def env(tmp_path):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        yield srv, nc
        await nc.close()


async def api(nc, subject: str, body: dict | None = None) -> dict:
    r = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=3)
    d = json.loads(r.data)
    assert "error" not in d, d
    return d


def _consumer(srv, stream: str, name: str):
    jsa = next(j for j in srv.jetstream.accounts.values() if stream in j.streams)
    return jsa.streams[stream].consumers[name]


async def _fill(nc, n: int) -> None:
    js = nc.jetstream()
    for i in range(n):
        subj = ("r.a", "r.b", "r.ü")[i % 3]
        hdrs = {"K": str(i)} if i % 4 == 0 else None
        await js.publish(subj, b"m%d" % i + b"x" * (i % 50), headers=hdrs)


def _view(msg) -> tuple:
    """What a delivery tells, less the consumer's name in its ack subject."""
    toks = msg.reply.split(".")
    return (msg.subject, toks[:2] + toks[4:], msg.data, dict(msg.headers or {}))


def _state(info: dict) -> tuple:
    seqs = {k: v for k, v in info["delivered"].items() if k != "last_active"}
    floor = {k: v for k, v in info["ack_floor"].items() if k != "last_active"}
    return (seqs, floor, info["num_ack_pending"], info["num_redelivered"], info["num_waiting"], info["num_pending"])


async def test_pull_runs_as_one_by_one(env):
    srv, nc = env
    await api(nc, "$JS.API.STREAM.CREATE.R", {"name": "R", "subjects": ["r.>"]})
    await _fill(nc, 60)
    subs = {}
    # (names of one length: the ack subjects, so the sizes, are the same)
    for name, filt in (("RUNS", "r.>"), ("ONES", "r.>"), ("FRUN", "r.a"), ("FONE", "r.a")):
        await api(nc, f"$JS.API.CONSUMER.CREATE.R.{name}", {"stream_name": "R", "config": {
            "durable_name": name, "ack_policy": "explicit", "filter_subject": filt, "max_ack_pending": 45}})
        subs[name] = await nc.jetstream().pull_subscribe_bind(name, "R")
    for name in ("ONES", "FONE"):
        c = _consumer(srv, "R", name)
        c._runs = False  # the one-by-one pass
    assert _consumer(srv, "R", "RUNS")._runs
    for pair in (("RUNS", "ONES"), ("FRUN", "FONE")):
        seen = {}
        for name in pair:
            got = []
            for batch in (1, 7, 20, 30, 30):  # the last ones stop at max_ack_pending
                try:
                    ms = await subs[name].fetch(batch, timeout=0.5)
                except nats.errors.TimeoutError:
                    ms = []
                got.append([_view(m) for m in ms])
                for m in ms[::3]:
                    await m.ack()
            await nc.flush()
            info = await api(nc, f"$JS.API.CONSUMER.INFO.R.{name}")
            seen[name] = (got, _state(info))
        a, b = (seen[n] for n in pair)
        assert a == b
        assert sum(len(g) for g in a[0]) >= 20


async def test_push_flow_control_runs_as_one_by_one(env):
    """A push consumer with flow control: the flow control request goes out after the same message and the
    deliveries stop at the same window, runs or not."""
    srv, nc = env
    await api(nc, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["r.>"]})
    await _fill(nc, 90)
    seen = {}
    for name in ("RUNS", "ONES"):  # (names of one length: the same sizes against the window)
        deliver = f"dl.{name}"
        await api(nc, f"$JS.API.CONSUMER.CREATE.P.{name}", {"stream_name": "P", "config": {
            "durable_name": name, "deliver_subject": deliver, "ack_policy": "none", "flow_control": True,
            "idle_heartbeat": 5_000_000_000}})
        c = _consumer(srv, "P", name)
        c.maxpb = 2000  # a small window: a request at 1000 bytes, a stop past 2000
        if name == "ONES":
            c._runs = False
        got: list = []
        done = asyncio.Event()

        async def cb(msg, got=got, done=done):
            if msg.headers and msg.headers.get("Status") == "100":
                got.append(("fc", msg.headers.get("Description")))
                if msg.headers.get("Description") == "FlowControl Request":
                    done.set()  # (not answered: the consumer stops at its window)
            else:
                got.append(_view(msg))

        await nc.subscribe(deliver, cb=cb)
        await asyncio.wait_for(done.wait(), 3)
        await asyncio.sleep(0.2)
        info = await api(nc, f"$JS.API.CONSUMER.INFO.P.{name}")
        seen[name] = (got, _state(info), c.pbytes)
    assert seen["RUNS"] == seen["ONES"]
    got = seen["RUNS"][0]
    assert got.count(("fc", "FlowControl Request")) == 1 and 10 < len(got) < 90
