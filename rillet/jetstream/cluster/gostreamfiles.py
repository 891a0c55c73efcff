"""The files a Go stream group's replica keeps on a Rillet server under ``<store_dir>/go_streams/<account>/<stream>/``
(rillet.jetstream.cluster.gostream), and whose they are: the group's name and the stream's creation time written
beside them (``_write_group``), so that a restarted server opens them only for that stream (``files_of``: its group,
or its creation time, which a renamed group keeps) and removes those another stream of the same name left
(``stale_files``), and those of streams no longer placed here once the meta state is current after a start
(``prune_streams``). Moved out of gostream.py, but for ``prune_streams``.
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Optional

__all__ = ["files_of", "prune_streams", "replica_created", "replica_group", "stale_files"]


def _safe(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise ValueError(f"not a usable directory name: {name!r}")
    return name


def _write_group(path: str, group: str, created: str = "") -> None:
    """The group name beside a replica's files (``group``), and the stream's creation time as its assignment
    gives it (``created``: the same through every update and rename of its group, other for a stream of the
    same name removed and created again): after a restart, a stream its meta group left on this server alone is
    known as the one these files belong to (host_streams: kept, not handed to gosolo), even when its group was
    renamed while this server was down."""
    _keep(path, "group", group)
    if created:
        _keep(path, "created", created)


def _keep(path: str, fname: str, value: str) -> None:
    """``value`` in ``path/fname`` (replaced whole), unless it holds it already."""
    f = os.path.join(path, fname)
    try:
        with open(f, "r") as fh:
            if fh.read() == value:
                return
    except FileNotFoundError:
        pass
    with open(f + ".tmp", "w") as fh:
        fh.write(value)
    os.replace(f + ".tmp", f)


def _replica_file(store_dir: str, account: str, name: str, fname: str) -> Optional[str]:
    try:
        path = os.path.join(store_dir, "go_streams", _safe(account), _safe(name), fname)
    except ValueError:
        return None  # (a name no replica could have kept files under)
    try:
        with open(path, "r") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def replica_group(store_dir: str, account: str, name: str) -> Optional[str]:
    """The group whose replica files this server keeps for the stream, if any (``_write_group``)."""
    return _replica_file(store_dir, account, name, "group")


def replica_created(store_dir: str, account: str, name: str) -> Optional[str]:
    """The creation time of the stream whose replica files this server keeps, if known (``_write_group``)."""
    return _replica_file(store_dir, account, name, "created")


def files_of(store_dir: str, account: str, name: str, sa: dict) -> bool:
    """Whether the replica files this server keeps for the stream are those of the stream ``sa`` assigns: they
    name its group, or, its group renamed while this server was down (a meta catch-up by snapshot shows the new
    name only), its creation time, which every update and rename of its group keeps."""
    if replica_group(store_dir, account, name) == str((sa.get("group") or {}).get("name") or ""):
        return True
    created = str(sa.get("created") or "")
    return bool(created) and replica_created(store_dir, account, name) == created


def stale_files(store_dir: str, account: str, sa: dict) -> Optional[str]:
    """What names the replica files kept here for the stream of ``sa`` when they are another stream's (one of
    the same name, removed while this server was down and created again: their group is not this one, nor is
    their creation time); None when there are none, or they are this stream's (its group renamed keeps its
    creation time: ``files_of``)."""
    name = str((sa.get("stream") or {}).get("name") or "")
    group = replica_group(store_dir, account, name)
    if group is None or files_of(store_dir, account, name, sa):
        return None
    return f"group {group}, created {replica_created(store_dir, account, name) or 'unknown'}"


def prune_streams(store_dir: str, assigned: set, log: Any) -> int:
    """Remove the replica files under ``store_dir/go_streams`` of streams not in ``assigned`` ((account, stream)
    placed on this server by the current meta state: removed, or moved away, while this server was down), as
    nats-server's checkForOrphans removes the streams it recovered that have no assignment. Returns how many
    went."""
    root = os.path.join(store_dir, "go_streams")
    removed = 0
    for acc in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        adir = os.path.join(root, acc)
        if not os.path.isdir(adir):
            continue
        for name in sorted(os.listdir(adir)):
            if (acc, name) not in assigned and os.path.isdir(os.path.join(adir, name)):
                shutil.rmtree(os.path.join(adir, name))
                removed += 1
                log.notice(f"JetStream stream '{acc} > {name}': its replica files removed (not placed on this "
                           "server)")
        if not os.listdir(adir):
            os.rmdir(adir)
    return removed
