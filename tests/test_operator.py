"""Operator mode: user and account JWTs (tests build the operator, accounts and users themselves).

RILLET_TEST_TARGET=nats-server runs the config-driven tests against the Go server.
"""
import asyncio
import json
import time

import nats
import pytest
from nats.errors import Error as NatsError

from rillet import jwt as J
from tests.helpers import RawClient, free_port, log_text, serve_config


class Operator:
    def __init__(self, system: bool = True) -> None:
        self.kp = J.new_keypair("O")
        self.pub = J.public_key(self.kp)
        self.accounts: dict[str, tuple] = {}
        self.sys = self.account("SYS") if system else None

    def jwt(self, **nats_fields) -> str:
        n = {"type": "operator"}
        if self.sys:
            n["system_account"] = self.sys[1]
        n.update(nats_fields)
        return J.encode({"sub": self.pub, "name": "OP", "nats": n}, self.kp)

    def account(self, name: str, kp=None, iat=None, **n) -> tuple:
        kp = kp or J.new_keypair("A")
        pub = J.public_key(kp)
        n.setdefault("limits", {"subs": -1, "conn": -1, "payload": -1, "data": -1, "imports": -1,
                                "exports": -1, "wildcards": True})
        claims = {"sub": pub, "name": name, "nats": {"type": "account", **n}}
        if iat:
            claims["iat"] = iat
        token = J.encode(claims, self.kp)
        self.accounts[name] = (kp, pub, token)
        return kp, pub, token

    @staticmethod
    def user(acc_kp, name="u", signer=None, exp=None, scoped=False, nbf=None, **n) -> tuple:
        ukp = J.new_keypair("U")
        # like nsc, spell out "no limit": a v2 user JWT without them allows nothing (as in nats-server);
        # a user of a scoped signing key has neither permissions nor limits of its own
        lim = {} if scoped else {"subs": -1, "data": -1, "payload": -1}
        claims = {"sub": J.public_key(ukp), "name": name, "nats": {"type": "user", **lim, **n}}
        if signer is not None:
            claims["nats"]["issuer_account"] = J.public_key(acc_kp)
        if exp is not None:
            claims["exp"] = exp
        if nbf is not None:
            claims["nbf"] = nbf
        return ukp, J.encode(claims, signer or acc_kp)

    def config(self, extra: str = "", resolver: str = "resolver: MEMORY", preload=True) -> str:
        self.jwt_token = self.jwt()
        lines = ["listen: 127.0.0.1:-1", f"operator: {self.jwt_token}", resolver]
        if self.sys:
            lines.append(f"system_account: {self.sys[1]}")
        if preload:
            lines.append("resolver_preload {")
            for _kp, pub, token in self.accounts.values():
                lines.append(f'  {pub}: "{token}"')
            lines.append("}")
        lines.append(extra)
        return "\n".join(lines) + "\n"


def has(errs, text: str) -> bool:
    """nats-py lower-cases some server errors (permissions violations): compare without case."""
    return any(text.lower() in e.lower() for e in errs)


def creds(tmp_path, ukp, token, name="u") -> str:
    p = tmp_path / f"{name}-{J.public_key(ukp)[:8]}.creds"
    p.write_text(J.format_creds(token, ukp.seed))
    return str(p)


async def connect(srv, tmp_path, ukp, token, **kw):
    return await nats.connect(srv.client_url, user_credentials=creds(tmp_path, ukp, token),
                              allow_reconnect=False, **kw)


async def refused(srv, tmp_path, ukp, token) -> str:
    with pytest.raises(NatsError) as ei:
        nc = await connect(srv, tmp_path, ukp, token, max_reconnect_attempts=0)
        await nc.close()
    return str(ei.value)


async def test_connect_isolation_and_bad_credentials(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A")
    bkp, bpub, _ = op.account("B")
    async with serve_config(op.config()) as srv:
        ua = await connect(srv, tmp_path, *op.user(akp))
        ua2 = await connect(srv, tmp_path, *op.user(akp))
        ub = await connect(srv, tmp_path, *op.user(bkp))
        sa = await ua2.subscribe("x")
        sb = await ub.subscribe("x")
        await ua2.flush()
        await ub.flush()
        await ua.publish("x", b"hi")
        m = await sa.next_msg(timeout=1)
        assert m.data == b"hi"
        with pytest.raises(nats.errors.TimeoutError):
            await sb.next_msg(timeout=0.2)
        for nc in (ua, ua2, ub):
            await nc.close()

        # a user signed by an unknown account, a signature by the wrong key, no JWT at all
        other = J.new_keypair("A")
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(other))
        ukp, token = op.user(akp)
        assert "Authorization Violation" in await refused(srv, tmp_path, J.new_keypair("U"), token)
        rc = await RawClient.open(srv, connect=False)
        assert rc.info["nonce"] and rc.info["auth_required"] is True
        rc.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert b"-ERR 'Authorization Violation'" in await rc.read_until(b"Violation'")
    if hasattr(srv, "_test_log"):
        assert "authentication error" in log_text(srv)


async def test_operator_signing_keys_and_strict_usage(tmp_path):
    op = Operator()
    osk = J.new_keypair("O")
    akp = J.new_keypair("A")
    ask = J.new_keypair("A")
    apub = J.public_key(akp)
    lim = {"subs": -1, "conn": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True}
    by_sk = J.encode({"sub": apub, "name": "A", "nats": {"type": "account", "limits": lim,
                                                         "signing_keys": [J.public_key(ask)]}}, osk)
    bkp = J.new_keypair("A")
    by_op = J.encode({"sub": J.public_key(bkp), "name": "B", "nats": {"type": "account", "limits": lim}}, op.kp)
    sys_by_sk = J.encode({"sub": op.sys[1], "name": "SYS", "nats": {"type": "account", "limits": lim}}, osk)
    for strict in (False, True):
        n = {"type": "operator", "system_account": op.sys[1], "signing_keys": [J.public_key(osk)]}
        if strict:
            n["strict_signing_key_usage"] = True
        opjwt = J.encode({"sub": op.pub, "name": "OP", "nats": n}, op.kp)
        conf = (f"listen: 127.0.0.1:-1\noperator: {opjwt}\nsystem_account: {op.sys[1]}\nresolver: MEMORY\n"
                f'resolver_preload {{\n {apub}: "{by_sk}"\n {J.public_key(bkp)}: "{by_op}"\n'
                f' {op.sys[1]}: "{sys_by_sk}"\n}}\n')
        async with serve_config(conf) as srv:
            nc = await connect(srv, tmp_path, *op.user(akp, signer=ask))
            await nc.close()
            if strict:
                # the operator's own key no longer signs accounts, nor an account's own key its users
                assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(bkp))
                assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(akp))
            else:
                for kp in (bkp, akp):
                    nc = await connect(srv, tmp_path, *op.user(kp))
                    await nc.close()


async def test_user_permissions_and_response_permission(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A")
    async with serve_config(op.config()) as srv:
        errs = []

        async def ecb(e):
            errs.append(str(e))
        lim = await connect(srv, tmp_path, *op.user(akp, pub={"allow": ["ok.>"], "deny": ["ok.no"]},
                                                     sub={"deny": ["secret"]}), error_cb=ecb)
        full = await connect(srv, tmp_path, *op.user(akp))
        s_ok = await full.subscribe("ok.>")
        await full.flush()
        await lim.publish("ok.yes", b"1")
        await lim.publish("ok.no", b"2")
        await lim.publish("other", b"3")
        await lim.subscribe("secret")
        await lim.flush()
        m = await s_ok.next_msg(timeout=1)
        assert m.subject == "ok.yes"
        with pytest.raises(nats.errors.TimeoutError):
            await s_ok.next_msg(timeout=0.2)
        await asyncio.sleep(0.1)
        assert has(errs, 'Permissions Violation for Publish to "ok.no"')
        assert has(errs, 'Permissions Violation for Publish to "other"')
        assert has(errs, 'Permissions Violation for Subscription to "secret"')

        # allow_responses: a service that may only publish replies
        svc = await connect(srv, tmp_path, *op.user(akp, pub={}, sub={"allow": ["svc"]},
                                                     resp={"max": 1, "ttl": 0}))

        async def handler(msg):
            await msg.respond(b"pong")
        await svc.subscribe("svc", cb=handler)
        await svc.flush()
        r = await full.request("svc", b"ping", timeout=1)
        assert r.data == b"pong"
        for nc in (lim, full, svc):
            await nc.close()


async def test_account_default_permissions(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A", default_permissions={"pub": {"deny": ["secret.>"]}})
    async with serve_config(op.config()) as srv:
        errs = []

        async def ecb(e):
            errs.append(str(e))
        plain = await connect(srv, tmp_path, *op.user(akp), error_cb=ecb)  # no permissions of its own
        own = await connect(srv, tmp_path, *op.user(akp, pub={"allow": [">"]}))  # its own replace the default
        sub = await own.subscribe("secret.>")
        await own.flush()
        await plain.publish("secret.a", b"1")
        await own.publish("secret.b", b"2")
        await plain.flush()
        await own.flush()
        assert (await sub.next_msg(timeout=1)).subject == "secret.b"
        with pytest.raises(nats.errors.TimeoutError):
            await sub.next_msg(timeout=0.2)
        assert has(errs, 'Permissions Violation for Publish to "secret.a"')
        # new default permissions apply to connected users without their own
        sysc = await _sys_client(op, srv, tmp_path)
        _, apub, tok = op.account("A", kp=akp, iat=int(time.time()) + 1,
                                  default_permissions={"pub": {"deny": ["other.>"]}})
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        await plain.publish("secret.c", b"3")
        await plain.publish("other.d", b"4")
        await plain.flush()
        assert (await sub.next_msg(timeout=1)).subject == "secret.c"
        await asyncio.sleep(0.1)
        assert has(errs, 'Permissions Violation for Publish to "other.d"')
        await sysc.close()
        await plain.close()
        await own.close()


async def test_default_permissions_update_removes_disallowed_subscriptions(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A", default_permissions={"sub": {"allow": [">"]}})
    async with serve_config(op.config()) as srv:
        errs = []

        async def ecb(e):
            errs.append(str(e))
        plain = await connect(srv, tmp_path, *op.user(akp), error_cb=ecb)
        news = await plain.subscribe("news.x")
        queued = await plain.subscribe("jobs.x", queue="w")
        kept = await plain.subscribe("ok.x")
        await plain.flush()
        sysc = await _sys_client(op, srv, tmp_path)
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1,
                               default_permissions={"sub": {"deny": ["news.>", "jobs.>"]}})
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        pub = await connect(srv, tmp_path, *op.user(akp, pub={"allow": [">"]}))
        for s in ("news.x", "jobs.x", "ok.x"):
            await pub.publish(s, b"m")
        await pub.flush()
        assert (await kept.next_msg(timeout=1)).data == b"m"
        await asyncio.sleep(0.2)
        for s in (news, queued):
            with pytest.raises(nats.errors.TimeoutError):
                await s.next_msg(timeout=0.1)
        assert has(errs, f'Permissions Violation for Subscription to "news.x" (sid "{news._id}")')
        assert has(errs, f'Permissions Violation for Subscription to "jobs.x" using queue "w" (sid "{queued._id}")')
        assert plain.is_connected
        for nc in (pub, sysc, plain):
            await nc.close()


async def test_expiry_rejected_and_disconnects(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A")
    async with serve_config(op.config()) as srv:
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(akp, exp=int(time.time()) - 5))
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(akp, nbf=int(time.time()) + 60))
        errs = []
        closed = asyncio.Event()

        async def ecb(e):
            errs.append(str(e))

        async def ccb():
            closed.set()
        nc = await connect(srv, tmp_path, *op.user(akp, exp=int(time.time()) + 2), error_cb=ecb,
                           closed_cb=ccb)
        await asyncio.wait_for(closed.wait(), 4)
        assert "user authentication expired" in str(nc.last_error).lower()


async def test_account_expiry_disconnects(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A")
    async with serve_config(op.config()) as srv:
        sysc = await _sys_client(op, srv, tmp_path)
        closed = asyncio.Event()

        async def ccb():
            closed.set()
        nc = await connect(srv, tmp_path, *op.user(akp), closed_cb=ccb)
        # a newer account JWT that expires in a second
        claims = {"sub": apub, "name": "A", "iat": int(time.time()) + 1, "exp": int(time.time()) + 2,
                  "nats": {"type": "account", "limits": {"conn": -1, "subs": -1, "payload": -1}}}
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", J.encode(claims, op.kp).encode(),
                               timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        await asyncio.wait_for(closed.wait(), 4)
        assert "account authentication expired" in str(nc.last_error).lower()
        # as in nats-server, the expired account is refreshed from the resolver: the preloaded JWT
        nc = await connect(srv, tmp_path, *op.user(akp))
        await nc.close()
        await sysc.close()


async def test_connz_shows_jwt_user(tmp_path):
    op = Operator()
    sk = J.new_keypair("A")
    akp, apub, _ = op.account("A", signing_keys=[J.public_key(sk)])
    port = free_port()
    async with serve_config(op.config(f"http: 127.0.0.1:{port}")) as srv:
        ukp, token = op.user(akp, signer=sk, tags=["team:x"])
        nc = await connect(srv, tmp_path, ukp, token)
        import urllib.request
        loop = asyncio.get_running_loop()
        raw = await loop.run_in_executor(None, lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{port}/connz?auth=true", timeout=2).read())
        conns = [c for c in json.loads(raw)["connections"] if c.get("account") == apub]
        assert len(conns) == 1
        ci = conns[0]
        assert ci["authorized_user"] == J.public_key(ukp)
        assert ci["jwt"] == token
        assert ci["issuer_key"] == J.public_key(sk)
        assert ci["name_tag"] == "A"
        assert ci["tags"] == ["team:x"]
        raw = await loop.run_in_executor(None, lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{port}/accountz?acc={apub}", timeout=2).read())
        ad = json.loads(raw)["account_detail"]
        assert ad["name_tag"] == "A" and ad["issuer_key"] == op.pub and ad["jwt"] == op.accounts["A"][2]
        assert ad["decoded_jwt"]["sub"] == apub and ad["expired"] is False
        raw = await loop.run_in_executor(None, lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{port}/varz", timeout=2).read())
        v = json.loads(raw)
        assert v["trusted_operators_jwt"] == [op.jwt_token] and v["system_account"] == op.sys[1]
        assert v["trusted_operators_claim"][0]["sub"] == op.pub
        await nc.close()


async def test_pinned_accounts(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A")
    bkp, _, _ = op.account("B")
    async with serve_config(op.config(f"resolver_pinned_accounts: [{apub}]")) as srv:
        nc = await connect(srv, tmp_path, *op.user(akp))
        await nc.close()
        nc = await _sys_client(op, srv, tmp_path)  # the system account is always allowed
        await nc.close()
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(bkp))


async def test_bearer_tokens(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A")
    bkp, _, _ = op.account("B", limits={"disallow_bearer": True, "conn": -1, "subs": -1, "payload": -1})
    async with serve_config(op.config()) as srv:
        _ukp, token = op.user(akp, bearer_token=True)
        # no signature at all: a bearer token is enough
        rc = await RawClient.open(srv, connect=False)
        rc.send(f'CONNECT {{"verbose":false,"jwt":"{token}"}}\r\nPING\r\n'.encode())
        assert (await rc.read_until(b"PONG\r\n")).endswith(b"PONG\r\n")
        # not a bearer token: the nonce signature is required
        _ukp2, token2 = op.user(akp)
        rc2 = await RawClient.open(srv, connect=False)
        rc2.send(f'CONNECT {{"verbose":false,"jwt":"{token2}"}}\r\nPING\r\n'.encode())
        assert b"Authorization Violation" in await rc2.read_until(b"Violation'")
        # an account refusing bearer tokens
        _ukp3, token3 = op.user(bkp, bearer_token=True)
        rc3 = await RawClient.open(srv, connect=False)
        rc3.send(f'CONNECT {{"verbose":false,"jwt":"{token3}"}}\r\nPING\r\n'.encode())
        assert b"Authorization Violation" in await rc3.read_until(b"Violation'")


async def test_account_and_user_limits(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A", limits={"conn": 1, "subs": 2, "payload": 100})
    bkp, _, _ = op.account("B")
    async with serve_config(op.config()) as srv:
        nc = await connect(srv, tmp_path, *op.user(akp))
        assert "maximum account active connections exceeded" in await refused(srv, tmp_path, *op.user(akp))
        await nc.close()
        # the account's subscription limit (per connection, as in nats-server), then the user's own
        for (ukp, token), n in ((op.user(akp), 2), (op.user(bkp, subs=1), 1)):
            rc = await RawClient.open(srv, connect=False)
            sig = J._b64enc(ukp.sign(rc.info["nonce"].encode()))
            rc.send(f'CONNECT {{"verbose":false,"jwt":"{token}","sig":"{sig}"}}\r\n'.encode())
            for i in range(n + 1):
                rc.send(f"SUB s{i} {i}\r\n".encode())
            rc.send(b"PING\r\n")
            out = await rc.read_until(b"PONG\r\n")
            assert out.count(b"-ERR 'maximum subscriptions exceeded'") == 1, out


async def test_payload_limit_raw(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A", limits={"conn": -1, "subs": -1, "payload": 8})
    async with serve_config(op.config()) as srv:
        ukp, token = op.user(akp)
        rc = await RawClient.open(srv, connect=False)
        sig = J._b64enc(ukp.sign(rc.info["nonce"].encode()))
        rc.send(f'CONNECT {{"verbose":false,"jwt":"{token}","sig":"{sig}"}}\r\nPUB x 4\r\n1234\r\nPING\r\n'
                .encode())
        assert (await rc.read_until(b"PONG\r\n")) == b"PONG\r\n"
        rc.send(b"PUB x 10\r\n0123456789\r\n")
        assert b"-ERR 'Maximum Payload Violation'" in await rc.read_until(b"Violation'")


async def test_signing_keys_and_scoped_templates(tmp_path):
    op = Operator()
    sk = J.new_keypair("A")
    scoped = J.new_keypair("A")
    akp, apub, _ = op.account("A", signing_keys=[J.public_key(sk), {
        "kind": "user_scope", "key": J.public_key(scoped), "role": "r",
        "template": {"pub": {"allow": ["{{name()}}.>"]}, "sub": {"allow": ["_INBOX.>", "{{name()}}.>"]},
                     "subs": -1, "payload": -1, "data": -1}}])
    async with serve_config(op.config()) as srv:
        nc = await connect(srv, tmp_path, *op.user(akp, signer=sk))
        await nc.publish("any", b"x")
        await nc.flush()
        await nc.close()
        # a key the account does not list
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(akp, signer=J.new_keypair("A")))
        # a scoped key: the template's permissions apply, whatever the user JWT says
        errs = []

        async def ecb(e):
            errs.append(str(e))
        assert "Authorization Violation" in await refused(
            srv, tmp_path, *op.user(akp, name="bob", signer=scoped, scoped=True, pub={"allow": [">"]}))
        bob = await connect(srv, tmp_path, *op.user(akp, name="bob", signer=scoped, scoped=True), error_cb=ecb)
        await bob.publish("bob.x", b"1")
        await bob.publish("alice.x", b"1")
        await bob.flush()
        await asyncio.sleep(0.1)
        assert has(errs, 'Permissions Violation for Publish to "alice.x"')
        assert not has(errs, '"bob.x"')
        await bob.close()


async def test_removed_signing_key_disconnects(tmp_path):
    op = Operator()
    sk = J.new_keypair("A")
    akp, apub, _ = op.account("A", signing_keys=[J.public_key(sk)])
    async with serve_config(op.config()) as srv:
        sysc = await _sys_client(op, srv, tmp_path)
        closed = asyncio.Event()

        async def ccb():
            closed.set()
        by_sk = await connect(srv, tmp_path, *op.user(akp, signer=sk), closed_cb=ccb)
        by_acc = await connect(srv, tmp_path, *op.user(akp))
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1)
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        await asyncio.wait_for(closed.wait(), 2)
        await by_acc.flush()
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(akp, signer=sk))
        for nc in (by_acc, sysc):
            await nc.close()


async def test_src_and_connection_types(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A")
    async with serve_config(op.config()) as srv:
        nc = await connect(srv, tmp_path, *op.user(akp, src=["127.0.0.0/8"]))
        await nc.close()
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(akp, src=["10.1.0.0/16"]))
        assert "Authorization Violation" in await refused(
            srv, tmp_path, *op.user(akp, allowed_connection_types=["WEBSOCKET"]))
        nc = await connect(srv, tmp_path, *op.user(akp, allowed_connection_types=["STANDARD"]))
        await nc.close()
        now = time.localtime()
        # a window that closed an hour ago
        h1, h2 = (now.tm_hour - 3) % 24, (now.tm_hour - 1) % 24
        assert "Authorization Violation" in await refused(
            srv, tmp_path, *op.user(akp, times=[{"start": f"{h1:02d}:00:00", "end": f"{h2:02d}:00:00"}]))
        nc = await connect(srv, tmp_path, *op.user(akp, times=[{"start": "00:00:00", "end": "23:59:59"}]))
        await nc.close()
    if hasattr(srv, "_test_log"):
        assert "Bad src Ip 127.0.0.1" in log_text(srv)
        assert "Outside connect times" in log_text(srv)


async def test_websocket_connection_type(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A")
    ws_port = free_port()
    conf = op.config(f"websocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true }}")
    async with serve_config(conf) as srv:
        ukp, token = op.user(akp, allowed_connection_types=["WEBSOCKET"])
        path = creds(tmp_path, ukp, token)
        nc = await nats.connect(f"ws://127.0.0.1:{ws_port}", user_credentials=path, allow_reconnect=False)
        await nc.flush()
        await nc.close()
        assert "Authorization Violation" in await refused(srv, tmp_path, ukp, token)


async def _sys_client(op, srv, tmp_path):
    skp = op.sys[0]
    return await connect(srv, tmp_path, *op.user(skp, name="sys"))


async def test_claims_update_changes_limits_and_revokes(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A")
    async with serve_config(op.config()) as srv:
        sysc = await _sys_client(op, srv, tmp_path)
        errs = []
        closed = asyncio.Event()

        async def ecb(e):
            errs.append(str(e))

        async def ccb():
            closed.set()
        victim_kp, victim_jwt = op.user(akp)
        victim = await connect(srv, tmp_path, victim_kp, victim_jwt, error_cb=ecb, closed_cb=ccb)
        keep = await connect(srv, tmp_path, *op.user(akp))
        # tighten the account's connection limit... the two existing connections stay (older first)
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1,
                               limits={"conn": 2, "subs": -1, "payload": -1})
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        body = json.loads(r.data)
        assert body["data"] == {"account": apub, "code": 200, "message": "jwt updated"}
        assert "server" in body
        assert "maximum account active connections exceeded" in await refused(srv, tmp_path, *op.user(akp))
        # revoke one user: it is disconnected, the other stays
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 2,
                               revocations={J.public_key(victim_kp): int(time.time()) + 1})
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        await asyncio.wait_for(closed.wait(), 2)
        assert "user authentication revoked" in str(victim.last_error).lower()
        assert keep.is_connected
        await keep.flush()
        assert "Authorization Violation" in await refused(srv, tmp_path, victim_kp, victim_jwt)
        # errors: mismatched subject, a JWT not signed by the operator
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{op.sys[1]}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        err = json.loads(r.data)["error"]
        assert err["code"] == 500 and "subject does not match jwt content" in err["description"]
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", b"", timeout=2)
        assert json.loads(r.data)["error"]["description"] == "jwt update error - request body is empty"
        await keep.close()
        await sysc.close()


async def test_full_dir_resolver_survives_restart(tmp_path):
    op = Operator()
    akp, apub, atok = op.account("A")
    jwt_dir = tmp_path / "jwt"
    conf = op.config(resolver=f'resolver {{ type: full, dir: "{jwt_dir}", allow_delete: true }}', preload=False)
    # the system account must be there before anyone can push: preload only it
    conf += f'resolver_preload {{ {op.sys[1]}: "{op.sys[2]}" }}\n'
    async with serve_config(conf) as srv:
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(akp))
        sysc = await _sys_client(op, srv, tmp_path)
        r = await sysc.request("$SYS.REQ.CLAIMS.UPDATE", atok.encode(), timeout=2)
        assert json.loads(r.data)["data"] == {"account": apub, "code": 200, "message": "jwt updated"}
        # the older announcement subject is an input too (a plain publish, no reply)
        _, _, newer = op.account("A", kp=akp, iat=int(time.time()) + 1,
                                 limits={"conn": 5, "subs": -1, "payload": -1})
        await sysc.publish(f"$SYS.ACCOUNT.{apub}.CLAIMS.UPDATE", newer.encode())
        await sysc.flush()
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.LOOKUP", b"", timeout=2)
        assert r.data.decode() == newer
        atok = newer
        bad = J.encode({"sub": apub, "iat": 1, "nats": {"type": "account", "limits": {"exports": 0},
                                                        "exports": [{"subject": "x", "type": "stream"}]}}, op.kp)
        r = await sysc.request("$SYS.REQ.CLAIMS.UPDATE", bad.encode(), timeout=2)
        err = json.loads(r.data)["error"]
        assert err["description"] == ("jwt validation failed - validation errors: "
                                      "[the account contains more exports than allowed by the operator]")
        nc = await connect(srv, tmp_path, *op.user(akp))
        await nc.close()
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.LOOKUP", b"", timeout=2)
        assert r.data.decode() == atok
        r = await sysc.request("$SYS.REQ.CLAIMS.LIST", b"", timeout=2)
        assert apub in json.loads(r.data)["data"]
        await sysc.close()
    assert (jwt_dir / f"{apub}.jwt").read_text().strip() == atok
    async with serve_config(conf) as srv:
        nc = await connect(srv, tmp_path, *op.user(akp))
        sysc = await _sys_client(op, srv, tmp_path)
        closed = asyncio.Event()

        async def ccb():
            closed.set()
        victim = await connect(srv, tmp_path, *op.user(akp), closed_cb=ccb)
        # delete: only a request signed by the operator itself
        bad = J.encode({"sub": apub, "nats": {"accounts": [apub]}}, akp)
        r = await sysc.request("$SYS.REQ.CLAIMS.DELETE", bad.encode(), timeout=2)
        assert "error" in json.loads(r.data)
        req = J.encode({"sub": op.pub, "nats": {"accounts": [apub]}}, op.kp)
        r = await sysc.request("$SYS.REQ.CLAIMS.DELETE", req.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "deleted 1 accounts"
        await asyncio.wait_for(closed.wait(), 2)
        await nc.close()
        assert not (jwt_dir / f"{apub}.jwt").exists()
        await sysc.close()


async def test_exports_imports_with_activation(tmp_path):
    op = Operator()
    akp = J.new_keypair("A")
    bkp = J.new_keypair("A")
    ckp = J.new_keypair("A")
    apub, bpub, cpub = (J.public_key(k) for k in (akp, bkp, ckp))
    act = J.encode({"sub": bpub, "nats": {"type": "activation", "subject": "private.>", "kind": "stream"}}, akp)
    op.account("A", kp=akp, exports=[{"name": "svc", "subject": "help", "type": "service"},
                                     {"name": "info", "subject": "info", "type": "service"},
                                     {"name": "assist", "subject": "assist", "type": "service"},
                                     {"name": "pub", "subject": "public.>", "type": "stream"},
                                     {"name": "priv", "subject": "private.>", "type": "stream", "token_req": True}])
    op.account("B", kp=bkp, imports=[{"name": "svc", "subject": "help", "account": apub, "type": "service"},
                                     {"name": "svc2", "subject": "info", "local_subject": "aid", "account": apub,
                                      "type": "service"},
                                     {"name": "svc3", "subject": "ask", "to": "assist", "account": apub,
                                      "type": "service"},
                                     {"name": "p", "subject": "public.>", "account": apub, "type": "stream"},
                                     {"name": "q", "subject": "private.>", "account": apub, "type": "stream",
                                      "token": act}])
    # C tries the private stream without a token
    op.account("C", kp=ckp, imports=[{"name": "q", "subject": "private.>", "account": apub, "type": "stream"}])
    async with serve_config(op.config()) as srv:
        na = await connect(srv, tmp_path, *op.user(akp))
        nb = await connect(srv, tmp_path, *op.user(bkp))
        nc_ = await connect(srv, tmp_path, *op.user(ckp))

        async def helper(msg):
            await msg.respond(b"helped")
        await na.subscribe("help", cb=helper)
        await na.subscribe("info", cb=helper)
        await na.subscribe("assist", cb=helper)
        await na.flush()
        r = await nb.request("help", b"?", timeout=1)
        assert r.data == b"helped"
        # local names for the service: local_subject, and the older "to" (the exported subject)
        assert (await nb.request("aid", b"?", timeout=1)).data == b"helped"
        assert (await nb.request("ask", b"?", timeout=1)).data == b"helped"
        sb = await nb.subscribe(">")
        sc = await nc_.subscribe(">")
        await nb.flush()
        await nc_.flush()
        await na.publish("public.a", b"1")
        await na.publish("private.a", b"2")
        await na.flush()
        got = {(await sb.next_msg(timeout=1)).subject for _ in range(2)}
        assert got == {"public.a", "private.a"}
        with pytest.raises(nats.errors.TimeoutError):
            await sc.next_msg(timeout=0.2)
        for nc in (na, nb, nc_):
            await nc.close()


async def test_claims_update_changes_exports_and_imports(tmp_path):
    op = Operator()
    akp = J.new_keypair("A")
    bkp = J.new_keypair("A")
    apub, bpub = J.public_key(akp), J.public_key(bkp)
    op.account("A", kp=akp)
    op.account("B", kp=bkp, imports=[{"name": "svc", "subject": "help", "account": apub, "type": "service"}])
    async with serve_config(op.config()) as srv:
        sysc = await _sys_client(op, srv, tmp_path)
        na = await connect(srv, tmp_path, *op.user(akp))
        nb = await connect(srv, tmp_path, *op.user(bkp))

        async def helper(msg):
            await msg.respond(b"helped")
        await na.subscribe("help", cb=helper)
        await na.flush()
        with pytest.raises(nats.errors.NoRespondersError):
            await nb.request("help", b"?", timeout=0.5)
        # A starts exporting the service: B's import now works
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1,
                               exports=[{"name": "svc", "subject": "help", "type": "service"}])
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        r = await nb.request("help", b"?", timeout=1)
        assert r.data == b"helped"
        # B drops the import
        _, _, tok = op.account("B", kp=bkp, iat=int(time.time()) + 2)
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{bpub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        with pytest.raises(nats.errors.NoRespondersError):
            await nb.request("help", b"?", timeout=0.5)
        for nc in (na, nb, sysc):
            await nc.close()


async def test_invalid_account_claims(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A")
    # two service imports of the same subject, and more exports than the account's limit allows
    bkp, _, _ = op.account("B", imports=[{"name": "1", "subject": "help.*", "account": apub, "type": "service"},
                                         {"name": "2", "subject": "help.>", "account": apub, "type": "service"}])
    async with serve_config(op.config()) as srv:
        assert "Authorization Violation" in await refused(srv, tmp_path, *op.user(bkp))
        na = await connect(srv, tmp_path, *op.user(akp))
        sysc = await _sys_client(op, srv, tmp_path)
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1,
                               limits={"conn": -1, "subs": -1, "payload": -1, "exports": 1},
                               exports=[{"name": "a", "subject": "a", "type": "stream"},
                                        {"name": "b", "subject": "b", "type": "stream"}])
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        err = json.loads(r.data)["error"]
        assert err["code"] == 500 and err["account"] == apub
        # (the memory resolver's wording; the full resolver's is "jwt validation failed - validation errors: [...]")
        assert err["description"] == "jwt update resulted in error - account validation failed"
        await na.close()
        await sysc.close()


async def test_account_jwt_mappings(tmp_path):
    op = Operator()
    akp, apub, _ = op.account("A", mappings={"in.*": [{"subject": "out.{{wildcard(1)}}"}]})
    async with serve_config(op.config()) as srv:
        sysc = await _sys_client(op, srv, tmp_path)
        nc = await connect(srv, tmp_path, *op.user(akp))
        sub = await nc.subscribe("out.>")
        sub2 = await nc.subscribe("again.>")
        await nc.flush()
        await nc.publish("in.x", b"1")
        assert (await sub.next_msg(timeout=1)).subject == "out.x"
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1, mappings={"in.*": [{"subject": "again.$1"}]})
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        await nc.publish("in.y", b"2")
        assert (await sub2.next_msg(timeout=1)).subject == "again.y"
        await nc.close()
        await sysc.close()


async def test_activation_expiry_ends_the_import(tmp_path):
    op = Operator()
    akp, bkp = J.new_keypair("A"), J.new_keypair("A")
    apub, bpub = J.public_key(akp), J.public_key(bkp)
    act = J.encode({"sub": bpub, "exp": int(time.time()) + 1,
                    "nats": {"type": "activation", "subject": "private.>", "kind": "stream"}}, akp)
    op.account("A", kp=akp, exports=[{"name": "p", "subject": "private.>", "type": "stream", "token_req": True}])
    op.account("B", kp=bkp, imports=[{"name": "q", "subject": "private.>", "account": apub, "type": "stream",
                                      "token": act}])
    async with serve_config(op.config()) as srv:
        na = await connect(srv, tmp_path, *op.user(akp))
        nb = await connect(srv, tmp_path, *op.user(bkp))
        sb = await nb.subscribe("private.>")
        await nb.flush()
        await na.publish("private.a", b"1")
        assert (await sb.next_msg(timeout=1)).data == b"1"
        await asyncio.sleep(2.6)
        await na.publish("private.a", b"2")
        with pytest.raises(nats.errors.TimeoutError):
            await sb.next_msg(timeout=0.3)
        await na.close()
        await nb.close()


async def test_jetstream_only_for_accounts_with_js_limits(tmp_path):
    op = Operator()
    akp, _, _ = op.account("A", limits={"conn": -1, "subs": -1, "payload": -1, "mem_storage": -1,
                                        "disk_storage": -1, "streams": 2, "consumer": -1})
    bkp, _, _ = op.account("B")
    conf = op.config(f'jetstream {{ store_dir: "{tmp_path / "js"}" }}')
    async with serve_config(conf) as srv:
        na = await connect(srv, tmp_path, *op.user(akp))
        nb = await connect(srv, tmp_path, *op.user(bkp))
        info = await na.jetstream().account_info()
        assert info.limits.max_streams == 2
        with pytest.raises(Exception):
            await nb.jetstream().account_info(timeout=0.5)
        await na.close()
        await nb.close()


async def test_jetstream_limits_follow_claims_updates(tmp_path):
    op = Operator()
    js_lim = {"conn": -1, "subs": -1, "payload": -1, "mem_storage": -1, "disk_storage": -1, "consumer": -1}
    akp, apub, _ = op.account("A", limits={**js_lim, "streams": 1})
    conf = op.config(f'jetstream {{ store_dir: "{tmp_path / "js"}" }}')
    async with serve_config(conf) as srv:
        sysc = await _sys_client(op, srv, tmp_path)
        nc = await connect(srv, tmp_path, *op.user(akp))
        js = nc.jetstream()
        await js.add_stream(name="S1", subjects=["s1"])
        with pytest.raises(nats.js.errors.APIError) as ei:
            await js.add_stream(name="S2", subjects=["s2"])
        assert ei.value.err_code == 10027  # maximum number of streams reached
        _, _, tok = op.account("A", kp=akp, iat=int(time.time()) + 1, limits={**js_lim, "streams": 2})
        r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
        assert json.loads(r.data)["data"]["message"] == "jwt updated"
        await js.add_stream(name="S2", subjects=["s2"])
        assert (await js.account_info()).limits.max_streams == 2
        await nc.close()
        await sysc.close()


@pytest.mark.parametrize("conf,msg", [
    ('accounts { X { users [{user: a, password: a}] } }', "operators do not allow Accounts to be configured"),
    ('authorization { users [{user: a, password: a}] }', "operators do not allow users to be configured"),
    ('resolver: URL("http://127.0.0.1:1/jwt/v1/accounts/")', 'could not fetch <"http://127.0.0.1:1/jwt/v1/accounts/">'),
    ('no_auth_user: a', "no_auth_user not compatible with Trusted Operator"),
    ('resolver_pinned_accounts: [ABC]', 'pinned account key "ABC" is not a valid public account nkey'),
])
async def test_config_errors(tmp_path, conf, msg):
    from rillet.config.flags import parse_command_line
    from rillet.app.compose import build_server
    op = Operator()
    text = op.config(resolver=conf) if conf.startswith("resolver:") else op.config(conf)
    p = tmp_path / "s.conf"
    p.write_text(text)
    with pytest.raises(ValueError) as ei:
        build_server(parse_command_line(["-c", str(p)]).options)
    assert msg in str(ei.value)


def test_config_errors_at_parse(tmp_path):
    from rillet.config.errors import ConfigError
    from rillet.config.options_builder import load_string
    with pytest.raises(ConfigError, match="error parsing operator JWT"):
        load_string(f'operator: "{tmp_path}/missing.jwt"\nresolver: MEMORY\n')
    with pytest.raises(ConfigError, match="required to be a valid public operator nkey"):
        load_string('trusted: ["ABC"]\n')
    with pytest.raises(ConfigError, match="invalid account JWT"):
        load_string('resolver: MEMORY\nresolver_preload { AXXX: "eyJnot.a.jwt" }\n')
    with pytest.raises(ConfigError, match="CACHE does not accept sync"):
        load_string(f'resolver {{ type: cache, dir: "{tmp_path}", interval: "1m" }}\n')
    op = Operator(system=False)
    from rillet.server.server import validate_options
    from rillet.app.compose import build_server
    opts = load_string(f"operator: {op.jwt()}\n")
    validate_options(opts)  # like nats-server -t: the file is valid...
    with pytest.raises(ValueError, match="operators require an account resolver"):
        build_server(opts)  # ...and the server refuses to start


def test_time_windows_and_src_unit():
    import datetime as dt
    from rillet.server.operator_claims import validate_src, validate_times
    utc = dt.timezone.utc
    at = dt.datetime(2026, 1, 1, 23, 30, 0, tzinfo=utc)
    # a window over midnight, in a named zone
    n = {"times": [{"start": "22:00:00", "end": "02:00:00"}], "times_location": "UTC"}
    ok, left = validate_times(n, at)
    assert ok and left == 2.5 * 3600
    ok, _ = validate_times(n, at.replace(hour=3))
    assert not ok
    # nats-server counts a range over midnight from today's start: 01:30 is outside it
    assert not validate_times(n, at.replace(hour=1))[0]
    ok, left = validate_times({"times": [{"start": "01:00:00", "end": "02:00:00"}]}, at.replace(hour=1))
    assert ok and left == 30 * 60  # 01:30 until 02:00
    assert validate_times({}, at) == (True, 0.0)
    assert validate_times({"times": [{"start": "bad", "end": "x"}]}, at)[0] is False
    assert validate_times({"times": [{"start": "01:00:00", "end": "02:00:00"}], "times_location": "No/Where"},
                          at)[0] is False
    assert validate_src({"src": ["192.168.0.0/16", "10.0.0.1/32"]}, "10.0.0.1")
    assert validate_src({"src": "192.168.0.0/16,10.0.0.0/8"}, "10.2.3.4")
    assert not validate_src({"src": ["192.168.0.0/16"]}, "10.0.0.1")
    assert not validate_src({"src": ["192.168.0.0/16"]}, "")
    assert validate_src({}, "")


def test_operator_asserts_server_version(tmp_path):
    from rillet.config.options_builder import load_string
    from rillet.app.compose import build_server
    op = Operator()
    op.account("A")
    for ver, ok in (("2.0.0", True), ("2.99.0", False), ("9.0.0", False)):
        text = op.config().replace(f"operator: {op.jwt_token}", f"operator: {op.jwt(assert_server_version=ver)}")
        if ok:
            build_server(load_string(text))
        else:
            with pytest.raises(ValueError, match=r"expected (major|minor) version \d+ > server"):
                build_server(load_string(text))


def test_system_account_must_resolve(tmp_path):
    from rillet.config.options_builder import load_string
    from rillet.app.compose import build_server
    op = Operator()
    text = f"listen: 127.0.0.1:-1\noperator: {op.jwt()}\nresolver: MEMORY\n"  # the system account not preloaded
    with pytest.raises(ValueError, match="error resolving system account: account missing"):
        build_server(load_string(text))
