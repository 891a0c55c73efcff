"""Recovery after an unclean stop, the part of ``rillet.raft.node.Node`` that surveys the other voters
(RecoveryQuery/RecoveryState), decides when the node may vote and campaign again, and reports committed entries
that no member holds any more (``lost``) and the owner's highest saved mark (``lost_mark``). The rules are in
the node module's docstring. A mixin of Node: it reads and writes the node's fields."""
from __future__ import annotations

from bisect import bisect_right
from typing import Optional

from .msgs import TERMS_KEPT, RecoveryQuery, RecoveryState, Snapshot, VoteRequest, VoteResponse
from .roles import LEADER


def term_runs(prev: tuple, entries, keep: Optional[int] = TERMS_KEPT) -> tuple:
    """``prev`` (a ``Snapshot.terms`` map of the indexes before ``entries[0]``) extended with the terms of
    ``entries`` (log entries in index order, their terms never going down): one (index, term) pair where the
    term changes; the last ``keep`` pairs (all with None)."""
    out = list(prev)
    last_t = out[-1][1] if out else None
    k, n = 0, len(entries)
    while k < n:
        t = entries[k][1]
        if t != last_t:
            out.append((entries[k][0], t))
            last_t = t
        k = bisect_right(entries, t, lo=k, key=lambda e: e[1])  # (the first entry of a later term)
    if keep is not None and len(out) > keep:
        out = out[-keep:]
    return tuple(out)


def term_in(terms: tuple, index: int) -> Optional[int]:
    """The term of the entry at ``index`` by a ``Snapshot.terms`` map; None before its first index (unknown)."""
    if not terms or index < terms[0][0]:
        return None
    return terms[bisect_right(terms, index, key=lambda p: p[0]) - 1][1]


class Recovery:
    """(mixin of Node) the recovery survey and loss reports."""

    lost_by = ""  # how the last loss was found: "survey", "append", "snapshot", "queries" or "wiped"
    # (a stateless start, ``stateless``: fewer voters than a quorum kept their logs) ``lost`` starts where the
    # best log left ends and its end is unknown: committed entries may go further
    lost_open = False
    # (lost_open) an operator accepted the loss (``accept_loss``): the survey's vote floor applies again, so the
    # members that kept their logs elect the best of them
    loss_accepted = False

    def accept_loss(self) -> bool:
        """An operator accepts the loss of a group in which fewer voters than a quorum kept their logs
        (``lost_open``; rillet/jetstream/cluster/resume.py): the survey is made again and, this time, sets the
        vote floor (or ends the recovery of the member holding the best log left) as after any survey, so that
        the best log left leads. Whatever the lost voters had committed past it is given up for good (and stays
        reported: ``lost``). False when there is nothing to accept (no such loss known here, or a leader known).
        """
        if not self.lost_open or self.leader is not None:
            return False
        if self.recovering and not self.loss_accepted:
            self.loss_accepted = True
            self.survey = {}
            self._query_peers()
        return True

    def _query_peers(self) -> None:
        self._survey_elapsed = 0
        if not self.voters:
            return  # (a member added later that has not yet learnt the configuration: a leader catches it up)
        others = [p for p in self.voters if p != self.id]
        if not others or all(p in self.survey for p in others):
            self._survey_done()
            return
        for p in others:
            if p not in self.survey:
                self.msgs.append(RecoveryQuery(self.term, self.id, p, self.known_mark,
                                               max(self.known_commit, self.commit),
                                               self.lost[0] if self.lost_open and self.lost else 0))

    def _heard_term(self, m) -> None:
        """(votes_lost) A message from a voter to this incarnation: its sender's term is at least ``m.term`` (a
        pre-vote's term less one; a pre-vote's answer may carry the term asked for, and counts for nothing)."""
        p = m.frm
        if p == self.id or p not in self.voters:
            return
        t = type(m)
        if t is VoteResponse and m.pre:
            return
        term = m.term - 1 if t is VoteRequest and m.pre else m.term
        if term >= self.term_heard.get(p, -1):
            self.term_heard[p] = term
        self._check_votes_known()

    def _query_terms(self) -> None:
        """(votes_lost, not recovering) Ask the voters not yet heard from (answers: RecoveryState, with their
        term). The leader, heard from already, is not asked: to it a query means a restart that lost entries."""
        self._survey_elapsed = 0
        if self._check_votes_known():
            return
        for p in self.voters:
            if p != self.id and p not in self.term_heard:
                self.msgs.append(RecoveryQuery(self.term, self.id, p, self.known_mark,
                                               max(self.known_commit, self.commit)))

    def _check_votes_known(self) -> bool:
        """(votes_lost) Once every other voter was heard from: F, the highest term heard or this node's, is at
        least every term this node may have voted in (the node module's docstring). It votes for itself in F
        (raising its term to F if lower): no vote in F or below, ever; then it takes part again."""
        if not self.voters or any(p != self.id and p not in self.term_heard for p in self.voters):
            return False
        f = max([self.term, *self.term_heard.values()])
        if f > self.term:
            self._become_follower(f, None)
        self.vote = self.id
        self.votes_lost = False
        self.term_heard = {}
        self.votes_found = f
        return True

    def _survey_done(self) -> None:
        mine = (self.last_term(), self.last_index())
        best = mine
        max_last = self.last_index()
        max_known = max(self.known_commit, self.commit)
        max_mark = self.known_mark
        recovering = 1 if self.id in self.voters else 0
        wiped = 1 if self.stateless and self.id in self.voters else 0
        led = False  # (a voter leads: it was elected before the wipes, wiped members giving no vote, and holds
        # every committed entry: it catches this node up, nothing is lost. Not covered: a deposed leader that the
        # wiped members' answers to its heartbeats keep from stepping down)
        for p in self.voters:
            a = self.survey.get(p)
            if a is None:
                continue
            if a[3] and (a[0], a[1]) > best:
                # (a peer that is no voter in its own log, removed by a configuration change there, cannot lead;
                # what it holds past what the voters hold was not committed by them)
                best = (a[0], a[1])
            if a[1] > max_last:
                max_last = a[1]
            if a[2] > max_known:
                max_known = a[2]
            if a[5] > max_mark:
                max_mark = a[5]
            if a[4]:
                recovering += 1
            if a[6]:
                wiped += 1
            led = led or a[7]
        if len(self.voters) - wiped < self.quorum and not led:
            # (fewer voters than a quorum kept their logs, the others wiped: whatever was committed past the best
            # log left may be gone, and nothing bounds how far it went. Reported (from there on, the end unknown:
            # ``lost_open``), and no vote floor: this node stays out of elections, so that the survivors cannot
            # elect a leader that would give the lost indexes (and the owner's numbers) again, until an operator
            # accepts the loss (``accept_loss``))
            if not self.lost_open:
                self.lost_open = True
                self._found_lost(max_last + 1, max(max_last + 1, max_known), "wiped")
            if not self.loss_accepted:
                return
            # (accepted by an operator: the best log left leads, as after any survey)
        # (a loss takes a majority that lost data, each of them back from an unclean stop and recovering; with
        # fewer, the answers only look short because some were given before a commit others already knew of)
        if recovering >= self.quorum:
            # (a majority may have lost what it had not synced, past any commit index it had saved too: whatever
            # the owner numbered up to the highest mark saved may have been acknowledged)
            self.lost_mark = max(self.lost_mark, max_mark)
            self.known_mark = max(self.known_mark, max_mark)
            if max_known > max_last:
                self._found_lost(max_last + 1, max_known, "survey")
        if best <= mine:
            self._leave_recovery("survey")
        else:
            self.vote_floor = best

    def _leave_recovery(self, how: str) -> None:
        self.recovering = False
        self.loss_accepted = False
        self.stateless = False
        self.vote_floor = None
        self.survey = {}
        self.recoveries += 1
        self.recovered_by = how

    def _caught_up_from_leader(self) -> None:
        """(follower, recovering or with a vote floor) leave recovery once this node holds the commit index of a
        leader that has committed an entry of its own term (its commit then covers every earlier entry)."""
        lc = self.leader_commit
        if lc and self.commit >= lc and self.term_at(self.commit) == self.term:
            self._leave_recovery("leader")

    def _found_lost(self, first: int, last: int, how: str) -> None:
        if first > last:
            return
        if self.lost is not None:
            if self.lost[0] <= first and last <= self.lost[1]:
                return
            first, last = min(first, self.lost[0]), max(last, self.lost[1])
        self.lost = (first, last)
        self.lost_events += 1
        self.lost_by = how

    def _check_replaced(self, ents) -> None:
        """Entries of a term after ``boot_term`` at indexes at or below ``known_commit``: the committed entries that
        were there (of ``boot_term`` or earlier) are gone from the cluster's log."""
        kc = self.known_commit
        bt = self.boot_term
        for e in ents:
            if e[0] > kc:
                break
            if e[1] > bt:
                self.lost_mark = max(self.lost_mark, self.known_mark, self.survey_mark)
                self._found_lost(e[0], kc, "append")
                break

    def own_terms(self, upto: int) -> tuple:
        """This node's log's terms up to ``upto`` (a ``Snapshot.terms`` map, every pair kept): its snapshot's map
        (or just the snapshot's last entry), then its log."""
        s = self.snapshot
        base = s.terms if s is not None and s.terms else (((self.offset, self.snap_term),) if self.offset else ())
        return term_runs(base, self.log[:max(0, upto - self.offset)], None)

    def _check_snapshot(self, s: Snapshot) -> None:
        """(a snapshot from the leader) Whether it replaces committed entries at or below ``known_commit`` that
        this node had otherwise: the first index up to there where the snapshot's terms (``s.terms``) differ from
        this node's log, or, past what its log kept, hold a term after ``boot_term`` (what was committed there
        was of ``boot_term`` or earlier). From that index on the two logs differ (RAFT's log matching): the
        committed entries up to ``known_commit`` are gone, a loss found as on the append path (``lost``).
        Nothing is concluded where either map says nothing (a snapshot without terms, pairs dropped)."""
        hi = min(self.known_commit, s.index)
        terms = s.terms
        if hi <= 0 or not terms:
            return
        lo = max(terms[0][0], 1)
        if lo > hi:
            return
        ours = self.own_terms(hi)
        last = self.last_index()
        cands = {lo, last + 1}
        cands.update(i for i, _ in terms)
        cands.update(i for i, _ in ours)
        for i in sorted(c for c in cands if lo <= c <= hi):
            lt = term_in(terms, i)
            if lt is None:
                continue
            if i > last:
                differ = lt > self.boot_term
            else:
                ot = term_in(ours, i)
                differ = ot is not None and ot != lt
            if differ:
                self.lost_mark = max(self.lost_mark, self.known_mark, self.survey_mark)
                self._found_lost(i, self.known_commit, "snapshot")
                return

    def _check_queried(self, nxt: int) -> None:
        """(becoming leader, its log ending before ``nxt``) The commit indexes the voters that asked this node to
        recover had saved (``queried``, the last 10 election timeouts): one at or past ``nxt`` names entries that
        were committed and that this leader, elected by the rules that give a leader every committed entry a
        majority still holds, lacks: they are gone (a majority lost them). Found here too, so that a leader that
        was not cut itself (and found nothing in a survey of its own) reports the loss and tells the others."""
        horizon = self.ticks - 10 * self.election_tick
        kc = max((k for _, t, k in self.queried.values() if t >= horizon), default=0)
        if kc >= nxt:
            self.lost_mark = max(self.lost_mark, self.known_mark, self.survey_mark)
            self._found_lost(nxt, kc, "queries")

    def _handle_recovery_query(self, m: RecoveryQuery) -> None:
        if m.lost_from and m.frm in self.voters and self.role != LEADER:
            # (the sender found that fewer voters than a quorum kept their logs: this member, which may have kept
            # its own and not be recovering, reports the loss too and knows that no leader comes on its own; a
            # range it reported already is no news: _found_lost)
            self.lost_open = True
            self._found_lost(m.lost_from, max(m.lost_from, m.known_commit), "wiped")
        if m.frm in self.voters:
            now = self.ticks
            q = self.queried
            q[m.frm] = (m.known_mark, now, m.known_commit)
            horizon = now - 10 * self.election_tick
            for p in [p for p, (_, t, _) in q.items() if t < horizon]:
                del q[p]  # (queries of another, earlier restart)
            if len(q) + (1 if self.recovering and self.id in self.voters else 0) >= self.quorum:
                mark = max([self.known_mark] + [mk for mk, _, _ in q.values()])
                if mark > self.lost_mark:
                    self.lost_mark = mark
                    self.known_mark = max(self.known_mark, mark)
                    self.floor_events += 1
        pr = self.prs.get(m.frm) if self.role == LEADER else None
        if pr is not None and pr.match:
            # (the member restarted uncleanly: what it had acknowledged may be gone, so none of it counts towards
            # a commit until it acknowledges again; it is probed from where it is)
            pr.match = 0
            pr.become_probe(pr.next)
        self.msgs.append(RecoveryState(self.term, self.id, m.frm, self.last_index(), self.last_term(), self.commit,
                                       max(self.known_commit, self.commit), self.recovering,
                                       self.id in self.voters, self.known_mark, self.stateless,
                                       self.role == LEADER))

    def _handle_recovery_state(self, m: RecoveryState) -> None:
        if not self.recovering or m.frm not in self.voters:
            return
        self.survey[m.frm] = (m.last_term, m.last_index, m.known_commit, m.voter, m.recovering, m.known_mark,
                              m.wiped, m.leader)
        if m.known_mark > self.survey_mark:
            self.survey_mark = m.known_mark
        if all(p in self.survey for p in self.voters if p != self.id):
            self._survey_done()
