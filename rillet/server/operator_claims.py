"""What operator mode checks in the JWTs themselves, without a server: the operator options, an account's
claims (limits, exports and imports, signing keys), a user's permissions, connection times and source
networks, as nats-server validates them. ``rillet.server.operator.OperatorMode`` uses these on a running
server (account loading, CONNECT authentication, updates pushed through the system account).
"""
from __future__ import annotations

import datetime as _dt
import ipaddress
from typing import Any, Iterator

from rillet import jwt
from rillet.config.options import Permission, Permissions, ResponsePermission

NO_LIMIT = -1
_USER_PERMISSION_FIELDS = ("pub", "sub", "resp", "subs", "data", "payload", "src", "times", "times_location",
                          "bearer_token", "proxy_required", "allowed_connection_types")
CONN_TYPES = {"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS"}


def user_claims(token: str) -> dict | None:
    """The claims of a user JWT (its signature checked), or None when ``token`` is not one."""
    try:
        juc = jwt.decode(token)
    except jwt.JwtError:
        return None
    return juc if jwt.claim_type(juc) == jwt.USER else None


def validate_operator_options(o: Any) -> None:
    """nats-server's checks of operator mode against the rest of the configuration (ValueError)."""
    ops = o.trusted_operators
    if not ops:
        if o.default_sentinel:
            raise ValueError("default sentinel requires operators and accounts")
        return
    if o.default_sentinel:
        juc = user_claims(o.default_sentinel)
        if juc is None:
            raise ValueError("default sentinel JWT not valid")
        n = jwt.nats_section(juc)
        scoped = bool(n.get("issuer_account")) and not any(n.get(k) for k in ("pub", "sub", "resp"))
        if not n.get("bearer_token") and not scoped:  # (a scoped user's template is checked when it is used)
            raise ValueError("default sentinel must be a bearer token")
    if o.resolver is None:
        asu = jwt.nats_section(ops[0]).get("account_server_url") if len(ops) == 1 else None
        if not asu or not isinstance(asu, str):
            raise ValueError("operators require an account resolver to be configured")
        # the operator's account server as a URL resolver (nsc push appends /accounts), as nats-server
        o.resolver = {"type": "URL", "url": asu.strip().rstrip("/") + "/accounts"}
    if o.accounts:
        raise ValueError("operators do not allow Accounts to be configured directly")
    if o.users or o.nkeys:
        raise ValueError("operators do not allow users to be configured directly")
    if o.trusted_keys:
        raise ValueError("conflicting options for 'TrustedKeys' and 'TrustedOperators'")
    if not o.system_account:
        o.system_account = jwt.nats_section(ops[0]).get("system_account", "") or ""
        if not o.system_account and o.resolver.get("type") == "FULL":
            raise ValueError("using nats based account resolver - the system account needs to be specified in "
                             "configuration or the operator jwt")
    else:
        sys_keys = [jwt.nats_section(op).get("system_account") for op in ops]
        if any(sys_keys) and o.system_account not in sys_keys:
            raise ValueError("system_account in config and operator JWT must be identical")
    for key in _pinned(o):
        if not jwt.is_public_key(key, "A"):
            raise ValueError(f'pinned account key "{key}" is not a valid public account nkey')
    import rillet
    srv_ver = tuple(int(x) for x in rillet.SERVER_VERSION.split("-")[0].split(".")[:3])
    for op in ops:
        want = jwt.nats_section(op).get("assert_server_version") or ""
        if not want:
            continue
        parts = str(want).split(".")
        sub = op.get("sub", "")
        if len(parts) != 3:
            raise ValueError(f"operator {sub} expects version {want} got error instead: asserted server version "
                             f"must be of the form <major>.<minor>.<update>")
        try:
            ver = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"operator {sub} expects version {want} got error instead: asserted server version "
                             f"cant parse {want} to int") from None
        for label, a, b in zip(("major", "minor", "update"), ver, srv_ver):
            if a > b:
                raise ValueError(f"operator {sub} expected {label} version {a} > server {label} version {b}")
            if a < b:
                break
    if o.no_auth_user:
        raise ValueError("no_auth_user not compatible with Trusted Operator")


def _pinned(o: Any) -> list[str]:
    v = o.extra.get("resolver_pinned_accounts")
    if v is None:
        return []
    return [v] if isinstance(v, str) else [str(x) for x in v]


def _contained(a: str, b: str) -> bool:
    from rillet.subjects.validate import subject_is_subset_match
    try:
        return subject_is_subset_match(a, b)
    except Exception:
        return False


def _typed(entries: list, what: str, errs: list[str]) -> Iterator[tuple[dict, str]]:
    """Each export or import (``what``) of a claims document with its type, "stream" or "service"; one that
    is not an object or has another type is reported in ``errs`` and passed over."""
    for e in entries:
        if not isinstance(e, dict):
            errs.append(f"null {what} is not allowed")
            continue
        t = e.get("type", "")
        if t not in ("stream", "service"):
            errs.append(f'invalid {what} type: "{t}"')
            continue
        yield e, t


def validate_account_claims(c: dict) -> list[str]:
    """The blocking problems nats-server's JWT library finds in an account JWT (exports, imports, limits)."""
    n = jwt.nats_section(c)
    errs: list[str] = []
    lim = n.get("limits") or {}
    exports = n.get("exports") or []
    imports = n.get("imports") or []
    if (lim.get("mem_storage") or lim.get("disk_storage")) and lim.get("tiered_limits"):
        errs.append("JetStream Limits and tiered JetStream Limits are mutually exclusive")
    subjects: dict[str, list[str]] = {"stream": [], "service": []}
    for e, t in _typed(exports, "export", errs):
        rt = e.get("response_type", "")
        if t == "service" and rt not in ("", "Singleton", "Stream", "Chunked"):
            errs.append(f'invalid response type for service: "{rt}"')
        if t == "stream" and rt:
            errs.append(f'invalid response type for stream: "{rt}"')
        if (e.get("response_threshold") or 0) < 0:
            errs.append("negative response threshold is invalid")
        subjects[t].append(str(e.get("subject", "")))
    for t, subs in subjects.items():
        for i, a in enumerate(subs):
            for b in subs[i + 1:]:
                if _contained(a, b) or _contained(b, a):
                    errs.append(f'{t} export subject "{a}" already exports "{b}"')
    seen: dict[str, list[str]] = {}
    for imp, t in _typed(imports, "import", errs):
        if not imp.get("account"):
            errs.append("account to import from is not specified")
        if imp.get("local_subject") and imp.get("to"):
            errs.append("Local Subject replaces To")
        if t == "service":
            sub = imp.get("to") or imp.get("local_subject") or imp.get("subject", "")
            others = seen.setdefault(imp.get("account", ""), [])
            for o in others:
                if _contained(sub, o) or _contained(o, sub):
                    errs.append(f'overlapping subject namespace for "{sub}" and "{o}" in same account '
                                f'"{imp.get("account", "")}"')
            others.append(sub)
    errs.extend(_authorization_issues(n.get("authorization")))
    n_imp = lim.get("imports", 0)
    if n_imp is not None and n_imp != NO_LIMIT and len(imports) > n_imp:
        errs.append("the account contains more imports than allowed by the operator")
    n_exp = lim.get("exports", 0)
    if n_exp is not None and n_exp != NO_LIMIT:
        if len(exports) > n_exp:
            errs.append("the account contains more exports than allowed by the operator")
        if not lim.get("wildcards") and any("*" in str(e.get("subject", "")).split(".") or
                                             ">" in str(e.get("subject", "")).split(".")
                                             for e in exports if isinstance(e, dict)):
            errs.append("the account contains wildcard exports that are not allowed by the operator")
    return errs


def _authorization_issues(az: Any) -> list[str]:
    """Problems of an account JWT's ``authorization`` (external authorization) section."""
    if not isinstance(az, dict):
        return []
    from rillet.server.auth_callout import is_curve_key
    errs: list[str] = []
    users = _as_list(az.get("auth_users"))
    accounts = _as_list(az.get("allowed_accounts"))
    if accounts and not users:
        errs.append("External authorization cannot have accounts without users specified")
    for u in users:
        if not jwt.is_public_key(u, "U"):
            errs.append(f'AuthUser "{u}" is not a valid user public key')
    for a in accounts:
        if a == "*":
            if len(accounts) > 1:
                errs.append('AllowedAccounts can only be a list of accounts or "*"')
        elif not jwt.is_public_key(a, "A"):
            errs.append(f'Account "{a}" is not a valid account public key')
    xk = az.get("xkey")
    if xk and not is_curve_key(xk):
        errs.append(f'XKey "{xk}" is not a valid public xkey')
    return errs


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return [str(x) for x in v]


def _perm(d: Any) -> Permission | None:
    if not isinstance(d, dict):
        return None
    allow = d.get("allow")
    deny = d.get("deny")
    if not allow and not deny:
        return None
    return Permission(allow=list(allow) if allow else None, deny=list(deny) if deny else None)


def permissions_from_claims(n: dict) -> Permissions | None:
    """A user's (or an account's default) permissions: ``pub``, ``sub`` and ``resp`` of a JWT."""
    pub = _perm(n.get("pub"))
    sub = _perm(n.get("sub"))
    resp = None
    r = n.get("resp")
    if isinstance(r, dict):
        resp = ResponsePermission(max_msgs=int(r.get("max") or 0), expires=(r.get("ttl") or 0) / 1e9)
    if pub is None and sub is None and resp is None:
        return None
    return Permissions(publish=pub, subscribe=sub, response=resp)


class AccountValidationError(jwt.JwtError):
    """An account JWT that decodes but has blocking validation issues."""


def jwt_export_latency(srv: Any, exp: dict, response_type: str) -> Any:
    """The ``service_latency`` of a service export in an account JWT (None when absent or not usable:
    nats-server then only logs at debug level)."""
    from rillet.server.latency import Latency
    lat = exp.get("service_latency")
    if not isinstance(lat, dict):
        return None
    smp = lat.get("sampling")
    results = lat.get("results")
    sampling = 0 if smp == "headers" else smp if isinstance(smp, int) and not isinstance(smp, bool) else -1
    from rillet.subjects.validate import is_valid_literal_subject, subject_is_subset_match
    if sampling != 0 and not 1 <= sampling <= 100:
        err = "bad sampling percentage, should be 1-100"
    elif not isinstance(results, str) or not is_valid_literal_subject(results) or \
            subject_is_subset_match(results, str(exp.get("subject") or "")):
        err = "invalid publish subject"
    elif response_type != "singleton":
        err = "bad service response type"
    else:
        return Latency(sampling, results)
    note = " (using headers)" if sampling == 0 else ""
    srv.log.debug(f"Error adding latency tracking{note} for service export: {err}")
    return None


class JwtUser:
    """What a user JWT grants, in the shape of a configured ``User`` (the client applies it alike)."""

    def __init__(self, claims: dict, token: str, account: str, perms: Permissions | None,
                 conn_types: list[str] | None, limits: dict) -> None:
        self.claims = claims
        self.jwt = token
        self.username = ""
        self.password = ""
        self.nkey = claims["sub"]
        self.account = account
        self.permissions = perms
        self.allowed_connection_types = conn_types
        self.issued = int(claims.get("iat") or 0)
        self.issuer = claims.get("iss", "")
        self.bearer = bool(jwt.nats_section(claims).get("bearer_token"))
        # a v2 JWT without a limit means 0 (nats-server reads the missing field as zero); v1 means no limit
        dflt = NO_LIMIT if jwt.nats_section(claims).get("version") == 1 else 0
        self.subs = int(limits.get("subs") if limits.get("subs") is not None else dflt)
        self.payload = int(limits.get("payload") if limits.get("payload") is not None else dflt)


class AccountInfo:
    """The parsed account JWT of a loaded account."""

    def __init__(self, claims: dict, token: str) -> None:
        self.claims = claims
        self.jwt = token
        n = jwt.nats_section(claims)
        self.nats = n
        self.name = claims.get("name", "")
        self.issuer = claims.get("iss", "")
        self.limits: dict = n.get("limits") or {}
        self.signing_keys: dict[str, dict | None] = {}
        for sk in n.get("signing_keys") or []:
            if isinstance(sk, str):
                self.signing_keys[sk] = None
            elif isinstance(sk, dict) and sk.get("key"):
                self.signing_keys[sk["key"]] = sk  # a scoped signing key (kind user_scope, with a template)
        self.revocations: dict[str, int] = {k: int(v) for k, v in (n.get("revocations") or {}).items()}
        self.default_perms = permissions_from_claims(n.get("default_permissions") or {})
        self.disallow_bearer = bool(self.limits.get("disallow_bearer"))
        self.expires = int(claims.get("exp") or 0)
        # external authorization (auth callout) of this account's users: on when it lists auth users
        az = n.get("authorization")
        self.ext_auth: dict | None = None
        if isinstance(az, dict) and az.get("auth_users"):
            self.ext_auth = {"auth_users": _as_list(az.get("auth_users")),
                             "allowed_accounts": _as_list(az.get("allowed_accounts")),
                             "xkey": str(az.get("xkey") or "")}

    def is_revoked(self, pub: str, issued: int) -> bool:
        r = self.revocations
        if not r:
            return False
        t = r.get(pub)
        if t is not None and t >= issued:
            return True
        t = r.get("*")
        return t is not None and t >= issued

    def knows_issuer(self, sub: str, iss: str) -> tuple[bool, dict | None]:
        if iss == sub:
            return True, None
        if iss in self.signing_keys:
            return True, self.signing_keys[iss]
        return False, None


def _parse_hms(s: str) -> _dt.time:
    return _dt.datetime.strptime(s.strip(), "%H:%M:%S").time()


def validate_times(n: dict, now: _dt.datetime | None = None) -> tuple[bool, float]:
    """(allowed now, seconds the current window stays open or 0 when unbounded) for a user's ``times``."""
    ranges = n.get("times") or []
    if not ranges:
        return True, 0.0
    tz: Any = _dt.timezone.utc
    loc = n.get("times_location") or ""
    if loc:
        try:
            from zoneinfo import ZoneInfo
            tz = ZoneInfo(loc)
        except Exception:
            return False, 0.0
    else:
        tz = None  # server local time
    now = now or (_dt.datetime.now(tz) if tz is not None else _dt.datetime.now())
    for r in ranges:
        try:
            start = _parse_hms(r.get("start", ""))
            end = _parse_hms(r.get("end", ""))
        except (ValueError, AttributeError):
            return False, 0.0
        s_dt = now.replace(hour=start.hour, minute=start.minute, second=start.second, microsecond=0)
        e_dt = now.replace(hour=end.hour, minute=end.minute, second=end.second, microsecond=0)
        if start > end:
            # a range over midnight starts today and ends tomorrow (as nats-server computes it: the hours after
            # midnight, before today's start, are outside the range)
            e_dt += _dt.timedelta(days=1)
        if s_dt < now < e_dt:
            return True, (e_dt - now).total_seconds()
    return False, 0.0


def validate_src(n: dict, host: str) -> bool:
    cidrs = _as_list(n.get("src"))
    if not cidrs:
        return True
    if not host:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    for c in cidrs:
        try:
            if ip in ipaddress.ip_network(c, strict=False):
                return True
        except ValueError:
            return False
    return False


def _expand_template(t: dict, juc: dict, acc_name: str, info: AccountInfo) -> dict:
    """A scoped signing key's template with {{name()}}, {{subject()}}, {{account-name()}} ... filled in."""
    import re
    n = jwt.nats_section(juc)
    values = {"name": juc.get("name", ""), "subject": juc.get("sub", ""), "account-name": info.name,
              "account-subject": acc_name}
    tags = n.get("tags") or []
    atags = info.nats.get("tags") or []
    pat = re.compile(r"\{\{\s*([\w-]+)\(([^)]*)\)\s*\}\}")

    def expand(s: str) -> list[str]:
        m = pat.search(s)
        if not m:
            return [s]
        op, arg = m.group(1), m.group(2).strip().strip('"')
        if op in values:
            vals = [values[op]]
        elif op in ("tag", "account-tag"):
            src = tags if op == "tag" else atags
            vals = [x.split(":", 1)[1] for x in src if isinstance(x, str) and x.split(":", 1)[0] == arg and ":" in x]
        else:
            raise ValueError(f"template operation in {s!r}: {op!r} is not defined")
        if not vals or any(v == "" for v in vals):
            raise ValueError(f"generated invalid subject {s!r}")
        out: list[str] = []
        for v in vals:
            out.extend(expand(s[:m.start()] + v + s[m.end():]))
        return out

    out = dict(t)
    for k in ("pub", "sub"):
        p = t.get(k)
        if isinstance(p, dict):
            q = {}
            for d in ("allow", "deny"):
                if p.get(d):
                    q[d] = [x for s in p[d] for x in expand(s)]
            out[k] = q
    return out
