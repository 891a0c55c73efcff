"""Trusted proxies (nats-server 2.12 ``proxies { trusted: [{key}] }``, ``proxy_required`` on users, on the single
user/token of ``authorization {}`` and in user JWTs), side by side with nats-server: a proxy signs the INFO nonce
with its nkey and sends the signature as the CONNECT's ``proxy_sig``."""
import asyncio
import re
import base64
import json
import os
import signal
import tempfile
import urllib.request

import pytest

from rillet import nkey
from tests.helpers import RawClient, ServerProcess, free_port, server_command

KINDS = ["rillet", "nats-server"]
PROXY = nkey.create("user")
OTHER = nkey.create("user")


def _start(kind: str, text: str, tmp_path) -> tuple[ServerProcess, str]:
    fd, path = tempfile.mkstemp(suffix=".conf", dir=str(tmp_path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return ServerProcess("-c", path, command=["nats-server"] if kind == "nats-server" else server_command()), path


async def _ready(p: ServerProcess) -> ServerProcess:
    await asyncio.get_running_loop().run_in_executor(None, p.wait_ready)
    return p


async def _connect(port: int, signer=None, **fields) -> tuple[RawClient, bytes]:
    """A raw client; ``signer`` (a proxy's key pair) signs the nonce into proxy_sig. The server's first answer."""
    c = await RawClient.open(port, connect=False)
    d = {"verbose": False, "pedantic": False, "protocol": 1, "lang": "test", **fields}
    if signer is not None:
        sig = signer.sign(c.info["nonce"].encode())
        d["proxy_sig"] = base64.urlsafe_b64encode(sig).decode().rstrip("=")
    c.send(f"CONNECT {json.dumps(d)}\r\nPING\r\n")
    try:
        got = await c.read_until(b"\r\n", timeout=5)
    except (asyncio.TimeoutError, AssertionError, ConnectionError):
        got = b""
    return c, got


def _json(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def _conf(mport: int, extra: str, keys=(PROXY,)) -> str:
    trusted = ", ".join(f'{{key: "{k.public_key()}"}}' for k in keys)
    return f"listen: 127.0.0.1:-1\nhttp: 127.0.0.1:{mport}\nproxies {{ trusted: [{trusted}] }}\n{extra}\n"


@pytest.mark.parametrize("kind", KINDS)
async def test_proxy_required_users(kind, tmp_path):
    mport = free_port()
    extra = ("authorization { users: [ {user: viaproxy, password: pw, proxy_required: true}, "
             "{user: direct, password: pw} ] }")
    p = await _ready(_start(kind, _conf(mport, extra), tmp_path)[0])
    try:
        assert _json(mport, "/varz")["proxies"] == {"trusted": [{"key": PROXY.public_key()}]}
        ok, got = await _connect(p.port, PROXY, user="viaproxy", **{"pass": "pw"})
        assert got.startswith(b"PONG"), got
        d, got = await _connect(p.port, None, user="direct", **{"pass": "pw"})
        assert got.startswith(b"PONG"), got  # a user without proxy_required connects directly
        for signer, reason in ((None, "Proxy Required"), (OTHER, "Proxy Not Trusted")):
            c, got = await _connect(p.port, signer, user="viaproxy", **{"pass": "pw"})
            assert got.startswith(b"-ERR 'Authorization Violation'"), got
        # a user that does not need a proxy, through an untrusted one: refused as well
        c, got = await _connect(p.port, OTHER, user="direct", **{"pass": "pw"})
        assert got.startswith(b"-ERR 'Authorization Violation'"), got
        conns = _json(mport, "/connz")["connections"]
        proxied = [x for x in conns if x.get("proxy")]
        assert [x["proxy"] for x in proxied] == [{"key": PROXY.public_key()}], conns
        closed = _json(mport, "/connz?state=closed")["connections"]
        reasons = [x["reason"] for x in closed]
        assert reasons.count("Proxy Required") == 1 and reasons.count("Proxy Not Trusted") == 2, reasons
    finally:
        p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_proxy_required_single_user_and_no_auth(kind, tmp_path):
    mport = free_port()
    p = await _ready(_start(kind, _conf(mport, "authorization { user: a, password: b, proxy_required: true }"),
                            tmp_path)[0])
    try:
        c, got = await _connect(p.port, None, user="a", **{"pass": "b"})
        assert got.startswith(b"-ERR 'Authorization Violation'"), got
        c, got = await _connect(p.port, PROXY, user="a", **{"pass": "b"})
        assert got.startswith(b"PONG"), got
    finally:
        p.stop()
    # no authorization at all: a proxied connection is still checked (and shown), a direct one is plain
    p = await _ready(_start(kind, _conf(mport, ""), tmp_path)[0])
    try:
        c, got = await _connect(p.port, None)
        assert got.startswith(b"PONG"), got
        c, got = await _connect(p.port, PROXY)
        assert got.startswith(b"PONG"), got
        c, got = await _connect(p.port, OTHER)
        assert got.startswith(b"-ERR 'Authorization Violation'"), got
        assert [x.get("proxy") for x in _json(mport, "/connz")["connections"]].count(
            {"key": PROXY.public_key()}) == 1
    finally:
        p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_reload_removing_a_proxy_closes_its_connections(kind, tmp_path):
    mport = free_port()
    p, path = _start(kind, _conf(mport, "", keys=(PROXY, OTHER)), tmp_path)
    await _ready(p)
    try:
        a, got = await _connect(p.port, PROXY)
        assert got.startswith(b"PONG"), got
        b, got = await _connect(p.port, OTHER)
        assert got.startswith(b"PONG"), got
        with open(path, "w") as f:
            f.write(_conf(mport, "", keys=(OTHER,)))
        os.kill(p.pid, signal.SIGHUP)
        got = await a.read_until(b"-ERR 'Authorization Violation'", timeout=10)  # (an INFO may come first)
        await p.await_log(r"proxies trusted keys \[\"" + PROXY.public_key() + r"\"\] were removed")
        b.send("PING\r\n")
        await b.read_until(b"PONG\r\n", timeout=5)  # (the other proxy's connection stays)
        closed = _json(mport, "/connz?state=closed")["connections"]
        assert [x["reason"] for x in closed] == ["Proxy Not Trusted"], closed
    finally:
        p.stop()


@pytest.mark.parametrize("conf,msg", [
    ("proxies: 1", "expected proxies to be a map/struct, got int64"),
    ("proxies { trusted: 1 }", "expected proxies' trusted field to be an array, got int64"),
    ('proxies { trusted: [ {key: "bad"} ] }', 'invalid proxy key "bad"'),
])
@pytest.mark.parametrize("kind", KINDS)
async def test_config_errors(kind, conf, msg, tmp_path):
    p, _ = _start(kind, f"listen: 127.0.0.1:-1\n{conf}\n", tmp_path)
    try:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, p.proc.wait, 15)
        assert p.proc.returncode != 0
        # (the output is read by a thread: it may still be on its way when the process has ended)
        await loop.run_in_executor(None, lambda: p.wait_log(re.escape(msg), 10))
    finally:
        p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_proxy_required_in_a_user_jwt(kind, tmp_path):
    from tests.test_operator import Operator
    op = Operator()
    akp, _, _ = op.account("A")
    ukp, utok = Operator.user(akp, proxy_required=True)
    mport = free_port()
    text = op.config() + f"http: 127.0.0.1:{mport}\nproxies {{ trusted: [{{key: \"{PROXY.public_key()}\"}}] }}\n"
    text = text.replace("listen: 127.0.0.1:-1\n", "", 1)
    p = await _ready(_start(kind, "listen: 127.0.0.1:-1\n" + text, tmp_path)[0])
    try:
        for signer, want in ((None, b"-ERR 'Authorization Violation'"), (PROXY, b"PONG")):
            c = await RawClient.open(p.port, connect=False)
            nonce = c.info["nonce"].encode()
            d = {"verbose": False, "pedantic": False, "protocol": 1, "jwt": utok,
                 "sig": base64.urlsafe_b64encode(nkey.from_seed(ukp.seed).sign(nonce)).decode().rstrip("=")}
            if signer is not None:
                d["proxy_sig"] = base64.urlsafe_b64encode(signer.sign(nonce)).decode().rstrip("=")
            c.send(f"CONNECT {json.dumps(d)}\r\nPING\r\n")
            got = await c.read_until(b"\r\n", timeout=5)
            assert got.startswith(want), (signer, got)
        closed = _json(mport, "/connz?state=closed")["connections"]
        assert [x["reason"] for x in closed] == ["Proxy Required"], closed
    finally:
        p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_leafnode_proxy_required(kind, tmp_path):
    """A leaf connection's CONNECT: leafnodes authorization users with proxy_required, as for clients."""
    lport = free_port()
    extra = (f"leafnodes {{ listen: 127.0.0.1:{lport}, authorization {{ users: [ "
             "{user: viaproxy, password: pw, proxy_required: true}, {user: direct, password: pw} ] } }")
    p = await _ready(_start(kind, _conf(free_port(), extra), tmp_path)[0])
    try:
        for user, signer, want in (("viaproxy", PROXY, b"PONG"), ("viaproxy", None, b"-ERR"),
                                   ("direct", None, b"PONG"), ("direct", OTHER, b"-ERR")):
            c = await RawClient.open(lport, connect=False)
            d = {"user": user, "pass": "pw", "name": f"leaf-{user}", "headers": True}
            if signer is not None:
                sig = signer.sign(c.info["nonce"].encode())
                d["proxy_sig"] = base64.urlsafe_b64encode(sig).decode().rstrip("=")
            c.send(f"CONNECT {json.dumps(d)}\r\nPING\r\n")
            while True:  # (INFO and LS+ lines may come first)
                line = await c.read_until(b"\r\n", timeout=5)
                if line.startswith((b"PONG", b"-ERR")):
                    break
            assert line.startswith(want), (user, signer, line)
    finally:
        p.stop()
