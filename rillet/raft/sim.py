"""A deterministic simulator for rillet.raft.node: one seed drives the clock, the network, the disks,
the faults and the client, so every run reproduces.

The simulator owns time (integer units; every node ticks every TICK units from its own phase), the
network (each message is encoded to bytes on send and decoded on delivery, and may be dropped,
duplicated, delayed and so reordered, or blocked by a symmetric or one-way partition), and each node's
disk (writes are pending until a sync; a crash keeps only what was synced plus a random prefix of the
pending writes, like a file system that flushed some of the page cache). A node's driver follows the
Ready contract: write snapshot, entries and hard state, sync when ``must_sync`` (a disk delay may pass
before the sync completes, and a crash in between loses the writes), then send, apply, advance.

Lazy runs (about 40% of the seeds) model the drivers that fsync entries only on an interval (JetStream's
default ``sync_interval``): hard state is durable at once, entries only at a periodic sync or a snapshot; a
conflicting suffix is truncated durably at once (as the WAL does); a
crash is either a killed process (the page cache survives: nothing is lost) or a power cut that loses every
write since the last sync, the latter only while the nodes that lost data and have not yet recovered stay a
minority; a restarted node starts ``recovering``. The same checks hold (no committed or acknowledged entry
lost), no node may report lost entries (``Node.lost``: nothing was lost), and after healing no voter may stay
recovering. ``run_power_all`` cuts every node at once instead: acknowledged entries may be lost, but never
silently (some node must report them, and every node that had saved a commit index covering an entry now
gone must report it itself).

A run has a fault phase (crashes and restarts from the simulated disk, pauses, partitions, lossy
network, client proposals at random times, membership changes and leader transfers; with ``wipes``, any voter's
disk lost while the wiped members not yet caught up, with the lazy runs' nodes that lost data, stay a minority,
the node restarting ``recovering`` with ``votes_lost`` and ``wiped`` as a Rillet member of a group its server had
before does (rillet/jetstream/cluster/wipedmember.py; a durable mark until it has caught up); with ``hs_loss``, crashes
that lose the hard state, the node restarting with ``votes_lost`` as rillet.raft.wal makes it when both copies
are damaged, and nothing sent to an earlier incarnation delivered to it, as over the routes) and a heal phase
(everything restarted and reconnected) in which a leader must be elected and a final proposal must
commit and be applied by every member within a bound. The Checker watches every run for RAFT's safety
properties; any violation is a failure that ``python scripts/raft_sim.py --seed N`` reproduces.
"""
from __future__ import annotations

import heapq
import random
from collections import Counter
from typing import Optional

import msgspec

from .msgs import (ENTRY_CONF, ENTRY_NORMAL, HardState, RecoveryQuery, RecoveryState, Snapshot, TimeoutNow,
                   VoteResponse, decode, encode)
from .node import ADD, CANDIDATE, LEADER, REMOVE, Node, RaftError, decode_peers

TICK = 10
ELECTION_TICK = 10

_sm_encoder = msgspec.msgpack.Encoder()
_sm_decoder = msgspec.msgpack.Decoder(list[tuple[int, bytes]])


class _VoteAnyLog(Node):
    """Mutant for testing the checker: grants votes without the log up-to-date check."""

    def _up_to_date(self, last_index: int, last_term: int) -> bool:
        return True


# deliberately broken behaviour, to show the checker fails runs: driver mutations change what SimNode
# persists; node mutations swap the Node class
MUTATIONS = {"forget_vote": "the driver persists the hard state without the vote",
             "no_sync": "the driver never fsyncs (a crash loses everything since the last compaction)",
             "vote_any_log": "the node grants votes to candidates whose log is behind",
             "no_recovery": "(lazy runs) a node restarted after a power cut takes part at once, not recovering",
             "trust_lost_votes": "(hs_loss) a node whose hard state was lost votes at once (term from its log)",
             "wiped_votes": "(wipes) a wiped node comes back as a new member: it votes at once"}


class SimDisk:
    """Durable state (hard state, snapshot, entries) plus the writes not yet synced."""
    __slots__ = ("hs", "snap", "entries", "pending", "base", "hs_lost", "wiped")

    def __init__(self) -> None:
        self.hs: Optional[HardState] = None
        # (hs_loss) the hard state was lost: until one with a vote is durable (rillet.raft.wal's hardstate.lost)
        self.hs_lost = False
        self.wiped = False  # (wipes) the disk was lost and the node has not caught up since (wipedmember's mark)
        self.snap: Optional[Snapshot] = None
        self.entries: list = []
        self.pending: list = []
        self.base: Optional[tuple] = None  # the voters at the start of the log, when learnt from a leader

    def write(self, op: str, arg) -> None:
        self.pending.append((op, arg))

    def write_hs_now(self, hs: HardState) -> None:
        """A hard state written and fsynced on its own (a lazy driver's term, vote and commit)."""
        self.pending = [w for w in self.pending if w[0] != "hs"]
        self._apply("hs", hs)

    def last_index(self) -> int:
        """The last entry written, synced or not."""
        base = self.snap.index if self.snap else 0
        last = base + len(self.entries)
        for op, arg in self.pending:
            if op == "ents":
                last = arg[-1][0]
            elif op == "snap":
                last = arg.index
        return last

    def truncate_now(self, index: int) -> None:
        """A lazy driver's truncation of a conflicting suffix: everything written is synced first, the entries
        from ``index`` on are removed and that is durable at once (rillet.raft.wal's truncate_suffix)."""
        self.sync()
        base = self.snap.index if self.snap else 0
        if index - base - 1 >= 0:
            del self.entries[index - base - 1:]

    def lose_pending(self) -> None:
        """A power cut: everything since the last sync is gone."""
        self.pending = []

    def sync(self) -> None:
        for op, arg in self.pending:
            self._apply(op, arg)
        self.pending = []

    def crash(self, rng: random.Random) -> None:
        keep = rng.randrange(len(self.pending) + 1)
        for op, arg in self.pending[:keep]:
            self._apply(op, arg)
        self.pending = []

    def _apply(self, op: str, arg) -> None:
        if op == "hs":
            self.hs = arg
            if arg.vote is not None:
                self.hs_lost = False
        elif op == "ents":
            base = self.snap.index if self.snap else 0
            pos = arg[0][0] - base - 1
            if pos > len(self.entries):
                raise AssertionError(f"disk: entries from {arg[0][0]} leave a gap after {base + len(self.entries)}")
            if pos < 0:
                arg = arg[-pos:]
                pos = 0
            del self.entries[pos:]
            self.entries.extend(arg)
        elif op == "base":
            self.base = arg
        elif op == "snap":  # installed from the leader: replaces the whole log
            self.snap = arg
            self.entries = []
        elif op == "compact":  # local snapshot: drop the entries it covers
            base = self.snap.index if self.snap else 0
            del self.entries[:max(0, arg.index - base)]
            self.snap = arg
        else:
            raise AssertionError(op)


class SimNode:
    """One server: the RAFT node, its driver state, its disk and its state machine."""

    def __init__(self, sim: "Sim", nid: str, bootstrap: tuple) -> None:
        self.sim = sim
        self.id = nid
        self.bootstrap = bootstrap
        self.disk = SimDisk()
        self.node: Optional[Node] = None
        self.up = False
        self.paused = False
        self.busy = False
        self.inc = 0
        self.sm: list = []          # (index, data) of applied normal entries
        self.sm_index = 0
        self.backlog: list = []     # messages that arrived while paused
        self.client: dict = {}      # index -> (term, data) proposed through this incarnation
        self.lossy = False          # (lazy runs) lost unsynced writes at its last crash and not yet recovered
        self.started = 0            # when this incarnation started

    def start(self) -> None:
        sim = self.sim
        d = self.disk
        self.sm = list(_sm_decoder.decode(d.snap.data)) if d.snap else []
        self.sm_index = d.snap.index if d.snap else 0
        hs = d.hs
        known = 0
        if hs is not None:
            last = (d.snap.index if d.snap else 0) + len(d.entries)
            known = hs.commit
            if hs.commit > last:  # (a lazy driver's commit index was durable, the entries up to it were not)
                hs = HardState(hs.term, hs.vote, last)
        recovering = sim.lazy and self.inc > 0 and "no_recovery" not in sim.mutations
        lost = d.hs_lost and "trust_lost_votes" not in sim.mutations
        if d.hs_lost:  # (as the WAL: the term from the log, no vote, no commit; recovering, as the driver)
            last_term = d.entries[-1][1] if d.entries else (d.snap.term if d.snap else 0)
            hs = HardState(max(last_term, d.hs.term if d.hs else 0), None, 0)
            known = 0
            recovering = recovering or lost
        wiped = d.wiped and "wiped_votes" not in sim.mutations
        recovering = recovering or wiped
        self.node = sim.node_cls(self.id, d.base if d.base is not None else self.bootstrap, rng=random.Random(sim.rng.getrandbits(32)),
                         election_tick=ELECTION_TICK, heartbeat_tick=1, max_entries_per_msg=sim.batch,
                         max_inflight=sim.inflight, hard_state=hs, snapshot=d.snap, entries=d.entries,
                         recovering=recovering, known_commit=known, votes_lost=lost or wiped, wiped=wiped)
        self.started = sim.now
        self.up = True
        self.paused = False
        self.busy = False
        self.inc += 1
        self.client = {}
        self.backlog = []
        sim.at(sim.now + sim.rng.randrange(1, TICK + 1), sim.tick, self.id, self.inc)

    def crash(self, power: Optional[bool] = None) -> None:
        """A crash. In lazy runs: ``power`` (default: at random, while the nodes that lost data stay a
        minority) loses every unsynced write, else the process dies and the page cache survives."""
        sim = self.sim
        sim.stats["crashes"] += 1
        sim.stats["unsynced_writes_at_crash"] += len(self.disk.pending)
        if sim.lazy:
            if power is None:
                power = sim.rng.random() < 0.5 and sim.may_lose(self)
            if power:
                sim.stats["power_cuts"] += 1
                self.lossy = True
                self.disk.lose_pending()
            else:
                self.disk.sync()
        self.up = False
        self.inc += 1
        self.node = None
        self.busy = False
        self.backlog = []
        self.client = {}
        self.disk.crash(self.sim.rng)


class Checker:
    """RAFT's safety properties, checked as the run goes and at its end."""

    def __init__(self) -> None:
        self.leaders: dict = {}     # term -> node id
        self.committed: dict = {}   # index -> (term, kind, data) as first applied anywhere
        # index -> the applying node's term when it was first applied: the entry was committed by a leader of
        # that term or an earlier one (a node learns a commit from a leader of at most its own term)
        self.committed_by: dict = {}
        self.violations: list = []
        self.reported: set = set()

    def fail(self, what: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(what)

    def on_leader(self, nid: str, node: Node, now: int) -> None:
        term = node.term
        other = self.leaders.get(term)
        if other is not None and other != nid:
            if (term, nid) not in self.reported:
                self.reported.add((term, nid))
                self.fail(f"t={now}: two leaders in term {term}: {other} and {nid}")
            return
        self.leaders[term] = nid
        off = node.offset
        by = self.committed_by
        for i, c in self.committed.items():
            # RAFT's leader completeness is about leaders of later terms than the one that committed the entry:
            # a leader of an older term, elected late (its votes were granted before the newer term began, and
            # it learns of the newer term only afterwards: a paused candidate, seed 8513 --quick), may lack it;
            # it cannot commit anything, a majority being past its term
            if i > off and by[i] < term and node.term_at(i) != c[0]:
                self.fail(f"t={now}: leader completeness: {nid} leads term {term} without committed entry "
                          f"{i} (term {c[0]}; it has {node.term_at(i)})")
                return

    def on_apply(self, nid: str, e: tuple, now: int, term: int) -> None:
        c = self.committed.get(e[0])
        if c is None:
            self.committed[e[0]] = (e[1], e[2], e[3])
            self.committed_by[e[0]] = term
        elif c[0] != e[1] or c[1] != e[2] or c[2] != e[3]:
            self.fail(f"t={now}: state machine safety: {nid} applied {e[:3]} at {e[0]} where {c[:2]} was applied")

    def log_matching(self, nodes: list, now: int) -> None:
        for a in range(len(nodes)):
            for b in range(a + 1, len(nodes)):
                x, y = nodes[a], nodes[b]
                lo = max(x.offset, y.offset) + 1
                hi = min(x.last_index(), y.last_index())
                i = hi
                while i >= lo and x.term_at(i) != y.term_at(i):
                    i -= 1
                while i >= lo:
                    ex = x.log[i - x.offset - 1]
                    ey = y.log[i - y.offset - 1]
                    if ex != ey:
                        self.fail(f"t={now}: log matching: {x.id} and {y.id} agree on a later entry "
                                  f"but differ at {i}: {ex[:3]} vs {ey[:3]}")
                        return
                    i -= 1


class Sim:
    def __init__(self, seed: int, *, quick: bool = True, mutations: frozenset = frozenset(), n: Optional[int] = None,
                 hs_loss: bool = False, wipes: bool = False):
        self.seed = seed
        self.wipes = wipes
        self.rng = rng = random.Random(seed)
        self.quick = quick
        unknown = set(mutations) - set(MUTATIONS)
        if unknown:
            raise ValueError(f"unknown mutation(s) {sorted(unknown)}; known: {sorted(MUTATIONS)}")
        self.mutations = mutations
        self.hs_loss = hs_loss
        self.node_cls = _VoteAnyLog if "vote_any_log" in mutations else Node
        self.lazy = random.Random(seed * 7919 + 1).random() < 0.4  # (its own draw: the other seeds run as before)
        self.sync_every = 100 + random.Random(seed * 7919 + 2).randrange(300)
        self.n = n or rng.choice((3, 5))
        self.fault_time = (1500 if quick else 6000) + rng.randrange(500)
        self.heal_bound = 3000
        self.batch = rng.choice((1, 4, 64))
        self.inflight = rng.choice((1, 4, 64))
        self.compact_every = rng.choice((5, 20, 1000))
        self.now = 0
        self.q: list = []
        self.seq = 0
        self.drop = 0.0
        self.dup = 0.0
        self.slow = 0.05
        self.blocked: set = set()
        self.checker = Checker()
        self.deaf: set = set()  # nodes that never get a RecoveryState (run_power_all's late variant)
        self.deaf_until = 0  # (and, until then, nothing but RecoveryQuery)
        self.acked: list = []
        self.acked_set: set = set()
        self.proposed = 0
        self.events = 0
        self.log: list = []  # fault actions, for the failure report
        self.stats: Counter = Counter()
        ids = tuple(f"n{i}" for i in range(1, self.n + 1))
        self.next_id = self.n + 1
        self.nodes: dict = {nid: SimNode(self, nid, ids) for nid in ids}
        for sn in self.nodes.values():
            sn.start()
        if self.lazy:
            for k, nid in enumerate(ids):
                self.at(1 + k * self.sync_every // len(ids), self.periodic_sync, nid)

    # ---- event queue -------------------------------------------------------------------------------------

    def at(self, t: int, fn, *args) -> None:
        self.seq += 1
        heapq.heappush(self.q, (t, self.seq, fn, args))

    def run_until(self, t_end: int, stop=None) -> bool:
        q = self.q
        while q and q[0][0] <= t_end:
            t, _, fn, args = heapq.heappop(q)
            self.now = t
            self.events += 1
            fn(*args)
            if stop is not None and stop():
                return True
        self.now = t_end
        return False

    # ---- node driver -------------------------------------------------------------------------------------

    def tick(self, nid: str, inc: int) -> None:
        sn = self.nodes[nid]
        if not sn.up or sn.inc != inc:
            return
        self.at(self.now + TICK, self.tick, nid, inc)
        if sn.paused:
            return
        sn.node.tick()
        self.process(sn)

    def send(self, src: str, m) -> None:
        dst = m.to
        if (src, dst) in self.blocked:
            return
        rng = self.rng
        if self.drop and rng.random() < self.drop:
            return
        data = encode(m)
        delay = rng.randrange(1, 8)
        if rng.random() < self.slow:
            delay += rng.randrange(10, 80)
        self.at(self.now + delay, self.deliver, dst, data, self.now)
        if self.dup and rng.random() < self.dup:
            self.at(self.now + delay + rng.randrange(1, 40), self.deliver, dst, data, self.now)

    def deliver(self, dst: str, data: bytes, sent: int = 0) -> None:
        sn = self.nodes.get(dst)
        if sn is None or not sn.up:
            return
        if sent < sn.started and sn.node.votes_lost:
            return  # (sent to an earlier incarnation: a route connection does not outlive the process)
        if sn.paused:
            sn.backlog.append(data)
            return
        m = decode(data)
        if dst in self.deaf and (type(m) is RecoveryState
                                 or self.now < self.deaf_until and type(m) is not RecoveryQuery):
            return  # (run_power_all(late=True): its survey never completes, it recovers through a leader, later)
        sn.node.step(m)
        self.process(sn)

    def process(self, sn: SimNode) -> None:
        node = sn.node
        if node.role is LEADER and self.checker.leaders.get(node.term) != sn.id:
            self.checker.on_leader(sn.id, node, self.now)
        if sn.disk.wiped and not node.recovering:
            sn.disk.wiped = False  # (caught up: no longer wiped, across restarts too)
        if sn.busy or not node.has_ready():
            return
        rd = node.ready()
        disk = sn.disk
        if rd.snapshot is not None:
            disk.write("snap", rd.snapshot)
        if rd.entries:
            if self.lazy and rd.entries[0][0] <= disk.last_index():
                disk.truncate_now(rd.entries[0][0])
            disk.write("ents", list(rd.entries))
        if rd.base_peers is not None:
            disk.write("base", rd.base_peers)
        if rd.hard_state is not None:
            hs = rd.hard_state
            if "forget_vote" in self.mutations:
                hs = HardState(hs.term, None, hs.commit)
            if self.lazy:
                disk.write_hs_now(hs)
            else:
                disk.write("hs", hs)
        sn.busy = True
        if rd.must_sync and self.rng.random() < 0.3:
            self.at(self.now + self.rng.randrange(1, 6), self.ready_done, sn, sn.inc, rd)
        else:
            self.ready_done(sn, sn.inc, rd)

    def ready_done(self, sn: SimNode, inc: int, rd) -> None:
        if sn.inc != inc:
            return  # crashed while the disk was busy: the writes are lost or torn
        if rd.must_sync and "no_sync" not in self.mutations and (not self.lazy or rd.snapshot is not None):
            sn.disk.sync()
        voted = False
        for m in rd.messages:
            self.send(sn.id, m)
            if type(m) is VoteResponse and m.granted and not m.pre:
                voted = True
            elif type(m) is TimeoutNow:
                self.stats["timeout_now"] += 1
        if rd.snapshot is not None:
            self.stats["snapshots_installed"] += 1
            sn.sm = list(_sm_decoder.decode(rd.snapshot.data))
            sn.sm_index = rd.snapshot.index
        chk = self.checker
        node_is_leader = sn.node.role is LEADER
        for e in rd.committed_entries:
            i = e[0]
            if i != sn.sm_index + 1:
                chk.fail(f"t={self.now}: {sn.id} applies {i} after {sn.sm_index}")
            chk.on_apply(sn.id, e, self.now, sn.node.term)
            if e[2] == ENTRY_NORMAL:
                sn.sm.append((i, e[3]))
            elif e[2] == ENTRY_CONF and node_is_leader:
                self.stats["conf_changes_committed"] += 1
            sn.sm_index = i
            p = sn.client.pop(i, None)
            if p is not None and p[0] == e[1]:
                if p[1] != e[3]:
                    chk.fail(f"t={self.now}: {sn.id} index {i} term {e[1]} holds other data than proposed")
                self.acked.append(p[1])
                self.acked_set.add(p[1])
        node = sn.node
        node.advance(rd)
        sn.busy = False
        if voted and self.now < self.fault_time and self.rng.random() < 0.25:
            # a crash right after voting, and a quick restart: the vote must have survived on disk (hs_loss: or
            # be lost, half of the time, and never given again in its term)
            sn.crash()
            if self.hs_loss and self.rng.random() < 0.5:
                sn.disk.hs = None
                sn.disk.hs_lost = True
                self.stats["hslost_after_vote"] += 1
            self.at(self.now + self.rng.randrange(1, 6), self.restart, sn.id, sn.inc)
            return
        if sn.sm_index - node.offset >= self.compact_every:
            node.compact(sn.sm_index, _sm_encoder.encode(sn.sm))
            sn.disk.write("compact", node.snapshot)
            sn.disk.sync()
        if sn.up and not sn.paused:
            self.process(sn)

    # ---- client and faults -------------------------------------------------------------------------------

    def may_lose(self, sn: SimNode) -> bool:
        """(lazy runs) Whether ``sn`` may lose its unsynced writes now: the nodes that lost data and have not
        recovered since, with it, stay a minority of the smallest voter set any node has."""
        for o in self.nodes.values():
            if o.lossy and o.up and not o.node.recovering:
                o.lossy = False
        sizes = [len(o.node.voters) for o in self.nodes.values() if o.up and o.node.voters]
        n = min(sizes) if sizes else self.n
        return sum(1 for o in self.nodes.values() if o.lossy or o is sn) <= (n - 1) // 2

    def periodic_sync(self, nid: str) -> None:
        sn = self.nodes.get(nid)
        if sn is not None and sn.up:
            sn.disk.sync()
        if self.lazy and self.now < self.fault_time + 4 * self.heal_bound:
            self.at(self.now + self.sync_every, self.periodic_sync, nid)

    def leader(self) -> Optional[SimNode]:
        best = None
        for sn in self.nodes.values():
            if sn.up and not sn.paused and sn.node.role is LEADER:
                if best is None or sn.node.term > best.node.term:
                    best = sn
        return best

    def propose(self, data: bytes) -> Optional[tuple]:
        sn = self.leader()
        if sn is None:
            return None
        try:
            i, t = sn.node.propose(data)
        except RaftError:
            return None
        self.proposed += 1
        sn.client[i] = (t, data)
        self.process(sn)
        return sn, i, t

    def client(self) -> None:
        if self.now >= self.fault_time:
            return
        for _ in range(self.rng.choice((1, 1, 1, 5))):
            self.propose(b"c%d" % self.proposed)
        self.at(self.now + self.rng.randrange(3, 40), self.client)

    def fault(self) -> None:
        if self.now >= self.fault_time:
            return
        rng = self.rng
        self.at(self.now + rng.randrange(20, 200), self.fault)
        nodes = list(self.nodes.values())
        up = [sn for sn in nodes if sn.up]
        kinds = ("crash", "crash", "bounce", "bounce", "restart", "restart", "pause", "resume", "partition", "oneway",
                 "heal", "net", "net", "add", "remove", "transfer", "transfer", "wipe")
        kinds += ("hslost", "hslost", "hslost") if self.hs_loss else ()
        kind = rng.choice(kinds + ("wipe_member", "wipe_member") if self.wipes else kinds)
        if kind == "crash" and up:
            sn = rng.choice(up)
            sn.crash()
        elif kind == "bounce" and up:  # a crash and a quick restart, often in the middle of an election
            sn = rng.choice(up)
            sn.crash()
            self.at(self.now + rng.randrange(1, 30), self.restart, sn.id, sn.inc)
        elif kind == "wipe":
            sn = self.wipe_candidate()
            if sn is None:
                return
            # the disk is lost (a replaced machine, a deleted store directory): the node comes back with its
            # identity only, an empty log, no term and no vote
            sn.crash(power=False)
            sn.disk = SimDisk()
            sn.lossy = self.lazy
            self.at(self.now + rng.randrange(1, 60), self.restart, sn.id, sn.inc)
        elif kind == "wipe_member":
            sn = self.wiped_member_candidate()
            if sn is None:
                return
            # any voter's disk lost (its leader's too), kept a minority with the others not caught up yet: it comes
            # back with nothing but the mark that it was wiped
            sn.crash(power=False)
            sn.disk = SimDisk()
            sn.disk.wiped = True
            sn.lossy = True
            self.at(self.now + rng.randrange(1, 60), self.restart, sn.id, sn.inc)
        elif kind == "hslost" and up:
            # both hard state files damaged (bit rot, a torn write of both): the node comes back with its log,
            # its term and vote lost; often right away, in the middle of the election it had voted in
            sn = rng.choice(up)
            sn.crash()
            sn.disk.hs = None
            sn.disk.hs_lost = True
            self.at(self.now + rng.randrange(1, 30), self.restart, sn.id, sn.inc)
        elif kind == "restart":
            down = [sn for sn in nodes if not sn.up]
            if down:
                rng.choice(down).start()
        elif kind == "pause" and up:
            rng.choice(up).paused = True
        elif kind == "resume":
            self.resume_all(one=True)
        elif kind == "partition":
            ids = [sn.id for sn in nodes]
            side = {i for i in ids if rng.random() < 0.5}
            self.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
        elif kind == "oneway":
            a, b = rng.sample([sn.id for sn in nodes], 2)
            self.blocked.add((a, b))
        elif kind == "heal":
            self.blocked = set()
        elif kind == "net":
            self.drop = rng.choice((0.0, 0.0, 0.02, 0.1, 0.3))
            self.dup = rng.choice((0.0, 0.02, 0.1))
            self.slow = rng.choice((0.0, 0.05, 0.3))
        elif kind in ("add", "remove", "transfer"):
            ld = self.leader()
            if ld is None:
                return
            node = ld.node
            try:
                if kind == "transfer":
                    others = [p for p in node.voters if p != ld.id]
                    if others:
                        node.transfer_leadership(rng.choice(others))
                elif kind == "add" and len(node.voters) < 5:
                    nid = f"n{self.next_id}"
                    self.next_id += 1
                    node.propose_conf_change(ADD, nid)
                    sn = self.nodes[nid] = SimNode(self, nid, ())
                    sn.start()
                    if self.lazy:
                        self.at(self.now + self.sync_every, self.periodic_sync, nid)
                elif kind == "remove" and len(node.voters) > 3:
                    node.propose_conf_change(REMOVE, rng.choice(node.voters))
            except RaftError:
                return
            self.process(ld)
        self.log.append(f"t={self.now} {kind}")
        self.stats[kind] += 1

    def wipe_candidate(self) -> Optional[SimNode]:
        """A follower whose disk may be lost without breaking RAFT's guarantees (no algorithm survives every
        such loss: a wiped member forgets its vote and the entries it acknowledged). Chosen only when
        (1) it follows the one leader in the leader's term, every other node's durable term is at least its
        own and nobody campaigns in that term (the vote it forgets can never be asked for again), and
        (2) without it, enough voters durably hold every entry that is or may still be committed (up to the
        highest commit anywhere and its own last entry, which the leader may have counted) that any quorum
        meets one of them."""
        ld = self.leader()
        if ld is None:
            return None
        lead = ld.node
        if any(sn.up and sn is not ld and sn.node.role is LEADER for sn in self.nodes.values()):
            return None
        voters = lead.voters
        top = max([sn.node.commit for sn in self.nodes.values() if sn.up] + [max(self.checker.committed, default=0)])
        for sn in self.nodes.values():
            node = sn.node
            if (not sn.up or sn.paused or sn is ld or sn.id not in voters or node.term != lead.term
                    or node.leader != ld.id):
                continue
            d = sn.disk
            term = d.hs.term if d.hs else 0
            if any((o.disk.hs.term if o.disk.hs else 0) < term for o in self.nodes.values() if o is not sn):
                continue
            if any(o.up and o.node.role is CANDIDATE and o.node.term == term for o in self.nodes.values()):
                continue
            last = (d.snap.index if d.snap else 0) + len(d.entries)
            upto = max(top, last)
            c = self.checker.committed.get(upto)
            want = c[0] if c is not None else lead.term_at(upto)
            if want is None or upto > lead.last_index():
                continue
            held = set()
            for o in self.nodes.values():
                if o is sn:
                    continue
                od = o.disk
                base = od.snap.index if od.snap else 0
                if base >= upto or (upto - base - 1 < len(od.entries) and od.entries[upto - base - 1][1] == want):
                    held.add(o.id)
            # every configuration some member may still elect with, not only the leader's: a removed member
            # that never learnt its removal campaigns with the older voter set, and the wiped member itself
            # comes back with the founding one; a quorum of any of them without a holder elects a leader that
            # lacks committed entries (seeds 4965 --quick, 50065: the wiped member's vote, with two removed
            # members', made a leader of an old configuration)
            if all(sum(1 for p in conf if p in held) >= len(conf) - (len(conf) // 2 + 1) + 1
                   for conf in self._configurations(sn) if conf):
                return sn
        return None

    def wiped_member_candidate(self) -> Optional[SimNode]:
        """(wipes) An up voter whose disk may be lost: every configuration any member holds is the founding one
        (the wiped node comes back with it), and the nodes wiped or cut and not caught up since, with it, stay a
        minority."""
        for o in self.nodes.values():
            if o.lossy and o.up and not o.node.recovering and not o.disk.wiped:
                o.lossy = False
        cands = [sn for sn in self.nodes.values() if sn.up and sn.id in sn.node.voters]
        if not cands:
            return None
        sn = self.rng.choice(cands)
        if self._configurations(sn) != {tuple(sorted(sn.bootstrap))}:
            return None
        if sum(1 for o in self.nodes.values() if o.lossy or o.disk.wiped or o is sn) > (len(sn.bootstrap) - 1) // 2:
            return None
        return sn

    def _configurations(self, wiped: SimNode) -> set:
        """The voter sets the members other than ``wiped`` hold (a down member's as it will recover it from
        its disk) and the founding set ``wiped`` restarts with."""
        confs = {tuple(sorted(wiped.bootstrap))}
        for o in self.nodes.values():
            if o is wiped:
                continue
            if o.up:
                confs.add(tuple(sorted(o.node.voters)))
                continue
            d = o.disk
            conf = tuple(d.snap.peers) if d.snap else (d.base if d.base is not None else o.bootstrap)
            for e in d.entries:
                if e[2] == ENTRY_CONF:
                    conf = decode_peers(e[3])
            confs.add(tuple(sorted(conf)))
        return confs

    def restart(self, nid: str, inc: int) -> None:
        sn = self.nodes[nid]
        if not sn.up and sn.inc == inc:
            sn.start()

    def resume_all(self, one: bool = False) -> None:
        paused = [sn for sn in self.nodes.values() if sn.up and sn.paused]
        if one and paused:
            paused = [self.rng.choice(paused)]
        for sn in paused:
            sn.paused = False
            backlog, sn.backlog = sn.backlog, []
            for data in backlog:
                if not sn.up or sn.paused:
                    break
                sn.node.step(decode(data))
            if sn.up:
                self.process(sn)

    # ---- a run -------------------------------------------------------------------------------------------

    def run(self) -> list:
        """Run the fault phase, heal, check liveness and the end state; returns the violations."""
        chk = self.checker
        self.at(self.rng.randrange(50, 200), self.client)
        self.at(self.rng.randrange(100, 300), self.fault)
        self.run_until(self.fault_time)
        self.heal()
        self.quiet_catch_up("healing")
        if not chk.violations and self.rng.random() < 0.5:
            # a member of the idle group loses its disk and comes back empty (as a deleted store directory):
            # the leader, which holds it as current, must notice and catch it up without any new proposal
            sn = self.wipe_candidate()
            if sn is not None:
                self.stats["idle_wipes"] += 1
                self.log.append(f"t={self.now} idle wipe {sn.id}")
                sn.crash(power=False)
                sn.disk = SimDisk()
                sn.lossy = self.lazy
                self.at(self.now + self.rng.randrange(1, 60), self.restart, sn.id, sn.inc)
                self.run_until(self.now + 60)
                self.quiet_catch_up(f"{sn.id} lost its disk in the idle group")
        deadline = self.now + self.heal_bound
        markers: set = set()
        while not chk.violations:
            if self.now >= deadline:
                ld = self.leader()
                chk.fail(f"liveness: within {self.heal_bound} time units after healing, no final proposal was "
                         f"applied on every member (leader: {ld.id if ld else None}, markers acked: "
                         f"{bool(markers & self.acked_set)})")
                break
            self.run_until(self.now + 5 * TICK)
            if not markers & self.acked_set:
                data = b"final%d" % self.proposed
                if self.propose(data) is not None:
                    markers.add(data)
                continue
            ld = self.leader()
            if ld is not None:
                commit = ld.node.commit
                if all(self.nodes[p].up and self.nodes[p].sm_index >= commit for p in ld.node.voters):
                    break
        if not chk.violations:
            self.final_checks()
        return chk.violations

    def quiet_catch_up(self, after: str) -> None:
        """Without any new proposal, the leader's heartbeats alone must bring every member up to its commit."""
        chk = self.checker
        deadline = self.now + self.heal_bound
        while not chk.violations:
            if self.now >= deadline:
                ld = self.leader()
                behind = sorted(p for p in ld.node.voters if self.nodes[p].sm_index < ld.node.commit) if ld else []
                chk.fail(f"liveness: within {self.heal_bound} time units after {after}, with no new proposal, the "
                         f"members did not all apply the leader's commit (leader: {ld.id if ld else None}, "
                         f"behind: {behind})")
                return
            self.run_until(self.now + 5 * TICK)
            ld = self.leader()
            if ld is not None and ld.node.commit == ld.node.last_index() and all(
                    self.nodes[p].up and self.nodes[p].sm_index >= ld.node.commit for p in ld.node.voters):
                return

    def heal(self) -> None:
        self.blocked = set()
        self.drop = self.dup = 0.0
        self.slow = 0.0
        for sn in self.nodes.values():
            if not sn.up:
                sn.start()
        self.resume_all()
        self.checker.log_matching([sn.node for sn in self.nodes.values()], self.now)

    def final_checks(self) -> None:
        chk = self.checker
        live = [sn for sn in self.nodes.values() if sn.up]
        for sn in live:
            if sn.node.lost is not None:
                chk.fail(f"{sn.id} reports committed entries {sn.node.lost} lost, but no majority lost data")
        if self.lazy or self.wipes:
            ld = self.leader()
            stuck = [p for p in ld.node.voters if self.nodes[p].node.recovering or self.nodes[p].node.vote_floor]
            if stuck:
                chk.fail(f"liveness: voters {stuck} still recovering after healing")
            self.stats["recoveries"] += sum(sn.node.recoveries for sn in live)
        if self.hs_loss or self.wipes:
            stuck = [p for p in self.leader().node.voters if self.nodes[p].node.votes_lost]
            if stuck:
                chk.fail(f"liveness: voters {stuck} still without their votes after healing")
            self.stats["votes_found"] += sum(1 for sn in live if sn.node.votes_found)
        chk.log_matching([sn.node for sn in live], self.now)
        ld = self.leader()
        members = [self.nodes[p] for p in ld.node.voters]
        ref = max(members, key=lambda sn: sn.sm_index)
        upto = min(sn.sm_index for sn in members)
        ref_prefix = [x for x in ref.sm if x[0] <= upto]
        for sn in live:
            seen = set()
            for i, data in sn.sm:
                if data in seen:
                    chk.fail(f"{sn.id} applied {data!r} twice")
                seen.add(data)
                c = chk.committed.get(i)
                if c is not None and c[2] != data:
                    chk.fail(f"{sn.id} state holds {data!r} at {i} where {c[2]!r} was committed")
            if sn in members:
                if [x for x in sn.sm if x[0] <= upto] != ref_prefix:
                    chk.fail(f"{sn.id} and {ref.id} applied different sequences up to {upto}")
                missing = [a for a in self.acked if a not in seen]
                if missing:
                    chk.fail(f"{sn.id} lacks {len(missing)} acknowledged proposals, e.g. {missing[:3]}")

    def summary(self) -> str:
        return (f"seed={self.seed} n={self.n} quick={self.quick} batch={self.batch} inflight={self.inflight} "
                f"compact_every={self.compact_every} nodes={len(self.nodes)} proposed={self.proposed} "
                f"acked={len(self.acked)} terms={len(self.checker.leaders)} events={self.events} t={self.now}")


def run_power_all(seed: int, late: bool = False) -> tuple[list, "Sim", list]:
    """A lazy run whose fault phase is only client load on a healthy network, then a power cut of every node at
    once and a restart: acknowledged entries past the last syncs are lost (no algorithm keeps them), but never
    silently: when an acknowledged proposal is gone, some node must report lost entries (``Node.lost``), and
    any range reported must really be gone (an entry of another term, or none, at its first index on the
    leader); every node that had saved a commit index covering an entry now gone reports it itself. ``late``:
    one node never hears the answers to its recovery queries (it recovers through a leader, its own survey never
    concludes) and the nodes compact every few entries, so that it catches up through a snapshot: what it learns
    of the loss, it learns there. Returns (violations, sim, the acknowledged proposals lost)."""
    sim = Sim(seed, quick=True)
    sim.lazy = True
    if late:
        sim.compact_every = 5
    out: list = []  # (the checker's own findings are expected here: RAFT's guarantees do not hold past the cut)
    for k, nid in enumerate(sim.nodes):
        sim.at(1 + k * sim.sync_every // len(sim.nodes), sim.periodic_sync, nid)
    chk = sim.checker
    try:
        sim.at(sim.rng.randrange(50, 200), sim.client)
        sim.run_until(sim.fault_time // 2)
        cut_term = max(sn.node.term for sn in sim.nodes.values() if sn.up)
        for sn in sim.nodes.values():
            if sn.up:
                sn.crash(power=True)
        if late:  # (the one left with the shortest log: the others can elect without it, and compact meanwhile)
            sim.deaf = {min(sim.nodes.values(), key=lambda sn: (sn.disk.last_index(), sn.id)).id}
            sim.deaf_until = sim.now + 1000

            def load() -> None:  # (the leader commits and compacts past the deaf node's log meanwhile)
                for _ in range(12):
                    sim.propose(b"late%d" % sim.proposed)
            sim.at(sim.now + 700, load)
        # (the messages in flight go with the servers: an old leader's append arriving after the restart would
        # bring back an entry the survey found nowhere)
        sim.q = [ev for ev in sim.q if ev[2] != sim.deliver]
        heapq.heapify(sim.q)
        sim.fault_time = 0  # (no more client proposals)
        for sn in sim.nodes.values():
            sim.at(sim.now + sim.rng.randrange(1, 30), sim.restart, sn.id, sn.inc)
        deadline = sim.now + sim.heal_bound
        while sim.now < deadline:
            sim.run_until(sim.now + 5 * TICK)
            ld = sim.leader()
            if ld is not None and ld.node.commit == ld.node.last_index() and all(
                    sim.nodes[p].up and sim.nodes[p].sm_index >= ld.node.commit and not sim.nodes[p].node.recovering
                    for p in ld.node.voters):
                break
        else:
            out.append(f"liveness: no leader with every voter caught up within {sim.heal_bound} after the power cut")
    except (RaftError, AssertionError) as e:
        out.append(f"t={sim.now}: exception {type(e).__name__}: {e}")
        return out, sim, []
    ld = sim.leader()
    reports = [sn.node.lost for sn in sim.nodes.values() if sn.up and sn.node.lost is not None]
    held = set(d for sn in sim.nodes.values() if sn.up for _, d in sn.sm)
    lost_acks = [a for a in sim.acked if a not in held]
    if lost_acks and not reports:
        out.append(f"{len(lost_acks)} acknowledged proposals lost silently (no node reports lost entries), "
                 f"e.g. {lost_acks[:3]}")
    if ld is not None:
        node = ld.node
        for first, last in reports:
            # (the range is an upper bound, from answers given at different times: some index in it must be gone;
            # an index first applied after the cut, in a later term, replaced one committed before it)
            gone = False
            for i in range(first, last + 1):
                c = chk.committed.get(i)
                if c is None or c[0] > cut_term or i <= node.offset or node.term_at(i) != c[0] or node.log[i - node.offset - 1][3] != c[2]:
                    gone = True
                    break
            if not gone:
                out.append(f"a node reports entries {first}..{last} lost, but the leader holds every committed one")
        # every node that had saved a commit index covering a committed entry now gone reports the loss itself,
        # however it caught up (its survey, an append, or a snapshot that replaced its log)
        kept = dict(ld.sm)
        for sn in sim.nodes.values():
            if not sn.up:
                continue
            n = sn.node
            if n.lost is not None:
                sim.stats["lost_found_by_" + n.lost_by] += 1
                continue
            for i in range(1, n.known_commit + 1):
                c = chk.committed.get(i)
                if c is not None and c[0] <= cut_term and c[1] == ENTRY_NORMAL and kept.get(i) != c[2]:
                    out.append(f"{sn.id} had saved commit {n.known_commit}, committed entry {i} is gone, and it "
                               f"reports no loss")
                    break
    return out, sim, lost_acks


def run_seed(seed: int, *, quick: bool = True, mutations=frozenset(), hs_loss: bool = False,
             wipes: bool = False) -> tuple[list, "Sim"]:
    sim = Sim(seed, quick=quick, mutations=frozenset(mutations), hs_loss=hs_loss, wipes=wipes)
    try:
        violations = sim.run()
    except (RaftError, AssertionError) as e:
        violations = [f"t={sim.now}: exception {type(e).__name__}: {e}"]
    return violations, sim
