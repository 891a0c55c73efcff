"""Which damaged records of a stream were reported already, kept on disk beside its store.

A stream that cannot fetch a damaged record again (R1, or no replica holds a healthy copy) reports it: an error
in the log and the ``STREAM.DATA_LOST`` advisory (Stream ``_store_damaged``). The damaged record stays in its
block (it was not deleted), so every later open of the store finds it again and stream info keeps showing it in
``state.lost``; the report itself is made once per damaged sequence, not at every start. The sequences reported
are kept in ``damage.json`` in the stream's directory (beside ``store/``; written atomically and fsynced, after
the report went out: a crash in between reports it again rather than never). It goes with the stream's
directory when the stream is deleted, and shrinks to what the store still holds as damaged at each report.

Fields (JSON): ``reported``, the sequences as ``[first, last]`` ranges; ``detected`` (RFC 3339), when the first
of them was reported; ``server``, the server that reported them.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterable

from rillet.durable import fsync_dir, read_json, write_json
from rillet.gocompat.gotime import format_time

FILE = "damage.json"
# (replicated streams) the damaged sequences no replica holds a healthy copy of (stream_loss: every replica that
# asked the others keeps them): not fetched again, kept damaged in place; the same format
EVERYWHERE_FILE = "damage_everywhere.json"
# (report_open_damage) a clustered server reports damage found at open once its meta group is current, or after
# this many seconds
OPEN_DAMAGE_WAIT = 30.0


def report_open_damage(stream: Any, tries: int) -> None:
    """(``Stream.start``) Report the damage the store found when it opened, once listeners can hear of it: on one
    server at once (JetStream starts every stream in one pass: one capturing advisories has subscribed by now);
    in a cluster once this server's meta group is current (its routes are up: the other servers' interest in the
    advisory is known), or after OPEN_DAMAGE_WAIT seconds whatever it is."""
    if stream.closed:
        return
    cl = getattr(stream.js, "cluster", None)
    if cl is not None and tries * 0.25 < OPEN_DAMAGE_WAIT:
        g = cl.group
        if g is None or not g.current():
            stream.js.loop.call_later(0.25, report_open_damage, stream, tries + 1)
            return
    store_damaged(stream, "when the store opened")


def store_damaged(stream: Any, when: str = "while running") -> None:
    """Records found damaged (the store's ``state().lost``; never served: reads answer as for a missing message),
    while running or (``Stream.start``) when the store opened. A replicated stream fetches them again from a
    healthy replica (``refetch_damaged``, the path of damage found when the store opens); otherwise they are
    reported: ``state.lost`` in stream info (from the store: every open finds the damaged records again, they stay
    in their blocks), and once per damaged sequence an error in the log and the ``stream_data_lost`` advisory
    (``report_new``: the sequences reported are kept on disk, not reported again after a restart)."""
    if stream.closed:
        return
    lost = stream.store.state().lost
    if not lost:
        return
    rep = stream.replication
    if rep is not None and rep.refetch_damaged():
        return
    report_new(stream, lost, when)


def to_ranges(seqs: Iterable[int]) -> list[list[int]]:
    """Sorted ``[first, last]`` ranges covering ``seqs``."""
    out: list[list[int]] = []
    for s in sorted(set(seqs)):
        if out and out[-1][1] + 1 == s:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def from_ranges(ranges: Any) -> set[int]:
    """The sequences of ``[first, last]`` ranges; ValueError when they are not such ranges."""
    if not isinstance(ranges, list):
        raise ValueError("'reported' is not a list")
    out: set[int] = set()
    for r in ranges:
        if not isinstance(r, list) or len(r) != 2 or not all(type(v) is int for v in r) or not 1 <= r[0] <= r[1]:
            raise ValueError(f"bad range {r!r}")
        out.update(range(r[0], r[1] + 1))
    return out


def load(dirpath: str, file: str = FILE) -> dict | None:
    """The report kept in ``dirpath`` (``reported`` as a set of sequences), or None when there is none. A file
    that cannot be read as one raises ValueError (OSError when it cannot be read at all)."""
    path = os.path.join(dirpath, file)
    d = read_json(path, "a damage report")
    if d is None:
        return None
    try:
        if not isinstance(d, dict):
            raise ValueError("not an object")
        d["reported"] = from_ranges(d.get("reported"))
    except ValueError as e:
        raise ValueError(f"{path}: not a damage report: {e}") from None
    return d


def save(dirpath: str, reported: Iterable[int], detected: str, server: str, file: str = FILE) -> None:
    """Keep ``reported`` (temporary file fsynced, renamed over the old one, directory fsynced). Nothing left to
    keep (the damaged records went: purged, deleted) removes the file."""
    path = os.path.join(dirpath, file)
    ranges = to_ranges(reported)
    if not ranges:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        fsync_dir(dirpath)
        return
    write_json(dirpath, file, {"reported": ranges, "detected": detected, "server": server})


def report_new(stream: Any, lost: list[int], when: str) -> None:
    """Report the damaged records of ``stream`` (its store's ``state().lost``) that were not reported before
    (by this process or, kept in ``damage.json``, an earlier one): an error in the log and the
    ``STREAM.DATA_LOST`` advisory naming the newly found sequences, then the report kept. Damage reported
    already is not reported again (stream info's ``state.lost`` keeps showing all of it)."""
    js = stream.js
    where = f"Stream '{stream.jsa.account.name} > {stream.name}'"
    seen = stream._damage_reported
    dirpath = None
    if stream.cfg.storage == "file":
        dirpath = os.path.dirname(getattr(stream.store, "dir", "") or "") or None
    if seen is None:
        seen = set()
        if dirpath is not None:
            try:
                d = load(dirpath)
            except (OSError, ValueError) as e:  # (reported again rather than never)
                js.log.error(f"{where}: {e}: the damaged records are reported again")
                d = None
            if d is not None:
                seen = d["reported"]
                stream._damage_detected = d.get("detected") or ""
        stream._damage_reported = seen
    new = [s for s in lost if s not in seen]
    if not new:
        return
    first = min(new)
    more = f", {len(lost)} in all" if len(lost) > len(new) else ""
    js.log.error(f"{where}: {len(new)} message(s) lost to damaged records found {when} (first {first}{more}): "
                 f"no replica to fetch them from")
    rep = stream.replication
    if rep is None or getattr(rep, "leader", True):  # (a replicated stream's: its leader's advisory)
        lost_bytes = getattr(stream.store, "lost_bytes", None)
        js.advisories.stream_data_lost(stream.jsa, stream.name, {"msgs": new,
                                                                 "bytes": lost_bytes(new) if lost_bytes else 0,
                                                                 "cause": "damaged records"})
    seen.intersection_update(lost)
    seen.update(new)
    if not stream._damage_detected:
        stream._damage_detected = format_time(time.time_ns())
    if dirpath is None:
        return
    try:
        save(dirpath, seen, stream._damage_detected, js.server.name)
    except OSError as e:
        js.log.error(f"{where}: keeping the report of damaged records failed ({e}): they are reported again "
                     f"at the next start")
