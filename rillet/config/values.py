"""Containers the parser produces, plus Go-style duration parsing.

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


# ---------------------------------------------------------------------------
# Go duration strings ("1h30m", "500ms", "-1.5s", "0")

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str) -> float:
    """Parse a Go ``time.ParseDuration`` string and return seconds.

    Raises ``ValueError`` with a Go-like message (``time: invalid duration "x"``).
    """
    original = text
    if not text:
        raise ValueError(f'time: invalid duration "{original}"')
    sign = 1.0
    if text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f'time: invalid duration "{original}"')
    total = 0.0
    i = 0
    n = len(text)
    while i < n:
        start = i
        while i < n and text[i].isdigit():
            i += 1
        int_part = text[start:i]
        frac_part = ""
        if i < n and text[i] == ".":
            i += 1
            fstart = i
            while i < n and text[i].isdigit():
                i += 1
            frac_part = text[fstart:i]
        if not int_part and not frac_part:
            raise ValueError(f'time: invalid duration "{original}"')
        ustart = i
        while i < n and not (text[i].isdigit() or text[i] == "."):
            i += 1
        unit = text[ustart:i]
        if not unit:
            raise ValueError(f'time: missing unit in duration "{original}"')
        if unit not in _DURATION_UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{original}"')
        number = float(f"{int_part or '0'}.{frac_part or '0'}")
        total += number * _DURATION_UNITS[unit]
    return sign * total
