"""The meta group's state machine: stream and consumer assignments, as nats-server's meta layer keeps them.

Every JetStream server of a cluster is a member of the meta group (``_meta_``). Its log holds *assignments*:
which RAFT group (name, peers, storage, cluster, preferred leader) runs each stream and each consumer,
with the config the client asked for. A server applying the log learns which groups it is a member of
and starts or stops them; the meta leader answers the API request once its entry is applied.

Entries are nats-server's: one op byte, then the assignment as JSON with nats-server's field names::

    0  assign stream     {"client", "created", "stream": <config>, "group", "sync", "subject", "reply", "restore_state"}
    1  assign consumer   {"client", "created", "name", "stream", "consumer": <config>, "group", "subject", "reply", "state"}
    2  remove stream     (same body as assign)
    3  remove consumer   (same body as assign)
    11 update stream     (same body as assign)

``group`` is a ``raftGroup``: ``{"name", "peers", "store", "cluster", "preferred", "scale_up"}``. nats-server
also has op 9 (an s2-compressed consumer assignment); Rillet never writes it and refuses it (no s2 codec
here). Peer removal and addition are RAFT-level entry types in nats-server (``EntryRemovePeer`` /
``EntryAddPeer``, data = the 8-character peer id); here they are two more ops (``PEER_REMOVE_OP``,
``PEER_ADD_OP``, outside nats-server's range) so that one ``apply(bytes)`` covers the whole meta log.

``MetaState.apply`` depends on nothing but the entry and the state (no clock, no randomness, no server),
so every replica applying the same log ends in the same state, and ``snapshot()`` gives the same bytes
for the same state (sorted by account, stream and consumer). Times are kept as nanoseconds since the
epoch and written as Go's RFC 3339 text.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Iterator

import msgspec

from rillet.gocompat.gotime import format_time, time_ns
from rillet.jetstream.cluster.peers import DIGITS, PEER_ID_LEN, name_hash

META_GROUP = "_meta_"
SNAPSHOT_VERSION = 1


class EntryOp(IntEnum):
    """nats-server's ``entryOp`` values (its meta ops; the stream/consumer ops belong to those groups)."""
    ASSIGN_STREAM = 0
    ASSIGN_CONSUMER = 1
    REMOVE_STREAM = 2
    REMOVE_CONSUMER = 3
    ASSIGN_COMPRESSED_CONSUMER = 9
    UPDATE_STREAM = 11
    PEER_REMOVE = 0x80  # (Rillet: RAFT entry types in nats-server)
    PEER_ADD = 0x81


PEER_REMOVE_OP = EntryOp.PEER_REMOVE
PEER_ADD_OP = EntryOp.PEER_ADD


class MetaEntryError(ValueError):
    """An entry that cannot be applied (unknown op, bad JSON, missing fields): the log is not ours."""


def _random_token(n: int) -> str:
    return "".join(secrets.choice(DIGITS) for _ in range(n))


def group_name(prefix: str, n_peers: int, storage: str) -> str:
    """A new group name as nats-server makes them: ``S-R3F-xxxxxxxx`` (stream), ``C-R1M-xxxxxxxx``
    (consumer): replica count, ``F``ile or ``M``emory, and 8 characters of a hash of a random id."""
    return f"{prefix}-R{n_peers}{'M' if storage == 'memory' else 'F'}-{name_hash(_random_token(22))}"


def stream_group_name(peers: list[str], storage: str) -> str:
    return group_name("S", len(peers), storage)


def consumer_group_name(peers: list[str], storage: str) -> str:
    return group_name("C", len(peers), storage)


def sync_subject() -> str:
    """A stream's catch-up subject, as nats-server's: ``$JSC.SYNC.`` and 8 random characters."""
    return "$JSC.SYNC." + _random_token(PEER_ID_LEN)


# ---- the data --------------------------------------------------------------------------------------------

@dataclass
class RaftGroup:
    name: str
    peers: list[str]
    storage: str = "file"  # "file" | "memory" (JSON "store")
    cluster: str = ""
    preferred: str = ""
    scale_up: bool = False
    # nats-server 2.15's ``excluded``: peers evacuated (SERVER.EVACUATE) that could not be replaced; kept out of
    # the group's placement until it is back at its replica count
    excluded: list[str] = field(default_factory=list)
    # nats-server 2.15's ``desired`` (the target of a scale or move in progress, JSON as Go's
    # desiredRaftGroup: id, peers, cluster, preferred, scale_down, move, removed, origin; None when stable)
    desired: dict | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "peers": list(self.peers), "store": self.storage}
        if self.cluster:
            d["cluster"] = self.cluster
        if self.preferred:
            d["preferred"] = self.preferred
        if self.scale_up:
            d["scale_up"] = True
        if self.excluded:
            d["excluded"] = list(self.excluded)
        if self.desired is not None:
            d["desired"] = self.desired
        return d

    @classmethod
    def from_json(cls, d: Any) -> "RaftGroup":
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise MetaEntryError("raft group without a name")
        store = d.get("store", "file")
        if store not in ("file", "memory"):
            raise MetaEntryError(f"raft group {d['name']!r}: unknown store {store!r}")
        peers = d.get("peers") or []
        if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
            raise MetaEntryError(f"raft group {d['name']!r}: peers must be a list of peer ids")
        desired = d.get("desired")
        if desired is not None and (not isinstance(desired, dict) or not isinstance(desired.get("peers"), list)):
            raise MetaEntryError(f"raft group {d['name']!r}: desired state without peers")
        excluded = d.get("excluded") or []
        if not isinstance(excluded, list) or not all(isinstance(p, str) for p in excluded):
            raise MetaEntryError(f"raft group {d['name']!r}: excluded must be a list of peer ids")
        return cls(d["name"], list(peers), store, str(d.get("cluster") or ""), str(d.get("preferred") or ""),
                   bool(d.get("scale_up")), list(excluded), desired)

    def copy(self) -> "RaftGroup":
        return RaftGroup(self.name, list(self.peers), self.storage, self.cluster, self.preferred, self.scale_up,
                         list(self.excluded), dict(self.desired) if self.desired is not None else None)

    def is_member(self, peer: str) -> bool:
        return peer in self.peers


def service_account(client: dict | None) -> str:
    """The account a request acts in (nats-server's ``serviceAccount``: ``svc`` when set, else ``acc``)."""
    if not client:
        return ""
    return str(client.get("svc") or client.get("acc") or "")


def _for_proposal(client: dict | None) -> dict | None:
    """The client info an entry carries: without ``jwt`` and ``issuer_key``, as nats-server proposes it."""
    if client is None:
        return None
    return {k: v for k, v in client.items() if k not in ("jwt", "issuer_key")}


def _for_snapshot(client: dict | None) -> dict | None:
    if client is None:
        return None
    return {k: client[k] for k in ("acc", "svc", "cluster") if client.get(k)}


def _entry_head(client: dict | None, created: int, snapshot: bool) -> dict[str, Any]:
    """An assignment's JSON starts with the client that asked for it (as proposed, or as snapshotted) and
    when it was created."""
    d: dict[str, Any] = {}
    c = _for_snapshot(client) if snapshot else _for_proposal(client)
    if c is not None:
        d["client"] = c
    d["created"] = format_time(created)
    return d


def _add_request(d: dict[str, Any], subject: str, reply: str) -> None:
    """The API request an assignment answers (a proposal's, not kept in snapshots)."""
    if subject:
        d["subject"] = subject
    if reply:
        d["reply"] = reply


@dataclass
class ConsumerAssignment:
    name: str
    stream: str
    config: dict
    group: RaftGroup
    client: dict | None = None
    created: int = 0  # ns since the epoch
    subject: str = ""
    reply: str = ""
    state: dict | None = None  # consumer state carried by a restore

    @property
    def account(self) -> str:
        return service_account(self.client)

    def to_json(self, snapshot: bool = False) -> dict:
        d = _entry_head(self.client, self.created, snapshot)
        d["name"] = self.name
        d["stream"] = self.stream
        d["consumer"] = self.config
        d["group"] = self.group.to_json()
        if not snapshot:
            _add_request(d, self.subject, self.reply)
            if self.state is not None:
                d["state"] = self.state
        return d

    @classmethod
    def from_json(cls, d: Any) -> "ConsumerAssignment":
        if not isinstance(d, dict):
            raise MetaEntryError("consumer assignment is not a JSON object")
        name, stream, cfg = d.get("name"), d.get("stream"), d.get("consumer")
        if not isinstance(name, str) or not isinstance(stream, str) or not isinstance(cfg, dict):
            raise MetaEntryError("consumer assignment without name, stream or consumer config")
        return cls(name, stream, cfg, RaftGroup.from_json(d.get("group")), _client(d), _created(d),
                   str(d.get("subject") or ""), str(d.get("reply") or ""),
                   d["state"] if isinstance(d.get("state"), dict) else None)


@dataclass
class StreamAssignment:
    config: dict
    group: RaftGroup
    sync: str = ""
    client: dict | None = None
    created: int = 0
    subject: str = ""
    reply: str = ""
    restore: dict | None = None
    consumers: dict[str, ConsumerAssignment] = field(default_factory=dict)  # (not part of the entry)

    @property
    def name(self) -> str:
        return str(self.config.get("name", ""))

    @property
    def account(self) -> str:
        return service_account(self.client)

    def to_json(self, snapshot: bool = False) -> dict:
        d = _entry_head(self.client, self.created, snapshot)
        d["stream"] = self.config
        d["group"] = self.group.to_json()
        d["sync"] = self.sync
        if snapshot:
            d["consumers"] = [self.consumers[k].to_json(snapshot=True) for k in sorted(self.consumers)]
            return d
        _add_request(d, self.subject, self.reply)
        if self.restore is not None:
            d["restore_state"] = self.restore
        return d

    @classmethod
    def from_json(cls, d: Any) -> "StreamAssignment":
        if not isinstance(d, dict):
            raise MetaEntryError("stream assignment is not a JSON object")
        cfg = d.get("stream")
        if not isinstance(cfg, dict) or not isinstance(cfg.get("name"), str) or not cfg["name"]:
            raise MetaEntryError("stream assignment without a stream config name")
        sa = cls(cfg, RaftGroup.from_json(d.get("group")), str(d.get("sync") or ""), _client(d), _created(d),
                 str(d.get("subject") or ""), str(d.get("reply") or ""),
                 d["restore_state"] if isinstance(d.get("restore_state"), dict) else None)
        for cd in d.get("consumers") or ():
            ca = ConsumerAssignment.from_json(cd)
            sa.consumers[ca.name] = ca
        return sa


def _client(d: dict) -> dict | None:
    c = d.get("client")
    if c is not None and not isinstance(c, dict):
        raise MetaEntryError("client info is not a JSON object")
    return c


def _created(d: dict) -> int:
    v = d.get("created")
    if v is None:
        return 0
    try:
        return time_ns(v)
    except Exception as e:  # (GoTimeError or a wrong type)
        raise MetaEntryError(f"bad created time {v!r}: {e}") from e


# ---- entries -----------------------------------------------------------------------------------------------

_enc = msgspec.json.encode


def encode_stream_op(op: EntryOp, sa: StreamAssignment) -> bytes:
    if op not in (EntryOp.ASSIGN_STREAM, EntryOp.UPDATE_STREAM, EntryOp.REMOVE_STREAM):
        raise ValueError(f"not a stream op: {op!r}")
    return bytes((op,)) + _enc(sa.to_json())


def encode_assign_stream(sa: StreamAssignment) -> bytes:
    return encode_stream_op(EntryOp.ASSIGN_STREAM, sa)


def encode_update_stream(sa: StreamAssignment) -> bytes:
    return encode_stream_op(EntryOp.UPDATE_STREAM, sa)


def encode_remove_stream(sa: StreamAssignment) -> bytes:
    return encode_stream_op(EntryOp.REMOVE_STREAM, sa)


def encode_assign_consumer(ca: ConsumerAssignment) -> bytes:
    return bytes((EntryOp.ASSIGN_CONSUMER,)) + _enc(ca.to_json())


def encode_remove_consumer(ca: ConsumerAssignment) -> bytes:
    return bytes((EntryOp.REMOVE_CONSUMER,)) + _enc(ca.to_json())


def _check_peer(peer: str) -> str:
    if len(peer) != PEER_ID_LEN or any(ch not in DIGITS for ch in peer):
        raise MetaEntryError(f"bad peer id {peer!r}")
    return peer


def encode_peer_remove(peer: str) -> bytes:
    return bytes((EntryOp.PEER_REMOVE,)) + _check_peer(peer).encode()


def encode_peer_add(peer: str) -> bytes:
    return bytes((EntryOp.PEER_ADD,)) + _check_peer(peer).encode()


@dataclass
class Decoded:
    op: EntryOp
    stream: StreamAssignment | None = None
    consumer: ConsumerAssignment | None = None
    peer: str = ""


def decode_entry(entry: bytes) -> Decoded:
    if not entry:
        raise MetaEntryError("empty meta entry")
    try:
        op = EntryOp(entry[0])
    except ValueError:
        raise MetaEntryError(f"unknown meta entry op type: {entry[0]}") from None
    body = bytes(entry[1:])
    if op in (EntryOp.PEER_REMOVE, EntryOp.PEER_ADD):
        return Decoded(op, peer=_check_peer(body.decode("ascii", "replace")))
    if op == EntryOp.ASSIGN_COMPRESSED_CONSUMER:
        raise MetaEntryError("compressed (s2) consumer assignments are not supported")
    try:
        d = msgspec.json.decode(body)
    except msgspec.DecodeError as e:
        raise MetaEntryError(f"meta entry op {op.name}: bad JSON: {e}") from e
    if op in (EntryOp.ASSIGN_CONSUMER, EntryOp.REMOVE_CONSUMER):
        return Decoded(op, consumer=ConsumerAssignment.from_json(d))
    return Decoded(op, stream=StreamAssignment.from_json(d))


# ---- the state machine ---------------------------------------------------------------------------------------

@dataclass
class Applied:
    """What an entry changed, for the server to act on (start/stop groups, answer the request).

    ``changed`` is False when the entry found nothing to act on (as nats-server: a consumer of an unknown
    stream, a removal of something not there or of another incarnation)."""
    op: EntryOp
    changed: bool
    account: str = ""
    stream: StreamAssignment | None = None
    consumer: ConsumerAssignment | None = None
    previous: Any = None
    peer: str = ""


class MetaState:
    """Stream assignments by account and name, each with its consumer assignments; the meta peer set."""

    def __init__(self) -> None:
        self.streams: dict[str, dict[str, StreamAssignment]] = {}
        self.peers: set[str] = set()  # peers added by the log (the RAFT layer has the initial set)
        self.removed: set[str] = set()  # peers removed by the log
        self.applied = 0  # entries applied (snapshots included)

    # ---- reads ----------------------------------------------------------------------------------

    def stream(self, account: str, name: str) -> StreamAssignment | None:
        return self.streams.get(account, {}).get(name)

    def consumer(self, account: str, stream: str, name: str) -> ConsumerAssignment | None:
        sa = self.stream(account, stream)
        return sa.consumers.get(name) if sa is not None else None

    def iter_streams(self) -> Iterator[StreamAssignment]:
        for acc in sorted(self.streams):
            for name in sorted(self.streams[acc]):
                yield self.streams[acc][name]

    def groups(self) -> Iterator[RaftGroup]:
        """Every stream and consumer group, in a stable order."""
        for sa in self.iter_streams():
            yield sa.group
            for cn in sorted(sa.consumers):
                yield sa.consumers[cn].group

    def groups_of(self, peer: str) -> list[RaftGroup]:
        return [g for g in self.groups() if peer in g.peers]

    def counts(self) -> tuple[int, int]:
        """(streams, consumers)."""
        ns = sum(len(a) for a in self.streams.values())
        nc = sum(len(sa.consumers) for sa in self.iter_streams())
        return ns, nc

    # ---- apply ------------------------------------------------------------------------------------

    def apply(self, entry: bytes) -> Applied:
        """Apply one meta-log entry (``MetaEntryError`` when it cannot be decoded: nothing changes)."""
        e = decode_entry(entry)
        self.applied += 1
        op = e.op
        if op == EntryOp.PEER_REMOVE:
            changed = e.peer not in self.removed
            self.removed.add(e.peer)
            self.peers.discard(e.peer)
            return Applied(op, changed, peer=e.peer)
        if op == EntryOp.PEER_ADD:
            changed = e.peer not in self.peers
            self.peers.add(e.peer)
            self.removed.discard(e.peer)
            return Applied(op, changed, peer=e.peer)
        if e.stream is not None:
            return self._apply_stream(op, e.stream)
        assert e.consumer is not None
        return self._apply_consumer(op, e.consumer)

    def _apply_stream(self, op: EntryOp, sa: StreamAssignment) -> Applied:
        acc, name = sa.account, sa.name
        streams = self.streams.get(acc)
        old = streams.get(name) if streams else None
        if op == EntryOp.REMOVE_STREAM:
            if old is None:
                return Applied(op, False, acc, sa)
            del streams[name]  # type: ignore[union-attr]
            if not streams:
                del self.streams[acc]
            return Applied(op, True, acc, sa, previous=old)
        if op == EntryOp.UPDATE_STREAM and old is None:
            return Applied(op, False, acc, sa)  # (nats-server ignores an update of an unknown stream)
        if old is not None:
            sa.consumers = old.consumers  # the consumers stay with the stream
        self.streams.setdefault(acc, {})[name] = sa
        return Applied(op, True, acc, sa, previous=old)

    def _apply_consumer(self, op: EntryOp, ca: ConsumerAssignment) -> Applied:
        acc = ca.account
        sa = self.stream(acc, ca.stream)
        if sa is None:
            return Applied(op, False, acc, None, ca)  # consumer of a stream we do not have
        old = sa.consumers.get(ca.name)
        if op == EntryOp.REMOVE_CONSUMER:
            # only the incarnation the removal names (same group) goes
            if old is None or old.group.name != ca.group.name:
                return Applied(op, False, acc, sa, ca, previous=old)
            del sa.consumers[ca.name]
            return Applied(op, True, acc, sa, ca, previous=old)
        ca.state = None  # (the restore state is handed to the members when applied, not kept)
        sa.consumers[ca.name] = ca
        return Applied(op, True, acc, sa, ca, previous=old)

    # ---- snapshots ---------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as bytes: equal states give equal bytes."""
        doc = {"v": SNAPSHOT_VERSION,
               "streams": [sa.to_json(snapshot=True) for sa in self.iter_streams()],
               "peers": sorted(self.peers), "removed": sorted(self.removed)}
        return _enc(doc)

    @classmethod
    def from_snapshot(cls, data: bytes) -> "MetaState":
        st = cls()
        st.restore(data)
        return st

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot's (``MetaEntryError`` on a bad snapshot: nothing changes)."""
        try:
            doc = msgspec.json.decode(data)
        except msgspec.DecodeError as e:
            raise MetaEntryError(f"bad meta snapshot: {e}") from e
        if not isinstance(doc, dict) or doc.get("v") != SNAPSHOT_VERSION:
            raise MetaEntryError("meta snapshot of an unknown version")
        streams: dict[str, dict[str, StreamAssignment]] = {}
        for d in doc.get("streams") or ():
            sa = StreamAssignment.from_json(d)
            streams.setdefault(sa.account, {})[sa.name] = sa
        self.streams = streams
        self.peers = set(doc.get("peers") or ())
        self.removed = set(doc.get("removed") or ())
        self.applied += 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetaState) and self.snapshot() == other.snapshot()

    __hash__ = None  # type: ignore[assignment]
