"""Public keys from 32-byte seeds in pure Python: Ed25519 (RFC 8032, section 5.1.5) and X25519 (RFC 7748,
section 5), for the two keys every server makes at start (its nkey identity and its xkey).

Loading libsodium's binding (PyNaCl, cffi) only for those costs an idle server about 1 MB of resident memory
(issue 20); the arithmetic here takes a few milliseconds once. Signing, verifying and sealing still use PyNaCl,
loaded when first needed. tests/test_curve25519.py checks both against libsodium on random seeds.
"""
from __future__ import annotations

try:  # (the builtin SHA-512 alone: hashlib would load OpenSSL's digests into an idle server)
    from _sha512 import sha512 as _sha512
except ImportError:  # pragma: no cover - Python 3.12+ (the builtin is _sha2 there): hashlib
    from hashlib import sha512 as _sha512  # type: ignore[no-redef]

_P = 2 ** 255 - 19
_D = -121665 * pow(121666, _P - 2, _P) % _P  # the Edwards curve's d
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _inv(x: int) -> int:
    return pow(x, _P - 2, _P)


def _x_of(y: int, sign: int) -> int:
    """The x coordinate of the Edwards point with this y and x's low bit ``sign``."""
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x2 = u * _inv(v) % _P
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if x & 1 != sign:
        x = _P - x
    return x


_BY = 4 * _inv(5) % _P
_BX = _x_of(_BY, 0)
_BASE = (_BX, _BY, 1, _BX * _BY % _P)  # extended homogeneous coordinates (X, Y, Z, T)


def _add(p: tuple[int, int, int, int], q: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    a = (p[1] - p[0]) * (q[1] - q[0]) % _P
    b = (p[1] + p[0]) * (q[1] + q[0]) % _P
    c = 2 * p[3] * q[3] * _D % _P
    d = 2 * p[2] * q[2] % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % _P, g * h % _P, f * g % _P, e * h % _P


def ed25519_public(seed: bytes) -> bytes:
    """The Ed25519 public key of a 32-byte seed (what libsodium's crypto_sign_seed_keypair gives)."""
    if len(seed) != 32:
        raise ValueError("seed must be 32 bytes")
    h = _sha512(seed).digest()
    s = int.from_bytes(h[:32], "little")
    s &= (1 << 254) - 8  # clear the low 3 bits and the top bit,
    s |= 1 << 254  # set bit 254
    q, p = (0, 1, 1, 0), _BASE
    while s:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    zi = _inv(q[2])
    x, y = q[0] * zi % _P, q[1] * zi % _P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def x25519_public(seed: bytes) -> bytes:
    """The X25519 public key of a 32-byte private key: the clamped scalar times the base point u = 9
    (what libsodium's crypto_scalarmult_base gives), by the Montgomery ladder."""
    if len(seed) != 32:
        raise ValueError("seed must be 32 bytes")
    k = int.from_bytes(seed, "little")
    k &= ~7
    k &= ~(1 << 255)
    k |= 1 << 254
    x1, x2, z2, x3, z3, swap = 9, 1, 0, 9, 1, 0
    for t in range(254, -1, -1):
        bit = (k >> t) & 1
        if swap ^ bit:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = x2 + z2, x2 - z2
        aa, bb = a * a % _P, b * b % _P
        e = aa - bb
        c, d = x3 + z3, x3 - z3
        da, cb = d * a % _P, c * b % _P
        x3 = (da + cb) ** 2 % _P
        z3 = x1 * (da - cb) ** 2 % _P
        x2 = aa * bb % _P
        z2 = e * (aa + 121665 * e) % _P
    if swap:
        x2, z2 = x3, z3
    return (x2 * _inv(z2) % _P).to_bytes(32, "little")
