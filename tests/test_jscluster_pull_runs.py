"""A replicated pull consumer's new messages go out in runs (rillet.jetstream.cluster.consumers
``ClusteredConsumer._run_new``): one C_DELIVERED entry per run (its stream sequences as a list), the frames held
until that entry commits, every replica left in the state that one C_DELIVERED per message leaves. Only when
every other member's route INFO lists op 49 (``log.DELIVERED_RUNS``): with an older member (its INFO without it),
one entry per message as before, and every replica still agrees."""
from __future__ import annotations

import io

import nats
import pytest
from nats.js.api import ConsumerConfig

from rillet.app.embed import run_cluster
from rillet.cluster import cluster as cluster_mod
from rillet.jetstream.cluster.consumers import ClusteredConsumer
from rillet.jetstream.consumer import state as state_mod
from rillet.server.logging import Logger
from jscluster_support import until
from test_jscluster_features import api, consumer_leader, consumer_reps


def _replicated(c) -> tuple:
    return (c.dseq, c.dsseq, c.adflr, c.asflr, tuple(sorted(c.pending)), c.has_state)


@pytest.mark.parametrize("old", [None, "rillet-2"])
async def test_pull_runs_only_when_every_member_decodes_them_and_replicas_agree(monkeypatch, old):
    real = cluster_mod.Cluster.route_info

    def route_info(self):
        info = real(self)
        if self.server.name == old:
            info.rillet_raft_ops = [48]  # (a build before op 49)
        return info

    monkeypatch.setattr(cluster_mod.Cluster, "route_info", route_info)
    real_run_new = ClusteredConsumer._run_new

    def run_new(self, budget):
        if self.js.server.name == old:
            return -1  # (the older build itself leading: it has no runs for a replicated consumer)
        return real_run_new(self, budget)

    monkeypatch.setattr(ClusteredConsumer, "_run_new", run_new)
    runs: list[list[int]] = []
    real_run = state_mod.ConsumerStateMachine._apply_run

    def apply_run(self, seqs, dseq, dc, ts):
        runs.append(list(seqs))
        return real_run(self, seqs, dseq, dc, ts)

    monkeypatch.setattr(state_mod.ConsumerStateMachine, "_apply_run", apply_run)
    async with run_cluster(3, jetstream=True, log=Logger(out=io.StringIO())) as servers:
        nc = await nats.connect(servers[0].client_url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="P", subjects=["p.>"], num_replicas=3)
            await js.add_consumer("P", ConsumerConfig(durable_name="PC", ack_policy="explicit"))
            await until(lambda: consumer_leader(servers, "P", "PC") is not None, what="consumer leader")
            for i in range(40):
                await js.publish(f"p.{i % 3}", b"m%d" % i, headers={"H": str(i)} if i % 5 == 0 else None)
            sub = await js.pull_subscribe_bind(durable="PC", stream="P")
            got = []
            while len(got) < 40:
                got += await sub.fetch(40 - len(got), timeout=5)
            assert [m.data for m in got] == [b"m%d" % i for i in range(40)]
            assert [m.metadata.sequence.stream for m in got] == list(range(1, 41))
            assert [m.metadata.sequence.consumer for m in got] == list(range(1, 41))
            assert [m.subject for m in got] == [f"p.{i % 3}" for i in range(40)]
            assert all((m.headers or {}).get("H") == str(i) for i, m in enumerate(got) if i % 5 == 0)
            def cs():  # (each replica's consumer object: a new leader's engine replaces it)
                return [r.c for r in consumer_reps(servers, "P", "PC")]
            await until(lambda: len({_replicated(c) for c in cs()}) == 1 and len(cs()[0].pending) == 40,
                        what="every replica with the 40 deliveries pending")
            if old is None:
                assert runs and sum(len(r) for r in runs) == 40 * 3, runs  # (every replica applied the runs)
            else:
                assert runs == []  # (one C_DELIVERED per message)
            for m in got:
                await m.ack()
            await until(lambda: len({_replicated(c) for c in cs()}) == 1 and not cs()[0].pending
                        and cs()[0].asflr == 40, what="every replica with the acks applied")
            info = await api(nc, "$JS.API.CONSUMER.INFO.P.PC")
            assert info["delivered"]["stream_seq"] == 40 and info["ack_floor"]["stream_seq"] == 40, info
            assert info["num_ack_pending"] == 0 and info["num_pending"] == 0, info
            # a new leader takes up from the replicated state: the next messages, nothing again
            old_leader = consumer_leader(servers, "P", "PC")
            r = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.P.PC")
            assert r.get("success") is True, r
            await until(lambda: consumer_leader(servers, "P", "PC") not in (None, old_leader),
                        what="a new consumer leader")
            for i in range(40, 50):
                await js.publish("p.x", b"m%d" % i)
            got = []
            while len(got) < 10:
                got += await sub.fetch(10 - len(got), timeout=5)
            assert [m.data for m in got] == [b"m%d" % i for i in range(40, 50)]
            assert [m.metadata.sequence.consumer for m in got] == list(range(41, 51))
            for m in got:
                await m.ack()
            await until(lambda: all(not c.pending and c.asflr == 50 and c.dsseq == 50 for c in cs()),
                        what="every replica with the last acks applied")
        finally:
            await nc.close()
