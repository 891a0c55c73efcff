"""The file store's state log writer (``state.log``: first/last markers and tombstones; ``_fsrecover`` reads
it): appends, a retry of what a failed write left pending, and the rewrite from the in-memory state when it
grows.  A mixin of ``FileStore``."""

from __future__ import annotations

import errno
import os
import struct
import threading

from ._fsformat import LOG_MAGIC, L_DEL, L_FIRST, L_LAST, _LAST, _U64, _encode_log
from rillet.durable import fsync_dir

from ._fsio import _atomic_write
from .base import ErrStoreFull

_LOG_COMPACT_MIN = 1 << 20


class StateLog:
    # -- state log ------------------------------------------------------------------

    def _log_append(self, rec: bytes | None) -> None:
        with self._lock:
            d = self._deferred
            if d:
                self._deferred = []
                self._log_pending.append(_encode_log(L_DEL, struct.pack(f"<{len(d)}Q", *d)))
            if rec is not None:
                self._log_pending.append(rec)
            if self._log_pending:
                self._flush_log_pending_locked(True)

    def _flush_log_pending(self, allow_rewrite: bool = True) -> bool:
        with self._lock:
            return self._flush_log_pending_locked(allow_rewrite)

    def _flush_log_pending_locked(self, allow_rewrite: bool) -> bool:
        data = b"".join(self._log_pending)
        off = self._log_size
        try:
            self._pwrite_all(self._log_fd, [data], off, len(data))
        except OSError as e:
            try:
                os.ftruncate(self._log_fd, off)
            except OSError as e2:
                self.log("error", f"cannot cut off a failed write to the sequence state: {e2.strerror or e2}")
            if not self._log_warned:
                self._log_warned = True
                self.log("error", f"cannot write sequence state ({e.strerror or e}); will retry")
            return False
        self._log_pending.clear()
        self._log_warned = False
        self._log_size = off + len(data)
        if allow_rewrite and self._log_size > self._log_compact_at:
            self._rewrite_log()
        return True

    def _log_state_bytes(self) -> bytes:
        """The whole state log for the current in-memory state (main thread only)."""
        floor = min(self._first, min(self._lost)) if self._lost else self._first
        parts = [
            LOG_MAGIC,
            _encode_log(L_FIRST, _U64.pack(floor)),
            _encode_log(L_LAST, _LAST.pack(self._last, self._last_ts)),
        ]
        # Tombstones needed: removed records inside the blocks (>= first).
        dels: list[int] = []
        last = self._last
        for blk in self._bl:
            d = blk.dead
            if d is None or not blk.first:
                continue
            base = blk.first
            i = d.find(1)
            while i >= 0:
                q = base + i
                if floor <= q <= last:
                    dels.append(q)
                i = d.find(1, i + 1)
        for i in range(0, len(dels), 8192):
            chunk = dels[i : i + 8192]
            parts.append(_encode_log(L_DEL, struct.pack(f"<{len(chunk)}Q", *chunk)))
        return b"".join(parts)

    def _sync_blocks_for_log(self) -> None:
        """fsync every block written since its last sync (and new block files' directory entries) before a
        rewritten state log is made durable: the log's first/last markers must never be on disk ahead of the
        messages they count. (Otherwise, with a lazy sync interval, a server that opened its store after a kill,
        rewriting the log, and then lost power, came back with a log saying the messages existed and blocks
        without them: they read as deleted, and a replica skipped re-storing them from the RAFT log.)"""
        if self._wb_off >= 0 and threading.get_ident() == self._wb_thread:
            self.flush_writes()
        for blk in self._bl:
            size = blk.size
            if blk.synced >= size:
                continue
            fd = self._afd if blk is self._active else self._fds.get(blk.index, -1)
            own = -1
            if fd < 0:
                fd = own = os.open(blk.path, os.O_RDONLY)
            try:
                os.fsync(fd)
                blk.synced = size
            finally:
                if own >= 0:
                    os.close(own)
        if self._dir_dirty:
            fsync_dir(self._msgdir)
            self._dir_dirty = False

    def _rewrite_log(self) -> bool:
        with self._lock:
            return self._rewrite_log_locked()

    def _rewrite_log_locked(self) -> bool:
        path = os.path.join(self.dir, "state.log")
        try:
            self._sync_blocks_for_log()
            data = self._log_state_bytes()
            _atomic_write(path, data, True)
        except OSError as e:
            if self._log_fd < 0:
                if e.errno != errno.ENOSPC or not os.path.exists(path):
                    raise ErrStoreFull(f"cannot write {path}: {e.strerror or e}") from e
                # opened on a full disk: the state log it was recovered from stays as it is (appended to), so
                # the stream is served, and refuses new messages until there is space again
                self.log("warn", f"cannot rewrite {path} ({e.strerror or e}): the disk is full; keeping it")
                with self._lock:
                    self._log_fd = os.open(path, os.O_RDWR)
                self._log_size = os.path.getsize(path)
                self._log_compact_at = self._log_size + _LOG_COMPACT_MIN
                return False
            if not self._log_warned:
                self._log_warned = True
                self.log("error", f"cannot rewrite {path} ({e.strerror or e}); will retry")
            self._log_compact_at = self._log_size + _LOG_COMPACT_MIN
            return False
        with self._lock:
            if self._log_fd >= 0:
                os.close(self._log_fd)
            self._log_fd = os.open(path, os.O_RDWR)
        self._log_size = len(data)
        self._log_pending.clear()
        self._deferred = []
        self._log_compact_at = max(_LOG_COMPACT_MIN, 4 * len(data))
        return True
