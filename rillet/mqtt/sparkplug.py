"""Sparkplug B, as a "Sparkplug Aware" MQTT server (nats-server 2.11):

* a BIRTH (``spBv1.0/<group>/NBIRTH/<edge>`` or ``.../DBIRTH/<edge>/<device>``), published without the retain
  flag as the specification wants, is also kept as the retained message of ``$sparkplug/certificates/<topic>``
  (and sent there live); one published with the retain flag is not retained at all;
* a delivery on a certificate topic carries the retain flag;
* a DEATH (``NDEATH``/``DDEATH``) is delivered with its payload's timestamp (protobuf field 1, milliseconds
  since the epoch) set to the time of delivery, added when missing; a payload that is not a readable protobuf
  message is delivered as it is.
"""
from __future__ import annotations

import time

from .codec import base128

__all__ = ["CERT_PREFIX", "kind", "death_with_timestamp"]

NAMESPACE = "spBv1.0/"
CERT_PREFIX = "$sparkplug/certificates/"


def kind(topic: str) -> tuple[bool, bool, bool]:
    """(birth, death, certificate) of a topic."""
    cert = topic.startswith(CERT_PREFIX)
    if cert:
        topic = topic[len(CERT_PREFIX):]
    if not topic.startswith(NAMESPACE):
        return False, False, False
    parts = topic[len(NAMESPACE):].split("/")
    if not 3 <= len(parts) <= 4:
        return False, False, False
    t = parts[1]
    if t in ("NBIRTH", "DBIRTH"):
        return True, False, cert
    if t in ("NDEATH", "DDEATH"):
        return False, True, cert
    return False, False, False


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("bad varint")
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        if not x & 0x80:
            return v, i
        shift += 7


def death_with_timestamp(msg: bytes, now_ms: int | None = None) -> bytes:
    ts = base128(1 << 3) + base128(int(time.time() * 1000) if now_ms is None else now_ms)
    out = bytearray()
    i = 0
    n = len(msg)
    try:
        while i < n:
            start = i
            key, i = _varint(msg, i)
            field, wt = key >> 3, key & 7
            if wt == 0:
                _v, i = _varint(msg, i)
            elif wt == 1:
                i += 8
            elif wt == 2:
                ln, i = _varint(msg, i)
                i += ln
            elif wt == 5:
                i += 4
            else:
                raise ValueError("unknown wire type")
            if i > n:
                raise ValueError("truncated field")
            if field == 1 and wt == 0:
                return bytes(out) + ts + msg[i:]
            out += msg[start:i]
    except ValueError:
        return msg
    return bytes(out) + ts
