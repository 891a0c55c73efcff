"""Value formatting the way nats-server's JSON shows it.

nats-server is written in Go and its monitoring JSON carries Go's conventions: time stamps are
RFC 3339 with up to nine fractional digits and durations Go's ``Duration.String()`` text (both from
``rillet.gocompat.gotime``, shared with the rest of the server). What only the monitor does lives here: the
/connz ``rtt`` cut to the microsecond below 1ms, the /varz ``uptime`` in a days/years style, query
booleans and integers with Go's ``strconv`` spellings and errors. Tools that read /varz and /connz
(Prometheus exporter, nats-top, surveyor) parse these shapes, so they are reproduced here exactly. The
JSON documents themselves are written by ``rillet.gocompat.gojson.dumps``, the server's one Go-style encoder.
"""
from __future__ import annotations

from typing import Any

from rillet.gocompat.gojson import num  # noqa: F401 (the monitor's float fields: here with the other formatters)
from rillet.gocompat.goquote import go_bool, go_quote
from rillet.gocompat.gotime import NS, format_duration


def put_set(d: dict[str, Any], obj: Any, *names: str) -> None:
    """``d[name] = obj.<name>`` for each of ``names`` whose value is set (not empty, zero or False), in that
    order: a Go struct's ``omitempty`` fields copied into the JSON document."""
    for name in names:
        v = getattr(obj, name)
        if v:
            d[name] = v


def set_lists(**named: Any) -> dict[str, list[Any]]:
    """The named collections that are not empty, each as a list, in the order given: a JSON object of Go
    ``omitempty`` slices (a deny or allow block)."""
    return {name: list(v) for name, v in named.items() if v}


def rtt_string(rtt_seconds: float) -> tuple[str, int]:
    """A connection RTT as /connz shows it (microsecond resolution below 1ms) and its nanoseconds."""
    ns = int(rtt_seconds * NS) if rtt_seconds > 0 else 0
    if 1000 < ns < 1_000_000:
        ns -= ns % 1000
    return format_duration(ns), ns


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


class QueryError(Exception):
    """A bad query parameter: HTTP 400 with nats-server's plain-text message."""


def parse_bool(query: Any, name: str) -> bool:
    s = query.get(name, "")
    if s == "":
        return False
    b = go_bool(s)
    if b is not None:
        return b
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
