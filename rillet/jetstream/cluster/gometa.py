"""A Rillet server as a member of a Go nats-server cluster's JetStream meta group, speaking nats-server's RAFT.

The meta side of mixed Go + Rillet JetStream clusters (docs/mixed-clusters.md): the server follows the Go meta
group over ``$NRG.`` subjects with nats-server's encodings (rillet.raft.gowire), votes in its elections,
answers its append entries, catches up from the leader (entries or a snapshot) and applies the committed meta
entries (rillet.jetstream.cluster.gowire) into ``GoMetaState``: the stream and consumer assignments the Go meta
leader decided. By default it does not become meta leader (a leadership transfer to it is handed on at once
to the Go servers, see ``GoRaftFollower._hand_off``); with ``feature_flags { rillet_go_meta_lead: true }``
it stands for election as nats-server's members do (``GoMetaMember.stand``: golead.py has the candidate and
leader rules, gometalead.py the meta leader's JetStream API). The stream replicas placed on it are
gostream.py's. As a
nats-server without JetStream of its own does, it gives its JetStream-enabled accounts the cluster's
JetStream API (``bridge_js_api``): its clients create streams and publish through it.

It is separate from Rillet's own clustered JetStream (rillet.jetstream.cluster.meta, with its ``$RNRG.``
transport): nothing runs unless switched on, by ``feature_flags { rillet_go_meta: true }`` in the server's
configuration (``attach_to_routes``, for a server without JetStream of its own, with
``jetstream { enabled: false, store_dir: <dir> }`` where its term and vote are kept) or by attaching a
``GoMetaMember`` to a server; the Rillet-only cluster protocol is untouched.

Two parts:

* ``GoRaftFollower``: sans-IO. ``vote(request, reply)`` and ``append(kind, inbox, reply, ae, now)`` return the
  messages to send (``Out``) and the committed items to apply. Its rules are nats-server's follower rules
  (our own code): a vote is granted once per term, to a candidate whose log is at least as up to date; an append
  entry that does not follow our last entry starts a catch-up (a failing response whose reply names our
  ``$NRG.CR.`` inbox), or is dropped without an answer when it is at or below our last index; a catch-up
  that the leader can no longer serve from its log arrives as a snapshot and peer state; only new entries
  on the group's subject are acknowledged for quorum (catch-up entries get an answer on the leader's
  ``$NRG.CP.`` progress inbox when it names one). The log is kept in memory: a restarted member starts empty
  and is caught up again (as nats-server's memory-stored groups).
* ``GoMetaMember``: the I/O driver on a server: an internal client of the system account subscribed to
  ``$NRG.V.<group>``, ``$NRG.AE.<group>`` and its current catch-up inbox.
"""
from __future__ import annotations

import os
import random
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from rillet.jetstream.cluster import gowire as ge
from rillet.jetstream.cluster.gometa_report import (CAP_BINARY_SNAPSHOT, CAP_JETSTREAM, STATSZ_EARLY,
                                                    JetStreamReport)
from rillet.raft import gowire as gw

__all__ = ["Out", "Committed", "GoRaftFollower", "GoMetaState", "GoMetaMember", "TermVote", "CATCHUP_STALL", "GO_META_FLAG", "GO_LEAD_FLAG",
           "attach_to_routes", "member_of", "bridge_js_api", "JetStreamReport", "CAP_JETSTREAM", "CAP_BINARY_SNAPSHOT"]

CATCHUP_STALL = 2.0  # seconds without catch-up progress before the catch-up is asked for again
HEARTBEAT = 1.0  # seconds between a leader's heartbeats (nats-server's hbInterval)
CAMPAIGN_RETRY = 0.3  # seconds before a candidate of a new group stands again
# nats-server's defaults: a follower that hears no leader for 4-9 s stands for election; one that refused a vote
# because its own log is longer stands after 0.1-0.8 s; a leader that heard from no quorum for 10 s steps down
ELECTION_TIMEOUT = (4.0, 9.0)
CAMPAIGN_TIMEOUT = (0.1, 0.8)
LOST_QUORUM = 10.0
PEER_REMOVE_TIMEOUT = 300.0  # seconds before a removed peer may be added back (nats-server's peerRemoveTimeout)
SNAPSHOT_EVERY = 1024  # (standing) log entries beyond the last snapshot before the member compacts its log


@dataclass(frozen=True, slots=True)
class Out:
    subject: str
    reply: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed entry to apply (``snapshot``: the entry is the leader's state machine image). The entries
    of one append entry share its index."""
    index: int
    entry: gw.Entry
    snapshot: bool = False


@dataclass
class _Catchup:
    inbox: str
    cterm: int  # the leader's position when the catch-up started: done once our log reaches it
    cindex: int
    active: float
    pindex: int


@dataclass
class GoRaftFollower:
    group: str
    me: str
    term: int = 0
    vote_for: str = ""
    leader: str = ""
    base_index: int = 0  # index and term of the last snapshot (entries before it are gone)
    base_term: int = 0
    commit: int = 0
    applied: int = 0
    peers: set[str] = field(default_factory=set)
    cluster_size: int = 0
    catchup: Optional[_Catchup] = None
    new_inbox: Callable[[], str] = gw.new_catchup_inbox
    # (term, entries) from base_index + 1: in nats-server's RAFT an index is one append entry, whatever number
    # of entries it carries (its WAL stores each append entry as one record)
    _log: list[tuple[int, tuple[gw.Entry, ...]]] = field(default_factory=list)
    votes_granted: int = 0
    dropped: int = 0
    handoffs: int = 0
    trace: Optional[list] = None  # (debugging) every append entry's position against ours, when a list
    snapshot_data: bytes = b""  # the last snapshot installed (base_index), to catch others up with
    snapshot_peer_state: bytes = b""
    removed_peers: set[str] = field(default_factory=set)  # peers whose removal we saw committed or appended
    removed_at: dict[str, float] = field(default_factory=dict)  # (time.monotonic() of each removal: removed_lately)
    domain_ext: Optional[int] = gw.EXT_UNDETERMINED  # the extension state of the last peer state seen
    # a member of a group being created (nats-server's initializing node): its empty log votes as a full one,
    # so that a new group elects with a quorum rather than every member
    initializing: bool = False

    # -- log ------------------------------------------------------------------------------------------
    @property
    def pindex(self) -> int:
        return self.base_index + len(self._log)

    @property
    def pterm(self) -> int:
        return self._log[-1][0] if self._log else self.base_term

    def term_at(self, index: int) -> Optional[int]:
        if index == self.base_index:
            return self.base_term
        if self.base_index < index <= self.pindex:
            return self._log[index - self.base_index - 1][0]
        return None

    def compact(self, index: int, data: bytes, peer_state: bytes) -> None:
        """Our log up to ``index`` replaced by a snapshot (its state machine image and peer state)."""
        term = self.term_at(index)
        if term is None or index > self.commit:
            raise ValueError(f"can not compact to {index}: not a committed index of our log")
        del self._log[:index - self.base_index]
        self.base_index, self.base_term = index, term
        self.snapshot_data, self.snapshot_peer_state = data, peer_state

    def _truncate_after(self, index: int) -> None:
        del self._log[max(index - self.base_index, 0):]

    def _reset(self) -> None:
        self._log.clear()
        self.base_index = self.base_term = 0
        self.commit = self.applied = 0

    # -- votes ----------------------------------------------------------------------------------------
    def vote(self, vr: gw.VoteRequest, reply: str) -> list[Out]:
        # (as nats-server's processVoteRequest: an empty log answers as empty, unless the node is initializing
        # and its vote is free for this candidate -- a stale term's answer stays empty)
        resp_empty = self.pindex == 0
        if vr.term < self.term:
            return self._vote_out(reply, False, resp_empty)
        if vr.term > self.term:
            self.catchup = None
            self.term = vr.term
            self.vote_for = ""
            self.leader = ""
        vote_ok = self.vote_for in ("", vr.candidate)
        if vote_ok and resp_empty and self.initializing:
            resp_empty = False
        granted = (vote_ok
                   and (vr.last_term > self.pterm or (vr.last_term == self.pterm and vr.last_index >= self.pindex)))
        if granted:
            self.vote_for = vr.candidate
            self.votes_granted += 1
        return self._vote_out(reply, granted, resp_empty)

    def _vote_out(self, reply: str, granted: bool, empty: bool) -> list[Out]:
        if not reply:
            return []
        return [Out(reply, "", gw.VoteResponse(self.term, self.me, granted, empty).encode())]

    # -- append entries -------------------------------------------------------------------------------
    def _resp(self, to: str, success: bool, reply: str = "") -> list[Out]:
        if not to:
            return []
        return [Out(to, reply, gw.AppendEntryResponse(self.pterm, self.pindex, self.me, success).encode())]

    def _start_catchup(self, ae: gw.AppendEntry, now: float) -> str:
        inbox = self.new_inbox()
        self.catchup = _Catchup(inbox, ae.pterm, ae.pindex, now, self.pindex)
        return inbox

    def append(self, kind: str, inbox: str, reply: str, ae: gw.AppendEntry,
               now: float) -> tuple[list[Out], list[Committed]]:
        """An append entry received on the group's subject (``kind="append"``) or on a catch-up inbox
        (``kind="catchup"``, ``inbox`` its subject)."""
        is_new = kind == "append"
        if self.trace is not None:
            self.trace.append((kind, ae.term, ae.pterm, ae.pindex, len(ae.entries), ae.commit, self.pterm, self.pindex))
        cu = self.catchup
        if not is_new and (cu is None or cu.inbox != inbox):
            self.dropped += 1  # an old catch-up
            return [], []
        lterm = ae.lterm or ae.term
        if lterm > self.term:
            self.term = lterm
            self.vote_for = ""
        elif lterm < self.term and (is_new or ae.lterm):
            if not is_new:
                self.dropped += 1
                return [], []
            return [Out(reply, "", gw.AppendEntryResponse(self.term, self.pindex, self.me, False).encode())]\
                if reply else [], []
        if cu is not None:
            if self.pterm >= cu.cterm and self.pindex >= cu.cindex:
                self.catchup = cu = None
            elif is_new:
                if self.pindex != cu.pindex:
                    cu.pindex, cu.active = self.pindex, now
                if now - cu.active > CATCHUP_STALL:
                    new = self._start_catchup(ae, now)
                    return self._resp(reply, False, new), []
                return [], []
            else:
                cu.active = now
        if is_new and ae.leader and self.leader != ae.leader:
            self.leader = ae.leader

        if ae.pterm != self.pterm or ae.pindex != self.pindex:
            if ae.pindex <= self.pindex:
                t = self.term_at(ae.pindex)
                if ae.pindex < self.commit:
                    pass  # already committed here
                elif t is None:
                    self._reset()
                    self.catchup = None
                    return [], []
                elif t == ae.pterm:
                    self._truncate_after(ae.pindex)
                elif ae.pindex > self.commit:
                    self._truncate_after(ae.pindex - 1)
                # (else: a different term at our commit index -- never truncated: no answer)
                if not (ae.pterm == self.pterm and ae.pindex == self.pindex):
                    self.catchup = None
                    return [], []  # no answer: the leader sees no progress and catches us up
            elif cu is not None:
                # the leader no longer has our next entries: a snapshot and its peer state must come first
                if (len(ae.entries) != 2 or ae.entries[0].type != gw.ENTRY_SNAPSHOT
                        or ae.entries[1].type != gw.ENTRY_PEER_STATE):
                    self.catchup = None
                    return [], []
                ps = gw.PeerState.decode(ae.entries[1].data)
                self.peers = set(ps.known_peers)
                self.cluster_size = ps.cluster_size
                self.domain_ext = ps.domain_ext
                self._log.clear()
                self.base_index, self.base_term = ae.pindex, ae.pterm
                self.snapshot_data, self.snapshot_peer_state = ae.entries[0].data, ae.entries[1].data
                self.commit = self.applied = ae.pindex
                self.initializing = False  # (as nats-server's node installing a leader's snapshot)
                return self._resp(reply, True), [Committed(ae.pindex, ae.entries[0], snapshot=True)]
            else:
                inbox = self._start_catchup(ae, now)
                return self._resp(reply, False, inbox), []

        handoff: list[Out] = []
        if ae.entries:
            self._log.append((ae.term, ae.entries))
            self.initializing = False  # (the group has a history now: an empty log again would be a lost one)
        for e in ae.entries:
            if e.type == gw.ENTRY_LEADER_TRANSFER and is_new and e.data == self.me.encode("latin-1"):
                handoff = self._hand_off()
            elif e.type in (gw.ENTRY_ADD_PEER, gw.ENTRY_REMOVE_PEER):
                self.membership_change(e)
            elif e.type == gw.ENTRY_PEER_STATE:
                ps = gw.PeerState.decode(e.data)
                self.peers = set(ps.known_peers)
                self.cluster_size = ps.cluster_size
                self.domain_ext = ps.domain_ext
        committed: list[Committed] = []
        upto = min(ae.commit, self.pindex)
        if upto > self.commit:
            for index in range(max(self.commit, self.base_index) + 1, upto + 1):
                committed += [Committed(index, e) for e in self._log[index - self.base_index - 1][1]]
            self.commit = upto
            self.applied = upto
        # new entries are acknowledged to the leader; catch-up entries only to a progress inbox it names
        return self._resp(reply, True) + handoff, committed

    def membership_change(self, e: gw.Entry) -> None:
        """A peer added or removed (as nats-server, the cluster size follows the peer count)."""
        peer = e.data.decode("latin-1")
        if e.type == gw.ENTRY_ADD_PEER:
            self.peers.add(peer)
            self.removed_peers.discard(peer)
            self.removed_at.pop(peer, None)
        else:
            self.peers.discard(peer)
            self.mark_removed(peer)
        self.cluster_size = len(self.peers)

    def mark_removed(self, peer: str) -> None:
        self.removed_peers.add(peer)
        self.removed_at[peer] = time.monotonic()

    def removed_lately(self, peer: str) -> bool:
        """Whether ``peer``'s removal is recent enough that a leader hearing from it does not add it back:
        nats-server lets a removed peer rejoin once PEER_REMOVE_TIMEOUT has passed (raft.go trackPeer)."""
        at = self.removed_at.get(peer)
        return peer in self.removed_peers and (at is None or time.monotonic() - at < PEER_REMOVE_TIMEOUT)

    def _hand_off(self) -> list[Out]:
        """The leader stepped down in our favour, but this member does not lead: instead of leaving the group
        without a leader until the Go servers' election timeouts (4-9 s), ask for votes in the next term with
        an empty log. Every Go server refuses (their logs are longer) and, not having voted in that term,
        campaigns after its short campaign timeout -- as after a transfer to one of them."""
        self.term += 1
        self.vote_for = self.me
        self.leader = ""
        self.handoffs += 1
        return [Out(gw.vote_subject(self.group), gw.new_inbox(), gw.VoteRequest(self.term, 0, 0, self.me).encode())]


class GoMetaState:
    """The meta group's state machine as applied on this server: stream assignments (with their consumer
    assignments) by account and name, the JSON documents exactly as the Go meta leader wrote them."""

    def __init__(self) -> None:
        self.streams: dict[tuple[str, str], dict[str, Any]] = {}
        self.consumers: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.applied_ops = 0
        self.snapshots = 0
        # removals not yet handed to the hosted streams: ("stream", account, stream, group, reply) or
        # ("consumer", account, stream, consumer, reply) -- the leader of what is removed answers (gosolo)
        self.removals: list[tuple[str, str, str, str, str]] = []

    @staticmethod
    def _account(doc: Any) -> str:
        if not isinstance(doc, dict):
            raise gw.GoWireError("assignment is not a JSON object")
        client = doc.get("client") or {}
        if not isinstance(client, dict):
            raise gw.GoWireError("assignment client is not a JSON object")
        acc = client.get("service") or client.get("acc") or ""
        if not isinstance(acc, str):
            raise gw.GoWireError("assignment account is not a string")
        return acc

    @staticmethod
    def _str(doc: dict, *path: str) -> str:
        v: Any = doc
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if not isinstance(v, str) or not v:
            raise gw.GoWireError(f"assignment without {'.'.join(path)}")
        return v

    def apply(self, item: Committed) -> None:
        e = item.entry
        if item.snapshot or e.type == gw.ENTRY_SNAPSHOT:
            self.restore(ge.decode_meta_snapshot(e.data))
            return
        if e.type != gw.ENTRY_NORMAL:
            return
        x = ge.decode_entry(e.data)
        self.applied_ops += 1
        if isinstance(x, ge.CompressedConsumerAssignment):
            self._consumer(x.doc, add=True)
            return
        if not isinstance(x, ge.JsonEntry) or x.op not in ge.META_OPS:
            raise gw.GoWireError(f"entry op {e.data[0]} is not a meta operation")
        doc = x.doc
        if x.op in (ge.OP_ASSIGN_STREAM, ge.OP_UPDATE_STREAM):
            key = (self._account(doc), self._str(doc, "stream", "name"))
            self.streams[key] = doc
            self.consumers.setdefault(key, {})
        elif x.op == ge.OP_REMOVE_STREAM:
            key = (self._account(doc), self._str(doc, "stream", "name"))
            self.streams.pop(key, None)
            self.consumers.pop(key, None)
            self.removals.append(("stream", key[0], key[1], str((doc.get("group") or {}).get("name") or ""),
                                  str(doc.get("reply") or "")))
        elif x.op == ge.OP_ASSIGN_CONSUMER:
            self._consumer(doc, add=True)
        elif x.op == ge.OP_REMOVE_CONSUMER:
            self._consumer(doc, add=False)
            self.removals.append(("consumer", self._account(doc), self._str(doc, "stream"), self._str(doc, "name"),
                                  str(doc.get("reply") or "")))

    def _consumer(self, doc: Any, add: bool) -> None:
        key = (self._account(doc), self._str(doc, "stream"))
        name = self._str(doc, "name")
        if add:
            self.consumers.setdefault(key, {})[name] = doc
        elif key in self.consumers:
            self.consumers[key].pop(name, None)

    def restore(self, assignments: list[dict]) -> None:
        streams: dict[tuple[str, str], dict[str, Any]] = {}
        consumers: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        for sa in assignments:
            key = (self._account(sa), self._str(sa, "stream", "name"))
            streams[key] = {k: v for k, v in sa.items() if k != "Consumers"}
            consumers[key] = {}
            cas = sa.get("Consumers") or []
            if not isinstance(cas, list):
                raise gw.GoWireError("snapshot consumers are not a list")
            for ca in cas:
                if not isinstance(ca, dict):
                    raise gw.GoWireError("snapshot consumer is not a JSON object")
                consumers[key][self._str(ca, "name")] = ca
        # (all or nothing: a refused snapshot leaves the state as it was)
        self.snapshots += 1
        self.streams, self.consumers = streams, consumers

    def stream_names(self, account: str) -> list[str]:
        return sorted(n for (a, n) in self.streams if a == account)

    def snapshot_assignments(self) -> list[dict[str, Any]]:
        """The state as a meta snapshot lists it (nats-server's writeable stream and consumer assignments:
        no request subject or reply, the consumers under ``Consumers``), for ``gowire.encode_meta_snapshot``."""
        out = []
        for key, sa in self.streams.items():
            doc = {k: sa[k] for k in ("client", "created", "stream", "group", "sync") if k in sa}
            doc["Consumers"] = [{k: ca[k] for k in ("client", "created", "name", "stream", "consumer", "group")
                                 if k in ca} for ca in (self.consumers.get(key) or {}).values()]
            out.append(doc)
        return out


class TermVote:
    """The current term and vote of a member in ``<dir>/tav.idx``: the 8-byte peer voted for (zeros: none)
    then the term (u64 little-endian), as nats-server lays its own file out. Saved with fsync and an atomic
    rename, only when changed."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.path = os.path.join(directory, "tav.idx")
        self._last: Optional[tuple[int, str]] = None

    def load(self) -> tuple[int, str]:
        try:
            with open(self.path, "rb") as f:
                buf = f.read()
        except FileNotFoundError:
            return 0, ""
        if len(buf) != gw.ID_LEN + 8:
            raise ValueError(f"{self.path}: not a term and vote file ({len(buf)} bytes)")
        vote = "" if buf[:gw.ID_LEN] == bytes(gw.ID_LEN) else buf[:gw.ID_LEN].decode("latin-1")
        self._last = (int.from_bytes(buf[gw.ID_LEN:], "little"), vote)
        return self._last

    def save(self, term: int, vote: str) -> None:
        if self._last == (term, vote):
            return
        os.makedirs(self.dir, exist_ok=True)
        buf = (vote.encode("latin-1") if vote else bytes(gw.ID_LEN)) + term.to_bytes(8, "little")
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(buf)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._last = (term, vote)


class GoMetaMember:
    """Follows a Go cluster's meta group (``_meta_``) from a Rillet server; see the module docstring."""

    KIND = "meta group"

    def __init__(self, server: Any, group: str = gw.META_GROUP, store_dir: Optional[str] = None) -> None:
        acc = getattr(server, "system_account", None)
        if acc is None:
            raise ValueError("following a Go meta group needs the system account")
        self.server = server
        self.log = server.log
        self.group = group
        from rillet.jetstream.cluster.golead import GoRaftPeer
        self.raft = GoRaftPeer(group, gw.peer_id(server.name))
        self._hb: Any = None  # the heartbeat timer, while leading
        self._commit_sent = 0  # the commit index the followers were last told (leading)
        self._commit_soon = False
        # term and vote, made durable before a vote is answered (a restarted member must not vote twice in a
        # term); the log itself is not kept: a restarted member answers votes as "empty" until caught up again
        self.tav = TermVote(os.path.join(store_dir, "go_meta", group)) if store_dir else None
        if self.tav is not None:
            self.raft.term, self.raft.vote_for = self.tav.load()
        self.state = GoMetaState()
        self.ic: Any = None
        self._subs: list[Any] = []
        self._catchup_sub: Any = None
        self._catchup_inbox = ""
        self.received = self.refused = self.apply_errors = 0
        self.removed = False  # a committed peer removal of this server: it stopped following
        self._warned: set[str] = set()
        self.on_applied: list[Callable[[], None]] = []  # called after committed entries were applied
        # a group this server must not lead (it cannot serve it yet): when elected, pass leadership on at once
        self.pass_leadership = False
        self.passed = 0
        self.replicas: dict[tuple, Any] = {}  # (rillet.jetstream.cluster.gostream.host_streams, with the flag)
        self.solo: Any = None  # the one-replica streams run here (gosolo.SoloHost, with the flag)
        # peer ids of the other Rillet servers of the cluster (their route INFO says so: "go": "python..."):
        # a leadership handed over goes to a Go server, which serves the whole stream API
        self.rillet_peers: set[str] = set()
        # standing for the group's leadership (``stand()``): an election timer, as nats-server's followers run
        self.standing = False
        # without standing, stand only as the group's sole voting member (``_alone``): a stream replica whose
        # other peers were removed (nats-server's sole member elects itself), see host_streams
        self.stand_alone = False
        self._elect_at = 0.0  # (monotonic) when to stand, unless a leader is heard from first
        self._elect_timer: Any = None
        self.campaigns = 0
        self.quorum_losses = 0
        self.stop_transfers = 0
        self.snapshots_taken = 0
        self.on_leader_change: list[Callable[[bool], None]] = []  # called with True on winning, False on losing
        # called with the peer id of each committed membership change (the meta leader re-places replicas)
        self.on_peer_added: list[Callable[[str], None]] = []
        self.on_peer_removed: list[Callable[[str], None]] = []
        self.leader_api: Any = None  # (gometalead.MetaLeaderApi, with the lead flag)
        self._was_leader = False

    def stand(self) -> None:
        """Take part in elections as nats-server's members do (call before ``start``): stand when no leader was
        heard for an election timeout (4-9 s), at once when a leadership transfer names this server, and after
        0.1-0.8 s when a candidate with a shorter log asked for our vote; once elected, append our peer state
        first, add peers that answer but are not members, serve forwarded proposals (``$NRG.P``/``$NRG.RP``)
        and step down when no quorum answered for 10 s. An empty log (a restarted member not yet caught up)
        never stands."""
        self.standing = True
        self.raft.lead_on_transfer = True
        self.raft.announce_peers = True
        self.raft.add_unknown_peers = True

    @property
    def peer(self) -> str:
        return self.raft.me

    def start(self, js_api: bool = False) -> None:
        """Follow the group; with ``js_api``, also give the JetStream-enabled accounts the cluster's JetStream
        API (``bridge_js_api``)."""
        self.ic = self.server.internal_client(self.server.system_account, "go meta member")
        self._subs = [self.ic.subscribe(gw.vote_subject(self.group), self._on_msg),
                      self.ic.subscribe(gw.append_subject(self.group), self._on_msg),
                      self.ic.subscribe(self.raft.vote_inbox, self._on_msg),
                      self.ic.subscribe(self.raft.resp_inbox, self._on_msg)]
        if self.standing:
            self._subs += [self.ic.subscribe(gw.proposal_subject(self.group), self._on_proposal),
                           self.ic.subscribe(gw.remove_peer_subject(self.group), self._on_proposal)]
            self._touch()
        elif self.stand_alone:
            self._touch()
        self.log.notice(f"JetStream: following the Go {self.KIND} {self.group!r} as peer {self.peer}"
                        + (", standing for its leadership" if self.standing else ""))
        if js_api:
            bridge_js_api(self.server)

    def stop(self) -> None:
        if self._hb is not None:
            self._hb.cancel()
            self._hb = None
        if self._elect_timer is not None:
            self._elect_timer.cancel()
            self._elect_timer = None
        if self.ic is None:
            return
        if self.standing and self._subs:
            self._hand_over_on_stop()
        for sub in self._subs + ([self._catchup_sub] if self._catchup_sub else []):
            self.ic.remove_sub(sub)
        self._subs, self._catchup_sub = [], None

    def _hand_over_on_stop(self) -> None:
        """As nats-server's leader shutting down: leadership to a current peer (a Go server first), so that the
        group does not wait out an election timeout."""
        from rillet.jetstream.cluster.golead import LEADER
        r = self.raft
        if r.role != LEADER:
            return
        current = sorted((p for p in r.peers if p != self.peer and r.current(p)),
                         key=lambda p: (p in self.rillet_peers, p))
        if not current:
            return
        self.stop_transfers += 1
        self.log.notice(f"JetStream: stopping; handing the Go {self.KIND} {self.group!r} to peer {current[0]}")
        for o in r.transfer(current[0]):
            self.ic.publish(o.subject.encode(), o.reply.encode() if o.reply else None, o.payload)

    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warn(text)

    def _not_applied(self, e: Exception, index: int, what: str) -> None:
        """An entry committed by the group but not understood here: skipped and counted (the others are
        applied), logged once per kind of error."""
        self.refused += 1
        self.apply_errors += 1
        self._warn_once(f"apply:{e}", f"{what}: could not apply entry {index}: {e}")

    def _on_msg(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        subj = subject.decode("utf-8", "surrogateescape")
        rep = reply.decode("utf-8", "surrogateescape") if reply else ""
        data = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        self.received += 1
        try:
            kind, _tok = gw.parse_subject(subj)
            if kind == "vote":
                vr = gw.VoteRequest.decode(data)
                granted = self.raft.votes_granted
                outs, done = self.raft.vote(vr, rep), []
                if self.standing:
                    self._after_vote(vr, self.raft.votes_granted > granted)
            elif kind in ("append", "catchup"):
                ae = gw.AppendEntry.decode(data)
                outs, done = self.raft.append(kind, subj, rep, ae, time.monotonic())
                if (self.standing or self.stand_alone) and ae.leader != self.peer \
                        and ae.leader == self.raft.leader and (ae.lterm or ae.term) == self.raft.term:
                    self._touch()  # (the leader of our term is alive)
            elif subj == self.raft.vote_inbox:
                outs, done = self.raft.vote_response(gw.VoteResponse.decode(data)), []
            elif subj == self.raft.resp_inbox:
                outs, done = self.raft.append_response(gw.AppendEntryResponse.decode(data), rep)
            else:
                return
        except gw.GoWireError as e:
            self.refused += 1
            self._warn_once(f"{subj}:{e}", f"JetStream Go meta group {self.group!r}: refused a message on "
                                           f"{subj}: {e}")
            return
        self._commit(done)
        self._send(outs)

    def _commit(self, done: list[Committed]) -> None:
        me = self.peer.encode("latin-1")
        for item in done:
            if item.entry.type == gw.ENTRY_REMOVE_PEER and item.entry.data == me and not item.snapshot:
                self.removed = True
            try:
                self.state.apply(item)
            except gw.GoWireError as e:
                self._not_applied(e, item.index, f"JetStream Go meta group {self.group!r}")
            if item.entry.type in (gw.ENTRY_ADD_PEER, gw.ENTRY_REMOVE_PEER) and not item.snapshot:
                peer = item.entry.data.decode("latin-1")
                for cb in (self.on_peer_added if item.entry.type == gw.ENTRY_ADD_PEER else self.on_peer_removed):
                    cb(peer)
        if done:
            for cb in self.on_applied:
                cb()
            if self.standing and self.raft.commit - self.raft.base_index >= SNAPSHOT_EVERY:
                self.compact()

    def compact(self) -> bool:
        """(standing) Snapshot the applied state in nats-server's meta snapshot encoding and drop the log up to
        it, as nats-server's members compact theirs: a follower too far behind for the log is then caught up
        from this snapshot. Not done while catching up, or when an entry could not be applied here (the
        snapshot would lose it)."""
        r = self.raft
        if r.catchup is not None or self.apply_errors or r.applied <= r.base_index or r.applied != r.commit:
            return False
        from rillet.jetstream.cluster.golead import GoRaftPeer
        data = ge.encode_meta_snapshot(self.state.snapshot_assignments())
        ps = r.peer_state().encode() if isinstance(r, GoRaftPeer) else gw.PeerState(
            tuple(sorted(r.peers)), r.cluster_size, r.domain_ext).encode()
        r.compact(r.applied, data, ps)
        self.snapshots_taken += 1
        return True

    def _send(self, outs: list[Out]) -> None:
        if self.tav is not None:
            self.tav.save(self.raft.term, self.raft.vote_for)  # (before anything is answered)
        self._sync_catchup_sub()
        for o in outs:
            self.ic.publish(o.subject.encode(), o.reply.encode() if o.reply else None, o.payload)
        r = self.raft
        if getattr(r, "role", "") == "leader" and r.commit < r.pindex and r.quorum() <= 1:
            # (a group of one: what its leader appends is committed at once, no follower answers)
            done = r._advance_commit()
            if done:
                self._commit(done)
        self._sync_heartbeat()
        self._sync_commit()
        if self.pass_leadership and self.raft.role == "leader":
            # leading only to hand over: to the first peer that holds our whole log
            peer = self._pass_target()
            if peer is not None:
                self.passed += 1
                outs = self.raft.transfer(peer)
                for o in outs:
                    self.ic.publish(o.subject.encode(), o.reply.encode() if o.reply else None, o.payload)
        if self.standing:
            self._leader_changed()
        if self.removed:
            # as nats-server: a server removed from the meta group (SERVER.REMOVE) leaves it
            self.log.error(f"JetStream: this server was removed from the Go meta group {self.group!r}; "
                           "no longer following it")
            self.stop()

    # -- standing for leadership (``stand``) ------------------------------------------------------------------
    def _touch(self, delay: Optional[float] = None) -> None:
        """(Re)arm the election timer: stand after ``delay``, by default a random election timeout."""
        if delay is None:
            delay = random.uniform(*ELECTION_TIMEOUT)
        self._elect_at = time.monotonic() + delay
        loop = self.server.loop
        if loop is None or self.ic is None:
            return
        if self._elect_timer is not None:
            if self._elect_timer.when() <= loop.time() + delay:
                return  # (fires first and rearms itself for what is left)
            self._elect_timer.cancel()
        self._elect_timer = loop.call_later(delay, self._on_elect_timer)

    def _on_elect_timer(self) -> None:
        self._elect_timer = None
        if self.ic is None or not self._subs or self.removed:
            return
        now = time.monotonic()
        if now < self._elect_at:
            self._elect_timer = self.server.loop.call_later(self._elect_at - now, self._on_elect_timer)
            return
        from rillet.jetstream.cluster.golead import LEADER
        if self.raft.role != LEADER and self.raft.pindex > 0 and self.peer in self.raft.peers and \
                (self.standing or self._alone()):
            self.campaigns += 1
            self.log.notice(f"JetStream: no leader of the Go {self.KIND} {self.group!r} heard; standing for term "
                            f"{self.raft.term + 1}")
            self._send(self.raft.campaign())
        self._touch()

    def _alone(self) -> bool:
        """Whether this member is its group's only voting member, with nothing left to catch up: a member that
        does not stand (``stand_alone``) stands then, as nats-server's sole member elects itself."""
        return self.raft.peers == {self.peer} and self.raft.catchup is None

    def _after_vote(self, vr: gw.VoteRequest, granted: bool) -> None:
        from rillet.jetstream.cluster.golead import CANDIDATE, LEADER
        r = self.raft
        if granted:
            self._touch()
        elif (r.vote_for == "" and r.role not in (CANDIDATE, LEADER) and vr.term >= r.term
              and (r.pterm > vr.last_term or (r.pterm == vr.last_term and r.pindex > vr.last_index))):
            self._touch(random.uniform(*CAMPAIGN_TIMEOUT))  # (our log is longer: stand soon, as nats-server)

    def _on_proposal(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """A follower's proposal forwarded to the leader (``$NRG.P.<group>``: an entry's data) or its request
        to remove a peer (``$NRG.RP.<group>``): proposed when we lead, else dropped, as nats-server drops it."""
        from rillet.jetstream.cluster.golead import LEADER
        if self.raft.role != LEADER:
            return
        data = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        subj = subject.decode("utf-8", "surrogateescape")
        try:
            kind, _tok = gw.parse_subject(subj)
            if kind == "proposal":
                entry = gw.Entry(gw.ENTRY_NORMAL, gw.Proposal.decode(data).data)
            else:
                peer = gw.RemovePeerProposal.decode(data).peer
                if peer not in self.raft.peers:
                    return
                entry = gw.Entry(gw.ENTRY_REMOVE_PEER, peer.encode("latin-1"))
        except gw.GoWireError as e:
            self.refused += 1
            self._warn_once(f"{subj}:{e}", f"JetStream Go {self.KIND} {self.group!r}: refused a proposal on "
                                           f"{subj}: {e}")
            return
        self.propose([entry])

    def _leader_changed(self) -> None:
        from rillet.jetstream.cluster.golead import LEADER
        now = self.raft.role == LEADER
        if now == self._was_leader:
            return
        self._was_leader = now
        self.log.notice(f"JetStream: {'leading' if now else 'no longer leading'} the Go {self.KIND} "
                        f"{self.group!r} (term {self.raft.term})")
        if not now:
            self._touch()
        for cb in self.on_leader_change:
            cb(now)

    def _pass_target(self) -> Optional[str]:
        """The peer a leadership held only to hand over goes to: the first that holds our whole log."""
        return next((p for p in sorted(self.raft.peers) if p != self.peer and self.raft.current(p)), None)

    # -- leading (rillet.jetstream.cluster.golead): only when asked, see the module docstring -----------------
    def campaign(self, retries: int = 0) -> None:
        """Stand for election (a test of the leader side; the meta layer's leader duties are not here). With
        ``retries``, stand again (a new term) every CAMPAIGN_RETRY seconds while still a candidate: the first
        vote requests of a new group may reach peers that have not created it yet."""
        self._send(self.raft.campaign())
        if retries > 0 and self.server.loop is not None:
            self.server.loop.call_later(CAMPAIGN_RETRY, self._recampaign, retries - 1)

    def _recampaign(self, retries: int) -> None:
        if self.ic is not None and self._subs and self.raft.role == "candidate" and not self.raft.leader:
            self.campaign(retries)

    def propose(self, entries: list[gw.Entry]) -> None:
        self._send(self.raft.propose(entries))

    def transfer(self, peer: str) -> None:
        self._send(self.raft.transfer(peer))

    def _sync_heartbeat(self) -> None:
        from rillet.jetstream.cluster.golead import LEADER
        if self.raft.role == LEADER and self._hb is None and self.ic is not None:
            self._hb = self.server.loop.call_later(HEARTBEAT, self._beat)

    def _beat(self) -> None:
        self._hb = None
        if self.standing and self.raft.lost_quorum(time.monotonic(), LOST_QUORUM):
            self.quorum_losses += 1
            self.log.warn(f"JetStream: no quorum of the Go {self.KIND} {self.group!r} answered for "
                          f"{LOST_QUORUM:.0f} s; stepping down")
            self.raft.step_down()
            self._send([])
            return
        if self.ic is not None and self._subs:
            self._commit_sent = self.raft.commit
            self._send(self.raft.heartbeat())

    def _sync_commit(self) -> None:
        """A leader whose commit index moved tells the followers at once (an empty append entry, once per pass
        of the loop): they apply, and serve, what is committed without waiting for the next entry or heartbeat
        (a Go consumer leader reads the stream's last message from its own replica)."""
        from rillet.jetstream.cluster.golead import LEADER
        if (self.raft.role == LEADER and self.raft.commit > self._commit_sent and not self._commit_soon
                and self.ic is not None and self.server.loop is not None):
            self._commit_soon = True
            self.server.loop.call_soon(self._send_commit)

    def _send_commit(self) -> None:
        self._commit_soon = False
        if self.ic is not None and self._subs and self.raft.commit > self._commit_sent:
            self._commit_sent = self.raft.commit
            self._send(self.raft.heartbeat())

    def _sync_catchup_sub(self) -> None:
        cu = self.raft.catchup
        want = cu.inbox if cu is not None else ""
        if want == self._catchup_inbox:
            return
        if self._catchup_sub is not None:
            self.ic.remove_sub(self._catchup_sub)
            self._catchup_sub = None
        self._catchup_inbox = want
        if want:
            self._catchup_sub = self.ic.subscribe(want, self._on_msg)

    def status(self) -> dict[str, Any]:
        r = self.raft
        return {"group": self.group, "peer": self.peer, "term": r.term, "leader": r.leader, "pindex": r.pindex,
                "commit": r.commit, "applied": r.applied, "catching_up": r.catchup is not None,
                "peers": sorted(r.peers), "cluster_size": r.cluster_size, "votes_granted": r.votes_granted,
                "streams": len(self.state.streams) if self.state is not None else 0, "received": self.received,
                "refused": self.refused,
                "removed": self.removed, "role": r.role}


def bridge_js_api(server: Any) -> list[str]:
    """As a nats-server without JetStream of its own in a JetStream cluster: every account whose configuration
    enables JetStream imports ``$JS.API.>`` from the system account, sharing the requester's client info
    (``Nats-Request-Info``), so its clients' API requests reach the cluster's JetStream servers over the routes
    and their answers come back. Returns the accounts bridged."""
    from rillet.server.account_config import DEFAULT_RESPONSE_THRESHOLD, _service_import
    sys_acc = server.system_account
    done = []
    for name, cfg in (server.opts.accounts or {}).items():
        if not isinstance(cfg, dict) or cfg.get("jetstream") in (None, False, "disabled", "false", "disable"):
            continue
        acc = server.accounts.get(name)
        if acc is None or acc is sys_acc:
            continue
        _service_import(server, sys_acc, acc, "$JS.API.>", "$JS.API.>",
                        {"response_type": "singleton", "threshold": DEFAULT_RESPONSE_THRESHOLD}, share=True)
        done.append(name)
    return done


# -- the switch ----------------------------------------------------------------------------------------------

GO_META_FLAG = "rillet_go_meta"
GO_LEAD_FLAG = "rillet_go_meta_lead"

_MEMBERS: "weakref.WeakKeyDictionary[Any, GoMetaMember]" = weakref.WeakKeyDictionary()


def member_of(server: Any) -> Optional[GoMetaMember]:
    """The Go meta group member running on ``server`` (None before its first route, or without the flag)."""
    return _MEMBERS.get(server)


def attach_to_routes(server: Any) -> None:
    """``feature_flags { rillet_go_meta: true }`` (a name nats-server ignores): this server follows the JetStream
    meta group of the Go servers of its cluster, starting with its first route. Only for a server without
    JetStream of its own (the stream replicas it holds are the Go cluster's: gostream.py), with a system account and a directory for its term and vote
    (``jetstream { enabled: false, store_dir: ... }``); ValueError otherwise."""
    o = server.opts
    if o.jetstream.enabled:
        raise ValueError(f"feature flag {GO_META_FLAG!r}: the server follows a Go JetStream meta group only; "
                         "it can not run JetStream itself yet (remove the jetstream block)")
    if o.no_system_account:
        raise ValueError(f"feature flag {GO_META_FLAG!r} needs the system account")
    if not o.jetstream.store_dir:
        raise ValueError(f"feature flag {GO_META_FLAG!r} needs a directory for the member's term and vote: "
                         "jetstream { enabled: false, store_dir: <dir> }")
    if server.cluster is None:
        raise ValueError(f"feature flag {GO_META_FLAG!r} needs a cluster block (routes to the Go servers)")
    # what the Go servers learn of this server's JetStream: statsz and $SYS server info (rillet.server.sysacc),
    # route INFO (rillet.cluster.cluster)
    server.go_js_report = report = JetStreamReport(server, member_of)
    from rillet.config.features import enabled
    lead = enabled(o, GO_LEAD_FLAG)  # stand for the meta group's leadership and answer as its leader

    rillet_peers: set[str] = set()

    server.go_peer_names = peer_names = {}  # peer id -> server name of every server seen over a route

    def on_route(what: str, rc: Any, info: Any) -> None:
        if what != "added":
            return
        if getattr(info, "server_name", ""):
            peer_names[gw.peer_id(info.server_name)] = info.server_name
        if str(getattr(info, "go", "") or "").startswith("python") and getattr(info, "server_name", ""):
            rillet_peers.add(gw.peer_id(info.server_name))
        if server in _MEMBERS:
            return
        server.go_js_report = report  # (again: a server that declares the attribute after its links are made)
        if getattr(server, "system_account", None) is None:
            server.log.error(f"feature flag {GO_META_FLAG!r}: no system account, not following the Go meta group")
            return
        m = GoMetaMember(server, store_dir=o.jetstream.store_dir)
        m.rillet_peers = rillet_peers  # (the same set, filled as routes come)
        if lead:
            m.stand()
        m.start(js_api=True)
        if lead:
            from rillet.jetstream.cluster.gometalead import MetaLeaderApi
            m.leader_api = MetaLeaderApi(m)
        _MEMBERS[server] = m
        server.on_shutdown.insert(0, m.stop)  # (before the routes close: a leader hands over on its way out)
        # the streams and consumers the meta group places on this server: replicas with a file store
        from rillet.jetstream.cluster.gostream import host_streams
        m.replicas = host_streams(m, o.jetstream.store_dir, lead=True, stand=lead)

        def stop_replicas() -> None:
            for r in list(m.replicas.values()):
                r.stop()
            if m.solo is not None:
                m.solo.stop()
        server.on_shutdown.append(stop_replicas)
        # the replicas hosted changed: the Go meta leader places by the bytes stored and reserved here
        m.on_applied.append(report.send_statsz)
        for delay in STATSZ_EARLY:  # (as a new nats-server announces itself: the Go servers place nothing here
            server.loop.call_later(delay, report.send_statsz)  # until they have its statsz)

    server.cluster.route_listeners.append(on_route)
