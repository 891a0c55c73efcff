"""Gateways and leaf nodes on the same servers: a Rillet super-cluster (clusters A and B, two servers each,
every server also a leafnode hub) with a Rillet leaf attached to A-0. Driven by nats-py clients: a leaf
client reaches subscribers in the remote cluster and back, request/reply both ways, each message once.
"""
from __future__ import annotations

import asyncio
import contextlib
import io

import nats

from rillet.config.leaf_section import LeafNodeOptions
from rillet.config.options_builder import load_string
from rillet.app.embed import run_server, run_super_cluster
from rillet.server.logging import Logger


async def _until(cond, timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _leaf_ready(srv) -> bool:
    return any(lc.registered for lc in srv.leafs.values())


def _gw_interest(srv, cluster: str, subject: str) -> bool:
    c = srv.gateway.out.get(cluster)
    return c is not None and c.interest(b"$G", subject)[0]


def _hub_interest(leaf, subject: str) -> bool:
    """Has the hub announced (LS+) interest matching ``subject`` to ``leaf``?"""
    from rillet.cluster.leaf_conn import LEAF_KIND
    from rillet.cluster.routed import RemoteSub
    r = leaf.accounts["$G"].sublist.match(subject)
    return any(type(s) is RemoteSub and s.client.kind == LEAF_KIND for s in r.psubs)


class Inbox:
    def __init__(self) -> None:
        self.msgs: list = []

    async def cb(self, m) -> None:
        self.msgs.append(m)

    def data(self) -> list[bytes]:
        return [m.data for m in self.msgs]


@contextlib.asynccontextmanager
async def super_cluster_with_leaf():
    """((A-0, A-1), (B-0, B-1), leaf): the leaf server is a leaf of A-0."""
    async with run_super_cluster(2, 2, leaf=LeafNodeOptions(host="127.0.0.1", port=-1)) as (a, b):
        o = load_string(f'listen: "127.0.0.1:-1"\nserver_name: leaf\nleafnodes {{ remotes [ '
                        f'{{ url: "nats://127.0.0.1:{a[0].leafnodes.addr[1]}" }} ] }}\n', "leaf.conf")
        async with run_server(o, log=Logger(out=io.StringIO())) as leaf:
            await _until(lambda: _leaf_ready(a[0]) and _leaf_ready(leaf), what="leaf connection")
            ncs = [await nats.connect(s.client_url, max_reconnect_attempts=0) for s in (a[0], a[1], b[0], b[1], leaf)]
            try:
                yield a, b, leaf, ncs
            finally:
                for nc in ncs:
                    await nc.close()


async def test_leaf_and_remote_cluster_reach_each_other_once():
    async with super_cluster_with_leaf() as (a, b, leaf, (na0, na1, nb0, nb1, nl)):
        on_b1, on_leaf, on_a1, on_hub = Inbox(), Inbox(), Inbox(), Inbox()
        await nb1.subscribe("x.>", cb=on_b1.cb)
        await nl.subscribe("y.>", cb=on_leaf.cb)
        await na1.subscribe("y.>", cb=on_a1.cb)
        await na0.subscribe("x.>", cb=on_hub.cb)
        for nc in (nb1, nl, na1, na0):
            await nc.flush()
        # B's interest reaches A-0 by gateway and goes on to its leaf; the leaf's interest reaches B by gateway
        await _until(lambda: _hub_interest(leaf, "x.1") and all(_gw_interest(s, "A", "y.1") for s in b)
                     and _gw_interest(a[0], "B", "x.1"), what="interest across gateways and the leaf connection")
        await nl.publish("x.1", b"leaf to B")
        await nb0.publish("y.1", b"B to leaf")
        await nl.flush()
        await nb0.flush()
        await _until(lambda: on_b1.msgs and on_leaf.msgs and on_a1.msgs and on_hub.msgs, what="deliveries")
        await asyncio.sleep(0.2)
        assert on_b1.data() == [b"leaf to B"]
        assert on_hub.data() == [b"leaf to B"]
        assert on_leaf.data() == [b"B to leaf"]
        assert on_a1.data() == [b"B to leaf"]


async def test_leaf_interest_leaves_the_remote_cluster_when_unsubscribed():
    async with super_cluster_with_leaf() as (a, b, leaf, (na0, na1, nb0, nb1, nl)):
        sub = await nl.subscribe("gone.>")
        await nl.flush()
        await _until(lambda: all(_gw_interest(s, "A", "gone.1") for s in b), what="leaf interest in B")
        await sub.unsubscribe()
        await nl.flush()
        await _until(lambda: not any(_gw_interest(s, "A", "gone.1") for s in b), what="interest withdrawn")
        sub = await nb1.subscribe("back.>")
        await nb1.flush()
        await _until(lambda: _hub_interest(leaf, "back.1"), what="B interest on the leaf")
        await sub.unsubscribe()
        await nb1.flush()
        await _until(lambda: not _hub_interest(leaf, "back.1"), what="B interest withdrawn from the leaf")


async def test_request_reply_between_leaf_and_remote_cluster_both_ways():
    async with super_cluster_with_leaf() as (a, b, leaf, (na0, na1, nb0, nb1, nl)):
        served = {"b": 0, "leaf": 0}

        async def on_b(m) -> None:
            served["b"] += 1
            await m.respond(b"from B: " + m.data)

        async def on_l(m) -> None:
            served["leaf"] += 1
            await m.respond(b"from leaf: " + m.data)
        await nb1.subscribe("svc.b", cb=on_b)
        await nl.subscribe("svc.leaf", cb=on_l)
        await nb1.flush()
        await nl.flush()
        await _until(lambda: _hub_interest(leaf, "svc.b") and all(_gw_interest(s, "A", "svc.leaf") for s in b),
                     what="service interest")
        for i in range(3):
            r = await nl.request("svc.b", b"q%d" % i, timeout=2)
            assert r.data == b"from B: q%d" % i
            r = await nb0.request("svc.leaf", b"p%d" % i, timeout=2)
            assert r.data == b"from leaf: p%d" % i
        await asyncio.sleep(0.2)
        assert served == {"b": 3, "leaf": 3}
