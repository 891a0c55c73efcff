"""What JetStream tells clients when the server shuts down, before anything else stops (nats-server's
signalPullConsumers): each pull request still waiting on a consumer of one replica is answered
``409 Server Shutdown`` with what it still wanted (``Nats-Pending-Messages`` / ``Nats-Pending-Bytes``), so
the client knows at once to ask elsewhere rather than wait for its request to expire. Consumers with more
replicas are left alone: another server takes them over."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rillet.jetstream import headers as H
from rillet.jetstream.consumer.common import PENDING_BYTES, PENDING_MSGS

if TYPE_CHECKING:
    from rillet.jetstream.consumer.engine import Consumer


def _replicas(consumer: Consumer) -> int:
    n = consumer.cfg.num_replicas or 0
    if n <= 0:  # (0: as many as its stream)
        n = consumer.stream.cfg.num_replicas or 1
    return n


def signal_pull_requests(js: Any) -> int:
    """Answer every waiting pull request of every one-replica consumer; returns how many were answered."""
    sent = 0
    for jsa in list(js.accounts.values()):
        for stream in list(jsa.streams.values()):
            for c in list(stream.consumers.values()):
                waiting = c.waiting
                if not waiting or c.closed or _replicas(c) > 1:
                    continue
                for wr in list(waiting):
                    hdr = H.make_headers([(PENDING_MSGS, str(wr.n)), (PENDING_BYTES, str(wr.b))], 409,
                                         "Server Shutdown")
                    c._send(wr.reply_b, None, hdr, b"")
                    sent += 1
    if sent:
        js.server.flush_clients()
    return sent
