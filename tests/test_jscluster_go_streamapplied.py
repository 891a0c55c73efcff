"""A restarted Rillet replica of a Go stream group starts its RAFT log at the index its store was applied up to
(rillet.jetstream.cluster.gostreamapplied): the applied file keeps that entry's term, and the store's state is
the log's snapshot. Unit tests on a replica without a server; the live check is in
tests/test_jscluster_go_consumerstore.py (the stream of its consumer, restarted with it)."""
from __future__ import annotations

import time
from types import SimpleNamespace

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.gostream import GoStreamReplica
from rillet.jetstream.cluster.gostreamapplied import kept_last_seq, load_applied, save_applied
from rillet.raft import gowire as gw

PEERS = [gw.peer_id(n) for n in ("r1", "g0", "g1")]
GO = gw.peer_id("g0")


class _Log:
    def __getattr__(self, name):
        return lambda *a, **k: None


def _replica(store_dir, group="S-R3F-abcd1234", created="2026-01-01T00:00:00Z"):
    server = SimpleNamespace(system_account=object(), log=_Log(), name="r1", loop=None)
    a = {"stream": {"name": "S", "subjects": ["s.>"], "storage": "file", "num_replicas": 3}, "created": created,
         "group": {"name": group, "peers": PEERS}}
    return GoStreamReplica(server, "A", a, str(store_dir))


def _msg(lseq: int, subject: str = "s.a") -> gw.Entry:
    return gw.Entry(gw.ENTRY_NORMAL, ge.StreamMsg(lseq, time.time_ns(), subject, "", b"", b"d").encode())


def _feed(rep, n: int, term: int) -> None:
    """``n`` messages, one append entry each from the Go leader in ``term``, committed by a last empty one."""
    r = rep.raft
    for _ in range(n):
        _o, done = r.append("append", "", "", gw.AppendEntry(GO, term, r.commit, r.pterm, r.pindex,
                                                             (_msg(r.pindex),)), 0.0)
        rep._commit(done)
    _o, done = r.append("append", "", "", gw.AppendEntry(GO, term, r.pindex, r.pterm, r.pindex, ()), 0.0)
    rep._commit(done)


def test_restarted_replica_starts_its_log_at_its_store(tmp_path):
    rep = _replica(tmp_path)
    _feed(rep, 3, 1)
    _feed(rep, 2, 2)
    assert rep.apply_errors == 0
    assert rep.applied_index == 5 and rep.store.state().last_seq == 5
    assert load_applied(str(tmp_path / "go_streams" / "A" / "S" / "applied")) == (5, 0, 2)
    rep.store.stop()
    again = _replica(tmp_path)
    r = again.raft
    assert (r.base_index, r.base_term, r.pindex, r.commit, r.term) == (5, 2, 5, 5, 2)
    snap = ge.StreamSnapshot.decode(r.snapshot_data)
    assert (snap.msgs, snap.first_seq, snap.last_seq) == (5, 1, 5)
    # a vote gives that position: a shorter log is refused, the answer is not "empty"
    vr = gw.VoteResponse.decode(r.vote(gw.VoteRequest(3, 2, 4, gw.peer_id("g1")), "_INBOX.v")[0].payload)
    assert not vr.granted and not vr.empty
    # the leader's next entries: a catch-up from index 6 is asked for, and applied after the store's messages
    out, _done = r.append("append", "", "$NRG.R.x", gw.AppendEntry(GO, 3, 7, 3, 7, ()), 0.0)
    ar = gw.AppendEntryResponse.decode(out[0].payload)
    assert (ar.index, ar.term, ar.success) == (5, 2, False)
    _o, done = r.append("catchup", r.catchup.inbox, "", gw.AppendEntry(GO, 3, 5, 2, 5, (_msg(5),)), 0.0)
    _o, done = r.append("catchup", r.catchup.inbox, "", gw.AppendEntry(GO, 3, 6, 3, 6, ()), 0.0)
    again._commit(done)
    assert again.store.state().last_seq == 6 and again.applied_index == 6
    assert load_applied(again._applied_path) == (6, 0, 3)
    again.store.stop()


def test_no_position_without_a_term_or_from_a_renamed_groups_files(tmp_path):
    rep = _replica(tmp_path)
    _feed(rep, 2, 1)
    rep.store.stop()
    # the same stream, its group renamed while the server was down: its files kept, not the old log's index
    renamed = _replica(tmp_path, group="S-R1F-zzzz")
    assert renamed.applied_index == 2 and renamed.store.state().last_seq == 2 and renamed.raft.pindex == 0
    renamed.store.stop()
    # a file written before the term was kept (16 bytes): no position, as before
    path = str(tmp_path / "go_streams" / "A" / "S" / "applied")
    with open(path, "wb") as f:
        f.write((2).to_bytes(8, "little") + (0).to_bytes(8, "little"))
    old = _replica(tmp_path, group="S-R1F-zzzz")
    assert old.applied_index == 2 and old.raft.pindex == 0
    old.store.stop()
    save_applied(path, 2, 0, 0)
    assert load_applied(path) == (2, 0, 0)


def test_a_store_behind_its_applied_file_is_reported_and_no_position_claimed(tmp_path):
    """After a power cut under the lazy default the applied file can be ahead of the store's surviving tail:
    the store's last sequence is kept in the file, and a store that comes back shorter is reported and the
    replica's log does not start at the index (it would never be sent what its store lost)."""
    rep = _replica(tmp_path)
    _feed(rep, 3, 1)
    path = rep._applied_path
    assert load_applied(path) == (3, 0, 1) and kept_last_seq(path) == 3
    rep.store.stop()
    save_applied(path, 5, 0, 1, 5)  # (the file as written after messages 4 and 5, which the store did not keep)
    errors: list[str] = []

    class _Errors(_Log):
        def error(self, text):
            errors.append(text)
    server = SimpleNamespace(system_account=object(), log=_Errors(), name="r1", loop=None)
    a = {"stream": {"name": "S", "subjects": ["s.>"], "storage": "file", "num_replicas": 3},
         "created": "2026-01-01T00:00:00Z", "group": {"name": "S-R3F-abcd1234", "peers": PEERS}}
    behind = GoStreamReplica(server, "A", a, str(tmp_path))
    assert behind.store.state().last_seq == 3 and behind.raft.pindex == 0 and behind.raft.base_index == 0
    assert len(errors) == 1 and "its store lost messages (last sequence 3, 5 when index 5 was applied)" in errors[0]
    behind.store.stop()
    # a store that kept everything: the position is claimed as before
    save_applied(path, 3, 0, 1, 3)
    ok = _replica(tmp_path)
    assert ok.raft.base_index == 3 and ok.raft.pindex == 3
    ok.store.stop()
