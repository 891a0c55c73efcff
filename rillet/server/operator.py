"""Operator mode: decentralized authentication and authorization with NATS JWTs.

A trusted operator (``operator`` in the config, or ``trusted_keys``) signs account JWTs; an account (or one
of its signing keys) signs user JWTs. A client presents its user JWT in CONNECT together with a signature
of the INFO nonce made with the user's seed. Accounts are loaded on first use from the account resolver
(``resolver: MEMORY`` with ``resolver_preload``, or a full directory resolver, see ``rillet.server.resolver``)
and named by their public key. The account JWT carries limits, JetStream limits, exports and imports,
revocations and signing keys; a newer JWT pushed through the system account changes them in place.
"""
from __future__ import annotations

import datetime as _dt
import time
from typing import TYPE_CHECKING, Any

from rillet import jwt, nkey
from rillet.server.delivery import CLIENT, INTERNAL
from rillet.server.operator_claims import (CONN_TYPES, NO_LIMIT, _USER_PERMISSION_FIELDS, AccountInfo,
                                          AccountValidationError, JwtUser, _expand_template, _pinned,
                                          jwt_export_latency, permissions_from_claims, user_claims,
                                          validate_account_claims, validate_src, validate_times)
from rillet.subjects.validate import subject_is_subset_match

if TYPE_CHECKING:
    from rillet.server.server import Server


class OperatorMode:
    """The server's operator-mode state: trusted keys, the resolver, and the loaded accounts' JWTs."""

    def __init__(self, server: "Server") -> None:
        from rillet.server.resolver import make_resolver
        self.server = server
        o = server.opts
        self.operators = list(o.trusted_operators)
        keys: list[str] = list(o.trusted_keys or [])
        self.strict_keys: set[str] = set()
        for op in self.operators:
            n = jwt.nats_section(op)
            if not n.get("strict_signing_key_usage"):
                keys.append(op["sub"])
            sks = [k for k in (n.get("signing_keys") or []) if isinstance(k, str)]
            keys.extend(sks)
            if n.get("strict_signing_key_usage"):
                self.strict_keys.update(sks)
        for k in keys:
            if not jwt.is_public_key(k, "O"):
                raise ValueError(f'trusted Keys "{k}" are required to be a valid public operator nkey')
        self.trusted: set[str] = set(keys)
        self.infos: dict[str, AccountInfo] = {}
        pinned = _pinned(o)
        self.pinned: set[str] | None = None
        self.pinned_fails = 0  # /varz pinned_account_fails
        if pinned:
            self.pinned = set(pinned)
            if o.system_account:
                self.pinned.add(o.system_account)  # the operator's system account can always connect
        self._loading: set[str] = set()
        self._exp_timers: dict[str, Any] = {}
        self._act_timers: dict[str, Any] = {}
        self.import_clients: dict[str, list[tuple[Any, Any]]] = {}  # importer -> [(internal client, sub)]
        self.resolver = make_resolver(self, o.resolver or {"type": "MEMORY"})
        for pub, token in (o.resolver_preload or {}).items():
            self.resolver.store(pub, token)
        sys_pub = o.system_account
        if jwt.is_public_key(sys_pub, "A") and not self.resolver.fetches and self.resolver.fetch(sys_pub) is None:
            raise ValueError("error resolving system account: account missing")
        # (a resolver that fetches from elsewhere and cannot give the system account yet: the account is used
        # bare until it can, as nats-server does)

    # ---- logging at start -------------------------------------------------------------------------------

    def log_start(self) -> None:
        log = self.server.log
        if self.operators:
            log.notice("Trusted Operators")
        for op in self.operators:
            n = jwt.nats_section(op)
            log.notice(f'  System  : "{n.get("system_account", "")}"')
            log.notice(f'  Operator: "{op.get("name", "")}"')
            iat = op.get("iat") or 0
            log.notice(f"  Issued  : {_go_utc(iat)}")
            exp = op.get("exp") or 0
            log.notice(f"  Expires : {_go_utc(exp) if exp else 'Never'}")
        if self.operators and not self.server.opts.system_account:
            log.warn("Trusted Operators should utilize a System Account")
        for pub, token in (self.server.opts.resolver_preload or {}).items():
            try:
                c = jwt.decode(token)
            except jwt.JwtError:
                log.error(f"Preloaded account [{pub}] not valid")
                continue
            if jwt.is_expired(c):
                log.warn(f"Account [{pub}] has validation issues:")
                log.warn("  - claim is expired")

    # ---- account JWTs -----------------------------------------------------------------------------------

    def is_trusted(self, issuer: str) -> bool:
        return issuer in self.trusted

    def check_account_jwt(self, token: str, pub: str | None = None) -> dict:
        """Decode and validate an account JWT (signature, type, trusted issuer); JwtError otherwise."""
        c = jwt.decode(token)
        if jwt.claim_type(c) != jwt.ACCOUNT:
            raise jwt.JwtError(f"not account claim - {jwt.claim_type(c) or 'unknown'}")
        if not jwt.is_public_key(c.get("sub"), "A"):
            raise jwt.JwtError("account subject is not a valid account public key")
        if not jwt.is_public_key(c.get("iss"), "O"):
            raise jwt.JwtError("unable to validate expected prefixes - [operator]")
        if pub is not None and c["sub"] != pub:
            raise jwt.JwtError("subject does not match jwt content")
        errs = validate_account_claims(c)
        if errs:
            raise AccountValidationError(f"validation errors: [{' '.join(errs)}]")
        return c

    def lookup_account(self, pub: str) -> Any:
        """The Account for an account public key, loading its JWT from the resolver; None if unknown."""
        srv = self.server
        info = self.infos.get(pub)
        if info is not None:
            acc = srv.accounts.get(pub) or srv.lookup_account(pub)
            if info.expires and time.time() > info.expires:
                # an expired account: take what the resolver has now, if that is different and valid
                srv.log.debug(f"Requested account [{pub}] has expired")
                self.resolver.refresh(pub)
                token = self.resolver.fetch(pub)
                if token and token != info.jwt:
                    try:
                        self.apply_account(acc, self.check_account_jwt(token, pub), token)
                    except jwt.JwtError as e:
                        srv.log.debug(f"Account JWT for {pub} not valid: {e}")
            return acc
        if pub in self._loading:
            return srv.lookup_account(pub)
        token = self.resolver.fetch(pub)
        if token is None:
            srv.log.debug(f'Account "{pub}" not found in resolver')
            return None
        try:
            claims = self.check_account_jwt(token, pub)
        except jwt.JwtError as e:
            srv.log.debug(f"Account JWT for {pub} not valid: {e}")
            return None
        self._loading.add(pub)
        try:
            acc = srv.lookup_account(pub)
            self.apply_account(acc, claims, token, initial=True)
        finally:
            self._loading.discard(pub)
        return acc

    def apply_account(self, acc: Any, claims: dict, token: str, initial: bool = False) -> None:
        """Set the account's limits, JetStream, exports/imports and revocations from its JWT."""
        info = AccountInfo(claims, token)
        old = self.infos.get(acc.name)
        self.infos[acc.name] = info
        lim = info.limits

        def num(k: str) -> int:
            v = lim.get(k)
            return 0 if v is None else int(v)  # as nats-server: a limit left out of the JWT is zero
        acc.mconns = num("conn")
        acc.msubs = num("subs")
        acc.mpay = num("payload")
        self._configure_mappings(acc, info)
        self._configure_jetstream(acc, info)
        self._configure_imports(acc, info)
        self._expiration_timer(acc, info)
        if old is not None and old.nats.get("exports") != info.nats.get("exports"):
            # importers of this account re-check their imports against the new exports
            for name, other in list(self.infos.items()):
                if name != acc.name and any(i.get("account") == acc.name for i in other.nats.get("imports") or []):
                    self._configure_imports(self.server.lookup_account(name), other)
        if not initial:
            self._refresh_clients(acc, info, old)

    def _configure_mappings(self, acc: Any, info: AccountInfo) -> None:
        """The account JWT's subject mappings (weighted, optionally per cluster); bad ones are skipped."""
        from rillet.subjects.mapping import parse_mappings
        raw = info.nats.get("mappings") or {}
        mappings = []
        for src, dests in raw.items() if isinstance(raw, dict) else ():
            entries = [{"destination": d.get("subject", ""), "weight": d.get("weight") or 100,
                        **({"cluster": d["cluster"]} if d.get("cluster") else {})}
                       for d in dests or [] if isinstance(d, dict)]
            try:
                mappings.extend(parse_mappings({src: entries}, self.server.opts.cluster.name))
            except ValueError as e:
                self.server.log.debug(f"Error adding mapping for {src} to account {acc.name}: {e}")
        acc.mappings = mappings
        if self.server.opts.default_js_domain:
            from rillet.server import jsdomain
            jsdomain.apply(self.server, acc)  # (after the JWT's mappings)

    def _expiration_timer(self, acc: Any, info: AccountInfo) -> None:
        """An account JWT with ``exp``: its clients are disconnected when it expires (nats-server's etmr)."""
        old = self._exp_timers.pop(acc.name, None)
        if old is not None:
            old.cancel()
        loop = getattr(self.server, "loop", None)
        if info.expires and loop is not None:
            delay = info.expires - time.time()
            if delay > 0:
                self._exp_timers[acc.name] = loop.call_later(delay, self._account_expired, acc)

    def _mqtt_conns(self, acc: Any) -> list:
        """The account's open MQTT connections (not in ``acc.clients``: they are counted by the mqtt listener)."""
        ms = getattr(self.server, "mqtt", None)
        if ms is None:
            return []
        return [c for c in ms.conns.values() if c.account is acc and c.connected and not c.closed]

    def _account_expired(self, acc: Any) -> None:
        self._exp_timers.pop(acc.name, None)
        for c in list(acc.clients) + self._mqtt_conns(acc):
            if getattr(c, "kind", INTERNAL) == CLIENT and not c.closed or getattr(c, "ms", None) is not None:
                c.debug("Account Authentication Expired")
                c.close("Authentication Expired", "Account Authentication Expired")
        self.server.flush_clients()

    # ---- JetStream --------------------------------------------------------------------------------------

    @staticmethod
    def js_limits(info: AccountInfo, js: Any) -> Any:
        """The account's JetStream limits (made by the JetStream subsystem ``js``), or None when its JWT does not
        enable JetStream."""
        lim = info.limits
        mem = int(lim.get("mem_storage", 0) or 0)
        disk = int(lim.get("disk_storage", 0) or 0)
        tiered = lim.get("tiered_limits") or {}
        src = lim
        if mem == 0 and disk == 0:
            t = tiered.get("R1") if isinstance(tiered, dict) else None
            if not t:
                return None
            src = t
            mem = int(t.get("mem_storage", 0) or 0)
            disk = int(t.get("disk_storage", 0) or 0)
            if mem == 0 and disk == 0:
                return None

        def unl(k: str) -> int:
            v = int(src.get(k, 0) or 0)
            return v if v > 0 else -1
        return js.account_limits(max_memory=mem, max_storage=disk, max_streams=int(src.get("streams", -1)),
                                   max_consumers=int(src.get("consumer", -1)),
                                   max_ack_pending=unl("max_ack_pending"),
                                   memory_max_stream_bytes=unl("mem_max_stream_bytes"),
                                   storage_max_stream_bytes=unl("disk_max_stream_bytes"),
                                   max_bytes_required=bool(src.get("max_bytes_required", False)))

    def _configure_jetstream(self, acc: Any, info: AccountInfo) -> None:
        js = getattr(self.server, "jetstream", None)
        if js is None or not getattr(js, "started", False):
            return  # JetStream enables the loaded accounts when it starts (jetstream_started)
        limits = self.js_limits(info, js)
        jsa = js.accounts.get(acc.name)
        if limits is None:
            if jsa is not None:
                jsa.stop()
                del js.accounts[acc.name]
            return
        if jsa is None:
            jsa = js.enable_account(acc, limits)
        else:
            jsa.limits = limits
            jsa.limited = limits.max_memory >= 0 or limits.max_storage >= 0
            jsa.add_domain_mappings()  # (the JWT's mappings were just set anew)
        jsa.tier = self.js_tier(info)

    def jetstream_started(self, js: Any) -> None:
        for name, info in list(self.infos.items()):
            limits = self.js_limits(info, js)
            if limits is not None:
                js.enable_account(self.server.lookup_account(name), limits).tier = self.js_tier(info)

    @staticmethod
    def js_tier(info: AccountInfo) -> str:
        """"R1" when the account's JetStream limits come from its tiered limits (see js_limits), else ""."""
        lim = info.limits
        if int(lim.get("mem_storage", 0) or 0) or int(lim.get("disk_storage", 0) or 0):
            return ""
        return "R1"

    # ---- exports and imports ----------------------------------------------------------------------------

    def _export_for(self, exporter: str, kind: str, subject: str) -> dict | None:
        info = self.infos.get(exporter)
        if info is None:
            return None
        found = None  # the export of exactly this subject wins over a wildcard one (as in nats-server)
        for e in info.nats.get("exports") or []:
            if (e.get("type") or "stream") == kind and isinstance(e.get("subject"), str) and \
                    subject_is_subset_match(subject, e["subject"]):
                if e["subject"] == subject:
                    return e
                if found is None:
                    found = e
        return found

    def _activation_ok(self, imp: dict, remote: str, exp: dict, exporter: str, importer: str,
                       expiries: list[int]) -> bool:
        token = imp.get("token")
        if not token:
            return False
        try:
            act = jwt.decode(token)
        except jwt.JwtError:
            return False
        n = jwt.nats_section(act)
        if jwt.claim_type(act) != jwt.ACTIVATION or act.get("sub") != importer or jwt.is_expired(act):
            return False
        issuer = n.get("issuer_account") or act.get("iss")
        if issuer != exporter:
            return False
        if act.get("iss") != exporter and act.get("iss") not in self.infos[exporter].signing_keys:
            return False
        subj = n.get("subject") or ""
        if not subj or not subject_is_subset_match(remote, subj):
            return False
        revs = exp.get("revocations") or {}
        iat = int(act.get("iat") or 0)
        for k in (importer, "*"):
            if k in revs and int(revs[k]) >= iat:
                return False
        if act.get("exp"):
            expiries.append(int(act["exp"]))
        return True

    def _configure_imports(self, acc: Any, info: AccountInfo) -> None:
        from rillet.server import account_config as ac
        srv = self.server
        for ic, sub in self.import_clients.pop(acc.name, []):
            ic.remove_sub(sub)
            if ic in srv.internal_clients:
                srv.internal_clients.remove(ic)
        made: list[tuple[Any, Any]] = []
        expiries: list[int] = []
        # load the exporting accounts first: loading one sets up its own imports (its internal clients must
        # not be counted as this account's)
        for imp in info.nats.get("imports") or []:
            if isinstance(imp, dict) and jwt.is_public_key(imp.get("account"), "A"):
                self.lookup_account(imp["account"])
        before = len(srv.internal_clients)
        for imp in info.nats.get("imports") or []:
            if not isinstance(imp, dict):
                continue
            src = imp.get("account", "")
            subj = imp.get("subject", "")
            kind = imp.get("type") or "stream"
            if not jwt.is_public_key(src, "A") or not isinstance(subj, str) or not subj:
                continue
            exporter = self.lookup_account(src)
            if exporter is None:
                srv.log.debug(f"Import of {subj} from unknown account {src} skipped")
                continue
            local = imp.get("local_subject") or ""
            # a service import names the local subject in "subject" and the exported one in the legacy
            # "to", unless "local_subject" is set (then "subject" is the exported one), as nats-server reads it
            remote = subj if kind == "stream" or local else (imp.get("to") or subj)
            exp = self._export_for(src, kind, remote)
            if exp is None:
                srv.log.debug(f"Import of {kind} {subj} from {src}: no matching export")
                continue
            if exp.get("token_req") and not self._activation_ok(imp, remote, exp, src, acc.name, expiries):
                srv.log.debug(f"Import of {kind} {subj} from {src}: activation token not valid")
                continue
            revs = exp.get("revocations") or {}
            if acc.name in revs or "*" in revs:
                iat = int(info.claims.get("iat") or 0)
                if any(k in revs and int(revs[k]) >= iat for k in (acc.name, "*")):
                    continue
            if kind == "stream":
                if local:
                    ac._stream_import(srv, exporter, acc, subj, None, local)
                else:
                    ac._stream_import(srv, exporter, acc, subj, imp.get("to") or None, None)
            else:
                rt = str(exp.get("response_type") or "Singleton").lower()
                thr = exp.get("response_threshold")
                e = {"kind": "service", "subject": exp["subject"], "accounts": None,
                     "response_type": rt, "threshold": (thr / 1e9) if thr else ac.DEFAULT_RESPONSE_THRESHOLD,
                     "latency": jwt_export_latency(srv, exp, rt)}
                ac._service_import(srv, exporter, acc, remote, local or subj, e, bool(imp.get("share")))
        for ic in srv.internal_clients[before:]:
            if ic.name.startswith(("stream ", "service import")):
                for sub in list(ic.subs.values()):
                    made.append((ic, sub))
        self.import_clients[acc.name] = made
        # an activation token that expires: the import goes away then (the imports are set up again)
        old = self._act_timers.pop(acc.name, None)
        if old is not None:
            old.cancel()
        loop = getattr(srv, "loop", None)
        if expiries and loop is not None:
            delay = max(min(expiries) - time.time(), 0) + 0.5
            self._act_timers[acc.name] = loop.call_later(delay, self._reconfigure_imports, acc.name)

    def _reconfigure_imports(self, name: str) -> None:
        self._act_timers.pop(name, None)
        info = self.infos.get(name)
        if info is not None:
            self._configure_imports(self.server.lookup_account(name), info)

    # ---- clients ----------------------------------------------------------------------------------------

    def authenticate(self, c: Any, cd: dict) -> JwtUser | None:
        """Check a CONNECT's user JWT and nonce signature the way nats-server does; None = refused."""
        token = cd.get("jwt") or ""
        sentinel = self.server.opts.default_sentinel
        if sentinel and (not token or user_claims(token) is None):
            # no user JWT (or not one): the default sentinel's, as nats-server (a bearer token: no signature)
            token = cd["jwt"] = sentinel
            co = getattr(c, "opts", None)  # (a client's or MQTT connection's CONNECT; a leaf connection has none)
            if co is not None and hasattr(co, "jwt"):
                co.jwt = sentinel  # (what an auth callout service is told the client presented)
        if not token:
            c.debug("Authentication requires a user JWT")
            return None
        try:
            juc = jwt.decode(token)
            if jwt.claim_type(juc) != jwt.USER:
                raise jwt.JwtError(f"not user claim - {jwt.claim_type(juc) or 'unknown'}")
            if not jwt.is_public_key(juc.get("sub"), "U") or not jwt.is_public_key(juc.get("iss"), "A"):
                raise jwt.JwtError("unable to validate expected prefixes - [account]")
        except jwt.JwtError as e:
            c.debug(f"User JWT not valid: {e}")
            return None
        if jwt.nats_section(juc).get("proxy_required") and not getattr(c, "proxy_key", ""):
            c.debug("proxy connection required")
            auth = getattr(c, "auth", None)  # (a client's Authenticator: the close reason, as nats-server)
            if auth is not None:
                auth.failure = "Proxy Required"
            return None
        try:
            jwt.check_times(juc)
        except jwt.JwtError as e:
            c.debug(f"User JWT no longer valid: {e}")
            return None
        n = jwt.nats_section(juc)
        issuer = n.get("issuer_account") or juc["iss"]
        if self.pinned is not None and issuer not in self.pinned:
            c.debug(f"Account {issuer} not listed as operator pinned account")
            self.pinned_fails += 1
            return None
        acc = self.lookup_account(issuer)
        if acc is None:
            c.debug(f'Account JWT lookup error: account "{issuer}" not found')
            return None
        info = self.infos[acc.name]
        if not self.is_trusted(info.issuer):
            c.debug("Account JWT not signed by trusted operator")
            return None
        known, scope = info.knows_issuer(acc.name, juc["iss"])
        if known and juc["iss"] == acc.name and info.issuer in self.strict_keys:
            known = False  # strict signing key usage: users are signed by the account's signing keys only
        if not known:
            c.debug("User JWT issuer is not known")
            return None
        src_n = n
        if scope is not None:
            if scope.get("kind", "user_scope") != "user_scope":
                c.debug("User JWT is not valid")
                return None
            if any(n.get(k) for k in _USER_PERMISSION_FIELDS):
                c.debug("User JWT is not valid: scoped users require no permissions or limits set")
                return None
            src_n = dict(scope.get("template") or {})
            try:
                src_n = _expand_template(src_n, juc, acc.name, info)
            except ValueError:
                c.debug("User JWT generated invalid permissions")
                return None
        if info.expires and time.time() > info.expires:
            c.debug("Account JWT has expired")
            return None
        bearer = bool(src_n.get("bearer_token")) if scope is not None else bool(n.get("bearer_token"))
        if bearer and info.disallow_bearer:
            c.debug("Account does not allow bearer tokens")
            return None
        types = src_n.get("allowed_connection_types") or []
        known_types = [t for t in types if t in CONN_TYPES]
        if types and not known_types:
            unknown = [t for t in types if t not in CONN_TYPES]
            c.debug(f'invalid connection types "{unknown[0]}"' if unknown else "Connection type not allowed")
            return None
        if known_types and c.conn_type not in known_types:
            c.debug("Connection type not allowed")
            return None
        if not bearer:
            sig = cd.get("sig") or ""
            if not sig:
                c.debug("Signature missing")
                return None
            raw = _decode_sig(sig)
            if raw is None:
                c.debug("Signature not valid base64")
                return None
            if c.nonce is None or not nkey.verify_signature(juc["sub"], c.nonce, raw):
                c.debug("Signature not verified")
                return None
        if info.is_revoked(juc["sub"], int(juc.get("iat") or 0)):
            c.debug("User authentication revoked")
            return None
        if not validate_src(src_n, c.host):
            c.server.log.error(f"{c.log_prefix()} - Bad src Ip {c.host}")
            return None
        ok, valid_for = validate_times(src_n)
        if not ok:
            c.server.log.error(f"{c.log_prefix()} - Outside connect times")
            return None
        perms = permissions_from_claims(src_n)
        uses_default = perms is None
        if uses_default:
            perms = info.default_perms
        u = JwtUser(juc, token, acc.name, perms, known_types or None, src_n)
        u.uses_default = uses_default  # type: ignore[attr-defined]
        u.bearer = bearer
        u.valid_for = valid_for  # type: ignore[attr-defined]
        c.debug(f'Authenticated JWT: Client "{juc["sub"]}" (claim-name: "{juc.get("name", "")}", claim-tags: '
                f'{n.get("tags") or []}) signed with "{juc["iss"]}" by Account "{acc.name}" (claim-name: '
                f'"{info.name}", claim-tags: {info.nats.get("tags") or []}) signed with "{info.issuer}"')
        return u

    def callout_for(self, acc_name: str) -> Any:
        """The auth callout of an account whose JWT turns on external authorization, else None."""
        from rillet.config.callout import CalloutConfig
        from rillet.server.auth_callout import AuthCallout
        info = self.infos.get(acc_name)
        callouts: dict[str, Any] = self.__dict__.setdefault("callouts", {})
        if info is None or info.ext_auth is None:
            return None
        cfg = CalloutConfig()
        cfg.issuer = cfg.account = acc_name
        cfg.auth_users = list(info.ext_auth["auth_users"])
        cfg.allowed_accounts = list(info.ext_auth["allowed_accounts"])
        cfg.xkey = info.ext_auth["xkey"]
        ac = callouts.get(acc_name)
        if ac is None:
            ac = callouts[acc_name] = AuthCallout(self.server, cfg, operator=True)
        else:
            ac.cfg = cfg  # (an account JWT update changed the authorization section)
        return ac

    def connected(self, c: Any, u: JwtUser) -> None:
        """After the client is bound to the account: limits and the expiration timer."""
        c.jwt_user = u
        self.apply_client_limits(c)
        delay = expiry_delay(u)
        if delay is not None and not c.closed:
            c.jwt_timer = self.server.loop.call_later(delay, self._expired, c)

    def _expired(self, c: Any) -> None:
        if c.closed:
            return
        c.debug("User Authentication Expired")
        c.close("Authentication Expired", "User Authentication Expired")
        self.server.flush_clients()

    def apply_client_limits(self, c: Any) -> None:
        """nats-server's applyAccountLimits: the lowest of user, account and server payload / subs limits."""
        u: JwtUser | None = getattr(c, "jwt_user", None)
        acc = c.account
        o = self.server.opts

        def lowest(*vals: int) -> int:
            v = [x for x in vals if x is not None and x >= 0]
            return min(v) if v else NO_LIMIT
        mpay = lowest(u.payload if u else NO_LIMIT, acc.mpay, o.max_payload or NO_LIMIT)
        msubs = lowest(u.subs if u else NO_LIMIT, acc.msubs, o.max_subscriptions or NO_LIMIT)
        c.parser.max_payload = mpay if mpay >= 0 else (1 << 62)
        c.msubs = msubs
        if msubs >= 0 and len(c.subs) >= msubs:
            c.server.log.error(f"{c.log_prefix()} - maximum subscriptions exceeded")
            c.close("Maximum Subscriptions Exceeded", "maximum subscriptions exceeded")

    def _refresh_clients(self, acc: Any, info: AccountInfo, old: AccountInfo | None = None) -> None:
        clients = sorted([c for c in acc.clients if getattr(c, "kind", INTERNAL) == CLIENT and not c.closed]
                         + self._mqtt_conns(acc), key=lambda c: c.start_time)
        count = 0
        for c in clients:
            if acc.mconns >= 0 and count >= acc.mconns:
                c.server.log.error(f"{c.log_prefix()} - maximum account active connections exceeded")
                c.close("Maximum Account Connections Exceeded", "maximum account active connections exceeded")
                continue
            count += 1
            u = getattr(c, "jwt_user", None)
            cu = getattr(c, "callout_user", None)  # admitted by an auth callout: no JWT of its own
            if u is None and cu is None:
                continue
            if getattr(u or cu, "uses_default", False) and old is not None and \
                    old.nats.get("default_permissions") != info.nats.get("default_permissions"):
                # the account's default permissions changed: users without their own take the new ones, and
                # lose the subscriptions these no longer allow
                from rillet.server.account_reload import prune_subscriptions
                from rillet.server.auth import PermChecker
                (u or cu).permissions = info.default_perms
                c.perms = PermChecker(info.default_perms) if info.default_perms is not None else None
                if cu is not None:
                    cu.callout.deny_callout_subject(c)
                c.update_slow_path()
                if getattr(c, "ms", None) is not None:
                    c.prune_subscriptions()  # (an MQTT connection: its MQTT subscriptions)
                else:
                    prune_subscriptions(self.server, c)
                if c.closed:
                    continue
            if u is None:
                if info.is_revoked(cu.nkey, int(cu.issued)):
                    c.debug("User Authentication Revoked")
                    c.close("Credentials Revoked", "User Authentication Revoked")
                continue
            if u.bearer and info.disallow_bearer:
                c.debug("Bearer User JWT not allowed")
                self._auth_violation(c)
                continue
            if info.is_revoked(u.nkey, u.issued):
                c.debug("User Authentication Revoked")
                c.close("Credentials Revoked", "User Authentication Revoked")
                continue
            if u.issuer != acc.name and (u.issuer not in info.signing_keys or (
                    old is not None and old.signing_keys.get(u.issuer) != info.signing_keys.get(u.issuer))):
                # a signing key removed, or its scope changed: closed without an -ERR, as nats-server does
                c.close("Authentication Failure")
                continue
            if getattr(c, "ms", None) is None:
                self.apply_client_limits(c)
            else:  # an MQTT connection (its JWT's limits count from now on, as in nats-server)
                c.apply_limits()
        if self.server.leafnodes is not None:
            self.server.leafnodes.claims_updated(acc, info)  # (leaf connections: revocations and limits too)
        self.server.flush_clients()

    @staticmethod
    def _auth_violation(c: Any) -> None:
        c.server.log.error(f"{c.log_prefix()} - authentication error")
        c.close("Authentication Failure", "Authorization Violation")

    # ---- updates ----------------------------------------------------------------------------------------

    def name_tag(self, acc_name: str) -> str:
        """The account's name from its JWT (nats-server's name tag), else its public key."""
        info = self.infos.get(acc_name)
        return info.name if info is not None and info.name else acc_name

    def operators_subjects(self) -> set[str]:
        return {op["sub"] for op in self.operators}

    def strict_operator_subjects(self) -> set[str]:
        return {op["sub"] for op in self.operators if jwt.nats_section(op).get("strict_signing_key_usage")}

    def register_sys(self, ic: Any) -> None:
        """Called by the system account when it starts: the resolver's $SYS request handlers."""
        sys_pub = self.server.opts.system_account
        if jwt.is_public_key(sys_pub, "A"):
            self.lookup_account(sys_pub)  # the system account's JWT applies from the start
        self.resolver.register(ic)

    def account_removed(self, pub: str) -> None:
        """A deleted account JWT: lock the account out and disconnect its clients (as nats-server does)."""
        acc = self.server.accounts.get(pub)
        if acc is None or pub not in self.infos:
            return
        self.server.log.debug(f"Disable account {pub} due to remove")
        acc.mconns = acc.msubs = acc.mpay = 0
        del self.infos[pub]
        js = getattr(self.server, "jetstream", None)
        if js is not None and pub in getattr(js, "accounts", {}):
            js.accounts.pop(pub).stop()
        for c in list(acc.clients) + self._mqtt_conns(acc):
            if getattr(c, "kind", INTERNAL) == CLIENT and not c.closed or getattr(c, "ms", None) is not None:
                c.close("Authentication Expired", "Account Authentication Expired")
        self.server.flush_clients()

    def update_account(self, pub: str, token: str) -> None:
        """A newer JWT for an account: applied in place when the account is loaded. JwtError on problems."""
        claims = self.check_account_jwt(token, pub)
        if not self.is_trusted(claims["iss"]):
            raise jwt.JwtError("no trusted issuer")
        acc = self.server.accounts.get(pub)
        if acc is not None and pub in self.infos:
            self.apply_account(acc, claims, token)


def expiry_delay(u: Any) -> float | None:
    """Seconds until a JWT user's connection must go (its ``exp``, or the end of its allowed time window,
    whichever comes first); None when neither limits it."""
    exp = int(u.claims.get("exp") or 0)
    delay = max(exp - time.time(), 0.0) if exp else None
    vf = getattr(u, "valid_for", 0.0)
    if vf:
        delay = vf if delay is None else min(delay, vf)
    return delay


def _decode_sig(sig: str) -> bytes | None:
    import base64
    import binascii
    try:
        return base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    except (binascii.Error, ValueError):
        pass
    try:
        return base64.b64decode(sig + "=" * (-len(sig) % 4))
    except (binascii.Error, ValueError):
        return None


def _go_utc(ts: int) -> str:
    return _dt.datetime.fromtimestamp(int(ts), _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
