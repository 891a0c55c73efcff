"""Go's time text: ``time.Duration.String()`` and ``time.RFC3339Nano``, formatted and parsed.

nats-server writes durations and times in Go's formats (in API errors, advisories, monitoring JSON, message
headers) and clients parse them, so Rillet writes them with exactly one implementation of each, here:

* ``format_duration(ns)``: Go's ``Duration.String()``: "0s", "1ns", "1.5µs", "1.5ms", "59.999s", "1m30s",
  "1h0m0s" (the largest unit first, trailing zeros of the fraction trimmed, µs written with U+00B5).
  ``format_seconds`` is the same for a float of seconds.
* ``format_time(ns, offset)``: Go's ``Time.Format(time.RFC3339Nano)``; ``local_offset`` and ``zone_offset``
  give the offset for the machine's zone or a ``tzinfo``; ``unix_ns`` turns a ``time.time()`` float into
  nanoseconds.
* ``parse_go_duration``: Go's ``time.ParseDuration`` (config values, JetStream durations given as text), in seconds.
* ``parse_time``: Go's ``time.Parse(time.RFC3339, ...)`` with Go's error messages (``GoTimeError``);
  ``time_ns``, ``normalize_time`` and ``to_utc_time`` build on it.

Formats that differ from these on purpose (the /varz ``uptime`` "1d2h3m4s", the /connz ``rtt`` cut to the
microsecond) are the monitor's, in ``rillet.gocompat.monitorfmt``.
"""
from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datetime as _dt

NS = 1_000_000_000

# ---------------------------------------------------------------------------------------------------
# Durations: Go's time.Duration.String()


def _frac(value: int, unit: int) -> str:
    """``value / unit`` as Go prints it: the integer part, then the fraction without trailing zeros."""
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    width = len(str(unit)) - 1
    return f"{whole}." + f"{rest:0{width}d}".rstrip("0")


def format_duration(ns: int) -> str:
    """Go's ``time.Duration.String()`` of ``ns`` nanoseconds."""
    ns = int(ns)
    if ns == 0:
        return "0s"
    u = -ns if ns < 0 else ns
    if u < NS:
        if u < 1_000:
            out = f"{u}ns"
        elif u < 1_000_000:
            out = _frac(u, 1_000) + "\u00b5s"
        else:
            out = _frac(u, 1_000_000) + "ms"
    else:
        secs, sub = divmod(u, NS)
        hours, secs = divmod(secs, 3600)
        mins, secs = divmod(secs, 60)
        out = _frac(secs * NS + sub, NS) + "s"
        if hours or mins:
            out = f"{mins}m" + out
        if hours:
            out = f"{hours}h" + out
    return "-" + out if ns < 0 else out


def format_seconds(seconds: float) -> str:
    """``format_duration`` of a duration held as float seconds (rounded to the nanosecond)."""
    return format_duration(round(seconds * NS))


# ---------------------------------------------------------------------------------------------------
# Times: Go's RFC3339 / RFC3339Nano text

GO_ZERO_TIME = "0001-01-01T00:00:00Z"


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return y + (m <= 2), m, d


_GO_ZERO_NS = _days_from_civil(1, 1, 1) * 86400 * NS


def format_time(ns: int | None, offset: int = 0) -> str:
    """Go's ``time.RFC3339Nano`` text for ``ns`` nanoseconds since the Unix epoch, at UTC offset ``offset``
    seconds (UTC by default).

    ``None`` and ``0`` give Go's zero time ``0001-01-01T00:00:00Z``: Rillet keeps 0 for "unset" (as in
    ``first_ts`` of an empty stream), where nats-server holds a zero ``time.Time``. Fractions lose their
    trailing zeros (none at all for a whole second); a zero offset prints as ``Z``.
    """
    if not ns:
        return GO_ZERO_TIME
    return _format(ns, offset)


def _format(ns: int, offset: int) -> str:
    secs, frac = divmod(ns + offset * NS, NS)
    days, rem = divmod(secs, 86400)
    y, mo, d = _civil_from_days(days)
    hh, rem = divmod(rem, 3600)
    mi, ss = divmod(rem, 60)
    out = f"{y:04d}-{mo:02d}-{d:02d}T{hh:02d}:{mi:02d}:{ss:02d}"
    if frac:
        out += "." + f"{frac:09d}".rstrip("0")
    if offset == 0:
        return out + "Z"
    sign = "+" if offset > 0 else "-"
    oh, om = divmod(abs(offset) // 60, 60)
    return out + f"{sign}{oh:02d}:{om:02d}"


def local_offset(ns: int) -> int:
    """The machine's UTC offset in seconds at the instant ``ns`` (Go's ``time.Local``)."""
    return _time.localtime(ns // NS).tm_gmtoff or 0


def zone_offset(ns: int, tz: _dt.tzinfo | None) -> int:
    """The UTC offset in seconds of zone ``tz`` (UTC when None) at the instant ``ns``."""
    if tz is None:
        return 0
    import datetime as _dt  # (not at import: an idle server does not load datetime, issue 20)
    off = _dt.datetime.fromtimestamp(ns // NS, tz).utcoffset()
    return int(off.total_seconds()) if off else 0


def unix_ns(t: float) -> int:
    """A ``time.time()`` float as integer nanoseconds, kept to the microsecond (a float holds no more)."""
    return round(t * 1_000_000) * 1000


def now_time() -> str:
    """The current time as nats-server writes it (UTC, RFC3339Nano)."""
    return _format(_time.time_ns(), 0)


class GoTimeError(ValueError):
    """A time text Go's RFC3339 parser refuses; ``str()`` is Go's message."""


def _time_quote(s: str) -> str:
    # Go's time package quoting: non-ASCII and control bytes as \xNN, '"' and '\' escaped.
    out = ['"']
    for ch in s:
        o = ord(ch)
        if o >= 0x80 or o < 0x20:
            for b in ch.encode("utf-8", "surrogatepass"):
                out.append(f"\\x{b:02x}")
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


_RFC3339 = "2006-01-02T15:04:05Z07:00"


def _terr(value: str, elem_value: str, layout_elem: str) -> GoTimeError:
    return GoTimeError(f"parsing time {_time_quote(value)} as {_time_quote(_RFC3339)}: cannot parse "
                       f"{_time_quote(elem_value)} as {_time_quote(layout_elem)}")


def _rerr(value: str, what: str) -> GoTimeError:
    return GoTimeError(f"parsing time {_time_quote(value)}: {what} out of range")


def parse_time(s: str) -> tuple[int, int]:
    """Parse Go RFC3339 text; returns (ns since the Unix epoch, UTC offset in seconds).

    Raises ``GoTimeError`` with the message Go gives for the same text.
    """
    v = s
    i = 0
    n = len(v)

    def digits(k: int, fixed: bool, elem: str) -> int:
        nonlocal i
        if fixed:
            if i + k > n or not v[i:i + k].isascii() or not v[i:i + k].isdigit():
                raise _terr(s, v[i:], elem)
            val = int(v[i:i + k])
            i += k
            return val
        # one or two digits
        if i >= n or not ("0" <= v[i] <= "9"):
            raise _terr(s, v[i:], elem)
        j = i + 1
        if j < n and "0" <= v[j] <= "9":
            j += 1
        val = int(v[i:j])
        i = j
        return val

    def lit(c: str) -> None:
        nonlocal i
        if not v.startswith(c, i):
            raise _terr(s, v[i:], c)
        i += len(c)

    year = digits(4, True, "2006")
    lit("-")
    month = digits(2, True, "01")
    if month < 1 or month > 12:
        raise _rerr(s, "month")
    lit("-")
    day = digits(2, True, "02")
    lit("T")
    hour = digits(2, False, "15")
    if hour > 23:
        raise _rerr(s, "hour")
    lit(":")
    minute = digits(2, True, "04")
    if minute > 59:
        raise _rerr(s, "minute")
    lit(":")
    second = digits(2, True, "05")
    if second > 59:
        raise _rerr(s, "second")
    frac_ns = 0
    if i + 1 < n and v[i] in ".," and "0" <= v[i + 1] <= "9":
        j = i + 1
        while j < n and "0" <= v[j] <= "9":
            j += 1
        frac_ns = int((v[i + 1:j] + "000000000")[:9])
        i = j
    offset = 0
    if i < n and v[i] == "Z":
        i += 1
    else:
        rest = v[i:]
        if len(rest) < 6 or rest[0] not in "+-" or rest[3] != ":" or not rest[1:3].isdigit() \
                or not rest[4:6].isdigit() or not rest[1:3].isascii() or not rest[4:6].isascii():
            raise _terr(s, rest, "Z07:00")
        oh, om = int(rest[1:3]), int(rest[4:6])
        if oh > 24:
            raise _rerr(s, "time zone offset hour")
        if om > 60:
            raise _rerr(s, "time zone offset minute")
        offset = (oh * 3600 + om * 60) * (1 if rest[0] == "+" else -1)
        i += 6
    if i < n:
        raise GoTimeError(f"parsing time {_time_quote(s)}: extra text: {_time_quote(v[i:])}")
    mdays = (31, 29 if (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)) else 28, 31, 30, 31, 30,
             31, 31, 30, 31, 30, 31)[month - 1]
    if day < 1 or day > mdays:
        raise _rerr(s, "day")
    days = _days_from_civil(year, month, day)
    ns = ((days * 86400 + hour * 3600 + minute * 60 + second) - offset) * NS + frac_ns
    return ns, offset


def go_unix_nano(ns: int) -> int:
    """What Go's ``Time.UnixNano`` gives for ``ns``: the value wrapped to a signed 64-bit integer, so that a
    time after the year 2262 (or before 1678) comes out as Go's servers compare it (often negative)."""
    return ((ns + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


def time_ns(s: str | None) -> int:
    """Nanoseconds since the Unix epoch for RFC3339 text; 0 for ``None``/empty/Go's zero time."""
    if not s or s == GO_ZERO_TIME:
        return 0
    return parse_time(s)[0]


def normalize_time(s: str) -> str:
    """Re-format RFC3339 text the way Go writes the parsed value back (RFC3339Nano, offset kept)."""
    ns, off = parse_time(s)
    if ns == _GO_ZERO_NS and off == 0:
        return GO_ZERO_TIME
    return _format(ns, off)


def to_utc_time(s: str) -> str:
    """RFC3339 text converted to UTC (nats-server stores ``pause_until`` in UTC)."""
    ns, _ = parse_time(s)
    return format_time(ns)


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(t: float | None = None) -> str:
    """An HTTP ``Date`` value (RFC 7231 IMF-fixdate, English names whatever the locale), as Go's
    ``http.TimeFormat`` writes it: ``Mon, 02 Jan 2006 15:04:05 GMT``. (Not email.utils.formatdate: the
    email package would cost a server ~0.5 MB of memory for this.)"""
    tm = _time.gmtime(t)
    return (f"{_WEEKDAYS[tm.tm_wday]}, {tm.tm_mday:02d} {_MONTHS[tm.tm_mon - 1]} {tm.tm_year:04d} "
            f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d} GMT")


_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str) -> float:
    """Parse a Go ``time.ParseDuration`` string and return seconds.

    Raises ``ValueError`` with a Go-like message (``time: invalid duration "x"``).
    """
    original = text
    if not text:
        raise ValueError(f'time: invalid duration "{original}"')
    sign = 1.0
    if text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f'time: invalid duration "{original}"')
    total = 0.0
    i = 0
    n = len(text)
    while i < n:
        start = i
        while i < n and text[i].isdigit():
            i += 1
        int_part = text[start:i]
        frac_part = ""
        if i < n and text[i] == ".":
            i += 1
            fstart = i
            while i < n and text[i].isdigit():
                i += 1
            frac_part = text[fstart:i]
        if not int_part and not frac_part:
            raise ValueError(f'time: invalid duration "{original}"')
        ustart = i
        while i < n and not (text[i].isdigit() or text[i] == "."):
            i += 1
        unit = text[ustart:i]
        if not unit:
            raise ValueError(f'time: missing unit in duration "{original}"')
        if unit not in _DURATION_UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{original}"')
        number = float(f"{int_part or '0'}.{frac_part or '0'}")
        total += number * _DURATION_UNITS[unit]
    return sign * total
