"""The ``$JS.API.STREAM.*`` handlers: create, update, info, delete, purge, names, list (a mixin of ApiRouter)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Coroutine


from rillet.gocompat.gotime import format_time
from rillet.jetstream import streamconfig as SC
from rillet.jetstream.api import types as A
from rillet.jetstream.log import LeadershipLost
from rillet.jetstream.errors import ApiError
from rillet.jetstream.stream import Stream, now_ns
from rillet.subjects.overlap import SubjectTree, any_collision
from rillet.subjects.validate import is_valid_subject, subjects_collide

if TYPE_CHECKING:
    pass

from rillet.jetstream.api.common import (T, JSON_LIMIT, LIST_LIMIT, BIG_CONFIG, SUBSCRIBE_BATCH, NOT_COUNTED, stream_info_dict, _reserved, check_empty)


class StreamApi:
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
        # the stream's files are written and synced off the loop (and a large config is checked there), the
        # API queue held meanwhile so that requests keep their order: see _create_async
        self._in_steps(self._create_async(args, reply, body), reply, "stream_create", "a stream create")
        return NOT_COUNTED

    def _in_steps(self, work: Coroutine[Any, Any, None], reply: bytes | None, name: str, what: str) -> None:
        """Answer the request ``name`` (``what``, in a log line) with ``work``, in steps off this callback:
        the API queue held until it is done (requests keep their order), a failure answered as the router
        answers one, and the request counted."""
        q = self.js.api_queue
        q.hold()

        async def run() -> None:
            try:
                await work
            except Exception as e:
                self._answer_failure(reply, T + name + "_response", e, name, what)
            finally:
                self.jsa.api_total += 1
                q.release()
                self.js.server.schedule_flush()
        self.js.loop.create_task(run())

    def _streams_snapshot(self, skip: str = "") -> tuple[dict[str, Any], Callable[[list[str]], bool]]:
        """The account's stream configs and an overlap check against their subjects (but ``skip``'s), for
        checks run in a worker thread (the API queue held: no request changes them meanwhile)."""
        cfgs = {n: st.cfg for n, st in self.jsa.streams.items()}
        stored = [b for n, c in cfgs.items() if n != skip for b in c.subjects or []]

        def overlap(subjects: list[str]) -> bool:
            return bool(stored) and any_collision(stored, subjects)
        return cfgs, overlap

    async def _create_async(self, args: list[str], reply: bytes | None, body: bytes) -> None:
        """``stream_create`` in steps, with the same checks and answers. A large config (thousands of
        subjects) is checked in a worker thread against a snapshot of the account's streams (the API queue
        is held, so no other request changes them meanwhile); the stream's directory and meta.json are
        written and synced in a worker thread; a large config's subject subscriptions are added
        SUBSCRIBE_BATCH per loop pass before the answer goes out."""
        loop = self.js.loop
        name = args[0] if args else ""
        existing = self.jsa.streams.get(name)
        kw = dict(is_create=True, subject_name=name, account_limits=self.jsa.limits,
                  server_limits=self.js.server_limits, strict=self.js.strict,
                  existing=existing.cfg if existing is not None else None)
        if len(body) > BIG_CONFIG:
            cfgs, overlap = self._streams_snapshot()
            cfg = await loop.run_in_executor(None, lambda: SC.normalize_stream_config(
                body, lookup_stream=cfgs.get, subjects_overlap=overlap, **kw))
        else:
            cfg = SC.normalize_stream_config(body, lookup_stream=self._lookup, subjects_overlap=self._overlap(), **kw)
        if existing is not None:  # the same configuration again: its info, still "did_create"
            self.respond(reply, {"type": T + "stream_create_response", **stream_info_dict(existing),
                                 "did_create": True})
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
        if len(body) > BIG_CONFIG:
            # a large config is checked in a worker thread and its subjects' subscriptions changed in
            # steps, the API queue held meanwhile: see _update_async
            self._in_steps(self._update_async(args, reply, body), reply, "stream_update", "a stream update")
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
        loop = self.js.loop
        name = args[0] if args else ""
        stream = self.jsa.streams.get(name)
        cfgs, overlap = self._streams_snapshot(skip=name)
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
                stream.subscribe()
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
                                with_cluster=True, alternates=self._stream_alternates(name, reply))
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

    def _stream_alternates(self, name: str, reply: bytes | None) -> list[dict[str, str]] | None:
        """(STREAM.INFO) In a cluster, the stream and the account's mirrors of it, nearest the requester's
        cluster first (rillet.jetstream.cluster.alternates); None without clustering or without a mirror."""
        cl = self.js.cluster
        if cl is None:
            return None
        from rillet.jetstream.cluster.alternates import stream_alternates
        cluster, alts = cl.api._requester(self.jsa.account, reply)
        account = self.jsa.account.name
        return stream_alternates(cl.state.streams.get(account, {}).values(), name, cluster, alts,
                                 self.js.domain or "")

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

