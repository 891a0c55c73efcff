"""What the API modules share: the response type prefix and names, the stream info, the empty-request and
API level checks, the handlers' response types."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import msgspec

from rillet.gocompat.gotime import format_time
from rillet.jetstream import configtypes as C
from rillet.gocompat import jsoncodec as _codec
from rillet.jetstream.api import codec as apijson
from rillet.jetstream import headers as H
from rillet.jetstream.errors import ApiError
from rillet.jetstream.stream import Stream, now_ns

if TYPE_CHECKING:
    pass

T = "io.nats.jetstream.api.v1."

from rillet.jetstream.configtypes import JS_API_LEVEL as API_LEVEL  # the level of the version we report (2.15: 5)
JSON_LIMIT = 1024  # names per page
LIST_LIMIT = 256  # infos per page

_enc = msgspec.json.Encoder()


def stream_config_from_dict(d: dict[str, Any]) -> Any:
    return apijson.from_dict(d, C.StreamConfig)


def encode_config(cfg: Any) -> bytes:
    return apijson.go_json(cfg)


def stream_info_dict(s: Stream, include_config: bool = True, subjects_filter: str = "",
                     deleted_details: bool = False, with_cluster: bool = False,
                     alternates: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A StreamInfo. ``with_cluster``: the ``cluster`` block nats-server puts in INFO and LIST answers
    (not in create/update answers); ``alternates``: the stream and its mirrors (INFO in a cluster)."""
    d: dict[str, Any] = {}
    if include_config:
        d["config"] = apijson.to_go(C.with_dynamic_metadata(s.cfg, level=API_LEVEL))
    d["created"] = s.created
    d["state"] = s.state_dict(subjects_filter, deleted_details)
    if with_cluster:
        rep = s.replication  # a replicated stream (rillet.jetstream.cluster.streams)
        d["cluster"] = rep.cluster_info() if rep is not None else {"leader": s.js.server.name}
        if rep is not None:
            n = rep.consumer_count()  # nats-server: the assignment's consumers, cluster-wide
            if n > 0:
                d["state"]["consumer_count"] = n
    if s.sources is not None:
        d.update(s.sources.info_dict())
    if alternates:
        d["alternates"] = alternates
    d["ts"] = format_time(now_ns())
    return d



# a STREAM.CREATE body larger than this is handled in steps (ApiRouter._create_big): a config of this size
# holds a few hundred subjects, whose checks and subscriptions take a few milliseconds
BIG_CONFIG = 4096
SUBSCRIBE_BATCH = 200


def _reserved(streams: Any, storage: str, skip: str = "") -> int:
    """The bytes streams of this storage reserve (their max_bytes, when set), ``skip`` left out."""
    return sum(s.cfg.max_bytes for s in streams
               if s.cfg.max_bytes > 0 and s.cfg.storage == storage and s.name != skip)


NOT_COUNTED = object()  # a handler's answer that does not count in the account's API totals


def unused_consumer_name(taken: Any) -> str:
    """A generated name for a consumer created without one, not among ``taken`` (the stream's consumers)."""
    from rillet.jetstream.consumer.common import new_consumer_name
    while True:
        name = new_consumer_name()
        if name not in taken:
            return name


def is_empty_request(body: bytes) -> bool:
    """nats-server's test for a request without content: no bytes, or a JSON object without fields."""
    if not body or body == b"{}":
        return True
    try:  # (Go's json.Unmarshal: exactly one value)
        _codec.check_one_value(bytes(body))
    except _codec.GoJSONError:
        return False
    d = _codec.parse_json(body)
    return isinstance(d, dict) and not d


def check_empty(body: bytes) -> None:
    """Endpoints that take no request body refuse one (NOT_EMPTY_REQUEST), as nats-server does."""
    if not is_empty_request(body):
        raise ApiError.make("NOT_EMPTY_REQUEST")


def _api_level_too_high(hdr: bytes) -> bool:
    """A request whose Nats-Required-Api-Level is above ours (or not a number) is refused with 412."""
    v = H.get_header(hdr, H.REQUIRED_API_LEVEL)
    if not v:
        return False
    try:
        return int(v) > API_LEVEL
    except ValueError:
        return True


def _type_for(handler: Callable[..., Any]) -> str:
    return T + _TYPES.get(getattr(handler, "__name__", ""), "error_response")


_TYPES = {
    "account_info": "account_info_response",
    "stream_create": "stream_create_response",
    "stream_update": "stream_update_response",
    "stream_info": "stream_info_response",
    "stream_delete": "stream_delete_response",
    "stream_purge": "stream_purge_response",
    "stream_names": "stream_names_response",
    "stream_list": "stream_list_response",
    "msg_get": "stream_msg_get_response",
    "msg_delete": "stream_msg_delete_response",
    "stream_leader_stepdown": "stream_leader_stepdown_response",
    "stream_peer_evacuate": "stream_evacuate_peer_response",
    "stream_cancel_move": "stream_cancel_move_response",
    "consumer_create": "consumer_create_response",
    "consumer_info": "consumer_info_response",
    "consumer_delete": "consumer_delete_response",
    "consumer_names": "consumer_names_response",
    "consumer_list": "consumer_list_response",
    "consumer_pause": "consumer_pause_response",
    "stream_snapshot": "stream_snapshot_response",
    "stream_restore": "stream_restore_response",
}


def register_types(extra: dict[str, str]) -> None:
    _TYPES.update(extra)

