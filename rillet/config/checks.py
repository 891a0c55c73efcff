"""Small validity checks the config builder needs: public nkeys and permission subjects.

Kept here (the standard library and the bottom layer's ``rillet.nkey`` only) so the config package does not
depend on other components.
"""
from __future__ import annotations

import base64
import binascii

from rillet.nkey import crc16

# First byte of a decoded public nkey, by the letter the encoded key starts with.
NKEY_PREFIX_BYTES = {
    "A": 0 << 3,   # account
    "C": 2 << 3,   # cluster
    "N": 13 << 3,  # server
    "O": 14 << 3,  # operator
    "U": 20 << 3,  # user
    "X": 23 << 3,  # curve (x25519) key, as auth callout xkeys
}
_NKEY_LEN = 56  # base32 characters of a public key: 1 prefix + 32 key + 2 crc bytes


def is_valid_public_nkey(key: str, kind: str) -> bool:
    """True when ``key`` is a well-formed public nkey of ``kind`` ("U" user, "A" account, ...)."""
    if len(key) != _NKEY_LEN or not key.startswith(kind):
        return False
    try:
        raw = base64.b32decode(key + "=" * (-len(key) % 8))
    except (binascii.Error, ValueError):
        return False
    if len(raw) != 35 or raw[0] != NKEY_PREFIX_BYTES.get(kind, -1):
        return False
    body, crc = raw[:33], int.from_bytes(raw[33:], "little")
    return crc16(body) == crc


def encode_public_nkey(kind: str, key_bytes: bytes) -> str:
    """Encode 32 raw key bytes as a public nkey (used by tests and tools)."""
    if len(key_bytes) != 32:
        raise ValueError("an nkey public key is 32 bytes")
    body = bytes([NKEY_PREFIX_BYTES[kind]]) + key_bytes
    raw = body + crc16(body).to_bytes(2, "little")
    return base64.b32encode(raw).decode().rstrip("=")


_WHITESPACE = set(" \t\r\n\f")


def is_valid_subject(subject: str) -> bool:
    """A publish/subscribe subject, wildcards allowed; ``>`` only as the last token."""
    if not subject or any(c in _WHITESPACE for c in subject):
        return False
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if not token:
            return False
        if token == ">" and index != len(tokens) - 1:
            return False
    return True


def subject_problem(entry: str, allow_queue: bool) -> str | None:
    """Why ``entry`` can't be a permission subject, or None when it can.

    Subscribe permissions may name a queue group: ``"subject queue"``.
    """
    if is_valid_subject(entry):
        return None
    if allow_queue:
        parts = entry.split()
        if len(parts) == 2:
            if not is_valid_subject(parts[0]):
                return f'subject "{parts[0]}" is not a valid subject'
            if not is_valid_subject(parts[1]):
                return f'queue "{parts[1]}" is not a valid queue'
            return None
    return f'subject "{entry}" is not a valid subject'
