"""RaftGroup (rillet/jetstream/cluster/group.py): the RAFT driver over real routes, in three in-process
servers: a group forms and elects, replicates in order, survives its leader's stop (another is elected),
a stopped member restarts from its WAL (re-applying what it stored) and catches up; snapshots compact
the log and a restart restores from them; a group of one elects itself at once."""
from __future__ import annotations

import asyncio
import os
import tempfile
import time

import pytest

from rillet.jetstream.cluster.group import RaftGroup
from rillet.jetstream.cluster.peers import peer_id
from rillet.jetstream.log import NotLeader
from rillet.app.embed import run_cluster


async def _until(cond, timeout: float = 8.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class SM:
    """A state machine: the list of applied (index, data)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.leader_changes: list[bool] = []

    def apply(self, index: int, data: bytes) -> None:
        if self.applied:
            assert index > self.applied[-1][0], "entries applied out of order"
        self.applied.append((index, data))

    def snapshot(self) -> bytes:
        return b"\n".join(b"%d %s" % (i, d) for i, d in self.applied)

    def restore(self, data: bytes) -> None:
        self.applied = []
        for line in data.split(b"\n") if data else ():
            i, d = line.split(b" ", 1)
            self.applied.append((int(i), d))

    def datas(self) -> list[bytes]:
        return [d for _, d in self.applied]


def _group(srv, peers, store, sm, name="G-test", **kw) -> RaftGroup:
    return RaftGroup(srv, name, peers, store, apply=sm.apply, on_leader_change=sm.leader_changes.append,
                     snapshot=sm.snapshot, restore=sm.restore, **kw)


def _leader(groups):
    ls = [g for g in groups if g.running and g.is_leader]
    return ls[0] if len(ls) == 1 else None


@pytest.mark.asyncio
async def test_group_elects_replicates_fails_over_and_restarts_from_wal():
    with tempfile.TemporaryDirectory() as tmp:
        async with run_cluster(3) as servers:
            peers = [peer_id(s.name) for s in servers]
            stores = [os.path.join(tmp, f"s{i}") for i in range(3)]
            sms = [SM() for _ in servers]
            groups = [_group(s, peers, st, sm) for s, st, sm in zip(servers, stores, sms)]
            for g in groups:
                await g.start()
            await _until(lambda: _leader(groups) is not None, what="a leader")
            lead = _leader(groups)
            assert all(g.leader == lead.id for g in groups if g is not lead) or True
            await _until(lambda: all(g.leader == lead.id for g in groups), what="everyone knows the leader")
            assert sms[groups.index(lead)].leader_changes == [True]
            # followers refuse proposals
            for g in groups:
                if g is not lead:
                    with pytest.raises(NotLeader):
                        g.propose(b"x")
            idx = [lead.propose(b"m%d" % i)[0] for i in range(20)]
            assert idx == list(range(idx[0], idx[0] + 20))
            await _until(lambda: all(len(sm.applied) == 20 for sm in sms), what="20 entries everywhere")
            assert all(sm.datas() == [b"m%d" % i for i in range(20)] for sm in sms)
            assert all(sm.applied == sms[0].applied for sm in sms)
            st = lead.status()
            assert st["state"] == "LEADER" and st["size"] == 3 and st["quorum_needed"] == 2
            assert all(p["current"] for p in st["peers"].values())

            # the leader stops: another is elected, and the old leader's owner was told
            li = groups.index(lead)
            await lead.stop()
            assert sms[li].leader_changes == [True, False]
            rest = [g for g in groups if g is not lead]
            await _until(lambda: _leader(rest) is not None, timeout=10, what="a new leader")
            lead2 = _leader(rest)
            for i in range(20, 25):
                lead2.propose(b"m%d" % i)
            await _until(lambda: all(len(sms[groups.index(g)].applied) == 25 for g in rest), what="25 entries")

            # the stopped member restarts from its WAL with a fresh state machine: it re-applies what it
            # stored, then catches up with what it missed
            sms[li] = SM()
            groups[li] = _group(servers[li], peers, stores[li], sms[li])
            await groups[li].start()
            await _until(lambda: len(sms[li].applied) == 25, what="the restarted member caught up")
            assert sms[li].applied == sms[groups.index(lead2)].applied

            # leader stepdown hands over to another member
            lead2.stepdown()
            await _until(lambda: _leader(groups) is not None and _leader(groups) is not lead2, what="stepdown")
            lead3 = _leader(groups)
            lead3.propose(b"after-stepdown")
            await _until(lambda: all(sm.datas()[-1:] == [b"after-stepdown"] for sm in sms), what="replicated")

            # snapshot and compaction on every member, then a restart restores from the snapshot
            for g in groups:
                g.compact()
            assert all(g.status()["snapshot_index"] == g.applied for g in groups)
            await groups[0].stop()
            sms[0] = SM()
            groups[0] = _group(servers[0], peers, stores[0], sms[0])
            await groups[0].start()
            assert sms[0].datas()[-1:] == [b"after-stepdown"] and len(sms[0].applied) == 26
            for g in groups:
                await g.stop()
            # delete removes the group's directory
            await groups[1].stop(delete=True)
            assert not os.path.exists(os.path.join(stores[1], "_raft", "G-test"))


@pytest.mark.asyncio
async def test_group_of_one_elects_itself_at_once_and_applied_floor_skips_replays():
    with tempfile.TemporaryDirectory() as tmp:
        async with run_cluster(1) as (srv,):
            sm = SM()
            g = _group(srv, [peer_id(srv.name)], tmp, sm, name="S-R1F-abcdefgh", sync="always")
            t0 = time.monotonic()
            await g.start()
            await _until(lambda: g.is_leader, timeout=2, what="leader of one")
            assert time.monotonic() - t0 < 0.5
            for i in range(5):
                g.propose(b"e%d" % i)
            await _until(lambda: len(sm.applied) == 5, what="applied")
            last = sm.applied[-1][0]
            await g.stop()
            # an owner whose state is durable says how far it is: nothing at or below is re-applied
            sm2 = SM()
            g2 = RaftGroup(srv, "S-R1F-abcdefgh", [peer_id(srv.name)], tmp, apply=sm2.apply,
                           applied_floor=lambda: last - 2)
            await g2.start()
            await _until(lambda: g2.is_leader, timeout=2, what="leader again")
            assert [i for i, _ in sm2.applied] == [last - 1, last]
            await g2.stop()
