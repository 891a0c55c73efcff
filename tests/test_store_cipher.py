"""Unit tests of rillet.cipher: key hierarchy, round trips, wrong keys, tampering, rotation."""
import hashlib
import os
import hmac

import pytest

from rillet.cipher import (AssetKey, DecryptError, KeyRecoveryError, KeyRing, StoreCipher,
                                           hchacha20, key_gen, parse_cipher)

CIPHERS = [StoreCipher.CHACHA, StoreCipher.AES]


def test_hchacha20_vector():
    # draft-irtf-cfrg-xchacha-03, section 2.2.1
    key = bytes(range(32))
    nonce = bytes.fromhex("000000090000004a0000000031415927")
    assert hchacha20(key, nonce).hex() == (
        "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc")


def test_prf_is_hmac_sha256_of_account_and_context():
    prf = key_gen("s3cr3t", "ACC")
    assert prf("ORDERS") == hmac.new(b"s3cr3t", b"ACCORDERS", hashlib.sha256).digest()
    assert prf("ORDERS") != key_gen("s3cr3t", "OTHER")("ORDERS")
    assert prf("ORDERS:1") != prf("ORDERS:2")


def test_parse_cipher():
    assert parse_cipher("ChaCha") is StoreCipher.CHACHA
    assert parse_cipher("chachapoly") is StoreCipher.CHACHA
    assert parse_cipher("AES") is StoreCipher.AES
    with pytest.raises(ValueError, match='Unknown cipher type: "des"'):
        parse_cipher("des")


@pytest.mark.parametrize("cipher", CIPHERS)
def test_round_trip_and_no_plaintext(cipher):
    ring = KeyRing(cipher, "k1")
    key, record = ring.new_asset("S:1")
    assert len(record) == cipher.nonce_size + 32 + 16
    plain = b"hello plaintext payload " * 10
    sealed = key.seal(plain)
    assert b"plaintext" not in sealed and key.seed not in record
    assert key.open(sealed) == plain
    assert key.seal(plain) != sealed  # fresh nonce each time
    again = KeyRing(cipher, "k1").recover("S:1", record)
    assert not again.rotated and again.key.open(sealed) == plain


@pytest.mark.parametrize("cipher", CIPHERS)
def test_wrong_key_refused(cipher):
    _, record = KeyRing(cipher, "right").new_asset("S")
    with pytest.raises(KeyRecoveryError, match="unable to recover keys"):
        KeyRing(cipher, "wrong").recover("S", record)
    with pytest.raises(KeyRecoveryError):  # right key, other context
        KeyRing(cipher, "right").recover("T", record)
    with pytest.raises(KeyRecoveryError):  # right key, other account
        KeyRing(cipher, "right", account="A").recover("S", record)
    other = AssetKey(cipher, b"\1" * 32)
    with pytest.raises(DecryptError):
        other.open(AssetKey(cipher, b"\2" * 32).seal(b"data"))


@pytest.mark.parametrize("cipher", CIPHERS)
def test_tampering_detected(cipher):
    key, record = KeyRing(cipher, "k").new_asset("S")
    sealed = bytearray(key.seal(b"some data"))
    for i in (0, len(sealed) // 2, len(sealed) - 1):
        bad = bytearray(sealed); bad[i] ^= 1
        with pytest.raises(DecryptError):
            key.open(bytes(bad))
    with pytest.raises(DecryptError):
        key.open(bytes(sealed[:10]))
    bad = bytearray(record); bad[-1] ^= 0x80
    with pytest.raises(KeyRecoveryError):
        KeyRing(cipher, "k").recover("S", bytes(bad))
    with pytest.raises(DecryptError):  # associated data bound
        key.open(key.seal(b"x", b"rec:1"), b"rec:2")


def test_other_cipher_and_rotation():
    key, record = KeyRing(StoreCipher.AES, "old").new_asset("S")
    sealed = key.seal(b"payload")
    # configured cipher changed: the record still opens (tried both ways), the asset keeps AES
    rec = KeyRing(StoreCipher.CHACHA, "old").recover("S", record)
    assert rec.key.cipher is StoreCipher.AES and not rec.rotated
    # key rotated: only prev_key opens it; rewrap seals it with the new key, data unchanged
    ring = KeyRing(StoreCipher.CHACHA, "new", prev_key="old")
    rec = ring.recover("S", record)
    assert rec.rotated and rec.key.open(sealed) == b"payload"
    record2 = ring.rewrap("S", rec.key)
    assert not KeyRing(StoreCipher.CHACHA, "new").recover("S", record2).rotated
    with pytest.raises(KeyRecoveryError):
        KeyRing(StoreCipher.CHACHA, "old").recover("S", record2)
    with pytest.raises(KeyRecoveryError):
        KeyRing(StoreCipher.CHACHA, "new").recover("S", record)


@pytest.mark.parametrize("cipher", CIPHERS)
def test_block_stream_offsets(cipher):
    from rillet.cipher import block_stream, open_block_stream
    ring = KeyRing(cipher, "k")
    bs, record = block_stream(ring, "S:1")
    plain = bytes(range(256)) * 5 + b"published plaintext"
    whole = bs.xor(plain, 0)
    assert b"plaintext" not in whole and len(whole) == len(plain)
    # any split at any offset gives the same bytes (records written and read piecewise)
    for cut in (1, 15, 16, 17, 63, 64, 65, 700):
        assert bs.xor(plain[:cut], 0) + bs.xor(plain[cut:], cut) == whole
    assert bs.xor(whole[100:200], 100) == plain[100:200]
    again, new = open_block_stream(KeyRing(cipher, "k"), "S:1", record)
    assert new is None and again.xor(whole, 0) == plain
    rotated, new = open_block_stream(KeyRing(cipher, "k2", prev_key="k"), "S:1", record)
    assert new is not None and rotated.xor(whole, 0) == plain
    after, newer = open_block_stream(KeyRing(cipher, "k2"), "S:1", new)
    assert newer is None and after.xor(whole, 0) == plain
    with pytest.raises(KeyRecoveryError):
        open_block_stream(KeyRing(cipher, "bad"), "S:1", record)
    other, _ = block_stream(ring, "S:2")
    assert other.xor(plain, 0) != whole


@pytest.mark.parametrize("cipher", CIPHERS)
def test_raft_wal_encrypted(tmp_path, cipher):
    from rillet.cipher import CipherError
    from rillet.raft.msgs import Snapshot
    from rillet.raft.wal import WAL
    d = str(tmp_path / "S-R3F-abc")
    ring = KeyRing(cipher, "k")
    w, rec = WAL.open(d, keys=ring)
    w.append([(1, 1, 0, b"PLAINTEXT-ENTRY-1"), (2, 1, 0, b"PLAINTEXT-ENTRY-2"), (3, 1, 0, b"PLAINTEXT-ENTRY-3")])
    w.save_snapshot(Snapshot(1, 1, ("a",), b"PLAINTEXT-SNAPSHOT"))
    w.close()
    for n in os.listdir(d):
        with open(os.path.join(d, n), "rb") as f:
            assert b"PLAINTEXT" not in f.read(), n
    w, rec = WAL.open(d, keys=KeyRing(cipher, "k"))
    assert [e[3] for e in rec.entries] == [b"PLAINTEXT-ENTRY-2", b"PLAINTEXT-ENTRY-3"]
    assert rec.snapshot.data == b"PLAINTEXT-SNAPSHOT"
    w.close()
    before = {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d)}
    with pytest.raises(KeyRecoveryError, match="unable to recover keys"):
        WAL.open(d, keys=KeyRing(cipher, "wrong"))
    with pytest.raises(CipherError, match="encryption not enabled"):
        WAL.open(d)
    assert {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d)} == before
    w, rec = WAL.open(d, keys=KeyRing(cipher, "new", prev_key="k"))  # rotation
    w.close()
    w, rec = WAL.open(d, keys=KeyRing(cipher, "new"))
    assert [e[3] for e in rec.entries] == [b"PLAINTEXT-ENTRY-2", b"PLAINTEXT-ENTRY-3"]
    w.close()
