"""``$JS.API`` answers in accounts without JetStream, while the server runs JetStream.

nats-server gives every account the JetStream API; in an account where JetStream is not enabled each
request is answered with error 10039 ("JetStream not enabled for account"), in the response type of the
endpoint (in the system account: ``system_response``, except for account info).
"""
from __future__ import annotations

from typing import Any

from rillet.server.delivery import GATEWAY, ROUTER

T = "io.nats.jetstream.api.v1."

_PAGED_LISTS = {"STREAM.NAMES": "streams", "STREAM.LIST": "streams", "CONSUMER.NAMES": "consumers",
                "CONSUMER.LIST": "consumers"}


_NOT_API = ("CONSUMER.MSG.NEXT", "DIRECT.GET")


def _shadowed(account: Any) -> bool:
    """The account imports the JetStream API from another account (a service import covering
    ``$JS.API.INFO``): then, as with nats-server, this account's own (disabled) API does not answer."""
    for sub in account.sublist.match("$JS.API.INFO").psubs:
        if sub.icb is not None and getattr(sub.client, "name", "").startswith("service import "):
            return True
    return False


def _for_other_account(account: Any, hdr: int, msg: bytes) -> bool:
    """The request carries nats-server's ``Nats-Request-Info`` client info naming another account."""
    if hdr <= 0:
        return False
    i = msg.find(b"\r\nNats-Request-Info:", 0, hdr)
    if i < 0:
        return False
    j = msg.find(b"\r\n", i + 2, hdr)
    import json
    try:
        info = json.loads(msg[i + 20:j if j > 0 else hdr])
    except ValueError:
        return False  # not client info: answered as any request
    acc = info.get("acc") if isinstance(info, dict) else None
    return isinstance(acc, str) and acc != account.name


class _NoAccount:
    js = None


class NotEnabled:
    """Subscribes the API endpoints in one account and answers each request with 10039."""

    def __init__(self, js: Any, account: Any) -> None:
        self._types: dict[str, str] | None = None  # (the first request makes it: types)
        self.account = account
        self.is_system = js.server.system_account is account
        self.ic = js.server.internal_client(account, f"jetstream disabled {account.name}")
        prefixes = ["$JS.API"] + ([f"$JS.{js.domain}.API"] if js.domain else [])
        for p in prefixes:  # one subscription, as nats-server's one $JS.API.> import
            self.ic.subscribe(f"{p}.>", self.on_request)

    @property
    def types(self) -> dict[str, str]:
        """{endpoint: its response type}, from the API router's endpoint table (made by the first request:
        a server with JetStream loads the API's modules only when a request comes)."""
        types = self._types
        if types is None:
            from rillet.jetstream.api.router import ApiRouter
            from rillet.jetstream.api.common import _type_for
            router = ApiRouter(_NoAccount())  # the endpoint table only
            # pull requests and direct gets are served by the streams and consumers of an account, not by
            # the API: an account without JetStream has nobody answering them (no responders)
            types = self._types = {k: _type_for(h) for k, h in router.handlers.items() if k not in _NOT_API}
        return types

    def close(self) -> None:
        for sub in list(self.ic.subs.values()):
            self.ic.remove_sub(sub)

    def on_request(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if not reply or _shadowed(self.account):
            return
        if self.is_system and (c.kind in (ROUTER, GATEWAY) or _for_other_account(self.account, hdr, msg)):
            # as nats-server, the system account's 10039 comes from the server the request entered (a
            # client's or a leaf's), not from every server it was routed to; and a request that a server
            # without JetStream forwarded through its $JS.API import (its Nats-Request-Info names the
            # requester's account) is served in that account, where the same request arrives too
            return
        toks = subject.decode("utf-8", "surrogateescape").split(".")
        rest = toks[2:] if toks[1] == "API" else toks[3:]
        key = next((".".join(rest[:n]) for n in (3, 2, 1) if ".".join(rest[:n]) in self.types), None)
        if key is None:
            return
        typ = self.types[key]
        if self.is_system and key != "INFO":
            typ = T + "system_response"
        from rillet.jetstream.errors import ApiError
        d: dict[str, Any] = {"type": typ, "error": ApiError.make("NOT_ENABLED_FOR_ACCOUNT").to_dict()}
        if not self.is_system or key == "INFO":
            if key in _PAGED_LISTS:
                d.update({"total": 0, "offset": 0, "limit": 0, _PAGED_LISTS[key]: []})
            elif key in ("STREAM.INFO", "CONSUMER.INFO"):
                d.update({"total": 0, "offset": 0, "limit": 0})
        from rillet.jetstream.api import codec as apijson
        self.ic.publish(reply, None, apijson.go_json(d))
