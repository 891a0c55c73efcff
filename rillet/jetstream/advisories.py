"""JetStream advisories on ``$JS.EVENT.ADVISORY.>`` and metrics on ``$JS.EVENT.METRIC.>``."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from rillet.gocompat.gotime import format_time
from rillet.jetstream.stream import now_ns

if TYPE_CHECKING:
    from rillet.jetstream.manager import JetStream, JSAccount

_enc = msgspec.json.encode
_ACTION_EVENT = {"create": "CREATED", "delete": "DELETED", "modify": "UPDATED"}


def _id() -> str:
    import base64
    return base64.b32encode(os.urandom(15)).decode().rstrip("=")[:22]


class Advisories:
    def __init__(self, js: "JetStream") -> None:
        self.js = js

    def _send(self, jsa: "JSAccount", subject: str, body: dict[str, Any]) -> None:
        # only build and send when somebody listens: advisories are frequent and usually unwatched
        if not jsa.account.sublist.has_interest(subject):
            return
        jsa.ic.publish(subject.encode(), None, _enc(body))

    def _base(self, typ: str) -> dict[str, Any]:
        d: dict[str, Any] = {"type": typ, "id": _id(), "timestamp": format_time(now_ns())}
        return d

    def _emit(self, jsa: "JSAccount", subject: str, typ: str, fields: dict[str, Any], domain: bool = True) -> None:
        """Send the advisory ``typ`` with ``fields`` (and the JetStream domain, when set and ``domain``)."""
        if not jsa.account.sublist.has_interest(subject):
            return
        d = self._base(typ)
        d.update(fields)
        if domain and self.js.domain:
            d["domain"] = self.js.domain
        jsa.ic.publish(subject.encode(), None, _enc(d))

    def stream_action(self, jsa: "JSAccount", stream: Any, action: str) -> None:
        self._emit(jsa, f"$JS.EVENT.ADVISORY.STREAM.{_ACTION_EVENT[action]}.{stream.name}",
                   "io.nats.jetstream.advisory.v1.stream_action", {"stream": stream.name, "action": action})

    def consumer_action(self, jsa: "JSAccount", stream: Any, consumer: str, action: str) -> None:
        self._emit(jsa, f"$JS.EVENT.ADVISORY.CONSUMER.{_ACTION_EVENT[action]}.{stream.name}.{consumer}",
                   "io.nats.jetstream.advisory.v1.consumer_action",
                   {"stream": stream.name, "consumer": consumer, "action": action})

    def stream_data_lost(self, jsa: "JSAccount", stream: str, lost: dict[str, Any]) -> None:
        """Rillet's own (nats-server has none): messages of ``stream`` are lost (``lost``: the sequences and why):
        an R1 stream's damaged records (found when its store opened or by a read while running: Stream
        ``_store_damaged``), as the RAFT layer reports committed entries no replica holds
        (rillet.jetstream.cluster.streams)."""
        self._emit(jsa, f"$JS.EVENT.ADVISORY.STREAM.DATA_LOST.{stream}",
                   "io.nats.jetstream.advisory.v1.stream_data_lost", {"stream": stream, "lost": lost})

    def max_deliveries(self, jsa: "JSAccount", stream: str, consumer: str, sseq: int, deliveries: int) -> None:
        self._emit(jsa, f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}",
                   "io.nats.jetstream.advisory.v1.max_deliver",
                   {"stream": stream, "consumer": consumer, "stream_seq": sseq, "deliveries": deliveries},
                   domain=False)

    def terminated(self, jsa: "JSAccount", stream: str, consumer: str, cseq: int, sseq: int, deliveries: int,
                   reason: str) -> None:
        fields: dict[str, Any] = {"stream": stream, "consumer": consumer, "consumer_seq": cseq, "stream_seq": sseq,
                                  "deliveries": deliveries}
        if reason:
            fields["reason"] = reason
        self._emit(jsa, f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.{consumer}",
                   "io.nats.jetstream.advisory.v1.terminated", fields, domain=False)

    def ack_sample(self, jsa: "JSAccount", stream: str, consumer: str, cseq: int, sseq: int, ack_time_ns: int,
                   deliveries: int) -> None:
        self._emit(jsa, f"$JS.EVENT.METRIC.CONSUMER.ACK.{stream}.{consumer}",
                   "io.nats.jetstream.metric.v1.consumer_ack",
                   {"stream": stream, "consumer": consumer, "consumer_seq": cseq, "stream_seq": sseq,
                    "ack_time": ack_time_ns, "deliveries": deliveries})
