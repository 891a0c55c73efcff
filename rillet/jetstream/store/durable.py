"""Making a directory tree durable: what was written under it survives an OS crash or a power cut."""
from __future__ import annotations

import os


def sync_tree(path: str) -> None:
    """fsync every file and directory under ``path`` (files first, then each directory after its contents),
    then ``path``'s parent, which holds its entry. Raises OSError."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(root)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
