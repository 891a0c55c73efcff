"""Error type and source positions shared by the config parser and the Options builder."""
from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """Where something came from: file name, 1-based line, 1-based column."""
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class ConfigError(ValueError):
    """A problem in a configuration file, located at file:line:column when known.

    ``str(err)`` is ``"<file>:<line>:<col>: <reason>"``; without a line it is
    ``"<file>: <reason>"``.
    """

    def __init__(self, file: str, line: int, column: int, reason: str):
        self.file = file
        self.line = line
        self.column = column
        self.reason = reason
        # Every problem found in one pass (the builder collects them); this one is the first.
        self.errors: list[ConfigError] = [self]
        super().__init__(self._format())

    @classmethod
    def at(cls, pos: Position | None, reason: str, file: str = "<string>") -> "ConfigError":
        if pos is None:
            return cls(file, 0, 0, reason)
        return cls(pos.file, pos.line, pos.column, reason)

    @property
    def position(self) -> Position:
        return Position(self.file, self.line, self.column)

    def _format(self) -> str:
        if self.line <= 0:
            if self.reason.startswith(("open ", "read ")) and self.file in self.reason:
                return self.reason  # a file that cannot be read: Go's own words name it (nats-server)
            return f"{self.file}: {self.reason}"
        return f"{self.file}:{self.line}:{self.column}: {self.reason}"

    def __str__(self) -> str:
        return self._format()
