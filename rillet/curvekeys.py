"""Public keys from private seeds, in plain Python: Ed25519 (RFC 8032 5.1.5) and X25519 (RFC 7748 5).

Every server derives two public keys at start (its nkey, the server ID, and its auth callout xkey). Doing it
here rather than through libsodium keeps PyNaCl's binding (``nacl._sodium`` with cffi, ~0.8 MB of an idle
server's memory, issue 20) unloaded until something signs, verifies or encrypts, which still goes through
PyNaCl. Only public keys are computed: nothing here signs. The arithmetic is not constant-time; it runs once
per key on the server's own fresh seeds (no input from a peer), and tests/test_curvekeys.py checks it
against libsodium.
"""
from __future__ import annotations

from rillet.digest import sha512

P = 2 ** 255 - 19
_D = -121665 * pow(121666, P - 2, P) % P  # the Edwards curve's d
_D2 = 2 * _D % P
_SQRT_M1 = pow(2, (P - 1) // 4, P)


def _base_point() -> tuple[int, int, int, int]:
    """Ed25519's base point B in extended coordinates (X, Y, Z, T): y = 4/5, x the even root."""
    y = 4 * pow(5, P - 2, P) % P
    xx = (y * y - 1) * pow(_D * y * y + 1, P - 2, P) % P
    x = pow(xx, (P + 3) // 8, P)
    if (x * x - xx) % P:
        x = x * _SQRT_M1 % P
    if x & 1:
        x = P - x
    return x, y, 1, x * y % P


def _add(p: tuple[int, int, int, int], q: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """p + q on the twisted Edwards curve -x^2 + y^2 = 1 + d x^2 y^2 (extended coordinates; also doubles)."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * _D2 * t2 % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % P, g * h % P, f * g % P, e * h % P


def ed25519_public(seed: bytes) -> bytes:
    """The 32-byte Ed25519 public key of a 32-byte seed (libsodium's ``crypto_sign_seed_keypair``)."""
    if len(seed) != 32:
        raise ValueError("seed must be 32 bytes")
    h = sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    q = (0, 1, 1, 0)  # the neutral element
    p = _base_point()
    while a:
        if a & 1:
            q = _add(q, p)
        p = _add(p, p)
        a >>= 1
    x, y, z, _ = q
    zi = pow(z, P - 2, P)
    x, y = x * zi % P, y * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def x25519_public(seed: bytes) -> bytes:
    """The 32-byte X25519 public key of a 32-byte private key (libsodium's ``crypto_scalarmult_base``): the
    clamped scalar times the base point u = 9, by the Montgomery ladder."""
    if len(seed) != 32:
        raise ValueError("private key must be 32 bytes")
    k = int.from_bytes(seed, "little")
    k &= ~7
    k &= (1 << 255) - 1
    k |= 1 << 254
    u = 9
    x2, z2, x3, z3 = 1, 0, u, 1
    swap = 0
    for t in range(254, -1, -1):
        bit = (k >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = x2 + z2, x2 - z2
        aa, bb = a * a % P, b * b % P
        e = aa - bb
        c, d = x3 + z3, x3 - z3
        da, cb = d * a % P, c * b % P
        x3 = (da + cb) ** 2 % P
        z3 = u * (da - cb) ** 2 % P
        x2 = aa * bb % P
        z2 = e * (aa + 121665 * e) % P
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, P - 2, P) % P).to_bytes(32, "little")
