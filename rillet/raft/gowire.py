"""nats-server's RAFT ("NRG") messages as they travel between servers: subjects, payload encodings, peer ids.

This module is sans-IO: it turns the payload of a ``$NRG.`` message into a typed value and back, byte for
byte as nats-server 2.15 writes it (checked against recorded Go traffic in tests/test_raft_gowire.py).
Everything malformed raises ``GoWireError`` (a ``ValueError``), never anything else.

The protocol, as learnt from nats-server's ``server/raft.go`` (our own description):

* Subjects, all in the system account (or an asset account with ``cluster_traffic: owner``):
  ``$NRG.V.<group>`` vote requests (reply: the candidate's ``$NRG.R.<8>`` inbox, where the votes go),
  ``$NRG.AE.<group>`` append entries from the leader (reply: the leader's ``$NRG.R.<8>`` inbox, where
  the responses go), ``$NRG.P.<group>`` a follower's proposal forwarded to the leader (payload: the
  entry's data), ``$NRG.RP.<group>`` a forwarded peer removal (payload: the 8-byte peer id), and
  ``$NRG.CR.<8>``: a follower's catch-up inbox, named as the reply of its failing append entry response;
  the leader sends the missing entries there as append entries. The catching-up follower's responses to
  those go to the leader's ``$NRG.CP.<8>`` inbox (the catch-up entries' reply subject): flow control that
  does not count toward quorum.
* Peer ids: 8 characters, the first 8 bytes of SHA-256 of the server name, each mapped onto the 62
  characters ``0-9A-Za-z`` (byte modulo 62).
* Integers are little-endian; ``uvarint``/``varint`` are Go's ``encoding/binary`` forms.
* Log positions (``pindex``, ``commit``, a response's ``index``) count append entries, not entries: an append
  entry carrying several entries is one index (nats-server stores it as one WAL record).
"""
from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass

__all__ = [
    "GoWireError", "ID_LEN", "DIGITS", "peer_id", "hash_name", "random_token", "group_name", "META_GROUP",
    "ENTRY_NORMAL", "ENTRY_OLD_SNAPSHOT", "ENTRY_PEER_STATE", "ENTRY_ADD_PEER", "ENTRY_REMOVE_PEER",
    "ENTRY_LEADER_TRANSFER", "ENTRY_SNAPSHOT", "ENTRY_TYPE_NAMES",
    "Entry", "AppendEntry", "AppendEntryResponse", "VoteRequest", "VoteResponse", "PeerState", "Snapshot",
    "RemovePeerProposal", "Proposal",
    "vote_subject", "append_subject", "proposal_subject", "remove_peer_subject", "new_inbox",
    "new_catchup_inbox", "new_catchup_progress_inbox", "parse_subject", "decode_message", "put_uvarint", "get_uvarint", "put_varint",
    "get_varint",
]


class GoWireError(ValueError):
    """A payload or subject that is not what nats-server would send."""


ID_LEN = 8
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
META_GROUP = "_meta_"
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_MAX_U64 = (1 << 64) - 1


def hash_name(name: str, size: int = ID_LEN) -> str:
    """nats-server's short hash of a name: SHA-256, its first ``size`` bytes each mapped to DIGITS[b % 62]."""
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(DIGITS[b % 62] for b in digest[:size])


def peer_id(server_name: str) -> str:
    """The RAFT peer id (the server's "node" name) nats-server derives from its server name."""
    return hash_name(server_name, ID_LEN)


def random_token(size: int = 8) -> str:
    """``size`` random characters of DIGITS (inbox suffixes, group name hashes)."""
    rnd = os.urandom(size)
    return "".join(DIGITS[b % 62] for b in rnd)


def group_name(kind: str, replicas: int, storage: str) -> str:
    """A new stream (``kind="S"``) or consumer (``"C"``) group name as the Go meta leader makes them:
    ``S-R3F-abcdEFGH`` -- replicas, first letter of the storage (File/Memory), 8 hash characters of a random
    unique id."""
    if kind not in ("S", "C"):
        raise GoWireError(f"group kind must be S or C, not {kind!r}")
    st = {"file": "F", "memory": "M"}.get(storage.lower())
    if st is None:
        raise GoWireError(f"unknown storage {storage!r}")
    return f"{kind}-R{replicas}{st}-{hash_name(os.urandom(16).hex())}"


# -- subjects ---------------------------------------------------------------------------------------------

def vote_subject(group: str) -> str:
    return f"$NRG.V.{group}"


def append_subject(group: str) -> str:
    return f"$NRG.AE.{group}"


def proposal_subject(group: str) -> str:
    return f"$NRG.P.{group}"


def remove_peer_subject(group: str) -> str:
    return f"$NRG.RP.{group}"


def new_inbox() -> str:
    return f"$NRG.R.{random_token(8)}"


def new_catchup_inbox() -> str:
    return f"$NRG.CR.{random_token(8)}"


def new_catchup_progress_inbox() -> str:
    return f"$NRG.CP.{random_token(8)}"


_KINDS = {"V": "vote", "AE": "append", "P": "proposal", "RP": "remove_peer", "R": "reply", "CR": "catchup",
          "CP": "catchup_progress"}


def parse_subject(subject: str) -> tuple[str, str]:
    """``$NRG.<kind>.<token>`` -> (kind, token): kind one of vote/append/proposal/remove_peer (token: the
    group) or reply/catchup/catchup_progress (token: the inbox suffix)."""
    parts = subject.split(".")
    if len(parts) != 3 or parts[0] != "$NRG" or parts[1] not in _KINDS or not parts[2]:
        raise GoWireError(f"not an NRG subject: {subject!r}")
    return _KINDS[parts[1]], parts[2]


# -- varints (Go's encoding/binary) -----------------------------------------------------------------------

def put_uvarint(v: int) -> bytes:
    if v < 0 or v > _MAX_U64:
        raise GoWireError(f"uvarint out of range: {v}")
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def get_uvarint(buf, pos: int = 0) -> tuple[int, int]:
    """(value, new position); GoWireError when truncated, longer than 10 bytes or past 64 bits, as Go's
    ``binary.Uvarint`` refuses them."""
    v = 0
    shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            raise GoWireError("truncated uvarint")
        b = buf[pos + i]
        if b < 0x80:
            if i == 9 and b > 1:
                raise GoWireError("uvarint overflows 64 bits")
            return v | (b << shift), pos + i + 1
        v |= (b & 0x7F) << shift
        shift += 7
    raise GoWireError("uvarint overflows 64 bits")


def put_varint(v: int) -> bytes:
    if v < -(1 << 63) or v >= (1 << 63):
        raise GoWireError(f"varint out of range: {v}")
    return put_uvarint(((v << 1) ^ (v >> 63)) & _MAX_U64)


def get_varint(buf, pos: int = 0) -> tuple[int, int]:
    u, pos = get_uvarint(buf, pos)
    v = u >> 1
    if u & 1:
        v = ~v
    return v, pos


def _canonical_uvarint(buf, pos: int) -> tuple[int, int]:
    """A uvarint that must be written as Go writes it (no redundant continuation bytes)."""
    v, end = get_uvarint(buf, pos)
    if end - pos != len(put_uvarint(v)):
        raise GoWireError("non-minimal uvarint")
    return v, end


def _id_bytes(peer: str, what: str) -> bytes:
    if peer == "":
        return bytes(ID_LEN)
    b = peer.encode("latin-1") if isinstance(peer, str) else bytes(peer)
    if len(b) != ID_LEN:
        raise GoWireError(f"{what} must be {ID_LEN} bytes, not {peer!r}")
    return b


def _id_str(b: bytes) -> str:
    return "" if b == bytes(ID_LEN) else bytes(b).decode("latin-1")


def _u64(v: int, what: str) -> bytes:
    if not 0 <= v <= _MAX_U64:
        raise GoWireError(f"{what} out of range: {v}")
    return _U64.pack(v)


# -- entries and append entries ---------------------------------------------------------------------------

ENTRY_NORMAL = 0
ENTRY_OLD_SNAPSHOT = 1
ENTRY_PEER_STATE = 2
ENTRY_ADD_PEER = 3
ENTRY_REMOVE_PEER = 4
ENTRY_LEADER_TRANSFER = 5
ENTRY_SNAPSHOT = 6
ENTRY_TYPE_NAMES = {ENTRY_NORMAL: "Normal", ENTRY_OLD_SNAPSHOT: "OldSnapshot", ENTRY_PEER_STATE: "PeerState",
                    ENTRY_ADD_PEER: "AddPeer", ENTRY_REMOVE_PEER: "RemovePeer",
                    ENTRY_LEADER_TRANSFER: "LeaderTransfer", ENTRY_SNAPSHOT: "Snapshot"}


@dataclass(frozen=True, slots=True)
class Entry:
    type: int
    data: bytes = b""

    def __post_init__(self) -> None:
        if self.type not in ENTRY_TYPE_NAMES:
            raise GoWireError(f"unknown entry type {self.type}")


_AE_BASE = ID_LEN + 4 * 8 + 2
_AE_HEAD = struct.Struct("<QQQQH")


@dataclass(frozen=True, slots=True)
class AppendEntry:
    """``$NRG.AE.<group>`` (or a catch-up inbox): the leader's entries, or none for a heartbeat.

    ``lterm`` is the highest term as the leader knows it, a trailing uvarint that current servers always
    write (0 when not a catch-up); ``None`` when the message ends after its entries (older servers)."""
    leader: str
    term: int
    commit: int
    pterm: int
    pindex: int
    entries: tuple[Entry, ...] = ()
    lterm: int | None = 0

    def encode(self) -> bytes:
        if len(self.entries) > 0xFFFF:
            raise GoWireError("too many entries")
        parts = [_id_bytes(self.leader, "leader"), _u64(self.term, "term"), _u64(self.commit, "commit"),
                 _u64(self.pterm, "pterm"), _u64(self.pindex, "pindex"), _U16.pack(len(self.entries))]
        for e in self.entries:
            if len(e.data) + 1 > 0x7FFFFFFF:
                raise GoWireError("entry too large")
            parts.append(_U32.pack(len(e.data) + 1))
            parts.append(bytes((e.type,)))
            parts.append(bytes(e.data))
        if self.lterm is not None:
            parts.append(put_uvarint(self.lterm))
        return b"".join(parts)

    @classmethod
    def decode(cls, buf) -> "AppendEntry":
        buf = bytes(buf)
        if len(buf) < _AE_BASE:
            raise GoWireError(f"append entry too short ({len(buf)} bytes)")
        term, commit, pterm, pindex, n = _AE_HEAD.unpack_from(buf, ID_LEN)
        pos = _AE_BASE
        entries = []
        for _ in range(n):
            if len(buf) - pos < 4:
                raise GoWireError("append entry: truncated entry length")
            (ml,) = _U32.unpack_from(buf, pos)
            pos += 4
            if ml == 0 or pos + ml > len(buf):
                raise GoWireError("append entry: bad entry length")
            entries.append(Entry(buf[pos], buf[pos + 1:pos + ml]))
            pos += ml
        lterm = None
        if pos < len(buf):
            lterm, pos = _canonical_uvarint(buf, pos)
            if pos != len(buf):
                raise GoWireError("append entry: bytes after lterm")
        return cls(_id_str(buf[:ID_LEN]), term, commit, pterm, pindex, tuple(entries), lterm)

    @property
    def is_heartbeat(self) -> bool:
        return not self.entries


_AER = struct.Struct("<QQ8sB")


@dataclass(frozen=True, slots=True)
class AppendEntryResponse:
    """A follower's answer to an append entry, sent to the leader's ``$NRG.R.`` inbox (its reply subject, when
    not successful, may name the follower's ``$NRG.CR.`` catch-up inbox)."""
    term: int
    index: int
    peer: str
    success: bool

    def encode(self) -> bytes:
        return _AER.pack(self.term, self.index, _id_bytes(self.peer, "peer"), 1 if self.success else 0)

    @classmethod
    def decode(cls, buf) -> "AppendEntryResponse":
        if len(buf) != _AER.size:
            raise GoWireError(f"append entry response must be {_AER.size} bytes, not {len(buf)}")
        term, index, peer, ok = _AER.unpack(bytes(buf))
        if ok > 1:
            raise GoWireError(f"append entry response: success byte {ok}")
        return cls(term, index, _id_str(peer), ok == 1)


_VREQ = struct.Struct("<QQQ8s")


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """``$NRG.V.<group>``, reply: the candidate's inbox."""
    term: int
    last_term: int
    last_index: int
    candidate: str

    def encode(self) -> bytes:
        return _VREQ.pack(self.term, self.last_term, self.last_index, _id_bytes(self.candidate, "candidate"))

    @classmethod
    def decode(cls, buf) -> "VoteRequest":
        if len(buf) != _VREQ.size:
            raise GoWireError(f"vote request must be {_VREQ.size} bytes, not {len(buf)}")
        term, lt, li, cand = _VREQ.unpack(bytes(buf))
        return cls(term, lt, li, _id_str(cand))


_VRESP = struct.Struct("<Q8sB")


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """The answer to a vote request; ``empty``: the voter's log is empty."""
    term: int
    peer: str
    granted: bool
    empty: bool = False

    def encode(self) -> bytes:
        return _VRESP.pack(self.term, _id_bytes(self.peer, "peer"), (1 if self.granted else 0) | (2 if self.empty else 0))

    @classmethod
    def decode(cls, buf) -> "VoteResponse":
        if len(buf) != _VRESP.size:
            raise GoWireError(f"vote response must be {_VRESP.size} bytes, not {len(buf)}")
        term, peer, flags = _VRESP.unpack(bytes(buf))
        if flags & ~3:
            raise GoWireError(f"vote response: unknown flags {flags:#x}")
        return cls(term, _id_str(peer), bool(flags & 1), bool(flags & 2))


# domain extension state of a peer state
EXT_UNDETERMINED = 0
EXT_EXTENDED = 1
EXT_NOT_EXTENDED = 2


@dataclass(frozen=True, slots=True)
class PeerState:
    """The data of an ``EntryPeerState`` entry (and of a snapshot's peer part): the known peers, the cluster
    size and the domain extension state (``None`` when absent, as from very old servers)."""
    known_peers: tuple[str, ...]
    cluster_size: int
    domain_ext: int | None = EXT_UNDETERMINED

    def encode(self) -> bytes:
        if not 0 <= self.cluster_size <= 0xFFFFFFFF:
            raise GoWireError("cluster size out of range")
        parts = [_U32.pack(self.cluster_size), _U32.pack(len(self.known_peers))]
        parts += [_id_bytes(p, "peer") for p in self.known_peers]
        if self.domain_ext is not None:
            parts.append(_U16.pack(self.domain_ext))
        return b"".join(parts)

    @classmethod
    def decode(cls, buf) -> "PeerState":
        buf = bytes(buf)
        if len(buf) < 8:
            raise GoWireError("peer state too short")
        (csz,) = _U32.unpack_from(buf, 0)
        (n,) = _U32.unpack_from(buf, 4)
        end = 8 + n * ID_LEN
        if end > len(buf):
            raise GoWireError(f"peer state: {n} peers announced, {(len(buf) - 8) // ID_LEN} present")
        peers = tuple(buf[8 + i * ID_LEN:8 + (i + 1) * ID_LEN].decode("latin-1") for i in range(n))
        rest = len(buf) - end
        if rest == 0:
            return cls(peers, csz, None)
        if rest != 2:
            raise GoWireError("peer state: trailing bytes")
        return cls(peers, csz, _U16.unpack_from(buf, end)[0])


_SNAP_HEAD = struct.Struct("<QQI")
SNAPSHOT_CHECKSUM_LEN = 8


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A RAFT snapshot as nats-server stores it (``snapshots/snap.<term>.<index>``): last term and index, the
    encoded peer state, the state machine data, and an 8-byte HighwayHash-64 of all that. The hash is keyed
    by the group's own key and is kept as read (not verified here). On the wire a snapshot is sent as an
    append entry of two entries, ``ENTRY_SNAPSHOT`` (the data) then ``ENTRY_PEER_STATE``."""
    last_term: int
    last_index: int
    peer_state: bytes
    data: bytes
    checksum: bytes = bytes(SNAPSHOT_CHECKSUM_LEN)

    def encode(self) -> bytes:
        if len(self.checksum) != SNAPSHOT_CHECKSUM_LEN:
            raise GoWireError("snapshot checksum must be 8 bytes")
        return (_SNAP_HEAD.pack(self.last_term, self.last_index, len(self.peer_state)) + bytes(self.peer_state)
                + bytes(self.data) + bytes(self.checksum))

    @classmethod
    def decode(cls, buf) -> "Snapshot":
        buf = bytes(buf)
        if len(buf) < _SNAP_HEAD.size + SNAPSHOT_CHECKSUM_LEN:
            raise GoWireError("snapshot too short")
        lt, li, psl = _SNAP_HEAD.unpack_from(buf, 0)
        pos = _SNAP_HEAD.size
        if pos + psl + SNAPSHOT_CHECKSUM_LEN > len(buf):
            raise GoWireError("snapshot: peer state past the end")
        ps = buf[pos:pos + psl]
        data = buf[pos + psl:len(buf) - SNAPSHOT_CHECKSUM_LEN]
        return cls(lt, li, ps, data, buf[len(buf) - SNAPSHOT_CHECKSUM_LEN:])


@dataclass(frozen=True, slots=True)
class RemovePeerProposal:
    """``$NRG.RP.<group>``: a follower asks the leader to remove a peer (payload: its 8-byte id)."""
    peer: str

    def encode(self) -> bytes:
        return _id_bytes(self.peer, "peer")

    @classmethod
    def decode(cls, buf) -> "RemovePeerProposal":
        if len(buf) != ID_LEN:
            raise GoWireError(f"remove peer proposal must be {ID_LEN} bytes")
        return cls(bytes(buf).decode("latin-1"))


@dataclass(frozen=True, slots=True)
class Proposal:
    """``$NRG.P.<group>``: a follower's proposal forwarded to the leader (payload: the entry's data, which
    becomes an ``ENTRY_NORMAL``)."""
    data: bytes

    def encode(self) -> bytes:
        return bytes(self.data)

    @classmethod
    def decode(cls, buf) -> "Proposal":
        return cls(bytes(buf))


def decode_message(subject: str, reply: str | None, payload) -> object:
    """Decode one ``$NRG.`` message by its subject. A message to a ``$NRG.R.`` inbox is a vote response
    (17 bytes) or an append entry response (25 bytes), told apart by their length as nats-server's own
    inboxes are (a candidate's and a leader's inboxes are distinct subjects; we do not know which is which
    from outside)."""
    kind, _tok = parse_subject(subject)
    if kind == "vote":
        return VoteRequest.decode(payload)
    if kind in ("append", "catchup"):
        return AppendEntry.decode(payload)
    if kind == "proposal":
        return Proposal.decode(payload)
    if kind == "remove_peer":
        return RemovePeerProposal.decode(payload)
    if kind == "catchup_progress":
        return AppendEntryResponse.decode(payload)
    n = len(payload)
    if n == _VRESP.size:
        return VoteResponse.decode(payload)
    if n == _AER.size:
        return AppendEntryResponse.decode(payload)
    raise GoWireError(f"reply of {n} bytes is neither a vote response nor an append entry response")
