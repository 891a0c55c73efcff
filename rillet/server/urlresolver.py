"""The URL account resolver of operator mode (``resolver: URL("http://host/jwt/v1/accounts/")``, or the operator
JWT's ``account_server_url`` + ``/accounts`` when no resolver is configured), as nats-server's:

* an account's JWT is ``GET <url><account public key>``; a status other than 200 or no answer within 1.9 s
  (nats-server's account fetch timeout) means no such account;
* at start the server asks for the base URL itself and refuses to start when that fails (nats-server checks that
  someone is home the same way), and for the system account, which is used bare when it cannot be fetched;
* it is read-only: ``resolver_preload`` is refused, and JWT updates on ``$SYS.REQ.ACCOUNT.<acc>.CLAIMS.UPDATE``
  apply to loaded accounts only (as the memory resolver's);
* an account whose JWT has expired is asked for again.

Rillet serves every client from one event loop, where nats-server blocks the connecting client's goroutine on the
HTTP request: here a CONNECT whose account is not loaded yet is held (``Client.connect_needs``) while the JWT of
its account, and of the accounts it imports from, are fetched in the background (aiohttp); the CONNECT then
goes on with what was fetched. Lookups that happen elsewhere (an import of an account nobody connected to yet,
a ``$SYS`` request naming an unknown account) find what was fetched so far, and start a fetch for next time.
"""
from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, Callable

from rillet import jwt
from rillet.config.operator_sections import check_url
from rillet.server.resolver import MemResolver

if TYPE_CHECKING:
    from rillet.server.operator import OperatorMode

FETCH_TIMEOUT = 1.9  # seconds (nats-server's DEFAULT_ACCOUNT_FETCH_TIMEOUT)
MAX_PREFETCH = 64  # accounts fetched for one CONNECT (its account and those it imports from, transitively)
RETRY_AFTER = 1.0  # seconds before a failed account is asked for again in the background


def redact(url: str) -> str:
    """The URL with any password replaced by ``xxxxx``, as nats-server logs URLs."""
    p = urllib.parse.urlsplit(url)
    if p.password is None:
        return url
    netloc = f"{p.username}:xxxxx@{p.hostname}" + (f":{p.port}" if p.port else "")
    return urllib.parse.urlunsplit(p._replace(netloc=netloc))


class UrlResolver(MemResolver):
    """Account JWTs fetched over HTTP (nats-server's URLAccResolver), kept once fetched."""

    read_only = True

    def __init__(self, op: "OperatorMode", cfg: dict) -> None:
        super().__init__(op)
        self.url = check_url(cfg["url"])
        self._session: Any = None
        self._failed: dict[str, float] = {}  # account -> when a fetch last failed
        self._inflight: dict[str, asyncio.Future] = {}
        self._ssl: Any = None
        if op.server.opts.resolver_tls is not None:  # (resolver_tls: the HTTPS requests' certificates)
            from rillet.server.tls import client_context
            self._ssl = client_context(op.server.opts.resolver_tls, "resolver_tls")
        # nats-server's start-up check: the base URL must answer 200
        body = self._fetch_now("")
        if body is None:
            raise ValueError(self._last_error)
        sys_pub = op.server.opts.system_account
        if jwt.is_public_key(sys_pub, "A"):
            token = self._fetch_now(sys_pub)
            if token is not None:
                self.jwts[sys_pub] = token

    # ---- blocking fetch, at start only -------------------------------------------------------------------

    def _fetch_now(self, pub: str) -> str | None:
        url = self.url + pub
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT, context=self._ssl) as r:  # noqa: S310
                return r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            self._last_error = f'could not fetch <"{redact(url)}">: {e.code} {e.reason}'
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            self._last_error = f'could not fetch <"{redact(url)}">: {reason}'
        return None

    # ---- the resolver interface ----------------------------------------------------------------------------

    def store(self, pub: str, token: str) -> None:
        raise ValueError("resolver preloads only available for writeable resolver types MEM/DIR/CACHE_DIR")

    def fetch(self, pub: str) -> str | None:
        token = self.jwts.get(pub)
        if token is None and jwt.is_public_key(pub, "A"):
            self._background(pub)  # (found by the next lookup)
        return token

    def refresh(self, pub: str) -> None:
        """An expired account's JWT is asked for again; a newer one is applied when it comes."""
        self._background(pub, again=True)

    async def aclose(self) -> None:
        s, self._session = self._session, None
        if s is not None and not s.closed:
            await s.close()

    # ---- CONNECT ---------------------------------------------------------------------------------------------

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
        if not jwt.is_public_key(pub, "A") or pub in self.op.infos or pub in self.jwts:
            return None
        t = self._failed.get(pub)
        if t is not None and time.monotonic() - t < RETRY_AFTER:
            return None  # (just asked for: the CONNECT goes on without it and is refused)
        return pub

    def prefetch(self, pub: str, done: Callable[[], None]) -> None:
        """Fetch ``pub``'s JWT and those of the accounts it imports from (transitively, up to MAX_PREFETCH),
        then call ``done`` on the loop, whatever came of it."""
        task = self.op.server.loop.create_task(self._prefetch(pub))
        task.add_done_callback(lambda t: done())

    async def _prefetch(self, pub: str) -> None:
        todo, seen = [pub], set()
        while todo and len(seen) < MAX_PREFETCH:
            batch = [p for p in todo if p not in seen]
            seen.update(batch)
            todo = []
            tokens = await asyncio.gather(*(self._get(p) for p in batch))
            for token in tokens:
                for imp in _imported_accounts(token):
                    if imp not in seen and imp not in self.jwts and imp not in self.op.infos:
                        todo.append(imp)

    # ---- background fetches ---------------------------------------------------------------------------------

    def _background(self, pub: str, again: bool = False) -> None:
        if pub in self._inflight:
            return
        t = self._failed.get(pub)
        if t is not None and time.monotonic() - t < RETRY_AFTER:
            return
        try:
            loop = self.op.server.loop
        except AttributeError:
            return
        if loop is None or not loop.is_running():
            return
        task = loop.create_task(self._get(pub, again))
        task.add_done_callback(_log_failure(self.op))

    async def _get(self, pub: str, again: bool = False) -> str | None:
        """GET the account's JWT (one request per account at a time); None on failure (logged at debug)."""
        fut = self._inflight.get(pub)
        if fut is not None:
            return await asyncio.shield(fut)
        loop = asyncio.get_running_loop()
        fut = self._inflight[pub] = loop.create_future()
        token = None
        try:
            token = await self._http_get(pub)
            if token is not None:
                self._failed.pop(pub, None)
                old = self.jwts.get(pub)
                self.jwts[pub] = token
                if again and token != old and pub in self.op.infos:
                    try:
                        self.op.update_account(pub, token)
                    except jwt.JwtError as e:
                        self.op.server.log.debug(f"Account JWT for {pub} not valid: {e}")
            else:
                self._failed[pub] = time.monotonic()
        finally:
            del self._inflight[pub]
            fut.set_result(token)
        return token

    async def _http_get(self, pub: str) -> str | None:
        import aiohttp
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT))
        url = self.url + pub
        try:
            async with self._session.get(url, ssl=self._ssl if self._ssl is not None else True) as r:
                if r.status != 200:
                    self.op.server.log.debug(f'Account fetch failed: could not fetch <"{redact(url)}">: '
                                             f"{r.status} {r.reason}")
                    return None
                return (await r.read()).decode("utf-8", "replace")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            self.op.server.log.debug(f'Account fetch failed: could not fetch <"{redact(url)}">: {e!r}')
            return None


def _imported_accounts(token: str | None) -> list[str]:
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


def _log_failure(op: "OperatorMode") -> Callable[[Any], None]:
    def done(t: Any) -> None:
        if not t.cancelled() and t.exception() is not None:
            op.server.log.error(f"Account fetch failed: {t.exception()!r}")
    return done
