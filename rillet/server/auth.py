"""Authentication (token, user/password with bcrypt, nkeys) and per-user permissions."""
from __future__ import annotations

import base64
import time
from typing import Any

from rillet.digest import choice, compare_digest
from rillet.config.options import Options, Permissions, User
from rillet.nkey import verify_signature
from rillet.subjects.validate import match_literal, subject_matches_filter

GLOBAL_ACCOUNT = "$G"
DEFAULT_ALLOW_RESPONSE_MAX_MSGS = 1
DEFAULT_ALLOW_RESPONSE_EXPIRATION = 120.0
_PCACHE_MAX = 4096


def _is_bcrypt(s: str) -> bool:
    return s.startswith("$2a$") or s.startswith("$2b$") or s.startswith("$2y$") or s.startswith("$2x$")


def compare_secret(configured: str, given: str) -> bool:
    """Compare a configured secret (plain or bcrypt hash) with what the client sent, in constant time."""
    if _is_bcrypt(configured):
        import bcrypt
        try:
            return bcrypt.checkpw(given.encode(), configured.encode())
        except ValueError:
            return False
    return compare_digest(configured.encode(), given.encode())


def _split_queue_entries(entries: list[str] | None) -> tuple[list[str], list[tuple[str, str]]] | None:
    """Split permission entries into plain subjects and ("subject", "queue") pairs ("foo.> bar" form)."""
    if entries is None:
        return None
    plain: list[str] = []
    queued: list[tuple[str, str]] = []
    for e in entries:
        parts = e.split()
        if len(parts) >= 2:
            queued.append((parts[0], parts[1]))
        elif parts:
            plain.append(parts[0])
    return plain, queued


def _queue_matches(queue: str, patterns: list[str]) -> bool:
    for q in patterns:
        if subject_matches_filter(queue, q):
            return True
    return False


class PermChecker:
    """A user's compiled permissions; each client has its own (with its own caches and reply tracking)."""

    __slots__ = ("pub_allow", "pub_deny", "sub_allow", "sub_deny", "resp", "replies", "_pcache", "deny_all")

    def __init__(self, perms: Permissions) -> None:
        pub = perms.publish
        resp = perms.response
        pub_allow = None if pub is None or pub.allow is None else list(pub.allow)
        pub_deny = None if pub is None or pub.deny is None else list(pub.deny)
        if resp is not None and pub_allow is None:
            pub_allow = []  # allow_responses turns off the blanket publish allow
        self.pub_allow = pub_allow
        self.pub_deny = pub_deny
        sub = perms.subscribe
        self.sub_allow = _split_queue_entries(None if sub is None else sub.allow)
        self.sub_deny = _split_queue_entries(None if sub is None else sub.deny)
        self.resp = None
        if resp is not None:
            mx = resp.max_msgs or DEFAULT_ALLOW_RESPONSE_MAX_MSGS
            exp = resp.expires or DEFAULT_ALLOW_RESPONSE_EXPIRATION
            self.resp = (mx, exp)
        self.replies: dict[bytes, list] = {}
        self._pcache: dict[bytes, bool] = {}
        self.deny_all = False

    @property
    def has_pub(self) -> bool:
        return self.pub_allow is not None or self.pub_deny is not None

    def can_publish(self, subject: bytes) -> bool:
        v = self._pcache.get(subject)
        if v is not None:
            return v
        s = subject.decode("utf-8", "surrogateescape")
        allowed = True
        if self.pub_allow is not None:
            allowed = any(subject_matches_filter(s, p) for p in self.pub_allow)
        if allowed and self.pub_deny is not None:
            allowed = not any(subject_matches_filter(s, p) for p in self.pub_deny)
        if not allowed and self.resp is not None:
            r = self.replies.get(subject)
            if r is not None:
                r[1] += 1
                mx, exp = self.resp
                if (mx > 0 and r[1] > mx) or (exp > 0 and time.monotonic() - r[0] > exp):
                    del self.replies[subject]
                else:
                    return True
            return False
        if len(self._pcache) >= _PCACHE_MAX:
            self._pcache.clear()
        self._pcache[subject] = allowed
        return allowed

    def track_reply(self, reply: bytes) -> None:
        """Called when a message with a reply subject is delivered to this client (allow_responses)."""
        if len(self.replies) > 10000:
            self._prune_replies()
        self.replies[reply] = [time.monotonic(), 0]

    def _prune_replies(self) -> None:
        mx, exp = self.resp  # type: ignore[misc]
        now = time.monotonic()
        for k in [k for k, v in self.replies.items() if (exp > 0 and now - v[0] > exp) or (mx > 0 and v[1] >= mx)]:
            del self.replies[k]

    def can_subscribe(self, subject: str, queue: str | None = None) -> bool:
        # as nats-server, the subscription subject is matched against the permission entries with its
        # tokens taken literally: "foo.>" is allowed by "foo.*" (a "*" entry takes any one token, ">" too)
        allowed = True
        if self.sub_allow is not None:
            plain, queued = self.sub_allow
            allowed = any(match_literal(subject, p) for p in plain)
            if queue:
                qpats = [q for s, q in queued if match_literal(subject, s)]
                if qpats:
                    allowed = _queue_matches(queue, qpats)
        if allowed and self.sub_deny is not None:
            plain, queued = self.sub_deny
            allowed = not any(match_literal(subject, p) for p in plain)
            if queue:
                qpats = [q for s, q in queued if match_literal(subject, s)]
                if qpats:
                    allowed = not _queue_matches(queue, qpats)
        return allowed

    def deliver_denied(self, subject: str) -> bool:
        """A wildcard subscription must not receive a message on a subject its deny list names."""
        if self.sub_deny is None:
            return False
        return any(subject_matches_filter(subject, p) for p in self.sub_deny[0])


def sys_only_no_auth_user(opts: Options) -> bool:
    """Whether nats-server invents a user so that clients without credentials reach the global account: when
    the configuration's only accounts are the global and the system account (users typically in the system
    account only, as in ``accounts { $SYS { users = [...] } }``).

    nats-server does this when it is not in operator mode, has no ``authorization {}`` block and no
    ``no_auth_user``, and the accounts it knows are exactly ``$G`` and the system account (``system_account``,
    or an account named ``$SYS``). The user (``new_implicit_user_name``) is the no_auth_user, bound to
    ``$G``; the server's INFO still says ``auth_required``.
    """
    if opts.trusted_operators or opts.trusted_keys or opts.no_auth_user or opts.auth_block:
        return False
    sys_name = opts.system_account or ("$SYS" if "$SYS" in opts.accounts else "")
    if not sys_name or sys_name not in opts.accounts:
        return False
    return len(set(opts.accounts) | {GLOBAL_ACCOUNT}) == 2


def new_implicit_user_name() -> str:
    """``nats-`` and 8 random characters, as nats-server names the user (kept by the server over reloads)."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "nats-" + "".join(choice(alphabet) for _ in range(8))


class Authenticator:
    """Decides whether a CONNECT is allowed, from the server's Options.

    ``implicit_user``: when ``sys_only_no_auth_user`` holds, the name of the user of the global account that
    clients without credentials are admitted as (its password, as nats-server's, is the name's tail).
    """

    def __init__(self, opts: Options, implicit_user: str = "") -> None:
        self.opts = opts
        self.failure = ""  # why the last authenticate() refused, when it is not a credentials mismatch
        self._proxied = False
        self.implicit_user = implicit_user
        self.token = opts.authorization
        self.username = opts.username
        self.password = opts.password
        self.users: dict[str, User] = {}
        self.nkeys: dict[str, User] = {}
        for u in opts.users:
            if u.nkey:
                self.nkeys[u.nkey] = u
            else:
                self.users[u.username] = u
        for u in opts.nkeys:
            self.nkeys[u.nkey] = u
        self.no_auth_name = opts.no_auth_user
        if implicit_user and not opts.no_auth_user:
            self.users[implicit_user] = User(username=implicit_user, password=implicit_user[6:],
                                             account=GLOBAL_ACCOUNT)
            self.no_auth_name = implicit_user
        self.operator_mode = bool(opts.trusted_operators or opts.trusted_keys)
        self.required = bool(self.token or self.username or self.users or self.nkeys or self.operator_mode)
        if opts.no_auth_user and opts.no_auth_user not in self.users:
            raise ValueError(f'no_auth_user: "{opts.no_auth_user}" not present as user or nkey in authorization '
                             f"block or account configuration")

    @property
    def needs_nonce(self) -> bool:
        return bool(self.nkeys) or self.operator_mode or bool(self.opts.proxies_trusted)

    def proxy_check(self, connect: dict, nonce: bytes | None) -> tuple[bool, str]:
        """(proxied, key) of a CONNECT, as nats-server's proxyCheck: with trusted proxies configured and a
        ``proxy_sig`` given, the connection is proxied, and ``key`` is the trusted proxy whose signature of the
        nonce it is ("" when none verifies it: the connection is refused, "Proxy Not Trusted"). Without either,
        (False, "")."""
        psig = connect.get("proxy_sig") if isinstance(connect, dict) else None
        trusted = self.opts.proxies_trusted
        if not psig or not isinstance(psig, str) or not trusted:
            return False, ""
        raw = psig.encode()
        try:
            sig = base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))
        except ValueError:
            return True, ""
        for key in trusted:
            if nonce is not None and verify_signature(key, nonce, sig):
                return True, key
        return True, ""

    def no_auth_user(self) -> User | None:
        name = self.no_auth_name
        if name:
            return self.users.get(name)
        return None

    def authenticate(self, connect: dict, nonce: bytes | None, conn_type: str = "STANDARD",
                     peer_cert: dict | None = None, proxied: bool = False) -> User | None | bool:
        """Return the matched User, True (allowed, no user record), or False (refused; ``failure`` says
        "Proxy Required" when the user, or the single user or token, may only come through a trusted proxy
        and this connection did not: ``proxied``).

        ``peer_cert``: the client certificate (``ssl.getpeercert()``) when ``tls { verify_and_map }`` is on.
        """
        self.failure = ""
        self._proxied = proxied
        return self._authenticate(connect, nonce, conn_type, peer_cert)

    def _proxy_refused(self, proxy_required: bool) -> bool:
        """(as nats-server: checked once the user is known, before its credentials)"""
        if proxy_required and not self._proxied:
            self.failure = "Proxy Required"
            return True
        return False

    def _authenticate(self, connect: dict, nonce: bytes | None, conn_type: str,
                      peer_cert: dict | None) -> User | None | bool:
        if not self.required:
            return True
        # (verify_and_map of the listener the connection came to: the client port's tls {}, or for a leaf
        # connection without leafnodes users, the leafnodes tls {}, as nats-server's checkClientAuth)
        leaf = self.opts.leaf
        tls = self.opts.tls if conn_type == "STANDARD" else \
            leaf.tls if conn_type == "LEAFNODE" and leaf is not None else None
        if tls is not None and tls.verify_and_map and self.users:
            u = tls_map_user(self.users, peer_cert or {}, conn_type)
            return u if u is not None and not self._proxy_refused(u.proxy_required) else False
        nkey = connect.get("nkey") or ""
        if self.nkeys and nkey:
            u = self.nkeys.get(nkey)
            if u is None or nonce is None or self._proxy_refused(u.proxy_required):
                return False
            sig = connect.get("sig") or ""
            if not self._verify_nkey(nkey, sig, nonce):
                return False
            return u if self._type_allowed(u, conn_type) else False
        user = connect.get("user") or ""
        password = connect.get("pass") or ""
        if self.users:
            if not user:
                # no credentials at all: the no_auth_user, if one is configured
                if not password and not connect.get("auth_token") and self.no_auth_name:
                    u = self.users.get(self.no_auth_name)
                    if u is not None and self._type_allowed(u, conn_type) and not self._proxy_refused(
                            u.proxy_required):
                        return u
                return False
            u = self.users.get(user)
            if u is None or self._proxy_refused(u.proxy_required) or not compare_secret(u.password, password):
                return False
            return u if self._type_allowed(u, conn_type) else False
        if (self.username or self.token) and self._proxy_refused(self.opts.proxy_required):
            return False
        if self.username:
            if user != self.username or not compare_secret(self.password, password):
                return False
            return True
        if self.token:
            token = connect.get("auth_token") or ""
            return compare_secret(self.token, token)
        return False

    @staticmethod
    def _type_allowed(u: User, conn_type: str) -> bool:
        types = u.allowed_connection_types
        if not types:
            return True
        return conn_type in types

    @staticmethod
    def _verify_nkey(nkey: str, sig: str, nonce: bytes) -> bool:
        raw = sig.encode()
        raw += b"=" * (-len(raw) % 4)
        try:
            signature = base64.urlsafe_b64decode(raw)
        except ValueError:
            return False
        return verify_signature(nkey, nonce, signature)


# ---- TLS verify_and_map: users named by the client certificate -----------------------------------------

_DN_KEYS = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "localityName": "L",
            "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "postalCode": "POSTALCODE",
            "serialNumber": "SERIALNUMBER", "domainComponent": "DC", "userId": "UID"}


def _dn_escape(v: str) -> str:
    out = []
    for i, ch in enumerate(v):
        if ch in ',+"\\<>;' or (i == 0 and ch in " #") or (i == len(v) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def cert_dn_string(subject: tuple) -> str:
    """The subject of ``ssl.getpeercert()`` as an RFC 2253 string, last RDN first (as Go prints it)."""
    rdns = []
    for rdn in reversed(subject or ()):
        rdns.append("+".join(f"{_DN_KEYS.get(k, k)}={_dn_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def parse_dn(s: str) -> list[frozenset] | None:
    """An RFC 2253 DN string as a list of RDNs (sets of (TYPE, value)); None when it is not a DN."""
    rdns: list[frozenset] = []
    cur: list[tuple[str, str]] = []
    key = ""
    buf: list[str] = []
    in_key = True
    i = 0
    while i <= len(s):
        ch = s[i] if i < len(s) else ","
        if ch == "\\" and i + 1 < len(s):
            buf.append(s[i + 1])
            i += 2
            continue
        if in_key and ch == "=":
            key = "".join(buf).strip().upper()
            buf = []
            in_key = False
        elif not in_key and ch in ",+":
            if not key:
                return None
            cur.append((key, "".join(buf).strip()))
            buf = []
            in_key = True
            if ch == ",":
                rdns.append(frozenset(cur))
                cur = []
        elif in_key and ch in ",+":
            return None
        else:
            buf.append(ch)
        i += 1
    return rdns or None


def cert_names(cert: dict) -> list[tuple[str, bool]]:
    """The names a verified peer certificate (``ssl.getpeercert()``) offers for authorization, in nats-server's
    order (checkClientTLSCertSubject): email SANs, DNS SANs (marked True), URI SANs, then the subject DN."""
    sans = cert.get("subjectAltName") or ()
    out = [(v, kind == "DNS") for want in ("email", "DNS", "URI") for kind, v in sans if kind == want]
    dn = cert_dn_string(cert.get("subject") or ())
    if dn:
        out.append((dn, False))
    return out


def dns_name_matches(name: str, urls: Any) -> bool:
    """A DNS SAN names the host of one of ``urls`` (RFC 6125 6.4.1: labels compared without case, a wildcard
    only as the whole left-most label, matching exactly one label), as nats-server's dnsAltNameMatches."""
    from urllib.parse import urlsplit
    want = name.lower().split(".")
    for u in urls:
        try:
            host = urlsplit(u if "://" in u else f"nats://{u}").hostname or ""
        except ValueError:
            continue
        labels = host.lower().split(".")
        if len(labels) != len(want):
            continue
        start = 1 if want[0] == "*" else 0
        if all(want[i] == labels[i] for i in range(start, len(want))):
            return True
    return False


def tls_map_user(users: dict[str, User], cert: dict, conn_type: str, log: Any = None) -> User | None:
    """nats-server's verify_and_map lookup: email SANs, DNS SANs, URI SANs, then the subject DN."""
    if not cert:
        return None

    def ok(u: User | None) -> bool:
        return u is not None and Authenticator._type_allowed(u, conn_type)
    sans = cert.get("subjectAltName") or ()
    for kind in ("email", "DNS", "URI"):
        for k, v in sans:
            if k == kind and ok(users.get(v)):
                return users[v]
    dn = cert_dn_string(cert.get("subject") or ())
    if ok(users.get(dn)):
        return users[dn]
    cert_rdns = parse_dn(dn) if dn else None
    if cert_rdns:
        reordered = None
        for name, u in users.items():
            if not ok(u):
                continue
            rdns = parse_dn(name)
            if rdns is None:
                continue
            if rdns == cert_rdns:
                return u
            if reordered is None and sorted(map(sorted, rdns)) == sorted(map(sorted, cert_rdns)):
                reordered = u
        if reordered is not None:
            return reordered
    return None
