"""Configuration reload of accounts and of the users connected to them (nats-server's reload.go,
``reloadAuthorization``).

* Accounts: new ones are created, removed ones dropped (not ``$G`` nor the system account), and every
  configured account gets its mappings, limits and exports/imports from the new configuration (the
  import wiring is torn down and built again). Accounts that now enable JetStream get it.
* Connected clients, as nats-server does:
  - a user that no longer exists, or whose account changed, is disconnected (it reconnects and lands
    where the new configuration says);
  - a client that no longer authenticates (password changed...) gets ``-ERR 'Authorization Violation'``
    and is disconnected;
  - the others get their new permissions and account limits; each subscription the new permissions no
    longer allow is removed with ``-ERR 'Permissions Violation for Subscription to "x" (sid "1")'``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rillet.gocompat.goquote import go_quote
from rillet.server.accounts import GLOBAL_ACCOUNT

if TYPE_CHECKING:
    from rillet.config.options import Options
    from rillet.server.server import Server

# the internal clients account_config creates to wire exports and imports
_WIRING = ("stream import ", "stream export ", "service import ", "service reply ", "service responses ")


def _drop_internal(srv: "Server", ic: Any) -> None:
    for sub in list(ic.subs.values()):
        ic.remove_sub(sub)
    if ic in srv.internal_clients:
        srv.internal_clients.remove(ic)


def reload_accounts(srv: "Server", old: "Options", new: "Options") -> None:
    """Apply the ``accounts {}`` (and top-level ``mappings {}``) of ``new``; ``srv.opts`` is ``new``."""
    if not new.no_system_account and not new.system_account:
        new.system_account = old.system_account  # the system account stays what it was
    if getattr(srv, "operator", None) is not None:
        return  # operator mode: accounts come from JWTs, not from the configuration
    from rillet.server.account_config import configure_accounts
    from rillet.subjects.mapping import parse_mappings
    wiring = getattr(srv, "_account_wiring", None)
    if wiring is None:
        wiring = [ic for ic in srv.internal_clients if getattr(ic, "name", "").startswith(_WIRING)]
    for ic in wiring:
        _drop_internal(srv, ic)
    configured = set(new.accounts or {})
    keep = {GLOBAL_ACCOUNT, new.system_account or old.system_account}
    sa = getattr(srv, "sysacc", None)
    for name, acc in list(srv.accounts.items()):
        if name not in configured and name not in keep:
            del srv.accounts[name]
            for ic in [ic for ic in srv.internal_clients if ic.account is acc]:
                _drop_internal(srv, ic)
            if sa is not None:
                sa.services.imported.discard(name)
            js = srv.jetstream
            if js is not None:
                js._disabled.pop(name, None)
            srv.log.notice(f"Reloaded: deleted account {go_quote(name.encode())}")
            continue
        acc.mappings = []
        acc.mconns = acc.msubs = acc.mpay = -1
        acc.imports = None
    srv.global_account.mappings = parse_mappings(new.mappings, new.cluster.name) if new.mappings else []
    before = len(srv.internal_clients)
    configure_accounts(srv)
    if new.default_js_domain:
        from rillet.server import jsdomain
        for acc in list(srv.accounts.values()):
            jsdomain.apply(srv, acc)  # (the mappings were made again above)
    srv._account_wiring = [ic for ic in srv.internal_clients[before:]
                           if getattr(ic, "name", "").startswith(_WIRING)]
    js = srv.jetstream
    if js is not None:
        for name, limits in js.configured_accounts(new.accounts).items():
            if name not in js.accounts:
                js.enable_account(srv.lookup_account(name), limits)
        for jsa in js.accounts.values():  # the domain's mappings, after the accounts' mappings were set anew
            jsa.add_domain_mappings()


def recheck_client(srv: "Server", c: Any) -> None:
    """A connected client after a reload: moved or removed users go, the rest get their new rights."""
    from rillet.protocol.parser import ProtocolError
    ac = srv.auth_callout
    if ac is not None and getattr(c, "callout_user", None) is not None:
        ac.recheck(c)  # admitted by the auth callout: nats-server asks it again
        return
    auth = srv.authenticator
    if c.conn_type == "WEBSOCKET":  # a websocket {} block may have its own users
        refresh = getattr(c, "refresh_auth", None)
        if refresh is not None:
            refresh()
        auth = c.auth
    co = c.opts
    key = c.user or co.nkey or co.user  # the user record it was admitted with (or claims)
    if key and (c.user or auth.users or auth.nkeys):
        u = auth.nkeys.get(key) or auth.users.get(key)
        if u is None or (u.account or GLOBAL_ACCOUNT) != c.account.name:
            c.close("Client Closed")  # nats-server: the client reconnects into its new account
            return
    if not auth.required:
        return
    c.msubs = srv.opts.max_subscriptions or -1
    try:
        srv._recheck_auth(c)
    except ProtocolError as e:  # e.g. the account's connection limit went down
        c.close(e.reason, e.client_error)
        return
    if c.closed:
        return
    prune_subscriptions(srv, c)


def prune_subscriptions(srv: "Server", c: Any) -> None:
    """After a client's permissions changed (config reload, account JWT update): each subscription they no
    longer allow is removed, with nats-server's -ERR and notice."""
    perms = c.perms
    if perms is None or c.closed:
        return
    for sub in list(c.subs.values()):
        if perms.can_subscribe(sub.subject, sub.queue):
            continue
        c.remove_sub(sub)
        subj = go_quote(sub.subject_b)
        sid = go_quote(sub.sid)
        who = getattr(c, "user", "") or ""
        if sub.queue:
            q = go_quote(sub.queue_b)
            c.send_err(f"Permissions Violation for Subscription to {subj} using queue {q} (sid {sid})")
            srv.log.notice(f"Removed sub {subj} using queue {q} (sid {sid}) for {who} - not authorized")
        else:
            c.send_err(f"Permissions Violation for Subscription to {subj} (sid {sid})")
            srv.log.notice(f"Removed sub {subj} (sid {sid}) for {who} - not authorized")
