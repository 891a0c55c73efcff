"""A stream: an internal subscription on its subjects whose messages become log entries, then stored.

    publish ─► _on_msg ─► process: checks against the *proposed* state (sealed, size, expectations, dedup,
               discard-new limits: the store's state plus the entries still in flight, see "overlay" below)
           ─► log.propose(Entry.MSG, on_applied=_msg_done)
           ─► apply (every replica): store at the entry's sequence and time, rollup, dedup record
           ─► _msg_done (leader, after apply): expiry timer, schedules, republish, consumer wake-ups,
              interest removals (proposed), then the PubAck (after fsync when sync_interval is "always":
              acks of appends that arrive together share one fsync)

Replies at the end of the pass (the leader, any log; ``ReplyMixin`` in ``rillet.jetstream.streamreplies``):
the stream holds the PubAcks (and errors) of a loop pass after its first; ``StoreWriter``, queued in the
server's pending output like a connection, sends them together at the end of the pass (``send_replies``: one
sublist result per reply prefix when it stands for every subject under it). Write-behind (file store, a ``SingleNodeLog`` or a clustered R1 stream while its group
runs solo: ``set_write_behind``; never an entry of the group's log: ``no_gather``): the store gathers the plain
appends of the pass (FileStore.write_behind) and the writer writes them with one write before it sends the
acks. A PubAck leaves only once its message is written to the OS; if that write fails, the store takes the
messages back and their held acks become the store's error.

Nothing else changes the store: atomic batches (Entry.BATCH), mirrored messages (MIRROR), deletes, purges,
retention removals (DELETE/PURGE), max_age and TTL expiry with their delete markers (EXPIRE) and config
updates (UPDATE) are log entries too, applied by ``apply``. Entries carry what the leader decided
(sequence, timestamp, msg id, TTL, batch boundaries; the leader's time for purge/delete/update/expire, which
stamps any delete marker), so a replica applying them ends in the same store and dedup state, byte for
byte. ``apply`` has no effect outside that state machine: what it leaves for the leader (messages removed
by limits or rollups, markers stored) is queued in ``_fx`` and run by the completion of the same entry
(``_done`` / ``_msg_done``), which the log calls on the leader right after applying it. API replies (purge,
delete, update) are sent from completions too (``ctx`` of the entry).

The proposed overlay: ``_inflight`` the entries that store messages (MSG, BATCH, MIRROR) proposed and not
yet applied, in log order, and ``_pids`` the in-flight msg ids. The last proposed sequence and msg id,
per-subject counts, bytes and last sequences in flight are read from ``_inflight`` when a check needs them
(``proposed_last_seq``, ``_proposed_last_id``, ``inflight_*``). With nothing in flight (always, on one server) the
checks read the store alone.
When an in-flight entry fails to apply, the entries proposed after it fail too (sequence mismatch) and the
overlay is back in step with the store once nothing is in flight.
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

import msgspec

import rillet.server.msgtrace as _mt
from rillet import lane
from rillet.gocompat.gotime import format_time
from rillet.jetstream import headers as H
from rillet.jetstream import damagereport, ingest, schedules, sourcestate
from rillet.jetstream.dedup import DedupMixin
from rillet.jetstream.dedup import now_ns as now_ns  # (re-exported: the jetstream modules take it from here)
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import Entry, NotLeader, SingleNodeLog
from rillet.jetstream.retention import Removed
from rillet.jetstream.store import base as store_base
from rillet.jetstream.streamreplies import ReplyMixin, StoreWriter, store_error
from rillet.subjects.validate import subject_matches_filter

if TYPE_CHECKING:
    from rillet.jetstream.manager import JSAccount
    from rillet.jetstream.seams import ReplicatedLog, StreamReplication

_json = msgspec.json.encode


def parse_ttl(v: str) -> int:
    """Nats-TTL: a Go duration or a number of seconds; "never" = -1. Returns seconds (-1 never), or raises."""
    v = v.strip()
    if v.lower() == "never":
        return -1
    if v == "0":  # a zero duration: below the one second minimum
        raise ValueError(v)
    if v.isdigit():
        return int(v)
    from rillet.gocompat.gotime import parse_go_duration
    secs = parse_go_duration(v)
    if secs < 1:
        raise ValueError(v)
    return int(secs)


class Stream(DedupMixin, ReplyMixin):
    def __init__(self, jsa: "JSAccount", cfg: Any, created: str, store: Any) -> None:
        self._init_state(cfg, store)
        # the leader's side: the log, subscriptions, replies, timers
        self.jsa = jsa
        self.js = jsa.js
        self.created = created
        self.log: ReplicatedLog = SingleNodeLog(self.apply)
        self.log.on_leader_change = self.leader_changed
        # a replicated stream's side (rillet.jetstream.cluster.streams.StreamReplica, set by ``replicate``):
        # STREAM.INFO's cluster block and the consumer count of the assignment
        self.replication: StreamReplication | None = None
        self._msg_done_cb = self._msg_done  # bound once: the completion of every publish
        self._done_cb = self._done
        self.ic = jsa.ic
        self._subs: list[Any] = []
        self._acks: list[tuple[bytes, bytes]] = []
        self._ack_parts: tuple[bytes, bytes, bytes] | None = None  # a PubAck's JSON around its sequence (+ as a format)
        self._sync_scheduled = False
        # why the store can no longer be trusted to make writes durable (an fsync failed: the kernel may have
        # dropped the pages it could not write, so a later fsync that succeeds proves nothing, the "fsyncgate"
        # lesson); set once, then every new message is refused until the server restarts and recovers the store
        self.store_failed = ""
        self._expire_timer: asyncio.TimerHandle | None = None
        self.sources: Any = None  # mirror / sources machinery (rillet.jetstream.sources)
        self.mirror_direct_ready = False  # a mirror_direct mirror close enough to its origin to answer for it
        # write-behind (see the module docstring; on from start() on one server with a file store)
        self._held: list[tuple[bytes, bytes, bytes, int]] | None = None  # replies waiting for the pass's end
        self._hold = False  # replies are held this pass (the writer is queued)
        self._wb_pending = False  # the store gathered records this pass
        self._wb_msg_id = ""  # the last msg id before the first gathered message (restored if taken back)
        # answers of answer objects that wait for the write (``wait_write``: the MQTT store's), held in order
        # as (object, seq, kind, arg) while the pass's first is answered: ReplyMixin._fast_answer
        self._held_fast: list[tuple[Any, int, int, Any]] = []
        self._writer: StoreWriter | None = None
        # batches being published (the leader's): atomic ones staged until their commit (rillet.jetstream.batch),
        # fast ones with their flow control (rillet.jetstream.fastbatch); by batch id
        self.atomic_batches: dict[str, Any] = {}
        self.fast_batches: dict[str, Any] = {}
        # the ingest backlog and its limits (rillet.jetstream.ingest): messages (and bytes) proposed, not applied
        self.ingest_limits = ingest.limits(self.js.server.opts)  # (and gathered, not written)
        self._bl_n = self._bl_b = self._wb_n = self._wb_b = 0
        self._ingest_warned = -ingest.WARN_EVERY

    def replicate(self, log: ReplicatedLog, replication: StreamReplication) -> None:
        """The stream runs on a replicated log (its RAFT group's): every change goes through ``log``, whose
        applies and leadership changes come back as ``apply`` and ``leader_changed``; ``replication``
        gives the cluster's view of it (STREAM.INFO, consumer info)."""
        self.log = log
        self.replication = replication

    @classmethod
    def replica(cls, cfg: Any, store: Any) -> "Stream":
        """The state machine alone (what a follower runs): ``apply`` entries to ``store``; no log, no
        subscriptions, no timers, no replies."""
        self = cls.__new__(cls)
        self._init_state(cfg, store)
        return self

    def _init_state(self, cfg: Any, store: Any) -> None:
        """The replicated state: the store, the config, the dedup table and last msg id."""
        self.cfg = cfg
        self.name: str = cfg.name
        self.store = store
        self.consumers: dict[str, Any] = {}
        # dedup: msg id -> (seq, ts_ns); kept for duplicate_window
        self._ddmap: dict[str, tuple[int, int]] = {}
        self._ddorder: list[tuple[int, str]] = []
        self._last_msg_id = ""
        self._dd_loaded = False  # the dedup table of a recovered stream is rebuilt when first needed
        self._apply_ts = 0  # the leader's time in the entry being applied (stamps delete markers)
        self._wb_store = False  # the store has write-behind (the leader's, from start(); a replica never)
        self._fx: list[Any] = []  # left by apply for the leader: removed seqs, (seq, subj, hdr, ts, ttl) markers
        # the proposed overlay (entries in flight; see the module docstring)
        self._inflight: deque[Entry] = deque()
        self._pids: dict[str, int] = {}
        self.source_pos: dict[str, tuple[int, str]] = {}  # the sources' positions (rillet.jetstream.sourcestate)
        self.closed = False
        self.scheduler: Any = None  # the message scheduler (rillet.jetstream.schedules), made when first needed
        store.register_remove_callback(self._on_store_remove)
        self._damage_due = False  # (a damaged record was found on a read: _store_damaged acts after the read)
        self._open_damage_reported = False  # (damage found when the store opened: reported once, by start)
        # damaged sequences reported already (rillet.jetstream.damagereport: kept on disk, read at the first report)
        self._damage_reported: set[int] | None = None
        self._damage_detected = ""
        if hasattr(store, "register_damage_callback"):
            store.register_damage_callback(self._on_store_damage)
        if hasattr(store, "register_marker_callback"):
            store.register_marker_callback(self._on_marker)

    # ---- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.js.sync_always:
            self._held = []
            self._writer = StoreWriter(self)
            # (write-behind only where the log is this server's alone: a replicated log's applied entry must
            # not be taken back by a later failed write)
            if self.log.__class__ is SingleNodeLog and hasattr(self.store, "write_behind"):
                self._wb_store = True
                self.store.write_behind(self._wb_armed, self._wb_failed)
                self.store.gather(False)  # (the first append of a pass is written at once: see _reply)
        self.subscribe()
        self._schedule_expiry()
        schedules.start(self)
        if not self._open_damage_reported and self.store.state().lost:
            # damaged records the store found when it opened (the open-time scan): reported as those found while
            # running are, once per process, after the start (damagereport.report_open_damage)
            self._open_damage_reported = True
            self.js.loop.call_soon(damagereport.report_open_damage, self, 0)

    def subscribe(self) -> None:
        """(Re)subscribe what the stream's leader listens on: direct gets, and its subjects unless a mirror."""
        self.unsubscribe_all()
        cfg = self.cfg
        if cfg.allow_direct or cfg.mirror_direct:
            # direct gets are served per stream: a stream that does not exist (or allow them) has no responder
            names = [self.name]
            if cfg.mirror_direct and cfg.mirror is not None and self.mirror_direct_ready:
                names.append(cfg.mirror.name)  # (the origin's direct gets too: see set_mirror_direct)
            for prefix in self.jsa.api_prefixes():
                for n in names:
                    # (a queue group, as nats-server: a replicated stream's followers answer them too)
                    self._subs.append(self.ic.subscribe(f"{prefix}.DIRECT.GET.{n}", self.on_direct_get,
                                                        queue="_sys_"))
                    self._subs.append(self.ic.subscribe(f"{prefix}.DIRECT.GET.{n}.>", self.on_direct_get,
                                                        queue="_sys_"))
        if cfg.mirror is not None:
            return  # a mirror takes no direct publishes
        self.subscribe_subjects(list(cfg.subjects or []))

    def unsubscribe_all(self) -> None:
        """Drop every subscription of the stream (a leader that steps down, a stream that stops)."""
        for sub in self._subs:
            self.ic.remove_sub(sub)
        self._subs = []

    def subject_subscriptions(self) -> list[Any]:
        """The subscriptions that take the stream's publishes (one per subject of its config)."""
        on_msg = self._on_msg
        return [sub for sub in self._subs if sub.icb == on_msg]

    def subscribe_subjects(self, subjects: list[str]) -> None:
        """Take publishes on these subjects too (the API subscribes a large config in steps)."""
        for subj in subjects:
            self._subs.append(self.ic.subscribe(subj, self._on_msg))

    def unsubscribe(self, subs: list[Any]) -> None:
        """Drop these of the stream's subscriptions."""
        for sub in subs:
            self.ic.remove_sub(sub)
        drop = set(map(id, subs))
        self._subs = [sub for sub in self._subs if id(sub) not in drop]

    def set_mirror_direct(self, on: bool) -> None:
        """A ``mirror_direct`` mirror answers its origin's direct gets (``$JS.API.DIRECT.GET.<origin>``, in the
        ``_sys_`` queue group beside the origin's own responder) once it has (nearly) caught up with the
        origin, as nats-server: rillet.jetstream.sources turns this on when the origin's consumer reports
        fewer than 10 messages pending. Queue subscribers of the local cluster win across gateways and leaf
        connections, so a client near the mirror is answered by it."""
        if on == self.mirror_direct_ready:
            return
        self.mirror_direct_ready = on
        if not self.closed:  # (called where the mirror is fed: one server, or the stream leader)
            self.subscribe()

    def on_direct_get(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int,
                       msg: bytes) -> None:
        self.jsa.router.on_direct_get(self, sub, subject, reply, hdr, msg)  # (rillet.jetstream.api.direct)

    def stop(self, delete: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.unsubscribe_all()
        if self._expire_timer is not None:
            self._expire_timer.cancel()
        schedules.stop(self)
        if self.sources is not None:
            self.sources.stop()
        if self.atomic_batches:  # staged atomic batches are dropped with the stream
            from rillet.jetstream import batch
            batch.drop_all(self)
        if self.fast_batches:
            from rillet.jetstream import fastbatch
            fastbatch.drop_all(self)
        for c in list(self.consumers.values()):
            c.stop(delete=delete)
        if delete:
            self.store.delete()
        else:
            try:
                self.store.sync()
            except store_base.StoreError as e:
                self.js.log.error(f"Stream '{self.jsa.account.name} > {self.name}': sync at stop failed: {e}")
            self.store.stop()

    # ---- inbound messages -------------------------------------------------------------------------

    def _on_msg(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if hdr >= 0:
            hdr_b, data = msg[:hdr], msg[hdr:]
        else:
            hdr_b, data = b"", msg
        subj = subject.decode("utf-8", "surrogateescape")
        st = self.cfg.subject_transform
        if st is not None and st.dest:  # (input_subject's own test first: no call for most streams)
            subj = self.input_subject(subj)
        if hdr > 0 and _mt.CURRENT is not None:  # a traced message: the js event (rillet.server.msgtrace)
            hdr_b = _mt.CURRENT.jetstream(self, subj, hdr_b)  # (stored with its trace disabled)
            if hdr_b is None:
                return  # trace only: not stored
        if reply is not None:
            if reply.endswith(b".$FI"):  # a fast batch (rillet.jetstream.fastbatch)
                from rillet.jetstream import fastbatch
                fastbatch.process(self, subj, reply, hdr_b, data)
                return
            if hdr_b and reply.startswith(b"_R_.") and b"Nats-Request-Info:" in hdr_b:  # through a service import?
                from rillet.jetstream import fastbatch
                ctl = fastbatch.imported_reply(hdr_b)
                if ctl is not None:
                    fastbatch.process(self, subj, reply, hdr_b, data, ctl)
                    return
        self.process(subj, reply, hdr_b, data)

    def input_subject(self, subj: str) -> str:
        """``subj`` through the stream's own ``subject_transform`` (unchanged when it does not match): what
        every message the stream stores goes through, published, sourced (after the source's transforms) or
        mirrored (after the mirror's), as nats-server."""
        st = self.cfg.subject_transform
        if st is not None and st.dest:
            src = st.src or ">"
            if subject_matches_filter(subj, src):
                from rillet.jetstream.transform import transform_subject
                return transform_subject(src, st.dest, subj)
        return subj

    def process(self, subject: str, reply: bytes | None, hdr: bytes, data: bytes, ts: int = 0,
                sourced: bool = False, fast: Any = None) -> int:
        """Checks against the proposed state, then propose. Returns the proposed sequence (0 when refused or a
        duplicate); the PubAck (or the error) is sent once the entry is applied. ``sourced``: a message
        from a source (its Nats-Incr is stored as sent, or folded into a counter by rillet.jetstream.counters).
        ``fast``: a fast batch message (rillet.jetstream.fastbatch.FastMsg) answered by it, not here."""
        size = len(hdr) + len(data) + len(subject)
        n = self._bl_n + self._wb_n
        if n and not sourced:  # the ingest limits, before anything else (nats-server)
            max_n, max_b = self.ingest_limits  # (ingest.over's test inline: its call only for a refusal)
            if ((max_n and n >= max_n) or (max_b and self._bl_b + self._wb_b + size
                                           + (len(reply) if reply.__class__ is bytes else 0) > max_b)):
                why = ingest.over(self, ingest.msg_size(subject, reply, hdr, data))
                if fast is not None:
                    self._fast_answer(fast, 0, 2, ApiError.make("STREAM_TOO_MANY_REQUESTS"))
                    reply = None
                ingest.refuse(self, reply, why)
                return 0
        cfg = self.cfg
        pn = len(self._inflight)
        try:
            if self.store_failed:
                raise ApiError.make("STREAM_STORE_FAILED", err=self.store_failed)
            if cfg.sealed:
                raise ApiError.make("STREAM_SEALED")
            if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
                raise ApiError.make("STREAM_MESSAGE_EXCEEDS_MAXIMUM")
            if self.jsa.limited and self.jsa.over_limit(cfg.storage, size + (self.inflight_bytes() if pn else 0)):
                raise ApiError.make("ACCOUNT_RESOURCES_EXCEEDED")
            if hdr and fast is None and b"Nats-Batch-Id" in hdr:  # atomic batch publish: staged, stored on commit
                from rillet.jetstream import batch
                bid = batch.batch_id(hdr)
                if bid:
                    return batch.process(self, bid, subject, reply, hdr, data)
            ttl = 0
            msg_id = ""
            incr = None
            if hdr and b"\r\nNats-" in hdr:  # (every header checked below is a Nats-* one)
                if b"Nats-Request-Info:" in hdr:  # client info a service import added: not stored (nats-server)
                    hdr = H.remove_headers(hdr, {"Nats-Request-Info"})
                if b"Nats-Incr" in hdr:  # a counter increment: checked before anything else (nats-server)
                    from rillet.jetstream import counters
                    incr = counters.check_incr(self, hdr, data, sourced)
                exp = H.get_header(hdr, H.EXPECTED_STREAM)
                if exp is not None and exp != self.name:
                    raise ApiError.make("STREAM_NOT_MATCH")
                ttl_hdr = H.get_header(hdr, H.TTL)
                if ttl_hdr:  # disabled is checked here, an invalid value after the expectations (nats-server)
                    try:
                        ttl = parse_ttl(ttl_hdr)
                    except ValueError:
                        ttl = None  # type: ignore[assignment]
                    if ttl and not cfg.allow_msg_ttl:
                        raise ApiError.make("MESSAGE_TTL_DISABLED")
                msg_id = H.get_header(hdr, H.MSG_ID) or ""
                if msg_id:
                    dd = self._dedup_lookup(msg_id)
                    if dd is None and pn:
                        dd = self._pids.get(msg_id)  # the same id still in flight: a duplicate too
                    if dd is not None:
                        if _mt.CURRENT is not None:  # a traced message: the js event's error (msgtrace)
                            _mt.CURRENT.js_error(self, None)
                        if fast is not None:
                            self._fast_answer(fast, 0, 1, dd)
                            return 0
                        if reply:  # (nats-server's bytes: the PubAck's, then "duplicate": true)
                            dom = b',"domain":' + _json(self.js.domain) if self.js.domain else b""
                            self._ack_payload(reply, b'{"stream":%s%s,"seq":%d,"duplicate": true}' % (
                                _json(self.name), dom, dd))
                        return 0
                v = H.get_header(hdr, H.EXPECTED_LAST_MSG_ID)
                if v is not None:
                    if not self._dd_loaded:
                        self._rebuild_dedup()
                    last_id = self._proposed_last_id() if pn else self._last_msg_id
                    if v != last_id:
                        raise ApiError.make("STREAM_WRONG_LAST_MSG_ID", id=last_id)
                v = H.get_header(hdr, H.EXPECTED_LAST_SEQ)
                if v is not None:
                    last = self.proposed_last_seq() if pn else self.store.last_seq
                    if not v.isdigit() or int(v) != last:
                        raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=last)
                v = H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ)
                if v:
                    # the subject checked may be another one, or a filter with wildcards
                    check_subj = H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ) or subject
                    last = self._last_seq_for(check_subj, check_subj == subject)
                    if not v.isdigit() or int(v) != last:
                        raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=last)
                elif H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ):
                    raise ApiError.make("STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID")
                if b"Nats-Schedul" in hdr:
                    hdr = schedules.check(self, subject, hdr)
                if not sourced and b"Nats-Stream-Source:" in hdr:  # only sourcing may set it (2.15)
                    raise ApiError.make("MESSAGE_SOURCE_HDR_NOT_ALLOWED")
                v = H.get_header(hdr, H.ROLLUP)
                if v is not None:
                    if not cfg.allow_rollup_hdrs:
                        raise ApiError.make("STREAM_ROLLUP_FAILED", err="rollup not permitted")
                    if v not in ("sub", "all"):
                        raise ApiError.make("STREAM_ROLLUP_FAILED", err=f"rollup value invalid: {v}")
                    if v == "all" and cfg.deny_purge:
                        raise ApiError.make("STREAM_ROLLUP_FAILED", err="rollup not permitted")
                if ttl is None:
                    raise ApiError.make("MESSAGE_TTL_INVALID")
                sdm = cfg.subject_delete_marker_ttl
                if ttl > 0 and sdm > 0 and cfg.max_msgs_per_subject != 1 and ttl < sdm // 1_000_000_000:
                    # at least the delete marker TTL, or a marker already there could hide this one's
                    ttl = sdm // 1_000_000_000
                    hdr = H.append_headers(H.remove_headers(hdr, {H.TTL}), [(H.TTL, str(ttl))])
            if cfg.allow_msg_counter:  # the new total is decided here, by the leader (rillet.jetstream.counters)
                from rillet.jetstream import counters
                hdr, data = counters.apply(self, subject, hdr, incr, data)
            if pn and cfg.discard == "new":
                self._check_discard_new(subject, hdr, data)
            seq = (self.proposed_last_seq() if pn else self.store.last_seq) + 1
        except ApiError as e:
            if hdr and _mt.CURRENT is not None:  # a traced message: the js event's error (msgtrace)
                _mt.CURRENT.js_error(self, e)
            if fast is not None:
                self._fast_answer(fast, 0, 2, e)
            elif reply:
                self._reply(reply, _json({"error": e.to_dict(), "stream": self.name, "seq": 0}))
            return 0
        except store_base.StoreError as e:  # a check could not read the store
            if fast is not None:
                self._fast_answer(fast, 0, 2, store_error(e))
            elif reply:
                self._reply(reply, _json({"error": store_error(e).to_dict(), "stream": self.name, "seq": 0}))
            return 0
        if hdr and _mt.CURRENT is not None and not _mt.CURRENT.js_checked(self):
            return 0  # a trace-only message: checked, not stored (rillet.server.msgtrace)
        if not pn and cfg.retention == "interest" and self._no_interest(subject, hdr, sourced):
            if fast is not None:
                fast.proposed()
            self.log.propose(Entry(Entry.SKIP, (ts or now_ns(), seq), fast if fast is not None else reply),
                             self._skip_done)
            return seq
        # the overlay: what is in flight counts for the checks of the next publishes until it is applied
        if fast is None:
            entry = Entry(Entry.MSG, (subject, hdr, data, ts or now_ns(), ttl, msg_id, seq), reply)
        else:  # the fast batch answers after apply (its flow acks, the final PubAck)
            entry = Entry(Entry.MSG, (subject, hdr, data, ts or now_ns(), ttl, msg_id, seq), fast)
            fast.proposed()
        self._inflight.append(entry)
        self._bl_n += 1
        # (ingest.msg_size, inlined: subject, reply, headers, payload; hdr may have changed since ``size``)
        self._bl_b += len(subject) + len(hdr) + len(data) + (len(reply) if reply.__class__ is bytes and fast is None
                                                             else 0)
        if msg_id:
            self._pids[msg_id] = seq
        log = self.log
        if log.__class__ is SingleNodeLog:  # (its propose, inline: applied and completed here)
            log.index += 1
            try:
                res = log.apply(entry)
            except Exception as e:  # noqa: BLE001 (handed to the completion, as SingleNodeLog.propose does)
                self._msg_done(entry, None, e)
                return seq
            self._msg_done(entry, res, None)
            return seq
        log.propose(entry, self._msg_done_cb)
        return seq

    # ---- the proposed overlay (read only when something is in flight) --------------------------------

    def _inflight_msgs(self) -> Any:
        """(subject, size, seq) of every message in flight, in order."""
        for e in self._inflight:
            a = e.args
            if e.op == Entry.MSG:
                yield a[0], len(a[0]) + len(a[1]) + len(a[2]), a[6]
            elif e.op == Entry.BATCH:
                for i, m in enumerate(a[0]):
                    yield m[0], len(m[0]) + len(m[1]) + len(m[2]), a[1] + i
            else:
                yield a[1], len(a[1]) + len(a[2]) + len(a[3]), a[0]

    def inflight_bytes(self) -> int:
        return sum(m[1] for m in self._inflight_msgs())

    def inflight_count(self, subject: str = "") -> int:
        """Messages in flight (on ``subject`` when given)."""
        return sum(1 for m in self._inflight_msgs() if not subject or m[0] == subject)

    def _last_seq_for(self, subject: str, literal: bool) -> int:
        """The last sequence on ``subject`` (a filter unless ``literal``), in-flight proposals included."""
        if literal:
            last = self.store.last_seq_for_subject(subject)
        else:
            lm = self.store.load_last_msg(subject)
            last = lm.seq if lm is not None else 0
        if self._inflight:
            for s, _, seq in self._inflight_msgs():
                if seq > last and (s == subject if literal else subject_matches_filter(s, subject)):
                    last = seq
        return last

    def _check_discard_new(self, subject: str, hdr: bytes, data: bytes) -> None:
        """Discard-new limits over the store plus the entries in flight (with none in flight the store's
        own check, when the entry is applied, is the same one)."""
        cfg = self.cfg
        if cfg.max_msgs > 0 or cfg.max_bytes > 0:
            st = self.store.state()
            if cfg.max_msgs > 0 and st.msgs + self.inflight_count() + 1 > cfg.max_msgs:
                raise ApiError.make("STREAM_STORE_FAILED", err="maximum messages exceeded")
            if cfg.max_bytes > 0 and (st.bytes + self.inflight_bytes() + len(subject) + len(hdr) + len(data)
                                      > cfg.max_bytes):
                raise ApiError.make("STREAM_STORE_FAILED", err="maximum bytes exceeded")
        if cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0:
            n = self.inflight_count(subject)
            if n and self.store.subjects_totals(subject).get(subject, 0) + n + 1 > cfg.max_msgs_per_subject:
                raise ApiError.make("STREAM_STORE_FAILED", err="maximum messages per subject exceeded")

    def _msg_done(self, entry: Entry, res: Any, err: BaseException | None) -> None:
        """A publish's entry was applied (leader): release its overlay, run the leader's side of storing
        it, then the PubAck (or the error the store answered)."""
        subject, hdr, data, _, ttl, msg_id, seq = entry.args
        self._inflight.popleft()  # entries complete in log order: this is the oldest in flight
        if msg_id and self._pids.get(msg_id) == seq:
            del self._pids[msg_id]
        reply = entry.ctx
        size = len(subject) + len(hdr) + len(data) + (len(reply) if reply.__class__ is bytes else 0)  # (msg_size)
        self._bl_n -= 1
        self._bl_b -= size
        if err is not None:
            self._refused(reply, err)
            return
        if self._wb_pending:  # gathered by the store, written at the end of the pass (the ingest backlog too)
            self._wb_n += 1
            self._wb_b += size
        if self._fx:
            self._run_fx()
        # the leader's side of a stored message (as _after_stored, inlined: the hot path)
        seq = res[0]
        cfg = self.cfg
        if ttl or (self._expire_timer is None and cfg.max_age):
            self._schedule_expiry()  # max_age: the timer is armed once and re-arms itself
        if cfg.allow_msg_schedules or (hdr and b"Nats-Scheduler" in hdr):
            schedules.track_stored(self, subject, hdr, seq, res[1])
        if cfg.republish is not None:
            self._republish(subject, hdr, data, seq, res[1])
        hit = None  # (a consumer still open that took it: interest retention's question, answered once)
        for c in list(self.consumers.values()) if self.consumers else ():
            hit = c if c.on_stream_msg(seq, subject) is True and hit is None else hit
        if cfg.retention == "interest" and (hit is None or hit.closed or self.consumers.get(hit.name) is not hit):
            self.jsa.after_stream_msg(self, seq, subject)
        if reply is not None and reply.__class__ is not bytes:  # an answer object (fastbatch.FastMsg, the MQTT store's)
            if reply.wait_write:  # (answered once written: held with the pass's PubAcks while gathered)
                self._fast_answer(reply, seq, 0, None)
                return
            if self._wb_pending:  # (its answers do not name the message: written before it counts as stored)
                try:
                    self.store.flush_writes()
                except store_base.StoreError as e:
                    self._refused(reply, e)
                    return
            reply.stored(seq)
            return
        if reply and not cfg.no_ack:
            # {"stream":<name>[,"domain":<domain>],"seq":<seq>}, nats-server's bytes
            ap = self._ack_parts
            if ap is None:
                dom = b',"domain":' + _json(self.js.domain) if self.js.domain else b""
                pre = b'{"stream":' + _json(self.name) + dom + b',"seq":'
                ap = self._ack_parts = (pre, b"}", pre.replace(b"%", b"%%") + b"%d}")
            if cfg.allow_msg_counter:  # the counter's new total goes in the PubAck
                from rillet.jetstream.counters import ack_val
                self._ack_payload(reply, b'%s%d,"val":"%s"%s' % (ap[0], seq, ack_val(data), ap[1]), seq)
                return
            held = self._held
            if held is not None and self._hold and not self.js.sync_always:
                held.append((reply, ap[2] % seq, b"", seq))  # (_ack_payload then _reply would hold it so)
                return
            self._ack_payload(reply, ap[2] % seq, seq)

    def _no_interest(self, subject: str, hdr: bytes, sourced: bool) -> bool:
        """A new message of an interest stream that no consumer wants: nats-server only uses its sequence
        (SkipMsgNoInterest: last sequence and time move, the PubAck names it). So here on one server (not
        replicated, nothing in flight or gathered) for a plain message (no Nats-* header, not sourced; no
        republish, counter, schedule, trace or fsync-before-ack); else stored and removed (retention.on_new_msg)."""
        for c in self.consumers.values():  # (first: with a subscriber the usual answer, and the cheapest)
            if not c.closed and c._matches(subject):
                c._mtook = subject  # (its on_stream_msg, next, does not ask again)
                return False
        cfg = self.cfg
        return not (sourced or (hdr and b"\r\nNats-" in hdr) or self._wb_pending or self.replication is not None
                    or type(self.log) is not SingleNodeLog or cfg.republish is not None or cfg.allow_msg_counter
                    or cfg.allow_msg_schedules or _mt.CURRENT is not None
                    or (self.js.sync_always and cfg.persist_mode != "async"))

    def propose(self, op: int, args: tuple, done: Any = None, held: bool = False) -> None:
        """Propose a non-publish entry; ``done(result, error)`` runs on the leader after it is applied (an
        error without ``done`` is logged). ``held``: a BATCH or MIRROR entry that goes in the overlay."""
        entry = Entry(op, args, done)
        if held:
            if op == Entry.BATCH:
                self.hold(entry, args[1] + len(args[0]) - 1, [m[5] for m in args[0]])
            else:
                self.hold(entry, args[0], [])
        self.log.propose(entry, self._done_cb)

    def _done(self, entry: Entry, res: Any, err: BaseException | None) -> None:
        """The completion of every entry but MSG: the leader's side effects, then ``ctx(result, error)``."""
        op = entry.op
        if op == Entry.BATCH or op == Entry.MIRROR:
            self._release(entry)
        if err is None:
            if self._fx:
                self._run_fx()
            if op == Entry.BATCH:
                for (subject, hdr, data, _, ttl, _), (seq, ts) in zip(entry.args[0], res):
                    self._after_stored(seq, subject, hdr, data, ts, ttl)
            elif op == Entry.MIRROR:
                seq, subject = entry.args[0], entry.args[1]
                if self._expire_timer is None and self.cfg.max_age:
                    self._schedule_expiry()
                if self.consumers:
                    for c in list(self.consumers.values()):
                        c.on_stream_msg(seq, subject)
                self.jsa.after_stream_msg(self, seq, subject)
            elif op == Entry.PURGE:
                for c in list(self.consumers.values()):
                    c.on_purge()
        if op == Entry.UPDATE or op == Entry.EXPIRE:
            if not self.closed:
                self._schedule_expiry()  # the next expiry after this one (also when it failed)
        cb = entry.ctx
        if cb is not None:
            cb(res, err)
        elif err is not None and not isinstance(err, NotLeader):
            self.js.log.error(f"Stream '{self.jsa.account.name} > {self.name}': {_OP_NAMES.get(op, op)} "
                              f"failed: {err}")

    def hold(self, entry: Entry, seq: int, msg_ids: list[str]) -> None:
        """Put a non-publish entry that stores messages (a batch, a mirrored message) in the overlay, its
        last message at ``seq``; ``propose`` it next."""
        self._inflight.append(entry)
        for mid in msg_ids:
            if mid:
                self._pids[mid] = seq

    def _release(self, entry: Entry) -> None:
        self._inflight.popleft()
        if entry.op == Entry.BATCH:
            for m in entry.args[0]:
                if m[5] and m[5] in self._pids:
                    del self._pids[m[5]]

    def proposed_last_seq(self) -> int:
        if not self._inflight:
            return self.store.last_seq
        e = self._inflight[-1]
        if e.op == Entry.MSG:
            return e.args[6]
        if e.op == Entry.BATCH:
            return e.args[1] + len(e.args[0]) - 1
        return e.args[0]  # MIRROR

    def _proposed_last_id(self) -> str:
        """The msg id of the last message proposed (a message without one clears it, as when applied)."""
        e = self._inflight[-1]
        if e.op == Entry.MSG:
            return e.args[5]
        if e.op == Entry.BATCH:
            return e.args[0][-1][5]
        return self._last_msg_id  # a mirrored message leaves it as it is

    def leader_changed(self, leader: bool) -> None:
        """The log gained or lost leadership. The overlay was released by the failed completions; the
        leader's timers follow the role."""
        if leader:
            self._schedule_expiry()
        else:
            if self._expire_timer is not None:
                self._expire_timer.cancel()
                self._expire_timer = None
            if self.fast_batches:  # a fast batch does not survive a leader change here
                from rillet.jetstream import fastbatch
                fastbatch.drop_all(self)

    def apply(self, entry: Entry) -> Any:
        """The only place a stream's store changes, run on every replica for each committed entry.
        Everything it needs travels in the entry; it reads no clock and sends nothing: what the leader
        must do afterwards is left in ``_fx`` for the entry's completion."""
        if self._fx:
            self._fx.clear()  # an entry without a completion left these (a replica): nobody runs them
        op = entry.op
        store = self.store
        if op == Entry.MSG:
            subject, hdr, data, ts, ttl, msg_id, seq = entry.args
            if seq != store.last_seq + 1:
                raise store_base.ErrSequenceMismatch()
            r = store.store_msg(subject, hdr, data, ts, ttl)
            if msg_id:
                self._dedup_record(msg_id, r[0], r[1])
            self._last_msg_id = msg_id  # a message without an id clears it, as nats-server
            if hdr and b"Nats-" in hdr:  # (what _stored_hdr acts on: a rollup, schedule or source header)
                self._stored_hdr(r[0], subject, hdr)
            return r
        if op == Entry.BATCH:
            msgs, seq = entry.args
            if seq != store.last_seq + 1:
                raise store_base.ErrSequenceMismatch()
            stored = store.store_batch([m[:5] for m in msgs])
            for (subject, hdr, _, _, _, msg_id), (seq, ts) in zip(msgs, stored):
                self._stored_state(seq, subject, hdr, ts, msg_id)
            return stored
        if op == Entry.MIRROR:
            seq, subject, hdr, data, ts = entry.args
            store.store_raw(seq, subject, hdr, data, ts)
            if hdr and b"Nats-Rollup" in hdr:  # a mirror applies the origin's rollups too (as nats-server)
                v = H.get_header(hdr, H.ROLLUP)
                if v == "sub":
                    store.purge(subject, seq, 0)
                elif v == "all":
                    store.purge(None, seq, 0)
            return seq
        if op == Entry.SKIP:
            ts, seq = entry.args
            if seq != store.last_seq + 1:
                raise store_base.ErrSequenceMismatch()
            self._last_msg_id = ""  # (as a stored message without an id: nats-server's skip sets it too)
            return store.skip_msg(seq, ts)
        if op == Entry.DELETE:
            seq, erase, self._apply_ts = entry.args
            if seq.__class__ is list:  # (retention removals on one server: delete_msgs)
                return self._remove_many(seq, entry.ctx.__class__ is Removed)
            if self._wb_store and not erase and entry.ctx.__class__ is Removed:
                return store.remove_msg_soon(seq)  # (a retention removal: its tombstone goes with the pass's)
            return store.remove_msg(seq, erase)
        if op == Entry.PURGE:
            subject, seq, keep, self._apply_ts = entry.args
            return store.purge(subject, seq, keep)
        if op == Entry.EXPIRE:
            self._apply_ts = entry.args[0]
            return store.expire_msgs(self._apply_ts)
        if op == Entry.UPDATE:
            cfg, scfg, self._apply_ts = entry.args
            old, self.cfg = self.cfg, cfg
            store.update_config(scfg, self._apply_ts)
            return old
        raise ValueError(f"unknown log entry op {op}")

    def _stored_state(self, seq: int, subject: str, hdr: bytes, ts: int, msg_id: str) -> None:
        """The replicated part of storing a message besides the store: dedup, last msg id, rollups, a fired
        one-shot schedule's purge."""
        if msg_id:
            self._dedup_record(msg_id, seq, ts)
        self._last_msg_id = msg_id  # a message without an id clears it, as nats-server
        if hdr:
            self._stored_hdr(seq, subject, hdr)

    def _stored_hdr(self, seq: int, subject: str, hdr: bytes) -> None:
        v = H.get_header(hdr, H.ROLLUP)
        if v == "sub":
            self.store.purge(subject, seq, 0)
        elif v == "all":
            self.store.purge(None, seq, 0)
        if b"Nats-Scheduler" in hdr:
            schedules.apply_stored(self, hdr)
        if b"Nats-Stream-Source:" in hdr and self.cfg.sources:
            sourcestate.seen(self, hdr)

    def take_effects(self) -> list[Any]:
        """What applying entries without a completion left (a follower's): removed sequences and
        ``(seq, subject, hdr, ts, ttl)`` markers stored, in order; the list is emptied."""
        fx, self._fx = self._fx, []
        return fx

    def forget_dedup(self) -> None:
        """The store was replaced under the stream (a snapshot installed): the dedup table is rebuilt from
        the stored headers when next needed."""
        self._dd_loaded = False

    def _run_fx(self) -> None:
        """The leader's side of what applying an entry did besides its own messages: consumers learn of
        removed messages, markers stored are handled like any stored message."""
        fx, self._fx = self._fx, []
        if len(self.consumers) == 1 and fx[-1].__class__ is int and all(map(int.__instancecheck__, fx)):
            next(iter(self.consumers.values())).on_stream_removes(fx)  # (removals only: one call, in order)
            return
        for f in fx:
            if f.__class__ is int:
                for c in list(self.consumers.values()):
                    c.on_stream_remove(f)
            else:
                seq, subject, hdr, ts, ttl = f
                self._after_stored(seq, subject, hdr, b"", ts, ttl)

    def _after_stored(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int) -> None:
        """The leader's side of a stored message: expiry timer, schedules, republish, consumers, retention."""
        cfg = self.cfg
        if ttl or (self._expire_timer is None and cfg.max_age):
            self._schedule_expiry()  # max_age: the timer is armed once and re-arms itself
        if cfg.allow_msg_schedules or (hdr and b"Nats-Scheduler" in hdr):
            schedules.track_stored(self, subject, hdr, seq, ts)
        if cfg.republish is not None:
            self._republish(subject, hdr, data, seq, ts)
        if self.consumers:
            for c in list(self.consumers.values()):
                c.on_stream_msg(seq, subject)
        if cfg.retention == "interest":
            self.jsa.after_stream_msg(self, seq, subject)

    def update_config(self, cfg: Any, done: Any = None) -> None:
        """A new configuration through the log (limits that shrink remove messages when applied);
        ``done(old config, error)`` after it is applied."""
        from rillet.jetstream.storeopen import store_config
        self.propose(Entry.UPDATE, (cfg, store_config(cfg, self.js), now_ns()), done)

    def purge(self, subject: str | None, seq: int, keep: int, done: Any = None) -> None:
        """Purge through the log; ``done(number purged, error)`` after it is applied."""
        self.propose(Entry.PURGE, (subject, seq, keep, now_ns()), done)

    def delete_msg(self, seq: int, erase: bool, done: Any = None) -> None:
        """Remove one message through the log; ``done(removed?, error)`` after it is applied."""
        entry = Entry(Entry.DELETE, (seq, erase, now_ns()), done)
        log = self.log
        if log.__class__ is SingleNodeLog:  # (its propose, inline: one per retention removal, an ack's)
            self._apply_here(log, entry)
            return
        log.propose(entry, self._done_cb)

    def _apply_here(self, log: Any, entry: Entry) -> None:
        """``SingleNodeLog.propose`` inline: ``entry`` applied at once, its completion called."""
        log.index += 1
        try:
            res = log.apply(entry)
        except Exception as e:  # noqa: BLE001 (handed to the completion, as SingleNodeLog.propose does)
            self._done(entry, None, e)
            return
        self._done(entry, res, None)

    def delete_msgs(self, seqs: list[int], done: Any) -> None:
        """Remove several messages (retention removals, ``retention.on_acks``) through one DELETE entry holding
        their list, on one server only (``SingleNodeLog``: the entry is applied here, never encoded or sent);
        ``done(failures, error)`` after it is applied, failures being the (seq, StoreError) of the removals that
        failed. Any other log: one ``delete_msg`` each (a retention removal's completion each)."""
        log = self.log
        if log.__class__ is not SingleNodeLog:
            for seq in seqs:
                self.delete_msg(seq, False, Removed(self, seq))
            return
        self._apply_here(log, Entry(Entry.DELETE, (seqs, False, now_ns()), done))

    def _remove_many(self, seqs: list[int], retention: bool) -> list[tuple[int, BaseException]]:
        """(apply) The removals of ``delete_msgs``, each as a DELETE entry of its own would remove it (write-behind:
        tombstones with the pass's, ``remove_msgs_soon``); a store error fails that one removal only, returned."""
        store = self.store
        if self._wb_store and retention:
            return store.remove_msgs_soon(seqs)
        failed = []
        for seq in seqs:
            try:
                store.remove_msg(seq, False)
            except store_base.StoreError as e:
                failed.append((seq, e))
        return failed

    # ---- expiry -----------------------------------------------------------------------------------

    def _schedule_expiry(self) -> None:
        nxt = self.store.next_expiry()
        if nxt is None:
            return
        delay = max((nxt - now_ns()) / 1e9, 0.0) + 0.001
        if self._expire_timer is not None:
            if self._expire_timer.when() <= self.js.loop.time() + delay:
                return
            self._expire_timer.cancel()
        self._expire_timer = self.js.loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expire_timer = None
        if self.closed:
            return
        self.propose(Entry.EXPIRE, (now_ns(),))  # the timer is armed again once this is applied

    def _on_marker(self, subject: str, hdr: bytes) -> None:
        """A subject delete marker the store asks for while an EXPIRE (or UPDATE) entry is applied: part of
        applying that entry (same markers on every replica, stamped with the entry's time), stored like
        any message so consumers see it."""
        ttl = 0
        v = H.get_header(hdr, H.TTL)
        if v:
            try:
                ttl = parse_ttl(v)
            except ValueError:
                ttl = 0
        seq, ts = self.store.store_msg(subject, hdr, b"", self._apply_ts, ttl)
        self._stored_state(seq, subject, hdr, ts, "")
        self._fx.append((seq, subject, hdr, ts, ttl))

    def _on_store_damage(self, seq: int) -> None:
        """(the store, inside a read) A record failed its checksum: ``_store_damaged`` once the read is over."""
        js = getattr(self, "js", None)
        if self._damage_due or js is None or self.closed:
            return
        self._damage_due = True
        js.loop.call_soon(self._store_damaged)

    def _store_damaged(self, when: str = "while running") -> None:
        if when == "while running":
            self._damage_due = False
        damagereport.store_damaged(self, when)

    def _on_store_remove(self, seq: int, subject: str, size: int) -> None:
        """A message left the store while an entry was applied: the consumers hear of it after apply."""
        if self.consumers:
            self._fx.append(seq)

    # ---- republish --------------------------------------------------------------------------------

    def _republish(self, subject: str, hdr: bytes, data: bytes, seq: int, ts: int) -> None:
        rp = self.cfg.republish
        src = rp.src or ">"
        if not subject_matches_filter(subject, src):
            return
        from rillet.jetstream.transform import transform_subject
        dest = transform_subject(src, rp.dest, subject)
        prev = self._prev_seq_for_subject(subject, seq)
        # (in nats-server's order, added after the message's own headers)
        pairs = [(H.STREAM, self.name), (H.SUBJECT, subject), (H.SEQUENCE, str(seq)),
                 (H.TIMESTAMP, format_time(ts)), (H.LAST_SEQUENCE, str(prev))]
        if rp.headers_only:
            pairs.append(("Nats-Msg-Size", str(len(data))))
            data = b""
        new_hdr = H.append_headers(hdr, pairs)
        self.ic.publish(dest.encode("utf-8", "surrogateescape"), None, new_hdr + data, len(new_hdr))

    def _prev_seq_for_subject(self, subject: str, seq: int) -> int:
        m = self.store.load_prev_msg(seq - 1, subject)
        return m.seq if m is not None else 0

    # ---- info -------------------------------------------------------------------------------------

    def state_dict(self, subjects_filter: str = "", deleted_details: bool = False) -> dict:
        st = self.store.state()
        # a stream that never held a message reports first_seq 0, as nats-server does
        first = 0 if st.last_seq == 0 and st.msgs == 0 and st.first_seq <= 1 else st.first_seq
        d: dict[str, Any] = {
            "messages": st.msgs,
            "bytes": st.bytes,
            "first_seq": first,
            "first_ts": format_time(st.first_ts),
            "last_seq": st.last_seq,
            "last_ts": format_time(st.last_ts),
        }
        if deleted_details and st.num_deleted:
            d["deleted"] = list(st.deleted)
        if st.num_deleted:
            d["num_deleted"] = st.num_deleted
        if st.num_subjects:
            d["num_subjects"] = st.num_subjects
        if subjects_filter:
            subs = self.store.subjects_totals(subjects_filter)
            if subs:
                d["subjects"] = subs
        if st.lost:
            # messages the file store found damaged (never served), and their bytes on disk where it knows them
            lost_bytes = getattr(self.store, "lost_bytes", None)
            d["lost"] = {"msgs": list(st.lost), "bytes": lost_bytes() if lost_bytes is not None else 0}
        d["consumer_count"] = len(self.consumers)
        return d


_OP_NAMES = {Entry.DELETE: "deleting a message", Entry.PURGE: "purging", Entry.UPDATE: "updating the config",
             Entry.BATCH: "storing a batch", Entry.MIRROR: "storing a mirrored message",
             Entry.EXPIRE: "expiring messages"}


# the handler of a stream's subjects: ``reference_on_msg`` (Stream._on_msg as written above, the pure-Python lane's)
# or, in the compiled lane, its twin rillet._speedups._cjs.stream_on_msg (a plain publish -- no headers, nothing in
# flight, a one-member log -- stored and acknowledged in C; everything else handed to the reference)
reference_on_msg = Stream._on_msg
lane.use_compiled_methods(Stream, "rillet._speedups._cjs", _on_msg="stream_on_msg")
