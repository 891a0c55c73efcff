"""A C_ACK of several acks (``ConsumerStateMachine._apply_acks``, an MQTT session's PUBACKs read together) moves
the ack floor as one ``_move_ack_floor`` per ack does: its usual case (the floor's delivery acked, the next still
pending) is taken inline (issue 23). Compared over random deliveries, redeliveries and acks in and out of order."""
from __future__ import annotations

import random

import pytest

from rillet.jetstream.consumer.state import C_DELIVERED, ConsumerStateMachine
from rillet.jetstream.log import Entry


def _one_at_a_time(sm: ConsumerStateMachine, seqs: list[int], ts: int, snext: int) -> list[int]:
    """The reference: each ack through ``_move_ack_floor``."""
    acked = []
    for sseq in seqs:
        p = sm.pending.pop(sseq, None)
        if p is not None:
            sm._move_ack_floor(p[0], sseq, snext)
            acked.append(sseq)
        if sm.rdc:
            sm.rdc.pop(sseq, None)
    sm.lat = ts
    sm.has_state = True
    return acked


@pytest.mark.parametrize("seed", range(12))
def test_batched_acks_move_the_floor_as_one_at_a_time(seed):
    rnd = random.Random(seed)
    a, b = ConsumerStateMachine("explicit"), ConsumerStateMachine("explicit")
    top = 0
    dseq = 1
    ts = 1
    for _ in range(40):
        # a run of new deliveries, now and then a redelivery of something still pending
        for _ in range(rnd.randint(0, 30)):
            if a.pending and rnd.random() < 0.1:
                seq, dc = rnd.choice(sorted(a.pending)), 2
            else:
                top += 1
                seq, dc = top, 1
            for sm in (a, b):
                sm.apply_entry(Entry(C_DELIVERED, (seq, dseq, dc, ts)))
            dseq += 1
            ts += 1
        pend = sorted(a.pending)
        if not pend:
            continue
        k = rnd.randint(1, len(pend))
        mode = rnd.random()
        if mode < 0.5:
            seqs = pend[:k]  # in order, from the floor (the MQTT case)
        elif mode < 0.75:
            seqs = rnd.sample(pend, k)  # any order
        else:
            seqs = pend[:k] + rnd.sample(range(1, top + 3), 3)  # and some not pending, or acked already
        snext = top + 1
        assert a._apply_acks(list(seqs), ts, snext) == _one_at_a_time(b, list(seqs), ts, snext)
        assert a.replicated_state() == b.replicated_state()
        ts += 1
    assert a.asflr > 0
