"""Direct gets of a Go cluster's stream whose replicas are on Rillet servers (issue 22: KV and object store
operations through any server; rillet.jetstream.cluster.godirect).

1 Go + 2 Rillet servers (``rillet_go_meta_lead``); an R2 stream with ``allow_direct`` placed by tags on the two
Rillet servers, so no Go server holds a replica: ``$JS.API.DIRECT.GET.<stream>`` (``{"seq":N}``,
``{"last_by_subj":...}``, a missing sequence) and ``$JS.API.DIRECT.GET.<stream>.<subject>`` through a client of
each server are answered by the Rillet replicas, leader and follower alike, with the same answer. A KV bucket's
stream (as nats-py's ``create_key_value(direct=True)`` makes it, placed on the two Rillet servers) answers
nats-py's ``get`` through each Rillet server. An R3 stream on all three servers: its Rillet followers answer
beside the Go replica. ``allow_direct`` turned off by an update: the Rillet replicas stop answering.
"""
from __future__ import annotations

import json
import shutil

import pytest

from helpers import free_port, serve_config
from test_jscluster_gometa import CAP, _member, _rillet_conf, _until
from test_jscluster_goplace import _create

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")

LEAD = "rillet_go_meta: true, rillet_go_meta_lead: true"


def _conf(gc, name: str, port: int, routes: list[int]) -> str:
    conf = _rillet_conf(gc, name=name, port=port).replace(f"server_name: {name}",
                                                          f"server_name: {name}\nserver_tags: [rillet]")
    extra = "".join(f"nats://127.0.0.1:{p}, " for p in routes)
    return conf.replace("routes: [", f"routes: [{extra}").replace("rillet_go_meta: true", LEAD)


async def _dget(nc, subject: str, body: bytes = b""):
    """A direct get through ``nc``, asked again while no replica's interest has reached that server."""
    import nats

    async def attempt():
        try:
            return await nc.request(subject, body, timeout=5)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            return None
    return await CAP._until(attempt, 40, what=f"an answer to {subject} {body!r}")


def _fields(msg) -> tuple:
    h = msg.headers or {}
    return (h.get("Nats-Stream"), h.get("Nats-Subject"), h.get("Nats-Sequence"), h.get("Nats-Time-Stamp"),
            h.get("Status"), msg.data)


@live
async def test_direct_gets_and_kv_get_answered_by_rillet_replicas(tmp_path):
    import nats
    p1, p2 = free_port(), free_port()
    gc = CAP.GoCluster(tmp_path, names=("g0",), extra_routes=[p1, p2])
    gc.start_all()
    confs = {"r1": _conf(gc, "r1", p1, []), "r2": _conf(gc, "r2", p2, [p1])}
    cms = {n: serve_config(c) for n, c in confs.items()}
    srvs = {}
    conns = []
    try:
        for n, cm in cms.items():
            srvs[n] = await cm.__aenter__()
        ms = {n: await _member(s) for n, s in srvs.items()}
        g0 = await nats.connect(gc.url("g0"))
        rcs = {n: await nats.connect(f"nats://a:a@127.0.0.1:{s.port}") for n, s in srvs.items()}
        conns += [g0, *rcs.values()]
        clients = {"g0": g0, **rcs}
        await CAP._until(lambda: CAP._js_ready(g0), 60, what="the meta group of 1 Go + 2 Rillet")
        await _create(rcs["r1"], name="S", subjects=["s.>"], num_replicas=2, allow_direct=True,
                      placement={"tags": ["rillet"]})
        js = rcs["r1"].jetstream(timeout=30)
        si = await js.stream_info("S")
        assert {si.cluster.leader, *(p.name for p in si.cluster.replicas or ())} == {"r1", "r2"}
        for i, subj in enumerate(("s.a", "s.b", "s.a", "s.b"), 1):
            assert (await js.publish(subj, f"m{i}".encode(), headers={"X-N": str(i)})).seq == i
        reps = {n: m.replicas[("A", "S")] for n, m in ms.items()}
        # every replica, leader and follower, answers once it is current (the follower within a 2 s check)
        await _until(lambda: all(r.direct.subs and r.store.state().last_seq == 4 for r in reps.values()), 40,
                     what="both Rillet replicas answering direct gets")
        want_seq1 = ("S", "s.a", "1", None, None, b"m1")
        want_last_b = ("S", "s.b", "4", None, None, b"m4")
        answers: dict[str, list] = {}
        for i in range(40):  # (until both replicas answered some: a queue group's member is picked at random)
            if i >= 3 and all(r.direct.served > 0 for r in reps.values()):
                break
            for name, nc in clients.items():
                by_seq = await _dget(nc, "$JS.API.DIRECT.GET.S", b'{"seq":1}')
                last = await _dget(nc, "$JS.API.DIRECT.GET.S", b'{"last_by_subj":"s.b"}')
                in_subj = await _dget(nc, "$JS.API.DIRECT.GET.S.s.b")
                missing = await _dget(nc, "$JS.API.DIRECT.GET.S", b'{"seq":99}')
                got = [_fields(m) for m in (by_seq, last, in_subj, missing)]
                assert got[0][:3] + got[0][4:] == want_seq1[:3] + want_seq1[4:], (name, got[0])
                assert got[1][:3] + got[1][4:] == want_last_b[:3] + want_last_b[4:], (name, got[1])
                assert got[2] == got[1], name
                assert (got[3][4], got[3][5]) == ("404", b""), (name, got[3])
                assert by_seq.headers["X-N"] == "1"
                answers.setdefault(name, []).append(got)
        # the same answer whichever server (and replica) answered, time stamps included
        assert len({repr(a) for v in answers.values() for a in v}) == 1
        assert all(r.direct.served > 0 for r in reps.values()), {n: r.direct.served for n, r in reps.items()}

        # mixed replicas (R3: the Go server too): the Rillet followers answer beside the Go replica
        await _create(g0, name="M", subjects=["m.>"], num_replicas=3, allow_direct=True)
        gjs = g0.jetstream(timeout=30)
        for i in range(1, 4):
            assert (await gjs.publish(f"m.{i}", f"x{i}".encode())).seq == i
        await _until(lambda: all(("A", "M") in m.replicas for m in ms.values()), 40, what="M on both Rillet")
        mreps = {n: m.replicas[("A", "M")] for n, m in ms.items()}
        await _until(lambda: all(r.direct.subs and r.store.state().last_seq == 3 for r in mreps.values()), 40,
                     what="M's Rillet replicas answering direct gets")
        for i in range(40):
            if i >= 3 and all(r.direct.served > 0 for r in mreps.values()):
                break
            for name, nc in clients.items():
                m = await _dget(nc, "$JS.API.DIRECT.GET.M", b'{"last_by_subj":"m.2"}')
                assert (m.headers["Nats-Sequence"], m.data) == ("2", b"x2"), name
        assert all(r.direct.served > 0 for r in mreps.values()), {n: r.direct.served for n, r in mreps.items()}

        # allow_direct turned off: the Rillet replicas stop answering
        cfg = (await js.stream_info("S")).config.as_dict()
        cfg["allow_direct"] = False
        resp = json.loads((await g0.request("$JS.API.STREAM.UPDATE.S", json.dumps(cfg).encode(), timeout=20)).data)
        assert "error" not in resp and resp["config"]["allow_direct"] is False, resp  # (the Rillet leader's answer)
        await _until(lambda: not any(r.direct.subs for r in reps.values()), 40, what="S's direct gets withdrawn")
        assert not any(r.assignment["stream"].get("allow_direct") for r in reps.values())

        async def no_responders():  # (the follower's unsubscription may reach g0 after the leader's answer)
            try:
                await g0.request("$JS.API.DIRECT.GET.S", b'{"seq":1}', timeout=2)
            except nats.errors.NoRespondersError:
                return True
            except nats.errors.TimeoutError:
                return False
            raise AssertionError("a direct get answered after allow_direct was turned off")
        await CAP._until(no_responders, 30, what="no responders to S's direct gets")

        # a KV bucket created with direct gets on the two Rillet servers: nats-py's get through each of them
        # (nats-py's create_key_value drops ``placement``: the bucket's stream is created as it creates one, placed)
        await _create(rcs["r1"], name="KV_cfg", subjects=["$KV.cfg.>"], allow_direct=True, allow_rollup_hdrs=True,
                      deny_delete=True, discard="new", duplicate_window=120, max_msgs_per_subject=5,
                      num_replicas=2, placement={"tags": ["rillet"]})
        kv = await js.key_value("cfg")
        assert (await kv.put("k", b"v1")) == 1
        assert (await kv.put("k", b"v2")) == 2
        ksi = await js.stream_info("KV_cfg")
        assert {ksi.cluster.leader, *(p.name for p in ksi.cluster.replicas or ())} == {"r1", "r2"}, ksi.cluster
        assert ksi.config.allow_direct
        await _until(lambda: all(("A", "KV_cfg") in m.replicas for m in ms.values()), 40,
                     what=f"KV replicas {[list(m.replicas) for m in ms.values()]}")
        kreps = {n: m.replicas[("A", "KV_cfg")] for n, m in ms.items()}
        await _until(lambda: all(r.direct.subs and r.store.state().last_seq == 2 for r in kreps.values()), 40,
                     what="both KV replicas answering direct gets")
        buckets = {name: await nc.jetstream(timeout=30).key_value("cfg") for name, nc in rcs.items()}
        for i in range(40):  # (until both replicas answered some: a queue group's member is picked at random)
            for name, bucket in buckets.items():
                e = await CAP._until(lambda: bucket.get("k"), 40, what=f"KV get through {name}")
                assert (e.value, e.revision) == (b"v2", 2), name
                e1 = await bucket.get("k", revision=1)
                assert (e1.value, e1.revision) == (b"v1", 1), name
            if i >= 2 and all(r.direct.served > 0 for r in kreps.values()):
                break
        assert all(r.direct.served > 0 for r in kreps.values()), {n: r.direct.served for n, r in kreps.items()}
    finally:
        for c in conns:
            if c.is_connected:
                await c.close()
        for n in list(srvs):
            await cms[n].__aexit__(None, None, None)
        gc.stop_all()
