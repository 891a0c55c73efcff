"""``rillet auth``: what ``nsc`` is, for operators, accounts and users of operator mode (decentralized JWT auth).

The store is nsc's own layout, so that either tool reads what the other wrote:

* configuration ``<config-dir>/nsc.json`` (``{"store_root", "operator", "account"}``); config-dir is
  ``--config-dir``, else ``$NSC_HOME``, else ``$XDG_CONFIG_HOME/nats/nsc`` (``~/.config/nats/nsc``);
* JWTs under the store root (``--data-dir``, else nsc.json's ``store_root``, else
  ``$XDG_DATA_HOME/nats/nsc/stores``): ``<operator>/<operator>.jwt``, ``<operator>/.nsc`` (the store's
  version), ``<operator>/accounts/<account>/<account>.jwt``, ``.../<account>/users/<user>.jwt``;
* keys (``--keystore-dir``, else ``$NKEYS_PATH``, else ``$XDG_DATA_HOME/nats/nsc/keys``): each seed in
  ``keys/<kind letter>/<2nd-3rd letters>/<public key>.nk``, each user's ``.creds`` in
  ``creds/<operator>/<account>/<user>.creds``. ``-H``/``--all-dirs`` sets the three directories at once.

Commands (nsc's names and flags): ``add operator --name O [--sys] [--generate-signing-key]``,
``add account --name A``, ``edit account --name A [--conns --leaf-conns --data --payload --subscriptions
--imports --exports --js-mem-storage --js-disk-storage --js-streams --js-consumer --js-max-mem-stream
--js-max-disk-stream --js-max-ack-pending --js-max-bytes-required --js-disable]``,
``add user --account A --name U [--allow-pub --allow-sub --allow-pubsub --deny-pub --deny-sub --deny-pubsub
--bearer --expiry]``, ``describe operator|account|user|jwt`` (``--json``, ``--raw``, ``jwt --file F``),
``generate creds --account A --name U [--output-file F]``, ``generate config --mem-resolver
[--config-file F] [--sys-account NAME] [--force]``, ``env``.

Every JWT read is checked (form, signature, its signer: the operator's key or one of its signing keys for
an account, the account's key or signing keys for a user, expiry); a fault is one error line and exit
status 1, with nothing written: each command checks everything before it writes a file, and writes each
file whole (a temporary file renamed over it).
"""
from __future__ import annotations

import base64
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional

import typer

from rillet import jwt as J
from rillet import nkey

HELP = ("Operators, accounts, users and their JWTs in nsc's store (the nsc tool: add, edit, describe, generate, "
        "push, revocations).")
APP_HELP = HELP + """

\b
Store directories (anywhere on the line, as nsc): --config-dir DIR (or $NSC_HOME),
--data-dir DIR, --keystore-dir DIR (or $NKEYS_PATH), -H/--all-dirs DIR for all three.

\b
Examples:
  rillet auth add operator --name O --sys
  rillet auth add account --name A
  rillet auth edit account --name A --js-disk-storage 1GiB --conns 100
  rillet auth add user --account A --name u --deny-pub 'admin.>'
  rillet auth generate config --mem-resolver --config-file server.conf
"""

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

    def account_claims(self, op: str, acc: str, op_claims: dict | None = None) -> tuple[str, dict]:
        if op_claims is None:
            op_claims = self.operator_claims(op)[1]
        path = self.acc_jwt_path(op, acc)
        token = read_text(path, "account JWT").strip()
        claims = decode_jwt(token, path, "account")
        signers = {op_claims["sub"], *self._signing_keys(op_claims)}
        if claims.get("iss") not in signers:
            raise AuthError(f"{path}: signed by {claims.get('iss')}, which is neither operator {op}'s key "
                            "nor one of its signing keys")
        self._check_times(claims, path)
        return token, claims

    def user_claims(self, op: str, acc: str, user: str, acc_claims: dict | None = None,
                    check_revoked: bool = True) -> tuple[str, dict]:
        if acc_claims is None:
            acc_claims = self.account_claims(op, acc)[1]
        path = self.user_jwt_path(op, acc, user)
        if not os.path.isfile(path):
            raise AuthError(f"user {user!r} does not exist in account {acc!r}")
        token = read_text(path, "user JWT").strip()
        claims = decode_jwt(token, path, "user")
        signers = {acc_claims["sub"], *self._signing_keys(acc_claims)}
        if claims.get("iss") not in signers:
            raise AuthError(f"{path}: signed by {claims.get('iss')}, which is neither account {acc}'s key "
                            "nor one of its signing keys")
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


# ---- the commands ----------------------------------------------------------------------------------------

app = typer.Typer(name="auth", help=APP_HELP, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})
add_app = typer.Typer(help="Add an operator, account or user", no_args_is_help=True)
edit_app = typer.Typer(help="Edit an operator or an account", no_args_is_help=True)
describe_app = typer.Typer(help="Show an operator, account, user or any JWT", no_args_is_help=True)
generate_app = typer.Typer(help="Generate a user's .creds file or a server configuration", no_args_is_help=True)
app.add_typer(add_app, name="add")
app.add_typer(edit_app, name="edit")
app.add_typer(describe_app, name="describe")
app.add_typer(generate_app, name="generate")

STATE: dict[str, Any] = {}


def store() -> Store:
    return Store(STATE["dirs"])


@add_app.command("operator")
def add_operator(name: str = typer.Option(..., "--name", "-n", help="operator name"),
                 sys_acc: bool = typer.Option(False, "--sys", "-s", help="generate the system account (SYS) "
                                                                         "and its user (sys) with the operator"),
                 gen_sk: bool = typer.Option(False, "--generate-signing-key",
                                             help="generate a signing key with the operator"),
                 expiry: str = typer.Option("", "--expiry", help="valid until (date, duration or 0)")) -> None:
    s = store()
    name = _check_name("operator", name)
    root = s.op_dir(name)
    if os.path.exists(root) and os.listdir(root):
        raise AuthError(f'operator "{name}" already exists in {s.dirs.data}')
    exp = parse_expiry(expiry)
    op_kp, op_signer = new_key("operator")
    claims: dict[str, Any] = {"name": name, "sub": op_kp.public_key(), "nats": {"type": "operator", "version": 2}}
    if exp:
        claims["exp"] = exp
    sys_signer = op_signer
    sk_kp = None
    if gen_sk:
        sk_kp, sys_signer = new_key("operator")
        claims["nats"]["signing_keys"] = [sk_kp.public_key()]
    sys_parts = None
    if sys_acc:
        acc_kp, _ = new_key("account")
        acc_sk, acc_sk_signer = new_key("account")
        acc_claims = {"name": "SYS", "sub": acc_kp.public_key(), "nats": account_nats()}
        acc_claims["nats"]["signing_keys"] = [acc_sk.public_key()]
        acc_claims["nats"]["exports"] = SYS_EXPORTS
        acc_token = J.encode(acc_claims, sys_signer)
        usr_kp, _ = new_key("user")
        usr_claims = {"name": "sys", "sub": usr_kp.public_key(), "nats": user_nats()}
        usr_claims["nats"]["issuer_account"] = acc_kp.public_key()
        usr_token = J.encode(usr_claims, acc_sk_signer)
        claims["nats"]["system_account"] = acc_kp.public_key()
        sys_parts = (acc_kp, acc_sk, acc_token, usr_kp, usr_token)
    token = J.encode(claims, op_signer)
    # everything is made: now write
    s.store_key(op_kp)
    ok(f'generated and stored operator key "{op_kp.public_key()}"')
    write_file(s.op_jwt_path(name), token, 0o644)
    write_file(os.path.join(root, NSC_FILE),
               json.dumps({"managed": False, "name": name, "kind": "operator", "version": STORE_VERSION}), 0o644)
    os.makedirs(os.path.join(root, "accounts"), mode=0o700, exist_ok=True)
    ok(f'added operator "{name}"')
    if sk_kp is not None:
        s.store_key(sk_kp)
        ok(f"created operator signing key: {sk_kp.public_key()}")
    current_acc = ""
    if sys_parts is not None:
        acc_kp, acc_sk, acc_token, usr_kp, usr_token = sys_parts
        s.store_key(acc_kp)
        s.store_key(acc_sk)
        s.store_key(usr_kp)
        write_file(s.acc_jwt_path(name, "SYS"), acc_token, 0o644)
        write_file(s.user_jwt_path(name, "SYS", "sys"), usr_token, 0o644)
        cp = s.creds_path(name, "SYS", "sys")
        write_file(cp, J.format_creds(usr_token, usr_kp.seed()))
        ok(f"created system_account: name:SYS id:{acc_kp.public_key()}")
        ok(f"created system account user: name:sys id:{usr_kp.public_key()}")
        ok(f"system account user creds file stored in {cp}")
        current_acc = "SYS"
    s.save_config(name, current_acc)


@add_app.command("account")
def add_account(name: str = typer.Option(..., "--name", "-n", help="account name"),
                expiry: str = typer.Option("", "--expiry", help="valid until (date, duration or 0)")) -> None:
    s = store()
    op = s.operator()
    name = _check_name("account", name)
    _, op_claims = s.operator_claims(op)
    if os.path.exists(s.acc_jwt_path(op, name)):
        raise AuthError(f'the account "{name}" already exists')
    signer = s.signer_for([op_claims["sub"], *s._signing_keys(op_claims)])
    kp, _ = new_key("account")
    claims = {"name": name, "sub": kp.public_key(), "nats": account_nats()}
    exp = parse_expiry(expiry)
    if exp:
        claims["exp"] = exp
    token = J.encode(claims, signer)
    s.store_key(kp)
    ok(f'generated and stored account key "{kp.public_key()}"')
    write_file(s.acc_jwt_path(op, name), token, 0o644)
    ok(f'added account "{name}"')
    s.save_config(op, name)


_LIMIT_FLAGS = {"conns": "conn", "leaf_conns": "leaf", "data": "data", "payload": "payload",
                "subscriptions": "subs", "imports": "imports", "exports": "exports",
                "js_mem_storage": "mem_storage", "js_disk_storage": "disk_storage", "js_streams": "streams",
                "js_consumer": "consumer", "js_max_mem_stream": "mem_max_stream_bytes",
                "js_max_disk_stream": "disk_max_stream_bytes", "js_max_ack_pending": "max_ack_pending"}


@edit_app.command("account")
def edit_account(name: str = typer.Option("", "--name", "-n", help="account to edit"),
                 conns: Optional[str] = typer.Option(None, "--conns"),
                 leaf_conns: Optional[str] = typer.Option(None, "--leaf-conns"),
                 data: Optional[str] = typer.Option(None, "--data"),
                 payload: Optional[str] = typer.Option(None, "--payload"),
                 subscriptions: Optional[str] = typer.Option(None, "--subscriptions"),
                 imports: Optional[str] = typer.Option(None, "--imports"),
                 exports: Optional[str] = typer.Option(None, "--exports"),
                 js_mem_storage: Optional[str] = typer.Option(None, "--js-mem-storage"),
                 js_disk_storage: Optional[str] = typer.Option(None, "--js-disk-storage"),
                 js_streams: Optional[str] = typer.Option(None, "--js-streams"),
                 js_consumer: Optional[str] = typer.Option(None, "--js-consumer"),
                 js_max_mem_stream: Optional[str] = typer.Option(None, "--js-max-mem-stream"),
                 js_max_disk_stream: Optional[str] = typer.Option(None, "--js-max-disk-stream"),
                 js_max_ack_pending: Optional[str] = typer.Option(None, "--js-max-ack-pending"),
                 js_max_bytes_required: bool = typer.Option(False, "--js-max-bytes-required"),
                 js_disable: bool = typer.Option(False, "--js-disable",
                                                 help="remove every JetStream limit (JetStream off)"),
                 description: Optional[str] = typer.Option(None, "--description"),
                 sk: list[str] = typer.Option([], "--sk", help="add a signing key: 'generate' or a public key A..."),
                 rm_sk: list[str] = typer.Option([], "--rm-sk", help="remove a signing key"),
                 js_tier: int = typer.Option(0, "--js-tier", help="the JetStream limits given are for streams of "
                                                                 "this replication (0: for all)"),
                 rm_js_tier: int = typer.Option(-1, "--rm-js-tier", help="remove the JetStream limits of this "
                                                                        "replication tier (0: the global ones)"),
                 tag: list[str] = typer.Option([], "--tag", help="add tags"),
                 rm_tag: list[str] = typer.Option([], "--rm-tag", help="remove tags")) -> None:
    s = store()
    op = s.operator()
    acc = s.account(op, name or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    values = dict(conns=conns, leaf_conns=leaf_conns, data=data, payload=payload, subscriptions=subscriptions,
                  imports=imports, exports=exports, js_mem_storage=js_mem_storage, js_disk_storage=js_disk_storage,
                  js_streams=js_streams, js_consumer=js_consumer, js_max_mem_stream=js_max_mem_stream,
                  js_max_disk_stream=js_max_disk_stream, js_max_ack_pending=js_max_ack_pending)
    parsed = {k: parse_number("--" + k.replace("_", "-"), v) for k, v in values.items() if v is not None}
    if js_disable and any(k.startswith("js_") for k in parsed):
        raise AuthError("--js-disable does not go with other JetStream limits")
    if js_tier < 0 or js_tier > 5:
        raise AuthError(f"--js-tier {js_tier}: 0 (all replications) or a replication, 1 to 5")
    if rm_js_tier >= 0 and (any(k.startswith("js_") for k in parsed) or js_disable):
        raise AuthError("--rm-js-tier does not go with other JetStream flags")
    if not parsed and not js_disable and not js_max_bytes_required and description is None and not sk and not rm_sk \
            and rm_js_tier < 0 and not tag and not rm_tag:
        raise AuthError("nothing to edit: give a limit (--conns, --js-disk-storage, ...), --sk, --rm-sk or "
                        "--description")
    new_keys: list[nkey.KeyPair] = []
    add_pubs: list[str] = []
    for k in sk:
        if k == "generate":
            kp, _ = new_key("account")
            new_keys.append(kp)
            add_pubs.append(kp.public_key())
        elif J.is_public_key(k, "A"):
            add_pubs.append(k)
        else:
            raise AuthError(f"--sk {k!r}: 'generate' or a public account key (A...)")
    current = s._signing_keys(claims)
    for k in rm_sk:
        if k not in current:
            raise AuthError(f"--rm-sk {k}: not a signing key of account {acc}")
    signer = s.signer_for([op_claims["sub"], *s._signing_keys(op_claims)])
    nats_s = dict(claims["nats"])
    limits = dict(nats_s.get("limits") or {})
    if js_disable:
        for k in ("mem_storage", "disk_storage", "streams", "consumer", "max_ack_pending", "mem_max_stream_bytes",
                  "disk_max_stream_bytes", "max_bytes_required"):
            limits.pop(k, None)
        limits.pop("tiered_limits", None)
    js_keys = ("mem_storage", "disk_storage", "streams", "consumer", "max_ack_pending", "mem_max_stream_bytes",
               "disk_max_stream_bytes", "max_bytes_required")
    tiers = {k: dict(v) for k, v in (limits.get("tiered_limits") or {}).items()}
    if rm_js_tier == 0:
        for k in js_keys:
            limits.pop(k, None)
    elif rm_js_tier > 0:
        if tiers.pop(f"R{rm_js_tier}", None) is None:
            raise AuthError(f"--rm-js-tier {rm_js_tier}: account {acc} has no limits for tier R{rm_js_tier}")
    js_given = {_LIMIT_FLAGS[k]: v for k, v in parsed.items() if k.startswith("js_")}
    for k, v in parsed.items():
        if not k.startswith("js_"):
            limits[_LIMIT_FLAGS[k]] = v
    if js_given or js_max_bytes_required:
        if js_tier:
            if any(limits.get(k) for k in ("mem_storage", "disk_storage")):
                raise AuthError("the account has global JetStream limits: tiered ones go with none (--rm-js-tier 0)")
            target = tiers.setdefault(f"R{js_tier}", {})
        else:
            if tiers:
                raise AuthError(f"the account has JetStream limits per tier ({', '.join(sorted(tiers))}): give "
                                "--js-tier, or remove them (--rm-js-tier N)")
            target = limits
        target.update(js_given)
        if js_max_bytes_required:
            target["max_bytes_required"] = True
        if any(target.get(k) for k in ("mem_storage", "disk_storage")):
            # JetStream on: the counts not given are unlimited (a 0 there would allow no stream at all)
            for k in ("streams", "consumer", "max_ack_pending"):
                if k not in js_given and not target.get(k):
                    target[k] = -1
    if tiers:
        limits["tiered_limits"] = tiers
    else:
        limits.pop("tiered_limits", None)
    nats_s["limits"] = limits
    if tag or rm_tag:
        tags = [t for t in (nats_s.get("tags") or []) if t not in {x.lower() for x in _list(rm_tag)}]
        tags += [t.lower() for t in _list(tag) if t.lower() not in tags]
        if tags:
            nats_s["tags"] = tags
        else:
            nats_s.pop("tags", None)
    if description is not None:
        nats_s["description"] = description
    if add_pubs or rm_sk:
        keys = [k for k in (nats_s.get("signing_keys") or [])
                if (k if isinstance(k, str) else k.get("key")) not in rm_sk]
        keys += [p for p in add_pubs if p not in current]
        if keys:
            nats_s["signing_keys"] = keys
        else:
            nats_s.pop("signing_keys", None)
    for kp in new_keys:
        s.store_key(kp)
        ok(f'added signing key "{kp.public_key()}"')
    new = {k: v for k, v in claims.items() if k not in ("iss", "jti")}
    new["nats"] = nats_s
    new["iat"] = max(int(time.time()), int(claims.get("iat") or 0) + 1)  # newer than the JWT it replaces
    token = J.encode(new, signer)
    write_file(s.acc_jwt_path(op, acc), token, 0o644)
    ok(f'edited account "{acc}"')


def _subjects(values: list[str]) -> list[str]:
    out = []
    for v in values:
        for part in v.split(","):
            part = part.strip()
            if part:
                if " " in part or part.startswith(".") or part.endswith(".") or ".." in part:
                    raise AuthError(f"invalid subject {part!r}")
                out.append(part)
    return out


CONN_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS")


def _list(values: list[str]) -> list[str]:
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def apply_user_limits(nats_s: dict, source_network: list[str], conn_type: list[str], times: list[str],
                      locale: Optional[str], subs: Optional[str], data: Optional[str], payload: Optional[str],
                      rm_source_network: list[str] = [], rm_conn_type: list[str] = [],  # noqa: B006
                      tags: list[str] = [], rm_tags: list[str] = [],  # noqa: B006
                      allow_pub_response: Optional[int] = None, response_ttl: Optional[str] = None) -> None:
    """The user limits nsc sets: source networks (CIDR), connection types, time windows, numbers, tags and
    the response permission (``resp``: replies a requester may get, for how long)."""
    if tags or rm_tags:
        cur = [t for t in (nats_s.get("tags") or []) if t not in {x.lower() for x in _list(rm_tags)}]
        cur += [t.lower() for t in _list(tags) if t.lower() not in cur]
        if cur:
            nats_s["tags"] = cur
        else:
            nats_s.pop("tags", None)
    if allow_pub_response is not None or response_ttl is not None:
        resp = dict(nats_s.get("resp") or {})
        if allow_pub_response is not None:
            if allow_pub_response < 0:
                raise AuthError(f"--allow-pub-response {allow_pub_response}: 0 or more replies")
            resp["max"] = allow_pub_response or 1
        if response_ttl is not None:
            from rillet.gocompat.gotime import parse_go_duration
            try:
                resp["ttl"] = int(parse_go_duration(response_ttl) * 1e9)
            except ValueError as e:
                raise AuthError(f"--response-ttl {response_ttl!r}: {e}") from None
        resp.setdefault("max", 1)
        resp.setdefault("ttl", 0)
        nats_s["resp"] = resp
    import ipaddress
    src = [x for x in (nats_s.get("src") or []) if x not in set(_list(rm_source_network))]
    for net in _list(source_network):
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise AuthError(f"--source-network {net!r}: not a network (CIDR, e.g. 10.0.0.0/8)") from None
        if net not in src:
            src.append(net)
    if src:
        nats_s["src"] = src
    else:
        nats_s.pop("src", None)
    types = [x for x in (nats_s.get("allowed_connection_types") or []) if x not in set(_list(rm_conn_type))]
    for t in _list(conn_type):
        if t.upper() not in CONN_TYPES:
            raise AuthError(f"--conn-type {t!r}: one of {', '.join(CONN_TYPES)}")
        if t.upper() not in types:
            types.append(t.upper())
    if types:
        nats_s["allowed_connection_types"] = types
    else:
        nats_s.pop("allowed_connection_types", None)
    windows = list(nats_s.get("times") or [])
    for t in times:
        m = re.fullmatch(r"(\d\d:\d\d:\d\d)-(\d\d:\d\d:\d\d)", t.strip())
        if not m:
            raise AuthError(f"--time {t!r}: a start-end range such as 08:00:00-17:00:00")
        for part in m.groups():
            hh, mm, ss = (int(x) for x in part.split(":"))
            if hh > 23 or mm > 59 or ss > 59:
                raise AuthError(f"--time {t!r}: {part} is not a time of day")
        windows.append({"start": m.group(1), "end": m.group(2)})
    if windows:
        nats_s["times"] = windows
    if locale is not None:
        try:
            import zoneinfo
            if locale:
                zoneinfo.ZoneInfo(locale)
        except Exception:
            raise AuthError(f"--locale {locale!r}: not a time zone name (e.g. Europe/Paris)") from None
        if locale:
            nats_s["times_location"] = locale
        else:
            nats_s.pop("times_location", None)
    for flag, key, val in (("--subs", "subs", subs), ("--data", "data", data), ("--payload", "payload", payload)):
        if val is not None:
            nats_s[key] = parse_number(flag, val)


@add_app.command("user")
def add_user(name: str = typer.Option(..., "--name", "-n", help="user name"),
             account: str = typer.Option("", "--account", "-a", help="account name"),
             allow_pub: list[str] = typer.Option([], "--allow-pub", help="publish permissions (comma separated)"),
             allow_sub: list[str] = typer.Option([], "--allow-sub", help="subscribe permissions"),
             allow_pubsub: list[str] = typer.Option([], "--allow-pubsub", help="publish and subscribe permissions"),
             deny_pub: list[str] = typer.Option([], "--deny-pub", help="denied publish subjects"),
             deny_sub: list[str] = typer.Option([], "--deny-sub", help="denied subscribe subjects"),
             deny_pubsub: list[str] = typer.Option([], "--deny-pubsub", help="denied publish and subscribe subjects"),
             bearer: bool = typer.Option(False, "--bearer", help="no connect challenge required for user"),
             expiry: str = typer.Option("", "--expiry", help="valid until (date, duration or 0)"),
             private_key: str = typer.Option("", "--private-key", "-K",
                                             help="sign with this signing key of the account (its public key, or "
                                                  "the role of a scoped one)"),
             source_network: list[str] = typer.Option([], "--source-network", help="allowed client networks (CIDR)"),
             conn_type: list[str] = typer.Option([], "--conn-type", help="allowed connection types: "
                                                 + ", ".join(CONN_TYPES)),
             time_: list[str] = typer.Option([], "--time", help="allowed time of day, start-end (08:00:00-17:00:00)"),
             locale: Optional[str] = typer.Option(None, "--locale", help="the time zone of --time"),
             subs: Optional[str] = typer.Option(None, "--subs"), data: Optional[str] = typer.Option(None, "--data"),
             payload: Optional[str] = typer.Option(None, "--payload"),
             tag: list[str] = typer.Option([], "--tag", help="tags of the user"),
             allow_pub_response: Optional[int] = typer.Option(None, "--allow-pub-response",
                                                              help="may answer requests: this many replies each"),
             response_ttl: Optional[str] = typer.Option(None, "--response-ttl",
                                                        help="for how long after a request (Go duration)")) -> None:
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    name = _check_name("user", name)
    _, op_claims = s.operator_claims(op)
    _, acc_claims = s.account_claims(op, acc, op_claims)
    if os.path.exists(s.user_jwt_path(op, acc, name)):
        raise AuthError(f'the user "{name}" already exists in account "{acc}"')
    scoped = None
    if private_key:
        entries = J.nats_section(acc_claims).get("signing_keys") or []
        match = [e for e in entries if (e if isinstance(e, str) else e.get("key")) == private_key or
                 (isinstance(e, dict) and e.get("role") == private_key)]
        if not match:
            raise AuthError(f"--private-key {private_key}: not a signing key (or role) of account {acc}")
        scoped = match[0] if isinstance(match[0], dict) else None
        signer = s.signer_for([match[0] if isinstance(match[0], str) else match[0]["key"]])
    else:
        signer = s.signer_for([acc_claims["sub"]])
    limits_given = bool(source_network or conn_type or time_ or locale is not None or subs is not None or
                        data is not None or payload is not None or tag or allow_pub_response is not None or
                        response_ttl is not None)
    if scoped is not None and (allow_pub or allow_sub or allow_pubsub or deny_pub or deny_sub or deny_pubsub or bearer
                               or limits_given):
        raise AuthError(f"a user of the scoped signing key {scoped['key']} takes its permissions from the scope: "
                        "no --allow/--deny/--bearer (edit the scope with `edit signing-key`)")
    kp, _ = new_key("user")
    nats_s = user_nats()
    if private_key:
        nats_s["issuer_account"] = acc_claims["sub"]
    if scoped is not None:
        # no permissions and no limits at all (not even the unlimited -1s): the server applies the scope's
        # template, and refuses a scoped user whose JWT sets any ("scoped users require no permissions or
        # limits set")
        nats_s = {"pub": {}, "sub": {}, "issuer_account": acc_claims["sub"], "type": "user", "version": 2}
    pub_allow = _subjects(allow_pub) + _subjects(allow_pubsub)
    sub_allow = _subjects(allow_sub) + _subjects(allow_pubsub)
    pub_deny = _subjects(deny_pub) + _subjects(deny_pubsub)
    sub_deny = _subjects(deny_sub) + _subjects(deny_pubsub)
    if pub_allow:
        nats_s["pub"]["allow"] = pub_allow
    if pub_deny:
        nats_s["pub"]["deny"] = pub_deny
    if sub_allow:
        nats_s["sub"]["allow"] = sub_allow
    if sub_deny:
        nats_s["sub"]["deny"] = sub_deny
    if bearer:
        nats_s["bearer_token"] = True
    if scoped is None:
        apply_user_limits(nats_s, source_network, conn_type, time_, locale, subs, data, payload, tags=tag,
                          allow_pub_response=allow_pub_response, response_ttl=response_ttl)
    claims: dict[str, Any] = {"name": name, "sub": kp.public_key(), "nats": nats_s}
    exp = parse_expiry(expiry)
    if exp:
        claims["exp"] = exp
    token = J.encode(claims, signer)
    s.store_key(kp)
    ok(f'generated and stored user key "{kp.public_key()}"')
    write_file(s.user_jwt_path(op, acc, name), token, 0o644)
    cp = s.creds_path(op, acc, name)
    write_file(cp, J.format_creds(token, kp.seed()))
    ok(f"generated user creds file {cp}")
    ok(f'added user "{name}" to account "{acc}"')


# -- describe

def _show(token: str, claims: dict, as_json: bool, raw: bool) -> None:
    if raw:
        print(token)
    elif as_json:
        print(json.dumps(claims, indent=1))
    else:
        print(table(claims), end="")


def table(claims: dict) -> str:
    kind = J.claim_type(claims)
    rows: list[tuple[str, str]] = [("Name", str(claims.get("name", ""))),
                                   (f"{kind.capitalize()} ID", claims.get("sub", "")),
                                   ("Issuer ID", claims.get("iss", "")),
                                   ("Issued", _when(claims.get("iat"))), ("Expires", _when(claims.get("exp")) or "")]
    n = J.nats_section(claims)
    if kind == "operator":
        rows.append(("System Account", n.get("system_account", "Not Set")))
        for k in n.get("signing_keys") or []:
            rows.append(("Signing Key", k if isinstance(k, str) else k.get("key", "")))
    elif kind == "account":
        lim = n.get("limits") or {}
        for label, key in (("Max Connections", "conn"), ("Max Leaf Node Connections", "leaf"), ("Max Data", "data"),
                           ("Max Exports", "exports"), ("Max Imports", "imports"), ("Max Msg Payload", "payload"),
                           ("Max Subscriptions", "subs")):
            rows.append((label, _limit(lim.get(key, -1))))
        js = any(lim.get(k) for k in ("mem_storage", "disk_storage"))
        rows.append(("JetStream", "Enabled" if js else "Disabled"))
        if js:
            for label, key in (("Max Mem Storage", "mem_storage"), ("Max Disk Storage", "disk_storage"),
                               ("Max Streams", "streams"), ("Max Consumer", "consumer")):
                rows.append((label, _limit(lim.get(key, 0))))
        for k in n.get("signing_keys") or []:
            rows.append(("Signing Key", k if isinstance(k, str) else k.get("key", "")))
        for e in n.get("exports") or []:
            rows.append(("Export", f"{e.get('name', '')} {e.get('type', '')} {e.get('subject', '')}"))
    elif kind == "user":
        if n.get("issuer_account"):
            rows.append(("Issuer Account", n["issuer_account"]))
        rows.append(("Bearer Token", "Yes" if n.get("bearer_token") else "No"))
        for label, sec in (("Pub", "pub"), ("Sub", "sub")):
            p = n.get(sec) or {}
            for verb in ("allow", "deny"):
                for subj in p.get(verb) or []:
                    rows.append((f"{label} {verb.capitalize()}", subj))
        if n.get("resp"):
            ttl = n["resp"].get("ttl") or 0
            rows.append(("Response Permissions", f"{n['resp'].get('max', 1)} replies"
                         + (f", {ttl / 1e9:g}s" if ttl else "")))
        for t in n.get("tags") or []:
            rows.append(("Tag", t))
        for src in n.get("src") or []:
            rows.append(("Source Network", src))
        for t in n.get("allowed_connection_types") or []:
            rows.append(("Connection Type", t))
        for w in n.get("times") or []:
            rows.append(("Time", f"{w.get('start', '')}-{w.get('end', '')}"))
        if n.get("times_location"):
            rows.append(("Locale", n["times_location"]))
        rows.append(("Max Msgs/Subs", _limit(n.get("subs", -1))))
        rows.append(("Max Data", _limit(n.get("data", -1))))
        rows.append(("Max Payload", _limit(n.get("payload", -1))))
    w = max(len(k) for k, _ in rows)
    title = f"{kind.capitalize()} Details"
    out = [title, "-" * max(len(title), w + 3 + max(len(v) for _, v in rows))]
    out += [f"{k:<{w}} | {v}" for k, v in rows]
    return "\n".join(out) + "\n"


def _when(t: Any) -> str:
    if not isinstance(t, (int, float)) or t <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _limit(v: Any) -> str:
    return "Unlimited" if v in (-1, None) else str(v)


@describe_app.command("operator")
def describe_operator(name: str = typer.Option("", "--name", "-n"),
                      as_json: bool = typer.Option(False, "--json", "-J"),
                      raw: bool = typer.Option(False, "--raw", "-R")) -> None:
    s = store()
    token, claims = s.operator_claims(s.operator(name or None))
    _show(token, claims, as_json, raw)


@describe_app.command("account")
def describe_account(name: str = typer.Option("", "--name", "-n"),
                     as_json: bool = typer.Option(False, "--json", "-J"),
                     raw: bool = typer.Option(False, "--raw", "-R")) -> None:
    s = store()
    op = s.operator()
    token, claims = s.account_claims(op, s.account(op, name or None))
    _show(token, claims, as_json, raw)


@describe_app.command("user")
def describe_user(name: str = typer.Option(..., "--name", "-n"), account: str = typer.Option("", "--account", "-a"),
                  as_json: bool = typer.Option(False, "--json", "-J"),
                  raw: bool = typer.Option(False, "--raw", "-R")) -> None:
    s = store()
    op = s.operator()
    token, claims = s.user_claims(op, s.account(op, account or None), name, check_revoked=False)
    _show(token, claims, as_json, raw)


@describe_app.command("jwt")
def describe_jwt(file: str = typer.Option(..., "--file", "-f", help="a file holding a JWT or a .creds file"),
                 as_json: bool = typer.Option(False, "--json", "-J"),
                 raw: bool = typer.Option(False, "--raw", "-R")) -> None:
    text = read_text(file, "JWT file")
    if "-----BEGIN" in text:
        try:
            token, seed = J.parse_creds(text)
        except J.JwtError as e:
            raise AuthError(f"{file}: {e}") from None
        _check_creds_seed(file, seed)
    else:
        token = J.extract_jwt(text)
    try:
        claims = J.decode(token)
    except J.JwtError as e:
        raise AuthError(f"{file}: not a valid JWT: {e}") from None
    if "-----BEGIN" in text:
        try:
            pub = nkey.from_seed(seed).public_key()
        except nkey.NkeyError:
            pub = ""
        if pub != claims.get("sub"):
            raise AuthError(f"{file}: the seed is not the key of the JWT's user ({claims.get('sub')})")
    _show(token, claims, as_json, raw)


def _check_creds_seed(file: str, seed: str) -> None:
    try:
        nkey.from_seed(seed)
    except nkey.NkeyError as e:
        raise AuthError(f"{file}: the seed in the creds file is not valid: {e}") from None


# -- generate

@generate_app.command("creds")
def generate_creds(name: str = typer.Option(..., "--name", "-n", help="user name"),
                   account: str = typer.Option("", "--account", "-a"),
                   output_file: str = typer.Option("", "--output-file", "-o",
                                                   help="write here (default stdout)")) -> None:
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    token, claims = s.user_claims(op, acc, name)
    seed = s.seed_of(claims["sub"])
    text = J.format_creds(token, seed)
    if output_file and output_file != "--":
        write_file(output_file, text)
        ok(f"wrote credentials to {output_file}")
    else:
        print(text, end="")


def _read_activation(path: str, importer: str) -> tuple[str, dict]:
    token = J.extract_jwt(read_text(path, "activation token"))
    try:
        claims = J.decode(token)
    except J.JwtError as e:
        raise AuthError(f"{path}: not a valid activation token: {e}") from None
    if J.claim_type(claims) != "activation":
        raise AuthError(f"{path}: a {J.claim_type(claims) or 'untyped'} JWT, not an activation token")
    if claims.get("sub") != importer:
        raise AuthError(f"{path}: the token is for account {claims.get('sub')}, not this one ({importer})")
    if J.is_expired(claims):
        raise AuthError(f"{path}: the activation token has expired")
    return token, claims


@generate_app.command("activation")
def generate_activation(account: str = typer.Option("", "--account", "-a", help="the exporting account"),
                        subject: str = typer.Option(..., "--subject", "-s", help="the exported subject"),
                        target_account: str = typer.Option(..., "--target-account", "-t",
                                                           help="the importing account (name or public key)"),
                        service: bool = typer.Option(False, "--service", help="a service export"),
                        output_file: str = typer.Option("", "--output-file", "-o"),
                        expiry: str = typer.Option("", "--expiry")) -> None:
    """An activation token: lets one account import a private export."""
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    kind = "service" if service else "stream"
    subj = _subjects([subject])
    if len(subj) != 1:
        raise AuthError(f"--subject {subject!r}: one subject")
    exports = [e for e in (J.nats_section(claims).get("exports") or [])
               if e.get("type") == kind and e.get("token_req") and _subject_matches(e.get("subject", ""), subj[0])]
    if not exports:
        raise AuthError(f'account "{acc}" has no private {kind} export covering {subj[0]}')
    if J.is_public_key(target_account, "A"):
        target = target_account
    else:
        target = s.account_claims(op, s.account(op, target_account), op_claims)[1]["sub"]
    signer = s.signer_for([claims["sub"]])
    act: dict[str, Any] = {"name": subj[0], "sub": target,
                           "nats": {"subject": subj[0], "kind": kind, "type": "activation", "version": 2}}
    exp = parse_expiry(expiry)
    if exp:
        act["exp"] = exp
    token = J.encode(act, signer)
    if output_file:
        write_file(output_file, token + "\n", 0o644)
        ok(f"wrote the activation token to {output_file}")
    else:
        print(token)


@generate_app.command("config")
def generate_config(mem_resolver: bool = typer.Option(False, "--mem-resolver", help="a memory resolver configuration"),
                    nats_resolver: bool = typer.Option(False, "--nats-resolver",
                                                       help="a full (nats) resolver configuration"),
                    config_file: str = typer.Option("", "--config-file", "-F", help="write here (default stdout)"),
                    sys_account: str = typer.Option("", "--sys-account", help="the system account's name"),
                    force: bool = typer.Option(False, "--force", help="overwrite an existing --config-file"),
                    dir_: str = typer.Option("./jwt", "--dir", help="the full resolver's directory")) -> None:
    if mem_resolver == nats_resolver:
        raise AuthError("give one of --mem-resolver or --nats-resolver")
    if config_file and os.path.exists(config_file) and not force:
        raise AuthError(f"{config_file} exists: give --force to overwrite it")
    s = store()
    op = s.operator()
    op_token, op_claims = s.operator_claims(op)
    accounts = {}
    for acc in s.accounts(op):
        t, c = s.account_claims(op, acc, op_claims)
        accounts[acc] = (t, c)
    sys_pub = J.nats_section(op_claims).get("system_account", "")
    if sys_account:
        if sys_account not in accounts:
            raise AuthError(f"--sys-account {sys_account}: no such account in operator {op}")
        sys_pub = accounts[sys_account][1]["sub"]
    lines = [f"# Operator named {op}", f"operator: {op_token}"]
    if sys_pub:
        sys_name = next((a for a, (_, c) in accounts.items() if c["sub"] == sys_pub), sys_pub)
        lines.append(f"# System Account named {sys_name}")
        lines.append(f"system_account: {sys_pub}")
    lines.append("")
    if mem_resolver:
        lines += ["resolver: MEMORY", "", "resolver_preload: {"]
        for acc, (t, c) in accounts.items():
            lines.append(f"  # Account {json.dumps(acc)}")
            lines.append(f"  {c['sub']}: {t}")
            lines.append("")
        lines.append("}")
    else:
        lines += ["resolver: {", "  type: full", f"  dir: {json.dumps(dir_)}", "  allow_delete: false",
                  '  interval: "2m"', '  timeout: "1.9s"', "}", ""]
        sys_tokens = [t for t, c in accounts.values() if c["sub"] == sys_pub]
        if sys_tokens:  # the full resolver learns the other accounts by push; the system account is preloaded
            lines += ["resolver_preload: {", f"  {sys_pub}: {sys_tokens[0]}", "}"]
    text = "\n".join(lines) + "\n"
    if config_file:
        write_file(config_file, text, 0o644)
        ok(f"wrote server configuration to {config_file}")
    else:
        print(text, end="")


@edit_app.command("operator")
def edit_operator(account_jwt_server_url: Optional[str] = typer.Option(None, "--account-jwt-server-url", "-u",
                                                                      help="where `push` sends account JWTs "
                                                                           "(nats://host:port of a server)"),
                  service_url: list[str] = typer.Option([], "--service-url", "-n",
                                                         help="operator service URLs (nats://...)"),
                  system_account: Optional[str] = typer.Option(None, "--system-account",
                                                               help="the system account, by name or key")) -> None:
    s = store()
    op = s.operator()
    _, claims = s.operator_claims(op)
    if account_jwt_server_url is None and not service_url and system_account is None:
        raise AuthError("nothing to edit: give --account-jwt-server-url, --service-url or --system-account")
    nats_s = dict(claims["nats"])
    if account_jwt_server_url is not None:
        if account_jwt_server_url and not re.match(r"^(nats|tls|http|https)://", account_jwt_server_url):
            raise AuthError(f"invalid --account-jwt-server-url {account_jwt_server_url!r}: nats://, tls://, "
                            "http:// or https://")
        nats_s["account_server_url"] = account_jwt_server_url
    for u in service_url:
        if not re.match(r"^(nats|tls)://", u):
            raise AuthError(f"invalid --service-url {u!r}: nats:// or tls://")
    if service_url:
        nats_s["operator_service_urls"] = list(service_url)
    if system_account is not None:
        pub = system_account
        if not J.is_public_key(pub, "A"):
            if system_account not in s.accounts(op):
                raise AuthError(f"--system-account {system_account}: no such account in operator {op}")
            pub = s.account_claims(op, system_account, claims)[1]["sub"]
        nats_s["system_account"] = pub
    signer = s.signer_for([claims["sub"]])
    new = {k: v for k, v in claims.items() if k not in ("iss", "jti")}
    new["nats"] = nats_s
    new["iat"] = max(int(time.time()), int(claims.get("iat") or 0) + 1)
    write_file(s.op_jwt_path(op), J.encode(new, signer), 0o644)
    ok(f'edited operator "{op}"')


@app.command("push")
def push(account: str = typer.Option("", "--account", "-a", help="the account to push"),
         all_accounts: bool = typer.Option(False, "--all", "-A", help="push every account of the operator"),
         url: str = typer.Option("", "--account-jwt-server-url", "-u",
                                 help="a server (nats://host:port); default: the operator's account server URL"),
         system_account: str = typer.Option("", "--system-account", help="default: the operator's"),
         system_user: str = typer.Option("", "--system-user",
                                         help="a user of the system account (default: a temporary one)"),
         timeout: int = typer.Option(1, "--timeout", help="seconds to wait for the servers' answers [1-60]")) -> None:
    """Send account JWTs to the servers' full (nats) resolver: $SYS.REQ.CLAIMS.UPDATE, as nsc push."""
    if bool(account) == all_accounts:
        raise AuthError("give one of --account NAME or --all")
    s = store()
    op = s.operator()
    _, op_claims = s.operator_claims(op)
    url = url or J.nats_section(op_claims).get("account_server_url", "")
    if not url:
        raise AuthError("no account server URL: give -u nats://host:port, or set the operator's with "
                        "`rillet auth edit operator --account-jwt-server-url nats://host:port`")
    if not url.startswith(("nats://", "tls://")):
        raise AuthError(f"push needs a nats:// (or tls://) URL, not {url!r}")
    names = s.accounts(op) if all_accounts else [s.account(op, account)]
    tokens = [(n, s.account_claims(op, n, op_claims)[0]) for n in names]
    utoken, useed = _sys_user(s, op, op_claims, system_account, system_user)
    timeout = min(max(timeout, 1), 60)
    from rillet.cli.common import run
    failures = run(_push, url, utoken, useed, tokens, float(timeout))
    if failures:
        raise AuthError(failures[0] if len(failures) == 1 else f"{failures[0]} (and {len(failures) - 1} more)")


def _sys_user(s: Store, op: str, op_claims: dict, system_account: str, system_user: str) -> tuple[str, str]:
    """(JWT, seed) of a system account user: ``system_user`` from the store, else a temporary one."""
    sys_pub = J.nats_section(op_claims).get("system_account", "")
    if system_account:
        sys_pub = s.account_claims(op, s.account(op, system_account), op_claims)[1]["sub"]
    if not sys_pub:
        raise AuthError(f"operator {op} has no system account (add operator --sys, or edit operator "
                        "--system-account)")
    if system_user:
        sys_name = next((n for n in s.accounts(op) if s.account_claims(op, n, op_claims)[1]["sub"] == sys_pub), "")
        if not sys_name:
            raise AuthError("the system account is not in this store: --system-user cannot be found")
        utoken, uclaims = s.user_claims(op, sys_name, system_user)
        return utoken, s.seed_of(uclaims["sub"])
    signer = s.signer_for([sys_pub])
    ukp, _ = new_key("user")
    token = J.encode({"name": "rillet-auth", "sub": ukp.public_key(), "exp": int(time.time()) + 300,
                      "nats": user_nats()}, signer)
    return token, ukp.seed()


@app.command("pull")
def pull(account: str = typer.Option("", "--account", "-a", help="the account to pull"),
         all_accounts: bool = typer.Option(False, "--all", "-A", help="every account of the store"),
         overwrite_newer: bool = typer.Option(False, "--overwrite-newer",
                                              help="replace a local JWT that is newer than the server's"),
         url: str = typer.Option("", "--account-jwt-server-url", "-u",
                                 help="a server (nats://host:port); default: the operator's account server URL"),
         system_account: str = typer.Option("", "--system-account"),
         system_user: str = typer.Option("", "--system-user"),
         timeout: int = typer.Option(1, "--timeout", help="seconds to wait for an answer [1-60]")) -> None:
    """Fetch account JWTs from the servers' resolver ($SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP) into the store."""
    if bool(account) == all_accounts:
        raise AuthError("give one of --account NAME or --all")
    s = store()
    op = s.operator()
    _, op_claims = s.operator_claims(op)
    url = url or J.nats_section(op_claims).get("account_server_url", "")
    if not url.startswith(("nats://", "tls://")):
        raise AuthError("pull needs a nats:// URL: give -u nats://host:port or set the operator's account server URL")
    names = s.accounts(op) if all_accounts else [s.account(op, account)]
    local = {n: s.account_claims(op, n, op_claims) for n in names}
    utoken, useed = _sys_user(s, op, op_claims, system_account, system_user)
    from rillet.cli.common import run
    got = run(_lookup, url, utoken, useed, [(n, c["sub"]) for n, (_, c) in local.items()],
              float(min(max(timeout, 1), 60)))
    signers = {op_claims["sub"], *s._signing_keys(op_claims)}
    updates: list[tuple[str, str]] = []
    for n, token in got:  # everything checked before anything is written
        where = f'the server\'s JWT of account "{n}"'
        claims = decode_jwt(token, where, "account")
        if claims.get("sub") != local[n][1]["sub"]:
            raise AuthError(f"{where} is of another account ({claims.get('sub')})")
        if claims.get("iss") not in signers:
            raise AuthError(f"{where} is not signed by operator {op} or one of its signing keys")
        if int(claims.get("iat") or 0) < int(local[n][1].get("iat") or 0) and not overwrite_newer:
            raise AuthError(f'the local JWT of account "{n}" is newer than the server\'s: give --overwrite-newer '
                            "to replace it (or push it)")
        updates.append((n, token))
    for n, token in updates:
        if token.strip() == local[n][0].strip():
            ok(f'account "{n}" is up to date')
            continue
        write_file(s.acc_jwt_path(op, n), token.strip(), 0o644)
        ok(f'pulled account "{n}"')


async def _lookup(url: str, utoken: str, useed: str, accounts: list[tuple[str, str]],
                  timeout: float) -> list[tuple[str, str]]:
    nc = await _sys_connect(url, utoken, useed, timeout)
    out = []
    try:
        for name, pub in accounts:
            try:
                r = await nc.request(f"$SYS.REQ.ACCOUNT.{pub}.CLAIMS.LOOKUP", b"", timeout=timeout)
            except Exception as e:
                raise AuthError(f'looking up account "{name}": {e or type(e).__name__} (is a full resolver '
                                "configured, and the account pushed?)") from None
            data = r.data.decode("utf-8", "replace").strip()
            if not data or data.startswith("{"):
                raise AuthError(f'looking up account "{name}": the server has no JWT for it ({data[:120]!r})')
            out.append((name, data))
    finally:
        await nc.close()
    return out


async def _sys_connect(url: str, utoken: str, useed: str, timeout: float) -> Any:
    import nats
    import nkeys
    kp = nkeys.from_seed(useed.encode())

    def sign(nonce: str) -> bytes:
        return base64.b64encode(kp.sign(nonce.encode()))

    seen: list[Exception] = []

    async def on_error(e: Exception) -> None:  # (nats-py's default prints a traceback; the cause is reported below)
        seen.append(e)

    try:
        return await nats.connect(url, user_jwt_cb=lambda: utoken.encode(), signature_cb=sign, error_cb=on_error,
                                  allow_reconnect=False, max_reconnect_attempts=1, connect_timeout=timeout + 1)
    except Exception as e:
        cause = f" ({seen[-1]})" if seen and str(seen[-1]) != str(e) else ""
        raise AuthError(f"could not connect to {url} as a system account user: {e}{cause}") from None


async def _push(url: str, utoken: str, useed: str, tokens: list[tuple[str, str]], timeout: float) -> list[str]:
    import asyncio
    nc = await _sys_connect(url, utoken, useed, timeout)
    failures: list[str] = []
    try:
        for name, token in tokens:
            answers: list[dict] = []
            inbox = nc.new_inbox()
            got = asyncio.Event()

            async def on_reply(msg: Any, answers: list[dict] = answers, got: asyncio.Event = got) -> None:
                try:
                    answers.append(json.loads(msg.data))
                except ValueError:
                    answers.append({"error": {"description": f"unreadable answer {msg.data[:100]!r}"}})
                got.set()

            sub = await nc.subscribe(inbox, cb=on_reply)
            await nc.publish("$SYS.REQ.CLAIMS.UPDATE", token.encode(), reply=inbox)
            await nc.flush()
            try:
                await asyncio.wait_for(got.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            await asyncio.sleep(min(0.25, timeout / 4))  # answers of the other servers
            await sub.unsubscribe()
            if not answers:
                failures.append(f'pushing account "{name}": no server answered on $SYS.REQ.CLAIMS.UPDATE '
                                "(is a full resolver configured?)")
                continue
            for a in answers:
                srv = (a.get("server") or {}).get("name", "")
                if a.get("error"):
                    err = a["error"]
                    failures.append(f'pushing account "{name}" to {srv}: '
                                    f'{err.get("description", err) if isinstance(err, dict) else err}')
                else:
                    msg = (a.get("data") or {}).get("message", "")
                    ok(f'pushed "{name}" to nats-server {srv}: {msg}')
    finally:
        await nc.close()
    return failures


def _resign_account(s: Store, op: str, acc: str, op_claims: dict, claims: dict, nats_s: dict) -> None:
    signer = s.signer_for([op_claims["sub"], *s._signing_keys(op_claims)])
    new = {k: v for k, v in claims.items() if k not in ("iss", "jti")}
    new["nats"] = nats_s
    new["iat"] = max(int(time.time()), int(claims.get("iat") or 0) + 1)
    write_file(s.acc_jwt_path(op, acc), J.encode(new, signer), 0o644)


def _subject_matches(pattern: str, subject: str) -> bool:
    """Does the (possibly wildcard) export ``pattern`` cover ``subject`` (itself possibly wildcard)?"""
    p, t = pattern.split("."), subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(t) > i
        if i >= len(t):
            return False
        if tok != "*" and tok != t[i]:
            return False
        if tok == "*" and t[i] == ">":
            return False
    return len(p) == len(t)


@edit_app.command("signing-key")
def edit_signing_key(account: str = typer.Option("", "--account", "-a"),
                     sk: str = typer.Option(..., "--sk", help="the signing key (public key, or the role of a scope)"),
                     role: str = typer.Option("", "--role", help="the scope's role"),
                     description: str = typer.Option("", "--description"),
                     allow_pub: list[str] = typer.Option([], "--allow-pub"),
                     allow_sub: list[str] = typer.Option([], "--allow-sub"),
                     allow_pubsub: list[str] = typer.Option([], "--allow-pubsub"),
                     deny_pub: list[str] = typer.Option([], "--deny-pub"),
                     deny_sub: list[str] = typer.Option([], "--deny-sub"),
                     deny_pubsub: list[str] = typer.Option([], "--deny-pubsub"),
                     bearer: bool = typer.Option(False, "--bearer")) -> None:
    """Make a signing key scoped (or change its scope): the users it signs get the scope's permissions,
    which may hold templates such as {{name()}} or {{tag(key)}} that the server fills in."""
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    nats_s = dict(claims["nats"])
    keys = list(nats_s.get("signing_keys") or [])
    idx = next((i for i, e in enumerate(keys) if (e if isinstance(e, str) else e.get("key")) == sk or
                (isinstance(e, dict) and e.get("role") == sk)), None)
    if idx is None:
        raise AuthError(f"--sk {sk}: not a signing key (or role) of account {acc}: add it with "
                        "`edit account --sk generate`")
    old = keys[idx]
    scope: dict[str, Any] = dict(old) if isinstance(old, dict) else {"kind": "user_scope", "key": old}
    template = dict(scope.get("template") or {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1})
    for sec, allow, deny in (("pub", _subjects(allow_pub) + _subjects(allow_pubsub),
                              _subjects(deny_pub) + _subjects(deny_pubsub)),
                             ("sub", _subjects(allow_sub) + _subjects(allow_pubsub),
                              _subjects(deny_sub) + _subjects(deny_pubsub))):
        p = dict(template.get(sec) or {})
        if allow:
            p["allow"] = sorted(set(p.get("allow") or []) | set(allow))
        if deny:
            p["deny"] = sorted(set(p.get("deny") or []) | set(deny))
        template[sec] = p
    if bearer:
        template["bearer_token"] = True
    scope["template"] = template
    if role:
        scope["role"] = role
    if description:
        scope["description"] = description
    keys[idx] = scope
    nats_s["signing_keys"] = keys
    _resign_account(s, op, acc, op_claims, claims, nats_s)
    ok(f'edited the scope of signing key "{scope["key"]}"')


@edit_app.command("user")
def edit_user(name: str = typer.Option(..., "--name", "-n"), account: str = typer.Option("", "--account", "-a"),
              allow_pub: list[str] = typer.Option([], "--allow-pub"),
              allow_sub: list[str] = typer.Option([], "--allow-sub"),
              allow_pubsub: list[str] = typer.Option([], "--allow-pubsub"),
              deny_pub: list[str] = typer.Option([], "--deny-pub"),
              deny_sub: list[str] = typer.Option([], "--deny-sub"),
              deny_pubsub: list[str] = typer.Option([], "--deny-pubsub"),
              rm: list[str] = typer.Option([], "--rm", help="remove these subjects from every permission list"),
              bearer: Optional[bool] = typer.Option(None, "--bearer/--no-bearer"),
              expiry: Optional[str] = typer.Option(None, "--expiry"),
              source_network: list[str] = typer.Option([], "--source-network"),
              rm_source_network: list[str] = typer.Option([], "--rm-source-network"),
              conn_type: list[str] = typer.Option([], "--conn-type"),
              rm_conn_type: list[str] = typer.Option([], "--rm-conn-type"),
              time_: list[str] = typer.Option([], "--time"),
              locale: Optional[str] = typer.Option(None, "--locale"),
              subs: Optional[str] = typer.Option(None, "--subs"), data: Optional[str] = typer.Option(None, "--data"),
              payload: Optional[str] = typer.Option(None, "--payload"),
              tag: list[str] = typer.Option([], "--tag"), rm_tag: list[str] = typer.Option([], "--rm-tag"),
              allow_pub_response: Optional[int] = typer.Option(None, "--allow-pub-response"),
              response_ttl: Optional[str] = typer.Option(None, "--response-ttl"),
              rm_response_perms: bool = typer.Option(False, "--rm-response-perms")) -> None:
    """Change a user's permissions, bearer flag or expiry; the JWT is signed again by the key that signed it."""
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, acc_claims = s.account_claims(op, acc)
    _, claims = s.user_claims(op, acc, name, acc_claims, check_revoked=False)
    changes = [allow_pub, allow_sub, allow_pubsub, deny_pub, deny_sub, deny_pubsub, rm, source_network,
               rm_source_network, conn_type, rm_conn_type, time_, [locale] if locale is not None else [],
               [subs] if subs is not None else [], [data] if data is not None else [],
               [payload] if payload is not None else [], tag, rm_tag,
               [1] if allow_pub_response is not None or response_ttl is not None or rm_response_perms else []]
    if not any(changes) and bearer is None and expiry is None:
        raise AuthError("nothing to edit: give permissions (--allow-pub, --deny-sub, --rm, ...), --bearer or --expiry")
    scope = next((e for e in (J.nats_section(acc_claims).get("signing_keys") or [])
                  if isinstance(e, dict) and e.get("key") == claims["iss"]), None)
    if scope is not None and (any(changes) or bearer is not None):
        raise AuthError(f"user {name} is signed by a scoped signing key: edit the scope (edit signing-key)")
    nats_s = dict(claims["nats"])
    remove = set(_subjects(rm))
    for sec, allow, deny in (("pub", _subjects(allow_pub) + _subjects(allow_pubsub),
                              _subjects(deny_pub) + _subjects(deny_pubsub)),
                             ("sub", _subjects(allow_sub) + _subjects(allow_pubsub),
                              _subjects(deny_sub) + _subjects(deny_pubsub))):
        perm = dict(nats_s.get(sec) or {})
        for verb, add in (("allow", allow), ("deny", deny)):
            cur = [x for x in (perm.get(verb) or []) if x not in remove]
            cur += [x for x in add if x not in cur]
            if cur:
                perm[verb] = cur
            else:
                perm.pop(verb, None)
        nats_s[sec] = perm
    if bearer is not None:
        if bearer:
            nats_s["bearer_token"] = True
        else:
            nats_s.pop("bearer_token", None)
    apply_user_limits(nats_s, source_network, conn_type, time_, locale, subs, data, payload,
                      rm_source_network, rm_conn_type, tag, rm_tag, allow_pub_response, response_ttl)
    if rm_response_perms:
        nats_s.pop("resp", None)
    new = {k: v for k, v in claims.items() if k not in ("iss", "jti")}
    if expiry is not None:
        exp = parse_expiry(expiry)
        if exp:
            new["exp"] = exp
        else:
            new.pop("exp", None)
    new["nats"] = nats_s
    new["iat"] = max(int(time.time()), int(claims.get("iat") or 0) + 1)
    signer = s.signer_for([claims["iss"]])
    token = J.encode(new, signer)
    write_file(s.user_jwt_path(op, acc, name), token, 0o644)
    cp = s.creds_path(op, acc, name)
    try:
        seed = s.seed_of(claims["sub"])
    except AuthError:
        seed = ""
    if seed:
        write_file(cp, J.format_creds(token, seed))
        ok(f"generated user creds file {cp}")
    ok(f'edited user "{name}"')


@add_app.command("mapping")
def add_mapping(account: str = typer.Option("", "--account", "-a"),
                from_: str = typer.Option(..., "--from", "-f", help="map from subject"),
                to: str = typer.Option(..., "--to", "-t", help="to subject"),
                weight: int = typer.Option(0, "--weight", help="weight [1-100] of this entry (default: 100)"),
                cluster: str = typer.Option("", "--cluster", help="the cluster this entry applies in")) -> None:
    """A subject mapping of the account (nats.mappings), as nsc add mapping."""
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    src = _subjects([from_])
    dst = _subjects([to])
    if len(src) != 1 or len(dst) != 1:
        raise AuthError("one --from and one --to subject")
    if weight < 0 or weight > 100:
        raise AuthError(f"--weight {weight}: 1 to 100")
    nats_s = dict(claims["nats"])
    mappings = {k: list(v) for k, v in (nats_s.get("mappings") or {}).items()}
    entries = [e for e in mappings.get(src[0], []) if not (e.get("subject") == dst[0] and
                                                            (e.get("cluster") or "") == cluster)]
    entry: dict[str, Any] = {"subject": dst[0], "weight": weight or 100}
    if cluster:
        entry["cluster"] = cluster
    entries.append(entry)
    total: dict[str, int] = {}
    for e in entries:
        total[e.get("cluster") or ""] = total.get(e.get("cluster") or "", 0) + int(e.get("weight") or 100)
    over = {c: w for c, w in total.items() if w > 100}
    if over:
        c, w = next(iter(over.items()))
        raise AuthError(f"the weights of the mappings of {src[0]}{' in cluster ' + c if c else ''} add up to {w}, "
                        "more than 100")
    mappings[src[0]] = entries
    nats_s["mappings"] = mappings
    _resign_account(s, op, acc, op_claims, claims, nats_s)
    ok(f'added mapping {src[0]} -> {dst[0]} (weight {entry["weight"]}{", cluster " + cluster if cluster else ""})')


delete_app = typer.Typer(help="Delete a mapping", no_args_is_help=True)
app.add_typer(delete_app, name="delete")


@delete_app.command("mapping")
def delete_mapping(account: str = typer.Option("", "--account", "-a"),
                   from_: str = typer.Option(..., "--from", "-f"),
                   to: str = typer.Option("", "--to", "-t", help="only this entry (default: every entry)")) -> None:
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    nats_s = dict(claims["nats"])
    mappings = {k: list(v) for k, v in (nats_s.get("mappings") or {}).items()}
    if from_ not in mappings:
        raise AuthError(f'account "{acc}" has no mapping of {from_}')
    kept = [e for e in mappings[from_] if to and e.get("subject") != to]
    if to and len(kept) == len(mappings[from_]):
        raise AuthError(f"no mapping {from_} -> {to}")
    if kept:
        mappings[from_] = kept
    else:
        del mappings[from_]
    if mappings:
        nats_s["mappings"] = mappings
    else:
        nats_s.pop("mappings", None)
    _resign_account(s, op, acc, op_claims, claims, nats_s)
    ok(f"deleted mapping {from_}{' -> ' + to if to else ''}")


@add_app.command("export")
def add_export(account: str = typer.Option("", "--account", "-a"),
               subject: str = typer.Option(..., "--subject", "-s", help="the exported subject"),
               name: str = typer.Option("", "--name", "-n", help="export name (default: the subject)"),
               service: bool = typer.Option(False, "--service", "-r", help="a service (default: a stream)"),
               response_type: str = typer.Option("Singleton", "--response-type",
                                                 help="Singleton, Stream or Chunked (services)"),
               account_token_position: int = typer.Option(0, "--account-token-position",
                                                          help="the subject token holding the importer's account"),
               private: bool = typer.Option(False, "--private", "-p",
                                            help="importers need an activation token (generate activation)")
               ) -> None:
    """Export a stream or service: public, or private (imported with an activation token)."""
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    subj = _subjects([subject])
    if len(subj) != 1:
        raise AuthError(f"--subject {subject!r}: one subject")
    if response_type not in ("Singleton", "Stream", "Chunked"):
        raise AuthError(f"--response-type {response_type!r}: Singleton, Stream or Chunked")
    kind = "service" if service else "stream"
    nats_s = dict(claims["nats"])
    exports = list(nats_s.get("exports") or [])
    for e in exports:
        if e.get("subject") == subj[0] and e.get("type") == kind:
            raise AuthError(f'account "{acc}" already exports {kind} {subj[0]}')
    e: dict[str, Any] = {"name": name or subj[0], "subject": subj[0], "type": kind}
    if service and response_type != "Singleton":
        e["response_type"] = response_type
    if account_token_position:
        e["account_token_position"] = account_token_position
    if private:
        e["token_req"] = True
    exports.append(e)
    nats_s["exports"] = exports
    _resign_account(s, op, acc, op_claims, claims, nats_s)
    ok(f'added {"private" if private else "public"} {kind} export "{e["name"]}"')


@add_app.command("import")
def add_import(account: str = typer.Option("", "--account", "-a"),
               src_account: str = typer.Option("", "--src-account", help="the exporting account (name or key)"),
               remote_subject: str = typer.Option("", "--remote-subject", help="the subject the account exports"),
               token: str = typer.Option("", "--token", "-u", help="an activation token file (private exports)"),
               local_subject: str = typer.Option("", "--local-subject", "-s", help="the subject here (default: "
                                                                                 "the remote one)"),
               name: str = typer.Option("", "--name", "-n"),
               service: bool = typer.Option(False, "--service", help="a service (default: a stream)")) -> None:
    """An import of another account's export: public, or private with its activation token (--token)."""
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    activation = ""
    if token:
        activation, act = _read_activation(token, claims["sub"])
        issuer = J.nats_section(act).get("issuer_account") or act["iss"]
        if src_account:
            given = src_account if J.is_public_key(src_account, "A") else \
                s.account_claims(op, s.account(op, src_account), op_claims)[1]["sub"]
            if given != issuer:
                raise AuthError(f"--src-account {src_account}: the token was issued by account {issuer}")
        src_account = issuer
        if remote_subject and remote_subject != J.nats_section(act).get("subject"):
            raise AuthError(f"--remote-subject {remote_subject}: the token is for {J.nats_section(act).get('subject')}")
        remote_subject = J.nats_section(act).get("subject", "")
        if (J.nats_section(act).get("kind") == "service") != service:
            raise AuthError(f"the token is for a {J.nats_section(act).get('kind')} import: "
                            + ("drop --service" if service else "add --service"))
    if not src_account or not remote_subject:
        raise AuthError("give --src-account and --remote-subject (or --token)")
    if J.is_public_key(src_account, "A"):
        src_pub = src_account
        src_claims = next((c for c in (s.account_claims(op, n, op_claims)[1] for n in s.accounts(op))
                           if c["sub"] == src_pub), None)
    else:
        src_claims = s.account_claims(op, s.account(op, src_account), op_claims)[1]
        src_pub = src_claims["sub"]
    if src_pub == claims["sub"]:
        raise AuthError("an account cannot import from itself")
    remote = _subjects([remote_subject])
    local = _subjects([local_subject]) if local_subject else []
    if len(remote) != 1 or len(local) > 1:
        raise AuthError("one --remote-subject and at most one --local-subject")
    kind = "service" if service else "stream"
    if src_claims is not None:  # (an account of another operator's store cannot be checked here)
        exports = J.nats_section(src_claims).get("exports") or []
        match = [e for e in exports if e.get("type") == kind and _subject_matches(e.get("subject", ""), remote[0])]
        if not match:
            raise AuthError(f"account {src_claims.get('name', src_pub)} has no {kind} export covering {remote[0]}")
        if not activation and all(e.get("token_req") for e in match):
            raise AuthError(f"the {kind} export covering {remote[0]} is private: import it with an activation "
                            "token (--token; the exporter makes it with `generate activation`)")
    nats_s = dict(claims["nats"])
    imports = list(nats_s.get("imports") or [])
    imp: dict[str, Any] = {"name": name or remote[0], "subject": remote[0], "account": src_pub, "type": kind}
    if activation:
        imp["token"] = activation
    if local and local[0] != remote[0]:
        imp["local_subject"] = local[0]
    for i in imports:
        if i.get("account") == src_pub and i.get("subject") == remote[0] and i.get("type") == kind:
            raise AuthError(f'account "{acc}" already imports {kind} {remote[0]} from {src_pub}')
    imports.append(imp)
    nats_s["imports"] = imports
    _resign_account(s, op, acc, op_claims, claims, nats_s)
    ok(f'added {kind} import "{imp["name"]}"')


revocations_app = typer.Typer(help="Revoke users of an account", no_args_is_help=True)
app.add_typer(revocations_app, name="revocations")


def _edit_revocations(account: str, change: Any) -> tuple[str, str]:
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, op_claims = s.operator_claims(op)
    _, claims = s.account_claims(op, acc, op_claims)
    signer = s.signer_for([op_claims["sub"], *s._signing_keys(op_claims)])
    nats_s = dict(claims["nats"])
    rev = dict(nats_s.get("revocations") or {})
    what = change(s, op, acc, claims, rev)
    if rev:
        nats_s["revocations"] = rev
    else:
        nats_s.pop("revocations", None)
    new = {k: v for k, v in claims.items() if k not in ("iss", "jti")}
    new["nats"] = nats_s
    new["iat"] = max(int(time.time()), int(claims.get("iat") or 0) + 1)
    write_file(s.acc_jwt_path(op, acc), J.encode(new, signer), 0o644)
    return acc, what


def _user_key(s: Store, op: str, acc: str, claims: dict, name: str, user_key: str) -> str:
    if bool(name) == bool(user_key):
        raise AuthError("give one of --name USER or --user-public-key U...")
    if user_key:
        if not J.is_public_key(user_key, "U"):
            raise AuthError(f"--user-public-key {user_key!r}: not a public user nkey")
        return user_key
    return s.user_claims(op, acc, name, claims, check_revoked=False)[1]["sub"]


@revocations_app.command("add-user")
def revoke_user(account: str = typer.Option("", "--account", "-a"), name: str = typer.Option("", "--name", "-n"),
                user_key: str = typer.Option("", "--user-public-key", "-u"),
                at: int = typer.Option(0, "--at", help="revoke the credentials issued up to this unix time "
                                                       "(default: now)")) -> None:
    def change(s: Store, op: str, acc: str, claims: dict, rev: dict) -> str:
        key = _user_key(s, op, acc, claims, name, user_key)
        rev[key] = at if at > 0 else int(time.time())
        return key
    acc, key = _edit_revocations(account, change)
    ok(f'revoked user "{name or key}" in account "{acc}"')


@revocations_app.command("delete-user")
def unrevoke_user(account: str = typer.Option("", "--account", "-a"), name: str = typer.Option("", "--name", "-n"),
                  user_key: str = typer.Option("", "--user-public-key", "-u")) -> None:
    def change(s: Store, op: str, acc: str, claims: dict, rev: dict) -> str:
        key = _user_key(s, op, acc, claims, name, user_key)
        if key not in rev:
            raise AuthError(f"user {name or key} is not revoked in account {acc}")
        del rev[key]
        return key
    acc, key = _edit_revocations(account, change)
    ok(f'deleted the revocation of user "{name or key}" in account "{acc}"')


@revocations_app.command("list-users")
def list_revoked(account: str = typer.Option("", "--account", "-a")) -> None:
    s = store()
    op = s.operator()
    acc = s.account(op, account or None)
    _, claims = s.account_claims(op, acc)
    rev = J.nats_section(claims).get("revocations") or {}
    names = {}
    for u in s.users(op, acc):
        try:
            names[J.decode_unverified(read_text(s.user_jwt_path(op, acc, u), "user JWT"))["sub"]] = u
        except (J.JwtError, KeyError):
            continue
    for key, when in sorted(rev.items()):
        print(f"{names.get(key, '')}\t{key}\t{_when(when)}")


@app.command("env")
def env() -> None:
    """The directories in use, the current operator and account."""
    s = store()
    print(f"config dir:   {s.dirs.config}")
    print(f"data dir:     {s.dirs.data}")
    print(f"keystore dir: {s.dirs.keys}")
    print(f"operator:     {s.cfg.get('operator', '')}")
    print(f"account:      {s.cfg.get('account', '')}")


def main(argv: list[str]) -> int:
    from typer import Abort, Exit
    from typer._click.exceptions import ClickException
    from typer.main import get_command

    from rillet.cli.common import CliError
    try:
        flags, rest = split_dir_flags(list(argv))
        STATE["dirs"] = resolve_dirs(flags)
        cmd = get_command(app)
        rv = cmd.main(args=rest, prog_name="rillet auth", standalone_mode=False)
    except AuthError as e:
        sys.stdout.flush()
        print(f"rillet: error: {e}", file=sys.stderr)
        return 1
    except CliError as e:  # (an AuthError raised inside rillet.cli.common.run comes back as a CliError)
        sys.stdout.flush()
        print(f"rillet: error: {e}", file=sys.stderr)
        return e.status
    except Exit as e:
        return e.exit_code
    except ClickException as e:
        e.show()
        return e.exit_code
    except Abort:
        return 130
    return rv if isinstance(rv, int) else 0
