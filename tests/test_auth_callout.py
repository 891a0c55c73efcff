"""Authorization callout (config mode): a service in the test answers the server's authorization requests.

Behaviour checked against nats-server v2.15.1 (RILLET_TEST_TARGET=nats-server runs the end to end tests
against it).
"""
import asyncio
import json
import tempfile
import time

import nats
import pytest

from rillet import jwt
from rillet.server.auth_callout import curve_public_key, new_curve_seed, open_sealed, seal
from tests.helpers import GO, serve_config

ISSUER = jwt.new_keypair("A")
OTHER = jwt.new_keypair("A")  # an account key the server does not know as issuer


def conf(extra_callout: str = "", timeout: str = "1") -> str:
    return f"""
listen: 127.0.0.1:-1
accounts {{
  AUTH {{ users [{{user: auth, password: pwd}}] }}
  A {{}}
  B {{}}
}}
authorization {{
  timeout: {timeout}
  auth_callout {{
    issuer: {jwt.public_key(ISSUER)}
    auth_users: [auth]
    account: AUTH
    {extra_callout}
  }}
}}
"""


def url(srv, user="", password=""):
    if not user:
        return srv.client_url
    return srv.client_url.replace("nats://", f"nats://{user}:{password}@")


def user_jwt(user_nkey: str, account: str, name: str = "", nats_extra: dict | None = None,
             signer=ISSUER, **claims) -> str:
    n = {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}
    n.update(nats_extra or {})
    c = {"sub": user_nkey, "aud": account, "nats": n, **claims}
    if name:
        c["name"] = name
    return jwt.encode(c, signer)


def response(req: dict, ujwt: str = "", error: str = "", signer=ISSUER, **over) -> bytes:
    n = {"type": "authorization_response", "version": 2}
    if ujwt:
        n["jwt"] = ujwt
    if error:
        n["error"] = error
    c = {"sub": req["nats"]["user_nkey"], "aud": req["nats"]["server_id"]["id"], "nats": n}
    c.update(over)
    return jwt.encode(c, signer).encode()


class Service:
    """The callout service: ``decide(request claims) -> response bytes or None (no answer)``."""

    def __init__(self, decide, xkey_seed: bytes | None = None) -> None:
        self.decide = decide
        self.requests: list[dict] = []
        self.headers: list = []
        self.xkey_seed = xkey_seed
        self.nc = None

    async def start(self, srv) -> "Service":
        self.nc = await nats.connect(url(srv, "auth", "pwd"))

        async def handler(msg):
            data = msg.data
            self.headers.append(msg.headers)
            server_xkey = (msg.headers or {}).get("Nats-Server-Xkey")
            if self.xkey_seed is not None:
                data = open_sealed(data, self.xkey_seed, server_xkey)
            req = jwt.decode(data.decode())
            self.requests.append(req)
            out = self.decide(req)
            if out is None:
                return
            if self.xkey_seed is not None and server_xkey:
                out = seal(out, self.xkey_seed, server_xkey)
            await msg.respond(out)

        await self.nc.subscribe("$SYS.REQ.USER.AUTH", cb=handler)
        await self.nc.flush()
        return self

    async def close(self) -> None:
        await self.nc.close()


def directory(req: dict):
    """alice -> account A with permissions; bob -> B (no permissions, named); the rest refused."""
    co = req["nats"]["connect_opts"]
    nkey = req["nats"]["user_nkey"]
    user, password = co.get("user"), co.get("pass")
    if user == "alice" and password == "a":
        return response(req, user_jwt(nkey, "A", nats_extra={"pub": {"allow": ["a.>", "_INBOX.>"]},
                                                                "sub": {"allow": ["a.>", "_INBOX.>"]}}))
    if user == "bob" and password == "b":
        return response(req, user_jwt(nkey, "B", name="robert"))
    if user == "slow":
        return None
    return response(req, error="unknown user")


async def refused(srv, user, password, timeout=3) -> str:
    with pytest.raises(Exception) as ei:
        nc = await nats.connect(url(srv, user, password), allow_reconnect=False, max_reconnect_attempts=0,
                                connect_timeout=timeout)
        await nc.close()
    return str(ei.value)


async def test_callout_admits_with_permissions_and_refuses():
    async with serve_config(conf()) as srv:
        svc = await Service(directory).start(srv)
        alice = await nats.connect(url(srv, "alice", "a"))
        bob = await nats.connect(url(srv, "bob", "b"))
        # the request the service saw
        req = svc.requests[0]
        assert req["aud"] == "nats-authorization-request" and req["sub"] == jwt.public_key(ISSUER)
        assert req["iss"] == req["nats"]["server_id"]["id"] and req["iss"].startswith("N")
        assert req["exp"] >= int(time.time())
        n = req["nats"]
        assert n["type"] == "authorization_request" and n["user_nkey"].startswith("U")
        assert n["client_info"]["user"] == "alice" and n["client_info"]["kind"] == "Client"
        assert n["client_info"]["type"] == "nats" and n["client_info"]["host"] == "127.0.0.1"
        assert n["connect_opts"]["user"] == "alice" and n["connect_opts"]["pass"] == "a"
        assert n["connect_opts"]["lang"] == "python3" and n["connect_opts"]["protocol"] == 1
        assert "client_tls" not in n and svc.headers[0] is None
        assert len({r["nats"]["user_nkey"] for r in svc.requests}) == 2  # a fresh user key per connection
        # alice is in A with her permissions
        sub = await alice.subscribe("a.>")
        await alice.flush()
        await alice.publish("a.x", b"1")
        m = await sub.next_msg(timeout=1)
        assert m.data == b"1"
        errors = []

        async def on_err(e):
            errors.append(str(e))

        alice._error_cb = on_err
        await alice.publish("b.x", b"no")
        await alice.flush()
        await asyncio.sleep(0.1)
        assert any('permissions violation for publish to "b.x"' in e for e in errors)
        # bob is in B: no permissions, and does not see A
        sb = await bob.subscribe(">")
        await bob.flush()
        await alice.publish("a.y", b"2")
        await alice.flush()
        with pytest.raises(nats.errors.TimeoutError):
            await sb.next_msg(timeout=0.2)
        await bob.publish("b.x", b"3")
        m = await sb.next_msg(timeout=1)
        assert m.data == b"3"
        # refused users
        assert "Authorization Violation" in await refused(srv, "mallory", "x")
        assert "Authorization Violation" in await refused(srv, "alice", "wrong")
        if not GO:
            log = srv._test_log.getvalue()
            assert "[WRN] Auth callout service returned an error: unknown user" in log
            assert 'authentication error - User "mallory"' in log
            # the name in the user JWT replaces the user name
            conn_users = {c.user for c in srv.clients.values()}
            assert "robert" in conn_users and "alice" in conn_users
            assert {c.account.name for c in srv.clients.values() if c.user in ("robert", "alice")} == {"A", "B"}
        for nc in (alice, bob):
            await nc.close()
        await svc.close()


async def test_auth_users_bypass_callout():
    async with serve_config(conf()) as srv:
        svc = await Service(directory).start(srv)
        nc = await nats.connect(url(srv, "auth", "pwd"))
        assert svc.requests == []
        await nc.close()
        # an auth user with a wrong password is refused without asking the service
        assert "Authorization Violation" in await refused(srv, "auth", "nope")
        assert svc.requests == []
        await svc.close()


async def test_callout_ops_after_connect_are_held():
    """What the client sends right after CONNECT waits for the answer, then runs in order."""
    from tests.helpers import RawClient

    def slow_ok(req):
        return directory(req)

    async with serve_config(conf()) as srv:
        svc = await Service(slow_ok).start(srv)
        rc = await RawClient.open(srv, connect=None)
        rc.send(b'CONNECT {"user":"alice","pass":"a","verbose":false,"protocol":1,"headers":true}\r\n'
                b"SUB a.x 1\r\nPUB a.x 2\r\nhi\r\nPING\r\n")
        data = await rc.read_until(b"PONG\r\n", 3)
        assert b"MSG a.x 1 2\r\nhi\r\n" in data
        await rc.close()
        await svc.close()


async def test_callout_timeout_refuses_cleanly():
    async with serve_config(conf(timeout="0.5")) as srv:
        svc = await Service(directory).start(srv)
        t0 = time.monotonic()
        assert "Authorization Violation" in await refused(srv, "slow", "x")
        assert 0.4 < time.monotonic() - t0 < 2.5
        # the server still works for the others
        nc = await nats.connect(url(srv, "bob", "b"))
        await nc.close()
        await svc.close()
    # no service at all: the same
    async with serve_config(conf(timeout="0.5")) as srv:
        assert "Authorization Violation" in await refused(srv, "alice", "a")


def bad(kind):
    def decide(req):
        n = req["nats"]
        nkey = n["user_nkey"]
        good = user_jwt(nkey, "A")
        if kind == "wrong_issuer":
            return response(req, user_jwt(nkey, "A", signer=OTHER))
        if kind == "wrong_user":
            return response(req, user_jwt(jwt.public_key(jwt.new_keypair("U")), "A"))
        if kind == "wrong_server":
            return response(req, good, aud=jwt.public_key(jwt.new_keypair("N")))
        if kind == "response_for_other_user":
            return response(req, good, sub=jwt.public_key(jwt.new_keypair("U")))
        if kind == "unknown_account":
            return response(req, user_jwt(nkey, "NOPE"))
        if kind == "expired_user":
            return response(req, user_jwt(nkey, "A", exp=int(time.time()) - 10))
        if kind == "empty":
            return b""
        if kind == "garbage":
            return b"not a jwt"
        if kind == "issuer_account":
            return response(req, user_jwt(nkey, "A", nats_extra={"issuer_account": jwt.public_key(OTHER)}))
        raise AssertionError(kind)
    return decide


@pytest.mark.parametrize("kind,log", [
    ("wrong_issuer", "Wrong issuer for auth callout response on account \"AUTH\", expected"),
    ("wrong_user", "Expected authorized user of \"U"),
    ("wrong_server", "Auth callout violation: auth callout response is not for server"),
    ("response_for_other_user", "Auth callout violation: auth callout response is not for expected user"),
    ("unknown_account", "No valid account \"NOPE\" for auth callout response on account \"AUTH\""),
    ("expired_user", "Error validating user JWT: claim is expired"),
    ("empty", "Auth callout violation: \"no reason supplied\" on account \"AUTH\""),
    ("garbage", "Expected 3 chunks"),
    ("issuer_account", "Error non operator mode account \"AUTH\": attempted to use issuer_account"),
])
async def test_callout_bad_responses(kind, log):
    async with serve_config(conf()) as srv:
        svc = await Service(bad(kind)).start(srv)
        assert "Authorization Violation" in await refused(srv, "alice", "a")
        if not GO:
            await asyncio.sleep(0.05)
            assert f"[WRN] {log}" in srv._test_log.getvalue()
        else:
            await asyncio.to_thread(srv.wait_log, r"\[WRN\] " + log.replace('"', '.').replace("(", "."), 3)
        await svc.close()


async def test_callout_xkey_encryption():
    seed = new_curve_seed()
    pub = curve_public_key(seed)
    async with serve_config(conf(f"xkey: {pub}")) as srv:
        svc = await Service(directory, xkey_seed=seed).start(srv)
        nc = await nats.connect(url(srv, "alice", "a"))
        hdrs = svc.headers[0]
        assert hdrs["Nats-Server-Xkey"].startswith("X")
        assert svc.requests[0]["nats"]["server_id"]["xkey"] == hdrs["Nats-Server-Xkey"]
        await nc.close()
        assert "Authorization Violation" in await refused(srv, "mallory", "m")
        await svc.close()
    # a service that answers in the clear is accepted too (the answer starts like a JWT)
    async with serve_config(conf(f"xkey: {pub}")) as srv:
        svc = await Service(directory, xkey_seed=seed).start(srv)
        svc.xkey_seed = None
        # (without the key the service cannot read the request: it answers nothing)
        assert "Authorization Violation" in await refused(srv, "alice", "a", timeout=3)
        await svc.close()


async def test_callout_user_expiry_and_no_jwt_limits():
    """The user JWT's expiry closes the connection; its subs/payload limits are not applied (nats-server
    applies those only for a JWT the client itself presents)."""
    from tests.helpers import RawClient

    def decide(req):
        nkey = req["nats"]["user_nkey"]
        return response(req, user_jwt(nkey, "A", nats_extra={"subs": 1, "payload": 10},
                                      exp=int(time.time()) + 2))

    async with serve_config(conf()) as srv:
        svc = await Service(decide).start(srv)
        rc = await RawClient.open(srv, connect=None)
        rc.send(b'CONNECT {"user":"alice","pass":"a","verbose":false,"protocol":1}\r\n'
                b"SUB x 1\r\nSUB y 2\r\nPUB y 11\r\n0123456789a\r\nPING\r\n")
        data = await rc.read_until(b"PONG\r\n", 3)
        assert b"-ERR" not in data and b"MSG y 2 11\r\n0123456789a\r\n" in data
        t0 = time.monotonic()
        # the user JWT expires (its exp is whole seconds): the server closes the connection
        data = await rc.read_until_closed(4)
        assert b"-ERR 'User Authentication Expired'" in data
        assert time.monotonic() - t0 < 3.5
        await svc.close()


@pytest.mark.skipif(GO, reason="builds a Rillet server from the config")
@pytest.mark.parametrize("block,err", [
    ("account: AUTH\nauth_users: [auth]", "Authorization callouts require an issuer to be specified"),
    (f"issuer: {jwt.public_key(ISSUER)}\naccount: AUTH",
     "Authorization callouts require authorized users to be specified"),
    ("issuer: UABC\nauth_users: [auth]", 'Expected callout user to be a valid public account nkey, got "UABC"'),
    (f"issuer: {jwt.public_key(ISSUER)}\nauth_users: [auth]\nxkey: XBAD",
     'Expected callout xkey to be a valid public xkey, got "XBAD"'),
    (f"issuer: {jwt.public_key(ISSUER)}\nauth_users: [auth]\nallowed_accounts: [NOPE]",
     'auth_callout allowed account "NOPE" not found in configured accounts'),
    (f"issuer: {jwt.public_key(ISSUER)}\nauth_users: [auth]\nfoo: 1", 'Unknown field "foo" parsing authorization callout'),
], ids=lambda v: v if v[:1].isupper() or v.startswith("auth_") or v.startswith("Unknown") else "block")  # (keys random)
def test_callout_config_errors(block, err):
    from rillet.config.flags import parse_command_line
    from rillet.server.server import Server
    from rillet.app.compose import build_server
    text = ("accounts { AUTH { users [{user: auth, password: pwd}] } }\n"
            f"authorization {{ auth_callout {{ {block} }} }}\n")
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(text)
        f.flush()
        with pytest.raises(ValueError) as ei:  # (a ConfigError at load, as nats-server -t reports them)
            build_server(parse_command_line(["-c", f.name]).options)
    assert str(ei.value) == err or str(ei.value).startswith(f"{f.name}:") and str(ei.value).endswith(f": {err}")


def test_xkey_seal_open_roundtrip():
    a, b = new_curve_seed(), new_curve_seed()
    pa, pb = curve_public_key(a), curve_public_key(b)
    assert pa.startswith("X") and len(pa) == 56
    sealed = seal(b"hello", a, pb)
    assert sealed[:4] == b"xkv1" and len(sealed) == 4 + 24 + 16 + 5
    assert open_sealed(sealed, b, pa) == b"hello"
    with pytest.raises(ValueError, match="could not decrypt"):
        open_sealed(sealed, new_curve_seed(), pa)
    with pytest.raises(ValueError, match="wrong version"):
        open_sealed(b"xkv2" + sealed[4:], b, pa)


def test_server_id_is_the_signing_key():
    from rillet.config.options import Options
    from rillet.server.server import Server
    from rillet.app.compose import build_server
    srv = build_server(Options(port=-1))
    assert srv.server_id == jwt.public_key(srv.server_kp) and srv.server_id.startswith("N")
    token = jwt.encode({"sub": "x"}, srv.server_kp)
    assert jwt.decode(token)["iss"] == srv.server_id
    assert srv.xkey.startswith("X")
    assert json.loads(srv.info_for(type("C", (), {"cid": 1, "host": "", "nonce": None, "conn_type": "STANDARD"})())
                      [5:-3])["xkey"] == srv.xkey


async def test_callout_allowed_accounts_and_auth_subject_denied():
    """Users configured in an account the callout does not handle authenticate locally; a client placed in
    the callout account may not publish on the callout subject."""
    text = conf("allowed_accounts: [AUTH, A]").replace("B {}", "B { users [{user: carol, password: c}] }")

    def decide(req):
        co = req["nats"]["connect_opts"]
        nkey = req["nats"]["user_nkey"]
        if co.get("user") == "dave":
            return response(req, user_jwt(nkey, "AUTH"))
        return directory(req)

    async with serve_config(text) as srv:
        svc = await Service(decide).start(srv)
        carol = await nats.connect(url(srv, "carol", "c"))
        assert svc.requests == []
        # a wrong password is no local user: that goes to the callout (which refuses it)
        assert "Authorization Violation" in await refused(srv, "carol", "wrong")
        assert svc.requests[0]["nats"]["connect_opts"]["user"] == "carol"
        alice = await nats.connect(url(srv, "alice", "a"))
        assert len(svc.requests) == 2
        dave = await nats.connect(url(srv, "dave", "d"))
        errors = []

        async def on_err(e):
            errors.append(str(e))

        dave._error_cb = on_err
        await dave.publish("$SYS.REQ.USER.AUTH", b"x")
        await dave.publish("other", b"fine")
        await dave.flush()
        await asyncio.sleep(0.1)
        assert errors == ['nats: permissions violation for publish to "$sys.req.user.auth"']  # (nats-py lowercases)
        for nc in (carol, alice, dave):
            await nc.close()
        await svc.close()


from tests.test_tls_map import _ctx, pki  # noqa: E402,F401  (the test PKI fixture)


async def test_callout_request_has_client_tls(pki):  # noqa: F811
    cert, key = pki["server"]
    text = conf().replace("listen: 127.0.0.1:-1", f"""listen: 127.0.0.1:-1
tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki['ca']}", verify: true }}""")
    async with serve_config(text) as srv:
        turl = srv.client_url.replace("nats://", "tls://")
        svc_nc = await nats.connect(turl.replace("tls://", "tls://auth:pwd@"), tls=_ctx(pki, "bob"))
        seen = []

        async def handler(msg):
            req = jwt.decode(msg.data.decode())
            seen.append(req)
            await msg.respond(directory(req))

        await svc_nc.subscribe("$SYS.REQ.USER.AUTH", cb=handler)
        await svc_nc.flush()
        nc = await nats.connect(turl.replace("tls://", "tls://alice:a@"), tls=_ctx(pki, "alice"))
        await nc.close()
        tls = seen[0]["nats"]["client_tls"]
        assert tls["version"] == "1.3" and tls["cipher"].startswith("TLS_")
        with open(pki["alice"][0]) as f:
            alice_pem = f.read()
        # nats-server sends the verified chain (leaf first); Python before 3.13 can only give the peer cert
        chains = tls.get("verified_chains") or [tls.get("certs")]
        assert chains[0][0].strip() == alice_pem.strip()
        await svc_nc.close()


def _reload(srv, text):
    from rillet.config.flags import parse_command_line
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(text)
        f.flush()
        srv.reload(parse_command_line(["-c", f.name]).options)


@pytest.mark.skipif(GO, reason="reloads an in-process Rillet server (nats-server checked by hand: same text)")
async def test_callout_reload():
    base = conf()
    async with serve_config(base) as srv:
        refused_now = set()

        def decide(req):
            if req["nats"]["connect_opts"].get("user") in refused_now:
                return response(req, error="gone")
            return directory(req)

        svc = await Service(decide).start(srv)
        alice = await nats.connect(url(srv, "alice", "a"), allow_reconnect=False)
        bob = await nats.connect(url(srv, "bob", "b"), allow_reconnect=False)
        # the callout block may not change on reload
        changed = base.replace("auth_users: [auth]", "auth_users: [auth, x]")
        with pytest.raises(ValueError) as ei:
            _reload(srv, changed)
        iss = jwt.public_key(ISSUER)
        assert str(ei.value) == (f"config reload not supported for AuthCallout: old=&{{{iss} AUTH [auth]  []}}, "
                                 f"new=&{{{iss} AUTH [auth x]  []}}")
        # a reload asks the callout again about the clients it admitted: alice is now refused
        refused_now.add("alice")
        n = len(svc.requests)
        _reload(srv, base.replace("AUTH { users [{user: auth, password: pwd}] }",
                                  "AUTH { users [{user: auth, password: pwd}, {user: other, password: o}] }"))
        deadline = time.monotonic() + 3
        while not alice.is_closed and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert alice.is_closed and not bob.is_closed
        assert len(svc.requests) == n + 2
        await bob.flush()
        await bob.close()
        await svc.close()


@pytest.mark.skipif(GO, reason="needs the in-process server's websocket address")
async def test_callout_websocket_client():
    text = conf().replace("listen: 127.0.0.1:-1", "listen: 127.0.0.1:-1\nwebsocket { listen: \"127.0.0.1:-1\", no_tls: true }")
    async with serve_config(text) as srv:
        svc = await Service(directory).start(srv)
        host, port = srv.websocket_addr
        nc = await nats.connect(f"ws://alice:a@{host}:{port}", allow_reconnect=False)
        sub = await nc.subscribe("a.b")
        await nc.publish("a.b", b"over ws")
        assert (await sub.next_msg(timeout=1)).data == b"over ws"
        assert svc.requests[0]["nats"]["client_info"]["type"] == "websocket"
        await nc.close()
        with pytest.raises(Exception):
            await nats.connect(f"ws://mallory:x@{host}:{port}", allow_reconnect=False, max_reconnect_attempts=0,
                               connect_timeout=2)
        await svc.close()


async def test_callout_second_connect_waits_too():
    from tests.helpers import RawClient
    async with serve_config(conf()) as srv:
        svc = await Service(directory).start(srv)
        rc = await RawClient.open(srv, connect=None)
        rc.send(b'CONNECT {"user":"bob","pass":"b","verbose":false,"protocol":1}\r\nPING\r\n')
        await rc.read_until(b"PONG\r\n", 3)
        # a second CONNECT as someone the callout refuses: what follows it is not run as bob
        rc.send(b'CONNECT {"user":"mallory","pass":"m","verbose":false,"protocol":1}\r\n'
                b"SUB x 1\r\nPUB x 2\r\nhi\r\nPING\r\n")
        data = await rc.read_until_closed(3)
        assert b"-ERR 'Authorization Violation'" in data and b"MSG x" not in data
        assert len(svc.requests) == 2
        await svc.close()


async def test_callout_second_connect_admitted():
    from tests.helpers import RawClient
    async with serve_config(conf()) as srv:
        svc = await Service(directory).start(srv)
        rc = await RawClient.open(srv, connect=None)
        rc.send(b'CONNECT {"user":"bob","pass":"b","verbose":false,"protocol":1}\r\nPING\r\n')
        await rc.read_until(b"PONG\r\n", 3)
        rc.send(b'CONNECT {"user":"alice","pass":"a","verbose":false,"protocol":1}\r\n'
                b"SUB a.x 1\r\nPUB a.x 2\r\nhi\r\nPING\r\n")
        data = await rc.read_until(b"PONG\r\n", 3)
        assert b"MSG a.x 1 2\r\nhi\r\n" in data and b"-ERR" not in data
        assert len(svc.requests) == 2
        await rc.close()
        await svc.close()


# ---- operator mode: an account JWT's ``authorization`` section turns on the callout for its users ----------

def _operator_setup(xkey: str = ""):
    from tests.test_operator import Operator
    op = Operator()
    akp, apub, _ = op.account("A")
    bkp, bpub, _ = op.account("B")
    svc_kp = jwt.new_keypair("U")
    authz = {"auth_users": [jwt.public_key(svc_kp)], "allowed_accounts": [apub]}
    if xkey:
        authz["xkey"] = xkey
    auth_kp, auth_pub, _ = op.account("AUTH", authorization=authz)
    return op, {"A": (akp, apub), "B": (bkp, bpub), "AUTH": (auth_kp, auth_pub)}, svc_kp


async def _op_connect(srv, tmp_path, ukp, token, **kw):
    from tests.test_operator import creds
    return await nats.connect(srv.client_url, user_credentials=creds(tmp_path, ukp, token),
                              allow_reconnect=False, max_reconnect_attempts=0, **kw)


def _op_decide(accs):
    auth_kp = accs["AUTH"][0]

    def decide(req):
        co = req["nats"]["connect_opts"]
        nkey = req["nats"]["user_nkey"]
        user = co.get("name")  # (nats-py sends no user/password next to credentials: the name picks the user)
        if user == "alice":  # into A, signed by A's own key
            return response(req, user_jwt(nkey, "", nats_extra={"pub": {"allow": ["a.>", "_INBOX.>"]},
                                                                  "sub": {"allow": ["a.>", "_INBOX.>"]}},
                                          signer=accs["A"][0]), signer=auth_kp)
        if user == "carol":  # stays in the callout account
            return response(req, user_jwt(nkey, "", signer=auth_kp), signer=auth_kp)
        if user == "mallory":  # into B: not among the allowed accounts
            return response(req, user_jwt(nkey, "", signer=accs["B"][0]), signer=auth_kp)
        if user == "forger":  # the response signed by a key the callout account does not know
            return response(req, user_jwt(nkey, "", signer=auth_kp), signer=OTHER)
        return response(req, error="unknown user", signer=auth_kp)
    return decide


async def _op_service(srv, tmp_path, op, svc_kp, decide, xkey_seed=None):
    from tests.test_operator import Operator
    svc = Service(decide, xkey_seed)
    _, token = Operator.user(op.accounts["AUTH"][0])  # (a fresh JWT for the service's own key)
    token = jwt.encode({"sub": jwt.public_key(svc_kp), "name": "svc",
                        "nats": {"type": "user", "subs": -1, "data": -1, "payload": -1}},
                       op.accounts["AUTH"][0])
    svc.nc = await _op_connect(srv, tmp_path, svc_kp, token)

    async def handler(msg):
        data = msg.data
        server_xkey = (msg.headers or {}).get("Nats-Server-Xkey")
        svc.headers.append(msg.headers)
        if xkey_seed is not None:
            data = open_sealed(data, xkey_seed, server_xkey)
        req = jwt.decode(data.decode())
        svc.requests.append(req)
        out = decide(req)
        if out is not None:
            if xkey_seed is not None:
                out = seal(out, xkey_seed, server_xkey)
            await msg.respond(out)
    await svc.nc.subscribe("$SYS.REQ.USER.AUTH", cb=handler)
    await svc.nc.flush()
    return svc


def _sentinel(op):
    """A user of the callout account that may do nothing by itself: what clients present to be called out."""
    from tests.test_operator import Operator
    return Operator.user(op.accounts["AUTH"][0], name="sentinel", pub={"deny": [">"]}, sub={"deny": [">"]})


async def _op_refused(srv, tmp_path, ukp, token, user) -> str:
    with pytest.raises(Exception) as ei:
        nc = await _op_connect(srv, tmp_path, ukp, token, name=user, connect_timeout=3)
        await nc.close()
    return str(ei.value)


async def test_operator_callout_places_users_in_allowed_accounts(tmp_path):
    op, accs, svc_kp = _operator_setup()
    async with serve_config(op.config()) as srv:
        svc = await _op_service(srv, tmp_path, op, svc_kp, _op_decide(accs))
        skp, stoken = _sentinel(op)
        # alice: placed in A with the permissions of her user JWT
        errs = []

        async def ecb(e):
            errs.append(str(e))
        alice = await _op_connect(srv, tmp_path, skp, stoken, name="alice", error_cb=ecb)
        req = svc.requests[-1]
        assert req["sub"] == accs["AUTH"][1]  # the request is about the callout account
        assert req["nats"]["connect_opts"]["jwt"] == stoken
        assert req["nats"]["client_info"]["user"] == jwt.public_key(skp)
        peer = await _op_connect(srv, tmp_path, *op.user(accs["A"][0]))  # an ordinary user of A
        sub = await peer.subscribe("a.x")
        await peer.flush()
        await alice.publish("a.x", b"hi")
        await alice.publish("b.x", b"denied")
        await alice.flush()
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"hi"
        await asyncio.sleep(0.2)
        assert any("permissions violation for publish to \"b.x\"" in e.lower() for e in errs), errs
        # carol stays in the callout account, where she may not publish on the callout subject
        cerrs = []

        async def cecb(e):
            cerrs.append(str(e))
        carol = await _op_connect(srv, tmp_path, skp, stoken, name="carol", error_cb=cecb)
        await carol.publish("$SYS.REQ.USER.AUTH", b"x")
        await carol.flush()
        await asyncio.sleep(0.2)
        assert any("$sys.req.user.auth" in e.lower() for e in cerrs), cerrs
        # refusals: an account not allowed, an unknown response signer, an error answer
        for user in ("mallory", "forger", "nobody"):
            assert "authorization violation" in (await _op_refused(srv, tmp_path, skp, stoken, user)).lower()
        if not GO:
            from tests.helpers import log_text
            text = log_text(srv)
            assert f'account "{accs["B"][1]}" not permitted as valid account option for auth callout for ' \
                   f'account "{accs["AUTH"][1]}"'.lower() in text.lower()
            assert "Auth callout signing key is unknown" in text
            assert "Auth callout service returned an error: unknown user" in text
        for nc in (alice, carol, peer):
            await nc.close()
        await svc.nc.close()


async def test_operator_callout_auth_users_bypass_and_xkey(tmp_path):
    seed = new_curve_seed()
    op, accs, svc_kp = _operator_setup(xkey=curve_public_key(seed))
    async with serve_config(op.config()) as srv:
        svc = await _op_service(srv, tmp_path, op, svc_kp, _op_decide(accs), xkey_seed=seed)
        assert svc.requests == []  # the service itself (an auth user) was not called out
        skp, stoken = _sentinel(op)
        alice = await _op_connect(srv, tmp_path, skp, stoken, name="alice")
        assert svc.headers[-1].get("Nats-Server-Xkey", "").startswith("X")
        await alice.close()
        # users of accounts without an authorization section are not called out
        n = len(svc.requests)
        nc = await _op_connect(srv, tmp_path, *op.user(accs["B"][0]))
        await nc.close()
        assert len(svc.requests) == n
        await svc.nc.close()


def test_operator_authorization_claim_validation():
    from rillet.server.operator_claims import validate_account_claims
    ok = {"nats": {"type": "account", "authorization": {"auth_users": [jwt.public_key(jwt.new_keypair("U"))],
                                                         "allowed_accounts": ["*"]}}}
    assert validate_account_claims(ok) == []
    bad = {"nats": {"type": "account", "authorization": {"allowed_accounts": ["nope"], "xkey": "Xbad"}}}
    errs = validate_account_claims(bad)
    assert "External authorization cannot have accounts without users specified" in errs
    assert 'Account "nope" is not a valid account public key' in errs
    assert 'XKey "Xbad" is not a valid public xkey' in errs


async def test_operator_callout_users_follow_account_updates(tmp_path):
    """Callout users have no JWT of their own: the account's default permissions (subscriptions they no longer
    allow are removed) and revocations of their user key apply to them."""
    from tests.test_operator import _sys_client
    op, accs, svc_kp = _operator_setup()
    auth_kp, auth_pub = accs["AUTH"]
    authz = {"auth_users": [jwt.public_key(svc_kp)], "allowed_accounts": [accs["A"][1]]}
    async with serve_config(op.config()) as srv:
        svc = await _op_service(srv, tmp_path, op, svc_kp, _op_decide(accs))
        skp, stoken = _sentinel(op)
        errs = []

        async def ecb(e):
            errs.append(str(e))
        closed = asyncio.Event()

        async def ccb():
            closed.set()
        carol = await _op_connect(srv, tmp_path, skp, stoken, name="carol", error_cb=ecb, closed_cb=ccb)
        carol_key = svc.requests[-1]["nats"]["user_nkey"]
        news = await carol.subscribe("news.x")
        await carol.flush()
        sysc = await _sys_client(op, srv, tmp_path)

        async def update(iat, **n):
            _, _, tok = op.account("AUTH", kp=auth_kp, iat=iat, authorization=authz, **n)
            r = await sysc.request(f"$SYS.REQ.ACCOUNT.{auth_pub}.CLAIMS.UPDATE", tok.encode(), timeout=2)
            assert json.loads(r.data)["data"]["message"] == "jwt updated"
        now = int(time.time())
        await update(now + 1, default_permissions={"sub": {"deny": ["news.>"]}})
        await asyncio.sleep(0.2)
        assert any(f'permissions violation for subscription to "news.x" (sid "{news._id}")' in e.lower()
                   for e in errs), errs
        assert carol.is_connected
        await update(now + 2, revocations={carol_key: now + 60})
        await asyncio.wait_for(closed.wait(), 2)
        assert "user authentication revoked" in str(carol.last_error).lower()
        await sysc.close()
        await svc.nc.close()
