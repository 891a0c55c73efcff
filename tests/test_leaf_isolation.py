"""Leaf node interest isolation (nats-server 2.12/2.15): ``leafnodes { isolate_leafnode_interest }`` (or ``isolate``) on a
server keeps the interest of its leaf connections from its other leaf connections (so one leaf's publishes do not
reach another leaf's subscribers through it, while the server's own clients hear both); a remote's
``request_isolation`` asks the hub for that on its connection (CONNECT ``isolate``), a remote's own ``isolate``
applies it on the leaf's side; /leafz says ``is_isolated``. Checked against nats-server as the hub."""
from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import urllib.request

import pytest

from rillet.config import ConfigError
from rillet.config.options_builder import load_string
from test_cluster_leaf import Inbox, _go, _until, clients, hub_port, leaf_interest, leaf_ready, needs_go, rillet


@contextlib.asynccontextmanager
async def two_leafs(url: str, remote1: str = "", remote2: str = ""):
    async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}"\n{remote1} }} ] }}', "l1") as l1, \
            rillet(f'leafnodes {{ remotes [ {{ url: "{url}"\n{remote2} }} ] }}', "l2") as l2:
        await _until(lambda: leaf_ready(l1) and leaf_ready(l2), 15.0, "two leaf connections")
        yield l1, l2


async def _flow(hub_url: str, l1, l2, subject: str) -> tuple[int, int]:
    """A subscriber of ``subject`` on leaf 2; once the hub has its interest (the hub's publishes reach it), a
    subscriber on the hub of another subject, whose interest the hub sends leaf 1 after leaf 2's (in the order it
    heard them); once leaf 1 has that, 60 publishes of ``subject`` from leaf 1: (whether leaf 1 had interest in
    ``subject``, how many of the publishes leaf 2 got)."""
    async with clients(hub_url, l1.client_url, l2.client_url) as (nh, n1, n2):
        on_l2 = Inbox()
        await n2.subscribe(subject, cb=on_l2.cb)
        await n2.flush()
        for _ in range(300):
            if any(m.data == b"probe" for m in on_l2.msgs):
                break
            await nh.publish(subject, b"probe")
            await nh.flush()
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the hub never heard leaf 2's interest")
        await nh.subscribe(subject + ".sync")
        await nh.flush()
        await _until(lambda: leaf_interest(l1, subject + ".sync") >= 1, 15.0, "the hub's interest at leaf 1")
        had = leaf_interest(l1, subject)
        for _ in range(60):
            await n1.publish(subject, b"x")
        await n1.flush()
        if had:
            await _until(lambda: sum(1 for m in on_l2.msgs if m.data == b"x") >= 60, 15.0, "leaf 2's subscriber")
        else:
            await asyncio.sleep(0.5)  # (anything on its way to leaf 2 arrives meanwhile)
        return min(had, 1), sum(1 for m in on_l2.msgs if m.data == b"x")


async def _leafz(port: int) -> dict:
    def get() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/leafz", timeout=5) as r:
            return json.loads(r.read())
    return await asyncio.get_running_loop().run_in_executor(None, get)


@pytest.mark.parametrize("isolate", [False, True])
async def test_hub_isolating_leaf_interest(isolate):
    conf = f'leafnodes {{ listen: "127.0.0.1:-1", isolate_leafnode_interest: {str(isolate).lower()} }}'
    async with rillet(conf, "hub") as hub:
        async with two_leafs(f"nats://127.0.0.1:{hub_port(hub)}") as (l1, l2):
            got = await _flow(hub.client_url, l1, l2, "iso.a")
            assert got == ((0, 0) if isolate else (1, 60)), got
            infos = [lf.monitor_info({}) for lf in hub.leafs.values()]
            assert all(i.get("is_isolated", False) is isolate for i in infos), infos
            assert list(infos[0])[:4] == (["id", "name", "is_spoke", "is_isolated"] if isolate
                                          else ["id", "name", "is_spoke", "account"])


async def test_a_leaf_requesting_isolation_gets_it_alone():
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        async with two_leafs(url, remote1="request_isolation: true") as (l1, l2):
            got = await _flow(hub.client_url, l1, l2, "iso.b")
            assert got == (0, 0), got
            by_name = {lf.remote_name: lf for lf in hub.leafs.values()}
            assert by_name["l1"].isolated and not by_name["l2"].isolated
            # the other way round leaf 1's interest still reaches leaf 2
            got = await _flow(hub.client_url, l2, l1, "iso.c")
            assert got == (1, 60), got


def test_isolation_settings_parse_and_type_errors():
    o = load_string('leafnodes { listen: "127.0.0.1:-1", isolate: true\n'
                    '  remotes [ { url: "nats://127.0.0.1:1", isolate_leafnode_interest: true, '
                    'request_isolation: true } ] }', "x.conf")
    assert o.leaf.isolate and o.leaf.remotes[0].local_isolation and o.leaf.remotes[0].request_isolation
    with pytest.raises(ConfigError, match="x.conf:1"):
        load_string('leafnodes { listen: "127.0.0.1:-1", isolate_leafnode_interest: "yes please" }', "x.conf")


@needs_go
@pytest.mark.parametrize("isolate", [False, True])
async def test_go_hub_isolating_rillet_leafs_the_same_way(isolate):
    from helpers import free_port
    with tempfile.TemporaryDirectory() as tmp:
        lport = free_port()
        go, port, http = _go(f'leafnodes {{ listen: "127.0.0.1:{lport}", '
                              f'isolate_leafnode_interest: {str(isolate).lower()} }}', tmp)
        with go:
            go.wait_ready()
            async with two_leafs(f"nats://127.0.0.1:{lport}") as (l1, l2):
                got = await _flow(f"nats://127.0.0.1:{port}", l1, l2, "iso.d")
                assert got == ((0, 0) if isolate else (1, 60)), got
                z = await _leafz(http)
                assert [lf.get("is_isolated", False) for lf in z["leafs"]] == [isolate, isolate], z
