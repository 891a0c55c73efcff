"""``rillet auth add|edit operator|account|user`` and ``edit signing-key``: making and changing the JWTs
and their keys as nsc does."""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Optional
import typer
from rillet import jwt as J
from rillet import nkey
from rillet.cli.auth.app import add_app, edit_app, store
from rillet.cli.auth.nscstore import AuthError, NSC_FILE, STORE_VERSION, SYS_EXPORTS, Store, _check_name, account_nats, new_key, ok, parse_expiry, parse_number, user_nats, write_file


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
    token = _issue(s, kp, name, account_nats(), expiry, signer, "account")
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
    op, acc, op_claims, claims = s.account_context(name)
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
        _edit_tags(nats_s, tag, rm_tag)
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


# the permission options of add user, edit user and edit signing-key: (parameter, flag, help)
_PERMISSION_OPTIONS = (
    ("allow_pub", "--allow-pub", "publish permissions (comma separated)"),
    ("allow_sub", "--allow-sub", "subscribe permissions"),
    ("allow_pubsub", "--allow-pubsub", "publish and subscribe permissions"),
    ("deny_pub", "--deny-pub", "denied publish subjects"),
    ("deny_sub", "--deny-sub", "denied subscribe subjects"),
    ("deny_pubsub", "--deny-pubsub", "denied publish and subscribe subjects"),
)


class PermissionFlags:
    """The permission options a command was given (each a list of subjects, comma separated or repeated)."""

    def __init__(self, given: dict[str, list[str]]) -> None:
        self.given = given

    def any(self) -> bool:
        return any(self.given.values())

    def sections(self) -> tuple[tuple[str, list[str], list[str]], ...]:
        """("pub", allowed, denied) and ("sub", allowed, denied): the subjects checked, pubsub ones in both."""
        g = {k: _subjects(v) for k, v in self.given.items()}
        return (("pub", g["allow_pub"] + g["allow_pubsub"], g["deny_pub"] + g["deny_pubsub"]),
                ("sub", g["allow_sub"] + g["allow_pubsub"], g["deny_sub"] + g["deny_pubsub"]))


def with_permission_options(fn: Any) -> Any:
    """``fn`` as a command taking the permission options (_PERMISSION_OPTIONS) where it declares ``perms``; it
    gets them as a PermissionFlags."""
    import inspect
    kw_only = inspect.Parameter.KEYWORD_ONLY
    params = []
    for p in inspect.signature(fn, eval_str=True).parameters.values():
        if p.name == "perms":
            params += [inspect.Parameter(name, kw_only, annotation=list[str], default=typer.Option([], flag, help=h))
                       for name, flag, h in _PERMISSION_OPTIONS]
        else:
            params.append(p.replace(kind=kw_only))

    def cmd(**kw: Any) -> Any:
        perms = PermissionFlags({name: kw.pop(name) for name, _f, _h in _PERMISSION_OPTIONS})
        return fn(perms=perms, **kw)
    cmd.__name__, cmd.__qualname__, cmd.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    cmd.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    cmd.__annotations__ = {p.name: p.annotation for p in params}
    return cmd


CONN_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS")


def _issue(s: Store, kp: Any, name: str, nats_s: dict, expiry: str, signer: Any, kind: str) -> str:
    """A new ``kind`` JWT for the key pair ``kp`` (stored), signed by ``signer``."""
    claims: dict[str, Any] = {"name": name, "sub": kp.public_key(), "nats": nats_s}
    exp = parse_expiry(expiry)
    if exp:
        claims["exp"] = exp
    token = J.encode(claims, signer)
    s.store_key(kp)
    ok(f'generated and stored {kind} key "{kp.public_key()}"')
    return token


def _edit_tags(nats_s: dict, add: list[str], rm: list[str]) -> None:
    """The claims' ``tags`` without ``rm`` and with ``add`` (lower case, each once; no key when empty)."""
    tags = [t for t in (nats_s.get("tags") or []) if t not in {x.lower() for x in _list(rm)}]
    tags += [t.lower() for t in _list(add) if t.lower() not in tags]
    if tags:
        nats_s["tags"] = tags
    else:
        nats_s.pop("tags", None)


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
        _edit_tags(nats_s, tags, rm_tags)
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
@with_permission_options
def add_user(name: str = typer.Option(..., "--name", "-n", help="user name"),
             account: str = typer.Option("", "--account", "-a", help="account name"),
             perms: PermissionFlags = None,  # type: ignore[assignment]  # (with_permission_options)
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
    if scoped is not None and (perms.any() or bearer or limits_given):
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
    for sec, allow, deny in perms.sections():
        if allow:
            nats_s[sec]["allow"] = allow
        if deny:
            nats_s[sec]["deny"] = deny
    if bearer:
        nats_s["bearer_token"] = True
    if scoped is None:
        apply_user_limits(nats_s, source_network, conn_type, time_, locale, subs, data, payload, tags=tag,
                          allow_pub_response=allow_pub_response, response_ttl=response_ttl)
    token = _issue(s, kp, name, nats_s, expiry, signer, "user")
    write_file(s.user_jwt_path(op, acc, name), token, 0o644)
    cp = s.creds_path(op, acc, name)
    write_file(cp, J.format_creds(token, kp.seed()))
    ok(f"generated user creds file {cp}")
    ok(f'added user "{name}" to account "{acc}"')


# -- describe


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


def _resign_account(s: Store, op: str, acc: str, op_claims: dict, claims: dict, nats_s: dict) -> None:
    signer = s.signer_for([op_claims["sub"], *s._signing_keys(op_claims)])
    new = {k: v for k, v in claims.items() if k not in ("iss", "jti")}
    new["nats"] = nats_s
    new["iat"] = max(int(time.time()), int(claims.get("iat") or 0) + 1)
    write_file(s.acc_jwt_path(op, acc), J.encode(new, signer), 0o644)


@edit_app.command("signing-key")
@with_permission_options
def edit_signing_key(account: str = typer.Option("", "--account", "-a"),
                     sk: str = typer.Option(..., "--sk", help="the signing key (public key, or the role of a scope)"),
                     role: str = typer.Option("", "--role", help="the scope's role"),
                     description: str = typer.Option("", "--description"),
                     perms: PermissionFlags = None,  # type: ignore[assignment]  # (with_permission_options)
                     bearer: bool = typer.Option(False, "--bearer")) -> None:
    """Make a signing key scoped (or change its scope): the users it signs get the scope's permissions,
    which may hold templates such as {{name()}} or {{tag(key)}} that the server fills in."""
    s = store()
    op, acc, op_claims, claims = s.account_context(account)
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
    for sec, allow, deny in perms.sections():
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
@with_permission_options
def edit_user(name: str = typer.Option(..., "--name", "-n"), account: str = typer.Option("", "--account", "-a"),
              perms: PermissionFlags = None,  # type: ignore[assignment]  # (with_permission_options)
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
    changes = [*perms.given.values(), rm, source_network,
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
    for sec, allow, deny in perms.sections():
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
