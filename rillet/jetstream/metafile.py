"""A stream's and a consumer's ``meta.json`` (their configuration) sealed when encryption at rest is on.

As nats-server seals its ``meta.inf`` with the asset's key and keeps that key's record in ``meta.key``:
with ``jetstream { key }`` the file is ``nonce || AEAD(json)`` under a random per-file asset key whose
record (sealed by the key-encryption key of the account and ``context``, rillet.cipher) is ``meta.key``
beside it. Without a key it is the plain JSON.

Reading follows the store's rules (rillet.jetstream.store's key record): a ``meta.key`` with no key
configured raises CipherError "encryption not enabled"; one no configured key opens raises
KeyRecoveryError "unable to recover keys" and nothing is written; opened only by ``prev_key`` it is
re-sealed with the current key (rotation); a plain file read under a key is sealed now.
"""
from __future__ import annotations

import os
from typing import Any

from rillet.cipher import AssetKey, CipherError, KeyRing, keyring_from_options
from rillet.durable import fsync_dir

KEY_FILE = "meta.key"


def stream_keys(js: Any, account: str) -> KeyRing | None:
    """The KeyRing of the server's ``jetstream { key, prev_key, cipher }`` for an account (None: plain)."""
    if js is None:
        return None
    return keyring_from_options(js.server.opts.jetstream, account)


def stream_context(stream: str) -> str:
    return stream


def consumer_context(stream: str, consumer: str) -> str:
    return f"{stream} > {consumer}"


def _atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def _asset(keys: KeyRing, kpath: str, context: str, create: bool) -> AssetKey | None:
    """The asset key recorded in ``kpath`` (re-sealed there when only prev_key opened it); a new one
    (its record written) when there is none and ``create``; else None."""
    try:
        with open(kpath, "rb") as f:
            rec = f.read()
    except FileNotFoundError:
        if not create:
            return None
        key, rec = keys.new_asset(context)
        _atomic_write(kpath, rec)
        return key
    r = keys.recover(context, rec)  # KeyRecoveryError: nothing written
    if r.rotated:
        _atomic_write(kpath, keys.rewrap(context, r.key))
    return r.key


def write(path: str, data: bytes, keys: KeyRing | None, context: str) -> None:
    """Write ``data`` (JSON) to ``path``: sealed under ``keys``, plain without."""
    kpath = os.path.join(os.path.dirname(path), KEY_FILE)
    if keys is None:
        if os.path.exists(kpath):
            raise CipherError("encryption not enabled")
        _atomic_write(path, data)
        return
    key = _asset(keys, kpath, context, create=True)
    assert key is not None
    _atomic_write(path, key.seal(data))


def read(path: str, keys: KeyRing | None, context: str) -> bytes:
    """The JSON of ``path`` (OSError when it cannot be read; CipherError as the module says)."""
    with open(path, "rb") as f:
        raw = f.read()
    kpath = os.path.join(os.path.dirname(path), KEY_FILE)
    if not os.path.exists(kpath):
        if keys is not None:  # written before a key was set (or restored): sealed from now on
            write(path, raw, keys, context)
        return raw
    if keys is None:
        raise CipherError("encryption not enabled")
    with open(kpath, "rb") as f:
        rec = f.read()
    r = keys.recover(context, rec)  # KeyRecoveryError: nothing written
    plain = r.key.open(raw)  # DecryptError (a CipherError): damaged, nothing written
    if r.rotated:
        _atomic_write(kpath, keys.rewrap(context, r.key))
    return plain
