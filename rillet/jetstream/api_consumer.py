"""The ``$JS.API.CONSUMER.*`` handlers: create/update, info, delete, names, list, pause, next (pull requests).

Consumer configs travel as nats-server's JSON (``durable_name``, ``deliver_policy``, durations in ns...).
When the config module offers ``ConsumerConfig`` / ``normalize_consumer_config`` / ``check_consumer_update``
they are used; otherwise the local equivalents below apply nats-server's defaults and checks.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import msgspec

import rillet
from rillet.jetstream import consumer as CO
from rillet.jetstream.errors import ApiError
from rillet.jetstream.stream import now_ns, rfc3339
from rillet.subjects.validate import is_valid_subject, subject_is_subset_match, subject_matches_filter, \
    subjects_collide

try:  # the config engineer's module (may not exist yet)
    from rillet.jetstream import config as _C
except Exception:  # pragma: no cover
    _C = None

if TYPE_CHECKING:
    from rillet.jetstream.api import ApiRouter

T = "io.nats.jetstream.api.v1."
JSON_LIMIT = 1024
LIST_LIMIT = 256
MAX_NAME_LEN = 255
MAX_DESC_LEN = 4 * 1024
MAX_META_LEN = 128 * 1024
ACK_WAIT_DEFAULT = 30_000_000_000
MAX_ACK_PENDING_DEFAULT = 1000
WAIT_QUEUE_DEFAULT = 512
API_LEVEL = 1


class LocalConsumerConfig(msgspec.Struct, kw_only=True):
    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: str = "all"
    opt_start_seq: int = 0
    opt_start_time: Any = None
    ack_policy: str = "none"
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: Any = None
    filter_subject: str = ""
    filter_subjects: Any = None
    replay_policy: str = "instant"
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    metadata: Any = None
    pause_until: Any = None
    priority_groups: Any = None
    priority_policy: str = ""
    priority_timeout: int = 0


# (name, kind) in nats-server's field order; kind "e" = omitted when empty, "a" = always written
_FIELDS = [
    ("durable_name", "e"), ("name", "e"), ("description", "e"), ("deliver_policy", "a"), ("opt_start_seq", "e"),
    ("opt_start_time", "e"), ("ack_policy", "a"), ("ack_wait", "e"), ("max_deliver", "e"), ("backoff", "e"),
    ("filter_subject", "e"), ("filter_subjects", "e"), ("replay_policy", "a"), ("rate_limit_bps", "e"),
    ("sample_freq", "e"), ("max_waiting", "e"), ("max_ack_pending", "e"), ("flow_control", "e"),
    ("headers_only", "e"), ("max_batch", "e"), ("max_expires", "e"), ("max_bytes", "e"),
    ("deliver_subject", "e"), ("deliver_group", "e"), ("idle_heartbeat", "e"), ("inactive_threshold", "e"),
    ("num_replicas", "a"), ("mem_storage", "e"), ("direct", "e"), ("metadata", "e"), ("pause_until", "e"),
    ("priority_groups", "e"), ("priority_policy", "e"), ("priority_timeout", "e"),
]
_ENUMS = {
    "deliver_policy": {"all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"},
    "ack_policy": {"none", "all", "explicit", "flow_control"},
    "replay_policy": {"instant", "original"},
}


def _time_text(v: Any) -> Any:
    if v is None or v == "":
        return None
    if hasattr(v, "isoformat") and not isinstance(v, str):
        return rfc3339(int(v.timestamp() * 1e9))
    return v


def config_to_dict(cfg: Any, dynamic_meta: bool = True, for_store: bool = False) -> dict:
    """The config as nats-server writes it (field order, omitempty); with the ``_nats.*`` metadata."""
    d: dict[str, Any] = {}
    for name, kind in _FIELDS:
        v = getattr(cfg, name, None)
        if name in ("opt_start_time", "pause_until"):
            v = _time_text(v)
        if name == "priority_policy" and v == "none":
            v = ""
        if kind == "e" and (v is None or v == "" or v == 0 or v is False or v == [] or v == {}):
            continue
        if kind == "a" and v is None:
            v = 0 if name == "num_replicas" else ""
        if isinstance(v, (list, dict)):
            v = type(v)(v)
        d[name] = v
    md = dict(d.get("metadata") or {})
    if not for_store:
        md["_nats.req.level"] = str(_req_level(cfg))
        if dynamic_meta:
            md["_nats.level"] = str(API_LEVEL)
            md["_nats.ver"] = rillet.SERVER_VERSION
        md = dict(sorted(md.items()))
    if md:
        d["metadata"] = md
    return d


def _req_level(cfg: Any) -> int:
    if getattr(cfg, "pause_until", None) or getattr(cfg, "priority_policy", "") not in ("", "none", None):
        return 1
    return 0


def config_from_dict(d: dict) -> Any:
    d = dict(d)
    md = d.get("metadata")
    if isinstance(md, dict):
        md = {k: v for k, v in md.items() if k not in ("_nats.req.level", "_nats.level", "_nats.ver")}
        d["metadata"] = md or None
    typ = getattr(_C, "ConsumerConfig", None) if _C is not None else None
    if typ is not None:
        try:
            return msgspec.convert(d, typ, strict=False)
        except Exception:
            pass
    return msgspec.convert(d, LocalConsumerConfig, strict=False)


def _is_valid_name(n: str) -> bool:
    return bool(n) and not any(ch in n for ch in ".*> \t\r\n\\/") and n.isprintable()


def normalize(raw: dict, stream: Any, action: str = "", pedantic: bool = False) -> Any:
    """Apply nats-server's defaults and checks to a requested consumer config."""
    if _C is not None and hasattr(_C, "normalize_consumer_config"):
        try:
            return _C.normalize_consumer_config(raw, stream.cfg, pedantic=pedantic)
        except TypeError:
            return _C.normalize_consumer_config(raw, stream.cfg)
    for k, allowed in _ENUMS.items():
        v = raw.get(k)
        if v is not None and v not in allowed:
            if k == "ack_policy":
                raise ApiError.make("CONSUMER_ACK_POLICY_INVALID")
            if k == "replay_policy":
                raise ApiError.make("CONSUMER_REPLAY_POLICY_INVALID")
            raise ApiError.make("INVALID_JSON", err=f"can not unmarshal {v!r}")
    try:
        cfg = msgspec.convert(raw, LocalConsumerConfig, strict=False)
    except msgspec.ValidationError as e:
        raise ApiError.make("INVALID_JSON", err=str(e))
    scfg = stream.cfg
    # defaults (setConsumerConfigDefaults)
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        cfg.max_deliver = -1
    for f in ("max_waiting", "max_batch", "max_expires", "max_bytes", "idle_heartbeat", "inactive_threshold",
              "priority_timeout"):
        if getattr(cfg, f) < 0:
            setattr(cfg, f, 0)
    if cfg.max_ack_pending < -1:
        cfg.max_ack_pending = -1
    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = WAIT_QUEUE_DEFAULT
    if cfg.ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        cfg.ack_wait = ACK_WAIT_DEFAULT
    if cfg.backoff:
        cfg.ack_wait = int(cfg.backoff[0])
    limits = getattr(scfg, "consumer_limits", None)
    lim_map = getattr(limits, "max_ack_pending", 0) if limits is not None else 0
    lim_it = getattr(limits, "inactive_threshold", 0) if limits is not None else 0
    if isinstance(limits, dict):
        lim_map, lim_it = limits.get("max_ack_pending", 0), limits.get("inactive_threshold", 0)
    if cfg.max_ack_pending == 0:
        cfg.max_ack_pending = lim_map or 0
    if cfg.inactive_threshold == 0:
        cfg.inactive_threshold = lim_it or 0
    if cfg.max_ack_pending == 0 and cfg.ack_policy != "none":
        cfg.max_ack_pending = MAX_ACK_PENDING_DEFAULT
    if not cfg.durable_name and cfg.inactive_threshold <= 0:
        cfg.inactive_threshold = CO.DELETE_WAIT_DEFAULT
    # checks (checkConsumerCfg)
    if cfg.name and not _is_valid_name(cfg.name):
        raise ApiError.make("STREAM_INVALID_CONFIG", err="consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not _is_valid_name(cfg.durable_name):
        raise ApiError.make("STREAM_INVALID_CONFIG",
                            err="consumer durable name can not contain '.', '*', '>', '\\', '/'")
    if cfg.num_replicas < 0:
        raise ApiError.make("REPLICAS_COUNT_CANNOT_BE_NEGATIVE")
    if cfg.num_replicas > 0 and cfg.num_replicas > max(getattr(scfg, "num_replicas", 1) or 1, 1):
        raise ApiError.make("CONSUMER_REPLICAS_EXCEEDS_STREAM")
    for b in cfg.backoff or []:
        if b < 0:
            raise ApiError.make("CONSUMER_BACKOFF_NEGATIVE")
    if cfg.ack_wait < 0:
        raise ApiError.make("CONSUMER_ACK_WAIT_NEGATIVE")
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise ApiError.make("CONSUMER_MAX_DELIVER_BACKOFF")
    if len(cfg.description) > MAX_DESC_LEN:
        raise ApiError.make("CONSUMER_DESCRIPTION_TOO_LONG", max=MAX_DESC_LEN)
    if cfg.deliver_subject:
        if "*" in cfg.deliver_subject.split(".") or ">" in cfg.deliver_subject.split("."):
            raise ApiError.make("CONSUMER_DELIVER_TO_WILDCARDS")
        if not is_valid_subject(cfg.deliver_subject):
            raise ApiError.make("CONSUMER_INVALID_DELIVER_SUBJECT")
        if getattr(scfg, "mirror", None) is None and any(
                subject_matches_filter(cfg.deliver_subject, s) for s in (scfg.subjects or [])):
            raise ApiError.make("CONSUMER_DELIVER_CYCLE")
        if cfg.max_waiting != 0:
            raise ApiError.make("CONSUMER_PUSH_MAX_WAITING")
        if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
            raise ApiError.make("CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED")
        if 0 < cfg.idle_heartbeat < 100_000_000:
            raise ApiError.make("CONSUMER_SMALL_HEARTBEAT")
    else:
        if cfg.ack_policy == "none" and getattr(scfg, "retention", "limits") == "workqueue":
            raise ApiError.make("CONSUMER_PULL_REQUIRES_ACK")
        if cfg.rate_limit_bps > 0:
            raise ApiError.make("CONSUMER_PULL_WITH_RATE_LIMIT")
        if cfg.idle_heartbeat > 0:
            raise ApiError.make("CONSUMER_HB_REQUIRES_PUSH")
        if cfg.flow_control:
            raise ApiError.make("CONSUMER_FC_REQUIRES_PUSH")
        if cfg.max_expires != 0 and cfg.max_expires < 1_000_000:
            raise ApiError.make("CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL")
    if cfg.direct:
        if not cfg.deliver_subject:
            raise ApiError.make("CONSUMER_DIRECT_REQUIRES_PUSH")
        if cfg.durable_name:
            raise ApiError.make("CONSUMER_DIRECT_REQUIRES_EPHEMERAL")
    if cfg.filter_subject and cfg.filter_subjects:
        raise ApiError.make("CONSUMER_DUPLICATE_FILTER_SUBJECTS")
    if cfg.filter_subject and not is_valid_subject(cfg.filter_subject):
        raise ApiError.make("STREAM_INVALID_CONFIG", err="invalid subject")
    for f in cfg.filter_subjects or []:
        if not f:
            raise ApiError.make("CONSUMER_EMPTY_FILTER")
    filters = [cfg.filter_subject] if cfg.filter_subject else list(cfg.filter_subjects or [])
    for i, a in enumerate(filters):
        if not is_valid_subject(a):
            raise ApiError.make("STREAM_INVALID_CONFIG", err="invalid subject")
        for j, b in enumerate(filters):
            if i != j and subject_is_subset_match(a, b):
                raise ApiError.make("CONSUMER_OVERLAPPING_SUBJECT_FILTERS")
    dp = cfg.deliver_policy
    names = {"all": "all", "last": "last", "last_per_subject": "last per subject", "new": "new",
             "by_start_sequence": "by start sequence", "by_start_time": "by start time"}
    dn = names.get(dp, dp)

    def bad_start(start: str) -> ApiError:
        return ApiError.make("CONSUMER_INVALID_POLICY",
                             err=f"consumer delivery policy is deliver {dn}, but optional start {start} is also set")

    def not_set(what: str) -> ApiError:
        return ApiError.make("CONSUMER_INVALID_POLICY",
                             err=f"consumer delivery policy is deliver {dn}, but optional {what} is not set")

    if dp in ("all", "last", "last_per_subject", "new"):
        if cfg.opt_start_seq > 0:
            raise bad_start("sequence")
        if cfg.opt_start_time:
            raise bad_start("time")
        if dp == "last_per_subject" and not filters:
            raise not_set("filter subject")
    elif dp == "by_start_sequence":
        if cfg.opt_start_seq == 0:
            raise not_set("start sequence")
        if cfg.opt_start_time:
            raise bad_start("time")
    elif dp == "by_start_time":
        if not cfg.opt_start_time:
            raise not_set("start time")
        if cfg.opt_start_seq:
            raise bad_start("start sequence")
    if cfg.sample_freq:
        s = cfg.sample_freq.rstrip("%")
        if not s.isdigit():
            raise ApiError.make("CONSUMER_INVALID_SAMPLING",
                                err=f'strconv.Atoi: parsing "{s}": invalid syntax')
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise ApiError.make("CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS")
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise ApiError.make("CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH")
    if cfg.metadata:
        if sum(len(k) + len(v) for k, v in cfg.metadata.items()) > MAX_META_LEN:
            raise ApiError.make("CONSUMER_METADATA_LENGTH", limit=f"{MAX_META_LEN // 1024}KB")
    if cfg.priority_policy and cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise ApiError.make("CONSUMER_PUSH_WITH_PRIORITY_GROUP")
        if not cfg.priority_groups:
            raise ApiError.make("CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP")
    elif cfg.priority_groups:
        raise ApiError.make("CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE")
    if cfg.durable_name and not cfg.name:
        cfg.name = cfg.durable_name
    return cfg


def _cmp_dict(cfg: Any) -> dict:
    d = config_to_dict(cfg, dynamic_meta=False, for_store=True)
    d.pop("pause_until", None)
    return d


def check_update(old: Any, new: Any, jsa: Any) -> None:
    """Errors nats-server gives for a config change it does not allow."""
    if _C is not None and hasattr(_C, "check_consumer_update"):
        _C.check_consumer_update(old, new)
        return
    a, b = _cmp_dict(old), _cmp_dict(new)
    if a == b:
        return

    def fail(text: str) -> None:
        raise ApiError.make("CONSUMER_CREATE", err=text)

    g = lambda c, f, dflt=None: getattr(c, f, dflt)  # noqa: E731
    if g(old, "deliver_policy") != g(new, "deliver_policy"):
        fail("deliver policy can not be updated")
    if bool(g(old, "mem_storage")) != bool(g(new, "mem_storage")):
        fail("storage type can not be updated")
    if bool(g(old, "direct")) != bool(g(new, "direct")):
        fail("direct can not be updated")
    if (g(old, "opt_start_seq") or 0) != (g(new, "opt_start_seq") or 0):
        fail("start sequence can not be updated")
    if CO._parse_time_ns(g(old, "opt_start_time")) != CO._parse_time_ns(g(new, "opt_start_time")):
        fail("start time can not be updated")
    if g(old, "ack_policy") != g(new, "ack_policy"):
        fail("ack policy can not be updated")
    if g(old, "replay_policy") != g(new, "replay_policy"):
        fail("replay policy can not be updated")
    if (g(old, "idle_heartbeat") or 0) != (g(new, "idle_heartbeat") or 0):
        fail("heart beats can not be updated")
    if bool(g(old, "flow_control")) != bool(g(new, "flow_control")):
        fail("flow control can not be updated")
    od, nd = g(old, "deliver_subject") or "", g(new, "deliver_subject") or ""
    if od != nd:
        if not od:
            fail("can not update pull consumer to push based")
        if not nd:
            fail("can not update push consumer to pull based")
        if jsa.account.sublist.has_interest(od):
            raise ApiError.make("CONSUMER_NAME_EXIST")
    if (g(old, "max_waiting") or 0) != (g(new, "max_waiting") or 0):
        fail("max waiting can not be updated")
    bo = g(new, "backoff") or []
    md = g(new, "max_deliver") or -1
    if bo and md != -1 and len(bo) > md:
        raise ApiError.make("CONSUMER_MAX_DELIVER_BACKOFF")


def _filters_of(cfg: Any) -> list[str]:
    fs = getattr(cfg, "filter_subject", "") or ""
    return [fs] if fs else list(getattr(cfg, "filter_subjects", None) or [])


def _partition_unique(stream: Any, name: str, filters: list[str]) -> bool:
    for c in stream.consumers.values():
        if c.name == name:
            continue
        other = c.filters
        if not other or not filters:
            return False
        for a in filters:
            for b in other:
                if subjects_collide(a, b):
                    return False
    return True


# ---- handlers -----------------------------------------------------------------------------------------


class ConsumerApi:
    def __init__(self, router: "ApiRouter") -> None:
        self.router = router
        self.jsa = router.jsa
        self.js = router.js

    def _stream(self, name: str) -> Any:
        s = self.jsa.streams.get(name)
        if s is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        return s

    def _consumer(self, stream: Any, name: str) -> Any:
        c = stream.consumers.get(name)
        if c is None or c.closed:
            raise ApiError.make("CONSUMER_NOT_FOUND")
        return c

    # CONSUMER.CREATE.<stream>[.<name>[.<filter>]] and CONSUMER.DURABLE.CREATE.<stream>.<durable>
    def consumer_create(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        self._create(args, reply, body, legacy_durable=False)

    def consumer_durable_create(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        self._create(args, reply, body, legacy_durable=True)

    def _create(self, args: list[str], reply: bytes | None, body: bytes, legacy_durable: bool) -> None:
        typ = T + "consumer_create_response"
        if not args:
            return
        try:
            req = json.loads(body) if body.strip() else None
        except ValueError as e:
            raise ApiError.make("INVALID_JSON", err=str(e))
        if not isinstance(req, dict):
            raise ApiError.make("INVALID_JSON", err="unexpected end of JSON input" if req is None
                                else "json: cannot unmarshal into Go value of type server.CreateConsumerRequest")
        raw = req.get("config")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ApiError.make("INVALID_JSON", err="json: cannot unmarshal into Go struct field")
        raw = dict(raw)
        stream_name = args[0]
        name = ""
        filtered = ""
        mode = "ephemeral"
        if legacy_durable:
            mode = "durable"
            if len(args) != 2:
                raise ApiError.make("CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT")
            name = args[1]
        elif len(args) >= 2:
            mode = "new"
            name = args[1]
            if len(args) > 2:
                filtered = ".".join(args[2:])
        else:
            name = raw.get("name") or ""
        if stream_name != (req.get("stream_name") or ""):
            raise ApiError.make("STREAM_MISMATCH")
        if name and ("/" in name or "\\" in name):
            raise ApiError.make("CONSUMER_NAME_CONTAINS_PATH_SEPARATORS")
        durable = raw.get("durable_name") or ""
        if mode == "durable":
            if not durable:
                raise ApiError.make("CONSUMER_DURABLE_NAME_NOT_SET")
            if name != durable:
                raise ApiError.make("CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT")
            raw["name"] = name
        elif mode == "new":
            if durable and durable != name:
                raise ApiError.make("CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT")
            raw["name"] = name
        elif durable:
            raise ApiError.make("CONSUMER_EPHEMERAL_WITH_DURABLE_NAME")
        if filtered and raw.get("filter_subjects"):
            raise ApiError.make("CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED")
        if filtered and (raw.get("filter_subject") or "") != filtered:
            raise ApiError.make("CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH")
        if int(raw.get("num_replicas") or 0) > 1:
            raise ApiError.make("STREAM_REPLICAS_NOT_SUPPORTED")
        stream = self._stream(stream_name)
        action = req.get("action") or ""
        if action not in ("", "create", "update"):
            raise ApiError.make("INVALID_JSON", err=f"unknown consumer action: {action}")
        existing = stream.consumers.get(name) if name else None
        if existing is not None and existing.closed:
            existing = None
        if existing is not None:
            pu = getattr(existing.cfg, "pause_until", None)
            raw["pause_until"] = pu if not hasattr(pu, "isoformat") else _time_text(pu)
        cfg = normalize(raw, stream, action, bool(req.get("pedantic")))
        cname = getattr(cfg, "durable_name", "") or getattr(cfg, "name", "") or ""
        scfg = stream.cfg
        retention = getattr(scfg, "retention", "limits")
        if cname:
            eo = stream.consumers.get(cname)
            if eo is not None and not eo.closed:
                if action == "create" and _cmp_dict(eo.cfg) != _cmp_dict(cfg):
                    raise ApiError.make("CONSUMER_ALREADY_EXISTS")
                if retention == "workqueue" and not _partition_unique(stream, cname, _filters_of(cfg)):
                    raise ApiError.make("CONSUMER_WQ_CONSUMER_NOT_UNIQUE")
                check_update(eo.cfg, cfg, self.jsa)
                if _cmp_dict(eo.cfg) != _cmp_dict(cfg):
                    eo.update_config(cfg)
                    self.js.advisories.consumer_action(self.jsa, stream, cname, "modify")
                self.router.respond(reply, {"type": typ, **eo.info()})
                return
        if action == "update":
            raise ApiError.make("CONSUMER_DOES_NOT_EXIST")
        maxc = int(getattr(scfg, "max_consumers", -1) or -1)
        lim = self.jsa.limits.get("max_consumers", -1)
        if maxc <= 0 or (lim > 0 and lim < maxc):
            maxc = lim
        if maxc > 0 and len(stream.consumers) >= maxc:
            raise ApiError.make("MAXIMUM_CONSUMERS_LIMIT")
        if retention == "workqueue" and not getattr(cfg, "direct", False):
            if getattr(cfg, "ack_policy", "none") not in ("explicit", "flow_control"):
                raise ApiError.make("CONSUMER_WQ_REQUIRES_EXPLICIT_ACK")
            if getattr(cfg, "deliver_policy", "all") != "all":
                raise ApiError.make("CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL")
            if stream.consumers:
                filters = _filters_of(cfg)
                if not filters:
                    raise ApiError.make("CONSUMER_WQ_MULTIPLE_UNFILTERED")
                if not _partition_unique(stream, cname, filters):
                    raise ApiError.make("CONSUMER_WQ_CONSUMER_NOT_UNIQUE")
        if getattr(cfg, "durable_name", ""):
            if len(cfg.durable_name) > MAX_NAME_LEN:
                raise ApiError.make("CONSUMER_NAME_TOO_LONG", max=MAX_NAME_LEN)
        if not cname:
            while True:
                cname = CO.new_consumer_name()
                if cname not in stream.consumers:
                    break
            try:
                cfg.name = cname
            except Exception:
                cfg = msgspec.structs.replace(cfg, name=cname)
        if len(cname) > MAX_NAME_LEN:
            raise ApiError.make("CONSUMER_NAME_TOO_LONG", max=MAX_NAME_LEN)
        if not _is_valid_name(cname):
            raise ApiError.make("CONSUMER_BAD_DURABLE_NAME")
        try:
            c = CO.create_consumer(stream, cfg, cname)
        except OSError as e:
            raise ApiError.make("CONSUMER_STORE_FAILED", err=str(e))
        self.js.advisories.consumer_action(self.jsa, stream, cname, "create")
        self.router.respond(reply, {"type": typ, **c.info()})

    def consumer_info(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        if len(args) < 2:
            raise ApiError.make("CONSUMER_NOT_FOUND")
        stream = self._stream(args[0])
        c = self._consumer(stream, args[1])
        self.router.respond(reply, {"type": T + "consumer_info_response", **c.info()})

    def consumer_delete(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        if len(args) < 2:
            raise ApiError.make("CONSUMER_NOT_FOUND")
        stream = self._stream(args[0])
        c = self._consumer(stream, args[1])
        c.stop(delete=True)
        self.router.respond(reply, {"type": T + "consumer_delete_response", "success": True})

    def _req(self, body: bytes) -> dict:
        if not body.strip():
            return {}
        try:
            d = json.loads(body)
        except ValueError as e:
            raise ApiError.make("INVALID_JSON", err=str(e))
        return d if isinstance(d, dict) else {}

    def consumer_names(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        req = self._req(body)
        stream = self._stream(args[0] if args else "")
        names = sorted(n for n, c in stream.consumers.items() if not c.closed)
        offset = max(int(req.get("offset") or 0), 0)
        self.router.respond(reply, {"type": T + "consumer_names_response", "total": len(names),
                                    "offset": offset, "limit": JSON_LIMIT,
                                    "consumers": names[offset:offset + JSON_LIMIT]})

    def consumer_list(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        req = self._req(body)
        stream = self._stream(args[0] if args else "")
        cons = sorted((c for c in stream.consumers.values() if not c.closed), key=lambda c: c.name)
        offset = max(int(req.get("offset") or 0), 0)
        page = cons[offset:offset + LIST_LIMIT]
        self.router.respond(reply, {"type": T + "consumer_list_response", "total": len(cons), "offset": offset,
                                    "limit": LIST_LIMIT, "consumers": [_list_info(c) for c in page]})

    def consumer_pause(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        typ = T + "consumer_pause_response"
        if len(args) < 2:
            raise ApiError.make("CONSUMER_NOT_FOUND")
        req = self._req(body)
        stream = self._stream(args[0])
        c = self._consumer(stream, args[1])
        pu = req.get("pause_until")
        until = CO._parse_time_ns(pu) if pu else 0
        if until and until > now_ns():
            text = pu if isinstance(pu, str) else rfc3339(until)
            c.set_pause(until, text)
            self._pause_advisory(stream, c, True, text)
            self.router.respond(reply, {"type": typ, "paused": True, "pause_until": text,
                                        "pause_remaining": until - now_ns()})
        else:
            c.set_pause(0, None)
            self._pause_advisory(stream, c, False, "")
            self.router.respond(reply, {"type": typ, "paused": False, "pause_until": "0001-01-01T00:00:00Z"})

    def _pause_advisory(self, stream: Any, c: Any, paused: bool, until: str) -> None:
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.{stream.name}.{c.name}"
        sl = self.jsa.account.sublist
        if not sl.has_interest(subject):
            return
        import base64
        import os
        d: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.consumer_pause",
                             "id": base64.b32encode(os.urandom(15)).decode()[:22], "timestamp": rfc3339(now_ns()),
                             "stream": stream.name, "consumer": c.name, "paused": paused}
        if paused:
            d["pause_until"] = until
        if self.js.domain:
            d["domain"] = self.js.domain
        self.jsa.ic.publish(subject.encode(), None, msgspec.json.encode(d))

    def consumer_leader_stepdown(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        if len(args) < 2:
            raise ApiError.make("CONSUMER_NOT_FOUND")
        stream = self._stream(args[0])
        self._consumer(stream, args[1])
        raise ApiError.make("CLUSTER_REQUIRED")

    def consumer_msg_next(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        if len(args) < 2 or not reply:
            return
        stream = self.jsa.streams.get(args[0])
        if stream is None:
            return
        c = stream.consumers.get(args[1])
        if c is None or c.closed:
            return
        c.process_next_request(reply.decode("utf-8", "surrogateescape"), body)


def _list_info(c: Any) -> dict:
    d = c.info(level_meta=False)
    return d


def register(router: "ApiRouter") -> None:
    api = ConsumerApi(router)
    router.consumer_api = api
    router.handlers.update({
        "CONSUMER.CREATE": api.consumer_create,
        "CONSUMER.DURABLE.CREATE": api.consumer_durable_create,
        "CONSUMER.INFO": api.consumer_info,
        "CONSUMER.DELETE": api.consumer_delete,
        "CONSUMER.NAMES": api.consumer_names,
        "CONSUMER.LIST": api.consumer_list,
        "CONSUMER.MSG.NEXT": api.consumer_msg_next,
        "CONSUMER.PAUSE": api.consumer_pause,
        "CONSUMER.LEADER.STEPDOWN": api.consumer_leader_stepdown,
    })
    from rillet.jetstream import api as _api
    _api.register_types({"consumer_durable_create": "consumer_create_response",
                         "consumer_leader_stepdown": "consumer_leader_stepdown_response",
                         "consumer_msg_next": "consumer_getnext_response"})
