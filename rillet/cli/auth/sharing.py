"""``rillet auth add|delete mapping``, ``add export|import`` and ``revocations``: what an account shares,
maps and revokes."""
from __future__ import annotations

import time
from typing import Any
import typer
from rillet import jwt as J
from rillet.cli.auth.app import add_app, delete_app, revocations_app, store
from rillet.cli.auth.describe import _read_activation, _when
from rillet.cli.auth.entities import _resign_account, _subjects
from rillet.cli.auth.nscstore import AuthError, Store, ok, read_text, write_file
from rillet.subjects.validate import subject_is_subset_match


@add_app.command("mapping")
def add_mapping(account: str = typer.Option("", "--account", "-a"),
                from_: str = typer.Option(..., "--from", "-f", help="map from subject"),
                to: str = typer.Option(..., "--to", "-t", help="to subject"),
                weight: int = typer.Option(0, "--weight", help="weight [1-100] of this entry (default: 100)"),
                cluster: str = typer.Option("", "--cluster", help="the cluster this entry applies in")) -> None:
    """A subject mapping of the account (nats.mappings), as nsc add mapping."""
    s = store()
    op, acc, op_claims, claims = s.account_context(account)
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


@delete_app.command("mapping")
def delete_mapping(account: str = typer.Option("", "--account", "-a"),
                   from_: str = typer.Option(..., "--from", "-f"),
                   to: str = typer.Option("", "--to", "-t", help="only this entry (default: every entry)")) -> None:
    s = store()
    op, acc, op_claims, claims = s.account_context(account)
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
    op, acc, op_claims, claims = s.account_context(account)
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
    op, acc, op_claims, claims = s.account_context(account)
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
        match = [e for e in exports if e.get("type") == kind and subject_is_subset_match(remote[0], e.get("subject", ""))]
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


def _edit_revocations(account: str, change: Any) -> tuple[str, str]:
    s = store()
    op, acc, op_claims, claims = s.account_context(account)
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
