"""``rillet auth push|pull``: account JWTs to and from a server's full resolver through the system
account (``$SYS.REQ.CLAIMS.UPDATE`` and the account lookup subjects)."""
from __future__ import annotations

import base64
import json
import time
from typing import Any
import typer
from rillet import jwt as J
from rillet.cli.auth.app import app, store
from rillet.cli.auth.nscstore import AuthError, Store, decode_jwt, new_key, ok, user_nats, write_file


def _resolver(account: str, all_accounts: bool, url: str) -> tuple[Any, str, dict, str]:
    """The store, operator and operator claims of a push or pull, and the resolver's URL (``url``, else
    the operator's account server URL); one of ``account`` and ``all_accounts`` must be given."""
    if bool(account) == all_accounts:
        raise AuthError("give one of --account NAME or --all")
    s = store()
    op = s.operator()
    _, op_claims = s.operator_claims(op)
    return s, op, op_claims, url or J.nats_section(op_claims).get("account_server_url", "")


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
    s, op, op_claims, url = _resolver(account, all_accounts, url)
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
    s, op, op_claims, url = _resolver(account, all_accounts, url)
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
