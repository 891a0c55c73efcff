"""Which of this server's stream and consumer group members existed here before: a member that starts with no
state on disk although it had acknowledged entries (its store was wiped) must not vote, nor count toward a
commit, until it caught up from a leader (rillet.raft: ``recovering`` with ``votes_lost``). Otherwise it can
elect a member lacking entries that it and a server now down had committed, and those entries are given again
(tests/faults/wiped-vote.md: the drill's seed 11).

The signal is where the meta layer got the assignment naming this server (``MemberHistory``, kept by the meta
layer, ``JetStreamCluster.members``):

1. re-applied from this server's own meta WAL at start: not by itself (a member that never wrote anything before
   a crash, e.g. of a stream created just before a kill-all, holds no state either and acknowledged nothing);
   only as in case 2, from the index saved then (``JOIN_FILE``);
2. this server's meta member itself started without state (wiped, or brand new) and the assignment is one
   committed before it first heard the leader's commit (or came in a snapshot installed before): this server
   may have had the member in a previous life (``old``: conservative for a new server, which catches up from the
   leader at once when the others are up). That index is saved, so a restart before a member started still
   finds it wiped;
3. the meta member started with state and the assignment came by catch-up beyond its own WAL (a group created, or
   this server added, while it was down): it never had the member;
4. a live entry (a new stream, a scale-up, a move): nor here.

A member whose group directory is gone although this server started it before (``started``: the names of the
groups whose member started here, kept in the meta group's directory, ``MEMBERS_FILE``, written and fsynced once
the member's directory exists, before it can acknowledge anything) is wiped too: the directory was deleted by
hand, the meta state kept. A member that started and crashed before it wrote anything still has its directory
(``peers.json``): not wiped, it acknowledged nothing.

A group whose name is ``old`` (or hand-deleted) and whose member starts with no state on disk starts recovering without votes
(``RaftGroup.start``). That lasts until it has caught up, across restarts: a ``wiped`` file in the group's
directory (``mark``, removed by ``unmark`` once it recovered), for a member stopped before it caught up holds a
hard state and part of the log, and is no less wiped. Memory-storage groups never do: after a restart every one of them starts empty, and
stalling every R3 memory stream while another server is down is a separate decision.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional

from rillet.durable import fsync_dir, make_dirs_durable, write_json

MARKER = "wiped"  # in the group's WAL directory: a wiped member that has not caught up yet
JOIN_FILE = "joined_at"  # in the meta group's directory: the join_commit of its last stateless start
MEMBERS_FILE = "members.json"  # in the meta group's directory: the groups whose member started here


class MemberHistory:
    """(the meta layer's) The names of the stream and consumer groups this server had a member of before
    (``old``), and what tells them: the meta member's start (``started``) and each applied assignment."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.old: set[str] = set()
        self.stateless_start = False  # the meta member started with no state on disk
        self.join_commit: Optional[int] = None  # (stateless start) the first leader's commit heard
        # (a start with state) the join_commit of this server's last stateless start, saved (``JOIN_FILE``): the
        # assignments up to it, re-applied from the WAL, are still of members it may have had before that
        self.wiped_through = 0
        self.dir = ""
        self.meta_name = ""
        self.saved = False
        self.starting = False  # within the meta group's start (a snapshot restored there is this server's own)
        self.started_here: set[str] = set()  # (MEMBERS_FILE) the groups whose member started on this server

    def load(self, dirpath: str) -> None:
        """Before the meta group starts (in ``dirpath``): the index saved at this server's last stateless start."""
        self.dir = dirpath
        self.meta_name = os.path.basename(dirpath)  # (the meta group itself is not recorded)
        self.join_commit = None
        self.saved = False
        try:
            with open(os.path.join(dirpath, JOIN_FILE), "rb") as f:
                self.wiped_through = int(f.read().decode("ascii", "replace").strip() or 0)
        except (OSError, ValueError):
            self.wiped_through = 0
        try:
            with open(os.path.join(dirpath, MEMBERS_FILE), "rb") as f:
                names = json.loads(f.read())
            self.started_here = {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()
        except (OSError, ValueError):
            self.started_here = set()  # (none recorded: a wiped meta state is found by ``started``)

    def _save_members(self) -> None:
        make_dirs_durable(self.dir)
        write_json(self.dir, MEMBERS_FILE, sorted(self.started_here))

    def started(self, node: Any) -> None:
        """The meta group's node just started from what the WAL held."""
        self.stateless_start = node.term == 0 and node.last_index() == 0 and node.offset == 0
        if self.stateless_start:
            self.wiped_through = 0

    def _save(self) -> None:
        """(stateless start) ``join_commit`` saved, fsynced, once it is known and an old group was recorded (a
        brand-new server or cluster saves nothing): before that group's member is created."""
        if self.saved or not self.stateless_start or self.join_commit is None or not self.old or not self.dir:
            return
        make_dirs_durable(self.dir)
        write_json(self.dir, JOIN_FILE, self.join_commit)  # (an integer: read back by ``load``)
        self.saved = True

    def committing(self, node: Any) -> None:
        """(RaftGroup.apply_batch of the meta group) Committed entries are about to be applied (noops too): the
        first time, the commit index known then is the leader's as first heard (``join_commit``; a leader's own:
        a brand-new group's first commit). What was committed up to there, this server may have had. Saved
        (fsynced) before any is applied: a member of those groups that has not started or caught up before the
        next restart is still wiped then."""
        if self.stateless_start and self.join_commit is None:
            self.join_commit = max(node.leader_commit, node.commit)
            self._save()

    def is_old(self, index: int) -> bool:
        """Whether the meta entry at ``index``, being applied, is one of a group this server may have had a
        member of before its meta state was lost (case 2; also re-applied at a later start)."""
        if not self.stateless_start:
            return index <= self.wiped_through
        return self.join_commit is None or index <= self.join_commit

    def restored(self) -> bool:
        """Whether the assignments of a snapshot being restored are old: at start, when this server's meta state
        was lost once (``wiped_through``: which of them came before is not known); on a member that started
        stateless and had not yet heard the leader's commit."""
        if self.starting:
            return self.wiped_through > 0
        return self.stateless_start and self.join_commit is None

    def stream(self, sa: Any, old: bool) -> None:
        """A stream assignment applied (with its consumers)."""
        self.consumer(sa, old)
        for ca in sa.consumers.values():
            self.consumer(ca, old)

    def consumer(self, ca: Any, old: bool) -> None:
        """A consumer assignment applied (or a stream's: the same for its own group)."""
        if self.peer in ca.group.peers:
            if old:
                self.old.add(ca.group.name)
                self._save()
        else:
            self.old.discard(ca.group.name)


def existing_member(server: Any, name: str) -> bool:
    """Whether this server had a member of group ``name`` before (``MemberHistory``)."""
    cl = getattr(getattr(server, "jetstream", None), "cluster", None)
    h = getattr(cl, "members", None)
    return isinstance(h, MemberHistory) and name in h.old


def _history(server: Any) -> Optional[MemberHistory]:
    cl = getattr(getattr(server, "jetstream", None), "cluster", None)
    h = getattr(cl, "members", None)
    return h if isinstance(h, MemberHistory) and h.dir else None


def hand_deleted(server: Any, name: str, dir_existed: bool) -> bool:
    """(a member starting with no state) Its directory did not exist, yet its member started on this server
    before (``MEMBERS_FILE``): deleted by hand, the meta state kept."""
    h = _history(server)
    return not dir_existed and h is not None and name in h.started_here


def started(server: Any, name: str, dirpath: str) -> None:
    """The member of group ``name`` started here, its directory ``dirpath`` made: recorded durably (once), after
    the directory's entry and its ``peers.json`` are (a power cut must not leave the record without the
    directory: a member that wrote nothing would be taken for a deleted one)."""
    h = _history(server)
    if h is not None and name not in h.started_here and name != h.meta_name:
        fsync_dir(os.path.dirname(dirpath))
        fsync_dir(dirpath)
        h.started_here.add(name)
        h._save_members()


def forgotten(server: Any, name: str) -> None:
    """The member of group ``name`` left this server with its directory (a deleted stream, a move)."""
    h = _history(server)
    if h is not None and name in h.started_here:
        h.started_here.discard(name)
        h._save_members()


def marked(dirpath: str) -> bool:
    """A member whose store was wiped and that has not caught up since (``mark``)."""
    return os.path.exists(os.path.join(dirpath, MARKER))


def mark(dirpath: str) -> None:
    """Record durably that the member in ``dirpath`` was wiped and has not caught up."""
    make_dirs_durable(dirpath)
    with open(os.path.join(dirpath, MARKER), "wb") as f:
        os.fsync(f.fileno())
    fsync_dir(dirpath)


def unmark(dirpath: str) -> None:
    """The member caught up (it left the recovery): no longer wiped."""
    try:
        os.unlink(os.path.join(dirpath, MARKER))
    except FileNotFoundError:
        return
    fsync_dir(dirpath)
