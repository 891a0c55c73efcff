"""Value formatting the way nats-server's JSON shows it.

nats-server is written in Go and its monitoring JSON carries Go's conventions: time stamps are
RFC 3339 with up to nine fractional digits, durations are either integer nanoseconds or Go's
``Duration.String()`` text ("1.5ms", "619µs", "1h2m3s"), uptimes use a days/years style, query
booleans accept Go's ``strconv.ParseBool`` spellings, and the pretty printer escapes ``<``, ``>``
and ``&`` inside strings. Tools that read /varz and /connz (Prometheus exporter, nats-top, surveyor)
parse these shapes, so they are reproduced here exactly.
"""
from __future__ import annotations

from rillet.goquote import go_quote
import time
from typing import Any

import msgspec

NS = 1_000_000_000

# Go's time.Time{} (the zero value) as it appears in JSON.
ZERO_TIME = "0001-01-01T00:00:00Z"


def ns_of(t: float) -> int:
    """A ``time.time()`` float as integer nanoseconds, kept to the microsecond (floats hold no more)."""
    return round(t * 1_000_000) * 1000


def go_time(ns: int | None, utc: bool = True) -> str:
    """RFC 3339 with nanoseconds, trailing zeros of the fraction dropped; ``Z`` for a zero offset."""
    if not ns:
        return ZERO_TIME
    sec, frac = divmod(ns, NS)
    tm = time.gmtime(sec) if utc else time.localtime(sec)
    out = time.strftime("%Y-%m-%dT%H:%M:%S", tm)
    if frac:
        out += "." + f"{frac:09d}".rstrip("0")
    off = 0 if utc else (tm.tm_gmtoff or 0)
    if off == 0:
        return out + "Z"
    sign = "+" if off > 0 else "-"
    off = abs(off) // 60
    return f"{out}{sign}{off // 60:02d}:{off % 60:02d}"


def go_time_f(t: float, utc: bool = True) -> str:
    return go_time(ns_of(t) if t else 0, utc)


def _frac(v: int, unit: int) -> str:
    """``v / unit`` as Go prints it: integer part, then the fraction with trailing zeros dropped."""
    whole, rest = divmod(v, unit)
    if not rest:
        return str(whole)
    width = len(str(unit)) - 1
    return f"{whole}." + f"{rest:0{width}d}".rstrip("0")


def go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()``."""
    if ns == 0:
        return "0s"
    neg = ns < 0
    u = -ns if neg else ns
    if u < NS:
        if u < 1000:
            s = f"{u}ns"
        elif u < 1_000_000:
            s = _frac(u, 1000) + "µs"
        else:
            s = _frac(u, 1_000_000) + "ms"
    else:
        secs_total, sub = divmod(u, NS)
        h, rem = divmod(secs_total, 3600)
        m, sec = divmod(rem, 60)
        s = _frac(sec * NS + sub, NS) + "s"
        if h or m:
            s = f"{m}m" + s
        if h:
            s = f"{h}h" + s
    return "-" + s if neg else s


def rtt_string(rtt_seconds: float) -> tuple[str, int]:
    """A connection RTT as /connz shows it (microsecond resolution below 1ms) and its nanoseconds."""
    ns = int(rtt_seconds * NS) if rtt_seconds > 0 else 0
    if 1000 < ns < 1_000_000:
        ns -= ns % 1000
    return go_duration(ns), ns


def uptime(seconds: float) -> str:
    """nats-server's uptime text: whole seconds, with minutes, hours, days and years when non-zero."""
    tsecs = int(seconds) if seconds > 0 else 0
    tmins, thrs = tsecs // 60, tsecs // 3600
    tdays = thrs // 24
    tyrs = tdays // 365
    if tyrs:
        return f"{tyrs}y{tdays % 365}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if tdays:
        return f"{tdays}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if thrs:
        return f"{thrs}h{tmins % 60}m{tsecs % 60}s"
    if tmins:
        return f"{tmins}m{tsecs % 60}s"
    return f"{tsecs}s"


def secs_to_ns(seconds: float) -> int:
    """A duration option (float seconds in Options) as Go's integer nanoseconds."""
    return int(round(seconds * NS))


def num(x: float | int) -> float | int:
    """A float64 field: Go prints integral floats without a fraction (2, not 2.0)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e21:
        return int(x)
    return x


class QueryError(Exception):
    """A bad query parameter: HTTP 400 with nats-server's plain-text message."""


_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse_bool(query: Any, name: str) -> bool:
    s = query.get(name, "")
    if s == "":
        return False
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise QueryError(f"Error decoding boolean for '{name}': strconv.ParseBool: parsing {go_quote(s)}: invalid syntax")


def parse_int(query: Any, name: str) -> int:
    s = query.get(name, "")
    if s == "":
        return 0
    v = _go_atoi(s)
    if v is None:
        raise QueryError(f"Error decoding int for '{name}': strconv.Atoi: parsing {go_quote(s)}: invalid syntax")
    if not -(1 << 63) <= v < (1 << 63):
        raise QueryError(f"Error decoding int for '{name}': strconv.Atoi: parsing {go_quote(s)}: value out of range")
    return v


def parse_uint(query: Any, name: str) -> int:
    s = query.get(name, "")
    if s == "":
        return 0
    if not s.isascii() or not s.isdigit():
        raise QueryError(f"Error decoding uint64 for '{name}': strconv.ParseUint: parsing {go_quote(s)}: "
                         "invalid syntax")
    v = int(s)
    if v >= 1 << 64:
        raise QueryError(f"Error decoding uint64 for '{name}': strconv.ParseUint: parsing {go_quote(s)}: "
                         "value out of range")
    return v


def _go_atoi(s: str) -> int | None:
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body or not body.isascii() or not body.isdigit():
        return None
    return int(s)


_encode = msgspec.json.encode
_format = msgspec.json.format


def _escape_html(b: bytes) -> bytes:
    if b"<" in b:
        b = b.replace(b"<", b"\\u003c")
    if b">" in b:
        b = b.replace(b">", b"\\u003e")
    if b"&" in b:
        b = b.replace(b"&", b"\\u0026")
    if b"\xe2\x80\xa8" in b:
        b = b.replace(b"\xe2\x80\xa8", b"\\u2028")
    if b"\xe2\x80\xa9" in b:
        b = b.replace(b"\xe2\x80\xa9", b"\\u2029")
    return b


def dumps(obj: Any, indent: int = 2) -> bytes:
    """JSON like Go's ``json.MarshalIndent(v, "", "  ")`` (``indent=0``: compact like ``json.Marshal``)."""
    raw = _encode(obj)
    if indent:
        raw = _format(raw, indent=indent)
    return _escape_html(raw)
