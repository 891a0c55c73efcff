"""``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` (nats-server 2.14+): move a consumer back (or forward) to a
stream sequence, forgetting what it delivered and what is pending.

Served by the consumer itself (a subscription per consumer, like ``CONSUMER.MSG.NEXT``: a consumer that does
not exist has no responder). The body is empty (back to the ack floor: ``ack_floor.stream_seq + 1``) or
``{"seq": n}``. A consumer with deliver policy ``all`` may go anywhere; ``by_start_sequence`` not below its
``opt_start_seq``; ``by_start_time`` not below the first sequence at its start time; other policies only back
to the ack floor ("invalid reset: not allowed"). The reset is an entry, ``C_RESET (seq,)``, applied to the
replicated state on every replica (rillet.jetstream.consumer.state); once applied, the leader moves its scan
position, drops its redelivery queue and answers with the consumer info plus ``reset_seq``. On an interest
stream, what the consumer covers below its new ack floor counts as acknowledged by it and goes when no other
consumer needs it (rillet.jetstream.retention.on_consumer_reset; in a cluster the stream leader does it when
it applies the entry); a work-queue stream keeps what a forward reset skipped, as nats-server.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rillet.gocompat.jsoncodec import GoJSONError, check_one_value
from rillet.jetstream.errors import ApiError
from rillet.jetstream.log import Entry, LeadershipLost, NotLeader

if TYPE_CHECKING:
    from rillet.jetstream.consumer.engine import Consumer

TYPE = "io.nats.jetstream.api.v1.consumer_reset_response"


def _respond(c: "Consumer", reply: bytes, obj: dict, hdr: bytes = b"") -> None:
    import json
    body = json.dumps(obj, separators=(",", ":")).encode()
    c.ic.publish(reply, None, hdr + body, len(hdr) if hdr else -1)
    c._flush_out()


def _error(c: "Consumer", reply: bytes, e: ApiError) -> None:
    _respond(c, reply, {"type": TYPE, "error": e.to_dict(), "reset_seq": 0})


def _seq(body: bytes) -> int:
    """The ``seq`` of a reset request (0: back to the ack floor), decoded as Go's json does; raises ApiError."""
    from rillet.jetstream.api.codec import parse_json
    if not body.strip():
        return 0
    try:  # (json.Unmarshal: exactly one value, its syntax errors without offset)
        check_one_value(bytes(body))
    except GoJSONError as e:
        raise ApiError.make("INVALID_JSON", err=str(e)) from None
    try:
        d = parse_json(body)
    except ApiError as e:  # Go's json.Unmarshal error text, without the offset the API decoder adds
        text = e.description
        i = text.rfind(" at offset ")
        raise ApiError.make("INVALID_JSON", err=(text[:i] if i > 0 else text)[len("invalid JSON: "):]) from None
    if not isinstance(d, dict):
        kind = {list: "array", str: "string", bool: "bool"}.get(type(d), "number")
        raise ApiError.make("INVALID_JSON", err=f"json: cannot unmarshal {kind} into Go value of type "
                                                "server.JSApiConsumerResetRequest")
    v = d.get("seq")
    if v is None:
        for k, val in d.items():  # Go matches field names without regard to case
            if k.lower() == "seq":
                v = val
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 1 << 64:
        if isinstance(v, bool):
            kind = "bool"
        elif isinstance(v, (int, float)):
            kind = f"number {v}"
        elif isinstance(v, str):
            kind = "string"
        else:
            kind = "array" if isinstance(v, list) else "object"
        raise ApiError.make("INVALID_JSON", err=f"json: cannot unmarshal {kind} into Go struct field "
                                                "JSApiConsumerResetRequest.seq of type uint64")
    return v


def target_seq(c: "Consumer", seq: int) -> int:
    """The sequence a reset goes to, checked against the deliver policy; raises CONSUMER_INVALID_RESET."""
    if seq == 0:
        seq = c.asflr + 1
    else:
        dp = getattr(c.cfg, "deliver_policy", "all") or "all"
        if dp == "by_start_sequence":
            if seq < (c.cfg.opt_start_seq or 0):
                raise ApiError.make("CONSUMER_INVALID_RESET", err="below start seq")
        elif dp == "by_start_time":
            from rillet.jetstream.consumer.common import _parse_time_ns
            if seq < c.stream.store.get_seq_from_time(_parse_time_ns(c.cfg.opt_start_time)):
                raise ApiError.make("CONSUMER_INVALID_RESET", err="below start time")
        elif dp != "all":
            raise ApiError.make("CONSUMER_INVALID_RESET", err="not allowed")
    return max(seq, 1)


def on_request(c: "Consumer", reply: bytes | None, hdr: bytes, body: bytes) -> None:
    if not reply or c.closed:
        return
    try:
        if hdr:
            from rillet.jetstream.api.common import _api_level_too_high
            if _api_level_too_high(hdr):
                raise ApiError.make("REQUIRED_API_LEVEL")
        seq = target_seq(c, _seq(body))
    except ApiError as e:
        _error(c, reply, e)
        return

    def done(entry: Entry, res: Any, err: BaseException | None) -> None:
        if err is not None:
            # (leadership moving away mid-proposal is not a server error: the requester is told and asks again)
            log = c.js.log.debug if isinstance(err, (LeadershipLost, NotLeader)) else c.js.log.error
            log(f"JetStream consumer '{c.stream.name} > {c.name}': reset failed: {err!r}")
            _error(c, reply, ApiError.make("CONSUMER_INVALID_RESET", err=str(err)))
            return
        applied(c, seq)
        _respond(c, reply, {"type": TYPE, **c.info(), "reset_seq": seq}, ident_hdr)

    # nats-server 2.15: a reset naming a stream identity (a durable source's) is answered with the stream's
    # identity, never refused for it (the source sees a recreated origin from the answer)
    ident_hdr = b""
    if hdr and b"Nats-Stream-Identity:" in hdr:
        from rillet.jetstream import headers as H
        from rillet.jetstream.sources import IDENTITY_HDR, stream_identity
        ident_hdr = H.make_headers([(IDENTITY_HDR, stream_identity(c.stream))])

    c.clog.propose(Entry(Entry.C_RESET, (seq,)), done)


def applied(c: "Consumer", seq: int) -> None:
    """The leader's side of an applied reset: the scan position, redeliveries, pending count, persistence."""
    c.sseq = seq
    c._ndseq = 0
    c.rdq.clear()
    c.rdqi.clear()
    c.lss = None
    c.npc_dirty = True
    c._mark_dirty()
    if c.retention == "interest":  # (a clustered consumer's removals are the stream leader's)
        from rillet.jetstream import retention
        retention.on_consumer_reset(c.stream, c, seq)
    c.kick()
