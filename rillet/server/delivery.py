"""One delivery path: connection kinds, the ``Link`` interface of routes, gateways and leaf connections, and
the delivery plan of a sublist result with the one function that executes it.
"""
from __future__ import annotations

from enum import IntEnum


class ConnKind(IntEnum):
    """What a connection is (``conn.kind``). Ordered: below ROUTER are this server's own clients."""

    CLIENT = 0
    INTERNAL = 1  # JetStream, $SYS services, imports: subscriptions with callbacks
    ROUTER = 2
    GATEWAY = 3
    LEAF = 4


CLIENT = ConnKind.CLIENT
INTERNAL = ConnKind.INTERNAL
ROUTER = ConnKind.ROUTER
GATEWAY = ConnKind.GATEWAY
LEAF = ConnKind.LEAF
