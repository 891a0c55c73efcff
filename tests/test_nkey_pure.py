"""The public keys rillet.nkey computes without PyNaCl (the server's identity and its xkey, issue 20: an idle
server does not load PyNaCl) against PyNaCl's, for random seeds and the RFC test vectors."""
from __future__ import annotations

import os

import nacl.public
import nacl.signing

from rillet import jwt
from rillet.nkey import (decode_public_nkey, ed25519_public_key, encode_public_nkey, from_public_key,
                         new_server_identity, x25519_public_key)


def test_ed25519_public_key_matches_pynacl() -> None:
    # RFC 8032 7.1, TEST 1
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    assert ed25519_public_key(seed).hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    for _ in range(100):
        seed = os.urandom(32)
        assert ed25519_public_key(seed) == bytes(nacl.signing.SigningKey(seed).verify_key)


def test_x25519_public_key_matches_pynacl() -> None:
    # RFC 7748 6.1: Alice's private and public keys
    k = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    assert x25519_public_key(k).hex() == "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    for _ in range(100):
        seed = os.urandom(32)
        assert x25519_public_key(seed) == bytes(nacl.public.PrivateKey(seed).public_key)


def test_server_identity_signs_and_verifies() -> None:
    kp = new_server_identity()
    pub = kp.public_key()
    assert pub.startswith("N") and from_public_key(pub).public_raw == kp.public_raw
    sig = kp.sign(b"claims")
    nacl.signing.VerifyKey(decode_public_nkey(pub)).verify(b"claims", sig)
    token = jwt.encode({"sub": "x"}, kp)
    assert jwt.public_key(kp) == pub and token.count(".") == 2
    assert encode_public_nkey(13 << 3, kp.public_raw) == pub
