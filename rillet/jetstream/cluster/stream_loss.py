"""What a stream replica does about lost and damaged data (``StreamLossMixin``, a base of ``StreamReplica`` in
streams.py): the sequences a lazily synced leader reserves before it acknowledges, and its followers ahead of
what they applied (``_reserve``, saved with the group's hard state, so that a majority's unclean stop never hands
a sequence out twice), the loss reports of
committed entries gone from every member and of a majority's unsynced tail (``_data_lost``, ``_tail_lost``,
proposed as a ``LOST`` entry and applied by every replica), and damaged records of the store fetched again from
another replica (``refetch_damaged``), or reported lost when no replica holds a healthy copy (``_probe_damage``:
the other replicas are asked first)."""
from __future__ import annotations

import asyncio
import json
import os
import time
from typing import TYPE_CHECKING, Any

import msgspec

from rillet.gocompat.gotime import format_time
from rillet.jetstream import damagereport
from rillet.jetstream.cluster import lossreport, monitor
from rillet.jetstream.cluster.consumers import send_advisory
from rillet.jetstream.cluster.log import LOST
from rillet.jetstream.log import Entry, NotLeader
from rillet.jetstream.store.base import ErrStoreClosed, ErrStoreCorrupt, StoreError

if TYPE_CHECKING:
    from rillet.jetstream.cluster.clustered import ClusteredStreams

RESERVE_SEQS = 8192  # (lazy sync) the most sequences a stream leader reserves in its saved hard state at a time
RESERVE_MIN = 16  # the fewest (the first reservation after an idle second; then sized to the rate: _reserve)
RESERVE_SPAN = 1.0  # seconds of publishing, at the rate of the last reservation's, one reservation is sized for
REFETCH_HANDOVER = 2.0  # seconds between a leader's handovers to fetch damaged records again (refetch_damaged)
RESERVE_IDLE = 1.0  # seconds without an applied entry after which a leader releases what it reserved
PROBE_WAIT = 1.0  # seconds a replica with damaged records waits for the others' answers about their copies
PROBE_MAX = 256  # damaged sequences asked about in one probe (the first ones)

_enc = msgspec.msgpack.Encoder()


def tally_probe(others: set, answers: dict) -> tuple[dict, dict, bool]:
    """The other replicas' answers about their copies of damaged records (``_on_damage_probe``): sequence -> a
    peer holding a healthy copy; sequence -> a peer that deleted it (it applied a deletion, a purge or a limit
    this replica has not yet: legitimately gone, not lost); and whether the answers leave anything unknown (a
    replica did not answer, or is behind)."""
    healthy: dict[int, str] = {}
    deleted: dict[int, str] = {}
    unknown = len([p for p in answers if p in others]) < len(others)
    for peer, d in answers.items():
        if peer not in others:
            continue
        for s in d.get("healthy") or ():
            healthy.setdefault(s, peer)
        for s in d.get("gone") or ():
            deleted.setdefault(s, peer)
        if d.get("behind"):
            unknown = True
    return healthy, deleted, unknown


def gone_applied(others: set, answers: dict) -> dict[int, int]:
    """Of the other replicas' answers, sequence -> the lowest applied index of a replica that said it deleted it
    (``gone``): that replica applied the deletion at or below that index, so a replica that has applied as far
    has applied it too (or its own record of it was lost: ``refetch_damaged`` removes the record then)."""
    out: dict[int, int] = {}
    for peer, d in answers.items():
        if peer not in others:
            continue
        try:
            at = int(d["applied"])
        except (KeyError, TypeError, ValueError):  # (an answer without it: waits for the deletion as before)
            continue
        for s in d.get("gone") or ():
            if s not in out or at < out[s]:
                out[s] = at
    return out


def lost_everywhere_of(seqs: tuple, damaged: Any, healthy: dict, deleted: dict, unknown: bool) -> list[int]:
    """Of the sequences asked about (``seqs``), those still damaged here that are lost everywhere: every replica
    answered, none holds a healthy copy, and none deleted it (a deletion this replica has not applied yet: the
    record goes when it does, nothing is lost)."""
    if unknown:
        return []
    return [s for s in seqs if s in damaged and s not in healthy and s not in deleted]


class StreamLossMixin:
    """Reservations, loss reports and refetching of damaged records for ``StreamReplica`` (its attributes:
    ``stream``, ``group``, ``log``, ``cs``, ``jsa``, the ``_reserved*``/``_floor``/``data_lost`` state set in its
    ``__init__``)."""

    cs: ClusteredStreams
    # (the rest of StreamReplica's state this mixin reads and sets)
    stream: Any
    group: Any
    log: Any
    jsa: Any
    closed: bool
    leader: bool
    replay_seq: int
    refetch: int
    creps: dict
    data_lost: Any
    skipped: Any
    _floor: int
    _reserved: int
    _reserved_mark: int
    _idle_timer: Any
    _lost_proposing: bool
    _lost_advised: bool
    _refetch_due: bool
    _refetch_handover: float
    _wake_from: int
    _reserve_base = 0  # (_reserve) the sequence the last reservation started from
    _reserved_at = 0.0  # (_reserve) when it was made
    # (refetch_damaged) what the other replicas said of their copies of this store's damaged records
    _everywhere: frozenset | None = None  # damaged sequences no replica holds healthy (lost_everywhere)
    _probe_sub: Any = None  # (every replica) the subscription answering the others' probes
    _probe_task: Any = None
    _probe_at = -1e9  # when the last probe's answers were in
    _probe_seqs: tuple = ()  # what it asked about
    _probe_healthy: dict | None = None  # sequence -> a peer holding a healthy copy
    _probe_deleted: dict | None = None  # sequence -> a peer that deleted it (this replica has yet to)
    _probe_unknown = False  # not every replica answered (or one was behind): nothing concluded
    _open_damage_due = False  # (_open_damage) the cut waits for the group's snapshot (restore at its start)

    if TYPE_CHECKING:
        name: str

        def catching_up(self) -> bool: ...
        def restore(self, data: bytes) -> None: ...
        def _store_state(self) -> dict: ...
        def _feed(self) -> None: ...

    @staticmethod
    def _drop_damaged(store: Any, cfg: Any, jsa: Any, js: Any, keep: frozenset | None = None) -> int:
        """A replica whose store found damaged records on opening (a bit flip, a torn write: records failing their
        checksum, which the store reports lost) does not serve them as holes: the store is cut back to the last
        sequence before the first damaged one and the rest comes again as after any restart, from this member's
        log (its entries past the cut are applied again) or, for what its log holds only as a snapshot, from the
        stream leader through the catch-up (``restore``/``_catch_up``). Damaged records no replica holds a
        healthy copy of (``keep``; read from the stream's directory when not given: ``lost_everywhere``) stay
        where they are, reported lost. Returns how many sequences were cut."""
        if cfg.storage == "memory":
            return 0
        lost = store.state().lost
        if lost:
            if keep is None:
                keep = StreamLossMixin._load_everywhere(jsa, cfg, js)
            lost = [s for s in lost if s not in keep]
        if not lost:
            return 0
        last = store.last_seq
        cut = min(lost) - 1
        js.log.warn(f"JetStream cluster stream '{jsa.account.name} > {cfg.name}': {len(lost)} damaged message(s) "
                    f"in the store (first {min(lost)}): dropping {cut + 1}..{last} to fetch them again from the "
                    f"log and the other replicas")
        store.truncate(cut)
        return last - cut

    def _open_damage(self) -> None:
        """(the replica's construction) Damaged records the store found when it opened, not known to be damaged
        on every replica: with no snapshot in the group's log, the log holds every entry: the store is cut before
        the first damaged one at once and the entries past the cut are applied again from the log
        (``_drop_damaged``). With a snapshot, that is decided when the group starts (``_open_damage_cut``)."""
        if not self.refetches_damage():
            return
        everywhere = self.lost_everywhere
        if not any(s not in everywhere for s in self.stream.store.state().lost):
            return
        if os.path.exists(os.path.join(self.group.dir, "snapshot")):
            self._open_damage_due = True
            return
        st = self.stream
        self.refetch = self._drop_damaged(st.store, st.cfg, self.jsa, self.cs.js, everywhere)

    def _open_damage_cut(self, snap: dict) -> None:
        """(``restore`` of the group's snapshot at its start) The log holds the entries past the snapshot: when
        the first damaged record lies past it, the store is cut and they are applied again. Otherwise the log
        cannot give it again: the store is kept as it is (damaged records and all: nothing is cut that no
        replica may hold) and, once the group runs, the other replicas are asked (``_open_damage_started``,
        ``refetch_damaged``): fetched again from a healthy copy, or reported lost when there is none."""
        self._open_damage_due = False
        st = self.stream
        everywhere = self.lost_everywhere
        lost = [s for s in st.store.state().lost if s not in everywhere]
        if lost and lost[0] > snap["last"]:
            self.refetch = self._drop_damaged(st.store, st.cfg, self.jsa, self.cs.js, everywhere)
        elif lost:
            self.cs.js.log.warn(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': "
                                f"{len(lost)} damaged message(s) in the store (first {lost[0]}) below the "
                                f"group's snapshot: asking the other replicas for a healthy copy")

    def _open_damage_started(self) -> None:
        """(the group started) Damaged records kept at open (``_open_damage_cut``): the other replicas are
        asked about them once they can hear (``refetch_damaged``, tried again until every one answered)."""
        everywhere = self.lost_everywhere
        if not self.closed and any(s not in everywhere for s in self.stream.store.state().lost):
            self.cs.js.loop.call_later(0.5, self._refetch_again)

    def refetches_damage(self, seq: int = 0) -> bool:
        """(StreamReplication) Damaged records of this replica's store are fetched again from another replica
        (``seq``, when given: that one is, it is not known to be damaged on every replica)."""
        return (len(self.group.peers) > 1 and self.stream.cfg.storage != "memory"
                and not (seq and seq in self.lost_everywhere))

    @property
    def lost_everywhere(self) -> frozenset:
        """The damaged sequences of this store that no replica holds a healthy copy of (``_probe_damage``): kept
        damaged in place and reported lost as an R1 stream's are, never fetched again (kept in the stream's
        directory: damagereport.EVERYWHERE_FILE)."""
        if self._everywhere is None:
            self._everywhere = self._load_everywhere(self.jsa, self.stream.cfg, self.cs.js)
        return self._everywhere

    @staticmethod
    def _load_everywhere(jsa: Any, cfg: Any, js: Any) -> frozenset:
        try:
            d = damagereport.load(jsa.stream_dir(cfg.name), damagereport.EVERYWHERE_FILE)
        except (OSError, ValueError) as e:  # (fetched again, as if never concluded: the replicas are asked again)
            js.log.error(f"JetStream cluster stream '{jsa.account.name} > {cfg.name}': {e}")
            return frozenset()
        return frozenset(d["reported"]) if d is not None else frozenset()

    def refetch_damaged(self) -> bool:
        """(StreamReplication) The store found damaged records while running (a read failed the checksum). The
        other replicas are asked first what their copies are (``_probe_damage``); records none of them holds
        healthy, every one having answered, are lost everywhere: kept damaged in place, never fetched again,
        reported as an R1 stream's are (False: the stream reports them). The rest are fetched again as damage
        found when the store opens is (``_drop_damaged``): the store is cut back to the sequence before the
        first damaged one, and the rest comes from the stream leader through the catch-up (``restore`` of the
        store's state as it was: the catch-up, then its deletions again), applies held meanwhile. A leader
        hands its leadership over first (it cannot cut its store under publishes; to a replica that answered
        with a healthy copy when one did), then fetches as a follower. False when there is no other replica
        (the stream reports the loss)."""
        if not self.refetches_damage():
            return False
        store = self.stream.store
        everywhere = self.lost_everywhere
        lost = [s for s in store.state().lost if s not in everywhere]
        if not lost:  # (none damaged, or every one is damaged on every replica: the stream reports those)
            return not store.state().lost
        if self.closed or self._refetch_due or self._probe_task is not None:
            return True
        loop = self.cs.js.loop
        now = loop.time()
        if lost[0] not in self._probe_seqs or now - self._probe_at >= REFETCH_HANDOVER:
            self._probe_task = loop.create_task(self._probe_damage(tuple(lost[:PROBE_MAX])))
            return True
        healthy = self._probe_healthy or {}
        deleted = self._probe_deleted or {}
        gone = lost_everywhere_of(self._probe_seqs, set(store.state().lost), healthy, deleted, self._probe_unknown)
        if gone:
            self._lost_everywhere(gone)
            lost = [s for s in lost if s not in self.lost_everywhere]
            if not lost:
                return False
        if lost[0] in deleted and self._deletions_lost(lost, deleted):
            lost = [s for s in store.state().lost if s not in self.lost_everywhere]
            if not lost:
                return not store.state().lost
        if lost[0] not in healthy:
            # (no replica said it holds a healthy copy, and not every one answered, or one deleted it: this
            # replica's deletion is on its way. Nothing is cut, handed over or reported, they are asked again)
            if lost[0] in deleted and lost[0] not in self._deleted_said:
                self._deleted_said = self._deleted_said | {lost[0]}
                self.cs.js.log.warn(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': damaged "
                                    f"message {lost[0]} was deleted on {deleted[lost[0]]}: not lost, waiting for "
                                    f"this replica to apply the deletion")
            self._refetch_due = True
            loop.call_later(REFETCH_HANDOVER, self._refetch_again)
            return True
        if self.leader or self.group.is_leader or self.catching_up():
            if (self.leader or self.group.is_leader) and now - self._refetch_handover >= REFETCH_HANDOVER:
                to = healthy.get(lost[0], "")
                if not self._refetch_handover:  # (said once; the handover is tried again while this leads)
                    self.cs.js.log.warn(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': "
                                        f"damaged message(s) found in the store (first {lost[0]}): "
                                        f"stepping down to fetch them again from the other replicas")
                self._refetch_handover = now
                try:
                    self.group.stepdown(to) if to else self.group.stepdown()
                except (NotLeader, ValueError):  # (nobody to hand over to yet: tried again below)
                    pass
            self._refetch_due = True
            loop.call_later(0.5, self._refetch_again)
            return True
        self._refetch_handover = 0.0
        st = self.stream
        state = self._store_state()
        fx = len(st._fx)
        cut = self._drop_damaged(store, st.cfg, self.jsa, self.cs.js, everywhere)
        del st._fx[fx:]  # (cut to be fetched again: not removals the consumers act on)
        self.refetch += cut
        self._wake_from = store.last_seq + 1
        self.restore(_enc.encode(state))
        return True

    def _deletions_lost(self, lost: list[int], deleted: dict) -> bool:
        """Damaged records another replica deleted (``deleted``), this replica having applied its log as far as
        that replica had when it said so (``_gone_at``): the deletion was applied here too and its record was
        lost with the damage (a torn or flipped state log, an erased record whose tombstone went): waiting for it
        would wait forever. The records are removed here now, as the deletion did elsewhere. True when any was."""
        node = self.group.node
        if node is None or self.catching_up():
            return False
        applied = node.applied
        gone = [s for s in lost if s in deleted and s in self._gone_at and self._gone_at[s] <= applied]
        if not gone:
            return False
        store = self.stream.store
        for s in gone:
            store.remove_msg(s)
        self._gone_at = {s: i for s, i in self._gone_at.items() if s not in gone}  # (never the class's dict)
        self.cs.js.log.warn(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': {len(gone)} "
                            f"damaged message(s) (first {gone[0]}) deleted on another replica, whose deletion this "
                            f"replica applied and lost the record of: removed here")
        for cr in self.creps.values():  # (a consumer waiting for one of them goes on past it)
            c = cr.c
            if c.engine and not c.closed:
                c.kick()
        return True

    _gone_at: dict = {}  # (refetch_damaged) sequence -> the applied index of the replica that first said it deleted it

    def _refetch_again(self) -> None:
        self._refetch_due = False
        if not self.closed:
            self.stream._store_damaged()  # (refetch_damaged, or the report once every copy is known damaged)

    # ---- asking the other replicas about their copies of damaged records -------------------------------

    def _probe_subject(self) -> str:
        return f"$JSC.DMG.{self.group.name}"

    def listen_damage_probes(self) -> None:
        """(every replica of a replicated file stream, from its start) Answer the other replicas' questions
        about this store's copies of records damaged in theirs (``_on_damage_probe``)."""
        if self._probe_sub is None and self.refetches_damage():
            self._probe_sub = self.jsa.ic.subscribe(self._probe_subject(), self._on_damage_probe)

    def stop_damage_probes(self) -> None:
        if self._probe_sub is not None:
            self.jsa.ic.remove_sub(self._probe_sub)
            self._probe_sub = None
        if self._probe_task is not None:
            self._probe_task.cancel()
            self._probe_task = None

    def _on_damage_probe(self, sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int,
                         msg: bytes) -> None:
        """Another replica asks which of the sequences it names this store holds: ``healthy`` (read, its
        checksum holds), ``damaged`` (found so: the read marks it, and this replica asks the others in turn),
        ``gone`` (deleted here, or before the first sequence) or ``behind`` (not stored here yet: this replica
        is behind or catching up, it may still get it)."""
        if not reply or self.closed:
            return
        try:
            req = json.loads(msg[hdr:] if hdr >= 0 else msg)
            asker = str(req["peer"])
            seqs = [int(s) for s in req["seqs"]][:PROBE_MAX]
        except (ValueError, KeyError, TypeError):
            return
        if asker == self.group.id:
            return
        store = self.stream.store
        lost = set(store.state().lost)
        behind = self.catching_up()
        out: dict[str, list[int]] = {"healthy": [], "damaged": [], "gone": [], "behind": []}
        for s in seqs:
            if s in lost:
                out["damaged"].append(s)
            elif behind or s > store.last_seq:
                out["behind"].append(s)
            else:
                try:
                    m = store.load_msg(s)
                except ErrStoreClosed:
                    return
                except ErrStoreCorrupt:
                    out["damaged"].append(s)
                    continue
                except (StoreError, OSError):  # (cannot tell: counts as not answered for this one)
                    out["behind"].append(s)
                    continue
                out["healthy" if m is not None else "gone"].append(s)
        node = self.group.node
        applied = node.applied if node is not None else 0
        self.jsa.ic.publish(reply, None, json.dumps({"peer": self.group.id, "applied": applied, **out}).encode())

    async def _probe_damage(self, seqs: tuple) -> None:
        """Ask the other replicas about their copies of ``seqs`` (damaged here) and wait for every answer, at
        most PROBE_WAIT seconds; then ``refetch_damaged`` acts on them."""
        ic = self.jsa.ic
        me = self.group.id
        others = {p for p in self.group.peers if p != me}
        answers: dict[str, dict] = {}
        all_in = asyncio.Event()

        def on_answer(sub: Any, client: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
            try:
                d = json.loads(msg[hdr:] if hdr >= 0 else msg)
                peer = d["peer"]
            except (ValueError, KeyError, TypeError):
                return
            if peer in others:
                answers[peer] = d
                if len(answers) == len(others):
                    all_in.set()
        inbox = f"_INBOX.JSD.{os.urandom(8).hex()}"
        sub = ic.subscribe(inbox, on_answer)
        try:
            ic.publish(self._probe_subject().encode(), inbox.encode(),
                       json.dumps({"peer": me, "seqs": list(seqs)}).encode())
            try:
                await asyncio.wait_for(all_in.wait(), PROBE_WAIT)
            except asyncio.TimeoutError:
                pass
        finally:
            ic.remove_sub(sub)
        healthy, deleted, unknown = tally_probe(others, answers)
        at = dict(self._gone_at)  # (the first answer's index is kept: a later one may be higher, never needed)
        for s, i in gone_applied(others, answers).items():
            at.setdefault(s, i)
        asked = set(seqs)  # (the ones no longer asked about were resolved: dropped)
        self._gone_at = {s: i for s, i in at.items() if s in asked}
        self._probe_seqs = seqs
        self._probe_healthy = healthy
        self._probe_deleted = deleted
        self._probe_unknown = unknown
        self._probe_at = self.cs.js.loop.time()
        self._probe_task = None
        if unknown and seqs[0] not in healthy and not self._probe_said:
            self._probe_said = True
            missing = len(others) - len(answers)
            self.cs.js.log.warn(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': damaged "
                                f"message(s) (first {seqs[0]}): "
                                + (f"{missing} replica(s) did not answer" if missing else "a replica is behind")
                                + " about its copy: nothing is cut or handed over until a healthy copy is found "
                                  "or every replica says it has none (asked again every "
                                + f"{REFETCH_HANDOVER:g} s)")
        if not self.closed:
            self.stream._store_damaged()

    _probe_said = False  # (the inconclusive probe's warning: once)
    _deleted_said: frozenset = frozenset()  # (refetch_damaged) damaged sequences said deleted elsewhere (once each)

    def _lost_everywhere(self, seqs: list[int]) -> None:
        """Every other replica answered and none holds a healthy copy of ``seqs`` (damaged here): they are lost
        everywhere. Kept (the stream's directory) so that neither a later read nor a restart fetches them again;
        consumers waiting for them go on past them; the stream reports them as an R1 stream does (``state.lost``,
        an error in the log, the ``STREAM.DATA_LOST`` advisory from the leader)."""
        new = frozenset(seqs) | self.lost_everywhere
        self._everywhere = new
        self.cs.js.log.error(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': {len(seqs)} "
                             f"damaged message(s) (first {min(seqs)}) have no healthy copy on any replica (every "
                             f"replica answered): not fetched again, reported lost")
        if self.stream.cfg.storage != "memory":
            try:
                damagereport.save(self.jsa.stream_dir(self.name), new, format_time(time.time_ns()),
                                  self.cs.server.name, damagereport.EVERYWHERE_FILE)
            except OSError as e:
                self.cs.js.log.error(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': keeping "
                                     f"the damaged sequences lost everywhere failed: {e}")
        for cr in self.creps.values():  # (a consumer waiting for one of them goes on past it)
            c = cr.c
            if c.engine and not c.closed:
                c.kick()

    def _mark(self) -> int:
        """(RaftGroup.mark) The highest sequence this replica stored, (leader) proposed or reserved, saved with the
        group's commit index."""
        st = self.stream
        return max(st.store.last_seq, st.proposed_last_seq(), self.replay_seq, self._reserved_mark, self._floor)

    def _reserve(self) -> None:
        """The applied entries reached the reserved sequences: reserve more and save them with the hard state
        (fsynced) before this entry's PubAck leaves (a leader) or before the next entry is applied (a follower).
        Not needed when every entry is fsynced before it is acknowledged (sync_interval always), nor for a memory
        stream (nothing survives a stop).

        A follower reserves too: the leader's saved mark is the only durable record of how far sequences were
        acknowledged, so when a majority including the leader lost its unsynced tail and the leader does not come
        back (its disk gone, removed from the group), the followers' marks alone must cover what it
        acknowledged. A follower applies an entry a moment after the leader committed it (its PubAck), so its
        reservation, at least RESERVE_MIN sequences past what it applied, covers what was acknowledged unless
        the follower lags the leader by more than that.

        How many: what a majority's power cut reports as possibly acknowledged (and skips) is the range up to
        the saved mark, so a reservation is kept to about RESERVE_SPAN seconds of publishing at the rate the
        last one was used up (a power of two from RESERVE_MIN to RESERVE_SEQS): RESERVE_MIN after an idle second
        (the reservation was released), growing under load to one fsync per RESERVE_SPAN or per RESERVE_SEQS
        sequences. A cut right after a few publishes reports those few sequences and up to RESERVE_MIN more,
        not RESERVE_SEQS; every sequence acknowledged is still under the saved mark."""
        if self.cs.js.sync_always or self.group.memory:
            self._reserved = 1 << 62
            return
        now = self.cs.js.loop.time()
        size = RESERVE_MIN
        if self._reserved_mark:  # (the reservation in force was used up: at what rate)
            elapsed = now - self._reserved_at
            used = self.replay_seq - self._reserve_base
            want = used * RESERVE_SPAN / elapsed if elapsed > 0 else RESERVE_SEQS
            while size < want and size < RESERVE_SEQS:
                size *= 2
        self._reserve_base = self.replay_seq
        self._reserved_at = now
        self._reserved = self._reserved_mark = self.replay_seq + size
        self.group.save_mark()
        if self._idle_timer is None:
            self._idle_timer = self.cs.js.loop.call_later(RESERVE_IDLE, self._reserve_idle, self.replay_seq)

    def _reserve_idle(self, seen: int) -> None:
        """Nothing applied for RESERVE_IDLE seconds and (a leader) nothing in flight: the reservation is released
        (the saved mark goes down to the highest sequence used), so that a majority's unclean stop while the
        stream is idle skips, and reports as possibly lost, no sequence that was never used. The next applied
        entry reserves again, saved before its PubAck leaves."""
        self._idle_timer = None
        if self.closed or not self._reserved_mark:
            return
        if self.replay_seq != seen or (self.leader and self.stream.proposed_last_seq() > self.replay_seq):
            self._idle_timer = self.cs.js.loop.call_later(RESERVE_IDLE, self._reserve_idle, self.replay_seq)
            return
        self._release_reservation()

    def _release_reservation(self) -> None:
        if self._reserved_mark and not self.cs.js.sync_always:
            self._reserved = self._reserved_mark = 0
            self.group.lower_mark()

    def _mark_floor(self, mark: int) -> None:
        """(RaftGroup.on_mark_floor) A majority of the members came back from an unclean stop: sequences up to
        ``mark`` may have been acknowledged, whether their entries survived or not. The first leader goes on past
        them (a LOST entry without a report when no loss was found)."""
        if mark <= self._floor:
            return
        self._floor = mark
        if self.log.is_leader and self.stream.store.last_seq < mark:
            self._propose_lost(feed=False)

    def _data_lost(self, first: int, last: int) -> None:
        """(RaftGroup.on_data_lost) Committed entries of the stream's group are gone from every member (a majority
        lost data that was not yet synced): never silent. Logged, the ``stream_data_lost`` advisory (Rillet's own,
        in nats-server's advisory style), ``cluster.lost`` in stream info and an unhealthy /healthz for the
        stream; the report is kept on disk (lossreport) and the leader proposes it (LOST) so that every replica
        records it and skips the sequences the lost entries may have used (none is given again)."""
        now = time.time_ns()
        srv = self.cs.server
        node = self.group.node
        mark = max(node.lost_mark if node is not None else 0, self.stream.store.last_seq)
        found = {"raft_first": first, "raft_last": last, "detected": format_time(now), "server": srv.name,
                 "seq_mark": mark}
        is_open = node is not None and node.lost_open
        if is_open:
            found["open_end"] = True
        self.data_lost = lossreport.merge(self.data_lost, found)
        self._save_lost()
        if is_open:
            self.cs.js.log.error(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}' lost committed "
                                 f"RAFT entries from {first} on: fewer replicas than a quorum kept their logs (wiped "
                                 f"stores), so acknowledged messages past sequence {mark} may be missing; no leader is "
                                 f"elected, so that no sequence is given again (nothing resumes it on its own: accepting "
                                 f"the loss is an operator's decision, a step-down request: nats stream cluster "
                                 f"step-down {self.name})")
        else:
            self.cs.js.log.error(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}' lost "
                                 f"{last - first + 1} committed RAFT entries ({first}..{last}): acknowledged messages "
                                 f"or operations may be missing (sequences up to {mark} are not given again)")
        self._lost_advisory()
        if not is_open and self.log.is_leader and lossreport.pending(self.data_lost):
            self._propose_lost(feed=False)

    def _tail_lost(self, first: int, last: int) -> None:
        """(LOST without a loss report, every replica) A majority came back from an unclean stop and the stream
        goes on past the highest sequence a member had saved (its mark): sequences ``first``..``last`` may have
        been acknowledged in the unsynced tail of the log, past any commit index that was saved (nothing says
        they were not). Never silent: reported as a loss (``lossreport``: ``unsynced_tail``) as committed
        entries found missing are: an error in the log, stream info's ``cluster.lost``, /healthz, the
        ``STREAM.DATA_LOST`` advisory (from the leader; again from each new leader)."""
        found = {"raft_first": 1, "raft_last": 0, "unsynced_tail": True, "detected": format_time(time.time_ns()),
                 "server": self.cs.server.name, "seq_mark": last, "seq_first": first, "seq_last": last}
        self.data_lost = lossreport.merge(self.data_lost, found)
        self._save_lost()
        self.cs.js.log.error(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': sequences "
                             f"{first}..{last} skipped: a majority of the replicas came back from an unclean stop "
                             f"and lost the unsynced tail of the log, where acknowledged messages up to {last} "
                             f"may have been (they are not given again)")
        if self.leader:
            self._lost_advisory()

    def _save_lost(self) -> None:
        lossreport.save_for(self.group, self.data_lost, self.cs.js.log,
                            f"stream '{self.jsa.account.name} > {self.name}'")

    def _lost_advisory(self) -> None:
        self._lost_advised = True
        now = time.time_ns()
        info = dict(self.data_lost or {})

        def build(acc: str) -> tuple[str, dict]:
            d = monitor._adv("stream_data_lost", now, acc, self.cs.js.domain or "",
                             {"stream": self.name, "raft_group": self.group.name, "lost": info})
            return f"{monitor.ADV}.STREAM.DATA_LOST.{self.name}", d
        send_advisory(self.cs, self.jsa, build)

    def _propose_lost(self, feed: bool) -> None:
        """(leader) Propose the loss report (LOST); with ``feed`` the stream takes publishes once it applied. A
        wider loss found while one is in flight is proposed when it has applied (the feed waits for that)."""
        if self._lost_proposing:
            self._lost_again = True
            self._lost_feed = self._lost_feed or feed
            return
        self._lost_proposing = True

        def done(_: Any, res: Any, err: BaseException | None) -> None:
            self._lost_proposing = False
            again, self._lost_again = self._lost_again, False
            wants_feed = feed or self._lost_feed
            if err is not None and not isinstance(err, NotLeader):
                self.cs.js.log.error(f"JetStream cluster: stream '{self.jsa.account.name} > {self.name}': "
                                     f"proposing the loss report failed: {err}")
            if again and err is None and not self.closed and self.log.is_leader:
                self._lost_feed = False
                self._propose_lost(wants_feed)  # (what was found meanwhile)
                return
            self._lost_feed = False
            if wants_feed and self.leader and not self.closed and self.log.is_leader:
                self._feed()
        if lossreport.pending(self.data_lost):
            report = dict(self.data_lost)
            report["seq_mark"] = max(report.get("seq_mark", 0), self._floor)
        else:
            report = {"seq_mark": self._floor}  # (no loss found: only the sequences that may have been used)
        self.log.propose(Entry(LOST, (_enc.encode(report),)), done)

    def _apply_lost(self, report: dict) -> None:
        """(LOST, every replica) Record the report and skip the sequences up to its mark: a message stored after
        this entry never takes a sequence that may have been acknowledged before the loss. A replica to which the
        lost RAFT range is news (its own recovery could not see it) logs the loss as the finders do."""
        store = self.stream.store
        mark = int(report.get("seq_mark", 0))
        last = store.last_seq
        self._floor = max(self._floor, mark)
        if "raft_first" not in report:
            if mark > last:
                store.skip_msgs(last + 1, mark - last)
                self.replay_seq = max(self.replay_seq, mark)
                self.skipped = {"seq_first": last + 1, "seq_last": mark}
                self._tail_lost(last + 1, mark)
            return
        before = self.data_lost
        applied = {"raft_first": report["raft_first"], "raft_last": report["raft_last"]}
        if mark > last or before is None or before.get("seq_last", -1) < mark:
            applied.update(seq_first=last + 1, seq_last=max(mark, last))  # (else: a replay of the entry)
        if mark > last:
            store.skip_msgs(last + 1, mark - last)
            self.replay_seq = max(self.replay_seq, mark)
        rep = lossreport.merge(before, dict(report))
        rep = lossreport.merge(rep, applied)
        if "seq_first" in (before or {}):
            rep["seq_first"] = before["seq_first"]  # (a replay of the entry: the range it skipped the first time)
            rep["msgs"] = max(0, rep["seq_last"] - rep["seq_first"] + 1)
        if rep != before:
            self.data_lost = rep
            self._save_lost()
            first, lastr = int(report["raft_first"]), int(report["raft_last"])
            if lastr >= first and (before is None or before["raft_last"] < before["raft_first"]
                                   or not before["raft_first"] <= first <= lastr <= before["raft_last"]):
                # (news to this replica: its own recovery found nothing, e.g. it came back after the others had
                # recovered, or knew no commit index past its log. Never silent here either)
                self.cs.js.log.error(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}' lost "
                                     f"{lastr - first + 1} committed RAFT entries ({first}..{lastr}), as "
                                     f"{report.get('server') or 'another member'} found: acknowledged messages or "
                                     f"operations may be missing (sequences up to {mark} are not given again)")
            if mark > last:
                self.cs.js.log.warn(f"JetStream cluster stream '{self.jsa.account.name} > {self.name}': sequences "
                                    f"{last + 1}..{mark} skipped (lost with committed entries)")
