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
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from rillet import jwt
from rillet.config.operator_sections import check_url
from rillet.server.resolver import MemResolver
from rillet.server.resolver_fetch import FETCH_TIMEOUT, FetchingResolver

if TYPE_CHECKING:
    from rillet.server.operator import OperatorMode



def redact(url: str) -> str:
    """The URL with any password replaced by ``xxxxx``, as nats-server logs URLs."""
    p = urllib.parse.urlsplit(url)
    if p.password is None:
        return url
    netloc = f"{p.username}:xxxxx@{p.hostname}" + (f":{p.port}" if p.port else "")
    return urllib.parse.urlunsplit(p._replace(netloc=netloc))


class UrlResolver(FetchingResolver, MemResolver):
    """Account JWTs fetched over HTTP (nats-server's URLAccResolver), kept once fetched."""

    read_only = True

    def __init__(self, op: "OperatorMode", cfg: dict) -> None:
        super().__init__(op)
        self.url = check_url(cfg["url"])
        self._session: Any = None
        self._init_fetch()
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

    def _known(self, pub: str) -> bool:
        return pub in self.jwts

    async def _remote(self, pub: str) -> str | None:
        return await self._http_get(pub)

    def _keep(self, pub: str, token: str, again: bool) -> None:
        old = self.jwts.get(pub)
        self.jwts[pub] = token
        if again and token != old and pub in self.op.infos:
            try:
                self.op.update_account(pub, token)
            except jwt.JwtError as e:
                self.op.server.log.debug(f"Account JWT for {pub} not valid: {e}")

    async def aclose(self) -> None:
        s, self._session = self._session, None
        if s is not None and not s.closed:
            await s.close()

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


