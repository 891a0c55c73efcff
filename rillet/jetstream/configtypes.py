"""JetStream stream and consumer configuration types: the structs, their Go wire shape and the API-level metadata.

Sans-IO, following nats-server's JSON field names and defaults. The checks that fill in defaults and refuse
bad configurations are in ``rillet.jetstream.streamconfig`` and ``rillet.jetstream.consumerconfig``.

* Times are Go's RFC3339Nano text (``rillet.gocompat.gotime``); durations stay ``int`` nanoseconds everywhere.
* Bodies are decoded and encoded by the Go-compatible JSON codec in ``rillet.gocompat.jsoncodec``, which
  reads each field's Go type from the ``Annotated`` markers used here.
* msgspec Structs for the configurations. Attribute names are the JSON names. Fields that are pointers,
  slices or maps in Go are ``Optional`` here (``None`` = absent/nil).
* The ``_nats.*`` metadata keys nats-server keeps in a configuration (the API level a stream or consumer
  needs, and the server version/level shown in responses), and configuration equality that ignores them.
"""
from __future__ import annotations

from typing import Annotated, Any, Callable, Optional

import msgspec

from rillet.jetstream import errors as jserr
from rillet.jetstream.errors import ApiError
from rillet.gocompat.jsoncodec import (
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
    go_json,
    to_go,
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
    default_max_consumers: Int = 0  # (2.15) a stream's max_consumers when it sets none
    __omitempty__ = frozenset({
        "max_request_batch", "max_ack_pending", "max_ha_assets", "max_duplicate_window",
        "max_batch_inflight_per_stream", "max_batch_inflight_total", "max_batch_size", "max_batch_timeout",
        "default_max_consumers"})


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
# Names and the errors both checks use

StreamLookup = Callable[[str], Optional[StreamConfig]]
"""How the checks see the account's other streams: a stream's configuration by name, or ``None``."""


def is_valid_asset_name(name: str) -> bool:
    """Stream and consumer names: no '.', '*', '>', whitespace, '\\' or '/'."""
    if not name:
        return False
    return not any(c in name for c in " \t\r\n\f.*>\\/")


def invalid_config(msg: str) -> ApiError:
    """STREAM_INVALID_CONFIG (nats-server uses it for consumer configuration errors too)."""
    return jserr.STREAM_INVALID_CONFIG(err=msg)


def pedantic_error(msg: str) -> ApiError:
    return jserr.PEDANTIC(err=msg)


# ---------------------------------------------------------------------------------------------------
# Metadata (API level bookkeeping nats-server keeps in the config metadata)


def with_dynamic_metadata(cfg: Any, version: str | None = None, level: int = JS_API_LEVEL) -> Any:
    """A copy of a stream/consumer config carrying ``_nats.ver`` and ``_nats.level`` (for responses)."""
    if version is None:
        import rillet
        version = rillet.SERVER_VERSION
    md = dict(cfg.metadata or {})
    md[META_SERVER_VERSION] = version
    md[META_SERVER_LEVEL] = str(level)
    return msgspec.structs.replace(cfg, metadata=md)


def set_required_level(cfg: Any, level: int) -> None:
    """Record the API level a stream's or consumer's features need (``_nats.req.level``) in its config's
    metadata, without the dynamic keys (``_nats.ver``, ``_nats.level``)."""
    md = dict(cfg.metadata or {})
    md.pop(META_SERVER_VERSION, None)
    md.pop(META_SERVER_LEVEL, None)
    md[META_REQUIRED_LEVEL] = str(level)
    cfg.metadata = md


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


def configs_equal(existing: Any, new: Any) -> bool:
    """Is a create request for an existing stream or consumer the same configuration (then it is answered
    with the existing one instead of an "already in use/exists" error)? Compares like nats-server: after
    taking the stored ``_nats.req.level``, field by field."""
    a = new.copy()
    _copy_required_level(a, existing)
    b = existing.copy()
    b.metadata = _strip_dynamic(b.metadata) or None
    a.metadata = a.metadata or None
    return a == b
