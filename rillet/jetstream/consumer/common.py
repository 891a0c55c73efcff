"""What the consumer's modules share: nats-server's header names, the engine's limits and clock, small helpers."""
from __future__ import annotations

import random
import string
import time
from typing import Any

from rillet import lane
from rillet.gocompat.gotime import time_ns
from rillet.jetstream.store.base import ErrStoreClosed, StoreError


_ack_numbers = lane.ack_numbers  # rillet.jetstream.acksubject's, or their compiled twins
_ack_reply = lane.ack_reply
# header names (nats-server's)
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
CONSUMER_STALLED = "Nats-Consumer-Stalled"
MSG_SIZE = "Nats-Msg-Size"
PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"

FC_MAX_PENDING = 32 * 1024 * 1024  # flow control window limit (bytes), like nats-server
DELETE_WAIT_DEFAULT = 5_000_000_000  # ns: ephemerals' default inactive threshold
INTEREST_POLL = 1.0  # s: an unbound push consumer also looks for (wildcard) interest this often
STATE_FLUSH = 0.05  # s: persisted state is written this long after it changed
RUN_BUDGET = 1024  # deliveries per pass before yielding to the loop

# Pull request deadlines (expiry, request heartbeats) run on this clock, not on the loop's: uvloop's
# loop.time() is cut to whole milliseconds and its timers fire up to a millisecond early or late, while
# clients time a request from its send with a margin of 100 us (nats.py: expires = timeout - 100 us).
# nats-server stamps each request with time.Now() and checks against it, so do we.
_clock = time.monotonic

_NAME_CHARS = string.ascii_letters + string.digits


def new_consumer_name() -> str:
    return "".join(random.choice(_NAME_CHARS) for _ in range(8))


def _cfg(cfg: Any, name: str, default: Any = None) -> Any:
    v = getattr(cfg, name, default)
    return default if v is None else v


def _parse_time_ns(v: Any) -> int:
    """RFC 3339 text (or ns int) to ns since the epoch; 0 when unset."""
    if not v:
        return 0
    if isinstance(v, int):
        return v
    try:
        return time_ns(str(v))
    except ValueError:
        return 0

_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def account_hash(name: str) -> str:
    """nats-server's 8-character hash of an account name (used in v2 ack subjects)."""
    import hashlib
    d = hashlib.sha256(name.encode()).digest()
    return "".join(_HASH_DIGITS[b % 62] for b in d[:8])


def _last_seq(store: Any, filter: str) -> int:
    """The last sequence matching ``filter`` (0: none). A message the store cannot read still counts: its
    delivery reports and skips it."""
    try:
        m = store.load_last_msg(filter)
    except ErrStoreClosed:
        raise
    except StoreError as e:
        return getattr(e, "seq", 0)
    return m.seq if m is not None else 0


def _headers_only(hdr: bytes, size: int) -> bytes:
    line = f"{MSG_SIZE}: {size}\r\n\r\n".encode()
    if not hdr:
        return b"NATS/1.0\r\n" + line
    return hdr[:-2] + line

