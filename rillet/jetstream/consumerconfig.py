"""JetStream consumer configuration: nats-server's defaults, validation and update rules, and the
CONSUMER.CREATE request flow up to the configuration to store, sans-IO.

``normalize_consumer_config`` (with ``set_consumer_defaults``, ``check_consumer_config`` and
``check_consumer_update``), ``parse_consumer_create_subject`` and ``prepare_consumer_create``, in nats-server's
order and with the exact error it answers with (``ApiError``). The types are in ``rillet.jetstream.configtypes``.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence, Union

import msgspec

from rillet.gocompat.goquote import go_quote
from rillet.gocompat.gotime import format_duration, time_ns, to_utc_time
from rillet.jetstream import errors as jserr
from rillet.jetstream.configtypes import (
    ACK_POLICIES,
    DEFAULT_ACK_WAIT,
    DEFAULT_EPHEMERAL_INACTIVE,
    DEFAULT_MAX_ACK_PENDING,
    DEFAULT_MAX_WAITING,
    DEFAULT_PINNED_TTL,
    FLOW_CONTROL_HEARTBEAT,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    MS,
    REPLAY_POLICIES,
    AccountLimits,
    ConsumerConfig,
    CreateConsumerRequest,
    ServerLimits,
    StreamConfig,
    StreamLookup,
    configs_equal,
    invalid_config,
    is_valid_asset_name,
    pedantic_error,
    set_required_level,
)
from rillet.jetstream.errors import ApiError
from rillet.jetstream.api.codec import from_dict, go_decode
from rillet.subjects.destination import _ERR_BAD_SUBJECT, _atoi
from rillet.subjects.validate import is_valid_subject, subject_is_literal, subject_is_subset_match, subjects_collide


def set_static_consumer_metadata(cfg: ConsumerConfig) -> None:
    level = 0
    if cfg.pause_until and time_ns(cfg.pause_until) != 0:
        level = max(level, 1)
    if cfg.priority_policy != "none" or cfg.priority_timeout != 0 or cfg.priority_groups:
        level = max(level, 1)
    if cfg.ack_policy == "flow_control":
        level = max(level, 4)
    set_required_level(cfg, level)


_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


def set_consumer_defaults(cfg: ConsumerConfig, stream: StreamConfig, *, pedantic: bool = False,
                          server_limits: ServerLimits | None = None,
                          account_limits: AccountLimits | None = None) -> None:
    """nats-server's consumer defaults, in place (raises PEDANTIC errors in pedantic mode)."""
    lim = server_limits or ServerLimits()
    acc_map = account_limits.max_ack_pending if account_limits is not None else -1
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        if pedantic and cfg.max_deliver < -1:
            raise pedantic_error("max_deliver must be set to -1")
        cfg.max_deliver = -1
    for field, name in (("max_waiting", "max_waiting"), ("max_ack_pending", None), ("max_batch", "max_batch"),
                        ("max_expires", "max_expires"), ("max_bytes", "max_bytes"),
                        ("idle_heartbeat", "idle_heartbeat"), ("inactive_threshold", "inactive_threshold"),
                        ("priority_timeout", "priority_timeout")):
        v = getattr(cfg, field)
        if field == "max_ack_pending":
            if v < -1:
                if pedantic:
                    raise pedantic_error("max_ack_pending must be set to -1")
                cfg.max_ack_pending = -1
            continue
        if v < 0:
            if pedantic:
                raise pedantic_error(f"{name} must not be negative")
            setattr(cfg, field, 0)
    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = DEFAULT_MAX_WAITING
    if cfg.ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        cfg.ack_wait = DEFAULT_ACK_WAIT
    if cfg.backoff:
        if pedantic and cfg.ack_wait != cfg.backoff[0]:
            raise pedantic_error("first backoff value has to equal batch AckWait")
        cfg.ack_wait = cfg.backoff[0]
    cl = stream.consumer_limits
    if cfg.max_ack_pending == 0:
        if pedantic and cl.max_ack_pending > 0:
            raise pedantic_error("max_ack_pending must be set if it's configured in stream limits")
        cfg.max_ack_pending = cl.max_ack_pending
    if cfg.inactive_threshold == 0:
        if pedantic and cl.inactive_threshold > 0:
            raise pedantic_error("inactive_threshold must be set if it's configured in stream limits")
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
            raise pedantic_error("max_request_batch must be set if it's JetStream limits are set")
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
        raise invalid_config("consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not is_valid_asset_name(cfg.durable_name):
        raise invalid_config("consumer durable name can not contain '.', '*', '>', '\\', '/'")
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
            raise invalid_config("flow control ack policy heartbeat needs to be 1s")
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
        raise invalid_config(_ERR_BAD_SUBJECT)
    for f in cfg.filter_subjects or []:
        if not f:
            raise jserr.CONSUMER_EMPTY_FILTER()
    filters = cfg.filters()
    for i, s in enumerate(filters):
        if not is_valid_subject(s):
            raise invalid_config(_ERR_BAD_SUBJECT)
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
        raise invalid_config("preferred server not permitted in placement")


def _times_equal(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return time_ns(a) == time_ns(b)


# the fields a consumer update may not change, in nats-server's order of checking, with the name its error uses
_FIXED_CONSUMER_FIELDS = (
    ("deliver_policy", "deliver policy"), ("mem_storage", "storage type"), ("direct", "direct"),
    ("sourcing", "sourcing"), ("opt_start_seq", "start sequence"), ("opt_start_time", "start time"),
    ("ack_policy", "ack policy"), ("replay_policy", "replay policy"), ("idle_heartbeat", "heart beats"),
    ("flow_control", "flow control"))


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

    for field, what in _FIXED_CONSUMER_FIELDS:
        a, b = getattr(old, field), getattr(new, field)
        if not (_times_equal(a, b) if field == "opt_start_time" else a == b):
            raise fail(f"{what} can not be updated")
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
        if action == "create" and not configs_equal(existing, cfg):
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
        if maxc <= 0 and server_limits is not None and server_limits.default_max_consumers > 0:
            maxc = server_limits.default_max_consumers  # jetstream { limits { default_max_consumers } } (2.15)
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
