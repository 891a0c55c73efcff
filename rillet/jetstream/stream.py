"""A stream: an internal subscription on its subjects whose messages become log entries, then stored.

    publish ─► _on_msg (checks: sealed, size, expectations, dedup) ─► log.propose(Entry.MSG)
           ─► _apply: store, rollup, dedup record, republish, wake consumers ─► PubAck (after fsync when
              sync_interval is "always": acks of appends that arrive together share one fsync)

Nothing else changes the store: atomic batches (Entry.BATCH), mirrored messages (MIRROR), deletes, purges,
retention removals (DELETE/PURGE), max_age and TTL expiry with their delete markers (EXPIRE) and config
updates (UPDATE) are log entries too, applied by ``_apply``. Entries carry what the leader decided (sequence,
timestamp, msg id) so that a replica applying them ends in the same state.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import msgspec

from rillet.gotime import format_time
from rillet.jetstream import headers as H
from rillet.jetstream import schedules
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import Entry, SingleNodeLog
from rillet.jetstream.store import base as store_base
from rillet.subjects.validate import subject_matches_filter

if TYPE_CHECKING:
    from rillet.jetstream.manager import JSAccount

_json = msgspec.json.encode


def now_ns() -> int:
    return time.time_ns()


def parse_ttl(v: str) -> int:
    """Nats-TTL: a Go duration or a number of seconds; "never" = -1. Returns seconds (-1 never), or raises."""
    v = v.strip()
    if v.lower() == "never":
        return -1
    if v == "0":  # a zero duration: below the one second minimum
        raise ValueError(v)
    if v.isdigit():
        return int(v)
    from rillet.config.values import parse_go_duration
    secs = parse_go_duration(v)
    if secs < 1:
        raise ValueError(v)
    return int(secs)


class Stream:
    def __init__(self, jsa: "JSAccount", cfg: Any, created: str, store: Any) -> None:
        self.jsa = jsa
        self.js = jsa.js
        self.cfg = cfg
        self.name: str = cfg.name
        self.created = created
        self.store = store
        self.consumers: dict[str, Any] = {}
        self.log = SingleNodeLog(self._apply)
        self.ic = jsa.ic
        self._subs: list[Any] = []
        # dedup: msg id -> (seq, ts_ns); kept for duplicate_window
        self._ddmap: dict[str, tuple[int, int]] = {}
        self._ddorder: list[tuple[int, str]] = []
        self._last_msg_id = ""
        self._dd_loaded = False  # the dedup table of a recovered stream is rebuilt when first needed
        self._apply_ts = 0  # the time of the EXPIRE / UPDATE entry being applied (stamps delete markers)
        self._acks: list[tuple[bytes, bytes]] = []
        self._sync_scheduled = False
        self._expire_timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.sources: Any = None  # mirror / sources machinery (rillet.jetstream.sources)
        store.register_remove_callback(self._on_store_remove)
        if hasattr(store, "register_marker_callback"):
            store.register_marker_callback(self._on_marker)

    # ---- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._subscribe()
        self._schedule_expiry()
        schedules.start(self)

    def _subscribe(self) -> None:
        for sub in self._subs:
            self.ic.remove_sub(sub)
        self._subs = []
        cfg = self.cfg
        if cfg.allow_direct or cfg.mirror_direct:
            # direct gets are served per stream: a stream that does not exist (or allow them) has no responder
            names = [self.name]
            if cfg.mirror_direct and cfg.mirror is not None:
                names.append(cfg.mirror.name)
            for prefix in self.jsa.api_prefixes():
                for n in names:
                    self._subs.append(self.ic.subscribe(f"{prefix}.DIRECT.GET.{n}", self._on_direct_get))
                    self._subs.append(self.ic.subscribe(f"{prefix}.DIRECT.GET.{n}.>", self._on_direct_get))
        if cfg.mirror is not None:
            return  # a mirror takes no direct publishes
        for subj in cfg.subjects or []:
            self._subs.append(self.ic.subscribe(subj, self._on_msg))

    def _on_direct_get(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int,
                       msg: bytes) -> None:
        toks = subject.decode("utf-8", "surrogateescape").split(".")
        i = toks.index("GET")
        args = [self.name] + toks[i + 2:]
        hdr_b, body = (msg[:hdr], msg[hdr:]) if hdr >= 0 else (b"", msg)
        self.jsa.router.direct_get(args, reply, hdr_b, body)

    def stop(self, delete: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        for sub in self._subs:
            self.ic.remove_sub(sub)
        self._subs = []
        if self._expire_timer is not None:
            self._expire_timer.cancel()
        schedules.stop(self)
        if self.sources is not None:
            self.sources.stop()
        if getattr(self, "_atomic_batches", None):  # staged atomic batches are dropped with the stream
            from rillet.jetstream import batch
            batch.drop_all(self)
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
        if st is not None and st.dest:
            src = st.src or ">"
            if subject_matches_filter(subj, src):
                from rillet.jetstream.transform import transform_subject
                subj = transform_subject(src, st.dest, subj)
        self.process(subj, reply, hdr_b, data)

    def process(self, subject: str, reply: bytes | None, hdr: bytes, data: bytes, ts: int = 0) -> int:
        """Checks, then propose. Returns the stored sequence (0 when refused or a duplicate)."""
        cfg = self.cfg
        try:
            if cfg.sealed:
                raise ApiError.make("STREAM_SEALED")
            size = len(hdr) + len(data) + len(subject)
            if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
                raise ApiError.make("STREAM_MESSAGE_EXCEEDS_MAXIMUM")
            if self.jsa.limited and self.jsa.over_limit(cfg.storage, size):
                raise ApiError.make("ACCOUNT_RESOURCES_EXCEEDED")
            if hdr and b"Nats-Batch-Id" in hdr:  # atomic batch publish: staged, stored on commit
                from rillet.jetstream import batch
                bid = batch.batch_id(hdr)
                if bid:
                    return batch.process(self, bid, subject, reply, hdr, data)
            ttl = 0
            msg_id = ""
            if hdr:
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
                    if dd is not None:
                        self._ack(reply, {"stream": self.name, "seq": dd, "duplicate": True})
                        return 0
                v = H.get_header(hdr, H.EXPECTED_LAST_MSG_ID)
                if v is not None:
                    if not self._dd_loaded:
                        self._rebuild_dedup()
                    if v != self._last_msg_id:
                        raise ApiError.make("STREAM_WRONG_LAST_MSG_ID", id=self._last_msg_id)
                v = H.get_header(hdr, H.EXPECTED_LAST_SEQ)
                if v is not None:
                    last = self.store.last_seq
                    if not v.isdigit() or int(v) != last:
                        raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=last)
                v = H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ)
                if v:
                    # the subject checked may be another one, or a filter with wildcards
                    check_subj = H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ) or subject
                    if check_subj == subject:
                        last = self.store.last_seq_for_subject(check_subj)
                    else:
                        lm = self.store.load_last_msg(check_subj)
                        last = lm.seq if lm is not None else 0
                    if not v.isdigit() or int(v) != last:
                        raise ApiError.make("STREAM_WRONG_LAST_SEQUENCE", seq=last)
                elif H.get_header(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ):
                    raise ApiError.make("STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID")
                if b"Nats-Schedul" in hdr:
                    hdr = schedules.check(self, subject, hdr)
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
            seq = self.log.propose(Entry(Entry.MSG, (subject, hdr, data, ts or now_ns(), ttl, msg_id,
                                                     self.store.last_seq + 1)))
        except ApiError as e:
            if reply:
                self._reply(reply, _json({"error": e.to_dict(), "stream": self.name, "seq": 0}))
            return 0
        except store_base.StoreError as e:
            if reply:
                err = _store_error(e)
                self._reply(reply, _json({"error": err.to_dict(), "stream": self.name, "seq": 0}))
            return 0
        if not cfg.no_ack:
            ack: dict[str, Any] = {"stream": self.name, "seq": seq}
            if self.js.domain:
                ack["domain"] = self.js.domain
            self._ack(reply, ack)
        return seq

    def _apply(self, entry: Entry) -> Any:
        """The only place a stream's store changes. Everything an entry needs travels in it, so a replica
        applying the same entries ends in the same state."""
        op = entry.op
        if op == Entry.MSG:
            subject, hdr, data, ts, ttl, msg_id, seq = entry.args
            if seq != self.store.last_seq + 1:
                raise store_base.ErrSequenceMismatch()
            seq, ts = self.store.store_msg(subject, hdr, data, ts, ttl)
            self._stored(seq, subject, hdr, data, ts, ttl, msg_id)
            return seq
        if op == Entry.BATCH:
            msgs, seq = entry.args
            if seq != self.store.last_seq + 1:
                raise store_base.ErrSequenceMismatch()
            stored = self.store.store_batch([m[:5] for m in msgs])
            seq = 0
            for (subject, hdr, data, _, ttl, msg_id), (seq, ts) in zip(msgs, stored):
                self._stored(seq, subject, hdr, data, ts, ttl, msg_id)
            return seq
        if op == Entry.MIRROR:
            seq, subject, hdr, data, ts = entry.args
            self.store.store_raw(seq, subject, hdr, data, ts)
            if hdr and b"Nats-Rollup" in hdr:  # a mirror applies the origin's rollups too (as nats-server)
                v = H.get_header(hdr, H.ROLLUP)
                if v == "sub":
                    self.store.purge(subject, seq, 0)
                elif v == "all":
                    self.store.purge(None, seq, 0)
            if self._expire_timer is None and self.cfg.max_age:
                self._schedule_expiry()
            if self.consumers:
                for c in list(self.consumers.values()):
                    c.on_stream_msg(seq, subject)
            self.jsa.after_stream_msg(self, seq, subject)
            return seq
        if op == Entry.DELETE:
            seq, erase = entry.args
            return self.store.remove_msg(seq, erase)
        if op == Entry.PURGE:
            subject, seq, keep = entry.args
            n = self.store.purge(subject, seq, keep)
            for c in list(self.consumers.values()):
                c.on_purge()
            return n
        if op == Entry.EXPIRE:
            self._apply_ts = entry.args[0]
            return self.store.expire_msgs(self._apply_ts)
        if op == Entry.UPDATE:
            cfg, scfg, self._apply_ts = entry.args
            old, self.cfg = self.cfg, cfg
            self.store.update_config(scfg, self._apply_ts)
            return old
        raise ValueError(f"unknown log entry op {op}")

    def _stored(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int, msg_id: str) -> None:
        """What applying a stored message does besides storing it (rollup, dedup, schedules, consumers)."""
        if msg_id:
            self._dedup_record(msg_id, seq, ts)
        self._last_msg_id = msg_id  # a message without an id clears it, as nats-server
        if hdr:
            v = H.get_header(hdr, H.ROLLUP)
            if v == "sub":
                self.store.purge(subject, seq, 0)
            elif v == "all":
                self.store.purge(None, seq, 0)
        if ttl or (self._expire_timer is None and self.cfg.max_age):
            self._schedule_expiry()  # max_age: the timer is armed once and re-arms itself
        if self.cfg.allow_msg_schedules or (hdr and b"Nats-Scheduler" in hdr):
            schedules.on_stored(self, subject, hdr, seq, ts)
        if self.cfg.republish is not None:
            self._republish(subject, hdr, data, seq, ts)
        if self.consumers:
            for c in list(self.consumers.values()):
                c.on_stream_msg(seq, subject)
        self.jsa.after_stream_msg(self, seq, subject)

    def update_config(self, cfg: Any) -> None:
        """A new configuration through the log (limits that shrink remove messages when applied)."""
        from rillet.jetstream.storeopen import store_config
        self.log.propose(Entry(Entry.UPDATE, (cfg, store_config(cfg, self.js), now_ns())))
        self._schedule_expiry()

    # ---- acks and group commit --------------------------------------------------------------------

    def _reply(self, reply: bytes, payload: bytes, hdr: bytes = b"") -> None:
        if hdr:
            self.ic.publish(reply, None, hdr + payload, len(hdr))
        else:
            self.ic.publish(reply, None, payload)

    def _ack(self, reply: bytes | None, ack: dict) -> None:
        if not reply:
            return
        payload = _json(ack)
        # persist_mode "async": acknowledged before the fsync even when the server syncs always
        if self.js.sync_always and self.cfg.persist_mode != "async":
            self._acks.append((reply, payload))
            if not self._sync_scheduled:
                self._sync_scheduled = True
                self.js.loop.create_task(self._group_commit())
        else:
            self._reply(reply, payload)

    async def _group_commit(self) -> None:
        """One fsync for every append since the last one, then their acks."""
        await asyncio.sleep(0)
        self._sync_scheduled = False
        acks, self._acks = self._acks, []
        try:
            await self.js.loop.run_in_executor(None, self.store.sync)
        except Exception as e:
            err = _store_error(e)
            for reply, _ in acks:
                self._reply(reply, _json({"error": err.to_dict(), "stream": self.name, "seq": 0}))
            return
        for reply, payload in acks:
            self._reply(reply, payload)

    # ---- dedup ------------------------------------------------------------------------------------

    def _rebuild_dedup(self) -> None:
        """After a restart: the msg ids of the stored messages inside the duplicate window, and the last
        message's id, read back from their headers (nats-server rebuilds its dedup table the same way).
        Done once, when a publish first needs it (a msg id or an expected last msg id), not at start."""
        self._dd_loaded = True
        store = self.store
        st = store.state()
        window = self.cfg.duplicate_window
        if not st.msgs or window <= 0 or self.cfg.mirror is not None:
            return
        seq = store.get_seq_from_time(now_ns() - window)
        last = st.last_seq
        corrupt = 0
        while seq <= last:
            try:
                m = store.load_next_msg(">", seq, True)
            except store_base.ErrStoreCorrupt:
                try:
                    m = store.load_msg(seq)
                except store_base.ErrStoreCorrupt:
                    m = None
                    corrupt += 1
                if m is None:
                    seq += 1
                    continue
            if m is None:
                break
            msg_id = (H.get_header(m.hdr, H.MSG_ID) or "") if m.hdr else ""
            if msg_id:
                self._dedup_record(msg_id, m.seq, m.ts)
            if m.seq == last:
                self._last_msg_id = msg_id
            seq = m.seq + 1
        self._ddorder.sort()  # ids recorded since the start came first
        if corrupt:
            self.js.log.error(f"Stream '{self.jsa.account.name} > {self.name}': {corrupt} corrupt message(s) "
                              "skipped while rebuilding the duplicate window")

    def _dedup_lookup(self, msg_id: str) -> int | None:
        if not self._dd_loaded:
            self._rebuild_dedup()
        e = self._ddmap.get(msg_id)
        if e is None:
            return None
        seq, ts = e
        if now_ns() - ts > self.cfg.duplicate_window:
            return None
        return seq

    def _dedup_record(self, msg_id: str, seq: int, ts: int) -> None:
        if self.cfg.duplicate_window <= 0:
            return
        self._ddmap[msg_id] = (seq, ts)
        self._ddorder.append((ts, msg_id))
        if len(self._ddorder) > 1024 and len(self._ddorder) % 256 == 0:
            self._dedup_prune()

    def _dedup_prune(self) -> None:
        cutoff = now_ns() - self.cfg.duplicate_window
        order = self._ddorder
        i = 0
        while i < len(order) and order[i][0] < cutoff:
            mid = order[i][1]
            e = self._ddmap.get(mid)
            if e is not None and e[1] == order[i][0]:
                del self._ddmap[mid]
            i += 1
        if i:
            del order[:i]

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
        try:
            self.log.propose(Entry(Entry.EXPIRE, (now_ns(),)))
        except store_base.StoreError as e:
            self.js.log.error(f"Stream '{self.jsa.account.name} > {self.name}': expiring messages failed: {e}")
        self._schedule_expiry()

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
        seq, ts = self.store.store_msg(subject, hdr, b"", self._apply_ts or now_ns(), ttl)
        self._stored(seq, subject, hdr, b"", ts, ttl, "")

    def _on_store_remove(self, seq: int, subject: str, size: int) -> None:
        for c in list(self.consumers.values()):
            c.on_stream_remove(seq)

    # ---- republish --------------------------------------------------------------------------------

    def _republish(self, subject: str, hdr: bytes, data: bytes, seq: int, ts: int) -> None:
        rp = self.cfg.republish
        src = rp.src or ">"
        if not subject_matches_filter(subject, src):
            return
        from rillet.jetstream.transform import transform_subject
        dest = transform_subject(src, rp.dest, subject)
        prev = self._prev_seq_for_subject(subject, seq)
        pairs = [(H.STREAM, self.name), (H.SUBJECT, subject), (H.SEQUENCE, str(seq)),
                 (H.LAST_SEQUENCE, str(prev)), (H.TIMESTAMP, format_time(ts))]
        if rp.headers_only:
            pairs.append(("Nats-Msg-Size", str(len(data))))
            data = b""
        new_hdr = H.set_headers(hdr, pairs)
        self.ic.publish(dest.encode(), None, new_hdr + data, len(new_hdr))

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
            # messages the file store found corrupt at start (never served); it does not keep their sizes
            d["lost"] = {"msgs": list(st.lost), "bytes": 0}
        d["consumer_count"] = len(self.consumers)
        return d


def _store_error(e: Exception) -> ApiError:
    """A store failure as the API error nats-server answers for it."""
    name = type(e).__name__
    text = {
        "ErrMaxMsgs": "maximum messages exceeded",
        "ErrMaxBytes": "maximum bytes exceeded",
        "ErrMaxMsgsPerSubject": "maximum messages per subject exceeded",
    }.get(name)
    if text is not None:
        return ApiError.make("STREAM_STORE_FAILED", err=text)
    return ApiError.make("STREAM_STORE_FAILED", err=str(e) or name)
