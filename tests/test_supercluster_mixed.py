"""Super-clusters of Go nats-server and Rillet servers sharing one JetStream meta group (issue 22).

Two clusters joined by gateways, the Rillet servers running ``feature_flags { rillet_go_meta: true }``
(docs/mixed-clusters.md): clusters that mix kinds (A: 2 Go + 1 Rillet, B: 1 Go + 2 Rillet), and a Go cluster with a
Rillet cluster (A: 3 Go, B: 3 Rillet with ``rillet_go_meta_lead``, so that the groups the Go meta leader places on
B's Rillet servers only elect a leader among them). nats-server's meta group spans the super-cluster: every server of
both clusters is one of its peers, and the Rillet servers' RAFT messages cross the gateways as the Go servers' do.
The same drill runs on an all-Go super-cluster of the same shape, and the answers are compared.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from helpers import free_port, serve_config
from rillet.raft import gowire as gw

GO = shutil.which("nats-server")
live = pytest.mark.skipif(GO is None, reason="nats-server binary not on PATH")
T = "io.nats.jetstream.api.v1."


async def _until(fn, timeout: float = 60.0, what: str = "condition"):
    """Poll ``fn`` (plain or async) until it gives something true; errors meanwhile are retried."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            r = fn()
            if asyncio.iscoroutine(r):
                r = await r
            if r:
                return r
        except Exception as e:  # noqa: BLE001 - retried until the deadline, named in the failure below
            last = e
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


class Super:
    """A super-cluster of two clusters, A and B, each server a Go process (``go``) or an in-process Rillet server.

    ``shape`` maps a cluster name to its servers' (name, kind) pairs."""

    def __init__(self, root: Path, shape: dict[str, list[tuple[str, str]]], lead: bool = False) -> None:
        self.root = root
        self.shape = shape
        self.lead = lead
        self.kind = {n: k for servers in shape.values() for n, k in servers}
        self.cluster_of = {n: c for c, servers in shape.items() for n, _ in servers}
        self.ports = {n: {p: free_port() for p in ("client", "route", "gw")} for n in self.kind}
        self.procs: dict[str, subprocess.Popen] = {}
        self.rillet: dict[str, object] = {}
        self._stack = AsyncExitStack()

    def conf(self, name: str) -> str:
        c = self.cluster_of[name]
        routes = ", ".join(f"nats://127.0.0.1:{self.ports[o]['route']}" for o, _ in self.shape[c] if o != name)
        gws = ", ".join("{name: %s, urls: [%s]}" % (oc, ", ".join(f"nats://127.0.0.1:{self.ports[o]['gw']}"
                                                                  for o, _ in servers))
                        for oc, servers in self.shape.items())
        store = self.root / f"store-{name}"
        text = f"""
server_name: {name}
listen: 127.0.0.1:{self.ports[name]['client']}
accounts {{
  SYS {{ users [{{user: sys, password: sys}}] }}
  A {{ jetstream: enabled, users [{{user: a, password: a}}] }}
}}
system_account: SYS
cluster {{ name: {c}, listen: 127.0.0.1:{self.ports[name]['route']}, routes: [{routes}] }}
gateway {{ name: {c}, listen: 127.0.0.1:{self.ports[name]['gw']}, gateways: [{gws}] }}
"""
        if self.kind[name] == "go":
            return text + f'jetstream {{ store_dir: "{store}" }}\n'
        flags = "rillet_go_meta: true" + (", rillet_go_meta_lead: true" if self.lead else "")
        return text + f'feature_flags {{ {flags} }}\njetstream {{ enabled: false, store_dir: "{store}" }}\n'

    def start_go(self, name: str) -> None:
        path = self.root / f"{name}.conf"
        path.write_text(self.conf(name))
        log = open(self.root / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen([GO, "-c", str(path)], stdout=log, stderr=log)
        log.close()

    async def start(self) -> None:
        for n, k in self.kind.items():
            if k == "go":
                self.start_go(n)
        for n, k in self.kind.items():
            if k != "go":
                self.rillet[n] = await self._stack.enter_async_context(serve_config(self.conf(n)))
        for n in self.procs:
            await _until(lambda: self._listening(n), 30, what=f"nats-server {n}")

    def _listening(self, name: str) -> bool:
        assert self.procs[name].poll() is None, f"nats-server {name} exited, see {self.root / (name + '.log')}"
        socket.create_connection(("127.0.0.1", self.ports[name]["client"]), timeout=0.5).close()
        return True

    async def stop(self) -> None:
        await self._stack.aclose()
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def url(self, name: str, user: str = "a") -> str:
        return f"nats://{user}:{user}@127.0.0.1:{self.ports[name]['client']}"


async def _api(nc, subject: str, body=None, timeout: float = 10.0) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    return json.loads((await nc.request(subject, data, timeout=timeout)).data)


MIXED = {"A": [("g0", "go"), ("g1", "go"), ("r1", "rillet")], "B": [("g2", "go"), ("r2", "rillet"), ("r3", "rillet")]}
# the all-Go super-cluster of the same shape: the same server names (so the same RAFT peer ids), every one nats-server
ALL_GO = {c: [(n, "go") for n, _ in servers] for c, servers in MIXED.items()}


async def _meta_views(nc) -> dict:
    """Each server's ``/jsz`` meta group view (``$SYS.REQ.SERVER.PING.JSZ``), by server name."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"{}", reply=inbox)
    views = {}
    try:
        while True:
            m = await sub.next_msg(timeout=2)
            d = json.loads(m.data)
            views[d["server"]["name"]] = d["data"].get("meta_cluster")
    except Exception:  # noqa: BLE001 - nats' timeout ends the collection
        pass
    finally:
        await sub.unsubscribe()
    return views


async def _fetch(js, stream: str, durable: str, n: int) -> list:
    """``n`` messages of a new durable pull consumer, fetched as a client does: its pull request sent again
    when the first one got no answer. The consumer's create is answered by its leader before the leader's
    interest in its pull requests has crossed every route and gateway: a request meanwhile gets no responders
    where nothing else is interested, and where the account's JetStream API import is (it takes every
    ``$JS.API.>`` subject), it is not sent to the leader's cluster at all, as the gateway's interest-only mode
    wants, and the fetch times out. nats-server does the same: a pull request published on a server of the
    other cluster as soon as the create is answered was lost 13 times in 90 with an all-Go super-cluster of
    the SPLIT shape below, 12 in 90 with the Rillet cluster as B (docs/mixed-clusters.md)."""
    import nats.errors
    import nats.js.errors
    sub = await js.pull_subscribe(f"{stream.lower()}.>", durable=durable, stream=stream)
    deadline = time.monotonic() + 60
    while True:
        try:
            return await sub.fetch(n, timeout=5)
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError, nats.errors.TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def _cluster_shape(c: dict) -> tuple:
    """What a stream or consumer info's ``cluster`` block says, without its volatile values (who leads, times)."""
    reps = c.get("replicas") or []
    return (c["name"], tuple(sorted(c)), 1 + len(reps), tuple(sorted({k for r in reps for k in r} - {"lag"})))


async def _drill(sc: Super) -> dict:
    """The same steps on any super-cluster of the MIXED shape; what it returns is compared between the mixed
    super-cluster and the all-Go one (each answer checked here already where its value must be the same)."""
    import nats
    out: dict = {}
    names = list(sc.kind)
    conns = {n: await nats.connect(sc.url(n)) for n in names}
    sys_ = {n: await nats.connect(sc.url(n, "sys")) for n in names}
    try:
        async def ready() -> bool:  # the meta group answers through every server of both clusters
            for c in conns.values():
                if "error" in await _api(c, "$JS.API.INFO", timeout=2):
                    return False
            return True
        await _until(ready, 90, what="$JS.API.INFO through every server")
        infos = {n: await _api(c, "$JS.API.INFO") for n, c in conns.items()}
        for d in infos.values():
            d["api"].pop("total")  # (counts requests, which differs between servers)
        assert len({json.dumps(d, sort_keys=True) for d in infos.values()}) == 1, infos
        out["info"] = infos["g0"]
        # one meta group over both clusters: the Go servers count all six servers as its peers
        views = await _meta_views(sys_["g2"])
        for n, k in sc.kind.items():
            if k != "go":
                continue
            mc = views[n]
            assert mc["cluster_size"] == 6 and mc["name"] == sc.cluster_of[n], (n, mc)
            assert {r["name"] for r in mc["replicas"]} == set(names) - {n}, (n, mc)  # (every peer but itself)
        out["meta_leaders"] = {views[n]["leader"] for n, k in sc.kind.items() if k == "go"}
        assert len(out["meta_leaders"]) == 1
        # the meta leader's answers through the system account of any server
        removes = {n: await _api(c, "$JS.API.SERVER.REMOVE", {"peer": "nobody"}) for n, c in sys_.items()}
        assert len({json.dumps(d) for d in removes.values()}) == 1, removes
        out["remove_unknown"] = removes["r3"]
        out["nowhere"] = await _api(conns["r1"], "$JS.API.STREAM.CREATE.NOWHERE",
                                    {"name": "NOWHERE", "placement": {"cluster": "Z"}})
        # streams placed in either cluster, created from a client of the other (and of the same) cluster
        plan = [("B3", "B", 3, "r1"), ("A3", "A", 3, "r3"), ("B1", "B", 1, "g0"), ("A1", "A", 1, "r2"),
                ("A3L", "A", 3, "g1")]
        for name, cl, rep, via in plan:
            async def create():  # (a group whose preferred leader is Rillet elects after the Go peers' election
                return await _api(conns[via], f"$JS.API.STREAM.CREATE.{name}",  # timeout: retried on a timeout)
                                  {"name": name, "subjects": [name.lower() + ".>"], "num_replicas": rep,
                                   "placement": {"cluster": cl}}, timeout=20)
            r = await _until(create, 90, what=f"stream {name} created")
            if "error" in r and r["error"]["err_code"] == 10058:  # (the retried create of one that was made)
                r = await _api(conns[via], f"$JS.API.STREAM.INFO.{name}")
            assert "error" not in r and r["config"]["placement"] == {"cluster": cl}, r
            out[f"create {name}"] = {k: r[k] for k in ("type", "config")}
        # publishes through every server of both clusters, info and consumers through every server too
        for name, cl, rep, _ in plan:
            for i, via in enumerate(names):
                ack = await conns[via].jetstream(timeout=30).publish(f"{name.lower()}.{via}", via.encode())
                assert (ack.stream, ack.seq) == (name, i + 1), (name, via, ack)
            blocks = {}
            for via in names:
                si = await _api(conns[via], f"$JS.API.STREAM.INFO.{name}")
                assert si["state"]["messages"] == len(names) and si["state"]["last_seq"] == len(names), si
                c = si["cluster"]
                servers = {c["leader"]} | {x["name"] for x in c.get("replicas") or []}
                assert len(servers) == rep and {sc.cluster_of[s] for s in servers} == {cl}, (name, via, c)
                blocks[via] = (c["leader"], sorted(servers))
            assert len({json.dumps(b) for b in blocks.values()}) == 1, (name, blocks)  # one answer everywhere
            out[f"cluster {name}"] = _cluster_shape(si["cluster"])
            for via in names:
                try:
                    msgs = await _fetch(conns[via].jetstream(timeout=30), name, f"d{via}", len(names))
                except nats.errors.TimeoutError:
                    ci = await _api(conns[via], f"$JS.API.CONSUMER.INFO.{name}.d{via}")
                    logs = {n: s._test_log.getvalue().splitlines()[-12:] for n, s in sc.rillet.items()}
                    raise AssertionError(f"no messages from {name}/d{via} through {via}: {ci} {logs}")
                assert [(m.subject, m.data) for m in msgs] == [(f"{name.lower()}.{s}", s.encode()) for s in names]
                for m in msgs:
                    await m.ack_sync(timeout=30)
                ci = await _api(conns[via], f"$JS.API.CONSUMER.INFO.{name}.d{via}")
                assert ci["num_ack_pending"] == 0 and ci["num_pending"] == 0, ci
                assert ci["cluster"]["name"] == cl and ci["cluster"]["leader"] in {s for s, _ in sc.shape[cl]}, ci
            out[f"consumer cluster {name}"] = _cluster_shape(ci["cluster"])
        names_ans = await _api(conns["r2"], "$JS.API.STREAM.NAMES")
        assert sorted(names_ans["streams"]) == sorted(p[0] for p in plan), names_ans
        out["names"] = sorted(names_ans["streams"])
        return out
    finally:
        for c in (*conns.values(), *sys_.values()):
            await c.close()


@live
async def test_mixed_super_cluster_shares_one_meta_group(tmp_path):
    """Cluster A of 2 Go + 1 Rillet, cluster B of 1 Go + 2 Rillet, over gateways: one meta group of six;
    $JS.API.INFO and the meta leader's SERVER.REMOVE answer through every server; R1 and R3 streams placed in
    either cluster from clients of the other; publishes and consumers through every server of both clusters;
    stream and consumer infos' cluster blocks the same from every server. Then the all-Go super-cluster of the
    same shape runs the same drill: the same answers."""
    got = {}
    for label, shape in (("mixed", MIXED), ("go", ALL_GO)):
        root = tmp_path / label
        root.mkdir()
        sc = Super(root, shape)
        try:
            await sc.start()
            got[label] = await _drill(sc)
        finally:
            await sc.stop()
    mixed, go = got["mixed"], got["go"]
    assert mixed.keys() == go.keys()
    for k in mixed:
        if k != "meta_leaders":
            assert mixed[k] == go[k], (k, mixed[k], go[k])


# a Go cluster and a Rillet cluster: the same server names as MIXED, A all Go and B all Rillet
SPLIT = {"A": [("g0", "go"), ("g1", "go"), ("g2", "go")], "B": [("r1", "rillet"), ("r2", "rillet"), ("r3", "rillet")]}


@live
async def test_go_cluster_and_rillet_cluster_share_one_meta_group(tmp_path):
    """A cluster of 3 Go servers and a cluster of 3 Rillet servers over gateways: one meta group of six, the same
    drill as above. The R3 stream and its consumers placed in B by the Go meta leader have Rillet peers only: the
    preferred peer campaigns at once as nats-server's does, leads, answers the create and the stream and consumer
    infos with nats-server's cluster block (raft group, leader since, traffic account). The all-Go super-cluster of
    the same shape gives the same answers."""
    got = {}
    for label, shape in (("split", SPLIT), ("go", {c: [(n, "go") for n, _ in v] for c, v in SPLIT.items()})):
        root = tmp_path / label
        root.mkdir()
        sc = Super(root, shape, lead=True)
        try:
            await sc.start()
            got[label] = await _drill(sc)
        finally:
            await sc.stop()
    split, go = got["split"], got["go"]
    assert split.keys() == go.keys()
    for k in split:
        if k != "meta_leaders":
            assert split[k] == go[k], (k, split[k], go[k])
    assert split["cluster B3"][1] == ("leader", "leader_since", "name", "raft_group", "replicas", "system_account",
                                      "traffic_account")


def test_cluster_info_of_a_rillet_group_leader_is_nats_servers():
    """The ``cluster`` block a Rillet leader of a Go group answers with: nats-server's ClusterInfo fields in its
    order, a replica's lag only when it has one."""
    from types import SimpleNamespace
    from rillet.jetstream.cluster.golead import GoRaftPeer, cluster_info
    raft = GoRaftPeer("S-R3F-abc", "me000001")
    raft.peers = {"me000001", "pa000001", "pb000001"}
    raft.led_since = time.monotonic() - 2.0
    raft.commit = 10
    raft.match = {"pa000001": 10, "pb000001": 7}
    raft.last_seen = {"pa000001": time.monotonic(), "pb000001": time.monotonic() - 1.0}
    server = SimpleNamespace(name="r1", system_account=SimpleNamespace(name="SYS"))
    doc = cluster_info(server, {"group": {"name": "S-R3F-abc", "cluster": "B"}}, raft, "me000001",
                       {"pa000001": "r2"})
    assert list(doc) == ["name", "raft_group", "leader", "leader_since", "system_account", "traffic_account",
                         "replicas"]
    assert (doc["name"], doc["raft_group"], doc["leader"], doc["system_account"], doc["traffic_account"]) == (
        "B", "S-R3F-abc", "r1", True, "SYS")
    from rillet.gocompat.gotime import time_ns
    assert abs(time_ns(doc["leader_since"]) / 1e9 - (time.time() - 2.0)) < 1.0
    a, b = doc["replicas"]
    assert list(a) == ["name", "current", "active", "peer"] and a["name"] == "r2"
    assert list(b) == ["name", "current", "active", "lag", "peer"] and b["lag"] == 3 and b["name"] == "pb000001"


def test_api_answers_of_a_rillet_group_leader_carry_the_dynamic_metadata():
    """A stream's or consumer's config in the create and info answers of a Rillet leader carries ``_nats.ver``
    and ``_nats.level``, as nats-server's setDynamicStreamMetadata adds them (the assignment stores neither)."""
    import rillet
    from rillet.jetstream.cluster.golead import with_dynamic_metadata
    ver = rillet.SERVER_VERSION
    cfg = {"name": "S", "metadata": {"_nats.req.level": "0", "z": "1"}}
    got = with_dynamic_metadata(cfg)
    assert got["metadata"] == {"_nats.level": "5", "_nats.req.level": "0", "_nats.ver": ver, "z": "1"}
    assert list(got["metadata"]) == sorted(got["metadata"]) and cfg["metadata"] == {"_nats.req.level": "0", "z": "1"}
    assert with_dynamic_metadata({"name": "S"})["metadata"] == {"_nats.level": "5", "_nats.ver": ver}
