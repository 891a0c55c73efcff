"""Leading a nats-server RAFT group from Rillet: the candidate and leader side of nats-server's protocol.

``GoRaftPeer`` extends the follower of rillet.jetstream.cluster.gometa (``GoRaftFollower``) with nats-server's
candidate and leader rules (our own code, sans-IO like the follower):

* ``campaign()``: the next term, a vote for ourselves and a ``VoteRequest`` with our last term and index to
  ``$NRG.V.<group>`` (reply: our vote inbox). ``vote_response()`` counts the grants of that term; a grant
  from a peer whose log is empty counts only when every member voted (as nats-server: an empty log may
  have lost what it acknowledged); a higher term makes us a follower again.
* as leader: ``heartbeat()`` and ``propose()`` send append entries to ``$NRG.AE.<group>`` (reply: our
  response inbox); ``append_response()`` records each follower's last index, commits an index of our term
  once a quorum holds it, and serves a follower's catch-up: when its failing response names a
  ``$NRG.CR.`` inbox, the entries it lacks are sent there (with ``lterm``, our term), or our snapshot and peer
  state when they are gone from our log.
* ``transfer(peer)``: an ``ENTRY_LEADER_TRANSFER`` naming the peer, then we step down (the peer campaigns
  at once when it sees it, as nats-server's ``StepDown``).

What a leader of the *meta* group must also do -- answer the JetStream API, place streams, encode
assignments -- is here for one request only, ``StreamCreateAsLeader`` ($JS.API.STREAM.CREATE: placement on
the Go peers, the assignment in Go's layout); ``propose`` otherwise takes entries already encoded
(rillet.jetstream.cluster.gowire).
"""
from __future__ import annotations

import datetime
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.gometa import Committed, GoRaftFollower, Out
from rillet.gocompat.gotime import format_time
from rillet.raft import gowire as gw

__all__ = ["FOLLOWER", "CANDIDATE", "LEADER", "GoRaftPeer", "StreamCreateAsLeader", "request_info",
           "stream_assignment"]

FOLLOWER, CANDIDATE, LEADER = "follower", "candidate", "leader"


@dataclass
class GoRaftPeer(GoRaftFollower):
    role: str = FOLLOWER
    vote_inbox: str = field(default_factory=gw.new_inbox)
    resp_inbox: str = field(default_factory=gw.new_inbox)
    _votes: set[str] = field(default_factory=set)
    _empty_votes: set[str] = field(default_factory=set)
    match: dict[str, int] = field(default_factory=dict)  # leader: each follower's last index acknowledged
    last_seen: dict[str, float] = field(default_factory=dict)  # leader: when each follower last answered (monotonic)
    lead_on_transfer: bool = False  # a leadership transfer to us: campaign (else hand it on, see _hand_off)
    terms_led: list[int] = field(default_factory=list)
    # as nats-server's leader of a group whose membership is not managed by the meta layer (the meta group):
    # the first entry of a term is our peer state, and a peer that answers but is not a member is added
    announce_peers: bool = False
    add_unknown_peers: bool = False
    _adding: set[str] = field(default_factory=set)  # peers whose addition is proposed, not yet committed
    led_since: float = 0.0  # (monotonic) when we became leader

    # -- membership ---------------------------------------------------------------------------------------
    def size(self) -> int:
        return max(self.cluster_size, len(self.peers | {self.me}))

    def quorum(self) -> int:
        return self.size() // 2 + 1

    # -- the follower's paths, aware of the role --------------------------------------------------------
    def vote(self, vr: gw.VoteRequest, reply: str) -> list[Out]:
        if vr.term > self.term and self.role != FOLLOWER:
            self.role = FOLLOWER
        return super().vote(vr, reply)

    def append(self, kind: str, inbox: str, reply: str, ae: gw.AppendEntry,
               now: float) -> tuple[list[Out], list[Committed]]:
        lterm = ae.lterm or ae.term
        if self.role == LEADER and kind == "append" and ae.leader == self.me:
            return [], []  # our own append entry, back through a subscription of ours
        if self.role != FOLLOWER and lterm >= self.term and ae.leader != self.me:
            self.role = FOLLOWER  # another leader of this term or a later one
        return super().append(kind, inbox, reply, ae, now)

    def _hand_off(self) -> list[Out]:
        if self.lead_on_transfer:
            return self.campaign()  # (as nats-server's peer named by a transfer: at once)
        return super()._hand_off()

    # -- candidate ----------------------------------------------------------------------------------------
    def campaign(self) -> list[Out]:
        self.term += 1
        self.vote_for = self.me
        self.leader = ""
        self.role = CANDIDATE
        self._votes, self._empty_votes = {self.me}, set()
        self.catchup = None
        if self.me in self.peers and self.quorum() <= 1:
            return self._become_leader()  # (a group of one: our own vote is the quorum)
        return [Out(gw.vote_subject(self.group), self.vote_inbox,
                    gw.VoteRequest(self.term, self.pterm, self.pindex, self.me).encode())]

    def vote_response(self, vr: gw.VoteResponse) -> list[Out]:
        if vr.term > self.term:
            self.term, self.vote_for, self.role = vr.term, "", FOLLOWER
            return []
        if self.role != CANDIDATE or not vr.granted or vr.term != self.term:
            return []
        if vr.peer not in self.peers and len(self.peers) >= self.size():
            return []  # not a member
        (self._empty_votes if vr.empty else self._votes).add(vr.peer)
        if len(self._votes) >= self.quorum() or len(self._votes) + len(self._empty_votes) >= self.size():
            return self._become_leader()
        return []

    def _become_leader(self) -> list[Out]:
        self.role = LEADER
        self.leader = self.me
        self.match = {}
        self.led_since = now = time.monotonic()
        self.last_seen = {p: now for p in self._votes if p != self.me}  # (those that voted for us are up)
        self._adding = set()
        self.terms_led.append(self.term)
        if self.announce_peers:
            # nats-server's new leader appends its peer state first: an entry of its own term, whose commit also
            # commits whatever earlier terms left in the log (a leader counts only its own term's entries)
            return self.propose([gw.Entry(gw.ENTRY_PEER_STATE, self.peer_state().encode())])
        return self.heartbeat()

    def peer_state(self) -> gw.PeerState:
        """Our view of the membership, as an ``EntryPeerState`` carries it."""
        return gw.PeerState(tuple(sorted(self.peers | {self.me})), self.size(), self.domain_ext)

    def step_down(self) -> None:
        """Stop leading (or standing) without naming a successor: the followers elect after their timeout."""
        if self.role != FOLLOWER:
            self.role = FOLLOWER
            self.leader = ""

    def lost_quorum(self, now: float, window: float) -> bool:
        """(leader) Whether fewer than a quorum (ourselves included) answered within ``window`` seconds, once we
        have led that long (nats-server's leader steps down then)."""
        if self.role != LEADER or now - self.led_since < window:
            return False
        heard = 1 + sum(1 for p, t in self.last_seen.items() if p != self.me and p in self.peers and now - t <= window)
        return heard < self.quorum()

    # -- leader ---------------------------------------------------------------------------------------------
    def _ae(self, entries: tuple[gw.Entry, ...], pterm: int, pindex: int, lterm: int = 0) -> gw.AppendEntry:
        return gw.AppendEntry(self.me, self.term, self.commit, pterm, pindex, entries, lterm)

    def heartbeat(self) -> list[Out]:
        if self.role != LEADER:
            return []
        return [Out(gw.append_subject(self.group), self.resp_inbox, self._ae((), self.pterm, self.pindex).encode())]

    def propose(self, entries: list[gw.Entry]) -> list[Out]:
        """Append entries in our term and send them (leader only; ValueError otherwise)."""
        if self.role != LEADER:
            raise ValueError("not the leader")
        if not entries:
            raise ValueError("nothing to propose")
        pterm, pindex = self.pterm, self.pindex
        self._log.append((self.term, tuple(entries)))  # (one index for the lot, as nats-server)
        self.initializing = False
        return [Out(gw.append_subject(self.group), self.resp_inbox,
                    self._ae(tuple(entries), pterm, pindex).encode())]

    def append_response(self, ar: gw.AppendEntryResponse, reply: str) -> tuple[list[Out], list[Committed]]:
        if ar.term > self.term:
            self.term, self.vote_for, self.role, self.leader = ar.term, "", FOLLOWER, ""
            return [], []
        if self.role != LEADER:
            return [], []
        self.last_seen[ar.peer] = time.monotonic()
        add: list[Out] = []
        if (self.add_unknown_peers and ar.peer not in self.peers and ar.peer not in self._adding
                and not self.removed_lately(ar.peer) and ar.peer != self.me):
            # (nats-server: a leader that hears from a peer outside the group proposes adding it)
            self._adding.add(ar.peer)
            add = self.propose([gw.Entry(gw.ENTRY_ADD_PEER, ar.peer.encode("latin-1"))])
        if ar.success:
            if ar.peer not in self.match or ar.index > self.match[ar.peer]:
                self.match[ar.peer] = min(ar.index, self.pindex)
            return add, self._advance_commit()
        if reply:
            return add + self._catch_up(ar.index, reply), []
        return add, []

    def _advance_commit(self) -> list[Committed]:
        done: list[Committed] = []
        for n in range(self.pindex, self.commit, -1):
            if self.term_at(n) != self.term:
                break  # (only an index of our own term is committed by counting)
            # (only members count: a peer being added, or one removed, is no part of the quorum)
            have = 1 + sum(1 for p, i in self.match.items() if p != self.me and i >= n and p in self.peers)
            if have >= self.quorum():
                for index in range(max(self.commit, self.base_index) + 1, n + 1):
                    done += [Committed(index, e) for e in self._log[index - self.base_index - 1][1]]
                self.commit = self.applied = n
                break
        for c in done:  # (the leader's own membership proposals take effect once committed)
            if c.entry.type in (gw.ENTRY_ADD_PEER, gw.ENTRY_REMOVE_PEER) and c.entry.data:
                self._adding.discard(c.entry.data.decode("latin-1"))
                self.membership_change(c.entry)
        return done

    def _catch_up(self, from_index: int, inbox: str) -> list[Out]:
        """The entries after ``from_index`` to a follower's catch-up inbox (our snapshot first when they are
        no longer in our log)."""
        outs: list[Out] = []
        index = from_index
        if index < self.base_index:
            if not self.snapshot_peer_state:  # (no snapshot of ours: a meta snapshot of no streams is empty)
                return []
            outs.append(Out(inbox, "", self._ae(
                (gw.Entry(gw.ENTRY_SNAPSHOT, self.snapshot_data), gw.Entry(gw.ENTRY_PEER_STATE, self.snapshot_peer_state)),
                self.base_term, self.base_index, self.term).encode()))
            index = self.base_index
        while index < self.pindex:
            t, es = self._log[index - self.base_index]
            # (the commit an entry's append carried when it was new: never past its own previous index. A Go
            # follower stores the append as it came, and when it starts again takes the first stored append's
            # commit as known before replaying: a commit past the stored entries made it skip applying them
            # (commit 5 != applied 1), its store cut back to its snapshot and never filled again)
            outs.append(Out(inbox, "", gw.AppendEntry(self.me, t, min(self.commit, index), self.term_at(index) or 0,
                                                      index, es, self.term).encode()))
            index += 1
        return outs

    def current(self, peer: str) -> bool:
        """Whether ``peer`` answered us in this term and holds our whole log (leader)."""
        return peer in self.match and self.match[peer] >= self.pindex

    def transfer(self, peer: str, force: bool = False) -> list[Out]:
        """Hand leadership to ``peer`` (leader only, ``peer`` current): an ENTRY_LEADER_TRANSFER, then step
        down. (A peer still behind would not see the entry until caught up, and we no longer lead to do it.)
        ``force``: a peer that answered in this term but may lag by what is in flight (as nats-server picks
        a healthy peer); should it miss the entry, the group elects after an election timeout."""
        if self.role != LEADER:
            raise ValueError("not the leader")
        if not self.current(peer) and not (force and peer in self.match):
            raise ValueError(f"peer {peer!r} is not current")
        outs = self.propose([gw.Entry(gw.ENTRY_LEADER_TRANSFER, peer.encode("latin-1"))])
        self.role = FOLLOWER
        self.leader = ""
        return outs


# -- the meta leader's stream create, in a Go cluster -----------------------------------------------------------

_STREAM_DEFAULTS = (("retention", "limits"), ("max_consumers", -1), ("max_msgs", -1), ("max_bytes", -1),
                    ("max_age", 0), ("max_msgs_per_subject", -1), ("max_msg_size", -1), ("discard", "old"),
                    ("storage", "file"), ("num_replicas", 1), ("duplicate_window", 120_000_000_000))


def request_info(hdr: bytes) -> dict | None:
    """The requester's client info a service import adds (``Nats-Request-Info`` header), or None."""
    for line in hdr.split(b"\r\n")[1:]:
        k, sep, v = line.partition(b":")
        if sep and k.strip().lower() == b"nats-request-info":
            try:
                doc = json.loads(v.strip())
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def account_request(account: str, reply: Optional[bytes], hdr: int, msg: bytes) -> Optional[tuple[dict, bytes]]:
    """(client info, body) of an API request a Rillet leader of a Go group answers: one of ``account``, with the
    requester's info (``Nats-Request-Info``) and somewhere to answer; None otherwise."""
    if hdr <= 0 or not reply:
        return None
    ci = request_info(bytes(msg[:hdr]))
    if ci is None or ci.get("acc") != account:
        return None
    return ci, bytes(msg[hdr:])


def stepdown_target(body: bytes, me: str, peers: Any) -> tuple[str, Any]:
    """(the preferred peer, or ""; an ApiError or None) of a leader step-down request's body as nats-server's
    group leaders check it: bad JSON, a preferred server that already leads or is no peer of the group."""
    from rillet.jetstream.errors import ApiError
    try:
        doc = json.loads(body or b"{}")
    except ValueError as e:
        return "", ApiError.make("INVALID_JSON", err=str(e))
    name = ((doc.get("placement") or {}).get("preferred") or "") if isinstance(doc, dict) else ""
    if not name:
        return "", None
    preferred = gw.peer_id(name)
    if preferred == me or preferred not in peers:
        why = "is already leader" if preferred == me else "not known"
        return preferred, ApiError.make("CLUSTER_NO_PEERS", err=f"preferred server {json.dumps(name)} {why}")
    return preferred, None


def replica_infos(raft: Any, me: str, names: dict) -> list[dict]:
    """The ``cluster.replicas`` of a Go group's stream or consumer info this server answers as its leader: every
    other peer, current when the RAFT peer says so or within 8 entries of the leader's last."""
    now = time.monotonic()
    out = []
    for p in sorted(raft.peers - {me}):
        seen = raft.last_seen.get(p)
        info = {"name": names.get(p, p), "current": raft.current(p) or
                (p in raft.match and raft.pindex - raft.match[p] < 8),
                "active": int((now - seen) * 1e9) if seen else 0}
        lag = raft.commit - raft.match[p] if p in raft.match else 0
        if lag > 0:  # (nats-server's PeerInfo: omitted when none)
            info["lag"] = lag
        info["peer"] = p
        out.append(info)
    return out


def with_dynamic_metadata(cfg: dict) -> dict:
    """A stream's or consumer's config (nats-server's JSON) as an API answer gives it: ``_nats.ver`` and
    ``_nats.level`` added to its metadata, which the assignment stores without them (keys sorted, as Go's map)."""
    import rillet
    from rillet.jetstream.configtypes import JS_API_LEVEL, META_SERVER_LEVEL, META_SERVER_VERSION
    md = dict(cfg.get("metadata") or {})
    md[META_SERVER_VERSION] = rillet.SERVER_VERSION
    md[META_SERVER_LEVEL] = str(JS_API_LEVEL)
    return dict(cfg, metadata=dict(sorted(md.items())))


def cluster_info(server: Any, assignment: dict, raft: Any, me: str, names: dict) -> dict:
    """The ``cluster`` block of a Go group's stream or consumer info this server answers as its leader, in
    nats-server's ClusterInfo layout: the cluster, the RAFT group's name, the leader and since when, the account
    its traffic goes in (the system account's: ``cluster_traffic: owner`` is not done here), the replicas."""
    now = time.monotonic()
    since = time.time_ns() - int((now - raft.led_since) * 1e9) if raft.led_since else 0
    doc: dict[str, Any] = {"name": (assignment.get("group") or {}).get("cluster") or "",
                           "raft_group": (assignment.get("group") or {}).get("name") or ""}
    doc["leader"] = server.name
    if since:
        doc["leader_since"] = format_time(since)
    sys_acc = getattr(server, "system_account", None)
    doc["system_account"] = True
    doc["traffic_account"] = getattr(sys_acc, "name", "") or ""
    doc["replicas"] = replica_infos(raft, me, names)
    return doc


def answer_json(ic: Any, reply: bytes, doc: dict) -> None:
    """Publish API answer ``doc`` (nats-server's JSON) to ``reply`` through internal client ``ic``."""
    from rillet.jetstream.api import codec as apijson
    ic.publish(reply, None, apijson.go_json(doc))


def stream_assignment(client: dict, cfg: dict, peers: list[str], cluster: str, subject: str,
                      reply: str) -> dict:
    """A stream assignment in the Go meta leader's JSON layout (field order included)."""
    cfg = dict(cfg)
    for k, v in _STREAM_DEFAULTS:
        cfg.setdefault(k, v)
    client = {k: v for k, v in client.items() if k not in ("jwt", "issuer_key")}  # (as Go's forProposal)
    storage = cfg["storage"]
    doc = {"client": client,
           "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
           "stream": cfg,
           # (a preferred peer campaigns at once; without one the new group waits out an election timeout)
           "group": {"name": gw.group_name("S", len(peers), storage), "peers": peers, "store": storage,
                     "cluster": cluster, "preferred": peers[0]},
           "sync": "$JSC.SYNC." + gw.random_token(8)}
    if subject:
        doc["subject"] = subject
    if reply:
        doc["reply"] = reply
    return doc


class StreamCreateAsLeader:
    """While the member leads the Go meta group, it takes ``$JS.API.STREAM.CREATE.<name>`` requests (in the
    system account, where the JetStream-enabled accounts' imports bring them with the requester's info): it
    places the stream on the Go JetStream peers and proposes the assignment; the Go servers that get it create
    the stream and answer the request (its subject and reply are part of the assignment), as with a Go meta
    leader; and ``$JS.API.STREAM.DELETE.<name>`` (the removal proposed, the stream's leader answers). Only these
    requests: everything else the API does is not here (tests only)."""

    def __init__(self, member: Any, rng: random.Random | None = None, include_self: bool = False) -> None:
        self.member = member
        self.rng = rng or random.Random()
        self.include_self = include_self  # place a replica on this server too (rillet.jetstream.cluster.gostream)
        self.sub = member.ic.subscribe("$JS.API.STREAM.CREATE.*", self._on_request)
        self.del_sub = member.ic.subscribe("$JS.API.STREAM.DELETE.*", self._on_delete)
        self.proposed = 0
        self.removals = 0

    def close(self) -> None:
        self.member.ic.remove_sub(self.sub)
        self.member.ic.remove_sub(self.del_sub)

    def _on_delete(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """``$JS.API.STREAM.DELETE.<name>``: as the Go meta leader, propose the stream's removal with the
        request's subject, reply and client (the stream's leader answers once it is applied); an unknown
        stream is answered here (10059)."""
        m = self.member
        if m.raft.role != LEADER or hdr <= 0:
            return
        ci = request_info(bytes(msg[:hdr]))
        if ci is None or not ci.get("acc"):
            return
        subj = subject.decode()
        name = subj.rsplit(".", 1)[-1]
        sa = m.state.streams.get((ci["acc"], name))
        if sa is None:
            if reply:
                m.ic.publish(reply, None, json.dumps(
                    {"type": "io.nats.jetstream.api.v1.stream_delete_response",
                     "error": {"code": 404, "err_code": 10059, "description": "stream not found"}},
                    separators=(",", ":")).encode())
            return
        client = {k: v for k, v in ci.items() if k not in ("jwt", "issuer_key")}
        doc = {"client": client, "created": sa.get("created", ""), "stream": sa["stream"], "group": sa["group"],
               "sync": "", "subject": subj}
        if reply:
            doc["reply"] = reply.decode()
        m.propose([gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_REMOVE_STREAM, doc))])
        self.removals += 1

    def _on_request(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        m = self.member
        if m.raft.role != LEADER or hdr <= 0:
            return  # (as a Go server that is not the meta leader: silent)
        ci = request_info(bytes(msg[:hdr]))
        try:
            cfg = json.loads(bytes(msg[hdr:]) or b"{}")
        except ValueError:
            return
        subj = subject.decode()
        if ci is None or not isinstance(cfg, dict) or cfg.get("name") != subj.rsplit(".", 1)[-1]:
            return
        candidates = sorted(p for p in m.raft.peers if p != m.peer)
        n = int(cfg.get("num_replicas") or 1)
        mine = 1 if self.include_self and n > 1 else 0  # (never alone: this server does not lead a stream)
        if n - mine > len(candidates):
            return
        peers = self.rng.sample(candidates, n - mine) + [m.peer] * mine  # (the first, a Go server, preferred)
        doc = stream_assignment(ci, cfg, peers, m.server.opts.cluster.name, subj, reply.decode() if reply else "")
        m.propose([gw.Entry(gw.ENTRY_NORMAL, ge.encode_json_entry(ge.OP_ASSIGN_STREAM, doc))])
        self.proposed += 1
