"""Account resolvers of operator mode and their system account API.

* ``MemResolver`` (``resolver: MEMORY``): account JWTs held in memory, filled by ``resolver_preload``;
  updates arrive on ``$SYS.REQ.ACCOUNT.<acc>.CLAIMS.UPDATE`` (and the older ``$SYS.ACCOUNT.<acc>.CLAIMS.UPDATE``)
  and apply to accounts already loaded.
* ``DirResolver`` (``resolver { type: full, dir: ... }``): one ``<account public key>.jwt`` file per account,
  so accounts survive a restart. Besides the updates above it answers ``$SYS.REQ.CLAIMS.UPDATE``,
  ``$SYS.REQ.ACCOUNT.<acc>.CLAIMS.LOOKUP``, ``$SYS.REQ.CLAIMS.LIST`` and ``$SYS.REQ.CLAIMS.DELETE``.
  (``$SYS.ACCOUNT.<acc>.CLAIMS.UPDATE`` is only an input: nats-server does not publish it either.)

Replies are nats-server's ``{"server": {...}, "data": {"account", "code", "message"}}`` or
``{"server": {...}, "error": {"account", "code", "description"}}``.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from typing import TYPE_CHECKING, Any

from rillet import jwt
from rillet.server.operator_claims import AccountValidationError
from rillet.server.resolver_fetch import FETCH_TIMEOUT, FetchingResolver, SysLookup

if TYPE_CHECKING:
    from rillet.server.operator import OperatorMode


def _failure(e: Exception) -> str:
    return "jwt validation failed" if isinstance(e, AccountValidationError) else "jwt update resulted in error"


def make_resolver(op: "OperatorMode", cfg: dict) -> "MemResolver":
    typ = str(cfg.get("type", "MEMORY")).upper()
    if typ == "FULL":
        return DirResolver(op, cfg)
    if typ == "CACHE":
        return CacheResolver(op, cfg)
    if typ == "URL":
        from rillet.server.urlresolver import UrlResolver  # (aiohttp and urllib only with a URL resolver)
        return UrlResolver(op, cfg)
    return MemResolver(op)


class MemResolver:
    full = False
    cache = False
    fetches = False  # (the URL, full and cache resolvers fetch what they lack: rillet.server.resolver_fetch)
    read_only = False  # (the URL resolver: nothing is stored, resolver_preload refused)

    def __init__(self, op: "OperatorMode") -> None:
        self.op = op
        self.jwts: dict[str, str] = {}

    def fetch(self, pub: str) -> str | None:
        return self.jwts.get(pub)

    def store(self, pub: str, token: str) -> None:
        self.jwts[pub] = token

    def list(self) -> list[str]:
        return sorted(self.jwts)

    def refresh(self, pub: str) -> None:
        """An expired account's JWT is asked for again (the URL resolver; the others hold what they have)."""

    def connect_needs(self, connect: dict) -> str | None:
        """An account whose JWT a CONNECT must wait for (the URL resolver fetches it); None: go on."""
        return None

    def prefetch(self, pub: str, done: Any) -> None:
        done()

    async def aclose(self) -> None:
        """The server stops (the URL resolver closes its HTTP session)."""

    # ---- $SYS API ---------------------------------------------------------------------------------------

    def register(self, ic: Any) -> None:
        """The account update subjects ($SYS.ACCOUNT.<acc>.CLAIMS.UPDATE and $SYS.REQ.ACCOUNT.<acc>.CLAIMS.UPDATE)
        are subscribed by the system account, which calls ``on_account_update`` in operator mode."""

    def on_account_update(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                          msg: bytes) -> None:
        self._on_account_update(sub, c, subject, reply, hdr, msg)

    def respond(self, reply: bytes | None, acc: str, message: str, err: str | None = None) -> None:
        srv = self.op.server
        if err is None:
            srv.log.debug(f"{message} - {acc}" if acc else message)
        else:
            srv.log.error(f"{message} - {acc} - {err}" if acc else f"{message} - {err}")
        if not reply:
            return
        sysacc = srv.sysacc
        body: dict[str, Any] = {"server": sysacc.server_info()}
        if err is None:
            body["data"] = {"account": acc, "code": 200, "message": message}
        else:
            body["error"] = {"account": acc, "code": 500, "description": f"{message} - {err}"}
        if sysacc.client is not None:
            sysacc.client.publish(reply, None, json.dumps(body, separators=(",", ":")).encode())

    @staticmethod
    def _body(hdr: int, msg: bytes) -> str:
        return (msg[hdr:] if hdr > 0 else msg).decode("utf-8", "replace").strip()

    @staticmethod
    def _subject_account(subject: bytes) -> str | None:
        t = subject.decode().split(".")
        if len(t) == 6 and t[0] == "$SYS" and t[1] == "REQ":  # $SYS.REQ.ACCOUNT.<acc>.CLAIMS.UPDATE
            return t[3]
        if len(t) == 5:  # $SYS.ACCOUNT.<acc>.CLAIMS.UPDATE
            return t[2]
        return None

    def _on_account_update(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                           msg: bytes) -> None:
        pub = self._subject_account(subject)
        if pub is None:
            return
        body = self._body(hdr, msg)
        if not body:
            self.respond(reply, pub, "jwt update error", "request body is empty")
            return
        try:
            claims = self.op.check_account_jwt(body)
        except AccountValidationError as e:
            if self.cache:
                self.respond(reply, pub, "jwt update cache validation failed", str(e))
            elif self.full:
                self.respond(reply, pub, "jwt validation failed", str(e))
            else:  # nats-server's memory resolver path reports its own error text
                self.respond(reply, pub, "jwt update resulted in error", "account validation failed")
            return
        except jwt.JwtError as e:
            self.respond(reply, pub, f"jwt update{' cache' if self.cache else ''} resulted in error", str(e))
            return
        if claims["sub"] != pub:
            self.respond(reply, pub, f"jwt update{' cache' if self.cache else ''} resulted in error",
                         "subject does not match jwt content")
            return
        self.update(reply, pub, body, claims)

    def update(self, reply: bytes | None, pub: str, token: str, claims: dict) -> None:
        op = self.op
        if pub not in op.infos:
            self.respond(reply, pub, "jwt update skipped")
            return
        try:
            op.update_account(pub, token)
        except jwt.JwtError as e:
            self.respond(reply, pub, "jwt update resulted in error", str(e))
            return
        # (as in nats-server, the update is not stored in the memory resolver: an expired account is
        # refreshed from what the resolver holds)
        self.respond(reply, pub, "jwt updated")


class DirResolver(FetchingResolver, MemResolver):
    """The full nats-based resolver: JWTs in a directory, one file per account. An account missing here is
    asked of the other servers (``$SYS.REQ.ACCOUNT.<acc>.CLAIMS.LOOKUP``, ``timeout``), and every ``interval``
    the directory is compared with another full resolver's by hash (``$SYS.REQ.CLAIMS.PACK``): what differs is
    sent over and merged, the newer JWT of each account kept (nats-server's DirJWTStore pack and merge)."""

    full = True
    cache = False

    def __init__(self, op: "OperatorMode", cfg: dict) -> None:
        super().__init__(op)
        self.dir = cfg["dir"]
        self.allow_delete = bool(cfg.get("allow_delete"))
        self.hard_delete = bool(cfg.get("hard_delete"))
        self.limit = int(cfg.get("limit") or 0)
        self.interval = float(cfg.get("interval") or 120.0)
        self.lookup = SysLookup(op, float(cfg.get("timeout") or FETCH_TIMEOUT))
        self._init_fetch()
        self._sync_timer: Any = None
        self._pack_inbox = ""
        os.makedirs(self.dir, exist_ok=True)

    # ---- fetching from the other servers (FetchingResolver) -----------------------------------------------

    def _known(self, pub: str) -> bool:
        p = self._path(pub)
        return p is not None and os.path.exists(p)

    async def _remote(self, pub: str) -> str | None:
        return await self.lookup.lookup(pub)

    def _keep(self, pub: str, token: str, again: bool) -> None:
        try:
            self.store(pub, token)
        except (OSError, jwt.JwtError) as e:
            self.op.server.log.error(f"DirResolver - Could not store account {pub}: {e}")

    def fetch_local(self, pub: str) -> str | None:
        p = self._path(pub)
        if p is None:
            return None
        try:
            with open(p, encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            return None

    def fetch(self, pub: str) -> str | None:
        token = self.fetch_local(pub)
        if token is None and jwt.is_public_key(pub, "A"):
            self._background(pub)  # (asked of the other servers: found by the next lookup)
        return token

    def _path(self, pub: str) -> str | None:
        if not jwt.is_public_key(pub, "A"):
            return None
        return os.path.join(self.dir, pub + ".jwt")

    def store(self, pub: str, token: str) -> bool:  # type: ignore[override]
        """Write the JWT unless the stored one is the same or newer (nats-server's saveIfNewer); True when
        written."""
        p = self._path(pub)
        if p is None:
            raise jwt.JwtError("invalid public key")
        old = self.fetch_local(pub)
        if old is not None:
            try:
                oc = jwt.decode_unverified(old)
                nc = jwt.decode_unverified(token)
                if oc.get("jti") == nc.get("jti") or int(oc.get("iat") or 0) > int(nc.get("iat") or 0):
                    return False
            except jwt.JwtError:
                pass
        self._write(pub, token)
        return True

    def _write(self, pub: str, token: str) -> None:
        p = self._path(pub)
        if p is None:
            raise jwt.JwtError("invalid public key")
        if self.limit and not os.path.exists(p) and len(self.list()) >= self.limit:
            raise jwt.JwtError("store is full")
        tmp = p + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(token)
        os.replace(tmp, p)

    def list(self) -> list[str]:
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        return sorted(n[:-4] for n in names if n.endswith(".jwt") and jwt.is_public_key(n[:-4], "A"))

    def delete(self, pub: str) -> None:
        p = self._path(pub)
        if p is None or not os.path.exists(p):
            return
        if self.hard_delete:
            os.unlink(p)
        else:
            os.replace(p, p + ".deleted")

    # ---- $SYS API ---------------------------------------------------------------------------------------

    def register(self, ic: Any) -> None:
        srv = self.op.server
        srv.sysacc.services.remote_listeners.append(self.lookup.heard)
        ic.subscribe("$SYS.REQ.CLAIMS.UPDATE", self._on_claims_update)
        ic.subscribe("$SYS.REQ.CLAIMS.LIST", self._on_list)
        ic.subscribe("$SYS.REQ.CLAIMS.DELETE", self._on_delete)
        if self.cache:
            return
        ic.subscribe("$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP", self._on_lookup)
        ic.subscribe("$SYS.REQ.CLAIMS.PACK", self._on_pack, queue="responder")
        self._pack_inbox = f"$SYS._INBOX.{srv.server_id}.pack"
        ic.subscribe(self._pack_inbox, self._on_pack_part)
        self._sync_timer = srv.loop.call_later(self.interval, self._sync)

    async def aclose(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None

    # ---- sync between full resolvers (nats-server's pack requests) -------------------------------------

    def hash(self) -> bytes:
        """XOR of the SHA-256 of every stored JWT (nats-server's DirJWTStore.Hash): equal directories, equal
        hashes, whatever the order."""
        acc = bytearray(32)
        for pub in self.list():
            token = self.fetch_local(pub)
            if token:
                for i, b in enumerate(hashlib.sha256(token.encode()).digest()):
                    acc[i] ^= b
        return bytes(acc)

    def _sync(self) -> None:
        srv = self.op.server
        self._sync_timer = None
        if srv.shutting_down:
            return
        ic = srv.sysacc.client
        if ic is not None:
            srv.log.debug(f"DirResolver - Checking store state: {self.hash().hex()}")
            ic.publish(b"$SYS.REQ.CLAIMS.PACK", self._pack_inbox.encode(), self.hash())
        self._sync_timer = srv.loop.call_later(self.interval, self._sync)

    def _on_pack(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """Another full resolver's hash: when it differs, every JWT held here goes to it, one per message,
        then an empty message."""
        if not reply:
            return
        ic = self.op.server.sysacc.client
        if ic is None:
            return
        theirs = bytes(msg[hdr:]) if hdr > 0 else bytes(msg)
        if theirs != self.hash():
            for pub in self.list():
                token = self.fetch_local(pub)
                if not token:
                    continue
                try:
                    exp = int(jwt.decode_unverified(token).get("exp") or 0)
                except jwt.JwtError:
                    exp = 0
                if exp and exp < time.time():
                    continue  # (an expired JWT is not sent, as nats-server)
                ic.publish(reply, None, f"{pub}|{token}".encode())
        ic.publish(reply, None, b"")

    def _on_pack_part(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        """A part of a pack answer: ``<account>|<jwt>`` lines, each kept when newer than ours; an empty part
        ends the answer."""
        body = (bytes(msg[hdr:]) if hdr > 0 else bytes(msg)).decode("utf-8", "replace")
        log = self.op.server.log
        for line in body.split("\n"):
            if not line:
                continue
            parts = line.split("|")
            if len(parts) != 2 or not jwt.is_public_key(parts[0], "A"):
                log.error(f"DirResolver - Merging resulted in error: line in package didn't contain 2 entries: "
                          f"{line[:80]!r}")
                return
            pub, token = parts
            try:
                changed = self.store(pub, token)
            except (OSError, jwt.JwtError) as e:
                log.error(f"DirResolver - Merging resulted in error: {e}")
                return
            if changed and pub in self.op.infos:
                try:
                    self.op.update_account(pub, token)
                except jwt.JwtError as e:
                    log.error(f'DirResolver - Update for account "{pub}" resulted in error {e}')

    def _on_claims_update(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                          msg: bytes) -> None:
        body = self._body(hdr, msg)
        try:
            claims = self.op.check_account_jwt(body)
        except jwt.JwtError as e:
            sub = ""
            if isinstance(e, AccountValidationError):
                sub = jwt.decode_unverified(body).get("sub", "")
            self.respond(reply, sub or "n/a", _failure(e), str(e))
            return
        self.update(reply, claims["sub"], body, claims)

    def update(self, reply: bytes | None, pub: str, token: str, claims: dict) -> None:
        op = self.op
        if claims["iss"] in op.operators_subjects() and claims["iss"] in op.strict_operator_subjects():
            self.respond(reply, pub, "jwt update resulted in error", "operator requires issuer to be a signing key")
            return
        if not op.is_trusted(claims["iss"]):
            self.respond(reply, pub, "jwt update resulted in error", "issuer is not a trusted operator key")
            return
        if jwt.is_expired(claims):
            self.respond(reply, pub, "jwt validation failed", "validation errors: [claim is expired]")
            return
        old = self.fetch_local(pub)
        if old == token:
            self.respond(reply, pub, "jwt updated")
            return
        try:
            self._write(pub, token)
        except (OSError, jwt.JwtError) as e:
            self.respond(reply, pub, "jwt update resulted in error", str(e))
            return
        if pub in op.infos:
            try:
                op.update_account(pub, token)
            except jwt.JwtError as e:
                op.server.log.error(f'DirResolver - Update for account "{pub}" resulted in error {e}')
        self.respond(reply, pub, "jwt updated")

    def _on_lookup(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if not reply:
            return
        t = subject.decode().split(".")
        if len(t) != 6 or reply.startswith(self.lookup.inbox_prefix):
            return  # (our own lookup: the other servers answer it)
        token = self.fetch_local(t[3])
        sysacc = self.op.server.sysacc
        if sysacc.client is not None:
            sysacc.client.publish(reply, None, (token or "").encode())

    def _on_list(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        if not reply:
            return
        sysacc = self.op.server.sysacc
        body = {"server": sysacc.server_info(), "data": self.list()}
        if sysacc.client is not None:
            sysacc.client.publish(reply, None, json.dumps(body, separators=(",", ":")).encode())

    def _on_delete(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        op = self.op
        body = self._body(hdr, msg)
        subj = ""
        err = None
        accs: list = []
        try:
            g = jwt.decode(body)
            subj = g.get("sub", "")
            data = g.get("data") if isinstance(g.get("data"), dict) else jwt.nats_section(g)
            if not self.allow_delete:
                err = "delete must be enabled in server config"
            elif subj != g.get("iss"):
                err = "not self signed"
            elif g.get("iss") not in op.operators_subjects() and g.get("iss") not in op.trusted:
                err = "not trusted"
            elif not isinstance(data.get("accounts"), list):
                err = "malformed request"
            else:
                accs = data["accounts"]
                for a in accs:
                    if not isinstance(a, str) or not jwt.is_public_key(a, "A"):
                        err = "malformed request"
                        break
                    if a == op.server.opts.system_account:
                        err = "not allowed to delete system account"
                        break
        except jwt.JwtError as e:
            err = str(e)
        if err is not None:
            self.respond(reply, "", f"delete accounts request by {subj} failed", err)
            return
        errs = []
        n = 0
        for a in accs:
            try:
                self.delete(a)
                n += 1
            except OSError as e:
                errs.append(str(e))
            op.account_removed(a)
        if errs:
            self.respond(reply, "", f"deleted {n} accounts, failed for {len(errs)}", "\n".join(errs))
        else:
            self.respond(reply, "", f"deleted {n} accounts")


class CacheResolver(DirResolver):
    """The cache nats-based resolver (``resolver { type: cache, dir, limit, ttl, timeout }``): a directory
    holding the JWTs of the accounts this server used, each fetched from the full resolvers of other servers
    when first needed, at most ``limit`` of them (default 1,000: the least recently used goes), each for ``ttl``
    after its last use when set. Updates are kept only for accounts in use here ("jwt updated cache"); it
    answers no lookups or pack requests (nats-server's CacheDirAccResolver)."""

    full = False
    cache = True

    def __init__(self, op: "OperatorMode", cfg: dict) -> None:
        cfg = dict(cfg)
        cfg["limit"] = int(cfg.get("limit") or 0) or 1000
        super().__init__(op, cfg)
        self.ttl = float(cfg.get("ttl") or 0.0)
        self._used: dict[str, float] = {p: time.monotonic() for p in self.list()}  # account -> last use (LRU)
        self._expiry_timer: Any = None

    def register(self, ic: Any) -> None:
        super().register(ic)
        if self.ttl:
            self._expiry_timer = self.op.server.loop.call_later(max(self.ttl / 2, 0.05), self._expire)
        self.op.server.log.notice(f"Managing some jwt in exclusive directory {self.dir}")

    async def aclose(self) -> None:
        await super().aclose()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    def fetch_local(self, pub: str) -> str | None:
        token = super().fetch_local(pub)
        if token is not None:
            self._used[pub] = time.monotonic()  # (a use renews the ttl and the LRU place)
        return token

    def _write(self, pub: str, token: str) -> None:
        p = self._path(pub)
        if p is not None and not os.path.exists(p):
            while len(self.list()) >= self.limit:  # the least recently used goes
                held = self.list()
                victim = min(held, key=lambda k: self._used.get(k, 0.0))
                self._remove(victim)
        super()._write(pub, token)
        self._used[pub] = time.monotonic()

    def _remove(self, pub: str) -> None:
        p = self._path(pub)
        self._used.pop(pub, None)
        if p is not None:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def _expire(self) -> None:
        self._expiry_timer = None
        now = time.monotonic()
        for pub in self.list():
            if now - self._used.get(pub, now) >= self.ttl:
                self._remove(pub)
        if not self.op.server.shutting_down:
            self._expiry_timer = self.op.server.loop.call_later(max(self.ttl / 2, 0.05), self._expire)

    def update(self, reply: bytes | None, pub: str, token: str, claims: dict) -> None:
        op = self.op
        if claims["iss"] in op.operators_subjects() and claims["iss"] in op.strict_operator_subjects():
            self.respond(reply, pub, "jwt update cache resulted in error", "operator requires issuer to be a signing key")
            return
        if pub not in op.infos:
            self.respond(reply, pub, "jwt update cache skipped")
            return
        if jwt.is_expired(claims):
            self.respond(reply, pub, "jwt update cache validation failed", "validation errors: [claim is expired]")
            return
        try:
            self._write(pub, token)
            op.update_account(pub, token)
        except (OSError, jwt.JwtError) as e:
            self.respond(reply, pub, "jwt update cache resulted in error", str(e))
            return
        self.respond(reply, pub, "jwt updated cache")
