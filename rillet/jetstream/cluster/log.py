"""The log seam (rillet.jetstream.log) over a RAFT group: ``RaftLog``.

A stream's entries (and, through ``sublog(name)``, its consumers' entries) are encoded, proposed to the
stream's ``RaftGroup`` (rillet.jetstream.cluster.group) and applied on every replica when the group
commits them. The proposer keeps each entry's completion keyed by the log index it got and the encoded
bytes it proposed; when the group applies that index, the completion runs if the applied bytes are the
proposed ones (the entry committed), else it fails with ``NotLeader`` (another leader's entry took the
index) and the applied entry is applied like any follower's. The group's applies carry no term, so the
bytes decide: a MSG entry carries the leader's timestamp in ns, so a different entry never has the
same bytes, and when two entries do have the same bytes, applying one is applying the other.
Losing leadership fails every pending completion with NotLeader (in log order), then tells the owner
(``on_leader_change(False)``) and the sub-logs' owners.

Encoding (compact binary, ``op`` and ``args``, never ``ctx``)::

    byte 0        the entry op (rillet.jetstream.log.Entry: 1..7 stream ops, 20..29 consumer ops; RESTORED)
    stream op     msgpack array of the args; UPDATE: [stream config as its Go JSON, StoreConfig map, ts]
    consumer op   msgpack array [target consumer name, args]
    MULTI (48)    msgpack array of such entries' bytes: what the log proposed in one loop pass, one RAFT entry
                  (the group takes a pass's proposals right before its Ready); applied one by one, each matched
                  to its completion by (index, place); a pass's entries cost one log entry's RAFT work. Only
                  when every other member's route INFO lists 48 in ``rillet_raft_ops`` (RaftGroup.members_decode;
                  builds before it cannot decode it): otherwise one RAFT entry each, as before

Sub-logs: v1 replicates a stream's consumers through the stream's own group (documented choice; the
consumer leader is then always the stream leader). ``sublog(name)`` returns a log with the same seam
interface whose entries carry ``name`` and are applied to its own ``apply``.

Recovery and catch-up belong to the owner (rillet.jetstream.cluster.streams); ``hold()``/``release()``
let it queue the group's applies while it fetches messages a snapshot names (applied in order after).
"""
from __future__ import annotations

import json
from collections import deque
from typing import Any, Callable

import msgspec

from rillet.jetstream.fastbatch import FastMsg
from rillet.jetstream.log import Completion, Entry, LeadershipLost, NotLeader

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()

STREAM_OPS = frozenset((Entry.MSG, Entry.DELETE, Entry.PURGE, Entry.UPDATE, Entry.BATCH, Entry.MIRROR,
                        Entry.EXPIRE))
# A replicated stream's own op (no single-server counterpart): (snapshot,), the stream leader's store after a
# STREAM.RESTORE in its snapshot form (streams.StreamReplica.snapshot); each replica catches up to it.
RESTORED = 40
# A fast batch message (rillet.jetstream.fastbatch): a MSG entry with its reply subject, so that every replica
# knows the batch (it is decoded as a MSG entry whose ``ctx`` is a ``FastNote``).
FAST_MSG = 41
# (snapshot,): the leader's store in its snapshot form, proposed before the first membership change after the
# group ran solo (entries applied without the log, see RaftLog.solo): a replica catches up to it as to RESTORED.
SYNCED = 42
# (report,): a majority of the group lost committed entries (rillet.jetstream.cluster.lossreport, msgpack): each
# replica records the report and skips the stream's sequences to the report's ``seq_mark``
LOST = 43
CLUSTER_OPS = frozenset((RESTORED, FAST_MSG, SYNCED, LOST))


# (several entries, each as encode_entry gives it): what one RaftLog proposed in one pass, one RAFT entry; each is
# applied in turn as if it were alone (RaftLog._flush). Not in CLUSTER_OPS: decode_entry never sees it.
MULTI = 48
MULTI_MAX_ENTRIES = 1024  # a pass's entries past these go on in another RAFT entry
# Not an entry op of its own: a consumer's C_DELIVERED whose first arg is a list of stream sequences (a run of new
# messages delivered as dseq, dseq + 1, ...: ConsumerStateMachine._apply_run), which builds before it cannot apply.
# A replicated consumer's leader proposes one only when every member lists it in ``rillet_raft_ops``.
DELIVERED_RUNS = 49
# Not an entry op of its own: a LOST entry in a consumer's group (consumer_loss.py), which builds before it cannot
# apply. A consumer leader proposes one only when every member lists it in ``rillet_raft_ops``.
CONSUMER_LOST = 50
# Not an entry op of its own: a consumer's C_WAITING entry (the reply subjects of the pull requests waiting at its
# leader, consumer_pulls.py), which builds before it cannot decode. Proposed only when every member lists it.
PENDING_PULLS = 51
MULTI_MAX_BYTES = 1 << 20
_dec_multi = msgspec.msgpack.Decoder(list[bytes])


class FastNote:
    """The ``ctx`` of a decoded FAST_MSG entry (a replica's, without a completion): the message's reply."""

    __slots__ = ("reply",)

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
CONSUMER_OPS = frozenset((Entry.C_START, Entry.C_DELIVERED, Entry.C_UNDELIVERED, Entry.C_ACK, Entry.C_NAK,
                          Entry.C_DUE, Entry.C_GONE, Entry.C_MAXDELIV, Entry.C_PURGED, Entry.C_DROP,
                          Entry.C_RESET, Entry.C_WAITING))


class EntryDecodeError(ValueError):
    pass


def encode_entry(entry: Entry, target: str = "") -> bytes:
    """``entry`` as bytes (``target``: the consumer name for consumer ops)."""
    op = entry.op
    if op in CONSUMER_OPS:
        return bytes((op,)) + _enc.encode((target, entry.args))
    if op == Entry.UPDATE:
        from rillet.jetstream.api.common import encode_config
        cfg, scfg, ts = entry.args
        return bytes((op,)) + _enc.encode((encode_config(cfg), msgspec.to_builtins(scfg), ts))
    if op == Entry.MSG and entry.ctx is not None and entry.ctx.__class__ is FastMsg:
        return bytes((FAST_MSG,)) + _enc.encode((*entry.args, entry.ctx.reply))
    if op not in STREAM_OPS and op not in CLUSTER_OPS:
        raise ValueError(f"unknown log entry op {op}")
    return bytes((op,)) + _enc.encode(entry.args)


def decode_entry(data: bytes) -> tuple[str, Entry]:
    """(target, entry) from ``encode_entry``'s bytes; EntryDecodeError for anything malformed."""
    if not data:
        raise EntryDecodeError("empty entry")
    op = data[0]
    try:
        body = _dec.decode(memoryview(data)[1:])
    except msgspec.DecodeError as e:
        raise EntryDecodeError(f"entry op {op}: {e}") from None
    if not isinstance(body, list):
        raise EntryDecodeError(f"entry op {op}: not an array")
    if op in CONSUMER_OPS:
        if len(body) != 2 or not isinstance(body[0], str) or not isinstance(body[1], list):
            raise EntryDecodeError(f"consumer entry op {op}: malformed")
        return body[0], Entry(op, _tuple_args(op, body[1]))
    if op == FAST_MSG:
        if len(body) != 8 or not isinstance(body[7], bytes):
            raise EntryDecodeError("fast batch entry: malformed")
        return "", Entry(Entry.MSG, tuple(body[:7]), FastNote(body[7]))
    if op in CLUSTER_OPS:
        if len(body) != 1 or not isinstance(body[0], bytes):
            raise EntryDecodeError(f"entry op {op}: malformed")
        return "", Entry(op, (body[0],))
    if op not in STREAM_OPS:
        raise EntryDecodeError(f"unknown entry op {op}")
    if op == Entry.UPDATE:
        if len(body) != 3:
            raise EntryDecodeError("update entry: malformed")
        from rillet.jetstream.api.common import stream_config_from_dict
        from rillet.jetstream.store.base import StoreConfig
        try:
            cfg = stream_config_from_dict(json.loads(body[0]))
            scfg = msgspec.convert(body[1], StoreConfig)
        except (ValueError, TypeError, msgspec.ValidationError) as e:
            raise EntryDecodeError(f"update entry: {e}") from None
        return "", Entry(op, (cfg, scfg, body[2]))
    return "", Entry(op, _tuple_args(op, body))


def _tuple_args(op: int, args: list) -> tuple:
    if op == Entry.BATCH and args and isinstance(args[0], list):
        return ([tuple(m) for m in args[0]],) + tuple(args[1:])
    if op in (Entry.C_DUE, Entry.C_DROP) and args and isinstance(args[0], list):
        return args[0], *args[1:]
    return tuple(args)


class _Pending:
    # index 0: not handed to the group yet (RaftLog._batch); sub: its place in a MULTI entry (-1: alone)
    __slots__ = ("index", "data", "entry", "cb", "target", "sub")

    def __init__(self, index: int, data: bytes, entry: Entry, cb: Completion | None, target: str) -> None:
        self.index = index
        self.data = data
        self.entry = entry
        self.cb = cb
        self.target = target
        self.sub = -1


class SubLog:
    """A consumer's log inside its stream's RaftLog (the seam interface; entries tagged with ``name``)."""

    def __init__(self, parent: "RaftLog", name: str, apply: Callable[[Entry], Any]) -> None:
        self.parent = parent
        self.name = name
        self.apply = apply
        self.on_leader_change: Callable[[bool], None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.parent.is_leader

    @property
    def index(self) -> int:
        return self.parent.index

    @property
    def term(self) -> int:
        return self.parent.term

    def propose(self, entry: Entry, on_applied: Completion | None = None) -> None:
        self.parent._propose(entry, on_applied, self.name)


class RaftLog:
    """The seam (see rillet.jetstream.log) over a ``RaftGroup``. Create it, build the group with
    ``apply=log.group_apply, on_leader_change=log.group_leader_change``, then ``bind(group)``."""

    def __init__(self, apply: Callable[[Entry], Any] | None = None, name: str = "", log: Any = None) -> None:
        self.apply = apply
        self.name = name
        self.logger = log
        self.group: Any = None
        self.on_leader_change: Callable[[bool], None] | None = None
        self.index = 0
        self._pending: deque[_Pending] = deque()
        # proposals of this pass not handed to the group yet (the tail of _pending): the group takes them right
        # before its Ready, one RAFT entry for all (MULTI), so a pass's entries cost one log entry's RAFT work
        self._batch: list[_Pending] = []
        self._batch_bytes = 0
        self.subs: dict[str, SubLog] = {}
        self._held: list[tuple[int, bytes]] | None = None
        # counters (surfaced by the owner's status)
        self.decode_errors = 0
        self.unknown_targets = 0
        self.lost_proposals = 0
        self.applied_index = 0
        self.applying_own = False
        # set by the owner: called with (index, target, entry) before the entry is applied (recovery
        # checks); returns False to skip applying it
        self.filter: Callable[[int, str, Entry], bool] | None = None
        # set by the owner while the group's only voter is this leader and no other member is wanted (an R1
        # stream or consumer, which nats-server runs without a RAFT group): a proposal with nothing in flight
        # is applied and completed at once, like SingleNodeLog's, without the group's log and WAL (the owner's
        # store is what is durable). Such entries are not in the group's log: before the group takes a member
        # the owner proposes its state (SYNCED) for the new member to catch up to. solo_applied counts them.
        self.solo = False
        self.solo_applied = 0
        self.solo_apply: Callable[[Entry], Any] | None = None  # (the owner's apply for solo entries, if other)
        # set by the owner: called once, from the group's apply, as soon as no proposal of this leader is in
        # flight any more (after the last one's completion); see when_drained
        self.on_drained: Callable[[], None] | None = None

    def bind(self, group: Any) -> None:
        self.group = group

    # ---- the seam -----------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        g = self.group
        return g is not None and g.is_leader and self._held is None

    @property
    def term(self) -> int:
        return self.group.term if self.group is not None else 0

    def propose(self, entry: Entry, on_applied: Completion | None = None) -> None:
        if self.solo and not self._pending and self._held is None and self.group.is_leader:
            # (_apply_solo inlined for the owner's own entries: the per-message path of a solo R1 group)
            self.solo_applied += 1
            self.applying_own = True
            try:
                res = (self.solo_apply or self.apply)(entry)  # type: ignore[misc]
            except Exception as e:
                if on_applied is not None:
                    on_applied(entry, None, e)
                elif self.logger is not None and not _is_refusal(e):
                    self.logger.error(f"RAFT log {self.name!r}: applying a solo entry ({entry!r:.200}) failed: "
                                      f"{e!r}")
                return
            if on_applied is not None:
                on_applied(entry, res, None)
            return
        self._propose(entry, on_applied, "")

    def sublog(self, name: str, apply: Callable[[Entry], Any]) -> SubLog:
        s = self.subs.get(name)
        if s is None:
            s = self.subs[name] = SubLog(self, name, apply)
        else:
            s.apply = apply
        return s

    def drop_sublog(self, name: str) -> None:
        self.subs.pop(name, None)

    def _propose(self, entry: Entry, cb: Completion | None, target: str) -> None:
        if self.solo and not self._pending and self._held is None and self.group.is_leader:
            self._apply_solo(entry, cb, target)
            return
        if not self.is_leader:
            if cb is not None:
                cb(entry, None, NotLeader())
            return
        data = _encode(entry, target)
        p = _Pending(0, data, entry, cb, target)
        self._pending.append(p)
        batch = self._batch
        batch.append(p)
        self._batch_bytes += len(data)
        if len(batch) == 1:
            self.group.proposal_waiting(self._flush)
        elif len(batch) >= MULTI_MAX_ENTRIES or self._batch_bytes >= MULTI_MAX_BYTES:
            self._flush()

    def _flush(self) -> None:
        """(RaftGroup.proposal_waiting) The proposals of this pass to the group: one RAFT entry, MULTI when there
        are several. A group that refuses them (no longer the leader) fails them with NotLeader, in order."""
        batch = self._batch
        if not batch:
            return
        self._batch = []
        self._batch_bytes = 0
        if len(batch) > 1 and not self.group.members_decode(MULTI):
            self._propose_each(batch)
            return
        if len(batch) == 1:
            data = batch[0].data
        else:
            data = bytes((MULTI,)) + _enc.encode([p.data for p in batch])
        try:
            index, _term = self.group.propose_now(data)
        except NotLeader as e:
            self._refused(batch, e)
            return
        self.index = index
        if len(batch) == 1:
            batch[0].index = index
        else:
            for k, p in enumerate(batch):
                p.index = index
                p.sub = k

    def _propose_each(self, batch: list[_Pending]) -> None:
        """The pass's proposals as one RAFT entry each (a member of the group may be a build that cannot decode
        MULTI: RaftGroup.members_decode); those from the first the group refuses on fail with NotLeader, in order."""
        for k, p in enumerate(batch):
            try:
                index, _term = self.group.propose_now(p.data)
            except NotLeader as e:
                self._refused(batch[k:], e)
                return
            self.index = p.index = index

    def _refused(self, batch: list[_Pending], e: NotLeader) -> None:
        pend = self._pending
        for _ in batch:  # (the batch is the tail of _pending)
            pend.pop()
        for p in batch:
            if p.cb is not None:
                p.cb(p.entry, None, e)

    def _apply_solo(self, entry: Entry, cb: Completion | None, target: str) -> None:
        """A solo group's proposal: applied and completed now (in order: nothing is in flight before it)."""
        self.solo_applied += 1
        if target:
            s = self.subs.get(target)
            if s is None or s.apply is None:
                self.unknown_targets += 1
                if cb is not None:
                    cb(entry, None, NotLeader())
                return
            apply = s.apply
        else:
            apply = self.solo_apply or self.apply
        self.applying_own = True
        try:
            res = apply(entry)  # type: ignore[misc]
        except Exception as e:
            if cb is not None:
                cb(entry, None, e)
            elif self.logger is not None and not _is_refusal(e):
                self.logger.error(f"RAFT log {self.name!r}: applying a solo entry ({entry!r:.200}) failed: {e!r}")
            return
        if cb is not None:
            cb(entry, res, None)

    # ---- from the group -----------------------------------------------------------------------------

    def hold(self) -> None:
        """Queue the group's applies (the owner is catching up); ``release()`` applies them in order."""
        if self._held is None:
            self._held = []

    def release(self) -> None:
        held, self._held = self._held, None
        for index, data in held or ():
            if self._held is not None:  # held again by an apply (another snapshot): keep the order
                self._held.append((index, data))
                continue
            self._apply_now(index, data)

    @property
    def holding(self) -> bool:
        return self._held is not None

    def group_apply(self, index: int, data: bytes) -> None:
        if self._held is not None:
            self._held.append((index, data))
            return
        self._apply_now(index, data)
        if self.on_drained is not None and not self._pending:
            fn, self.on_drained = self.on_drained, None
            fn()

    def when_drained(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once none of this leader's proposals is in flight: at once when none is, else from the
        group's apply of the last one (after its completion). A later call replaces an earlier waiting one; a
        leadership loss fails the proposals without calling it (the owner re-checks on its leader change)."""
        if not self._pending:
            self.on_drained = None
            fn()
        else:
            self.on_drained = fn

    def _apply_now(self, index: int, data: bytes) -> None:
        self.applied_index = index
        if data and data[0] == MULTI:
            try:
                parts = _dec_multi.decode(memoryview(data)[1:])
            except msgspec.DecodeError as e:
                self.decode_errors += 1
                if self.logger is not None:
                    self.logger.error(f"RAFT log {self.name!r}: entry {index} cannot be decoded: multi: {e}")
                return
            for k, part in enumerate(parts):
                self._apply_one(index, k, part)
            pend = self._pending
            while pend and pend[0].index == index:  # (ours had more entries at this index: not committed)
                p = pend.popleft()
                self.lost_proposals += 1
                if p.cb is not None:
                    p.cb(p.entry, None, NotLeader())
            return
        self._apply_one(index, -1, data)

    def _apply_one(self, index: int, sub: int, data: bytes) -> None:
        """One entry (``sub``: its place in the MULTI entry at ``index``, -1 alone), matched against this leader's
        proposals in log order."""
        pend = self._pending
        mine: _Pending | None = None
        while pend:
            p = pend[0]
            pi = p.index
            if pi == 0 or pi > index or (pi == index and sub >= 0 and p.sub > sub):
                break  # (not handed to the group yet, or later in the log than this entry)
            pend.popleft()
            if pi == index and p.sub == sub and p.data == data:
                mine = p
                break
            # a proposal another leader's entry replaced (or one below a snapshot): it did not commit
            self.lost_proposals += 1
            if p.cb is not None:
                p.cb(p.entry, None, NotLeader())
        self.applying_own = mine is not None  # (the owner's apply may ask: has this entry a completion here?)
        if mine is not None:
            entry, target = mine.entry, mine.target
        else:
            try:
                target, entry = _decode(data)
            except EntryDecodeError as e:
                self.decode_errors += 1
                if self.logger is not None:
                    self.logger.error(f"RAFT log {self.name!r}: entry {index} cannot be decoded: {e}")
                return
        if self.filter is not None and not self.filter(index, target, entry):
            if mine is not None and mine.cb is not None:
                mine.cb(entry, None, NotLeader())
            return
        if target:
            s = self.subs.get(target)
            apply = s.apply if s is not None else None
            if apply is None:
                self.unknown_targets += 1
                if mine is not None and mine.cb is not None:
                    mine.cb(entry, None, NotLeader())
                return
        else:
            apply = self.apply
        try:
            res = apply(entry)  # type: ignore[misc]
        except Exception as e:
            if mine is not None and mine.cb is not None:
                mine.cb(entry, None, e)
            elif self.logger is not None and not _is_refusal(e):
                self.logger.error(f"RAFT log {self.name!r}: applying entry {index} ({entry!r:.200}) failed: {e!r}")
            return
        if mine is not None and mine.cb is not None:
            mine.cb(entry, res, None)

    def group_leader_change(self, leader: bool) -> None:
        if not leader:
            self.fail_pending()
        if self.on_leader_change is not None:
            self.on_leader_change(leader)
        for s in list(self.subs.values()):
            if s.on_leader_change is not None:
                s.on_leader_change(leader)

    def fail_pending(self) -> None:
        self.on_drained = None
        self._batch = []
        self._batch_bytes = 0
        pend, self._pending = self._pending, deque()
        for p in pend:
            if p.cb is not None:
                p.cb(p.entry, None, LeadershipLost())

    @property
    def pending(self) -> int:
        return len(self._pending)

    def then(self, fn: Callable[[], None]) -> bool:
        """Run ``fn()`` once the last proposed entry has committed and applied here without error (after its
        completion); never if it does not commit through this node (leadership lost, replaced). False when
        nothing is pending (the last proposal already completed or was refused)."""
        if not self._pending:
            return False
        p = self._pending[-1]
        cb = p.cb

        def done(entry: Entry, res: Any, err: BaseException | None) -> None:
            if cb is not None:
                cb(entry, res, err)
            if err is None:
                fn()
        p.cb = done
        return True


def _is_refusal(e: Exception) -> bool:
    """A deterministic refusal of a store (every replica refuses the same entry): not worth a log line."""
    from rillet.jetstream.store.base import StoreError
    from rillet.jetstream.errors import ApiError
    return isinstance(e, (StoreError, ApiError))


# The codec the log uses: encode_entry/decode_entry above (the reference), or their compiled twins
# (rillet._speedups._ccluster, for the MSG and consumer entries), as rillet.lane decides.
from rillet import lane as _lane  # noqa: E402  (here: the twin module reads this one's definitions)

_encode = _lane.entry_codec.encode_entry
_decode = _lane.entry_codec.decode_entry
