"""A clustered stream's ``alternates``: the stream and its mirrors, nearest first (StreamInfo.alternates).

nats-server answers a STREAM.INFO in clustered mode with the list of the stream's read replicas a client may
prefer: the stream itself and every stream of the account that mirrors it, each as ``{"name", "domain"
(only when set), "cluster"}`` with the cluster its group was placed in. The list is ordered by the
requester's view of the clusters: its own cluster first, then its other clusters in the order the request
gave (the gateways by RTT), then any other cluster. When the stream has no mirror the list is left out.
Without clustering there are no alternates.

nats-server walks a map, so streams of equally near clusters come in no set order; Rillet lists them by
stream name (the meta state's order) so the answer is repeatable.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence


def stream_alternates(assignments: Iterable[Any], stream: str, client_cluster: str,
                      client_alternates: Sequence[str] = (), domain: str = "") -> list[dict[str, str]] | None:
    """The alternates of ``stream`` among one account's stream ``assignments`` (objects with ``config``, a
    stream config dict, and ``group.cluster``), ranked for a client of ``client_cluster`` whose other
    clusters are ``client_alternates``; None when the stream is its only entry (or is not there)."""
    order = [client_cluster, *client_alternates]
    weight: dict[str, int] = {}
    for i, cn in enumerate(order):
        weight[cn] = len(order) - i  # (a name listed twice keeps its later, lower weight, as nats-server)
    alts: list[dict[str, str]] = []
    for sa in sorted(assignments, key=lambda a: str(a.config.get("name", ""))):
        cfg = sa.config
        mirror = cfg.get("mirror")
        mirror_name = mirror.get("name") if isinstance(mirror, dict) else None
        if cfg.get("name") == stream or mirror_name == stream:
            d = {"name": str(cfg.get("name", ""))}
            if domain:
                d["domain"] = domain
            d["cluster"] = sa.group.cluster
            alts.append(d)
    if len(alts) <= 1:
        return None
    alts.sort(key=lambda a: -weight.get(a["cluster"], 0))
    return alts
