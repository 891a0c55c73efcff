"""The Go-compatible JSON codec of the JetStream API: request bodies decoded, and answers encoded, the way
nats-server's ``encoding/json`` does it. (JetStream's own entry points, which turn a ``GoJSONError`` into the
API's ``INVALID_JSON`` error, are ``rillet.jetstream.api.codec``.)

Decoding (``go_decode``, ``from_dict``, ``parse_json``) is strict like the Go server: unknown fields are
refused, keys match case-insensitively, ``null`` leaves basic fields alone, and several JSON values in one
body are merged. Every failure raises ``GoJSONError`` with Go's message text (syntax errors
with their offset, type errors with the field path, enum and time parse errors). Encoding (``to_go``, and
``go_json`` which hands its result to the server's one Go-style JSON writer, ``rillet.gocompat.gojson.dumps``) writes
struct fields in declaration order, skips ``omitempty`` fields holding their zero value and sorts map keys.

Field types carry their Go type in ``Annotated`` markers (``GoInt``, ``GoTime``, ``GoEnum``, ``GoName``;
the aliases ``Int``, ``Int64``, ``Uint64``, ``Duration``, ``Time``...), from which the codec derives each
field's rules. The structs themselves are in ``rillet.jetstream.configtypes``.
"""
from __future__ import annotations

import base64
import json as _json
import re
from typing import Annotated, Any, Callable, Iterable, Optional, Union, get_args, get_origin, get_type_hints

import msgspec

from rillet.gocompat.gojson import dumps
from rillet.gocompat.goquote import _quote_rune, go_quote
from rillet.gocompat.gotime import GO_ZERO_TIME, GoTimeError, normalize_time


# ---------------------------------------------------------------------------------------------------
# Go string quoting (strconv.Quote) and the JSON scanner errors


def _quote_char(b: int) -> str:
    # How Go's JSON scanner shows the offending byte in "invalid character ..." messages.
    if b == 0x27:
        return "'\\''"
    if b == 0x22:
        return "'\"'"
    return "'" + _quote_rune(chr(b), '"') + "'"


def go_utf8(data: bytes) -> bytes:
    """``data`` with each byte that is not part of valid UTF-8 replaced by U+FFFD, one per byte, as Go's
    JSON decoder reads such bytes in a string (Python's "replace" handler would merge some)."""
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        text = data.decode("utf-8", "surrogateescape")
        return "".join("\ufffd" if "\udc80" <= ch <= "\udcff" else ch for ch in text).encode("utf-8")


class GoJSONError(ValueError):
    """A decode failure; ``str()`` is Go's message (without the "invalid JSON: " prefix)."""


_JSONError = GoJSONError

# Types whose values encode through a function of their own (``register_encoder``): e.g. the JetStream
# API's error object, which writes itself as nats-server's ``ApiError`` JSON.
_ENCODERS: dict[type, Callable[[Any], Any]] = {}


def register_encoder(cls: type, fn: Callable[[Any], Any]) -> None:
    """``to_go`` writes values of ``cls`` (exactly that type or a subclass) as ``fn(value)``."""
    _ENCODERS[cls] = fn


class _Node:
    """A parsed JSON value. k: 'o' object, 'a' array, 's' string, 'n' number, 't'/'f' bool, 'z' null."""

    __slots__ = ("k", "v", "s", "e")

    def __init__(self, k: str, v: Any, s: int, e: int) -> None:
        self.k = k
        self.v = v
        self.s = s
        self.e = e


_WS = b" \t\r\n"
MAX_DEPTH = 10000  # Go's encoding/json nesting limit (objects and arrays)
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESC_OK = frozenset(b'"\\/bfnrtu')


class _Scanner:
    """A JSON reader that fails exactly where, and with the message that, Go's decoder would."""

    def __init__(self, data: bytes) -> None:
        self.b = data
        self.n = len(data)

    def _bad(self, i: int, ctx: str) -> _JSONError:
        # The offending character is shown as a whole UTF-8 rune when it is one, else as the byte.
        b0 = self.b[i]
        ch, ln = None, 1
        if b0 < 0x80:
            ch = chr(b0)
        else:
            k = 2 if 0xC2 <= b0 <= 0xDF else 3 if 0xE0 <= b0 <= 0xEF else 4 if 0xF0 <= b0 <= 0xF4 else 0
            if k:
                try:
                    ch, ln = self.b[i:i + k].decode("utf-8"), k
                except UnicodeDecodeError:
                    pass
        shown = f"'\\x{b0:02x}'" if ch is None else "'" + _quote_rune(ch, "'") + "'"
        return _JSONError(f"invalid character {shown} {ctx} at offset {i + ln}")

    def _bad_escape(self, i: int, ln: int) -> _JSONError:
        raw = self.b[i:i + ln]
        # shown in backquotes unless it holds a backquote, a space of any kind (a tab included), an unprintable
        # rune or invalid UTF-8; then strconv.Quote'd (as Go's JSON decoder shows it)
        try:
            seq = raw.decode("utf-8")
            plain = not any(ch == "`" or ch == "\ufffd" or ch.isspace() or not ch.isprintable() for ch in seq)
        except UnicodeDecodeError:
            plain = False
        shown = f"`{seq}`" if plain else go_quote(raw)
        return _JSONError(f"invalid escape sequence {shown} in string at offset {i + ln}")

    def _eof(self) -> _JSONError:
        return _JSONError("unexpected EOF")

    def ws(self, i: int) -> int:
        b, n = self.b, self.n
        while i < n and b[i] in _WS:
            i += 1
        return i

    def values(self):
        i = self.ws(0)
        while i < self.n:
            node, i = self.value(i)
            yield node
            i = self.ws(i)

    def value(self, i: int) -> tuple[_Node, int]:
        """The JSON value at ``i`` (whitespace before it skipped). Nested objects and arrays are read with
        an explicit stack, not recursion: nesting deeper than Go's limit (MAX_DEPTH) is Go's syntax error
        "exceeded max depth", and anything shallower is read whatever Python's recursion limit."""
        b, n = self.b, self.n
        # open containers: [kind, start, items, key of the value being read (objects)]
        stack: list[list] = []
        while True:
            if i >= n:
                raise self._eof()
            c = b[i]
            if c == 0x7B or c == 0x5B:  # { [
                if len(stack) >= MAX_DEPTH:
                    raise _JSONError(f"exceeded max depth at offset {i + 1}")
                j = self.ws(i + 1)
                if j >= n:
                    raise self._eof()
                if c == 0x7B:
                    if b[j] == 0x7D:
                        node, i = _Node("o", [], i, j + 1), j + 1
                    else:
                        key, j = self._key(j)
                        stack.append(["o", i, [], key])
                        i = j
                        continue
                else:
                    if b[j] == 0x5D:
                        node, i = _Node("a", [], i, j + 1), j + 1
                    else:
                        stack.append(["a", i, [], None])
                        i = j
                        continue
            elif c == 0x22:
                node, i = self.string(i)
            elif c == 0x2D or 0x30 <= c <= 0x39:
                node, i = self.number(i)
            elif c == 0x74:
                node, i = self.literal(i, b"true", "t")
            elif c == 0x66:
                node, i = self.literal(i, b"false", "f")
            elif c == 0x6E:
                node, i = self.literal(i, b"null", "z")
            else:
                raise self._bad(i, "looking for beginning of value")
            # a complete value: it goes into its container, which may then be complete too
            while True:
                if not stack:
                    return node, i
                top = stack[-1]
                obj = top[0] == "o"
                top[2].append((top[3], node) if obj else node)
                i = self.ws(i)
                if i >= n:
                    raise self._eof()
                c = b[i]
                if c == 0x2C:  # ,
                    j = self.ws(i + 1)
                    if obj:
                        top[3], j = self._key(j)
                    i = j
                    break
                if c == (0x7D if obj else 0x5D):
                    stack.pop()
                    node, i = _Node(top[0], top[2], top[1], i + 1), i + 1
                    continue
                raise self._bad(i, "after object key:value pair" if obj else "after array element")

    def _key(self, i: int) -> tuple[str, int]:
        """An object's key and its colon at ``i``; the index of the value after them (whitespace skipped)."""
        b = self.b
        if i >= self.n:
            raise self._eof()
        if b[i] != 0x22:
            raise self._bad(i, "looking for beginning of object key string")
        key, i = self.string(i)
        i = self.ws(i)
        if i >= self.n:
            raise self._eof()
        if b[i] != 0x3A:
            raise self._bad(i, "after object key")
        return key.v, self.ws(i + 1)

    def string(self, start: int) -> tuple[_Node, int]:
        b, n = self.b, self.n
        i = start + 1
        esc = False
        while True:
            if i >= n:
                raise self._eof()
            c = b[i]
            if c == 0x22:
                break
            if c == 0x5C:
                esc = True
                if i + 1 >= n:
                    raise self._eof()
                e = b[i + 1]
                if e not in _ESC_OK:
                    raise self._bad_escape(i, 2)
                if e == 0x75:
                    if i + 6 > n:
                        raise self._eof()
                    if any(b[k] not in _HEX for k in range(i + 2, i + 6)):
                        raise self._bad_escape(i, 6)
                    i += 6
                else:
                    i += 2
                continue
            if c < 0x20:
                raise self._bad(i, "in string")
            i += 1
        raw = b[start + 1:i]
        if not raw.isascii():
            raw = go_utf8(raw)
        if not esc:
            text = raw.decode("utf-8")
        else:
            text = _json.loads('"' + raw.decode("utf-8") + '"')
            if any("\ud800" <= ch <= "\udfff" for ch in text):
                text = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
        return _Node("s", text, start, i + 1), i + 1

    def _digits(self, i: int) -> int:
        """Past the one or more digits a number's fraction or exponent must have at ``i``."""
        b, n = self.b, self.n
        if i >= n:
            raise self._eof()
        if not 0x30 <= b[i] <= 0x39:
            raise self._bad(i, "in numeric literal")
        while i < n and 0x30 <= b[i] <= 0x39:
            i += 1
        return i

    def number(self, start: int) -> tuple[_Node, int]:
        b, n = self.b, self.n
        i = start
        if b[i] == 0x2D:
            i += 1
            if i >= n:
                raise self._eof()
            if not 0x30 <= b[i] <= 0x39:
                raise self._bad(i, "in numeric literal")
        if b[i] == 0x30:
            i += 1
        else:
            while i < n and 0x30 <= b[i] <= 0x39:
                i += 1
        if i < n and b[i] == 0x2E:
            i = self._digits(i + 1)
        if i < n and b[i] in (0x65, 0x45):
            i += 1
            if i < n and b[i] in (0x2B, 0x2D):
                i += 1
            i = self._digits(i)
        return _Node("n", b[start:i].decode("ascii"), start, i), i

    def literal(self, start: int, word: bytes, k: str) -> tuple[_Node, int]:
        b, n = self.b, self.n
        for j in range(1, len(word)):
            i = start + j
            if i >= n:
                raise self._eof()
            if b[i] != word[j]:
                raise self._bad(i, f"in literal {word.decode()} (expecting {_quote_char(word[j])})")
        return _Node(k, None, start, start + len(word)), start + len(word)


# ---------------------------------------------------------------------------------------------------
# Go type markers (used in ``Annotated`` field types)


class GoInt:
    """An integer field: Go type name and range."""

    __slots__ = ("name", "lo", "hi")

    def __init__(self, name: str, bits: int, signed: bool = True) -> None:
        self.name = name
        self.lo = -(1 << (bits - 1)) if signed else 0
        self.hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1


class GoTime:
    """A ``time.Time`` held as RFC3339 text (normalized to Go's RFC3339Nano output form)."""

    name = "time.Time"


class GoEnum:
    """A Go type with its own JSON text form. ``parse(node, raw_bytes)`` returns the Python value."""

    __slots__ = ("name", "parse", "zero")

    def __init__(self, name: str, parse: Callable[[_Node, bytes], str], zero: str) -> None:
        self.name = name
        self.parse = parse
        self.zero = zero


class GoName:
    """Overrides the Go type name shown in decode errors (e.g. ``[]*server.StreamSource``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _enum_exact(values: dict[str, str], fold: bool = False, fmt: str = "can not unmarshal %q"):
    def parse(node: _Node, raw: bytes) -> str:
        key = raw.decode("utf-8", "replace")
        if fold:
            key = key.lower()
        if key in values:
            return values[key]
        if fmt == "can not unmarshal %q":
            raise _JSONError("can not unmarshal " + go_quote(raw))
        raise _JSONError(fmt + raw.decode("utf-8", "replace"))
    return parse


def _q(vals: Iterable[str]) -> dict[str, str]:
    return {f'"{v}"': v for v in vals}


Int = Annotated[int, GoInt("int", 64)]
Int64 = Annotated[int, GoInt("int64", 64)]
Int32 = Annotated[int, GoInt("int32", 32)]
Uint64 = Annotated[int, GoInt("uint64", 64, False)]
Uint16 = Annotated[int, GoInt("uint16", 16, False)]
Duration = Annotated[int, GoInt("time.Duration", 64)]
Time = Annotated[str, GoTime()]
OptTime = Annotated[Optional[str], GoTime()]


# ---------------------------------------------------------------------------------------------------
# Field descriptions derived from the Struct annotations


class _Spec:
    __slots__ = ("kind", "go", "lo", "hi", "enum", "elem", "cls", "nullable")

    def __init__(self, kind: str, go: str, *, lo: int = 0, hi: int = 0, enum: GoEnum | None = None,
                 elem: "_Spec | None" = None, cls: type | None = None, nullable: bool = False) -> None:
        self.kind = kind
        self.go = go
        self.lo = lo
        self.hi = hi
        self.enum = enum
        self.elem = elem
        self.cls = cls
        self.nullable = nullable


class _Field:
    __slots__ = ("name", "spec", "omitempty", "inline", "lname")

    def __init__(self, name: str, spec: _Spec, omitempty: bool, inline: bool) -> None:
        self.name = name
        self.lname = name.lower()
        self.spec = spec
        self.omitempty = omitempty
        self.inline = inline


class _Info:
    __slots__ = ("cls", "fields", "by_name", "by_lname", "go", "flat")

    def __init__(self, cls: type, fields: list[_Field], go: str) -> None:
        self.cls = cls
        self.fields = fields
        self.flat = all(f.spec.kind in ("int", "bool", "str") and not f.inline for f in fields)
        self.by_name = {f.name: f for f in fields}
        self.by_lname: dict[str, _Field] = {}
        for f in fields:
            self.by_lname.setdefault(f.lname, f)
        self.go = go


_INFO: dict[type, _Info] = {}


def _go_struct_name(cls: type) -> str:
    return getattr(cls, "__go_name__", None) or f"server.{cls.__name__}"


def _spec_of(tp: Any) -> _Spec:
    marker = None
    override = None
    if get_origin(tp) is Annotated:
        args = get_args(tp)
        tp = args[0]
        for m in args[1:]:
            if isinstance(m, GoName):
                override = m.name
            elif isinstance(m, (GoInt, GoTime, GoEnum)):
                marker = m
    nullable = False
    if get_origin(tp) is Union:
        args = [a for a in get_args(tp) if a is not type(None)]
        nullable = len(args) != len(get_args(tp))
        tp = args[0]
    if isinstance(marker, GoInt):
        spec = _Spec("int", marker.name, lo=marker.lo, hi=marker.hi)
    elif isinstance(marker, GoTime):
        spec = _Spec("time", "time.Time")
    elif isinstance(marker, GoEnum):
        spec = _Spec("enum", marker.name, enum=marker)
    elif tp is str:
        spec = _Spec("str", "string")
    elif tp is bool:
        spec = _Spec("bool", "bool")
    elif tp is int:
        spec = _Spec("int", "int", lo=-(1 << 63), hi=(1 << 63) - 1)
    elif tp is bytes:
        spec = _Spec("bytes", "[]uint8")
    elif get_origin(tp) is list:
        elem = _spec_of(get_args(tp)[0])
        spec = _Spec("list", "[]" + elem.go, elem=elem)
    elif get_origin(tp) is dict:
        elem = _spec_of(get_args(tp)[1])
        spec = _Spec("map", "map[string]" + elem.go, elem=elem)
    elif isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        spec = _Spec("struct", _go_struct_name(tp), cls=tp)
    else:
        spec = _Spec("any", "interface {}")
    spec.nullable = nullable or spec.kind in ("list", "map")
    if override:
        spec.go = override
    return spec


def _info(cls: type) -> _Info:
    info = _INFO.get(cls)
    if info is None:
        hints = get_type_hints(cls, include_extras=True)
        omit = getattr(cls, "__omitempty__", frozenset())
        inline = getattr(cls, "__inline__", frozenset())
        fields = [_Field(name, _spec_of(hints[name]), name in omit, name in inline)
                  for name in cls.__struct_fields__]
        info = _Info(cls, fields, _go_struct_name(cls))
        _INFO[cls] = info
    return info


# ---------------------------------------------------------------------------------------------------
# Decoding


def _kind_desc(node: _Node) -> str:
    return {"o": "object", "a": "array", "s": "string", "n": "number", "t": "bool", "f": "bool",
            "z": "null"}[node.k]


class _Decoder:
    def __init__(self, data: bytes, top: str, strict: bool = True) -> None:
        self.data = data
        self.top = top
        self.strict = strict

    def type_err(self, desc: str, spec_go: str, path: list) -> _JSONError:
        if not path:
            return _JSONError(f"json: cannot unmarshal {desc} into Go value of type {spec_go}")
        dotted = ".".join(str(p) for p in path)
        if isinstance(path[-1], int):
            return _JSONError(f"json: cannot unmarshal {desc} into {self.top}.{dotted} of type {spec_go}")
        return _JSONError(f"json: cannot unmarshal {desc} into Go struct field {self.top}.{dotted} of type {spec_go}")

    def value(self, spec: _Spec, node: _Node, cur: Any, path: list) -> Any:
        k = node.k
        kind = spec.kind
        if kind == "enum":
            return spec.enum.parse(node, self.data[node.s:node.e])
        if k == "z":
            if spec.nullable:
                return None
            return cur
        if kind == "str":
            if k != "s":
                raise self.type_err(_kind_desc(node), spec.go, path)
            return node.v
        if kind == "int":
            if k != "n":
                raise self.type_err(_kind_desc(node), spec.go, path)
            raw = node.v
            try:
                val = int(raw)
            except ValueError:
                raise self.type_err("number " + raw, spec.go, path) from None
            # (Go parses an unsigned field with ParseUint, which refuses any sign: "-0" too)
            if not spec.lo <= val <= spec.hi or (spec.lo == 0 and raw[0] == "-"):
                raise self.type_err("number " + raw, spec.go, path)
            return val
        if kind == "bool":
            if k == "t":
                return True
            if k == "f":
                return False
            raise self.type_err(_kind_desc(node), spec.go, path)
        if kind == "time":
            if k != "s":
                raise self.type_err(_kind_desc(node), spec.go, path)
            try:
                return normalize_time(node.v)
            except GoTimeError as e:
                raise _JSONError(str(e)) from None
        if kind == "list":
            if k != "a":
                raise self.type_err(_kind_desc(node), spec.go, path)
            elem = spec.elem
            return [self.value(elem, item, _zero(elem), path + [i]) for i, item in enumerate(node.v)]
        if kind == "map":
            if k != "o":
                raise self.type_err(_kind_desc(node), spec.go, path)
            out = dict(cur) if isinstance(cur, dict) else {}
            elem = spec.elem
            for key, item in node.v:
                out[key] = self.value(elem, item, out.get(key, _zero(elem)), path + [key])
            return out
        if kind == "struct":
            if k != "o":
                raise self.type_err(_kind_desc(node), spec.go, path)
            return self.struct(spec.cls, node, cur, path)
        if kind == "bytes":
            if k != "s":
                raise self.type_err(_kind_desc(node), spec.go, path)
            try:
                return base64.b64decode(node.v, validate=True)
            except Exception:
                raise _JSONError("illegal base64 data at input byte 0") from None
        return _plain(node)

    def struct(self, cls: type, node: _Node, cur: Any, path: list) -> Any:
        info = _info(cls)
        vals: dict[str, Any] = {}
        if cur is not None:
            for f in info.fields:
                vals[f.name] = getattr(cur, f.name)
        for key, item in node.v:
            f = info.by_name.get(key)
            if f is None:
                f = info.by_lname.get(key.lower())
            if f is None:
                if not self.strict:
                    continue
                raise _JSONError(f"json: unknown field {go_quote(key)}")
            cv = vals.get(f.name)
            if cv is None and f.name not in vals:
                cv = _default(cls, f)
            vals[f.name] = self.value(f.spec, item, cv, path + [f.name])
        return cls(**vals)


def _zero(spec: _Spec) -> Any:
    k = spec.kind
    if spec.nullable:
        return None
    if k == "str":
        return ""
    if k == "int":
        return 0
    if k == "bool":
        return False
    if k == "time":
        return GO_ZERO_TIME
    if k == "enum":
        return spec.enum.zero
    if k == "struct":
        return None
    return None


def _default(cls: type, f: _Field) -> Any:
    fields = cls.__struct_fields__
    defaults = cls.__struct_defaults__
    idx = fields.index(f.name)
    off = len(fields) - len(defaults)
    if idx < off:
        return None
    d = defaults[idx - off]
    if d is msgspec.NODEFAULT:
        return None
    if type(d).__name__ == "Factory":
        return d.factory()
    return d


def _scalar(node: _Node) -> Any:
    k = node.k
    if k == "n":
        try:
            return int(node.v)
        except ValueError:
            return float(node.v)
    if k == "t":
        return True
    if k == "f":
        return False
    if k == "z":
        return None
    return node.v


def _plain(node: _Node) -> Any:
    """The node as Python builtins (dicts, lists...). Iterative: nesting is bounded by the scanner's
    MAX_DEPTH, not by Python's recursion limit."""
    if node.k not in ("o", "a"):
        return _scalar(node)
    root: Any = {} if node.k == "o" else []
    # (node, its builtin container) still to fill
    todo = [(node, root)]
    while todo:
        nd, out = todo.pop()
        if nd.k == "o":
            for key, v in nd.v:
                if v.k in ("o", "a"):
                    child: Any = {} if v.k == "o" else []
                    todo.append((v, child))
                    out[key] = child
                else:
                    out[key] = _scalar(v)
        else:
            for v in nd.v:
                if v.k in ("o", "a"):
                    child = {} if v.k == "o" else []
                    todo.append((v, child))
                    out.append(child)
                else:
                    out.append(_scalar(v))
    return root


def go_decode(data: bytes | str | None, cls: type, top: str | None = None, *, strict: bool = True) -> Any:
    """Decode a request body into ``cls`` the way nats-server does; raises ``GoJSONError`` on failure.

    An empty body gives the zero value (``cls()``). ``top`` is the Go type name used in messages
    (defaults to the class name; e.g. ``"StreamConfigRequest"``). ``strict=False`` ignores unknown
    fields (Go's plain ``json.Unmarshal``, used for pull requests and with ``strict: false``).
    """
    if data is None:
        data = b""
    if isinstance(data, str):
        data = data.encode()
    info = _info(cls)
    if info.flat and data:
        fast = _fast_flat(info, data)
        if fast is not None:
            return fast
    dec = _Decoder(bytes(data), top or info.go.rsplit(".", 1)[-1], strict)
    cur = None
    for node in _Scanner(dec.data).values():
        if node.k == "z":
            continue
        if node.k != "o":
            raise dec.type_err(_kind_desc(node), info.go, [])
        cur = dec.struct(cls, node, cur, [])
    return cur if cur is not None else cls()


def go_unmarshal(data: bytes | str | None, cls: type) -> Any:
    """``cls`` from ``data`` as Go's plain ``json.Unmarshal`` does it (what nats-server uses for a few
    requests): exactly one JSON value, checked whole before anything is decoded, syntax errors without the
    offset, "unexpected end of JSON input" for a truncated or empty body, unknown fields ignored."""
    if data is None:
        data = b""
    if isinstance(data, str):
        data = data.encode()
    data = bytes(data)
    check_one_value(data)
    return go_decode(data, cls, strict=False)


def unmarshal_plain(data: bytes | str) -> Any:
    """Go's ``json.Unmarshal`` into ``interface{}``: one JSON value as builtins, Go's depth limit, Go's
    errors (``GoJSONError``, a ``ValueError``) instead of Python's (and never a RecursionError)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    data = bytes(data)
    check_one_value(data)
    return parse_json(data)


def check_one_value(data: bytes) -> None:
    """Raises ``GoJSONError`` (Go's ``json.Unmarshal`` text) unless ``data`` is exactly one JSON value."""
    sc = _Scanner(data)
    try:
        i = sc.ws(0)
        if i >= sc.n:
            raise _JSONError("unexpected end of JSON input")
        _, i = sc.value(i)
        i = sc.ws(i)
        if i < sc.n:
            raise sc._bad(i, "after top-level value")
    except GoJSONError as e:
        text = str(e)
        if text == "unexpected EOF":
            text = "unexpected end of JSON input"
        raise GoJSONError(re.sub(r" at offset \d+$", "", text)) from None


_json_decode = msgspec.json.decode


def _fast_flat(info: "_Info", data: bytes) -> Any:
    # Common small requests (pull NEXT, stream info, names...): plain JSON with exact keys and values of
    # the right type decode the same with msgspec; anything else goes the exact (slow) way.
    try:
        d = _json_decode(data)
    except Exception:
        return None
    if type(d) is not dict:
        return None
    by_name = info.by_name
    for k, v in d.items():
        f = by_name.get(k)
        if f is None:
            return None
        spec = f.spec
        kind = spec.kind
        if kind == "int":
            if type(v) is not int or not spec.lo <= v <= spec.hi:
                return None
        elif kind == "bool":
            if type(v) is not bool:
                return None
        elif type(v) is not str:
            return None
    try:
        return info.cls(**d)
    except Exception:
        return None


def parse_json(data: bytes | str | None) -> Any:
    """Plain JSON (dicts/lists) with Go's syntax error messages (``GoJSONError``); ``None`` if empty."""
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode()
    out = None
    for node in _Scanner(bytes(data)).values():
        out = _plain(node)
    return out


def from_dict(d: dict, cls: type, top: str | None = None) -> Any:
    """Convert already-parsed JSON (e.g. ``nats.js.api.StreamConfig(...).as_dict()``) into ``cls``."""
    return go_decode(_json.dumps(d, default=_json_default).encode(), cls, top)


def _json_default(o: Any) -> Any:
    if hasattr(o, "value"):
        return o.value
    raise TypeError(f"not JSON serializable: {o!r}")


# ---------------------------------------------------------------------------------------------------
# Encoding


def _is_empty(v: Any, spec: _Spec) -> bool:
    if v is None or v is False:
        return True
    if spec.kind == "enum":
        return v == spec.enum.zero
    if spec.kind == "struct":
        return False
    if spec.kind == "time" and not spec.nullable:
        return False
    if isinstance(v, (int, str, list, dict, bytes, tuple)):
        return not v
    return False


def to_go(obj: Any) -> Any:
    """Builtin (dict/list/...) form of ``obj`` with Go's field order and omitempty/embedding rules."""
    if isinstance(obj, msgspec.Struct):
        info = _info(type(obj))
        out: dict[str, Any] = {}
        for f in info.fields:
            v = getattr(obj, f.name)
            if f.inline:
                if v is not None:
                    out.update(to_go(v))
                continue
            if f.omitempty and _is_empty(v, f.spec):
                continue
            out[f.name] = to_go(v)
        return out
    for cls, fn in _ENCODERS.items():
        if isinstance(obj, cls):
            return fn(obj)
    if isinstance(obj, dict):
        return {k: to_go(obj[k]) for k in sorted(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_go(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(obj)).decode()
    return obj


def go_json(obj: Any) -> bytes:
    """``obj`` (builtins or Structs) as nats-server's ``json.Marshal`` writes it: ``to_go`` then ``rillet.gocompat.gojson``."""
    return dumps(to_go(obj))
