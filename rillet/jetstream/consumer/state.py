"""A consumer's replicated state: what every replica of a consumer holds, changed only by applying entries.

    delivered   ``dseq`` (the next consumer sequence), ``dsseq`` (the highest stream sequence delivered),
                ``ldt`` (last delivery, ns), ``has_state``
    ack floor   ``adflr`` / ``asflr`` (consumer / stream sequence below which everything is acknowledged),
                ``lat`` (last ack, ns)
    pending     ``pending``: stream seq -> [consumer seq, delivery time ns], delivered and not yet acked
    redelivery  ``rdc``: stream seq -> deliveries so far, for messages delivered more than once

``ConsumerStateMachine.apply_entry`` is the only code that changes these fields (besides ``restore`` from
the persisted state, a snapshot). The consumer leader's delivery engine (``rillet.jetstream.consumer.
Consumer``, a subclass) proposes the entries below through its log and keeps everything else to itself:
the scan position (``sseq``), pull requests, push flow control, timers, the redelivery queue, heartbeats.
Entries carry what the leader decided (times, and ``snext``: the engine's scan position, which the floors
move to when nothing is pending), so every replica ends in the same state.

    C_START (sseq,)                      a new consumer starts at stream sequence sseq
    C_DELIVERED (sseq, dseq, dc, ts)     sseq went out as delivery dseq, the dc-th time, at ts; with a list
                                         of stream seqs for sseq: a run, delivered as dseq, dseq + 1, ...
    C_UNDELIVERED (sseq, dc)             nobody received that delivery: its count goes back to dc
    C_ACK (sseq, dseq, ts, snext)        acked at ts (policy explicit: sseq; all: everything up to sseq); on one
                                         server only, explicit, a list of seqs for sseq (dseq 0): each acked
    C_NAK (sseq, ts)                     pending sseq counts as delivered at ts (NAK with delay, progress)
    C_DUE (seqs, off)                    ack wait ran out: those pending seqs' delivery times move by off
    C_GONE (sseq, snext)                 the stream removed sseq: no longer pending (counts as acked)
    C_MAXDELIV (sseq, dc, snext)         sseq reached max_deliver at dc deliveries: no longer pending
    C_PURGED (first, seqs, snext)        the stream was purged below first; seqs (pending) are gone
    C_DROP (seqs, snext)                 forget stale pending seqs (below the stream's first or the floor)
    C_RESET (sseq,)                      CONSUMER.RESET: start over at stream sequence sseq, nothing pending,
                                         nothing delivered (consumer sequences from 1 again)
    C_WAITING (added, removed)           (replicated consumers) reply subjects of pull requests now waiting at
                                         the leader / no longer waiting: ``prm``, which a new leader answers
                                         with 409 Leadership Change (rillet.jetstream.cluster.consumer_pulls)

Apply returns what the leader needs afterwards (C_ACK: the stream sequence acknowledged, 0 for none, with
ack policy explicit; the list of them with policy all or a list of seqs; for retention).
"""
from __future__ import annotations

from typing import Any

from rillet.jetstream.log import Entry

C_START = Entry.C_START
C_DELIVERED = Entry.C_DELIVERED
C_UNDELIVERED = Entry.C_UNDELIVERED
C_ACK = Entry.C_ACK
C_NAK = Entry.C_NAK
C_DUE = Entry.C_DUE
C_GONE = Entry.C_GONE
C_MAXDELIV = Entry.C_MAXDELIV
C_PURGED = Entry.C_PURGED
C_DROP = Entry.C_DROP
C_RESET = Entry.C_RESET
C_WAITING = Entry.C_WAITING

_NONE: list[int] = []


class ConsumerStateMachine:
    """The replicated part of a consumer. A follower runs this class alone (``ConsumerStateMachine(
    ack_policy)``); the leader runs ``Consumer``, which adds the delivery engine."""

    ack_policy: str = "none"
    ack_none: bool = True

    def __init__(self, ack_policy: str = "none") -> None:
        self.ack_policy = ack_policy
        self.ack_none = ack_policy == "none"
        self._init_replicated()

    def _init_replicated(self) -> None:
        self.dseq = 1
        self.dsseq = 0  # highest stream seq delivered (what nats-server reports as delivered.stream_seq)
        self.adflr = 0
        self.asflr = 0
        self.pending: dict[int, list[int]] = {}
        self.rdc: dict[int, int] = {}   # stream seq -> deliveries so far, for messages delivered more than once
        self.has_state = False  # delivered or acked anything yet
        self.ldt = 0  # last delivery (ns)
        self.lat = 0  # last ack (ns)
        self.prm: set[str] = set()  # reply subjects of the leader's waiting pull requests (C_WAITING)

    def replicated_state(self) -> tuple:
        """Everything replicated, comparable between replicas."""
        return (self.dseq, self.dsseq, self.adflr, self.asflr, {s: list(p) for s, p in self.pending.items()},
                dict(self.rdc), self.has_state, self.ldt, self.lat)

    # ---- apply ----------------------------------------------------------------------------------------

    def apply_entry(self, entry: Entry) -> Any:
        op = entry.op
        a = entry.args
        if op == C_DELIVERED:
            seq, dseq, dc, ts = a
            if seq.__class__ is not int:
                return self._apply_run(seq, dseq, dc, ts)
            self.dseq = dseq + 1
            self.ldt = ts
            if seq > self.dsseq:
                self.dsseq = seq
            self.has_state = True
            if dc > 1:
                self.rdc[seq] = dc
            if self.ack_none:
                self.adflr, self.asflr = dseq, seq
            else:
                p = self.pending.get(seq)
                if p is not None:
                    p[1] = ts
                else:
                    self.pending[seq] = [dseq, ts]
            return None
        if op == C_ACK:
            if self.ack_policy == "explicit":  # one message (inline: the hot path); all, flow_control: up to
                sseq = a[0]
                if sseq.__class__ is list:
                    return self._apply_acks(sseq, a[2], a[3])
                p = self.pending.pop(sseq, None)
                if p is not None:
                    self._move_ack_floor(p[0], sseq, a[3])
                if self.rdc:
                    self.rdc.pop(sseq, None)
                self.lat = a[2]
                self.has_state = True
                return sseq if p is not None else 0
            return self._apply_ack_all(*a)
        if op == C_NAK:
            p = self.pending.get(a[0])
            if p is not None:
                p[1] = a[1]
            return None
        if op == C_DUE:
            seqs, off = a
            for seq in seqs:
                p = self.pending.get(seq)
                if p is not None:
                    p[1] += off
            return None
        if op == C_GONE:
            seq, snext = a
            p = self.pending.pop(seq, None)
            self.rdc.pop(seq, None)
            if p is not None:
                # a removed pending message counts as acknowledged
                if not self.pending:
                    self.adflr, self.asflr = self.dseq - 1, snext - 1
                elif p[0] == self.adflr + 1:
                    self._move_ack_floor(p[0], seq, snext)
                return True
            return False
        if op == C_MAXDELIV:
            seq, dc, snext = a
            p = self.pending.pop(seq, None)
            self.rdc[seq] = dc
            if p is not None:
                self._move_ack_floor(p[0], seq, snext)
            return None
        if op == C_UNDELIVERED:
            seq, dc = a
            if dc <= 1:
                self.rdc.pop(seq, None)
            else:
                self.rdc[seq] = dc
            return None
        if op == C_PURGED:
            first, seqs, snext = a
            for seq in seqs:
                self.pending.pop(seq, None)
                self.rdc.pop(seq, None)
            for seq in [s for s in self.rdc if s < first]:
                self.rdc.pop(seq, None)
            if not self.pending:
                self.adflr, self.asflr = self.dseq - 1, snext - 1
            else:
                if self.asflr < first - 1:
                    self.asflr = first - 1
                low = min(self.pending)
                self.adflr, self.asflr = self.pending[low][0] - 1, low - 1
            if self.has_state and snext - 1 > self.dsseq:
                self.dsseq = snext - 1  # nats-server rewrites its delivered state from the scan position
            return None
        if op == C_DROP:
            seqs, snext = a
            for seq in seqs:
                self.pending.pop(seq, None)
                self.rdc.pop(seq, None)
            if not self.pending:
                self.adflr, self.asflr = self.dseq - 1, snext - 1
            return None
        if op == C_RESET:
            sseq = a[0]
            self.pending = {}
            self.rdc = {}
            self.dseq = 1
            self.dsseq = sseq - 1
            self.adflr, self.asflr = 0, sseq - 1
            self.ldt = self.lat = 0
            self.has_state = True  # delivered.stream_seq reports sseq - 1 from now on
            return sseq
        if op == C_WAITING:
            added, removed = a
            prm = self.prm
            for r in removed:
                prm.discard(r)
            prm.update(added)
            return None
        if op == C_START:
            sseq = a[0]
            self.dseq = 1
            self.adflr = 0
            self.asflr = sseq - 1
            return None
        raise ValueError(f"unknown consumer entry op {op}")

    def _apply_run(self, seqs: list[int], dseq: int, dc: int, ts: int) -> None:
        """C_DELIVERED of a run: stream seqs (ascending) delivered as dseq, dseq + 1, ..., all at ts, all
        the dc-th time: the state that one C_DELIVERED per message leaves."""
        n = len(seqs)
        if not n:
            return None
        last = seqs[-1]
        self.dseq = dseq + n
        self.ldt = ts
        top = max(seqs)
        if top > self.dsseq:
            self.dsseq = top
        self.has_state = True
        if dc > 1:
            for seq in seqs:
                self.rdc[seq] = dc
        if self.ack_none:
            self.adflr, self.asflr = dseq + n - 1, last
            return None
        pending = self.pending
        for seq in seqs:
            p = pending.get(seq)
            if p is not None:
                p[1] = ts
            else:
                pending[seq] = [dseq, ts]
            dseq += 1
        return None

    def _apply_acks(self, seqs: list[int], ts: int, snext: int) -> list[int]:
        """C_ACK of several explicit acks at once (``AckMixin.on_acks``, one server only): each as the one-message
        case; returns the sequences that were pending."""
        pending = self.pending
        rdc = self.rdc
        acked = []
        for sseq in seqs:
            p = pending.pop(sseq, None)
            if p is not None:
                # (_move_ack_floor's usual case inline: the floor's delivery acked, its scan's first step finding
                # the next one still pending; any other through it)
                q = pending.get(sseq + 1) if p[0] == self.adflr + 1 else None
                if q is not None and sseq < self.dsseq and self.dsseq + 1 - sseq <= 2 * len(pending):
                    self.adflr, self.asflr = q[0] - 1, sseq
                else:
                    self._move_ack_floor(p[0], sseq, snext)
                acked.append(sseq)
            if rdc:
                rdc.pop(sseq, None)
        self.lat = ts
        self.has_state = True
        return acked

    def _apply_ack_all(self, sseq: int, dseq: int, ts: int, snext: int) -> list[int]:
        if dseq <= self.adflr or sseq <= self.asflr:
            return _NONE
        self.adflr, self.asflr = dseq, sseq
        acked = [s for s in self.pending if s <= sseq]
        for seq in acked:
            del self.pending[seq]
            self.rdc.pop(seq, None)
        self.lat = ts
        self.has_state = True
        return acked

    def _move_ack_floor(self, dseq: int, sseq: int, snext: int) -> None:
        pending = self.pending
        if not pending:
            self.adflr, self.asflr = self.dseq - 1, snext - 1
        elif dseq == self.adflr + 1:
            self.adflr, self.asflr = dseq, sseq
            # advance to just below the lowest still-pending delivery (all pending seqs are <= dsseq)
            top = self.dsseq + 1
            if top - sseq <= 2 * len(pending):
                for ss in range(sseq + 1, top):
                    p = pending.get(ss)
                    if p is not None:
                        self.adflr, self.asflr = p[0] - 1, ss - 1
                        break
            else:
                low = min(pending)
                p = pending[low]
                self.adflr, self.asflr = p[0] - 1, low - 1
