"""The JetStream API's request bodies as nats-server types them (its ``JSApi*Request`` structs).

Each handler decodes its body into one of these through ``rillet.jetstream.api.codec.go_decode``, so that a
field of the wrong JSON type, a negative or fractional sequence, a number beyond 64 bits, a bad time or
nesting deeper than Go's limit is refused as nats-server refuses it: ``INVALID_JSON`` (400/10025) with
Go's message, naming the field as ``JSApiMsgGetRequest.seq`` and its Go type. The class names are Go's
(they appear in those messages); the field names are the JSON names.
"""
from __future__ import annotations

from typing import Optional

import msgspec

from rillet.gocompat.jsoncodec import Int, OptTime, Time, Uint64
from rillet.jetstream.configtypes import Placement, StreamConfig


class _Req(msgspec.Struct, kw_only=True):
    pass


class JSApiStreamInfoRequest(_Req):
    offset: Int = 0
    deleted_details: bool = False
    subjects_filter: str = ""


class JSApiStreamNamesRequest(_Req):
    offset: Int = 0
    subject: str = ""


class JSApiStreamListRequest(_Req):
    offset: Int = 0
    subject: str = ""


class JSApiStreamPurgeRequest(_Req):
    seq: Uint64 = 0
    filter: str = ""
    keep: Uint64 = 0


class JSApiMsgGetRequest(_Req):
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


class JSApiMsgDeleteRequest(_Req):
    seq: Uint64 = 0
    no_erase: bool = False


class JSApiConsumersRequest(_Req):  # CONSUMER.NAMES and CONSUMER.LIST
    offset: Int = 0


class JSApiConsumerPauseRequest(_Req):
    pause_until: Time = "0001-01-01T00:00:00Z"


class JSApiConsumerUnpinRequest(_Req):
    group: str = ""


class JSApiStreamSnapshotRequest(_Req):
    deliver_subject: str = ""
    no_consumers: bool = False
    chunk_size: Int = 0
    window_size: Int = 0
    jsck: bool = False


class LostStreamData(_Req):
    msgs: Optional[list[Uint64]] = None
    bytes: Uint64 = 0


class StreamState(_Req):
    messages: Uint64 = 0
    bytes: Uint64 = 0
    first_seq: Uint64 = 0
    first_ts: Time = "0001-01-01T00:00:00Z"
    last_seq: Uint64 = 0
    last_ts: Time = "0001-01-01T00:00:00Z"
    num_subjects: Int = 0
    subjects: Optional[dict[str, Uint64]] = None
    num_deleted: Int = 0
    deleted: Optional[list[Uint64]] = None
    lost: Optional[LostStreamData] = None
    consumer_count: Int = 0


class JSApiStreamRestoreRequest(_Req):
    config: StreamConfig = msgspec.field(default_factory=StreamConfig)
    state: StreamState = msgspec.field(default_factory=StreamState)


class JSApiStreamRemovePeerRequest(_Req):
    peer: str = ""


class JSApiLeaderStepdownRequest(_Req):
    placement: Optional[Placement] = None
