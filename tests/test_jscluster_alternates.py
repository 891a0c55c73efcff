"""StreamInfo ``alternates`` (nats-server's streamAlternates): in a cluster, STREAM.INFO of a stream that has
mirrors lists the stream and its mirrors with their clusters, the requester's cluster first; without a mirror,
or without clustering, the field is left out. (nats.js's clients read it: ``streams.info(n).alternates``,
``Stream.alternates()`` / ``best()``.)"""
from __future__ import annotations

import json
from types import SimpleNamespace

import nats
from nats.js.api import StreamSource

from rillet.app.embed import run_server
from rillet.config.options import JetStreamOptions, Options
from rillet.jetstream.cluster.alternates import stream_alternates
from jscluster_support import until, cl, stream_leader  # noqa: F401 (the fixture)


def _sa(name: str, cluster: str, mirror: str | None = None) -> SimpleNamespace:
    cfg: dict = {"name": name}
    if mirror is not None:
        cfg["mirror"] = {"name": mirror}
    return SimpleNamespace(config=cfg, group=SimpleNamespace(cluster=cluster))


def test_alternates_rank_the_requesters_clusters_first():
    sas = [_sa("src", "C1"), _sa("m2", "C2", "src"), _sa("m3", "C3", "src"), _sa("other", "C2"),
           _sa("m-other", "C2", "other")]
    # a client of C3 whose gateways put C2 next: C3, C2, then C1 (not listed by the client)
    assert stream_alternates(sas, "src", "C3", ["C2"]) == [
        {"name": "m3", "cluster": "C3"}, {"name": "m2", "cluster": "C2"}, {"name": "src", "cluster": "C1"}]
    # a client of C1 without gateways: C1 first, the others (equal weight) by name
    assert [a["name"] for a in stream_alternates(sas, "src", "C1")] == ["src", "m2", "m3"]
    # with a JetStream domain, each entry names it (before the cluster, as nats-server's JSON)
    got = stream_alternates(sas, "other", "C2", domain="hub")
    assert got == [{"name": "m-other", "domain": "hub", "cluster": "C2"},
                   {"name": "other", "domain": "hub", "cluster": "C2"}]
    assert list(got[0]) == ["name", "domain", "cluster"]


def test_no_alternates_for_a_stream_without_mirrors():
    sas = [_sa("src", "C1"), _sa("m", "C1", "src"), _sa("lonely", "C1")]
    assert stream_alternates(sas, "lonely", "C1") is None
    assert stream_alternates(sas, "missing", "C1") is None


async def _info(nc, name: str) -> dict:
    r = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)
    return json.loads(r.data)


async def test_stream_info_lists_the_mirrors_in_a_cluster(cl):
    servers, nc, js = cl
    cname = servers[0].jetstream.cluster.name
    await js.add_stream(name="src", subjects=["A", "B"])
    nc1 = await nats.connect(servers[1].client_url)
    try:
        js1 = nc1.jetstream()
        await js1.add_stream(name="mirror", mirror=StreamSource(name="src"))
        await js1.add_stream(name="solo", subjects=["S"])
        await until(lambda: stream_leader(servers, "mirror") is not None, what="the mirror's leader")
        for conn in (nc, nc1):
            info = await _info(conn, "src")
            assert info.get("alternates") == [{"name": "mirror", "cluster": cname},
                                              {"name": "src", "cluster": cname}], info
            # the mirror's own info: it is nobody's source, no alternates
            assert "alternates" not in await _info(conn, "mirror")
            assert "alternates" not in await _info(conn, "solo")
    finally:
        await nc1.close()


async def test_no_alternates_without_clustering(tmp_path):
    opts = Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, store_dir=str(tmp_path)))
    async with run_server(opts) as srv:
        nc = await nats.connect(srv.client_url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="src", subjects=["A"])
            await js.add_stream(name="mirror", mirror=StreamSource(name="src"))
            info = await _info(nc, "src")
            assert "error" not in info, info
            assert "alternates" not in info
        finally:
            await nc.close()
