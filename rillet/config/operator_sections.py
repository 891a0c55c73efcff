"""Operator mode (decentralized JWT auth) settings: operator, trusted keys, resolver, resolver_preload.

Messages follow nats-server's opts.go; the checks across settings (operator and configured users, ...)
are made when the server is built (``rillet.server.operator_claims.validate_operator_options``).
"""
from __future__ import annotations

import os
import re
import urllib.parse

from rillet import jwt
from rillet.gocompat.gotime import parse_go_duration

from .builder_base import BuilderBase
from .typed import Field, type_name

_MEM_RE = re.compile(r"(?i)(MEM|MEMORY)\s*")
_URL_RE = re.compile(r'(?i)(?:URL)(?:\(\s*"?([^\s"]*)"?\s*\))?\s*')


def read_operator_jwt(ref: str) -> tuple[str, dict]:
    """(jwt, claims) of an operator given by file name or inline; ValueError with nats-server's reason."""
    try:
        with open(ref, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
    except OSError as e:
        if not ref.startswith("eyJ"):
            raise ValueError(f"open {ref}: {e.strerror.lower() if e.strerror else e}") from None
        text = ref
    token = jwt.extract_jwt(text)
    try:
        claims = jwt.decode(token)
    except jwt.JwtError as e:
        raise ValueError(str(e)) from None
    if jwt.claim_type(claims) != jwt.OPERATOR:
        raise ValueError(f"not operator claim - {jwt.claim_type(claims) or 'unknown'}")
    if not jwt.is_public_key(claims.get("sub"), "O") or not jwt.is_public_key(claims.get("iss"), "O"):
        raise ValueError("unable to validate expected prefixes - [operator]")
    return token, claims


class OperatorSections(BuilderBase):

    def operator(self, f: Field) -> None:
        v = f.value
        files: list[str] = []
        if isinstance(v, str):
            files = [v]
        elif isinstance(v, list):
            for item in v:
                if not isinstance(item, str):
                    raise f.error(f"error parsing operators: unsupported type {type_name(item)} where string "
                                  f"is expected")
                files.append(item)
        else:
            raise f.error(f"error parsing operators: unsupported type {type_name(v)}")
        self.o.trusted_operators = []
        self.o.operator_jwts = []
        for ref in files:
            try:
                token, claims = read_operator_jwt(ref)
            except ValueError as e:
                self.errors.append(f.error(f"error parsing operator JWT: {e}"))
                continue
            self.o.operator_jwts.append(token)
            self.o.trusted_operators.append(claims)

    def trusted_keys(self, f: Field) -> None:
        v = f.value
        if isinstance(v, str):
            keys = [v]
        elif isinstance(v, list):
            keys = []
            for item in v:
                if not isinstance(item, str):
                    raise f.error(f"error parsing trusted: unsupported type in array {type_name(item)}")
                keys.append(item)
        else:
            raise f.error(f"error parsing trusted: unsupported type {type_name(v)}")
        self.o.trusted_keys = keys
        for k in keys:
            if not jwt.is_public_key(k, "O"):
                self.errors.append(f.error(f'trust key "{k}" required to be a valid public operator nkey'))

    def resolver(self, f: Field) -> None:
        v = f.value
        res: dict | None = None
        if isinstance(v, str):
            if _MEM_RE.match(v):
                res = {"type": "MEMORY"}
            else:
                m = _URL_RE.fullmatch(v.strip())
                if m is not None:
                    try:
                        res = {"type": "URL", "url": check_url(m.group(1) or "")}
                    except ValueError as e:
                        raise f.error(str(e)) from None
        elif isinstance(v, dict):
            m = {k.lower(): val for k, val in v.items()}
            typ = str(m.get("type", "")).upper()
            d = m.get("dir", "")

            def duration(key: str) -> float | None:
                if key not in m:
                    return None
                val = m[key]
                try:
                    return parse_go_duration(val) if isinstance(val, str) else float(val)
                except (ValueError, TypeError) as e:
                    raise f.error(str(e)) from None

            if typ in ("FULL", "CACHE"):
                if not d:
                    raise f.error("dir has no value and needs to point to a directory")
                if os.path.exists(d) and (not os.path.isdir(d) or not os.access(d, os.R_OK | os.W_OK | os.X_OK)):
                    raise f.error("dir needs to point to an accessible directory")
                timeout = duration("timeout")
                res = {"type": typ, "dir": str(d), "limit": int(m.get("limit", 0) or 0)}
                if timeout is not None:
                    res["timeout"] = timeout
            if typ == "CACHE" and res is not None:
                if "interval" in m:
                    raise f.error("CACHE does not accept sync")
                if m.get("allow_delete"):
                    raise f.error("CACHE does not accept allow_delete")
                if "hard_delete" in m:
                    raise f.error("CACHE does not accept hard_delete")
                res["ttl"] = duration("ttl") or 0.0
            elif typ == "FULL" and res is not None:
                if "ttl" in m:
                    raise f.error("FULL does not accept ttl")
                if "hard_delete" in m and not m.get("allow_delete"):
                    raise f.error("hard_delete has no effect without delete")
                res.update({"allow_delete": bool(m.get("allow_delete", False)),
                            "hard_delete": bool(m.get("hard_delete", False)),
                            "interval": duration("interval") or 120.0})
            elif typ in ("MEM", "MEMORY"):
                res = {"type": "MEMORY"}
        else:
            raise f.error(f"error parsing operator resolver, wrong type {type_name(v)}")
        if res is None:
            raise f.error('error parsing account resolver, should be MEM or  URL("url") or a map containing dir '
                          'and type state=[FULL|CACHE])')
        self.o.resolver = res

    def resolver_tls(self, f: Field) -> None:
        """The tls {} of the URL account resolver's HTTPS requests (rillet.server.urlresolver)."""
        self.o.resolver_tls = self.parse_tls(f, client_side=True, where="resolver")

    def resolver_preload(self, f: Field) -> None:
        if not isinstance(f.value, dict):
            raise f.error("preload should be a map of account_public_key:account_jwt")
        out: dict[str, str] = {}
        for sub in f.entries():
            if not isinstance(sub.value, str):
                self.errors.append(sub.error("preload map value should be a string JWT"))
                continue
            try:
                c = jwt.decode(sub.value)
                if jwt.claim_type(c) != jwt.ACCOUNT:
                    raise jwt.JwtError("not an account")
            except jwt.JwtError:
                self.errors.append(sub.error("invalid account JWT"))
                continue
            out[sub.key] = sub.value
        self.o.resolver_preload = out


def check_url(url: str) -> str:  # (rillet.server.urlresolver)
    """The resolver's base URL with a trailing slash; ValueError (nats-server's text) when it cannot be parsed."""
    u = url.strip()
    try:
        p = urllib.parse.urlsplit(u)
        p.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise ValueError(f'error parsing account resolver url ["{u}"]') from None
    if p.scheme not in ("http", "https") or not p.netloc:
        raise ValueError(f'error parsing account resolver url ["{u}"]')
    return u if u.endswith("/") else u + "/"
