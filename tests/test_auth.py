"""Authentication, authorization and per-connection limits, as nats-server answers them.

Every expected answer was checked against the Go nats-server (RILLET_TEST_TARGET=nats-server).
"""
from __future__ import annotations

import asyncio
import base64
import os
import time

import bcrypt
import nats
import nkeys
import pytest

from helpers import Closed, Msg, RawClient, parse_stream, serve
from rillet.config.options import Permission, Permissions, ResponsePermission, User

AUTH_VIOLATION = b"-ERR 'Authorization Violation'\r\n"


async def connect_fails(url: str, **kw) -> BaseException:
    """nats-py cannot connect with these options; return what it raised."""
    errors: list[BaseException] = []

    async def error_cb(e):
        errors.append(e)
    with pytest.raises(Exception) as ei:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2,
                                error_cb=error_cb, **kw)
        await nc.close()
    return ei.value


def user(name: str, password: str, *, pub_allow=None, pub_deny=None, sub_allow=None, sub_deny=None,
         responses: ResponsePermission | None = None) -> User:
    perms = None
    if any(x is not None for x in (pub_allow, pub_deny, sub_allow, sub_deny, responses)):
        perms = Permissions(
            publish=Permission(allow=pub_allow, deny=pub_deny) if pub_allow is not None or pub_deny is not None
            else None,
            subscribe=Permission(allow=sub_allow, deny=sub_deny) if sub_allow is not None or sub_deny is not None
            else None,
            response=responses)
    return User(username=name, password=password, permissions=perms)


# ---------------------------------------------------------------------------------------------------
# Tokens


async def test_token_auth():
    async with serve(authorization="s3cr3t") as s:
        c = await RawClient.open(s, connect=False)
        assert c.info["auth_required"] is True
        assert "nonce" not in c.info
        c.connect(auth_token="s3cr3t")
        assert await c.ping() == b""
        await c.close()

        nc = await nats.connect(s.client_url, token="s3cr3t")
        sub = await nc.subscribe("t")
        await nc.publish("t", b"ok")
        assert (await sub.next_msg(timeout=2)).data == b"ok"
        await nc.close()


@pytest.mark.parametrize("connect", [{"auth_token": "wrong"}, {}, {"user": "s3cr3t"},
                                     {"user": "x", "pass": "s3cr3t"}])
async def test_token_auth_refused(connect):
    async with serve(authorization="s3cr3t") as s:
        c = await RawClient.open(s, **connect)
        c.send(b"PING\r\n")
        assert await c.read_until_closed() == AUTH_VIOLATION


async def test_token_auth_nats_py_refused():
    async with serve(authorization="s3cr3t") as s:
        e = await connect_fails(s.client_url, token="nope")
        assert "authorization violation" in str(e).lower() or isinstance(e, nats.errors.Error)


# ---------------------------------------------------------------------------------------------------
# User and password


async def test_user_password():
    async with serve(username="alice", password="wonder") as s:
        nc = await nats.connect(s.client_url, user="alice", password="wonder")
        assert nc.is_connected
        await nc.close()
        nc = await nats.connect(f"nats://alice:wonder@127.0.0.1:{s.port}")
        assert nc.is_connected
        await nc.close()


@pytest.mark.parametrize("creds", [{"user": "alice", "pass": "wrong"}, {"user": "bob", "pass": "wonder"},
                                   {"user": "alice"}, {"auth_token": "wonder"}])
async def test_user_password_refused(creds):
    async with serve(username="alice", password="wonder") as s:
        c = await RawClient.open(s, **creds)
        c.send(b"PING\r\n")
        assert await c.read_until_closed() == AUTH_VIOLATION


async def test_bcrypt_password():
    hashed = bcrypt.hashpw(b"p4ss word", bcrypt.gensalt(rounds=4)).decode()
    async with serve(users=[User(username="carol", password=hashed)]) as s:
        nc = await nats.connect(s.client_url, user="carol", password="p4ss word")
        assert nc.is_connected
        await nc.close()
        # the hash itself is not a password
        c = await RawClient.open(s, user="carol", **{"pass": hashed})
        c.send(b"PING\r\n")
        assert await c.read_until_closed() == AUTH_VIOLATION
        c = await RawClient.open(s, user="carol", **{"pass": "p4ss"})
        c.send(b"PING\r\n")
        assert await c.read_until_closed() == AUTH_VIOLATION


async def test_users_list():
    async with serve(users=[User(username="a", password="1"), User(username="b", password="2")]) as s:
        for name, pw in (("a", "1"), ("b", "2")):
            c = await RawClient.open(s, user=name, **{"pass": pw})
            assert await c.ping() == b""
            await c.close()
        c = await RawClient.open(s, user="a", **{"pass": "2"})
        c.send(b"PING\r\n")
        assert await c.read_until_closed() == AUTH_VIOLATION


@pytest.mark.parametrize("op", [b"PING\r\n", b"SUB foo 1\r\n", b"PUB foo 2\r\nhi\r\n", b"UNSUB 1\r\n"])
async def test_operation_before_connect_when_auth_required(op):
    async with serve(authorization="tok") as s:
        c = await RawClient.open(s, connect=False)
        c.send(op)
        assert await c.read_until_closed() == AUTH_VIOLATION


async def test_auth_timeout():
    async with serve(authorization="tok", auth_timeout=0.3) as s:
        c = await RawClient.open(s, connect=False)
        t0 = time.monotonic()
        assert await c.read_until_closed(timeout=3) == b"-ERR 'Authentication Timeout'\r\n"
        assert 0.2 < time.monotonic() - t0 < 2.0
        # a client that authenticates in time is not affected
        ok = await RawClient.open(s, auth_token="tok")
        await asyncio.sleep(0.5)
        assert await ok.ping() == b""
        await ok.close()


async def test_no_auth_timeout_without_auth():
    async with serve() as s:
        c = await RawClient.open(s, connect=False)
        # nothing is required, so the connection is not timed out for missing CONNECT
        assert await c.read_for(0.3) == b""
        c.send(b"PING\r\n")
        assert await c.readline() == b"PONG"
        await c.close()


# ---------------------------------------------------------------------------------------------------
# Permissions


PERM_USERS = [
    user("a", "pa", pub_allow=["foo.>", "_INBOX.>"], pub_deny=["foo.bar"],
         sub_allow=["foo.>", "q.> grp"], sub_deny=["foo.secret"]),
    user("s", "ps", sub_allow=["foo.*"], sub_deny=["foo.x"]),
    user("d", "pd", sub_deny=["work.* bad"]),
    user("free", "pf"),
]


@pytest.fixture
async def perm_srv():
    async with serve(users=PERM_USERS) as s:
        yield s


async def login(srv, name: str, **kw) -> RawClient:
    pw = {u.username: u.password for u in PERM_USERS}[name]
    c = await RawClient.open(srv, user=name, **{"pass": pw}, **kw)
    assert await c.ping() == b""
    return c


async def test_publish_permissions(perm_srv):
    watcher = await login(perm_srv, "free")
    watcher.sub(">", 1)
    assert await watcher.ping() == b""
    a = await login(perm_srv, "a")
    a.pub("foo.bar", "denied")
    a.pub("baz", "not allowed")
    a.pub("foo.baz", "fine")
    assert await a.ping() == (b"-ERR 'Permissions Violation for Publish to \"foo.bar\"'\r\n"
                              b"-ERR 'Permissions Violation for Publish to \"baz\"'\r\n")
    # the connection stays open and only the allowed message was delivered
    assert await a.is_open()
    items = parse_stream(await watcher.ping())
    assert [(m.subject, m.payload) for m in items] == [("foo.baz", b"fine")]
    await a.close()
    await watcher.close()


async def test_publish_permission_violation_nats_py(perm_srv):
    errors: list[Exception] = []

    async def error_cb(e):
        errors.append(e)
    nc = await nats.connect(perm_srv.client_url, user="a", password="pa", error_cb=error_cb)
    await nc.publish("foo.bar", b"x")
    await nc.flush()
    for _ in range(50):
        if errors:
            break
        await asyncio.sleep(0.02)
    assert any('permissions violation for publish to "foo.bar"' in str(e).lower() for e in errors), errors
    assert nc.is_connected
    await nc.close()


async def test_subscribe_permissions(perm_srv):
    a = await login(perm_srv, "a")
    a.send(b"SUB foo.secret 7\r\nSUB bar 8\r\nSUB foo.ok 9\r\n")
    assert await a.ping() == (b"-ERR 'Permissions Violation for Subscription to \"foo.secret\"'\r\n"
                              b"-ERR 'Permissions Violation for Subscription to \"bar\"'\r\n")
    # the allowed subscription works, the denied ones do not exist
    free = await login(perm_srv, "free")
    free.send(b"PUB foo.secret 1\r\nx\r\nPUB bar 1\r\nx\r\nPUB foo.ok 1\r\ny\r\n")
    assert await free.ping() == b""
    assert await a.ping() == b"MSG foo.ok 9 1\r\ny\r\n"
    await a.close()
    await free.close()


async def test_queue_permissions_allow(perm_srv):
    a = await login(perm_srv, "a")
    a.send(b"SUB q.x grp 1\r\nSUB q.x other 2\r\nSUB q.x 3\r\nSUB q.y.z grp 4\r\n")
    assert await a.ping() == (
        b"-ERR 'Permissions Violation for Subscription to \"q.x\" using queue \"other\"'\r\n"
        b"-ERR 'Permissions Violation for Subscription to \"q.x\"'\r\n")
    free = await login(perm_srv, "free")
    free.send(b"PUB q.x 1\r\n1\r\nPUB q.y.z 1\r\n2\r\n")
    assert await free.ping() == b""
    items = parse_stream(await a.ping())
    assert sorted((m.subject, m.sid) for m in items) == [("q.x", "1"), ("q.y.z", "4")]
    await a.close()
    await free.close()


async def test_queue_permissions_deny(perm_srv):
    d = await login(perm_srv, "d")
    d.send(b"SUB work.a bad 1\r\nSUB work.a good 2\r\nSUB work.a 3\r\n")
    assert await d.ping() == (
        b"-ERR 'Permissions Violation for Subscription to \"work.a\" using queue \"bad\"'\r\n")
    await d.close()


async def test_wildcard_subscriber_does_not_get_denied_subject(perm_srv):
    s = await login(perm_srv, "s")
    s.sub("foo.*", 1)
    assert await s.ping() == b""
    free = await login(perm_srv, "free")
    for subj in ("foo.x", "foo.y", "foo.x", "foo.z"):
        free.pub(subj, subj)
    assert await free.ping() == b""
    items = parse_stream(await s.ping())
    assert [m.subject for m in items] == ["foo.y", "foo.z"]
    await s.close()
    await free.close()


async def test_denied_literal_subscription_is_refused(perm_srv):
    s = await login(perm_srv, "s")
    s.sub("foo.x", 1)
    assert await s.ping() == b"-ERR 'Permissions Violation for Subscription to \"foo.x\"'\r\n"
    assert await s.is_open()
    await s.close()


async def test_permissions_nats_py_subscriber(perm_srv):
    nc = await nats.connect(perm_srv.client_url, user="s", password="ps")
    sub = await nc.subscribe("foo.*")
    pub = await nats.connect(perm_srv.client_url, user="free", password="pf")
    await pub.publish("foo.x", b"no")
    await pub.publish("foo.y", b"yes")
    await pub.flush()
    m = await sub.next_msg(timeout=2)
    assert (m.subject, m.data) == ("foo.y", b"yes")
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(timeout=0.2)
    await nc.close()
    await pub.close()


# ---------------------------------------------------------------------------------------------------
# allow_responses


async def _responder_setup(s, responder_pw: str = "pr"):
    responder = await RawClient.open(s, user="r", **{"pass": responder_pw})
    responder.sub("req", 1)
    assert await responder.ping() == b""
    requester = await RawClient.open(s, user="free", **{"pass": "pf"})
    requester.sub("rep", 1)
    requester.pub("req", "question", reply="rep")
    assert await requester.ping() == b""
    m = await responder.read_msg()
    assert (m.subject, m.reply, m.payload) == ("req", "rep", b"question")
    return responder, requester


async def test_allow_responses_once():
    users = [user("r", "pr", sub_allow=["req"], responses=ResponsePermission()), user("free", "pf")]
    async with serve(users=users) as s:
        responder, requester = await _responder_setup(s)
        responder.pub("rep", "one")
        responder.pub("rep", "two")
        responder.pub("other", "x")
        assert await responder.ping() == (b"-ERR 'Permissions Violation for Publish to \"rep\"'\r\n"
                                          b"-ERR 'Permissions Violation for Publish to \"other\"'\r\n")
        assert await requester.ping() == b"MSG rep 1 3\r\none\r\n"
        await responder.close()
        await requester.close()


async def test_allow_responses_max():
    users = [user("r", "pr", sub_allow=["req"], responses=ResponsePermission(max_msgs=2)), user("free", "pf")]
    async with serve(users=users) as s:
        responder, requester = await _responder_setup(s)
        for p in ("one", "two", "three"):
            responder.pub("rep", p)
        assert await responder.ping() == b"-ERR 'Permissions Violation for Publish to \"rep\"'\r\n"
        items = parse_stream(await requester.ping())
        assert [m.payload for m in items] == [b"one", b"two"]
        await responder.close()
        await requester.close()


async def test_allow_responses_expires():
    users = [user("r", "pr", sub_allow=["req"], responses=ResponsePermission(max_msgs=10, expires=0.2)),
             user("free", "pf")]
    async with serve(users=users) as s:
        responder, requester = await _responder_setup(s)
        responder.pub("rep", "in time")
        assert await responder.ping() == b""
        await asyncio.sleep(0.4)
        responder.pub("rep", "too late")
        assert await responder.ping() == b"-ERR 'Permissions Violation for Publish to \"rep\"'\r\n"
        assert await requester.ping() == b"MSG rep 1 7\r\nin time\r\n"
        await responder.close()
        await requester.close()


async def test_allow_responses_nats_py():
    users = [user("r", "pr", sub_allow=["svc"], responses=ResponsePermission()), user("free", "pf")]
    async with serve(users=users) as s:
        svc = await nats.connect(s.client_url, user="r", password="pr")

        async def handler(msg):
            await msg.respond(b"answer")
        await svc.subscribe("svc", cb=handler)
        await svc.flush()
        client = await nats.connect(s.client_url, user="free", password="pf")
        for _ in range(3):
            resp = await client.request("svc", b"q", timeout=2)
            assert resp.data == b"answer"
        await svc.close()
        await client.close()


# ---------------------------------------------------------------------------------------------------
# no_auth_user


NO_AUTH_USERS = [user("guest", "pg", pub_deny=["admin.>"]), user("admin", "padmin")]


async def test_no_auth_user():
    async with serve(users=NO_AUTH_USERS, no_auth_user="guest") as s:
        c = await RawClient.open(s, connect=False)
        # nats-server does not ask for credentials when a no_auth_user exists
        assert "auth_required" not in c.info
        c.connect()
        assert await c.ping() == b""
        # ... and the connection has the guest's permissions
        c.pub("admin.x", "no")
        c.pub("public", "yes")
        assert await c.ping() == b"-ERR 'Permissions Violation for Publish to \"admin.x\"'\r\n"
        await c.close()

        nc = await nats.connect(s.client_url)
        sub = await nc.subscribe("public")
        await nc.publish("public", b"hello")
        assert (await sub.next_msg(timeout=2)).data == b"hello"
        await nc.close()

        admin = await RawClient.open(s, user="admin", **{"pass": "padmin"})
        admin.pub("admin.x", "ok")
        assert await admin.ping() == b""
        await admin.close()


async def test_no_auth_user_wrong_credentials_refused():
    async with serve(users=NO_AUTH_USERS, no_auth_user="guest") as s:
        c = await RawClient.open(s, user="admin", **{"pass": "wrong"})
        c.send(b"PING\r\n")
        assert await c.read_until_closed() == AUTH_VIOLATION


async def test_no_auth_user_operation_before_connect():
    # with a no_auth_user, operations may come first (telnet demos): the connection is that user
    async with serve(users=NO_AUTH_USERS, no_auth_user="guest") as s:
        c = await RawClient.open(s, connect=False)
        c.send(b"PING\r\n")
        assert await c.readline() == b"PONG"
        c.send(b"SUB public 1\r\nPUB public 2\r\nhi\r\nPUB admin.x 2\r\nno\r\nPING\r\n")
        # no CONNECT: the defaults (verbose, pedantic) apply, hence the +OKs
        assert await c.read_until(b"PONG\r\n") == (
            b"+OK\r\n+OK\r\nMSG public 1 2\r\nhi\r\n-ERR 'Permissions Violation for Publish to \"admin.x\"'\r\nPONG\r\n")
        await c.close()


# ---------------------------------------------------------------------------------------------------
# NKeys


def make_user_nkey() -> tuple[bytes, str]:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    kp = nkeys.from_seed(bytearray(seed))
    return seed, kp.public_key.decode()


def sign(seed: bytes, nonce: str, url_safe: bool = True) -> str:
    kp = nkeys.from_seed(bytearray(seed))
    raw = kp.sign(nonce.encode())
    if url_safe:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return base64.b64encode(raw).decode()


@pytest.fixture
def user_nkey():
    return make_user_nkey()


async def test_nkey_info_has_nonce(user_nkey):
    _, public = user_nkey
    async with serve(users=[User(nkey=public)]) as s:
        a = await RawClient.open(s, connect=False)
        b = await RawClient.open(s, connect=False)
        assert a.info["auth_required"] is True
        assert isinstance(a.info["nonce"], str) and len(a.info["nonce"]) >= 11
        assert a.info["nonce"] != b.info["nonce"]
        await a.close()
        await b.close()


@pytest.mark.parametrize("url_safe", [True, False])
async def test_nkey_raw_signature(user_nkey, url_safe):
    seed, public = user_nkey
    async with serve(users=[User(nkey=public)]) as s:
        c = await RawClient.open(s, connect=False)
        c.connect(nkey=public, sig=sign(seed, c.info["nonce"], url_safe))
        assert await c.ping() == b""
        await c.close()


async def test_nkey_nats_py_seed(user_nkey, tmp_path):
    seed, public = user_nkey
    path = tmp_path / "user.nk"
    path.write_bytes(seed)
    async with serve(users=[User(nkey=public)]) as s:
        nc = await nats.connect(s.client_url, nkeys_seed=str(path))
        sub = await nc.subscribe("nk")
        await nc.publish("nk", b"signed")
        assert (await sub.next_msg(timeout=2)).data == b"signed"
        await nc.close()
        nc = await nats.connect(s.client_url, nkeys_seed_str=seed.decode())
        assert nc.is_connected
        await nc.close()


async def test_nkey_bad_signature_refused(user_nkey):
    seed, public = user_nkey
    other_seed, other_public = make_user_nkey()
    async with serve(users=[User(nkey=public)]) as s:
        cases = [
            lambda nonce: {"nkey": public, "sig": sign(other_seed, nonce)},   # someone else's signature
            lambda nonce: {"nkey": public, "sig": sign(seed, "not-the-nonce")},
            lambda nonce: {"nkey": public, "sig": "garbage!!"},
            lambda nonce: {"nkey": public},                                   # no signature
            lambda nonce: {"nkey": other_public, "sig": sign(other_seed, nonce)},  # unknown key
        ]
        for case in cases:
            c = await RawClient.open(s, connect=False)
            c.connect(**case(c.info["nonce"]))
            c.send(b"PING\r\n")
            assert await c.read_until_closed() == AUTH_VIOLATION


async def test_nkey_nats_py_wrong_seed_refused(user_nkey):
    _, public = user_nkey
    other_seed, _ = make_user_nkey()
    async with serve(users=[User(nkey=public)]) as s:
        await connect_fails(s.client_url, nkeys_seed_str=other_seed.decode())


async def test_nkey_and_password_users_together(user_nkey):
    seed, public = user_nkey
    async with serve(users=[User(nkey=public), User(username="pw", password="secret")]) as s:
        c = await RawClient.open(s, connect=False)
        assert "nonce" in c.info
        c.connect(user="pw", **{"pass": "secret"})
        assert await c.ping() == b""
        await c.close()
        c = await RawClient.open(s, connect=False)
        c.connect(nkey=public, sig=sign(seed, c.info["nonce"]))
        assert await c.ping() == b""
        await c.close()


# ---------------------------------------------------------------------------------------------------
# Connection and subscription limits


async def test_max_connections():
    async with serve(max_connections=2) as s:
        a = await RawClient.open(s)
        b = await RawClient.open(s)
        assert await a.ping() == b""
        assert await b.ping() == b""
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        data = await asyncio.wait_for(reader.read(), 3)  # until EOF
        writer.close()
        # nats-server sends its INFO, then the error, then closes
        assert data.startswith(b"INFO {"), data
        assert data.split(b"\r\n", 1)[1] == b"-ERR 'maximum connections exceeded'\r\n"
        # after one leaves, a new connection is accepted
        await a.close()
        await asyncio.sleep(0.1)
        c = await RawClient.open(s)
        assert await c.ping() == b""
        await c.close()
        await b.close()


async def test_max_connections_nats_py():
    async with serve(max_connections=1) as s:
        first = await nats.connect(s.client_url)
        e = await connect_fails(s.client_url)
        assert e is not None
        assert first.is_connected
        await first.close()


async def test_max_subscriptions():
    async with serve(max_subscriptions=2) as s:
        c = await RawClient.open(s)
        c.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB d 4\r\n")
        assert await c.ping() == (b"-ERR 'maximum subscriptions exceeded'\r\n"
                                  b"-ERR 'maximum subscriptions exceeded'\r\n")
        # still open; the first two work, the refused ones do not exist
        c.send(b"PUB a 1\r\n1\r\nPUB b 1\r\n2\r\nPUB c 1\r\n3\r\n")
        items = parse_stream(await c.ping())
        assert [(m.subject, m.sid) for m in items] == [("a", "1"), ("b", "2")]
        # unsubscribing frees a place
        c.send(b"UNSUB 1\r\nSUB c 3\r\nPUB c 1\r\n3\r\n")
        assert await c.ping() == b"MSG c 3 1\r\n3\r\n"
        await c.close()


async def test_max_subscriptions_is_per_connection():
    async with serve(max_subscriptions=1) as s:
        a = await RawClient.open(s)
        b = await RawClient.open(s)
        a.sub("x", 1)
        b.sub("x", 1)
        assert await a.ping() == b""
        assert await b.ping() == b""
        await a.close()
        await b.close()
