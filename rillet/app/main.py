"""``rillet-server`` / ``python -m rillet.server``: the nats-server command line (rillet.server.main) running a
server built by the composition root."""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from rillet.app.compose import build_server
    from rillet.server.main import main as command_line
    return command_line(argv, build=build_server)
