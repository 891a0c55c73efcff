"""A Go consumer group's replicated state on a Rillet server: ``ConsumerReplicaState`` (nats-server's consumer
store rules: consumerFileStore's UpdateDelivered, UpdateAcks, UpdateStarting, Reset and Update) and nats-server's
consumer state encoding (store.go ``encodeConsumerState``, filestore.go ``decodeConsumerState``), which a consumer
group's snapshots carry. Used by rillet.jetstream.cluster.gostream.GoConsumerReplica (every replica) and
rillet.jetstream.cluster.goconsumerlead (its leader)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from rillet.raft import gowire as gw
from rillet.raft.gowire import get_uvarint, get_varint, put_uvarint, put_varint

__all__ = ["ConsumerReplicaState", "decode_consumer_state", "encode_consumer_state"]

STATE_MAGIC, STATE_VERSION = 22, 2


@dataclass
class ConsumerReplicaState:
    """A consumer's replicated state as nats-server's consumer store applies its entries (consumerFileStore's
    UpdateDelivered, UpdateAcks, UpdateStarting, Reset and Update, the same rules): what was delivered (consumer
    and stream sequence), what is pending acknowledgement (stream seq -> (first consumer seq, delivery time)),
    redelivery counts (stream seq -> deliveries - 1), the ack floor, and the pull requests the leader shared."""
    delivered_consumer: int = 0
    delivered_stream: int = 0
    ack_floor_consumer: int = 0
    ack_floor_stream: int = 0
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)
    redelivered: dict[int, int] = field(default_factory=dict)
    pull_requests: set[str] = field(default_factory=set)
    ack_policy: str = "explicit"
    max_deliver: int = 0
    has_state: bool = False  # (any entry applied: a new leader then takes over this state, else starts anew)

    def delivered(self, dseq: int, sseq: int, dc: int, ts: int) -> None:
        self.has_state = True
        if dc != 1 and self.ack_policy == "none":
            return
        if dseq <= self.ack_floor_consumer:
            return  # (a replay of what is below the floor)
        if self.ack_policy == "none":
            if dseq > self.delivered_consumer:
                self.delivered_consumer = self.ack_floor_consumer = dseq
            if sseq > self.delivered_stream:
                self.delivered_stream = self.ack_floor_stream = sseq
            return
        if sseq <= self.delivered_stream:
            p = self.pending.get(sseq)
            if p is not None:
                self.pending[sseq] = (p[0], ts)  # (the first delivery's consumer sequence stays)
        else:
            self.pending[sseq] = (dseq, ts)
        self.delivered_consumer = max(self.delivered_consumer, dseq)
        self.delivered_stream = max(self.delivered_stream, sseq)
        if dc > 1:
            if self.max_deliver > 0 and dc > self.max_deliver:
                self.pending.pop(sseq, None)
            if self.redelivered.get(sseq, 0) < dc - 1:
                self.redelivered[sseq] = dc - 1

    def acked(self, dseq: int, sseq: int) -> None:
        self.has_state = True
        if self.ack_policy == "none":
            return
        self.redelivered.pop(sseq, None)
        if dseq <= self.ack_floor_consumer or sseq not in self.pending:
            return
        if self.ack_policy in ("all", "flow_control"):
            self.ack_floor_consumer, self.ack_floor_stream = dseq, sseq
            for seq in [s for s in self.pending if s <= sseq]:
                del self.pending[seq]
                self.redelivered.pop(seq, None)
            return
        p = self.pending.pop(sseq)
        if p[0] > 0 and dseq > p[0]:
            dseq = p[0]
        if not self.pending:
            self.ack_floor_consumer, self.ack_floor_stream = self.delivered_consumer, self.delivered_stream
        elif dseq == self.ack_floor_consumer + 1:
            self.ack_floor_consumer, self.ack_floor_stream = dseq, sseq
            if self.delivered_consumer > dseq:
                for ss in range(sseq + 1, self.delivered_stream + 1):
                    q = self.pending.get(ss)
                    if q is not None:
                        if q[0] > 0:
                            self.ack_floor_consumer, self.ack_floor_stream = q[0] - 1, ss - 1
                        break

    def skipped(self, sseq: int) -> None:
        """A start moved to stream sequence ``sseq`` (nats-server's UpdateStarting(sseq - 1))."""
        self.has_state = True
        if sseq - 1 > self.delivered_stream:
            self.delivered_stream = sseq - 1
            if self.ack_policy == "none":
                self.ack_floor_stream = sseq - 1

    def reset(self, seq: int) -> None:
        """A reset to stream sequence ``seq``: nothing delivered or pending, the start at ``seq``."""
        self.has_state = True
        self.pending.clear()
        self.redelivered.clear()
        self.delivered_consumer = self.ack_floor_consumer = 0
        self.delivered_stream = self.ack_floor_stream = max(seq - 1, 0)

    def restore(self, snap: tuple) -> bool:
        """A consumer snapshot (goconsumerlead.decode_consumer_state) replaces the state, unless it is older
        (as nats-server's Update); GoWireError when it is inconsistent."""
        adflr, asflr, dcon, dstr, pending, redelivered = snap
        if adflr > dcon or asflr > dstr:
            raise gw.GoWireError("consumer snapshot: ack floor above delivered")
        if any(s <= asflr or s > dstr for s in pending):
            raise gw.GoWireError("consumer snapshot: pending sequence out of range")
        if dcon < self.delivered_consumer or asflr < self.ack_floor_stream:
            return False
        self.ack_floor_consumer, self.ack_floor_stream = adflr, asflr
        self.delivered_consumer, self.delivered_stream = dcon, dstr
        self.pending, self.redelivered = dict(pending), dict(redelivered)
        self.has_state = True
        return True


# -- nats-server's consumer state encoding (store.go encodeConsumerState / filestore.go decodeConsumerState) ----

def encode_consumer_state(st: Any, now_s: Optional[int] = None) -> bytes:
    """``st``: a ConsumerReplicaState. Timestamps go down to seconds, relative to now rounded to a second."""
    out = bytearray((STATE_MAGIC, STATE_VERSION))
    asflr, adflr = st.ack_floor_stream, st.ack_floor_consumer
    for v in (adflr, asflr, st.delivered_consumer, st.delivered_stream, len(st.pending)):
        out += put_uvarint(v)
    if st.pending:
        mints = now_s if now_s is not None else int(round(time.time()))
        out += put_varint(mints)
        for sseq, (dseq, ts) in st.pending.items():
            out += put_uvarint(sseq - asflr) + put_uvarint(max(dseq - adflr, 0))
            out += put_varint(mints - ts // 1_000_000_000)
    out += put_uvarint(len(st.redelivered))
    for sseq, n in st.redelivered.items():
        out += put_uvarint(max(sseq - asflr, 0)) + put_uvarint(n)
    return bytes(out)


def decode_consumer_state(buf: bytes) -> tuple[int, int, int, int, dict[int, tuple[int, int]], dict[int, int]]:
    """(ack floor consumer, ack floor stream, delivered consumer, delivered stream, pending, redelivered);
    versions 1 and 2, as nats-server reads them. GoWireError when it is not one."""
    buf = bytes(buf)
    if len(buf) < 2 or buf[0] != STATE_MAGIC or buf[1] not in (1, 2):
        raise gw.GoWireError("not a consumer state")
    version = buf[1]
    try:
        pos = 2
        vals = []
        for _ in range(4):
            v, pos = get_uvarint(buf, pos)
            vals.append(v)
        adflr, asflr, dcon, dstr = vals
        if version == 1:
            if adflr > 1:
                dcon += adflr - 1
            if asflr > 1:
                dstr += asflr - 1
        if asflr >> 63 or dstr >> 63:
            raise gw.GoWireError("consumer state: sequence rolled backwards")
        pending: dict[int, tuple[int, int]] = {}
        redelivered: dict[int, int] = {}
        n, pos = get_uvarint(buf, pos)
        if n:
            mints, pos = get_varint(buf, pos)
            for _ in range(n):
                s, pos = get_uvarint(buf, pos)
                d = 0
                if version == 2:
                    d, pos = get_uvarint(buf, pos)
                ts, pos = get_varint(buf, pos)
                s += asflr
                if s == 0:
                    raise gw.GoWireError("consumer state: pending sequence 0")
                if version == 2:
                    d += adflr
                pending[s] = (d, ((ts + mints) if version == 1 else (mints - ts)) * 1_000_000_000)
        if pos < len(buf):
            n, pos = get_uvarint(buf, pos)
            for _ in range(n):
                s, pos = get_uvarint(buf, pos)
                c, pos = get_uvarint(buf, pos)
                if s > 0 and c > 0:
                    redelivered[s + asflr] = c
    except (IndexError, ValueError) as e:
        raise gw.GoWireError(f"consumer state: {e}") from None
    return adflr, asflr, dcon, dstr, pending, redelivered
