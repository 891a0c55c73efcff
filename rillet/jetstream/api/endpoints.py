"""The ``$JS.API`` endpoints an account listens on, without the router that serves them.

A server with JetStream subscribes these subjects at start and makes its ``ApiRouter`` (with its stream,
consumer and store modules and msgspec) on the first request (``rillet.jetstream.manager.JSAccount.router``).
The router checks when it is made that its handlers are exactly these endpoints.
"""
from __future__ import annotations

# the modules with a ``register(router)`` adding their endpoints to every ApiRouter (made with the router)
HANDLER_MODULES = ("rillet.jetstream.api.consumers", "rillet.jetstream.api.snapshot", "rillet.jetstream.api.moves")
# what the router's making imports, and what the first stream create then needs (its store, the advisories):
# an account brings these in over several loop passes before it makes its first router
# (rillet.jetstream.api.staged)
ROUTER_MODULES = ("rillet.jetstream.api.router", *HANDLER_MODULES, "rillet.jetstream.storeopen",
                  "rillet.jetstream.store.memstore", "rillet.jetstream.store.filestore", "rillet.jetstream.advisories")

# the forms of the argument tokens an endpoint's subjects take after it ("": none)
NONE = ("",)
NAME_OR_NONE = ("", "*")  # a stream's name, say (one left out is answered with an error, not "no responders")
NAME = ("*",)
TWO_NAMES = ("*.*",)  # a stream's and a consumer's (an account's and a stream's)
CONSUMER_CREATE = ("*", "*.>")  # a stream's name, then a consumer's and its filter subject (optional)

# endpoint -> its argument form, in the order the endpoints are subscribed
ENDPOINTS: dict[str, tuple[str, ...]] = {
    "INFO": NONE,
    "STREAM.CREATE": NAME_OR_NONE,
    "STREAM.UPDATE": NAME_OR_NONE,
    "STREAM.INFO": NAME_OR_NONE,
    "STREAM.DELETE": NAME_OR_NONE,
    "STREAM.PURGE": NAME_OR_NONE,
    "STREAM.NAMES": NONE,
    "STREAM.LIST": NONE,
    "STREAM.MSG.GET": NAME_OR_NONE,
    "STREAM.MSG.DELETE": NAME_OR_NONE,
    "STREAM.LEADER.STEPDOWN": NAME_OR_NONE,
    "DIRECT.GET": NAME_OR_NONE,
    "CONSUMER.CREATE": CONSUMER_CREATE,
    "CONSUMER.DURABLE.CREATE": TWO_NAMES,
    "CONSUMER.INFO": TWO_NAMES,
    "CONSUMER.DELETE": TWO_NAMES,
    "CONSUMER.NAMES": NAME,
    "CONSUMER.LIST": NAME,
    "CONSUMER.MSG.NEXT": TWO_NAMES,
    "CONSUMER.PAUSE": TWO_NAMES,
    "CONSUMER.LEADER.STEPDOWN": TWO_NAMES,
    "CONSUMER.UNPIN": TWO_NAMES,
    "CONSUMER.RESET": TWO_NAMES,
    "STREAM.SNAPSHOT": NAME_OR_NONE,
    "STREAM.RESTORE": NAME_OR_NONE,
    "STREAM.PEER.EVACUATE": NAME_OR_NONE,  # (outside a cluster: 10010, rillet.jetstream.api.moves)
    "STREAM.CANCEL_MOVE": NAME_OR_NONE,
}
# answered by the meta layer in a cluster only (rillet.jetstream.cluster.meta)
CLUSTER_ONLY: dict[str, tuple[str, ...]] = {
    "STREAM.PEER.REMOVE": NAME_OR_NONE,
    "META.LEADER.STEPDOWN": NAME_OR_NONE,
    "SERVER.REMOVE": NAME_OR_NONE,
    "SERVER.EVACUATE": NONE,
    "META.RESCUE": NONE,
    "ACCOUNT.STREAM.MOVE": TWO_NAMES,
    "ACCOUNT.STREAM.CANCEL_MOVE": TWO_NAMES,
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
