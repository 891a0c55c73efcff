"""Stream moves and evacuations, differential: the same requests against a 3-server Rillet JetStream cluster and
a 3-server nats-server 2.15 cluster (servers tagged t0, t1, t2), the answers compared (type, error code and
description, the config kept; META.RESCUE's refusal from each of the three servers) and where each stream ends (tests/test_jscluster_moves.py has the Rillet-only
cases: cancels under way, the excluded peer). Without the nats-server binary, Rillet's transcript is checked
against the one recorded from nats-server 2.15.1 (``EXPECTED``)."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request

import nats
import pytest

from helpers import free_port
from rillet.app.embed import run_cluster
from rillet.config.options import User

GO = shutil.which("nats-server")
WAIT = 40.0  # (CI: two loaded cores)
T = "io.nats.jetstream.api.v1."


# recorded from a 3-server nats-server 2.15.1 cluster (servers renamed t0, t1, t2)
def _err(code: int, err_code: int, description: str) -> dict:
    return {"code": code, "err_code": err_code, "description": description}


def _every(code: int, err_code: int, description: str) -> list:
    return [{"type": T + "meta_rescue_response", "error": _err(code, err_code, description), "server": f"t{i}"}
            for i in range(3)]


BAD_QUORUM = "JetStream system rescue not applied: raft: rescue quorum must be between 1 and current quorum"
EXPECTED = [
    ["rescue, empty", _every(400, 10003, "bad request")],
    ["rescue, quorum 0", _every(400, 10224, BAD_QUORUM)],
    ["rescue, quorum 5", _every(400, 10224, BAD_QUORUM)],
    ["rescue, leader known", _every(400, 10224, "JetStream system rescue not applied: raft: leader is known")],
    ["rescue, bad field", _every(400, 10025, 'invalid JSON: json: unknown field "q"')],
    ["move unknown stream", {"type": T + "stream_update_response", "error": _err(404, 10059, "stream not found")}],
    ["move unknown account", {"type": T + "stream_update_response", "error": _err(503, 10035, "account not found")}],
    ["move from unknown server",
     {"type": T + "stream_update_response", "error": _err(400, 10044, "server is not a member of the cluster")}],
    ["move from a server not holding it",
     {"type": T + "stream_update_response", "error": _err(400, 10040, "peer not a member")}],
    ["move with a bad field",
     {"type": T + "stream_update_response", "error": _err(400, 10025, "invalid JSON: json: unknown field \"bogus\"")}],
    ["move with a bad body",
     {"type": T + "stream_update_response",
      "error": _err(400, 10025, "invalid JSON: invalid character 'n' looking for beginning of object key string at offset 2")}],
    ["move against its placement",
     {"type": T + "stream_update_response",
      "error": _err(400, 10005, "no suitable peers for placement, tags not matched ['t0']")}],
    ["move, tags nobody has",
     {"type": T + "stream_update_response",
      "error": _err(400, 10005, "no suitable peers for placement, tags not matched ['t0']")}],
    ["cancel, none under way",
     {"type": T + "stream_cancel_move_response", "error": _err(400, 10129, "stream reconfiguration not in progress")}],
    ["cancel unknown stream",
     {"type": T + "stream_cancel_move_response", "error": _err(404, 10059, "stream not found")}],
    ["cancel unknown account",
     {"type": T + "stream_cancel_move_response", "error": _err(503, 10035, "account not found")}],
    ["account cancel, none under way",
     {"type": T + "stream_cancel_move_response", "error": _err(400, 10129, "stream reconfiguration not in progress")}],
    ["account cancel unknown stream",
     {"type": T + "stream_cancel_move_response", "error": _err(404, 10059, "stream not found")}],
    ["move with tags and the placement's",
     {"type": T + "stream_update_response",
      "error": _err(400, 10005, "no suitable peers for placement, tags not matched ['t0']")}],
    ["move onto t2",
     {"type": T + "stream_update_response", "config": {'name': 'MV2', 'num_replicas': 1, 'placement': None}}],
    ["account moves its own stream",
     {"type": T + "stream_update_response", "config": {'name': 'MV2', 'num_replicas': 1, 'placement': None}}],
    ["move of another account's stream",
     {"type": T + "stream_update_response", "error": _err(404, 10059, "stream not found")}],
    ["peer evacuate, empty", {"type": T + "stream_evacuate_peer_response", "error": _err(400, 10003, "bad request")}],
    ["peer evacuate, no peer", {"type": T + "stream_evacuate_peer_response", "error": _err(400, 10003, "bad request")}],
    ["peer evacuate, unknown peer",
     {"type": T + "stream_evacuate_peer_response", "error": _err(400, 10040, "peer not a member")}],
    ["peer evacuate, unknown stream",
     {"type": T + "stream_evacuate_peer_response", "error": _err(404, 10059, "stream not found")}],
    ["peer evacuate against its placement",
     {"type": T + "stream_evacuate_peer_response", "error": _err(503, 10075, "peer remap failed")}],
    ["peer evacuate", {"type": T + "stream_evacuate_peer_response", "success": True}],
    ["peer evacuate, no replacement",
     {"type": T + "stream_evacuate_peer_response", "error": _err(503, 10075, "peer remap failed")}],
    ["server evacuate, empty", {"type": T + "meta_server_evacuate_response", "error": _err(400, 10003, "bad request")}],
    ["server evacuate, unknown",
     {"type": T + "meta_server_evacuate_response", "error": _err(400, 10044, "server is not a member of the cluster")}],
    ["server evacuate, bad field",
     {"type": T + "meta_server_evacuate_response", "error": _err(400, 10025, "invalid JSON: json: unknown field \"x\"")}],
    ["server evacuate", {"type": T + "meta_server_evacuate_response", "success": True}],
    ["MV after the evacuation", ["t0"]],
]


def _shape(r: dict) -> dict:
    """What both must agree on: the type, the error, and of a stream info the replicas and placement."""
    out: dict = {"type": r.get("type")}
    if "error" in r:
        out["error"] = r["error"]
    elif "config" in r:
        out["config"] = {k: r["config"].get(k) for k in ("name", "num_replicas", "placement")}
    elif "success" in r:
        out["success"] = r["success"]
    return out


async def _scenario(acc: str, names: list[str], a_url: str, sys_url: str, leader_known=None) -> list:
    """The transcript: (step, answer's shape) in order; ``names`` are the servers tagged t0, t1, t2.
    ``leader_known``: a wait until every server knows the meta leader (before a rescue it must refuse)."""
    out: list = []
    nc = await nats.connect(a_url)
    sysc = await nats.connect(sys_url)

    async def api(c, subject: str, body=None) -> dict:
        data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
        return json.loads((await c.request(subject, data, timeout=10)).data)

    async def pub(subject: str, data: bytes) -> None:
        """A publish, acknowledged: sent again while the new stream's interest has not reached this server."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                ack = json.loads((await nc.request(subject, data, timeout=5)).data)
                assert "error" not in ack, ack
                return
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def step(label: str, c, subject: str, body=None) -> dict:
        r = await api(c, subject, body)
        out.append((label, _shape(r)))
        return r

    async def until(label: str, cond) -> None:
        deadline = time.monotonic() + WAIT
        info: dict = {}
        while True:
            try:  # (a request that comes while the stream's leader changes goes unanswered: asked again)
                info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{label}", b"", timeout=2)).data)
            except nats.errors.TimeoutError:
                info = {}
            if info and cond(info):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{label}: timed out, last info {info}")
            await asyncio.sleep(0.2)

    def on(info: dict) -> set:
        cl = info.get("cluster") or {}
        return {cl.get("leader")} | {r["name"] for r in cl.get("replicas") or ()}

    async def step_after_move(label: str, c, subject: str, body=None) -> dict:
        """``step``, asked again while the stream's previous move is still finishing (10124: nats-server may
        still hold its desired state a moment after the stream's info shows it on its new server)."""
        deadline = time.monotonic() + WAIT
        while True:
            r = await api(c, subject, body)
            if (r.get("error") or {}).get("err_code") != 10124 or time.monotonic() > deadline:
                out.append((label, _shape(r)))
                return r
            await asyncio.sleep(0.2)

    deadline = time.monotonic() + WAIT
    while True:  # (the API answers in the account: nats-server may have no responder yet right after electing)
        try:
            if "error" not in await api(nc, "$JS.API.INFO"):
                break
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        assert time.monotonic() < deadline, "no JetStream API in the account"
        await asyncio.sleep(0.2)
    async def every(label: str, subject: str, body: bytes) -> None:
        """A request every server answers (META.RESCUE): the three answers, without the server ids."""
        inbox = sysc.new_inbox()
        got: list = []

        async def cb(msg):
            got.append({k: v for k, v in json.loads(msg.data).items() if k != "server_id"})
        sub = await sysc.subscribe(inbox, cb=cb)
        await sysc.publish(subject, body, reply=inbox)
        deadline = time.monotonic() + WAIT
        while len(got) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await sub.unsubscribe()
        out.append((label, sorted(got, key=lambda d: d.get("server", ""))))

    try:
        for label, body in (("rescue, empty", b""), ("rescue, quorum 0", b'{"quorum_needed": 0}'),
                            ("rescue, quorum 5", b'{"quorum_needed": 5}'),
                            ("rescue, leader known", b'{"quorum_needed": 1}'), ("rescue, bad field", b'{"q": 1}')):
            if leader_known is not None and label == "rescue, leader known":
                await leader_known()  # (else a server between leaders would apply it)
            await every(label, "$JS.API.META.RESCUE", body)
        # MV: R1 on the server tagged t0 (its placement); MV2: R1 on t1, placed there, then without placement
        for name, tag in (("MV", "t0"), ("MV2", "t1")):
            r = await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()],
                                                                "num_replicas": 1, "placement": {"tags": [tag]}})
            assert "error" not in r, r
            for i in range(3):
                await pub(name.lower(), json.dumps({"i": i}).encode())
        r = await api(nc, "$JS.API.STREAM.UPDATE.MV2", {"name": "MV2", "subjects": ["mv2"], "num_replicas": 1})
        assert "error" not in r, r
        mv = f"$JS.API.ACCOUNT.STREAM.MOVE.{acc}"
        cancel = f"$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.{acc}"
        await step("move unknown stream", sysc, f"{mv}.NOPE", {})
        await step("move unknown account", sysc, "$JS.API.ACCOUNT.STREAM.MOVE.NOACC.MV", {})
        await step("move from unknown server", sysc, f"{mv}.MV", {"server": "nosuch"})
        await step("move from a server not holding it", sysc, f"{mv}.MV", {"server": names[1]})
        await step("move with a bad field", sysc, f"{mv}.MV", {"bogus": 1})
        await step("move with a bad body", sysc, f"{mv}.MV", b"{nope")
        await step("move against its placement", sysc, f"{mv}.MV", {"server": names[0]})
        await step("move, tags nobody has", sysc, f"{mv}.MV", {"tags": ["nowhere"]})
        await step("cancel, none under way", sysc, f"{cancel}.MV")
        await step("cancel unknown stream", sysc, f"{cancel}.NOPE")
        await step("cancel unknown account", sysc, "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.NOACC.MV")
        await step("account cancel, none under way", nc, "$JS.API.STREAM.CANCEL_MOVE.MV")
        await step("account cancel unknown stream", nc, "$JS.API.STREAM.CANCEL_MOVE.NOPE")
        # MV2 off t1 onto t2 (the request's tags), then by its own account onto t0
        await step("move with tags and the placement's", sysc, f"{mv}.MV", {"tags": ["t1"]})
        await step("move onto t2", sysc, f"{mv}.MV2", {"server": names[1], "tags": ["t2"]})
        await until("MV2", lambda i: on(i) == {names[2]} and i["state"]["messages"] == 3)
        await step_after_move("account moves its own stream", nc, f"{mv}.MV2", {"server": names[2], "tags": ["t0"]})
        await until("MV2", lambda i: on(i) == {names[0]} and i["state"]["messages"] == 3)
        await step("move of another account's stream", sysc, "$JS.API.ACCOUNT.STREAM.MOVE.SYS.MV2", {})
        # evacuations
        await step("peer evacuate, empty", nc, "$JS.API.STREAM.PEER.EVACUATE.MV")
        await step("peer evacuate, no peer", nc, "$JS.API.STREAM.PEER.EVACUATE.MV", {"peer": ""})
        await step("peer evacuate, unknown peer", nc, "$JS.API.STREAM.PEER.EVACUATE.MV", {"peer": "nosuch"})
        await step("peer evacuate, unknown stream", nc, "$JS.API.STREAM.PEER.EVACUATE.NOPE", {"peer": names[0]})
        await step("peer evacuate against its placement", nc, "$JS.API.STREAM.PEER.EVACUATE.MV", {"peer": names[0]})
        r = await api(nc, "$JS.API.STREAM.CREATE.E1", {"name": "E1", "subjects": ["e1"], "num_replicas": 1,
                                                       "placement": {"tags": ["t2"]}})
        assert "error" not in r, r
        r = await api(nc, "$JS.API.STREAM.UPDATE.E1", {"name": "E1", "subjects": ["e1"], "num_replicas": 1})
        assert "error" not in r, r
        await pub("e1", b"x")
        await step("peer evacuate", nc, "$JS.API.STREAM.PEER.EVACUATE.E1", {"peer": names[2]})
        await until("E1", lambda i: names[2] not in on(i) and i["state"]["messages"] == 1)
        r = await api(nc, "$JS.API.STREAM.CREATE.E3", {"name": "E3", "subjects": ["e3"], "num_replicas": 3})
        assert "error" not in r, r
        await pub("e3", b"x")
        await step("peer evacuate, no replacement", nc, "$JS.API.STREAM.PEER.EVACUATE.E3", {"peer": names[0]})
        await step("server evacuate, empty", sysc, "$JS.API.SERVER.EVACUATE")
        await step("server evacuate, unknown", sysc, "$JS.API.SERVER.EVACUATE", {"peer": "nosuch"})
        await step("server evacuate, bad field", sysc, "$JS.API.SERVER.EVACUATE", {"peer": names[0], "x": 1})
        await step("server evacuate", sysc, "$JS.API.SERVER.EVACUATE", {"peer": names[0]})
        # E3 left on the other two; MV stays (its placement allows t0 only: no replacement, left short)
        await until("E3", lambda i: on(i) == {names[1], names[2]} and i["state"]["messages"] == 1)
        await until("MV2", lambda i: names[0] not in on(i) and i["state"]["messages"] == 3)
        info = await api(nc, "$JS.API.STREAM.INFO.MV")
        out.append(("MV after the evacuation", sorted(on(info))))
        with pytest.raises(nats.errors.TimeoutError):  # (not the system account: no answer)
            await nc.request("$JS.API.SERVER.EVACUATE", b'{"peer": "x"}', timeout=1.0)
    finally:
        await nc.close()
        await sysc.close()
    return out


def _get(port: int, path: str) -> dict:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).read())


def _go_transcript() -> list:
    d = tempfile.mkdtemp(prefix="rillet-moves-go-")
    ports = [(free_port(), free_port(), free_port()) for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{c}" for _, c, _ in ports)
    procs, logs = [], []
    try:
        for i, (p, c, h) in enumerate(ports):
            path = f"{d}/s{i}.conf"
            with open(path, "w") as f:
                f.write(f'port: {p}\nhttp_port: {h}\nserver_name: g{i}\nserver_tags: ["t{i}"]\n'
                        f'jetstream {{ store_dir: "{d}/s{i}" }}\n'
                        f"cluster {{ name: gc, listen: 127.0.0.1:{c}, routes: [{routes}] }}\n"
                        "accounts { SYS { users [{user: sys, password: sys}] }, "
                        "A { jetstream: enabled, users [{user: a, password: a}] } }\nsystem_account: SYS\n")
            logs.append(open(f"{d}/s{i}.log", "w"))
            procs.append(subprocess.Popen([GO, "-c", path], stdout=subprocess.DEVNULL, stderr=logs[-1]))
        deadline = time.monotonic() + WAIT

        def settled() -> bool:
            """A meta leader every server knows, which has heard from both others (nats-server counts a server
            it has no statsz from yet as an offline peer: "peer offline" in placement errors)."""
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
        return asyncio.run(_scenario("A", ["g0", "g1", "g2"], f"nats://a:a@127.0.0.1:{ports[0][0]}",
                                     f"nats://sys:sys@127.0.0.1:{ports[1][0]}"))
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
    async with run_cluster(3, jetstream=True, system_account="SYS", users=users,
                           server_fields=lambda i: {"tags": [f"t{i}"]}) as servers:
        names = [s.name for s in servers]

        def tagged() -> bool:
            return all(len(s.jetstream.cluster.registry.nodes) == 3 and all(
                ni.tags for ni in s.jetstream.cluster.registry.nodes.values()) for s in servers)
        deadline = time.monotonic() + WAIT
        while not tagged():
            assert time.monotonic() < deadline, "tags not known everywhere"
            await asyncio.sleep(0.05)
        async def leader_known() -> None:
            deadline = time.monotonic() + WAIT
            while len({s.jetstream.cluster.group.node.leader for s in servers} - {None}) != 1 \
                    or any(s.jetstream.cluster.group.node.leader is None for s in servers):
                assert time.monotonic() < deadline, "no meta leader known everywhere"
                await asyncio.sleep(0.05)
        url = servers[0].client_url
        return await _scenario("$G", names, url.replace("nats://", "nats://a:a@"),
                               servers[1].client_url.replace("nats://", "nats://sys:sys@"), leader_known)


def _names(transcript: list, names: list[str]) -> list:
    """Server names replaced by t0, t1, t2."""
    text = json.dumps(transcript)
    for i, n in enumerate(names):
        text = text.replace(json.dumps(n), json.dumps(f"t{i}"))
    return json.loads(text)


async def test_moves_and_evacuations_as_nats_server():
    rillet = await _rillet_transcript()
    rillet = _names(rillet, ["rillet-0", "rillet-1", "rillet-2"])
    if GO:
        go = await asyncio.get_running_loop().run_in_executor(None, _go_transcript)
        go = _names(go, ["g0", "g1", "g2"])
        for a, b in zip(rillet, go):
            assert a == b, f"Rillet {a}\n    nats-server {b}"
        assert rillet == go
    assert rillet == EXPECTED
