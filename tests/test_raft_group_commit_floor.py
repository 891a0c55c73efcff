"""The RAFT group driver (rillet/jetstream/cluster/group.py) never saves a commit index below the one it had saved
before (issue 24): a member back from an unclean stop whose log was lost starts with its commit clamped to its log
(0) and saves a hard state at its first term change, before it caught up. That save wrote commit 0 over the saved
commit, so a power cut of every member a moment later left it with nothing to find the majority's loss by: it never
reported it. Once the node found those entries lost (a later leader reused their indexes), the commit saved is the
node's own again."""
from __future__ import annotations

import asyncio
import os
import tempfile
import time

import pytest

from rillet.app.embed import run_cluster
from rillet.jetstream.cluster.group import RaftGroup
from rillet.jetstream.cluster.peers import peer_id
from rillet.raft import msgs as M
from rillet.raft.wal import _HS_MAGIC, _hs_dec, WAL, _read_checked

NAME = "S-R3F-floor001"
A, B = "fakePrA1", "fakePrB2"  # two members that never answer (no route reaches them)


async def _until(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _saved(d: str) -> M.HardState:
    raw = _read_checked(os.path.join(d, "hardstate"), _HS_MAGIC)
    assert raw is not None
    return _hs_dec.decode(raw)


@pytest.mark.asyncio
async def test_saved_commit_never_goes_back_until_the_loss_is_found():
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "_raft", NAME)
        os.makedirs(d)
        # what a power cut left: the hard state (term 3, commit 50) fsynced, the lazily synced log gone, no clean
        # marker, no boot file (another boot): the group starts recovering
        w, _ = WAL.open(d, "interval")
        w.save_hard_state(M.HardState(3, None, 50, 0))
        w.close()
        async with run_cluster(1) as (srv,):
            me = peer_id(srv.name)
            applied: list = []
            g = RaftGroup(srv, NAME, [me, A, B], tmp, apply=lambda i, data: applied.append(i))
            await g.start()
            try:
                n = g.node
                assert n.recovering and n.known_commit == 50 and n.commit == 0
                # a candidate of a later term: the node takes the term (no vote while recovering) and the driver
                # saves the new term at once, with the node's commit still 0
                g._on_message(NAME, A, M.encode(M.VoteRequest(5, A, me, 0, 0)))
                await _until(lambda: g._hs_saved[0] == 5, what="the new term saved")
                hs = _saved(d)
                assert (hs.term, hs.commit) == (5, 50), hs
                g.save_mark()  # (an owner's save: the same rule)
                assert _saved(d).commit == 50
                # the leader of term 5 sends its first entry at index 1: committed entries 1..50 of term 3 are gone
                # (found lost); from then on the commit saved is the node's own
                g._on_message(NAME, A, M.encode(M.AppendEntries(5, A, me, 0, 0, 1, [(1, 5, M.ENTRY_NOOP, b"")])))
                await _until(lambda: n.lost is not None and n.commit == 1 and n.stable == 1, what="the loss found")
                assert n.lost == (1, 50)
                await _until(lambda: g.status()["lost"] is not None, what="the loss in the status")
                g.save_mark()
                assert _saved(d).commit == 1
            finally:
                await g.stop()
            rec = WAL.open(d, "interval")
            rec[0].close()
            assert rec[1].stored_commit == 1


@pytest.mark.asyncio
async def test_a_stop_before_catching_up_keeps_the_saved_commit():
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "_raft", NAME)
        os.makedirs(d)
        w, _ = WAL.open(d, "interval")
        w.save_hard_state(M.HardState(3, None, 50, 0))
        w.close()
        async with run_cluster(1) as (srv,):
            me = peer_id(srv.name)
            g = RaftGroup(srv, NAME, [me, A, B], tmp, apply=lambda i, data: None)
            await g.start()
            try:
                g.node.step(M.VoteRequest(4, A, me, 0, 0))  # (a term change not yet saved when the group stops)
            finally:
                await g.stop()
        w, rec = WAL.open(d, "interval")
        w.close()
        assert rec.hard_state.term == 4 and rec.stored_commit == 50


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def error(self, s: str) -> None:
        self.lines.append(("ERR", s))

    def warn(self, s: str) -> None:
        self.lines.append(("WRN", s))


class _Store:
    def __init__(self, last: int) -> None:
        self.last_seq = last

    def skip_msgs(self, seq: int, n: int) -> None:
        assert seq == self.last_seq + 1
        self.last_seq += n


def _replica(last: int, data_lost=None):
    from types import SimpleNamespace as NS

    from rillet.jetstream.cluster.stream_loss import StreamLossMixin

    class Replica(StreamLossMixin):
        pass

    r = Replica()
    log = _Log()
    r.name, r.stream, r.group = "JF", NS(store=_Store(last)), NS(memory=True)
    r.cs, r.jsa = NS(js=NS(log=log)), NS(account=NS(name="$G"))
    r._floor, r.replay_seq, r.skipped, r.data_lost = 0, last, None, data_lost
    return r, log


def test_a_replica_that_learns_the_loss_from_the_replicated_report_logs_it():
    """A member that came back after the others had recovered found nothing itself: the leader's LOST entry tells it,
    and it says so as the members that found it do (once: a replay of the entry logs nothing more)."""
    report = {"raft_first": 1, "raft_last": 2680, "entries": 2680, "server": "n2", "seq_mark": 4726}
    r, log = _replica(0)
    r._apply_lost(dict(report))
    errs = [s for lvl, s in log.lines if lvl == "ERR"]
    assert len(errs) == 1 and "stream '$G > JF' lost 2680 committed RAFT entries (1..2680), as n2 found" in errs[0]
    assert r.stream.store.last_seq == 4726 and r.data_lost["raft_last"] == 2680
    log.lines.clear()
    r._apply_lost(dict(report))  # (replayed after a restart)
    assert not [s for lvl, s in log.lines if lvl == "ERR"]
    # a member that found the same loss itself (its own report) is not told twice
    mine = {"raft_first": 1, "raft_last": 2680, "entries": 2680, "server": "n1", "seq_mark": 4726}
    r2, log2 = _replica(0, mine)
    r2._apply_lost(dict(report))
    assert not [s for lvl, s in log2.lines if lvl == "ERR"]
