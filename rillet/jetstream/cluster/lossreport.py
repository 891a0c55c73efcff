"""A replicated stream's (or consumer's) report of committed entries its RAFT group lost, kept on disk.

When a majority of a group's members came back from an unclean stop short of entries that had been committed
(a power cut with a lazy ``sync_interval``), nothing can bring those entries back (rillet.raft.node: ``lost``).
The report of that loss is written to ``lost.json`` in the group's directory (beside its WAL; atomically,
fsynced), read again when the replica starts, and shown the same way after a restart: stream info's
``cluster.lost``, /healthz, the ``STREAM.DATA_LOST`` advisory the leader sends again. It goes when the stream or
consumer is deleted (with the group's directory).

Fields (JSON): ``raft_first``/``raft_last``/``entries`` the lost RAFT indexes, ``detected`` (RFC 3339) and
``server`` (who found it first); for a stream also ``seq_mark``, the highest stream sequence a member had saved
with its commit index before the loss (what the lost entries may have reached), and once the stream leader's
LOST entry was applied, ``seq_first``/``seq_last``: the stream sequences skipped so that none that may have been
acknowledged is given to a new message (``msgs`` of them).

A majority can also lose the unsynced tail of the log past the last commit index any member had saved: no
committed entry is then known to be missing, but the stream sequences up to the highest saved mark may have been
acknowledged. That is reported too (``unsynced_tail``: true), with no RAFT range (``raft_first`` 1,
``raft_last`` 0, ``entries`` 0) and the skipped sequences as ``seq_first``..``seq_last``: messages that may have
been acknowledged and are gone.

When fewer replicas than a quorum kept their logs (the others' stores wiped), committed entries past the best
log left may be gone, and nothing says how far they went: ``open_end`` (true) says ``raft_last`` is only the
first index known to be lost, not the end (rillet.raft: ``lost_open``; the group elects no leader then, until an
operator accepts the loss: ``accepted``, when; rillet/jetstream/cluster/resume.py).

A report carries no ``bytes`` (nats-server's ``lost`` of damaged records has one: ``state.lost.bytes``): the lost
entries are gone from every member, and what they held, sizes included, with them. A consumer's report has no
``seq_*`` fields; its leader proposes it (a LOST entry, consumer_loss.py) as a stream's leader does.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from rillet.durable import read_json, write_json

FILE = "lost.json"


def load(dirpath: str) -> Optional[dict]:
    """The report saved in ``dirpath``, or None. A file that cannot be read as a report raises ValueError."""
    path = os.path.join(dirpath, FILE)
    d = read_json(path, "a loss report")
    if d is None:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("raft_first"), int) or not isinstance(d.get("raft_last"), int):
        raise ValueError(f"{path}: not a loss report")
    return d


def load_or_flag(dirpath: str, log: Any) -> Optional[dict]:
    """``load``, but a report that cannot be read is logged and stands as a report of an unknown loss (the
    replica stays unhealthy rather than forgetting that something was lost)."""
    try:
        return load(dirpath)
    except (OSError, ValueError) as e:
        log.error(f"JetStream cluster: {e}: kept as a loss of unknown extent")
        return {"raft_first": 0, "raft_last": 0, "entries": 0, "unreadable": str(e)}


def save(dirpath: str, report: dict) -> None:
    """Write ``report`` durably (temporary file fsynced, renamed, directory fsynced)."""
    os.makedirs(dirpath, exist_ok=True)
    write_json(dirpath, FILE, report)


def save_for(group: Any, report: dict | None, log: Any, what: str) -> None:
    """A stream's or consumer's report (``what`` names it in the log) saved in its RAFT group's directory; a
    memory group keeps none. A failed write is logged, the report kept in memory."""
    if group.memory or report is None:
        return
    try:
        save(group.dir, report)
    except OSError as e:
        log.error(f"JetStream cluster {what}: saving the loss report failed: {e}")


def merge(old: Optional[dict], new: dict) -> dict:
    """One report covering both (the union of the RAFT ranges, the highest marks, the first detection)."""
    if old is None:
        out = dict(new)
    else:
        out = dict(old)
        if _no_range(old):
            out["raft_first"], out["raft_last"] = new["raft_first"], new["raft_last"]
        elif not _no_range(new):
            out["raft_first"] = min(old["raft_first"], new["raft_first"])
            out["raft_last"] = max(old["raft_last"], new["raft_last"])
        for k in ("unsynced_tail", "open_end"):
            if new.get(k):
                out[k] = True
        for k in ("seq_mark", "seq_last"):
            if k in new:
                out[k] = max(old.get(k, 0), new[k])
        if "seq_first" in new:
            out["seq_first"] = min(old.get("seq_first", new["seq_first"]), new["seq_first"])
        if new.get("accepted") and not old.get("accepted"):
            out["accepted"] = new["accepted"]
    out["entries"] = max(0, out["raft_last"] - out["raft_first"] + 1)
    if "seq_first" in out and "seq_last" in out:
        out["msgs"] = max(0, out["seq_last"] - out["seq_first"] + 1)
    return out


def _no_range(report: dict) -> bool:
    """The report names no lost RAFT entries (an unsynced tail only)."""
    return report["raft_last"] < report["raft_first"]


def describe(report: dict) -> str:
    """The loss in a few words (/healthz): the lost RAFT entries, or the sequences an unsynced tail may have held."""
    if _no_range(report):
        return (f"lost its unsynced tail: acknowledged messages {report.get('seq_first', '?')}.."
                f"{report.get('seq_last', '?')} may be gone")
    if report.get("open_end"):
        return (f"lost committed entries from {report['raft_first']} on (fewer replicas than a quorum kept their "
                f"logs)")
    return f"lost committed entries {report['raft_first']}..{report['raft_last']}"


def pending(report: Optional[dict]) -> bool:
    """The report names sequences the stream has not skipped yet (no LOST entry covering them applied)."""
    if report is None:
        return False
    return "seq_last" not in report or report["seq_last"] < report.get("seq_mark", 0)
