"""Push consumers: interest in the deliver subject, flow control, idle heartbeats (a mixin of Consumer)."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from rillet.jetstream import headers as H

from rillet.jetstream.consumer.common import (LAST_CONSUMER, LAST_STREAM, CONSUMER_STALLED, INTEREST_POLL, _NAME_CHARS)

if TYPE_CHECKING:
    pass



class PushMixin:
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

