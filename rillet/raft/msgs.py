"""RAFT messages, log entries and snapshots, and their compact binary encoding.

An entry is a plain tuple ``(index, term, kind, data)``: ``kind`` is ENTRY_NORMAL (application data),
ENTRY_CONF (``data`` is the encoded full voter set that takes effect when the entry is appended) or
ENTRY_NOOP (the empty entry a new leader appends). Tuples, not objects, because a replicated stream
carries one entry per published message.

Messages are msgspec structs encoded as tagged MessagePack arrays (``encode``/``decode``). ``decode``
checks the structure and the RAFT invariants a peer could get wrong (entry indexes contiguous after
``prev_index``, known entry kinds, no negative numbers) and raises ``DecodeError`` for anything else,
so a driver can hand it bytes straight off a route connection.
"""
from __future__ import annotations

from typing import Annotated, Optional, Union

import msgspec

ENTRY_NORMAL = 0
ENTRY_CONF = 1
ENTRY_NOOP = 2
ENTRY_KINDS = (ENTRY_NORMAL, ENTRY_CONF, ENTRY_NOOP)

U64 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Entry = tuple[U64, U64, Annotated[int, msgspec.Meta(ge=0, le=2)], bytes]


class DecodeError(ValueError):
    """Bytes that are not a well-formed RAFT message."""


class Snapshot(msgspec.Struct, array_like=True, gc=False):
    """State machine image at ``index`` (whose entry had ``term``), the voters at that index, and the
    application's bytes. ``terms``: the log's terms up to ``index`` as (first index, term) pairs, each term
    holding from its index to the next pair's (the first pair's index is the first one known; at most
    ``TERMS_KEPT`` pairs, the latest): what a member that had committed entries there checks them against when
    it installs the snapshot (``Node._check_snapshot``). Empty in snapshots written before it existed."""
    index: U64
    term: U64
    peers: tuple[str, ...]
    data: bytes
    terms: tuple[tuple[U64, U64], ...] = ()


TERMS_KEPT = 64  # (Snapshot.terms) the most (index, term) pairs a snapshot carries


class HardState(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """What must be on disk before any message of the same Ready is sent."""
    term: U64
    vote: Optional[str]
    commit: U64
    # the owner's number saved with the commit (a stream: the highest sequence its entries up to the commit
    # index stored): after a majority lost committed entries, what the lost range reached
    mark: U64 = 0


class _Msg(msgspec.Struct, array_like=True, gc=False, tag_field="t"):
    term: U64
    frm: str
    to: str


class VoteRequest(_Msg, tag=1):
    """A (pre-)candidate asks for a vote for ``term``. ``pre``: a pre-vote (no term change anywhere);
    ``transfer``: sent after TimeoutNow, so voters do not ignore it while they still hear a leader."""
    last_index: U64
    last_term: U64
    pre: bool = False
    transfer: bool = False


class VoteResponse(_Msg, tag=2):
    granted: bool
    pre: bool = False


class AppendEntries(_Msg, tag=3):
    """Entries following (prev_index, prev_term); ``commit`` is the leader's commit index. ``quiet``: no
    entries, only a new commit index for a follower the leader streams to; answered only if refused.
    ``peers``: set when the entries start at the very beginning of the log (``prev_index`` 0): the voters
    there (the founding set), which a follower that has nothing takes instead of its own guess."""
    prev_index: U64
    prev_term: U64
    commit: U64
    entries: list[Entry] = []
    quiet: bool = False
    peers: Optional[tuple[str, ...]] = None


class AppendResponse(_Msg, tag=4):
    """Success: ``index`` is the last index now known to match. Reject: ``index`` is the rejected
    prev_index and (hint_index, hint_term) the follower's best guess of where the logs agree."""
    index: U64
    reject: bool = False
    hint_index: U64 = 0
    hint_term: U64 = 0


class Heartbeat(_Msg, tag=5):
    """``commit``: the leader's commit, capped at what it knows the follower holds. (``match``,
    ``match_term``): the last entry the leader believes the follower holds, which the follower checks (a
    follower that lost its log, or entries it had acknowledged, refuses); ``leader_commit``: the leader's
    own commit index, so the follower knows how far behind it is."""
    commit: U64
    match: U64 = 0
    match_term: U64 = 0
    leader_commit: U64 = 0


class HeartbeatResponse(_Msg, tag=6):
    """``reject``: the follower does not hold the heartbeat's (match, match_term) entry; ``index`` is that
    match and (hint_index, hint_term) the follower's best guess of where the logs agree."""
    reject: bool = False
    index: U64 = 0
    hint_index: U64 = 0
    hint_term: U64 = 0


class InstallSnapshot(_Msg, tag=7):
    snapshot: Snapshot


class TimeoutNow(_Msg, tag=8):
    """Leadership transfer: campaign at once, without pre-vote."""


class RecoveryQuery(_Msg, tag=9):
    """A member that came back from an unclean stop (its log may lack entries it had acknowledged) asks a peer
    for its log state before it takes part in elections again (Viewstamped Replication's recovery, and
    "Protocol-Aware Recovery for Consensus-Based Storage", FAST 2018). Not subject to the term rules.
    ``known_mark``: the owner's mark it had saved (HardState.mark); ``known_commit``: the commit index it had saved
    (a leader lacking entries up to it knows they were lost: ``Node._check_queried``)."""
    known_mark: U64 = 0
    known_commit: U64 = 0
    # (a wiped member's survey found fewer voters than a quorum kept their logs: ``Node.lost_open``) the first
    # index that may be lost: the peer learns the loss too (a survivor that is not recovering makes no survey)
    lost_from: U64 = 0


class RecoveryState(_Msg, tag=10):
    """The answer to RecoveryQuery: the peer's last entry (``last_index``, ``last_term``), its commit index,
    ``known_commit`` (the highest commit index it knows was reached, including one it had saved before losing
    its own tail), whether it is itself ``recovering`` and whether it is a ``voter`` in its own log's
    configuration."""
    last_index: U64
    last_term: U64
    commit: U64
    known_commit: U64
    recovering: bool = False
    voter: bool = True  # (the peer is a voter in its own log's configuration: a candidate it could be)
    known_mark: U64 = 0  # the highest owner's mark (HardState.mark) the peer saved or was told of
    wiped: bool = False  # (recovering) the peer started with no state at all (a wiped store): it kept no log
    leader: bool = False  # the peer leads (in ``term``): it holds every committed entry, nothing is lost


Message = Union[VoteRequest, VoteResponse, AppendEntries, AppendResponse, Heartbeat, HeartbeatResponse,
                InstallSnapshot, TimeoutNow, RecoveryQuery, RecoveryState]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)
_peers_decoder = msgspec.msgpack.Decoder(tuple[str, ...])


def encode(msg: Message) -> bytes:
    return _encoder.encode(msg)


def decode(buf: bytes) -> Message:
    try:
        msg = _decoder.decode(buf)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as e:
        raise DecodeError(f"raft message: {e}") from None
    if type(msg) is AppendEntries:
        expect = msg.prev_index + 1
        for e in msg.entries:
            if e[0] != expect:
                raise DecodeError(f"raft message: append entry index {e[0]} where {expect} was expected")
            expect += 1
    return msg


def encode_peers(peers) -> bytes:
    """The data of an ENTRY_CONF entry: the complete new voter set."""
    return _encoder.encode(tuple(peers))


def decode_peers(data: bytes) -> tuple[str, ...]:
    try:
        return _peers_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as e:
        raise DecodeError(f"raft configuration entry: {e}") from None
