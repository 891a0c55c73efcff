"""The delivery pass: the next message to hand out (new or redelivered), sent to a push subject or a waiting pull
request, counted and recorded as delivered (a mixin of Consumer)."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from rillet.jetstream import headers as H
from rillet.jetstream.consumer.state import (C_DELIVERED, C_MAXDELIV, C_UNDELIVERED)
from rillet.jetstream.log import Entry
from rillet.jetstream.stream import now_ns

from rillet.jetstream.consumer.common import (PENDING_MSGS, PENDING_BYTES, RUN_BUDGET, _clock, _headers_only, _ack_reply)

if TYPE_CHECKING:
    pass



class DeliveryMixin:
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

