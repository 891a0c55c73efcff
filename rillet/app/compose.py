"""The composition root: a server built from its options, with the links, JetStream and monitoring they ask for.

``build_server(opts)`` makes the core ``rillet.server.server.Server`` and hands it a ``Root``, the
``rillet.server.subsystems.Subsystems`` the server calls back at its points of contact. This is the one place
that knows every subsystem; the server knows none of them (it imports neither ``rillet.cluster`` nor
``rillet.monitor``: tests/test_import_cycles.py). Each subsystem's modules load only when the options need
it: the route, leaf node and gateway managers with a ``cluster {}`` port, a ``leafnodes {}`` port or remotes,
a ``gateway {}`` block; the HTTP monitor (aiohttp) with ``http_port``/``https_port``; JetStream when enabled;
the monitor's data functions with the first ``$SYS`` monitoring request or the first closed connection.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rillet.config.options import Options
from rillet.server.accounts import Account
from rillet.server.logging import Logger
from rillet.server.server import Server, ocsp_peer_configs

if TYPE_CHECKING:
    from rillet.server.sysacc import SystemAccount

__all__ = ["Root", "build_server"]


def build_server(opts: Options | None = None, log: Logger | None = None) -> Server:
    """A server with everything its options configure (not started: ``await srv.start()``).
    ValueError: the options are refused (the server does not start)."""
    return Server(opts, log, Root())


class Root:
    """The subsystems of a server built by ``build_server`` (``rillet.server.subsystems.Subsystems``)."""

    # ---- links ----------------------------------------------------------------------------------------

    def make_links(self, server: Server) -> None:
        o = server.opts
        if ocsp_peer_configs(o) and (o.ocsp_cache is None or o.ocsp_cache.type == "local"):
            # the OCSP cache file keeps responses as S2 streams, as nats-server's
            from rillet.cluster.s2 import S2Reader, S2Writer
            server.ocsp_codec = (lambda raw: S2Writer().encode(raw), lambda data: S2Reader().feed(data))
        if o.cluster.port:
            from rillet.cluster.cluster import Cluster
            server.cluster = Cluster(server)  # ValueError: refuse to start
            from rillet.config import features
            if features.enabled(o, "rillet_go_meta"):  # (opt-in: follow the Go servers' JetStream meta group)
                from rillet.jetstream.cluster.gometa import attach_to_routes
                attach_to_routes(server)  # ValueError: refuse to start
            elif features.enabled(o, "rillet_go_meta_lead"):
                raise ValueError("feature flag 'rillet_go_meta_lead' needs 'rillet_go_meta: true' (the Go meta "
                                 "group it would stand in)")
        if o.leaf is not None and (o.leaf.port or o.leaf.remotes):
            from rillet.cluster.leaf import LeafNodes
            server.leafnodes = LeafNodes(server)  # ValueError: refuse to start
        if o.gateway_opts is not None:
            from rillet.config.gateway_section import validate_gateway
            err = validate_gateway(o.gateway_opts)  # (at start, not with -t: as nats-server)
            if err:
                raise ValueError(err)
            if o.gateway_opts.enabled:
                from rillet.cluster.gateway import Gateway
                server.gateway = Gateway(server)  # ValueError: refuse to start
        # the links' part in every account's interest, in this order: routes (and, without gateways, the
        # shadow subscriptions of stream imports), gateways, leaf nodes
        listeners: list[Any] = []
        if server.cluster is not None:
            from rillet.cluster.routed import RouteInterest
            listeners.append(RouteInterest(server.cluster, shadows=server.gateway is None))
        if server.gateway is not None:
            from rillet.cluster.gateway_account import GatewayInterest
            listeners.append(GatewayInterest(server.gateway))
        if server.leafnodes is not None:
            from rillet.cluster.leaf import LeafInterest
            listeners.append(LeafInterest(server.leafnodes))
        server.interest_listeners = tuple(listeners)
        # where messages from routes and leaf connections enter, for the links this server has
        gw, ln, cl = server.gateway, server.leafnodes, server.cluster
        if ln is not None and gw is not None:
            from rillet.cluster.leaf import deliver_leaf_gateways, deliver_routed_gateways
            ln.leaf_entry = deliver_leaf_gateways
            if cl is not None:
                cl.routed_entry = deliver_routed_gateways
        elif cl is not None and gw is not None:
            from rillet.cluster.gateway_account import deliver_routed
            cl.routed_entry = deliver_routed
        elif cl is not None and ln is not None:
            from rillet.cluster.leaf import deliver_routed as leaf_deliver_routed
            cl.routed_entry = leaf_deliver_routed

    def account_added(self, server: Server, acc: Account) -> None:
        """Every account is the plain ``Account``; with gateways, the gateway subsystem's part in it (``acc.gw``:
        the delivery executor's gateway step and the ``_GR_.`` reply tracking; ``acc.no_match``)."""
        if server.gateway is not None:
            server.gateway.attach(acc)

    def check_reload(self, server: Server, new_opts: Options) -> None:
        if server.opts.mqtt or new_opts.mqtt:
            from rillet.mqtt.listener import check_reload as mqtt_check_reload
            mqtt_check_reload(server.opts, new_opts)  # only ack_wait, max_ack_pending... change (ValueError)
        if server.cluster is not None or new_opts.cluster.port:
            from rillet.cluster.route_reload import check_reload
            check_reload(server, new_opts)  # cluster host/port changes are refused (ValueError)
        if server.leafnodes is not None or new_opts.leaf is not None:
            from rillet.cluster.leaf import check_reload as leaf_check_reload
            leaf_check_reload(server, new_opts)  # leafnodes changes are refused (ValueError)
        if server.gateway is not None or new_opts.gateway_opts is not None:
            from rillet.cluster.gateway import check_reload as gateway_check_reload
            gateway_check_reload(server, new_opts)  # only tls {} changes are accepted, as nats-server (ValueError)

    # ---- JetStream ------------------------------------------------------------------------------------

    def new_jetstream(self, server: Server) -> Any:
        from rillet.jetstream.manager import JetStream
        return JetStream(server, clustered=server.cluster is not None)

    # ---- MQTT -----------------------------------------------------------------------------------------

    async def start_mqtt(self, server: Server) -> None:
        from rillet.mqtt.listener import start_mqtt
        await start_mqtt(server)  # ValueError (nats-server's mqtt checks), OSError (the port)

    # ---- monitoring -----------------------------------------------------------------------------------

    async def start_monitor(self, server: Server) -> None:
        from rillet.monitor import start_monitor
        await start_monitor(server)

    def closed_conn_info(self, server: Server, c: Any) -> dict | None:
        from rillet.monitor.conns import closed_conn_info
        return closed_conn_info(server, c)

    def server_data(self, sysacc: "SystemAccount", kind: str, o: dict) -> dict | None:
        from rillet.monitor import sysreq
        return sysreq.server_data(sysacc, kind, o)

    def account_data(self, sysacc: "SystemAccount", acc: str, kind: str, o: dict) -> dict | None:
        from rillet.monitor import sysreq
        return sysreq.account_data(sysacc, acc, kind, o)
