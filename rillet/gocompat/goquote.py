"""Go's ``%q`` (``strconv.Quote``): how nats-server quotes subjects and names in its error texts and logs;
and ``%T``, the Go type names its config errors print."""
from __future__ import annotations

from typing import Any


# the kinds of value the config parser produces, in the order they are tested (bool before int: a bool is an int)
VALUE_KINDS: tuple[type, ...] = (bool, int, float, str, dict, list)
_GO_TYPES = {bool: "bool", int: "int64", float: "float64", str: "string", dict: "map[string]interface {}",
             list: "[]interface {}"}


_GO_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_GO_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))


def go_bool(text: str) -> bool | None:
    """Go's ``strconv.ParseBool``: the boolean ``text`` spells, None when it spells none."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    return None


def value_kind(v: Any) -> type | None:
    """Which of ``VALUE_KINDS`` a parsed config value is (None: another type)."""
    for t in VALUE_KINDS:
        if isinstance(v, t):
            return t
    return None


def go_type(v: Any) -> str:
    """The Go type name nats-server's messages print (``%T``) for a parsed config value."""
    kind = value_kind(v)
    return _GO_TYPES[kind] if kind is not None else type(v).__name__


def go_quote(data: bytes | str) -> str:
    """Go's ``%q`` / ``strconv.Quote`` of ``data``."""
    if isinstance(data, str):
        text = data
        try:  # (text decoded with surrogateescape: its escapes are the bytes that were not UTF-8)
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = text.encode("utf-8", "surrogatepass")
    out = ['"']
    i = 0
    n = len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            ch = chr(b)
            i += 1
        else:
            # decode one UTF-8 sequence
            ln = 2 if b >> 5 == 0x6 else 3 if b >> 4 == 0xE else 4 if b >> 3 == 0x1E else 0
            try:
                if not ln:
                    raise UnicodeDecodeError("utf-8", b"", 0, 1, "")
                ch = data[i:i + ln].decode("utf-8")
                i += ln
            except UnicodeDecodeError:
                out.append(f"\\x{b:02x}")
                i += 1
                continue
        out.append(_quote_rune(ch, '"'))
    out.append('"')
    return "".join(out)


_SHORT_ESC = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _quote_rune(ch: str, quote: str) -> str:
    if ch == quote or ch == "\\":
        return "\\" + ch
    if ch.isprintable():
        return ch
    if ch in _SHORT_ESC:
        return _SHORT_ESC[ch]
    o = ord(ch)
    if o < 0x20 or o == 0x7F:
        return f"\\x{o:02x}"
    if o < 0x10000:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"
