"""JetStream stream and consumer configuration: types, wire codec, defaults and validation.

Everything here is sans-IO and follows nats-server (the JSON field names, the defaults it fills in, the
order in which it checks things and the exact error it answers with). Parts:

* Times are Go's RFC3339Nano text (``rillet.gotime``); durations stay ``int`` nanoseconds everywhere.
* Bodies are decoded and encoded by the Go-compatible JSON codec in ``rillet.jetstream.gojson``, which
  reads each field's Go type from the ``Annotated`` markers used here.
* msgspec Structs for the configurations. Attribute names are the JSON names. Fields that are pointers,
  slices or maps in Go are ``Optional`` here (``None`` = absent/nil).
* ``normalize_stream_config`` / ``check_stream_update`` and ``normalize_consumer_config`` /
  ``check_consumer_update``: defaults plus validation, raising ``ApiError``.
"""
from __future__ import annotations

import re
import secrets
from typing import Annotated, Any, Callable, Optional, Sequence

import msgspec

from rillet.goquote import go_quote
from rillet.gotime import format_duration, time_ns, to_utc_time
from rillet.jetstream import errors as jserr
from rillet.jetstream.errors import ApiError
from rillet.jetstream.gojson import (
    Duration,
    GoEnum,
    GoName,
    Int,
    Int32,
    Int64,
    OptTime,
    Uint64,
    _JSONError,
    _Node,
    _enum_exact,
    _kind_desc,
    _q,
    from_dict,
    go_decode,
    go_json,
    to_go,
)
from rillet.subjects.destination import _ERR_BAD_SUBJECT, _atoi, check_subject_transform, validate_mapping
from rillet.subjects.validate import (
    is_valid_publish_subject,
    is_valid_subject,
    subject_is_literal,
    subject_is_subset_match,
    subjects_collide,
)

# ---------------------------------------------------------------------------------------------------
# Limits and constants (nats-server values)

NS = 1_000_000_000
MS = 1_000_000
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
STREAM_MAX_REPLICAS = 5
DEFAULT_DUPLICATE_WINDOW = 2 * 60 * NS
DEFAULT_ACK_WAIT = 30 * NS
DEFAULT_EPHEMERAL_INACTIVE = 5 * NS
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_PINNED_TTL = 2 * 60 * NS
FLOW_CONTROL_HEARTBEAT = 1 * NS  # the heartbeat the flow_control ack policy forces
JS_API_PREFIX = "$JS.API"
JS_API_LEVEL = 5

META_REQUIRED_LEVEL = "_nats.req.level"
META_SERVER_VERSION = "_nats.ver"
META_SERVER_LEVEL = "_nats.level"

RETENTION_POLICIES = ("limits", "interest", "workqueue")
DISCARD_POLICIES = ("old", "new")
STORAGE_TYPES = ("file", "memory")
COMPRESSIONS = ("none", "s2")
DELIVER_POLICIES = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject")
ACK_POLICIES = ("none", "all", "explicit", "flow_control")
REPLAY_POLICIES = ("instant", "original")
PRIORITY_POLICIES = ("none", "overflow", "pinned_client", "prioritized")
CONSUMER_ACTIONS = ("", "create", "update")
PERSIST_MODES = ("default", "async")


# ---------------------------------------------------------------------------------------------------
# Enumerations (Go string types with their own decoding)


def _enum_compression(node: _Node, raw: bytes) -> str:
    if node.k != "s":
        if node.k == "z":
            raise _JSONError("unknown compression algorithm")
        raise _JSONError(f"json: cannot unmarshal {_kind_desc(node)} into Go value of type string")
    if node.v in COMPRESSIONS:
        return node.v
    raise _JSONError("unknown compression algorithm")



Retention = Annotated[str, GoEnum("server.RetentionPolicy", _enum_exact(_q(RETENTION_POLICIES)), "limits")]
Discard = Annotated[str, GoEnum("server.DiscardPolicy", _enum_exact(_q(DISCARD_POLICIES), fold=True), "old")]
Storage = Annotated[str, GoEnum("server.StorageType", _enum_exact(_q(STORAGE_TYPES)), "")]
Compression = Annotated[str, GoEnum("server.StoreCompression", _enum_compression, "none")]
PersistMode = Annotated[str, GoEnum("server.PersistModeType",
                                    _enum_exact({'"default"': "default", '""': "default", '"async"': "async"}),
                                    "default")]
DeliverPolicy = Annotated[str, GoEnum("server.DeliverPolicy",
                                      _enum_exact({**_q(DELIVER_POLICIES), '"undefined"': "all"}), "all")]
AckPolicy = Annotated[str, GoEnum("server.AckPolicy", _enum_exact(_q(ACK_POLICIES)), "none")]
ReplayPolicy = Annotated[str, GoEnum("server.ReplayPolicy", _enum_exact(_q(REPLAY_POLICIES)), "instant")]
PriorityPolicy = Annotated[str, GoEnum("server.PriorityPolicy",
                                       _enum_exact(_q(PRIORITY_POLICIES), fmt="unknown priority policy: "),
                                       "none")]
ConsumerAction = Annotated[str, GoEnum("server.ConsumerAction",
                                       _enum_exact(_q(CONSUMER_ACTIONS), fmt="unknown consumer action: "), "")]


# ---------------------------------------------------------------------------------------------------
# Structs


class _Go(msgspec.Struct, kw_only=True):
    """Base: ``copy()`` and Go-form helpers."""

    def copy(self):  # deep enough: nested Structs and containers are copied
        return msgspec.convert(msgspec.to_builtins(self), type(self))

    def to_go(self) -> dict:
        return to_go(self)

    def to_json(self) -> bytes:
        return go_json(self)


class Placement(_Go):
    cluster: str = ""
    tags: Optional[list[str]] = None
    preferred: str = ""
    __omitempty__ = frozenset({"cluster", "tags", "preferred"})


class ExternalStream(_Go):
    api: str = ""
    deliver: str = ""


class SubjectTransformConfig(_Go):
    src: str = ""
    dest: str = ""


SubjectTransform = SubjectTransformConfig


class StreamConsumerSource(_Go):
    name: str = ""
    deliver_subject: str = ""
    __omitempty__ = frozenset({"name", "deliver_subject"})


class StreamSource(_Go):
    name: str = ""
    opt_start_seq: Uint64 = 0
    opt_start_time: OptTime = None
    filter_subject: str = ""
    subject_transforms: Optional[list[SubjectTransformConfig]] = None
    external: Optional[ExternalStream] = None
    consumer: Optional[StreamConsumerSource] = None
    __omitempty__ = frozenset({"opt_start_seq", "opt_start_time", "filter_subject", "subject_transforms",
                               "external", "consumer"})


class RePublish(_Go):
    src: str = ""
    dest: str = ""
    headers_only: bool = False
    __omitempty__ = frozenset({"src", "headers_only"})


class StreamConsumerLimits(_Go):
    inactive_threshold: Duration = 0
    max_ack_pending: Int = 0
    __omitempty__ = frozenset({"inactive_threshold", "max_ack_pending"})


class StreamConfig(_Go):
    name: str = ""
    description: str = ""
    subjects: Optional[list[str]] = None
    retention: Retention = "limits"
    max_consumers: Int = 0
    max_msgs: Int64 = 0
    max_bytes: Int64 = 0
    max_age: Duration = 0
    max_msgs_per_subject: Int64 = 0
    max_msg_size: Int32 = 0
    discard: Discard = "old"
    storage: Storage = ""  # unset until normalized (then "file" or "memory")
    num_replicas: Int = 0
    no_ack: bool = False
    duplicate_window: Duration = 0
    placement: Optional[Placement] = None
    mirror: Optional[StreamSource] = None
    sources: Annotated[Optional[list[StreamSource]], GoName("[]*server.StreamSource")] = None
    compression: Compression = "none"
    first_seq: Uint64 = 0
    subject_transform: Optional[SubjectTransformConfig] = None
    republish: Optional[RePublish] = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: StreamConsumerLimits = msgspec.field(default_factory=StreamConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: Duration = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: PersistMode = "default"
    allow_batched: bool = False
    metadata: Optional[dict[str, str]] = None
    __omitempty__ = frozenset({
        "description", "subjects", "max_msg_size", "no_ack", "duplicate_window", "placement", "mirror",
        "sources", "first_seq", "subject_transform", "republish", "discard_new_per_subject",
        "subject_delete_marker_ttl", "allow_msg_counter", "allow_atomic", "allow_msg_schedules",
        "persist_mode", "allow_batched", "metadata"})


class StreamConfigRequest(StreamConfig):
    """The STREAM.CREATE / STREAM.UPDATE body: a stream configuration plus ``pedantic``."""

    pedantic: bool = False
    __omitempty__ = StreamConfig.__omitempty__ | {"pedantic"}

    def config(self) -> StreamConfig:
        d = {f: getattr(self, f) for f in StreamConfig.__struct_fields__}
        return StreamConfig(**d)


class ConsumerConfig(_Go):
    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy = "all"
    opt_start_seq: Uint64 = 0
    opt_start_time: OptTime = None
    ack_policy: AckPolicy = "none"
    ack_wait: Duration = 0
    max_deliver: Int = 0
    backoff: Optional[list[Duration]] = None
    filter_subject: str = ""
    filter_subjects: Optional[list[str]] = None
    replay_policy: ReplayPolicy = "instant"
    rate_limit_bps: Uint64 = 0
    sample_freq: str = ""
    max_waiting: Int = 0
    max_ack_pending: Int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: Int = 0
    max_expires: Duration = 0
    max_bytes: Int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: Duration = 0
    inactive_threshold: Duration = 0
    num_replicas: Int = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: Optional[dict[str, str]] = None
    pause_until: OptTime = None
    priority_groups: Optional[list[str]] = None
    priority_policy: PriorityPolicy = "none"
    priority_timeout: Duration = 0
    __omitempty__ = frozenset({
        "durable_name", "name", "description", "opt_start_seq", "opt_start_time", "ack_wait",
        "max_deliver", "backoff", "filter_subject", "filter_subjects", "rate_limit_bps", "sample_freq",
        "max_waiting", "max_ack_pending", "flow_control", "headers_only", "max_batch", "max_expires",
        "max_bytes", "deliver_subject", "deliver_group", "idle_heartbeat", "inactive_threshold",
        "mem_storage", "direct", "sourcing", "metadata", "pause_until", "priority_groups",
        "priority_policy", "priority_timeout"})

    @property
    def is_durable(self) -> bool:
        return bool(self.durable_name)

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    def filters(self) -> list[str]:
        """The subject filters (``filter_subjects`` plus ``filter_subject``), as nats-server gathers them."""
        out = list(self.filter_subjects or [])
        if self.filter_subject:
            out.append(self.filter_subject)
        return out


class CreateConsumerRequest(_Go):
    stream_name: str = ""
    config: ConsumerConfig = msgspec.field(default_factory=ConsumerConfig)
    action: ConsumerAction = ""
    pedantic: bool = False
    __omitempty__ = frozenset({"pedantic"})


class ServerLimits(_Go):
    """The server's ``jetstream.limits`` block (nats-server JSLimitOpts)."""

    max_request_batch: Int = 0
    max_ack_pending: Int = 0
    max_ha_assets: Int = 0
    max_duplicate_window: Duration = 0
    max_batch_inflight_per_stream: Int = 0
    max_batch_inflight_total: Int = 0
    max_batch_size: Int = 0
    max_batch_timeout: Duration = 0
    __omitempty__ = frozenset({
        "max_request_batch", "max_ack_pending", "max_ha_assets", "max_duplicate_window",
        "max_batch_inflight_per_stream", "max_batch_inflight_total", "max_batch_size", "max_batch_timeout"})


class AccountLimits(_Go):
    """An account's JetStream limits (also the ``limits`` object of account info). -1 = unlimited."""

    max_memory: Int64 = -1
    max_storage: Int64 = -1
    max_streams: Int = -1
    max_consumers: Int = -1
    max_ack_pending: Int = -1
    memory_max_stream_bytes: Int64 = -1
    storage_max_stream_bytes: Int64 = -1
    max_bytes_required: bool = False


# ---------------------------------------------------------------------------------------------------
# Names


def is_valid_name(name: str) -> bool:
    """nats-server's rule for names without path separators concerns: no '.', '*', '>', whitespace."""
    if not name:
        return False
    return not any(c in name for c in " \t\r\n\f.*>")


def is_valid_asset_name(name: str) -> bool:
    """Stream and consumer names: also no '\\' or '/'."""
    if not name:
        return False
    return not any(c in name for c in " \t\r\n\f.*>\\/")


_NAME_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def generate_consumer_name() -> str:
    """An 8 character random name like the ones nats-server gives unnamed ephemeral consumers."""
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(8))


def _invalid(msg: str) -> ApiError:
    return jserr.STREAM_INVALID_CONFIG(err=msg)


def _pedantic(msg: str) -> ApiError:
    return jserr.PEDANTIC(err=msg)


# ---------------------------------------------------------------------------------------------------
# Metadata (API level bookkeeping nats-server keeps in the config metadata)


def set_static_stream_metadata(cfg: StreamConfig) -> None:
    """Record the API level the stream's features need (``_nats.req.level``); drops dynamic keys."""
    md = dict(cfg.metadata or {})
    md.pop(META_SERVER_VERSION, None)
    md.pop(META_SERVER_LEVEL, None)
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = max(level, 1)
    if cfg.allow_msg_counter or cfg.allow_atomic or cfg.allow_msg_schedules or cfg.persist_mode == "async":
        level = max(level, 2)
    if cfg.allow_batched:
        level = max(level, 4)
    md[META_REQUIRED_LEVEL] = str(level)
    cfg.metadata = md


def set_static_consumer_metadata(cfg: ConsumerConfig) -> None:
    md = dict(cfg.metadata or {})
    md.pop(META_SERVER_VERSION, None)
    md.pop(META_SERVER_LEVEL, None)
    level = 0
    if cfg.pause_until and time_ns(cfg.pause_until) != 0:
        level = max(level, 1)
    if cfg.priority_policy != "none" or cfg.priority_timeout != 0 or cfg.priority_groups:
        level = max(level, 1)
    if cfg.ack_policy == "flow_control":
        level = max(level, 4)
    md[META_REQUIRED_LEVEL] = str(level)
    cfg.metadata = md


def with_dynamic_metadata(cfg: Any, version: str | None = None, level: int = JS_API_LEVEL) -> Any:
    """A copy of a stream/consumer config carrying ``_nats.ver`` and ``_nats.level`` (for responses)."""
    if version is None:
        import rillet
        version = rillet.SERVER_VERSION
    md = dict(cfg.metadata or {})
    md[META_SERVER_VERSION] = version
    md[META_SERVER_LEVEL] = str(level)
    return msgspec.structs.replace(cfg, metadata=md)


def _copy_required_level(cfg: Any, prev: Any) -> None:
    md = dict(cfg.metadata or {})
    md.pop(META_SERVER_VERSION, None)
    md.pop(META_SERVER_LEVEL, None)
    pmd = prev.metadata or {}
    if META_REQUIRED_LEVEL in pmd:
        md[META_REQUIRED_LEVEL] = pmd[META_REQUIRED_LEVEL]
    else:
        md.pop(META_REQUIRED_LEVEL, None)
    cfg.metadata = md or None


def _strip_dynamic(md: dict | None) -> dict | None:
    if not md:
        return md
    md = dict(md)
    md.pop(META_SERVER_VERSION, None)
    md.pop(META_SERVER_LEVEL, None)
    return md


def configs_equal(existing: StreamConfig, new: StreamConfig) -> bool:
    """Is a create request for an existing stream the same configuration (then it is answered with the
    existing stream instead of "stream name already in use")? Compares like nats-server: after taking
    the stored ``_nats.req.level``, field by field."""
    a = new.copy()
    _copy_required_level(a, existing)
    b = existing.copy()
    b.metadata = _strip_dynamic(b.metadata) or None
    a.metadata = a.metadata or None
    return a == b


def consumer_configs_equal(existing: ConsumerConfig, new: ConsumerConfig) -> bool:
    a = new.copy()
    _copy_required_level(a, existing)
    b = existing.copy()
    b.metadata = _strip_dynamic(b.metadata) or None
    a.metadata = a.metadata or None
    return a == b


def store_config(cfg: StreamConfig) -> StreamConfig:
    """What a message store needs to know of the stream (a copy of the config; the store reads the
    limit fields: max_msgs, max_bytes, max_age, max_msgs_per_subject, max_msg_size, discard,
    discard_new_per_subject, storage, subjects, allow_msg_ttl, subject_delete_marker_ttl, ...)."""
    return cfg.copy()


# ---------------------------------------------------------------------------------------------------
# Stream configuration: defaults and validation

StreamLookup = Callable[[str], Optional[StreamConfig]]


def _check_limits_bytes(cfg: StreamConfig, acc: AccountLimits | None) -> None:
    if acc is None:
        return
    limit = acc.memory_max_stream_bytes if cfg.storage == "memory" else acc.storage_max_stream_bytes
    if acc.max_bytes_required and cfg.max_bytes <= 0:
        raise jserr.STREAM_MAX_BYTES_REQUIRED()
    if limit > 0 and cfg.max_bytes > limit:
        raise jserr.STREAM_MAX_STREAM_BYTES_EXCEEDED()


def check_stream_limits(cfg: StreamConfig, account: AccountLimits | None, *, reserved: int = 0,
                        server_max: int | None = None, server_reserved: int = 0,
                        tiered: bool = False) -> None:
    """nats-server's resource check for a stream config: max consumers against the account, then the
    bytes the stream reserves (max_bytes, or 1 when unlimited) against the account's memory/storage
    limit (``reserved`` = what the account's other streams already reserve) and the server's
    (``server_max``/``server_reserved``). Raises MAXIMUM_CONSUMERS_LIMIT, MEMORY_/STORAGE_RESOURCES_EXCEEDED.
    """
    if account is None:
        return
    if cfg.max_consumers > 0 and account.max_consumers > 0 and cfg.max_consumers > account.max_consumers:
        raise jserr.MAXIMUM_CONSUMERS_LIMIT()
    add = cfg.max_bytes if cfg.max_bytes >= 0 else 1
    acct = add * max(cfg.num_replicas, 1) if (not tiered and cfg.num_replicas > 1 and add > 0) else add
    if cfg.storage == "memory":
        lim, err = account.max_memory, jserr.MEMORY_RESOURCES_EXCEEDED
    else:
        lim, err = account.max_storage, jserr.STORAGE_RESOURCES_EXCEEDED
    if lim >= 0 and (reserved > lim or acct > lim - reserved):
        raise err()
    if server_max is not None and (server_reserved > server_max or add > server_max - server_reserved):
        raise err()


def stream_limits_check(
    cfg: StreamConfig,
    pre: bool,
    *,
    account: AccountLimits | None,
    others: Iterable[StreamConfig],
    server_max_memory: int | None = None,
    server_max_store: int | None = None,
    server_reserved_memory: int = 0,
    server_reserved_store: int = 0,
) -> None:
    """The account/server resource checks nats-server runs on STREAM.CREATE: once on the request's
    configuration as sent (``pre``: also the number of streams) and once normalized, after the
    existing-stream check. ``others``: the account's other streams (same name skipped)."""
    if account is None:
        return
    others = [o for o in others if o.name != cfg.name]
    if pre and account.max_streams > 0 and len(others) >= account.max_streams:
        raise jserr.MAXIMUM_STREAMS_LIMIT()
    reserved = 0
    for o in others:
        if o.max_bytes > 0 and o.storage == cfg.storage:
            reserved += o.max_bytes * (o.num_replicas if o.num_replicas > 1 else 1)
    if cfg.storage == "memory":
        smax, sres = server_max_memory, server_reserved_memory
    elif cfg.storage == "file":
        smax, sres = server_max_store, server_reserved_store
    else:
        smax, sres = None, 0
    if cfg.max_consumers > 0 and account.max_consumers > 0 and cfg.max_consumers > account.max_consumers:
        raise jserr.MAXIMUM_CONSUMERS_LIMIT()
    if cfg.storage not in ("memory", "file"):
        return
    check_stream_limits(cfg, account, reserved=reserved, server_max=smax, server_reserved=sres)


def normalize_stream_config(
    raw: Union[StreamConfig, dict, bytes, str],
    *,
    is_create: bool = True,
    pedantic: bool | None = None,
    lookup_stream: StreamLookup | None = None,
    subjects_overlap: Callable[[list[str]], bool] | None = None,
    existing: StreamConfig | None = None,
    server_limits: ServerLimits | None = None,
    account_limits: AccountLimits | None = None,
    clustered: bool = False,
    subject_name: str | None = None,
    limits_check: Callable[[StreamConfig, bool], None] | None = None,
) -> StreamConfig:
    """Apply nats-server's defaults to a stream configuration and validate it.

    ``raw`` is a request body (bytes/str, decoded as ``StreamConfigRequest``: INVALID_JSON on failure),
    an already parsed dict, or a ``StreamConfig``. ``pedantic`` defaults to the request's own flag.

    Checks, in nats-server's order: for create the name with path separators, ``sealed`` and
    ``mirror_direct`` without a mirror; then the whole configuration check (names, lengths, metadata
    size, replicas, limits defaults, max_age, duplicate window, roll-up/purge, counters, discard new per
    subject, subject delete markers, schedules, persist mode, mirror and sources (names, duplicates,
    filters and transforms, durable consumers, max message size against visible origins, external
    prefixes), cycles, subjects (syntax, duplicates, ``>``, API namespaces, overlaps), max_bytes against
    the account, the input transform, republish, placement); then "replicas > 1 not supported in
    non-clustered mode" unless ``clustered``; then (create) the existing stream of that name
    (``existing``: STREAM_NAME_EXIST unless ``configs_equal``, in which case the existing config is
    returned) and the other streams' subjects (``subjects_overlap(subjects) -> bool``:
    STREAM_SUBJECT_OVERLAP). ``lookup_stream(name)`` gives other streams' configurations (mirror and
    source checks, cycle detection).

    ``subject_name``: the stream name from the request subject; a different ``name`` in the body is
    STREAM_MISMATCH (checked where nats-server does: before the configuration check on create, after
    it on update).

    ``limits_check(cfg, pre)`` (create only; e.g. ``functools.partial(stream_limits_check, account=...,
    others=...)``): called with the configuration as sent (``pre=True``, before the configuration check)
    and normalized (``pre=False``, after the existing-stream check), like nats-server's resource checks.

    Update (``is_create=False``): only the configuration check; then look the stream up (STREAM_NOT_FOUND)
    and call ``check_stream_update(old, new)``, then check other streams' subjects.
    """
    req_pedantic = False
    if isinstance(raw, (bytes, bytearray, str)):
        req = go_decode(raw, StreamConfigRequest, "StreamConfigRequest")
        req_pedantic = req.pedantic
        cfg = req.config()
    elif isinstance(raw, dict):
        req = from_dict(raw, StreamConfigRequest, "StreamConfigRequest")
        req_pedantic = req.pedantic
        cfg = req.config()
    elif isinstance(raw, StreamConfigRequest):
        req_pedantic = raw.pedantic
        cfg = raw.config().copy()
    else:
        cfg = raw.copy()
    if pedantic is None:
        pedantic = req_pedantic

    set_static_stream_metadata(cfg)
    if is_create and subject_name is not None and subject_name != cfg.name:
        raise jserr.STREAM_MISMATCH()
    if is_create:
        if "\\" in cfg.name or "/" in cfg.name:
            raise jserr.STREAM_NAME_CONTAINS_PATH_SEPARATORS()
        if cfg.sealed:
            raise _invalid("stream configuration for create can not be sealed")
        if cfg.mirror_direct and cfg.mirror is None:
            raise _invalid("stream has no mirror but does have mirror direct")
        if limits_check is not None:
            limits_check(cfg, True)

    cfg = check_stream_config(cfg, pedantic=pedantic, lookup_stream=lookup_stream,
                              server_limits=server_limits, account_limits=account_limits)
    if not is_create:
        if subject_name is not None and subject_name != cfg.name:
            raise jserr.STREAM_MISMATCH()
        return cfg
    if not clustered and cfg.num_replicas > 1:
        raise jserr.STREAM_REPLICAS_NOT_SUPPORTED()
    if existing is not None:
        if configs_equal(existing, cfg):
            return existing
        raise jserr.STREAM_NAME_EXIST()
    if limits_check is not None:
        limits_check(cfg, False)
    if subjects_overlap is not None and cfg.subjects and subjects_overlap(list(cfg.subjects)):
        raise jserr.STREAM_SUBJECT_OVERLAP()
    return cfg


def check_stream_config(cfg: StreamConfig, *, pedantic: bool = False, lookup_stream: StreamLookup | None = None,
                        server_limits: ServerLimits | None = None,
                        account_limits: AccountLimits | None = None) -> StreamConfig:
    """nats-server's stream configuration check with defaults (a new, normalized copy is returned)."""
    lookup = lookup_stream or (lambda name: None)
    lim = server_limits or ServerLimits()
    if not is_valid_asset_name(cfg.name):
        raise _invalid("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(cfg.name) > MAX_NAME_LEN:
        raise _invalid(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(cfg.description.encode()) > MAX_DESCRIPTION_LEN:
        raise _invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(len(k.encode()) + len(v.encode()) for k, v in (cfg.metadata or {}).items()) > MAX_METADATA_LEN:
        raise _invalid(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")

    cfg = cfg.copy()
    if not cfg.storage:
        cfg.storage = "file"
    if cfg.num_replicas == 0:
        cfg.num_replicas = 1
    if cfg.num_replicas > STREAM_MAX_REPLICAS:
        raise _invalid(f"maximum replicas is {STREAM_MAX_REPLICAS}")
    if cfg.num_replicas < 0:
        raise jserr.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()
    for field in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        v = getattr(cfg, field)
        if v == 0 or v < -1:
            if pedantic and v < -1:
                raise _pedantic(f"{field} must be set to -1")
            setattr(cfg, field, -1)
    if cfg.max_age < 0:
        raise _invalid("max age can not be negative")
    if cfg.max_age != 0 and cfg.max_age < 100 * MS:
        raise _invalid("max age needs to be >= 100ms")

    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
        window = DEFAULT_DUPLICATE_WINDOW
        if lim.max_duplicate_window > 0 and window > lim.max_duplicate_window:
            if pedantic:
                raise _pedantic("duplicate window limits are higher than current limits")
            window = lim.max_duplicate_window
        if cfg.max_age != 0 and cfg.max_age < window:
            if pedantic:
                raise _pedantic("duplicate window cannot be bigger than max age")
            cfg.duplicate_window = cfg.max_age
        else:
            cfg.duplicate_window = window
    if cfg.duplicate_window < 0:
        raise _invalid("duplicates window can not be negative")
    if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if lim.max_duplicate_window > 0 and cfg.duplicate_window > lim.max_duplicate_window:
        raise _invalid("duplicates window can not be larger then server limit of "
                       f"{format_duration(lim.max_duplicate_window)}")
    if 0 < cfg.duplicate_window < 100 * MS:
        raise _invalid("duplicates window needs to be >= 100ms")

    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise _invalid("roll-ups require the purge permission")

    if cfg.allow_msg_counter:
        if cfg.discard == "new":
            raise _invalid("counter stream cannot use discard new")
        if cfg.allow_msg_ttl:
            raise _invalid("counter stream cannot use message TTLs")
        if cfg.allow_msg_schedules:
            raise _invalid("counter stream cannot use message schedules")
        if cfg.retention != "limits":
            raise _invalid("counter stream can only use limits retention")

    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")

    if cfg.subject_delete_marker_ttl > 0:
        if cfg.subject_delete_marker_ttl < NS:
            raise _invalid("subject delete marker TTL must be at least 1 second")
        if not cfg.allow_msg_ttl:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if message TTLs are disabled")
            cfg.allow_msg_ttl = True
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
    elif cfg.subject_delete_marker_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")

    if cfg.allow_msg_schedules:
        if cfg.discard == "new":
            raise _invalid("message scheduling cannot use discard new")
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise _invalid("message scheduling cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False

    if cfg.persist_mode == "async":
        if cfg.storage != "file":
            raise _invalid("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise _invalid("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise _invalid("async persist mode is not supported with atomic batch publish")

    stream_subs: list[str] = []
    delivery_prefixes: list[str] = []
    api_prefixes: list[str] = []

    m = cfg.mirror
    if m is not None:
        if cfg.first_seq > 0:
            raise jserr.MIRROR_WITH_FIRST_SEQ()
        if cfg.subjects:
            raise jserr.MIRROR_WITH_SUBJECTS()
        if cfg.sources:
            raise jserr.MIRROR_WITH_SOURCES()
        if cfg.allow_msg_counter:
            raise jserr.MIRROR_WITH_COUNTERS()
        if cfg.allow_atomic:
            raise jserr.MIRROR_WITH_ATOMIC_PUBLISH()
        if cfg.allow_batched:
            raise jserr.MIRROR_WITH_BATCH_PUBLISH()
        if cfg.allow_msg_schedules:
            raise jserr.MIRROR_WITH_MSG_SCHEDULES()
        c = m.consumer
        if c is not None:
            if (not is_valid_asset_name(c.name) or not subject_is_literal(c.deliver_subject)
                    or not is_valid_subject(c.deliver_subject) or m.opt_start_seq != 0
                    or m.opt_start_time is not None or m.filter_subject):
                raise jserr.MIRROR_DURABLE_CONSUMER_CFG_INVALID()
        if m.filter_subject and m.subject_transforms:
            raise jserr.MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED()
        if cfg.subject_delete_marker_ttl > 0:
            raise _invalid("subject delete markers forbidden on mirrors")
        trs = m.subject_transforms or []
        for i, tr in enumerate(trs):
            if tr.src and not is_valid_subject(tr.src):
                raise jserr.MIRROR_INVALID_SUBJECT_FILTER(err=f"{_ERR_BAD_SUBJECT} {tr.src}")
            err = validate_mapping(tr.src, tr.dest)
            if err:
                raise jserr.MIRROR_INVALID_TRANSFORM_DESTINATION(err=err)
            for j, other in enumerate(trs):
                if i != j and subjects_collide(tr.src, other.src):
                    raise jserr.MIRROR_OVERLAPPING_SUBJECT_FILTERS()
        if m.external is None:
            if not is_valid_asset_name(m.name):
                raise jserr.MIRROR_INVALID_STREAM_NAME()
            origin = lookup(m.name)
            if origin is not None:
                if origin.subjects:
                    stream_subs.extend(origin.subjects)
                if cfg.max_msg_size > 0 and origin.max_msg_size > 0 and cfg.max_msg_size < origin.max_msg_size:
                    raise jserr.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG()
                if pedantic and cfg.mirror_direct != origin.allow_direct:
                    raise _pedantic("origin stream has direct get set, mirror has it disabled")
                cfg.mirror_direct = origin.allow_direct
        else:
            if m.external.deliver:
                delivery_prefixes.append(m.external.deliver)
            if m.external.api:
                api_prefixes.append(m.external.api)

    if cfg.sources and cfg.allow_msg_schedules:
        raise jserr.SOURCE_WITH_MSG_SCHEDULES()

    inames: set = set()
    cnames: set = set()
    for src in cfg.sources or []:
        if src is None or not is_valid_asset_name(src.name):
            raise jserr.SOURCE_INVALID_STREAM_NAME()
        iname = _source_index_name(src)
        if iname in inames:
            raise jserr.SOURCE_DUPLICATE_DETECTED()
        inames.add(iname)
        if src.filter_subject and src.subject_transforms:
            raise jserr.SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED()
        trs = src.subject_transforms or []
        for tr in trs:
            if tr.src and not is_valid_subject(tr.src):
                raise jserr.SOURCE_INVALID_SUBJECT_FILTER(err=f"{_ERR_BAD_SUBJECT} {tr.src}")
            err = validate_mapping(tr.src, tr.dest)
            if err:
                raise jserr.SOURCE_INVALID_TRANSFORM_DESTINATION(err=err)
        for i, tr in enumerate(trs):
            for j, other in enumerate(trs):
                if i != j and subject_is_subset_match(tr.src, other.src):
                    raise jserr.SOURCE_OVERLAPPING_SUBJECT_FILTERS()
        c = src.consumer
        if c is not None:
            if (not is_valid_asset_name(c.name) or not subject_is_literal(c.deliver_subject)
                    or not is_valid_subject(c.deliver_subject) or src.opt_start_seq != 0
                    or src.opt_start_time is not None or src.filter_subject):
                raise jserr.SOURCE_DURABLE_CONSUMER_CFG_INVALID()
            cname = (src.name, src.external.api if src.external else None, c.name)
            if cname in cnames:
                raise jserr.SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED()
            cnames.add(cname)
        if src.external is None:
            origin = lookup(src.name)
            if origin is not None:
                if origin.subjects:
                    stream_subs.extend(origin.subjects)
                if cfg.max_msg_size > 0 and origin.max_msg_size > 0 and cfg.max_msg_size < origin.max_msg_size:
                    raise jserr.SOURCE_MAX_MESSAGE_SIZE_TOO_BIG()
        else:
            if src.external.deliver:
                delivery_prefixes.append(src.external.deliver)
            if src.external.api:
                api_prefixes.append(src.external.api)

    for pfx in delivery_prefixes:
        if not is_valid_publish_subject(pfx):
            raise jserr.STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ(prefix=pfx)
        for sub in stream_subs:
            if subjects_collide(sub, f"{pfx}.{sub}"):
                raise jserr.STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS(prefix=pfx, subject=sub)
    for pfx in api_prefixes:
        if not is_valid_publish_subject(pfx):
            raise _invalid(f"stream external api prefix {go_quote(pfx)} must be a valid subject without wildcards")
        if subjects_collide(pfx, JS_API_PREFIX):
            raise jserr.STREAM_EXTERNAL_API_OVERLAP(prefix=pfx, subject=JS_API_PREFIX)

    _check_cycles(cfg, lookup)

    if not cfg.subjects:
        if cfg.mirror is None and not cfg.sources:
            cfg.subjects = [cfg.name]
    else:
        if cfg.mirror is not None:
            raise jserr.MIRROR_WITH_SUBJECTS()
        seen: set[str] = set()
        subs = cfg.subjects
        for i, subj in enumerate(subs):
            if not is_valid_subject(subj):
                raise _invalid("invalid subject")
            if subj in seen:
                raise _invalid("duplicate subjects detected")
            if subj == ">":
                if not cfg.no_ack:
                    raise _invalid("capturing all subjects requires no-ack to be true")
                if cfg.num_replicas != 1:
                    raise _invalid("capturing all subjects requires replicas of 1")
            if not cfg.no_ack:
                for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                    if subjects_collide(subj, ns) and not subject_is_subset_match(subj, "$JS.EVENT.>"):
                        raise _invalid("subjects that overlap with jetstream api require no-ack to be true")
                if subjects_collide(subj, "$SYS.>") and not subject_is_subset_match(subj, "$SYS.ACCOUNT.>"):
                    raise _invalid("subjects that overlap with system api require no-ack to be true")
            for other in subs[i + 1:]:
                if subjects_collide(other, subj):
                    raise _invalid(f"subject {go_quote(subj)} overlaps with {go_quote(other)}")
            seen.add(subj)

    if not cfg.subjects and not cfg.sources and cfg.mirror is None:
        raise _invalid("stream needs at least one configured subject or be a source/mirror")

    _check_limits_bytes(cfg, account_limits)

    st = cfg.subject_transform
    if st is not None:
        if st.src and not is_valid_subject(st.src):
            raise jserr.STREAM_TRANSFORM_INVALID_SOURCE(err=f"{_ERR_BAD_SUBJECT} {st.src}")
        err = validate_mapping(st.src, st.dest)
        if err:
            raise jserr.STREAM_TRANSFORM_INVALID_DESTINATION(err=err)

    rp = cfg.republish
    if rp is not None:
        if not rp.src:
            if pedantic:
                raise _pedantic("republish source can not be empty")
            rp.src = ">"
        if (rp.dest == ">" and rp.src == ">" and st is not None and cfg.subjects
                and len(cfg.subjects) == 1 and st.src == cfg.subjects[0]):
            if pedantic:
                raise _pedantic("implicit republish based on subject transform")
            rp.src, rp.dest = st.dest, st.dest
        if any(subjects_collide(rp.dest, s) for s in cfg.subjects or []):
            raise _invalid("stream configuration for republish destination forms a cycle")
        if check_subject_transform(rp.src, rp.dest) is not None:
            raise _invalid(f"stream configuration for republish with transform from '{rp.src}' to "
                           f"'{rp.dest}' not valid")

    if cfg.placement is not None and cfg.placement == Placement():
        cfg.placement = None
    if cfg.placement is not None and cfg.placement.preferred:
        raise _invalid("preferred server not permitted in placement")
    return cfg


def _source_index_name(src: StreamSource) -> tuple:
    ext = src.external.api if src.external is not None else None
    cons = src.consumer.name if src.consumer is not None else None
    if not src.subject_transforms:
        pairs: tuple = ((src.filter_subject or ">", ">"),)
    else:
        pairs = tuple((tr.src or ">", tr.dest or ">") for tr in src.subject_transforms)
    return (src.name, ext, cons, pairs)


def _check_cycles(cfg: StreamConfig, lookup: StreamLookup) -> None:
    todo = [cfg]
    visited: set[str] = set()
    while todo:
        c = todo.pop(0)
        visited.add(c.name)
        for src in c.sources or []:
            if src.external is not None:
                continue
            if src.name in visited:
                if not src.filter_subject or any(subjects_collide(s, src.filter_subject) for s in c.subjects or []):
                    raise _invalid("detected cycle")
            else:
                other = lookup(src.name)
                if other is not None:
                    todo.append(other)
        m = c.mirror
        if m is not None and m.external is None:
            if m.name in visited:
                raise _invalid("detected cycle")
            other = lookup(m.name)
            if other is not None:
                todo.append(other)


def check_stream_update(
    old: StreamConfig,
    new: StreamConfig,
    *,
    clustered: bool = False,
    consumers: Iterable[tuple[str, ConsumerConfig]] | None = None,
) -> StreamConfig:
    """nats-server's rules for updating ``old`` to ``new`` (both normalized). Adjusts ``new`` in place
    for a sealed stream (max_age 0, discard new, deny delete/purge, no roll-ups) and returns it.

    ``consumers`` (name, config) lets it refuse stream consumer limits that existing consumers exceed
    ("change to limits violates consumers: ...", wrapped in STREAM_UPDATE like nats-server).
    """
    if new.name != old.name:
        raise _invalid("stream configuration name must match original")
    if not clustered and new.num_replicas > 1:
        raise jserr.STREAM_REPLICAS_NOT_SUPPORTED()
    if new.storage != old.storage:
        raise _invalid("stream configuration update can not change storage type")
    if new.retention != old.retention and "workqueue" in (old.retention, new.retention):
        raise _invalid("stream configuration update can not change retention policy to/from workqueue")
    if old.sealed and not new.sealed:
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not new.deny_delete:
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not new.deny_purge:
        raise _invalid("stream configuration update can not cancel deny purge")
    if new.mirror is not None and new.mirror != old.mirror:
        raise jserr.STREAM_MIRROR_NOT_UPDATABLE()
    if new.discard_new_per_subject:
        if new.discard != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if new.max_msgs_per_subject <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise _invalid("message TTL status can not be disabled")
    if new.allow_msg_counter != old.allow_msg_counter:
        raise _invalid("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not new.allow_msg_schedules:
        raise _invalid("message schedules can not be disabled")
    if old.persist_mode != new.persist_mode:
        raise _invalid("stream configuration update can not change persist mode")
    if new.sealed:
        new.max_age = 0
        new.discard = "new"
        new.deny_delete = new.deny_purge = True
        new.allow_rollup_hdrs = False
    if consumers is not None:
        o_it, n_it = old.consumer_limits.inactive_threshold, new.consumer_limits.inactive_threshold
        o_map, n_map = old.consumer_limits.max_ack_pending, new.consumer_limits.max_ack_pending
        if (n_it > 0 and o_it != n_it) or (n_map > 0 and o_map != n_map):
            bad = [name for name, cc in consumers
                   if (n_it > 0 and cc.inactive_threshold > n_it) or (n_map > 0 and cc.max_ack_pending > n_map)]
            if bad:
                raise jserr.STREAM_UPDATE(err="change to limits violates consumers: " + ", ".join(bad))
    return new


# ---------------------------------------------------------------------------------------------------
# Consumer configuration: defaults and validation

_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


def consumer_replicas(cfg: ConsumerConfig, stream: StreamConfig) -> int:
    """The replica count a consumer really gets on ``stream``."""
    if cfg.num_replicas == 0 or cfg.num_replicas > stream.num_replicas:
        if not cfg.durable_name and stream.retention == "limits" and cfg.num_replicas == 0:
            return 1
        return stream.num_replicas
    return cfg.num_replicas


def set_consumer_defaults(cfg: ConsumerConfig, stream: StreamConfig, *, pedantic: bool = False,
                          server_limits: ServerLimits | None = None,
                          account_limits: AccountLimits | None = None) -> None:
    """nats-server's consumer defaults, in place (raises PEDANTIC errors in pedantic mode)."""
    lim = server_limits or ServerLimits()
    acc_map = account_limits.max_ack_pending if account_limits is not None else -1
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        if pedantic and cfg.max_deliver < -1:
            raise _pedantic("max_deliver must be set to -1")
        cfg.max_deliver = -1
    for field, name in (("max_waiting", "max_waiting"), ("max_ack_pending", None), ("max_batch", "max_batch"),
                        ("max_expires", "max_expires"), ("max_bytes", "max_bytes"),
                        ("idle_heartbeat", "idle_heartbeat"), ("inactive_threshold", "inactive_threshold"),
                        ("priority_timeout", "priority_timeout")):
        v = getattr(cfg, field)
        if field == "max_ack_pending":
            if v < -1:
                if pedantic:
                    raise _pedantic("max_ack_pending must be set to -1")
                cfg.max_ack_pending = -1
            continue
        if v < 0:
            if pedantic:
                raise _pedantic(f"{name} must not be negative")
            setattr(cfg, field, 0)
    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = DEFAULT_MAX_WAITING
    if cfg.ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        cfg.ack_wait = DEFAULT_ACK_WAIT
    if cfg.backoff:
        if pedantic and cfg.ack_wait != cfg.backoff[0]:
            raise _pedantic("first backoff value has to equal batch AckWait")
        cfg.ack_wait = cfg.backoff[0]
    cl = stream.consumer_limits
    if cfg.max_ack_pending == 0:
        if pedantic and cl.max_ack_pending > 0:
            raise _pedantic("max_ack_pending must be set if it's configured in stream limits")
        cfg.max_ack_pending = cl.max_ack_pending
    if cfg.inactive_threshold == 0:
        if pedantic and cl.inactive_threshold > 0:
            raise _pedantic("inactive_threshold must be set if it's configured in stream limits")
        cfg.inactive_threshold = cl.inactive_threshold
    if cfg.max_ack_pending == 0 and cfg.ack_policy != "none":
        pending = DEFAULT_MAX_ACK_PENDING
        if 0 < lim.max_ack_pending < pending:
            pending = lim.max_ack_pending
        if 0 < acc_map < pending:
            pending = acc_map
        cfg.max_ack_pending = pending
    if not cfg.deliver_subject and cfg.max_batch == 0 and lim.max_request_batch > 0:
        if pedantic:
            raise _pedantic("max_request_batch must be set if it's JetStream limits are set")
        cfg.max_batch = lim.max_request_batch
    if cfg.priority_policy == "pinned_client" and cfg.priority_timeout == 0:
        cfg.priority_timeout = DEFAULT_PINNED_TTL
    if cfg.ack_policy == "flow_control" and not pedantic:
        cfg.flow_control = True
        cfg.idle_heartbeat = FLOW_CONTROL_HEARTBEAT


def check_consumer_config(cfg: ConsumerConfig, stream: StreamConfig, *,
                          server_limits: ServerLimits | None = None,
                          account_limits: AccountLimits | None = None,
                          is_recovering: bool = False) -> None:
    """nats-server's consumer configuration check (after defaults)."""
    lim = server_limits or ServerLimits()
    acc_map = account_limits.max_ack_pending if account_limits is not None else -1
    if cfg.name and not is_valid_asset_name(cfg.name):
        raise _invalid("consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not is_valid_asset_name(cfg.durable_name):
        raise _invalid("consumer durable name can not contain '.', '*', '>', '\\', '/'")
    if cfg.num_replicas > 0 and cfg.num_replicas > stream.num_replicas:
        raise jserr.CONSUMER_REPLICAS_EXCEEDS_STREAM()
    if cfg.num_replicas < 0:
        raise jserr.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()
    if stream.retention in ("interest", "workqueue"):
        if not is_recovering and cfg.num_replicas != 0 and cfg.num_replicas != stream.num_replicas:
            raise jserr.CONSUMER_REPLICAS_SHOULD_MATCH_STREAM()
    if cfg.ack_policy not in ACK_POLICIES:
        raise jserr.CONSUMER_ACK_POLICY_INVALID()
    if cfg.replay_policy not in REPLAY_POLICIES:
        raise jserr.CONSUMER_REPLAY_POLICY_INVALID()
    for b in cfg.backoff or []:
        if b < 0:
            raise jserr.CONSUMER_BACKOFF_NEGATIVE()
    if cfg.ack_wait < 0:
        raise jserr.CONSUMER_ACK_WAIT_NEGATIVE()
    if cfg.ack_policy == "flow_control":
        if not cfg.deliver_subject:
            raise jserr.CONSUMER_ACK_FC_REQUIRES_PUSH()
        if not cfg.flow_control:
            raise jserr.CONSUMER_ACK_FC_REQUIRES_FC()
        if cfg.idle_heartbeat != FLOW_CONTROL_HEARTBEAT:
            raise _invalid("flow control ack policy heartbeat needs to be 1s")
        if cfg.max_ack_pending <= 0:
            raise jserr.CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING()
        if cfg.ack_wait != 0 or cfg.backoff:
            raise jserr.CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT()
        if cfg.max_deliver > 0:
            raise jserr.CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER()
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise jserr.CONSUMER_MAX_DELIVER_BACKOFF()
    if len(cfg.description.encode()) > MAX_DESCRIPTION_LEN:
        raise jserr.CONSUMER_DESCRIPTION_TOO_LONG(max=MAX_DESCRIPTION_LEN)

    if cfg.deliver_subject:
        if not subject_is_literal(cfg.deliver_subject):
            raise jserr.CONSUMER_DELIVER_TO_WILDCARDS()
        if not is_valid_subject(cfg.deliver_subject):
            raise jserr.CONSUMER_INVALID_DELIVER_SUBJECT()
        if any(subject_is_subset_match(cfg.deliver_subject, s) for s in stream.subjects or []):
            raise jserr.CONSUMER_DELIVER_CYCLE()
        if cfg.max_waiting != 0:
            raise jserr.CONSUMER_PUSH_MAX_WAITING()
        if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
            raise jserr.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED()
        if 0 < cfg.idle_heartbeat < 100 * MS:
            raise jserr.CONSUMER_SMALL_HEARTBEAT()
    else:
        if cfg.ack_policy == "none" and stream.retention == "workqueue":
            raise jserr.CONSUMER_PULL_REQUIRES_ACK()
        if cfg.rate_limit_bps > 0:
            raise jserr.CONSUMER_PULL_WITH_RATE_LIMIT()
        if cfg.max_waiting < 0:
            raise jserr.CONSUMER_MAX_WAITING_NEGATIVE()
        if cfg.idle_heartbeat > 0:
            raise jserr.CONSUMER_HB_REQUIRES_PUSH()
        if cfg.flow_control:
            raise jserr.CONSUMER_FC_REQUIRES_PUSH()
        if cfg.max_batch < 0:
            raise jserr.CONSUMER_MAX_REQUEST_BATCH_NEGATIVE()
        if cfg.max_expires != 0 and cfg.max_expires < MS:
            raise jserr.CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL()
        if lim.max_request_batch > 0 and cfg.max_batch > lim.max_request_batch:
            raise jserr.CONSUMER_MAX_REQUEST_BATCH_EXCEEDED(limit=lim.max_request_batch)
    if lim.max_ack_pending > 0 and cfg.max_ack_pending > lim.max_ack_pending:
        raise jserr.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=lim.max_ack_pending)
    if acc_map > 0 and cfg.max_ack_pending > acc_map:
        raise jserr.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=acc_map)
    cl = stream.consumer_limits
    if cl.max_ack_pending > 0 and cfg.max_ack_pending > cl.max_ack_pending:
        raise jserr.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=cl.max_ack_pending)
    if cl.inactive_threshold > 0 and cfg.inactive_threshold > cl.inactive_threshold:
        raise jserr.CONSUMER_INACTIVE_THRESHOLD_EXCESS(limit=format_duration(cl.inactive_threshold))

    if cfg.direct:
        if not cfg.deliver_subject:
            raise jserr.CONSUMER_DIRECT_REQUIRES_PUSH()
        if cfg.durable_name:
            raise jserr.CONSUMER_DIRECT_REQUIRES_EPHEMERAL()

    if cfg.filter_subject and cfg.filter_subjects:
        raise jserr.CONSUMER_DUPLICATE_FILTER_SUBJECTS()
    if cfg.filter_subject and not is_valid_subject(cfg.filter_subject):
        raise _invalid(_ERR_BAD_SUBJECT)
    for f in cfg.filter_subjects or []:
        if not f:
            raise jserr.CONSUMER_EMPTY_FILTER()
    filters = cfg.filters()
    for i, s in enumerate(filters):
        if not is_valid_subject(s):
            raise _invalid(_ERR_BAD_SUBJECT)
        for j, o in enumerate(filters):
            if i != j and subject_is_subset_match(s, o):
                raise jserr.CONSUMER_OVERLAPPING_SUBJECT_FILTERS()

    def bad_start(dp: str, what: str) -> ApiError:
        return jserr.CONSUMER_INVALID_POLICY(
            err=f"consumer delivery policy is deliver {dp}, but optional start {what} is also set")

    def not_set(dp: str, what: str) -> ApiError:
        return jserr.CONSUMER_INVALID_POLICY(
            err=f"consumer delivery policy is deliver {dp}, but optional {what} is not set")

    dp = cfg.deliver_policy
    if dp in ("all", "last", "last_per_subject", "new"):
        label = "last per subject" if dp == "last_per_subject" else dp
        if cfg.opt_start_seq > 0:
            raise bad_start(label, "sequence")
        if cfg.opt_start_time is not None:
            raise bad_start(label, "time")
        if dp == "last_per_subject" and not cfg.filter_subject and not cfg.filter_subjects:
            raise not_set(label, "filter subject")
    elif dp == "by_start_sequence":
        if cfg.opt_start_seq == 0:
            raise not_set("by start sequence", "start sequence")
        if cfg.opt_start_time is not None:
            raise bad_start("by start sequence", "time")
    elif dp == "by_start_time":
        if cfg.opt_start_time is None:
            raise not_set("by start time", "start time")
        if cfg.opt_start_seq != 0:
            raise bad_start("by start time", "start sequence")

    if cfg.sample_freq:
        s = cfg.sample_freq[:-1] if cfg.sample_freq.endswith("%") else cfg.sample_freq
        try:
            freq = _atoi(s)
        except ValueError:
            raise jserr.CONSUMER_INVALID_SAMPLING(
                err=f'strconv.Atoi: parsing {go_quote(s)}: invalid syntax'
                if not re.fullmatch(r"[+-]?[0-9]+", s) else
                f'strconv.Atoi: parsing {go_quote(s)}: value out of range') from None
        if freq < 0:
            raise jserr.CONSUMER_INVALID_SAMPLING(err=None)

    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise jserr.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS()
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise jserr.CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH()
    if sum(len(k.encode()) + len(v.encode()) for k, v in (cfg.metadata or {}).items()) > MAX_METADATA_LEN:
        raise jserr.CONSUMER_METADATA_LENGTH(limit=f"{MAX_METADATA_LEN // 1024}KB")
    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise jserr.CONSUMER_PUSH_WITH_PRIORITY_GROUP()
        if not cfg.priority_groups:
            raise jserr.CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP()
        for g in cfg.priority_groups:
            if not g:
                raise jserr.CONSUMER_EMPTY_GROUP_NAME()
            if not _GROUP_NAME.fullmatch(g):
                raise jserr.CONSUMER_INVALID_GROUP_NAME()
    else:
        if cfg.priority_groups:
            raise jserr.CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE()
        if cfg.priority_timeout > 0:
            raise jserr.CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE()
    if stream.placement is not None and stream.placement.preferred:
        raise _invalid("preferred server not permitted in placement")


def _times_equal(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return time_ns(a) == time_ns(b)


def check_consumer_update(old: ConsumerConfig, new: ConsumerConfig, *,
                          deliver_subject_in_use: Callable[[str], bool] | None = None) -> None:
    """nats-server's rules for changing an existing consumer from ``old`` to ``new`` (both with defaults).

    The errors are plain messages wrapped as CONSUMER_CREATE (500/10012) the way the create request
    reports them (except consumer name in use / max deliver vs backoff, which keep their own codes).
    ``deliver_subject_in_use(old_deliver_subject)``: is the push consumer still bound (someone
    subscribed)? Then its deliver subject may not change.
    """
    if old == new:
        return

    def fail(msg: str) -> ApiError:
        return jserr.CONSUMER_CREATE(err=msg)

    if old.deliver_policy != new.deliver_policy:
        raise fail("deliver policy can not be updated")
    if old.mem_storage != new.mem_storage:
        raise fail("storage type can not be updated")
    if old.direct != new.direct:
        raise fail("direct can not be updated")
    if old.sourcing != new.sourcing:
        raise fail("sourcing can not be updated")
    if old.opt_start_seq != new.opt_start_seq:
        raise fail("start sequence can not be updated")
    if not _times_equal(old.opt_start_time, new.opt_start_time):
        raise fail("start time can not be updated")
    if old.ack_policy != new.ack_policy:
        raise fail("ack policy can not be updated")
    if old.replay_policy != new.replay_policy:
        raise fail("replay policy can not be updated")
    if old.idle_heartbeat != new.idle_heartbeat:
        raise fail("heart beats can not be updated")
    if old.flow_control != new.flow_control:
        raise fail("flow control can not be updated")
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            raise fail("can not update pull consumer to push based")
        if not new.deliver_subject:
            raise fail("can not update push consumer to pull based")
        if deliver_subject_in_use is not None and deliver_subject_in_use(old.deliver_subject):
            raise jserr.CONSUMER_NAME_EXIST()
    if old.max_waiting != new.max_waiting:
        raise fail("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        raise jserr.CONSUMER_MAX_DELIVER_BACKOFF()


def parse_consumer_create_subject(tokens: Sequence[str], req: CreateConsumerRequest) -> tuple[str, str, str]:
    """Checks a CONSUMER.CREATE request against its subject, like nats-server, and fills
    ``req.config.name`` the way it does. ``tokens`` are the subject tokens after ``$JS.API.CONSUMER.``:
    ``["CREATE", stream]``, ``["CREATE", stream, consumer, filter...]`` or
    ``["DURABLE", "CREATE", stream, durable]``. Returns (stream, consumer name, filter from subject).
    """
    cfg = req.config
    filtered = ""
    if tokens and tokens[0] == "DURABLE":
        kind = "durable"
        if len(tokens) != 4:
            raise jserr.CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT()
        stream, cname = tokens[2], tokens[3]
    elif len(tokens) == 2:
        kind = "ephemeral"
        stream, cname = tokens[1], cfg.name
    else:
        kind = "new"
        stream = tokens[1] if len(tokens) > 1 else ""
        cname = tokens[2] if len(tokens) > 2 else ""
        if len(tokens) > 3:
            filtered = ".".join(tokens[3:])
    if stream != req.stream_name:
        raise jserr.STREAM_MISMATCH()
    if cname and ("\\" in cname or "/" in cname):
        raise jserr.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS()
    if kind == "durable":
        if not cfg.durable_name:
            raise jserr.CONSUMER_DURABLE_NAME_NOT_SET()
        if cname != cfg.durable_name:
            raise jserr.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        cfg.name = cname
    if kind == "new":
        if cfg.durable_name and cname != cfg.durable_name:
            raise jserr.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        cfg.name = cname
    if kind == "ephemeral" and cfg.durable_name:
        raise jserr.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME()
    if filtered and cfg.filter_subjects:
        raise jserr.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED()
    if filtered and cfg.filter_subject != filtered:
        raise jserr.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH()
    return stream, cname, filtered


def normalize_consumer_config(
    stream: StreamConfig,
    cfg: Union[ConsumerConfig, dict, bytes, str],
    action: str = "",
    *,
    pedantic: bool = False,
    existing: ConsumerConfig | None = None,
    others: Sequence[ConsumerConfig] | None = None,
    server_limits: ServerLimits | None = None,
    account_limits: AccountLimits | None = None,
    clustered: bool = False,
    is_recovering: bool = False,
    deliver_subject_in_use: Callable[[str], bool] | None = None,
) -> ConsumerConfig:
    """Defaults plus validation for a consumer created on ``stream``; returns the configuration to store.

    ``action``: ``""`` (create or update), ``"create"`` or ``"update"``. ``existing``: the current
    configuration of the consumer with the same name, if any (then the update rules apply, and with
    ``action="create"`` a different configuration is CONSUMER_ALREADY_EXISTS; with ``"update"`` a
    missing one is CONSUMER_DOES_NOT_EXIST). ``others``: the stream's other consumers (not direct or
    sourcing ones): max consumers and workqueue rules. Ephemerals get ``inactive_threshold`` 5s when
    unset. Name checks tied to the request subject are in ``parse_consumer_create_subject``.
    """
    if isinstance(cfg, (bytes, bytearray, str)):
        cfg = go_decode(cfg, ConsumerConfig)
    elif isinstance(cfg, dict):
        cfg = from_dict(cfg, ConsumerConfig)
    else:
        cfg = cfg.copy()
    if not clustered and cfg.num_replicas > 1:
        raise jserr.STREAM_REPLICAS_NOT_SUPPORTED()
    if existing is not None:
        cfg.pause_until = existing.pause_until
        if cfg.sourcing and cfg.durable_name:
            cfg.deliver_policy = existing.deliver_policy
            cfg.opt_start_seq = existing.opt_start_seq
            cfg.opt_start_time = existing.opt_start_time
    set_static_consumer_metadata(cfg)
    set_consumer_defaults(cfg, stream, pedantic=pedantic, server_limits=server_limits,
                          account_limits=account_limits)
    check_consumer_config(cfg, stream, server_limits=server_limits, account_limits=account_limits,
                          is_recovering=is_recovering)
    limitable = [o for o in (others or []) if not o.direct and not o.sourcing]
    if existing is not None:
        if action == "create" and not consumer_configs_equal(existing, cfg):
            raise jserr.CONSUMER_ALREADY_EXISTS()
        if stream.retention == "workqueue":
            _check_wq_unique(cfg.filters(), limitable)
        check_consumer_update(existing, cfg, deliver_subject_in_use=deliver_subject_in_use)
        if cfg.pause_until is not None:
            cfg.pause_until = to_utc_time(cfg.pause_until)
        # nats-server stamps the ephemeral default only when the value changes, and judges "ephemeral"
        # by the consumer as it was (an update may drop durable_name without making it ephemeral).
        if cfg.inactive_threshold != existing.inactive_threshold and not existing.durable_name \
                and cfg.inactive_threshold <= 0:
            cfg.inactive_threshold = DEFAULT_EPHEMERAL_INACTIVE
        return cfg
    if action == "update":
        raise jserr.CONSUMER_DOES_NOT_EXIST()
    if not clustered and not is_recovering:
        maxc = stream.max_consumers
        acc_max = account_limits.max_consumers if account_limits is not None else -1
        if maxc <= 0 or (acc_max > 0 and acc_max < maxc):
            maxc = acc_max
        if maxc > 0 and len(limitable) >= maxc:
            raise jserr.MAXIMUM_CONSUMERS_LIMIT()
    if stream.retention == "workqueue" and not cfg.direct and not cfg.sourcing:
        if cfg.ack_policy not in ("explicit", "flow_control"):
            raise jserr.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK()
        if cfg.deliver_policy != "all":
            raise jserr.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL()
        if limitable:
            filters = cfg.filters()
            if not filters:
                raise jserr.CONSUMER_WQ_MULTIPLE_UNFILTERED()
            if not is_recovering:
                _check_wq_unique(filters, limitable)
    if cfg.durable_name and len(cfg.durable_name) > MAX_NAME_LEN:
        raise jserr.CONSUMER_NAME_TOO_LONG(max=MAX_NAME_LEN)
    name = cfg.durable_name or cfg.name
    if name and not is_valid_asset_name(name):
        raise jserr.CONSUMER_BAD_DURABLE_NAME()
    if not cfg.durable_name and cfg.inactive_threshold <= 0:
        cfg.inactive_threshold = DEFAULT_EPHEMERAL_INACTIVE
    return cfg


def _check_wq_unique(filters: list[str], others: Sequence[ConsumerConfig]) -> None:
    for part in filters:
        for o in others:
            ofs = o.filters()
            if not ofs:
                raise jserr.CONSUMER_WQ_CONSUMER_NOT_UNIQUE()
            if any(subjects_collide(part, f) for f in ofs):
                raise jserr.CONSUMER_WQ_CONSUMER_NOT_UNIQUE()


# ---------------------------------------------------------------------------------------------------
# Whole request flows (everything up to storing the result), in nats-server's order


def normalize_stream_update(
    old: StreamConfig | None,
    raw: Union[StreamConfig, dict, bytes, str],
    *,
    subject_name: str | None = None,
    pedantic: bool | None = None,
    lookup_stream: StreamLookup | None = None,
    subjects_overlap: Callable[[list[str]], bool] | None = None,
    server_limits: ServerLimits | None = None,
    account_limits: AccountLimits | None = None,
    clustered: bool = False,
    consumers: Iterable[tuple[str, ConsumerConfig]] | None = None,
) -> StreamConfig:
    """A STREAM.UPDATE request up to the new configuration: decode and check it, the name from the
    subject, the stream itself (``old`` ``None``: STREAM_NOT_FOUND), the update rules, then the other
    streams' subjects (``subjects_overlap`` should ignore the stream being updated)."""
    cfg = normalize_stream_config(raw, is_create=False, pedantic=pedantic, subject_name=subject_name,
                                  lookup_stream=lookup_stream, server_limits=server_limits,
                                  account_limits=account_limits)
    if old is None:
        raise jserr.STREAM_NOT_FOUND()
    cfg = check_stream_config(cfg, pedantic=bool(pedantic), lookup_stream=lookup_stream,
                              server_limits=server_limits, account_limits=account_limits)
    check_stream_update(old, cfg, clustered=clustered, consumers=consumers)
    if subjects_overlap is not None and cfg.subjects and subjects_overlap(list(cfg.subjects)):
        raise jserr.STREAM_SUBJECT_OVERLAP()
    return cfg


class ConsumerCreate(msgspec.Struct, kw_only=True):
    """The outcome of ``prepare_consumer_create``."""

    stream: str
    name: str  # "" when the server has to generate one (``generate_consumer_name()``)
    config: ConsumerConfig
    existing: bool  # an existing consumer gets this (updated) configuration
    action: str


def prepare_consumer_create(
    tokens: Sequence[str],
    body: bytes | str | CreateConsumerRequest | None,
    *,
    lookup_stream: StreamLookup,
    consumers: Callable[[str], dict[str, ConsumerConfig]],
    server_limits: ServerLimits | None = None,
    account_limits: AccountLimits | None = None,
    clustered: bool = False,
    deliver_subject_in_use: Callable[[str], bool] | None = None,
) -> ConsumerCreate:
    """A CONSUMER.CREATE / CONSUMER.DURABLE.CREATE request up to the configuration to store.

    ``tokens``: subject tokens after ``$JS.API.CONSUMER.`` (see ``parse_consumer_create_subject``).
    ``consumers(stream)``: the stream's consumers by name (direct/sourcing ones included; they are
    skipped where nats-server skips them). ``deliver_subject_in_use(subject)``: does the account have
    a subscriber on it (a bound push consumer may not move its deliver subject). Raises the
    ``ApiError`` nats-server answers with.
    """
    if isinstance(body, CreateConsumerRequest):
        req = body.copy()
    else:
        req = go_decode(body, CreateConsumerRequest)
    stream, cname, _ = parse_consumer_create_subject(tokens, req)
    if not clustered and req.config.num_replicas > 1:
        raise jserr.STREAM_REPLICAS_NOT_SUPPORTED()
    scfg = lookup_stream(req.stream_name)
    if scfg is None:
        raise jserr.STREAM_NOT_FOUND()
    cfg = req.config
    name = cfg.durable_name or cfg.name
    current = consumers(req.stream_name) or {}
    existing = current.get(name) if name else None
    others = [c for n, c in current.items() if n != name]
    out = normalize_consumer_config(scfg, cfg, req.action, pedantic=req.pedantic, existing=existing,
                                    others=others, server_limits=server_limits,
                                    account_limits=account_limits, clustered=clustered,
                                    deliver_subject_in_use=deliver_subject_in_use)
    return ConsumerCreate(stream=stream, name=name, config=out, existing=existing is not None,
                          action=req.action)
