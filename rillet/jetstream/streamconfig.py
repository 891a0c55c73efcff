"""JetStream stream configuration: nats-server's defaults, validation and update rules, sans-IO.

``normalize_stream_config`` (STREAM.CREATE), ``normalize_stream_update`` (STREAM.UPDATE) and the checks they
are made of, in nats-server's order and with the exact error it answers with (``ApiError``). The types are in
``rillet.jetstream.configtypes``.
"""
from __future__ import annotations

from typing import Callable, Iterable, Union

from rillet.gocompat.goquote import go_quote
from rillet.gocompat.gotime import format_duration
from rillet.jetstream import errors as jserr
from rillet.jetstream.configtypes import (
    DEFAULT_DUPLICATE_WINDOW,
    JS_API_PREFIX,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    MS,
    NS,
    STREAM_MAX_REPLICAS,
    AccountLimits,
    ConsumerConfig,
    Placement,
    ServerLimits,
    StreamConfig,
    StreamConfigRequest,
    StreamLookup,
    StreamSource,
    SubjectTransformConfig,
    configs_equal,
    invalid_config,
    is_valid_asset_name,
    pedantic_error,
    set_required_level,
)
from rillet.jetstream.api.codec import from_dict, go_decode
from rillet.subjects.overlap import first_overlaps
from rillet.subjects.destination import _ERR_BAD_SUBJECT, check_subject_transform, validate_mapping
from rillet.subjects.validate import (
    is_valid_publish_subject,
    is_valid_subject,
    subject_is_literal,
    subject_is_subset_match,
    subjects_collide,
)


def set_static_stream_metadata(cfg: StreamConfig) -> None:
    """Record the API level the stream's features need (``_nats.req.level``); drops dynamic keys."""
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = max(level, 1)
    if cfg.allow_msg_counter or cfg.allow_atomic or cfg.allow_msg_schedules or cfg.persist_mode == "async":
        level = max(level, 2)
    if cfg.allow_batched:
        level = max(level, 4)
    set_required_level(cfg, level)


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
    strict: bool = True,
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
        req = go_decode(raw, StreamConfigRequest, "StreamConfigRequest", strict=strict)  # (jetstream.strict)
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
            raise invalid_config("stream configuration for create can not be sealed")
        if cfg.mirror_direct and cfg.mirror is None:
            raise invalid_config("stream has no mirror but does have mirror direct")
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


def _check_transform(tr: SubjectTransformConfig, bad_filter: jserr.ErrorKind, bad_dest: jserr.ErrorKind) -> None:
    """A mirror's or source's subject transform: a valid filter subject (else ``bad_filter``) and a destination
    that maps it (else ``bad_dest``)."""
    if tr.src and not is_valid_subject(tr.src):
        raise bad_filter(err=f"{_ERR_BAD_SUBJECT} {tr.src}")
    err = validate_mapping(tr.src, tr.dest)
    if err:
        raise bad_dest(err=err)


def _check_origin(cfg: StreamConfig, origin: StreamConfig, stream_subs: list[str], too_big: jserr.ErrorKind) -> None:
    """A local origin of a mirror or source: its subjects are added to ``stream_subs`` (checked later against
    this stream's), and its messages may not be larger than this stream takes (else ``too_big``)."""
    if origin.subjects:
        stream_subs.extend(origin.subjects)
    if cfg.max_msg_size > 0 and origin.max_msg_size > 0 and cfg.max_msg_size < origin.max_msg_size:
        raise too_big()


def _durable_consumer_ok(src: StreamSource) -> bool:
    """A mirror's or source's ``consumer`` (set: a durable push consumer of the origin stream to read through):
    a valid name and a literal deliver subject, with no start sequence, start time or filter of its own."""
    c = src.consumer
    return (is_valid_asset_name(c.name) and subject_is_literal(c.deliver_subject)
            and is_valid_subject(c.deliver_subject) and src.opt_start_seq == 0
            and src.opt_start_time is None and not src.filter_subject)


# what a mirror may not have, each with its error, in nats-server's order of checking (first_seq, checked
# before these, is a number rather than a flag)
_NOT_WITH_MIRROR = (
    ("subjects", jserr.MIRROR_WITH_SUBJECTS), ("sources", jserr.MIRROR_WITH_SOURCES),
    ("allow_msg_counter", jserr.MIRROR_WITH_COUNTERS), ("allow_atomic", jserr.MIRROR_WITH_ATOMIC_PUBLISH),
    ("allow_batched", jserr.MIRROR_WITH_BATCH_PUBLISH), ("allow_msg_schedules", jserr.MIRROR_WITH_MSG_SCHEDULES))


def check_stream_config(cfg: StreamConfig, *, pedantic: bool = False, lookup_stream: StreamLookup | None = None,
                        server_limits: ServerLimits | None = None,
                        account_limits: AccountLimits | None = None) -> StreamConfig:
    """nats-server's stream configuration check with defaults (a new, normalized copy is returned)."""
    lookup = lookup_stream or (lambda name: None)
    lim = server_limits or ServerLimits()
    if not is_valid_asset_name(cfg.name):
        raise invalid_config("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(cfg.name) > MAX_NAME_LEN:
        raise invalid_config(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(cfg.description.encode()) > MAX_DESCRIPTION_LEN:
        raise invalid_config(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(len(k.encode()) + len(v.encode()) for k, v in (cfg.metadata or {}).items()) > MAX_METADATA_LEN:
        raise invalid_config(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")

    cfg = cfg.copy()
    if not cfg.storage:
        cfg.storage = "file"
    if cfg.num_replicas == 0:
        cfg.num_replicas = 1
    if cfg.num_replicas > STREAM_MAX_REPLICAS:
        raise invalid_config(f"maximum replicas is {STREAM_MAX_REPLICAS}")
    if cfg.num_replicas < 0:
        raise jserr.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()
    for field in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        v = getattr(cfg, field)
        if v == 0 or v < -1:
            if pedantic and v < -1:
                raise pedantic_error(f"{field} must be set to -1")
            setattr(cfg, field, -1)
    if cfg.max_age < 0:
        raise invalid_config("max age can not be negative")
    if cfg.max_age != 0 and cfg.max_age < 100 * MS:
        raise invalid_config("max age needs to be >= 100ms")

    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
        window = DEFAULT_DUPLICATE_WINDOW
        if lim.max_duplicate_window > 0 and window > lim.max_duplicate_window:
            if pedantic:
                raise pedantic_error("duplicate window limits are higher than current limits")
            window = lim.max_duplicate_window
        if cfg.max_age != 0 and cfg.max_age < window:
            if pedantic:
                raise pedantic_error("duplicate window cannot be bigger than max age")
            cfg.duplicate_window = cfg.max_age
        else:
            cfg.duplicate_window = window
    if cfg.duplicate_window < 0:
        raise invalid_config("duplicates window can not be negative")
    if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
        raise invalid_config("duplicates window can not be larger then max age")
    if lim.max_duplicate_window > 0 and cfg.duplicate_window > lim.max_duplicate_window:
        raise invalid_config("duplicates window can not be larger then server limit of "
                       f"{format_duration(lim.max_duplicate_window)}")
    if 0 < cfg.duplicate_window < 100 * MS:
        raise invalid_config("duplicates window needs to be >= 100ms")

    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise invalid_config("roll-ups require the purge permission")

    if cfg.allow_msg_counter:
        if cfg.discard == "new":
            raise invalid_config("counter stream cannot use discard new")
        if cfg.allow_msg_ttl:
            raise invalid_config("counter stream cannot use message TTLs")
        if cfg.allow_msg_schedules:
            raise invalid_config("counter stream cannot use message schedules")
        if cfg.retention != "limits":
            raise invalid_config("counter stream can only use limits retention")

    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise invalid_config("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise invalid_config("discard new per subject requires max msgs per subject > 0")

    if cfg.subject_delete_marker_ttl > 0:
        if cfg.subject_delete_marker_ttl < NS:
            raise invalid_config("subject delete marker TTL must be at least 1 second")
        if not cfg.allow_msg_ttl:
            if pedantic:
                raise invalid_config("subject delete marker cannot be set if message TTLs are disabled")
            cfg.allow_msg_ttl = True
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise invalid_config("subject delete marker cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
    elif cfg.subject_delete_marker_ttl < 0:
        raise invalid_config("subject delete marker TTL must not be negative")

    if cfg.allow_msg_schedules:
        if cfg.discard == "new":
            raise invalid_config("message scheduling cannot use discard new")
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise invalid_config("message scheduling cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False

    if cfg.persist_mode == "async":
        if cfg.storage != "file":
            raise invalid_config("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise invalid_config("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise invalid_config("async persist mode is not supported with atomic batch publish")

    stream_subs: list[str] = []
    delivery_prefixes: list[str] = []
    api_prefixes: list[str] = []

    m = cfg.mirror
    if m is not None:
        if cfg.first_seq > 0:
            raise jserr.MIRROR_WITH_FIRST_SEQ()
        for field, err in _NOT_WITH_MIRROR:
            if getattr(cfg, field):
                raise err()
        if m.consumer is not None and not _durable_consumer_ok(m):
            raise jserr.MIRROR_DURABLE_CONSUMER_CFG_INVALID()
        if m.filter_subject and m.subject_transforms:
            raise jserr.MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED()
        if cfg.subject_delete_marker_ttl > 0:
            raise invalid_config("subject delete markers forbidden on mirrors")
        trs = m.subject_transforms or []
        for i, tr in enumerate(trs):
            _check_transform(tr, jserr.MIRROR_INVALID_SUBJECT_FILTER, jserr.MIRROR_INVALID_TRANSFORM_DESTINATION)
            for j, other in enumerate(trs):
                if i != j and subjects_collide(tr.src, other.src):
                    raise jserr.MIRROR_OVERLAPPING_SUBJECT_FILTERS()
        if m.external is None:
            if not is_valid_asset_name(m.name):
                raise jserr.MIRROR_INVALID_STREAM_NAME()
            origin = lookup(m.name)
            if origin is not None:
                _check_origin(cfg, origin, stream_subs, jserr.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG)
                if pedantic and cfg.mirror_direct != origin.allow_direct:
                    raise pedantic_error("origin stream has direct get set, mirror has it disabled")
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
            _check_transform(tr, jserr.SOURCE_INVALID_SUBJECT_FILTER, jserr.SOURCE_INVALID_TRANSFORM_DESTINATION)
        for i, tr in enumerate(trs):
            for j, other in enumerate(trs):
                if i != j and subject_is_subset_match(tr.src, other.src):
                    raise jserr.SOURCE_OVERLAPPING_SUBJECT_FILTERS()
        c = src.consumer
        if c is not None:
            if not _durable_consumer_ok(src):
                raise jserr.SOURCE_DURABLE_CONSUMER_CFG_INVALID()
            cname = (src.name, src.external.api if src.external else None, c.name)
            if cname in cnames:
                raise jserr.SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED()
            cnames.add(cname)
        if src.external is None:
            origin = lookup(src.name)
            if origin is not None:
                _check_origin(cfg, origin, stream_subs, jserr.SOURCE_MAX_MESSAGE_SIZE_TOO_BIG)
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
            raise invalid_config(f"stream external api prefix {go_quote(pfx)} must be a valid subject without wildcards")
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
        # for each subject, the first later one it overlaps (a token tree: linear, not every pair)
        later = first_overlaps(subs) if len(subs) > 1 else [-1]
        for i, subj in enumerate(subs):
            if not is_valid_subject(subj):
                raise invalid_config("invalid subject")
            if subj in seen:
                raise invalid_config("duplicate subjects detected")
            if subj == ">":
                if not cfg.no_ack:
                    raise invalid_config("capturing all subjects requires no-ack to be true")
                if cfg.num_replicas != 1:
                    raise invalid_config("capturing all subjects requires replicas of 1")
            if not cfg.no_ack:
                for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                    if subjects_collide(subj, ns) and not subject_is_subset_match(subj, "$JS.EVENT.>"):
                        raise invalid_config("subjects that overlap with jetstream api require no-ack to be true")
                if subjects_collide(subj, "$SYS.>") and not subject_is_subset_match(subj, "$SYS.ACCOUNT.>"):
                    raise invalid_config("subjects that overlap with system api require no-ack to be true")
            if later[i] >= 0:
                raise invalid_config(f"subject {go_quote(subj)} overlaps with {go_quote(subs[later[i]])}")
            seen.add(subj)

    if not cfg.subjects and not cfg.sources and cfg.mirror is None:
        raise invalid_config("stream needs at least one configured subject or be a source/mirror")

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
                raise pedantic_error("republish source can not be empty")
            rp.src = ">"
        if (rp.dest == ">" and rp.src == ">" and st is not None and cfg.subjects
                and len(cfg.subjects) == 1 and st.src == cfg.subjects[0]):
            if pedantic:
                raise pedantic_error("implicit republish based on subject transform")
            rp.src, rp.dest = st.dest, st.dest
        if any(subjects_collide(rp.dest, s) for s in cfg.subjects or []):
            raise invalid_config("stream configuration for republish destination forms a cycle")
        if check_subject_transform(rp.src, rp.dest) is not None:
            raise invalid_config(f"stream configuration for republish with transform from '{rp.src}' to "
                           f"'{rp.dest}' not valid")

    if cfg.placement is not None and cfg.placement == Placement():
        cfg.placement = None
    if cfg.placement is not None and cfg.placement.preferred:
        raise invalid_config("preferred server not permitted in placement")
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
                    raise invalid_config("detected cycle")
            else:
                other = lookup(src.name)
                if other is not None:
                    todo.append(other)
        m = c.mirror
        if m is not None and m.external is None:
            if m.name in visited:
                raise invalid_config("detected cycle")
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
        raise invalid_config("stream configuration name must match original")
    if not clustered and new.num_replicas > 1:
        raise jserr.STREAM_REPLICAS_NOT_SUPPORTED()
    if new.storage != old.storage:
        raise invalid_config("stream configuration update can not change storage type")
    if new.retention != old.retention and "workqueue" in (old.retention, new.retention):
        raise invalid_config("stream configuration update can not change retention policy to/from workqueue")
    if old.sealed and not new.sealed:
        raise invalid_config("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not new.deny_delete:
        raise invalid_config("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not new.deny_purge:
        raise invalid_config("stream configuration update can not cancel deny purge")
    if new.mirror is not None and new.mirror != old.mirror:
        raise jserr.STREAM_MIRROR_NOT_UPDATABLE()
    if new.discard_new_per_subject:
        if new.discard != "new":
            raise invalid_config("discard new per subject requires discard new policy to be set")
        if new.max_msgs_per_subject <= 0:
            raise invalid_config("discard new per subject requires max msgs per subject > 0")
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise invalid_config("message TTL status can not be disabled")
    if new.allow_msg_counter != old.allow_msg_counter:
        raise invalid_config("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not new.allow_msg_schedules:
        raise invalid_config("message schedules can not be disabled")
    if old.persist_mode != new.persist_mode:
        raise invalid_config("stream configuration update can not change persist mode")
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
    strict: bool = True,
) -> StreamConfig:
    """A STREAM.UPDATE request up to the new configuration: decode and check it, the name from the
    subject, the stream itself (``old`` ``None``: STREAM_NOT_FOUND), the update rules, then the other
    streams' subjects (``subjects_overlap`` should ignore the stream being updated)."""
    cfg = normalize_stream_config(raw, is_create=False, pedantic=pedantic, subject_name=subject_name,
                                  lookup_stream=lookup_stream, server_limits=server_limits,
                                  account_limits=account_limits, strict=strict)
    if old is None:
        raise jserr.STREAM_NOT_FOUND()
    cfg = check_stream_config(cfg, pedantic=bool(pedantic), lookup_stream=lookup_stream,
                              server_limits=server_limits, account_limits=account_limits)
    check_stream_update(old, cfg, clustered=clustered, consumers=consumers)
    if subjects_overlap is not None and cfg.subjects and subjects_overlap(list(cfg.subjects)):
        raise jserr.STREAM_SUBJECT_OVERLAP()
    return cfg
