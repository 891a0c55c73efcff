"""The URL account resolver (``resolver: URL(...)``, and the operator JWT's ``account_server_url``), side by side
with nats-server: the same account server (an aiohttp app here) and the same clients against both."""
import asyncio
import json
import os
import tempfile

import nats
import pytest
from aiohttp import web

from rillet import jwt as J
from tests.helpers import ServerProcess, free_port, server_command
from tests.test_operator import Operator, creds
from test_cluster_leaf import pki  # noqa: F401 (a fixture)

KINDS = ["rillet", "nats-server"]


class AccountServer:
    """A stand-in for nats-account-server: GET <base><account public key> answers the account's JWT."""

    def __init__(self, ssl_context=None) -> None:
        self.ssl = ssl_context
        self.jwts: dict[str, str] = {}
        self.gets: list[str] = []
        self.port = free_port()
        self.delay = 0.0

    async def _get(self, request: web.Request) -> web.Response:
        pub = request.match_info.get("pub", "")
        self.gets.append(pub)
        if self.delay:
            await asyncio.sleep(self.delay)
        if not pub:
            return web.Response(text="")  # (the servers check at start that someone is home)
        token = self.jwts.get(pub)
        if token is None:
            return web.Response(status=404, text="no such account")
        return web.Response(text=token, content_type="application/jwt")

    async def __aenter__(self) -> "AccountServer":
        app = web.Application()
        app.router.add_get("/jwt/v1/accounts/", self._get)
        app.router.add_get("/jwt/v1/accounts/{pub}", self._get)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=self.ssl).start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl else 'http'}://127.0.0.1:{self.port}/jwt/v1/accounts/"


def _start(kind: str, text: str, tmp_path) -> ServerProcess:
    fd, path = tempfile.mkstemp(suffix=".conf", dir=str(tmp_path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    cmd = ["nats-server"] if kind == "nats-server" else server_command()
    return ServerProcess("-c", path, command=cmd)


async def _ready(p: ServerProcess) -> ServerProcess:
    await asyncio.get_running_loop().run_in_executor(None, p.wait_ready)
    return p


def _config(op: Operator, resolver: str) -> str:
    return op.config(resolver=resolver, preload=False)


@pytest.mark.parametrize("kind", KINDS)
async def test_accounts_are_fetched_from_the_url(kind, tmp_path):
    """A client's account, and an account it imports a service from, are fetched on its CONNECT; a client of
    an account the account server does not know is refused; updates reach loaded accounts."""
    op = Operator()
    _, spub, _ = op.account("SVC", exports=[{"name": "svc", "subject": "svc.>", "type": "service"}])
    akp, apub, _ = op.account("A", imports=[{"name": "svc", "subject": "svc.>", "account": spub,
                                             "type": "service"}])
    skp = op.accounts["SVC"][0]
    async with AccountServer() as acs:
        for _kp, pub, token in op.accounts.values():
            acs.jwts[pub] = token
        p = await _ready(_start(kind, _config(op, f'resolver: URL("{acs.url}")'), tmp_path))
        try:
            url = f"nats://127.0.0.1:{p.port}"
            assert "" in acs.gets  # the start-up check
            ukp, utok = Operator.user(akp)
            nc = await nats.connect(url, user_credentials=creds(tmp_path, ukp, utok), allow_reconnect=False)
            assert apub in acs.gets
            skp_u, stok = Operator.user(skp, name="svc")
            sc = await nats.connect(url, user_credentials=creds(tmp_path, skp_u, stok, "svc"),
                                    allow_reconnect=False)

            async def answer(m):
                await m.respond(b"pong:" + m.data)
            await sc.subscribe("svc.>", cb=answer)
            await sc.flush()
            # the import of the fetched exporter works (nats-server may wire it a moment after the exporter's
            # fetch: "no responders" once in four runs, so asked again for up to 5 s)
            deadline = asyncio.get_running_loop().time() + 5
            while True:
                try:
                    r = await nc.request("svc.ping", b"x", timeout=3)
                    break
                except nats.errors.NoRespondersError:
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            assert r.data == b"pong:x"
            # an account the account server does not have: refused
            xkp = J.new_keypair("A")
            ukp2, utok2 = Operator.user(xkp)
            errs = []

            async def err_cb(e):
                errs.append(str(e))
            with pytest.raises(Exception):
                bad = await nats.connect(url, user_credentials=creds(tmp_path, ukp2, utok2, "x"),
                                         allow_reconnect=False, max_reconnect_attempts=0, error_cb=err_cb)
                await bad.close()
            assert any("authorization violation" in e.lower() for e in errs), errs
            assert J.public_key(xkp) in acs.gets
            # a claims update for a loaded account applies (the memory resolver's rule): the import goes
            _, _, tok = op.account("A", kp=akp)
            sys_kp = op.sys[0]
            yk, ytok = Operator.user(sys_kp, name="sys")
            sysc = await nats.connect(url, user_credentials=creds(tmp_path, yk, ytok, "sys"), allow_reconnect=False)
            r = await sysc.request(f"$SYS.REQ.ACCOUNT.{apub}.CLAIMS.UPDATE", tok.encode(), timeout=3)
            assert json.loads(r.data)["data"]["message"] == "jwt updated"
            with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
                await nc.request("svc.ping", b"x", timeout=1)
            for c in (nc, sc, sysc):
                await c.close()
        finally:
            p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_slow_account_server_holds_only_the_connecting_client(kind, tmp_path):
    """While one client's account is being fetched (slowly), a client of a loaded account is served."""
    if kind == "nats-server":
        pass  # (nats-server blocks only the connecting client's goroutine: the same observable result)
    op = Operator()
    akp, apub, _ = op.account("A")
    bkp, bpub, _ = op.account("B")
    async with AccountServer() as acs:
        for _kp, pub, token in op.accounts.values():
            acs.jwts[pub] = token
        p = await _ready(_start(kind, _config(op, f'resolver: URL("{acs.url}")'), tmp_path))
        try:
            url = f"nats://127.0.0.1:{p.port}"
            ukp, utok = Operator.user(akp)
            nc = await nats.connect(url, user_credentials=creds(tmp_path, ukp, utok), allow_reconnect=False)
            acs.delay = 1.0
            vkp, vtok = Operator.user(bkp, name="b")
            slow = asyncio.create_task(nats.connect(url, user_credentials=creds(tmp_path, vkp, vtok, "b"),
                                                    allow_reconnect=False, connect_timeout=5))
            await asyncio.sleep(0.2)
            t0 = asyncio.get_running_loop().time()
            await nc.flush(timeout=2)  # answered at once although B's fetch is under way
            assert asyncio.get_running_loop().time() - t0 < 0.5
            bc = await slow
            assert bpub in acs.gets
            await bc.close()
            await nc.close()
        finally:
            p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_operator_account_server_url_is_the_resolver(kind, tmp_path):
    """No resolver configured: the operator JWT's account_server_url (+ /accounts) is used."""
    op = Operator()
    akp, apub, _ = op.account("A")
    async with AccountServer() as acs:
        for _kp, pub, token in op.accounts.values():
            acs.jwts[pub] = token
        op.jwt_token = op.jwt(account_server_url=f"http://127.0.0.1:{acs.port}/jwt/v1")
        text = "\n".join(["listen: 127.0.0.1:-1", f"operator: {op.jwt_token}", f"system_account: {op.sys[1]}"])
        p = await _ready(_start(kind, text + "\n", tmp_path))
        try:
            ukp, utok = Operator.user(akp)
            nc = await nats.connect(f"nats://127.0.0.1:{p.port}", user_credentials=creds(tmp_path, ukp, utok),
                                    allow_reconnect=False)
            assert apub in acs.gets
            await nc.close()
        finally:
            p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_start_fails_when_the_account_server_is_down(kind, tmp_path):
    op = Operator()
    op.account("A")
    url = f"http://127.0.0.1:{free_port()}/jwt/v1/accounts/"
    p = _start(kind, _config(op, f'resolver: URL("{url}")'), tmp_path)
    try:
        await asyncio.get_running_loop().run_in_executor(None, p.proc.wait, 15)
        assert p.proc.returncode != 0
        assert f'could not fetch <"{url}">' in p.output, p.output
    finally:
        p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_preload_is_refused_with_a_url_resolver(kind, tmp_path):
    op = Operator()
    op.account("A")
    async with AccountServer() as acs:
        p = _start(kind, op.config(resolver=f'resolver: URL("{acs.url}")', preload=True), tmp_path)
        try:
            await asyncio.get_running_loop().run_in_executor(None, p.proc.wait, 15)
            assert p.proc.returncode != 0
            assert "resolver preloads only available for writeable resolver types MEM/DIR/CACHE_DIR" in p.output, \
                p.output
        finally:
            p.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_resolver_tls(kind, tmp_path, pki):  # noqa: F811
    """An https account server: resolver_tls { ca_file } trusts it; a CA that did not sign it: no start."""
    import ssl
    cert, key = pki["ca_server"]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    op = Operator()
    akp, apub, _ = op.account("A")
    async with AccountServer(ctx) as acs:
        for _kp, pub, token in op.accounts.values():
            acs.jwts[pub] = token
        good = _config(op, f'resolver: URL("{acs.url}")') + f'resolver_tls {{ ca_file: "{pki["ca"]}" }}\n'
        p = await _ready(_start(kind, good, tmp_path))
        try:
            ukp, utok = Operator.user(akp)
            nc = await nats.connect(f"nats://127.0.0.1:{p.port}", user_credentials=creds(tmp_path, ukp, utok),
                                    allow_reconnect=False)
            assert apub in acs.gets
            await nc.close()
        finally:
            p.stop()
        bad = _config(op, f'resolver: URL("{acs.url}")') + f'resolver_tls {{ ca_file: "{pki["other"]}" }}\n'
        p = _start(kind, bad, tmp_path)
        try:
            await asyncio.get_running_loop().run_in_executor(None, p.proc.wait, 15)
            assert p.proc.returncode != 0
            assert f'could not fetch <"{acs.url}">' in p.output, p.output
        finally:
            p.stop()
