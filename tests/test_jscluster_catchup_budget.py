"""``jetstream { max_outstanding_catchup }``: the server-wide bytes of stream catch-up answers in flight
(rillet/jetstream/cluster/catchup.py). The budget's rules on their own, then a follower that missed a compaction
catching up from a leader whose budget is 1K: every answer within it (one message past it at most), the
follower's copy whole; the setting parsed as nats-server parses it (-t) and refused negative at a clustered
start, beside nats-server."""
from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys

import nats
import pytest

from rillet.jetstream.cluster import catchup as CU
from rillet.app.embed import run_cluster
from rillet.server.logging import Logger
from jscluster_support import until
from rillet.config.options import JetStreamOptions
from rillet.jetstream.cluster.clustered import ClusteredStreams
from rillet.jetstream.manager import JetStream
from test_jscluster_stream_replicas import Env, ReplicasOnly, states

GO = "nats-server"


class FakeLoop:
    def __init__(self) -> None:
        self.timers = []

    def call_later(self, delay, fn, *args):
        h = asyncio.TimerHandle(0, fn, args, asyncio.new_event_loop())
        self.timers.append((delay, h))
        return h


def test_budget_rules():
    loop = FakeLoop()
    b = CU.CatchupBudget(loop, 1000)
    got = []
    b.request("a", lambda room: got.append(("a", room)))
    assert got == [("a", 1000)]
    b.charge("a", 700)
    b.request("b", lambda room: got.append(("b", room)))
    assert got[-1] == ("b", 300)
    b.charge("b", 400)  # (one message may take it past the limit)
    assert b.out == 1100 and b.room() == 0
    b.request("c", lambda room: got.append(("c", room)))
    b.request("c", lambda room: got.append(("c2", room)))  # (asked again: the newer request replaces it)
    assert b.waiting == 1 and got[-1][0] == "b"
    b.request("a", lambda room: got.append(("a2", room)))  # a's first answer arrived: freed; c was first in line
    assert got[-2:] == [("c2", 600), ("a2", 600)] and b.out == 400
    b.charge("c", 600)
    b.release("b")  # (done)
    assert b.out == 600 and b.peak == 1100 and b.answers == 3
    # an answer not heard of again is freed after HOLD seconds (its timer)
    delay, h = loop.timers[-1]
    assert delay == CU.HOLD
    h._run()
    assert b.out == 0
    assert CU.CatchupBudget(loop, 0).limit == CU.DEFAULT_MAX_CATCHUP == 64 << 20


class BudgetEnv(Env):
    async def start(self) -> None:
        for i, s in enumerate(self.servers):
            s.opts.jetstream = JetStreamOptions(enabled=True, store_dir=os.path.join(self.tmp, f"s{i}"),
                                                extra={"max_outstanding_catchup": 1024})
            js = JetStream(s)
            s.jetstream = js
            await js.start()
            cs = ClusteredStreams(s, js)
            self.cs.append(cs)
            js.api_route = ReplicasOnly(cs)


@pytest.fixture
async def env(tmp_path):
    out = io.StringIO()
    async with run_cluster(3, log=Logger(out=out)) as servers:
        e = BudgetEnv(servers, str(tmp_path))
        await e.start()
        try:
            yield e
        finally:
            await e.stop()
    errs = [ln for ln in out.getvalue().splitlines() if "[ERR]" in ln]
    assert not errs, errs[:5]


async def test_catch_up_within_budget(env):
    assert all(c.catchup.limit == 1024 for c in env.cs)
    sa = env.assign({"name": "M", "subjects": ["m.>"], "num_replicas": 3, "storage": "memory"},
                    storage="memory", group="S-R3M-test0003")
    await until(lambda: env.leader("M") is not None, what="a stream leader")
    reps = env.reps("M")
    lead = env.leader("M")
    li = reps.index(lead)
    fi = next(i for i, r in enumerate(reps) if r is not lead)
    nc = await nats.connect(env.servers[li].client_url)
    js = nc.jetstream()
    try:
        await js.publish("m.a", b"first")
        await until(lambda: reps[fi].stream.store.state().msgs == 1, what="follower has 1")
        await reps[fi].stop()
        env.cs[fi].replicas.pop(("$G", "M"))
        for i in range(60):
            await js.publish("m.b", b"x" * 100)  # 6000 bytes and more: several answers of 1K
        await until(lambda: all(r.group.applied == lead.group.applied for r in reps if r is not reps[fi]),
                    what="applied")
        for r in reps:
            if r is not reps[fi]:
                r.group.compact()
        budget = env.cs[li].catchup
        env.cs[fi].stream_assigned(sa)
        nrep = env.cs[fi].replica("$G", "M")
        await until(lambda: nrep.stream.store.state().last_seq == 61, timeout=20, what="catch-up")
        assert budget.answers >= 6, budget.answers
        assert budget.peak <= 1024 + 103, budget.peak  # (one message past the limit at most)
        await until(lambda: budget.out == 0, what="the follower's done frees the last answer")
        assert len(set(states(env.reps("M")))) == 1
    finally:
        await nc.close()


def _conf(tmp_path, name: str, extra: str, clustered: bool) -> str:
    p = tmp_path / name
    sd = tmp_path / (name + ".js")
    text = f'port: -1\nserver_name: n1\njetstream {{ store_dir: "{sd}"\n {extra} }}\n'
    if clustered:
        text += "cluster { name: c1, port: -1 }\n"
    p.write_text(text)
    return str(p)


def _run(cmd: list[str], timeout: float = 30) -> tuple[int, str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return r.returncode, (r.stdout + r.stderr)


def _last_line(out: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    # (the message without its file:line:col, which nats-server puts at the block for a failed type assertion)
    return re.sub(r"^nats-server: (\S+:\d+:\d+: )?", "", lines[-1]) if lines else ""


@pytest.mark.parametrize("extra", ['max_outstanding_catchup: 1K', 'max_outstanding_catchup: 0',
                                   'max_outstanding_catchup: -5', 'max_outstanding_catchup: "10Q"',
                                   'max_outstanding_catchup: true'])
def test_parse_like_nats_server(tmp_path, extra):
    conf = _conf(tmp_path, "c.conf", extra, clustered=False)
    grc, gout = _run([GO, "-t", "-c", conf])
    rrc, rout = _run([sys.executable, "-m", "rillet.server", "-t", "-c", conf])
    assert (grc == 0) == (rrc == 0), (gout, rout)
    if grc == 0:
        assert "is valid" in gout and "is valid" in rout
    else:
        assert _last_line(rout) == _last_line(gout), (gout, rout)


def test_negative_refused_at_clustered_start(tmp_path):
    conf = _conf(tmp_path, "n.conf", "max_outstanding_catchup: -5", clustered=True)
    gout = _run([GO, "-c", conf])[1]
    rout = _run([sys.executable, "-m", "rillet.server", "-c", conf])[1]
    assert "jetstream max catchup cannot be negative" in gout
    assert "jetstream max catchup cannot be negative" in rout
