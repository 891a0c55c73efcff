"""Two of three stores wiped: the stream group is reported lost and stays leaderless until an operator accepts
the loss with a step-down request (rillet/jetstream/cluster/resume.py), as processes.

Three Rillet servers, an R3 file stream W with an R3 durable consumer D, ``sync_interval: always``. Every server
is killed; on two of them the directories of W and D (their RAFT groups' and the stream's) are deleted by hand,
the meta state kept, and all three start again. Their members of W and D start wiped (recovering, no vote:
wipedmember's record of the members started here finds their directories gone): fewer members than a quorum
kept their logs. Checked:

* the loss is reported (stream info's ``cluster.lost`` with ``open_end`` from every member, the survivor too; its
  /healthz unhealthy) and no leader is elected: no publish is acknowledged;
* ``$JS.API.STREAM.LEADER.STEPDOWN.W`` (``nats stream cluster step-down W``) accepts the loss: answered with
  success by the new leader, the survivor (the only log left); the report stays (``accepted`` added), the
  ``STREAM.DATA_LOST`` advisory is sent again with it, /healthz stays unhealthy for the loss;
* a configuration update the meta group committed while the stream had no leader is applied once it has one,
  and so is a consumer update made then;
* the stream takes publishes again past the survivor's last sequence; the consumer D (resumed with the stream)
  answers its info with a leader; the wiped servers catch up every message.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import time

import nats

from helpers import ServerProcess, free_port
from tests.test_jscluster_wiped_replica import _conf, _get, _stream_msgs  # (the same three servers)

NAMES = ["s0", "s1", "s2"]


async def _api(nc, subject: str, body: dict | None = None, timeout: float = 3.0) -> dict | None:
    try:
        m = await nc.request(subject, json.dumps(body or {}).encode() if body is not None else b"", timeout=timeout)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return None
    return json.loads(m.data)


def _delete_w(store: str) -> list[str]:
    """Delete by hand what server ``store`` holds of stream W and its consumer: the RAFT groups' directories and
    the stream's own directory; the meta state stays."""
    gone = []
    for root, dirs, _ in os.walk(store):
        for d in list(dirs):
            p = os.path.join(root, d)
            if (d.startswith(("S-", "C-")) and os.path.basename(root) == "_raft") or (
                    d == "W" and os.path.basename(root) == "streams"):
                shutil.rmtree(p)
                gone.append(p)
                dirs.remove(d)
    return gone


async def _until(cond, timeout: float, what: str, every: float = 0.2, why=None):
    deadline = time.monotonic() + timeout
    while True:
        r = await cond()
        if r:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f": {why()}" if why else ""))
        await asyncio.sleep(every)


def start_three(tmp: str) -> tuple[list[str], list[ServerProcess], list[str], list[int], list[int]]:
    """The three servers' configs written and the servers started: (confs, procs, urls, client ports, http ports)."""
    ports = [free_port() for _ in NAMES]
    https = [free_port() for _ in NAMES]
    rports = [free_port() for _ in NAMES]
    confs = [_conf(tmp, n, ports[i], https[i], rports[i], rports) for i, n in enumerate(NAMES)]
    procs = [ServerProcess("-c", c) for c in confs]
    return confs, procs, [f"nats://a:a@127.0.0.1:{p}" for p in ports], ports, https


async def create_w(nc) -> None:
    """The R3 file stream W created (retried while the cluster forms)."""
    async def created():
        r = await _api(nc, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"], "num_replicas": 3,
                                                       "storage": "file"}, timeout=5)
        return r if r is not None and "error" not in r else None
    await _until(created, 30, "the stream created")


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
        r = await _api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.W.D",
                       {"stream_name": "W", "config": {"durable_name": "D", "ack_policy": "explicit",
                                                       "num_replicas": 3}}, timeout=5)
        assert r is not None and "error" not in r, r
        for k in range(200):
            await js.publish(f"w.{k % 5}", b"m%d" % k)
        psub = await js.pull_subscribe("w.>", durable="D", stream="W")
        for m in await psub.fetch(20, timeout=5):
            await m.ack_sync()
        # every member holds the 200 messages (the survivor below must hold them all for the check at the end)
        await _until(lambda: asyncio.sleep(0, all(_stream_msgs(h) == 200 for h in https)), 30, "200 everywhere")
        await nc.close()
        ncs.remove(nc)

        # every server killed; two stores deleted whole; all three back
        for pr in procs:
            pr.proc.kill()
            pr.wait(10)
        survivor = 0
        for i in (1, 2):
            gone = _delete_w(os.path.join(tmp, NAMES[i]))
            assert len(gone) == 3, gone  # (the stream's and the consumer's RAFT groups, the stream's store)
        procs = [ServerProcess("-c", c) for c in confs]
        for pr in procs:
            pr.wait_ready(30)
        for i in (1, 2):
            procs[i].wait_log(r"for a member of a group this server had \(a wiped store\)", 60)
        nc = await nats.connect(servers=urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        ncs.append(nc)
        js = nc.jetstream(timeout=2)

        # reported by every member (the survivor learns it from the wiped members' queries), no leader
        async def reported_everywhere():
            for i in range(3):
                one = await nats.connect(urls[i], max_reconnect_attempts=0)
                try:
                    d = await _api(one, "$JS.API.STREAM.INFO.W", timeout=2)
                finally:
                    await one.close()
                lost = ((d or {}).get("cluster") or {}).get("lost") or {}
                if not lost.get("open_end"):
                    return None
            return True
        await _until(reported_everywhere, 60, "the loss reported by every member", every=0.5,
                     why=lambda: _get(https[survivor], "/healthz?details=true"))
        code, h = _get(https[survivor], "/healthz?details=true")
        assert code != 200 and "lost committed entries" in json.dumps(h), h
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            try:
                ack = await js.publish("w.x", b"refused", timeout=0.5)
                raise AssertionError(f"a publish acknowledged while the group is lost and leaderless: {ack}")
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
                pass
        info = await _api(nc, "$JS.API.STREAM.INFO.W")
        assert info is not None and not (info.get("cluster") or {}).get("leader"), info

        # a configuration update committed by the meta group while the stream has no leader: nobody can propose it
        # to the stream's group now (the answer, from the stream leader, does not come); applied once it has one
        upd = {"name": "W", "subjects": ["w.>"], "num_replicas": 3, "storage": "file", "description": "updated",
               "max_msgs": 5000}
        r = await _api(nc, "$JS.API.STREAM.UPDATE.W", upd, timeout=5)
        assert r is None or "error" in r or r["config"].get("description") == "updated", r

        # and a consumer update (applied by every replica from the meta layer's assignment, as nats-server does:
        # it needs no leader of the consumer's group; the answer comes from one, so none may come now)
        cupd = {"stream_name": "W", "action": "update",
                "config": {"durable_name": "D", "ack_policy": "explicit", "num_replicas": 3,
                           "description": "consumer updated", "max_ack_pending": 500}}
        r = await _api(nc, "$JS.API.CONSUMER.CREATE.W.D", cupd, timeout=5)
        assert r is None or "error" in r or r["config"].get("description") == "consumer updated", r

        # the operator accepts the loss
        adv = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.DATA_LOST.W")

        async def stepped():
            r = await _api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.W", timeout=12)
            return r if r is not None and r.get("success") else None
        r = await _until(stepped, 60, "the step-down accepting the loss", every=0.5)
        assert r["type"] == "io.nats.jetstream.api.v1.stream_leader_stepdown_response", r
        got_adv = json.loads((await adv.next_msg(timeout=10)).data)
        assert got_adv["type"] == "io.nats.jetstream.advisory.v1.stream_data_lost", got_adv
        assert got_adv["lost"].get("accepted") and got_adv["lost"].get("open_end"), got_adv

        async def led():
            d = await _api(nc, "$JS.API.STREAM.INFO.W")
            return d if d is not None and "error" not in d and (d.get("cluster") or {}).get("leader") else None
        info = await _until(led, 30, "a stream leader")
        assert info["cluster"]["leader"] == NAMES[survivor], info["cluster"]
        lost = info["cluster"].get("lost") or {}
        assert lost.get("open_end") and lost.get("accepted"), info["cluster"]
        assert info["state"]["last_seq"] == 200, info["state"]

        async def updated():
            d = await _api(nc, "$JS.API.STREAM.INFO.W")
            return d if d is not None and (d.get("config") or {}).get("description") == "updated" else None
        info = await _until(updated, 20, "the update committed while leaderless applied",
                            why=lambda: _get(https[survivor], "/jsz?accounts=true&streams=true&config=true"))
        assert info["config"]["max_msgs"] == 5000, info["config"]
        async def published():
            try:  # (the new leader takes publishes once its loss report is applied: a moment)
                return await js.publish("w.x", b"after", timeout=2, headers={"Nats-Msg-Id": "after"})
            except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
                return None
        ack = await _until(published, 30, "a publish acknowledged after the resume")
        assert ack.seq == 201, ack
        code, h = _get(https[survivor], "/healthz?details=true")
        assert code != 200 and "lost committed entries" in json.dumps(h), h  # (the loss stays reported)

        # the consumer's group was resumed with the stream
        async def consumer_led():
            d = await _api(nc, "$JS.API.CONSUMER.INFO.W.D")
            return d if d is not None and "error" not in d and (d.get("cluster") or {}).get("leader") else None
        ci = await _until(consumer_led, 30, "a consumer leader")
        assert ci["cluster"]["leader"] == NAMES[survivor], ci["cluster"]
        assert ci["config"].get("description") == "consumer updated" and ci["config"]["max_ack_pending"] == 500, \
            ci["config"]
        assert (ci["cluster"].get("lost") or {}).get("open_end"), ci["cluster"]

        # the wiped servers catch up every message
        await _until(lambda: asyncio.sleep(0, all(_stream_msgs(h) == 201 for h in https)), 60,
                     "201 messages on every server", why=lambda: [_stream_msgs(h) for h in https])
        sub = await js.pull_subscribe("w.>", durable="D", stream="W")
        msgs = await sub.fetch(5, timeout=10)
        assert msgs and msgs[0].metadata.sequence.stream == 21, [m.metadata.sequence for m in msgs]
    finally:
        for c in ncs:
            try:
                await c.close()
            except Exception as e:  # (a connection already closed by a stopped server)
                print("close:", e)
        for pr in procs:
            pr.stop()


def test_double_wipe_resumed_by_step_down(tmp_path):
    asyncio.run(_run(str(tmp_path)))
