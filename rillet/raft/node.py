"""A RAFT node as a pure object: no clock, no sockets, no disk.

Inputs: ``step(msg)``, ``tick()``, ``propose(data)``, ``propose_conf_change(op, peer)``,
``transfer_leadership(peer)``, ``compact(index, data)``. Output: ``ready()`` returns a ``Ready``; the
driver persists ``snapshot``, ``entries`` and ``hard_state`` (fsync when ``must_sync``), *then* sends
``messages``, applies ``committed_entries`` and calls ``advance(ready)``. ``step``/``tick``/``propose``
may be called between ``ready()`` and ``advance()``; ``ready()`` may not be called twice without
``advance()``.

The algorithm follows the RAFT paper and thesis (Ongaro 2014) with the refinements etcd-io/raft and
hashicorp/raft use: pre-vote (§9.6), check-quorum and a leader lease on votes, single-server membership
changes that take effect when appended (§4.1) and are allowed only after the leader committed an entry
of its own term, leader transfer with TimeoutNow (§3.10), optimistic pipelined replication with a
conflict hint on reject, and snapshot install for followers whose next entry was compacted.
The leader counts its own log towards a quorum only up to what its driver has persisted (``advance``).

Recovery after an unclean stop (``recovering=True``; a driver whose entries are fsynced lazily passes it when
the previous run did not stop cleanly, so the log may lack entries this node had acknowledged): the node asks
every other voter for its log state (RecoveryQuery/RecoveryState) and, until it may again, grants no vote
(nor pre-vote) and does not campaign. It takes part again when (a) it heard from a leader that committed an
entry of its own term and caught up to that leader's commit index, or (b) every other voter answered and its
own log is at least as up to date as each of theirs; when every voter answered but another's log is ahead, it
grants votes only to candidates at least as up to date as the best log it heard of from a voter (the "vote
floor", asked again every election timeout) and does not campaign. Safety: a committed entry is on a majority; a single member losing its unsynced tail cannot make
a leader without it (the ideas of Viewstamped Replication's recovery protocol and of "Protocol-Aware Recovery
for Consensus-Based Storage", FAST 2018). When a majority lost entries, no rule can bring them back: the node
says so (``lost``, the range of committed indexes no member holds any more, or that a later leader replaced)
from ``known_commit`` (the commit index its driver had saved before the stop) and the term it had then: a
survey in which every member answered and none holds the entries up to the highest commit any knew of, an
entry of a later term arriving at an index at or below that commit, a snapshot from the leader whose terms
(``Snapshot.terms``) differ from its log's at or below that commit, or, becoming leader, a commit index the members
that asked it to recover had saved past its log (``_check_queried``).

A lost hard state (``votes_lost=True``: the WAL could read neither copy of the term and vote) is recovered as
above (the driver passes ``recovering`` too) and, apart from that, grants no vote (nor pre-vote) and does not
campaign until it knows a term F at least as high as any it may have voted in; it then records a vote for itself
in F (raising its term to F if lower: no other vote in F or below, after a restart too) and takes part again.
F is the highest term heard from every other voter, each from a message it sent to this incarnation (answers to
RecoveryQuery, asked every election timeout of the voters not yet heard; a leader's appends; a pre-vote's term
less one): a candidate this node voted for before the loss holds that term or a later one for ever, and every
voter's answer comes after the loss (the transport delivers nothing sent to an earlier incarnation). A majority
is not enough: that candidate may be cut off from it, still counting the old vote. So one voter down for good
keeps this node from voting (it still replicates and can be caught up) until that voter is removed from the
group. Not covered: a member removed from the configuration since, still campaigning with an old vote of ours.
"""
from __future__ import annotations

import random
from typing import Optional, Sequence

from .msgs import (ENTRY_CONF, ENTRY_NOOP, ENTRY_NORMAL, AppendEntries, AppendResponse, HardState, Heartbeat,
                   HeartbeatResponse, InstallSnapshot, RecoveryQuery, RecoveryState, Snapshot, TimeoutNow,
                   VoteRequest, VoteResponse, decode_peers, encode_peers)
from .ready import Progress, Ready  # noqa: F401  (imported from here)
from .recovery import Recovery, term_runs
from .roles import (ADD, CANDIDATE, FOLLOWER, LEADER, PRE_CANDIDATE, PROBE, REMOVE,  # noqa: F401  (imported from here)
                    REPLICATE, SNAPSHOT)


class RaftError(Exception):
    """Misuse of the node or an impossible state (for example a committed entry in conflict)."""


class NotLeader(RaftError):
    """This node cannot accept the request; ``leader`` is the leader it knows of, or None."""

    def __init__(self, leader: Optional[str]):
        super().__init__(f"not the leader (leader: {leader or 'unknown'})")
        self.leader = leader


class ProposalDropped(RaftError):
    """The leader refuses the proposal for now (leadership transfer, configuration change pending)."""


class Node(Recovery):
    def __init__(self, id: str, peers: Sequence[str] = (), *, rng: random.Random, election_tick: int = 10,
                 heartbeat_tick: int = 1, pre_vote: bool = True, check_quorum: bool = True,
                 max_entries_per_msg: int = 512, max_bytes_per_msg: int = 1 << 20, max_inflight: int = 64,
                 hard_state: Optional[HardState] = None, snapshot: Optional[Snapshot] = None,
                 entries: Sequence[tuple] = (), applied: Optional[int] = None, recovering: bool = False,
                 known_commit: int = 0, known_mark: int = 0, votes_lost: bool = False, wiped: bool = False):
        """``peers``: the bootstrap voter set (all founding members pass the same; a node that will be
        added later passes ``()`` and learns the configuration from the leader). On restart pass what
        the WAL recovered: ``hard_state``, ``snapshot``, ``entries``; ``applied`` is the index the state
        machine already reflects (default: the snapshot index). ``recovering``: the previous run stopped
        uncleanly and the log may lack entries this node acknowledged (see the module's docstring);
        ``known_commit``: the commit index saved before the stop, when it is beyond the recovered log;
        ``known_mark``: the owner's mark saved with it (``HardState.mark``; the driver raises ``known_mark`` as it
        saves newer ones). A survey that finds a loss leaves in ``lost_mark`` the highest mark any member knew.
        ``votes_lost``: the hard state's term and vote were lost (module docstring); ``hard_state`` then holds no
        vote, and the term is raised to the log's last at least. ``wiped`` (with both): a member that had acknowledged
        entries and kept nothing (a wiped store; rillet.raft.recovery: ``stateless``)."""
        if election_tick <= heartbeat_tick:
            raise RaftError("election_tick must be greater than heartbeat_tick")
        self.id = id
        self.rng = rng
        self.election_tick = election_tick
        self.heartbeat_tick = heartbeat_tick
        self.pre_vote = pre_vote
        self.check_quorum = check_quorum
        self.max_entries = max_entries_per_msg
        self.max_bytes = max_bytes_per_msg
        self.max_inflight = max_inflight
        hs = hard_state or HardState(0, None, 0)
        self.term: int = hs.term
        self.vote: Optional[str] = hs.vote
        self.snapshot: Optional[Snapshot] = snapshot
        if snapshot is not None:
            self.offset = snapshot.index
            self.snap_term = snapshot.term
            self.conf_base = tuple(snapshot.peers)
        else:
            self.offset = 0
            self.snap_term = 0
            self.conf_base = tuple(peers)
        log = [e for e in entries if e[0] > self.offset]
        for k, e in enumerate(log):
            if e[0] != self.offset + 1 + k:
                raise RaftError(f"entries are not contiguous after index {self.offset}: found {e[0]}")
        self.log: list = log
        self.conf_log: list = [(e[0], decode_peers(e[3])) for e in log if e[2] == ENTRY_CONF]
        self._set_voters()
        last = self.last_index()
        if hs.commit > last:
            raise RaftError(f"hard state commit {hs.commit} is beyond the last log index {last}")
        self.commit: int = max(hs.commit, self.offset)
        self.applied: int = self.offset if applied is None else applied
        if not self.offset <= self.applied <= self.commit:
            raise RaftError(f"applied {self.applied} outside [{self.offset}, {self.commit}]")
        self.applying = self.applied
        # (a lost hard state: see the module's docstring) voter -> the highest term heard from it since
        self.votes_lost = bool(votes_lost)
        self.term_heard: dict = {}
        self.votes_found = 0  # the term F it then voted for itself in (status)
        if self.votes_lost:
            self.term = max(self.term, self.last_term())
            self.vote = None
        self.stable = last
        self.unstable_from = last + 1
        self._prev_hs = (self.term, self.vote, self.commit)
        self._prev_soft: tuple = (None, FOLLOWER)
        self._snap_out: Optional[Snapshot] = None
        self._base_out: Optional[tuple] = None
        self._outstanding: Optional[Ready] = None
        self._need_bcast = False
        self.msgs: list = []
        self.ticks = 0
        self.invalid_messages = 0  # well-formed messages that no correct peer sends (surfaced in status)
        # (follower) the leader's commit index as last told: above our own, we know we are behind
        self.leader_commit = 0
        # (follower) our log was found not to match the leader's (we refused an append or a heartbeat) and we
        # have not yet reached the leader's commit since: nats-server's "catching up"
        self.catching_up = False
        # (leader) followers found lacking entries they had acknowledged (a lost log), and the last one
        self.lost_logs = 0
        self.last_lost: Optional[tuple] = None  # (peer, what it had acknowledged, its hint)
        self.role = FOLLOWER
        self.leader: Optional[str] = None
        self.prs: dict = {}
        self.votes: dict = {}
        self.transferee: Optional[str] = None
        self.term_start = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = election_tick
        self._become_follower(self.term, None)
        # ---- recovery after an unclean stop (see the module's docstring)
        self.boot_term = self.term
        self.known_commit = max(known_commit, self.commit)
        self.tail_lost = max(0, known_commit - last)  # committed entries this node's own log lost
        self.recovering = bool(recovering)
        self.stateless = self.recovering and bool(wiped)  # (a wiped member: it kept no log; RecoveryState.wiped)
        self.survey: dict = {}  # peer -> (last_term, last_index, known_commit) answered while recovering
        self.vote_floor: Optional[tuple] = None  # (last_term, last_index) a candidate must reach for our vote
        self._survey_elapsed = 0
        self.recoveries = 0  # how many times this node left the recovering state (status)
        self.recovered_by = ""  # how it did: "leader" or "survey"
        # committed indexes no member holds any more (first, last), once found; ``lost_events`` counts findings
        self.lost: Optional[tuple] = None
        self.lost_events = 0
        self.known_mark = known_mark
        # the highest owner's mark (HardState.mark) heard in a survey of a majority back from an unclean stop (what
        # its lost tail may have reached, found or not), or when a loss was found
        self.lost_mark = 0
        self.survey_mark = 0  # the highest mark any member answered this node's recovery queries with
        # (any member) voters that asked this node to recover within the last 10 election timeouts, each with
        # (mark, tick, saved commit): when they (and this node, if recovering) are a majority, a majority came back
        # from an unclean stop: lost_mark takes the highest mark (floor_events counts such raises: a member that was
        # not cut itself, and may lead next, learns what the others may have acknowledged); a leader lacking entries
        # up to a saved commit among them finds them lost (_check_queried)
        self.queried: dict = {}
        self.floor_events = 0
        if self.recovering:
            self._query_peers()
        if self.votes_lost:
            self._check_votes_known()

    # ---- recovery ------------------------------------------------------------------------------------------


    def _may_vote_for(self, last_index: int, last_term: int) -> bool:
        if self.votes_lost:
            return False
        if not self.recovering:
            return True
        f = self.vote_floor
        return f is not None and (last_term, last_index) >= f

    # ---- log helpers -------------------------------------------------------------------------------------

    def last_index(self) -> int:
        return self.offset + len(self.log)

    def last_term(self) -> int:
        return self.log[-1][1] if self.log else self.snap_term

    def term_at(self, index: int) -> Optional[int]:
        """The term of the entry at ``index``; None when compacted away or beyond the log."""
        off = self.offset
        if index > off:
            k = index - off - 1
            return self.log[k][1] if k < len(self.log) else None
        if index == off:
            return self.snap_term
        return None

    def entries_from(self, lo: int, hi: int) -> list:
        """Entries with lo <= index <= hi (both within the retained log)."""
        return self.log[lo - self.offset - 1:hi - self.offset]

    # an unsafe quorum rescue (nats-server's META.RESCUE): the quorum this node uses while it is lower than its
    # voters' majority; None when there is none (``rescue``, ``end_rescue``)
    rescued_quorum: Optional[int] = None
    rescue_stopped: bool = False  # set when a membership change made the majority no larger than the rescue's

    def _set_voters(self) -> None:
        self.voters: tuple = self.conf_log[-1][1] if self.conf_log else self.conf_base
        natural = len(self.voters) // 2 + 1
        if self.rescued_quorum is not None:
            if natural > self.rescued_quorum:
                self.quorum = self.rescued_quorum
                return
            self.rescued_quorum = None  # (the voters left no longer need it)
            self.rescue_stopped = True
        self.quorum = natural

    def rescue(self, quorum: int) -> tuple[int, int]:
        """Lower the quorum this node needs, unsafely, for a group that lost too many members for good to
        elect a leader (nats-server's RescueQuorum, raising RaftError with its reasons): only lower, only while
        no leader is known, only on a voter with a log. Kept across membership changes while lower than the
        majority of the voters; ``end_rescue`` restores the majority. Returns (previous, new) quorum."""
        prev = self.quorum
        if quorum < 1 or quorum > self.quorum:
            raise RaftError("raft: rescue quorum must be between 1 and current quorum")
        if self.leader is not None:
            raise RaftError("raft: leader is known")
        if self.id not in self.voters:
            raise RaftError("raft: not a voting member")
        if self.last_index() == 0:
            raise RaftError("raft: log is empty")
        self.rescued_quorum = quorum
        self.rescue_stopped = False
        self.quorum = quorum
        return prev, quorum

    def end_rescue(self) -> None:
        """The voters' majority again (a rescue's time is up)."""
        self.rescued_quorum = None
        self._set_voters()

    def _conf_at(self, index: int) -> tuple:
        peers = self.conf_base
        for i, p in self.conf_log:
            if i > index:
                break
            peers = p
        return peers

    def _truncate_from(self, index: int) -> None:
        del self.log[index - self.offset - 1:]
        if index < self.unstable_from:
            self.unstable_from = index
        if self.stable >= index:
            self.stable = index - 1
        if self.conf_log and self.conf_log[-1][0] >= index:
            while self.conf_log and self.conf_log[-1][0] >= index:
                self.conf_log.pop()
            self._set_voters()

    def _append(self, ents) -> None:
        if ents and ents[0][0] <= self.known_commit:
            self._check_replaced(ents)
        self.log.extend(ents)
        conf = False
        for e in ents:
            if e[2] == ENTRY_CONF:
                self.conf_log.append((e[0], decode_peers(e[3])))
                conf = True
        if conf:
            self._set_voters()

    def _up_to_date(self, last_index: int, last_term: int) -> bool:
        lt = self.last_term()
        return last_term > lt or (last_term == lt and last_index >= self.last_index())

    def _find_conflict_by_term(self, index: int, term: int) -> int:
        """The largest index <= ``index`` whose entry has a term <= ``term`` (the snapshot index at least)."""
        off = self.offset
        log = self.log
        while index > off and log[index - off - 1][1] > term:
            index -= 1
        return index

    # ---- role changes ------------------------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.leader = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = self.election_tick + self.rng.randrange(self.election_tick)
        self.votes = {}
        self.prs = {}
        self.transferee = None
        self.leader_commit = 0

    def _become_follower(self, term: int, leader: Optional[str]) -> None:
        self._reset(term)
        self.role = FOLLOWER
        self.leader = leader

    def _become_pre_candidate(self) -> None:
        self.role = PRE_CANDIDATE
        self.leader = None
        self.votes = {}
        self.prs = {}
        self.election_elapsed = 0
        self.randomized_timeout = self.election_tick + self.rng.randrange(self.election_tick)

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.role = CANDIDATE
        self.vote = self.id

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = LEADER
        self.leader = self.id
        nxt = self.last_index() + 1
        now = self.ticks
        self.prs = {p: Progress(nxt, now) for p in self.voters if p != self.id}
        self.term_start = nxt
        self.log.append((nxt, self.term, ENTRY_NOOP, b""))
        if nxt <= self.known_commit:
            self._check_replaced(self.log[-1:])
        if self.queried:
            self._check_queried(nxt)
        self._need_bcast = True

    def _campaign(self, pre: bool, transfer: bool = False) -> None:
        if self.id not in self.voters or self.votes_lost:
            return
        if pre:
            self._become_pre_candidate()
            vote_term = self.term + 1
        else:
            self._become_candidate()
            vote_term = self.term
            pre = False
        self.votes = {self.id: True}
        if self._poll() is not None:
            return
        li, lt = self.last_index(), self.last_term()
        for p in self.voters:
            if p != self.id:
                self.msgs.append(VoteRequest(vote_term, self.id, p, li, lt, pre, transfer))

    def _poll(self) -> Optional[bool]:
        granted = rejected = 0
        for p in self.voters:
            v = self.votes.get(p)
            if v is True:
                granted += 1
            elif v is False:
                rejected += 1
        if granted >= self.quorum:
            if self.role == PRE_CANDIDATE:
                self._campaign(pre=False)  # pre-vote won: the real election
            else:
                self._become_leader()
            return True
        if len(self.voters) - rejected < self.quorum:
            self._become_follower(self.term, None)
            return False
        return None

    # ---- inputs ------------------------------------------------------------------------------------------

    def tick(self) -> None:
        self.ticks += 1
        if self.role == LEADER:
            self.heartbeat_elapsed += 1
            self.election_elapsed += 1
            if self.election_elapsed >= self.election_tick:
                self.election_elapsed = 0
                if self.check_quorum:
                    active = 1 if self.id in self.voters else 0
                    for p, pr in self.prs.items():
                        if pr.recent_active and p in self.voters:
                            active += 1
                        pr.recent_active = False
                    if active < self.quorum:
                        self._become_follower(self.term, None)
                        return
                self.transferee = None  # a transfer that did not finish within an election timeout
            if self.heartbeat_elapsed >= self.heartbeat_tick:
                self.heartbeat_elapsed = 0
                commit = self.commit
                for p, pr in self.prs.items():
                    # (the follower checks it still holds the entry at its match: one that lost its log
                    # refuses, and is caught up from where it really is)
                    mt = self.term_at(pr.match)
                    mi = pr.match if mt is not None else 0
                    self.msgs.append(Heartbeat(self.term, self.id, p, min(mi, commit), mi, mt or 0, commit))
            return
        self.election_elapsed += 1
        if self.recovering:
            self._survey_elapsed += 1
            if self._survey_elapsed >= self.election_tick:
                # (ask everyone again: a survey is the answers of one round, not older ones; the floor follows the
                # peers' logs and configurations)
                self.survey = {}
                self._query_peers()
            return  # (no campaign until recovered)
        if self.votes_lost:
            self._survey_elapsed += 1
            if self._survey_elapsed >= self.election_tick:
                self._query_terms()
            return  # (no campaign until the terms it may have voted in are known)
        if self.election_elapsed >= self.randomized_timeout and self.id in self.voters:
            self._campaign(pre=self.pre_vote)

    def step(self, m) -> None:
        t = type(m)
        if self.votes_lost:
            self._heard_term(m)
        if t is RecoveryQuery:
            self._handle_recovery_query(m)
            return
        if t is RecoveryState:
            self._handle_recovery_state(m)
            return
        if m.term > self.term:
            if t is VoteRequest:
                if (not m.transfer and self.check_quorum and self.leader is not None
                        and self.election_elapsed < self.election_tick):
                    return  # we heard from a leader within the election timeout: leader lease
                if not m.pre:
                    self._become_follower(m.term, None)
            elif t is VoteResponse and m.pre and m.granted:
                pass  # a pre-vote grant carries the term we would campaign for
            elif t is AppendEntries or t is Heartbeat or t is InstallSnapshot:
                self._become_follower(m.term, m.frm)
            else:
                self._become_follower(m.term, None)
        elif m.term < self.term:
            if t is AppendEntries or t is Heartbeat:
                # a leader of an older term (possibly cut off while our term moved on): tell it our term
                self.msgs.append(AppendResponse(self.term, self.id, m.frm, 0, True, 0, 0))
            elif t is VoteRequest and m.pre:
                self.msgs.append(VoteResponse(self.term, self.id, m.frm, False, True))
            return

        if t is VoteRequest:
            self._handle_vote(m)
        elif t is VoteResponse:
            if (self.role == PRE_CANDIDATE) == m.pre and self.role in (PRE_CANDIDATE, CANDIDATE):
                if m.term == self.term + (1 if m.pre else 0) or not m.granted:
                    self.votes[m.frm] = m.granted
                    self._poll()
        elif self.role == LEADER:
            if t is AppendResponse:
                self._handle_append_response(m)
            elif t is HeartbeatResponse:
                self._handle_heartbeat_response(m)
        else:
            if t is AppendEntries or t is Heartbeat or t is InstallSnapshot:
                if self.role != FOLLOWER:
                    self._become_follower(m.term, m.frm)
                self.leader = m.frm
                self.election_elapsed = 0
                if t is AppendEntries:
                    self._handle_append(m)
                elif t is Heartbeat:
                    self._handle_heartbeat(m)
                else:
                    self._handle_snapshot(m)
            elif t is TimeoutNow:
                if self.id in self.voters and not self.recovering:
                    self._campaign(pre=False, transfer=True)

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append ``data`` to the leader's log; returns (index, term). The entry is committed once a
        committed entry at that index has that term."""
        if self.role != LEADER:
            raise NotLeader(self.leader)
        if self.transferee is not None:
            raise ProposalDropped(f"leadership transfer to {self.transferee} in progress")
        i = self.offset + len(self.log) + 1
        self.log.append((i, self.term, ENTRY_NORMAL, data))
        self._need_bcast = True
        return i, self.term

    def propose_conf_change(self, op: str, peer: str) -> tuple[int, int]:
        """Add or remove one voter. One change at a time; the new configuration takes effect as soon as
        it is appended (on every node), and a leader that removed itself steps down once it commits."""
        if self.role != LEADER:
            raise NotLeader(self.leader)
        if self.transferee is not None:
            raise ProposalDropped(f"leadership transfer to {self.transferee} in progress")
        if self.commit < self.term_start:
            raise ProposalDropped("the leader has not yet committed an entry of its term")
        if self.conf_log and self.conf_log[-1][0] > self.commit:
            raise ProposalDropped("a configuration change is still uncommitted")
        if op == ADD:
            if peer in self.voters:
                raise RaftError(f"{peer} is already a member")
            new = self.voters + (peer,)
        elif op == REMOVE:
            if peer not in self.voters:
                raise RaftError(f"{peer} is not a member")
            new = tuple(p for p in self.voters if p != peer)
            if not new:
                raise RaftError("cannot remove the last member")
        else:
            raise RaftError(f"unknown configuration change {op!r} (use 'add' or 'remove')")
        i = self.last_index() + 1
        self._append([(i, self.term, ENTRY_CONF, encode_peers(new))])
        if op == ADD and peer != self.id:
            self.prs[peer] = Progress(i, self.ticks)
        elif op == REMOVE:
            self.prs.pop(peer, None)
            if peer == self.transferee:
                self.transferee = None
        self._need_bcast = True
        if self._maybe_commit():  # a removal can make the quorum smaller
            self._bcast(True)
        return i, self.term

    def transfer_leadership(self, peer: str) -> None:
        """Catch ``peer`` up, then send it TimeoutNow. Proposals are refused until the transfer ends (this
        node steps down) or an election timeout passes."""
        if self.role != LEADER:
            raise NotLeader(self.leader)
        if peer == self.id:
            return
        pr = self.prs.get(peer)
        if pr is None or peer not in self.voters:
            raise RaftError(f"{peer} is not a member")
        self.transferee = peer
        self.election_elapsed = 0
        if pr.match == self.last_index():
            self.msgs.append(TimeoutNow(self.term, self.id, peer))
        else:
            self._send_append(peer, pr, True)

    def compact(self, index: int, data: bytes) -> None:
        """The state machine at ``index`` (<= applied) is ``data``: keep it as the snapshot and drop the
        log up to ``index``. The driver stores the same snapshot and compacts its WAL itself."""
        if index <= self.offset:
            return
        if index > self.applied:
            raise RaftError(f"cannot compact to {index}: only {self.applied} applied")
        term = self.term_at(index)
        peers = self._conf_at(index)
        s = self.snapshot
        base = s.terms if s is not None and s.terms else (((self.offset, self.snap_term),) if self.offset else ())
        self.snapshot = Snapshot(index, term, peers, data, term_runs(base, self.log[:index - self.offset]))
        del self.log[:index - self.offset]
        self.offset = index
        self.snap_term = term
        self.conf_base = peers
        self.conf_log = [c for c in self.conf_log if c[0] > index]

    # ---- follower side -----------------------------------------------------------------------------------

    def _follow_commit(self, c: int) -> None:
        """A follower's commit moves up to ``c`` (never back); it has caught up once the commit reaches the
        leader's, and a recovering node learns here that it has heard from the leader."""
        if c > self.commit:
            self.commit = c
        if self.catching_up and self.commit >= self.leader_commit:
            self.catching_up = False
        if self.recovering:
            self._caught_up_from_leader()

    def _handle_heartbeat(self, m: Heartbeat) -> None:
        if m.leader_commit > self.leader_commit:
            self.leader_commit = m.leader_commit
        mi = m.match
        if mi > self.offset and self.term_at(mi) != m.match_term:
            # the leader thinks we hold an entry we do not (our log was lost, or entries we had
            # acknowledged): say so, and where our log may still agree with its, so that it starts over
            hint = self._find_conflict_by_term(min(mi, self.last_index()), m.match_term)
            self.msgs.append(HeartbeatResponse(self.term, self.id, m.frm, True, mi, hint, self.term_at(hint) or 0))
            self.catching_up = True
            return
        self._follow_commit(min(m.commit, self.last_index()))  # (m.commit is at most the match just checked)
        self.msgs.append(HeartbeatResponse(self.term, self.id, m.frm))

    def _handle_append(self, m: AppendEntries) -> None:
        if m.commit > self.leader_commit:
            self.leader_commit = m.commit
        if m.prev_index < self.commit:
            self._follow_commit(self.commit)
            self.msgs.append(AppendResponse(self.term, self.id, m.frm, self.commit))
            return
        if self.term_at(m.prev_index) == m.prev_term:
            if m.prev_index == 0 and m.peers is not None and self.offset == 0 and tuple(m.peers) != self.conf_base:
                # the leader's log from its very start: its founding voters replace the set we started with
                # (a member that lost everything guessed it from the servers it knew)
                self.conf_base = tuple(m.peers)
                self._set_voters()
                self._base_out = self.conf_base
            ents = m.entries
            last_new = m.prev_index + len(ents)
            last = self.last_index()
            for k, e in enumerate(ents):
                i = e[0]
                if i > last:
                    self._append(ents[k:] if k else ents)
                    break
                if self.log[i - self.offset - 1][1] != e[1]:
                    if i <= self.commit:
                        raise RaftError(f"entry {i} conflicts with the committed log (commit {self.commit})")
                    self._truncate_from(i)
                    self._append(ents[k:])
                    break
            self._follow_commit(min(m.commit, last_new))
            if not m.quiet or ents:
                self.msgs.append(AppendResponse(self.term, self.id, m.frm, last_new))
        else:
            hint = self._find_conflict_by_term(min(m.prev_index, self.last_index()), m.prev_term)
            self.msgs.append(AppendResponse(self.term, self.id, m.frm, m.prev_index, True, hint,
                                            self.term_at(hint) or 0))
            self.catching_up = True

    def _handle_snapshot(self, m: InstallSnapshot) -> None:
        s = m.snapshot
        if s.index > self.leader_commit:
            self.leader_commit = s.index
        if self.known_commit and s.terms:
            self._check_snapshot(s)  # (committed entries of ours it replaces: a loss, as on the append path)
        if s.index <= self.commit:
            self.msgs.append(AppendResponse(self.term, self.id, m.frm, self.commit))
            return
        if self.term_at(s.index) == s.term:
            self.commit = s.index  # we hold the entries: just fast-forward the commit
        else:
            self.log = []
            self.offset = s.index
            self.snap_term = s.term
            self.snapshot = s
            self.conf_base = tuple(s.peers)
            self.conf_log = []
            self._set_voters()
            self.commit = s.index
            self.stable = s.index
            self.unstable_from = s.index + 1
            self._snap_out = s
        self._follow_commit(self.commit)
        self.msgs.append(AppendResponse(self.term, self.id, m.frm, s.index))

    def _handle_vote(self, m: VoteRequest) -> None:
        can = (self.vote == m.frm or (self.vote is None and self.leader is None)
               or (m.pre and m.term > self.term))
        if can and self._up_to_date(m.last_index, m.last_term) and self._may_vote_for(m.last_index, m.last_term):
            self.msgs.append(VoteResponse(m.term, self.id, m.frm, True, m.pre))
            if not m.pre:
                self.vote = m.frm
                self.election_elapsed = 0
        else:
            self.msgs.append(VoteResponse(self.term, self.id, m.frm, False, m.pre))

    # ---- leader side -------------------------------------------------------------------------------------

    def _send_append(self, p: str, pr: Progress, allow_empty: bool, quiet: bool = False) -> bool:
        state = pr.state
        if state == PROBE:
            if pr.paused:
                return False
        elif state == REPLICATE:
            if len(pr.inflight) >= self.max_inflight:
                return False
        else:
            return False
        prev = pr.next - 1
        prev_term = self.term_at(prev)
        if prev_term is None:
            if prev < self.offset:
                s = self.snapshot
                if s is None:
                    raise RaftError(f"entries before {self.offset} are compacted but there is no snapshot")
                pr.state = SNAPSHOT
                pr.pending_snapshot = s.index
                pr.snap_sent = self.ticks
                pr.inflight.clear()
                self.msgs.append(InstallSnapshot(self.term, self.id, p, s))
                return True
            raise RaftError(f"next index {pr.next} of {p} is beyond the log ({self.last_index()})")
        lo = prev - self.offset
        ents = self.log[lo:lo + self.max_entries]
        if ents and self.max_bytes:
            size = 0
            for k, e in enumerate(ents):
                size += len(e[3]) + 24
                if size > self.max_bytes and k:
                    ents = ents[:k]
                    break
        if not ents and not allow_empty:
            return False
        self.msgs.append(AppendEntries(self.term, self.id, p, prev, prev_term, self.commit, ents,
                                       quiet and not ents and state == REPLICATE,
                                       self.conf_base if prev == 0 else None))
        if state == REPLICATE:
            if ents:
                pr.next = ents[-1][0] + 1
                pr.inflight.append(pr.next - 1)
        else:
            pr.paused = True
        return True

    def _send_all(self, p: str, pr: Progress, commit_changed: bool) -> None:
        last = self.last_index()
        if pr.next <= last:
            while self._send_append(p, pr, False) and pr.state == REPLICATE and pr.next <= last:
                pass
        elif commit_changed:
            # only the commit index moved: a follower in REPLICATE does not answer it (one message per
            # follower instead of two; its progress and liveness are tracked by the other answers)
            self._send_append(p, pr, True, True)

    def _bcast(self, commit_changed: bool = False) -> None:
        self._need_bcast = False
        for p, pr in self.prs.items():
            self._send_all(p, pr, commit_changed)

    def _maybe_commit(self) -> bool:
        voters = self.voters
        if not voters:
            return False
        prs = self.prs
        # (quick answer for the usual call, when fewer than a quorum hold anything past the commit)
        commit = self.commit
        ahead = 0
        for v in voters:
            if v == self.id:
                if self.stable > commit:
                    ahead += 1
            else:
                pr = prs.get(v)
                if pr is not None and pr.match > commit:
                    ahead += 1
        if ahead < self.quorum:
            return False
        matches = []
        for v in voters:
            if v == self.id:
                matches.append(self.stable)
            else:
                pr = prs.get(v)
                matches.append(pr.match if pr is not None else 0)
        matches.sort(reverse=True)
        idx = matches[self.quorum - 1]
        if idx > self.commit and self.term_at(idx) == self.term:
            self.commit = idx
            if self.id not in voters and (not self.conf_log or self.conf_log[-1][0] <= idx):
                self._step_down_removed()
                return False
            return True
        return False

    def _step_down_removed(self) -> None:
        """Our removal is committed: hand over to the most up-to-date voter and become a follower."""
        best = None
        last = self.last_index()
        for p, pr in self.prs.items():
            if p in self.voters and pr.match == last:
                best = p
                break
        for p, pr in self.prs.items():  # tell everyone the commit that removed us
            self._send_append(p, pr, True)
        if best is not None:
            self.msgs.append(TimeoutNow(self.term, self.id, best))
        self._become_follower(self.term, None)

    def _handle_append_response(self, m: AppendResponse) -> None:
        pr = self.prs.get(m.frm)
        if pr is None:
            return
        if m.index > self.last_index():
            self.invalid_messages += 1  # no correct follower acknowledges what this leader never sent
            return
        pr.recent_active = True
        pr.last_seen = self.ticks
        pr.heard = True
        if m.reject:
            if pr.state == REPLICATE:
                if m.index <= pr.match:
                    return  # stale
            elif pr.state == PROBE:
                if m.index != pr.next - 1:
                    return  # stale
            else:
                return
            hint = m.hint_index
            if hint < pr.match:
                # (a fresh refusal whose hint is below what the follower acknowledged: it lost its log, as a
                # memory-storage group's member does on restart or a server whose store was deleted; nothing
                # it acknowledged counts any more, it is caught up from its end)
                self._lost_log(m.frm, pr, hint)
            if hint > self.offset:
                hint = self._find_conflict_by_term(min(hint, self.last_index()), m.hint_term)
            pr.become_probe(max(min(m.index, hint + 1), pr.match + 1))
            self._send_append(m.frm, pr, True)
            return
        if m.index > pr.match:
            pr.match = m.index
            if pr.next <= m.index:
                pr.next = m.index + 1
            if pr.state == PROBE:
                pr.become_replicate()
            elif pr.state == SNAPSHOT:
                if pr.match >= pr.pending_snapshot:
                    pr.become_replicate()
            else:
                inflight = pr.inflight
                while inflight and inflight[0] <= m.index:
                    inflight.popleft()
            if self._maybe_commit():
                self._bcast(True)
            elif self.role == LEADER:
                self._send_all(m.frm, pr, False)
            if self.role == LEADER and m.frm == self.transferee and pr.match == self.last_index():
                self.msgs.append(TimeoutNow(self.term, self.id, m.frm))
        elif pr.state == PROBE:
            pr.paused = False
            if pr.match < self.last_index():
                self._send_append(m.frm, pr, False)

    def _lost_log(self, p: str, pr: Progress, hint: int) -> None:
        self.lost_logs += 1
        self.last_lost = (p, pr.match, hint)
        pr.match = 0

    def _handle_heartbeat_response(self, m: HeartbeatResponse) -> None:
        pr = self.prs.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        pr.last_seen = self.ticks
        pr.heard = True
        if m.reject:
            # the follower lacks the entry at the match this heartbeat named; stale unless that is still its
            # match (a refusal that crossed the acknowledgement of a catch-up, a duplicate)
            if m.index != pr.match or m.index == 0 or pr.state == SNAPSHOT or m.index > self.last_index():
                return
            hint = min(m.hint_index, m.index - 1)
            self._lost_log(m.frm, pr, hint)
            if hint > self.offset:
                hint = self._find_conflict_by_term(min(hint, self.last_index()), m.hint_term)
            pr.become_probe(hint + 1)
            self._send_append(m.frm, pr, True)
            return
        if pr.state == PROBE:
            pr.paused = False
        elif pr.state == SNAPSHOT:
            if self.ticks - pr.snap_sent < self.election_tick:
                return
            pr.become_probe(pr.match + 1)  # the snapshot was not acknowledged in time: probe again
        elif len(pr.inflight) >= self.max_inflight:
            pr.inflight.popleft()  # something was lost: make room to probe with an empty append
        if pr.match < self.last_index():
            self._send_append(m.frm, pr, True)

    # ---- output ------------------------------------------------------------------------------------------

    def has_ready(self) -> bool:
        if self._outstanding is not None:
            return False
        if (self.msgs or self._need_bcast or self.unstable_from <= self.offset + len(self.log)
                or self.commit > self.applying or self._snap_out is not None or self._base_out is not None):
            return True
        hs = self._prev_hs  # (compared field by field: no tuples built on the common "nothing" answer)
        if self.commit != hs[2] or self.term != hs[0] or self.vote != hs[1]:
            return True
        soft = self._prev_soft
        return self.role != soft[1] or self.leader != soft[0]

    def apply_only(self) -> bool:
        """Whether the next Ready holds nothing but committed entries to apply (and the new commit index):
        nothing to persist first, nothing to send, no change of term, vote, leader or role. A driver may run
        such a Ready after more urgent work (nobody waits on it but the local state machine)."""
        if self._outstanding is not None or self.commit <= self.applying:
            return False
        if (self.msgs or self._need_bcast or self.unstable_from <= self.offset + len(self.log)
                or self._snap_out is not None or self._base_out is not None):
            return False
        hs = self._prev_hs
        if self.term != hs[0] or self.vote != hs[1]:
            return False
        soft = self._prev_soft
        return self.role == soft[1] and self.leader == soft[0]

    def ready(self) -> Ready:
        if self._outstanding is not None:
            raise RaftError("ready() called again before advance()")
        if self._need_bcast and self.role == LEADER:
            self._bcast()
        self._need_bcast = False
        hs = (self.term, self.vote, self.commit)
        hard = None
        must_sync = False
        if hs != self._prev_hs:
            hard = HardState(*hs)
            must_sync = hs[0] != self._prev_hs[0] or hs[1] != self._prev_hs[1]
            self._prev_hs = hs
        snap = self._snap_out
        self._snap_out = None
        if snap is not None:
            must_sync = True
            if self.applying < snap.index:
                self.applying = snap.index
        last = self.last_index()
        if self.unstable_from <= last:
            ents = self.log[self.unstable_from - self.offset - 1:]
            self.unstable_from = last + 1
            must_sync = True
        else:
            ents = []
        if self.commit > self.applying:
            committed = self.log[self.applying - self.offset:self.commit - self.offset]
            self.applying = self.commit
        else:
            committed = []
        soft = (self.leader, self.role)
        if soft != self._prev_soft:
            self._prev_soft = soft
        else:
            soft = None
        base = self._base_out
        if base is not None:
            self._base_out = None
            must_sync = True
        msgs = self.msgs
        self.msgs = []
        rd = Ready(hard, ents, snap, msgs, committed, soft, must_sync, base)
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready) -> None:
        if rd is not self._outstanding:
            raise RaftError("advance() with a Ready that is not the outstanding one")
        self._outstanding = None
        if rd.snapshot is not None and self.applied < rd.snapshot.index:
            self.applied = rd.snapshot.index
        if rd.entries:
            i, t = rd.entries[-1][0], rd.entries[-1][1]
            if self.term_at(i) == t and i > self.stable:
                self.stable = i
        if rd.committed_entries:
            self.applied = rd.committed_entries[-1][0]
        if self.role == LEADER and self._maybe_commit():
            self._bcast(True)

    # ---- monitoring --------------------------------------------------------------------------------------

    def status(self) -> dict:
        """Leader, term, commit, applied and (on the leader) each peer's match/next, whether it is
        ``current`` (holds the whole log), its ``lag`` in entries and ``active`` (ticks since heard from)."""
        last = self.last_index()
        st = {"id": self.id, "role": self.role, "term": self.term, "vote": self.vote, "leader": self.leader,
              "commit": self.commit, "applied": self.applied, "last_index": last,
              "snapshot_index": self.offset, "voters": list(self.voters),
              "leader_commit": self.commit if self.role == LEADER else self.leader_commit,
              "catching_up": self.catching_up, "lost_logs": self.lost_logs,
              "recovering": self.recovering, "lost": self.lost, "votes_lost": self.votes_lost,
              "invalid_messages": self.invalid_messages, "peers": {}}
        if self.role == LEADER:
            for p, pr in self.prs.items():
                st["peers"][p] = {"match": pr.match, "next": pr.next, "state": pr.state,
                                  "current": pr.match == last, "lag": last - pr.match,
                                  "active": self.ticks - pr.last_seen}
        return st
