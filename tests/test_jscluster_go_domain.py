"""A mixed cluster whose servers set a JetStream domain: a Rillet stream leader's PubAcks name the domain as a Go
leader's do (nats-server's PubAck template, ``{"stream":..,"domain":..,"seq":..}``; its error answers carry no
domain), rillet.jetstream.cluster.gostreamlead. The unit test builds the bytes; the live test runs 2 Go and 1
Rillet server with ``domain: hub`` and compares the acks of each leader byte for byte."""
from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

live = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


def _leader(tmp_path, domain):
    from rillet.jetstream.cluster.gostream import GoStreamReplica
    from rillet.raft import gowire as gw

    class _Log:
        def __getattr__(self, name):
            return lambda *a, **k: None
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None,
                             opts=SimpleNamespace(jetstream=SimpleNamespace(domain=domain)))
    a = {"stream": {"name": "D1", "subjects": ["d.>"], "storage": "file", "num_replicas": 3},
         "created": "2026-01-01T00:00:00Z",
         "group": {"name": "D1-R3F-x", "peers": [gw.peer_id(n) for n in ("r1", "g0", "g1")]}}
    return GoStreamReplica(server, "A", a, str(tmp_path))


def test_pub_acks_name_the_domain_when_one_is_set(tmp_path):
    rep = _leader(tmp_path / "a", "hub")
    assert rep._pub_ack(7) == b'{"stream":"D1","domain":"hub","seq":7}'
    assert rep._pub_ack(7, duplicate=True) == b'{"stream":"D1","domain":"hub","seq":7,"duplicate": true}'
    rep.store.stop()
    rep = _leader(tmp_path / "b", "")
    assert rep._pub_ack(7) == b'{"stream":"D1","seq":7}'
    rep.store.stop()


@live
async def test_pub_acks_of_a_rillet_leader_are_a_go_leaders_with_a_domain(tmp_path):
    """2 Go + 1 Rillet (``rillet_go_meta_lead``), every server with ``jetstream { domain: hub }``: an R3 stream
    led by g0, then by the Rillet server, then by g1 (step-downs naming each). A new message
    and a duplicate through each leader: the same ack bytes but for the sequence; a refused publish the same
    error answer."""
    import nats
    from helpers import free_port, serve_config
    from test_jscluster_golead_stream import _create, _lead_conf, _lead_to
    from test_jscluster_gometa import CAP

    class DomainGoCluster(CAP.GoCluster):
        def conf(self, name):
            path = super().conf(name)
            path.write_text(path.read_text().replace("jetstream {", "jetstream { domain: hub,"))
            return path
    rport = free_port()
    gc = DomainGoCluster(tmp_path, names=("g0", "g1"), extra_routes=[rport])
    gc.start_all()
    conf = _lead_conf(gc, "r1", rport).replace("jetstream { enabled: false,", "jetstream { domain: hub, enabled: false,")
    assert "domain: hub" in conf
    conns: dict = {}
    try:
        for n in gc.names:
            conns[n] = await nats.connect(gc.url(n))
        g0 = conns["g0"]
        async with serve_config(conf):
            await CAP._until(lambda: CAP._js_ready(g0), 60, what="the Go meta leader")
            si = await _create(g0, name="D1", subjects=["d.>"], num_replicas=3, max_msg_size=64)
            assert sorted([si.cluster.leader] + [r.name for r in si.cluster.replicas]) == ["g0", "g1", "r1"]

            async def acks(tag: str, seq: int) -> list[bytes]:
                out = []
                for data, hdrs in ((b"x", {"Nats-Msg-Id": tag}), (b"x", {"Nats-Msg-Id": tag}), (b"y" * 100, {})):
                    msg = await conns["g1"].request("d.a", data, headers=hdrs, timeout=10)
                    out.append(msg.data)
                return out
            seen = {}
            for i, leader in enumerate(("g0", "r1", "g1")):
                assert (await _lead_to(g0, "D1", leader)).cluster.leader == leader
                got = await acks(leader, i + 1)
                seen[leader] = got
                assert got[0] == b'{"stream":"D1","domain":"hub","seq":%d}' % (i + 1), (leader, got)
                assert got[1] == got[0][:-1] + b',"duplicate": true}', (leader, got)
                err = json.loads(got[2])
                assert err["error"]["err_code"] == 10054 and "domain" not in err, (leader, got)
            assert seen["r1"][2] == seen["g0"][2] == seen["g1"][2]
    finally:
        for c in conns.values():
            if c.is_connected:
                await c.close()
        gc.stop_all()
