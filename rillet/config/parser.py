"""Parser for the NATS configuration language (the format nats-server reads with ``-c``).

What it accepts, what it refuses and how it words the refusal follow nats-server 2.x: tools and scripts grep
those messages, so a malformed file fails here with the same text (``Parse error on line N: '...'``) and a
misplaced value is reported at the same ``file:line:col``.

The language:

* ``key: value``, ``key = value`` and ``key value``; keys may be quoted.
* maps ``{ ... }`` and arrays ``[ ... ]``; entries separated by ``,``, ``;`` (maps) or new lines; the whole
  file may be wrapped in ``{ }`` (JSON style).
* ``#`` and ``//`` comments.
* ``include file`` / ``include 'file'`` / ``include "file"``, relative to the including file's directory;
  the included top-level keys are merged into the current map.
* ``$NAME`` references: the nearest earlier definition of ``NAME`` in an enclosing map, else the
  environment variable ``NAME`` (whose text is itself parsed as a value). ``$2a$...`` is a bcrypt hash.
* integers with size suffixes: ``k``/``m``/``g``/``t``/``p``/``e`` are powers of 1000, ``kb``/``ki``/``kib``
  (and so on) powers of 1024. An unquoted ``2m`` is the integer 2000000.
* floats, booleans (``true/false/yes/no/on/off``, any case), ISO-8601 Zulu datetimes, addresses such as
  ``127.0.0.1:4222`` (strings).
* strings: ``"double"`` (escapes ``\\t \\n \\r \\" \\\\ \\xHH``), ``'single'`` (raw), unquoted, and block
  strings ``( ... )`` closed by a ``)`` alone on its own line.

Columns are counted the way nats-server counts them (see ``errors.Position``).

The scanner is a state machine with the same states as nats-server's lexer, because its quirks are part of
what users see (a digit directly before ``]`` makes ``1]`` a string, so ``[1]`` is refused; a stray ``}``
at the top level is accepted). Where nats-server would misbehave, Rillet refuses instead, with its own
words: an integer with an unknown size suffix (``1kbi``; nats-server drops the key silently), a size that
overflows 64 bits (nats-server wraps around) and include cycles (nats-server recurses until it crashes).
"""
from __future__ import annotations

import math
import os
from typing import Any

from .errors import ConfigError, Position
from .scanner import (_BOOLS, ARRAY_END, ARRAY_START, BOOL, DATETIME, EOF, ERROR, FLOAT, INCLUDE, INTEGER, KEY,
                      MAP_END, MAP_START, STRING, VARIABLE, Scanner, Token)
from .values import ConfigList, ConfigMap

__all__ = ["parse_file", "parse_string", "ConfigError", "ConfigMap", "ConfigList"]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_SIZE_SUFFIXES = {"": 1}
for _i, _letter in enumerate("kmgtpe", start=1):
    _SIZE_SUFFIXES[_letter] = 1000 ** _i
    for _tail in ("b", "i", "ib"):
        _SIZE_SUFFIXES[_letter + _tail] = 1024 ** _i

_BCRYPT_PREFIX = "2a$"


def parse_file(path: str | os.PathLike) -> ConfigMap:
    """Parse the configuration file at ``path``; raise ``ConfigError`` on any problem."""
    return _parse_file(os.fspath(path), include_chain=())


def parse_string(text: str, filename: str = "<string>") -> ConfigMap:
    """Parse configuration ``text``; ``filename`` is used in errors and to resolve includes."""
    return _Builder(text, filename, base_dir=_base_dir(filename)).build()


def _base_dir(filename: str) -> str:
    if filename.startswith("<"):
        return "."
    return os.path.dirname(filename) or "."


def _go_open_error(path: str, e: OSError) -> str:
    """How Go's os.ReadFile reports a file it cannot read (nats-server prints it as is)."""
    import errno
    if e.errno == errno.EISDIR:
        return f"read {path}: is a directory"
    return f"open {path}: {(e.strerror or str(e)).lower()}"


def _parse_file(path: str, include_chain: tuple[str, ...]) -> ConfigMap:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(path, 0, 0, _go_open_error(path, e), located=False) from None
    real = os.path.realpath(path)
    return _Builder(text, path, base_dir=_base_dir(path), include_chain=include_chain + (real,)).build()


def _include_path(base_dir: str, name: str) -> str:
    """Go's filepath.Join(dir, name): joined as text (an absolute name stays under dir), then cleaned."""
    return os.path.normpath(f"{base_dir}/{name}" if name else base_dir)


class _Builder:
    """Builds ConfigMaps and ConfigLists from the scanner's tokens, with positions."""

    def __init__(self, text: str, filename: str, base_dir: str, include_chain: tuple[str, ...] = (),
                 env_refs: set[str] | None = None):
        if text.startswith("\ufeff"):
            text = text[1:]
        self.scanner = Scanner(text)
        self.filename = filename
        self.base_dir = base_dir
        self.include_chain = include_chain
        # Environment variables being expanded right now, to stop $A -> $A loops.
        self.env_refs: set[str] = env_refs if env_refs is not None else set()
        self.root = ConfigMap(position=Position(filename, 1, 0))
        self.stack: list[ConfigMap | ConfigList] = [self.root]  # maps and arrays being filled
        self.keys: list[Token] = []  # keys waiting for their value

    def error(self, reason: str, tok: Token | None = None, located: bool = True) -> ConfigError:
        line, col = (tok.line, tok.col) if tok is not None else (0, 0)
        return ConfigError(self.filename, line, col, reason, located=located)

    def build(self) -> ConfigMap:
        previous: Token | None = None
        while True:
            tok = self.scanner.token()
            if tok.kind == EOF:
                if previous is not None and previous.kind == KEY and previous.text != "}":
                    raise self.error(f"config is invalid ({self.filename}:{tok.line}:{tok.col})", tok,
                                     located=False)
                return self.root
            previous = tok
            self.take(tok)

    def take(self, tok: Token) -> None:
        kind = tok.kind
        if kind == KEY:
            self.keys.append(tok)
        elif kind == STRING:
            self.store(tok.text, tok)
        elif kind == INTEGER:
            self.store(self.integer(tok), tok)
        elif kind == BOOL:
            self.store(_BOOLS[tok.text.lower()], tok)
        elif kind == MAP_START:
            self.stack.append(ConfigMap())
        elif kind == ARRAY_START:
            self.stack.append(ConfigList())
        elif kind in (MAP_END, ARRAY_END):
            self.store(self.stack.pop(), tok, fresh=True)
        elif kind == VARIABLE:
            self.store(self.variable(tok), tok)
        elif kind == FLOAT:
            self.store(self.float(tok), tok)
        elif kind == DATETIME:
            try:
                import datetime as _dt  # (only for a datetime value: issue 20)
                value = _dt.datetime.strptime(tok.text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc)
            except ValueError:
                raise self.error(f"expected Zulu formatted DateTime, but got '{tok.text}'", tok,
                                 located=False) from None
            self.store(value, tok)
        elif kind == INCLUDE:
            self.include(tok)
        elif kind == ERROR:
            raise self.error(f"Parse error on line {tok.line}: '{tok.text}'", tok, located=False)
        # COMMENT and TEXT carry nothing

    def store(self, value: Any, tok: Token, fresh: bool = False) -> None:
        """Put a value into the innermost map (under the pending key) or array.

        Like nats-server, a value in a map is placed at its key; a value in an array at itself (a map or an
        array in an array: at its closing bracket)."""
        ctx = self.stack[-1]
        if isinstance(ctx, ConfigList):
            pos = Position(self.filename, tok.line, tok.col)
            if fresh:
                value.position = pos
            ctx.add(value, pos)
            return
        if not self.keys:  # pragma: no cover - the scanner always gives a key first
            raise self.error("value without a key", tok)
        key = self.keys.pop()
        pos = Position(self.filename, key.line, key.col)
        if fresh:
            value.position = pos
        ctx.set(key.text, value, pos)

    def integer(self, tok: Token) -> int:
        text = tok.text
        k = 0
        while k < len(text) and (text[k].isdecimal() or text[k] == "-"):
            k += 1
        digits = text[:k]
        body = digits[1:] if digits.startswith("-") else digits
        if not body or not body.isascii() or not body.isdigit():
            raise self.error(f"expected integer, but got '{text}'", tok, located=False)
        number = int(digits)
        suffix = text[k:].strip().lower()
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise self.error(f"integer '{text}' is out of the range", tok, located=False)
        if suffix not in _SIZE_SUFFIXES:
            # nats-server drops such a key without a word; refuse it instead
            raise self.error(f"invalid size suffix in '{text}'", self.keys[-1] if self.keys else tok)
        value = number * _SIZE_SUFFIXES[suffix]
        if not _INT64_MIN <= value <= _INT64_MAX:  # nats-server wraps around; refuse it instead
            raise self.error(f"integer '{text}' is out of the range", tok, located=False)
        return value

    def float(self, tok: Token) -> float:
        try:
            value = float(tok.text)
        except ValueError:
            raise self.error(f"expected float, but got '{tok.text}'", tok, located=False) from None
        if math.isinf(value):
            raise self.error(f"float '{tok.text}' is out of the range", tok, located=False)
        return value

    # -- variables -----------------------------------------------------------------------------------------------

    def variable(self, tok: Token) -> Any:
        name = tok.text
        try:
            found, value = self.lookup(name)
        except ConfigError as e:
            raise self.error(f"variable reference for '{name}' on line {tok.line} could not be parsed: {e}",
                             tok, located=False) from None
        if not found:
            raise self.error(f"variable reference for '{name}' on line {tok.line} can not be found", tok,
                             located=False)
        return value

    def lookup(self, name: str) -> tuple[bool, Any]:
        if name.startswith(_BCRYPT_PREFIX):
            return True, "$" + name  # an unquoted bcrypt hash, not a reference
        for scope in reversed(self.stack):
            if isinstance(scope, ConfigMap) and name in scope:
                scope.used_vars.add(name)
                return True, scope[name]
        if name in self.env_refs:
            raise ConfigError(self.filename, 0, 0, f"variable reference cycle for '{name}'", located=False)
        if name not in os.environ:
            return False, None
        self.env_refs.add(name)
        try:
            sub = _Builder(f"pk={os.environ[name]}", "", self.base_dir, env_refs=self.env_refs)
            parsed = sub.build()
        finally:
            self.env_refs.discard(name)
        if "pk" not in parsed:
            return False, None
        return True, parsed["pk"]

    # -- include -------------------------------------------------------------------------------------------------

    def include(self, tok: Token) -> None:
        name = tok.text
        path = _include_path(self.base_dir, name)
        if os.path.realpath(path) in self.include_chain:
            # nats-server recurses until it crashes; refuse it instead
            raise self.error(f"include cycle: '{name}' includes itself", tok)
        try:
            included = _parse_file(path, self.include_chain)
        except ConfigError as e:
            if not e.located:  # words only (parse error, missing file...), as nats-server says them
                file, line, col = (e.file, e.line, e.column) if e.line > 0 else (self.filename, tok.line, tok.col)
                raise ConfigError(file, line, col, f"error parsing include file '{name}', {e}",
                                  located=False) from None
            raise
        ctx = self.stack[-1]
        for key, value in included.items():
            pos = included.positions.get(key)
            if isinstance(ctx, ConfigMap):
                ctx.set(key, value, pos)
            else:  # pragma: no cover - the scanner reads include only where a key may be
                ctx.add(value, pos)
        if isinstance(ctx, ConfigMap):
            ctx.used_vars |= included.used_vars
