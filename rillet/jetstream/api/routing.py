"""Who answers a ``$JS.API`` request: one step of the dispatch (``ApiRouter.serve``), before any handler runs.

On a single server (``js.api_route`` is None) every request is answered here. In a cluster ``js.api_route`` is
the meta layer's ``cluster.MetaApi`` (a ``seams.ApiRoute``), the one routing decision: the meta leader answers
what it owns (stream and consumer create/update/delete, names, lists, account info), a warning is given for
system requests sent elsewhere, nothing is answered while the meta group has no leader; a request about one
stream or consumer goes to the servers holding its replicas (``ClusteredStreams.api_gate``): their leader
answers, the others keep quiet.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rillet.jetstream.api.router import ApiRouter


def answer_here(router: ApiRouter, key: str, args: list[str], reply: bytes | None, hdr: bytes,
                body: bytes) -> bool:
    """True when this server's handler answers the request; False when it was answered (or deliberately
    left unanswered) by the cluster's routing."""
    route = router.js.api_route
    return route is None or route.answer_here(router, key, args, reply, hdr, body)
