"""Acks, naks, terms and progress, and the redelivery of what was not acked in time (a mixin of Consumer)."""
from __future__ import annotations

import asyncio
import json
import os
import random
from time import time_ns  # (stream.now_ns, without the call between)
from typing import TYPE_CHECKING, Any

from rillet.gocompat.gotime import format_time
from rillet.jetstream import retention
from rillet.jetstream.consumer.state import (C_ACK, C_DROP, C_DUE, C_GONE, C_NAK)
from rillet.jetstream.log import Entry, SingleNodeLog
from rillet.jetstream.stream import now_ns

from rillet.jetstream.consumer.common import (_ack_numbers)

if TYPE_CHECKING:
    pass



_NO_SUBJECTS: list[bytes] = []  # (never appended to)


class AckMixin:
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

    def on_acks(self, subjects: list[bytes], sseqs: list[int] | None = None) -> None:
        """Plain acks (an empty body, no reply) of these ack subjects, in order: what ``_on_ack`` does with each,
        the acknowledged messages applied as one C_ACK entry (a list of stream sequences) where the consumer's
        log is this server's alone (``SingleNodeLog``: the entry is never encoded or sent) and acks are
        explicit. Used for the PUBACKs an MQTT session's connection read in one go. ``sseqs``: the stream
        sequence in each subject, already read by the caller from the subject this consumer made (0: the subject
        has no ack numbers, skipped as ``_on_ack`` skips it); the subjects are then not parsed again, unless
        acks are sampled (which needs each one's delivery count)."""
        if self.closed:
            return
        if self.clog.__class__ is not SingleNodeLog or self.ack_policy != "explicit" or self.flow_control:
            for subject in subjects:
                self._on_ack(None, None, subject, None, -1, b"")
            return
        pending = self.pending
        top = self.sseq
        full = self.maxp and len(pending) >= self.maxp  # (as process_ack's kick: the first ack that frees room)
        need_kick = False
        seqs = []
        if sseqs is not None and not self.sfreq:
            for sseq in sseqs:  # (the loop below without the parse and the sampling)
                if not sseq or sseq >= top:
                    continue
                if full and sseq in pending:
                    need_kick = True
                if self.rdqi:
                    self._remove_rdq(sseq)
                seqs.append(sseq)
            subjects = _NO_SUBJECTS
        for subject in subjects:
            nums = _ack_numbers(subject)
            if nums is None:
                continue
            dc, sseq, _ = nums
            if sseq >= top:
                continue
            p = pending.get(sseq)
            if p is not None:
                if self.sfreq:
                    self._sample(sseq, p[0], dc, p[1])
                if full:
                    need_kick = True
            if self.rdqi:
                self._remove_rdq(sseq)
            seqs.append(sseq)
        if not seqs:
            return
        if need_kick or self.retention != "limits":
            self.clog.propose(Entry(C_ACK, (seqs, 0, now_ns(), self.sseq), need_kick), self._c_done_cb)
        else:
            self.clog.propose(Entry(C_ACK, (seqs, 0, time_ns(), self.sseq)))
            if self.persist is not None:
                self._mark_dirty()
        if self.dthresh_s and not self.is_push and self._delete_timer is None:
            self._arm_delete(self.dthresh_s)

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
        try:
            await self.loop.run_in_executor(None, self.persist.write_state, self.get_state(), True)
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
            if self.rdqi:
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
            self.clog.propose(Entry(C_ACK, (sseq, dseq, time_ns(), self.sseq)))
            if self.persist is not None:
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
                if res.__class__ is int:
                    retention.on_ack(self.stream, self, res)
                else:  # (ack policy all, or several explicit acks: on_acks)
                    retention.on_acks(self.stream, self, res)
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

