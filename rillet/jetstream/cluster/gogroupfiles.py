"""The term and vote directories (``<store_dir>/go_meta/<group>/tav.idx``, ``gometa.TermVote``) of the Go stream
and consumer groups that this server's replicas followed, removed once this server is no longer a member of the
group, as nats-server deletes a RAFT node's directory (its ``tav.idx`` with it) when the node's group is removed
from the server (``raft.go`` Delete, from the stream's or consumer's removal or a change of its peers).

``forget_group``: a replica that ``gostream.host_streams`` stops because its group left this server (the stream or
consumer removed, moved away, this server dropped from its peers, or the group renamed: nats-server names a
group of one anew); its directory goes at once. ``prune_groups``: directories of groups that went while this
server was down, removed once its meta state is current after a start (as ``goconsumerstore.prune_orphans``
removes kept consumer states). The meta group's own directory (``_meta_``) is never removed here.

Before, these directories stayed for ever: one per stream and consumer group the server had ever been a member
of.
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Iterable

from rillet.raft import gowire as gw

__all__ = ["forget_group", "prune_groups"]


def _root(store_dir: str) -> str:
    return os.path.join(store_dir, "go_meta")


def _safe(group: str) -> bool:
    """A group name that is one directory entry (nats-server's names are; anything else is not touched)."""
    return bool(group) and group not in (".", "..") and os.sep not in group and "\x00" not in group \
        and (os.altsep is None or os.altsep not in group)


def forget_group(store_dir: str, group: str, log: Any) -> bool:
    """Remove the term and vote directory of ``group`` (not the meta group's); returns whether one was there."""
    if not _safe(group) or group == gw.META_GROUP:
        return False
    path = os.path.join(_root(store_dir), group)
    if not os.path.isdir(path):
        return False
    shutil.rmtree(path)
    log.debug(f"JetStream: the term and vote of group {group!r} removed (no longer a member)")
    return True


def prune_groups(store_dir: str, members_of: Iterable[str], log: Any) -> int:
    """Remove the term and vote directories under ``store_dir`` of groups other than the meta group and those
    in ``members_of`` (the stream and consumer groups the current meta state places on this server); returns
    how many went."""
    root = _root(store_dir)
    keep = set(members_of) | {gw.META_GROUP}
    removed = 0
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        if name in keep or not os.path.isdir(os.path.join(root, name)):
            continue
        shutil.rmtree(os.path.join(root, name))
        removed += 1
    if removed:
        log.notice(f"JetStream: the term and vote of {removed} group(s) this server is no longer a member of "
                   f"removed")
    return removed
