"""The one door from the core server into JetStream (``rillet.jetstream``).

JetStream is a client of the core: streams and the ``$JS.API`` handler are internal subscribers. The
server needs JetStream in three places only: to start it when ``jetstream`` is enabled, to enable it for
accounts a configuration reload adds, and to read the JetStream limits of an operator-mode account JWT.
Those go through here, and this module imports ``rillet.jetstream`` inside its functions, so a server
without JetStream never loads that package. Everything else reaches the running manager through the
``server.jetstream`` attribute. ``tests/test_import_cycles.py`` checks that no other module of
``rillet.server`` imports ``rillet.jetstream``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rillet.jetstream.configtypes import AccountLimits
    from rillet.jetstream.manager import JetStream
    from rillet.server.server import Server


def new_jetstream(server: "Server") -> "JetStream":
    """The JetStream manager of ``server`` (not started: the caller awaits its ``start()``)."""
    from rillet.jetstream.manager import JetStream
    return JetStream(server, clustered=server.cluster is not None)


def account_js_config(accounts: dict[str, Any]) -> "dict[str, AccountLimits]":
    """{account name: limits} for the configured accounts whose ``jetstream`` entry enables JetStream."""
    from rillet.jetstream.manager import account_js_config as limits_of
    return limits_of(accounts)


def account_limits(**limits: Any) -> "AccountLimits":
    """An account's JetStream limits (the fields of ``rillet.jetstream.configtypes.AccountLimits``)."""
    from rillet.jetstream.configtypes import AccountLimits
    return AccountLimits(**limits)
