"""Message tracing (nats-server's msgtrace.go, ADR-41), in our own words.

A message whose headers carry ``Nats-Trace-Dest: <subject>`` (or a sampled W3C ``traceparent`` header in an
account with a ``msg_trace`` destination) is traced: while this server handles it, what happens is recorded
as events (``in`` ingress, ``sm`` subject mapping, ``se`` stream export, ``si`` service import, ``js``
JetStream, ``eg`` egress), and one JSON trace event is published to the destination, in the ingress
account, when the server is done with the message. ``Nats-Trace-Only: true`` traces without delivering to
clients (routes, gateways and leaf nodes still get the message: the server there reports its part). A
message sent on to another server gets ``Nats-Trace-Hop`` (``1``, ``2``, ... then ``1.1`` there): each
server sends its own event to the destination.

The hot path stays free: a message is looked at only when it has headers and the header block contains
``Nats-Trace-`` (or, in an account with a trace destination, ``traceparent``). While a traced message is
being delivered, ``CURRENT`` holds its trace; delivery code checks it only for messages with headers.

Across servers (routes, gateways, leaf nodes) as nats-server: the hop header per connection sent to, with an
egress event named after the remote server; the receiving server's own event (for gateways also on ``_GR_.``
replies; one forwarded over a route gets no hop or egress, as nats-server's handleGatewayReply). Gateways get
the message after local and route deliveries, so their hop numbers follow the routes'. Events are compressed
as ``Accept-Encoding`` asks (gzip, snappy framed, else ``identity``).

Known differences: a remote that does not take part in tracing (INFO ``proto`` < 3, nats-server < 2.11) is
not detected (nats-server marks its egress "remote does not support message tracing" and keeps trace-only
messages from it); the ``js`` event's error texts are mapped from our API errors for the usual refusals
(duplicate, expected stream/last sequence/last subject sequence/last msg id, max message size, TTL disabled);
others show the API description with its code, and a stream with several failing expectations names the first
we check (nats-server checks the subject sequence before the stream sequence).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rillet.server.msgtrace_events import MsgTrace

# What delivery reads per message with headers: the trace of the message being delivered, else None. Set by
# rillet.server.msgtrace_events, which has everything else (the events, the traced delivery) and is loaded on
# first use of any other name of this module (a message that may be traced: its callers test that first), so
# that a server that traces nothing does not load it (issue 20, idle memory).
CURRENT: "MsgTrace | None" = None


def __getattr__(name: str) -> Any:
    from rillet.server import msgtrace_events
    try:
        value = getattr(msgtrace_events, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # (found here from now on)
    return value
