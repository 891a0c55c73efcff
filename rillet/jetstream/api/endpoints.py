"""The ``$JS.API`` endpoints an account listens on, without the router that serves them.

A server with JetStream subscribes these subjects at start and makes its ``ApiRouter`` (with its stream,
consumer and store modules and msgspec) on the first request (``rillet.jetstream.manager.JSAccount.router``).
The router checks when it is made that its handlers are exactly these endpoints.
"""
from __future__ import annotations

# endpoint -> the argument tokens its subjects take after it ("": none; "*": a stream name; ...), in the
# order the endpoints are subscribed
ENDPOINTS: dict[str, tuple[str, ...]] = {
    "INFO": ("",),
    "STREAM.CREATE": ("", "*"),
    "STREAM.UPDATE": ("", "*"),
    "STREAM.INFO": ("", "*"),
    "STREAM.DELETE": ("", "*"),
    "STREAM.PURGE": ("", "*"),
    "STREAM.NAMES": ("",),
    "STREAM.LIST": ("",),
    "STREAM.MSG.GET": ("", "*"),
    "STREAM.MSG.DELETE": ("", "*"),
    "STREAM.LEADER.STEPDOWN": ("", "*"),
    "DIRECT.GET": ("", "*"),
    "CONSUMER.CREATE": ("*", "*.>"),
    "CONSUMER.DURABLE.CREATE": ("*.*",),
    "CONSUMER.INFO": ("*.*",),
    "CONSUMER.DELETE": ("*.*",),
    "CONSUMER.NAMES": ("*",),
    "CONSUMER.LIST": ("*",),
    "CONSUMER.MSG.NEXT": ("*.*",),
    "CONSUMER.PAUSE": ("*.*",),
    "CONSUMER.LEADER.STEPDOWN": ("*.*",),
    "CONSUMER.UNPIN": ("*.*",),
    "CONSUMER.RESET": ("*.*",),
    "STREAM.SNAPSHOT": ("", "*"),
    "STREAM.RESTORE": ("", "*"),
    "STREAM.PEER.EVACUATE": ("", "*"),  # (outside a cluster: 10010, rillet.jetstream.api.moves)
    "STREAM.CANCEL_MOVE": ("", "*"),
}
# answered by the meta layer in a cluster only (rillet.jetstream.cluster.meta)
CLUSTER_ONLY: dict[str, tuple[str, ...]] = {
    "STREAM.PEER.REMOVE": ("", "*"),
    "META.LEADER.STEPDOWN": ("", "*"),
    "SERVER.REMOVE": ("", "*"),
    "SERVER.EVACUATE": ("",),
    "ACCOUNT.STREAM.MOVE": ("*.*",),
    "ACCOUNT.STREAM.CANCEL_MOVE": ("*.*",),
}
# served by each stream (allow_direct) and each pull consumer, not through the API's subscriptions
SERVED_ELSEWHERE = frozenset(("DIRECT.GET", "CONSUMER.MSG.NEXT"))


def endpoint_keys(clustered: bool) -> list[str]:
    """Every endpoint a router has a handler for (with the cluster's own ones when ``clustered``)."""
    return [*ENDPOINTS, *CLUSTER_ONLY] if clustered else list(ENDPOINTS)


def subscription_patterns(clustered: bool) -> list[str]:
    """The API subjects to listen on (after the ``$JS.API.`` prefix), one pattern per endpoint form: a
    subject nobody serves (an unknown endpoint) then gets "no responders", as from nats-server."""
    out = []
    for key in endpoint_keys(clustered):
        if key in SERVED_ELSEWHERE:
            continue
        for suffix in ENDPOINTS.get(key) or CLUSTER_ONLY[key]:
            out.append(key + ("." + suffix if suffix else ""))
    return out
