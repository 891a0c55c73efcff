"""Interest and work-queue retention: when a stored message may be removed because of its consumers.

- workqueue: a message goes as soon as the (single) consumer covering its subject acknowledges it.
- interest: a message goes once every consumer whose filter matches its subject has acknowledged it, and at
  once when no consumer's filter matches it when it is stored.

Removals are proposed to the stream's log (``Entry.DELETE``) by the leader, after the entry (a stored message,
an ack applied to a consumer) that made them due; never applied on the side.
"""
from __future__ import annotations

from typing import Any

from rillet.jetstream.log import SingleNodeLog
from rillet.jetstream.store.base import StoreError


class Removed:
    """The completion of a retention removal. Nobody is answered for one, so where the stream writes behind
    (one server, no sync_always) its tombstone may wait for the end of the loop pass and go with the pass's
    others in one state-log record (``Stream.apply`` knows it by this class; FileStore.remove_msg_soon). A
    failure is logged."""

    __slots__ = ("stream", "seq")

    def __init__(self, stream: Any, seq: int | list[int]) -> None:
        self.stream = stream
        self.seq = seq

    def __call__(self, res: Any, err: BaseException | None) -> None:
        if err is not None:
            # the message stays; it is logged, never silently kept
            self._failed(self.seq, err)
        elif self.seq.__class__ is list and res:  # (several at once: Stream.delete_msgs, the ones that failed)
            for seq, e in res:
                self._failed(seq, e)

    def _failed(self, seq: Any, err: BaseException) -> None:
        stream = self.stream
        stream.js.log.error(f"Stream '{stream.jsa.account.name} > {stream.name}': retention removal of "
                            f"message {seq} failed: {err}")


def _remove(stream: Any, seq: int) -> None:
    """Propose the removal (run by the leader after the entry that made it due was applied)."""
    if stream.closed:
        return
    stream.delete_msg(seq, False, Removed(stream, seq))


def needs_ack(c: Any, seq: int, subject: str) -> bool:
    """True while consumer ``c`` still has to acknowledge (or first deliver) stream message ``seq``."""
    if c.closed or not c._matches(subject):
        return False
    pol = c.ack_policy
    if pol == "explicit":
        if seq in c.pending:
            return True
        if c.lss and seq in c.lss:
            return True
        return seq >= c.sseq
    if pol == "all" or pol == "flow_control":
        return seq > c.asflr
    return seq >= c.sseq


def on_new_msg(stream: Any, seq: int, subject: str) -> None:
    """A message was stored: in an interest stream, drop it when no consumer is interested."""
    if stream.cfg.retention != "interest":
        return
    for c in stream.consumers.values():
        if not c.closed and c._matches(subject):
            return
    _remove(stream, seq)


def on_ack(stream: Any, consumer: Any, seq: int) -> None:
    """``consumer`` acknowledged ``seq`` (or delivered it with ack policy none)."""
    ret = stream.cfg.retention
    if ret == "workqueue":
        _remove(stream, seq)
        return
    if ret != "interest":
        return
    cs = stream.consumers
    if len(cs) == 1 and stream.log.__class__ is SingleNodeLog and next(iter(cs.values())) is consumer:
        # only the acking consumer (an MQTT subscription's, typically): no other to ask, so the subject is not
        # needed; a message gone meanwhile makes the removal a no-op, one lost to corruption is left alone
        lost = getattr(stream.store, "_lost", None)
        if not lost or seq not in lost:
            _remove(stream, seq)
        return
    # (the subject from the store's index: nothing read from disk; None for a message gone or lost to
    # corruption, left alone here as a failed read would be)
    try:
        subject = stream.store.subject_for_seq(seq)
    except StoreError:
        subject = None  # unreadable (corrupt): reported by the store, left alone here
    if subject is None:
        return
    for c in stream.consumers.values():
        if c is consumer:
            continue
        if needs_ack(c, seq, subject):
            return
    _remove(stream, seq)


def on_acks(stream: Any, consumer: Any, seqs: list[int]) -> None:
    """``on_ack`` for each of ``seqs`` (one C_ACK entry acknowledged them all). Where each would be removed at
    once without asking another consumer (a work queue; interest with the acking consumer the stream's only
    one), on one server (``SingleNodeLog``), the removals go as one entry (``Stream.delete_msgs``)."""
    ret = stream.cfg.retention
    if ret != "workqueue" and ret != "interest":
        return
    cs = stream.consumers
    if stream.log.__class__ is SingleNodeLog and (ret == "workqueue" or (
            len(cs) == 1 and next(iter(cs.values())) is consumer)):
        if ret == "interest":  # (as on_ack: one lost to corruption is left alone)
            lost = getattr(stream.store, "_lost", None)
            if lost:
                seqs = [s for s in seqs if s not in lost]
        if seqs and not stream.closed:
            stream.delete_msgs(seqs, Removed(stream, seqs))
        return
    for seq in seqs:
        on_ack(stream, consumer, seq)


def on_consumer_delete(stream: Any, consumer: Any) -> None:
    """A consumer of an interest stream went away: drop what only it still needed."""
    if stream.closed or stream.cfg.retention != "interest":
        return
    store = stream.store
    st = store.state()
    if not st.msgs:
        return
    start = max(st.first_seq, 1)
    others = [c for c in stream.consumers.values() if c is not consumer and not c.closed]
    seq = start
    while seq <= st.last_seq:
        try:
            m = store.load_next_msg(">", seq, True)
        except StoreError:
            seq += 1  # an unreadable (corrupt) message, reported by the store: go on after it
            continue
        if m is None:
            break
        if not any(needs_ack(c, m.seq, m.subject) for c in others):
            _remove(stream, m.seq)
        seq = m.seq + 1


def on_consumer_reset(stream: Any, consumer: Any, seq: int, remove: Any = None) -> None:
    """``consumer`` of an interest stream was reset to ``seq`` (its ack floor is now ``seq - 1``): what it
    covers below that floor counts as acknowledged by it, and goes when no other consumer needs it (as
    nats-server; a work-queue stream keeps what a forward reset skipped). ``remove`` proposes a removal
    (the clustered stream leader passes its own)."""
    if stream.closed or stream.cfg.retention != "interest":
        return
    if remove is None:
        def remove(s: int) -> None:
            _remove(stream, s)
    store = stream.store
    st = store.state()
    if not st.msgs:
        return
    others = [c for c in stream.consumers.values() if c is not consumer and not c.closed]
    s = max(st.first_seq, 1)
    while s < seq:
        try:
            m = store.load_next_msg(">", s, True)
        except StoreError:
            s += 1  # an unreadable (corrupt) message, reported by the store: go on after it
            continue
        if m is None or m.seq >= seq:
            break
        if consumer._matches(m.subject) and not any(needs_ack(c, m.seq, m.subject) for c in others):
            remove(m.seq)
        s = m.seq + 1
