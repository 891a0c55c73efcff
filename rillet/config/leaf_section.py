"""The ``leafnodes {}`` block of a config file: the leafnode listener (hub side) and the remotes (leaf side).

What nats-server accepts is accepted here with its defaults and errors; what Rillet's leaf nodes do not do
is refused with file:line:col and the reason, never parsed and ignored:

* ``verify_cert_and_check_known_urls`` in any leafnodes ``tls {}`` (nats-server's words), ``verify_and_map``
  in a remote's ``tls {}`` (nats-server ignores it there), HTTP ``proxy``, ``jetstream_cluster_migrate``;
* ``pinned_certs`` (both sides) and the listener's ``verify_and_map`` work (rillet.cluster.leaf_conn, leaf);
* remotes over ``ws://`` and ``wss://`` URLs work (``rillet.cluster.leaf_ws``), with ``ws_no_masking`` and
  ``ws_compress`` (permessage-deflate).

The parsed block becomes ``Options.leaf`` (a ``LeafNodeOptions``); ``Options.leafnodes`` keeps the raw map.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from rillet.gocompat.goquote import go_type
from rillet.gocompat.gotime import parse_go_duration

from .cluster_section import write_timeout_policy
from .typed import Field

DEFAULT_LEAF_PORT = 7422
DEFAULT_RECONNECT = 1.0  # seconds (nats-server's DEFAULT_LEAF_NODE_RECONNECT)
DEFAULT_AUTH_TIMEOUT = 0.0  # 0: the server's default authorization timeout


@dataclass
class LeafUser:
    username: str = ""
    password: str = ""
    account: str = ""
    proxy_required: bool = False  # admitted only through a trusted proxy (proxies { trusted })


@dataclass
class RemoteLeafOptions:
    urls: list[str] = field(default_factory=list)
    account: str = ""  # local account bound to the connection ("" = $G)
    credentials: str = ""
    nkey: str = ""  # a user seed
    deny_imports: list[str] = field(default_factory=list)
    deny_exports: list[str] = field(default_factory=list)
    no_randomize: bool = False
    first_info_timeout: float = 0.0
    dial_timeout: float = 0.0
    disabled: bool = False
    ignore_discovered_servers: bool = False
    ws_no_masking: bool = False
    ws_compress: bool = False  # permessage-deflate over ws:// and wss:// (when the hub agrees)
    hub: bool = False  # this server is the hub of the remote it dials
    compression: str = ""  # "" (unset: s2_auto), or a mode of rillet.compression (normalized)
    compression_rtts: tuple = ()  # s2_auto's rtt_thresholds (seconds; () = the default ones)
    tls: Any = None  # TLSConfig of the remote's tls {} (or a default one for a tls:// URL)
    local_isolation: bool = False  # isolate / isolate_leafnode_interest: no interest of other leafs sent to it
    request_isolation: bool = False  # asks the hub (CONNECT "isolate") not to send it other leafs' interest

    def name(self, redacted: bool = True) -> str:
        """nats-server's name of a remote (duplicates are errors): its URLs, local account and key."""
        import json
        acc = self.account or "$G"
        urls = []
        for u in self.urls:
            p = urlsplit(u)
            if redacted and p.password is not None:
                u = u.replace(f":{p.password}@", ":xxxxx@", 1)
            urls.append(json.dumps(u))
        opt = ""
        if self.credentials:
            opt = f", credentials={json.dumps(self.credentials)}"
        elif self.nkey:
            opt = ', nkey="[REDACTED]"' if redacted else f", nkey={json.dumps(self.nkey)}"
        return f"urls=[{' '.join(urls)}], account={json.dumps(acc)}{opt}"


@dataclass
class LeafNodeOptions:
    host: str = ""
    port: int = 0
    advertise: str = ""
    no_advertise: bool = False
    username: str = ""
    password: str = ""
    auth_timeout: float = DEFAULT_AUTH_TIMEOUT
    account: str = ""
    nkey: str = ""  # a user public key: the leaf signs the hub's nonce with its seed
    proxy_required: bool = False  # authorization { proxy_required }: the single user or nkey through a proxy
    users: list[LeafUser] = field(default_factory=list)
    remotes: list[RemoteLeafOptions] = field(default_factory=list)
    reconnect: float = DEFAULT_RECONNECT
    dial_timeout: float = 0.0
    write_deadline: float = 0.0
    tls: Any = None  # TLSConfig of the listener's tls {}
    min_version: str = ""  # leafs announcing an older version in CONNECT are refused
    compression: str = ""  # "" (unset: s2_auto), or a mode of rillet.compression (normalized)
    compression_rtts: tuple = ()  # s2_auto's rtt_thresholds (seconds; () = the default ones)
    isolate: bool = False  # isolate_leafnode_interest: no leaf connection hears another leaf's interest
    write_timeout: str = ""  # "" (default: retry), "close" or "retry"


_SEMVER = None


def semver(v: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a semantic version as nats-server reads it (a leading v allowed), or None."""
    global _SEMVER
    if _SEMVER is None:
        import re
        _SEMVER = re.compile(r"^v?([0-9]+)\.([0-9]+)\.([0-9]+)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
                             r"(?:\+[0-9A-Za-z-]+)?$")
    m = _SEMVER.match(v)
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def _refuse(f: Field, what: str) -> Any:
    return f.error(f"leafnodes {f.key}: {what} is not supported yet")


def _refuser(what: str) -> Callable[[Field], None]:
    def handler(f: Field) -> None:
        raise _refuse(f, what)
    return handler


def _url(f: Field, text: str) -> str:
    u = text.strip()
    try:
        p = urlsplit(u)
        p.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        raise f.error(f'error parsing leafnode url ["{u}"]') from None
    if not p.hostname:
        raise f.error(f'error parsing leafnode url ["{u}"]')
    return u


def _tls(b: Any, f: Field, client_side: bool) -> Any:
    """A leafnodes (or remote) tls {} block. ``pinned_certs``: checked on both sides (rillet.cluster.leaf_conn);
    ``verify_and_map`` on the listener: a leaf named by its certificate (rillet.cluster.leaf.authorize)."""
    where = "leafnodes remote" if client_side else "leafnodes"
    t = b.parse_tls(f, client_side=client_side, where=where)
    for e in f.entries():
        if e.name == "verify_cert_and_check_known_urls" and e.value is True:
            raise e.error("verify_cert_and_check_known_urls not supported in this context")  # (nats-server's)
        if e.name == "verify_and_map" and e.value is True and client_side:
            raise e.error("leafnodes remote tls: verify_and_map is not supported: a remote is the connecting "
                          "side, where no certificate is mapped to a user (nats-server parses it and ignores it); "
                          "set it in the leafnodes tls block of the accepting server")
    t.source = f.pos
    return t


def _compression(target: Any) -> Callable[[Field], None]:
    """The ``compression`` entry of the block or of a remote (s2: rillet.compression)."""
    def parse(f: Field) -> None:
        from rillet.compression import LEAF_ON
        from rillet.config.compression import parse_compression
        c = parse_compression(f, LEAF_ON)
        target.compression, target.compression_rtts = c.mode, c.rtt_thresholds
    return parse


def _subjects(b: Any, f: Field) -> list[str]:
    from rillet.subjects.validate import is_valid_subject
    out = f.as_str_list()
    for s in out:
        if not is_valid_subject(s):
            raise f.error(f'invalid subject "{s}"')
    return out


def parse_leafnodes(b: Any, f: Field) -> None:
    """Fill ``b.o.leaf`` (and keep the raw map in ``b.o.leafnodes``) from the leafnodes map ``f``."""
    ln = b.o.leaf = b.open_block(f, "Expected map to define a leafnode", "leafnodes", LeafNodeOptions())
    s = b.setter
    target = lambda: ln  # noqa: E731

    def listen(sub: Field) -> None:
        ln.host, ln.port = b.host_port(sub)

    def authorization(sub: Field) -> None:
        if not isinstance(sub.value, dict):
            raise sub.not_go_type("map[string]interface {}")

        def timeout(e: Field) -> None:
            if isinstance(e.value, bool) or not isinstance(e.value, (int, float, str)):
                raise e.error("error parsing leafnode authorization config, 'timeout' wrong type")
            if isinstance(e.value, str):
                try:
                    at = parse_go_duration(e.value)
                except ValueError as err:
                    raise e.error(f"error parsing leafnode authorization config, 'timeout' {err}") from None
            else:
                at = float(e.value)
            if at > 60:
                b.warnings.append(e.error(
                    f"timeout of {e.value} ({at:f} seconds) is high, consider keeping it under 60 seconds. "
                    "possibly caused by unquoted duration; use '1m' instead of 1m, for example"))
            ln.auth_timeout = at

        def users(e: Field) -> None:
            if not isinstance(e.value, list):
                raise e.error(f"Expected users field to be an array, got {e.value}")
            out = []
            for item in e.items():
                if not isinstance(item.value, dict):
                    raise item.error(f"Expected user entry to be a map/struct, got {item.value}")
                u = LeafUser()
                ut = {
                    "user": lambda x: setattr(u, "username", x.as_str()),
                    "username": lambda x: setattr(u, "username", x.as_str()),
                    "pass": lambda x: setattr(u, "password", x.as_str()),
                    "password": lambda x: setattr(u, "password", x.as_str()),
                    "account": lambda x: setattr(u, "account", x.as_str()),
                    "proxy_required": lambda x: setattr(u, "proxy_required", x.as_bool()),
                }
                b.each(item, ut, "leafnodes.authorization.users")
                out.append(u)
            ln.users = out

        def nkey(e: Field) -> None:
            from rillet import jwt
            v = e.as_str()
            if not jwt.is_public_key(v, "U"):
                raise e.error("Not a valid public nkey for leafnode authorization")
            ln.nkey = v

        table = {
            "user": s("username", "str", target=target), "username": s("username", "str", target=target),
            "pass": s("password", "str", target=target), "password": s("password", "str", target=target),
            "nkey": nkey,
            "timeout": timeout,
            "users": users,
            "account": s("account", "str", target=target),
            "proxy_required": s("proxy_required", "bool", target=target),
        }
        b.each(sub, table, "leafnodes.authorization")
        if ln.users:
            if ln.username:
                raise sub.error("can not have a single user/pass and a users array")
            if ln.nkey:
                raise sub.error("can not have a single nkey and a users array")
            seen: set[str] = set()
            for u in ln.users:
                if u.username in seen:
                    raise sub.error(f'duplicate user "{u.username}" detected in leafnode authorization')
                seen.add(u.username)

    def remotes(sub: Field) -> None:
        if not isinstance(sub.value, list):
            raise sub.error(f"Expected remotes field to be an array, got {go_type(sub.value)}")
        out: list[RemoteLeafOptions] = []
        names: set[str] = set()
        for item in sub.items():
            if not isinstance(item.value, dict):
                raise item.error(f"Expected remote leafnode entry to be a map/struct, got {item.value}")
            r = _remote(b, item)
            rn = r.name(redacted=False)
            if rn in names:
                raise item.error(f"duplicate remote {r.name()}")
            names.add(rn)
            out.append(r)
        ln.remotes = out

    def min_version(sub: Field) -> None:
        v = sub.as_str()
        parts = semver(v)
        if parts is None:
            raise sub.error("invalid leafnode's minimum version: invalid semver")
        if parts < (2, 8, 0):
            raise sub.error("the minimum version should be at least 2.8.0")
        ln.min_version = v

    def reconnect(sub: Field) -> None:
        ln.reconnect = sub.as_duration(b.warnings)

    table: dict[str, Callable[[Field], None]] = {
        **b.listener_keys(target, listen, authorization, lambda e: setattr(ln, "tls", _tls(b, e, False))),
        "remotes": remotes,
        "reconnect": reconnect, "reconnect_delay": reconnect, "reconnect_interval": reconnect,
        **b.typed_keys(target, dial_timeout="duration", no_advertise="bool", write_deadline="duration"),
        "leafnode_advertise": s("advertise", "str", target=target),
        "min_version": min_version, "minimum_version": min_version,
        "compression": _compression(ln),
        "isolate_leafnode_interest": s("isolate", "bool", target=target),
        "isolate": s("isolate", "bool", target=target),
        "write_timeout": lambda e: setattr(ln, "write_timeout", write_timeout_policy(e)),
    }
    b.each(f, table, "leafnodes")


def _remote(b: Any, f: Field) -> RemoteLeafOptions:
    r = RemoteLeafOptions()
    s = b.setter
    target = lambda: r  # noqa: E731

    def urls(e: Field) -> None:
        if isinstance(e.value, str):
            r.urls.append(_url(e, e.value))
            return
        if not isinstance(e.value, list):
            raise e.error(f"Expected remote leafnode url to be an array or string, got {e.value}")
        seen: set[str] = set()
        for item in e.items():
            text = item.as_str()
            if text in seen:
                b.warnings.append(item.error("Duplicate leafnode entry detected"))
                continue
            seen.add(text)
            r.urls.append(_url(item, text))

    def creds(e: Field) -> None:
        if r.nkey:
            raise e.error("Remote leafnode can not have both creds and nkey defined")
        import os
        r.credentials = os.path.expanduser(os.path.expandvars(e.as_str()))

    def nkey(e: Field) -> None:
        v = e.as_str()
        try:
            import nkeys
            kp = nkeys.from_seed(v.encode())
            ok = kp.public_key.decode().startswith("U")
        except Exception:  # noqa: BLE001 - any decoding failure is nats-server's "not a valid seed"
            ok = False
        if not ok:
            raise e.error(f'Remote leafnode nkey is not a valid seed: "{v}"')
        if r.credentials:
            raise e.error("Remote leafnode can not have both creds and nkey defined")
        r.nkey = v

    def deny(attr: str) -> Callable[[Field], None]:
        return lambda e: setattr(r, attr, _subjects(b, e))

    def ws_compress(e: Field) -> None:
        # permessage-deflate asked of the hub on ws:// and wss:// URLs (rillet.cluster.leaf_ws)
        r.ws_compress = e.as_bool()

    def hub(e: Field) -> None:
        r.hub = e.as_bool()

    comp_at: list[Field] = []

    def comp(e: Field) -> None:
        _compression(r)(e)
        comp_at.append(e)

    table: dict[str, Callable[[Field], None]] = {
        "url": urls, "urls": urls,
        "account": s("account", "str", target=target), "local": s("account", "str", target=target),
        "credentials": creds, "creds": creds,
        "nkey": nkey, "seed": nkey,
        "tls": lambda e: setattr(r, "tls", _tls(b, e, True)),
        "hub": hub,
        "deny_imports": deny("deny_imports"), "deny_import": deny("deny_imports"),
        "deny_exports": deny("deny_exports"), "deny_export": deny("deny_exports"),
        **b.typed_keys(target, no_randomize="bool", ws_no_masking="bool", first_info_timeout="duration",
                       dial_timeout="duration", disabled="bool", ignore_discovered_servers="bool"),
        "dont_randomize": s("no_randomize", "bool", target=target),
        "ws_compress": ws_compress, "ws_compression": ws_compress,
        "websocket_compress": ws_compress, "websocket_compression": ws_compress,
        "websocket_no_masking": s("ws_no_masking", "bool", target=target),
        "jetstream_cluster_migrate": _refuser("jetstream_cluster_migrate"),
        "js_cluster_migrate": _refuser("jetstream_cluster_migrate"),
        "isolate_leafnode_interest": s("local_isolation", "bool", target=target),
        "isolate": s("local_isolation", "bool", target=target),
        "request_isolation": s("request_isolation", "bool", target=target),
        "compression": comp,
        "proxy": _refuser("leaf connections through an HTTP proxy"),
    }
    b.each(f, table, "leafnodes.remotes")
    if r.tls is None and any(urlsplit(u).scheme.lower() == "tls" for u in r.urls):
        from rillet.config.options import TLSConfig
        r.tls = TLSConfig()  # tls:// : TLS with the system's roots
    kinds = {urlsplit(u).scheme.lower() in ("ws", "wss") for u in r.urls}
    if len(kinds) > 1:
        quoted = " ".join(f'"{u}"' for u in r.urls)
        raise f.error("remote leaf node configuration cannot have a mix of websocket and non-websocket urls: "
                      f'"[{quoted}]"')
    peer = getattr(r.tls, "ocsp_peer", None)
    if True in kinds and peer is not None and peer.verify:
        raise _refuse(Field("ocsp_peer", True, peer.source), "ocsp_peer on a leaf connection over websocket "
                      "(only leaf connections over TCP have their hub's certificate checked with OCSP)")
    if True in kinds and comp_at and r.compression.startswith("s2_"):
        # (nats-server wraps the websocket frames in s2; Rillet's leafs do not: rillet/cluster/README.md)
        raise _refuse(comp_at[0], "s2 compression of leaf connections over websocket")
    return r


def validate_leafnodes(o: Any) -> None:
    """The start-time checks of nats-server's validateLeafNode (ValueError: refuse to start)."""
    ln = o.leaf
    if ln is None:
        return
    if o.trusted_operators or o.trusted_keys:
        # operator mode: accounts are public account keys, resolved from the resolver when a leaf connects
        from rillet import jwt
        if ln.users:
            raise ValueError("operator mode does not allow specifying users in leafnode config")
        for r in ln.remotes:
            if not jwt.is_public_key(r.account, "A"):
                raise ValueError("operator mode requires account nkeys in remotes. Please add an `account` key to "
                                 "each remote in your `leafnodes` section, to assign it to an account. Each account "
                                 "value should be a 56 character public key, starting with the letter 'A'")
        if ln.port and ln.account and not jwt.is_public_key(ln.account, "A"):
            raise ValueError("operator mode and non account nkeys are incompatible")
        return
    names = {"$G", ""} | set(getattr(o, "accounts", {}) or {})
    if not o.system_account and not o.no_system_account:
        names.add("$SYS")
    elif o.system_account:
        names.add(o.system_account)

    def check(acc: str, what: str) -> None:
        if acc not in names:
            raise ValueError(f'cannot find local account "{acc}" specified in leafnode {what}')
    check(ln.account, "authorization")
    for u in ln.users:
        check(u.account, "authorization")
    for r in ln.remotes:
        check(r.account, "remote")
