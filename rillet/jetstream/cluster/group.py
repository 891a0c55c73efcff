"""One RAFT group on a server: the driver around ``rillet.raft.node.Node``.

The node is a pure object; this driver gives it what it has no access to:

* **time**: ``tick()`` every ``TICK`` seconds from the event loop (election timeout ``ELECTION_TICKS``
  ticks, randomised up to twice that by the node; heartbeats every ``HEARTBEAT_TICKS`` ticks);
* **the network**: ``RaftTransport`` (one per server, shared by every group, ``$RNRG.`` subjects of the
  system account over the routes, or of the asset's ``account`` with ``cluster_traffic: owner``, traffic.py);
  a message from the transport is decoded and ``step``-ped;
* **the disk**: ``rillet.raft.wal`` under ``<store_dir>/_raft/<group>/``, plus ``peers.json`` there, the
  group's founding voter set (the node needs it again on every restart until a snapshot carries it).
  A memory-storage group (``storage="memory"``, or a ``S-R<n>M-``/``C-R<n>M-`` name, as nats-server's
  in-memory WAL for memory streams and consumers) writes nothing: ``rillet.raft.wal.MemWAL``, founding
  voters from the assignment; after a restart its member starts empty and gets the log or a snapshot
  from the leader. The meta group is always on disk.

Work is batched: an input (a message, a tick, a proposal) only marks the group and queues it on the
server's ``_Runner`` (grouprun.py), which runs each queued group's ``_process`` when the connection that is being read
writes out what its read produced (the runner sits in the server's ``pending_flush`` list like a
connection, so ``flush_clients`` runs it before the real writes): the messages and publishes of one read
are handled as one ``Ready``, and its RAFT messages, PubAcks and other output leave in the same pass,
with no extra turn of the loop on the way (an append answered, a commit applied and its PubAck written
in the read that brought the last acknowledgement). Inputs outside a read (ticks, timers, tasks) have
the server schedule its flush (``schedule_flush``), which runs them on the next turn. ``_process``
follows the node's contract: write the snapshot, the entries and, when the term or vote changed, the
hard state; fsync per the sync policy; *then* send the messages, install the snapshot (``restore``),
apply the committed entries (``apply(index, data)``, in order, on the loop) and ``advance``.

Durability (``sync``, JetStream's ``sync_interval``):

* ``"always"``: every batch of entries is fsynced before any message of the same Ready is sent (before
  a follower acknowledges, before the leader counts its own copy);
* otherwise (nats-server's default, lazy): entries are written to the OS before sending and fsynced
  every ``sync`` seconds (120 by default) and when the group stops; a power loss on a majority within
  the interval can lose acknowledged entries (as nats-server with its default).

The term and the vote are always on disk (written atomically, fsynced) before a message that depends on
them is sent, and so are snapshots. The commit index is saved with them and otherwise at each periodic
sync and at stop: after a restart, committed entries past the saved commit are committed again by the
leader, never lost. The saved commit never goes down (``_commit_floor``; a member back from an unclean stop
has a commit clamped to what its log kept) until the node found the entries below it lost.

Recovery after an unclean stop (lazy sync only): ``stop()`` leaves a ``clean`` marker in the WAL directory
(after the final fsync) and ``start()`` removes it durably. A group that starts with a WAL holding anything and
no marker (killed, crashed, power cut) may have lost entries it had acknowledged: its node starts
``recovering`` (rillet.raft.node: no vote, no campaign, until it caught up from a leader or heard every voter)
and gets the commit index the hard state had saved, so that the node can tell when committed entries are gone
from every member. Such a finding is logged, counted in ``status()["lost"]`` (the RAFT indexes) and handed
to ``on_data_lost(first, last)`` (the stream's advisory and stream info); ``current()`` is False while
recovering. Not after a stop of the process alone: a ``boot`` file in the directory holds the machine's boot
id (``boot_id``) of the last start whose log was whole (a clean start, or a recovery done); an unclean start in
that same boot lost nothing (every write went to the OS before it was acknowledged: the page cache survived), so
it is not a recovery and raises no floor of sequences. A test harness that emulates power cuts without a
reboot gives each emulated boot its own id (``RILLET_BOOT_ID``).

Leadership as the owner sees it: ``on_leader_change(True)`` once this node is leader *and* has applied
every entry up to the first entry of its term (its state machine is current), ``on_leader_change(False)``
as soon as it stops being leader (before any further entry is applied). ``is_leader`` follows the same
rule; ``propose`` is accepted as soon as the node is leader.

Restart: ``start()`` reopens the WAL, hands a stored snapshot to ``restore`` and re-applies the stored
committed entries after it, except those at or below ``applied_floor()`` when the owner gives one (an
owner whose state is itself durable, e.g. a stream store, says how far it already is).
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import time
import traceback
from typing import Any, Callable, Optional

from rillet.jetstream.cluster.peers import peer_id
from rillet.jetstream.cluster.transport import RaftTransport
from rillet.jetstream.log import NotLeader
from rillet.raft import msgs as M
from rillet.raft.node import CANDIDATE, FOLLOWER, LEADER, PRE_CANDIDATE, Node, ProposalDropped, \
    RaftError
from rillet.raft.node import NotLeader as NodeNotLeader
from rillet.raft.wal import WAL, MemWAL
from rillet.durable import fsync_dir
from rillet.jetstream.cluster.grouprun import _ops_of, _runner, shared_transport
from rillet.jetstream.cluster.leadership import CONTROL, Leadership
from rillet.jetstream.cluster import wipedmember
from rillet.handles import cancelled

TICK = 0.05  # seconds between ticks
ELECTION_TICKS = 20  # election timeout: 1 s, randomised by the node to 1-2 s
HEARTBEAT_TICKS = 3  # heartbeats every 150 ms
# A stream's or consumer's group is snapshotted (its log compacted) after its owner's COMPACT_EVERY applied entries,
# but not again within COMPACT_MIN_INTERVAL seconds of the last snapshot (nats-server's compactMinInterval: each
# snapshot blocks the loop for a few fsyncs) unless COMPACT_MAX_ENTRIES were applied since (the log is in memory)
COMPACT_MIN_INTERVAL = 15.0
COMPACT_MAX_ENTRIES = 65536
HARD_STATE_EVERY = 1.0  # seconds: how often a changed commit index is saved when nothing else forces it
BOOT_FILE = "boot"  # in the WAL directory: the boot id of the last start whose log was whole (see the docstring)


def boot_id() -> str:
    """This machine's boot id (it changes at every boot: a power cut is a new one), or "" when unknown.
    ``RILLET_BOOT_ID`` overrides it (a harness emulating power cuts, tests/faults/lazyfs.py)."""
    v = os.environ.get("RILLET_BOOT_ID")
    if v is not None:
        return v.strip()
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


CLEAN_MARKER = "clean"  # in the WAL directory: the group stopped in order (everything fsynced) last time

# committed entries in one Ready past which the leader's messages are written out before applying them (the
# peers persist and answer the next entries meanwhile); fewer go out with the applies' own output (PubAcks) in
# one write per connection. A follower's messages (its answers: the leader waits for them) always go before its
# applies (which write nothing to a connection): the append that brings entry N+1 commits entry N, and the
# leader's commit of N+1 would otherwise wait for this member's store write of N
EARLY_FLUSH_ENTRIES = 16
# (leader, in a group whose owner says nobody reads its followers' state as it happens: ``lazy_commits``) a
# commit-only append (the new commit index for a follower that has every entry) leaves at once when none left
# within this many seconds; otherwise it is held for up to that long and dropped if an append to the same
# follower goes first (appends carry the commit index): under a steady load the followers learn each commit from
# the next append, as nats-server's leader sends its commit heartbeat only when no proposal is waiting, while a
# lone commit (an idle group's) is told at once. Other groups tell every commit at once (a consumer led on a
# stream follower, a direct get answered there, see the new message as soon as possible).
COMMIT_NOTICE_EVERY = 0.005

def group_storage(name: str) -> str:
    """"memory" for a stream or consumer group name of nats-server's form with ``M`` (``S-R3M-xxxxxxxx``,
    ``C-R1M-xxxxxxxx``), else "file"."""
    parts = name.split("-")
    if len(parts) == 3 and parts[0] in ("S", "C") and len(parts[1]) >= 3 and parts[1][0] == "R" \
            and parts[1][-1] == "M" and parts[1][1:-1].isdigit():
        return "memory"
    return "file"


class RaftGroup(Leadership):
    """One RAFT group on this server: a rillet.raft Node, its WAL under ``<store_dir>/_raft/<name>/``,
    the shared RaftTransport and ticks from the event loop. Peer ids are ``peers.peer_id(server name)``."""

    def __init__(self, server: Any, name: str, peers: list[str], store_dir: str, *,
                 apply: Callable[[int, bytes], None],
                 on_leader_change: Optional[Callable[[bool], None]] = None,
                 snapshot: Optional[Callable[[], bytes]] = None,
                 restore: Optional[Callable[[bytes], None]] = None,
                 sync: Any = "default",
                 applied_floor: Optional[Callable[[], int]] = None,
                 storage: Optional[str] = None,
                 tick: float = TICK, election_ticks: int = ELECTION_TICKS,
                 heartbeat_ticks: int = HEARTBEAT_TICKS, account: str = "") -> None:
        self.server = server
        self.name = name
        self.account = account  # the asset's account ("" for the meta group): its cluster_traffic (traffic.py)
        self.id = peer_id(server.name)
        self.bootstrap = list(peers)
        self._peer_ops = _ops_of(server)  # (members_decode)
        self.dir = os.path.join(store_dir, "_raft", name)
        self.memory = (storage == "memory") if storage is not None else group_storage(name) == "memory"
        self._apply = apply
        self.on_leader_change = on_leader_change
        # called with the peer id of a server that sent a message to this group without being a voter
        self.on_foreign_peer: Optional[Callable[[str], None]] = None
        # called when this node, leader, steps down because it did not hear from a quorum of its peers
        # within an election timeout (check-quorum; the quorum-lost advisories)
        self.on_quorum_lost: Optional[Callable[[], None]] = None
        # called with (first, last) RAFT indexes when committed entries are found gone from every member (a
        # majority lost unsynced data): the owner says so (advisory, stream info, healthz)
        self.on_data_lost: Optional[Callable[[int, int], None]] = None
        self._snapshot = snapshot
        self._restore = restore
        self._applied_floor = applied_floor
        self.sync_always = sync == "always"
        if self.sync_always:
            self.sync_every = 0.0
        elif isinstance(sync, (int, float)) and not isinstance(sync, bool) and sync > 0:
            self.sync_every = float(sync)
        else:
            self.sync_every = 120.0
        self.tick_interval = tick
        self.election_ticks = election_ticks
        self.heartbeat_ticks = heartbeat_ticks
        self.log = server.log
        self.node: Optional[Node] = None
        self.wal: Optional[WAL] = None
        self.transport: Optional[RaftTransport] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner = _runner(server)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._scheduled = False
        self._inputs = 0  # inputs since the last Ready (DEFER_INPUTS)
        self._processing = False
        self._want_compact = False
        self._announced = False  # on_leader_change(True) given and not yet taken back
        self._skip_through = 0  # entries at or below this index are already in the owner's state
        self._hs_saved: tuple = (0, None, 0)
        self._hs_saved_at = 0.0
        self._synced_at = 0.0
        self.running = False
        self.stopped = False
        self.leader_since_ns = 0
        self.ever_had_leader = False
        # (loop time) since when no leader is known, None while one is: a member in the middle of an election
        # (a leadership transfer's, a step-down's) is not yet leaderless (clustered.group_leaderless)
        self.no_leader_since: Optional[float] = None
        # counters and errors surfaced in status() (and /raftz, /healthz)
        self.bad_messages = 0
        self.step_errors = 0
        self.apply_errors = 0
        self.apply_error = ""
        self.write_error = ""
        self.snapshots_taken = 0
        self._snap_at = float("-inf")  # loop time of the last snapshot taken here (compact_due)
        self.snapshots_installed = 0
        self._stepdowns_seen: dict[bytes, float] = {}  # stepdown request reply -> when a member noted it
        self._leader_waiters: list[tuple[float, Callable[[], None]]] = []  # (deadline, callback): when_leader
        self._handover: Optional[tuple[float, Callable[[], None]]] = None  # (deadline, callback): after_handover
        self._lost_logs = 0  # the node's lost_logs already logged
        self._lost_events = 0  # the node's lost_events already reported
        self._recoveries = 0  # the node's recoveries already logged
        self.unclean_start = False  # this run started from a WAL left by an unclean stop
        self.same_boot = False  # ... in the boot of its last start with a whole log (the process alone stopped)
        self._boot: Optional[str] = boot_id() or None
        # set by the owner: its number saved with each commit index (HardState.mark; a stream's highest sequence),
        # what a loss found later reached (``node.lost_mark``)
        self.mark: Optional[Callable[[], int]] = None
        # set by the owner: called with the highest mark the members had saved when this member leaves the recovery
        # after a majority came back from an unclean stop (node.lost_mark: numbers up to it may have been used)
        self.on_mark_floor: Optional[Callable[[int], None]] = None
        self._floor_events = 0  # the node's floor_events already handed to on_mark_floor
        # set by the owner: whether commit-only appends may be held (COMMIT_NOTICE_EVERY) right now
        self.lazy_commits: Optional[Callable[[], bool]] = None
        # set by the owner: called with True before the committed entries of one Ready are applied and with
        # False after them (a stream gathers their store appends into one write in between)
        self.apply_batch: Optional[Callable[[bool], None]] = None
        # owners' proposals gathered during the loop turn, handed to the node right before its Ready (RaftLog:
        # the entries proposed in one pass go in one RAFT entry): called once each from _process
        self._proposers: list[Callable[[], None]] = []
        self._held_commits: Optional[dict[str, Any]] = None  # peer -> commit-only append held (COMMIT_NOTICE_EVERY)
        self._notice_at = -1.0  # loop time the last commit-only append left
        self._notice_timer: Optional[asyncio.TimerHandle] = None

    # ---- lifecycle --------------------------------------------------------------------------------

    async def start_asset(self, what: str, log: Any, preferred: Callable[[], str]) -> None:
        """``start()`` for a stream's or consumer's group (``what`` names the asset in the log): a group that
        fails to start is logged and left stopped; once started, it campaigns at once where this server is
        the assignment's ``preferred()`` leader (read after the start) or the group's only member."""
        try:
            await self.start()
        except Exception as e:
            log.error(f"JetStream cluster: {what}: RAFT group {self.name} failed to start: {e!r}")
            return
        if preferred() == self.id or len(self.peers) == 1:
            self.campaign_soon()

    async def start(self) -> None:
        """Recover from the WAL (a snapshot to ``restore``, committed entries re-applied), join the
        transport and start ticking."""
        if self.running:
            return
        self.loop = asyncio.get_running_loop()
        sync = "always" if self.sync_always else "interval"
        dir_existed = os.path.isdir(self.dir)  # (wipedmember.hand_deleted)
        if self.memory:
            self.wal, rec = MemWAL.open()
        else:
            from rillet.cipher import keyring_from_options
            # jetstream { key }: the log's records and snapshots encrypted (context: the group's name)
            keys = keyring_from_options(self.server.opts.jetstream, "_raft_")
            # (repair: damaged entries in the middle of the log are cut rather than stopping the group; they are
            # taken again from the other members, this one recovering meanwhile: below)
            self.wal, rec = WAL.open(self.dir, sync, keys=keys, repair=True)
        if rec.truncated_bytes:
            self.log.warn(f"RAFT group {self.name!r}: truncated a torn WAL tail of {rec.truncated_bytes} bytes")
        recovering = False
        if rec.hs_note:
            if rec.votes_lost:
                self.log.error(f"RAFT group {self.name!r}: damaged hard state ({rec.hs_note}): recovering; no vote "
                               f"and no campaign until every other voter told its term")
            else:
                self.log.warn(f"RAFT group {self.name!r}: damaged hard state file: {rec.hs_note}")
        if rec.damaged:
            self.log.error(f"RAFT group {self.name!r}: damaged log ({rec.damaged}): entries from {rec.cut_at} on "
                           f"dropped; recovering: no vote until caught up from the other members, or the entries "
                           f"no member holds reported lost")
        had_state = True
        if not self.memory:
            marker = os.path.join(self.dir, CLEAN_MARKER)
            had_state = rec.hard_state is not None or rec.snapshot is not None or bool(rec.entries)
            clean = os.path.exists(marker)
            if clean:
                os.unlink(marker)  # (durably: a marker that came back after a power cut would hide it)
                fsync_dir(self.dir)
            self.unclean_start = had_state and not clean
            # with sync "always" nothing acknowledged can be missing from the log: no recovery needed; nor when
            # only the process stopped (the same boot as the last start with a whole log: the page cache kept
            # every write)
            self.same_boot = self._boot is not None and self._boot == self._saved_boot()
            # (a lost hard state: its commit index too, and whether the log lacks what was acknowledged)
            recovering = ((self.unclean_start and not self.sync_always and not self.same_boot) or bool(rec.damaged)
                          or rec.votes_lost)
            if not recovering:
                self._save_boot()
        founding = self._founding_peers()
        # (a member that had acknowledged entries here and starts with nothing on disk: wiped. wipedmember)
        wiped = not self.memory and len(founding) != 1 and (
            wipedmember.marked(self.dir) or not had_state and (wipedmember.existing_member(self.server, self.name)
                                                               or wipedmember.hand_deleted(self.server, self.name,
                                                                                           dir_existed)))
        if not self.memory:
            wipedmember.started(self.server, self.name, self.dir)
        if wiped:
            wipedmember.mark(self.dir)  # (wiped until caught up, whatever it holds meanwhile: across restarts too)
        recovering = recovering or wiped
        if rec.snapshot is not None and self._restore is not None:
            self._restore(rec.snapshot.data)
        floor = self._applied_floor() if self._applied_floor is not None else 0
        hs = rec.hard_state
        self.node = Node(self.id, founding, rng=random.Random(), election_tick=self.election_ticks,
                         heartbeat_tick=self.heartbeat_ticks, hard_state=hs, snapshot=rec.snapshot,
                         entries=rec.entries, recovering=recovering, known_commit=rec.stored_commit,
                         known_mark=hs.mark if hs is not None else 0, votes_lost=rec.votes_lost or wiped, wiped=wiped)
        self._mark_now()  # (a store synced further than the log: what a survey is told includes it)
        if self.unclean_start and not recovering and self.same_boot:
            self.log.notice(f"RAFT group {self.name!r}: the last stop was not clean, but the machine did not "
                            f"restart since (same boot id): nothing written was lost, no recovery needed")
        if wiped:
            self.log.warn(f"RAFT group {self.name!r}: no state on disk (or not caught up since) for a member of a "
                          f"group this server had (a wiped store): recovering, no vote until caught up from a leader "
                          f"and every voter answered")
        elif recovering:
            n = self.node
            short = f", {n.tail_lost} committed entries missing from it" if n.tail_lost else ""
            self.log.warn(f"RAFT group {self.name!r}: the last stop was not clean (log ends at {n.last_index()}, "
                          f"saved commit {rec.stored_commit}{short}): recovering, no vote until caught up "
                          f"from the other members")
        self._skip_through = floor
        if hs is not None:
            self._hs_saved = (hs.term, hs.vote, hs.commit)
        self._synced_at = self._hs_saved_at = self.loop.time()
        self.transport = shared_transport(self.server)
        self.transport.join(self.name, self._on_message, owner=self.account, peers=lambda: self.peers)
        self.running = True
        self.stopped = False
        if self.node.voters == (self.id,):
            self.campaign_soon()  # a group of one elects itself at once
        self._timer = self.loop.call_later(self.tick_interval, self._on_tick)
        self._schedule()

    def _saved_boot(self) -> Optional[str]:
        try:
            with open(os.path.join(self.dir, BOOT_FILE), "rb") as f:
                return f.read().decode("ascii", "replace").strip()
        except OSError:
            return None

    def _save_boot(self) -> None:
        """Record this boot as one in which the log is whole (a clean start, or the recovery is done): durably
        (a crash of the process alone later in this boot then needs no recovery)."""
        if self.memory or not self._boot or self._saved_boot() == self._boot:
            return
        path = os.path.join(self.dir, BOOT_FILE)
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(self._boot.encode("ascii", "replace"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
            fsync_dir(self.dir)
        except OSError as e:  # (the next unclean start in this boot recovers: safe)
            self.log.warn(f"RAFT group {self.name!r}: cannot save the boot id: {e}")

    def _founding_peers(self) -> list[str]:
        if self.memory:
            return list(self.bootstrap)  # (nothing on disk: the assignment's peers, every start)
        path = os.path.join(self.dir, "peers.json")
        try:
            with open(path, "rb") as f:
                stored = json.loads(f.read())
            if isinstance(stored, list) and all(isinstance(p, str) for p in stored):
                return stored
            raise ValueError("not a list of peer ids")
        except FileNotFoundError:
            pass
        except ValueError as e:
            raise RaftError(f"RAFT group {self.name!r}: bad {path}: {e}") from e
        self._write_peers(self.bootstrap)
        return list(self.bootstrap)

    def _write_peers(self, peers: list[str]) -> None:
        """``peers.json``: the voters at the start of the log (the founding set, or the leader's when this
        member learnt it, having started with nothing but a guess)."""
        path = os.path.join(self.dir, "peers.json")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(json.dumps(list(peers)).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    async def stop(self, delete: bool = False) -> None:
        """Stop ticking and leave the transport; ``delete``: remove the group's directory too."""
        self._timer = cancelled(self._timer)
        self._notice_timer = cancelled(self._notice_timer)
        self._held_commits = None
        if self.transport is not None:
            self.transport.leave(self.name)
        was = self._announced
        self.running = False
        self.stopped = True
        self._announced = False
        if self.wal is not None:
            try:
                if not delete and self.node is not None:
                    n = self.node
                    if (n.term, n.vote, n.commit) != self._hs_saved:
                        self.wal.save_hard_state(M.HardState(n.term, n.vote,
                                                             self._commit_floor(min(n.commit, n.stable)),
                                                             self._mark_now()))
                self.wal.close()
                if not delete and not self.memory and not self.write_error:
                    with open(os.path.join(self.dir, CLEAN_MARKER), "wb") as f:
                        os.fsync(f.fileno())
                    fsync_dir(self.dir)
            except OSError as e:
                self.log.error(f"RAFT group {self.name!r}: error closing the WAL: {e}")
            self.wal = None
        if delete:
            shutil.rmtree(self.dir, ignore_errors=True)
            wipedmember.forgotten(self.server, self.name)
        if was and self.on_leader_change is not None:
            self.on_leader_change(False)

    # ---- inputs -----------------------------------------------------------------------------------

    def _on_tick(self) -> None:
        if not self.running:
            return
        self._timer = self.loop.call_later(self.tick_interval, self._on_tick)
        n = self.node
        was_leader = n.role == LEADER
        n.tick()
        if was_leader and n.role != LEADER and self.on_quorum_lost is not None:
            # (a tick makes a leader step down only through check-quorum)
            try:
                self.on_quorum_lost()
            except Exception as e:
                self.log.error(f"RAFT group {self.name!r}: quorum-lost handler failed: {e!r}")
        if n.floor_events != self._floor_events:
            self._floor_events = n.floor_events  # (a majority asked this member to recover: see node.queried)
            if self.on_mark_floor is not None:
                try:
                    self.on_mark_floor(n.lost_mark)
                except Exception as e:
                    self.log.error(f"RAFT group {self.name!r}: mark-floor handler failed: {e!r}")
        now = self.loop.time()
        if not self.sync_always and now - self._synced_at >= self.sync_every:
            self._synced_at = now
            self._sync()
        n = self.node
        if (n.commit != self._hs_saved[2] and now - self._hs_saved_at >= HARD_STATE_EVERY
                and not self._processing):
            self._save_hs(n.term, n.vote, min(n.commit, n.stable))
        self._schedule()

    def _sync(self) -> None:
        try:
            self.wal.sync()
        except OSError as e:
            self._write_failed(e)

    def _on_message(self, group: str, frm: str, data: bytes) -> None:
        if not self.running:
            return
        if data[:1] == CONTROL:
            self._on_control(frm, data)
            return
        try:
            m = M.decode(data)
        except M.DecodeError as e:
            self._bad(f"undecodable message from {frm}: {e}")
            return
        if m.frm != frm or m.to != self.id:
            self._bad(f"message from {frm} names {m.frm} -> {m.to}")
            return
        if self.on_foreign_peer is not None and frm not in self.node.voters:
            self.on_foreign_peer(frm)
        n = self.node
        try:
            n.step(m)
        except RaftError as e:
            self.step_errors += 1
            self.log.error(f"RAFT group {self.name!r}: message from {frm} refused: {e}")
            return
        if (self._processing or n.has_ready() or self._proposers or n.lost_logs != self._lost_logs
                or n.lost_events != self._lost_events or n.recoveries != self._recoveries):
            self._schedule()
        # (else the message changed nothing a pass would act on: nothing to persist, send, apply or report,
        # e.g. the leader's second follower answering an entry already committed; no pass is run for it)

    def _bad(self, why: str) -> None:
        self.bad_messages += 1
        if self.bad_messages <= 10 or self.bad_messages % 1000 == 0:
            self.log.warn(f"RAFT group {self.name!r}: {why} ({self.bad_messages} bad messages)")

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append ``data`` to the log; (index, term). Raises NotLeader when this node is not the leader
        (or is handing leadership over)."""
        if not self.running:
            raise NotLeader()
        try:
            r = self.node.propose(bytes(data))
        except (NodeNotLeader, ProposalDropped):
            raise NotLeader() from None
        self._schedule()
        return r

    def members_decode(self, op: int) -> bool:
        """Whether every other member of the group has a route now whose INFO said its build decodes RAFT log
        entries of ``op`` (``_PeerOps``): a leader proposes such entries only then (a rolling upgrade's older
        members would fail to apply them)."""
        ops = self._peer_ops.ops
        for p in (self.node.voters if self.node is not None else self.bootstrap):
            if p != self.id:
                have = ops.get(p)
                if have is None or op not in have:
                    return False
        return True

    def proposal_waiting(self, fn: Callable[[], None]) -> None:
        """An owner holds proposals: ``fn()`` hands them to the node (``propose_now``) before the next Ready."""
        self._proposers.append(fn)
        self._schedule()

    def propose_now(self, data: bytes) -> tuple[int, int]:
        """``propose`` from a ``proposal_waiting`` callback (inside the pass about to run the Ready)."""
        if not self.running:
            raise NotLeader()
        try:
            return self.node.propose(bytes(data))
        except (NodeNotLeader, ProposalDropped):
            raise NotLeader() from None

    def _take_proposals(self) -> None:
        while self._proposers:
            fns, self._proposers = self._proposers, []
            for fn in fns:
                try:
                    fn()
                except Exception as e:  # (one owner's failure is logged; the others' proposals go on)
                    self.log.error(f"RAFT group {self.name!r}: taking proposals failed: {e!r}\n"
                                   f"{traceback.format_exc()}")


    def compact_due(self, applied_since: int) -> bool:
        """Whether an owner that applied ``applied_since`` entries since its last snapshot (at least its own
        threshold) should take one now (COMPACT_MIN_INTERVAL, COMPACT_MAX_ENTRIES)."""
        return (applied_since >= COMPACT_MAX_ENTRIES or self.loop is None
                or self.loop.time() - self._snap_at >= COMPACT_MIN_INTERVAL)

    def compact(self) -> None:
        """Snapshot the state machine (``snapshot()``) at the applied index and compact the log."""
        if self._snapshot is None or not self.running:
            return
        if self._processing:
            self._want_compact = True  # (from inside an apply: after the Ready is done)
            return
        n = self.node
        idx = n.applied
        if idx <= n.offset:
            return
        data = self._snapshot()
        n.compact(idx, data)
        try:
            self.wal.save_snapshot(n.snapshot)
        except OSError as e:
            self._write_failed(e)
            return
        self.snapshots_taken += 1
        self._snap_at = self.loop.time()

    # ---- the Ready loop -------------------------------------------------------------------------------

    def _schedule(self) -> None:
        self._inputs += 1
        if not self._scheduled and self.running:
            self._scheduled = True
            self._runner.add(self)

    def _deferred(self) -> None:
        """The Ready of a busy group, at the end of the loop turn; its output written at once."""
        self._process()
        self.server.flush_clients()

    def _process(self) -> None:
        self._scheduled = False
        self._inputs = 0
        if not self.running or self._processing:
            return  # (stopped; or called from inside its own pass, whose loop takes what is new)
        n = self.node
        if n.lost_logs != self._lost_logs:
            self._lost_logs = n.lost_logs
            p, had, hint = n.last_lost
            reg = getattr(getattr(self.server, "jetstream", None), "peer_registry", None)
            name = (reg.name_of(p) if reg is not None else None) or p
            self.log.warn(f"RAFT group {self.name!r}: member {name} no longer holds the entries it had "
                          f"acknowledged (up to {had}; its log was lost?), catching it up from {hint + 1}")
        if n.lost_events != self._lost_events or n.recoveries != self._recoveries:
            self._recovery_news(n)
        self._processing = True
        try:
            if self._proposers:
                self._take_proposals()
            while self.running and n.has_ready():
                rd = n.ready()
                if not self._persist(rd):
                    return  # (the write failed: nothing is sent or applied; the group is stopped)
                committed = rd.committed_entries
                late = None
                if rd.messages:
                    tr = self.transport
                    name = self.name
                    early = len(committed) > EARLY_FLUSH_ENTRIES or (bool(committed) and n.role != LEADER)
                    held = self._held_commits
                    hold = None  # (whether this Ready's commit-only appends are held: decided once for all)
                    for m in rd.messages:
                        if m.__class__ is M.AppendEntries:
                            if m.quiet:
                                if hold is None:
                                    lazy = self.lazy_commits
                                    hold = False
                                    if lazy is not None:
                                        now = self.loop.time()
                                        hold = now - self._notice_at < COMMIT_NOTICE_EVERY and lazy()
                                        if not hold:
                                            self._notice_at = now
                                if hold:
                                    self._hold_commit(m)  # (the next append will likely carry it)
                                    held = self._held_commits
                                    continue
                                if committed and not early:
                                    # a commit-only append: after the applies, so that their output (the
                                    # PubAcks) is written first; it still leaves in this pass
                                    if late is None:
                                        late = []
                                    late.append(m)
                                    continue
                            elif held:
                                held.pop(m.to, None)  # (this append tells the commit index the held one had)
                        tr.send(name, m.to, M.encode(m))
                    if early:
                        # on the wire before the applies below (a batch of them takes milliseconds; a
                        # follower's answer): the peers persist and answer the next entries while this
                        # server applies these
                        self.server.flush_clients()
                if rd.soft_state is not None:
                    self._soft_changed()
                if rd.snapshot is not None:
                    self._install(rd.snapshot)
                batch = self.apply_batch if committed else None
                if batch is not None:
                    batch(True)
                    try:
                        for e in committed:
                            if e[2] == M.ENTRY_NORMAL:
                                self._apply_one(e[0], e[3])
                    finally:
                        batch(False)
                else:
                    for e in committed:
                        if e[2] == M.ENTRY_NORMAL:
                            self._apply_one(e[0], e[3])
                if late is not None:
                    tr = self.transport
                    for m in late:
                        tr.send(self.name, m.to, M.encode(m))
                n.advance(rd)
                self._maybe_announce()
                if self._handover is not None:
                    self._check_handover()
                if self._proposers:
                    self._take_proposals()  # (proposed by the applies' completions: in the next Ready)
        finally:
            self._processing = False
        if self._want_compact:
            self._want_compact = False
            self.compact()

    def _recovery_news(self, n: Node) -> None:
        if n.recoveries != self._recoveries:
            self._recoveries = n.recoveries
            self._save_boot()  # (the log is whole again in this boot)
            if not self.memory:
                wipedmember.unmark(self.dir)
            how = "caught up from the leader" if n.recovered_by == "leader" else "every member answered"
            self.log.notice(f"RAFT group {self.name!r}: recovered after the unclean stop ({how}; "
                            f"log at {n.last_index()}, commit {n.commit})")
            if n.lost_mark and self.on_mark_floor is not None:
                try:
                    self.on_mark_floor(n.lost_mark)
                except Exception as e:
                    self.log.error(f"RAFT group {self.name!r}: mark-floor handler failed: {e!r}")
        if n.lost_events != self._lost_events:
            self._lost_events = n.lost_events
            first, last = n.lost
            self.log.error(f"RAFT group {self.name!r}: committed entries {first}..{last} are lost: no member "
                           f"holds them any more (a majority of the members lost data that was not yet "
                           f"synced, e.g. a power cut with a lazy sync_interval)" if not n.lost_open else
                           f"RAFT group {self.name!r}: committed entries from {first} on may be lost: fewer members "
                           f"than a quorum kept their logs (wiped stores); no vote until a leader is known")
            if self.on_data_lost is not None:
                try:
                    self.on_data_lost(first, last)
                except Exception as e:
                    self.log.error(f"RAFT group {self.name!r}: data-lost handler failed: {e!r}")

    def _hold_commit(self, m: Any) -> None:
        held = self._held_commits
        if held is None:
            held = self._held_commits = {}
        held[m.to] = m  # (a newer one replaces the older)
        if self._notice_timer is None:
            self._notice_timer = self.loop.call_later(COMMIT_NOTICE_EVERY, self._send_held_commits)

    def _send_held_commits(self) -> None:
        """The held commit-only appends no append went after: out now, with the commit index as it is now."""
        self._notice_timer = None
        held, self._held_commits = self._held_commits, None
        n = self.node
        if not held or not self.running or n is None or n.role != LEADER:
            return
        tr = self.transport
        for m in held.values():
            if m.term == n.term:
                # (nothing else went to that follower since: its prev_index still names the last entry sent)
                m.commit = n.commit
                tr.send(self.name, m.to, M.encode(m))
        self._notice_at = self.loop.time()
        self.server.flush_clients()

    def _persist(self, rd: Any) -> bool:
        w = self.wal
        try:
            if rd.snapshot is not None:
                w.save_snapshot(rd.snapshot)
            if rd.entries:
                w.append(rd.entries)
            if rd.base_peers is not None and not self.memory:
                self._write_peers(list(rd.base_peers))
            hs = rd.hard_state
            if hs is not None and (hs.term != self._hs_saved[0] or hs.vote != self._hs_saved[1]):
                # commit as far as entries are on disk (a leader's commit never passes its own stable)
                self._save_hs(hs.term, hs.vote, hs.commit)
            if rd.must_sync and self.sync_always:
                w.sync()
            elif rd.entries:
                w.flush()  # (to the OS: a killed process loses nothing; fsync on the interval)
        except OSError as e:
            self._write_failed(e)
            return False
        return True

    def save_mark(self) -> None:
        """Save the hard state now (fsynced) with the owner's mark as it is (``mark()``), e.g. before the owner
        acknowledges something numbered past the mark saved last."""
        n = self.node
        if n is None or not self.running or self.memory:
            return
        self._save_hs(n.term, n.vote, min(n.commit, n.stable))

    def lower_mark(self) -> None:
        """The owner's mark went down (numbers it had reserved and did not use were released): ``known_mark``
        becomes ``mark()`` (never below a floor a survey found, ``node.lost_mark``) and is saved now (fsynced).
        The owner's mark must still cover every number it may have acknowledged."""
        n = self.node
        if n is None or not self.running or self.memory or self.mark is None:
            return
        n.known_mark = max(self.mark(), n.lost_mark)
        self._save_hs(n.term, n.vote, min(n.commit, n.stable))

    def _mark_now(self) -> int:
        n = self.node
        mark = n.known_mark if n is not None else 0
        if self.mark is not None:
            mark = max(mark, self.mark())
            if n is not None:
                n.known_mark = mark
        return mark

    def _commit_floor(self, commit: int) -> int:
        """The commit index to save: never below the one saved before (``node.known_commit``, the saved commit the
        node started with), unless the node found those entries lost (their indexes are reused). A member back from
        an unclean stop starts with its commit clamped to its log (0 when the log was lost) and saves a hard state
        at its first term change, before it caught up: saving that commit would drop the floor a later recovery
        finds a majority's loss by (it would see no committed entry missing, and say nothing)."""
        n = self.node
        if n is not None and n.lost is None and n.known_commit > commit:
            return n.known_commit
        return commit

    def _save_hs(self, term: int, vote: Optional[str], commit: int) -> None:
        try:
            self.wal.save_hard_state(M.HardState(term, vote, self._commit_floor(commit), self._mark_now()))
        except OSError as e:
            self._write_failed(e)
            return
        self._hs_saved = (term, vote, commit)
        self._hs_saved_at = self.loop.time()

    def fail(self, why: str) -> None:
        """The owner's state can no longer follow the log (``why``): the group stops, as after a WAL write
        error (this member leaves the quorum; a restart recovers from the WAL)."""
        self.write_error = why
        self.log.error(f"RAFT group {self.name!r}: {why}; the group stops")
        self.loop.create_task(self.stop())

    def _write_failed(self, e: OSError) -> None:
        self.write_error = str(e)
        self.log.error(f"RAFT group {self.name!r}: WAL write error, the group stops: {e}")
        self.loop.create_task(self.stop())

    def _install(self, snap: Any) -> None:
        self.snapshots_installed += 1
        if self._restore is None:
            return
        try:
            self._restore(snap.data)
        except Exception as e:
            self.apply_errors += 1
            self.apply_error = f"snapshot at {snap.index}: {e}"
            self.log.error(f"RAFT group {self.name!r}: installing the snapshot at {snap.index} failed: {e!r}")
        self._skip_through = 0  # the owner's state is the snapshot's now: every later entry applies

    def _apply_one(self, index: int, data: bytes) -> None:
        if index <= self._skip_through:
            return
        try:
            self._apply(index, data)
        except Exception as e:
            self.apply_errors += 1
            self.apply_error = f"entry {index}: {e}"
            self.log.error(f"RAFT group {self.name!r}: applying entry {index} failed: {e!r}")

    def _soft_changed(self) -> None:
        n = self.node
        if n.leader is None:
            if self.no_leader_since is None:
                self.no_leader_since = self.loop.time()
        else:
            self.no_leader_since = None
        if n.leader is not None:
            self.ever_had_leader = True
            if n.leader != self.id:
                self._leader_waiters.clear()  # (another member leads: this one will not answer them)
        if n.role == LEADER:
            if not self.leader_since_ns:
                self.leader_since_ns = time.time_ns()
        else:
            self.leader_since_ns = 0
            if self._announced:
                self._announced = False
                if self.on_leader_change is not None:
                    self.on_leader_change(False)

    def _maybe_announce(self) -> None:
        n = self.node
        if not self._announced and n.role == LEADER and n.applied >= n.term_start:
            self._announced = True
            if self.on_leader_change is not None:
                self.on_leader_change(True)
            if self._leader_waiters:
                waiters, self._leader_waiters = self._leader_waiters, []
                now = self.loop.time()
                for deadline, cb in waiters:
                    if now <= deadline and self._announced:
                        try:
                            cb()
                        except Exception as e:
                            self.log.error(f"RAFT group {self.name!r}: leader waiter failed: {e!r}")

    def when_leader(self, cb: Callable[[], None], within: float) -> bool:
        """Call ``cb`` once this node leads (announced as ``on_leader_change(True)``), if that happens within
        ``within`` seconds and no other leader is known first (also before the group has started). False
        (and nothing registered) when a leader is already known or the group stopped: no need to wait."""
        n = self.node
        if self.stopped or self._announced or (n is not None and (n.leader not in (None, self.id)
                                                                  or self.id not in n.voters)):
            return False
        now = asyncio.get_running_loop().time()  # (the group may not have started yet)
        self._leader_waiters = [w for w in self._leader_waiters if w[0] >= now]
        self._leader_waiters.append((now + within, cb))
        return True

    # ---- state ----------------------------------------------------------------------------------------

    @property
    def processing(self) -> bool:
        """Whether this group's pass (``_process``) is running now (an owner called from inside it)."""
        return self._processing

    @property
    def is_leader(self) -> bool:
        return self._announced and self.running

    @property
    def leader(self) -> Optional[str]:
        return self.node.leader if self.node is not None and self.running else None

    @property
    def term(self) -> int:
        return self.node.term if self.node is not None else 0

    @property
    def applied(self) -> int:
        return self.node.applied if self.node is not None else 0

    def traffic_account(self) -> str:
        """The name of the account this group's RAFT messages travel in ("" when not running)."""
        tr = self.transport
        acc = tr.traffic_account(self.name) if tr is not None and self.running else None
        return acc.name if acc is not None else ""

    @property
    def peers(self) -> list[str]:
        return list(self.node.voters) if self.node is not None else list(self.bootstrap)

    def current(self) -> bool:
        """nats-server's isCurrent for this member: the leader is; a follower is when it heard from its leader
        within an election timeout and is not catching up (its log was found not to match the leader's, by an
        append or a heartbeat, and it has not yet reached the leader's commit since: a wiped or restarted
        member, one cut off for a while). Not either: a member that has not heard of a leader. (A follower
        merely a few entries behind under load is current, as in nats-server.)"""
        n = self.node
        if n is None or not self.running:
            return False
        if n.role == LEADER:
            return True
        if n.leader is None or n.election_elapsed >= self.election_ticks or n.recovering:
            return False
        return not n.catching_up

    def quorum(self) -> int:
        return len(self.peers) // 2 + 1

    def status(self) -> dict:
        """What the monitoring builders need: ``state`` (LEADER, FOLLOWER, CANDIDATE, CLOSED), term,
        leader, commit/applied, the voters, and on the leader each other peer's ``current``, ``lag``,
        ``active_ns`` (since heard from) and ``match``."""
        n = self.node
        if n is None:
            return {"id": self.id, "name": self.name, "state": "CLOSED", "term": 0, "leader": None,
                    "committed": 0, "applied": 0, "peers": {}, "voters": list(self.bootstrap),
                    "size": len(self.bootstrap), "quorum_needed": len(self.bootstrap) // 2 + 1}
        role = {LEADER: "LEADER", FOLLOWER: "FOLLOWER", CANDIDATE: "CANDIDATE",
                PRE_CANDIDATE: "CANDIDATE"}[n.role]
        if not self.running:
            role = "CLOSED"
        st: dict[str, Any] = {"id": self.id, "name": self.name, "state": role, "term": n.term, "vote": n.vote,
                              "leader": n.leader, "committed": n.commit, "applied": n.applied,
                              "last_index": n.last_index(), "last_term": n.last_term(),
                              "leader_commit": n.commit if n.role == LEADER else n.leader_commit,
                              "catching_up": n.catching_up, "lost_logs": n.lost_logs,
                              "recovering": n.recovering, "lost": list(n.lost) if n.lost else None,
                              "votes_lost": n.votes_lost,
                              "unclean_start": self.unclean_start,
                              "snapshot_index": n.offset, "voters": list(n.voters), "size": len(n.voters),
                              "quorum_needed": n.quorum, "leader_since_ns": self.leader_since_ns,
                              "ever_had_leader": self.ever_had_leader, "bad_messages": self.bad_messages,
                              "apply_errors": self.apply_errors, "apply_error": self.apply_error,
                              "write_error": self.write_error, "peers": {}}
        if n.role == LEADER:
            last = n.last_index()
            tick_ns = int(self.tick_interval * 1e9)
            for p, pr in n.prs.items():
                st["peers"][p] = {"match": pr.match, "current": pr.match == last, "lag": last - pr.match,
                                  "active_ns": (n.ticks - pr.last_seen) * tick_ns,
                                  "recent_active": pr.recent_active}
        return st
