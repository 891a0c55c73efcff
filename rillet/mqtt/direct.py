"""A QoS 1 PUBLISH stored straight into ``$MQTT_msgs`` (``JSA.store_cb``'s direct case): ``Stream.process``
with an answer object, shortened to what can happen to such a message.

``store_direct(stream, subject, hdr, data, ans)`` does what ``stream.process(subject, None, hdr, data,
fast=ans)`` does (its checks, then ``SingleNodeLog``'s inline apply: ``Stream.apply``'s MSG entry, then
``Stream._msg_done``) for the message ``JSA.store_cb`` hands it: no reply subject, not sourced, no message id,
no TTL, no trace, a header block with no ``Nats-*`` header (an MQTT message carries ``Nmqtt-Pub`` alone). The
checks that can refuse such a message, or that send it down another road, are made first; when any of them
would do something (an ingest limit reached, a failed store, a sealed stream, a message over the size limit,
an account with storage limits, something still in flight, an interest stream with no consumer for the
subject: nats-server's skip), or the stream is not in the shape this path knows (a log other than
``SingleNodeLog`` with the stream's own apply, a counter, schedules, republish), the message goes to
``stream.process`` unchanged, which decides. What is left is what ``process`` would do for it, in the same
order, with the same state after: the store's append (``store_msg``, the same arguments: its own limits and
errors apply), the stream's last message id cleared, the ingest backlog and gathered-bytes counts, the effects
the store left (``_run_fx``), the max-age timer, the consumers told (``on_stream_msg``), interest retention's
question when no open consumer took it, the answer (``_fast_answer``). A store error is handed to
``Stream._msg_done`` as the log's completion would hand it.

What is not done here that ``process`` does per message: the checks above answered once, no ``Entry`` (made
only for a store error's completion), no overlay append and pop around the apply (nothing reads it between
the two: the apply is inline), no header searches for ``Nats-*`` headers the message cannot have.

The pure function is the reference and the pure lane's; rillet._speedups._cmqtt.store_direct is its compiled
twin (the same steps). A change to ``Stream.process``, ``Stream.apply``'s MSG entry or ``Stream._msg_done``
that concerns such a message goes here too (tests/test_mqtt_direct.py compares the two roads' state).
"""
from __future__ import annotations

from typing import Any

import rillet.server.msgtrace as _mt
from rillet import lane
from rillet.jetstream.log import Entry, SingleNodeLog
from rillet.jetstream.stream import Stream, now_ns

__all__ = ["store_direct", "reference_store_direct"]

_APPLY = Stream.apply


def _checks_pass(stream: Stream, subject: str, hdr: bytes, data: bytes, ans: Any) -> bool:
    """None of ``process``'s checks would refuse the message or send it another road (see the module)."""
    cfg = stream.cfg
    # (``find``, not ``in``: bytes.__contains__ first tries its argument as an integer, and formats the error)
    if not ans.wait_write or stream._inflight or stream.store_failed or cfg.sealed or stream.jsa.limited \
            or (hdr and hdr.find(b"Nats-") >= 0) or cfg.allow_msg_counter or cfg.allow_msg_schedules \
            or cfg.republish is not None or _mt.CURRENT is not None:
        return False
    log = stream.log
    if log.__class__ is not SingleNodeLog or getattr(log.apply, "__func__", None) is not _APPLY or \
            getattr(log.apply, "__self__", None) is not stream:
        return False
    if cfg.max_msg_size > 0 and len(hdr) + len(data) > cfg.max_msg_size:
        return False
    n = stream._bl_n + stream._wb_n
    if n:
        max_n, max_b = stream.ingest_limits
        if (max_n and n >= max_n) or (max_b and stream._bl_b + stream._wb_b + len(hdr) + len(data) + len(subject)
                                      > max_b):
            return False
    if cfg.retention == "interest":  # (_no_interest's first loop: a consumer that takes it, else the skip)
        for c in stream.consumers.values():
            if not c.closed and c._matches(subject):
                c._mtook = subject
                return True
        return False
    return True


def store_direct(stream: Stream, subject: str, hdr: bytes, data: bytes, ans: Any) -> int:
    """``stream.process(subject, None, hdr, data, fast=ans)`` for an MQTT QoS 1 message (see the module).
    Returns the sequence proposed (0: refused or a duplicate), as ``process``."""
    if not _checks_pass(stream, subject, hdr, data, ans):
        return stream.process(subject, None, hdr, data, fast=ans)
    store = stream.store
    seq = store.last_seq + 1
    ts = now_ns()
    ans.proposed()
    stream.log.index += 1
    # (Stream.apply's MSG entry)
    fx = stream._fx
    if fx:
        fx.clear()
    try:
        r = store.store_msg(subject, hdr, data, ts, 0)
    except Exception as e:  # noqa: BLE001 (the log's completion gets it, as SingleNodeLog.propose hands it)
        entry = Entry(Entry.MSG, (subject, hdr, data, ts, 0, "", seq), ans)
        stream._inflight.append(entry)  # (the overlay and backlog _msg_done releases)
        stream._bl_n += 1
        stream._bl_b += len(subject) + len(hdr) + len(data)
        stream._msg_done(entry, None, e)
        return seq
    stream._last_msg_id = ""
    # (Stream._msg_done for a stored message without id, TTL, schedule or republish)
    if stream._wb_pending:
        stream._wb_n += 1
        stream._wb_b += len(subject) + len(hdr) + len(data)
    if stream._fx:
        stream._run_fx()
    sseq = r[0]
    cfg = stream.cfg
    if stream._expire_timer is None and cfg.max_age:
        stream._schedule_expiry()
    consumers = stream.consumers
    hit = None
    for c in list(consumers.values()) if consumers else ():
        hit = c if c.on_stream_msg(sseq, subject) is True and hit is None else hit
    if cfg.retention == "interest" and (hit is None or hit.closed or consumers.get(hit.name) is not hit):
        stream.jsa.after_stream_msg(stream, sseq, subject)
    stream._fast_answer(ans, sseq, 0, None)
    return seq


# the direct store ``JSA.store_cb`` calls: ``reference_store_direct`` (above, the pure lane's) or, in the compiled
# lane, its twin rillet._speedups._cmqtt.store_direct
reference_store_direct = store_direct
if lane.COMPILED:
    try:
        from rillet._speedups._cmqtt import store_direct  # type: ignore[no-redef]  # noqa: F811
    except ImportError:  # (an extension built before the twin existed: the reference runs)
        pass
