"""Who answers a ``$JS.API`` request: one step of the dispatch (``ApiRouter.serve``), before any handler runs.

On a single server every request is answered here. In a cluster the meta layer (``cluster.MetaApi.route_api``)
answers what its leader owns (stream and consumer create/update/delete, names, lists, account info), warns
about system requests sent elsewhere, or answers nothing while the meta group has no leader; a request about
one stream or consumer goes to the servers holding its replicas: their leader answers, the others keep quiet
(``js.api_gates``: callables ``(router, key, args, reply, hdr, body)`` from the replicated streams, each
answering True: answer here, False: stay silent or already answered, None: not its call).
"""
from __future__ import annotations

from typing import Any


def answer_here(router: Any, key: str, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> bool:
    """True when this server's handler answers the request; False when it was answered (or deliberately
    left unanswered) by the cluster's routing."""
    js = router.js
    cl = js.cluster
    if cl is not None and cl.api.route_api(router, key, args, reply, hdr, body):
        return False  # the meta leader (or a stream/consumer leader) answers
    for gate in getattr(js, "api_gates", None) or ():
        r = gate(router, key, args, reply, hdr, body)
        if r is not None:
            return bool(r)
    return True
