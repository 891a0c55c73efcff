"""Stream moves and evacuations in a Rillet JetStream cluster (rillet/jetstream/api/moves.py), as nats-server
2.15: ``$JS.API.ACCOUNT.STREAM.MOVE`` / ``ACCOUNT.STREAM.CANCEL_MOVE`` (system account), ``STREAM.CANCEL_MOVE``,
``STREAM.PEER.EVACUATE`` and ``SERVER.EVACUATE``: the streams end on the new servers with their
messages, and the errors are nats-server's (the same requests against a 3-server nats-server cluster are
compared in test_jscluster_moves_go.py)."""
from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

from rillet.config.options import User
from rillet.app.embed import run_cluster

USERS = [User(username="sys", password="sys", account="SYS"), User(username="a", password="a")]
WAIT = 30.0  # (CI: two loaded cores)


async def _until(cond, timeout: float = WAIT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _url(srv, user: str) -> str:
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


async def _api(nc, subject: str, body=None, timeout: float = 10.0) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    return json.loads((await nc.request(subject, data, timeout=timeout)).data)


async def _pub(nc, subject: str, body) -> None:
    """A publish, acknowledged: sent again while a new stream's interest has not reached this server."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            ack = await _api(nc, subject, body, timeout=5)
            assert "error" not in ack, ack
            return
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _ask(nc, subject: str) -> dict:
    """An info request, asked again while unanswered (a request that comes while a leader changes)."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return json.loads((await nc.request(subject, b"", timeout=2)).data)
        except nats.errors.TimeoutError:
            if time.monotonic() > deadline:
                raise


async def _info(nc, name: str) -> dict:
    return await _ask(nc, f"$JS.API.STREAM.INFO.{name}")


def _sa(srv, name: str):
    return srv.jetstream.cluster.state.stream("$G", name)


def _leader(servers):
    return next(s for s in servers if s.jetstream.cluster.is_leader())


def _on(servers, name: str) -> set:
    """The servers whose assignment of ``name`` (as the meta leader has it) lists them, once it is settled
    (no desired state) and exactly those servers hold a replica; else None."""
    sa = _sa(_leader(servers), name)
    if sa is None or sa.group.desired is not None:
        return None
    peers = set(sa.group.peers)
    names = set()
    for s in servers:
        has = s.jetstream.cluster.streams.replica("$G", name) is not None
        if has != (s.jetstream.cluster.peer in peers):
            return None
        if has:
            names.add(s.name)
    return names


def _hold(servers, name: str, hold: bool = True) -> None:
    """Keep the meta leader's reconciling off the stream (``_reconcile_tick`` skips a stream it is already
    reconciling), on every server: whichever is the meta leader."""
    for s in servers:
        r = s.jetstream.cluster._reconciling
        r.add(("$G", name)) if hold else r.discard(("$G", name))


def _messages(servers, name: str) -> list[int]:
    return sorted(s.jetstream.cluster.streams.replica("$G", name).stream.store.state().msgs for s in servers
                  if s.jetstream.cluster.streams.replica("$G", name) is not None)


@pytest.fixture
async def cluster():
    async with run_cluster(3, jetstream=True, system_account="SYS", users=USERS) as servers:
        yield servers


async def _r1(nc, name: str, n: int = 3) -> str:
    r = await _api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()],
                                                         "num_replicas": 1})
    assert "error" not in r, r
    for i in range(n):
        await _pub(nc, name.lower(), {"i": i})
    return r["cluster"]["leader"]


async def test_move_and_cancel_as_nats_server(cluster):
    nc = await nats.connect(_url(cluster[0], "a"))
    sysc = await nats.connect(_url(cluster[1], "sys"))
    try:
        src = await _r1(nc, "MV")
        others = [s.name for s in cluster if s.name != src]
        # errors, in nats-server's words and order
        assert (await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.NOPE", {}))["error"]["err_code"] == 10059
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.NOACC.MV", {})
        assert r == {"type": "io.nats.jetstream.api.v1.stream_update_response",
                     "error": {"code": 503, "err_code": 10035, "description": "account not found"}}, r
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.MV", {"server": "nosuch"})
        assert r["error"] == {"code": 400, "err_code": 10044,
                              "description": "server is not a member of the cluster"}, r
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.MV", {"server": others[0]})
        assert r["error"] == {"code": 400, "err_code": 10040, "description": "peer not a member"}, r
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.MV", {"bogus": 1})
        assert r["error"]["err_code"] == 10025, r
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.$G.MV")
        assert r["error"] == {"code": 400, "err_code": 10129,
                              "description": "stream reconfiguration not in progress"}, r
        r = await _api(nc, "$JS.API.STREAM.CANCEL_MOVE.MV")
        assert r == {"type": "io.nats.jetstream.api.v1.stream_cancel_move_response", "error": {
            "code": 400, "err_code": 10129, "description": "stream reconfiguration not in progress"}}, r
        r = await _api(nc, "$JS.API.STREAM.CANCEL_MOVE.NOPE")
        assert r["error"]["err_code"] == 10059, r

        # a move off its server: answered with the stream's info, then it ends elsewhere with its messages
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.MV", {"server": src})
        assert r["type"] == "io.nats.jetstream.api.v1.stream_update_response" and "error" not in r, r
        assert r["config"]["num_replicas"] == 1 and "placement" not in r["config"], r
        await _until(lambda: (_on(cluster, "MV") or {src}) != {src}, what="moved off its server")
        await _until(lambda: _messages(cluster, "MV") == [3], what="3 messages moved")
        info = await _info(nc, "MV")
        assert info["cluster"]["leader"] != src and info["state"]["messages"] == 3, info

        # the stream's account may move its own stream (nats-server: the subject names the requester's account)
        now = info["cluster"]["leader"]
        r = await _api(nc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.MV", {"server": now})
        assert "error" not in r and r["type"] == "io.nats.jetstream.api.v1.stream_update_response", r
        await _until(lambda: (_on(cluster, "MV") or {now}) != {now}, what="moved again")
        await _until(lambda: _messages(cluster, "MV") == [3], what="3 messages moved again")
        # ... but not another account's: no answer
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request("$JS.API.ACCOUNT.STREAM.MOVE.OTHER.MV", b"{}", timeout=1.0)
    finally:
        await nc.close()
        await sysc.close()


async def test_cancel_rolls_back_a_move_under_way(cluster):
    nc = await nats.connect(_url(cluster[2], "a"))
    sysc = await nats.connect(_url(cluster[0], "sys"))
    try:
        src = await _r1(nc, "CM", 5)
        ml = _leader(cluster)
        _hold(cluster, "CM")  # (the meta leader, whichever it is, holds the move where it is)
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.CM", {"server": src})
        assert "error" not in r, r
        ds = _sa(ml, "CM").group.desired
        assert ds["move"] and ds["origin"]["peers"] == _sa(ml, "CM").group.peers and ds["origin"]["replicas"] == 1
        # a second move, a scale: refused while it is under way
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.CM", {})
        assert r["error"] == {"code": 400, "err_code": 10124, "description": "stream move already in progress"}, r
        cfg = {"name": "CM", "subjects": ["cm"], "num_replicas": 3}
        r = await _api(nc, "$JS.API.STREAM.UPDATE.CM", cfg)
        assert r["error"]["err_code"] == 10124, r
        r = await _api(nc, "$JS.API.STREAM.CANCEL_MOVE.CM")
        assert "error" not in r and r["type"] == "io.nats.jetstream.api.v1.stream_cancel_move_response", r
        ds = _sa(ml, "CM").group.desired
        assert ds["peers"] == ds["origin"]["peers"] and ds["move"], ds
        _hold(cluster, "CM", False)
        await _until(lambda: _on(cluster, "CM") == {src}, what="back on its first server")
        assert _messages(cluster, "CM") == [5]
        r = await _api(nc, "$JS.API.STREAM.CANCEL_MOVE.CM")
        assert r["error"]["err_code"] == 10129, r

        # a scale R1 -> R2 cancelled: back to R1 on its server, config included
        _hold(cluster, "CM")
        r = await _api(nc, "$JS.API.STREAM.UPDATE.CM", dict(cfg, num_replicas=2))
        assert "error" not in r and r["config"]["num_replicas"] == 2, r
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.CM", {})
        assert r["error"] == {"code": 400, "err_code": 10226,
                              "description": "stream reconfiguration already in progress"}, r
        r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.$G.CM")
        assert "error" not in r and r["config"]["num_replicas"] == 1, r
        _hold(cluster, "CM", False)
        await _until(lambda: _on(cluster, "CM") == {src}, what="back to R1")
        info = await _info(nc, "CM")
        assert info["config"]["num_replicas"] == 1 and info["state"]["messages"] == 5, info
    finally:
        await nc.close()
        await sysc.close()


async def test_stream_peer_evacuate(cluster):
    nc = await nats.connect(_url(cluster[1], "a"))
    try:
        src = await _r1(nc, "EV")
        typ = "io.nats.jetstream.api.v1.stream_evacuate_peer_response"
        r = await _api(nc, "$JS.API.STREAM.PEER.EVACUATE.EV")
        assert r == {"type": typ, "error": {"code": 400, "err_code": 10003, "description": "bad request"}}, r
        r = await _api(nc, "$JS.API.STREAM.PEER.EVACUATE.EV", {"peer": "nosuch"})
        assert r == {"type": typ, "error": {"code": 400, "err_code": 10040, "description": "peer not a member"}}, r
        r = await _api(nc, "$JS.API.STREAM.PEER.EVACUATE.NOPE", {"peer": src})
        assert r["error"]["err_code"] == 10059, r
        # a durable consumer with two messages acked moves with its stream
        js = nc.jetstream()
        psub = await js.pull_subscribe("ev", "D", stream="EV")
        for m in await psub.fetch(2, timeout=10):
            await m.ack_sync(timeout=10)
        r = await _api(nc, "$JS.API.STREAM.PEER.EVACUATE.EV", {"peer": src})
        assert r == {"type": typ, "success": True}, r
        await _until(lambda: (_on(cluster, "EV") or {src}) != {src}, what="evacuated")
        await _until(lambda: _messages(cluster, "EV") == [3], what="3 messages kept")
        deadline = time.monotonic() + WAIT
        while True:
            ci = await _ask(nc, "$JS.API.CONSUMER.INFO.EV.D")
            if (ci.get("cluster") or {}).get("leader") not in (None, src):
                break
            assert time.monotonic() < deadline, ci
            await asyncio.sleep(0.1)
        assert ci["ack_floor"]["stream_seq"] == 2 and ci["num_pending"] == 1, ci
        # an R3 stream on three servers: nowhere to go (10075), nothing changes
        r = await _api(nc, "$JS.API.STREAM.CREATE.E3", {"name": "E3", "subjects": ["e3"], "num_replicas": 3})
        assert "error" not in r, r
        r = await _api(nc, "$JS.API.STREAM.PEER.EVACUATE.E3", {"peer": cluster[0].name})
        assert r == {"type": typ, "error": {"code": 503, "err_code": 10075, "description": "peer remap failed"}}, r
        assert _sa(_leader(cluster), "E3").group.desired is None
    finally:
        await nc.close()


async def test_server_evacuate(cluster):
    nc = await nats.connect(_url(cluster[0], "a"))
    sysc = await nats.connect(_url(cluster[2], "sys"))
    try:
        for name in ("V1", "V2"):
            r = await _api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()],
                                                                 "num_replicas": 1, "placement": None})
            assert "error" not in r, r
        r = await _api(nc, "$JS.API.STREAM.CREATE.V3", {"name": "V3", "subjects": ["v3"], "num_replicas": 3})
        assert "error" not in r, r
        for s in ("v1", "v2", "v3"):
            await _pub(nc, s, {"x": 1})
        victim = (await _info(nc, "V1"))["cluster"]["leader"]
        typ = "io.nats.jetstream.api.v1.meta_server_evacuate_response"
        r = await _api(sysc, "$JS.API.SERVER.EVACUATE")
        assert r == {"type": typ, "error": {"code": 400, "err_code": 10003, "description": "bad request"}}, r
        r = await _api(sysc, "$JS.API.SERVER.EVACUATE", {"peer": "nosuch"})
        assert r == {"type": typ, "error": {"code": 400, "err_code": 10044,
                                            "description": "server is not a member of the cluster"}}, r
        r = await _api(sysc, "$JS.API.SERVER.EVACUATE", {"peer": victim})
        assert r == {"type": typ, "success": True}, r
        # every stream off it: the R1 ones moved, the R3 one down to two replicas, the server excluded
        for name in ("V1", "V2"):
            await _until(lambda: (_on(cluster, name) or {victim}) - {victim} == (_on(cluster, name) or {victim}),
                         what=f"{name} off {victim}")
        await _until(lambda: _on(cluster, "V3") == {s.name for s in cluster} - {victim}, what="V3 on two")
        vid = next(s.jetstream.cluster.peer for s in cluster if s.name == victim)
        assert _sa(_leader(cluster), "V3").group.excluded == [vid]
        for name in ("V1", "V2", "V3"):
            info = await _info(nc, name)
            assert info["state"]["messages"] == 1 and info["cluster"]["leader"] != victim, info
        # the evacuated server stays out: no replica put back on it by the meta leader's healing
        await asyncio.sleep(2.5)  # (RECONCILE_EVERY: the healing looks every 2 s)
        assert _on(cluster, "V3") == {s.name for s in cluster} - {victim}
        # a non-system account gets no answer (nats-server: the system account's only)
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request("$JS.API.SERVER.EVACUATE", json.dumps({"peer": victim}).encode(), timeout=1.0)
    finally:
        await nc.close()
        await sysc.close()


async def _all_answers(nc, subject: str, body: bytes, n: int) -> list[dict]:
    """Every server's answer to a request they all receive (META.RESCUE), ``n`` of them, by server name."""
    inbox = nc.new_inbox()
    got: list[dict] = []

    async def cb(msg):
        got.append(json.loads(msg.data))
    sub = await nc.subscribe(inbox, cb=cb)
    await nc.publish(subject, body, reply=inbox)
    deadline = time.monotonic() + WAIT
    while len(got) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)  # (no more than n)
    await sub.unsubscribe()
    return sorted(got, key=lambda d: d.get("server", ""))


async def test_meta_rescue_refusals_from_every_server(cluster):
    sysc = await nats.connect(_url(cluster[0], "sys"))
    try:
        typ = "io.nats.jetstream.api.v1.meta_rescue_response"
        names = sorted(s.name for s in cluster)
        ids = {s.name: s.server_id for s in cluster}
        for body, err in [(b"", (10003, "bad request")), (b"{}", (10003, "bad request")),
                          (b'{"quorum_needed": 0}', (10224, "JetStream system rescue not applied: raft: rescue "
                                                            "quorum must be between 1 and current quorum")),
                          (b'{"quorum_needed": 5}', (10224, "JetStream system rescue not applied: raft: rescue "
                                                            "quorum must be between 1 and current quorum")),
                          (b'{"quorum_needed": 1}', (10224, "JetStream system rescue not applied: raft: leader is "
                                                            "known")),
                          (b'{"x": 1}', (10025, 'invalid JSON: json: unknown field "x"'))]:
            # (every server knowing the leader: else one between leaders would apply the rescue)
            await _until(lambda: all(s.jetstream.cluster.group.node.leader is not None for s in cluster),
                         what="the meta leader known everywhere")
            got = await _all_answers(sysc, "$JS.API.META.RESCUE", body, 3)
            assert got == [{"type": typ, "error": {"code": 400, "err_code": err[0], "description": err[1]},
                            "server": n, "server_id": ids[n]} for n in names], (body, got)
        assert all(s.jetstream.cluster.group.node.rescued_quorum is None for s in cluster)
    finally:
        await sysc.close()


async def test_meta_rescue_lets_the_survivor_lead_and_remove_the_lost():
    async with run_cluster(3, jetstream=True, system_account="SYS", users=USERS) as cluster:
        survivor, lost = cluster[0], cluster[1:]
        sysc = await nats.connect(_url(survivor, "sys"))
        advisories: list = []

        async def adv(msg):
            advisories.append(json.loads(msg.data))
        await sysc.subscribe("$JS.EVENT.ADVISORY.SERVER.META_RESCUE", cb=adv)
        try:
            for s in lost:
                await s.shutdown()
            cl = survivor.jetstream.cluster
            # until it knows no leader, the survivor refuses (nats-server: "leader is known")
            deadline = time.monotonic() + WAIT
            while True:
                got = await _all_answers(sysc, "$JS.API.META.RESCUE", b'{"quorum_needed": 1}', 1)
                if got and "error" not in got[0]:
                    break
                assert got and got[0]["error"]["description"].endswith("raft: leader is known"), got
                assert time.monotonic() < deadline, got
                await asyncio.sleep(0.5)
            assert got == [{"type": "io.nats.jetstream.api.v1.meta_rescue_response", "server": survivor.name,
                            "server_id": survivor.server_id, "prev_quorum": 2, "new_quorum": 1}], got
            await _until(lambda: cl.is_leader(), what="the survivor elected with the rescued quorum")
            jsz = cl.mon.jsz_meta()  # (/jsz meta_cluster, as nats-server shows a rescue)
            assert jsz["quorum_needed"] == 1 and jsz["rescue"] is True and jsz["cluster_size"] == 3, jsz
            await _until(lambda: bool(advisories), what="the advisory")
            a = advisories[0]
            assert a["type"] == "io.nats.jetstream.advisory.v1.meta_rescue" and a["server"] == survivor.name
            assert (a["prev_quorum"], a["new_quorum"], a["cluster"]) == (2, 1, cl.name), a
            # the lost servers removed one at a time; the rescue lasts while the voters left need more
            for s in lost:
                deadline = time.monotonic() + WAIT
                while True:
                    r = await _api(sysc, "$JS.API.SERVER.REMOVE", {"peer": s.name})
                    if r.get("success"):
                        break
                    assert r["error"]["err_code"] == 10202 and time.monotonic() < deadline, r  # (in flight)
                    await asyncio.sleep(0.2)
                await _until(lambda: s.jetstream.cluster.peer not in cl.group.node.voters, what="voter dropped")
                if s is lost[0]:
                    assert cl.group.node.quorum == 1 and cl.group.node.rescued_quorum == 1
            assert cl.group.node.voters == (cl.peer,) and cl.group.node.rescued_quorum is None
            assert "rescue" not in cl.mon.jsz_meta()
            # the JetStream API works again
            nc = await nats.connect(_url(survivor, "a"))
            try:
                r = await _api(nc, "$JS.API.STREAM.CREATE.AFTER", {"name": "AFTER", "subjects": ["after"]})
                assert "error" not in r and r["cluster"]["leader"] == survivor.name, r
            finally:
                await nc.close()
        finally:
            await sysc.close()


async def test_move_to_another_cluster_when_its_own_has_no_room():
    """nats-server's rule: a move picks a replacement in the stream's cluster first; with none there, the whole
    stream goes to another cluster that has room for every replica."""
    from rillet.app.embed import run_super_cluster
    async with run_super_cluster(2, 2, jetstream=True, system_account="SYS", users=USERS) as (a, b):
        servers = a + b
        await _until(lambda: sum(s.jetstream.cluster.is_leader() for s in servers) == 1, what="a meta leader")
        nc = await nats.connect(_url(b[0], "a"))
        sysc = await nats.connect(_url(a[1], "sys"))
        try:
            r = await _api(nc, "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"], "num_replicas": 2,
                                                           "placement": {"cluster": "A"}})
            assert r["cluster"]["name"] == "A", r
            for i in range(4):
                await _pub(nc, "x", {"i": i})
            r = await _api(sysc, "$JS.API.ACCOUNT.STREAM.MOVE.$G.X", {"server": a[0].name})
            assert "error" not in r and r["config"]["placement"] == {"cluster": "A"}, r
            deadline = time.monotonic() + WAIT
            while True:
                info = await _info(nc, "X")
                cl = info.get("cluster") or {}
                members = {cl.get("leader")} | {x["name"] for x in cl.get("replicas") or ()}
                if cl.get("name") == "B" and members == {s.name for s in b} and all(
                        x.get("current") for x in cl.get("replicas") or ()):
                    break
                assert time.monotonic() < deadline, cl
                await asyncio.sleep(0.1)
            assert info["state"]["messages"] == 4, info
            for s in a:
                await _until(lambda: s.jetstream.cluster.streams.replica("$G", "X") is None, what=f"{s.name} left")
        finally:
            await nc.close()
            await sysc.close()
