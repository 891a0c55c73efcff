"""A Rillet server as a replica of a stream that a Go cluster's meta group placed on it (issue 22, a step).

When the meta group (followed by ``GoMetaMember``) assigns a stream to this server's peer id, ``GoStreamReplica``
follows the stream's RAFT group (``$NRG.*.<S-R3F-...>``) with the same nats-server follower rules
(rillet.jetstream.cluster.gometa / golead: votes, responses, catch-up, hand-off of a leadership transfer) and
applies its committed entries (rillet.jetstream.cluster.gowire) to a Rillet message store: stored messages at
their sequence (plain, compressed or in a batch), purges, deletes and delete ranges. The Go servers of the
group count its acknowledgements toward their quorum.

A replica never keeps the leadership of its group: should it be elected, it hands it to the first peer that
answers it holding its whole log; a leadership transfer to it is handed on (as the meta member does). When the
Go meta leader picks it as a new group's preferred leader, the group waits out an election timeout. The consumers of such a stream placed
on this server are followed the same way (``GoConsumerReplica``: delivered,
acks, skips, resets and shared pull requests into ``ConsumerReplicaState``).

Not yet (so it is only attached by ``host_streams(member)``, in tests): leading a stream or consumer (answering
publishes, deliveries and the API), the stream or consumer snapshot a leader sends to a replica that fell behind its log (decoded
but not applied: the replica then reports itself behind), ``$JSC`` catch-up by messages, a file store and a
durable RAFT state (the store is in memory: a restart starts empty and is caught up again).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.gometa import Committed, GoMetaMember
from rillet.jetstream.store.base import StoreConfig
from rillet.jetstream.store.memstore import MemStore
from rillet.raft import gowire as gw

__all__ = ["GoStreamReplica", "GoConsumerReplica", "ConsumerReplicaState", "host_streams"]


def _store_config(cfg: dict) -> StoreConfig:
    def num(key: str, default: int = -1) -> int:
        v = cfg.get(key, default)
        return int(v) if isinstance(v, int) else default
    return StoreConfig(name=str(cfg.get("name", "")), storage="memory", max_msgs=num("max_msgs"),
                       max_bytes=num("max_bytes"), max_age=num("max_age", 0) / 1e9,
                       max_msgs_per_subject=num("max_msgs_per_subject"), max_msg_size=num("max_msg_size"),
                       discard="new" if cfg.get("discard") == "new" else "old")


class GoStreamReplica(GoMetaMember):
    """One stream group of a Go cluster, followed from this server (see the module docstring)."""

    KIND = "stream group"

    def __init__(self, server: Any, account: str, assignment: dict) -> None:
        super().__init__(server, group=assignment["group"]["name"])
        self.account = account
        self.name = assignment["stream"]["name"]
        self.assignment = assignment
        self.store = MemStore(_store_config(assignment["stream"]))
        self.state = None  # (the meta state of the base class is not used)
        self.applied_msgs = 0
        self.unapplied_snapshots = 0

    def _commit(self, done: list[Committed]) -> None:
        for item in done:
            try:
                self._apply(item)
            except gw.GoWireError as e:
                self.refused += 1
                self.apply_errors += 1
                self._warn_once(f"apply:{e}", f"JetStream stream '{self.account} > {self.name}' "
                                              f"[{self.group}]: could not apply entry {item.index}: {e}")

    def _apply(self, item: Committed) -> None:
        e = item.entry
        if item.snapshot or e.type == gw.ENTRY_SNAPSHOT:
            self.unapplied_snapshots += 1
            return
        if e.type != gw.ENTRY_NORMAL:
            return
        x = ge.decode_entry(e.data)
        if isinstance(x, ge.BatchMsg):
            x = x.inner
        if isinstance(x, ge.CompressedStreamMsg):
            x = x.msg
        if isinstance(x, ge.StreamMsg):
            seq = x.lseq + 1
            if seq <= self.store.state().last_seq:
                return  # already stored (a replay)
            self.store.store_raw(seq, x.subject, bytes(x.hdr), bytes(x.msg), x.ts)
            self.applied_msgs += 1
        elif isinstance(x, ge.JsonEntry) and isinstance(x.doc, dict):
            doc = x.doc
            if x.op == ge.OP_DELETE_MSG:
                self.store.remove_msg(int(doc.get("seq", 0)), erase=not doc.get("no_erase", False))
            elif x.op == ge.OP_PURGE_STREAM:
                req = doc.get("request") or {}
                self.store.purge(subject=req.get("filter") or None, seq=int(req.get("seq", 0) or 0),
                                 keep=int(req.get("keep", 0) or 0))
            elif x.op == ge.OP_DELETE_RANGE:
                first, num = int(doc.get("first", 0)), int(doc.get("num", 0))
                for seq in range(first, first + num):
                    self.store.remove_msg(seq)
            else:
                raise gw.GoWireError(f"op {x.op} in a stream group")
        else:
            raise gw.GoWireError(f"{type(x).__name__} in a stream group")


@dataclass
class ConsumerReplicaState:
    """A consumer's replicated state as its entries describe it: what was delivered (consumer and stream
    sequence), what is pending acknowledgement (stream seq -> (consumer seq, delivery time)), redelivery
    counts, the ack floor, and the pull requests the leader shared."""
    delivered_consumer: int = 0
    delivered_stream: int = 0
    ack_floor_consumer: int = 0
    ack_floor_stream: int = 0
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)
    redelivered: dict[int, int] = field(default_factory=dict)
    pull_requests: set[str] = field(default_factory=set)

    def _floor(self) -> None:
        if self.pending:
            low = min(self.pending)
            self.ack_floor_stream = low - 1
            self.ack_floor_consumer = self.pending[low][0] - 1
        else:
            self.ack_floor_stream, self.ack_floor_consumer = self.delivered_stream, self.delivered_consumer

    def delivered(self, dseq: int, sseq: int, dc: int, ts: int) -> None:
        self.delivered_consumer = max(self.delivered_consumer, dseq)
        self.delivered_stream = max(self.delivered_stream, sseq)
        self.pending[sseq] = (dseq, ts)
        if dc > 1:
            self.redelivered[sseq] = dc - 1
        self._floor()

    def acked(self, dseq: int, sseq: int) -> None:
        self.pending.pop(sseq, None)
        self.redelivered.pop(sseq, None)
        self._floor()

    def skipped(self, sseq: int) -> None:
        self.delivered_stream = max(self.delivered_stream, sseq)
        self._floor()

    def reset(self, seq: int) -> None:
        """A reset to stream sequence ``seq`` (the next delivery is ``seq``; 0: the consumer's start)."""
        self.pending.clear()
        self.redelivered.clear()
        self.delivered_stream = max(seq - 1, 0)
        self._floor()


class GoConsumerReplica(GoMetaMember):
    """One consumer group of a Go cluster, followed from this server: its entries applied to
    ``ConsumerReplicaState`` (the consumer's own snapshot is counted, not applied)."""

    KIND = "consumer group"

    def __init__(self, server: Any, account: str, stream: str, assignment: dict) -> None:
        super().__init__(server, group=assignment["group"]["name"])
        self.account, self.stream, self.name = account, stream, assignment["name"]
        self.assignment = assignment
        self.state = None
        self.consumer = ConsumerReplicaState()
        self.unapplied_snapshots = 0
        self.ops: dict[str, int] = {}  # entries applied, by kind

    def _commit(self, done: list[Committed]) -> None:
        c = self.consumer
        for item in done:
            e = item.entry
            if item.snapshot or e.type == gw.ENTRY_SNAPSHOT:
                self.unapplied_snapshots += 1
                continue
            if e.type != gw.ENTRY_NORMAL:
                continue
            try:
                x = ge.decode_entry(e.data)
                self.ops[type(x).__name__] = self.ops.get(type(x).__name__, 0) + 1
                if isinstance(x, ge.UpdateDelivered):
                    c.delivered(x.dseq, x.sseq, x.dc, x.ts)
                elif isinstance(x, ge.UpdateAcks):
                    c.acked(x.dseq, x.sseq)
                elif isinstance(x, ge.UpdateSkip):
                    c.skipped(x.sseq)
                elif isinstance(x, ge.ResetSeq):
                    c.reset(x.seq)
                elif isinstance(x, ge.PendingRequest):
                    (c.pull_requests.add if x.add else c.pull_requests.discard)(x.reply)
                else:
                    raise gw.GoWireError(f"{type(x).__name__} in a consumer group")
            except gw.GoWireError as err:
                self.refused += 1
                self.apply_errors += 1
                self._warn_once(f"apply:{err}", f"JetStream consumer '{self.account} > {self.stream} > "
                                                f"{self.name}' [{self.group}]: could not apply entry {item.index}: {err}")


def host_streams(member: GoMetaMember) -> dict[tuple, GoMetaMember]:
    """Follow every stream and consumer the meta group assigns to this server (and leave those it takes
    away); returns the live map of replicas: (account, stream) -> GoStreamReplica and
    (account, stream, consumer) -> GoConsumerReplica."""
    replicas: dict[tuple, GoMetaMember] = {}

    def reconcile() -> None:
        me = member.peer
        want: dict[tuple, tuple[str, dict]] = {}
        for key, sa in member.state.streams.items():
            if me in ((sa.get("group") or {}).get("peers") or ()):
                want[key] = ("stream", sa)
            for cname, ca in (member.state.consumers.get(key) or {}).items():
                if me in ((ca.get("group") or {}).get("peers") or ()):
                    want[key + (cname,)] = ("consumer", ca)
        for key in list(replicas):
            r = replicas[key]
            if key not in want or want[key][1]["group"]["name"] != r.group:
                r.stop()
                del replicas[key]
        for key, (kind, a) in want.items():
            if key in replicas:
                continue
            r = (GoStreamReplica(member.server, key[0], a) if kind == "stream"
                 else GoConsumerReplica(member.server, key[0], key[1], a))
            r.pass_leadership = True
            r.start()
            replicas[key] = r
            # (when the Go meta leader made this server the new group's preferred leader, the Go peers elect one
            # of them after an election timeout, 4-9 s. Being elected first and passing leadership on would be
            # quicker but leaves the create request unanswered: the Go peers expect its first leader to answer.)

    member.on_applied.append(reconcile)
    reconcile()
    return replicas
