"""Leaf nodes (rillet.cluster.leaf), driven as users do: nats-py clients on the hub and on the leaf.

Rillet hubs and leafs run in process (config text through the file loader); the interoperability tests run
a Go nats-server from PATH as the hub of a Rillet leaf and as a leaf of a Rillet hub.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import tempfile
import urllib.request

import nats
import pytest
from nats.errors import NoRespondersError

from helpers import ServerProcess, free_port
from rillet.config import ConfigError
from rillet.config.options_builder import _Builder, load_string
from rillet.config.options import Options
from rillet.config.parser import parse_string
from rillet.app.embed import run_server
from rillet.server.logging import Logger

GO_SERVER = shutil.which("nats-server")
needs_go = pytest.mark.skipif(GO_SERVER is None, reason="needs nats-server on PATH")


async def _until(cond, timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def rillet(text: str, name: str = "s"):
    """A Rillet server from config text, in process; ``srv._test_log`` holds its log."""
    o = load_string(f'listen: "127.0.0.1:-1"\nserver_name: {name}\n{text}\n', f"{name}.conf")
    buf = io.StringIO()
    async with run_server(o, log=Logger(debug=True, out=buf)) as srv:
        srv._test_log = buf
        yield srv


rillet_srv = rillet  # (where the name rillet is the package)


def hub_port(srv) -> int:
    return srv.leafnodes.addr[1]


def leaf_ready(srv, n: int = 1) -> bool:
    return sum(1 for lc in srv.leafs.values() if lc.registered) >= n


def leaf_interest(srv, subject: str, account: str = "$G") -> int:
    """Subscriptions announced by leaf connections (LS+) that match ``subject`` on ``srv``."""
    from rillet.cluster.leaf_conn import LEAF_KIND
    from rillet.cluster.routed import RemoteSub
    acc = srv.accounts.get(account)
    if acc is None:
        return 0
    r = acc.sublist.match(subject)
    subs = list(r.psubs) + [s for g in r.qsubs for s in g]
    return sum(1 for s in subs if type(s) is RemoteSub and s.client.kind == LEAF_KIND)


@contextlib.asynccontextmanager
async def hub_and_leaf(hub_conf: str = "", remote: str = "", leaf_conf: str = ""):
    """A Rillet hub and a Rillet leaf connected to it; ``remote``: extra keys of the remote entry."""
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1"\n{hub_conf} }}', "hub") as hub:
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        if "url:" not in remote:
            remote = f'url: "{url}"\n{remote}'
        async with rillet(f"leafnodes {{ remotes [ {{ {remote} }} ] }}\n{leaf_conf}", "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), what="leaf connection")
            yield hub, leaf


@contextlib.asynccontextmanager
async def clients(*urls, **kw):
    ncs = [await nats.connect(u, max_reconnect_attempts=0, **kw) for u in urls]
    try:
        yield ncs
    finally:
        for nc in ncs:
            await nc.close()


class Inbox:
    def __init__(self) -> None:
        self.msgs: list = []

    async def cb(self, m) -> None:
        self.msgs.append(m)

    def subjects(self) -> list[str]:
        return [m.subject for m in self.msgs]


# ==== Rillet hub, Rillet leaf ====================================================================================

async def test_pub_sub_both_ways_wildcards_and_headers():
    async with hub_and_leaf() as (hub, leaf), clients(hub.client_url, leaf.client_url) as (nh, nl):
        on_hub, on_leaf = Inbox(), Inbox()
        await nh.subscribe("up.>", cb=on_hub.cb)
        await nl.subscribe("down.*", cb=on_leaf.cb)
        await nh.flush()
        await nl.flush()
        await _until(lambda: leaf_interest(hub, "down.x") and leaf_interest(leaf, "up.a.b"), what="interest")
        await nl.publish("up.a.b", b"from leaf", headers={"X-K": "1"})
        await nh.publish("down.x", b"from hub")
        await nh.publish("down.x.y", b"not matched")  # no interest: never crosses
        await _until(lambda: on_hub.msgs and on_leaf.msgs)
        await asyncio.sleep(0.1)
        assert [(m.subject, m.data, m.headers) for m in on_hub.msgs] == [("up.a.b", b"from leaf", {"X-K": "1"})]
        assert [(m.subject, m.data) for m in on_leaf.msgs] == [("down.x", b"from hub")]
        # a message crosses only where there is interest: the hub sent nothing for down.x.y
        lc = next(iter(hub.leafs.values()))
        assert lc.out_msgs == 1


async def test_remote_with_hub_true_reverses_the_roles():
    """``hub: true`` on a remote: the dialling server is the hub, the accepting one the spoke (CONNECT
    is_hub), as /leafz shows on both sides; messages flow both ways. A Go server dialling with hub: true
    is taken as the hub too."""
    from rillet.monitor import endpoints
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "accepting") as acc:
        conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(acc)}", hub: true }} ] }}'
        async with rillet(conf, "dialling") as dial:
            await _until(lambda: leaf_ready(acc) and leaf_ready(dial))
            assert endpoints.leafz(acc, {})["leafs"][0]["is_spoke"] is True
            assert endpoints.leafz(dial, {})["leafs"][0]["is_spoke"] is False
            await _both_ways(dial.client_url, acc.client_url)
        if GO_SERVER is not None:
            with tempfile.TemporaryDirectory() as tmp:
                go, port, http = _go(conf, tmp)
                with go:
                    go.wait_ready()
                    await _until(lambda: leaf_ready(acc), what="the Go hub dialling")
                    assert endpoints.leafz(acc, {})["leafs"][0]["is_spoke"] is True
                    for _ in range(100):
                        theirs = (await _fetch(http, "leafz"))["leafs"]
                        if theirs:
                            break
                        await asyncio.sleep(0.05)
                    assert theirs[0]["is_spoke"] is False
                    await _both_ways(f"nats://127.0.0.1:{port}", acc.client_url)


async def test_never_sent_back_to_the_leaf_it_came_from():
    """A subscriber on the leaf and on the hub, publisher on the leaf: each gets it once (the hub does not
    echo it back over the leaf connection)."""
    async with hub_and_leaf() as (hub, leaf), clients(hub.client_url, leaf.client_url) as (nh, nl):
        a, b = Inbox(), Inbox()
        await nh.subscribe("echo.t", cb=a.cb)
        await nl.subscribe("echo.t", cb=b.cb)
        await nh.flush()
        await nl.flush()
        await _until(lambda: leaf_interest(hub, "echo.t") and leaf_interest(leaf, "echo.t"))
        for i in range(5):
            await nl.publish("echo.t", str(i).encode())
        await nl.flush()
        await _until(lambda: len(a.msgs) == 5 and len(b.msgs) == 5)
        await asyncio.sleep(0.15)
        assert len(a.msgs) == 5 and len(b.msgs) == 5


async def test_hub_mapping_source_is_interest_for_the_leaf():
    """A hub account mapping: the leaf hears about its source, so a leaf publish on it reaches the hub,
    where it is mapped."""
    async with rillet('mappings { "old.*": "new.$1" }\nleafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}'
        async with rillet(conf, "leaf") as leaf, clients(hub.client_url, leaf.client_url) as (nh, nl):
            await _until(lambda: leaf_ready(leaf) and leaf_interest(leaf, "old.1"), what="mapping source")
            got = Inbox()
            await nh.subscribe("new.*", cb=got.cb)
            await nh.flush()
            await nl.publish("old.7", b"m")
            await _until(lambda: got.msgs)
            assert got.subjects() == ["new.7"]


async def test_unsubscribe_withdraws_interest():
    async with hub_and_leaf() as (hub, leaf), clients(hub.client_url, leaf.client_url) as (nh, nl):
        a = Inbox()
        sub = await nl.subscribe("gone", cb=a.cb)
        await nl.flush()
        await _until(lambda: leaf_interest(hub, "gone") == 1)
        await sub.unsubscribe()
        await nl.flush()
        await _until(lambda: leaf_interest(hub, "gone") == 0, what="LS- on the hub")


async def test_queue_groups_across_the_leaf_connection():
    async with hub_and_leaf() as (hub, leaf), \
            clients(hub.client_url, hub.client_url, leaf.client_url, leaf.client_url) as (h1, h2, l1, l2):
        got: dict[str, list] = {"h1": [], "h2": [], "l1": []}
        for name, nc in (("h1", h1), ("h2", h2)):
            async def cb(m, name=name):
                got[name].append(m.data)
            await nc.subscribe("work", queue="q", cb=cb)
            await nc.flush()
        await _until(lambda: leaf_interest(leaf, "work") == 1, what="LS+ work q on the leaf")
        lsub = next(s for g in leaf.accounts["$G"].sublist.match("work").qsubs for s in g)
        await _until(lambda: lsub.weight == 2, what="queue weight 2")
        # publisher on the leaf, members on the hub only: each message to exactly one member
        for i in range(40):
            await l2.publish("work", b"%d" % i)
        await l2.flush()
        await _until(lambda: len(got["h1"]) + len(got["h2"]) == 40, what="40 deliveries")

        async def cb1(m):
            got["l1"].append(m.data)
        await l1.subscribe("work", queue="q", cb=cb1)
        await l1.flush()
        await _until(lambda: leaf_interest(hub, "work") == 1, what="leaf member on the hub")
        for k in got:
            got[k].clear()
        # members on both sides: still exactly once each, from either side
        for i in range(60):
            await (h1 if i % 2 else l2).publish("work", b"%d" % i)
        await h1.flush()
        await l2.flush()
        await _until(lambda: sum(len(v) for v in got.values()) == 60, what="60 deliveries")
        await asyncio.sleep(0.15)
        assert sorted(int(x) for v in got.values() for x in v) == list(range(60))


async def test_queue_weight_passes_from_leaf_to_leaf():
    """Two leafs of one hub: the members one leaf has in a queue group reach the other as the LS+ weight,
    updated as members come and go."""
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}'
        async with rillet(conf, "l1") as l1, rillet(conf, "l2") as l2, clients(l1.client_url) as (n1,):
            await _until(lambda: leaf_ready(hub, 2) and leaf_ready(l1) and leaf_ready(l2))

            def weight() -> int:
                g = [s for grp in l2.accounts["$G"].sublist.match("jobs").qsubs for s in grp]
                return g[0].weight if g else 0
            subs = [await n1.subscribe("jobs", queue="w") for _ in range(3)]
            await n1.flush()
            await _until(lambda: weight() == 3, what="weight 3 on the other leaf")
            subs.append(await n1.subscribe("jobs", queue="w"))
            await n1.flush()
            await _until(lambda: weight() == 4, what="weight 4")
            for sub in subs[:3]:
                await sub.unsubscribe()
            await n1.flush()
            await _until(lambda: weight() == 1, what="weight 1")
            await subs[3].unsubscribe()
            await n1.flush()
            await _until(lambda: weight() == 0 and not leaf_interest(l2, "jobs"), what="LS- jobs w")


async def test_request_reply_both_ways_and_no_responders():
    async with hub_and_leaf() as (hub, leaf), clients(hub.client_url, leaf.client_url) as (nh, nl):
        async def echo_hub(m):
            await m.respond(b"hub:" + m.data)

        async def echo_leaf(m):
            await m.respond(b"leaf:" + m.data)
        await nh.subscribe("svc.hub", cb=echo_hub)
        await nl.subscribe("svc.leaf", cb=echo_leaf)
        await nh.flush()
        await nl.flush()
        await _until(lambda: leaf_interest(leaf, "svc.hub") and leaf_interest(hub, "svc.leaf"))
        assert (await nl.request("svc.hub", b"1", timeout=2)).data == b"hub:1"
        assert (await nh.request("svc.leaf", b"2", timeout=2)).data == b"leaf:2"
        with pytest.raises(NoRespondersError):
            await nl.request("svc.nobody", b"3", timeout=2)


async def test_account_binding_users_and_authorization_account():
    accounts = 'accounts { A { users [{user: a, password: a}] }, B { users [{user: b, password: b}] } }'
    hub_conf = 'authorization { users [ {user: la, password: pa, account: A}, {user: lb, password: pb} ] }'
    async with rillet(f'{accounts}\nleafnodes {{ listen: "127.0.0.1:-1"\n{hub_conf} }}', "hub") as hub:
        p = hub_port(hub)
        remotes = (f'remotes [ {{ url: "nats://la:pa@127.0.0.1:{p}" }}, '
                   f'{{ url: "nats://lb:pb@127.0.0.1:{p}", account: L2 }} ]')
        async with rillet(f'accounts {{ L2 {{}} }}\nleafnodes {{ {remotes} }}', "leaf") as leaf:
            await _until(lambda: leaf_ready(hub, 2), what="two leaf connections")
            by_acc = sorted(lc.acc_name for lc in hub.leafs.values())
            assert by_acc == ["$G", "A"]  # a user without account: the global account
            hub_a = f"nats://a:a@127.0.0.1:{hub.addr[1]}"
            hub_b = f"nats://b:b@127.0.0.1:{hub.addr[1]}"
            async with clients(hub_a, hub_b, leaf.client_url) as (na, nb, nl):
                ga, gb = Inbox(), Inbox()
                await na.subscribe("acc.>", cb=ga.cb)
                await nb.subscribe("acc.>", cb=gb.cb)
                await na.flush()
                await nb.flush()
                await _until(lambda: leaf_interest(leaf, "acc.x"), what="A's interest on the leaf")
                await nl.publish("acc.x", b"to A")
                await _until(lambda: ga.msgs)
                await asyncio.sleep(0.1)
                assert [m.data for m in ga.msgs] == [b"to A"] and gb.msgs == []
    # a single leafnodes user, bound to the authorization's account
    single = 'authorization { user: one, password: pw, account: B, timeout: 0.5 }'
    async with rillet(f'{accounts}\nleafnodes {{ listen: "127.0.0.1:-1"\n{single} }}', "hub") as hub:
        async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://one:pw@127.0.0.1:{hub_port(hub)}" }} ] }}',
                          "leaf"):
            await _until(lambda: leaf_ready(hub), what="single user")
            assert [lc.acc_name for lc in hub.leafs.values()] == ["B"]
        # a connection that never sends CONNECT is closed at the authorization timeout
        r, w = await asyncio.open_connection("127.0.0.1", hub_port(hub))
        await r.readline()
        t0 = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(r.readline(), 3) == b"-ERR 'Authentication Timeout'\r\n"
        assert 0.3 < asyncio.get_running_loop().time() - t0 < 2
        w.close()
    # a wrong password is refused, and the hub says so
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1"\n{hub_conf} }}\n{accounts}', "hub") as hub:
        async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://la:bad@127.0.0.1:{hub_port(hub)}" }} ] }}',
                          "leaf") as leaf:
            await _until(lambda: "authentication error" in hub._test_log.getvalue(), what="auth error")
            await _until(lambda: "Authorization Violation" in leaf._test_log.getvalue())
            assert not hub.leafs


async def test_client_users_authorize_leafs_without_a_leafnodes_authorization():
    """No leafnodes authorization: the server's users authorize leafs and bind them to their account (a
    user with permissions: tests/test_cluster_leaf_auth.py)."""
    accounts = 'accounts { A { users [ {user: a, password: a} ] } }'
    async with rillet(f'{accounts}\nleafnodes {{ listen: "127.0.0.1:-1" }}', "hub") as hub:
        p = hub_port(hub)
        async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://a:a@127.0.0.1:{p}" }} ] }}', "l1"):
            await _until(lambda: leaf_ready(hub), what="user a")
            assert [lc.acc_name for lc in hub.leafs.values()] == ["A"]
        async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://a:wrong@127.0.0.1:{p}" }} ] }}', "l2") as l2:
            await _until(lambda: "Authorization Violation" in l2._test_log.getvalue())
            assert not leaf_ready(l2)


async def test_deny_imports_and_exports():
    remote = 'deny_exports: ["secret.>"], deny_imports: ["private.>"]'
    async with hub_and_leaf(remote=remote) as (hub, leaf), clients(hub.client_url, leaf.client_url) as (nh, nl):
        on_hub, on_leaf = Inbox(), Inbox()
        await nh.subscribe(">", cb=on_hub.cb)
        await nl.subscribe("private.*", cb=on_leaf.cb)
        await nl.subscribe("public.*", cb=on_leaf.cb)
        await nh.flush()
        await nl.flush()
        await _until(lambda: leaf_interest(hub, "public.a"), what="public interest")
        assert leaf_interest(hub, "private.a") == 0  # not announced: the leaf will not import it
        await nl.publish("secret.a", b"no")
        await nl.publish("open.a", b"yes")
        await nh.publish("private.a", b"no")
        await nh.publish("public.a", b"yes")
        await _until(lambda: on_hub.msgs and on_leaf.msgs)
        await asyncio.sleep(0.15)
        assert "secret.a" not in on_hub.subjects() and "open.a" in on_hub.subjects()
        assert on_leaf.subjects() == ["public.a"]


async def test_loop_is_detected():
    """Two servers, each a hub and a leaf of the other in the same account: nats-server's loop error."""
    pa, pb = free_port(), free_port()
    a_conf = f'leafnodes {{ listen: "127.0.0.1:{pa}", remotes [ {{ url: "nats://127.0.0.1:{pb}" }} ] }}'
    b_conf = f'leafnodes {{ listen: "127.0.0.1:{pb}", remotes [ {{ url: "nats://127.0.0.1:{pa}" }} ] }}'
    async with rillet(a_conf, "A") as a, rillet(b_conf, "B") as b:
        text = lambda: a._test_log.getvalue() + b._test_log.getvalue()  # noqa: E731
        await _until(lambda: 'Loop detected for leafnode account="$G". Delaying attempt to reconnect for 30s'
                     in text(), what="loop detected")


async def test_leaf_reconnects_after_hub_restart():
    lport = free_port()
    hub_conf = f'leafnodes {{ listen: "127.0.0.1:{lport}" }}'
    leaf_conf = (f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{lport}" }} ], reconnect: "200ms", '
                 'dial_timeout: "500ms" }')
    async with rillet(leaf_conf, "leaf") as leaf:
        async with rillet(hub_conf, "hub") as hub:
            await _until(lambda: leaf_ready(leaf), what="first connection")
        await _until(lambda: not leaf.leafs, what="connection gone")
        async with rillet(hub_conf, "hub") as hub, clients(hub.client_url, leaf.client_url) as (nh, nl):
            await _until(lambda: leaf_ready(leaf) and leaf_ready(hub), timeout=5, what="reconnected")
            a = Inbox()
            await nl.subscribe("again", cb=a.cb)
            await nl.flush()
            await _until(lambda: leaf_interest(hub, "again"))
            await nh.publish("again", b"x")
            await _until(lambda: a.msgs)
        assert "Error trying to connect as leafnode to remote server" in leaf._test_log.getvalue()


async def test_reload_refuses_leafnodes_changes():
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        same = load_string('listen: "127.0.0.1:-1"\nserver_name: hub\nleafnodes { listen: "127.0.0.1:-1" }')
        hub.reload(same)  # unchanged: fine
        changed = load_string('listen: "127.0.0.1:-1"\nserver_name: hub\n'
                              'leafnodes { listen: "127.0.0.1:-1", reconnect: "5s" }')
        with pytest.raises(ValueError, match="config reload not supported for LeafNode"):
            hub.reload(changed)
    async with rillet("", "plain") as srv:
        with pytest.raises(ValueError, match="config reload not supported for LeafNode"):
            srv.reload(load_string('listen: "127.0.0.1:-1"\nleafnodes { listen: "127.0.0.1:-1" }'))


async def test_remote_urls_order_and_discovered_urls():
    """A remote with a dead URL first (no_randomize: tried in order) gets to the live one; the hub's
    leafnode_urls are added to the remote's URLs unless ignore_discovered_servers."""
    async with rillet('leafnodes { listen: "127.0.0.1:-1", advertise: "127.0.0.1:1" }', "hub") as hub:
        dead = free_port()
        for ignore in (False, True):
            conf = (f'leafnodes {{ reconnect: "100ms", remotes [ {{ urls: ["nats://u:p@127.0.0.1:{dead}", '
                    f'"nats://u:p@localhost:{hub_port(hub)}"], no_randomize: true, '
                    f'ignore_discovered_servers: {str(ignore).lower()}, first_info_timeout: "1s", '
                    f'dial_timeout: "500ms" }}, {{ url: "nats://127.0.0.1:{dead}", disabled: true }} ] }}')
            async with rillet(conf, "leaf") as leaf:
                await _until(lambda: leaf_ready(leaf), what="the second URL")
                (r,) = leaf.leafnodes.remotes  # (the disabled remote is not dialled)
                want = [f"nats://u:p@127.0.0.1:{dead}", f"nats://u:p@localhost:{hub_port(hub)}"]
                assert r.urls == (want if ignore else ["nats://u:p@127.0.0.1:1"] + want)
            await _until(lambda: not hub.leafs)
    conf = 'leafnodes { remotes [ { urls: ["nats://a:1", "nats://b:2", "nats://c:3", "nats://d:4"] } ] }'
    orders = set()
    for _ in range(12):
        from rillet.cluster.leaf_conn import RemoteState
        orders.add(tuple(RemoteState(load_string(conf).leaf.remotes[0], 1.0).urls))
    assert len(orders) > 1  # randomized by default, as nats-server


async def test_leafz_and_varz():
    async with hub_and_leaf(remote='deny_imports: ["x.>"]') as (hub, leaf), \
            clients(leaf.client_url) as (nl,):
        await nl.subscribe("seen.here")
        await nl.flush()
        await _until(lambda: leaf_interest(hub, "seen.here"))
        from rillet.monitor import endpoints, varz
        lz = endpoints.leafz(hub, {"subs": "1"})
        assert lz["leafnodes"] == 1
        (entry,) = lz["leafs"]
        assert list(entry) == ["id", "name", "is_spoke", "account", "ip", "port", "rtt", "in_msgs", "out_msgs",
                               "in_bytes", "out_bytes", "subscriptions", "subscriptions_list", "compression"]
        assert entry["name"] == "leaf" and entry["is_spoke"] is False and entry["account"] == "$G"
        assert "seen.here" in entry["subscriptions_list"]
        assert any(s.startswith("$LDS.") for s in entry["subscriptions_list"])
        assert endpoints.leafz(hub, {"acc": "OTHER"})["leafs"] == []
        assert len(endpoints.leafz(hub, {"acc": "$G"})["leafs"]) == 1
        spoke = endpoints.leafz(leaf, {})["leafs"][0]
        assert spoke["is_spoke"] is True and spoke["name"] == "hub" and "subscriptions_list" not in spoke
        vh = varz.varz_leaf(hub)
        assert vh["port"] == hub_port(hub) and vh["host"] == "127.0.0.1"
        vl = varz.varz_leaf(leaf)
        assert vl["remotes"] == [{"local_account": "$G", "urls": [f"127.0.0.1:{hub_port(hub)}"],
                                  "deny": {"imports": ["x.>"]}}]


async def test_leaf_of_a_cluster_reaches_every_server():
    """A leaf connected to one server of a 2-server Rillet cluster: its messages are routed on by the hub,
    and messages from the other server cross the route and then the leaf connection (each once)."""
    from rillet.config.leaf_section import LeafNodeOptions
    from rillet.app.embed import run_cluster
    async with run_cluster(2, leaf=LeafNodeOptions(host="127.0.0.1", port=-1)) as (a, b):
        conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(a)}" }} ] }}'
        async with rillet(conf, "leaf") as leaf, clients(b.client_url, leaf.client_url, a.client_url) as (nb, nl, na):
            await _until(lambda: leaf_ready(a) and leaf_ready(leaf))
            on_b, on_leaf, on_a = Inbox(), Inbox(), Inbox()
            await nb.subscribe("x.>", cb=on_b.cb)
            await nl.subscribe("y.>", cb=on_leaf.cb)
            await na.subscribe("y.>", cb=on_a.cb)
            for nc in (nb, nl, na):
                await nc.flush()
            from rillet.cluster.routed import RemoteSub
            await _until(lambda: leaf_interest(leaf, "x.1") and leaf_interest(a, "y.1")
                         and any(type(s) is RemoteSub for s in b.accounts["$G"].sublist.match("y.1").psubs),
                         what="interest across route and leaf")
            await nl.publish("x.1", b"leaf to b")
            await nb.publish("y.1", b"b to leaf")
            await _until(lambda: on_b.msgs and on_leaf.msgs and on_a.msgs)
            await asyncio.sleep(0.15)
            assert [m.data for m in on_b.msgs] == [b"leaf to b"]
            assert [m.data for m in on_leaf.msgs] == [b"b to leaf"]
            assert [m.data for m in on_a.msgs] == [b"b to leaf"]


async def test_hub_cluster_gossips_its_leafnode_urls():
    """The servers of a hub cluster tell each other their leafnode URL (route INFO ``leafnode_urls``) and
    send the leafs they are hub for an async INFO with the cluster's list when a server comes or goes, as
    nats-server; the leaf takes it as its URLs to reconnect to (unless ``ignore_discovered_servers``)."""
    from rillet.config.leaf_section import LeafNodeOptions
    from rillet.app.embed import run_cluster

    def hostports(r) -> set[str]:
        from urllib.parse import urlsplit
        return {urlsplit(u).netloc for u in r.urls}
    async with run_cluster(3, leaf=LeafNodeOptions(host="127.0.0.1", port=-1)) as (a, b, c):
        own = {s: f"127.0.0.1:{hub_port(s)}" for s in (a, b, c)}
        assert sorted(a.leafnodes.leafnode_urls()) == sorted(own.values())
        conf = (f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(a)}" }}, '
                f'{{ url: "nats://127.0.0.1:{hub_port(a)}", account: A, ignore_discovered_servers: true }} ] }}\n'
                'accounts { A {} }')
        async with rillet(conf, "leaf") as leaf:
            await _until(lambda: leaf_ready(leaf, 2))
            r, ri = leaf.leafnodes.remotes
            await _until(lambda: hostports(r) == set(own.values()), what="the cluster's URLs")
            assert hostports(ri) == {own[a]}
            await b.shutdown()  # (b leaves the cluster: a's leafs hear of it)
            await _until(lambda: hostports(r) == {own[a], own[c]}, what="an async INFO without b")
            assert "Leafnode connection closed" not in leaf._test_log.getvalue()


async def test_leaf_cluster_attached_to_two_hub_servers_gets_each_message_once():
    """Leaf cluster L (L1, L2) with L1 a leaf of hub A and L2 a leaf of hub B (hub cluster H): interest of
    L's leafs crosses H's route as LS+ with origin L and messages from them as LMSG, so H never hands a
    message from L back to L (which would deliver it twice there)."""
    from rillet.config.leaf_section import LeafNodeOptions, RemoteLeafOptions
    from rillet.config.options import ClusterOptions
    from rillet.app.embed import run_cluster
    from rillet.app.compose import build_server
    async with run_cluster(2, name="H", leaf=LeafNodeOptions(host="127.0.0.1", port=-1)) as (a, b):
        p1, p2 = free_port(), free_port()
        leafs = []
        for i, (mine, other, hub) in enumerate(((p1, p2, a), (p2, None, b))):
            o = Options(host="127.0.0.1", port=-1, server_name=f"L{i + 1}")
            o.cluster = ClusterOptions(name="L", host="127.0.0.1", port=mine,
                                       routes=[f"nats://127.0.0.1:{other}"] if other else [])
            o.leaf = LeafNodeOptions(remotes=[RemoteLeafOptions(urls=[f"nats://127.0.0.1:{hub_port(hub)}"])])
            srv = build_server(o, Logger(debug=True, out=io.StringIO()))
            await srv.start()
            leafs.append(srv)
        l1, l2 = leafs
        try:
            await _until(lambda: leaf_ready(a) and leaf_ready(b) and leaf_ready(l1) and leaf_ready(l2)
                         and l1.cluster.servers_connected() == 1, what="both clusters and both leafs")
            async with clients(l1.client_url, l2.client_url, a.client_url, b.client_url) as (n1, n2, na, nb):
                boxes = {k: Inbox() for k in ("l1", "l2", "a", "b")}
                for k, nc in (("l1", n1), ("l2", n2), ("a", na), ("b", nb)):
                    await nc.subscribe("dup.>", cb=boxes[k].cb)
                    await nc.flush()
                await _until(lambda: leaf_interest(a, "dup.x") and leaf_interest(b, "dup.x")
                             and leaf_interest(l1, "dup.x") and leaf_interest(l2, "dup.x"), what="interest")
                await asyncio.sleep(0.2)
                for k, nc in (("l1", n1), ("l2", n2), ("a", na), ("b", nb)):
                    await nc.publish(f"dup.{k}", k.encode())
                    await nc.flush()
                await _until(lambda: all(len(x.msgs) >= 4 for x in boxes.values()), what="4 messages each")
                await asyncio.sleep(0.3)
                for k, box in boxes.items():
                    assert sorted(box.subjects()) == ["dup.a", "dup.b", "dup.l1", "dup.l2"], (k, box.subjects())
        finally:
            for srv in leafs:
                await srv.shutdown()


@pytest.mark.parametrize("with_routes", [False, True])
async def test_stream_import_delivers_once_on_a_leafnode_server(with_routes):
    accounts = ('accounts { E { users [{user: e, password: e}], exports [ { stream: "ev.>" } ] }, '
                'I { users [{user: i, password: i}], imports [ { stream: { account: E, subject: "ev.>" } } ] } }')
    cluster = 'cluster { name: C, listen: "127.0.0.1:-1" }' if with_routes else ""
    async with rillet(f'{accounts}\n{cluster}\nleafnodes {{ listen: "127.0.0.1:-1" }}', "hub") as hub:
        port = hub.addr[1]
        async with clients(f"nats://e:e@127.0.0.1:{port}", f"nats://i:i@127.0.0.1:{port}") as (ne, ni):
            got = Inbox()
            await ni.subscribe("ev.*", cb=got.cb)
            await ni.flush()
            for i in range(3):
                await ne.publish("ev.x", b"%d" % i)
            await ne.flush()
            await _until(lambda: len(got.msgs) >= 3)
            await asyncio.sleep(0.15)
            assert [m.data for m in got.msgs] == [b"0", b"1", b"2"]


async def test_hub_info_on_the_leafnode_port():
    """The INFO a leaf gets: leaf-port fields (client_id, nonce, leafnode_urls with the advertised address),
    info_on_connect; a client that dials the leafnode port is refused in nats-server's words."""
    conf = ('leafnodes { net: 127.0.0.1, port: -1, advertise: "leafs.example.com:7000", no_advertise: true, '
            'write_deadline: "3s" }')
    async with rillet(conf, "hub") as hub:
        r, w = await asyncio.open_connection("127.0.0.1", hub_port(hub))
        line = await asyncio.wait_for(r.readline(), 2)
        assert line.startswith(b"INFO ") and line.endswith(b" \r\n")
        info = json.loads(line[5:])
        assert info["leafnode_urls"] == ["leafs.example.com:7000"]
        assert (info["host"], info["port"]) == ("leafs.example.com", 7000)
        assert info["client_id"] > 0 and info["nonce"] and info["info_on_connect"] is True
        w.write(b'CONNECT {"lang":"python","verbose":false}\r\n')
        await w.drain()
        assert await asyncio.wait_for(r.readline(), 2) == b"-ERR 'attempted to connect to leaf node port'\r\n"
        w.close()
        from rillet.monitor import varz
        v = varz.varz_leaf(hub)
        assert v["host"] == "127.0.0.1" and v["write_deadline"] == 3_000_000_000


async def test_leaf_that_stops_reading_is_closed_at_the_write_deadline():
    async with rillet('leafnodes { listen: "127.0.0.1:-1", write_deadline: "300ms" }', "hub") as hub, \
            clients(hub.client_url) as (nh,):
        r, w = await asyncio.open_connection("127.0.0.1", hub_port(hub), limit=1 << 16)
        await r.readline()
        w.write(b'CONNECT {"server_id":"NSLOW","name":"slow","headers":true}\r\nLS+ big.>\r\n')
        await w.drain()
        await _until(lambda: leaf_interest(hub, "big.x"), what="LS+ big.>")
        payload = b"x" * 65536
        for i in range(400):  # 26 MB the peer never reads
            await nh.publish("big.x", payload)
            if i % 50 == 0:
                await nh.flush()
            if not hub.leafs:
                break
        await _until(lambda: "Slow Consumer (Write Deadline)" in hub._test_log.getvalue(), timeout=5)
        assert not hub.leafs
        w.close()


async def test_duplicate_leaf_connection_replaces_the_old_one():
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        conns = []
        connect = b'CONNECT {"server_id":"NDUP","name":"dup","remote_account":"$G","headers":true}\r\nPING\r\n'
        for _ in range(2):
            r, w = await asyncio.open_connection("127.0.0.1", hub_port(hub))
            await r.readline()  # INFO
            w.write(connect)
            await w.drain()
            assert b'"connect_info":true' in await asyncio.wait_for(r.readline(), 2)
            conns.append((r, w))
        r1 = conns[0][0]
        rest = b""
        while b"-ERR" not in rest:
            data = await asyncio.wait_for(r1.read(4096), 2)
            assert data, rest
            rest += data
        assert b"-ERR 'Duplicate Remote LeafNode Connection'" in rest
        await _until(lambda: len(hub.leafs) == 1)
        assert "Replacing connection from same server" in hub._test_log.getvalue()
        for _, w in conns:
            w.close()


async def test_jetstream_domains_across_the_leaf(tmp_path):
    hub_js = f'jetstream {{ store_dir: "{tmp_path}/hub", domain: hub }}'
    leaf_js = f'jetstream {{ store_dir: "{tmp_path}/leaf", domain: leaf }}'
    async with rillet(f'{hub_js}\nleafnodes {{ listen: "127.0.0.1:-1" }}', "hub") as hub:
        async with rillet(f'{leaf_js}\nleafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}',
                          "leaf") as leaf, clients(hub.client_url, leaf.client_url) as (nh, nl):
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf))
            await nh.jetstream().add_stream(name="ORDERS", subjects=["orders.>"])
            await _until(lambda: leaf_interest(leaf, "$JS.hub.API.STREAM.INFO.ORDERS"), what="hub API interest")
            # $JS.API never crosses a leaf connection; the domain prefix does
            assert leaf_interest(leaf, "$JS.API.STREAM.INFO.ORDERS") == 0
            assert leaf_interest(hub, "$JS.API.STREAM.INFO.ORDERS") == 0
            js_hub = nl.jetstream(domain="hub")
            info = await js_hub.stream_info("ORDERS")
            assert info.config.name == "ORDERS"
            await _until(lambda: leaf_interest(leaf, "orders.1"), what="stream interest")
            ack = await js_hub.publish("orders.1", b"o1")
            assert ack.stream == "ORDERS" and ack.seq == 1 and ack.domain == "hub"
            # a pull consumer of the hub's stream, fetched and acked from the leaf
            psub = await js_hub.pull_subscribe("orders.>", durable="C")
            (m,) = await psub.fetch(1, timeout=3)
            assert m.data == b"o1" and m.metadata.stream == "ORDERS"
            await m.ack_sync(timeout=3)
            ci = await js_hub.consumer_info("ORDERS", "C")
            assert ci.ack_floor.stream_seq == 1 and ci.num_ack_pending == 0
            # the leaf's own JetStream answers its own API and domain, not the hub's streams
            await nl.jetstream().add_stream(name="LOCAL", subjects=["local.>"])
            assert (await nl.jetstream(domain="leaf").stream_info("LOCAL")).config.name == "LOCAL"
            with pytest.raises(Exception):
                await nl.jetstream().stream_info("ORDERS")
            assert (await nh.jetstream().stream_info("ORDERS")).state.messages == 1



async def test_push_consumer_on_the_hub_delivers_at_once_to_a_leaf_subscriber(tmp_path):
    """A push consumer of the hub whose deliver subject a client of the leaf subscribes to after creating it
    hears of that interest (LS+) at once, not on its 1 s interest poll."""
    hub_js = f'jetstream {{ store_dir: "{tmp_path}/hub", domain: hub }}'
    async with rillet(f'{hub_js}\nleafnodes {{ listen: "127.0.0.1:-1" }}', "hub") as hub:
        async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}',
                          "leaf") as leaf, clients(hub.client_url, leaf.client_url) as (nh, nl):
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf))
            js = nh.jetstream()
            await js.add_stream(name="P", subjects=["p.>"])
            await js.publish("p.1", b"x")
            await js.add_consumer("P", durable_name="C", deliver_subject="to.leaf")
            await asyncio.sleep(0.1)  # (the consumer found no interest and waits for it)
            loop = asyncio.get_running_loop()
            got = loop.create_future()
            t0 = loop.time()

            async def cb(m) -> None:
                if not got.done():
                    got.set_result(loop.time())
            await nl.subscribe("to.leaf", cb=cb)
            took = await asyncio.wait_for(got, 5) - t0
            assert took < 0.5, took

# ==== interoperability with nats-server ==========================================================================

def _go(conf: str, tmp: str) -> tuple[ServerProcess, int, int]:
    port, http = free_port(), free_port()
    path = f"{tmp}/go.conf"
    with open(path, "w") as f:
        f.write(f'listen: "127.0.0.1:{port}"\nhttp: "127.0.0.1:{http}"\nserver_name: go\n{conf}\n')
    return ServerProcess("-c", path, command=[GO_SERVER]), port, http


async def _fetch(port: int, path: str) -> dict:
    def get() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=5) as r:
            return json.loads(r.read())
    return await asyncio.get_running_loop().run_in_executor(None, get)


async def _both_ways(hub_url: str, leaf_url: str) -> None:
    async with clients(hub_url, leaf_url) as (nh, nl):
        on_hub, on_leaf = Inbox(), Inbox()
        await nh.subscribe("to.hub.*", cb=on_hub.cb)
        await nl.subscribe("to.leaf.*", cb=on_leaf.cb)
        await nh.flush()
        await nl.flush()
        # interest takes a moment to cross: publish until it arrives, then check there are no duplicates
        for i in range(100):
            await nl.publish(f"to.hub.{i}", b"up")
            await nh.publish(f"to.leaf.{i}", b"down")
            await nh.flush()
            await nl.flush()
            await asyncio.sleep(0.05)
            if on_hub.msgs and on_leaf.msgs:
                break
        first_h, first_l = len(on_hub.msgs), len(on_leaf.msgs)
        assert first_h and first_l
        for i in range(20):
            await nl.publish("to.hub.x", b"%d" % i, headers={"H": str(i)})
            await nh.publish("to.leaf.x", b"%d" % i)
        await _until(lambda: len(on_hub.msgs) == first_h + 20 and len(on_leaf.msgs) == first_l + 20)
        await asyncio.sleep(0.1)
        assert [m.data for m in on_hub.msgs[first_h:]] == [b"%d" % i for i in range(20)]
        assert on_hub.msgs[-1].headers == {"H": "19"}
        assert [m.data for m in on_leaf.msgs[first_l:]] == [b"%d" % i for i in range(20)]
        # request/reply across
        async def svc(m):
            await m.respond(b"ok " + m.data)
        await nh.subscribe("svc", cb=svc)
        await nh.flush()
        for _ in range(50):
            try:
                assert (await nl.request("svc", b"q", timeout=0.5)).data == b"ok q"
                break
            except (NoRespondersError, asyncio.TimeoutError, nats.errors.TimeoutError):
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("no reply across the leaf connection")


@needs_go
async def test_rillet_leaf_of_a_go_hub():
    with tempfile.TemporaryDirectory() as tmp:
        lport = free_port()
        go, port, http = _go(f'leafnodes {{ listen: "127.0.0.1:{lport}" }}', tmp)
        with go:
            go.wait_ready()
            async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{lport}" }} ] }}', "rleaf") as leaf:
                await _until(lambda: leaf_ready(leaf), what="connected to the Go hub")
                await _both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)
                lz = await _fetch(http, "leafz?subs=1")
                (entry,) = lz["leafs"]
                assert entry["name"] == "rleaf" and entry["account"] == "$G" and entry["is_spoke"] is False
                assert any(s.startswith("$LDS.") for s in entry["subscriptions_list"])
                # our /leafz entry has Go's fields, in Go's order
                from rillet.monitor import endpoints
                ours = endpoints.leafz(leaf, {"subs": "1"})
                assert list(ours["leafs"][0]) == list(entry)


@needs_go
async def test_go_leaf_of_a_rillet_hub():
    with tempfile.TemporaryDirectory() as tmp:
        async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "rhub") as hub:
            go, port, http = _go(f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}', tmp)
            with go:
                go.wait_ready()
                await _until(lambda: leaf_ready(hub), what="the Go leaf connected")
                await _both_ways(hub.client_url, f"nats://127.0.0.1:{port}")
                lz = await _fetch(http, "leafz?subs=1")
                (entry,) = lz["leafs"]
                assert entry["name"] == "rhub" and entry["is_spoke"] is True


WS_HUB = 'websocket { listen: "127.0.0.1:-1", no_tls: true }\nleafnodes { listen: "127.0.0.1:-1" }'


async def test_leaf_over_websocket():
    """A ws:// remote: the upgrade on the hub's websocket port (/leafnode), then the leaf protocol in
    masked binary frames."""
    async with rillet(WS_HUB, "hub") as hub:
        url = f"ws://127.0.0.1:{hub.websocket_addr[1]}"
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}" }} ] }}', "leaf") as leaf:
            await _until(lambda: leaf_ready(leaf) and leaf_ready(hub), what="leaf over websocket")
            await _both_ways(hub.client_url, leaf.client_url)
    # without a leafnodes port, the websocket port refuses leafs as nats-server does
    async with rillet('websocket { listen: "127.0.0.1:-1", no_tls: true }', "hub") as hub:
        url = f"ws://127.0.0.1:{hub.websocket_addr[1]}"
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}" }} ] }}', "leaf") as leaf:
            await _until(lambda: "Not configured to accept leaf node connections" in hub._test_log.getvalue())
            assert not leaf_ready(leaf)


@needs_go
async def test_websocket_leafs_with_go():
    """A Rillet leaf dials a Go hub's websocket port (with ws_no_masking, which Go grants); a Go leaf dials
    a Rillet hub's websocket port."""
    with tempfile.TemporaryDirectory() as tmp:
        wp, lp = free_port(), free_port()
        go, port, _ = _go(f'websocket {{ listen: "127.0.0.1:{wp}", no_tls: true }}\n'
                          f'leafnodes {{ listen: "127.0.0.1:{lp}" }}', tmp)
        with go:
            go.wait_ready()
            conf = f'leafnodes {{ remotes [ {{ url: "ws://127.0.0.1:{wp}", ws_no_masking: true }} ] }}'
            async with rillet(conf, "leaf") as leaf:
                await _until(lambda: leaf_ready(leaf), what="connected to the Go hub over websocket")
                assert next(iter(leaf.leafs.values())).transport.mask is False
                await _both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)
        async with rillet(WS_HUB, "hub") as hub:
            go, port, _ = _go(f'leafnodes {{ remotes [ {{ url: "ws://127.0.0.1:{hub.websocket_addr[1]}" }} ] }}', tmp)
            with go:
                go.wait_ready()
                await _until(lambda: leaf_ready(hub), what="the Go leaf over websocket")
                await _both_ways(hub.client_url, f"nats://127.0.0.1:{port}")


@needs_go
@pytest.mark.parametrize("remote_tls", ["", "tls { timeout: 3 },"])
async def test_varz_leaf_section_matches_go(remote_tls):
    from rillet.monitor import varz
    with tempfile.TemporaryDirectory() as tmp:
        lp = free_port()
        conf = (f'leafnodes {{ listen: "127.0.0.1:{lp}", remotes [ {{ url: "nats://u:p@127.0.0.1:1", {remote_tls} '
                'deny_imports: ["a.>"], deny_exports: "b" } ] }')
        go, _, http = _go(conf, tmp)
        with go:
            go.wait_ready()
            theirs = (await _fetch(http, "varz"))["leaf"]
        async with rillet(conf.replace(str(lp), "-1"), "r") as srv:
            ours = varz.varz_leaf(srv)
            theirs["port"] = hub_port(srv)
            assert json.dumps(ours) == json.dumps(theirs)


@needs_go
async def test_jetstream_domain_of_a_go_hub_from_a_rillet_leaf(tmp_path):
    """A client of a Rillet leaf (domain "leaf") uses the JetStream of its Go hub (domain "hub")."""
    lp = free_port()
    go, port, _ = _go(f'jetstream {{ store_dir: "{tmp_path}/go", domain: hub }}\n'
                      f'leafnodes {{ listen: "127.0.0.1:{lp}" }}', str(tmp_path))
    with go:
        go.wait_ready()
        conf = (f'jetstream {{ store_dir: "{tmp_path}/leaf", domain: leaf }}\n'
                f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{lp}" }} ] }}')
        async with rillet(conf, "leaf") as leaf, clients(leaf.client_url) as (nl,):
            await _until(lambda: leaf_ready(leaf) and leaf_interest(leaf, "$JS.hub.API.INFO"),
                         what="the Go hub's domain API interest")
            # (the Go hub announces $JS.API.> too, from its service imports; it never crosses: the leaf's
            # own JetStream answers $JS.API)
            assert (await nl.jetstream().account_info()).domain == "leaf"
            assert (await nl.jetstream(domain="hub").account_info()).domain == "hub"
            js = nl.jetstream(domain="hub")
            await js.add_stream(name="GO", subjects=["go.>"])
            await _until(lambda: leaf_interest(leaf, "go.1"), what="the Go stream's interest")
            ack = await js.publish("go.1", b"x")
            assert (ack.stream, ack.seq, ack.domain) == ("GO", 1, "hub")
            assert (await js.stream_info("GO")).state.messages == 1
            await nl.jetstream().add_stream(name="MINE", subjects=["mine.>"])  # the leaf's own JetStream
            assert (await nl.jetstream(domain="leaf").stream_info("MINE")).config.name == "MINE"


@needs_go
async def test_jetstream_domain_of_a_rillet_hub_from_a_go_leaf(tmp_path):
    conf = f'jetstream {{ store_dir: "{tmp_path}/hub", domain: hub }}\nleafnodes {{ listen: "127.0.0.1:-1" }}'
    async with rillet(conf, "hub") as hub:
        go, port, _ = _go(f'jetstream {{ store_dir: "{tmp_path}/go", domain: leaf }}\n'
                          f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}', str(tmp_path))
        with go:
            go.wait_ready()
            await _until(lambda: leaf_ready(hub), what="the Go leaf")
            async with clients(f"nats://127.0.0.1:{port}") as (nl,):
                js = nl.jetstream(domain="hub")
                for _ in range(50):  # until the hub's API interest has reached the Go leaf
                    try:
                        info = await js.account_info()
                        break
                    except Exception:  # noqa: BLE001 - no responders / timeout while interest crosses
                        await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the hub's JetStream is not reachable from the Go leaf")
                assert info.domain == "hub"
                await js.add_stream(name="R", subjects=["r.>"])
                for _ in range(50):  # until the stream's interest has reached the Go leaf
                    try:
                        ack = await js.publish("r.1", b"x", timeout=0.5)
                        break
                    except Exception:  # noqa: BLE001 - no responders while the interest crosses
                        await asyncio.sleep(0.05)
                assert (ack.stream, ack.seq, ack.domain) == ("R", 1, "hub")
                assert (await nl.jetstream().account_info()).domain == "leaf"


@needs_go
async def test_nkey_remote_authenticates_to_a_go_hub():
    """A remote's ``nkey`` seed signs the hub's nonce; the Go hub (leafnodes authorization nkey) accepts it
    and refuses a remote with another key."""
    from rillet import jwt
    good, bad = jwt.new_keypair("U"), jwt.new_keypair("U")
    with tempfile.TemporaryDirectory() as tmp:
        lport = free_port()
        go, port, _ = _go(f'leafnodes {{ listen: "127.0.0.1:{lport}", '
                          f'authorization {{ nkey: {good.public_key.decode()} }} }}', tmp)
        with go:
            go.wait_ready()
            seed = bad.seed.decode()
            async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{lport}", nkey: {seed} }} ] }}',
                              "bad") as leaf:
                await _until(lambda: "Authorization Violation" in leaf._test_log.getvalue(), what="refused")
                assert not leaf_ready(leaf)
            seed = good.seed.decode()
            async with rillet(f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{lport}", nkey: {seed} }} ] }}',
                              "good") as leaf:
                await _until(lambda: leaf_ready(leaf), what="accepted with the nkey")
                await _both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)


async def test_leafnodes_nkey_authorization():
    """A hub with leafnodes authorization { nkey, account }: a Rillet leaf and a Go leaf with the seed
    connect (bound to the account), another key is refused."""
    from rillet import jwt
    good, bad = jwt.new_keypair("U"), jwt.new_keypair("U")
    conf = (f'accounts {{ N {{}} }}\nleafnodes {{ listen: "127.0.0.1:-1", '
            f'authorization {{ nkey: {good.public_key.decode()}, account: N }} }}')
    async with rillet(conf, "hub") as hub:
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}", nkey: {bad.seed.decode()} }} ] }}', "b") as b:
            await _until(lambda: "Authorization Violation" in b._test_log.getvalue(), what="refused")
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}", nkey: {good.seed.decode()} }} ] }}', "g"):
            await _until(lambda: leaf_ready(hub), what="accepted")
            assert [lc.acc_name for lc in hub.leafs.values()] == ["N"]
        await _until(lambda: not hub.leafs)
        if GO_SERVER is not None:
            with tempfile.TemporaryDirectory() as tmp:
                go, _, _ = _go(f'leafnodes {{ remotes [ {{ url: "{url}", nkey: {good.seed.decode()} }} ] }}', tmp)
                with go:
                    go.wait_ready()
                    await _until(lambda: leaf_ready(hub), what="the Go leaf with the nkey")


async def test_min_version_refuses_older_leafs():
    import rillet
    from rillet.config.leaf_section import semver
    ours = semver(rillet.SERVER_VERSION)
    newer = f"{ours[0]}.{ours[1] + 1}.0"
    async with rillet_srv(f'leafnodes {{ listen: "127.0.0.1:-1", min_version: "{newer}" }}', "hub") as hub:
        conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}'
        async with rillet_srv(conf, "old") as leaf:
            await _until(lambda: "Delaying attempt to reconnect for 5s" in leaf._test_log.getvalue())
            assert f'connection rejected since minimum version required is "{newer}"' in hub._test_log.getvalue()
            assert not leaf_ready(hub)
    async with rillet_srv(f'leafnodes {{ listen: "127.0.0.1:-1", min_version: "{rillet.SERVER_VERSION}" }}',
                          "hub") as hub:
        async with rillet_srv(f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}" }} ] }}', "ok"):
            await _until(lambda: leaf_ready(hub), what="a leaf of the minimum version")


async def test_credentials_sign_the_hub_nonce(tmp_path):
    """A remote's ``credentials`` file: the CONNECT carries the user JWT and the nonce signed with its seed
    (checked by a stand-in hub that speaks the first steps of the protocol)."""
    import base64
    from rillet import jwt
    from rillet.nkey import verify_signature
    user = jwt.new_keypair("U")
    token = jwt.encode({"sub": user.public_key.decode(), "nats": {"type": "user"}}, jwt.new_keypair("A"))
    creds = tmp_path / "u.creds"
    creds.write_text(jwt.format_creds(token, user.seed))
    got: asyncio.Future = asyncio.get_running_loop().create_future()

    async def hub(r, w):
        w.write(b'INFO {"server_id":"NX","server_name":"fake","version":"2.15.0","proto":3,"headers":true,'
                b'"max_payload":1048576,"client_id":7,"nonce":"abcNONCE","leafnode_urls":["127.0.0.1:1"]} \r\n')
        await w.drain()
        line = await r.readline()
        if not got.done():
            got.set_result(json.loads(line[len(b"CONNECT "):]))
        w.close()

    srv = await asyncio.start_server(hub, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{port}", credentials: "{creds}" }} ] }}'
        async with rillet(conf, "leaf"):
            co = await asyncio.wait_for(got, 5)
    finally:
        srv.close()
    assert co["jwt"] == token and co["remote_account"] == "$G" and co["compress_mode"] == "not supported"
    sig = base64.urlsafe_b64decode(co["sig"] + "=" * (-len(co["sig"]) % 4))
    assert verify_signature(user.public_key.decode(), b"abcNONCE", sig)


# ==== TLS ========================================================================================================

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost, a client certificate, and another CA."""
    x509 = pytest.importorskip("cryptography.x509")
    import ipaddress

    from cryptography.hazmat.primitives.asymmetric import ec
    from test_tls_options import _cert, _write
    tmp = tmp_path_factory.mktemp("leaf_pki")
    out = {}
    for ca_name in ("ca", "other"):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert(ca_name, ca_key, None, ca_key, ca=True)
        out[ca_name] = _write(tmp, ca_name, ca, ca_key)[0]
        k = ec.generate_private_key(ec.SECP256R1())
        c = _cert("localhost", k, ca.subject, ca_key, [x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        out[f"{ca_name}_server"] = _write(tmp, f"{ca_name}_server", c, k)
        k = ec.generate_private_key(ec.SECP256R1())
        c = _cert("leaf", k, ca.subject, ca_key, [x509.DNSName("leaf")])
        out[f"{ca_name}_client"] = _write(tmp, f"{ca_name}_client", c, k)
    return out


def _hub_tls(pki, verify: bool = False) -> str:
    cert, key = pki["ca_server"]
    return f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki["ca"]}", verify: {str(verify).lower()} }}'


def _remote_tls(pki, ca: str = "ca", client: bool = False) -> str:
    extra = ""
    if client:
        cert, key = pki[f"{ca}_client"]
        extra = f', cert_file: "{cert}", key_file: "{key}"'
    return f'tls {{ ca_file: "{pki[ca]}"{extra} }}'


async def test_tls_leaf_connections(pki):
    """The hub's INFO goes out in the clear with tls_required, then TLS (as nats-server); a leaf that does
    not trust the hub's CA, or has no client certificate when the hub verifies, does not connect."""
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_tls(pki, verify=True)} }}', "hub") as hub:
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        conf = f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_tls(pki, client=True)} }} ] }}'
        async with rillet(conf, "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), what="TLS leaf connection")
            for s in (hub, leaf):
                assert next(iter(s.leafs.values())).transport.get_extra_info("ssl_object") is not None
            await _both_ways(hub.client_url, leaf.client_url)
        conf = f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_tls(pki)} }} ] }}'  # no client certificate
        async with rillet(conf, "leaf") as leaf:
            await _until(lambda: "TLS handshake error" in hub._test_log.getvalue() + leaf._test_log.getvalue())
            assert not leaf_ready(leaf)
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_tls(pki)} }}', "hub") as hub:
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        conf = f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_tls(pki, ca="other")} }} ] }}'
        async with rillet(conf, "leaf") as leaf:
            await _until(lambda: "certificate verify failed" in leaf._test_log.getvalue(), what="untrusted hub")
            assert not leaf_ready(leaf) and not leaf_ready(hub)


@needs_go
async def test_tls_leafs_with_go(pki):
    with tempfile.TemporaryDirectory() as tmp:
        lport = free_port()
        go, port, _ = _go(f'leafnodes {{ listen: "127.0.0.1:{lport}", {_hub_tls(pki, verify=True)} }}', tmp)
        with go:
            go.wait_ready()
            conf = (f'leafnodes {{ remotes [ {{ url: "tls://127.0.0.1:{lport}", '
                    f'{_remote_tls(pki, client=True)} }} ] }}')
            async with rillet(conf, "leaf") as leaf:
                await _until(lambda: leaf_ready(leaf), what="Rillet leaf of a Go TLS hub")
                await _both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)
        async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_tls(pki, verify=True)} }}', "hub") as hub:
            conf = (f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}", '
                    f'{_remote_tls(pki, client=True)} }} ] }}')
            go, port, _ = _go(conf, tmp)
            with go:
                go.wait_ready()
                await _until(lambda: leaf_ready(hub), what="Go leaf of a Rillet TLS hub")
                await _both_ways(hub.client_url, f"nats://127.0.0.1:{port}")


async def test_leaf_over_secure_websocket(pki):
    cert, key = pki["ca_server"]
    hub_conf = (f'websocket {{ listen: "127.0.0.1:-1", tls {{ cert_file: "{cert}", key_file: "{key}" }} }}\n'
                'leafnodes { listen: "127.0.0.1:-1" }')
    async with rillet(hub_conf, "hub") as hub:
        url = f"wss://127.0.0.1:{hub.websocket_addr[1]}"
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_tls(pki)} }} ] }}', "leaf") as leaf:
            await _until(lambda: leaf_ready(leaf) and leaf_ready(hub), what="leaf over wss")
            assert next(iter(leaf.leafs.values())).transport.get_extra_info("ssl_object") is not None
            await _both_ways(hub.client_url, leaf.client_url)
        if GO_SERVER is not None:  # a Go leaf over wss to the Rillet hub
            with tempfile.TemporaryDirectory() as tmp:
                go, port, _ = _go(f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_tls(pki)} }} ] }}', tmp)
                with go:
                    go.wait_ready()
                    await _until(lambda: leaf_ready(hub), what="the Go leaf over wss")
                    await _both_ways(hub.client_url, f"nats://127.0.0.1:{port}")


# ==== pure parts ===================================================================================================

def test_deny_patterns():
    from rillet.cluster.leaf_conn import JS_DENY, _Deny
    d = _Deny(list(JS_DENY) + ["secret.*"])
    assert d.hit(b"$JS.API.STREAM.INFO.X") and d.hit(b"$KV.b.k") and d.hit(b"$OBJ.x") and d.hit(b"secret.a")
    assert not d.hit(b"$JS.hub.API.STREAM.INFO.X") and not d.hit(b"secret.a.b") and not d.hit(b"public")
    assert d.hit(b"$JS.API.>") and not d.hit(b"$JS.>")  # interest wider than a deny is not denied
    assert d.hit(b"secret.a")  # (cached)
    d.add(["public"])
    assert d.hit(b"public") and not _Deny([])


def test_remote_names_and_learnt_urls():
    from rillet.cluster.leaf_conn import RemoteState
    from rillet.config.leaf_section import RemoteLeafOptions
    r = RemoteLeafOptions(urls=["nats://u:secret@h:1"], account="A", nkey="SUXXX")
    assert r.name() == 'urls=["nats://u:xxxxx@h:1"], account="A", nkey="[REDACTED]"'
    assert r.name(redacted=False) == 'urls=["nats://u:secret@h:1"], account="A", nkey="SUXXX"'
    st = RemoteState(RemoteLeafOptions(urls=["nats://u:p@h:1"]), 1.0)
    st.next_url()
    assert st.learn(["h:1", "10.0.0.2:7422", "10.0.0.2:7422"]) == ["nats://u:p@10.0.0.2:7422"]
    # as nats-server: the discovered URLs, then the configured ones; the current one keeps its place
    assert st.urls == ["nats://u:p@10.0.0.2:7422", "nats://u:p@h:1"] and st.index == 1
    assert [st.next_url().hostname for _ in range(3)] == ["10.0.0.2", "h", "10.0.0.2"]
    # a later INFO's list replaces the discovered part (a server gone from the hub's cluster is dropped)
    assert st.learn(["10.0.0.3:7422"]) == ["nats://u:p@10.0.0.3:7422"]
    assert st.urls == ["nats://u:p@10.0.0.3:7422", "nats://u:p@h:1"] and st.index == -1


# ==== configuration ===============================================================================================

@pytest.mark.parametrize("text, error", [
    # (pinned_certs and the listener's verify_and_map work: tests/test_leaf_tls_pins_map.py)
    ('leafnodes { remotes [ { url: "nats://h:1", tls { verify_and_map: true } } ] }',
     '1:49: leafnodes remote tls: verify_and_map is not supported: a remote is the connecting side'),
    ('leafnodes { tls { cert_file: a, key_file: b, verify_cert_and_check_known_urls: true } }',
     'verify_cert_and_check_known_urls not supported in this context'),
    ('leafnodes { remotes [ { urls: ["wss://h:1", "tls://h:2"] } ] }',
     'remote leaf node configuration cannot have a mix of websocket and non-websocket urls'),
    ('leafnodes { remotes [ { urls: ["ws://h:1", "nats://h:2"] } ] }',
     'remote leaf node configuration cannot have a mix of websocket and non-websocket urls'),
    ('leafnodes { remotes [ { url: "ws://h:1", ws_compress: 1 } ] }', "interface conversion: interface {} is "
                                                                    "int64, not bool"),
    ('leafnodes { compression: s2_uncompressed }', 'unsupported compression mode "s2_uncompressed"'),
    ('leafnodes { remotes [ { url: "nats://h:1", compression: { mode: s2_auto, rtt: ["9ms", "1ms"] } } ] }',
     "RTT threshold values [9ms 1ms] should be in ascending order"),
    ('leafnodes { authorization { token: x } }', 'unknown field "token"'),
    ('leafnodes { bogus: 1 }', 'unknown field "bogus"'),
    ('leafnodes { remotes: 1 }', "Expected remotes field to be an array, got int64"),
    ('leafnodes { remotes [ { url: "nats://h:1", nkey: "SUAX" } ] }',
     'Remote leafnode nkey is not a valid seed: "SUAX"'),
    ('leafnodes { authorization { user: a, password: b, users [ {user: c, password: d} ] } }',
     "can not have a single user/pass and a users array"),
    ('leafnodes { authorization { nkey: "UABC" } }', "Not a valid public nkey for leafnode authorization"),
    ('leafnodes { min_version: "2.7.9" }', "the minimum version should be at least 2.8.0"),
    ('leafnodes { min_version: "two" }', "invalid leafnode's minimum version: invalid semver"),
    ('leafnodes { remotes [ { url: "nats://h:1" }, { url: "nats://h:1" } ] }', 'duplicate remote urls=["nats://h:1"], account="$G"'),
])
def test_config_errors(text, error):
    with pytest.raises(ConfigError) as e:
        load_string(text, "l.conf")
    assert error in str(e.value), str(e.value)
    assert str(e.value).startswith("l.conf:1:")


def test_config_defaults_and_account_check():
    o = load_string('leafnodes { port: 7422, remotes [ { urls: ["nats://u:p@h1:1", "nats://h2:2"], '
                    'account: A, deny_imports: "a.>" } ] }\naccounts { A {} }')
    assert o.leaf.port == 7422 and o.leaf.reconnect == 1.0  # nats-server's 1s default
    for alias in ("reconnect_delay", "reconnect_interval"):
        assert load_string(f'leafnodes {{ {alias}: "2s" }}').leaf.reconnect == 2.0
    (r,) = o.leaf.remotes
    assert r.urls == ["nats://u:p@h1:1", "nats://h2:2"] and r.account == "A" and r.deny_imports == ["a.>"]
    from rillet.app.compose import build_server
    with pytest.raises(ValueError, match='cannot find local account "B" specified in leafnode remote'):
        build_server(load_string('leafnodes { remotes [ { url: "nats://h:1", account: B } ] }'))
    async def empty_remote():
        async with rillet('leafnodes { remotes [ { account: "$G" } ] }', "e") as srv:
            await _until(lambda: "Empty remote leafnode definition" in srv._test_log.getvalue())
    asyncio.run(empty_remote())
    # gateways and leaf nodes together: the plain Account with the gateways' part, and the entry points that do
    # both (tests/test_cluster_leaf_gateway.py)
    both = build_server(load_string('leafnodes { port: -1 }\ngateway { name: G, port: -1 }'))
    assert both.leafnodes is not None and both.gateway is not None
    assert type(both.global_account).__name__ == "Account" and both.global_account.gw is not None
    from rillet.cluster import leaf
    assert both.leafnodes.leaf_entry is leaf.deliver_leaf_gateways


# every key of the leafnodes block (and of its remotes and authorization) acts or is refused
_BIND = "test_account_binding_users_and_authorization_account"
LEAF_KEY_TESTS = {
    "leafnodes.remotes": {
        "account": _BIND, "local": "test_config_defaults_and_account_check", "compression": "test_config_errors",
        "credentials": "test_credentials_sign_the_hub_nonce", "creds": "test_credentials_sign_the_hub_nonce",
        "deny_exports": "test_deny_imports_and_exports", "deny_export": "test_deny_imports_and_exports",
        "deny_imports": "test_deny_imports_and_exports", "deny_import": "test_deny_imports_and_exports",
        "dial_timeout": "test_remote_urls_order_and_discovered_urls",
        "disabled": "test_remote_urls_order_and_discovered_urls",
        "no_randomize": "test_remote_urls_order_and_discovered_urls",
        "dont_randomize": "test_remote_urls_order_and_discovered_urls",
        "first_info_timeout": "test_remote_urls_order_and_discovered_urls",
        "ignore_discovered_servers": "test_remote_urls_order_and_discovered_urls",
        "hub": "test_remote_with_hub_true_reverses_the_roles", "nkey": "test_nkey_remote_authenticates_to_a_go_hub",
        "seed": "test_nkey_remote_authenticates_to_a_go_hub", "tls": "test_tls_leaf_connections",
        "url": "test_pub_sub_both_ways_wildcards_and_headers", "urls": "test_remote_urls_order_and_discovered_urls",
        "ws_no_masking": "test_websocket_leafs_with_go", "websocket_no_masking": "test_websocket_leafs_with_go",
        "ws_compress": "test_leaf_ws_compress.py::test_rillet_leaf_of_a_go_hub",
        "ws_compression": "test_leaf_ws_compress.py::test_rillet_leaf_and_hub",
        "websocket_compress": "test_leaf_ws_compress.py::test_rillet_leaf_and_hub",
        "websocket_compression": "test_leaf_ws_compress.py::test_rillet_leaf_and_hub",
        "isolate": "test_leaf_isolation.py::test_isolation_settings_parse_and_type_errors",
        "isolate_leafnode_interest": "test_leaf_isolation.py::test_isolation_settings_parse_and_type_errors",
        "request_isolation": "test_leaf_isolation.py::test_a_leaf_requesting_isolation_gets_it_alone",
        "jetstream_cluster_migrate": "refused", "js_cluster_migrate": "refused", "proxy": "refused",
    },
    "leafnodes.authorization": {
        "account": _BIND, "user": _BIND, "username": _BIND, "pass": _BIND, "password": _BIND, "users": _BIND,
        "timeout": _BIND, "nkey": "test_leafnodes_nkey_authorization", "proxy_required": "test_proxies.py::test_leafnode_proxy_required",
    },
    "leafnodes.authorization.users": {
        "account": _BIND, "user": _BIND, "username": _BIND, "pass": _BIND, "password": _BIND,
        "proxy_required": "test_proxies.py::test_leafnode_proxy_required",
    },
    "leafnodes": {
        "listen": "test_pub_sub_both_ways_wildcards_and_headers", "port": "test_config_defaults_and_account_check",
        "host": "test_hub_info_on_the_leafnode_port", "net": "test_hub_info_on_the_leafnode_port",
        "authorization": "test_account_binding_users_and_authorization_account",
        "remotes": "test_pub_sub_both_ways_wildcards_and_headers",
        "reconnect": "test_leaf_reconnects_after_hub_restart",
        "reconnect_delay": "test_leaf_reconnects_after_hub_restart",
        "reconnect_interval": "test_leaf_reconnects_after_hub_restart",
        "dial_timeout": "test_leaf_reconnects_after_hub_restart",
        "tls": "test_tls_leaf_connections", "compression": "test_config_errors",
        "advertise": "test_hub_info_on_the_leafnode_port", "leafnode_advertise": "test_hub_info_on_the_leafnode_port",
        "no_advertise": "test_hub_info_on_the_leafnode_port",
        "min_version": "test_min_version_refuses_older_leafs",
        "minimum_version": "test_min_version_refuses_older_leafs",
        "isolate_leafnode_interest": "test_leaf_isolation.py::test_hub_isolating_leaf_interest",
        "isolate": "test_leaf_isolation.py::test_isolation_settings_parse_and_type_errors",
        "write_deadline": "test_hub_info_on_the_leafnode_port",
        "write_timeout": "test_write_timeout.py::test_policies_parse_where_nats_server_takes_them",
    },
}


_WRAP = {
    "leafnodes": "leafnodes {{ {k}: true }}",
    "leafnodes.remotes": 'leafnodes {{ remotes [ {{ url: "nats://h:1", {k}: true }} ] }}',
    "leafnodes.authorization": "leafnodes {{ authorization {{ {k}: true }} }}",
    "leafnodes.authorization.users": "leafnodes {{ authorization {{ users [ {{ user: a, {k}: true }} ] }} }}",
}


@pytest.mark.parametrize("section", list(LEAF_KEY_TESTS))
def test_every_leafnodes_key_is_known(section):
    b = _Builder(Options())
    b.apply(parse_string('leafnodes { authorization { users [ { user: a } ] }, remotes [ { url: "nats://h:1" } ] }',
                         "s.conf"))
    keys = b.section_keys[section]
    assert keys == set(LEAF_KEY_TESTS[section]), keys ^ set(LEAF_KEY_TESTS[section])
    for key, test in LEAF_KEY_TESTS[section].items():
        if test == "refused":
            with pytest.raises(ConfigError, match="is not supported yet"):
                load_string(_WRAP[section].format(k=key), "k.conf")
        elif "::" in test:  # (a test of another file)
            path, name = test.split("::")
            with open(f"{os.path.dirname(__file__)}/{path}") as f:
                assert f"def {name}(" in f.read(), test
        else:
            assert test in globals(), test
