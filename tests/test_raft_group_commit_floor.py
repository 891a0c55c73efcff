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
