"""The scanner of the NATS configuration language: a state machine with the states of nats-server's lexer,
turning text into tokens (Token) for rillet.config.parser, which builds the maps from them and
documents the language.
"""
from __future__ import annotations

import binascii
from collections import deque
from typing import Callable, Optional


_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}

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
