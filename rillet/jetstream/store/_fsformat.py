"""The file store's on-disk formats: block records and the state log (see ``filestore``'s docstring),
with their encoders and checked parsers."""

from __future__ import annotations

import struct
import zlib
from typing import Any

from .base import StoreError

BLOCK_MAGIC = b"RILBLK01"
LOG_MAGIC = b"RILSTL01"
CONSUMER_MAGIC = b"RILCNS01"
FORMAT_VERSION = 1

_REC = struct.Struct("<BBHIQqqII")  # type, flags, subj_len, total, seq, ts, ttl, hdr_len, data_len
_REC_LEN = _REC.size  # 40
_CRC = struct.Struct("<I")
_OVERHEAD = _REC_LEN + 4
T_MSG = 0x4D  # 'M'
T_ERASED = 0x45  # 'E'
F_COMPRESSED = 1
F_BATCH = 2  # more records of the same atomic batch follow this one
_MAX_REC = 1 << 31

_LOGH = struct.Struct("<BxxxI")
_U64 = struct.Struct("<Q")
_LAST = struct.Struct("<Qq")
L_FIRST = 0x46  # 'F'
L_LAST = 0x4C  # 'L'
L_DEL = 0x44  # 'D'
L_TRUNC = 0x54  # 'T': u64 seq + i64 ts: sequences above are void (truncate)


def _snappy() -> Any:
    try:
        import cramjam
    except ImportError as e:  # pragma: no cover - dependency missing
        raise StoreError("s2 compression needs the 'cramjam' package") from e
    return cramjam.snappy


def _safe_name(name: str) -> str:
    if (
        name
        and name not in (".", "..")
        and not name.startswith("x-")
        and all(c.isalnum() or c in "-_=+@~^%$#!," for c in name)
        and len(name) < 200
    ):
        return name
    raw = name.encode("utf-8", "surrogateescape")  # (a name from a subject may hold bytes that are not UTF-8)
    return "x-" + zlib.crc32(raw).to_bytes(4, "big").hex() + raw.hex()[:200]


def _encode_log(kind: int, payload: bytes) -> bytes:
    head = _LOGH.pack(kind, _LOGH.size + len(payload) + 4)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + payload + _CRC.pack(crc)


def _parse_log_record(mv: memoryview, pos: int, end: int) -> tuple[int, int, int, int] | None:
    """(kind, payload offset, payload length, total) of a valid state log record, or None."""
    if end - pos < _LOGH.size + 4:
        return None
    kind, total = _LOGH.unpack_from(mv, pos)
    plen = total - _LOGH.size - 4
    if plen < 0 or pos + total > end:
        return None
    if kind in (L_FIRST,):
        if plen != 8:
            return None
    elif kind in (L_LAST, L_TRUNC):
        if plen != 16:
            return None
    elif kind == L_DEL:
        if plen % 8 or not plen:
            return None
    else:
        return None
    if mv[pos + 1] or mv[pos + 2] or mv[pos + 3]:
        return None
    (crc,) = _CRC.unpack_from(mv, pos + total - 4)
    if zlib.crc32(mv[pos : pos + total - 4]) != crc:
        return None
    return kind, pos + _LOGH.size, plen, total


def _parse_record(mv: memoryview, pos: int, end: int) -> tuple | None:
    """Validate the record at pos; returns the header tuple or None."""
    if end - pos < _OVERHEAD:
        return None
    t = mv[pos]
    if t != T_MSG and t != T_ERASED:
        return None
    h = _REC.unpack_from(mv, pos)
    total = h[3]
    if total < _OVERHEAD or pos + total > end:
        return None
    if t == T_MSG:
        plen = total - _OVERHEAD - h[2]
        if plen < 0 or (not (h[1] & F_COMPRESSED) and plen != h[7] + h[8]):
            return None
    (crc,) = _CRC.unpack_from(mv, pos + total - 4)
    if zlib.crc32(mv[pos : pos + total - 4]) != crc:
        return None
    return h
