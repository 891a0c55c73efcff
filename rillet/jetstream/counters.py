"""Message counters (nats-server 2.12, ADR-49): streams with ``allow_msg_counter``.

A publish carries ``Nats-Incr: <signed integer>`` and no payload. The leader reads the subject's current value
(the last message on the subject: the last one *proposed*, entries in flight included), adds the increment
and proposes a message whose body is the new total, ``{"val":"<total>"}``, with the publish's headers. The
PubAck carries the total too: ``{"stream":..,"seq":..,"val":"<total>"}``. The value is decided before the
entry is proposed, so every replica stores the same bytes.

Counters through sources: a sourced message (``Nats-Stream-Source`` set by the sourcing machinery) is not an
increment of its own; its body is the origin's total for that subject. The stream keeps, in the
``Nats-Counter-Sources`` header of its last message per subject, the last total seen from each origin
stream and subject (``{"<stream>":{"<subject>":"<total>"}}``), adds the difference to its own total and
rewrites ``Nats-Incr`` to that difference, as nats-server does.

Integers are unbounded (Python ints, like Go's big.Int); ``Nats-Incr`` accepts an optional sign and decimal
digits only.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rillet.gocompat.jsoncodec import unmarshal_plain
from rillet.jetstream import headers as H
from rillet.jetstream.errors import ApiError

if TYPE_CHECKING:
    from rillet.jetstream.stream import Stream

INCR = "Nats-Incr"
COUNTER_SOURCES = "Nats-Counter-Sources"
SOURCE = "Nats-Stream-Source"

# headers an increment may not come with (nats-server answers "message counter increment is invalid")
_INCOMPATIBLE = (H.ROLLUP, H.EXPECTED_STREAM, H.EXPECTED_LAST_MSG_ID, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ,
                 H.EXPECTED_LAST_SEQ, H.EXPECTED_LAST_SUBJ_SEQ)


def parse_int(v: str) -> int | None:
    """A decimal integer with an optional sign (Go's big.Int SetString in base 10); None when invalid."""
    s = v[1:] if v[:1] in ("+", "-") else v
    if not s or not s.isascii() or not s.isdigit():
        return None
    return int(v)


def check_incr(stream: "Stream", hdr: bytes, data: bytes, sourced: bool) -> int | None:
    """The increment of a publish (None: no ``Nats-Incr``), checked as nats-server does before anything
    else in the headers. Raises ApiError."""
    v = H.get_header(hdr, INCR)
    if not v:
        return None
    incr = parse_int(v)
    if incr is None:
        raise ApiError.make("MESSAGE_INCR_INVALID")
    if sourced:
        return incr  # stored as the origin sent it (a non-counter stream) or folded in by ``apply``
    if not stream.cfg.allow_msg_counter:
        raise ApiError.make("MESSAGE_INCR_DISABLED")
    if data:
        raise ApiError.make("MESSAGE_INCR_PAYLOAD")
    for name in _INCOMPATIBLE:
        if H.get_header(hdr, name) is not None:
            raise ApiError.make("MESSAGE_INCR_INVALID")
    return incr


def _value(body: bytes) -> int:
    """The total a stored counter message holds; raises MESSAGE_COUNTER_BROKEN when it is not one."""
    try:
        d = unmarshal_plain(body) if body else None  # (Go's rules: no RecursionError)
    except ValueError:
        raise ApiError.make("MESSAGE_COUNTER_BROKEN") from None
    if d is None:
        return 0
    if not isinstance(d, dict):
        raise ApiError.make("MESSAGE_COUNTER_BROKEN")
    v = d.get("val")
    if v is None:
        return 0
    if not isinstance(v, str):
        raise ApiError.make("MESSAGE_COUNTER_BROKEN")
    n = parse_int(v)
    return n if n is not None else 0


def _sources(hdr: bytes) -> dict[str, dict[str, str]]:
    v = H.get_header(hdr, COUNTER_SOURCES) if hdr else None
    if not v:
        return {}
    try:
        d = unmarshal_plain(v)
    except ValueError:
        raise ApiError.make("MESSAGE_COUNTER_BROKEN") from None
    if d is None:
        return {}
    if not isinstance(d, dict) or not all(isinstance(m, dict) for m in d.values()):
        raise ApiError.make("MESSAGE_COUNTER_BROKEN")
    return d


def _last(stream: "Stream", subject: str) -> tuple[bytes, bytes] | None:
    """(headers, body) of the last message proposed on ``subject``: in flight first, else the store."""
    from rillet.jetstream.log import Entry
    for e in reversed(stream._inflight):
        a = e.args
        if e.op == Entry.MSG:
            if a[0] == subject:
                return a[1], a[2]
        elif e.op == Entry.BATCH:
            for m in reversed(a[0]):
                if m[0] == subject:
                    return m[1], m[2]
        elif a[1] == subject:  # MIRROR (not on counter streams; kept for completeness)
            return a[2], a[3]
    m = stream.store.load_last_msg(subject)
    if m is None:
        return None
    return m.hdr, m.data


def apply(stream: "Stream", subject: str, hdr: bytes, incr: int | None, data: bytes) -> tuple[bytes, bytes]:
    """The headers and body to store for a publish on a counter stream. Raises ApiError."""
    if incr is None:
        raise ApiError.make("MESSAGE_INCR_MISSING")
    total = 0
    sources: dict[str, dict[str, str]] = {}
    last = _last(stream, subject)
    if last is not None:
        total = _value(last[1])
        sources = _sources(last[0])
    src = H.get_header(hdr, SOURCE)
    if src:
        # a sourced message: its body is the origin's total; the difference since the last one counts
        fields = src.split(" ")
        origin = fields[0]
        orig_subj = fields[4] if len(fields) >= 5 else subject
        sourced_total = _value(data)
        per = sources.setdefault(origin, {})
        prev = parse_int(per.get(orig_subj, "0") or "0") or 0
        per[orig_subj] = str(sourced_total)
        incr = sourced_total - prev
        hdr = H.set_headers(hdr, [(INCR, str(incr))])
    total += incr
    body = b'{"val":"%d"}' % total
    if sources:
        hdr = H.set_headers(hdr, [(COUNTER_SOURCES, json.dumps(sources, separators=(",", ":"), sort_keys=True))])
    mp = stream.js.server.opts.max_payload
    if len(hdr) > mp or len(body) > mp - len(hdr):
        raise ApiError.make("STREAM_MESSAGE_EXCEEDS_MAXIMUM")
    return hdr, body


def ack_val(data: bytes) -> bytes:
    """The total in a stored counter body we wrote (``{"val":"<n>"}``), for the PubAck."""
    if data[:8] == b'{"val":"' and data[-2:] == b'"}':
        return data[8:-2]
    try:
        return str(_value(data)).encode()
    except ApiError:
        return b""
