"""Users only in the system account (issue 19, point 1), compared with nats-server.

nats-server, when the only accounts of a configuration are the global and the system account and nothing
else asks for authentication (no ``authorization {}`` block, no ``no_auth_user``, not operator mode), admits
clients without credentials into ``$G`` as an invented user ``nats-XXXXXXXX`` (the configuration of the NATS
blog's multi-region walk-through relies on it). Each variant is run by both servers; for each kind of
connection (no credentials, the system user's, a wrong password, another user's) the outcome is compared:
refused, or admitted into which account as which user (``$SYS.REQ.USER.INFO``), and what INFO said.
"""
from __future__ import annotations

import asyncio
import json
import os
import tempfile

import nats
import pytest

from tests.difftarget import both, rillet_server

SYS_USER = "{user: admin, pass: s3cr3t}"
VARIANTS = {
    # the walk-through's shape: $SYS is the system account because of its name
    "sys_only": f"accounts {{ $SYS {{ users = [ {SYS_USER} ] }} }}",
    # the system account named otherwise, with system_account
    "named_system_account": f"system_account: SYSX\naccounts {{ SYSX {{ users = [ {SYS_USER} ] }} }}",
    # ... and without: SYSX is an ordinary account, $SYS the default one (three accounts)
    "named_not_system": f"accounts {{ SYSX {{ users = [ {SYS_USER} ] }} }}",
    # an explicit no_auth_user wins (here the system user itself)
    "no_auth_user": f"no_auth_user: admin\naccounts {{ $SYS {{ users = [ {SYS_USER} ] }} }}",
    # users in another account too, or just another account: authentication required
    "other_account_users": f"accounts {{ $SYS {{ users = [ {SYS_USER} ] }}\n A {{ users = [ {{user: a, pass: a}} ] }} }}",
    "other_account_empty": f"accounts {{ $SYS {{ users = [ {SYS_USER} ] }}\n A {{ }} }}",
    # an authorization block, even one without users, turns it off
    "auth_block": f"authorization {{ timeout: 2 }}\naccounts {{ $SYS {{ users = [ {SYS_USER} ] }} }}",
    "auth_block_users": ("authorization { users = [ {user: a, pass: a} ] }\n"
                         f"accounts {{ $SYS {{ users = [ {SYS_USER} ] }} }}"),
    # a system account without users: no credentials only (any credentials are refused)
    "sys_without_users": "accounts { $SYS { } }",
    # no_system_account does not stop a configured $SYS from being the system account
    "no_system_account": f"no_system_account: true\naccounts {{ $SYS {{ users = [ {SYS_USER} ] }} }}",
}
CREDS = {"none": None, "admin": ("admin", "s3cr3t"), "wrong": ("admin", "nope"), "a": ("a", "a"),
         "stranger": ("foo", "bar")}


async def _ignore(_e: Exception) -> None:
    pass


async def _outcome(url: str, creds: tuple[str, str] | None) -> str:
    kw = {} if creds is None else {"user": creds[0], "password": creds[1]}
    try:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=3, error_cb=_ignore, **kw)
    except Exception as e:
        return f"refused: {e}"
    try:
        info_auth = bool(nc._server_info.get("auth_required"))
        try:
            m = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)
        except nats.errors.NoRespondersError:
            return f"admitted, no user info; auth_required={info_auth}"
        d = json.loads(m.data)["data"]
        user = d.get("user", "")
        if user.startswith("nats-"):
            assert len(user) == 13, user
            user = "nats-*"
        return f"{d.get('account')} as {user}; auth_required={info_auth}"
    finally:
        await nc.close()


async def _outcomes(url: str) -> dict[str, str]:
    return {name: await _outcome(url, cr) for name, cr in CREDS.items()}


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_sys_only_users_as_nats_server(variant):
    conf = "listen: 127.0.0.1:{port}\n" + VARIANTS[variant] + "\n"
    async with both(conf) as servers:
        got = {name: await _outcomes(srv.client_url) for name, srv in servers.items()}
    assert got["rillet"] == got["go"]
    if variant in ("sys_only", "named_system_account", "no_system_account"):
        # the point of it: no credentials reach the global account, the system user its account
        assert got["rillet"]["none"].startswith("$G as nats-*")
        assert got["rillet"]["admin"].startswith("$SYS" if variant != "named_system_account" else "SYSX")
        assert got["rillet"]["wrong"].startswith("refused")


async def test_sys_only_users_visibility():
    """Two clients without credentials share $G; the system user publishing on the same subject is elsewhere."""
    conf = "listen: 127.0.0.1:{port}\n" + VARIANTS["sys_only"] + "\n"
    async with both(conf) as servers:
        for srv in servers.values():
            url = srv.client_url
            a = await nats.connect(url, allow_reconnect=False)
            b = await nats.connect(url, allow_reconnect=False)
            admin = await nats.connect(url, user="admin", password="s3cr3t", allow_reconnect=False)
            try:
                sub = await a.subscribe("walk.>")
                await a.flush()
                await admin.publish("walk.sys", b"from-sys")
                await admin.flush()
                await b.publish("walk.g", b"from-g")
                await b.flush()
                m = await sub.next_msg(timeout=2)
                assert (m.subject, m.data) == ("walk.g", b"from-g")
                with pytest.raises(nats.errors.TimeoutError):
                    await sub.next_msg(timeout=0.3)
            finally:
                for nc in (a, b, admin):
                    await nc.close()


async def test_sys_only_user_kept_over_reload():
    """A reload keeps the invented user (clients admitted as it stay); a reload that adds an account with
    users drops it, and the clients admitted without credentials are closed."""
    from rillet.config.flags import parse_command_line
    conf = "listen: 127.0.0.1:-1\n" + VARIANTS["sys_only"] + "\n"
    async with rillet_server(conf) as srv:
        nc = await nats.connect(srv.client_url, allow_reconnect=False, error_cb=_ignore)
        try:
            before = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data)["data"]["user"]
            fd, path = tempfile.mkstemp(suffix=".conf")
            with os.fdopen(fd, "w") as f:
                f.write(conf)
            srv.reload(parse_command_line(["-c", path]).options)
            after = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data)["data"]["user"]
            assert before == after and before.startswith("nats-")
            with open(path, "w") as f:
                f.write("listen: 127.0.0.1:-1\n" + VARIANTS["other_account_users"] + "\n")
            srv.reload(parse_command_line(["-c", path]).options)
            os.unlink(path)
            for _ in range(100):
                if nc.is_closed:
                    break
                await asyncio.sleep(0.02)
            assert nc.is_closed
            assert (await _outcome(srv.client_url, None)).startswith("refused")
        finally:
            await nc.close()
