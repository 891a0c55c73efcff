"""$SYS.REQ.USER.INFO compared with nats-server: configured users (passwords, permissions with queue
entries and allow_responses, no_auth_user) and operator-mode JWT users (nkey, user and account names,
permissions from the JWT, expiry)."""
from __future__ import annotations

import json
import time

import nats

from rillet import jwt as J
from tests.difftarget import both
from tests.test_operator import Operator, creds

CONF = """
listen: 127.0.0.1:{port}
system_account: SYS
accounts {
  SYS { users [{user: sys, password: sys}] }
  A { users [
    {user: a, password: a}
    {user: p, password: p, permissions {
       publish { allow: ["foo", "bar.>", "$SYS.REQ.USER.INFO"], deny: ["bar.x"] }
       subscribe { allow: ["_INBOX.>", "q qg"], deny: ["z"] } }}
    {user: r, password: r, permissions { publish: { deny: "x", allow: "$SYS.>" },
                                         allow_responses: {max: 3, expires: "5s"} }}
  ] }
}
no_auth_user: a
"""


async def _info(url: str, **kw) -> dict:
    nc = await nats.connect(url, allow_reconnect=False, **kw)
    try:
        m = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)
    finally:
        await nc.close()
    d = json.loads(m.data)
    assert set(d) == {"server", "data"}
    # nats-server lists permissions in its sublist's order (a Go map's): compare them as sets
    for side in d["data"].get("permissions", {}).values():
        for k, v in side.items():
            if isinstance(v, list):
                side[k] = sorted(v)
    return d["data"]


async def test_user_info_config_users_as_nats_server():
    async with both(CONF) as servers:
        for user in ("sys", "a", "p", "r", None):
            got = {}
            for name, srv in servers.items():
                url = srv.client_url.replace("nats://", f"nats://{user}:{user}@") if user else srv.client_url
                got[name] = await _info(url)
            assert got["rillet"] == got["go"], user
        # the permissions shown are the ones in force (queue entries, response defaults)
        assert got["rillet"]["user"] == "a" and "permissions" not in got["rillet"]


async def test_user_info_jwt_users_as_nats_server(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("ACC")
    exp = int(time.time()) + 3600
    users = [op.user(akp, name="alice", exp=exp),
             op.user(akp, name="bob", pub={"allow": ["$SYS.REQ.USER.INFO", "x.>"], "deny": ["x.y"]},
                     sub={"allow": ["_INBOX.>"]}, resp={"max": 2, "ttl": 3_000_000_000})]
    conf = op.config().replace("listen: 127.0.0.1:-1", "listen: 127.0.0.1:{port}")
    async with both(conf) as servers:
        for ukp, token in users:
            got = {}
            for name, srv in servers.items():
                d = await _info(srv.client_url, user_credentials=creds(tmp_path, ukp, token))
                exp_ns = d.pop("expires", None)
                if exp_ns is not None:  # whole seconds left: the two servers may be a second apart
                    assert exp_ns % 1_000_000_000 == 0 and 3590e9 < exp_ns <= 3600e9
                    d["expires"] = "set"
                got[name] = d
            assert got["rillet"] == got["go"]
            assert got["rillet"]["account_name"] == "ACC" and got["rillet"]["user_name"] in ("alice", "bob")
            assert got["rillet"]["user"] == J.public_key(ukp) and got["rillet"]["account"] == apub
