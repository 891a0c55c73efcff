"""rillet.curve25519 derives the same public keys as libsodium (PyNaCl) for Ed25519 and X25519 seeds."""
import os

import nacl.bindings
import nacl.signing
import pytest

from rillet import nkey
from rillet.curve25519 import ed25519_public, x25519_public


def test_random_seeds_match_libsodium():
    for _ in range(100):
        s = os.urandom(32)
        assert ed25519_public(s) == bytes(nacl.signing.SigningKey(s).verify_key)
        assert x25519_public(s) == nacl.bindings.crypto_scalarmult_base(s)


@pytest.mark.parametrize("seed", [bytes(32), b"\xff" * 32, bytes(range(32))])
def test_edge_seeds_match_libsodium(seed):
    assert ed25519_public(seed) == bytes(nacl.signing.SigningKey(seed).verify_key)
    assert x25519_public(seed) == nacl.bindings.crypto_scalarmult_base(seed)


def test_rfc8032_and_rfc7748_vectors():
    # RFC 8032 7.1 TEST 1 and RFC 7748 6.1 (Alice)
    assert ed25519_public(bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")) == \
        bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    assert x25519_public(bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")) == \
        bytes.fromhex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")


def test_keys_made_here_sign_and_verify_with_pynacl():
    kp = nkey.create("user")
    sig = kp.sign(b"nonce")
    kp.verify(b"nonce", sig)
    nacl.signing.VerifyKey(kp.public_raw).verify(b"nonce", sig)
    with pytest.raises(ValueError):
        ed25519_public(b"short")
