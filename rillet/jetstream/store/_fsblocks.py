"""The file store's block files: their encryption at rest, the loaded block indexes (an LRU of sealed blocks'
indexes, the active block's always), creating, activating, sealing and removing blocks, and the cache of
open file descriptors.  A mixin of ``FileStore``."""

from __future__ import annotations

import os
import time
import zlib

from rillet.cipher import BlockStream, CipherError, block_stream, open_block_stream
from ._fsformat import BLOCK_MAGIC
from ._fsindex import Block, BlockIndex, encode_index, read_columns, read_summary
from ._fsio import _atomic_write
from ._fsquery import _NOKEY
from .base import ErrStoreCorrupt, ErrStoreFull, LogFn, StoreConfig

_FD_CACHE = 64
_IDX_CACHE = 8  # loaded indexes of sealed blocks kept (LRU), besides the active block's
_IDX_IDLE = 30.0  # seconds: a loaded index unused for this long is dropped at the next load


class BlockFiles:
    dir: str
    cfg: StoreConfig
    log: LogFn

    # -- encryption at rest -----------------------------------------------------------
    # ``<dir>/key``: the store's key record (context: the stream name), opened first: a wrong key stops the
    # open with KeyRecoveryError ('unable to recover keys') before any file is read or changed.
    # ``msgs/<n>.key``: block n's key record (context ``<stream>:<n>``); the block's bytes are XORed with
    # its keystream at their file offsets.  Index files are not written (blocks are scanned instead).

    def _setup_keys(self) -> None:
        kpath = os.path.join(self.dir, "key")
        if self._keys is None:
            if os.path.exists(kpath):
                raise CipherError("encryption not enabled")
            return
        try:
            with open(kpath, "rb") as f:
                rec: bytes | None = f.read()
        except FileNotFoundError:
            rec = None
        ctx = self.cfg.name
        if rec is not None:
            r = self._keys.recover(ctx, rec)  # KeyRecoveryError: nothing touched
            if r.rotated:
                _atomic_write(kpath, self._keys.rewrap(ctx, r.key), True)
            return
        # a new store, or a plaintext one (restored from a snapshot, or made before a key was set): encrypt it
        for fn in sorted(os.listdir(self._msgdir)):
            path = os.path.join(self._msgdir, fn)
            if fn.endswith(".idx"):
                os.unlink(path)
            elif fn.endswith(".blk") and fn[:-4].isdigit():
                with open(path, "rb") as f:
                    data = f.read()
                bs, brec = block_stream(self._keys, f"{ctx}:{int(fn[:-4])}")
                _atomic_write(path + ".enc", bs.xor(data, 0), True)
                _atomic_write(path[:-4] + ".key", brec, True)
                os.replace(path + ".enc", path)
        _, rec = self._keys.new_asset(ctx)
        _atomic_write(kpath, rec, True)

    def _bkey_path(self, index: int) -> str:
        return os.path.join(self._msgdir, f"{index:010d}.key")

    def _new_bstream(self, index: int) -> None:
        bs, rec = block_stream(self._keys, f"{self.cfg.name}:{index}")  # type: ignore[arg-type]
        _atomic_write(self._bkey_path(index), rec, True)  # (durable first: its block is unreadable without it)
        self._bks[index] = bs

    def _bstream(self, index: int) -> BlockStream:
        bs = self._bks.get(index)
        if bs is None:
            kp = self._bkey_path(index)
            try:
                with open(kp, "rb") as f:
                    rec = f.read()
            except OSError as e:
                raise ErrStoreCorrupt(f"cannot read the key of block {index}: {e.strerror or e}") from e
            bs, new = open_block_stream(self._keys, f"{self.cfg.name}:{index}", rec)  # type: ignore[arg-type]
            if new is not None:
                _atomic_write(kp, new, True)  # key rotation: sealed with the current key
            self._bks[index] = bs
        return bs

    def _crypt(self, index: int, bufs: list, off: int) -> list:
        """Block bytes as written to (or read from) the file at ``off``."""
        if self._keys is None:
            return bufs
        return [self._bstream(index).xor(b"".join(bufs), off)]

    def _pread(self, index: int, fd: int, n: int, off: int) -> bytes:
        buf = os.pread(fd, n, off)
        return buf if self._keys is None else self._bstream(index).xor(buf, off)

    # -- block indexes --------------------------------------------------------------

    def _idx(self, blk: Block) -> BlockIndex:
        if blk is self._active:
            return self._aidx  # type: ignore[return-value]
        x = self._cache.get(blk.index)
        if x is not None:
            if not x.used:
                x.used = True
            return x
        x = self._pinned.get(blk.index)
        if x is not None:
            return x
        return self._load_idx(blk)

    def _cache_put(self, index: int, x: BlockIndex) -> None:
        cache = self._cache
        cache[index] = x
        cache.move_to_end(index)
        while len(cache) > _IDX_CACHE:
            cache.popitem(last=False)

    def _load_idx(self, blk: Block) -> BlockIndex:
        """Load a sealed block's index: from its index file if it checks out, else by scanning the block."""
        now = time.monotonic()
        if now - self._cache_sweep > _IDX_IDLE:
            self._drop_idle()
        x = None
        if blk.idx_on_disk:
            ipath = self._idx_path(blk)
            s = read_summary(ipath)
            if s is not None and s.first == blk.first and s.last == blk.last and s.fsize == blk.size:
                x = read_columns(ipath, s)
                if x is not None and x.subjs != list(blk.smap):
                    x = None
            if x is None:
                self.log("warn", f"{ipath}: index unreadable or stale; the block is scanned")
                blk.idx_on_disk = False
                self._unlink_quiet(ipath)
        if x is None:
            x = self._rescan(blk)
            self._write_index(blk, x)
        self._cache_put(blk.index, x)
        return x

    def _drop_idle(self) -> None:
        """Drop the loaded indexes not used since the last sweep."""
        self._cache_sweep = time.monotonic()
        for index, x in list(self._cache.items()):
            if x.used:
                x.used = False
            else:
                del self._cache[index]

    def _write_index(self, blk: Block, x: BlockIndex) -> None:
        """Write the block's index file (no fsync: it is checked against the block when read)."""
        if blk.bad or not blk.first or not len(x.offs) or self._keys is not None:
            return  # (an encrypted store keeps no index files: its blocks are scanned on open)
        try:
            bcrc = zlib.crc32(self._read_block(blk))
            _atomic_write(self._idx_path(blk), encode_index(blk, x, bcrc, self._index_totals), False)
        except OSError as e:
            if not self._idx_warned:
                self._idx_warned = True
                self.log("warn", f"cannot write index of {blk.path}: {e.strerror or e}")
            return
        blk.idx_on_disk = True

    # -- blocks ---------------------------------------------------------------------

    def _block_path(self, index: int) -> str:
        return os.path.join(self._msgdir, f"{index:010d}.blk")

    def _init_block_file(self, blk: Block) -> None:
        self._rc = None
        fd = os.open(blk.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 0)
            if self._keys is not None:
                self._new_bstream(blk.index)
            os.pwrite(fd, self._crypt(blk.index, [BLOCK_MAGIC], 0)[0], 0)
        finally:
            os.close(fd)
        blk.size = len(BLOCK_MAGIC)

    def _activate(self, blk: Block) -> None:
        x = self._cache.pop(blk.index, None) or self._pinned.get(blk.index)
        if x is None and self._active is blk:
            x = self._aidx
        if x is None:
            if blk.first:
                x = self._load_idx(blk)
                self._cache.pop(blk.index, None)
            else:
                x = BlockIndex()
        if blk.idx_on_disk:
            # appends will make it stale: rewritten when the block is sealed or the store stops
            blk.idx_on_disk = False
            self._unlink_quiet(self._idx_path(blk))
        with self._lock:
            if self._active is not None and self._active is not blk:
                # The previous active block keeps its fd in the cache until synced.
                self._fds[self._active.index] = self._afd
                self._trim_fds()
            fd = self._fds.pop(blk.index, None)
            if fd is None:
                fd = os.open(blk.path, os.O_RDWR)
            self._active = blk
            self._afd = fd
        self._aidx = x

    def _seal_active(self) -> None:
        """The active block is full: its index goes to the cache and to its index file."""
        blk = self._active
        x = self._aidx
        if blk is None or x is None:
            return
        if blk.bad:
            self._pinned[blk.index] = x
        else:
            self._write_index(blk, x)
            self._cache_put(blk.index, x)

    def _new_block(self) -> Block:
        if self._wb_off >= 0:
            self.flush_writes()
        index = (self._bl[-1].index + 1) if self._bl else 1
        path = self._block_path(index)
        blk = Block(index, path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise ErrStoreFull(f"cannot create block {path}: {e.strerror or e}") from e
        try:
            if self._keys is not None:
                self._new_bstream(index)
            self._pwrite_all(fd, self._crypt(index, [BLOCK_MAGIC], 0), 0, len(BLOCK_MAGIC))
        except OSError as e:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise ErrStoreFull(f"cannot write block {path}: {e.strerror or e}") from e
        self._seal_active()
        self._unlink_quiet(self._idx_path(blk))
        blk.size = len(BLOCK_MAGIC)
        self._blocks[index] = blk
        self._bl.append(blk)
        self._bfirst.append(_NOKEY)
        with self._lock:
            self._dir_dirty = True  # the next sync makes the new file's directory entry durable
            if self._active is not None:
                self._fds[self._active.index] = self._afd
            self._active = blk
            self._afd = fd
            self._trim_fds()
        self._aidx = BlockIndex()
        return blk

    def _trim_fds(self) -> None:
        while len(self._fds) > _FD_CACHE:
            index, fd = next(iter(self._fds.items()))
            blk = self._blocks.get(index)
            if blk is not None and blk.synced < blk.size and blk is not self._active:
                size = blk.size
                try:
                    os.fsync(fd)
                    blk.synced = size
                except OSError as e:
                    # keep it open: the next sync() tries again and reports the failure to its caller
                    self.log("error", f"fsync of {blk.path} failed: {e.strerror or e}")
                    self._fds.move_to_end(index)
                    return
            del self._fds[index]
            os.close(fd)

    def _fd_for(self, index: int) -> int:
        blk = self._active
        if blk is not None and blk.index == index:
            if self._wb_off >= 0:
                self.flush_writes()  # (what is read or changed in place is on the OS first)
            return self._afd
        fd = self._fds.get(index)
        if fd is not None:
            return fd
        blk = self._blocks.get(index)
        if blk is None:
            raise ErrStoreCorrupt(f"block {index} is missing")
        with self._lock:
            fd = os.open(blk.path, os.O_RDWR)
            self._fds[index] = fd
            self._trim_fds()
        return fd

    def _unlink_block(self, blk: Block) -> None:
        self._rc = None
        with self._lock:
            if blk is self._active:
                os.close(self._afd)
                self._active = None
                self._aidx = None
                self._afd = -1
            fd = self._fds.pop(blk.index, None)
            if fd is not None:
                os.close(fd)
            self._blocks.pop(blk.index, None)
            self._dir_dirty = True
            try:
                os.unlink(blk.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                self.log("error", f"cannot remove block {blk.path}: {e.strerror or e}")
        self._cache.pop(blk.index, None)
        self._pinned.pop(blk.index, None)
        if blk.idx_on_disk or os.path.exists(self._idx_path(blk)):
            self._unlink_quiet(self._idx_path(blk))
        if self._bks.pop(blk.index, None) is not None or self._keys is not None:
            self._unlink_quiet(self._bkey_path(blk.index))
        try:
            i = self._bl.index(blk)
        except ValueError:
            return
        del self._bl[i]
        del self._bfirst[i]

    def _read_block(self, blk: Block, size: int | None = None) -> bytes:
        fd = self._fd_for(blk.index)
        return self._pread(blk.index, fd, blk.size if size is None else size, 0)

    def _close_fds(self) -> None:
        with self._lock:
            if self._afd >= 0:
                os.close(self._afd)
                self._afd = -1
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            if self._log_fd >= 0:
                os.close(self._log_fd)
                self._log_fd = -1
            self._active = None
        self._cache.clear()
