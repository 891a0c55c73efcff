"""``default_js_domain { <account>: <domain> }`` (nats-server): an account without JetStream on this server has its
JetStream API requests (``$JS.API.>``, ``$KV.>``, ``$OBJ.>``) mapped to the domain's prefix
(``$JS.<domain>.API.>``), so that a client of a leaf server without JetStream reaches the JetStream of a hub
(or of another leaf) in that domain as if it were local. An account mapped to the empty domain keeps
``$JS.API.>`` and its leaf connections let the JetStream API through (the setup of old deployments without
domain names). The mappings join the account's own (``Account.mappings``) whenever those are set.
"""
from __future__ import annotations

from typing import Any

from rillet.subjects.mapping import Mapping
from rillet.subjects.validate import is_valid_subject

# what a domain prefix stands for: $JS.<domain>.API.<suffix> <- the local subject (nats-server's
# generateJSMappingTable; $KV and $OBJ get an extra token so the three subject spaces stay apart)
_TABLE = (("INFO", "$JS.API.INFO"), ("STREAM.>", "$JS.API.STREAM.>"), ("CONSUMER.>", "$JS.API.CONSUMER.>"),
          ("DIRECT.>", "$JS.API.DIRECT.>"), ("META.>", "$JS.API.META.>"), ("SERVER.>", "$JS.API.SERVER.>"),
          ("ACCOUNT.>", "$JS.API.ACCOUNT.>"), ("$KV.>", "$KV.>"), ("$OBJ.>", "$OBJ.>"))


def domain_mappings(domain: str, cluster_name: str = "") -> list[tuple[str, str, Mapping]]:
    """(local subject, domain subject, the account mapping between them) that send the JetStream API to
    ``domain``."""
    return [(local, f"$JS.{domain}.API.{suffix}", Mapping(local, [f"$JS.{domain}.API.{suffix}"], cluster_name))
            for suffix, local in _TABLE]


def apply(server: Any, acc: Any) -> None:
    """Add the default domain's mappings to ``acc`` (after its own), when ``default_js_domain`` names it with a
    domain and it has no JetStream here; an account with JetStream is skipped with nats-server's warning."""
    o = server.opts
    domain = (o.default_js_domain or {}).get(acc.name)
    if not domain:
        return
    js = getattr(server, "jetstream", None)  # (None: this server runs no JetStream)
    if js is not None and acc.name in js.accounts:
        server.log.warn(f'Skipping Default Domain "{domain}", set for JetStream enabled account "{acc.name}"')
        return
    have = {m.src for m in acc.mappings}
    for local, dest, m in domain_mappings(domain, o.cluster.name):
        if local not in have:
            server.log.notice(f'Adding default domain mapping "{local}" -> "{dest}" to account "{acc.name}"')
            acc.mappings = [*acc.mappings, m]


def lets_js_through(server: Any, acc_name: str) -> bool:
    """A leaf connection of ``acc_name`` carries the JetStream API: the account's default domain is the empty
    one (nats-server's backwards-compatible setups)."""
    dd = server.opts.default_js_domain
    return bool(dd) and acc_name in dd and dd[acc_name] == ""


def validate(o: Any) -> None:
    """nats-server's checks of ``default_js_domain`` at start (ValueError)."""
    dd = o.default_js_domain
    if not dd:
        return
    if not o.trusted_operators:
        accounts = o.accounts if isinstance(o.accounts, dict) else {}
        for name, domain in dd.items():
            if name in ("$G", "$SYS"):
                continue
            cfg = accounts.get(name)
            if cfg is None:
                raise ValueError(f"in non operator mode, `default_js_domain` references non existing account "
                                 f'"{name}"')
            if isinstance(cfg, dict) and cfg.get("jetstream") not in (None, False, "disabled") and domain:
                raise ValueError(f'default_js_domain contains account name "{name}" with enabled JetStream')
    else:
        from rillet.jwt import is_public_key
        for name in dd:
            if not is_public_key(name, "A"):
                raise ValueError(f'default_js_domain contains account name "{name}", which is not a valid public '
                                 f"account nkey")
    sysacc = o.system_account or "$SYS"
    for name, domain in dd.items():
        if name == sysacc:
            raise ValueError(f'system account "{name}" can not be in default_js_domain')
        if domain and not is_valid_subject(f"$JS.{domain}.API"):
            raise ValueError(f'default_js_domain contains account "{name}" with invalid domain name "{domain}"')
