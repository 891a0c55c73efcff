"""Replicated consumers: one RAFT group per consumer, as nats-server (``C-R<n><F|M>-xxxxxxxx``).

A ``ConsumerReplica`` lives on each peer of the consumer's assignment (``ca.group.peers``: the stream's
peers, or a subset of them for a consumer with fewer replicas), beside that server's replica of the
stream. Its ``RaftGroup`` carries the consumer's entries (C_START, C_DELIVERED, C_ACK, ...; the encoding
of rillet.jetstream.cluster.log) and every replica applies them to its ``ClusteredConsumer``.

* **The consumer leader** (the group's leader, not necessarily the stream's) runs the delivery engine:
  it reads messages from its local stream replica, subscribes to the consumer's ack, flow control and
  pull-request subjects and proposes every state change to the consumer's group; a delivery goes out once its
  C_DELIVERED entry committed. A pull request's new messages go out in runs, as on one server: one C_DELIVERED
  for the run (its stream sequences as a list), its frames held until it commits (only when every member's
  build applies such entries: ``log.DELIVERED_RUNS`` in its route INFO). On a stream follower the
  engine learns of stored and removed messages from ``StreamReplica`` (after each entry it applies, see
  streams.py), on the stream leader from the stream's completions, as on one server.
* **A new consumer led on a stream follower** (an R1 consumer lands on a random online replica, as nats-server
  places it): before its engine starts (deliver-policy start, pending count, the create's answer) it asks the
  stream leader for its state (``$JSC.SI``) and waits, up to STREAM_CATCH_UP_WAIT, until this server's stream
  replica holds as much: a KV watch started right after an acknowledged put sees that put.
* **Followers** hold the replicated state (a ``ClusteredConsumer`` whose engine does not run) and track the
  leader's scan position from the entries (``snext``), which retention needs.
* **Leader change**: the old engine stops; a fresh engine takes over the replicated state (acked
  messages are never delivered again; delivered-but-unacked ones are redelivered once their ack wait
  runs out: at least once).
* **Retention** (interest, work queue): removals are proposed by the *stream* leader, as nats-server:
  every consumer replica applies the acks, and the one on the stream leader's server asks for the
  removal (``StreamReplica.retention_ack``). Consumers of such streams have the stream's replicas (the
  API refuses anything else), so the stream leader always holds a replica. A new stream leader sweeps
  the messages every consumer has acknowledged (``StreamReplica.retention_sweep``).
* **Inactivity** (ephemerals, ``inactive_threshold``): the consumer leader asks the meta leader to
  delete the consumer (a ``$JS.API.CONSUMER.DELETE`` request), which removes it everywhere.

* **Waiting pull requests** (consumer_pulls.py): the leader proposes the reply subjects of the requests that
  wait (C_WAITING); a new leader answers each with 409 Leadership Change, as nats-server 2.15.

Snapshots (every ``COMPACT_EVERY`` applied entries, spaced as a stream's, see streams.py): msgpack of the replicated state plus the scan
position and the waiting pull requests' reply subjects.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import Any

import msgspec

from rillet.jetstream.consumer.engine import Consumer
from rillet.jetstream.consumer.state import (C_ACK, C_DELIVERED, C_DROP, C_GONE, C_MAXDELIV, C_PURGED, C_RESET,
                                             C_START, C_WAITING, ConsumerStateMachine)
from rillet.jetstream.cluster.consumer_loss import ConsumerLossMixin
from rillet.jetstream.cluster.consumer_pulls import WaitingSyncMixin
from rillet.jetstream.cluster.log import DELIVERED_RUNS, LOST, SYNCED
from rillet.jetstream.log import Entry, NotLeader
from rillet.raft.node import LEADER
from rillet.jetstream.stream import now_ns

COMPACT_EVERY = 8192  # applied entries between snapshots of a consumer group
# seconds a new consumer led on a stream follower waits for that replica to hold what the stream leader had when
# asked (ConsumerReplica._lead_when_stream_current), polled every CATCH_UP_POLL
STREAM_CATCH_UP_WAIT = 2.0
CATCH_UP_POLL = 0.005

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()
_SNEXT_OPS = frozenset((C_ACK, C_GONE, C_MAXDELIV, C_PURGED, C_DROP))


class _RunHold:
    """Stands in for the account as a run's ``deliver_result`` (DeliveryMixin._run_sink): keeps each frame (the
    stored subject, ack reply, header length, message) for after the run's entry commits."""

    __slots__ = ("frames", "dsubj", "dsubj_s")

    def __init__(self, dsubj: bytes, dsubj_s: str) -> None:
        self.frames: list[tuple[bytes, bytes, int, bytes]] = []
        self.dsubj = dsubj
        self.dsubj_s = dsubj_s

    def deliver_result(self, ic: Any, r: Any, subject: bytes, reply: bytes, hl: int, msg: bytes,
                       dsubj: Any = None) -> bool:
        self.frames.append((subject, reply, hl, msg))
        return True


class ClusteredConsumer(WaitingSyncMixin, Consumer):
    """A consumer replica's object: the delivery engine when ``engine`` (this server leads the consumer's
    group), else the replicated state only (stream signals are ignored, nothing is delivered)."""

    engine = False
    removing = False  # set when the meta layer removes the consumer (a real delete)
    creplica: Any = None
    started_by_log = False

    def _apply_cfg(self) -> None:
        super()._apply_cfg()
        # retention removals are the stream leader's (ConsumerReplica._apply), never the engine's
        self.stream_retention = self.retention
        self.retention = "limits"
        if self.__class__ is ClusteredConsumer:  # (SoloConsumer's: ConsumerReplica.set_solo)
            self._runs = self._runs_ok()

    def apply_entry(self, entry: Entry) -> Any:
        res = ConsumerStateMachine.apply_entry(self, entry)
        if not self.engine:  # the leader's scan position, as far as the entries tell it
            op = entry.op
            a = entry.args
            if op == C_START:
                self.sseq = a[0]
                self.started_by_log = True
            elif op == C_DELIVERED:
                top = a[0] if a[0].__class__ is int else (max(a[0]) if a[0] else 0)  # (a run: a list)
                if top >= self.sseq:
                    self.sseq = top + 1
            elif op in _SNEXT_OPS:
                if a[-1] > self.sseq:
                    self.sseq = a[-1]
            elif op == C_RESET:  # the scan position goes where the reset says, back or forward
                self.sseq = a[0]
                self.started_by_log = True  # a new leader resumes from here, not from the deliver policy
        elif entry.op == C_ACK:
            a = self._acking
            if a:
                a.discard(entry.args[0])
        elif entry.op == C_START or entry.op == C_RESET:
            self.started_by_log = True
        elif entry.op == C_WAITING and not self.clog.applying_own:
            self.late(entry.args[0])  # (a previous leader's requests, applied after this engine started)
        return res

    # ---- AckSync: confirmed once the ack committed (nats-server answers from the replicated ack) ----------

    _ack_reply: bytes | None = None
    _acking: Any = None  # (engine) stream seqs whose ack this leader proposed, not yet applied

    def _add_rdq(self, seq: int) -> None:
        a = self._acking
        if a and seq in a:
            return
        super()._add_rdq(seq)

    def _on_ack(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if reply and not self.clog.solo:  # (solo: the ack applies at once, answered as on one server)
            body = msg[hdr:] if hdr > 0 else msg
            if not body or body == b"+ACK" or body == b"+OK" or body.startswith(b"+TERM"):
                # the reply waits for the C_ACK entry to apply on this leader (process_ack below); a leader
                # that loses its group first never confirms: the ack may not be on a quorum
                self._ack_reply = reply
                try:
                    super()._on_ack(sub, client, subject, None, hdr, msg)
                finally:
                    self._ack_reply = None
                return
        super()._on_ack(sub, client, subject, reply, hdr, msg)

    def process_ack(self, sseq: int, dseq: int, dc: int, sample: bool) -> bool:
        log = self.clog
        if log.solo and self._ack_reply is None:
            return Consumer.process_ack(self, sseq, dseq, dc, sample)  # (applied at once: nothing to wait for)
        reply, self._ack_reply = self._ack_reply, None
        before = log.pending
        solo_before = log.solo_applied
        # an AckAll at or below the ack floor changes nothing (applied, so committed, state): confirmed at once;
        # any other ack is confirmed only through its committed entry. A proposal the group refuses (its node
        # no longer leads, or hands leadership over, before the group has told us) is not in the log: it gets
        # no confirmation (seed 203: a leader resuming from SIGSTOP confirmed acks its successor never saw)
        noop = self.ack_policy in ("all", "flow_control") and (dseq <= self.adflr or sseq <= self.asflr)
        ok = super().process_ack(sseq, dseq, dc, sample)
        proposed = log.pending > before
        if proposed and self.engine and self.ack_policy == "explicit":
            # until the ack applies the message is still pending: not to be redelivered meanwhile (a
            # redelivery proposed after the ack would make it pending again once both commit)
            a = self._acking
            if a is None:
                a = self._acking = set()
            a.add(sseq)
        if reply is None:
            return ok
        if not ok or not log.is_leader:
            return ok  # (not delivered yet, or no longer leading: no confirmation)
        if proposed:
            pub = self.ic.publish
            log.then(lambda: pub(reply, None, b""))
        elif noop or log.solo_applied > solo_before:  # (solo: the ack applied as it was proposed)
            self.ic.publish(reply, None, b"")  # nothing to replicate (already acknowledged)
        return ok

    # ---- deliveries sent once their C_DELIVERED entry committed (nats-server 2.12+ holds them for the
    # quorum too): a leader cut off or paused, still thinking it leads, can deliver nothing (a redelivery
    # of a value the new leader's client has since acknowledged). Statuses for the same client (408, 404,
    # heartbeats) queue behind them, in order. Not with AckNone or flow control (as nats-server).

    _outq: Any = None  # deque of [state, subject, reply, hdr, data, orig, subject_s]; state False: waiting
    # (a run's item: [state, None, frames, deliver subject, its str]; its frames held by _RunHold)
    _run_hold: Any = None

    def _deliver(self, dsubj: bytes, ack_reply: str, m: Any, hdr: bytes, data: bytes, dc: int, sz: int,
                 dsubj_s: str, dseq: int) -> bool:
        if self.ack_none or self.flow_control or (self.clog.solo and not self._outq):
            # (solo: the C_DELIVERED applies as it is proposed, so it goes out at once, as on one server)
            return Consumer._deliver(self, dsubj, ack_reply, m, hdr, data, dc, sz, dsubj_s, dseq)
        r = self.jsa.account.match(dsubj_s)
        if not (r.psubs or r.qsubs):  # nobody to get it: recorded and not delivered, as on one server
            return super()._deliver(dsubj, ack_reply, m, hdr, data, dc, sz, dsubj_s, dseq)
        seq = m.seq
        self._ndseq = dseq + 1
        item = [False, dsubj, ack_reply.encode(), hdr, data, m.subject, dsubj_s]
        q = self._outq
        if q is None:
            q = self._outq = deque()
        q.append(item)
        self.clog.propose(Entry(C_DELIVERED, (seq, dseq, dc, now_ns()), item), self._delivered)
        if self._ack_timer is None or self.backoff:
            self._arm_ack_timer(self._ack_delay(seq))
        if self.persist is not None:
            self._mark_dirty()
        if self.maxpb:
            self.pbytes += sz
        return True

    def _delivered(self, entry: Entry, res: Any, err: BaseException | None) -> None:
        item = entry.ctx
        # committed: out it goes; else (leadership lost, replaced) never: the next leader redelivers
        item[0] = True if err is None else None
        if err is not None and not isinstance(err, NotLeader):
            self.js.log.error(f"JetStream consumer '{self.stream.name} > {self.name}': applying {entry!r} "
                              f"failed: {err!r}")
        q = self._outq
        if self.closed or not self.engine:
            q.clear()
            return
        send = Consumer._send
        while q and q[0][0] is not False:
            it = q.popleft()
            if it[0]:
                if it[1] is None:
                    self._send_run(it[2], it[3], it[4])
                else:
                    send(self, it[1], it[2], it[3], it[4], it[5], it[6])
        self.js.server.schedule_flush()

    # ---- runs (DeliveryMixin._run_new): a pull request's new messages taken in one go, their frames held
    # until the run's one C_DELIVERED entry (its stream sequences as a list) has committed ----------------------

    def _runs_ok(self) -> bool:
        """Whether new messages may go out in runs while the group has members (checked again per run:
        ``_run_new``): a pull consumer that acknowledges (nothing decided per message)."""
        return (not self.is_push and not self.ack_none and not self.rate_bps and not self.replay_original
                and not self.headers_only)

    def _run_new(self, budget: int) -> int:
        if self.clog.solo:  # (applied as proposed: out at once, unless deliveries still wait for a commit)
            return -1 if self._outq else Consumer._run_new(self, budget)
        g = self.creplica.group if self.creplica is not None else None
        node = g.node if g is not None else None
        if (node is None or node.role != LEADER or node.transferee is not None or self.closed
                or not g.members_decode(DELIVERED_RUNS)):
            return -1  # (one by one: _next_msg says whether anything may be taken off the stream)
        return Consumer._run_new(self, budget)

    def _run_sink(self, acc: Any, dsubj: bytes, dsubj_s: str) -> Any:
        if self.clog.solo:
            self._run_hold = None
            return acc
        hold = self._run_hold = _RunHold(dsubj, dsubj_s)
        return hold

    def _propose_run(self, seqs: list[int], d0: int) -> None:
        hold, self._run_hold = self._run_hold, None
        if hold is None:  # (solo: applied as proposed, the frames went out)
            Consumer._propose_run(self, seqs, d0)
            return
        item = [False, None, hold.frames, hold.dsubj, hold.dsubj_s]
        q = self._outq
        if q is None:
            q = self._outq = deque()
        q.append(item)
        self.clog.propose(Entry(C_DELIVERED, (seqs, d0, 1, now_ns()), item), self._delivered)

    def _send_run(self, frames: list, dsubj: bytes, dsubj_s: str) -> None:
        """A committed run's frames, to whoever receives the pull request's reply subject now."""
        acc = self.jsa.account
        ic = self.ic
        r = acc.match(dsubj_s)
        deliver = acc.deliver_result
        for subject, reply, hl, msg in frames:
            deliver(ic, r, subject, reply, hl, msg, dsubj)

    def _send(self, subject: bytes, reply: bytes | None, hdr: bytes, data: bytes, orig: str | None = None,
              subject_s: str | None = None) -> bool:
        q = self._outq
        if q:
            q.append([True, subject, reply, hdr, data, orig, subject_s])
            return True
        return Consumer._send(self, subject, reply, hdr, data, orig, subject_s)

    def _next_msg(self) -> tuple[Any, int, int]:
        # nothing is taken off the stream while the group would refuse the C_DELIVERED (its node stepped down
        # or hands leadership over before the group told us): the scan position would move past a message
        # that is never delivered (a transfer that fails leaves this engine running); solo, nothing is refused
        if self.clog.solo:
            return Consumer._next_msg(self)
        node = self.creplica.group.node if self.creplica is not None else None
        if node is not None and (node.role != LEADER or node.transferee is not None):
            return None, 0, 0
        return super()._next_msg()

    # stream signals reach the engine only
    def on_stream_msg(self, seq: int, subject: str) -> None:
        if self.engine:
            super().on_stream_msg(seq, subject)

    def on_stream_remove(self, seq: int) -> None:
        if self.engine:
            super().on_stream_remove(seq)

    def on_purge(self) -> None:
        if self.engine:
            super().on_purge()

    _joined: Any = None  # the group whose next pass runs the delivery pass (kick)

    def kick(self) -> None:
        """The delivery pass runs in the group's next pass, before its Ready, when the group leads (and is not
        solo): the pass's proposals (a fetch's acks, read with its next request) and the deliveries' entry go to
        the followers in one append (one WAL write, one route write per follower and one answer each), not in
        a second pass after the loop's next turn. Otherwise on the loop's next turn, as on one server."""
        if not self.engine:
            return
        if not self._scheduled and not self._running and not self.closed and not self.clog.solo:
            rep = self.creplica
            g = rep.group if rep is not None else None
            node = g.node if g is not None else None
            # (not from inside the delivery pass, whose budget was used up, nor from inside the group's pass, an
            # apply's completion: those wait for the loop's next turn as before, so that a backlog is taken a
            # budget per turn)
            if node is not None and g.running and not g.processing and node.role == LEADER:
                if self._joined is not g:
                    self._joined = g
                    g.proposal_waiting(self._run_in_pass)  # (schedules the group's pass)
                return
        super().kick()

    def _run_in_pass(self) -> None:
        """(RaftGroup.proposal_waiting) The delivery pass a kick left for the group's pass."""
        self._joined = None
        if self.engine and not self.closed:
            self._run()

    def _c_done(self, entry: Entry, res: Any, err: BaseException | None) -> None:
        if err is not None:
            from rillet.jetstream.log import NotLeader
            if not isinstance(err, NotLeader):
                self.js.log.error(f"JetStream consumer '{self.stream.name} > {self.name}': applying {entry!r} "
                                  f"failed: {err!r}")
            return
        op = entry.op
        if op == C_ACK:
            if entry.ctx:
                self.kick()
        elif op == C_GONE:
            if res and self.maxp:
                self.kick()

    def stop(self, delete: bool = False, advisory: bool = True) -> None:
        if delete and not self.removing and self.creplica is not None:
            # deleted by the engine itself (inactivity): the meta leader removes the assignment everywhere
            if self.engine:
                self.creplica.request_delete()
            return
        super().stop(delete=delete, advisory=advisory)

    def info(self, level_meta: bool = True) -> dict:
        d = super().info(level_meta)
        if self.creplica is not None:
            d["cluster"] = self.creplica.cluster_info()
        return d


class SoloConsumer(ClusteredConsumer):
    """A consumer engine while its group runs solo (ConsumerReplica.set_solo swaps the class of the engine
    object in and out): every ClusteredConsumer override that only hands over to Consumer when the log is solo
    (and nothing waits for a commit: no delivery queued, no AckSync reply held) is Consumer's own here, so the
    per-message path has no extra frame, as on a lone server. The class changes only when nothing is in flight
    (solo_check: no pending entry, so no queued delivery and no ack awaiting its commit)."""

    _on_ack = Consumer._on_ack
    process_ack = Consumer.process_ack
    _deliver = Consumer._deliver
    _send = Consumer._send
    _next_msg = Consumer._next_msg
    _run_new = Consumer._run_new
    _run_sink = Consumer._run_sink
    _propose_run = Consumer._propose_run
    _run = Consumer._run  # (no waiting requests to tell other members of: consumer_pulls)
    _process_waiting = Consumer._process_waiting


def _committed_scan(c: Any) -> int:
    """The scan position the applied (committed) state gives: past everything delivered or acknowledged."""
    nxt = (max(c.dsseq, c.asflr) if c.has_state else c.asflr) + 1
    if c.pending:
        nxt = max(nxt, max(c.pending) + 1)
    return nxt


def get_state(c: Any) -> list:
    return [c.dseq, c.dsseq, c.adflr, c.asflr, [[s, p[0], p[1]] for s, p in c.pending.items()],
            [[s, n] for s, n in c.rdc.items()], c.has_state, c.ldt, c.lat, bool(c.started_by_log), c.sseq,
            sorted(c.prm)]


def set_state(c: Any, s: list) -> None:
    (c.dseq, c.dsseq, c.adflr, c.asflr, pend, rdc, c.has_state, c.ldt, c.lat, started) = s[:10]
    c.pending = {int(a): [int(b), int(t)] for a, b, t in pend}
    c.rdc = {int(a): int(n) for a, n in rdc}
    c.started_by_log = bool(started)
    if len(s) > 10:
        c.sseq = int(s[10])
    # (a build before C_WAITING neither writes nor reads the waiting pull requests: consumer_pulls)
    c.prm = {str(r) for r in s[11]} if len(s) > 11 else set()


LOST_QUORUM_EVERY = 10.0  # seconds: a group's quorum-lost advisories are throttled after the first (as nats-server)


def send_quorum_lost(cs: Any, jsa: Any, what: str, build: Any) -> None:
    """The leader of ``what`` (``'<account> > <stream>[ > <consumer>]'``) stepped down for lost quorum: warn and
    publish ``build(account)`` -> (subject, body) in the stream's account (no ``account`` field) and, naming the
    account, in the system account, as nats-server does."""
    cs.js.log.warn(f"JetStream cluster {what} has NO quorum, stalled")
    send_advisory(cs, jsa, build)


def send_advisory(cs: Any, jsa: Any, build: Any) -> None:
    """Publish ``build(account)`` -> (subject, body) in the stream's account (no ``account`` field) and, naming
    the account, in the system account when someone there listens."""
    adv = cs.js.advisories
    if jsa.account is not getattr(cs.server.sysacc, "account", None):
        subj, body = build("")
        adv._send(jsa, subj, body)
    sysacc = cs.server.sysacc
    subj, body = build(jsa.account.name)
    if sysacc.interest(subj):
        sysacc.send(subj, body)


class SoloPersist:
    """A solo R1 consumer's state in its stream store's consumer state (``store.consumer_store(name)``, flushed
    and synced with the stream), as a lone server's consumer keeps it (rillet.jetstream.consumer.persist.ConsumerPersist;
    the config stays in the consumer's assignment)."""

    def __init__(self, store: Any, name: str) -> None:
        self.store = store
        self.name = name

    def state(self) -> Any:
        return self.store.consumer_store(self.name).state()

    def write_meta(self, c: Any) -> None:
        pass  # (the config is the assignment's)

    def write_state(self, state: Any) -> None:
        cs = self.store.consumer_store(self.name)
        cs.update(state)
        cs.flush()

    def delete(self) -> None:
        from rillet.jetstream.store.base import ErrStoreClosed
        try:
            cs = self.store.consumer_store(self.name)
        except ErrStoreClosed:
            return  # (the stream's store went first, and its consumer states with it)
        cs.delete()


class ConsumerReplica(ConsumerLossMixin):
    """One consumer's replica on this server: its RaftGroup, RaftLog and ClusteredConsumer (loss reports:
    consumer_loss.py)."""

    def __init__(self, rep: Any, ca: Any) -> None:
        from rillet.jetstream.api.consumers import config_from_dict
        from rillet.jetstream.cluster.group import RaftGroup
        from rillet.jetstream.cluster.log import RaftLog
        self.rep = rep
        self.cs = rep.cs
        self.ca = ca
        self.name = ca.name
        js = self.cs.js
        self.log = RaftLog(self._apply, ca.group.name, js.log)
        self.log.on_leader_change = self._leader_changed
        self.log.filter = self._filter
        self.group = RaftGroup(self.cs.server, ca.group.name, list(ca.group.peers), js.store_dir,
                               apply=self.log.group_apply, on_leader_change=self.log.group_leader_change,
                               snapshot=self.snapshot, restore=self.restore, sync=js.sync_interval,
                               applied_floor=self._solo_floor, account=rep.jsa.account.name)
        self.log.bind(self.group)
        self.group.lazy_commits = self._lazy_commits
        self.log.solo_apply = self._apply_solo
        # R1 solo (see solo_check): the consumer's state in the stream store's consumer state while the group
        # runs without its log, as a lone server keeps it; a state found there at the start is the newest
        self.persist: SoloPersist | None = None
        self._solo_state: Any = None
        self.syncing = False  # a SYNCED entry proposed, not applied yet
        self._solo_timer: Any = None  # solo_check again (it could not go solo yet)
        self.group.on_quorum_lost = self._quorum_lost
        self.group.on_data_lost = self._data_lost
        # committed entries of the consumer's group found gone from every member (acks, deliveries): kept in the
        # group's directory (lossreport), shown in consumer info's cluster.lost and /healthz
        from rillet.jetstream.cluster import lossreport
        self.data_lost: dict | None = None if self.group.memory else lossreport.load_or_flag(self.group.dir, js.log)
        self.lost_quorum_sent = -LOST_QUORUM_EVERY
        self.created_at = js.loop.time()
        self.leader = False
        self._catch_up: Any = None  # (a task: _lead_when_stream_current)
        self._lead_waiters: list[tuple[float, Any]] = []  # (deadline, callback): when_leader during _catch_up
        # the info of a new consumer as its first leader started it, before any delivery: the create's answer
        # (take_initial_info), as nats-server's consumer leader answers with its initial info
        self._initial_info: Optional[dict] = None
        self.closed = False
        self.deleting = False
        self.applied_since_snap = 0
        self.delete_requested = 0.0
        self.c = self._new(config_from_dict(ca.config), ca.created or time.time_ns())
        self._load_solo_state()
        rep.stream.consumers[self.name] = self.c
        self._start_task = js.loop.create_task(self._start())

    def _new(self, cfg: Any, created: int) -> ClusteredConsumer:
        c = ClusteredConsumer(self.rep.stream, cfg, self.name, created)
        c.clog = self.log
        c.creplica = self
        c.persist = self.persist
        return c

    async def _start(self) -> None:
        await self.group.start_asset(f"consumer '{self.rep.jsa.account.name} > {self.rep.name} > {self.name}'",
                                     self.cs.js.log, lambda: self.ca.group.preferred)

    # ---- apply --------------------------------------------------------------------------------------

    def _lazy_commits(self) -> bool:
        """(RaftGroup.lazy_commits) A follower's consumer state is read when it takes over, and on the stream
        leader's server for an interest or work queue stream's removals (which should follow an ack at once)."""
        return self.c.stream_retention == "limits"

    def _filter(self, index: int, target: str, entry: Entry) -> bool:
        self.applied_since_snap += 1
        if self.applied_since_snap >= COMPACT_EVERY and self.group.compact_due(self.applied_since_snap):
            self.applied_since_snap = 0
            self.group.compact()
        return True

    def _apply_solo(self, entry: Entry) -> Any:
        """A solo entry (RaftLog.solo_apply): this server leads, so ``c`` is the engine, with no ack in flight
        (ClusteredConsumer.apply_entry's engine part reduced to what applies then)."""
        c = self.c
        if entry.op == LOST:
            self._apply_lost(_dec.decode(entry.args[0]))
            return None
        res = ConsumerStateMachine.apply_entry(c, entry)
        op = entry.op
        if op == C_START or op == C_RESET:
            c.started_by_log = True
        if not c._dirty and c.persist is not None:
            c._mark_dirty()
        if c.stream_retention != "limits" and self.rep.leader:
            self._retention(c, op, entry, res)
        return res

    def _apply(self, entry: Entry) -> Any:
        c = self.c
        if entry.op == LOST:
            self._apply_lost(_dec.decode(entry.args[0]))
            return None
        if entry.op == SYNCED:
            # the leader's state when it stopped running solo: a member catches up to it (the leader has it)
            if not self.log.applying_own:
                self.restore(entry.args[0])
            self._drop_persist()  # (the log holds the state from here on)
            return None
        res = c.apply_entry(entry)
        if c.persist is not None:
            c._mark_dirty()
        if c.stream_retention != "limits" and self.rep.leader:
            self._retention(c, entry.op, entry, res)
        return res

    def _retention(self, c: ClusteredConsumer, op: int, entry: Entry, res: Any) -> None:
        """(on the stream leader's server) what an applied entry of an interest or work queue stream's consumer
        lets go."""
        rep = self.rep
        if op == C_ACK:
            if res:
                for seq in ((res,) if res.__class__ is int else res):
                    rep.retention_ack(c, seq)
        elif op == C_DELIVERED and c.ack_none:
            rep.retention_ack(c, entry.args[0])
        elif op == C_RESET and c.stream_retention == "interest":
            from rillet.jetstream import retention
            retention.on_consumer_reset(rep.stream, c, entry.args[0],
                                        lambda s: s in rep._removing or rep._retention_remove(s))

    def snapshot(self) -> bytes:
        return _enc.encode(get_state(self.c))

    def restore(self, data: bytes) -> None:
        set_state(self.c, _dec.decode(data))

    # ---- R1: no log while this server is the only member -------------------------------------------

    def _can_persist(self) -> bool:
        from rillet.jetstream.consumer.persist import persisted
        return not self.group.memory and persisted(self.rep.stream, self.c.cfg)

    def _load_solo_state(self) -> None:
        """A consumer state in the stream store (the group ran solo before this server stopped) is newer than
        the group's log: kept for ``_solo_floor``. Without the group's directory it is another consumer's of
        the same name (deleted while this server was away): removed."""
        store = self.rep.stream.store
        if self.group.memory or self.name not in store.consumer_names():
            return
        p = SoloPersist(store, self.name)
        if not os.path.isdir(self.group.dir):
            p.delete()
            return
        state = p.state()
        if state is not None:
            self.persist = self.c.persist = p
            self._solo_state = state

    def _solo_floor(self) -> int:
        """(RaftGroup.start, after the WAL's snapshot was restored) With a consumer state from solo running, that
        state is the consumer's and every entry in the WAL is already in it: none is applied again."""
        state, self._solo_state = self._solo_state, None
        if state is None:
            return 0
        c = self.c
        c.apply_state(state)
        c.started_by_log = True  # (resumes from this state, not from the deliver policy)
        w = self.group.wal
        return w.last_index() if w is not None else 0

    def solo_check(self) -> None:
        """An R1 consumer (this leader is the group's only voter and its assignment wants no other) runs solo,
        as nats-server runs R1 consumers without a RAFT group: its entries apply at once, without the group's
        log and WAL (RaftLog.solo), and its state is persisted in the stream store's consumer state as on a
        lone server (a memory consumer keeps none, as there). Anything else goes through the group."""
        g = self.group
        log = self.log
        solo = (self.leader and not self.closed and g.peers == [g.id] and list(self.ca.group.peers) == [g.id]
                and (g.memory or self._can_persist()))
        n = g.node
        if solo and log.pending and not self.syncing and n is not None and not (n.conf_log and
                                                                              n.conf_log[-1][0] > n.commit):
            # entries in flight (the engine's first ones; under a steady load there always are some when a timer
            # fires, the loop turn's reads having proposed them): again as soon as the last one has applied
            log.when_drained(self.solo_check)
            solo = False
        elif solo and (log.pending or self.syncing or n is None or (n.conf_log and n.conf_log[-1][0] > n.commit)):
            # a SYNCED or a membership change not applied yet: again shortly (one timer at a time)
            solo = False
            if self._solo_timer is None:
                self._solo_timer = self.cs.js.loop.call_later(0.05 if log.pending else 0.25, self._solo_again)
        if solo and self.persist is None and not g.memory:
            self.persist = SoloPersist(self.rep.stream.store, self.name)
            c = self.c
            c.persist = self.persist
            c._dirty = True
            c.flush_state()  # (on disk before the first entry that the log does not hold)
        self.set_solo(solo)

    def set_solo(self, solo: bool) -> None:
        """The log's ``solo`` and the engine's class with it (SoloConsumer while solo)."""
        self.log.solo = solo
        c = self.c
        # (ClusteredConsumer is right either way, its overrides asking the log; deliveries still queued for
        # their commit keep it)
        want = SoloConsumer if solo and c.engine and not c._outq else ClusteredConsumer
        if c.__class__ is not want:
            c.__class__ = want
        # solo, new messages go out in runs as on a lone server (one C_DELIVERED per run, applied at once:
        # DeliveryMixin._run_new); with members, a pull consumer's too (one C_DELIVERED per run, its frames held
        # until it commits: ClusteredConsumer._run_new), else one by one (decided per delivery)
        if want is SoloConsumer:
            c._runs = not c.rate_bps and not c.replay_original and not c.headers_only
        else:
            c._runs = c._runs_ok()

    def _solo_again(self) -> None:
        self._solo_timer = None
        self.solo_check()

    def mark_synced(self) -> None:
        """Before this leader changes the group's members: stop running solo and, when entries were applied
        solo (or the state came from the store at the start), propose the consumer's state (SYNCED) for new
        members to catch up to before the entries that follow it."""
        log = self.log
        self.set_solo(False)
        if self.syncing or not log.is_leader or not (log.solo_applied or self.persist is not None):
            return
        self.syncing = True
        n, log.solo_applied = log.solo_applied, 0

        def done(_: Any, res: Any, err: BaseException | None) -> None:
            self.syncing = False
            if err is not None:
                log.solo_applied += n or 1  # (proposed again at the next change)
                if not isinstance(err, NotLeader):
                    rep = self.rep
                    self.cs.js.log.error(f"JetStream cluster: consumer '{rep.jsa.account.name} > {rep.name} > "
                                         f"{self.name}': proposing its state failed: {err}")
        log.propose(Entry(SYNCED, (self.snapshot(),)), done)

    def _drop_persist(self) -> None:
        p, self.persist = self.persist, None
        if p is None:
            return
        c = self.c
        c.persist = None
        c._dirty = False
        p.delete()

    # ---- leadership ---------------------------------------------------------------------------------

    def _leader_changed(self, leader: bool) -> None:
        if self.closed:
            return
        if leader:
            if self._stream_may_lag():
                # a new consumer led on a stream follower: it starts once that replica holds what the stream
                # leader had when asked (after this consumer was created), not from an older view
                t = self._catch_up = self.cs.js.loop.create_task(self._lead_when_stream_current())
                t.add_done_callback(self._catch_up_done)
                return
            self._lead()
        else:
            self._stop_catch_up()
            self.leader = False
            self._initial_info = None
            self.set_solo(False)
            self._demote()

    def _lead(self) -> None:
        self.leader = True
        rep = self.rep
        self.cs.js.log.notice(f"JetStream cluster new consumer leader for "
                              f"'{rep.jsa.account.name} > {rep.name} > {self.name}'")
        fresh = not self.c.started_by_log
        self._promote()
        # (the engine delivers from the next loop turn: this is the state before any message went out)
        self._initial_info = self.c.info() if fresh else None
        self.solo_check()
        self._advisory()
        self._lost_on_lead()
        waiters, self._lead_waiters = self._lead_waiters, []
        now = self.cs.js.loop.time()
        for deadline, cb in waiters:
            if now <= deadline and self.leader:
                try:
                    cb()
                except Exception as e:
                    self.cs.js.log.error(f"JetStream cluster consumer '{rep.jsa.account.name} > {rep.name} > "
                                         f"{self.name}': leader waiter failed: {e!r}")

    # ---- a new consumer led on a stream follower ----------------------------------------------------

    def _stream_may_lag(self) -> bool:
        """This server's stream replica may not hold everything the stream acknowledged before this consumer
        was created: the consumer starts from its deliver policy (no state in its log yet) and the stream's
        leader is another server's replica."""
        rep = self.rep
        return (not self.c.started_by_log and not rep.leader and not rep.closed and len(rep.group.peers) > 1
                and getattr(self.cs.js, "cluster", None) is not None)  # (the meta layer answers the stream info)

    async def _lead_when_stream_current(self) -> None:
        """Ask the stream leader for its state (``$JSC.SI``, sent after this consumer's assignment applied here,
        so after every PubAck its creator saw), wait until this server's replica holds as much (its last
        sequence, and its first for purges and limits), then lead: the deliver policy's start, the pending
        count and the create's answer then reflect every acknowledged message. Bounded by STREAM_CATCH_UP_WAIT
        (a stream without a reachable leader, a replica far behind): past it the consumer starts from what this
        replica holds, warned, as nats-server would start at once."""
        from rillet.jetstream.api.cluster import INFO_TIMEOUT
        loop = self.cs.js.loop
        rep = self.rep
        deadline = loop.time() + STREAM_CATCH_UP_WAIT
        acc = rep.jsa.account.name
        target = None
        while target is None and not rep.leader and not rep.closed:
            left = deadline - loop.time()
            if left <= 0:
                break
            info = await self.cs.js.cluster.info.stream_info(acc, rep.name, min(left, INFO_TIMEOUT))
            if info is not None:
                target = info.get("state") or {}
        caught_up = rep.leader
        if target is not None and not caught_up:
            last, first = int(target.get("last_seq") or 0), int(target.get("first_seq") or 0)
            while not rep.closed:
                store = rep.stream.store
                if rep.leader or (store.last_seq >= last and store.first_seq >= first):
                    caught_up = True
                    break
                if loop.time() >= deadline:
                    break
                await asyncio.sleep(CATCH_UP_POLL)
        self._catch_up = None
        if self.closed or not self.group.is_leader:
            return
        if not caught_up and not rep.closed:
            self.cs.js.log.warn(
                f"JetStream cluster consumer '{acc} > {rep.name} > {self.name}': this server's stream replica "
                f"did not catch up with the stream leader within {STREAM_CATCH_UP_WAIT:g}s; the consumer starts "
                f"from what it holds" + ("" if target is not None else " (the stream leader did not answer)"))
        self._lead()

    def take_initial_info(self) -> dict:
        """The info a create's answer shows (once): the consumer as its first leader started it (nothing
        delivered yet, every message from its start pending), else its current info. The meta leader asks for
        it after the assignment committed, when this leader may have delivered everything already: the current
        info then said 0 pending, and that answer, relayed by the meta leader, can reach the client before the
        messages do (a reader trusting num_pending read nothing; issue 24)."""
        info, self._initial_info = self._initial_info, None
        return info if info is not None else self.c.info()

    def _catch_up_done(self, t: "asyncio.Task[None]") -> None:
        if not t.cancelled() and t.exception() is not None:
            self.cs.js.log.error(f"JetStream cluster consumer '{self.rep.jsa.account.name} > {self.rep.name} > "
                                 f"{self.name}': waiting for its stream replica failed: {t.exception()!r}; "
                                 f"it starts from what the replica holds")
            if self._catch_up is t:
                self._catch_up = None
            if not self.closed and self.group.is_leader and not self.leader:
                self._lead()  # (never left leaderless by the wait)

    def _stop_catch_up(self) -> None:
        t, self._catch_up = self._catch_up, None
        if t is not None:
            t.cancel()
        self._lead_waiters = []

    def when_leader(self, cb: Any, within: float) -> bool:
        """(ClusteredStreams.when_leader, for the meta leader's info request of a create's answer) ``cb`` once
        this replica leads the consumer (its group elected this member and, for a new consumer on a stream
        follower, its stream replica caught up), if within ``within`` seconds. False: nothing to wait for."""
        if self.leader or self.closed:
            return False
        loop = self.cs.js.loop
        deadline = loop.time() + within
        if self._catch_up is not None:
            self._lead_waiters.append((deadline, cb))
            return True

        def elected() -> None:
            if self.leader:
                cb()
            elif self._catch_up is not None:
                self._lead_waiters.append((deadline, cb))
        return self.group.when_leader(elected, within)

    def _swap(self) -> ClusteredConsumer:
        old = self.c
        c = self._new(old.cfg, old.created)
        set_state(c, get_state(old))
        c.pause_until_ns = getattr(old, "pause_until_ns", 0)
        self.c = c
        st = self.rep.stream
        if st.consumers.get(self.name) is old or self.name not in st.consumers:
            st.consumers[self.name] = c
        return c

    def _promote(self) -> None:
        """This server leads the consumer: a fresh engine over the replicated state starts delivering."""
        old = self.c
        c = self._swap()
        c.engine = True
        if not c.started_by_log:
            c.select_start()
        else:
            c.sseq = max(old.sseq, _committed_scan(c))
            c.npc_dirty = True
        c.start()
        c.announce()  # (the pull requests that waited at the previous leader: 409 Leadership Change)

    def _demote(self) -> None:
        old = self.c
        was_engine = old.engine
        if old.engine and not old.closed:
            if old.waiting:
                # the pull requests waiting here are told to go again (nats.py takes a 409 for a temporary
                # error: its fetch asks again, reaching the new leader), not left until they expire
                hdr = (b"NATS/1.0 409 Consumer Deleted\r\n\r\n" if self.deleting
                       else b"NATS/1.0 409 Leadership Change\r\n\r\n")
                for wr in old.waiting:
                    Consumer._send(old, wr.reply_b, None, hdr, b"")
                old.waiting.clear()
                self.cs.server.schedule_flush()
            old.removing = True  # (a stop, not a delete)
            old.stop(delete=False, advisory=False)
        c = self._swap()
        c.engine = False
        if was_engine:
            # the engine's scan position counts deliveries that never committed: from here on the position
            # is what the committed entries say (else, leading again, it would skip those messages)
            c.sseq = _committed_scan(c)

    def _advisory(self) -> None:
        from rillet.jetstream.cluster import monitor
        srv = self.cs.server
        reps = self.rep.peer_states(self.group)
        now = time.time_ns()
        send_advisory(self.cs, self.rep.jsa, lambda acc: monitor.consumer_leader_elected_advisory(
            acc, self.rep.name, self.name, srv.name, reps, now))

    def _quorum_lost(self) -> None:
        from rillet.jetstream.cluster import monitor
        now = self.cs.js.loop.time()
        if self.closed or now - self.lost_quorum_sent < LOST_QUORUM_EVERY:
            return
        self.lost_quorum_sent = now
        rep = self.rep
        send_quorum_lost(self.cs, rep.jsa, f"consumer '{rep.jsa.account.name} > {rep.name} > {self.name}'",
                         lambda acc: monitor.consumer_quorum_lost_advisory(
                             acc, rep.name, self.name, rep.peer_states(self.group), time.time_ns(),
                             self.cs.js.domain or ""))

    def request_delete(self) -> None:
        """The engine found the consumer inactive: ask the meta leader to remove it (again after 2 s)."""
        now = self.cs.js.loop.time()
        if now - self.delete_requested < 2.0:
            return
        self.delete_requested = now
        jsa = self.rep.jsa
        subj = f"{jsa.api_prefixes()[0]}.CONSUMER.DELETE.{self.rep.name}.{self.name}"
        jsa.ic.publish(subj.encode(), None, b"")
        self.c._arm_delete(2.0)  # (checked again: the removal may not have reached the meta leader)

    # ---- config, info, removal ----------------------------------------------------------------------

    def update(self, ca: Any) -> None:
        from rillet.jetstream.api.consumers import config_from_dict
        self.ca = ca
        cfg = config_from_dict(ca.config)
        c = self.c
        if cfg == c.cfg:
            return
        if c.engine:
            c.update_config(cfg)
        else:
            c.cfg = cfg
            c._apply_cfg()

    def leaderless(self) -> bool:
        return self.rep.cs.group_leaderless(self.group, self.created_at)

    def cluster_info(self) -> dict:
        d = self.rep.group_cluster_info(self.group, self.ca.group.desired, self.ca.group.peers)
        if self.data_lost is not None:
            d["lost"] = dict(self.data_lost)
        return d

    async def stop(self, delete: bool = False) -> None:
        if self.closed:
            return
        self._stop_catch_up()
        was = self.leader
        if was:
            self.deleting = delete
            self._leader_changed(False)
        self.closed = True
        self._stop_lost()
        if self._solo_timer is not None:
            self._solo_timer.cancel()
            self._solo_timer = None
        c = self.c
        c.removing = True
        c.stop(delete=delete, advisory=delete and was)
        st = self.rep.stream
        if st.consumers.get(self.name) is c:
            del st.consumers[self.name]
        await self.group.stop(delete=delete)
