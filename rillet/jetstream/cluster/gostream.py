"""A Rillet server as a replica of a stream that a Go cluster's meta group placed on it (issue 22, a step).

When the meta group (followed by ``GoMetaMember``) assigns a stream to this server's peer id, ``GoStreamReplica``
follows the stream's RAFT group (``$NRG.*.<S-R3F-...>``) with the same nats-server follower rules
(rillet.jetstream.cluster.gometa / golead: votes, responses, catch-up, hand-off of a leadership transfer) and
applies its committed entries (rillet.jetstream.cluster.gowire) to a Rillet message store: stored messages at
their sequence (plain, compressed or in a batch), purges, deletes and delete ranges. The Go servers of the
group count its acknowledgements toward their quorum.

Not yet (so it is only attached by ``host_streams(member)``, in tests): leading the stream (answering publishes
and the API), consumers, the stream snapshot a leader sends to a replica that fell behind its log (decoded
but not applied: the replica then reports itself behind), ``$JSC`` catch-up by messages, a file store and a
durable RAFT state (the store is in memory: a restart starts empty and is caught up again).
"""
from __future__ import annotations

from typing import Any

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.gometa import Committed, GoMetaMember
from rillet.jetstream.store.base import StoreConfig
from rillet.jetstream.store.memstore import MemStore
from rillet.raft import gowire as gw

__all__ = ["GoStreamReplica", "host_streams"]


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


def host_streams(member: GoMetaMember) -> dict[tuple[str, str], GoStreamReplica]:
    """Follow every stream the meta group assigns to this server (and leave those it takes away); returns the
    live map of replicas by (account, stream)."""
    replicas: dict[tuple[str, str], GoStreamReplica] = {}

    def reconcile() -> None:
        want = {key: sa for key, sa in member.state.streams.items()
                if member.peer in ((sa.get("group") or {}).get("peers") or ())}
        for key in list(replicas):
            r = replicas[key]
            if key not in want or want[key]["group"]["name"] != r.group:
                r.stop()
                del replicas[key]
        for key, sa in want.items():
            if key not in replicas:
                r = GoStreamReplica(member.server, key[0], sa)
                r.start()
                replicas[key] = r

    member.on_applied.append(reconcile)
    reconcile()
    return replicas
