"""Route settings changed by a config reload, as nats-server applies them (reload.go): pinned accounts added
and removed (the route_acc_add_reqid INFO exchange), the pool size, the cluster authorization and name,
route permissions; and what nats-server refuses, with its errors. Rillet-only clusters, and a cluster of
one Go nats-server with two Rillet servers (the Go server reloaded with SIGHUP)."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import nats
import pytest

from helpers import free_port
from rillet.config.options_builder import load_string
from rillet.server.logging import Logger
from rillet.app.compose import build_server
from test_cluster_routes import _until

ACCOUNTS = """
accounts {
  A { users: [{user: a, password: a}] }
  C { users: [{user: c, password: c}] }
  P { users: [{user: p, password: p}] }
  SYS { users: [{user: sys, password: sys}] }
}
system_account: SYS
"""


def _conf(name: str, cport: int, routes: list, cl: str = "", extra: str = "") -> str:
    r = ", ".join(p if isinstance(p, str) else f"nats://127.0.0.1:{p}" for p in routes)
    return (ACCOUNTS + extra + f"server_name: {name}\nlisten: 127.0.0.1:-1\n"
            f"cluster {{ name: rl, listen: 127.0.0.1:{cport}, routes: [{r}]\n{cl} }}\n")


class Node:
    """An in-process Rillet server reloaded with a new cluster block (``reload(cl=...)``)."""

    def __init__(self, name: str, cport: int, routes: list[int], cl: str = "") -> None:
        self.name, self.cport, self.routes = name, cport, routes
        self.buf = io.StringIO()
        self.s = build_server(load_string(_conf(name, cport, routes, cl)), Logger(debug=True, out=self.buf))

    def reload(self, cl: str = "", routes: list[int] | None = None, extra: str = "") -> None:
        self.s.reload(load_string(_conf(self.name, self.cport, self.routes if routes is None else routes, cl,
                                        extra)))


@contextlib.asynccontextmanager
async def rillet_cluster(n: int, cl: str = ""):
    ports = [free_port() for _ in range(n)]
    nodes = [Node(f"r{i}", ports[i], [ports[0]] if i else [], cl) for i in range(n)]
    try:
        for nd in nodes:
            await nd.s.start()
        await _until(lambda: all(nd.s.cluster.servers_connected() == n - 1 for nd in nodes), 10, "full mesh")
        yield nodes
    finally:
        for nd in nodes:
            await nd.s.shutdown()


async def _flows(urls: list[str], user: str, subject: str, timeout: float = 5.0) -> None:
    """A message published on each server reaches a subscriber on every other one, exactly once."""
    async with contextlib.AsyncExitStack() as st:
        ncs = []
        for u in urls:
            nc = await nats.connect(u, user=user, password=user)
            st.push_async_callback(nc.close)
            ncs.append(nc)
        got: list[list[bytes]] = [[] for _ in ncs]
        for i, nc in enumerate(ncs):
            async def cb(m, i=i):
                got[i].append(m.data)
            await nc.subscribe(subject, cb=cb)
            await nc.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        k = 0
        while True:  # probes until the interest has crossed everywhere
            k += 1
            for i, nc in enumerate(ncs):
                await nc.publish(subject, b"probe %d %d" % (i, k))
                await nc.flush()
            await asyncio.sleep(0.05)
            if all(any(m.startswith(b"probe %d %d" % (j, k)) for m in g) for g in got for j in range(len(ncs))):
                break
            if loop.time() > deadline:
                raise AssertionError(f"{subject} for {user} did not cross: {got}")
        for g in got:
            g.clear()
        for i, nc in enumerate(ncs):
            await nc.publish(subject, b"m%d" % i)
            await nc.flush()
        await asyncio.sleep(0.15)
        for g in got:
            assert sorted(g) == sorted(b"m%d" % i for i in range(len(ncs))), got


def _pinned(nd: Node, acc: str) -> int:
    return len(nd.s.cluster.pinned.get(acc, {}))


async def test_reload_adds_and_removes_pinned_accounts():
    async with rillet_cluster(3) as nodes:
        urls = [nd.s.client_url for nd in nodes]
        await _flows(urls, "p", "pin.x")
        # the first server reloaded with accounts [P]: it announces P to the two others (route_acc_add_reqid),
        # they stop taking P's interest over the pool and answer; then it dials its dedicated P routes
        nodes[0].reload("accounts: [P]")
        await _until(lambda: all(b"P" in nd.s.cluster.transitioning for nd in nodes[1:]), 3, "peers told")
        assert "Timed out waiting for confirmation" not in nodes[0].buf.getvalue()
        for nd in nodes[1:]:
            nd.reload("accounts: [P]")
        await _until(lambda: all(_pinned(nd, "P") == 2 for nd in nodes), 10, "dedicated P routes everywhere")
        assert all(not nd.s.cluster.transitioning for nd in nodes)
        for nd in nodes:
            assert all(rc.parser.account == b"P" for rc in nd.s.cluster.pinned["P"].values())
        await _flows(urls, "p", "pin.y")
        await _flows(urls, "a", "pin.a")
        # P's interest and messages use the dedicated routes only
        for nd in nodes:
            for conns in nd.s.cluster.pools.values():
                assert not any(acc == b"P" for rc in conns if rc is not None for (acc, *_r) in rc.rsubs)
        # removed again, one server after the other: back on the pool, the dedicated routes closed for good
        for nd in nodes:
            nd.reload("")
        await _until(lambda: all("P" not in nd.s.cluster.pinned for nd in nodes), 5, "P unpinned")
        await _until(lambda: all(len(nd.s.cluster.conns) == 2 * 4 for nd in nodes), 5, "pools and SYS only")
        await _flows(urls, "p", "pin.z")
        assert "Route Removed" in nodes[0].buf.getvalue()


async def test_reload_pool_size():
    async with rillet_cluster(3) as nodes:
        urls = [nd.s.client_url for nd in nodes]
        for nd in nodes:  # a rolling change: for a while, pools of 3 and 5 work together
            nd.reload("pool_size: 5")
            await _flows(urls, "c", "ps.c", 10)
        await _until(lambda: all(nd.s.cluster.servers_connected() == 2 and
                                 all(len(c) == 5 for c in nd.s.cluster.pools.values()) for nd in nodes), 10,
                     "pools of 5")
        await _until(lambda: all(len(nd.s.cluster.conns) == 2 * 6 for nd in nodes), 10, "no extra connections")
        await _flows(urls, "a", "ps.a")
        # pooling off: one route per server, the system account's dedicated routes closed
        for nd in nodes:
            nd.reload("pool_size: -1")
        await _until(lambda: all(len(nd.s.cluster.conns) == 2 and nd.s.cluster.servers_connected() == 2
                                 for nd in nodes), 10, "one route per server")
        assert all(not nd.s.cluster.pinned for nd in nodes)
        await _flows(urls, "a", "ps.off")


async def test_reload_refusals_with_nats_server_errors():
    async with rillet_cluster(2) as nodes:
        nd = nodes[0]
        with pytest.raises(ValueError, match=r'unable to add account "X" to the list of dedicated routes: '
                                             r"account missing"):
            nd.reload("accounts: [X]")
        other = free_port()
        with pytest.raises(ValueError, match=f"config reload not supported for cluster port: old={nd.cport}, "
                                             f"new={other}"):
            nd.s.reload(load_string(_conf("r0", other, [])))
        assert nd.s.cluster.pool_size == 3 and "X" not in nd.s.cluster.pinned


async def test_reload_cluster_name_and_authorization():
    p0, p1 = free_port(), free_port()
    auth = "authorization { user: ru, password: rp }"
    a = Node("a", p0, [], auth)
    b = Node("b", p1, [f"nats://ru:rp@127.0.0.1:{p0}"], "")
    try:
        await a.s.start()
        await b.s.start()
        await _until(lambda: a.s.cluster.servers_connected() == 1, 5, "routes")
        # the name: applied (nats-server: "Cluster name updated to")
        a.reload(auth + "\nname: renamed")  # (after the block's own name: the later key wins)
        assert a.s.cluster.name == "renamed" and "Cluster name updated to renamed" in a.buf.getvalue()
        a.reload(auth)
        # new credentials: the routes b dialled with the old ones are closed (accepted side), not redialled
        a.reload("authorization { user: ru, password: other }")
        await _until(lambda: not a.s.cluster.conns or all(rc.closed for rc in a.s.cluster.conns), 3,
                     "routes closed")
        assert "Authentication Failure" in a.buf.getvalue()
        await asyncio.sleep(1.3)  # b dials again (explicit routes) and is refused
        assert a.s.cluster.servers_connected() == 0
        b.reload(routes=[f"nats://ru:other@127.0.0.1:{p0}"])
        await _until(lambda: a.s.cluster.servers_connected() == 1, 5, "routes with the new credentials")
    finally:
        await b.s.shutdown()
        await a.s.shutdown()


# ==== route permissions ==========================================================================================

PERMS = 'permissions { import: { allow: ["imp.>", "both.>"] }, export: { allow: ["exp.>", "both.>"] } }'


async def _perm_matrix(pub_url: str, sub_url: str, subjects: list[str]) -> dict[str, bool]:
    """For each subject: whether a message published on one server reaches a subscriber on the other."""
    out = {}
    async with contextlib.AsyncExitStack() as st:
        pub = await nats.connect(pub_url, user="a", password="a")
        st.push_async_callback(pub.close)
        sub_nc = await nats.connect(sub_url, user="a", password="a")
        st.push_async_callback(sub_nc.close)
        subs = {s: await sub_nc.subscribe(s) for s in subjects}
        await sub_nc.flush()
        await asyncio.sleep(0.3)  # (interest crosses, or is held back)
        for s in subjects:
            await pub.publish(s, b"x")
        await pub.flush()
        await asyncio.sleep(0.2)
        for s, sub in subs.items():
            try:
                await sub.next_msg(0.05)
                out[s] = True
            except nats.errors.TimeoutError:
                out[s] = False
    return out


SUBJECTS = ["imp.1", "exp.1", "both.1", "none.1"]
# read from nats-server 2.15 (the Go server with PERMS, the other without): the permissioned server sends its
# interest only for import subjects and takes the peer's only for export subjects
EXPECTED = {
    "to the permissioned server": {"imp.1": True, "exp.1": False, "both.1": True, "none.1": False},
    "from the permissioned server": {"imp.1": False, "exp.1": True, "both.1": True, "none.1": False},
}


async def test_route_permissions_rillet():
    pa, pb = free_port(), free_port()
    a = Node("a", pa, [], PERMS)
    b = Node("b", pb, [pa], "")
    try:
        await a.s.start()
        await b.s.start()
        await _until(lambda: a.s.cluster.servers_connected() == 1 and b.s.cluster.servers_connected() == 1, 5, "mesh")
        got = {"to the permissioned server": await _perm_matrix(b.s.client_url, a.s.client_url, SUBJECTS),
               "from the permissioned server": await _perm_matrix(a.s.client_url, b.s.client_url, SUBJECTS)}
        assert got == EXPECTED
        from rillet.monitor.endpoints import routez
        assert routez(a.s, {})["import"] == {"allow": ["imp.>", "both.>"]}
        assert {json.dumps(r.get("export")) for r in routez(b.s, {})["routes"]} == \
            {json.dumps({"allow": ["exp.>", "both.>"]})}
        # reloaded without permissions: everything crosses; the peer learns it from the new INFO
        a.reload("")
        await _until(lambda: all(r.get("export") is None for r in routez(b.s, {})["routes"]), 3, "perms INFO")
        assert all((await _perm_matrix(b.s.client_url, a.s.client_url, SUBJECTS)).values())
        assert all((await _perm_matrix(a.s.client_url, b.s.client_url, SUBJECTS)).values())
        # and back: what import now denies is withdrawn, what export denies dropped
        a.reload(PERMS)
        got = {"to the permissioned server": await _perm_matrix(b.s.client_url, a.s.client_url, SUBJECTS),
               "from the permissioned server": await _perm_matrix(a.s.client_url, b.s.client_url, SUBJECTS)}
        assert got == EXPECTED
    finally:
        await b.s.shutdown()
        await a.s.shutdown()


# ==== with a Go nats-server ======================================================================================

@contextlib.contextmanager
def go_node(conf: str):
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(conf)
    p = subprocess.Popen(["nats-server", "-c", f.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield p, f.name
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        os.unlink(f.name)


def _go_routez(http: int) -> dict:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/routez", timeout=2).read())


def _go_conf(gport: int, ghttp: int, gcl: int, cl: str = "") -> str:
    return ACCOUNTS + f"port: {gport}\nhttp_port: {ghttp}\nserver_name: go1\n" \
        f"cluster {{ name: rl, listen: 127.0.0.1:{gcl}\n{cl} }}\n"


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_route_permissions_match_nats_server():
    gport, ghttp, gcl = free_port(), free_port(), free_port()
    with go_node(_go_conf(gport, ghttp, gcl, PERMS)):
        b = Node("b", free_port(), [gcl], "")
        try:
            await b.s.start()
            await _until(lambda: b.s.cluster.servers_connected() == 1, 10, "routes to the Go server")
            go_url = f"nats://127.0.0.1:{gport}"
            got = {"to the permissioned server": await _perm_matrix(b.s.client_url, go_url, SUBJECTS),
                   "from the permissioned server": await _perm_matrix(go_url, b.s.client_url, SUBJECTS)}
            assert got == EXPECTED
        finally:
            await b.s.shutdown()


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
async def test_reload_pinned_accounts_and_pool_size_with_a_go_server():
    gport, ghttp, gcl = free_port(), free_port(), free_port()
    with go_node(_go_conf(gport, ghttp, gcl)) as (proc, path):
        deadline = time.monotonic() + 10
        while True:
            try:
                _go_routez(ghttp)
                break
            except OSError:
                assert time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                await asyncio.sleep(0.05)
        nodes = [Node(f"r{i}", free_port(), [gcl]) for i in range(2)]

        def go_reload(cl: str) -> None:
            with open(path, "w") as f:
                f.write(_go_conf(gport, ghttp, gcl, cl))
            proc.send_signal(signal.SIGHUP)

        def go_accounts() -> list[str]:
            return sorted(r.get("account", "") for r in _go_routez(ghttp)["routes"])
        try:
            for nd in nodes:
                await nd.s.start()
            await _until(lambda: all(nd.s.cluster.servers_connected() == 2 for nd in nodes), 10, "mesh with Go")
            urls = [f"nats://127.0.0.1:{gport}"] + [nd.s.client_url for nd in nodes]
            await _flows(urls, "p", "g.p1")
            # the Go server pins P first: the Rillet servers answer its route_acc_add_reqid INFO
            go_reload("accounts: [P]")
            await _until(lambda: all(b"P" in nd.s.cluster.transitioning for nd in nodes), 5, "Go's announcement")
            for nd in nodes:
                nd.reload("accounts: [P]")
            await _until(lambda: all(_pinned(nd, "P") == 2 for nd in nodes), 10, "dedicated P routes")
            await _until(lambda: go_accounts() == [""] * 6 + ["P"] * 2 + ["SYS"] * 2, 10,
                         "Go's dedicated routes")
            await _flows(urls, "p", "g.p2")
            await _flows(urls, "a", "g.a")
            # a Rillet server pins C first: the Go server answers ours
            nodes[0].reload("accounts: [P, C]")
            await _until(lambda: "C" in nodes[1].s.cluster.pinned, 5, "our announcement reached r1")
            assert "Timed out waiting for confirmation" not in nodes[0].buf.getvalue()  # (Go answered)
            go_reload("accounts: [P, C]")
            nodes[1].reload("accounts: [P, C]")
            await _until(lambda: all(_pinned(nd, "C") == 2 for nd in nodes), 10, "dedicated C routes")
            await _flows(urls, "c", "g.c")
            # pool size 3 -> 4, one server after the other
            go_reload("accounts: [P, C], pool_size: 4")
            for nd in nodes:
                nd.reload("accounts: [P, C], pool_size: 4")
            await _until(lambda: all(nd.s.cluster.servers_connected() == 2 and
                                     all(len(c) == 4 for c in nd.s.cluster.pools.values()) for nd in nodes), 10,
                         "pools of 4")
            await _until(lambda: len(_go_routez(ghttp)["routes"]) == 2 * (4 + 3), 10, "Go's routes")
            await _flows(urls, "a", "g.a4")
            await _flows(urls, "c", "g.c4")
        finally:
            for nd in nodes:
                await nd.s.shutdown()
