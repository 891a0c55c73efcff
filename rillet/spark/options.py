"""Option parsing for the Spark data sources (pure Python: no Spark, no network).

Spark hands a data source its options as a case-insensitive mapping of strings. Everything is checked here,
when the query is planned on the driver, so that a bad value fails at query start with a message naming the
option instead of failing later inside an executor task.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

READ_MODES = ("auto", "consumer", "direct")
DECODES = ("binary", "utf8", "json")
DATA_LOSS = ("fail", "skip")


class OptionError(ValueError):
    """A data source option has a bad value (the message names the option)."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}


def _number(opts: dict[str, str], key: str, conv: Callable[[str], Any], expected: str) -> Any:
    """Option ``key`` converted by ``conv``; None when it is not given or blank."""
    raw = opts.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        return conv(raw)
    except ValueError:
        raise OptionError(f"option '{key}': expected {expected}, got {raw!r}") from None


def _int(opts: dict[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    value = _number(opts, key, lambda raw: int(raw.strip()), "an integer")
    if value is None:
        return default
    if value < minimum:
        raise OptionError(f"option '{key}': must be >= {minimum}, got {value}")
    return value


def _float(opts: dict[str, str], key: str, default: float) -> float:
    value = _number(opts, key, float, "a number")
    if value is None:
        return default
    if value <= 0:
        raise OptionError(f"option '{key}': must be > 0, got {opts[key]!r}")
    return value


def _choice(opts: dict[str, str], key: str, choices: tuple[str, ...], default: str) -> str:
    value = opts.get(key, default).strip().lower() or default
    if value not in choices:
        raise OptionError(f"option '{key}': expected one of {', '.join(choices)}, got {opts.get(key)!r}")
    return value


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None or raw.strip() == "":
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(f"option '{key}': expected true or false, got {raw!r}")


def _name(opts: dict[str, str], key: str, required: bool = True) -> str:
    value = opts.get(key, "").strip()
    if not value:
        if required:
            raise OptionError(f"option '{key}' is required")
        return ""
    if any(c in value for c in " \t\r\n.*>/\\"):
        raise OptionError(f"option '{key}': invalid name {value!r}")
    return value


def _subject(value: str, key: str, wildcards: bool) -> str:
    s = value.strip()
    toks = s.split(".")
    if not s or any(t == "" or any(c in t for c in " \t\r\n") for t in toks):
        raise OptionError(f"option '{key}': invalid subject {value!r}")
    for i, t in enumerate(toks):
        if ("*" in t and t != "*") or (">" in t and (t != ">" or i != len(toks) - 1)):
            raise OptionError(f"option '{key}': invalid subject {value!r}")
        if not wildcards and t in ("*", ">"):
            raise OptionError(f"option '{key}': wildcards are not allowed in {value!r}")
    return s


# how an option is read: ``read(opts, name, default)``, the options lower-cased (``_lower``)
Reader = Callable[[dict[str, str], str, Any], Any]


def _verbatim(opts: dict[str, str], key: str, default: str) -> str:
    return opts.get(key, default)


def _option(default: Any, read: Reader | None = None) -> Any:
    """A field read from the data source option of its name: its default and how the value is read (as
    given, by default). The parse functions fill every such field through ``_read_options``; the others
    they work out themselves."""
    if read is None:
        read = _verbatim
    return field(default=default, metadata={"read": read})


def _read_options(cls: type, opts: dict[str, str]) -> dict[str, Any]:
    return {f.name: f.metadata["read"](opts, f.name, f.default) for f in fields(cls) if "read" in f.metadata}


def _at_least(minimum: int) -> Reader:
    return lambda opts, key, default: _int(opts, key, default, minimum)


def _one_of(choices: tuple[str, ...]) -> Reader:
    return lambda opts, key, default: _choice(opts, key, choices, default)


def _text(opts: dict[str, str], key: str, default: str) -> str:
    return opts.get(key, default).strip()


@dataclass(frozen=True)
class Start:
    """Where a read starts: ``earliest``, ``latest``, a sequence, or a time (nanoseconds since the epoch)."""
    kind: str
    value: int = 0


def parse_start(raw: str, key: str = "start") -> Start:
    v = raw.strip()
    low = v.lower()
    if low in ("", "earliest", "first"):
        return Start("earliest")
    if low in ("latest", "last", "new"):
        return Start("latest")
    if v.isdigit():
        seq = int(v)
        if seq < 1:
            raise OptionError(f"option '{key}': a sequence starts at 1, got {raw!r}")
        return Start("seq", seq)
    return Start("time", parse_time(v, key))


def parse_time(v: str, key: str) -> int:
    """An ISO-8601 time (``2026-11-22T10:00:00Z``; no zone means UTC) as nanoseconds since the epoch."""
    text = v.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        t = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(f"option '{key}': expected earliest, latest, a sequence or an ISO-8601 time, "
                          f"got {v!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    delta = t - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


@dataclass(frozen=True)
class ConnectOptions:
    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    user: str = _option("")
    password: str = _option("")
    token: str = _option("")
    nkey_seed: str = _option("")
    creds: str = _option("")
    tls_ca: str = _option("")
    tls_cert: str = _option("")
    tls_key: str = _option("")
    connect_timeout: float = _option(5.0, _float)


CONNECT_KEYS = tuple(f.name for f in fields(ConnectOptions))  # the connection's options


def parse_connect(opts: dict[str, str]) -> ConnectOptions:
    servers = tuple(s.strip() for s in opts.get("servers", opts.get("url", "")).split(",") if s.strip())
    if not servers:
        servers = ("nats://127.0.0.1:4222",)
    for s in servers:
        if "://" not in s and ":" not in s:
            raise OptionError(f"option 'servers': expected host:port or nats://host:port, got {s!r}")
    if bool(opts.get("user")) != bool(opts.get("password")):
        raise OptionError("option 'user' and option 'password' must be given together")
    if opts.get("tls_key") and not opts.get("tls_cert"):
        raise OptionError("option 'tls_key' needs option 'tls_cert'")
    return ConnectOptions(servers=servers, **_read_options(ConnectOptions, opts))


@dataclass(frozen=True)
class ReadOptions:
    conn: ConnectOptions
    stream: str
    filter_subjects: tuple[str, ...] = ()
    start: Start = field(default_factory=lambda: Start("earliest"))
    end: int | None = None          # last sequence for batch reads (inclusive); None = the stream's last
    end_time: int | None = None     # or a time (ns): the last message stored before it
    num_partitions: int = _option(1, _at_least(1))
    max_messages_per_trigger: int | None = _option(None, _at_least(1))
    max_bytes_per_trigger: int | None = _option(None, _at_least(1))
    decode: str = "binary"
    json_schema: str = ""
    read_mode: str = _option("auto", _one_of(READ_MODES))
    batch_size: int = _option(1000, _at_least(1))
    on_data_loss: str = _option("fail", _one_of(DATA_LOSS))
    region_header: str = _option("Region", _text)
    idle_timeout: float = _option(10.0, _float)


def parse_read(options: Mapping[str, str]) -> ReadOptions:
    opts = _lower(options)
    filters: list[str] = []
    for key in ("filter_subjects", "filter_subject", "subjects"):
        if key in opts:
            filters.extend(_subject(s, key, True) for s in opts[key].split(",") if s.strip())
    end: int | None = None
    end_time: int | None = None
    if opts.get("end", "").strip():
        raw = opts["end"].strip()
        if raw.lower() in ("latest", "last"):
            end = None
        elif raw.isdigit():
            end = int(raw)
            if end < 1:
                raise OptionError(f"option 'end': a sequence starts at 1, got {raw!r}")
        else:
            try:
                end_time = parse_time(raw, "end")
            except OptionError:
                raise OptionError(f"option 'end': expected latest, a sequence or an ISO-8601 time, "
                                  f"got {raw!r}") from None
    decode = _choice(opts, "decode", DECODES, "binary")
    json_schema = opts.get("json_schema", opts.get("schema", "")).strip()
    if decode == "json" and not json_schema:
        raise OptionError("option 'decode': json needs a schema (option 'json_schema', a DDL string such as "
                          "'id STRING, amount DOUBLE')")
    if decode == "json":
        ddl_field_names(json_schema)
    return ReadOptions(
        conn=parse_connect(opts),
        stream=_name(opts, "stream"),
        filter_subjects=tuple(filters),
        start=parse_start(opts.get("start", opts.get("starting_offsets", "earliest")), "start"),
        end=end, end_time=end_time,
        decode=decode, json_schema=json_schema,
        **_read_options(ReadOptions, opts),
    )


@dataclass(frozen=True)
class WriteOptions:
    conn: ConnectOptions
    subject: str = ""
    stream: str = ""            # optional: checked to exist at query start
    window: int = _option(256, _at_least(1))  # publishes in flight per task
    ack_timeout: float = _option(10.0, _float)
    write_id: str = _option("", _text)  # batch writes: a stable id makes a rewrite dedup
    msg_id_prefix: str = _option("", _text)


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    subject = opts.get("subject", "").strip()
    if subject:
        subject = _subject(subject, "subject", False)
    return WriteOptions(
        conn=parse_connect(opts), subject=subject, stream=_name(opts, "stream", required=False),
        **_read_options(WriteOptions, opts),
    )


@dataclass(frozen=True)
class KVOptions:
    conn: ConnectOptions
    bucket: str
    history: bool = _option(False, _bool)
    include_deletes: bool = _option(False, _bool)
    decode: str = _option("binary", _one_of(("binary", "utf8")))
    window: int = _option(256, _at_least(1))
    ack_timeout: float = _option(10.0, _float)
    write_id: str = _option("", _text)
    idle_timeout: float = _option(10.0, _float)


def parse_kv(options: Mapping[str, str]) -> KVOptions:
    opts = _lower(options)
    return KVOptions(
        conn=parse_connect(opts), bucket=_name(opts, "bucket"), **_read_options(KVOptions, opts))


def ddl_field_names(ddl: str, key: str = "json_schema") -> list[str]:
    """The top-level column names of a DDL schema string (``a INT, b STRUCT<x: INT, y: STRING>``)."""
    names, depth, cur = [], 0, ""
    for ch in ddl + ",":
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            part = cur.strip()
            if part:
                name = part.split()[0].strip("`")
                if len(part.split()) < 2:
                    raise OptionError(f"option '{key}': expected 'name TYPE, ...', got {ddl!r}")
                names.append(name)
            cur = ""
        else:
            cur += ch
    if not names:
        raise OptionError(f"option '{key}': no columns in {ddl!r}")
    return names
