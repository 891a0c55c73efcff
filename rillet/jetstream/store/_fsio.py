"""File writes of the file store: all of a buffer list at an offset, a short write finished, a file replaced
atomically (temp file, fsync, rename, directory fsync)."""

from __future__ import annotations

import errno
import os

from rillet.durable import fsync_dir

def _write_all(fd: int, bufs: list[bytes], off: int, total: int) -> None:
    n = os.pwritev(fd, bufs, off)
    if n != total:
        _write_rest(fd, b"".join(bufs), off, n, total)


def _write_rest(fd: int, data: bytes, off: int, n: int, total: int) -> None:
    """A short write (``n`` of ``data``'s ``total`` bytes at ``off``): finish it piecewise (ENOSPC raises
    from here; also the compiled twin's)."""
    while n < total:
        k = os.pwrite(fd, data[n:], off + n)
        if k <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n += k


def _atomic_write(path: str, data: bytes, durable: bool) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n = 0
        while n < len(data):
            n += os.write(fd, data[n:])
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path))
