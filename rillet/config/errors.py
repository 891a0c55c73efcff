"""Error type and source positions shared by the config parser and the Options builder."""
from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """Where something came from: file name, 1-based line, and a column counted as nats-server counts it.

    nats-server's column is the distance in bytes from the offset where the line begins, and it takes the
    new line character that ends the previous line as the beginning of a line (the start of the file for the
    first line). So a key at the start of the first line is at column 0, one at the start of any later line
    at column 1; further right the column is 0-based on the first line and 1-based on the others. Rillet
    reports the same numbers, so ``file:line:col`` reads the same from both servers.
    """
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class ConfigError(ValueError):
    """A problem in a configuration file, located at file:line:column when known.

    ``str(err)`` is ``"<file>:<line>:<col>: <reason>"``; without a line it is
    ``"<file>: <reason>"``. With ``located=False`` it is the reason alone: nats-server words some errors
    without a position (syntax errors say ``Parse error on line N: '...'``, include and variable errors
    carry their own words); ``file``, ``line`` and ``column`` still say where it was, for programs.
    """

    def __init__(self, file: str, line: int, column: int, reason: str, *, located: bool = True):
        self.file = file
        self.line = line
        self.column = column
        self.reason = reason
        self.located = located
        # Every problem found in one pass (the builder collects them); this one is the first.
        self.errors: list[ConfigError] = [self]
        # The warnings of that pass (set by the builder), and whether this error stands for the pass.
        self.warnings: list[ConfigError] = []
        self.collected = False
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
        if not self.located:
            return self.reason
        if self.line <= 0:
            if self.reason.startswith(("open ", "read ")) and self.file in self.reason:
                return self.reason  # a file that cannot be read: Go's own words name it (nats-server)
            return f"{self.file}: {self.reason}"
        return f"{self.file}:{self.line}:{self.column}: {self.reason}"

    def __str__(self) -> str:
        return self._format()

    def report(self) -> str:
        """Everything found, as nats-server prints a failed configuration: the warnings first, then the
        errors, one a line (and, after a whole pass over the options, a new line at the end)."""
        problems = list(self.warnings)
        problems += [e for e in self.errors if not any(e is w for w in self.warnings)]
        text = "\n".join(str(p) for p in problems)
        return text + "\n" if self.collected else text
