"""nats-server 2.15's desired state (ADR-62) as a user sees it, differential: the same scales, retention change,
overlapping requests, consumers scaled by their own update and a cancel against a 3-server Rillet JetStream cluster and a 3-server nats-server 2.15.1
cluster (servers tagged t0, t1, t2), compared through STREAM.INFO / CONSUMER.INFO.

Compared exactly: the answers (errors, the config kept, the ``cluster.desired`` of the update answer: target
cluster named, ``origin``, how many desired replicas), and the end state (each stream's and consumer's replica
count in its config and in its group, which server kept the stream). Checked on both while the change is
under way (every info polled, rules rather than equality: the two converge at their own pace): a stream's
``desired`` always names the cluster and carries its ``origin``; ``desired.replicas``, when shown, are as
many as the stream's (a consumer's: as its own target); a ``status`` has one of ADR-62's types and a
description. Without the nats-server binary, Rillet's
transcript is checked against the one recorded from nats-server 2.15.1 (``EXPECTED``)."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request

import nats

from helpers import free_port
from rillet.app.embed import run_cluster

GO = shutil.which("nats-server")
WAIT = 40.0  # (CI: two loaded cores)
T = "io.nats.jetstream.api.v1."
STATUS_TYPES = {"meta", "membership", "snapshot", "catchup", "quorum", "blocked", "unavailable"}


def _err(code: int, err_code: int, description: str) -> dict:
    return {"code": code, "err_code": err_code, "description": description}


MOVING = _err(400, 10124, "stream move already in progress")
# recorded from a 3-server nats-server 2.15.1 cluster (servers renamed t0, t1, t2)
EXPECTED: list = [['scale up',
  {'type': T + 'stream_update_response',
   'num_replicas': 3,
   'retention': 'limits',
   'desired': {'named': True, 'origin': {'replicas': 1}, 'replicas': 3}}],
 ['scale up, end',
  {'stream': {'num_replicas': 3, 'retention': 'limits', 'peers': 3},
   'C0': {'num_replicas': 0, 'peers': 3},
   'C1': {'num_replicas': 1, 'peers': 1}}],
 ['consumer scale up',
  {'type': T + 'consumer_create_response',
   'num_replicas': 3,
   'desired': {'named': True, 'origin': None, 'replicas': 3}}],
 ['consumer scale down',
  {'type': T + 'consumer_create_response',
   'num_replicas': 1,
   'desired': {'named': True, 'origin': None, 'replicas': 'none yet or 1'}}],
 ['consumer scales, end',
  {'stream': {'num_replicas': 3, 'retention': 'limits', 'peers': 3},
   'C0': {'num_replicas': 1, 'peers': 1},
   'C1': {'num_replicas': 3, 'peers': 3}}],
 ['consumer scale down, leader kept', True],
 ['interest scale up',
  {'type': T + 'stream_update_response',
   'num_replicas': 3,
   'retention': 'interest',
   'desired': {'named': True, 'origin': {'replicas': 1}, 'replicas': 3}}],
 ['interest scale up, end',
  {'stream': {'num_replicas': 3, 'retention': 'interest', 'peers': 3}, 'C1': {'num_replicas': 3, 'peers': 3}}],
 ['scale down',
  {'type': T + 'stream_update_response',
   'num_replicas': 1,
   'retention': 'limits',
   'desired': {'named': True, 'origin': {'replicas': 3}, 'replicas': 'none yet or 1'}}],
 ['scale down, end',
  {'stream': {'num_replicas': 1, 'retention': 'limits', 'peers': 1},
   'C0': {'num_replicas': 0, 'peers': 1},
   'C3': {'num_replicas': 1, 'peers': 1},
   'C1': {'num_replicas': 1, 'peers': 1}}],
 ['scale down, leader kept', True],
 ["scale down, C1 on the stream's server", True],
 ['retention to interest',
  {'type': T + 'stream_update_response',
   'num_replicas': 3,
   'retention': 'interest',
   'desired': {'named': True, 'origin': {'replicas': 3, 'retention': 'limits'}, 'replicas': 3}}],
 ['retention, end',
  {'stream': {'num_replicas': 3, 'retention': 'interest', 'peers': 3}, 'C1': {'num_replicas': 3, 'peers': 3}}],
 ['move onto t1',
  {'type': T + 'stream_update_response',
   'num_replicas': 1,
   'retention': 'limits',
   'desired': {'named': True, 'origin': {'replicas': 1, 'placement': {'tags': ['t0']}}, 'replicas': 1}}],
 ['scale while moving',
  {'type': T + 'stream_update_response',
   'error': {'code': 400, 'err_code': 10124, 'description': 'stream move already in progress'}}],
 ['retention change while moving',
  {'type': T + 'stream_update_response',
   'error': {'code': 400, 'err_code': 10124, 'description': 'stream move already in progress'}}],
 ['move, end', {'stream': {'num_replicas': 1, 'retention': 'limits', 'peers': 1}}],
 ['move, on', 't1'],
 ['scale to R3',
  {'type': T + 'stream_update_response',
   'num_replicas': 3,
   'retention': 'limits',
   'desired': {'named': True, 'origin': {'replicas': 1}, 'replicas': 3}}],
 ['scale to R2 while scaling to R3',
  {'type': T + 'stream_update_response',
   'num_replicas': 2,
   'retention': 'limits',
   'desired': {'named': True, 'origin': {'replicas': 1}, 'replicas': 'none yet or 2'}}],
 ['two scales, end',
  {'stream': {'num_replicas': 2, 'retention': 'limits', 'peers': 2}, 'C0': {'num_replicas': 0, 'peers': 2}}],
 ['two scales, leader kept', True],
 ['scale to cancel',
  {'type': T + 'stream_update_response',
   'num_replicas': 3,
   'retention': 'limits',
   'desired': {'named': True, 'origin': {'replicas': 1}, 'replicas': 3}}],
 ['cancel',
  {'type': T + 'stream_cancel_move_response',
   'num_replicas': 1,
   'retention': 'limits',
   'desired': {'named': True, 'origin': {'replicas': 1}, 'replicas': 1}}],
 ['cancel, end',
  {'stream': {'num_replicas': 1, 'retention': 'limits', 'peers': 1}, 'C0': {'num_replicas': 0, 'peers': 1}}],
 ['cancel, back on its server', True],
 ['cancel, nothing left',
  {'type': T + 'stream_cancel_move_response',
   'error': {'code': 400, 'err_code': 10129, 'description': 'stream reconfiguration not in progress'}}]]


class Run:
    """One cluster's transcript, and the rules checked on every info seen while a change is under way."""

    def __init__(self, nc, names: list[str]) -> None:
        self.nc = nc
        self.names = names
        self.out: list = []
        self.problems: list = []
        self.seen_status: set = set()

    async def api(self, subject: str, body=None, timeout: float = 10) -> dict:
        data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
        return json.loads((await self.nc.request(subject, data, timeout=timeout)).data)

    async def info(self, stream: str, consumer: str = "") -> dict:
        """The stream's (consumer's) info; {} while its leader changes (a request may go unanswered then)."""
        subj = f"$JS.API.CONSUMER.INFO.{stream}.{consumer}" if consumer else f"$JS.API.STREAM.INFO.{stream}"
        try:
            r = await self.api(subj, timeout=2)
        except nats.errors.TimeoutError:
            return {}
        return {} if "error" in r else r

    async def pub(self, subject: str, n: int) -> None:
        for i in range(n):
            deadline = time.monotonic() + WAIT
            while True:
                try:
                    ack = json.loads((await self.nc.request(subject, b"m%d" % i, timeout=5)).data)
                    assert "error" not in ack, ack
                    break
                except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                    assert time.monotonic() < deadline, f"no ack on {subject}"
                    await asyncio.sleep(0.1)

    def tag(self, server: str) -> str:
        return f"t{self.names.index(server)}" if server in self.names else server

    def record(self, label: str, value) -> None:
        self.out.append([label, value])

    def check(self, what: str, info: dict, target: int, stream: bool) -> None:
        """ADR-62's rules on one info's ``cluster`` while a change is under way."""
        cl = info.get("cluster") or {}
        if any(r.get("pending") for r in cl.get("replicas") or ()):
            self.seen_status.add("pending")
        d = cl.get("desired")
        if not d:
            return
        if not d.get("name"):
            self.problems.append(f"{what}: desired without the target cluster: {d}")
        if stream and not isinstance(d.get("origin"), dict):
            self.problems.append(f"{what}: a stream's desired without its origin: {d}")
        if "replicas" in d and len(d["replicas"]) != target:
            self.problems.append(f"{what}: desired replicas {d['replicas']} for R{target}")
        st = d.get("status")
        if st is not None:
            if st.get("type") not in STATUS_TYPES or not st.get("description"):
                self.problems.append(f"{what}: status {st}")
            self.seen_status.add(st.get("type"))

    async def settle(self, stream: str, want: dict, consumers: dict, label: str, wait: float = WAIT) -> None:
        """Poll until the stream (``want``: config replicas, group size) and its consumers (name -> group size)
        are there and no desired state is left, checking the rules on each info seen."""
        deadline = time.monotonic() + wait
        last: dict = {}
        while True:
            si = await self.info(stream)
            ok = bool(si)
            if si:
                self.check(f"{label} stream", si, want["replicas"], True)
                last["stream"] = si.get("cluster")
                ok = _size(si) == want["peers"] and "desired" not in si["cluster"] and si["cluster"].get("leader")
                ok = ok and all(r.get("current") for r in si["cluster"].get("replicas") or ())
            for cn, n in consumers.items():
                ci = await self.info(stream, cn)
                if not ci:
                    ok = False
                    continue
                self.check(f"{label} consumer {cn}", ci, n, False)
                last[cn] = ci.get("cluster")
                ok = ok and _size(ci) == n and "desired" not in ci["cluster"] and bool(ci["cluster"].get("leader"))
            if ok:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{label}: not settled, last seen {last}")
            await asyncio.sleep(0.05)

    async def end_state(self, label: str, stream: str, consumers: list[str]) -> dict:
        si = await self.info(stream)
        d: dict = {"stream": {"num_replicas": si["config"]["num_replicas"], "retention": si["config"]["retention"],
                              "peers": _size(si)}}
        for cn in consumers:
            ci = await self.info(stream, cn)
            d[cn] = {"num_replicas": ci["config"].get("num_replicas", 0), "peers": _size(ci)}
        self.record(label, d)
        return si


def _size(info: dict) -> int:
    cl = info.get("cluster") or {}
    return (1 if cl.get("leader") else 0) + len(cl.get("replicas") or ())


def _desired_shape(r: dict, down: int = 0) -> dict:
    """What both must agree on in an update's (cancel's) answer: the error, or the config's replicas and
    retention and the shape of ``cluster.desired``. ``down``: a scale down to that many replicas, whose peers
    to keep may be chosen before or after the answer (``desired.replicas`` absent until then)."""
    if "error" in r:
        return {"type": r.get("type"), "error": r["error"]}
    d = (r.get("cluster") or {}).get("desired")
    out: dict = {"type": r.get("type"), "num_replicas": r["config"]["num_replicas"],
                 "retention": r["config"]["retention"]}
    if d is not None:
        out["desired"] = {"named": bool(d.get("name")), "origin": d.get("origin"),
                          "replicas": len(d["replicas"]) if "replicas" in d else None}
        if down and out["desired"]["replicas"] in (None, down):
            out["desired"]["replicas"] = f"none yet or {down}"
    return out


def _consumer(name: str, replicas=None) -> dict:
    cfg: dict = {"durable_name": name, "ack_policy": "explicit"}
    if replicas is not None:
        cfg["num_replicas"] = replicas
    return cfg


async def _scenario(nc, names: list[str]) -> tuple[list, list, set]:
    run = Run(nc, names)
    deadline = time.monotonic() + WAIT
    while True:  # (nats-server may have no responder in the account right after electing)
        try:
            if "error" not in await run.api("$JS.API.INFO", timeout=2):
                break
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        assert time.monotonic() < deadline, "no JetStream API"
        await asyncio.sleep(0.2)

    async def create(name: str, cfg: dict, consumers: dict) -> None:
        r = await run.api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()], **cfg})
        assert "error" not in r, r
        await run.pub(name.lower(), 5)
        for cn, ccfg in consumers.items():
            r = await run.api(f"$JS.API.CONSUMER.CREATE.{name}.{cn}", {"stream_name": name, "config": ccfg})
            assert "error" not in r, r

    async def update(label: str, name: str, cfg: dict, down: int = 0) -> dict:
        r = await run.api(f"$JS.API.STREAM.UPDATE.{name}", {"name": name, "subjects": [name.lower()], **cfg})
        run.record(label, _desired_shape(r, down))
        return r

    # scale up R1 -> R3: a consumer without replicas follows (C0), an explicit R1 stays (C1)
    await create("UP", {"num_replicas": 1}, {"C0": _consumer("C0"), "C1": _consumer("C1", 1)})
    await update("scale up", "UP", {"num_replicas": 3})
    await run.settle("UP", {"replicas": 3, "peers": 3}, {"C0": 3, "C1": 1}, "scale up")
    await run.end_state("scale up, end", "UP", ["C0", "C1"])

    # consumers scaled by their own update (CONSUMER.CREATE): C1 up to R3, C0 down to R1 keeping its leader
    async def cupdate(label: str, cn: str, replicas: int, down: int = 0) -> None:
        r = await run.api(f"$JS.API.CONSUMER.CREATE.UP.{cn}", {"stream_name": "UP",
                                                               "config": _consumer(cn, replicas)})
        shape: dict = {"type": r.get("type")}
        if "error" in r:
            shape["error"] = r["error"]
        else:
            shape["num_replicas"] = r["config"]["num_replicas"]
            d = r["cluster"].get("desired")
            if d is not None:
                n = len(d["replicas"]) if "replicas" in d else None
                shape["desired"] = {"named": bool(d.get("name")), "origin": d.get("origin"),
                                    "replicas": f"none yet or {down}" if down and n in (None, down) else n}
        run.record(label, shape)
    c0_leader = (await run.info("UP", "C0"))["cluster"]["leader"]
    await cupdate("consumer scale up", "C1", 3)
    await cupdate("consumer scale down", "C0", 1, down=1)
    await run.settle("UP", {"replicas": 3, "peers": 3}, {"C0": 1, "C1": 3}, "consumer scales")
    await run.end_state("consumer scales, end", "UP", ["C0", "C1"])
    run.record("consumer scale down, leader kept", (await run.info("UP", "C0"))["cluster"]["leader"] == c0_leader)

    # scale up of an interest stream R1 -> R3: its R1 consumer follows (its config's replicas too); nats-server
    # 2.15.1 took 22 s here (two 10 s pauses before its stream leader acted), Rillet about one
    await create("UPI", {"num_replicas": 1, "retention": "interest"}, {"C1": _consumer("C1", 1)})
    await update("interest scale up", "UPI", {"num_replicas": 3, "retention": "interest"})
    await run.settle("UPI", {"replicas": 3, "peers": 3}, {"C1": 3}, "interest scale up", wait=WAIT + 30)
    await run.end_state("interest scale up, end", "UPI", ["C1"])

    # scale down R3 -> R1: the leader keeps it; consumers down with it (C3's config too), C1 onto the leader
    await create("DN", {"num_replicas": 3}, {"C0": _consumer("C0"), "C3": _consumer("C3", 3),
                                              "C1": _consumer("C1", 1)})
    await run.settle("DN", {"replicas": 3, "peers": 3}, {"C0": 3, "C3": 3, "C1": 1}, "scale down, before")
    leaders = {(await run.info("DN"))["cluster"]["leader"]}
    r = await update("scale down", "DN", {"num_replicas": 1}, down=1)
    leaders.add((r.get("cluster") or {}).get("leader"))  # (the one when the peers kept are chosen)
    await run.settle("DN", {"replicas": 1, "peers": 1}, {"C0": 1, "C3": 1, "C1": 1}, "scale down")
    si = await run.end_state("scale down, end", "DN", ["C0", "C3", "C1"])
    run.record("scale down, leader kept", si["cluster"]["leader"] in leaders)
    c1 = await run.info("DN", "C1")
    run.record("scale down, C1 on the stream's server", c1["cluster"]["leader"] == si["cluster"]["leader"])

    # retention limits -> interest on R3 with an R1 consumer: the consumer scaled up to R3 first
    await create("RT", {"num_replicas": 3}, {"C1": _consumer("C1", 1)})
    await run.settle("RT", {"replicas": 3, "peers": 3}, {"C1": 1}, "retention, before")
    await update("retention to interest", "RT", {"num_replicas": 3, "retention": "interest"})
    await run.settle("RT", {"replicas": 3, "peers": 3}, {"C1": 3}, "retention")
    await run.end_state("retention, end", "RT", ["C1"])

    # overlapping: a scale or a retention change while a move is under way is refused; two scales are taken
    await create("MV", {"num_replicas": 1, "placement": {"tags": ["t0"]}}, {})
    await update("move onto t1", "MV", {"num_replicas": 1, "placement": {"tags": ["t1"]}})
    await update("scale while moving", "MV", {"num_replicas": 3, "placement": {"tags": ["t1"]}})
    await update("retention change while moving", "MV", {"num_replicas": 1, "placement": {"tags": ["t1"]},
                                                         "retention": "interest"})
    await run.settle("MV", {"replicas": 1, "peers": 1}, {}, "move")
    si = await run.end_state("move, end", "MV", [])
    run.record("move, on", run.tag(si["cluster"]["leader"]))
    await create("SS", {"num_replicas": 1}, {"C0": _consumer("C0")})
    first = (await run.info("SS"))["cluster"]["leader"]
    await update("scale to R3", "SS", {"num_replicas": 3})
    await update("scale to R2 while scaling to R3", "SS", {"num_replicas": 2}, down=2)
    await run.settle("SS", {"replicas": 2, "peers": 2}, {"C0": 2}, "two scales")
    si = await run.end_state("two scales, end", "SS", ["C0"])
    run.record("two scales, leader kept", si["cluster"]["leader"] == first)

    # CANCEL_MOVE rolls a scale back: R1 again, on its server
    await create("CX", {"num_replicas": 1}, {"C0": _consumer("C0")})
    first = (await run.info("CX"))["cluster"]["leader"]
    await update("scale to cancel", "CX", {"num_replicas": 3})
    r = await run.api("$JS.API.STREAM.CANCEL_MOVE.CX")
    run.record("cancel", _desired_shape(r))
    await run.settle("CX", {"replicas": 1, "peers": 1}, {"C0": 1}, "cancel")
    si = await run.end_state("cancel, end", "CX", ["C0"])
    run.record("cancel, back on its server", si["cluster"]["leader"] == first)
    r = await run.api("$JS.API.STREAM.CANCEL_MOVE.CX")
    run.record("cancel, nothing left", _desired_shape(r))
    return run.out, run.problems, run.seen_status


def _get(port: int, path: str) -> dict:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).read())


def _go_run() -> tuple[list, list, set]:
    d = tempfile.mkdtemp(prefix="rillet-desired-go-")
    ports = [(free_port(), free_port(), free_port()) for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{c}" for _, c, _ in ports)
    procs, logs = [], []
    try:
        for i, (p, c, h) in enumerate(ports):
            path = f"{d}/s{i}.conf"
            with open(path, "w") as f:
                f.write(f'port: {p}\nhttp_port: {h}\nserver_name: g{i}\nserver_tags: ["t{i}"]\n'
                        f'jetstream {{ store_dir: "{d}/s{i}" }}\n'
                        f"cluster {{ name: gc, listen: 127.0.0.1:{c}, routes: [{routes}] }}\n")
            logs.append(open(f"{d}/s{i}.log", "w"))
            procs.append(subprocess.Popen([GO, "-c", path], stdout=subprocess.DEVNULL, stderr=logs[-1]))
        deadline = time.monotonic() + WAIT

        def settled() -> bool:
            """A meta leader every server knows, which has heard from both others."""
            metas = [_get(h, "/jsz").get("meta_cluster", {}) for _, _, h in ports]
            leaders = {m.get("leader") for m in metas}
            if len(leaders) != 1 or None in leaders:
                return False
            lead = next((m for i, m in enumerate(metas) if m.get("leader") == f"g{i}"), None)
            reps = (lead or {}).get("replicas") or []
            return len(reps) == 2 and all(r.get("current") and not r.get("offline") for r in reps)
        while True:
            try:
                if settled():
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the Go JetStream cluster did not settle")
            time.sleep(0.1)

        async def go() -> tuple[list, list, set]:
            nc = await nats.connect(f"nats://127.0.0.1:{ports[0][0]}")
            try:
                return await _scenario(nc, ["g0", "g1", "g2"])
            finally:
                await nc.close()
        return asyncio.run(go())
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
        shutil.rmtree(d, ignore_errors=True)


async def _rillet_run() -> tuple[list, list, set]:
    async with run_cluster(3, jetstream=True, server_fields=lambda i: {"tags": [f"t{i}"]}) as servers:
        deadline = time.monotonic() + WAIT
        while not all(len(s.jetstream.cluster.registry.nodes) == 3 and all(
                ni.tags for ni in s.jetstream.cluster.registry.nodes.values()) for s in servers):
            assert time.monotonic() < deadline, "tags not known everywhere"
            await asyncio.sleep(0.05)
        nc = await nats.connect(servers[0].client_url)
        try:
            return await _scenario(nc, [s.name for s in servers])
        finally:
            await nc.close()


async def test_desired_state_as_nats_server():
    rillet, problems, seen = await _rillet_run()
    assert not problems, problems
    assert seen & STATUS_TYPES, "no desired status seen while the changes were under way"
    if GO:
        go, go_problems, go_seen = await asyncio.get_running_loop().run_in_executor(None, _go_run)
        assert not go_problems, go_problems  # (the rules hold for nats-server too)
        assert go_seen & STATUS_TYPES
        for a, b in zip(rillet, go):
            assert a == b, f"Rillet {a}\n    nats-server {b}"
        assert rillet == go
    assert rillet == EXPECTED
