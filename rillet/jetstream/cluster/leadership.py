"""Leadership of a RAFT group (a mixin of ``rillet.jetstream.cluster.group.RaftGroup``): step-down requests
carried out and remembered across members (the step-down note, a group control message), the peers a
leadership may go to, hand-overs awaited, a new group's first campaigns, and membership changes proposed
through the node."""
from __future__ import annotations

from typing import Any, Callable, Optional

from rillet.jetstream.log import NotLeader
from rillet.raft.node import ADD, FOLLOWER, LEADER, PRE_CANDIDATE, REMOVE
from rillet.raft.node import NotLeader as NodeNotLeader

CAMPAIGN_RETRY = 0.02  # seconds before a new group's first campaign is repeated when no leader came of it
CAMPAIGN_RETRY_MAX = 0.5  # (doubled each time up to this; then the node's own election timeout)
# A group control message (not a RAFT message) starts with 0xC1, a byte MessagePack never uses:
CONTROL = b"\xc1"
STEPDOWN_NOTE = CONTROL + b"SD\x00"  # + the reply subject of the stepdown request being carried out
STEPDOWN_NOTE_TTL = 30.0  # seconds a member remembers a stepdown request another member carried out


class Leadership:
    """(mixin of RaftGroup) step-downs, hand-overs, campaigns and membership changes."""

    # (RaftGroup's fields this part uses, for the type checker)
    node: Any
    loop: Any
    transport: Any
    name: str
    log: Any

    def _on_control(self, frm: str, data: bytes) -> None:
        if data.startswith(STEPDOWN_NOTE) and frm in self.node.voters:
            now = self.loop.time()
            seen = self._stepdowns_seen
            if len(seen) > 64:
                for k in [k for k, t in seen.items() if now - t > STEPDOWN_NOTE_TTL]:
                    del seen[k]
            seen[bytes(data[len(STEPDOWN_NOTE):])] = now
            return
        self._bad(f"unknown control message from {frm}")

    def stepdown_seen(self, request: bytes) -> bool:
        """Whether another member already carried out the stepdown request with this reply subject (every
        server gets a ``$JS.API`` request; one routed late can reach the new leader after the transfer)."""
        t = self._stepdowns_seen.get(bytes(request))
        return t is not None and self.loop is not None and self.loop.time() - t <= STEPDOWN_NOTE_TTL

    def eligible_peers(self) -> list[str]:
        """On the leader: the other voters heard from within three heartbeats (nats-server's healthy peers
        for a leader transfer)."""
        n = self.node
        if not self.running or n.role != LEADER:
            return []
        limit = 3 * self.heartbeat_ticks
        return [p for p, pr in n.prs.items()
                if p in n.voters and p != self.id and pr.heard and n.ticks - pr.last_seen <= limit]

    def stepdown(self, to: Optional[str] = None, note: Optional[bytes] = None) -> None:
        """Hand leadership over to ``to`` or to the most up-to-date other member (NotLeader if this node
        is not the leader; ValueError when there is no member to hand over to). ``note``: the request's
        reply subject, told to the members before the transfer starts (``stepdown_seen``), on the same
        connection as the RAFT messages, so a member hears of it before it can become the leader."""
        n = self.node
        if not self.running or n.role != LEADER:
            raise NotLeader()
        if note:
            self.transport.broadcast(self.name, STEPDOWN_NOTE + bytes(note))
        if to is None:
            best = None
            for p, pr in n.prs.items():
                if p not in n.voters or not pr.heard or n.ticks - pr.last_seen > self.election_ticks:
                    continue
                if best is None or pr.match > best[1]:
                    best = (p, pr.match)
            if best is None:
                raise ValueError("no other member to hand leadership to")
            to = best[0]
        elif to == self.id:
            return
        elif to not in n.voters:
            raise ValueError(f"peer {to} is not a member of the group")
        if self._proposers:
            # (what the owners proposed before the handover goes in the log first, as if proposed at once: a
            # consumer engine that took a message off the stream has its C_DELIVERED in the log)
            self._take_proposals()
        try:
            n.transfer_leadership(to)
        except NodeNotLeader:
            raise NotLeader() from None
        self._schedule()

    def after_handover(self, cb: Callable[[], None], within: float) -> None:
        """After ``stepdown``: call ``cb`` once another member leads and has committed the first entry of its
        term (it has announced its leadership and taken over the group's subscriptions), or after
        ``within`` seconds whatever happened."""
        if self._handover is not None:
            prev = self._handover[1]
            self._handover = None
            prev()
        self._handover = (self.loop.time() + within, cb)
        self.loop.call_later(within, self._check_handover)

    def _check_handover(self) -> None:
        h = self._handover
        if h is None:
            return
        n = self.node
        done = (not self.running or self.loop.time() >= h[0]
                or (n.role == FOLLOWER and n.leader not in (None, self.id) and n.term_at(n.commit) == n.term))
        if done:
            self._handover = None
            try:
                h[1]()
            except Exception as e:
                self.log.error(f"RAFT group {self.name!r}: handover callback failed: {e!r}")

    def campaign_soon(self) -> None:
        """Start an election now instead of after a full election timeout (a new group's preferred
        peer, a group of one): the node is ticked up to its timeout. The other members of a new group
        join it when they apply its assignment, a few milliseconds after this one may have asked for
        votes (a vote request for a group a server has not joined yet is dropped): while no leader is
        known, the campaign is repeated after CAMPAIGN_RETRY seconds, doubled each time (as nats-server's
        short campaign timeout for a new group's preferred peer), instead of waiting for a full
        election timeout. Only time is hurried: every election rule of the node holds."""
        n = self.node
        if n is None or n.role != FOLLOWER or self.id not in n.voters:
            return
        self._tick_to_campaign()
        if len(n.voters) > 1 and n.leader is None:
            self.loop.call_later(CAMPAIGN_RETRY, self._campaign_again, CAMPAIGN_RETRY)

    def _tick_to_campaign(self) -> None:
        n = self.node
        for _ in range(2 * self.election_ticks + 1):
            n.tick()
            if n.role not in (FOLLOWER, PRE_CANDIDATE) or n.election_elapsed == 0:
                break  # (a campaign started: the node's election timer was reset)
        self._schedule()

    def _campaign_again(self, delay: float) -> None:
        n = self.node
        if (not self.running or n is None or n.leader is not None or self.id not in n.voters
                or n.role not in (FOLLOWER, PRE_CANDIDATE) or n.vote not in (None, self.id)):
            return  # (a leader is known, a real vote is under way, or this member voted for another)
        self._tick_to_campaign()
        delay *= 2
        if delay <= CAMPAIGN_RETRY_MAX:
            self.loop.call_later(delay, self._campaign_again, delay)

    def add_peer(self, peer: str) -> None:
        self._conf_change(ADD, peer)

    def remove_peer(self, peer: str) -> None:
        self._conf_change(REMOVE, peer)

    def _conf_change(self, op: str, peer: str) -> None:
        if not self.running:
            raise NotLeader()
        try:
            self.node.propose_conf_change(op, peer)
        except NodeNotLeader:
            raise NotLeader() from None
        self._schedule()
