"""Option parsing for the Spark data sources (no Spark, no server)."""
from __future__ import annotations

import pytest

from rillet.spark.options import OptionError, Start, parse_kv, parse_read, parse_time, parse_write
from rillet.spark.source import split_range


def test_defaults_and_case_insensitive_keys():
    o = parse_read({"Stream": "ORDERS", "NUM_PARTITIONS": "4", "Filter_Subjects": "orders.eu.>, orders.*.paid"})
    assert o.stream == "ORDERS" and o.num_partitions == 4
    assert o.filter_subjects == ("orders.eu.>", "orders.*.paid")
    assert o.start == Start("earliest") and o.end is None and o.decode == "binary"
    assert o.conn.servers == ("nats://127.0.0.1:4222",)


@pytest.mark.parametrize("raw,want", [
    ("earliest", Start("earliest")), ("latest", Start("latest")), ("42", Start("seq", 42)),
    ("1970-01-01T00:00:01Z", Start("time", 1_000_000_000)),
    ("1970-01-01T00:00:00.5+00:00", Start("time", 500_000_000)),
])
def test_start_values(raw, want):
    assert parse_read({"stream": "S", "start": raw}).start == want


@pytest.mark.parametrize("opts,needle", [
    ({}, "option 'stream' is required"),
    ({"stream": "a.b"}, "option 'stream'"),
    ({"stream": "S", "num_partitions": "0"}, "option 'num_partitions'"),
    ({"stream": "S", "num_partitions": "two"}, "option 'num_partitions'"),
    ({"stream": "S", "start": "yesterday"}, "option 'start'"),
    ({"stream": "S", "start": "0"}, "option 'start'"),
    ({"stream": "S", "end": "soon"}, "option 'end'"),
    ({"stream": "S", "decode": "xml"}, "option 'decode'"),
    ({"stream": "S", "decode": "json"}, "option 'decode'"),
    ({"stream": "S", "filter_subjects": "a..b"}, "option 'filter_subjects'"),
    ({"stream": "S", "filter_subjects": "a.>.b"}, "option 'filter_subjects'"),
    ({"stream": "S", "max_messages_per_trigger": "-1"}, "option 'max_messages_per_trigger'"),
    ({"stream": "S", "max_bytes_per_trigger": "1k"}, "option 'max_bytes_per_trigger'"),
    ({"stream": "S", "on_data_loss": "ignore"}, "option 'on_data_loss'"),
    ({"stream": "S", "read_mode": "fast"}, "option 'read_mode'"),
    ({"stream": "S", "user": "u"}, "option 'password'"),
    ({"stream": "S", "connect_timeout": "-3"}, "option 'connect_timeout'"),
])
def test_bad_read_options_name_the_option(opts, needle):
    with pytest.raises(OptionError) as e:
        parse_read(opts)
    assert needle in str(e.value)


def test_write_and_kv_options():
    w = parse_write({"subject": "out.x", "window": "64", "write_id": "job-1"})
    assert (w.subject, w.window, w.write_id) == ("out.x", 64, "job-1")
    with pytest.raises(OptionError, match="option 'subject'"):
        parse_write({"subject": "out.*"})
    with pytest.raises(OptionError, match="option 'window'"):
        parse_write({"window": "0"})
    k = parse_kv({"bucket": "totals", "history": "true", "decode": "utf8"})
    assert (k.bucket, k.history, k.decode) == ("totals", True, "utf8")
    with pytest.raises(OptionError, match="option 'bucket'"):
        parse_kv({})
    with pytest.raises(OptionError, match="option 'history'"):
        parse_kv({"bucket": "b", "history": "maybe"})


def test_parse_time_zones():
    assert parse_time("1970-01-01T01:00:00+01:00", "start") == 0
    assert parse_time("1970-01-01T00:00:00", "start") == 0


def test_split_range():
    parts = split_range("S", 1, 10, 3, "consumer")
    assert [(p.lo, p.hi) for p in parts] == [(1, 4), (5, 7), (8, 10)]
    assert [(p.lo, p.hi) for p in split_range("S", 5, 6, 4, "consumer")] == [(5, 5), (6, 6)]
    assert split_range("S", 7, 6, 2, "consumer") == []
