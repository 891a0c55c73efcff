"""Go's ``%q`` (``strconv.Quote``): how nats-server quotes subjects and names in its error texts and logs;
and ``%T``, the Go type names its config errors print."""
from __future__ import annotations

from typing import Any


def go_type(v: Any) -> str:
    """The Go type name nats-server's messages print (``%T``) for a parsed config value."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, list):
        return "[]interface {}"
    return type(v).__name__


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
