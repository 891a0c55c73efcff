"""The ``$JS.API`` request handlers for the account, streams and direct get (consumers: ``api_consumer``).

Every handler gets the request's subject tokens after the API prefix, the reply subject, the header block
and the body, and answers with nats-server's JSON (``type``, fields, ``error`` objects with ``err_code``).
"""
from __future__ import annotations

import asyncio
import base64
import importlib
import re
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from rillet.gocompat.gotime import format_time
from rillet.gocompat.gotime import parse_time
from rillet.jetstream import configtypes as C
from rillet.jetstream import streamconfig as SC
from rillet.gocompat import jsoncodec as _codec
from rillet.jetstream import apijson
from rillet.jetstream import apitypes as A
from rillet.jetstream import headers as H
from rillet.jetstream.apiqueue import INFO_KEYS
from rillet.jetstream.log import LeadershipLost
from rillet.jetstream.errors import ApiError
from rillet.jetstream.store import ErrTooManyResults
from rillet.jetstream.stream import Stream, now_ns
from rillet.subjects.overlap import SubjectTree, any_collision
from rillet.subjects.validate import is_valid_subject, subject_has_wildcard, subjects_collide

if TYPE_CHECKING:
    from rillet.jetstream.manager import JSAccount

T = "io.nats.jetstream.api.v1."

from rillet.jetstream.configtypes import JS_API_LEVEL as API_LEVEL  # the level of the version we report (2.15: 5)
JSON_LIMIT = 1024  # names per page
LIST_LIMIT = 256  # infos per page

_enc = msgspec.json.Encoder()

# modules with a ``register(router)`` that adds their endpoints to every ApiRouter
HANDLER_MODULES = ("rillet.jetstream.api_consumer", "rillet.jetstream.snapshot")


def stream_config_from_dict(d: dict) -> Any:
    return apijson.from_dict(d, C.StreamConfig)


def encode_config(cfg: Any) -> bytes:
    return apijson.go_json(cfg)


def stream_info_dict(s: Stream, include_config: bool = True, subjects_filter: str = "",
                     deleted_details: bool = False, with_cluster: bool = False) -> dict:
    """A StreamInfo. ``with_cluster``: the ``cluster`` block nats-server puts in INFO and LIST answers
    (not in create/update answers)."""
    d: dict[str, Any] = {}
    if include_config:
        d["config"] = apijson.to_go(C.with_dynamic_metadata(s.cfg, level=API_LEVEL))
    d["created"] = s.created
    d["state"] = s.state_dict(subjects_filter, deleted_details)
    if with_cluster:
        ci = getattr(s, "cluster_info", None)  # a replicated stream (rillet.jetstream.cluster.streams)
        d["cluster"] = ci() if ci is not None else {"leader": s.js.server.name}
        cc = getattr(s, "cluster_consumer_count", None)  # nats-server: the assignment's consumers, cluster-wide
        if cc is not None:
            n = cc()
            if n > 0:
                d["state"]["consumer_count"] = n
    if s.sources is not None:
        d.update(s.sources.info_dict())
    d["ts"] = format_time(now_ns())
    return d


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


# a STREAM.CREATE body larger than this is handled in steps (ApiRouter._create_big): a config of this size
# holds a few hundred subjects, whose checks and subscriptions take a few milliseconds
BIG_CONFIG = 4096
SUBSCRIBE_BATCH = 200


class ApiRouter:
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
        if getattr(self.js, "cluster", None) is not None:  # (answered by rillet.jetstream.cluster.meta)
            for key in ("STREAM.PEER.REMOVE", "META.LEADER.STEPDOWN", "SERVER.REMOVE"):
                self.handlers[key] = self.stream_leader_stepdown

    # ---- dispatch ---------------------------------------------------------------------------------

    def subscription_patterns(self) -> list[str]:
        """The API subjects to listen on (after the ``$JS.API.`` prefix), one pattern per endpoint form:
        a subject nobody serves (an unknown endpoint) then gets "no responders", as from nats-server."""
        out = []
        for key in self.handlers:
            if key in ("DIRECT.GET", "CONSUMER.MSG.NEXT"):
                continue  # served by each stream / consumer (see Stream._subscribe, Consumer.start)
            for suffix in _ENDPOINT_ARGS.get(key, ("", "*")):
                out.append(key + ("." + suffix if suffix else ""))
        return out

    def on_request(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A request arrives: served now, or queued behind others (rillet.jetstream.apiqueue)."""
        q = getattr(self.js, "api_queue", None)
        if q is None:
            self.serve(subject, reply, hdr, msg)
            return
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
        cl = self.js.cluster
        if cl is not None and cl.api.route_api(self, key, args, reply, hdr_b, body):
            return  # clustered: the meta leader (or a stream/consumer leader) answers
        # clustered JetStream: who answers (stream/consumer leader, meta leader) is decided by the gates;
        # each returns True (answer here), False (stay silent or already answered) or None (not its call)
        for gate in getattr(self.js, "api_gates", None) or ():
            r = gate(self, key, args, reply, hdr_b, body)
            if r is not None:
                if not r:
                    return
                break
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
        """The request body as nats-server's request struct ``cls`` (``rillet.jetstream.apitypes``): a
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
        tier = getattr(self.jsa, "tier", "")
        if tier:  # tiered limits (account JWT): per tier, and zero limits for the account as a whole
            d["limits"] = {k: (False if isinstance(v, bool) else 0) for k, v in limits.items()}
            d["tiers"] = {tier: {"memory": mem, "storage": sto, "reserved_memory": rmem, "reserved_storage": rsto,
                                 "streams": n, "consumers": c, "limits": limits}}
        if self.js.domain:
            d["domain"] = self.js.domain
        d["api"] = {"level": API_LEVEL, "total": self.jsa.api_total, "errors": self.jsa.api_errors}
        self.respond(reply, d)

    # ---- streams ----------------------------------------------------------------------------------

    def _overlap(self, skip: str = "") -> Callable[[list[str]], bool]:
        def check(subjects: list[str]) -> bool:
            # every other stream's subjects in one token tree: linear in the subjects, not their product
            tree = self._subjects_tree(skip)
            return tree is not None and any(tree.collides(s) for s in subjects)
        return check

    def _subjects_tree(self, skip: str) -> SubjectTree | None:
        """The subjects of the account's streams (but ``skip``) in a token tree, kept between requests:
        while streams are only added (a burst of creates), the new ones are inserted into the last tree
        instead of building it again from every stream's subjects (which made a burst quadratic)."""
        cur = [(st.cfg, st.cfg.subjects) for n, st in self.jsa.streams.items() if n != skip]
        c = self._tree_cache
        if c is not None and c[0] == skip and len(c[1]) <= len(cur) \
                and all(a[0] is b[0] and a[1] is b[1] for a, b in zip(c[1], cur)):
            tree, n = c[2], c[3]
            added = cur[len(c[1]):]
        else:
            tree, n, added = SubjectTree(), 0, cur
        for _, subjects in added:
            for subj in subjects or ():
                tree.insert(subj, n)
                n += 1
        self._tree_cache = (skip, cur, tree, n)
        return tree if n else None

    def _lookup(self, name: str) -> Any:
        s = self.jsa.streams.get(name)
        return s.cfg if s is not None else None

    def stream_create(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> object:
        q = getattr(self.js, "api_queue", None)
        if q is not None:
            # the stream's files are written and synced off the loop (and a large config is checked there),
            # the API queue held meanwhile so that requests keep their order: see _create_async
            q.hold()
            self.js.loop.create_task(self._create_async(args, reply, body))
            return NOT_COUNTED
        typ = T + "stream_create_response"
        name = args[0] if args else ""
        existing = self.jsa.streams.get(name)
        cfg = SC.normalize_stream_config(body, is_create=True, subject_name=name, lookup_stream=self._lookup,
                                        subjects_overlap=self._overlap(), account_limits=self.jsa.limits,
                                        server_limits=self.js.server_limits, strict=self.js.strict,
                                        existing=existing.cfg if existing is not None else None)
        if existing is not None:  # the same configuration again: its info, still "did_create" (as nats-server)
            self.respond(reply, {"type": typ, **stream_info_dict(existing), "did_create": True})
            return None
        self._check_supported(cfg)
        self._check_limits(cfg)
        stream = self.jsa.open_stream(cfg, format_time(now_ns()))
        self._created(stream, reply)
        return None

    async def _create_async(self, args: list[str], reply: bytes | None, body: bytes) -> None:
        """``stream_create`` in steps, with the same checks and answers. A large config (thousands of
        subjects) is checked in a worker thread against a snapshot of the account's streams (the API queue
        is held, so no other request changes them meanwhile); the stream's directory and meta.json are
        written and synced in a worker thread; a large config's subject subscriptions are added
        SUBSCRIBE_BATCH per loop pass before the answer goes out."""
        q = self.js.api_queue
        loop = self.js.loop
        typ = T + "stream_create_response"
        try:
            name = args[0] if args else ""
            existing = self.jsa.streams.get(name)
            kw = dict(is_create=True, subject_name=name, account_limits=self.jsa.limits,
                      server_limits=self.js.server_limits, strict=self.js.strict,
                      existing=existing.cfg if existing is not None else None)
            if len(body) > BIG_CONFIG:
                cfgs = {n: st.cfg for n, st in self.jsa.streams.items()}
                stored = [b for c in cfgs.values() for b in c.subjects or []]

                def overlap(subjects: list[str]) -> bool:
                    return bool(stored) and any_collision(stored, subjects)

                cfg = await loop.run_in_executor(None, lambda: SC.normalize_stream_config(
                    body, lookup_stream=cfgs.get, subjects_overlap=overlap, **kw))
            else:
                cfg = SC.normalize_stream_config(body, lookup_stream=self._lookup, subjects_overlap=self._overlap(),
                                                 **kw)
            if existing is not None:  # the same configuration again: its info, still "did_create"
                self.respond(reply, {"type": typ, **stream_info_dict(existing), "did_create": True})
                return
            self._check_supported(cfg)
            self._check_limits(cfg)
            created = format_time(now_ns())
            if cfg.storage != "memory":  # (a memory stream has nothing on disk)
                await loop.run_in_executor(None, self.jsa.write_meta_of, cfg, created)
            if name in self.jsa.streams:  # (not through the API: a stream restored or recovered meanwhile)
                raise ApiError.make("STREAM_NAME_EXIST")
            subjects = list(cfg.subjects or [])
            big = len(subjects) > SUBSCRIBE_BATCH
            if big:
                cfg.subjects = subjects[:SUBSCRIBE_BATCH]  # the rest is subscribed below, a batch per loop pass
            try:
                stream = self.jsa.open_stream(cfg, created, write_meta=False)
            finally:
                if big:
                    cfg.subjects = subjects  # (not otherwise: a stream without subjects keeps None, not [])
            if big:
                for i in range(SUBSCRIBE_BATCH, len(subjects), SUBSCRIBE_BATCH):
                    await asyncio.sleep(0)
                    if stream.closed:
                        break
                    stream.subscribe_subjects(subjects[i:i + SUBSCRIBE_BATCH])
            self._created(stream, reply)
        except Exception as e:
            self._answer_failure(reply, typ, e, "stream_create", "a stream create")
        finally:
            self.jsa.api_total += 1
            q.release()
            self.js.server.schedule_flush()

    def _created(self, stream: Stream, reply: bytes | None) -> None:
        cfg = stream.cfg
        typ = T + "stream_create_response"
        if cfg.mirror is not None or cfg.sources:
            from rillet.jetstream.sources import attach_sources
            attach_sources(stream)
        self.js.advisories.stream_action(self.jsa, stream, "create")
        self.respond(reply, {"type": typ, **stream_info_dict(stream), "did_create": True})

    # stream features this server does not have: (field, what), refused, never silently accepted
    # (empty since fast batch publishing, allow_batched, is served: rillet.jetstream.fastbatch)
    _UNSUPPORTED: tuple[tuple[str, str], ...] = ()

    @classmethod
    def _check_supported(cls, cfg: Any) -> None:
        for field, what in cls._UNSUPPORTED:
            if getattr(cfg, field, False):
                raise ApiError.make("STREAM_INVALID_CONFIG", err=f"{what} ({field}) not supported")

    def _check_limits(self, cfg: Any) -> None:
        lim = self.jsa.limits
        if lim.max_streams > 0 and len(self.jsa.streams) >= lim.max_streams:
            raise ApiError.make("MAXIMUM_STREAMS_LIMIT")
        self._check_bytes(cfg, cfg.max_bytes, _reserved(self.jsa.streams.values(), cfg.storage, cfg.name))

    def _check_bytes(self, cfg: Any, add: int, current: int) -> None:
        """Account and server limits for a stream that reserves ``add`` more bytes (its max_bytes; a
        stream without one counts as one byte) over ``current``, the max_bytes the account's other
        streams of the same storage reserve: as nats-server, reservations count, not bytes stored."""
        lim = self.jsa.limits
        if add < 0:
            add = 1
        memory = cfg.storage == "memory"
        err = "MEMORY_RESOURCES_EXCEEDED" if memory else "STORAGE_RESOURCES_EXCEEDED"
        cap = lim.max_memory if memory else lim.max_storage
        if cap >= 0 and (current > cap or add > cap - current):
            raise ApiError.make(err)
        server_cap = self.js.max_memory if memory else self.js.max_store
        if server_cap is not None and server_cap > 0:
            used = sum(_reserved(j.streams.values(), cfg.storage, cfg.name if j is self.jsa else "")
                       for j in self.js.accounts.values())
            if used > server_cap or add > server_cap - used:
                raise ApiError.make(err)

    def stream_update(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> object:
        q = getattr(self.js, "api_queue", None)
        if q is not None and len(body) > BIG_CONFIG:
            # a large config is checked in a worker thread and its subjects' subscriptions changed in
            # steps, the API queue held meanwhile: see _update_async
            q.hold()
            self.js.loop.create_task(self._update_async(args, reply, body))
            return NOT_COUNTED
        name = args[0] if args else ""
        stream = self.jsa.streams.get(name)
        cfg = SC.normalize_stream_update(stream.cfg if stream is not None else None, body, subject_name=name,
                                        lookup_stream=self._lookup, subjects_overlap=self._overlap(skip=name),
                                        account_limits=self.jsa.limits, server_limits=self.js.server_limits,
                                        strict=self.js.strict, consumers=[(n, c.cfg) for n, c in stream.consumers.items()]
                                        if stream is not None else None)
        self._update_checked(stream, cfg, reply)
        return None

    async def _update_async(self, args: list[str], reply: bytes | None, body: bytes) -> None:
        """``stream_update`` of a large config in steps, with the same checks and answers: the checks in a
        worker thread against a snapshot of the account's other streams, then the update through the
        stream's log; once applied, the subscriptions of the subjects that went are removed and those of
        the new ones added SUBSCRIBE_BATCH per loop pass (the ones kept stay: no gap for them) before the
        answer goes out."""
        q = self.js.api_queue
        loop = self.js.loop
        typ = T + "stream_update_response"
        try:
            name = args[0] if args else ""
            stream = self.jsa.streams.get(name)
            cfgs = {n: st.cfg for n, st in self.jsa.streams.items()}
            stored = [b for n, c in cfgs.items() if n != name for b in c.subjects or []]

            def overlap(subjects: list[str]) -> bool:
                return bool(stored) and any_collision(stored, subjects)

            kw = dict(subject_name=name, lookup_stream=cfgs.get, subjects_overlap=overlap,
                      account_limits=self.jsa.limits, server_limits=self.js.server_limits, strict=self.js.strict,
                      consumers=[(n, c.cfg) for n, c in stream.consumers.items()] if stream is not None else None)
            cfg = await loop.run_in_executor(None, lambda: SC.normalize_stream_update(
                stream.cfg if stream is not None else None, body, **kw))
            if stream is None or self.jsa.streams.get(name) is not stream:  # (gone meanwhile)
                raise ApiError.make("STREAM_NOT_FOUND")
            applied: asyncio.Future = loop.create_future()
            self._update_checked(stream, cfg, reply, applied)
            await applied
        except Exception as e:
            self._answer_failure(reply, typ, e, "stream_update", "a stream update")
        finally:
            self.jsa.api_total += 1
            q.release()
            self.js.server.schedule_flush()

    def _update_checked(self, stream: Any, cfg: Any, reply: bytes | None,
                        applied: asyncio.Future | None = None) -> None:
        """The rest of a stream update once its config is checked. ``applied`` (the large-config path) is
        done once it is answered; its subjects' subscriptions change in steps."""
        typ = T + "stream_update_response"
        assert stream is not None  # (normalize_stream_update refuses a stream that does not exist)
        name = stream.name
        self._check_supported(cfg)
        old = stream.cfg
        # the account must hold what the new max_bytes reserves beyond the old one
        grow = max(max(cfg.max_bytes, 0) - max(old.max_bytes, 0), 0)
        self._check_bytes(cfg, grow, _reserved(self.jsa.streams.values(), cfg.storage, name)
                          + max(cfg.max_bytes - grow, 0))

        def done(_: Any, err: BaseException | None) -> None:
            if err is not None:
                self._entry_failed(reply, typ, err)
                if applied is not None and not applied.done():
                    applied.set_result(None)
                return
            if applied is not None and old.subjects != cfg.subjects and old.mirror is None \
                    and cfg.mirror is None and old.allow_direct == cfg.allow_direct \
                    and old.mirror_direct == cfg.mirror_direct:
                self.js.loop.create_task(self._resubscribe_in_steps(stream, old, finish, applied))
                return
            if old.subjects != cfg.subjects or (old.mirror is None) != (cfg.mirror is None):
                stream._subscribe()
            finish()
            if applied is not None and not applied.done():
                applied.set_result(None)

        def finish() -> None:
            if old.mirror != cfg.mirror or old.sources != cfg.sources:
                if cfg.mirror is not None or cfg.sources:
                    from rillet.jetstream.sources import attach_sources
                    attach_sources(stream)
                elif stream.sources is not None:
                    stream.sources.stop()
                    stream.sources = None
            self.jsa.write_meta(stream)
            self.js.advisories.stream_action(self.jsa, stream, "modify")
            self.respond(reply, {"type": typ, **stream_info_dict(stream)})

        stream.update_config(cfg, done)  # through the stream's log; answered once applied

    async def _resubscribe_in_steps(self, stream: Any, old: Any, finish: Callable[[], None],
                                    applied: asyncio.Future) -> None:
        """A stream's subject subscriptions after an update of a large config: those of the subjects that
        went removed, those of the new ones added, SUBSCRIBE_BATCH per loop pass; then ``finish``."""
        try:
            want = list(stream.cfg.subjects or [])
            keep = set(want)
            subs = stream.subject_subscriptions()
            gone = [sub for sub in subs if sub.subject not in keep]
            have = {sub.subject for sub in subs}
            new = [subj for subj in want if subj not in have]
            for i in range(0, len(gone), SUBSCRIBE_BATCH):
                if i:
                    await asyncio.sleep(0)
                stream.unsubscribe(gone[i:i + SUBSCRIBE_BATCH])
            for i in range(0, len(new), SUBSCRIBE_BATCH):
                await asyncio.sleep(0)
                if stream.closed:
                    break
                stream.subscribe_subjects(new[i:i + SUBSCRIBE_BATCH])
            finish()
        finally:
            if not applied.done():
                applied.set_result(None)

    def _entry_failed(self, reply: bytes | None, typ: str, err: BaseException) -> None:
        """An API request's log entry could not be applied: answered as the API answers a failed handler.
        One whose outcome is unknown (leadership lost after it was proposed) gets no answer."""
        if isinstance(err, LeadershipLost):
            return
        self.jsa.api_errors += 1
        if not isinstance(err, ApiError):
            self.js.log.error(f"JetStream API error applying {typ}: {err!r}")
            err = ApiError.make("STREAM_GENERAL_ERROR", err=str(err))
        self.respond_error(reply, typ, err)

    def stream_info(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        typ = T + "stream_info_response"
        name = args[0] if args else ""
        req = self.decode(body, A.JSApiStreamInfoRequest)
        stream = self.jsa.streams.get(name)
        if stream is None:
            self.respond_error(reply, typ, ApiError.make("STREAM_NOT_FOUND"),
                               {"total": 0, "offset": 0, "limit": 0})
            return
        info = stream_info_dict(stream, subjects_filter=req.subjects_filter, deleted_details=req.deleted_details,
                                with_cluster=True)
        d = {"type": typ, "total": 0, "offset": 0, "limit": 0, **info}
        subs = info["state"].get("subjects")
        if subs is not None:
            keys = sorted(subs)
            offset = max(req.offset, 0)  # (nats-server: no upper bound here, unlike the names and lists)
            d["total"] = len(keys)
            d["offset"] = offset
            d["limit"] = 100000
            info["state"]["subjects"] = {k: subs[k] for k in keys[offset:offset + 100000]}
        self.respond(reply, d)

    def stream_delete(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        check_empty(body)
        stream = self.stream(args[0] if args else "")
        self.jsa.delete_stream(stream)
        self.js.advisories.stream_action(self.jsa, stream, "delete")
        self.respond(reply, {"type": T + "stream_delete_response", "success": True})

    def stream_purge(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        typ = T + "stream_purge_response"
        req = self.decode(body, A.JSApiStreamPurgeRequest)  # (before the stream is looked up, as nats-server)
        subj = req.filter or None
        seq, keep = req.seq, req.keep
        if seq and keep:
            raise ApiError.make("BAD_REQUEST")
        stream = self.stream(args[0] if args else "")
        if stream.cfg.sealed:
            raise ApiError.make("STREAM_SEALED")
        if stream.cfg.deny_purge:
            raise ApiError.make("STREAM_PURGE_FAILED", err="stream purge not permitted")
        if subj is not None and not is_valid_subject(subj):
            raise ApiError.make("STREAM_PURGE_FAILED", err="invalid subject")

        def done(n: Any, err: BaseException | None) -> None:
            if err is not None:
                self._entry_failed(reply, typ, err)
            else:
                self.respond(reply, {"type": typ, "success": True, "purged": n})

        stream.purge(subj, seq, keep, done)

    def _names_filter(self, req: Any) -> list[Stream]:
        subj = req.subject
        streams = sorted(self.jsa.streams.values(), key=lambda s: s.name)
        if subj:
            streams = [s for s in streams if any(subjects_collide(subj, x) for x in (s.cfg.subjects or []))]
        return streams

    def stream_names(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        req = self.decode(body, A.JSApiStreamNamesRequest)
        streams = self._names_filter(req)
        offset = min(max(req.offset, 0), len(streams))  # (as nats-server: within 0..total)
        page = streams[offset:offset + JSON_LIMIT]
        self.respond(reply, {"type": T + "stream_names_response", "total": len(streams), "offset": offset,
                             "limit": JSON_LIMIT, "streams": [s.name for s in page] or None})

    def stream_list(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        req = self.decode(body, A.JSApiStreamListRequest)
        streams = self._names_filter(req)
        offset = min(max(req.offset, 0), len(streams))
        page = streams[offset:offset + LIST_LIMIT]
        self.respond(reply, {"type": T + "stream_list_response", "total": len(streams), "offset": offset,
                             "limit": LIST_LIMIT, "streams": [stream_info_dict(s, with_cluster=True) for s in page],
                             "missing": None})

    def stream_leader_stepdown(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        raise ApiError.make("CLUSTER_REQUIRED")  # (nats-server: whether or not the stream exists)

    # ---- messages ---------------------------------------------------------------------------------

    @staticmethod
    def _check_get(req: A.JSApiMsgGetRequest) -> None:
        """A MSG.GET request nats-server refuses (before it looks for the stream): no batches here, a
        sequence, a subject or a start time needed, and the sequence, the last for a subject and a start
        time exclude each other."""
        seq, last, nxt, start = req.seq, req.last_by_subj, req.next_by_subj, req.start_time
        if (req.batch > 0 or req.max_bytes > 0 or (seq and start is not None) or (last and start is not None)
                or (last and (seq or nxt)) or not (seq or last or nxt or start is not None)):
            raise ApiError.make("BAD_REQUEST")

    def _get(self, stream: Stream, req: A.JSApiMsgGetRequest) -> Any:
        """The message a (checked) MSG.GET request names (None if there is none)."""
        store = stream.store
        seq, last, nxt = req.seq, req.last_by_subj, req.next_by_subj
        if req.start_time is not None:
            seq = store.get_seq_from_time(parse_time(req.start_time)[0])
        if last:
            return store.load_last_msg(last)
        if nxt:
            return store.load_next_msg(nxt, max(seq, 1), subject_has_wildcard(nxt))
        if seq <= 0:
            return None
        return store.load_msg(seq)

    def msg_get(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> object:
        typ = T + "stream_msg_get_response"
        if is_empty_request(body):
            raise ApiError.make("BAD_REQUEST")
        req = self.decode(body, A.JSApiMsgGetRequest)  # (before the stream is looked up, as nats-server)
        self._check_get(req)
        stream = self.stream(args[0] if args else "")
        m = self._get(stream, req)
        if m is None:
            raise ApiError.make("NO_MESSAGE_FOUND")
        d: dict[str, Any] = {"subject": m.subject, "seq": m.seq}
        if m.hdr and not req.no_hdr:
            d["hdrs"] = base64.b64encode(m.hdr).decode()
        if m.data:
            d["data"] = base64.b64encode(m.data).decode()
        d["time"] = format_time(m.ts)
        self.respond(reply, {"type": typ, "message": d})
        return NOT_COUNTED  # nats-server answers a found message outside its API accounting

    def msg_delete(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        typ = T + "stream_msg_delete_response"
        if is_empty_request(body):
            raise ApiError.make("BAD_REQUEST")
        req = self.decode(body, A.JSApiMsgDeleteRequest)  # (before the stream is looked up, as nats-server)
        stream = self.stream(args[0] if args else "")
        if stream.cfg.sealed:
            raise ApiError.make("STREAM_SEALED")
        if stream.cfg.deny_delete:
            raise ApiError.make("STREAM_MSG_DELETE_FAILED", err="message delete not permitted")
        seq = req.seq
        if not seq:  # (nats-server: the store finds no message 0)
            raise ApiError.make("STREAM_MSG_DELETE_FAILED", err="no message found")

        def done(ok: Any, err: BaseException | None) -> None:
            if err is None and not ok:
                err = ApiError.make("STREAM_MSG_DELETE_FAILED", err="no message found")
            if err is not None:
                self._entry_failed(reply, typ, err)
            else:
                self.respond(reply, {"type": typ, "success": True})

        stream.delete_msg(seq, not req.no_erase, done)

    def direct_get(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        """DIRECT.GET.<stream> (request body) and DIRECT.GET.<stream>.<subject...> (last for subject).

        Answers are messages with the stored headers plus Nats-Stream/Subject/Sequence/Time-Stamp, or a
        status with nats-server's code and text: 408 Empty Request / Malformed Request / Bad Request,
        404 Message Not Found (No Results for multi_last), 412 Required Api Level, 413 Too Many Results.
        """
        if not args or not reply:
            return
        stream = self.jsa.streams.get(args[0])
        if stream is None or not (stream.cfg.allow_direct or stream.cfg.mirror_direct):
            return  # no responder, as nats-server (direct gets are only served when allowed)
        if hdr and _api_level_too_high(hdr):
            self._status(reply, 412, "Required Api Level")
            return
        if len(args) > 1:  # the subject names the message: a body may only add no_hdr / max_bytes
            req = _DirectReq.parse(body) if body else _DirectReq()
            if req is None:
                self._status(reply, 408, "Malformed Request")
                return
            if (req.last or req.next or req.multi or req.seq or req.batch or req.start is not None
                    or req.up_to_seq or req.up_to_time is not None):
                self._status(reply, 408, "Bad Request")
                return
            req.last = ".".join(args[1:])
            self._direct_serve(stream, reply, req)
            return
        if not body:
            self._status(reply, 408, "Empty Request")
            return
        m = _SEQ_ONLY(body)
        if m is not None:  # {"seq":N}, the common request: what the full decode gives, without it
            req = _DirectReq()
            req.seq = int(m.group(1))
        else:
            req = _DirectReq.parse(body)
        if req is None:
            self._status(reply, 408, "Malformed Request")
            return
        if not (req.seq or req.last or req.next or req.multi or req.start is not None):
            self._status(reply, 408, "Empty Request")
            return
        if ((req.seq and (req.last or req.start is not None)) or (req.start is not None and req.last)
                or (req.last and (req.next or req.batch or req.multi)) or (req.next and req.multi)
                or (req.up_to_seq and req.up_to_time is not None)):
            self._status(reply, 408, "Bad Request")
            return
        self._direct_serve(stream, reply, req)

    def _status(self, reply: bytes, code: int, desc: str, extra: list[tuple[str, str]] | None = None) -> None:
        hdr = H.make_headers(extra or [], status=code, desc=desc)
        self.jsa.ic.publish(reply, None, hdr, len(hdr))

    def _direct_reply(self, stream: Stream, reply: bytes, m: Any, extra: list[tuple[str, str]] | None = None,
                      no_hdr: bool = False) -> None:
        """One stored message as a direct get answer: its own headers, then the stream's (appended, as
        nats-server does, even when the stored message already has such a header)."""
        if no_hdr:
            self.jsa.ic.publish(reply, None, m.data)
            return
        if not extra:  # (append_headers' bytes for these four, written out)
            tail = b"Nats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n\r\n" % (
                stream.name.encode("utf-8", "surrogateescape"), m.subject.encode("utf-8", "surrogateescape"), m.seq,
                format_time(m.ts).encode())
            h = m.hdr
            hdr = h[:-2] + tail if len(h) > 2 else H.HDR_LINE + tail
            self.jsa.ic.publish(reply, None, hdr + m.data, len(hdr))
            return
        pairs = [(H.STREAM, stream.name), (H.SUBJECT, m.subject), (H.SEQUENCE, str(m.seq)),
                 (H.TIMESTAMP, format_time(m.ts))]
        if extra:
            pairs.extend(extra)
        hdr = H.append_headers(m.hdr, pairs)
        self.jsa.ic.publish(reply, None, hdr + m.data, len(hdr))

    def _direct_serve(self, stream: Stream, reply: bytes, req: "_DirectReq") -> None:
        """One message, or a batch (``batch``) ending with a 204 EOB status. In a batch each message's
        Nats-Num-Pending counts what still matches after it (one count for the batch, then decremented)
        and Nats-Last-Sequence is the sequence of the message before it in the batch."""
        if req.multi:
            self._direct_multi(stream, reply, req)
            return
        store = stream.store
        seq = store.get_seq_from_time(req.start) if req.start is not None else req.seq
        nxt = req.next
        wc = subject_has_wildcard(nxt) if nxt else False
        is_batch = req.batch != 0
        batch = req.batch if is_batch else 1
        np = store.num_pending(seq, nxt, False)[0] if is_batch else 0
        mb = req.max_bytes or self.js.server.opts.max_pending
        sent_bytes = 0
        lseq = 0
        for i in range(batch):
            if seq > 0 and not nxt:
                m = store.load_msg(seq) if i == 0 and not is_batch else store.load_next_msg(">", seq, False)
            elif nxt:
                m = store.load_next_msg(nxt, seq, wc)
            else:
                m = store.load_last_msg(req.last)
            if m is None:
                if batch > 1 and i > 0:
                    break  # a batch that ran out: the EOB below
                self._status(reply, 404, "Message Not Found")
                return
            seq = m.seq + 1
            if is_batch:
                if np > 0 and not req.no_hdr:  # (nats-server counts down only the answers with headers)
                    np -= 1
                self._direct_reply(stream, reply, m, [(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq))],
                                   req.no_hdr)
            else:
                self._direct_reply(stream, reply, m, no_hdr=req.no_hdr)
            lseq = m.seq
            sent_bytes += len(m.subject) + len(m.hdr) + len(m.data)
            if sent_bytes >= mb:
                break
        if is_batch:
            hdr = H.make_headers([(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq))], 204, "EOB")
            self.jsa.ic.publish(reply, None, hdr, len(hdr))

    def _direct_multi(self, stream: Stream, reply: bytes, req: "_DirectReq") -> None:
        """multi_last: the last message of each subject matching the filters (at or below up_to_seq or
        before up_to_time), in sequence order, skipping those below ``seq``; then an EOB status that also
        carries the upper bound. Nats-Num-Pending counts the matches after each message."""
        store = stream.store
        up_to = req.up_to_seq
        if req.up_to_time is not None:
            up_to = store.get_seq_from_time(req.up_to_time)
            if up_to <= store.state().first_seq:
                self._status(reply, 404, "No Results")
                return
            up_to -= 1  # the first message at or after the time is excluded
        if not up_to:
            up_to = store.state().last_seq
        try:
            seqs = store.multi_last_seqs(req.multi, up_to, _MAX_MULTI_RESULTS) if up_to else []
        except ErrTooManyResults:
            self._status(reply, 413, "Too Many Results")
            return
        if not seqs:
            self._status(reply, 404, "No Results")
            return
        mb = req.max_bytes or self.js.server.opts.max_pending
        np = len(seqs)
        lseq = sent = sent_bytes = 0
        for s in seqs:
            np -= 1
            if s < req.seq:
                continue
            m = store.load_msg(s)
            if m is None:
                self._status(reply, 404, "Message Not Found")
                return
            self._direct_reply(stream, reply, m, [(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq))])
            lseq = s
            sent_bytes += len(m.subject) + len(m.hdr) + len(m.data)
            if sent_bytes >= mb:
                break
            sent += 1
            if 0 < req.batch <= sent:
                break
        hdr = H.make_headers([(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq)),
                              (H.UP_TO_SEQUENCE, str(up_to))], 204, "EOB")
        self.jsa.ic.publish(reply, None, hdr, len(hdr))


def _is_info(subject: bytes) -> bool:
    """Whether ``$JS[.<domain>].API.<endpoint>...`` is one of nats-server's info endpoints."""
    toks = subject.split(b".")
    rest = toks[2:] if toks[1:2] == [b"API"] else toks[3:]
    if not rest:
        return False
    key = rest[0].decode("ascii", "replace")
    if key == "INFO":
        return len(rest) == 1
    return len(rest) >= 2 and f"{key}.{rest[1].decode('ascii', 'replace')}" in INFO_KEYS


def _reserved(streams: Any, storage: str, skip: str = "") -> int:
    """The bytes streams of this storage reserve (their max_bytes, when set), ``skip`` left out."""
    return sum(s.cfg.max_bytes for s in streams
               if s.cfg.max_bytes > 0 and s.cfg.storage == storage and s.name != skip)


NOT_COUNTED = object()  # a handler's answer that does not count in the account's API totals

_MAX_MULTI_RESULTS = 1024  # subjects one multi_last request may match (413 Too Many Results beyond)


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


# a direct get body that is only a sequence (JSON whitespace allowed; at most 19 digits: always a uint64)
_SEQ_ONLY = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"seq"[ \t\n\r]*:[ \t\n\r]*(0|[1-9][0-9]{0,18})[ \t\n\r]*\}[ \t\n\r]*').fullmatch


class _DirectReq:
    """A direct get request body, decoded with the type rules nats-server's JSON decoder applies (an
    unsigned sequence, integer counts, RFC 3339 times, a list of strings; field names matched without
    regard to case; unknown fields ignored). ``parse`` returns None for what it refuses."""

    __slots__ = ("seq", "last", "next", "batch", "max_bytes", "start", "multi", "up_to_seq", "up_to_time",
                 "no_hdr")

    def __init__(self) -> None:
        self.seq = 0
        self.last = ""
        self.next = ""
        self.batch = 0
        self.max_bytes = 0
        self.start: int | None = None  # ns since the epoch
        self.multi: list[str] = []
        self.up_to_seq = 0
        self.up_to_time: int | None = None
        self.no_hdr = False

    @classmethod
    def parse(cls, body: bytes) -> "_DirectReq | None":
        try:  # (as nats-server's plain json.Unmarshal: unknown fields ignored)
            d = _codec.go_unmarshal(body, A.JSApiMsgGetRequest)
        except _codec.GoJSONError:
            return None
        req = cls()
        req.seq, req.last, req.next = d.seq, d.last_by_subj, d.next_by_subj
        req.batch, req.max_bytes, req.up_to_seq, req.no_hdr = d.batch, d.max_bytes, d.up_to_seq, d.no_hdr
        req.multi = list(d.multi_last or ())
        if d.start_time is not None:
            req.start = parse_time(d.start_time)[0]
        if d.up_to_time is not None:
            req.up_to_time = parse_time(d.up_to_time)[0]
        return req


# the argument tokens each endpoint takes (default: none, or a stream name)
_ENDPOINT_ARGS: dict[str, tuple[str, ...]] = {
    "INFO": ("",),
    "STREAM.NAMES": ("",),
    "STREAM.LIST": ("",),
    "CONSUMER.CREATE": ("*", "*.>"),
    "CONSUMER.DURABLE.CREATE": ("*.*",),
    "CONSUMER.INFO": ("*.*",),
    "CONSUMER.DELETE": ("*.*",),
    "CONSUMER.MSG.NEXT": ("*.*",),
    "CONSUMER.PAUSE": ("*.*",),
    "CONSUMER.LEADER.STEPDOWN": ("*.*",),
    "CONSUMER.UNPIN": ("*.*",),
    "CONSUMER.RESET": ("*.*",),
    "CONSUMER.NAMES": ("*",),
    "CONSUMER.LIST": ("*",),
}


def _type_for(handler: Callable) -> str:
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
