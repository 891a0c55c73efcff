"""The application layer: the composition root (``build_server``: a server with its links, JetStream and
monitoring, rillet/app/compose.py), the ``rillet-server`` command (``rillet.app.main``) and the embedding
API (``rillet.app.embed``: ``run_server``, ``run_cluster``, ``run_super_cluster``). Loaded on first use, so
that ``rillet-server --version`` does not build the server's modules."""

__all__ = ["Root", "build_server", "run_server", "run_cluster", "run_super_cluster", "start_server"]


def __getattr__(name: str):
    if name in ("Root", "build_server"):
        from rillet.app import compose
        return getattr(compose, name)
    if name in ("run_server", "run_cluster", "run_super_cluster", "start_server"):
        from rillet.app import embed
        return getattr(embed, name)
    raise AttributeError(name)
