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


def _pure_deliver_result():
    from rillet.server.delivery import reference_deliver_result
    return reference_deliver_result


def _compiled_deliver_result():
    from rillet._speedups._cdeliver import deliver_result
    return deliver_result


# this package's twin in the compiled lane (rillet.lane): the delivery executor (rillet.server.delivery)
_lane.register("deliver_result", _pure_deliver_result, _compiled_deliver_result)
