"""Public nkeys: the text form of the Ed25519 keys that name NATS operators, accounts, users and servers.

A public nkey is base32 (unpadded) of one prefix byte (its kind: the first letter of the text, "O", "A",
"U", "N", "C"), the 32 raw key bytes and a CRC-16 of both (little endian). Used by client nkey
authentication (``rillet.server.auth``), JWTs (``rillet.jwt``) and the auth callout's curve keys.
"""
from __future__ import annotations

import base64

# prefix byte of each kind, by the letter the text form starts with
PREFIX_BYTES = {"O": 14 << 3, "A": 0, "U": 20 << 3, "N": 13 << 3, "C": 2 << 3}


def decode_public_nkey(nkey: object) -> bytes | None:
    """The 32-byte Ed25519 key inside a public nkey ("U...", "A...", "N..."), or None when malformed."""
    if not isinstance(nkey, str) or not nkey:
        return None
    import nkeys
    try:
        data = base64.b32decode(nkey.encode() + b"=" * (-len(nkey) % 8))
    except (ValueError, TypeError):
        return None
    if len(data) != 35:
        return None
    body, crc = data[:-2], data[-2:]
    if nkeys.crc16_checksum(body) != crc:
        return None
    return body[1:]


def encode_public_nkey(prefix: int, raw: bytes) -> str:
    """Encode a 32-byte key as a public nkey with the given prefix byte (e.g. nkeys.PREFIX_BYTE_SERVER)."""
    import nkeys
    body = bytes([prefix]) + raw
    crc = nkeys.crc16_checksum(body)
    return base64.b32encode(body + crc).decode().rstrip("=")


def verify_signature(pub: str, data: bytes, sig: bytes) -> bool:
    """Is ``sig`` the Ed25519 signature of ``data`` by the public nkey ``pub``? False for a malformed key."""
    raw = decode_public_nkey(pub)
    if raw is None:
        return False
    import nacl.exceptions
    import nacl.signing
    try:
        nacl.signing.VerifyKey(raw).verify(data, sig)
        return True
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
        return False
