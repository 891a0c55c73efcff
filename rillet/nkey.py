"""Public nkeys: the text form of the Ed25519 keys that name NATS operators, accounts, users and servers.

A public nkey is base32 (unpadded) of one prefix byte (its kind: the first letter of the text, "O", "A",
"U", "N", "C"), the 32 raw key bytes and a CRC-16 of both (little endian). Used by client nkey
authentication (``rillet.server.auth``), JWTs (``rillet.jwt``) and the auth callout's curve keys.

The public key of a seed (Ed25519 for nkeys, X25519 for curve "X" keys) is derived here in plain Python:
every server makes one of each at start (its "N" identity and its xkey), and PyNaCl (through nkeys) would
otherwise be loaded for those two calls alone (~1.2 MB of the idle server's memory). Signing, checking
signatures and sealing stay with PyNaCl, loaded when a configuration first needs them. The derivations
take a few ms and are checked against PyNaCl in tests/test_jwt.py.
"""
from __future__ import annotations

import base64
import hashlib

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
    if crc16(body) != crc:
        return None
    return body[1:]


def encode_public_nkey(prefix: int, raw: bytes) -> str:
    """Encode a 32-byte key as a public nkey with the given prefix byte (e.g. nkeys.PREFIX_BYTE_SERVER)."""
    body = bytes([prefix]) + raw
    crc = crc16(body)
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


def crc16(data: bytes) -> bytes:
    """The nkey checksum: CRC-16/XMODEM (polynomial 0x1021, initial 0), 2 bytes little endian."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc.to_bytes(2, "little")


# ---- public keys of seeds (RFC 8032 Ed25519, RFC 7748 X25519) ------------------------------------------

_P = 2 ** 255 - 19
_D = -121665 * pow(121666, _P - 2, _P) % _P  # the Edwards curve's d
_BY = 4 * pow(5, _P - 2, _P) % _P
_BX = 15112221349535400772501151409588531511454012693041857206046113283949847762202  # (the even root)
_BASE = (_BX, _BY, 1, _BX * _BY % _P)  # extended coordinates (X, Y, Z, T)


def _ed_add(p: tuple[int, int, int, int], q: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = 2 * t1 * t2 * _D % _P
    d = 2 * z1 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % _P, g * h % _P, f * g % _P, e * h % _P


def ed25519_public_key(seed: bytes) -> bytes:
    """The 32-byte Ed25519 public key of a 32-byte seed (what nacl.signing.SigningKey(seed).verify_key is)."""
    if len(seed) != 32:
        raise ValueError("an Ed25519 seed is 32 bytes")
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a = (a & ((1 << 254) - 8)) | (1 << 254)
    q = (0, 1, 1, 0)  # the neutral point
    p = _BASE
    while a:
        if a & 1:
            q = _ed_add(q, p)
        p = _ed_add(p, p)
        a >>= 1
    x, y, z, _ = q
    zi = pow(z, _P - 2, _P)
    x, y = x * zi % _P, y * zi % _P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def x25519_public_key(private: bytes) -> bytes:
    """The 32-byte X25519 public key of a 32-byte private key (nacl.public.PrivateKey(private).public_key)."""
    if len(private) != 32:
        raise ValueError("an X25519 private key is 32 bytes")
    k = bytearray(private)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    n = int.from_bytes(k, "little")
    # the Montgomery ladder over u = 9 (RFC 7748 section 5)
    x1, x2, z2, x3, z3, swap = 9, 1, 0, 9, 1, 0
    for t in range(254, -1, -1):
        bit = (n >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = (x2 + z2) % _P, (x2 - z2) % _P
        aa, bb = a * a % _P, b * b % _P
        e = (aa - bb) % _P
        c, d = (x3 + z3) % _P, (x3 - z3) % _P
        da, cb = d * a % _P, c * b % _P
        x3 = (da + cb) ** 2 % _P
        z3 = x1 * (da - cb) ** 2 % _P
        x2 = aa * bb % _P
        z2 = e * (aa + 121665 * e) % _P
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, _P - 2, _P) % _P).to_bytes(32, "little")
