"""nsc's store as ``rillet auth`` reads and writes it: its directories and files, the operator/account/user
JWTs and keys (``Store``), units and expiry texts, and the claims the Go jwt library makes."""
from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any
from rillet import jwt as J
from rillet import nkey


STORE_VERSION = "1"
NSC_FILE = ".nsc"


class AuthError(Exception):
    pass


# ---- directories --------------------------------------------------------------------------------------------

@dataclass
class Dirs:
    config: str
    data: str
    keys: str


DIR_FLAGS = {"--config-dir": "config", "--data-dir": "data", "--keystore-dir": "keys", "--all-dirs": "all",
             "-H": "all"}


def split_dir_flags(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """nsc's directory flags, which go anywhere on the command line, taken out of ``argv``."""
    found: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if name in DIR_FLAGS:
            if not eq:
                if i + 1 >= len(argv):
                    raise AuthError(f"flag needs an argument: {name}")
                val = argv[i + 1]
                i += 1
            found[DIR_FLAGS[name]] = val
        else:
            rest.append(a)
        i += 1
    return found, rest


def resolve_dirs(flags: dict[str, str]) -> Dirs:
    home = os.path.expanduser("~")
    xdg_config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    xdg_data = os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    if "all" in flags:
        for k in ("config", "data", "keys"):
            flags.setdefault(k, flags["all"])
    config = flags.get("config") or os.environ.get("NSC_HOME") or os.path.join(xdg_config, "nats", "nsc")
    config = os.path.abspath(os.path.expanduser(config))
    data = flags.get("data")
    if not data:
        cfg = _read_nsc_json(config)
        data = cfg.get("store_root") or os.path.join(xdg_data, "nats", "nsc", "stores")
    keys = flags.get("keys") or os.environ.get("NKEYS_PATH") or os.path.join(xdg_data, "nats", "nsc", "keys")
    return Dirs(config, os.path.abspath(os.path.expanduser(data)), os.path.abspath(os.path.expanduser(keys)))


def _read_nsc_json(config_dir: str) -> dict:
    path = os.path.join(config_dir, "nsc.json")
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise AuthError(f"{path}: not nsc's configuration: {e}") from None
    if not isinstance(d, dict):
        raise AuthError(f"{path}: not nsc's configuration: not a JSON object")
    return d


# ---- files -----------------------------------------------------------------------------------------------

def write_file(path: str, text: str, mode: int = 0o600) -> None:
    """Write ``path`` whole: a temporary file beside it, renamed over it."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise AuthError(f"could not write {path}: {e.strerror or e}") from None


def read_text(path: str, what: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise AuthError(f"{what} {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise AuthError(f"{what} {path}: not text") from None


# ---- units ----------------------------------------------------------------------------------------------

_UNITS = {"": 1, "k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "t": 1000 ** 4,
          "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4,
          "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4}


def parse_number(flag: str, text: str) -> int:
    m = re.fullmatch(r"\s*(-?\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise AuthError(f"invalid value {text!r} for {flag}: a number, -1 for unlimited, units k/m/g/t kib/mib/gib/tib")
    n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if n < -1:
        raise AuthError(f"invalid value {text!r} for {flag}: -1 is unlimited, nothing lower")
    return n


# ---- the store ------------------------------------------------------------------------------------------

def _check_name(kind: str, name: str) -> str:
    n = (name or "").strip()
    if not n or "/" in n or "\\" in n or n in (".", "..") or n.startswith("."):
        raise AuthError(f"invalid {kind} name {name!r}")
    return n


def decode_jwt(token: str, where: str, kind: str) -> dict:
    """The verified claims of a JWT of ``kind`` (AuthError naming ``where`` otherwise)."""
    try:
        claims = J.decode(token.strip())
    except J.JwtError as e:
        raise AuthError(f"{where}: not a valid JWT: {e}") from None
    t = J.claim_type(claims)
    if t != kind:
        raise AuthError(f"{where}: a {t or 'untyped'} JWT where an {kind} JWT belongs"
                        if kind[0] in "aeiou" else f"{where}: a {t or 'untyped'} JWT where a {kind} JWT belongs")
    if (J.nats_section(claims).get("version") or 1) < 2:
        raise AuthError(f"{where}: a version 1 JWT: this store was written by an older tool; upgrade it with nsc")
    return claims


class Store:
    def __init__(self, dirs: Dirs) -> None:
        self.dirs = dirs
        self.cfg = _read_nsc_json(dirs.config)

    # -- paths
    def op_dir(self, op: str) -> str:
        return os.path.join(self.dirs.data, op)

    def op_jwt_path(self, op: str) -> str:
        return os.path.join(self.op_dir(op), f"{op}.jwt")

    def acc_jwt_path(self, op: str, acc: str) -> str:
        return os.path.join(self.op_dir(op), "accounts", acc, f"{acc}.jwt")

    def user_jwt_path(self, op: str, acc: str, user: str) -> str:
        return os.path.join(self.op_dir(op), "accounts", acc, "users", f"{user}.jwt")

    def key_path(self, pub: str) -> str:
        return os.path.join(self.dirs.keys, "keys", pub[0], pub[1:3], f"{pub}.nk")

    def creds_path(self, op: str, acc: str, user: str) -> str:
        return os.path.join(self.dirs.keys, "creds", op, acc, f"{user}.creds")

    # -- current operator and account
    def operator(self, name: str | None = None) -> str:
        op = name or self.cfg.get("operator") or ""
        if not op:
            ops = self.operators()
            if len(ops) == 1:
                op = ops[0]
        if not op:
            raise AuthError("no operator: add one with `rillet auth add operator --name NAME`")
        if not os.path.isfile(self.op_jwt_path(op)):
            raise AuthError(f"operator {op!r} does not exist in {self.dirs.data}")
        self.check_version(op)
        return op

    def operators(self) -> list[str]:
        if not os.path.isdir(self.dirs.data):
            return []
        return sorted(d for d in os.listdir(self.dirs.data) if os.path.isfile(self.op_jwt_path(d)))

    def accounts(self, op: str) -> list[str]:
        base = os.path.join(self.op_dir(op), "accounts")
        if not os.path.isdir(base):
            return []
        return sorted(d for d in os.listdir(base) if os.path.isfile(self.acc_jwt_path(op, d)))

    def users(self, op: str, acc: str) -> list[str]:
        base = os.path.join(self.op_dir(op), "accounts", acc, "users")
        if not os.path.isdir(base):
            return []
        return sorted(f[:-4] for f in os.listdir(base) if f.endswith(".jwt"))

    def account(self, op: str, name: str | None) -> str:
        acc = name or ""
        if not acc:
            if self.cfg.get("operator") == op and self.cfg.get("account"):
                acc = self.cfg["account"]
            else:
                accs = self.accounts(op)
                if len(accs) == 1:
                    acc = accs[0]
        if not acc:
            raise AuthError("no account given: use --account NAME")
        if not os.path.isfile(self.acc_jwt_path(op, acc)):
            raise AuthError(f"account {acc!r} does not exist in operator {op!r}")
        return acc

    def check_version(self, op: str) -> None:
        path = os.path.join(self.op_dir(op), NSC_FILE)
        if not os.path.exists(path):
            raise AuthError(f"{path} is missing: {self.op_dir(op)} is not an nsc store")
        try:
            info = json.loads(read_text(path, "store information"))
        except ValueError as e:
            raise AuthError(f"{path}: not nsc's store information: {e}") from None
        if not isinstance(info, dict) or str(info.get("version")) != STORE_VERSION:
            v = info.get("version") if isinstance(info, dict) else None
            raise AuthError(f"{path}: store version {v!r}, this tool reads version {STORE_VERSION} stores")

    def save_config(self, op: str, acc: str) -> None:
        cfg = {"store_root": self.dirs.data, "operator": op, "account": acc}
        write_file(os.path.join(self.dirs.config, "nsc.json"), json.dumps(cfg, indent=2) + "\n", 0o644)
        self.cfg = cfg

    # -- claims
    def operator_claims(self, op: str) -> tuple[str, dict]:
        path = self.op_jwt_path(op)
        token = read_text(path, "operator JWT").strip()
        claims = decode_jwt(token, path, "operator")
        if claims.get("iss") != claims.get("sub") and claims.get("iss") not in self._signing_keys(claims):
            raise AuthError(f"{path}: not signed by the operator's own key or one of its signing keys")
        self._check_times(claims, path)
        return token, claims

    def account_context(self, account: str) -> tuple[str, str, dict, dict]:
        """The current operator, the account ``account`` (the current one when empty) and both their
        claims: ``(operator, account, operator claims, account claims)``."""
        op = self.operator()
        acc = self.account(op, account or None)
        _, op_claims = self.operator_claims(op)
        _, claims = self.account_claims(op, acc, op_claims)
        return op, acc, op_claims, claims

    def _read_signed(self, path: str, kind: str, issuer_claims: dict, issuer: str) -> tuple[str, dict]:
        """The JWT at ``path`` (an ``kind`` JWT) and its claims, signed by ``issuer``'s key (whose claims
        are ``issuer_claims``) or one of its signing keys."""
        token = read_text(path, f"{kind} JWT").strip()
        claims = decode_jwt(token, path, kind)
        signers = {issuer_claims["sub"], *self._signing_keys(issuer_claims)}
        if claims.get("iss") not in signers:
            raise AuthError(f"{path}: signed by {claims.get('iss')}, which is neither {issuer}'s key "
                            "nor one of its signing keys")
        return token, claims

    def account_claims(self, op: str, acc: str, op_claims: dict | None = None) -> tuple[str, dict]:
        if op_claims is None:
            op_claims = self.operator_claims(op)[1]
        path = self.acc_jwt_path(op, acc)
        token, claims = self._read_signed(path, "account", op_claims, f"operator {op}")
        self._check_times(claims, path)
        return token, claims

    def user_claims(self, op: str, acc: str, user: str, acc_claims: dict | None = None,
                    check_revoked: bool = True) -> tuple[str, dict]:
        if acc_claims is None:
            acc_claims = self.account_claims(op, acc)[1]
        path = self.user_jwt_path(op, acc, user)
        if not os.path.isfile(path):
            raise AuthError(f"user {user!r} does not exist in account {acc!r}")
        token, claims = self._read_signed(path, "user", acc_claims, f"account {acc}")
        ia = J.nats_section(claims).get("issuer_account")
        if claims["iss"] != acc_claims["sub"] and ia != acc_claims["sub"]:
            raise AuthError(f"{path}: signed by a signing key but its issuer_account is not account {acc}")
        revoked = (J.nats_section(acc_claims).get("revocations") or {})
        at = revoked.get(claims["sub"]) or revoked.get("*")
        if check_revoked and at and int(at) >= int(claims.get("iat") or 0):
            raise AuthError(f"user {user!r} ({claims['sub']}) is revoked in account {acc!r}")
        self._check_times(claims, path)
        return token, claims

    @staticmethod
    def _signing_keys(claims: dict) -> list[str]:
        sk = J.nats_section(claims).get("signing_keys") or []
        out = []
        for k in sk:
            if isinstance(k, str):
                out.append(k)
            elif isinstance(k, dict) and isinstance(k.get("key"), str):
                out.append(k["key"])  # a scoped signing key
        return out

    @staticmethod
    def _check_times(claims: dict, path: str) -> None:
        if J.is_expired(claims):
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(claims["exp"]))
            raise AuthError(f"{path}: the JWT expired at {when}")

    # -- keys
    def seed_of(self, pub: str) -> str:
        path = self.key_path(pub)
        if not os.path.isfile(path):
            raise AuthError(f"the seed of {pub} is not in the keystore ({path})")
        text = read_text(path, "key file")
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("S") and nkey.is_valid_encoding(line):
                try:
                    kp = nkey.from_seed(line)
                except nkey.NkeyError as e:
                    raise AuthError(f"{path}: {e}") from None
                if kp.public_key() != pub:
                    raise AuthError(f"{path}: holds the seed of {kp.public_key()}, not of {pub}")
                return line
        raise AuthError(f"{path}: no nkey seed in it")

    def signer_for(self, pubs: list[str]) -> Any:
        """An nkeys KeyPair for the first of ``pubs`` whose seed is in the keystore."""
        import nkeys
        errors = []
        for pub in pubs:
            try:
                return nkeys.from_seed(self.seed_of(pub).encode())
            except AuthError as e:
                errors.append(str(e))
        raise AuthError(errors[0] if errors else "no signing key")

    def store_key(self, kp: nkey.KeyPair) -> str:
        path = self.key_path(kp.public_key())
        write_file(path, kp.seed())  # the seed alone, as nsc writes it (it compares the bytes)
        return path


def new_key(kind: str) -> tuple[nkey.KeyPair, Any]:
    """A new key: (rillet.nkey.KeyPair, the same as an nkeys KeyPair for signing)."""
    import nkeys
    kp = nkey.create(kind)
    return kp, nkeys.from_seed(kp.seed().encode())


def ok(text: str) -> None:
    print(f"[ OK ] {text}", file=sys.stderr)


# ---- claims, as the Go jwt library makes them ------------------------------------------------------------

def account_nats() -> dict:
    return {"limits": {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
                       "conn": -1, "leaf": -1},
            "default_permissions": {"pub": {}, "sub": {}}, "authorization": {}, "type": "account", "version": 2}


def user_nats() -> dict:
    return {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}


SYS_EXPORTS = [
    {"name": "account-monitoring-services", "subject": "$SYS.REQ.ACCOUNT.*.*", "type": "service",
     "response_type": "Stream", "account_token_position": 4,
     "description": "Request account specific monitoring services for: SUBSZ, CONNZ, LEAFZ, JSZ and INFO",
     "info_url": "https://docs.nats.io/nats-server/configuration/sys_accounts"},
    {"name": "account-monitoring-streams", "subject": "$SYS.ACCOUNT.*.>", "type": "stream",
     "account_token_position": 3, "description": "Account specific monitoring stream",
     "info_url": "https://docs.nats.io/nats-server/configuration/sys_accounts"},
]


def parse_expiry(text: str) -> int:
    """nsc's --expiry: a date (YYYY-MM-DD), a duration from now (1h, 2d, 3w, 1M, 1y) or 0 (never)."""
    if text in ("", "0"):
        return 0
    m = re.fullmatch(r"(\d+)([smhdwMy])", text)
    if m:
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "M": 30 * 86400, "y": 365 * 86400}
        return int(time.time()) + int(m.group(1)) * mult[m.group(2)]
    try:
        import calendar
        return calendar.timegm(time.strptime(text, "%Y-%m-%d"))
    except ValueError:
        raise AuthError(f"invalid --expiry {text!r}: a date (2030-01-31), a duration (1h, 2d, 1y) or 0") from None
