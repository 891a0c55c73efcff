"""The ``authorization { auth_callout {...} }`` block, parsed and checked as nats-server does.

The config builder checks it when the file is loaded (``-t``); the server's authorization callout
(``rillet.server.auth_callout``) runs with the parsed ``CalloutConfig``.
"""
from __future__ import annotations

from typing import Any

from rillet.gocompat.goquote import go_quote, go_type as _go_type

from .checks import is_valid_public_nkey

GLOBAL_ACCOUNT = "$G"


class CalloutConfig:
    __slots__ = ("issuer", "account", "auth_users", "xkey", "allowed_accounts")

    def __init__(self) -> None:
        self.issuer = ""
        self.account = GLOBAL_ACCOUNT
        self.auth_users: list[str] = []
        self.xkey = ""
        self.allowed_accounts: list[str] = []


class CalloutConfigError(ValueError):
    """A bad ``auth_callout`` block; ``key`` names the entry at fault (None: the block as a whole)."""

    def __init__(self, key: str | None, msg: str) -> None:
        super().__init__(msg)
        self.key = key


def parse_auth_callout(raw: Any) -> CalloutConfig:
    """The ``auth_callout`` block, checked as nats-server checks it (ValueError with its messages)."""
    if not isinstance(raw, dict):
        raise ValueError(f"Expected authorization callout to be a map/struct, got {raw!r}")
    ac = CalloutConfig()
    for k, v in raw.items():
        key = k.lower()
        if key == "issuer":
            ac.issuer = str(v)
            if not is_valid_public_nkey(ac.issuer, "A"):
                raise CalloutConfigError(k, f"Expected callout user to be a valid public account nkey, got {go_quote(ac.issuer)}")
        elif key in ("account", "acc"):
            ac.account = str(v)
        elif key in ("auth_users", "users"):
            if not isinstance(v, list):
                raise CalloutConfigError(k, f"Expected auth_users field to be an array, got {_go_type(v)}")
            ac.auth_users = [str(u) for u in v]
        elif key in ("xkey", "key"):
            ac.xkey = str(v)
            if not is_valid_public_nkey(ac.xkey, "X"):
                raise CalloutConfigError(k, f"Expected callout xkey to be a valid public xkey, got {go_quote(ac.xkey)}")
        elif key == "allowed_accounts":
            if not isinstance(v, list):
                raise CalloutConfigError(k, f"Expected allowed accounts field to be an array, got {_go_type(v)}")
            ac.allowed_accounts = [str(a) for a in v]
        else:
            raise CalloutConfigError(k, f"Unknown field {go_quote(k)} parsing authorization callout")
    if not ac.account:
        ac.account = GLOBAL_ACCOUNT
    if not ac.issuer:
        raise CalloutConfigError(None, "Authorization callouts require an issuer to be specified")
    if not ac.auth_users:
        raise CalloutConfigError(None, "Authorization callouts require authorized users to be specified")
    return ac
