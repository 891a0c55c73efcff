"""The RAFT core's unsafe quorum rescue (``Node.rescue``, nats-server's RescueQuorum, used by META.RESCUE:
rillet/jetstream/api/rescue.py): its refusals in nats-server's words, the lowered quorum kept across a
membership change while the voters' majority is larger, dropped once it is not, and ``end_rescue``."""
from __future__ import annotations

import random

import pytest

from rillet.raft.msgs import ENTRY_CONF, ENTRY_NORMAL, HardState, encode_peers
from rillet.raft.node import Node, RaftError


def _node(peers=("a", "b", "c"), entries=((1, 1, ENTRY_NORMAL, b"x"),)) -> Node:
    return Node("a", peers, rng=random.Random(7), hard_state=HardState(1, None, 0), entries=list(entries))


def test_refusals():
    n = _node()
    assert n.quorum == 2
    for q in (0, 3, -1):
        with pytest.raises(RaftError, match=r"^raft: rescue quorum must be between 1 and current quorum$"):
            n.rescue(q)
    n.leader = "b"
    with pytest.raises(RaftError, match=r"^raft: leader is known$"):
        n.rescue(1)
    with pytest.raises(RaftError, match=r"^raft: log is empty$"):
        _node(entries=()).rescue(1)
    with pytest.raises(RaftError, match=r"^raft: not a voting member$"):
        Node("a", ("b", "c", "d"), rng=random.Random(1), hard_state=HardState(1, None, 0),
             entries=[(1, 1, ENTRY_NORMAL, b"x")]).rescue(1)
    assert n.quorum == 2 and n.rescued_quorum is None


def test_kept_while_the_majority_is_larger_then_dropped():
    n = _node(("a", "b", "c", "d", "e"))
    assert n.rescue(1) == (3, 1) and n.quorum == 1
    with pytest.raises(RaftError):
        n.rescue(2)  # (only lower than the quorum now)
    # a membership change to four voters (majority 3 > 1): the rescue stays
    n.conf_log.append((2, ("a", "b", "c", "d")))
    n._set_voters()
    assert n.quorum == 1 and n.rescued_quorum == 1 and not n.rescue_stopped
    # to one voter (majority 1, no larger than the rescue's): over
    n.conf_log.append((3, ("a",)))
    n._set_voters()
    assert n.quorum == 1 and n.rescued_quorum is None and n.rescue_stopped
    m = _node()
    m.rescue(1)
    m.end_rescue()
    assert m.quorum == 2 and m.rescued_quorum is None


def test_a_rescued_survivor_elects_itself():
    n = _node(entries=((1, 1, ENTRY_CONF, encode_peers(("a", "b", "c"))), (2, 1, ENTRY_NORMAL, b"x")))
    n.rescue(1)
    for _ in range(4 * n.election_tick):
        n.tick()
        if n.leader == "a":
            break
    assert n.leader == "a"
