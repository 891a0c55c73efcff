"""Rolling upgrades: a replicated log's leader puts a loop pass's proposals in one RAFT entry (RaftLog MULTI, op 48)
only when every other member's route INFO said its build decodes op 48 (``rillet_raft_ops``); with a member that
did not (an older Rillet build sends no such field) it proposes them one RAFT entry each, as builds before MULTI
did, and every replica applies them."""
from __future__ import annotations

import asyncio
import io

import nats
import pytest

from rillet.app.embed import run_cluster
from rillet.cluster import cluster as cluster_mod
from rillet.cluster import info as ci
from rillet.jetstream.cluster.log import MULTI
from rillet.jetstream.cluster.peers import peer_id
from rillet.server.logging import Logger
from jscluster_support import until
from test_jscluster_stream_replicas import Env, states


def test_route_info_lists_the_raft_ops_and_an_info_without_them_decodes_to_none():
    info = ci.Info(server_id="S", server_name="a", rillet_raft_ops=list(ci.RILLET_RAFT_OPS))
    assert MULTI in ci.RILLET_RAFT_OPS
    assert b'"rillet_raft_ops":[48,49,50,51]' in ci.encode_info(info)
    assert ci.decode_info(ci.encode_info(info)).rillet_raft_ops == [48, 49, 50, 51]
    old = ci.decode_info(b'{"server_id":"S","server_name":"a","proto":3,"go":"python3.12"}')
    assert old.rillet_raft_ops is None
    assert b"rillet_raft_ops" not in ci.encode_info(old)  # (left out when empty)


@pytest.mark.parametrize("old", [None, "rillet-2"])
async def test_leader_batches_only_when_every_member_decodes_multi(tmp_path, monkeypatch, old):
    real = cluster_mod.Cluster.route_info

    def route_info(self):
        info = real(self)
        if self.server.name == old:
            info.rillet_raft_ops = None  # (as a build before op 48: no such field)
        return info

    monkeypatch.setattr(cluster_mod.Cluster, "route_info", route_info)
    async with run_cluster(3, log=Logger(out=io.StringIO())) as servers:
        env = Env(servers, str(tmp_path))
        await env.start()
        try:
            env.assign({"name": "S", "subjects": ["s.>"], "num_replicas": 3})
            await until(lambda: env.leader("S") is not None, what="a stream leader")
            reps = env.reps("S")
            lead = env.leader("S")
            if old is not None and servers[reps.index(lead)].name == old:
                # (the old build itself never proposes op 48: lead from one of the others)
                lead.group.stepdown(to=peer_id(servers[0].name))
                await until(lambda: env.leader("S") is not None and env.leader("S") is not lead,
                            what="another leader")
                lead = env.leader("S")
            assert lead.group.members_decode(MULTI) is (old is None)
            for r in reps:
                if r is not lead:
                    # each member asks its own routes: the old one hears the others advertise op 48
                    assert r.group.members_decode(MULTI) is (old is None or servers[reps.index(r)].name == old)
            nc = await nats.connect(servers[reps.index(lead)].client_url)
            js = nc.jetstream()
            try:
                await js.publish("s.x", b"first")
                await until(lambda: all(r.stream.store.state().msgs == 1 for r in reps), what="replicated")
                before = lead.group.node.last_index()
                futs = [await js.publish_async("s.x", b"m%d" % i) for i in range(300)]
                acks = await asyncio.gather(*futs)
                assert sorted(a.seq for a in acks) == list(range(2, 302))
                grew = lead.group.node.last_index() - before
                if old is None:
                    assert grew < 150, grew  # (a pass's messages in one RAFT entry)
                else:
                    assert grew >= 300, grew  # (one RAFT entry each: the old member decodes them)
                await until(lambda: all(r.stream.store.state().msgs == 301 for r in reps), what="all 301 everywhere")
                assert len(set(states(reps))) == 1
                for r in reps:
                    assert r.stream.store.load_msg(150).data == b"m148"
                    assert r.log.decode_errors == 0
            finally:
                await nc.close()
        finally:
            await env.stop()
