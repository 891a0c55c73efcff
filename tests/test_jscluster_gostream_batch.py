"""A Go stream group's append entry that carries several messages (nats-server's leader batches the proposals
it has queued into one append entry, one RAFT index for all of them), applied by a Rillet replica
(rillet.jetstream.cluster.gostream, behind ``rillet_go_meta``).

Found by the mixed-cluster fault run (scripts/js_faults.py --server mixed2 --quick --seed 203): the replica
marked the index applied after the batch's first message and skipped the others as already applied, so its
store had a hole for each of them (9,239 of 14,705 messages); led by it, or caught up from it, the stream lost
acknowledged messages.
"""
from __future__ import annotations

import time
from types import SimpleNamespace

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.gometa import Committed
from rillet.jetstream.cluster.gostream import GoStreamReplica
from rillet.raft import gowire as gw


class _Log:
    def __getattr__(self, name):
        return lambda *a, **k: None


_SERVER = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
_ASSIGNMENT = {"stream": {"name": "S", "subjects": ["s.>"], "storage": "file", "num_replicas": 3},
               "group": {"name": "S-R3F-abcd1234", "peers": [gw.peer_id(n) for n in ("r1", "g0", "g1")]}}


def _entry(lseq: int, data: bytes) -> gw.Entry:
    return gw.Entry(gw.ENTRY_NORMAL, ge.StreamMsg(lseq, time.time_ns(), "s.a", "", b"", data).encode())


def _batch(index: int, first_lseq: int, n: int) -> list[Committed]:
    """One append entry at ``index`` holding ``n`` messages (as gometa hands over a committed index)."""
    return [Committed(index, _entry(first_lseq + k, b"m%d" % (first_lseq + k + 1))) for k in range(n)]


def _values(rep: GoStreamReplica) -> list[bytes]:
    st = rep.store.state()
    return [bytes(rep.store.load_msg(s).data) for s in range(st.first_seq, st.last_seq + 1)]


def test_every_message_of_one_append_entry_is_stored(tmp_path):
    rep = GoStreamReplica(_SERVER, "A", _ASSIGNMENT, str(tmp_path))
    try:
        rep._commit(_batch(1, 0, 1))
        rep._commit(_batch(2, 1, 3) + _batch(3, 4, 2))  # (two committed indexes in one call, the first of three)
        st = rep.store.state()
        assert (st.msgs, st.last_seq, st.num_deleted) == (6, 6, 0)
        assert _values(rep) == [b"m1", b"m2", b"m3", b"m4", b"m5", b"m6"]
        assert rep.applied_index == 3
    finally:
        rep.store.stop()


def test_a_restarted_replica_skips_only_what_it_applied(tmp_path):
    rep = GoStreamReplica(_SERVER, "A", _ASSIGNMENT, str(tmp_path))
    rep._commit(_batch(1, 0, 2) + _batch(2, 2, 3))
    rep.store.stop()
    rep = GoStreamReplica(_SERVER, "A", _ASSIGNMENT, str(tmp_path))
    try:
        assert rep.applied_index == 2
        # the leader sends its log again from the start: indexes 1 and 2 were applied, index 3 (a batch) was not
        rep._commit(_batch(1, 0, 2) + _batch(2, 2, 3) + _batch(3, 5, 3))
        st = rep.store.state()
        assert (st.msgs, st.last_seq, st.num_deleted) == (8, 8, 0)
        assert _values(rep) == [b"m%d" % i for i in range(1, 9)]
        assert rep.applied_index == 3
    finally:
        rep.store.stop()
