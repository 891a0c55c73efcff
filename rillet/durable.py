"""Making files and directories durable: what was created, renamed or written survives an OS crash or a power
cut (tests/faults/lazyfs.py checks it). A bottom-layer module: the JetStream stores and the RAFT write-ahead
log use it alike."""
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
        fsync_dir(root)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def fsync_dir(path: str) -> None:
    """fsync a directory, so that files created, renamed or removed in it stay that way. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durable(path: str) -> None:
    """``os.makedirs(path)``, then fsync every directory that got a new entry (the parent of each directory
    created, and the new directories themselves). Raises OSError."""
    path = os.path.abspath(path)
    missing = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    if not missing:
        return
    os.makedirs(path, exist_ok=True)
    for d in missing:
        fsync_dir(d)
        fsync_dir(os.path.dirname(d))


def write_json(dirpath: str, name: str, obj: object, sync: bool = True) -> None:
    """``obj`` as JSON in ``dirpath/name``, durably: a temporary file fsynced, renamed over the old one, the
    directory fsynced. ``sync=False``: the same replacement by a rename without the fsyncs, for a state a
    caller syncs on its own schedule (after a crash the file may be the old one, the new one or, on some file
    systems, empty)."""
    import json
    path = os.path.join(dirpath, name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps(obj, sort_keys=True).encode())
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(dirpath)


def read_json(path: str, what: str) -> object:
    """The JSON kept in ``path``, None when there is no such file; ValueError naming the file and ``what`` it
    should be when it is not JSON (OSError when it cannot be read at all)."""
    import json
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{path}: not {what}: {e}") from None
