"""The numbers of a JetStream ack subject, as a consumer's ack handler reads them, and the ack reply subject a
delivery carries.

``$JS.ACK.<stream>.<consumer>.<delivery count>.<stream seq>.<consumer seq>.<ts>.<pending>`` (9 tokens) or the
v2 form ``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivery count>.<stream seq>.<consumer seq>.<ts>
.<pending>[.<token>...]`` (11 or more). This is the reference; rillet._speedups._cjs has its compiled twin
(chosen through rillet.lane; tests/test_lanes_js.py feeds both the same subjects).
"""
from __future__ import annotations


def ack_numbers(subject: bytes) -> tuple[int, int, int] | None:
    """(delivery count, stream sequence, consumer sequence) of an ack subject; None when ``subject`` has
    neither form's token count or one of the three is not a number (Python's ``int`` decides)."""
    toks = subject.split(b".")
    n = len(toks)
    if n == 9:
        off = 2
    elif n >= 11:
        off = 4
    else:
        return None
    try:
        return int(toks[off + 2]), int(toks[off + 3]), int(toks[off + 4])
    except ValueError:
        return None


def ack_reply(prefix: str, dc: int, sseq: int, dseq: int, ts: int, pending: int) -> str:
    """A delivery's reply subject: ``prefix`` (``$JS.ACK.<stream>.<consumer>.`` or its v2 form) and the delivery
    count, stream sequence, consumer sequence, timestamp (ns) and pending count."""
    return f"{prefix}{dc}.{sseq}.{dseq}.{ts}.{pending}"
