"""Containers the parser produces (Go-style durations are ``rillet.gocompat.gotime.parse_go_duration``).

``ConfigMap`` and ``ConfigList`` behave exactly like ``dict`` and ``list`` (they compare
equal to plain ones) but remember where each key / element was written, so later stages
can report ``file:line:col`` for a bad value.
"""
from __future__ import annotations

from typing import Any, Iterable

from .errors import Position


class ConfigMap(dict):
    """A dict that also records the source position of every key.

    ``used_vars`` holds the keys that were referenced as ``$variables`` somewhere;
    nats-server does not treat those as unknown settings.
    """

    def __init__(self, *args: Any, position: Position | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.position = position
        self.positions: dict[str, Position] = {}
        self.used_vars: set[str] = set()

    def set(self, key: str, value: Any, pos: Position | None) -> None:
        self[key] = value
        if pos is not None:
            self.positions[key] = pos

    def pos(self, key: str) -> Position | None:
        """Position of ``key``, falling back to the map's own position."""
        return self.positions.get(key, self.position)


class ConfigList(list):
    """A list that also records the source position of every element."""

    def __init__(self, items: Iterable[Any] = (), position: Position | None = None):
        super().__init__(items)
        self.position = position
        self.positions: list[Position | None] = [position] * len(self)

    def add(self, value: Any, pos: Position | None) -> None:
        self.append(value)
        self.positions.append(pos)

    def pos(self, index: int) -> Position | None:
        if 0 <= index < len(self.positions) and self.positions[index] is not None:
            return self.positions[index]
        return self.position
