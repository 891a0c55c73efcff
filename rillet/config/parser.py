"""Parser for the NATS configuration language (the format nats-server reads with ``-c``).

Supported, following what nats-server accepts:

* ``key: value``, ``key = value`` and ``key value``; keys may be quoted.
* maps ``{ ... }`` and arrays ``[ ... ]``; entries separated by ``,``, ``;`` (maps) or new
  lines; trailing separators are fine. The whole file may be wrapped in ``{ }`` (JSON style).
* ``#`` and ``//`` comments.
* ``include file`` / ``include 'file'`` / ``include "file"``, relative to the including
  file's directory; the included top-level keys are merged into the current map.
* ``$NAME`` references: the nearest earlier definition of ``NAME`` in an enclosing map,
  else the environment variable ``NAME`` (whose text is itself parsed as a value).
  ``$2a$...`` is left alone as a bcrypt hash.
* integers with size suffixes: ``k``/``m``/``g``/``t``/``p``/``e`` are powers of 1000,
  ``kb``/``ki``/``kib`` (and so on) are powers of 1024, like nats-server 2.x.
* floats, booleans (``true/false/yes/no/on/off``, any case), ISO-8601 Zulu datetimes.
* strings: ``"double"`` (escapes ``\\t \\n \\r \\" \\\\ \\xHH``), ``'single'`` (raw),
  unquoted (``host: 127.0.0.1``, ``url: nats://h:4222``), and block strings
  ``( ... )`` closed by a ``)`` alone on its own line.

Durations are not a syntax of their own: they are strings (``"2m"``) interpreted later.
Note that an unquoted ``2m`` is the integer 2000000, as in nats-server.

Deliberate differences from nats-server: a number directly followed by ``]`` is a number
(nats-server rejects ``[1]``), an unknown size suffix such as ``1kbi`` is an error, and
include cycles are reported instead of recursing forever. Like nats-server, a stray ``}``
at the top level is ignored.
"""
from __future__ import annotations

import datetime as _dt
import os
from typing import Any

from .errors import ConfigError, Position
from .values import ConfigList, ConfigMap

__all__ = ["parse_file", "parse_string", "ConfigError", "ConfigMap", "ConfigList"]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_SIZE_SUFFIXES = {"": 1}
for _i, _letter in enumerate("kmgtpe", start=1):
    _SIZE_SUFFIXES[_letter] = 1000 ** _i
    for _tail in ("b", "i", "ib"):
        _SIZE_SUFFIXES[_letter + _tail] = 1024 ** _i

_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}

_SPACE = " \t"
_NEWLINE = "\n\r"
# Characters that end an unquoted string or a number (for numbers nats-server leaves out
# "]"; we include it, see the module doc).
_VALUE_END = set(_SPACE + _NEWLINE + ";,]}")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_BCRYPT_PREFIX = "2a$"


def parse_file(path: str | os.PathLike) -> ConfigMap:
    """Parse the configuration file at ``path``; raise ``ConfigError`` on any problem."""
    return _parse_file(os.fspath(path), include_chain=())


def parse_string(text: str, filename: str = "<string>") -> ConfigMap:
    """Parse configuration ``text``; ``filename`` is used in errors and to resolve includes."""
    return _Parser(text, filename, base_dir=_base_dir(filename)).parse_document()


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
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(path, 0, 0, _go_open_error(path, e)) from None
    real = os.path.realpath(path)
    parser = _Parser(text, path, base_dir=_base_dir(path), include_chain=include_chain + (real,))
    return parser.parse_document()


class _Parser:
    """Recursive-descent parser over the whole text (config files are small)."""

    def __init__(
        self,
        text: str,
        filename: str,
        base_dir: str,
        include_chain: tuple[str, ...] = (),
        env_refs: set[str] | None = None,
    ):
        if text.startswith("\ufeff"):
            text = text[1:]
        self.text = text
        self.n = len(text)
        self.i = 0
        self.filename = filename
        self.base_dir = base_dir
        self.include_chain = include_chain
        # Environment variables being expanded right now, to stop $A -> $A loops.
        self.env_refs: set[str] = env_refs if env_refs is not None else set()
        # Enclosing maps, innermost last: the scopes for $variable lookups.
        self.scopes: list[ConfigMap] = []
        self._line_starts = [0]
        for idx, ch in enumerate(text):
            if ch == "\n":
                self._line_starts.append(idx + 1)

    # -- positions and errors -------------------------------------------------

    def position(self, offset: int | None = None) -> Position:
        off = self.i if offset is None else offset
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:  # last line start <= off
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= off:
                lo = mid
            else:
                hi = mid - 1
        return Position(self.filename, lo + 1, off - self._line_starts[lo] + 1)

    def error(self, reason: str, offset: int | None = None) -> ConfigError:
        pos = self.position(offset)
        return ConfigError(pos.file, pos.line, pos.column, reason)

    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.text[j] if j < self.n else ""

    def describe(self, ch: str) -> str:
        if ch == "":
            return "end of file"
        if ch == "\n" or ch == "\r":
            return "new line"
        return repr(ch)

    # -- skipping -------------------------------------------------------------

    def at_comment(self) -> bool:
        ch = self.peek()
        return ch == "#" or (ch == "/" and self.peek(1) == "/")

    def skip_comment(self) -> None:
        while self.i < self.n and self.text[self.i] not in _NEWLINE:
            self.i += 1

    def skip_spaces(self) -> None:
        while self.i < self.n and self.text[self.i] in _SPACE:
            self.i += 1

    def skip_blank(self) -> None:
        """Skip all white space (new lines included) and comments."""
        while self.i < self.n:
            ch = self.text[self.i]
            if ch.isspace():
                self.i += 1
            elif self.at_comment():
                self.skip_comment()
            else:
                return

    # -- document and maps ----------------------------------------------------

    def parse_document(self) -> ConfigMap:
        root = ConfigMap(position=Position(self.filename, 1, 1))
        self.scopes.append(root)
        self.parse_entries(root, closing_offset=None)
        return root

    def parse_entries(self, m: ConfigMap, closing_offset: int | None) -> None:
        """Read ``key value`` entries into ``m``.

        ``closing_offset`` is where the ``{`` of this map is, or None for the top level
        (which ends at end of file and may itself be wrapped in braces).
        """
        top = closing_offset is None
        depth = 0  # top level only: how many wrapping "{" are open
        while True:
            self.skip_blank()
            ch = self.peek()
            if ch == "":
                if not top:
                    raise self.error(
                        f"unexpected end of file: the map opened at "
                        f"{self.position(closing_offset)} is not closed")
                if depth:
                    raise self.error("unexpected end of file: missing '}'")
                return
            if ch == "}":
                self.i += 1
                if not top:
                    return
                # nats-server ignores a stray '}' at the top level; so do we.
                depth = max(depth - 1, 0)
                continue
            if top and ch == "{":
                self.i += 1
                depth += 1
                continue
            if ch in ":=":
                raise self.error(f"unexpected key separator {ch!r}")
            if ch == ",":
                raise self.error("unexpected ','")
            if ch == "]":
                raise self.error("unexpected ']'")
            self.parse_entry(m)
            # What may follow a value: spaces, a comment, a new line, ',' or ';', or the '}'.
            self.skip_spaces()
            ch = self.peek()
            if ch in (",", ";"):
                self.i += 1
            elif ch == "" or ch in _NEWLINE or self.at_comment():
                pass
            elif ch == "}":
                pass
            else:
                raise self.error(
                    f"expected a new line, ',' or a comment after a value, got {self.describe(ch)}")

    def parse_entry(self, m: ConfigMap) -> None:
        key_offset = self.i
        key, quoted = self.parse_key()
        key_pos = self.position(key_offset)
        if not quoted and key.lower() == "include" and self.peek() in _SPACE + _NEWLINE:
            self.parse_include(m)
            return
        # Between key and value: white space (even new lines), then an optional ':' or '='.
        while self.i < self.n and self.text[self.i].isspace():
            self.i += 1
        if self.peek() == "":
            raise self.error(f"missing value for key {key!r}")
        if self.peek() in ":=":
            self.i += 1
        value = self.parse_value()
        m.set(key, value, key_pos)

    def parse_key(self) -> tuple[str, bool]:
        ch = self.peek()
        if ch in ("'", '"'):
            start = self.i + 1
            end = self.text.find(ch, start)
            if end < 0:
                raise self.error("unexpected end of file in quoted key")
            self.i = end + 1
            return self.text[start:end], True
        start = self.i
        while self.i < self.n:
            c = self.text[self.i]
            if c.isspace() or c in ":=":
                break
            self.i += 1
        return self.text[start:self.i], False

    # -- include --------------------------------------------------------------

    def parse_include(self, m: ConfigMap) -> None:
        self.skip_spaces()
        start = self.i
        ch = self.peek()
        if ch in ("'", '"'):
            end = self.text.find(ch, self.i + 1)
            if end < 0:
                raise self.error("unexpected end of file in quoted include")
            name = self.text[self.i + 1:end]
            self.i = end + 1
        else:
            bad = {"[": "an array", "{": "a map", "(": "a block", "\\": "an escape sequence",
                   "\n": "a new line", "\r": "a new line", "": "end of file"}
            if ch in bad or ch.isdigit() or ch == "-":
                what = bad.get(ch, "a number")
                raise self.error(f"expected an include file name, found {what}")
            while self.i < self.n and self.text[self.i] not in _SPACE + _NEWLINE + ";}'":
                self.i += 1
            name = self.text[start:self.i]
            if self.peek() == "'":
                self.i += 1
        path = os.path.join(self.base_dir, name)
        real = os.path.realpath(path)
        if real in self.include_chain:
            raise self.error(f"include cycle: {name!r} includes itself", start)
        try:
            included = _parse_file(path, self.include_chain)
        except ConfigError as e:
            if e.line <= 0:  # could not open it: point at the include line
                raise self.error(f"error parsing include file '{name}', {e.reason}", start) from None
            raise
        for key, value in included.items():
            m.set(key, value, included.positions.get(key))
        m.used_vars |= included.used_vars

    # -- values ---------------------------------------------------------------

    def parse_value(self) -> Any:
        self.skip_spaces()
        ch = self.peek()
        start = self.i
        if ch == "[":
            self.i += 1
            return self.parse_array(start)
        if ch == "{":
            self.i += 1
            m = ConfigMap(position=self.position(start))
            self.scopes.append(m)
            try:
                self.parse_entries(m, closing_offset=start)
            finally:
                self.scopes.pop()
            return m
        if ch == "'":
            end = self.text.find("'", self.i + 1)
            if end < 0:
                raise self.error("unexpected end of file in single-quoted string")
            self.i = end + 1
            return self.text[start + 1:end]
        if ch == '"':
            return self.parse_double_quoted()
        if ch == "(":
            return self.parse_block_string()
        if ch == "-":
            return self.parse_negative_number()
        if ch.isdigit():
            return self.parse_number_like()
        if ch == ".":
            raise self.error("floats must start with a digit, not '.'")
        if ch in _NEWLINE:
            raise self.error("expected a value but found a new line")
        return self.parse_unquoted(start)

    def parse_array(self, open_offset: int) -> ConfigList:
        arr = ConfigList(position=self.position(open_offset))
        while True:
            self.skip_blank()
            ch = self.peek()
            if ch == "]":
                self.i += 1
                return arr
            if ch == "":
                raise self.error(
                    f"unexpected end of file: the array opened at "
                    f"{self.position(open_offset)} is not closed")
            if ch == ",":
                raise self.error("unexpected ',' in array")
            value_pos = self.position()
            arr.add(self.parse_value(), value_pos)
            self.skip_spaces()
            ch = self.peek()
            if ch == ",":
                self.i += 1
            elif ch in _NEWLINE or self.at_comment():
                pass
            elif ch == "]":
                self.i += 1
                return arr
            elif ch == "":
                continue  # reported above with the array's position
            else:
                raise self.error(f"expected ',' or ']' in array, got {self.describe(ch)}")

    def parse_double_quoted(self) -> str:
        open_offset = self.i
        self.i += 1
        out = bytearray()
        while True:
            if self.i >= self.n:
                raise self.error("unexpected end of file in double-quoted string", open_offset)
            ch = self.text[self.i]
            if ch == '"':
                self.i += 1
                return out.decode("utf-8", errors="surrogateescape")
            if ch == "\\":
                self.read_escape(out)
            else:
                out += ch.encode("utf-8", errors="surrogateescape")
                self.i += 1

    def read_escape(self, out: bytearray) -> None:
        """Decode the escape at ``self.i`` (a backslash) into ``out``."""
        esc = self.peek(1)
        if esc in _ESCAPES:
            out += _ESCAPES[esc].encode()
            self.i += 2
            return
        if esc == "x":
            digits = self.text[self.i + 2:self.i + 4]
            if len(digits) == 2 and all(c in "0123456789abcdefABCDEF" for c in digits):
                out.append(int(digits, 16))
                self.i += 4
                return
            raise self.error(f"expected two hexadecimal digits after '\\x', got {digits!r}")
        raise self.error(
            f"invalid escape character {self.describe(esc)}; allowed are "
            "\\xXX, \\t, \\n, \\r, \\\" and \\\\")

    def parse_block_string(self) -> str:
        """``(`` ... ``)`` where the closing ``)`` stands alone on its line."""
        open_offset = self.i
        content_start = self.i + 1
        j = content_start
        while True:
            j = self.text.find(")", j)
            if j < 0:
                raise self.error("unexpected end of file in block string", open_offset)
            if self.text[j - 1] == "\n" and (j + 1 >= self.n or self.text[j + 1] == "\n"):
                self.i = j + 1
                return self.text[content_start:j]
            j += 1

    def parse_unquoted(self, start: int) -> Any:
        """An unquoted string, boolean or ``$variable`` starting at ``start``."""
        out: bytearray | None = None
        seg = start
        while self.i < self.n:
            ch = self.text[self.i]
            if ch in _VALUE_END:
                break
            if ch == "'":
                # nats-server quirk: a quote ends an unquoted string and is dropped.
                text = self.finish_string(out, seg)
                self.i += 1
                return text
            if ch == "\\":
                if out is None:
                    out = bytearray()
                out += self.text[seg:self.i].encode("utf-8", errors="surrogateescape")
                self.read_escape(out)
                seg = self.i
                continue
            self.i += 1
        text = self.finish_string(out, seg)
        if out is not None:
            return text
        lowered = text.lower()
        if lowered in _BOOLS:
            return _BOOLS[lowered]
        if text.startswith("$"):
            return self.lookup_variable(text[1:], start)
        return text

    def finish_string(self, out: bytearray | None, seg: int) -> str:
        if out is None:
            return self.text[seg:self.i]
        out += self.text[seg:self.i].encode("utf-8", errors="surrogateescape")
        return out.decode("utf-8", errors="surrogateescape")

    # -- numbers --------------------------------------------------------------

    def read_digits(self) -> None:
        while self.i < self.n and self.text[self.i].isdigit():
            self.i += 1

    def at_number_end(self) -> bool:
        return self.i >= self.n or self.text[self.i] in _VALUE_END

    def parse_number_like(self) -> Any:
        """Integer, sized integer, float, datetime, IP address or a string starting with a digit."""
        start = self.i
        self.read_digits()
        ch = self.peek()
        if ch == "-":
            if self.i - start != 4:
                raise self.error("dates must be in full ISO-8601 Zulu form (YYYY-MM-DDTHH:MM:SSZ)",
                                 start)
            return self.parse_datetime(start)
        if ch == ".":
            return self.parse_float_or_ip(start)
        if ch and ch.lower() in "kmgtpe":
            self.i += 1
            while self.peek() in ("b", "B", "i", "I") and self.peek():
                self.i += 1
            if self.at_number_end():
                return self.make_int(start)
            return self.parse_unquoted(start)
        if self.at_number_end():
            return self.make_int(start)
        return self.parse_unquoted(start)

    def parse_negative_number(self) -> Any:
        start = self.i
        self.i += 1
        if not self.peek().isdigit():
            if self.peek() == ".":
                raise self.error("floats must start with a digit, not '.'")
            raise self.error(f"expected a digit after '-', got {self.describe(self.peek())}")
        self.read_digits()
        ch = self.peek()
        if ch == ".":
            return self.parse_float_or_ip(start)
        if ch and ch.lower() in "kmgtpe":
            self.i += 1
            while self.peek() and self.peek() in "bBiI":
                self.i += 1
        return self.make_int(start)

    def make_int(self, start: int) -> int:
        token = self.text[start:self.i]
        k = 1 if token.startswith("-") else 0
        while k < len(token) and token[k].isdigit():
            k += 1
        suffix = token[k:].lower()
        if suffix not in _SIZE_SUFFIXES:
            raise self.error(f"invalid size suffix in {token!r}", start)
        value = int(token[:k]) * _SIZE_SUFFIXES[suffix]
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise self.error(f"integer {token!r} is out of range", start)
        return value

    def parse_float_or_ip(self, start: int) -> Any:
        self.i += 1  # the '.'
        if not self.peek().isdigit():
            raise self.error(
                f"floats must have a digit after the '.', got {self.describe(self.peek())}")
        self.read_digits()
        if self.peek() == ".":
            # More dots: an address such as 127.0.0.1 or 0.0.0.0:4222, kept as a string.
            while self.i < self.n and (self.text[self.i].isdigit() or self.text[self.i] in ".:-"):
                self.i += 1
            return self.text[start:self.i]
        return float(self.text[start:self.i])

    def parse_datetime(self, start: int) -> _dt.datetime:
        end = start + len("2006-01-02T15:04:05Z")
        token = self.text[start:end]
        shape = "dddd-dd-ddTdd:dd:ddZ"
        for want, got in zip(shape, token):
            if (want == "d" and not got.isdigit()) or (want != "d" and want != got):
                raise self.error(f"expected a Zulu datetime like 2006-01-02T15:04:05Z, got {token!r}",
                                 start)
        if len(token) < len(shape):
            raise self.error(f"expected a Zulu datetime like 2006-01-02T15:04:05Z, got {token!r}",
                             start)
        try:
            value = _dt.datetime.strptime(token, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            raise self.error(f"invalid datetime {token!r}", start) from None
        self.i = end
        return value.replace(tzinfo=_dt.timezone.utc)

    # -- variables ------------------------------------------------------------

    def lookup_variable(self, name: str, offset: int) -> Any:
        if name.startswith(_BCRYPT_PREFIX):
            return "$" + name  # an unquoted bcrypt hash, not a reference
        for scope in reversed(self.scopes):
            if name in scope:
                scope.used_vars.add(name)
                return scope[name]
        if name in self.env_refs:
            raise self.error(f"variable reference cycle for {name!r}", offset)
        if name not in os.environ:
            raise self.error(f"variable reference for {name!r} can not be found", offset)
        self.env_refs.add(name)
        try:
            sub = _Parser("pk=" + os.environ[name], f"<environment ${name}>", self.base_dir,
                          env_refs=self.env_refs)
            try:
                parsed = sub.parse_document()
            except ConfigError as e:
                raise self.error(
                    f"variable reference for {name!r} could not be parsed: {e.reason}",
                    offset) from None
        finally:
            self.env_refs.discard(name)
        if "pk" not in parsed:
            raise self.error(f"variable reference for {name!r} could not be parsed", offset)
        return parsed["pk"]

