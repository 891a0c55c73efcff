"""A Go consumer group's replica state kept on disk by a Rillet server, as nats-server's consumer store keeps
its own (filestore.go consumerFileStore: ``o.dat`` in the consumer's directory), so that a restarted server's
replica has its state at once instead of being empty until the leader sends its log or a snapshot again.

What is kept, in ``<store_dir>/go_consumers/<account>/<stream>/<consumer>/state.json`` (one file, replaced
whole by an atomic rename): the replicated state in nats-server's encoding (store.go ``encodeConsumerState``,
base64), the RAFT index it was applied up to and that entry's term, the group's name and the consumer's
creation time. When it is written, as nats-server's flusher writes ``o.dat``: after a change, at most every
``FLUSH_EVERY`` seconds (its flushLoop keeps "about 10 updates per second per consumer"), and when the replica
stops. Its fsync: with ``jetstream { sync_interval: always }`` every write, as nats-server's replicated
consumer stores then write with ``O_SYNC`` and sync their directory (SyncAlways relaxed to SyncOnFlush for a
replicated store: the same for this file); otherwise once ``sync_interval`` has passed since the last one (the
periodic sync the configuration promises the stores; nats-server itself never fsyncs ``o.dat`` then).

On a restart (``ConsumerStateFile.load``, from ``GoConsumerReplica``'s construction) the replica takes that
state, and its RAFT log starts at the kept index as at a snapshot of it (base index and term, the state as
snapshot data): its votes and append-entry answers give that position, as a Go replica with a kept log gives
its own, and the leader resumes from the next index (nats-server's catchupFollower starts at the follower's
index + 1, or sends its snapshot when its log no longer has it). A file of the group's earlier name (a group
renamed while this server was down, same creation time: ``files_of``'s rule for streams) gives the state but
not the position (indexes of another group's log). A file of another consumer of that name (deleted and created
again) is ignored and replaced at the next write. A file that cannot be read is reported and ignored (the
replica starts empty, voting as empty: never as holding what it may not have).

Not kept: the RAFT log itself (entries appended but not yet applied when the server stopped are asked for
again), and the pull requests the leader shares (nats-server does not keep them in ``o.dat`` either).

Files of consumers the meta group no longer places here (removed, or moved away, while this server was down)
are removed once the meta state is current after a start (``prune_orphans``, as nats-server's checkForOrphans
removes the consumers it recovered that have no assignment).
"""
from __future__ import annotations

import base64
import os
import shutil
import time
from typing import Any, Optional

from rillet.durable import fsync_dir, make_dirs_durable, read_json, write_json
from rillet.jetstream.cluster.goconsumerstate import decode_consumer_state, encode_consumer_state
from rillet.raft import gowire as gw

__all__ = ["ConsumerStateFile", "KeptConsumerState", "FLUSH_EVERY", "prune_orphans"]

FLUSH_EVERY = 0.1  # seconds: at most one write per consumer in this time (nats-server's flushLoop minTime)
FILE = "state.json"


def _safe(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise ValueError(f"not a usable directory name: {name!r}")
    return name


class ConsumerStateFile:
    """The kept state of one consumer replica (see the module docstring). ``rep``: its GoConsumerReplica."""

    def __init__(self, rep: Any, store_dir: str) -> None:
        self.rep = rep
        self.dir = os.path.join(store_dir, "go_consumers", _safe(rep.account), _safe(rep.stream), _safe(rep.name))
        self.path = os.path.join(self.dir, FILE)
        js = getattr(getattr(rep.server, "opts", None), "jetstream", None)
        interval = getattr(js, "sync_interval", 120.0)
        self.sync_always = interval == "always"
        self.sync_every = float(interval) if isinstance(interval, (int, float)) and interval > 0 else 0.0
        self.applied = 0  # the RAFT index the state was applied up to, and that entry's term
        self.term = 0
        self.dirty = False
        self.writes = self.syncs = 0
        self.loaded: Optional[str] = None  # what load() took: "position" (state and RAFT position), "state"
        self._last_write = 0.0  # (monotonic)
        self._last_sync = time.monotonic()
        self._timer: Any = None
        self._sync_timer: Any = None
        self._unsynced = False  # written since the last fsync
        self._group_on_disk = ""  # the group named by the file on disk ("" when none is ours)

    # -- restart ---------------------------------------------------------------------------------------------
    def load(self) -> None:
        """Take the kept state, if any is this consumer's: into the replica's ConsumerReplicaState, and its RAFT
        position into its log when the file is of this very group."""
        rep = self.rep
        try:
            doc = read_json(self.path, "a consumer replica's state")
        except (OSError, ValueError) as e:
            rep.log.warn(f"JetStream consumer '{rep.account} > {rep.stream} > {rep.name}' [{rep.group}]: its kept "
                         f"state is not used ({e}); the replica starts empty")
            return
        if doc is None:
            return
        try:
            if not isinstance(doc, dict):
                raise ValueError("not an object")
            group, created = str(doc.get("group") or ""), str(doc.get("created") or "")
            applied, term = int(doc.get("applied") or 0), int(doc.get("term") or 0)
            raw = base64.b64decode(str(doc.get("state") or ""), validate=True)
            mine = group == rep.group
            renamed = not mine and bool(created) and created == str(rep.assignment.get("created") or "")
            if not (mine or renamed):
                return  # (another consumer of this name: deleted and created again while we were down)
            if not rep.consumer.restore(decode_consumer_state(raw)):
                return
        except (ValueError, gw.GoWireError) as e:
            rep.log.warn(f"JetStream consumer '{rep.account} > {rep.stream} > {rep.name}' [{rep.group}]: its kept "
                         f"state in {self.path} is not used ({e}); the replica starts empty")
            return
        self._group_on_disk = group
        self.loaded = "state"
        r = rep.raft
        if mine and applied > 0 and term > 0 and r.pindex == 0:
            # the log starts at the kept index, the state its snapshot (as a compacted log of a Go replica)
            r.base_index, r.base_term = applied, term
            r.commit = r.applied = applied
            r.term = max(r.term, term)
            r.snapshot_data = raw
            r.snapshot_peer_state = gw.PeerState(tuple(sorted(r.peers)), r.cluster_size, r.domain_ext).encode()
            self.applied, self.term = applied, term
            self.loaded = "position"
        rep.log.notice(f"JetStream consumer '{rep.account} > {rep.stream} > {rep.name}' [{rep.group}]: kept "
                       f"state loaded (delivered {rep.consumer.delivered_consumer}/{rep.consumer.delivered_stream},"
                       f" ack floor {rep.consumer.ack_floor_consumer}/{rep.consumer.ack_floor_stream}"
                       + (f", at index {applied} of term {term})" if self.loaded == "position" else ")"))

    # -- while running ---------------------------------------------------------------------------------------
    def changed(self, index: int) -> None:
        """Entries up to ``index`` were applied (0: applied without a group, a one-replica consumer): the state
        is written within FLUSH_EVERY seconds."""
        r = self.rep.raft
        if index > 0:
            t = r.term_at(index)
            if t is not None:
                self.applied, self.term = index, t
            else:  # (the log was reset under the state: no position to claim)
                self.applied = self.term = 0
        self.dirty = True
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            return
        loop = getattr(self.rep.server, "loop", None)
        if loop is None:  # (no event loop: unit tests drive flush() by hand)
            return
        delay = max(self._last_write + FLUSH_EVERY - time.monotonic(), 0.0)
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self, sync: bool = False) -> None:
        """Write the state when it changed since the last write (``sync``: fsynced whatever the config)."""
        if not self.dirty:
            return
        rep = self.rep
        if not rep.consumer.has_state:
            self.dirty = False
            return
        now = time.monotonic()
        sync = sync or self.sync_always or (self.sync_every > 0 and now - self._last_sync >= self.sync_every)
        doc = {"group": rep.group, "created": str(rep.assignment.get("created") or ""),
               "applied": self.applied, "term": self.term,
               "state": base64.b64encode(encode_consumer_state(rep.consumer)).decode()}
        self.dirty = False
        try:
            if not os.path.isdir(self.dir):
                make_dirs_durable(self.dir)
            write_json(self.dir, FILE, doc, sync=sync)
        except OSError as e:
            self.dirty = True
            rep._warn_once(f"keep:{e}", f"JetStream consumer '{rep.account} > {rep.stream} > {rep.name}' "
                                        f"[{rep.group}]: its state could not be written: {e}")
            return
        self._group_on_disk = rep.group
        self._last_write = now
        self.writes += 1
        if sync:
            self._last_sync = now
            self.syncs += 1
            self._unsynced = False
        elif self.sync_every > 0:
            self._unsynced = True  # (fsynced by sync_interval's end, whether or not it changes again)
            loop = getattr(rep.server, "loop", None)
            if self._sync_timer is None and loop is not None:
                self._sync_timer = loop.call_later(max(self._last_sync + self.sync_every - now, 0.0), self._sync)

    def _sync(self) -> None:
        self._sync_timer = None
        if not self._unsynced or not os.path.exists(self.path):
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.dir)
        except OSError as e:
            self.rep._warn_once(f"keep:{e}", f"JetStream consumer '{self.rep.account} > {self.rep.stream} > "
                                             f"{self.rep.name}' [{self.rep.group}]: its state could not be synced: {e}")
            return
        self._unsynced = False
        self._last_sync = time.monotonic()
        self.syncs += 1

    def stop(self, remove: bool = False) -> None:
        """The replica stops: its state written (fsynced) when it changed, or, with ``remove`` (the meta group
        took the consumer away from this server), its files removed when they are this group's."""
        for t in (self._timer, self._sync_timer):
            if t is not None:
                t.cancel()
        self._timer = self._sync_timer = None
        if remove:
            self.dirty = False
            if self._group_on_disk == self.rep.group and os.path.isdir(self.dir):
                shutil.rmtree(self.dir)
            return
        self.flush(sync=True)


class KeptConsumerState:
    """GoConsumerReplica's part that keeps its state on disk (``self.kept``, None without a store directory):
    written after entries were applied, flushed when the replica stops, removed with the consumer."""

    kept: Optional[ConsumerStateFile] = None

    def keep_state(self, store_dir: Optional[str]) -> None:
        """(from the replica's construction, once its group's peers are set) Load what is kept, if anything."""
        if store_dir:
            self.kept = ConsumerStateFile(self, store_dir)
            self.kept.load()

    def start(self, js_api: bool = False) -> None:
        super().start(js_api)  # type: ignore[misc]
        k = self.kept
        if k is not None and self.consumer.has_state and k._group_on_disk != self.group:  # type: ignore[attr-defined]
            # (a state carried over from the group's earlier name, or read from the file that name left)
            k.dirty = True
            k._arm()

    def applied_kept(self, done: list) -> None:
        """(from the replica's _commit) Committed entries were applied: the state is to be written."""
        if done and self.kept is not None:
            self.kept.changed(max(item.index for item in done))

    def stop(self, remove: bool = False) -> None:
        super().stop()  # type: ignore[misc]
        if self.kept is not None:
            self.kept.stop(remove)


def prune_orphans(store_dir: str, assigned: set, log: Any) -> int:
    """Remove the kept states under ``store_dir`` of consumers not in ``assigned`` ((account, stream, consumer)
    placed on this server by the current meta state); returns how many went."""
    root = os.path.join(store_dir, "go_consumers")
    removed = 0
    for acc in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        for stream in sorted(os.listdir(os.path.join(root, acc))):
            sdir = os.path.join(root, acc, stream)
            for name in sorted(os.listdir(sdir)):
                if (acc, stream, name) not in assigned:
                    shutil.rmtree(os.path.join(sdir, name))
                    removed += 1
                    log.notice(f"JetStream consumer '{acc} > {stream} > {name}': its kept replica state removed "
                               "(not placed on this server)")
            if not os.listdir(sdir):
                os.rmdir(sdir)
    return removed
