"""The file store's consumer states: ``FileConsumerStore``, two slot files per consumer written in turn."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import zlib
from typing import Any, Callable

import msgspec

from rillet.cipher import AssetKey, CipherError, KeyRing
from rillet.durable import fsync_dir, make_dirs_durable
from ._common import MemConsumerStore
from ._fsformat import CONSUMER_MAGIC, _CRC
from ._fsio import _atomic_write, _write_all
from .base import ErrStoreFull, LogFn, decode_consumer_state

WriteFn = Callable[[int, list[bytes], int, int], None]

CONSUMER_MAGIC2 = b"RILCNS02"  # a consumer state slot (FileConsumerStore)
CONSUMER_MAGIC3 = b"RILCNS03"  # the same, the state sealed by the consumer's key (encryption at rest)
_CSLOT = struct.Struct("<QI")  # generation, length of the encoded (or sealed) state


def _parse_consumer_slot(buf: bytes, key: AssetKey | None = None) -> tuple[int, bytes] | None:
    """(generation, encoded state) of a consumer state file, any form; None when it does not check.
    A sealed slot needs ``key`` (without it, or when it does not open: None)."""
    if len(buf) < 12:
        return None
    (crc,) = _CRC.unpack_from(buf, 8)
    if buf[:8] == CONSUMER_MAGIC:
        gen, enc = 0, buf[12:]
        ok = zlib.crc32(enc) == crc
    elif buf[:8] in (CONSUMER_MAGIC2, CONSUMER_MAGIC3) and len(buf) >= 12 + _CSLOT.size:
        gen, n = _CSLOT.unpack_from(buf, 12)
        end = 12 + _CSLOT.size + n
        enc = buf[12 + _CSLOT.size:end]
        ok = end <= len(buf) and zlib.crc32(memoryview(buf)[12:end]) == crc
        if ok and buf[:8] == CONSUMER_MAGIC3:
            if key is None:
                return None
            try:
                enc = key.open(enc)
            except CipherError:
                return None
    else:
        return None
    if not ok:
        return None
    try:
        decode_consumer_state(enc)
    except msgspec.DecodeError:
        return None
    return gen, enc


_SEALED = b"\0sealed\0"  # a name file sealed by the consumer's key (a plain name has no NUL)


def _name_sealed(nfn: str) -> bool:
    with open(nfn, "rb") as f:
        return f.read(len(_SEALED)) == _SEALED


def _read_name(nfn: str, key: AssetKey | None) -> str | None:
    """The consumer's name from its name file (None when it cannot be read)."""
    try:
        with open(nfn, "rb") as f:
            raw = f.read()
        if raw.startswith(_SEALED):
            if key is None:
                return None
            raw = key.open(raw[len(_SEALED):])
        return raw.decode("utf-8", "surrogateescape")
    except (OSError, UnicodeDecodeError, CipherError):
        return None


def _state_key(path: str, keys: KeyRing | None, context: str) -> AssetKey | None:
    """The key that seals a consumer's state slots (encryption at rest), from its record ``<path>/key``:
    made when missing, re-sealed when only prev_key opens it. None without keys; CipherError when a record
    is there and no key (or no configured key) opens it (nothing written then)."""
    kpath = os.path.join(path, "key")
    try:
        with open(kpath, "rb") as f:
            rec: bytes | None = f.read()
    except FileNotFoundError:
        rec = None
    if keys is None:
        if rec is not None:
            raise CipherError("encryption not enabled")
        return None
    if rec is None:
        key, rec = keys.new_asset(context)
        _atomic_write(kpath, rec, True)
        return key
    r = keys.recover(context, rec)
    if r.rotated:
        _atomic_write(kpath, keys.rewrap(context, r.key), True)
    return r.key


class FileConsumerStore(MemConsumerStore):
    """Consumer state in ``<dir>/consumers/<name>/``, in two slots written in turn: ``state`` and
    ``state.1``, each ``RILCNS02`` + crc32 + generation (u64) + length (u32) + the encoded state (the crc
    covers what follows it). A write overwrites the older slot in place (no new file, no rename: a rename
    over a file makes ext4 write its data back at once, ~1 ms a time); the newer valid slot is the state
    when the store opens, so a write torn by a power loss leaves the one before. A ``state`` written by an
    earlier Rillet (``RILCNS01`` + crc32 + state, a snapshot's form too) is generation 0. Encrypted at rest
    a slot is ``RILCNS03``, the same with the state sealed by the consumer's key (a plaintext slot found
    under a key is read, and sealed at the next write).

    ``update`` records the state in memory; ``flush`` writes it and ``sync`` also fsyncs it (and the
    directory once a slot file was created).  The stream's ``flush``/``sync``/``stop`` do this for every
    consumer.
    """

    def __init__(self, name: str | None, path: str, log: LogFn, write: WriteFn = _write_all,
                 keys: KeyRing | None = None, stream: str = "") -> None:
        """``name`` None: a consumer found on disk, its name read from its name file. With ``keys``
        (encryption at rest) the state slots and the name file are sealed by the consumer's key (its record
        in ``<path>/key``, derived for ``stream`` and the directory's name): no file names the consumer
        or holds its state in plaintext, as with nats-server."""
        make_dirs_durable(path)
        key = _state_key(path, keys, f"{stream} > {os.path.basename(path)} state")
        nfn = os.path.join(path, "name")
        if name is None:
            name = _read_name(nfn, key) or os.path.basename(path)
        if not os.path.exists(nfn) or (key is not None and not _name_sealed(nfn)):
            raw = name.encode("utf-8", "surrogateescape")
            _atomic_write(nfn, _SEALED + key.seal(raw) if key is not None else raw, True)
        super().__init__(name)
        self._key = key
        self.path = path
        self._write_fn = write  # (the file store passes its own: see FileStore._pwrite_all)
        self._dirty = False
        self._log = log
        self._wlock = threading.Lock()
        self._unsynced = False  # written without fsync: sync() makes it durable
        self._dir_unsynced = False  # a slot file was created since the directory was last fsynced
        self._gen = 0  # the generation of the newest slot
        self._slot = 1  # the slot that holds it (the next write goes to the other one)
        best = None
        for slot in (0, 1):
            fn = self._slot_path(slot)
            try:
                with open(fn, "rb") as f:
                    buf = f.read()
            except FileNotFoundError:
                continue
            got = _parse_consumer_slot(buf, self._key)
            if got is None:
                log("error", f"consumer {name!r}: state file {fn} is corrupt, ignored")
                continue
            if best is None or got[0] > best[0]:
                best = (got[0], slot, got[1])
        if best is not None:
            self._gen, self._slot, self._enc = best

    def _slot_path(self, slot: int) -> str:
        return os.path.join(self.path, "state" if slot == 0 else "state.1")

    def update(self, state: Any) -> None:
        super().update(state)
        self._dirty = True

    def flush(self, durable: bool = False) -> None:
        if self._closed or not (self._dirty or durable):
            return
        with self._wlock:
            if not self._dirty and not durable:
                return
            self._dirty = False  # before taking the state: a later update marks it again
            enc = self._enc
            if enc is None:
                return
            gen = self._gen + 1
            slot = 1 - self._slot
            magic = CONSUMER_MAGIC2
            if self._key is not None:
                magic, enc = CONSUMER_MAGIC3, self._key.seal(enc)
            body = _CSLOT.pack(gen, len(enc)) + enc
            data = magic + _CRC.pack(zlib.crc32(body)) + body
            fn = self._slot_path(slot)
            try:
                created = not os.path.exists(fn)
                fd = os.open(fn, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    self._write_fn(fd, [data], 0, len(data))
                    os.ftruncate(fd, len(data))
                    if durable:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                if created:
                    self._dir_unsynced = True
                if durable and self._dir_unsynced:
                    fsync_dir(self.path)
                    self._dir_unsynced = False
            except OSError as e:
                self._dirty = True
                raise ErrStoreFull(f"consumer {self.name!r}: {e.strerror or e}") from e
            self._gen, self._slot = gen, slot
            self._unsynced = not durable

    def sync(self) -> None:
        if self._dirty:
            self.flush(durable=True)
        elif self._unsynced and not self._closed:
            # written by an earlier flush without fsync: the slot, and the directory when the slot is new
            with self._wlock:
                self._unsynced = False
                try:
                    fd = os.open(self._slot_path(self._slot), os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    if self._dir_unsynced:
                        fsync_dir(self.path)
                        self._dir_unsynced = False
                except OSError as e:
                    self._unsynced = True
                    raise ErrStoreFull(f"consumer {self.name!r}: {e.strerror or e}") from e

    def stop(self) -> None:
        if not self._closed:
            try:
                self.flush(durable=True)
            finally:
                self._closed = True

    def delete(self) -> None:
        self._closed = True
        self.deleted = True
        self._enc = None
        shutil.rmtree(self.path, ignore_errors=True)
