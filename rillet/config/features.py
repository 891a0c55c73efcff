"""Feature flags (``feature_flags { name: bool }``, nats-server 2.14+): the flags nats-server 2.15.1 knows, with
its defaults, and the ones Rillet acts on. What a server reports (/varz and the server info of system events)
is every known flag with the configured value or the default; names nats-server does not know are ignored."""
from __future__ import annotations

from typing import Any

FEATURE_FLAGS: dict[str, bool] = {
    "js_ack_fc_v2": False,          # ack and flow control reply subjects with domain and account hash (ADR-15)
    "js_api_reply_v2": False,       # a mirror's or source's API request replies (rillet.jetstream.apireply)
    "js_raft_delete_range": True,   # (2.15 default)
    "js_snapshot_sources": False,   # sources' positions in stream group snapshots (rillet.jetstream.sourcestate)
}
SUPPORTED = frozenset({"js_ack_fc_v2", "js_api_reply_v2", "js_snapshot_sources"})  # the others at their default only
# why a flag is accepted at its default only (rillet.config refuses the other value with this)
ONLY_DEFAULT = {
    # nats-server 2.15 proposes a mirror's gap of deleted sequences as one deleteRange entry, or (false: for peers
    # older than 2.14, which cannot apply it) one entry per sequence; a Rillet stream group always carries the gap
    # in the entry of the mirrored message after it, which every Rillet peer applies
    "js_raft_delete_range": "a Rillet stream group always replicates a mirror's gap of deleted sequences as one "
                            "range (in the entry of the message after it), which every Rillet peer applies",
}


def merged(opts: Any) -> dict[str, bool]:
    user = opts.extra.get("feature_flags") or {}
    return {k: bool(user.get(k, v)) for k, v in FEATURE_FLAGS.items()}


def enabled(opts: Any, name: str) -> bool:
    user = opts.extra.get("feature_flags") or {}
    return bool(user.get(name, FEATURE_FLAGS.get(name, False)))
