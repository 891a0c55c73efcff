"""Run a Rillet server inside a Python program, e.g. as a test fixture (``from rillet.app.embed import run_server``)::

    async with run_server(port=-1) as srv:
        nc = await nats.connect(srv.client_url)

``run_cluster(n)`` does the same for a cluster of ``n`` servers (a list of servers, full mesh), and
``run_super_cluster(clusters, servers)`` for clusters joined by gateways (a list of clusters).

``run_server`` takes an ``Options`` or keyword arguments for one; the server listens on 127.0.0.1 and a
free port by default, logs nothing unless ``log`` is given, and stops cleanly when the block ends.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any, AsyncIterator, Callable, Sequence

from rillet.server.logging import Logger
from rillet.config.options import RANDOM_PORT, Options
from rillet.app.compose import build_server
from rillet.server.server import Server


@contextlib.asynccontextmanager
async def run_server(opts: Options | None = None, *, log: Logger | None = None,
                     **fields: Any) -> AsyncIterator[Server]:
    if opts is None:
        fields.setdefault("host", "127.0.0.1")
        fields.setdefault("port", RANDOM_PORT)
        opts = Options(**fields)
    elif fields:
        raise TypeError("pass either an Options object or keyword fields, not both")
    if log is None:
        log = Logger(debug=opts.debug, trace=opts.trace, out=io.StringIO())
    srv = build_server(opts, log)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.shutdown()


async def start_server(opts: Options | None = None, **fields: Any) -> Server:
    """Start a server and return it; call ``await srv.shutdown()`` to stop it."""
    if opts is None:
        fields.setdefault("host", "127.0.0.1")
        fields.setdefault("port", RANDOM_PORT)
        opts = Options(**fields)
    srv = build_server(opts, Logger(out=io.StringIO()))
    await srv.start()
    return srv


@contextlib.asynccontextmanager
async def run_cluster(n: int = 3, *, name: str = "rillet", log: Logger | None = None, timeout: float = 10.0,
                      jetstream: bool = False, store_dir: str | None = None,
                      server_fields: Callable[[int], dict] | None = None,
                      **fields: Any) -> AsyncIterator[list[Server]]:
    """Run a cluster of ``n`` servers in this process, on 127.0.0.1 and free ports::

        async with run_cluster(3) as servers:
            nc = await nats.connect(servers[0].client_url)

    Every server routes to the first one and learns the others by gossip; the block starts once each
    server has a route to every other one (full mesh). ``fields`` are ``Options`` fields for every server
    (``server_name`` is set to ``<name>-<i>``); ``server_fields(i)`` gives more for server ``i`` (e.g.
    ``tags``: a stretch cluster whose servers carry ``region:west``, ...).

    ``jetstream=True``: a JetStream cluster. Every server is configured with every server's route (its
    own included, as a nats-server cluster config usually is: the meta group's founding size is the
    number of routes) and stores under ``<store_dir>/<server name>`` (a temporary directory, removed
    afterwards, when ``store_dir`` is not given); the block starts once the meta group has a leader that
    every server knows.
    """
    from dataclasses import replace

    from rillet.config.options import ClusterOptions
    if n < 1:
        raise ValueError("a cluster needs at least one server")
    servers: list[Server] = []
    tmp = None
    if jetstream and store_dir is None:
        import tempfile
        store_dir = tmp = tempfile.mkdtemp(prefix="rillet-jscluster-")
    try:
        seed = ""
        route_ports = []
        if jetstream:
            from rillet.server.server import free_port
            route_ports = [free_port() for _ in range(n)]
        for i in range(n):
            f = dict(fields)
            if server_fields is not None:
                f.update(server_fields(i))
            f.setdefault("host", "127.0.0.1")
            f.setdefault("port", RANDOM_PORT)
            f["server_name"] = f"{name}-{i}"
            opts = Options(**f)
            if jetstream:
                import os
                from rillet.config.options import JetStreamOptions
                js = opts.jetstream if "jetstream" in f else JetStreamOptions()
                opts.jetstream = replace(js, enabled=True, store_dir=os.path.join(str(store_dir), f["server_name"]))
                opts.cluster = replace(opts.cluster if "cluster" in fields else ClusterOptions(), name=name,
                                       host="127.0.0.1", port=route_ports[i],
                                       routes=[f"nats-route://127.0.0.1:{p}" for p in route_ports])
            else:
                opts.cluster = replace(opts.cluster if "cluster" in fields else ClusterOptions(), name=name,
                                       host="127.0.0.1", port=RANDOM_PORT, routes=[seed] if seed else [])
            srv = build_server(opts, log if log is not None else Logger(out=io.StringIO()))
            await srv.start()
            servers.append(srv)
            if not seed:
                seed = f"nats-route://127.0.0.1:{srv.cluster.addr[1]}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(s.cluster.servers_connected() < n - 1 for s in servers):  # (every route pool complete)
            if loop.time() > deadline:
                raise TimeoutError(f"the cluster did not form a full mesh within {timeout}s: "
                                   f"{[s.cluster.servers_connected() for s in servers]} servers connected")
            await asyncio.sleep(0.02)
        if jetstream:
            await wait_meta_leader(servers, max(deadline - loop.time(), 0.0) + 5.0)
        yield servers
    finally:
        await _shut_down(servers, tmp)


async def _shut_down(servers: list[Server], tmp: str | None) -> None:
    """Stop the servers of a cluster (the last started first) and remove the store directory made for them."""
    for srv in reversed(servers):
        await srv.shutdown()
    if tmp is not None:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


async def wait_meta_leader(servers: list[Server], timeout: float = 10.0, members: int = 0) -> Server:
    """Wait until the running JetStream servers agree on a meta leader (whose group has at least ``members``
    peers); returns the leader's server."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        up = [s for s in servers if not s.shutting_down and s.jetstream is not None]
        cls = [s.jetstream.cluster for s in up]
        leaders = [s for s, c in zip(up, cls) if c is not None and c.is_leader()]
        if len(leaders) == 1:
            lp = leaders[0].jetstream.cluster.peer
            if all(c.group is not None and c.group.leader == lp for c in cls) and \
                    len(leaders[0].jetstream.cluster.group.peers) >= members:
                return leaders[0]
        if loop.time() > deadline:
            raise TimeoutError(f"no JetStream meta leader within {timeout}s")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def run_super_cluster(clusters: int = 2, servers: int | Sequence[int] = 1, *,
                            names: list[str] | None = None,
                            log: Logger | None = None, timeout: float = 10.0, solicit_delay: float = 0.05,
                            jetstream: bool | Sequence[str] = False, store_dir: str | None = None,
                            server_fields: Callable[[str, int], dict] | None = None,
                            **fields: Any) -> AsyncIterator[list[list[Server]]]:
    """Run a super-cluster in this process: ``clusters`` clusters of ``servers`` servers each, joined by
    gateways, on 127.0.0.1 and free ports::

        async with run_super_cluster(2, 2) as (west, east):
            nc = await nats.connect(west[0].client_url)

    ``servers``: the servers of each cluster, or one count per cluster (``[2, 2, 2, 3]``: three clusters of 2
    and a 4th of 3, e.g. a stretch cluster). Cluster names are ``names`` (default A, B, C, ...); server names
    ``<cluster>-<i>``. Without JetStream,
    the servers of the first cluster know no gateway; every other server is configured with the first
    cluster's gateway and learns the others by gossip (implicit gateways), as nats-server does. The block starts once every
    server of every cluster has its routes (full mesh) and an outbound gateway to every other cluster.
    ``solicit_delay``: how long a server waits before dialling its configured gateways (nats-server waits
    1 s to let its cluster form). ``fields``: ``Options`` fields for every server; ``server_fields(cluster
    name, i)`` more for one server (e.g. its ``tags``).

    ``jetstream=True``: a JetStream super-cluster, configured as a nats-server one usually is: every
    server has a cluster block (also a cluster of one server), lists every route of its cluster (its own
    included) and every gateway URL of every other
    cluster, so the meta group's founding size (routes + remote gateway URLs, nats-server's rule) is the
    number of servers of the super-cluster; stores under ``<store_dir>/<server name>`` (a temporary
    directory, removed afterwards, when not given). The block starts once the meta group (all servers of
    all clusters) has a leader that every server knows. ``jetstream=["A", "B"]``: only the servers of those
    clusters run JetStream (mixed mode: the others are configured the same way, without JetStream).
    """
    import os
    from dataclasses import replace

    from rillet.config.gateway_section import GatewayOptions, RemoteGateway
    from rillet.config.options import ClusterOptions, JetStreamOptions
    from rillet.server.server import free_port
    sizes = [servers] * clusters if isinstance(servers, int) else [int(n) for n in servers]
    if clusters < 1 or len(sizes) != clusters or min(sizes) < 1:
        raise ValueError("a super-cluster needs at least one cluster of one server (servers: one count per cluster)")
    names = list(names) if names else [chr(ord("A") + i) for i in range(clusters)]
    size_of = dict(zip(names, sizes))
    if len(names) != clusters or len(set(names)) != clusters:
        raise ValueError("names: one distinct name per cluster")
    out: list[list[Server]] = []
    every: list[Server] = []
    tmp = None
    js_clusters = set(names) if jetstream is True else set(jetstream or ())
    if js_clusters - set(names):
        raise ValueError(f"jetstream: no cluster named {sorted(js_clusters - set(names))}")
    if js_clusters and store_dir is None:
        import tempfile
        store_dir = tmp = tempfile.mkdtemp(prefix="rillet-jssuper-")
    # (JetStream: every port chosen first, so that each server's config lists every route and gateway)
    rports = {cn: [free_port() for _ in range(size_of[cn])] for cn in names} if js_clusters else {}
    gports = {cn: [free_port() for _ in range(size_of[cn])] for cn in names} if js_clusters else {}
    try:
        first_gw = ""
        for ci, cname in enumerate(names):
            group: list[Server] = []
            seed = ""
            for i in range(size_of[cname]):
                f = dict(fields)
                if server_fields is not None:
                    f.update(server_fields(cname, i))
                f.setdefault("host", "127.0.0.1")
                f.setdefault("port", RANDOM_PORT)
                f["server_name"] = f"{cname}-{i}"
                opts = Options(**f)
                if js_clusters:
                    if cname in js_clusters:
                        js = opts.jetstream if "jetstream" in f else JetStreamOptions()
                        opts.jetstream = replace(js, enabled=True,
                                                 store_dir=os.path.join(str(store_dir), f["server_name"]))
                    opts.cluster = ClusterOptions(name=cname, host="127.0.0.1", port=rports[cname][i],
                                                  routes=[f"nats-route://127.0.0.1:{p}" for p in rports[cname]])
                    remotes = [RemoteGateway(o, [f"nats://127.0.0.1:{p}" for p in gports[o]])
                               for o in names if o != cname]
                    gport = gports[cname][i]
                else:
                    if size_of[cname] > 1:
                        opts.cluster = ClusterOptions(name=cname, host="127.0.0.1", port=RANDOM_PORT,
                                                      routes=[seed] if seed else [])
                    remotes = [RemoteGateway(names[0], [first_gw])] if ci > 0 else []
                    gport = RANDOM_PORT
                opts.gateway_opts = GatewayOptions(name=cname, host="127.0.0.1", port=gport, gateways=remotes)
                opts.gateway = {"name": cname, "host": "127.0.0.1"}  # (the block as a config would write it)
                if remotes:
                    opts.gateway["gateways"] = [{"name": r.name, "urls": list(r.urls)} for r in remotes]
                srv = build_server(opts, log if log is not None else Logger(out=io.StringIO()))
                srv.gateway.solicit_delay = solicit_delay
                every.append(srv)
                await srv.start()
                group.append(srv)
                if srv.cluster is not None and not seed:
                    seed = f"nats-route://127.0.0.1:{srv.cluster.addr[1]}"
                if ci == 0 and not first_gw:
                    first_gw = f"nats://127.0.0.1:{srv.gateway.addr[1]}"
            out.append(group)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def ready() -> bool:
            for s in every:
                if s.cluster is not None and s.cluster.servers_connected() < size_of[s.opts.cluster.name] - 1:
                    # (pools complete)
                    return False
                if len(s.gateway.out) < clusters - 1:
                    return False
            return True
        while not ready():
            if loop.time() > deadline:
                raise TimeoutError(f"the super-cluster did not form within {timeout}s: outbound gateways "
                                   f"{[len(s.gateway.out) for s in every]}")
            await asyncio.sleep(0.02)
        if js_clusters:
            await wait_meta_leader(every, max(deadline - loop.time(), 0.0) + 5.0,
                                   members=sum(size_of[cn] for cn in js_clusters))
        yield out
    finally:
        await _shut_down(every, tmp)
