"""The ``$JS.API`` dispatch: each request routed (answered here, by a leader elsewhere, or not at all: see
``routing``), served through the bounded API queue (``queue``) and answered, errors included, as nats-server
answers. The endpoints are in ``streams``, ``direct``, ``consumers``, ``snapshot``."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from rillet.jetstream.api import codec as apijson
from rillet.jetstream.api import types as A
from rillet.jetstream.api.queue import is_info as _is_info
from rillet.jetstream.errors import ApiError
from rillet.jetstream.stream import Stream

from rillet.jetstream.api import endpoints, routing
from rillet.jetstream.api.common import T, API_LEVEL, NOT_COUNTED, _reserved, _api_level_too_high, _type_for
from rillet.jetstream.api.direct import DirectApi
from rillet.jetstream.api.streams import StreamApi

if TYPE_CHECKING:
    from rillet.jetstream.manager import JSAccount

# modules with a ``register(router)`` that adds their endpoints to every ApiRouter (listed in endpoints: the
# account loads them with the router, rillet.jetstream.api.staged)
HANDLER_MODULES = endpoints.HANDLER_MODULES


# requests whose body names the stream of the subject (checked by the handler: 10056 when they differ)
_BODY_STREAM_NAME = frozenset(("CONSUMER.CREATE", "CONSUMER.DURABLE.CREATE"))


def _mapped_body_stream(mappings: Any, toks: list[str], args: list[str], body: bytes) -> bytes:
    """A request whose subject an account subject mapping rewrote (``$JS.API.CONSUMER.CREATE.foo`` ->
    ``...foo-read-west``, a virtual stream) still names the stream it was sent to in its body
    (``"stream_name": "foo"``). The mapping applies to the whole request: when the body's name, put in
    the subject's place, is a subject the account's mappings turn into this one, the body gets the mapped
    name. (nats-server answers 10056 "stream name in subject does not match request" here.) Any other
    body is returned as it came and checked by the handler as usual."""
    from rillet.subjects.mapping import mapped_from
    try:
        d = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
        raw = d.get("stream_name")
        name = msgspec.json.decode(raw) if raw is not None else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return body  # (invalid JSON: the handler answers it)
    if not isinstance(name, str) or not name or name == args[0]:
        return body
    i = len(toks) - len(args)
    if not mapped_from(mappings, ".".join([*toks[:i], name, *toks[i + 1:]]), ".".join(toks)):
        return body
    d["stream_name"] = msgspec.Raw(msgspec.json.encode(args[0]))
    return msgspec.json.encode(d)



class ApiRouter(StreamApi, DirectApi):
    def __init__(self, jsa: "JSAccount") -> None:
        self.jsa = jsa
        self.js = jsa.js
        self._tree_cache: tuple | None = None  # (skip, [(cfg, subjects)], tree, count): _subjects_tree
        self.handlers: dict[str, Callable] = {
            "INFO": self.account_info,
            "STREAM.CREATE": self.stream_create,
            "STREAM.UPDATE": self.stream_update,
            "STREAM.INFO": self.stream_info,
            "STREAM.DELETE": self.stream_delete,
            "STREAM.PURGE": self.stream_purge,
            "STREAM.NAMES": self.stream_names,
            "STREAM.LIST": self.stream_list,
            "STREAM.MSG.GET": self.msg_get,
            "STREAM.MSG.DELETE": self.msg_delete,
            "STREAM.LEADER.STEPDOWN": self.stream_leader_stepdown,
            "DIRECT.GET": self.direct_get,  # subscribed per stream (allow_direct), see Stream
        }
        # the other endpoint families register themselves; an import or registration error propagates and
        # stops JetStream (and the server) from starting: an endpoint must never vanish into "no responders"
        for module in HANDLER_MODULES:
            importlib.import_module(module).register(self)
        # (answered by rillet.jetstream.cluster.meta; no js: the endpoint table of an account without JetStream,
        # rillet.jetstream.disabled)
        clustered = self.js is not None and self.js.cluster is not None
        if clustered:
            for key in endpoints.CLUSTER_ONLY:
                self.handlers[key] = self.stream_leader_stepdown
        # the account subscribed the endpoints' table before this router was made (JSAccount.start)
        if set(self.handlers) != set(endpoints.endpoint_keys(clustered)):
            raise RuntimeError(f"JetStream API handlers {sorted(self.handlers)} differ from the endpoints "
                               f"subscribed (rillet.jetstream.api.endpoints)")

    # ---- dispatch ---------------------------------------------------------------------------------

    def subscription_patterns(self) -> list[str]:
        """The API subjects to listen on (after the ``$JS.API.`` prefix): ``endpoints.subscription_patterns``."""
        return endpoints.subscription_patterns(self.js is not None and self.js.cluster is not None)

    def on_request(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A request arrives: served now, or queued behind others (rillet.jetstream.api.queue)."""
        q = self.js.api_queue
        # info requests wait in their own queue, served when the other is empty (as nats-server)
        info = _is_info(subject)
        if type(msg) is not bytes:  # (kept until served: never a view of a buffer that is reused)
            msg = bytes(msg)
        q.submit(info, self.serve, (subject, reply, hdr, msg), client)

    def serve(self, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        subj = subject.decode("utf-8", "surrogateescape")
        toks = subj.split(".")
        # $JS.API.<...> or $JS.<domain>.API.<...>
        rest = toks[2:] if toks[1] == "API" else toks[3:]
        hdr_b, body = (msg[:hdr], msg[hdr:]) if hdr >= 0 else (b"", msg)
        handler = None
        args: list[str] = []
        for n in (3, 2, 1):
            key = ".".join(rest[:n])
            h = self.handlers.get(key)
            if h is not None:
                handler = h
                args = rest[n:]
                break
        if handler is None:
            return  # nats-server ignores unknown API subjects
        if key in _BODY_STREAM_NAME and args and self.jsa.account.mappings and body:
            body = _mapped_body_stream(self.jsa.account.mappings, toks, args, body)
        if not routing.answer_here(self, key, args, reply, hdr_b, body):  # (clustered: maybe a leader elsewhere)
            return
        # counted once answered (an account info request reports the requests before it, as nats-server)
        try:
            if hdr_b and key not in _NO_LEVEL_CHECK and b"Nats-Required-Api-Level" in hdr_b \
                    and _api_level_too_high(hdr_b):
                self.jsa.api_errors += 1
                self.jsa.api_total += 1
                self.respond_error(reply, _type_for(handler), ApiError.make("REQUIRED_API_LEVEL"),
                                   _LEVEL_EXTRA.get(getattr(handler, "__name__", "")))
                return
            if handler(args, reply, hdr_b, body) is NOT_COUNTED:
                return
        except Exception as e:  # (a bug must not take the server down either)
            self._answer_failure(reply, _type_for(handler), e, getattr(handler, "__name__", ""), subj)
        self.jsa.api_total += 1

    def _answer_failure(self, reply: bytes | None, typ: str, e: Exception, name: str, what: str) -> None:
        """A request handler's failure answered as nats-server would: its ApiError (a 10025 with the extra
        fields of ``name``'s request type), or, for anything else, 10000, logged: never silenced."""
        self.jsa.api_errors += 1
        if isinstance(e, ApiError):
            self.respond_error(reply, typ, e, _ERROR_EXTRA.get(name))
            return
        self.js.log.error(f"JetStream API error handling {what}: {e!r}")
        self.respond_error(reply, typ, ApiError.make("STREAM_GENERAL_ERROR", err=str(e)))

    def respond(self, reply: bytes | None, obj: dict) -> None:
        if reply:
            self.jsa.ic.publish(reply, None, apijson.go_json(obj))

    def respond_error(self, reply: bytes | None, type_: str, err: ApiError, extra: dict | None = None) -> None:
        d: dict[str, Any] = {"type": type_, "error": err.to_dict()}
        if extra:
            d.update(extra)
        self.respond(reply, d)

    def decode(self, body: bytes, cls: type) -> Any:
        """The request body as nats-server's request struct ``cls`` (``rillet.jetstream.api.types``): a
        body that does not decode into it is INVALID_JSON with Go's message; unknown fields too while the
        API is strict (``jetstream { strict }``). An empty body is the zero request."""
        if cls in _ONLY_JSON_DECODED and body.lstrip(b" \t\r\n\v\f")[:1] not in (b"{", b"["):
            return cls()
        return apijson.go_decode(body, cls, strict=self.js.strict)

    def parse(self, body: bytes, typ: type | None = None) -> Any:
        """The request body as builtins: decoded as the request struct ``typ`` (then its fields as a dict,
        for callers that read it as one) or, without one, as plain JSON; None for an empty body. Errors
        are INVALID_JSON with Go's messages, as ``decode``."""
        if not body.strip():
            return None
        if typ is not None:
            d = msgspec.structs.asdict(self.decode(body, typ))
            if any(isinstance(v, msgspec.Struct) for v in d.values()):
                # a nested struct (a restore's config) as it was sent, once its types are checked
                plain = apijson.parse_json(body)
                for k, v in d.items():
                    if isinstance(v, msgspec.Struct):
                        d[k] = {}
                        for pk, pv in (plain.items() if isinstance(plain, dict) else ()):
                            if pk.lower() == k and isinstance(pv, dict):
                                d[k] = pv
            return d
        return apijson.parse_json(body)

    def stream(self, name: str) -> Stream:
        s = self.jsa.streams.get(name)
        if s is None:
            raise ApiError.make("STREAM_NOT_FOUND")
        return s

    # ---- account ----------------------------------------------------------------------------------

    def account_info(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        mem, sto, n, c = self.jsa.usage()
        streams = self.jsa.streams.values()
        rmem, rsto = _reserved(streams, "memory"), _reserved(streams, "file")
        limits = apijson.to_go(self.jsa.limits)
        d: dict[str, Any] = {"type": T + "account_info_response", "memory": mem, "storage": sto,
                             "reserved_memory": rmem, "reserved_storage": rsto, "streams": n, "consumers": c,
                             "limits": limits}
        tier = self.jsa.tier
        if tier:  # tiered limits (account JWT): per tier, and zero limits for the account as a whole
            d["limits"] = {k: (False if isinstance(v, bool) else 0) for k, v in limits.items()}
            d["tiers"] = {tier: {"memory": mem, "storage": sto, "reserved_memory": rmem, "reserved_storage": rsto,
                                 "streams": n, "consumers": c, "limits": limits}}
        if self.js.domain:
            d["domain"] = self.js.domain
        d["api"] = {"level": API_LEVEL, "total": self.jsa.api_total, "errors": self.jsa.api_errors}
        self.respond(reply, d)

    # ---- streams ----------------------------------------------------------------------------------




# endpoints that check Nats-Required-Api-Level themselves (or are served elsewhere)
_NO_LEVEL_CHECK = frozenset(("DIRECT.GET", "CONSUMER.MSG.NEXT", "CONSUMER.RESET"))
# the zero-valued fields nats-server's response types carry beside an error
_LEVEL_EXTRA: dict[str, dict] = {"stream_info": {"total": 0, "offset": 0, "limit": 0}}
# the zero fields nats-server's response carries beside any error (its response structs' fields without
# omitempty), e.g. with a request it could not decode (INVALID_JSON, 10025)
_ERROR_EXTRA: dict[str, dict] = {
    "stream_info": {"total": 0, "offset": 0, "limit": 0},
    "stream_names": {"total": 0, "offset": 0, "limit": 0, "streams": None},
    "stream_list": {"total": 0, "offset": 0, "limit": 0, "streams": []},
    "stream_purge": {"purged": 0},
    "stream_restore": {"deliver_subject": ""},
    "consumer_names": {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    "consumer_list": {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    "consumer_pause": {"paused": False, "pause_until": "0001-01-01T00:00:00Z"},
}


# requests nats-server decodes only when the body looks like a JSON object or array (after white space):
# any other body is taken as no request at all
_ONLY_JSON_DECODED = frozenset((A.JSApiStreamInfoRequest, A.JSApiStreamNamesRequest, A.JSApiStreamListRequest,
                                A.JSApiStreamPurgeRequest, A.JSApiConsumersRequest, A.JSApiConsumerPauseRequest))
