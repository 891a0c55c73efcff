"""The account limits a Rillet meta leader of a Go cluster checks before it proposes a stream, as nats-server's
meta leader does (``jsClusteredStreamLimitsCheck``): on a create, and on an update that scales a stream up (more
replicas than its current or desired peers). They are counted from the meta layer's assignments, not from what
this server stores:

- the number of the account's other streams against its ``max_streams`` (10027);
- the stream's ``max_consumers`` against the account's (10026);
- the bytes the stream reserves (its ``max_bytes`` times its replicas, or 1 byte without a limit) over what the
  account's other streams of the same storage reserve (their ``max_bytes`` times their replicas) against the
  account's ``max_file`` / ``max_mem`` (10047 / 10028).

The limits are those of the account's ``jetstream`` block in this server's configuration (untiered, as
nats-server's are for such accounts). Not done: tiered limits of operator-mode accounts (their JWT's ``R1``/``R3``
tiers), and creates still in flight (nats-server counts the proposals not yet applied too).
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["check_stream_limits"]


def check_stream_limits(streams: dict, acc: str, cfg: Any, limits: Optional[Any]) -> None:
    """Raise nats-server's error when the stream ``cfg`` (a StreamConfig) would exceed the account ``acc``'s
    ``limits`` (an AccountLimits; None: none set). ``streams``: the meta state's assignments, (account, name) ->
    assignment."""
    if limits is None:
        return
    from rillet.jetstream import errors as jserr
    from rillet.jetstream.streamconfig import check_stream_limits as bytes_check
    count, reserved = 0, 0
    for (a, name), sa in streams.items():
        if a != acc or name == cfg.name:  # (the stream itself does not count: an update, or the same create)
            continue
        count += 1
        other = sa.get("stream") or {}
        max_bytes = int(other.get("max_bytes") or 0)
        if max_bytes > 0 and str(other.get("storage") or "file") == cfg.storage:
            replicas = int(other.get("num_replicas") or 1)
            reserved += max_bytes * replicas if replicas > 1 else max_bytes
    if limits.max_streams > 0 and count >= limits.max_streams:
        raise jserr.MAXIMUM_STREAMS_LIMIT()
    bytes_check(cfg, limits, reserved=reserved)
