"""A Rillet replica in a group that a Go meta leader has just created votes as nats-server's members do.

nats-server makes an initializing node for an assignment that it is not replaying at start-up: its empty log
answers a vote as a full one (``empty`` unset) while its vote is free for that candidate, so that a new group
elects with a quorum of its members, not all of them. Every vote on the wire (``$NRG.V.<group>`` requests,
their ``$NRG.R.`` inbox answers) is compared here: the Rillet server's answers with the Go servers'.
"""
from __future__ import annotations

import asyncio
import shutil

import pytest

from rillet.raft import gowire as gw

from test_jscluster_gometa import CAP, _member, _rillet_conf, _until, go_cluster  # noqa: F401
from helpers import serve_config

pytestmark = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


async def test_a_rillet_member_of_a_new_go_led_group_votes_as_initializing(go_cluster):  # noqa: F811
    import nats
    gc = go_cluster
    nc = await nats.connect(gc.url("g1"))
    sysc = await nats.connect(gc.url("g1", "sys"))
    group_of: dict[str, str] = {}  # a candidate's vote inbox -> its group
    votes: list[tuple[str, gw.VoteResponse]] = []

    async def on_request(m):
        if m.reply:
            group_of[m.reply] = m.subject.split(".", 2)[2]

    async def on_reply(m):
        group = group_of.get(m.subject)
        if group is not None and len(m.data) == 17:  # (append entry responses share the inbox: 25 bytes)
            votes.append((group, gw.VoteResponse.decode(m.data)))

    await sysc.subscribe("$NRG.V.>", cb=on_request)
    await sysc.subscribe("$NRG.R.>", cb=on_reply)
    await sysc.flush()
    try:
        await CAP._until(lambda: CAP._js_ready(nc), 60, what="Go meta leader")
        js = nc.jetstream(timeout=30)
        async with serve_config(_rillet_conf(gc)) as srv:
            m = await _member(srv)
            me = gw.peer_id("r1")
            await _until(lambda: m.raft.commit > 0 and m.raft.leader and me in m.raft.peers, 60,
                         what="the Rillet server in the meta group")
            hosted: list[str] = []
            for i in range(12):  # (4 servers, R3: each new group holds the Rillet server 3 times in 4)
                name = f"NG{i}"
                await js.add_stream(name=name, subjects=[f"ng{i}.>"], num_replicas=3)
                await js.publish(f"ng{i}.x", b"first")
                if ("A", name) in m.replicas:
                    hosted.append(m.replicas[("A", name)].group)
                mine = [vr for g, vr in votes if vr.peer == me and g in hosted]
                if len(mine) >= 2:
                    break
            await sysc.flush()
            mine = [(g, vr) for g, vr in votes if vr.peer == me and g in hosted]
            go = [(g, vr) for g, vr in votes if vr.peer != me and g.startswith("S-")]
            print("hosted", len(hosted), "rillet votes", mine, "go votes", go)
            assert mine, "the Rillet server was asked no vote in a new group"
            # as the Go members of the same new groups: a vote granted from an empty log is not empty
            assert all(vr.granted and not vr.empty for _g, vr in mine), mine
            assert all(not vr.empty for _g, vr in go if vr.granted), go
            # and its replicas hold the group's history now: an initializing node no longer once it has one
            for name in [k[1] for k in m.replicas if len(k) == 2]:
                r = m.replicas[("A", name)]
                await _until(lambda: r.raft.pindex > 0, 30, what=f"{name}'s replica holding entries")
                assert not r.raft.initializing
    finally:
        await sysc.close()
        await nc.close()
