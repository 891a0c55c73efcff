"""Shared types of the JetStream message stores: messages, config, state, errors.

Timestamps are int nanoseconds since the epoch.  Subjects are ``str``; ``hdr`` is
the raw header block (``NATS/1.0\\r\\n...\\r\\n\\r\\n``) or ``b""``; ``data`` is bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import msgspec

__all__ = [
    "ConsumerState",
    "ErrDeleted",
    "ErrMaxBytes",
    "ErrMaxMsgSize",
    "ErrMaxMsgs",
    "ErrMaxMsgsPerSubject",
    "ErrNoSuchMsg",
    "ErrSequenceMismatch",
    "ErrStoreClosed",
    "ErrStoreCorrupt",
    "ErrStoreFull",
    "ErrSyncFailed",
    "ErrTooManyResults",
    "LogFn",
    "RemoveCallback",
    "SequencePair",
    "StoreConfig",
    "StoreError",
    "StoredMsg",
    "StreamState",
    "file_msg_size",
    "mem_msg_size",
]


class StoredMsg(msgspec.Struct, gc=False):
    """One stored message.  Treat as read-only: stores may hand out shared instances."""

    subject: str
    seq: int
    ts: int
    hdr: bytes = b""
    data: bytes = b""


# ---------------------------------------------------------------------------
# Errors (texts follow nats-server's store errors where it has one)


class StoreError(Exception):
    """Base class of every store error.  ``text``: the message when none is given."""

    text = ""

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ((self.text,) if self.text else ())))


class ErrMaxMsgs(StoreError):
    text = "maximum messages exceeded"


class ErrMaxBytes(StoreError):
    text = "maximum bytes exceeded"


class ErrMaxMsgsPerSubject(StoreError):
    text = "maximum messages per subject exceeded"


class ErrMaxMsgSize(StoreError):
    text = "message size exceeds maximum allowed"


class ErrStoreClosed(StoreError):
    text = "store is closed"


class ErrStoreFull(StoreError):
    """The disk is full or not writable; the text carries the OS message.  Nothing was stored."""


class ErrSyncFailed(ErrStoreFull):
    """An fsync failed: what was written since the last good one may be lost, and a later fsync that succeeds
    does not prove otherwise (the kernel may have dropped the pages it could not write)."""


class ErrStoreCorrupt(StoreError):
    """Data on disk failed its checksum; the affected messages are never served.  ``seq``: the message
    that could not be read, when the error is about one (0 otherwise)."""

    def __init__(self, msg: str = "store corrupt", seq: int = 0) -> None:
        super().__init__(msg)
        self.seq = seq


class ErrNoSuchMsg(StoreError):
    text = "no message found"


class ErrDeleted(ErrNoSuchMsg):
    text = "message deleted"


class ErrSequenceMismatch(StoreError):
    text = "expected sequence does not match store"


class ErrTooManyResults(StoreError):
    text = "too many matching results for request"


# ---------------------------------------------------------------------------
# Config and state


@dataclass
class StoreConfig:
    """What the store enforces.  ``max_age`` and TTLs are in seconds (float)."""

    name: str = ""
    storage: Literal["file", "memory"] = "file"
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: float = 0.0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: Literal["old", "new"] = "old"
    discard_new_per_subject: bool = False
    first_seq: int = 1
    compression: Literal["none", "s2"] = "none"
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: float = 0.0
    # file store only
    block_size: int = 8 * 1024 * 1024
    sync_interval: float | str = 120.0  # seconds, or "always" (caller syncs per batch)


class StreamState:
    """A stream's state.  The counters are taken when ``state()`` is called (O(1));
    ``deleted`` (sequences in [first_seq, last_seq] that are gone) and ``lost``
    (sequences whose data failed its checksum) are computed on first access."""

    __slots__ = (
        "msgs",
        "bytes",
        "first_seq",
        "first_ts",
        "last_seq",
        "last_ts",
        "num_deleted",
        "num_subjects",
        "_deleted",
        "_lost",
        "_calc_deleted",
        "_calc_lost",
    )
    _FIELDS = (
        "msgs",
        "bytes",
        "first_seq",
        "first_ts",
        "last_seq",
        "last_ts",
        "num_deleted",
        "deleted",
        "num_subjects",
        "lost",
    )

    def __init__(
        self,
        msgs: int = 0,
        bytes: int = 0,
        first_seq: int = 0,
        first_ts: int = 0,
        last_seq: int = 0,
        last_ts: int = 0,
        num_deleted: int = 0,
        deleted: list[int] | None = None,
        num_subjects: int = 0,
        lost: list[int] | None = None,
        calc_deleted: Callable[[], list[int]] | None = None,
        calc_lost: Callable[[], list[int]] | None = None,
    ) -> None:
        self.msgs = msgs
        self.bytes = bytes
        self.first_seq = first_seq
        self.first_ts = first_ts
        self.last_seq = last_seq
        self.last_ts = last_ts
        self.num_deleted = num_deleted
        self.num_subjects = num_subjects
        self._deleted = deleted
        self._lost = lost
        self._calc_deleted = calc_deleted
        self._calc_lost = calc_lost

    @property
    def deleted(self) -> list[int]:
        if self._deleted is None:
            calc = self._calc_deleted
            self._deleted = calc() if (calc is not None and self.num_deleted) else []
            self._calc_deleted = None
        return self._deleted

    @deleted.setter
    def deleted(self, v: list[int]) -> None:
        self._deleted = v

    @property
    def lost(self) -> list[int]:
        if self._lost is None:
            calc = self._calc_lost
            self._lost = calc() if calc is not None else []
            self._calc_lost = None
        return self._lost

    @lost.setter
    def lost(self, v: list[int]) -> None:
        self._lost = v

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self._FIELDS}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamState):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return "StreamState(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


class SequencePair(msgspec.Struct):
    consumer_seq: int = 0
    stream_seq: int = 0


class ConsumerState(msgspec.Struct, kw_only=True):
    """A consumer's persisted state.

    ``pending``: stream_seq -> (consumer_seq, ts_ns) of delivered, unacked messages.
    ``redelivered``: stream_seq -> delivery count - 1 for messages delivered more than once.
    """

    delivered: SequencePair = msgspec.field(default_factory=SequencePair)
    ack_floor: SequencePair = msgspec.field(default_factory=SequencePair)
    pending: dict[int, tuple[int, int]] = {}
    redelivered: dict[int, int] = {}


_CS_ENCODER = msgspec.msgpack.Encoder()
_CS_DECODER = msgspec.msgpack.Decoder(ConsumerState)


def encode_consumer_state(state: Any) -> bytes:
    """Encode a ConsumerState (or an equivalent dict) to bytes."""
    if not isinstance(state, ConsumerState):
        state = msgspec.convert(state, ConsumerState, strict=False)
    return _CS_ENCODER.encode(state)


def decode_consumer_state(buf: bytes) -> ConsumerState:
    return _CS_DECODER.decode(buf)


# Callbacks
RemoveCallback = Callable[[int, str, int], None]  # (seq, subject, size)
LogFn = Callable[[str, str], None]  # (level, text); level is "debug", "info", "warn" or "error"


# ---------------------------------------------------------------------------
# Accounted message sizes: the same numbers nats-server reports in stream info.


def mem_msg_size(subject: str, hdr: bytes, data: bytes) -> int:
    return len(subject) + len(hdr) + len(data) + 16


def file_msg_size(subject: str, hdr: bytes, data: bytes) -> int:
    if hdr:
        return 34 + len(subject) + len(hdr) + len(data)
    return 30 + len(subject) + len(data)

