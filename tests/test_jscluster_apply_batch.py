"""A replicated stream proposes a loop pass's messages in one RAFT entry (RaftLog MULTI), and a replicated file
stream writes the store appends of the entries one Ready commits together (StreamReplica.
_apply_batch: FileStore.write_behind around the batch), not one write per message; a failed gathered write on a
replica takes those messages back and stops that replica's group (its store is behind its log), while the other
two go on."""
from __future__ import annotations

import asyncio
import errno
import io
import os

import nats

from rillet.app.embed import run_cluster
from rillet.jetstream.store import filestore
from rillet.server.logging import Logger
from jscluster_support import until
from test_jscluster_stream_replicas import Env, states


async def test_applied_appends_are_written_together_and_a_failed_write_stops_the_replica(tmp_path, monkeypatch):
    out = io.StringIO()
    writes: list[int] = []
    failing: set[int] = set()
    real = filestore._write_all

    def counting(fd, bufs, off, total):
        if fd in failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        writes.append(fd)
        return real(fd, bufs, off, total)

    monkeypatch.setattr(filestore, "_write_all", counting)
    async with run_cluster(3, log=Logger(out=out)) as servers:
        env = Env(servers, str(tmp_path))
        await env.start()
        try:
            env.assign({"name": "S", "subjects": ["s.>"], "num_replicas": 3})
            await until(lambda: env.leader("S") is not None, what="a stream leader")
            lead = env.leader("S")
            reps = env.reps("S")
            nc = await nats.connect(servers[reps.index(lead)].client_url)
            js = nc.jetstream()
            try:
                await js.publish("s.x", b"first")
                await until(lambda: all(r.stream.store.state().msgs == 1 for r in reps), what="replicated")
                writes.clear()
                before = lead.group.node.last_index()
                futs = [await js.publish_async("s.x", b"m%d" % i) for i in range(300)]
                acks = await asyncio.gather(*futs)
                # the messages a pass proposed went in one RAFT entry each pass (RaftLog MULTI)
                assert lead.group.node.last_index() - before < 150, lead.group.node.last_index() - before
                assert sorted(a.seq for a in acks) == list(range(2, 302))
                await until(lambda: all(r.stream.store.state().msgs == 301 for r in reps), what="all 301 everywhere")
                assert len(set(states(reps))) == 1
                # 300 messages on three replicas: far fewer writes than 900 (the batches of one Ready each)
                assert len(writes) < 300, len(writes)
                for r in reps:
                    assert r.stream.store.load_msg(150).data == b"m148"
                    assert r._gathering is None

                # a follower's store refuses its gathered write: its group stops, the others go on
                f = next(r for r in reps if r is not lead)
                failing.add(f.stream.store._afd)
                futs = [await js.publish_async("s.x", b"n%d" % i) for i in range(50)]
                acks = await asyncio.gather(*futs)
                assert max(a.seq for a in acks) == 351
                await until(lambda: not f.group.running, what="the failing replica's group stopped")
                assert "behind the log" in f.stream.store_failed
                assert "behind the log" in f.group.write_error
                assert f.stream.store.state().last_seq < 351  # (taken back: not past what it wrote)
                rest = [r for r in reps if r is not f]
                await until(lambda: all(r.stream.store.state().last_seq == 351 for r in rest), what="the others")
                errs = [ln for ln in out.getvalue().splitlines() if "[ERR]" in ln]
                assert errs and all("behind the log" in ln for ln in errs), errs[:5]
            finally:
                await nc.close()
        finally:
            failing.clear()
            await env.stop()
