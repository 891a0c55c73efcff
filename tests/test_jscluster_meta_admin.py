"""Meta-leader administration in a 3-server in-process Rillet JetStream cluster, with the JSON a live
3-server nats-server 2.15.1 cluster gave: META.LEADER.STEPDOWN with ``placement`` (2.11+), ACCOUNT.PURGE,
account info usage summed over the replicas, SERVER.REMOVE moving a stream to another server."""
from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

from rillet.config.options import User
from rillet.app.embed import run_cluster, wait_meta_leader

T = "io.nats.jetstream.api.v1."
USERS = [User(username="sys", password="sys", account="SYS"), User(username="a", password="a")]


async def _until(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _url(srv, user: str) -> str:
    return srv.client_url.replace("nats://", f"nats://{user}:{user}@")


async def _api(nc, subject: str, body=None, timeout: float = 5.0) -> dict:
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    return json.loads((await nc.request(subject, data, timeout=timeout)).data)


@pytest.fixture
async def cluster():
    async with run_cluster(3, jetstream=True, system_account="SYS", users=USERS) as servers:
        yield servers


async def test_meta_stepdown_with_placement(cluster):
    leader = await wait_meta_leader(cluster)
    sys_ = await nats.connect(_url(cluster[0], "sys"))
    try:
        typ = T + "meta_leader_stepdown_response"
        sd = "$JS.API.META.LEADER.STEPDOWN"
        r = await _api(sys_, sd, {"placement": {"preferred": leader.name}})
        assert r == {"type": typ, "error": {"code": 400, "err_code": 10005, "description":
                                            f'preferred server "{leader.name}" is already leader'}}
        r = await _api(sys_, sd, {"placement": {"preferred": "zz"}})
        assert r["error"]["description"] == 'preferred server "zz" not known'
        r = await _api(sys_, sd, {"placement": {"tags": ["nope"]}})
        assert r["error"] == {"code": 400, "err_code": 10005, "description": "no replacement peer connected"}
        r = await _api(sys_, sd, b"{bad")
        assert r["error"]["err_code"] == 10025 and r["error"]["description"].startswith("invalid JSON")
        assert leader.jetstream.cluster.is_leader()
        target = next(s for s in cluster if s is not leader)
        adv = await sys_.subscribe("$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED")
        r = await _api(sys_, sd, {"placement": {"preferred": target.name}})
        assert r == {"type": typ, "success": True}
        assert await wait_meta_leader(cluster) is target
        # nats-server's domain_leader_elected: the leader's peer id, every member (the leader first), cluster
        while True:  # (a loaded machine may have seen another election before)
            a = json.loads((await adv.next_msg(5)).data)
            if a["leader"] == target.jetstream.cluster.peer:
                break
        assert list(a) == ["type", "id", "timestamp", "leader", "replicas", "cluster"], a
        assert a["type"] == "io.nats.jetstream.advisory.v1.domain_leader_elected"
        assert a["leader"] == target.jetstream.cluster.peer and a["cluster"] == "rillet"
        assert [x["name"] for x in a["replicas"]][0] == target.name
        assert sorted(x["name"] for x in a["replicas"]) == sorted(s.name for s in cluster)
    finally:
        await sys_.close()


async def test_account_purge_and_usage_summed_over_replicas(cluster):
    nc = await nats.connect(_url(cluster[0], "a"))
    sys_ = await nats.connect(_url(cluster[1], "sys"))
    try:
        await _api(nc, "$JS.API.STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3"], "num_replicas": 3})
        await _api(nc, "$JS.API.STREAM.CREATE.R1", {"name": "R1", "subjects": ["r1"], "num_replicas": 1})
        r = await _api(nc, "$JS.API.CONSUMER.CREATE.R3.D", {"stream_name": "R3", "config": {
            "durable_name": "D", "ack_policy": "explicit"}})
        assert r.get("name") == "D", r
        for i in range(3):
            await _api(nc, "r3", {"i": i})
            await _api(nc, "r1", {"i": i})
        s3 = (await _api(nc, "$JS.API.STREAM.INFO.R3"))["state"]["bytes"]
        s1 = (await _api(nc, "$JS.API.STREAM.INFO.R1"))["state"]["bytes"]
        assert s3 > 0 and s1 > 0
        info = await _api(nc, "$JS.API.INFO")
        # nats-server counts every replica's bytes: an R3 stream's three times
        assert info["storage"] == 3 * s3 + s1 and info["memory"] == 0, (info, s3, s1)
        assert info["streams"] == 2 and info["consumers"] == 1
        # ACCOUNT.PURGE from the system account: answered "initiated" by the meta leader, streams gone
        r = await _api(sys_, "$JS.API.ACCOUNT.PURGE.$G", None)
        assert r == {"type": T + "account_purge_response", "initiated": True}
        await _until(lambda: all(not s.jetstream.cluster.state.streams.get("$G") for s in cluster),
                     what="the account's streams removed everywhere")
        await _until(lambda: all(s.jetstream.cluster.streams.replica("$G", n) is None
                                 for s in cluster for n in ("R1", "R3")), what="replicas stopped")
        r = await _api(nc, "$JS.API.STREAM.NAMES")
        assert r["total"] == 0
        # an account without streams: initiated too; from an ordinary account: nobody answers
        assert (await _api(sys_, "$JS.API.ACCOUNT.PURGE.ZZ"))["initiated"] is True
        # (nats-server: a timeout; Rillet's account API has no subscription there: no responders)
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await nc.request("$JS.API.ACCOUNT.PURGE.$G", b"", timeout=0.5)
    finally:
        await nc.close()
        await sys_.close()


async def test_server_remove_moves_its_streams(cluster):
    leader = await wait_meta_leader(cluster)
    victim = next(s for s in cluster if s is not leader)
    vpeer = victim.jetstream.cluster.peer
    victim.opts.tags = ["victim"]
    victim.jetstream.cluster._send_statsz()
    await _until(lambda: "victim" in (leader.jetstream.cluster.registry.get(vpeer).tags or ()), what="tag known")
    nc = await nats.connect(_url(leader, "a"))
    sys_ = await nats.connect(_url(leader, "sys"))
    try:
        r = await _api(nc, "$JS.API.STREAM.CREATE.V", {"name": "V", "subjects": ["v"], "num_replicas": 1,
                                                      "placement": {"tags": ["victim"]}})
        assert r["cluster"]["leader"] == victim.name, r
        # the placement tags would keep it on the victim: drop them first (an update, same peers)
        r = await _api(nc, "$JS.API.STREAM.UPDATE.V", {"name": "V", "subjects": ["v"], "num_replicas": 1})
        assert "error" not in r, r
        r = await _api(sys_, "$JS.API.SERVER.REMOVE", {"peer": victim.name})
        assert r == {"type": T + "meta_server_remove_response", "success": True}
        others = [s for s in cluster if s is not victim]
        await _until(lambda: all(vpeer not in s.jetstream.cluster.group.peers for s in others),
                     what="victim out of the meta group")
        await _until(lambda: all((sa := s.jetstream.cluster.state.stream("$G", "V")) is not None
                                 and sa.group.peers and vpeer not in sa.group.peers for s in others),
                     what="the stream re-assigned")
        await _until(lambda: victim.jetstream.cluster.removed, what="the victim knows it was removed")
        new = others[0].jetstream.cluster.state.stream("$G", "V").group.peers[0]
        holder = next(s for s in others if s.jetstream.cluster.peer == new)
        await _until(lambda: holder.jetstream.cluster.streams.replica("$G", "V") is not None, what="new replica")
        r = await _api(nc, "$JS.API.STREAM.INFO.V")
        assert r["cluster"]["leader"] == holder.name, r
    finally:
        await nc.close()
        await sys_.close()


def _http(srv, path: str):
    import urllib.error
    import urllib.request
    url = f"http://127.0.0.1:{srv.http_addr[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_jsz_raft_details_and_healthz_filters():
    async with run_cluster(3, jetstream=True, system_account="SYS", users=USERS, http_port=-1) as cluster:
        nc = await nats.connect(_url(cluster[0], "a"))
        try:
            await _api(nc, "$JS.API.STREAM.CREATE.J", {"name": "J", "subjects": ["j"], "num_replicas": 3})
            await _api(nc, "$JS.API.CONSUMER.CREATE.J.C", {"stream_name": "J", "config": {
                "durable_name": "C", "ack_policy": "explicit"}})
            await _api(nc, "j", {"x": 1})
        finally:
            await nc.close()
        sa = cluster[0].jetstream.cluster.state.stream("$G", "J")
        for s in cluster:
            await _until(lambda: s.jetstream.cluster.streams.replica("$G", "J") is not None
                         and "C" in s.jetstream.cluster.streams.replica("$G", "J").creps, what="replicas")
            code, j = await asyncio.to_thread(_http, s, "/jsz?streams=true&config=true&raft=true&consumers=true")
            assert code == 200
            assert j["ha_assets"] == 3  # the meta group, the stream and its consumer (as nats-server counts)
            (ad,) = j["account_details"]
            (sd,) = ad["stream_detail"]
            # nats-server's StreamDetail keys, in its order
            assert list(sd) == ["name", "created", "cluster", "config", "state", "consumer_detail",
                                "stream_raft_group", "consumer_raft_groups"], list(sd)
            assert sd["stream_raft_group"] == sa.group.name
            assert sd["consumer_raft_groups"] == [{"name": "C", "raft_group": sa.consumers["C"].group.name}]
            assert sd["consumer_detail"][0]["name"] == "C" and "config" in sd["consumer_detail"][0]
            assert sd["cluster"]["raft_group"] == sa.group.name
            code, j = await asyncio.to_thread(_http, s, "/jsz?streams=true")
            (sd,) = j["account_details"][0]["stream_detail"]
            assert list(sd) == ["name", "created", "cluster", "state"]
            for q in ("js-enabled-only=true", "js-server-only=true", "js-enabled-only=true&js-server-only=true"):
                assert await asyncio.to_thread(_http, s, "/healthz?" + q) == (200, {"status": "ok"})
        leads = [s for s in cluster if s.jetstream.cluster.streams.replica("$G", "J").leader]
        code, j = await asyncio.to_thread(_http, leads[0], "/jsz")
        assert j["streams_leader"] == 1 and list(j).index("streams_leader") == list(j).index("streams") + 1
        other = next(s for s in cluster if s is not leads[0])
        code, j = await asyncio.to_thread(_http, other, "/jsz?streams=true&stream-leader-only=true")
        assert j["account_details"][0]["stream_detail"] == [] and "streams_leader" not in j


async def test_restore_in_a_cluster_nats_server_errors(cluster):
    nc = await nats.connect(_url(cluster[2], "a"))
    try:
        await _api(nc, "$JS.API.STREAM.CREATE.RS", {"name": "RS", "subjects": ["rs"]})
        typ = T + "stream_restore_response"
        r = await _api(nc, "$JS.API.STREAM.RESTORE.RS", {"config": {"name": "RS"}, "state": {}})
        assert r == {"type": typ, "error": {"code": 400, "err_code": 10130,
                                            "description": "stream name already in use, cannot restore"}}
        # a restore is taken by the new group's preferred peer (tests/test_jscluster_gaps.py); an archive
        # that is not one is answered 10062 on its last chunk and the stream is removed again
        r = await _api(nc, "$JS.API.STREAM.RESTORE.NEW", {"config": {"name": "NEW"}, "state": {}})
        assert r["type"] == typ and r.get("deliver_subject"), r
        fin = json.loads((await nc.request(r["deliver_subject"], b"", timeout=5)).data)
        assert fin["type"] == T + "stream_create_response" and fin["error"]["err_code"] == 10062, fin
        assert fin["error"]["description"].startswith("restore failed: ")
        await _until(lambda: all(s.jetstream.cluster.state.stream("$G", "NEW") is None for s in cluster),
                     what="the failed restore's stream removed")
        await _until(lambda: all("NEW" not in s.jetstream.accounts["$G"].streams for s in cluster
                                 if "$G" in s.jetstream.accounts), what="its replicas removed")
    finally:
        await nc.close()


async def test_removed_server_rejoins_only_after_the_remove_timeout(cluster, monkeypatch):
    from rillet.jetstream.cluster import meta as META
    monkeypatch.setattr(META, "REJOIN_AFTER", 1.5)  # (nats-server's peerRemoveTimeout: 5 minutes)
    leader = await wait_meta_leader(cluster)
    victim = next(s for s in cluster if s is not leader)
    vc = victim.jetstream.cluster
    sys_ = await nats.connect(_url(leader, "sys"))
    try:
        r = await _api(sys_, "$JS.API.SERVER.REMOVE", {"peer": victim.name})
        assert r.get("success") is True, r
        t0 = time.monotonic()
        await _until(lambda: vc.removed and vc.group is not None and not vc.group.running, what="victim left")
        await _until(lambda: vc.peer not in leader.jetstream.cluster.group.peers, what="voter dropped")
        # the server comes back (its meta member restarts from its WAL): ignored until the timeout passed
        vc.removed = False
        await vc._start_group([])
        await asyncio.sleep(max(0.0, 0.8 - (time.monotonic() - t0)))
        assert vc.peer not in leader.jetstream.cluster.group.peers
        lc = leader.jetstream.cluster
        await _until(lambda: vc.peer in lc.group.peers and not lc.state.removed, timeout=10,
                     what="re-added after the timeout")
        assert time.monotonic() - t0 >= 1.4
        await _until(lambda: vc.group.leader == leader.jetstream.cluster.peer, what="victim follows the leader")
    finally:
        await sys_.close()


async def test_stopped_server_removed_its_r3_stream_gets_a_replacement():
    async with run_cluster(4, jetstream=True, system_account="SYS", users=USERS) as cluster:
        leader = await wait_meta_leader(cluster)
        nc = await nats.connect(_url(leader, "a"))
        sys_ = await nats.connect(_url(leader, "sys"))
        try:
            r = await _api(nc, "$JS.API.STREAM.CREATE.K", {"name": "K", "subjects": ["k"], "num_replicas": 3})
            assert "error" not in r, r
            for i in range(5):
                await _api(nc, "k", {"i": i})
            sa = leader.jetstream.cluster.state.stream("$G", "K")
            gone = next(s for s in cluster if s is not leader and s.jetstream.cluster.peer in sa.group.peers)
            spare = next(s for s in cluster if s.jetstream.cluster.peer not in sa.group.peers)
            gpeer = gone.jetstream.cluster.peer
            await gone.shutdown()
            # the other servers see it offline (its routes closed): a new stream is not placed on it
            await _until(lambda: leader.jetstream.cluster.registry.get(gpeer).offline, what="offline")
            r = await _api(sys_, "$JS.API.SERVER.REMOVE", {"peer": gone.name})
            assert r.get("success") is True, r
            live = [s for s in cluster if s is not gone]
            want = {p for p in sa.group.peers if p != gpeer} | {spare.jetstream.cluster.peer}
            await _until(lambda: all(set(s.jetstream.cluster.state.stream("$G", "K").group.peers) == want
                                     for s in live), timeout=15, what="the spare server replaces the stopped one")
            await _until(lambda: (rep := spare.jetstream.cluster.streams.replica("$G", "K")) is not None
                         and rep.stream.store.state().msgs == 5, timeout=15, what="the spare caught up")
            await _api(nc, "k", {"i": 5})
            # the stream leader's voters follow the assignment: the stopped server leaves the group
            deadline = time.monotonic() + 10
            while True:
                info = await _api(nc, "$JS.API.STREAM.INFO.K")
                names = {x["name"] for x in info["cluster"].get("replicas") or ()} | {info["cluster"]["leader"]}
                if names == {s.name for s in live if s.jetstream.cluster.peer in want}:
                    break
                assert time.monotonic() < deadline, info["cluster"]
                await asyncio.sleep(0.1)
            assert info["state"]["messages"] == 6
        finally:
            await nc.close()
            await sys_.close()


async def test_stream_peer_remove_as_nats_server(cluster):
    nc = await nats.connect(_url(cluster[0], "a"))
    try:
        typ = T + "stream_remove_peer_response"
        c3 = await _api(nc, "$JS.API.STREAM.CREATE.P3", {"name": "P3", "subjects": ["p3"], "num_replicas": 3})
        c1 = await _api(nc, "$JS.API.STREAM.CREATE.P1", {"name": "P1", "subjects": ["p1"], "num_replicas": 1})
        # (values from a live 3-server nats-server 2.15.1 cluster)
        r = await _api(nc, "$JS.API.STREAM.PEER.REMOVE.P3", {"peer": c3["cluster"]["leader"]})
        assert r == {"type": typ, "error": {"code": 503, "err_code": 10075, "description": "peer remap failed"}}
        r = await _api(nc, "$JS.API.STREAM.PEER.REMOVE.P1", None)
        assert r == {"type": typ, "error": {"code": 400, "err_code": 10003, "description": "bad request"}}
        old = c1["cluster"]["leader"]
        r = await _api(nc, "$JS.API.STREAM.PEER.REMOVE.P1", {"peer": old})
        assert r == {"type": typ, "success": True}
        peers = {s.name: s.jetstream.cluster.peer for s in cluster}
        await _until(lambda: all(s.jetstream.cluster.state.stream("$G", "P1").group.peers not in ([], [peers[old]])
                                 for s in cluster), what="the R1 stream moved")
        await _until(lambda: sum(s.jetstream.cluster.streams.replica("$G", "P1") is not None for s in cluster) == 1
                     and next(s for s in cluster if s.name == old).jetstream.cluster.streams.replica("$G", "P1")
                     is None, what="one replica, elsewhere")
        info = await _api(nc, "$JS.API.STREAM.INFO.P1")
        assert info["cluster"]["leader"] != old
    finally:
        await nc.close()
