"""Route liveness: an idle route is PINGed every ROUTE_LIVENESS_PING s and a route that has read nothing (and
had none of its bytes acknowledged) for ROUTE_SILENCE_CLOSE s is reset, its peer's interest dropped at
once. (A route across a network cut otherwise stays open for minutes and delivers its stale backlog after
the heal: docs/changelog.md, "Fixed: the sync-always partition duplicates".) The constants are shortened here."""
from __future__ import annotations

import io
import time

from helpers import RawClient
from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.cluster import route
from rillet.config.options import ClusterOptions, Options
from rillet.server.logging import Logger
from rillet.app.compose import build_server


async def test_idle_route_is_pinged_and_a_silent_one_reset(monkeypatch):
    monkeypatch.setattr(route, "ROUTE_LIVENESS_PING", 0.15)
    monkeypatch.setattr(route, "ROUTE_SILENCE_CLOSE", 0.6)
    buf = io.StringIO()
    o = Options(host="127.0.0.1", port=-1, server_name="a")
    o.cluster = ClusterOptions(name="c1", host="127.0.0.1", port=-1, routes=[])
    s = build_server(o, Logger(debug=True, out=buf))
    await s.start()
    try:
        c = await RawClient.open(s.cluster.addr[1], connect=False)
        c.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(name="NFAKE", cluster="c1"))) +
               cp.info_frame(ci.encode_info(ci.Info(server_id="NFAKE", server_name="fake", cluster="c1", port=1))) +
               b"RS+ $G live.>\r\n")
        # a peer that answers PINGs stays connected well past the silence limit, however idle otherwise
        pings = 0
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            try:
                line = await c.readline(0.2)
            except AssertionError:  # (nothing within 0.2 s)
                continue
            if line == b"PING":
                pings += 1
                c.send(b"PONG\r\n")
        assert pings >= 5, pings
        assert "NFAKE" in s.cluster.routes
        assert s.accounts["$G"].sublist.match("live.x").psubs or s.accounts["$G"].sublist.match("live.x").qsubs
        # it stops answering (a blackhole, a stopped process): reset within the limit plus a tick
        t0 = time.monotonic()
        await c.read_until_closed(3)
        took = time.monotonic() - t0
        assert took < 0.6 + 0.5, took
        assert "NFAKE" not in s.cluster.routes
        m = s.accounts["$G"].sublist.match("live.x")
        assert not m.psubs and not m.qsubs  # the peer's interest went with it
        log = buf.getvalue()
        assert "Route silent for" in log and "Router connection closed: Stale Connection" in log
    finally:
        await s.shutdown()
