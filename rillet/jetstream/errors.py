"""JetStream API errors.

The catalog lives in ``errors.json`` next to this module: one entry per error the JetStream API can
answer with. ``code`` (HTTP-like status), ``err_code`` (the 10xxx number) and ``description`` are what
clients see on the wire and must stay identical to nats-server's; ``name`` is ours.

Usage::

    from rillet.jetstream import errors as jserr

    raise jserr.STREAM_NOT_FOUND()
    raise jserr.INVALID_JSON(err=exc)              # fills "{err}"
    raise jserr.api_error("STREAM_NOT_FOUND")      # same thing, by name
    raise jserr.STREAM_CREATE(err=exc, unless=exc)  # re-raises exc itself when it already is an ApiError

    except jserr.ApiError as e:
        e.to_dict()   # {"code": 404, "err_code": 10059, "description": "stream not found"}
        jserr.STREAM_NOT_FOUND.matches(e)

Placeholders (``{err}``, ``{stream}``, ``{limit}``...) are filled from keyword arguments. Values are
rendered the way the Go server renders them: strings as they are, exceptions by ``str()`` (an
``ApiError`` renders as ``"description (err_code)"``), booleans as ``true``/``false``, ``None`` as
``<nil>``. Durations in nanoseconds should be passed through ``rillet.gocompat.gotime.format_duration()``
first. Placeholders without a value stay in the text untouched; unknown keywords are ignored.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Iterable

from rillet.gocompat.jsoncodec import register_encoder

__all__ = [
    "ApiError",
    "ErrorKind",
    "CATALOG",
    "BY_ERR_CODE",
    "api_error",
    "is_api_error",
]

_CATALOG_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "errors.json")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _fill(template: str, values: dict[str, Any]) -> str:
    if not values or "{" not in template:
        return template

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key in values:
            return _render(values[key])
        return m.group(0)

    return _PLACEHOLDER.sub(sub, template)


class ApiError(Exception):
    """An error answered by the JetStream API (the ``error`` object of a response)."""

    __slots__ = ("code", "err_code", "description", "name")

    def __init__(self, code: int, err_code: int = 0, description: str = "", name: str | None = None):
        super().__init__(code, err_code, description)
        self.code = int(code)
        self.err_code = int(err_code)
        self.description = description
        if name is None:
            kind = BY_ERR_CODE.get(self.err_code) if self.err_code else None
            name = kind.name if kind is not None else None
        self.name = name

    @classmethod
    def make(cls, name: str, unless: Any = None, **values: Any) -> "ApiError":
        return CATALOG[name](unless=unless, **values)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ApiError":
        return cls(d.get("code", 0), d.get("err_code", 0), d.get("description", ""))

    def to_dict(self) -> dict[str, Any]:
        """The wire form, keys in nats-server's order; ``err_code``/``description`` left out when empty."""
        out: dict[str, Any] = {"code": self.code}
        if self.err_code:
            out["err_code"] = self.err_code
        if self.description:
            out["description"] = self.description
        return out

    def matches(self, *kinds: "ErrorKind | str") -> bool:
        """True when this error is one of ``kinds`` (compared by err_code)."""
        for k in kinds:
            if isinstance(k, str):
                k = CATALOG[k]
            if k.err_code == self.err_code:
                return True
        return False

    is_ = matches

    def __str__(self) -> str:
        # Same text as the Go error value, which is what ends up inside "{err}" when wrapped.
        return f"{self.description} ({self.err_code})"

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.err_code}, {self.description!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ApiError):
            return NotImplemented
        return (self.code, self.err_code, self.description) == (other.code, other.err_code, other.description)

    def __hash__(self) -> int:
        return hash((self.code, self.err_code, self.description))


class ErrorKind:
    """One catalog entry. Calling it builds the ``ApiError`` (placeholders filled from keywords)."""

    __slots__ = ("name", "code", "err_code", "template", "comment", "go_constant", "placeholders")

    def __init__(self, name: str, code: int, err_code: int, template: str, comment: str = "",
                 go_constant: str = ""):
        self.name = name
        self.code = code
        self.err_code = err_code
        self.template = template
        self.comment = comment
        self.go_constant = go_constant
        self.placeholders = tuple(_PLACEHOLDER.findall(template))

    def __call__(self, unless: Any = None, **values: Any) -> ApiError:
        if isinstance(unless, ApiError):
            return unless
        return ApiError(self.code, self.err_code, _fill(self.template, values), self.name)

    def matches(self, err: Any) -> bool:
        return isinstance(err, ApiError) and err.err_code == self.err_code

    def __repr__(self) -> str:
        return f"<ErrorKind {self.name} {self.code}/{self.err_code} {self.template!r}>"


def _load() -> tuple[dict[str, ErrorKind], dict[int, ErrorKind]]:
    with open(_CATALOG_PATH, encoding="utf-8") as f:
        entries = json.load(f)
    by_name: dict[str, ErrorKind] = {}
    by_code: dict[int, ErrorKind] = {}
    for e in entries:
        k = ErrorKind(e["name"], e["code"], e["err_code"], e["description"], e.get("comment", ""),
                      e.get("go_constant", ""))
        by_name[k.name] = k
        by_code[k.err_code] = k
    return by_name, by_code


CATALOG, BY_ERR_CODE = _load()


def api_error(name: str, unless: Any = None, **values: Any) -> ApiError:
    """Build the error called ``name`` in the catalog (``api_error("STREAM_NOT_FOUND")``)."""
    return CATALOG[name](unless=unless, **values)


def is_api_error(err: Any, *kinds: "ErrorKind | str") -> bool:
    """True when ``err`` is an ``ApiError`` and (if kinds are given) one of them."""
    if not isinstance(err, ApiError):
        return False
    return not kinds or err.matches(*kinds)


def kinds() -> Iterable[ErrorKind]:
    return CATALOG.values()


def _kind(name: str) -> ErrorKind:
    return CATALOG[name]


# One module constant per catalog entry (tests check this list against errors.json).
ACCOUNT_RESOURCES_EXCEEDED: ErrorKind = _kind("ACCOUNT_RESOURCES_EXCEEDED")
BAD_REQUEST: ErrorKind = _kind("BAD_REQUEST")
CLUSTER_INCOMPLETE: ErrorKind = _kind("CLUSTER_INCOMPLETE")
CLUSTER_NO_PEERS: ErrorKind = _kind("CLUSTER_NO_PEERS")
CLUSTER_NOT_ACTIVE: ErrorKind = _kind("CLUSTER_NOT_ACTIVE")
CLUSTER_NOT_ASSIGNED: ErrorKind = _kind("CLUSTER_NOT_ASSIGNED")
CLUSTER_NOT_AVAIL: ErrorKind = _kind("CLUSTER_NOT_AVAIL")
CLUSTER_NOT_LEADER: ErrorKind = _kind("CLUSTER_NOT_LEADER")
CLUSTER_REQUIRED: ErrorKind = _kind("CLUSTER_REQUIRED")
CLUSTER_TAGS: ErrorKind = _kind("CLUSTER_TAGS")
CONSUMER_CREATE: ErrorKind = _kind("CONSUMER_CREATE")
CONSUMER_NAME_EXIST: ErrorKind = _kind("CONSUMER_NAME_EXIST")
CONSUMER_NOT_FOUND: ErrorKind = _kind("CONSUMER_NOT_FOUND")
SNAPSHOT_DELIVER_SUBJECT_INVALID: ErrorKind = _kind("SNAPSHOT_DELIVER_SUBJECT_INVALID")
CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT: ErrorKind = _kind("CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT")
CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT: ErrorKind = _kind("CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT")
CONSUMER_DURABLE_NAME_NOT_SET: ErrorKind = _kind("CONSUMER_DURABLE_NAME_NOT_SET")
CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT: ErrorKind = _kind("CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT")
CONSUMER_EPHEMERAL_WITH_DURABLE_NAME: ErrorKind = _kind("CONSUMER_EPHEMERAL_WITH_DURABLE_NAME")
STREAM_EXTERNAL_API_OVERLAP: ErrorKind = _kind("STREAM_EXTERNAL_API_OVERLAP")
STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS: ErrorKind = _kind("STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS")
INSUFFICIENT_RESOURCES: ErrorKind = _kind("INSUFFICIENT_RESOURCES")
STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ: ErrorKind = _kind("STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ")
INVALID_JSON: ErrorKind = _kind("INVALID_JSON")
MAXIMUM_CONSUMERS_LIMIT: ErrorKind = _kind("MAXIMUM_CONSUMERS_LIMIT")
MAXIMUM_STREAMS_LIMIT: ErrorKind = _kind("MAXIMUM_STREAMS_LIMIT")
MEMORY_RESOURCES_EXCEEDED: ErrorKind = _kind("MEMORY_RESOURCES_EXCEEDED")
MIRROR_CONSUMER_SETUP_FAILED: ErrorKind = _kind("MIRROR_CONSUMER_SETUP_FAILED")
MIRROR_MAX_MESSAGE_SIZE_TOO_BIG: ErrorKind = _kind("MIRROR_MAX_MESSAGE_SIZE_TOO_BIG")
MIRROR_WITH_SOURCES: ErrorKind = _kind("MIRROR_WITH_SOURCES")
MIRROR_WITH_START_SEQ_AND_TIME: ErrorKind = _kind("MIRROR_WITH_START_SEQ_AND_TIME")
MIRROR_WITH_SUBJECT_FILTERS: ErrorKind = _kind("MIRROR_WITH_SUBJECT_FILTERS")
MIRROR_WITH_SUBJECTS: ErrorKind = _kind("MIRROR_WITH_SUBJECTS")
NO_ACCOUNT: ErrorKind = _kind("NO_ACCOUNT")
CLUSTER_UNSUPPORTED_FEATURE: ErrorKind = _kind("CLUSTER_UNSUPPORTED_FEATURE")
NO_MESSAGE_FOUND: ErrorKind = _kind("NO_MESSAGE_FOUND")
NOT_EMPTY_REQUEST: ErrorKind = _kind("NOT_EMPTY_REQUEST")
NOT_ENABLED_FOR_ACCOUNT: ErrorKind = _kind("NOT_ENABLED_FOR_ACCOUNT")
CLUSTER_PEER_NOT_MEMBER: ErrorKind = _kind("CLUSTER_PEER_NOT_MEMBER")
RAFT_GENERAL: ErrorKind = _kind("RAFT_GENERAL")
RESTORE_SUBSCRIBE_FAILED: ErrorKind = _kind("RESTORE_SUBSCRIBE_FAILED")
SEQUENCE_NOT_FOUND: ErrorKind = _kind("SEQUENCE_NOT_FOUND")
CLUSTER_SERVER_NOT_MEMBER: ErrorKind = _kind("CLUSTER_SERVER_NOT_MEMBER")
SOURCE_CONSUMER_SETUP_FAILED: ErrorKind = _kind("SOURCE_CONSUMER_SETUP_FAILED")
SOURCE_MAX_MESSAGE_SIZE_TOO_BIG: ErrorKind = _kind("SOURCE_MAX_MESSAGE_SIZE_TOO_BIG")
STORAGE_RESOURCES_EXCEEDED: ErrorKind = _kind("STORAGE_RESOURCES_EXCEEDED")
STREAM_ASSIGNMENT: ErrorKind = _kind("STREAM_ASSIGNMENT")
STREAM_CREATE: ErrorKind = _kind("STREAM_CREATE")
STREAM_DELETE: ErrorKind = _kind("STREAM_DELETE")
STREAM_GENERAL_ERROR: ErrorKind = _kind("STREAM_GENERAL_ERROR")
STREAM_INVALID_CONFIG: ErrorKind = _kind("STREAM_INVALID_CONFIG")
STREAM_LIMITS: ErrorKind = _kind("STREAM_LIMITS")
STREAM_MESSAGE_EXCEEDS_MAXIMUM: ErrorKind = _kind("STREAM_MESSAGE_EXCEEDS_MAXIMUM")
STREAM_MIRROR_NOT_UPDATABLE: ErrorKind = _kind("STREAM_MIRROR_NOT_UPDATABLE")
STREAM_MISMATCH: ErrorKind = _kind("STREAM_MISMATCH")
STREAM_MSG_DELETE_FAILED: ErrorKind = _kind("STREAM_MSG_DELETE_FAILED")
STREAM_NAME_EXIST: ErrorKind = _kind("STREAM_NAME_EXIST")
STREAM_NOT_FOUND: ErrorKind = _kind("STREAM_NOT_FOUND")
STREAM_NOT_MATCH: ErrorKind = _kind("STREAM_NOT_MATCH")
STREAM_REPLICAS_NOT_UPDATABLE: ErrorKind = _kind("STREAM_REPLICAS_NOT_UPDATABLE")
STREAM_RESTORE: ErrorKind = _kind("STREAM_RESTORE")
STREAM_SEQUENCE_NOT_MATCH: ErrorKind = _kind("STREAM_SEQUENCE_NOT_MATCH")
STREAM_SNAPSHOT: ErrorKind = _kind("STREAM_SNAPSHOT")
STREAM_SUBJECT_OVERLAP: ErrorKind = _kind("STREAM_SUBJECT_OVERLAP")
STREAM_TEMPLATE_CREATE: ErrorKind = _kind("STREAM_TEMPLATE_CREATE")
STREAM_TEMPLATE_DELETE: ErrorKind = _kind("STREAM_TEMPLATE_DELETE")
STREAM_TEMPLATE_NOT_FOUND: ErrorKind = _kind("STREAM_TEMPLATE_NOT_FOUND")
STREAM_UPDATE: ErrorKind = _kind("STREAM_UPDATE")
STREAM_WRONG_LAST_MSG_ID: ErrorKind = _kind("STREAM_WRONG_LAST_MSG_ID")
STREAM_WRONG_LAST_SEQUENCE: ErrorKind = _kind("STREAM_WRONG_LAST_SEQUENCE")
TEMP_STORAGE_FAILED: ErrorKind = _kind("TEMP_STORAGE_FAILED")
TEMPLATE_NAME_NOT_MATCH_SUBJECT: ErrorKind = _kind("TEMPLATE_NAME_NOT_MATCH_SUBJECT")
STREAM_REPLICAS_NOT_SUPPORTED: ErrorKind = _kind("STREAM_REPLICAS_NOT_SUPPORTED")
PEER_REMAP: ErrorKind = _kind("PEER_REMAP")
NOT_ENABLED: ErrorKind = _kind("NOT_ENABLED")
STREAM_STORE_FAILED: ErrorKind = _kind("STREAM_STORE_FAILED")
CONSUMER_CONFIG_REQUIRED: ErrorKind = _kind("CONSUMER_CONFIG_REQUIRED")
CONSUMER_DELIVER_TO_WILDCARDS: ErrorKind = _kind("CONSUMER_DELIVER_TO_WILDCARDS")
CONSUMER_PUSH_MAX_WAITING: ErrorKind = _kind("CONSUMER_PUSH_MAX_WAITING")
CONSUMER_DELIVER_CYCLE: ErrorKind = _kind("CONSUMER_DELIVER_CYCLE")
CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED: ErrorKind = _kind("CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED")
CONSUMER_SMALL_HEARTBEAT: ErrorKind = _kind("CONSUMER_SMALL_HEARTBEAT")
CONSUMER_PULL_REQUIRES_ACK: ErrorKind = _kind("CONSUMER_PULL_REQUIRES_ACK")
CONSUMER_PULL_NOT_DURABLE: ErrorKind = _kind("CONSUMER_PULL_NOT_DURABLE")
CONSUMER_PULL_WITH_RATE_LIMIT: ErrorKind = _kind("CONSUMER_PULL_WITH_RATE_LIMIT")
CONSUMER_MAX_WAITING_NEGATIVE: ErrorKind = _kind("CONSUMER_MAX_WAITING_NEGATIVE")
CONSUMER_HB_REQUIRES_PUSH: ErrorKind = _kind("CONSUMER_HB_REQUIRES_PUSH")
CONSUMER_FC_REQUIRES_PUSH: ErrorKind = _kind("CONSUMER_FC_REQUIRES_PUSH")
CONSUMER_DIRECT_REQUIRES_PUSH: ErrorKind = _kind("CONSUMER_DIRECT_REQUIRES_PUSH")
CONSUMER_DIRECT_REQUIRES_EPHEMERAL: ErrorKind = _kind("CONSUMER_DIRECT_REQUIRES_EPHEMERAL")
CONSUMER_ON_MAPPED: ErrorKind = _kind("CONSUMER_ON_MAPPED")
CONSUMER_FILTER_NOT_SUBSET: ErrorKind = _kind("CONSUMER_FILTER_NOT_SUBSET")
CONSUMER_INVALID_POLICY: ErrorKind = _kind("CONSUMER_INVALID_POLICY")
CONSUMER_INVALID_SAMPLING: ErrorKind = _kind("CONSUMER_INVALID_SAMPLING")
STREAM_INVALID: ErrorKind = _kind("STREAM_INVALID")
STREAM_HEADER_EXCEEDS_MAXIMUM: ErrorKind = _kind("STREAM_HEADER_EXCEEDS_MAXIMUM")
CONSUMER_WQ_REQUIRES_EXPLICIT_ACK: ErrorKind = _kind("CONSUMER_WQ_REQUIRES_EXPLICIT_ACK")
CONSUMER_WQ_MULTIPLE_UNFILTERED: ErrorKind = _kind("CONSUMER_WQ_MULTIPLE_UNFILTERED")
CONSUMER_WQ_CONSUMER_NOT_UNIQUE: ErrorKind = _kind("CONSUMER_WQ_CONSUMER_NOT_UNIQUE")
CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL: ErrorKind = _kind("CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL")
CONSUMER_NAME_TOO_LONG: ErrorKind = _kind("CONSUMER_NAME_TOO_LONG")
CONSUMER_BAD_DURABLE_NAME: ErrorKind = _kind("CONSUMER_BAD_DURABLE_NAME")
CONSUMER_STORE_FAILED: ErrorKind = _kind("CONSUMER_STORE_FAILED")
CONSUMER_EXISTING_ACTIVE: ErrorKind = _kind("CONSUMER_EXISTING_ACTIVE")
CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME: ErrorKind = _kind("CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME")
CONSUMER_DESCRIPTION_TOO_LONG: ErrorKind = _kind("CONSUMER_DESCRIPTION_TOO_LONG")
CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS: ErrorKind = _kind("CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS")
STREAM_SEALED: ErrorKind = _kind("STREAM_SEALED")
STREAM_PURGE_FAILED: ErrorKind = _kind("STREAM_PURGE_FAILED")
STREAM_ROLLUP_FAILED: ErrorKind = _kind("STREAM_ROLLUP_FAILED")
CONSUMER_INVALID_DELIVER_SUBJECT: ErrorKind = _kind("CONSUMER_INVALID_DELIVER_SUBJECT")
STREAM_MAX_BYTES_REQUIRED: ErrorKind = _kind("STREAM_MAX_BYTES_REQUIRED")
CONSUMER_MAX_REQUEST_BATCH_NEGATIVE: ErrorKind = _kind("CONSUMER_MAX_REQUEST_BATCH_NEGATIVE")
CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL: ErrorKind = _kind("CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL")
CONSUMER_MAX_DELIVER_BACKOFF: ErrorKind = _kind("CONSUMER_MAX_DELIVER_BACKOFF")
STREAM_INFO_MAX_SUBJECTS: ErrorKind = _kind("STREAM_INFO_MAX_SUBJECTS")
STREAM_OFFLINE: ErrorKind = _kind("STREAM_OFFLINE")
CONSUMER_OFFLINE: ErrorKind = _kind("CONSUMER_OFFLINE")
NO_LIMITS: ErrorKind = _kind("NO_LIMITS")
CONSUMER_MAX_PENDING_ACK_EXCESS: ErrorKind = _kind("CONSUMER_MAX_PENDING_ACK_EXCESS")
STREAM_MAX_STREAM_BYTES_EXCEEDED: ErrorKind = _kind("STREAM_MAX_STREAM_BYTES_EXCEEDED")
STREAM_MOVE_AND_SCALE: ErrorKind = _kind("STREAM_MOVE_AND_SCALE")
STREAM_MOVE_IN_PROGRESS: ErrorKind = _kind("STREAM_MOVE_IN_PROGRESS")
CONSUMER_MAX_REQUEST_BATCH_EXCEEDED: ErrorKind = _kind("CONSUMER_MAX_REQUEST_BATCH_EXCEEDED")
CONSUMER_REPLICAS_EXCEEDS_STREAM: ErrorKind = _kind("CONSUMER_REPLICAS_EXCEEDS_STREAM")
CONSUMER_NAME_CONTAINS_PATH_SEPARATORS: ErrorKind = _kind("CONSUMER_NAME_CONTAINS_PATH_SEPARATORS")
STREAM_NAME_CONTAINS_PATH_SEPARATORS: ErrorKind = _kind("STREAM_NAME_CONTAINS_PATH_SEPARATORS")
STREAM_RECONFIGURE_NOT_IN_PROGRESS: ErrorKind = _kind("STREAM_RECONFIGURE_NOT_IN_PROGRESS")
STREAM_NAME_EXIST_RESTORE_FAILED: ErrorKind = _kind("STREAM_NAME_EXIST_RESTORE_FAILED")
CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH: ErrorKind = _kind("CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH")
CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH: ErrorKind = _kind("CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH")
REPLICAS_COUNT_CANNOT_BE_NEGATIVE: ErrorKind = _kind("REPLICAS_COUNT_CANNOT_BE_NEGATIVE")
CONSUMER_REPLICAS_SHOULD_MATCH_STREAM: ErrorKind = _kind("CONSUMER_REPLICAS_SHOULD_MATCH_STREAM")
CONSUMER_METADATA_LENGTH: ErrorKind = _kind("CONSUMER_METADATA_LENGTH")
CONSUMER_DUPLICATE_FILTER_SUBJECTS: ErrorKind = _kind("CONSUMER_DUPLICATE_FILTER_SUBJECTS")
CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED: ErrorKind = _kind("CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED")
CONSUMER_OVERLAPPING_SUBJECT_FILTERS: ErrorKind = _kind("CONSUMER_OVERLAPPING_SUBJECT_FILTERS")
CONSUMER_EMPTY_FILTER: ErrorKind = _kind("CONSUMER_EMPTY_FILTER")
SOURCE_DUPLICATE_DETECTED: ErrorKind = _kind("SOURCE_DUPLICATE_DETECTED")
SOURCE_INVALID_STREAM_NAME: ErrorKind = _kind("SOURCE_INVALID_STREAM_NAME")
MIRROR_INVALID_STREAM_NAME: ErrorKind = _kind("MIRROR_INVALID_STREAM_NAME")
MIRROR_WITH_FIRST_SEQ: ErrorKind = _kind("MIRROR_WITH_FIRST_SEQ")
SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED: ErrorKind = _kind("SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED")
SOURCE_INVALID_SUBJECT_FILTER: ErrorKind = _kind("SOURCE_INVALID_SUBJECT_FILTER")
SOURCE_INVALID_TRANSFORM_DESTINATION: ErrorKind = _kind("SOURCE_INVALID_TRANSFORM_DESTINATION")
SOURCE_OVERLAPPING_SUBJECT_FILTERS: ErrorKind = _kind("SOURCE_OVERLAPPING_SUBJECT_FILTERS")
CONSUMER_ALREADY_EXISTS: ErrorKind = _kind("CONSUMER_ALREADY_EXISTS")
CONSUMER_DOES_NOT_EXIST: ErrorKind = _kind("CONSUMER_DOES_NOT_EXIST")
MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED: ErrorKind = _kind("MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED")
MIRROR_INVALID_SUBJECT_FILTER: ErrorKind = _kind("MIRROR_INVALID_SUBJECT_FILTER")
MIRROR_OVERLAPPING_SUBJECT_FILTERS: ErrorKind = _kind("MIRROR_OVERLAPPING_SUBJECT_FILTERS")
CONSUMER_INACTIVE_THRESHOLD_EXCESS: ErrorKind = _kind("CONSUMER_INACTIVE_THRESHOLD_EXCESS")
MIRROR_INVALID_TRANSFORM_DESTINATION: ErrorKind = _kind("MIRROR_INVALID_TRANSFORM_DESTINATION")
STREAM_TRANSFORM_INVALID_SOURCE: ErrorKind = _kind("STREAM_TRANSFORM_INVALID_SOURCE")
STREAM_TRANSFORM_INVALID_DESTINATION: ErrorKind = _kind("STREAM_TRANSFORM_INVALID_DESTINATION")
PEDANTIC: ErrorKind = _kind("PEDANTIC")
STREAM_DUPLICATE_MESSAGE_CONFLICT: ErrorKind = _kind("STREAM_DUPLICATE_MESSAGE_CONFLICT")
CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP: ErrorKind = _kind("CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP")
CONSUMER_INVALID_PRIORITY_GROUP: ErrorKind = _kind("CONSUMER_INVALID_PRIORITY_GROUP")
CONSUMER_EMPTY_GROUP_NAME: ErrorKind = _kind("CONSUMER_EMPTY_GROUP_NAME")
CONSUMER_INVALID_GROUP_NAME: ErrorKind = _kind("CONSUMER_INVALID_GROUP_NAME")
STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY: ErrorKind = _kind("STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY")
STREAM_WRONG_LAST_SEQUENCE_CONSTANT: ErrorKind = _kind("STREAM_WRONG_LAST_SEQUENCE_CONSTANT")
MESSAGE_TTL_INVALID: ErrorKind = _kind("MESSAGE_TTL_INVALID")
MESSAGE_TTL_DISABLED: ErrorKind = _kind("MESSAGE_TTL_DISABLED")
STREAM_TOO_MANY_REQUESTS: ErrorKind = _kind("STREAM_TOO_MANY_REQUESTS")
MESSAGE_INCR_DISABLED: ErrorKind = _kind("MESSAGE_INCR_DISABLED")
MESSAGE_INCR_MISSING: ErrorKind = _kind("MESSAGE_INCR_MISSING")
MESSAGE_INCR_PAYLOAD: ErrorKind = _kind("MESSAGE_INCR_PAYLOAD")
MESSAGE_INCR_INVALID: ErrorKind = _kind("MESSAGE_INCR_INVALID")
MESSAGE_COUNTER_BROKEN: ErrorKind = _kind("MESSAGE_COUNTER_BROKEN")
MIRROR_WITH_COUNTERS: ErrorKind = _kind("MIRROR_WITH_COUNTERS")
ATOMIC_PUBLISH_DISABLED: ErrorKind = _kind("ATOMIC_PUBLISH_DISABLED")
ATOMIC_PUBLISH_MISSING_SEQ: ErrorKind = _kind("ATOMIC_PUBLISH_MISSING_SEQ")
ATOMIC_PUBLISH_INCOMPLETE_BATCH: ErrorKind = _kind("ATOMIC_PUBLISH_INCOMPLETE_BATCH")
ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH: ErrorKind = _kind("ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH")
CONSUMER_PUSH_WITH_PRIORITY_GROUP: ErrorKind = _kind("CONSUMER_PUSH_WITH_PRIORITY_GROUP")
ATOMIC_PUBLISH_INVALID_BATCH_ID: ErrorKind = _kind("ATOMIC_PUBLISH_INVALID_BATCH_ID")
STREAM_MIN_LAST_SEQ: ErrorKind = _kind("STREAM_MIN_LAST_SEQ")
CONSUMER_ACK_POLICY_INVALID: ErrorKind = _kind("CONSUMER_ACK_POLICY_INVALID")
CONSUMER_REPLAY_POLICY_INVALID: ErrorKind = _kind("CONSUMER_REPLAY_POLICY_INVALID")
CONSUMER_ACK_WAIT_NEGATIVE: ErrorKind = _kind("CONSUMER_ACK_WAIT_NEGATIVE")
CONSUMER_BACKOFF_NEGATIVE: ErrorKind = _kind("CONSUMER_BACKOFF_NEGATIVE")
REQUIRED_API_LEVEL: ErrorKind = _kind("REQUIRED_API_LEVEL")
MIRROR_WITH_MSG_SCHEDULES: ErrorKind = _kind("MIRROR_WITH_MSG_SCHEDULES")
SOURCE_WITH_MSG_SCHEDULES: ErrorKind = _kind("SOURCE_WITH_MSG_SCHEDULES")
MESSAGE_SCHEDULES_DISABLED: ErrorKind = _kind("MESSAGE_SCHEDULES_DISABLED")
MESSAGE_SCHEDULES_PATTERN_INVALID: ErrorKind = _kind("MESSAGE_SCHEDULES_PATTERN_INVALID")
MESSAGE_SCHEDULES_TARGET_INVALID: ErrorKind = _kind("MESSAGE_SCHEDULES_TARGET_INVALID")
MESSAGE_SCHEDULES_TTL_INVALID: ErrorKind = _kind("MESSAGE_SCHEDULES_TTL_INVALID")
MESSAGE_SCHEDULES_ROLLUP_INVALID: ErrorKind = _kind("MESSAGE_SCHEDULES_ROLLUP_INVALID")
STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID: ErrorKind = _kind("STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID")
STREAM_OFFLINE_REASON: ErrorKind = _kind("STREAM_OFFLINE_REASON")
CONSUMER_OFFLINE_REASON: ErrorKind = _kind("CONSUMER_OFFLINE_REASON")
CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE: ErrorKind = _kind("CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE")
CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE: ErrorKind = _kind("CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE")
MIRROR_WITH_ATOMIC_PUBLISH: ErrorKind = _kind("MIRROR_WITH_ATOMIC_PUBLISH")
ATOMIC_PUBLISH_TOO_LARGE_BATCH: ErrorKind = _kind("ATOMIC_PUBLISH_TOO_LARGE_BATCH")
ATOMIC_PUBLISH_INVALID_BATCH_COMMIT: ErrorKind = _kind("ATOMIC_PUBLISH_INVALID_BATCH_COMMIT")
ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE: ErrorKind = _kind("ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE")
CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT: ErrorKind = _kind("CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT")
MESSAGE_SCHEDULES_SOURCE_INVALID: ErrorKind = _kind("MESSAGE_SCHEDULES_SOURCE_INVALID")
CONSUMER_INVALID_RESET: ErrorKind = _kind("CONSUMER_INVALID_RESET")
BATCH_PUBLISH_DISABLED: ErrorKind = _kind("BATCH_PUBLISH_DISABLED")
BATCH_PUBLISH_INVALID_PATTERN: ErrorKind = _kind("BATCH_PUBLISH_INVALID_PATTERN")
BATCH_PUBLISH_INVALID_BATCH_ID: ErrorKind = _kind("BATCH_PUBLISH_INVALID_BATCH_ID")
BATCH_PUBLISH_UNKNOWN_BATCH_ID: ErrorKind = _kind("BATCH_PUBLISH_UNKNOWN_BATCH_ID")
MIRROR_WITH_BATCH_PUBLISH: ErrorKind = _kind("MIRROR_WITH_BATCH_PUBLISH")
ATOMIC_PUBLISH_TOO_MANY_INFLIGHT: ErrorKind = _kind("ATOMIC_PUBLISH_TOO_MANY_INFLIGHT")
BATCH_PUBLISH_TOO_MANY_INFLIGHT: ErrorKind = _kind("BATCH_PUBLISH_TOO_MANY_INFLIGHT")
MESSAGE_SCHEDULES_SCHEDULER_INVALID: ErrorKind = _kind("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
MIRROR_DURABLE_CONSUMER_CFG_INVALID: ErrorKind = _kind("MIRROR_DURABLE_CONSUMER_CFG_INVALID")
MIRROR_CONSUMER_REQUIRES_ACK_FC: ErrorKind = _kind("MIRROR_CONSUMER_REQUIRES_ACK_FC")
SOURCE_DURABLE_CONSUMER_CFG_INVALID: ErrorKind = _kind("SOURCE_DURABLE_CONSUMER_CFG_INVALID")
SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED: ErrorKind = _kind("SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED")
SOURCE_CONSUMER_REQUIRES_ACK_FC: ErrorKind = _kind("SOURCE_CONSUMER_REQUIRES_ACK_FC")
CONSUMER_ACK_FC_REQUIRES_PUSH: ErrorKind = _kind("CONSUMER_ACK_FC_REQUIRES_PUSH")
CONSUMER_ACK_FC_REQUIRES_FC: ErrorKind = _kind("CONSUMER_ACK_FC_REQUIRES_FC")
CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING: ErrorKind = _kind("CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING")
CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT: ErrorKind = _kind("CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT")
CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER: ErrorKind = _kind("CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER")
MESSAGE_SCHEDULES_TIME_ZONE_INVALID: ErrorKind = _kind("MESSAGE_SCHEDULES_TIME_ZONE_INVALID")
CLUSTER_RESCUE: ErrorKind = _kind("CLUSTER_RESCUE")
CONSUMER_STREAM_IDENTITY_MISMATCH: ErrorKind = _kind("CONSUMER_STREAM_IDENTITY_MISMATCH")
STREAM_RECONFIGURE_IN_PROGRESS: ErrorKind = _kind("STREAM_RECONFIGURE_IN_PROGRESS")
MESSAGE_SOURCE_HDR_NOT_ALLOWED: ErrorKind = _kind("MESSAGE_SOURCE_HDR_NOT_ALLOWED")

# An ApiError inside an answer (``to_go``) is written as its wire form.
register_encoder(ApiError, ApiError.to_dict)
