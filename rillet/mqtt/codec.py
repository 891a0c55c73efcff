"""MQTT 3.1.1 and 5.0 packets: a sans-IO decoder and the encoders (no sockets, no server state).

``Decoder.feed(data)`` takes bytes as they arrive (split anywhere) and returns the whole packets they
complete, as the dataclasses below. A malformed packet raises ``MalformedPacket`` (or ``ProtocolViolation``)
carrying the MQTT 5 reason code to send before closing; nothing is returned for a packet that fails.
The decoder knows the protocol level once it has decoded a CONNECT (``Decoder.version``): MQTT 5 packets
carry properties and reason codes, 3.1.1 packets have fixed remaining lengths where the specification
says so (nats-server checks those exactly).

``encode(packet, version)`` turns any packet back into bytes (the server sends CONNACK, PUBLISH, the
acknowledgements, SUBACK, UNSUBACK, PINGRESP, DISCONNECT and AUTH; the tests send the rest).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBSCRIBE", "SUBACK",
    "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH",
    "MQTTError", "MalformedPacket", "ProtocolViolation", "Decoder", "encode", "encode_varint",
    "Connect", "ConnAck", "Publish", "Ack", "Subscribe", "SubAck", "Unsubscribe", "UnsubAck",
    "PingReq", "PingResp", "Disconnect", "Auth", "Will", "SubOpts", "PROPS", "MAX_REMAINING",
]

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = 8, 9, 10, 11, 12, 13, 14, 15

NAMES = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP",
         8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
         14: "DISCONNECT", 15: "AUTH"}

MAX_REMAINING = 268_435_455  # the largest remaining length four bytes can say

# the fixed-header flags nibble each packet type must carry (PUBLISH: its own flags)
_FIXED_FLAGS = {CONNECT: 0, CONNACK: 0, PUBACK: 0, PUBREC: 0, PUBREL: 2, PUBCOMP: 0, SUBSCRIBE: 2,
                SUBACK: 0, UNSUBSCRIBE: 2, UNSUBACK: 0, PINGREQ: 0, PINGRESP: 0, DISCONNECT: 0, AUTH: 0}

# MQTT 5 reason codes used by the decoder
RC_MALFORMED = 0x81
RC_PROTOCOL_ERROR = 0x82
RC_TOPIC_NAME_INVALID = 0x90
RC_PACKET_TOO_LARGE = 0x95
RC_UNSUPPORTED_VERSION = 0x84
RC_CLIENT_ID_INVALID = 0x85
RC_BAD_USER_PASS = 0x86
RC_QOS_NOT_SUPPORTED = 0x9B


class MQTTError(Exception):
    """A packet the server cannot accept. ``reason``: the MQTT 5 reason code to close with;
    ``connack``: for a CONNECT, the 3.1.1 CONNACK return code to answer with first (0 = none)."""

    def __init__(self, msg: str, reason: int = RC_MALFORMED, connack: int = 0) -> None:
        super().__init__(msg)
        self.reason = reason
        self.connack = connack


class MalformedPacket(MQTTError):
    pass


class ProtocolViolation(MQTTError):
    def __init__(self, msg: str, reason: int = RC_PROTOCOL_ERROR, connack: int = 0) -> None:
        super().__init__(msg, reason, connack)


# ---- properties (MQTT 5, section 2.2.2.2) ------------------------------------------------------------

BYTE, U16, U32, VARINT, UTF8, BINARY, PAIR = range(7)

# id -> (name, type)
PROPS: dict[int, tuple[str, int]] = {
    0x01: ("payload_format_indicator", BYTE),
    0x02: ("message_expiry_interval", U32),
    0x03: ("content_type", UTF8),
    0x08: ("response_topic", UTF8),
    0x09: ("correlation_data", BINARY),
    0x0B: ("subscription_identifier", VARINT),
    0x11: ("session_expiry_interval", U32),
    0x12: ("assigned_client_identifier", UTF8),
    0x13: ("server_keep_alive", U16),
    0x15: ("authentication_method", UTF8),
    0x16: ("authentication_data", BINARY),
    0x17: ("request_problem_information", BYTE),
    0x18: ("will_delay_interval", U32),
    0x19: ("request_response_information", BYTE),
    0x1A: ("response_information", UTF8),
    0x1C: ("server_reference", UTF8),
    0x1F: ("reason_string", UTF8),
    0x21: ("receive_maximum", U16),
    0x22: ("topic_alias_maximum", U16),
    0x23: ("topic_alias", U16),
    0x24: ("maximum_qos", BYTE),
    0x25: ("retain_available", BYTE),
    0x26: ("user_property", PAIR),
    0x27: ("maximum_packet_size", U32),
    0x28: ("wildcard_subscription_available", BYTE),
    0x29: ("subscription_identifier_available", BYTE),
    0x2A: ("shared_subscription_available", BYTE),
}
PROP_IDS = {name: pid for pid, (name, _t) in PROPS.items()}

# which properties each packet may carry ("will": the will properties in CONNECT's payload)
_ALLOWED: dict[Any, frozenset[int]] = {
    CONNECT: frozenset({0x11, 0x15, 0x16, 0x17, 0x19, 0x21, 0x22, 0x26, 0x27}),
    "will": frozenset({0x01, 0x02, 0x03, 0x08, 0x09, 0x18, 0x26}),
    CONNACK: frozenset({0x11, 0x12, 0x13, 0x15, 0x16, 0x1A, 0x1C, 0x1F, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27,
                        0x28, 0x29, 0x2A}),
    PUBLISH: frozenset({0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x23, 0x26}),
    PUBACK: frozenset({0x1F, 0x26}), PUBREC: frozenset({0x1F, 0x26}), PUBREL: frozenset({0x1F, 0x26}),
    PUBCOMP: frozenset({0x1F, 0x26}),
    SUBSCRIBE: frozenset({0x0B, 0x26}), SUBACK: frozenset({0x1F, 0x26}),
    UNSUBSCRIBE: frozenset({0x26}), UNSUBACK: frozenset({0x1F, 0x26}),
    DISCONNECT: frozenset({0x11, 0x1C, 0x1F, 0x26}),
    AUTH: frozenset({0x15, 0x16, 0x1F, 0x26}),
}
_MULTI = frozenset({0x26, 0x0B})  # may appear more than once (subscription identifiers: PUBLISH only)


def encode_varint(n: int) -> bytes:
    if n < 0 or n > MAX_REMAINING:
        raise ValueError(f"variable byte integer out of range: {n}")
    return base128(n)


def base128(n: int) -> bytes:
    """``n`` (>= 0, any size) in 7-bit groups, low first, the high bit saying another follows: MQTT's variable
    byte integer without its four-byte limit, and protobuf's varint (Sparkplug B)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _utf8(b: bytes, what: str) -> str:
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket(f"invalid utf8 for {what} {bytes(b)!r}") from None
    if "\x00" in s:
        raise MalformedPacket(f"invalid null character in {what} {s!r}")
    # UTF-16 surrogates cannot appear after a strict decode; the spec's other forbidden code points
    # (U+0001..U+001F, U+007F..U+009F) are "should not": accepted, as nats-server does
    return s


class _Reader:
    """Reads the fields of one packet body (bytes), raising MalformedPacket past its end."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def more(self) -> bool:
        return self.pos < self.end

    def byte(self, what: str) -> int:
        if self.pos >= self.end:
            raise MalformedPacket(f"error reading {what}: EOF")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def u16(self, what: str) -> int:
        if self.pos + 2 > self.end:
            raise MalformedPacket(f"error reading {what}: EOF")
        v = (self.buf[self.pos] << 8) | self.buf[self.pos + 1]
        self.pos += 2
        return v

    def u32(self, what: str) -> int:
        if self.pos + 4 > self.end:
            raise MalformedPacket(f"error reading {what}: EOF")
        v = struct.unpack_from(">I", self.buf, self.pos)[0]
        self.pos += 4
        return v

    def varint(self, what: str) -> int:
        mult, v = 1, 0
        for i in range(4):
            b = self.byte(what)
            v += (b & 0x7F) * mult
            if not b & 0x80:
                if i and b == 0:  # (a non-minimal encoding is still a valid number: accepted)
                    pass
                return v
            mult <<= 7
        raise MalformedPacket("malformed variable int")

    def binary(self, what: str) -> bytes:
        n = self.u16(what)
        if self.pos + n > self.end:
            raise MalformedPacket(f"error reading {what}: unexpected EOF")
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def string(self, what: str) -> str:
        return _utf8(self.binary(what), what)

    def rest(self) -> bytes:
        b = bytes(self.buf[self.pos:self.end])
        self.pos = self.end
        return b

    def props(self, kind: Any) -> dict[str, Any]:
        """A properties block: {name: value}; user properties as a list of (key, value), subscription
        identifiers (in PUBLISH) as a list."""
        n = self.varint("properties length")
        stop = self.pos + n
        if stop > self.end:
            raise MalformedPacket("properties length past the end of the packet")
        allowed = _ALLOWED[kind]
        out: dict[str, Any] = {}
        saved_end = self.end
        self.end = stop
        try:
            while self.pos < stop:
                pid = self.varint("property identifier")
                spec = PROPS.get(pid)
                if spec is None or pid not in allowed:
                    raise ProtocolViolation(f"property 0x{pid:02x} not allowed in {NAMES.get(kind, kind)}"
                                            if isinstance(kind, int) else f"property 0x{pid:02x} not allowed in "
                                            f"will properties", RC_MALFORMED)
                name, t = spec
                if t == BYTE:
                    v: Any = self.byte(name)
                elif t == U16:
                    v = self.u16(name)
                elif t == U32:
                    v = self.u32(name)
                elif t == VARINT:
                    v = self.varint(name)
                elif t == UTF8:
                    v = self.string(name)
                elif t == BINARY:
                    v = self.binary(name)
                else:
                    v = (self.string(name + " key"), self.string(name + " value"))
                if pid in _MULTI:
                    out.setdefault(name, []).append(v)
                elif name in out:
                    raise ProtocolViolation(f"property {name} included more than once")
                else:
                    out[name] = v
        finally:
            self.end = saved_end
        _check_prop_values(out)
        return out


def _check_prop_values(p: dict[str, Any]) -> None:
    for name in ("payload_format_indicator", "request_problem_information", "request_response_information",
                 "maximum_qos", "retain_available", "wildcard_subscription_available",
                 "subscription_identifier_available", "shared_subscription_available"):
        if name in p and p[name] not in (0, 1):
            raise ProtocolViolation(f"invalid value {p[name]} for {name}")
    if p.get("receive_maximum") == 0:
        raise ProtocolViolation("receive maximum cannot be 0")
    if p.get("maximum_packet_size") == 0:
        raise ProtocolViolation("maximum packet size cannot be 0")
    if p.get("topic_alias") == 0:
        raise ProtocolViolation("topic alias cannot be 0", 0x94)
    for sid in p.get("subscription_identifier", ()):
        if sid == 0:
            raise ProtocolViolation("subscription identifier cannot be 0")


def encode_props(props: dict[str, Any] | None) -> bytes:
    out = bytearray()
    for name, v in (props or {}).items():
        pid = PROP_IDS[name]
        t = PROPS[pid][1]
        vals = v if pid in _MULTI else [v]
        for x in vals:
            out += encode_varint(pid)
            if t == BYTE:
                out.append(x)
            elif t == U16:
                out += struct.pack(">H", x)
            elif t == U32:
                out += struct.pack(">I", x)
            elif t == VARINT:
                out += encode_varint(x)
            elif t == UTF8:
                out += _bin(x.encode())
            elif t == BINARY:
                out += _bin(x)
            else:
                out += _bin(x[0].encode()) + _bin(x[1].encode())
    return encode_varint(len(out)) + bytes(out)


def _bin(b: bytes) -> bytes:
    if len(b) > 0xFFFF:
        raise ValueError("string or binary field longer than 65535 bytes")
    return struct.pack(">H", len(b)) + b


# ---- packets --------------------------------------------------------------------------------------------

@dataclass
class Will:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    props: dict[str, Any] = field(default_factory=dict)


@dataclass
class Connect:
    client_id: str = ""
    version: int = 4  # protocol level: 4 = 3.1.1, 5 = 5.0
    clean: bool = True  # clean session (3.1.1) / clean start (5)
    keepalive: int = 0
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    props: dict[str, Any] = field(default_factory=dict)
    proto_name: str = "MQTT"
    type = CONNECT


@dataclass
class ConnAck:
    session_present: bool = False
    rc: int = 0
    props: dict[str, Any] = field(default_factory=dict)
    type = CONNACK


@dataclass
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    pi: int = 0
    props: dict[str, Any] = field(default_factory=dict)
    type = PUBLISH


@dataclass
class Ack:
    """PUBACK, PUBREC, PUBREL or PUBCOMP (``kind``)."""
    kind: int
    pi: int
    rc: int = 0
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> int:  # type: ignore[override]
        return self.kind


@dataclass
class SubOpts:
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass
class Subscribe:
    pi: int
    filters: list[tuple[str, SubOpts]]
    props: dict[str, Any] = field(default_factory=dict)
    type = SUBSCRIBE


@dataclass
class SubAck:
    pi: int
    codes: list[int]
    props: dict[str, Any] = field(default_factory=dict)
    type = SUBACK


@dataclass
class Unsubscribe:
    pi: int
    filters: list[str]
    props: dict[str, Any] = field(default_factory=dict)
    type = UNSUBSCRIBE


@dataclass
class UnsubAck:
    pi: int
    codes: list[int] = field(default_factory=list)  # MQTT 5 only
    props: dict[str, Any] = field(default_factory=dict)
    type = UNSUBACK


@dataclass
class PingReq:
    type = PINGREQ


@dataclass
class PingResp:
    type = PINGRESP


@dataclass
class Disconnect:
    rc: int = 0
    props: dict[str, Any] = field(default_factory=dict)
    type = DISCONNECT


@dataclass
class Auth:
    rc: int = 0
    props: dict[str, Any] = field(default_factory=dict)
    type = AUTH


Packet = Union[Connect, ConnAck, Publish, Ack, Subscribe, SubAck, Unsubscribe, UnsubAck, PingReq, PingResp,
               Disconnect, Auth]


# ---- decoding -----------------------------------------------------------------------------------------

class Decoder:
    """Incremental decoder of the packets one side receives.

    ``max_packet``: the largest whole packet accepted (fixed header included; 0 = the protocol's limit);
    a larger one raises MalformedPacket with reason 0x95 as soon as its length is known.
    """

    def __init__(self, max_packet: int = 0, server: bool = True) -> None:
        self.buf = bytearray()
        self.version = 0  # 0 until CONNECT (the server side) or set by the owner
        self.max_packet = max_packet
        self.server = server

    def feed(self, data: bytes) -> list[Packet]:
        if data:
            self.buf += data
        out: list[Packet] = []
        buf = self.buf
        pos = 0
        n = len(buf)
        try:
            while pos < n:
                first = buf[pos]
                # remaining length: at most 4 bytes
                mult, rl, i = 1, 0, pos + 1
                complete = False
                while i < n:
                    b = buf[i]
                    i += 1
                    rl += (b & 0x7F) * mult
                    if not b & 0x80:
                        complete = True
                        break
                    mult <<= 7
                    if i - pos - 1 >= 4:
                        raise MalformedPacket("malformed variable int")
                if not complete:
                    break
                total = (i - pos) + rl
                if self.max_packet and total > self.max_packet:
                    raise MalformedPacket(f"packet of {total} bytes exceeds the maximum of {self.max_packet}",
                                          RC_PACKET_TOO_LARGE)
                if i + rl > n:
                    # the header is checked before the body arrives: a bad first byte fails at once
                    self._check_header(first, rl)
                    break
                body = bytes(buf[i:i + rl])
                pos = i + rl
                if first & 0xF0 == 0x30 and self.version == 4 and first & 6 != 6 and rl >= 2:
                    out.append(self._publish311(first, body))
                else:
                    out.append(self.decode_one(first, body))
        finally:
            del buf[:pos]
        return out

    @staticmethod
    def _publish311(first: int, body: bytes) -> "Publish":
        """A 3.1.1 PUBLISH, the common packet, read without the general field reader (same checks)."""
        tl = (body[0] << 8) | body[1]
        end = 2 + tl
        if end > len(body):
            raise MalformedPacket("error reading topic: unexpected EOF")
        tb = body[2:end]
        try:
            topic = tb.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedPacket(f"invalid utf8 for topic {tb!r}") from None
        qos = (first >> 1) & 3
        pi = 0
        if qos:
            if end + 2 > len(body):
                raise MalformedPacket("error reading packet identifier: EOF")
            pi = (body[end] << 8) | body[end + 1]
            end += 2
            if pi == 0:
                raise ProtocolViolation(f"with QoS={qos}, packet identifier cannot be 0")
        if not topic:
            raise MalformedPacket("topic cannot be empty", RC_TOPIC_NAME_INVALID)
        if "\x00" in topic:
            raise MalformedPacket(f"invalid null character in topic {topic!r}")
        if "+" in topic or "#" in topic:
            raise MalformedPacket(f"wildcards not allowed in publish's topic: {topic!r}", RC_TOPIC_NAME_INVALID)
        return Publish(topic, body[end:], qos, bool(first & 1), bool(first & 8), pi)

    def _check_header(self, first: int, rl: int) -> None:
        pt, flags = first >> 4, first & 0x0F
        if pt == 0 or (pt == AUTH and self.version and self.version < 5):
            raise MalformedPacket(f"received unknown packet type {pt}")
        if pt == PUBLISH:
            if (flags >> 1) & 3 == 3:
                raise MalformedPacket("QoS=3 is invalid in MQTT")
        elif flags != _FIXED_FLAGS[pt]:
            raise MalformedPacket(f"invalid fixed header flags {flags:x} for packet type {first & 0xF0:x}")
        if self.version < 5 or pt in (PINGREQ, PINGRESP):
            fixed = {PUBACK: 2, PUBREC: 2, PUBREL: 2, PUBCOMP: 2, PINGREQ: 0, PINGRESP: 0, UNSUBACK: 2,
                     CONNACK: 2}.get(pt)
            if pt == DISCONNECT and self.version < 5:
                fixed = 0
            if fixed is not None and rl != fixed:
                raise MalformedPacket(f"invalid remaining length {rl} for packet type {first & 0xF0:x}")

    def decode_one(self, first: int, body: bytes) -> Packet:
        self._check_header(first, len(body))
        pt, flags = first >> 4, first & 0x0F
        r = _Reader(body)
        v5 = self.version >= 5
        if pt == CONNECT:
            p: Packet = self._connect(r)
        elif pt == PUBLISH:
            p = self._publish(r, flags, v5)
        elif pt in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            pi = r.u16("packet identifier")
            if pi == 0:
                raise ProtocolViolation("packet identifier cannot be 0")
            rc, props = 0, {}
            if v5 and r.more():
                rc = r.byte("reason code")
                if r.more():
                    props = r.props(pt)
            p = Ack(pt, pi, rc, props)
        elif pt == SUBSCRIBE:
            p = self._subscribe(r, v5)
        elif pt == UNSUBSCRIBE:
            pi = r.u16("packet identifier")
            if pi == 0:
                raise ProtocolViolation("packet identifier cannot be 0")
            props = r.props(UNSUBSCRIBE) if v5 else {}
            filters = []
            while r.more():
                f = r.string("topic filter")
                if not f:
                    raise ProtocolViolation("topic filter cannot be empty")
                filters.append(f)
            if not filters:
                raise ProtocolViolation("unsubscribe protocol must contain at least 1 topic filter")
            p = Unsubscribe(pi, filters, props)
        elif pt == PINGREQ:
            p = PingReq()
        elif pt == PINGRESP:
            p = PingResp()
        elif pt == DISCONNECT:
            rc, props = 0, {}
            if v5 and r.more():
                rc = r.byte("reason code")
                if r.more():
                    props = r.props(DISCONNECT)
            p = Disconnect(rc, props)
        elif pt == AUTH:
            rc, props = 0, {}
            if r.more():
                rc = r.byte("reason code")
                if r.more():
                    props = r.props(AUTH)
            p = Auth(rc, props)
        elif pt == CONNACK:
            ack = r.byte("connack flags")
            if ack & 0xFE:
                raise MalformedPacket("connack flags reserved bits set")
            rc = r.byte("return code")
            props = r.props(CONNACK) if v5 else {}
            p = ConnAck(bool(ack & 1), rc, props)
        elif pt == SUBACK:
            pi = r.u16("packet identifier")
            props = r.props(SUBACK) if v5 else {}
            p = SubAck(pi, list(r.rest()), props)
        elif pt == UNSUBACK:
            pi = r.u16("packet identifier")
            props = r.props(UNSUBACK) if v5 else {}
            p = UnsubAck(pi, list(r.rest()) if v5 else [], props)
        else:  # pragma: no cover - every type is handled above
            raise MalformedPacket(f"received unknown packet type {pt}")
        if r.more() and pt not in (PUBLISH,):
            raise MalformedPacket(f"{NAMES[pt]} packet has {r.end - r.pos} bytes past its fields")
        return p

    def _connect(self, r: _Reader) -> Connect:
        name_b = r.binary("protocol name")
        if name_b != b"MQTT":
            if name_b == b"MQIsdp":
                raise MalformedPacket(f"older protocol {name_b.decode()!r} not supported", RC_UNSUPPORTED_VERSION,
                                      connack=0x01)
            raise MalformedPacket(f"expected connect packet with protocol name \"MQTT\", got {name_b!r}",
                                  RC_PROTOCOL_ERROR)
        level = r.byte("protocol level")
        if level not in (4, 5):
            raise ProtocolViolation(f"unacceptable protocol version of {level}", RC_UNSUPPORTED_VERSION,
                                    connack=0x01)
        v5 = level == 5
        flags = r.byte("flags")
        if flags & 0x01:
            raise MalformedPacket("connect flags reserved bit not set to 0")
        wqos = (flags >> 3) & 3
        wretain = bool(flags & 0x20)
        has_will = bool(flags & 0x04)
        if not has_will:
            if wqos:
                raise MalformedPacket(f"if Will flag is set to 0, Will QoS must be 0 too, got {wqos}")
            if wretain:
                raise MalformedPacket("if Will flag is set to 0, Will Retain flag must be 0 too")
        elif wqos == 3:
            raise MalformedPacket(f"if Will flag is set to 1, Will QoS can be 0, 1 or 2, got {wqos}")
        has_user = bool(flags & 0x80)
        has_pass = bool(flags & 0x40)
        if has_pass and not has_user and not v5:
            raise MalformedPacket("password flag set but username flag is not")
        keepalive = r.u16("keep alive")
        props = r.props(CONNECT) if v5 else {}
        cid_b = r.binary("client ID")
        try:
            cid = _utf8(cid_b, "client ID")
        except MQTTError as e:
            raise MalformedPacket(str(e), RC_CLIENT_ID_INVALID, connack=0x02) from None
        will = None
        if has_will:
            wprops = r.props("will") if v5 else {}
            wt = r.string("Will topic")
            if not wt:
                raise MalformedPacket("empty Will topic not allowed", RC_TOPIC_NAME_INVALID)
            will = Will(wt, r.binary("Will message"), wqos, wretain, wprops)
        user = None
        if has_user:
            ub = r.binary("user name")
            try:
                user = _utf8(ub, "user name")
            except MQTTError as e:
                raise MalformedPacket(str(e), RC_BAD_USER_PASS, connack=0x04) from None
        pw = r.binary("password") if has_pass else None
        self.version = level
        return Connect(cid, level, bool(flags & 0x02), keepalive, will, user, pw, props)

    def _publish(self, r: _Reader, flags: int, v5: bool) -> Publish:
        qos = (flags >> 1) & 3
        topic = r.string("topic")
        pi = 0
        if qos:
            pi = r.u16("packet identifier")
            if pi == 0:
                raise ProtocolViolation(f"with QoS={qos}, packet identifier cannot be 0")
        props = r.props(PUBLISH) if v5 else {}
        if "subscription_identifier" in props and self.server:
            raise ProtocolViolation("a PUBLISH from a client cannot carry a subscription identifier")
        if not topic and not (v5 and "topic_alias" in props):
            raise MalformedPacket("topic cannot be empty", RC_TOPIC_NAME_INVALID)
        if "+" in topic or "#" in topic:
            raise MalformedPacket(f"wildcards not allowed in publish's topic: {topic!r}", RC_TOPIC_NAME_INVALID)
        return Publish(topic, r.rest(), qos, bool(flags & 1), bool(flags & 8), pi, props)

    def _subscribe(self, r: _Reader, v5: bool) -> Subscribe:
        pi = r.u16("packet identifier")
        if pi == 0:
            raise ProtocolViolation("packet identifier cannot be 0")
        props = r.props(SUBSCRIBE) if v5 else {}
        if len(props.get("subscription_identifier", ())) > 1:
            raise ProtocolViolation("more than one subscription identifier")
        filters: list[tuple[str, SubOpts]] = []
        while r.more():
            f = r.string("topic filter")
            if not f:
                raise ProtocolViolation("topic filter cannot be empty")
            o = r.byte("QoS")
            qos = o & 3
            if qos == 3:
                raise MalformedPacket(f"subscribe QoS value must be 0, 1 or 2, got {qos}")
            if v5:
                if o & 0xC0:
                    raise MalformedPacket("subscription options reserved bits set")
                rh = (o >> 4) & 3
                if rh == 3:
                    raise ProtocolViolation("retain handling value 3 is invalid")
                opts = SubOpts(qos, bool(o & 4), bool(o & 8), rh)
            else:
                if o & 0xFC:
                    raise MalformedPacket(f"subscribe requested QoS byte has reserved bits set: {o:#x}")
                opts = SubOpts(qos)
            filters.append((f, opts))
        if not filters:
            raise ProtocolViolation("subscribe protocol must contain at least 1 topic filter")
        return Subscribe(pi, filters, props)


# ---- encoding -----------------------------------------------------------------------------------------

def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + encode_varint(len(body)) + body


def encode(p: Packet, version: int = 4) -> bytes:
    """The bytes of ``p`` as protocol level ``version`` (4 or 5) says."""
    v5 = version >= 5
    t = p.type
    if t == CONNECT:
        assert isinstance(p, Connect)
        flags = 0x02 if p.clean else 0
        w = p.will
        if w is not None:
            flags |= 0x04 | (w.qos << 3) | (0x20 if w.retain else 0)
        if p.username is not None:
            flags |= 0x80
        if p.password is not None:
            flags |= 0x40
        body = _bin(p.proto_name.encode()) + bytes([p.version, flags]) + struct.pack(">H", p.keepalive)
        if p.version >= 5:
            body += encode_props(p.props)
        body += _bin(p.client_id.encode())
        if w is not None:
            if p.version >= 5:
                body += encode_props(w.props)
            body += _bin(w.topic.encode()) + _bin(w.payload)
        if p.username is not None:
            body += _bin(p.username.encode())
        if p.password is not None:
            body += _bin(p.password)
        return _packet(0x10, body)
    if t == CONNACK:
        assert isinstance(p, ConnAck)
        body = bytes([1 if (p.session_present and p.rc == 0) else 0, p.rc])
        if v5:
            body += encode_props(p.props)
        return _packet(0x20, body)
    if t == PUBLISH:
        assert isinstance(p, Publish)
        first = 0x30 | (p.qos << 1) | (1 if p.retain else 0) | (8 if p.dup else 0)
        body = _bin(p.topic.encode())
        if p.qos:
            body += struct.pack(">H", p.pi)
        if v5:
            body += encode_props(p.props)
        return _packet(first, body + p.payload)
    if t in (PUBACK, PUBREC, PUBREL, PUBCOMP):
        assert isinstance(p, Ack)
        body = struct.pack(">H", p.pi)
        if v5 and (p.rc or p.props):
            body += bytes([p.rc])
            if p.props:
                body += encode_props(p.props)
        return _packet((t << 4) | (2 if t == PUBREL else 0), body)
    if t == SUBSCRIBE:
        assert isinstance(p, Subscribe)
        body = struct.pack(">H", p.pi)
        if v5:
            body += encode_props(p.props)
        for f, o in p.filters:
            b = o.qos
            if v5:
                b |= (4 if o.no_local else 0) | (8 if o.retain_as_published else 0) | (o.retain_handling << 4)
            body += _bin(f.encode()) + bytes([b])
        return _packet(0x82, body)
    if t == SUBACK:
        assert isinstance(p, SubAck)
        body = struct.pack(">H", p.pi) + (encode_props(p.props) if v5 else b"") + bytes(p.codes)
        return _packet(0x90, body)
    if t == UNSUBSCRIBE:
        assert isinstance(p, Unsubscribe)
        body = struct.pack(">H", p.pi) + (encode_props(p.props) if v5 else b"")
        for f in p.filters:
            body += _bin(f.encode())
        return _packet(0xA2, body)
    if t == UNSUBACK:
        assert isinstance(p, UnsubAck)
        body = struct.pack(">H", p.pi)
        if v5:
            body += encode_props(p.props) + bytes(p.codes)
        return _packet(0xB0, body)
    if t == PINGREQ:
        return b"\xc0\x00"
    if t == PINGRESP:
        return b"\xd0\x00"
    if t == DISCONNECT:
        assert isinstance(p, Disconnect)
        if not v5 or (p.rc == 0 and not p.props):
            return b"\xe0\x00"
        body = bytes([p.rc]) + (encode_props(p.props) if p.props else b"")
        return _packet(0xE0, body)
    if t == AUTH:
        assert isinstance(p, Auth)
        return _packet(0xF0, bytes([p.rc]) + encode_props(p.props))
    raise ValueError(f"cannot encode packet type {t}")
