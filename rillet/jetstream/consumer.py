"""JetStream consumers: the delivery engine of one consumer on one stream, over its replicated state.

The consumer is split in two (DESIGN.md, "consumers split in two"):

- ``ConsumerStateMachine`` (rillet.jetstream.consumer_state): the replicated state (delivered, ack floor,
  pending, redelivery counts), changed only by applying consumer entries (C_START, C_DELIVERED, C_ACK,
  C_NAK, C_DUE, C_GONE, C_MAXDELIV, C_PURGED, C_DROP, C_UNDELIVERED). A follower runs it alone.
- ``Consumer`` (here, a subclass): the delivery engine only the consumer leader runs: the scan position
  (``sseq``: the next stream sequence to look at), pull request queue, push flow control and interest,
  heartbeats, timers, the redelivery queue (``rdq``), pausing, rate limiting. It proposes every state change
  to its log (``clog``; a ``SingleNodeLog`` on one server, where an entry applies at once) and does what
  follows an entry on the leader in the completion (``_c_done``: persist the state, retention removals
  proposed to the stream after an ack, wake-ups).

A consumer walks its stream from ``sseq`` and hands messages out, numbering each delivery (``dseq``). Push
consumers publish to ``deliver_subject`` while someone listens there; pull consumers answer the requests
queued on ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<name>``. Unacknowledged deliveries sit in ``pending``
(stream seq -> [consumer seq, delivery time ns]) until acked, and are queued again (``rdq``) when
``ack_wait``/``backoff`` runs out or on a NAK. A delivery is recorded (C_DELIVERED) as it goes out, not
held back for the commit, as nats-server does.

Nothing here awaits: the stream (after its entries are applied), acks, pull requests and timers call in
synchronously and the delivery pass (``_run``) is scheduled with ``loop.call_soon``, delivering everything it
can in one go. The persisted state (``get_state`` / ``apply_state``, the store's consumer state file) has the
same format as before the split: existing stores load unchanged.

Acks arrive on ``$JS.ACK.<stream>.<consumer>.<delivery count>.<stream seq>.<consumer seq>.<ts ns>.<pending>``,
the reply subject of every delivered message (nats-server's v1 format, which is also what it sends when a
domain is set; the 11-token v2 form with domain and account hash is accepted too).
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import string
import time
from collections import deque
from typing import TYPE_CHECKING, Any


from rillet import lane
from rillet.gocompat.gotime import format_duration, format_time, to_utc_time
from rillet.gocompat.jsoncodec import GoJSONError, check_one_value
from rillet.jetstream import headers as H
from rillet.jetstream.consumer_state import (C_ACK, C_DELIVERED, C_DROP, C_DUE, C_GONE, C_MAXDELIV, C_NAK,
                                             C_PURGED, C_START, C_UNDELIVERED, ConsumerStateMachine)
from rillet.jetstream.log import Entry, SingleNodeLog
from rillet.jetstream.store.base import ErrStoreClosed, StoreError
from rillet.jetstream.stream import now_ns
from rillet.subjects.validate import subject_has_wildcard, subject_matches_filter
from rillet.durable import fsync_dir, make_dirs_durable

_ack_numbers = lane.ack_numbers  # rillet.jetstream.acksubject's, or their compiled twins
_ack_reply = lane.ack_reply

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream

# header names (nats-server's)
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
CONSUMER_STALLED = "Nats-Consumer-Stalled"
MSG_SIZE = "Nats-Msg-Size"
PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"

FC_MAX_PENDING = 32 * 1024 * 1024  # flow control window limit (bytes), like nats-server
DELETE_WAIT_DEFAULT = 5_000_000_000  # ns: ephemerals' default inactive threshold
INTEREST_POLL = 1.0  # s: an unbound push consumer also looks for (wildcard) interest this often
STATE_FLUSH = 0.05  # s: persisted state is written this long after it changed
RUN_BUDGET = 1024  # deliveries per pass before yielding to the loop

# Pull request deadlines (expiry, request heartbeats) run on this clock, not on the loop's: uvloop's
# loop.time() is cut to whole milliseconds and its timers fire up to a millisecond early or late, while
# clients time a request from its send with a margin of 100 us (nats.py: expires = timeout - 100 us).
# nats-server stamps each request with time.Now() and checks against it, so do we.
_clock = time.monotonic

_NAME_CHARS = string.ascii_letters + string.digits


def new_consumer_name() -> str:
    return "".join(random.choice(_NAME_CHARS) for _ in range(8))


def _cfg(cfg: Any, name: str, default: Any = None) -> Any:
    v = getattr(cfg, name, default)
    return default if v is None else v


def _parse_time_ns(v: Any) -> int:
    """RFC 3339 text (or ns int) to ns since the epoch; 0 when unset."""
    if not v:
        return 0
    if isinstance(v, int):
        return v
    from rillet.gocompat.gotime import time_ns
    try:
        return time_ns(str(v))
    except ValueError:
        return 0


class WaitingRequest:
    """One pull request waiting for messages. Times (``expires``, ``hbt``, ``received``) are ``_clock()``."""

    __slots__ = ("reply", "n", "b", "d", "expires", "no_wait", "hb", "hbt", "received", "reply_b", "pg")

    def __init__(self, reply: str, n: int, b: int, expires: float, no_wait: bool, hb: float, now: float,
                 pg: Any = None) -> None:
        self.reply = reply
        self.reply_b = reply.encode("utf-8", "surrogateescape")
        self.n = n          # messages still wanted
        self.b = b          # max bytes left (0 = no limit)
        self.d = 0          # messages delivered
        self.expires = expires  # loop time, 0 = never
        self.no_wait = no_wait
        self.hb = hb        # heartbeat interval (s), 0 = none
        self.hbt = now + hb if hb else 0.0
        self.received = now
        self.pg = pg        # priority group fields (rillet.jetstream.priority.PG), None for a plain request


class Consumer(ConsumerStateMachine):
    """The delivery engine, run by the consumer leader, over the replicated state it inherits (see
    rillet.jetstream.consumer_state): every change to that state is an entry proposed to ``clog``."""

    def __init__(self, stream: "Stream", cfg: Any, name: str, created: int) -> None:
        self.stream = stream
        self.jsa = stream.jsa
        self.js = stream.js
        self.loop = stream.js.loop
        self.ic = stream.jsa.ic
        self.cfg = cfg
        self.name = name
        self.created = created
        self.closed = False
        # the replicated state (ConsumerStateMachine) and its log; the engine's state below
        self._init_replicated()
        self.clog: Any = SingleNodeLog(self.apply_entry)
        self._c_done_cb = self._c_done
        self.sseq = 1  # the next stream sequence to look at
        self._ndseq = 0  # the next consumer sequence, counting deliveries not yet applied (0: dseq)
        self.rdq: deque[int] = deque()
        self.rdqi: set[int] = set()
        self.lss: list[int] | None = None  # last-per-subject skip list
        self.lss_resume = 0
        self.npc = 0
        self.npc_dirty = True
        # pull
        self.waiting: deque[WaitingRequest] = deque()
        self.wq_last = self.loop.time()
        # push
        self.active = True
        self.pbytes = 0
        self.maxpb = 0
        self.pblimit = 0
        self.fcid = ""
        self.fcsz = 0
        self._last_send = self.loop.time()
        # scheduling
        self._scheduled = False
        self._ack_timer: Any = None
        self._ack_timer_when = 0.0
        self._wr_timer: Any = None
        self._wr_timer_when = 0.0
        self._hb_timer: Any = None
        self._interest_timer: Any = None
        self._delete_timer: Any = None
        self._pause_timer: Any = None
        self._delay_timer: Any = None
        self._flush_timer: Any = None
        self._confirms: list[bytes] = []  # AckSync confirmations waiting for the state's fsync (sync_interval always)
        self._dirty = False
        self._replay_lts = 0
        self._replay_ok_seq = 0
        self._rl_tokens = 0.0
        self._rl_last = 0.0
        self._rl_burst = 0.0
        self._rl_paid = 0
        self._subs: list[Any] = []
        self._watched = ""
        self._map_stalled = False
        self._running = False
        self.load_errors = 0  # messages the store could not read (logged once each, then skipped)
        self._bad_seqs: set[int] = set()
        self._flush_soon = False
        self.persist: Any = None
        # priority groups (rillet.jetstream.priority): the pin is the leader's, as nats-server's
        self.pin_id = ""
        self.pinned_ts = 0
        self._pin_timer: Any = None
        self._apply_cfg()

    # ---- config-derived fields ----------------------------------------------------------------------

    def _apply_cfg(self) -> None:
        cfg = self.cfg
        self.deliver_subject: str = _cfg(cfg, "deliver_subject", "")
        self.deliver_subject_b = self.deliver_subject.encode()
        self.is_push = bool(self.deliver_subject)
        self.ack_policy: str = _cfg(cfg, "ack_policy", "none")
        self.ack_none = self.ack_policy == "none"
        self.ack_wait_ns: int = int(_cfg(cfg, "ack_wait", 0) or 0)
        self.backoff: list[int] = list(_cfg(cfg, "backoff", []) or [])
        md = int(_cfg(cfg, "max_deliver", -1) or -1)
        self.maxdc = md if md > 0 else 0
        self.maxp = int(_cfg(cfg, "max_ack_pending", 0) or 0)
        if self.ack_none or self.maxp < 0:
            self.maxp = 0
        fs = _cfg(cfg, "filter_subject", "")
        fss = list(_cfg(cfg, "filter_subjects", []) or [])
        self.filters: list[str] = [fs] if fs else fss
        self.filters_wc = [subject_has_wildcard(f) for f in self.filters]
        self.replay_original = _cfg(cfg, "replay_policy", "instant") == "original"
        self.rate_bps = int(_cfg(cfg, "rate_limit_bps", 0) or 0)
        if self.rate_bps:
            mms = int(_cfg(self.stream.cfg, "max_msg_size", -1) or -1)
            self._rl_burst = float(mms if mms > 0 else self.js.server.opts.max_payload)
            self._rl_tokens = self._rl_burst
            self._rl_last = self.loop.time()
        self.headers_only = bool(_cfg(cfg, "headers_only", False))
        self.hb_s = int(_cfg(cfg, "idle_heartbeat", 0) or 0) / 1e9
        self.flow_control = bool(_cfg(cfg, "flow_control", False))
        sf = str(_cfg(cfg, "sample_freq", "") or "").rstrip("%")
        self.sfreq = int(sf) if sf.isdigit() else 0
        self.max_waiting = int(_cfg(cfg, "max_waiting", 0) or 0)
        self.max_batch = int(_cfg(cfg, "max_batch", 0) or 0)
        self.max_expires_ns = int(_cfg(cfg, "max_expires", 0) or 0)
        self.max_bytes = int(_cfg(cfg, "max_bytes", 0) or 0)
        self.pause_until_ns = _parse_time_ns(_cfg(cfg, "pause_until", None))
        self.priority_policy: str = _cfg(cfg, "priority_policy", "none") or "none"
        self.durable = bool(_cfg(cfg, "durable_name", ""))
        it = int(_cfg(cfg, "inactive_threshold", 0) or 0)
        self.dthresh_s = it / 1e9 if it > 0 else 0.0
        if self.flow_control and self.is_push:
            self.pblimit = FC_MAX_PENDING
            self.maxpb = max(FC_MAX_PENDING // 16, 1) if self.maxpb == 0 else self.maxpb
        else:
            self.pblimit = self.maxpb = 0
        st = self.stream.name
        from rillet.config.features import enabled
        if enabled(self.js.server.opts, "js_ack_fc_v2"):  # v2 reply subjects: domain and account hash
            pre = f"{self.js.domain or '_'}.{account_hash(self.jsa.account.name)}.{st}.{self.name}."
            self.ack_prefix, self.fc_prefix = "$JS.ACK." + pre, "$JS.FC." + pre
        else:
            self.ack_prefix, self.fc_prefix = f"$JS.ACK.{st}.{self.name}.", f"$JS.FC.{st}.{self.name}."
        self.retention = _cfg(self.stream.cfg, "retention", "limits")

    # ---- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        st = self.stream.name
        if not self.ack_none and self.ack_policy != "flow_control":  # (flow_control: acked by FC replies)
            # v1 acks ($JS.ACK.<stream>.<consumer>.<5 tokens>), and the v2 form with domain and account hash
            self._subs.append(self.ic.subscribe(f"$JS.ACK.{st}.{self.name}.*.*.*.*.*", self._on_ack))
            domain = self.js.domain or "_"
            acc_hash = account_hash(self.jsa.account.name)
            self._subs.append(self.ic.subscribe(f"$JS.ACK.{domain}.{acc_hash}.{st}.{self.name}.*.*.*.*.>",
                                                self._on_ack))
        if self.is_push and self.flow_control:  # flow control replies in both forms, as nats-server
            self._subs.append(self.ic.subscribe(f"$JS.FC.{st}.{self.name}.*", self._on_fc))
            self._subs.append(self.ic.subscribe(
                f"$JS.FC.{self.js.domain or '_'}.{account_hash(self.jsa.account.name)}.{st}.{self.name}.*",
                self._on_fc))
        # pull requests: one subscription per consumer (push ones answer 409), as nats-server: a request for
        # a consumer or stream that does not exist reaches nobody (503 no responders)
        for prefix in self.jsa.api_prefixes():
            self._subs.append(self.ic.subscribe(f"{prefix}.CONSUMER.MSG.NEXT.{st}.{self.name}", self._on_next))
            self._subs.append(self.ic.subscribe(f"{prefix}.CONSUMER.RESET.{st}.{self.name}", self._on_reset))
        if self.is_push:
            self._watch_interest(True)
            self.active = self._has_interest()
            if not self.active:
                self._interest_lost()
            self._arm_hb()
        elif self.dthresh_s > 0:
            self._arm_delete(self.dthresh_s)
        self._arm_pause()
        if self.pending:
            self._arm_ack_timer(0.001)
        self.kick()

    def select_start(self) -> None:
        """Pick the first sequence to deliver from the deliver policy (a new consumer)."""
        store = self.stream.store
        st = store.state()
        cfg = self.cfg
        dp = _cfg(cfg, "deliver_policy", "all")
        opt_seq = int(_cfg(cfg, "opt_start_seq", 0) or 0)
        sseq = 0
        if opt_seq == 0:
            if dp == "all":
                sseq = st.first_seq
            elif dp == "last":
                if not self.filters:
                    sseq = st.last_seq
                else:
                    for f in self.filters:
                        ls = _last_seq(store, f)
                        if ls > sseq:
                            sseq = ls
                    if sseq == 0:
                        sseq = st.last_seq + 1
            elif dp == "last_per_subject":
                seqs = self._multi_last_seqs()
                if not seqs:
                    sseq = st.last_seq + 1
                else:
                    sseq = seqs[0]
                    self.lss = seqs
                    self.lss_resume = st.last_seq
            elif dp == "by_start_time":
                t = _parse_time_ns(_cfg(cfg, "opt_start_time", None))
                sseq = self._seq_from_time(t)
            else:  # new
                sseq = st.last_seq + 1
        else:
            sseq = opt_seq
        if st.first_seq == 0 and opt_seq == 0:
            sseq = 1 if st.last_seq == 0 else st.last_seq + 1
        elif sseq > st.last_seq and opt_seq == 0:
            sseq = st.last_seq + 1
        elif sseq < st.first_seq:
            sseq = st.first_seq
        self.sseq = max(sseq, 1)
        self._propose(C_START, (self.sseq,))
        self.npc_dirty = True

    def _multi_last_seqs(self) -> list[int]:
        return sorted(self.stream.store.multi_last_seqs(self.filters or [">"], 0, 0))

    def _seq_from_time(self, t: int) -> int:
        return self.stream.store.get_seq_from_time(t)  # from the index: no message is read

    def _on_next(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if reply:
            if hdr > 0 and b"Nats-Required-Api-Level" in msg[:hdr]:
                from rillet.jetstream.api.common import _api_level_too_high
                if _api_level_too_high(msg[:hdr]):
                    self._send(reply, None, b"NATS/1.0 412 Required Api Level\r\n\r\n", b"")
                    self._flush_out()
                    return
            self.process_next_request(reply.decode("utf-8", "surrogateescape"), msg[hdr:] if hdr >= 0 else msg)

    def _on_reset(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        from rillet.jetstream import consumer_reset
        consumer_reset.on_request(self, reply, msg[:hdr] if hdr > 0 else b"", msg[hdr:] if hdr >= 0 else msg)

    def stop(self, delete: bool = False, advisory: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        for sub in self._subs:
            self.ic.remove_sub(sub)
        self._subs = []
        self._watch_interest(False)
        if self._pin_timer is not None:
            from rillet.jetstream import priority
            priority.clear(self)
        for t in (self._ack_timer, self._wr_timer, self._hb_timer, self._interest_timer, self._delete_timer,
                  self._pause_timer, self._delay_timer, self._flush_timer):
            if t is not None:
                t.cancel()
        if delete and self.waiting:
            hdr = b"NATS/1.0 409 Consumer Deleted\r\n\r\n"
            for wr in self.waiting:
                self._send(wr.reply_b, None, hdr, b"")
            self._flush_out()
        self.waiting.clear()
        if self.stream.consumers.get(self.name) is self:
            if delete:
                del self.stream.consumers[self.name]
        if delete:
            if self.persist is not None:
                self.persist.delete()
            if advisory:
                self.js.advisories.consumer_action(self.jsa, self.stream, self.name, "delete")
            if self.retention == "interest":
                from rillet.jetstream import retention
                retention.on_consumer_delete(self.stream, self)
        else:
            self.flush_state()

    def delete(self) -> None:
        self.stop(delete=True)

    # ---- stream signals -----------------------------------------------------------------------------

    def on_stream_msg(self, seq: int, subject: str) -> None:
        if self.closed:
            return
        if seq >= self.sseq and self._matches(subject):
            if not self.npc_dirty:
                self.npc += 1
            if self._running or self._scheduled:
                self.kick()
            elif self.active if self.is_push else bool(self.waiting):
                # deliver now: the message goes out ahead of the publisher's PubAck, as from nats-server
                try:
                    self._run(flush=False)
                except Exception as e:  # never fail the store of a message because of a consumer
                    self.js.log.error(f"JetStream consumer '{self.stream.name} > {self.name}' delivery: {e!r}")
                if not self._flush_soon:
                    self._flush_soon = True
                    self.loop.call_soon(self._flush_later)

    def on_stream_remove(self, seq: int) -> None:
        if self.closed:
            return
        if seq >= self.sseq:
            self.npc_dirty = True
        if seq in self.pending:
            self._remove_rdq(seq)
            self._propose(C_GONE, (seq, self.sseq))  # counts as acknowledged (kicks with max_ack_pending)
        elif seq in self.rdc:
            self._propose(C_GONE, (seq, self.sseq))

    def on_purge(self) -> None:
        if self.closed:
            return
        st = self.stream.store.state()
        first = st.first_seq if st.msgs else st.last_seq + 1
        if self.sseq < first:
            self.sseq = first
            if self.lss is not None:
                self.lss = [s for s in self.lss if s >= first] or None
        store = self.stream.store
        # gone from the index (a message the store cannot read is still there: redelivery deals with it)
        gone = [s for s in self.pending if s < first or store.subject_for_seq(s) is None]
        for seq in gone:
            self._remove_rdq(seq)
        self._propose(C_PURGED, (first, gone, self.sseq))
        self.npc_dirty = True
        self.kick()

    # ---- helpers ------------------------------------------------------------------------------------

    def _matches(self, subject: str) -> bool:
        if not self.filters:
            return True
        for f in self.filters:
            if subject_matches_filter(subject, f):
                return True
        return False

    def _has_interest(self) -> bool:
        # (through a stream export: when the importing account listens, see Account.has_interest)
        return self.jsa.account.has_interest(self.deliver_subject) or self._remote_interest(self.deliver_subject)

    def _remote_interest(self, subject: str) -> bool:
        """A remote cluster listens on ``subject`` (over a gateway), as nats-server's hasGatewayInterest."""
        gw = self.js.server.gateway
        return gw is not None and bool(gw.outo) and gw.has_interest(self.jsa.account, subject)

    def num_pending(self) -> int:
        if self.npc_dirty:
            self.npc = self._calc_num_pending()
            self.npc_dirty = False
        return self.npc if self.npc > 0 else 0

    def _calc_num_pending(self) -> int:
        store = self.stream.store
        lps = _cfg(self.cfg, "deliver_policy", "all") == "last_per_subject"
        if self.lss:
            # still walking the initial last-per-subject list: those, then everything after it
            n = len(self.lss)
            after = self._store_num_pending(self.lss_resume + 1, False)
            return n + after
        return self._store_num_pending(self.sseq, lps)

    def _store_num_pending(self, start: int, lps: bool) -> int:
        store = self.stream.store
        st = store.state()
        if start > st.last_seq:
            return 0
        filters = self.filters or [">"]
        total = 0
        for f in filters:
            total += store.num_pending(start, f, lps)[0]
        return total

    def _load_next(self, start: int) -> Any:
        """The next message for this consumer at or after ``start`` (None: none yet). A message the store
        holds but cannot read (a corrupt record, an I/O error) is logged once, counted and skipped: waiting
        for it would stall the consumer for good, and nats-server's store likewise drops what it cannot
        read. "Not found" is not an error: the stores return None for deleted and missing messages."""
        store = self.stream.store
        while True:
            try:
                if not self.filters:
                    m = store.load_msg(start)  # usually the very next sequence: no search
                    if m is not None:
                        return m
                    return store.load_next_msg(">", start, True)
                if len(self.filters) == 1:
                    return store.load_next_msg(self.filters[0], start, self.filters_wc[0])
                return store.load_next_msg_multi(self.filters, start)
            except ErrStoreClosed:
                raise
            except (StoreError, OSError) as e:
                seq = self._failed_seq(e, start)
                self._load_failed(seq, e)
                self.npc_dirty = True
                start = max(seq, start) + 1

    def _read(self, seq: int) -> Any:
        """The message at ``seq`` for delivery: None when deleted or missing, and when the store cannot
        read it (logged once and counted, see ``_load_failed``)."""
        try:
            return self.stream.store.load_msg(seq)
        except ErrStoreClosed:
            raise
        except (StoreError, OSError) as e:
            self._load_failed(seq, e)
            return None

    def _failed_seq(self, err: Exception, start: int) -> int:
        """The sequence a failed load was about: the store says so, or else it is the first sequence at or
        after ``start`` that this consumer would deliver (found in the index, which reads no message)."""
        seq = getattr(err, "seq", 0)
        if seq >= start:
            return seq
        store = self.stream.store
        for s in range(start, store.last_seq + 1):
            subj = store.subject_for_seq(s)
            if subj is not None and self._matches(subj):
                return s
        return start

    def _load_failed(self, seq: int, err: Exception) -> None:
        """Message ``seq`` could not be read for delivery: logged once per sequence with the account,
        stream and consumer, counted in ``load_errors``; the caller skips the message."""
        if seq in self._bad_seqs:
            return
        self._bad_seqs.add(seq)
        self.load_errors += 1
        self.js.log.error(f"JetStream consumer '{self.jsa.account.name} > {self.stream.name} > {self.name}': "
                          f"cannot load message with sequence {seq}: {err}; skipping it")

    def _remove_rdq(self, seq: int) -> None:
        if seq in self.rdqi:
            self.rdqi.discard(seq)
            try:
                self.rdq.remove(seq)
            except ValueError:
                pass

    def _add_rdq(self, seq: int) -> None:
        if seq not in self.rdqi:
            self.rdqi.add(seq)
            self.rdq.append(seq)

    def is_paused(self) -> bool:
        return bool(self.pause_until_ns) and now_ns() < self.pause_until_ns

    # ---- delivery -----------------------------------------------------------------------------------

    def kick(self) -> None:
        if not self._scheduled and not self.closed:
            self._scheduled = True
            self.loop.call_soon(self._run)

    def _next_msg(self) -> tuple[Any, int, int]:
        """(message, delivery count, source) — source 1 = redelivery queue, 2 = skip list, 0 = stream."""
        store = self.stream.store
        while self.rdq:
            seq = self.rdq.popleft()
            self.rdqi.discard(seq)
            if seq not in self.pending:
                continue
            dc = self.rdc.get(seq, 1) + 1
            if self.maxdc and dc > self.maxdc:
                self._max_deliveries_hit(seq, dc - 1)
                continue
            m = self._read(seq)
            if m is None:
                # gone from the stream meanwhile (or unreadable, logged): treat like an ack
                self.on_stream_remove(seq)
                continue
            return m, dc, 1  # the count is recorded by the delivery (C_DELIVERED)
        if self.maxp and len(self.pending) >= self.maxp:
            self._map_stalled = True
            return None, 0, 0
        if self.lss:
            seq = self.lss.pop(0)
            if not self.lss:
                self.lss = None
                self.sseq = self.lss_resume + 1
            else:
                self.sseq = seq + 1
            m = self._read(seq)
            if m is None:
                return self._next_msg()
            if self.lss is None:
                self.npc_dirty = True
            elif not self.npc_dirty:
                self.npc -= 1
            return m, 1, 2
        m = self._load_next(self.sseq)
        if m is None:
            st = store.state()
            if self.sseq <= st.last_seq:
                self.sseq = st.last_seq + 1
            if self.npc and not self.npc_dirty:
                self.npc = 0
            return None, 0, 0
        self.sseq = m.seq + 1
        if not self.npc_dirty:
            self.npc -= 1
        return m, 1, 0

    def _undo(self, m: Any, dc: int, src: int) -> None:
        if src == 1:
            self.rdqi.add(m.seq)
            self.rdq.appendleft(m.seq)
        elif src == 2:
            if self.lss is None:
                self.lss = [m.seq]
            else:
                self.lss.insert(0, m.seq)
            self.sseq = m.seq
            if not self.npc_dirty:
                self.npc += 1
        else:
            self.sseq = m.seq
            if not self.npc_dirty:
                self.npc += 1

    def _max_deliveries_hit(self, seq: int, dc: int) -> None:
        self.js.advisories.max_deliveries(self.jsa, self.stream.name, self.name, seq, dc)
        self._propose(C_MAXDELIV, (seq, dc, self.sseq))

    def _flush_later(self) -> None:
        self._flush_soon = False
        self._flush_out()

    def _run(self, flush: bool = True) -> None:
        self._scheduled = False
        if self.closed or self._running:
            return
        self._running = True
        sent = 0
        loop = self.loop
        self._map_stalled = False
        self.stream.store.read_begin()
        try:
            while sent < RUN_BUDGET:
                if self.pause_until_ns and self.is_paused():
                    break
                if self.is_push:
                    if not self.active:
                        break
                    if self.maxpb and self.pbytes > self.maxpb:
                        break
                elif not self.waiting:
                    break
                m, dc, src = self._next_msg()
                if m is None:
                    break
                # replay original timing: wait the gap between stored timestamps
                if self.replay_original and self._replay_lts and self._replay_ok_seq != m.seq:
                    delay = (m.ts - self._replay_lts) / 1e9
                    if delay > 0.001:
                        self._undo(m, dc, src)
                        self._replay_ok_seq = m.seq
                        self._delay(delay)
                        break
                pending = self.num_pending()
                nd = self.dseq if self.dseq >= self._ndseq else self._ndseq  # deliveries in flight count
                ack_reply = _ack_reply(self.ack_prefix, dc, m.seq, nd, m.ts, pending)
                hdr, data = m.hdr, m.data
                if self.headers_only:
                    hdr = _headers_only(hdr, len(data))
                    data = b""
                sz = len(m.subject) + len(ack_reply) + len(hdr) + len(data)
                if self.rate_bps and self._rl_paid != m.seq:
                    # token bucket in bytes: bps/8 a second, a burst of the largest message
                    now = loop.time()
                    rate = self.rate_bps / 8
                    self._rl_tokens = min(self._rl_burst, self._rl_tokens + (now - self._rl_last) * rate)
                    self._rl_last = now
                    self._rl_tokens -= sz
                    if self._rl_tokens < 0:
                        wait = -self._rl_tokens / rate
                        if wait > 0.001:
                            self._rl_paid = m.seq
                            self._undo(m, dc, src)
                            self._delay(wait)
                            break
                self._rl_paid = 0
                wrn = wrb = 0
                if self.is_push:
                    dsubj = self.deliver_subject_b
                    dsubj_s = self.deliver_subject
                else:
                    wr = self._next_waiting(sz)
                    if wr is None:
                        self._undo(m, dc, src)
                        break
                    dsubj = wr.reply_b
                    dsubj_s = wr.reply
                    wrn, wrb = wr.n, wr.b
                    if self.pin_id:  # pinned_client: every message tells the pin id
                        hdr = H.set_headers(hdr, [("Nats-Pin-Id", self.pin_id)])
                        sz = len(m.subject) + len(ack_reply) + len(hdr) + len(data)
                    if wr.n > 0 and wr.hb:
                        wr.hbt = _clock() + wr.hb
                self._replay_lts = m.ts
                ok = self._deliver(dsubj, ack_reply, m, hdr, data, dc, sz, dsubj_s, nd)
                sent += 1
                if not ok:
                    self._did_not_deliver(m.seq, dsubj, dc)
                    if self.is_push:
                        break
                    continue
                if not self.is_push and wrn <= 0 and wrb > 0:
                    h = H.make_headers([(PENDING_MSGS, str(wrn)), (PENDING_BYTES, str(wrb))], 409,
                                       "Batch Completed")
                    self._send(dsubj, None, h, b"")
            else:
                self.kick()  # budget used up: continue on the next loop iteration
        finally:
            self._running = False
            self.stream.store.read_done()
            if sent:
                self._last_send = loop.time()
                if not self.is_push and self.dthresh_s:
                    self.wq_last = self._last_send
            if not self.is_push and self.waiting and not self.closed:
                # one-shot (no_wait) requests end here, unless we only stopped at max_ack_pending
                self._process_waiting(eos=not self._map_stalled, flush=flush)
            if flush:
                self._flush_out()

    def _deliver(self, dsubj: bytes, ack_reply: str, m: Any, hdr: bytes, data: bytes, dc: int, sz: int,
                 dsubj_s: str, dseq: int) -> bool:
        seq = m.seq
        # the delivery is recorded as it goes out (as nats-server, it is not held back for the commit);
        # the engine numbers the next one after it even before it is applied
        self._ndseq = dseq + 1
        self.clog.propose(Entry(C_DELIVERED, (seq, dseq, dc, now_ns())))
        if not self.ack_none and (self._ack_timer is None or self.backoff):
            self._arm_ack_timer(self._ack_delay(seq))
        if self.persist is not None:
            self._mark_dirty()
        if self.maxpb:
            self.pbytes += sz
        ok = self._send(dsubj, ack_reply.encode(), hdr, data, m.subject, dsubj_s)
        if self.maxpb and ok and self._need_fc(sz):
            self._send_fc()
        if self.ack_none and self.retention != "limits":
            from rillet.jetstream import retention
            retention.on_ack(self.stream, self, seq)
        return ok

    def _send(self, subject: bytes, reply: bytes | None, hdr: bytes, data: bytes, orig: str | None = None,
              subject_s: str | None = None) -> bool:
        """Publish into the account (no flush); True if someone received it.

        Deliveries keep the stored message's subject: the deliver/inbox subject only routes it."""
        ic = self.ic
        acc = self.jsa.account
        if hdr:
            msg = hdr + data
            hl = len(hdr)
        else:
            msg = data
            hl = -1
        ic.out_msgs = getattr(ic, "out_msgs", 0) + 1
        r = acc.match(subject_s if subject_s is not None else subject.decode("utf-8", "surrogateescape"))
        if not (r.psubs or r.qsubs):
            gw = self.js.server.gateway
            if gw is None or not gw.outo:
                return False  # (with gateways, the account's deliver_result sends it to the interested ones)
        if orig is None:
            return acc.deliver_result(ic, r, subject, reply, hl, msg)
        # shown with the stream subject; imports route it on by the subject it matched
        return acc.deliver_result(ic, r, orig.encode("utf-8", "surrogateescape"), reply, hl, msg, subject)

    def _flush_out(self) -> None:
        self.js.server.flush_clients()

    def _did_not_deliver(self, seq: int, dsubj: bytes, dc: int) -> None:
        # nobody got it: not a delivery
        if dc > 1:
            self._propose(C_UNDELIVERED, (seq, dc - 1))
        if self.is_push:
            self._interest_lost()
        else:
            reply = dsubj.decode("utf-8", "surrogateescape")
            self.waiting = deque(wr for wr in self.waiting if wr.reply != reply)
        if seq in self.pending:
            self._add_rdq(seq)
            if not self.is_push and self.waiting:
                self.kick()

    # ---- push: interest, flow control, heartbeats ---------------------------------------------------

    def _watch_interest(self, on: bool) -> None:
        """(Un)register for subscriptions coming and going on the deliver subject."""
        watchers = getattr(self.jsa.account, "interest_watchers", None)
        if watchers is None:
            return
        subj = getattr(self, "_watched", "")
        if subj:
            cbs = watchers.get(subj)
            if cbs is not None:
                try:
                    cbs.remove(self._on_interest_change)
                except ValueError:
                    pass
                if not cbs:
                    del watchers[subj]
            self._watched = ""
        if on and self.is_push and not self.closed:
            watchers.setdefault(self.deliver_subject, []).append(self._on_interest_change)
            self._watched = self.deliver_subject

    def _on_interest_change(self) -> None:
        if self.closed:
            return
        if self._has_interest():
            if not self.active:
                self.active = True
                if self._delete_timer is not None:
                    self._delete_timer.cancel()
                    self._delete_timer = None
                self.kick()
        elif self.active:
            self._interest_lost()

    def _interest_lost(self) -> None:
        self.active = False
        if self._interest_timer is None and not self.closed:
            self._interest_timer = self.loop.call_later(INTEREST_POLL, self._check_interest)
        if self.dthresh_s and self._delete_timer is None:
            self._arm_delete(self.dthresh_s)

    def _check_interest(self) -> None:
        self._interest_timer = None
        if self.closed or not self.is_push:
            return
        if self._has_interest():
            self.active = True
            if self._delete_timer is not None:
                self._delete_timer.cancel()
                self._delete_timer = None
            self.kick()
        else:
            self._interest_timer = self.loop.call_later(INTEREST_POLL, self._check_interest)

    def _need_fc(self, sz: int) -> bool:
        if not self.fcid and self.pbytes > self.maxpb // 2:
            return True
        if not self.fcid and self.ack_policy == "flow_control" and self.maxp and len(self.pending) >= self.maxp:
            return True  # acks come with flow control replies: ask for one at max_ack_pending
        if self.fcid and self.pbytes - self.fcsz >= self.maxpb:
            self.fcsz += sz
        return False

    def _send_fc(self) -> None:
        rn = random.getrandbits(60)
        tok = "".join(_NAME_CHARS[(rn >> (6 * i)) % 62] for i in range(4))
        self.fcid = f"{self.fc_prefix}{tok}"
        self.fcsz = self.pbytes
        self._send(self.deliver_subject_b, self.fcid.encode(), b"NATS/1.0 100 FlowControl Request\r\n\r\n", b"")

    def _on_fc(self, sub: Any, client: Any, subject: bytes, reply: Any, hdr: int, msg: bytes) -> None:
        if self.closed or subject.decode("utf-8", "surrogateescape") != self.fcid:
            return
        if self.maxpb < self.pblimit:
            self.maxpb = min(self.maxpb * 2, self.pblimit)
        self.pbytes -= self.fcsz
        if self.pbytes < 0:
            self.pbytes = 0
        self.fcid, self.fcsz = "", 0
        if self.ack_policy == "flow_control" and hdr > 0:
            # ack policy flow_control (ADR-60): the reply names the last consumer and stream sequences the
            # receiver (a sourcing stream) has, which acknowledges everything up to them, as an ack-all
            lsseq = H.get_header(msg[:hdr], LAST_STREAM)
            ldseq = H.get_header(msg[:hdr], LAST_CONSUMER)
            if lsseq and lsseq.isdigit() and int(lsseq) > 0:
                self.process_ack(int(lsseq), int(ldseq) if ldseq and ldseq.isdigit() else 0, 1, False)
        self.kick()

    def _arm_hb(self) -> None:
        if self.hb_s and self.is_push and not self.closed:
            self._hb_timer = self.loop.call_later(self.hb_s, self._on_hb)

    def _on_hb(self) -> None:
        self._hb_timer = None
        if self.closed:
            return
        idle = self.loop.time() - self._last_send
        if idle < self.hb_s - 0.001:
            self._hb_timer = self.loop.call_later(self.hb_s - idle, self._on_hb)
            return
        if self.active or self._has_interest():
            self._send_heartbeat(self.deliver_subject_b)
            if self.ack_policy == "flow_control" and self.pending and not self.fcid:
                self._send_fc()  # what is pending gets acknowledged by the reply (as nats-server)
            self._flush_out()
        self._last_send = self.loop.time()
        self._hb_timer = self.loop.call_later(self.hb_s, self._on_hb)

    def _send_heartbeat(self, subject: bytes) -> None:
        pairs = [(LAST_CONSUMER, str(self.dseq - 1)), (LAST_STREAM, str(self.sseq - 1))]
        if self.fcid:
            pairs.append((CONSUMER_STALLED, self.fcid))
        self._send(subject, None, H.make_headers(pairs, 100, "Idle Heartbeat"), b"")

    # ---- pull requests ------------------------------------------------------------------------------

    def process_next_request(self, reply: str, body: bytes) -> None:
        if self.closed or not reply:
            return
        reply_b = reply.encode("utf-8", "surrogateescape")

        def err(code: int, desc: str) -> None:
            self._send(reply_b, None, H.make_headers([], code, desc), b"")
            self._flush_out()

        if self.is_push:
            err(409, "Consumer is push based")
            return
        req = body.strip()
        batch, expires_ns, max_bytes, no_wait, hb_ns = 1, 0, 0, False, 0
        pg = None
        if req[:1] == b"{":
            try:
                d = _next_request(req)
            except ValueError as e:
                err(400, f"Bad Request - {e}")
                return
            batch = d.get("batch", 0)
            expires_ns = d.get("expires", 0)
            max_bytes = d.get("max_bytes", 0)
            no_wait = d.get("no_wait", False)
            hb_ns = d.get("idle_heartbeat", 0)
            if self.priority_policy != "none" or _PG_FIELDS.intersection(d):
                from rillet.jetstream.priority import PG
                pg = PG(d)
            if hb_ns > 0 and hb_ns * 2 > expires_ns:
                err(400, "Bad Request - heartbeat value too large")
                return
        elif req:
            try:
                batch = int(req)
            except ValueError:
                batch = 1
        if self.max_batch > 0 and batch > self.max_batch:
            err(409, f"Exceeded MaxRequestBatch of {self.max_batch}")
            return
        if expires_ns and self.max_expires_ns > 0 and expires_ns > self.max_expires_ns:
            err(409, f"Exceeded MaxRequestExpires of {format_duration(self.max_expires_ns)}")
            return
        if max_bytes > 0 and self.max_bytes > 0 and max_bytes > self.max_bytes:
            err(409, f"Exceeded MaxRequestMaxBytes of {self.max_bytes}")
            return
        if pg is not None:
            from rillet.jetstream import priority
            bad = priority.check_request(self, pg)
            if bad is not None:
                err(*bad)
                return
        now = _clock()
        self.wq_last = self.loop.time()
        if self.max_waiting and len(self.waiting) >= self.max_waiting:
            self._process_waiting(eos=False)
        if no_wait:
            pending = self.num_pending() + len(self.rdq)
            if pending == 0 and not expires_ns:
                err(404, "No Messages")
                return
            if pending > 0:
                brp = sum(wr.n for wr in self.waiting)
                if pending < brp:
                    err(408, "Requests Pending")
                    return
        if self.max_waiting and len(self.waiting) >= self.max_waiting:
            if not hb_ns:
                err(409, "Exceeded MaxWaiting")
            return
        wr = WaitingRequest(reply, batch, max_bytes, now + expires_ns / 1e9 if expires_ns else 0.0, no_wait,
                            hb_ns / 1e9, now, pg)
        if self.priority_policy == "prioritized":
            from rillet.jetstream import priority
            priority.insert_prioritized(self.waiting, wr)
        else:
            self.waiting.append(wr)
        if self.dthresh_s and self._delete_timer is None:
            self._arm_delete(self.dthresh_s)
        self._arm_wr_timer()
        self.kick()

    def _next_waiting(self, sz: int) -> WaitingRequest | None:
        now = _clock()
        sl = self.jsa.account.sublist
        wq = self.waiting
        pol = self.priority_policy
        cycled = 0
        while wq:
            wr = wq[0]
            if wr.expires and now >= wr.expires:
                self._send(wr.reply_b, None, H.make_headers(
                    [(PENDING_MSGS, str(wr.n)), (PENDING_BYTES, str(wr.b))], 408, "Request Timeout"), b"")
                wq.popleft()
                continue
            assigned_pin = False
            if pol != "none":
                from rillet.jetstream import priority
                if pol == "pinned_client":
                    wid = wr.pg.id if wr.pg is not None else ""
                    if not self.pin_id and not wid:
                        assigned_pin = priority.assign_pin(self, wr)
                    elif wid != self.pin_id and wid:  # an old pin (or another one): told so, dropped
                        self._send(wr.reply_b, None, H.make_headers(
                            [(PENDING_MSGS, str(wr.n)), (PENDING_BYTES, str(wr.b))], 423, "Nats-Wrong-Pin-Id"), b"")
                        wq.popleft()
                        continue
                    elif self.pin_id and not wid:  # not the pinned client: waits
                        wq.rotate(-1)
                        cycled += 1
                        if cycled >= len(wq):
                            return None
                        continue
                elif pol == "overflow" and not priority.overflow_passes(self, wr.pg):
                    wq.rotate(-1)
                    cycled += 1
                    if cycled >= len(wq):
                        return None
                    continue
            if wr.b > 0:
                if sz <= wr.b:
                    wr.b -= sz
                    if wr.b == 0:
                        wr.n = 1
                else:
                    self._send(wr.reply_b, None, H.make_headers(
                        [(PENDING_MSGS, str(wr.n)), (PENDING_BYTES, str(wr.b))], 409,
                        "Message Size Exceeds MaxBytes"), b"")
                    if assigned_pin:
                        self.pin_id, self.pinned_ts = "", 0
                    wq.popleft()
                    continue
            if not sl.has_interest(wr.reply) and not self._remote_interest(wr.reply):
                wq.popleft()
                continue
            wr.d += 1
            wr.n -= 1
            if wr.n <= 0:
                wq.popleft()
            elif len(wq) > 1:
                wq.popleft()
                if pol == "prioritized":  # back at the end of its own priority
                    from rillet.jetstream import priority
                    priority.insert_prioritized(wq, wr)
                else:
                    wq.append(wr)
            return wr
        return None

    def _process_waiting(self, eos: bool, flush: bool = True) -> float:
        """Expire requests, drop those nobody listens for, send request heartbeats. Returns the next deadline."""
        if not self.waiting:
            return 0.0
        now = _clock()
        sl = self.jsa.account.sublist
        keep: deque[WaitingRequest] = deque()
        fexp = 0.0
        sent = False
        for wr in self.waiting:
            expired = bool(wr.expires) and now >= wr.expires
            if (eos and wr.no_wait) or expired:
                if expired:
                    self._send(wr.reply_b, None, H.make_headers(
                        [(PENDING_MSGS, str(wr.n)), (PENDING_BYTES, str(wr.b))], 408, "Request Timeout"), b"")
                    sent = True
                    continue
                if not wr.expires or wr.d > 0:
                    self._send(wr.reply_b, None, b"NATS/1.0 404 No Messages\r\n\r\n", b"")
                    sent = True
                    continue
            if not sl.has_interest(wr.reply) and not self._remote_interest(wr.reply):
                continue
            if wr.hbt:
                if now >= wr.hbt:
                    self._send_heartbeat(wr.reply_b)
                    sent = True
                    wr.hbt = now + wr.hb
                if not fexp or wr.hbt < fexp:
                    fexp = wr.hbt
            if wr.expires and (not fexp or wr.expires < fexp):
                fexp = wr.expires
            keep.append(wr)
        self.waiting = keep
        if sent and flush:
            self._flush_out()
        self._arm_wr_timer(fexp)
        return fexp

    def _arm_wr_timer(self, when: float = -1.0) -> None:
        if when < 0:
            when = 0.0
            for wr in self.waiting:
                for t in (wr.expires, wr.hbt):
                    if t and (not when or t < when):
                        when = t
        if not when:
            return
        if self._wr_timer is not None:
            if self._wr_timer_when <= when:
                return
            self._wr_timer.cancel()
        self._wr_timer_when = when
        self._wr_timer = self.loop.call_later(max(when - _clock(), 0.0), self._on_wr_timer)

    def _on_wr_timer(self) -> None:
        # a timer that fires early (uvloop rounds to milliseconds) finds nothing due: _process_waiting then
        # arms it again for what is left, so a 408 or a heartbeat never goes out before its time
        self._wr_timer = None
        if self.closed:
            return
        self._process_waiting(eos=True)

    # ---- acks ---------------------------------------------------------------------------------------

    def _on_ack(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if self.closed:
            return
        body = msg[hdr:] if hdr > 0 else msg
        nums = _ack_numbers(subject)
        if nums is None:
            return
        dc, sseq, dseq = nums
        skip_reply = False
        if not body or body == b"+ACK" or body == b"+OK":
            if not self.process_ack(sseq, dseq, dc, True):
                skip_reply = True
        elif body.startswith(b"+NXT"):
            self.process_ack(sseq, dseq, dc, True)
            if reply:
                rest = body[4:].strip()
                self.process_next_request(reply.decode("utf-8", "surrogateescape"), rest)
            skip_reply = True
        elif body.startswith(b"-NAK"):
            self.process_nak(sseq, dseq, dc, body[4:])
        elif body == b"+WPI":
            self.progress(sseq)
        elif body.startswith(b"+TERM"):
            reason = body[5:].strip().decode("utf-8", "replace")
            if not self.process_term(sseq, dseq, dc, reason):
                skip_reply = True
        if reply and not skip_reply:
            if self.persist is not None and self.js.sync_always:
                self._confirm_durably(reply)  # (an AckSync's answer says the ack is on disk)
            else:
                self.ic.publish(reply, None, b"")

    def _confirm_durably(self, reply: bytes) -> None:
        """With ``sync_interval: always`` the confirmation of an ack (AckSync) goes out once the consumer's
        state holding it is fsynced: the acks confirmed in one pass of the loop share one write and fsync."""
        self._confirms.append(reply)
        if len(self._confirms) == 1:
            self.loop.create_task(self._write_confirmed())

    async def _write_confirmed(self) -> None:
        await asyncio.sleep(0)  # (the other acks read in this pass join)
        replies, self._confirms = self._confirms, []
        if self.closed or self.persist is None:
            return
        self._dirty = False
        cs = self.persist._cs()
        cs.update(self.get_state())
        try:
            await self.loop.run_in_executor(None, cs.flush, True)
        except Exception as e:  # not durable: no confirmation (the client's AckSync times out; the ack may stay)
            self._dirty = True
            self.js.log.error(f"JetStream consumer '{self.stream.name} > {self.name}' state write failed: {e}")
            return
        for reply in replies:
            self.ic.publish(reply, None, b"")
        self.js.server.schedule_flush()

    def process_ack(self, sseq: int, dseq: int, dc: int, sample: bool) -> bool:
        if sseq >= self.sseq and not self.flow_control:
            return False
        pol = self.ack_policy
        need_kick = False
        if pol == "explicit":
            p = self.pending.get(sseq)
            if p is not None:
                if sample and self.sfreq:
                    self._sample(sseq, p[0], dc, p[1])
                if self.maxp and len(self.pending) >= self.maxp:
                    need_kick = True
            self._remove_rdq(sseq)
        elif pol == "all" or pol == "flow_control":
            if dseq <= self.adflr or sseq <= self.asflr:
                return True
            if self.maxp and len(self.pending) >= self.maxp:
                need_kick = True
            if self.rdqi:
                for seq in [s for s in self.rdqi if s <= sseq]:
                    self._remove_rdq(seq)
        else:
            return self.retention != "limits"
        # retention removals and the kick follow once the ack is applied (_c_done); without either, only
        # the persisted state is due (marked now, written from the applied state)
        if need_kick or self.retention != "limits":
            self.clog.propose(Entry(C_ACK, (sseq, dseq, now_ns(), self.sseq), need_kick), self._c_done_cb)
        else:
            self.clog.propose(Entry(C_ACK, (sseq, dseq, now_ns(), self.sseq)))
            self._mark_dirty()
        if self.dthresh_s and not self.is_push and self._delete_timer is None:
            self._arm_delete(self.dthresh_s)
        return True

    def _propose(self, op: int, args: tuple) -> None:
        self.clog.propose(Entry(op, args), self._c_done_cb)

    def _c_done(self, entry: Entry, res: Any, err: BaseException | None) -> None:
        """The leader's side of an applied consumer entry: persist, retention removals, wake-ups."""
        if err is not None:
            self.js.log.error(f"JetStream consumer '{self.stream.name} > {self.name}': applying {entry!r} "
                              f"failed: {err!r}")
            return
        self._mark_dirty()
        op = entry.op
        if op == C_ACK:
            if res and self.retention != "limits":
                from rillet.jetstream import retention
                for seq in ((res,) if res.__class__ is int else res):
                    retention.on_ack(self.stream, self, seq)
            if entry.ctx:
                self.kick()
        elif op == C_GONE:
            if res and self.maxp:
                self.kick()

    def process_nak(self, sseq: int, dseq: int, dc: int, arg: bytes) -> None:
        if dseq <= self.adflr or dseq > max(self.dseq, self._ndseq):
            return
        p = self.pending.get(sseq)
        if p is None:
            return
        self._nak_advisory(sseq, dseq, dc)
        arg = arg.strip()
        if arg:
            delay_ns = None
            try:
                if arg[:1] == b"{":
                    d = json.loads(arg)
                    delay_ns = int(d.get("delay") or 0)
                else:
                    from rillet.gocompat.gotime import parse_go_duration
                    delay_ns = int(parse_go_duration(arg.decode()) * 1e9)
            except Exception:
                delay_ns = None
            if delay_ns is not None:
                self._remove_rdq(sseq)
                # "ack wait ago" is due now, so offset from there
                self._propose(C_NAK, (sseq, now_ns() - self._ack_wait_for(sseq) + delay_ns))
                self._arm_ack_timer(0.01, force=True)
                return
        self._add_rdq(sseq)
        self.kick()

    def _nak_advisory(self, sseq: int, dseq: int, dc: int) -> None:
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.{self.stream.name}.{self.name}"
        if not self.jsa.account.sublist.has_interest(subject):
            return
        import base64
        d: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.nak",
                             "id": base64.b32encode(os.urandom(15)).decode()[:22], "timestamp": format_time(now_ns()),
                             "stream": self.stream.name, "consumer": self.name, "consumer_seq": dseq,
                             "stream_seq": sseq, "deliveries": dc}
        if self.js.domain:
            d["domain"] = self.js.domain
        self.ic.publish(subject.encode(), None, json.dumps(d, separators=(",", ":")).encode())

    def progress(self, sseq: int) -> None:
        if sseq in self.pending:
            self._propose(C_NAK, (sseq, now_ns()))

    def process_term(self, sseq: int, dseq: int, dc: int, reason: str) -> bool:
        ok = self.process_ack(sseq, dseq, dc, False)
        self.js.advisories.terminated(self.jsa, self.stream.name, self.name, dseq, sseq, dc, reason)
        return ok

    def _sample(self, sseq: int, dseq: int, dc: int, ts: int) -> None:
        if self.sfreq < 100 and random.randint(0, 99) > self.sfreq:
            return
        self.js.advisories.ack_sample(self.jsa, self.stream.name, self.name, dseq, sseq, now_ns() - ts, dc)

    # ---- redelivery timer ---------------------------------------------------------------------------

    def _ack_wait_for(self, seq: int) -> int:
        if self.backoff:
            i = self.rdc.get(seq, 1) - 1
            i = min(max(i, 0), len(self.backoff) - 1)
            return int(self.backoff[i])
        return self.ack_wait_ns

    def _ack_delay(self, seq: int) -> float:
        return self._ack_wait_for(seq) / 1e9 + 0.001

    def _arm_ack_timer(self, delay: float, force: bool = False) -> None:
        if self.ack_none or self.ack_wait_ns <= 0 and not self.backoff:
            return
        when = self.loop.time() + delay
        if self._ack_timer is not None:
            if self._ack_timer_when <= when and not force:
                return
            self._ack_timer.cancel()
        self._ack_timer_when = when
        self._ack_timer = self.loop.call_at(when, self._check_pending)

    def _check_pending(self) -> None:
        self._ack_timer = None
        if self.closed or not self.pending:
            return
        st = self.stream.store.state()
        fseq = st.first_seq
        now = now_ns()
        nxt = None
        expired: list[int] = []
        stale = [seq for seq in self.pending if seq < fseq or seq <= self.asflr]
        if stale:
            for seq in stale:
                self._remove_rdq(seq)
            self._propose(C_DROP, (stale, self.sseq))  # the floors move up when nothing is left pending
        for seq, p in self.pending.items():
            deadline = self._ack_wait_for(seq)
            elapsed = now - p[1]
            if elapsed >= deadline:
                # at max_deliver it stays pending until the next delivery attempt drops it (as nats-server)
                if seq not in self.rdqi:
                    expired.append(seq)
            else:
                left = deadline - elapsed
                if nxt is None or left < nxt:
                    nxt = left
        if expired:
            expired.sort()
            off = now - self.pending[expired[0]][1]
            self._propose(C_DUE, (expired, off))
            for seq in expired:
                self._add_rdq(seq)
            self.kick()
        if self.pending:
            if nxt is None:
                nxt = self._ack_wait_for(min(self.pending))
            self._arm_ack_timer(nxt / 1e9 + 0.001, force=True)
        else:
            self.rdq.clear()
            self.rdqi.clear()
        self._mark_dirty()

    # ---- inactivity, pause, delays ------------------------------------------------------------------

    def _arm_delete(self, delay: float) -> None:
        if self.closed or not self.dthresh_s:
            return
        if self._delete_timer is not None:
            self._delete_timer.cancel()
        self._delete_timer = self.loop.call_later(delay, self._delete_not_active)

    def _delete_not_active(self) -> None:
        self._delete_timer = None
        if self.closed:
            return
        if self.is_push:
            if self.active or self._has_interest():
                return
        else:
            elapsed = self.loop.time() - self.wq_last
            if elapsed < self.dthresh_s:
                self._arm_delete(self.dthresh_s - elapsed)
                return
            self._process_waiting(eos=False)
            if self.waiting:
                self._arm_delete(self.dthresh_s)
                return
            # pending acks may still come: wait for the latest expected ack, then the threshold
            now = now_ns()
            delay = 0
            for seq, p in self.pending.items():
                t = p[1] + self._ack_wait_for(seq) + int(self.dthresh_s * 1e9)
                if t > now:
                    delay = max(delay, t - now)
            if delay > 0:
                self._arm_delete(delay / 1e9)
                return
        self.stream.jsa.js.log.debug(f"JetStream consumer '{self.jsa.account.name} > {self.stream.name} > "
                                     f"{self.name}' deleted for inactivity") if hasattr(self.js.log, "debug") \
            else None
        self.stop(delete=True)

    def _arm_pause(self) -> None:
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        if self.pause_until_ns:
            left = (self.pause_until_ns - now_ns()) / 1e9
            if left > 0:
                self._pause_timer = self.loop.call_later(left + 0.001, self._on_unpause)

    def _on_unpause(self) -> None:
        self._pause_timer = None
        if not self.closed:
            self.pause_advisory()
            self.kick()

    def pause_advisory(self) -> None:
        """``$JS.EVENT.ADVISORY.CONSUMER.PAUSE.<stream>.<consumer>`` (paused or resumed)."""
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.{self.stream.name}.{self.name}"
        if not self.jsa.account.sublist.has_interest(subject):
            return
        import base64
        d: dict[str, Any] = {"type": "io.nats.jetstream.advisory.v1.consumer_pause",
                             "id": base64.b32encode(os.urandom(15)).decode()[:22], "timestamp": format_time(now_ns()),
                             "stream": self.stream.name, "consumer": self.name, "paused": self.is_paused(),
                             "pause_until": format_time(self.pause_until_ns)}
        if self.js.domain:
            d["domain"] = self.js.domain
        self.ic.publish(subject.encode(), None, json.dumps(d, separators=(",", ":")).encode())

    def _delay(self, delay: float) -> None:
        if self._delay_timer is not None:
            self._delay_timer.cancel()
        self._delay_timer = self.loop.call_later(delay, self._on_delay)

    def _on_delay(self) -> None:
        self._delay_timer = None
        self.kick()

    # ---- updates ------------------------------------------------------------------------------------

    def update_config(self, cfg: Any) -> None:
        old_deliver = self.deliver_subject
        old_maxpb = self.maxpb
        old_filters = self.filters
        self.cfg = cfg
        self._apply_cfg()
        if self.filters != old_filters:
            self.npc_dirty = True
        if not self.is_push and self.dthresh_s and self._delete_timer is None:
            self._arm_delete(self.dthresh_s)
        if self.flow_control and self.is_push and old_maxpb:
            self.maxpb = old_maxpb
        if self.deliver_subject != old_deliver and self.is_push:
            self._force_expire_pending()
            self._watch_interest(True)
            self.active = self._has_interest()
            if not self.active:
                self._interest_lost()
            if self._hb_timer is None:
                self._arm_hb()
        self._arm_pause()
        if self.persist is not None:
            self.persist.write_meta(self)
        self.kick()

    def _force_expire_pending(self) -> None:
        """Queue every pending message for redelivery now (the deliver subject changed)."""
        expired = sorted(s for s in self.pending if s not in self.rdqi)
        if not expired:
            return
        off = now_ns() - self.pending[expired[0]][1]
        self._propose(C_DUE, (expired, off))
        for seq in expired:
            self._add_rdq(seq)
        self._arm_ack_timer(self.ack_wait_ns / 1e9 + 0.001, force=True)

    def set_pause(self, until_ns: int, until_text: str | None) -> None:
        from rillet.jetstream import consumerconfig as C
        cfg = self.cfg.copy()
        cfg.pause_until = to_utc_time(until_text) if until_text else None
        C.set_static_consumer_metadata(cfg)
        self.cfg = cfg
        self.pause_until_ns = until_ns
        self._arm_pause()
        if self.persist is not None:
            self.persist.write_meta(self)
        self.kick()

    # ---- state --------------------------------------------------------------------------------------

    def get_state(self) -> Any:
        from rillet.jetstream.store.base import ConsumerState, SequencePair
        return ConsumerState(
            delivered=SequencePair(consumer_seq=self.dseq - 1,
                                   stream_seq=self.dsseq if self.has_state else self.sseq - 1),
            ack_floor=SequencePair(consumer_seq=self.adflr, stream_seq=self.asflr),
            pending={s: (p[0], p[1]) for s, p in self.pending.items()},
            redelivered={s: c - 1 for s, c in self.rdc.items() if c > 1},
        )

    def apply_state(self, state: Any) -> None:
        """Restore the replicated state from the persisted one (a snapshot install), then the engine's
        scan position from it."""
        self.dseq = state.delivered.consumer_seq + 1
        self.sseq = state.delivered.stream_seq + 1
        self.dsseq = state.delivered.stream_seq
        self.has_state = True
        self.adflr = state.ack_floor.consumer_seq
        self.asflr = state.ack_floor.stream_seq
        self.pending = {int(s): [int(p[0]), int(p[1])] for s, p in (state.pending or {}).items()}
        self.rdc = {int(s): int(c) + 1 for s, c in (state.redelivered or {}).items()}
        # everything pending is due for redelivery after a restart once its ack wait passes
        lst = self.stream.store.state().last_seq
        if self.asflr > lst:
            self.asflr = lst
            self.adflr = self.dseq - 1
            self.pending = {}
            self.rdc = {}
        for s in [s for s in self.pending if s > lst]:
            del self.pending[s]
        if self.sseq > lst + 1:
            self.sseq = (max(self.pending) + 1) if self.pending else self.asflr + 1
        self.npc_dirty = True

    def _mark_dirty(self) -> None:
        if self.persist is None or self.closed:
            return
        self._dirty = True
        if self._flush_timer is None:
            self._flush_timer = self.loop.call_later(STATE_FLUSH, self._flush_cb)

    def _flush_cb(self) -> None:
        self._flush_timer = None
        if not self.closed:
            self.flush_state()

    def flush_state(self) -> None:
        if self.persist is None or not self._dirty:
            return
        self._dirty = False
        try:
            self.persist.write_state(self.get_state())
        except Exception as e:
            self.js.log.error(f"JetStream consumer '{self.stream.name} > {self.name}' state write failed: {e}")

    # ---- info ---------------------------------------------------------------------------------------

    def info(self, level_meta: bool = True) -> dict:
        from rillet.jetstream.api import consumers as api_consumer
        cfg_d = api_consumer.config_to_dict(self.cfg, dynamic_meta=level_meta)
        d: dict[str, Any] = {
            "stream_name": self.stream.name,
            "name": self.name,
            "created": format_time(self.created),
            "config": cfg_d,
        }
        dl: dict[str, Any] = {"consumer_seq": max(self.dseq - 1, 0),
                              "stream_seq": self.dsseq if self.has_state else max(self.sseq - 1, 0)}
        if self.ldt:
            dl["last_active"] = format_time(self.ldt)
        af: dict[str, Any] = {"consumer_seq": self.adflr, "stream_seq": self.asflr}
        if self.lat:
            af["last_active"] = format_time(self.lat)
        d["delivered"] = dl
        d["ack_floor"] = af
        d["num_ack_pending"] = len(self.pending)
        d["num_redelivered"] = 0 if self.maxdc == 1 else len(self.rdc)
        if not self.is_push:
            self._process_waiting(eos=False)
        d["num_waiting"] = len(self.waiting)
        d["num_pending"] = self.num_pending()
        ci = getattr(self.stream, "cluster_info", None)  # a replicated stream's consumer (cluster/streams.py)
        if ci is not None:
            d["cluster"] = ci()
        if self.is_push and self.active:
            d["push_bound"] = True
        if self.pause_until_ns:
            left = self.pause_until_ns - now_ns()
            if left > 0:
                d["paused"] = True
                d["pause_remaining"] = left
        d["ts"] = format_time(now_ns())
        if self.cfg.priority_groups:
            from rillet.jetstream import priority
            d["priority_groups"] = priority.groups_info(self)
        return d


_NEXT_FIELDS = {"batch": "int", "expires": "time.Duration", "max_bytes": "int", "no_wait": "bool",
                "idle_heartbeat": "time.Duration",
                # the priority group fields (rillet.jetstream.priority)
                "group": "string", "min_pending": "int64", "min_ack_pending": "int64", "id": "string",
                "priority": "int"}
_PG_FIELDS = frozenset(("group", "min_pending", "min_ack_pending", "id", "priority"))


def _next_request(body: bytes) -> dict:
    """A pull request body checked like Go's json.Unmarshal into JSApiConsumerGetNextRequest (same error texts)."""
    from rillet.jetstream.api.codec import parse_json
    from rillet.jetstream.errors import ApiError
    try:  # (json.Unmarshal: exactly one value; "{} 5" is a syntax error, never the 5)
        check_one_value(bytes(body))
    except GoJSONError as e:
        raise ValueError(str(e)) from None
    try:
        d = parse_json(body)
    except ApiError as e:
        text = e.description
        if text.startswith("invalid JSON: "):
            text = text[len("invalid JSON: "):]
        i = text.rfind(" at offset ")
        raise ValueError(text[:i] if i > 0 else text) from None
    out: dict = {}
    for k, v in d.items():
        want = _NEXT_FIELDS.get(k)
        if want is None or v is None:
            continue
        if want == "bool":
            ok = isinstance(v, bool)
        elif want == "string":
            ok = isinstance(v, str)
        else:
            ok = isinstance(v, int) and not isinstance(v, bool)
        if not ok:
            if isinstance(v, bool):
                kind = "bool"
            elif isinstance(v, (int, float)):
                kind = "number" if want in ("bool", "string") else f"number {json.dumps(v)}"
            elif isinstance(v, str):
                kind = "string"
            elif isinstance(v, list):
                kind = "array"
            else:
                kind = "object"
            raise ValueError(f"json: cannot unmarshal {kind} into Go struct field .{k} of type {want}")
        out[k] = v
    return out


_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def account_hash(name: str) -> str:
    """nats-server's 8-character hash of an account name (used in v2 ack subjects)."""
    import hashlib
    d = hashlib.sha256(name.encode()).digest()
    return "".join(_HASH_DIGITS[b % 62] for b in d[:8])


def _last_seq(store: Any, filter: str) -> int:
    """The last sequence matching ``filter`` (0: none). A message the store cannot read still counts: its
    delivery reports and skips it."""
    try:
        m = store.load_last_msg(filter)
    except ErrStoreClosed:
        raise
    except StoreError as e:
        return getattr(e, "seq", 0)
    return m.seq if m is not None else 0


def _headers_only(hdr: bytes, size: int) -> bytes:
    line = f"{MSG_SIZE}: {size}\r\n\r\n".encode()
    if not hdr:
        return b"NATS/1.0\r\n" + line
    return hdr[:-2] + line


# ---- persistence ------------------------------------------------------------------------------------------


class ConsumerPersist:
    """A consumer on disk: its config in ``<stream dir>/consumers/<name>/meta.json``, its delivery state in
    the stream store's ``consumer_store(name)`` (which the store flushes and syncs with the stream)."""

    def __init__(self, path: str, store: Any, name: str) -> None:
        self.path = path
        self.store = store
        self.name = name
        self.cs: Any = None

    def _cs(self) -> Any:
        if self.cs is None or getattr(self.cs, "_closed", False):
            self.cs = self.store.consumer_store(self.name)
        return self.cs

    def write_meta(self, c: Consumer) -> None:
        from rillet.jetstream.api import consumers as api_consumer
        make_dirs_durable(self.path)
        data = json.dumps({"config": api_consumer.config_to_dict(c.cfg, dynamic_meta=False, for_store=True),
                           "created": c.created, "name": c.name}).encode()
        _atomic_write(os.path.join(self.path, "meta.json"), data)

    def write_state(self, state: Any) -> None:
        cs = self._cs()
        cs.update(state)
        cs.flush()

    def load(self, log: Any) -> tuple[dict | None, Any]:
        """(config file contents, delivery state); (None, None) with an error logged when the consumer
        cannot be recovered. A state the store cannot decode was logged by the store: no state."""
        path = os.path.join(self.path, "meta.json")
        try:
            with open(path, "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError) as e:
            log.error(f"  Error recovering consumer '{self.name}': cannot read {path}: {e}")
            return None, None
        return meta, self._cs().state()

    def delete(self) -> None:
        try:
            cs = self._cs()
        except ErrStoreClosed:
            cs = None  # the stream and its store were deleted first: the state went with them
        if cs is not None:
            cs.delete()
        shutil.rmtree(self.path, ignore_errors=True)


def _atomic_write(path: str, data: bytes, sync: bool = True) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:  # the rename survives a crash too
        fsync_dir(os.path.dirname(path))


def consumers_dir(stream: "Stream") -> str:
    return os.path.join(stream.jsa.stream_dir(stream.name), "consumers")


def persisted(stream: "Stream", cfg: Any) -> bool:
    """Consumers on memory streams, or asking for memory storage, are not written to disk."""
    return _cfg(stream.cfg, "storage", "file") == "file" and not _cfg(cfg, "mem_storage", False)


def create_consumer(stream: "Stream", cfg: Any, name: str) -> Consumer:
    """A new consumer on ``stream`` (config already validated), started and registered."""
    c = Consumer(stream, cfg, name, now_ns())
    c.select_start()
    if persisted(stream, cfg):
        c.persist = ConsumerPersist(os.path.join(consumers_dir(stream), name), stream.store, name)
        c.persist.write_meta(c)
        c._dirty = True
        c.flush_state()
    stream.consumers[name] = c
    c.start()
    return c


def recover_consumers(stream: "Stream") -> None:
    """Load the consumers persisted for ``stream`` (config, delivered and ack state)."""
    base = consumers_dir(stream)
    if not os.path.isdir(base):
        return
    from rillet.jetstream.api import consumers as api_consumer
    for name in sorted(os.listdir(base)):
        p = ConsumerPersist(os.path.join(base, name), stream.store, name)
        meta, state = p.load(stream.js.log)
        if meta is None:
            continue
        try:
            cfg = api_consumer.config_from_dict(meta["config"])
            c = Consumer(stream, cfg, meta.get("name") or name, int(meta.get("created") or now_ns()))
            if state is not None:
                c.apply_state(state)
            else:
                c.select_start()
            c.persist = p
            stream.consumers[c.name] = c
            c.start()
        except Exception as e:
            stream.js.log.error(f"  Error recovering consumer '{stream.name} > {name}': {e}")
