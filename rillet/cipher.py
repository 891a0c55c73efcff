"""Encryption at rest for JetStream stores: the key hierarchy of nats-server's file store, written anew.

Hierarchy (the same shape as nats-server 2.x, learned from its filestore/jetstream sources):

* server key ``ek`` (``jetstream { key | ek | encryption_key }``), optional previous key (``prev_key``).
* per account and context a key-encryption key: ``kek = HMAC-SHA256(key=ek, msg=account + context)``
  (context: the stream name, ``stream:block-index`` for a message block, the consumer name ...).
* per asset a random 32-byte seed, the asset key; stored sealed by the kek as a *key record*
  ``nonce || AEAD_kek(seed)`` (nats-server's ``meta.key`` / ``<index>.key`` files).
* data (block records, index files, consumer state, RAFT records, snapshots) sealed by the asset key:
  ``nonce || AEAD_seed(plain)`` with a fresh random nonce each time, so tampering is detected.

AEADs: ``chachapoly`` is XChaCha20-Poly1305 (24-byte nonce; HChaCha20 subkey + ChaCha20-Poly1305 from the
``cryptography`` package), ``aes`` is AES-256-GCM with a 16-byte nonce (the block size), as nats-server uses.

A key record that neither the current nor the previous key opens (with either cipher) raises
:class:`KeyRecoveryError` with nats-server's text ``unable to recover keys``; nothing is decrypted with a
wrong key, and the record is not rewritten. When only ``prev_key`` (or the other cipher) opens it,
:meth:`KeyRing.recover` says so and :meth:`KeyRing.rewrap` gives the record sealed with the current key
and cipher (the seed, hence the data, unchanged): that is key rotation.
"""
from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass


SEED_SIZE = 32
TAG_SIZE = 16


class StoreCipher(enum.Enum):
    CHACHA = "chachapoly"
    AES = "aes"

    @property
    def nonce_size(self) -> int:
        return 24 if self is StoreCipher.CHACHA else 16


def parse_cipher(name: str) -> StoreCipher:
    """The cipher of a ``jetstream { cipher: ... }`` value; ValueError with nats-server's text."""
    low = str(name).lower()
    if low in ("chacha", "chachapoly"):
        return StoreCipher.CHACHA
    if low == "aes":
        return StoreCipher.AES
    raise ValueError(f'Unknown cipher type: "{name}"')


class CipherError(Exception):
    """Base class of this module's errors."""


class DecryptError(CipherError):
    """Sealed data that does not open: a wrong key or tampered bytes."""


class KeyRecoveryError(CipherError):
    """A key record that no configured key opens (nats-server: 'unable to recover keys')."""

    def __init__(self, context: str = "") -> None:
        super().__init__("unable to recover keys")
        self.context = context


# ---- XChaCha20-Poly1305 (HChaCha20 in Python: one call per seal/open, 20 rounds on 16 words) ----

_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)
_M32 = 0xFFFFFFFF


def hchacha20(key: bytes, nonce16: bytes) -> bytes:
    """The HChaCha20 subkey of a 32-byte key and 16-byte nonce (draft-irtf-cfrg-xchacha)."""
    if len(key) != 32 or len(nonce16) != 16:
        raise ValueError("hchacha20 needs a 32-byte key and a 16-byte nonce")
    x = list(_SIGMA) + list(struct.unpack("<8I", key)) + list(struct.unpack("<4I", nonce16))

    def qr(a: int, b: int, c: int, d: int) -> None:
        x[a] = (x[a] + x[b]) & _M32; v = x[d] ^ x[a]; x[d] = ((v << 16) | (v >> 16)) & _M32
        x[c] = (x[c] + x[d]) & _M32; v = x[b] ^ x[c]; x[b] = ((v << 12) | (v >> 20)) & _M32
        x[a] = (x[a] + x[b]) & _M32; v = x[d] ^ x[a]; x[d] = ((v << 8) | (v >> 24)) & _M32
        x[c] = (x[c] + x[d]) & _M32; v = x[b] ^ x[c]; x[b] = ((v << 7) | (v >> 25)) & _M32

    for _ in range(10):
        qr(0, 4, 8, 12); qr(1, 5, 9, 13); qr(2, 6, 10, 14); qr(3, 7, 11, 15)
        qr(0, 5, 10, 15); qr(1, 6, 11, 12); qr(2, 7, 8, 13); qr(3, 4, 9, 14)
    return struct.pack("<8I", *(x[0:4] + x[12:16]))


class _Aead:
    """One AEAD key of a cipher; ``seal`` gives ``nonce || ciphertext || tag``."""

    __slots__ = ("cipher", "_key", "_aes")

    def __init__(self, cipher: StoreCipher, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # (lazily)
        if len(key) != 32:
            raise ValueError("a store key is 32 bytes")
        self.cipher = cipher
        self._key = bytes(key)
        self._aes = AESGCM(self._key) if cipher is StoreCipher.AES else None

    @property
    def nonce_size(self) -> int:
        return self.cipher.nonce_size

    @property
    def overhead(self) -> int:
        return self.cipher.nonce_size + TAG_SIZE

    def _encrypt(self, nonce: bytes, plain: bytes, aad: bytes | None) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305  # (lazily)
        if self._aes is not None:
            return self._aes.encrypt(nonce, plain, aad)
        sub = hchacha20(self._key, nonce[:16])
        return ChaCha20Poly1305(sub).encrypt(b"\0\0\0\0" + nonce[16:], plain, aad)

    def _decrypt(self, nonce: bytes, sealed: bytes, aad: bytes | None) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305  # (lazily)
        if self._aes is not None:
            return self._aes.decrypt(nonce, sealed, aad)
        sub = hchacha20(self._key, nonce[:16])
        return ChaCha20Poly1305(sub).decrypt(b"\0\0\0\0" + nonce[16:], sealed, aad)

    def seal(self, plain: bytes, aad: bytes | None = None, nonce: bytes | None = None) -> bytes:
        nonce = os.urandom(self.nonce_size) if nonce is None else bytes(nonce)
        return nonce + self._encrypt(nonce, bytes(plain), aad)

    def open(self, blob: bytes, aad: bytes | None = None) -> bytes:
        from cryptography.exceptions import InvalidTag  # (lazily)
        ns = self.nonce_size
        if len(blob) < ns + TAG_SIZE:
            raise DecryptError(f"sealed data too short ({len(blob)} bytes)")
        try:
            return self._decrypt(bytes(blob[:ns]), bytes(blob[ns:]), aad)
        except InvalidTag:
            raise DecryptError("message authentication failed (wrong key or tampered data)") from None


def aead(cipher: StoreCipher, key: bytes) -> _Aead:
    return _Aead(cipher, key)


def key_gen(ek: str, info: str):
    """nats-server's PRF: context -> HMAC-SHA256(key=ek, msg=info + context) (info: the account name)."""
    import hashlib  # (here: a JetStream without encryption loads no OpenSSL digests, issue 20)
    import hmac
    kb, ib = ek.encode(), info.encode()

    def prf(context: bytes | str) -> bytes:
        if isinstance(context, str):
            context = context.encode()
        return hmac.new(kb, ib + context, hashlib.sha256).digest()

    return prf


@dataclass
class AssetKey:
    """The key of one encrypted asset (a stream, a block, a consumer, a RAFT log): seals and opens data."""

    cipher: StoreCipher
    seed: bytes

    def __post_init__(self) -> None:
        self._aead = _Aead(self.cipher, self.seed)

    @property
    def overhead(self) -> int:
        return self._aead.overhead

    def seal(self, plain: bytes, aad: bytes | None = None) -> bytes:
        return self._aead.seal(plain, aad)

    def open(self, blob: bytes, aad: bytes | None = None) -> bytes:
        return self._aead.open(blob, aad)


@dataclass
class Recovered:
    key: AssetKey
    rotated: bool  # opened only by prev_key: re-wrap the key record with the current key (KeyRing.rewrap)


class KeyRing:
    """The configured keys of one account: makes and opens key records, seals and opens data."""

    def __init__(self, cipher: StoreCipher, key: str, prev_key: str | None = None, account: str = "$G") -> None:
        if not key:
            raise ValueError("an encryption key is required")
        self.cipher = cipher
        self.account = account
        self._prf = key_gen(key, account)
        self._prev = key_gen(prev_key, account) if prev_key else None

    def _kek(self, prf, cipher: StoreCipher, context: str) -> _Aead:
        return _Aead(cipher, prf(context))

    def new_asset(self, context: str) -> tuple[AssetKey, bytes]:
        """A fresh random asset key for ``context`` and its key record (to be stored beside the asset)."""
        seed = os.urandom(SEED_SIZE)
        return AssetKey(self.cipher, seed), self._kek(self._prf, self.cipher, context).seal(seed)

    def rewrap(self, context: str, key: AssetKey, record: bytes | None = None) -> bytes:
        """The key record of ``key`` sealed with the current key (rotation: the data stay as they are).
        The asset keeps its cipher: a key record says nothing of it, so it is tried both ways on recovery.
        With the old ``record`` its nonce is kept (a block's keystream depends on it; the kek is new)."""
        nonce = record[:key.cipher.nonce_size] if record is not None else None
        return self._kek(self._prf, key.cipher, context).seal(key.seed, nonce=nonce)

    def recover(self, context: str, record: bytes) -> Recovered:
        """Open a key record: current key with this cipher then the other, then prev_key likewise.
        KeyRecoveryError when none opens it (nothing is decrypted with a wrong key)."""
        other = StoreCipher.AES if self.cipher is StoreCipher.CHACHA else StoreCipher.CHACHA
        tries = [(self._prf, self.cipher), (self._prf, other)]
        if self._prev is not None:
            tries += [(self._prev, self.cipher), (self._prev, other)]
        for prf, cipher in tries:
            try:
                seed = self._kek(prf, cipher, context).open(record)
            except DecryptError:
                continue
            if len(seed) != SEED_SIZE:
                continue
            return Recovered(AssetKey(cipher, seed), rotated=prf is not self._prf)
        raise KeyRecoveryError(context)


class BlockStream:
    """The keystream of one message block, XORed at file offsets (nats-server's block cipher: XChaCha20
    for ``chachapoly``, AES-CTR for ``aes``, keyed by the block's seed with the key record's nonce).
    Offsets map one to one, so records keep their offsets and lengths and can be changed in place; the
    records' own checksums detect damage (a stream cipher does not authenticate)."""

    __slots__ = ("cipher", "_key", "_n12", "_ctr0")

    def __init__(self, key: AssetKey, nonce: bytes) -> None:
        self.cipher = key.cipher
        if len(nonce) != key.cipher.nonce_size:
            raise ValueError("block nonce of the wrong size")
        if key.cipher is StoreCipher.CHACHA:
            self._key = hchacha20(key.seed, nonce[:16])
            self._n12 = b"\0\0\0\0" + nonce[16:]
            self._ctr0 = 0
        else:
            self._key = key.seed
            self._n12 = b""
            self._ctr0 = int.from_bytes(nonce, "big")

    def xor(self, data: bytes, off: int) -> bytes:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # (lazily)
        if not data:
            return b""
        if self.cipher is StoreCipher.CHACHA:
            blk, skip = divmod(off, 64)
            if blk >= 1 << 32:
                raise ValueError("block too large for its keystream")
            c = Cipher(algorithms.ChaCha20(self._key, struct.pack("<I", blk) + self._n12), mode=None)
        else:
            blk, skip = divmod(off, 16)
            iv = ((self._ctr0 + blk) % (1 << 128)).to_bytes(16, "big")
            c = Cipher(algorithms.AES(self._key), modes.CTR(iv))
        enc = c.encryptor()
        if skip:
            enc.update(bytes(skip))
        return enc.update(data) + enc.finalize()


def block_stream(ring: "KeyRing", context: str) -> tuple[BlockStream, bytes]:
    """A new block's keystream and its key record (nonce || sealed seed)."""
    key, record = ring.new_asset(context)
    return BlockStream(key, record[:key.cipher.nonce_size]), record


def open_block_stream(ring: "KeyRing", context: str, record: bytes) -> tuple[BlockStream, bytes | None]:
    """The keystream of an existing block from its key record (KeyRecoveryError if no key opens it), and
    the record re-sealed with the current key when only ``prev_key`` opened it (else None)."""
    rec = ring.recover(context, record)
    new = ring.rewrap(context, rec.key, record) if rec.rotated else None
    return BlockStream(rec.key, record[:rec.key.cipher.nonce_size]), new


def keyring_from_options(js_opts, account: str) -> "KeyRing | None":
    """The KeyRing of ``jetstream { key, prev_key, cipher }`` (rillet.config JetStreamOptions) for an
    account, or None when no key is configured (stores are then plaintext)."""
    key = getattr(js_opts, "key", "") or ""
    if not key:
        return None
    return KeyRing(parse_cipher(getattr(js_opts, "cipher", "") or "chachapoly"), key,
                   getattr(js_opts, "prev_key", "") or None, account)
