"""``jetstream { limits { max_ha_assets: 2 } }`` in a 3-server JetStream cluster, differential: the same requests
against Rillet and nats-server 2.15 (without the nats-server binary, Rillet's transcript is checked against the
one recorded from nats-server 2.15.1, ``EXPECTED``).

As nats-server 2.15.1 does (seen live; its log: "Peer selection: discard ... (HA Asset Count: 2) exceeds max ha
asset limit of 2"): the meta leader counts, per server, the replicated stream and consumer groups assigned to it
(at once, from the assignments) and leaves a server with as many as the limit out of a replicated stream's
placement ("miscellaneous issue"; an R1 stream is placed regardless), and refuses a new replicated consumer on
one (insufficient resources, 10023). A server's statsz ``ha_assets`` is its RAFT nodes, the meta group
included: awaited on the system account (both send statsz every 10 seconds), not slept for."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time

import nats

from helpers import free_port
from rillet.app.embed import run_cluster
from rillet.config.options import JetStreamOptions, User

GO = shutil.which("nats-server")
WAIT = 60.0  # (CI: two loaded cores; statsz every 10 s)
T = "io.nats.jetstream.api.v1."
LIMIT = 2


def _err(code: int, err_code: int, description: str) -> dict:
    return {"code": code, "err_code": err_code, "description": description}


MISC = _err(400, 10005, "no suitable peers for placement, miscellaneous issue")
NO_RES = _err(503, 10023, "insufficient resources")
# recorded from a 3-server nats-server 2.15.1 cluster
EXPECTED = [
    ["S1 R3", {"type": T + "stream_create_response", "replicas": 3}],
    ["R3 consumer C", {"type": T + "consumer_create_response", "replicas": 0}],
    ["S2 R3, the consumer counted", {"type": T + "stream_create_response", "error": MISC}],
    ["R3 consumer D", {"type": T + "consumer_create_response", "error": NO_RES}],
    ["statsz ha_assets", [3, 3, 3]],
    ["C deleted", {"type": T + "consumer_delete_response", "success": True}],
    ["S2 R3 once C is gone", {"type": T + "stream_create_response", "replicas": 3}],
    ["S3 R3 over the limit", {"type": T + "stream_create_response", "error": MISC}],
    ["S4 R1", {"type": T + "stream_create_response", "replicas": 1}],
    ["R3 consumer E", {"type": T + "consumer_create_response", "error": NO_RES}],
    ["R1 consumer", {"type": T + "consumer_create_response", "replicas": 1}],
    ["statsz ha_assets", [3, 3, 3]],
    ["S2 deleted", {"type": T + "stream_delete_response", "success": True}],
    ["statsz ha_assets", [2, 2, 2]],
    ["S3 R3 once S2 is gone", {"type": T + "stream_create_response", "replicas": 3}],
    ["statsz ha_assets", [3, 3, 3]],
]


def _shape(r: dict) -> dict:
    out: dict = {"type": r.get("type")}
    if "error" in r:
        out["error"] = r["error"]
    elif "config" in r:
        out["replicas"] = r["config"].get("num_replicas")
    elif "success" in r:
        out["success"] = r["success"]
    return out


async def _scenario(a_url: str, sys_url: str, names: list | None = None) -> list:
    out: list = []
    nc = await nats.connect(a_url)
    sysc = await nats.connect(sys_url)
    ha: dict[str, int] = {}

    async def on_statsz(m) -> None:
        d = json.loads(m.data)
        ha[d["server"]["name"]] = ((d.get("statsz") or {}).get("jetstream") or {}).get("stats", {}).get("ha_assets")

    sub = await sysc.subscribe("$SYS.SERVER.*.STATSZ", cb=on_statsz)
    await sysc.flush()

    async def api(subj: str, body: dict | None = None) -> dict:
        m = await nc.request(subj, json.dumps(body).encode() if body is not None else b"", timeout=10)
        return json.loads(m.data)

    async def step(label: str, subj: str, body: dict | None = None) -> dict:
        r = await api(subj, body)
        out.append([label, _shape(r)])
        return r

    async def statsz_show(n: int) -> None:
        """Every server's statsz shows ``n`` HA assets."""
        deadline = time.monotonic() + WAIT
        while len(ha) < 3 or any(v != n for v in ha.values()):
            assert time.monotonic() < deadline, f"statsz ha_assets {ha}, waiting for {n}"
            await asyncio.sleep(0.1)
        out.append(["statsz ha_assets", sorted(ha.values())])

    async def until_ok(label: str, subj: str, body: dict | None = None) -> None:
        """``step`` once the request succeeds (an assignment deleted just before may not be applied yet)."""
        deadline = time.monotonic() + WAIT
        while "error" in (r := await api(subj, body)):
            assert time.monotonic() < deadline, (label, r)
            await asyncio.sleep(0.2)
        out.append([label, _shape(r)])

    def stream(name: str, replicas: int) -> tuple[str, dict]:
        return f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()], "num_replicas": replicas}

    def consumer(name: str, replicas: int = 0) -> tuple[str, dict]:
        cfg = {"durable_name": name, "ack_policy": "explicit", **({"num_replicas": replicas} if replicas else {})}
        return f"$JS.API.CONSUMER.CREATE.S1.{name}", {"stream_name": "S1", "config": cfg}

    try:
        await step("S1 R3", *stream("S1", 3))
        await step("R3 consumer C", *consumer("C"))
        await step("S2 R3, the consumer counted", *stream("S2", 3))
        await step("R3 consumer D", *consumer("D"))
        await statsz_show(LIMIT + 1)  # the meta group, S1 and C
        await step("C deleted", "$JS.API.CONSUMER.DELETE.S1.C")
        await until_ok("S2 R3 once C is gone", *stream("S2", 3))
        await step("S3 R3 over the limit", *stream("S3", 3))
        await step("S4 R1", *stream("S4", 1))
        await step("R3 consumer E", *consumer("E"))
        await step("R1 consumer", *consumer("R1", 1))
        await statsz_show(LIMIT + 1)  # the meta group, S1 and S2 (R1 groups are not RAFT groups)
        await step("S2 deleted", "$JS.API.STREAM.DELETE.S2")
        await statsz_show(LIMIT)  # the meta group and S1
        await until_ok("S3 R3 once S2 is gone", *stream("S3", 3))
        await statsz_show(LIMIT + 1)  # the meta group, S1 and S3
    finally:
        await sub.unsubscribe()
        await nc.close()
        await sysc.close()
    return out


def _go_transcript() -> list:
    return _go_run([LIMIT] * 3, _scenario, probe=True)


def _go_run(limits: list[int], scenario, probe: bool = False) -> list:
    """``scenario(a_url, sys_url, names)`` against 3 nats-servers, server i with ``max_ha_assets: limits[i]`` (0: none);
    ``probe``: once an R3 stream can be placed (created and deleted again)."""
    d = tempfile.mkdtemp(prefix="rillet-ha-go-")
    ports = [(free_port(), free_port()) for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{c}" for _, c in ports)
    procs, logs = [], []
    try:
        for i, (p, c) in enumerate(ports):
            path = f"{d}/s{i}.conf"
            lim = f", limits {{ max_ha_assets: {limits[i]} }}" if limits[i] else ""
            with open(path, "w") as f:
                f.write(f'port: {p}\nserver_name: g{i}\n'
                        f'jetstream {{ store_dir: "{d}/s{i}"{lim} }}\n'
                        f"cluster {{ name: gc, listen: 127.0.0.1:{c}, routes: [{routes}] }}\n"
                        "accounts { SYS { users [{user: sys, password: sys}] }, "
                        "A { jetstream: enabled, users [{user: a, password: a}] } }\nsystem_account: SYS\n")
            logs.append(open(f"{d}/s{i}.log", "w"))
            procs.append(subprocess.Popen([GO, "-c", path], stdout=subprocess.DEVNULL, stderr=logs[-1]))

        async def run() -> list:
            # a meta leader that has heard from both others: an R3 stream can be placed
            nc = await nats.connect(f"nats://a:a@127.0.0.1:{ports[0][0]}", max_reconnect_attempts=-1)
            try:
                deadline = time.monotonic() + WAIT
                while probe:
                    try:
                        m = await nc.request("$JS.API.STREAM.CREATE.PROBE", json.dumps(
                            {"name": "PROBE", "subjects": ["probe"], "num_replicas": 3}).encode(), timeout=5)
                        if "error" not in json.loads(m.data):
                            break
                    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                        pass
                    assert time.monotonic() < deadline, "the Go JetStream cluster did not settle"
                    await asyncio.sleep(0.5)
                if probe:
                    m = await nc.request("$JS.API.STREAM.DELETE.PROBE", b"", timeout=10)
                    assert json.loads(m.data).get("success"), m.data
            finally:
                await nc.close()
            return await scenario(f"nats://a:a@127.0.0.1:{ports[0][0]}", f"nats://sys:sys@127.0.0.1:{ports[1][0]}",
                                  [f"g{i}" for i in range(3)])

        time.sleep(0.5)
        return asyncio.run(run())
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


async def _rillet_transcript() -> list:
    users = [User(username="sys", password="sys", account="SYS"), User(username="a", password="a")]
    lim = {"jetstream": JetStreamOptions(extra={"limits": {"max_ha_assets": LIMIT}})}
    async with run_cluster(3, jetstream=True, system_account="SYS", users=users,
                           server_fields=lambda i: dict(lim)) as servers:
        deadline = time.monotonic() + WAIT
        while not all(len(s.jetstream.cluster.registry.nodes) == 3 and all(
                ni.stats is not None for ni in s.jetstream.cluster.registry.nodes.values()) for s in servers):
            assert time.monotonic() < deadline, "statsz not known everywhere"
            await asyncio.sleep(0.05)
        return await _scenario(servers[0].client_url.replace("nats://", "nats://a:a@"),
                               servers[1].client_url.replace("nats://", "nats://sys:sys@"))


async def test_max_ha_assets_as_nats_server():
    rillet = await _rillet_transcript()
    if GO:
        go = await asyncio.get_running_loop().run_in_executor(None, _go_transcript)
        for a, b in zip(rillet, go):
            assert a == b, f"Rillet {a}\n    nats-server {b}"
        assert rillet == go
    assert rillet == EXPECTED


# ---- a member's own, lower limit ---------------------------------------------------------------------------------

# what nats-server 2.15.1 answers when only the third server has max_ha_assets: 1 and another server, without a limit,
# leads the meta group: the meta leader places by its own limit (none), and the member runs the new groups past its
# own limit. (nats-server's source has a member-side check in createRaftGroup, "Maximum HA Assets limit reached" and
# 10049 "system limit reached" to the client; the 2.15.1 binary, seen live, never logs it nor refuses, and the
# member's statsz shows the groups it runs: Rillet does the same.)
MEMBER_EXPECTED = [
    ["S1 R3", {"type": T + "stream_create_response", "replicas": 3}],
    ["S2 R3, the member past its own limit", {"type": T + "stream_create_response", "replicas": 3}],
    ["S2 info", {"type": T + "stream_info_response", "replicas": 3}],
    ["statsz ha_assets", [3, 3, 3]],
    ["S3 R3", {"type": T + "stream_create_response", "replicas": 3}],
    ["S4 R1", {"type": T + "stream_create_response", "replicas": 1}],
    ["statsz ha_assets", [4, 4, 4]],
    ["S1 deleted", {"type": T + "stream_delete_response", "success": True}],
    ["statsz ha_assets", [3, 3, 3]],
]


async def _member_scenario(a_url: str, sys_url: str, names: list) -> list:
    out: list = []
    nc = await nats.connect(a_url)
    sysc = await nats.connect(sys_url)
    stats: dict[str, dict] = {}

    async def on_statsz(m) -> None:
        d = json.loads(m.data)
        stats[d["server"]["name"]] = (d.get("statsz") or {}).get("jetstream") or {}

    sub = await sysc.subscribe("$SYS.SERVER.*.STATSZ", cb=on_statsz)
    inbox = sysc.new_inbox()
    isub = await sysc.subscribe(inbox, cb=on_statsz)
    await sysc.flush()

    async def meta_leader() -> str:
        stats.clear()
        await sysc.publish("$SYS.REQ.SERVER.PING.STATSZ", b"", reply=inbox)  # (every server answers)
        deadline = time.monotonic() + 5
        while len(stats) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        leaders = {(js.get("meta") or {}).get("leader", "") for js in stats.values()}
        return leaders.pop() if len(leaders) == 1 else ""

    async def api(subj: str, body: dict | None = None) -> dict:
        m = await nc.request(subj, json.dumps(body).encode() if body is not None else b"", timeout=10)
        return json.loads(m.data)

    async def step(label: str, subj: str, body: dict | None = None) -> dict:
        r = await api(subj, body)
        out.append([label, _shape(r)])
        return r

    async def until(label: str, subj: str, done, body: dict | None = None) -> None:
        deadline = time.monotonic() + WAIT
        while not done(r := await api(subj, body)):
            assert time.monotonic() < deadline, (label, r)
            await asyncio.sleep(0.2)
        out.append([label, _shape(r)])

    async def statsz_show(n: int) -> None:
        deadline = time.monotonic() + WAIT
        while True:
            await meta_leader()
            ha = sorted((js.get("stats") or {}).get("ha_assets") for js in stats.values())
            if ha == [n] * 3:
                break
            assert time.monotonic() < deadline, f"statsz ha_assets {ha}, waiting for {n}"
            await asyncio.sleep(0.5)
        out.append(["statsz ha_assets", ha])

    def stream(name: str, replicas: int) -> tuple[str, dict]:
        return f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()], "num_replicas": replicas}

    try:
        # the meta leader must be a server without the limit (the limited one would place by its own); and every
        # server known to it (an R3 probe stream placed, then deleted)
        deadline = time.monotonic() + WAIT
        while True:
            leader = await meta_leader()
            if leader and leader != names[2]:
                r = await api(*stream("PROBE", 3))
                if "error" not in r:
                    assert (await api("$JS.API.STREAM.DELETE.PROBE")).get("success")
                    await statsz_show(1)  # (the probe's groups gone everywhere)
                    out.clear()
                    break
            elif leader:
                await sysc.request("$JS.API.META.LEADER.STEPDOWN", json.dumps(
                    {"placement": {"preferred": names[0]}}).encode(), timeout=10)
            assert time.monotonic() < deadline, f"meta leader {leader!r}"
            await asyncio.sleep(0.5)
        await step("S1 R3", *stream("S1", 3))
        await step("S2 R3, the member past its own limit", *stream("S2", 3))
        await until("S2 info", "$JS.API.STREAM.INFO.S2", lambda r: "error" not in r)
        await statsz_show(3)  # the meta group, S1 and S2, on every server
        await step("S3 R3", *stream("S3", 3))
        await step("S4 R1", *stream("S4", 1))
        await statsz_show(4)
        await step("S1 deleted", "$JS.API.STREAM.DELETE.S1")
        await statsz_show(3)
    finally:
        await sub.unsubscribe()
        await isub.unsubscribe()
        await nc.close()
        await sysc.close()
    return out


async def _rillet_member_transcript() -> list:
    users = [User(username="sys", password="sys", account="SYS"), User(username="a", password="a")]
    lim = {"jetstream": JetStreamOptions(extra={"limits": {"max_ha_assets": 1}})}
    async with run_cluster(3, jetstream=True, system_account="SYS", users=users,
                           server_fields=lambda i: dict(lim) if i == 2 else {}) as servers:
        deadline = time.monotonic() + WAIT
        while not all(len(s.jetstream.cluster.registry.nodes) == 3 and all(
                ni.stats is not None for ni in s.jetstream.cluster.registry.nodes.values()) for s in servers):
            assert time.monotonic() < deadline, "statsz not known everywhere"
            await asyncio.sleep(0.05)
        return await _member_scenario(servers[0].client_url.replace("nats://", "nats://a:a@"),
                                      servers[1].client_url.replace("nats://", "nats://sys:sys@"),
                                      [s.name for s in servers])


async def test_member_with_a_lower_limit_runs_what_the_meta_leader_places_as_nats_server():
    rillet = await _rillet_member_transcript()
    if GO:
        go = await asyncio.get_running_loop().run_in_executor(None, _go_run, [0, 0, 1], _member_scenario)
        for a, b in zip(rillet, go):
            assert a == b, f"Rillet {a}\n    nats-server {b}"
        assert rillet == go
    assert rillet == MEMBER_EXPECTED
