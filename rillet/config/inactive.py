"""Settings that load but do nothing yet: clustering (routes), gateways and leaf nodes.

nats-server configurations often carry a ``cluster {}`` block (and test harnesses pass ``--cluster_listen`` /
``--routes``), so Rillet starts with them rather than refusing, and says once at start, as a warning naming
the block, that they are not active. The monitoring endpoints (/routez, /gatewayz, /leafz) show the real,
empty state.
"""
from __future__ import annotations

from rillet.config.options import ClusterOptions, Options

NOT_ACTIVE = "Rillet does not support {what} yet"


def cluster_configured(o: Options) -> bool:
    return o.cluster != ClusterOptions()


def inactive_warnings(o: Options) -> list[str]:
    """One warning per configured-but-inactive block (empty when nothing of the kind is set)."""
    out: list[str] = []
    if cluster_configured(o):
        cl = o.cluster
        where = "from the command line" if any(k.startswith("cluster.") for k in o.flags_set) else "block"
        parts = []
        if cl.port or cl.host:
            parts.append(f"no route listener on {cl.host or '0.0.0.0'}:{cl.port}")
        if cl.routes:
            parts.append(f"routes {', '.join(cl.routes)} are not solicited")
        detail = f" ({', '.join(parts)})" if parts else ""
        out.append(f"Cluster settings ({'cluster ' + where if where == 'block' else where}) are not active: "
                   f"{NOT_ACTIVE.format(what='clustering')}, this server runs alone{detail}")
    if o.gateway:
        out.append(f"Gateway settings (gateway block) are not active: {NOT_ACTIVE.format(what='gateways')}, "
                   "no gateway listener is started and no gateway is solicited")
    if o.leafnodes:
        out.append(f"Leafnode settings (leafnodes block) are not active: {NOT_ACTIVE.format(what='leaf nodes')}, "
                   "no leafnode listener is started and no remote is solicited")
    for key in ("connect_error_reports", "reconnect_error_reports"):
        if key in o.extra:
            out.append(f"{key} is not active: it applies to route, gateway and leafnode connections, "
                       "which Rillet does not have yet")
    return out
