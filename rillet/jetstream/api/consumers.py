"""The ``$JS.API.CONSUMER.*`` handlers: create/update, info, delete, names, list, pause, next (pull requests).

Consumer configs travel as nats-server's JSON (``durable_name``, ``deliver_policy``, durations in ns...).
Decoding, defaults and validation are the config module's (``CreateConsumerRequest``,
``parse_consumer_create_subject``, ``normalize_consumer_config``); this module wires them to live consumers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any


from rillet.gocompat.gotime import GO_ZERO_TIME, format_time, to_utc_time
from rillet.jetstream import configtypes as C
from rillet.jetstream import consumerconfig as CC
from rillet.jetstream import headers as H
from rillet.jetstream.api import codec as apijson
from rillet.jetstream.api import types as A
from rillet.gocompat.jsoncodec import GoJSONError, go_unmarshal
from rillet.jetstream.consumer.common import _parse_time_ns
from rillet.jetstream.consumer.engine import create_consumer
from rillet.jetstream.errors import ApiError
from rillet.jetstream.stream import now_ns


if TYPE_CHECKING:
    from rillet.jetstream.api.router import ApiRouter

T = "io.nats.jetstream.api.v1."
JSON_LIMIT = 1024
LIST_LIMIT = 256


def config_to_dict(cfg: Any, dynamic_meta: bool = True, for_store: bool = False) -> dict:
    """The config as nats-server writes it (field order, omitempty); responses add ``_nats.ver``/``level``."""
    if dynamic_meta and not for_store:
        cfg = C.with_dynamic_metadata(cfg)
    return apijson.to_go(cfg)


def config_from_dict(d: dict) -> Any:
    return apijson.from_dict(d, C.ConsumerConfig)


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
        if not args:
            return
        self._create(["CREATE", *args], reply, body, hdr)

    def consumer_durable_create(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        self._create(["DURABLE", "CREATE", *args], reply, body, hdr)

    def _create(self, tokens: list[str], reply: bytes | None, body: bytes, hdr: bytes = b"") -> None:
        typ = T + "consumer_create_response"
        req = apijson.go_decode(body, C.CreateConsumerRequest, strict=self.jsa.js.strict)
        stream_name, cname, _ = CC.parse_consumer_create_subject(tokens, req)
        if req.config.num_replicas > 1:
            raise ApiError.make("STREAM_REPLICAS_NOT_SUPPORTED")
        stream = self._stream(stream_name)
        name = req.config.durable_name or req.config.name or cname
        existing = stream.consumers.get(name) if name else None
        if existing is not None and existing.closed:
            existing = None
        others = [c.cfg for c in stream.consumers.values() if not c.closed and c is not existing]
        acc_lim = self.jsa.limits
        if isinstance(acc_lim, dict):
            acc_lim = C.AccountLimits(max_consumers=acc_lim.get("max_consumers", -1))
        cfg = CC.normalize_consumer_config(
            stream.cfg, req.config, req.action, pedantic=req.pedantic,
            existing=existing.cfg if existing is not None else None, others=others, account_limits=acc_lim,
            server_limits=self.jsa.js.server_limits,
            deliver_subject_in_use=lambda subj: self.jsa.account.sublist.has_interest(subj))
        ident = ""
        if req.config.direct or req.config.sourcing:
            # nats-server 2.15: a mirror's or source's consumer names the origin's identity it expects (a
            # stream deleted and made again has another): a mismatch is refused, the answer carries it
            from rillet.jetstream.sources import IDENTITY_HDR, stream_identity
            ident = stream_identity(stream)
            want = H.get_header(hdr, IDENTITY_HDR) if hdr else None
            if want and want != ident:
                raise ApiError.make("CONSUMER_STREAM_IDENTITY_MISMATCH", msg=ident)
        if existing is not None:
            if not C.configs_equal(existing.cfg, cfg):
                existing.update_config(cfg)
                self.js.advisories.consumer_action(self.jsa, stream, existing.name, "modify")
            self._respond_ident(reply, {"type": typ, **existing.info()}, ident)
            return
        if not name:
            from rillet.jetstream.api.common import unused_consumer_name
            name = cfg.name = unused_consumer_name(stream.consumers)
        try:
            c = create_consumer(stream, cfg, name)
        except OSError as e:
            raise ApiError.make("CONSUMER_STORE_FAILED", err=str(e))
        self.js.advisories.consumer_action(self.jsa, stream, name, "create")
        self._respond_ident(reply, {"type": typ, **c.info()}, ident)
        if c.is_paused():
            c.pause_advisory()

    def _respond_ident(self, reply: bytes | None, obj: dict, ident: str) -> None:
        """An answer, with the stream's ``Nats-Stream-Identity`` header when ``ident`` is set."""
        if not ident:
            self.router.respond(reply, obj)
            return
        if reply:
            from rillet.jetstream.sources import IDENTITY_HDR
            h = H.make_headers([(IDENTITY_HDR, ident)])
            self.jsa.ic.publish(reply, None, h + apijson.go_json(obj), len(h))

    def _bodiless(self, args: list[str], body: bytes) -> Any:
        """The consumer ``<stream>.<consumer>`` of a request that carries no body (info, delete)."""
        from rillet.jetstream.api.common import check_empty
        check_empty(body)
        return self._consumer(self._stream(args[0]), args[1])

    def consumer_info(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        if len(args) != 2:
            return  # nats-server has no handler for this subject
        c = self._bodiless(args, body)
        self.router.respond(reply, {"type": T + "consumer_info_response", **c.info()})

    def consumer_delete(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        if len(args) != 2:
            return  # nats-server has no handler for this subject
        c = self._bodiless(args, body)
        c.stop(delete=True)
        self.router.respond(reply, {"type": T + "consumer_delete_response", "success": True})

    def _stream_or_empty(self, args: list[str], reply: bytes | None, typ: str) -> Any:
        s = self.jsa.streams.get(args[0]) if args else None
        if s is None:
            self.router.respond_error(reply, T + typ, ApiError.make("STREAM_NOT_FOUND"),
                                      {"total": 0, "offset": 0, "limit": 0, "consumers": []})
        return s

    def consumer_names(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        req = self.router.decode(body, A.JSApiConsumersRequest)
        stream = self._stream_or_empty(args, reply, "consumer_names_response")
        if stream is None:
            return
        names = sorted(n for n, c in stream.consumers.items() if not c.closed)
        offset = min(max(req.offset, 0), len(names))
        self.router.respond(reply, {"type": T + "consumer_names_response", "total": len(names),
                                    "offset": offset, "limit": JSON_LIMIT,
                                    "consumers": names[offset:offset + JSON_LIMIT]})

    def consumer_list(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        req = self.router.decode(body, A.JSApiConsumersRequest)
        stream = self._stream_or_empty(args, reply, "consumer_list_response")
        if stream is None:
            return
        cons = sorted((c for c in stream.consumers.values() if not c.closed), key=lambda c: c.name)
        offset = min(max(req.offset, 0), len(cons))
        page = cons[offset:offset + LIST_LIMIT]
        self.router.respond(reply, {"type": T + "consumer_list_response", "total": len(cons), "offset": offset,
                                    "limit": LIST_LIMIT, "consumers": [_list_info(c) for c in page]})

    def consumer_pause(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        typ = T + "consumer_pause_response"
        if len(args) != 2:
            return  # nats-server has no handler for this subject
        req = self.router.decode(body, A.JSApiConsumerPauseRequest)
        stream = self._stream(args[0])
        c = self._consumer(stream, args[1])
        pu = req.pause_until if req.pause_until != GO_ZERO_TIME else None
        until = _parse_time_ns(pu) if pu else 0
        if until and until > now_ns():
            text = to_utc_time(pu) if isinstance(pu, str) else format_time(until)
            c.set_pause(until, text)
            c.pause_advisory()
            self.router.respond(reply, {"type": typ, "paused": True, "pause_until": text,
                                        "pause_remaining": until - now_ns()})
        else:
            text = to_utc_time(pu) if isinstance(pu, str) and pu else "0001-01-01T00:00:00Z"
            c.set_pause(0, None)
            c.pause_advisory()
            self.router.respond(reply, {"type": typ, "paused": False, "pause_until": text})

    def consumer_unpin(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        """``$JS.API.CONSUMER.UNPIN.<stream>.<consumer>`` ``{"group": ...}``: the pinned client of a
        pinned_client consumer loses its pin; the next request served is pinned (rillet.jetstream.consumer.priority)."""
        if len(args) != 2:
            return  # nats-server has no handler for this subject
        from rillet.jetstream.consumer import priority
        # (nats-server decodes this one with plain json.Unmarshal: one value, unknown fields ignored even
        # when strict, syntax errors without their offset)
        try:
            group = go_unmarshal(body, A.JSApiConsumerUnpinRequest).group
        except GoJSONError as e:
            raise ApiError.make("INVALID_JSON", err=str(e)) from None
        if not group:
            raise ApiError.make("INVALID_JSON", err="consumer group not specified")
        if not CC._GROUP_NAME.fullmatch(group):
            raise ApiError.make("CONSUMER_INVALID_GROUP_NAME")
        stream = self._stream(args[0])
        c = self._consumer(stream, args[1])
        if group not in (c.cfg.priority_groups or []):
            raise ApiError.make("CONSUMER_INVALID_PRIORITY_GROUP")
        priority.unpin(c, group, "admin")
        self.router.respond(reply, {"type": T + "consumer_unpin_response"})

    def consumer_reset(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> object:
        """Resets are answered by the consumer itself (rillet.jetstream.consumer.reset); this subscription only
        keeps a reset for a missing consumer unanswered (no "no responders"), as nats-server does."""
        from rillet.jetstream.api.common import NOT_COUNTED
        return NOT_COUNTED

    def consumer_leader_stepdown(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        if len(args) != 2:
            return  # nats-server has no handler for this subject
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
        "CONSUMER.UNPIN": api.consumer_unpin,
        "CONSUMER.RESET": api.consumer_reset,
    })
    from rillet.jetstream.api import common as _api
    _api.register_types({"consumer_durable_create": "consumer_create_response",
                         "consumer_leader_stepdown": "consumer_leader_stepdown_response",
                         "consumer_msg_next": "consumer_getnext_response",
                         "consumer_unpin": "consumer_unpin_response"})
