"""Account JWTs a resolver fetches from elsewhere without blocking the event loop (rillet.server.resolver).

nats-server's resolvers fetch a missing account JWT synchronously, blocking only the goroutine of the client
that needs it: the URL resolver over HTTP, the full and cache (nats-based) resolvers by asking the other servers
(``$SYS.REQ.ACCOUNT.<account>.CLAIMS.LOOKUP``). Rillet serves every client from one event loop, so
``FetchingResolver`` fetches in the background instead:

* a CONNECT whose account is not known yet is held (``connect_needs`` / ``prefetch``) while the account's JWT,
  and those of the accounts it imports from (transitively, up to ``MAX_PREFETCH``), are fetched; then the CONNECT
  goes on (rillet.server.client ``_connect_fetched``), so one slow source holds only the connecting client;
* a lookup elsewhere (an import of an account nobody connected to yet, a ``$SYS`` request naming an unknown
  account) finds what was fetched so far and starts a fetch for next time;
* an account asked for and not found is not asked for again within ``RETRY_AFTER``.

``SysLookup`` is the nats-based fetch: the lookup request goes to every server through the system account, and the
first non-empty answer wins; empty answers ("not here") are counted against the servers this one has heard from,
so that an account nobody has fails at once rather than at the timeout.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable

from rillet import jwt

if TYPE_CHECKING:
    from rillet.server.operator import OperatorMode

FETCH_TIMEOUT = 1.9  # seconds (nats-server's DEFAULT_ACCOUNT_FETCH_TIMEOUT)
MAX_PREFETCH = 64  # accounts fetched for one CONNECT (its account and those it imports from, transitively)
RETRY_AFTER = 1.0  # seconds before an account that was not found is asked for again
PEER_TTL = 30.0  # seconds a server heard from (statsz) counts as one that will answer a lookup


class FetchingResolver:
    """The background fetching of a resolver; the resolver gives ``_known(pub)`` (held already),
    ``_remote(pub)`` (fetch it: the JWT or None) and ``_keep(pub, token, again)`` (hold what was fetched)."""

    op: "OperatorMode"
    fetches = True

    def _init_fetch(self) -> None:
        self._failed: dict[str, float] = {}  # account -> when a fetch last found nothing
        self._inflight: dict[str, asyncio.Future] = {}

    def _known(self, pub: str) -> bool:
        raise NotImplementedError

    async def _remote(self, pub: str) -> str | None:
        raise NotImplementedError

    def _keep(self, pub: str, token: str, again: bool) -> None:
        raise NotImplementedError

    # ---- CONNECT ------------------------------------------------------------------------------------------

    def connect_needs(self, connect: dict) -> str | None:
        """The account a CONNECT's user JWT belongs to when it must be fetched before the CONNECT goes on."""
        token = connect.get("jwt") if isinstance(connect, dict) else None
        if not isinstance(token, str) or not token:
            return None
        try:
            claims = jwt.decode_unverified(token)
        except jwt.JwtError:
            return None  # (authentication reports it)
        n = jwt.nats_section(claims)
        pub = n.get("issuer_account") or claims.get("iss")
        if not jwt.is_public_key(pub, "A") or pub in self.op.infos or self._known(pub):
            return None
        t = self._failed.get(pub)
        if t is not None and time.monotonic() - t < RETRY_AFTER:
            return None  # (just asked for: the CONNECT goes on without it and is refused)
        return pub

    def prefetch(self, pub: str, done: Callable[[], None]) -> None:
        """Fetch ``pub``'s JWT and those of the accounts it imports from, then call ``done`` on the loop,
        whatever came of it."""
        task = self.op.server.loop.create_task(self._prefetch(pub))
        task.add_done_callback(lambda t: done())

    async def _prefetch(self, pub: str) -> None:
        todo: list[str] = [pub]
        seen: set[str] = set()
        while todo and len(seen) < MAX_PREFETCH:
            batch = [p for p in todo if p not in seen][:MAX_PREFETCH - len(seen)]
            seen.update(batch)
            todo = []
            tokens = await asyncio.gather(*(self._get(p) for p in batch))
            for token in tokens:
                for imp in imported_accounts(token):
                    if imp not in seen and imp not in self.op.infos and not self._known(imp):
                        todo.append(imp)

    # ---- background fetches ---------------------------------------------------------------------------------

    def _background(self, pub: str, again: bool = False) -> None:
        if pub in self._inflight:
            return
        t = self._failed.get(pub)
        if t is not None and time.monotonic() - t < RETRY_AFTER:
            return
        loop = self.op.server.loop
        if loop is None or not loop.is_running():
            return
        task = loop.create_task(self._get(pub, again))
        task.add_done_callback(self._log_failure)

    def _log_failure(self, t: Any) -> None:
        if not t.cancelled() and t.exception() is not None:
            self.op.server.log.error(f"Account fetch failed: {t.exception()!r}")

    async def _get(self, pub: str, again: bool = False) -> str | None:
        """Fetch the account's JWT (one fetch per account at a time); None when not found (logged at debug)."""
        fut = self._inflight.get(pub)
        if fut is not None:
            return await asyncio.shield(fut)
        loop = asyncio.get_running_loop()
        fut = self._inflight[pub] = loop.create_future()
        token = None
        try:
            token = await self._remote(pub)
            if token is not None:
                self._failed.pop(pub, None)
                self._keep(pub, token, again)
            else:
                self._failed[pub] = time.monotonic()
        finally:
            del self._inflight[pub]
            fut.set_result(token)
        return token


class SysLookup:
    """``$SYS.REQ.ACCOUNT.<account>.CLAIMS.LOOKUP`` to the other servers, as nats-server's resolvers ask."""

    def __init__(self, op: "OperatorMode", timeout: float) -> None:
        self.op = op
        self.timeout = timeout
        self.peers: dict[str, float] = {}  # server id -> when last heard from (statsz)
        self._n = 0
        self.inbox_prefix = f"$SYS._INBOX.{op.server.server_id}.lookup.".encode()

    def heard(self, kind: str, body: bytes) -> None:
        """(SystemServices.remote_listeners) another server's statsz or shutdown."""
        import json
        try:
            sid = json.loads(body)["server"]["id"]
        except (ValueError, KeyError, TypeError):
            return
        if sid == self.op.server.server_id:
            return
        if kind == "SHUTDOWN":
            self.peers.pop(sid, None)
        else:
            self.peers[sid] = time.monotonic()

    def _expected(self) -> int:
        now = time.monotonic()
        return sum(1 for t in self.peers.values() if now - t < PEER_TTL)

    async def lookup(self, pub: str) -> str | None:
        srv = self.op.server
        ic = srv.sysacc.client
        if ic is None:
            return None
        self._n += 1
        inbox = self.inbox_prefix.decode() + str(self._n)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        left = [self._expected()]

        def answer(sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
            body = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
            left[0] -= 1
            if fut.done():
                return
            if body.strip():
                fut.set_result(body.decode("utf-8", "replace").strip())
            elif left[0] <= 0:
                fut.set_result(None)  # every server we know of said it has no such account

        sub = ic.subscribe(inbox, answer)
        try:
            ic.publish(f"$SYS.REQ.ACCOUNT.{pub}.CLAIMS.LOOKUP".encode(), inbox.encode(), b"")
            try:
                return await asyncio.wait_for(fut, self.timeout)
            except asyncio.TimeoutError:
                srv.log.debug(f'Account fetch failed: fetching jwt for "{pub}" timed out')
                return None
        finally:
            ic.remove_sub(sub)


def imported_accounts(token: str | None) -> list[str]:
    """The accounts an account JWT imports from (not verified here: the lookup that applies it checks it)."""
    if not token:
        return []
    try:
        n = jwt.nats_section(jwt.decode_unverified(token))
    except jwt.JwtError:
        return []
    out = []
    for imp in n.get("imports") or ():
        acc = imp.get("account") if isinstance(imp, dict) else None
        if jwt.is_public_key(acc, "A"):
            out.append(acc)
    return out
