"""JSON bytes as Go's ``encoding/json`` writes them: the one encoder behind every JSON document the server sends.

Monitoring endpoints (/varz, /connz, ...), ``$SYS`` replies and JetStream API answers all go through ``dumps``.
Go's output differs from a plain JSON encoder only in its escaping: inside strings it writes ``<``, ``>`` and
``&`` as ``\\u003c``, ``\\u003e``, ``\\u0026`` and the line/paragraph separators U+2028/U+2029 as ``\\u2028`` /
``\\u2029``; other control characters are ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t`` or ``\\u00XX`` (lowercase
hex), as msgspec writes them too (Go 1.22 and later, so nats-server 2.15). ``indent`` gives
``json.MarshalIndent(v, "", "  ")``'s layout, ``indent=0`` the compact ``json.Marshal``.

``dumps`` writes what it is given in the order it is given (a dict's insertion order, a msgspec Struct's
field order): the monitor builds its documents in nats-server's field order. Go's struct rules for the
JetStream API (``omitempty``, sorted map keys, base64 byte slices) are applied before, by
``rillet.gocompat.jsoncodec.to_go``.
"""
from __future__ import annotations

from typing import Any

# msgspec's encoder, loaded with the first document (issue 20: a server that has sent no JSON document yet has
# not loaded msgspec, ~1.8 MB with what it imports)
_encode: Any = None
_format: Any = None


def _load() -> None:
    global _encode, _format
    import msgspec
    _format = msgspec.json.format
    _encode = msgspec.json.Encoder().encode


def _go_escape(b: bytes) -> bytes:
    # these bytes only occur inside strings, so replacing them anywhere is safe
    if b"<" in b:
        b = b.replace(b"<", b"\\u003c")
    if b">" in b:
        b = b.replace(b">", b"\\u003e")
    if b"&" in b:
        b = b.replace(b"&", b"\\u0026")
    if b"\xe2\x80" in b:
        b = b.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
    return b


def dumps(obj: Any, indent: int = 0) -> bytes:
    """``obj`` (builtins or msgspec Structs) as Go's ``json.Marshal`` (``indent=0``) or
    ``json.MarshalIndent(v, "", "  ")`` (``indent=2``) writes it."""
    if _encode is None:
        _load()
    try:
        raw = _encode(obj)
    except UnicodeEncodeError:  # text holding bytes that are not UTF-8 (surrogate escapes): see _encode_invalid_utf8
        raw = _encode_invalid_utf8(obj)
    if indent:
        raw = _format(raw, indent=indent)
    return _go_escape(raw)


def _encode_invalid_utf8(obj: Any) -> bytes:
    """Strings that carry bytes that are not UTF-8 (a subject, a client name... decoded with
    ``surrogateescape``) written as nats-server writes them: each such byte as U+FFFD."""
    import msgspec

    def walk(o: Any) -> Any:
        if isinstance(o, str):
            try:
                o.encode("utf-8")
                return o
            except UnicodeEncodeError:
                return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in o)
        if isinstance(o, dict):
            return {walk(k): walk(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [walk(v) for v in o]
        if isinstance(o, msgspec.Struct):
            return walk(msgspec.to_builtins(o))
        return o

    out: bytes = _encode(walk(obj))
    return out


def num(x: float | int) -> float | int:
    """A float64 field: Go prints integral floats without a fraction (2, not 2.0)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e21:
        return int(x)
    return x
