"""A Rillet server as a replica of a stream that a Go cluster's meta group placed on it (behind ``rillet_go_meta``).

When the meta group (followed by ``GoMetaMember``) assigns a stream to this server's peer id, ``GoStreamReplica``
follows the stream's RAFT group (``$NRG.*.<S-R3F-...>``) with the same nats-server follower rules
(rillet.jetstream.cluster.gometa / golead: votes, responses, catch-up, hand-off of a leadership transfer) and
applies its committed entries (rillet.jetstream.cluster.gowire) to a Rillet message store: stored messages at
their sequence (plain, compressed or in a batch), purges, deletes and delete ranges. The Go servers of the
group count its acknowledgements toward their quorum.

Without ``lead`` (below) a replica never keeps the leadership of its group: should it be elected, it hands it to
the first peer that answers it holding its whole log; a leadership transfer to it is handed on (as the meta member
does). When the Go meta leader picks it as a new group's preferred leader, the group waits out an election
timeout. The consumers of such a stream placed on this server are followed the same way (``GoConsumerReplica``:
delivered, acks, skips, resets, shared pull requests and consumer snapshots into ``ConsumerReplicaState``, with
nats-server's consumer store rules); without ``lead`` they are never led.

With the ``rillet_go_meta`` flag, ``host_streams(member, store_dir)`` runs from the server's first route: a stream
replica keeps its messages in a ``FileStore`` (``<store_dir>/go_streams/<account>/<stream>/msgs``), its applied
RAFT index beside it (``applied``) and its group's term and vote (``<store_dir>/go_meta/<group>``, removed when
the group leaves this server: gogroupfiles), so a restarted server resumes where its store is. A stream
snapshot from the leader (``gowire.StreamSnapshot``) is installed as nats-server installs one (the first sequence
moves up, its deleted sequences go) and, when the snapshot's last sequence is past ours, a ``$JSC.SYNC``
catch-up by messages follows (each message answered on its ``$JSC.ACK`` reply, an empty message ends it,
retried after 2 s when it ended short); committed entries wait for it.

Leading (``host_streams(..., lead=True)``, as the flag starts it): a stream replica named by a leadership transfer
(``$JS.API.STREAM.LEADER.STEPDOWN`` with a preferred server) campaigns and, elected, leads the group as
nats-server's stream leader (rillet.jetstream.cluster.gostreamlead: publishes checked, proposed and acknowledged
once committed; catch-ups served; the stream leader's API). With ``stand=True`` (``rillet_go_meta_lead``) it also
stands for election when it hears no leader for an election timeout, as nats-server's members do. Without
``stand``, a stream replica stands only as its group's sole voting member (the others removed by the meta layer
and dropped, nats-server's eviction): it elects itself, as nats-server's sole member does
(GoMetaMember.stand_alone).

Every replica answers direct gets (``$JS.API.DIRECT.GET.<stream>``) of a stream with ``allow_direct`` while it
leads or follows current, as nats-server's do (rillet.jetstream.cluster.godirect).

Every replica answers the state request (``$JSC.SI.<account>.<stream>`` with ``{"state":true}``) that nats-server
2.15.1's group leader sends all replicas while it changes the group's peers: without the answer, a Go leader never
handed a moved or evacuated stream over to, nor completed it on, a Rillet replica (``_on_state_request``).

Every replica expires its own messages (``max_age``, ``Nats-TTL``), as nats-server's do, and compacts its
in-memory log into a stream snapshot every ``SNAPSHOT_EVERY`` applied entries (``_maybe_compact``).

With ``lead`` a consumer replica named by a leadership transfer leads its group as nats-server's consumer
leader (rillet.jetstream.cluster.goconsumerlead), from this server's replica of the stream; with ``stand`` it
also stands for election on its own.

A consumer replica keeps its state, applied index and term and vote on disk (rillet.jetstream.cluster.goconsumerstore).
A restarted stream replica's log starts at the index its store was applied up to, the store's state as its
snapshot, and a store that lost its tail fetches it from the leader (rillet.jetstream.cluster.gostreamapplied).
Not yet: a stream replica's RAFT log on disk.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from typing import Any, Optional

from rillet.gocompat.gotime import GoTimeError, time_ns
from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.golead import LEADER
from rillet.jetstream.cluster.gometa import Committed, GoMetaMember
from rillet.jetstream.cluster.goconsumerlead import ConsumerLeading
from rillet.jetstream.cluster.goconsumerstate import ConsumerReplicaState, decode_consumer_state, encode_consumer_state
from rillet.jetstream.cluster.goconsumerstore import KeptConsumerState, prune_orphans
from rillet.jetstream.cluster.gogroupfiles import forget_group, prune_groups
from rillet.jetstream.cluster.gostreamapplied import load_applied, save_applied, start_at_applied
from rillet.jetstream.cluster.gostreamfiles import (_safe, _write_group, files_of, prune_streams,  # noqa: F401
                                                    replica_created, replica_group, stale_files)
from rillet.jetstream.cluster.godirect import ReplicaDirectGets
from rillet.jetstream.cluster.gostreamlead import StreamLeading, store_state_doc
from rillet.jetstream import headers as H
from rillet.jetstream.errors import ApiError
from rillet.jetstream.store.base import StoreConfig
from rillet.jetstream.store.filestore import FileStore
from rillet.jetstream.store.memstore import MemStore
from rillet.raft import gowire as gw

__all__ = ["GoStreamReplica", "GoConsumerReplica", "ConsumerReplicaState", "host_streams"]


def _store_config(cfg: dict, storage: str = "memory") -> StoreConfig:
    def num(key: str, default: int = -1) -> int:
        v = cfg.get(key, default)
        return int(v) if isinstance(v, int) else default
    return StoreConfig(name=str(cfg.get("name", "")), storage=storage, max_msgs=num("max_msgs"),
                       max_bytes=num("max_bytes"), max_age=num("max_age", 0) / 1e9,
                       max_msgs_per_subject=num("max_msgs_per_subject"), max_msg_size=num("max_msg_size"),
                       discard="new" if cfg.get("discard") == "new" else "old",
                       allow_msg_ttl=bool(cfg.get("allow_msg_ttl")),
                       subject_delete_marker_ttl=num("subject_delete_marker_ttl", 0) / 1e9)


CATCHUP_RETRY = 2.0  # seconds between catch-up requests that ended short (as nats-server waits)
CATCHUP_STALL = 10.0  # seconds without a catch-up message before asking again
SNAPSHOT_EVERY = 8192  # entries applied beyond the last snapshot before a replica compacts its in-memory log


class GoStreamReplica(StreamLeading, GoMetaMember):
    """One stream group of a Go cluster, followed from this server (see the module docstring)."""

    KIND = "stream group"

    def __init__(self, server: Any, account: str, assignment: dict, store_dir: Optional[str] = None) -> None:
        super().__init__(server, group=assignment["group"]["name"], store_dir=store_dir)
        self.account = account
        self.name = assignment["stream"]["name"]
        self.assignment = assignment
        self.dir = (os.path.join(store_dir, "go_streams", _safe(account), _safe(self.name)) if store_dir
                    else None)
        if self.dir is not None:
            stale = stale_files(store_dir, account, assignment) if store_dir else None
            if stale is not None:
                # (files another stream of this name left: removed while this server was down, and created again)
                self.log.warn(f"JetStream stream '{account} > {self.name}' [{self.group}]: removing the files of "
                              f"an earlier stream of that name ({stale}), not this stream's")
                shutil.rmtree(self.dir)
            os.makedirs(self.dir, exist_ok=True)
            own_log = replica_group(store_dir, account, self.name) == self.group  # (not a renamed group's index)
            _write_group(self.dir, self.group, str(assignment.get("created") or ""))
            self.store = FileStore(os.path.join(self.dir, "msgs"), _store_config(assignment["stream"], "file"),
                                   log=self._store_log)
            self._applied_path = os.path.join(self.dir, "applied")
            self.applied_index, clfs, applied_term = load_applied(self._applied_path)
        else:
            self.store = MemStore(_store_config(assignment["stream"]))
            self._applied_path = ""
            self.applied_index, clfs, applied_term = 0, 0, 0
        self.state = None  # (the meta state of the base class is not used)
        self._expiry: Any = None  # the timer of the store's next expiry (max_age, TTLs)
        self.snapshot_every = SNAPSHOT_EVERY
        self.snapshots_taken = 0
        self.store.register_marker_callback(self._on_marker)
        self.applied_msgs = 0
        self.snapshots_installed = 0
        self.catchups = 0  # $JSC catch-ups completed
        self.catchup_msgs = 0
        self._snap: Optional[ge.StreamSnapshot] = None  # the snapshot being caught up to, while catching up
        self._snap_index = 0
        self._held: list[Committed] = []  # committed entries that wait for the catch-up
        self._jsc_sub: Any = None
        self._jsc_inbox = ""
        self._retry: Any = None
        self._catchup_active = 0.0
        # leading (``may_lead``): see _start_leading
        self.may_lead = False
        # proposals that failed on apply (stored seq = lseq + 1 - clfs): counted as every nats-server replica
        # counts them, taken from a snapshot, kept beside the applied index
        self.clfs = clfs
        self.lmsgid = ""  # the message id of the last message stored ("" when it had none), as nats-server's
        self._proposed_lmsgid = ""  # leader: that of the last message proposed
        self.clseq = 0  # leader: the last sequence proposed (in the entries' numbering: stored + clfs)
        self.ddmap: dict[str, tuple[int, int]] = {}  # Nats-Msg-Id -> (seq, ts), within the duplicate window
        self._inflight_ids: dict[str, int] = {}
        self._inflight_subj: dict[str, list[int]] = {}  # leader: subject -> [ops, bytes] proposed, not applied
        self._lead_subs: Optional[list] = None
        self.aic: Any = None
        self.published = self.acked = 0
        self.member: Any = None  # the meta member (host_streams): the consumer count of stream info
        self.on_stored: list[Any] = []  # called after committed entries were applied (consumer leaders here)
        peers = [p for p in (assignment["group"].get("peers") or ()) if isinstance(p, str)]
        if peers and not self.raft.peers:
            # (a group starts with the peers of its assignment, as nats-server bootstraps one; its peer state
            # entries and snapshots replace them)
            self.raft.peers = set(peers)
            self.raft.cluster_size = len(peers)
        if self.dir is not None:
            self._rebuild_dedup()
            start_at_applied(self, applied_term if own_log else 0)  # (its log starts at its store: gostreamapplied)
        self.direct = ReplicaDirectGets(self)  # direct gets, answered while current (rillet...godirect)

    def _rebuild_dedup(self) -> None:
        """The message ids stored within the duplicate window (after a restart), as nats-server rebuilds them."""
        window = int(self.assignment["stream"].get("duplicate_window") or 120_000_000_000)
        seq = self.store.get_seq_from_time(time.time_ns() - window)
        while seq:
            sm = self.store.load_next_msg(">", seq)
            if sm is None:
                break
            mid = H.get_header(bytes(sm.hdr), H.MSG_ID) if sm.hdr and b"Nats-Msg-Id" in sm.hdr else None
            if mid:
                self.ddmap[mid] = (sm.seq, sm.ts)
            if sm.seq == self.store.state().last_seq:
                self.lmsgid = mid or ""
            seq = sm.seq + 1

    def _store_log(self, level: str, text: str) -> None:
        getattr(self.log, {"error": "error", "warn": "warn", "warning": "warn"}.get(level, "notice"))(
            f"JetStream stream '{self.account} > {self.name}' [{self.group}]: {text}")

    def _save_applied(self) -> None:
        if self._applied_path:  # (index, failed proposals and the applied entry's term: gostreamapplied)
            save_applied(self._applied_path, self.applied_index, self.clfs,
                         self.raft.term_at(self.applied_index) or 0, self.store.state().last_seq)

    def start(self, js_api: bool = False) -> None:
        super().start(js_api)
        self._subs.append(self.ic.subscribe(f"$JSC.SI.{self.account}.{self.name}", self._on_state_request))
        if self._snap is not None and self._jsc_sub is None:
            self._request_catchup()  # (a store that lost its tail in a power cut: gostreamapplied)
        self._arm_expiry()
        self.direct.check()

    def _alone(self) -> bool:
        return super()._alone() and self._snap is None  # (nor while the store catches up by messages)

    def lead_alone(self) -> None:
        """(GroupMigration.lead_alone) After a restart the RAFT log is empty (it is kept in memory) while the store
        holds what was applied up to ``applied_index``: the log starts there, as at a snapshot of the store, so
        that this server's next entries come after everything it applied (not skipped as applied before)."""
        r = self.raft
        if r.pindex < self.applied_index and not r._log and r.catchup is None and self._snap is None:
            r.base_index, r.base_term = self.applied_index, r.term
            r.commit = r.applied = self.applied_index
            r.snapshot_data = self.stream_snapshot().encode()
            r.snapshot_peer_state = gw.PeerState((self.peer,), 1, r.domain_ext).encode()
        super().lead_alone()

    def _on_state_request(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int,
                          msg: bytes) -> None:
        """``$JSC.SI.<account>.<stream>`` with ``{"state":true}``: nats-server 2.15.1's group leader asks every
        replica for its store's state while it changes the group's peers, and hands the group over (or removes
        the old peers) only once the desired peers' states answer as caught up. Every replica answers, leader
        or not, with its peer id and its state (``{"peer":...,"state":{...}}``, nats-server's StreamState
        layout). A request without ``state`` is a stream info for the meta leader, answered by the stream's
        leader (not here)."""
        if not reply:
            return
        try:
            req = json.loads(bytes(msg[hdr:]) if hdr > 0 else bytes(msg) or b"{}")
        except ValueError:
            return
        if not isinstance(req, dict) or req.get("state") is not True:
            return
        doc = {"peer": self.peer, "state": self.state_doc()}
        self.ic.publish(reply, None, json.dumps(doc, separators=(",", ":")).encode())

    def state_doc(self) -> dict[str, Any]:
        """The store's state in nats-server's StreamState JSON (its field order; the consumers counted are
        those with a replica on this server)."""
        doc = store_state_doc(self.store)
        meta = getattr(self.member, "state", None)
        cas = (meta.consumers.get((self.account, self.name)) or {}) if meta is not None else {}
        doc["consumer_count"] = sum(1 for ca in cas.values()
                                    if self.peer in ((ca.get("group") or {}).get("peers") or ()))
        return doc

    def _on_msg(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        super()._on_msg(sub, c, subject, reply, hdr, msg)
        r = self.raft
        if r.leader and r.leader != self.peer and subject.startswith(b"$NRG.AE."):
            self.direct.heard = time.monotonic()  # (the leader's contact: a follower's direct gets need it)

    def _send(self, outs: list) -> None:
        super()._send(outs)
        self.direct.check()  # (a new role: a leader answers direct gets at once)

    def reassigned(self, assignment: dict) -> None:
        super().reassigned(assignment)
        self.direct.check()  # (allow_direct turned on or off)

    def stop(self, remove: bool = False) -> None:
        """Stop following; ``remove``: the meta group took the stream away from this server (its files go)."""
        if self._lead_subs is not None:
            self._stop_leading()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self.direct.stop()
        super().stop()
        self._end_catchup()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self.store.stop()
        if remove and self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=False)

    def _commit(self, done: list[Committed]) -> None:
        # (the entries of one append entry share its index and come in one call: an index is skipped as applied
        # only when it was applied before this call, not once its first entry was; the later entries of a batch
        # the leader sent in one append entry were dropped, leaving holes in this replica's store)
        applied = self.applied_index
        for item in done:
            if self._snap is not None and not (item.snapshot or item.entry.type == gw.ENTRY_SNAPSHOT):
                self._held.append(item)  # (applied in order once the catch-up is complete)
                continue
            if item.index and item.index <= applied and not item.snapshot:
                continue  # applied before a restart (the log is sent again from its start)
            try:
                self._apply(item)
            except gw.GoWireError as e:
                self._not_applied(e, item.index, f"JetStream stream '{self.account} > {self.name}' [{self.group}]")
            if self._snap is None and item.index > self.applied_index:
                self.applied_index = item.index
        if done:
            self._save_applied()
            self._maybe_compact()
            for cb in list(self.on_stored):
                cb()

    def _maybe_compact(self) -> None:
        """Once ``snapshot_every`` entries are applied beyond the last snapshot, the in-memory log up to the
        commit index is replaced by a stream snapshot in nats-server's encoding (counts, first and last
        sequence, failed proposals, deleted runs), as nats-server's replicas snapshot theirs: a peer that needs
        what is gone is sent the snapshot and catches up by messages (``$JSC.SYNC``, served by a leader). Not
        while catching up, nor when an entry could not be applied (the snapshot would lose it)."""
        r = self.raft
        if (self._snap is not None or r.catchup is not None or self.apply_errors or r.applied != r.commit
                or self.applied_index < r.commit or r.commit - r.base_index < self.snapshot_every):
            return
        r.compact(r.commit, self.stream_snapshot().encode(), r.peer_state().encode())
        self.snapshots_taken += 1

    def stream_snapshot(self) -> ge.StreamSnapshot:
        """The store's state as a stream snapshot (nats-server's ``StreamReplicatedState``)."""
        st = self.store.state()
        runs: list[tuple[int, int]] = []
        for seq in sorted(st.deleted):
            if runs and runs[-1][0] + runs[-1][1] == seq:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((seq, 1))
        return ge.StreamSnapshot(st.msgs, st.bytes, st.first_seq, st.last_seq, self.clfs, runs, None)

    # -- a snapshot from the leader, and the $JSC catch-up by messages it may need ----------------------------
    def _install(self, item: Committed) -> None:
        snap = ge.StreamSnapshot.decode(item.entry.data)
        self.clfs = snap.failed
        st = self.store.state()
        if snap.first_seq > st.first_seq:
            self.store.compact(snap.first_seq)
        for first, num in snap.deleted or ():
            for seq in range(max(first, 1), min(first + num, st.last_seq + 1)):
                self.store.remove_msg(seq)
        self.snapshots_installed += 1
        if self.store.state().last_seq >= snap.last_seq:
            self.applied_index = max(self.applied_index, item.index)
            return
        self._snap, self._snap_index = snap, item.index
        self._request_catchup()

    def _request_catchup(self) -> None:
        if self._retry is not None:
            self._retry.cancel()  # (harmless when it is the timer running this)
            self._retry = None
        snap = self._snap
        if snap is None or self.ic is None:
            return
        sync = str(self.assignment.get("sync") or "")
        if not sync:
            raise gw.GoWireError("the stream assignment has no sync subject")
        self._end_catchup()
        self._jsc_inbox = f"$JSC.R.{gw.random_token(8)}"
        self._jsc_sub = self.ic.subscribe(self._jsc_inbox, self._on_catchup)
        last = self.store.state().last_seq
        self.ic.publish(sync.encode(), self._jsc_inbox.encode(),
                        ge.sync_request(self.peer, last + 1, snap.last_seq, self._snap_index))
        self._catchup_active = time.monotonic()
        if self.server.loop is not None:
            self._schedule(CATCHUP_STALL, self._check_stall)
        self.log.notice(f"JetStream stream '{self.account} > {self.name}' [{self.group}]: catching up "
                        f"{last + 1}..{snap.last_seq} from the leader")

    def _schedule(self, delay: float, fn: Any) -> None:
        if self._retry is not None:
            self._retry.cancel()
        self._retry = self.server.loop.call_later(delay, fn)

    def _check_stall(self) -> None:
        """No catch-up message for CATCHUP_STALL seconds: ask again (as nats-server's stalled catch-up)."""
        self._retry = None
        if self._snap is None or self.ic is None or not self._subs:
            return
        if time.monotonic() - self._catchup_active >= CATCHUP_STALL:
            self._warn_once("stalled", f"JetStream stream '{self.account} > {self.name}' [{self.group}]: "
                                       "catch-up stalled, asking again")
            self._request_catchup()
        else:
            self._schedule(CATCHUP_STALL, self._check_stall)

    def _end_catchup(self) -> None:
        if self._jsc_sub is not None and self.ic is not None:
            self.ic.remove_sub(self._jsc_sub)
        self._jsc_sub, self._jsc_inbox = None, ""

    def _on_catchup(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        if self._snap is None or subject.decode("latin-1") != self._jsc_inbox:
            return
        data = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        self._catchup_active = time.monotonic()
        if not data:  # the end of this catch-up
            self._end_catchup()
            if self.store.state().last_seq >= self._snap.last_seq:
                self._caught_up()
            elif self.server.loop is not None:
                self._schedule(CATCHUP_RETRY, self._request_catchup)
            return
        try:
            x = ge.decode_entry(data)
            self._store_catchup(x)
        except gw.GoWireError as e:
            self.refused += 1
            self._warn_once(f"catchup:{e}", f"JetStream stream '{self.account} > {self.name}' [{self.group}]: "
                                            f"refused a catch-up message: {e}")
            if reply:
                self.ic.publish(reply, None, str(e).encode())  # (tells the leader to stop: as nats-server)
            self._end_catchup()
            if self.server.loop is not None:
                self._schedule(CATCHUP_RETRY, self._request_catchup)
            return
        if reply:
            self.ic.publish(reply, None, b"")  # flow control: one answer per message

    def _store_catchup(self, x: Any) -> None:
        last = self.store.state().last_seq
        if isinstance(x, ge.CompressedStreamMsg):
            x = x.msg
        if isinstance(x, ge.StreamMsg):
            seq = x.lseq  # (in a catch-up the message's own sequence)
            if seq <= last:
                return
            if not x.subject and not x.ts:
                self.store.skip_msgs(last + 1, seq - last)
            else:
                self.store.store_raw(seq, x.subject, bytes(x.hdr), bytes(x.msg), x.ts)
            self.catchup_msgs += 1
        elif isinstance(x, ge.JsonEntry) and x.op == ge.OP_DELETE_RANGE and isinstance(x.doc, dict):
            first, num = int(x.doc.get("first", 0)), int(x.doc.get("num", 0))
            end = first + num - 1
            if end > last:
                self.store.skip_msgs(last + 1, end - last)
        else:
            raise gw.GoWireError(f"{type(x).__name__} in a catch-up")

    def _caught_up(self) -> None:
        self.catchups += 1
        self._rebuild_dedup()  # (the message ids caught up, within the duplicate window)
        if self.raft.base_index == self._snap_index:  # (the log's snapshot: the store's state from now)
            self.raft.snapshot_data = replace(self.stream_snapshot(), sources=self._snap.sources).encode()
        last = self.store.load_msg(self.store.state().last_seq) if self.store.state().last_seq else None
        self.lmsgid = (H.get_header(bytes(last.hdr), H.MSG_ID) or "") if last is not None and last.hdr else ""
        self.applied_index = max(self.applied_index, self._snap_index)
        self.log.notice(f"JetStream stream '{self.account} > {self.name}' [{self.group}]: catch-up complete "
                        f"(last sequence {self.store.state().last_seq})")
        self._snap = None
        held, self._held = self._held, []
        self._commit(held)
        self._save_applied()

    # -- max_age and per-message TTLs: each replica's store expires its own messages, as nats-server's ---------
    def _ttl(self, hdr: bytes) -> int:
        """A stored message's ``Nats-TTL`` in seconds (-1: never), where the stream allows TTLs; else 0."""
        if not self.assignment["stream"].get("allow_msg_ttl"):
            return 0
        from rillet.jetstream.stream import parse_ttl
        v = H.get_header(hdr, H.TTL)
        try:
            return parse_ttl(v) if v else 0
        except ValueError:
            return 0

    def _arm_expiry(self) -> None:
        loop = self.server.loop
        if loop is None or not self._subs:
            return
        nxt = self.store.next_expiry()
        if nxt is None:
            return
        delay = max((nxt - time.time_ns()) / 1e9, 0.0) + 0.001
        if self._expiry is not None:
            if self._expiry.when() <= loop.time() + delay:
                return
            self._expiry.cancel()
        self._expiry = loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        if not self._subs:
            return
        self.store.expire_msgs()
        self._arm_expiry()

    def _on_marker(self, subject: str, hdr: bytes) -> None:
        """A subject delete marker the store asks for as it expires a subject's last message: the leader
        proposes it as a message (as nats-server's leader does); a follower stores the leader's."""
        if self._lead_subs is not None and self.raft.role == LEADER:
            self._propose_msg(subject, "", hdr, b"")

    def _last_msg_id_fails(self, x: ge.StreamMsg, hdr: bytes) -> bool:
        """``Nats-Expected-Last-Msg-Id`` is checked as every nats-server replica checks it when it applies the
        message: a mismatch is not stored and counts as a failed proposal (the later entries' sequences move
        down by one); the leader answers the error."""
        want = H.get_header(hdr, H.EXPECTED_LAST_MSG_ID)
        if not want or want == self.lmsgid:
            return False
        self.clfs += 1
        if x.subject in self._inflight_subj:
            self._inflight_add(x.subject, self._msg_size(x.subject, hdr, bytes(x.msg)), -1)
        mid = H.get_header(hdr, H.MSG_ID)
        if mid:
            self._inflight_ids.pop(mid, None)
        if x.reply and self._lead_subs is not None:
            self._pub_error(x.reply.encode(), ApiError.make("STREAM_WRONG_LAST_MSG_ID", id=self.lmsgid))
        return True

    def _rollup(self, seq: int, subject: str, hdr: bytes) -> None:
        """A stored message's rollup, as every nats-server replica applies it (where the stream allows rollups
        and purges): the subject's, or the whole stream's, earlier messages go."""
        cfg = self.assignment["stream"]
        if not cfg.get("allow_rollup_hdrs") or cfg.get("deny_purge"):
            return
        v = H.get_header(hdr, H.ROLLUP)
        if v == "sub":
            self.store.purge(subject=subject, seq=seq, keep=0)
        elif v == "all":
            self.store.purge(subject=None, seq=seq, keep=0)

    def _apply(self, item: Committed) -> None:
        e = item.entry
        if item.snapshot or e.type == gw.ENTRY_SNAPSHOT:
            self._install(item)
            return
        if e.type != gw.ENTRY_NORMAL:
            return
        x = ge.decode_entry(e.data)
        if isinstance(x, ge.BatchMsg):
            x = x.inner
        if isinstance(x, ge.CompressedStreamMsg):
            x = x.msg
        if isinstance(x, ge.StreamMsg):
            seq = x.lseq + 1 - self.clfs
            if seq <= self.store.state().last_seq:
                return  # already stored (a replay)
            hdr = bytes(x.hdr)
            if hdr and b"Nats-Expected-Last-Msg-Id" in hdr and self._last_msg_id_fails(x, hdr):
                return
            ttl = self._ttl(hdr) if hdr and b"Nats-TTL" in hdr else 0
            self.store.store_raw(seq, x.subject, hdr, bytes(x.msg), x.ts, ttl=ttl)
            self.applied_msgs += 1
            if ttl or (self._expiry is None and self.store.cfg.max_age):
                self._arm_expiry()
            if x.subject in self._inflight_subj:
                self._inflight_add(x.subject, self._msg_size(x.subject, hdr, bytes(x.msg)), -1)
            if hdr and b"Nats-Rollup" in hdr:
                self._rollup(seq, x.subject, hdr)
            mid = H.get_header(hdr, H.MSG_ID) if hdr and b"Nats-Msg-Id" in hdr else None
            self.lmsgid = mid or ""
            if mid:
                self.ddmap[mid] = (seq, x.ts)
                self._inflight_ids.pop(mid, None)
            if x.reply and self._lead_subs is not None:
                self.aic.publish(x.reply.encode(), None, self._pub_ack(seq))
                self.acked += 1
        elif isinstance(x, ge.JsonEntry) and isinstance(x.doc, dict):
            doc = x.doc
            if x.op == ge.OP_DELETE_MSG:
                seq = int(doc.get("seq", 0))
                removed = self.store.remove_msg(seq, erase=not doc.get("no_erase", False))
                if self._lead_subs is not None and doc.get("reply"):
                    resp: dict[str, Any] = {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response"}
                    if removed:
                        resp["success"] = True
                    else:
                        resp["error"] = ApiError.make("SEQUENCE_NOT_FOUND", seq=seq).to_dict()
                    self.ic.publish(str(doc["reply"]).encode(), None, json.dumps(resp, separators=(",", ":")).encode())
            elif x.op == ge.OP_PURGE_STREAM:
                req = doc.get("request") or {}
                purged = self.store.purge(subject=req.get("filter") or None, seq=int(req.get("seq", 0) or 0),
                                          keep=int(req.get("keep", 0) or 0))
                if self._lead_subs is not None and doc.get("reply"):
                    self._answer(str(doc["reply"]).encode(), {"type": "io.nats.jetstream.api.v1.stream_purge_response",
                                                             "success": True, "purged": purged})
            elif x.op == ge.OP_DELETE_RANGE:
                first, num = int(doc.get("first", 0)), int(doc.get("num", 0))
                for seq in range(first, first + num):
                    self.store.remove_msg(seq)
            else:
                raise gw.GoWireError(f"op {x.op} in a stream group")
        else:
            raise gw.GoWireError(f"{type(x).__name__} in a stream group")


class GoConsumerReplica(KeptConsumerState, ConsumerLeading, GoMetaMember):
    """One consumer group of a Go cluster, followed from this server: its entries applied to
    ``ConsumerReplicaState`` and its snapshots installed; led as nats-server's consumer leader with ``may_lead``
    (rillet.jetstream.cluster.goconsumerlead), else handed to a Go peer when elected."""

    KIND = "consumer group"

    def __init__(self, server: Any, account: str, stream: str, assignment: dict,
                 store_dir: Optional[str] = None) -> None:
        super().__init__(server, group=assignment["group"]["name"], store_dir=store_dir)
        self.account, self.stream, self.name = account, stream, assignment["name"]
        self.assignment = assignment
        self.state = None
        cfg = assignment.get("consumer") or {}
        self.consumer = ConsumerReplicaState(ack_policy=str(cfg.get("ack_policy") or "explicit"),
                                             max_deliver=int(cfg.get("max_deliver") or 0))
        self.unapplied_snapshots = 0
        self.snapshots_installed = 0
        self.snapshot_every = SNAPSHOT_EVERY
        self.ops: dict[str, int] = {}  # entries applied, by kind
        self.rillet_peers: set[str] = set()  # (host_streams: the meta member's, filled from route INFO)
        self.may_lead = False  # (host_streams with lead: see goconsumerlead)
        self.solo = False  # a one-replica consumer placed here, led without a group (host_streams with lead)
        self.member: Any = None
        self._lead: Optional[list] = None
        self._lead_pending = False
        peers = [p for p in ((assignment.get("group") or {}).get("peers") or ()) if isinstance(p, str)]
        if peers and not self.raft.peers:  # (a group starts with the peers of its assignment)
            self.raft.peers = set(peers)
            self.raft.cluster_size = len(peers)
        self.keep_state(store_dir)  # (its state and RAFT position kept on disk: goconsumerstore)

    def lead_alone(self) -> None:
        """(GroupMigration.lead_alone) A group grown from this server alone with the state of its previous group
        carried over (host_streams) but not in this group's log: the log starts with that state as a snapshot,
        so that the peers added are sent it first, as nats-server's consumer leader sends its state to the group
        when it scales up."""
        r = self.raft
        if self.consumer.has_state and r.pindex == 0 and not r._log and r.catchup is None:
            r.term = max(r.term, 1)
            r.base_index, r.base_term = 1, r.term
            r.commit = r.applied = 1
            r.snapshot_data = encode_consumer_state(self.consumer)
            r.snapshot_peer_state = gw.PeerState((self.peer,), 1, r.domain_ext).encode()
        super().lead_alone()

    def _pass_target(self) -> Optional[str]:
        """Elected without leading (``pass_leadership``): the group goes to a current Go peer, or else to any
        current peer (another Rillet server would hand it on again)."""
        current = sorted(p for p in self.raft.peers if p != self.peer and self.raft.current(p))
        return next((p for p in current if p not in self.rillet_peers), current[0] if current else None)

    def _commit(self, done: list[Committed]) -> None:
        c = self.consumer
        for item in done:
            e = item.entry
            try:
                if item.snapshot or e.type == gw.ENTRY_SNAPSHOT:
                    if self._lead is None:
                        if c.restore(decode_consumer_state(e.data)):
                            self.snapshots_installed += 1
                        else:
                            self.unapplied_snapshots += 1
                    continue
                if e.type != gw.ENTRY_NORMAL:
                    continue
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
                    if self._lead is None:  # (as nats-server: the leader keeps its own waiting requests)
                        (c.pull_requests.add if x.add else c.pull_requests.discard)(x.reply)
                else:
                    raise gw.GoWireError(f"{type(x).__name__} in a consumer group")
                if self._lead is not None:
                    self._leader_applied(x)
            except gw.GoWireError as err:
                self._not_applied(err, item.index, f"JetStream consumer '{self.account} > {self.stream} > "
                                                   f"{self.name}' [{self.group}]")
        if done:
            self._maybe_compact()
            self.applied_kept(done)

    def _maybe_compact(self) -> None:
        """Every ``snapshot_every`` applied entries the log up to the commit is replaced by nats-server's
        consumer state snapshot (the replicated state), as its replicas compact theirs."""
        r = self.raft
        if (r.catchup is not None or self.apply_errors or r.applied != r.commit
                or r.commit - r.base_index < self.snapshot_every):
            return
        from rillet.jetstream.cluster.golead import GoRaftPeer
        ps = r.peer_state().encode() if isinstance(r, GoRaftPeer) else gw.PeerState(
            tuple(sorted(r.peers)), r.cluster_size, r.domain_ext).encode()
        r.compact(r.commit, encode_consumer_state(self.consumer), ps)
        self.snapshots_taken += 1


from rillet.jetstream.cluster.gosolo import is_solo  # noqa: E402

NEW_GROUP_AGE = 30.0  # seconds: an assignment created this lately is a group being created


def _fresh(r: GoMetaMember) -> bool:
    """Whether a replica is one of a group being created: nothing stored or applied here, and its assignment
    made in the last NEW_GROUP_AGE seconds (a restarted server's replicas are not: their empty logs vote as
    empty, so that they never make a quorum that lacks what they acknowledged before)."""
    store = getattr(r, "store", None)
    if store is not None and (store.state().last_seq or getattr(r, "applied_index", 0)):
        return False
    if isinstance(r, GoConsumerReplica) and r.consumer.has_state:
        return False
    try:
        created = time_ns(str(r.assignment.get("created") or "")) / 1e9
    except (GoTimeError, ValueError):
        return False
    return created > 0 and abs(time.time() - created) < NEW_GROUP_AGE


def grown_from(assignment: dict, me: str) -> bool:
    """nats-server's isR1ScaleUpSource: the assignment grows a one-replica group whose only peer was this server
    (a scale-up from R1: its desired state's origin is this server alone at one replica). nats-server's meta
    leader names such a group anew (a group of one has no RAFT state to keep) and makes this server its
    preferred peer, as the one with the data."""
    g = assignment.get("group") or {}
    d = g.get("desired") or {}
    if len(d.get("peers") or ()) < 2 or me not in d["peers"]:
        return False
    o = d.get("origin")
    if o is not None:
        return o.get("replicas") == 1 and list(o.get("peers") or ()) == [me]
    # (a consumer's desired state has no origin: its group of one, this server, grown with it as preferred)
    return list(g.get("peers") or ()) == [me] and d.get("preferred") == me


def _hand_over(solo: Any, replicas: dict, state: Any, store_dir: str, me: str) -> dict[tuple, ConsumerReplicaState]:
    """One-replica streams run here by gosolo that the meta group now grows from this server (a scale-up from
    R1): each goes over to the replica of its new group with its files (its messages, as nats-server's source of
    a scale-up keeps its store), its group and creation time written beside them and an applied index of 1, so
    that the replica leads the group from them (``lead_alone``: its log starts with its store as a snapshot,
    which the peers added are sent). Returns its consumers' states, keyed as their replicas, for the replicas
    of their groups to start from."""
    out: dict[tuple, ConsumerReplicaState] = {}
    for key, sa in state.streams.items():
        if key not in solo.hosted or key in replicas or not grown_from(sa, me):
            continue
        rdir = os.path.join(store_dir, "go_streams", _safe(key[0]), _safe(key[1]))
        if os.path.exists(rdir):
            shutil.rmtree(rdir)  # (files of an earlier replica of this name: not this stream's, whose are here)
        states = solo.hand_over(key, os.path.join(rdir, "msgs"))
        if states is None:
            continue
        _write_group(rdir, str(sa["group"]["name"]), str(sa.get("created") or ""))
        with open(os.path.join(rdir, "applied"), "wb") as f:
            f.write((1).to_bytes(8, "little") + (0).to_bytes(8, "little"))
        for cname, st in states.items():
            ccfg = ((state.consumers.get(key) or {}).get(cname) or {}).get("consumer") or {}
            out[key + (cname,)] = ConsumerReplicaState(
                delivered_consumer=st.delivered.consumer_seq, delivered_stream=st.delivered.stream_seq,
                ack_floor_consumer=st.ack_floor.consumer_seq, ack_floor_stream=st.ack_floor.stream_seq,
                pending={int(s): (int(p[0]), int(p[1])) for s, p in st.pending.items()},
                redelivered={int(s): int(n) for s, n in st.redelivered.items()},
                ack_policy=str(ccfg.get("ack_policy") or "explicit"), max_deliver=int(ccfg.get("max_deliver") or 0),
                has_state=True)
    return out


def host_streams(member: GoMetaMember, store_dir: Optional[str] = None,
                 lead: bool = False, stand: bool = False) -> dict[tuple, GoMetaMember]:
    """Follow every stream and consumer the meta group assigns to this server (and leave those it takes
    away); returns the live map of replicas: (account, stream) -> GoStreamReplica and
    (account, stream, consumer) -> GoConsumerReplica. With ``store_dir`` a stream replica keeps its messages
    in a file store, its applied index and its group's term and vote there (a restart resumes from them).
    ``lead``: a stream replica named by a leadership transfer leads its group; ``stand`` (with ``lead``): it
    also stands for election on its own (gostreamlead.StreamLeading.stand_in_group)."""
    replicas: dict[tuple, GoMetaMember] = {}
    pruned: list[bool] = []  # (kept consumer states of consumers not placed here: removed once, when current)
    if store_dir and lead:
        # one-replica streams placed here: run by Rillet's own engine (no RAFT group, as nats-server's R1)
        from rillet.jetstream.cluster.gosolo import SoloHost
        member.solo = SoloHost(member, store_dir)

    def kept(key: tuple, sa: dict) -> bool:
        """A stream whose group the meta layer left as this server alone, no change pending (``is_solo``), while
        this server holds a replica of that very group (running, or its files after a restart): not a
        one-replica stream for gosolo to create empty, but the replica's group going on with its one member
        (``lead_alone``), every message it stored kept, as nats-server's replica keeps its store when its
        group drops to one peer."""
        solo = member.solo
        if solo is None or not is_solo(sa, member.peer):
            return False
        group = str((sa.get("group") or {}).get("name") or "")
        if key in replicas:
            return True  # (nats-server renames a group of one, e.g. at the end of a scale-down: the same stream)
        if not store_dir or key in solo.hosted:
            return False
        return files_of(store_dir, key[0], key[1], sa)

    def reconcile() -> None:
        me = member.peer
        solo = member.solo
        removals, member.state.removals = member.state.removals, []
        # (while catching up after a restart the assignments are a prefix of the history: nothing that is
        # missing from them is deleted, and only a removal of the very group kept here applies)
        current = member.raft.catchup is None and member.raft.commit > 0
        if solo is not None:
            for kind, account, stream, name, reply in removals:
                gone = replicas.get((account, stream, name))
                if current and kind == "consumer" and isinstance(gone, GoConsumerReplica) and gone.solo:
                    gone.answer_removed(reply)
                if kind == "stream":
                    solo.removed_stream(account, stream, name, reply)
                elif current:
                    solo.removed_consumer(account, stream, name, reply)
        keep = {key for key, sa in member.state.streams.items() if kept(key, sa)}
        handed = _hand_over(solo, replicas, member.state, store_dir, me) if solo is not None and store_dir else {}
        if solo is not None:
            solo.reconcile({k: sa for k, sa in member.state.streams.items() if k not in keep},
                           member.state.consumers, fresh=current)
        want: dict[tuple, tuple[str, dict]] = {}
        for key, sa in member.state.streams.items():
            if solo is not None and is_solo(sa, me) and key not in keep:
                continue
            if me in ((sa.get("group") or {}).get("peers") or ()):
                want[key] = ("stream", sa)
            for cname, ca in (member.state.consumers.get(key) or {}).items():
                if me in ((ca.get("group") or {}).get("peers") or ()):
                    want[key + (cname,)] = ("consumer", ca)
        carried: dict[tuple, ConsumerReplicaState] = handed
        if current and store_dir and not pruned:
            pruned.append(True)  # (not the files of replicas running: those that go remove their own on stop)
            prune_orphans(store_dir, {k for k, (kind, _a) in want.items() if kind == "consumer"}
                          | {k for k in replicas if len(k) == 3}, member.log)
            prune_groups(store_dir, {str(a["group"]["name"]) for _k, a in want.values()}
                         | {r.group for r in replicas.values()}, member.log)
            prune_streams(store_dir, {k for k, (kind, _a) in want.items() if kind == "stream"}
                          | {k for k in replicas if len(k) == 2}, member.log)
        for key in list(replicas):
            r = replicas[key]
            if key not in want or want[key][1]["group"]["name"] != r.group:
                # a group left as this server alone and renamed (nats-server names a group of one anew): the
                # replica's files stay for the replica of the new name, a consumer's state goes over to it
                alone = key in want and is_solo(want[key][1], me)
                # the same for a group of one here grown again (a scale-up from R1, renamed once more): the
                # replica of the new name starts from these files and this state, as nats-server's source of
                # the scale-up keeps its stream and sends it to the new peers as a snapshot
                grown = key in want and is_solo(r.assignment, me) and grown_from(want[key][1], me)
                if isinstance(r, GoStreamReplica):
                    r.stop(remove=not ((alone and key in keep) or grown))
                else:
                    r.stop(remove=not (alone or grown))
                    if (alone or grown) and isinstance(r, GoConsumerReplica) and r.consumer.has_state:
                        carried[key] = r.consumer
                del replicas[key]
                if store_dir:  # (its term and vote: this server is no longer a member of that group)
                    forget_group(store_dir, r.group, member.log)
        for key, (kind, a) in want.items():
            if key in replicas:
                if replicas[key].assignment is not a:
                    replicas[key].reassigned(a)
                continue
            r = (GoStreamReplica(member.server, key[0], a, store_dir) if kind == "stream"
                 else GoConsumerReplica(member.server, key[0], key[1], a, store_dir))
            if key in carried and isinstance(r, GoConsumerReplica):
                r.consumer = carried[key]
            if lead:
                r.may_lead = True
                r.member = member
                r.raft.lead_on_transfer = True
                if isinstance(r, GoConsumerReplica):
                    r.rillet_peers = member.rillet_peers
                    # (a new leader's first entry, its peer state, commits what earlier terms left: the
                    # consumer's state is complete before it delivers)
                    r.raft.announce_peers = True
                    r.solo = is_solo(a, me)
                if stand and not getattr(r, "solo", False):
                    r.stand_in_group()
                elif isinstance(r, GoStreamReplica):
                    r.stand_alone = True  # (stands only as the group's sole member: GoMetaMember._alone)
            else:
                r.pass_leadership = True
                r.rillet_peers = member.rillet_peers
            grp = a.get("group") or {}
            rillet = member.rillet_peers | {me}
            # a member of a group being created (whoever leads it): as nats-server's node made for an assignment
            # that is not replayed at start-up (``Recovering``) with an empty log, it is initializing, its
            # empty log voting as a full one until it holds an entry. (A restarted server's replica is not: its
            # log was in memory, its empty log must not help elect a leader lacking what it acknowledged;
            # ``_fresh`` tells them apart by the store and the assignment's age.)
            creating = (current and not getattr(r, "solo", False) and r.raft.pindex == 0 and not grp.get("desired")
                        and _fresh(r))
            if creating:
                r.raft.initializing = True
            new_group = (creating and lead and stand and grp.get("preferred") in rillet
                         and (member.raft.leader in rillet or set(grp.get("peers") or ()) <= rillet))
            if new_group:
                # a new group whose preferred peer is a Rillet server, placed by a Rillet meta leader (it
                # prefers a Go server whenever one is online, so none is), or by a Go meta leader on Rillet
                # servers only (a cluster of Rillet servers in a super-cluster: no Go peer would ever stand). A
                # Go meta leader's choice of a Rillet server in a group with Go peers is left to the Go peers'
                # election: docs/mixed-clusters.md. The preferred peer campaigns at once and answers the create
                # once elected
                if grp.get("preferred") == me:
                    r.create_reply = str(a.get("reply") or "")
            r.start()
            replicas[key] = r
            if getattr(r, "solo", False):
                r.lead_solo(answer=current)
            elif new_group and grp.get("preferred") == me:
                r.campaign(retries=20)
            # (a new group with Go peers whose preferred leader is this server: the Go peers elect one of them
            # after their election timeout, 4-9 s. Standing at once, answering the create and handing over a few
            # seconds later was tried: the Go peers of a stream a moment old ignore a transfer. Standing at once,
            # committing a first entry and stepping aside with an empty-log vote request was tried too: the Go
            # followers of a moment-old group did not keep that entry, our longer log then refused their votes
            # and the group stayed leaderless. Not done: docs/mixed-clusters.md.)
        for key, r in replicas.items():  # (a stream replica replaced under its consumers' leaders: relinked)
            srep = replicas.get(key[:2])
            if isinstance(r, GoConsumerReplica) and r._lead is not None and getattr(r, "srep", srep) is not srep:
                r._stop_leading()
                r._start_leading()
        if current:  # (a prefix of the history replayed after a restart may be stale: only the present one)
            for key, (kind, a) in want.items():
                r = replicas[key]
                if is_solo(a, me) and isinstance(r, (GoStreamReplica, GoConsumerReplica)) and \
                        not getattr(r, "solo", False):
                    r.lead_alone()  # (the group left as this server alone, its replica kept: led alone)
                elif grown_from(a, me) and r.raft.peers == {me} and \
                        isinstance(r, (GoStreamReplica, GoConsumerReplica)):
                    # (a group grown from this server alone: it leads at once, its log starting at what its
                    # store holds, and adds the new peers, which it catches up from a snapshot)
                    r.lead_alone()

    member.on_applied.append(reconcile)
    reconcile()
    return replicas
