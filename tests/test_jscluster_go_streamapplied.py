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


class _IC:
    """The internal client of a replica without a server: what it subscribes and publishes."""

    def __init__(self):
        self.subs, self.pubs = [], []

    def subscribe(self, subject, cb):
        self.subs.append(subject)
        return subject

    def remove_sub(self, sub):
        self.subs.remove(sub)

    def publish(self, subject, reply, payload):
        self.pubs.append((bytes(subject), reply, bytes(payload)))


def _behind(tmp_path, peers=PEERS):
    """A replica fed 3 messages, its applied file then rewritten as after messages 4 and 5, which its store did
    not keep (a power cut under the lazy default); made again. Returns it and the errors it logged."""
    rep = _replica(tmp_path)
    _feed(rep, 3, 1)
    path = rep._applied_path
    assert load_applied(path) == (3, 0, 1) and kept_last_seq(path) == 3
    rep.store.stop()
    save_applied(path, 5, 0, 1, 5)
    errors: list[str] = []

    class _Errors(_Log):
        def error(self, text):
            errors.append(text)
    server = SimpleNamespace(system_account=object(), log=_Errors(), name="r1", loop=None)
    a = {"stream": {"name": "S", "subjects": ["s.>"], "storage": "file", "num_replicas": 3},
         "created": "2026-01-01T00:00:00Z", "group": {"name": "S-R3F-abcd1234", "peers": peers},
         "sync": "$JSC.SYNC.abcd"}
    return GoStreamReplica(server, "A", a, str(tmp_path)), errors


def test_a_store_behind_its_applied_file_fetches_what_it_lost_from_the_leader(tmp_path):
    """After a power cut under the lazy default the applied file can be ahead of the store's surviving tail:
    the store's last sequence is kept in the file, and a store that comes back shorter is reported, its log
    starts at the index all the same, and it asks the leader for the lost messages with a $JSC.SYNC catch-up
    (nats-server's sync request), holding the entries committed meanwhile until they are stored."""
    behind, errors = _behind(tmp_path)
    r = behind.raft
    assert behind.store.state().last_seq == 3 and (r.base_index, r.base_term, r.pindex) == (5, 1, 5)
    assert len(errors) == 1 and "its store lost messages (last sequence 3, 5 when index 5 was applied): " \
        "fetching 4..5 again from the leader" in errors[0]
    assert ge.StreamSnapshot.decode(r.snapshot_data).last_seq == 5  # (the state at the index, not the store's)
    assert behind._snap is not None and not behind._alone()
    behind.ic = _IC()
    behind._request_catchup()
    (subject, reply, payload), = behind.ic.pubs
    assert subject == b"$JSC.SYNC.abcd" and reply.startswith(b"$JSC.R.")
    assert payload == (b'{"peer":"' + behind.peer.encode()
                       + b'","first_seq":4,"last_seq":5,"delete_ranges":true,"min_applied":5}')
    # the leader's next entry (index 6, message 6) waits for the catch-up
    _o, done = r.append("append", "", "", gw.AppendEntry(GO, 1, 5, 1, 5, (_msg(5),)), 0.0)
    _o, done2 = r.append("append", "", "", gw.AppendEntry(GO, 1, 6, 1, 6, ()), 0.0)
    behind._commit(done + done2)
    assert behind.store.state().last_seq == 3 and len(behind._held) == 1
    inbox = reply
    for seq in (4, 5):
        behind.ic.pubs.clear()
        behind._on_catchup(None, None, inbox, b"$JSC.ACK.x.1", 0,
                           ge.StreamMsg(seq, time.time_ns(), "s.b", "", b"", b"again%d" % seq).encode())
        assert behind.ic.pubs == [(b"$JSC.ACK.x.1", None, b"")]  # (flow control: one answer each)
    behind._on_catchup(None, None, inbox, None, 0, b"")  # (the end)
    st = behind.store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (6, 1, 6) and behind._snap is None and not behind._held
    assert bytes(behind.store.load_msg(5).data) == b"again5" and behind.applied_index == 6
    assert behind.apply_errors == 0 and behind.catchups == 1
    assert ge.StreamSnapshot.decode(r.snapshot_data).msgs == 5  # (the store's state at index 5, now complete)
    assert kept_last_seq(behind._applied_path) == 6
    behind.store.stop()
    # a store that kept everything: the position is claimed, nothing fetched
    save_applied(behind._applied_path, 6, 0, 1, 6)
    ok = _replica(tmp_path)
    assert ok.raft.base_index == 6 and ok.raft.pindex == 6 and ok._snap is None
    ok.store.stop()


def test_a_group_of_one_whose_store_lost_its_tail_reports_it(tmp_path):
    """Nobody else holds the messages: reported, and its log starts at the index (the group goes on alone)."""
    alone, errors = _behind(tmp_path, peers=[gw.peer_id("r1")])
    assert alone.raft.base_index == 5 and alone._snap is None
    assert len(errors) == 1 and errors[0].endswith("no other replica to fetch them from")
    alone.store.stop()
