"""JetStream API request and response bodies, as nats-server writes and reads them.

Every response Struct has its ``type`` string as the default of its ``type`` field, so building one and
calling ``.to_json()`` (or ``go_json(resp)``) gives the wire form: fields in nats-server's order,
``omitempty`` fields left out when zero, map keys sorted, Go's HTML escaping. Go's embedded structs
(``*StreamInfo`` in the stream responses, ``*ConsumerInfo`` in the consumer responses,
``*JetStreamAccountStats`` in account info) are the ``info`` field here: ``None`` (nothing written, as
in error responses) or an info Struct whose fields are written in place.

Requests are decoded with ``decode_request(body, RequestClass)`` (nats-server's strict decoding and its
``invalid JSON: ...`` errors, see ``config.go_decode``).

Times are RFC3339 strings (``config.format_time(ns)``; Go's zero time ``0001-01-01T00:00:00Z`` for
unset ones), durations and sizes are ints.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

import msgspec

from rillet.jetstream.config import (
    AccountLimits,
    ConsumerConfig,
    Duration,
    ExternalStream,
    GO_ZERO_TIME,
    GoName,
    Int,
    Int64,
    OptTime,
    Placement,
    StreamConfig,
    SubjectTransformConfig,
    Time,
    Uint64,
    _Go,
    go_decode,
    go_json,
    to_go,
)
from rillet.jetstream.errors import ApiError

TYPE_PREFIX = "io.nats.jetstream.api.v1."

ACCOUNT_INFO_RESPONSE = TYPE_PREFIX + "account_info_response"
ACCOUNT_PURGE_RESPONSE = TYPE_PREFIX + "account_purge_response"
STREAM_CREATE_RESPONSE = TYPE_PREFIX + "stream_create_response"
STREAM_UPDATE_RESPONSE = TYPE_PREFIX + "stream_update_response"
STREAM_INFO_RESPONSE = TYPE_PREFIX + "stream_info_response"
STREAM_DELETE_RESPONSE = TYPE_PREFIX + "stream_delete_response"
STREAM_NAMES_RESPONSE = TYPE_PREFIX + "stream_names_response"
STREAM_LIST_RESPONSE = TYPE_PREFIX + "stream_list_response"
STREAM_PURGE_RESPONSE = TYPE_PREFIX + "stream_purge_response"
STREAM_MSG_GET_RESPONSE = TYPE_PREFIX + "stream_msg_get_response"
STREAM_MSG_DELETE_RESPONSE = TYPE_PREFIX + "stream_msg_delete_response"
STREAM_SNAPSHOT_RESPONSE = TYPE_PREFIX + "stream_snapshot_response"
STREAM_RESTORE_RESPONSE = TYPE_PREFIX + "stream_restore_response"
STREAM_REMOVE_PEER_RESPONSE = TYPE_PREFIX + "stream_remove_peer_response"
STREAM_LEADER_STEPDOWN_RESPONSE = TYPE_PREFIX + "stream_leader_stepdown_response"
CONSUMER_CREATE_RESPONSE = TYPE_PREFIX + "consumer_create_response"
CONSUMER_INFO_RESPONSE = TYPE_PREFIX + "consumer_info_response"
CONSUMER_DELETE_RESPONSE = TYPE_PREFIX + "consumer_delete_response"
CONSUMER_NAMES_RESPONSE = TYPE_PREFIX + "consumer_names_response"
CONSUMER_LIST_RESPONSE = TYPE_PREFIX + "consumer_list_response"
CONSUMER_PAUSE_RESPONSE = TYPE_PREFIX + "consumer_pause_response"
CONSUMER_UNPIN_RESPONSE = TYPE_PREFIX + "consumer_unpin_response"
CONSUMER_RESET_RESPONSE = TYPE_PREFIX + "consumer_reset_response"
CONSUMER_LEADER_STEPDOWN_RESPONSE = TYPE_PREFIX + "consumer_leader_stepdown_response"
META_LEADER_STEPDOWN_RESPONSE = TYPE_PREFIX + "meta_leader_stepdown_response"
META_SERVER_REMOVE_RESPONSE = TYPE_PREFIX + "meta_server_remove_response"
SYSTEM_RESPONSE = TYPE_PREFIX + "system_response"
SYSTEM_OVERLOADED = TYPE_PREFIX + "system_overloaded"

NAMES_LIMIT = 1024  # names per page (stream/consumer names)
LIST_LIMIT = 256  # infos per page (stream/consumer list)
MAX_SUBJECT_DETAILS = 100_000  # subjects a stream info may report


def decode_request(body: bytes | str | None, cls: type, top: str | None = None) -> Any:
    """Decode a request body like nats-server (INVALID_JSON ``ApiError`` on failure; empty = defaults)."""
    return go_decode(body, cls, top)


# ---------------------------------------------------------------------------------------------------
# Info objects


class SequenceInfo(_Go):
    consumer_seq: Uint64 = 0
    stream_seq: Uint64 = 0
    last_active: OptTime = None
    __omitempty__ = frozenset({"last_active"})


class LostStreamData(_Go):
    msgs: Optional[list[Uint64]] = None
    bytes: Uint64 = 0


class StreamState(_Go):
    messages: Uint64 = 0
    bytes: Uint64 = 0
    first_seq: Uint64 = 0
    first_ts: Time = GO_ZERO_TIME
    last_seq: Uint64 = 0
    last_ts: Time = GO_ZERO_TIME
    num_subjects: Int = 0
    subjects: Optional[dict[str, Uint64]] = None
    num_deleted: Int = 0
    deleted: Optional[list[Uint64]] = None
    lost: Optional[LostStreamData] = None
    consumer_count: Int = 0
    __omitempty__ = frozenset({"num_subjects", "subjects", "num_deleted", "deleted", "lost"})


class PeerInfo(_Go):
    name: str = ""
    current: bool = False
    offline: bool = False
    active: Duration = 0
    lag: Uint64 = 0
    peer: str = ""
    pending: bool = False
    __omitempty__ = frozenset({"offline", "lag", "pending"})


class ClusterInfo(_Go):
    name: str = ""
    raft_group: str = ""
    leader: str = ""
    leader_since: OptTime = None
    system_account: bool = False
    traffic_account: str = ""
    replicas: Optional[list[PeerInfo]] = None
    desired: Optional[dict[str, Any]] = None
    __omitempty__ = frozenset({"name", "raft_group", "leader", "leader_since", "system_account",
                               "traffic_account", "replicas", "desired"})


class StreamSourceInfo(_Go):
    name: str = ""
    external: Optional[ExternalStream] = None
    lag: Uint64 = 0
    active: Duration = 0
    error: Any = None
    filter_subject: str = ""
    subject_transforms: Optional[list[SubjectTransformConfig]] = None
    __omitempty__ = frozenset({"external", "error", "filter_subject", "subject_transforms"})


class StreamAlternate(_Go):
    name: str = ""
    domain: str = ""
    cluster: str = ""
    __omitempty__ = frozenset({"domain"})


class StreamInfo(_Go):
    config: StreamConfig = msgspec.field(default_factory=StreamConfig)
    created: Time = GO_ZERO_TIME
    state: StreamState = msgspec.field(default_factory=StreamState)
    domain: str = ""
    cluster: Optional[ClusterInfo] = None
    mirror: Optional[StreamSourceInfo] = None
    sources: Annotated[Optional[list[StreamSourceInfo]], GoName("[]*server.StreamSourceInfo")] = None
    alternates: Optional[list[StreamAlternate]] = None
    ts: Time = GO_ZERO_TIME
    __omitempty__ = frozenset({"domain", "cluster", "mirror", "sources", "alternates"})


class PriorityGroupState(_Go):
    group: str = ""
    pinned_client_id: str = ""
    pinned_ts: Time = GO_ZERO_TIME
    __omitempty__ = frozenset({"pinned_client_id"})


class ConsumerInfo(_Go):
    stream_name: str = ""
    name: str = ""
    created: Time = GO_ZERO_TIME
    config: Optional[ConsumerConfig] = None
    delivered: SequenceInfo = msgspec.field(default_factory=SequenceInfo)
    ack_floor: SequenceInfo = msgspec.field(default_factory=SequenceInfo)
    num_ack_pending: Int = 0
    num_redelivered: Int = 0
    num_waiting: Int = 0
    num_pending: Uint64 = 0
    cluster: Optional[ClusterInfo] = None
    push_bound: bool = False
    paused: bool = False
    pause_remaining: Duration = 0
    ts: Time = GO_ZERO_TIME
    priority_groups: Optional[list[PriorityGroupState]] = None
    __omitempty__ = frozenset({"config", "cluster", "push_bound", "paused", "pause_remaining",
                               "priority_groups"})


class ApiStats(_Go):
    level: Int = 0
    total: Uint64 = 0
    errors: Uint64 = 0
    inflight: Uint64 = 0
    __omitempty__ = frozenset({"inflight"})


class JetStreamTier(_Go):
    memory: Uint64 = 0
    storage: Uint64 = 0
    reserved_memory: Uint64 = 0
    reserved_storage: Uint64 = 0
    streams: Int = 0
    consumers: Int = 0
    limits: AccountLimits = msgspec.field(default_factory=AccountLimits)


class AccountInfo(_Go):
    """An account's JetStream usage (nats-server JetStreamAccountStats)."""

    memory: Uint64 = 0
    storage: Uint64 = 0
    reserved_memory: Uint64 = 0
    reserved_storage: Uint64 = 0
    streams: Int = 0
    consumers: Int = 0
    limits: AccountLimits = msgspec.field(default_factory=AccountLimits)
    domain: str = ""
    api: ApiStats = msgspec.field(default_factory=ApiStats)
    tiers: Optional[dict[str, JetStreamTier]] = None
    __omitempty__ = frozenset({"domain", "tiers"})


class PubAck(_Go):
    stream: str = ""
    seq: Uint64 = 0
    domain: str = ""
    duplicate: bool = False
    val: str = ""
    batch: str = ""
    count: Uint64 = 0
    __omitempty__ = frozenset({"domain", "duplicate", "val", "batch", "count"})


class StoredMsg(_Go):
    subject: str = ""
    seq: Uint64 = 0
    hdrs: Optional[bytes] = None
    data: Optional[bytes] = None
    time: Time = GO_ZERO_TIME
    __omitempty__ = frozenset({"hdrs", "data"})


# ---------------------------------------------------------------------------------------------------
# Responses


class ApiResponse(_Go):
    type: str = ""
    error: Any = None
    __omitempty__ = frozenset({"error"})


class _Paged(ApiResponse):
    total: Int = 0
    offset: Int = 0
    limit: Int = 0


class AccountInfoResponse(ApiResponse):
    type: str = ACCOUNT_INFO_RESPONSE
    info: Optional[AccountInfo] = None
    __inline__ = frozenset({"info"})


class AccountPurgeResponse(ApiResponse):
    type: str = ACCOUNT_PURGE_RESPONSE
    initiated: bool = False
    __omitempty__ = frozenset({"error", "initiated"})


class StreamCreateResponse(ApiResponse):
    type: str = STREAM_CREATE_RESPONSE
    info: Optional[StreamInfo] = None
    did_create: bool = False
    __inline__ = frozenset({"info"})
    __omitempty__ = frozenset({"error", "did_create"})


class StreamUpdateResponse(ApiResponse):
    type: str = STREAM_UPDATE_RESPONSE
    info: Optional[StreamInfo] = None
    __inline__ = frozenset({"info"})


class StreamInfoResponse(_Paged):
    type: str = STREAM_INFO_RESPONSE
    info: Optional[StreamInfo] = None
    __inline__ = frozenset({"info"})


class StreamDeleteResponse(ApiResponse):
    type: str = STREAM_DELETE_RESPONSE
    success: bool = False
    __omitempty__ = frozenset({"error", "success"})


class StreamNamesResponse(_Paged):
    type: str = STREAM_NAMES_RESPONSE
    streams: Optional[list[str]] = None


class StreamListResponse(_Paged):
    type: str = STREAM_LIST_RESPONSE
    streams: Annotated[Optional[list[StreamInfo]], GoName("[]*server.StreamInfo")] = None
    missing: Optional[list[str]] = None
    offline: Optional[dict[str, str]] = None
    __omitempty__ = frozenset({"error", "missing", "offline"})


class StreamPurgeResponse(ApiResponse):
    type: str = STREAM_PURGE_RESPONSE
    success: bool = False
    purged: Uint64 = 0
    __omitempty__ = frozenset({"error", "success"})


class MsgGetResponse(ApiResponse):
    type: str = STREAM_MSG_GET_RESPONSE
    message: Optional[StoredMsg] = None
    __omitempty__ = frozenset({"error", "message"})


class MsgDeleteResponse(ApiResponse):
    type: str = STREAM_MSG_DELETE_RESPONSE
    success: bool = False
    __omitempty__ = frozenset({"error", "success"})


class StreamSnapshotResponse(ApiResponse):
    type: str = STREAM_SNAPSHOT_RESPONSE
    config: Optional[StreamConfig] = None
    state: Optional[StreamState] = None
    __omitempty__ = frozenset({"error", "config", "state"})


class StreamRestoreResponse(ApiResponse):
    type: str = STREAM_RESTORE_RESPONSE
    deliver_subject: str = ""


class StreamRemovePeerResponse(ApiResponse):
    type: str = STREAM_REMOVE_PEER_RESPONSE
    success: bool = False
    __omitempty__ = frozenset({"error", "success"})


class StreamLeaderStepDownResponse(ApiResponse):
    type: str = STREAM_LEADER_STEPDOWN_RESPONSE
    success: bool = False
    __omitempty__ = frozenset({"error", "success"})


class ConsumerLeaderStepDownResponse(ApiResponse):
    type: str = CONSUMER_LEADER_STEPDOWN_RESPONSE
    success: bool = False
    __omitempty__ = frozenset({"error", "success"})


class MetaLeaderStepDownResponse(ApiResponse):
    type: str = META_LEADER_STEPDOWN_RESPONSE
    success: bool = False
    __omitempty__ = frozenset({"error", "success"})


class ConsumerCreateResponse(ApiResponse):
    type: str = CONSUMER_CREATE_RESPONSE
    info: Optional[ConsumerInfo] = None
    __inline__ = frozenset({"info"})


class ConsumerInfoResponse(ApiResponse):
    type: str = CONSUMER_INFO_RESPONSE
    info: Optional[ConsumerInfo] = None
    __inline__ = frozenset({"info"})


class ConsumerDeleteResponse(ApiResponse):
    type: str = CONSUMER_DELETE_RESPONSE
    success: bool = False
    __omitempty__ = frozenset({"error", "success"})


class ConsumerNamesResponse(_Paged):
    """nats-server starts this response with an empty list, so even errors carry ``"consumers":[]``."""

    type: str = CONSUMER_NAMES_RESPONSE
    consumers: Optional[list[str]] = msgspec.field(default_factory=list)


class ConsumerListResponse(_Paged):
    """nats-server starts this response with an empty list, so even errors carry ``"consumers":[]``."""

    type: str = CONSUMER_LIST_RESPONSE
    consumers: Annotated[Optional[list[ConsumerInfo]], GoName("[]*server.ConsumerInfo")] = \
        msgspec.field(default_factory=list)
    missing: Optional[list[str]] = None
    offline: Optional[dict[str, str]] = None
    __omitempty__ = frozenset({"error", "missing", "offline"})


class ConsumerPauseResponse(ApiResponse):
    type: str = CONSUMER_PAUSE_RESPONSE
    paused: bool = False
    pause_until: Time = GO_ZERO_TIME
    pause_remaining: Duration = 0
    __omitempty__ = frozenset({"error", "pause_remaining"})


class ConsumerUnpinResponse(ApiResponse):
    type: str = CONSUMER_UNPIN_RESPONSE


class ConsumerResetResponse(ApiResponse):
    type: str = CONSUMER_RESET_RESPONSE
    info: Optional[ConsumerInfo] = None
    reset_seq: Uint64 = 0
    __inline__ = frozenset({"info"})


class PubAckResponse(_Go):
    """A publish acknowledgement: ``{"error":...}`` and/or the ack fields (no ``type``)."""

    error: Any = None
    ack: Optional[PubAck] = None
    __omitempty__ = frozenset({"error"})
    __inline__ = frozenset({"ack"})


# ---------------------------------------------------------------------------------------------------
# Requests


class ApiPagedRequest(_Go):
    offset: Int = 0


class StreamInfoRequest(_Go):
    offset: Int = 0
    deleted_details: bool = False
    subjects_filter: str = ""
    __omitempty__ = frozenset({"deleted_details", "subjects_filter"})
    __go_name__ = "server.JSApiStreamInfoRequest"


class StreamNamesRequest(_Go):
    offset: Int = 0
    subject: str = ""
    __omitempty__ = frozenset({"subject"})
    __go_name__ = "server.JSApiStreamNamesRequest"


class StreamListRequest(_Go):
    offset: Int = 0
    subject: str = ""
    __omitempty__ = frozenset({"subject"})
    __go_name__ = "server.JSApiStreamListRequest"


class StreamPurgeRequest(_Go):
    seq: Uint64 = 0
    filter: str = ""
    keep: Uint64 = 0
    __omitempty__ = frozenset({"seq", "filter", "keep"})
    __go_name__ = "server.JSApiStreamPurgeRequest"


class MsgGetRequest(_Go):
    """STREAM.MSG.GET and DIRECT.GET bodies."""

    seq: Uint64 = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: Int = 0
    max_bytes: Int = 0
    start_time: OptTime = None
    multi_last: Optional[list[str]] = None
    up_to_seq: Uint64 = 0
    up_to_time: OptTime = None
    no_hdr: bool = False
    __omitempty__ = frozenset({"seq", "last_by_subj", "next_by_subj", "batch", "max_bytes", "start_time",
                               "multi_last", "up_to_seq", "up_to_time", "no_hdr"})
    __go_name__ = "server.JSApiMsgGetRequest"


DirectGetRequest = MsgGetRequest


class MsgDeleteRequest(_Go):
    seq: Uint64 = 0
    no_erase: bool = False
    __omitempty__ = frozenset({"no_erase"})
    __go_name__ = "server.JSApiMsgDeleteRequest"


class StreamSnapshotRequest(_Go):
    deliver_subject: str = ""
    no_consumers: bool = False
    chunk_size: Int = 0
    window_size: Int = 0
    jsck: bool = False
    __omitempty__ = frozenset({"no_consumers", "chunk_size", "window_size", "jsck"})
    __go_name__ = "server.JSApiStreamSnapshotRequest"


class StreamRestoreRequest(_Go):
    config: StreamConfig = msgspec.field(default_factory=StreamConfig)
    state: StreamState = msgspec.field(default_factory=StreamState)
    __go_name__ = "server.JSApiStreamRestoreRequest"


class StreamRemovePeerRequest(_Go):
    peer: str = ""
    __go_name__ = "server.JSApiStreamRemovePeerRequest"


class LeaderStepdownRequest(_Go):
    placement: Optional[Placement] = None
    __omitempty__ = frozenset({"placement"})
    __go_name__ = "server.JSApiLeaderStepdownRequest"


class ConsumersRequest(_Go):
    offset: Int = 0
    __go_name__ = "server.JSApiConsumersRequest"


class NextRequest(_Go):
    """A pull request (CONSUMER.MSG.NEXT body); the priority group fields are inline like in Go."""

    expires: Duration = 0
    batch: Int = 0
    max_bytes: Int = 0
    no_wait: bool = False
    idle_heartbeat: Duration = 0
    group: str = ""
    min_pending: Int64 = 0
    min_ack_pending: Int64 = 0
    id: str = ""
    priority: Int = 0
    __omitempty__ = frozenset({"expires", "batch", "max_bytes", "no_wait", "idle_heartbeat", "group",
                               "min_pending", "min_ack_pending", "id", "priority"})
    __go_name__ = "server.JSApiConsumerGetNextRequest"


def parse_next_request(body: bytes | str | None) -> NextRequest:
    """A pull request body as nats-server reads it: empty = one message, a bare integer = that batch,
    otherwise JSON (unknown fields ignored). Raises ``ApiError`` (INVALID_JSON; its ``description``
    minus the ``invalid JSON: `` prefix is Go's text) or ``ValueError("heartbeat value too large")``
    when ``idle_heartbeat`` is more than half of ``expires``."""
    if isinstance(body, str):
        body = body.encode()
    req = (body or b"").strip()
    if not req:
        return NextRequest(batch=1)
    if req[:1] == b"{":
        nr = go_decode(req, NextRequest, strict=False)
        if nr.idle_heartbeat > 0 and nr.idle_heartbeat * 2 > nr.expires:
            raise ValueError("heartbeat value too large")
        return nr
    try:
        text = req.decode("ascii")
        if text[:1] in "+-" and text[1:].isdigit() or text.isdigit():
            return NextRequest(batch=int(text))
    except (UnicodeDecodeError, ValueError):
        pass
    return NextRequest(batch=1)


class ConsumerPauseRequest(_Go):
    pause_until: Time = GO_ZERO_TIME
    __go_name__ = "server.JSApiConsumerPauseRequest"


class ConsumerUnpinRequest(_Go):
    group: str = ""
    __go_name__ = "server.JSApiConsumerUnpinRequest"


class ConsumerResetRequest(_Go):
    seq: Uint64 = 0
    __omitempty__ = frozenset({"seq"})
    __go_name__ = "server.JSApiConsumerResetRequest"


# ---------------------------------------------------------------------------------------------------
# Encoding helpers


def encode(resp: Any) -> bytes:
    """The wire JSON of a response/info Struct (``go_json``)."""
    return go_json(resp)


def error_response(resp_cls: type, err: ApiError, **fields: Any) -> bytes:
    """An error answer: ``resp_cls`` with ``error`` set and its other fields at their zero values
    (what nats-server sends, e.g. ``"total":0,"offset":0,"limit":0`` for stream info)."""
    return go_json(resp_cls(error=err, **fields))


def error_body(type_: str, err: ApiError) -> bytes:
    """``{"type": type_, "error": {...}}`` for responses without other always-present fields."""
    return go_json(ApiResponse(type=type_, error=err))


def pub_ack(stream: str, seq: int, domain: str = "", duplicate: bool = False) -> bytes:
    """A publish acknowledgement body, e.g. ``{"stream":"S","seq":1}`` (fast path)."""
    if '"' in stream or "\\" in stream or "<" in stream or ">" in stream or "&" in stream or \
            not stream.isprintable() or not stream.isascii() or domain:
        return go_json(PubAck(stream=stream, seq=seq, domain=domain, duplicate=duplicate))
    if duplicate:
        return f'{{"stream":"{stream}","seq":{seq},"duplicate":true}}'.encode()
    return f'{{"stream":"{stream}","seq":{seq}}}'.encode()


def pub_ack_error(err: ApiError, stream: str | None = None) -> bytes:
    """A failed publish: ``{"error":{...}}``, or with ``stream`` ``{"error":{...},"stream":"S","seq":0}``."""
    return go_json(PubAckResponse(error=err, ack=PubAck(stream=stream) if stream is not None else None))


__all__ = [n for n in dir() if not n.startswith("_")] + ["to_go"]
