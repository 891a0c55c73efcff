"""The Rillet server core. ``Options`` and ``Server`` (the core alone: ``rillet.app.build_server`` builds a
server with its links, JetStream and monitoring, and ``rillet.app.embed`` is the embedding API)."""
from rillet import lane as _lane
from rillet.config.options import Options

__all__ = ["Options", "Server"]


def __getattr__(name: str):
    if name == "Server":
        from rillet.server.server import Server
        return Server
    raise AttributeError(name)


# this package's twin in the compiled lane (rillet.lane): the delivery executor (rillet.server.delivery)
_lane.register("deliver_result", "rillet.server.delivery:reference_deliver_result",
               "rillet._speedups._cdeliver:deliver_result")
