"""NATS message headers (``NATS/1.0[ status [description]]\\r\\nKey: Value\\r\\n...\\r\\n\\r\\n``) as bytes.

JetStream reads a few headers on every stored message (``Nats-Msg-Id``, ``Nats-Expected-*``, ``Nats-Rollup``,
``Nats-TTL``) and writes others (``Nats-Stream``, ``Nats-Sequence``...). Like nats-server, lookups are exact
(case-sensitive) key matches on the raw block, without building a dict for the common case.
"""
from __future__ import annotations

HDR_LINE = b"NATS/1.0\r\n"
_CRLF = b"\r\n"

# header names
MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
TTL = "Nats-TTL"
MARKER_REASON = "Nats-Marker-Reason"
STREAM = "Nats-Stream"
SUBJECT = "Nats-Subject"
SEQUENCE = "Nats-Sequence"
TIMESTAMP = "Nats-Time-Stamp"
LAST_SEQUENCE = "Nats-Last-Sequence"
NUM_PENDING = "Nats-Num-Pending"
UP_TO_SEQUENCE = "Nats-UpTo-Sequence"
REQUIRED_API_LEVEL = "Nats-Required-Api-Level"


def get_header(hdr: bytes, key: str) -> str | None:
    """The first value of ``key`` in a header block, or None."""
    if not hdr:
        return None
    k = b"\r\n" + key.encode() + b":"
    i = hdr.find(k)
    if i < 0:
        return None
    start = i + len(k)
    end = hdr.find(_CRLF, start)
    if end < 0:
        end = len(hdr)
    return hdr[start:end].strip().decode("utf-8", "replace")


def parse_headers(hdr: bytes) -> tuple[int, str, dict[str, list[str]]]:
    """(status, description, {key: [values]}) of a header block; status 0 when the first line has none."""
    if not hdr:
        return 0, "", {}
    lines = hdr.split(_CRLF)
    first = lines[0]
    status = 0
    desc = ""
    if first.startswith(b"NATS/1.0"):
        rest = first[8:].strip()
        if rest:
            parts = rest.split(b" ", 1)
            if parts[0].isdigit():
                status = int(parts[0])
                desc = parts[1].decode("utf-8", "replace") if len(parts) > 1 else ""
    out: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            continue
        i = line.find(b":")
        if i <= 0:
            continue
        out.setdefault(line[:i].decode("utf-8", "replace").strip(), []).append(
            line[i + 1:].strip().decode("utf-8", "replace"))
    return status, desc, out


def make_headers(pairs: list[tuple[str, str]] | dict[str, str], status: int = 0, desc: str = "") -> bytes:
    """A header block from (key, value) pairs, with an optional status line."""
    first = b"NATS/1.0"
    if status:
        first += b" " + str(status).encode()
        if desc:
            first += b" " + desc.encode()
    items = pairs.items() if isinstance(pairs, dict) else pairs
    body = b"".join(k.encode() + b": " + v.encode("utf-8", "surrogateescape") + _CRLF for k, v in items)
    return first + _CRLF + body + _CRLF


def append_headers(hdr: bytes, pairs: list[tuple[str, str]]) -> bytes:
    """``hdr`` with the given keys added at the end, whether or not it already has them (how nats-server adds
    the Nats-Stream/Nats-Sequence... headers of a direct get answer to a stored message's own)."""
    body = b"".join(k.encode() + b": " + v.encode("utf-8", "surrogateescape") + _CRLF for k, v in pairs)
    if len(hdr) > 2:
        return hdr[:-2] + body + _CRLF
    return HDR_LINE + body + _CRLF


def _lines_without(hdr: bytes, keys: set[str]) -> list[bytes]:
    """The status line and the header lines of ``hdr`` whose key is not one of ``keys``."""
    lines = hdr.split(_CRLF)
    kept = [lines[0]]
    for line in lines[1:]:
        if not line:
            continue
        i = line.find(b":")
        if i > 0 and line[:i].decode("utf-8", "replace").strip() in keys:
            continue
        kept.append(line)
    return kept


def set_headers(hdr: bytes, pairs: list[tuple[str, str]]) -> bytes:
    """``hdr`` with each key replaced (or added) by the given value."""
    if not hdr:
        return make_headers(pairs)
    kept = _lines_without(hdr, {k for k, _ in pairs})
    kept.extend(k.encode() + b": " + v.encode("utf-8", "surrogateescape") for k, v in pairs)
    return _CRLF.join(kept) + _CRLF + _CRLF


def remove_headers(hdr: bytes, keys: set[str]) -> bytes:
    """``hdr`` without the given keys (b"" when nothing but the status line would remain)."""
    if not hdr:
        return hdr
    kept = _lines_without(hdr, keys)
    if len(kept) == 1 and kept[0] == b"NATS/1.0":
        return b""
    return _CRLF.join(kept) + _CRLF + _CRLF


def remove_header_prefixes(hdr: bytes, prefixes: tuple[str, ...]) -> bytes:
    """``hdr`` without the lines whose key starts with one of ``prefixes`` (case as given, as nats-server when
    a source drops a message's ``Nats-Expected-*`` and ``Nats-Batch-*`` headers); b"" when nothing remains."""
    if not hdr:
        return hdr
    pfx = tuple(p.encode() for p in prefixes)
    lines = hdr.split(_CRLF)
    kept = [lines[0]] + [ln for ln in lines[1:] if ln and not ln.startswith(pfx)]
    if len(kept) == 1 and kept[0] == b"NATS/1.0":
        return b""
    return _CRLF.join(kept) + _CRLF + _CRLF
