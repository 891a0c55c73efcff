"""What a consumer replica does when its RAFT group lost committed entries (``ConsumerLossMixin``, a base of
``ConsumerReplica`` in consumers.py), as a stream replica does (stream_loss.py).

A majority of the group's members came back from an unclean stop short of committed entries (a power cut with a
lazy ``sync_interval``): the consumer's acknowledgements and deliveries in them are gone, messages may be delivered
again. A member that finds it (its recovery survey, an entry or a snapshot of a later leader replacing what it
had committed: rillet.raft) reports it (``_data_lost``): an error in the log, the report kept in the group's
directory (lossreport), consumer info's ``cluster.lost``, /healthz, the ``CONSUMER.DATA_LOST`` advisory. The
consumer leader proposes the report (a ``LOST`` entry, as the stream's) so that every replica records it, and a
replica to which it is news (it came back after the others had recovered, or knew no commit past its log) logs
it as the finders did (``_apply_lost``). A member's build applies a consumer's LOST entry only from
``log.CONSUMER_LOST`` on (its route INFO lists it): the leader proposes it once every member's does."""
from __future__ import annotations

import time
from typing import Any

import msgspec

from rillet.gocompat.gotime import format_time
from rillet.jetstream.cluster import lossreport
from rillet.jetstream.cluster.log import CONSUMER_LOST, LOST
from rillet.jetstream.log import Entry, NotLeader

PROPOSE_AGAIN = 1.0  # seconds: a leader whose members' builds cannot apply the entry yet asks again

_enc = msgspec.msgpack.Encoder()


def covers(outer: dict | None, first: int, last: int) -> bool:
    """``outer``'s RAFT range holds ``first``..``last`` (an empty range is held by anything)."""
    if last < first:
        return True
    return (outer is not None and outer["raft_first"] <= outer["raft_last"]
            and outer["raft_first"] <= first and last <= outer["raft_last"])


class ConsumerLossMixin:
    """Loss reports of ``ConsumerReplica`` (its ``rep``, ``cs``, ``name``, ``group``, ``log``, ``leader``, ``closed``
    and ``data_lost``)."""

    rep: Any
    cs: Any
    name: str
    group: Any
    log: Any
    leader: bool
    closed: bool
    data_lost: dict | None
    _lost_in_log: tuple | None = None  # the RAFT range the LOST entries applied here covered
    _lost_proposing = False
    _lost_timer: Any = None
    _lost_advised = False  # (this process sent the advisory of the report it holds)

    def _what(self) -> str:
        return f"consumer '{self.rep.jsa.account.name} > {self.rep.name} > {self.name}'"

    def _data_lost(self, first: int, last: int) -> None:
        """(RaftGroup.on_data_lost) Committed entries of the consumer's group are gone from every member: its
        acknowledgements and deliveries since the last synced state may be missing (messages may be delivered
        again). Logged, kept on disk, the ``CONSUMER.DATA_LOST`` advisory, cluster.lost and /healthz; the leader
        proposes the report (LOST) so that every replica records it."""
        found = {"raft_first": first, "raft_last": last, "detected": format_time(time.time_ns()),
                 "server": self.cs.server.name}
        if getattr(getattr(self.group, "node", None), "lost_open", False):
            found["open_end"] = True  # (fewer members than a quorum kept their logs: lossreport)
        self.data_lost = lossreport.merge(self.data_lost, found)
        self._save_lost()
        self.cs.js.log.error(f"JetStream cluster {self._what()} lost {last - first + 1} committed RAFT entries "
                             f"({first}..{last}): acknowledgements or deliveries may be missing (messages may be "
                             f"delivered again)")
        self._lost_advisory()
        if self.leader:
            self._propose_lost()

    def _save_lost(self) -> None:
        lossreport.save_for(self.group, self.data_lost, self.cs.js.log, self._what())

    def _lost_advisory(self) -> None:
        from rillet.jetstream.cluster import monitor
        from rillet.jetstream.cluster.consumers import send_advisory
        self._lost_advised = True
        now = time.time_ns()
        rep = self.rep
        info = dict(self.data_lost or {})

        def build(acc: str) -> tuple[str, dict]:
            d = monitor._adv("consumer_data_lost", now, acc, self.cs.js.domain or "",
                             {"stream": rep.name, "consumer": self.name, "raft_group": self.group.name, "lost": info})
            return f"{monitor.ADV}.CONSUMER.DATA_LOST.{rep.name}.{self.name}", d
        send_advisory(self.cs, rep.jsa, build)

    def lost_pending(self) -> bool:
        """The report names RAFT entries no LOST entry applied here covered yet."""
        d = self.data_lost
        if d is None or d["raft_last"] < d["raft_first"] or "unreadable" in d:
            return False  # (a report that could not be read names no range to tell the others of)
        got = self._lost_in_log
        return got is None or not (got[0] <= d["raft_first"] and d["raft_last"] <= got[1])

    def _lost_on_lead(self) -> None:
        """(this replica became the consumer leader) A report not yet in the log is proposed; the advisory is sent
        again when this process has not sent it (the loss is still there after a restart)."""
        if self.data_lost is None:
            return
        if not self._lost_advised:
            self._lost_advisory()
        self._propose_lost()

    def _propose_lost(self) -> None:
        """(leader) Propose the report (LOST) while it names entries not in the log yet; with a member whose build
        cannot apply it (no route yet, or an older build), again every PROPOSE_AGAIN seconds while leading. Not
        in a group of one member (nobody to tell)."""
        if self._lost_proposing or self.closed or not self.leader or not self.lost_pending():
            return
        g = self.group
        if len(g.peers) < 2:
            return
        if not g.members_decode(CONSUMER_LOST):
            if self._lost_timer is None:
                self._lost_timer = self.cs.js.loop.call_later(PROPOSE_AGAIN, self._propose_again)
            return
        self._lost_proposing = True
        report = {k: v for k, v in self.data_lost.items() if k in ("raft_first", "raft_last", "detected", "server",
                                                                   "open_end", "accepted")}

        def done(_: Any, res: Any, err: BaseException | None) -> None:
            self._lost_proposing = False
            if err is not None and not isinstance(err, NotLeader):
                self.cs.js.log.error(f"JetStream cluster {self._what()}: proposing the loss report failed: {err}")
            elif err is None:
                self._propose_lost()  # (a wider loss found meanwhile: proposed in turn)
        self.log.propose(Entry(LOST, (_enc.encode(report),)), done)

    def _propose_again(self) -> None:
        self._lost_timer = None
        self._propose_lost()

    def _stop_lost(self) -> None:
        if self._lost_timer is not None:
            self._lost_timer.cancel()
            self._lost_timer = None

    def _apply_lost(self, report: dict) -> None:
        """(LOST, every replica) Record the report. A replica to which the lost RAFT range is news (its own
        recovery could not see it) logs the loss as the finders do, once (a replay of the entry logs nothing)."""
        first, last = int(report["raft_first"]), int(report["raft_last"])
        got = self._lost_in_log
        self._lost_in_log = (first, last) if got is None else (min(got[0], first), max(got[1], last))
        before = self.data_lost
        news = not covers(before, first, last)
        rep = lossreport.merge(before, dict(report))
        if rep != before:
            self.data_lost = rep
            self._save_lost()
        if news:
            self.cs.js.log.error(f"JetStream cluster {self._what()} lost {last - first + 1} committed RAFT entries "
                                 f"({first}..{last}), as {report.get('server') or 'another member'} found: "
                                 f"acknowledgements or deliveries may be missing (messages may be delivered again)")
