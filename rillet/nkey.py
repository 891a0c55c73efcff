"""Public nkeys: the text form of the Ed25519 keys that name NATS operators, accounts, users and servers.

A public nkey is base32 (unpadded) of one prefix byte (its kind: the first letter of the text, "O", "A",
"U", "N", "C"), the 32 raw key bytes and a CRC-16 of both (little endian). Used by client nkey
authentication (``rillet.server.auth``), JWTs (``rillet.jwt``) and the auth callout's curve keys.
"""
from __future__ import annotations

import base64
from typing import Any

# prefix byte of each kind, by the letter the text form starts with
PREFIX_BYTES = {"O": 14 << 3, "A": 0, "U": 20 << 3, "N": 13 << 3, "C": 2 << 3}


def decode_public_nkey(nkey: object) -> bytes | None:
    """The 32-byte Ed25519 key inside a public nkey ("U...", "A...", "N..."), or None when malformed."""
    if not isinstance(nkey, str) or not nkey:
        return None
    try:
        data = base64.b32decode(nkey.encode() + b"=" * (-len(nkey) % 8))
    except (ValueError, TypeError):
        return None
    if len(data) != 35:
        return None
    body, crc = data[:-2], data[-2:]
    if crc16(body).to_bytes(2, "little") != crc:
        return None
    return body[1:]


def encode_public_nkey(prefix: int, raw: bytes) -> str:
    """Encode a 32-byte key as a public nkey with the given prefix byte (e.g. nkeys.PREFIX_BYTE_SERVER)."""
    body = bytes([prefix]) + raw
    return base64.b32encode(body + crc16(body).to_bytes(2, "little")).decode().rstrip("=")


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


# ---------------------------------------------------------------------------------------------------
# Seeds and key pairs (what ``rillet nkey`` and ``rillet auth`` need): our own codec, with the error
# strings of the Go nkeys package so that messages read the same as nk's and nsc's.

SEED_PREFIX = 18 << 3      # "S..."
PRIVATE_PREFIX = 15 << 3   # "P..."
CURVE_PREFIX = 23 << 3     # "X..." (X25519 keys: encryption, never signing)
KIND_PREFIX = {"operator": 14 << 3, "account": 0, "user": 20 << 3, "server": 13 << 3,
               "cluster": 2 << 3, "curve": CURVE_PREFIX}
PUBLIC_PREFIXES = set(KIND_PREFIX.values())
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


class NkeyError(ValueError):
    """A malformed or unusable nkey; the text is the Go nkeys package's message for the same fault."""


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum at the end of every nkey."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def _b32encode(data: bytes) -> str:
    return base64.b32encode(data).decode().rstrip("=")


def _decode_checked(text: str | bytes) -> bytes:
    """Prefix and payload of an encoded nkey (checksum verified and removed)."""
    s = text.decode("ascii", "replace") if isinstance(text, (bytes, bytearray)) else str(text)
    if not s or any(c not in _B32 for c in s) or len(s) % 8 in (1, 3, 6):
        raise NkeyError("nkeys: invalid encoded key")
    raw = base64.b32decode(s + "=" * (-len(s) % 8))
    if len(raw) < 4:
        raise NkeyError("nkeys: invalid encoded key")
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if crc16(body) != crc:
        raise NkeyError("nkeys: invalid checksum")
    return body


def is_valid_encoding(text: str | bytes) -> bool:
    """Is this any well-formed nkey text (public key, seed or private key)?"""
    try:
        _decode_checked(text)
        return True
    except NkeyError:
        return False


def encode_key(prefix: int, raw: bytes) -> str:
    """The text form of a public (or private) key: prefix byte, payload, CRC-16, base32 without padding."""
    if prefix not in PUBLIC_PREFIXES and prefix != PRIVATE_PREFIX:
        raise NkeyError("nkeys: invalid prefix byte")
    body = bytes([prefix]) + raw
    return _b32encode(body + crc16(body).to_bytes(2, "little"))


def encode_seed(prefix: int, raw: bytes) -> str:
    """The "S..." text of a 32-byte seed of the given kind: the seed prefix and the kind's prefix share
    the first two bytes so that the second letter names the kind ("SU", "SA", "SO", ...)."""
    if prefix not in PUBLIC_PREFIXES:
        raise NkeyError("nkeys: invalid prefix byte")
    if len(raw) != 32:
        raise NkeyError("nkeys: invalid seed length")
    body = bytes([SEED_PREFIX | (prefix >> 5), (prefix & 31) << 3]) + raw
    return _b32encode(body + crc16(body).to_bytes(2, "little"))


def decode_seed(text: str | bytes) -> tuple[int, bytes]:
    """(kind prefix byte, 32 raw seed bytes) of an "S..." seed; NkeyError when it is not one."""
    body = _decode_checked(text)
    if len(body) < 2 or body[0] & 0xF8 != SEED_PREFIX:
        raise NkeyError("nkeys: invalid seed")
    kind = ((body[0] & 7) << 5) | ((body[1] & 0xF8) >> 3)
    if kind not in PUBLIC_PREFIXES:
        raise NkeyError("nkeys: invalid seed")
    raw = body[2:]
    if len(raw) != 32:
        raise NkeyError("nkeys: invalid seed length")
    return kind, raw


def kind_name(prefix: int) -> str:
    for name, p in KIND_PREFIX.items():
        if p == prefix:
            return name
    return "unknown"


class KeyPair:
    """An nkey: a seed (private) or only a public key. Ed25519 for every kind but curve (X25519)."""

    def __init__(self, prefix: int, public: bytes, seed: bytes | None = None) -> None:
        self.prefix = prefix
        self.public_raw = public
        self.seed_raw = seed

    @property
    def kind(self) -> str:
        return kind_name(self.prefix)

    @property
    def is_curve(self) -> bool:
        return self.prefix == CURVE_PREFIX

    def public_key(self) -> str:
        return encode_key(self.prefix, self.public_raw)

    def seed(self) -> str:
        if self.seed_raw is None:
            raise NkeyError("nkeys: no seed or private key available")
        return encode_seed(self.prefix, self.seed_raw)

    def private_key(self) -> str:
        if self.seed_raw is None:
            raise NkeyError("nkeys: no seed or private key available")
        key = self.seed_raw if self.is_curve else self.seed_raw + self.public_raw
        return encode_key(PRIVATE_PREFIX, key)

    def sign(self, data: bytes) -> bytes:
        if self.is_curve:
            raise NkeyError("nkeys: curve key is not valid for sign/verify")
        if self.seed_raw is None:
            raise NkeyError("nkeys: can not sign, no private key available")
        import nacl.signing
        return nacl.signing.SigningKey(self.seed_raw).sign(data).signature

    def verify(self, data: bytes, sig: bytes) -> None:
        """Raise NkeyError unless ``sig`` is this key's Ed25519 signature of ``data``."""
        if self.is_curve:
            raise NkeyError("nkeys: curve key is not valid for sign/verify")
        import nacl.exceptions
        import nacl.signing
        try:
            nacl.signing.VerifyKey(self.public_raw).verify(data, sig)
        except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
            raise NkeyError("nkeys: signature verification failed") from None


def new_server_identity() -> KeyPair:
    """A fresh server nkey ("N..."): the server's ID, and the key that signs its auth callout requests (our key
    codec and curve arithmetic: neither the ``nkeys`` package nor PyNaCl is loaded)."""
    import os
    return from_raw_seed(KIND_PREFIX["server"], os.urandom(32))


def from_raw_seed(prefix: int, raw: bytes) -> KeyPair:
    """The key pair of a raw 32-byte seed. The public key is derived in pure Python (rillet.curve25519: every
    server derives two at start, and loading libsodium's binding for them alone cost ~1 MB of an idle server's
    memory, issue 20); signing and verifying load PyNaCl when first used."""
    if prefix not in PUBLIC_PREFIXES:
        raise NkeyError("nkeys: invalid prefix byte")
    if len(raw) != 32:
        raise NkeyError("nkeys: invalid seed length")
    from rillet.curve25519 import ed25519_public, x25519_public
    public = x25519_public(raw) if prefix == CURVE_PREFIX else ed25519_public(raw)
    return KeyPair(prefix, public, raw)


def from_seed(text: str | bytes) -> KeyPair:
    prefix, raw = decode_seed(text)
    return from_raw_seed(prefix, raw)


def from_public_key(text: str | bytes) -> KeyPair:
    body = _decode_checked(text)
    if body[0] not in PUBLIC_PREFIXES or len(body) != 33:
        raise NkeyError("nkeys: invalid public key")
    return KeyPair(body[0], body[1:])


def create(kind: str, entropy: Any = None) -> KeyPair:
    """A new key pair of ``kind`` ("user", "account", ...); 32 seed bytes from ``entropy`` (a binary file
    object) when given, else from the operating system's random source."""
    prefix = KIND_PREFIX.get(kind.lower())
    if prefix is None:
        raise NkeyError(f"unknown key type {kind!r}")
    if entropy is None:
        import os
        raw = os.urandom(32)
    else:
        raw = entropy.read(32)
        if len(raw) != 32:
            raise NkeyError("not enough entropy: the entropy source gave "
                            f"{len(raw)} of the 32 bytes a key needs")
    return from_raw_seed(prefix, raw)
