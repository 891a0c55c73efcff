"""The Rillet server. ``Server`` and ``Options`` are the embedding API (see ``rillet.server.embed``)."""
from rillet.config.options import Options

__all__ = ["Options", "Server", "run_server"]


def __getattr__(name: str):
    if name == "Server":
        from rillet.server.server import Server
        return Server
    if name == "run_server":
        from rillet.server.embed import run_server
        return run_server
    raise AttributeError(name)
