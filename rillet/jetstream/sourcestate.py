"""A stream's sourcing state: for each of its sources (by the index name its ``Nats-Stream-Source`` headers carry),
the last origin sequence stored and the origin's identity (nats-server 2.15), as ``Stream.source_pos``.

Every replica derives it from the messages it applies (``seen``, from ``Stream._stored_hdr``), so a new stream
leader's sources resume from it (``SourceSet``), even when the messages it came from were removed since (limits,
purges). What a replica did not apply itself it cannot derive: one that installed a snapshot and fetched only the
messages still stored. With ``feature_flags { js_snapshot_sources: true }`` (nats-server 2.15) a stream group's
snapshots carry the state (``snapshot_fields``: ``"sources": {index name: [seq, identity]}`` beside the sequence
state, rillet.jetstream.cluster.streams), and a replica installing one takes it (``restore``, whatever the flag:
nats-server also accepts both forms, and emits the new one only with the flag). Without it a replica that caught up
that way knows only what it applied after the snapshot, and the Nats-Stream-Source headers still stored."""
from __future__ import annotations

from typing import Any

SOURCE_HDR = "Nats-Stream-Source"


def seen(stream: Any, hdr: bytes) -> None:
    """A stored message's ``Nats-Stream-Source`` header: ``<origin> <seq> <filters> <dests> <subject> [<identity>]``
    (the shorter forms of older servers too)."""
    from rillet.jetstream.headers import get_header
    v = get_header(hdr, SOURCE_HDR)
    parts = v.split(" ") if v else ()
    if len(parts) > 1 and parts[1].isdigit():
        stream.source_pos[parts[0]] = (int(parts[1]), parts[5] if len(parts) > 5 else "")


def snapshot_fields(stream: Any) -> dict[str, Any]:
    """What a stream group's snapshot adds for its sources: nothing unless js_snapshot_sources is on."""
    from rillet.config.features import enabled
    if not stream.source_pos or not enabled(stream.js.server.opts, "js_snapshot_sources"):
        return {}
    return {"sources": {k: [seq, ident] for k, (seq, ident) in stream.source_pos.items()}}


def restore(stream: Any, snap: dict) -> None:
    """A snapshot installed: its sources' positions replace what this replica had for them (the snapshot is the
    group's state at its index; what the replica applies after it updates them again)."""
    src = snap.get("sources")
    if isinstance(src, dict):
        for k, v in src.items():
            if isinstance(k, str) and isinstance(v, (list, tuple)) and len(v) == 2 and isinstance(v[0], int):
                stream.source_pos[k] = (v[0], str(v[1] or ""))


def position(stream: Any, iname: str) -> tuple[int, str] | None:
    """(last origin sequence, origin identity) known for source ``iname``, or None."""
    return stream.source_pos.get(iname)
