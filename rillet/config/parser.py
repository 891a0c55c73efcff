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

import binascii
import datetime as _dt
import math
import os
from collections import deque
from typing import Any, Callable, Optional

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
_BCRYPT_PREFIX = "2a$"

# -- characters --------------------------------------------------------------------------------------------------

# The end of the input reads as NUL, and so does a NUL in the input (it ends what is being read, as in
# nats-server); only the first one moves the position.
_END = "\x00"
# Go's unicode.IsSpace (Python's str.isspace also takes \x1c-\x1f).
_SPACES = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                    "\u200a\u2028\u2029\u202f\u205f\u3000")
_BLANK = frozenset(" \t")  # white space inside a line
_NL = frozenset("\n\r")
_SEPARATORS = frozenset(":=")
_SIZE_LETTERS = frozenset("kKmMgGtTpPeE")
_SIZE_TAILS = frozenset("bBiI")
# What ends an unquoted string.
_STRING_END = frozenset("\n\r\x00;,]} \t")
# What ends an integer (note: not "]", as in nats-server).
_INT_END = frozenset("\n\r\x00};, \t")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_DATE_SHAPE = "00-00T00:00:00Z"  # what follows the year; 0 = any digit


def _blen(s: str) -> int:
    """Length in bytes, as nats-server counts positions."""
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogateescape"))


def _show(ch: str) -> str:
    """A character inside a message: a new line is shown escaped, anything else as is."""
    return "\\n" if ch == "\n" else ch


# -- tokens ------------------------------------------------------------------------------------------------------

ERROR, EOF, KEY, TEXT, STRING, BOOL, INTEGER, FLOAT, DATETIME = range(9)
ARRAY_START, ARRAY_END, MAP_START, MAP_END, COMMENT, VARIABLE, INCLUDE = range(9, 16)


class Token:
    __slots__ = ("kind", "text", "line", "col")

    def __init__(self, kind: int, text: str, line: int, col: int):
        self.kind = kind
        self.text = text
        self.line = line
        self.col = col

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Token({self.kind}, {self.text!r}, {self.line}, {self.col})"


State = Callable[[], Optional["State"]]


class Scanner:
    """Turns configuration text into tokens, one state at a time (pull with ``token()``).

    ``at`` is the read offset, ``begin`` where the pending token starts, ``line`` the current line and
    ``line_mark`` the offset of the new line that began it (0 on the first line). A token's column is its
    distance in bytes from the ``line_mark`` in force when the token began; an error's column is the read
    offset's distance from the current ``line_mark``.
    """

    def __init__(self, text: str):
        self.text = text
        self.n = len(text)
        self.at = 0
        self.begin = 0
        self.step = 0  # how far the last read() moved: 0 at the end of the input, else 1
        self.line = 1
        self.line_mark = 0
        self.token_mark = 0
        self.pending: deque[Token] = deque()
        self.returns: list[State] = []
        self.parts: list[str] = []  # decoded pieces of a string with escapes
        self.string_state: State = self.unquoted
        self.state: Optional[State] = self.top

    # -- reading -------------------------------------------------------------------------------------------------

    def token(self) -> Token:
        while not self.pending:
            if self.state is None:  # pragma: no cover - the last token is always EOF or ERROR
                return Token(EOF, "", self.line, 0)
            self.state = self.state()
        return self.pending.popleft()

    def read(self) -> str:
        if self.at >= self.n:
            self.step = 0
            return _END
        ch = self.text[self.at]
        if ch == "\n":
            self.line += 1
            self.line_mark = self.at
        self.step = 1
        self.at += 1
        return ch

    def unread(self) -> None:
        self.at -= self.step
        if self.at < self.n and self.text[self.at] == "\n":
            self.line -= 1

    def look(self) -> str:
        ch = self.read()
        self.unread()
        return ch

    def drop(self) -> None:
        """Forget what was read since the pending token began."""
        self.begin = self.at
        self.token_mark = self.line_mark

    def skip_to(self, state: State) -> State:
        self.drop()
        return state

    def call(self, then: State, state: State) -> State:
        self.returns.append(then)
        return state

    def back(self) -> Optional[State]:
        if not self.returns:
            return self.fail("BUG in lexer: no states to pop.")
        return self.returns.pop()

    def emit(self, kind: int) -> None:
        text = "".join(self.parts) + self.text[self.begin:self.at] if self.parts else self.text[self.begin:self.at]
        self._push(kind, text)

    def emit_string(self) -> None:
        if self.parts:
            text = "".join(self.parts) + self.text[self.begin:self.at]
            self.parts = []
            if any("\udc80" <= c <= "\udcff" for c in text):  # \xHH bytes: let them form UTF-8 characters
                text = text.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
        else:
            text = self.text[self.begin:self.at]
        self._push(STRING, text)

    def _push(self, kind: int, text: str) -> None:
        col = _blen(self.text[self.token_mark:self.at]) - _blen(text)
        self.pending.append(Token(kind, text, self.line, col))
        self.begin = self.at
        self.token_mark = self.line_mark

    def fail(self, message: str) -> None:
        col = _blen(self.text[self.line_mark:self.at])
        self.pending.append(Token(ERROR, message, self.line, col))
        return None

    def end_of_input(self) -> None:
        """The input ends (or holds a NUL) where a token could start or in a quoted string."""
        if self.at > self.begin:
            return self.fail("Unexpected EOF.")
        self.emit(EOF)
        return None

    def comment_or_slash(self, then: State) -> bool:
        """After a '/': true (and a comment started, returning to ``then``) if it is '//'."""
        if self.read() == "/":
            self.returns.append(then)
            return True
        self.unread()
        return False

    # -- the top level and a top-level { } wrapper ---------------------------------------------------------------

    def top(self) -> Optional[State]:
        ch = self.read()
        if ch in _SPACES:
            return self.skip_to(self.top)
        if ch == "{":
            return self.call(self.top, self.skip_to(self.block))
        if ch == "#":
            return self.call(self.top, self.comment_start)
        if ch == "/" and self.comment_or_slash(self.top):
            return self.comment_start
        if ch in ("/", _END):
            return self.end_of_input()
        self.unread()
        return self.call(self.after_top_value, self.key_start)

    def after_top_value(self) -> Optional[State]:
        ch = self.read()
        if ch == "#":
            return self.call(self.top, self.comment_start)
        if ch == "/":
            if self.comment_or_slash(self.top):
                return self.comment_start
            return self.after_top_value  # a lone '/' is passed over like a space
        if ch in _BLANK:
            return self.after_top_value
        if ch in _NL or ch in "\x00;,}":
            return self.skip_to(self.top)
        return self.fail("Expected a top-level value to end with a new line, comment or EOF, "
                         f"but got '{_show(ch)}' instead.")

    def block(self) -> Optional[State]:
        ch = self.read()
        if ch in _SPACES:
            return self.skip_to(self.block)
        if ch == "{":
            return self.call(self.block_close, self.skip_to(self.block))
        if ch == "}":
            self.drop()
            return self.back()
        if ch == "#":
            return self.call(self.block, self.comment_start)
        if ch == "/" and self.comment_or_slash(self.block):
            return self.comment_start
        if ch in ("/", _END):
            return self.end_of_input()
        self.unread()
        return self.call(self.after_block_value, self.key_start)

    def after_block_value(self) -> Optional[State]:
        ch = self.read()
        if ch == "#":
            return self.call(self.after_block_value, self.comment_start)
        if ch == "/":
            if self.comment_or_slash(self.after_block_value):
                return self.comment_start
            return self.after_block_value
        if ch in _BLANK:
            return self.after_block_value
        if ch in _NL or ch in ";,":
            return self.skip_to(self.block)
        if ch == "}":
            self.unread()
            return self.block_close
        return self.fail("Expected a block-level value to end with a new line, comment or EOF, "
                         f"but got '{_show(ch)}' instead.")

    def block_close(self) -> Optional[State]:
        ch = self.read()
        if ch == "#":
            return self.call(self.block, self.comment_start)
        if ch == "/":
            if self.comment_or_slash(self.block):
                return self.comment_start
            return self.block_close
        if ch in _NL or ch in _BLANK:
            return self.block_close
        if ch in ";,":
            return self.skip_to(self.block)
        if ch == "}":
            self.drop()
            return self.back()
        return self.fail(f"Expected a block-level to end with a '}}', but got '{_show(ch)}' instead.")

    # -- keys ----------------------------------------------------------------------------------------------------

    def key_start(self) -> Optional[State]:
        ch = self.look()
        if ch in _SEPARATORS:
            return self.fail(f"Unexpected key separator '{ch}'")
        if ch in _SPACES:
            self.read()
            return self.skip_to(self.key_start)
        if ch == '"' or ch == "'":
            self.read()
            return self.skip_to(self.quoted_key(ch, self.key_end, None))
        self.drop()
        self.read()
        return self.key

    def quoted_key(self, quote: str, then: State, eof_message: Optional[str]) -> State:
        def state() -> Optional[State]:
            ch = self.look()
            if ch == quote:
                self.emit(KEY)
                self.read()
                return self.skip_to(then)
            if ch == _END:
                if eof_message:
                    return self.fail(eof_message)
                return self.end_of_input()
            self.read()
            return state
        return state

    def key(self) -> Optional[State]:
        ch = self.look()
        if ch in _SPACES:
            return self.keyword_or_key(self.key_end, None)
        if ch in _SEPARATORS or ch == _END:
            self.emit(KEY)
            return self.key_end
        self.read()
        return self.key

    def keyword_or_key(self, then: State, include_returns: Optional[State]) -> State:
        if self.text[self.begin:self.at].lower() == "include":
            self.drop()
            if include_returns is not None:
                self.returns.append(include_returns)
            return self.include_start
        self.emit(KEY)
        return then

    def key_end(self) -> Optional[State]:
        ch = self.read()
        if ch in _SPACES:
            return self.skip_to(self.key_end)
        if ch in _SEPARATORS:
            return self.skip_to(self.value)
        if ch == _END:
            self.emit(EOF)
            return None
        self.unread()
        return self.value

    # -- include -------------------------------------------------------------------------------------------------

    def include_start(self) -> Optional[State]:
        ch = self.read()
        if ch in _BLANK:
            return self.skip_to(self.include_start)
        self.unread()
        return self.include

    def include(self) -> Optional[State]:
        ch = self.read()
        if ch == "'" or ch == '"':
            self.drop()
            return self.include_quoted(ch)
        found = {"[": "start of an array", "{": "start of a map", "(": "start of a block",
                 "-": "start of a number", "\\": "escape sequence", "\n": "new line", "\r": "new line"}.get(ch)
        if found is None and ch.isdecimal():
            found = "start of a number"
        if found is not None:
            return self.fail(f"Expected include value but found {found}")
        self.unread()
        return self.include_bare

    def include_quoted(self, quote: str) -> State:
        def state() -> Optional[State]:
            ch = self.read()
            if ch == quote:
                self.unread()
                self.emit(INCLUDE)
                self.read()
                self.drop()
                return self.back()
            if ch == _END:
                kind = "quoted" if quote == "'" else "double quoted"
                return self.fail(f"Unexpected EOF in {kind} include")
            return state
        return state

    def include_bare(self) -> Optional[State]:
        ch = self.read()
        if ch in _NL or ch in _BLANK or ch in "\x00;}":
            self.unread()
            self.emit(INCLUDE)
            return self.back()
        if ch == "'":
            self.unread()
            self.emit(INCLUDE)
            self.read()
            self.drop()
            return self.back()
        return self.include_bare

    # -- values --------------------------------------------------------------------------------------------------

    def value(self) -> Optional[State]:
        ch = self.read()
        if ch in _BLANK:
            return self.skip_to(self.value)
        if ch == "[":
            self.drop()
            self.emit(ARRAY_START)
            return self.array_item
        if ch == "{":
            self.drop()
            self.emit(MAP_START)
            return self.map_key_start
        if ch == "'":
            self.drop()
            return self.single_quoted
        if ch == '"':
            self.drop()
            self.string_state = self.double_quoted
            return self.double_quoted
        if ch == "-":
            return self.negative_start
        if ch == "(":
            self.drop()
            return self.block_string
        if ch.isdecimal():
            self.unread()
            return self.number_start
        if ch == ".":
            return self.fail("Floats must start with a digit")
        if ch in _NL:
            return self.fail("Expected value but found new line")
        self.unread()
        self.string_state = self.unquoted
        return self.unquoted

    def array_item(self) -> Optional[State]:
        ch = self.read()
        if ch in _SPACES:
            return self.skip_to(self.array_item)
        if ch == "#":
            return self.call(self.array_item, self.comment_start)
        if ch == "/" and self.comment_or_slash(self.array_item):
            return self.comment_start
        if ch == "/" or ch == ",":
            return self.fail("Unexpected array value terminator ','.")
        if ch == "]":
            return self.array_close
        self.unread()
        return self.call(self.after_array_item, self.value)

    def after_array_item(self) -> Optional[State]:
        ch = self.read()
        if ch in _BLANK:
            return self.skip_to(self.after_array_item)
        if ch == "#":
            return self.call(self.after_array_item, self.comment_start)
        if ch == "/" and self.comment_or_slash(self.after_array_item):
            return self.comment_start
        if ch == "/" or ch == "," or ch in _NL:
            return self.skip_to(self.array_item)
        if ch == "]":
            return self.array_close
        return self.fail('Expected an array value terminator "," or an array terminator "]", '
                         f"but got '{_show(ch)}' instead.")

    def array_close(self) -> Optional[State]:
        self.drop()
        self.emit(ARRAY_END)
        return self.back()

    def map_key_start(self) -> Optional[State]:
        ch = self.look()
        if ch in _SEPARATORS:
            return self.fail(f"Unexpected key separator '{ch}'.")
        if ch == "]":
            return self.fail("Unexpected array end ']' processing map.")
        if ch in _SPACES:
            self.read()
            return self.skip_to(self.map_key_start)
        if ch == "}":
            self.read()
            return self.skip_to(self.map_close)
        if ch == "#":
            self.read()
            return self.call(self.map_key_start, self.comment_start)
        if ch == "/":
            self.read()
            if self.comment_or_slash(self.map_key_start):
                return self.comment_start
            # not a comment: the '/' is left out of the key (as nats-server does)
        elif ch == "'" or ch == '"':
            self.read()
            kind = "quoted" if ch == "'" else "double quoted"
            return self.skip_to(self.quoted_key(ch, self.map_key_end,
                                                f"Unexpected EOF processing {kind} map key."))
        elif ch == _END:
            return self.fail("Unexpected EOF processing map.")
        self.drop()
        self.read()
        return self.map_key

    def map_key(self) -> Optional[State]:
        ch = self.look()
        if ch == _END:
            return self.fail("Unexpected EOF processing map key.")
        if ch in _SPACES:
            return self.keyword_or_key(self.map_key_end, self.after_map_value)
        if ch in _SEPARATORS:
            self.emit(KEY)
            return self.map_key_end
        self.read()
        return self.map_key

    def map_key_end(self) -> Optional[State]:
        ch = self.read()
        if ch in _SPACES:
            return self.skip_to(self.map_key_end)
        if ch in _SEPARATORS:
            return self.skip_to(self.map_value)
        self.unread()
        return self.map_value

    def map_value(self) -> Optional[State]:
        ch = self.read()
        if ch in _SPACES:
            return self.skip_to(self.map_value)
        if ch == ",":
            return self.fail('Unexpected map value terminator ",".')
        if ch == "}":
            return self.skip_to(self.map_close)
        self.unread()
        return self.call(self.after_map_value, self.value)

    def after_map_value(self) -> Optional[State]:
        ch = self.read()
        if ch in _BLANK:
            return self.skip_to(self.after_map_value)
        if ch == "#":
            return self.call(self.after_map_value, self.comment_start)
        if ch == "/" and self.comment_or_slash(self.after_map_value):
            return self.comment_start
        if ch == "/" or ch in ";," or ch in _NL:
            return self.skip_to(self.map_key_start)
        if ch == "}":
            return self.skip_to(self.map_close)
        return self.fail('Expected a map value terminator "," or a map terminator "}", '
                         f"but got '{_show(ch)}' instead.")

    def map_close(self) -> Optional[State]:
        self.drop()
        self.emit(MAP_END)
        return self.back()

    # -- strings -------------------------------------------------------------------------------------------------

    def single_quoted(self) -> Optional[State]:
        ch = self.read()
        if ch == "'":
            self.unread()
            self.emit(STRING)
            self.read()
            self.drop()
            return self.back()
        if ch == _END:
            return self.end_of_input()
        return self.single_quoted

    def double_quoted(self) -> Optional[State]:
        ch = self.read()
        if ch == "\\":
            self.keep_part(1)
            return self.escape
        if ch == '"':
            self.unread()
            self.emit_string()
            self.read()
            self.drop()
            return self.back()
        if ch == _END:
            return self.end_of_input()
        return self.double_quoted

    def unquoted(self) -> Optional[State]:
        ch = self.read()
        if ch == "\\":
            self.keep_part(1)
            return self.escape
        if ch in _STRING_END:
            self.unread()
            if self.parts:
                self.emit_string()
            elif self.text[self.begin:self.at].lower() in _BOOLS:
                self.emit(BOOL)
            elif self.begin < self.n and self.text[self.begin] == "$":
                self.begin += 1
                self.emit(VARIABLE)
            else:
                self.emit_string()
            return self.back()
        if ch == "'":  # a quote ends an unquoted string and is dropped
            self.unread()
            self.emit_string()
            self.read()
            self.drop()
            return self.back()
        return self.unquoted

    def keep_part(self, skip: int) -> None:
        self.parts.append(self.text[self.begin:self.at - skip])
        self.begin = self.at

    def add_part(self, decoded: str) -> State:
        self.parts.append(decoded)
        self.begin = self.at
        return self.string_state

    def escape(self) -> Optional[State]:
        ch = self.read()
        if ch == "x":
            return self.hex_escape
        if ch in _ESCAPES:
            return self.add_part(_ESCAPES[ch])
        return self.fail(f"Invalid escape character '{_show(ch)}'. Only the following escape characters are "
                         "allowed: \\xXX, \\t, \\n, \\r, \\\", \\\\.")

    def hex_escape(self) -> Optional[State]:
        for _ in range(2):
            if self.read() in _NL:
                return self.fail("Expected two hexadecimal digits after '\\x', but hit end of line")
        # the last two bytes read (Go slices bytes: after a two-byte character that is the character alone)
        digits = self.text[max(self.at - 2, 0):self.at].encode("utf-8", "surrogateescape")[-2:].decode(
            "utf-8", "surrogateescape")
        try:
            raw = binascii.unhexlify(digits.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            return self.fail(f"Expected two hexadecimal digits after '\\x', but got '{digits}'")
        return self.add_part(raw.decode("utf-8", "surrogateescape"))

    def block_string(self) -> Optional[State]:
        ch = self.read()
        if ch == ")":
            # the ')' closes the block only alone on its line: a new line before and a new line (or the end) after
            self.unread()
            self.unread()
            if self.read() != "\n":
                self.read()
                return self.block_string
            self.read()
            if self.read() in ("\n", _END):
                self.unread()
                self.unread()
                self.emit(STRING)
                self.read()
                self.drop()
                return self.back()
            self.unread()
            return self.block_string
        if ch == _END:
            return self.fail("Unexpected EOF processing block.")
        return self.block_string

    # -- numbers, dates, addresses -------------------------------------------------------------------------------

    def number_start(self) -> Optional[State]:
        ch = self.read()
        if not ch.isdecimal():
            if ch == ".":
                return self.fail("Floats must start with a digit, not '.'.")
            return self.fail(f"Expected a digit but got '{_show(ch)}'.")
        return self.number

    def number(self) -> Optional[State]:
        ch = self.read()
        if ch == "-":
            if _blen(self.text[self.begin:self.at]) != 5:
                return self.fail("All ISO8601 dates must be in full Zulu form.")
            return self.date
        if ch.isdecimal():
            return self.number
        if ch == ".":
            return self.float_start
        if ch in _SIZE_LETTERS:
            return self.size_suffix
        if ch not in _INT_END:  # not a number after all: a string that starts with digits
            self.string_state = self.unquoted
            return self.unquoted
        self.unread()
        self.emit(INTEGER)
        return self.back()

    def size_suffix(self) -> Optional[State]:
        ch = self.read()
        if ch in _SIZE_TAILS:
            return self.size_suffix
        self.unread()
        if ch in _INT_END:  # anything else (a digit too: "0K1abc") makes it a string
            self.emit(INTEGER)
            return self.back()
        self.string_state = self.unquoted
        return self.unquoted

    def date(self) -> Optional[State]:
        for want in _DATE_SHAPE:
            ch = self.read()
            if want == "0":
                if not ch.isdecimal():
                    return self.fail(f"Expected digit in ISO8601 datetime, but found '{_show(ch)}' instead.")
            elif ch != want:
                return self.fail(f"Expected '{want}' in ISO8601 datetime, but found '{_show(ch)}' instead.")
        self.emit(DATETIME)
        return self.back()

    def negative_start(self) -> Optional[State]:
        ch = self.read()
        if not ch.isdecimal():
            if ch == ".":
                return self.fail("Floats must start with a digit, not '.'.")
            return self.fail(f"Expected a digit but got '{_show(ch)}'.")
        return self.negative

    def negative(self) -> Optional[State]:
        ch = self.read()
        if ch.isdecimal():
            return self.negative
        if ch == ".":
            return self.float_start
        if ch in _SIZE_LETTERS:
            return self.size_suffix
        self.unread()
        self.emit(INTEGER)
        return self.back()

    def float_start(self) -> Optional[State]:
        ch = self.read()
        if not ch.isdecimal():
            return self.fail(f"Floats must have a digit after the '.', but got '{_show(ch)}' instead.")
        return self.fraction

    def fraction(self) -> Optional[State]:
        ch = self.read()
        if ch.isdecimal():
            return self.fraction
        if ch == ".":  # a second dot: an address such as 127.0.0.1:4222
            return self.address
        self.unread()
        self.emit(FLOAT)
        return self.back()

    def address(self) -> Optional[State]:
        ch = self.read()
        if ch.isdecimal() or ch in ".:-":
            return self.address
        self.unread()
        self.emit(STRING)
        return self.back()

    # -- comments ------------------------------------------------------------------------------------------------

    def comment_start(self) -> Optional[State]:
        self.drop()
        self.emit(COMMENT)
        return self.comment

    def comment(self) -> Optional[State]:
        # read up to the end of the line in one go (no new line is crossed, so no line bookkeeping)
        j = self.at
        text, n = self.text, self.n
        while j < n and text[j] not in "\n\r\x00":
            j += 1
        self.at = j
        self.emit(TEXT)
        return self.back()


# -- building the maps -------------------------------------------------------------------------------------------


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
