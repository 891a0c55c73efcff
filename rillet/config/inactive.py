"""Settings that load but do nothing: cluster settings without a route port, and a leafnodes block with
neither a port nor remotes (leaf nodes are active otherwise: rillet.cluster.leaf). (Gateways are active:
rillet.cluster.gateway; a gateway block without a name and port does nothing in nats-server either, and
one with only one of them is refused at load.)

Routes are active (rillet.cluster) when the cluster has a port (``listen``, ``port``, ``--cluster``); a
``cluster {}`` without one does nothing in nats-server either (no route listener, routes not dialled), and
Rillet says so at start. Gateway and leafnode blocks start with a warning naming the block. The monitoring
endpoints (/routez, /gatewayz, /leafz) show the real state.
"""
from __future__ import annotations

from rillet.config.options import ClusterOptions, Options

NOT_ACTIVE = "Rillet does not support {what} yet"


def cluster_configured(o: Options) -> bool:
    return o.cluster != ClusterOptions()


def inactive_warnings(o: Options) -> list[str]:
    """One warning per configured-but-inactive block (empty when nothing of the kind is set)."""
    out: list[str] = []
    if cluster_configured(o) and not o.cluster.port:
        cl = o.cluster
        where = "from the command line" if any(k.startswith("cluster.") for k in o.flags_set) else "block"
        detail = f" (routes {', '.join(cl.routes)} are not solicited)" if cl.routes else ""
        out.append(f"Cluster settings ({'cluster ' + where if where == 'block' else where}) are not active: "
                   f"without a cluster port (listen) there is no route listener, this server runs alone{detail}")
    if o.leafnodes and (o.leaf is None or not (o.leaf.port or o.leaf.remotes)):
        out.append("Leafnode settings (leafnodes block) are not active: without a leafnode port (listen) or "
                   "remotes there is no leafnode listener and no remote is solicited")
    for key in ("connect_error_reports", "reconnect_error_reports"):
        if key in o.extra and not o.cluster.port:
            out.append(f"{key} is not active: it applies to route, gateway and leafnode connections, "
                       "and this server has no cluster port")
    return out
