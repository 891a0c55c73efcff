"""Authorization callout (nats-server 2.10's ``authorization { auth_callout {...} }``, config mode).

A client that connects (other than the ``auth_users``, which authenticate as configured) is not admitted
by the server's own user list: the server asks an external service. It publishes, in the callout
``account``, on ``$SYS.REQ.USER.AUTH`` an *authorization request* JWT signed with the server's key
(``server_id`` is that key's public nkey). The request names a fresh user nkey made for this connection,
and carries the client's info and CONNECT options. With ``xkey`` set the request is sealed for that curve
key (nats-server's xkey format: ``xkv1`` + nonce + NaCl box) and the header ``Nats-Server-Xkey`` gives the
server's curve key, so the service may seal its answer too.

The service answers with an *authorization response* JWT signed by the ``issuer`` account key whose
``sub`` is the user nkey and ``aud`` the server id, holding either ``error`` or a user JWT (also signed by
the issuer) whose ``sub`` is the user nkey and whose ``aud`` names the account to place the client in.
The client then gets the user JWT's permissions and limits; any problem, or no answer within the auth
timeout, closes it with ``Authorization Violation`` (the reason is logged as nats-server logs it).

The connection is held while the callout runs: CONNECT returns without admitting the client, the parser
keeps what follows CONNECT, and data that arrives meanwhile is kept until the answer comes.
"""
from __future__ import annotations

import os
import secrets
import time
from typing import TYPE_CHECKING, Any

from rillet.gocompat.goquote import go_quote
from rillet import jwt
from rillet.config.callout import GLOBAL_ACCOUNT, CalloutConfig, parse_auth_callout
from rillet.nkey import decode_public_nkey, encode_public_nkey
from rillet.server.operator_claims import permissions_from_claims
from rillet.config.options import Permission, Permissions

if TYPE_CHECKING:
    from rillet.server.client import Client
    from rillet.server.server import Server

AUTH_CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
AUTH_REQUEST_AUDIENCE = "nats-authorization-request"
XKEY_HEADER = "Nats-Server-Xkey"

# ---- curve (x25519) keys: nkeys "X" keys, sealed boxes as the Go nkeys package makes them --------------

PREFIX_CURVE = 23 << 3
XKEY_VERSION = b"xkv1"
_NONCE_LEN = 24


def curve_public_key(seed_raw: bytes) -> str:
    """The public xkey ("X...") of a 32-byte curve private key."""
    import nacl.public
    return encode_public_nkey(PREFIX_CURVE, bytes(nacl.public.PrivateKey(seed_raw).public_key))


def decode_curve_key(pub: str) -> bytes | None:
    """The 32 raw bytes of a public xkey, or None when it is not one."""
    if not isinstance(pub, str) or not pub.startswith("X"):
        return None
    return decode_public_nkey(pub)


def is_curve_key(pub: Any) -> bool:
    return decode_curve_key(pub) is not None


def new_curve_seed() -> bytes:
    return os.urandom(32)


def seal(data: bytes, seed_raw: bytes, recipient: str) -> bytes:
    """Encrypt ``data`` for ``recipient`` (a public xkey) from our private curve key."""
    import nacl.public
    rpub = decode_curve_key(recipient)
    if rpub is None:
        raise ValueError("nkeys: not a valid recipient public curve key")
    nonce = os.urandom(_NONCE_LEN)
    box = nacl.public.Box(nacl.public.PrivateKey(seed_raw), nacl.public.PublicKey(rpub))
    return XKEY_VERSION + bytes(box.encrypt(data, nonce))  # (encrypt returns nonce + ciphertext)


def open_sealed(data: bytes, seed_raw: bytes, sender: str) -> bytes:
    """Decrypt what ``sender`` (a public xkey) sealed for our private curve key."""
    import nacl.exceptions
    import nacl.public
    if len(data) <= len(XKEY_VERSION) + _NONCE_LEN:
        raise ValueError("nkeys: encrypted input is not valid")
    if data[:len(XKEY_VERSION)] != XKEY_VERSION:
        raise ValueError("nkeys: encrypted input wrong version")
    spub = decode_curve_key(sender)
    if spub is None:
        raise ValueError("nkeys: not a valid sender public curve key")
    nonce = data[len(XKEY_VERSION):len(XKEY_VERSION) + _NONCE_LEN]
    box = nacl.public.Box(nacl.public.PrivateKey(seed_raw), nacl.public.PublicKey(spub))
    try:
        return box.decrypt(data[len(XKEY_VERSION) + _NONCE_LEN:], nonce)
    except nacl.exceptions.CryptoError:
        raise ValueError("nkeys: could not decrypt input") from None


# ---- configuration ----------------------------------------------------------------------------------------

def _title(s: str) -> str:
    return s[:1].upper() + s[1:]


class CalloutError(Exception):
    """Why a callout did not admit a client (logged as a warning, title-cased, like nats-server)."""


# ---- user JWT -> what the client gets -----------------------------------------------------------------------

def _account_signed(token: str, typ: str, wrong_type: str) -> dict:
    """The claims of ``token``, a JWT of claim type ``typ`` issued by an account key (else CalloutError:
    ``wrong_type`` for another claim type)."""
    try:
        claims = jwt.decode(token)
    except jwt.JwtError as e:
        raise CalloutError(str(e)) from None
    if not jwt.is_public_key(claims.get("iss"), "A"):
        raise CalloutError("unable to validate expected prefixes - [account]")
    if jwt.claim_type(claims) != typ:
        raise CalloutError(wrong_type)
    return claims


class CalloutUser:
    """What the callout granted, in the shape of a configured ``User`` (``Client._apply_user`` takes it)."""

    def __init__(self, nkey: str, name: str, account: str, perms: Permissions | None, claims: dict) -> None:
        self.username = name
        self.password = ""
        self.nkey = nkey
        self.account = account
        self.permissions = perms
        self.allowed_connection_types = None
        self.expires = int(claims.get("exp") or 0)
        self.callout: Any = None  # the AuthCallout that admitted it
        self.issued = int(claims.get("iat") or 0)
        self.uses_default = False  # (operator mode: the account's default permissions, as it has none)


# ---- the callout ----------------------------------------------------------------------------------------------

class _Pending:
    __slots__ = ("client", "user_nkey", "timer", "recheck")

    def __init__(self, client: "Client", user_nkey: str, recheck: bool = False) -> None:
        self.client = client
        self.user_nkey = user_nkey
        self.timer: Any = None
        self.recheck = recheck  # a connected client asked about again (config reload)


class AuthCallout:
    """Sends authorization requests for connecting clients and admits or refuses them on the answers."""

    def __init__(self, server: "Server", cfg: CalloutConfig, operator: bool = False) -> None:
        self.server = server
        self.cfg = cfg
        self.operator = operator  # operator mode: the callout of one account, from its JWT's authorization
        o = server.opts
        known = set(o.accounts or {}) | {GLOBAL_ACCOUNT}
        for a in cfg.allowed_accounts if not operator else ():
            if a not in known:
                raise ValueError(f"auth_callout allowed account {go_quote(a)} not found in configured accounts")
        self.account = server.lookup_account(cfg.account)
        self.ic = server.internal_client(self.account, "auth callout")
        self.inbox = f"$SYS._INBOX.{secrets.token_hex(4)}."
        self.ic.subscribe(self.inbox + "*", self._on_reply)
        self.pending: dict[bytes, _Pending] = {}

    # ---- who goes through the callout ---------------------------------------------------------------------

    @staticmethod
    def raw_user(co: Any, jwt_sub: str = "") -> str:
        if co.nkey:
            return co.nkey
        if co.user:
            return co.user
        if co.jwt and jwt_sub:
            return jwt_sub
        if co.auth_token:
            return "[REDACTED]"
        return ""

    def delegates(self, c: "Client", co: Any, res: Any) -> bool:
        """Whether this client's admission is the callout's to decide (as nats-server's config mode)."""
        if c.auth is not self.server.authenticator:
            return False  # (websocket connections with their own authorization block)
        acc = getattr(res, "account", "") if res is not True and res is not False and res is not None else ""
        if acc and acc != GLOBAL_ACCOUNT and self.cfg.allowed_accounts and acc not in self.cfg.allowed_accounts:
            return False  # a configured user of an account the callout does not handle
        return self.raw_user(co) not in self.cfg.auth_users

    # ---- the request --------------------------------------------------------------------------------------

    def recheck(self, c: "Client") -> None:
        """After a config reload nats-server asks the callout about each client it admitted, again (Rillet
        does it on every reload, nats-server when authorization settings changed): the client keeps running
        meanwhile; a refusal closes it, an answer placing it in another account too."""
        self.start(c, c.opts, recheck=True)

    def start(self, c: "Client", co: Any, recheck: bool = False, jwt_sub: str = "") -> None:
        """Send the authorization request for ``c``; the connection waits for the answer (or the timeout)."""
        srv = self.server
        user_nkey = jwt.public_key(jwt.new_keypair("U"))
        token = secrets.token_urlsafe(12).replace("-", "x").replace("_", "y").encode()
        reply = self.inbox.encode() + token
        p = _Pending(c, user_nkey, recheck)
        timeout = srv.opts.effective_auth_timeout()
        try:
            payload = self._request(c, co, user_nkey, timeout, jwt_sub).encode()
            hdr = b""
            if self.cfg.xkey:
                payload = seal(payload, srv.xkey_seed, self.cfg.xkey)
                hdr = b"NATS/1.0\r\n" + XKEY_HEADER.encode() + b": " + srv.xkey.encode() + b"\r\n\r\n"
        except Exception as e:  # pragma: no cover - encoding our own claims does not fail
            srv.log.warn(f"Error encoding auth request claim on account {go_quote(self.account.name)}: {e}")
            c.callout_done(None, f"{e}")
            return
        self.pending[token] = p
        p.timer = srv.loop.call_later(timeout, self._timed_out, token)
        if not recheck:
            c.callout_started()
        if hdr:
            self.ic.publish(AUTH_CALLOUT_SUBJECT.encode(), reply, hdr + payload, len(hdr))
        else:
            self.ic.publish(AUTH_CALLOUT_SUBJECT.encode(), reply, payload)

    def _request(self, c: "Client", co: Any, user_nkey: str, timeout: float, jwt_sub: str = "") -> str:
        srv = self.server
        o = srv.opts
        sid: dict[str, Any] = {"name": srv.name, "host": o.host or "0.0.0.0", "id": srv.server_id}
        import rillet
        sid["version"] = rillet.SERVER_VERSION
        if o.cluster.name:
            sid["cluster"] = o.cluster.name
        tags = getattr(o, "tags", None)
        if tags:
            sid["tags"] = list(tags)
        if self.cfg.xkey:
            sid["xkey"] = srv.xkey
        ci: dict[str, Any] = {}
        if c.host:
            ci["host"] = c.host
        if c.cid:
            ci["id"] = c.cid
        ru = self.raw_user(co, jwt_sub)
        if ru:
            ci["user"] = ru
        if co.name:
            ci["name"] = co.name
        ci["kind"] = "Client"
        from rillet.server.sysacc import client_type
        ci["type"] = client_type(c)
        if ci["type"] == "mqtt" and getattr(c, "client_id", ""):
            ci["mqtt_id"] = c.client_id  # (the MQTT client id, as nats-server fills jwt.ClientInformation.MQTT)
        if co.sig and c.nonce is not None:
            ci["nonce"] = c.nonce.decode()
        opts: dict[str, Any] = {}
        for k, v in (("jwt", co.jwt), ("nkey", co.nkey), ("sig", co.sig), ("auth_token", co.auth_token),
                     ("user", co.user), ("pass", co.password), ("name", co.name), ("lang", co.lang),
                     ("version", co.version)):
            if v:
                opts[k] = v
        opts["protocol"] = co.protocol
        nats: dict[str, Any] = {"server_id": sid, "user_nkey": user_nkey, "client_info": ci, "connect_opts": opts}
        if c.tls_version:
            tls: dict[str, Any] = {"version": c.tls_version.replace("TLSv", "")}
            if c.tls_cipher:
                tls["cipher"] = c.tls_cipher
            chain = _verified_chain(c)
            if chain:
                tls["verified_chains"] = [chain]
            else:
                certs = _peer_certs(c)
                if certs:
                    tls["certs"] = certs
            nats["client_tls"] = tls
        nats["type"] = jwt.AUTH_REQUEST
        nats["version"] = 2
        claims = {"aud": AUTH_REQUEST_AUDIENCE, "exp": int(time.time() + timeout), "sub": self.cfg.issuer,
                  "nats": nats}
        return jwt.encode(claims, srv.server_kp)

    # ---- the answer ---------------------------------------------------------------------------------------

    def _timed_out(self, token: bytes) -> None:
        p = self.pending.pop(token, None)
        if p is None:
            return
        self.server.log.debug(f"Authorization callout response not received in time on account "
                              f"{go_quote(self.account.name)}")
        self._done(p, None)

    def _on_reply(self, sub: Any, rc: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        token = subject[len(self.inbox):]
        p = self.pending.pop(token, None)
        if p is None:
            return
        if p.timer is not None:
            p.timer.cancel()
        body = msg[hdr:] if hdr > 0 else msg
        try:
            user = self._admit(p, body)
        except CalloutError as e:
            reason = _title(str(e))
            self._done(p, None)
            self.server.log.warn(reason)
            return
        self._done(p, user)

    def _done(self, p: _Pending, user: CalloutUser | None) -> None:
        c = p.client
        if user is not None:
            user.callout = self
        if not p.recheck:
            c.callout_done(user, "")
            return
        if c.closed:
            return
        if user is None or user.account != c.account.name:
            if user is None:
                c.callout_done(None, "")  # (logs and closes with Authorization Violation)
            else:
                c.close("Client Closed")  # moved to another account: it reconnects there
            self.server.flush_clients()
            return
        c.perms = None
        c.callout_user = user
        from rillet.server.auth import PermChecker
        if user.permissions is not None:
            c.perms = PermChecker(user.permissions)
        self.apply_limits(c, user)
        c.update_slow_path()

    def _admit(self, p: _Pending, msg: bytes) -> CalloutUser:
        """Check the authorization response and the user JWT in it; what to admit the client as."""
        srv = self.server
        acc_name = self.account.name
        qacc = go_quote(acc_name)
        if not msg:
            raise CalloutError(f"auth callout violation: \"no reason supplied\" on account {qacc}")
        encrypted = False
        if self.cfg.xkey and not msg.startswith(b"eyJ"):
            try:
                msg = open_sealed(msg, srv.xkey_seed, self.cfg.xkey)
            except ValueError as e:
                raise CalloutError(f"error decrypting auth callout response on account {qacc}: {e}") from None
            encrypted = True
        cr = _account_signed(msg.decode("utf-8", "replace"), jwt.AUTH_RESPONSE, "not an authorization request claim")
        n = jwt.nats_section(cr)
        issue = _response_issue(cr, n)
        if issue:
            raise CalloutError(f"authorization response had validation errors: {issue}")
        if cr.get("sub") != p.user_nkey:
            raise CalloutError("auth callout violation: auth callout response is not for expected user")
        if cr.get("aud") != srv.server_id:
            raise CalloutError("auth callout violation: auth callout response is not for server")
        if n.get("error"):
            raise CalloutError(f"auth callout service returned an error: {n['error']}")
        if self.operator and not encrypted:
            signer = n.get("issuer_account") or cr.get("iss")
            if signer != acc_name and not self._knows_issuer(acc_name, signer):
                raise CalloutError("auth callout signing key is unknown")
        uc = _account_signed(str(n.get("jwt") or ""), jwt.USER, "not user claim")
        un = jwt.nats_section(uc)
        issue = _user_issue(uc, un)
        if issue:
            raise CalloutError(f"Error validating user JWT: {issue}")
        if uc.get("sub") != p.user_nkey:
            raise CalloutError(f"Expected authorized user of {go_quote(p.user_nkey)} but got "
                               f"{go_quote(str(uc.get('sub', '')))} on account {qacc}")
        if un.get("times"):
            try:
                from rillet.server.operator_claims import validate_times
            except ImportError:  # pragma: no cover
                validate_times = None  # type: ignore[assignment]
            if validate_times is not None and not validate_times(un)[0]:
                srv.log.error(f"{p.client.log_prefix()} - Outside connect times")
                raise CalloutError(f"authorized user on account {qacc} outside of valid connect times")
        if self.operator:
            return self._admit_operator(p, uc, un, qacc)
        if un.get("issuer_account"):
            raise CalloutError(f"error non operator mode account {qacc}: attempted to use issuer_account")
        if uc.get("iss") != self.cfg.issuer:
            raise CalloutError(f"wrong issuer for auth callout response on account {qacc}, expected "
                               f"{go_quote(self.cfg.issuer)} got {go_quote(str(uc.get('iss')))}")
        target = uc.get("aud") or ""
        if not isinstance(target, str) or not self._account_exists(target):
            raise CalloutError(f"no valid account {go_quote(str(target))} for auth callout response on account "
                               f"{qacc}: account missing")
        return CalloutUser(uc["sub"], uc.get("name") or "", target, permissions_from_claims(un), uc)

    def _knows_issuer(self, acc_name: str, key: Any) -> bool:
        info = self.server.operator.infos.get(acc_name)
        return info is not None and isinstance(key, str) and info.knows_issuer(acc_name, key)[0]

    def _admit_operator(self, p: _Pending, uc: dict, un: dict, qacc: str) -> CalloutUser:
        """Operator mode: the user JWT's issuer account (``issuer_account``, else ``iss``) is where the client
        goes, the callout account itself or one of the ``allowed_accounts``; the signer must be that account
        or one of its signing keys (a scoped one gives its template's permissions)."""
        from rillet.server import operator_claims as opmod
        om = self.server.operator
        target = un.get("issuer_account") or uc.get("iss")
        if target != self.account.name:
            allowed = self.cfg.allowed_accounts
            if not (allowed == ["*"] or target in allowed):
                raise CalloutError(f"account {go_quote(str(uc.get('iss')))} not permitted as valid account option "
                                   f"for auth callout for account {qacc}")
        acc = om.lookup_account(target)
        if acc is None:
            raise CalloutError(f"no valid account {go_quote(str(target))} for auth callout response on account "
                               f"{qacc}: account missing")
        info = om.infos[acc.name]
        known, scope = info.knows_issuer(acc.name, uc["iss"])
        if not known:
            raise CalloutError(f"user JWT issuer {go_quote(str(uc['iss']))} is not known")
        src = un
        if scope is not None:
            if scope.get("kind", "user_scope") != "user_scope":
                raise CalloutError("user JWT is not a valid scoped user")
            if any(un.get(k) for k in opmod._USER_PERMISSION_FIELDS):
                raise CalloutError("user JWT is not valid: scoped users require no permissions or limits set")
            try:
                src = opmod._expand_template(dict(scope.get("template") or {}), uc, acc.name, info)
            except ValueError as e:
                raise CalloutError(f"user JWT generated invalid permissions: {e}") from None
        if src.get("times"):
            if not opmod.validate_times(src)[0]:
                self.server.log.error(f"{p.client.log_prefix()} - Outside connect times")
                raise CalloutError(f"authorized user on account {qacc} outside of valid connect times")
        perms = opmod.permissions_from_claims(src)
        uses_default = perms is None
        if uses_default:
            perms = info.default_perms
        cu = CalloutUser(uc["sub"], uc.get("name") or "", acc.name, perms, uc)
        cu.uses_default = uses_default
        return cu

    def apply_limits(self, c: "Client", user: CalloutUser) -> None:
        """After the client took the user's account and permissions: the user JWT's expiry, and no
        publishing on the callout subject from inside the callout account.

        (The JWT's ``subs``/``payload`` limits are not applied: nats-server takes those only from a JWT the
        client presents itself, and a callout user has none; the account's limits apply.)"""
        self.deny_callout_subject(c)
        if user.expires:
            left = user.expires - time.time()
            self.server.loop.call_later(max(left, 0.0), _expired, c)

    def deny_callout_subject(self, c: "Client") -> None:
        """A client in the callout account may not publish on the callout subject."""
        if c.account is self.account:
            from rillet.server.auth import PermChecker
            if c.perms is None:
                c.perms = PermChecker(Permissions(publish=Permission(deny=[AUTH_CALLOUT_SUBJECT])))
            else:
                c.perms.pub_deny = (c.perms.pub_deny or []) + [AUTH_CALLOUT_SUBJECT]
                c.perms._pcache.clear()
            c.update_slow_path()

    def _account_exists(self, name: str) -> bool:
        if not name:
            return False
        srv = self.server
        return name in srv.accounts or name in (srv.opts.accounts or {})


def _expired(c: "Client") -> None:
    if not c.closed:
        c.server.log.debug(f"{c.log_prefix()} - User Authentication Expired")
        c.close("Authentication Expired", "User Authentication Expired")


def _response_issue(cr: dict, n: dict) -> str:
    """The first problem nats' AuthorizationResponseClaims.Validate would report, or ""."""
    if not jwt.is_public_key(cr.get("sub"), "U"):
        return "Subject must be a user public key"
    if not jwt.is_public_key(cr.get("aud"), "N"):
        return "Audience must be a server public key"
    if not n.get("error") and not n.get("jwt"):
        return "Error or Jwt is required"
    if n.get("error") and n.get("jwt"):
        return "Only Error or Jwt can be set"
    ia = n.get("issuer_account")
    if ia and not jwt.is_public_key(ia, "A"):
        return "issuer_account is not an account public key"
    return _time_issue(cr)


def _time_issue(c: dict) -> str:
    try:
        jwt.check_times(c)
    except jwt.JwtError as e:
        return str(e)
    return ""


def _user_issue(uc: dict, n: dict) -> str:
    issue = _time_issue(uc)
    if issue:
        return issue
    ia = n.get("issuer_account")
    if ia and not jwt.is_public_key(ia, "A"):
        return "account_id is not an account public key"
    return ""


def _verified_chain(c: Any) -> list[str]:
    """The client's verified certificate chain as PEM (leaf first), where Python can give it (3.13+)."""
    t = c.transport
    ssl_obj = t.get_extra_info("ssl_object") if t is not None else None
    get = getattr(ssl_obj, "get_verified_chain", None)
    if get is None:
        return []
    try:
        return [str(x.public_bytes()) for x in (get() or [])]  # (Certificate.public_bytes: PEM by default)
    except Exception:
        return []


def _peer_certs(c: Any) -> list[str]:
    t = c.transport
    if t is None:
        return []
    ssl_obj = t.get_extra_info("ssl_object")
    if ssl_obj is None:
        return []
    try:
        der = ssl_obj.getpeercert(binary_form=True)
    except Exception:
        return []
    if not der:
        return []
    import ssl
    return [ssl.DER_cert_to_PEM_cert(der)]


def _go_struct(cfg: CalloutConfig | None) -> str:
    """How nats-server prints its AuthCallout option (``%v`` of the pointer)."""
    if cfg is None:
        return "<nil>"
    return (f"&{{{cfg.issuer} {cfg.account} [{' '.join(cfg.auth_users)}] {cfg.xkey} "
            f"[{' '.join(cfg.allowed_accounts)}]}}")


def check_reload(server: "Server", new_opts: Any) -> None:
    """A config reload may not change the ``auth_callout`` block (as nats-server). ValueError: refused."""
    raw = new_opts.extra.get("auth_callout") if isinstance(new_opts.extra, dict) else None
    new = None if raw is None else parse_auth_callout(raw)
    old = server.auth_callout.cfg if server.auth_callout is not None else None
    if _go_struct(old) != _go_struct(new):
        raise ValueError(f"config reload not supported for AuthCallout: old={_go_struct(old)}, "
                         f"new={_go_struct(new)}")


def setup(server: "Server") -> AuthCallout | None:
    """The server's auth callout, when the authorization block configures one (ValueError: refuse to start)."""
    raw = server.opts.extra.get("auth_callout") if isinstance(server.opts.extra, dict) else None
    if raw is None:
        return None
    # (an unknown callout account or auth user is not refused: nats-server starts, and logs nothing visible)
    return AuthCallout(server, parse_auth_callout(raw))
