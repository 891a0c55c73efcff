"""Stream ingest limits: ``jetstream { max_buffered_msgs, max_buffered_size }`` (nats-server 2.11).

nats-server puts every message published to a stream on that stream's inbound queue, which the stream's own
goroutine drains (storing it, or proposing it when replicated); a publish that finds the queue at
``max_buffered_msgs`` messages, or that would take it past ``max_buffered_size`` bytes (subject, reply,
headers and payload of each message), is answered ``NATS/1.0 429 Too Many Requests`` with the PubAck error
10167 "too many requests" and dropped. Defaults 100,000 messages and 128 MiB (0 = the default; a negative count
or size = no limit). The limits are read when a stream is created (so a stream keeps the values it started
with); they are not shown in /varz or /jsz, and a reload that changes them is refused.

Rillet checks and stores (or proposes) a publish in the same call that reads it, so it has no such queue; what
a stream has accepted and not yet stored is its backlog here, counted by ``Stream`` and checked by ``over``
before anything else in ``Stream.process``. A message from the stream's sources counts but is never refused, a
mirror's is not counted (nats-server queues both apart, without limits):

- a replicated stream's leader: the messages it proposed and its group has not applied yet (the proposed
  overlay, ``Stream._inflight``: MSG entries; atomic batches are bounded by their own limits);
- one server, file store (write-behind): the messages gathered since the pass's first write and not written
  to the OS yet (``Stream._wb_*``, reset when the writer writes them at the end of the loop pass);
- one server, memory store: nothing (a publish is stored before the next one is read), so no limit is hit.
"""
from __future__ import annotations

import time
from typing import Any

from rillet.jetstream.errors import ApiError

DEFAULT_MSGS = 100_000
DEFAULT_BYTES = 128 * 1024 * 1024
HDR_429 = b"NATS/1.0 429 Too Many Requests\r\n\r\n"
WARN_EVERY = 1.0  # seconds between two warnings of one stream's refusals


def limits(opts: Any) -> tuple[int, int]:
    """(messages, bytes) of the server's stream ingest limits; 0 for no limit."""
    x = opts.jetstream.extra
    n = x.get("max_buffered_msgs", 0)
    b = x.get("max_buffered_size", 0)
    if n == 0:
        n = DEFAULT_MSGS
    if b == 0:
        b = DEFAULT_BYTES
    return max(n, 0), max(b, 0)


def msg_size(subject: str, reply: Any, hdr: bytes, data: bytes) -> int:
    """What one message counts toward ``max_buffered_size`` (as nats-server: subject, reply, headers, payload)."""
    return len(subject) + len(hdr) + len(data) + (len(reply) if reply.__class__ is bytes else 0)


def over(stream: Any, size: int) -> str:
    """Why a publish of ``size`` bytes is over ``stream``'s ingest limits ("" when it is not)."""
    n = stream._bl_n + stream._wb_n
    if not n:
        return ""
    max_n, max_b = stream.ingest_limits
    if max_n and n >= max_n:
        return f"{n} messages buffered (max_buffered_msgs {max_n})"
    if max_b and stream._bl_b + stream._wb_b + size > max_b:
        return f"{stream._bl_b + stream._wb_b} bytes buffered (max_buffered_size {max_b})"
    return ""


def refuse(stream: Any, reply: bytes | None, why: str) -> None:
    """Answer a publish over the limits (429, 10167) and warn, at most once a second per stream."""
    now = time.monotonic()
    if now - stream._ingest_warned >= WARN_EVERY:
        stream._ingest_warned = now
        stream.js.log.warn(f"Stream '{stream.jsa.account.name} > {stream.name}': publishes refused, the stream "
                           f"ingests too slowly: {why}")
    if reply:
        e = ApiError.make("STREAM_TOO_MANY_REQUESTS")
        body = b'{"error":%s,"stream":%s,"seq":0}' % (_json(e.to_dict()), _json(stream.name))
        stream._reply(reply, body, HDR_429)


def _json(v: Any) -> bytes:
    import msgspec
    return msgspec.json.encode(v)
