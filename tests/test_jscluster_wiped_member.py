"""A wiped member of a RAFT group (rillet/jetstream/cluster/wipedmember.py, group.py), three in-process servers
over real routes: a member of a group its server had before that starts with no state on disk starts recovering
without a vote, so with the third member down the group has no leader (its vote could elect a member lacking
entries it and the third had committed: tests/faults/wiped-vote.md); stopped again before it caught up, it
restarts still wiped (the ``wiped`` file), although it now holds a hard state; once the third is back it catches
up, takes part again and the file goes."""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time

import pytest

from rillet.app.embed import run_cluster
from rillet.jetstream.cluster import wipedmember
from rillet.jetstream.cluster.group import RaftGroup
from rillet.jetstream.cluster.peers import peer_id


async def _until(cond, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class SM:
    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def apply(self, index: int, data: bytes) -> None:
        self.applied.append((index, data))

    def datas(self) -> list[bytes]:
        return [d for _, d in self.applied]


def _group(srv, peers, store, sm) -> RaftGroup:
    return RaftGroup(srv, "S-R3F-wipedtst", peers, store, apply=sm.apply, sync="always")


def _leader(groups):
    ls = [g for g in groups if g is not None and g.running and g.is_leader]
    return ls[0] if len(ls) == 1 else None


@pytest.mark.asyncio
async def test_wiped_member_gives_no_vote_until_caught_up_across_restarts(monkeypatch):
    had = {"yes": False}
    monkeypatch.setattr(wipedmember, "existing_member", lambda server, name: had["yes"])
    with tempfile.TemporaryDirectory() as tmp:
        async with run_cluster(3) as servers:
            peers = [peer_id(s.name) for s in servers]
            stores = [os.path.join(tmp, f"s{i}") for i in range(3)]
            sms = [SM() for _ in servers]
            groups: list = [_group(s, peers, st, sm) for s, st, sm in zip(servers, stores, sms)]
            for g in groups:
                await g.start()
            assert not any(g.node.recovering for g in groups)  # (a new group: nobody recovering)
            await _until(lambda: _leader(groups) is not None, what="a leader")
            lead = _leader(groups)
            for i in range(10):
                lead.propose(b"m%d" % i)
            await _until(lambda: all(len(sm.applied) == 10 for sm in sms), what="10 entries everywhere")
            li = groups.index(lead)
            w, o = [i for i in range(3) if i != li]
            # the follower w stops and its store goes; the other follower o stops too
            await groups[w].stop()
            shutil.rmtree(stores[w])
            await groups[o].stop()
            groups[o] = None
            # (the leader, alone, steps down: check-quorum. Until then it could catch the wiped member up, safely)
            await _until(lambda: _leader(groups) is None, what="the leader alone stepped down")
            had["yes"] = True  # (its server had the group: the meta layer's record)
            sms[w] = SM()
            groups[w] = _group(servers[w], peers, stores[w], sms[w])
            await groups[w].start()
            gw = groups[w]
            assert gw.node.recovering and gw.node.votes_lost and gw.node.stateless
            assert wipedmember.marked(gw.dir)
            # no leader while o is down (several election timeouts)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5.0:
                assert _leader(groups) is None, "a leader elected with the wiped member's vote"
                await asyncio.sleep(0.05)
            # stopped again before it caught up: still wiped, though its store now holds a hard state
            await gw.stop()
            had["yes"] = False  # (the file alone says so now)
            groups[w] = gw = _group(servers[w], peers, stores[w], sms[w])
            await gw.start()
            assert gw.node.recovering and gw.node.stateless
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3.0:
                assert _leader(groups) is None, "a leader elected with the wiped member's vote (after its restart)"
                await asyncio.sleep(0.05)
            # o is back: a leader, w catches up and takes part again; the file goes
            groups[o] = _group(servers[o], peers, stores[o], SM())
            await groups[o].start()
            await _until(lambda: _leader(groups) is not None, what="a leader once the third member is back")
            await _until(lambda: not gw.node.recovering, what="the wiped member caught up")
            await _until(lambda: sms[w].datas()[:10] == [b"m%d" % i for i in range(10)], what="its entries")
            assert not wipedmember.marked(gw.dir) and not gw.node.stateless
            for g in groups:
                await g.stop()


def _srv(h):
    from types import SimpleNamespace
    return SimpleNamespace(jetstream=SimpleNamespace(cluster=SimpleNamespace(members=h)))


def test_a_hand_deleted_group_directory_is_known_by_the_record(tmp_path):
    """members.json (in the meta group's directory) records the groups whose member started here: a member
    starting with its directory gone is wiped (deleted by hand, the meta state kept); one whose directory is
    there (it started, wrote nothing) is not; the meta group itself is never recorded; a member that left with
    its directory is forgotten. The record is read again at the next start."""
    meta = tmp_path / "_raft" / "_meta_"
    meta.mkdir(parents=True)
    h = wipedmember.MemberHistory("p1")
    h.load(str(meta))
    gdir = tmp_path / "_raft" / "S-R3F-abc"
    gdir.mkdir()
    wipedmember.started(_srv(h), "S-R3F-abc", str(gdir))
    wipedmember.started(_srv(h), "_meta_", str(meta))
    again = wipedmember.MemberHistory("p1")
    again.load(str(meta))  # (the next start)
    assert again.started_here == {"S-R3F-abc"}
    assert wipedmember.hand_deleted(_srv(again), "S-R3F-abc", dir_existed=False)
    assert not wipedmember.hand_deleted(_srv(again), "S-R3F-abc", dir_existed=True)
    assert not wipedmember.hand_deleted(_srv(again), "S-R3F-other", dir_existed=False)
    wipedmember.forgotten(_srv(again), "S-R3F-abc")
    third = wipedmember.MemberHistory("p1")
    third.load(str(meta))
    assert not wipedmember.hand_deleted(_srv(third), "S-R3F-abc", dir_existed=False)
