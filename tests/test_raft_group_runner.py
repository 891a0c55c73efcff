"""The RAFT group driver's runner (rillet/jetstream/cluster/group.py): a group's Ready loop runs when the server
writes out its pending output (``flush_clients``, at the end of the read that fed the group), not a loop turn
later; a flush made from inside a group's work does not run the groups again; a small committed batch's
commit-only appends leave after its applies (their PubAcks first). Also the transport's cache of received
subjects."""
from __future__ import annotations

import asyncio
import os
import tempfile
import time

import pytest

from rillet.app.embed import run_cluster
from rillet.jetstream.cluster.group import RaftGroup
from rillet.jetstream.cluster.grouprun import DEFER_INPUTS, _Runner
from rillet.jetstream.cluster.peers import peer_id
from rillet.raft import msgs as M
from rillet.server.server import Server


class FakeServer:
    """Just what the runner uses: pending_flush and pending_late, schedule_flush, and the server's flush_clients
    (the connections first, then the late writers: the runner)."""

    def __init__(self) -> None:
        self.pending_flush: list = []
        self.pending_late: list = []
        self.scheduled = 0
        self.written: list = []

    def schedule_flush(self) -> None:
        self.scheduled += 1

    flush_clients = Server.flush_clients  # (the server's own: it only reads pending_flush and pending_late)


class FakeConn:
    def __init__(self, srv: FakeServer, name: str) -> None:
        self.srv, self.name, self.queued = srv, name, False
        self.closed = False
        self.transport = None

    def send(self) -> None:
        if not self.queued:
            self.queued = True
            self.srv.pending_flush.append(self)

    def write_out(self) -> None:
        self.queued = False
        self.srv.written.append(self.name)


class FakeGroup:
    _inputs = 0
    node = None

    def __init__(self, runner: _Runner, name: str, work=None) -> None:
        self.runner, self.name, self.work, self.runs = runner, name, work, 0

    def _process(self) -> None:
        self.runs += 1
        if self.work is not None:
            self.work()


def test_runner_runs_queued_groups_in_the_flush_and_writes_their_output_in_it():
    srv = FakeServer()
    r = _Runner(srv)
    out = FakeConn(srv, "route")
    a = FakeGroup(r, "a", out.send)
    b = FakeGroup(r, "b")
    r.add(a)
    r.add(b)
    # queued once (a late writer: after the connections, once a read is done), a flush scheduled once
    assert srv.pending_late == [r] and not srv.pending_flush and srv.scheduled == 1
    srv.flush_clients(hold_late=True)  # (a slice of a read that goes on: the groups wait)
    assert (a.runs, b.runs) == (0, 0) and srv.pending_late == [r]
    srv.flush_clients()
    assert (a.runs, b.runs) == (1, 1)
    assert srv.written == ["route"]  # what a group produced is written in the same flush_clients call
    assert not srv.pending_flush and not srv.pending_late and not r.groups
    r.add(a)
    assert srv.pending_late == [r] and srv.scheduled == 2


def test_runner_a_flush_from_inside_a_group_does_not_run_the_groups_again():
    srv = FakeServer()
    r = _Runner(srv)
    order: list[str] = []
    late = FakeGroup(r, "late", lambda: order.append("late"))

    def first_work() -> None:
        order.append("first")
        r.add(late)  # (a proposal to another group from inside an apply)
        srv.flush_clients()  # (an apply answering a request flushes): must not run "late" nested
        order.append("first done")

    first = FakeGroup(r, "first", first_work)
    r.add(first)
    srv.flush_clients()
    assert order == ["first", "first done", "late"]
    assert late.runs == 1 and not r.groups and not r.running


def test_runner_a_failing_group_is_logged_and_the_others_run():
    srv = FakeServer()
    r = _Runner(srv)
    errors: list[str] = []

    class Log:
        def error(self, msg: str) -> None:
            errors.append(msg)

    def boom() -> None:
        raise RuntimeError("boom")

    bad = FakeGroup(r, "bad", boom)
    bad.log = Log()
    good = FakeGroup(r, "good")
    r.add(bad)
    r.add(good)
    srv.flush_clients()  # (must not raise into the connection that was being read)
    assert good.runs == 1 and bad.runs == 1 and not r.running
    assert len(errors) == 1 and "'bad'" in errors[0] and "RuntimeError('boom')" in errors[0]


@pytest.mark.asyncio
async def test_runner_leaves_a_busy_group_to_the_end_of_the_loop_turn():
    srv = FakeServer()
    r = _Runner(srv)
    busy = FakeGroup(r, "busy")
    busy._inputs = DEFER_INPUTS + 1  # (many proposals or messages in this pass: the others of the turn join them)
    busy.loop = asyncio.get_running_loop()
    busy._deferred = lambda: (busy._process(), srv.flush_clients())
    lone = FakeGroup(r, "lone")
    lone._inputs = 1  # (a lone entry or answer: at once)
    r.add(busy)
    r.add(lone)
    srv.flush_clients()
    assert (lone.runs, busy.runs) == (1, 0)
    await asyncio.sleep(0)
    assert busy.runs == 1


def test_node_apply_only():
    import random
    from rillet.raft.node import LEADER, Node
    ids = ["aaaaaaaa", "bbbbbbbb", "cccccccc"]
    nodes = {i: Node(i, ids, rng=random.Random(1), election_tick=20, heartbeat_tick=3) for i in ids}
    net: list = []

    def drain(n):
        while n.has_ready():
            rd = n.ready()
            net.extend(rd.messages)
            n.advance(rd)

    def deliver(until=None):
        while net:
            m = net.pop(0)
            nodes[m.to].step(m)
            if until is not None and until(m):
                return m
            drain(nodes[m.to])

    lead = nodes["aaaaaaaa"]
    lead._campaign(pre=False)
    drain(lead)
    deliver()
    assert lead.role == LEADER
    lead.propose(b"x")
    assert not lead.apply_only()  # (entries to persist and send)
    drain(lead)
    f = nodes["bbbbbbbb"]
    m = deliver(lambda m: m.to == f.id and type(m) is M.AppendEntries and m.entries)
    assert m is not None and not f.apply_only()  # (an append to persist and answer)
    drain(f)
    m = deliver(lambda m: m.to == f.id and type(m) is M.AppendEntries and m.quiet)
    assert m is not None and f.commit > f.applied
    assert f.apply_only()  # (the commit only: nothing to persist or send)
    drain(f)
    assert not f.apply_only() and f.applied == f.commit


async def _until(cond, timeout: float = 8.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


@pytest.mark.asyncio
async def test_group_ready_runs_in_the_flush_and_quiet_commits_leave_after_the_applies():
    with tempfile.TemporaryDirectory() as tmp:
        async with run_cluster(3) as servers:
            peers = [peer_id(s.name) for s in servers]
            events: list[list] = [[] for _ in servers]

            def applier(i):
                def apply(index: int, data: bytes) -> None:
                    events[i].append(("apply", index))
                return apply

            groups = [RaftGroup(s, "G-runner", peers, os.path.join(tmp, f"s{i}"), apply=applier(i))
                      for i, s in enumerate(servers)]
            for g in groups:
                await g.start()
            await _until(lambda: any(g.is_leader for g in groups), what="a leader")
            await _until(lambda: all(g.leader is not None for g in groups), what="everyone knows the leader")
            li = next(i for i, g in enumerate(groups) if g.is_leader)
            lead = groups[li]
            tr = lead.transport
            real_send = tr.send

            def send(group: str, peer: str, data: bytes) -> None:
                if group == "G-runner":
                    m = M.decode(data)
                    if type(m) is M.AppendEntries:
                        events[li].append(("quiet" if m.quiet else "append", m.commit, len(m.entries)))
                real_send(group, peer, data)

            tr.send = send
            try:
                await asyncio.sleep(0.05)
                # a proposal outside any read: the group's Ready runs in the next flush_clients, within that call
                idx, _ = lead.propose(b"one")
                n = lead.node
                assert n.stable < idx
                servers[li].flush_clients()
                assert n.stable == idx and not n.has_ready(), "the Ready did not run inside flush_clients"
                assert ("append", n.commit, 1) in events[li]
                await _until(lambda: ("apply", idx) in events[li], what="the entry applied on the leader")
                await _until(lambda: any(e[0] == "quiet" and e[1] >= idx for e in events[li]),
                             what="the commit told to the followers")
                ev = events[li]
                applied_at = ev.index(("apply", idx))
                quiet_at = min(k for k, e in enumerate(ev) if e[0] == "quiet" and e[1] >= idx)
                assert applied_at < quiet_at, ev  # the commit-only appends leave after the apply's output
                for i, g in enumerate(groups):
                    await _until(lambda i=i: ("apply", idx) in events[i], what=f"applied on member {i}")
            finally:
                tr.send = real_send
            for g in groups:
                await g.stop()


@pytest.mark.asyncio
async def test_a_follower_answers_an_append_before_applying_what_it_committed(monkeypatch):
    """The append that brings entry N+1 commits entry N (the commit-only notice held, a lazy group): a follower's
    answer is written to its route before it applies N, so that the leader's commit of N+1 does not wait for
    this member's store write of N (one publish in flight: an R3 sync publish)."""
    from rillet.jetstream.cluster import group as group_mod
    monkeypatch.setattr(group_mod, "COMMIT_NOTICE_EVERY", 60.0)  # (every commit but the first rides on an append)
    with tempfile.TemporaryDirectory() as tmp:
        async with run_cluster(3) as servers:
            peers = [peer_id(s.name) for s in servers]
            seen: list[list[tuple[int, bool]]] = [[] for _ in servers]

            def answer_waiting(srv) -> bool:  # this group's answer still in a connection's output buffer
                return any(b"G-answer" in bytes(getattr(c, "out", b"")) for c in srv.pending_flush)

            def applier(i):
                def apply(index: int, data: bytes) -> None:
                    seen[i].append((index, answer_waiting(servers[i])))
                return apply

            groups = [RaftGroup(s, "G-answer", peers, os.path.join(tmp, f"s{i}"), apply=applier(i))
                      for i, s in enumerate(servers)]
            for g in groups:
                g.lazy_commits = lambda: True
                await g.start()
            await _until(lambda: any(g.is_leader for g in groups), what="a leader")
            await _until(lambda: all(g.leader is not None for g in groups), what="everyone knows the leader")
            li = next(i for i, g in enumerate(groups) if g.is_leader)
            lead = groups[li]
            last = 0
            for k in range(6):  # one in flight at a time, as a synchronous publisher
                last, _ = lead.propose(b"entry %d" % k)
                await _until(lambda: lead.node.commit >= last, what=f"entry {last} committed")
            for i, g in enumerate(groups):
                if i != li:
                    await _until(lambda i=i: any(x[0] == last - 1 for x in seen[i]),
                                 what=f"member {i} applied entry {last - 1}")
                    assert seen[i] and not any(w for _, w in seen[i]), seen[i]
            for g in groups:
                await g.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("lazy", [False, True])
async def test_commit_only_appends_held_under_load_in_a_lazy_group(lazy):
    """A group whose owner allows it (lazy_commits) tells a commit with no append to carry it at once when no such
    notice left within COMMIT_NOTICE_EVERY, else holds it that long: the next append carries the commit and the
    held one is dropped. The followers still apply everything, and a lone commit is told at once."""
    with tempfile.TemporaryDirectory() as tmp:
        async with run_cluster(3) as servers:
            peers = [peer_id(s.name) for s in servers]
            applied: list[list[int]] = [[] for _ in servers]
            groups = [RaftGroup(s, "G-lazy", peers, os.path.join(tmp, f"s{i}"),
                                apply=lambda index, data, i=i: applied[i].append(index))
                      for i, s in enumerate(servers)]
            for g in groups:
                if lazy:
                    g.lazy_commits = lambda: True
                await g.start()
            await _until(lambda: any(g.is_leader for g in groups), what="a leader")
            await _until(lambda: all(g.leader is not None for g in groups), what="everyone knows the leader")
            li = next(i for i, g in enumerate(groups) if g.is_leader)
            lead = groups[li]
            tr = lead.transport
            real_send = tr.send
            quiet: list[tuple[float, int]] = []

            def send(group: str, peer: str, data: bytes) -> None:
                if group == "G-lazy":
                    m = M.decode(data)
                    if type(m) is M.AppendEntries and m.quiet:
                        quiet.append((time.monotonic(), m.commit))
                real_send(group, peer, data)

            tr.send = send
            try:
                await asyncio.sleep(0.2)
                quiet.clear()
                last = 0
                deadline = time.monotonic() + 8
                for k in range(20):  # one at a time, each committed before the next: a sync publisher
                    last, _ = lead.propose(b"%d" % k)
                    servers[li].flush_clients()
                    while lead.node.commit < last:  # (no polling interval: the next proposal follows at once)
                        assert time.monotonic() < deadline, "not committed"
                        await asyncio.sleep(0)
                for i in range(3):
                    await _until(lambda i=i: last in applied[i], what=f"applied on member {i}")
                if lazy:
                    assert len(quiet) < 20, quiet  # (20 commits, 2 followers: 40 when each is told at once)
                else:
                    assert len(quiet) >= 40, quiet
                await asyncio.sleep(0.05)
                quiet.clear()
                one, _ = lead.propose(b"lone")  # after a pause: told at once, not after the hold
                servers[li].flush_clients()
                await _until(lambda: lead.node.commit >= one, what="committed")
                t = time.monotonic()
                await _until(lambda: len(quiet) >= 2, what="the lone commit told")
                assert quiet[0][1] >= one and quiet[0][0] - t < 0.004
            finally:
                tr.send = real_send
            for g in groups:
                await g.stop()


@pytest.mark.asyncio
async def test_snapshots_spaced_in_time_unless_the_log_grows_large():
    from rillet.jetstream.cluster import group as G
    srv = FakeServer()
    srv.name = "s1"
    srv.log = None
    g = RaftGroup(srv, "G-snap", ["aaaaaaaa"], "/nonexistent", apply=lambda i, d: None)
    g.loop = asyncio.get_running_loop()
    assert g.compact_due(8192)  # (the first snapshot: at once)
    g._snap_at = g.loop.time()  # (as compact() records it)
    assert not g.compact_due(8192) and not g.compact_due(G.COMPACT_MAX_ENTRIES - 1)
    assert g.compact_due(G.COMPACT_MAX_ENTRIES)  # (the in-memory log is bounded)
    g._snap_at = g.loop.time() - G.COMPACT_MIN_INTERVAL
    assert g.compact_due(8192)


@pytest.mark.asyncio
async def test_transport_caches_checked_sender_subjects():
    async with run_cluster(2) as servers:
        from rillet.jetstream.cluster.grouprun import shared_transport
        got: list[tuple[str, str, bytes]] = []
        a, b = (shared_transport(s) for s in servers)
        b.join("G-cache", lambda g, f, d: got.append((g, f, d)))
        a.join("G-cache", lambda g, f, d: None)
        await asyncio.sleep(0.2)  # (the subscriptions cross the route)
        for k in range(3):
            a.send("G-cache", b.peer, b"m%d" % k)
        servers[0].flush_clients()
        await _until(lambda: len(got) == 3, what="three messages")
        assert got == [("G-cache", a.peer, b"m%d" % k) for k in range(3)]
        assert list(b._senders.values()) == [("G-cache", a.peer)]  # parsed and checked once
        # a malformed sender id is refused every time, never cached
        bad = f"$RNRG.D.G-cache.{b.peer}.nopeer".encode()
        before = b.bad
        b._deliver(None, None, bad, None, 0, b"x")
        b._deliver(None, None, bad, None, 0, b"x")
        assert b.bad == before + 2 and bad not in b._senders
        b.leave("G-cache")
        assert not b._senders
        a.leave("G-cache")
