"""A quick fault run on a mixed cluster, two Go servers and one Rillet server (``rillet_go_meta``): an R3 stream
on all three; a publisher keeps publishing through both Go servers (each value with its own ``Nats-Msg-Id``,
retried until acknowledged) while the stream leadership moves Go -> Rillet -> Go, the Rillet server is
killed and restarted (as a follower and as the leader) and a Go server is restarted. At the end every
acknowledged value is in the stream exactly once, at the sequence its acknowledgement gave, on the Go servers
and in the Rillet replica's file store alike. (In the spirit of scripts/js_faults.py; short.)
"""
from __future__ import annotations

import asyncio
import json
import shutil
import time

import pytest

from rillet.jetstream.cluster.golead import LEADER
from rillet.raft import gowire as gw

from test_jscluster_gometa import CAP, _member, _rillet_conf, _until
from test_jscluster_gostream import _rillet_leads_and_places
from helpers import serve_config


@pytest.fixture
def go_pair(tmp_path):
    gc = CAP.GoCluster(tmp_path, names=("g0", "g1"))
    gc.start_all()
    try:
        yield gc
    finally:
        gc.stop_all()


async def _stepdown(nc, preferred: str = "") -> dict:
    body = json.dumps({"placement": {"preferred": preferred}}).encode() if preferred else b""
    try:
        return json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.F", body, timeout=3)).data)
    except Exception as e:  # noqa: BLE001 - a fault run: the request may time out while leaders change
        return {"error": repr(e)}


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_mixed_cluster_fault_run_loses_and_duplicates_no_acknowledged_value(go_pair):
    import nats
    gc = go_pair
    conns = {n: await nats.connect(gc.url(n), max_reconnect_attempts=-1, reconnect_time_wait=0.2) for n in gc.names}
    nc = conns["g0"]
    acked: dict[str, int] = {}
    attempts = 0
    stop = asyncio.Event()

    async def publisher() -> None:
        nonlocal attempts
        i = 0
        while not stop.is_set():
            value = f"v{i}"
            while True:  # retried (same id) until acknowledged
                attempts += 1
                c = conns[gc.names[attempts % 2]]
                try:
                    ack = await c.jetstream().publish(f"f.{i % 5}", value.encode(),
                                                      headers={"Nats-Msg-Id": value}, timeout=1.5)
                except Exception:  # noqa: BLE001 - no answer / no leader / server down: retry
                    if stop.is_set() and i not in acked:
                        return
                    await asyncio.sleep(0.1)
                    continue
                assert ack.stream == "F"
                assert acked.setdefault(value, ack.seq) == ack.seq, f"{value} acked at two sequences"
                break
            i += 1

    try:
        await CAP._until(lambda: CAP._js_ready(nc), what="Go meta leader")
        conf = _rillet_conf(gc)
        srv_cm = serve_config(conf)
        srv = await srv_cm.__aenter__()
        try:
            m = await _rillet_leads_and_places(srv, nc, gc, "F")
            await _until(lambda: ("A", "F") in m.replicas, 10, what="the replica on Rillet")
            pub = asyncio.create_task(publisher())
            log = []
            await asyncio.sleep(1.0)
            # 1: leadership to Rillet
            log.append(("to r1", await _stepdown(nc, "r1")))
            rep = m.replicas[("A", "F")]
            await _until(lambda: rep.raft.role == LEADER, 10, what="Rillet leading")
            await asyncio.sleep(1.5)
            # 2: kill the Rillet server while it leads; the Go servers elect one of them
            await srv_cm.__aexit__(None, None, None)
            srv = None
            log.append(("r1 killed", len(acked)))
            await asyncio.sleep(6.0)
            # 3: Rillet back (a follower, caught up), then leading again
            srv_cm = serve_config(conf)
            srv = await srv_cm.__aenter__()
            m = await _member(srv)
            await _until(lambda: ("A", "F") in m.replicas, 20, what="the replica back")
            rep = m.replicas[("A", "F")]
            await _until(lambda: rep.raft.leader and rep.raft.pindex > 0, 20, what="the replica following")
            await asyncio.sleep(2.0)
            for _ in range(5):
                log.append(("to r1 again", await _stepdown(nc, "r1")))
                try:
                    await _until(lambda: rep.raft.role == LEADER, 4, what="Rillet leading again")
                    break
                except AssertionError:
                    continue
            assert rep.raft.role == LEADER, log
            acked_before = rep.acked
            await asyncio.sleep(1.5)
            # 4: a Go server restarted while Rillet leads (the commits need the Rillet replica then)
            gc.stop("g1")
            await asyncio.sleep(1.5)
            gc.start("g1")
            await asyncio.sleep(2.0)
            assert rep.acked > acked_before, "the restarted Rillet leader acknowledged nothing"
            # 5: back to Go
            log.append(("to go", await _stepdown(nc)))
            await asyncio.sleep(2.0)
            stop.set()
            await asyncio.wait_for(pub, 30)
            assert len(acked) >= 20, (len(acked), log)
            # every acknowledged value exactly once, at its sequence, on the Go leader
            js = nc.jetstream()

            async def led():
                try:
                    return await js.stream_info("F")
                except Exception:  # noqa: BLE001
                    return None
            si = await CAP._until(led, 30, what=f"stream info {log} {rep.status()}")
            await _until(lambda: rep.store.state().last_seq >= si.state.last_seq, 20, what="Rillet caught up")
            seen: dict[str, int] = {}
            for seq in range(si.state.first_seq, si.state.last_seq + 1):
                try:
                    got = await js.get_msg("F", seq)
                except nats.js.errors.NotFoundError:
                    continue
                v = got.data.decode()
                assert v not in seen, f"{v} stored twice ({seen[v]}, {seq})"
                seen[v] = seq
                sm = rep.store.load_msg(seq)
                assert sm is not None and sm.data == got.data and sm.subject == got.subject, seq
            lost = {v: s for v, s in acked.items() if seen.get(v) != s}
            assert not lost, (list(lost.items())[:5], log)
            print(f"acked {len(acked)} of {attempts} attempts, stored {len(seen)}, steps {log}")
        finally:
            if srv is not None:
                await srv_cm.__aexit__(None, None, None)
    finally:
        stop.set()
        for c in conns.values():
            await c.close()
