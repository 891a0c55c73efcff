"""A client's CONNECT (and INFO) JSON, decoded with the standard library's ``json`` module, loaded with the first
client connection, not when the server starts. ``rillet.server.client`` reaches it through its
``_connect_json()``.

(issue 20: msgspec decoded it before, and loading msgspec with the first client cost a server ~2 MB of resident
memory, ~1.8 MB with what it imports, for one small document per connection; JetStream's API still uses msgspec.)
What is accepted and refused is what msgspec's typed decoding into the same fields accepted and refused, which
tests/test_connect_json.py checks against msgspec itself on generated documents:

* a field of the wrong type is a ``ValidationError`` (``"verbose": 1``, ``"user": null``, ``"protocol": 1.0``,
  ``"protocol": true``), as is a document that is not an object; fields it does not know are skipped, whatever
  their value (a number out of range too);
* what is not JSON is a ``DecodeError``: ``NaN``/``Infinity``, control characters inside strings, trailing data,
  and escaped UTF-16 surrogates that do not pair (the standard library would keep them in the string);
* ``decode(arg)`` without a type (the CONNECT map given to authentication, a client's INFO) refuses numbers
  that a float or an int cannot hold (``1e400``, more than 4300 digits) with a ``ValidationError``, as msgspec.

A document that is not UTF-8 is a ``DecodeError`` (msgspec raised UnicodeDecodeError when the bad bytes were
inside a string; ``Client.proto_connect`` makes a CONNECT UTF-8 first, as nats-server reads it).
"""
from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ConnectOpts", "decode", "DecodeError", "ValidationError", "PARSE_ERRORS", "redact"]


class DecodeError(ValueError):
    """Not a JSON document."""


class ValidationError(DecodeError):
    """JSON, but not what was asked for (a field of the wrong type, a number out of range). A DecodeError, as
    msgspec's is: what catches DecodeError catches it too."""


PARSE_ERRORS = (DecodeError, ValidationError)

# the fields and nats-server's defaults for those a client leaves out (verbose and pedantic are on); "pass" is
# a Python keyword: the attribute is ``password``
_FIELDS: dict[str, tuple[str, type, Any]] = {
    "verbose": ("verbose", bool, True),
    "pedantic": ("pedantic", bool, True),
    "tls_required": ("tls_required", bool, False),
    "auth_token": ("auth_token", str, ""),
    "user": ("user", str, ""),
    "pass": ("password", str, ""),
    "name": ("name", str, ""),
    "lang": ("lang", str, ""),
    "version": ("version", str, ""),
    "protocol": ("protocol", int, 0),
    "echo": ("echo", bool, True),
    "headers": ("headers", bool, False),
    "no_responders": ("no_responders", bool, False),
    "sig": ("sig", str, ""),
    "jwt": ("jwt", str, ""),
    "nkey": ("nkey", str, ""),
}


class ConnectOpts:
    """The CONNECT options a client sent (each field nats-server reads), its defaults until then."""

    __slots__ = tuple(attr for attr, _, _ in _FIELDS.values())
    verbose: bool
    pedantic: bool
    tls_required: bool
    auth_token: str
    user: str
    password: str
    name: str
    lang: str
    version: str
    protocol: int
    echo: bool
    headers: bool
    no_responders: bool
    sig: str
    jwt: str
    nkey: str

    def __init__(self) -> None:
        for attr, _, default in _FIELDS.values():
            setattr(self, attr, default)

    def to_builtins(self) -> dict[str, Any]:
        """The fields that differ from their defaults, by their CONNECT names ("pass"), in field order: the map
        authentication reads (what ``msgspec.to_builtins`` gave of the struct this replaces)."""
        return {key: getattr(self, attr) for key, (attr, _, default) in _FIELDS.items()
                if getattr(self, attr) != default}

    def __repr__(self) -> str:
        changed = ", ".join(f"{attr}={getattr(self, attr)!r}" for attr, _, default in _FIELDS.values()
                            if getattr(self, attr) != default)
        return f"ConnectOpts({changed})"

    def __eq__(self, other: object) -> bool:
        return type(other) is ConnectOpts and all(getattr(self, a) == getattr(other, a) for a in self.__slots__)


class _OutOfRange:
    """A number of a field that is skipped may be anything; one that is read may not be this."""


_OUT_OF_RANGE = _OutOfRange()
_INF = float("inf")


def _no_constant(name: str) -> Any:
    raise DecodeError(f"JSON is malformed: {name} is not JSON")


def _int_skipped(text: str) -> Any:
    try:
        return int(text)
    except ValueError:  # (more digits than int() converts: sys.get_int_max_str_digits)
        return _OUT_OF_RANGE


def _float_skipped(text: str) -> Any:
    f = float(text)
    return _OUT_OF_RANGE if f == _INF or f == -_INF else f


def _int_read(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValidationError("Integer value out of range") from None


def _float_read(text: str) -> float:
    f = float(text)
    if f == _INF or f == -_INF:
        raise ValidationError("Number out of range")
    return f


class _Pairs(list):  # type: ignore[type-arg]
    """An object's members in the order they came, duplicates kept (msgspec checks each one it reads)."""


# typed: the out-of-range numbers of fields that are skipped do not matter; untyped: every number is read
_TYPED = json.JSONDecoder(parse_constant=_no_constant, parse_int=_int_skipped, parse_float=_float_skipped,
                          object_pairs_hook=_Pairs)
_UNTYPED = json.JSONDecoder(parse_constant=_no_constant, parse_int=_int_read, parse_float=_float_read)

# an escaped UTF-16 surrogate (paired or not): only then can a decoded string hold a lone one, and then the
# document is read again, every member kept (a duplicate key's first value too), numbers as their text
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_EVERY_STRING = json.JSONDecoder(parse_constant=str, parse_int=str, parse_float=str, object_pairs_hook=_Pairs)


def _lone_surrogate(obj: Any) -> bool:
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(obj, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):  # (a _Pairs object: (key, value) tuples)
        return any(_lone_surrogate(v) for v in obj)
    return False


def _load(arg: bytes | str, decoder: json.JSONDecoder) -> Any:
    if isinstance(arg, (bytes, bytearray, memoryview)):
        try:
            text = bytes(arg).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"JSON is malformed: not UTF-8 (byte {e.start})") from None
    else:
        text = arg
    try:
        obj = decoder.decode(text)
    except json.JSONDecodeError as e:
        raise DecodeError(f"JSON is malformed: {e}") from None
    if _SURROGATE_ESCAPE.search(text) and _lone_surrogate(_EVERY_STRING.decode(text)):
        raise DecodeError("JSON is malformed: invalid utf-16 surrogate pair")
    return obj


def decode(arg: bytes | str, type: Any = None) -> Any:
    """The JSON document ``arg``; with ``type=ConnectOpts``, a ConnectOpts of its fields. DecodeError: not JSON;
    ValidationError: not what was asked for."""
    if type is None:
        return _load(arg, _UNTYPED)
    if type is not ConnectOpts:
        raise TypeError(f"decode: no type {type!r}")
    doc = _load(arg, _TYPED)
    if doc.__class__ is not _Pairs:
        raise ValidationError(f"Expected `object`, got `{_json_kind(doc)}`")
    co = ConnectOpts()
    for key, value in doc:
        field = _FIELDS.get(key)
        if field is None:
            continue
        attr, want, _ = field
        if value is _OUT_OF_RANGE:
            raise ValidationError(f"Number out of range - at `$.{key}`")
        if value.__class__ is not want:  # (exactly: a bool is not an int here, nor an int a bool)
            raise ValidationError(f"Expected `{want.__name__}`, got `{_json_kind(value)}` - at `$.{key}`")
        setattr(co, attr, value)
    return co


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "object",
            _Pairs: "object"}.get(v.__class__, "float")


def redact(arg: bytes) -> str:
    """A CONNECT's JSON for the trace, its secrets replaced by ``[REDACTED]`` (written as msgspec writes it: the
    server traces, so msgspec is loaded here)."""
    import msgspec
    try:
        d = msgspec.json.decode(arg)
    except msgspec.DecodeError:
        return arg.decode(errors="replace")
    if isinstance(d, dict):
        for k in ("pass", "auth_token", "sig", "jwt"):
            if k in d:
                d[k] = "[REDACTED]"
        return msgspec.json.encode(d).decode()
    return arg.decode(errors="replace")
