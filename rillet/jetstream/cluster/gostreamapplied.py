"""A Go stream group's replica on a Rillet server: the RAFT position kept beside its file store (the ``applied``
file), so that a restarted replica's log starts where its store is, as at a snapshot of it.

The file holds the index applied to the store, the count of failed proposals (``clfs``), the term of the
entry at that index and the store's last sequence then (u64 little-endian each; files of 8 and 16 bytes,
written before the term was kept, give no term; 24 bytes, no last sequence). It is written after each batch of
committed entries is applied, with the store's own write-back (no fsync of its own: it is written when the
entries' effects are). So after a power cut under the lazy default the file can be ahead of what the store
kept: a store that comes back with a lower last sequence than the file says is reported (an error in the log)
and fetched again from the group's leader, as nats-server's replica whose store is behind a snapshot fetches
what it lacks (``processSnapshot``): the log starts at the index all the same, the lost tail is asked for with
a ``$JSC.SYNC`` catch-up (``first_seq`` the store's last sequence + 1, ``last_seq`` the kept one,
``min_applied`` the index; the leader answers with the messages, flow-controlled on ``$JSC.ACK``), and the
entries committed meanwhile wait for it (``GoStreamReplica._snap``). While it catches up the replica neither
stands for election nor answers direct gets. A group of this server alone has nobody to fetch from: the loss
is reported and the position claimed as before.

On a restart (``start_at_applied``) a replica whose file gives the index and its term starts its log there:
base index and term, the store's state as its stream snapshot (nats-server's encoding), commit and applied at
that index. Its votes and append-entry answers then give that position, as a Go replica's kept log gives its
own, and the leader resumes it from the next index (nats-server's catchupFollower starts at the follower's
index + 1, or sends its snapshot when its log no longer has it). Before, the log was empty after a restart: the
replica voted as empty and the leader sent its whole log again (what was applied was skipped). A snapshot a
Rillet leader would send a lagging peer is that state. Without a term (an older file, or one written while the
log did not hold the applied index: a snapshot installed past it during a catch-up) the log stays empty, as
before.
"""
from __future__ import annotations

import os
from typing import Any

from rillet.jetstream.cluster import gowire as ge
from rillet.raft import gowire as gw

__all__ = ["kept_last_seq", "load_applied", "save_applied", "start_at_applied"]


def load_applied(path: str) -> tuple[int, int, int]:
    """(applied index, failed proposals, term of the applied entry) kept in ``path``; zeros when there is no
    file, ValueError when it is not one."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return 0, 0, 0
    if len(raw) not in (8, 16, 24, 32):
        raise ValueError(f"{path}: not an applied index ({len(raw)} bytes)")
    return (int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little"),
            int.from_bytes(raw[16:24], "little"))


def kept_last_seq(path: str) -> int:
    """The store's last sequence when ``path`` was written (0: not kept, or no file)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return 0
    return int.from_bytes(raw[24:32], "little") if len(raw) == 32 else 0


def save_applied(path: str, index: int, clfs: int, term: int, last_seq: int = 0) -> None:
    """(with the store's own write-back: written when the entries' effects are, without an fsync of its own)"""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(index.to_bytes(8, "little") + clfs.to_bytes(8, "little") + term.to_bytes(8, "little")
                + last_seq.to_bytes(8, "little"))
    os.replace(tmp, path)


def start_at_applied(rep: Any, term: int) -> bool:
    """A restarted stream replica (``rep``: a GoStreamReplica, its store open, ``applied_index`` loaded) whose
    applied entry's ``term`` is known: its empty log starts at that index, the store's state as the snapshot.
    Returns whether it did."""
    r = rep.raft
    if not (rep.applied_index > 0 and term > 0 and r.pindex == 0 and not r._log):
        return False
    kept, last = kept_last_seq(rep._applied_path), rep.store.state().last_seq
    lost = kept > last
    others = set(r.peers) - {rep.peer}
    if lost and not (others and rep.assignment.get("sync")):
        rep.log.error(f"JetStream stream '{rep.account} > {rep.name}' [{rep.group}]: its store lost messages "
                      f"(last sequence {last}, {kept} when index {rep.applied_index} was applied)"
                      + (": no other replica to fetch them from" if not others else
                         ": its log does not start at that index (the assignment has no sync subject)"))
        if others:
            return False
    r.base_index, r.base_term = rep.applied_index, term
    r.commit = r.applied = rep.applied_index
    r.term = max(r.term, term)
    snap = rep.stream_snapshot()
    if lost and others:
        # (the log's snapshot is the state the store had at the index: its last sequence the kept one; the
        # snapshot of the store itself replaces it once the catch-up completes, GoStreamReplica._caught_up)
        snap = ge.StreamSnapshot(snap.msgs, snap.bytes, snap.first_seq, kept, snap.failed, snap.deleted, None)
        rep._snap, rep._snap_index = snap, rep.applied_index
        rep.log.error(f"JetStream stream '{rep.account} > {rep.name}' [{rep.group}]: its store lost messages "
                      f"(last sequence {last}, {kept} when index {rep.applied_index} was applied): fetching "
                      f"{last + 1}..{kept} again from the leader")
    r.snapshot_data = snap.encode()
    r.snapshot_peer_state = gw.PeerState(tuple(sorted(r.peers)), r.cluster_size, r.domain_ext).encode()
    rep.log.notice(f"JetStream stream '{rep.account} > {rep.name}' [{rep.group}]: its log starts at the index its "
                   f"store was applied up to ({rep.applied_index}, term {term})")
    return True
