"""The server's identity (its nkey and xkey) made with rillet.nkey's codec and PyNaCl's curve arithmetic, without
the nkeys package (issue 20: an idle server loads only what it uses), and nkey text encoding with our CRC-16
against the nkeys library's."""
from __future__ import annotations

import os

import nacl.public
import nacl.signing
import nkeys

from rillet import jwt
from rillet.nkey import CURVE_PREFIX, decode_public_nkey, encode_public_nkey, from_public_key, from_raw_seed, \
    new_server_identity


def test_server_identity_signs_and_verifies() -> None:
    kp = new_server_identity()
    pub = kp.public_key()
    assert pub.startswith("N") and from_public_key(pub).public_raw == kp.public_raw
    assert kp.public_raw == bytes(nacl.signing.SigningKey(kp.seed_raw).verify_key)
    sig = kp.sign(b"claims")
    nacl.signing.VerifyKey(decode_public_nkey(pub)).verify(b"claims", sig)
    token = jwt.encode({"sub": "x"}, kp)
    assert jwt.public_key(kp) == pub and token.count(".") == 2


def test_xkey_is_the_curve_public_key() -> None:
    seed = os.urandom(32)
    x = from_raw_seed(CURVE_PREFIX, seed).public_key()
    assert x.startswith("X") and decode_public_nkey(x) == bytes(nacl.public.PrivateKey(seed).public_key)


def test_public_nkey_codec_matches_the_nkeys_library() -> None:
    for _ in range(50):
        raw = os.urandom(32)
        text = encode_public_nkey(nkeys.PREFIX_BYTE_SERVER, raw)
        body = bytes([nkeys.PREFIX_BYTE_SERVER]) + raw
        import base64
        assert text == base64.b32encode(body + nkeys.crc16_checksum(body)).decode().rstrip("=")
        assert decode_public_nkey(text) == raw
    assert decode_public_nkey(text[:-1] + ("A" if text[-1] != "A" else "B")) is None


def test_key_derivation_through_libsodium_matches_pynacl_classes() -> None:
    """from_raw_seed calls libsodium through nacl._sodium (issue 20); the keys are those of PyNaCl's classes."""
    from rillet.nkey import KIND_PREFIX
    for _ in range(20):
        seed = os.urandom(32)
        assert from_raw_seed(KIND_PREFIX["user"], seed).public_raw == bytes(nacl.signing.SigningKey(seed).verify_key)
        assert from_raw_seed(CURVE_PREFIX, seed).public_raw == bytes(nacl.public.PrivateKey(seed).public_key)
