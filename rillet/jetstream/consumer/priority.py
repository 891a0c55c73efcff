"""Consumer priority groups (nats-server 2.11+, ADR-42) for pull consumers with a ``priority_policy``.

A pull request names its group (``"group"``, one of the consumer's ``priority_groups``) and, per policy:

overflow        ``min_pending`` / ``min_ack_pending``: the request is served only while the consumer has at
                least that many messages pending (or unacknowledged); requests without them are served always.
                Requests that do not qualify are passed over (cycled), not answered.
pinned_client   the first request served gets a pin id (``Nats-Pin-Id`` header on each message it receives);
                from then on only requests carrying ``"id": <pin id>`` are served, others wait; a request
                with another id is answered ``423 Nats-Pin-Id mismatch`` (on arrival) or ``423
                Nats-Wrong-Pin-Id`` (when it would be served). The pin lapses after ``priority_timeout``
                without a request from the pinned client (advisory reason "timeout") or on
                ``$JS.API.CONSUMER.UNPIN.<stream>.<consumer>`` (reason "admin"); the next request served is
                pinned anew. Advisories ``$JS.EVENT.ADVISORY.CONSUMER.PINNED|UNPINNED.<stream>.<consumer>``.
prioritized     ``"priority"`` 0..9 (0 first): waiting requests are kept ordered by priority, FIFO within one.

The pin is the consumer leader's delivery state (as in nats-server, which does not replicate it either): a
new leader starts unpinned and pins the next request it serves.
"""
from __future__ import annotations

import random
import string
from typing import TYPE_CHECKING, Any

from rillet.gocompat.gotime import format_time
from rillet.jetstream.stream import now_ns

if TYPE_CHECKING:
    from rillet.jetstream.consumer.engine import Consumer

PIN_HDR = "Nats-Pin-Id"
_NUID_CHARS = string.ascii_letters + string.digits


class PG:
    """The priority fields of one pull request."""

    __slots__ = ("group", "min_pending", "min_ack_pending", "id", "priority")

    def __init__(self, d: dict) -> None:
        self.group: str = d.get("group") or ""
        self.min_pending: int = d.get("min_pending") or 0
        self.min_ack_pending: int = d.get("min_ack_pending") or 0
        self.id: str = d.get("id") or ""
        self.priority: int = d.get("priority") or 0


def new_pin_id() -> str:
    return "".join(random.choice(_NUID_CHARS) for _ in range(22))


def check_request(c: "Consumer", pg: PG | None) -> tuple[int, str] | None:
    """nats-server's checks of a pull request's priority fields: (status, description) to answer, or None."""
    pol = c.priority_policy
    if pg is not None:
        if (pg.min_pending or pg.min_ack_pending) and pol != "overflow":
            return 400, "Bad Request - Not a Overflow Priority consumer"
        if pg.id and pol != "pinned_client":
            return 400, "Bad Request - Not a Pinned Client Priority consumer"
        if pg.priority < 0 or pg.priority > 9:
            return 400, "Bad Request - Priority must be between 0 and 9"
        if pol != "none":
            if not pg.group:
                return 400, "Bad Request - Priority Group missing"
            if pg.group not in (c.cfg.priority_groups or []):
                return 400, "Bad Request - Invalid Priority Group"
            if c.pin_id:
                if pg.id == c.pin_id:
                    arm_pin_timer(c, pg.group)
                elif pg.id:
                    return 423, "Nats-Pin-Id mismatch"
    return None


def insert_prioritized(wq: Any, wr: Any) -> None:
    """Put ``wr`` after every waiting request of the same or a lower priority number (a deque)."""
    p = wr.pg.priority if wr.pg is not None else 2 ** 31 - 1
    i = len(wq)
    while i > 0:
        o = wq[i - 1]
        op = o.pg.priority if o.pg is not None else 2 ** 31 - 1
        if op <= p:
            break
        i -= 1
    wq.insert(i, wr)


def overflow_passes(c: "Consumer", pg: PG | None) -> bool:
    """An overflow request may be served: no thresholds, or one of them reached (pending counted before the
    message being placed was taken, as nats-server)."""
    if pg is None or (pg.min_pending <= 0 and pg.min_ack_pending <= 0):
        return True
    if pg.min_pending > 0 and pg.min_pending <= c.num_pending() + 1:
        return True
    return pg.min_ack_pending > 0 and pg.min_ack_pending <= len(c.pending)


def assign_pin(c: "Consumer", wr: Any) -> bool:
    if wr.pg is None or not wr.pg.group:
        return False
    c.pin_id = new_pin_id()
    c.pinned_ts = now_ns()
    wr.pg.id = c.pin_id
    arm_pin_timer(c, wr.pg.group)
    _advisory(c, "PINNED", "io.nats.jetstream.advisory.v1.consumer_group_pinned", wr.pg.group,
              ("pinned_id", c.pin_id))
    return True


def unpin(c: "Consumer", group: str, reason: str) -> None:
    c.pin_id = ""
    c.pinned_ts = 0
    if c._pin_timer is not None:
        c._pin_timer.cancel()
        c._pin_timer = None
    _advisory(c, "UNPINNED", "io.nats.jetstream.advisory.v1.consumer_group_unpinned", group, ("reason", reason))
    c.kick()


def arm_pin_timer(c: "Consumer", group: str) -> None:
    if c._pin_timer is not None:
        c._pin_timer.cancel()
    ttl = (c.cfg.priority_timeout or 0) / 1e9
    if ttl <= 0:
        c._pin_timer = None
        return

    def lapse() -> None:
        c._pin_timer = None
        if c.pin_id and not c.closed:
            unpin(c, group, "timeout")

    c._pin_timer = c.loop.call_later(ttl, lapse)


def clear(c: "Consumer") -> None:
    """The consumer stops (or loses leadership): no pin, no timer."""
    if c._pin_timer is not None:
        c._pin_timer.cancel()
        c._pin_timer = None
    c.pin_id = ""
    c.pinned_ts = 0


def groups_info(c: "Consumer") -> list[dict]:
    """``priority_groups`` in consumer info: the first group with the pin (nats-server tracks one)."""
    groups = c.cfg.priority_groups or []
    if not groups:
        return []
    d: dict[str, Any] = {"group": groups[0]}
    if c.pin_id:
        d["pinned_client_id"] = c.pin_id
    d["pinned_ts"] = format_time(c.pinned_ts) if c.pinned_ts else "0001-01-01T00:00:00Z"
    return [d]


def _advisory(c: "Consumer", kind: str, typ: str, group: str, extra: tuple[str, str]) -> None:
    adv = c.js.advisories
    d = adv._base(typ)
    d["account"] = c.jsa.account.name
    d["stream"] = c.stream.name
    d["consumer"] = c.name
    if c.js.domain:
        d["domain"] = c.js.domain
    d["group"] = group
    d[extra[0]] = extra[1]
    adv._send(c.jsa, f"$JS.EVENT.ADVISORY.CONSUMER.{kind}.{c.stream.name}.{c.name}", d)
