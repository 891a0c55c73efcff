"""rillet.gocompat.gotime: Go's Duration.String() and RFC3339Nano, the one implementation the server uses.

The expected texts are what Go's time package prints for the same values (Duration.String() takes the
largest unit, trims the fraction's trailing zeros, writes "0s" for zero and ns/µs/ms below a second;
RFC3339Nano trims the fraction's trailing zeros and writes "Z" for a zero offset).
"""
from __future__ import annotations

import datetime as dt
import os
import time
import zoneinfo

import pytest

from rillet.gocompat import gotime as G

NS = G.NS


@pytest.mark.parametrize("ns, text", [
    (0, "0s"),
    (1, "1ns"),
    (999, "999ns"),
    (1_000, "1\u00b5s"),
    (1_500, "1.5\u00b5s"),
    (619_000, "619µs"),
    (999_999, "999.999µs"),
    (1_000_000, "1ms"),
    (1_500_000, "1.5ms"),
    (1_229_165, "1.229165ms"),
    (999_999_999, "999.999999ms"),
    (NS, "1s"),
    (1_500_000_000, "1.5s"),
    (59_999_000_000, "59.999s"),
    (60 * NS, "1m0s"),
    (90 * NS, "1m30s"),
    (3600 * NS, "1h0m0s"),
    (3723 * NS + 5, "1h2m3.000000005s"),
    (3_723_500_000_000, "1h2m3.5s"),
    (-1, "-1ns"),
    (-2_000_000, "-2ms"),
    (-1_500_000_000, "-1.5s"),
    (-3600 * NS, "-1h0m0s"),
    ((1 << 63) - 1, "2562047h47m16.854775807s"),
    (-(1 << 63), "-2562047h47m16.854775808s"),
])
def test_format_duration(ns: int, text: str) -> None:
    assert G.format_duration(ns) == text


def test_format_seconds_rounds_to_the_nanosecond() -> None:
    assert [G.format_seconds(s) for s in (0, 30, 60, 3600, 1.5, 0.25, 0.0005, 1e-9, 0.001234567)] == \
        ["0s", "30s", "1m0s", "1h0m0s", "1.5s", "250ms", "500µs", "1ns", "1.234567ms"]


def test_format_time() -> None:
    assert G.format_time(0) == G.GO_ZERO_TIME == "0001-01-01T00:00:00Z"
    assert G.format_time(None) == G.GO_ZERO_TIME
    assert G.format_time(1_700_000_000 * NS) == "2023-11-14T22:13:20Z"
    assert G.format_time(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    assert G.format_time(1_700_000_000_123_456_000) == "2023-11-14T22:13:20.123456Z"
    assert G.format_time(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert G.format_time(1) == "1970-01-01T00:00:00.000000001Z"
    assert G.format_time(-1) == "1969-12-31T23:59:59.999999999Z"
    assert G.format_time(1_700_000_000 * NS, 3600) == "2023-11-14T23:13:20+01:00"
    assert G.format_time(1_700_000_000 * NS + 500_000_000, -5 * 3600 - 30 * 60) == "2023-11-14T16:43:20.5-05:30"
    assert G.format_time(253402300799 * NS + 999_999_999) == "9999-12-31T23:59:59.999999999Z"


def test_zone_and_local_offsets() -> None:
    ams = zoneinfo.ZoneInfo("Europe/Amsterdam")
    winter = G.parse_time("2025-01-15T12:00:00Z")[0]
    summer = G.parse_time("2025-07-15T12:00:00Z")[0]
    assert G.zone_offset(winter, ams) == 3600 and G.zone_offset(summer, ams) == 7200
    assert G.zone_offset(winter, None) == 0 and G.zone_offset(winter, dt.timezone.utc) == 0
    assert G.format_time(summer, G.zone_offset(summer, ams)) == "2025-07-15T14:00:00+02:00"
    old = os.environ.get("TZ")
    try:
        os.environ["TZ"] = "EST+5"
        time.tzset()
        ns = 1_700_000_000_500_000_000
        assert G.format_time(ns, G.local_offset(ns)) == "2023-11-14T17:13:20.5-05:00"
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_unix_ns_keeps_microseconds() -> None:
    assert G.unix_ns(0) == 0
    assert G.unix_ns(1_700_000_000.123456) == 1_700_000_000_123_456_000


def test_parse_and_normalize() -> None:
    ns, off = G.parse_time("2023-11-14T23:13:20.5+01:00")
    assert (ns, off) == (1_700_000_000_500_000_000, 3600)
    assert G.normalize_time("2023-11-14T22:13:20.500000000Z") == "2023-11-14T22:13:20.5Z"
    assert G.normalize_time("2023-11-14T22:13:20+00:00") == "2023-11-14T22:13:20Z"
    assert G.normalize_time("2023-11-14T23:13:20.5+01:00") == "2023-11-14T23:13:20.5+01:00"
    assert G.normalize_time(G.GO_ZERO_TIME) == G.GO_ZERO_TIME
    # the Unix epoch is a time like any other (Go's zero time is year 1, not 1970)
    assert G.normalize_time("1970-01-01T00:00:00Z") == "1970-01-01T00:00:00Z"
    assert G.time_ns(G.GO_ZERO_TIME) == 0 and G.time_ns("") == 0 and G.time_ns(None) == 0
    assert G.to_utc_time("2023-11-14T23:13:20+01:00") == "2023-11-14T22:13:20Z"
    for text in ("2023-11-14T22:13:20Z", "2023-11-14T22:13:20.000000001Z", "2000-02-29T00:00:00.1Z"):
        assert G.format_time(G.parse_time(text)[0]) == text


@pytest.mark.parametrize("text, message", [
    ("2020-13-01T00:00:00Z", 'parsing time "2020-13-01T00:00:00Z": month out of range'),
    ("2021-02-29T00:00:00Z", 'parsing time "2021-02-29T00:00:00Z": day out of range'),
    ("2020-01-01 00:00:00Z", 'parsing time "2020-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": '
                             'cannot parse " 00:00:00Z" as "T"'),
    ("2020-01-01T00:00:00Zjunk", 'parsing time "2020-01-01T00:00:00Zjunk": extra text: "junk"'),
])
def test_parse_errors_are_gos(text: str, message: str) -> None:
    with pytest.raises(G.GoTimeError) as ei:
        G.parse_time(text)
    assert str(ei.value) == message
