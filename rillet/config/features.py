"""Feature flags (``feature_flags { name: bool }``, nats-server 2.14+): the flags nats-server 2.15.1 knows, with
its defaults, and the ones Rillet acts on. What a server reports (/varz and the server info of system events)
is every known flag with the configured value or the default; names nats-server does not know are ignored."""
from __future__ import annotations

from typing import Any

FEATURE_FLAGS: dict[str, bool] = {
    "js_ack_fc_v2": False,          # ack and flow control reply subjects with domain and account hash (ADR-15)
    "js_api_reply_v2": False,
    "js_raft_delete_range": True,   # (2.15 default)
    "js_snapshot_sources": False,
}
SUPPORTED = frozenset({"js_ack_fc_v2"})  # the others are accepted at their default only (rillet.config)


def merged(opts: Any) -> dict[str, bool]:
    user = opts.extra.get("feature_flags") or {}
    return {k: bool(user.get(k, v)) for k, v in FEATURE_FLAGS.items()}


def enabled(opts: Any, name: str) -> bool:
    user = opts.extra.get("feature_flags") or {}
    return bool(user.get(name, FEATURE_FLAGS.get(name, False)))
