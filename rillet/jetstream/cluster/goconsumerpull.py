"""Pull requests of a Go consumer group led by Rillet (``PullRequests``, a mixin of
rillet.jetstream.cluster.goconsumerlead.ConsumerLeading): ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``
parsed and checked as nats-server's processNextMsgRequest (batch, expires, no_wait, max_bytes, idle_heartbeat,
the consumer's max_batch/max_expires/max_bytes/max_waiting; the same statuses), queued, proposed to the group as
they come and go (ops 12/13, as nats-server's leader shares its waiting requests), expired with 408, ended with
404 at the end of what there is for a no_wait request, and sent their heartbeats."""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Optional

from rillet.jetstream import headers as H
from rillet.jetstream.cluster import gowire as ge

__all__ = ["PullRequests"]


def _hdrs(pairs: list[tuple[str, str]], code: int, desc: str) -> bytes:
    return H.make_headers(pairs, code, desc)


class _Request:
    """A waiting pull request (times: time.monotonic())."""

    __slots__ = ("reply", "n", "b", "d", "expires", "no_wait", "hb", "hbt", "held", "done")

    def __init__(self, reply: str, n: int, b: int, expires: float, no_wait: bool, hb: float, now: float) -> None:
        self.reply, self.n, self.b, self.expires, self.no_wait = reply, n, b, expires, no_wait
        self.d = 0  # messages delivered to it
        self.hb = hb
        self.hbt = now + hb if hb else 0.0
        self.held = 0  # deliveries selected for it and waiting for their commit
        self.done = b""  # the status to send once the held ones went out (a 408 that came first)


class PullRequests:
    """The pull side of ConsumerLeading (its ``waiting`` queue, ``_propose``, ``kick``, ``num_pending``...)."""

    waiting: deque
    deliver_subject: str
    aic: Any
    _lead: Optional[list]

    # -- pull requests ---------------------------------------------------------------------------------------
    def _on_next(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if self._lead is not None and reply:
            self._next_request(reply.decode("utf-8", "surrogateescape"), bytes(msg[hdr:]) if hdr > 0 else bytes(msg))

    def _next_request(self, reply: str, body: bytes) -> None:
        """nats-server's processNextMsgRequest (the same checks and statuses as rillet's own pull consumers)."""
        from rillet.jetstream.consumer.pull import read_next_request, request_limits_error
        cfg = self._cfg()

        def err(code: int, desc: str) -> None:
            h = _hdrs([], code, desc)
            self.aic.publish(reply.encode(), None, h, len(h))

        d, batch, expires, max_bytes, no_wait, hb, refused = read_next_request(body, bool(self.deliver_subject))
        if refused is not None:
            err(*refused)
            return
        if d is not None:
            if set(d) & {"group", "min_pending", "min_ack_pending", "id", "priority"}:
                err(400, "Bad Request - Not a Priority Group Consumer")  # (no priority groups here: unsupported())
                return
            if hb > 0 and hb * 2 > expires:
                err(400, "Bad Request - heartbeat value too large")
                return
        max_batch, max_exp = int(cfg.get("max_batch") or 0), int(cfg.get("max_expires") or 0)
        max_b, max_waiting = int(cfg.get("max_bytes") or 0), int(cfg.get("max_waiting") or 0)
        bad = request_limits_error(batch, expires, max_bytes, max_batch, max_exp, max_b)
        if bad is not None:
            err(409, bad)
            return
        if no_wait:
            pending = self.num_pending() + len(self.rdq)
            if pending == 0 and not expires:
                err(404, "No Messages")
                return
            if pending > 0 and pending < sum(w.n for w in self.waiting):
                err(408, "Requests Pending")
                return
        if max_waiting > 0 and len(self.waiting) >= max_waiting:
            if not hb:
                err(409, "Exceeded MaxWaiting")
            return
        now = time.monotonic()
        wr = _Request(reply, max(batch, 1), max_bytes, now + expires / 1e9 if expires else 0.0, no_wait, hb / 1e9,
                      now)
        self.waiting.append(wr)
        self._propose(ge.PendingRequest(True, reply).encode())
        self.kick()

    def _end_request(self, wr: _Request, status: bytes) -> None:
        if wr in self.waiting:
            self.waiting.remove(wr)
            self._propose(ge.PendingRequest(False, wr.reply).encode())
        if status:
            if wr.held:
                wr.done = status  # (after the deliveries that wait for their commit, as nats-server)
            else:
                self.aic.publish(wr.reply.encode(), None, status, len(status))

    def _expire_requests(self, eos: bool = False) -> None:
        """Expired requests end with a 408; at the end of what there is to deliver (``eos``) a no_wait request
        ends with a 404 unless it has an expiry and got nothing yet (nats-server's processWaiting)."""
        now = time.monotonic()
        for wr in list(self.waiting):
            if wr.expires and now >= wr.expires:
                self._end_request(wr, _hdrs([("Nats-Pending-Messages", str(wr.n)),
                                             ("Nats-Pending-Bytes", str(wr.b))], 408, "Request Timeout"))
            elif eos and wr.no_wait and (not wr.expires or wr.d > 0):
                self._end_request(wr, _hdrs([], 404, "No Messages"))
            elif wr.hbt and now >= wr.hbt:
                h = _hdrs([], 100, "Idle Heartbeat")
                self.aic.publish(wr.reply.encode(), None, h, len(h))
                wr.hbt = now + wr.hb

    def _arm_requests(self) -> None:
        times = [t for wr in self.waiting for t in (wr.expires, wr.hbt) if t]
        if times:
            self._arm("requests", min(times) - time.monotonic() + 0.0005, self.kick)
