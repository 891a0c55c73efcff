"""rillet.curvekeys: Ed25519 and X25519 public keys from seeds in Python (the server's identity at start, without
libsodium: issue 20), checked against the RFCs' test vectors and libsodium (PyNaCl) on random and edge seeds."""
from __future__ import annotations

import os

import nacl.public
import nacl.signing
import pytest

from rillet.curvekeys import ed25519_public, x25519_public

# RFC 8032 7.1, tests 1-3: (secret key, public key)
ED25519_VECTORS = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025"),
]
# RFC 7748 6.1: Alice's and Bob's (private key, public key)
X25519_VECTORS = [
    ("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
     "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"),
    ("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb",
     "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"),
]


@pytest.mark.parametrize("seed,public", ED25519_VECTORS)
def test_ed25519_rfc8032_vectors(seed, public):
    assert ed25519_public(bytes.fromhex(seed)).hex() == public


@pytest.mark.parametrize("seed,public", X25519_VECTORS)
def test_x25519_rfc7748_vectors(seed, public):
    assert x25519_public(bytes.fromhex(seed)).hex() == public


def test_same_keys_as_libsodium():
    seeds = [os.urandom(32) for _ in range(200)] + [bytes(32), b"\xff" * 32, b"\x01" + bytes(31), bytes(31) + b"\x80"]
    for seed in seeds:
        assert ed25519_public(seed) == bytes(nacl.signing.SigningKey(seed).verify_key), seed.hex()
        assert x25519_public(seed) == bytes(nacl.public.PrivateKey(seed).public_key), seed.hex()


def test_seed_length_checked():
    for bad in (b"", bytes(31), bytes(33)):
        with pytest.raises(ValueError):
            ed25519_public(bad)
        with pytest.raises(ValueError):
            x25519_public(bad)
