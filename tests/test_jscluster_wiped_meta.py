"""Two of three servers lose their whole store (meta state included) and start together with the survivor,
before its meta group has a leader: they must not found a new, empty meta group between themselves.

They did (they vote for each other, a quorum), and the survivor followed the new group's leader: every stream
was forgotten. Now a server founding a meta group waits to hear from every Rillet server it knows whether that
server's meta group holds state (statsz ``rillet_meta_state``), and founds none beside one that does; the wiped
servers join the survivor's group recovering, without a vote (rillet/jetstream/cluster/meta.py). Checked, as
processes, ``sync_interval: always``:

* no meta leader is elected, the survivor logs the meta group's loss and every /healthz is unhealthy;
* ``$JS.API.META.RESCUE`` with ``quorum_needed: 1`` (system account) is applied by the survivor only (the wiped
  servers refuse: their log is empty) and the survivor leads the meta group; the wiped servers catch up;
* the stream W comes back from the survivor's meta state, reported lost (its group lost a quorum of logs);
  ``$JS.API.STREAM.LEADER.STEPDOWN.W`` accepts the loss: every server holds W's 50 messages, the next publish is
  acknowledged as sequence 51.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import time

import nats

from helpers import ServerProcess
from tests.test_jscluster_wiped_replica import _get, _stream_msgs
from tests.test_jscluster_wiped_resume import _api, _until, create_w, start_three

NAMES = ["s0", "s1", "s2"]


def _meta_leader(http: int) -> str:
    _, d = _get(http, "/jsz")
    return str((d.get("meta_cluster") or {}).get("leader") or "")


async def _run(tmp: str) -> None:
    confs, procs, urls, ports, https = start_three(tmp)
    ncs: list = []
    try:
        for pr in procs:
            pr.wait_ready(20)
        nc = await nats.connect(servers=urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        ncs.append(nc)
        js = nc.jetstream(timeout=5)
        await create_w(nc)
        for k in range(50):
            await js.publish(f"w.{k % 5}", b"m%d" % k)
        await _until(lambda: asyncio.sleep(0, all(_stream_msgs(h) == 50 for h in https)), 30, "50 everywhere")
        await nc.close()
        ncs.remove(nc)

        for pr in procs:
            pr.proc.kill()
            pr.wait(10)
        for i in (1, 2):
            shutil.rmtree(os.path.join(tmp, NAMES[i]))  # (the whole store: the meta group's state too)
        procs = [ServerProcess("-c", c) for c in confs]
        for pr in procs:
            pr.wait_ready(30)
        for i in (1, 2):
            procs[i].wait_log(r"meta state is gone while s0 kept theirs", 60)
        procs[0].wait_log(r"RAFT group '_meta_': committed entries from \d+ on may be lost", 60)
        for i in (1, 2):
            assert "JetStream cluster bootstrapping" in procs[i].output
        # no meta leader (the wiped servers hold no vote, the survivor alone is no quorum), none for a while
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            assert [_meta_leader(h) for h in https] == ["", "", ""]
            await asyncio.sleep(0.3)
        for h in https:
            code, _ = _get(h, "/healthz")
            assert code == 503, code

        # the operator accepts the meta group's loss on the survivor
        sysc = await nats.connect(f"nats://sys:sys@127.0.0.1:{ports[0]}")
        ncs.append(sysc)
        inbox = sysc.new_inbox()
        sub = await sysc.subscribe(inbox)
        await sysc.publish("$JS.API.META.RESCUE", b'{"quorum_needed":1}', reply=inbox)
        answers = {}
        while len(answers) < 3:
            m = await sub.next_msg(timeout=10)
            d = json.loads(m.data)
            answers[d["server"]] = d
        assert answers["s0"].get("new_quorum") == 1 and "error" not in answers["s0"], answers
        for n in ("s1", "s2"):
            assert answers[n]["error"]["err_code"] == 10224, answers
        await _until(lambda: asyncio.sleep(0, [_meta_leader(h) for h in https] == ["s0"] * 3), 30,
                     "the survivor leading the meta group", why=lambda: [_meta_leader(h) for h in https])

        # the stream is back from the survivor's meta state, its group reported lost; the step-down accepts it
        nc = await nats.connect(servers=urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        ncs.append(nc)

        async def reported():
            d = await _api(nc, "$JS.API.STREAM.INFO.W", timeout=2)
            lost = ((d or {}).get("cluster") or {}).get("lost") or {}
            return d if lost.get("open_end") else None
        await _until(reported, 60, "stream W's loss reported")

        async def stepped():
            r = await _api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.W", timeout=12)
            return r if r is not None and r.get("success") else None
        await _until(stepped, 60, "the step-down accepting the loss", every=0.5)
        await _until(lambda: asyncio.sleep(0, all(_stream_msgs(h) == 50 for h in https)), 60,
                     "50 messages on every server", why=lambda: [_stream_msgs(h) for h in https])
        js = nc.jetstream(timeout=2)

        async def published():
            try:
                return await js.publish("w.x", b"after", timeout=2)
            except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
                return None
        ack = await _until(published, 30, "a publish acknowledged after the resume")
        assert ack.seq == 51, ack
    finally:
        for c in ncs:
            try:
                await c.close()
            except Exception as e:  # (a connection already closed by a stopped server)
                print("close:", e)
        for pr in procs:
            pr.stop()


def test_two_wiped_stores_join_the_survivors_meta_group(tmp_path):
    asyncio.run(_run(str(tmp_path)))
