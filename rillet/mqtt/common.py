"""What the parts of an MQTT connection (``rillet.mqtt.conn``) share: CONNACK and MQTT 5 reason codes, the NATS
header an MQTT message carries, the JetStream ack subject reader, the record of one subscription (``_Sub``),
what ``/connz`` reads of a CONNECT, and the MQTT 5 properties kept in the ``Nmqtt-Props`` header."""
from __future__ import annotations

import base64
import json
from typing import Any

from . import codec as C
from .store import MSGS_PREFIX
from .topics import reserved_filter

__all__ = ["parse_ack"]

# CONNACK return codes (3.1.1) and MQTT 5 reason codes
RC311_BAD_VERSION, RC311_ID_REJECTED, RC311_UNAVAILABLE, RC311_BAD_AUTH, RC311_NOT_AUTHORIZED = 1, 2, 3, 4, 5
RC5 = {1: 0x84, 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87}
RC_NORMAL = 0x00
RC_UNSPECIFIED = 0x80
RC_MALFORMED = 0x81
RC_PROTOCOL = 0x82
RC_NOT_AUTHORIZED = 0x87
RC_BAD_AUTH_METHOD = 0x8C
RC_SHUTDOWN = 0x8B
RC_KEEPALIVE = 0x8D
RC_TAKEN_OVER = 0x8E
RC_TOPIC_FILTER_INVALID = 0x8F
RC_TOPIC_NAME_INVALID = 0x90
RC_PI_IN_USE = 0x91
RC_PI_NOT_FOUND = 0x92
RC_RECV_MAX = 0x93
RC_ALIAS_INVALID = 0x94
RC_TOO_LARGE = 0x95
RC_QUOTA = 0x97
RC_QOS_NOT_SUPPORTED = 0x9B
RC_SHARED_NOT_SUPPORTED = 0x9E
RC_NO_SUBSCRIBERS = 0x10
RC_NO_SUB_EXISTED = 0x11

SERVER_ALIAS_MAX = 65535
MAX_PAYLOAD_MQTT = 0xFFFFFFF
PROPS_HDR = "Nmqtt-Props"
_INTERNAL_HDRS = ("Nmqtt-", "Rillet-Mqtt-")


_TOPICS: dict[bytes, bytes] = {}  # subject -> the PUBLISH topic field (length and topic; a cache)
MSGS_PREFIX_B = MSGS_PREFIX.encode()
_HDRS = [b"NATS/1.0\r\nNmqtt-Pub:%d\r\n\r\n" % q for q in range(3)]  # (3.1.1 publishes carry no more)


def parse_ack(reply: str | bytes) -> tuple[int, int, int] | None:
    """(delivery count, stream sequence, pending) of a JetStream ack subject."""
    toks = reply.split(b"." if reply.__class__ is bytes else ".")  # type: ignore[arg-type]
    n = len(toks)
    off = 2 if n == 9 else 4 if n >= 11 else -1
    if off < 0:
        return None
    try:
        return int(toks[off + 2]), int(toks[off + 3]), int(toks[off + 6])
    except (ValueError, IndexError):
        return None


class _Sub:
    """The MQTT side of one subscription (filter) of a connection."""

    __slots__ = ("subject", "topic", "qos", "reserved", "nats_subs", "js_sub", "durable", "opts", "sid", "queue")

    def __init__(self, subject: str, topic: str, qos: int, opts: C.SubOpts, sid: int, queue: str | None) -> None:
        self.subject = subject
        self.topic = topic
        self.qos = qos
        self.reserved = reserved_filter(subject)
        self.nats_subs: list[Any] = []
        self.js_sub: Any = None
        self.durable = ""
        self.opts = opts
        self.sid = sid  # MQTT 5 subscription identifier (0: none)
        self.queue = queue


class _ConnOpts:
    """What /connz reads of a CONNECT (the MQTT client id is the name)."""

    name = ""
    lang = ""
    version = ""
    protocol = 0
    user = ""
    nkey = ""
    jwt = ""
    auth_token = ""
    password = ""
    sig = ""


_EXTRAS: dict[str, dict] = {}  # Nmqtt-Props value -> its decoded form (a publisher's is often the same each time)


def _extra_of(h: dict) -> dict | None:
    """The MQTT 5 properties a message's ``Nmqtt-Props`` header carries (a copy: callers may change it)."""
    v = h.get(PROPS_HDR)
    if not v:
        return None
    raw = v[0]
    d = _EXTRAS.get(raw)
    if d is None:
        try:
            d = json.loads(base64.b64decode(raw))
        except ValueError:
            return None
        if not isinstance(d, dict):
            return None
        if len(_EXTRAS) > 1024:
            _EXTRAS.clear()
        _EXTRAS[raw] = d
    return dict(d)


def _props_from_extra(extra: dict, user_props: list | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name in ("payload_format_indicator", "content_type", "message_expiry_interval", "response_topic"):
        if name in extra:
            props[name] = extra[name]
    if "correlation_data" in extra:
        try:
            props["correlation_data"] = base64.b64decode(extra["correlation_data"])
        except ValueError:
            pass
    if user_props:
        props["user_property"] = user_props
    return props
