"""Replicated streams on one server: ``StreamReplica``, one per stream group (made by ``ClusteredStreams``,
rillet.jetstream.cluster.clustered).

The meta layer (meta.py) calls ``stream_assigned``/``stream_removed``/``consumer_assigned``/
``consumer_removed`` as it applies assignments. For a stream assignment naming this server, a replica is
built: a ``Stream`` whose log is a ``RaftLog`` (log.py) over a ``RaftGroup`` (group.py) named by the
assignment. Every replica applies the committed entries to its own store; only the stream leader has the
stream's subscriptions (its subjects, direct gets, the catch-up subject) and sends PubAcks, after the
entry is committed and applied.

On disk: the stream's store under ``<store_dir>/jetstream/<account>/streams/<stream>/store`` (as a
single server, but no ``meta.json``: the assignment is the stream's config, so a restarted server does
not recover it as a single-server stream) and the group's WAL under ``<store_dir>/jetstream/_raft/
<group>/`` (nats-server: ``$SYS/_js_/<group>/``).

Consumers: each has its own RAFT group (consumers.py, ``ConsumerReplica``), on the stream's peers or a
subset of them; its leader runs the delivery engine over this server's stream replica. After each entry a
stream *follower* applies, the consumer engines running here hear of the stored and removed messages (on
the stream leader the entries' completions tell them, as on one server). Interest and work-queue
removals are proposed by the stream leader when it applies a consumer's ack (``retention_ack``), and a
new stream leader sweeps what every consumer has acknowledged (``retention_sweep``).

Membership: ``stream_assigned(sa)`` with other peers than the group's: the group's leader adds the new
peers, then removes the old ones, one configuration change at a time (``reconcile``, also from a timer);
a removed leader removes itself last and steps down once that commits. A server no longer among the
peers stops and deletes its replica (the leader once it has handed over). A new peer's replica starts
with the new peer list and gets the log, or a snapshot and the missing messages (catch-up below), from
the leader. The same holds for consumer groups (``consumer_assigned(ca)``).

Recovery: the group re-applies the entries in its WAL after a restart; a file store already holds what
they stored. ``_filter`` skips what the store already has: MSG/BATCH/MIRROR entries at or below the
store's last sequence, and any other stream entry while the store is ahead of the messages the replayed
entries stored so far (it was applied before the store got those later messages). The configuration the store
opens and the log replays with is the one this replica's log last applied (``appliedcfg``: kept durably at each
UPDATE entry, carried by snapshots), not the meta assignment's, which a restart replays from the creation's.

Snapshots (RAFT compaction, every ``COMPACT_EVERY`` applied entries, at most once in
``group.COMPACT_MIN_INTERVAL`` unless ``group.COMPACT_MAX_ENTRIES`` were applied since): msgpack ``{first, last, deleted}``
(the store's first/last sequences and the deleted sequences between, as nats-server's stream snapshot). A replica given a snapshot whose ``last`` is beyond its
store holds the group's applies (``RaftLog.hold``) and fetches the missing messages from the stream
leader in chunks: a request on the stream's sync subject (``$JSC.SYNC.<x>`` of the assignment; only the
leader subscribes) with JSON ``{"from": seq, "to": seq}`` is answered with msgpack ``[first, [[seq,
subject, hdr, data, ts], ...]]`` (at most ``SYNC_MSGS`` messages / ``SYNC_BYTES`` bytes; ``first`` the
leader's first sequence: what lies below it is gone). Gaps are skipped sequences (deleted). Once at
``last``, the snapshot's first and deletes are applied and the held entries follow.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from typing import TYPE_CHECKING, Any

import msgspec

from rillet.jetstream.cluster import monitor
from rillet.jetstream.cluster.consumers import LOST_QUORUM_EVERY, ConsumerReplica, send_advisory, send_quorum_lost
from rillet.gocompat.gotime import format_time
from rillet.jetstream.api import codec as apijson
from rillet.jetstream import fastbatch, sourcestate
from rillet.jetstream.cluster import appliedcfg, lossreport
from rillet.jetstream.cluster.stream_loss import StreamLossMixin
from rillet.jetstream.cluster.log import LOST, RESTORED, SYNCED, FastNote, RaftLog
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import Entry, NotLeader
from rillet.jetstream.store.base import ErrStoreCorrupt, StoreError
from rillet.raft.node import FOLLOWER
from rillet.durable import make_dirs_durable
from rillet.handles import cancelled

if TYPE_CHECKING:
    from rillet.jetstream.cluster.clustered import ClusteredStreams

COMPACT_EVERY = 8192  # applied entries between snapshots
SYNC_MSGS = 256  # messages per catch-up answer
SYNC_BYTES = 1 << 20
SYNC_TIMEOUT = 2.0  # seconds before a catch-up request is sent again
RECONCILE_EVERY = 0.25  # seconds between membership checks of the groups this server leads
RESTORE_HANDOVER = 30.0  # seconds a new restoring group's other members hand leadership to the preferred peer

T = "io.nats.jetstream.api.v1."

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


class StreamReplica(StreamLossMixin):
    """One stream's replica on this server: the Stream, its RaftLog and RaftGroup, its consumers."""

    cfg_wanted: Any = None  # an assignment's configuration update its log has not applied yet (clustered.config_due)

    def __init__(self, cs: "ClusteredStreams", sa: Any, jsa: Any) -> None:
        from rillet.jetstream.api.common import stream_config_from_dict
        from rillet.jetstream.cluster.group import RaftGroup
        from rillet.jetstream.storeopen import open_store
        from rillet.jetstream.stream import Stream
        self.cs = cs
        self.sa = sa
        self.jsa = jsa
        js = cs.js
        cfg = stream_config_from_dict(sa.config)
        sdir = jsa.stream_dir(cfg.name)
        self.config_ts = 0  # the leader's time of the last UPDATE entry applied here (appliedcfg)
        if cfg.storage != "memory":  # (a memory stream and its group write nothing under the store dir)
            make_dirs_durable(sdir)
            # the configuration this replica's log last applied, not the assignment's: see appliedcfg
            try:
                cfg, self.config_ts = appliedcfg.load(sdir, sa.group.name) or (cfg, 0)
            except ValueError as e:
                js.log.error(f"JetStream cluster stream '{jsa.account.name} > {cfg.name}': {e}; "
                             f"using the assignment's configuration")
        store = open_store(cfg, sdir, js)
        self.refetch = 0  # sequences cut from the store to fetch damaged records again (_open_damage, refetch_damaged)
        self.stream = st = Stream(jsa, cfg, format_time(sa.created or time.time_ns()), store)
        self.log = RaftLog(self._apply, sa.group.name, js.log)
        self.log.on_leader_change = self._leader_changed
        self.log.filter = self._filter
        self.log.solo_apply = st.apply  # (solo: no WAL replay to track, no follower's side to run)
        st.replicate(self.log, self)  # (STREAM.INFO's cluster block and consumer_count come from here)
        self.sync_subject = sa.sync or f"$JSC.SYNC.{sa.group.name}"
        self.group = RaftGroup(cs.server, sa.group.name, list(sa.group.peers), js.store_dir,
                               apply=self.log.group_apply, on_leader_change=self.log.group_leader_change,
                               snapshot=self.snapshot, restore=self.restore, sync=js.sync_interval,
                               storage=sa.group.storage, account=jsa.account.name)
        self.log.bind(self.group)
        # damaged records (reported lost by the store) are fetched again, not served as holes: the store is cut
        # now when the group's log can give them again, else once the other replicas were asked (_open_damage)
        self._open_damage()
        self.group.on_quorum_lost = self._quorum_lost
        self.group.on_data_lost = self._data_lost
        self.group.mark = self._mark
        self.group.on_mark_floor = self._mark_floor
        # (lazy sync) sequences up to _reserved are saved as the group's mark (fsynced) before the leader
        # acknowledges any of them, and ahead of what a follower applied: after a majority's unclean stop the new
        # leader goes on past them (_floor), never giving again a sequence that may have been acknowledged and
        # lost with the unsynced tail, even when the old leader's disk is gone
        self._reserved = 0  # (the applies reaching it reserve more)
        self._reserved_mark = 0  # (what the saved mark covers of the reservations)
        self._idle_timer: asyncio.TimerHandle | None = None  # (_reserve_idle)
        self._floor = 0
        self.skipped: dict | None = None  # the sequences the last floor skipped (cluster info "skipped")
        # committed entries found gone from every member (cluster info "lost"), kept in the group's directory
        self.data_lost: dict | None = None if self.group.memory else lossreport.load_or_flag(self.group.dir, js.log)
        self._lost_proposing = False
        self._lost_again = False  # (a wider loss found while a LOST entry was in flight: proposed after it)
        self._lost_feed = False
        self._lost_advised = False  # (this process sent the advisory of the report loaded at the start)
        if self.data_lost is not None:
            js.log.error(f"JetStream cluster stream '{jsa.account.name} > {cfg.name}' lost committed RAFT entries "
                         f"{self.data_lost['raft_first']}..{self.data_lost['raft_last']} (reported before the "
                         f"restart, {self.data_lost.get('detected', '')})")
        self.group.lazy_commits = self._lazy_commits
        self.group.apply_batch = self._apply_batch
        self._gathering: Any = None  # the store gathering the appends of the entries being applied
        self.lost_quorum_sent = -LOST_QUORUM_EVERY
        self.replay_seq = 0  # the last sequence the applied (or skipped) entries stored
        self.applied_since_snap = 0
        self.creps: dict[str, ConsumerReplica] = {}  # this server's consumer replicas of the stream
        self._removing: set[int] = set()  # retention removals proposed and not yet applied
        self.created_at = js.loop.time()
        self.leaving_since = 0.0  # this server is no longer among the peers (a leader hands over first)
        self._direct_subs: list[Any] = []
        self._sync_sub: Any = None
        self._catchup: asyncio.Task | None = None
        self.leader = False
        self.closed = False
        self.catchups = 0
        self.replay_skipped = 0  # entries the store already held when the group replayed its WAL
        self.restore_reply = ""  # STREAM.RESTORE: the request's reply, until this server (leader) takes it
        self._restore_final = b""  # the reply of a restore's last chunk (answered once the restore is done)
        self._pending_snap: dict | None = None  # a snapshot that came while a catch-up ran (installed after)
        self._restoring: Any = None  # the ArchiveReceiver of a restore in progress
        self.restored = False  # a RESTORED entry was applied here
        self.fast_records: dict[str, Any] = {}  # fast batches known from applied entries (fastbatch.Follower)
        self.direct_deleted: dict[str, float] = {}  # direct consumers deleted through the API here -> when
        self.synced = False  # a SYNCED entry (the store as it is) was proposed since the group last ran solo
        self._refetch_due = False  # (refetch_damaged) tried again shortly: a handover or a catch-up first
        self._refetch_handover = 0.0  # (refetch_damaged) when this leader last asked to step down for it
        self._wake_from = 0  # (refetch_damaged) the first sequence fetched again (the engines hear of them)
        jsa.streams[cfg.name] = st
        self.listen_damage_probes()  # (the other replicas ask about this store's copies of their damaged records)
        self._start_task = js.loop.create_task(self._start())

    @property
    def name(self) -> str:
        return self.stream.name

    @property
    def consumers(self) -> dict[str, Any]:
        """name -> the consumer object of each consumer replica here (an engine where it leads)."""
        return {n: cr.c for n, cr in self.creps.items()}

    async def _start(self) -> None:
        await self.group.start_asset(f"stream '{self.jsa.account.name} > {self.name}'", self.cs.js.log,
                                     lambda: self.sa.group.preferred)
        self._open_damage_started()

    # ---- apply filter (recovery) ------------------------------------------------------------------

    def _filter(self, index: int, target: str, entry: Entry) -> bool:
        self.applied_since_snap += 1
        if self.applied_since_snap >= COMPACT_EVERY and self.group.compact_due(self.applied_since_snap):
            self.applied_since_snap = 0
            self.group.compact()  # (inside the group's apply: done after the current Ready)
        if target:
            return True
        store = self.stream.store
        op = entry.op
        if op == RESTORED or op == SYNCED or op == LOST:
            return True  # (idempotent: a replica already at the restored state only checks it)
        last = store.last_seq
        if op == Entry.MSG:
            seq = entry.args[6]
        elif op == Entry.BATCH:
            seq = entry.args[1] + len(entry.args[0]) - 1
        elif op == Entry.MIRROR:
            seq = entry.args[0]
        else:
            # the store is past this point of the log: applied before the restart
            if last > self.replay_seq:
                self.replay_skipped += 1
                return False
            return True
        if seq <= last:
            self.replay_seq = seq
            self.replay_skipped += 1
            if op == Entry.MSG and entry.args[1] and self.stream.cfg.sources and \
                    b"Nats-Stream-Source:" in entry.args[1]:  # (stored already: its source position still counts)
                sourcestate.seen(self.stream, entry.args[1])
            return False
        self.replay_seq = seq
        return True

    def _apply_batch(self, begin: bool) -> None:
        """(RaftGroup.apply_batch) The committed entries of one Ready: their plain appends are gathered by a file
        store and written with one write after the last of them (FileStore.write_behind), not one write each.
        Nothing outside the batch sees the gathered records (anything in it that reads or changes the files
        writes them first); the entries are in the WAL already, so a PubAck sent meanwhile says no more than
        the log holds. A failed write takes them back: this replica's store is then behind its log, and the
        group stops (a restart replays them from the WAL)."""
        if begin:
            st = self.stream
            store = st.store
            if (self._gathering is not None or self.log.solo or st._wb_store or self.cs.js.sync_always
                    or self.log.holding or not hasattr(store, "write_behind")):
                return
            store.write_behind(None, self._gather_failed)
            store.gather(True)
            self._gathering = store
            return
        self._end_gather()

    def _end_gather(self) -> None:
        store, self._gathering = self._gathering, None
        if store is not None:
            try:
                store.write_behind(on=False)  # (writes what is gathered, then appends are written at once again)
            except StoreError:
                pass  # (taken back: _gather_failed stopped the group)

    def _gather_failed(self, first: int, last: int, err: BaseException) -> None:
        why = (f"writing messages {first}..{last} of stream '{self.jsa.account.name} > {self.name}' to its "
               f"store failed ({err}): the store is behind the log")
        self.stream.fail_store(why)
        self.group.fail(why)

    def _apply(self, entry: Entry) -> Any:
        st = self.stream
        if entry.op == RESTORED or entry.op == SYNCED:
            self._end_gather()  # (the store is replaced or caught up: what the batch gathered is written first)
            if entry.op == RESTORED:
                self.restored = True
            self.restore(entry.args[0])  # (a follower catches up to the leader's store; the leader has it)
            return None
        if entry.op == LOST:
            self._end_gather()
            self._apply_lost(_dec.decode(entry.args[0]))
            return None
        st.no_gather()  # (an entry of the group's log: never gathered by a solo R1's write-behind)
        try:
            res = st.apply(entry)
        finally:  # (markers an entry stored count as where the log is)
            self.replay_seq = st.store.last_seq
        if entry.op == Entry.UPDATE:  # (kept for a restart: the store opens and the log replays with it)
            appliedcfg.applied(self, entry.args[2])
        if self.replay_seq >= self._reserved:  # (leader and followers: stream_loss._reserve)
            self._reserve()
        ctx = entry.ctx
        if ctx is not None and ctx.__class__ is FastNote and not self.leader:
            fastbatch.note_applied(self.fast_records, ctx.reply, res[0], self.cs.js.loop.time())
        if not self.log.applying_own and self.creps:
            self._signal_engines(entry, res)
        return res

    def _signal_engines(self, entry: Entry, res: Any) -> None:
        """An entry applied without a completion here (a follower's): the consumer engines running on this
        server hear of what it stored and removed (the leader's completions do this on the leader)."""
        st = self.stream
        fx = st.take_effects()
        engines = [cr.c for cr in self.creps.values() if cr.c.engine and not cr.c.closed]
        if not engines:
            return
        op = entry.op
        stored: list[tuple[int, str]] = []
        if op == Entry.MSG:
            stored.append((res[0], entry.args[0]))
        elif op == Entry.BATCH:
            stored.extend((sq, m[0]) for m, (sq, _) in zip(entry.args[0], res))
        elif op == Entry.MIRROR:
            stored.append((entry.args[0], entry.args[1]))
        for f in fx:
            if f.__class__ is int:
                for c in engines:
                    c.on_stream_remove(f)
            else:
                stored.append((f[0], f[1]))
        for seq, subject in stored:
            for c in engines:
                c.on_stream_msg(seq, subject)
        if op == Entry.PURGE:
            for c in engines:
                c.on_purge()

    # ---- leadership ---------------------------------------------------------------------------------

    def _leader_changed(self, leader: bool) -> None:
        if self.closed:
            return
        st = self.stream
        self.leader = leader
        self.replay_seq = max(self.replay_seq, st.store.last_seq)
        if leader and self.log.holding and len(self.group.peers) > 1:
            # (the store is behind the log: catching up from a leader; it cannot serve or take publishes)
            self.leader = False
            try:
                self.group.stepdown()
                self.cs.js.log.warn(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': elected "
                                    f"while catching up its store, stepping down")
            except (NotLeader, ValueError):  # (nobody to hand over to yet: again shortly, or lead once caught up)
                self.cs.js.loop.call_later(0.5, self._lead_when_caught_up)
            return
        if leader:
            self.cs.js.log.notice(f"JetStream cluster new stream leader for '{self.jsa.account.name} > {self.name}'")
            self._direct(False)
            if self.restore_reply:
                self._begin_restore()  # (the stream takes publishes once the archive is loaded)
            elif self._restore_elsewhere():
                self._hand_to_preferred()  # (no publishes here: the store must stay empty for the restore)
            else:
                if self.fast_records:  # fast batches carried on from the previous leader (as nats-server)
                    fastbatch.adopt(st, self.fast_records, self.cs.js.loop.time())
                if lossreport.pending(self.data_lost) or self._floor > st.store.last_seq:
                    self._propose_lost(feed=True)  # (no publish before the lost sequences are skipped)
                else:
                    self._feed()
            self._sync_sub = self.jsa.ic.subscribe(self.sync_subject, self._on_sync)
            self.solo_check()
            self._advisory(True)
            if self.data_lost is not None and not self._lost_advised:
                self._lost_advisory()  # (again after a restart: the loss is still there)
            if st.cfg.retention != "limits":
                self.retention_sweep()
            self.cs.reconcile_soon()
            self.cs.config_due(self)  # (an update committed while the group had no leader)
        else:
            self._release_reservation()  # (as a follower it reserves again from what it applies)
            self.log.solo = False
            st.set_write_behind(False)
            if self._restoring is not None:
                self._restore_failed("stream leader lost during the restore")
            st.unsubscribe_all()
            from rillet.jetstream import schedules
            schedules.stop(st)
            if st.sources is not None:
                st.sources.stop()
                st.sources = None
            for name, c in list(st.consumers.items()):
                if name not in self.creps:  # a direct (mirror/source) consumer: the leader's only
                    c.stop(delete=True, advisory=False)
                    st.consumers.pop(name, None)
            if st.fast_batches:  # kept as records: this server may lead again
                self.fast_records = fastbatch.records(st, self.cs.js.loop.time())
            st.leader_changed(False)
            if self._sync_sub is not None:
                self.jsa.ic.remove_sub(self._sync_sub)
                self._sync_sub = None
            self.direct_check()  # (on once current: at once after a stepdown, later for a lagging replica)

    def _lead_when_caught_up(self) -> None:
        if not self.closed and not self.leader and self.group.is_leader:
            self._leader_changed(True)

    def _feed(self) -> None:
        st = self.stream
        st.start()  # subjects, direct gets, expiry timer, schedules
        if st.cfg.mirror is not None or st.cfg.sources:
            from rillet.jetstream.sources import attach_sources
            attach_sources(st)  # the leader feeds the stream

    # ---- R1: no log while this server is the only member -------------------------------------------

    def solo_check(self) -> None:
        """An R1 stream (this leader is the group's only voter and its assignment wants no other) runs solo, as
        nats-server runs R1 streams without a RAFT group: its entries are applied at once, without the group's
        log and WAL (RaftLog.solo); the store is what is durable, as on a single server. Anything else (a
        restore in progress, a membership change to come) goes through the group."""
        g = self.group
        solo = (self.leader and not self.closed and not self.leaving_since and self._restoring is None
                and not self.restore_reply and g.peers == [g.id] and list(self.sa.group.peers) == [g.id])
        n = g.node
        if solo and (n is None or (n.conf_log and n.conf_log[-1][0] > n.commit)):
            solo = False  # (the removal that left this member alone has not committed yet: again later)
            self.cs.js.loop.call_later(RECONCILE_EVERY, self.solo_check)
        self.log.solo = solo
        # solo, the store is what is durable, as on one server: write-behind too (Stream.set_write_behind)
        self.stream.set_write_behind(solo)

    def mark_synced(self) -> None:
        """Before this leader changes the group's members: stop running solo and, when entries were applied
        solo (or since this replica started: a restarted store may be ahead of the group's log), propose the
        store's state (SYNCED). A new member applying the log catches up to it from this leader (as to a
        snapshot) before the entries that follow it."""
        log = self.log
        log.solo = False
        self.stream.set_write_behind(False)
        if log.solo_applied:
            log.solo_applied = 0
            self.synced = False
        if self.synced or not log.is_leader:
            return
        self.synced = True

        def done(_: Any, res: Any, err: BaseException | None) -> None:
            if err is not None:
                self.synced = False
                if not isinstance(err, NotLeader):
                    self.cs.js.log.error(f"JetStream cluster: stream '{self.jsa.account.name} > {self.name}': "
                                         f"proposing the store's state failed: {err}")
        log.propose(Entry(SYNCED, (self.snapshot(),)), done)

    # ---- STREAM.RESTORE (this server is the group's preferred peer and leads it) ----------------------

    def _begin_restore(self) -> None:
        """As nats-server: the stream group's preferred peer, once leader, answers the restore request
        with the subject to send the archive to, loads it into its (empty) store, then proposes the
        store's snapshot form (``RESTORED``): every replica catches up to it from this leader (the
        snapshot install path), and the restore is answered once that entry committed."""
        from rillet.jetstream.snapshot import ArchiveReceiver
        reply, self.restore_reply = self.restore_reply, ""
        self.cs.js.log.notice(f"Starting restore for stream '{self.jsa.account.name} > {self.name}'")
        self._restoring = ArchiveReceiver(self.jsa, self.name, self._restore_received, self._restore_failed)
        self._restoring.start(reply.encode())

    def _restore_elsewhere(self) -> bool:
        """This new group's assignment is a restore that its preferred peer (another server) takes, and the
        restored state has not been applied here yet."""
        sa = self.sa
        return (sa.restore is not None and bool(sa.reply) and not self.restored and bool(sa.group.preferred)
                and sa.group.preferred != self.group.id
                and self.cs.js.loop.time() - self.created_at < RESTORE_HANDOVER)

    def _hand_to_preferred(self) -> None:
        """Another member than the preferred peer won the group's first election (the preferred one may have
        asked for votes before the others had joined the group): leadership goes to the preferred peer,
        which takes the archive (nats-server's preferred peer is the one that answers a restore)."""
        try:
            self.group.stepdown(self.sa.group.preferred)
        except (NotLeader, ValueError) as e:
            self.cs.js.log.warn(f"Stream restore for '{self.jsa.account.name} > {self.name}': cannot hand the "
                                f"group to its preferred peer: {e}")

    def _restore_received(self, spool: Any, final_reply: bytes) -> None:
        """The archive's last chunk came (the archive is in the temporary file ``spool``): it is loaded into
        the store (unpacked and read in worker threads, stored in batches on the event loop: the server
        serves its other clients meanwhile), then the store's state is proposed (RESTORED)."""
        self._restore_final = final_reply
        self.cs.js.loop.create_task(self._load_restore(self._restoring, spool, final_reply))

    async def _load_restore(self, recv: Any, spool: Any, final_reply: bytes) -> None:
        from rillet.jetstream.cluster.log import RESTORED
        from rillet.jetstream.snapshot import load_archive
        st = self.stream
        size = recv.size

        def alive() -> bool:  # (not given up meanwhile: leader lost, stalled, the stream stopped)
            return self._restoring is recv and not self.closed
        try:
            if st.store.last_seq:
                raise ApiError.make("STREAM_RESTORE", err="stream is not empty")
            consumers: list[Any] = []  # (a v2 backup's: made again once the restore committed)
            loaded = await load_archive(st.store, st.cfg, spool, alive, consumers=consumers)
        except Exception as e:
            if alive():
                self._restore_failed(e if isinstance(e, ApiError) else str(e))
            else:
                self.cs.js.log.warn(f"Stream restore for '{self.jsa.account.name} > {self.name}' (given up): {e}")
            return
        finally:
            spool.close()
        if not loaded or not alive():
            return  # (given up meanwhile: answered and removed by _restore_failed)
        st.forget_dedup()

        def done(_: Any, res: Any, err: BaseException | None) -> None:
            if err is not None:
                self._restore_failed(f"the restored state did not commit: {err or type(err).__name__}")
                return
            self._restoring = None
            self.solo_check()
            self.cs.js.log.notice(f"Completed restore of {size} bytes for stream "
                                  f"'{self.jsa.account.name} > {self.name}'")
            if self.leader and not self.closed:
                self._feed()
            from rillet.jetstream.api.common import T, stream_info_dict
            self._respond(final_reply, {"type": T + "stream_create_response", **stream_info_dict(st)})
            if consumers:
                from rillet.jetstream.snapshot import recreate_consumers
                recreate_consumers(self.jsa, self.name, consumers)
        self.log.propose(Entry(RESTORED, (self.snapshot(),)), done)

    def _respond(self, reply: bytes, d: dict) -> None:
        if reply:
            self.jsa.ic.publish(reply, None, apijson.go_json(d))

    def _restore_failed(self, why: Any) -> None:
        """The restore did not complete: its last chunk (when it came) is answered with the restore error
        and the stream is deleted through the meta leader (nats-server removes the assignment too)."""
        recv, self._restoring = self._restoring, None
        if recv is None:
            return
        recv.cancel()
        err = why if isinstance(why, ApiError) else ApiError.make("STREAM_RESTORE", err=str(why))
        self.cs.js.log.warn(f"Stream restore failed for '{self.jsa.account.name} > {self.name}': {err}")
        from rillet.jetstream.api.common import T
        final = self._restore_final
        if final:
            self._respond(final, {"type": T + "stream_create_response", "error": err.to_dict()})
        if not self.closed:
            subj = f"{self.jsa.api_prefixes()[0]}.STREAM.DELETE.{self.name}"
            self.jsa.ic.publish(subj.encode(), None, b"")

    def _direct(self, on: bool) -> None:
        """Direct gets on a follower (``allow_direct``; a ``mirror_direct`` mirror: its origin's too): every
        replica that is current answers them, one per request (the ``_sys_`` queue group, as nats-server's
        subscribeToDirect/subscribeToMirrorDirect). ``on``: subscribe (off: unsubscribe)."""
        ic = self.jsa.ic
        for sub in self._direct_subs:
            ic.remove_sub(sub)
        self._direct_subs = []
        cfg = self.stream.cfg
        if not on or self.closed or not (cfg.allow_direct or cfg.mirror_direct):
            return
        names = [self.name]
        if cfg.mirror_direct and cfg.mirror is not None:
            names.append(cfg.mirror.name)
        for prefix in self.jsa.api_prefixes():
            for n in names:
                for pat in (f"{prefix}.DIRECT.GET.{n}", f"{prefix}.DIRECT.GET.{n}.>"):
                    self._direct_subs.append(ic.subscribe(pat, self.stream.on_direct_get, queue="_sys_"))

    def direct_check(self) -> None:
        """(Un)subscribe this follower's direct gets: on while it is current, off while it catches up, has
        lost its leader or leads (the leader's own subscriptions are the stream's)."""
        want = self._direct_current()
        if want != bool(self._direct_subs):
            self._direct(want)

    def _direct_current(self) -> bool:
        """A follower is current (nats-server's isCurrent): it hears from a leader, has applied every entry it
        knows committed and is not catching up from a snapshot."""
        cfg = self.stream.cfg
        if self.closed or self.leader or not (cfg.allow_direct or cfg.mirror_direct):
            return False
        g = self.group
        n = g.node
        if n is None or not g.running or n.leader is None or n.leader == g.id or n.role != FOLLOWER:
            return False
        if n.election_elapsed >= g.election_ticks:  # (nothing heard from the leader for an election timeout)
            return False
        if self.log._held is not None or (self._catchup is not None and not self._catchup.done()):
            return False
        return n.applied >= n.commit

    def _advisory(self, leader: bool) -> None:
        if not leader:
            return
        srv = self.cs.server
        reps = self._peer_states()
        now = time.time_ns()
        send_advisory(self.cs, self.jsa, lambda acc: monitor.stream_leader_elected_advisory(
            acc, self.name, srv.name, reps, now))

    def _quorum_lost(self) -> None:
        now = self.cs.js.loop.time()
        if self.closed or now - self.lost_quorum_sent < LOST_QUORUM_EVERY:
            return
        self.lost_quorum_sent = now
        send_quorum_lost(self.cs, self.jsa, f"stream '{self.jsa.account.name} > {self.name}'",
                         lambda acc: monitor.stream_quorum_lost_advisory(
                             acc, self.name, self._peer_states(), time.time_ns(), self.cs.js.domain or ""))

    # ---- consumers ----------------------------------------------------------------------------------

    def add_consumer(self, ca: Any) -> None:
        cr = self.creps.get(ca.name)
        if cr is not None:
            if list(ca.group.peers) != list(cr.ca.group.peers):
                self.cs.reconcile_soon()
            cr.update(ca)
            return
        self.creps[ca.name] = cr = ConsumerReplica(self, ca)
        if self.cs._early_waiters:
            self.cs._take_early_waiters((self.jsa.account.name, self.name, ca.name), cr)

    async def remove_consumer(self, name: str, delete: bool = True) -> None:
        cr = self.creps.pop(name, None)
        if cr is None:
            return
        c = cr.c
        await cr.stop(delete=delete)
        if delete and self.leader and self.stream.cfg.retention == "interest" and not self.closed:
            from rillet.jetstream import retention
            retention.on_consumer_delete(self.stream, c)  # what only it still needed goes

    # ---- retention (the stream leader's removals) ---------------------------------------------------

    def retention_ack(self, c: Any, seq: int) -> None:
        """Consumer ``c`` acknowledged ``seq`` (applied here, where the stream leads): propose its removal
        when no other consumer still needs it."""
        st = self.stream
        if seq in self._removing or st.closed:
            return
        subject = st.store.subject_for_seq(seq)
        if subject is None:
            return  # gone already
        if st.cfg.retention == "interest":
            from rillet.jetstream.retention import needs_ack
            for o in st.consumers.values():
                if o is not c and needs_ack(o, seq, subject):
                    return
        self._retention_remove(seq)

    def _retention_remove(self, seq: int) -> None:
        self._removing.add(seq)

        def done(_: Any, err: BaseException | None) -> None:
            self._removing.discard(seq)
            if err is not None and not isinstance(err, NotLeader) and \
                    self.stream.store.subject_for_seq(seq) is not None:
                self.cs.js.log.error(f"Stream '{self.jsa.account.name} > {self.name}': retention removal of "
                                     f"message {seq} failed: {err}")
        self.stream.delete_msg(seq, False, done)

    def retention_sweep(self) -> None:
        """A new stream leader: remove what every consumer has acknowledged (a removal the previous leader
        proposed may not have committed)."""
        from rillet.jetstream.retention import needs_ack
        st = self.stream
        cons = [c for c in st.consumers.values() if not c.closed]
        if not cons:
            return
        store = st.store
        state = store.state()
        top = min(state.last_seq, max(max(c.asflr, c.dsseq) for c in cons))
        wq = st.cfg.retention == "workqueue"
        seq = state.first_seq
        while 0 < seq <= top:
            try:
                m = store.load_next_msg(">", seq, True)
            except StoreError:
                seq += 1
                continue
            if m is None or m.seq > top:
                break
            seq = m.seq + 1
            if any(needs_ack(c, m.seq, m.subject) for c in cons):
                continue
            if wq and not any(c._matches(m.subject) for c in cons):
                continue  # (stored before any consumer covered it)
            if m.seq not in self._removing:
                self._retention_remove(m.seq)

    # ---- snapshots and catch-up ---------------------------------------------------------------------

    def snapshot(self) -> bytes:
        # (with feature flag js_snapshot_sources the sources' positions too: rillet.jetstream.sourcestate)
        return _enc.encode({**self._store_state(), **sourcestate.snapshot_fields(self.stream),
                            **appliedcfg.snapshot_fields(self)})

    def _store_state(self) -> dict:
        """The store's sequence state as a snapshot has it. Damaged records (``lost``: a checksum failed) are
        not deletions: a replica installing it fetches them."""
        st = self.stream.store.state()
        deleted = st.deleted
        if st.lost:
            lost = set(st.lost)
            deleted = [s for s in deleted if s not in lost]
        return {"first": st.first_seq, "last": st.last_seq, "deleted": list(deleted)}

    def restore(self, data: bytes) -> None:
        snap = _dec.decode(data)
        if self._open_damage_due:  # (the group's start: its snapshot says whether its log holds the damaged ones)
            self._open_damage_cut(snap)
        store = self.stream.store
        if store.last_seq < snap["last"]:
            snap["behind"] = True  # (its configuration too: appliedcfg.install)
            self.log.hold()
            if self._direct_subs:
                self._direct(False)  # (behind: no direct gets until caught up)
            if self._catchup is None or self._catchup.done():
                self._catchup = self.cs.js.loop.create_task(self._catch_up(snap))
            else:
                self._pending_snap = snap
            return
        self._finish_snapshot(snap)

    def _finish_snapshot(self, snap: dict) -> None:
        store = self.stream.store
        first, last = snap["first"], snap["last"]
        if store.last_seq < last:
            store.skip_msgs(store.last_seq + 1, last - store.last_seq)
        if first > store.state().first_seq:
            store.compact(first)
        for seq in snap.get("deleted") or ():
            if seq <= last:
                store.remove_msg(seq, False)  # (False when it is gone already)
        self.replay_seq = max(store.last_seq, last)
        if snap.get("behind"):
            appliedcfg.install(self, snap)
        self.stream.forget_dedup()
        sourcestate.restore(self.stream, snap)
        for cr in self.creps.values():  # (the store changed under the consumers here: counted again, woken)
            c = cr.c
            if not c.closed:
                c.npc_dirty = True
                if c.engine:
                    c.kick()

    async def _catch_up(self, snap: dict) -> None:
        """Fetch the messages up to the snapshot's last sequence from the stream leader, in chunks."""
        from rillet.jetstream.stream import parse_ttl
        from rillet.jetstream import headers as H
        store = self.stream.store
        ic = self.jsa.ic
        loop = self.cs.js.loop
        inbox = f"_INBOX.JSC.{os.urandom(8).hex()}"
        q: asyncio.Queue = asyncio.Queue()
        sub = ic.subscribe(inbox, lambda s, c, subj, rep, hdr, msg: q.put_nowait(bytes(msg)))
        self.catchups += 1
        try:
            while not self.closed:
                target = snap["last"]
                if store.last_seq >= target:
                    break
                req = json.dumps({"from": store.last_seq + 1, "to": target}).encode()
                ic.publish(self.sync_subject.encode(), inbox.encode(), req)
                try:
                    ans = await asyncio.wait_for(q.get(), SYNC_TIMEOUT)
                except asyncio.TimeoutError:
                    continue  # no leader yet, or it changed: ask again
                try:
                    first, msgs = _dec.decode(ans)
                except (msgspec.DecodeError, ValueError, TypeError) as e:
                    self.cs.js.log.warn(f"JetStream cluster: '{self.name}': bad catch-up answer: {e}")
                    await asyncio.sleep(0.1)
                    continue
                nxt = store.last_seq + 1
                if first > nxt:
                    n = min(first, target + 1) - nxt
                    store.skip_msgs(nxt, n)
                for seq, subj, hdr, data, ts in msgs:
                    if seq <= store.last_seq or seq > target:
                        continue
                    ttl = 0
                    if hdr:
                        v = H.get_header(hdr, H.TTL)
                        if v:
                            try:
                                ttl = max(parse_ttl(v), 0)
                            except ValueError:
                                ttl = 0
                    store.store_raw(seq, subj, hdr, data, ts, ttl)
                if not msgs and first <= nxt:
                    await asyncio.sleep(0.1)  # the answering leader is behind: ask again
            if not self.closed:
                # (the leader's catch-up budget holds the last answer until told: max_outstanding_catchup)
                ic.publish(self.sync_subject.encode(), inbox.encode(), b'{"done":true}')
                self._finish_snapshot(snap)
                nsnap = self._pending_snap
                if nsnap is not None:
                    self._pending_snap = None
                    if store.last_seq < nsnap["last"]:
                        self._catchup = loop.create_task(self._catch_up(nsnap))
                        return
                    self._finish_snapshot(nsnap)
                self.log.release()
                self._wake_engines()
        except Exception as e:
            self.cs.js.log.error(f"JetStream cluster: '{self.jsa.account.name} > {self.name}': catch-up "
                                 f"failed: {e!r}")
        finally:
            ic.remove_sub(sub)

    def _wake_engines(self) -> None:
        """After a catch-up that fetched damaged records again: the consumer engines running here hear of the
        messages it stored (they were waiting for them: see ConsumerEngine._load_next)."""
        start, self._wake_from = self._wake_from, 0
        if not start:
            return
        engines = [cr.c for cr in self.creps.values() if cr.c.engine and not cr.c.closed]
        store = self.stream.store
        for seq in range(start, store.last_seq + 1) if engines else ():
            subj = store.subject_for_seq(seq)
            if subj is not None:
                for c in engines:
                    c.on_stream_msg(seq, subj)

    def _on_sync(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """The leader's side of a catch-up: the messages from ``from`` on (up to ``to``), in one chunk, within
        the server's catch-up budget (rillet.jetstream.cluster.catchup: it may wait its turn there)."""
        if not reply:
            return
        budget = self.cs.catchup
        key = bytes(reply)
        try:
            req = json.loads(msg[hdr:] if hdr >= 0 else msg)
            if isinstance(req, dict) and req.get("done") is True:
                budget.release(key)  # (the follower has all it asked for)
                return
            seq, to = int(req["from"]), int(req["to"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        if not self.leader:
            budget.release(key)
            return
        budget.request(key, lambda room: self._answer_sync(key, seq, to, room))

    def _answer_sync(self, reply: bytes, seq: int, to: int, room: int) -> None:
        """One catch-up answer of at most ``room`` bytes (and SYNC_BYTES; at least one message), charged to the
        catch-up budget; nothing when this server no longer leads (the follower asks the new leader)."""
        if not self.leader or self.closed:
            return
        limit = min(SYNC_BYTES, room)
        store = self.stream.store
        st = store.state()
        first = st.first_seq
        out = []
        size = 0
        seq = max(seq, first)
        if st.lost:  # (damaged here, this leader hands over to fetch it again: never passed over as a gap, unless
            # no replica holds a healthy copy: lost everywhere, passed over)
            everywhere = self.lost_everywhere
            bad = next((s for s in st.lost if s >= seq and s not in everywhere), 0)
            if bad:
                to = min(to, bad - 1)
        store.read_begin()  # (in sequence order: the store may read ahead)
        try:
            while seq <= to and len(out) < SYNC_MSGS and (size < limit or not out):
                try:
                    m = store.load_next_msg(">", seq, True)
                except ErrStoreCorrupt:
                    break  # (damaged here: the messages before it; this leader hands over to fetch it again)
                if m is None or m.seq > to:
                    break
                n = len(m.subject) + len(m.hdr) + len(m.data)
                if out and size + n > limit:
                    break  # (the next answer takes it)
                out.append((m.seq, m.subject, m.hdr, m.data, m.ts))
                size += n
                seq = m.seq + 1
        finally:
            store.read_done()
        self.jsa.ic.publish(reply, None, _enc.encode((first, out)))
        self.cs.catchup.charge(reply, size)

    # ---- info ---------------------------------------------------------------------------------------

    def peer_states(self, g: Any) -> list[monitor.PeerState]:
        st = g.status()
        out = []
        me = g.id
        pst = st.get("peers") or {}
        for p in g.peers:
            if p == me:
                continue
            ps = pst.get(p)
            if ps is not None:
                out.append(monitor.PeerState(self.cs.peer_name(p), p, current=bool(ps["current"]),
                                             active_ns=int(ps["active_ns"]), lag=int(ps["lag"])))
            else:
                out.append(monitor.PeerState(self.cs.peer_name(p), p))
        return out

    def _peer_states(self) -> list[monitor.PeerState]:
        return self.peer_states(self.group)

    def group_cluster_info(self, g: Any, desired: Any = None, assigned: Any = None, blocking: str = "") -> dict:
        """``desired``: the assignment's desired state; ``assigned``: the assignment's peers (those not yet
        members are listed ``pending``, as are members no longer assigned); ``blocking``: a consumer still
        moving (its stream's status)."""
        leader = g.leader
        lname = self.cs.peer_name(leader) if leader else ""
        cluster = self.cs.server.opts.cluster.name or ""
        kw: dict = {}
        reps = self.peer_states(g)
        if assigned is not None and g.is_leader:
            assigned = list(assigned)
            for ps in reps:
                ps.pending = ps.peer not in assigned
            reps += [monitor.PeerState(self.cs.peer_name(p), p, pending=True)
                     for p in assigned if p not in g.peers and p != g.id]
        if desired:
            status = None
            if assigned is not None and g.is_leader:
                status = monitor.desired_status(desired, assigned, g.peers,
                                                [g.id] + [ps.peer for ps in reps if ps.current and not ps.pending],
                                                self.cs.peer_name, blocking)
            kw["desired"] = monitor.desired_info(desired, self.cs.peer_name, status)
        # where its RAFT messages go (cluster_traffic, traffic.py); nats-server runs no RAFT node for a group of one
        # peer, and says nothing of its traffic then
        traffic = g.traffic_account() if len(g.peers) > 1 or desired else ""
        sys_acc = self.cs.server.system_account
        kw["system_account"] = bool(traffic) and sys_acc is not None and traffic == sys_acc.name
        kw["traffic_account"] = traffic
        return monitor.cluster_info(cluster, g.name, lname, g.leader_since_ns if g.is_leader else 0, reps, **kw)

    def _lazy_commits(self) -> bool:
        """(RaftGroup.lazy_commits) Nobody reads the followers' stores as they apply: no consumer (its leader may
        be a follower's server, delivering what that server applied), no direct get answered by followers."""
        cfg = self.stream.cfg
        return not (cfg.allow_direct or cfg.mirror_direct) and self.consumer_count() == 0

    def consumer_count(self) -> int:
        """The stream's consumers as the meta layer knows them (nats-server's stream info takes the count from
        the stream assignment: consumers whose groups run on other servers count too); 0 when unknown."""
        sa = self.cs.assignment(self.jsa.account.name, self.name)
        return len(sa.consumers) if sa is not None else 0

    def cluster_info(self) -> dict:
        sa = self.sa
        moving = ""
        if sa.group.desired is not None:
            known = self.cs.assignment(self.jsa.account.name, self.name)
            moving = next((cn for cn, ca in sorted(((known or sa).consumers or {}).items())
                           if ca.group.desired is not None), "")
        d = self.group_cluster_info(self.group, sa.group.desired, sa.group.peers, moving)
        if self.data_lost is not None:
            d["lost"] = dict(self.data_lost)
        if self.skipped is not None:
            d["skipped"] = dict(self.skipped)
        return d

    def leaderless(self) -> bool:
        return self.cs.group_leaderless(self.group, self.created_at)

    def catching_up(self) -> bool:
        """Applies are held, or the messages of a snapshot are being fetched from the leader."""
        return self.log.holding or (self._catchup is not None and not self._catchup.done())

    async def stop(self, delete: bool = False) -> None:
        if self.closed:
            return
        for name in list(self.creps):
            await self.remove_consumer(name, delete=delete)
        if self._leader_announced():
            self._leader_changed(False)
        self._direct(False)
        self.closed = True
        self.stop_damage_probes()
        if self._catchup is not None:
            self._catchup.cancel()
        self._idle_timer = cancelled(self._idle_timer)
        self._restoring = cancelled(self._restoring)
        await self.group.stop(delete=delete)
        if self.jsa.streams.get(self.name) is self.stream:
            del self.jsa.streams[self.name]
        self.stream.stop(delete=delete)
        if delete:
            shutil.rmtree(self.jsa.stream_dir(self.name), ignore_errors=True)

    def _leader_announced(self) -> bool:
        return self.leader
