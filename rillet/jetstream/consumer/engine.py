"""JetStream consumers: the delivery engine of one consumer on one stream, over its replicated state.

The consumer is split in two (DESIGN.md, "consumers split in two"):

- ``ConsumerStateMachine`` (rillet.jetstream.consumer.state): the replicated state (delivered, ack floor,
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
held back for the commit, as nats-server does; new messages go out in runs where nothing is decided per message
(delivery.py ``_run_new``: one match of the receiver's subject and one C_DELIVERED entry for the run, the
messages read from the store in batches, the loop compiled in the compiled lane).

Nothing here awaits: the stream (after its entries are applied), acks, pull requests and timers call in
synchronously and the delivery pass (``_run``) is scheduled with ``loop.call_soon``, delivering everything it
can in one go. The persisted state (``get_state`` / ``apply_state``, the store's consumer state file) has the
same format as before the split: existing stores load unchanged.

Acks arrive on ``$JS.ACK.<stream>.<consumer>.<delivery count>.<stream seq>.<consumer seq>.<ts ns>.<pending>``,
the reply subject of every delivered message (nats-server's v1 format, which is also what it sends when a
domain is set; the 11-token v2 form with domain and account hash is accepted too).
"""
from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING, Any

from rillet.jetstream.consumer.state import (C_GONE, C_PURGED, C_START, ConsumerStateMachine)
from rillet.jetstream.log import SingleNodeLog
from rillet.jetstream.store.base import ErrStoreClosed, ErrStoreCorrupt, StoreError
from rillet.jetstream.stream import now_ns
from rillet.subjects.validate import subject_has_wildcard, subject_matches_filter

from rillet.jetstream.consumer.common import (FC_MAX_PENDING, _cfg, _parse_time_ns, account_hash, _last_seq)

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream

from rillet.jetstream.consumer.acks import AckMixin
from rillet.jetstream.consumer.control import ControlMixin
from rillet.jetstream.consumer.delivery import DeliveryMixin
from rillet.jetstream.consumer.persist import StateMixin, consumers_dir, persist_for, persisted
from rillet.jetstream.consumer.pull import PullMixin, WaitingRequest
from rillet.jetstream.consumer.push import PushMixin


class Consumer(DeliveryMixin, PushMixin, PullMixin, AckMixin, ControlMixin, StateMixin, ConsumerStateMachine):
    """The delivery engine, run by the consumer leader, over the replicated state it inherits (see
    rillet.jetstream.consumer.state): every change to that state is an entry proposed to ``clog``."""

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
        self._failed = False  # (a run's last message reached nobody: DeliveryMixin._run_new)
        self._ahead: list = []  # (the messages a run read ahead, last first: DeliveryMixin._next_in_run)
        self.load_errors = 0  # messages the store could not read (logged once each, then skipped)
        self._bad_seqs: set[int] = set()
        self.refetch_wait = 0  # a damaged message a replica fetches again: waited for, not skipped (_load_next)
        self._flush_soon = False
        self.persist: Any = None
        # priority groups (rillet.jetstream.consumer.priority): the pin is the leader's, as nats-server's
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
        self._mcache: tuple[list[str], dict[str, bool]] = (self.filters, {})  # (_matches)
        self._mtook: str | None = None  # a subject these filters take, the last the stream's _no_interest asked
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
        # deliveries in runs (DeliveryMixin._run_new) where nothing is decided per message; a subclass says for
        # itself (a replicated consumer holds a run's frames for its entry's commit: rillet.jetstream.cluster.consumers)
        self._runs = (type(self) is Consumer and not self.rate_bps and not self.replay_original
                      and not self.headers_only)

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
        from rillet.jetstream.consumer import reset as consumer_reset
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
            from rillet.jetstream.consumer import priority
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

    def on_stream_msg(self, seq: int, subject: str) -> bool | None:
        """Stream message ``seq`` on ``subject`` was stored. True when this consumer is open and its filters
        take ``subject``: the question interest retention asks next (``retention.on_new_msg``), answered here
        once (``Stream._msg_done`` skips it for a stream message a consumer still open took)."""
        if self.closed or (subject is not self._mtook and not self._matches(subject)):  # (asked once a message)
            return False
        if seq >= self.sseq:
            if not self.npc_dirty:
                self.npc += 1
            if self._running or self._scheduled or self.stream._wb_pending:
                # (_wb_pending: the store gathers this pass's messages, written at its end: read back then, in
                # one go, instead of a read now that writes them first)
                if not self._scheduled:  # (kick's own first test, without its call: a burst kicks once)
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
        return True

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

    def on_stream_removes(self, seqs: list[int]) -> None:
        """``on_stream_remove`` of each of ``seqs``, in order (the removals one stream entry made: the retention
        removals of a batch of acks, which this consumer acknowledged, so mostly nothing to do: no call each)."""
        if type(self).on_stream_remove is not Consumer.on_stream_remove:  # (a subclass's: each through it)
            for seq in seqs:
                self.on_stream_remove(seq)
            return
        if self.closed:
            return
        pending, rdc, sseq = self.pending, self.rdc, self.sseq
        for seq in seqs:
            if seq >= sseq:
                self.npc_dirty = True
            if seq in pending or seq in rdc:
                self.on_stream_remove(seq)  # (which may change any of them)
                if self.closed:
                    return
                pending, rdc, sseq = self.pending, self.rdc, self.sseq

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
        filters = self.filters
        if not filters:
            return True
        # the answers for the subjects seen lately, for these filters (a new config brings a new list): the
        # stream asks for every stored message (delivery, interest retention), mostly on a few subjects
        mc = self._mcache
        if mc[0] is filters:
            r = mc[1].get(subject)
            if r is not None:
                return r
        else:
            mc = self._mcache = (filters, {})
        r = False
        for f in filters:
            if subject_matches_filter(subject, f):
                r = True
                break
        d = mc[1]
        if len(d) >= 4096:
            d.clear()
        d[subject] = r
        return r

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
                    m = store.load_next_msg(">", start, True)
                elif len(self.filters) == 1:
                    if not self.filters_wc[0]:
                        # usually the very next sequence, on the filter's subject (an MQTT subscription's consumer):
                        # read without the subject search (the index tells the subject, nothing else is read)
                        run = store.load_run(start, 1, 0, self.filters[0])
                        if run:
                            return run[0]
                    m = store.load_next_msg(self.filters[0], start, self.filters_wc[0])
                else:
                    m = store.load_next_msg_multi(self.filters, start)
                if m is not None and m.seq > start:
                    # (a search passes over a damaged record found earlier: where a replica fetches it again,
                    # it is waited for here too, if this consumer would deliver it)
                    lost_from = getattr(store, "lost_from", None)
                    bad = lost_from(start) if lost_from is not None else 0
                    if bad and bad < m.seq:
                        if not self._waits_for(bad):  # (filtered: the next damaged one it may deliver, if any)
                            bad = next((s for s in store.state().lost if bad < s < m.seq and self._waits_for(s)),
                                       0)
                        if bad:
                            self.refetch_wait = bad
                            return None
                return m
            except ErrStoreClosed:
                raise
            except (StoreError, OSError) as e:
                seq = self._failed_seq(e, start)
                if self._refetched(e):
                    self.refetch_wait = seq  # (the stream replica kicks the engine once it is back)
                    return None
                self._load_failed(seq, e)
                self.npc_dirty = True
                start = max(seq, start) + 1

    def _waits_for(self, seq: int) -> bool:
        """A damaged message (the store's ``lost``) this consumer would deliver, on a stream whose replica fetches
        it again. A filtered consumer passes over one whose subject the store still knows (``lost_subject``:
        damage a read found while running) and does not match; one whose subject is not known (found by the
        open-time scan) may be its own: it waits for it."""
        rep = self.stream.replication
        if rep is None or not rep.refetches_damage(seq):
            return False
        if not self.filters:
            return True
        lost_subject = getattr(self.stream.store, "lost_subject", None)
        subject = lost_subject(seq) if lost_subject is not None else None
        return subject is None or self._matches(subject)

    def _refetched(self, err: Exception) -> bool:
        """The message could not be read because its record is damaged, and the stream is replicated: the replica
        fetches it again (StreamReplica.refetch_damaged), so it is waited for rather than skipped."""
        rep = self.stream.replication
        return isinstance(err, ErrStoreCorrupt) and rep is not None and rep.refetches_damage(getattr(err, "seq", 0))

    def _read(self, seq: int) -> Any:
        """The message at ``seq`` for delivery: None when deleted or missing, and when the store cannot
        read it (logged once and counted, see ``_load_failed``)."""
        try:
            return self.stream.store.load_msg(seq)
        except ErrStoreClosed:
            raise
        except (StoreError, OSError) as e:
            if self._refetched(e):
                self.refetch_wait = seq
                return None
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



def create_consumer(stream: "Stream", cfg: Any, name: str) -> Consumer:
    """A new consumer on ``stream`` (config already validated), started and registered."""
    c = Consumer(stream, cfg, name, now_ns())
    c.select_start()
    return install_consumer(stream, c)


def install_consumer(stream: "Stream", c: Consumer) -> Consumer:
    """A consumer made for ``stream`` (a create, or a restore with its state applied): written to disk when the
    stream keeps its consumers, registered and started."""
    if persisted(stream, c.cfg):
        c.persist = persist_for(stream, c.name)
        c.persist.write_meta(c)
        c._dirty = True
        c.flush_state()
    stream.consumers[c.name] = c
    c.start()
    return c


def recover_consumers(stream: "Stream") -> None:
    """Load the consumers persisted for ``stream`` (config, delivered and ack state)."""
    base = consumers_dir(stream)
    if not os.path.isdir(base):
        return
    from rillet.jetstream.api import consumers as api_consumer
    for name in sorted(os.listdir(base)):
        p = persist_for(stream, name)
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
