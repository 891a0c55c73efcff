"""The composition root (rillet/app/compose.py): what it builds for which options, what it loads, and the core
server (``Server(opts)`` without it) refusing what only the root can build."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from rillet.app.compose import Root, build_server
from rillet.config.options import ClusterOptions, JetStreamOptions, Options
from rillet.server.accounts import Account
from rillet.server.server import Server
from rillet.server.subsystems import Core


def _loaded_after(opts_src: str) -> dict:
    """Start and stop a server built by the root in a fresh interpreter; which optional modules were loaded."""
    code = textwrap.dedent(f"""
        import asyncio, io, json, sys
        from rillet.app import build_server
        from rillet.config.options import *
        from rillet.server.logging import Logger

        async def go():
            srv = build_server({opts_src}, Logger(out=io.StringIO()))
            await srv.start()
            await srv.shutdown()

        asyncio.run(go())
        mods = sys.modules
        print(json.dumps({{
            "cluster": sorted(m for m in mods if m.startswith("rillet.cluster.") and m != "rillet.cluster.protocol"),
            "httpd": "rillet.monitor.httpd" in mods,
            "aiohttp": "aiohttp" in mods,
            "jetstream": "rillet.jetstream.manager" in mods,
        }}))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_root_loads_only_what_the_options_need(tmp_path) -> None:
    plain = _loaded_after('Options(host="127.0.0.1", port=-1)')
    assert plain == {"cluster": [], "httpd": False, "aiohttp": False, "jetstream": False}
    mon = _loaded_after('Options(host="127.0.0.1", port=-1, http_port=-1)')
    assert mon["httpd"] and not mon["cluster"] and not mon["jetstream"]
    js = _loaded_after(f'Options(host="127.0.0.1", port=-1, jetstream=JetStreamOptions(enabled=True, '
                       f'store_dir={str(tmp_path)!r}))')
    assert js["jetstream"] and not js["cluster"] and not js["aiohttp"]
    cl = _loaded_after('Options(host="127.0.0.1", port=-1, cluster=ClusterOptions(host="127.0.0.1", port=-1))')
    assert "rillet.cluster.cluster" in cl["cluster"] and not cl["aiohttp"] and not cl["jetstream"]


def test_root_builds_links_and_account_parts() -> None:
    srv = build_server(Options(host="127.0.0.1", port=-1))
    assert isinstance(srv.subsystems, Root)
    assert srv.cluster is None and srv.leafnodes is None and srv.gateway is None
    assert type(srv.global_account) is Account
    srv = build_server(Options(host="127.0.0.1", port=-1, cluster=ClusterOptions(host="127.0.0.1", port=-1)))
    assert srv.cluster is not None and type(srv.global_account) is Account
    assert [type(li).__name__ for li in srv.interest_listeners] == ["RouteInterest"]
    assert srv.global_account.shadows
    assert all(type(a) is type(srv.global_account) for a in srv.accounts.values())
    # routes and leaf nodes: still the plain Account; the links' entry points and listeners are wired
    from rillet.cluster import leaf
    from rillet.config.leaf_section import LeafNodeOptions
    srv = build_server(Options(host="127.0.0.1", port=-1, cluster=ClusterOptions(host="127.0.0.1", port=-1),
                               leaf=LeafNodeOptions(host="127.0.0.1", port=-1)))
    assert type(srv.global_account) is Account and srv.global_account.shadows
    assert [type(li).__name__ for li in srv.interest_listeners] == ["RouteInterest", "LeafInterest"]
    assert srv.cluster.routed_entry is leaf.deliver_routed and srv.leafnodes.leaf_entry is leaf.deliver_leaf
    assert all(a.gw is None and a.no_match is None for a in srv.accounts.values())
    # gateways: still the plain Account, with the gateway subsystem's part in each account (the executor's gateway
    # step, the _GR_. replies) and the entry points of routes (and leafs) that know of gateways
    from rillet.cluster import gateway_account
    from rillet.config.gateway_section import GatewayOptions
    for with_leafs in (False, True):
        o = Options(host="127.0.0.1", port=-1, cluster=ClusterOptions(host="127.0.0.1", port=-1),
                    gateway_opts=GatewayOptions(name="A", host="127.0.0.1", port=-1))
        if with_leafs:
            o.leaf = LeafNodeOptions(host="127.0.0.1", port=-1)
        srv = build_server(o)
        acc = srv.lookup_account("B")
        for a in (srv.global_account, acc):
            assert type(a) is Account and type(a.gw) is gateway_account.AccountGateway and a.gw.acc is a
            assert a.no_match == a.gw.no_match and not a.gw.replies
        assert srv.global_account.gw is not acc.gw and srv.global_account.gw.outo is srv.gateway.outo
        assert [type(li).__name__ for li in srv.interest_listeners] == \
            ["RouteInterest", "GatewayInterest"] + (["LeafInterest"] if with_leafs else [])
        assert srv.cluster.routed_entry is (leaf.deliver_routed_gateways if with_leafs else gateway_account.deliver_routed)
        if with_leafs:
            assert srv.leafnodes.leaf_entry is leaf.deliver_leaf_gateways
    # no subclass of Account anywhere
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parent.parent / "rillet"
    subclasses = [f"{p.relative_to(root)}:{m.group(0)}" for p in root.rglob("*.py")
                  for m in re.finditer(r"^class \w+\([^)]*\bAccount\)", p.read_text(), re.M)]
    assert subclasses == []


def test_core_server_refuses_what_only_the_root_builds() -> None:
    srv = Server(Options(host="127.0.0.1", port=-1))
    assert isinstance(srv.subsystems, Core) and type(srv.global_account) is Account
    for opts in (Options(cluster=ClusterOptions(port=-1)), Options(http_port=-1)):
        with pytest.raises(ValueError, match=r"need the composition root: build the server with "
                                             r"rillet\.app\.build_server"):
            Server(opts)
    with pytest.raises(ValueError, match=r"^jetstream need the composition root"):
        Server(Options(jetstream=JetStreamOptions(enabled=True)))  # (rillet.server does not import JetStream)
    with pytest.raises(ValueError, match="cluster need the composition root"):
        srv.reload(Options(host="127.0.0.1", port=-1, cluster=ClusterOptions(port=-1)))
    assert srv.opts.cluster.port == 0  # (refused before anything changed)


async def test_core_server_serves_clients() -> None:
    import io

    import nats

    from rillet.server.logging import Logger
    srv = Server(Options(host="127.0.0.1", port=-1), Logger(out=io.StringIO()))
    await srv.start()
    try:
        nc = await nats.connect(srv.client_url)
        sub = await nc.subscribe("a")
        await nc.publish("a", b"x")
        assert (await sub.next_msg(timeout=2)).data == b"x"
        await nc.close()
    finally:
        await srv.shutdown()
