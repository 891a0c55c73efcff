"""``rillet auth describe`` and ``generate creds|activation|config``: showing JWTs as nsc does and writing
``.creds`` files, activation tokens and server configurations for the memory and full resolvers."""
from __future__ import annotations

import json
import os
import time
from typing import Any
import typer
from rillet import jwt as J
from rillet import nkey
from rillet.cli.auth.app import describe_app, generate_app, store
from rillet.cli.auth.entities import _subjects
from rillet.cli.auth.nscstore import AuthError, ok, parse_expiry, read_text, write_file
from rillet.subjects.validate import subject_is_subset_match


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
    op, acc, op_claims, claims = s.account_context(account)
    kind = "service" if service else "stream"
    subj = _subjects([subject])
    if len(subj) != 1:
        raise AuthError(f"--subject {subject!r}: one subject")
    exports = [e for e in (J.nats_section(claims).get("exports") or [])
               if e.get("type") == kind and e.get("token_req") and subject_is_subset_match(subj[0], e.get("subject", ""))]
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
