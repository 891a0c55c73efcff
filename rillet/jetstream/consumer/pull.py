"""Pull consumers: requests (``$JS.API.CONSUMER.MSG.NEXT``) parsed, queued as waiting requests, served, expired
and sent heartbeats (a mixin of Consumer)."""
from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Any

from rillet.gocompat.gotime import format_duration
from rillet.gocompat.jsoncodec import GoJSONError, check_one_value
from rillet.jetstream import headers as H

from rillet.jetstream.consumer.common import (PENDING_MSGS, PENDING_BYTES, _clock)

if TYPE_CHECKING:
    pass




def read_next_request(body: bytes, push: bool) -> tuple[dict | None, int, int, int, bool, int,
                                                       tuple[int, str] | None]:
    """A pull request as nats-server reads it: (its JSON or None, batch, expires, max_bytes, no_wait,
    idle_heartbeat, the status and description that refuse it or None: a push consumer's 409, a malformed
    body's 400); a plain number is the batch (1 when it is not one)."""
    if push:
        return None, 1, 0, 0, False, 0, (409, "Consumer is push based")
    req = body.strip()
    if req[:1] == b"{":
        try:
            d = _next_request(req)
        except ValueError as e:
            return None, 1, 0, 0, False, 0, (400, f"Bad Request - {e}")
        return (d, d.get("batch", 0), d.get("expires", 0), d.get("max_bytes", 0), d.get("no_wait", False),
                d.get("idle_heartbeat", 0), None)
    batch = 1
    if req:
        try:
            batch = int(req)
        except ValueError:
            batch = 1
    return None, batch, 0, 0, False, 0, None


def request_limits_error(batch: int, expires_ns: int, max_bytes: int, max_batch: int, max_expires_ns: int,
                         max_b: int) -> str | None:
    """nats-server's 409 description for a pull request past the consumer's max_batch, max_expires or
    max_bytes (0: no limit), or None."""
    if max_batch > 0 and batch > max_batch:
        return f"Exceeded MaxRequestBatch of {max_batch}"
    if expires_ns and max_expires_ns > 0 and expires_ns > max_expires_ns:
        return f"Exceeded MaxRequestExpires of {format_duration(max_expires_ns)}"
    if max_bytes > 0 and max_b > 0 and max_bytes > max_b:
        return f"Exceeded MaxRequestMaxBytes of {max_b}"
    return None

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
        self.pg = pg        # priority group fields (rillet.jetstream.consumer.priority.PG), None for a plain request



class PullMixin:
    # ---- pull requests ------------------------------------------------------------------------------

    def process_next_request(self, reply: str, body: bytes) -> None:
        if self.closed or not reply:
            return
        reply_b = reply.encode("utf-8", "surrogateescape")

        def err(code: int, desc: str) -> None:
            self._send(reply_b, None, H.make_headers([], code, desc), b"")
            self._flush_out()

        d, batch, expires_ns, max_bytes, no_wait, hb_ns, refused = read_next_request(body, self.is_push)
        if refused is not None:
            err(*refused)
            return
        pg = None
        if d is not None:
            if self.priority_policy != "none" or _PG_FIELDS.intersection(d):
                from rillet.jetstream.consumer.priority import PG
                pg = PG(d)
            if hb_ns > 0 and hb_ns * 2 > expires_ns:
                err(400, "Bad Request - heartbeat value too large")
                return
        bad = request_limits_error(batch, expires_ns, max_bytes, self.max_batch, self.max_expires_ns, self.max_bytes)
        if bad is not None:
            err(409, bad)
            return
        if pg is not None:
            from rillet.jetstream.consumer import priority
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
            from rillet.jetstream.consumer import priority
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
                from rillet.jetstream.consumer import priority
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
                    from rillet.jetstream.consumer import priority
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



_NEXT_FIELDS = {"batch": "int", "expires": "time.Duration", "max_bytes": "int", "no_wait": "bool",
                "idle_heartbeat": "time.Duration",
                # the priority group fields (rillet.jetstream.consumer.priority)
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


