"""Configured accounts: per-account mappings, limits, and stream/service exports and imports.

Behaviour follows nats-server's ``accounts {}`` block (opts.go parseAccounts and friends).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rillet.server.server import Server


def configure_accounts(server: "Server") -> None:
    """Create the accounts of ``opts.accounts`` and apply their settings. ValueError: refuse to start."""
    o = server.opts
    raw = o.accounts
    if not isinstance(raw, dict) or not raw:
        return
    from rillet.subjects.mapping import parse_mappings
    for name, cfg in raw.items():
        acc = server.lookup_account(name)
        if not isinstance(cfg, dict):
            continue
        mp = cfg.get("mappings", cfg.get("maps"))
        if mp:
            acc.mappings = parse_mappings(mp, o.cluster.name)
        lim = cfg.get("limits")
        if lim is not None:
            _parse_limits(acc, lim)


def _parse_limits(acc: Any, lim: Any) -> None:
    if not isinstance(lim, dict):
        raise ValueError(f"Expected account limits to be a map/struct, got {lim!r}")
    for k, v in lim.items():
        k = k.lower()
        if k in ("max_connections", "max_conn"):
            acc.mconns = int(v)
        elif k in ("max_subscriptions", "max_subs"):
            acc.msubs = int(v)
        elif k in ("max_payload", "max_pay"):
            acc.mpay = int(v)
        elif k in ("max_leafnodes", "max_leafs"):
            pass
        else:
            raise ValueError(f"Unknown field {k!r} parsing account limits")
